"""Rendering the registry's scalar expressions (`compiler.ops.scalar.Expr`) as LLVM IR.

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
    (`fast_exp`, `fast_log`, `fast_erf32`/`64`, `fast_tanh32`, `fast_trig32`: they vectorise,
    within 1 ulp of the correctly rounded value); the other transcendental functions (and
    float64 tanh, sin, cos, tan) call glibc's libm (registered with the JIT by address;
    see `jit.LIBM`), which LLVM can't vectorise; both differ from numpy's own SIMD kernels
    by up to 3 ulp (NumPy's error), within the 4-ulp tolerance (CONVENTIONS.md, tolerances);
    `sqrt` and `abs` are exact LLVM intrinsics.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numpy.polynomial import chebyshev

from compiler.ops.fused import postorder
from compiler.ops.scalar import Weak, common_dtype, d_value  # (typing shared by renderers)

from .jit import LIBM

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
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



def _declare(module: ir.Module, name: str, ret, args) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def intrinsic(b: ir.IRBuilder, name: str, v):
    fn = _declare(b.module, f"llvm.{name}.{'f32' if v.type == F32 else 'f64'}", v.type,
                  [v.type])
    return b.call(fn, [v])


def libm(b: ir.IRBuilder, fname: str, *vals):
    t = vals[0].type
    name = LIBM[fname][0 if t == F32 else 1]
    return b.call(_declare(b.module, name, t, [t] * len(vals)), list(vals))


# exp's constants per float type: clamp range, log2(e), ln 2 split in two (the high part has
# trailing zero bits, so k * hi is exact: Cody & Waite; fdlibm's split for float64), the
# Taylor degree that reaches the type's precision on |r| <= ln2 / 2, and the exponent bias.
_EXP = {
    "float": dict(lo=-104.0, hi=89.0, log2e=1.4426950408889634, ln2_hi=0.693359375,
                  ln2_lo=-2.12194440e-4, degree=7, bits=23, bias=127, int=I32),
    "double": dict(lo=-746.0, hi=710.0, log2e=1.4426950408889634,
                   ln2_hi=6.93147180369123816490e-01, ln2_lo=1.90821492927058770002e-10,
                   degree=13, bits=52, bias=1023, int=I64),
}


def fast_exp(b: ir.IRBuilder, x):
    """exp(x) without a libm call, so that loops over it vectorise: exp(x) = 2^k * exp(r),
    k = rint(x / ln 2), r = x - k ln 2 (two fma steps), exp(r) by Horner on the Taylor series,
    2^k applied as two exact power-of-two factors (k/2 and k - k/2) so that results down in
    the subnormal range and up to overflow come out right. Within ~1 ulp of the correctly
    rounded value; NaN stays NaN, -inf gives 0, +inf gives inf."""
    t = x.type
    c = _EXP["float" if t == F32 else "double"]
    ity = c["int"]

    def k_(v):
        return ir.Constant(t, v)
    notnan = b.fcmp_ordered("ord", x, x)
    xc = b.select(b.fcmp_ordered(">", x, k_(c["hi"])), k_(c["hi"]), x)
    xc = b.select(b.fcmp_ordered("<", xc, k_(c["lo"])), k_(c["lo"]), xc)
    xc = b.select(notnan, xc, k_(0.0))  # keeps fptosi below away from NaN
    kf = intrinsic(b, "rint", b.fmul(xc, k_(c["log2e"])))
    fma = _declare(b.module, f"llvm.fma.{'f32' if t == F32 else 'f64'}", t, [t, t, t])
    r = b.call(fma, [b.fneg(kf), k_(c["ln2_hi"]), xc])
    r = b.call(fma, [b.fneg(kf), k_(c["ln2_lo"]), r])
    p = k_(1.0 / np.prod(np.arange(1, c["degree"] + 1), dtype=np.float64))
    for n in range(c["degree"] - 1, -1, -1):
        p = b.call(fma, [p, r, k_(1.0 / np.prod(np.arange(1, n + 1), dtype=np.float64))])
    k = b.fptosi(kf, ity)
    k1 = b.ashr(k, ir.Constant(ity, 1))
    k2 = b.sub(k, k1)

    def pow2(e):
        return b.bitcast(b.shl(b.add(e, ir.Constant(ity, c["bias"])),
                               ir.Constant(ity, c["bits"])), t)
    out = b.fmul(b.fmul(p, pow2(k1)), pow2(k2))
    return b.select(notnan, out, x)


_ERFC_FIT: dict = {}


def _erfc_scaled_chebyshev(lo=1.0, hi=4.0, degree=16):
    """Chebyshev coefficients of erfc(a) * exp(a^2) on [lo, hi], interpolated from Python's
    `math.erfc` (relative error ~6e-12 at degree 16: far below float32's half ulp)."""
    key = (lo, hi, degree)
    if key not in _ERFC_FIT:
        fn = np.vectorize(lambda a: math.erfc(a) * math.exp(a * a))
        _ERFC_FIT[key] = chebyshev.Chebyshev.interpolate(fn, degree, domain=[lo, hi]).coef
    return _ERFC_FIT[key]


def fast_erf32(b: ir.IRBuilder, x):
    """float32 erf computed in float64 without a libm call (so loops vectorise):
      |x| < 1:       x * sum_n 2/sqrt(pi) (-1)^n x^(2n) / (n! (2n+1)), n <= 12 (Taylor,
                     truncation < 1e-11 relative);
      1 <= |x| < 4:  sign(x) (1 - exp(-x^2) R(|x|)), R = erfc(a) exp(a^2) by Clenshaw on a
                     Chebyshev interpolant;
      |x| >= 4:      sign(x) (erfc(4) < 2^-25 rounds away in float32).
    Both branches are computed and selected (no control flow in the loop body)."""
    d = b.fpext(x, F64)

    def k_(v):
        return ir.Constant(F64, float(v))
    fma = _declare(b.module, "llvm.fma.f64", F64, [F64, F64, F64])
    a = intrinsic(b, "fabs", d)
    # small: Horner in s = x^2
    sq = b.fmul(d, d)
    coef = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
            for n in range(13)]
    p = k_(coef[-1])
    for c in reversed(coef[:-1]):
        p = b.call(fma, [p, sq, k_(c)])
    small = b.fmul(d, p)
    # large: Clenshaw on t in [-1, 1]
    lo, hi = 1.0, 4.0
    cheb = _erfc_scaled_chebyshev(lo, hi)
    ac = b.select(b.fcmp_ordered("<", a, k_(lo)), k_(lo), a)
    ac = b.select(b.fcmp_unordered(">", ac, k_(hi)), k_(hi), ac)  # NaN -> hi: finite work
    t = b.fdiv(b.fsub(b.fmul(ac, k_(2.0)), k_(lo + hi)), k_(hi - lo))
    t2 = b.fmul(t, k_(2.0))
    b1, b2 = k_(0.0), k_(0.0)
    for c in cheb[:0:-1]:
        b1, b2 = b.fadd(b.call(fma, [t2, b1, b.fneg(b2)]), k_(c)), b1
    r = b.fsub(b.call(fma, [t, b1, k_(cheb[0])]), b2)
    tail = b.fmul(fast_exp(b, b.fneg(b.fmul(ac, ac))), r)
    big = b.fsub(k_(1.0), tail)
    big = b.select(b.fcmp_ordered(">=", a, k_(hi)), k_(1.0), big)
    big = b.select(b.fcmp_ordered("<", d, k_(0.0)), b.fneg(big), big)
    out = b.select(b.fcmp_ordered("<", a, k_(1.0)), small, big)
    out = b.select(b.fcmp_unordered("uno", d, d), d, out)
    return b.fptrunc(out, F32)


