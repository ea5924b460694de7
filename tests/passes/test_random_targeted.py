"""Random programs aimed where this project's bugs were: the generator of
tests/passes/program_gen.py with `targeted=True` (arg-reductions with ties, inplace ops through
views of views, float32 / 16-bit round trips inside float64 programs, literal constants, GEMMs of
transposes, min with ties) and other argument shapes (`shapes=`: size-1 axes, a zero-size
argument, rows longer than a warp and a gpu block), checked as tests/passes/test_random_programs.py
checks its programs (reference interpreter, numpy twin, every inplace mode, donation, the plan),
and four properties of their own:

  - layouts: one compiled function called on the same values laid out C-contiguous, strided
    inside a bigger buffer, with a negative stride, Fortran-ordered and at an odd offset, in
    turns and twice each (the second call of a layout takes `compiler.api._FastCall`): every
    output and every caller's array after the call are bit-identical to the first call's
    (arguments that share memory too, but for LAYOUTS_OF_THEIR_OWN), and the memory around a
    strided argument is never written; a read-only argument that the program writes is
    refused with every caller's array untouched;
  - thread counts on float32, float16 and bfloat16 arguments: bit-identical with 1, 2 and 3
    threads (every loop cut into chunks);
  - two threads calling one function at once, each with its own layout;
  - memory budgets on the cpu backend: a random budget between the least reachable peak and
    the plan without recomputation gives the unbudgeted values bit for bit.

The generator's hard aliasing (`programs(hard_aliasing=True)`: every program's arguments
share memory, in-place ops through chains of views of them) runs through the same checks, and
through finite differences of its gradients.

Each runs a few derandomized examples by default; its `_sweep` sibling (marked slow) runs more.
RANDOM_PROGRAMS_EXAMPLES=N runs N random examples of each.
"""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st
from program_gen import RandomProgram, programs

import compiler as cc
import passes.budget as budget_pass
from tests.passes.test_random_programs import (
    STEPS,
    _assert_close,
    _flat,
    _settings,
    _split_everything,
    check_gradients,
    check_program,
)

SHAPES = ["ones", "empty", "long"]
CPU_THREADS = pytest.mark.parametrize("threads", [1, 2])


# -- the checks of test_random_programs on the targeted generator -------------------------------
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@_settings(6)
@given(data=st.data(), donate_mask=st.integers(0, 15))
def test_targeted_programs_match_reference_and_numpy(shapes, data, donate_mask):
    prog = data.draw(programs(STEPS, shapes=shapes, targeted=True), "program")
    check_program(prog, donate_mask)


@pytest.mark.slow
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@_settings(80)
@given(data=st.data(), donate_mask=st.integers(0, 15))
def test_targeted_programs_match_reference_and_numpy_sweep(shapes, data, donate_mask):
    prog = data.draw(programs(STEPS, shapes=shapes, targeted=True), "program")
    check_program(prog, donate_mask)


@CPU_THREADS
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@_settings(2)
@given(data=st.data(), donate_mask=st.integers(0, 15))
def test_targeted_programs_on_cpu_match_reference(shapes, data, donate_mask, threads):
    prog = data.draw(programs(STEPS, shapes=shapes, targeted=True), "program")
    with _split_everything(threads):
        check_program(prog, donate_mask, backend="cpu")


@pytest.mark.slow
@CPU_THREADS
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@_settings(30)
@given(data=st.data(), donate_mask=st.integers(0, 15))
def test_targeted_programs_on_cpu_match_reference_sweep(shapes, data, donate_mask, threads):
    prog = data.draw(programs(STEPS, shapes=shapes, targeted=True), "program")
    with _split_everything(threads):
        check_program(prog, donate_mask, backend="cpu")


# -- layouts -------------------------------------------------------------------------------------
SENTINEL = -7.25  # what surrounds a strided argument in its bigger buffer


class Laid:
    """The values of `s` in one layout: `view` (the argument's storage) and `around` (the
    bigger buffer it lives in and the mask of the view's elements), when there is one."""

    def __init__(self, s: np.ndarray, kind: str):
        self.around = None
        if kind == "C":
            self.view = s.copy()
        elif kind == "F":
            self.view = np.array(s, order="F")  # (a copy: asfortranarray may return s)
        elif kind == "reversed":  # a negative stride on every axis
            # (a copy: ascontiguousarray returns a size-1 array's reversed view itself)
            flipped = np.array(s[(slice(None, None, -1),) * s.ndim], order="C", copy=True)
            self.view = flipped[(slice(None, None, -1),) * s.ndim]
        elif kind == "strided":  # every other element of the last axis, and one more row
            big = np.full(s.shape[:-1] + (2 * s.shape[-1] + 1,),
                          np.array(SENTINEL).astype(s.dtype))
            index = (Ellipsis, slice(1, None, 2))
            self.view = big[index]
            self.view[...] = s
            mask = np.zeros(big.shape, bool)
            mask[index] = True
            self.around = (big, mask, big[~mask].copy())
        elif kind == "offset":  # one element in: a vector load must not assume more alignment
            raw = np.zeros(s.size + 4, s.dtype)
            self.view = raw[1:1 + s.size].reshape(s.shape)
            self.view[...] = s
        else:
            raise ValueError(kind)

    def untouched_around(self) -> bool:
        if self.around is None:
            return True
        big, mask, before = self.around
        return big[~mask].tobytes() == before.tobytes()


