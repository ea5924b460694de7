"""Elementwise ops: unary math, binary arithmetic with numpy broadcasting, comparisons, logic.

VJP rules receive `ctx` (forward inputs `ctx.inputs`, output `ctx.out`, `ctx.attrs`,
`ctx.needs_grad`) and the output gradient `g`, all traced Tensors, and return one gradient per
input (None where not needed). The autodiff pass reduces broadcast gradients to input shapes.
"""
from __future__ import annotations

import math

import numpy as np

from . import scalar as S
from ..errors import ShapeError, TraceError
from .registry import (BOOL, ELEMENTWISE, broadcast_shapes, defop, dtype_class, float_of,
                       promote)

# -- dtype rules ---------------------------------------------------------------------------


def _same(t):
    return t[1]


def _float(t):
    return float_of(t[1])


def _bool(t):
    return BOOL


def _numeric(t):
    """Same dtype, but not bool: numpy (and Paddle) have no bool negative or difference."""
    if t[1] == BOOL:
        raise TraceError("not defined for bool tensors: use logical_not, or cast to a "
                         "number first")
    return t[1]


def _numeric2(da, db):
    return _numeric(((), promote(da, db)))


def _in_float(ref):
    def ref_in_float(x, **attrs):
        return ref(np.asarray(x).astype(float_of(x.dtype), copy=False), **attrs)
    return ref_in_float


def unary(name, ref, expr, *, vjp=None, dtype=_same, inplace=True, doc="", infer=None):
    def infer_same_shape(types, **attrs):
        return types[0][0], dtype(types[0])
    infer = infer or infer_same_shape
    if dtype is _float:
        # Compute in the output's float: numpy would evaluate `exp(bool)` in float16.
        ref = _in_float(ref)
    return defop(name, ELEMENTWISE, infer, ref, vjp=vjp, expr=expr,
                 inplace=(name + "_") if inplace else None, doc=doc)


def binary(name, ref, expr, *, vjp=None, dtype=None, inplace=True):
    def infer(types, **attrs):
        (sa, da), (sb, db) = types
        out_dtype = dtype(da, db) if dtype else promote(da, db)
        return broadcast_shapes(sa, sb), out_dtype
    return defop(name, ELEMENTWISE, infer, ref, vjp=vjp, expr=expr,
                 inplace=(name + "_") if inplace else None)


a, b, c = S.arg(0), S.arg(1), S.arg(2)

# -- unary math ----------------------------------------------------------------------------
unary("neg", np.negative, -a, dtype=_numeric, vjp={"none": lambda ctx, g: (-g,)})
unary("abs", np.abs, S.call("abs", a),
      vjp={"input": lambda ctx, g: (g * ctx.inputs[0].sign(),)})
# NaN has no sign: the innermost `where` keeps it (`a == a` is false only for NaN).
unary("sign", np.sign, S.call("where", a > 0, 1, S.call("where", a < 0, -1,
                                                         S.call("where", a.eq(a), 0, a))),
      dtype=_numeric)
unary("exp", np.exp, S.call("exp", a), dtype=_float,
      vjp={"output": lambda ctx, g: (g * ctx.out,),
           "input": lambda ctx, g: (g * ctx.inputs[0].exp(),)})
unary("log", np.log, S.call("log", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / ctx.inputs[0],)})
unary("sin", np.sin, S.call("sin", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g * ctx.inputs[0].cos(),)})
unary("cos", np.cos, S.call("cos", a), dtype=_float,
      vjp={"input": lambda ctx, g: (-(g * ctx.inputs[0].sin()),)})
unary("tan", np.tan, S.call("tan", a), dtype=_float,
      vjp={"output": lambda ctx, g: (g * (ctx.out * ctx.out + 1.0),),
           "input": lambda ctx, g: (g / ctx.inputs[0].cos().square(),)})
