"""Random numbers: Philox-4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
easy as 1, 2, 3", SC 2011), a counter-based generator written as a scalar expression, so that
every backend computes the same bits.

`philox(seed; shape, stream, dist, dtype)` is an elementwise op of the given `shape`: element
i of the output is a function of its flat row-major index i, the seed (a 0-d uint64 tensor: an
argument, so a new seed doesn't retrace) and `stream`, a number the tracer gives each random
call site in program order. The index is the loop's own counter (`scalar.index()`, which every
emitter renders from its loop position), not an operand: a draw needs no index array, and it
fuses into its reader's loop like any elementwise op. The Philox counter is (index low 32
bits, index high 32 bits, stream low, stream high), the key (seed low, seed high). Two call
sites never share a stream, so they draw independent numbers; the op is marked `random`, so
common-subexpression elimination never merges two calls.

Distributions, from the 4 output words w0..w3 of one counter:
  - "uniform" in [0, 1): float32 from the top 24 bits of w0; float64 from 53 bits of w0, w1;
  - "normal" (Box-Muller, in float64 then rounded to the dtype): u1 = 1 - U53(w0, w1) in
    (0, 1], u2 = U53(w2, w3); z = sqrt(-2 ln u1) cos(2 pi u2).
Every backend computes the same bits, normal numbers included: ln and cos are not library
calls (whose last bits differ between NumPy, glibc and CUDA) but `box_muller` below, written
once with + - * /, sqrt, floor, comparisons and selects, each correctly rounded in IEEE
float64 everywhere, and evaluated in the same order by the numpy reference and by the
rendered expression (native code must not contract a*b+c into an FMA: LLVM doesn't without
fast-math flags; NVRTC gets --fmad=false).
"""
from __future__ import annotations

import math

import numpy as np

from . import scalar as S
from ..errors import ShapeError
from .registry import ELEMENTWISE, UINT64, defop, dkind

M0, M1 = 0xD2511F53, 0xCD9E8D57          # the round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85          # the Weyl key increments (golden ratio, sqrt(3)-1)
ROUNDS = 10
MASK = 0xFFFFFFFF


# -- the reference: Philox on numpy uint64 arrays holding 32-bit words -----------------------
def philox4x32(c0, c1, c2, c3, k0, k1, rounds=ROUNDS):
    """Four arrays of 32-bit words (in uint64) -> the four output words."""
    u = np.uint64
    c = [np.asarray(w, np.uint64) for w in (c0, c1, c2, c3)]
    k0, k1 = np.asarray(k0, np.uint64), np.asarray(k1, np.uint64)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + u(W0)) & u(MASK), (k1 + u(W1)) & u(MASK)
        p0, p1 = c[0] * u(M0), c[2] * u(M1)  # 32 x 32 -> 64 bits: no overflow in uint64
        c = [(p1 >> u(32)) ^ c[1] ^ k0, p1 & u(MASK), (p0 >> u(32)) ^ c[3] ^ k1, p0 & u(MASK)]
    return c


def _words_ref(index, seed, stream):
    index, seed = np.asarray(index, np.uint64), np.asarray(seed, np.uint64)
    u = np.uint64
    return philox4x32(index & u(MASK), index >> u(32), np.uint64(stream & MASK),
                      np.uint64(stream >> 32), seed & u(MASK), seed >> u(32))


def _u53(hi, lo):
    return ((hi >> np.uint64(5)).astype(np.float64) * 67108864.0
            + (lo >> np.uint64(6)).astype(np.float64)) * 2.0 ** -53


# -- Box-Muller from correctly rounded float64 operations only -------------------------------
SQRT2 = math.sqrt(2.0)
LN2 = math.log(2.0)
_ATANH_TERMS = [1.0 / (2 * n + 1) for n in range(12)]                 # 1/1, 1/3, 1/5, ...
_COS_TERMS = [(-1) ** n / math.factorial(2 * n) for n in range(11)]   # cos a = sum c_n a^2n
_SIN_TERMS = [(-1) ** n / math.factorial(2 * n + 1) for n in range(11)]


class _NumpyOps:
    where, floor, sqrt = staticmethod(np.where), staticmethod(np.floor), staticmethod(np.sqrt)

    @staticmethod
    def eq(a, b):
        return a == b


class _ExprOps:
    @staticmethod
    def where(c, a, b):
        return S.call("where", c, a, b)

    @staticmethod
    def floor(x):
        return S.call("floor", x)

    @staticmethod
    def sqrt(x):
        return S.call("sqrt", x)

    @staticmethod
    def eq(a, b):
        return a.eq(b)


def _horner(x, coefficients):
    p = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        p = p * x + c
    return p