LAYOUTS = ["C", "strided", "C", "reversed", "F", "offset", "strided", "C"]
# Alias layouts whose members run over their storage in different axis orders (`s` and `s.T`)
# or directions (`s[0:3]` and `s[3:0:-1]`): no order suits them all, so the storage is bound as
# the caller's memory lies (compiler/arguments.py), and a Fortran-ordered or reversed storage
# is another program, as in eager NumPy: compared with the NumPy twin run on the same memory.
LAYOUTS_OF_THEIR_OWN = {alias: {"F", "reversed"} for alias in
                        ("transposed", "crossed", "reversed", "reversed columns", "three")}


def _twin_in_layout(prog: RandomProgram, storages, kind, got):
    """The NumPy twin (eager views on the caller's memory) on `storages` laid out as `kind`,
    against `got` (`_called`'s outcome there): the same outputs and arguments after the call,
    to the twin tolerance of test_random_programs."""
    twin = prog.build_numpy()
    if twin is None or got[0] != "ok":
        return
    args = prog.arguments([Laid(s, kind).view for s in storages])
    with np.errstate(all="ignore"):
        want = [None if t is None else np.asarray(t) for t in twin(*args)]
    assert len(want) == len(got[1]), f"{kind} layout: the twin's outputs"
    for i, (g, w) in enumerate(zip(got[1], want)):
        if g[0] == "array" and w is not None:
            _assert_close(np.frombuffer(g[3], np.dtype(g[1])).reshape(g[2]), w,
                          f"{kind} layout against the NumPy twin: output {i}")
    for k, (g, a) in enumerate(zip(got[2], args)):
        _assert_close(np.frombuffer(g, a.dtype).reshape(a.shape), a,
                      f"{kind} layout against the NumPy twin: argument {k} after the call")


def _called(cf, prog: RandomProgram, storages, kind):
    laid = [Laid(s, kind) for s in storages]
    args = prog.arguments([lay.view for lay in laid])
    try:
        result = cf(*args)
    except cc.CompilerError as e:
        return ("error", type(e).__name__, e.bare_message)
    assert all(lay.untouched_around() for lay in laid), f"{kind}: wrote outside an argument"
    outs = [("array", o.dtype.str, o.shape, o.tobytes()) if isinstance(o, np.ndarray)
            else ("value", repr(o)) for o in _flat(result)]
    return ("ok", outs, [a.tobytes() for a in args])


def _apart(cf, args):
    try:
        result = cf(*args)
    except cc.CompilerError as e:
        return ("error", type(e).__name__, e.bare_message)
    return ("ok", [o.tobytes() if isinstance(o, np.ndarray) else repr(o)
                   for o in _flat(result)], [a.tobytes() for a in args])


