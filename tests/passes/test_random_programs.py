"""Property-based tests: random straight-line programs (tests/passes/program_gen.py) with views,
user inplace ops (also through views), set-item, reductions, matmul, concat, detach, reads of
views under no_grad, backward and an SGD update, some called with arguments that share memory
(the same array twice, overlapping slices, a row, a transpose), compiled with every inplace mode
and with donation, against two oracles. Arguments that share memory are made fresh for every
run (a copy would not share) and bound to the graph's inputs as a compiled call binds them.

For each program and inputs (on `backend="numpy"`, and on "cpu" with fewer examples):
  1. `sanitize=True`, `inplace="auto"` and `"off"`, with and without donating
     some arguments: the outputs and the caller's mutated arrays equal the op-by-op reference
     interpreter (`runtime.reference.evaluate` on `cc.trace`'s graph) and, for programs without
     `backward()`, a numpy re-implementation of the same program whose views are numpy views
     (numpy's own aliasing decides what an inplace write through a view reaches). Donated
     arguments' contents after the call are unspecified and not compared.
  2. `passes.verify.verify_plan` accepts the plan; `naive_bytes >= no_inplace_peak_bytes >=
     peak_bytes >= lower_bound_bytes` (strict: peak >= lower bound); `no_inplace_peak_bytes` is
     the peak of the inplace="off" plan of the same order; scheduling is on (the default), so
     each mode may run its own order, and auto's peak is at most off's; where both run one
     order, inplace decisions never raise the lower bound (auto <= off; see
     test_inplace_into_a_region_of_a_bigger_dead_buffer_does_not_raise_the_lower_bound).
     `peak_bytes <= no_inplace_peak_bytes` (placement is a heuristic, so "auto" falls back
     to the plan without reuse when that one is smaller: test_inplace_never_raises_the_placed_
     peak).
  3. `inplace="strict"` either gives the same values or raises `cc.InplaceError` naming a line
     of the program.
  4. Caller arrays the program does not mutate and that are not donated are bit-identical after
     the call; an output never aliases an undonated argument, except as that argument or a
     view of it (returned as NumPy would) or as that argument's own
     mutated value (`y = x.add_(1)`).
Training programs also get their gradients checked against finite differences (the two oracles
above run the same traced graph, so they can't see a wrong VJP): float64 inputs, the directional
derivative of the loss along a random direction per leaf (five-point stencil, two step sizes that
must agree: otherwise the loss has a kink or jump on that line and the example is discarded)
against `<leaf.grad, direction>` from the compiled program.
Programs whose last step the compiler must refuse (inplace on a leaf that needs a gradient,
writes through an expanded view, inplace results bigger than their target) raise
`cc.InplaceError`; a NumPy function applied to a traced tensor raises `cc.TraceError`; an
out-of-range class index given to `F.cross_entropy` raises `cc.DataError`: each naming that
step's line, in every mode, before touching any argument.

Concurrent mode: one compiled program (sanitizer on) called from RANDOM_PROGRAMS_THREADS threads
at once, each on its own data, a few calls each: every output and every caller's array after
each call is bit-identical to the serial call on the same data (or the same error is raised).

Each property has a `_sweep` sibling marked slow with more examples (`python -m pytest -m
slow`). Set RANDOM_PROGRAMS_EXAMPLES=N to run N random (not derandomized) examples per
property, and RANDOM_PROGRAMS_STEPS=K for longer programs (the defaults are sized for CI).
"""
from __future__ import annotations

import os
import re
import threading
from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st
from program_gen import PROGRAM_FILE, RandomProgram, programs

import compiler as cc
import compiler.nn.functional as F
from compiler.api import _rebuild
from compiler.arguments import bind
from compiler.passes import cse, dce, plan_memory
from passes.verify import verify_plan
from runtime.reference import evaluate

EXAMPLES = int(os.environ.get("RANDOM_PROGRAMS_EXAMPLES", "0")) or None
STEPS = int(os.environ.get("RANDOM_PROGRAMS_STEPS", "10"))  # most random steps per program
RTOL = 1e-12
THREADS = int(os.environ.get("RANDOM_PROGRAMS_THREADS", "4"))  # concurrent mode


