"""The traced `Tensor`: a Paddle-style API whose every call records SSA nodes.

Functionalization (ARCHITECTURE.md §4): a Tensor points at a `Storage` (whose `base` is the SSA
value of the whole buffer) plus a chain of view ops. An inplace op computes a new value
functionally and
writes it back: onto the base directly, or through the inverse of each view in the chain
(`reshape` back, `transpose` back, `slice_scatter` into the parent). Every other Tensor on the
storage re-derives its value from the new base the next time it is used. The Python object
stays the same (`x.scale_(2.0) is x`).

Each Tensor also carries a `layout`: a zero-byte numpy array with the real element strides, so
that numpy itself answers "is this reshape a view?" and "does this view overlap itself?".

This module is the class, its storage and the user-facing functions that make tensors
(`to_tensor`, `random_tensor`); the write-back of inplace ops is compiler.tensor_writeback, the
methods patched in at import (the registry's elementwise ops, the argument check around every
public method) are compiler.tensor_methods.
"""
from __future__ import annotations

import numbers
import weakref

import numpy as np

from .autodiff import backward as _backward

from . import tracer as _tr
from .errors import InplaceError, ShapeError, TraceError
from .ir import DataCheck, Value
from .layout import apply_view, value_probe
from .ops import BOOL, SUPPORTED_DTYPES, dtype_class
from .ops.registry import DEFAULT_FLOAT, dkind, is_half, normalize_axes, promote
from . import tensor_paddle as _paddle
from . import tensor_writeback as _writeback
from .tensor_methods import install_methods, user_errors  # noqa: F401 (importers name it here)


class Storage:
    """One buffer's worth of values: `base` is its current SSA value."""

    def __init__(self, base: Value, input_index: int | None = None):
        self.base = base
        self.version = 0
        self.input_index = input_index  # set when the buffer is a caller's argument
        self.leaf = None                # the leaf Tensor that owns it, if any


def _is_scalar(x) -> bool:
    return isinstance(x, (numbers.Number, np.number, np.bool_)) and not isinstance(x, complex)


def _fills(value, dtype: np.dtype) -> bool:
    """`x[i] = value` can be a fill: a Python scalar whose cast to x's dtype is what the
    general path (a constant, cast) gives: a float into floats, a whole number or a bool
    that fits an integer dtype, a bool into bool."""
    if isinstance(value, bool) or (isinstance(value, numbers.Integral)
                                   and not isinstance(value, np.number)):
        if dkind(dtype) == "b":
            return isinstance(value, bool)
        if dkind(dtype) in "iu":
            info = np.iinfo(dtype)
            return info.min <= int(value) <= info.max
        return dkind(dtype) == "f"
    return isinstance(value, float) and dkind(dtype) == "f"


def scalar_dtype(x, like: np.dtype | None) -> np.dtype:
    """Python scalars are weakly typed (NEP 50 / Paddle): they adopt the tensor's dtype when
    their kind fits in it."""
    if isinstance(x, (bool, np.bool_)):
        return like if like is not None else BOOL
    if isinstance(x, (numbers.Integral, np.integer)):
        return like if like is not None and like != BOOL else np.dtype(np.int64)
    return like if like is not None and dkind(like) == "f" else DEFAULT_FLOAT


def normalize_index(idx, shape) -> tuple:
    """A Python basic index -> canonical entries ("i", k) / ("s", start, stop, step) / ("n",).
    Ellipsis is expanded; every dimension gets an entry; ints are bounds-checked."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    for item in idx:
        if isinstance(item, Tensor):
            raise TraceError("indexing with a tensor (gather) is not supported; use basic "
                             "slicing: ints, slices, None, ...", _tr.user_loc())
        if not (item is None or item is Ellipsis or isinstance(item, (slice, numbers.Integral))):
            raise TraceError(f"unsupported index {item!r}: use ints, slices, None, ...",
                             _tr.user_loc())
    consumed = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if consumed > len(shape):
        raise ShapeError(f"too many indices ({consumed}) for a tensor of rank {len(shape)}",
                         _tr.user_loc())
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise TraceError("an index can only have a single ellipsis", _tr.user_loc())
    out, dim = [], 0
    for item in idx:
        if item is Ellipsis:
            for _ in range(len(shape) - consumed):
                out.append(("s", None, None, None))
                dim += 1
        elif item is None:
            out.append(("n",))
        elif isinstance(item, slice):
            out.append(("s", item.start, item.stop, item.step))
            dim += 1
        else:
            k = int(item)
            if not -shape[dim] <= k < shape[dim]:
                raise IndexOutOfRange(f"index {k} is out of bounds for axis {dim} with size "
                                      f"{shape[dim]}", _tr.user_loc())
            out.append(("i", k % shape[dim]))
            dim += 1
    while dim < len(shape):
        out.append(("s", None, None, None))
        dim += 1
    return tuple(out)


class IndexOutOfRange(ShapeError, IndexError):
    """An integer index past the end of its axis: a `ShapeError`, and an `IndexError` as
    Python's sequences raise."""


def _user_axes(axis, ndim: int) -> tuple[int, ...]:
    """`normalize_axes`, its ShapeError naming the user's line."""
    try:
        return normalize_axes(axis, ndim)
    except ShapeError as e:
        raise ShapeError(e.bare_message, _tr.user_loc()) from None


