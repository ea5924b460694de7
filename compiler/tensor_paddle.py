"""Tensor methods Paddle users reach for that are compositions of registry ops (issue 24):
`clone`, `var`, `std`, `logsumexp`, `flip`, `any`, `all`, `isnan`, `isinf`, `isfinite`, `tile`,
`where` / `where_` (Paddle binds them with the tensor as the *condition*), and integer-tensor
indexing (`x[idx]` gathers, `x[idx] = v` scatters through the traced write-back).

Each is built from registry ops, so it fuses, differentiates and runs natively on every
backend without a kernel of its own. `install(Tensor)` adds them to the class (compiler.tensor
calls it before the argument check wraps every public method).
"""
from __future__ import annotations

import numbers

import numpy as np

from . import tracer as _tr
from .errors import ShapeError, TraceError
from .ops import BOOL
from .ops.registry import dkind, normalize_axes


def _float_only(x, what: str):
    # Paddle's var/std/logsumexp take float16/32/64 only; an integer input is refused, not cast.
    if dkind(x.dtype) != "f":
        raise TraceError(f"{what} needs a floating-point tensor, not {x.dtype}: cast it first "
                         "(x.cast('float32'))", _tr.user_loc())


def _axes(x, axis) -> tuple[int, ...]:
    """The reduced axes (all for None), the ShapeError naming the user's line."""
    try:
        axes = normalize_axes(axis, x.ndim)  # a 0-d tensor takes axis 0 or -1 (Paddle)
        return axes if x.ndim else ()
    except ShapeError as e:
        raise ShapeError(e.bare_message, _tr.user_loc()) from None


def _count(x, axes) -> int:
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def _full(x, shape, value, dtype):
    return type(x)._fresh(x._tracer.emit("full", [], {"shape": tuple(shape), "value": value,
                                                      "dtype": np.dtype(dtype)}))


# -- copies and reversals ---------------------------------------------------------------------
def clone(self):
    """A copy that keeps the gradient path (Paddle's `clone`): writes to it don't reach self."""
    return self._op("contiguous")


def flip(self, axis):
    """Reversed along `axis` (an int or a list of them), as a new tensor (Paddle copies)."""
    axes = set(_axes(self, [axis] if isinstance(axis, numbers.Integral) else list(axis)))
    if not self.ndim:
        return self._op("contiguous")
    index = tuple(("s", None, None, -1) if i in axes else ("s", None, None, None)
                  for i in range(self.ndim))
    return self.slice_index(index)._op("contiguous")


def tile(self, repeat_times):
    """Paddle's `tile`: the shorter of the shape and `repeat_times` is padded with leading 1s;
    each dimension d becomes r * d (a broadcast copy, reshaped)."""
    if isinstance(repeat_times, type(self)):
        raise TraceError("tile: repeat_times must be a list of Python ints (a traced tensor "
                         "would make the result's shape data-dependent)", _tr.user_loc())
    reps = [repeat_times] if isinstance(repeat_times, numbers.Integral) else list(repeat_times)
    if not all(isinstance(r, numbers.Integral) and not isinstance(r, bool) for r in reps):
        raise TraceError(f"tile: repeat_times must be ints, not {list(reps)}", _tr.user_loc())
    reps = [int(r) for r in reps]
    if any(r < 0 for r in reps):
        raise ShapeError(f"tile: repeat_times {reps} has a negative entry", _tr.user_loc())
    n = max(len(reps), self.ndim)
    reps = [1] * (n - len(reps)) + reps
    shape = [1] * (n - self.ndim) + self.shape
    lifted = self.reshape_to([d for s in shape for d in (1, s)])
    wide = lifted.broadcast_to([d for r, s in zip(reps, shape) for d in (r, s)])
    return wide.reshape_to([r * s for r, s in zip(reps, shape)])


# -- statistics -------------------------------------------------------------------------------
def var(self, axis=None, unbiased=True, keepdim=False):
    """Paddle's `var`: the divisor is N - 1 with `unbiased` (but 1 where N <= 1, so one
    element has variance 0, not NaN as in PyTorch), N without."""
    _float_only(self, "var")
    axes = _axes(self, axis)
    n = _count(self, axes)
    d = self - self.mean(axis, keepdim=True)
    s = (d * d).sum(axis, keepdim=bool(keepdim))
    divisor = (n - 1 if n > 1 else 1) if unbiased else n
    return s / float(divisor) if divisor != 1 else s


