"""The cpu backend's native scans, gathers, scatters and ordered reductions
(`runtime/cpu/index_kernels.py`): they run as native kernels (no callback into numpy), match the
reference bit for bit where NumPy's order is sequential, and an index or computed label out of
range raises the numpy backend's own `DataError` with the caller's arrays untouched.
Values on every edge are the sample database's job (tests/opdb); this file pins what is
specific to the native code."""
import re

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from tests.error_lines import error_checker

line_of, check_error = error_checker(__file__)
RNG = np.random.default_rng(3)
X = RNG.standard_normal((6, 7)).astype(np.float32)
X[2, 4] = np.nan
IDX = np.array([3, -1, 0, 3, -7])
TI = RNG.integers(-7, 7, (6, 4))
V5 = RNG.standard_normal((6, 5)).astype(np.float32)
V4 = RNG.standard_normal((6, 4)).astype(np.float32)

# (op, function, arguments): one program per op of the former fallback list (and one_hot of
# computed labels, whose range check also ran through the callback).
PROGRAMS = [
    ("min", lambda t: t.min(axis=1), (X,)),
    ("prod", lambda t: t.prod(axis=0), (X,)),
    ("argmax", lambda t: t.argmax(axis=1), (X,)),
    ("argmin", lambda t: t.t().argmin(), (X,)),
    ("cumsum", lambda t: t.cumsum(0), (X,)),
    ("index_select", lambda t, i: t.index_select(i, axis=1), (X, IDX)),
    ("index_add", lambda t, i, u: t.index_add(i, 1, u), (X, IDX, V5)),
    ("take_along_axis", lambda t, i: t.take_along_axis(i, 1), (X, TI)),
    ("put_along_axis", lambda t, i, u: t.put_along_axis(i, u, 1, "add"), (X, TI, V4)),
    ("one_hot", lambda t, y: F.cross_entropy(t, y % 7), (X, np.arange(6))),
]


def _copies(args):
    return [a.copy() for a in args]


@pytest.mark.parametrize("op,fn,args", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_runs_natively_and_matches_the_reference_bit_for_bit(op, fn, args):
    prog = cc.compile(fn, backend="cpu", sanitize=True).lower(*args)
    assert not prog._exec.fallback_nodes
    src = prog.source
    # a kernel of its own, and no call through the fallback pointer anywhere in the module
    assert re.search(rf'define internal (void|i64) @"?k\d+_{op}"?\(', src), op
    assert not re.search(r'call void %"?fallback"?\(', src)
    got = prog(*_copies(args))
    want = cc.compile(fn, backend="numpy")(*_copies(args))
    assert got.dtype == want.dtype and got.shape == want.shape
    # (cross-entropy's softmax is not in this file's scope: compare within its tolerance)
    if op == "one_hot":
        np.testing.assert_allclose(got, want, rtol=2e-5)
    else:
        np.testing.assert_array_equal(got, want, strict=True)


def test_checked_kernels_return_a_status_and_unchecked_ones_do_not():
    src = cc.compile(lambda t, i: (t.index_select(i, 1), t.cumsum(1)),
                     backend="cpu").lower(X, IDX).source
    assert re.search(r'define internal i64 @"?k\d+_index_select"?\(', src)
    assert re.search(r'define internal void @"?k\d+_cumsum"?\(', src)
    assert re.search(r'define i64 @"?run"?\(', src)


def test_cumsum_and_prod_keep_numpys_sequential_order():
    """Long float32 scans and products, where any reassociation shows in the last bits."""
    x = RNG.uniform(0.9, 1.1, (64, 300)).astype(np.float32)
    for fn in (lambda t: t.cumsum(1), lambda t: t.cumsum(0), lambda t: t.prod(1),
               lambda t: t.prod(0), lambda t: t.t().cumsum(1)):
        got = cc.compile(fn, backend="cpu")(x)
        want = cc.compile(fn, backend="numpy")(x)
        np.testing.assert_array_equal(got, want, strict=True)


def test_repeated_indices_add_in_order_and_the_last_assignment_wins():
    x = np.zeros((2, 3), np.float32)
    i = np.array([[0, 0, 0], [2, 1, 2]])
    u = np.array([[1.0, 1e8, -1e8], [5.0, 6.0, 7.0]], np.float32)
    f = cc.compile(lambda t, k, w: (t.put_along_axis(k, w, 1),
                                    t.put_along_axis(k, w, 1, "add")), backend="cpu")
    assign, added = f(x, i, u)
    np.testing.assert_array_equal(assign, [[-1e8, 0, 0], [0, 6.0, 7.0]])
    # in order: (1 + 1e8) - 1e8 == 0 in float32 (another order would give 1)
    np.testing.assert_array_equal(added, [[0.0, 0, 0], [0, 6.0, 12.0]])


# -- out of range: DataError, same message as the numpy backend, nothing written -------------
def _bad_select(t, i):
    return t.index_select(i, 1)  # <- select


def _bad_add(t, i, u):
    t.add_(1.0)
    return t.index_add_(i, 1, u)  # <- add


def _bad_take(t, i):
    t.scale_(2.0)
    return t.take_along_axis(i - 8, 1)  # <- take


def _bad_put(t, i, u):
    t.add_(1.0)
    return t.put_along_axis_(i, u, 0)  # <- put


def _bad_labels(t, y):
    t.add_(1.0)
    return F.cross_entropy(t, y + 1)  # <- labels


BAD = [
    (_bad_select, (X, np.array([0, 7])), "select", "index 7 at position [1]"),
    (_bad_add, (X, np.array([1, -8, 2, 0, 1]), V5), "add", "index -8 at position [1]"),
    (_bad_take, (X, np.zeros((6, 4), np.int64)), "take", "index -8 at position [0, 0]"),
    (_bad_put, (X, np.array([[0, 6, 1, 2, 3, 4, 5]]), np.float32(1.0)), "put",
     "index 6 at position [0, 1]"),
    (_bad_labels, (X, np.array([0, 1, 2, 3, 4, 6])), "labels", "class label 7 at position [5]"),
]


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
@pytest.mark.parametrize("fn,args,marker,fragment", BAD, ids=[b[2] for b in BAD])
def test_out_of_range_raises_the_numpy_backends_data_error_with_nothing_written(
        fn, args, marker, fragment, backend):
    args = _copies(args)
    before = _copies(args)
    f = cc.compile(fn, backend=backend)
    with pytest.raises(cc.DataError) as info:
        f(*args)
    check_error(info, cc.DataError, marker, fragment)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)  # the caller's arrays are as they were
    if backend == "cpu":
        assert not f.lower(*args)._exec.fallback_nodes
        with pytest.raises(cc.DataError) as ref:
            cc.compile(fn, backend="numpy")(*_copies(args))
        assert str(info.value) == str(ref.value)