# -- vectorisable log, tanh, sin, cos, tan, float64 erf ----------------------------------------
# libm calls keep a loop scalar (LLVM can't vectorise them), so these are generated: float32
# computes in float64 and rounds once at the end (double rounding: within 1 ulp of the correctly
# rounded value); float64 log is fdlibm's algorithm, float64 erf below. float64 sin, cos, tan
# and tanh stay in libm (their reduction and cancellation need double-double arithmetic to
# stay within 4 ulp; not done).

def _c64(v):
    return ir.Constant(F64, float(v))


def _fma64(b, x, y, z):
    return b.call(_declare(b.module, "llvm.fma.f64", F64, [F64, F64, F64]), [x, y, z])


def _horner(b, x, coefs):
    """coefs[0] + x * (coefs[1] + x * (...)) in float64."""
    p = _c64(coefs[-1])
    for c in reversed(coefs[:-1]):
        p = _fma64(b, p, x, _c64(c))
    return p


# fdlibm e_log.c (Sun Microsystems, 1993; also musl's log.c): log(1 + f) = f - hfsq +
# s * (hfsq + R(z)), s = f / (2 + f), z = s^2, R a minimax polynomial; error < 1 ulp.
_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01)
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10


def _log64(b: ir.IRBuilder, d):
    """log of a float64 register: x = m 2^k with m in [sqrt(2)/2, sqrt(2)) (musl's bit trick,
    subnormals scaled by 2^54 first), then fdlibm's kernel on f = m - 1. Specials: log(+-0) =
    -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN."""
    sub = b.fcmp_ordered("<", d, _c64(2.2250738585072014e-308))
    ds = b.select(sub, b.fmul(d, _c64(2.0 ** 54)), d)
    u = b.add(b.bitcast(ds, I64), ir.Constant(I64, (0x3FF00000 - 0x3FE6A09E) << 32))
    k = b.sub(b.ashr(u, ir.Constant(I64, 52)), ir.Constant(I64, 1023))
    k = b.sub(k, b.select(sub, ir.Constant(I64, 54), ir.Constant(I64, 0)))
    mbits = b.add(b.and_(u, ir.Constant(I64, (1 << 52) - 1)), ir.Constant(I64, 0x3FE6A09E << 32))
    f = b.fsub(b.bitcast(mbits, F64), _c64(1.0))
    dk = b.sitofp(k, F64)
    s = b.fdiv(f, b.fadd(f, _c64(2.0)))
    z = b.fmul(s, s)
    w = b.fmul(z, z)
    t1 = b.fmul(w, _horner(b, w, [_LG[1], _LG[3], _LG[5]]))
    t2 = b.fmul(z, _horner(b, w, [_LG[0], _LG[2], _LG[4], _LG[6]]))
    hfsq = b.fmul(_c64(0.5), b.fmul(f, f))
    out = b.fadd(b.fmul(s, b.fadd(hfsq, b.fadd(t2, t1))), b.fmul(dk, _c64(_LN2_LO)))
    out = b.fadd(b.fadd(b.fsub(out, hfsq), f), b.fmul(dk, _c64(_LN2_HI)))
    out = b.select(b.fcmp_ordered("==", d, _c64(np.inf)), d, out)
    out = b.select(b.fcmp_ordered("==", d, _c64(0.0)), _c64(-np.inf), out)
    out = b.select(b.fcmp_ordered("<", d, _c64(0.0)), _c64(np.nan), out)
    return b.select(b.fcmp_unordered("uno", d, d), d, out)


