"""Issue 24: the Tensor methods a Paddle user reaches for (compiler/tensor_paddle.py) and
integer-tensor indexing, on every available backend: values bit for bit where the op is exact,
which caller arrays are (and are not) written, gradients at the edge values where Paddle and
PyTorch agree on NaN, and the errors naming the user's line. The op database
(tests/opdb/samples.py, section "issue 24") holds the value and gradient sweeps."""
import numpy as np
import pytest

import compiler as cc
from tests.backends import AVAILABLE
from tests.error_lines import error_checker

line_of, check_error = error_checker(__file__)


def grads(fn, backend, *arrays):
    """(value of fn, gradient of sum(fn) with respect to every argument)."""
    def program(*xs):
        for x in xs:
            if x.dtype.kind == "f":
                x.stop_gradient = False
        out = fn(*xs)
        out.sum().backward()
        return out, [x.grad for x in xs if x.dtype.kind == "f"]
    return cc.compile(program, backend=backend)(*arrays)


# -- clone, flip: copies ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_clone_is_a_copy_with_the_gradient_path(backend):
    def f(x):
        c = x.clone()
        c.add_(1.0)            # a write to the clone...
        return c, x * 1.0      # ...doesn't reach x
    x = np.arange(6.0).reshape(2, 3)
    c, same = cc.compile(f, backend=backend)(x)
    np.testing.assert_array_equal(c, x + 1)
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(x, np.arange(6.0).reshape(2, 3))
    _, (g,) = grads(lambda t: t.clone() * t, backend, x)
    np.testing.assert_array_equal(g, 2 * x)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_flip_returns_a_copy_not_a_view(backend):
    def f(x):
        y = x.flip([0, 1])
        y[0] = 100.0           # Paddle's flip copies: x keeps its values
        return y, x.sum()
    x = np.arange(6.0).reshape(2, 3)
    y, s = cc.compile(f, backend=backend)(x)
    want = x[::-1, ::-1].copy()
    want[0] = 100.0
    np.testing.assert_array_equal(y, want)
    assert s == 15.0


# -- var, std ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_var_follows_paddle_divisor(backend):
    """unbiased=True (the default) divides by N - 1, but by 1 when N is 1 (Paddle's
    where(n > 1, n - 1, 1)): one element has variance 0, where PyTorch gives NaN."""
    def f(x, one):
        return x.var(), x.var(axis=1, unbiased=False), cc.std(x, 0, keepdim=True), one.var(), \
            one.std()
    x = np.array([[1.0, 2.0, 3.0], [1.0, 4.0, 5.0]])
    v, vb, s, v1, s1 = cc.compile(f, backend=backend)(x, np.array([7.5]))
    np.testing.assert_allclose(v, np.var(x, ddof=1), rtol=1e-14)
    np.testing.assert_allclose(vb, np.var(x, axis=1), rtol=1e-14)
    np.testing.assert_allclose(s, np.std(x, axis=0, ddof=1, keepdims=True), rtol=1e-14)
    assert v1 == 0.0 and s1 == 0.0


@pytest.mark.parametrize("backend", AVAILABLE)
def test_std_gradient_at_zero_variance_is_nan(backend):
    """d sqrt(v)/dv is infinite at 0 and dv/dx is 0: NaN, as in Paddle and PyTorch (both
    compose std as sqrt(var) in the gradient); a row with spread gets the finite gradient."""
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    out, (g,) = grads(lambda t: t.std(axis=1), backend, x)
    assert np.isnan(g[0]).all()
    row = x[1]
    want = (row - row.mean()) / (2 * row.std(ddof=1))     # d std/dx with N - 1 = 2
    np.testing.assert_allclose(g[1], want, rtol=1e-12)
    np.testing.assert_allclose(out, [0.0, row.std(ddof=1)], rtol=1e-14)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_var_of_an_integer_tensor_is_refused_naming_the_line(backend):
    def f(x):
        return x.var()  # <- var:int
    with pytest.raises(cc.TraceError) as e:
        cc.compile(f, backend=backend)(np.arange(4, dtype=np.int32))
    check_error(e, cc.TraceError, "var:int", "floating-point", "int32")


