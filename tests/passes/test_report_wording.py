"""What the schedule section of `plan.report()` says (passes/schedule.py, describe_moves): each
line names the node that moved and the node it now follows as two different things (the op and
value when several nodes share a source line and a description), says what is true of its
point numbers, and names every node of a run that moved together."""
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.cli import load_example
from passes.schedule import describe_moves


def three_relu_layers(x, w1, w2, w3):
    for w in (w1, w2, w3):
        w.stop_gradient = False
    h = F.relu_(x @ w1)
    h = F.relu_(h @ w2)
    loss = (F.relu_(h @ w3) ** 2).mean()
    loss.backward()
    with cc.no_grad():
        for w in (w1, w2, w3):
            w.subtract_(0.1 * w.grad)
    return loss


def layer_args():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    return [x] + [rng.standard_normal((128, 128)).astype(np.float32) for _ in range(3)]


def mover_and_anchor(text):
    """The two names of a move line: what moved, and what it now runs right after."""
    mover, rest = text.split(" moved ", 1)
    anchor = rest.split(" right after ", 1)[1].split(" (point ")[0] \
        if " right after " in rest else None
    return mover, anchor


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_relu_mask_move_names_the_mask_and_the_relu_it_now_follows(backend):
    prog = cc.compile(three_relu_layers, backend=backend).lower(*layer_args())
    plan = prog.plan
    report = plan.report()
    masks = [m for m in plan.schedule.moves if "a compact saved value" in m.text]
    assert masks
    for m in masks:
        mask = m.nodes[0]
        relu = mask.grad_of
        assert mask.op == "greater_than" and relu.op == "relu"
        # before: "the backward of relu_ at X moved earlier to right after the backward of
        # relu_ at X", the anchor being a constant of that same backward
        want = (f"the backward of relu_ at {relu.loc} (greater_than {mask.out.ref()}) moved "
                f"earlier to right after relu_ at {relu.loc} and 1 constant (point ")
        assert m.text.startswith(want) and m.text in report
        assert m.after is relu


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_no_line_names_its_anchor_as_the_node_that_moved(backend):
    moves = cc.compile(three_relu_layers, backend=backend).lower(*layer_args()).plan.schedule.moves
    texts = [m.text for m in moves]
    assert texts and len(set(texts)) == len(texts)
    for m in moves:
        mover, anchor = mover_and_anchor(m.text)
        assert mover != anchor, m.text
        assert f"(point {m.point} -> {m.point})" not in m.text


def test_nodes_that_moved_together_are_all_named():
    plan = load_example("mlp").build_program().plan
    updates = {n.inputs[n.inplace_of].name: n for n in plan.graph.nodes
               if n.phase == "update" and n.inplace_of is not None}
    move = next(m for m in plan.schedule.moves if updates["w1"] in m.nodes)
    # before, a run of nodes of one line was named by its first node alone
    assert len(move.nodes) > 1
    for name in ("w1", "w2"):
        if updates[name] in move.nodes:
            assert f"update of {name} ({updates[name].loc})" in move.text


def three_independent(x):
    a = x.exp()
    b = x.sin()
    c = x.cos()
    return a, b, c


def test_a_node_keeping_its_point_number_says_why_and_which_way_it_moved():
    graph = cc.trace(three_independent, np.ones(1000, np.float32))
    exp, sin, cos = graph.nodes
    # cos, sin, exp: exp keeps its place (the longest increasing run), cos moves to the start,
    # and sin stays point 1 while moving before exp
    moves = describe_moves(graph, [2, 1, 0])
    assert [m.nodes for m in moves] == [[cos], [sin]]
    assert moves[0].text == f"cos at {cos.loc} moved earlier to the start of the program " \
                            "(point 2 -> 0)"
    assert moves[1].text == (f"sin at {sin.loc} moved earlier to right after cos at {cos.loc} "
                             "(point 1 in both orders: as many nodes moved from before it to "
                             "after it as the other way)")


def five_independent(x):
    a = x.exp()
    b = x.sin()
    c = x.cos()
    d = x.tanh()
    e = x.abs()
    return a, b, c, d, e


def test_a_later_move_keeping_its_point_number():
    graph = cc.trace(five_independent, np.ones(1000, np.float32))
    exp, sin, cos, tanh, abs_ = graph.nodes
    # tanh, abs, cos, sin, exp: tanh and abs keep their order, cos stays point 2 but now
    # runs after them
    moves = describe_moves(graph, [3, 4, 2, 1, 0])
    assert [m.nodes for m in moves] == [[cos], [sin], [exp]]
    assert moves[0].text == (f"cos at {cos.loc} moved later to right after abs at {abs_.loc} "
                             "(point 2 in both orders: as many nodes moved from before it to "
                             "after it as the other way)")
    assert moves[2].text == f"exp at {exp.loc} moved later to right after sin at {sin.loc} " \
                            "(point 0 -> 4)"


def test_peak_point_is_an_attribute_like_peak_bytes_and_the_plan_prints_short():
    plan = load_example("transformer_block").build_program().plan
    # before: a method, whose accidental print dumped the whole plan's dataclass repr
    assert type(plan.peak_point) is int
    curve = plan.live_curve()
    assert plan.live_bytes(plan.peak_point) == plan.lower_bound_bytes == max(curve)
    assert all(b < max(curve) for b in curve[:plan.peak_point + 1])
    text = repr(plan)
    assert len(text) < 300 and str(plan) == text
    assert f"at point {plan.peak_point}" in text and f"({plan.peak_bytes} B)" in text
    assert f"{len(plan.buffers)} buffers" in text
