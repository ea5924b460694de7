"""The reinplace pass: which candidates run in place, and the sentence that says why (not).

Each test traces a small program, runs the pass alone (`passes.reinplace`), and pins the
decisions; programs are also compiled and run (sanitizer on) to check the values, on every
backend (`run`)."""
import inspect

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler import passes
from passes.verify import verify_plan
from tests.backends import AVAILABLE

R = np.random.default_rng(7)
X = R.standard_normal((3, 4))
S = R.standard_normal((3, 3))


def decide(fn, *args, inplace="auto", donate=()):
    graph = passes.dce(cc.trace(fn, *args))
    graph, decisions = passes.reinplace(graph, inplace=inplace, donate=donate)
    plan = passes.plan_memory(graph, inplace, donate, decisions=decisions)
    verify_plan(graph, plan)
    return decisions


def one(decisions, op):
    found = [d for d in decisions if d.op == op]
    assert len(found) == 1, decisions
    return found[0]


def run(fn, *args, inplace="auto", donate=()):
    """The numpy backend's result, on the caller's arrays; every other backend runs on copies
    made before, and must give the same outputs and leave the same values in the copies."""
    copies = {b: [a.copy() if isinstance(a, np.ndarray) else a for a in args]
              for b in AVAILABLE if b != "numpy"}
    want = cc.compile(fn, backend="numpy", inplace=inplace, donate=donate, sanitize=True)(*args)
    for backend, mine in copies.items():
        got = cc.compile(fn, backend=backend, inplace=inplace, donate=donate,
                         sanitize=True)(*mine)
        for g, w in zip(_flat(got), _flat(want)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=backend)
        for k, (m, a) in enumerate(zip(mine, args)):
            if isinstance(a, np.ndarray) and k not in donate:
                np.testing.assert_allclose(m, a, rtol=1e-12, atol=1e-12,
                                           err_msg=f"{backend}: argument {k}")
    return want


def _flat(tree):
    return [x for t in tree for x in _flat(t)] if isinstance(tree, (tuple, list)) else [tree]


def line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# -- condition 1: the op must write each element where it reads it -------------------------
def test_elementwise_on_dead_intermediate_runs_in_place():
    def f(x):
        y = x * 2.0
        return y.exp()
    d = one(decide(f, X), "exp")
    assert d.inplace and not d.requested
    assert d.reason.startswith("writes over %") and "multiply at test_reinplace.py:" in d.reason
    np.testing.assert_allclose(run(f, X), np.exp(2 * X))


def test_broadcast_output_bigger_than_input_is_refused():
    def f(a, b):
        return (a * 1.0) + (b * 1.0)
    ds = decide(f, X[:, :1].copy(), X[:1, :].copy())
    add = one(ds, "add")
    assert not add.inplace
    assert add.reason == "output [3, 4] is larger than the input [3, 1] (broadcast)"


def test_comparison_output_of_another_dtype_is_refused():
    def f(x):
        y = x * 1.0
        return y > 0.0
    d = one(decide(f, X), "greater_than")
    assert not d.inplace and d.reason == "output is bool, the input is float64"


def test_operand_reading_another_region_of_the_buffer_is_refused():
    def f(s):
        y = s * 1.0
        return y + y.t()
    d = one(decide(f, S), "add")
    assert not d.inplace
    assert "reads another part of the same buffer" in d.reason
    np.testing.assert_allclose(run(f, S), S + S.T)


def test_operand_reading_the_same_region_is_fine():
    def f(x):
        y = x * 1.0
        return y * y
    d = one([d for d in decide(f, X) if d.op == "multiply"][1:], "multiply")
    assert d.inplace
    np.testing.assert_allclose(run(f, X), X * X)


def test_matmul_and_reductions_are_not_candidates():
    def f(s):
        y = s * 1.0
        return (y @ y).sum(axis=0)
    assert [d.op for d in decide(f, S)] == ["multiply"]


# -- condition 2: no later read of the input or of any view of its buffer -----------------
def test_later_read_blocks_reuse():
    def f(x):
        y = x * 2.0
        z = y.exp()
        return z + y
    d = one(decide(f, X), "exp")
    assert not d.inplace
    assert d.reason == (f"input %2 (multiply at test_reinplace.py:{line_of(f, 'y = x')}) is "
                        f"read later by add at test_reinplace.py:{line_of(f, 'return z')}")


def test_later_read_through_a_view_blocks_reuse():
    def f(x):
        y = x * 2.0
        v = y.reshape([12])
        z = y.exp()
        return z.reshape([12]) + v
    d = one(decide(f, X), "exp")
    assert not d.inplace and "is read later by add" in d.reason
    np.testing.assert_allclose(run(f, X), (np.exp(2 * X) + 2 * X).reshape(12))