def box_muller(u1, u2, ops):
    """sqrt(-2 ln u1) cos(2 pi u2) for float64 u1 in (0, 1] (multiples of 2**-53) and u2 in
    [0, 1), from operations that every backend rounds the same way; `ops` supplies `where`,
    `floor`, `sqrt` and `eq` for numpy arrays or scalar expressions. Accuracy: a few ulp of
    float64 (tested against math.log/math.cos), far below a float32 normal's rounding."""
    # ln u1 = ln m - e ln 2 with m = u1 * 2**e in [sqrt(2)/2, sqrt(2)): e by binary search,
    # each scaling by a power of two exact
    m, e = u1, u1 * 0.0
    for p in (32, 16, 8, 4, 2, 1):
        scaled = m * 2.0 ** p
        fits = scaled < SQRT2
        m, e = ops.where(fits, scaled, m), ops.where(fits, e + float(p), e)
    s = (m - 1.0) / (m + 1.0)             # |s| <= 0.1716; m - 1 is exact (Sterbenz)
    ln_m = 2.0 * s * _horner(s * s, _ATANH_TERMS)   # 2 atanh(s): 12 terms reach 1e-19
    ln_u1 = ln_m - e * LN2
    # cos(2 pi u2) = cos(q pi/2 + a): q = round(4 u2), a = (4 u2 - q) pi/2 in [-pi/4, pi/4]
    t = u2 * 4.0                           # exact
    q = ops.floor(t + 0.5)
    a = (t - q) * (math.pi / 2.0)          # t - q is exact
    a2 = a * a
    cos_a, sin_a = _horner(a2, _COS_TERMS), a * _horner(a2, _SIN_TERMS)
    c = ops.where(ops.eq(q, 1.0), -sin_a,
                  ops.where(ops.eq(q, 2.0), -cos_a, ops.where(ops.eq(q, 3.0), sin_a, cos_a)))
    return ops.sqrt(ln_u1 * -2.0) * c


def _philox_ref(seed, shape, stream, dist, dtype, index=None):
    """The numbers of `shape`, or of the flat indices `index` only (a piece of the output,
    as the chunked numpy evaluations pass it)."""
    if index is None:
        index = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64).reshape(shape)
    w = _words_ref(index, seed, stream)
    dtype = np.dtype(dtype)
    if dist == "uniform":
        if dtype == np.float32:
            return ((w[0] >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24))
        return _u53(w[0], w[1])
    u1, u2 = 1.0 - _u53(w[0], w[1]), _u53(w[2], w[3])
    return np.asarray(box_muller(u1, u2, _NumpyOps)).astype(dtype)


# -- the same algorithm as a scalar expression (what native backends render) -----------------
def _c(v) -> S.Expr:
    return S.const(np.uint64(v))


def _words_expr(stream):
    index, seed = S.index(), S.arg(0)
    c = [S.call("bitand", index, _c(MASK)), S.call("shr", index, _c(32)),
         _c(stream & MASK), _c(stream >> 32)]
    k0, k1 = S.call("bitand", seed, _c(MASK)), S.call("shr", seed, _c(32))
    for r in range(ROUNDS):
        if r:
            k0 = S.call("bitand", k0 + _c(W0), _c(MASK))
            k1 = S.call("bitand", k1 + _c(W1), _c(MASK))
        p0, p1 = c[0] * _c(M0), c[2] * _c(M1)
        c = [S.call("bitxor", S.call("bitxor", S.call("shr", p1, _c(32)), c[1]), k0),
             S.call("bitand", p1, _c(MASK)),
             S.call("bitxor", S.call("bitxor", S.call("shr", p0, _c(32)), c[3]), k1),
             S.call("bitand", p0, _c(MASK))]
    return c


def _u53_expr(hi, lo):
    f64 = np.dtype(np.float64)
    return (S.cast(S.call("shr", hi, _c(5)), f64) * 67108864.0
            + S.cast(S.call("shr", lo, _c(6)), f64)) * (2.0 ** -53)


def philox_expr(attrs) -> S.Expr:
    w = _words_expr(int(attrs["stream"]))
    dtype = np.dtype(attrs["dtype"])
    if attrs["dist"] == "uniform":
        if dtype == np.float32:
            return S.cast(S.call("shr", w[0], _c(8)), dtype) * np.float32(2.0 ** -24)
        return _u53_expr(w[0], w[1])
    u1, u2 = 1.0 - _u53_expr(w[0], w[1]), _u53_expr(w[2], w[3])
    return S.cast(box_muller(u1, u2, _ExprOps), dtype)


def _philox_infer(types, shape, stream, dist, dtype):
    if len(types) != 1 or types[0][1] != UINT64 or tuple(types[0][0]) != ():
        raise ShapeError("philox takes one operand, a 0-d uint64 seed, not "
                         + ", ".join(f"{d}{list(s)}" for s, d in types))
    if dist not in ("uniform", "normal") or dkind(np.dtype(dtype)) != "f":
        raise ShapeError(f"philox: bad distribution {dist!r} or dtype {dtype}")
    return tuple(int(d) for d in shape), np.dtype(dtype)


CHUNK = 4096  # elements per piece in the numpy evaluation (bounded temporaries)


def _philox_into(out, seed, shape, stream, dist, dtype):
    """Into `out` (any layout) in pieces of CHUNK elements taken in row-major order, each
    from its own flat indices: no index array of the whole output."""
    if out.size == 0:
        return
    it = np.nditer([out], flags=["external_loop", "buffered", "zerosize_ok"],
                   op_flags=[["writeonly"]], buffersize=CHUNK, order="C")
    start = 0
    with it:
        for piece in it:
            n = len(piece)
            piece[...] = _philox_ref(seed, shape, stream, dist, dtype,
                                     index=np.arange(start, start + n, dtype=np.uint64))
            start += n


defop("philox", ELEMENTWISE, _philox_infer, _philox_ref, expr=philox_expr, random=True,
      into=_philox_into,
      doc="Philox-4x32-10 numbers of one stream: uniform [0, 1) or standard normal, of a shape")