def _settings(n):
    return settings(max_examples=EXAMPLES or n, deadline=None, derandomize=EXAMPLES is None,
                    database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# -- helpers ---------------------------------------------------------------------------------------
def _assert_close(actual, expected, what):
    if expected is None or not isinstance(expected, np.ndarray):
        assert actual is None if expected is None else actual == expected, what
        return
    assert isinstance(actual, np.ndarray), f"{what}: got {type(actual).__name__}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=RTOL * (1.0 + scale),
                               equal_nan=False, err_msg=what)


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        out = []
        for t in tree:
            out += _flat(t)
        return out
    return [tree]


def _check_result(result, expected, what):
    got, want = _flat(result), _flat(expected)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        _assert_close(g, w, f"{what}: output {i}")


def _reference_run(graph, prog: RandomProgram, args):
    """The reference interpreter on `graph` called with `args` (arguments that share memory
    bind to one graph input, as in a compiled call): the outputs, and the arguments' values
    after the call (the mutations written back through the arguments' memory)."""
    _, inputs = bind(args, list(prog.inputs))
    outs, muts = evaluate(graph, [a.copy() for a in inputs])
    for k, value in muts.items():
        np.copyto(inputs[k], value)
    return outs, [a.copy() for a in args]


class Expected:
    """What the program must produce, from the reference interpreter (and the numpy twin).

    `prog.arrays()` makes fresh arguments for each run: copies would lose the memory their
    alias layout shares."""

    def __init__(self, prog: RandomProgram, fn):
        self.prog = prog
        self.arrays = prog.arrays()
        self.graph = graph = cc.trace(fn, *prog.arrays())
        outs, self.final = _reference_run(graph, prog, prog.arrays())
        self.outputs = _rebuild(graph.output_tree, outs)
        for i, v in enumerate(_flat(self.outputs) + self.final):
            if isinstance(v, np.ndarray):
                assert np.all(np.isfinite(v)), f"generator made a non-finite value ({i})\n{prog}"
        twin = prog.build_numpy()
        if twin is not None:  # the independent oracle: numpy's own views and inplace writes
            args = prog.arrays()
            with np.errstate(all="ignore"):
                twin_out = [None if t is None else np.asarray(t) for t in twin(*args)]
            _check_result(self.outputs, twin_out, "reference vs numpy twin")
            for k, (ref, mine) in enumerate(zip(self.final, args)):
                _assert_close(ref, mine, f"reference vs numpy twin: final value of argument {k}")


def _run(fn, expected: Expected, inplace: str, donate=(), backend="numpy", fuse=None):
    """Compile and call on fresh copies; check values, untouched arguments and the plan."""
    args = expected.prog.arrays()
    before = [a.copy() for a in args]
    cf = cc.compile(fn, backend=backend, inplace=inplace, donate=donate, sanitize=True,
                    fuse=fuse)
    program = cf.lower(*args)
    check_plan(program)
    what = f"inplace={inplace!r} donate={donate}"
    result = cf(*args)
    _check_result(result, expected.outputs, what)
    for k, (arr, old) in enumerate(zip(args, before)):
        if k in donate:
            continue  # unspecified after the call
        if expected.final[k].tobytes() == old.tobytes():
            assert arr.tobytes() == old.tobytes(), f"{what}: argument {k} was written"
        else:
            _assert_close(arr, expected.final[k], f"{what}: caller's argument {k} after the call")
    if not donate:  # a second call reuses the program and its arena
        again = expected.prog.arrays()
        _check_result(cf(*again), expected.outputs, what + " (second call)")
    for i, out in enumerate(_flat(result)):
        if isinstance(out, np.ndarray):
            for k, arr in enumerate(args):
                # Only an argument itself, or a view of it, is handed back in its memory.
                assert k in donate or not np.may_share_memory(out, arr) \
                    or any(_within(out, a) for a in args), \
                    f"{what}: output {i} aliases undonated argument {k}"
    return program


def _within(view, arr) -> bool:
    (lo, hi), (alo, ahi) = (np.lib.array_utils.byte_bounds(a) for a in (view, arr))
    return alo <= lo and hi <= ahi


