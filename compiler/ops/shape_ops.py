"""Reductions, matmul, views, scatters, concat and creation ops."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import DataError, ShapeError, TraceError
from .registry import (CREATION, ELEMENTWISE, dkind, MATMUL, OTHER, REDUCTION, SCATTER, VIEW,
                       broadcast_shapes, defop, normalize_axes, promote)

# -- reductions ----------------------------------------------------------------------------


def reduced_shape(shape, axis, keepdim):
    axes = normalize_axes(axis, len(shape))
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_infer(dtype_rule):
    def infer(types, axis=None, keepdim=False):
        shape, dtype = types[0]
        return reduced_shape(shape, axis, keepdim), dtype_rule(dtype)
    return infer


def _sum_dtype(d):
    return d if dkind(d) == "f" else np.dtype(np.int64)


def _mean_dtype(d):
    return d if dkind(d) == "f" else np.dtype(np.float32)


def _kept(ctx, t):
    """`t` (a reduction's output or its gradient) reshaped to keep the reduced axes as 1."""
    shape = reduced_shape(ctx.inputs[0].shape, ctx.attrs["axis"], True)
    return t.reshape_to(shape)


def _sum_vjp(ctx, g):
    return (_kept(ctx, g).broadcast_to(ctx.inputs[0].shape),)


def _mean_vjp(ctx, g):
    shape = ctx.inputs[0].shape
    count = math.prod(shape[a] for a in normalize_axes(ctx.attrs["axis"], len(shape)))
    # No elements averaged: the input gradient is empty, any factor will do.
    return (_kept(ctx, g * (1.0 / max(count, 1))).broadcast_to(shape),)


def _max_vjp(ctx, g):
    # Ties share the gradient equally, as PyTorch's amax does.
    x = ctx.inputs[0]
    mask = (x == _kept(ctx, ctx.out)).cast(g.dtype)
    count = mask.sum(axis=ctx.attrs["axis"], keepdim=True)
    return (mask * (_kept(ctx, g) / count),)


def _axes(axis):
    return None if axis is None else tuple(axis)


def _reduction(fn, dtype_rule=None):
    """(ref, into) of a NumPy reduction: the same call, once with `out=`."""
    def kwargs(x, axis, keepdim):
        kw = dict(axis=_axes(axis), keepdims=keepdim)
        if dtype_rule is not None:
            kw["dtype"] = dtype_rule(x.dtype)
        return kw

    def ref(x, axis=None, keepdim=False):
        return fn(x, **kwargs(x, axis, keepdim))

    def into(out, x, axis=None, keepdim=False):
        fn(x, out=out, **kwargs(x, axis, keepdim))
    return ref, into


_sum_ref, _sum_into = _reduction(np.sum, _sum_dtype)
_mean_ref, _mean_into = _reduction(np.mean, _mean_dtype)
_max_ref, _max_into = _reduction(np.max)
defop("sum", REDUCTION, _reduce_infer(_sum_dtype), _sum_ref, into=_sum_into,
      vjp={"none": _sum_vjp})
defop("mean", REDUCTION, _reduce_infer(_mean_dtype), _mean_ref, into=_mean_into,
      vjp={"none": _mean_vjp})
def _extremum_infer(op, what):
    """max/min keep the dtype; over an empty axis they are undefined (a trace-time error)."""
    def infer(types, axis=None, keepdim=False):
        shape, dtype = types[0]
        if any(shape[a] == 0 for a in normalize_axes(axis, len(shape)) if len(shape)):
            raise ShapeError(f"{op} over an axis of size 0 (shape {list(shape)}): the {what} "
                             "of no elements is undefined")
        return reduced_shape(shape, axis, keepdim), dtype
    return infer


_max_infer = _extremum_infer("max", "maximum")


defop("max", REDUCTION, _max_infer, _max_ref, into=_max_into,
      vjp={"input+output": _max_vjp})

# -- matmul (operands of rank >= 2; the tracer lifts rank-1 operands) ----------------------


def _matmul_infer(types):
    (sa, da), (sb, db) = types
    if len(sa) < 2 or len(sb) < 2:
        raise ShapeError("matmul operands must have rank >= 2 here")
    if sa[-1] != sb[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {list(sa)} @ {list(sb)}")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    return batch + (sa[-2], sb[-1]), promote(da, db)


def _swap_last(t):
    perm = list(range(t.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return t.transpose(perm)


def _matmul_vjp(ctx, g):
    x, y = ctx.inputs
    gx = g.matmul(_swap_last(y)) if ctx.needs_grad[0] else None
    if not ctx.needs_grad[1]:
        return gx, None
    if y.ndim == 2 and x.ndim > 2:
        # A 2-D weight under batched operands: fold the batch into one GEMM
        # ([b*t, k].T @ [b*t, n]) instead of a [b, k, n] product summed over b (ARCHITECTURE.md §4);
        # a plain 2-D matmul is what GEMM-accumulate can fold into the weight's update.
        # (literal shapes: a -1 can't be inferred when k or n is 0, and the user-facing
        # reshape reads a 0 as "keep this dimension")
        k, n = y.shape
        rows = math.prod(g.shape[:-1])
        return gx, x.reshape_to([rows, k]).t().matmul(g.reshape_to([rows, n]))
    return gx, _swap_last(x).matmul(g)


def _matmul_into(out, x, y):
    if not x.dtype == y.dtype == out.dtype:
        return NotImplemented  # the reference multiplies in NumPy's promoted dtype
    np.matmul(x, y, out=out)


defop("matmul", MATMUL, _matmul_infer, np.matmul, vjp={"input": _matmul_vjp},
      into=_matmul_into)


# -- gemm: c' = beta * c + alpha * op(a) @ op(b), op = transpose when trans_* (BLAS's GEMM) --
# Made by `cc.addmm` and by the GEMM-accumulate pass (a weight update `w -= lr * (a @ b)`
# becomes gemm(a, b, w, alpha=-lr, beta=1) writing into w: no gradient buffer).


def _gemm_infer(types, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    (sa, da), (sb, db), (sc, dc) = types
    if len(sa) != 2 or len(sb) != 2:
        raise ShapeError("gemm operands must be matrices")
    m, k = sa[::-1] if trans_a else sa
    k2, n = sb[::-1] if trans_b else sb
    if k != k2:
        raise ShapeError(f"gemm: inner dimensions differ: {k} and {k2}")
    if tuple(sc) != (m, n):
        raise ShapeError(f"gemm: the accumulator is {list(sc)}, the product [{m}, {n}]")
    dtype = promote(da, db, dc)
    if dkind(dtype) != "f":
        raise ShapeError("gemm computes in a float dtype")
    return (m, n), dtype


# The product is made a block of rows at a time (each block at most this many bytes), so the
# numpy executor writes the result into its planned place (the weight) without a temporary of
# the gradient's size; the reference is the same computation, so the two agree bit for bit.
GEMM_BLOCK_BYTES = 16 * 1024


def _gemm_into(out, a, b, c, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    dtype = out.dtype
    x = (a.T if trans_a else a).astype(dtype, copy=False)
    y = (b.T if trans_b else b).astype(dtype, copy=False)
    rows = max(1, GEMM_BLOCK_BYTES // max(1, out.shape[1] * dtype.itemsize))
    for i in range(0, out.shape[0], rows):
        p = np.matmul(x[i:i + rows], y)
        if alpha != 1.0:
            np.multiply(p, dtype.type(alpha), out=p)
        cr = c[i:i + rows] if beta == 1.0 else c[i:i + rows] * dtype.type(beta)
        np.add(cr, p, out=out[i:i + rows], casting="unsafe")


def _gemm_ref(a, b, c, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    (m, n), dtype = _gemm_infer([(a.shape, a.dtype), (b.shape, b.dtype), (c.shape, c.dtype)],
                                alpha, beta, trans_a, trans_b)
    out = np.empty((m, n), dtype)
    _gemm_into(out, a, b, c, alpha, beta, trans_a, trans_b)
    return out


def _gemm_vjp(ctx, g):
    a, b, c = ctx.inputs
    alpha, beta = ctx.attrs["alpha"], ctx.attrs["beta"]
    ta, tb = ctx.attrs["trans_a"], ctx.attrs["trans_b"]
    ga = gb = None
    if ctx.needs_grad[0]:   # d op(a) = alpha * g @ op(b).T
        ga = g.matmul(b if tb else b.t()).scale(alpha)
        ga = ga.t() if ta else ga
    if ctx.needs_grad[1]:   # d op(b) = alpha * op(a).T @ g
        gb = (a if ta else a.t()).matmul(g).scale(alpha)
        gb = gb.t() if tb else gb
    gc = g.scale(beta) if ctx.needs_grad[2] else None
    return ga, gb, gc


defop("gemm", MATMUL, _gemm_infer, _gemm_ref, vjp={"input": _gemm_vjp}, overwrites=(2,),
      into=_gemm_into)

# -- views: the output shares the input's storage ------------------------------------------


def _reshape_infer(types, shape):
    (s, d), = types
    if int(np.prod(shape, dtype=np.int64)) != int(np.prod(s, dtype=np.int64)):
        raise ShapeError(f"can't reshape {list(s)} into {list(shape)}")
    return tuple(shape), d


defop("reshape", VIEW, _reshape_infer, lambda x, shape: x.reshape(shape),
      vjp={"none": lambda ctx, g: (g.reshape_to(ctx.inputs[0].shape),)})


def _transpose_infer(types, perm):
    (s, d), = types
    if sorted(perm) != list(range(len(s))):
        raise ShapeError(f"transpose: {list(perm)} is not a permutation of {len(s)} axes")
    return tuple(s[p] for p in perm), d


defop("transpose", VIEW, _transpose_infer, lambda x, perm: np.transpose(x, perm),
      vjp={"none": lambda ctx, g: (g.transpose(list(np.argsort(ctx.attrs["perm"]))),)})


def numpy_index(index):
    """The canonical slice index (tuple of ("i", k) / ("s", start, stop, step) / ("n",))
    as a numpy basic index."""
    out = []
    for entry in index:
        if entry[0] == "i":
            out.append(entry[1])
        elif entry[0] == "s":
            out.append(slice(*entry[1:]))
        else:
            out.append(None)
    # A trailing Ellipsis makes numpy return a 0-d *view*, not a scalar copy, for all-int
    # indices: a slice must alias its base.
    return tuple(out) + (Ellipsis,)


def _probe(shape):
    """A zero-byte stand-in array of `shape` for computing index results."""
    return np.broadcast_to(np.zeros((), np.uint8), shape)


def _slice_infer(types, index):
    (s, d), = types
    return _probe(s)[numpy_index(index)].shape, d


def _slice_vjp(ctx, g):
    x = ctx.inputs[0]
    return (g.zeros_like_shape(x.shape).slice_scatter(g, ctx.attrs["index"]),)


defop("slice", VIEW, _slice_infer, lambda x, index: x[numpy_index(index)],
      vjp={"none": _slice_vjp}, doc="basic indexing: ints, slices, None")


def _expand_infer(types, shape):
    (s, d), = types
    out = broadcast_shapes(s, tuple(shape))
    if out != tuple(shape):
        raise ShapeError(f"can't expand {list(s)} to {list(shape)}")
    return out, d


defop("expand", VIEW, _expand_infer, lambda x, shape: np.broadcast_to(x, shape),
      vjp={"none": lambda ctx, g: (g,)},
      doc="a stride-0 view: never written through")
defop("detach", VIEW, lambda types: types[0], lambda x: x,
      doc="shares storage, drops the gradient")

# -- scatter: a copy of input 0 with a region replaced by input 1 ----------------------------


def _slice_scatter_infer(types, index):
    (sb, db), (ss, ds) = types
    region = _probe(sb)[numpy_index(index)].shape
    if tuple(ss) != region:
        raise ShapeError(f"can't write a value of shape {list(ss)} into a region of shape "
                         f"{list(region)}")
    return tuple(sb), db


def _slice_scatter_ref(base, src, index):
    out = base.copy()
    out[numpy_index(index)] = src
    return out


def _slice_scatter_vjp(ctx, g):
    index = ctx.attrs["index"]
    src = ctx.inputs[1]
    g_base = g.slice_scatter(g.zeros_like_shape(src.shape), index) if ctx.needs_grad[0] \
        else None
    g_src = g.slice_index(index) if ctx.needs_grad[1] else None
    return g_base, g_src


def _slice_scatter_into(out, base, src, index):
    if out is not base:  # (in place over its base, only the region is written)
        np.copyto(out, base)
    out[numpy_index(index)] = src


defop("slice_scatter", SCATTER, _slice_scatter_infer, _slice_scatter_ref,
      into=_slice_scatter_into,
      vjp={"none": _slice_scatter_vjp}, doc="base with base[index] = src")

# -- concat -------------------------------------------------------------------------------


def _concat_infer(types, axis):
    shapes = [t[0] for t in types]
    rank = len(shapes[0])
    ax = normalize_axes(axis, rank)[0]
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0]))
                                 if i != ax):
            raise ShapeError("concat: shapes " + ", ".join(str(list(s)) for s in shapes)
                             + f" differ outside axis {axis}")
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    return tuple(out), promote(*[t[1] for t in types])


def _concat_vjp(ctx, g):
    ax = normalize_axes(ctx.attrs["axis"], g.ndim)[0]
    grads, start = [], 0
    for x, needed in zip(ctx.inputs, ctx.needs_grad):
        stop = start + x.shape[ax]
        index = tuple(("s", start, stop, 1) if i == ax else ("s", None, None, None)
                      for i in range(g.ndim))
        grads.append(g.slice_index(index) if needed else None)
        start = stop
    return tuple(grads)


def _concat_into(out, *xs, axis):
    if any(x.dtype != out.dtype for x in xs):
        return NotImplemented  # the reference joins in NumPy's promoted dtype
    np.concatenate(xs, axis=axis, out=out)


defop("concat", OTHER, _concat_infer, lambda *xs, axis: np.concatenate(xs, axis=axis),
      vjp={"none": _concat_vjp}, into=_concat_into)

# -- creation ------------------------------------------------------------------------------
def _full_infer(types, shape, value, dtype):
    if any(int(d) < 0 for d in shape):
        raise ShapeError(f"negative dimension in {list(shape)}")
    dtype = np.dtype(dtype)
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) \
            and dtype.kind in "iu" and not np.iinfo(dtype).min <= int(value) <= np.iinfo(dtype).max:
        # `int32_tensor + 2**40`: NumPy would raise OverflowError mid-run, C would wrap.
        raise TraceError(f"the Python int {int(value)} doesn't fit the tensor's dtype {dtype} "
                         f"(range {np.iinfo(dtype).min} to {np.iinfo(dtype).max}); cast the "
                         "tensor to a wider dtype first")
    with np.errstate(all="ignore"):
        np.asarray(value).astype(dtype)  # a value the dtype can't hold raises here, not mid-run
    return tuple(shape), np.dtype(dtype)


defop("full", CREATION, _full_infer, lambda shape, value, dtype: np.full(shape, value, dtype=dtype),
      into=lambda out, shape, value, dtype: np.copyto(out, value, casting="unsafe"))


# `fill`: `full` over the value it replaces (issue 27 item 4). `x.fill_(v)`, `x.zero_()` and
# `x[i] = v` (a scalar) write `v` over x: as an elementwise op on x's old value (which it
# ignores), marked inplace of it, the reinplace pass gives the result x's own buffer, as for
# `scale_`: no new buffer, even for a caller's array. `value` is checked and cast as `full`
# checks and casts it; the scalar expression is full's (compiler.ops.elementwise.expr_for).
defop("fill", ELEMENTWISE,
      lambda types, value: (tuple(types[0][0]),
                            _full_infer((), (), value, types[0][1])[1]),
      lambda x, value: np.full(x.shape, value, dtype=x.dtype),
      into=lambda out, x, value: np.copyto(out, value, casting="unsafe"),
      # no VJP: the result doesn't depend on x's values (not differentiable, as `full`)
      doc="fill(x, value): x's shape and dtype, every element value (fill_, zero_, x[i] = v)")


def _arange_len(start, stop, step):
    return max(0, math.ceil((stop - start) / step))


# Element i is start + i * step computed in float64 (exact for integer bounds), then cast to
# the dtype (PyTorch's rule): numpy's arange with float bounds and an integer dtype steps by
# int(start + step) - int(start) instead.
def _arange_exact(start, stop, step) -> bool:
    return all(isinstance(v, (int, np.integer)) for v in (start, stop, step))


def _arange_into(out, start, stop, step, dtype, scratch):
    # The reference's int64 or float64 steps in scratch, then one cast; 0, 1, 2, ... made
    # by a cumulative sum of ones (exact in both).
    (acc,) = scratch
    acc.fill(1)
    acc[:1] = 0
    np.cumsum(acc, out=acc)
    if _arange_exact(start, stop, step):
        np.add(np.multiply(acc, step, out=acc), start, out=acc)
    else:
        np.add(np.multiply(acc, float(step), out=acc), float(start), out=acc)
    np.copyto(out, acc, casting="unsafe")


defop("arange", CREATION,
      lambda types, start, stop, step, dtype: ((_arange_len(start, stop, step),),
                                               np.dtype(dtype)),
      lambda start, stop, step, dtype: (
          np.arange(_arange_len(start, stop, step), dtype=np.int64) * step + start
          if _arange_exact(start, stop, step)
          else np.arange(_arange_len(start, stop, step)) * float(step) + float(start)
      ).astype(dtype),
      into=_arange_into,
      scratch=lambda types, out, start, stop, step, dtype: [
          (out[0], np.int64 if _arange_exact(start, stop, step) else np.float64)])
defop("constant", CREATION, lambda types, value: (value.shape, value.dtype),
      lambda value: value.copy(), doc="data captured at trace time (to_tensor)",
      into=lambda out, value: np.copyto(out, value))


# -- issue 10: more reductions --------------------------------------------------------------
def _min_vjp(ctx, g):
    return _max_vjp(ctx, g)  # the same rule: ties share the gradient equally


_min_infer = _extremum_infer("min", "minimum")


defop("min", REDUCTION, _min_infer,
      lambda x, axis=None, keepdim=False: np.min(x, axis=_axes(axis), keepdims=keepdim),
      vjp={"input+output": _min_vjp})


def _prod_vjp(ctx, g):
    """d prod / d x_i is the product of the other elements, written without dividing by a
    zero: with no zero in the slice it is prod / x_i; with exactly one, the product of the
    nonzero elements at the zero and 0 elsewhere; with more, 0 everywhere."""
    x, axis = ctx.inputs[0], ctx.attrs["axis"]
    zero = x == 0.0
    nonzero = x.where_mask(zero.logical_not()) + zero.cast(x.dtype)  # zeros replaced by 1
    p = nonzero.prod(axis=axis, keepdim=True)
    zeros = zero.cast(x.dtype).sum(axis=axis, keepdim=True)
    others = (p / nonzero).where_mask(zeros == 0.0) \
        + p.where_mask(zero.logical_and(zeros == 1.0))
    return (others * _kept(ctx, g),)


defop("prod", REDUCTION, _reduce_infer(_sum_dtype),
      lambda x, axis=None, keepdim=False: np.prod(x, axis=_axes(axis), keepdims=keepdim,
                                                  dtype=_sum_dtype(x.dtype)),
      vjp={"input": _prod_vjp})


def _arg_infer(types, axis, keepdim):
    shape, _ = types[0]
    if axis is None:
        if 0 in shape:
            raise ShapeError("argmax/argmin of an empty tensor")
        return ((1,) * len(shape) if keepdim else ()), np.dtype(np.int64)
    (ax,) = normalize_axes(axis, len(shape))
    if len(shape) and shape[ax] == 0:
        raise ShapeError(f"argmax/argmin over an axis of size 0 (shape {list(shape)})")
    return reduced_shape(shape, ax, keepdim), np.dtype(np.int64)


def _arg_ref(fn):
    def ref(x, axis, keepdim):
        if axis is None:
            out = np.asarray(fn(x.reshape(-1)), np.int64)
            return out.reshape((1,) * x.ndim) if keepdim else out
        return np.asarray(fn(x, axis=axis, keepdims=keepdim), np.int64)
    return ref


# The first extreme wins a tie (NumPy, PyTorch, Paddle); axis=None indexes the flattened tensor.
defop("argmax", REDUCTION, _arg_infer, _arg_ref(np.argmax))
defop("argmin", REDUCTION, _arg_infer, _arg_ref(np.argmin))


# -- issue 10: scans ------------------------------------------------------------------------
def _cumsum_infer(types, axis):
    shape, dtype = types[0]
    normalize_axes(axis, len(shape))
    return tuple(shape), _sum_dtype(dtype)


def _cumsum_vjp(ctx, g):
    # The gradient of a prefix sum is the suffix sum of the gradient: reverse, scan, reverse.
    ax = normalize_axes(ctx.attrs["axis"], g.ndim)[0] if g.ndim else None
    if ax is None:
        return (g,)
    rev = tuple(("s", None, None, -1) if i == ax else ("s", None, None, None)
                for i in range(g.ndim))
    return (g.slice_index(rev).primitive("cumsum", axis=ax).slice_index(rev),)


defop("cumsum", OTHER, _cumsum_infer,
      lambda x, axis: np.cumsum(x, axis=axis, dtype=_sum_dtype(x.dtype)) if x.ndim
      else x.astype(_sum_dtype(x.dtype)),
      vjp={"none": _cumsum_vjp}, inplace="cumsum_")


# -- issue 10: gathers and scatters along one axis (integer indices are data) --------------
def _index_check(what, shape, dtype, index_types):
    for s, d in index_types:
        if dkind(d) not in "iu":
            raise ShapeError(f"{what}: indices must be integers, not {d}")


def _index_select_infer(types, axis):
    (sx, dx), (si, di) = types
    _index_check("index_select", sx, dx, [(si, di)])
    if len(si) != 1:
        raise ShapeError(f"index_select: the index must be 1-D, not of shape {list(si)}")
    (ax,) = normalize_axes(axis, len(sx))
    if len(sx) == 0:
        raise ShapeError("index_select of a 0-d tensor")
    return tuple(sx[:ax]) + (si[0],) + tuple(sx[ax + 1:]), dx


def _wrap_index(index, size):
    """Negative indices count from the end (NumPy, PyTorch). An index outside [-size, size)
    raises `DataError`; the tracer registers a `DataCheck` for each such node, so the driver
    runs the program on private copies of the arguments it mutates (ARCHITECTURE.md §4)."""
    index = np.asarray(index, np.int64)
    bad = (index < -size) | (index >= size)
    if bad.any():
        pos = [int(i) for i in np.argwhere(bad)[0]]
        raise DataError(f"index {int(index[tuple(pos)])} at position {pos} is out of range "
                        f"for an axis of size {size}")
    return np.where(index < 0, index + size, index)


def _index_select_ref(x, index, axis):
    return np.take(x, _wrap_index(index, x.shape[axis]), axis=axis)


def _index_select_vjp(ctx, g):
    x, index = ctx.inputs
    zeros = g.zeros_like_shape(x.shape)
    return (zeros.primitive("index_add", index, g, axis=ctx.attrs["axis"]), None)


defop("index_select", OTHER, _index_select_infer, _index_select_ref,
      vjp={"input": _index_select_vjp}, doc="x taken at `index` along `axis` (a gather)")


def _index_add_infer(types, axis):
    (sx, dx), (si, di), (sv, dv) = types
    _index_check("index_add", sx, dx, [(si, di)])
    want, _ = _index_select_infer([(sx, dx), (si, di)], axis)
    if tuple(sv) != want:
        raise ShapeError(f"index_add: the value of shape {list(sv)} doesn't match the indexed "
                         f"shape {list(want)}")
    return tuple(sx), dx


def _index_add_ref(x, index, value, axis):
    out = x.copy()
    idx = _wrap_index(index, x.shape[axis])
    moved = np.moveaxis(out, axis, 0)
    np.add.at(moved, idx, np.moveaxis(value.astype(x.dtype, copy=False), axis, 0))
    return out


def _index_add_vjp(ctx, g):
    x, index, value = ctx.inputs
    return (g if ctx.needs_grad[0] else None, None,
            g.primitive("index_select", index, axis=ctx.attrs["axis"])
            if ctx.needs_grad[2] else None)


defop("index_add", OTHER, _index_add_infer, _index_add_ref, vjp={"input": _index_add_vjp},
      inplace="index_add_", doc="x with value[i] added at index[i] along axis (scatter-add)")


def _along_infer(types, axis, **attrs):
    (sx, dx), (si, di) = types[:2]
    _index_check("take_along_axis", sx, dx, [(si, di)])
    if len(si) != len(sx):
        raise ShapeError(f"indices of rank {len(si)} for a tensor of rank {len(sx)}")
    (ax,) = normalize_axes(axis, len(sx))
    for i, (a, b) in enumerate(zip(sx, si)):
        if i != ax and b not in (1, a) and a != 1:
            raise ShapeError(f"indices of shape {list(si)} don't broadcast with {list(sx)} "
                             f"outside axis {ax}")
    return ax


def _take_infer(types, axis):
    ax = _along_infer(types, axis)
    (sx, dx), (si, _) = types
    shape = tuple(si[i] if i == ax else max(a, b) for i, (a, b) in enumerate(zip(sx, si)))
    return shape, dx


def _along_index(x_shape, index, ax):
    """Full index arrays for `x[...]` along `ax` with `index`: outside `ax`, x and the index
    broadcast against each other (NumPy's take_along_axis), so a dim of size 1 in x is read
    (or, for put_along_axis, written) at position 0 by every index along it."""
    index = _wrap_index(index, x_shape[ax])
    shape = tuple(index.shape[i] if i == ax else max(x_shape[i], index.shape[i])
                  for i in range(len(x_shape)))
    index = np.broadcast_to(index, shape)
    grids = [g if x_shape[i] == shape[i] else np.zeros_like(g)
             for i, g in enumerate(np.indices(shape, sparse=True))]
    grids[ax] = index
    return tuple(grids), shape


def _take_ref(x, index, axis):
    grids, _ = _along_index(x.shape, index, axis)
    return x[grids]


def _take_vjp(ctx, g):
    x, index = ctx.inputs
    zeros = g.zeros_like_shape(x.shape)
    return (zeros.primitive("put_along_axis", index, g, axis=ctx.attrs["axis"], reduce="add"),
            None)


defop("take_along_axis", OTHER, _take_infer, _take_ref, vjp={"input": _take_vjp})


def _put_infer(types, axis, reduce):
    if reduce not in ("assign", "add"):
        raise ShapeError(f"put_along_axis: reduce={reduce!r} is not 'assign' or 'add'")
    ax = _along_infer(types, axis)
    (sx, dx), (si, _), (sv, dv) = types
    region = tuple(si[i] if i == ax else max(a, b) for i, (a, b) in enumerate(zip(sx, si)))
    if broadcast_shapes(sv, region) != region:
        raise ShapeError(f"put_along_axis: values of shape {list(sv)} don't broadcast to the "
                         f"indexed shape {list(region)}")
    return tuple(sx), dx


def _put_ref(x, index, values, axis, reduce):
    out = x.copy()
    grids, shape = _along_index(x.shape, index, axis)
    values = np.broadcast_to(values.astype(x.dtype, copy=False), shape)
    if reduce == "add":
        np.add.at(out, grids, values)
    else:
        out[grids] = values  # with repeated indices, the last write wins (NumPy)
    return out


def _put_vjp(ctx, g):
    x, index, values = ctx.inputs
    axis = ctx.attrs["axis"]
    gx = None
    if ctx.needs_grad[0]:
        gx = g if ctx.attrs["reduce"] == "add" else g.primitive(
            "put_along_axis", index, g.zeros_like_shape(()), axis=axis, reduce="assign")
    gv = g.primitive("take_along_axis", index, axis=axis) if ctx.needs_grad[2] else None
    return gx, None, gv


defop("put_along_axis", OTHER, _put_infer, _put_ref, vjp={"input": _put_vjp},
      inplace="put_along_axis_",
      doc="x with values written (reduce='assign') or added ('add') at indices along axis")
