"""Forward values of every op, compiled with each backend (numpy and cpu), against plain numpy.

The oracles are independent numpy formulas (conv2d and max_pool2d as explicit loops), never
the registry's own reference functions. The last section checks each elementwise op's scalar
expression (what the code emitters render) against its reference implementation.
"""
import math

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.ops import ELEMENTWISE, REGISTRY
from compiler.ops import scalar as S
from compiler.ops.elementwise import expr_for
from tests.backends import AVAILABLE

FLOATS = [np.float32, np.float64]
INTS = [np.int32, np.int64]


BACKEND = "numpy"


@pytest.fixture(autouse=True, params=AVAILABLE)
def backend(request):
    """Every test here runs on each backend; `run` and `compile_` use the current one."""
    global BACKEND
    BACKEND = request.param
    yield request.param
    BACKEND = "numpy"


def compile_(fn):
    return cc.compile(fn, backend=BACKEND)


def run(fn, *args):
    return compile_(fn)(*args)


def tol(dtype):
    return dict(rtol=2e-5, atol=1e-6) if np.dtype(dtype) == np.float32 else \
        dict(rtol=1e-12, atol=1e-12)


def check(got, want, dtype=None):
    """`got` has `want`'s shape, the given dtype (default: want's), and its values."""
    want = np.asarray(want)
    dtype = np.dtype(want.dtype if dtype is None else dtype)
    assert isinstance(got, np.ndarray), type(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == dtype, (got.dtype, dtype)
    if dtype.kind == "f":
        np.testing.assert_allclose(got, want.astype(dtype), **tol(dtype))
    else:
        np.testing.assert_array_equal(got, want)


def data(shape, dtype, lo=-3.0, hi=3.0, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind == "i":
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])

# -- unary math ------------------------------------------------------------------------------

# name -> (oracle on float64, input range)
UNARY = {
    "abs": (np.abs, (-3, 3)),
    "neg": (lambda x: -x, (-3, 3)),
    "exp": (np.exp, (-3, 3)),
    "log": (np.log, (0.1, 5)),
    "sin": (np.sin, (-3, 3)),
    "cos": (np.cos, (-3, 3)),
    "tan": (np.tan, (-1.2, 1.2)),
    "tanh": (np.tanh, (-3, 3)),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), (-6, 6)),
    "sqrt": (np.sqrt, (0.0, 5)),
    "square": (lambda x: x * x, (-3, 3)),
    "sign": (np.sign, (-3, 3)),
    "erf": (_erf, (-2, 2)),
    "relu": (lambda x: np.where(x > 0, x, 0.0), (-3, 3)),
}
FLOAT_VALUED = {"exp", "log", "sin", "cos", "tan", "tanh", "sigmoid", "sqrt", "erf"}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float(name, dtype):
    oracle, (lo, hi) = UNARY[name]
    x = data((3, 4), dtype, lo, hi)
    want = oracle(x.astype(np.float64))
    check(run(lambda t: getattr(t, name)(), x), want, dtype)
    check(run(lambda t: getattr(cc, name)(t), x), want, dtype)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_int(name, dtype):
    oracle, (lo, hi) = UNARY[name]
    x = data((2, 5), dtype, max(lo, -3), 3)
    if name == "log":
        x = np.abs(x) + 1
    if name == "tan":
        x = np.clip(x, -1, 1)
    if name in FLOAT_VALUED:  # computed in Paddle's default float
        check(run(lambda t: getattr(t, name)(), x), oracle(x.astype(np.float64)), np.float32)
    else:
        check(run(lambda t: getattr(t, name)(), x), oracle(x).astype(dtype), dtype)


def test_unary_on_bool_and_zero_dim():
    b = np.array([True, False, True])
    check(run(lambda t: t.abs(), b), b)
    check(run(lambda t: t.exp(), b), np.exp(b.astype(np.float64)), np.float32)
    check(run(lambda t: t.sigmoid(), b), 1 / (1 + np.exp(-b.astype(np.float64))), np.float32)
    z = np.array(-2.5)
    check(run(lambda t: t.abs(), z), np.array(2.5))
    check(run(lambda t: -t, z), np.array(2.5))


def test_sigmoid_extremes_are_finite():
    x = np.array([-800.0, -50.0, 0.0, 50.0, 800.0])
    check(run(lambda t: t.sigmoid(), x), [0.0, 1 / (1 + np.exp(50.0)), 0.5,
                                            1 / (1 + np.exp(-50.0)), 1.0])


@pytest.mark.parametrize("dtype", FLOATS + [np.int32])
@pytest.mark.parametrize("scale,bias,after", [(2.0, 0.0, True), (0.5, 1.5, True),
                                               (-3.0, 2.0, False), (1.0, -1.0, False)])