def check_plan(program):
    plan = program.plan
    verify_plan(program.graph, plan)
    assert plan.peak_bytes >= plan.lower_bound_bytes, plan.summary()
    if program.inplace != "strict":  # one footing (MemoryPlan.LEGEND)
        assert plan.naive_bytes >= plan.no_inplace_peak_bytes >= plan.peak_bytes, \
            plan.summary()
    assert plan.arena_bytes % plan.alignment == 0
    if program.inplace == "off":
        assert plan.no_inplace_peak_bytes == plan.peak_bytes
        assert not any(d.inplace for d in plan.decisions)


def _error_line(message: str) -> int | None:
    """The line of the program that an error names as the offending call: `(at file.py:N: ...)`
    ends every CompilerError's message (other `file.py:N` may come before it, in the reason)."""
    found = re.findall(r"\(at " + re.escape(os.path.basename(PROGRAM_FILE)) + r":(\d+)", message)
    return int(found[-1]) if found else None


# The error each kind of refused step raises (the others: cc.InplaceError).
REFUSALS = {"numpy": cc.TraceError, "label": cc.DataError}


def check_program(prog: RandomProgram, donate_mask: int = 0, backend: str = "numpy",
                  fuse=None):
    fn = prog.build()
    note(f"random_program.py (inputs: default_rng({prog.seed}).standard_normal):\n{prog}")
    event(f"refused step: {prog.expect_error}" if prog.expect_error else
          "backward" if prog.has_backward else "forward only")
    if prog.expect_error:
        line = prog.line_number(prog.error_step)
        error = REFUSALS.get(prog.expect_error, cc.InplaceError)
        with pytest.raises(error) as err:
            cc.trace(fn, *prog.arrays())
        assert _error_line(str(err.value)) == line, (str(err.value), line)
        args = prog.arrays()
        before = [a.copy() for a in args]
        for mode in ("auto", "off", "strict"):
            with pytest.raises(error):
                cc.compile(fn, backend=backend, inplace=mode, sanitize=True)(*args)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(args, before))
        return
    event(f"arguments sharing memory: {prog.alias}" if prog.alias else "separate arguments")
    if prog.nograd_reads:
        event("values read under no_grad")
    expected = Expected(prog, fn)
    n = len(prog.inputs)
    # Donated arguments may also be ones the program mutates (the mutation wins: see
    # test_donated_argument_that_is_also_mutated_does_not_clobber_an_output). Arguments that
    # share memory can't be donated (test_donation_errors).
    donate = () if prog.alias else tuple(k for k in range(n) if donate_mask >> k & 1)
    auto = _run(fn, expected, "auto", backend=backend, fuse=fuse)
    off = _run(fn, expected, "off", backend=backend, fuse=fuse)
    if [n.out.id for n in auto.graph.nodes] == [n.out.id for n in off.graph.nodes]:
        # lower bounds compare within one order only
        assert auto.plan.lower_bound_bytes <= off.plan.lower_bound_bytes, \
            f"inplace raised the lower bound\n{auto.plan.summary()}\n{off.plan.summary()}"
        assert auto.plan.no_inplace_peak_bytes == off.plan.peak_bytes
    # Each mode schedules for itself (the written order or the scheduler's, whichever plans
    # lower), and auto never plans above inplace="off" in either order.
    assert auto.plan.peak_bytes <= off.plan.peak_bytes, (auto.plan.summary(),
                                                          off.plan.summary())
    assert auto.plan.peak_bytes <= auto.plan.no_inplace_peak_bytes, auto.plan.summary()
    # CSE merges only values whose lives overlap: it never raises the lower bound (planned
    # here without the fallback of "auto" to the plan without reuse, on both graphs).
    unmerged = dce(expected.graph)
    for mode in ("auto", "off"):
        before = plan_memory(unmerged, mode, baseline=False).lower_bound_bytes
        # (on the written order: the scheduler and GEMM-accumulate change what is compared)
        after = plan_memory(cse(unmerged), mode, baseline=False).lower_bound_bytes
        assert after <= before, f"CSE raised the lower bound ({mode}): {before} -> {after}"
    if donate:
        _run(fn, expected, "auto", donate, backend, fuse)
        _run(fn, expected, "off", donate, backend, fuse)
    # strict: the same values, or a refusal that names a line of the program
    try:
        cc.compile(fn, backend=backend, inplace="strict").lower(*prog.arrays())
    except cc.InplaceError as e:
        event("inplace='strict' refused")
        line = _error_line(str(e))
        assert line in {prog.line_number(i) for i in prog.inplace_steps}, (str(e), line)
    else:
        _run(fn, expected, "strict", backend=backend, fuse=fuse)


