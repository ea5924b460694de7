"""Trace-time autodiff: every op's VJP against finite differences, both VJP forms, the seed
programs of Paddle's Inplace articles with exact numbers, and which forward values the backward
graph reads.

Composite functions, mixed programs (views, set-item, broadcasting, detach, no_grad, repeated
backward) and an MLP training step are in test_autodiff_programs.py.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from gradcheck import check_grads, forced_vjp_form

import compiler as cc
import compiler.nn.functional as F
from compiler.ops import REGISTRY
from tests.backends import assert_sin_equal

pytestmark = pytest.mark.usefixtures("each_backend")

THIS_FILE = os.path.basename(__file__)
RNG = np.random.default_rng(20240607)


# -- inputs away from kinks ------------------------------------------------------------------
def normal(*shape):
    return RNG.standard_normal(shape)


def positive(*shape):
    return RNG.uniform(0.5, 2.0, shape)


def away_from_zero(*shape, gap=0.2):
    """|x| >= gap: clear of the kinks of abs and relu."""
    return RNG.choice([-1.0, 1.0], shape) * RNG.uniform(gap, 1.5, shape)


def distinct(*shape):
    """Values at least 0.2 apart (no ties for max and max_pool2d)."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.25 - n * 0.125 + RNG.uniform(0, 0.05, n)).reshape(shape)


def clip_input(*shape, lo=-0.5, hi=0.5):
    """Values inside (lo, hi) and outside it, each at least 0.1 from both bounds."""
    centers = RNG.choice([lo - 0.5, (lo + hi) / 2, hi + 0.5], shape)
    return centers + RNG.uniform(-0.35, 0.35, shape) * min(1.0, (hi - lo) / 1.0)


def apart_from(y, *shape):
    """An array that differs from `y` (broadcast to `shape`) by at least 0.2 everywhere."""
    return np.broadcast_to(y, shape) + away_from_zero(*shape)


# -- one or more gradient cases for every differentiable op -----------------------------------
# Each case: (body, arrays). The body's output is weighted by fixed random weights and summed;
# every float array gets a gradient.
def _unary_cases():
    x = normal(3, 4)
    return {
        "neg": [(lambda x: -x, [x]), (lambda x: cc.neg(x), [normal(5)])],
        "abs": [(lambda x: x.abs(), [away_from_zero(3, 4)]),
                (lambda x: abs(x), [away_from_zero(2, 3)])],
        "exp": [(lambda x: x.exp(), [x])],
        "log": [(lambda x: x.log(), [positive(3, 4)])],
        "sin": [(lambda x: x.sin(), [x])],
        "cos": [(lambda x: cc.cos(x), [x])],
        "tan": [(lambda x: x.tan(), [RNG.uniform(-1.2, 1.2, (3, 4))])],
        "tanh": [(lambda x: x.tanh(), [2 * x])],
        "sigmoid": [(lambda x: F.sigmoid(x), [3 * x])],
        "sqrt": [(lambda x: x.sqrt(), [positive(3, 4)])],
        "square": [(lambda x: x.square(), [x])],
        "relu": [(lambda x: F.relu(x), [away_from_zero(3, 4)])],
        "erf": [(lambda x: x.erf(), [x])],
        "asinh": [(lambda x: x.asinh(), [2 * x])],
        "acosh": [(lambda x: cc.acosh(x), [1.0 + positive(3, 4)])],
        "atanh": [(lambda x: x.atanh(), [RNG.uniform(-0.8, 0.8, (3, 4))])],
        "elu": [(lambda x: F.elu(x), [away_from_zero(3, 4)]),
                (lambda x: F.elu(x, alpha=-0.5), [away_from_zero(3, 4)])],
        "leaky_relu": [(lambda x: F.leaky_relu(x, 0.2), [away_from_zero(3, 4)])],
        "hardtanh": [(lambda x: F.hardtanh(x, -0.5, 0.5), [clip_input(4, 5)])],
        "scale": [(lambda x: x.scale(1.5, bias=0.3), [x]),
                  (lambda x: x.scale(-2.0, bias=0.5, bias_after_scale=False), [x])],
        "clip": [(lambda x: x.clip(-0.5, 0.5), [clip_input(4, 5)]),
                 (lambda x: x.clip(min=-0.5), [clip_input(4, 5)]),
                 (lambda x: x.clip(max=0.5), [clip_input(4, 5)])],
        # float64 -> float64: a float32 round trip has no useful finite difference; the dtype
        # handling of cast gradients is tested in test_cast_gradient_has_input_dtype.
        "cast": [(lambda x: x.cast("float64"), [x])],
        "contiguous": [(lambda x: cc.to_tensor(x), [x]),
                       (lambda x: x.t().reshape([-1]), [x])],  # not a view: copies
    }


