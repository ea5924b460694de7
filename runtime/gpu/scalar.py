"""Rendering the registry's scalar expressions (`compiler.ops.scalar.Expr`) as CUDA C.

The same typing rules as the LLVM renderer (`runtime/cpu/scalar.py`), so the three backends
compute the same numbers: typed operands promote with `np.result_type`, Python constants are
weak (NEP 50), and the result is cast to the node's dtype at the end. Each subexpression
becomes one `const T tN = ...;` statement, so no C precedence or implicit conversion decides
anything: every conversion is written out (`convert`).

Semantics (numpy's, as on cpu):
  - `max`/`min` propagate NaN and keep the first operand on ties (`np.maximum`);
  - float -> int casts give INT_MIN for NaN and out-of-range values (x86's cvtt*, what numpy's
    C cast does), where a bare C cast would be undefined; float -> bool is `x != 0`;
  - integer `//` and `%` round towards -inf, a zero divisor gives 0 and INT_MIN // -1 wraps
    (`np_floordiv`/`np_mod` in the prelude: generated code never traps);
  - transcendental functions are CUDA's libdevice ones (`expf`, `erf`, ...: within 2 ulp, the
    4-ulp tolerance of CONVENTIONS.md); `rint` is round-half-even as numpy's `round`.
Memory: numpy's bool is one byte (`unsigned char` in memory, `bool` in registers).

16-bit floats (float16, bfloat16) are storage types, as in the numpy backend
(`runtime/reference.widened`): in memory `__half` / `__nv_bfloat16` (HALF_PRELUDE), in registers
`float`, so every node computes in float32 and rounds once, to nearest even, where it stores.
A cast to a 16-bit float rounds (a fused body's inner values are rounded to their nodes'
dtypes, as the numpy backend stores each node's value): from a float32, `__float2half_rn` /
`__float2bfloat16_rn`; from a float64, float16 directly (`__double2half`, NumPy's single
rounding) and bfloat16 through float32 (ml_dtypes' two roundings). An integer operand cast to a
16-bit float becomes float32, not rounded: the reference converts it to promote(float32, int)
= float32 before the op, and its result is rounded once.
Narrow integers (int8, uint8, int16) wrap as numpy's do; a float converts to them through
int32 (x86's cvttss2si, then the low bits), as numpy's casts.
"""
from __future__ import annotations

import numpy as np

from compiler.ops.fused import postorder
from compiler.ops.registry import BFLOAT16, FLOAT16, is_half
from compiler.ops.scalar import Weak, d_value
from compiler.ops.scalar import common_dtype as _common_dtype

BOOL = np.dtype(np.bool_)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

# register types (C spelling) and in-memory types; a 16-bit float is a float in registers
_C = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long",
      "bool": "bool", "uint64": "unsigned long long", "int8": "signed char",
      "uint8": "unsigned char", "int16": "short", "float16": "float", "bfloat16": "float"}
_HALF_MEM = {FLOAT16: "__half", BFLOAT16: "__nv_bfloat16"}
# (from float32 to memory, from memory to float32)
_HALF_CVT = {FLOAT16: ("__float2half_rn", "__half2float"),
             BFLOAT16: ("__float2bfloat16_rn", "__bfloat162float")}


def ctype(dtype) -> str:
    return _C[np.dtype(dtype).name]


def mtype(dtype) -> str:
    """The in-memory element type (bool is a byte, a 16-bit float its CUDA storage type)."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return "unsigned char"
    return _HALF_MEM.get(dtype) or ctype(dtype)


def kind(dtype) -> str:
    """numpy's kind letter, bfloat16 a float (ml_dtypes says "V")."""
    dtype = np.dtype(dtype)
    return "f" if dtype == BFLOAT16 else dtype.kind


