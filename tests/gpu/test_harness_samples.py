"""The sample database's `always` samples (tests/opdb/samples.py: signed zeros, and reductions
over rows longer than a warp and a block) through the gpu backend's generated CUDA C, run on
the host by the fiber harness under both thread schedules, checked as test_opdb checks every
backend: against the numpy backend, with the sample's tolerance class and the sign of every
zero. (tests/gpu/test_harness_programs.py runs only the first sample of each op.)

The long rows put a row's extreme in lanes 16-31, in other warps and past the block's first
pass: a block reduction that drops any of those (a warp shuffle's offset halved) is caught,
which rows of at most 12 elements never showed.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import compiler as cc
from tests.gpu import harness

pytest.importorskip("runtime.gpu.executable",
                    reason="the CUDA C emitter (runtime/gpu/emitter.py) is not here yet")
pytestmark = pytest.mark.skipif(not harness.available(), reason="needs g++ on a POSIX host")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _sub in (os.path.join("tests", "opdb"), os.path.join("tests", "passes")):
    if os.path.join(ROOT, _sub) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, _sub))

import test_opdb as opdb  # noqa: E402  (its samples module, its comparison)

SAMPLES = [s for s in opdb.db.SAMPLES if s.always]


def _programs():
    out = []
    for sample in SAMPLES:
        prog = cc.compile(opdb._traced(sample, {}), backend="gpu").lower(
            *opdb._copies(sample.args))
        out.append((sample, prog))
    return out


@pytest.fixture(scope="module")
def programs():
    built = _programs()
    harness.prebuild([p._exec.module for _, p in built])
    return built


def check_on_host(sample, prog, module=None):
    """The sample through the harness under each schedule: values as test_opdb requires of a
    backend, and the caller's arrays (written only by a `_` form) as well."""
    want = opdb.expected(sample, "gpu")
    terms = sample.terms(*opdb._copies(sample.args)) if sample.terms else None
    for schedule in harness.SCHEDULES:
        args = opdb._copies(sample.args)
        got = harness.on_host(prog, schedule, module)(*args)
        opdb.assert_matches(got, want, sample.tol, terms, f"output ({schedule})")
        for i, (before, after) in enumerate(zip(sample.args, args)):
            if not isinstance(before, np.ndarray):
                continue
            if i == sample.writes:
                opdb.assert_matches(after, want, sample.tol, terms, "the caller's array")
            else:
                assert opdb._same_data(after, before), f"argument {i} was written"


def test_the_samples_are_there():
    labels = {s.label for s in SAMPLES}
    assert {"|signed-zero", "|long"} <= labels, labels
    long_rows = [s for s in SAMPLES if s.label == "|long"]
    assert max(a.shape[-1] for s in long_rows for a in s.args) >= 1500
    assert {s.api.split(".")[-1] for s in long_rows} >= {
        "argmax", "argmin", "max", "min", "sum", "mean", "prod", "softmax", "log_softmax"}


def test_every_always_sample_matches_on_the_gpu_code(programs):
    failures = []
    for sample, prog in programs:
        try:
            check_on_host(sample, prog)
        except (AssertionError, harness.HarnessError) as e:
            failures.append(f"{sample.id}: {str(e)[:400]}")
    assert not failures, f"{len(failures)} of {len(programs)} samples differ:\n" + \
        "\n".join(failures)


def test_a_halved_first_shuffle_in_the_arg_reduction_is_caught(programs):
    """The gap these samples close: `block_arg`'s first shuffle offset halved (16 -> 8) drops
    lanes 16-31 of every warp. Some long-row arg-reduction sample must then fail."""
    from runtime.gpu.launch import GpuModule
    marker = "template <bool IsMax, typename T> __device__ long long block_arg("
    picked = [(s, p) for s, p in programs
              if s.label == "|long" and s.api.endswith(("argmax", "argmin"))]
    assert picked
    broken = []
    for sample, prog in picked:
        m = prog._exec.module
        start = m.source.index(marker)
        at = m.source.index("for (int s = 16;", start)
        src = m.source[:at] + "for (int s = 8;" + m.source[at + len("for (int s = 16;"):]
        broken.append((sample, prog, GpuModule(src, m.launches, m.arena_bytes,
                                               m.arena_alignment)))
    harness.prebuild([b for *_, b in broken])
    caught = 0
    for sample, prog, module in broken:
        try:
            check_on_host(sample, prog, module)
        except (AssertionError, harness.HarnessError):
            caught += 1
    assert caught, "no long-row sample noticed the halved shuffle"