def test_scale(dtype, scale, bias, after):
    x = data((2, 3), dtype)
    xf = x.astype(np.float64)
    want = xf * scale + bias if after else (xf + bias) * scale
    out_dtype = dtype  # Paddle: integers keep their dtype, scaled by whole numbers only
    if np.dtype(dtype).kind != "f" and not (scale.is_integer() and bias.is_integer()):
        with pytest.raises(cc.TraceError, match="whole numbers"):
            run(lambda t: t.scale(scale, bias, after), x)
        return
    check(run(lambda t: t.scale(scale, bias, after), x), want, out_dtype)
    check(run(lambda t: t.scale(scale=scale, bias=bias, bias_after_scale=after), x), want,
          out_dtype)
    check(run(lambda t: cc.scale(t, scale, bias, after), x), want, out_dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("lo,hi", [(-1, 2), (0, None), (None, 1), (-2.0, -1.0)])
def test_clip(dtype, lo, hi):
    x = data((3, 4), dtype)
    want = x.astype(np.float64)
    if lo is not None:
        want = np.maximum(want, lo)
    if hi is not None:
        want = np.minimum(want, hi)
    check(run(lambda t: t.clip(lo, hi), x), want.astype(dtype), dtype)
    check(run(lambda t: t.clip(min=lo, max=hi), x), want.astype(dtype), dtype)


@pytest.mark.parametrize("src", FLOATS + INTS + [np.bool_])
@pytest.mark.parametrize("dst", FLOATS + INTS + [np.bool_])
def test_cast(src, dst):
    x = data((2, 3), src) if np.dtype(src).kind != "f" else \
        np.array([[-2.7, -0.0, 0.3], [1.0, 2.5, 7.9]], src)
    want = x.astype(dst)
    check(run(lambda t: t.cast(dst), x), want, dst)
    check(run(lambda t: t.astype(np.dtype(dst).name), x), want, dst)
    check(run(lambda t: cc.cast(t, dst), x), want, dst)


# -- binary arithmetic with broadcasting -------------------------------------------------------
BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "pow": np.power, "maximum": np.maximum, "minimum": np.minimum,
}
SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1, 3), (2, 1)), ((), (2, 3)), ((1,), (3, 1)),
          ((2, 1, 4), (1, 3, 1))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast(name, sa, sb, dtype):
    lo = 0.2 if name == "pow" else -3.0
    x, y = data(sa, dtype, lo, 3.0, seed=1), data(sb, dtype, -2.0 if name == "pow" else lo,
                                                   3.0, seed=2)
    if name == "divide":
        y = np.where(np.abs(y) < 0.1, 0.5, y).astype(dtype)
    want = BINARY[name](x.astype(np.float64), y.astype(np.float64))
    check(run(lambda a, b: getattr(a, name)(b), x, y), want, dtype)
    check(run(lambda a, b: getattr(cc, name)(a, b), x, y), want, dtype)