def fast_log(b: ir.IRBuilder, x):
    if x.type == F64:
        return _log64(b, x)
    return b.fptrunc(_log64(b, b.fpext(x, F64)), F32)


# tanh's Taylor series (x - x^3/3 + 2x^5/15 - ...), coefficients of x^(2n+1), n = 0..5:
# truncation below 1e-17 relative for |x| < 1/16.
_TANH_TAYLOR = (1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925)


def fast_tanh32(b: ir.IRBuilder, x):
    """float32 tanh in float64: |x| < 1/16 by its Taylor series (keeps tiny values and -0
    exact); else sign(x) (1 - 2 / (exp(2|x|) + 1)) with the generated exp (|x| clamped at 20,
    where tanh rounds to 1 in float32). NaN stays NaN."""
    d = b.fpext(x, F64)
    a = intrinsic(b, "fabs", d)
    small = b.fmul(d, _horner(b, b.fmul(d, d), list(_TANH_TAYLOR)))
    ac = b.select(b.fcmp_ordered("<", a, _c64(20.0)), a, _c64(20.0))
    e = fast_exp(b, b.fmul(ac, _c64(2.0)))
    big = b.fsub(_c64(1.0), b.fdiv(_c64(2.0), b.fadd(e, _c64(1.0))))
    big = intrinsic2(b, "copysign", big, d)
    out = b.select(b.fcmp_ordered("<", a, _c64(1 / 16)), small, big)
    return b.fptrunc(b.select(b.fcmp_unordered("uno", d, d), d, out), F32)