unary("tanh", np.tanh, S.call("tanh", a), dtype=_float,
      vjp={"output": lambda ctx, g: (g * (1.0 - ctx.out * ctx.out),),
           "input": lambda ctx, g: (g * (1.0 - ctx.inputs[0].tanh().square()),)})


def _sigmoid_ref(x):
    # exp of a negative argument only: no overflow warnings for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(float_of(x.dtype))


def _sigmoid_vjp_input(ctx, g):
    s = ctx.inputs[0].sigmoid()
    return (g * s * (1.0 - s),)


unary("sigmoid", _sigmoid_ref, 1.0 / (1.0 + S.call("exp", -a)), dtype=_float,
      vjp={"output": lambda ctx, g: (g * ctx.out * (1.0 - ctx.out),),
           "input": _sigmoid_vjp_input})
unary("sqrt", np.sqrt, S.call("sqrt", a), dtype=_float,
      vjp={"output": lambda ctx, g: (g / (ctx.out * 2.0),),
           "input": lambda ctx, g: (g / (ctx.inputs[0].sqrt() * 2.0),)})
unary("square", np.square, a * a,
      vjp={"input": lambda ctx, g: (g * ctx.inputs[0] * 2.0,)})
unary("relu", lambda x: np.maximum(x, 0).astype(x.dtype), S.call("max", a, 0),
      vjp={"output": lambda ctx, g: (g.where_positive(ctx.out),),
           "input": lambda ctx, g: (g.where_positive(ctx.inputs[0]),)})
_erf = np.frompyfunc(math.erf, 1, 1)
unary("erf", lambda x: _erf(x).astype(float_of(x.dtype)), S.call("erf", a), dtype=_float,
      vjp={"input": lambda ctx, g: (
          g * (-ctx.inputs[0].square()).exp() * (2.0 / math.sqrt(math.pi)),)})


def _scale_ref(x, scale, bias, bias_after_scale):
    out = x * scale + bias if bias_after_scale else (x + bias) * scale
    return np.asarray(out).astype(float_of(x.dtype) if x.dtype.kind != "f" else x.dtype)


unary("scale", _scale_ref, None, dtype=_float,
      vjp={"none": lambda ctx, g: (g * ctx.attrs["scale"],)},
      doc="scale * x + bias (bias_after_scale) or scale * (x + bias)")


def _clip_vjp(ctx, g):
    x, lo, hi = ctx.inputs[0], ctx.attrs["min"], ctx.attrs["max"]
    inside = (x >= lo).logical_and(x <= hi)
    return (g.where_mask(inside),)


unary("clip", lambda x, min, max: np.clip(x, min, max).astype(x.dtype), None,
      vjp={"input": _clip_vjp})
unary("logical_not", np.logical_not, S.call("not", a), dtype=_bool)
unary("cast", lambda x, dtype: x.astype(dtype), None, inplace=False,
      infer=lambda types, dtype: (types[0][0], np.dtype(dtype)),
      vjp={"none": lambda ctx, g: (g.cast(ctx.inputs[0].dtype),)})
unary("contiguous", lambda x: np.ascontiguousarray(x).copy(), a, inplace=False,
      vjp={"none": lambda ctx, g: (g,)}, doc="a copy in a fresh buffer")

# -- binary arithmetic ---------------------------------------------------------------------
binary("add", np.add, a + b, vjp={"none": lambda ctx, g: (g, g)})
binary("subtract", np.subtract, a - b, dtype=_numeric2,
       vjp={"none": lambda ctx, g: (g, -g)})
binary("multiply", np.multiply, a * b,
       vjp={"input": lambda ctx, g: (g * ctx.inputs[1] if ctx.needs_grad[0] else None,
                                     g * ctx.inputs[0] if ctx.needs_grad[1] else None)})


def _divide_vjp(ctx, g):
    x, y = ctx.inputs
    return (g / y if ctx.needs_grad[0] else None,
            -(g * x / (y * y)) if ctx.needs_grad[1] else None)


