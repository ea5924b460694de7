"""Attention recomputed in the backward pass (passes/recompute_attention.py): the
probabilities softmax(q k^T ...) and the attention output p @ v are made again from q, k, v
before their backward readers instead of kept, when that lowers the planned peak, and an
attention input (q, k or v) from its projection GEMM within the default's FLOP allowance;
the copies are the same ops on the same operands, so every value is bit for bit the
program's without recomputation, on numpy, cpu and the gpu backend's CUDA C (through the
host harness); the budget search prices them; the refused ones say why."""
import importlib.util
import inspect
import os

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from passes import recompute_attention as ra
from passes.alias import alias_analysis
from tests.backends import AVAILABLE

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
NATIVE = [b for b in ("numpy", "cpu") if b in AVAILABLE]
TODAY = 17_842_244   # the transformer step's default plan beyond its inputs before this pass
ISSUE = 14_000_000   # issue 27's target for it


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def beyond(plan):
    return plan.peak_bytes - plan.input_bytes


def steps(fn, args, n=3, **options):
    args = [a.copy() for a in args]
    prog = cc.compile(fn, **options)
    outs = [np.asarray(prog(*args)).copy() for _ in range(n)]
    return outs + args


def attention(plan):
    """The plan's attention decisions by what they are about: "probabilities", "output",
    and the inputs' roles, "queries", "keys", "values"."""
    return {getattr(d, "role", "") or d.what: d for d in plan.recompute_decisions
            if isinstance(d, ra.AttentionDecision)}


KINDS = {"probabilities", "output", "queries", "keys", "values"}


def forward_value_read_in_backward(graph, op):
    """Whether a backward node reads (through views too) the forward `op` node's value."""
    root = alias_analysis(graph).root
    fwd = {id(n.out) for n in graph.nodes if n.op == op and n.phase == "forward"}
    return any(id(root[v]) in fwd for n in graph.nodes if n.phase == "backward"
               for v in n.inputs)


# -- the transformer step ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def transformer():
    return load_example("transformer_block")


@pytest.mark.parametrize("backend", NATIVE)
def test_transformer_default_plan_recomputes_the_attention(transformer, backend):
    prog = cc.compile(transformer.train_step, backend=backend).lower(
        *transformer.example_inputs())
    plan = prog.plan
    # both recomputed: 2 MiB of probabilities and 1 MiB of attention output
    assert beyond(plan) <= TODAY - 3 * 2**20
    d = attention(plan)
    probs, out = d["probabilities"], d["output"]
    assert probs.recomputed and out.recomputed, (probs.text, out.text)
    assert (probs.op, probs.nbytes, out.op, out.nbytes) == ("softmax", 2**21, "contiguous", 2**20)
    # the price: the scores GEMM (2 * 64 FLOPs per score), the scale, softmax (5 per score);
    # the output adds its GEMM with v (2 * 128 per element) and the copy
    scores = 8 * 4 * 128 * 128
    assert probs.extra_flops == 2 * 64 * scores + scores + 5 * scores
    assert out.extra_flops == probs.extra_flops + 2 * 128 * 2**18 + 2**18
    assert f"({probs.extra_flops} extra FLOPs" in probs.text
    assert "attention probabilities recomputed with their scores (matmul at " \
        "transformer_block.py:32) before the backward of matmul at transformer_block.py:34" \
        in probs.text
    assert "planned: " in probs.text
    # no backward node reads the forward probabilities: they die after p @ v
    assert not forward_value_read_in_backward(prog.graph, "softmax")
    copies = [n for n in prog.graph.nodes if n.op == "softmax" and n.phase == "backward"]
    assert len(copies) == 1                     # shared by the output's copy and dV, dS
    # the report's total counts the copies both share once
    report = plan.report()
    taken = [x for x in plan.recompute_decisions if x.recomputed]
    total = ra.total_flops(taken)
    assert total == out.extra_flops + sum(x.extra_flops for x in taken
                                          if not isinstance(x, ra.AttentionDecision)
                                          or x.what == "input")
    assert f"  in all: {len(taken)} recomputed, {total} extra FLOPs" in report
    # recompute="off" turns it off with the elementwise recomputation
    off = cc.compile(transformer.train_step, backend=backend, recompute="off").lower(
        *transformer.example_inputs()).plan
    assert not off.recompute_decisions and beyond(off) > TODAY


