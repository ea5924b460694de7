"""The MLP step's memory (issue 27): relu's mask kept as bits (passes/recompute.py,
`pack_masks`, chosen by the pipeline when the planned peak falls), values bit for bit the byte
mask's."""
import importlib.util
import inspect
import json
import os

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from passes.recompute import mask_candidates, pack_masks

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mlp_line(text: str) -> str:
    lines, first = inspect.getsourcelines(load_example("mlp").train_step)
    return f"mlp.py:{first + next(i for i, line in enumerate(lines) if text in line)}"


def beyond_inputs(plan) -> int:
    return plan.peak_bytes - plan.input_bytes


def test_mlp_step_on_cpu_keeps_relus_mask_as_bits_and_plans_1132548_bytes():
    mlp = load_example("mlp")
    plan = cc.compile(mlp.train_step, backend="cpu").lower(*mlp.example_inputs()).plan
    # 1 MiB (the hidden gradient) + 32 KiB of bits + w2's gradient (40 KiB) + the logits'
    # gradient (10 KiB) + the loss: the target was <= 1.15 MB (1,361,924 B before)
    assert beyond_inputs(plan) == 1_132_548
    (d,) = plan.mask_decisions
    line = _mlp_line("F.relu_")
    assert d.packed and d.op == "greater_than" and d.loc == line
    assert d.text == (f"%43 = greater_than ({line}, 262144 B): kept as 32768 B of bits (32 per "
                      "int32): the planned peak is 5193772 B with bits, 5423148 B with bytes")
    report = plan.report()
    assert "masks the backward pass reads:\n  " + d.text in report
    assert json.loads(plan.to_json())["mask_decisions"][0]["packed"] is True
    buffers = [b for b in plan.buffers if b.kind == "arena"]
    assert not any(b.size == 262144 for b in buffers)          # no byte mask left
    assert any(b.size == 32768 and b.values[0].dtype == np.int32 for b in buffers)


def test_mlp_step_on_numpy_keeps_the_byte_mask_and_says_why():
    # unfused, the unpacking would materialise int32 temporaries bigger than the byte mask
    mlp = load_example("mlp")
    plan = cc.compile(mlp.train_step, backend="numpy").lower(*mlp.example_inputs()).plan
    assert beyond_inputs(plan) == 1_361_924
    (d,) = plan.mask_decisions
    assert not d.packed and d.text.startswith(
        f"%43 = greater_than ({_mlp_line('F.relu_')}, 262144 B): kept as bytes: the planned "
        "peak is ")
    bits, bytes_ = (int(s.split()[0]) for s in d.reason.split("is ", 1)[1].split(", "))
    assert bytes_ == 5423148 < bits


def mlp_step(x, labels, w1, b1, w2, b2):
    for p in (w1, b1, w2, b2):
        p.stop_gradient = False
    h = F.relu_(x @ w1 + b1)
    loss = F.cross_entropy(h @ w2 + b2, labels)
    loss.backward()
    with cc.no_grad():
        for p in (w1, b1, w2, b2):
            p.subtract_(1.0 * p.grad)       # lr 1.0: a wrong update order shows
    return loss


def run_steps(fn, args, n=3, **options):
    args = [a.copy() for a in args]
    f = cc.compile(fn, **options)
    outs = [np.asarray(f(*args)).copy() for _ in range(n)]
    return outs, args, f.lower(*args).plan


@pytest.mark.parametrize("options", [dict(backend="cpu"), dict(backend="numpy", fuse=True)],
                         ids=["cpu", "numpy-fused"])
def test_three_steps_at_lr_1_give_the_byte_masks_values_bit_for_bit(options):
    mlp = load_example("mlp")
    args = mlp.example_inputs()
    got_out, got_args, plan = run_steps(mlp_step, args, **options)
    want_out, want_args, base = run_steps(mlp_step, args, recompute="off", **options)
    assert [d.packed for d in plan.mask_decisions] == [True] and not base.mask_decisions
    for a, b in zip(got_out + got_args, want_out + want_args):
        assert a.tobytes() == b.tobytes()