_TWO_OVER_PI: dict = {}


def _two_over_pi_table():
    """For each float32 biased exponent e: c = (2^(e-150) * 2/pi) mod 4 as a 96-bit fixed-point
    integer (94 fraction bits), split into three 32-bit words (high first). 2/pi's bits come
    from pi computed with Python integers (Machin's formula), 480 bits."""
    if not _TWO_OVER_PI:
        prec = 480
        one = 1 << (prec + 16)

        def arctan_inv(n):  # arctan(1/n) * 2^(prec+16)
            total, term, k, sign = 0, one // n, 1, 1
            while term:
                total += sign * (term // k)
                term //= n * n
                k += 2
                sign = -sign
            return total
        pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))       # pi * 2^(prec+16)
        two_over_pi = (2 << (2 * (prec + 16))) // pi          # 2/pi * 2^(prec+16)
        words = ([], [], [])
        for e in range(256):
            shift = (e - 150) + 94 - (prec + 16)              # scale to 2^(E + 94)
            c = two_over_pi << shift if shift >= 0 else two_over_pi >> -shift
            c &= (1 << 96) - 1                                 # mod 4, in units of 2^-94
            for j in range(3):
                words[j].append((c >> (32 * (2 - j))) & 0xFFFFFFFF)
        _TWO_OVER_PI["words"] = words
    return _TWO_OVER_PI["words"]


def _const_table(module: ir.Module, name: str, values) -> ir.GlobalVariable:
    g = module.globals.get(name)
    if g is None:
        ty = ir.ArrayType(I32, len(values))
        g = ir.GlobalVariable(module, ty, name)
        g.initializer = ir.Constant(ty, [ir.Constant(I32, v) for v in values])
        g.global_constant = True
        g.linkage = "internal"
    return g


# fdlibm's pi/2 in three 33-bit pieces (k_rem_pio2.c / e_rem_pio2.c): k * piece is exact for
# |k| < 2^20, which holds below _CW_LIMIT.
_PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)
_CW_LIMIT = 2.0 ** 19