def std(self, axis=None, unbiased=True, keepdim=False):
    """sqrt(var): at zero variance the gradient is NaN (0 * inf), as in Paddle and PyTorch."""
    _float_only(self, "std")
    return var(self, axis, unbiased, keepdim).sqrt()


def logsumexp(self, axis=None, keepdim=False):
    """log(sum(exp(x))) shifted by the (detached) maximum, so large values don't overflow; a
    row that is all -inf gives -inf and one holding +inf gives +inf (the shift is 0 there)."""
    _float_only(self, "logsumexp")
    axes = _axes(self, axis)
    if _count(self, axes) == 0:  # no maximum to shift by; the empty sum is 0: -inf
        return self.exp().sum(axis, keepdim=bool(keepdim)).log()
    m = self.max(axis, keepdim=True).detach()
    m = m.isfinite()._select(m, 0)
    out = (self - m).exp().sum(axis, keepdim=bool(keepdim)).log()
    return out + (m if keepdim else m.reshape_to(out.shape))


def _select(cond, x, y):
    """where(cond, x, y) with y a scalar of x's dtype."""
    return type(x)._fresh(x._tracer.emit("where", [cond._v(), x._v(), x._operand(y)], {}))


# -- truth values -----------------------------------------------------------------------------
def _truth(x):
    return x if x.dtype == BOOL else x != 0


def any_(self, axis=None, keepdim=False):
    """Whether any element (along `axis`) is nonzero; an empty reduction is False."""
    _axes(self, axis)
    return _truth(self).sum(axis, keepdim=bool(keepdim)) > 0


def all_(self, axis=None, keepdim=False):
    """Whether every element (along `axis`) is nonzero; an empty reduction is True."""
    _axes(self, axis)
    return _truth(self).logical_not().sum(axis, keepdim=bool(keepdim)) == 0


def isnan(self):
    if dkind(self.dtype) != "f":
        return _full(self, self.shape, False, BOOL)
    return self != self


def isinf(self):
    if dkind(self.dtype) != "f":
        return _full(self, self.shape, False, BOOL)
    return self.abs() == float("inf")


def isfinite(self):
    if dkind(self.dtype) != "f":
        return _full(self, self.shape, True, BOOL)
    return self.abs() < float("inf")  # NaN compares false


# -- where, bound as Paddle binds it: the tensor is the condition -----------------------------
def where(self, x, y):
    """`cond.where(x, y)` is `cc.where(cond, x, y)` (Paddle's method binding)."""
    T = type(self)
    like = x if isinstance(x, T) else y if isinstance(y, T) else None
    if like is None:  # two scalars or arrays: x as cc.to_tensor makes it
        x = like = T._fresh(self._operand(x))
    xv = x._v() if isinstance(x, T) else like._operand(x)
    yv = y._v() if isinstance(y, T) else like._operand(y)
    return T._fresh(self._tracer.emit("where", [self._v(), xv, yv], {}))


def where_(self, x, y):
    """`cond.where_(x, y)` is `cc.where_(cond, x, y)`: writes into (and returns) `x`."""
    if not isinstance(x, type(self)):
        raise TraceError("where_ writes into x, which must be a Tensor", _tr.user_loc())
    return x._write_where(self.logical_not(), y, "where_")


# -- integer-tensor indexing ------------------------------------------------------------------
MASK_READ = ("x[mask] has a data-dependent shape (one element per true value; Paddle's "
             "masked_select), which a static graph can't express: use cc.where(mask, x, 0) "
             "(its static cousin), or x[mask] = value to write")


def _is_index_array(item, T) -> bool:
    return isinstance(item, (T, np.ndarray)) or (
        isinstance(item, list) and not any(isinstance(i, (list, tuple, slice)) or i is None
                                           or i is Ellipsis for i in item))


