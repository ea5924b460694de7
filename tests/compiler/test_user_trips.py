"""Issue 13: what a new user trips over. Each test reproduces a case from the issue and asserts
the behaviour a user relies on: the value, or the error class and the line it names.

Lines are found by marker comments (`# <- name`), as in test_errors.py.
"""
import os

import numpy as np
import pytest

import compiler as cc

_THIS = os.path.basename(__file__)


def line_of(marker: str) -> int:
    with open(__file__) as f:
        hits = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# <- {marker}")]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


def check_error(excinfo, cls, marker, *fragments):
    err = excinfo.value
    assert isinstance(err, cls), f"{type(err).__name__} is not a {cls.__name__}: {err}"
    assert isinstance(err, cc.CompilerError)
    msg = str(err)
    assert f"{_THIS}:{line_of(marker)}" in msg, msg
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


# -- 1. numpy on a traced tensor ------------------------------------------------------------
NUMPY_CALLS = {
    "ufunc": (lambda t: np.exp(t), "np.exp(tensor)"),  # <- np:ufunc
    "function": (lambda t: np.sum(t), "np.sum(tensor)"),  # <- np:function
    "asarray": (lambda t: np.asarray(t), "np.asarray(tensor)"),  # <- np:asarray
    "list": (lambda t: np.array([t, t]), "np.asarray(tensor)"),  # <- np:list
    "float": (lambda t: float(t.sum()), "float(tensor)"),  # <- np:float
    "numpy": (lambda t: t.numpy(), ".numpy()"),  # <- np:numpy
    "reduce": (lambda t: np.add.reduce(t), "np.add.reduce(tensor)"),  # <- np:reduce
    "ufunc_out": (lambda t: np.add(X, t, out=np.empty_like(X)), "out="),  # <- np:ufunc_out
    "negative": (lambda t: np.negative(t), "np.negative(tensor)"),  # <- np:negative
}


@pytest.mark.parametrize("case", sorted(NUMPY_CALLS))
def test_numpy_on_a_traced_tensor_raises_trace_error_naming_the_line(case):
    fn, what = NUMPY_CALLS[case]
    with pytest.raises(cc.TraceError) as e:
        cc.compile(fn)(X)
    check_error(e, cc.TraceError, f"np:{case}", what, "doesn't exist while tracing")


def test_ndarray_operators_with_a_tensor_still_trace():
    """numpy routes `ndarray + tensor` through np.add once Tensor defines __array_ufunc__: the
    operator ufuncs trace as the operator, with the array as a constant."""
    a = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], np.float32)

    def f(t):
        return (a + t, a - t, a * t, a / t, a ** (t * 0.0 + 2.0), a @ t.t(), a < t, a >= t,
                a == t, np.float32(3.0) * t, t - a)

    got = cc.compile(f)(X)
    want = (a + X, a - X, a * X, a / X, a ** 2, a @ X.T, a < X, a >= X, a == X, 3 * X, X - a)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_inplace_ndarray_op_with_a_tensor_raises():
    def f(t):
        b = np.ones((2, 3), np.float32)
        b += t  # <- np:iadd
        return t

    with pytest.raises(cc.TraceError) as e:
        cc.compile(f)(X)
    check_error(e, cc.TraceError, "np:iadd", "np.add(..., out=...)")


# -- 3. a tensor kept from an earlier trace --------------------------------------------------
def test_tensor_from_an_earlier_trace_names_the_tensor_and_where_it_was_made():
    leak = []

    def f(a):
        t = a * 3  # <- leak:made
        leak.append(t)
        return t

    def g(b):
        return b + leak[0]  # <- leak:used

    cc.compile(f)(X)
    with pytest.raises(cc.TraceError) as e:
        cc.compile(g)(X)
    check_error(e, cc.TraceError, "leak:used", f"tensor '{leak[0].name}'",
                f"made at {_THIS}:{line_of('leak:made')}", "trace of 'f'", "while tracing 'g'")


def test_leaked_tensor_used_outside_any_trace():
    leak = []
    cc.compile(lambda a: leak.append(a) or a)(X)
    with pytest.raises(cc.TraceError) as e:
        leak[0].sin()  # <- leak:outside
    check_error(e, cc.TraceError, "leak:outside", "argument", "outside any trace")


# -- 6. boolean-mask set-item ------------------------------------------------------------------
def test_mask_setitem_scalar_is_a_where_in_place_on_the_argument():
    def f(x):
        x[x > 0] = 0
        return x

    fn = cc.compile(f)
    a = X.copy()
    out = fn(a)
    np.testing.assert_array_equal(a, np.where(X > 0, 0, X))
    assert out is a  # the caller's array, mutated as in eager Paddle
    prog = fn.lower(a)
    [d] = [d for d in prog.plan.decisions if d.op == "where"]
    assert d.requested and d.inplace, d.reason
    assert "argument 'x'" in d.reason