# -- the properties ---------------------------------------------------------------------------
# Each property runs twice: a few derandomized examples in the default run, and its `_sweep`
# sibling (marked slow: `python -m pytest -m slow`) with the larger count (the default run's
# until the suite had to fit in 10 minutes on 2 cores).
@_settings(60)
@given(prog=programs(STEPS, backward=False), donate_mask=st.integers(0, 15))
def test_forward_programs_match_reference_and_numpy(prog, donate_mask):
    check_program(prog, donate_mask)


@pytest.mark.slow
@_settings(300)
@given(prog=programs(STEPS, backward=False), donate_mask=st.integers(0, 15))
def test_forward_programs_match_reference_and_numpy_sweep(prog, donate_mask):
    check_program(prog, donate_mask)


@_settings(50)
@given(prog=programs(STEPS, backward=True), donate_mask=st.integers(0, 15))
def test_training_programs_match_reference(prog, donate_mask):
    check_program(prog, donate_mask)


@pytest.mark.slow
@_settings(250)
@given(prog=programs(STEPS, backward=True), donate_mask=st.integers(0, 15))
def test_training_programs_match_reference_sweep(prog, donate_mask):
    check_program(prog, donate_mask)


FD_STEP = 1e-4
FD_RTOL = 1e-6


def _five_point(phi, h):
    return (-phi(2 * h) + 8 * phi(h) - 8 * phi(-h) + phi(-2 * h)) / (12 * h)


def check_gradients(prog: RandomProgram, backend: str = "numpy"):
    """The compiled program's leaf gradients against finite differences of its loss."""
    loss_src, grad_src = prog.gradient_sources()
    note(f"loss program:\n{loss_src}\ngradient program:\n{grad_src}")
    grads = cc.compile(prog.build(grad_src), backend=backend, sanitize=True)(*prog.arrays())
    loss_graph = cc.trace(prog.build(loss_src), *prog.arrays())
    storages = prog.storages()
    rng = np.random.default_rng(prog.seed)
    for leaf, grad in zip(prog.leaves, grads):
        # The leaf's argument is its storage (one array; `fn(w, w)` passes one leaf twice).
        k = prog.storage_index(leaf)
        assert grad.shape == storages[k].shape
        direction = rng.standard_normal(grad.shape)

        def phi(t):
            moved = [a.copy() for a in storages]
            moved[k] += t * direction
            outs, _ = _reference_run(loss_graph, prog, prog.arguments(moved))
            return float(outs[0])

        coarse, fine = _five_point(phi, FD_STEP), _five_point(phi, FD_STEP / 2)
        scale = 1.0 + abs(coarse) + abs(phi(0.0))
        smooth = abs(coarse - fine) <= 0.1 * FD_RTOL * scale
        event("gradient checked" if smooth else "loss not smooth along the direction")
        assume(smooth)
        analytic = float(np.sum(grad * direction))
        assert abs(analytic - coarse) <= FD_RTOL * scale, (
            f"d loss / d {leaf} along a random direction: compiled {analytic!r}, finite "
            f"differences {coarse!r}")


@_settings(15)
@given(prog=programs(8, backward=True, errors=False, detach=False, whole_loss=True))
def test_training_program_gradients_match_finite_differences(prog):
    check_gradients(prog)


@pytest.mark.slow
@_settings(60)
@given(prog=programs(8, backward=True, errors=False, detach=False, whole_loss=True))
def test_training_program_gradients_match_finite_differences_sweep(prog):
    check_gradients(prog)


