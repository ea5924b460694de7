"""The gpu backend's argsort (issue 24: sort, argsort and topk are built on it): the rendered
CUDA C compiles with NVRTC for every dtype and direction, and runs on the host through the
fiber harness under both thread schedules, giving the numpy backend's values (the op
database's samples of sort/argsort/topk, gradients included). A merge that takes the right
run's head on a tie (an unstable sort) is caught by them."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import compiler as cc
from runtime.gpu import nvrtc
from tests.gpu import harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _sub in (os.path.join("tests", "opdb"), os.path.join("tests", "passes")):
    if os.path.join(ROOT, _sub) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, _sub))

import test_opdb as opdb  # noqa: E402  (its samples module, its comparison)
from gradcheck import grad_program  # noqa: E402

needs_harness = pytest.mark.skipif(not harness.available(), reason="needs g++ on a POSIX host")
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")

APIS = ("Tensor.sort", "Tensor.argsort", "Tensor.topk", "cc.sort", "cc.argsort", "cc.topk")


def _picked():
    """The first sample of each (api, dtype, label) (a label is an edge: 0-d, zero-size,
    layouts, specials, long rows), plus every gradient sample."""
    seen, out = set(), []
    for s in opdb.db.SAMPLES:
        if s.api not in APIS:
            continue
        key = (s.api, tuple(a.dtype.name for a in s.args if isinstance(a, np.ndarray)),
               s.label, s.grad)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


SAMPLES = _picked()


@pytest.fixture(scope="module")
def programs():
    built = []
    for sample in SAMPLES:
        prog = cc.compile(opdb._traced(sample, {}), backend="gpu").lower(
            *opdb._copies(sample.args))
        built.append((sample, prog))
    harness.prebuild([p._exec.module for _, p in built])
    return built


def _check(sample, prog, module=None):
    want = opdb.expected(sample, "gpu")
    for schedule in harness.SCHEDULES:
        args = opdb._copies(sample.args)
        got = harness.on_host(prog, schedule, module)(*args)
        opdb.assert_matches(got, want, sample.tol, None, f"output ({schedule})")
        for before, after in zip(sample.args, args):
            if isinstance(before, np.ndarray):
                assert opdb._same_data(after, before), "an argument was written"


@needs_nvrtc
def test_argsort_compiles_to_ptx_for_every_dtype_and_direction():
    from runtime.gpu.emitter import BLOCK_PRELUDE
    from runtime.gpu.scalar import PRELUDE
    parts, kernels = [PRELUDE, BLOCK_PRELUDE], 0
    for k, (dtype, shape, axis, desc) in enumerate(
            [(d, s, a, desc) for d in (np.float32, np.float64, np.int32, np.int64, np.uint64)
             for s, a in (((5, 300), 1), ((8, 3), 0), ((), -1), ((1,), 0)) for desc in (0, 1)]):
        prog = cc.compile(lambda t, a=axis, d=desc: t.argsort(axis=a, descending=bool(d)),
                          backend="gpu").lower(np.zeros(shape, dtype))
        body = prog._exec.module.source.split(BLOCK_PRELUDE, 1)[1]
        assert "_argsort(" in body
        kernels += body.count("__global__")
        parts.append(body.replace("void k", f"void p{k}_k"))
    ptx = nvrtc.compile_ptx("\n".join(parts), "argsort.cu")
    assert ptx.count(".entry ") == kernels


@needs_harness
def test_the_samples_match_on_the_gpu_code(programs):
    # (the edges are there: layouts, specials, long rows, 0-d, every dtype)
    labels = {s.label for s in SAMPLES}
    assert {"", "|T", "|neg", "|special", "|long", "|0d"} <= labels, labels
    assert {a.dtype.name for s in SAMPLES for a in s.args if isinstance(a, np.ndarray)} >= {
        "float32", "float64", "int32", "int64"}
    failures = []
    for sample, prog in programs:
        if sample.grad:
            continue
        try:
            _check(sample, prog)
        except (AssertionError, harness.HarnessError) as e:
            failures.append(f"{sample.id}: {str(e)[:300]}")
    assert not failures, f"{len(failures)} of {len(programs)} differ:\n" + "\n".join(failures)


@needs_harness
def test_gradients_through_sort_and_topk_match_the_numpy_backend():
    picked = [s for s in SAMPLES if s.grad]
    assert picked
    for sample in picked:
        arrays = [np.asarray(a) for a in sample.args]
        wrt = list(range(len(arrays)))
        want = cc.compile(grad_program(sample.fn, wrt), backend="numpy")(*arrays)
        prog = cc.compile(grad_program(sample.fn, wrt), backend="gpu").lower(*arrays)
        for schedule in harness.SCHEDULES:
            got = harness.on_host(prog, schedule)(*[a.copy() for a in arrays])
            for g, w in zip(opdb_flat(got), opdb_flat(want)):
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=sample.id)


def opdb_flat(tree):
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in opdb_flat(t)]
    return [np.asarray(tree)]


@needs_harness
def test_an_unstable_merge_is_caught(programs):
    """Take the right run's head on a tie (`<=` for `<`): the result is still sorted but
    equal elements swap, which the samples with ties must notice."""
    from runtime.gpu.launch import GpuModule
    picked = [(s, p) for s, p in programs if s.api == "Tensor.argsort" and s.label == ""
              and "(a < b)" in p._exec.module.source]
    assert picked
    broken = []
    for sample, prog in picked:
        m = prog._exec.module
        src = m.source.replace("(a < b)", "(a <= b)")
        broken.append((sample, prog, GpuModule(src, m.launches, m.arena_bytes,
                                               m.arena_alignment)))
    harness.prebuild([b for *_, b in broken])
    caught = 0
    for sample, prog, module in broken:
        try:
            _check(sample, prog, module)
        except AssertionError:
            caught += 1
    assert caught, "no sample noticed an unstable merge"
