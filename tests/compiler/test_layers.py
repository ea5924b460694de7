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
    def build(m):
        return m.Sequential(m.Linear(4, 8), m.BatchNorm1D(8), m.Conv2D(1, 2, 3),
                            m.TransformerEncoder(m.TransformerEncoderLayer(8, 2, 16), 2),
                            m.LayerNorm(8), m.Embedding(5, 8))
    with unique_name.guard():
        theirs = build(paddle.nn)
    with nn.unique_name_guard():
        ours = build(nn)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [p.name for p in ours.parameters()] == [p.name for p in theirs.parameters()]
    assert [p.stop_gradient for p in ours.parameters()] == \
        [p.stop_gradient for p in theirs.parameters()]


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
            for p in net.parameters():  # (inside a trace: the Tensors)
                if not p.stop_gradient:
                    p.subtract_(lr * p.grad)
        return loss
    return step


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


@pytest.mark.parametrize("backend", NATIVE)
def test_switching_between_train_and_eval_each_epoch_never_retraces(backend):
    net = ConvNet()
    x = rng(0).normal(size=(4, 2, 4, 4)).astype(np.float32)
    t = rng(1).normal(size=(4, 3)).astype(np.float32)
    step = cc.compile(_sgd_step(net), backend=backend)
    evaluate = cc.compile(lambda x: net(x), backend=backend)
    mean = net.bn._mean.copy()
    for _ in range(3):
        net.train()
        step(x, t)
        assert not np.array_equal(net.bn._mean, mean)  # training mode: running stats move
        mean = net.bn._mean.copy()
        net.eval()
        evaluate(x)
        np.testing.assert_array_equal(net.bn._mean, mean)  # eval mode: they don't
    assert step.traces == 1 and evaluate.traces == 1


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


# -- every layer against PaddlePaddle's, same weights -----------------------------------------
def _perturb(layer, seed):
    """Non-trivial values for every parameter (biases and norms start at 0 and 1)."""
    r = rng(seed)
    for p in layer.parameters():
        if not p.stop_gradient:
            p += r.normal(0, 0.3, p.shape).astype(p.dtype)


LAYERS = {
    "Conv2D": (lambda m: m.Conv2D(3, 4, 3, stride=2, padding=1), (2, 3, 7, 6)),
    "Conv2D-dilation-groups": (lambda m: m.Conv2D(4, 6, (3, 2), padding=2, dilation=2,
                                                   groups=2), (2, 4, 7, 6)),
    "Conv2D-no-bias": (lambda m: m.Conv2D(3, 2, 1, bias_attr=False), (1, 3, 4, 4)),
    "BatchNorm2D": (lambda m: m.BatchNorm2D(3, momentum=0.8, epsilon=1e-3), (4, 3, 5, 5)),
    "BatchNorm1D": (lambda m: m.BatchNorm1D(3), (4, 3, 5)),
    "BatchNorm1D-NC": (lambda m: m.BatchNorm1D(3, momentum=0.5), (6, 3)),
    "LayerNorm": (lambda m: m.LayerNorm([3, 4]), (2, 3, 4)),
    "Embedding": (lambda m: m.Embedding(10, 4, padding_idx=-2), "ids"),
    "MultiHeadAttention": (lambda m: m.MultiHeadAttention(8, 2), (2, 5, 8)),
    "MultiHeadAttention-kv": (lambda m: m.MultiHeadAttention(8, 4, kdim=6, vdim=6), "kv"),
    "TransformerEncoderLayer": (lambda m: m.TransformerEncoderLayer(8, 2, 16), (2, 5, 8)),
    "TransformerEncoderLayer-pre-gelu": (lambda m: m.TransformerEncoderLayer(
        8, 2, 16, activation="gelu", normalize_before=True), (2, 5, 8)),
    "TransformerEncoder": (lambda m: m.TransformerEncoder(m.TransformerEncoderLayer(8, 2, 16),
                                                          2, m.LayerNorm(8)), (2, 5, 8)),
    "Sequential": (lambda m: m.Sequential(m.Conv2D(2, 3, 3), m.ReLU(), m.MaxPool2D(2),
                                          m.Flatten(), m.Linear(12, 2), m.Tanh()),
                   (2, 2, 6, 6)),
    "activations": (lambda m: m.Sequential(m.GELU(), m.Sigmoid(), m.ELU(0.5), m.LeakyReLU(0.2),
                                           m.Hardtanh(-0.3, 0.4), m.Silu(), m.Softmax(1),
                                           m.LogSoftmax(0), m.Identity()), (3, 4)),
    "GELU-tanh": (lambda m: m.GELU(approximate=True), (3, 4)),
}