# The cpu (llvmlite) backend, sanitizer on, on the same generators with fewer examples (each
# example compiles 3-5 native modules, ~0.1 s): about a third of numpy's in the sweeps.
# RANDOM_PROGRAMS_EXAMPLES=N runs N on each.
# Each runs with 1 and with 2 threads (`cc.compile(threads=)` through the COMPILER_THREADS
# variable), every loop that can be cut cut into chunks, however small (`_split_everything`).
@contextmanager
def _split_everything(threads):
    """The cpu backend's thread count and its serial thresholds, for this block: with
    threads=N every parallel kernel is cut into as many chunks as its outer loop allows."""
    from runtime.cpu import emitter
    saved = emitter.PARALLEL_MIN_WORK, emitter.GRAIN, os.environ.get("COMPILER_THREADS")
    emitter.PARALLEL_MIN_WORK, emitter.GRAIN = 0, 1
    os.environ["COMPILER_THREADS"] = str(threads)
    try:
        yield
    finally:
        emitter.PARALLEL_MIN_WORK, emitter.GRAIN = saved[:2]
        if saved[2] is None:
            os.environ.pop("COMPILER_THREADS", None)
        else:
            os.environ["COMPILER_THREADS"] = saved[2]


CPU_THREADS = pytest.mark.parametrize("threads", [1, 2])


@CPU_THREADS
@_settings(20)
@given(prog=programs(STEPS, backward=False), donate_mask=st.integers(0, 15))
def test_forward_programs_on_cpu_match_reference(prog, donate_mask, threads):
    with _split_everything(threads):
        check_program(prog, donate_mask, backend="cpu")


@pytest.mark.slow
@CPU_THREADS
@_settings(100)
@given(prog=programs(STEPS, backward=False), donate_mask=st.integers(0, 15))
def test_forward_programs_on_cpu_match_reference_sweep(prog, donate_mask, threads):
    with _split_everything(threads):
        check_program(prog, donate_mask, backend="cpu")


@CPU_THREADS
@_settings(16)
@given(prog=programs(STEPS, backward=True), donate_mask=st.integers(0, 15))
def test_training_programs_on_cpu_match_reference(prog, donate_mask, threads):
    with _split_everything(threads):
        check_program(prog, donate_mask, backend="cpu")


@pytest.mark.slow
@CPU_THREADS
@_settings(80)
@given(prog=programs(STEPS, backward=True), donate_mask=st.integers(0, 15))
def test_training_programs_on_cpu_match_reference_sweep(prog, donate_mask, threads):
    with _split_everything(threads):
        check_program(prog, donate_mask, backend="cpu")


@CPU_THREADS
@_settings(5)
@given(prog=programs(8, backward=True, errors=False, detach=False, whole_loss=True))
def test_training_program_gradients_on_cpu_match_finite_differences(prog, threads):
    with _split_everything(threads):
        check_gradients(prog, backend="cpu")


@pytest.mark.slow
@CPU_THREADS
@_settings(20)
@given(prog=programs(8, backward=True, errors=False, detach=False, whole_loss=True))
def test_training_program_gradients_on_cpu_match_finite_differences_sweep(prog, threads):
    with _split_everything(threads):
        check_gradients(prog, backend="cpu")


def check_thread_counts(prog: RandomProgram):
    """Outputs and the caller's arrays after the call, bit for bit, with 1, 2 and 3 threads
    (every loop cut into chunks): which thread runs a chunk never changes a result."""
    assume(not prog.expect_error)
    note(f"random_program.py (inputs: default_rng({prog.seed}).standard_normal):\n{prog}")
    outcomes = []
    for threads in (1, 2, 3):
        with _split_everything(threads):
            cf = cc.compile(prog.build(), backend="cpu", sanitize=True)
            outcomes.append([_outcome(cf, prog, prog.storages()) for _ in range(2)])
    assert outcomes[0] == outcomes[1] == outcomes[2]


@_settings(10)
@given(prog=programs(STEPS, errors=False))
def test_programs_on_cpu_give_the_same_bits_for_any_thread_count(prog):
    check_thread_counts(prog)


@pytest.mark.slow
@_settings(40)
@given(prog=programs(STEPS, errors=False))
def test_programs_on_cpu_give_the_same_bits_for_any_thread_count_sweep(prog):
    check_thread_counts(prog)


# -- concurrent mode -------------------------------------------------------------------------------
def _outcome(cf, prog, storages):
    """A call on fresh copies of `storages`: its outputs and the arguments after it, as bytes
    (or the error it raised)."""
    args = prog.arguments([s.copy() for s in storages])
    try:
        result = cf(*args)
    except cc.CompilerError as e:
        return ("error", type(e).__name__, e.bare_message)
    outs = [("array", o.dtype.str, o.shape, o.tobytes()) if isinstance(o, np.ndarray)
            else ("value", repr(o)) for o in _flat(result)]
    return ("ok", outs, [a.tobytes() for a in args])


