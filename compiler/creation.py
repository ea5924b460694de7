"""Tensor creation and module-level functions (`cc.add(x, y)`, `cc.concat([...])`, ...)."""
from __future__ import annotations

import numbers

import numpy as np

from . import tracer as _tr
from .errors import ShapeError, TraceError
from .ops.registry import DEFAULT_FLOAT
from .tensor import Tensor, _is_scalar, check_dtype, random_tensor, to_tensor, user_errors

__all__ = ["to_tensor", "zeros", "ones", "full", "arange", "zeros_like", "ones_like",
           "full_like", "concat", "where", "where_", "stack", "rand", "randn", "eye", "linspace"]


def _dtype(dtype, default=DEFAULT_FLOAT):
    d = np.dtype(default if dtype is None else dtype)
    check_dtype(d)
    return d


def _shape(shape):
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def full(shape, fill_value, dtype=None) -> Tensor:
    """Paddle's rule: without a dtype, the result is float32 (a bool fill gives bool)."""
    if dtype is None and isinstance(fill_value, (bool, np.bool_)):
        dtype = np.bool_
    return Tensor._fresh(_tr.current().emit(
        "full", [], {"shape": _shape(shape), "value": fill_value, "dtype": _dtype(dtype)}))


def zeros(shape, dtype=None) -> Tensor:
    return full(shape, 0.0, _dtype(dtype))


def ones(shape, dtype=None) -> Tensor:
    return full(shape, 1.0, _dtype(dtype))


def full_like(x: Tensor, fill_value, dtype=None) -> Tensor:
    return full(x.shape, fill_value, x.dtype if dtype is None else dtype)


def zeros_like(x: Tensor, dtype=None) -> Tensor:
    return full_like(x, 0, dtype)


def ones_like(x: Tensor, dtype=None) -> Tensor:
    return full_like(x, 1, dtype)


def arange(start=0, end=None, step=1, dtype=None) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        dtype = np.int64 if ints else DEFAULT_FLOAT
    if step == 0:
        raise TraceError("arange: step must not be 0", _tr.user_loc())
    return Tensor._fresh(_tr.current().emit(
        "arange", [], {"start": start, "stop": end, "step": step, "dtype": _dtype(dtype)}))


def _as_tensor(x) -> Tensor:
    return x if isinstance(x, Tensor) else to_tensor(x)


def concat(xs, axis=0) -> Tensor:
    xs = [_as_tensor(x) for x in xs]
    if not xs:
        raise TraceError("concat of an empty list", _tr.user_loc())
    tracer = xs[0]._tracer
    return Tensor._fresh(tracer.emit("concat", [x._v() for x in xs], {"axis": int(axis)}))


def where(condition, x, y) -> Tensor:
    cond = _as_tensor(condition)
    like = x if isinstance(x, Tensor) else y if isinstance(y, Tensor) else None
    if like is None:
        x, y = to_tensor(x), to_tensor(y)
        like = x
    xv = x._v() if isinstance(x, Tensor) else like._operand(x)
    yv = y._v() if isinstance(y, Tensor) else like._operand(y)
    return Tensor._fresh(cond._tracer.emit("where", [cond._v(), xv, yv], {}))


def rand(shape, dtype=None, seed=0) -> Tensor:
    """Numbers uniform in [0, 1) from Philox: `seed` a 0-d uint64 tensor (an argument: a new
    seed doesn't retrace) or an int; the same seed gives the same numbers on every backend."""
    dtype = _dtype(dtype)
    out = random_tensor(_shape(shape), dtype, seed, "uniform", "cc.rand")
    return out if out.dtype == dtype else out.cast(dtype)


def randn(shape, dtype=None, seed=0) -> Tensor:
    """Standard normal numbers from Philox (Box-Muller); see `rand`."""
    dtype = _dtype(dtype)
    out = random_tensor(_shape(shape), dtype, seed, "normal", "cc.randn")
    return out if out.dtype == dtype else out.cast(dtype)


def where_(condition, x, y) -> Tensor:
    """Paddle's `where_`: `x = where(condition, x, y)` in place; returns `x`."""
    if not isinstance(x, Tensor):
        raise TraceError("where_ writes into x, which must be a Tensor", _tr.user_loc())
    return x._write_where(_as_tensor(condition).logical_not(), y, "where_")


def stack(xs, axis=0) -> Tensor:
    """`xs` (same shapes) joined along a new axis: `concat` of each unsqueezed."""
    xs = [_as_tensor(x) for x in xs]
    if not xs:
        raise TraceError("stack of an empty list", _tr.user_loc())
    if any(x.shape != xs[0].shape for x in xs):
        raise ShapeError("stack: shapes " + ", ".join(str(x.shape) for x in xs) + " differ",
                         _tr.user_loc())
    rank = xs[0].ndim + 1
    if not -rank <= int(axis) < rank:
        raise ShapeError(f"stack: axis {axis} is out of range for a result of rank {rank}",
                         _tr.user_loc())
    ax = int(axis) % rank
    return concat([x.unsqueeze(ax) for x in xs], axis=ax)


