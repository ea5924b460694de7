"""Rendering the registry's scalar expressions (`compiler.ops.scalar.Expr`) as LLVM IR: the
`Renderer`, numpy's typing and integer/float semantics, and the dtype helpers (`ll_type`,
`load`, `store`, `convert`, ...); the transcendental functions it calls live in
`runtime.cpu.mathlib`.

Typing follows numpy, so that what the reference computes is what the native code computes:
typed operands promote with `np.result_type`; Python constants are weak (NEP 50: they take
the other operand's type, an int with a float constant becomes float64); the result is cast
to the node's dtype at the end, as `runtime.reference.run_node` does with `astype`.

Semantics chosen to be bit-identical to numpy where the project promises it (docs/ARCHITECTURE.md
§5):
  - `max`/`min` are numpy's `maximum`/`minimum`: NaN propagates (a select on an ordered
    compare plus an isnan test, which vectorises; `llvm.maxnum` would drop the NaN);
  - float -> int casts truncate (`fptosi`), frozen so that an out-of-range value is some
    integer, never poison; float -> bool is `x != 0` (NaN is True), as in numpy;
  - arithmetic carries no fast-math flags;
  - `exp`, `log`, `erf`, float32 `tanh`, `sin`, `cos` and `tan` are generated code
    (mathlib's `fast_exp`, `fast_log`, `fast_erf32`/`64`, `fast_tanh32`, `fast_trig32`: they
    vectorise, within 1 ulp of the correctly rounded value); the other transcendental functions (and
    float64 tanh, sin, cos, tan) call glibc's libm (registered with the JIT by address;
    see `jit.LIBM`), which LLVM can't vectorise; both differ from numpy's own SIMD kernels
    by up to 3 ulp (NumPy's error), within the 4-ulp tolerance (CONVENTIONS.md, tolerances);
    `sqrt` and `abs` are exact LLVM intrinsics.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from compiler.ops.fused import postorder
from compiler.ops.scalar import Weak, common_dtype, d_value  # (typing shared by renderers)

# The maths library (re-exported: the emitters and benchmarks/transcendentals.py take these
# names from here, and the benchmark swaps the fast_* functions on this module).
from .mathlib import (F32, F64, I1, I8, I32, I64, fast_erf32, fast_erf64, fast_exp,  # noqa: F401
                      fast_log, fast_tanh32, fast_trig32, intrinsic, intrinsic2, libm)

BOOL = np.dtype(np.bool_)
_LL = {"float32": F32, "float64": F64, "int32": I32, "int64": I64, "bool": I1,
       "int8": ir.IntType(8), "uint8": ir.IntType(8), "uint64": I64}


def ll_type(dtype) -> ir.Type:
    """The register type of a dtype (bool computes as i1)."""
    return _LL[np.dtype(dtype).name]


def mem_type(dtype) -> ir.Type:
    """The in-memory type of a dtype (numpy's bool is one byte)."""
    return I8 if np.dtype(dtype) == BOOL else ll_type(dtype)


def load(b: ir.IRBuilder, ptr, dtype):
    v = b.load(ptr, typ=mem_type(dtype))
    return b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if np.dtype(dtype) == BOOL else v


def store(b: ir.IRBuilder, value, ptr, dtype):
    if np.dtype(dtype) == BOOL:
        value = b.zext(value, I8)
    b.store(value, ptr)


def constant(value, dtype):
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return ir.Constant(I1, int(bool(value)))
    with np.errstate(all="ignore"):  # as numpy's astype: inf for a too-large float32
        if dtype.kind == "f":
            return ir.Constant(ll_type(dtype), float(np.asarray(value).astype(dtype)))
        return ir.Constant(ll_type(dtype), int(np.asarray(value).astype(dtype)))


def convert(b: ir.IRBuilder, v, src, dst):
    """Cast a register value from dtype `src` to `dst` with numpy's `astype` semantics."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst:
        return v
    t = ll_type(dst)
    if dst == BOOL:
        if src.kind == "f":
            return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
        return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
    if src == BOOL:
        return b.uitofp(v, t) if dst.kind == "f" else b.zext(v, t)
    if src.kind == "f" and dst.kind == "f":
        return b.fpext(v, t) if dst.itemsize > src.itemsize else b.fptrunc(v, t)
    if src.kind == "f":
        # x86's cvtt* (what numpy's C cast compiles to) gives INT_MIN for NaN and out-of-range
        # values; `fptosi` would give poison there, which the select never picks.
        lim = float(2 ** (8 * dst.itemsize - 1))
        inside = b.and_(b.fcmp_ordered(">=", v, ir.Constant(v.type, -lim)),
                        b.fcmp_ordered("<", v, ir.Constant(v.type, lim)))
        return b.select(inside, b.fptosi(v, t), ir.Constant(t, -int(lim)))
    if dst.kind == "f":
        return b.sitofp(v, t)
    if dst.itemsize > src.itemsize:
        return b.sext(v, t)
    return b.trunc(v, t) if dst.itemsize < src.itemsize else v



def divmod_(b: ir.IRBuilder, x, y, dtype):
    """(x // y, x % y) with numpy's results: rounding towards -inf, the remainder taking the
    divisor's sign; for integers a zero divisor gives (0, 0) and INT_MIN // -1 wraps to
    INT_MIN, with a divisor that can't trap; for floats numpy's npy_divmod step by step
    (fmod, then the corrections), and a zero divisor gives (x / 0, fmod(x, 0))."""
    t = x.type
    if np.dtype(dtype).kind != "f":
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        minv = ir.Constant(t, -(1 << (t.width - 1)))
        by_zero = b.icmp_signed("==", y, zero)
        wraps = b.and_(b.icmp_signed("==", x, minv), b.icmp_signed("==", y, ir.Constant(t, -1)))
        ys = b.select(b.or_(by_zero, wraps), one, y)
        q, r = b.sdiv(x, ys), b.srem(x, ys)
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", ys, zero)))
        q = b.select(fix, b.sub(q, one), q)
        r = b.select(fix, b.add(r, ys), r)
        q = b.select(by_zero, zero, b.select(wraps, minv, q))
        return q, b.select(by_zero, zero, r)

    def c(v):
        return ir.Constant(t, v)
    mod = b.frem(x, y)
    div = b.fdiv(b.fsub(x, mod), y)
    nz = b.fcmp_unordered("!=", mod, c(0.0))
    fix = b.and_(nz, b.xor(b.fcmp_ordered("<", y, c(0.0)), b.fcmp_ordered("<", mod, c(0.0))))
    mod = b.select(fix, b.fadd(mod, y), b.select(nz, mod, intrinsic2(b, "copysign", c(0.0), y)))
    div = b.select(fix, b.fsub(div, c(1.0)), div)
    fl = intrinsic(b, "floor", div)
    fl = b.select(b.fcmp_ordered(">", b.fsub(div, fl), c(0.5)), b.fadd(fl, c(1.0)), fl)
    q = b.select(b.fcmp_unordered("!=", div, c(0.0)), fl,
                 intrinsic2(b, "copysign", c(0.0), b.fdiv(x, y)))
    by_zero = b.fcmp_ordered("==", y, c(0.0))
    return b.select(by_zero, b.fdiv(x, y), q), b.select(by_zero, b.frem(x, y), mod)


def select_max(b, x, y, dtype, is_max=True):
    """numpy.maximum / minimum: NaN-propagating, first operand on ties."""
    if np.dtype(dtype).kind == "f":
        keep = b.fcmp_ordered(">=" if is_max else "<=", x, y)
        keep = b.or_(keep, b.fcmp_unordered("uno", x, x))
        return b.select(keep, x, y)
    if np.dtype(dtype) == BOOL:
        return b.or_(x, y) if is_max else b.and_(x, y)
    return b.select(b.icmp_signed(">=" if is_max else "<=", x, y), x, y)




def _int_pow(b: ir.IRBuilder, x, y):
    """x ** y for integers by repeated squaring; a negative exponent gives 0 (numpy raises;
    generated code must not trap)."""
    fn = b.function
    t = x.type
    pre = b.block
    head, body, done = fn.append_basic_block(), fn.append_basic_block(), fn.append_basic_block()
    b.branch(head)
    b.position_at_end(head)
    acc = b.phi(t)
    base = b.phi(t)
    e = b.phi(t)
    acc.add_incoming(ir.Constant(t, 1), pre)
    base.add_incoming(x, pre)
    e.add_incoming(y, pre)
    b.cbranch(b.icmp_signed(">", e, ir.Constant(t, 0)), body, done)
    b.position_at_end(body)
    odd = b.trunc(e, I1)
    acc2 = b.select(odd, b.mul(acc, base), acc)
    base2 = b.mul(base, base)
    e2 = b.ashr(e, ir.Constant(t, 1))
    acc.add_incoming(acc2, body)
    base.add_incoming(base2, body)
    e.add_incoming(e2, body)
    b.branch(head)
    b.position_at_end(done)
    return b.select(b.icmp_signed("<", y, ir.Constant(t, 0)), ir.Constant(t, 0), acc)


# issue 10: more libm functions, and the rounding functions as LLVM intrinsics
_LIBM_UNARY = ("log1p", "log2", "log10", "sinh", "cosh", "asin", "acos", "atan")
_ROUNDING = {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "rint": "roundeven"}

_CMP = {"<": "<", ">": ">", "<=": "<=", ">=": ">=", "==": "==", "!=": "!="}


class Renderer:
    """Renders one Expr for one element: `args[i]()` loads operand i (as (value, dtype));
    `index()` gives the element's flat index (an i64, read as uint64) where the expression
    reads it (a random op's counter)."""

    def __init__(self, b: ir.IRBuilder, args, index=None):
        self.b = b
        self.args = args
        self.index = index
        self.cache = {}
        # Results by the identity of their Expr: a subexpression shared by several parents (a
        # fused body's value used twice, Philox's words) is rendered once.
        self.memo: dict[int, tuple] = {}

    def render(self, e, want=None):
        """(value, dtype) of `e`; a bare constant becomes `want` (or its own Python type)."""
        if e.args:  # operands first (a fused body is hundreds of levels deep: no recursion)
            for x in postorder(e):
                self._r(x)
        v, d = self._r(e)
        if isinstance(d, Weak):
            d = np.dtype(want) if want is not None else common_dtype([d])
            v = constant(d_value(v), d)
        return v, d

    def _materialize(self, item, dtype):
        v, d = item
        if isinstance(d, Weak):
            return constant(d.value, dtype)
        return convert(self.b, v, d, dtype)

    def _r(self, e):
        key = id(e)
        if key not in self.memo:
            self.memo[key] = (self._r1(e), e)  # (keeps e alive: its id stays unique)
        return self.memo[key][0]

    def _r1(self, e):
        b = self.b
        if e.op == "arg":
            if e.value not in self.cache:
                self.cache[e.value] = self.args[e.value]()
            return self.cache[e.value]
        if e.op == "const":
            w = Weak(e.value if not isinstance(e.value, (bool, np.bool_)) else int(e.value))
            return w, w
        if e.op == "index":
            if self.index is None:
                raise NotImplementedError("this kernel has no element index to render")
            return self.index(), np.dtype(np.uint64)
        if e.op == "cast":
            dst = np.dtype(e.value)
            return self._materialize(self._r(e.args[0]), dst), dst
        items = [self._r(a) for a in e.args]
        if e.op == "where":
            cond = self._materialize(items[0], BOOL)
            t = common_dtype([items[1][1], items[2][1]])
            return b.select(cond, self._materialize(items[1], t),
                            self._materialize(items[2], t)), t
        if e.op in ("not", "and", "or"):
            vals = [self._materialize(x, BOOL) for x in items]
            if e.op == "not":
                return b.xor(vals[0], ir.Constant(I1, 1)), BOOL
            return (b.and_ if e.op == "and" else b.or_)(*vals), BOOL
        t = common_dtype([x[1] for x in items])
        if e.op in ("bitand", "bitxor", "shr"):  # unsigned words (Philox): i64 bit operations
            # 64-bit words whatever NumPy's promotion would say (uint64 with int64 is float64)
            t = np.dtype(np.uint64)
            x, y = (self._materialize(v, t) for v in items)
            fn = {"bitand": b.and_, "bitxor": b.xor, "shr": b.lshr}[e.op]
            return fn(x, y), t
        if e.op in ("exp", "expm1", "log", "sin", "cos", "tan", "tanh", "erf", "sqrt", "asinh",
                    "acosh", "atanh", *_LIBM_UNARY, *_ROUNDING) and t.kind != "f":
            t = np.dtype(np.float64)  # numpy computes these on ints in float64
        vals = [self._materialize(x, t) for x in items]
        fl = t.kind == "f"
        if e.op in _CMP:
            if fl:
                # numpy: `!=` is true for NaN (unordered), every other comparison false.
                return (b.fcmp_unordered("!=", *vals) if e.op == "!=" else
                        b.fcmp_ordered(e.op, *vals)), BOOL
            cmp = b.icmp_unsigned if t == BOOL else b.icmp_signed
            return cmp(e.op, *vals), BOOL
        if e.op in ("+", "-", "*", "/"):
            x, y = vals
            if t == BOOL:  # numpy: bool + bool is or, bool * bool is and
                return (b.or_(x, y) if e.op == "+" else b.and_(x, y)), t
            if fl:
                fn = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}[e.op]
                return fn(x, y), t
            if e.op == "/":  # true division of ints: float64, as numpy
                return b.fdiv(b.sitofp(x, F64), b.sitofp(y, F64)), np.dtype(np.float64)
            fn = {"+": b.add, "-": b.sub, "*": b.mul}[e.op]
            return fn(x, y), t
        x = vals[0]
        if e.op == "neg":
            return (b.fneg(x) if fl else b.sub(ir.Constant(x.type, 0), x)), t
        if e.op == "abs":
            if fl:
                return intrinsic(b, "fabs", x), t
            if t == BOOL:
                return x, t
            return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)),
                            b.sub(ir.Constant(x.type, 0), x), x), t
        if e.op == "sqrt":
            return intrinsic(b, "sqrt", x), t
        if e.op == "exp":
            return fast_exp(b, x), t
        if e.op == "erf":
            return (fast_erf32(b, x) if t == np.float32 else fast_erf64(b, x)), t
        if e.op == "log":
            return fast_log(b, x), t
        if t == np.float32 and e.op == "tanh":
            return fast_tanh32(b, x), t
        if t == np.float32 and e.op in ("sin", "cos", "tan"):
            return fast_trig32(b, e.op, x), t
        if e.op in ("log", "sin", "cos", "tan", "tanh", "erf", "asinh", "acosh", "atanh",
                    "expm1", *_LIBM_UNARY):
            return libm(b, e.op, x), t
        if e.op in _ROUNDING:  # exact: LLVM's rounding intrinsics (SSE4.1 / AVX round*)
            return intrinsic(b, _ROUNDING[e.op], x), t
        if e.op in ("floordiv", "mod"):
            return divmod_(b, vals[0], vals[1], t)[0 if e.op == "floordiv" else 1], t
        if e.op in ("max", "min"):
            return select_max(b, vals[0], vals[1], t, e.op == "max"), t
        if e.op == "pow":
            if t == BOOL:  # numpy computes bool ** bool in int8: x ** y = x or not y
                return b.or_(vals[0], b.xor(vals[1], ir.Constant(I1, 1))), t
            if fl:
                return libm(b, "pow", *vals), t
            return _int_pow(b, *vals), t
        raise NotImplementedError(f"scalar function {e.op}")


