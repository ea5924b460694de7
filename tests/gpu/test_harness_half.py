"""16-bit floats and narrow integers on the gpu backend (issue 26, item 3), run through the CPU
fiber harness against the numpy backend: the rendered CUDA C stores float16 as `__half` and
bfloat16 as `__nv_bfloat16`, computes in float32 and rounds each node's value once, to nearest
even, where it stores it (the numpy backend's rule, `runtime/reference.widened`), so elementwise
chains, casts, gathers, scatters, cumsum and sorts come out bit for bit; reductions, softmax,
layer_norm, conv and the GEMM (cublasGemmEx, float32 accumulation) within 1 ulp of the 16-bit
dtype. The harness's host versions of the types and conversions are checked bit for bit
against ml_dtypes / NumPy (all 65,536 patterns one way, ties, denormals and overflow the
other), and the module compiles with NVRTC to a cubin (ptxas checks the inline PTX)."""
from __future__ import annotations

import ctypes
import sys
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from runtime.gpu import nvrtc
from runtime.gpu.launch import CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16F
from tests.gpu import harness

needs_harness = pytest.mark.skipif(not harness.available(), reason="needs g++ on a POSIX host")
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(),
                                 reason="NVRTC from pip (cuda-bindings) is not installed")

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
F32 = np.dtype(np.float32)
HALVES = pytest.mark.parametrize("half", [BF16, F16], ids=["bfloat16", "float16"])


def _numpy(fn, *args):
    with np.errstate(all="ignore"):
        return cc.compile(fn, backend="numpy")(*[a.copy() for a in args])


def _device_count() -> int:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:   # noqa: BLE001  (no CuPy, no driver: no device)
        return 0


# Each value test runs its program through the harness and, where there is a CUDA device
# (`benchmarks/gpu_check.sh`'s "half" part: `-m gpu`), on the device through CuPy.
WHERE = pytest.mark.parametrize("where", [
    pytest.param("harness", marks=needs_harness),
    pytest.param("device", marks=[pytest.mark.gpu, pytest.mark.skipif(
        _device_count() < 1, reason="no CUDA device (or no CuPy) here")])])


def _gpu(fn, *args, schedule="forward", where="harness"):
    prog = cc.compile(fn, backend="gpu").lower(*[a.copy() for a in args])
    run = prog if where == "device" else harness.on_host(prog, schedule)
    return run(*[a.copy() for a in args]), prog


def _schedules(where):
    return harness.SCHEDULES if where == "harness" else ("device",)


def _tuple(x):
    return x if isinstance(x, (tuple, list)) else (x,)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.itemsize == 2 else
                                        np.uint32 if a.itemsize == 4 else np.uint8)


