"""Random numbers: Philox-4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
easy as 1, 2, 3", SC 2011), a counter-based generator written as a scalar expression, so that
every backend computes the same bits (ISSUE-NOTES, issue 10).

`philox(counter, seed; stream, dist, dtype)` is an elementwise op: element i of the output is
a function of its counter (the element's index, a uint64 `arange`), the seed (a 0-d uint64
tensor: an argument, so a new seed doesn't retrace) and `stream`, a number the tracer gives
each random call site in program order. The Philox counter is (index low 32 bits, index high
32 bits, stream low, stream high), the key (seed low, seed high). Two call sites never share
a stream, so they draw independent numbers; the op is marked `random`, so common-subexpression
elimination never merges two calls.

Distributions, from the 4 output words w0..w3 of one counter:
  - "uniform" in [0, 1): float32 from the top 24 bits of w0; float64 from 53 bits of w0, w1;
  - "normal" (Box-Muller, in float64 then rounded to the dtype): u1 = 1 - U53(w0, w1) in
    (0, 1], u2 = U53(w2, w3); z = sqrt(-2 ln u1) cos(2 pi u2).
The uniform bits are exact on every backend; normal values go through log and cos, so they
agree within the transcendental tolerance (4 ulp) across backends.
"""
from __future__ import annotations

import math

import numpy as np

from . import scalar as S
from ..errors import ShapeError
from .registry import ELEMENTWISE, UINT64, defop

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


def _philox_ref(index, seed, stream, dist, dtype):
    w = _words_ref(index, seed, stream)
    dtype = np.dtype(dtype)
    if dist == "uniform":
        if dtype == np.float32:
            return ((w[0] >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -24))
        return _u53(w[0], w[1])
    u1, u2 = 1.0 - _u53(w[0], w[1]), _u53(w[2], w[3])
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)).astype(dtype)


# -- the same algorithm as a scalar expression (what native backends render) -----------------
def _c(v) -> S.Expr:
    return S.const(np.uint64(v))


def _words_expr(stream):
    index, seed = S.arg(0), S.arg(1)
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
    z = S.call("sqrt", S.call("log", u1) * -2.0) * S.call("cos", u2 * (2.0 * math.pi))
    return S.cast(z, dtype)


def _philox_infer(types, stream, dist, dtype):
    (si, di), (ss, ds) = types
    if di != UINT64 or ds != UINT64 or tuple(ss) != ():
        raise ShapeError(f"philox takes a uint64 counter and a 0-d uint64 seed, not {di} and "
                         f"{ds}{list(ss)}")
    if dist not in ("uniform", "normal") or np.dtype(dtype).kind != "f":
        raise ShapeError(f"philox: bad distribution {dist!r} or dtype {dtype}")
    return tuple(si), np.dtype(dtype)


defop("philox", ELEMENTWISE, _philox_infer, _philox_ref, expr=philox_expr, random=True,
      doc="Philox-4x32-10 numbers of one stream: uniform [0, 1) or standard normal")
