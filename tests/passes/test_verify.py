"""The verifier (passes/verify.py) rejects every kind of broken graph and plan it claims to.

Each test starts from a plan the pipeline produced (and the verifier accepted), breaks one thing
by hand, and checks the error names what broke. Where the broken plan is runnable, the arena
executor shows that it really computes a wrong answer: the verifier is not rejecting on a
technicality.
"""
import numpy as np
import pytest

from compiler.ir import Graph
from compiler.passes import Buffer, verify_graph, verify_plan
from passes.verify import PlanError
from runtime.arena import ArenaExecutable
from runtime.reference import evaluate

from tests.backends import numpy_compile

X = np.random.default_rng(0).standard_normal((3, 4))
W = np.random.default_rng(1).standard_normal((4, 4))


def _lower(fn, *args, inplace="auto"):
    prog = numpy_compile(fn, inplace=inplace).lower(*args)
    verify_plan(prog.graph, prog.plan)  # the unbroken plan is fine
    return prog


def _value(prog, ref):
    return next(v for v in prog.graph.all_values() if v.ref() == ref)


def _buffer(prog, ref):
    return prog.plan.buffer_of[_value(prog, ref)]


def _move(prog, ref, to):
    """Move value `ref` into buffer `to` (by hand: the planner would never)."""
    v = _value(prog, ref)
    prog.plan.buffer_of[v].values.remove(v)
    to.values.append(v)
    prog.plan.buffer_of[v] = to


def _rejects(prog, match):
    with pytest.raises(PlanError, match=match) as err:
        verify_plan(prog.graph, prog.plan)
    return str(err.value)


def _runs_wrong(prog, *args):
    """The broken plan, executed in the arena (sanitized), disagrees with the reference."""
    want, _ = evaluate(prog.graph, [a.copy() for a in args])
    got, _ = ArenaExecutable(prog.graph, prog.plan, sanitize=True).run([a.copy() for a in args])
    return any(not np.array_equal(g, w) for g, w in zip(got, want))


def chain(x):
    a = x.exp()           # %1
    b = a.sin()           # %2
    c = a * b             # %3, written over %2 in "auto"
    return c.sum(), a.reshape([12])


# -- verify_graph ------------------------------------------------------------------------------
def _hand_graph():
    g = Graph("hand")
    x = g.add_input("x", (3, 4), np.float64)
    a = g.add_node("exp", [x], {}, (3, 4), np.float64)
    b = g.add_node("sin", [a.out], {}, (3, 4), np.float64)
    g.outputs = [b.out]
    verify_graph(g)
    return g, a, b


def test_verify_graph_rejects_a_use_before_the_definition():
    g, a, b = _hand_graph()
    g.nodes = [b, a]
    with pytest.raises(PlanError, match=r"%1 used before definition\n> \[0\] %2:f64\[3,4\] = sin"):
        verify_graph(g)


def test_verify_graph_rejects_a_type_the_registry_disagrees_with():
    g, a, b = _hand_graph()
    c = g.add_node("sum", [b.out], {"axis": 0, "keepdim": False}, (3,), np.float64)
    g.outputs = [c.out]
    with pytest.raises(PlanError, match=r"type of %3 disagrees with sum's rule"):
        verify_graph(g)
    c.out.shape, c.out.dtype = (4,), np.dtype(np.float32)
    with pytest.raises(PlanError, match=r"type of %3 disagrees with sum's rule"):
        verify_graph(g)
    c.out.dtype = np.dtype(np.float64)
    verify_graph(g)


def test_verify_graph_rejects_a_value_defined_twice():
    g, a, b = _hand_graph()
    again = g.add_node("exp", [g.inputs[0]], {}, (3, 4), np.float64)
    again.out = a.out
    with pytest.raises(PlanError, match=r"(?s)%1 defined twice\n.*\n> \[2\] %1:f64\[3,4\] = exp"):
        verify_graph(g)


def test_verify_graph_rejects_outputs_and_mutations_that_are_never_defined():
    g, a, b = _hand_graph()
    stray = Graph("other").add_input("y", (3, 4), np.float64)
    g.outputs = [stray]
    with pytest.raises(PlanError, match=r"output %y is never defined"):
        verify_graph(g)
    g.outputs = [b.out]
    g.mutations = {0: g.add_node("cos", [a.out], {}, (3, 4), np.float64).out}
    g.nodes.pop()
    with pytest.raises(PlanError, match=r"output %3 is never defined"):
        verify_graph(g)


# -- verify_plan, check 1: membership ------------------------------------------------------------
def test_verify_plan_rejects_a_value_in_two_buffers():
    prog = _lower(chain, X)
    _buffer(prog, "%4").values.append(_value(prog, "%2"))
    _rejects(prog, r"%2 is in two buffers")


