"""The sample database again in 16-bit floats and narrow integers (issue 26), on every available
backend: `narrow.py` derives the variants and says what each expects."""
from __future__ import annotations

import os
import sys

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
from compiler.ops import is_half

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "passes"))
import narrow  # noqa: E402
import samples as db  # noqa: E402

from tests.backends import AVAILABLE  # noqa: E402
from tests.opdb.test_opdb import (ALL_SAMPLES, CLOSE_RTOL, SUM_EPS, _copies,  # noqa: E402
                                  _layout_copy, _traced, _unique, assert_matches)

F32 = np.dtype(np.float32)


def half_spacing(w: np.ndarray, half) -> np.ndarray:
    """The gap between `|w|` (float64 values of a `half` dtype) and the next larger `half`."""
    fi = ml_dtypes.finfo(half)
    a = np.maximum(np.abs(w), float(fi.tiny))
    return np.maximum(np.exp2(np.floor(np.log2(a))) * float(fi.eps),
                      float(fi.smallest_subnormal))


def assert_half_matches(got, want, tol, terms=None, what="output"):
    """1 ulp of the 16-bit dtype beyond the op's float32 tolerance (`narrow.py` says why)."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, type(want)) and len(got) == len(want), (type(got), got)
        terms = terms if isinstance(terms, (tuple, list)) else [terms] * len(want)
        for i, (g, w, t) in enumerate(zip(got, want, terms)):
            assert_half_matches(g, w, tol, t, f"{what}[{i}]")
        return
    want = np.asarray(want)
    if not is_half(want.dtype):
        assert_matches(got, want, tol, terms, what)
        return
    assert isinstance(got, np.ndarray), f"{what}: got a {type(got).__name__}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaNs")
    inf = np.isinf(w)
    np.testing.assert_array_equal(g[inf], w[inf], err_msg=f"{what}: infinities")
    fin = np.isfinite(w)
    g, w = g[fin], w[fin]
    bound = half_spacing(w, want.dtype)
    if tol == db.SUM and terms is not None:
        t = np.broadcast_to(np.asarray(terms, np.float64), want.shape)[fin]
        # a sum's float32 terms and partial sums are exact enough; its one rounding is not
        # relative to the result but to the terms (cancellation), as each addend's own was
        bound = bound + (float(ml_dtypes.finfo(want.dtype).eps) + SUM_EPS[F32]) * t
    elif tol == db.CLOSE:
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        eps = float(ml_dtypes.finfo(want.dtype).eps)
        bound = bound + (4 * eps + CLOSE_RTOL[F32]) * (np.abs(w) + scale)
    bad = ~(np.abs(g - w) <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements beyond 1 ulp of "
                           f"{want.dtype} ({tol}); got {g[bad][:5]}, want {w[bad][:5]}")


# The numpy backend runs every variant; a native backend the first FIRST of each API and dtype
# and one in EVERY of the rest (OPDB_ALL_SAMPLES=1: all).
FIRST, EVERY = 1, 12


def _params(samples):
    ids = _unique([s.id for s in samples])
    seen: dict = {}
    out = []
    for s, i in zip(samples, ids):
        key = (s.api, tuple(sorted({a.dtype.name for a in s.args if isinstance(a, np.ndarray)})))
        k = seen[key] = seen.get(key, -1) + 1
        for backend in AVAILABLE:
            if backend == "numpy" or ALL_SAMPLES or k < FIRST or k % EVERY == 0:
                out.append(pytest.param(s, backend, id=f"{i}-{backend}"))
    return out


def check(sample, backend):
    with np.errstate(all="ignore"):
        want = sample.want(*_copies(sample.args))
    terms = sample.terms(*_copies(sample.args)) if sample.terms else None
    args = [_layout_copy(a) for a in sample.args]
    out = cc.compile(_traced(sample, {}), backend=backend)(*args)
    assert_half_matches(out, want, sample.tol, terms)
    for i, (before, after) in enumerate(zip(sample.args, args)):
        if isinstance(before, np.ndarray) and i != sample.writes:
            assert np.array_equal(after.astype(np.float64), before.astype(np.float64),
                                  equal_nan=True), f"argument {i} was written"
        elif i == sample.writes:
            assert_half_matches(after, want, sample.tol, terms, "the caller's array afterwards")


@pytest.mark.parametrize("sample,backend", _params(narrow.HALF_SAMPLES))
def test_half_value(sample, backend):
    check(sample, backend)


@pytest.mark.parametrize("sample,backend", _params(narrow.INT_SAMPLES))
def test_narrow_int_value(sample, backend):
    check(sample, backend)


def test_variant_counts():
    """Every float32 op sample has its half forms, and int32 ones their narrow forms."""
    assert len(narrow.HALF_SAMPLES) > 4000
    assert len(narrow.INT_SAMPLES) > 1000
    apis = {s.api for s in narrow.HALF_SAMPLES}
    for api in ("Tensor.sin", "cc.matmul", "F.softmax", "Tensor.sum", "F.layer_norm",
                "F.cross_entropy", "F.conv2d"):
        assert api in apis, api