binary("divide", np.true_divide, a / b, vjp={"input": _divide_vjp},
       dtype=lambda da, db: float_of(promote(da, db)))


def _pow_vjp(ctx, g):
    x, y = ctx.inputs
    gx = g * y * x.pow(y - 1.0) if ctx.needs_grad[0] else None
    gy = g * x.pow(y) * x.log() if ctx.needs_grad[1] else None
    return gx, gy


binary("pow", np.power, S.call("pow", a, b), vjp={"input": _pow_vjp})
binary("maximum", np.maximum, S.call("max", a, b),
       vjp={"input": lambda ctx, g: (g.where_mask(ctx.inputs[0] >= ctx.inputs[1]),
                                     g.where_mask(ctx.inputs[0] < ctx.inputs[1]))})
binary("minimum", np.minimum, S.call("min", a, b),
       vjp={"input": lambda ctx, g: (g.where_mask(ctx.inputs[0] <= ctx.inputs[1]),
                                     g.where_mask(ctx.inputs[0] > ctx.inputs[1]))})

# -- comparisons and logic (never differentiable; inplace forms keep the target's dtype) ---
for _name, _ref, _expr in [
    ("greater_than", np.greater, a > b), ("less_than", np.less, a < b),
    ("greater_equal", np.greater_equal, a >= b), ("less_equal", np.less_equal, a <= b),
    ("equal", np.equal, a.eq(b)), ("not_equal", np.not_equal, a.ne(b)),
    ("logical_and", np.logical_and, S.call("and", a, b)),
    ("logical_or", np.logical_or, S.call("or", a, b)),
]:
    binary(_name, _ref, _expr, dtype=lambda da, db: BOOL)


def _where_infer(types, **attrs):
    (sc, dc), (sx, dx), (sy, dy) = types
    return broadcast_shapes(sc, sx, sy), promote(dx, dy)


defop("where", ELEMENTWISE, _where_infer, lambda cond, x, y: np.where(cond, x, y),
      expr=S.call("where", a, b, c),
      vjp={"input": lambda ctx, g: (None, g.where_mask(ctx.inputs[0]),
                                    g.where_mask(ctx.inputs[0].logical_not()))})


def _broadcast_to_infer(types, shape):
    out = broadcast_shapes(types[0][0], tuple(shape))
    if out != tuple(shape):
        raise ShapeError(f"can't broadcast {list(types[0][0])} to {list(shape)}")
    return out, types[0][1]


defop("broadcast_to", ELEMENTWISE, _broadcast_to_infer,
      lambda x, shape: np.broadcast_to(x, shape).copy(), expr=a,
      vjp={"none": lambda ctx, g: (g,)},
      doc="a materialized (copied) broadcast; the view form is `expand`")


def expr_for(op, attrs, in_dtypes, out_dtype):
    """The scalar expression of one elementwise node (some depend on the node's attrs)."""
    if op.name == "scale":
        s, bias = attrs["scale"], attrs["bias"]
        x = S.cast(a, out_dtype) if np.dtype(in_dtypes[0]) != out_dtype else a
        return x * s + bias if attrs["bias_after_scale"] else (x + bias) * s
    if op.name == "clip":
        return S.call("min", S.call("max", a, attrs["min"]), attrs["max"])
    if op.name == "cast":
        return S.cast(a, attrs["dtype"])
    # Operands that are not of the output's float dtype are cast to it first: a typed
    # emitter would otherwise divide ints as ints (`int / int` is a float op here) or call
    # `exp` on an integer. `where`'s condition stays bool.
    out_dtype = np.dtype(out_dtype)
    if out_dtype.kind != "f":
        return op.expr
    casts = {i: S.cast(S.arg(i), out_dtype) for i, d in enumerate(in_dtypes)
             if np.dtype(d) != out_dtype and not (op.name == "where" and i == 0)}
    return S.substitute(op.expr, casts) if casts else op.expr


def is_same_class(d1, d2) -> bool:
    return dtype_class(d1) == dtype_class(d2)
