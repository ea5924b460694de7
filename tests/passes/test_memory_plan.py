"""Memory planning: the seed numbers, the accounting of ARCHITECTURE.md §6, placement and
inspection."""
import json

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler import passes
from passes.memory_plan import GPU_ALIGNMENT
from passes.verify import verify_plan

from tests.backends import numpy_compile

RELU_INPUT = np.zeros((1, 64, 512, 512), np.float32)  # 64 MiB, the Paddle seed


def plan_of(fn, *args, **kw):
    prog = numpy_compile(fn, **kw).lower(*args)
    verify_plan(prog.graph, prog.plan)
    return prog.plan


def test_seed_relu_inplace_vs_out_of_place():
    assert plan_of(F.relu_, RELU_INPUT).peak_bytes == 67108864
    assert plan_of(F.relu, RELU_INPUT).peak_bytes == 134217728
    assert plan_of(F.relu, RELU_INPUT, donate=("x",)).peak_bytes == 67108864


def test_seed_relu_donated_output_is_the_callers_buffer():
    x = -np.ones((4, 4), np.float32)
    out = numpy_compile(F.relu, donate=("x",))(x)
    assert np.shares_memory(out, x) and np.array_equal(out, np.zeros((4, 4)))


def _hundred_adds(inplace_form):
    def f(x):
        x = x * 1.0
        for _ in range(100):
            if inplace_form:
                x.add_(1.0)
            else:
                x = x + 1.0
        return x
    return f


def test_hundred_additions_plan_the_same_peak_either_way():
    x = np.zeros((256, 256), np.float32)
    inplace = plan_of(_hundred_adds(True), x)
    out_of_place = plan_of(_hundred_adds(False), x)
    assert inplace.peak_bytes == out_of_place.peak_bytes
    # input + result (+ one cache line of scalar constants)
    assert inplace.peak_bytes <= 2 * x.nbytes + 64
    assert out_of_place.naive_bytes - out_of_place.peak_bytes >= 99 * x.nbytes
    assert out_of_place.no_inplace_peak_bytes > out_of_place.peak_bytes
    np.testing.assert_array_equal(numpy_compile(_hundred_adds(False), sanitize=True)(x),
                                  np.full_like(x, 100.0))


def test_accounting_fields_are_consistent():
    def f(x, w):
        h = (x @ w).tanh()
        return h.sum(), h * 2.0
    x, w = np.ones((8, 16), np.float32), np.ones((16, 32), np.float32)
    plan = plan_of(f, x, w)
    assert plan.input_bytes == x.nbytes + w.nbytes
    assert plan.output_bytes == 4 + 8 * 32 * 4
    assert plan.peak_bytes == plan.input_bytes + plan.arena_bytes + plan.output_bytes
    assert plan.lower_bound_bytes <= plan.peak_bytes <= plan.naive_bytes
    assert plan.no_inplace_peak_bytes >= plan.peak_bytes
    for b in plan.buffers:
        if b.kind == "arena":
            assert b.offset % 64 == 0 and b.offset + b.size <= plan.arena_bytes


def test_gpu_alignment_is_256():
    def f(x):
        return (x * 2.0).exp() + x.sin()
    graph = passes.dce(cc.trace(f, np.ones(10, np.float32)))
    plan = passes.plan_memory(graph, alignment=GPU_ALIGNMENT)
    verify_plan(graph, plan)
    assert all(b.offset % 256 == 0 for b in plan.buffers if b.kind == "arena")


def test_inplace_off_still_reuses_dead_buffers():
    def f(x):
        a = x * 2.0
        b = a.exp()
        c = b.sin()
        return c.cos()
    x = np.ones(1024, np.float32)
    off = plan_of(f, x, inplace="off")
    assert all(not d.inplace for d in off.decisions)
    # a and c can share memory (a is dead before c is written): two arena slots suffice.
    assert off.arena_bytes == 2 * x.nbytes
    assert off.no_inplace_peak_bytes == off.peak_bytes


def test_touching_lifetimes_do_not_share_unless_in_place():
    def f(x):
        a = x * 2.0
        return a.exp() > 1.0   # a dies at the compare's input; the bool result is fresh
    plan = plan_of(f, np.ones(64, np.float32))
    arena = [b for b in plan.buffers if b.kind == "arena" and b.size >= 256]
    assert len(arena) == 1  # a, exp(a) in place; the bool output is an output buffer


