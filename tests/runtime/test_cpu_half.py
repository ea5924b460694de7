"""The cpu backend on 16-bit floats (float16, bfloat16) and narrow integers (int8, uint8, int16).

Halves are stored in 16 bits and computed in float32 registers: the conversions are checked
bit for bit against NumPy's / ml_dtypes' casts over every 16-bit pattern and a large sample of
float32 and float64 patterns (halfway cases, subnormals, overflow, NaNs); elementwise ops round
each op's result once, as the numpy backend does, so exact ops agree bit for bit across the
backends and the rest within 1 ulp of the half dtype (the op's float32 error can tip a rounding);
reductions and matmul accumulate in float32 or wider and round once. Narrow integers wrap as
NumPy, and uint8 is unsigned everywhere (extension, compare, divide, max/min, casts).
"""
from __future__ import annotations

import os
import sys

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
HALVES = (BF16, F16)
NARROW_INTS = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16))


def cpu(fn, **kw):
    return cc.compile(fn, backend="cpu", **kw)


def ref(fn, **kw):
    return cc.compile(fn, backend="numpy", **kw)


def bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def ulp(x, dtype):
    """The spacing of `dtype` at |x| (float64), its smallest subnormal at 0."""
    fi = ml_dtypes.finfo(dtype)
    x = np.minimum(np.abs(np.asarray(x, np.float64)), float(fi.max))
    e = np.floor(np.log2(np.maximum(x, float(fi.smallest_normal))))
    return np.exp2(e - fi.nmant)


def assert_within_ulps(got, want, dtype, n=1, extra=0.0):
    """Same NaNs and infinities; finite values within n ulp of `dtype` (+ `extra` absolute)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    g, w = got.astype(F64), want.astype(F64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    inf = np.isinf(w) | np.isinf(g)
    np.testing.assert_array_equal(g[inf], w[inf])
    fin = np.isfinite(w) & np.isfinite(g)
    err = np.abs(g[fin] - w[fin])
    bound = n * ulp(np.maximum(np.abs(g[fin]), np.abs(w[fin])), dtype) + extra
    bad = err > bound
    assert not bad.any(), (f"{int(bad.sum())} of {bad.size} outside {n} ulp: got {g[fin][bad][:5]}"
                           f", want {w[fin][bad][:5]}")


# -- conversions, bit for bit ------------------------------------------------------------------
@pytest.fixture(params=["f16c", "integer"])
def f16_conversions(request, monkeypatch):
    """float16 converted by F16C (this host) and by the integer forms a host without it
    uses: both bit for bit."""
    import runtime.cpu.scalar as scalar
    monkeypatch.setattr(scalar, "HARD_F16", request.param == "f16c")
    return request.param


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_widening_every_16_bit_pattern(half, f16_conversions):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(half)
    got = cpu(lambda t: t.astype("float32"))(x)
    np.testing.assert_array_equal(bits(got), bits(x.astype(F32)))
    # and float64 (through the exact float32 value)
    got = cpu(lambda t: t.astype("float64"))(x)
    np.testing.assert_array_equal(bits(got), bits(x.astype(F64)))


def _float32_patterns():
    rng = np.random.default_rng(26)
    r = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    hi = rng.integers(0, 1 << 16, 1 << 14, dtype=np.uint64).astype(np.uint32) << 16
    ties = np.concatenate([hi | 0x8000, hi | 0x7FFF, hi | 0x8001])  # bfloat16 halfway cases
    # float16 halfway cases (13 dropped bits = 0x1000) over its whole exponent range, its
    # subnormals (float32 exponents 103..112) and the overflow edge (65520 rounds to inf)
    e = rng.integers(100, 145, 1 << 14, dtype=np.uint64).astype(np.uint32)
    m = rng.integers(0, 1 << 10, 1 << 14, dtype=np.uint64).astype(np.uint32) << 13
    s = rng.integers(0, 2, 1 << 14, dtype=np.uint64).astype(np.uint32) << 31
    f16_ties = np.concatenate([s | e << 23 | m | 0x1000, s | e << 23 | m | 0xFFF,
                               s | e << 23 | m | 0x1001])
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                        0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7F810000, 0x7FFF0000, 0x7F7FFFFF,
                        0x477FF000, 0x477FEFFF, 0x477FE000, 0x33000000, 0x33000001, 0x00000001,
                        0x00800000, 0x007FFFFF, 0x7F7F8000, 0x7F7F7FFF], np.uint32)
    return np.concatenate([r, ties, f16_ties, special]).view(F32)


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_narrowing_float32_patterns_as_numpy(half, f16_conversions):
    x = _float32_patterns()
    got = cpu(lambda t: t.astype(half.name))(x)
    assert got.dtype == half
    with np.errstate(all="ignore"):
        want = x.astype(half)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_narrowing_float64_as_numpy(half, f16_conversions):
    """float16 rounds a float64 once (numpy's direct cast: rounding to odd through float32
    first), bfloat16 through float32, as ml_dtypes does."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 1 << 64, 1 << 18, dtype=np.uint64).view(F64)
    x = np.concatenate([x, rng.standard_normal(1 << 16) * np.exp2(rng.integers(-30, 20, 1 << 16)),
                        [1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, 65519.99, 65520.0,
                         2 ** -25, 2 ** -25 + 2 ** -60, np.nan, -np.inf, 1e300, -1e-300]])
    got = cpu(lambda t: t.astype(half.name))(x)
    with np.errstate(all="ignore"):
        want = x.astype(half)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("src,dst", [(BF16, F16), (F16, BF16)], ids=str)