def test_mask_setitem_broadcast_value_and_leading_dims_mask():
    def f(x, y, rows):
        h = x * 2.0
        h[h < 0] = y          # y [3] broadcasts to [2, 3]
        x[rows] = -7.0        # a mask over the leading dimension selects whole rows
        return h

    y = np.array([10.0, 20.0, 30.0], np.float32)
    a = X.copy()
    h = cc.compile(f)(a, y, np.array([True, False]))
    np.testing.assert_array_equal(h, np.where(2 * X < 0, y, 2 * X))
    np.testing.assert_array_equal(a, np.where([[True], [False]], -7.0, X))


def test_mask_setitem_gradient():
    def f(x, w):
        w.stop_gradient = False
        h = x * w
        h[x > 0] = 0.5 * w   # x > 0: d/dw = 0.5, else x
        h.sum().backward()
        return w.grad

    w = np.full((2, 3), 3.0, np.float32)
    np.testing.assert_allclose(cc.compile(f)(X, w), np.where(X > 0, 0.5, X))


def test_mask_setitem_one_value_per_true_element_is_data_dependent():
    def f(x):
        x[x > 0] = cc.ones([2])  # <- mask:per_element
        return x

    with pytest.raises(cc.TraceError) as e:
        cc.compile(f)(X)
    check_error(e, cc.TraceError, "mask:per_element", "data-dependent shape", "[2]")


def test_mask_getitem_is_data_dependent():
    with pytest.raises(cc.TraceError) as e:
        cc.compile(lambda x: x[x > 0])(X)  # <- mask:getitem
    check_error(e, cc.TraceError, "mask:getitem", "data-dependent shape", "cc.where")


# -- 7. backward() twice -----------------------------------------------------------------------
def test_second_backward_through_released_graph_names_both_lines():
    def f(x, w):
        w.stop_gradient = False
        loss = (x * w).sin().sum()
        loss.backward()  # <- bw:first
        loss.backward()  # <- bw:second
        return w.grad

    with pytest.raises(cc.TraceError) as e:
        cc.compile(f)(X, X)
    check_error(e, cc.TraceError, "bw:second", f"{_THIS}:{line_of('bw:first')}",
                "retain_graph=True")


def test_retain_graph_accumulates_and_separate_forwards_accumulate():
    def f(x, w):
        w.stop_gradient = False
        loss = (x * w).sum()
        loss.backward(retain_graph=True)
        loss.backward()               # through the retained graph: accumulates
        (w * w).sum().backward()      # a separate forward computation: accumulates
        return w.grad

    np.testing.assert_allclose(cc.compile(f)(X, X), 2 * X + 2 * X)


# -- 8. view-changing inplace ops on a leaf that needs a gradient -------------------------------
VIEW_INPLACE = {
    "squeeze_": lambda w: w.squeeze_(0),  # <- leaf:squeeze_
    "unsqueeze_": lambda w: w.unsqueeze_(0),  # <- leaf:unsqueeze_
    "reshape_": lambda w: w.reshape_([3, 1]),  # <- leaf:reshape_
    "flatten_": lambda w: w.flatten_(),  # <- leaf:flatten_
    "transpose_": lambda w: w.transpose_([1, 0]),  # <- leaf:transpose_
    "t_": lambda w: w.t_(),  # <- leaf:t_
}


@pytest.mark.parametrize("op", sorted(VIEW_INPLACE))
def test_view_changing_inplace_on_a_leaf_raises(op):
    def f(w):
        w.stop_gradient = False
        return VIEW_INPLACE[op](w)

    with pytest.raises(cc.InplaceError) as e:
        cc.compile(f)(np.ones((1, 3), np.float32))
    check_error(e, cc.InplaceError, f"leaf:{op}", "leaf tensor 'w'", op)


@pytest.mark.parametrize("op", sorted(VIEW_INPLACE))
def test_view_changing_inplace_on_a_leaf_is_fine_under_no_grad_or_without_grad(op):
    def f(w, v):
        w.stop_gradient = False
        with cc.no_grad():
            a = VIEW_INPLACE[op](w)
        return a, VIEW_INPLACE[op](v)

    a, b = cc.compile(f)(np.ones((1, 3), np.float32), np.ones((1, 3), np.float32))
    assert a.shape == b.shape and a.size == 3
