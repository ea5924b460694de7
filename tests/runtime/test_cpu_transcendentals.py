"""The cpu backend's generated (vectorisable) transcendental functions: log (float32 and
float64), tanh, sin, cos, tan and erf (float32), erf (float64), instead of libm calls that keep
loops scalar.

CONVENTIONS.md's tolerances: within 4 ulp of NumPy per element. Checked over dense sweeps with the
edge cases: +-0, +-inf, NaN, subnormals, huge arguments, values next to multiples of pi/2 (the
hard cases of argument reduction); and against an independent oracle (Python's `math` in
float64, rounded to float32: the generated float32 code computes in float64, so it must stay
within 1 ulp of that), so that NumPy's own error (up to 3 ulp here) can't hide ours.
"""
import math

import numpy as np
import pytest

import compiler as cc
from tests.runtime.test_cpu_backend import ulp_distance

F32_MAX = float(np.finfo(np.float32).max)


def _pio2_neighbours(n=2000):
    """float32 values next to k pi/2 (k up to ~1e37): where reduction cancels the most."""
    k = np.unique(np.round(np.geomspace(1, 1e37, n)))
    near = (k * (np.pi / 2)).astype(np.float32)
    return np.concatenate([near, np.nextafter(near, np.float32(0)),
                           np.nextafter(near, np.float32(np.inf))])


def _sweep(dtype, lo, hi, positive=False):
    tiny = np.finfo(dtype).smallest_subnormal
    big = np.finfo(dtype).max
    with np.errstate(over="ignore"):  # geomspace's last step overshoots float64's max
        dense_log = np.geomspace(float(tiny), float(big), 20001)
    parts = [np.linspace(lo, hi, 60001), np.linspace(-1, 1, 20001), dense_log,
             [np.nan, np.inf, -np.inf, 0.0, -0.0, float(tiny), 1e-40, 1.0, np.pi / 2, np.pi,
              1e10, float(big), float(np.finfo(dtype).tiny)]]
    x = np.concatenate(parts).astype(dtype)
    if not positive:
        x = np.concatenate([x, -x])
    if dtype == np.float32 and not positive:
        x = np.concatenate([x, _pio2_neighbours(), -_pio2_neighbours()])
    return x


def _oracle(name, x):
    """math's function in float64 per element, rounded to x's dtype (NaN where undefined)."""
    fn = getattr(math, name)
    out = np.empty(x.shape, np.float64)
    for i, v in enumerate(x.astype(np.float64)):
        try:
            out[i] = fn(v)
        except (ValueError, OverflowError):
            out[i] = np.nan
    return out.astype(x.dtype)


CASES = [("log", np.float32), ("log", np.float64), ("tanh", np.float32),
         ("sin", np.float32), ("cos", np.float32), ("tan", np.float32)]
LIBM_NAME = {("log", np.float32): "logf", ("log", np.float64): "@log(",
             ("tanh", np.float32): "tanhf", ("sin", np.float32): "sinf",
             ("cos", np.float32): "cosf", ("tan", np.float32): "tanf"}


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{np.dtype(d).name}" for n, d in CASES])
def test_generated_function_is_within_4_ulp_of_numpy_and_vectorises(name, dtype):
    x = _sweep(dtype, -100.0, 100.0)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
    prog = cc.compile(lambda t: getattr(t, name)(), backend="cpu", sanitize=True).lower(x)
    got = prog(x)
    assert got.dtype == want.dtype
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert ulp_distance(got, want).max() <= 4
    defined = ~np.isnan(want)  # NaN's sign bit is not specified
    assert np.array_equal(np.signbit(got[defined]), np.signbit(want[defined]))
    # against an independent oracle: at most 1 ulp from math's value (finite inputs)
    fin = np.isfinite(x) & ~((name == "log") & (x <= 0))
    assert ulp_distance(got[fin], _oracle(name, x[fin])).max() <= 1
    ir_text = prog._exec.optimized_ir
    assert "vector.body" in ir_text
    assert LIBM_NAME[(name, dtype)] not in ir_text  # no libm call left