def assert_bitwise(got, want):
    for g, w in zip(_tuple(got), _tuple(want), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype in (BF16, F16) or w.dtype.kind == "f":   # NaN's bits aren't pinned
            nan = np.isnan(w.astype(np.float64))
            assert np.array_equal(nan, np.isnan(g.astype(np.float64)))
            g, w = g[~nan], w[~nan]
        np.testing.assert_array_equal(_bits(g), _bits(w))


def _ordered(a):
    """16-bit float bits as integers in the order of the values (adjacent values differ by 1)."""
    i = _bits(a).astype(np.int64)
    return np.where(i & 0x8000, -(i & 0x7FFF), i)


def assert_within_ulp(got, want, ulps=1):
    """Each 16-bit value within `ulps` units in the last place of the reference's."""
    for g, w in zip(_tuple(got), _tuple(want), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        nan = np.isnan(w.astype(F32))
        assert np.array_equal(nan, np.isnan(g.astype(F32)))
        d = np.abs(_ordered(g[~nan]) - _ordered(w[~nan]))
        assert d.size == 0 or d.max() <= ulps, (
            f"{int((d > ulps).sum())} of {d.size} values more than {ulps} ulp apart "
            f"(at most {int(d.max())}): {g[~nan][d > ulps][:5]} vs {w[~nan][d > ulps][:5]}")


def _normal(shape, dtype, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


# -- the harness's conversions are ml_dtypes' / NumPy's -------------------------------------------
def _tricky_floats():
    """float32 values at every rounding case of both 16-bit formats: ties (to even, both
    ways), just above and below them, denormals of both, the overflow thresholds, 0, inf."""
    vals = [0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.99, 65520.0, 65536.0, 1e-8, 6e-8, 3e-8,
            2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -14, 3.0e38, 3.3895e38, 3.4e38,
            1e-40, 1e-45, 257.0, 257.5, 258.0, 0.1, 1 / 3]
    for m in range(0, 2 ** 16, 97):   # every 97th 16-bit pattern: it, and the ties around it
        for fmt in (BF16, F16):
            with np.errstate(invalid="ignore"):
                x = np.array([m], np.uint16).view(fmt).astype(np.float64)[0]
            if not np.isfinite(x):
                continue
            vals.append(x)
            if fmt == BF16:
                step = np.float64(2.0) ** (np.floor(np.log2(abs(x))) - 8) if x else 2.0 ** -134
            else:
                step = np.float64(2.0) ** max(np.floor(np.log2(abs(x))) - 11, -25) if x \
                    else 2.0 ** -25
            vals += [x + step, x - step, x + step * 1.0001, x + step * 0.9999]
    v = np.array(vals, np.float64)
    with np.errstate(over="ignore"):
        return np.concatenate([v, -v]).astype(F32)


@pytest.mark.parametrize("bits", [False, True], ids=["_Float16", "bit-operations"])
@HALVES
@WHERE
def test_the_harness_converts_as_ml_dtypes_and_numpy_bit_for_bit(half, bits, monkeypatch, where):
    """float32 -> half (round to nearest even, denormals, overflow to inf) and every one of
    the 65,536 patterns half -> float32, through the rendered casts run on the host; for
    float16 both host implementations (gcc's _Float16 and the bit operations without it)."""
    if bits:
        if where == "device":
            pytest.skip("the host's float16 without _Float16: a harness matter")
        monkeypatch.setattr(harness, "FLAGS", harness.FLAGS + ("-DCUDA_HOST_F16_BITS",))
    x = _tricky_floats()
    (got,), _ = _gpu(lambda t: (t.astype(half),), x, where=where)
    with np.errstate(over="ignore"):
        assert_bitwise(got, x.astype(half))
    nan_in = x.copy()
    nan_in[:3] = np.nan
    (got,), _ = _gpu(lambda t: (t.astype(half),), nan_in, where=where)
    assert np.isnan(got[:3].astype(F32)).all()   # (the device's canonical NaN, 0x7fff)
    every = np.arange(2 ** 16, dtype=np.uint16).view(half)
    (wide,), _ = _gpu(lambda t: (t.astype("float32"),), every, where=where)
    with np.errstate(invalid="ignore"):
        assert_bitwise(wide, every.astype(F32))


@WHERE
def test_double_and_integer_casts_round_as_numpy_and_ml_dtypes(where):
    """float64 -> float16 is one rounding (NumPy), float64 -> bfloat16 goes through float32
    (ml_dtypes: two roundings), an integer -> bfloat16 through float32 (ml_dtypes)."""
    d = np.array([1 + 2.0 ** -11 + 2.0 ** -40, 1 + 2.0 ** -8 + 2.0 ** -30, 3.14159, -1e300, 0.0])
    i = np.array([16842753, -16842753, 257, 65519, 70000], np.int64)
    def fn(a, b):
        return (a.astype("float16"), a.astype("bfloat16"), b.astype("float16"),
                           b.astype("bfloat16"), b.astype("int32").astype("bfloat16"))
    got, _ = _gpu(fn, d, i, where=where)
    assert_bitwise(got, _numpy(fn, d, i))
    with np.errstate(over="ignore"):   # (teeth: one rounding, not two)
        assert got[0][0] != d.astype(F32).astype(F16)[0]


# -- elementwise chains and casts: bit for bit ------------------------------------------------
@HALVES
@WHERE
def test_a_fused_chain_computes_in_float32_and_rounds_each_nodes_value_once(half, where):
    x, y = _normal((33, 70), half, 1), _normal((33, 70), half, 2)
    z = _normal((70,), F32, 3)

    def f(a, b, c):
        h = cc.exp(a) * b + 1.0                     # all 16-bit: one kernel
        return h, (h * 0.1 - a).tanh() / 3.0, a + c, (a * b).astype("float32"), a.abs().sqrt()
    got, prog = _gpu(f, x, y, z, where=where)
    assert_bitwise(got, _numpy(f, x, y, z))
    storage = "__nv_bfloat16" if half == BF16 else "__half"
    rn = "__float2bfloat16_rn" if half == BF16 else "__float2half_rn"
    source = prog.source
    assert f"(({storage}*)input0)" in source and "const float a0 =" in source
    kernel = next(k for k in source.split("// node ") if "exp" in k)
    # exp, *, + in float32 registers, each node's value rounded once: exp's and the
    # product's in registers, the sum's by the store
    assert kernel.count(rn) == 3 and kernel.count(f"= {rn}(") == 1, kernel


@HALVES
@WHERE
def test_an_integer_operand_meets_a_half_in_float32(half, where):
    """`i + h` with i int32: the reference converts i to float32 (promote(float32, int32)), adds
    and rounds once: 257 + 0.5 is 258 in bfloat16 (rounding 257 first would give 256)."""
    i = np.array([257, 1000001, -3, 65000], np.int32)
    h = np.array([0.5, 0.25, 0.75, 16.0], half)
    def fn(a, b):
        return (a + b, b * a, cc.where(a > 0, b, a))
    got, _ = _gpu(fn, i, h, where=where)
    want = _numpy(fn, i, h)
    assert_bitwise(got, want)
    if half == BF16:
        assert float(got[0][0]) == 258.0


@HALVES
@WHERE
def test_random_numbers_and_dropout_are_the_numpy_backends_bits(half, where):
    """Philox in the graph: the float64 (or float32) draw converted once to the 16-bit
    dtype, as the numpy backend's astype (float16 directly, bfloat16 through float32)."""
    x = _normal((8, 50), half, 25)
    name = half.name

    def f(a):
        return (cc.rand([8, 50], dtype=name, seed=3), cc.randn([8, 50], dtype=name, seed=4),
                F.dropout(a, 0.3, training=True, seed=5))
    got, _ = _gpu(f, x, where=where)
    assert_bitwise(got, _numpy(f, x))


# -- narrow integers: numpy's wrapping and unsigned rules -----------------------------------------
@WHERE
def test_narrow_integers_wrap_and_divide_as_numpy(where):
    a8 = np.array([127, -128, -7, 100, 0, -1], np.int8)
    b8 = np.array([1, -1, 2, -3, 5, 127], np.int8)
    u = np.array([200, 0, 255, 7, 1, 128], np.uint8)
    v = np.array([255, 1, 254, 0, 255, 255], np.uint8)
    s = np.array([32767, -32768, 300, -300, 12345, 1], np.int16)
    w = np.array([2, 1, 300, 7, -1, 0], np.int16)

    def f(a, b, c, d, e, g):
        return (a + b, a - b, a * b, a // b, a % b, -a, a.abs(), c + d, c - d, c * d, c // d,
                c % d, e * g, e // g, e % g, e + g, c.astype("int16") * e)
    with np.errstate(all="ignore"):
        got, _ = _gpu(f, a8, b8, u, v, s, w, where=where)
    want = _numpy(f, a8, b8, u, v, s, w)
    assert_bitwise(got, want)
    assert list(got[7][:3]) == [199, 1, 253] and got[10][0] == 0 and got[11][0] == 200


@WHERE
def test_floats_convert_to_narrow_integers_through_int32_as_numpy(where):
    x = np.array([300.5, -200.7, 1e10, -1.0, 255.9, 127.5, -129.0, 40000.0, 0.0], F32)
    def fn(t):
        return (t.astype("int8"), t.astype("uint8"), t.astype("int16"),
                        t.astype("bfloat16").astype("int16"), t.astype("float16").astype("uint8"))
    got, prog = _gpu(fn, x, where=where)
    assert_bitwise(got, _numpy(fn, x))
    assert "np_f2i<int>" in prog.source


@WHERE
def test_a_uint8_image_batch_goes_in_directly(where):
    img = np.random.default_rng(4).integers(0, 256, (2, 3, 8, 8), dtype=np.uint8)
    def fn(t):
        return (t.astype("float32") / 255, (t.astype("bfloat16") / 255) - 0.5)
    got, prog = _gpu(fn, img, where=where)
    assert_bitwise(got, _numpy(fn, img))
    assert "((unsigned char*)input0)" in prog.source


# -- reductions and rows: within 1 ulp ----------------------------------------------------------
@HALVES
@pytest.mark.parametrize("n", [40, 1000])   # a row longer than a warp, and than a block (256)
@WHERE
def test_reductions_accumulate_in_float32_or_wider(half, n, where):
    x = _normal((5, n), half, 5)
    x[1, 3] = np.nan

    def f(a):
        return (a.sum(axis=1), a.mean(axis=1), a.max(axis=1), a.min(axis=0), a.argmax(axis=1),
                a.sum())
    want = _numpy(f, x)
    for schedule in _schedules(where):
        got, _ = _gpu(f, x, schedule=schedule, where=where)
        assert_within_ulp(got[:2] + got[5:], want[:2] + want[5:])
        assert_bitwise(got[2:4], want[2:4])
        np.testing.assert_array_equal(got[4], want[4])


@HALVES
@WHERE
def test_a_half_sum_of_many_terms_is_the_float32_sum_rounded_once(half, where):
    """4096 ones and a 1/256 each: a 16-bit accumulator would stop growing at 256 (bfloat16)
    or 2048 (float16)."""
    x = np.full((2, 4096), 1.0 + 2.0 ** -8, F32).astype(half)
    (s,), _ = _gpu(lambda a: (a.sum(axis=1),), x, where=where)
    assert_within_ulp(s, x.astype(F32).sum(axis=1).astype(half))
    assert float(s[0].astype(F32)) > 4000


@HALVES
@pytest.mark.parametrize("n", [24, 700])
@WHERE
def test_softmax_and_layer_norm_rows(half, n, where):
    x = _normal((6, n), half, 6, scale=3.0)
    g, b = _normal((n,), half, 7), _normal((n,), half, 8)

    def f(a, gamma, beta):
        return (F.softmax(a, axis=-1), F.log_softmax(a, axis=-1),
                F.layer_norm(a, [n], gamma, beta))
    want = _numpy(f, x, g, b)
    for schedule in _schedules(where):
        got, _ = _gpu(f, x, g, b, schedule=schedule, where=where)
        assert_within_ulp(got[:2], want[:2])
        assert_within_ulp(got[2:], want[2:], ulps=2)   # (a composite: mean, var, scale)


@HALVES
@WHERE
def test_softmax_of_a_half_rounds_once_not_through_a_stored_exp(half, where):
    """The half softmax kernel recomputes exp(x - max) for the store instead of storing it
    and dividing the stored (rounded) value."""
    x = _normal((3, 300), half, 9)
    got, prog = _gpu(lambda a: (F.softmax(a, axis=-1),), x, where=where)
    kernel = next(k for k in prog.source.split("// node ") if "softmax" in k.split("\n")[0])
    assert kernel.count("expf(") == 2
    assert_within_ulp(got, _numpy(lambda a: (F.softmax(a, axis=-1),), x))


# -- gathers, scatters, cumsum, sorts: bit for bit -------------------------------------------------
@HALVES
@WHERE
def test_gathers_scatters_cumsum_and_sort(half, where):
    x = _normal((6, 50), half, 10)
    idx = np.array([5, 0, 2, 2, -1], np.int64)
    take = np.random.default_rng(11).integers(0, 50, (6, 7))
    val = _normal((6, 5), half, 12)

    def f(a, i, j, v):
        return (a.index_select(i, axis=0), a.take_along_axis(j, axis=1),
                F.embedding(i.abs(), a), a.cumsum(axis=1), a.index_add(i[:3] + 3, 1, v[:, :3]),
                a.argsort(axis=1), a.sort(axis=1, descending=True))
    got, _ = _gpu(f, x, idx, take, val, where=where)
    assert_bitwise(got, _numpy(f, x, idx, take, val))


@HALVES
@WHERE
def test_conv_and_pool(half, where):
    x = _normal((2, 3, 9, 9), half, 13)
    w = _normal((4, 3, 3, 3), half, 14)
    def fn(a, k):
        return (F.conv2d(a, k, padding=1), F.max_pool2d(a, 2))
    got, _ = _gpu(fn, x, w, where=where)
    want = _numpy(fn, x, w)
    assert_within_ulp(got[0], want[0])
    assert_bitwise(got[1], want[1])


# -- the GEMM: cublasGemmEx, 16-bit operands, float32 accumulation --------------------------------
@HALVES
@WHERE
def test_a_half_matmul_is_one_gemm_ex_launch_with_float32_compute(half, where):
    x, y = _normal((3, 17, 40), half, 15), _normal((40, 23), half, 16)
    c = _normal((17, 23), half, 17)
    def fn(a, b, cc_):
        return (a @ b, cc.addmm(cc_, a[0], b, beta=0.5, alpha=2.0))
    got, prog = _gpu(fn, x, y, c, where=where)
    gemms = [ln for ln in prog._exec.module.launches if ln.library == "cublas"]
    assert gemms and {ln.dtype for ln in gemms} == {half.name}
    for ln in gemms:
        alpha, beta = ln.args[5], ln.args[10]
        assert alpha[:2] == ("scalar", "float") and beta[:2] == ("scalar", "float")
    assert {(ln.args[5][2], ln.args[10][2]) for ln in gemms} >= {(1.0, 0.0), (2.0, 0.5)}
    assert_within_ulp(got, _numpy(fn, x, y, c))


@HALVES
def test_the_executable_calls_gemm_ex_with_16_bit_types_and_32_bit_compute(half, monkeypatch):
    """What the device path passes to CuPy's cublas.gemmEx (a fake that records it): the
    launch's sizes and pointers, CUDA_R_16BF / CUDA_R_16F for A, B and C,
    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, and alpha/beta as float32 values."""
    x, y = _normal((8, 40), half, 18), _normal((40, 12), half, 19)
    prog = cc.compile(lambda a, b: a @ b * 2.0, backend="gpu").lower(x, y)
    exe = prog._exec
    calls = []

    def gemm_ex(handle, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc,
                compute, algo):
        def read(p):
            return float(np.frombuffer((ctypes.c_char * 4).from_address(p),
                                                     np.float32)[0])
        calls.append((ta, tb, m, n, k, read(alpha), A, at, lda, B, bt, ldb, read(beta), C, ct,
                      ldc, compute, algo))

    def refuse(*args):
        raise AssertionError("a 16-bit GEMM must not go through sgemm/dgemm")
    cublas = types.SimpleNamespace(gemmEx=gemm_ex, sgemm=refuse, dgemm=refuse,
                                   setPointerMode=lambda *a: None, setStream=lambda *a: None,
                                   CUBLAS_POINTER_MODE_HOST=0)
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.cublas = cublas
    for name, mod in [("cupy_backends", types.ModuleType("cupy_backends")),
                      ("cupy_backends.cuda", types.ModuleType("cupy_backends.cuda")),
                      ("cupy_backends.cuda.libs", libs),
                      ("cupy_backends.cuda.libs.cublas", cublas)]:
        monkeypatch.setitem(sys.modules, name, mod)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        device=types.SimpleNamespace(get_cublas_handle=lambda: 7),
        get_current_stream=lambda: types.SimpleNamespace(ptr=0)))
    def buf(ptr):
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr))
    exe._arena = buf(1 << 20)
    exe._kernels = {ln.kernel: (lambda *a, **k: None) for ln in exe.launches if ln.library is None}
    exe._run_launches(fake, [buf(1 << 30), buf(1 << 31)], [buf(1 << 32)])
    (gemm,) = [ln for ln in exe.launches if ln.library == "cublas"]
    code = CUDA_R_16BF if half == BF16 else CUDA_R_16F
    assert (code, CUBLAS_COMPUTE_32F) == ((14, 68) if half == BF16 else (2, 68))
    ta, tb, m, n, k, _, a, lda, _, ldb, _, _, ldc = gemm.args
    (call,) = calls
    assert call[:6] == (0 if ta == "N" else 1, 0 if tb == "N" else 1, m, n, k, 1.0)
    assert call[7:9] == (code, lda) and call[10:13] == (code, ldb, 0.0)
    assert call[14:] == (code, ldc, CUBLAS_COMPUTE_32F, -1)
    assert call[6] == exe._pointer(a, [buf(1 << 30), buf(1 << 31)], [buf(1 << 32)])


