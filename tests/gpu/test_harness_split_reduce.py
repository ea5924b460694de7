"""Reductions into few outputs over long extents on the gpu backend (issue 25): the emitter
splits the extent into slices fixed by the shapes (one block each, partials in the scratch
region past the arena) and a second kernel combines them in slice order. Checked here without
a device: the launch list (the split happens, its bytes are counted), the CUDA C run through
the CPU fiber harness under both schedules (the reverse one runs the blocks backwards, so a
combine that took partials in finishing order would differ) against the numpy backend, and
NVRTC compiling the modules.
"""
from __future__ import annotations

import numpy as np
import pytest

import compiler as cc
from runtime.gpu import emitter, nvrtc
from tests.gpu import harness

pytestmark = pytest.mark.skipif(not harness.available(), reason="needs g++ on a POSIX host")

OPS = ("sum", "mean", "prod", "max", "min", "argmax", "argmin")
# (name, shape, axis): rows of 100,000 (3 outputs), one output of 1,000,000, a strided reduced
# axis (columns), and a full reduction of a 2-d array (arg indices count both dims row-major)
CASES = [("rows", (3, 100_000), 1), ("all", (1_000_000,), None), ("cols", (100_000, 3), 0),
         ("all2d", (3, 100_000), None)]


def _program(ops, axis):
    def f(x):
        return tuple(getattr(x, op)(axis=axis) for op in ops)
    return f


def _reduced(shape, axis):
    return int(np.prod(shape)) if axis is None else shape[axis]


def _at(shape, axis, r, out=0):
    """The index into x of reduced element `r` of output `out` (row-major over the reduced
    dims, as argmax counts)."""
    if axis is None:
        return np.unravel_index(r, shape)
    idx = [0] * len(shape)
    idx[axis] = r
    idx[1 - axis] = out
    return tuple(idx)


