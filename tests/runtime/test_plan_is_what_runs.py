"""Issue 16, item 1: a plan's bytes are what a call uses. With the arena already allocated, a
call allocates (as `tracemalloc` sees it: NumPy reports its buffers there) the plan's returned
buffers and at most SLACK bytes more, on every backend that exists; scratch memory that an op
needs is a workspace buffer of the plan, poisoned by the sanitizer and checked by the verifier.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.cli import load_example
from passes.verify import PlanError, verify_plan
from runtime.arena import ArenaExecutable
from runtime.reference import evaluate
from tests.backends import AVAILABLE

from tests.backends import numpy_compile

SLACK = 64 * 1024  # small objects: array headers, the argument checks, NumPy's ufunc buffers


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def allocated_by_call(prog, args) -> int:
    """Peak bytes traced during one call of `prog`, after a first call allocated its arena
    (the arguments are copied before tracing starts: a call may write them)."""
    prog(*_copies(args))
    fresh = _copies(args)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        prog(*fresh)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("name", ["mlp", "transformer_block"])
def test_examples_allocate_only_their_outputs(name, backend):
    module = load_example(name)
    prog = module.build_program(backend=backend)
    used = allocated_by_call(prog, module.example_inputs())
    assert used <= prog.plan.output_bytes + SLACK, (used, prog.plan.output_bytes)


def _seeds():
    from examples.seeds import SEEDS
    return [pytest.param(fn, args, id=title) for title, fn, args, _ in SEEDS]


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("fn,args", _seeds())
def test_seed_programs_allocate_only_their_outputs(fn, args, backend):
    prog = numpy_compile(fn, backend=backend).lower(*_copies(args))
    used = allocated_by_call(prog, args)
    assert used <= prog.plan.output_bytes + SLACK, (used, prog.plan.output_bytes)


X16 = np.linspace(-1.0, 1.0, 4 * 2**20, dtype=np.float32).reshape(64, 256, 256)  # 16 MiB


@pytest.mark.parametrize("backend", AVAILABLE)
def test_relu_inplace_allocates_nothing_and_relu_its_output(backend):
    # The case: 33 MiB and 48 MiB before the executor wrote into planned slots.
    inplace = numpy_compile(lambda x: F.relu_(x), backend=backend).lower(X16)
    assert inplace.plan.output_bytes == 0
    assert allocated_by_call(inplace, [X16]) <= SLACK
    out = numpy_compile(lambda x: F.relu(x), backend=backend).lower(X16)
    assert out.plan.output_bytes == X16.nbytes
    assert X16.nbytes <= allocated_by_call(out, [X16]) <= X16.nbytes + SLACK


def _cnn_step(x, w1, w2):
    w1.stop_gradient = False
    w2.stop_gradient = False
    h = F.max_pool2d(F.relu(F.conv2d(x, w1, padding=1)), 2)
    y = F.conv2d(h, w2, stride=2, padding="SAME")
    loss = (y * y).mean()
    loss.backward()
    with cc.no_grad():
        w1.subtract_(0.1 * w1.grad)
        w2.subtract_(0.1 * w2.grad)
    return loss


def test_cnn_step_keeps_its_columns_and_indices_in_workspaces():
    # conv2d's columns, its gradients' copies and max_pool2d_grad's argmax indices (MiBs
    # here) are workspaces of the plan, so the call itself allocates next to nothing.
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32)
            for s in [(8, 3, 32, 32), (16, 3, 3, 3), (8, 16, 3, 3)]]
    prog = numpy_compile(_cnn_step).lower(*args)
    assert {n.op for n in prog.plan.workspace} == {"conv2d", "conv2d_grad_input",
                                                    "conv2d_grad_weight", "max_pool2d_grad"}
    assert sum(b.size for b in prog.plan.workspace.values()) > 2**20
    assert allocated_by_call(prog, args) <= prog.plan.output_bytes + SLACK


def _composites(x, labels):
    p = F.softmax(x, axis=-1)
    return p, F.log_softmax(x * 2.0, axis=0), F.cross_entropy(x, labels)


XS = np.linspace(-3.0, 3.0, 6 * 10, dtype=np.float32).reshape(6, 10)
LABELS = np.array([0, 3, 9, 1, 1, 4])


def test_scratch_memory_is_a_workspace_buffer_of_the_plan():
    prog = numpy_compile(_composites).lower(XS, LABELS)
    plan = prog.plan
    ops = sorted(n.op for n in plan.workspace)
    assert ops == ["log_softmax", "log_softmax", "one_hot", "softmax"]
    for node, b in plan.workspace.items():
        t = prog.graph.nodes.index(node)
        assert b.kind == "arena" and (b.start, b.end) == (t, t) and b.values == []
        assert b.size >= XS.nbytes // 10 if node.op != "one_hot" else b.size >= 10 * 8
        assert f"workspace of {node.out.ref()} ({node.op})" in plan.report()
    assert '"workspace_of": "%' in plan.to_json()
    assert plan.naive_bytes >= plan.no_inplace_peak_bytes >= plan.peak_bytes \
        >= plan.lower_bound_bytes
    used = allocated_by_call(prog, [XS, LABELS])
    assert used <= plan.output_bytes + SLACK


def test_sanitized_workspaces_give_the_reference_results():
    prog = numpy_compile(_composites).lower(XS, LABELS)
    want, _ = evaluate(prog.graph, [XS, LABELS])
    exe = ArenaExecutable(prog.graph, prog.plan, sanitize=True)
    got, _ = exe.run([XS.copy(), LABELS.copy()])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w, strict=True)
    assert np.all(exe.arena == 0xFF)  # the workspaces were poisoned after their node too


def test_verifier_rejects_a_missing_or_misplaced_workspace():
    prog = numpy_compile(_composites).lower(XS, LABELS)
    plan = prog.plan
    node, b = next(iter(plan.workspace.items()))
    size, b.size = b.size, 4
    with pytest.raises(PlanError, match=f"{node.out.ref()} \\({node.op}\\) needs a workspace"):
        verify_plan(prog.graph, plan)
    b.size = size
    b.start = b.end = b.start + 1  # live at the next point: it meets the buffers live there
    with pytest.raises(PlanError):
        verify_plan(prog.graph, plan)
    b.start = b.end = b.start - 1
    verify_plan(prog.graph, plan)
    del plan.workspace[node]
    with pytest.raises(PlanError, match="needs a workspace"):
        verify_plan(prog.graph, plan)