def test_verify_plan_rejects_a_value_bigger_than_its_buffer():
    prog = _lower(chain, X)
    _buffer(prog, "%2").size = 64
    _rejects(prog, r"%2 \(96 B\) doesn't fit buffer #2")


def test_verify_plan_rejects_a_value_with_no_buffer():
    prog = _lower(chain, X)
    _buffer(prog, "%3").values.remove(_value(prog, "%3"))
    _rejects(prog, r"%3 has no buffer")


def test_verify_plan_rejects_a_view_outside_its_input_buffer():
    prog = _lower(chain, X)
    _move(prog, "%5", _buffer(prog, "%4"))
    _rejects(prog, r"view %5 is not in its input's buffer")


# -- check 2: arena bounds and alignment ---------------------------------------------------------
def test_verify_plan_rejects_a_misaligned_offset():
    prog = _lower(chain, X)
    b = _buffer(prog, "%2")
    assert b.kind == "arena" and b.offset == 0 and prog.plan.arena_bytes == 128
    b.offset = 8  # inside the arena, but not on a 64-byte boundary
    _rejects(prog, r"buffer #2 at 8 \(\+96\) is misaligned or outside the arena of 128 B")


def test_verify_plan_rejects_a_buffer_outside_the_arena():
    prog = _lower(chain, X)
    _buffer(prog, "%2").offset = 64  # aligned, but 64 + 96 > 128
    _rejects(prog, r"buffer #2 at 64 \(\+96\) is misaligned or outside the arena of 128 B")
    prog = _lower(chain, X)
    prog.plan.arena_bytes = 64
    _rejects(prog, r"buffer #2 at 0 \(\+96\) is misaligned or outside the arena of 64 B")


# -- check 3: intervals --------------------------------------------------------------------------
def test_verify_plan_rejects_an_interval_that_ends_before_the_last_read():
    prog = _lower(chain, X)
    b = _buffer(prog, "%3")
    assert (b.start, b.end) == (1, 3)
    b.end = 2  # %3 (multiply at 2) is read by the sum at 3
    _rejects(prog, r"buffer #2 \[1, 2\] doesn't cover %3 live \[2, 3\]")


def test_verify_plan_rejects_an_interval_that_starts_after_the_definition():
    prog = _lower(chain, X)
    _buffer(prog, "%2").start = 2
    _rejects(prog, r"buffer #2 \[2, 3\] doesn't cover %2 live \[1, 2\]")


def test_verify_plan_counts_reads_through_views_and_returns_as_reads():
    def program(x):
        a = x.exp()
        v = a.t()          # creating a view is not a read of a ...
        s = x.sum()
        return (v * s).sum()   # ... consuming it is
    prog = _lower(program, X, inplace="off")
    b = _buffer(prog, "%1")
    assert b.end == 3
    b.end = 2
    _rejects(prog, r"doesn't cover %1 live \[0, 3\]")
    prog = _lower(chain, X, inplace="off")
    b = _buffer(prog, "%1")   # returned as %5, a view: live to the end
    assert b.kind == "output" and b.end == len(prog.graph.nodes)
    b.end -= 1
    b.kind = "arena"
    b.offset = 0
    _rejects(prog, r"doesn't cover %1 live \[0, 5\]")


# -- check 4: no overlap of live arena buffers -----------------------------------------------------
def test_verify_plan_rejects_live_buffers_that_overlap():
    prog = _lower(chain, X, inplace="off")
    b2, b3 = _buffer(prog, "%2"), _buffer(prog, "%3")
    assert (b2.start, b2.end, b3.start, b3.end) == (1, 2, 2, 3) and b3.offset == 128
    b3.start = 1   # live together over [1, 2]
    b3.offset = 64
    _rejects(prog, r"buffers #2 and #3 are live together and overlap in the arena")


@pytest.mark.parametrize("older, newer", [(0, 0), (0, 64), (64, 0)])
def test_verify_plan_rejects_touching_buffers_that_share_memory(older, newer):
    # %2 dies at the multiply that defines %3: a copy (not an inplace op) never shares with its
    # source, since it would overwrite operands it has not read yet. The newer buffer lies at,
    # above or below the older one.
    prog = _lower(chain, X, inplace="off")
    assert prog.plan.arena_bytes >= 64 + 96
    _buffer(prog, "%2").offset = older
    _buffer(prog, "%3").offset = newer
    _rejects(prog, r"buffers #2 and #3 are live together and overlap in the arena")