def test_special_values_are_ieee():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    def run(f):
        return cc.compile(f, backend="cpu")(x)
    with np.errstate(all="ignore"):
        for f, name in ((lambda t: t.log(), "log"), (lambda t: t.sin(), "sin"),
                        (lambda t: t.cos(), "cos"), (lambda t: t.tan(), "tan"),
                        (lambda t: t.tanh(), "tanh")):
            got, want = run(f), getattr(np, name)(x)
            np.testing.assert_array_equal(got, want, err_msg=name)
            ok = ~np.isnan(want)
            assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok])), name


def test_float64_log_of_subnormals_and_extremes():
    tiny = np.finfo(np.float64).smallest_subnormal
    x = np.array([tiny, 2 * tiny, 1e-310, 2.2250738585072014e-308, 1 - 2 ** -53, 1.0,
                  1 + 2 ** -52, np.finfo(np.float64).max, 0.0, -0.0, -tiny, np.inf, np.nan])
    with np.errstate(all="ignore"):
        want = np.log(x)
    got = cc.compile(lambda t: t.log(), backend="cpu")(x)
    assert ulp_distance(got, want).max() <= 1
    assert np.array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))


def test_generated_float64_erf_is_within_4_ulp_of_the_reference():
    # the reference (and NumPy, which has no erf) is Python's math.erf per element
    x = np.concatenate([np.linspace(-7, 7, 100001), np.linspace(-1e-3, 1e-3, 2001),
                        np.geomspace(1e-320, 10, 3001), -np.geomspace(1e-320, 10, 3001),
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 6.0, 1.0 - 2 ** -53,
                         5e-324, 1e300, -1e300]])
    want = np.array([math.erf(v) if v == v else v for v in x])
    prog = cc.compile(lambda t: t.erf(), backend="cpu", sanitize=True).lower(x)
    got = prog(x)
    assert ulp_distance(got, want).max() <= 4
    assert np.array_equal(np.signbit(got), np.signbit(want))
    ir_text = prog._exec.optimized_ir
    assert "vector.body" in ir_text and "@erf(" not in ir_text


def test_float32_erf_is_computed_at_float32_width_within_4_ulp_over_2_to_24_values():
    """2^24 float32 values: half uniform over all bit patterns (both signs, subnormals, +-inf,
    NaNs, huge values), half uniform over the bit patterns of [2^-30, 4.5] (where erf is neither
    x * 2/sqrt(pi) nor +-1) with random signs; against Python's float64 erf rounded to float32."""
    rng = np.random.default_rng(25)
    n = 1 << 21
    lo, hi = (int(np.float32(v).view(np.uint32)) for v in (2.0 ** -30, 4.5))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.0, -1.0,
                         np.nextafter(np.float32(1), np.float32(0)), 3.92, 4.0, F32_MAX],
                        np.float32)
    prog = cc.compile(lambda t: t.erf(), backend="cpu").lower(np.zeros(n, np.float32))
    worst = 0
    for chunk in range(8):
        if chunk % 2:
            bits = rng.integers(lo, hi, n, dtype=np.uint32)
            bits |= rng.integers(0, 2, n, dtype=np.uint32) << np.uint32(31)
        else:
            bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        if chunk == 0:
            x[:len(specials)] = specials
        with np.errstate(invalid="ignore"):  # casting NaNs
            want = np.array([math.erf(v) for v in x.astype(np.float64).tolist()])
            want = want.astype(np.float32)
        got = prog(x)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok]))  # -0 stays -0
        worst = max(worst, int(ulp_distance(got[ok], want[ok]).max()))
    assert worst <= 4
    ir_text = prog._exec.optimized_ir
    # vectorised, in float32 lanes, no float64 anywhere and no libm call
    assert "vector.body" in ir_text and "x float>" in ir_text
    assert "double" not in ir_text and "@erff(" not in ir_text
