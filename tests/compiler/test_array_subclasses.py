"""Arguments that are instances of ndarray subclasses: a masked array is refused before anything
is written (its mask would be ignored); every other subclass runs as the plain ndarray over its
memory, so in-place updates reach it, results are plain ndarrays, and every backend computes
the same values bit for bit."""
import numpy as np
import pytest

import compiler as cc
from tests.backends import AVAILABLE
from tests.error_lines import error_checker

line_of, check_error = error_checker(__file__)
pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")


def update_and_reduce(x):
    x.add_(1.0)
    return x.sum(), x * 2.0


def check_like_plain(backend, before, x, out):
    """`out` and `x` after the call are what the program gives on a plain copy of `before`."""
    want_x = before.copy()
    want = cc.compile(update_and_reduce, backend=backend)(want_x)
    assert all(type(o) is np.ndarray for o in out)
    for got, expect in zip(out, want):
        assert got.shape == expect.shape and got.tobytes() == expect.tobytes()
    assert np.asarray(x).tobytes() == want_x.tobytes()  # the update reached the caller's array


@pytest.mark.parametrize("backend", AVAILABLE)
def test_matrix_runs_as_its_array(backend):
    # (numpy's executor used to call matrix.sum(keepdims=...) and raise TypeError after
    # x.add_ had already written into x)
    x = np.asmatrix(np.arange(6, dtype=np.float32).reshape(2, 3))
    before = np.asarray(x).copy()
    out = cc.compile(update_and_reduce, backend=backend)(x)
    assert type(x) is np.matrix
    check_like_plain(backend, before, x, out)
    assert np.asarray(x).tolist() == [[1, 2, 3], [4, 5, 6]]


class Refusing(np.ndarray):
    """A subclass whose ufuncs refuse to run: a backend must not dispatch to it."""

    def __array_ufunc__(self, *args, **kwargs):
        raise AssertionError("a subclass's __array_ufunc__ ran inside the program")


@pytest.mark.parametrize("backend", AVAILABLE)
def test_user_subclass_runs_as_its_array(backend):
    before = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = before.copy().view(Refusing)
    out = cc.compile(update_and_reduce, backend=backend)(x)
    check_like_plain(backend, before, x, out)


def add_into(x, y):
    x.add_(y)
    return x


@pytest.mark.parametrize("backend", AVAILABLE)
def test_matrix_views_sharing_memory(backend):
    # Two overlapping views of one matrix are bound as views of its memory, as plain arrays
    # are: eager numpy's x += y on the plain views is the reference.
    m = np.matrix(np.arange(12, dtype=np.float32).reshape(3, 4))  # (owns its memory)
    ref = np.asarray(m).copy()
    rx, ry = ref[:, 1:], ref[:, :3]
    rx += ry
    out = cc.compile(add_into, backend=backend)(m[:, 1:], m[:, :3])
    assert type(out) is np.ndarray
    assert np.asarray(m).tobytes() == ref.tobytes()
    assert out.tobytes() == np.ascontiguousarray(rx).tobytes()


MASKS = {"masked": [[False, True, False], [False, False, False]], "no mask": np.ma.nomask}


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("mask", list(MASKS))
def test_masked_array_refused_before_writing(backend, mask):
    x = np.ma.MaskedArray(np.arange(6, dtype=np.float32).reshape(2, 3), mask=MASKS[mask])
    before_data, before_mask = x.data.copy(), np.ma.getmaskarray(x).copy()
    fn = cc.compile(update_and_reduce, backend=backend)
    with pytest.raises(cc.TraceError) as e:
        fn(x)  # <- masked call
    check_error(e, cc.TraceError, "masked call", "argument 'x' is a numpy masked array",
                "ignore its mask", "x.filled(value)")
    assert x.data.tobytes() == before_data.tobytes()
    assert (np.ma.getmaskarray(x) == before_mask).all()
    assert fn.traces == 0


@pytest.mark.parametrize("backend", AVAILABLE)
def test_masked_array_refused_by_a_lowered_program(backend):
    # A Program compiled for a plain array refuses a masked one too, before it runs.
    x = np.ma.MaskedArray(np.arange(6, dtype=np.float32).reshape(2, 3), mask=MASKS["masked"])
    prog = cc.compile(update_and_reduce, backend=backend).lower(x.data.copy())
    before = x.data.copy()
    with pytest.raises(cc.TraceError) as e:
        prog(x)  # <- lowered masked call
    check_error(e, cc.TraceError, "lowered masked call", "argument 'x' is a numpy masked array")
    assert x.data.tobytes() == before.tobytes()