def relu_grad(x, g):
    x.stop_gradient = False
    (F.relu(x) * g).sum().backward()
    return x.grad


def leaky_relu_grad(x, g):      # two masks, y > 0 and y <= 0 of a computed y
    x.stop_gradient = False
    (F.leaky_relu(x * 1.0, 0.25) * g).sum().backward()
    return x.grad


def special_relu_input(shape, seed=0):
    """Every bit position of a word set and clear (the sign bit, k = 31, included), and the
    values on relu's edge: +-0.0, NaN, +-inf, the smallest subnormal."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[:32] = 1.0                          # a word of ones (the sign bit set: a negative word)
    flat[32:64] = -1.0                       # a word of zeros
    flat[64:96:2] = 1.0                      # alternate bits
    flat[65:96:2] = -1.0
    flat[96:104] = [0.0, -0.0, np.nan, np.inf, -np.inf, np.float32(1e-45), -np.float32(1e-45),
                    np.float32(3.4e38)]
    flat[127] = np.nan                       # the sign bit of word 3 clear, others mixed
    return x


@pytest.mark.parametrize("backend", ["cpu", "numpy"])
@pytest.mark.parametrize("fn", [relu_grad, leaky_relu_grad], ids=["relu", "leaky_relu"])
def test_forced_bits_give_the_gradient_bit_for_bit_on_every_pattern(fn, backend, monkeypatch):
    import compiler.pass_pipeline as pp

    x = special_relu_input((64, 1024))
    g = np.random.default_rng(1).standard_normal((64, 1024)).astype(np.float32)
    want = cc.compile(fn, backend=backend, recompute="off")(x, g)
    if fn is relu_grad:
        assert want.tobytes() == np.where(x > 0, g, np.float32(0)).tobytes()

    def always(state):      # the pipeline's choice aside: pack whatever qualifies
        state.graph = pack_masks(state.graph, mask_candidates(state.graph))
    monkeypatch.setattr(pp, "_pack_masks", always)
    prog = cc.compile(fn, backend=backend).lower(x, g)
    assert any(n.out.dtype == np.int32 and n.out.shape == (2048,) for n in prog.graph.nodes)
    assert prog(x, g).tobytes() == want.tobytes()


def test_masks_that_cant_be_bits_are_not_candidates():
    x, g = np.ones((64, 1024), np.float32), np.ones((64, 1024), np.float32)
    assert [m.op for m, _ in mask_candidates(cc.trace(relu_grad, x, g))] == ["greater_than"]
    # smaller than 64 KiB; a size not a multiple of 32
    assert mask_candidates(cc.trace(relu_grad, x[:8], g[:8])) == []
    assert mask_candidates(cc.trace(relu_grad, x[:, :1000], g[:, :1000])) == []

    def mask_read_forward(x, g):    # the user's own mask, read by a forward where
        m = x > 0
        return cc.where(m, g, 0.0) + cc.where(m, x, 1.0)
    assert mask_candidates(cc.trace(mask_read_forward, x, g)) == []

    def mask_of_an_argument(x, g):  # leaky_relu's masks are x > 0, x <= 0: x may be strided
        x.stop_gradient = False
        (F.leaky_relu(x, 0.25) * g).sum().backward()
        return x.grad
    assert mask_candidates(cc.trace(mask_of_an_argument, x, g)) == []
    assert len(mask_candidates(cc.trace(leaky_relu_grad, x, g))) == 2


# -- GEMM-accumulate with a 0-d rate array (SGD(parameters=) passes its rate as one) ----------
def test_the_sgd_layer_step_folds_w1_with_its_rate_array_and_plans_as_the_loose_step():
    mlp = load_example("mlp")
    net, opt = mlp.make_net()
    x, labels, *_ = mlp.example_inputs()
    step = mlp.layer_train_step_for(net, opt)
    plans = {be: cc.compile(step, backend=be).lower(x, labels).plan for be in ("cpu", "numpy")}
    # before: 4,259,844 B on cpu (w1's 3 MiB gradient), now as train_step
    assert beyond_inputs(plans["cpu"]) == 1_132_548
    assert beyond_inputs(plans["numpy"]) == 1_361_924
    line = inspect.getsourcelines(mlp.layer_train_step_for)[1] + 4    # opt.step()
    fc1, fc2 = plans["cpu"].gemm_decisions
    w1 = net.fc1.weight.name   # (Paddle's names count the layers made before in the process)
    assert fc1.folded and fc1.text == (
        f"update of {w1} (mlp.py:{line}): one gemm writing into {w1}: "
        "alpha=-1, beta=1, trans_a; operand %45 is multiplied by the rate %learning_rate "
        "first (1048576 B, in place when nothing reads it later); the gradient (matmul at "
        f"mlp.py:{line - 15}) gets no buffer")
    assert not fc2.folded and "folding would keep 1058816 B" in fc2.reason
    gemm = next(n for n in cc.compile(step, backend="numpy").lower(x, labels).graph.nodes
                if n.op == "gemm")
    assert gemm.attrs["alpha"] == -1.0 and gemm.inputs[1].producer.op == "multiply"


def rate_step(x, labels, w1, b1, w2, b2, lr):
    for p in (w1, b1, w2, b2):
        p.stop_gradient = False
    h = F.relu_(x @ w1 + b1)
    loss = F.cross_entropy(h @ w2 + b2, labels)
    loss.backward()
    with cc.no_grad():
        for p in (w1, b1, w2, b2):
            p.subtract_(p.grad * lr)          # as SGD writes it: a 0-d rate array
    return loss


def reference_steps(fn, args, rates):
    """The traced, unfolded program run op by op (runtime.reference), one step per rate."""
    from runtime.reference import evaluate
    args = [a.copy() for a in args]
    graph = cc.trace(fn, *args)
    outs = []
    for r in rates:
        args[-1][...] = r
        out, muts = evaluate(graph, [a.copy() for a in args])
        for k, v in muts.items():
            args[k][...] = v
        outs.append(out[0])
    return outs, args


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_steps_with_a_rate_array_match_the_unfolded_program(backend):
    mlp = load_example("mlp")
    args = list(mlp.example_inputs()) + [np.array(1.0, np.float32)]
    rates = [1.0, 1.0, 1.0, 0.25]       # lr 1.0 shows a wrong order; the rate is read per call
    want_out, want_args = reference_steps(rate_step, args, rates)
    got_args = [a.copy() for a in args]
    f = cc.compile(rate_step, backend=backend)
    assert [d.folded for d in f.lower(*got_args).plan.gemm_decisions] == [True, False]
    got_out = []
    for r in rates:
        got_args[-1][...] = r
        got_out.append(np.asarray(f(*got_args)).copy())
    assert f.cache_info().misses == 1      # one program: the rate is data, not a constant
    for a, b in zip(got_out + got_args, want_out + want_args):  # BLAS's blocking: 1e-6 * max
        assert np.abs(a - b).max() <= 1e-6 * max(np.abs(b).max(), 1.0)
    assert not np.array_equal(got_args[2], args[2])


def test_a_rate_wider_than_the_gradient_is_not_folded():
    mlp = load_example("mlp")
    args = list(mlp.example_inputs()) + [np.array(0.5, np.float64)]
    plan = cc.compile(rate_step, backend="numpy").lower(*args).plan
    assert all(not d.folded for d in plan.gemm_decisions)
    assert "its rate %lr is f64[], wider than the gradient f32[784,1024]" in \
        plan.gemm_decisions[0].reason