def test_report_json_and_buffers_are_inspectable(tmp_path):
    def f(x):
        y = x * 2.0
        y.relu_()
        return y.sum()
    plan = plan_of(f, np.ones((4, 4), np.float32))
    text = plan.report()
    assert "peak" in text and "lower bound" in text and "naive" in text
    assert "relu_" in text and "test_memory_plan.py:" in text
    data = json.loads(plan.to_json())
    assert data["peak_bytes"] == plan.peak_bytes
    assert {d["op"] for d in data["decisions"]} >= {"relu_"}
    assert all({"offset", "size", "start", "end", "values"} <= set(b) for b in data["buffers"])


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    plan = plan_of(lambda x: (x * 2.0).exp(), np.ones(8, np.float32))
    path = plan.plot(str(tmp_path / "plan.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_verifier_rejects_overlapping_live_buffers():
    def f(x):
        a = x * 2.0
        b = x * 3.0
        return cc.concat([a, b])  # not elementwise: a and b live together in the arena
    graph = passes.dce(cc.trace(f, np.ones(16, np.float32)))
    plan = passes.plan_memory(graph)
    a_buf, b_buf = [b for b in plan.buffers if b.kind == "arena" and b.size == 64]
    b_buf.offset = a_buf.offset
    with pytest.raises(passes.PlanError, match="live together and overlap"):
        verify_plan(graph, plan)


def test_verifier_rejects_an_illegal_inplace_and_sanitizer_shows_it():
    def f(x):
        y = x * 2.0
        z = y.exp()
        return z + y
    x = np.arange(4, dtype=np.float64)
    graph = passes.dce(cc.trace(f, x))
    _, decisions = passes.reinplace(graph)
    exp = next(d for d in decisions if d.op == "exp")
    exp.inplace = True  # force the refused reuse: y is still read by the add
    plan = passes.plan_memory(graph, decisions=decisions)
    with pytest.raises(passes.PlanError, match="is read later"):
        verify_plan(graph, plan)
    from runtime.arena import ArenaExecutable
    outs, _ = ArenaExecutable(graph, plan, sanitize=True).run([x])
    assert not np.allclose(outs[0], np.exp(2 * x) + 2 * x)  # the wrong plan gives a wrong answer


def test_liveness_counts_backward_reads():
    def f(a):
        a.stop_gradient = False
        y = a.sin()
        y.sum().backward()
        return a.grad
    graph = passes.dce(cc.trace(f, np.ones(3)))
    live = passes.liveness(graph)
    a = graph.inputs[0]
    cos_index = next(i for i, n in enumerate(graph.nodes) if n.op == "cos")
    assert cos_index in live.readers[a] and live.last_use[a] >= cos_index


def test_alias_analysis_follows_every_view():
    def f(x):
        v = x.reshape([12]).unsqueeze(0)[:, 2:].t().detach().expand([10, 3])
        return v * 1.0
    graph = passes.dce(cc.trace(f, np.ones((3, 4))))
    aliases = passes.alias_analysis(graph)
    x = graph.inputs[0]
    views = [n.out for n in graph.nodes
             if n.op in ("reshape", "slice", "transpose", "detach", "expand")]
    assert len(views) == 6
    assert views and all(aliases.root[v] is x for v in views)


def test_graph_exports_to_networkx_in_topological_order():
    import networkx as nx

    def f(x):
        return (x * 2.0).sin() + x
    graph = cc.trace(f, np.ones(3))
    g = graph.to_networkx()
    order = list(nx.topological_sort(g))
    assert order[0] == "%x" and set(order) == {v.ref() for v in graph.all_values()}
    assert g.nodes[graph.outputs[0].ref()]["op"] == "add"


def test_the_four_figures_share_one_footing():
    """Issue 16: `x + 1.0` on float32[4] planned a 96 B peak and a 36 B naive figure (the peak
    counted the 64-byte alignment, the other two didn't)."""
    plan = numpy_compile(lambda x: x + 1.0).lower(np.ones(4, np.float32)).plan
    # input 16 B + the 0-d constant in the arena (4 B, aligned to 64) + the 16 B result
    assert (plan.naive_bytes, plan.no_inplace_peak_bytes, plan.peak_bytes,
            plan.lower_bound_bytes) == (96, 96, 96, 96)
    assert "naive >= no-inplace peak >= peak >= lower bound" in plan.report()


def test_when_reuse_packs_worse_the_users_own_inplace_ops_are_kept_if_that_fits():
    """Step 6 of plan_memory: "auto" never costs memory. A plan with only the requested
    inplace ops is taken when it is no bigger than the plan without any reuse."""
    from passes.memory_plan import plan_memory as plan
    from passes.reinplace import REQUESTED_ONLY, reinplace

    def f(x, w):
        y = (x @ w).exp()            # auto candidate
        w.add_(1.0)                  # the user's own inplace op on a caller's array
        return y.sum()

    graph = passes.dce(cc.trace(f, np.ones((4, 4)), np.ones((4, 4))))
    _, mine = reinplace(graph, "auto", requested_only=True)
    assert [d.inplace for d in mine if d.requested] == [True]
    assert all(not d.inplace and d.reason == REQUESTED_ONLY for d in mine if not d.requested)
    p = plan(graph, "auto", decisions=mine, baseline=False)
    verify_plan(graph, p)
    assert p.peak_bytes >= p.lower_bound_bytes