OPERATORS = [
    ("+", lambda a, b: a + b), ("-", lambda a, b: a - b), ("*", lambda a, b: a * b),
    ("/", lambda a, b: a / b), ("**", lambda a, b: a ** b),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("sym,op", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_operators(sym, op, dtype):
    x = data((2, 3), dtype, 0.5, 3.0, seed=3)
    y = data((3,), dtype, 0.5, 2.0, seed=4)
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    check(run(op, x, y), op(xf, yf), dtype)          # tensor op tensor
    check(run(lambda a: op(a, 2.5), x), op(xf, 2.5), dtype)   # tensor op scalar
    check(run(lambda a: op(1.5, a), x), op(1.5, xf), dtype)   # reversed: scalar op tensor
    check(run(lambda a: op(a, 2), x), op(xf, 2), dtype)       # int scalar is weak too
    check(run(lambda a: op(3, a), x), op(3, xf), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_neg_matmul_and_numpy_constant_operators(dtype):
    x = data((2, 3), dtype, seed=5)
    w = data((3, 4), dtype, seed=6)
    check(run(lambda a: -a, x), -x)
    check(run(lambda a, b: a @ b, x, w), x.astype(np.float64) @ w.astype(np.float64), dtype)
    # a numpy array captured in the function is a constant operand on either side
    c = data((3,), dtype, seed=7)
    check(run(lambda a: a + c, x), x + c)
    check(run(lambda a: c - a, x), c - x)
    check(run(lambda a: a @ w, x), x.astype(np.float64) @ w, dtype)


def test_mixed_dtypes_promote():
    f32, f64 = data((3,), np.float32), data((3,), np.float64, seed=1)
    i32, i64 = data((3,), np.int32, seed=2), data((3,), np.int64, seed=3)
    check(run(lambda a, b: a + b, f32, f64), f32.astype(np.float64) + f64, np.float64)
    check(run(lambda a, b: a * b, i32, i64), i32.astype(np.int64) * i64, np.int64)
    check(run(lambda a, b: a - b, i32, i32), i32 - i32, np.int32)
    check(run(lambda a: a + 1, i32), i32 + 1, np.int32)
    # int with float: Paddle's default float32 (not numpy's float64)
    check(run(lambda a: a * 1.5, i32), i32 * 1.5, np.float32)
    check(run(lambda a, b: a + b, i64, f32), i64 + f32.astype(np.float64), np.float32)
    check(run(lambda a: a / 2, i32), i32 / 2, np.float32)
    check(run(lambda a, b: a / b, i64, i64 * 0 + 4), i64 / 4, np.float32)
    check(run(lambda a: a ** 0.5, np.abs(i32)), np.abs(i32) ** 0.5, np.float32)
    check(run(lambda a: a ** 2, i64), i64 ** 2, np.int64)
    b = np.array([True, False, True])
    check(run(lambda a: a + 1, b), b + 1, np.int64)


# -- comparisons and logic -----------------------------------------------------------------
COMPARE = {
    "greater_than": (np.greater, lambda a, b: a > b),
    "less_than": (np.less, lambda a, b: a < b),
    "greater_equal": (np.greater_equal, lambda a, b: a >= b),
    "less_equal": (np.less_equal, lambda a, b: a <= b),
    "equal": (np.equal, lambda a, b: a == b),
    "not_equal": (np.not_equal, lambda a, b: a != b),
}


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons(name, dtype):
    x = data((4, 3), dtype, -2, 2, seed=8)
    y = data((3,), dtype, -2, 2, seed=9)
    y[0] = x[0, 0]  # make sure ties occur
    ref, op = COMPARE[name]
    check(run(lambda a, b: getattr(a, name)(b), x, y), ref(x, y), np.bool_)
    check(run(lambda a, b: getattr(cc, name)(a, b), x, y), ref(x, y), np.bool_)
    check(run(op, x, y), ref(x, y), np.bool_)
    check(run(lambda a: op(a, 1), x), ref(x, 1), np.bool_)
    check(run(lambda a: op(1, a), x), ref(1, x), np.bool_)


@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int64])
def test_logical_ops(dtype):
    x = data((2, 3), dtype, -1, 1, seed=10)
    y = data((3,), dtype, -1, 1, seed=11)
    check(run(lambda a, b: a.logical_and(b), x, y), np.logical_and(x, y), np.bool_)
    check(run(lambda a, b: cc.logical_or(a, b), x, y), np.logical_or(x, y), np.bool_)
    check(run(lambda a: a.logical_not(), x), np.logical_not(x), np.bool_)
    check(run(lambda a: cc.logical_not(a), x), np.logical_not(x), np.bool_)


def test_logical_operators_on_bool_tensors():
    x = np.array([[True, False, True], [False, False, True]])
    y = np.array([True, True, False])
    check(run(lambda a, b: a & b, x, y), x & y)
    check(run(lambda a, b: a | b, x, y), x | y)
    check(run(lambda a: ~a, x), ~x)
    check(run(lambda a: (a > 0.5).logical_and(a < 2.0), np.array([0.1, 1.0, 3.0])),
          [False, True, False])


@pytest.mark.parametrize("dtype", FLOATS + [np.int32])
def test_where(dtype):
    c = np.array([[True, False, True], [False, True, False]])
    x = data((2, 3), dtype, seed=12)
    y = data((3,), dtype, seed=13)
    check(run(lambda k, a, b: cc.where(k, a, b), c, x, y), np.where(c, x, y))
    check(run(lambda a: cc.where(a > 0, a, 0), x), np.where(x > 0, x, 0).astype(dtype))
    check(run(lambda a: cc.where(a > 0, 2, a), x), np.where(x > 0, 2, x).astype(dtype))
    check(run(lambda k, b: cc.where(k[:, :1], 1.0, b), c, y.astype(np.float32)),
          np.where(c[:, :1], 1.0, y).astype(np.float32))


# -- reductions ------------------------------------------------------------------------------
AXES = [None, 0, 1, -1, [0, 2], [-1, 0], (1,), [0, 1, 2]]
REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max}


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("dtype", FLOATS)
def test_reductions(name, axis, keepdim, dtype):
    x = data((2, 3, 4), dtype, seed=14)
    np_axis = None if axis is None else tuple(axis) if isinstance(axis, (list, tuple)) else axis
    want = REDUCE[name](x.astype(np.float64), axis=np_axis, keepdims=keepdim)
    check(run(lambda t: getattr(t, name)(axis=axis, keepdim=keepdim), x), want, dtype)
    check(run(lambda t: getattr(cc, name)(t, axis, keepdim=keepdim), x), want, dtype)


@pytest.mark.parametrize("dtype", INTS + [np.bool_])
def test_reductions_of_ints_and_bools(dtype):
    x = data((3, 4), dtype, -5, 5, seed=15)
    check(run(lambda t: t.sum(), x), np.sum(x, dtype=np.int64), np.int64)
    check(run(lambda t: t.sum(axis=0), x), np.sum(x, axis=0, dtype=np.int64), np.int64)
    check(run(lambda t: t.mean(axis=1), x), np.mean(x.astype(np.float64), axis=1), np.float32)
    check(run(lambda t: t.max(axis=-1, keepdim=True), x), np.max(x, axis=-1, keepdims=True))


def test_reductions_of_zero_dim():
    x = np.array(3.5)
    check(run(lambda t: t.sum(), x), x)
    check(run(lambda t: t.mean(), x), x)
    check(run(lambda t: t.max(), x), x)


