"""`compiler.nn` layers as Paddle's: parameters owned by the layer as NumPy arrays, updated in
place by compiled steps, retraced only on a structural change; each layer's values and
gradients against an independent NumPy formula and, where installed, PaddlePaddle's own layer
with the same weights."""
import numpy as np
import pytest

import compiler as cc
import compiler.nn as nn
from tests.backends import AVAILABLE

NATIVE = [b for b in ("numpy", "cpu") if b in AVAILABLE]


def _paddle():
    paddle = pytest.importorskip("paddle")
    paddle.set_device("cpu")
    return paddle


def rng(seed=0):
    return np.random.default_rng(seed)


def _set_paddle_weights(player, layer):
    """Copy our layer's arrays into the Paddle layer with the same structure (same names)."""
    ours = layer.state_dict()
    theirs = player.state_dict()
    assert list(ours) == list(theirs), (list(ours), list(theirs))
    for k, v in theirs.items():
        assert list(v.shape) == list(ours[k].shape), k
        v.set_value(np.asarray(ours[k]))


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _mlp_numpy(params, x):
    w1, b1, w2, b2 = (np.asarray(p, np.float64) for p in params)
    h = x @ w1 + b1
    return np.maximum(h, 0) @ w2 + b2, h


# -- Parameter and Layer base ----------------------------------------------------------------
def test_parameters_are_named_arrays_and_numpy_on_them_gives_plain_arrays():
    with nn.unique_name_guard():
        fc = nn.Linear(3, 2)
        fc2 = nn.Linear(2, 2, bias_attr=False)
    w = fc.weight
    assert isinstance(w, np.ndarray) and isinstance(w, nn.Parameter)
    assert (w.name, fc.bias.name, fc2.weight.name) == ("linear_0.w_0", "linear_0.b_0",
                                                       "linear_1.w_0")
    assert fc2.bias is None and w.stop_gradient is False and w.dtype == np.float32
    for result in (w * 2, w + w, np.exp(w), w.sum(), w[0], np.concatenate([w, w]), w @ w.T):
        assert type(result) is not nn.Parameter, type(result)
    w -= 1.0                    # in place: the same array
    w[0, 0] = 5.0
    assert fc.weight is w and w[0, 0] == 5.0
    assert [p.name for p in fc.parameters()] == ["linear_0.w_0", "linear_0.b_0"]


def test_initialisers_follow_paddles_defaults_and_seed_reproduces_them():
    nn.initializer.seed(3)
    a = nn.Linear(300, 200)
    nn.initializer.seed(3)
    b = nn.Linear(300, 200)
    np.testing.assert_array_equal(a.weight, b.weight)
    limit = np.sqrt(6 / 500)  # XavierUniform, fan_in = 300, fan_out = 200
    assert np.abs(a.weight).max() <= limit and np.abs(a.weight).max() > 0.99 * limit
    assert abs(a.weight.std() - limit / np.sqrt(3)) < 0.01 * limit
    np.testing.assert_array_equal(a.bias, np.zeros(200, np.float32))


def test_registration_walks_and_state_dict_as_paddle():
    net = MLP()
    net.register_buffer("steps", np.zeros((), np.int64))
    net.register_buffer("scratch", np.zeros(2, np.float32), persistable=False)
    assert [n for n, _ in net.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight",
                                                      "fc2.bias"]
    assert net.sublayers() == [net.fc1, net.fc2] and list(net.children()) == [net.fc1, net.fc2]
    assert [n for n, _ in net.named_sublayers()] == ["fc1", "fc2"]
    assert [n for n, _ in net.named_buffers()] == ["steps", "scratch"]
    sd = net.state_dict()
    assert list(sd) == ["steps", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert sd["fc1.weight"] is net.fc1.weight  # the layer's own arrays
    with pytest.raises(cc.TraceError, match="assignment to parameter 'weight'"):
        net.fc1.weight = np.zeros((4, 8), np.float32)


def test_paddle_state_dict_keys_and_parameter_names_match():
    paddle = _paddle()
    from paddle.utils import unique_name
    with unique_name.guard():
        theirs = paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.Linear(8, 3))
    with nn.unique_name_guard():
        ours = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [p.name for p in ours.parameters()] == [p.name for p in theirs.parameters()]


def test_set_state_dict_copies_into_the_layers_arrays():
    net = MLP()
    arrays = [net.fc1.weight, net.fc1.bias, net.fc2.weight, net.fc2.bias]
    other = MLP()
    missing, unexpected = net.set_state_dict(other.state_dict())
    assert missing == [] and unexpected == []
    for mine, theirs in zip(arrays, other.parameters()):
        assert mine is not theirs
        np.testing.assert_array_equal(mine, theirs)
    assert all(a is b for a, b in zip(arrays, net.parameters()))
    by_name = {p.name: np.full(p.shape, 2.0, np.float32) for p in net.parameters()}
    net.set_state_dict(by_name, use_structured_name=False)
    assert all((p == 2.0).all() for p in net.parameters())
    before = net.fc1.weight.copy()
    bad = dict(other.state_dict(), **{"fc2.bias": np.zeros(5, np.float32)})
    with pytest.raises(cc.ShapeError, match="'fc2.bias' has shape \\[5\\]"):
        net.set_state_dict(bad)
    np.testing.assert_array_equal(net.fc1.weight, before)  # nothing written