def _forward_read_late(graph, value_id):
    """Whether a backward node reads (through views too) the forward value `value_id`."""
    root = alias_analysis(graph).root
    return any(root[v].id == value_id and root[v].producer is not None
               and root[v].producer.phase == "forward"
               for n in graph.nodes if n.phase == "backward" for v in n.inputs)


@pytest.mark.parametrize("backend", NATIVE)
def test_transformer_default_plan_is_within_the_issues_14_MB(transformer, backend,
                                                             monkeypatch):
    args = transformer.example_inputs()
    prog = cc.compile(transformer.train_step, backend=backend).lower(*args)
    plan = prog.plan
    assert beyond(plan) <= ISSUE
    d = attention(plan)
    q, k, v = d["queries"], d["keys"], d["values"]
    # one projection recomputed, from a copy of the layer_norm that feeds it: q's GEMM
    # (2 * 256 FLOPs per element) and layer_norm's 4
    assert q.recomputed and (q.op, q.nbytes) == ("matmul", 2**20), q.text
    assert [c.op for c in q.chain] == ["layer_norm"]
    assert q.extra_flops == 2 * 256 * 2**18 + 4 * 2**18
    assert q.saved_bytes == 2**20
    assert ("attention queries recomputed with their projection (matmul at "
            "transformer_block.py:31, from a copy of layer_norm at transformer_block.py:30) "
            "before matmul at transformer_block.py:32 (135266304 extra FLOPs, saves 1048576 B "
            "planned)") in q.text
    assert "  " + q.text in plan.report()
    # the other two would cost as much again each: past the default's 3% of the program
    program = ra.program_flops(prog.plan.budget_search.graph)
    for x in (k, v):
        assert not x.recomputed and x.extra_flops == q.extra_flops
        assert x.reason == (
            f"its {x.extra_flops} extra FLOPs would take the default's GEMM recomputation to "
            f"{2 * x.extra_flops} FLOPs, past its allowance of {int(0.03 * program)} (3% of "
            f"the program's {program} FLOPs; a memory_budget may take it)")
    # no backward node reads the forward queries; their copy reads a layer_norm copy of x
    assert not _forward_read_late(prog.graph, q.node.out.id)
    (copy,) = [n for n in prog.graph.nodes if n.op == "matmul" and n.phase == "backward"
               and n.inputs[1].name == "wq"]
    ln = copy.inputs[0].producer
    assert ln.op == "layer_norm" and ln.phase == "backward" and ln.inputs[0].name == "x"
    # without the allowance the default plan is 1 MiB higher: past the issue's target
    monkeypatch.setattr(ra, "INPUT_WORK_SHARE", 0.0)
    without = cc.compile(transformer.train_step, backend=backend).lower(*args).plan
    assert not attention(without)["queries"].recomputed
    assert beyond(without) == beyond(plan) + 2**20 > ISSUE


@pytest.mark.parametrize("backend", NATIVE)
def test_transformer_steps_are_bit_identical_to_the_unrecomputed_program(transformer, backend,
                                                                         monkeypatch):
    monkeypatch.setattr(transformer, "LR", 1.0)
    args = transformer.example_inputs()
    plan = cc.compile(transformer.train_step, backend=backend).lower(*args).plan
    d = attention(plan)
    assert set(d) == KINDS
    assert [k for k in sorted(d) if d[k].recomputed] == ["output", "probabilities", "queries"]
    want = steps(transformer.train_step, args, backend=backend, recompute="off",
                 schedule="off")
    got = steps(transformer.train_step, args, backend=backend, sanitize=True)
    for a, b in zip(got, want):       # losses, then every argument after three updates
        np.testing.assert_array_equal(a, b)


