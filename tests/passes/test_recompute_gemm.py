"""GEMM recomputation (passes/recompute_gemm.py): a matmul output the backward pass reads is
computed again from its saved operands when a memory budget needs it, priced 2*m*n*k FLOPs;
never by default; values bit for bit the unbudgeted program's."""
import inspect

import numpy as np
import pytest

import compiler as cc
from passes import recompute as rc
from passes import recompute_gemm as rg


def chain(x, w1, w2, w3):
    for w in (w1, w2, w3):
        w.stop_gradient = False
    h1 = x @ w1
    h2 = h1 @ w2
    h3 = h2 @ w3
    loss = (h3 * h3).sum()
    loss.backward()
    with cc.no_grad():
        for w in (w1, w2, w3):
            w.subtract_(1.0 * w.grad)     # lr 1.0: a wrong update order shows
    return loss


LINE = inspect.getsourcelines(chain)[1]
H1, H2 = f"test_recompute_gemm.py:{LINE + 3}", f"test_recompute_gemm.py:{LINE + 4}"


def chain_args(seed=0, n=256):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, n)) / n).astype(np.float32) for _ in range(4)]


def beyond(plan):
    return plan.peak_bytes - plan.input_bytes


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_a_budget_below_the_default_recomputes_h1_from_x_and_w1(backend):
    plain = cc.compile(chain, backend=backend).lower(*chain_args())
    assert beyond(plain.plan) == 1_048_580          # h1, h2, h3 and h3's gradient, 256 KiB each
    assert not any(d.op == "matmul" for d in plain.plan.recompute_decisions)
    # 3 forward, 2 backward for the inputs' gradients, 2 weight gradients (w1's is a gemm)
    assert [n.op for n in plain.graph.nodes].count("matmul") == 7    # none taken by default
    prog = cc.compile(chain, backend=backend, memory_budget=800_000).lower(*chain_args())
    assert beyond(prog.plan) == 786_436
    d = next(d for d in prog.plan.recompute_decisions if d.recomputed)
    assert d.text == (
        f"%4 = matmul ({H1}, 262144 B): recomputed before the backward of matmul at {H2} "
        "(33554432 extra FLOPs, saves 262144 B planned): memory budget 800000 B: the plan "
        "recomputing it peaks at 786436 B beyond the inputs (the search: greedy step 1)")
    assert d.extra_flops == 2 * 256 * 256 * 256
    report = prog.plan.report()
    assert "  " + d.text in report
    assert f"33554432 FLOPs ->       786436 B  recomputing %4 (matmul at {H1})  <- taken" in report
    copy = d.copy
    assert copy.op == "matmul" and copy.phase == "backward" and copy.inputs[0].name == "x"
    assert [n.op for n in prog.graph.nodes].count("matmul") == 8


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_the_budgeted_program_gives_the_unbudgeted_values_bit_for_bit(backend):
    args = chain_args()
    got, want = [a.copy() for a in args], [a.copy() for a in args]
    budgeted = cc.compile(chain, backend=backend, memory_budget=800_000)
    plain = cc.compile(chain, backend=backend)
    assert any(d.recomputed for d in budgeted.lower(*got).plan.recompute_decisions)
    outs = [(budgeted(*got), plain(*want)) for _ in range(3)]
    for a, b in outs:
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
    assert not np.array_equal(got[1], args[1])


def test_a_sweep_of_budgets_is_monotone_and_never_exceeds_the_budget():
    search = cc.compile(chain, backend="numpy").lower(*chain_args()).plan.budget_search
    lo, hi = search.lowest().peak, search.zero.peak
    assert (lo, hi) == (786_436, 1_048_580)
    budgets = sorted({lo - 1, lo, hi - 1, hi} | {lo + (hi - lo) * k // 10 for k in range(11)})
    curve = search.curve(budgets)
    assert curve[0] == (lo - 1, None, None)
    flops = []
    for budget, peak, extra in curve[1:]:
        assert peak <= budget
        flops.append(extra)
    assert flops == sorted(flops, reverse=True) and flops[0] > 0 and flops[-1] == 0
    with pytest.raises(cc.MemoryBudgetError, match=f"the lowest planned peak the search "
                       f"reached is {lo} B"):
        cc.compile(chain, backend="numpy", memory_budget=lo - 1).lower(*chain_args())


def test_candidates_say_why_a_gemm_output_is_kept():
    def returned(x, w1, w2):
        w1.stop_gradient = w2.stop_gradient = False
        h = x @ w1                      # read by w2's gradient, and returned
        (h @ w2).sum().backward()
        return h, w1.grad, w2.grad

    args = chain_args()[:3]
    graph = cc.trace(returned, *args)
    considered, ok = rg.candidates(graph, rc._Facts(graph), 4096)
    assert ok == [] and [d.reason for d in considered] == [
        "it is returned (or is an argument's final value)"]
    graph = cc.trace(chain, *chain_args())
    considered, ok = rg.candidates(graph, rc._Facts(graph), 4096)
    assert [d.value for d in ok] == ["%4", "%5", "%6"]   # h1, h2, h3 (h3 * h3 reads it)
    assert [rg.gemm_flops(d.node) for d in ok] == [33554432] * 3
