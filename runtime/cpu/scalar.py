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

16-bit floats (float16, bfloat16) are storage types: a half value lives in a float32
register, always exactly representable in its dtype (rounded when it is made), and operators
on halves compute in float32 (`compute_dtype`), as the numpy backend computes a half node on
widened operands. `load` widens (bfloat16: the bits shifted left 16; float16: F16C's
`vcvtph2ps` through LLVM's `half`), `store` narrows with round-to-nearest-even (bfloat16 by
integer operations, float16 by `vcvtps2ph`), and a cast to a half rounds in the register
(`round_half`). NaNs come out as NumPy/ml_dtypes' casts give them, bit for bit: bfloat16
narrowing gives the sign and 0x7fc0; float16 keeps the payload's top bits unquieted (numpy's
npy_floatbits_to_halfbits), so NaNs go by an integer path beside the hardware conversion.
Narrow integers: uint8 zero-extends, compares, divides, shifts and takes max/min unsigned;
a float cast to int8/uint8/int16 goes through int32 and keeps the low bits, as numpy's C
cast does (300.0 -> uint8 44, NaN -> 0).
"""
from __future__ import annotations

import numpy as np
import llvmlite.binding as llvm
from llvmlite import ir

from compiler.ops.fused import postorder
from compiler.ops.registry import BFLOAT16, FLOAT16, compute_dtype, dkind, is_half
from compiler.ops.scalar import Weak, common_dtype, d_value  # (typing shared by renderers)

# The maths library (re-exported: the emitters and benchmarks/transcendentals.py take these
# names from here, and the benchmark swaps the fast_* functions on this module).
from .jit import host_triple
from .mathlib import (F32, F64, I1, I8, I32, I64, fast_erf32, fast_erf64, fast_exp,  # noqa: F401
                      fast_log, fast_tanh32, fast_trig32, intrinsic, intrinsic2, libm)

BOOL = np.dtype(np.bool_)
F32D, F64D = np.dtype(np.float32), np.dtype(np.float64)
I16 = ir.IntType(16)
HALF = ir.HalfType()
# (a 16-bit float's register is a float32: see the module docstring)
_LL = {"float32": F32, "float64": F64, "int32": I32, "int64": I64, "bool": I1,
       "int8": I8, "uint8": I8, "int16": I16, "uint64": I64, "float16": F32, "bfloat16": F32}


def ll_type(dtype) -> ir.Type:
    """The register type of a dtype (bool computes as i1, a 16-bit float as float32)."""
    return _LL[np.dtype(dtype).name]


def mem_type(dtype) -> ir.Type:
    """The in-memory type of a dtype (numpy's bool is one byte, a 16-bit float an i16)."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return I8
    return I16 if is_half(dtype) else ll_type(dtype)


def is_unsigned(dtype) -> bool:
    """uint8 (uint64, the seeds' words, keeps its signed-looking code paths: see convert)."""
    return np.dtype(dtype) == np.uint8


def _c32(n):
    return ir.Constant(I32, n)


def _host_has_f16c() -> bool:
    """Whether LLVM's half <-> float conversions are instructions on this host (x86: F16C;
    other targets convert natively). Without them LLVM calls __extendhfsf2 / __truncsfhf2,
    which the JIT does not import: the integer forms below are used instead."""
    if not host_triple().startswith(("x86_64", "i686", "i386")):
        return True
    return bool(llvm.get_host_cpu_features().get("f16c", False))


# float16 conversions by F16C (True) or by integer operations (False; tests set it to check
# the integer forms over every pattern)
HARD_F16 = _host_has_f16c()


def _f16_to_f32_soft(b: ir.IRBuilder, w):
    """float32 bits (i32) of float16 bits (zero-extended to i32), exact: the exponent
    rebiased; a subnormal normalised by one float subtraction (Giesen's half_to_float)."""
    o = b.shl(b.and_(w, _c32(0x7FFF)), _c32(13))
    e = b.and_(o, _c32(0x7C00 << 13))
    o = b.add(o, _c32((127 - 15) << 23))
    infnan = b.add(o, _c32((128 - 16) << 23))
    sub = b.fsub(b.bitcast(b.add(o, _c32(1 << 23)), F32), ir.Constant(F32, 2.0 ** -14))
    o = b.select(b.icmp_unsigned("==", e, _c32(0x7C00 << 13)), infnan,
                 b.select(b.icmp_unsigned("==", e, _c32(0)), b.bitcast(sub, I32), o))
    return b.or_(o, b.shl(b.and_(w, _c32(0x8000)), _c32(16)))


def _f32_to_f16_soft(b: ir.IRBuilder, v):
    """float16 bits (i32) of a float32 register, rounded to nearest even (NaN: the caller's):
    a subnormal result by one float addition that rounds at the right place, a normal one by
    adding 0xfff + the kept lowest bit before the shift (Giesen's float_to_half_fast3_rtne)."""
    x = b.bitcast(v, I32)
    sign = b.and_(b.lshr(x, _c32(16)), _c32(0x8000))
    a = b.and_(x, _c32(0x7FFFFFFF))
    magic = ((127 - 15) + (23 - 10) + 1) << 23
    sub = b.sub(b.bitcast(b.fadd(b.bitcast(a, F32), b.bitcast(_c32(magic), F32)), I32),
                _c32(magic))
    odd = b.and_(b.lshr(a, _c32(13)), _c32(1))
    norm = b.lshr(b.add(b.add(a, _c32(((15 - 127) << 23) + 0xFFF)), odd), _c32(13))
    o = b.select(b.icmp_unsigned("<", a, _c32(113 << 23)), sub, norm)
    o = b.select(b.icmp_unsigned(">=", a, _c32((127 + 16) << 23)), _c32(0x7C00), o)
    return b.or_(o, sign)


def widen_bits(b: ir.IRBuilder, bits, dtype):
    """The float32 value of a 16-bit float's bits (i16), exact; NaN payloads kept as
    numpy's and ml_dtypes' casts keep them."""
    w = b.zext(bits, I32)
    if np.dtype(dtype) == BFLOAT16:
        return b.bitcast(b.shl(w, _c32(16)), F32)
    f = b.fpext(b.bitcast(bits, HALF), F32) if HARD_F16 else \
        b.bitcast(_f16_to_f32_soft(b, w), F32)
    # NaN: numpy shifts the payload without quieting it (vcvtph2ps would quiet it)
    nan = b.icmp_unsigned(">", b.and_(w, _c32(0x7FFF)), _c32(0x7C00))
    nb = b.or_(b.or_(b.shl(b.and_(w, _c32(0x8000)), _c32(16)), _c32(0x7F800000)),
               b.shl(b.and_(w, _c32(0x3FF)), _c32(13)))
    return b.select(nan, b.bitcast(nb, F32), f)


def narrow_bits(b: ir.IRBuilder, v, dtype):
    """The bits (i16) of a float32 register rounded to nearest even into a 16-bit float,
    as ml_dtypes' / numpy's astype: bfloat16 `(bits + 0x7fff + ((bits >> 16) & 1)) >> 16`,
    NaN the sign and 0x7fc0; float16 by the F16C conversion, NaN as numpy makes it."""
    bits = b.bitcast(v, I32)
    nan = b.fcmp_unordered("uno", v, v)
    sign = b.and_(b.lshr(bits, _c32(16)), _c32(0x8000))
    if np.dtype(dtype) == BFLOAT16:
        odd = b.and_(b.lshr(bits, _c32(16)), _c32(1))
        r = b.lshr(b.add(b.add(bits, _c32(0x7FFF)), odd), _c32(16))
        r = b.select(nan, b.or_(sign, _c32(0x7FC0)), r)
        return b.trunc(r, I16)
    h = b.bitcast(b.fptrunc(v, HALF), I16) if HARD_F16 else \
        b.trunc(_f32_to_f16_soft(b, v), I16)
    m = b.and_(b.lshr(bits, _c32(13)), _c32(0x3FF))
    m = b.select(b.icmp_unsigned("==", m, _c32(0)), _c32(1), m)  # stays a NaN
    return b.select(nan, b.trunc(b.or_(b.or_(sign, _c32(0x7C00)), m), I16), h)


def round_half(b: ir.IRBuilder, v, dtype):
    """A float32 register rounded to the 16-bit float `dtype` (still a float32 register)."""
    return widen_bits(b, narrow_bits(b, v, dtype), dtype)


def _f64_to_f32_odd(b: ir.IRBuilder, v):
    """float64 -> float32 rounding to odd (truncate, then set the last bit of an inexact
    result), so that rounding it again to float16 (11 bits < 24 - 1) is the float64 value
    rounded once, as numpy's float64 -> float16 cast does (ml_dtypes' bfloat16 rounds
    through float32). A NaN is the caller's."""
    f = b.fptrunc(v, F32)
    back = b.fpext(f, F64)
    bits = b.bitcast(f, I32)
    away = b.fcmp_ordered(">", intrinsic(b, "fabs", back), intrinsic(b, "fabs", v))
    trunc = b.select(away, b.sub(bits, _c32(1)), bits)  # (magnitude bits: one step down)
    inexact = b.fcmp_ordered("!=", back, v)
    return b.bitcast(b.select(inexact, b.or_(trunc, _c32(1)), bits), F32)


def load(b: ir.IRBuilder, ptr, dtype):
    dtype = np.dtype(dtype)
    v = b.load(ptr, typ=mem_type(dtype))
    if is_half(dtype):
        return widen_bits(b, v, dtype)
    return b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dtype == BOOL else v


def store(b: ir.IRBuilder, value, ptr, dtype, frozen=False):
    """`frozen`: store `freeze value`, the same bits (our loads are never undef or poison, so
    LLVM keeps it) but no longer a `select` to X86's code generator. Unfrozen, a store of
    `select(c, k, load p)` back to `p` (relu_, maximum_, masked_fill_, tril_: anything written
    in place through a select) becomes `vmaskmovps`, a masked store of `k` alone, which is
    microcoded on AMD Zen: relu_ of 64 MiB took 2x the time of a plain loop. Frozen after the
    cast (a freeze before it would keep LLVM from narrowing the cast's operands)."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        value = b.zext(value, I8)
    elif is_half(dtype):
        value = narrow_bits(b, value, dtype)
    if frozen:
        value = ir.Instruction(b.block, value.type, "freeze", [value])
        b._insert(value)
    b.store(value, ptr)


def store_as(b: ir.IRBuilder, value, src, ptr, dst, frozen=False):
    """store(convert(value, src, dst)), a float32 value into a 16-bit float rounded once (by
    the store) rather than in the register and again in the store."""
    src, dst = np.dtype(src), np.dtype(dst)
    if not (is_half(dst) and src == F32D):
        value = convert(b, value, src, dst)
    store(b, value, ptr, dst, frozen)


def constant(value, dtype):
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return ir.Constant(I1, int(bool(value)))
    with np.errstate(all="ignore"):  # as numpy's astype: inf for a too-large float32
        if dkind(dtype) == "f":  # (a half: its value rounded, in a float32 register)
            return ir.Constant(ll_type(dtype), float(np.asarray(value).astype(dtype)
                                                     .astype(compute_dtype(dtype))))
        return ir.Constant(ll_type(dtype), int(np.asarray(value).astype(dtype)))


def convert(b: ir.IRBuilder, v, src, dst):
    """Cast a register value from dtype `src` to `dst` with numpy's `astype` semantics."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst:
        return v
    if src == FLOAT16 and dst == F64D:  # numpy's direct cast keeps a NaN unquieted
        w = b.zext(b.bitcast(v, I32), I64)
        nb = b.or_(b.or_(b.shl(b.and_(w, ir.Constant(I64, 1 << 31)), ir.Constant(I64, 32)),
                         ir.Constant(I64, 0x7FF << 52)),
                   b.shl(b.and_(w, ir.Constant(I64, 0x7FFFFF)), ir.Constant(I64, 29)))
        return b.select(b.fcmp_unordered("uno", v, v), b.bitcast(nb, F64), b.fpext(v, F64))
    if is_half(src):  # its float32 register holds the value exactly
        return convert(b, v, F32D, dst)
    if is_half(dst):
        if src == F64D and dst == FLOAT16:
            # numpy's direct cast: the NaN's top 10 payload bits, unquieted
            w = b.bitcast(v, I64)
            m = b.trunc(b.and_(b.lshr(w, ir.Constant(I64, 42)), ir.Constant(I64, 0x3FF)), I32)
            m = b.select(b.icmp_unsigned("==", m, _c32(0)), _c32(1), m)
            sign = b.trunc(b.and_(b.lshr(w, ir.Constant(I64, 48)), ir.Constant(I64, 0x8000)),
                           I32)
            nan = widen_bits(b, b.trunc(b.or_(b.or_(sign, _c32(0x7C00)), m), I16), FLOAT16)
            r = round_half(b, _f64_to_f32_odd(b, v), dst)
            return b.select(b.fcmp_unordered("uno", v, v), nan, r)
        if src == F64D:
            v = b.fptrunc(v, F32)
        else:
            v = convert(b, v, src, F32D)
        return round_half(b, v, dst)
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
        # values; `fptosi` would give poison there, which the select never picks. A narrower
        # integer is numpy's C cast through int32, keeping the low bits.
        wide = I32 if dst.itemsize < 4 else t
        lim = float(2 ** (8 * max(dst.itemsize, 4) - 1))
        inside = b.and_(b.fcmp_ordered(">=", v, ir.Constant(v.type, -lim)),
                        b.fcmp_ordered("<", v, ir.Constant(v.type, lim)))
        r = b.select(inside, b.fptosi(v, wide), ir.Constant(wide, -int(lim)))
        return b.trunc(r, t) if wide is not t else r
    if dst.kind == "f":
        return b.uitofp(v, t) if is_unsigned(src) else b.sitofp(v, t)
    if dst.itemsize > src.itemsize:
        return b.zext(v, t) if is_unsigned(src) else b.sext(v, t)
    return b.trunc(v, t) if dst.itemsize < src.itemsize else v



def divmod_(b: ir.IRBuilder, x, y, dtype):
    """(x // y, x % y) with numpy's results: rounding towards -inf, the remainder taking the
    divisor's sign; for integers a zero divisor gives (0, 0) and INT_MIN // -1 wraps to
    INT_MIN, with a divisor that can't trap; for floats numpy's npy_divmod step by step
    (fmod, then the corrections), and a zero divisor gives (x / 0, fmod(x, 0))."""
    t = x.type
    if np.dtype(dtype).kind != "f" and is_unsigned(dtype):  # (nothing wraps, no signs)
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        by_zero = b.icmp_unsigned("==", y, zero)
        ys = b.select(by_zero, one, y)
        return (b.select(by_zero, zero, b.udiv(x, ys)),
                b.select(by_zero, zero, b.urem(x, ys)))
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
    if dkind(dtype) == "f":
        keep = b.fcmp_ordered(">=" if is_max else "<=", x, y)
        keep = b.or_(keep, b.fcmp_unordered("uno", x, x))
        return b.select(keep, x, y)
    if np.dtype(dtype) == BOOL:
        return b.or_(x, y) if is_max else b.and_(x, y)
    cmp = b.icmp_unsigned if is_unsigned(dtype) else b.icmp_signed
    return b.select(cmp(">=" if is_max else "<=", x, y), x, y)




def _int_pow(b: ir.IRBuilder, x, y, unsigned=False):
    """x ** y for integers by repeated squaring; a negative exponent gives 0 (numpy raises;
    generated code must not trap). `unsigned` (uint8): no exponent is negative."""
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
    b.cbranch((b.icmp_unsigned if unsigned else b.icmp_signed)(">", e, ir.Constant(t, 0)),
              body, done)
    b.position_at_end(body)
    odd = b.trunc(e, I1)
    acc2 = b.select(odd, b.mul(acc, base), acc)
    base2 = b.mul(base, base)
    e2 = (b.lshr if unsigned else b.ashr)(e, ir.Constant(t, 1))
    acc.add_incoming(acc2, body)
    base.add_incoming(base2, body)
    e.add_incoming(e2, body)
    b.branch(head)
    b.position_at_end(done)
    if unsigned:
        return acc
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
        t = compute_dtype(common_dtype([x[1] for x in items]))  # (halves: in float32)
        if e.op in ("bitand", "bitxor", "shr"):  # unsigned words (Philox): i64 bit operations
            # 64-bit words whatever NumPy's promotion would say (uint64 with int64 is float64)
            t = np.dtype(np.uint64)
            x, y = (self._materialize(v, t) for v in items)
            fn = {"bitand": b.and_, "bitxor": b.xor, "shr": b.lshr}[e.op]
            return fn(x, y), t
        if e.op in ("exp", "expm1", "log", "sin", "cos", "tan", "tanh", "erf", "sqrt", "asinh",
                    "acosh", "atanh", *_LIBM_UNARY, *_ROUNDING) and dkind(t) != "f":
            t = np.dtype(np.float64)  # numpy computes these on ints in float64
        vals = [self._materialize(x, t) for x in items]
        fl = t.kind == "f"
        if e.op in _CMP:
            if fl:
                # numpy: `!=` is true for NaN (unordered), every other comparison false.
                return (b.fcmp_unordered("!=", *vals) if e.op == "!=" else
                        b.fcmp_ordered(e.op, *vals)), BOOL
            cmp = b.icmp_unsigned if t == BOOL or is_unsigned(t) else b.icmp_signed
            return cmp(e.op, *vals), BOOL
        if e.op in ("+", "-", "*", "/"):
            x, y = vals
            if t == BOOL:  # numpy: bool + bool is or, bool * bool is and
                return (b.or_(x, y) if e.op == "+" else b.and_(x, y)), t
            if fl:
                fn = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}[e.op]
                return fn(x, y), t
            if e.op == "/":  # true division of ints: float64, as numpy
                x, y = convert(b, x, t, F64D), convert(b, y, t, F64D)
                return b.fdiv(x, y), F64D
            fn = {"+": b.add, "-": b.sub, "*": b.mul}[e.op]
            return fn(x, y), t
        x = vals[0]
        if e.op == "neg":
            return (b.fneg(x) if fl else b.sub(ir.Constant(x.type, 0), x)), t
        if e.op == "abs":
            if fl:
                return intrinsic(b, "fabs", x), t
            if t == BOOL or is_unsigned(t):
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
            return _int_pow(b, *vals, unsigned=is_unsigned(t)), t
        raise NotImplementedError(f"scalar function {e.op}")


