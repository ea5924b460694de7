"""Optimizers as Paddle's (issue 24 item 3): `cc.optimizer.SGD/Momentum/Adam/AdamW` built over
parameter arrays outside the compiled step, owning their state, updating everything in place
without retracing; gradient clipping; `cc.optimizer.lr` schedulers; `clear_grad`; the state
dict. Values are checked against NumPy formulas in float64 (independent oracles), and against
PaddlePaddle and PyTorch themselves where installed."""
import numpy as np
import pytest

import compiler as cc
from compiler.tensor import state_tensor

pytestmark = pytest.mark.usefixtures("each_backend")

RNG = np.random.default_rng(24)
X = RNG.normal(size=(6, 4)).astype(np.float32)
T = RNG.normal(size=(6, 3)).astype(np.float32)
W0 = (RNG.normal(size=(4, 5)) * 0.5).astype(np.float32)
B0 = (RNG.normal(size=5) * 0.1).astype(np.float32)
V0 = (RNG.normal(size=(5, 3)) * 0.5).astype(np.float32)


class Param(np.ndarray):
    """What a layer's parameters look like: an ndarray with `.name` and `.stop_gradient`."""

    def __new__(cls, value, name, stop_gradient=False):
        p = np.array(value).view(cls)
        p.name, p.stop_gradient = name, stop_gradient
        return p


def model(frozen=()):
    return [Param(a.copy(), n, n in frozen) for a, n in ((W0, "w"), (B0, "b"), (V0, "v"))]


def forward(params, x, t):
    w, b, v = (state_tensor(p, p.name, trainable=True) for p in params)
    return (((x @ w + b).tanh() @ v - t) ** 2).mean()


def make_step(params, opt):
    def step(x, t):
        loss = forward(params, x, t)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss
    return cc.compile(step)


def grads(w, b, v):
    """The loss gradients by hand, in float64."""
    x, t = X.astype(np.float64), T.astype(np.float64)
    h = np.tanh(x @ w + b)
    dy = 2 * (h @ v - t) / t.size
    dh = dy @ v.T * (1 - h * h)
    return [x.T @ dh, dh.sum(0), h.T @ dy]


def reference(rule, steps=5, lrs=None, clip=None, **hp):
    """Paddle's update rules in float64 NumPy."""
    ps = [a.astype(np.float64) for a in (W0, B0, V0)]
    st = [{"m": 0.0, "v": 0.0, "b1p": hp.get("beta1", 0.9), "b2p": hp.get("beta2", 0.999)}
          for _ in ps]
    for k in range(steps):
        lr = hp["lr"] if lrs is None else lrs[k]
        gs = grads(*ps)
        if clip is not None:
            gs = clip(gs)
        for p, g, s in zip(ps, gs, st):
            wd = hp.get("wd", 0.0)
            if rule in ("sgd", "momentum", "adam"):
                g = g + wd * p
            if rule == "sgd":
                p -= lr * g
            elif rule == "momentum":
                s["v"] = hp["mu"] * s["v"] + g
                p -= lr * (g + hp["mu"] * s["v"]) if hp.get("nesterov") else lr * s["v"]
            else:
                if rule == "adamw":
                    p *= 1 - lr * wd
                b1, b2 = hp.get("beta1", 0.9), hp.get("beta2", 0.999)
                s["m"] = b1 * s["m"] + (1 - b1) * g
                s["v"] = b2 * s["v"] + (1 - b2) * g * g
                p -= lr * (s["m"] / (1 - s["b1p"])) / (np.sqrt(s["v"] / (1 - s["b2p"])) + 1e-8)
                s["b1p"] *= b1
                s["b2p"] *= b2
    return ps, st