def _values(shape, axis, dtype, nan=False):
    """Values near 1 (the products stay finite), the extremes and ties placed in late slices:
    the maximum once near the end, the minimum twice (in two slices: the lower index must
    win), and with `nan` two NaNs in two late slices (the first must win)."""
    rng = np.random.default_rng(25)
    x = (1 + 0.01 * rng.standard_normal(shape)).astype(dtype)
    n = _reduced(shape, axis)
    span = -(-n // emitter.ModuleEmitter._slices(1 if axis is None else 3, n))
    for out in range(1 if axis is None else 3):
        x[_at(shape, axis, n - 5, out)] = 2.0
        x[_at(shape, axis, n - 3 * span - 7, out)] = 0.5
        x[_at(shape, axis, n - 10, out)] = 0.5
        if nan:
            x[_at(shape, axis, n - 2 * span - 3, out)] = np.nan
            x[_at(shape, axis, n - 1, out)] = np.nan
    return x


def _check_split(prog, nout, n):
    """Every reduction node runs as `_slices` (nout x slices blocks) then `_combine`, and the
    partials' bytes lie inside the arena the device allocates, past the planned buffers."""
    module = prog._exec.module
    slices = emitter.ModuleEmitter._slices(nout, n)
    assert slices > 1
    launches = [ln for ln in module.launches if ln.library is None]
    assert len(launches) == 2 * len(OPS)
    for part, comb in zip(launches[::2], launches[1::2]):
        assert part.kernel.endswith("_slices") and comb.kernel.endswith("_combine")
        assert part.node == comb.node and part.grid == (nout * slices, 1, 1)
        (at,) = [a[1] for a in part.args if a[0] == "arena"]
        assert at >= prog.plan.arena_bytes
    assert module.scratch_bytes >= nout * slices * 16          # values and (arg) indices
    assert module.arena_bytes >= at + module.scratch_bytes


def _run(prog, x):
    got = {}
    for schedule in harness.SCHEDULES:
        got[schedule] = harness.on_host(prog, schedule)(x.copy())
    # a fixed combining order: the same bits whichever block finishes first
    for a, b in zip(*got.values()):
        np.testing.assert_array_equal(a, b, strict=True)
    return got["forward"]


def _compare(got, want, ops, rtol):
    for op, g, w in zip(ops, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (op, g.dtype, w.dtype)
        if op in ("sum", "mean", "prod") and w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, err_msg=op)
        else:   # extremes and indices: exactly
            np.testing.assert_array_equal(g, w, err_msg=op, strict=True)


@pytest.mark.parametrize("name,shape,axis", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("nan", [False, True], ids=["values", "nan"])
def test_long_reductions_split_into_slices_match_the_numpy_backend(name, shape, axis, nan):
    x = _values(shape, axis, np.float64, nan)
    fn = _program(OPS, axis)
    prog = cc.compile(fn, backend="gpu").lower(x)
    _check_split(prog, 1 if axis is None else 3, _reduced(shape, axis))
    got = _run(prog, x)
    want = cc.compile(fn, backend="numpy")(x.copy())
    _compare(got, want, OPS, 1e-12)
    if not nan:   # the placed extremes won, the minimum's tie by its lower index
        n = _reduced(shape, axis)
        span = -(-n // emitter.ModuleEmitter._slices(1 if axis is None else 3, n))
        assert np.all(got[5] == n - 5) and np.all(got[6] == n - 3 * span - 7)
    else:
        assert np.all(np.isnan(got[0])) and np.all(np.isnan(got[3]))


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_split_reductions_in_other_dtypes(dtype):
    """float32 (sums in float64, rounded once), int32 (int64 sums: exact in any order) and
    bool (max/min/argmax over an int32 accumulator), over one row of 1,000,000."""
    shape, axis = (1_000_000,), None
    rng = np.random.default_rng(7)
    if dtype == "bool":
        x = np.zeros(shape, np.bool_)
        x[-3] = x[-2] = True
        ops = ("sum", "max", "min", "argmax", "argmin")
    elif dtype == "int32":
        x = rng.integers(-2**31, 2**31 - 1, shape, dtype=np.int32)
        x[-5] = 2**31 - 1
        ops = ("sum", "max", "min", "argmax", "argmin")
    else:
        x = _values(shape, axis, np.float32)
        ops = ("sum", "mean", "max", "min", "argmax", "argmin")
    fn = _program(ops, axis)
    prog = cc.compile(fn, backend="gpu").lower(x)
    assert sum(ln.kernel.endswith("_slices") for ln in prog._exec.module.launches) == len(ops)
    got = _run(prog, x)
    want = cc.compile(fn, backend="numpy")(x.copy())
    _compare(got, want, ops, 2e-5)
    if dtype == "int32":   # int64 sums wrap the same in any order: exactly numpy's
        np.testing.assert_array_equal(got[0], x.astype(np.int64).sum(), strict=True)
    if dtype == "float32":   # one rounding of the float64 sum
        assert got[0] == np.float32(x.astype(np.float64).sum())


def test_the_slice_count_depends_on_the_shapes_only():
    s = emitter.ModuleEmitter._slices
    lim = emitter.SLICE_MIN
    assert s(1, 2 * lim - 1) == 1 and s(1, 2 * lim) == 2
    assert s(emitter.SPLIT_MAX_OUT, 10**7) == 1     # enough outputs to fill the device
    assert s(1, 10**8) <= emitter.SPLIT_BLOCKS and s(4, 10**8) <= emitter.SPLIT_BLOCKS // 4
    for nout, n in [(1, 1_000_000), (3, 100_000), (7, 123_457), (255, 10**6)]:
        k = s(nout, n)
        span = -(-n // k)
        assert (k - 1) * span < n <= k * span            # no empty slice


def test_short_or_many_output_reductions_keep_one_block_per_output():
    """No split (one launch, one block per output) where the outputs already fill the
    device or the extent is short: those kernels stay as they were."""
    def f(x, y):
        return x.sum(axis=1), y.sum()
    prog = cc.compile(f, backend="gpu").lower(np.ones((300, 30_000), np.float32),
                                              np.ones((2 * emitter.SLICE_MIN - 1,), np.float32))
    launches = prog._exec.module.launches
    assert [ln.kernel for ln in launches] == ["k0_sum", "k1_sum"]
    assert launches[0].grid == (300, 1, 1) and launches[1].grid == (1, 1, 1)
    assert prog._exec.module.scratch_bytes == 0
    assert prog._exec.module.arena_bytes == prog.plan.arena_bytes


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC from pip (cuda-bindings) is not "
                    "installed")
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int8", "bool"])
def test_split_reduction_kernels_compile_with_nvrtc(dtype):
    ops = OPS if dtype != "bool" else ("sum", "max", "min", "argmax", "argmin")
    x = np.ones((3, 100_000), dtype)
    prog = cc.compile(_program(ops, 1), backend="gpu").lower(x)
    assert sum(ln.kernel.endswith("_slices") for ln in prog._exec.module.launches) == len(ops)
    ptx = nvrtc.compile_ptx(prog.source, f"split_{dtype}.cu")
    assert ptx.count(".entry ") == 2 * len(ops)
