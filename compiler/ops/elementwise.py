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
from .registry import (BOOL, ELEMENTWISE, dkind, broadcast_shapes, defop, dtype_class, float_of,
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


def _ufunc_into(ufunc):
    """`into` for an op whose reference is `ufunc` over operands converted to the output's
    dtype (or, for a bool result, numpy's own loop): NumPy casts each operand in small
    buffers and writes `out` directly; an operand with `out`'s exact layout is safe."""
    def into(out, *args):
        if out.dtype == BOOL:
            ufunc(*args, out=out)
        else:
            ufunc(*args, out=out, dtype=out.dtype, casting="unsafe")
    return into


def unary(name, ref, expr, *, vjp=None, dtype=_same, inplace=True, doc="", infer=None,
          into=None):
    def infer_same_shape(types, **attrs):
        return types[0][0], dtype(types[0])
    infer = infer or infer_same_shape
    if into is None and isinstance(ref, np.ufunc):
        into = _ufunc_into(ref)
    if dtype is _float:
        # Compute in the output's float: numpy would evaluate `exp(bool)` in float16.
        ref = _in_float(ref)
    return defop(name, ELEMENTWISE, infer, ref, vjp=vjp, expr=expr,
                 inplace=(name + "_") if inplace else None, doc=doc, into=into)


def binary(name, ref, expr, *, vjp=None, dtype=None, inplace=True, into=None):
    def infer(types, **attrs):
        (sa, da), (sb, db) = types
        out_dtype = dtype(da, db) if dtype else promote(da, db)
        return broadcast_shapes(sa, sb), out_dtype

    def ref_in_out_dtype(x, y):
        # Operands are converted to the result's dtype first, as the scalar expression does
        # (`expr_for`): numpy would add int64 and float32 in float64 and round afterwards.
        out = dtype(x.dtype, y.dtype) if dtype else promote(x.dtype, y.dtype)
        if out != BOOL:
            x, y = x.astype(out, copy=False), y.astype(out, copy=False)
        return ref(x, y)
    return defop(name, ELEMENTWISE, infer, ref_in_out_dtype, vjp=vjp, expr=expr,
                 inplace=(name + "_") if inplace else None,
                 into=into or (_ufunc_into(ref) if isinstance(ref, np.ufunc) else None))


a, b, c = S.arg(0), S.arg(1), S.arg(2)

# -- unary math ----------------------------------------------------------------------------
unary("neg", np.negative, -a, dtype=_numeric, vjp={"none": lambda ctx, g: (-g,)})
unary("abs", np.abs, S.call("abs", a),
      vjp={"input": lambda ctx, g: (g * ctx.inputs[0].sign(),)})
# sign(NaN) is NaN (NumPy): `a != a` picks out NaN, never true for integers.
unary("sign", np.sign, S.call("where", a.ne(a), a,
                              S.call("where", a > 0, 1, S.call("where", a < 0, -1, 0))),
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


# As the reference: exp of a non-positive argument only, so that a large |x| neither overflows
# nor loses the tiny (subnormal) results on the negative side.
_e = S.call("exp", -S.call("abs", a))
unary("sigmoid", _sigmoid_ref, S.call("where", a >= 0, 1.0 / (1.0 + _e), _e / (1.0 + _e)),
      dtype=_float,
      vjp={"output": lambda ctx, g: (g * ctx.out * (1.0 - ctx.out),),
           "input": _sigmoid_vjp_input})
unary("sqrt", np.sqrt, S.call("sqrt", a), dtype=_float,
      vjp={"output": lambda ctx, g: (g / (ctx.out * 2.0),),
           "input": lambda ctx, g: (g / (ctx.inputs[0].sqrt() * 2.0),)})
unary("square", np.square, a * a, dtype=_numeric,
      vjp={"input": lambda ctx, g: (g * ctx.inputs[0] * 2.0,)})
# max/min keep the first operand on ties (S.maximum): relu(-0.0) is -0.0, as on cpu and gpu.
unary("relu", lambda x: S.maximum(x, 0).astype(x.dtype), S.call("max", a, 0),
      into=lambda out, x: S.maximum(x, 0, out=out, dtype=out.dtype, casting="unsafe"),
      vjp={"output": lambda ctx, g: (g.where_positive(ctx.out),),
           "input": lambda ctx, g: (g.where_positive(ctx.inputs[0]),)})
_erf = np.frompyfunc(math.erf, 1, 1)
# frompyfunc returns a Python float for a 0-d input: asarray before astype.
unary("erf", lambda x: np.asarray(_erf(x)).astype(float_of(x.dtype)), S.call("erf", a),
      dtype=_float,
      vjp={"input": lambda ctx, g: (
          g * (-ctx.inputs[0].square()).exp() * (2.0 / math.sqrt(math.pi)),)})


def _scale_dtype(t):
    """Paddle: the input's dtype (integers scale in integer arithmetic, by whole numbers);
    bool, which Paddle doesn't scale, gives float32."""
    return float_of(t[1]) if t[1] == BOOL else t[1]


def _scale_ref(x, scale, bias, bias_after_scale):
    x = np.asarray(x).astype(_scale_dtype(((), x.dtype)), copy=False)
    # Python scalars are weak (NEP 50): an int32 tensor stays int32 and wraps, as in C.
    out = x * scale + bias if bias_after_scale else (x + bias) * scale
    return np.asarray(out).astype(x.dtype, copy=False)


def _scale_into(out, x, scale, bias, bias_after_scale):
    # The reference's two steps in the output's dtype (NEP 50: the scalars adopt it).
    kw = dict(out=out, dtype=out.dtype, casting="unsafe")
    if bias_after_scale:
        np.add(np.multiply(x, scale, **kw), bias, **kw)
    else:
        np.multiply(np.add(x, bias, **kw), scale, **kw)


unary("scale", _scale_ref, None, dtype=_scale_dtype, into=_scale_into,
      vjp={"none": lambda ctx, g: (g * ctx.attrs["scale"],)},
      doc="scale * x + bias (bias_after_scale) or scale * (x + bias)")


unary("asinh", np.arcsinh, S.call("asinh", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / (ctx.inputs[0].square() + 1.0).sqrt(),)})
unary("acosh", np.arccosh, S.call("acosh", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / (ctx.inputs[0].square() - 1.0).sqrt(),)})
unary("atanh", np.arctanh, S.call("atanh", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / (1.0 - ctx.inputs[0].square()),)})