# -- Linear ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", AVAILABLE)
def test_linear_values_and_gradients_against_numpy(backend):
    fc = nn.Linear(5, 3)
    fc.bias[...] = rng(1).normal(size=3)
    x = rng(2).normal(size=(4, 5)).astype(np.float32)

    @cc.compile(backend=backend)
    def f(x):
        x.stop_gradient = False
        y = fc(x)
        (y * y).sum().backward()
        return y, x.grad, fc.weight.grad, fc.bias.grad

    y, gx, gw, gb = f(x)
    w, b = fc.weight.astype(np.float64), fc.bias.astype(np.float64)
    want = x @ w + b
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, 2 * want @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gw, x.T.astype(np.float64) @ (2 * want), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, 2 * want.sum(0), rtol=1e-5, atol=1e-5)


def test_linear_against_paddle():
    paddle = _paddle()
    fc = nn.Linear(5, 3)
    fc.bias[...] = rng(1).normal(size=3)
    theirs = paddle.nn.Linear(5, 3)
    _set_paddle_weights(theirs, fc)
    x = rng(2).normal(size=(2, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(fc(x), theirs(paddle.to_tensor(x)).numpy(), rtol=1e-5,
                               atol=1e-6)


def test_calling_a_layer_outside_a_trace_runs_its_forward_compiled():
    net = MLP()
    x = rng(0).normal(size=(2, 4)).astype(np.float32)
    y = net(x)
    assert type(y) is np.ndarray
    np.testing.assert_allclose(y, _mlp_numpy(net.parameters(), x)[0], rtol=1e-5, atol=1e-6)
    net(x + 1)
    assert net._eager.traces == 1  # one program for the signature
    net.fc1.weight[...] = 0.0      # new values: no retrace, read on the next call
    np.testing.assert_allclose(net(x), np.broadcast_to(net.fc2.bias, (2, 3)) +
                               np.maximum(net.fc1.bias, 0) @ net.fc2.weight, rtol=1e-6)
    assert net._eager.traces == 1


# -- training steps --------------------------------------------------------------------------
def _sgd_step(net, lr=0.1):
    def step(x, t):
        loss = (net(x) - t).square().mean()
        loss.backward()
        with cc.no_grad():
            for p in _trainable(net):
                p.subtract_(lr * p.grad)
        return loss
    return step


def _trainable(net):
    # inside a trace: the parameters as Tensors (read through the layers' attributes)
    out = []
    for layer in net.sublayers(include_self=True):
        for name in list(layer._parameters):
            t = getattr(layer, name)
            if not t.stop_gradient:
                out.append(t)
    return out


@pytest.mark.parametrize("backend", NATIVE)
def test_a_compiled_training_step_updates_the_layers_arrays_in_place(backend):
    net = MLP()
    arrays = net.parameters()
    ref = [p.astype(np.float64) for p in arrays]
    x = rng(0).normal(size=(6, 4)).astype(np.float32)
    t = rng(1).normal(size=(6, 3)).astype(np.float32)
    step = cc.compile(_sgd_step(net), backend=backend)
    for _ in range(3):
        loss = step(x, t)
        # the same step in float64 NumPy
        out, h = _mlp_numpy(ref, x)
        d = 2 * (out - t) / out.size
        gw2, gb2 = np.maximum(h, 0).T @ d, d.sum(0)
        dh = (d @ ref[2].T) * (h > 0)
        gw1, gb1 = x.T @ dh, dh.sum(0)
        np.testing.assert_allclose(loss, np.mean((out - t) ** 2), rtol=1e-5)
        ref = [p - 0.1 * g for p, g in zip(ref, (gw1, gb1, gw2, gb2))]
    for p, r, a in zip(net.parameters(), ref, arrays):
        assert p is a  # the layer's own arrays, written in place
        np.testing.assert_allclose(p, r, rtol=1e-4, atol=1e-5)
    assert step.traces == 1
    prog = step.lower(x, t)
    assert [v.name for v in prog.graph.inputs][2:] == [p.name for p in arrays]
    assert set(prog.graph.mutations) == {2, 3, 4, 5}

    # structural changes retrace; values don't
    net.fc1.weight[...] *= 0.5
    step(x, t)
    assert step.traces == 1
    net.fc2 = nn.Linear(8, 3)
    step(x, t)
    assert step.traces == 2
    w2 = net.fc2.weight.copy()
    net.fc2.weight.stop_gradient = True  # frozen: retrace, no longer updated
    step(x, t)
    assert step.traces == 3
    np.testing.assert_array_equal(net.fc2.weight, w2)
    net.eval()
    step(x, t)
    assert step.traces == 4
    step(x, t)
    assert step.traces == 4


@pytest.mark.backends("numpy")
def test_a_layer_call_costs_nothing_beyond_its_ops():
    """A step through layers plans exactly as the same step with the weights as arguments."""
    net = MLP()

    def with_layers(x, t):
        return _sgd_step(net)(x, t)

    def by_hand(x, t, w1, b1, w2, b2):
        ps = [w1, b1, w2, b2]
        for p in ps:
            p.stop_gradient = False
        y = ((x @ w1 + b1).relu() @ w2 + b2)
        loss = (y - t).square().mean()
        loss.backward()
        with cc.no_grad():
            for p in ps:
                p.subtract_(0.1 * p.grad)
        return loss

    x = rng(0).normal(size=(6, 4)).astype(np.float32)
    t = rng(1).normal(size=(6, 3)).astype(np.float32)
    a = cc.compile(with_layers, backend="numpy").lower(x, t)
    b = cc.compile(by_hand, backend="numpy").lower(x, t, *[p.copy() for p in net.parameters()])
    assert [n.op for n in a.graph.nodes] == [n.op for n in b.graph.nodes]
    assert a.plan.arena_bytes == b.plan.arena_bytes
    assert a.plan.peak_bytes == b.plan.peak_bytes
    assert set(a.graph.mutations) == set(b.graph.mutations) == {2, 3, 4, 5}