# -- issue 24: eye, linspace (Paddle's signatures) ------------------------------------------------
def _count(value, what, name):
    if isinstance(value, (Tensor, bool)) or not isinstance(value, numbers.Integral) \
            or int(value) < 0:
        raise TraceError(f"{name}: {what} must be a non-negative Python int, got {value!r}",
                         _tr.user_loc())
    return int(value)


def eye(num_rows, num_columns=None, dtype=None, name=None) -> Tensor:
    """Paddle's `eye`: a [num_rows, num_columns] matrix (square without num_columns), ones on
    the diagonal; float32 by default. Composed of arange and a comparison, so every backend
    runs it as an elementwise loop."""
    n = _count(num_rows, "num_rows", "eye")
    m = n if num_columns is None else _count(num_columns, "num_columns", "eye")
    d = _dtype(dtype)
    return (arange(n).unsqueeze(1) == arange(m).unsqueeze(0)).cast(d)


def linspace(start, stop, num, dtype=None, name=None) -> Tensor:
    """Paddle's `linspace`: `num` values from `start` to `stop`, both included (`num == 1`:
    `[start]`); float32 by default. `start` and `stop` may be Python numbers or 0-d tensors
    (a new value then doesn't retrace). As Paddle's kernel, in float64 with
    `step = (stop - start) / (num - 1)`: the first half counts up from `start`
    (`start + step * i`), the second down from `stop` (`stop - step * (num - 1 - i)`), so both
    ends are exact; then cast to the dtype (truncation for integers)."""
    count = _count(num, "num", "linspace")
    d = _dtype(dtype)
    f64 = np.dtype(np.float64)

    def end(v, what):
        if isinstance(v, Tensor):
            if v.size != 1:
                raise ShapeError(f"linspace: {what} must hold one value, got shape {v.shape}",
                                 _tr.user_loc())
            return v.reshape([]).cast(f64)
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TraceError(f"linspace: {what} must be a number or a Tensor, got {v!r}",
                             _tr.user_loc())
        return full([], float(v), f64)
    lo, hi = end(start, "start"), end(stop, "stop")
    if count == 1:
        return lo.reshape([1]).cast(d)
    i = arange(count, dtype=f64)
    step = (hi - lo) / float(max(count - 1, 1))
    up = lo + step * i
    down = hi - step * (float(count - 1) - i)
    return where(i < float(count // 2), up, down).cast(d)


# Paddle's functional spellings of Tensor methods: cc.add(x, y), cc.sin(x), cc.reshape(x, s)...
METHOD_FUNCTIONS = (
    "add", "subtract", "multiply", "divide", "pow", "scale", "abs", "neg", "exp", "log", "sin",
    "cos", "tan", "tanh", "sigmoid", "sqrt", "square", "clip", "maximum", "minimum",
    "greater_than", "less_than", "greater_equal", "less_equal", "equal", "not_equal",
    "logical_and", "logical_or", "logical_not", "sum", "mean", "max", "matmul", "reshape",
    "transpose", "t", "flatten", "squeeze", "unsqueeze", "expand", "cast", "detach", "sign",
    "erf", "relu", "broadcast_to", "asinh", "acosh", "atanh", "floor_divide", "remainder",
    "numel", "addmm", "floor", "ceil", "round", "trunc", "reciprocal", "rsqrt", "expm1", "log1p",
    "log2", "log10", "sinh", "cosh", "asin", "acos", "atan", "lerp", "logical_xor", "min",
    "prod", "argmax", "argmin", "cumsum", "index_select", "gather", "index_add",
    "take_along_axis", "put_along_axis", "masked_fill", "tril", "triu", "split", "chunk",
    # issue 24 (compiler/tensor_paddle.py)
    "clone", "var", "std", "logsumexp", "flip", "any", "all", "isnan", "isinf", "isfinite",
    "tile",
)


def _method_function(name):
    def fn(x, *args, **kwargs):
        if _is_scalar(x) and args and isinstance(args[0], Tensor):
            x = args[0].full_like_value(x)
        return getattr(_as_tensor(x), name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"`cc.{name}(x, ...)` is `x.{name}(...)`."
    return fn


def _inplace_function(name):
    def fn(x, *args, **kwargs):
        return getattr(x, name)(*args, **kwargs)
    fn.__name__ = name
    return fn


def module_functions() -> dict:
    funcs = {name: _method_function(name) for name in METHOD_FUNCTIONS}
    for name in ("sort", "argsort", "topk"):  # issue 24: sorting
        funcs[name] = _method_function(name)
    for name in dir(Tensor):
        if name.endswith("_") and not name.startswith("_"):
            funcs[name] = _inplace_function(name)
    return funcs


def _check_user_arguments():
    # bad arguments (cc.full([2], "a"), cc.zeros([-1])) raise a TraceError naming the line
    for name in __all__:
        if name != "to_tensor":
            globals()[name] = user_errors(globals()[name], f"cc.{name}")


_check_user_arguments()