CASES = {
    "sgd": (lambda ps: cc.optimizer.SGD(learning_rate=0.2, parameters=ps, weight_decay=0.01),
            {"lr": 0.2, "wd": 0.01}),
    "momentum": (lambda ps: cc.optimizer.Momentum(learning_rate=0.1, momentum=0.8,
                                                  parameters=ps, weight_decay=0.02),
                 {"lr": 0.1, "mu": 0.8, "wd": 0.02}),
    "nesterov": (lambda ps: cc.optimizer.Momentum(learning_rate=0.1, parameters=ps,
                                                  use_nesterov=True),
                 {"lr": 0.1, "mu": 0.9, "nesterov": True}),
    "adam": (lambda ps: cc.optimizer.Adam(learning_rate=0.05, parameters=ps, beta2=0.99,
                                          weight_decay=0.01),
             {"lr": 0.05, "beta2": 0.99, "wd": 0.01}),
    "adamw": (lambda ps: cc.optimizer.AdamW(learning_rate=0.05, parameters=ps,
                                            weight_decay=0.1),
              {"lr": 0.05, "wd": 0.1}),
}


@pytest.mark.parametrize("case", CASES)
def test_each_optimizer_matches_paddles_formula_in_place_without_retracing(case):
    build, hp = CASES[case]
    params = model()
    ids = [id(p) for p in params]
    opt = build(params)
    states = {k: [id(a) for a in v] for k, v in opt._state.items()}
    fn = make_step(params, opt)
    for _ in range(5):
        fn(X, T)
    rule = case if case not in ("nesterov",) else "momentum"
    want, want_state = reference(rule, **hp)
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)
    assert fn.traces == 1
    assert [id(p) for p in params] == ids
    assert {k: [id(a) for a in v] for k, v in opt._state.items()} == states
    sd = opt.state_dict()
    if rule in ("adam", "adamw"):
        for p, s in zip(params, want_state):
            np.testing.assert_allclose(sd[f"{p.name}_moment1_0"], s["m"], rtol=1e-5,
                                       atol=1e-7)
            np.testing.assert_allclose(sd[f"{p.name}_beta1_pow_acc_0"], 0.9 ** 6, rtol=1e-6)
            np.testing.assert_allclose(sd[f"{p.name}_beta2_pow_acc_0"],
                                       hp.get("beta2", 0.999) ** 6, rtol=1e-6)
    elif rule == "momentum":
        for p, s in zip(params, want_state):
            np.testing.assert_allclose(sd[f"{p.name}_velocity_0"], s["v"], rtol=1e-5,
                                       atol=1e-7)
    else:
        assert sd == {}


PADDLE_CASES = {
    "sgd": lambda P, ps: P.optimizer.SGD(learning_rate=0.2, parameters=ps, weight_decay=0.01),
    "momentum": lambda P, ps: P.optimizer.Momentum(learning_rate=0.1, momentum=0.8,
                                                   parameters=ps, weight_decay=0.02),
    "nesterov": lambda P, ps: P.optimizer.Momentum(learning_rate=0.1, parameters=ps,
                                                   use_nesterov=True),
    "adam": lambda P, ps: P.optimizer.Adam(learning_rate=0.05, parameters=ps, beta2=0.99,
                                           weight_decay=0.01),
    "adamw": lambda P, ps: P.optimizer.AdamW(learning_rate=0.05, parameters=ps,
                                             weight_decay=0.1),
}


def paddle_run(build, steps=5, scheduler=None):
    paddle = pytest.importorskip("paddle")
    ps = [paddle.to_tensor(a, stop_gradient=False) for a in (W0, B0, V0)]
    opt = build(paddle, ps)
    x, t = paddle.to_tensor(X), paddle.to_tensor(T)
    for _ in range(steps):
        w, b, v = ps
        loss = (((x @ w + b).tanh() @ v - t) ** 2).mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
        if scheduler is not None:
            opt._learning_rate.step()
    return [p.numpy() for p in ps]


@pytest.mark.parametrize("case", CASES)
def test_each_optimizer_matches_paddle_itself(case):
    want = paddle_run(PADDLE_CASES[case])
    params = model()
    fn = make_step(params, CASES[case][0](params))
    for _ in range(5):
        fn(X, T)
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