def _binary_cases():
    y4 = normal(4)
    return {
        "add": [(lambda x, y: x + y, [normal(3, 1), normal(1, 4)]),
                (lambda x, y: x.add(y, alpha=2), [normal(3, 4), normal(4)]),
                (lambda x: 1.5 + x, [normal(3)])],
        "subtract": [(lambda x, y: x - y, [normal(2, 3, 4), normal(4)]),
                     (lambda x, y: x.subtract(y, alpha=3), [normal(3, 4), normal(3, 1)]),
                     (lambda x: 1.5 - x, [normal(3)])],
        "multiply": [(lambda x, y: x * y, [normal(3, 4), normal(3, 4)]),
                     (lambda x, y: x * y, [normal(2, 1, 4), normal(3, 1)]),
                     (lambda x: x * x, [normal(3)])],
        "divide": [(lambda x, y: x / y, [normal(3, 4), away_from_zero(4)]),
                   (lambda x: 2.0 / x, [away_from_zero(3)]),
                   (lambda x: x / x.exp(), [normal(3)])],
        "pow": [(lambda x, y: x.pow(y), [positive(3, 4), normal(3, 4)]),
                (lambda x, y: x ** y, [positive(3, 1), normal(4)]),
                (lambda x: x ** 3, [normal(3, 4)]),
                (lambda x: 2.0 ** x, [normal(3, 4)])],
        # x / y kept 0.1 clear of integers: floor(x / y) is constant around each sample.
        "remainder": [(lambda x, y: x % y, [np.array([[0.35, -1.45, 2.55], [4.2, -0.4, 1.6]]),
                                            np.array([0.5, 1.25, -0.75])])],
        "maximum": [(lambda x, y: x.maximum(y), [apart_from(y4, 3, 4), y4])],
        "minimum": [(lambda x, y: cc.minimum(x, y), [apart_from(y4, 3, 4), y4])],
        "where": [(lambda c, x, y: cc.where(c, x, y),
                   [RNG.random((3, 4)) > 0.5, normal(3, 4), normal(4)]),
                  (lambda x, y: cc.where(x > y, x * 2.0, y), [apart_from(y4, 3, 4), y4])],
        "broadcast_to": [(lambda x: x.broadcast_to([2, 3, 4]), [normal(3, 1)])],
    }


def _reduction_and_matmul_cases():
    return {
        "sum": [(lambda x: x.sum(), [normal(2, 3, 4)]),
                (lambda x: x.sum(axis=1), [normal(2, 3, 4)]),
                (lambda x: x.sum(axis=[0, 2], keepdim=True), [normal(2, 3, 4)])],
        "mean": [(lambda x: x.mean(), [normal(2, 3, 4)]),
                 (lambda x: x.mean(axis=-1), [normal(2, 3, 4)]),
                 (lambda x: x.mean(axis=(0, 1), keepdim=True), [normal(2, 3, 4)])],
        "max": [(lambda x: x.max(), [distinct(2, 3, 4)]),
                (lambda x: x.max(axis=1), [distinct(2, 3, 4)]),
                (lambda x: x.max(axis=(0, 2), keepdim=True), [distinct(2, 3, 4)])],
        "matmul": [(lambda x, y: x @ y, [normal(3, 4), normal(4, 5)]),
                   (lambda x, y: x @ y, [normal(2, 3, 4), normal(4, 5)]),
                   # a batched view under a 2-D weight: its gradient folds the batch
                   (lambda x, y: x.transpose([1, 0, 2]) @ y, [normal(3, 2, 4), normal(4, 5)]),
                   (lambda x, y: x.matmul(y), [normal(2, 1, 3, 4), normal(3, 4, 2)]),
                   (lambda x, y: x @ y, [normal(4), normal(4, 5)]),
                   (lambda x, y: x @ y, [normal(3, 4), normal(4)]),
                   (lambda x, y: x @ y, [normal(4), normal(4)]),
                   (lambda x, y: x.matmul(y, transpose_y=True), [normal(3, 4), normal(5, 4)])],
    }