def check_concurrent(prog: RandomProgram, backend: str, calls: int = 3):
    """The program called from THREADS threads at once, each on its own data (the generator's
    inputs shifted by a per-thread amount), gives what the serial calls give, bit for bit."""
    assume(not prog.expect_error)
    note(f"random_program.py (inputs: default_rng({prog.seed}).standard_normal):\n{prog}")
    cf = cc.compile(prog.build(), backend=backend, sanitize=True)
    data = [[s + 0.125 * i for s in prog.storages()] for i in range(THREADS)]
    serial = [[_outcome(cf, prog, d) for _ in range(calls)] for d in data]
    barrier = threading.Barrier(THREADS)
    got: list = [None] * THREADS

    def work(i):
        barrier.wait()
        got[i] = [_outcome(cf, prog, data[i]) for _ in range(calls)]
    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(THREADS):
        assert got[i] is not None, f"thread {i} raised (see its traceback above)"
        for c in range(calls):
            assert got[i][c] == serial[i][c], f"thread {i}, call {c}: differs from the serial call"
    assert cf.traces == 1


@_settings(12)
@given(prog=programs(STEPS, errors=False))
def test_programs_called_from_threads_match_the_serial_calls(prog):
    check_concurrent(prog, "numpy")


@_settings(8)
@given(prog=programs(STEPS, errors=False))
def test_programs_on_cpu_called_from_threads_match_the_serial_calls(prog):
    check_concurrent(prog, "cpu")


# Fusion on the numpy backend (chunked bodies with planned scratch); the cpu runs above fuse
# by default.
@_settings(10)
@given(prog=programs(STEPS, backward=False), donate_mask=st.integers(0, 15))
def test_forward_programs_fused_on_numpy_match_reference(prog, donate_mask):
    check_program(prog, donate_mask, fuse=True)


@pytest.mark.slow
@_settings(30)
@given(prog=programs(STEPS, backward=False), donate_mask=st.integers(0, 15))
def test_forward_programs_fused_on_numpy_match_reference_sweep(prog, donate_mask):
    check_program(prog, donate_mask, fuse=True)


@_settings(8)
@given(prog=programs(STEPS, backward=True), donate_mask=st.integers(0, 15))
def test_training_programs_fused_on_numpy_match_reference(prog, donate_mask):
    check_program(prog, donate_mask, fuse=True)


@pytest.mark.slow
@_settings(25)
@given(prog=programs(STEPS, backward=True), donate_mask=st.integers(0, 15))
def test_training_programs_fused_on_numpy_match_reference_sweep(prog, donate_mask):
    check_program(prog, donate_mask, fuse=True)


# -- regressions: minimal programs found by the properties above ------------------------------
def _regression_input():
    return np.random.default_rng(0).standard_normal((3, 4))


@pytest.mark.usefixtures("each_backend")
def test_donated_argument_that_is_also_mutated_does_not_clobber_an_output():
    # Found by the properties (fixed in 471c40d): `-a` wrote over donated argument 'a', whose
    # buffer then received a's new value (zeros) after the call, clobbering the output.
    def program(a):
        v = -a
        a.zero_()
        return v

    x = _regression_input()
    out = cc.compile(program, donate=(0,), sanitize=True)(x.copy())
    np.testing.assert_array_equal(out, -x)
    y = x.copy()
    out = cc.compile(program, donate=("a",), sanitize=True)(y)
    np.testing.assert_array_equal(out, -x)


def _peak_program(x):
    a = F.softmax(x)
    b = F.softmax(a)
    c = b.sin()  # auto: sin writes over b, so b+c is one longer-lived buffer
    d = F.softmax(c)
    return cc.concat([d, d]).sum()