TORCH_CASES = {
    "sgd": lambda optim, ps: optim.SGD(ps, lr=0.2, weight_decay=0.01),
    "momentum": lambda optim, ps: optim.SGD(ps, lr=0.1, momentum=0.8, weight_decay=0.02),
    "nesterov": lambda optim, ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda optim, ps: optim.Adam(ps, lr=0.05, betas=(0.9, 0.99), weight_decay=0.01),
    "adamw": lambda optim, ps: optim.AdamW(ps, lr=0.05, weight_decay=0.1),
}


@pytest.mark.parametrize("case", CASES)
def test_each_optimizer_matches_torch_where_the_formulas_agree(case):
    torch = pytest.importorskip("torch")
    ps = [torch.tensor(a, requires_grad=True) for a in (W0, B0, V0)]
    opt = TORCH_CASES[case](torch.optim, ps)
    x, t = torch.tensor(X), torch.tensor(T)
    for _ in range(5):
        w, b, v = ps
        (((x @ w + b).tanh() @ v - t) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
    params = model()
    fn = make_step(params, CASES[case][0](params))
    for _ in range(5):
        fn(X, T)
    for got, w in zip(params, ps):
        np.testing.assert_allclose(got, w.detach().numpy(), rtol=1e-5, atol=1e-6)


def _global_clip(limit):
    def clip(gs):
        norm = np.sqrt(sum((g * g).sum() for g in gs))
        return [g * limit / max(norm, limit) for g in gs]
    return clip


@pytest.mark.parametrize("limit", [0.05, 100.0])  # clipping every step / never
def test_clip_grad_by_global_norm(limit):
    params = model()
    opt = cc.optimizer.SGD(learning_rate=0.5, parameters=params,
                           grad_clip=cc.nn.ClipGradByGlobalNorm(limit))
    fn = make_step(params, opt)
    for _ in range(5):
        fn(X, T)
    want, _ = reference("sgd", lr=0.5, clip=_global_clip(limit))
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)
    if limit == 100.0:  # the scale is exactly 1 below the limit: SGD's values bit for bit
        plain = model()
        fn = make_step(plain, cc.optimizer.SGD(learning_rate=0.5, parameters=plain))
        for _ in range(5):
            fn(X, T)
        for got, w in zip(params, plain):
            np.testing.assert_array_equal(got, w)
    else:
        want = paddle_run(lambda P, ps: P.optimizer.SGD(
            learning_rate=0.5, parameters=ps, grad_clip=P.nn.ClipGradByGlobalNorm(limit)))
        for got, w in zip(params, want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_clip_grad_by_norm_and_by_value_and_need_clip():
    params = model()
    params[2].need_clip = False  # Paddle: this parameter's gradient is left as it is
    opt = cc.optimizer.SGD(learning_rate=0.5, parameters=params,
                           grad_clip=cc.nn.ClipGradByNorm(0.05))
    fn = make_step(params, opt)
    fn(X, T)
    gs = grads(W0, B0, V0)
    want = [a - 0.5 * (g * 0.05 / max(np.sqrt((g * g).sum()), 0.05) if i < 2 else g)
            for i, (a, g) in enumerate(zip((W0, B0, V0), gs))]
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)

    params = model()
    opt = cc.optimizer.SGD(learning_rate=0.5, parameters=params,
                           grad_clip=cc.nn.ClipGradByValue(0.01))
    make_step(params, opt)(X, T)
    for got, a, g in zip(params, (W0, B0, V0), gs):
        np.testing.assert_allclose(got, a - 0.5 * np.clip(g, -0.01, 0.01), rtol=2e-5,
                                   atol=2e-6)


