"""Trace-time autodiff on whole programs: composite functions, views, set-item, broadcasting,
inplace ops on intermediates and on their views, detach / stop_gradient / no_grad, non-scalar
roots, explicit and repeated backward(), and an MLP training step against hand-written numpy.
Every compiled program runs on each backend (`each_backend`).
"""
from __future__ import annotations

import numpy as np
import pytest
from gradcheck import Reference, check_grads

import compiler as cc
import compiler.nn.functional as F

pytestmark = pytest.mark.usefixtures("each_backend")

RNG = np.random.default_rng(77)


def normal(*shape):
    return RNG.standard_normal(shape)


def distinct(*shape):
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.25 - n * 0.125 + RNG.uniform(0, 0.05, n)).reshape(shape)


def run(fn, *arrays):
    return cc.compile(fn)(*arrays)


def reference(fn, *arrays):
    return Reference(fn, *arrays)(*arrays)


# -- composites vs finite differences ---------------------------------------------------------
COMPOSITES = {
    "gelu": (lambda x: F.gelu(x), [normal(3, 4)]),
    "gelu_approximate": (lambda x: F.gelu(x, approximate=True), [normal(3, 4)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, 4, w, b), [normal(3, 4), normal(4),
                                                              normal(4)]),
    "layer_norm_2d_shape": (lambda x: F.layer_norm(x, [3, 4]), [normal(2, 3, 4)]),
    "cross_entropy": (lambda x, y: F.cross_entropy(x, y), [normal(4, 5),
                                                           np.array([0, 4, 2, 2])]),
    "cross_entropy_labels_n1_sum": (lambda x, y: F.cross_entropy(x, y, reduction="sum"),
                                    [normal(4, 5), np.array([[1], [3], [0], [3]])]),
    "cross_entropy_none": (lambda x, y: F.cross_entropy(x, y, reduction="none"),
                           [normal(3, 4), np.array([3, 0, 1], dtype=np.int32)]),
    "cross_entropy_soft": (lambda x, p: F.cross_entropy(x, F.softmax(p), soft_label=True),
                           [normal(3, 4), normal(3, 4)]),
    "softmax": (lambda x: F.softmax(x * 2.0 + 1.0, axis=1), [normal(2, 3, 4)]),
    "log_softmax": (lambda x: F.log_softmax(x.t()), [normal(3, 4)]),
    "linear": (lambda x, w, b: F.linear(x, w, b), [normal(3, 4), normal(4, 2), normal(2)]),
    "linear_no_bias": (lambda x, w: F.linear(x, w), [normal(2, 3, 4), normal(4, 2)]),
    "mse_loss": (lambda x, y: F.mse_loss(x, y), [normal(3, 4), normal(3, 4)]),
    "mse_loss_sum": (lambda x, y: F.mse_loss(x, y, reduction="sum"), [normal(3, 4),
                                                                      normal(3, 4)]),
    "conv2d_bias": (lambda x, w, b: F.conv2d(x, w, b), [normal(2, 2, 4, 4), normal(3, 2, 3, 3),
                                                        normal(3)]),
    "conv2d_stride": (lambda x, w: F.conv2d(x, w, stride=2), [normal(1, 2, 5, 6),
                                                              normal(2, 2, 3, 2)]),
    "conv2d_padding": (lambda x, w: F.conv2d(x, w, padding=(1, 2)), [normal(1, 2, 4, 4),
                                                                     normal(2, 2, 3, 3)]),
    "conv2d_dilation": (lambda x, w: F.conv2d(x, w, dilation=2), [normal(1, 1, 6, 5),
                                                                  normal(2, 1, 2, 2)]),
    "conv2d_all": (lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1,
                                            dilation=(1, 2)),
                   [normal(2, 2, 5, 5), normal(2, 2, 3, 2), normal(2)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [distinct(2, 2, 4, 4)]),
    "max_pool2d_stride_padding": (lambda x: F.max_pool2d(x, (2, 3), stride=(1, 2), padding=1),
                                  [distinct(1, 2, 5, 5)]),
    "conv_relu_pool": (lambda x, w: F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2),
                       [distinct(1, 1, 4, 4) / 4, distinct(2, 1, 3, 3) / 10]),
    "dropout": (lambda x: F.dropout(x, 0.5, seed=3), [normal(4, 5)]),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composite_gradient_matches_finite_differences(name):
    body, arrays = COMPOSITES[name]
    check_grads(body, *arrays)