# -- matmul ----------------------------------------------------------------------------------
MATMUL_SHAPES = [((2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)), ((5, 2, 3), (3, 4)),
                 ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (3, 3, 4)), ((3,), (3, 4)), ((2, 3), (3,)),
                 ((3,), (3,)), ((5, 2, 3), (3,)), ((3,), (5, 3, 4)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul(sa, sb, dtype):
    x, y = data(sa, dtype, seed=16), data(sb, dtype, seed=17)
    want = np.matmul(x.astype(np.float64), y.astype(np.float64))
    check(run(lambda a, b: a.matmul(b), x, y), want, dtype)
    check(run(lambda a, b: a @ b, x, y), want, dtype)
    check(run(lambda a, b: cc.matmul(a, b), x, y), want, dtype)


def test_matmul_transpose_flags_and_ints():
    x, y = data((3, 2), np.float64), data((4, 3), np.float64, seed=1)
    check(run(lambda a, b: a.matmul(b, transpose_x=True, transpose_y=True), x, y), x.T @ y.T)
    check(run(lambda a, b: cc.matmul(a, b, True, True), x, y), x.T @ y.T)
    i, j = data((2, 3), np.int64), data((3, 2), np.int64, seed=2)
    check(run(lambda a, b: a @ b, i, j), i @ j)


# -- views -------------------------------------------------------------------------------------
X234 = np.arange(24, dtype=np.float64).reshape(2, 3, 4)


@pytest.mark.parametrize("shape,want", [([6, 4], (6, 4)), ([-1], (24,)), ([4, -1], (4, 6)),
                                        ([2, -1, 2], (2, 6, 2)), ([0, 12], (2, 12)),
                                        ([24, 1], (24, 1)), ((3, 8), (3, 8))], ids=str)
def test_reshape(shape, want):
    check(run(lambda t: t.reshape(shape), X234), X234.reshape(want))
    check(run(lambda t: cc.reshape(t, shape), X234), X234.reshape(want))
    if 0 not in shape:  # a reshape of a transposed tensor (a copy)
        check(run(lambda t: t.transpose([2, 0, 1]).reshape(shape), X234),
              X234.transpose(2, 0, 1).reshape(want))


@pytest.mark.parametrize("perm", [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, -1, 1]], ids=str)
def test_transpose(perm):
    check(run(lambda t: t.transpose(perm), X234), np.transpose(X234, [p % 3 for p in perm]))
    check(run(lambda t: cc.transpose(t, perm), X234), np.transpose(X234, [p % 3 for p in perm]))


def test_t():
    m = X234[0]
    check(run(lambda t: t.t(), m), m.T)
    check(run(lambda t: cc.t(t), m), m.T)
    v = np.arange(3.0)
    check(run(lambda t: t.t(), v), v)


@pytest.mark.parametrize("start,stop,want", [(0, -1, (24,)), (1, 2, (2, 12)), (0, 1, (6, 4)),
                                             (2, 2, (2, 3, 4)), (-2, -1, (2, 12))], ids=str)
def test_flatten(start, stop, want):
    check(run(lambda t: t.flatten(start, stop), X234), X234.reshape(want))
    check(run(lambda t: t.flatten(start_axis=start, stop_axis=stop), X234), X234.reshape(want))


def test_flatten_defaults_and_zero_dim():
    check(run(lambda t: t.flatten(), X234), X234.reshape(-1))
    check(run(lambda t: cc.flatten(t), X234), X234.reshape(-1))
    check(run(lambda t: t.flatten(), np.array(5.0)), np.array([5.0]))


X1213 = np.arange(6.0).reshape(1, 2, 1, 3)


@pytest.mark.parametrize("axis,want", [(None, (2, 3)), (0, (2, 1, 3)), (2, (1, 2, 3)),
                                       (-2, (1, 2, 3)), ([0, 2], (2, 3)), (1, (1, 2, 1, 3))],
                         ids=str)
def test_squeeze(axis, want):
    check(run(lambda t: t.squeeze(axis), X1213), X1213.reshape(want))
    check(run(lambda t: cc.squeeze(t, axis), X1213), X1213.reshape(want))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3, [0, 1], [0, -1], [1, 3]], ids=str)
def test_unsqueeze(axis):
    m = np.arange(6.0).reshape(2, 3)
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    check(run(lambda t: t.unsqueeze(axis), m), np.expand_dims(m, np_axis))
    check(run(lambda t: cc.unsqueeze(t, axis), m), np.expand_dims(m, np_axis))


@pytest.mark.parametrize("src,shape,want", [((1, 3), [4, 3], (4, 3)), ((3,), [2, 3], (2, 3)),
                                            ((2, 1), [2, 5], (2, 5)), ((1, 3), [2, 4, -1],
                                                                       (2, 4, 3)),
                                            ((2, 3), [2, 3], (2, 3)), ((3,), [1, 3], (1, 3))],
                         ids=str)
def test_expand(src, shape, want):
    x = np.arange(np.prod(src), dtype=np.float32).reshape(src)
    check(run(lambda t: t.expand(shape), x), np.broadcast_to(x, want))
    check(run(lambda t: cc.expand(t, shape), x), np.broadcast_to(x, want))
    check(run(lambda t: t.expand(shape) * 2.0, x), np.broadcast_to(x, want) * 2)


class _Index:
    def __getitem__(self, idx):
        return idx


I = _Index()  # noqa: E741  (reads like numpy.s_)
INDICES = [I[0], I[-1], I[1:], I[:, 1], I[1, 2, 3], I[-1, -2, -3], I[::-1], I[:, ::-2],
           I[..., ::-1], I[:, 1:3, ::2], I[None], I[:, None, 0], I[..., None], I[..., 0],
           I[1, ...], I[0, ..., 1], I[None, 1, None, :, 2:0:-1], I[-2:, -3:-1, -1::-3],
           I[5:], I[:, 10:20], I[1:2, 0:3:5], I[:], I[...]]