# -- issue 10: rounding, reciprocal forms, more logarithms, hyperbolic and inverse trig -------
def _float_only(t):
    """Paddle's rounding ops take floating-point tensors only."""
    if dkind(t[1]) != "f":
        raise TraceError(f"defined for floating-point tensors only, not {t[1]}: cast first")
    return t[1]


def _zero_grad(ctx, g):
    # Piecewise constant (PyTorch and Paddle): the gradient is 0 everywhere, also at the jumps.
    return (g.zeros_like_shape(ctx.inputs[0].shape),)


for _name, _ref in [("floor", np.floor), ("ceil", np.ceil), ("round", np.rint),
                    ("trunc", np.trunc)]:
    unary(_name, _ref, S.call("rint" if _name == "round" else _name, a), dtype=_float_only,
          vjp={"none": _zero_grad})
unary("reciprocal", lambda x: np.reciprocal(x), 1.0 / a, dtype=_float,
      vjp={"output": lambda ctx, g: (-(g * ctx.out * ctx.out),),
           "input": lambda ctx, g: (-(g / ctx.inputs[0].square()),)})
unary("rsqrt", lambda x: 1.0 / np.sqrt(x), 1.0 / S.call("sqrt", a), dtype=_float,
      vjp={"output": lambda ctx, g: (g * ctx.out * ctx.out * ctx.out * -0.5,),
           "input": lambda ctx, g: (g * ctx.inputs[0].rsqrt() / ctx.inputs[0] * -0.5,)})
unary("expm1", np.expm1, S.call("expm1", a), dtype=_float,
      vjp={"output": lambda ctx, g: (g * (ctx.out + 1.0),),
           "input": lambda ctx, g: (g * ctx.inputs[0].exp(),)})
unary("log1p", np.log1p, S.call("log1p", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / (ctx.inputs[0] + 1.0),)})
unary("log2", np.log2, S.call("log2", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / (ctx.inputs[0] * math.log(2.0)),)})
unary("log10", np.log10, S.call("log10", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / (ctx.inputs[0] * math.log(10.0)),)})
unary("sinh", np.sinh, S.call("sinh", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g * ctx.inputs[0].cosh(),)})
unary("cosh", np.cosh, S.call("cosh", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g * ctx.inputs[0].sinh(),)})
unary("asin", np.arcsin, S.call("asin", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / (1.0 - ctx.inputs[0].square()).sqrt(),)})
unary("acos", np.arccos, S.call("acos", a), dtype=_float,
      vjp={"input": lambda ctx, g: (-(g / (1.0 - ctx.inputs[0].square()).sqrt()),)})