def test_conv_relu_pool_inputs_are_clear_of_kinks():
    # The FD check above is only meaningful if no conv output sits on relu's kink and no pool
    # window has a tie.
    x, w = COMPOSITES["conv_relu_pool"][1]
    out = run(lambda x, w: F.conv2d(x, w, padding=1), x, w)
    assert np.abs(out).min() > 1e-3
    windows = np.maximum(out, 0).reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    top2 = np.sort(windows.reshape(1, 2, 2, 2, 4), axis=-1)[..., -2:]
    assert (top2[..., 1] - top2[..., 0]).min() > 1e-3


def test_cross_entropy_gradient_is_softmax_minus_one_hot():
    def f(x, y):
        x.stop_gradient = False
        F.cross_entropy(x, y).backward()
        return x.grad

    x, y = normal(4, 5), np.array([0, 4, 2, 2])
    p = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    np.testing.assert_allclose(run(f, x, y), (p - np.eye(5)[y]) / 4, rtol=1e-13, atol=1e-16)


# -- views, set-item, broadcasting, inplace on intermediates and their views ------------------
def views_chain(x):
    h = x * 2.0
    v = h.reshape([3, 4]).t()[1:3]
    return v.sin() + h.unsqueeze(0).expand([2, 12]).sum(axis=0)[:6].reshape([3, 2]).t()


def setitem_computed(x, y):
    h = x.exp()
    h[1:3] = y.sin() * 2.0
    return h * x


def setitem_scalar_and_broadcast(x, y):
    h = x * 1.0
    h[0] = 0.0
    h[1:, 2] = y          # y: [2]
    h[2] = y.sum()        # a 0-d value broadcast over a row
    return h


def setitem_overlapping(x):
    h = x * 1.0
    h[0:2] = h[1:3]       # reads before it writes
    return h * h


def inplace_on_intermediates(x, y):
    h = x * y
    h.add_(x)
    h.multiply_(y)
    h += 1.0
    h /= y
    h.subtract_(x, alpha=2)
    h.exp_()
    return h


def inplace_on_views_of_intermediates(x):
    h = x * 1.0
    h[0].sin_()
    h.t()[1:3].exp_()
    h.reshape([12])[::2].scale_(3.0)
    h[1:, 1:].tanh_()
    return h


def inplace_view_then_use_both(x, y):
    h = x.exp()
    v = h[1:]
    v.multiply_(y)        # through the view: h changes too
    return h * v.sum()


def old_view_sees_new_base(x):
    h = x * 1.0
    v = h[0:2]
    h.sin_()              # v re-derives from the new base
    return v * h[1:3]


def meta_inplace(x):
    h = x * 1.0
    h.transpose_([1, 0])
    h.reshape_([2, 6])
    h.unsqueeze_(0)
    return h.sin()


def set_item_on_transposed_view(x, y):
    h = x.exp()
    h.t()[1] = y
    return h


def relu_inplace_chain(x, w):
    h = x @ w
    F.relu_(h)
    h.sigmoid_()
    return h