def test_clip_is_applied_before_the_l2_decay_as_in_paddle():
    params = model()
    opt = cc.optimizer.Adam(learning_rate=0.05, parameters=params, weight_decay=0.5,
                            grad_clip=cc.nn.ClipGradByGlobalNorm(0.05))
    fn = make_step(params, opt)
    for _ in range(5):
        fn(X, T)
    want, _ = reference("adam", lr=0.05, wd=0.5, clip=_global_clip(0.05))
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)
    want = paddle_run(lambda P, ps: P.optimizer.Adam(
        learning_rate=0.05, parameters=ps, weight_decay=0.5,
        grad_clip=P.nn.ClipGradByGlobalNorm(0.05)))
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def _schedulers(lr):
    return {
        "step": lambda: lr.StepDecay(0.5, step_size=3, gamma=0.5),
        "cosine": lambda: lr.CosineAnnealingDecay(0.3, T_max=4, eta_min=0.01),
        "warmup-float": lambda: lr.LinearWarmup(0.2, warmup_steps=4, start_lr=0.0,
                                                end_lr=0.2),
        "warmup-cosine": lambda: lr.LinearWarmup(lr.CosineAnnealingDecay(0.3, T_max=3),
                                                 warmup_steps=3, start_lr=0.01, end_lr=0.3),
    }


@pytest.mark.backends("numpy")
@pytest.mark.parametrize("kind", ["step", "cosine", "warmup-float", "warmup-cosine"])
def test_scheduler_sequences_are_paddles(kind):
    sched = _schedulers(cc.optimizer.lr)[kind]()
    got = []
    for _ in range(12):
        got.append((sched.last_epoch, sched(), float(sched._value)))
        sched.step()
    assert [g[0] for g in got] == list(range(12))
    assert all(value == np.float32(lr) for _, lr, value in got)
    if kind == "step":
        assert [g[1] for g in got] == [0.5 * 0.5 ** (e // 3) for e in range(12)]
    elif kind == "warmup-float":
        assert [g[1] for g in got[:4]] == [0.2 * e / 4 for e in range(4)]
        assert all(g[1] == 0.2 for g in got[4:])
    paddle = pytest.importorskip("paddle")
    ref = _schedulers(paddle.optimizer.lr)[kind]()
    want = []
    for _ in range(12):
        want.append((ref.last_epoch, ref()))
        ref.step()
    assert [g[:2] for g in got] == want  # Python floats: exactly
    assert sched.state_dict() == ref.state_dict()
    sched.step(7)  # a jump: the closed form, as Paddle's
    ref.step(7)
    assert sched() == ref()


def test_a_changing_learning_rate_never_retraces():
    params = model()
    sched = cc.optimizer.lr.LinearWarmup(
        cc.optimizer.lr.CosineAnnealingDecay(0.3, T_max=4), warmup_steps=3, start_lr=0.0,
        end_lr=0.3)
    opt = cc.optimizer.SGD(learning_rate=sched, parameters=params)
    fn = make_step(params, opt)
    lrs = []
    for _ in range(10):
        lrs.append(float(np.float32(opt.get_lr())))
        fn(X, T)
        sched.step()
    assert fn.traces == 1
    assert len(set(lrs)) > 5
    want, _ = reference("sgd", steps=10, lrs=lrs)
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)
    want = paddle_run(lambda P, ps: P.optimizer.SGD(
        learning_rate=P.optimizer.lr.LinearWarmup(
            P.optimizer.lr.CosineAnnealingDecay(0.3, T_max=4), warmup_steps=3, start_lr=0.0,
            end_lr=0.3), parameters=ps), steps=10, scheduler=True)
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_set_lr_and_get_lr():
    params = model()
    opt = cc.optimizer.SGD(learning_rate=0.1, parameters=params)
    fn = make_step(params, opt)
    fn(X, T)
    assert opt.get_lr() == 0.1
    opt.set_lr(0.25)
    assert opt.get_lr() == 0.25
    fn(X, T)
    assert fn.traces == 1
    want, _ = reference("sgd", steps=2, lrs=[0.1, 0.25])
    for got, w in zip(params, want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)
    sched_opt = cc.optimizer.Adam(cc.optimizer.lr.StepDecay(0.1, 2), parameters=params)
    assert sched_opt.get_lr() == 0.1
    with pytest.raises(cc.TraceError, match="can't be LRScheduler") as e:
        sched_opt.set_lr(0.2)
    assert "test_optimizer_paddle.py" in str(e.value)


@pytest.mark.parametrize("set_to_zero", [True, False])
def test_clear_grad_zeros_or_drops_the_gradients(set_to_zero):
    params = model()
    opt = cc.optimizer.SGD(learning_rate=0.1, parameters=params)

    def step(x, t):
        loss = forward(params, x, t)
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero)
        w = state_tensor(params[0], "w")
        if not set_to_zero:
            assert w.grad is None
            return loss
        return loss, w.grad * 1.0   # works after clear_grad(): zeros, as Paddle's

    out = cc.compile(step)(X, T)
    if set_to_zero:
        np.testing.assert_array_equal(out[1], np.zeros_like(W0))


