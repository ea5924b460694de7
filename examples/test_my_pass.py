"""A pytest file a student writes to study the reinplace pass on its own:

    python -m pytest examples/test_my_pass.py

It builds one graph by hand and traces another, runs single passes through the pass-level API
(`compiler.passes`), and asserts on the decisions and the plan; no backend is needed until the
last test, which runs the graph.
"""
import numpy as np

import compiler as cc
from compiler import passes


def hand_built():
    """y = exp(x * 2): the product is dead after exp reads it, so exp may write over it."""
    g = cc.Graph("hand_built")
    x = g.add_input("x", (1024,), "float32")
    two = g.op("full", shape=(), value=2.0, dtype="float32")
    y = g.op("exp", g.op("multiply", x, two))
    g.outputs = [y]
    return g


def test_exp_reuses_the_dead_product():
    graph, decisions = passes.reinplace(hand_built())
    exp = next(d for d in decisions if d.op == "exp")
    assert exp.inplace and exp.reason.startswith("writes over %")


def test_the_argument_is_never_overwritten():
    graph, decisions = passes.reinplace(hand_built())
    multiply = next(d for d in decisions if d.op == "multiply")
    assert not multiply.inplace
    assert "caller's array that was not donated" in multiply.reason


def test_donating_the_argument_lets_the_product_take_its_buffer():
    graph, decisions = passes.reinplace(hand_built(), donate=("x",))
    assert next(d for d in decisions if d.op == "multiply").inplace


def test_plan_of_a_traced_function():
    def f(x):
        h = (x * 2.0).sin()
        return h.relu_().sum()

    state = passes.run_passes(cc.trace(f, np.ones((64, 64), np.float32)), until="plan_memory")
    plan = state.plan
    assert plan.peak_bytes >= plan.lower_bound_bytes
    relu = plan.decisions_at("test_my_pass.py:" + str(f.__code__.co_firstlineno + 2))
    assert [d.op for d in relu] == ["relu_"] and relu[0].inplace
    passes.verify_plan(state.graph, plan)


def test_run_the_hand_built_graph():
    prog = passes.build(hand_built())
    out = prog(np.ones(1024, np.float32))
    np.testing.assert_allclose(out, np.exp(np.float32(2.0)), rtol=1e-6)
