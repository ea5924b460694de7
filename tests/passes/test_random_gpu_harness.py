"""The targeted random programs (tests/passes/program_gen.py, `targeted=True`) on the gpu
backend: its generated CUDA C run on the host through the CPU fiber harness (tests/gpu/harness),
under both thread schedules, against the numpy backend, for each shape set: rows longer than a
warp and a block (`long`: reductions, softmax, layer_norm, sort and arg-reductions split across
threads), size-1 axes and a zero-size argument. A fixed sample (the first programs of a
derandomized hypothesis run per shape set), built in one batch; RANDOM_GPU_PROGRAMS=N per set.
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