# -- check 5: successive values in one buffer ---------------------------------------------------
def test_verify_plan_rejects_an_op_that_cannot_write_over_its_operand():
    def program(x, w):
        a = x.exp()
        b = a @ w
        return b.sum()
    prog = _lower(program, X, W)
    ba, bb = _buffer(prog, "%2"), _buffer(prog, "%3")
    _move(prog, "%3", ba)
    ba.end = bb.end
    prog.plan.buffers.remove(bb)
    # (The numpy executor computes into a temporary, so it would get this one right; a GEMM
    # writing into its own operand would not.)
    _rejects(prog, r"%3 reuses buffer #\d+ but matmul can't write over its operand")


def test_verify_plan_rejects_overwriting_a_value_needed_at_the_end():
    def program(x):
        a = x.exp()
        b = a.sin()
        return a, b
    prog = _lower(program, X)
    ba, bb = _buffer(prog, "%1"), _buffer(prog, "%2")
    _move(prog, "%2", ba)
    prog.plan.buffers.remove(bb)
    _rejects(prog, r"(?s)%2 overwrites %1, which is still needed at the end\n.*\n> \[1\] %2")
    assert _runs_wrong(prog, X)


def test_verify_plan_rejects_overwriting_a_value_read_later():
    def program(x):
        a = x.exp()
        b = a.sin()
        return (a * b).sum()
    prog = _lower(program, X, inplace="off")
    b1, b2 = _buffer(prog, "%1"), _buffer(prog, "%2")
    _move(prog, "%2", b1)   # sin over exp, but the multiply still reads exp
    prog.plan.buffers.remove(b2)
    _rejects(prog, r"%2 overwrites %1 in buffer #1, but %1 is read later")
    assert _runs_wrong(prog, X)


def writeback_program(x):
    y = x * 2.0
    y[1] = y[0].sin()       # reads row 0, writes row 1
    return y


def test_verify_plan_rejects_a_write_back_into_another_region():
    # Plan sin(y[0]) straight into y's buffer, at row 0 (where it reads): the scatter then copies
    # it to row 1, but row 0 was overwritten on the way. Only a write-back into exactly the
    # region the value occupies may follow such a write (ARCHITECTURE.md §8.3).
    prog = _lower(writeback_program, X)
    by, bs = _buffer(prog, "%2"), _buffer(prog, "%4")
    sin = _value(prog, "%4").producer
    _move(prog, "%4", by)
    prog.plan.buffers.remove(bs)
    prog.plan.reuse[sin] = 0
    _rejects(prog, r"%4 overwrites %2 in buffer #\d+, but %2 is read later")
    assert _runs_wrong(prog, X)


def test_verify_plan_accepts_a_write_back_into_the_same_region():
    def program(x):
        y = x * 2.0
        y[0].sin_()         # sin writes straight into row 0; its write-back is a no-op
        return y
    prog = _lower(program, X)
    assert len(prog.plan.buffers) == 3  # x, the constant, and y with every value in it
    assert not _runs_wrong(prog, X)


def test_verify_plan_rejects_a_reuse_of_an_input_in_another_buffer():
    prog = _lower(chain, X)
    mul = _value(prog, "%3").producer
    assert prog.plan.reuse[mul] == 1   # multiply writes over %2 ...
    b2 = _buffer(prog, "%2")
    elsewhere = Buffer(99, "arena", 96, 1, 2, [], offset=128)
    prog.plan.buffers.append(elsewhere)
    prog.plan.arena_bytes = 256
    _move(prog, "%2", elsewhere)  # ... which the broken plan keeps elsewhere
    assert b2.values == [_value(prog, "%3")]
    _rejects(prog, r"%3 is planned to write over %2, which is not in its buffer #2")


# -- shape rules asked once per question (compiler.ir.infer_type) ---------------------------------
def test_each_shape_rule_question_is_asked_once_per_trace_and_verify_still_checks_every_node(
        monkeypatch):
    from compiler.ops import REGISTRY

    asked = []
    rule = REGISTRY["multiply"].infer

    def counting(types, **attrs):
        asked.append(tuple(types))
        return rule(types, **attrs)
    monkeypatch.setattr(REGISTRY["multiply"], "infer", counting)

    def f(x):
        for _ in range(50):
            x = x * 1.5
        return x
    numpy_compile(f).lower(np.ones(8, np.float32))
    # The tracer and verify_graph each asked once: 50 identical products, one question.
    assert asked == [(((8,), np.dtype(np.float32)), ((), np.dtype(np.float32)))] * 2
    # A remembered answer doesn't hide a node whose type disagrees with it: the second of
    # two identical products claims float64.
    g = Graph("twins")
    x = g.add_input("x", (8,), np.float32)
    y = g.add_node("multiply", [x, x], {}, (8,), np.float32)
    z = g.add_node("multiply", [x, x], {}, (8,), np.float64)
    g.outputs = [y.out, z.out]
    with pytest.raises(PlanError, match=r"type of %2 disagrees with multiply's rule"):
        verify_graph(g)