@pytest.mark.parametrize("idx", INDICES, ids=str)
def test_getitem(idx):
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    check(run(lambda t: t[idx], x), np.asarray(x[idx]))
    # slicing a view of a view
    check(run(lambda t: t.transpose([1, 0, 2])[idx], x), np.asarray(x.transpose(1, 0, 2)[idx]))


def test_getitem_chained_and_iteration():
    check(run(lambda t: t[1:][0][::-1, 1:3][1], X234), X234[1:][0][::-1, 1:3][1])
    outs = run(lambda t: tuple(r.sum() for r in t), X234[0])
    assert isinstance(outs, tuple) and len(outs) == 3
    for got, want in zip(outs, X234[0].sum(axis=1)):
        check(got, np.array(want))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", FLOATS + [np.int32])
def test_concat(axis, dtype):
    a = data((2, 3), dtype, seed=20)
    b = data((2, 3), dtype, seed=21)
    c = data((2, 3), dtype, seed=22)
    check(run(lambda x, y, z: cc.concat([x, y, z], axis=axis), a, b, c),
          np.concatenate([a, b, c], axis=axis))
    check(run(lambda x: cc.concat([x, x[:1]] if axis == 0 else [x, x[:, :1]], axis), a),
          np.concatenate([a, a[:1]] if axis == 0 else [a, a[:, :1]], axis))


def test_concat_promotes():
    a, b = np.ones((1, 2), np.float32), np.zeros((2, 2), np.float64)
    check(run(lambda x, y: cc.concat([x, y]), a, b), np.concatenate([a, b]), np.float64)


# -- creation ----------------------------------------------------------------------------------
def test_to_tensor():
    check(run(lambda: cc.to_tensor([1.0, 2.5])), np.array([1.0, 2.5], np.float32))
    check(run(lambda: cc.to_tensor([[1, 2], [3, 4]])), np.array([[1, 2], [3, 4]], np.int64))
    check(run(lambda: cc.to_tensor(2.0)), np.array(2.0, np.float32))
    check(run(lambda: cc.to_tensor(3)), np.array(3, np.int64))
    check(run(lambda: cc.to_tensor(True)), np.array(True))
    check(run(lambda: cc.to_tensor([1, 2], dtype="float64")), np.array([1.0, 2.0]))
    arr = np.arange(4.0)
    check(run(lambda: cc.to_tensor(arr)), arr)  # numpy arrays keep their dtype
    check(run(lambda: cc.to_tensor(arr, dtype=np.int32)), arr.astype(np.int32))
    # the data is captured (copied) at trace time
    fn = compile_(lambda: cc.to_tensor(arr) + 0.0)
    first, prog = fn(), fn.lower()
    arr[0] = 100.0
    np.testing.assert_array_equal(prog(), first)  # a Program keeps the trace-time copy
    assert fn()[0] == 100.0  # cc.compile retraces when a captured array changed


def test_to_tensor_of_a_tensor_copies():
    x = np.arange(3.0)
    check(run(lambda t: cc.to_tensor(t), x), x)
    check(run(lambda t: cc.to_tensor(t, dtype="int32"), x), x.astype(np.int32))


@pytest.mark.parametrize("dtype", [None, "float32", "float64", "int32", "int64", "bool"])
def test_zeros_ones_full(dtype):
    d = np.float32 if dtype is None else dtype
    check(run(lambda: cc.zeros([2, 3], dtype)), np.zeros((2, 3), d))
    check(run(lambda: cc.ones([4], dtype)), np.ones(4, d))
    check(run(lambda: cc.ones(3, dtype=dtype)), np.ones(3, d))
    check(run(lambda: cc.zeros([], dtype)), np.zeros((), d))
    check(run(lambda: cc.full([2, 2], 1.0, dtype)), np.full((2, 2), 1, d))


def test_full_defaults_to_float32_as_paddle():
    check(run(lambda: cc.full([2], 7)), np.full(2, 7, np.float32))
    check(run(lambda: cc.full([2], 7, "int64")), np.full(2, 7, np.int64))
    check(run(lambda: cc.full([2], 7.5)), np.full(2, 7.5, np.float32))
    check(run(lambda: cc.full([2], True)), np.full(2, True))
    check(run(lambda: cc.full((1, 2), -1.25, "float64")), np.full((1, 2), -1.25))


@pytest.mark.parametrize("args,kw,want", [
    ((5,), {}, np.arange(5)),
    ((2, 9, 3), {}, np.arange(2, 9, 3)),
    ((10, 0, -3), {}, np.arange(10, 0, -3)),
    ((0.0, 1.0, 0.25), {}, np.arange(0, 1, 0.25, dtype=np.float32)),
    ((1, 4), {"dtype": "float64"}, np.arange(1.0, 4.0)),
    ((3,), {"dtype": "int32"}, np.arange(3, dtype=np.int32)),
    ((5, 5), {}, np.arange(5, 5)),
], ids=str)
def test_arange(args, kw, want):
    check(run(lambda: cc.arange(*args, **kw)), want)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_])