@needs_harness
def test_the_harness_refuses_a_half_gemm_without_float_alpha():
    x, y = _normal((4, 8), BF16, 20), _normal((8, 4), BF16, 21)
    prog = cc.compile(lambda a, b: a @ b, backend="gpu").lower(x, y)
    module = prog._exec.module
    bad = [ln if ln.library != "cublas" else
           type(ln)(**{**ln.__dict__, "args": ln.args[:5] + (("scalar", "double", 1.0),)
                       + ln.args[6:]}) for ln in module.launches]
    edited = type(module)(module.source, bad, module.arena_bytes, module.arena_alignment,
                          module.status_offset)
    with pytest.raises(harness.HarnessError, match="cublasGemmEx"):
        harness.on_host(prog, module=edited)(x, y)


# -- the whole model: a bfloat16 training step ----------------------------------------------------
@WHERE
def test_a_bfloat16_mlp_training_step_matches_the_numpy_backend(where):
    rng = np.random.default_rng(22)
    x = rng.standard_normal((16, 32)).astype(BF16)
    w1 = (rng.standard_normal((32, 64)) * 0.2).astype(BF16)
    w2 = (rng.standard_normal((64, 10)) * 0.2).astype(BF16)
    labels = rng.integers(0, 10, 16)

    def step(x, w1, w2, labels):
        w1.stop_gradient = w2.stop_gradient = False
        h = F.relu(x @ w1)
        logits = (h @ w2).astype("float32")
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        with cc.no_grad():
            w1.subtract_(w1.grad * 0.1)
            w2.subtract_(w2.grad * 0.1)
        return loss
    args = [x, w1, w2, labels]
    want_args = [a.copy() for a in args]
    want = cc.compile(step, backend="numpy")(*want_args)
    got_args = [a.copy() for a in args]
    prog = cc.compile(step, backend="gpu").lower(*got_args)
    got = (prog if where == "device" else harness.on_host(prog))(*got_args)
    assert got.dtype == F32
    np.testing.assert_allclose(got, want, rtol=1e-2)
    for g, w, before in zip(got_args[1:3], want_args[1:3], args[1:3]):
        assert g.dtype == BF16
        if where == "harness":   # the harness sums the GEMMs in the numpy backend's order
            assert_within_ulp(g, w, ulps=2)
        # cuBLAS sums in its own order: the gradient may differ by an ulp, and `w - 0.1 * g`
        # cancels where w and 0.1 * g are close, so the error is measured against the terms'
        # size (|w| + |0.1 g|), not the small difference's: 2 bfloat16 ulp (2 * 2**-7) of that
        g32, w32, b32 = (a.astype(F32) for a in (g, w, before))
        terms = np.abs(b32) + np.abs(w32 - b32)
        assert np.all(np.abs(g32 - w32) <= 2 * 2.0 ** -7 * terms), np.max(
            np.abs(g32 - w32) / np.maximum(terms, 1e-30))