def test_gradients_accumulate_after_clear_grad_to_zero():
    params = model()
    opt = cc.optimizer.SGD(learning_rate=0.1, parameters=params)

    def step(x, t):
        forward(params, x, t).backward()
        opt.clear_grad()              # zeros: the next backward adds to them
        forward(params, x, t).backward()
        return state_tensor(params[2], "v").grad

    got = cc.compile(step)(X, T)
    np.testing.assert_allclose(got, grads(W0, B0, V0)[2], rtol=1e-5, atol=1e-7)


def test_a_frozen_or_unused_parameter_is_not_updated():
    params = model(frozen=("b",))
    unused = Param(np.ones(3, np.float32), "unused")
    opt = cc.optimizer.AdamW(learning_rate=0.05, parameters=params + [unused])
    fn = make_step(params, opt)
    for _ in range(3):
        fn(X, T)
    np.testing.assert_array_equal(params[1], B0)
    np.testing.assert_array_equal(unused, np.ones(3, np.float32))
    sd = opt.state_dict()
    for key in ("b_moment1_0", "unused_moment1_0"):
        assert not sd[key].any()
    assert sd["b_beta1_pow_acc_0"] == np.float32(0.9)
    assert sd["w_beta1_pow_acc_0"] != np.float32(0.9)
    assert not np.array_equal(params[0], W0)
    names = fn.lower(X, T).param_names
    assert not any(n.startswith("unused") for n in names)  # not even an input


def test_state_dict_round_trip_through_npz(tmp_path):
    def run(params, opt, sched, n):
        fn = make_step(params, opt)
        for _ in range(n):
            fn(X, T)
            sched.step()

    def build(params):
        sched = cc.optimizer.lr.StepDecay(0.05, step_size=2, gamma=0.5)
        return cc.optimizer.Adam(learning_rate=sched, parameters=params), sched

    straight = model()
    opt, sched = build(straight)
    run(straight, opt, sched, 5)

    first = model()
    opt, sched = build(first)
    run(first, opt, sched, 2)
    np.savez(tmp_path / "ckpt.npz", **opt.state_dict(),
             **{f"model.{p.name}": p for p in first})
    assert "LR_Scheduler.last_epoch" in opt.state_dict()

    loaded = np.load(tmp_path / "ckpt.npz")
    resumed = model()
    for p in resumed:
        p[...] = loaded[f"model.{p.name}"]
    opt, sched = build(resumed)
    moment = opt._state["moment1"][0]
    opt.set_state_dict(loaded)
    assert opt._state["moment1"][0] is moment  # loaded into the arrays the program reads
    assert sched.last_epoch == 2 and opt.get_lr() == 0.025
    run(resumed, opt, sched, 3)
    for got, want in zip(resumed, straight):
        np.testing.assert_array_equal(got, want)