def test_like_creation(dtype):
    x = data((2, 3), dtype)
    check(run(lambda t: cc.zeros_like(t), x), np.zeros_like(x))
    check(run(lambda t: cc.ones_like(t), x), np.ones_like(x))
    check(run(lambda t: cc.full_like(t, 1), x), np.full_like(x, 1))
    check(run(lambda t: cc.zeros_like(t, dtype="float64"), x), np.zeros((2, 3)))
    check(run(lambda t: cc.ones_like(t, "int32"), x), np.ones((2, 3), np.int32))


def test_creation_combines_with_inputs():
    x = data((2, 3), np.float32)
    check(run(lambda t: t + cc.ones([3]) * 2.0 + cc.arange(3).cast("float32"), x),
          x + 2.0 + np.arange(3, dtype=np.float32))


# -- compiler.nn.functional ------------------------------------------------------------------------
def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_relu_sigmoid(dtype):
    x = data((3, 4), dtype)
    check(run(F.relu, x), np.maximum(x, 0))
    check(run(F.sigmoid, x), 1 / (1 + np.exp(-x.astype(np.float64))), dtype)
    y = x.copy()
    check(run(F.relu_, y), np.maximum(x, 0))
    np.testing.assert_array_equal(y, np.maximum(x, 0))  # relu_ wrote into the caller's array


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu(approximate, dtype):
    x = data((3, 5), dtype, -4, 4)
    xf = x.astype(np.float64)
    if approximate:
        want = 0.5 * xf * (1 + np.tanh(np.sqrt(2 / np.pi) * (xf + 0.044715 * xf ** 3)))
    else:
        want = 0.5 * xf * (1 + _erf(xf / np.sqrt(2)))
    check(run(lambda t: F.gelu(t, approximate=approximate), x), want, dtype)
    if not approximate:
        check(run(F.gelu, x), want, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_log_softmax(axis, dtype):
    x = data((3, 4), dtype, -5, 5) * 3
    xf = x.astype(np.float64)
    check(run(lambda t: F.softmax(t, axis=axis), x), _softmax(xf, axis), dtype)
    check(run(lambda t: F.log_softmax(t, axis), x), np.log(_softmax(xf, axis)), dtype)
    if axis == -1:
        check(run(F.softmax, x), _softmax(xf, -1), dtype)
        check(run(F.log_softmax, x), np.log(_softmax(xf, -1)), dtype)


def test_softmax_large_logits_are_stable():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]])
    check(run(F.softmax, x), _softmax(x, -1))
    check(run(F.log_softmax, x), x - x.max(-1, keepdims=True)
          - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("label_shape", ["N", "N1"])
@pytest.mark.parametrize("label_dtype", INTS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(reduction, label_dtype, label_shape, dtype):
    logits = data((5, 4), dtype, -3, 3)
    labels = np.array([0, 3, 1, 1, 2], label_dtype)
    lab = labels if label_shape == "N" else labels[:, None]
    xf = logits.astype(np.float64)
    per_row = -np.log(_softmax(xf, -1))[np.arange(5), labels]
    # Paddle: "none" keeps the class axis (size 1) when the labels came with it.
    none = per_row if label_shape == "N" else per_row[:, None]
    want = {"mean": per_row.mean(), "sum": per_row.sum(), "none": none}[reduction]
    check(run(lambda x, y: F.cross_entropy(x, y, reduction=reduction), logits, lab), want,
          dtype)


def test_cross_entropy_default_and_soft_label():
    logits = data((3, 4), np.float64)
    labels = np.array([1, 0, 3])
    want = -np.log(_softmax(logits, -1))[np.arange(3), labels].mean()
    check(run(F.cross_entropy, logits, labels), np.array(want))
    soft = _softmax(data((3, 4), np.float64, seed=5), -1)
    want = -(soft * np.log(_softmax(logits, -1))).sum(-1).mean()
    check(run(lambda x, y: F.cross_entropy(x, y, soft_label=True), logits, soft),
          np.array(want))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction, dtype):
    x, y = data((3, 4), dtype, seed=1), data((3, 4), dtype, seed=2)
    sq = (x.astype(np.float64) - y) ** 2
    want = {"mean": sq.mean(), "sum": sq.sum(), "none": sq}[reduction]
    check(run(lambda a, b: F.mse_loss(a, b, reduction=reduction), x, y), want, dtype)
    if reduction == "mean":
        check(run(F.mse_loss, x, y), want, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
@pytest.mark.parametrize("normalized", [4, [4], [3, 4]], ids=str)
def test_layer_norm(normalized, affine, dtype):
    x = data((2, 3, 4), dtype, seed=3) * 2 + 1
    nshape = [normalized] if isinstance(normalized, int) else normalized
    w = data(nshape, dtype, seed=4)
    b = data(nshape, dtype, seed=5)
    axes = tuple(range(3 - len(nshape), 3))
    xf = x.astype(np.float64)
    mu = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mu) ** 2).mean(axis=axes, keepdims=True)
    want = (xf - mu) / np.sqrt(var + 1e-5)
    use_w = affine in ("weight", "both")
    use_b = affine in ("bias", "both")
    want = want * (w if use_w else 1) + (b if use_b else 0)
    check(run(lambda t, wt, bs: F.layer_norm(t, normalized, wt if use_w else None,
                                              bs if use_b else None), x, w, b), want, dtype)