def test_a_failed_call_leaves_the_program_usable():
    f = cc.compile(_bad_add, backend="cpu")
    x = X.copy()
    with pytest.raises(cc.DataError):
        f(x, np.array([9, 0, 0, 0, 0]), V5)
    good = np.array([1, -2, 2, 0, 1])
    got, want = f(x.copy(), good, V5), cc.compile(_bad_add, backend="numpy")(x.copy(), good, V5)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_argmax_argmin_first_extreme_in_vector_blocks_and_the_tail(dtype):
    """Rows of 37 (whole 32-byte blocks, then a tail): ties, NaNs and infinities placed in a
    block, across blocks and in the tail; NumPy's answer (first extreme, first NaN) each time."""
    rng = np.random.default_rng(5)
    x = (rng.integers(-3, 4, (12, 37)) if dtype != np.bool_ else
         rng.random((12, 37)) > 0.7).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[1, [5, 30]] = np.nan
        x[2, 36] = np.nan
        x[3, [0, 9]] = np.inf
        x[3, 33] = -np.inf
        x[4, :] = np.nan
        x[5, 17] = -0.0
        x[6, [33, 35]] = [np.inf, np.nan]
    x[7, :] = x[7, 0]  # all tied: position 0
    f = cc.compile(lambda t: (t.argmax(axis=1), t.argmin(axis=1), t.argmax(), t.argmin(),
                              t.t().argmax(axis=0), t.t().argmax(axis=1),
                              t.t().argmin(axis=1)), backend="cpu")
    got = f(x)
    want = (np.argmax(x, 1), np.argmin(x, 1), np.argmax(x), np.argmin(x), np.argmax(x, 1),
            np.argmax(x, 0), np.argmin(x, 0))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_argmax_argmin_over_outer_axes_in_column_chunks(dtype):
    """The columns-innermost form (an argmax over axis 0) keeps chunks of 256 columns: 600
    columns are two whole chunks and a partial one; NaNs and ties in several rows."""
    rng = np.random.default_rng(6)
    x = (rng.integers(-2, 3, (7, 600)) if dtype != np.bool_ else
         rng.random((7, 600)) > 0.8).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[3, ::7] = np.nan
        x[5, ::5] = np.nan
        x[:, 599] = np.nan
    f = cc.compile(lambda t: (t.argmax(axis=0), t.argmin(axis=0, keepdim=True),
                              t.reshape([7, 20, 30]).argmax(axis=0)), backend="cpu")
    got = f(x)
    want = (np.argmax(x, 0), np.argmin(x, 0, keepdims=True),
            np.argmax(x.reshape(7, 20, 30), 0))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w, strict=True)