@pytest.mark.backends("numpy")
def test_state_dict_errors():
    opt = cc.optimizer.Momentum(learning_rate=0.1, parameters=model())
    sd = opt.state_dict()
    assert sorted(sd) == ["b_velocity_0", "v_velocity_0", "w_velocity_0"]
    with pytest.raises(cc.ShapeError, match="'w_velocity_0' has shape \\[2\\]"):
        opt.set_state_dict({**sd, "w_velocity_0": np.zeros(2, np.float32)})
    del sd["b_velocity_0"]
    with pytest.raises(cc.DataError, match="no 'b_velocity_0'") as e:
        opt.set_state_dict(sd)
    assert "test_optimizer_paddle.py" in str(e.value)


def test_adamw_apply_decay_param_fun_and_lr_ratio():
    params = model()
    opt = cc.optimizer.AdamW(learning_rate=0.05, parameters=params, weight_decay=0.5,
                             apply_decay_param_fun=lambda name: name != "b",
                             lr_ratio=lambda p: 0.5 if p.name == "v" else 1.0)
    fn = make_step(params, opt)
    fn(X, T)
    gs = grads(W0, B0, V0)
    for got, a, g, decay, ratio in zip(params, (W0, B0, V0), gs, (1, 0, 1), (1, 1, 0.5)):
        lr = 0.05 * ratio
        a = a * (1 - lr * 0.5 * decay)
        m, v = 0.1 * g, 0.001 * g * g
        want = a - lr * (m / 0.1) / (np.sqrt(v / 0.001) + 1e-8)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


@pytest.mark.backends("numpy")
def test_misuse_is_refused_naming_the_line():
    params = model()
    opt = cc.optimizer.Adam(parameters=params)
    with pytest.raises(cc.TraceError, match="call it there, after loss.backward") as e:
        opt.step()
    assert "test_optimizer_paddle.py" in str(e.value)
    with pytest.raises(cc.TraceError, match="parameters=... is required"):
        cc.optimizer.AdamW(learning_rate=0.1)
    with pytest.raises(cc.TraceError, match="learning_rate must be a float"):
        cc.optimizer.SGD(learning_rate="0.1", parameters=params)
    with pytest.raises(cc.TraceError, match="grad_clip must be"):
        cc.optimizer.SGD(parameters=params, grad_clip=1.0)
    with pytest.raises(cc.TraceError, match="takes the parameters' arrays") as e:
        cc.compile(lambda w: cc.optimizer.Momentum(parameters=[w]))(W0)
    assert "test_optimizer_paddle.py" in str(e.value)


@pytest.mark.backends("numpy")
def test_paddles_signatures_and_defaults():
    import inspect
    params = model()
    assert list(inspect.signature(cc.optimizer.AdamW).parameters)[:6] == [
        "learning_rate", "beta1", "beta2", "epsilon", "parameters", "weight_decay"]
    opt = cc.optimizer.AdamW(parameters=params)
    assert (opt.get_lr(), opt._coeff, opt._beta1, opt._beta2, opt._epsilon) == (
        0.001, 0.01, 0.9, 0.999, 1e-8)
    assert cc.optimizer.Momentum(parameters=params)._momentum == 0.9
    assert cc.optimizer.SGD(0.3, params).get_lr() == 0.3  # Paddle's positional order


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_edge_shapes_and_float64_parameters(dtype):
    """A 0-d, a size-1, a zero-size parameter and a plain ndarray that is a non-contiguous
    view (its base's other elements untouched); float64 keeps its state and update in
    float64 (the rate's float32 value cast up, as Paddle's)."""
    values = [np.array(0.5), np.array([2.0]), np.zeros((0, 3)),
              np.arange(12.0).reshape(3, 4).T[::2]]
    base = np.arange(12.0).astype(dtype).reshape(3, 4)
    params = [Param(v.astype(dtype), f"p{i}") for i, v in enumerate(values[:3])] + [base.T[::2]]
    assert not params[3].flags.c_contiguous
    names = ["p0", "p1", "p2", "p3"]
    opt = cc.optimizer.Adam(learning_rate=0.1, parameters=params, weight_decay=0.01,
                            grad_clip=cc.nn.ClipGradByGlobalNorm(1.0))

    @cc.compile
    def step():
        loss = sum((state_tensor(p, n, trainable=True) ** 2).sum()
                   for p, n in zip(params, names))
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

    for _ in range(3):
        step()
    ref = [np.array(v, np.float64) for v in values]
    m = [0.0] * 4
    v2 = [0.0] * 4
    lr = float(np.float32(0.1))
    for k in range(1, 4):
        gs = [2 * r for r in ref]
        norm = np.sqrt(sum((g * g).sum() for g in gs))
        gs = [g * 1.0 / max(norm, 1.0) + 0.01 * r for g, r in zip(gs, ref)]
        for i, g in enumerate(gs):
            m[i] = 0.9 * m[i] + 0.1 * g
            v2[i] = 0.999 * v2[i] + 0.001 * g * g
            ref[i] = ref[i] - lr * (m[i] / (1 - 0.9 ** k)) / (
                np.sqrt(v2[i] / (1 - 0.999 ** k)) + 1e-8)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    for p, r in zip(params, ref):
        assert p.dtype == dtype and p.shape == r.shape
        np.testing.assert_allclose(p, r, rtol=tol * 10, atol=tol)
    assert all(a.dtype == dtype for arrays in opt._state.values() for a in arrays)
    np.testing.assert_array_equal(base.T[1::2], np.arange(12.0).reshape(3, 4).T[1::2])
    assert "param_3_moment1_0" in opt.state_dict()