def test_half_to_half(src, dst, f16_conversions):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(src)
    got = cpu(lambda t: t.astype(dst.name))(x)
    with np.errstate(all="ignore"):
        want = x.astype(F32).astype(dst)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_copies_keep_the_bits(half):
    """A copy (concat, a slice written back) moves 16-bit patterns as they are, NaN payloads
    included, as numpy's copies do."""
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(half)
    got = cpu(lambda t: cc.concat([t[::-1], t], axis=0))(x)
    np.testing.assert_array_equal(bits(got), bits(np.concatenate([x[::-1], x])))


@pytest.mark.parametrize("dtype", NARROW_INTS, ids=str)
def test_float_to_narrow_int_as_numpy(dtype):
    """NumPy's C cast goes through int32 and keeps the low bits: 300.0 -> uint8 44, -1.0 -> 255,
    NaN and out-of-int32 values -> 0."""
    x = np.array([300.0, -1.0, -200.0, 200.0, 1e10, -1e10, np.nan, np.inf, -129.5, 65535.7,
                  70000.0, 127.9, -128.9, 0.5, -0.5, 255.0, 256.0], F32)
    got = cpu(lambda t: t.astype(dtype.name))(x)
    with np.errstate(all="ignore"):
        want = x.astype(dtype)
    np.testing.assert_array_equal(got, want, strict=True)
    got = cpu(lambda t: (t * 1).astype(dtype.name))(np.resize(x, 1000).astype(BF16))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got, np.resize(x, 1000).astype(BF16).astype(F32)
                                      .astype(dtype), strict=True)


