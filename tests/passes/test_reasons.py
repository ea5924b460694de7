"""Each refusal names the condition that actually failed, and each value it names is the one
the user wrote (issue 16, items 4, 5, 8)."""
import inspect
import json

import numpy as np

import compiler as cc

X = np.random.default_rng(2).standard_normal((2, 3))


def line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def one(decisions, op):
    found = [d for d in decisions if d.op == op]
    assert len(found) == 1, decisions
    return found[0]


def exp_then_zero(x):
    y = x.exp()
    # The function writes a fresh value into x: its buffer must keep the new value. (A
    # `zero_` is a `fill` over x's own buffer, so exp's reason would be that fill instead.)
    x.uniform_(0.0, 0.0)
    return y


def test_donated_but_mutated_argument_says_so():
    d = one(cc.compile(exp_then_zero, donate=("x",)).lower(X).plan.decisions, "exp")
    assert not d.inplace
    assert "is donated, but the function writes into it" in d.reason
    assert f"test_reasons.py:{line_of(exp_then_zero, 'x.uniform_(0.0, 0.0)')}" in d.reason
    d = one(cc.compile(exp_then_zero).lower(X).plan.decisions, "exp")
    assert d.reason == "input argument 'x' is a caller's array that was not donated"


def exp_of_transpose(y):
    y = y * 2.0
    t = y.t()
    t.exp_()
    return t.sum() + y.sum()


def test_a_view_is_named_with_its_own_line():
    d = one(cc.compile(exp_of_transpose).lower(X).plan.decisions, "exp_")
    t_line, y_line = (line_of(exp_of_transpose, s) for s in ("t = y.t()", "y = y * 2.0"))
    assert d.inplace
    assert f"(transpose at test_reasons.py:{t_line}, a view of " in d.reason
    assert f"(multiply at test_reasons.py:{y_line})" in d.reason


def train(x, w):
    w.stop_gradient = False
    loss = (x @ w).relu().sum()
    loss.backward()
    with cc.no_grad():
        w.subtract_(w.grad * 0.1)
    return loss


def test_decisions_carry_their_phase():
    plan = cc.compile(train).lower(X, np.ones((3, 4))).plan
    phases = {d.phase for d in plan.decisions}
    assert phases == {"forward", "backward", "update"}, plan.decisions
    # the update, folded with its gradient into one gemm (GEMM-accumulate)
    assert one(plan.decisions, "gemm").phase == "update"
    header = next(line for line in plan.report().splitlines() if "requested" in line)
    assert header.split()[:4] == ["op", "where", "phase", "requested"]
    data = json.loads(plan.to_json())
    assert {d["phase"] for d in data["decisions"]} == phases


def view_rederived_at_return(x):
    y = x * 2.0
    v = y[1:]
    y.add_(1.0)
    return v                     # v is re-derived from the written y here


def test_nodes_made_for_the_outputs_carry_the_return_line():
    graph = cc.compile(view_rederived_at_return).lower(X).graph
    last = graph.nodes[-1]
    assert last.op == "slice" and last.out is graph.outputs[0]
    assert str(last.loc) == f"test_reasons.py:{line_of(view_rederived_at_return, 'return v')}"


def test_printed_graph_numbers_the_points_the_plan_uses():
    prog = cc.compile(view_rederived_at_return).lower(X)
    text = str(prog.graph)
    for k, node in enumerate(prog.graph.nodes):
        assert f"[{k}] {node.out.ref()}:" in text
    assert f"[{len(prog.graph.nodes)}] return" in text
    for b in prog.plan.buffers:  # every interval is in the points the listing shows
        assert -1 <= b.start <= b.end <= len(prog.graph.nodes)
    data = json.loads(prog.plan.to_json())
    assert data["num_points"] == len(prog.graph.nodes)
    point = {v["value"]: v["point"] for v in data["values"]}
    assert all(point[n.out.ref()] == k for k, n in enumerate(prog.graph.nodes))