@pytest.mark.backends("numpy")  # pins the unfused plan
def test_the_plan_updates_parameters_and_state_where_they_lie():
    w = Param(np.ones((64, 64), np.float32), "w")
    opt = cc.optimizer.Adam(learning_rate=cc.optimizer.lr.StepDecay(0.1, 2), parameters=[w],
                            weight_decay=0.01, grad_clip=cc.nn.ClipGradByGlobalNorm(1.0))

    def step():
        t = state_tensor(w, "w", trainable=True)
        (t * t).sum().backward()
        opt.step()
        opt.clear_grad()

    prog = cc.compile(step).lower()
    assert [v.name for v in prog.graph.inputs] == [
        "w", "learning_rate", "w_moment1_0", "w_moment2_0", "w_beta1_pow_acc_0",
        "w_beta2_pow_acc_0"]
    assert set(prog.graph.mutations) == {0, 2, 3, 4, 5}  # all but the rate
    requested = [d for d in prog.plan.decisions if d.requested and d.phase == "update"]
    assert len(requested) >= 7  # m, v (scale_, add_ each); p -= ...; the beta powers
    assert all(d.inplace for d in requested), [(d.op, d.reason) for d in requested
                                                if not d.inplace]
    n = 64 * 64 * 4
    assert 2 * n <= prog.plan.arena_bytes < 2 * n + 1024  # the gradient and one temporary


def test_a_parameters_own_learning_rate_factor():
    """Paddle's `param.optimize_attr['learning_rate']` (a ParamAttr's learning_rate) scales
    the rate for that parameter alone."""
    params = model()
    params[2].optimize_attr = {"learning_rate": 0.5}
    opt = cc.optimizer.Momentum(learning_rate=0.1, parameters=params)
    fn = make_step(params, opt)
    fn(X, T)
    fn(X, T)
    ps, vs = [a.astype(np.float64) for a in (W0, B0, V0)], [0.0] * 3
    for _ in range(2):
        for k, g in enumerate(grads(*ps)):
            vs[k] = 0.9 * vs[k] + g
            ps[k] = ps[k] - 0.1 * (0.5 if k == 2 else 1.0) * vs[k]
    for got, w in zip(params, ps):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)


