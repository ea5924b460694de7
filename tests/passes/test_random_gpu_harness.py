"""The targeted random programs (tests/passes/program_gen.py, `targeted=True`) on the gpu
backend: its generated CUDA C run on the host through the CPU fiber harness (tests/gpu/harness),
under both thread schedules, against the numpy backend, for each shape set: rows longer than a
warp and a block (`long`: reductions, softmax, layer_norm, sort and arg-reductions split across
threads), size-1 axes and a zero-size argument. A fixed sample (the first programs of a
derandomized hypothesis run per shape set), built in one batch; RANDOM_GPU_PROGRAMS=N per set.
Then the regressions the random programs found on the host backends, on the gpu code: a
zero-size output view, and writes through view chains of arguments that share memory.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from program_gen import programs

import compiler as cc
from tests.gpu import harness
from tests.gpu.test_harness_programs import check

pytest.importorskip("runtime.gpu.executable")
pytestmark = pytest.mark.skipif(not harness.available(), reason="needs g++ on a POSIX host")

PER_SET = int(os.environ.get("RANDOM_GPU_PROGRAMS", "2"))
SETS = ["long", "ones", "empty"]


def _sample(shapes, n):
    out = []

    @settings(max_examples=n, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs(errors=False, shapes=shapes, targeted=True))
    def collect(prog):
        out.append(prog)
    collect()
    return out[:n]


@pytest.fixture(scope="module")
def built():
    progs = []
    for shapes in SETS:
        for rp in _sample(shapes, PER_SET):
            fn = rp.build()
            progs.append((shapes, rp, fn, cc.compile(fn, backend="gpu").lower(*rp.arrays())))
    harness.prebuild([p._exec.module for *_, p in progs])
    return progs


def test_targeted_random_programs_on_the_gpu_harness_match_the_numpy_backend(built):
    assert len(built) == PER_SET * len(SETS)
    failures = []
    for shapes, rp, fn, prog in built:
        try:
            with np.errstate(all="ignore"):
                check(prog, cc.compile(fn, backend="numpy"), rp.arrays,
                      f"random program ({shapes})", rtol=1e-9)
        except (AssertionError, harness.HarnessError) as e:
            failures.append(f"{shapes}:\n{rp}\n{str(e)[:800]}")
    assert not failures, f"{len(failures)} of {len(built)} differ:\n" + "\n\n".join(failures)


# Exactly rounded programs (`programs(exact=True)`) in each dtype: the gpu backend's fused
# kernels (16-bit values in float32 registers, rounded per node; literal constants in the
# source) give the numpy backend's bits.
EXACT_PER_DTYPE = int(os.environ.get("RANDOM_GPU_EXACT_PROGRAMS", "1"))


def _exact_args(rp, dtype, specials=False):
    """Fresh arguments in `dtype` (with NaN, infinities, signed zeros and ties: `specials`)."""
    from test_random_targeted import _in_dtype, _with_specials
    return lambda: rp.arguments([
        _in_dtype(_with_specials(s, rp.seed + k) if specials else s, dtype)
        for k, s in enumerate(rp.storages())])


@pytest.fixture(scope="module")
def built_exact():
    from test_random_targeted import EXACT_DTYPES
    progs = []
    cases = [(name, dtype, False) for name, dtype in sorted(EXACT_DTYPES.items())] + \
        [(name + " with NaN and inf", EXACT_DTYPES[name], True)
         for name in ("float32", "float16", "bfloat16")]
    for name, dtype, specials in cases:
        for rp in _sample_exact(EXACT_PER_DTYPE, name):
            fn = rp.build()
            args = _exact_args(rp, dtype, specials)
            try:
                prog = cc.compile(fn, backend="gpu").lower(*args())
            except cc.CompilerError:
                continue  # refused in this dtype (the numpy backend refuses it alike)
            progs.append((name, rp, fn, args, prog))
    harness.prebuild([p._exec.module for *_, p in progs])
    return progs


def _sample_exact(n, salt):
    out = []

    @settings(max_examples=n, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs(shapes="long" if salt in ("float16", "int8") else "default", exact=True))
    def collect(prog):
        out.append(prog)
    collect()
    return out[:n]


def test_exactly_rounded_random_programs_on_the_gpu_harness_give_the_numpy_bits(built_exact):
    failures = []
    for name, rp, fn, args, prog in built_exact:
        try:
            check(prog, cc.compile(fn, backend="numpy"), args, f"exact program ({name})",
                  rtol=0.0)
        except (AssertionError, harness.HarnessError) as e:
            failures.append(f"{name}:\n{rp}\n{str(e)[:800]}")
    assert not failures, f"{len(failures)} of {len(built_exact)} differ:\n" + \
        "\n\n".join(failures)


# Hard aliasing (`programs(hard_aliasing=True)`): writes through view chains of arguments that
# share memory, on the gpu code, against the numpy backend (fresh arguments for each run: a
# copy would not share), under both schedules; RANDOM_GPU_ALIAS_PROGRAMS=N of them.
ALIAS_PROGRAMS = int(os.environ.get("RANDOM_GPU_ALIAS_PROGRAMS", "4"))


@pytest.fixture(scope="module")
def built_aliasing():
    out = []

    @settings(max_examples=ALIAS_PROGRAMS, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs(errors=False, hard_aliasing=True, targeted=True))
    def collect(rp):
        out.append(rp)
    collect()
    progs = []
    for rp in out[:ALIAS_PROGRAMS]:
        fn = rp.build()
        progs.append((rp, fn, cc.compile(fn, backend="gpu").lower(*rp.arrays())))
    harness.prebuild([p._exec.module for *_, p in progs])
    return progs


def test_hard_aliasing_random_programs_on_the_gpu_harness_match_the_numpy_backend(
        built_aliasing):
    failures = []
    for rp, fn, prog in built_aliasing:
        try:
            with np.errstate(all="ignore"):
                check(prog, cc.compile(fn, backend="numpy"), rp.arrays,
                      f"random program ({rp.alias})", rtol=1e-9)
        except (AssertionError, harness.HarnessError) as e:
            failures.append(f"{rp.alias}:\n{rp}\n{str(e)[:800]}")
    assert not failures, f"{len(failures)} of {len(built_aliasing)} differ:\n" + \
        "\n\n".join(failures)


# -- regressions the random programs found on the host backends, on the gpu code ------------------
def _zero_row_column(a, c):
    return (a / 1.5)[:, -3], c * 2.0


def test_a_column_of_a_zero_row_intermediate_is_returned_empty_on_the_harness():
    # test_random_targeted.py::test_a_column_of_a_zero_row_intermediate_is_returned_empty on
    # the gpu code: the output is placed 1 element into its zero-byte buffer, and building
    # its host array there raised numpy's ValueError after the run.
    a, c = np.zeros((0, 4)), np.ones((2, 1, 4))
    prog = cc.compile(_zero_row_column, backend="gpu").lower(a, c)
    for schedule in harness.SCHEDULES:
        empty, doubled = harness.on_host(prog, schedule)(a, c)
        assert empty.shape == (0,) and empty.dtype == np.float64
        np.testing.assert_array_equal(doubled, c * 2.0)


class _DevicePointer:
    """CuPy's MemoryPointer over host bytes: `+` offsets it."""

    def __init__(self, raw: np.ndarray, offset: int = 0):
        self.raw, self.offset = raw, offset

    def __add__(self, n):
        return _DevicePointer(self.raw, self.offset + int(n))


