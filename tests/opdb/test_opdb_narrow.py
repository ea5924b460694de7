"""The sample database again in 16-bit floats and narrow integers (issue 26), on every available
backend: `narrow.py` derives the variants and says what each expects."""
from __future__ import annotations

import os
import sys
import zlib

import numpy as np
import pytest

import compiler as cc

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "passes"))
import narrow  # noqa: E402

from tests.backends import AVAILABLE  # noqa: E402
from tests.opdb.test_opdb import (ALL_SAMPLES, _copies, _layout_copy, _traced,  # noqa: E402
                                  _unique, assert_half_matches)

F32 = np.dtype(np.float32)


# In the default run the numpy backend runs the first NUMPY_FIRST variants of each API and
# dtype set and one in NUMPY_EVERY of the rest (every other variant is marked slow); a native
# backend the first FIRST and one in EVERY of the rest, and (marked slow) one more in EVERY
# halfway between those; of the half variants, only those in the API's `native_half` (the
# other 16-bit float's: slow). OPDB_ALL_SAMPLES=1: all, none marked.
NUMPY_FIRST, NUMPY_EVERY = 1, 8
FIRST, EVERY = 1, 24

# (id of the float32/int32 sample, narrow dtype) of the variants the cpu backend runs in the
# default run: tests/runtime/test_cpu_half.py leaves the same checks to the slow run.
NATIVE_DEFAULT: set = set()


def native_half(api: str):
    """The one 16-bit float a native backend runs `api`'s half variants in, in the default run
    (the other: slow). Both compute in float32; the dtype changes only the conversions at the
    loads and stores, which every op shares, so each half still runs in about half the APIs
    (a stable choice by the API's name). Narrow integers compute in their own type (wrapping,
    unsigned division): all three stay."""
    return narrow.HALVES[zlib.crc32(api.encode()) % len(narrow.HALVES)]


def _params(samples):
    ids = _unique([s.id for s in samples])
    seen: dict = {}
    out = []
    for s, i in zip(samples, ids):
        key = (s.api, tuple(sorted({a.dtype.name for a in s.args if isinstance(a, np.ndarray)})))
        k = seen[key] = seen.get(key, -1) + 1
        origin, dtype = narrow.ORIGIN[id(s)]
        other_half = dtype in narrow.HALVES and dtype != native_half(s.api)
        for backend in AVAILABLE:
            first, every = (NUMPY_FIRST, NUMPY_EVERY) if backend == "numpy" else (FIRST, EVERY)
            if backend != "numpy" and other_half and not ALL_SAMPLES:
                if k < first or k % EVERY in (0, EVERY // 2):
                    out.append(pytest.param(s, backend, id=f"{i}-{backend}",
                                            marks=pytest.mark.slow))
            elif ALL_SAMPLES or k < first or k % every == 0:
                out.append(pytest.param(s, backend, id=f"{i}-{backend}"))
                if backend == "cpu":
                    NATIVE_DEFAULT.add((id(origin), dtype))
            elif backend == "numpy" or k % EVERY == EVERY // 2:
                out.append(pytest.param(s, backend, id=f"{i}-{backend}",
                                        marks=pytest.mark.slow))
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