def check_layouts(prog: RandomProgram, backend: str):
    assume(not prog.expect_error)
    note(f"random_program.py (inputs: default_rng({prog.seed}).standard_normal):\n{prog}")
    cf = cc.compile(prog.build(), backend=backend, sanitize=True)
    storages = prog.storages()
    first, of_layout = None, {}
    for kind in LAYOUTS:
        for call in range(2):  # the general path, then the fast path
            got = _called(cf, prog, storages, kind)
            if first is None:
                first = got
            mine = of_layout.setdefault(kind, got)
            assert got == mine, f"layout {kind!r}, call {call}: differs from its first call"
            if kind in LAYOUTS_OF_THEIR_OWN.get(prog.alias, ()):
                if call == 0:
                    _twin_in_layout(prog, storages, kind, got)
                continue
            assert got == first, f"layout {kind!r}, call {call}: differs from the first call"
    # Another dtype in between (a signature of its own), keyword arguments (the general path),
    # and the first layout again.
    narrow = [s.astype(np.float32) for s in storages]
    fresh = cc.compile(prog.build(), backend=backend, sanitize=True)
    assert _called(cf, prog, narrow, "C") == _called(fresh, prog, narrow, "C"), "float32 call"
    args = prog.arguments([Laid(s, "C").view for s in storages])
    names = list(prog.inputs)
    try:
        result = cf(**dict(zip(names, args)))
        by_name = ("ok", [("array", o.dtype.str, o.shape, o.tobytes())
                          if isinstance(o, np.ndarray) else ("value", repr(o))
                          for o in _flat(result)], [a.tobytes() for a in args])
    except cc.CompilerError as e:
        by_name = ("error", type(e).__name__, e.bare_message)
    assert by_name == of_layout["C"], "keyword arguments: differs from the positional call"
    assert _called(cf, prog, storages, "C") == of_layout["C"], "C layout again: differs"
    if prog.alias:
        # The same layouts without the sharing (each argument a copy) take the general path
        # (the fast path's key, shapes and strides, can't tell them apart), and back.
        apart = cc.compile(prog.build(), backend=backend, sanitize=True)
        for _ in range(2):
            copies = [a.copy() for a in prog.arguments([s.copy() for s in storages])]
            again = [a.copy() for a in copies]
            assert _apart(cf, copies) == _apart(apart, again), "arguments apart: differs"
            assert _called(cf, prog, storages, "C") == of_layout["C"], "shared again: differs"
    # A read-only argument that the program writes: refused before anything is written.
    laid = [Laid(s, "C") for s in storages]
    args = prog.arguments([lay.view for lay in laid])
    if first[0] == "ok":
        written = [k for k, (a, b) in enumerate(zip(first[2], prog.arrays()))
                   if a != b.tobytes()]
        if written and not prog.alias:
            before = [a.copy() for a in args]
            args[written[-1]].flags.writeable = False
            with pytest.raises(cc.InplaceError, match="read-only"):
                cf(*args)
            for k, (a, b) in enumerate(zip(args, before)):
                assert a.tobytes() == b.tobytes(), f"argument {k} written by a refused call"


@CPU_THREADS
@pytest.mark.parametrize("shapes", ["default", "long"])
@_settings(2)
@given(data=st.data())
def test_programs_on_cpu_give_the_same_bits_in_every_layout(shapes, data, threads):
    prog = data.draw(programs(STEPS, errors=False, shapes=shapes, targeted=True), "program")
    with _split_everything(threads):
        check_layouts(prog, "cpu")


@pytest.mark.slow
@CPU_THREADS
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@_settings(30)
@given(data=st.data())
def test_programs_on_cpu_give_the_same_bits_in_every_layout_sweep(shapes, data, threads):
    prog = data.draw(programs(STEPS, errors=False, shapes=shapes, targeted=True), "program")
    with _split_everything(threads):
        check_layouts(prog, "cpu")


@_settings(6)
@given(prog=programs(STEPS, errors=False, targeted=True))
def test_programs_on_numpy_give_the_same_bits_in_every_layout(prog):
    check_layouts(prog, "numpy")


# -- thread counts on narrow floats --------------------------------------------------------------
NARROW = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
          "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def check_narrow_thread_counts(prog: RandomProgram, dtype: np.dtype):
    assume(not prog.expect_error)
    note(f"random_program.py ({dtype.name} inputs from default_rng({prog.seed})):\n{prog}")
    storages = [s.astype(dtype) for s in prog.storages()]
    outcomes = []
    for threads in (1, 2, 3):
        with _split_everything(threads):
            cf = cc.compile(prog.build(), backend="cpu", sanitize=True)
            outcomes.append([_called(cf, prog, storages, "C") for _ in range(2)])
    assert outcomes[0] == outcomes[1], "1 and 2 threads differ"
    assert outcomes[0] == outcomes[2], "1 and 3 threads differ"


@pytest.mark.parametrize("dtype", sorted(NARROW))
@_settings(3)
@given(data=st.data())
def test_narrow_float_programs_on_cpu_give_the_same_bits_for_any_thread_count(dtype, data):
    prog = data.draw(programs(STEPS, errors=False, shapes="long", targeted=True), "program")
    check_narrow_thread_counts(prog, NARROW[dtype])


@pytest.mark.slow
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@pytest.mark.parametrize("dtype", sorted(NARROW))
@_settings(20)
@given(data=st.data())
def test_narrow_float_programs_on_cpu_give_the_same_bits_for_any_thread_count_sweep(
        dtype, shapes, data):
    prog = data.draw(programs(STEPS, errors=False, shapes=shapes, targeted=True), "program")
    check_narrow_thread_counts(prog, NARROW[dtype])