def test_layer_norm_epsilon():
    x = np.array([[1.0, 1.0, 1.0, 1.0 + 1e-4]])
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    check(run(lambda t: F.layer_norm(t, 4, epsilon=0.1), x), (x - mu) / np.sqrt(var + 0.1))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xshape", [(4,), (2, 4), (3, 2, 4)], ids=str)
def test_linear(xshape, dtype):
    x, w, b = data(xshape, dtype, seed=1), data((4, 5), dtype, seed=2), data((5,), dtype,
                                                                             seed=3)
    xf = x.astype(np.float64)
    check(run(lambda a, ww, bb: F.linear(a, ww, bb), x, w, b), xf @ w + b, dtype)
    check(run(lambda a, ww: F.linear(a, ww), x, w), xf @ w, dtype)


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_dropout(p):
    x = data((20, 30), np.float32, 0.5, 2.0)  # no zeros: a zero in the output means dropped
    fn = compile_(lambda t: F.dropout(t, p=p, seed=7))
    out = fn(x)
    np.testing.assert_array_equal(fn(x), out)        # the same mask every call
    np.testing.assert_array_equal(compile_(lambda t: F.dropout(t, p=p, seed=7))(x), out)
    assert out.dtype == np.float32 and out.shape == x.shape
    kept = out != 0
    if p < 1.0:
        np.testing.assert_allclose(out[kept], x[kept] / (1 - p), rtol=1e-6)
    else:
        assert not kept.any()
    if 0.0 < p < 1.0:
        assert abs((~kept).mean() - p) < 0.1  # 600 elements: the drop rate is near p
        other = compile_(lambda t: F.dropout(t, p=p, seed=8))(x)
        assert not np.array_equal(other != 0, kept)  # another seed, another mask
    if p == 0.0:
        np.testing.assert_array_equal(out, x)


def test_dropout_eval_is_identity():
    x = data((3, 4), np.float64)
    check(run(lambda t: F.dropout(t, 0.5, training=False), x), x)


