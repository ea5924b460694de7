"""16-bit floats and narrow integers at the front and on the numpy reference backend: accepted as
arguments, results, constants and casts; Paddle's promotion; half results are the float32
result rounded once (the rule every backend follows)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.ops.registry import promote

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
F32 = np.dtype(np.float32)


@pytest.mark.parametrize("a,b,want", [
    (BF16, BF16, BF16), (F16, F16, F16), (BF16, F16, F32), (BF16, F32, F32), (F16, np.float64,
                                                                              np.float64),
    (BF16, np.int64, BF16), (np.uint8, BF16, BF16), (np.int8, np.uint8, np.int16),
    (np.uint8, np.int16, np.int16), (np.uint8, np.bool_, np.uint8), (np.int8, np.int32, np.int32),
])
def test_promotion_follows_paddle(a, b, want):
    assert promote(a, b) == np.dtype(want)
    assert promote(b, a) == np.dtype(want)


@pytest.mark.parametrize("dtype", [BF16, F16, np.int8, np.uint8, np.int16])
def test_arguments_results_and_casts(dtype):
    x = (np.arange(12) - 4).reshape(3, 4).astype(dtype) if np.dtype(dtype).kind != "u" \
        else np.arange(12, dtype=dtype).reshape(3, 4)
    fn = cc.compile(lambda t: (t, t.astype("float32"), cc.cast(t * 2, "float64")),
                    backend="numpy")
    same, wide, wider = fn(x)
    assert same.dtype == dtype and np.array_equal(same.astype(F32), x.astype(F32))
    assert wide.dtype == F32 and np.array_equal(wide, x.astype(F32))
    assert wider.dtype == np.float64
    np.testing.assert_array_equal(wider, (x * np.array(2, dtype)).astype(np.float64))


@pytest.mark.parametrize("half", [BF16, F16])
def test_half_ops_are_float32_rounded_once(half):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)).astype(half)
    y = rng.standard_normal((7, 3)).astype(half)

    def body(a, b):
        return cc.exp(a), (a @ b), a.sum(axis=1), F.softmax(a, axis=-1)
    e, m, s, p = cc.compile(body, backend="numpy")(x, y)
    x32, y32 = x.astype(F32), y.astype(F32)
    assert {e.dtype, m.dtype, s.dtype, p.dtype} == {half}
    np.testing.assert_array_equal(e, np.exp(x32).astype(half))
    np.testing.assert_array_equal(m, (x32 @ y32).astype(half))
    np.testing.assert_array_equal(s, x32.sum(axis=1).astype(half))
    # softmax is one registry op: its float32 result rounded once
    z = np.exp(x32 - x32.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(p.astype(F32), (z / z.sum(axis=-1, keepdims=True)).astype(half)
                               .astype(F32), rtol=0, atol=float(np.finfo(F32).eps) * 4
                               + float(ml_dtypes.finfo(half).eps))


def test_bfloat16_cast_rounds_to_nearest_even():
    # 1 + 2**-8 is halfway between two bfloat16 neighbours: even mantissa wins (1.0)
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, np.nan, np.inf, -0.0, 3.4e38], F32)
    got = cc.compile(lambda t: t.astype("bfloat16"), backend="numpy")(x)
    want = x.astype(BF16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert got.astype(F32)[0] == 1.0 and got.astype(F32)[1] == 1 + 2 ** -6


def test_uint8_image_batch_normalised():
    img = np.arange(256, dtype=np.uint8).reshape(4, 64)
    got = cc.compile(lambda t: t.astype("float32") / 255, backend="numpy")(img)
    assert got.dtype == F32
    np.testing.assert_array_equal(got, img.astype(F32) / np.float32(255))


def test_gradients_in_bfloat16():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(BF16)
    w0 = rng.standard_normal((8, 3)).astype(BF16)

    def step(x, w):
        w = cc.to_tensor(w)
        w.stop_gradient = False
        loss = (x @ w).sum()
        loss.backward()
        return w.grad
    g = cc.compile(step, backend="numpy")(x, w0)
    assert g.dtype == BF16
    # d/dw sum(x @ w) = x^T @ ones: float32 sums rounded once
    want = (x.astype(F32).T @ np.ones((4, 3), F32)).astype(BF16)
    np.testing.assert_array_equal(g, want)


def test_narrow_integer_overflow_wraps_as_numpy():
    x = np.array([100, 120, -128], np.int8)
    got = cc.compile(lambda t: t + t, backend="numpy")(x)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, x + x)


def test_overlapping_bfloat16_arguments_keep_their_dtype():
    # found by the random programs: the shared storage of aliased arguments was typed from
    # its dtype's string ('<V2' for bfloat16), a raw void type
    s = np.arange(16, dtype=np.float32).reshape(4, 4).astype(BF16)

    def f(a, e):
        e.add_(1.0)
        return -a
    out = cc.compile(f, backend="numpy")(s[0:3], s[1:4])
    assert out.dtype == BF16
    want = np.arange(16, dtype=np.float32).reshape(4, 4)
    want[1:4] += 1
    np.testing.assert_array_equal(out.astype(F32), -want[0:3])
    np.testing.assert_array_equal(s.astype(F32), want)