def _view_cases():
    return {
        "reshape": [(lambda x: x.reshape([4, 3]), [normal(3, 4)]),
                    (lambda x: x.flatten(), [normal(2, 3, 2)]),
                    (lambda x: x.unsqueeze(1).squeeze(), [normal(3, 4)])],
        "transpose": [(lambda x: x.transpose([2, 0, 1]), [normal(2, 3, 4)]),
                      (lambda x: x.t(), [normal(3, 4)])],
        "slice": [(lambda x: x[1:3, ::2], [normal(4, 5)]),
                  (lambda x: x[0], [normal(3, 4)]),
                  (lambda x: x[..., None, 1], [normal(2, 3, 4)]),
                  (lambda x: x[::-1, -2:], [normal(3, 4)])],
        "expand": [(lambda x: x.expand([2, 3, 4]), [normal(3, 1)]),
                   (lambda x: x.expand([-1, 5]), [normal(3, 1)])],
    }


def _setitem(x, y):
    h = x.scale(1.0)
    h[1:3, ::2] = y
    return h


def _setitem_broadcast(x, y):
    h = x.scale(1.0)
    h[1:3] = y  # y: [4], broadcast over the two rows
    return h


def _other_cases():
    return {
        "slice_scatter": [(_setitem, [normal(4, 5), normal(2, 3)]),
                          (_setitem_broadcast, [normal(3, 4), normal(4)]),
                          (lambda x, y: x.slice_scatter(y, (("i", 1), ("s", None, None, None))),
                           [normal(3, 4), normal(4)])],
        "concat": [(lambda x, y, z: cc.concat([x, y, z], axis=1),
                    [normal(2, 1), normal(2, 3), normal(2, 2)]),
                   (lambda x, y: cc.concat([x, y]), [normal(2, 3), normal(1, 3)])],
        "gelu": [(lambda x: F.gelu(x), [2 * normal(3, 4)]),
                 (lambda x: F.gelu(x, approximate=True), [2 * normal(3, 4)])],
        # through the row statistics too: x, the weight and the bias all get gradients
        "layer_norm": [(lambda x, w, b: F.layer_norm(x, 4, w, b),
                        [normal(3, 4), normal(4), normal(4)]),
                       (lambda x: F.layer_norm(x, [2, 3]), [normal(2, 2, 3)])],
        "softmax": [(lambda x: F.softmax(x), [normal(3, 4)]),
                    (lambda x: F.softmax(x, axis=0), [normal(3, 4)])],
        "log_softmax": [(lambda x: F.log_softmax(x), [normal(3, 4)]),
                        (lambda x: F.log_softmax(x, axis=0), [normal(3, 4)])],
        "conv2d": [(lambda x, w: F.conv2d(x, w), [normal(2, 2, 5, 5), normal(3, 2, 3, 3)]),
                   (lambda x, w: F.conv2d(x, w, stride=2, padding=1, dilation=2),
                    [normal(1, 2, 6, 7), normal(2, 2, 2, 3)])],
        "gemm": [(lambda c, x, y: c.addmm(x, y, beta=0.5, alpha=-2.0),
                  [normal(3, 5), normal(3, 4), normal(4, 5)]),
                 (lambda x, y, c: x.primitive("gemm", y, c, alpha=1.5, beta=1.0, trans_a=True,
                                              trans_b=True),
                  [normal(4, 3), normal(5, 4), normal(3, 5)])],
        "max_pool2d": [(lambda x: F.max_pool2d(x, 2), [distinct(2, 2, 4, 4)]),
                       (lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
                        [distinct(1, 2, 5, 6)])],
    }