# -- two threads at once, each in its own layout -------------------------------------------------
def check_concurrent_layouts(prog: RandomProgram, backend: str, calls: int = 3):
    assume(not prog.expect_error)
    note(f"random_program.py (inputs: default_rng({prog.seed}).standard_normal):\n{prog}")
    cf = cc.compile(prog.build(), backend=backend, sanitize=True)
    kinds = ["C", "strided"]
    data = [[s + 0.125 * i for s in prog.storages()] for i in range(2)]
    serial = [[_called(cf, prog, d, k) for _ in range(calls)] for d, k in zip(data, kinds)]
    barrier = threading.Barrier(2)
    got: list = [None, None]

    def work(i):
        barrier.wait()
        got[i] = [_called(cf, prog, data[i], kinds[i]) for _ in range(calls)]
    workers = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    for i in range(2):
        assert got[i] is not None, f"thread {i} raised (see its traceback above)"
        for c in range(calls):
            assert got[i][c] == serial[i][c], f"thread {i}, call {c}: differs from serial"


@_settings(4)
@given(prog=programs(STEPS, errors=False, targeted=True))
def test_programs_on_cpu_called_from_two_threads_in_two_layouts(prog):
    check_concurrent_layouts(prog, "cpu")


@pytest.mark.slow
@_settings(30)
@given(prog=programs(STEPS, errors=False, targeted=True))
def test_programs_on_cpu_called_from_two_threads_in_two_layouts_sweep(prog):
    check_concurrent_layouts(prog, "cpu")


# -- memory budgets on the cpu backend -----------------------------------------------------------
def check_budget(prog: RandomProgram, pick: float, backend: str):
    assume(not prog.expect_error)
    note(f"random_program.py (inputs: default_rng({prog.seed}).standard_normal):\n{prog}")
    saved = budget_pass.MIN_BYTES
    budget_pass.MIN_BYTES = 1  # the values are small: every one is a candidate
    try:
        fn = prog.build()
        search = cc.compile(fn, backend=backend).lower(*prog.arrays()).plan.budget_search
        lo, hi = search.lowest().peak, search.zero.peak
        budget = lo + int(pick * (hi - lo))
        note(f"budget {budget} B in [{lo}, {hi}]")
        want = cc.compile(fn, backend=backend, sanitize=True, recompute="off", schedule="off")
        got = cc.compile(fn, backend=backend, sanitize=True, memory_budget=budget)
        storages = prog.storages()
        w = [_called(want, prog, storages, "C") for _ in range(2)]
        g = [_called(got, prog, storages, "C") for _ in range(2)]
        assert g == w, f"memory_budget={budget}: values differ from the unbudgeted program"
    finally:
        budget_pass.MIN_BYTES = saved


# Longer programs whose every value is in the loss, a dropout in a quarter of the steps: a
# quarter of them have room between the least peak and the plan without recomputation (at
# STEPS steps, one in twenty) and most regenerate random numbers.
BUDGET_PROGRAMS = {"backward": True, "errors": False, "targeted": True, "whole_loss": True,
                   "dropouts": True}


@CPU_THREADS
@_settings(2)
@given(prog=programs(STEPS + 6, **BUDGET_PROGRAMS), pick=st.floats(0.0, 1.0))
def test_training_programs_on_cpu_under_a_random_budget_give_the_unbudgeted_bits(
        prog, pick, threads):
    with _split_everything(threads):
        check_budget(prog, pick, "cpu")


@pytest.mark.slow
@CPU_THREADS
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@_settings(20)
@given(data=st.data(), pick=st.floats(0.0, 1.0))
def test_training_programs_on_cpu_under_a_random_budget_give_the_unbudgeted_bits_sweep(
        shapes, data, pick, threads):
    prog = data.draw(programs(STEPS + 6, shapes=shapes, **BUDGET_PROGRAMS), "program")
    with _split_everything(threads):
        check_budget(prog, pick, "cpu")


# -- regressions: minimal programs found by the properties above ----------------------------------
def _overlapping_rows(s):
    def program(a, e):
        a.add_(1.0)  # seen through e's rows 0 and 1 (a's rows 1 and 2), as in eager NumPy
        return e * 2.0
    a, e = s[0:3], s[1:4]
    want_s = s.copy()
    want_s[0:3] += 1.0
    return program, (a, e), want_s[1:4] * 2.0, want_s


@pytest.mark.usefixtures("each_backend")
def test_overlapping_rows_of_a_fortran_ordered_array_are_views_of_one_storage():
    # Found by test_programs_on_cpu_give_the_same_bits_in_every_layout: two overlapping row
    # slices of a Fortran-ordered array were refused ("share memory, but not as views ... of
    # one array") since only C-contiguous owners were tried; the owner's transpose is one.
    s = np.array(np.random.default_rng(0).standard_normal((4, 4)), order="F")
    program, args, want, want_s = _overlapping_rows(s)
    np.testing.assert_array_equal(cc.compile(program)(*args), want)
    np.testing.assert_array_equal(s, want_s)