class _DeviceArray:
    """A device array of the fake CuPy below: its bytes on the host; `get` as CuPy's."""

    def __init__(self, a: np.ndarray):
        self.a = a
        self.data = _DevicePointer(a.reshape(-1).view(np.uint8))

    def get(self, out=None):
        if out is None:
            return self.a.copy()
        np.copyto(out, self.a)
        return out


def _bounded_ndarray(shape, dtype, memptr, strides):
    # (np.ndarray refuses a view that reaches past its buffer: a kernel argument pointing
    # outside its allocation, which CuPy itself doesn't check)
    return _DeviceArray(np.ndarray(shape, dtype, memptr.raw, memptr.offset, strides))


def test_a_zero_size_output_view_on_the_device_lies_inside_its_buffer():
    # GpuExecutable._device_view built the same view at its planned offset, past the end of
    # the output's buffer (1 byte, as `_bind` allocates a zero-byte one), before the port of
    # the cpu executable's rule; checked through `_copy_back` with a CuPy that bounds-checks.
    import types
    a, c = np.zeros((0, 4)), np.ones((2, 1, 4))
    exe = cc.compile(_zero_row_column, backend="gpu").lower(a, c)._exec
    fake = types.SimpleNamespace(ndarray=_bounded_ndarray)
    device = {("output", k): _DeviceArray(np.zeros(max(b.size, 1), np.uint8))
              for k, b in enumerate(exe._output_buffers)}
    device[("output", 1)].a[:] = (c * 2.0).reshape(-1).view(np.uint8)
    outs, muts = exe._copy_back(fake, lambda slot: device[slot], [a, c])
    assert outs[0].shape == (0,) and outs[0].dtype == np.float64 and muts == {}
    np.testing.assert_array_equal(outs[1], c * 2.0)