def test_inplace_does_not_raise_the_placed_peak_of_a_packing_counterexample():
    # Found while checking peak <= no_inplace_peak (fixed in 312bfb7): with one best-fit order,
    # the merged b+c buffer packed into a 384-byte arena where inplace="off" needed 320
    # (peak 488 B against 424 B).
    x = _regression_input()
    auto = cc.compile(_peak_program).lower(x).plan
    off = cc.compile(_peak_program, inplace="off").lower(x).plan
    assert [d.inplace for d in auto.decisions] == [True]
    assert auto.lower_bound_bytes <= off.lower_bound_bytes
    assert auto.no_inplace_peak_bytes == off.peak_bytes
    assert auto.peak_bytes <= auto.no_inplace_peak_bytes, auto.summary()
    np.testing.assert_allclose(cc.compile(_peak_program, sanitize=True)(x.copy()),
                               cc.compile(_peak_program, inplace="off")(x.copy()), rtol=RTOL)


def _copy(t):
    # an op that never runs in place and needs no workspace (softmax, found first, now has one)
    return cc.concat([t], axis=-1)


def _peak_program_2(x, y):
    a = _copy(x)
    b = _copy(y)
    s = b.sum()
    c = _copy(a)
    d = c.sin()  # auto: sin writes over c
    e = d * y
    return s, e.sum()


def test_inplace_never_raises_the_placed_peak():
    # Here the one inplace decision (sin over c) makes every placement order pack into 256 B
    # where inplace="off" packs into 192 B: "auto" falls back to the plan without reuse, and
    # its decision says why.
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(4), rng.standard_normal((3, 4))
    plan = cc.compile(_peak_program_2).lower(x, y).plan
    off = cc.compile(_peak_program_2, inplace="off").lower(x, y).plan
    assert plan.lower_bound_bytes <= off.lower_bound_bytes
    assert plan.peak_bytes == plan.no_inplace_peak_bytes == off.peak_bytes, plan.summary()
    sin = next(d for d in plan.decisions if d.op == "sin")
    assert not sin.inplace and sin.reason.startswith("reuse would pack worse")
    np.testing.assert_allclose(cc.compile(_peak_program_2, sanitize=True)(x, y),
                               cc.compile(_peak_program_2, inplace="off")(x, y), rtol=RTOL)


def _pinned_base_program(x):
    b = x * 2.0
    r = b[0] * 3.0  # auto: r is written over b[0], which keeps all 192 B of b's buffer live
    c = x.sum(axis=0, keepdim=True) @ x.transpose([0, 2, 1])
    return r.sum() + c.sum()


def test_inplace_into_a_region_of_a_bigger_dead_buffer_does_not_raise_the_lower_bound():
    # Found by the properties (fixed in 6611ace): `b[0] * 3.0` wrote its [3,4] result into a
    # region of the dead [2,3,4] buffer of b, which then lived as long as the result: inplace
    # raised the lower bound (624 B against 528 B with inplace="off") and the peak (712 against
    # 648 B).
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    auto = cc.compile(_pinned_base_program).lower(x).plan
    off = cc.compile(_pinned_base_program, inplace="off").lower(x).plan
    np.testing.assert_allclose(cc.compile(_pinned_base_program, sanitize=True)(x.copy()),
                               cc.compile(_pinned_base_program, inplace="off")(x.copy()),
                               rtol=RTOL)
    assert auto.lower_bound_bytes <= off.lower_bound_bytes, (auto.summary(), off.summary())
    assert auto.peak_bytes <= auto.no_inplace_peak_bytes, auto.summary()


@pytest.mark.usefixtures("each_backend")
def test_setitem_after_a_write_through_a_transpose_then_reshape_of_an_intermediate():
    # Found by the properties (fixed in 6611ace): the scatter of `b[0] = 0.5` wrote over b's
    # base, laid out transposed by the write-back of `b.t().zero_()`, although the later
    # reshape can't view that layout; the reinplace pass crashed on a None probe.
    def program(a):
        b = a * 2.0
        b.t().zero_()
        b[0] = 0.5
        return b.reshape([12]) + 1.0

    x = _regression_input()
    expected = np.zeros((3, 4))
    expected[0] = 0.5
    for mode in ("auto", "off"):
        out = cc.compile(program, inplace=mode, sanitize=True)(x.copy())
        np.testing.assert_array_equal(out, expected.reshape(12) + 1.0)