def common_dtype(items) -> np.dtype:
    """The dtype an operator computes in: numpy's result type (`compiler.ops.scalar`) with each
    16-bit float read as the float32 it is in registers (this backend's own copy of the rule)."""
    return _common_dtype([F32 if not isinstance(d, Weak) and is_half(d) else d
                          for d in items])


def load_value(ref: str, dtype) -> str:
    """The register value of memory element `ref` of `dtype` (a 16-bit float widened, exact)."""
    dtype = np.dtype(dtype)
    if is_half(dtype):
        return f"{_HALF_CVT[dtype][1]}({ref})"
    return f"({ref} != 0)" if dtype == BOOL else ref


def store_value(v: str, src, dst) -> str:
    """The memory value (`mtype(dst)`) of register value `v` of dtype `src`: numpy's astype,
    a 16-bit float rounded once to nearest even (see the module docstring)."""
    src, dst = np.dtype(src), np.dtype(dst)
    if is_half(dst):
        rn = _HALF_CVT[dst][0]
        if src == F64:
            return f"__double2half({v})" if dst == FLOAT16 else f"{rn}((float)({v}))"
        if src == BOOL:
            return f"{rn}({v} ? 1.0f : 0.0f)"
        if kind(src) != "f":
            return f"{rn}((float)({v}))"
        return f"{rn}({v})"
    if dst == BOOL:
        return f"(unsigned char)({convert(v, src, dst)})"
    return convert(v, src, dst)