def _issue10_cases():
    frac = RNG.integers(-3, 3, (3, 4)) + RNG.uniform(0.1, 0.4, (3, 4))  # clear of the jumps
    idx = np.array([2, 0, 2, 1])
    return {
        "floor": [(lambda x: x.floor() * x, [frac])],
        "ceil": [(lambda x: x.ceil() * x, [frac])],
        "round": [(lambda x: x.round() * x, [frac])],
        "trunc": [(lambda x: x.trunc() * x, [frac])],
        "reciprocal": [(lambda x: x.reciprocal(), [away_from_zero(3, 4)])],
        "rsqrt": [(lambda x: x.rsqrt(), [positive(3, 4)])],
        "expm1": [(lambda x: x.expm1(), [normal(3, 4)])],
        "log1p": [(lambda x: x.log1p(), [positive(3, 4)])],
        "log2": [(lambda x: x.log2(), [positive(3, 4)])],
        "log10": [(lambda x: x.log10(), [positive(3, 4)])],
        "sinh": [(lambda x: x.sinh(), [normal(3, 4)])],
        "cosh": [(lambda x: x.cosh(), [normal(3, 4)])],
        "asin": [(lambda x: (x * 0.3).asin(), [normal(3, 4)])],
        "acos": [(lambda x: (x * 0.3).acos(), [normal(3, 4)])],
        "atan": [(lambda x: x.atan(), [normal(3, 4)])],
        "lerp": [(lambda x, y, w: x.lerp(y, w), [normal(3, 4), normal(4), normal(3, 1)])],
        "min": [(lambda x: x.min(axis=1), [distinct(2, 3, 4)])],
        "prod": [(lambda x: x.prod(axis=-1), [normal(2, 3, 4)]),
                 (lambda x: x.prod(), [normal(2, 3)])],
        "cumsum": [(lambda x: x.cumsum(1), [normal(2, 3, 4)]),
                   (lambda x: x.cumsum(), [normal(2, 3)])],
        "index_select": [(lambda x: x.index_select(idx, 1), [normal(2, 3)])],
        "index_add": [(lambda x, v: x.index_add(idx, 0, v), [normal(3, 2), normal(4, 2)])],
        "take_along_axis": [(lambda x: x.take_along_axis(np.array([[0, 2], [1, 1]]), 1),
                             [normal(2, 3)])],
        "put_along_axis": [(lambda x, v: x.put_along_axis(np.array([[0, 2], [1, 0]]), v, 1),
                            [normal(2, 3), normal(2, 2)]),
                           (lambda x, v: x.put_along_axis(np.array([[0, 0]]), v, 1, "add"),
                            [normal(2, 3), normal(2, 2)])],
    }


CASES: dict[str, list] = {}
for _table in (_unary_cases(), _binary_cases(), _reduction_and_matmul_cases(), _view_cases(),
               _other_cases(), _issue10_cases()):
    CASES.update(_table)

DIFFERENTIABLE = sorted(name for name, op in REGISTRY.items() if op.differentiable)
# The autodiff pass is the same on every backend: each case runs on numpy; a native backend
# runs each op's first case in each form in the default run, its other cases (other shapes
# and attributes through the same kernels; conv2d's and max_pool2d's cost seconds each) in the
# slow run.
OP_CASES = [pytest.param(op, k, form, id=f"{op}-{k}-{form}",
                         marks=[pytest.mark.slow_on("cpu")] if k else [])
            for op in sorted(CASES) for k in range(len(CASES[op]))
            for form in REGISTRY[op].vjp]


def test_every_differentiable_op_has_a_gradient_case():
    missing = [op for op in DIFFERENTIABLE if not CASES.get(op)]
    assert not missing, f"differentiable ops without a gradient test case: {missing}"
    unknown = [op for op in CASES if op not in DIFFERENTIABLE]
    assert not unknown, f"gradient cases for ops that are not differentiable: {unknown}"


@pytest.mark.parametrize("op, k, form", OP_CASES)
def test_op_gradient_matches_finite_differences(op, k, form):
    """Each VJP form of each op, forced on every node of that op."""
    body, arrays = CASES[op][k]
    graph = cc.trace(body, *arrays)
    assert op in {n.op for n in graph.nodes}, f"case {k} of {op} doesn't emit {op}"
    with forced_vjp_form(op, form) as used:
        check_grads(body, *arrays)
    assert used, f"the backward pass never differentiated {op}"


TWO_FORM_OPS = sorted(name for name, op in REGISTRY.items() if {"input", "output"} <= set(op.vjp))


def test_two_form_ops_are_the_ones_the_design_names():
    # ARCHITECTURE.md §4: exp, sigmoid, tanh, relu, sqrt can be written either way (tan too).
    assert {"exp", "sigmoid", "tanh", "relu", "sqrt"} <= set(TWO_FORM_OPS)