def _view_chain_cases():
    from test_random_targeted import VIEW_ALIASES, VIEW_CHAINS, _chain_program
    writes = [c for c in VIEW_CHAINS if "copy" not in c[0]]  # (the ones that write through)
    return [(name, write, twin, alias, _chain_program(write, 2))
            for name, write, twin in writes for alias in sorted(VIEW_ALIASES)
            if alias != "unaliased"]


CHAIN_LAYOUTS = ("C", "strided", "F", "reversed")


@pytest.fixture(scope="module")
def view_chains():
    from test_random_targeted import VIEW_ALIASES, Laid
    x = np.random.default_rng(7).standard_normal((4, 4))
    cases = []
    for case in _view_chain_cases():
        args_of, fn = VIEW_ALIASES[case[3]][0], case[-1]
        progs = {kind: cc.compile(fn, backend="gpu").lower(*args_of(Laid(x, kind).view))
                 for kind in CHAIN_LAYOUTS}
        cases.append((*case, progs))
    harness.prebuild([case[-1]["C"]._exec.module for case in cases])
    return x, cases


def test_writes_through_view_chains_of_aliased_arguments_on_the_harness_act_as_in_the_c_layout(
        view_chains):
    # test_random_targeted.py::test_writes_through_view_chains_of_aliased_or_strided_arguments_
    # act_as_in_the_c_layout on the gpu code: bound in its members' order, the storage of every
    # layout gives the C layout's CUDA C, which runs as the NumPy twin on a C-ordered storage.
    from test_random_targeted import VIEW_ALIASES, Laid, _chain_twin
    x, cases = view_chains
    for name, write, twin, alias, fn, progs in cases:
        want_s, want = _chain_twin(x, twin, alias)
        for kind in CHAIN_LAYOUTS:
            what = f"{name}, {alias}, {kind} layout"
            assert progs[kind].source == progs["C"].source, f"{what}: another program"
            for schedule in harness.SCHEDULES:
                laid = Laid(x, kind)
                s = laid.view
                out, total = harness.on_host(progs[kind], schedule)(
                    *VIEW_ALIASES[alias][0](s))
                np.testing.assert_array_equal(s, want_s, err_msg=f"{what}, {schedule}: storage")
                np.testing.assert_array_equal(out, want[0], err_msg=f"{what}, {schedule}")
                np.testing.assert_allclose(total, want[1], rtol=1e-14, err_msg=f"{what}: sum")
                assert laid.untouched_around(), f"{what}: wrote outside the arguments"