@pytest.mark.usefixtures("each_backend")
def test_overlapping_rows_of_an_array_at_an_odd_offset_of_its_buffer_are_views_of_one_storage():
    # Found by the same property: the rows of `raw[1:17].reshape(4, 4)` cross the grid that
    # the owner `raw` was cut into (rows of 4 from element 0), so no candidate storage held
    # `s[0:3]` and `s[1:4]` as views; the grid now also starts at the members' lowest element.
    raw = np.zeros(20)
    s = raw[1:17].reshape(4, 4)
    s[...] = np.random.default_rng(0).standard_normal((4, 4))
    before = raw.copy()
    program, args, want, want_s = _overlapping_rows(s)
    np.testing.assert_array_equal(cc.compile(program)(*args), want)
    np.testing.assert_array_equal(s, want_s)
    assert raw[0] == before[0] and (raw[17:] == before[17:]).all()  # nothing around s written


def test_a_sum_over_aliased_fortran_arguments_has_the_bits_of_the_c_layout():
    # Found by test_programs_on_cpu_give_the_same_bits_in_every_layout (on cpu the program
    # with gelu, `a[...] = a` and a write through `b.flatten()` of the "row" alias layout, with
    # the "strided" and "F" layouts, differs in the same way); a sum with no aliasing is
    # bit-identical in every layout (the arguments are read in C order).
    def program(a, b):
        a[...] = a
        return a.sum()

    x = np.random.default_rng(29012).standard_normal((3, 4))
    cf = cc.compile(program, backend="numpy")
    c, f = x.copy(), np.array(x, order="F")
    assert cf(c, c[1]).tobytes() == cf(f, f[1]).tobytes()


# -- exactly rounded programs: the cpu backend against the numpy backend, bit for bit --------------
EXACT_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
                "bfloat16": np.dtype(ml_dtypes.bfloat16), "float64": np.dtype(np.float64),
                "int8": np.dtype(np.int8), "uint8": np.dtype(np.uint8),
                "int16": np.dtype(np.int16), "int32": np.dtype(np.int32)}


def _in_dtype(s: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":  # small integers, negative ones wrapping for uint8 (as NumPy casts)
        return np.round(s * 20).astype(np.int64).astype(dtype)
    return s.astype(dtype)


def _bits(outcome):
    """An outcome with every NaN's bits made one (a NaN's payload is not pinned)."""
    if outcome[0] != "ok":
        return outcome
    def norm(dt, raw):
        a = np.frombuffer(raw, dt).copy()
        if dt.kind == "f" or dt == np.dtype(ml_dtypes.bfloat16):
            wide = a.astype(np.float64)
            a[np.isnan(wide)] = np.nan
        return a.tobytes()
    outs = [(o[0], o[1], o[2], norm(np.dtype(o[1]), o[3])) if o[0] == "array" else o
            for o in outcome[1]]
    return ("ok", outs, outcome[2])


def _with_specials(s: np.ndarray, seed: int) -> np.ndarray:
    """`s` with about a quarter of its elements NaN, +-inf, -0.0 or +0.0, and some ties."""
    rng = np.random.default_rng(seed)
    out = s.copy().reshape(-1)
    picks = rng.random(out.size) < 0.25
    out[picks] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5], int(picks.sum()))
    return out.reshape(s.shape)


def check_exact(prog: RandomProgram, dtype: np.dtype, threads: int, specials=False):
    note(f"random_program.py ({dtype.name} inputs from default_rng({prog.seed})"
         f"{', with NaN, inf and signed zeros' if specials else ''}):\n{prog}")
    storages = [_in_dtype(_with_specials(s, prog.seed + k) if specials else s, dtype)
                for k, s in enumerate(prog.storages())]
    fn = prog.build()
    want = _bits(_called(cc.compile(fn, backend="numpy", sanitize=True), prog, storages, "C"))
    with _split_everything(threads):
        cf = cc.compile(fn, backend="cpu", sanitize=True)
        for kind in ("C", "C", "offset" if prog.alias else "strided"):
            got = _bits(_called(cf, prog, storages, kind))
            assert got == want, f"cpu ({kind} layout, {threads} threads) differs from numpy"


@CPU_THREADS
@pytest.mark.parametrize("dtype", sorted(EXACT_DTYPES))
@_settings(2)
@given(prog=programs(STEPS, exact=True))
def test_exactly_rounded_programs_on_cpu_give_the_numpy_backends_bits(prog, dtype, threads):
    check_exact(prog, EXACT_DTYPES[dtype], threads)