def test_an_unconsumed_view_is_not_a_use():
    def f(x):
        y = x * 2.0
        y.reshape([12])  # created, never consumed
        return y.exp()
    assert one(decide(f, X), "exp").inplace


def sin_twice(a):
    a.stop_gradient = False
    x = cc.sin(a)
    y = x.sin_()  # sin's backward needs x
    y.sum().backward()
    return y, a.grad


def test_backward_read_blocks_requested_inplace_and_old_value_is_kept():
    f = sin_twice
    d = one(decide(f, X), "sin_")
    assert d.requested and not d.inplace
    assert f"is read later by the backward of sin_ at test_reinplace.py:{line_of(f, 'x.sin_')}" \
        in d.reason
    assert d.reason.endswith("the old value is kept in its own buffer")
    y, g = run(f, X)
    np.testing.assert_allclose(y, np.sin(np.sin(X)))
    np.testing.assert_allclose(g, np.cos(np.sin(X)) * np.cos(X))


def test_strict_mode_names_both_lines():
    f = sin_twice
    with pytest.raises(cc.InplaceError) as err:
        cc.compile(f, inplace="strict").lower(X)
    msg = str(err.value)
    assert f"test_reinplace.py:{line_of(f, 'x.sin_')}" in msg
    assert "backward of sin_" in msg and "inplace='strict'" in msg


def test_backward_that_needs_nothing_keeps_inplace_even_in_strict_mode():
    def f(a):
        a.stop_gradient = False
        x = a.scale(2.0)
        y = x.scale_(2.0)
        y.sum().backward()
        return y, a.grad
    d = one(decide(f, X), "scale_")
    assert d.requested and d.inplace
    y, g = cc.compile(f, inplace="strict", sanitize=True)(X)
    np.testing.assert_allclose(g, np.full_like(X, 4.0))


def test_relu_inplace_with_backward_reads_the_output():
    def f(x, w):
        w.stop_gradient = False
        h = F.relu_(x @ w)
        h.sum().backward()
        return w.grad
    w = R.standard_normal((4, 5))
    d = one(decide(f, X, w), "relu_")
    assert d.requested and d.inplace and "matmul" in d.reason
    np.testing.assert_allclose(run(f, X, w), X.T @ (X @ w > 0).astype(float))


# -- condition 3: caller's arrays ---------------------------------------------------------
def test_undonated_input_is_never_reused():
    def f(x):
        return F.relu(x)
    d = one(decide(f, X), "relu")
    assert not d.inplace
    assert d.reason == "input argument 'x' is a caller's array that was not donated"


def test_donated_input_is_reused_and_unknown_donation_is_an_error():
    def f(x):
        return F.relu(x)
    assert one(decide(f, X, donate=("x",)), "relu").inplace
    assert one(decide(f, X, donate=(0,)), "relu").inplace
    with pytest.raises(cc.InplaceError, match="'y'"):
        cc.compile(f, donate=("y",)).lower(X)


def test_user_inplace_on_an_input_writes_into_the_callers_array():
    def f(x):
        x.scale_(3.0)
        return x
    d = one(decide(f, X), "scale_")
    assert d.inplace and d.reason == "writes over argument 'x'"
    x = X.copy()
    out = run(f, x)
    assert out is x
    np.testing.assert_allclose(x, 3 * X)


def test_inplace_on_a_view_of_an_input_writes_the_region():
    def f(x):
        v = x[0]
        v.scale_(2.0)
        return x.sum()
    ds = decide(f, X)
    assert one(ds, "scale_").inplace and one(ds, "slice_scatter").inplace
    x = X.copy()
    total = run(f, x)
    want = X.copy()
    want[0] *= 2
    np.testing.assert_allclose(x, want)
    np.testing.assert_allclose(total, want.sum())


# -- condition 4: values needed at the end ---------------------------------------------------
def test_returned_value_is_not_overwritten():
    def f(x):
        y = x * 2.0
        return y, y.exp()
    d = one(decide(f, X), "exp")
    assert not d.inplace and d.reason.endswith("is returned by the program")


# -- scatter, set-item and views of intermediates (ARCHITECTURE.md §8.3) -----------------------
def test_setitem_into_a_dead_base_is_an_inplace_region_write():
    def f(x):
        y = x * 2.0
        y[0] = 1.0
        return y
    d = one(decide(f, X), "slice_scatter")
    assert d.requested and d.inplace
    want = 2 * X
    want[0] = 1.0
    np.testing.assert_allclose(run(f, X), want)