@WHERE
def test_a_bfloat16_transformer_block_training_step(where):
    """examples/transformer_block.py's step (attention, layer_norm, gelu, softmax cross
    entropy, the SGD update in place) with every float32 argument in bfloat16."""
    from examples import transformer_block as tb
    args = [a.astype(BF16) if a.dtype == F32 else a
            for a in tb.example_inputs(batch=2, seq=16, d_model=32, d_mlp=64)]
    want_args = [a.copy() for a in args]
    want = cc.compile(tb.train_step, backend="numpy")(*want_args)
    got_args = [a.copy() for a in args]
    prog = cc.compile(tb.train_step, backend="gpu").lower(*got_args)
    got = (prog if where == "device" else harness.on_host(prog))(*got_args)
    assert_within_ulp(np.asarray(got), np.asarray(want))
    for g, w, a in zip(got_args, want_args, args):
        if a.dtype == BF16:
            assert_within_ulp(g, w, ulps=2)
    assert any(not np.array_equal(g, a) for g, a in zip(got_args, args))   # it trained


def _samples_in(half):
    """For each registry op, the first opdb sample whose graph contains it, its float32
    arrays given in `half`: (the sample, its args, the lowered gpu program)."""
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for sub in (root, os.path.join(root, "opdb")):
        if sub not in sys.path:
            sys.path.insert(0, sub)
    from opdb.samples import SAMPLES
    seen, picked = set(), []
    for sample in SAMPLES:
        with np.errstate(over="ignore"):
            args = [a.astype(half) if isinstance(a, np.ndarray) and a.dtype == F32 else
                    a.copy() if isinstance(a, np.ndarray) else a for a in sample.args]
        if not any(isinstance(a, np.ndarray) and a.dtype == half for a in args):
            continue
        try:
            prog = cc.compile(sample.fn, backend="gpu").lower(
                *[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        except cc.CompilerError:
            continue   # an op refused for the dtype: the front end's matter
        ops = {n.op for n in prog.graph.nodes} - seen
        if ops:
            seen |= ops
            picked.append((sample, args, prog))
    return picked


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in _flat(t)]
    return [tree]


@HALVES
def test_every_op_sampled_in_the_16_bit_dtype_runs_within_2_ulp(half):
    """Each registry op's first opdb sample with its float32 arguments in the 16-bit dtype:
    the harness's values within 2 ulp of the numpy backend's (integers and bools exact)."""
    picked = _samples_in(half)
    assert len(picked) > 60
    harness.prebuild([prog._exec.module for _, _, prog in picked])
    for sample, args, prog in picked:
        def copies(args=args):
            return [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        with np.errstate(all="ignore"):
            want = _flat(cc.compile(sample.fn, backend="numpy")(*copies()))
            got = _flat(harness.on_host(prog)(*copies()))
        for g, w in zip(got, want, strict=True):
            if not isinstance(w, np.ndarray):
                continue
            assert g.dtype == w.dtype, sample.id
            if w.dtype in (BF16, F16):
                assert_within_ulp(g, w, ulps=2)
            elif w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-2, atol=1e-2, err_msg=sample.id)
            else:
                np.testing.assert_array_equal(g, w, err_msg=sample.id)


# -- NVRTC: the module compiles, the inline PTX assembles ------------------------------------------
def _half_program():
    x, y = _normal((8, 300), BF16, 23), _normal((8, 300), F16, 24)

    def f(a, b):
        return (cc.exp(a) * 2 + b.astype("float32"), a.astype("float16"), b.astype("bfloat16"),
                a.cast("float64").cast("float16"), a.sum(axis=1), F.softmax(b, axis=-1),
                a @ a.T, b.astype("int16") + 1)
    return cc.compile(f, backend="gpu").lower(x, y)


@needs_nvrtc
def test_the_half_module_compiles_and_its_conversions_assemble():
    from cuda.bindings import nvrtc as nv
    source = _half_program().source
    ptx = nvrtc.compile_ptx(source, "half.cu")
    for insn in ("cvt.rn.bf16.f32", "cvt.rn.f16.f32", "cvt.rn.f16.f64", "cvt.f32.f16"):
        assert insn in ptx, insn
    # a cubin: NVRTC runs ptxas, which checks the inline PTX the PTX text above only carries
    err, prog = nv.nvrtcCreateProgram(source.encode(), b"half.cu", 0, [], [])
    try:
        opts = [o.encode() for o in nvrtc.options("sm_80")]
        (err,) = nv.nvrtcCompileProgram(prog, len(opts), opts)
        assert err == nv.nvrtcResult.NVRTC_SUCCESS
        err, size = nv.nvrtcGetCUBINSize(prog)
        assert err == nv.nvrtcResult.NVRTC_SUCCESS and size > 0
    finally:
        nv.nvrtcDestroyProgram(prog)


def _cuda_include():
    for root in ("/usr/local/cuda/include", *sorted(map(str, Path("/usr/local").glob(
            "cuda-*/include")))):
        if (Path(root) / "cuda_fp16.h").exists() and (Path(root) / "cuda_bf16.h").exists():
            return root
    return None


@needs_nvrtc
@pytest.mark.skipif(_cuda_include() is None, reason="no CUDA toolkit headers here")
def test_the_half_module_also_compiles_after_the_cuda_headers():
    """Where a colleague includes cuda_fp16.h / cuda_bf16.h (for half2 vectors, say), the
    module's own definitions step aside (their include guards) and the headers' serve."""
    source = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + _half_program().source
    ptx = nvrtc.compile_ptx(source, "half_headers.cu",
                            options=nvrtc.OPTIONS + (f"--include-path={_cuda_include()}",))
    assert "cvt.rn.bf16.f32" in ptx
