"""The sanitizer (`sanitize=True`: runtime/arena.py on numpy, the native entry on cpu) turns plan
bugs that happen to give the right answer into wrong answers, on every backend.

A plan that lets a value's buffer be reused too early often still gives the right numbers: the
old bytes are still there when they are read. Poisoning each buffer when the plan says it dies, and
the whole arena when a call starts, makes such a plan fail every time.
"""
import numpy as np
import pytest

import compiler as cc
from passes.verify import PlanError, verify_plan
from runtime.arena import POISON, ArenaExecutable
from runtime.reference import evaluate
from tests.backends import AVAILABLE


def _executable(backend, graph, plan, sanitize):
    if backend == "cpu":
        from runtime.cpu import CpuExecutable
        exe = CpuExecutable(graph, plan, sanitize=sanitize)
        return exe
    return ArenaExecutable(graph, plan, sanitize=sanitize)

X = np.random.default_rng(0).standard_normal((3, 4))


def program(x):
    a = x.exp()          # %1, last read by the multiply at node 2
    b = a.sin()          # %2
    c = a * b            # %3
    return c.sum()


def _early_death_plan(backend="numpy"):
    """A plan with a liveness bug: a's buffer is said to die at node 1 (its read by the multiply
    at node 2 is forgotten), so the allocator packs c into a's space."""
    # (fuse=False: fusion would take these values into one loop, where no buffer can die)
    prog = cc.compile(program, backend=backend, inplace="off", sanitize=False,
                      fuse=False).lower(X)
    buf = prog.plan.buffer_of
    a, c = (next(v for v in prog.graph.all_values() if v.ref() == r) for r in ("%1", "%3"))
    ba, bc = buf[a], buf[c]
    assert (ba.start, ba.end, bc.start) == (0, 2, 2) and ba.offset != bc.offset
    ba.end = 1
    bc.offset = ba.offset
    return prog


def _right_answer(backend):
    """The program's value with a correct plan on the executor `_executable` gives `backend`
    (the cpu's native code, else the numpy executor): the same kernels, so the same bits
    (NumPy's own exp/sin may differ from the cpu backend's by an ulp, depending on which SIMD
    paths this machine's NumPy takes)."""
    executor = "cpu" if backend == "cpu" else "numpy"
    return cc.compile(program, backend=executor, inplace="off", sanitize=False,
                      fuse=False)(X.copy())


def _run(prog, sanitize):
    exe = _executable(prog.backend, prog.graph, prog.plan, sanitize)
    # The arena as the allocator hands it out (the first call allocates it): here, zeros.
    exe._allocate()
    exe.arena[...] = 0
    outs, _ = exe.run([X.copy()])
    return outs[0]


@pytest.mark.parametrize("backend", AVAILABLE)
def test_a_buffer_that_dies_too_early_gives_the_right_answer_unsanitized_only(backend):
    prog = _early_death_plan(backend)
    want = _right_answer(backend)
    np.testing.assert_allclose(want, evaluate(prog.graph, [X.copy()])[0][0], rtol=1e-14)
    # Unsanitized, a's bytes are still in place when the multiply reads them (c is written
    # there only after): the bug is invisible.
    assert _run(prog, sanitize=False) == want
    # Sanitized, a's buffer is poisoned after node 1: the multiply reads NaN.
    assert np.isnan(_run(prog, sanitize=True))
    # The verifier, an independent check, rejects the plan too.
    try:
        verify_plan(prog.graph, prog.plan)
    except PlanError as e:
        assert "doesn't cover %1" in str(e)
    else:
        raise AssertionError("verify_plan accepted a buffer that dies before its last read")


@pytest.mark.parametrize("backend", AVAILABLE)
def test_the_compiled_program_in_sanitizer_mode_uses_the_same_executor(backend):
    prog = _early_death_plan(backend)
    prog._exec = _executable(backend, prog.graph, prog.plan, True)
    assert np.isnan(prog(X.copy()))
    prog._exec = _executable(backend, prog.graph, prog.plan, False)
    assert prog(X.copy()) == _right_answer(backend)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_a_sanitized_call_starts_from_an_all_poison_arena(backend):
    # Bytes no buffer of this call writes (alignment padding, space a smaller plan left) must
    # not carry data from the allocator or from an earlier call into a sanitized run: a kernel
    # that reads past its buffer (a vector loop's tail) then reads poison, not a plausible
    # number. Here the arena holds an earlier unsanitized call's data, and padding.
    prog = cc.compile(program, backend=backend, sanitize=False, fuse=False).lower(X)
    exe = _executable(backend, prog.graph, prog.plan, False)
    exe._allocate()
    exe.arena[...] = 0x3C
    first, _ = exe.run([X.copy()])
    used = np.zeros(prog.plan.arena_bytes, bool)
    for b in prog.plan.buffers:
        if b.kind == "arena":
            used[b.offset:b.offset + b.size] = True
    assert not used.all(), "the test needs padding bytes in the arena"
    assert np.any(exe.arena != POISON)
    if backend == "cpu":  # the poisoning is compiled into the native entry
        arena = exe.arena
        exe = _executable(backend, prog.graph, prog.plan, True)
        exe.arena = arena
    else:
        exe.sanitize = True
    again, _ = exe.run([X.copy()])
    assert again[0] == first[0]
    assert np.all(exe.arena == POISON), "a byte of the arena was not poison after the call"


def test_poison_is_nan_for_floats_and_minus_one_for_ints():
    raw = np.full(16, POISON, np.uint8)
    assert np.isnan(raw.view(np.float32)).all() and np.isnan(raw.view(np.float64)).all()
    assert (raw.view(np.int32) == -1).all() and (raw.view(np.int64) == -1).all()


@pytest.mark.parametrize("backend", AVAILABLE)
def test_an_integer_buffer_that_dies_too_early_reads_all_ones(backend):
    # The poison of an integer buffer is all ones (-1): an int64 value read after the plan
    # said it died turns the sum into a wrong number, as NaN does for floats.
    def ints(x):
        a = x * 3          # read by both adds
        b = a + 1
        return (a + b).sum()
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    prog = cc.compile(ints, backend=backend, inplace="off", sanitize=False,
                      fuse=False).lower(x)
    a = next(n.out for n in prog.graph.nodes if n.op == "multiply")
    buf = prog.plan.buffer_of[a]
    reads = [t for t, n in enumerate(prog.graph.nodes) if a in n.inputs]
    assert len(reads) == 2 and buf.end == reads[1]
    buf.end = reads[0]   # the bug: a dies after its first reader
    want = int((6 * x + 1).sum())
    assert _executable(backend, prog.graph, prog.plan, False).run([x.copy()])[0][0] == want
    got = _executable(backend, prog.graph, prog.plan, True).run([x.copy()])[0][0]
    assert got == int((-1 + 3 * x + 1).sum()), got  # a read as -1 everywhere