# -- under a memory budget ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def default_plan(transformer):
    return cc.compile(transformer.train_step, backend="cpu").lower(
        *transformer.example_inputs()).plan


@pytest.fixture(scope="module")
def search(default_plan):
    return default_plan.budget_search


def test_the_budget_search_prices_the_attention_candidates(search, default_plan):
    # the default plan's peak is one the budget machinery reaches too
    ((budget, peak, _),) = default_plan.budget_curve([beyond(default_plan)])
    assert peak is not None and peak <= budget
    kinds = {getattr(d, "what", None) for d in search.candidates}
    assert {"probabilities", "output"} <= kinds
    lowest = search.lowest()
    assert lowest.peak <= TODAY - 3 * 2**20
    chosen = [d for d in lowest.recomputed if isinstance(d, ra.AttentionDecision)]
    # the probabilities, the output and all three inputs: 3 MiB below the default plan
    assert sorted(d.role or d.what for d in chosen) == sorted(KINDS)
    assert lowest.peak <= ISSUE - 2 * 2**20
    # the GEMM finder's plain candidates for q, k, v are these, priced once
    assert sum(d.op == "matmul" for d in search.candidates) == 3
    # the output's chain holds the probabilities' copy: made, and priced, once
    assert lowest.extra_flops == ra.total_flops(lowest.recomputed) < \
        sum(d.extra_flops for d in lowest.recomputed)


def test_transformer_under_its_lowest_budget(transformer, search, monkeypatch):
    monkeypatch.setattr(transformer, "LR", 1.0)
    args = transformer.example_inputs()
    budget = search.lowest().peak
    plan = cc.compile(transformer.train_step, backend="cpu",
                      memory_budget=budget).lower(*args).plan
    assert beyond(plan) <= budget
    d = attention(plan)
    assert all(x.recomputed for x in d.values())     # the three inputs too
    assert d["probabilities"].reason.startswith(f"memory budget {budget} B")
    want = steps(transformer.train_step, args, backend="cpu", recompute="off", schedule="off")
    got = steps(transformer.train_step, args, backend="cpu", memory_budget=budget)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(cc.MemoryBudgetError, match=f"the lowest planned peak the search "
                       f"reached is {budget} B"):
        cc.compile(transformer.train_step, backend="cpu",
                   memory_budget=budget - 1).lower(*args)


# -- F.scaled_dot_product_attention: a scale and a causal mask between the GEMM and softmax ------
B, T, H, D, HID = 2, 128, 2, 16, 512


def sdpa_step(x, wq, wk, wv, w1, w2):
    params = (wq, wk, wv, w1, w2)
    for p in params:
        p.stop_gradient = False
    q, k, v = ((x @ w).reshape([B, T, H, D]) for w in (wq, wk, wv))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True).reshape([B, T, H * D])
    y = F.gelu(o @ w1) @ w2       # the MLP's forward peak: the probabilities add to it
    loss = (y * y).mean()
    loss.backward()
    with cc.no_grad():
        for p in params:
            p.subtract_(1.0 * p.grad)
    return loss