PROGRAMS = {
    "views_chain": (views_chain, [normal(12)]),
    "setitem_computed": (setitem_computed, [normal(4, 3), normal(2, 3)]),
    "setitem_scalar_and_broadcast": (setitem_scalar_and_broadcast, [normal(3, 4), normal(2)]),
    "setitem_overlapping": (setitem_overlapping, [normal(3, 4)]),
    "inplace_on_intermediates": (inplace_on_intermediates,
                                 [normal(3, 4) * 0.3, RNG.uniform(0.5, 1.5, (4,))]),
    "inplace_on_views_of_intermediates": (inplace_on_views_of_intermediates, [normal(3, 4)]),
    "inplace_view_then_use_both": (inplace_view_then_use_both, [normal(3, 4), normal(4)]),
    "old_view_sees_new_base": (old_view_sees_new_base, [normal(3, 4)]),
    "meta_inplace": (meta_inplace, [normal(3, 4)]),
    "set_item_on_transposed_view": (set_item_on_transposed_view, [normal(3, 4), normal(3)]),
    "relu_inplace_chain": (relu_inplace_chain, [normal(3, 4), normal(4, 5)]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_gradient_matches_finite_differences(name):
    body, arrays = PROGRAMS[name]
    check_grads(body, *arrays)


@pytest.mark.backends("numpy")  # (runs no backend: the traced graph, interpreted)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_gradient_in_the_reference_interpreter_matches_finite_differences(name):
    body, arrays = PROGRAMS[name]
    check_grads(body, *arrays, executor="reference")


def test_program_values_match_numpy():
    """The programs above compute what eager numpy computes (so the FD check checks the
    right function)."""
    (x,) = PROGRAMS["inplace_on_views_of_intermediates"][1]
    h = x.copy()
    h[0] = np.sin(h[0])
    h.T[1:3] = np.exp(h.T[1:3])
    h.reshape(12)[::2] *= 3.0
    h[1:, 1:] = np.tanh(h[1:, 1:])
    np.testing.assert_allclose(reference(inplace_on_views_of_intermediates, x), h, rtol=1e-15)

    x, y = PROGRAMS["setitem_scalar_and_broadcast"][1]
    h = x.copy()
    h[0] = 0.0
    h[1:, 2] = y
    h[2] = y.sum()
    np.testing.assert_array_equal(run(setitem_scalar_and_broadcast, x, y), h)

    (x,) = PROGRAMS["setitem_overlapping"][1]
    h = x.copy()
    h[0:2] = x[1:3].copy()
    np.testing.assert_array_equal(run(setitem_overlapping, x), h * h)


def test_broadcast_gradients_are_reduced_to_input_shapes():
    def f(a, b):
        a.stop_gradient = False
        b.stop_gradient = False
        (a + b).backward()        # [3, 4] root: ones gradient
        ((a * b) * 2.0).sum().backward()
        return a.grad, b.grad

    a, b = normal(3, 1), normal(1, 4)
    ga, gb = run(f, a, b)
    assert ga.shape == (3, 1) and gb.shape == (1, 4)
    np.testing.assert_allclose(ga, 4.0 + 2.0 * b.sum(), rtol=1e-14)
    np.testing.assert_allclose(gb, 3.0 + 2.0 * a.sum(), rtol=1e-14)


def test_broadcast_gradient_to_0d_and_leading_dims():
    def f(s, v, m):
        for t in (s, v, m):
            t.stop_gradient = False
        (s * v + m).sum().backward()
        return s.grad, v.grad, m.grad

    s, v, m = np.array(1.5), normal(4), normal(2, 3, 4)
    gs, gv, gm = run(f, s, v, m)
    assert gs.shape == () and gv.shape == (4,) and gm.shape == (2, 3, 4)
    np.testing.assert_allclose(gs, 6 * v.sum(), rtol=1e-14)
    np.testing.assert_allclose(gv, np.full(4, 6 * 1.5))
    np.testing.assert_array_equal(gm, np.ones((2, 3, 4)))


# -- detach, stop_gradient, no_grad -------------------------------------------------------------
X = normal(3, 4)


def test_detach_blocks_the_gradient():
    def f(x):
        x.stop_gradient = False
        d = x.detach()
        assert d.stop_gradient and not x.stop_gradient
        (x * d).sum().backward()
        return x.grad

    np.testing.assert_array_equal(run(f, X), X)


def test_detach_of_intermediate():
    def f(x):
        x.stop_gradient = False
        h = x.exp()
        (h.detach() * h + h.detach().sin()).sum().backward()
        return x.grad

    np.testing.assert_allclose(run(f, X), np.exp(X) * np.exp(X), rtol=1e-15)


def test_stop_gradient_on_intermediate_cuts_the_graph():
    def f(x):
        x.stop_gradient = False
        h = x * 2.0
        h.stop_gradient = True
        (h * x).sum().backward()
        return x.grad

    np.testing.assert_array_equal(run(f, X), 2.0 * X)


def test_inputs_default_to_stop_gradient():
    def f(x, y):
        x.stop_gradient = False
        assert y.stop_gradient and y.grad is None
        (x * y).sum().backward()
        return x.grad, y.grad

    gx, gy = run(f, X, X + 1.0)
    np.testing.assert_array_equal(gx, X + 1.0)
    assert gy is None


def test_stop_gradient_false_on_a_constant_makes_a_leaf():
    def f(x):
        h = x * 2.0            # x doesn't need a gradient: h is a plain value...
        h.stop_gradient = False  # ...until it is marked: a new leaf
        c = cc.to_tensor(np.arange(3.0), stop_gradient=False)
        (h * h).sum().backward()
        (c * c).sum().backward()
        return h.grad, c.grad

    gh, gc = run(f, X)
    np.testing.assert_array_equal(gh, 4.0 * X)
    np.testing.assert_array_equal(gc, 2.0 * np.arange(3.0))


def test_no_grad_records_no_gradient():
    def f(x):
        x.stop_gradient = False
        with cc.no_grad():
            c = x * 3.0
            assert c.stop_gradient
        assert not (x * 1.0).stop_gradient
        (c * x).sum().backward()
        return x.grad

    np.testing.assert_array_equal(run(f, X), 3.0 * X)


def test_backward_of_value_that_needs_no_gradient_is_a_trace_error():
    def f(x):
        (x * 2.0).sum().backward()
        return x

    with pytest.raises(cc.TraceError, match="doesn't require gradients"):
        cc.trace(f, X)


def test_grad_of_unreached_leaf_is_none():
    def f(x, y):
        x.stop_gradient = False
        y.stop_gradient = False
        (x * 2.0).sum().backward()
        return x.grad, y.grad

    gx, gy = run(f, X, X.copy())  # the same array twice would be one leaf
    np.testing.assert_array_equal(gx, np.full(X.shape, 2.0))
    assert gy is None


def test_inplace_through_detached_view_keeps_the_base_history():
    """PyTorch: a write through `x.detach()` changes x's data, not its history."""
    def f(a):
        a.stop_gradient = False
        x = a * 2.0
        d = x.detach()
        d.add_(1.0)
        (x * 3.0).sum().backward()
        return x, a.grad

    x, g = run(f, X)
    np.testing.assert_array_equal(x, 2.0 * X + 1.0)
    np.testing.assert_array_equal(g, np.full(X.shape, 6.0))


def test_inplace_through_detached_view_with_differentiable_operand():
    """`d.add_(y)`: d gets y's history; x's data changes but its gradient still flows to a."""
    def f(a, y):
        a.stop_gradient = False
        y.stop_gradient = False
        x = a * 2.0
        d = x.detach()
        d.add_(y)
        (x * 3.0 + d * d).sum().backward()
        return a.grad, y.grad

    ga, gy = run(f, X, X + 1.0)
    np.testing.assert_array_equal(ga, np.full(X.shape, 6.0))
    np.testing.assert_allclose(gy, 2 * (2.0 * X + X + 1.0), rtol=1e-15)


def test_parameter_init_through_detach_keeps_the_leaf():
    """PyTorch's `w.detach().zero_()` idiom: allowed on a leaf that needs a gradient."""
    def f(x, w):
        w.stop_gradient = False
        w.detach()[0].fill_(2.0)
        (x * w).sum().backward()
        return w.grad

    x, w = normal(3, 4), normal(3, 4)
    w_new = w.copy()
    w_new[0] = 2.0
    np.testing.assert_array_equal(run(f, x, w), x)
    np.testing.assert_array_equal(w, w_new)


def test_no_grad_write_on_intermediate_keeps_its_history():
    def f(a):
        a.stop_gradient = False
        x = a * 2.0
        with cc.no_grad():
            x.add_(1.0)
            x[0] = 0.0
        assert not x.stop_gradient
        (x * x).sum().backward()
        return a.grad

    x = 2.0 * X + 1.0
    x[0] = 0.0
    np.testing.assert_allclose(run(f, X), 4.0 * x, rtol=1e-15)


def test_detach_inplace_after_use_keeps_earlier_uses_differentiable():
    """`h.detach_()` detaches h from now on; ops that already read h keep their gradient."""
    def f(x):
        x.stop_gradient = False
        h = x * 2.0
        y = h * 3.0
        h.detach_()
        assert h.stop_gradient
        (y + h).sum().backward()
        return x.grad

    np.testing.assert_array_equal(run(f, X), np.full(X.shape, 6.0))


# -- roots, explicit gradients, repeated backward --------------------------------------------
def test_non_scalar_root_uses_ones():
    def f(x):
        x.stop_gradient = False
        x.sin().backward()
        return x.grad

    np.testing.assert_allclose(run(f, X), np.cos(X), rtol=1e-15)


def test_explicit_grad_array_and_tensor():
    G = normal(3, 4)

    def f(x, g):
        x.stop_gradient = False
        y = x.sin()
        y.backward(G, retain_graph=True) # a numpy array; keeps the graph for the next call
        y.backward(g * 2.0)              # a traced tensor; accumulates
        return x.grad

    np.testing.assert_allclose(run(f, X, G), 3.0 * G * np.cos(X), rtol=1e-14)


def test_explicit_scalar_grad_of_scalar_root():
    def f(x):
        x.stop_gradient = False
        (x * x).sum().backward(cc.to_tensor(np.array(0.5)))
        return x.grad

    np.testing.assert_allclose(run(f, X), X, rtol=1e-15)


def test_repeated_backward_accumulates():
    def f(x):
        x.stop_gradient = False
        (x * 2.0).sum().backward()
        first = x.grad * 1.0
        (x * x).sum().backward()
        return first, x.grad

    first, total = run(f, X)
    np.testing.assert_array_equal(first, np.full(X.shape, 2.0))
    np.testing.assert_allclose(total, 2.0 + 2.0 * X, rtol=1e-15)


def test_repeated_backward_keeps_leaf_grads_apart():
    """add's VJP hands the same gradient to both inputs: accumulating into one leaf's grad
    must not change the other's."""
    def f(a, b):
        a.stop_gradient = False
        b.stop_gradient = False
        (a + b).sum().backward()
        (a * 3.0 + b).sum().backward()
        return a.grad, b.grad

    ga, gb = run(f, X, X.copy())
    np.testing.assert_array_equal(ga, np.full(X.shape, 4.0))
    np.testing.assert_array_equal(gb, np.full(X.shape, 2.0))


def test_repeated_backward_keeps_view_grads_apart():
    """concat's VJP hands out views of one gradient: they must not alias the leaves' grads."""
    def f(a, b, c):
        for t in (a, b, c):
            t.stop_gradient = False
        y = c + cc.concat([a, b])
        y.sum().backward(retain_graph=True)
        (y * 2.0).sum().backward()
        a.grad.zero_()
        return a.grad, b.grad, c.grad

    ga, gb, gc = run(f, normal(2), normal(2), normal(4))
    np.testing.assert_array_equal(ga, np.zeros(2))
    np.testing.assert_array_equal(gb, np.full(2, 3.0))
    np.testing.assert_array_equal(gc, np.full(4, 3.0))


def test_clear_grad_between_backward_calls():
    def f(x):
        x.stop_gradient = False
        (x * 2.0).sum().backward()
        x.clear_grad()
        assert x.grad is None
        (x * 5.0).sum().backward()
        return x.grad

    np.testing.assert_array_equal(run(f, X), np.full(X.shape, 5.0))


def test_grad_through_views_of_a_leaf():
    def f(a):
        a.stop_gradient = False
        (a[0:2] * a[1:3] + a.t().sum(axis=1)).sum().backward()
        return a.grad

    expect = np.full(X.shape, 2.0)  # each column sum is broadcast over two rows
    expect[0:2] += X[1:3]
    expect[1:3] += X[0:2]
    np.testing.assert_allclose(run(f, X), expect, rtol=1e-14)


def test_cast_to_int_ends_the_graph():
    def f(x):
        x.stop_gradient = False
        i = (x * 3.0).cast("int64")
        assert i.stop_gradient
        (i * x).sum().backward()   # only the float path carries a gradient
        return x.grad

    x = np.array([0.4, 1.6, -2.3])
    np.testing.assert_array_equal(run(f, x), np.trunc(3 * x))


def test_backward_of_a_leaf_itself():
    def f(a):
        a.stop_gradient = False
        a.backward()
        return a.grad

    np.testing.assert_array_equal(run(f, X), np.ones(X.shape))


def test_grad_used_in_later_forward_is_a_constant():
    """No higher-order gradients: x.grad doesn't need a gradient itself."""
    def f(x):
        x.stop_gradient = False
        (x * x).sum().backward()
        g = x.grad
        assert g.stop_gradient
        x.clear_grad()
        (g * x).sum().backward()
        return x.grad

    np.testing.assert_array_equal(run(f, X), 2.0 * X)


def test_float32_leaf_gets_float32_gradient():
    def f(x):
        x.stop_gradient = False
        (x.cast("float64") * 2.0).sum().backward()
        return x.grad

    g = run(f, X.astype(np.float32))
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, np.full(X.shape, 2.0, np.float32))


# -- optimizer steps under no_grad ------------------------------------------------------------
def test_sgd_update_then_second_step_in_one_program():
    """The update reads leaf.grad under no_grad; the parameter stays a leaf, so a second
    forward/backward uses its new value and accumulates into the same grad."""
    def f(x, w):
        w.stop_gradient = False
        ((x * w) ** 2).sum().backward()     # dL/dw = 2 x^2 w
        with cc.no_grad():
            w.subtract_(0.1 * w.grad)
        assert w.is_leaf and not w.stop_gradient
        (x * w).sum().backward()             # + x
        with cc.no_grad():
            w.subtract_(0.1 * w.grad)
        return w.grad

    x, w = normal(3, 4), normal(3, 4)
    w0 = w.copy()
    g1 = 2 * x * x * w0
    w1 = w0 - 0.1 * g1
    g2 = g1 + x
    w2 = w1 - 0.1 * g2
    grad = run(f, x, w)
    np.testing.assert_allclose(grad, g2, rtol=1e-14)
    np.testing.assert_allclose(w, w2, rtol=1e-14)  # the caller's array, updated in place


def test_update_through_a_view_of_a_parameter():
    def f(x, w):
        w.stop_gradient = False
        with cc.no_grad():
            w[0] = 0.0
        (x * w * w).sum().backward()
        return w.grad

    x, w = normal(3, 4), normal(3, 4)
    w_new = w.copy()
    w_new[0] = 0.0
    np.testing.assert_allclose(run(f, x, w), 2 * x * w_new, rtol=1e-15)
    np.testing.assert_array_equal(w, w_new)


# -- an MLP training step against hand-written numpy -----------------------------------------
LR = 0.1


def mlp_train_step(x, labels, w1, b1, w2, b2):
    params = (w1, b1, w2, b2)
    for p in params:
        p.stop_gradient = False
    h = x @ w1 + b1
    h.relu_()
    logits = h @ w2 + b2
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    with cc.no_grad():
        for p in params:
            p.subtract_(LR * p.grad)
    return loss


def numpy_train_step(x, labels, w1, b1, w2, b2):
    """Forward, backward and SGD update by hand (float32, like the compiled program)."""
    n = x.shape[0]
    pre = x @ w1 + b1
    h = np.maximum(pre, 0)
    logits = h @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -logp[np.arange(n), labels].mean()
    dlogits = (np.exp(logp) - np.eye(w2.shape[1], dtype=x.dtype)[labels]) / n
    dw2, db2 = h.T @ dlogits, dlogits.sum(axis=0)
    dpre = (dlogits @ w2.T) * (pre > 0)
    dw1, db1 = x.T @ dpre, dpre.sum(axis=0)
    lr = np.float32(LR)
    return loss, (w1 - lr * dw1, b1 - lr * db1, w2 - lr * dw2, b2 - lr * db2)


def test_mlp_training_matches_numpy_over_three_steps():
    r = np.random.default_rng(5)
    f32 = np.float32
    x = r.standard_normal((16, 20)).astype(f32)
    labels = r.integers(0, 5, 16).astype(np.int64)
    params = [(r.standard_normal((20, 32)) / np.sqrt(20)).astype(f32),
              (0.1 * r.standard_normal(32)).astype(f32),
              (r.standard_normal((32, 5)) / np.sqrt(32)).astype(f32),
              (0.1 * r.standard_normal(5)).astype(f32)]
    expected = [p.copy() for p in params]
    step = cc.compile(mlp_train_step)
    losses = []
    for _ in range(3):
        loss = step(x, labels, *params)      # updates `params` in place
        exp_loss, expected = numpy_train_step(x, labels, *expected)
        assert loss.dtype == np.float32
        np.testing.assert_allclose(loss, exp_loss, rtol=1e-5, atol=1e-5)
        for p, e in zip(params, expected):
            assert p.dtype == np.float32
            np.testing.assert_allclose(p, e, rtol=1e-5, atol=1e-5)
        losses.append(float(loss))
    assert losses[2] < losses[1] < losses[0]  # it learns
    assert len(step._cache) == 1              # traced once, called three times


def test_stop_gradient_on_an_intermediate_cuts_later_uses_only():
    """`h.stop_gradient = True` stops gradients through later uses of h; an op that read h
    before keeps its gradient."""
    def f(a):
        a.stop_gradient = False
        h = a * 3.0
        early = h * 2.0
        h.stop_gradient = True
        late = h * 5.0
        (early + late).sum().backward()
        return a.grad

    np.testing.assert_array_equal(cc.compile(f)(X), np.full(X.shape, 6.0))


def test_un_marking_a_parameter_makes_it_a_plain_input_again():
    def f(a):
        a.stop_gradient = False
        a.stop_gradient = True
        a.scale_(2.0)  # no leaf error: it no longer needs a gradient
        return a

    x = X.copy()
    cc.compile(f)(x)
    np.testing.assert_array_equal(x, 2 * X)