@pytest.mark.backends("numpy")
def test_the_gpu_backends_cuda_c_matches_the_numpy_backend():
    """The gpu backend's CUDA C of an AdamW step (a scheduler, clipping), run on the host
    through the fiber harness (tests/gpu/harness), over three steps with a changing rate."""
    pytest.importorskip("runtime.gpu.executable")
    from tests.gpu import harness
    if not harness.available():
        pytest.skip("needs g++ on a POSIX host")

    def build():
        params = model()
        sched = cc.optimizer.lr.StepDecay(0.1, step_size=1, gamma=0.5)
        opt = cc.optimizer.AdamW(learning_rate=sched, parameters=params,
                                 grad_clip=cc.nn.ClipGradByGlobalNorm(0.5))
        return params, sched, opt, make_step(params, opt)

    want, want_sched, want_opt, ref = build()
    got, got_sched, got_opt, step = build()
    run = harness.on_host(cc.compile(step.fn, backend="gpu").lower(X, T))
    for _ in range(3):
        np.testing.assert_allclose(run(X, T), ref(X, T), rtol=1e-5)
        want_sched.step()
        got_sched.step()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    for k, w in want_opt.state_dict().items():
        np.testing.assert_allclose(got_opt.state_dict()[k], w, rtol=1e-5, atol=1e-7)


def test_minimize_is_step_over_the_chosen_parameters():
    stepped, minimized = model(), model()
    make_step(stepped, cc.optimizer.Adam(learning_rate=0.05, parameters=stepped))(X, T)
    opt = cc.optimizer.Adam(learning_rate=0.05, parameters=minimized)

    def step(x, t):
        loss = forward(minimized, x, t)
        loss.backward()
        opt.minimize(loss, no_grad_set=["b"])
        opt.clear_grad()
        return loss

    cc.compile(step)(X, T)
    np.testing.assert_array_equal(minimized[0], stepped[0])
    np.testing.assert_array_equal(minimized[2], stepped[2])
    np.testing.assert_array_equal(minimized[1], B0)
    stranger = np.ones(3, np.float32)
    with pytest.raises(cc.TraceError, match="parameters\\[0\\] is not one of this"):
        cc.compile(lambda: opt.minimize(None, parameters=[stranger]))()


def test_the_in_trace_form_takes_a_scheduler_too():
    sched = cc.optimizer.lr.StepDecay(0.5, step_size=1, gamma=0.5)

    def step(x, t, w, b, v):
        for p in (w, b, v):
            p.stop_gradient = False
        loss = ((((x @ w + b).tanh() @ v) - t) ** 2).mean()
        opt = cc.optimizer.SGD([w, b, v], learning_rate=sched)
        loss.backward()
        opt.step()
        return loss

    fn = cc.compile(step)
    ps = [a.copy() for a in (W0, B0, V0)]
    for _ in range(3):
        fn(X, T, *ps)
        sched.step()
    assert fn.traces == 1
    want, _ = reference("sgd", steps=3, lrs=[0.5, 0.25, 0.125])
    for got, w in zip(ps, want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-6)


@pytest.mark.backends("numpy")
def test_a_nested_schedulers_state_round_trips_flat(tmp_path):
    def build():
        lr = cc.optimizer.lr
        sched = lr.LinearWarmup(lr.CosineAnnealingDecay(0.3, T_max=4), warmup_steps=2,
                                start_lr=0.0, end_lr=0.3)
        return sched, cc.optimizer.SGD(learning_rate=sched, parameters=model())

    sched, opt = build()
    for _ in range(5):
        sched.step()
    sd = opt.state_dict()
    assert sd == {"LR_Scheduler.last_epoch": 5, "LR_Scheduler.last_lr": sched(),
                  "LR_Scheduler.LinearWarmup_LR.last_epoch": 3,
                  "LR_Scheduler.LinearWarmup_LR.last_lr": sched.learning_rate()}
    np.savez(tmp_path / "opt.npz", **sd)
    again, opt2 = build()
    opt2.set_state_dict(np.load(tmp_path / "opt.npz"))
    assert again.state_dict() == sched.state_dict()
    assert again._value == np.float32(sched())
    for _ in range(3):
        sched.step()
        again.step()
        assert again() == sched()
    nested, opt3 = build()
    opt3.set_state_dict({"LR_Scheduler": sched.state_dict()})  # Paddle's nested form
    assert nested.state_dict() == sched.state_dict()