unary("atan", np.arctan, S.call("atan", a), dtype=_float,
      vjp={"input": lambda ctx, g: (g / (ctx.inputs[0].square() + 1.0),)})

# -- activations with attributes (their expression is a function of the attrs) --------------
def _elu_ref(x, alpha):
    # (S.minimum: min(-0.0, 0) is -0.0, so elu(-0.0) is -0.0, as on cpu and gpu)
    return np.where(x > 0, x, alpha * np.expm1(S.minimum(x, 0))).astype(x.dtype)


# The input form only: with alpha < 0 the output no longer tells which branch ran.
unary("elu", _elu_ref, lambda at: S.call(  # expm1, as the reference: exp(a) - 1 cancels near 0
          "where", a > 0, a, S.call("expm1", S.call("min", a, 0)) * at["alpha"]), dtype=_float,
      vjp={"input": lambda ctx, g: (g.where_mask(ctx.inputs[0] > 0) + g.where_mask(
          ctx.inputs[0] <= 0) * ctx.inputs[0].exp() * ctx.attrs["alpha"],)})
unary("leaky_relu", lambda x, negative_slope: np.where(x > 0, x, x * negative_slope)
      .astype(x.dtype), lambda at: S.call("where", a > 0, a, a * at["negative_slope"]),
      dtype=_float,
      vjp={"input": lambda ctx, g: (g.where_mask(ctx.inputs[0] > 0) + g.where_mask(
          ctx.inputs[0] <= 0) * ctx.attrs["negative_slope"],)})


def _hardtanh_vjp(which):
    # Paddle and PyTorch pass the gradient strictly inside (min, max); the output tells that
    # as well as the input does.
    def vjp(ctx, g):
        v = ctx.inputs[0] if which == "input" else ctx.out
        lo, hi = ctx.attrs["min"], ctx.attrs["max"]
        return (g.where_mask((v > lo).logical_and(v < hi)),)
    return vjp


unary("hardtanh", lambda x, min, max: S.minimum(S.maximum(x, min), max).astype(x.dtype),
      lambda at: S.call("min", S.call("max", a, at["min"]), at["max"]), dtype=_float,
      vjp={"input": _hardtanh_vjp("input"), "output": _hardtanh_vjp("output")})


# -- clip: the bounds are inputs (a Python scalar becomes a constant, a 0-d tensor stays one)
def _clip_infer(types):
    (sx, dx), (sl, _), (sh, _) = types
    _numeric(types[0])
    if broadcast_shapes(sx, sl, sh) != tuple(sx):
        raise ShapeError(f"clip: bounds of shapes {list(sl)} and {list(sh)} don't broadcast to "
                         f"the input's shape {list(sx)}")
    return tuple(sx), dx


def _clip_vjp(ctx, g):
    # The bounds get no gradient (Paddle treats them as attributes).
    x, lo, hi = ctx.inputs
    return (g.where_mask((x >= lo).logical_and(x <= hi)), None, None)


def _clip_into(out, x, lo, hi):
    if not x.dtype == lo.dtype == hi.dtype:
        return NotImplemented  # the reference rounds once, after both steps
    S.minimum(S.maximum(x, lo, out=out), hi, out=out)


# max/min propagate NaN from x, as np.clip does; lo > hi gives hi everywhere (np.clip, torch).
defop("clip", ELEMENTWISE, _clip_infer,
      lambda x, lo, hi: S.minimum(S.maximum(x, lo), hi).astype(x.dtype),
      expr=S.call("min", S.call("max", a, b), c), vjp={"input": _clip_vjp}, inplace="clip_",
      into=_clip_into)
unary("logical_not", np.logical_not, S.call("not", a), dtype=_bool)
unary("cast", lambda x, dtype: x.astype(dtype), None, inplace=False,
      into=lambda out, x, dtype: np.copyto(out, x, casting="unsafe"),
      infer=lambda types, dtype: (types[0][0], np.dtype(dtype)),
      vjp={"none": lambda ctx, g: (g.cast(ctx.inputs[0].dtype),)})