def _inputs(spec, r):
    if spec == "ids":
        return (np.array([[1, 8, 0], [9, 3, 8]], np.int64),)
    if spec == "kv":
        return (r.normal(size=(2, 3, 8)).astype(np.float32),
                r.normal(size=(2, 4, 6)).astype(np.float32),
                r.normal(size=(2, 4, 6)).astype(np.float32))
    return (r.normal(size=spec).astype(np.float32),)


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_matches_paddle_in_eval_mode(name):
    """... and in training mode, with the running statistics the call leaves."""
    paddle = _paddle()
    make, spec = LAYERS[name]
    ours, theirs = make(nn), make(paddle.nn)
    _perturb(ours, 1)
    if name.startswith("BatchNorm"):
        ours._mean[...] = rng(2).normal(size=3)
        ours._variance[...] = rng(3).uniform(0.5, 2, size=3)
    _set_paddle_weights(theirs, ours)
    ours.eval()
    theirs.eval()
    xs = _inputs(spec, rng(4))
    got = ours(*xs)
    want = theirs(*[paddle.to_tensor(x) for x in xs]).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    assert [p.shape for p in ours.parameters()] == [tuple(p.shape) for p in theirs.parameters()]
    if name.startswith("BatchNorm"):
        ours.train()
        theirs.train()
        got = ours(*xs)
        want = theirs(*[paddle.to_tensor(x) for x in xs]).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        for k, v in theirs.state_dict().items():
            np.testing.assert_allclose(ours.state_dict()[k], v.numpy(), rtol=1e-5, atol=1e-6)


def test_default_initialisers_have_paddles_distributions():
    nn.initializer.seed(0)
    conv = nn.Conv2D(16, 8, 3)
    std = np.sqrt(2 / (16 * 9))  # Normal(0, sqrt(2 / fan_in))
    assert abs(conv.weight.std() - std) < 0.05 * std and abs(conv.weight.mean()) < 0.1 * std
    emb = nn.Embedding(400, 100, padding_idx=3)
    limit = np.sqrt(6 / 500)  # XavierUniform over [num_embeddings, dim]
    assert np.abs(emb.weight).max() <= limit and (emb.weight[3] == 0).all()
    bn, ln = nn.BatchNorm2D(4), nn.LayerNorm(4)
    for p, v in ((bn.weight, 1), (bn.bias, 0), (bn._mean, 0), (bn._variance, 1),
                 (ln.weight, 1), (ln.bias, 0)):
        np.testing.assert_array_equal(p, np.full(4, v, np.float32))
    assert [p.stop_gradient for p in bn.parameters()] == [False, False, True, True]
    assert list(bn.state_dict()) == ["weight", "bias", "_mean", "_variance"]


# -- gradients through several layers, against PaddlePaddle --------------------------------
def ConvNet(m=nn):  # noqa: N802 - the same source builds ours (m=nn) and Paddle's
    class Net(m.Layer):
        def __init__(self):
            super().__init__()
            self.conv = m.Conv2D(2, 4, 3, padding=1)
            self.bn = m.BatchNorm2D(4)
            self.pool = m.MaxPool2D(2)
            self.flat = m.Flatten()
            self.norm = m.LayerNorm(16)
            self.fc = m.Linear(16, 3)
            self.act = m.ReLU()

        def forward(self, x):
            return self.fc(self.norm(self.flat(self.pool(self.act(self.bn(self.conv(x)))))))
    return Net()


@pytest.mark.parametrize("backend", NATIVE)
def test_gradients_of_a_layer_model_match_paddle(backend):
    paddle = _paddle()

    ours = ConvNet()
    theirs = ConvNet(paddle.nn)
    _perturb(ours, 5)
    _set_paddle_weights(theirs, ours)
    x = rng(6).normal(size=(3, 2, 4, 4)).astype(np.float32)

    @cc.compile(backend=backend)
    def grads(x):
        loss = ours(x).square().sum()
        loss.backward()
        return [loss] + [p.grad for p in ours.parameters() if not p.stop_gradient]

    got = grads(x)
    loss = theirs(paddle.to_tensor(x)).square().sum()
    loss.backward()
    want = [loss.numpy()] + [p.grad.numpy() for p in theirs.parameters() if not p.stop_gradient]
    assert len(got) == len(want) == 9
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    # training mode: both updated their running statistics the same way
    np.testing.assert_allclose(ours.bn._mean, theirs.bn._mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.bn._variance, theirs.bn._variance.numpy(), rtol=1e-5)