def _two_form_input(op):
    """Inputs of `x * 1.5` for `op`: positive for sqrt and rsqrt, clear of tan's poles and
    relu's kink."""
    if op in ("sqrt", "rsqrt"):
        return positive(3, 4)
    if op == "tan":
        return away_from_zero(3, 4, gap=0.1) * 0.6
    return away_from_zero(3, 4)


@pytest.mark.parametrize("op", TWO_FORM_OPS)
def test_inplace_unary_on_intermediate_reads_output(op):
    """`h.op_()` overwrites the op's input: the backward reads the output (natural choice)."""
    x = _two_form_input(op)

    def body(x):
        h = x * 1.5
        getattr(h, op + "_")()
        return h

    check_grads(body, x)
    graph = cc.trace(lambda x: _backward_of(body, x), x)
    fwd = _only(graph, op)
    assert fwd.inplace_of == 0
    reads = _backward_reads(graph, fwd)
    assert fwd.out in reads and fwd.inputs[0] not in reads


@pytest.mark.parametrize("op", TWO_FORM_OPS)
def test_unary_whose_output_is_overwritten_reads_input(op):
    """`y = op(x); y.add_(1)` overwrites the output: the backward reads the input."""
    x = _two_form_input(op)

    def body(x):
        h = x * 1.5
        y = getattr(h, op)()
        y.add_(1.0)
        return y * h

    check_grads(body, x)
    graph = cc.trace(lambda x: _backward_of(body, x), x)
    fwd = _only(graph, op)
    reads = _backward_reads(graph, fwd)
    assert fwd.inputs[0] in reads and fwd.out not in reads


def test_cast_gradient_has_input_dtype():
    def f(x):
        x.stop_gradient = False
        y = x.cast("float32") * 3.0
        y.sum().backward()
        return x.grad

    x = normal(2, 3)
    g = cc.compile(f)(x)
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g, np.full((2, 3), 3.0))


def test_max_ties_share_the_gradient():
    def f(x):
        x.stop_gradient = False
        x.max(axis=1).sum().backward()
        return x.grad

    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    np.testing.assert_array_equal(cc.compile(f)(x),
                                  [[0, 0.5, 0.5, 0], [0.25, 0.25, 0.25, 0.25]])


def test_non_differentiable_ops_pass_no_gradient():
    def f(x):
        x.stop_gradient = False
        y = x * x.sign() + (x > 0).cast("float64") + x.abs().greater_than(x).cast("float64")
        y.sum().backward()
        return x.grad

    x = away_from_zero(3, 4)
    np.testing.assert_array_equal(cc.compile(f)(x), np.sign(x))


# -- the seed programs, exact numbers ---------------------------------------------------------
A = normal(2, 3)


def test_seed_scale_then_scale_inplace_grad_is_4():
    def f(a):
        a.stop_gradient = False
        x = a.scale(2.0)
        y = x.scale_(2.0)
        assert y is x
        y.backward()
        return a.grad, y

    grad, y = cc.compile(f)(A.copy())
    np.testing.assert_array_equal(grad, np.full(A.shape, 4.0))
    np.testing.assert_array_equal(y, 4.0 * A)


def test_seed_sin_then_sin_inplace():
    def f(a):
        a.stop_gradient = False
        x = cc.sin(a)
        y = x.sin_()
        y.backward()
        return a.grad

    np.testing.assert_allclose(cc.compile(f)(A.copy()), np.cos(np.sin(A)) * np.cos(A),
                               rtol=1e-15)


def test_seed_add_inplace_after_sin():
    def f(x):
        x.stop_gradient = False
        y = cc.sin(x)
        y += 1.0
        (y ** 2).sum().backward()
        return x.grad

    np.testing.assert_allclose(cc.compile(f)(A.copy()), 2 * (np.sin(A) + 1) * np.cos(A),
                               rtol=1e-15)


def test_seed_programs_in_examples_pass():
    from examples.seeds import SEEDS
    for title, fn, args, check in SEEDS:
        if "backward" not in title:
            continue
        out = cc.compile(fn)(*[a.copy() for a in args])
        assert check(out, *args), title


@pytest.mark.parametrize("method, args", [("sin_", ()), ("scale_", (2.0,)), ("relu_", ()),
                                          ("add_", (1.0,)), ("zero_", ())])
