"""examples/gpt.py's training step against an independent reference: the same model written
in PyTorch (its own autograd and `torch.optim.AdamW`), started from OUR initial weights, fed
the same batches at the same rates. Loss and every parameter after each step must agree to
float32 rounding, so a wrong value or gradient anywhere in the step (an op, a pass, the
planner writing over a live array) shows here, not as a loss curve that merely looks odd.

Dropout is the one thing the two cannot share (different generators), so the model runs in
eval mode (dropout off); everything else is the example's training step as written.

At GPT-2 small's shape (12 layers, width 768, 85M parameters) the two agreed the same way
(losses equal to 1e-6 over 3 steps, all but 295 of 85,204,992 weights within 0.01 of the
rate, those with gradients near AdamW's epsilon), loss rising on the second step in both at
the rate the example then used: a rate too high for the width, not a wrong program. The last
test keeps the example's rate at that width one that lowers the loss. PyTorch is optional:
without it only that test runs."""
import math
import os
import sys

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F

try:
    import torch
except ImportError:      # an optional peer: the comparisons skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(ROOT, "examples") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "examples"))

import gpt  # noqa: E402


# -- the reference: examples/gpt.py's GPT and step in PyTorch ---------------------------------
def torch_forward(w, ids, size):
    """Logits [B, T, V] of examples/gpt.py's GPT (eval mode) with the weights `w` (name ->
    torch tensor, Paddle's layouts: a Linear's weight is [in, out])."""
    b, t = ids.shape
    dim, heads = size.dim, size.heads
    F = torch.nn.functional

    def ln(x, name):
        return F.layer_norm(x, (dim,), w[name + ".weight"], w[name + ".bias"], eps=1e-5)

    x = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(t)]
    for i in range(size.layers):
        p = f"blocks.{i}."
        q, k, v = (a.reshape(b, t, heads, dim // heads).transpose(1, 2)
                   for a in (ln(x, p + "ln1") @ w[p + "qkv.weight"]).split(dim, -1))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dim // heads)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = torch.softmax(scores.masked_fill(causal, -math.inf), -1) @ v
        x = x + att.transpose(1, 2).reshape(b, t, dim) @ w[p + "proj.weight"]
        h = F.gelu(ln(x, p + "ln2") @ w[p + "fc1.weight"])      # exact (erf), Paddle's default
        x = x + h @ w[p + "fc2.weight"]
    return ln(x, "ln_f") @ w["head.weight"]


def torch_loss(w, ids, targets, size):
    logits = torch_forward(w, torch.as_tensor(ids), size)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             torch.as_tensor(targets).reshape(-1))


def torch_train(weights, size, batches, lrs, weight_decay=0.01):
    """Steps of examples/gpt.py's training step in PyTorch from `weights` (name -> numpy):
    (losses, [weights after each step], [AdamW's denominators sqrt(v / (1 - beta2^t)) after
    each step]). AdamW as Paddle's (and the example's): betas 0.9, 0.999, epsilon 1e-8,
    decoupled decay `p *= 1 - lr * weight_decay`."""
    w = {n: torch.tensor(np.array(a), requires_grad=True) for n, a in weights.items()}
    opt = torch.optim.AdamW(list(w.values()), lr=lrs[0], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=weight_decay)
    losses, after, denominators = [], [], []
    for (ids, targets), lr in zip(batches, lrs):
        for group in opt.param_groups:
            group["lr"] = lr
        loss = torch_loss(w, ids, targets, size)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        after.append({n: t.detach().numpy().copy() for n, t in w.items()})
        denominators.append({
            n: (opt.state[t]["exp_avg_sq"] / (1 - 0.999 ** float(opt.state[t]["step"])))
            .sqrt().numpy().copy() for n, t in w.items()})
    return losses, after, denominators


def our_train(size, batches, backend, seed=0, **options):
    """The example's own model, AdamW and warm-up schedule, its step compiled for `backend`,
    run on `batches` in eval mode (dropout off): (initial weights, losses, [weights after
    each step], the rates used)."""
    model, opt, sched = gpt.make_model(seed=seed, size=size)
    start = {n: p.numpy() for n, p in model.named_parameters()}
    step = cc.compile(gpt.train_step_for(model, opt), backend=backend, **options)
    model.eval()
    losses, after, lrs = [], [], []
    for ids, targets in batches:
        lrs.append(sched.get_lr())
        losses.append(float(step(ids, targets)))
        sched.step()
        after.append({n: p.numpy() for n, p in model.named_parameters()})
    return start, losses, after, lrs


def batches(size, n, seed=1):
    rng = np.random.default_rng(seed)
    return [gpt.batch(rng, size) for _ in range(n)]


def worst_gap(ours, theirs):
    """(name, the largest |ours - theirs| over max(|theirs|), 1e-3) of any parameter."""
    gaps = {n: float(np.max(np.abs(ours[n] - theirs[n]))) /
            max(float(np.max(np.abs(theirs[n]))), 1e-3) for n in theirs}
    name = max(gaps, key=gaps.get)
    return name, gaps[name]