def sdpa_args():
    rng = np.random.default_rng(0)

    def w(*s):
        return (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
    return [rng.standard_normal((B, T, H * D)).astype(np.float32), w(32, 32), w(32, 32),
            w(32, 32), w(32, HID), w(HID, 32)]


@pytest.mark.parametrize("backend", NATIVE)
def test_masked_scaled_attention_is_recomputed(backend):
    plan = cc.compile(sdpa_step, backend=backend).lower(*sdpa_args()).plan
    off = cc.compile(sdpa_step, backend=backend, recompute="off").lower(*sdpa_args()).plan
    probs = attention(plan)["probabilities"]
    assert probs.recomputed, probs.text
    # the copy's chain: the GEMM, the scale, the mask (where), then softmax
    assert [c.op for c in probs.chain] == ["matmul", "multiply", "where"]
    # on cpu the scale and the mask fuse into one body: it still runs in the backward pass
    # (before the change, the scheduler hoisted it and the peak did not fall)
    assert beyond(plan) <= beyond(off) - 2 * H * T * T * 4 + 4096
    want = steps(sdpa_step, sdpa_args(), backend=backend, recompute="off", schedule="off")
    got = steps(sdpa_step, sdpa_args(), backend=backend, sanitize=True)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", NATIVE)
def test_masked_attention_under_its_lowest_budget_recomputes_q_k_and_v(backend):
    # the inputs are x @ w through a reshape (no layer_norm before them): each copy is its
    # projection GEMM alone; the scores copy reads the q and k copies, the value GEMM's
    # gradient the v copy (the second of recompute_attention.rewrite's two rewrites)
    search = cc.compile(sdpa_step, backend=backend).lower(*sdpa_args()).plan.budget_search
    budget = search.lowest().peak
    prog = cc.compile(sdpa_step, backend=backend, memory_budget=budget).lower(*sdpa_args())
    assert beyond(prog.plan) <= budget
    d = attention(prog.plan)
    for role, name in (("queries", "wq"), ("keys", "wk"), ("values", "wv")):
        assert d[role].recomputed and d[role].chain == (), d[role].text
        assert d[role].extra_flops == 2 * 32 * B * T * H * D
        assert not _forward_read_late(prog.graph, d[role].node.out.id)
        assert [n.inputs[0].name for n in prog.graph.nodes if n.op == "matmul"
                and n.phase == "backward" and n.inputs[1].name == name] == ["x"]
    want = steps(sdpa_step, sdpa_args(), backend=backend, recompute="off", schedule="off")
    got = steps(sdpa_step, sdpa_args(), backend=backend, memory_budget=budget, sanitize=True)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_the_gpu_program_runs_the_copies(monkeypatch):
    harness = pytest.importorskip("tests.gpu.harness")
    if not harness.available():
        pytest.skip("needs g++ on a POSIX host")
    prog = cc.compile(sdpa_step, backend="gpu").lower(*sdpa_args())
    assert attention(prog.plan)["probabilities"].recomputed
    assert any(n.op == "softmax" and n.phase == "backward" for n in prog.graph.nodes)
    off = cc.compile(sdpa_step, backend="gpu", recompute="off").lower(*sdpa_args())
    harness.prebuild([prog._exec.module, off._exec.module])
    got_args, want_args = sdpa_args(), sdpa_args()
    got = harness.on_host(prog)(*got_args)
    want = harness.on_host(off)(*want_args)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for a, b in zip(got_args, want_args):
        np.testing.assert_array_equal(a, b)


def test_transformer_gpu_steps_match_the_unrecomputed_gpu_program(transformer, monkeypatch):
    """The issue's check on the gpu backend: three steps at lr 1.0 of the generated CUDA C,
    run through the host harness, with and without the recomputation: bit for bit."""
    harness = pytest.importorskip("tests.gpu.harness")
    if not harness.available():
        pytest.skip("needs g++ on a POSIX host")
    monkeypatch.setattr(transformer, "LR", 1.0)
    args = transformer.example_inputs()
    prog = cc.compile(transformer.train_step, backend="gpu").lower(*args)
    d = attention(prog.plan)
    assert set(d) == KINDS
    assert [k for k in sorted(d) if d[k].recomputed] == ["output", "probabilities", "queries"]
    assert beyond(prog.plan) <= ISSUE
    off = cc.compile(transformer.train_step, backend="gpu", recompute="off",
                     schedule="off").lower(*args)
    harness.prebuild([prog._exec.module, off._exec.module])
    results = []
    for p in (prog, off):
        run, call = harness.on_host(p), [a.copy() for a in args]
        results.append([np.asarray(run(*call)).copy() for _ in range(3)] + call)
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


# -- what is not recomputed, and why ---------------------------------------------------------------
def _decision(fn, args):
    plan = cc.compile(fn, backend="numpy").lower(*args).plan
    (d,) = [d for d in plan.recompute_decisions if isinstance(d, ra.AttentionDecision)]
    return d


def _small_args(n=3):
    rng = np.random.default_rng(1)
    return [rng.standard_normal((2, 128, 32)).astype(np.float32),
            rng.standard_normal((2, 128, 32)).astype(np.float32)] + \
        [(rng.standard_normal((32, 32)) / 6).astype(np.float32) for _ in range(n - 1)]


def test_a_key_overwritten_before_the_backward_pass_keeps_the_probabilities():
    def step(x, keys, wq, wv):
        for p in (wq, wv):
            p.stop_gradient = False
        q, v = x @ wq, x @ wv
        p = F.softmax(q @ keys.transpose([0, 2, 1]), axis=-1)
        o = p @ v
        keys.scale_(0.5)
        loss = (o @ wv.transpose([1, 0])).square().mean()
        loss.backward()
        with cc.no_grad():
            for w in (wq, wv):
                w.subtract_(1.0 * w.grad)
        return loss
    d = _decision(step, _small_args(3))
    assert not d.recomputed
    assert d.reason.startswith("operand %") and "is overwritten by scale at " \
        "test_recompute_attention.py:" in d.reason


def test_a_projection_weight_overwritten_before_the_backward_pass_keeps_the_queries():
    def step(x, wq, wk, wv):
        for p in (wk, wv):
            p.stop_gradient = False
        q, k, v = x @ wq, x @ wk, x @ wv
        o = F.softmax(q @ k.transpose([0, 2, 1]), axis=-1) @ v
        wq.scale_(0.5)            # the queries' weight changes before the backward pass
        loss = o.square().mean()
        loss.backward()
        with cc.no_grad():
            for w in (wk, wv):
                w.subtract_(1.0 * w.grad)
        return loss
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((4, 128, 32)).astype(np.float32)] + \
        [(rng.standard_normal((32, 32)) / 6).astype(np.float32) for _ in range(3)]
    plan = cc.compile(step, backend="numpy").lower(*args).plan
    q = attention(plan)["queries"]
    line = inspect.getsourcelines(step)[1]
    assert not q.recomputed and q.op == "matmul" and q.loc.endswith(f":{line + 3}")
    assert q.reason == (f"operand %wq of matmul at test_recompute_attention.py:{line + 3} is "
                        f"overwritten by scale at test_recompute_attention.py:{line + 5} "
                        "before the backward pass reads the queries")


