"""The `Tensor` methods made at import rather than written out, and the argument check
around every public one: `install_methods(Tensor)` (called once by compiler.tensor) adds a
method and its inplace form for each elementwise op of the registry (`x.sin()`, `x.sin_()`,
...) and wraps every public method and operator with `user_errors`, so that a bad argument
raises a `TraceError` naming the user's line."""
from __future__ import annotations

import functools

from . import tracer as _tr
from .errors import CompilerError, TraceError
from .ops import ELEMENTWISE, REGISTRY


def install_methods(Tensor):
    """Patch the class: the registry's elementwise methods, then the argument check (which
    wraps those too)."""
    _install_elementwise_methods(Tensor)
    Tensor.multiply_ = lambda self, y: self._inplace("multiply", y)
    Tensor.divide_ = lambda self, y: self._inplace("divide", y)
    _check_user_arguments(Tensor)


def _install_elementwise_methods(Tensor):
    """`x.sin()`, `x.sin_()`, `x.greater_than(y)`, ... from the registry's elementwise ops."""
    for name, op in REGISTRY.items():
        # gelu and layer_norm are reached through F (Paddle has no such Tensor methods);
        # `fused` is made by the fusion pass, never by the user; `fill` by fill_/zero_
        if op.kind != ELEMENTWISE or op.random or name in (
                "cast", "broadcast_to", "fused", "gelu", "gelu_grad", "layer_norm", "fill"):
            continue
        if not hasattr(Tensor, name):
            setattr(Tensor, name, lambda self, *ys, _n=name, **kw: self._op(_n, *ys, **kw))
        if op.inplace and not hasattr(Tensor, op.inplace):
            setattr(Tensor, op.inplace,
                    lambda self, *ys, _n=name, **kw: self._inplace(_n, *ys, **kw))


# Errors Python raises on a bad argument deep inside a method (`int("a")`, `np.dtype("foo")`,
# comparing a str with a float) become a TraceError naming the user's line: what the user
# passed is wrong, not the compiler (issue 18: never an internal exception).
ARGUMENT_ERRORS = (TypeError, ValueError, IndexError, KeyError, OverflowError, AttributeError)


def user_errors(fn, name=None):
    """`fn`, with Python's argument errors re-raised as a `TraceError` naming the user's line."""
    name = name or fn.__name__

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CompilerError:
            raise
        except ARGUMENT_ERRORS as e:
            raise TraceError(f"{name}: bad argument ({type(e).__name__}: {e})",
                             _tr.user_loc()) from e
    checked._user_errors = True
    return checked


_OPERATORS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__pow__", "__rpow__", "__floordiv__",
              "__rfloordiv__", "__mod__", "__rmod__", "__matmul__", "__rmatmul__", "__neg__",
              "__abs__", "__invert__", "__and__", "__or__", "__iadd__", "__isub__", "__imul__",
              "__itruediv__", "__ifloordiv__", "__imod__", "__eq__", "__ne__", "__lt__",
              "__le__", "__gt__", "__ge__", "__getitem__", "__setitem__")


# Building blocks of VJP rules and the autodiff entry: an error there is the compiler's, and
# must surface as such.
_INTERNAL = ("backward", "primitive", "reshape_to", "where_mask", "where_positive",
             "full_like_value", "zeros_like_shape", "slice_index", "slice_scatter")


def _check_user_arguments(Tensor):
    for name in [n for n in dir(Tensor) if not n.startswith("_") and n not in _INTERNAL] \
            + list(_OPERATORS):
        attr = Tensor.__dict__.get(name)
        if isinstance(attr, property):
            if name == "T":
                setattr(Tensor, name, property(user_errors(attr.fget, "T")))
        elif callable(attr) and not getattr(attr, "_user_errors", False):
            setattr(Tensor, name, user_errors(attr, f"Tensor.{name.strip('_') or name}"))

