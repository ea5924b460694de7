"""cc.optimizer (issue 10): SGD (with momentum) and AdamW inside the traced step; state in the
caller's arrays, updated in place; the learning rate a 0-d array argument."""
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F

pytestmark = pytest.mark.usefixtures("each_backend")

RNG = np.random.default_rng(0)
X = RNG.normal(size=(16, 8)).astype(np.float32)
Y = RNG.integers(0, 4, 16)
W1_0 = (RNG.normal(size=(8, 12)) * 0.3).astype(np.float32)
W2_0 = (RNG.normal(size=(12, 4)) * 0.3).astype(np.float32)


def grads(w1, w2):
    """The MLP's loss gradients, by hand in float64 (an independent oracle)."""
    x, w1, w2 = X.astype(np.float64), w1.astype(np.float64), w2.astype(np.float64)
    hp = x @ w1
    h = np.maximum(hp, 0)
    z = h @ w2
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = (p - np.eye(4)[Y]) / len(Y)
    dh = dz @ w2.T * (hp > 0)
    return x.T @ dh, h.T @ dz


def loss_of(x, y, w1, w2):
    w1.stop_gradient = False
    w2.stop_gradient = False
    loss = F.cross_entropy(F.relu(x @ w1) @ w2, y)
    loss.backward()
    return loss


def test_sgd_momentum_updates_parameters_and_velocity_in_place():
    def step(x, y, w1, w2, v1, v2, lr):
        opt = cc.optimizer.SGD([w1, w2], learning_rate=lr, momentum=0.9, velocity=[v1, v2])
        loss = loss_of(x, y, w1, w2)
        opt.step()
        opt.clear_grad()              # Paddle's default set_to_zero=True: zeros
        assert w1.grad is not None and w1.grad.shape == w1.shape
        opt.clear_grad(set_to_zero=False)
        assert w1.grad is None
        return loss
    fn = cc.compile(step)
    w1, w2 = W1_0.copy(), W2_0.copy()
    v1, v2 = cc.optimizer.SGD.init_state([w1, w2])
    rw, rv = [W1_0.astype(np.float64), W2_0.astype(np.float64)], [0.0, 0.0]
    for lr in (1.0, 0.5, 0.25):   # a new learning rate each step: lr is an argument
        fn(X, Y, w1, w2, v1, v2, np.array(lr, np.float32))
        gs = grads(*rw)
        rv = [0.9 * v + g for v, g in zip(rv, gs)]
        rw = [w - lr * v for w, v in zip(rw, rv)]
        for got, want in zip((w1, w2, v1, v2), rw + rv):
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    args = (X, Y, w1, w2, v1, v2)
    assert fn.lower(*args, np.array(0.1, np.float32)) is fn.lower(*args, np.array(2.0,
                                                                                 np.float32))


def test_adamw_matches_the_formula_and_counts_steps():
    def step(x, y, w1, w2, m1, m2, s1, s2, t, lr):
        opt = cc.optimizer.AdamW([w1, w2], learning_rate=lr, weight_decay=0.1,
                                 moment1=[m1, m2], moment2=[s1, s2], step=t)
        loss = loss_of(x, y, w1, w2)
        opt.step()
        opt.clear_grad()
        return loss
    fn = cc.compile(step)
    w1, w2 = W1_0.copy(), W2_0.copy()
    (m1, m2), (s1, s2), t = cc.optimizer.AdamW.init_state([w1, w2])
    rw = [W1_0.astype(np.float64), W2_0.astype(np.float64)]
    rm, rs = [0.0, 0.0], [0.0, 0.0]
    lr = np.array(0.05, np.float32)
    losses = []
    for k in range(1, 4):
        losses.append(float(fn(X, Y, w1, w2, m1, m2, s1, s2, t, lr)))
        gs = grads(*rw)
        rw = [w * (1 - 0.05 * 0.1) for w in rw]
        rm = [0.9 * m + 0.1 * g for m, g in zip(rm, gs)]
        rs = [0.999 * s + 0.001 * g * g for s, g in zip(rs, gs)]
        rw = [w - 0.05 * (m / (1 - 0.9 ** k)) / (np.sqrt(s / (1 - 0.999 ** k)) + 1e-8)
              for w, m, s in zip(rw, rm, rs)]
        assert t == k
        for got, want in zip((w1, w2, m1, m2, s1, s2), rw + rm + rs):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
    assert losses[2] < losses[0]


@pytest.mark.backends("numpy")  # pins the unfused plan
def test_adamw_plan_updates_state_in_place():
    def step(w, m, s, t, lr):
        opt = cc.optimizer.AdamW([w], learning_rate=lr, moment1=[m], moment2=[s], step=t)
        w.stop_gradient = False
        (w * w).sum().backward()
        opt.step()
        opt.clear_grad()
    w = np.ones((64, 64), np.float32)
    (m,), (s,), t = cc.optimizer.AdamW.init_state([w])
    prog = cc.compile(step).lower(w, m, s, t, np.array(0.1, np.float32))
    requested = [d for d in prog.plan.decisions if d.requested and d.phase == "update"]
    assert len(requested) >= 6  # t += 1; p *= ...; m, v (scale_, add_ each); p -= ...
    assert all(d.inplace for d in requested), [(d.op, d.reason) for d in requested
                                                if not d.inplace]
    assert set(prog.graph.mutations) == {0, 1, 2, 3}
    # every state array is written where it lies: no arena buffer holds a copy of one
    n = 64 * 64 * 4
    copies = [b for b in prog.plan.buffers if b.kind == "arena" and b.size == n
              and any(v in prog.graph.mutations.values() for v in b.values)]
    assert not copies
    # the whole step needs two parameter-sized places in the arena (the gradient and one
    # temporary of the update expression), plus 0-d scalars
    assert 2 * n <= prog.plan.arena_bytes < 2 * n + 1024
    assert prog.plan.peak_bytes == prog.plan.lower_bound_bytes


def test_optimizer_state_must_be_passed():
    def step(w, lr):
        cc.optimizer.AdamW([w], learning_rate=lr)
    with pytest.raises(cc.TraceError, match="moment1"):
        cc.compile(step)(np.ones(3, np.float32), np.array(0.1, np.float32))
    with pytest.raises(cc.TraceError, match="velocity"):
        cc.compile(lambda w: cc.optimizer.SGD([w], 0.1, momentum=0.9))(np.ones(3))
    with pytest.raises(cc.ShapeError, match="moment1"):
        cc.compile(lambda w, m, t: cc.optimizer.AdamW([w], 0.1, moment1=[m], moment2=[m],
                                                      step=t))(
            np.ones(3), np.ones(2), np.zeros(()))