# np.array, not np.ascontiguousarray: that one turns a 0-d array into shape (1,).
unary("contiguous", lambda x: np.array(x, order="C", copy=True), a, inplace=False,
      into=lambda out, x: np.copyto(out, x),
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


def _pow_ref(x, y):
    if dkind(x.dtype) == "f" or dkind(y.dtype) == "f":
        return np.power(x, y)
    # Integers: a negative exponent gives what integer arithmetic gives for 1 / x**n (0),
    # except 1 for base 1 and +-1 for base -1; numpy would raise mid-run (ARCHITECTURE.md §4).
    dtype = promote(x.dtype, y.dtype)
    x, y = x.astype(dtype), y.astype(dtype)
    neg = y < 0
    out = np.power(x, np.where(neg, 0, y))
    small = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 0, 1, -1), 0))
    return np.where(neg, small, out).astype(dtype)


def _int_pow_expr():
    small = S.call("where", a.eq(1), 1,
                   S.call("where", a.eq(-1),
                          S.call("where", S.call("mod", b, 2).eq(0), 1, -1), 0))
    return S.call("where", b < 0, small, S.call("pow", a, S.call("max", b, 0)))


def _pow_vjp(ctx, g):
    # At a zero base, PyTorch's rules: d/dx is 0 where y == 0 (not 0 * 0**-1 = NaN), and
    # d/dy is 0 where y >= 0 (not 0 * log(0) = NaN).
    x, y = ctx.inputs
    gx = (g * y * x.pow(y - 1.0)).where_mask(y != 0) if ctx.needs_grad[0] else None
    gy = (g * x.pow(y) * x.log()).where_mask((x != 0).logical_or(y < 0)) \
        if ctx.needs_grad[1] else None
    return gx, gy


binary("pow", _pow_ref, S.call("pow", a, b), vjp={"input": _pow_vjp}, dtype=_numeric2)


def _remainder_vjp(ctx, g):
    x, y = ctx.inputs
    return (g if ctx.needs_grad[0] else None,
            -(g * x.floor_divide(y)) if ctx.needs_grad[1] else None)


# Rounding towards -inf (Python, NumPy, Paddle). Integer division by zero gives 0 and
# INT_MIN // -1 wraps, as NumPy does; floor_divide has no gradient (Paddle).
binary("floor_divide", np.floor_divide, S.call("floordiv", a, b), dtype=_numeric2)
binary("remainder", np.remainder, S.call("mod", a, b), dtype=_numeric2,
       vjp={"input": _remainder_vjp})


def _select_vjp(lose_x, lose_y):
    """maximum/minimum: the gradient goes to the operand that was selected, and where the two
    are equal each gets half (PyTorch's rule, which the central difference agrees with).
    `lose_x(x, y)` is the mask where x was not selected."""
    def vjp(ctx, g):
        x, y = ctx.inputs
        tie = (g * 0.5).where_mask(x == y)
        return (g.where_mask(lose_x(x, y).logical_not()) - tie if ctx.needs_grad[0] else None,
                g.where_mask(lose_y(x, y).logical_not()) - tie if ctx.needs_grad[1] else None)
    return vjp


binary("maximum", S.maximum, S.call("max", a, b), into=_ufunc_into(S.maximum),
       vjp={"input": _select_vjp(lambda x, y: x < y, lambda x, y: x > y)})
binary("minimum", S.minimum, S.call("min", a, b), into=_ufunc_into(S.minimum),
       vjp={"input": _select_vjp(lambda x, y: x > y, lambda x, y: x < y)})

# -- comparisons and logic (never differentiable; inplace forms keep the target's dtype) ---
for _name, _ref, _expr in [
    ("greater_than", np.greater, a > b), ("less_than", np.less, a < b),
    ("greater_equal", np.greater_equal, a >= b), ("less_equal", np.less_equal, a <= b),
    ("equal", np.equal, a.eq(b)), ("not_equal", np.not_equal, a.ne(b)),
    ("logical_and", np.logical_and, S.call("and", a, b)),
    ("logical_or", np.logical_or, S.call("or", a, b)),
]:
    binary(_name, _ref, _expr, dtype=lambda da, db: BOOL)

# logical_xor: both operands as truth values (nonzero is true), as numpy and Paddle.
binary("logical_xor", np.logical_xor, S.cast(a, BOOL).ne(S.cast(b, BOOL)),
       dtype=lambda da, db: BOOL)