@pytest.mark.usefixtures("each_backend")
def test_setitem_after_a_write_through_a_transpose_then_reshape_of_an_argument():
    # The same on a caller's array (fixed in 6611ace): the arena executor failed to take the
    # planned reshape view ("Incompatible shape for in-place modification").
    def program(a):
        a.t().zero_()
        a[0] = 0.5
        return a.reshape([12])

    x = _regression_input()
    expected = np.zeros((3, 4))
    expected[0] = 0.5
    args = x.copy()
    out = cc.compile(program, sanitize=True)(args)
    np.testing.assert_array_equal(out, expected.reshape(12))
    np.testing.assert_array_equal(args, expected)


# -- 16-bit floats (issue 26) ----------------------------------------------------------------------
HALF = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
# How far a 16-bit result may drift from the float64 reference run on the same (rounded) inputs:
# each op rounds once (the compiled backends keep float32 inside a fused chain, so they round
# less), a program has at most STEPS steps plus its backward, relative to the largest value.
HALF_ULPS = 16


def _assert_half_close(got, want, half, what):
    if not isinstance(want, np.ndarray):
        assert got is None if want is None else got == want, what
        return
    assert isinstance(got, np.ndarray) and got.shape == want.shape, (what, got)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    # a float result is 16-bit unless the program mixed in a wider float (cc.eye(dtype='float64'))
    assert got.dtype in (half, np.dtype(np.float32), np.dtype(np.float64)), (what, got.dtype)
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    # the 16-bit dtype's precision even for a wider result: its operands were 16-bit values
    # rounded by earlier steps (`a += 0.5` on a bfloat16 `a`, then `a + cc.eye(dtype=
    # 'float64')`: found by the properties), which the float64 reference does not round
    eps = float(ml_dtypes.finfo(half).eps)
    g = got.astype(np.float64)
    assert np.all(np.isfinite(g)), f"{what}: non-finite values {g[~np.isfinite(g)][:4]}"
    np.testing.assert_allclose(g, want, rtol=0, atol=HALF_ULPS * eps * (1.0 + scale),
                               err_msg=what)


def check_half_program(prog: RandomProgram, half: np.dtype, backend: str):
    """The program on 16-bit float arguments, against the reference interpreter run in float64
    on the same values (the 16-bit inputs widened): outputs and the caller's arrays after the
    call, within HALF_ULPS of the 16-bit dtype's precision."""
    assume(not prog.expect_error)
    note(f"random_program.py ({half.name} arguments from default_rng({prog.seed})"
         f".standard_normal):\n{prog}")
    fn = prog.build()
    wide = [s.astype(half).astype(np.float64) for s in prog.storages()]
    graph = cc.trace(fn, *prog.arguments([s.copy() for s in wide]))
    args64 = prog.arguments([s.copy() for s in wide])
    outs, final = _reference_run(graph, prog, args64)
    want = _flat(_rebuild(graph.output_tree, outs))
    storages = [s.astype(half) for s in prog.storages()]
    args = prog.arguments(storages)
    got = _flat(cc.compile(fn, backend=backend, sanitize=True)(*args))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _assert_half_close(g, w, half, f"{half.name} on {backend}: output {i}")
    for k, (arr, w) in enumerate(zip(args, final)):
        _assert_half_close(arr, w, half, f"{half.name} on {backend}: argument {k} after the call")


@pytest.mark.parametrize("dtype", sorted(HALF))
@_settings(8)
@given(prog=programs(STEPS, errors=False))
def test_half_programs_match_the_float64_reference(prog, dtype):
    check_half_program(prog, HALF[dtype], "numpy")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", sorted(HALF))
@_settings(25)
@given(prog=programs(STEPS, errors=False))
def test_half_programs_match_the_float64_reference_sweep(prog, dtype):
    check_half_program(prog, HALF[dtype], "numpy")


@CPU_THREADS
@pytest.mark.parametrize("dtype", sorted(HALF))
@_settings(3)
@given(prog=programs(STEPS, errors=False))
def test_half_programs_on_cpu_match_the_float64_reference(prog, dtype, threads):
    with _split_everything(threads):
        check_half_program(prog, HALF[dtype], "cpu")


@pytest.mark.slow
@CPU_THREADS
@pytest.mark.parametrize("dtype", sorted(HALF))
@_settings(12)
@given(prog=programs(STEPS, errors=False))
def test_half_programs_on_cpu_match_the_float64_reference_sweep(prog, dtype, threads):
    with _split_everything(threads):
        check_half_program(prog, HALF[dtype], "cpu")