FLOATS = sorted(d for d in EXACT_DTYPES if d.startswith(("float", "bfloat")))


@CPU_THREADS
@pytest.mark.parametrize("dtype", FLOATS)
@_settings(2)
@given(prog=programs(STEPS, exact=True))
def test_exactly_rounded_programs_on_nan_inf_and_signed_zeros_give_the_numpy_backends_bits(
        prog, dtype, threads):
    check_exact(prog, EXACT_DTYPES[dtype], threads, specials=True)


@pytest.mark.slow
@CPU_THREADS
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@pytest.mark.parametrize("dtype", FLOATS)
@_settings(20)
@given(data=st.data())
def test_exactly_rounded_programs_on_nan_inf_and_signed_zeros_give_the_numpy_bits_sweep(
        shapes, dtype, data, threads):
    prog = data.draw(programs(STEPS, shapes=shapes, exact=True), "program")
    check_exact(prog, EXACT_DTYPES[dtype], threads, specials=True)


@pytest.mark.slow
@CPU_THREADS
@pytest.mark.parametrize("shapes", SHAPES + ["default"])
@pytest.mark.parametrize("dtype", sorted(EXACT_DTYPES))
@_settings(20)
@given(data=st.data())
def test_exactly_rounded_programs_on_cpu_give_the_numpy_backends_bits_sweep(
        shapes, dtype, data, threads):
    prog = data.draw(programs(STEPS, shapes=shapes, exact=True), "program")
    check_exact(prog, EXACT_DTYPES[dtype], threads)


@pytest.mark.usefixtures("each_backend")
def test_a_write_through_a_reshape_of_an_aliased_strided_argument_reaches_the_caller():
    # Found by test_exactly_rounded_programs_on_cpu_give_the_numpy_backends_bits (the "overlap"
    # alias layout laid out strided: `a.reshape([-1, 4, 1]).reshape([6, -1, 1]).add_(...)`).
    def program(a, e):
        a.reshape([12]).add_(100.0)
        return e * 1.0

    x = np.random.default_rng(0).standard_normal((4, 4))
    big = np.zeros((4, 9))
    s = big[:, 1::2]  # the caller's storage: every other column of a bigger array
    s[...] = x
    out = cc.compile(program)(s[0:3], s[1:4])
    want = x.copy()
    want[0:3] += 100.0
    np.testing.assert_array_equal(s, want)
    np.testing.assert_array_equal(out, want[1:4])


# Writes through chains of views of arguments that share memory, or of one strided argument:
# (name, the traced write, its eager NumPy twin). The twin run on a C-ordered storage is the
# oracle for every layout: a reshape that can't be a view of a C-ordered member copies (the
# write is lost in every layout), every other one writes through.
VIEW_CHAINS = [
    ("reshape", "a.reshape([12]).add_(100.0)", "w = a.reshape(12); w += 100.0"),
    ("flatten, slice", "a.flatten()[2:9].scale_(3.0)", "a.reshape(-1)[2:9] *= 3.0"),
    ("slice, reshape", "a[1:].reshape([2, 2, 2]).subtract_(1.5)",
     "w = a[1:].reshape(2, 2, 2); w -= 1.5"),
    ("reshape, transpose, stepped slice", "a.reshape([4, 3]).t()[1:, ::2].multiply_(-2.0)",
     "a.reshape(4, 3).T[1:, ::2] *= -2.0"),
    ("set-item through a reshape", "a.reshape([6, 2])[::2] = 7.0",
     "w = a.reshape(6, 2); w[::2] = 7.0"),
    ("transpose, reshape (a copy)", "a.transpose([1, 0]).reshape([2, 6]).add_(9.0)",
     "w = a.T.reshape(2, 6); w += 9.0"),
    ("columns, reshape (a copy)", "a[:, 1:3].reshape([6]).add_(5.0)",
     "w = a[:, 1:3].reshape(6); w += 5.0"),
]
# How the caller passes the storage `s` (4 x 4): as two overlapping arguments, or alone; and
# the storage's transposition that the twin runs on (C-ordered), where the members run over
# `s` transposed (each argument is traced as a row-major array, as an argument alone is).
VIEW_ALIASES = {
    "overlapping rows": (lambda s: (s[0:3], s[1:4]), False),
    "overlapping columns, transposed": (lambda s: (s[:, 0:3].T, s[:, 1:4].T), True),
    "unaliased": (lambda s: (s[0:3],), False),
}