def test_inplace_on_a_view_of_an_intermediate_writes_straight_into_the_region():
    def f(x):
        y = x * 2.0
        v = y[1:]
        v.add_(1.0)
        return y
    graph = passes.dce(cc.trace(f, X))
    _, ds = passes.reinplace(graph)
    plan = passes.plan_memory(graph, decisions=ds)
    assert one(ds, "add_").inplace and one(ds, "slice_scatter").inplace
    # One buffer holds y, the written region and the result: no copy of y.
    assert plan.output_bytes == X.nbytes and plan.arena_bytes <= 64
    want = 2 * X
    want[1:] += 1
    np.testing.assert_allclose(run(f, X), want)


def test_scatter_whose_value_overlaps_its_target_is_refused_but_correct():
    def f(x):
        y = x * 1.0
        y[0:2] = y[1:3]
        return y
    d = one(decide(f, X), "slice_scatter")
    assert not d.inplace and "overlaps the region" in d.reason
    want = X.copy()
    want[0:2] = X[1:3].copy()
    np.testing.assert_allclose(run(f, X), want)


def test_writes_through_a_transpose_view_of_an_intermediate():
    def f(x):
        y = x * 1.0
        y.t().scale_(2.0)
        return y + 0.0
    assert one(decide(f, X), "scale_").inplace
    np.testing.assert_allclose(run(f, X), 2 * X)


# -- modes --------------------------------------------------------------------------------------
def test_inplace_off_refuses_everything_with_the_same_reason():
    def f(x):
        y = x * 2.0
        y.add_(1.0)
        return y.exp()
    ds = decide(f, X, inplace="off")
    assert ds and all(not d.inplace for d in ds)
    assert {d.reason for d in ds} == {"inplace='off': every op writes a fresh buffer"}
    np.testing.assert_allclose(run(f, X, inplace="off"), np.exp(2 * X + 1))


def test_requested_decisions_are_marked():
    def f(x):
        y = x * 2.0
        y += 1.0
        return y.tanh_()
    ds = decide(f, X)
    assert [(d.op, d.requested, d.inplace) for d in ds] == [
        ("multiply", False, False), ("add_", True, True), ("tanh_", True, True)]


def test_scatter_from_a_disjoint_region_of_the_same_buffer_says_so():
    def f(x):
        y = x * 1.0
        y[2] = y[0]
        return y
    d = one(decide(f, X), "slice_scatter")
    assert not d.inplace
    assert d.reason.startswith("the written value is read from another region of the same buffer")
    want = X.copy()
    want[2] = X[0]
    np.testing.assert_allclose(run(f, X), want)


def test_an_auto_candidate_never_lands_in_a_region_of_a_bigger_buffer():
    def f(x):
        b = x * 2.0
        return b[0] * 3.0  # b is dead, but b[0] is a third of its buffer
    d = [d for d in decide(f, np.ones((3, 4))) if d.op == "multiply"][1]
    assert not d.inplace
    assert d.reason == ("the input is a view of a bigger buffer (96 B), which would stay alive "
                        "as long as the output")


def test_a_scatter_into_a_transposed_base_keeps_later_reshapes_expressible():
    def f(a):
        b = a * 2.0
        # b's base now lives transposed in a fresh buffer: zeros drawn as uniform in [0, 0)
        # (zero_ writes in place since issue 27, so it no longer makes that layout)
        b.t().uniform_(min=0.0, max=0.0, seed=0)
        b[0] = 0.5
        return b.reshape([12]) + 1.0
    d = one(decide(f, X), "slice_scatter")
    assert not d.inplace and "reshape of the result" in d.reason
    want = np.zeros((3, 4))
    want[0] = 0.5
    np.testing.assert_array_equal(run(f, X), want.reshape(12) + 1.0)


# -- requested inplace ops that dead-code elimination removes --------------------------------
def dead_sin(x):
    y = x * 2.0
    y.sin_()                     # never used afterwards
    z = x * 3.0
    z[0:1].exp_()                # nor is z
    return x + 1.0


@pytest.mark.parametrize("inplace", ["auto", "strict"])
def test_removed_inplace_ops_are_still_reported(inplace):
    decisions = cc.compile(dead_sin, inplace=inplace).lower(X).plan.decisions
    sin = one(decisions, "sin_")
    assert sin.requested and not sin.inplace
    assert sin.reason == "removed: its result is never used"
    assert sin.loc == f"test_reinplace.py:{line_of(dead_sin, 'y.sin_()')}"
    exp = one(decisions, "exp_")
    assert exp.reason == "removed: its result is never used"
    assert decisions.index(sin) < decisions.index(exp)  # program order
    report = cc.compile(dead_sin, inplace=inplace).lower(X).plan.report()
    assert "removed: its result is never used" in report