def test_inplace_on_leaf_that_needs_grad_is_an_error(method, args):
    def f(a):
        a.stop_gradient = False
        getattr(a, method)(*args)  # the line the error must name
        return a

    line = f.__code__.co_firstlineno + 2
    with pytest.raises(cc.InplaceError) as err:
        cc.trace(f, A.copy())
    msg = str(err.value)
    assert "leaf tensor 'a' that doesn't stop gradient can't use inplace strategy" in msg
    assert f"{THIS_FILE}:{line}" in msg
    assert isinstance(err.value, ValueError) and isinstance(err.value, cc.CompilerError)


def test_setitem_on_leaf_that_needs_grad_is_an_error():
    def f(a):
        a.stop_gradient = False
        a[0] = 1.0
        return a

    with pytest.raises(cc.InplaceError, match="leaf tensor 'a' that doesn't stop gradient"):
        cc.trace(f, A.copy())


def test_inplace_on_view_of_leaf_that_needs_grad_is_an_error():
    def f(a):
        a.stop_gradient = False
        a.reshape([6]).scale_(2.0)
        return a

    with pytest.raises(cc.InplaceError, match="leaf tensor 'a' that doesn't stop gradient"):
        cc.trace(f, A.copy())


@pytest.mark.parametrize("method, args, expect", [
    ("sin_", (), np.sin), ("scale_", (2.0,), lambda a: 2.0 * a)])
def test_inplace_on_leaf_is_allowed_under_no_grad(method, args, expect, each_backend):
    def f(a):
        a.stop_gradient = False
        with cc.no_grad():
            getattr(a, method)(*args)
        return a

    a = A.copy()
    out = cc.compile(f)(a)
    assert_sin_equal(a, expect(A), each_backend)  # the caller's array holds the new value
    assert_sin_equal(out, expect(A), each_backend)


def test_inplace_on_leaf_with_stop_gradient_is_allowed(each_backend):
    def f(a):
        a.sin_()
        return a

    a = A.copy()
    cc.compile(f)(a)
    assert_sin_equal(a, np.sin(A), each_backend)


# -- which forward values the backward graph reads ------------------------------------------
def _backward_of(body, *xs):
    for x in xs:
        x.stop_gradient = False
    body(*xs).sum().backward()
    return [x.grad for x in xs]


def _only(graph, op, phase="forward"):
    nodes = [n for n in graph.nodes if n.op == op and n.phase == phase]
    assert len(nodes) == 1, (op, nodes)
    return nodes[0]


def _backward_reads(graph, fwd):
    """The values that the backward nodes of forward node `fwd` read."""
    nodes = [n for n in graph.nodes if n.grad_of is fwd]
    assert nodes, f"no backward node for {fwd}"
    return {v for n in nodes for v in n.inputs}


def _forward_values(graph):
    return set(graph.inputs) | {n.out for n in graph.nodes if n.phase == "forward"}


@pytest.mark.parametrize("method", ["relu_", "exp_", "sigmoid_", "tanh_", "sqrt_"])
def test_inplace_activation_backward_reads_output_not_overwritten_input(method):
    def f(x, w):
        w.stop_gradient = False
        h = x @ w
        getattr(h, method)()
        h.sum().backward()
        return w.grad

    graph = cc.trace(f, positive(2, 3), positive(3, 4))
    fwd = _only(graph, method[:-1])
    assert fwd.inplace_of == 0
    overwritten = fwd.inputs[0]
    reads = _backward_reads(graph, fwd)
    assert fwd.out in reads
    backward = [n for n in graph.nodes if n.phase == "backward"]
    assert not any(overwritten in n.inputs for n in backward), \
        "the backward pass reads the value the inplace activation overwrote"


def test_relu_inplace_through_functional():
    def f(x, w):
        w.stop_gradient = False
        F.relu_(x @ w).sum().backward()
        return w.grad

    x, w = normal(2, 3), normal(3, 4)
    graph = cc.trace(f, x, w)
    fwd = _only(graph, "relu")
    assert _backward_reads(graph, fwd) & _forward_values(graph) == {fwd.out}
    np.testing.assert_allclose(cc.compile(f)(x, w), x.T @ ((x @ w) > 0).astype(float),
                               rtol=1e-14)