def _reduce_pio2_f32(b: ir.IRBuilder, x):
    """x (float32) = n pi/2 + r with |r| <= ~pi/4: (r as float64, n mod 4 as i64).
    |x| < 2^19: Cody & Waite in float64 with fdlibm's three-piece pi/2. Larger: exact, in the
    way of Payne & Hanek (and glibc's sinf `reduce_large`): x = M 2^E with a 24-bit integer M,
    so x 2/pi mod 4 = M (2^E 2/pi mod 4) mod 4, a 24 x 96-bit integer product of which the top
    64 bits (units of 2^-62) are kept; the per-exponent constant is a table lookup."""
    d = b.fpext(x, F64)
    a = intrinsic(b, "fabs", d)
    large = b.fcmp_unordered(">=", a, _c64(_CW_LIMIT))  # NaN and inf go this way (finite work)
    ds = b.select(large, _c64(0.0), d)
    kf = intrinsic(b, "rint", b.fmul(ds, _c64(2 / np.pi)))
    r = ds
    for piece in _PIO2:
        r = _fma64(b, b.fneg(kf), _c64(piece), r)
    n_small = b.fptosi(kf, I64)
    # the large path
    xi = b.zext(b.bitcast(x, I32), I64)
    e = b.and_(b.lshr(xi, ir.Constant(I64, 23)), ir.Constant(I64, 0xFF))
    m = b.or_(b.and_(xi, ir.Constant(I64, 0x7FFFFF)), ir.Constant(I64, 0x800000))
    words = _two_over_pi_table()
    c = []
    for j in range(3):
        g = _const_table(b.module, f"two_over_pi_{j}", words[j])
        # 32-bit words, widened: LLVM then knows each product is 32 x 32 bits (one pmuludq)
        c.append(b.zext(b.load(b.gep(g, [ir.Constant(I64, 0), e], inbounds=True), typ=I32),
                        I64))
    hi, mid, lo = (b.mul(m, w) for w in c)
    res = b.add(b.add(b.shl(hi, ir.Constant(I64, 32)), mid), b.lshr(lo, ir.Constant(I64, 32)))
    n_large = b.lshr(b.add(res, ir.Constant(I64, 1 << 61)), ir.Constant(I64, 62))
    rr = b.sub(res, b.shl(n_large, ir.Constant(I64, 62)))
    r_large = b.fmul(b.sitofp(rr, F64), _c64(np.pi / 2 * 2.0 ** -62))
    # negative x: the fixed-point part reduced |x|; negate (n -> -n)
    neg = b.fcmp_ordered("<", d, _c64(0.0))
    r_large = b.select(neg, b.fneg(r_large), r_large)
    n_large = b.select(neg, b.sub(ir.Constant(I64, 0), n_large), n_large)
    r = b.select(large, r_large, r)
    n = b.and_(b.select(large, n_large, n_small), ir.Constant(I64, 3))
    return r, n


def _sin_cos_poly(b: ir.IRBuilder, r):
    """(sin r, cos r) for |r| <= ~pi/4 in float64 by their Taylor series to r^15 and r^16
    (truncation below 3e-14 relative there: far below float32's half ulp)."""
    z = b.fmul(r, r)
    sin_c = [(-1) ** k / math.factorial(2 * k + 1) for k in range(8)]
    cos_c = [(-1) ** k / math.factorial(2 * k) for k in range(9)]
    return b.fmul(r, _horner(b, z, sin_c)), _horner(b, z, cos_c)


def fast_trig32(b: ir.IRBuilder, fname: str, x):
    """float32 sin, cos or tan computed in float64 from the exact reduction above; by the
    quadrant n: sin x = (s, c, -s, -c)[n], cos x = (c, -s, -c, s)[n], tan x = s/c or -c/s.
    sin(+-0) and tan(+-0) keep their sign; inf and NaN give NaN."""
    r, n = _reduce_pio2_f32(b, x)
    s, c = _sin_cos_poly(b, r)

    def is_(k):
        return b.icmp_unsigned("==", n, ir.Constant(I64, k))
    if fname == "tan":
        odd = b.trunc(n, I1)
        out = b.select(odd, b.fneg(b.fdiv(c, s)), b.fdiv(s, c))
    else:
        first, second = (s, c) if fname == "sin" else (c, b.fneg(s))
        out = b.select(is_(0), first, b.select(is_(1), second, b.select(
            is_(2), b.fneg(first), b.fneg(second))))
    d = b.fpext(x, F64)
    if fname != "cos":
        out = b.select(b.fcmp_ordered("==", d, _c64(0.0)), d, out)
    bad = b.fcmp_unordered("uno", b.fsub(d, d), _c64(0.0))  # inf - inf and NaN are NaN
    return b.fptrunc(b.select(bad, _c64(np.nan), out), F32)