class Tensor:
    """A value in a traced program. Create them with `cc.to_tensor`, `cc.zeros`, ... or get
    them as the traced function's arguments."""

    def __init__(self, tracer, storage: Storage, chain=(), value: Value | None = None,
                 layout=None, name: str | None = None, chain_grad: bool = True):
        self._tracer = tracer
        # Whether the view chain was created recording gradients: a view made under no_grad
        # stays without history; any other view keeps its base's history when re-derived.
        self._chain_grad = chain_grad
        self._storage = storage
        self._chain = tuple(chain)
        self._value = storage.base if value is None else value
        self._version = storage.version
        self._layout = layout if layout is not None else value_probe(self._value)
        self._name = name
        self._grad: Tensor | None = None

    @classmethod
    def _fresh(cls, value: Value, name=None) -> "Tensor":
        return cls(_tr.current(), Storage(value), name=name)

    # -- the current SSA value (re-derived from the base after an inplace write) ---------
    def _v(self) -> Value:
        if self._tracer is not _tr.active():
            self._foreign()
        if self._version != self._storage.version:
            v = self._storage.base
            for op, attrs in self._chain:
                # A read (even under no_grad) must not change what the view's history is.
                v = self._tracer.emit(op, [v], attrs, record_grad=self._chain_grad)
            self._value, self._version = v, self._storage.version
        return self._value

    def _foreign(self):
        """A tensor kept from another (finished) trace: its value is not in this graph."""
        v = self._value
        made = f"at {v.producer.loc}" if v.producer is not None else "as an argument"
        now = _tr.active()
        where = f"while tracing '{now.graph.name}'" if now is not None else "outside any trace"
        raise TraceError(f"tensor '{self.name}' was made {made} by the trace of "
                         f"'{self._tracer.graph.name}' and is used {where}: a traced tensor "
                         "exists only inside the call that traced it; return it as an output "
                         "and pass the array in as an argument", _tr.user_loc())

    # -- metadata -------------------------------------------------------------------------
    @property
    def shape(self) -> list[int]:
        return list(self._value.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._value.dtype

    @property
    def ndim(self) -> int:
        return len(self._value.shape)

    @property
    def size(self) -> int:
        return self._value.size

    @property
    def name(self) -> str:
        return self._name or f"tensor_{self._value.id}"

    @property
    def is_leaf(self) -> bool:
        v = self._v()
        return v.producer is None or not v.requires_grad or v in self._tracer.leaf_of

    @property
    def stop_gradient(self) -> bool:
        return not self._v().requires_grad

    @stop_gradient.setter
    def stop_gradient(self, flag: bool):
        v = self._v()
        if flag:
            if not v.requires_grad:
                return
            if self._tracer.leaf_of.get(v) is self:  # un-marking a parameter
                v.requires_grad = False
                del self._tracer.leaf_of[v]
                self._storage.leaf = None
            else:
                # An intermediate: ops that already read its value keep their gradient; from
                # here on this tensor is a detached view of the same storage.
                self._become(self.detach())
            return
        if v.requires_grad:
            return
        if dtype_class(v.dtype) != "float":
            raise TraceError(f"only floating-point tensors can require gradients; "
                             f"'{self.name}' is {v.dtype}", _tr.user_loc())
        v.requires_grad = True
        self._storage.leaf = self
        self._tracer.leaf_of[v] = self

    @property
    def grad(self):
        tracer = self._tracer
        if tracer.pending_grads and tracer.backward_loc is None:
            # Data parallel: the first read after backward() averages the gradients over the
            # ranks (compiler.distributed, through the MpiConfig the driver gave the tracer);
            # backward()'s own accumulation reads the local one.
            tracer.distributed.reduce_gradients(tracer, Tensor._fresh)
        return self._grad

    @grad.setter
    def grad(self, value):
        self._grad = value

    def clear_grad(self):
        self._grad = None

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={self.shape}, dtype={self.dtype.name})"

    # -- what a static graph can't express --------------------------------------------------
    def _no_data(self, what, hint="a traced value can't drive Python control flow (use "
                 "cc.where / masking instead) or leave the graph"):
        raise TraceError(f"{what} needs the tensor's data, which doesn't exist while tracing: "
                         f"{hint}", _tr.user_loc())

    _NUMPY_HINT = ("numpy can't compute on a traced tensor; use the tensor's methods or cc "
                   "functions (x.exp(), x.sum(), cc.where(...)), which trace into the graph")

    def __bool__(self):
        self._no_data("bool(tensor)")

    def __float__(self):
        self._no_data("float(tensor)")

    def __int__(self):
        self._no_data("int(tensor)")

    def __index__(self):
        self._no_data("using a tensor as an index")

    def numpy(self):
        self._no_data(".numpy()")

    def item(self):
        self._no_data(".item()")

    def tolist(self):
        self._no_data(".tolist()")

    # NumPy on a traced tensor: there is no data to hand over. Defining __array_ufunc__ makes
    # numpy route `ndarray + tensor` through np.add (NEP 13), so the ufuncs that spell a Python
    # operator trace as that operator; every other ufunc, method or `out=` raises.
    def __array__(self, dtype=None, copy=None):
        self._no_data("np.asarray(tensor)", self._NUMPY_HINT)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        names = _UFUNC_OPERATORS.get(ufunc)
        if names is not None and method == "__call__" and not kwargs and len(inputs) == 2:
            a, b = inputs
            fn = getattr(a, names[0], None) if isinstance(a, Tensor) \
                else getattr(b, names[1], None)
            if fn is not None:
                return fn(b if isinstance(a, Tensor) else a)
        call = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
        self._no_data(f"np.{call}(..., out=...)" if "out" in kwargs else f"np.{call}(tensor)",
                      self._NUMPY_HINT)

    def __array_function__(self, func, types, args, kwargs):
        self._no_data(f"np.{func.__name__}(tensor)", self._NUMPY_HINT)

    def __len__(self):
        if not self.shape:
            raise TraceError("len() of a 0-d tensor", _tr.user_loc())
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    __hash__ = object.__hash__

    # -- building blocks ----------------------------------------------------------------------
    def _operand(self, x, like=None) -> Value:
        """A Tensor, Python scalar or numpy array as an SSA value of this trace."""
        if isinstance(x, Tensor):
            return x._v()
        if _is_scalar(x):
            dtype = scalar_dtype(x, like if like is not None else self.dtype)
            if isinstance(x, numbers.Integral) and dkind(dtype) in "iu" and not (
                    np.iinfo(dtype).min <= int(x) <= np.iinfo(dtype).max):
                raise TraceError(f"the Python int {int(x)} doesn't fit the {dtype} tensor it is "
                                 f"used with (range {np.iinfo(dtype).min} to "
                                 f"{np.iinfo(dtype).max}); cast the tensor to a wider dtype "
                                 "first", _tr.user_loc())
            return self._tracer.emit("full", [], {"shape": (), "value": x, "dtype": dtype})
        if isinstance(x, (np.ndarray, list, tuple)):
            return to_tensor(x)._v()
        raise TraceError(f"unsupported operand of type {type(x).__name__}", _tr.user_loc())

    def _op(self, op: str, *others, **attrs) -> "Tensor":
        """Out-of-place: emit `op(self, *others)` into a fresh buffer."""
        ins = [self._v()] + [self._operand(o) for o in others]
        return Tensor._fresh(self._tracer.emit(op, ins, attrs))

    def _rop(self, op: str, other) -> "Tensor":
        return Tensor._fresh(self._tracer.emit(op, [self._operand(other), self._v()], {}))

    def primitive(self, op: str, *others, **attrs) -> "Tensor":
        """Emit any registry op with `self` as its first input (used by VJP rules)."""
        return self._op(op, *others, **attrs)

    def _view(self, op: str, **attrs) -> "Tensor":
        v = self._tracer.emit(op, [self._v()], attrs)  # checks shapes, naming the user's line
        layout = apply_view(self._layout, op, attrs)
        return Tensor(self._tracer, self._storage, self._chain + ((op, attrs),), v, layout,
                      chain_grad=self._chain_grad and self._tracer.grad_enabled)

    # -- inplace: compute functionally, then write back through the view chain -------------
    # (compiler/tensor_writeback.py)
    _check_leaf = _writeback.check_leaf
    _check_writable = _writeback.check_writable
    _through_detach = _writeback.through_detach
    _origin = _writeback.origin
    _through_broadcast = _writeback.through_broadcast
    _inplace = _writeback.inplace
    _write = _writeback.write

    # -- elementwise math -------------------------------------------------------------------
    def add(self, y, alpha=1):
        return self._op("add", self._alpha(y, alpha))

    def subtract(self, y, alpha=1):
        return self._op("subtract", self._alpha(y, alpha))

    def add_(self, y, alpha=1):
        return self._inplace("add", self._alpha(y, alpha))

    def subtract_(self, y, alpha=1):
        return self._inplace("subtract", self._alpha(y, alpha))

    def _alpha(self, y, alpha):
        if alpha == 1:
            return y
        y_dtype = y.dtype if isinstance(y, Tensor) else \
            scalar_dtype(y, self.dtype) if _is_scalar(y) else None
        out = promote(self.dtype, y_dtype) if y_dtype is not None else DEFAULT_FLOAT
        if dkind(out) == "f":
            if _is_scalar(y):
                return y * alpha
            return Tensor._fresh(self._operand(y)).scale(alpha)
        # Integer and bool results keep their dtype (alpha * y in that dtype), so alpha must
        # be a whole number, as PyTorch requires.
        if not _is_scalar(alpha) or not float(alpha).is_integer():
            raise TraceError(f"alpha={alpha!r} with {out} operands: use an integer alpha, or "
                             "cast to a float dtype first", _tr.user_loc())
        yt = Tensor._fresh(self._operand(y))
        if yt.dtype != out:
            yt = yt.cast(out)
        if out == BOOL:  # bool addition is logical or: alpha * y is y, or nothing
            return yt if alpha else yt.logical_and(False)
        return yt * int(alpha)

    def scale(self, scale=1.0, bias=0.0, bias_after_scale=True):
        return self._op("scale", **self._scale_attrs(scale, bias, bias_after_scale))

    def scale_(self, scale=1.0, bias=0.0, bias_after_scale=True):
        return self._inplace("scale", **self._scale_attrs(scale, bias, bias_after_scale))

    def _scale_attrs(self, scale, bias, bias_after_scale) -> dict:
        """Integer tensors keep their dtype (Paddle), so they are scaled in integer
        arithmetic: `scale` and `bias` must be whole numbers there (Paddle would truncate them
        silently; `add(alpha=)` refuses the same way)."""
        if dkind(self.dtype) in "iu":
            if not all(_is_scalar(v) and float(v).is_integer() for v in (scale, bias)):
                raise TraceError(f"scale={scale!r}, bias={bias!r} on a {self.dtype} tensor: "
                                 "use whole numbers, or cast to a float dtype first",
                                 _tr.user_loc())
            info = np.iinfo(self.dtype)
            for name, v in (("scale", scale), ("bias", bias)):
                if not info.min <= int(v) <= info.max:
                    raise TraceError(f"{name}={int(v)} doesn't fit the tensor's dtype "
                                     f"{self.dtype}", _tr.user_loc())
            return dict(scale=int(scale), bias=int(bias), bias_after_scale=bool(bias_after_scale))
        return dict(scale=float(scale), bias=float(bias), bias_after_scale=bool(bias_after_scale))

    def clip(self, min=None, max=None):
        return self._op("clip", *self._clip_bounds(min, max))

    def clip_(self, min=None, max=None):
        return self._inplace("clip", *self._clip_bounds(min, max))

    def _clip_bounds(self, lo, hi):
        """The bounds as inputs of the graph in the tensor's dtype: a Python scalar (cast as
        Paddle does), a 0-d (or broadcastable) Tensor, or None for no bound."""
        if self.dtype == BOOL:
            raise TraceError("clip is not defined for bool tensors", _tr.user_loc())
        big = np.inf if dkind(self.dtype) == "f" else None
        out = []
        for bound, default in ((lo, -big if big else np.iinfo(self.dtype).min),
                               (hi, big if big else np.iinfo(self.dtype).max)):
            bound = default if bound is None else bound
            if isinstance(bound, Tensor):
                out.append(bound if bound.dtype == self.dtype else bound.cast(self.dtype))
            elif _is_scalar(bound):
                out.append(Tensor._fresh(self._tracer.emit(
                    "full", [], {"shape": (), "value": bound, "dtype": self.dtype})))
            else:
                raise TraceError(f"clip: a bound must be a number, a Tensor or None, not "
                                 f"{type(bound).__name__}", _tr.user_loc())
        return out

    def _check_int_power(self, y):
        """An integer tensor to a negative Python-int power has no integer result: a
        trace-time error (a negative exponent *tensor* is data: defined in the registry)."""
        if self.dtype.kind in "iub" and _is_scalar(y) and not isinstance(y, (float, np.floating)) \
                and not isinstance(y, (bool, np.bool_)) and y < 0:
            raise TraceError(f"integers to negative integer powers are not allowed "
                             f"({self.dtype} tensor ** {y}): cast to a float dtype first",
                             _tr.user_loc())

    def pow(self, y):
        self._check_int_power(y)
        if _is_scalar(y) and dkind(self.dtype) != "f" and isinstance(y, (float, np.floating)):
            return self.cast(DEFAULT_FLOAT)._op("pow", y)
        return self._op("pow", y)

    def pow_(self, y):
        self._check_int_power(y)
        return self._inplace("pow", y)

    # Paddle's defaults for the activations with attributes.
    def elu(self, alpha=1.0):
        return self._op("elu", alpha=float(alpha))

    def elu_(self, alpha=1.0):
        return self._inplace("elu", alpha=float(alpha))

    def leaky_relu(self, negative_slope=0.01):
        return self._op("leaky_relu", negative_slope=float(negative_slope))

    def leaky_relu_(self, negative_slope=0.01):
        return self._inplace("leaky_relu", negative_slope=float(negative_slope))

    def hardtanh(self, min=-1.0, max=1.0):
        return self._op("hardtanh", min=float(min), max=float(max))

    def hardtanh_(self, min=-1.0, max=1.0):
        return self._inplace("hardtanh", min=float(min), max=float(max))

    @property
    def T(self):
        """All axes reversed (Paddle); a tensor of rank < 2 is returned as it is."""
        return self if self.ndim < 2 else self.transpose(list(range(self.ndim))[::-1])

    def numel(self):
        """The number of elements, as a 0-d int64 tensor (Paddle)."""
        return Tensor._fresh(self._tracer.emit(
            "full", [], {"shape": (), "value": self.size, "dtype": np.dtype(np.int64)}))

    def cast(self, dtype):
        dtype = np.dtype(dtype)
        check_dtype(dtype)
        return self._op("cast", dtype=dtype)

    astype = cast

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        return self._fill(value, "fill_")

    def _fill(self, value, what: str):
        self._check_writable(what)
        old = self._v()
        if _is_scalar(value):
            # over the old value, in place of it: the write takes x's buffer (ops "fill")
            full = self._tracer.emit("fill", [old], {"value": value}, inplace_of=0)
            full.requires_grad = False  # as the `full` it replaces: no gradient to old
        else:
            full = self._tracer.emit("full", [], {"shape": tuple(self.shape), "value": value,
                                                  "dtype": self.dtype})
        self._tracer.overwritten.add(old)
        self._write(full)
        return self

    # -- random numbers (Philox; see compiler/ops/random_ops.py) ------------------------------
    def uniform_(self, min=-1.0, max=1.0, seed=0):
        """Fill with numbers uniform in [min, max) drawn from `seed` (a 0-d uint64 tensor, or
        a Python int: a constant); in place, returns self. Paddle's signature."""
        self._check_writable("uniform_")
        u = random_tensor(self.shape, self.dtype, seed, "uniform", "uniform_")
        return self._fill_with(u.scale(float(max) - float(min), float(min)))

    def normal_(self, mean=0.0, std=1.0, seed=0):
        """Fill with normal numbers of `mean` and `std` drawn from `seed`; in place."""
        self._check_writable("normal_")
        z = random_tensor(self.shape, self.dtype, seed, "normal", "normal_")
        return self._fill_with(z.scale(float(std), float(mean)))

    def _fill_with(self, value: "Tensor") -> "Tensor":
        old = self._v()
        v = value._v()
        if v.dtype != old.dtype:
            v = self._tracer.emit("cast", [v], {"dtype": old.dtype})
        self._tracer.overwritten.add(old)
        self._write(v)
        return self

    def where_mask(self, mask):
        """`where(mask, self, 0)`."""
        return Tensor._fresh(self._tracer.emit(
            "where", [mask._v(), self._v(), self._operand(0)], {}))

    def where_positive(self, x):
        return self.where_mask(x > 0)

    def detach(self):
        t = self._view("detach")
        t._value.requires_grad = False
        return t

    def detach_(self):
        # Becomes a detached view rather than clearing requires_grad on the current SSA value:
        # ops that already read that value keep their gradient.
        return self._become(self.detach())

    # -- comparisons ------------------------------------------------------------------------
    def __eq__(self, y):
        return self._op("equal", y)

    def __ne__(self, y):
        return self._op("not_equal", y)

    def __lt__(self, y):
        return self._op("less_than", y)

    def __le__(self, y):
        return self._op("less_equal", y)

    def __gt__(self, y):
        return self._op("greater_than", y)

    def __ge__(self, y):
        return self._op("greater_equal", y)

    # -- reductions and matmul ----------------------------------------------------------------
    def _reduce(self, op, axis, keepdim):
        axes = _user_axes(axis, self.ndim) if axis is not None else None
        if axes is not None and not self.ndim:
            axes = None
        return self._op(op, axis=axes, keepdim=bool(keepdim))

    def sum(self, axis=None, dtype=None, keepdim=False):
        """Paddle's signature: `dtype` is the result's dtype (default: the input's float dtype,
        int64 for integers and bools), so `keepdim` goes by keyword or third."""
        if isinstance(dtype, (bool, np.bool_)):
            raise TraceError(f"sum(axis, dtype, keepdim): dtype={dtype!r} is not a dtype (pass "
                             "keepdim by keyword)", _tr.user_loc())
        x = self
        if dtype is not None:
            dtype = np.dtype(dtype)
            check_dtype(dtype)
            x = self.cast(dtype) if dtype != self.dtype else self
        out = x._reduce("sum", axis, keepdim)
        return out.cast(dtype) if dtype is not None and out.dtype != dtype else out

    def mean(self, axis=None, keepdim=False):
        return self._reduce("mean", axis, keepdim)

    def max(self, axis=None, keepdim=False):
        return self._reduce("max", axis, keepdim)

    def addmm(self, x, y, beta=1.0, alpha=1.0):
        """`beta * self + alpha * (x @ y)` for matrices `x`, `y` (Paddle's `addmm`), as one
        gemm; `self` broadcasts to the product's shape."""
        x = x if isinstance(x, Tensor) else to_tensor(x)
        y = y if isinstance(y, Tensor) else to_tensor(y)
        if x.ndim != 2 or y.ndim != 2:
            raise ShapeError(f"addmm needs matrices x and y, got ranks {x.ndim} and {y.ndim}",
                             _tr.user_loc())
        shape = [x.shape[0], y.shape[1]]
        c = self if list(self.shape) == shape else self.broadcast_to(shape)
        return x._op("gemm", y, c, alpha=float(alpha), beta=float(beta), trans_a=False,
                     trans_b=False)

    def min(self, axis=None, keepdim=False):
        return self._reduce("min", axis, keepdim)

    def prod(self, axis=None, keepdim=False, dtype=None):
        x = self if dtype is None else self.cast(dtype)
        return x._reduce("prod", axis, keepdim)

    def argmax(self, axis=None, keepdim=False, dtype="int64"):
        return self._arg("argmax", axis, keepdim, dtype)

    def argmin(self, axis=None, keepdim=False, dtype="int64"):
        return self._arg("argmin", axis, keepdim, dtype)

    def _arg(self, op, axis, keepdim, dtype):
        if axis is not None:
            axis = _user_axes(int(axis), self.ndim)[0] if self.ndim else None
        out = self._op(op, axis=axis, keepdim=bool(keepdim))
        return out if np.dtype(dtype) == out.dtype else out.cast(dtype)

    # -- scans, gathers and scatters (issue 10) ---------------------------------------------
    def _scan_axis(self, axis):
        """Paddle: `axis=None` scans the flattened tensor."""
        x = self if axis is not None or self.ndim <= 1 else self.flatten()
        ax = 0 if axis is None else _user_axes(int(axis), x.ndim)[0] if x.ndim else 0
        return x, ax

    def cumsum(self, axis=None, dtype=None):
        x, ax = self._scan_axis(axis)
        x = x if dtype is None else x.cast(dtype)
        return x._op("cumsum", axis=ax)

    def cumsum_(self, axis=None, dtype=None):
        if axis is None and self.ndim > 1:
            raise InplaceError("cumsum_ with axis=None would flatten its target: give an axis",
                               _tr.user_loc())
        _, ax = self._scan_axis(axis)
        return self._inplace("cumsum", axis=ax)

    def _index(self, index, what):
        """An integer index tensor (a Tensor, an array or a list)."""
        index = index if isinstance(index, Tensor) else to_tensor(np.asarray(index))
        if dkind(index.dtype) not in "iu":
            raise TraceError(f"{what}: indices must be integers, not {index.dtype}",
                             _tr.user_loc())
        return index

    def _checked(self, out: "Tensor", what: str, size: int) -> "Tensor":
        """Indices are data: the node raises `DataError` on one out of range, and the driver
        keeps the caller's arrays untouched until the run has finished (ARCHITECTURE.md §4)."""
        node = out._v().producer
        self._tracer.graph.data_checks.append(
            DataCheck(what, node, None, (), size, None, _tr.user_loc()))
        return out

    def index_select(self, index, axis=0):
        index = self._index(index, "index_select")
        if index.ndim != 1:
            raise ShapeError(f"index_select: the index must be 1-D, not {index.shape}",
                             _tr.user_loc())
        (ax,) = _user_axes(int(axis), self.ndim)
        return self._checked(self._op("index_select", index, axis=ax), "index_select",
                             self.shape[ax])

    def gather(self, index, axis=None):
        """Paddle's gather: rows (or slices along `axis`, default 0) picked by a 1-D index; a
        0-d index picks one slice and drops the axis."""
        index = self._index(index, "gather")
        if index.ndim == 0:
            return self.gather(index.reshape([1]), axis).squeeze(0 if axis is None else axis)
        return self.index_select(index, 0 if axis is None else axis)

    def index_add(self, index, axis, value):
        return self._index_add(index, axis, value, inplace=False)

    def index_add_(self, index, axis, value):
        return self._index_add(index, axis, value, inplace=True)

    def _index_add(self, index, axis, value, inplace):
        index = self._index(index, "index_add")
        (ax,) = _user_axes(int(axis), self.ndim)
        value = value if isinstance(value, Tensor) else to_tensor(value, dtype=self.dtype)
        if value.dtype != self.dtype:
            value = value.cast(self.dtype)
        out = self._inplace("index_add", index, value, axis=ax) if inplace else \
            self._op("index_add", index, value, axis=ax)
        return self._checked(out, "index_add", self.shape[ax])

    def take_along_axis(self, indices, axis):
        indices = self._index(indices, "take_along_axis")
        (ax,) = _user_axes(int(axis), self.ndim)
        return self._checked(self._op("take_along_axis", indices, axis=ax),
                             "take_along_axis", self.shape[ax])

    def put_along_axis(self, indices, values, axis, reduce="assign"):
        return self._put(indices, values, axis, reduce, inplace=False)

    def put_along_axis_(self, indices, values, axis, reduce="assign"):
        return self._put(indices, values, axis, reduce, inplace=True)

    def _put(self, indices, values, axis, reduce, inplace):
        indices = self._index(indices, "put_along_axis")
        (ax,) = _user_axes(int(axis), self.ndim)
        values = Tensor._fresh(self._operand(values))
        if values.dtype != self.dtype:
            values = values.cast(self.dtype)
        fn = self._inplace if inplace else self._op
        out = fn("put_along_axis", indices, values, axis=ax, reduce=reduce)
        return self._checked(out, "put_along_axis", self.shape[ax])

    # -- sorting: sort, argsort, topk (issue 24; the `argsort` primitive, sort_ops.py) --------
    def _sort_axis(self, axis, what):
        """The tensor to sort and its axis (Paddle's range, [-R, R)); a 0-d tensor is sorted
        as a row of one element."""
        if dkind(self.dtype) not in "fiu":
            raise TraceError(f"{what}: {self.dtype} tensors can't be sorted (Paddle sorts "
                             "floats and integers)", _tr.user_loc())
        if isinstance(axis, bool) or not isinstance(axis, (numbers.Integral, np.integer)):
            raise TraceError(f"{what}: axis must be an int, not {type(axis).__name__}",
                             _tr.user_loc())
        if self.ndim == 0:
            _user_axes(int(axis), 0)
            return self.reshape([1]), 0
        return self, _user_axes(int(axis), self.ndim)[0]

    def argsort(self, axis=-1, descending=False, stable=False):
        """Paddle's argsort: int64 indices that sort along `axis`. Always stable (a stable
        order is also a valid unstable one); NaN counts as greater than every number."""
        x, ax = self._sort_axis(axis, "argsort")
        out = x._op("argsort", axis=ax, descending=bool(descending))
        return out.reshape([]) if self.ndim == 0 else out

    def sort(self, axis=-1, descending=False, stable=False):
        """Paddle's sort: the values along `axis` in order, a gather by `argsort` (so the
        gradient flows back to the positions the values came from)."""
        x, ax = self._sort_axis(axis, "sort")
        out = x.take_along_axis(x.argsort(ax, descending), ax)
        return out.reshape([]) if self.ndim == 0 else out

    def topk(self, k, axis=None, largest=True, sorted=True):
        """Paddle's topk: (values, int64 indices) of the k largest (smallest) along `axis`
        (default the last), in order; ties: the earlier position first. `sorted=False` returns
        them sorted too (Paddle leaves that order unspecified)."""
        if isinstance(k, Tensor):
            raise TraceError("topk: k must be a Python int here (it fixes the result's shape, "
                             "which a compiled program knows at trace time)", _tr.user_loc())
        if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)):
            raise TraceError(f"topk: k must be an int, not {type(k).__name__}", _tr.user_loc())
        x, ax = self._sort_axis(-1 if axis is None else axis, "topk")
        n = x.shape[ax]
        if not 1 <= int(k) <= n:   # (Paddle refuses k = 0 too)
            raise ShapeError(f"topk: k={int(k)} is out of range for an axis of size {n} "
                             "(1 <= k <= size)", _tr.user_loc())
        idx = x.argsort(ax, bool(largest))
        if int(k) != n:
            idx = idx[(slice(None),) * ax + (slice(0, int(k)),)]
        values = x.take_along_axis(idx, ax)
        if self.ndim == 0:
            return values.reshape([]), idx.reshape([])
        return values, idx

    # -- masks: where() written back into the target (issue 10) -------------------------------
    def masked_fill(self, mask, value):
        mask = mask if isinstance(mask, Tensor) else to_tensor(mask)
        v = Tensor._fresh(self._operand(value))
        v = v if v.dtype == self.dtype else v.cast(self.dtype)
        out = Tensor._fresh(self._tracer.emit("where", [mask._v(), v._v(), self._v()], {}))
        if out.shape != self.shape:
            raise ShapeError(f"masked_fill: a mask of shape {mask.shape} would broadcast the "
                             f"tensor's shape {self.shape}", _tr.user_loc())
        return out

    def masked_fill_(self, mask, value):
        mask = mask if isinstance(mask, Tensor) else to_tensor(mask)
        return self._write_where(mask, value, "masked_fill_")

    def _write_where(self, cond: "Tensor", value, what: str) -> "Tensor":
        """`self = where(cond, value, self)` in place: `cond` and `value` broadcast to self's
        shape (a scalar value takes self's dtype)."""
        self._check_writable(what)
        old = self._v()
        v = self._operand(value)
        if v.dtype != old.dtype:
            v = self._tracer.emit("cast", [v], {"dtype": old.dtype})
        new = self._tracer.emit("where", [cond._v(), v, old], {}, inplace_of=2)
        if new.shape != old.shape:
            raise InplaceError(f"{what} would change the shape of its target from "
                               f"{list(old.shape)} to {list(new.shape)}", _tr.user_loc())
        self._tracer.overwritten.add(old)
        self._write(new)
        return self

    def _triangle(self, diagonal, lower):
        """The mask of the kept elements over the last two axes, from two aranges."""
        if self.ndim < 2:
            raise ShapeError(f"{'tril' if lower else 'triu'} needs a tensor of rank >= 2, "
                             f"not {self.shape}", _tr.user_loc())
        n, m = self.shape[-2:]
        emit = self._tracer.emit
        i64 = np.dtype(np.int64)
        rows = emit("arange", [], {"start": 0, "stop": n, "step": 1, "dtype": i64})
        rows = emit("reshape", [rows], {"shape": (n, 1)})
        cols = emit("arange", [], {"start": 0, "stop": m, "step": 1, "dtype": i64})
        k = emit("full", [], {"shape": (), "value": int(diagonal), "dtype": i64})
        shifted = emit("add", [rows, k], {})
        return Tensor._fresh(emit("less_equal" if lower else "greater_equal",
                                  [cols, shifted], {}))

    def _keep(self, keep: "Tensor") -> "Tensor":
        zero = self._tracer.emit("full", [], {"shape": (), "value": 0, "dtype": self.dtype})
        return Tensor._fresh(self._tracer.emit("where", [keep._v(), self._v(), zero], {}))

    def tril(self, diagonal=0):
        return self._keep(self._triangle(diagonal, True))

    def triu(self, diagonal=0):
        return self._keep(self._triangle(diagonal, False))

    def tril_(self, diagonal=0):
        return self._write_where(self._triangle(diagonal, True).logical_not(), 0, "tril_")

    def triu_(self, diagonal=0):
        return self._write_where(self._triangle(diagonal, False).logical_not(), 0, "triu_")

    # -- splitting (views) ----------------------------------------------------------------------
    def split(self, num_or_sections, axis=0):
        """Paddle: an int splits into that many equal parts; a list gives the sizes (one -1 is
        inferred). Each part is a view (a slice) of self."""
        (ax,) = _user_axes(int(axis), self.ndim)
        size = self.shape[ax]
        if isinstance(num_or_sections, numbers.Integral):
            n = int(num_or_sections)
            if n <= 0 or size % n:
                raise ShapeError(f"split: an axis of size {size} can't be split into {n} "
                                 "equal parts", _tr.user_loc())
            sections = [size // n] * n
        else:
            sections = [int(s) for s in num_or_sections]
            if sections.count(-1) > 1 or any(s < -1 for s in sections):
                raise ShapeError(f"split: bad sections {sections}", _tr.user_loc())
            if -1 in sections:
                sections[sections.index(-1)] = size - sum(s for s in sections if s != -1)
            if sum(sections) != size or min(sections, default=0) < 0:
                raise ShapeError(f"split: sections {list(num_or_sections)} don't add up to "
                                 f"the axis size {size}", _tr.user_loc())
        parts, start = [], 0
        for s in sections:
            index = tuple(("s", start, start + s, 1) if i == ax else ("s", None, None, None)
                          for i in range(self.ndim))
            parts.append(self.slice_index(index))
            start += s
        return parts

    def chunk(self, chunks, axis=0):
        return self.split(int(chunks), axis)

    def matmul(self, y, transpose_x=False, transpose_y=False):
        x = self.t() if transpose_x else self
        y = y if isinstance(y, Tensor) else to_tensor(y)
        y = y.t() if transpose_y else y
        if x.ndim == 0 or y.ndim == 0:
            raise ShapeError("matmul needs operands of rank >= 1", _tr.user_loc())
        # Rank-1 operands are lifted to matrices and the result squeezed, as numpy does.
        xs = x.unsqueeze(0) if x.ndim == 1 else x
        ys = y.unsqueeze(-1) if y.ndim == 1 else y
        out = xs._op("matmul", ys)
        if x.ndim == 1:
            out = out.squeeze(-2)
        if y.ndim == 1:
            out = out.squeeze(-1)
        return out

    # -- views ---------------------------------------------------------------------------------
    def reshape(self, shape):
        """Paddle's rules: a 0 copies the input's dimension at that index, one -1 is
        inferred."""
        shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
        return self.reshape_to(self._resolve_shape(shape))

    def reshape_to(self, shape):
        """A reshape to a literal shape (0 is a zero-size dimension): what the compiler's own
        computed shapes (flatten, squeeze, gradients) use."""
        shape = [int(d) for d in shape]
        if apply_view(self._layout, "reshape", {"shape": shape}) is None:
            # The strides don't allow a view: reshape copies (a write won't reach the base).
            return self._op("contiguous").reshape_to(shape)
        return self._view("reshape", shape=tuple(shape))

    def _resolve_shape(self, shape):
        shape = [int(d) for d in shape]
        if shape.count(-1) > 1 or any(d < -1 for d in shape):
            raise ShapeError(f"reshape: {shape} has a negative size other than one -1",
                             _tr.user_loc())
        shape = [self.shape[i] if d == 0 and i < self.ndim else d for i, d in enumerate(shape)]
        if -1 in shape:
            known = int(np.prod([d for d in shape if d != -1]))
            if known == 0 or self.size % known:
                raise ShapeError(f"can't reshape {self.shape} into {shape}", _tr.user_loc())
            shape[shape.index(-1)] = self.size // known
        if int(np.prod(shape)) != self.size:
            raise ShapeError(f"can't reshape {self.shape} into {shape}", _tr.user_loc())
        return shape

    view = reshape

    def flatten(self, start_axis=0, stop_axis=-1):
        (start,), (stop,) = _user_axes(start_axis, self.ndim), _user_axes(stop_axis, self.ndim)
        if self.ndim == 0:
            return self.reshape_to([1])
        if start > stop:
            raise ShapeError(f"flatten: start_axis {start_axis} is after stop_axis {stop_axis}",
                             _tr.user_loc())
        shape = self.shape[:start] + [int(np.prod(self.shape[start:stop + 1]))] \
            + self.shape[stop + 1:]
        return self.reshape_to(shape)

    def squeeze(self, axis=None):
        if self.ndim == 0:  # Paddle and NumPy: a 0-d tensor stays as it is (axis 0 or -1)
            if axis is not None:
                _user_axes(axis, 0)
            return self.reshape_to([])
        if axis is None:
            axes = [i for i, d in enumerate(self.shape) if d == 1]
        else:
            axes = [a for a in _user_axes(axis, self.ndim) if self.shape[a] == 1]
        return self.reshape_to([d for i, d in enumerate(self.shape) if i not in axes])

    def unsqueeze(self, axis):
        axes = [axis] if isinstance(axis, numbers.Integral) else list(axis)
        shape = list(self.shape)
        rank = len(shape) + len(axes)
        if any(not -rank <= int(a) < rank for a in axes):
            raise ShapeError(f"unsqueeze: axis {axes} is out of range for a result of rank "
                             f"{rank}", _tr.user_loc())
        for a in sorted(int(a) % rank for a in axes):
            shape.insert(a, 1)
        return self.reshape_to(shape)

    def transpose(self, perm):
        if not all(isinstance(p, numbers.Integral) for p in perm):
            raise TraceError(f"transpose: {list(perm)} is not a list of axes", _tr.user_loc())
        perm = tuple(int(p) % max(self.ndim, 1) for p in perm)
        if sorted(perm) != list(range(self.ndim)):
            raise ShapeError(f"transpose: {list(perm)} is not a permutation of {self.ndim} axes",
                             _tr.user_loc())
        return self._view("transpose", perm=perm)

    def t(self):
        if self.ndim < 2:
            return self
        return self.transpose([1, 0] if self.ndim == 2 else
                              list(range(self.ndim - 2)) + [self.ndim - 1, self.ndim - 2])

    def expand(self, shape):
        shape = [self.shape[i - (len(shape) - self.ndim)] if d == -1 else int(d)
                 for i, d in enumerate(shape)]
        return self._view("expand", shape=tuple(shape))

    def broadcast_to(self, shape):
        """A materialized broadcast (a copy); `expand` is the view form."""
        return self._op("broadcast_to", shape=tuple(int(d) for d in shape))

    def slice_index(self, index: tuple) -> "Tensor":
        """A view through a canonical index (see `normalize_index`)."""
        return self._view("slice", index=index)

    def slice_scatter(self, src, index) -> "Tensor":
        """Out of place: a copy of self with `self[index] = src`."""
        return self._op("slice_scatter", src, index=index)

    def full_like_value(self, value) -> "Tensor":
        """A 0-d tensor holding a Python scalar, typed as it would combine with self."""
        return Tensor._fresh(self._operand(value))

    def zeros_like_shape(self, shape) -> "Tensor":
        return Tensor._fresh(self._tracer.emit(
            "full", [], {"shape": tuple(shape), "value": 0, "dtype": self.dtype}))

    def __getitem__(self, idx):
        if _bool_mask(idx) is not None:
            raise TraceError(_paddle.MASK_READ, _tr.user_loc())
        adv = self._split_advanced(idx)
        if adv is not None:  # an integer tensor in the index: a gather (compiler/tensor_paddle)
            basic, axis, index = adv
            return self._gather_index(self._basic_view(basic), axis, index)
        return self.slice_index(normalize_index(idx, self.shape))

    def _basic_view(self, basic) -> "Tensor":
        index = normalize_index(basic, self.shape)
        if all(e == ("s", None, None, None) for e in index):
            return self
        return self.slice_index(index)

    def __setitem__(self, idx, value):
        mask = _bool_mask(idx)
        if mask is not None:
            self._masked_assign(mask, value)
            return
        adv = self._split_advanced(idx)
        if adv is not None:  # a scatter into the indexed rows, written back through the views
            basic, axis, index = adv
            self._scatter_index(self._basic_view(basic), axis, index, value)
            return
        target = self[idx]
        if isinstance(value, Tensor) and value._storage is target._storage \
                and value._chain == target._chain:
            return  # `x[i] = x[i]`, the tail of `x[i] += 1`: the region already holds it
        target._assign(value)

    def _assign(self, value):
        """`self[...] = value`: broadcast and cast `value`, write it through the views."""
        if _fills(value, self.dtype):
            return self._fill(value, "__setitem__")  # in place, no broadcast buffer
        self._check_writable("__setitem__")
        old = self._v()
        v = self._operand(value)
        if v.dtype != old.dtype:
            v = self._tracer.emit("cast", [v], {"dtype": old.dtype})
        if v.shape != old.shape:
            v = self._tracer.emit("broadcast_to", [v], {"shape": old.shape})
        self._tracer.overwritten.add(old)
        self._write(v)
        return self

    def _masked_assign(self, mask: "Tensor", value):
        """`self[mask] = value` (Paddle): `where(mask, value, self)` written back through the
        views, marked inplace on `self`. `value` is a scalar or broadcasts to self's shape; one
        value per true element would be a data-dependent shape."""
        self._check_writable("__setitem__")
        loc = _tr.user_loc()
        if mask.shape != self.shape[:mask.ndim]:
            raise ShapeError(f"boolean mask of shape {mask.shape} doesn't match the leading "
                             f"dimensions of the tensor's shape {self.shape}", loc)
        old = self._v()
        v = self._operand(value)
        try:
            fits = np.broadcast_shapes(v.shape, old.shape) == old.shape
        except ValueError:
            fits = False
        if not fits:
            raise TraceError(f"x[mask] = y needs y to be a scalar or to broadcast to x's shape "
                             f"{list(old.shape)}; y of shape {list(v.shape)} (one value per "
                             "true element) would have a data-dependent shape", loc)
        if v.dtype != old.dtype:
            v = self._tracer.emit("cast", [v], {"dtype": old.dtype})
        cond = mask._v()
        if mask.ndim < self.ndim:  # a mask over the leading dimensions selects whole slices
            cond = self._tracer.emit("reshape", [cond], {
                "shape": tuple(mask.shape) + (1,) * (self.ndim - mask.ndim)})
        new = self._tracer.emit("where", [cond, v, old], {}, inplace_of=2)
        self._tracer.overwritten.add(old)
        self._write(new)
        return self

    # -- Paddle's meta-changing inplace forms: the object becomes the view ----------------------
    def _become(self, other: "Tensor") -> "Tensor":
        self._storage, self._chain = other._storage, other._chain
        self._value, self._version, self._layout = other._value, other._version, other._layout
        self._chain_grad = other._chain_grad
        return self

    # They change no data, but the leaf rule still holds for them (Paddle, PyTorch).
    def transpose_(self, perm):
        self._check_leaf("transpose_")
        return self._become(self.transpose(perm))

    def t_(self):
        self._check_leaf("t_")
        return self._become(self.t())

    def reshape_(self, shape):
        self._check_leaf("reshape_")
        return self._become(self.reshape(shape))

    def squeeze_(self, axis=None):
        self._check_leaf("squeeze_")
        return self._become(self.squeeze(axis))

    def unsqueeze_(self, axis):
        self._check_leaf("unsqueeze_")
        return self._become(self.unsqueeze(axis))

    def flatten_(self, start_axis=0, stop_axis=-1):
        self._check_leaf("flatten_")
        return self._become(self.flatten(start_axis, stop_axis))

    # -- autodiff -------------------------------------------------------------------------------
    def backward(self, grad_tensor=None, retain_graph=False):
        _backward(self._tracer, self, grad_tensor, wrap=Tensor._fresh,
                  retain_graph=retain_graph)

    # -- operators --------------------------------------------------------------------------------
    def __add__(self, y): return self._op("add", y)
    def __radd__(self, y): return self._rop("add", y)
    def __sub__(self, y): return self._op("subtract", y)
    def __rsub__(self, y): return self._rop("subtract", y)
    def __mul__(self, y): return self._op("multiply", y)
    def __rmul__(self, y): return self._rop("multiply", y)
    def __truediv__(self, y): return self._op("divide", y)
    def __rtruediv__(self, y): return self._rop("divide", y)
    def __pow__(self, y): return self.pow(y)
    def __rpow__(self, y): return self._rop("pow", y)
    def __floordiv__(self, y): return self._op("floor_divide", y)
    def __rfloordiv__(self, y): return self._rop("floor_divide", y)
    def __mod__(self, y): return self._op("remainder", y)
    def __rmod__(self, y): return self._rop("remainder", y)
    def __matmul__(self, y): return self.matmul(y)
    def __rmatmul__(self, y): return to_tensor(y).matmul(self)
    def __neg__(self): return self._op("neg")
    def __abs__(self): return self._op("abs")
    def __invert__(self): return self._op("logical_not")
    def __and__(self, y): return self._op("logical_and", y)
    def __or__(self, y): return self._op("logical_or", y)
    # Paddle: augmented assignment is inplace.
    def __iadd__(self, y): return self._inplace("add", y)
    def __isub__(self, y): return self._inplace("subtract", y)
    def __imul__(self, y): return self._inplace("multiply", y)
    def __itruediv__(self, y): return self._inplace("divide", y)
    def __ifloordiv__(self, y): return self._inplace("floor_divide", y)
    def __imod__(self, y): return self._inplace("remainder", y)


def _bool_mask(idx):
    """`idx` as a boolean mask Tensor, or None when it is not one."""
    if isinstance(idx, Tensor) and idx.dtype == BOOL:
        return idx
    if isinstance(idx, np.ndarray) and idx.dtype == BOOL:
        return to_tensor(idx)
    if isinstance(idx, list) and idx and all(isinstance(i, (bool, np.bool_)) for i in idx):
        return to_tensor(np.asarray(idx))
    return None


# ufunc -> (method when the tensor is the left operand, method when it is the right one)
_UFUNC_OPERATORS = {
    np.add: ("__add__", "__radd__"), np.subtract: ("__sub__", "__rsub__"),
    np.multiply: ("__mul__", "__rmul__"), np.true_divide: ("__truediv__", "__rtruediv__"),
    np.power: ("__pow__", "__rpow__"), np.matmul: ("__matmul__", "__rmatmul__"),
    np.floor_divide: ("__floordiv__", "__rfloordiv__"), np.remainder: ("__mod__", "__rmod__"),
    np.bitwise_and: ("__and__", "__rand__"), np.bitwise_or: ("__or__", "__ror__"),
    np.less: ("__lt__", "__gt__"), np.less_equal: ("__le__", "__ge__"),
    np.greater: ("__gt__", "__lt__"), np.greater_equal: ("__ge__", "__le__"),
    np.equal: ("__eq__", "__eq__"), np.not_equal: ("__ne__", "__ne__"),
}


# -- issue 24: Paddle's Tensor methods that compose registry ops (compiler/tensor_paddle.py) --
_paddle.install(Tensor)

install_methods(Tensor)


def random_tensor(shape, dtype, seed, dist: str, what: str) -> Tensor:
    """A fresh tensor of Philox numbers ("uniform" in [0, 1) or "normal") of a float `dtype`
    (an integer, bool or 16-bit float target draws in float32). Each call is a new call site
    with its own stream."""
    tracer = _tr.current()
    dtype = np.dtype(dtype)
    # a 16-bit float draws in float32 (what its arithmetic computes in; one rounding later)
    draw = dtype if dkind(dtype) == "f" and not is_half(dtype) else DEFAULT_FLOAT
    uint64 = np.dtype(np.uint64)
    if isinstance(seed, Tensor):
        if seed.shape != [] or dkind(seed.dtype) not in "iu":
            raise TraceError(f"{what}: the seed must be a 0-d integer tensor (uint64), not "
                             f"{seed.dtype}{seed.shape}", _tr.user_loc())
        s = seed if seed.dtype == uint64 else seed.cast(uint64)
        s = s._v()
    elif isinstance(seed, numbers.Integral) and not isinstance(seed, bool) \
            and 0 <= int(seed) < 2 ** 64:
        s = tracer.emit("full", [], {"shape": (), "value": np.uint64(seed), "dtype": uint64})
    else:
        raise TraceError(f"{what}: the seed must be a 0-d uint64 tensor or an int in "
                         f"[0, 2**64), not {seed!r}", _tr.user_loc())
    shape = tuple(int(d) for d in shape)
    stream = tracer.stream_base + tracer.random_streams
    tracer.random_streams += 1
    # (the counters are the loop's element indices: no index array)
    out = Tensor._fresh(tracer.emit("philox", [s], {"shape": shape, "stream": stream,
                                                     "dist": dist, "dtype": draw}))
    return out


def in_float32(tensors: list) -> tuple[list, np.dtype | None]:
    """A composite function's 16-bit float operands widened to float32, and the dtype to round
    its result to (None when no operand is a 16-bit float). A composite of several ops computes
    in float32 and rounds once, as one op does (and as Paddle's kernels do): `softplus` of a
    float16 `x = 12` would overflow in a float16 `exp`."""
    halves = {t.dtype for t in tensors if isinstance(t, Tensor) and is_half(t.dtype)}
    if not halves:
        return tensors, None
    wide = [t.cast(DEFAULT_FLOAT) if isinstance(t, Tensor) and is_half(t.dtype) else t
            for t in tensors]
    return wide, promote(*halves)


def rounded(result: Tensor, dtype: np.dtype | None) -> Tensor:
    """`in_float32`'s other half: a float32 result rounded once to `dtype`."""
    if dtype is None or result.dtype != DEFAULT_FLOAT or dtype == DEFAULT_FLOAT:
        return result
    return result.cast(dtype)


def check_dtype(dtype, loc=None):
    if np.dtype(dtype) not in SUPPORTED_DTYPES:
        raise TraceError(f"unsupported dtype {np.dtype(dtype)}: use one of "
                         + ", ".join(d.name for d in SUPPORTED_DTYPES), loc or _tr.user_loc())


def _capture(data: np.ndarray, const: np.ndarray, node):
    """Remember a captured array so that `cc.compile` can retrace when it changes. An array
    that owns its memory is held weakly (once it is gone it can't change); a view is held
    strongly, since its base can still change after the view object is dropped. The snapshot
    is the constant itself when the dtype was kept (no extra copy)."""
    ref = weakref.ref(data) if data.base is None else (lambda: data)
    snapshot = const if const.dtype == data.dtype else data.copy()
    _tr.current().graph.captured.append((node, ref, snapshot))


def to_tensor(data, dtype=None, stop_gradient=True) -> Tensor:
    """A constant captured at trace time (the data is copied, as Paddle does)."""
    if isinstance(data, Tensor):
        out = data._op("contiguous") if dtype is None else data.cast(dtype)
    else:
        if isinstance(data, (list, tuple)) and any(isinstance(d, Tensor) for d in data):
            raise TraceError("cc.to_tensor of a list of traced tensors: combine them in the "
                             "graph with cc.concat (and unsqueeze)", _tr.user_loc())
        if _is_scalar(data) and dtype is None:
            dtype = scalar_dtype(data, None)
        arr = np.array(data, dtype=dtype)
        if arr.dtype == np.float64 and dtype is None and not isinstance(data, np.ndarray):
            arr = arr.astype(DEFAULT_FLOAT)  # Python floats default to Paddle's float32
        check_dtype(arr.dtype)
        out = Tensor._fresh(_tr.current().emit("constant", [], {"value": arr}))
        if isinstance(data, np.ndarray):
            _capture(data, arr, out._value.producer)
    if not stop_gradient:
        out.stop_gradient = False
    return out


def state_tensor(array: np.ndarray, name: str, trainable: bool = False, guard=None) -> Tensor:
    """Inside a trace, the Tensor standing for `array`: a caller-owned NumPy array that is not
    an argument of the traced function (a layer's parameter or buffer, an optimizer's moment,
    a scheduler's learning rate). The program takes it as an extra input on every call, so
    in-place updates reach the array and a new value of it never retraces (captured arrays, in
    contrast, are constants). The same array gives the same Tensor within one trace.
    `trainable`: the Tensor starts with `stop_gradient = False`. `guard`: a callable that
    returns False once the program must be traced again (a layer's structure changed); see
    `compiler.tracer.state_changed`."""
    tracer = _tr.current()
    if guard is not None and guard not in tracer.guards:
        tracer.guards.append(guard)
    known = tracer.states.get(id(array))
    if known is not None:
        return known
    if not isinstance(array, np.ndarray):
        raise TraceError(f"state '{name}' is a {type(array).__name__}, not a numpy array",
                         _tr.user_loc())
    check_dtype(array.dtype)
    # (plain views: a Parameter's __array_function__ would wrap each of these n^2 checks)
    plain = array.view(np.ndarray)
    for other, other_name in zip(tracer.state_arrays + tracer.argument_arrays,
                                 tracer.state_names + tracer.argument_names):
        if np.may_share_memory(plain, other.view(np.ndarray)):
            raise TraceError(f"the array of '{name}' shares memory with '{other_name}': a "
                             "layer's or optimizer's arrays must be its own (pass a copy)",
                             _tr.user_loc())
    taken = {v.name for v in tracer.graph.inputs}
    unique, k = name, 1
    while unique in taken:
        k += 1
        unique = f"{name}#{k}"
    storage = Storage(tracer.graph.add_input(unique, array.shape, array.dtype),
                      input_index=len(tracer.input_storages))
    tracer.input_storages.append(storage)
    t = Tensor(tracer, storage, name=unique)
    tracer.states[id(array)] = t
    tracer.state_arrays.append(array)
    tracer.state_names.append(unique)
    if trainable:
        t.stop_gradient = False
    return t