def test_exp_whose_output_is_overwritten_reads_input():
    def f(x):
        x.stop_gradient = False
        y = cc.exp(x)
        y.add_(1.0)
        y.sum().backward()
        return x.grad

    x = normal(2, 3)
    graph = cc.trace(f, x)
    fwd = _only(graph, "exp")
    assert _backward_reads(graph, fwd) & _forward_values(graph) == {x_value(graph)}
    np.testing.assert_allclose(cc.compile(f)(x), np.exp(x), rtol=1e-15)


def test_exp_whose_output_is_overwritten_through_a_view_reads_input():
    """`y[0] = 0` writes into exp's output buffer as much as `y.add_(1)` does."""
    def f(x):
        x.stop_gradient = False
        y = cc.exp(x)
        y[0] = 0.0
        y.sum().backward()
        return x.grad

    x = normal(2, 3)
    graph = cc.trace(f, x)
    fwd = _only(graph, "exp")
    assert _backward_reads(graph, fwd) & _forward_values(graph) == {x_value(graph)}
    expect = np.exp(x)
    expect[0] = 0.0
    np.testing.assert_allclose(cc.compile(f)(x), expect, rtol=1e-15)


def x_value(graph):
    return graph.inputs[0]


def test_scale_inplace_backward_reads_no_forward_value():
    def f(a):
        a.stop_gradient = False
        x = a * 3.0
        x.scale_(2.0)
        x.sum().backward()
        return a.grad

    graph = cc.trace(f, A.copy())
    fwd = _only(graph, "scale")
    assert fwd.inplace_of == 0
    assert not _backward_reads(graph, fwd) & _forward_values(graph) - _constants(graph)
    np.testing.assert_array_equal(cc.compile(f)(A.copy()), np.full(A.shape, 6.0))


def _constants(graph):
    return {n.out for n in graph.nodes if n.op in ("full", "constant")}


def test_sin_inplace_keeps_the_overwritten_input_for_backward():
    """sin has only an input form: the backward reads the value sin_ overwrote (SSA keeps
    it; the plan keeps a copy)."""
    def f(a):
        a.stop_gradient = False
        x = cc.sin(a)
        x.sin_()
        x.sum().backward()
        return a.grad

    graph = cc.trace(f, A.copy())
    sin_nodes = [n for n in graph.nodes if n.op == "sin" and n.phase == "forward"]
    first, second = sin_nodes
    assert second.inplace_of == 0 and second.inputs[0] is first.out
    assert first.out in _backward_reads(graph, second)


def mlp_step(x, labels, w1, b1, w2, b2):
    for p in (w1, b1, w2, b2):
        p.stop_gradient = False
    h = x @ w1 + b1
    h.relu_()
    loss = F.cross_entropy(h @ w2 + b2, labels)
    loss.backward()
    with cc.no_grad():
        for p in (w1, b1, w2, b2):
            p.subtract_(0.1 * p.grad)
    return loss


def _mlp_args():
    return (normal(4, 3), np.array([0, 2, 1, 2]), normal(3, 5), normal(5), normal(5, 3),
            normal(3))


def test_backward_nodes_carry_phase_grad_of_and_source_line():
    graph = cc.trace(mlp_step, *_mlp_args())
    phases = [n.phase for n in graph.nodes]
    # forward, then backward, then the update: one contiguous block each.
    assert phases == sorted(phases, key=["forward", "backward", "update"].index)
    backward = [n for n in graph.nodes if n.phase == "backward"]
    assert backward
    for n in graph.nodes:
        if n.phase == "backward":
            assert n.grad_of is not None, f"backward node {n} has no grad_of"
            assert n.grad_of.phase == "forward"
            assert n.loc == n.grad_of.loc, n
        else:
            assert n.grad_of is None, n
    differentiated = {n.grad_of for n in backward}
    for op in ("matmul", "add", "relu", "log_softmax", "multiply", "sum", "divide"):
        assert any(n.op == op for n in differentiated), op
    # The user's lines, not ours.
    assert all(n.loc.file == __file__ for n in graph.nodes)


def test_update_phase_reads_the_gradients():
    graph = cc.trace(mlp_step, *_mlp_args())
    update = [n for n in graph.nodes if n.phase == "update"]
    assert sum(n.op == "subtract" and n.inplace_of == 0 for n in update) == 4
    assert set(graph.mutations) == {2, 3, 4, 5}