# -- logsumexp ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_logsumexp_is_stable_at_the_edges(backend):
    inf = np.inf
    x = np.array([[1000.0, 999.0, -inf],    # exp(1000) overflows unshifted
                  [-inf, -inf, -inf],       # log(0): -inf, not NaN
                  [inf, 0.0, 1.0],          # +inf
                  [-1000.0, -1000.0, -1000.0]], np.float32)
    out = cc.compile(lambda t: t.logsumexp(axis=1), backend=backend)(x)
    want = np.array([1000.0 + np.log1p(np.exp(-1.0)), -inf, inf, -1000.0 + np.log(3.0)],
                    np.float32)
    np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
    np.testing.assert_array_equal(out[np.isinf(out)], want[np.isinf(want)])
    np.testing.assert_allclose(out[:1], want[:1], rtol=1e-6)
    np.testing.assert_allclose(out[3:], want[3:], rtol=1e-6)
    empty = cc.compile(lambda t: cc.logsumexp(t, axis=0), backend=backend)(np.zeros((0, 2)))
    np.testing.assert_array_equal(empty, [-inf, -inf])  # the empty sum is 0


@pytest.mark.parametrize("backend", AVAILABLE)
def test_logsumexp_gradient_is_softmax_and_splits_no_ties(backend):
    """The max-shift is detached: tied maxima get the same softmax share, never a max
    reduction's split."""
    x = np.array([[3.0, 3.0, 1.0], [700.0, 0.0, 700.0]])
    _, (g,) = grads(lambda t: t.logsumexp(axis=1), backend, x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(g, e / e.sum(axis=1, keepdims=True), rtol=1e-14)
    # a row of -inf: NaN, as PyTorch's exp(x - result) = exp(-inf + inf)
    _, (g,) = grads(lambda t: t.logsumexp(axis=1), backend,
                    np.array([[-np.inf, -np.inf], [0.0, 0.0]]))
    assert np.isnan(g[0]).all()
    np.testing.assert_array_equal(g[1], [0.5, 0.5])


# -- any, all, isnan, isinf, isfinite, tile --------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_truth_and_classification(backend):
    x = np.array([[0.0, np.nan, -np.inf], [0.0, -0.0, 2.0]])

    def f(t):
        return (t.any(axis=1), t.all(axis=1), t.isnan(), t.isinf(), t.isfinite(),
                cc.any(t[:, :0], axis=1), cc.all(t[:, :0], axis=1))
    out = cc.compile(f, backend=backend)(x)
    want = (np.any(x, 1), np.all(x, 1), np.isnan(x), np.isinf(x), np.isfinite(x),
            np.zeros(2, bool), np.ones(2, bool))
    for o, w in zip(out, want):
        np.testing.assert_array_equal(o, w, strict=True)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_tile_pads_shape_and_repeats_as_paddle(backend):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    a, b, c = cc.compile(lambda t: (t.tile([2]), t.tile([2, 1, 2]), cc.tile(t[0], (3, 1))),
                         backend=backend)(x)
    np.testing.assert_array_equal(a, np.tile(x, [1, 2]), strict=True)
    np.testing.assert_array_equal(b, np.tile(x, [2, 1, 2]), strict=True)
    np.testing.assert_array_equal(c, np.tile(x[0], (3, 1)), strict=True)
    _, (g,) = grads(lambda t: t.tile([2, 3]), backend, np.ones((2, 2)))
    np.testing.assert_array_equal(g, np.full((2, 2), 6.0))


# -- where_ bound as Paddle binds it ---------------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_where_inplace_method_is_called_on_the_condition_and_writes_x(backend):
    def f(c, x, y):
        out = c.where_(x, y)
        assert out is x
        return out
    c = np.array([True, False, True])
    x, y = np.array([1.0, 2.0, 3.0]), np.array([9.0, 8.0, 7.0])
    out = cc.compile(f, backend=backend)(c, x, y)
    np.testing.assert_array_equal(x, [1.0, 8.0, 3.0])   # written into the caller's x
    assert out is x
    np.testing.assert_array_equal(y, [9.0, 8.0, 7.0])
    np.testing.assert_array_equal(c, [True, False, True])


# -- integer-tensor indexing -----------------------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_integer_tensor_index_reads_gather(backend):
    x = np.arange(16.0).reshape(4, 4)
    idx = np.array([3, -4, 3])

    def f(t, i):
        return t[i], t[:, i[:2]], t[i.reshape([3, 1])], t[np.array([1, 2])], t[[0, 0]]
    out = cc.compile(f, backend=backend)(x, idx)
    want = (x[idx], x[:, idx[:2]], x[idx.reshape(3, 1)], x[[1, 2]], x[[0, 0]])
    for o, w in zip(out, want):
        np.testing.assert_array_equal(o, w, strict=True)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_integer_tensor_index_gradient_adds_repeated_rows(backend):
    x = np.arange(12.0).reshape(4, 3)
    _, (g,) = grads(lambda t, i: t[i] * 2.0, backend, x, np.array([1, 3, 1]))
    want = np.zeros_like(x)
    want[1], want[3] = 4.0, 2.0
    np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_integer_tensor_index_writes_scatter_into_the_callers_array(backend):
    def f(x, i, v):
        x[i] = v
        x[:, i[:1]] += 100.0
        return x
    x = np.zeros((3, 4))
    i = np.array([2, 0])
    out = cc.compile(f, backend=backend)(x, i, np.array([1.0, 2.0, 3.0, 4.0]))
    want = np.zeros((3, 4))
    want[[2, 0]] = [1.0, 2.0, 3.0, 4.0]
    want[:, [2]] += 100.0
    np.testing.assert_array_equal(x, want)
    assert out is x
    np.testing.assert_array_equal(i, [2, 0])


@pytest.mark.parametrize("backend", AVAILABLE)
def test_integer_tensor_index_write_gradients(backend):
    """Written rows pass no gradient back to the old value; the value gets the rows' gradient."""
    def f(x, v):
        y = x * 1.0
        y[np.array([0, 2])] = v * 3.0
        return y
    x, v = np.ones((3, 2)), np.ones((2, 2))
    _, (gx, gv) = grads(f, backend, x, v)
    np.testing.assert_array_equal(gx, [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(gv, np.full((2, 2), 3.0))


@pytest.mark.parametrize("backend", AVAILABLE)
def test_out_of_range_tensor_index_is_a_data_error_before_anything_is_written(backend):
    def f(x, b, i):
        b.add_(1.0)
        return x[i]  # <- index:read

    def g(x, i):
        x[i] = 5.0  # <- index:write
        return x
    x, b = np.arange(6.0).reshape(3, 2), np.zeros(2)
    with pytest.raises(cc.DataError) as e:
        cc.compile(f, backend=backend)(x, b, np.array([0, 3]))
    check_error(e, cc.DataError, "index:read", "index 3", "size 3")
    np.testing.assert_array_equal(b, 0.0)
    with pytest.raises(cc.DataError) as e:
        cc.compile(g, backend=backend)(x, np.array([-4]))
    check_error(e, cc.DataError, "index:write", "index -4")
    np.testing.assert_array_equal(x, np.arange(6.0).reshape(3, 2))


@pytest.mark.parametrize("backend", AVAILABLE)
def test_boolean_mask_read_is_refused_pointing_at_where(backend):
    def f(x):
        return x[x > 0]  # <- mask:read

    def g(x, m):
        return x[:, m]  # <- mask:tuple
    with pytest.raises(cc.TraceError) as e:
        cc.compile(f, backend=backend)(np.ones(3))
    check_error(e, cc.TraceError, "mask:read", "cc.where", "masked_select", "data-dependent")
    with pytest.raises(cc.TraceError) as e:
        cc.compile(g, backend=backend)(np.ones((2, 3)), np.ones(3, bool))
    check_error(e, cc.TraceError, "mask:tuple", "cc.where")


def test_two_tensor_indices_are_refused_naming_the_line():
    def f(x, i):
        return x[i, i]  # <- index:two
    with pytest.raises(cc.TraceError) as e:
        cc.compile(f, backend="numpy")(np.ones((2, 2)), np.zeros(1, np.int64))
    check_error(e, cc.TraceError, "index:two", "one integer tensor index")