def test_returned_probabilities_are_kept():
    def step(x, w, wv):
        for p in (w, wv):
            p.stop_gradient = False
        p = F.softmax((x @ w) @ x.transpose([0, 2, 1]), axis=-1)
        loss = (p @ (x @ wv)).square().mean()
        loss.backward()
        with cc.no_grad():
            for u in (w, wv):
                u.subtract_(1.0 * u.grad)
        return loss, p
    d = _decision(step, _small_args(3)[:1] + _small_args(3)[2:])
    assert not d.recomputed and d.reason == "it is returned (or is an argument's final value)"


def test_scores_not_made_by_a_gemm_are_kept():
    def step(x, w, wv):
        for p in (w, wv):
            p.stop_gradient = False
        s = F.log_softmax((x @ w) @ x.transpose([0, 2, 1]), axis=-1)
        p = F.softmax(s, axis=-1)
        loss = (p @ (x @ wv)).square().mean()
        loss.backward()
        with cc.no_grad():
            for u in (w, wv):
                u.subtract_(1.0 * u.grad)
        return loss
    d = _decision(step, _small_args(3)[:1] + _small_args(3)[2:])
    assert not d.recomputed
    assert d.reason.startswith("its scores come from log_softmax at test_recompute_attention.py:")
    assert d.reason.endswith("not a matmul followed by elementwise steps")
