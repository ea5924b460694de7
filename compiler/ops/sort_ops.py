"""Sorting (issue 24): one primitive, `argsort` along one axis.

`sort`, `argsort` and `topk` (compiler/tensor.py) are built on it: values are a gather by the
indices (`take_along_axis`, whose VJP gives the gradient), `topk` takes the first k indices.
The order is a total one, pinned on every backend (CONVENTIONS.md):

  - stable: equal elements keep their order along the axis, ascending and descending alike
    (-0.0 and +0.0 are equal);
  - NaN counts as greater than every number (NumPy's sort: NaN last when ascending), so a
    descending sort puts NaNs first, in their original order.

The native kernels (runtime/cpu/sort_kernels.py, runtime/gpu/emitter.py) are a bottom-up merge
sort of the row's indices in the node's workspace (the registry's `scratch`, placed by the
memory planner): int64 words, as many as the output has elements and at least 3 rows' worth.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from .registry import OTHER, defop, dkind, normalize_axes


def _argsort_infer(types, axis, descending):
    shape, dtype = types[0]
    normalize_axes(axis, len(shape))
    if dkind(dtype) not in "fiu":
        raise ShapeError(f"argsort: {dtype} tensors can't be sorted (floats and integers can)")
    return tuple(shape), np.dtype(np.int64)


def _argsort_ref(x, axis, descending):
    if x.ndim == 0:
        return np.zeros((), np.int64)
    (ax,) = normalize_axes(axis, x.ndim)
    if not descending:
        return np.argsort(x, axis=ax, kind="stable").astype(np.int64, copy=False)
    # Descending and stable, NaN first: the stable ascending order of the reversed row, read
    # backwards (equal elements then come out in their original order), mapped back.
    n = x.shape[ax]
    rev = np.argsort(np.flip(x, ax), axis=ax, kind="stable")
    return (n - 1 - np.flip(rev, ax)).astype(np.int64, copy=False)


def _argsort_into(out, x, axis, descending, scratch):
    # (the scratch is the native kernels' workspace; NumPy needs none)
    out[...] = _argsort_ref(x, axis, descending)


def _argsort_scratch(types, out, axis, descending):
    """int64 words: the gpu's second index buffer for every row (one thread per row), and at
    least 3 rows' worth, which the cpu (one row at a time) uses for a contiguous copy of the
    row's keys and two contiguous index rows."""
    (shape, _), size = types[0], int(np.prod(out[0], dtype=np.int64))
    n = shape[normalize_axes(axis, len(shape))[0]] if shape else 1
    return [((max(size, 3 * n),), np.int64)]


defop("argsort", OTHER, _argsort_infer, _argsort_ref, into=_argsort_into,
      scratch=_argsort_scratch,
      doc="indices that sort x along `axis` (stable; NaN greater than every number)")
