"""Narrow-dtype variants of the sample database (issue 26): every sample over float32 arrays
again with float16 and bfloat16 arrays, and every sample over int32 arrays whose values fit again
with int8, uint8 and int16 arrays.

A 16-bit float is a storage type: an op computes in float32 and rounds its result once to the
16-bit dtype (round to nearest even). So a half variant's expected value is the float32 sample's
own NumPy formula applied to the widened (exact) inputs, its float32 results rounded once; the
check allows 1 ulp of the 16-bit dtype on top of the op's float32 tolerance (a compiled backend
keeps float32 between the ops of a fused chain, where the reference rounds after each op).

A narrow integer variant's expected value is the sample's NumPy formula applied to the narrow
arrays themselves (NumPy's int8/uint8/int16 semantics: wrap-around, NumPy's promotion).
"""
from __future__ import annotations

import dataclasses
import numbers

import ml_dtypes
import numpy as np

import samples as db
from compiler.ops import dkind

F32 = np.dtype(np.float32)
HALVES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
NARROW_INTS = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16))

# Samples whose API fixes the result dtype (a cast, a creation with `dtype=`): the float32 formula
# says nothing about their half form.
_FIXED_DTYPE = ("cast", "astype", "to_tensor", "zeros", "ones", "full", "empty", "arange",
                "linspace", "eye", "rand", "one_hot", "numel", "argsort", "argmax", "argmin",
                "nonzero", "shape", "isnan", "isinf", "isfinite", "Layer", "nn.", "save", "load")


# Random fills of an integer tensor (a cast of float draws), and `scale`, whose factors are the
# formula's own int32 constants (a negative one doesn't fit uint8: refused at trace time).
_INT_DRAWS = ("Tensor.uniform_", "Tensor.normal_")


def _arrays(sample):
    return [a for a in sample.args if isinstance(a, np.ndarray)]


def _converted(a, dtype):
    """`a` as `dtype` in the same layout (a non-contiguous caller array stays so)."""
    out = np.empty_like(a, dtype=dtype)
    with np.errstate(over="ignore"):  # float32 extremes become infinities
        out[...] = a.astype(dtype)
    return out


def _half_want(sample, half):
    def want(*args):
        wide = [a.astype(F32) if isinstance(a, np.ndarray) and a.dtype == half else a
                for a in args]
        with np.errstate(all="ignore"):
            got = sample.want(*wide)
        return _round(got, half)
    return want


def _round(got, half):
    if isinstance(got, (tuple, list)):
        return type(got)(_round(g, half) for g in got)
    got = np.asarray(got)
    return got.astype(half) if got.dtype == F32 else got


def _terms(sample, half):
    if sample.terms is None:
        return None

    def terms(*args):
        return sample.terms(*[a.astype(F32) if isinstance(a, np.ndarray) and a.dtype == half
                              else a for a in args])
    return terms


# id(variant) -> (the sample it was made from, the dtype its float32/int32 arrays became)
ORIGIN: dict = {}


def half_variants(samples) -> list:
    out = []
    for s in samples:
        arrays = _arrays(s)
        if not arrays or s.always or any(k in s.api for k in _FIXED_DTYPE):
            continue
        if any(dkind(a.dtype) == "f" and a.dtype != F32 for a in arrays) \
                or not any(a.dtype == F32 for a in arrays):
            continue
        for half in HALVES:
            args = tuple(_converted(a, half) if isinstance(a, np.ndarray) and a.dtype == F32
                         else a for a in s.args)
            out.append(dataclasses.replace(s, args=args, want=_half_want(s, half),
                                           terms=_terms(s, half), grad=False, grad_want=None,
                                           wrt=None))
            ORIGIN[id(out[-1])] = (s, half)
    return out


def _fits(values, dtype) -> bool:
    info = np.iinfo(dtype)
    return values.size == 0 or (int(values.min()) >= info.min and int(values.max()) <= info.max)


def int_variants(samples) -> list:
    out = []
    i32 = np.dtype(np.int32)
    for s in samples:
        arrays = _arrays(s)
        if not arrays or s.always or any(k in s.api for k in _FIXED_DTYPE):
            continue
        if not any(a.dtype == i32 for a in arrays) \
                or any(a.dtype.kind in "iu" and a.dtype != i32 for a in arrays):
            continue
        scalars = [a for a in s.args if isinstance(a, numbers.Integral)
                   and not isinstance(a, bool)]
        for dtype in NARROW_INTS:
            if not all(_fits(a, dtype) for a in arrays if a.dtype == i32) \
                    or not all(_fits(np.array([v]), dtype) for v in scalars):
                continue
            args = tuple(_converted(a, dtype) if isinstance(a, np.ndarray) and a.dtype == i32
                         else a for a in s.args)
            if "scalar=" in s.label or s.api in _INT_DRAWS or not _formula_runs(s, args) \
                    or (dtype.kind == "u" and s.api.endswith("scale")):
                continue  # (the formula closes over int32 scalars, or refuses these values)
            out.append(dataclasses.replace(s, args=args, grad=False, grad_want=None, wrt=None))
            ORIGIN[id(out[-1])] = (s, dtype)
    return out


def _formula_runs(sample, args) -> bool:
    try:
        with np.errstate(all="ignore"):
            sample.want(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    except (OverflowError, ValueError, TypeError):
        return False
    return True


HALF_SAMPLES = half_variants(db.SAMPLES)
INT_SAMPLES = int_variants(db.SAMPLES)