# -- BatchNorm2D's running statistics ------------------------------------------------------
@pytest.mark.parametrize("backend", NATIVE)
def test_batchnorm2d_updates_its_running_statistics_in_place(backend):
    bn = nn.BatchNorm2D(3)
    mean, var = bn._mean, bn._variance
    step = cc.compile(lambda x: bn(x).sum(), backend=backend)
    want_mean, want_var = np.zeros(3), np.ones(3)
    for k in range(3):
        x = rng(k).normal(k, 1 + k, size=(4, 3, 5, 5)).astype(np.float32)
        step(x)
        x64 = x.astype(np.float64)
        want_mean = 0.9 * want_mean + 0.1 * x64.mean((0, 2, 3))
        want_var = 0.9 * want_var + 0.1 * x64.var((0, 2, 3))  # biased, as Paddle
    assert bn._mean is mean and bn._variance is var
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5)
    np.testing.assert_allclose(var, want_var, rtol=1e-5)
    assert step.traces == 1
    bn.eval()  # normalises with the running statistics, leaves them alone
    x = rng(9).normal(size=(2, 3, 2, 2)).astype(np.float32)
    y = cc.compile(lambda x: bn(x), backend=backend)(x)
    np.testing.assert_allclose(y, (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5)


@pytest.mark.backends("numpy")
def test_batchnorm2d_plan_updates_the_running_statistics_where_they_lie():
    bn = nn.BatchNorm2D(3)
    x = rng(0).normal(size=(4, 3, 5, 5)).astype(np.float32)
    prog = cc.compile(lambda x: bn(x).sum(), backend="numpy").lower(x)
    names = [v.name for v in prog.graph.inputs]
    k_mean, k_var = names.index(bn._mean.name), names.index(bn._variance.name)
    assert set(prog.graph.mutations) == {k_mean, k_var}
    # the in-place updates run in place, in the layer's arrays: no copy of either in the arena
    requested = [d for d in prog.plan.decisions if d.requested]
    assert [d.op for d in requested] == ["scale_", "add_", "scale_", "add_"]
    assert all(d.inplace for d in requested), [(d.op, d.reason) for d in requested]
    finals = set(map(id, prog.graph.mutations.values()))
    holders = [b for b in prog.plan.buffers if any(id(v) in finals for v in b.values)]
    assert [b.kind for b in holders] == ["input", "input"]


# -- Dropout --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", NATIVE)
def test_dropout_draws_a_new_mask_each_step_without_retracing(backend):
    nn.initializer.seed(7)
    drop = nn.Dropout(0.25)
    f = cc.compile(lambda x: drop(x), backend=backend)
    x = np.ones((64, 64), np.float32)
    a, b = f(x), f(x)
    for y in (a, b):
        assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
        assert 0.15 < (y == 0).mean() < 0.35
    assert (a != b).any() and f.traces == 1
    nn.initializer.seed(7)
    again = nn.Dropout(0.25)
    np.testing.assert_array_equal(cc.compile(lambda x: again(x), backend=backend)(x), a)
    drop.eval()
    np.testing.assert_array_equal(f(x), x)
    assert f.traces == 2


# -- cc.save / cc.load ----------------------------------------------------------------------
def test_state_dicts_round_trip_through_save_and_load(tmp_path):
    net = ConvNet()
    _perturb(net, 3)
    net.bn._mean[...] = rng(4).normal(size=4)
    emb = nn.Embedding(5, 2)
    state = {"model": net.state_dict(), "emb": emb.state_dict(),
             "opt": {"step": 3, "lr": 0.1, "beta": (0.9, 0.999), "moments": [np.arange(3.0)],
                     "name": "adamw", "none": None, "ids": np.array([1, 2], np.int64)}}
    path = tmp_path / "ckpt.npz"
    cc.save(state, path)
    back = cc.load(path)
    assert list(back["model"]) == list(net.state_dict())  # "conv.weight", dots kept
    for k, v in net.state_dict().items():
        assert type(back["model"][k]) is np.ndarray and back["model"][k].dtype == v.dtype
        assert back["model"][k].tobytes() == v.tobytes()
    assert back["opt"]["step"] == 3 and back["opt"]["lr"] == 0.1
    assert back["opt"]["beta"] == (0.9, 0.999) and back["opt"]["name"] == "adamw"
    assert back["opt"]["none"] is None and back["opt"]["ids"].dtype == np.int64
    np.testing.assert_array_equal(back["opt"]["moments"][0], np.arange(3.0))

    fresh = ConvNet()
    arrays = fresh.state_dict()
    x = rng(0).normal(size=(2, 2, 4, 4)).astype(np.float32)
    f = cc.compile(lambda x: fresh(x))
    fresh.eval()
    f(x)
    fresh.set_state_dict(back["model"])
    assert all(a is b for a, b in zip(arrays.values(), fresh.state_dict().values()))
    net.eval()
    np.testing.assert_array_equal(f(x), cc.compile(lambda x: net(x))(x))
    assert f.traces == 1  # new values in the same arrays: no retrace


def test_save_refuses_what_it_cannot_store(tmp_path):
    with pytest.raises(cc.TraceError, match=r"the object\['f'\] is a function") as e:
        cc.save({"f": lambda: 0}, tmp_path / "x.npz")
    assert "test_layers.py" in str(e.value)
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(cc.DataError, match="not written by cc.save"):
        cc.load(tmp_path / "plain.npz")


def test_layer_errors_name_the_users_line():
    class Forgot(nn.Layer):
        def __init__(self):
            self.fc = nn.Linear(2, 2)
    with pytest.raises(cc.TraceError, match="must call super\\(\\).__init__\\(\\)") as e:
        Forgot()
    assert "test_layers.py" in str(e.value)
    with pytest.raises(cc.ShapeError, match="BatchNorm2D\\(3\\): input has 2 channels") as e:
        nn.BatchNorm2D(3)(np.ones((1, 2, 2, 2), np.float32))
    assert "test_layers.py" in str(e.value)


def test_readme_layers_example_trains_the_nets_own_arrays():
    import pathlib
    import re
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("## Layers"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    net, step = scope["net"], scope["step"]
    w = net.fc1.weight
    before = w.copy()
    x = rng(0).normal(size=(8, 4)).astype(np.float32)
    t = np.arange(8) % 3
    losses = [float(step(x, t)) for _ in range(4)]
    assert losses == sorted(losses, reverse=True) and step.traces == 1
    assert net.fc1.weight is w and not np.array_equal(w, before)


@pytest.mark.parametrize("backend", NATIVE)
def test_a_tied_weight_is_one_input_and_gets_both_gradients(backend):
    emb = nn.Embedding(5, 4)
    head = nn.Linear(4, 5, bias_attr=False)
    head.weight = nn.Parameter(np.zeros((4, 5), np.float32), name="tied_head")
    seen = []
    nn.Sequential(emb, head).apply(lambda layer: seen.append(type(layer).__name__))
    assert seen == ["Embedding", "Linear", "Sequential"]
    tied = emb.weight  # [5, 4]: the head uses it transposed, as a language model ties them

    class LM(nn.Layer):
        def __init__(self):
            super().__init__()
            self.emb = emb

        def forward(self, ids):
            h = self.emb(ids)
            return h.matmul(self.emb.weight, transpose_y=True)

    lm = LM()
    ids = np.array([1, 3, 3], np.int64)

    @cc.compile(backend=backend)
    def grad(ids):
        lm(ids).sum().backward()
        return lm.emb.weight.grad

    g = grad(ids)
    w = tied.astype(np.float64)
    want = np.zeros_like(w)
    for i in ids:            # d/dW of sum_j <W[i], W[j]> over the looked-up rows i
        want[i] += w.sum(0)  # through the lookup
        want += w[i]         # through the transposed head
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)
    assert len(lm.parameters()) == 1
    assert [v.name for v in grad.lower(ids).graph.inputs] == ["ids", tied.name]


@pytest.mark.parametrize("backend", NATIVE)
def test_a_buffer_written_in_place_by_a_step_and_assignment_refused(backend):
    class Counter(nn.Layer):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", np.zeros(3, np.float32))

        def forward(self, x):
            self.total[...] = self.total + x.sum(0)
            return x * 2

    layer = Counter()
    total = layer.total
    f = cc.compile(lambda x: layer(x), backend=backend)
    x = np.ones((2, 3), np.float32)
    f(x)
    f(x)
    assert layer.total is total and (total == 4).all() and f.traces == 1
    assert list(layer.state_dict()) == ["total"]

    class Assigns(Counter):
        def forward(self, x):
            self.total = self.total + x.sum(0)
            return x
    bad = Assigns()
    with pytest.raises(cc.TraceError, match="write its new value in place") as e:
        cc.compile(lambda x: bad(x), backend=backend)(x)
    assert "self.total = self.total + x.sum(0)" in str(e.value)


def test_param_attr_sets_name_initialiser_trainable_and_optimizer_fields_as_paddle():
    paddle = _paddle()
    for m, attr in ((nn, nn.ParamAttr), (paddle.nn, paddle.ParamAttr)):
        init = (nn.initializer if m is nn else paddle.nn.initializer).Constant(0.5)
        layer = m.Linear(3, 2, weight_attr=attr(name="w_custom", initializer=init,
                                                learning_rate=0.1, need_clip=False,
                                                trainable=False), bias_attr=False)
        w = layer.weight
        assert w.name == "w_custom" and w.stop_gradient is True and layer.bias is None
        assert w.optimize_attr["learning_rate"] == 0.1 and w.need_clip is False
        np.testing.assert_array_equal(np.asarray(w), np.full((3, 2), 0.5, np.float32))