def conv2d_loops(x, w, b, stride, padding, dilation):
    """Direct convolution (cross-correlation), NCHW / OIHW, with explicit loops."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for bi in range(n):
        for oc in range(o):
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ci in range(c):
                        for u in range(kh):
                            for v in range(kw):
                                acc += xp[bi, ci, i * sh + u * dh, j * sw + v * dw] \
                                    * w[oc, ci, u, v]
                    out[bi, oc, i, j] = acc + (b[oc] if b is not None else 0.0)
    return out


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("stride,padding,dilation,bias", [
    (1, 0, 1, False), (1, 1, 1, True), (2, 0, 1, True), (2, 1, 2, False), ((1, 2), (2, 0), 1,
                                                                             True),
    (1, (0, 1), (2, 1), True), (3, 2, 1, False),
], ids=str)
def test_conv2d(stride, padding, dilation, bias, dtype):
    x = data((2, 3, 7, 6), dtype, seed=30)
    w = data((4, 3, 3, 2), dtype, seed=31)
    b = data((4,), dtype, seed=32)
    want = conv2d_loops(x.astype(np.float64), w.astype(np.float64), b if bias else None,
                        _pair(stride), _pair(padding), _pair(dilation))
    got = run(lambda t, k, c: F.conv2d(t, k, c if bias else None, stride=stride,
                                       padding=padding, dilation=dilation), x, w, b)
    check(got, want, dtype)


def max_pool_loops(x, kernel, stride, padding):
    n, c, h, wd = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    xp = np.full((n, c, h + 2 * ph, wd + 2 * pw), -np.inf)
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw].max(axis=(2, 3))
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kernel,stride,padding", [
    (2, None, 0), (2, 1, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 1)), (3, 1, 1), (2, 2, (0, 1)),
], ids=str)
def test_max_pool2d(kernel, stride, padding, dtype):
    x = data((2, 3, 6, 7), dtype, seed=33) - 5.0  # all negative: padding must not win
    want = max_pool_loops(x.astype(np.float64), _pair(kernel),
                          _pair(kernel if stride is None else stride), _pair(padding))
    check(run(lambda t: F.max_pool2d(t, kernel, stride=stride, padding=padding), x), want,
          dtype)


# -- scalar expressions of elementwise ops --------------------------------------------------
# (`fused` is made by the fusion pass from these ops: tests/passes/test_fusion.py)
ELEMENTWISE_OPS = sorted(n for n, op in REGISTRY.items()
                         if op.kind == ELEMENTWISE and n != "fused")
EXPR_ATTRS = {
    "scale": [dict(scale=2.5, bias=-1.0, bias_after_scale=True),
              dict(scale=-0.5, bias=3.0, bias_after_scale=False)],
    "elu": [dict(alpha=1.0), dict(alpha=-0.5)],
    "leaky_relu": [dict(negative_slope=0.1)],
    "hardtanh": [dict(min=-1.0, max=1.5)],
    "cast": [dict(dtype=np.dtype(d)) for d in ("float32", "float64", "int32", "bool")],
    "broadcast_to": [dict(shape=(2, 2, 5))],
    "gelu": [dict(approximate=False), dict(approximate=True)],
    "gelu_grad": [dict(approximate=False), dict(approximate=True)],
    # one value per row: [2, 1, 1] statistics don't fit the [5] operands of these cases; the
    # expression is checked on the sample database (F.layer_norm)
    "layer_norm": [dict(n=0, weight=True, bias=False)],
    # uint64 operands only: checked bit for bit in tests/compiler/test_random.py
    "philox": [dict(shape=(2, 1, 5), stream=3, dist="uniform", dtype=np.dtype("float32"))],
    # the operand is only the buffer it overwrites (fill_, zero_, x[i] = v)
    "fill": [dict(value=2.0), dict(value=-1.0)],
}
SAMPLES = {
    "float32": np.array([-2.5, -1.0, -0.25, 0.0, 0.5, 1.0, 1.75, 3.0, 2.0, -0.5], np.float32),
    "float64": np.array([-3.0, -1.5, -0.5, 0.0, 0.25, 1.0, 2.0, 2.5, 0.75, -0.75]),
    "int32": np.array([-3, -2, -1, 0, 1, 2, 3, 4, 2, 1], np.int32),
    "int64": np.array([3, -4, 1, 0, 2, -1, 5, 1, 2, 0], np.int64),
    "bool": np.array([True, False, True, True, False, False, True, False, True, False]),
}


def _arity(op):
    if op.name == "fill":  # one operand its expression never reads (the overwritten buffer)
        return 1
    expr = expr_for(op, EXPR_ATTRS.get(op.name, [{}])[0], [np.dtype("float32")] * 3,
                    np.dtype("float32"))

    def top(e):
        return e.value if e.op == "arg" else max([top(a) for a in e.args], default=-1)
    return top(expr) + 1


def _expr_cases():
    for name in ELEMENTWISE_OPS:
        op = REGISTRY[name]
        n = _arity(op)
        for dname in SAMPLES:
            dtypes = [dname] * n
            if name == "where":
                dtypes = ["bool", dname, dname]
            for k, attrs in enumerate(EXPR_ATTRS.get(name, [{}])):
                try:
                    op.infer([((2, 1, 5), np.dtype(d)) for d in dtypes], **attrs)
                except cc.CompilerError:
                    continue  # not defined for these dtypes (bool negative, ...)
                yield pytest.param(name, dtypes, attrs, id=f"{name}-{dname}-{k}")


def _c_evaluate(e, args):
    """`S.evaluate` with the rules of a typed machine, which numpy would hide: integer
    division truncates, and transcendental functions exist for floats only."""
    if e.op in ("arg", "const"):
        return S.evaluate(e, args)
    vals = [_c_evaluate(a, args) for a in e.args]
    is_int = [np.asarray(v).dtype.kind in "iub" for v in vals]
    if e.op == "/" and all(is_int):
        return np.trunc(np.true_divide(*vals)).astype(np.result_type(*vals))
    if e.op in ("exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "erf", "asinh", "acosh",
                "atanh") and is_int[0]:
        raise AssertionError(f"{e.op} applied to an integer operand in {e}")
    shallow = S.Expr(e.op, tuple(S.arg(i) for i in range(len(vals))), e.value)
    return S.evaluate(shallow, vals)


@pytest.mark.parametrize("name,dtypes,attrs", list(_expr_cases()))
def test_scalar_expression_matches_reference(name, dtypes, attrs):
    op = REGISTRY[name]
    # shapes that broadcast: [2,1,5] with [5]
    args = [SAMPLES[d].reshape(2, 1, 5) if i == 0 else SAMPLES[d][::-1][:5].copy()
            for i, d in enumerate(dtypes)]
    out_shape, out_dtype = op.infer([(a.shape, a.dtype) for a in args], **attrs)
    with np.errstate(all="ignore"):
        want = np.asarray(op.ref(*args, **attrs))
        expr = expr_for(op, attrs, [a.dtype for a in args], out_dtype)
        got = np.broadcast_to(np.asarray(S.evaluate(expr, args)).astype(out_dtype), out_shape)
        typed = np.broadcast_to(np.asarray(_c_evaluate(expr, args)).astype(out_dtype),
                                out_shape)
    assert want.shape == tuple(out_shape)
    want = want.astype(out_dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=str(expr))
    np.testing.assert_allclose(typed, want, rtol=1e-6, atol=1e-6, err_msg=str(expr))


@pytest.mark.parametrize("name", ELEMENTWISE_OPS)
def test_every_elementwise_op_has_an_expression(name):
    op = REGISTRY[name]
    attrs = EXPR_ATTRS.get(name, [{}])[0]
    expr = expr_for(op, attrs, [np.dtype("float32")] * 3, np.dtype("float32"))
    assert isinstance(expr, S.Expr), f"elementwise op {name} has no scalar expression"
    if name not in ("scale", "cast", "fill"):  # their expression depends on attrs
        assert op.expr is not None, f"elementwise op {name} has no scalar expression"

    def names(e):
        return {e.op} | set().union(*(names(a) for a in e.args))
    unknown = names(expr) - set(S.FUNCTIONS) - set(S.BINARY_OPERATORS) - {"arg", "const",
                                                                            "cast", "index"}
    assert not unknown, f"{name} uses functions the emitters don't know: {unknown}"