# x erfc(x) exp(x^2) as a Chebyshev series in u = 1/x on [1/6, 1] (x in [1, 6]), degree 24:
# interpolated at the Chebyshev points with mpmath at 40 digits (maximum relative error 2.4e-17
# against mpmath's erfc on 2,001 points), then rounded to float64. The asymptotic expansion
# erfc(x) ~ exp(-x^2) / (x sqrt(pi)) (1 - 1/(2x^2) + ...) is why 1/x makes it smooth.
_ERFC_U = (0.49471361578208073, -0.06627963187965226, -0.0022764645742360114,
           0.001717245128146866, -0.00032014496358247316, 2.6743225983670515e-05,
           3.968695744344053e-06, -2.2059099609177132e-06, 5.18822760986672e-07,
           -6.999918836906682e-08, -9.071270087834273e-10, 3.81951552192842e-09,
           -1.3416438565181666e-09, 2.9478922180326285e-10, -3.786760799973967e-11,
           -2.1671472562095174e-12, 3.112229282355579e-12, -1.1363842129729438e-12,
           2.773985531666567e-13, -4.459066392405864e-14, 1.0732847617555235e-15,
           2.4790846992137104e-15, -1.1601226123958656e-15, 3.4680438202576634e-16,
           -7.575882307201767e-17)


def fast_erf64(b: ir.IRBuilder, d):
    """float64 erf without a libm call:
      |x| < 1:       x * sum_n 2/sqrt(pi) (-1)^n x^(2n) / (n! (2n+1)), n <= 22 (Taylor;
                     truncation below 1e-22);
      1 <= |x| < 6:  sign(x) (1 - exp(-x^2) u G(u)), u = 1/x, G = the series above; x^2 split
                     exactly into hi + lo (fma), exp(-x^2) = exp(-hi) (1 - lo);
      |x| >= 6:      sign(x) (erfc(6) = 2e-17 rounds away).
    Both branches computed and selected (no control flow in the loop body)."""
    a = intrinsic(b, "fabs", d)
    coef = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
            for n in range(23)]
    small = b.fmul(d, _horner(b, b.fmul(d, d), coef))
    ac = b.select(b.fcmp_ordered("<", a, _c64(1.0)), _c64(1.0), a)
    ac = b.select(b.fcmp_unordered(">", ac, _c64(6.0)), _c64(6.0), ac)  # NaN -> 6: finite work
    u = b.fdiv(_c64(1.0), ac)
    lo_u, hi_u = 1 / 6, 1.0
    t = b.fmul(b.fsub(u, _c64((lo_u + hi_u) / 2)), _c64(2 / (hi_u - lo_u)))
    t2 = b.fmul(t, _c64(2.0))
    b1, b2 = _c64(0.0), _c64(0.0)
    for c in _ERFC_U[:0:-1]:  # Clenshaw
        b1, b2 = b.fadd(_fma64(b, t2, b1, b.fneg(b2)), _c64(c)), b1
    g = b.fsub(_fma64(b, t, b1, _c64(_ERFC_U[0])), b2)
    sq_hi = b.fmul(ac, ac)
    sq_lo = _fma64(b, ac, ac, b.fneg(sq_hi))
    e = b.fmul(fast_exp(b, b.fneg(sq_hi)), b.fsub(_c64(1.0), sq_lo))
    big = b.fsub(_c64(1.0), b.fmul(e, b.fmul(u, g)))
    big = b.select(b.fcmp_ordered(">=", a, _c64(6.0)), _c64(1.0), big)
    big = intrinsic2(b, "copysign", big, d)
    out = b.select(b.fcmp_ordered("<", a, _c64(1.0)), small, big)
    return b.select(b.fcmp_unordered("uno", d, d), d, out)


def intrinsic2(b: ir.IRBuilder, name: str, x, y):
    fn = _declare(b.module, f"llvm.{name}.{'f32' if x.type == F32 else 'f64'}", x.type,
                  [x.type, x.type])
    return b.call(fn, [x, y])


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
    """Renders one Expr for one element: `args[i]()` loads operand i (as (value, dtype))."""

    def __init__(self, b: ir.IRBuilder, args):
        self.b = b
        self.args = args
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