# -- elementwise: one rounding per op -------------------------------------------------------------
def _rand(shape, dtype, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_fused_chain_rounds_like_the_numpy_backend(half):
    """x*2+1, relu, a where over a comparison: each op's result rounded once, so a fused chain
    on cpu is bit-identical to the numpy backend's op by op (and to NumPy on float32 rounded
    after each op)."""
    x, y = _rand((37, 129), half, 1), _rand((129,), half, 2)

    def body(a, b):
        h = a * 2.0 + 1.0
        k = F.relu(h - b) / 3.0
        return cc.where(k > b, k, a * b), h.astype("float32")
    got = cpu(body)(x, y)
    want = ref(body)(x, y)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(bits(g), bits(w))
    x32 = x.astype(F32)
    h = (x32 * 2).astype(half).astype(F32)
    h = (h + 1).astype(half)
    np.testing.assert_array_equal(bits(got[1]), bits(h.astype(F32)))


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_transcendentals_within_one_ulp(half):
    x = _rand((1000,), half, 3)
    for f in (cc.exp, cc.tanh, cc.sin, F.sigmoid, F.gelu, cc.log):
        with np.errstate(all="ignore"):
            got = cpu(lambda t: f(t))(x)
            want = ref(lambda t: f(t))(x)
        assert got.dtype == half
        assert_within_ulps(got, want, half, 1)


# -- reductions, rows, GEMM: float32 (or wider) accumulation, one rounding -------------------------
@pytest.mark.parametrize("half", HALVES, ids=str)
def test_reductions_accumulate_wide_and_round_once(half):
    # 4096 ones down axis 0: a sum kept in bfloat16 between rows would stop at 256 (257 rounds
    # to even), in float16 at 2048
    x = np.ones((4096, 24), half)
    got = cpu(lambda t: (t.sum(axis=0), t.mean(axis=0), t.sum(axis=1), t.sum()))(x)
    assert [g.dtype for g in got] == [half] * 4
    np.testing.assert_array_equal(got[0].astype(F32), np.full(24, 4096, F32))
    np.testing.assert_array_equal(got[1].astype(F32), np.ones(24, F32))
    np.testing.assert_array_equal(got[2].astype(F32), np.full(4096, 24, F32))
    with np.errstate(over="ignore"):  # (float16: inf)
        assert float(got[3]) == float(np.asarray(4096 * 24, F32).astype(half))
    y = _rand((64, 300), half, 4)
    body = lambda t: (t.sum(axis=0), t.sum(axis=1), t.mean(axis=1), t.max(axis=0),  # noqa: E731
                      t.min(axis=1), t.argmax(axis=1), cc.cumsum(t, axis=0),
                      cc.cumsum(t, axis=1), t.prod(axis=0))
    for g, w, name in zip(cpu(body)(y), ref(body)(y), "sum0 sum1 mean1 max0 min1 argmax "
                          "cumsum0 cumsum1 prod0".split()):
        if name in ("max0", "min1", "argmax"):
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:  # a float32 sum rounded once: at most one rounding step apart
            assert_within_ulps(g, w, half, 1)


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_softmax_and_layer_norm_rows(half):
    x = _rand((33, 257), half, 6)
    body = lambda t: (F.softmax(t, axis=-1), F.log_softmax(t, axis=-1),  # noqa: E731
                      F.layer_norm(t, t.shape[-1:]), F.softmax(t, axis=0))
    got, want = cpu(body)(x), ref(body)(x)
    for g, w in zip(got, want):
        assert g.dtype == half
        assert_within_ulps(g, w, half, 1)
    # softmax: the float32 row rounded once (not its exps rounded, then divided)
    x32 = x.astype(F32)
    z = np.exp(x32 - x32.max(axis=-1, keepdims=True))
    assert_within_ulps(got[0], (z / z.sum(axis=-1, keepdims=True)).astype(half), half, 1)


@pytest.mark.parametrize("half", HALVES, ids=str)
@pytest.mark.parametrize("shapes", [((7, 33), (33, 5)), ((3, 40, 64), (64, 48)),
                                    ((2, 16, 8), (2, 8, 12))], ids=str)
def test_matmul_accumulates_in_float32(half, shapes):
    x, y = _rand(shapes[0], half, 7, 1.0), _rand(shapes[1], half, 8, 1.0)
    got = cpu(lambda a, b: a @ b)(x, y)
    assert got.dtype == half
    want = (x.astype(F32) @ y.astype(F32)).astype(half)
    assert_within_ulps(got, want, half, 1)
    got_t = cpu(lambda a, b: b.T @ a.T)(x, y) if len(shapes[0]) == 2 else None
    if got_t is not None:
        assert_within_ulps(got_t, want.T, half, 1)


@pytest.mark.parametrize("backend", ["cpu", "numpy"])
def test_arguments_sharing_a_bfloat16_array(backend):
    """`x @ x` and overlapping slices of one bfloat16 array: one storage of that dtype (its
    dtype string, "<V2", is no dtype to rebuild it from)."""
    a = (np.arange(30).reshape(5, 6) / 7).astype(BF16)
    got = cc.compile(lambda p, q: (p @ q.T, p[1:] * q[:-1]), backend=backend)(a, a)
    a32 = a.astype(F32)
    assert got[0].dtype == BF16 and got[1].dtype == BF16
    assert_within_ulps(got[0], (a32 @ a32.T).astype(BF16), BF16, 1)
    np.testing.assert_array_equal(bits(got[1]), bits((a32[1:] * a32[:-1]).astype(BF16)))


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_conv_and_pool(half):
    x, w = _rand((2, 3, 9, 9), half, 9, 1.0), _rand((4, 3, 3, 3), half, 10, 0.5)

    def body(a, k):
        a = cc.to_tensor(a)
        a.stop_gradient = False
        h = F.max_pool2d(F.conv2d(a, k, padding=1), 2)
        h.sum().backward()
        return h, a.grad
    for g, r in zip(cpu(body)(x, w), ref(body)(x, w)):
        assert g.dtype == half
        assert_within_ulps(g, r, half, 1)


# -- narrow integers -----------------------------------------------------------------------------
def test_int8_and_int16_wrap_as_numpy():
    a = np.array([100, 120, -128, 127, -1, 0, 64], np.int8)
    got = cpu(lambda t: (t + t, t * 3, -t, t - 100))(a)
    with np.errstate(all="ignore"):
        want = (a + a, a * np.int8(3), -a, a - np.int8(100))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w, strict=True)
    s = np.array([30000, -32768, 200, -3], np.int16)
    got = cpu(lambda t: (t * 2, t + 5000, t // 7, t % 7))(s)
    want = (s * np.int16(2), s + np.int16(5000), s // np.int16(7), s % np.int16(7))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w, strict=True)


def test_uint8_is_unsigned():
    """Zero extension into wider types, unsigned compare, division, max/min and casts."""
    a = np.array([200, 100, 255, 0, 1, 128, 37], np.uint8)
    b = np.array([100, 200, 1, 0, 3, 127, 5], np.uint8)

    def body(x, y):
        return (x > y, cc.maximum(x, y), cc.minimum(x, y), x // y, x % y, x + y, x - y,
                x.astype("int32"), x.astype("float32"), x / y, x.sum(), x.max(), x.min(),
                x.astype("int64") * 1000, x.argmax(), x.astype("bfloat16"))
    with np.errstate(all="ignore"):
        want = (a > b, np.maximum(a, b), np.minimum(a, b), a // b, a % b, a + b, a - b,
                a.astype(np.int32), a.astype(F32), (a / b).astype(F32), a.sum(), a.max(),
                a.min(), a.astype(np.int64) * 1000, a.argmax(), a.astype(BF16))
        got = cpu(body)(a, b)
        numpy_backend = ref(body)(a, b)
    for g, w, r in zip(got, want, numpy_backend):
        assert np.asarray(g).dtype == np.asarray(r).dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r).astype(np.asarray(g).dtype))
        np.testing.assert_array_equal(np.asarray(g).astype(F64), np.asarray(w).astype(F64))


# -- plans -------------------------------------------------------------------------------------
def test_uint8_images_normalised_in_the_first_op():
    """`x.astype("float32") / 255` fuses with what follows: no float32 copy of the batch."""
    img = (np.arange(8 * 3 * 16 * 16) * 7 % 256).astype(np.uint8).reshape(8, 3, 16, 16)

    def step(x):
        return (x.astype("float32") / 255 - 0.5) * 2.0
    fn = cpu(step)
    prog = fn.lower(img)
    kinds = [b.kind for b in prog.plan.buffers]
    assert kinds == ["input", "output"], prog.plan.report()
    got = fn(img)
    want = (img.astype(F32) / np.float32(255) - np.float32(0.5)) * np.float32(2)
    np.testing.assert_array_equal(got, want)


def _mlp_step(x, y, w1, b1, w2):
    for p in (w1, b1, w2):
        p.stop_gradient = False
    h = F.relu(x @ w1 + b1)
    loss = F.cross_entropy((h @ w2).astype("float32"), y)
    loss.backward()
    with cc.no_grad():
        for p in (w1, b1, w2):
            p.subtract_(0.05 * p.grad)
    return loss


def _mlp_args(half, batch=64, d=256, hidden=512, classes=10):
    rng = np.random.default_rng(11)
    return (rng.standard_normal((batch, d)).astype(half), rng.integers(0, classes, batch),
            (rng.standard_normal((d, hidden)) / np.sqrt(d)).astype(half),
            np.zeros(hidden, half), (rng.standard_normal((hidden, classes)) / 20).astype(half))


def test_bfloat16_plan_is_about_half_of_float32():
    p16 = cpu(_mlp_step).lower(*_mlp_args(BF16)).plan
    p32 = cpu(_mlp_step).lower(*_mlp_args(F32)).plan
    assert 0.45 <= p16.peak_bytes / p32.peak_bytes <= 0.55, (p16.peak_bytes, p32.peak_bytes)


def test_transformer_step_in_bfloat16():
    """examples/transformer_block.py's step with every array in bfloat16: the plan is half
    the float32 one's bytes, and a step on cpu follows the numpy backend's."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "examples"))
    import transformer_block as tb
    a32 = tb.example_inputs()
    a16 = [a.astype(BF16) for a in a32]
    f = cpu(tb.train_step)
    p16, p32 = f.lower(*a16).plan, f.lower(*a32).plan
    assert 0.49 <= p16.peak_bytes / p32.peak_bytes <= 0.51, (p16.peak_bytes, p32.peak_bytes)
    b_cpu, b_ref = [a.copy() for a in a16], [a.copy() for a in a16]
    l_cpu, l_ref = f(*b_cpu), ref(tb.train_step)(*b_ref)
    assert l_cpu.dtype == BF16
    assert_within_ulps(l_cpu, l_ref, BF16, 1)
    for w_cpu, w_ref in zip(b_cpu[2:], b_ref[2:]):
        assert_within_ulps(w_cpu, w_ref, BF16, 2, extra=1e-4)


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_training_steps_follow_the_numpy_backend(half):
    """Three SGD steps of an MLP in 16 bits: the losses and weights stay within a few half
    ulps of the numpy backend's (GEMM sums in a different order, then one rounding)."""
    a_cpu, a_ref = _mlp_args(half), _mlp_args(half)
    f_cpu, f_ref = cpu(_mlp_step), ref(_mlp_step)
    for _ in range(3):
        l_cpu, l_ref = f_cpu(*a_cpu), f_ref(*a_ref)
        assert abs(float(l_cpu) - float(l_ref)) <= 0.02 * abs(float(l_ref))
    for w_cpu, w_ref in zip(a_cpu[2:], a_ref[2:]):
        assert w_cpu.dtype == half
        assert_within_ulps(w_cpu, w_ref, half, 4, extra=1e-3)


@pytest.mark.parametrize("half", HALVES, ids=str)
def test_threads_do_not_change_results(half):
    a1, a2 = _mlp_args(half, batch=256), _mlp_args(half, batch=256)
    x = _rand((512, 1024), half, 12)
    body = lambda t: (t.sum(axis=1), F.softmax(t, axis=-1), t * 2 + 1, t.sum())  # noqa: E731
    for g1, g2 in zip(cpu(body, threads=1)(x), cpu(body, threads=2)(x)):
        np.testing.assert_array_equal(bits(g1), bits(g2))
    l1 = cpu(_mlp_step, threads=1)(*a1)
    l2 = cpu(_mlp_step, threads=2)(*a2)
    assert bits(l1) == bits(l2)
    for w1, w2 in zip(a1[2:], a2[2:]):
        np.testing.assert_array_equal(bits(w1), bits(w2))


# -- every public op: cpu against the numpy backend ------------------------------------------
# The op database's first sample of each public name with a float32 (int32) argument, that
# argument given as a 16-bit float (a narrow integer): the cpu backend must give the numpy
# backend's dtype and values, integers exactly, halves within 1 ulp (plus, for sums and
# composites, the half's epsilon of the output's scale: a different summation order).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "opdb"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "passes"))
import samples as db  # noqa: E402


def _first_samples(src):
    seen, out = set(), []
    for s in db.SAMPLES:
        if s.writes is None and s.returns is None and s.api not in seen and any(
                isinstance(a, np.ndarray) and a.dtype == src for a in s.args):
            seen.add(s.api)
            out.append(s)
    return out


# The same sample in the same dtype on cpu is a variant tests/opdb/test_opdb_narrow.py runs in
# the default run (against the formula) for most of these: those are marked slow here, and so
# is the 16-bit float that test leaves to the slow run for the API (`native_half`).
from tests.opdb.test_opdb_narrow import NATIVE_DEFAULT, native_half  # noqa: E402


def _broad(s, d):
    slow = (id(s), d) in NATIVE_DEFAULT or (d in HALVES and d != native_half(s.api))
    marks = [pytest.mark.slow] if slow else []
    return pytest.param(s, d, id=f"{d}-{s.id}", marks=marks)


_BROAD = [_broad(s, d) for d in HALVES for s in _first_samples(F32)] + \
         [_broad(s, d) for d in NARROW_INTS for s in _first_samples(np.dtype(np.int32))]


@pytest.mark.parametrize("sample,dtype", _BROAD)
def test_every_public_op_matches_the_numpy_backend(sample, dtype):
    src = F32 if dtype in HALVES else np.dtype(np.int32)

    def args():
        with np.errstate(all="ignore"):
            return [a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype == src else
                    (a.copy() if isinstance(a, np.ndarray) else a) for a in sample.args]
    with np.errstate(all="ignore"):
        try:
            want = ref(sample.fn)(*args())
        except cc.CompilerError:  # the op refuses the dtype: so must the cpu backend
            with pytest.raises(cc.CompilerError):
                cpu(sample.fn)(*args())
            return
        got = cpu(sample.fn)(*args())
    gs, ws = (got, want) if isinstance(want, (tuple, list)) else ((got,), (want,))
    assert len(gs) == len(ws)
    for g, w in zip(gs, ws):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
            continue
        w64 = w.astype(F64)
        scale = float(np.max(np.abs(w64[np.isfinite(w64)]), initial=0.0))
        extra = 0.0 if sample.tol in (db.EXACT, db.ULP) else \
            float(ml_dtypes.finfo(w.dtype).eps) * scale
        assert_within_ulps(g, w, w.dtype, 1, extra)