# -- the tests --------------------------------------------------------------------------------
# A narrow model of the example's structure (2 blocks, 4 heads; every op of the width-768 step)
NARROW = gpt.Size(batch=2, context=16, dim=32, heads=4, layers=2)
STEPS = 3
# The loss within float32 rounding of a sum of B*T terms (measured: equal, or 1 ulp apart)
LOSS_RTOL = 1e-5
# Each gradient within 1e-5 of its tensor's largest entry (measured: at most 6e-7)
GRAD_RTOL = 1e-5
# Each parameter within 2% of the rates so far: AdamW moves every weight by about the rate
# (m / sqrt(v) is about sign(g) on the first step), so a wrong gradient moves a weight by a
# whole rate, while float32 rounding moved none by more than 0.0005 of it here. Except where
# AdamW's denominator sqrt(v) is within 100x of its epsilon (1e-8): there a rounding of the
# gradient (~1e-8 in absolute terms) is a visible fraction of g / (|g| + epsilon). 85 of
# 26,880 weights here, most in the query and key projections (at GPT-2's initialisation
# the scores are near 0 and their gradients ~60x smaller than the values'); one of them, a
# gradient of 5e-8 summed from terms of 1e-2, moved 0.03 rates. Those may differ by a rate.
PARAM_TOL, NEAR_EPSILON = 0.02, 1e-6


def our_gradients(size, data, backend):
    """The example's model (eval mode): (initial weights, loss, name -> gradient)."""
    model, _, _ = gpt.make_model(size=size)
    model.eval()
    names = [n for n, _ in model.named_parameters()]
    start = {n: p.numpy() for n, p in model.named_parameters()}

    def loss_and_grads(ids, targets):
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape([-1, len(gpt.VOCAB)]), targets.reshape([-1]))
        loss.backward()
        return [loss] + [p.grad for p in model.parameters()]
    out = cc.compile(loss_and_grads, backend=backend)(*data)
    return start, float(out[0]), {n: np.asarray(g) for n, g in zip(names, out[1:])}


@needs_torch
@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_the_loss_and_every_gradient_match_pytorch(backend):
    data = batches(NARROW, 1)[0]
    start, loss, grads = our_gradients(NARROW, data, backend)
    w = {n: torch.tensor(a, requires_grad=True) for n, a in start.items()}
    want = torch_loss(w, *data, NARROW)
    want.backward()
    assert loss == pytest.approx(float(want.detach()), rel=LOSS_RTOL)
    assert grads.keys() == w.keys()
    for name, t in w.items():
        g = t.grad.numpy()
        scale = float(np.max(np.abs(g)))
        assert scale > 0, name
        gap = float(np.max(np.abs(grads[name] - g)))
        assert gap <= GRAD_RTOL * scale, (name, gap / scale)


@needs_torch
@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_the_training_step_matches_pytorch_step_for_step(backend):
    """Forward, backward and the AdamW update of the example's compiled step, 3 steps at the
    warm-up's rates, against PyTorch's."""
    data = batches(NARROW, STEPS)
    start, losses, ours, lrs = our_train(NARROW, data, backend)
    assert len(start) == 2 + 8 * NARROW.layers + 3
    assert lrs[0] < lrs[1] < lrs[2]                  # the warm-up's rates, stepped
    want_losses, want, denominators = torch_train(start, NARROW, data, lrs)
    near = {n: np.zeros(a.shape, bool) for n, a in start.items()}
    for i in range(STEPS):
        assert losses[i] == pytest.approx(want_losses[i], rel=LOSS_RTOL), i
        budget = sum(lrs[:i + 1])
        for name, theirs in want[i].items():
            d = denominators[i][name]
            near[name] |= (d < NEAR_EPSILON) & (d > 0)    # (0: a character no batch holds)
            gap = np.abs(ours[i][name] - theirs)
            worst = float(np.max(np.where(near[name], 0.0, gap)))
            assert worst <= PARAM_TOL * budget, (i, name, worst / budget)
            assert float(np.max(gap)) <= budget, (i, name)
    # the exception stays an exception; and training moved every parameter (a step that
    # changed nothing would also "agree")
    assert sum(int(m.sum()) for m in near.values()) <= 0.01 * sum(a.size for a in start.values())
    for name, theirs in want[-1].items():
        assert np.max(np.abs(theirs - start[name])) > lrs[0], name


# GPT-2 small's width and heads, one block, a short batch: the width is what sets the rate
WIDE = gpt.Size(batch=2, context=64, dim=768, heads=12, layers=1)


def test_the_default_rate_at_gpt2_smalls_width_lowers_the_loss():
    """The example's own schedule at width 768, three steps on one batch: each lowers the
    loss. The rate the example used at every width (3e-3, warming up from 1.5e-4) raised it
    from 3.328 to 3.841 on the second step here (and from 3.26 to 4.53 at 12 layers)."""
    model, opt, sched = gpt.make_model(size=WIDE)
    step = cc.compile(gpt.train_step_for(model, opt), backend="cpu")
    data = gpt.batch(np.random.default_rng(1), WIDE)
    model.train()
    losses = []
    for _ in range(3):
        losses.append(float(step(*data)))
        sched.step()
    assert losses[0] == pytest.approx(math.log(len(gpt.VOCAB)), abs=0.3)
    assert losses[0] > losses[1] > losses[2], losses
    # the rule behind it: the rate scales as 1/width from the example's own
    assert gpt.peak_lr(WIDE) == pytest.approx(gpt.LR * gpt.DIM / 768)
    assert gpt.peak_lr("gpt2-small") == gpt.peak_lr(WIDE) and gpt.peak_lr() == gpt.LR