def _lerp_infer(types, **attrs):
    (sx, dx), (sy, dy), (sw, dw) = types
    out = promote(dx, dy, dw)
    if dkind(out) != "f":
        raise TraceError(f"lerp needs floating-point operands, not {out}")
    return broadcast_shapes(sx, sy, sw), out


def _lerp_ref(x, y, w):
    out = promote(x.dtype, y.dtype, w.dtype)
    x, y, w = (v.astype(out, copy=False) for v in (x, y, w))
    return x + w * (y - x)


def _lerp_vjp(ctx, g):
    x, y, w = ctx.inputs
    return (g * (1.0 - w) if ctx.needs_grad[0] else None,
            g * w if ctx.needs_grad[1] else None,
            g * (y - x) if ctx.needs_grad[2] else None)


# Paddle's formula, x + weight * (y - x) (PyTorch switches to y - (y - x)(1 - w) for w >= 0.5).
defop("lerp", ELEMENTWISE, _lerp_infer, _lerp_ref, expr=a + c * (b - a),
      vjp={"input": _lerp_vjp}, inplace="lerp_")


def _where_infer(types, **attrs):
    (sc, dc), (sx, dx), (sy, dy) = types
    if dc != BOOL:  # Paddle and PyTorch: no truthiness of numbers here
        raise TraceError(f"the condition must be a bool tensor, got {dc}: compare first "
                         "(`x > 0`) or cast it to bool")
    return broadcast_shapes(sc, sx, sy), promote(dx, dy)


def _where_into(out, cond, x, y):
    # Two masked copies; when `out` is `x`'s (or the condition's) memory the first copy would
    # destroy what the second reads, and mixed dtypes round differently: fall back.
    if not x.dtype == y.dtype == out.dtype or np.may_share_memory(out, x) \
            or np.may_share_memory(out, cond):
        return NotImplemented
    np.copyto(out, y)
    np.copyto(out, x, where=cond)


defop("where", ELEMENTWISE, _where_infer, lambda cond, x, y: np.where(cond, x, y),
      expr=S.call("where", a, b, c), into=_where_into,
      vjp={"input": lambda ctx, g: (None, g.where_mask(ctx.inputs[0]),
                                    g.where_mask(ctx.inputs[0].logical_not()))})


def _broadcast_to_infer(types, shape):
    out = broadcast_shapes(types[0][0], tuple(shape))
    if out != tuple(shape):
        raise ShapeError(f"can't broadcast {list(types[0][0])} to {list(shape)}")
    return out, types[0][1]


defop("broadcast_to", ELEMENTWISE, _broadcast_to_infer,
      lambda x, shape: np.broadcast_to(x, shape).copy(), expr=a,
      into=lambda out, x, shape: np.copyto(out, x),
      vjp={"none": lambda ctx, g: (g,)},
      doc="a materialized (copied) broadcast; the view form is `expand`")


def expr_for(op, attrs, in_dtypes, out_dtype):
    """The scalar expression of one elementwise node (some depend on the node's attrs)."""
    if op.name == "fused":  # typed throughout by its inner ops (compiler/ops/fused.py)
        return attrs["body"].expr()
    if op.name == "scale":
        s, bias = attrs["scale"], attrs["bias"]
        x = S.cast(a, out_dtype) if np.dtype(in_dtypes[0]) != out_dtype else a
        return x * s + bias if attrs["bias_after_scale"] else (x + bias) * s
    if op.name == "cast":
        return S.cast(a, attrs["dtype"])
    if op.name == "fill":  # `full`'s expression: the operand is only the buffer it takes
        return S.cast(S.const(attrs["value"]), out_dtype)
    # Operands that are not of the output's float dtype are cast to it first: a typed
    # emitter would otherwise divide ints as ints (`int / int` is a float op here) or call
    # `exp` on an integer. `where`'s condition stays bool.
    out_dtype = np.dtype(out_dtype)
    expr = op.expr(attrs) if callable(op.expr) else op.expr
    if op.random:
        return expr  # typed throughout: uint64 words, then its own float conversion
    if op.name == "pow" and dkind(out_dtype) in "iu":
        return _int_pow_expr()
    if dkind(out_dtype) != "f":
        return expr
    casts = {i: S.cast(S.arg(i), out_dtype) for i, d in enumerate(in_dtypes)
             if np.dtype(d) != out_dtype and not (op.name == "where" and i == 0)}
    return S.substitute(expr, casts) if casts else expr


def is_same_class(d1, d2) -> bool:
    return dtype_class(d1) == dtype_class(d2)