def _chain_program(write: str, n_args: int):
    params = "a, e" if n_args == 2 else "a"
    last = params[-1]
    src = f"def program({params}):\n    {write}\n    return {last} * 1.0, {last}.sum()\n"
    scope: dict = {}
    exec(compile(src, "chain_program.py", "exec"), scope)
    return scope["program"]


def _chain_twin(x: np.ndarray, twin: str, alias: str):
    """(the storage after the write, the outputs) of the NumPy twin on a C-ordered storage."""
    args_of, transposed = VIEW_ALIASES[alias]
    t = np.array(x.T if transposed else x, order="C")  # (a copy: x stays as it was)
    args = (t[0:3], t[1:4]) if transposed else args_of(t)
    exec(twin, {"a": args[0]})
    return (t.T if transposed else t), (args[-1] * 1.0, args[-1].sum())


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("alias", sorted(VIEW_ALIASES))
@pytest.mark.parametrize("name,write,twin", VIEW_CHAINS, ids=[c[0] for c in VIEW_CHAINS])
def test_writes_through_view_chains_of_aliased_or_strided_arguments_act_as_in_the_c_layout(
        name, write, twin, alias):
    x = np.random.default_rng(7).standard_normal((4, 4))
    want_s, want = _chain_twin(x, twin, alias)
    args_of = VIEW_ALIASES[alias][0]
    fn = cc.compile(_chain_program(write, len(args_of(x))))
    first_total = None
    for kind in ("C", "strided", "F", "reversed", "offset"):
        laid = Laid(x, kind)
        for call in range(2):
            s = laid.view
            s[...] = x
            out, total = fn(*args_of(s))
            what = f"{kind} layout, call {call}"
            assert np.ascontiguousarray(s).tobytes() == \
                np.ascontiguousarray(want_s).tobytes(), f"{what}: the caller's storage"
            assert out.tobytes() == np.ascontiguousarray(want[0]).tobytes(), f"{what}: output"
            # (a backend's sum may add in another order than NumPy's: the bits of the first
            # layout's, and close to NumPy's)
            first_total = total.tobytes() if first_total is None else first_total
            assert total.tobytes() == first_total, f"{what}: the sum's bits"
            np.testing.assert_allclose(total, want[1], rtol=1e-14, err_msg=f"{what}: sum")
            assert laid.untouched_around(), f"{what}: wrote outside the argument"


def _two_groups(a, e, b, d):
    a.reshape([12]).add_(1.0)
    d.t().reshape([12]).scale_(2.0)
    return e * 2.0 + b.sum(), b.sum(axis=0) * 1.0


@pytest.mark.usefixtures("each_backend")
def test_two_alias_groups_in_two_layouts_act_as_in_the_c_layout():
    # Two storages, each shared by two arguments (rows; transposed columns), one strided and
    # the other Fortran-ordered, and the other way round: each group is bound in its own
    # members' order, so every layout gives the C layout's bits.
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    fn = cc.compile(_two_groups)

    def run(s1, s2):
        out = fn(s1[0:3], s1[1:4], s2[:, 0:3].T, s2[:, 1:4].T)
        return [o.tobytes() for o in out], [np.ascontiguousarray(s).tobytes() for s in (s1, s2)]
    want = run(x.copy(), y.copy())
    for kinds in (("strided", "F"), ("F", "strided"), ("reversed", "offset")):
        laid = [Laid(x, kinds[0]), Laid(y, kinds[1])]
        assert run(laid[0].view, laid[1].view) == want, kinds
        assert all(lay.untouched_around() for lay in laid), kinds


@pytest.mark.usefixtures("each_backend")
def test_a_column_of_a_zero_row_intermediate_is_returned_empty():
    # Found by test_programs_on_cpu_give_the_same_bits_in_every_layout (shapes="empty"): on
    # the cpu backend the output `(a / 1.5)[:, -3]` of a [0, 4] argument was placed 1 element
    # into a zero-byte buffer, and building its ndarray raised numpy's ValueError ("strides is
    # incompatible with shape of requested array and size of buffer") after the run.
    def program(a, c):
        return (a / 1.5)[:, -3], c * 2.0

    a, c = np.zeros((0, 4)), np.ones((2, 1, 4))
    for sanitize in (True, False):  # (the general path, and the cpu backend's native one)
        cf = cc.compile(program, sanitize=sanitize)
        for _ in range(2):
            empty, doubled = cf(a, c)
            assert empty.shape == (0,) and empty.dtype == np.float64
            np.testing.assert_array_equal(doubled, c * 2.0)