def literal(value, dtype) -> str:
    """A C expression of `value` converted to `dtype` as numpy's astype would; exact (floats
    as hex literals, so no decimal rounding on the way)."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return "true" if bool(value) else "false"
    with np.errstate(all="ignore"):
        v = np.asarray(value).astype(dtype)
    if is_half(dtype):  # its register value: the rounded value as a float
        v, dtype = v.astype(F32), F32
    if dtype.kind == "f":
        bits = v.view(np.uint32 if dtype.itemsize == 4 else np.uint64)
        if np.isfinite(v):
            f = float(v)
            text = f.hex()
            return f"{text}f" if dtype.itemsize == 4 else text
        # inf / nan: from the bit pattern
        if dtype.itemsize == 4:
            return f"__int_as_float({int(bits):#x})"
        return f"__longlong_as_double({int(bits):#x}LL)"
    v = int(v)
    if dtype == np.uint64:
        return f"{v}ULL"
    if dtype == np.int64:
        return f"{v}LL" if v != -(1 << 63) else "(-9223372036854775807LL - 1)"
    if dtype == np.int32:
        return f"{v}" if v != -(1 << 31) else "(-2147483647 - 1)"
    return f"(({ctype(dtype)}){v})"


def convert(v: str, src, dst) -> str:
    """C expression of register value `v` cast from dtype `src` to `dst` (numpy's astype)."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst:
        return v
    if is_half(dst):   # rounded to it, in a float register
        return f"{_HALF_CVT[dst][1]}({store_value(v, src, dst)})"
    if is_half(src):   # a float32 value
        src = F32
        if src == dst:
            return v
    if dst == BOOL:
        return f"({v} != 0)"
    if src == BOOL:
        return f"(({ctype(dst)})({v} ? 1 : 0))"
    if src.kind == "f" and dst.kind in "iu" and dst != np.uint64:
        if dst.itemsize < 4:   # numpy: through int32, then the low bits
            return f"(({ctype(dst)})np_f2i<int>({v}))"
        return f"np_f2i<{ctype(dst)}>({v})"
    return f"(({ctype(dst)})({v}))"


# The helpers generated code calls: compiled once per module (NVRTC needs no headers).
PRELUDE = r"""
// -- numpy semantics (runtime/gpu/scalar.py) --
template <typename T, typename F> __device__ __forceinline__ T np_f2i(F v) {
  // numpy (x86 cvtt*): NaN and out-of-range values give INT_MIN, never undefined behaviour
  const F lim = (F)(sizeof(T) == 8 ? 9223372036854775808.0 : 2147483648.0);
  return (v >= -lim && v < lim) ? (T)v : (T)((unsigned long long)1 << (8 * sizeof(T) - 1));
}
template <typename T> __device__ __forceinline__ T np_max(T x, T y) {
  return (x >= y || x != x) ? x : y;
}
template <typename T> __device__ __forceinline__ T np_min(T x, T y) {
  return (x <= y || x != x) ? x : y;
}
// (unsigned types: (T)-1 is their maximum, not -1: no INT_MIN // -1 case, no sign fix-up)
template <typename T> __device__ __forceinline__ T np_ifloordiv(T x, T y) {
  const T minv = (T)((unsigned long long)1 << (8 * sizeof(T) - 1));
  if (y == 0) return 0;
  if ((T)-1 < (T)0 && x == minv && y == (T)-1) return minv;
  T q = x / y, r = x % y;
  return (r != 0 && ((r < 0) != (y < 0))) ? q - 1 : q;
}
template <typename T> __device__ __forceinline__ T np_imod(T x, T y) {
  if (y == 0 || ((T)-1 < (T)0 && y == (T)-1)) return 0;
  T r = x % y;
  return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}
template <typename T> __device__ __forceinline__ T np_ipow(T x, T y) {
  if (y < 0) return 0;  // numpy raises; generated code must not trap
  T acc = 1;
  while (y > 0) { if (y & 1) acc *= x; x *= x; y >>= 1; }
  return acc;
}
// numpy's npy_divmod for floats (fmod, then the corrections)
__device__ __forceinline__ double np_fdivmod(double x, double y, double* m) {
  double mod = fmod(x, y);
  if (y == 0.0) { *m = mod; return x / y; }
  double div = (x - mod) / y;
  if (mod != 0.0) { if ((y < 0) != (mod < 0)) { mod += y; div -= 1.0; } }
  else mod = copysign(0.0, y);
  double fl;
  if (div != 0.0) { fl = floor(div); if (div - fl > 0.5) fl += 1.0; }
  else fl = copysign(0.0, x / y);
  *m = mod;
  return fl;
}
__device__ __forceinline__ float np_fdivmodf(float x, float y, float* m) {
  float mod = fmodf(x, y);
  if (y == 0.0f) { *m = mod; return x / y; }
  float div = (x - mod) / y;
  if (mod != 0.0f) { if ((y < 0) != (mod < 0)) { mod += y; div -= 1.0f; } }
  else mod = copysignf(0.0f, y);
  float fl;
  if (div != 0.0f) { fl = floorf(div); if (div - fl > 0.5f) fl += 1.0f; }
  else fl = copysignf(0.0f, x / y);
  *m = mod;
  return fl;
}
__device__ __forceinline__ float np_ffloordiv(float x, float y) {
  float m; return np_fdivmodf(x, y, &m);
}
__device__ __forceinline__ double np_ffloordiv(double x, double y) {
  double m; return np_fdivmod(x, y, &m);
}
__device__ __forceinline__ float np_fmod(float x, float y) {
  float m; np_fdivmodf(x, y, &m); return m;
}
__device__ __forceinline__ double np_fmod(double x, double y) {
  double m; np_fdivmod(x, y, &m); return m;
}
"""

# 16-bit floats: storage types with cuda_fp16.h's and cuda_bf16.h's names and layouts, converted
# by the PTX instructions those headers use (cvt.rn: round to nearest even; f16 -> f32 and
# bf16 -> f32 are exact). Defined here because NVRTC has no include path to the CUDA headers on
# an arbitrary machine; skipped where a header (or the test harness's host header) defines them.
# NaN converts to the canonical NaN (0x7fff), as the headers' own conversions do.
HALF_PRELUDE = r"""
// -- 16-bit floats: float32 in registers, one rounding to nearest even at each store --
#if !defined(__CUDA_FP16_H__)
struct __align__(2) __half { unsigned short __x; };
__device__ __forceinline__ float __half2float(const __half h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.__x)); return f;
}
__device__ __forceinline__ __half __float2half_rn(const float f) {
  __half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.__x) : "f"(f)); return h;
}
__device__ __forceinline__ __half __double2half(const double d) {
  __half h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h.__x) : "d"(d)); return h;
}
#endif
#if !defined(__CUDA_BF16_H__)
struct __align__(2) __nv_bfloat16 { unsigned short __x; };
__device__ __forceinline__ float __bfloat162float(const __nv_bfloat16 h) {
  return __uint_as_float(((unsigned int)h.__x) << 16);
}
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(const float f) {
  __nv_bfloat16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.__x) : "f"(f)); return h;
}
#endif
"""
HALF_TYPES = tuple(_HALF_MEM.values())

_UNARY_F = ("exp", "expm1", "log", "sin", "cos", "tan", "tanh", "erf", "sqrt", "asinh",
            "acosh", "atanh", "log1p", "log2", "log10", "sinh", "cosh", "asin", "acos", "atan",
            "floor", "ceil", "rint", "trunc")
_CMP = ("<", ">", "<=", ">=", "==", "!=")





class Renderer:
    """Renders one Expr as C statements appended to `lines`; `args[i]` is (C expression,
    dtype) of operand i (already loaded). Temporaries are named `{prefix}{n}`. `index`: the C
    expression of the element's flat index, where the expression reads it (a random op)."""

    def __init__(self, lines: list, args, prefix: str = "t", indent: str = "    ",
                 index: str | None = None):
        self.lines, self.args, self.prefix, self.indent = lines, args, prefix, indent
        self.index = index
        self.n = 0
        # (C name, dtype) by the identity of the Expr: a subexpression shared by several
        # parents (a fused body's value read twice, Philox's words) is one temporary.
        self.memo: dict[int, tuple] = {}

    def _tmp(self, dtype, text: str) -> str:
        name = f"{self.prefix}{self.n}"
        self.n += 1
        self.lines.append(f"{self.indent}const {ctype(dtype)} {name} = {text};")
        return name

    def render(self, e, want=None) -> tuple[str, np.dtype]:
        if e.args:  # operands first: a fused body is hundreds of levels deep (no recursion)
            for x in postorder(e):
                self._r(x)
        v, d = self._r(e)
        if isinstance(d, Weak):
            d = np.dtype(want) if want is not None else common_dtype([d])
            v = literal(d_value(v), d)
        return v, d

    def _mat(self, item, dtype) -> str:
        v, d = item
        if isinstance(d, Weak):
            return literal(d.value, dtype)
        return convert(v, d, dtype)

    def _r(self, e):
        key = id(e)
        if key not in self.memo:
            self.memo[key] = (self._r1(e), e)  # (keeps e alive: its id stays unique)
        return self.memo[key][0]

    def _r1(self, e):
        if e.op == "arg":
            return self.args[e.value]
        if e.op == "const":
            w = Weak(e.value if not isinstance(e.value, (bool, np.bool_)) else int(e.value))
            return w, w
        if e.op == "index":
            if self.index is None:
                raise NotImplementedError("this kernel has no element index to render")
            u64 = np.dtype(np.uint64)
            return self._tmp(u64, f"(unsigned long long)({self.index})"), u64
        if e.op == "cast":
            dst = np.dtype(e.value)
            item = self._r(e.args[0])
            if is_half(dst) and not isinstance(item[1], Weak) and kind(item[1]) != "f":
                dst = F32   # an integer operand: float32, rounded where it is stored
            return self._tmp(dst, self._mat(item, dst)), dst
        items = [self._r(a) for a in e.args]
        if e.op == "where":
            cond = self._mat(items[0], BOOL)
            t = common_dtype([items[1][1], items[2][1]])
            return self._tmp(t, f"{cond} ? {self._mat(items[1], t)} : "
                                f"{self._mat(items[2], t)}"), t
        if e.op in ("not", "and", "or"):
            vals = [self._mat(x, BOOL) for x in items]
            if e.op == "not":
                return self._tmp(BOOL, f"!{vals[0]}"), BOOL
            return self._tmp(BOOL, f" {'&&' if e.op == 'and' else '||'} ".join(vals)), BOOL
        t = common_dtype([x[1] for x in items])
        if e.op in ("bitand", "bitxor", "shr"):  # Philox: 64-bit unsigned words
            t = np.dtype(np.uint64)
            x, y = (self._mat(v, t) for v in items)
            sym = {"bitand": "&", "bitxor": "^", "shr": ">>"}[e.op]
            return self._tmp(t, f"{x} {sym} {y}"), t
        if e.op in _UNARY_F and t.kind != "f":
            t = np.dtype(np.float64)  # numpy computes these on ints in float64
        vals = [self._mat(x, t) for x in items]
        fl = t.kind == "f"
        f32 = t == np.float32
        if e.op in _CMP:
            # C's float `!=` is true for NaN, the other comparisons false: numpy's rules
            return self._tmp(BOOL, f"{vals[0]} {e.op} {vals[1]}"), BOOL
        if e.op in ("+", "-", "*", "/"):
            x, y = vals
            if t == BOOL:  # numpy: bool + bool is or, bool * bool is and
                return self._tmp(t, f"{x} {'||' if e.op == '+' else '&&'} {y}"), t
            if e.op == "/" and not fl:  # true division of ints: float64, as numpy
                d = np.dtype(np.float64)
                return self._tmp(d, f"(double){x} / (double){y}"), d
            if t == np.uint64 or not fl:
                if e.op in "+-*" and not fl and t != np.uint64:
                    # wrap like numpy (signed overflow is undefined in C): through unsigned
                    u = "unsigned long long" if t.itemsize == 8 else "unsigned int"
                    return self._tmp(t, f"({ctype(t)})(({u}){x} {e.op} ({u}){y})"), t
            return self._tmp(t, f"{x} {e.op} {y}"), t
        x = vals[0]
        sfx = "f" if f32 else ""
        if e.op == "neg":
            if not fl and t != BOOL:
                u = "unsigned long long" if t.itemsize == 8 else "unsigned int"
                return self._tmp(t, f"({ctype(t)})(0 - ({u}){x})"), t
            return self._tmp(t, f"-{x}"), t
        if e.op == "abs":
            if fl:
                return self._tmp(t, f"fabs{sfx}({x})"), t
            if t == BOOL:
                return x, t
            return self._tmp(t, f"{x} < 0 ? ({ctype(t)})(0 - {x}) : {x}"), t
        if e.op in _UNARY_F:
            return self._tmp(t, f"{e.op}{sfx}({x})"), t
        if e.op in ("floordiv", "mod"):
            if fl:
                fn = "np_ffloordiv" if e.op == "floordiv" else "np_fmod"
            else:
                fn = "np_ifloordiv" if e.op == "floordiv" else "np_imod"
            return self._tmp(t, f"{fn}({vals[0]}, {vals[1]})"), t
        if e.op in ("max", "min"):
            if t == BOOL:
                return self._tmp(t, f"{vals[0]} {'||' if e.op == 'max' else '&&'} {vals[1]}"), t
            return self._tmp(t, f"np_{e.op}<{ctype(t)}>({vals[0]}, {vals[1]})"), t
        if e.op == "pow":
            if t == BOOL:  # numpy computes bool ** bool in int8: x ** y = x or not y
                return self._tmp(t, f"{vals[0]} || !{vals[1]}"), t
            if fl:
                return self._tmp(t, f"pow{sfx}({vals[0]}, {vals[1]})"), t
            return self._tmp(t, f"np_ipow<{ctype(t)}>({vals[0]}, {vals[1]})"), t
        raise NotImplementedError(f"scalar function {e.op} has no CUDA rendering")