def split_advanced(self, idx):
    """For an index holding one integer tensor (or integer array or list): (the basic index
    with that entry replaced by a full slice, the axis of the basic view it indexes, the index
    tensor). None for a basic index. Masks in a tuple, several index tensors, or an int beside
    one (NumPy would move the dimensions) are refused."""
    items = idx if isinstance(idx, tuple) else (idx,)
    found = [k for k, item in enumerate(items) if _is_index_array(item, type(self))]
    if not found:
        return None
    T = type(self)
    tensors = []
    for k in found:
        item = items[k]
        if not isinstance(item, T):
            item = np.asarray(item)
            if dkind(item.dtype) == "f" and item.size == 0:
                item = item.astype(np.int64)  # `x[[]]`: NumPy reads an empty list as ints
            item = T._fresh(self._operand(item))  # a captured constant (cc.to_tensor)
        if item.dtype == BOOL:
            raise TraceError(MASK_READ, _tr.user_loc())
        if dkind(item.dtype) not in "iu":
            raise TraceError(f"tensor indices must be integers (a gather) or bool (a mask), "
                             f"not {item.dtype}", _tr.user_loc())
        tensors.append(item)
    if len(found) > 1:
        raise TraceError("only one integer tensor index per subscript is supported: index in "
                         "steps (x[i][:, j])", _tr.user_loc())
    if any(isinstance(i, numbers.Integral) for i in items):
        raise TraceError("an int beside an integer tensor index is not supported (NumPy moves "
                         "the dimensions): index in steps (x[0][idx])", _tr.user_loc())
    k = found[0]
    # Every entry before it is a slice, None or an Ellipsis: the output dimensions before
    # the indexed one.
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    axis = sum(max(self.ndim - consumed, 0) if i is Ellipsis else 1 for i in items[:k])
    basic = list(items)
    basic[k] = slice(None)
    return tuple(basic), axis, tensors[0]


def gather_index(self, basic_view, axis, index):
    """`x[..., idx, ...]`: index_select along `axis` of the basic view, the index's shape in
    place of that dimension (Paddle, NumPy)."""
    if basic_view.ndim == 0:
        raise ShapeError("too many indices for a tensor of rank 0", _tr.user_loc())
    flat = index.reshape_to([index.size])
    out = basic_view.index_select(flat, axis)
    shape = basic_view.shape[:axis] + index.shape + basic_view.shape[axis + 1:]
    return out if out.shape == shape else out.reshape_to(shape)


def scatter_index(self, basic_view, axis, index, value):
    """`x[..., idx, ...] = value`: put_along_axis (assign: a repeated index keeps the last
    value, as NumPy) into the basic view, written back through its views onto x's storage."""
    if basic_view.ndim == 0:
        raise ShapeError("too many indices for a tensor of rank 0", _tr.user_loc())
    basic_view._check_writable("__setitem__")
    loc = _tr.user_loc()
    region = basic_view.shape[:axis] + index.shape + basic_view.shape[axis + 1:]
    v = type(self)._fresh(self._operand(value))
    if v.dtype != self.dtype:
        v = v.cast(self.dtype)
    try:
        fits = list(np.broadcast_shapes(tuple(v.shape), tuple(region))) == region
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"x[idx] = y: y of shape {v.shape} doesn't broadcast to the indexed "
                         f"shape {region}", loc)
    if v.shape != region:
        v = v.broadcast_to(region)
    n = index.size
    rest = basic_view.shape[axis + 1:]
    v = v.reshape_to(basic_view.shape[:axis] + [n] + rest)
    flat = index.reshape_to([1] * axis + [n] + [1] * len(rest))
    if 0 in v.shape:  # put_along_axis broadcasts an index dim of 1 against x's 0 to 1
        flat = flat.broadcast_to(v.shape)
    basic_view._put(flat, v, axis, "assign", inplace=True)
    return self


def install(Tensor):
    for name, fn in (("clone", clone), ("flip", flip), ("tile", tile), ("var", var),
                     ("std", std), ("logsumexp", logsumexp), ("any", any_), ("all", all_),
                     ("isnan", isnan), ("isinf", isinf), ("isfinite", isfinite),
                     ("where", where), ("where_", where_), ("_select", _select),
                     ("_split_advanced", split_advanced), ("_gather_index", gather_index),
                     ("_scatter_index", scatter_index)):
        setattr(Tensor, name, fn)