# -- hard aliasing: writes through view chains of arguments that share memory ------------------
# (`programs(hard_aliasing=True)`: every program's arguments share memory, overlapping columns,
# reversed members, three members, a stride-0 broadcast; in-place ops through chains of views
# of one member reading the other), checked as above on numpy, on cpu at 1 and 2 threads, in
# every layout, and with backward (finite differences of the gradients); the gpu harness runs
# a sample in tests/passes/test_random_gpu_harness.py.
HARD = {"hard_aliasing": True, "targeted": True}


@_settings(5)
@given(prog=programs(STEPS, **HARD))
def test_hard_aliasing_programs_match_reference_and_numpy(prog):
    check_program(prog)


@CPU_THREADS
@_settings(2)
@given(prog=programs(STEPS, **HARD))
def test_hard_aliasing_programs_on_cpu_match_reference(prog, threads):
    with _split_everything(threads):
        check_program(prog, backend="cpu")


@_settings(3)
@given(prog=programs(STEPS, errors=False, **HARD))
def test_hard_aliasing_programs_on_numpy_give_the_same_bits_in_every_layout(prog):
    check_layouts(prog, "numpy")


@CPU_THREADS
@_settings(2)
@given(prog=programs(STEPS, errors=False, **HARD))
def test_hard_aliasing_programs_on_cpu_give_the_same_bits_in_every_layout(prog, threads):
    with _split_everything(threads):
        check_layouts(prog, "cpu")


@_settings(3)
@given(prog=programs(8, backward=True, errors=False, detach=False, whole_loss=True, **HARD))
def test_hard_aliasing_training_program_gradients_match_finite_differences(prog):
    check_gradients(prog)


@_settings(2)
@given(prog=programs(STEPS, errors=False, **HARD))
def test_hard_aliasing_programs_on_cpu_called_from_two_threads_in_two_layouts(prog):
    check_concurrent_layouts(prog, "cpu")


@CPU_THREADS
@pytest.mark.parametrize("dtype", ["float32", "int16"])
@_settings(1)
@given(prog=programs(STEPS, exact=True, **HARD))
def test_hard_aliasing_exactly_rounded_programs_on_cpu_give_the_numpy_backends_bits(
        prog, dtype, threads):
    check_exact(prog, EXACT_DTYPES[dtype], threads)


@pytest.mark.slow
@_settings(100)
@given(prog=programs(STEPS, **HARD))
def test_hard_aliasing_programs_match_reference_and_numpy_sweep(prog):
    check_program(prog)


@pytest.mark.slow
@CPU_THREADS
@_settings(40)
@given(prog=programs(STEPS, **HARD))
def test_hard_aliasing_programs_on_cpu_match_reference_sweep(prog, threads):
    with _split_everything(threads):
        check_program(prog, backend="cpu")


@pytest.mark.slow
@_settings(60)
@given(prog=programs(STEPS, errors=False, **HARD))
def test_hard_aliasing_programs_on_numpy_give_the_same_bits_in_every_layout_sweep(prog):
    check_layouts(prog, "numpy")


@pytest.mark.slow
@CPU_THREADS
@_settings(30)
@given(prog=programs(STEPS, errors=False, **HARD))
def test_hard_aliasing_programs_on_cpu_give_the_same_bits_in_every_layout_sweep(prog, threads):
    with _split_everything(threads):
        check_layouts(prog, "cpu")


@pytest.mark.slow
@_settings(40)
@given(prog=programs(8, backward=True, errors=False, detach=False, whole_loss=True, **HARD))
def test_hard_aliasing_training_program_gradients_match_finite_differences_sweep(prog):
    check_gradients(prog)


@pytest.mark.slow
@_settings(30)
@given(prog=programs(STEPS, errors=False, **HARD))
def test_hard_aliasing_programs_on_cpu_called_from_two_threads_in_two_layouts_sweep(prog):
    check_concurrent_layouts(prog, "cpu")


@pytest.mark.slow
@CPU_THREADS
@pytest.mark.parametrize("dtype", sorted(EXACT_DTYPES))
@_settings(15)
@given(prog=programs(STEPS, exact=True, **HARD))
def test_hard_aliasing_exactly_rounded_programs_on_cpu_give_the_numpy_bits_sweep(
        prog, dtype, threads):
    check_exact(prog, EXACT_DTYPES[dtype], threads)


@pytest.mark.slow
@CPU_THREADS
@_settings(15)
@given(prog=programs(STEPS + 6, **BUDGET_PROGRAMS, hard_aliasing=True), pick=st.floats(0.0, 1.0))
def test_hard_aliasing_training_programs_on_cpu_under_a_random_budget_sweep(
        prog, pick, threads):
    with _split_everything(threads):
        check_budget(prog, pick, "cpu")
