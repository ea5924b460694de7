"""The per-op sample database: for every registry op and every public function or method, the
inputs that mature tensor libraries test an operator with, each paired with an independent
NumPy formula (never the registry's `ref`).

A `Sample` is one call of the public API on concrete arrays: 0-d, size-1 and zero-size
dimensions, broadcasting both ways, non-contiguous caller arrays (transposed, negative strides,
step slices, a view of a larger buffer), extremal values (+-0, +-inf, NaN, the dtype's limits,
subnormals, values that overflow `exp`), the integer edge rules (division by zero,
INT_MIN // -1, negative exponents) and each op's attributes over their range.

`INVALID` lists calls that must raise a `CompilerError` subclass naming the user's line.
`test_opdb.py` runs both on every available backend; tolerances per op follow the backend
rules of CONVENTIONS.md ("Tolerances"): EXACT, ULP (4 ulp), SUM (1e-5 / 1e-12 of the sum of |terms|)
and CLOSE (composites of several rounded steps).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import compiler as cc
import compiler.nn.functional as F

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)
B = np.dtype(np.bool_)
FLOATS, INTS = (F32, F64), (I32, I64)
NUMERIC = FLOATS + INTS
ALL = NUMERIC + (B,)

EXACT = "exact"   # bit-identical: + - * /, sqrt, comparisons, selects, casts, min/max, copies
ULP = "ulp"       # within 4 ulp of the formula (transcendental functions)
SUM = "sum"       # within 1e-5 (f32) / 1e-12 (f64) of the sum of |terms| (reductions, matmul)
CLOSE = "close"   # a composite of several rounded steps (softmax, layer_norm, gelu, ...)


@dataclass
class Sample:
    api: str                      # the public name exercised: "Tensor.sin", "cc.sin", "F.relu"
    fn: Callable                  # the traced body, over Tensors
    args: tuple                   # numpy arrays (caller's arrays) and Python scalars
    want: Callable                # independent numpy formula: (*args) -> array or tuple
    tol: str = EXACT
    grad: bool = False            # float64 gradient against central finite differences
    writes: int | None = None     # a `_` form: the argument it writes (and must return)
    returns: int | None = None    # a meta-changing `_` form: the argument it returns
    terms: Callable | None = None  # SUM: (*args) -> sum of |terms| per output element
    grad_want: Callable | None = None  # explicit gradient (ties, kinks), instead of FD
    label: str = ""
    apis: tuple = field(default=())  # further public names the sample exercises
    wrt: tuple | None = None      # the inputs differentiated (default: every float64 one)
    always: bool = False          # runs on every backend, also in the default (sampled) run

    @property
    def id(self) -> str:
        shapes = ",".join("x".join(map(str, a.shape)) or "0d" if isinstance(a, np.ndarray)
                          else repr(a) for a in self.args)
        dts = ",".join(sorted({a.dtype.name for a in self.args if isinstance(a, np.ndarray)}))
        return f"{self.api}[{dts}|{shapes}]{self.label}"


SAMPLES: list[Sample] = []
INVALID: list[tuple] = []      # (api, fn, args, error class)


def add(*samples):
    SAMPLES.extend(samples)


def invalid(api, fn, args, error):
    """`fn` must be a one-line lambda: the error names its line."""
    INVALID.append((api, fn, tuple(args), error))


# -- input generators ----------------------------------------------------------------------------
def rand(shape, dtype, lo=-3.0, hi=3.0, seed=0):
    return np.asarray(_rand(shape, dtype, lo, hi, seed))


def _rand(shape, dtype, lo, hi, seed):
    rng = np.random.default_rng([seed, *shape, len(shape)])
    dtype = np.dtype(dtype)
    if dtype == B:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        return rng.integers(int(math.floor(lo)), int(math.ceil(hi)) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def specials(dtype):
    """The extremal values of a dtype, as a 1-D array."""
    dtype = np.dtype(dtype)
    if dtype == B:
        return np.array([True, False])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([info.min, info.min + 1, -7, -1, 0, 1, 7, info.max], dtype)
    fi = np.finfo(dtype)
    big = 100.0 if dtype == F32 else 800.0   # exp overflows
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, fi.max, fi.min, fi.tiny,
                     fi.smallest_subnormal, -fi.smallest_subnormal, big, -big, 1.0, -1.0, 0.5],
                    dtype)


def layouts(shape, dtype, lo=-3.0, hi=3.0, seed=0):
    """(label, array) pairs: the same logical shape in the caller layouts a user may pass."""
    base = rand(shape, dtype, lo, hi, seed)
    out = [("", base)]
    if len(shape) >= 2:
        out.append(("|T", np.ascontiguousarray(base.T).T))           # transposed strides
    if len(shape) >= 1 and shape[0] > 1:
        out.append(("|neg", np.ascontiguousarray(base[::-1])[::-1]))  # negative stride
        big = np.repeat(base, 2, axis=0)
        big[1::2] = rand(shape, dtype, lo, hi, seed + 1)
        out.append(("|step", big[::2]))                               # a step slice
    if len(shape) >= 1:
        pad = [(1, 2)] + [(0, 1)] * (len(shape) - 1)
        larger = np.pad(base, pad, constant_values=base.flat[0] if base.size else 0)
        out.append(("|sub", larger[(slice(1, 1 + shape[0]),)
                                   + tuple(slice(0, d) for d in shape[1:])]))
    for label, a in out:
        assert a.shape == tuple(shape) and np.array_equal(a, base, equal_nan=True), label
    return out


SHAPES = [(), (1,), (0,), (3, 4), (2, 0, 3), (1, 1), (2, 1, 3)]


def f64(a):
    return np.asarray(a).astype(F64)


def float_of(dtype):
    dtype = np.dtype(dtype)
    return dtype if dtype.kind == "f" else F32


def result_dtype(*dtypes):
    """The project's promotion (independent of the registry): float beats int beats bool, then
    the widest of the winning category."""
    rank = {"b": 0, "i": 1, "u": 1, "f": 2}
    dtypes = [np.dtype(d) for d in dtypes]
    top = max(rank[d.kind] for d in dtypes)
    return max((d for d in dtypes if rank[d.kind] == top), key=lambda d: d.itemsize)


def errstate(fn):
    def wrapped(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    return wrapped


# -- unary elementwise -------------------------------------------------------------------------
def _erf(x):
    return np.vectorize(math.erf, otypes=[F64])(x) if np.asarray(x).size else f64(x)


def _expm1(x):
    """Goldberg's formula (u = e^x; (u - 1) x / ln u, and x where u rounds to 1), in long
    double: accurate where exp(x) - 1 cancels."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        xl = x.astype(np.longdouble)
        u = np.exp(xl)
        out = np.where(u == 1, xl, np.where(u - 1 == -1, -1, (u - 1) * xl / np.log(u)))
        out = np.where(np.isinf(u), u, out)
        return np.where(np.isnan(xl), xl, out).astype(x.dtype)


def _log1p(x):
    """Goldberg's formula (u = 1 + x; ln(u) x / (u - 1), and x where u rounds to 1), in long
    double."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        xl = x.astype(np.longdouble)
        u = 1 + xl
        out = np.where(u == 1, xl, np.log(u) * xl / (u - 1))
        out = np.where(np.isinf(xl) & (xl > 0), xl, out)
        return np.where(u == 0, -np.inf, out).astype(x.dtype)


def _sinh(x):
    """(E + E / (E + 1)) / 2 with E = expm1(x): no cancellation near 0."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        e = _expm1(x.astype(np.longdouble))
        out = np.where(np.isinf(e), e, (e + e / (e + 1)) / 2)
        return np.where(np.isinf(x) | np.isnan(x), x, out).astype(x.dtype)


def _relu(x):
    # max(x, 0) keeping x on a tie: relu(-0.0) is -0.0 (NumPy's clip, torch); NaN stays
    return np.where(x < 0, np.zeros_like(x), x)


# name -> (formula on float64 / on the dtype, tolerance, "float" (result in a float dtype)
#          or "same", dtypes, random range, gradient range (None: no gradient), attrs)
UNARY = {
    # (0 - x: abs(-0.0) is +0.0)
    "abs": (lambda x: np.where(x <= 0, 0 - x, x) if x.dtype != B else x, EXACT, "same", ALL,
            (-3, 3), "away0", {}),
    # (x * -1, not 0 - x: -(+0.0) is -0.0)
    "neg": (lambda x: x * np.asarray(-1, x.dtype), EXACT, "same", NUMERIC, (-3, 3), (-2, 2),
            {}),
    "sign": (lambda x: np.where(x > 0, 1, np.where(x < 0, -1, np.where(x == 0, 0, x)))
             .astype(x.dtype), EXACT, "same", NUMERIC, (-3, 3), None, {}),
    "square": (lambda x: x * x, EXACT, "same", NUMERIC, (-3, 3), (-2, 2), {}),
    "relu": (_relu, EXACT, "same", ALL, (-3, 3), "away0", {}),
    "exp": (np.exp, ULP, "float", ALL, (-3, 3), (-2, 2), {}),
    "log": (np.log, ULP, "float", ALL, (0.1, 5), (0.5, 3), {}),
    "sin": (np.sin, ULP, "float", ALL, (-3, 3), (-2, 2), {}),
    "cos": (np.cos, ULP, "float", ALL, (-3, 3), (-2, 2), {}),
    "tan": (np.tan, ULP, "float", ALL, (-1.2, 1.2), (-1, 1), {}),
    "tanh": (np.tanh, ULP, "float", ALL, (-3, 3), (-2, 2), {}),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), ULP, "float", ALL, (-6, 6), (-3, 3), {}),
    "sqrt": (np.sqrt, EXACT, "float", ALL, (0, 5), (0.5, 3), {}),
    "erf": (_erf, ULP, "float", ALL, (-2, 2), (-1.5, 1.5), {}),
    "asinh": (np.arcsinh, ULP, "float", ALL, (-3, 3), (-2, 2), {}),
    "acosh": (np.arccosh, ULP, "float", ALL, (1, 5), (1.2, 3), {}),
    "atanh": (np.arctanh, ULP, "float", ALL, (-0.9, 0.9), (-0.8, 0.8), {}),
    # issue 10; rounding ops take floats only and have a zero gradient (away from the jumps)
    "floor": (np.floor, EXACT, "same", FLOATS, (-3, 3), (0.1, 0.4), {}),
    "ceil": (np.ceil, EXACT, "same", FLOATS, (-3, 3), (0.1, 0.4), {}),
    # (rounding keeps the sign: round(-0.3) is -0.0)
    "round": (lambda x: np.copysign(np.where(np.abs(x - np.trunc(x)) == 0.5,
                                             2.0 * np.round(x / 2.0), np.floor(x + 0.5)), x)
              .astype(x.dtype) if x.size else x, EXACT, "same", FLOATS, (-3, 3), (0.1, 0.4),
              {}),
    "trunc": (lambda x: np.where(x < 0, np.ceil(x), np.floor(x)), EXACT, "same", FLOATS,
              (-3, 3), (0.1, 0.4), {}),
    "reciprocal": (lambda x: 1.0 / x, EXACT, "float", ALL, (0.2, 3), (0.5, 2), {}),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), ULP, "float", ALL, (0.1, 5), (0.5, 3), {}),
    "expm1": (lambda x: _expm1(x), ULP, "float", ALL, (-3, 3), (-2, 2), {}),
    "log1p": (lambda x: _log1p(x), ULP, "float", ALL, (-0.9, 4), (-0.5, 2), {}),
    "log2": (lambda x: np.log(x) / np.log(2.0), ULP, "float", ALL, (0.1, 5), (0.5, 3), {}),
    "log10": (lambda x: np.log(x) / np.log(10.0), ULP, "float", ALL, (0.1, 5), (0.5, 3), {}),
    "sinh": (lambda x: _sinh(x), ULP, "float", ALL, (-3, 3), (-2, 2), {}),
    "cosh": (lambda x: (np.exp(x) + np.exp(-x)) / 2, ULP, "float", ALL, (-3, 3), (-2, 2), {}),
    "asin": (np.arcsin, ULP, "float", ALL, (-0.99, 0.99), (-0.8, 0.8), {}),
    "acos": (lambda x: np.pi / 2 - np.arcsin(x), ULP, "float", ALL, (-0.99, 0.99),
             (-0.8, 0.8), {}),
    "atan": (np.arctan, ULP, "float", ALL, (-3, 3), (-2, 2), {}),
}
# name -> (formula with attrs, tol, attr sets): activations with attributes, float inputs
ACTIVATIONS = {
    # (x itself where x <= 0: elu(-0.0) is -0.0)
    "elu": (lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(np.where(x > 0, 0, x))), ULP,
            [{}, {"alpha": 0.5}, {"alpha": -0.3}], "alpha", 1.0),
    "leaky_relu": (lambda x, negative_slope: np.where(x > 0, x, x * negative_slope), ULP,
                   [{}, {"negative_slope": 0.2}, {"negative_slope": -1.5}], "negative_slope",
                   0.01),
    # (x itself where it is at a bound: hardtanh(-0.0, 0, 0) is -0.0)
    "hardtanh": (lambda x, min, max: np.where(x < min, min, np.where(x > max, max, x)),
                 EXACT, [{}, {"min": -0.5, "max": 2.0}, {"min": 0.0, "max": 0.0}], None, None),
}
ACT_DEFAULTS = {"elu": {"alpha": 1.0}, "leaky_relu": {"negative_slope": 0.01},
                "hardtanh": {"min": -1.0, "max": 1.0}}


def unary_want(name, formula, kind):
    def want(x):
        if kind == "float":
            out = float_of(x.dtype)
            return errstate(formula)(f64(x.astype(out))).astype(out)
        return errstate(formula)(x).astype(x.dtype)
    return want


def _grad_input(shape, rng_spec, seed):
    if rng_spec == "away0":
        r = np.random.default_rng(seed)
        return np.asarray(r.choice([-1.0, 1.0], shape) * r.uniform(0.3, 2.0, shape))
    return rand(shape, F64, *rng_spec, seed=seed)


def _unary_calls(name):
    """(api, body) pairs: the method, the module function, F.* where it exists."""
    calls = [(f"Tensor.{name}", lambda x: getattr(x, name)()),
             (f"cc.{name}", lambda x: getattr(cc, name)(x))]
    if name in ("relu", "sigmoid"):
        calls.append((f"F.{name}", lambda x: getattr(F, name)(x)))
    if name == "abs":
        calls.append(("Tensor.__abs__", lambda x: abs(x)))
    if name == "neg":
        calls.append(("Tensor.__neg__", lambda x: -x))
    return calls


def _inplace_calls(name):
    calls = [(f"Tensor.{name}_", lambda x: getattr(x, name + "_")()),
             (f"cc.{name}_", lambda x: getattr(cc, name + "_")(x))]
    if name == "relu":
        calls.append(("F.relu_", lambda x: F.relu_(x)))
    return calls


def build_unary():
    for name, (formula, tol, kind, dtypes, (lo, hi), grange, _) in UNARY.items():
        want = unary_want(name, formula, kind)
        calls = _unary_calls(name)
        k = 0
        for dtype in dtypes:
            for shape in SHAPES:
                for label, x in layouts(shape, dtype, lo, hi, seed=k):
                    api, body = calls[k % len(calls)]
                    k += 1
                    add(Sample(api, body, (x,), want, tol, label=label))
            add(Sample(calls[0][0], calls[0][1], (specials(dtype),), want, tol, label="|special"))
        # inplace forms: value, caller's array, same object; int inputs to float ops refuse
        icalls = _inplace_calls(name)
        for j, dtype in enumerate(d for d in dtypes if kind == "same" or d.kind == "f"):
            api, body = icalls[j % len(icalls)]
            for shape in [(3, 4), (), (0, 2)]:
                add(Sample(api, body, (rand(shape, dtype, lo, hi, seed=j),), want, tol,
                           writes=0))
            add(Sample(api, body, (specials(dtype),), want, tol, writes=0, label="|special"))
        # the `_` form through an in-trace view (transposed, reversed, strided, a sub-block):
        # the write reaches the caller's array through the view's inverse
        for v, view in enumerate([lambda t: t.T, lambda t: t[::-1], lambda t: t[:, ::2],
                                  lambda t: t[1:, 1:3]]):
            dtype = F64 if kind == "float" else dtypes[v % len(dtypes)]
            x = rand((3, 4), dtype, lo, hi, seed=v)
            idx = [(slice(None),) * 2, (slice(None, None, -1),),
                   (slice(None), slice(None, None, 2)), (slice(1, None), slice(1, 3))][v]

            def want_v(a, idx=idx, want=want):
                out = a.copy()
                out[idx] = want(a[idx])
                return out
            add(Sample(f"Tensor.{name}_", lambda t, n=name, vw=view: (getattr(vw(t), n + "_")(),
                                                                     t)[1],
                       (x,), want_v, tol, writes=0, label=f"|view{v}"))
            if v == 0:
                add(Sample(f"Tensor.{name}", lambda t, n=name, vw=view: getattr(vw(t), n)(),
                           (x,), lambda a, want=want: want(a.T), tol, label="|view"))
        if kind == "float":
            invalid(f"Tensor.{name}_", lambda x, n=name: getattr(x, n + "_")(), [np.arange(3)],
                    cc.InplaceError)
        if B not in dtypes:
            invalid(f"Tensor.{name}", lambda x, n=name: getattr(x, n)(), [np.ones(2, bool)],
                    cc.TraceError)
        if grange is not None:
            for shape in [(2, 3), ()]:
                x = _grad_input(shape, grange, 5)
                add(Sample(calls[0][0], calls[0][1], (x,), want, tol, grad=True))
                add(Sample(icalls[0][0], icalls[0][1], (x.copy(),), want, tol, grad=True,
                           writes=0))


def build_activations():
    for name, (formula, tol, attr_sets, _, _) in ACTIVATIONS.items():
        for i, attrs in enumerate(attr_sets):
            full = {**ACT_DEFAULTS[name], **attrs}

            def want(x, formula=formula, full=full):
                out = float_of(x.dtype)
                return errstate(lambda v: formula(v, **full))(f64(x.astype(out))).astype(out)
            for dtype in FLOATS:
                for shape, (label, x) in [(s, lay) for s in [(3, 4), (), (0,)]
                                          for lay in layouts(s, dtype, seed=i)]:
                    add(Sample(f"F.{name}", lambda t, n=name, a=attrs: getattr(F, n)(t, **a),
                               (x,), want, tol, label=label))
                add(Sample(f"Tensor.{name}", lambda t, n=name, a=attrs: getattr(t, n)(**a),
                           (specials(dtype),), want, tol, label="|special"))
                add(Sample(f"F.{name}_", lambda t, n=name, a=attrs: getattr(F, n + "_")(t, **a),
                           (rand((2, 3), dtype, seed=i),), want, tol, writes=0))
                add(Sample(f"Tensor.{name}_", lambda t, n=name, a=attrs:
                           getattr(t, n + "_")(**a), (specials(dtype),), want, tol, writes=0,
                           label="|special"))
                add(Sample(f"cc.{name}_", lambda t, n=name, a=attrs:
                           getattr(cc, n + "_")(t, **a), (rand((4,), dtype, seed=i),), want,
                           tol, writes=0))
            if name == "hardtanh" and attrs.get("min") == attrs.get("max"):
                continue  # a degenerate interval: no gradient anywhere
            r = np.random.default_rng(i)
            gx = r.choice([-1.0, 1.0], (2, 3)) * r.uniform(0.2, 1.4, (2, 3))
            if name == "hardtanh":  # away from the bounds as well as from 0
                lo, hi = full["min"], full["max"]
                gx = np.array([[lo - 0.3, lo + 0.2, hi - 0.2], [hi + 0.3, (lo + hi) / 2, 5.0]])
            add(Sample(f"F.{name}", lambda t, n=name, a=attrs: getattr(F, n)(t, **a), (gx,),
                       want, tol, grad=True))
            add(Sample(f"F.{name}_", lambda t, n=name, a=attrs: getattr(F, n + "_")(t, **a),
                       (gx.copy(),), want, tol, grad=True, writes=0))
        invalid(f"F.{name}_", lambda t, n=name: getattr(F, n + "_")(t), [np.arange(3)],
                cc.InplaceError)
    invalid("F.hardtanh", lambda t: F.hardtanh(t, 1.0, -1.0), [np.ones(3)], cc.ShapeError)


def build_scale():
    def want_for(s, b, after):
        def want(x):
            if x.dtype.kind in "iu":  # Paddle: integers keep their dtype (and wrap)
                v = x.astype(I64)
                return ((v * int(s) + int(b)) if after else (v + int(b)) * int(s)).astype(x.dtype)
            out = float_of(x.dtype)
            v = f64(x.astype(out))
            return ((v * s + b) if after else (v + b) * s).astype(out)
        return want
    for k, (s, b, after) in enumerate([(2.0, 0.0, True), (0.5, 1.5, True), (-3.0, 2.0, False),
                                       (1.0, 0.0, True)]):
        want = want_for(s, b, after)
        for dtype in ALL:
            if dtype in INTS and not (s.is_integer() and b.is_integer()):
                continue
            x = rand((2, 3), dtype, seed=k)
            add(Sample("Tensor.scale", lambda t, s=s, b=b, a=after: t.scale(s, b, a), (x,),
                       want, ULP))
            add(Sample("cc.scale", lambda t, s=s, b=b, a=after: cc.scale(t, s, bias=b,
                                                                          bias_after_scale=a),
                       (rand((), dtype, seed=k),), want, ULP))
        for dtype in FLOATS:
            add(Sample("Tensor.scale_", lambda t, s=s, b=b, a=after: t.scale_(s, b, a),
                       (specials(dtype),), want, ULP, writes=0))
            add(Sample("cc.scale_", lambda t, s=s, b=b: cc.scale_(t, s, b),
                       (rand((0, 3), dtype),), want_for(s, b, True), ULP, writes=0))
        add(Sample("Tensor.scale", lambda t, s=s, b=b, a=after: t.scale(s, b, a),
                   (rand((2, 3), F64, seed=k),), want, ULP, grad=True))
        add(Sample("Tensor.scale_", lambda t, s=s, b=b, a=after: t.scale_(s, b, a),
                   (rand((3,), F64, seed=k),), want, ULP, grad=True, writes=0))
    # Integers (issue 16): int64 beyond 2**53 keeps every digit; int32 wraps as in C.
    big = np.array([2**53 + 1, -(2**53) - 1, 7], I64)
    add(Sample("Tensor.scale", lambda t: t.scale(2), (big,), want_for(2, 0, True),
               label="|int-exact"))
    add(Sample("Tensor.scale", lambda t: t.scale(3, 5), (specials(I32),), want_for(3, 5, True),
               label="|int-wraps"))
    for dtype in INTS:
        add(Sample("Tensor.scale_", lambda t: t.scale_(-3, 2, False), (rand((2, 3), dtype),),
                   want_for(-3, 2, False), writes=0, label="|int"))
        add(Sample("cc.scale_", lambda t: cc.scale_(t, 2, 1), (rand((3,), dtype)[::-1],),
                   want_for(2, 1, True), writes=0, label="|int"))
    invalid("Tensor.scale", lambda t: t.scale(2.5), [np.arange(3)], cc.TraceError)
    invalid("Tensor.scale_", lambda t: t.scale_(2.0, 0.5), [np.arange(3)], cc.TraceError)
    invalid("Tensor.scale", lambda t: t.scale(2**40), [np.arange(3, dtype=I32)], cc.TraceError)
    invalid("Tensor.scale_", lambda t: t.scale_(2.0), [np.ones(3, B)], cc.InplaceError)


def build_clip():
    def want(lo, hi):
        def w(x, *bounds):
            lo_, hi_ = lo, hi
            if bounds:
                lo_ = bounds[0] if lo == "t" else lo
                hi_ = bounds[-1] if hi == "t" else hi
            fl = x.dtype.kind == "f"
            if lo_ is None:
                lo_ = -np.inf if fl else np.iinfo(x.dtype).min
            if hi_ is None:
                hi_ = np.inf if fl else np.iinfo(x.dtype).max
            lo_, hi_ = np.asarray(lo_).astype(x.dtype), np.asarray(hi_).astype(x.dtype)
            out = np.where(x < lo_, lo_, x)
            return np.where(out > hi_, hi_, out).astype(x.dtype)
        return w
    for k, (lo, hi) in enumerate([(-1.0, 1.0), (None, 0.5), (-0.5, None), (2.0, -2.0), (0, 2)]):
        for dtype in NUMERIC:
            if dtype.kind == "i" and lo is not None and not float(lo).is_integer():
                continue
            for label, x in layouts((3, 4), dtype, seed=k)[:3]:
                add(Sample("Tensor.clip", lambda t, lo=lo, hi=hi: t.clip(lo, hi), (x,),
                           want(lo, hi), label=label))
            add(Sample("cc.clip", lambda t, lo=lo, hi=hi: cc.clip(t, min=lo, max=hi),
                       (specials(dtype),), want(lo, hi), label="|special"))
            add(Sample("Tensor.clip_", lambda t, lo=lo, hi=hi: t.clip_(lo, hi),
                       (rand((2, 0), dtype),), want(lo, hi), writes=0))
            add(Sample("cc.clip_", lambda t, lo=lo, hi=hi: cc.clip_(t, lo, hi),
                       (specials(dtype),), want(lo, hi), writes=0, label="|special"))
    # 0-d tensor bounds (Paddle accepts a float, an int or a 0-D Tensor): issue 18 item 9
    for dtype in NUMERIC:
        x = rand((3, 4), dtype, seed=3)
        lo, hi = np.array(-1, dtype), np.array(2, dtype)
        add(Sample("Tensor.clip", lambda t, a, b: t.clip(a, b), (x, lo, hi), want("t", "t"),
                   label="|tensor-bounds"))
        add(Sample("Tensor.clip", lambda t, a: t.clip(a), (x, np.array(0.5)), want("t", None),
                   label="|f64-bound"))
        add(Sample("Tensor.clip_", lambda t, b: t.clip_(max=b), (x.copy(), hi),
                   want(None, "t"), writes=0, label="|tensor-bound"))
    xg = np.array([[-1.6, -0.7, 0.2], [0.9, 1.4, -0.1]])
    add(Sample("Tensor.clip", lambda t: t.clip(-1.0, 1.0), (xg,), want(-1.0, 1.0), grad=True))
    add(Sample("Tensor.clip", lambda t, a, b: t.clip(a, b), (xg, np.array(-0.5), np.array(0.5)),
               want("t", "t"), grad=True, wrt=(0,), label="|tensor-bounds"))
    add(Sample("Tensor.clip_", lambda t: t.clip_(max=0.5), (xg.copy(),), want(None, 0.5),
               grad=True, writes=0))
    invalid("Tensor.clip", lambda t: t.clip(0, 1), [np.ones(3, bool)], cc.TraceError)
    invalid("Tensor.clip", lambda t, b: t.clip(b), [np.ones(3), np.ones(2)], cc.ShapeError)
    invalid("Tensor.clip", lambda t: t.clip("a"), [np.ones(3)], cc.TraceError)


def build_cast():
    for src in ALL:
        for dst in ALL:
            x = specials(src) if not (src.kind == "f" and dst.kind in "iu") else \
                rand((7,), src, -100, 100)  # float -> int of inf/NaN is undefined in C

            def want(a, dst=dst):
                return a.astype(dst)
            add(Sample("Tensor.cast", lambda t, d=dst: t.cast(d), (x,), want))
            add(Sample("Tensor.astype", lambda t, d=dst.name: t.astype(d),
                       (rand((2, 0), src),), want))
            add(Sample("cc.cast", lambda t, d=dst: cc.cast(t, d), (np.asarray(x[0]),), want))
    add(Sample("Tensor.cast", lambda t: t.cast("float64") * 1.0, (rand((3,), F64),),
               lambda a: a, grad=True))
    invalid("Tensor.cast", lambda t: t.cast("uint32"), [np.ones(2)], cc.TraceError)


# -- binary elementwise ------------------------------------------------------------------------
def _int_floordiv(a, b, dtype):
    bits = np.dtype(dtype).itemsize * 8
    out = []
    for x, y in zip(a.ravel().tolist(), b.ravel().tolist()):
        q = x // y if y != 0 else 0
        out.append((q + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1))  # wraps
    return np.array(out, dtype).reshape(a.shape)


def _int_mod(a, b, dtype):
    out = [x % y if y != 0 else 0 for x, y in zip(a.ravel().tolist(), b.ravel().tolist())]
    return np.array(out, dtype).reshape(a.shape)


def _int_pow(a, b, dtype):
    bits = np.dtype(dtype).itemsize * 8
    out = []
    for x, y in zip(a.ravel().tolist(), b.ravel().tolist()):
        if y < 0:
            v = 1 if x == 1 else (-1) ** (-y) if x == -1 else 0
        else:
            v = pow(x, y, 2 ** bits)
        out.append((v + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1))
    return np.array(out, dtype).reshape(a.shape)


def _py_floordiv(x, y):
    """Python's float `//` (the semantics NumPy follows), with NumPy's x / 0."""
    if y == 0:
        return x / np.float64(y)
    return x // y


def _py_mod(x, y):
    if y == 0 or math.isinf(x):
        return math.nan
    return x % y


def _floor_div_float(a, b):
    return np.vectorize(_py_floordiv, otypes=[F64])(a, b) if a.size else a


def _mod_float(a, b):
    return np.vectorize(_py_mod, otypes=[F64])(a, b) if a.size else a


# name -> (formula over arrays converted to the result dtype (float: float64), tolerance,
#          result "promote" | "float" | "bool", dtypes, grad)
BINARY = {
    "add": (lambda a, b: a + b if a.dtype != B else a | b, EXACT, "promote", ALL, True),
    "subtract": (lambda a, b: a - b, EXACT, "promote", NUMERIC, True),
    "multiply": (lambda a, b: a * b if a.dtype != B else a & b, EXACT, "promote", ALL, True),
    "divide": (lambda a, b: a / b, EXACT, "float", ALL, True),
    "pow": (lambda a, b: a ** b, ULP, "promote", NUMERIC, True),
    "maximum": (lambda a, b: np.where(np.isnan(a) | (a >= b), a, b) if a.dtype.kind == "f"
                else np.where(a >= b, a, b), EXACT, "promote", ALL, True),
    "minimum": (lambda a, b: np.where(np.isnan(a) | (a <= b), a, b) if a.dtype.kind == "f"
                else np.where(a <= b, a, b), EXACT, "promote", ALL, True),
    "floor_divide": (None, EXACT, "promote", NUMERIC, False),
    "remainder": (None, CLOSE, "promote", NUMERIC, True),
    "greater_than": (lambda a, b: a > b, EXACT, "bool", ALL, False),
    "less_than": (lambda a, b: a < b, EXACT, "bool", ALL, False),
    "greater_equal": (lambda a, b: a >= b, EXACT, "bool", ALL, False),
    "less_equal": (lambda a, b: a <= b, EXACT, "bool", ALL, False),
    "equal": (lambda a, b: a == b, EXACT, "bool", ALL, False),
    "not_equal": (lambda a, b: a != b, EXACT, "bool", ALL, False),
    "logical_and": (lambda a, b: (a != 0) & (b != 0), EXACT, "logic", ALL, False),
    "logical_or": (lambda a, b: (a != 0) | (b != 0), EXACT, "logic", ALL, False),
}
OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "pow": "**",
             "floor_divide": "//", "remainder": "%", "greater_than": ">", "less_than": "<",
             "greater_equal": ">=", "less_equal": "<=", "equal": "==", "not_equal": "!="}
DUNDER = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "**": "pow", "//": "floordiv",
          "%": "mod", ">": "gt", "<": "lt", ">=": "ge", "<=": "le", "==": "eq", "!=": "ne"}
# `s OP x` with a Python scalar s calls x's reflected method
REFLECTED = {**{k: "r" + v for k, v in DUNDER.items()}, ">": "lt", "<": "gt", ">=": "le",
             "<=": "ge", "==": "eq", "!=": "ne"}
INPLACE_OPERATORS = {"add": "+=", "subtract": "-=", "multiply": "*=", "divide": "/=",
                     "floor_divide": "//=", "remainder": "%="}


def binary_want(name, out_dtype_of=None):
    formula, _, rule, _, _ = BINARY[name]

    def want(a, b):
        a, b = np.asarray(a), np.asarray(b)
        dt = out_dtype_of(a, b) if out_dtype_of else None
        common = result_dtype(a.dtype, b.dtype) if dt is None else dt
        if rule == "float":
            common = float_of(common)
        if rule in ("logic",):
            return errstate(formula)(a, b)
        x, y = a.astype(common), b.astype(common)
        if rule == "bool":
            return errstate(formula)(x, y)
        if name == "floor_divide":
            xb, yb = np.broadcast_arrays(x, y)
            return _int_floordiv(xb, yb, common) if common.kind == "i" \
                else errstate(_floor_div_float)(f64(xb), f64(yb)).astype(common)
        if name == "remainder":
            xb, yb = np.broadcast_arrays(x, y)
            return _int_mod(xb, yb, common) if common.kind == "i" \
                else errstate(_mod_float)(f64(xb), f64(yb)).astype(common)
        if name == "pow" and common.kind == "i":
            xb, yb = np.broadcast_arrays(x, y)
            return _int_pow(xb, yb, common)
        if common.kind == "f" and name == "pow":
            return errstate(formula)(f64(x), f64(y)).astype(common)
        return errstate(formula)(x, y).astype(common)
    return want


def _scalar_dtype(value, like):
    if isinstance(value, bool):
        return like
    if isinstance(value, int):
        return like if like != B else I64
    return like if like.kind == "f" else F32


def _binary_domain(name, dtype, shape, seed):
    lo, hi = (-3, 3)
    if name == "pow":
        lo, hi = (0.5, 2.5) if dtype.kind == "f" else (-3, 3)
    x = rand(shape, dtype, lo, hi, seed)
    return x


def _exponent(dtype, shape, seed):
    return rand(shape, dtype, -2, 3, seed) if dtype.kind == "f" else rand(shape, dtype, 0, 4, seed)


BROADCASTS = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((2, 3, 4), (3, 1)),
              ((), (2, 3)), ((2, 3), ()), ((0, 3), (1, 3)), ((2, 1), (2, 0)), ((1,), (1, 1))]


def build_binary():
    for name, (_, tol, rule, dtypes, grad) in BINARY.items():
        want = binary_want(name)
        calls = [(f"Tensor.{name}", lambda a, b, n=name: getattr(a, n)(b)),
                 (f"cc.{name}", lambda a, b, n=name: getattr(cc, n)(a, b))]
        if name in OPERATORS:
            sym = OPERATORS[name]
            calls.append((f"Tensor.__{DUNDER[sym]}__", eval(f"lambda a, b: a {sym} b")))
        k = 0
        for dtype in dtypes:
            for sa, sb in BROADCASTS:
                a = _binary_domain(name, dtype, sa, k)
                b = _exponent(dtype, sb, k + 1) if name == "pow" else rand(sb, dtype, seed=k + 1)
                api, body = calls[k % len(calls)]
                k += 1
                add(Sample(api, body, (a, b), want, tol))
            # non-contiguous caller arrays on both sides
            for (la, a), (lb, b) in zip(layouts((3, 4), dtype, seed=1),
                                        layouts((3, 4), dtype, seed=2)[::-1]):
                if name == "pow":
                    a, b = np.abs(a) + (1 if dtype.kind == "f" else 0), np.abs(b) % 4
                add(Sample(calls[0][0], calls[0][1], (a, b), want, tol, label=la + lb))
            # extremal values against each other
            s = specials(dtype)
            a, b = np.meshgrid(s, s, indexing="ij")
            if name == "pow" and dtype.kind in "iu":
                b = np.clip(b, -3, 5)
            add(Sample(calls[0][0], calls[0][1], (a.copy(), b.copy()), want, tol,
                       label="|special"))
        # mixed dtypes (promotion)
        for da, db in [(F32, F64), (I32, F32), (I64, F32), (I32, I64), (B, I32), (B, F64),
                       (F64, I32)]:
            if da not in dtypes or db not in dtypes:
                continue
            a = _binary_domain(name, da, (2, 3), 4)
            b = _exponent(db, (3,), 5) if name == "pow" else rand((3,), db, seed=5)
            add(Sample(f"Tensor.{name}", lambda x, y, n=name: getattr(x, n)(y), (a, b), want,
                       tol if tol != EXACT or rule != "float" else EXACT, label="|mixed"))
        # Python scalars on either side: weakly typed
        for dtype in dtypes:
            for scalar in ([2, -1, 0, 2.5, True] if dtype != B else [True, False, 1]):
                if name == "pow" and (isinstance(scalar, int) and scalar < 0
                                      and dtype.kind in "ib"):
                    continue  # a trace-time error (below)
                a = _binary_domain(name, dtype, (2, 3), 6)
                sd = _scalar_dtype(scalar, dtype)

                def want_s(x, s=scalar, sd=sd, name=name):
                    return binary_want(name)(x, np.asarray(s, sd))

                def want_r(x, s=scalar, sd=sd, name=name):
                    return binary_want(name)(np.asarray(s, sd), x)
                if name == "pow" and sd.kind == "f" and dtype.kind != "f":
                    want_s = want_s  # int ** float: computed in float32 (the promoted dtype)
                add(Sample(f"Tensor.{name}", lambda x, s=scalar, n=name: getattr(x, n)(s),
                           (a,), want_s, tol, label=f"|scalar={scalar!r}"))
                if name in OPERATORS:
                    sym = OPERATORS[name]
                    if name == "pow" and dtype.kind != "f" and not isinstance(scalar, float):
                        pass
                    rev = eval(f"lambda x, s=scalar: s {sym} x")
                    rapi = f"Tensor.__{REFLECTED[sym]}__"
                    if name == "pow" and dtype.kind != "f":
                        a = np.abs(a) % 3  # an integer exponent tensor from 0
                    add(Sample(rapi, rev, (a,), want_r, tol, label=f"|rscalar={scalar!r}"))
        # inplace forms: x op= y keeps x's dtype, y broadcasts into x
        for j, dtype in enumerate(dtypes):
            icalls = [(f"Tensor.{name}_", lambda a, b, n=name: getattr(a, n + "_")(b)),
                      (f"cc.{name}_", lambda a, b, n=name: getattr(cc, n + "_")(a, b))]
            if name in INPLACE_OPERATORS:
                op = INPLACE_OPERATORS[name]
                icalls.append((f"Tensor.__i{DUNDER[op[:-1]]}__",
                               eval(f"lambda a, b: _iop(a, b, '{op}')",
                                    {"_iop": _iop})))
            if rule == "float" and dtype.kind != "f":
                continue
            for sa, sb in [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 3), ()), ((0, 2), (1,))]:
                a = _binary_domain(name, dtype, sa, j)
                b = _exponent(dtype, sb, j + 1) if name == "pow" else rand(sb, dtype, seed=j + 1)
                api, body = icalls[(j + len(sa) + len(sb)) % len(icalls)]

                def want_i(x, y, name=name):
                    return binary_want(name)(x, y).astype(x.dtype)
                add(Sample(api, body, (a, b), want_i, tol, writes=0))
            if j == 0 and rule != "float" or (rule == "float" and dtype == F64):
                # through an in-trace transposed view, broadcasting y into it
                def want_t(x, y, name=name):
                    out = x.copy()
                    out.T[...] = binary_want(name)(x.T, y).astype(x.dtype)
                    return out
                a = _binary_domain(name, dtype, (4, 3), 7)
                b = _exponent(dtype, (4,), 8) if name == "pow" else rand((4,), dtype, seed=8)
                add(Sample(f"Tensor.{name}_", lambda x, y, n=name: (getattr(x.T, n + "_")(y),
                                                                    x)[1],
                           (a, b), want_t, tol, writes=0, label="|view"))
            if name in ("greater_than", "equal", "logical_and") and dtype.kind == "f":
                a, b = rand((3,), dtype), rand((3,), dtype, seed=1)
                add(Sample(icalls[0][0], icalls[0][1], (a, b),
                           lambda x, y, name=name: binary_want(name)(x, y).astype(x.dtype),
                           writes=0, label="|keeps-dtype"))
        if rule == "float":
            invalid(f"Tensor.{name}_", lambda a, b, n=name: getattr(a, n + "_")(b),
                    [np.arange(3), np.arange(3)], cc.InplaceError)
        invalid(f"Tensor.{name}_", lambda a, b, n=name: getattr(a, n + "_")(b),
                [np.ones(3, np.float32), np.ones((2, 3), np.float32)], cc.InplaceError)
        invalid(f"Tensor.{name}", lambda a, b, n=name: getattr(a, n)(b),
                [np.ones(3), np.ones(4)], cc.ShapeError)
        if B not in dtypes:
            invalid(f"Tensor.{name}", lambda a, b, n=name: getattr(a, n)(b),
                    [np.ones(3, bool), np.ones(3, bool)], cc.TraceError)
        if grad:
            r = np.random.default_rng(3)
            a = r.uniform(0.5, 2.0, (2, 3)) * r.choice([-1, 1], (2, 3))
            b = r.uniform(0.5, 2.0, (3,)) * r.choice([-1, 1], (3,))
            if name == "pow":
                a = np.abs(a)
            if name in ("maximum", "minimum"):
                b = a[0] + np.array([0.3, -0.4, 0.5])  # no ties
            if name == "remainder":
                a = np.array([[0.35, -1.45, 2.55], [4.2, -0.4, 1.6]])
                b = np.array([0.5, 1.25, -0.75])
            add(Sample(f"Tensor.{name}", lambda x, y, n=name: getattr(x, n)(y), (a, b), want,
                       tol, grad=True))
            add(Sample(f"Tensor.{name}_", lambda x, y, n=name: getattr(x, n + "_")(y),
                       (a.copy(), b), lambda x, y, n=name: binary_want(n)(x, y), tol,
                       grad=True, writes=0))


def build_aliasing():
    """Inplace ops whose other operand aliases the target (ARCHITECTURE.md §8.6): every operand is
    read before the write, as in eager NumPy."""
    x = rand((6,), F64, seed=3)
    m = rand((3, 4), F32, seed=4)
    cases = [
        ("Tensor.add_", lambda t: t.add_(t), lambda a: a + a),
        ("Tensor.multiply_", lambda t: t.multiply_(t[::-1]), lambda a: a * a[::-1]),
        ("Tensor.subtract_", lambda t: (t[1:].subtract_(t[:-1]), t)[1],
         lambda a: np.concatenate([a[:1], a[1:] - a[:-1]])),
        ("Tensor.__iadd__", lambda t: _iop(t, t[0], "+="), lambda a: a + a[0]),
        ("Tensor.maximum_", lambda t: (t[::2].maximum_(t[1::2]), t)[1],
         lambda a: _set(a, slice(None, None, 2), np.maximum(a[::2], a[1::2]))),
    ]
    for api, fn, want in cases:
        add(Sample(api, fn, (x.copy(),), want, writes=0, label="|alias"))
    add(Sample("Tensor.add_", lambda t: (t.T[:2].add_(t[:, :2].T), t)[1], (m,),
               lambda a: _set(a, (slice(None), slice(0, 2)), a[:, :2] + a[:, :2]), writes=0,
               label="|alias-T"))
    add(Sample("Tensor.__setitem__", lambda t: _setitem(t, (slice(1, None),), t[:-1] * 2.0),
               (x.copy(),), lambda a: _set(a, slice(1, None), a[:-1] * 2.0), writes=0,
               label="|alias"))


def _iop(a, b, op):
    if op == "+=":
        a += b
    elif op == "-=":
        a -= b
    elif op == "*=":
        a *= b
    elif op == "/=":
        a /= b
    elif op == "//=":
        a //= b
    elif op == "%=":
        a %= b
    return a


def build_int_edges():
    """Issue 13 items 4 and 6, issue 18 item 7: integer division, remainder and power edges."""
    for dtype in INTS:
        info = np.iinfo(dtype)
        a = np.array([7, -7, 0, info.min, info.min, info.max, 5, -5], dtype)
        b = np.array([0, 0, 0, -1, 1, -1, -2, 3], dtype)
        for name in ("floor_divide", "remainder"):
            want = binary_want(name)
            add(Sample(f"Tensor.{name}", lambda x, y, n=name: getattr(x, n)(y), (a, b), want,
                       label="|by-zero"))
            add(Sample(f"Tensor.{name}_", lambda x, y, n=name: getattr(x, n + "_")(y),
                       (a.copy(), b), want, writes=0, label="|by-zero"))
        add(Sample("Tensor.__floordiv__", lambda x, y: x // y, (a, b),
                   binary_want("floor_divide"), label="|by-zero"))
        add(Sample("Tensor.__mod__", lambda x, y: x % y, (a, b), binary_want("remainder"),
                   label="|by-zero"))
        add(Sample("Tensor.__ifloordiv__", lambda x, y: _iop(x, y, "//="), (a.copy(), b),
                   binary_want("floor_divide"), writes=0, label="|by-zero"))
        add(Sample("Tensor.__imod__", lambda x, y: _iop(x, y, "%="), (a.copy(), b),
                   binary_want("remainder"), writes=0, label="|by-zero"))
        # integer base, integer tensor exponent with negative values: 0, 1 for base 1,
        # +-1 for base -1 (issue 18 item 7)
        base = np.array([2, 1, -1, -1, 0, 3, -2, 1], dtype)
        expo = np.array([-1, -5, -3, -4, -2, 2, 3, 0], dtype)
        add(Sample("Tensor.pow", lambda x, y: x.pow(y), (base, expo), binary_want("pow"),
                   label="|negative-exponent"))
        add(Sample("Tensor.__rpow__", lambda y: 2 ** y, (expo,),
                   lambda y: binary_want("pow")(np.asarray(2, y.dtype), y),
                   label="|negative-exponent"))
        add(Sample("Tensor.pow_", lambda x, y: x.pow_(y), (base.copy(), expo),
                   binary_want("pow"), writes=0, label="|negative-exponent"))
        # a negative Python-int exponent is a trace-time error (issue 13 item 4)
        invalid("Tensor.__pow__", lambda x: x ** -1, [np.arange(3, dtype=dtype)], cc.TraceError)
        invalid("Tensor.pow_", lambda x: x.pow_(-2), [np.arange(3, dtype=dtype)], cc.TraceError)
        invalid("cc.pow", lambda x: cc.pow(x, -1), [np.arange(3, dtype=dtype)], cc.TraceError)
    invalid("Tensor.__pow__", lambda x: x ** -1, [np.ones(3, bool)], cc.TraceError)
    # floats by zero follow IEEE / NumPy: inf, nan
    for dtype in FLOATS:
        a = np.array([1.0, -1.0, 0.0, 5.5, -5.5, 7.0], dtype)
        b = np.array([0.0, 0.0, 0.0, -2.0, 2.0, 0.5], dtype)
        for name in ("floor_divide", "remainder"):
            add(Sample(f"Tensor.{name}", lambda x, y, n=name: getattr(x, n)(y), (a, b),
                       binary_want(name), label="|by-zero"))


def build_where():
    def want(c, x, y):
        c, x, y = np.asarray(c), np.asarray(x), np.asarray(y)
        dt = result_dtype(x.dtype, y.dtype)
        cb, xb, yb = np.broadcast_arrays(c, x.astype(dt), y.astype(dt))
        out = yb.copy()
        out[cb] = xb[cb]
        return out
    for dtype in ALL:
        for sc, sx, sy in [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), ()), ((), (2, 3), (2, 1)),
                           ((0, 2), (2,), (1,))]:
            c = rand(sc, B, seed=1)
            x, y = rand(sx, dtype, seed=2), rand(sy, dtype, seed=3)
            add(Sample("cc.where", lambda a, b, d: cc.where(a, b, d), (c, x, y), want))
        add(Sample("Tensor.where", lambda a, b, d: a.where(b, d),
                   (rand((3,), B), rand((3,), dtype), rand((3,), dtype, seed=4)), want))
    add(Sample("cc.where", lambda a, b: cc.where(a, b, 0.5), (rand((2, 3), B), rand((2, 3), F64)),
               lambda c, x: want(c, x, np.asarray(0.5)), label="|scalar"))
    add(Sample("cc.where", lambda a, b, d: cc.where(a, b, d),
               (rand((2, 3), B), rand((2, 3), I32), rand((3,), F32)), want, label="|mixed"))
    add(Sample("cc.where", lambda a, b, d: cc.where(a, b, d),
               (rand((2, 3), B), rand((2, 3), F64), rand((3,), F64, seed=9)), want, grad=True))
    invalid("cc.where", lambda a, b, d: cc.where(a, b, d),
            [np.ones(3, bool), np.ones(2), np.ones(3)], cc.ShapeError)
    # Paddle and PyTorch require a bool condition (issue 16).
    for dtype in NUMERIC:
        invalid("cc.where", lambda a, b, d: cc.where(a, b, d),
                [np.ones(3, dtype), np.ones(3), np.zeros(3)], cc.TraceError)


def build_logical_not():
    def want(x):
        return x == 0
    for dtype in ALL:
        for label, x in layouts((3, 4), dtype)[:2]:
            add(Sample("Tensor.logical_not", lambda t: t.logical_not(), (x,), want, label=label))
        add(Sample("cc.logical_not", lambda t: cc.logical_not(t), (specials(dtype),), want))
        add(Sample("Tensor.__invert__", lambda t: ~t, (rand((2, 0), dtype),), want))
        add(Sample("Tensor.logical_not_", lambda t: t.logical_not_(), (specials(dtype),),
                   lambda x: want(x).astype(x.dtype), writes=0))
        add(Sample("cc.logical_not_", lambda t: cc.logical_not_(t), (rand((), dtype),),
                   lambda x: want(x).astype(x.dtype), writes=0))
    add(Sample("Tensor.__and__", lambda a, b: a & b, (rand((3,), B), rand((2, 3), B, seed=1)),
               lambda a, b: a & b))
    add(Sample("Tensor.__or__", lambda a, b: a | b, (rand((3,), B), rand((2, 3), B, seed=1)),
               lambda a, b: a | b))


# -- reductions ------------------------------------------------------------------------------
def _reduction_want(name, axis, keepdim):
    def want(x):
        ax = tuple(axis) if isinstance(axis, list) else axis
        ax = None if x.ndim == 0 else ax
        if name == "sum":
            dt = x.dtype if x.dtype.kind == "f" else I64
            return np.add.reduce(f64(x) if dt.kind == "f" else x.astype(I64), axis=ax,
                                 keepdims=keepdim).astype(dt)
        if name == "mean":
            dt = float_of(x.dtype)
            with np.errstate(all="ignore"):
                return (np.add.reduce(f64(x), axis=ax, keepdims=keepdim)
                        / max(1, _count(x.shape, ax)) if _count(x.shape, ax) else
                        np.full(np.add.reduce(f64(x), axis=ax, keepdims=keepdim).shape,
                                np.nan)).astype(dt)
        return np.maximum.reduce(x, axis=ax, keepdims=keepdim) if x.size else \
            np.zeros(np.add.reduce(x, axis=ax, keepdims=keepdim).shape, x.dtype)
    return want


def _reduction_terms(name, axis, keepdim):
    def terms(x):
        ax = tuple(axis) if isinstance(axis, list) else axis
        ax = None if x.ndim == 0 else ax
        t = np.add.reduce(np.abs(f64(x)), axis=ax, keepdims=keepdim)
        return t / max(1, _count(x.shape, ax)) if name == "mean" else t
    return terms


def build_reductions():
    want_for, terms_for = _reduction_want, _reduction_terms
    cases = [((3, 4), None, False), ((3, 4), 0, False), ((3, 4), -1, True), ((2, 3, 4), [0, 2],
                                                                                False),
             ((2, 3, 4), (-1, -2), True), ((), None, False), ((), 0, True), ((1,), 0, False),
             ((0, 3), 1, False), ((0, 3), 0, True), ((0, 3), None, False), ((2, 1, 3), 1, False)]
    for name in ("sum", "mean", "max"):
        for k, (shape, axis, keepdim) in enumerate(cases):
            if name == "max" and 0 in shape and not _reduces_only_nonzero(shape, axis):
                invalid("Tensor.max", lambda t, a=axis: t.max(a), [np.ones(shape)],
                        cc.ShapeError)
                continue
            for dtype in ALL:
                if name == "max" and dtype == B:
                    continue
                want = want_for(name, axis, keepdim)
                exact = name == "max" or (name == "sum" and dtype.kind != "f")
                tol = EXACT if exact else SUM
                for label, x in layouts(shape, dtype, seed=k)[:2 if k % 2 else 4]:
                    api, body = [(f"Tensor.{name}", lambda t, a=axis, kd=keepdim, n=name:
                                  getattr(t, n)(a, keepdim=kd)),
                                 (f"cc.{name}", lambda t, a=axis, kd=keepdim, n=name:
                                  getattr(cc, n)(t, axis=a, keepdim=kd))][(k + len(label)) % 2]
                    add(Sample(api, body, (x,), want, tol, terms=terms_for(name, axis, keepdim),
                               label=label))
            if 0 not in shape:
                x = np.asarray(np.random.default_rng(k).permutation(max(1, int(np.prod(shape))))
                               .reshape(shape) * 0.37 + 0.1)  # distinct: no ties for max
                add(Sample(f"Tensor.{name}", lambda t, a=axis, kd=keepdim, n=name:
                           getattr(t, n)(axis=a, keepdim=kd), (x.astype(F64),),
                           want_for(name, axis, keepdim), SUM,
                           terms=terms_for(name, axis, keepdim), grad=True))
        for dtype in FLOATS:
            s = specials(dtype)
            add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), (s,),
                       want_for(name, None, False), SUM, terms=terms_for(name, None, False),
                       label="|special"))
        invalid(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(axis=2), [np.ones((2, 3))],
                cc.ShapeError)
        invalid(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(axis=-3), [np.ones((2, 3))],
                cc.ShapeError)
        invalid(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(axis=[0, 0]),
                [np.ones((2, 3))], cc.ShapeError)
    # Paddle's sum(x, axis, dtype, keepdim): the result's dtype
    for src, dst in [(I32, I32), (I32, F64), (B, I32), (F32, F64), (F64, F32), (I64, F32)]:
        x = rand((3, 4), src, seed=4)
        add(Sample("Tensor.sum", lambda t, d=dst: t.sum(1, d), (x,),
                   lambda a, d=dst: np.add.reduce(a.astype(d), axis=1, dtype=d), SUM,
                   terms=lambda a: np.abs(f64(a)).sum(axis=1), label="|dtype"))
        add(Sample("cc.sum", lambda t, d=dst: cc.sum(t, axis=[0, 1], dtype=d, keepdim=True),
                   (x,), lambda a, d=dst: np.add.reduce(a.astype(d), axis=(0, 1), keepdims=True,
                                                        dtype=d), SUM,
                   terms=lambda a: np.abs(f64(a)).sum(keepdims=True), label="|dtype"))
    invalid("Tensor.sum", lambda t: t.sum(0, True), [np.ones((2, 3))], cc.TraceError)
    invalid("Tensor.sum", lambda t: t.sum(dtype="complex64"), [np.ones((2, 3))], cc.TraceError)
    # ties share the gradient equally (PyTorch's amax; conventions table)
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    add(Sample("Tensor.max", lambda t: t.max(axis=1), (x,), lambda t: t.max(axis=1),
               grad=True, grad_want=lambda t, w: np.array([[0, .5, .5], [1 / 3] * 3]) * w[:, None],
               label="|ties"))


def _count(shape, axis):
    if axis is None:
        return int(np.prod(shape))
    axes = (axis,) if isinstance(axis, int) else axis
    return int(np.prod([shape[a] for a in axes])) if shape else 1


def _reduces_only_nonzero(shape, axis):
    if axis is None:
        return 0 not in shape
    axes = (axis,) if isinstance(axis, int) else axis
    return all(shape[a] != 0 for a in axes)


# -- addmm (the gemm op) ----------------------------------------------------------------------
def build_addmm():
    def want(c, a, b, beta=1.0, alpha=1.0):
        dt = result_dtype(c.dtype, result_dtype(a.dtype, b.dtype))
        return (beta * f64(c) + alpha * (f64(a) @ f64(b))).astype(dt)

    def terms(c, a, b, beta=1.0, alpha=1.0):
        return abs(beta) * np.abs(f64(c)) + abs(alpha) * (np.abs(f64(a)) @ np.abs(f64(b)))

    for k, dtype in enumerate((F32, F64)):
        args = (rand((3, 4), dtype, seed=k), rand((3, 5), dtype, seed=k + 1),
                rand((5, 4), dtype, seed=k + 2))
        add(Sample("Tensor.addmm", lambda c, x, y: c.addmm(x, y, beta=0.5, alpha=-2.0), args,
                   lambda c, a, b: want(c, a, b, 0.5, -2.0), SUM,
                   terms=lambda c, a, b: terms(c, a, b, 0.5, -2.0), grad=dtype == F64))
        add(Sample("cc.addmm", lambda c, x, y: cc.addmm(c, x, y), args, want, SUM, terms=terms,
                   grad=dtype == F64))
    add(Sample("Tensor.addmm", lambda c, x, y: c.addmm(x, y, alpha=3.0),
               (rand((4,), F64), rand((2, 3), F64), rand((3, 4), F64)),
               lambda c, a, b: want(np.broadcast_to(c, (2, 4)), a, b, 1.0, 3.0), SUM,
               terms=lambda c, a, b: terms(np.broadcast_to(c, (2, 4)), a, b, 1.0, 3.0),
               grad=True, label="|broadcast"))
    INVALID.append(("Tensor.addmm", lambda c, x, y: c.addmm(x, y),
                    (rand((2, 2), F32), rand((2, 3), F32), rand((2, 2), F32)), cc.ShapeError))


# -- matmul ------------------------------------------------------------------------------------
def build_matmul():
    def want(a, b, ta=False, tb=False):
        dt = result_dtype(a.dtype, b.dtype)
        x, y = a.astype(dt), b.astype(dt)
        if ta:
            x = np.swapaxes(x, -1, -2)
        if tb:
            y = np.swapaxes(y, -1, -2)
        if dt.kind == "f":
            return np.einsum("...ij,...jk->...ik", *_lift(f64(x), f64(y)))[_squeeze(a, b)] \
                .astype(dt)
        return np.einsum("...ij,...jk->...ik", *_lift(x, y))[_squeeze(a, b)].astype(dt)

    def terms(a, b, ta=False, tb=False):
        x, y = np.abs(f64(a)), np.abs(f64(b))
        if ta:
            x = np.swapaxes(x, -1, -2)
        if tb:
            y = np.swapaxes(y, -1, -2)
        return np.einsum("...ij,...jk->...ik", *_lift(x, y))[_squeeze(a, b)]
    shapes = [((2, 3), (3, 4)), ((2, 2, 3), (3, 4)), ((1, 2, 3), (4, 3, 2)), ((3,), (3, 2)),
              ((2, 3), (3,)), ((3,), (3,)), ((2, 0), (0, 3)), ((0, 3), (3, 2)), ((1, 1), (1, 1)),
              ((2, 1, 2, 3), (3, 3, 1))]
    for k, (sa, sb) in enumerate(shapes):
        for dtype in NUMERIC:
            a, b = rand(sa, dtype, seed=k), rand(sb, dtype, seed=k + 50)
            api, body = [("Tensor.matmul", lambda x, y: x.matmul(y)),
                         ("cc.matmul", lambda x, y: cc.matmul(x, y)),
                         ("Tensor.__matmul__", lambda x, y: x @ y)][k % 3]
            add(Sample(api, body, (a, b), want, SUM, terms=terms))
        if 0 not in sa + sb:
            add(Sample("Tensor.matmul", lambda x, y: x.matmul(y),
                       (rand(sa, F64, seed=k), rand(sb, F64, seed=k + 9)), want, SUM,
                       terms=terms, grad=True))
    for (la, a), (lb, b) in zip(layouts((3, 4), F32), layouts((4, 2), F32, seed=3)):
        add(Sample("Tensor.matmul", lambda x, y: x @ y, (a, b), want, SUM, terms=terms,
                   label=la + lb))
    add(Sample("Tensor.matmul", lambda x, y: x.matmul(y, transpose_x=True, transpose_y=True),
               (rand((3, 2), F64), rand((4, 3), F64)), lambda a, b: want(a, b, True, True), SUM,
               terms=lambda a, b: terms(a, b, True, True), grad=True, label="|flags"))
    add(Sample("Tensor.matmul", lambda x, y: x @ y, (rand((2, 3), F32), rand((3, 2), I32)),
               want, SUM, terms=terms, label="|mixed"))
    add(Sample("Tensor.__rmatmul__", lambda y: np.ones((2, 3)) @ y, (rand((3, 2), F64),),
               lambda y: want(np.ones((2, 3)), y), SUM,
               terms=lambda y: terms(np.ones((2, 3)), y)))
    add(Sample("Tensor.matmul", lambda x, y: x.matmul(y), (rand((0, 0), F64), rand((0, 0), F64)),
               want, SUM, terms=terms, grad=True, label="|empty-grad"))
    for sa, sb in [((2, 0), (0, 3)), ((0,), (0, 3)), ((0, 0), (0,)), ((0,), (0,)),
                   ((3, 0), (2, 0, 4))]:
        add(Sample("Tensor.matmul", lambda x, y: x.matmul(y), (rand(sa, F64), rand(sb, F64)),
                   want, SUM, terms=terms, grad=True, label="|empty-grad"))
    invalid("Tensor.matmul", lambda x, y: x @ y, [np.ones((2, 3)), np.ones((2, 3))],
            cc.ShapeError)
    invalid("Tensor.matmul", lambda x, y: x @ y, [np.ones(()), np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.matmul", lambda x, y: x @ y, [np.ones((2, 2, 3)), np.ones((3, 3, 2))],
            cc.ShapeError)


def _lift(x, y):
    return (x[None, :] if x.ndim == 1 else x), (y[:, None] if y.ndim == 1 else y)


def _squeeze(a, b):
    """Index dropping the axes that lifting rank-1 operands added."""
    if a.ndim == 1 and b.ndim == 1:
        return (Ellipsis, 0, 0)
    if a.ndim == 1:
        return (Ellipsis, 0, slice(None))
    if b.ndim == 1:
        return (Ellipsis, 0)
    return (Ellipsis,)


# -- views, shapes, indexing -------------------------------------------------------------------
def build_views():
    def same(x):
        return x

    # reshape: Paddle's 0 copies the input dimension, one -1 is inferred
    for shape, target, result in [((2, 3), [3, 2], (3, 2)), ((2, 3), [-1], (6,)),
                                  ((2, 3), [0, -1], (2, 3)),
                                  ((2, 3, 4), [0, 0, 2, 2], (2, 3, 2, 2)),
                                  ((5, 0), [-1, 3], (0, 3)), ((5, 0), [0, 0], (5, 0)),
                                  ((5, 0), [2, 1, 0, 3, 1], (2, 1, 0, 3, 1)), ((), [1], (1,)),
                                  ((1,), [], ()), ((4,), [2, -1], (2, 2)), ((0,), [0], (0,))]:
        for dtype in (F32, I64, B):
            x = rand(shape, dtype)
            add(Sample("Tensor.reshape", lambda t, s=target: t.reshape(s), (x,),
                       lambda a, r=result: a.reshape(r)))
        add(Sample("cc.reshape", lambda t, s=target: cc.reshape(t, s), (rand(shape, F64),),
                   lambda a, r=result: a.reshape(r), grad=True))
    for label, x in layouts((3, 4), F32):
        add(Sample("Tensor.reshape", lambda t: t.reshape([4, 3]), (x,),
                   lambda a: a.reshape(4, 3), label=label))
        add(Sample("Tensor.view", lambda t: t.view([12]), (x,), lambda a: a.reshape(12),
                   label=label))
        add(Sample("Tensor.reshape_", lambda t: t.reshape_([2, 6]), (x,),
                   lambda a: a.reshape(2, 6), returns=0, label=label))
    add(Sample("cc.reshape_", lambda t: cc.reshape_(t, [-1]), (rand((2, 0), F32),),
               lambda a: a.reshape(-1), returns=0))
    # a transposed tensor's reshape is a copy; writing through it leaves the base alone
    add(Sample("Tensor.reshape", lambda t: (t.t().reshape([-1]).zero_(), t)[1] * 1.0,
               (rand((2, 3), F64),), lambda a: a, grad=True, label="|copy"))
    invalid("Tensor.reshape", lambda t: t.reshape([4, 2]), [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.reshape", lambda t: t.reshape([-1, -1]), [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.reshape", lambda t: t.reshape([-2, -3]), [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.reshape", lambda t: t.reshape([0, -1]), [np.ones((0, 3))], cc.ShapeError)

    # flatten (issue 18 item 1: a zero-size dimension inside the flattened range)
    for shape, start, stop in [((2, 3, 4), 0, -1), ((2, 3, 4), 1, 2), ((2, 3, 4), -2, -1),
                               ((7, 4, 0, 1, 3, 5), 1, 3), ((), 0, -1), ((3,), 0, 0),
                               ((2, 0), 0, 1)]:
        def want(a, start=start, stop=stop):
            if a.ndim == 0:
                return a.reshape(1)
            s, e = start % a.ndim, stop % a.ndim
            return a.reshape(a.shape[:s] + (int(np.prod(a.shape[s:e + 1])),) + a.shape[e + 1:])
        for dtype in (F64, I32, B):
            add(Sample("Tensor.flatten", lambda t, a=start, b=stop: t.flatten(a, b),
                       (rand(shape, dtype),), want))
        add(Sample("cc.flatten", lambda t, a=start, b=stop: cc.flatten(t, a, b),
                   (rand(shape, F64),), want, grad=True))
        add(Sample("Tensor.flatten_", lambda t, a=start, b=stop: t.flatten_(a, b),
                   (rand(shape, F32),), want, returns=0))
    add(Sample("cc.flatten_", lambda t: cc.flatten_(t), (rand((2, 2), F32),),
               lambda a: a.reshape(-1), returns=0))
    invalid("Tensor.flatten", lambda t: t.flatten(2, 1), [np.ones((2, 3, 4))], cc.ShapeError)
    invalid("Tensor.flatten", lambda t: t.flatten(0, 5), [np.ones((2, 3, 4))], cc.ShapeError)

    # squeeze / unsqueeze (issue 18 item 2: squeeze(0) of a 0-d tensor)
    for shape, axis in [((1, 3, 1), None), ((1, 3, 1), 0), ((1, 3, 1), -1), ((1, 3, 1), [0, 2]),
                        ((1, 3, 1), 1), ((), 0), ((), None), ((), -1), ((0, 1), 1), ((1,), 0)]:
        def want(a, axis=axis):
            if a.ndim == 0:
                return a
            axes = range(a.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
            axes = tuple(ax % a.ndim for ax in axes if a.shape[ax] == 1)
            return a.squeeze(axes)
        add(Sample("Tensor.squeeze", lambda t, a=axis: t.squeeze(a), (rand(shape, F32),), want))
        add(Sample("cc.squeeze", lambda t, a=axis: cc.squeeze(t, a), (rand(shape, F64),), want,
                   grad=True))
        add(Sample("Tensor.squeeze_", lambda t, a=axis: t.squeeze_(a), (rand(shape, I32),),
                   want, returns=0))
    add(Sample("cc.squeeze_", lambda t: cc.squeeze_(t, 0), (rand((), B),), lambda a: a,
               returns=0))
    invalid("Tensor.squeeze", lambda t: t.squeeze(3), [np.ones((1, 2))], cc.ShapeError)
    invalid("Tensor.squeeze", lambda t: t.squeeze(1), [np.ones(())], cc.ShapeError)
    for shape, axis in [((3,), 0), ((3,), -1), ((2, 3), [0, 3]), ((), 0), ((), -1),
                        ((0, 2), 1)]:
        def want(a, axis=axis):
            axes = [axis] if isinstance(axis, int) else axis
            return np.expand_dims(a, tuple(axes))
        add(Sample("Tensor.unsqueeze", lambda t, a=axis: t.unsqueeze(a), (rand(shape, I64),),
                   want))
        add(Sample("cc.unsqueeze", lambda t, a=axis: cc.unsqueeze(t, a), (rand(shape, F64),),
                   want, grad=True))
        add(Sample("Tensor.unsqueeze_", lambda t, a=axis: t.unsqueeze_(a), (rand(shape, F32),),
                   want, returns=0))
    add(Sample("cc.unsqueeze_", lambda t: cc.unsqueeze_(t, 0), (rand((2,), F32),),
               lambda a: a[None], returns=0))
    invalid("Tensor.unsqueeze", lambda t: t.unsqueeze(3), [np.ones((2,))], cc.ShapeError)

    # transpose, t, T
    for shape, perm in [((2, 3), [1, 0]), ((2, 3, 4), [2, 0, 1]), ((2, 3, 4), [-1, 0, -2]),
                        ((), []), ((3,), [0]), ((0, 2, 1), [1, 2, 0])]:
        def want(a, perm=perm):
            return np.transpose(a, [p % max(a.ndim, 1) for p in perm]) if a.ndim else a
        for dtype in (F32, I32, B):
            add(Sample("Tensor.transpose", lambda t, p=perm: t.transpose(p),
                       (rand(shape, dtype),), want))
        add(Sample("cc.transpose", lambda t, p=perm: cc.transpose(t, p), (rand(shape, F64),),
                   want, grad=True))
        add(Sample("Tensor.transpose_", lambda t, p=perm: t.transpose_(p), (rand(shape, F32),),
                   want, returns=0))
    add(Sample("cc.transpose_", lambda t: cc.transpose_(t, [1, 0]), (rand((2, 3), F32),),
               lambda a: a.T, returns=0))
    for shape in [(2, 3), (3,), (), (2, 3, 4)]:
        add(Sample("Tensor.t_", lambda t: t.t_(), (rand(shape, F32),),
                   lambda a: np.swapaxes(a, -1, -2) if a.ndim >= 2 else a, returns=0))
    add(Sample("cc.t_", lambda t: cc.t_(t), (rand((2, 3), I64),), lambda a: a.T, returns=0))
    invalid("Tensor.transpose", lambda t: t.transpose([0, 0]), [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.transpose", lambda t: t.transpose([0]), [np.ones((2, 3))], cc.ShapeError)
    for shape in [(2, 3), (3,), (), (2, 3, 4), (0, 2)]:
        add(Sample("Tensor.t", lambda t: t.t(), (rand(shape, F64),),
                   lambda a: np.swapaxes(a, -1, -2) if a.ndim >= 2 else a, grad=True))
        add(Sample("cc.t", lambda t: cc.t(t), (rand(shape, I32),),
                   lambda a: np.swapaxes(a, -1, -2) if a.ndim >= 2 else a))
        add(Sample("Tensor.T", lambda t: t.T, (rand(shape, F64),), lambda a: a.T, grad=True))
    # numel: a 0-d int64 tensor (Paddle)
    for shape in [(2, 3), (), (0, 4)]:
        add(Sample("Tensor.numel", lambda t: t.numel(), (rand(shape, F32),),
                   lambda a: np.array(a.size, I64)))
        add(Sample("cc.numel", lambda t: cc.numel(t) * 2, (rand(shape, B),),
                   lambda a: np.array(2 * a.size, I64)))

    # expand / broadcast_to
    for src, shape, result in [((1, 3), [4, 3], (4, 3)), ((3,), [2, 3], (2, 3)),
                               ((2, 1), [2, -1], (2, 1)), ((1,), [0], (0,)), ((), [2, 2], (2, 2)),
                               ((1, 3), [2, 4, -1], (2, 4, 3))]:
        for dtype in (F32, I64, B):
            add(Sample("Tensor.expand", lambda t, s=shape: t.expand(s), (rand(src, dtype),),
                       lambda a, r=result: np.broadcast_to(a, r).copy()))
        add(Sample("cc.expand", lambda t, s=shape: cc.expand(t, s), (rand(src, F64),),
                   lambda a, r=result: np.broadcast_to(a, r).copy(), grad=True))
        if -1 not in shape:
            add(Sample("Tensor.broadcast_to", lambda t, s=shape: t.broadcast_to(s),
                       (rand(src, F64),), lambda a, r=result: np.broadcast_to(a, r).copy(),
                       grad=True))
            add(Sample("cc.broadcast_to", lambda t, s=shape: cc.broadcast_to(t, s),
                       (rand(src, I32),), lambda a, r=result: np.broadcast_to(a, r).copy()))
    invalid("Tensor.expand", lambda t: t.expand([2, 2]), [np.ones(3)], cc.ShapeError)
    invalid("Tensor.expand", lambda t: t.expand([3, 2]).add_(1.0), [np.ones((1, 2))],
            cc.InplaceError)
    invalid("Tensor.broadcast_to", lambda t: t.broadcast_to([2]), [np.ones(3)], cc.ShapeError)

    # detach, contiguous, to_tensor of a tensor
    for dtype in ALL:
        add(Sample("Tensor.detach", lambda t: t.detach(), (rand((2, 3), dtype),), same))
        add(Sample("cc.detach", lambda t: cc.detach(t), (rand((), dtype),), same))
        add(Sample("Tensor.contiguous", lambda t: t.t().contiguous(), (rand((2, 3), dtype),),
                   lambda a: a.T.copy()))
        add(Sample("cc.to_tensor", lambda t: cc.to_tensor(t), (rand((0, 2), dtype),), same))
    add(Sample("Tensor.detach_", lambda t: t.detach_(), (rand((3,), F32),), same, returns=0))
    add(Sample("cc.detach_", lambda t: cc.detach_(t), (rand((3,), F32),), same, returns=0))
    add(Sample("Tensor.detach", lambda t: t * 2.0 + t.detach(), (rand((3,), F64),),
               lambda a: 3 * a, grad=True, grad_want=lambda a, w: 2 * w))
    add(Sample("Tensor.contiguous", lambda t: t.t().contiguous(), (rand((2, 3), F64),),
               lambda a: a.T.copy(), grad=True))


class _Index:
    def __getitem__(self, idx):
        return idx


IDX = _Index()
INDICES = [IDX[0], IDX[-1], IDX[1:], IDX[:, 1], IDX[1, 2, 3], IDX[::-1], IDX[:, ::-2],
           IDX[..., ::-1], IDX[:, 1:3, ::2], IDX[None], IDX[:, None, 0], IDX[..., None],
           IDX[0, ..., 1], IDX[-2:, -3:-1, -1::-3], IDX[5:], IDX[:, 10:20], IDX[1:2, 0:3:5],
           IDX[...], IDX[:]]


def build_indexing():
    for k, idx in enumerate(INDICES):
        dtype = ALL[k % len(ALL)]
        x = rand((3, 4, 5), dtype, seed=k)
        add(Sample("Tensor.__getitem__", lambda t, i=idx: t[i], (x,),
                   lambda a, i=idx: np.asarray(a[i]).copy()))
        add(Sample("Tensor.__getitem__", lambda t, i=idx: t[i], (rand((3, 4, 5), F64, seed=k),),
                   lambda a, i=idx: np.asarray(a[i]).copy(), grad=True))

        def set_want(a, v, i=idx):
            out = a.copy()
            out[i] = v
            return out
        v = rand(np.asarray(x[idx]).shape, dtype, seed=k + 1)
        add(Sample("Tensor.__setitem__", lambda t, u, i=idx: _setitem(t, i, u), (x.copy(), v),
                   set_want, writes=0))
    x = rand((3, 4), F64)
    add(Sample("Tensor.__setitem__", lambda t, u: _setitem(t * 1.0, (slice(None), 1), u),
               (x, rand((3,), F64, seed=2)), lambda a, u: _set(a, (slice(None), 1), u),
               grad=True))
    add(Sample("Tensor.__setitem__", lambda t: _setitem(t, (0,), 2.5), (rand((2, 3), I32),),
               lambda a: _set(a, (0,), 2), writes=0, label="|cast"))
    add(Sample("Tensor.__setitem__", lambda t: _setitem(t, (slice(0, 2),), t[1:3]),
               (rand((4, 2), F32),), lambda a: _set(a, (slice(0, 2),), a[1:3].copy()), writes=0,
               label="|overlap"))
    add(Sample("Tensor.__iter__", lambda t: tuple(r.sum() for r in t), (rand((3, 2), F64),),
               lambda a: tuple(np.asarray(r.sum()) for r in a)))
    add(Sample("Tensor.__len__", lambda t: t * len(t), (rand((3, 2), I32),), lambda a: a * 3))
    invalid("Tensor.__len__", lambda t: len(t), [np.ones(())], cc.TraceError)
    # a traced value has no data: converting it, or branching on it, is a trace-time error
    invalid("Tensor.numpy", lambda t: t.numpy(), [np.ones(2)], cc.TraceError)
    invalid("Tensor.item", lambda t: t.sum().item(), [np.ones(2)], cc.TraceError)
    invalid("Tensor.tolist", lambda t: t.tolist(), [np.ones(2)], cc.TraceError)
    invalid("Tensor.__bool__", lambda t: t * 2 if t.sum() > 0 else t, [np.ones(2)],
            cc.TraceError)
    invalid("Tensor.__float__", lambda t: float(t.sum()), [np.ones(2)], cc.TraceError)
    invalid("Tensor.__int__", lambda t: int(t.sum()), [np.ones(2)], cc.TraceError)
    invalid("Tensor.__index__", lambda t: [1, 2][t.sum()], [np.ones(2, np.int64)],
            cc.TraceError)
    invalid("Tensor.__getitem__", lambda t: t[0, 0, 0], [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.__getitem__", lambda t: t[..., ...], [np.ones((2, 3))], cc.TraceError)
    invalid("Tensor.__getitem__", lambda t: t[t], [np.ones((2, 3))], cc.TraceError)
    invalid("Tensor.__setitem__", lambda t, u: t.__setitem__(0, u), [np.ones((2, 3)),
                                                                     np.ones(4)],
            cc.ShapeError)


def _setitem(t, idx, v):
    t[idx] = v
    return t


def _set(a, idx, v):
    out = a.copy()
    out[idx] = v
    return out


# == issue 27 item 4: fills in place (fill_, zero_, x[i] = scalar as one `fill` op) =============
def build_fills_in_place():
    """The `fill` op that fill_/zero_ and a scalar `x[i] = v` now trace: every dtype, the
    caller's array non-contiguous (transposed, negative stride, a step slice), zero-size and
    0-d targets, a float written into an intermediate's region with its gradient."""
    for dtype in ALL:
        v = True if dtype == B else 2
        nc = np.ascontiguousarray(rand((4, 3), dtype).T)[::-1].T      # negative stride
        add(Sample("Tensor.fill_", lambda t, v=v: t.fill_(v), (nc,),
                   lambda a, v=v: np.full_like(a, v), writes=0, label="|nc"))
        add(Sample("Tensor.zero_", lambda t: (t[:, ::2].zero_(), t)[1], (rand((3, 5), dtype),),
                   lambda a: _set(a, (slice(None), slice(None, None, 2)), 0), writes=0,
                   label="|step"))
        add(Sample("Tensor.__setitem__", lambda t, v=v: (_setitem(t.T, (0,), v), t)[1],
                   (rand((3, 2), dtype),), lambda a, v=v: _set(a, (slice(None), 0), v),
                   writes=0, label="|T"))
        add(Sample("Tensor.__setitem__", lambda t, v=v: _setitem(t, (), v), (rand((), dtype),),
                   lambda a, v=v: np.full_like(a, v), writes=0, label="|0d"))
        add(Sample("Tensor.__setitem__", lambda t, v=v: _setitem(t, (slice(1, None),), v),
                   (rand((0, 2), dtype),), lambda a: a.copy(), writes=0, label="|empty"))
    for dtype in FLOATS:
        add(Sample("Tensor.__setitem__", lambda t: _setitem(t, (slice(None),), -0.0),
                   (np.array([np.nan, np.inf, 1.0], dtype),),
                   lambda a: np.full_like(a, -0.0), writes=0, label="|nan"))
    add(Sample("Tensor.__setitem__", lambda t: _setitem(t * 1.0, (slice(None), 1), 0.5),
               (rand((3, 4), F64),), lambda a: _set(a, (slice(None), 1), 0.5), grad=True,
               label="|grad"))
# == end of issue 27 item 4 ========================================================================


def build_fill_concat():
    for dtype in ALL:
        add(Sample("Tensor.zero_", lambda t: t.zero_(), (rand((2, 3), dtype),),
                   lambda a: np.zeros_like(a), writes=0))
        add(Sample("cc.zero_", lambda t: cc.zero_(t), (rand((), dtype),),
                   lambda a: np.zeros_like(a), writes=0))
        add(Sample("Tensor.fill_", lambda t: t.fill_(1), (rand((0, 3), dtype),),
                   lambda a: np.ones_like(a), writes=0))
        add(Sample("cc.fill_", lambda t: cc.fill_(t, True), (rand((4,), dtype),),
                   lambda a: np.ones_like(a), writes=0))
    for k, (shapes, axis) in enumerate([([(2, 3), (2, 3), (2, 3)], 0), ([(2, 3), (2, 1)], 1),
                                        ([(2, 3), (2, 0)], -1), ([(0, 3), (2, 3)], 0),
                                        ([(3,)], 0), ([(1, 2, 2), (1, 2, 2)], -2)]):
        for dtype in ALL:
            arrs = tuple(rand(s, dtype, seed=k + i) for i, s in enumerate(shapes))
            add(Sample("cc.concat", lambda *ts, a=axis: cc.concat(list(ts), axis=a), arrs,
                       lambda *xs, a=axis: np.concatenate(xs, axis=a)))
        arrs = tuple(rand(s, F64, seed=k + i) for i, s in enumerate(shapes))
        add(Sample("cc.concat", lambda *ts, a=axis: cc.concat(list(ts), axis=a), arrs,
                   lambda *xs, a=axis: np.concatenate(xs, axis=a), grad=True))
    add(Sample("cc.concat", lambda a, b: cc.concat([a, b]), (rand((1, 2), I32), rand((2, 2), F32)),
               lambda a, b: np.concatenate([a.astype(F32), b]), label="|mixed"))
    invalid("cc.concat", lambda a, b: cc.concat([a, b], axis=1), [np.ones((2, 3)),
                                                                  np.ones((3, 3))],
            cc.ShapeError)
    invalid("cc.concat", lambda a: cc.concat([a, a], axis=2), [np.ones((2, 3))], cc.ShapeError)
    invalid("cc.concat", lambda: cc.concat([]), [], cc.TraceError)


# -- creation ----------------------------------------------------------------------------------
def build_creation():
    for dtype in [None, "float32", "float64", "int32", "int64", "bool"]:
        d = F32 if dtype is None else np.dtype(dtype)
        add(Sample("cc.zeros", lambda dt=dtype: cc.zeros([2, 3], dt), (),
                   lambda d=d: np.zeros((2, 3), d)))
        add(Sample("cc.ones", lambda dt=dtype: cc.ones(3, dtype=dt), (),
                   lambda d=d: np.ones(3, d)))
        add(Sample("cc.full", lambda dt=dtype: cc.full([], 1, dt), (), lambda d=d: np.ones((), d)))
        add(Sample("cc.zeros", lambda dt=dtype: cc.zeros([0, 2], dt), (),
                   lambda d=d: np.zeros((0, 2), d)))
    add(Sample("cc.full", lambda: cc.full([2], 7.5), (), lambda: np.full(2, 7.5, F32)))
    add(Sample("cc.full", lambda: cc.full([2], True), (), lambda: np.full(2, True)))
    add(Sample("cc.full", lambda: cc.full([2], -np.inf, "float64"), (),
               lambda: np.full(2, -np.inf)))
    for dtype in ALL:
        x = rand((2, 3), dtype)
        add(Sample("cc.zeros_like", lambda t: cc.zeros_like(t), (x,), np.zeros_like))
        add(Sample("cc.ones_like", lambda t: cc.ones_like(t, "float64"), (x,),
                   lambda a: np.ones(a.shape)))
        add(Sample("cc.full_like", lambda t: cc.full_like(t, 1), (x,), lambda a: np.ones_like(a)))
    # arange: element i is start + i * step in float64, cast to the dtype (conventions table)
    for args, kw, want in [
        ((5,), {}, np.arange(5)), ((2, 9, 3), {}, np.arange(2, 9, 3)),
        ((10, 0, -3), {}, np.arange(10, 0, -3)), ((5, 5), {}, np.arange(0)),
        ((0.0, 1.0, 0.25), {}, np.array([0, .25, .5, .75], F32)),
        ((1, 4), {"dtype": "float64"}, np.arange(1.0, 4.0)),
        ((0.5, 3.6), {"dtype": "int32"}, np.array([0, 1, 2, 3], I32)),
        ((0.5, 3.6, 0.5), {"dtype": "int64"}, np.array([0, 1, 1, 2, 2, 3, 3], I64)),
        ((-0.5, 2.0, 1.0), {"dtype": "int32"}, np.array([0, 0, 1], I32)),
        ((0, 1, 0.1), {"dtype": "float32"}, (np.arange(10) * 0.1).astype(F32)),
        ((3, -2, -1), {"dtype": "float64"}, np.array([3., 2, 1, 0, -1])),
    ]:
        add(Sample("cc.arange", lambda a=args, k=kw: cc.arange(*a, **k), (),
                   lambda w=want: w))
    invalid("cc.arange", lambda: cc.arange(0, 5, 0), [], cc.TraceError)
    invalid("cc.zeros", lambda: cc.zeros([2], "uint16"), [], cc.TraceError)
    for data, dtype, want in [([1.0, 2.5], None, np.array([1.0, 2.5], F32)),
                              ([[1, 2], [3, 4]], None, np.array([[1, 2], [3, 4]])),
                              (2.0, None, np.array(2.0, F32)), (True, None, np.array(True)),
                              ([1, 2], "float64", np.array([1.0, 2.0])),
                              (np.arange(3.0), "int32", np.arange(3, dtype=I32)),
                              (np.zeros((0, 2), I32), None, np.zeros((0, 2), I32))]:
        add(Sample("cc.to_tensor", lambda d=data, dt=dtype: cc.to_tensor(d, dtype=dt), (),
                   lambda w=want: w))
    invalid("cc.to_tensor", lambda: cc.to_tensor(["a"]), [], cc.TraceError)


# -- compiler.nn.functional --------------------------------------------------------------------
def _softmax(x, axis):
    if x.size == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    if x.size == 0:
        return x.copy()
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def _in(dtype_fn):
    def wrap(x, *rest):
        return dtype_fn(f64(x), *rest).astype(x.dtype)
    return wrap


def build_functional():
    for name, ref in (("softmax", _softmax), ("log_softmax", _log_softmax)):
        for shape, axis in [((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1), ((5, 0, 0), -1),
                            ((0, 3), -1), ((3, 0), 0), ((4,), 0), ((), 0), ((1, 1), -1)]:
            for dtype in FLOATS:
                for label, x in layouts(shape, dtype, -4, 4)[:2]:
                    add(Sample(f"F.{name}", lambda t, a=axis, n=name: getattr(F, n)(t, axis=a),
                               (x,), lambda v, a=axis, r=ref: _in(r)(v, a), CLOSE, label=label))
            add(Sample(f"F.{name}", lambda t, a=axis, n=name: getattr(F, n)(t, a),
                       (rand(shape, F64, -2, 2),), lambda v, a=axis, r=ref: r(v, a), CLOSE,
                       grad=True))
        add(Sample(f"F.{name}", lambda t, n=name: getattr(F, n)(t, dtype="float64"),
                   (rand((2, 3), I32),), lambda v, r=ref: r(f64(v), -1), CLOSE, label="|dtype"))
        x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0], [0, -np.inf, 1]])
        add(Sample(f"F.{name}", lambda t, n=name: getattr(F, n)(t), (x,),
                   lambda v, r=ref: errstate(r)(v, -1), CLOSE, label="|extreme"))
        invalid(f"F.{name}", lambda t, n=name: getattr(F, n)(t, axis=2), [np.ones((2, 3))],
                cc.ShapeError)
        invalid(f"F.{name}", lambda t, n=name: getattr(F, n)(t), [np.ones(3, np.int32)],
                cc.ShapeError)

    def gelu(x, approximate=False):
        if approximate:
            return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1 + _erf(x / np.sqrt(2)))
    for approx in (False, True):
        for dtype in FLOATS:
            for shape in [(3, 4), (), (0, 2)]:
                add(Sample("F.gelu", lambda t, a=approx: F.gelu(t, approximate=a),
                           (rand(shape, dtype, -4, 4),), lambda v, a=approx: _in(gelu)(v, a),
                           CLOSE))
        add(Sample("F.gelu", lambda t, a=approx: F.gelu(t, a), (rand((2, 3), F64),),
                   lambda v, a=approx: gelu(v, a), CLOSE, grad=True))

    # layer_norm, zero rows included (issue 18 item 4)
    for shape, nshape, affine in [((2, 3, 4), [4], True), ((2, 3, 4), [3, 4], False),
                                  ((0, 4), [4], True), ((3, 4), 4, True), ((5,), [5], False)]:
        ns = [nshape] if isinstance(nshape, int) else nshape

        def want(x, w=None, b=None, ns=ns):
            axes = tuple(range(x.ndim - len(ns), x.ndim))
            v = f64(x)
            mu = v.mean(axis=axes, keepdims=True) if v.size else v.sum(axis=axes, keepdims=True)
            var = ((v - mu) ** 2).mean(axis=axes, keepdims=True) if v.size else mu
            out = (v - mu) / np.sqrt(var + 1e-5)
            if w is not None:
                out = out * w + b
            return out.astype(x.dtype)
        for dtype in FLOATS:
            args = (rand(shape, dtype, seed=1) * 2 + 1,)
            if affine:
                args += (rand(ns, dtype, seed=2), rand(ns, dtype, seed=3))
            add(Sample("F.layer_norm", lambda x, *wb, n=nshape: F.layer_norm(x, n, *wb), args,
                       want, CLOSE))
        args = (rand(shape, F64, seed=1) * 2 + 1,)
        if affine:
            args += (rand(ns, F64, seed=2), rand(ns, F64, seed=3))
        add(Sample("F.layer_norm", lambda x, *wb, n=nshape: F.layer_norm(x, n, *wb), args, want,
                   CLOSE, grad=True))
    invalid("F.layer_norm", lambda x: F.layer_norm(x, [3]), [np.ones((2, 4))], cc.ShapeError)
    invalid("F.layer_norm", lambda x, w: F.layer_norm(x, 4, w), [np.ones((2, 4)), np.ones(3)],
            cc.ShapeError)

    for dtype in FLOATS:
        for xs in [(4,), (2, 4), (3, 2, 4), (0, 4)]:
            x, w, b = rand(xs, dtype, seed=1), rand((4, 5), dtype, seed=2), rand((5,), dtype)
            add(Sample("F.linear", lambda a, ww, bb: F.linear(a, ww, bb), (x, w, b),
                       lambda a, ww, bb: (f64(a) @ ww + bb).astype(a.dtype), SUM,
                       terms=lambda a, ww, bb: np.abs(f64(a)) @ np.abs(ww) + np.abs(bb)))
    add(Sample("F.linear", lambda a, ww: F.linear(a, ww), (rand((2, 4), F64), rand((4, 3), F64)),
               lambda a, ww: a @ ww, SUM, terms=lambda a, ww: np.abs(a) @ np.abs(ww), grad=True))
    invalid("F.linear", lambda a, ww: F.linear(a, ww), [np.ones((2, 4)), np.ones((3, 5))],
            cc.ShapeError)

    for reduction in ("mean", "sum", "none"):
        def mse(a, b, r=reduction):
            sq = (f64(a) - b) ** 2
            return {"mean": sq.mean(), "sum": sq.sum(), "none": sq}[r].astype(a.dtype)
        for dtype in FLOATS:
            add(Sample("F.mse_loss", lambda a, b, r=reduction: F.mse_loss(a, b, reduction=r),
                       (rand((3, 4), dtype, seed=1), rand((4,), dtype, seed=2)), mse, CLOSE))
        add(Sample("F.mse_loss", lambda a, b, r=reduction: F.mse_loss(a, b, r),
                   (rand((3, 4), F64, seed=1), rand((3, 4), F64, seed=2)), mse, CLOSE, grad=True))
    invalid("F.mse_loss", lambda a, b: F.mse_loss(a, b, "avg"), [np.ones(3), np.ones(3)],
            cc.TraceError)

    def ce(x, lab):
        lp = _log_softmax(f64(x), -1)
        return (-lp[np.arange(len(lab)), lab.reshape(-1)]).mean().astype(x.dtype)
    for dtype in FLOATS:
        for lab_dtype in INTS:
            add(Sample("F.cross_entropy", lambda x, y: F.cross_entropy(x, y),
                       (rand((5, 4), dtype), np.array([0, 3, 1, 1, 2], lab_dtype)), ce, CLOSE))
    add(Sample("F.cross_entropy", lambda x, y: F.cross_entropy(x, y),
               (rand((3, 4), F64), np.array([[1], [0], [3]])), ce, CLOSE, grad=True))
    invalid("F.cross_entropy", lambda x, y: F.cross_entropy(x, y),
            [np.ones((3, 4)), np.zeros(2, np.int64)], cc.ShapeError)

    for p in (0.0, 0.3, 1.0):
        def drop(x, p=p):
            if p == 1.0:  # x * 0 (Paddle, torch): -0.0 where x is negative
                return x * np.asarray(0, x.dtype)
            keep = philox_uniform(x.shape, x.dtype, 7, 0) >= np.asarray(p, x.dtype)
            return np.where(keep, x * np.asarray(1 / (1 - p), x.dtype), 0).astype(x.dtype)
        for dtype in FLOATS:
            add(Sample("F.dropout", lambda t, p=p: F.dropout(t, p=p, seed=7),
                       (rand((4, 5), dtype),), drop, ULP))
        add(Sample("F.dropout", lambda t, p=p: F.dropout(t, p, seed=7), (rand((3, 2), F64),),
                   drop, ULP, grad=True))
    add(Sample("F.dropout", lambda t, s: F.dropout(t, 0.5, seed=s),
               (rand((3, 4), F32), np.array(2 ** 40 + 3, np.uint64)),
               lambda x, s: np.where(philox_uniform(x.shape, x.dtype, int(s), 0) >= 0.5,
                                     x * np.float32(2), 0).astype(x.dtype), label="|seed-arg"))
    add(Sample("F.dropout", lambda t: F.dropout(t, 0.5, training=False), (rand((3,), F32),),
               lambda x: x))
    invalid("F.dropout", lambda t: F.dropout(t, 1.5), [np.ones(3)], cc.TraceError)
    build_conv_pool()


def conv2d_loops(x, w, stride, pads, dilation):
    """Direct cross-correlation with explicit loops; pads = (top, bottom, left, right)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    top, bottom, left, right = pads
    xp = np.zeros((n, c, h + top + bottom, wd + left + right))
    xp[:, :, top:top + h, left:left + wd] = x
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            for u in range(kh):
                for v in range(kw):
                    patch = xp[:, :, i * sh + u * dh, j * sw + v * dw]       # [n, c]
                    out[:, :, i, j] += patch @ w[:, :, u, v].T
    return out


def _same_pads(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def build_conv_pool():
    cases = [(1, 0, 1), (1, 1, 1), (2, 0, 1), (2, 1, 2), ((1, 2), (2, 0), 1), (1, [1, 0, 2, 1], 1),
             (1, [[0, 0], [0, 0], [1, 2], [0, 1]], (2, 1)), (2, "SAME", 1), (3, "same", 1),
             ((2, 1), "SAME", 2), (1, "VALID", 1), (2, "valid", (1, 2))]
    for k, (stride, padding, dilation) in enumerate(cases):
        def want(x, w, b=None, stride=stride, padding=padding, dilation=dilation):
            st = (stride, stride) if isinstance(stride, int) else stride
            dl = (dilation, dilation) if isinstance(dilation, int) else dilation
            if isinstance(padding, str):
                if padding.upper() == "SAME":
                    pads = _same_pads(x.shape[2], w.shape[2], st[0]) + \
                        _same_pads(x.shape[3], w.shape[3], st[1])
                    dl = (1, 1)  # Paddle: SAME ignores the dilation
                else:
                    pads = (0, 0, 0, 0)
            elif isinstance(padding, int):
                pads = (padding,) * 4
            elif len(padding) == 2:
                pads = (padding[0], padding[0], padding[1], padding[1])
            elif isinstance(padding[0], list):
                pads = tuple(padding[2]) + tuple(padding[3])
            else:
                pads = tuple(padding)
            out = conv2d_loops(f64(x), f64(w), st, pads, dl)
            if b is not None:
                out = out + f64(b)[None, :, None, None]
            return out.astype(x.dtype)

        def terms(x, w, b=None, want=want):
            return want(np.abs(f64(x)), np.abs(f64(w)), None if b is None else np.abs(b))
        for dtype in FLOATS:
            x, w, b = rand((2, 3, 7, 6), dtype, seed=k), rand((4, 3, 3, 2), dtype, seed=k + 1), \
                rand((4,), dtype, seed=k + 2)
            add(Sample("F.conv2d", lambda t, kk, bb, s=stride, p=padding, d=dilation:
                       F.conv2d(t, kk, bb, stride=s, padding=p, dilation=d), (x, w, b), want,
                       SUM, terms=terms))
        add(Sample("F.conv2d", lambda t, kk, s=stride, p=padding, d=dilation:
                   F.conv2d(t, kk, stride=s, padding=p, dilation=d),
                   (rand((1, 2, 5, 6), F64, seed=k), rand((2, 2, 2, 3), F64, seed=k + 1)), want,
                   SUM, terms=terms, grad=True))
    invalid("F.conv2d", lambda x, w: F.conv2d(x, w, padding="FULL"),
            [np.ones((1, 1, 4, 4)), np.ones((1, 1, 2, 2))], cc.TraceError)
    invalid("F.conv2d", lambda x, w: F.conv2d(x, w), [np.ones((1, 2, 4, 4)),
                                                      np.ones((1, 3, 2, 2))], cc.ShapeError)
    invalid("F.conv2d", lambda x, w: F.conv2d(x, w), [np.ones((1, 1, 2, 2)),
                                                      np.ones((1, 1, 3, 3))], cc.ShapeError)
    invalid("F.conv2d", lambda x, w: F.conv2d(x, w), [np.ones((2, 4, 4)),
                                                      np.ones((1, 1, 3, 3))], cc.ShapeError)
    invalid("F.conv2d", lambda x, w: F.conv2d(x, w, stride=0), [np.ones((1, 1, 4, 4)),
                                                                np.ones((1, 1, 3, 3))],
            cc.ShapeError)
    invalid("F.conv2d", lambda x, w: F.conv2d(x, w, groups=2), [np.ones((1, 2, 4, 4)),
                                                                np.ones((1, 1, 3, 3))],
            cc.TraceError)

    def pool(x, kernel, stride, padding):
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        stride = kernel if stride is None else stride
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        n, c, h, wd = x.shape
        if isinstance(padding, str):
            pads = _same_pads(h, kh, sh) + _same_pads(wd, kw, sw) \
                if padding.upper() == "SAME" else (0, 0, 0, 0)
        elif isinstance(padding, int):
            pads = (padding,) * 4
        elif len(padding) == 2:
            pads = (padding[0], padding[0], padding[1], padding[1])
        else:
            pads = tuple(padding)
        top, bottom, left, right = pads
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        xp = np.full((n, c, h + top + bottom, wd + left + right), low, x.dtype)
        xp[:, :, top:top + h, left:left + wd] = x
        oh, ow = (h + top + bottom - kh) // sh + 1, (wd + left + right - kw) // sw + 1
        out = np.empty((n, c, oh, ow), x.dtype)
        for i in range(oh):
            for j in range(ow):
                out[:, :, i, j] = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw].max(axis=(2, 3))
        return out
    for k, (kernel, stride, padding) in enumerate([(2, None, 0), (2, 1, 0), (3, 2, 1),
                                                   ((2, 3), (1, 2), (1, 1)), (2, 2, (0, 1)),
                                                   (3, 2, "SAME"), ((2, 3), 1, "same"),
                                                   (3, 2, "VALID"), (3, 1, [1, 0, 0, 1])]):
        for dtype in NUMERIC:  # int with padding: issue 18 item 8
            x = rand((2, 3, 6, 7), dtype, -9, -2, seed=k)  # all negative: padding must not win
            add(Sample("F.max_pool2d", lambda t, a=kernel, s=stride, p=padding:
                       F.max_pool2d(t, a, stride=s, padding=p), (x,),
                       lambda v, a=kernel, s=stride, p=padding: pool(v, a, s, p)))
        x = np.random.default_rng(k).permutation(2 * 6 * 7).reshape(1, 2, 6, 7) * 0.1
        add(Sample("F.max_pool2d", lambda t, a=kernel, s=stride, p=padding:
                   F.max_pool2d(t, a, s, p), (x,),
                   lambda v, a=kernel, s=stride, p=padding: pool(v, a, s, p), grad=True))
    invalid("F.max_pool2d", lambda x: F.max_pool2d(x, 5), [np.ones((1, 1, 3, 3))], cc.ShapeError)
    invalid("F.max_pool2d", lambda x: F.max_pool2d(x, 2), [np.ones((3, 3))], cc.ShapeError)
    invalid("F.max_pool2d", lambda x: F.max_pool2d(x, 0), [np.ones((1, 1, 3, 3))], cc.ShapeError)
    invalid("F.max_pool2d", lambda x: F.max_pool2d(x, 2, padding="full"),
            [np.ones((1, 1, 3, 3))], cc.TraceError)
    invalid("F.max_pool2d", lambda x: F.max_pool2d(x, 2, ceil_mode=True),
            [np.ones((1, 1, 3, 3))], cc.TraceError)


# -- misc: the alpha of add/subtract (issue 18 item 6) and ties / kinks -----------------------
def build_alpha():
    for dtype in ALL:
        for name in ("add", "subtract"):
            if dtype == B and name == "subtract":
                continue
            a, b = rand((2, 3), dtype, seed=1), rand((3,), dtype, seed=2)

            def want(x, y, name=name):
                if x.dtype == B:
                    return x | y
                yy = y.astype(x.dtype) * x.dtype.type(2)
                return (x + yy if name == "add" else x - yy).astype(x.dtype)
            add(Sample(f"Tensor.{name}", lambda x, y, n=name: getattr(x, n)(y, alpha=2),
                       (a, b), want, label="|alpha"))
            add(Sample(f"Tensor.{name}_", lambda x, y, n=name: getattr(x, n + "_")(y, alpha=2),
                       (a.copy(), b), want, writes=0, label="|alpha"))
            add(Sample(f"cc.{name}", lambda x, y, n=name: getattr(cc, n)(x, y, alpha=2),
                       (a, b), want, label="|alpha"))
    # A Python int the tensor's dtype can't hold (issue 16): NumPy would overflow mid-run.
    invalid("Tensor.__add__", lambda x: x + 2**40, [np.arange(3, dtype=I32)], cc.TraceError)
    invalid("Tensor.multiply_", lambda x: x.multiply_(-(2**63) - 1), [np.arange(3)],
            cc.TraceError)
    invalid("cc.full", lambda: cc.full([2], 2**31, dtype="int32"), [], cc.TraceError)
    invalid("Tensor.add", lambda x, y: x.add(y, alpha=0.5), [np.arange(3), np.arange(3)],
            cc.TraceError)


def build_ties_and_kinks():
    """Gradients where the function has a tie or a kink: the project's choices (CONVENTIONS)."""
    x = np.array([1.0, 2.0, -1.0, 0.0])
    y = np.array([1.0, 3.0, -1.0, 0.0])
    # maximum/minimum: a tie gives each operand half (PyTorch's rule; CONVENTIONS).
    add(Sample("Tensor.maximum", lambda a, b: a.maximum(b), (x, y), np.maximum, grad=True,
               grad_want=lambda a, b, w: (w * ((a > b) + 0.5 * (a == b)),
                                          w * ((a < b) + 0.5 * (a == b))), label="|ties"))
    add(Sample("Tensor.minimum", lambda a, b: a.minimum(b), (x, y), np.minimum, grad=True,
               grad_want=lambda a, b, w: (w * ((a < b) + 0.5 * (a == b)),
                                          w * ((a > b) + 0.5 * (a == b))), label="|ties"))
    z = np.array([-1.0, 0.0, 2.0])
    add(Sample("Tensor.abs", lambda a: a.abs(), (z,), np.abs, grad=True,
               grad_want=lambda a, w: w * np.sign(a), label="|kink"))
    add(Sample("F.relu", lambda a: F.relu(a), (z,), lambda a: np.maximum(a, 0), grad=True,
               grad_want=lambda a, w: w * (a > 0), label="|kink"))
    base = np.array([0.0, 0.0, 0.0, 2.0])
    ex = np.array([2.0, 0.0, 0.5, 0.0])
    add(Sample("Tensor.pow", lambda a, b: a.pow(b), (base, ex), np.power, ULP, grad=True,
               grad_want=lambda a, b, w: (w * np.array([0.0, 0.0, np.inf, 0.0]),
                                          w * np.array([0.0, 0.0, 0.0, np.log(2.0)])),
               label="|zero-base"))


def build_bad_arguments():
    """Arguments of the wrong type or range: Python would raise TypeError/ValueError deep inside
    the compiler; the user gets a CompilerError naming the call."""
    x = [np.ones((2, 3), np.float32)]
    CE = cc.CompilerError
    for api, fn, err in [
        ("Tensor.reshape", lambda t: t.reshape("a"), CE),
        ("Tensor.sum", lambda t: t.sum(axis=1.5), CE),
        ("Tensor.sum", lambda t: t.sum(dtype="foo"), CE),
        ("Tensor.mean", lambda t: t.mean(axis="a"), CE),
        ("Tensor.squeeze", lambda t: t.squeeze("x"), CE),
        ("Tensor.unsqueeze", lambda t: t.unsqueeze(None), CE),
        ("Tensor.cast", lambda t: t.cast("foo"), CE),
        ("Tensor.__getitem__", lambda t: t[5], cc.ShapeError),
        ("Tensor.__getitem__", lambda t: t[1.5], cc.TraceError),
        ("Tensor.scale", lambda t: t.scale("a"), CE),
        ("Tensor.flatten", lambda t: t.flatten(0.5), CE),
        ("Tensor.transpose", lambda t: t.transpose([0.5, 1]), cc.TraceError),
        ("Tensor.numel", lambda t: t.numel(1), CE),
        ("Tensor.fill_", lambda t: t.fill_("a"), CE),
        ("Tensor.__add__", lambda t: t + "a", CE),
        ("Tensor.expand", lambda t: t.expand([-2, 3]), CE),
        ("F.dropout", lambda t: F.dropout(t, p="a"), CE),
        ("F.elu", lambda t: F.elu(t, "a"), CE),
        ("F.hardtanh", lambda t: F.hardtanh(t, "a"), CE),
        ("F.conv2d", lambda t: F.conv2d(t.reshape([1, 1, 2, 3]), t.reshape([1, 1, 2, 3]), stride="a"), CE),  # noqa: E501
        ("F.max_pool2d", lambda t: F.max_pool2d(t.reshape([1, 1, 2, 3]), "a"), CE),
        ("F.softmax", lambda t: F.softmax(t, dtype="foo"), CE),
        ("cc.full", lambda t: cc.full([2], "a"), CE),
        ("cc.zeros", lambda t: cc.zeros([-1]), CE),
        ("cc.arange", lambda t: cc.arange("a"), CE),
        ("cc.concat", lambda t: cc.concat([t, "a"]), CE),
    ]:
        invalid(api, fn, x, err)


def build_all():
    build_unary()
    build_activations()
    build_scale()
    build_clip()
    build_cast()
    build_binary()
    build_int_edges()
    build_where()
    build_logical_not()
    build_reductions()
    build_matmul()
    build_addmm()
    build_views()
    build_indexing()
    build_fill_concat()
    build_fills_in_place()
    build_creation()
    build_functional()
    build_alpha()
    build_ties_and_kinks()
    build_bad_arguments()
    build_aliasing()


build_all()


# -- a seeded random sweep (tests/opdb/test_opdb.py::test_seeded_sweep) --------------------------
SWEEP_UNARY = [n for n in UNARY]
SWEEP_BINARY = [n for n in BINARY]


def _random_shape(rng, rank):
    return tuple(int(d) for d in rng.choice([0, 1, 1, 2, 3, 4], size=rank))


def _broadcast_partner(rng, shape):
    """A shape that broadcasts with `shape`: some dims set to 1, some leading dims dropped."""
    out = [1 if rng.random() < 0.3 else d for d in shape]
    return tuple(out[int(rng.integers(0, len(out) + 1)):]) if out else ()


def random_samples(seed: int, count: int = 25) -> list[Sample]:
    """`count` samples of random ops on random shapes, dtypes and caller layouts, checked by the
    same formulas as the fixed samples."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        kind = rng.choice(["unary", "binary", "reduction"])
        shape = _random_shape(rng, int(rng.integers(0, 5)))
        if kind == "unary":
            name = str(rng.choice(SWEEP_UNARY))
            formula, tol, k, dtypes, (lo, hi), _, _ = UNARY[name]
            dtype = dtypes[int(rng.integers(len(dtypes)))]
            choices = layouts(shape, dtype, lo, hi, seed=int(rng.integers(1 << 30)))
            label, x = choices[int(rng.integers(len(choices)))]
            if rng.random() < 0.3 and x.size:
                x = x.copy()
                x.flat[int(rng.integers(x.size))] = rng.choice(specials(dtype))
            out.append(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), (x,),
                              unary_want(name, formula, k), tol, label=f"|sweep{label}"))
        elif kind == "binary":
            name = str(rng.choice(SWEEP_BINARY))
            _, tol, _, dtypes, _ = BINARY[name]
            da, db = (dtypes[int(rng.integers(len(dtypes)))] for _ in range(2))
            other = _broadcast_partner(rng, shape)
            if rng.random() < 0.5:
                shape, other = other, shape
            a = _binary_domain(name, da, shape, int(rng.integers(1 << 30)))
            b = _exponent(db, other, 1) if name == "pow" else rand(other, db, seed=2)
            out.append(Sample(f"Tensor.{name}", lambda x, y, n=name: getattr(x, n)(y), (a, b),
                              binary_want(name), tol, label="|sweep"))
        else:
            name = str(rng.choice(["sum", "mean", "max"]))
            dtype = NUMERIC[int(rng.integers(len(NUMERIC)))]
            axis = None if not shape or rng.random() < 0.3 else \
                int(rng.integers(-len(shape), len(shape)))
            keepdim = bool(rng.random() < 0.5)
            if name == "max" and not _reduces_only_nonzero(shape, axis):
                continue
            x = rand(shape, dtype, seed=int(rng.integers(1 << 30)))
            tol = EXACT if name == "max" or (name == "sum" and dtype.kind != "f") else SUM
            out.append(Sample(f"Tensor.{name}", lambda t, n=name, a=axis, kd=keepdim:
                              getattr(t, n)(axis=a, keepdim=kd), (x,),
                              _reduction_want(name, axis, keepdim), tol,
                              terms=_reduction_terms(name, axis, keepdim), label="|sweep"))
    return out


# -- issue 10: model ops ----------------------------------------------------------------------
def _np_along(x, idx, axis):
    """Index arrays that pick `idx` along `axis` (NumPy's own take_along_axis convention)."""
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    grids = list(np.ix_(*[np.arange(n) for n in idx.shape]))
    grids[axis] = idx
    return tuple(grids)


def build_model_ops():
    # lerp: x + w (y - x), w a tensor or a scalar; lerp_ writes x
    def lerp_want(x, y, w):
        dt = result_dtype(x.dtype, y.dtype, np.asarray(w).dtype)
        return (f64(x) + f64(w) * (f64(y) - f64(x))).astype(dt)
    for dtype in FLOATS:
        for sx, sy, sw in [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), ()), ((0, 2), (2,), (1,))]:
            args = (rand(sx, dtype), rand(sy, dtype, seed=1), rand(sw, dtype, 0, 1, seed=2))
            add(Sample("Tensor.lerp", lambda a, b, w: a.lerp(b, w), args, lerp_want, CLOSE))
            add(Sample("cc.lerp", lambda a, b, w: cc.lerp(a, b, w), args, lerp_want, CLOSE))
            add(Sample("Tensor.lerp_", lambda a, b, w: a.lerp_(b, w), args, lerp_want, CLOSE,
                       writes=0))
        add(Sample("cc.lerp_", lambda a, b: cc.lerp_(a, b, 0.25), (rand((2, 3), dtype),
                   rand((2, 3), dtype, seed=3)), lambda a, b: lerp_want(a, b, np.asarray(
                       0.25, a.dtype)), CLOSE, writes=0))
    g3 = (rand((2, 3), F64), rand((2, 3), F64, seed=1), rand((2, 3), F64, 0, 1, seed=2))
    add(Sample("Tensor.lerp", lambda a, b, w: a.lerp(b, w), g3, lerp_want, CLOSE, grad=True))
    add(Sample("Tensor.lerp_", lambda a, b, w: a.lerp_(b, w), tuple(a.copy() for a in g3),
               lerp_want, CLOSE, grad=True, writes=0))
    invalid("Tensor.lerp", lambda a, b: a.lerp(b, b), [np.ones(3, np.int32), np.ones(3, np.int32)],
            cc.TraceError)
    invalid("Tensor.lerp_", lambda a, b: a.lerp_(b, 0.5), [np.ones(3), np.ones((2, 3))],
            cc.InplaceError)

    # logical_xor: truth values of any dtype; the `_` form keeps the target's dtype
    for dtype in ALL:
        a, b = specials(dtype), specials(dtype)[::-1].copy()
        add(Sample("Tensor.logical_xor", lambda x, y: x.logical_xor(y), (a, b),
                   lambda x, y: (x != 0) ^ (y != 0)))
        add(Sample("Tensor.logical_xor_", lambda x, y: x.logical_xor_(y), (a.copy(), b),
                   lambda x, y: ((x != 0) ^ (y != 0)).astype(x.dtype), writes=0))
    add(Sample("cc.logical_xor", lambda x, y: cc.logical_xor(x, y),
               (rand((3, 1), B), rand((4,), I32, seed=1)), lambda x, y: (x != 0) ^ (y != 0)))
    add(Sample("cc.logical_xor_", lambda x, y: cc.logical_xor_(x, y),
               (rand((2, 3), B), rand((3,), B, seed=1)), lambda x, y: x ^ y, writes=0))

    # masked_fill / masked_fill_ / where_
    def fill_want(x, m, v):
        return np.where(m, np.asarray(v).astype(x.dtype), x)
    for dtype in ALL:
        x, m = rand((3, 4), dtype), rand((4,), B, seed=1)
        add(Sample("Tensor.masked_fill", lambda t, k: t.masked_fill(k, 1), (x, m),
                   lambda t, k: fill_want(t, k, 1)))
        add(Sample("Tensor.masked_fill_", lambda t, k: t.masked_fill_(k, 0), (x.copy(), m),
                   lambda t, k: fill_want(t, k, 0), writes=0))
    add(Sample("cc.masked_fill", lambda t, k, v: cc.masked_fill(t, k, v),
               (rand((2, 3), F32), rand((2, 1), B), rand((), F32, seed=4)), fill_want))
    add(Sample("cc.masked_fill_", lambda t, k: cc.masked_fill_(t, k, -np.inf),
               (rand((2, 3), F32), rand((2, 3), B)), lambda t, k: fill_want(t, k, -np.inf),
               writes=0))
    add(Sample("Tensor.masked_fill", lambda t, k, v: t.masked_fill(k, v),
               (rand((2, 3), F64), rand((3,), B, seed=2), rand((), F64, seed=3)), fill_want,
               grad=True))
    add(Sample("Tensor.masked_fill_", lambda t, k: t.masked_fill_(k, 2.0),
               (rand((2, 3), F64), rand((3,), B, seed=2)), lambda t, k: fill_want(t, k, 2.0),
               grad=True, writes=0))
    invalid("Tensor.masked_fill", lambda t, k: t.masked_fill(k, 0),
            [np.ones(3), np.ones((2, 3), bool)], cc.ShapeError)
    invalid("Tensor.masked_fill_", lambda t, k: t.masked_fill_(k, 0),
            [np.ones(3), np.ones((2, 3), bool)], cc.InplaceError)
    add(Sample("cc.where_", lambda c, x, y: cc.where_(c, x, y),
               (rand((2, 3), B), rand((2, 3), F32), rand((3,), F32, seed=1)),
               lambda c, x, y: np.where(c, x, y), writes=1))
    add(Sample("cc.where_", lambda c, x: cc.where_(c, x, 5),
               (rand((4,), B), rand((4,), I64)), lambda c, x: np.where(c, x, 5), writes=1))
    add(Sample("cc.where_", lambda c, x, y: cc.where_(c, x, y),
               (rand((2, 3), B), rand((2, 3), F64), rand((2, 3), F64, seed=1)),
               lambda c, x, y: np.where(c, x, y), writes=1, grad=True))
    invalid("cc.where_", lambda c, x: cc.where_(c, 1.0, x), [np.ones(2, bool), np.ones(2)],
            cc.TraceError)

    # tril / triu (and their `_` forms) on the last two axes, batch dims broadcast
    for name, ref in (("tril", np.tril), ("triu", np.triu)):
        for dtype in ALL:
            for shape, k in [((4, 4), 0), ((3, 5), 1), ((2, 4, 3), -1), ((0, 3), 0),
                             ((3, 2), 5)]:
                x = rand(shape, dtype, seed=len(shape) + k)
                add(Sample(f"Tensor.{name}", lambda t, n=name, d=k: getattr(t, n)(d), (x,),
                           lambda a, r=ref, d=k: r(a, d)))
            add(Sample(f"cc.{name}", lambda t, n=name: getattr(cc, n)(t), (rand((3, 3), dtype),),
                       lambda a, r=ref: r(a)))
            add(Sample(f"Tensor.{name}_", lambda t, n=name: getattr(t, n + "_")(-1),
                       (rand((2, 3, 3), dtype),), lambda a, r=ref: r(a, -1), writes=0))
            add(Sample(f"cc.{name}_", lambda t, n=name: getattr(cc, n + "_")(t, diagonal=1),
                       (rand((3, 4), dtype),), lambda a, r=ref: r(a, 1), writes=0))
        add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), (rand((3, 3), F64),),
                   lambda a, r=ref: r(a), grad=True))
        add(Sample(f"Tensor.{name}_", lambda t, n=name: getattr(t, n + "_")(),
                   (rand((3, 3), F64),), lambda a, r=ref: r(a), grad=True, writes=0))
        invalid(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), [np.ones(3)], cc.ShapeError)

    # cumsum: axis=None scans the flattened tensor; ints accumulate in int64 (as sum)
    def cs_want(axis, dtype=None):
        def want(x):
            acc = x.astype(dtype or (x.dtype if x.dtype.kind == "f" else I64))
            if axis is None:
                acc = acc.reshape(-1)
            out = np.zeros_like(acc, dtype=F64 if acc.dtype.kind == "f" else I64)
            ax = 0 if axis is None else axis % max(acc.ndim, 1)
            moved = np.moveaxis(out, ax, 0) if acc.ndim else out
            src = np.moveaxis(acc, ax, 0) if acc.ndim else acc
            running = np.zeros(src.shape[1:], out.dtype)
            for i in range(src.shape[0] if acc.ndim else 0):
                running = running + src[i]
                moved[i] = running
            return (out if acc.ndim else acc).astype(acc.dtype)
        return want

    def cs_terms(axis):
        return lambda x: cs_want(axis, F64)(np.abs(f64(x)))
    for dtype in ALL:
        for shape, axis in [((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -2), ((3, 4), None),
                            ((0, 3), 1), ((5,), 0)]:
            for label, x in layouts(shape, dtype, seed=3)[:2]:
                add(Sample("Tensor.cumsum", lambda t, a=axis: t.cumsum(a), (x,),
                           cs_want(axis), SUM, terms=cs_terms(axis), label=label))
        add(Sample("cc.cumsum", lambda t: cc.cumsum(t, axis=0), (rand((4, 2), dtype),),
                   cs_want(0), SUM, terms=cs_terms(0)))
    for dtype in (F32, F64, I32, I64):
        add(Sample("Tensor.cumsum_", lambda t: t.cumsum_(1), (rand((3, 4), dtype),),
                   lambda a: cs_want(1)(a).astype(a.dtype), SUM,
                   terms=lambda a: cs_terms(1)(a), writes=0))
    add(Sample("cc.cumsum_", lambda t: cc.cumsum_(t, 0), (rand((5,), F32),), cs_want(0), SUM,
               terms=cs_terms(0), writes=0))
    add(Sample("Tensor.cumsum", lambda t: t.cumsum(dtype="float64"), (rand((2, 3), I32),),
               cs_want(None, F64), SUM, terms=cs_terms(None), label="|dtype"))
    for axis in (0, 1, None):
        add(Sample("Tensor.cumsum", lambda t, a=axis: t.cumsum(a), (rand((3, 4), F64),),
                   cs_want(axis), SUM, terms=cs_terms(axis), grad=True))
    add(Sample("Tensor.cumsum_", lambda t: t.cumsum_(-1), (rand((3, 4), F64),), cs_want(-1),
               SUM, terms=cs_terms(-1), grad=True, writes=0))
    invalid("Tensor.cumsum_", lambda t: t.cumsum_(), [np.ones((2, 3))], cc.InplaceError)
    invalid("Tensor.cumsum", lambda t: t.cumsum(2), [np.ones((2, 3))], cc.ShapeError)

    # index_select / gather (one index per output slice), index_add (scatter-add)
    idx = np.array([2, 0, -1, 2])
    for dtype in ALL:
        x = rand((3, 4), dtype)
        add(Sample("Tensor.index_select", lambda t, i: t.index_select(i, axis=1),
                   (x, np.array([3, 0, 0])), lambda a, i: a[:, i]))
        add(Sample("cc.index_select", lambda t, i: cc.index_select(t, i), (x, idx),
                   lambda a, i: a[i]))
        add(Sample("Tensor.gather", lambda t, i: t.gather(i), (x, idx.astype(I32)),
                   lambda a, i: a[i]))
        add(Sample("cc.gather", lambda t, i: cc.gather(t, i, axis=1), (x, np.array(2)),
                   lambda a, i: a[:, 2], label="|0d-index"))
    add(Sample("Tensor.index_select", lambda t, i: t.index_select(i, 0),
               (rand((3, 2), F32), np.zeros(0, I64)), lambda a, i: a[i], label="|empty"))
    add(Sample("Tensor.index_select", lambda t, i: t.index_select(i, 0), (rand((3, 2), F64), idx),
               lambda a, i: a[i], grad=True))
    add(Sample("Tensor.gather", lambda t, i: t.gather(i, 1), (rand((3, 4), F64), idx),
               lambda a, i: a[:, i], grad=True))
    invalid("Tensor.index_select", lambda t: t.index_select(np.array([[0]])), [np.ones(3)],
            cc.ShapeError)
    invalid("Tensor.gather", lambda t: t.gather(np.array([0.5])), [np.ones(3)], cc.TraceError)

    def ia_want(axis):
        def want(x, i, v):
            out = x.copy()
            moved, vm = np.moveaxis(out, axis, 0), np.moveaxis(v.astype(x.dtype), axis, 0)
            for k, j in enumerate(np.where(i < 0, i + moved.shape[0], i)):
                moved[j] = moved[j] + vm[k]
            return out
        return want
    for dtype in NUMERIC:
        x, v = rand((3, 4), dtype), rand((3, 4), dtype, seed=5)
        add(Sample("Tensor.index_add", lambda t, i, u: t.index_add(i, 1, u), (x, idx, v),
                   ia_want(1), SUM, terms=lambda t, i, u: ia_want(1)(np.abs(f64(t)), i,
                                                                     np.abs(f64(u)))))
        add(Sample("Tensor.index_add_", lambda t, i, u: t.index_add_(i, 0, u),
                   (x.copy(), np.array([1, 1]), v[:2]), ia_want(0), SUM,
                   terms=lambda t, i, u: ia_want(0)(np.abs(f64(t)), i, np.abs(f64(u))),
                   writes=0))
    add(Sample("cc.index_add", lambda t, i, u: cc.index_add(t, i, 0, u),
               (rand((4,), F32), np.array([0, 3, 0]), rand((3,), F32, seed=1)), ia_want(0),
               SUM, terms=lambda t, i, u: ia_want(0)(np.abs(f64(t)), i, np.abs(f64(u)))))
    add(Sample("cc.index_add_", lambda t, i, u: cc.index_add_(t, i, 1, u),
               (rand((2, 3), F32), np.array([2]), rand((2, 1), F32, seed=1)), ia_want(1), SUM,
               terms=lambda t, i, u: ia_want(1)(np.abs(f64(t)), i, np.abs(f64(u))), writes=0))
    add(Sample("Tensor.index_add", lambda t, i, u: t.index_add(i, 1, u),
               (rand((3, 4), F64), idx, rand((3, 4), F64, seed=5)), ia_want(1), SUM,
               terms=lambda t, i, u: ia_want(1)(np.abs(t), i, np.abs(u)), grad=True))
    add(Sample("Tensor.index_add_", lambda t, i, u: t.index_add_(i, 1, u),
               (rand((3, 4), F64), idx, rand((3, 4), F64, seed=5)), ia_want(1), SUM,
               terms=lambda t, i, u: ia_want(1)(np.abs(t), i, np.abs(u)), grad=True, writes=0))
    invalid("Tensor.index_add", lambda t, u: t.index_add(np.array([0]), 0, u),
            [np.ones((3, 2)), np.ones((2, 2))], cc.ShapeError)

    # take_along_axis / put_along_axis (indices broadcast outside the axis)
    ti = np.array([[0, 2], [1, 1], [-1, 0]])
    for dtype in ALL:
        x = rand((3, 4), dtype)
        add(Sample("Tensor.take_along_axis", lambda t, i: t.take_along_axis(i, 1), (x, ti),
                   lambda a, i: a[_np_along(a, i, 1)]))
        add(Sample("cc.take_along_axis", lambda t, i: cc.take_along_axis(t, i, axis=0),
                   (x, np.array([[2, 0, 1, 1]])), lambda a, i: a[_np_along(a, i, 0)]))
    add(Sample("Tensor.take_along_axis", lambda t, i: t.take_along_axis(i, 1),
               (rand((3, 4), F64), ti), lambda a, i: a[_np_along(a, i, 1)], grad=True))

    def put_want(axis, reduce="assign"):
        def want(x, i, v):
            out = x.copy()
            grids = _np_along(x, i, axis)
            vals = np.broadcast_to(np.asarray(v).astype(x.dtype), i.shape)
            if reduce == "add":
                for k in np.ndindex(*i.shape):
                    pos = tuple(g[k] if g.ndim else g for g in np.broadcast_arrays(*grids))
                    out[pos] = out[pos] + vals[k]
            else:
                out[grids] = vals
            return out
        return want
    ui = np.array([[0, 2], [1, 3], [3, 0]])   # distinct per row: assign is well defined
    for dtype in ALL:
        x, v = rand((3, 4), dtype), rand((3, 2), dtype, seed=7)
        add(Sample("Tensor.put_along_axis", lambda t, i, u: t.put_along_axis(i, u, 1),
                   (x, ui, v), put_want(1)))
        add(Sample("Tensor.put_along_axis_", lambda t, i, u: t.put_along_axis_(i, u, 1),
                   (x.copy(), ui, v), put_want(1), writes=0))
    for dtype in NUMERIC:
        x, v = rand((3, 4), dtype), rand((3, 2), dtype, seed=7)
        rep = np.array([[0, 0], [1, 3], [2, 2]])  # repeated indices add up
        add(Sample("cc.put_along_axis", lambda t, i, u: cc.put_along_axis(t, i, u, 1, "add"),
                   (x, rep, v), put_want(1, "add"), SUM,
                   terms=lambda t, i, u: put_want(1, "add")(np.abs(f64(t)), i, np.abs(f64(u)))))
    add(Sample("cc.put_along_axis_", lambda t, i: cc.put_along_axis_(t, i, 9.0, 0),
               (rand((3, 4), F32), np.array([[2, 0, 1, 1]])),
               lambda t, i: put_want(0)(t, i, 9.0), writes=0))
    add(Sample("Tensor.put_along_axis", lambda t, i, u: t.put_along_axis(i, u, 1),
               (rand((3, 4), F64), ui, rand((3, 2), F64, seed=7)), put_want(1), grad=True))
    add(Sample("Tensor.put_along_axis_", lambda t, i, u: t.put_along_axis_(i, u, 1, "add"),
               (rand((3, 4), F64), np.array([[0, 0], [1, 3], [2, 2]]), rand((3, 2), F64)),
               put_want(1, "add"), SUM, terms=lambda t, i, u: put_want(1, "add")(
                   np.abs(t), i, np.abs(u)), grad=True, writes=0))
    invalid("Tensor.put_along_axis", lambda t: t.put_along_axis(np.zeros((3, 1), int), 0, 1,
                                                                "mul"),
            [np.ones((3, 4))], cc.ShapeError)
    invalid("Tensor.take_along_axis", lambda t: t.take_along_axis(np.zeros(3, int), 0),
            [np.ones((3, 4))], cc.ShapeError)

    # split / chunk / stack
    def parts(sections, axis):
        def want(x):
            return tuple(np.split(x, np.cumsum(sections)[:-1], axis=axis))
        return want
    for dtype in ALL:
        x = rand((4, 6), dtype)
        add(Sample("Tensor.split", lambda t: tuple(t.split(3, axis=1)), (x,), parts([2, 2, 2], 1)))
        add(Sample("cc.split", lambda t: tuple(cc.split(t, [1, -1, 2])), (x,), parts([1, 1, 2], 0)))
        add(Sample("Tensor.chunk", lambda t: tuple(t.chunk(2)), (x,), parts([2, 2], 0)))
        add(Sample("cc.chunk", lambda t: tuple(cc.chunk(t, 6, axis=-1)), (x,), parts([1] * 6, 1)))
        add(Sample("cc.stack", lambda a, b: cc.stack([a, b], axis=1),
                   (x, rand((4, 6), dtype, seed=1)), lambda a, b: np.stack([a, b], axis=1)))
    add(Sample("cc.stack", lambda a: cc.stack([a, a * 2.0, a], -1), (rand((2, 3), F64),),
               lambda a: np.stack([a, a * 2, a], -1), grad=True))
    add(Sample("Tensor.split", lambda t: (lambda a, b: cc.concat([b, a * 3.0], 1))(
        *t.split([1, 3], 1)), (rand((2, 4), F64),),
        lambda x: np.concatenate([x[:, 1:], x[:, :1] * 3], 1), grad=True))
    add(Sample("Tensor.split", lambda t: (t.split([2, 1])[1].exp_(), t)[1], (rand((3, 2), F32),),
               lambda a: np.concatenate([a[:2], np.exp(a[2:])]), ULP, writes=0,
               label="|view-write"))
    invalid("Tensor.split", lambda t: t.split(4), [np.ones(6)], cc.ShapeError)
    invalid("cc.split", lambda t: cc.split(t, [2, 2]), [np.ones(6)], cc.ShapeError)
    invalid("Tensor.chunk", lambda t: t.chunk(0), [np.ones(6)], cc.ShapeError)
    invalid("cc.stack", lambda a, b: cc.stack([a, b]), [np.ones(2), np.ones(3)], cc.ShapeError)

    # min / prod / argmax / argmin
    for dtype in NUMERIC:
        for shape, axis, keep in [((3, 4), None, False), ((3, 4), 0, False), ((2, 3, 4), -1, True),
                                  ((), None, False), ((2, 1, 3), [0, 2], True)]:
            x = rand(shape, dtype, seed=3)
            ax = None if axis is None or not shape else tuple(np.atleast_1d(axis))
            add(Sample("Tensor.min", lambda t, a=axis, k=keep: t.min(a, k), (x,),
                       lambda v, a=ax, k=keep: np.minimum.reduce(v, axis=a, keepdims=k)
                       if v.ndim else v.copy()))
            add(Sample("cc.prod", lambda t, a=axis, k=keep: cc.prod(t, axis=a, keepdim=k), (x,),
                       lambda v, a=ax, k=keep: np.multiply.reduce(
                           v.astype(v.dtype if v.dtype.kind == "f" else I64), axis=a,
                           keepdims=k) if v.ndim else v.astype(
                               v.dtype if v.dtype.kind == "f" else I64), SUM,
                       terms=lambda v, a=ax, k=keep: np.abs(np.multiply.reduce(
                           f64(v), axis=a, keepdims=k)) if v.ndim else np.abs(f64(v))))
        add(Sample("Tensor.prod", lambda t: t.prod(), (rand((0, 3), dtype),),
                   lambda v: np.ones((), v.dtype if v.dtype.kind == "f" else I64),
                   label="|empty"))
    add(Sample("cc.min", lambda t: cc.min(t, axis=0), (specials(F32)[None, :],),
               lambda v: np.minimum.reduce(v, axis=0), label="|special"))
    x = np.array([[1.0, 3.0, 0.5], [2.0, 2.0, 2.0]])
    add(Sample("Tensor.min", lambda t: t.min(axis=1), (x,), lambda t: t.min(axis=1), grad=True,
               grad_want=lambda t, w: np.array([[0, 0, 1.0], [1 / 3] * 3]) * w[:, None],
               label="|ties"))
    add(Sample("Tensor.min", lambda t: t.min(axis=0), (rand((3, 4), F64),),
               lambda t: t.min(axis=0), grad=True))
    for label, x in [("", rand((3, 4), F64, 0.5, 2)), ("|one-zero", np.array(
            [[0.0, 2.0, 3.0], [1.5, 0.5, 2.0]])), ("|two-zeros", np.array([[0.0, 0.0, 3.0],
                                                                          [1.5, 0.5, 2.0]]))]:
        add(Sample("Tensor.prod", lambda t: t.prod(axis=1), (x,),
                   lambda v: np.multiply.reduce(v, axis=1), SUM,
                   terms=lambda v: np.abs(np.multiply.reduce(v, axis=1)), grad=True,
                   label=label))
    invalid("Tensor.min", lambda t: t.min(axis=0), [np.ones((0, 2))], cc.ShapeError)
    for name, fn in (("argmax", np.argmax), ("argmin", np.argmin)):
        for dtype in ALL:
            x = rand((3, 4), dtype, -2, 2, seed=4)   # small range: ties, the first one wins
            add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(axis=1), (x,),
                       lambda v, f=fn: f(v, axis=1)))
            add(Sample(f"cc.{name}", lambda t, n=name: getattr(cc, n)(t), (x,),
                       lambda v, f=fn: np.asarray(f(v.reshape(-1)))))
            add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(0, keepdim=True,
                                                                           dtype="int32"),
                       (x,), lambda v, f=fn: f(v, axis=0, keepdims=True).astype(I32)))
        add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), (specials(F64),),
                   lambda v, f=fn: np.asarray(f(v)), label="|special"))
        invalid(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), [np.ones((0, 2))],
                cc.ShapeError)

    # F.silu, F.softmax_, F.embedding, F.scaled_dot_product_attention
    for dtype in FLOATS:
        for label, x in layouts((3, 4), dtype):
            add(Sample("F.silu", lambda t: F.silu(t), (x,),
                       lambda v: (f64(v) / (1 + np.exp(-f64(v)))).astype(v.dtype), CLOSE,
                       label=label))
        add(Sample("F.softmax_", lambda t: F.softmax_(t, axis=0), (rand((3, 4), dtype),),
                   lambda v: _softmax(v, 0), CLOSE, writes=0))
    add(Sample("F.silu", lambda t: F.silu(t), (rand((2, 3), F64),),
               lambda v: v / (1 + np.exp(-v)), CLOSE, grad=True))
    add(Sample("F.softmax_", lambda t: F.softmax_(t), (rand((2, 3), F64),),
               lambda v: _softmax(v, -1), CLOSE, grad=True, writes=0))
    invalid("F.softmax_", lambda t: F.softmax_(t, dtype="float32"), [np.ones(3)], cc.TraceError)

    def emb_want(pad=None):
        def want(ids, w):
            w = w.copy()
            if pad is not None:
                w[pad] = 0
            return w[ids]
        return want
    for dtype in FLOATS:
        w = rand((5, 3), dtype)
        add(Sample("F.embedding", lambda i, t: F.embedding(i, t), (np.array([[0, 4], [2, 0]]), w),
                   emb_want()))
        add(Sample("F.embedding", lambda i, t: F.embedding(i, t, padding_idx=-1),
                   (np.array([4, 1, 4], np.int32), w), emb_want(4), label="|padding"))
    add(Sample("F.embedding", lambda i, t: F.embedding(i, t), (np.array([[0, 4, 0], [2, 0, 1]]),
               rand((5, 3), F64)), emb_want(), grad=True, wrt=(1,)))
    add(Sample("F.embedding", lambda i, t: F.embedding(i, t, padding_idx=0),
               (np.array([[0, 4, 0], [2, 0, 1]]), rand((5, 3), F64)), emb_want(0), grad=True,
               wrt=(1,), label="|padding"))
    invalid("F.embedding", lambda i, t: F.embedding(i, t), [np.array([0]), np.ones(3)],
            cc.ShapeError)

    def sdpa_want(causal=False, mask=None):
        def want(q, k, v, *m):
            q, k, v = (np.moveaxis(f64(a), 2, 1) for a in (q, k, v))
            s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
            if causal:
                s = np.where(np.arange(s.shape[-1]) <= np.arange(s.shape[-2])[:, None], s,
                             -np.inf)
            if m:
                s = np.where(m[0], s, -np.inf) if m[0].dtype == B else s + m[0]
            p = np.exp(s - s.max(-1, keepdims=True))
            p = p / p.sum(-1, keepdims=True)
            return np.moveaxis(np.einsum("bhij,bhjd->bhid", p, v), 1, 2)
        return want
    for dtype in FLOATS:
        q, k, v = (rand((2, 4, 2, 3), dtype, seed=s) for s in range(3))
        add(Sample("F.scaled_dot_product_attention",
                   lambda a, b, c: F.scaled_dot_product_attention(a, b, c), (q, k, v),
                   lambda a, b, c: sdpa_want()(a, b, c).astype(a.dtype), CLOSE))
        add(Sample("F.scaled_dot_product_attention",
                   lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
                   (q, k, v), lambda a, b, c: sdpa_want(True)(a, b, c).astype(a.dtype), CLOSE,
                   label="|causal"))
        add(Sample("F.scaled_dot_product_attention",
                   lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m),
                   (q, k, v, rand((4, 4), dtype, seed=5)),
                   lambda a, b, c, m: sdpa_want()(a, b, c, m).astype(a.dtype), CLOSE,
                   label="|additive"))
    bm = rand((4, 4), B, seed=6)
    bm[:, 0] = True
    qkv = tuple(rand((1, 4, 2, 3), F64, seed=s) for s in range(3))
    add(Sample("F.scaled_dot_product_attention",
               lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m),
               qkv + (bm,), sdpa_want(), CLOSE, grad=True, label="|bool"))
    add(Sample("F.scaled_dot_product_attention",
               lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
               qkv, sdpa_want(True), CLOSE, grad=True, label="|causal"))
    def sdpa_dropout(q, k, v, s):
        qh, kh, vh = (np.moveaxis(a, 2, 1) for a in (q, k, v))
        sc = np.einsum("bhid,bhjd->bhij", qh, kh) / np.sqrt(q.shape[-1])
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True)
        keep = philox_uniform(p.shape, p.dtype, int(s), 0) >= 0.25
        p = np.where(keep, p / 0.75, 0)
        return np.moveaxis(np.einsum("bhij,bhjd->bhid", p, vh), 1, 2)
    add(Sample("F.scaled_dot_product_attention",
               lambda a, b, c, s: F.scaled_dot_product_attention(a, b, c, dropout_p=0.25,
                                                                 seed=s),
               qkv + (np.array(11, np.uint64),), sdpa_dropout, CLOSE, grad=True,
               wrt=(0, 1, 2), label="|dropout"))
    invalid("F.scaled_dot_product_attention",
            lambda a: F.scaled_dot_product_attention(a, a, a), [np.ones((2, 3))], cc.ShapeError)


build_model_ops()


# -- issue 10: random numbers ------------------------------------------------------------------
# An independent Philox-4x32-10 (Salmon et al., SC 2011) on Python ints, one counter at a time.
def philox_words(counter, key):
    c, k = list(counter), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + 0x9E3779B9) % 2 ** 32, (k[1] + 0xBB67AE85) % 2 ** 32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 % 2 ** 32, (p0 >> 32) ^ c[3] ^ k[1], p0 % 2 ** 32]
    return c


def _words(shape, seed, stream):
    n = int(np.prod(shape))
    key = (seed % 2 ** 32, seed >> 32)
    return [philox_words((i % 2 ** 32, i >> 32, stream % 2 ** 32, stream >> 32), key)
            for i in range(n)]


def philox_uniform(shape, dtype, seed, stream):
    """The project's uniform numbers: float32 from the top 24 bits of word 0, float64 from 53
    bits of words 0 and 1."""
    if np.dtype(dtype) == F32:
        vals = [w[0] >> 8 for w in _words(shape, seed, stream)]
        return (np.array(vals, F64) / 2.0 ** 24).astype(F32).reshape(shape)
    vals = [((w[0] >> 5) * 2 ** 26 + (w[1] >> 6)) for w in _words(shape, seed, stream)]
    return (np.array(vals, F64) / 2.0 ** 53).reshape(shape)


def _box_muller(u1, u2):
    """The project's Box-Muller (compiler/ops/random_ops.py documents it), in Python floats:
    ln u1 = ln m - e ln 2 with m = u1 * 2**e in [sqrt(2)/2, sqrt(2)) and ln m = 2 atanh(s) as a
    12-term series; cos(2 pi u2) by quadrant q = floor(4 u2 + 1/2) and an 11-term series of
    cos or sin at (4 u2 - q) pi/2. Python floats round each operation as IEEE float64 does,
    so the same order of operations gives the same bits."""
    m, e = u1, 0.0
    for p in (32, 16, 8, 4, 2, 1):
        if m * 2.0 ** p < math.sqrt(2.0):
            m, e = m * 2.0 ** p, e + p
    s = (m - 1.0) / (m + 1.0)
    series = 1.0 / 23
    for n in range(10, -1, -1):
        series = series * (s * s) + 1.0 / (2 * n + 1)
    ln_u1 = 2.0 * s * series - e * math.log(2.0)
    t = u2 * 4.0
    q = math.floor(t + 0.5)
    a = (t - q) * (math.pi / 2.0)
    cos_a = (-1) ** 10 / math.factorial(20)
    sin_a = (-1) ** 10 / math.factorial(21)
    for n in range(9, -1, -1):
        cos_a = cos_a * (a * a) + (-1) ** n / math.factorial(2 * n)
        sin_a = sin_a * (a * a) + (-1) ** n / math.factorial(2 * n + 1)
    sin_a = a * sin_a
    c = {1: -sin_a, 2: -cos_a, 3: sin_a}.get(q, cos_a)
    return math.sqrt(ln_u1 * -2.0) * c


def philox_normal(shape, dtype, seed, stream):
    out = []
    for w in _words(shape, seed, stream):
        u1 = 1.0 - ((w[0] >> 5) * 2 ** 26 + (w[1] >> 6)) / 2.0 ** 53
        u2 = ((w[2] >> 5) * 2 ** 26 + (w[3] >> 6)) / 2.0 ** 53
        out.append(_box_muller(u1, u2))
    return np.array(out, F64).astype(dtype).reshape(shape)


def build_random():
    for dtype in FLOATS:
        for shape, seed in [((3, 4), 0), ((), 5), ((0, 2), 1), ((7,), 2 ** 63 + 11)]:
            add(Sample("cc.rand", lambda s=shape, d=dtype, k=seed: cc.rand(s, d, seed=k), (),
                       lambda s=shape, d=dtype, k=seed: philox_uniform(s, d, k, 0)))
            add(Sample("cc.randn", lambda s=shape, d=dtype, k=seed: cc.randn(s, d, seed=k), (),
                       lambda s=shape, d=dtype, k=seed: philox_normal(s, d, k, 0)))
        seed = np.array(123456789, np.uint64)
        # the seed as an argument; a second call site draws from the next stream
        add(Sample("cc.rand", lambda k, d=dtype: (cc.rand([2, 3], d, seed=k),
                                                  cc.rand([2, 3], d, seed=k)), (seed,),
                   lambda k, d=dtype: (philox_uniform((2, 3), d, int(k), 0),
                                       philox_uniform((2, 3), d, int(k), 1)), label="|streams"))
        add(Sample("Tensor.uniform_", lambda t, k: t.uniform_(-2.0, 3.0, seed=k),
                   (rand((3, 4), dtype), seed),
                   lambda t, k: (philox_uniform(t.shape, t.dtype, int(k), 0) * t.dtype.type(5)
                                 + t.dtype.type(-2)).astype(t.dtype), ULP, writes=0))
        add(Sample("Tensor.normal_", lambda t: t.normal_(1.0, 0.5, seed=3), (rand((5,), dtype),),
                   lambda t: (philox_normal(t.shape, t.dtype, 3, 0) * t.dtype.type(0.5)
                              + t.dtype.type(1)).astype(t.dtype), ULP, writes=0))
    add(Sample("cc.uniform_", lambda t: cc.uniform_(t, seed=4), (rand((2, 2), F64),),
               lambda t: philox_uniform(t.shape, F64, 4, 0) * 2.0 - 1.0, ULP, writes=0))
    add(Sample("cc.normal_", lambda t: cc.normal_(t), (rand((3,), F32),),
               lambda t: philox_normal(t.shape, F32, 0, 0), writes=0))
    add(Sample("Tensor.uniform_", lambda t: t.uniform_(0, 10, seed=1), (rand((4,), I32),),
               lambda t: (philox_uniform((4,), F32, 1, 0) * np.float32(10)).astype(I32),
               writes=0, label="|int"))
    # the `_` forms through a view write the caller's region only
    add(Sample("Tensor.normal_", lambda t: (t[1:, ::2].normal_(seed=9), t)[1],
               (rand((3, 4), F64),), lambda t: _put(t, (slice(1, None), slice(None, None, 2)),
                                                    philox_normal((2, 2), F64, 9, 0)),
               ULP, writes=0, label="|view"))
    invalid("cc.rand", lambda: cc.rand([2], seed=-1), [], cc.TraceError)
    invalid("cc.randn", lambda: cc.randn([2], seed=1.5), [], cc.TraceError)
    invalid("Tensor.uniform_", lambda t: t.uniform_(seed=t), [np.ones(2)], cc.TraceError)
    invalid("Tensor.normal_", lambda t: t.expand([2, 2]).normal_(), [np.ones(2)],
            cc.InplaceError)


def _put(a, idx, v):
    out = a.copy()
    out[idx] = v
    return out


build_random()


# -- edges of the cpu backend's native scans, gathers, scatters and ordered reductions ---------
def _acc(v):
    return v.dtype if v.dtype.kind == "f" else np.dtype(I64)


def _scatter_loop(x, idx, vals, axis, add_up):
    """put_along_axis by an explicit loop in row-major order of the indexed region: with
    repeated indices the last assignment wins, additions happen in that order."""
    out = x.copy()
    region = tuple(idx.shape[d] if d == axis else max(x.shape[d], idx.shape[d])
                   for d in range(x.ndim))
    idx = np.broadcast_to(idx, region)
    vals = np.broadcast_to(np.asarray(vals).astype(x.dtype), region)
    for pos in np.ndindex(*region):
        k = int(idx[pos])
        dst = tuple((k + x.shape[axis]) % x.shape[axis] if d == axis else
                    p if x.shape[d] == region[d] else 0 for d, p in enumerate(pos))
        out[dst] = out[dst] + vals[pos] if add_up else vals[pos]
    return out


def build_native_edges():
    # argmax/argmin: a NaN is the extreme and its first occurrence wins; ties of infinities
    rows = np.array([[1.0, np.nan, 3.0, np.nan], [-np.inf, 2.0, -np.inf, 2.0],
                     [np.inf, np.inf, np.nan, 0.0]])
    for dtype in FLOATS:
        x = rows.astype(dtype)
        for name, fn in (("argmax", np.argmax), ("argmin", np.argmin)):
            for axis in (0, 1):
                add(Sample(f"Tensor.{name}", lambda t, n=name, a=axis: getattr(t, n)(axis=a),
                           (x,), lambda v, f=fn, a=axis: f(v, axis=a), label="|nan"))
            add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t.t(), n)(axis=1), (x,),
                       lambda v, f=fn: f(v.T, axis=1), label="|nan-view"))
            add(Sample(f"cc.{name}", lambda t, n=name: getattr(cc, n)(t[1:]), (x,),
                       lambda v, f=fn: np.asarray(f(v[1:])), label="|nan-flat"))
        add(Sample("Tensor.min", lambda t: t.min(axis=1), (x,),
                   lambda v: np.minimum.reduce(v, axis=1), label="|nan"))
        add(Sample("Tensor.min", lambda t: t.t().min(axis=1, keepdim=True), (x,),
                   lambda v: np.minimum.reduce(v.T, axis=1, keepdims=True), label="|nan-view"))
        add(Sample("Tensor.prod", lambda t: t.prod(axis=0), (x,),
                   lambda v: np.multiply.reduce(v, axis=0), SUM,
                   terms=lambda v: np.abs(np.multiply.reduce(f64(v), axis=0)), label="|nan"))
    for dtype in ALL:
        x = rand((4, 6), dtype, -2, 2, seed=11)
        for name, fn in (("argmax", np.argmax), ("argmin", np.argmin)):
            add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t[:, ::2], n)(axis=0), (x,),
                       lambda v, f=fn: f(v[:, ::2], axis=0), label="|view"))
    for dtype in NUMERIC:
        x = rand((4, 6), dtype, 0.5, 2, seed=12)
        add(Sample("Tensor.min", lambda t: t[:, ::2].min(0), (x,),
                   lambda v: np.minimum.reduce(v[:, ::2], axis=0), label="|view"))
        add(Sample("Tensor.min", lambda t: t.t().min([0, 1]), (x,),
                   lambda v: np.minimum.reduce(v, axis=None), label="|view"))
        for label, fn, pick in [("|view", lambda t: t.t().prod(1), lambda v: v.T),
                                ("|columns", lambda t: t.prod(0), lambda v: v.T),
                                ("|step", lambda t: t[::-2].prod(1), lambda v: v[::-2])]:
            add(Sample("Tensor.prod", fn, (x,),
                       lambda v, p=pick: np.multiply.reduce(p(v).astype(_acc(v)), axis=1), SUM,
                       terms=lambda v, p=pick: np.abs(np.multiply.reduce(f64(p(v)), axis=1)),
                       label=label))
    add(Sample("cc.prod", lambda t: cc.prod(t, axis=0), (rand((0, 3), F32),),
               lambda v: np.ones(3, F32), label="|empty-axis"))
    add(Sample("cc.prod", lambda t: cc.prod(t, axis=1), (rand((0, 3), I32),),
               lambda v: np.ones(0, I64), label="|empty-kept"))

    # cumsum: empty scan axis, views inside the program, bool, and int32 sums past int32
    def scan(axis, pick=lambda v: v):
        def want(v):
            v = pick(v)
            return np.add.accumulate(v.astype(_acc(v)), axis=axis)
        return want

    def scan_terms(axis, pick=lambda v: v):
        return lambda v: np.add.accumulate(np.abs(f64(pick(v))), axis=axis)
    for dtype in ALL:
        add(Sample("Tensor.cumsum", lambda t: t.cumsum(1), (rand((3, 0), dtype),),
                   scan(1), SUM, terms=scan_terms(1), label="|empty-axis"))
        x = rand((4, 5), dtype, seed=13)
        for label, fn, axis, pick in [
                ("|view", lambda t: t.t().cumsum(1), 1, lambda v: v.T),
                ("|view", lambda t: t[::-1].cumsum(0), 0, lambda v: v[::-1]),
                ("|step", lambda t: t[:, ::2].cumsum(1), 1, lambda v: v[:, ::2])]:
            add(Sample("Tensor.cumsum", fn, (x,), scan(axis, pick), SUM,
                       terms=scan_terms(axis, pick), label=label))
    big = np.full((3,), np.iinfo(np.int32).max, I32)
    add(Sample("cc.cumsum", lambda t: cc.cumsum(t, axis=0), (big,), scan(0), label="|int64"))

    # gathers and scatters: negative, repeated and broadcast indices, empty ones, views
    for dtype in NUMERIC:
        x, v = rand((3, 4), dtype), rand((3, 5), dtype, seed=5)
        rep = np.array([-1, 3, 3, 0, -4])
        add(Sample("Tensor.index_add", lambda t, i, u: t.index_add(i, 1, u), (x, rep, v),
                   lambda a, i, u: _scatter_loop(a, np.broadcast_to(i, (3, 5)), u, 1, True),
                   SUM, terms=lambda a, i, u: _scatter_loop(np.abs(f64(a)), np.broadcast_to(
                       i, (3, 5)), np.abs(f64(u)), 1, True), label="|repeated"))
        add(Sample("Tensor.index_add", lambda t, i, u: t.index_add(i, 1, u),
                   (x, np.zeros(0, I64), rand((3, 0), dtype)), lambda a, i, u: a.copy(),
                   label="|empty"))
        add(Sample("Tensor.index_select", lambda t, i: t.t().index_select(i, axis=-1),
                   (x, np.array([-3, 2, 2], I32)), lambda a, i: a.T[:, i], label="|view"))
        ti = np.array([[-1, 0, -4]])
        add(Sample("Tensor.take_along_axis", lambda t, i: t.take_along_axis(i, 1), (x, ti),
                   lambda a, i: a[:, np.where(i[0] < 0, i[0] + 4, i[0])], label="|broadcast"))
        add(Sample("Tensor.take_along_axis", lambda t, i: t.t().take_along_axis(i, 0),
                   (x, np.array([[3, -1, 0]])), lambda a, i: a.T[[3, 3, 0], [0, 1, 2]][None],
                   label="|view"))
        pi = np.array([[1, -3, 1], [0, 0, 2], [3, -1, 3]])   # repeated per row
        vals = rand((3, 3), dtype, seed=9)
        for reduce, add_up, tol in (("assign", False, EXACT), ("add", True, SUM)):
            add(Sample("Tensor.put_along_axis",
                       lambda t, i, u, r=reduce: t.put_along_axis(i, u, 1, r), (x, pi, vals),
                       lambda a, i, u, s=add_up: _scatter_loop(a, i, u, 1, s), tol,
                       terms=lambda a, i, u, s=add_up: _scatter_loop(
                           np.abs(f64(a)), i, np.abs(f64(u)), 1, s), label="|repeated"))
        add(Sample("Tensor.put_along_axis_", lambda t, i: t.put_along_axis_(i, 7, 0),
                   (x.copy(), np.array([[2, -1, 0, 2]])),
                   lambda a, i: _scatter_loop(a, i, 7, 0, False), writes=0, label="|broadcast"))
    # out of range: a DataError naming the line, the index a constant, an argument or computed
    invalid("Tensor.index_select", lambda t: t.index_select(np.array([0, 3])), [np.ones(3)],
            cc.DataError)
    invalid("Tensor.index_select", lambda t, i: t.index_select(i, 1),
            [np.ones((2, 3)), np.array([-4, 0])], cc.DataError)
    invalid("Tensor.gather", lambda t, i: t.gather(i + 2), [np.ones(3), np.array([0, 1])],
            cc.DataError)
    invalid("Tensor.index_add", lambda t, i, u: t.index_add(i, 0, u),
            [np.ones((3, 2)), np.array([1, 3]), np.ones((2, 2))], cc.DataError)
    invalid("Tensor.index_add_", lambda t, u: t.index_add_(np.array([-5]), 0, u),
            [np.ones((3, 2)), np.ones((1, 2))], cc.DataError)
    invalid("Tensor.take_along_axis", lambda t, i: t.take_along_axis(i, 1),
            [np.ones((2, 3)), np.array([[0], [3]])], cc.DataError)
    invalid("Tensor.put_along_axis", lambda t, i: t.put_along_axis(i, 1.0, 0),
            [np.ones((2, 3)), np.array([[0, -3, 1]])], cc.DataError)
    invalid("Tensor.put_along_axis_", lambda t, i: t.put_along_axis_(i * 4, 1.0, 1, "add"),
            [np.ones((2, 3)), np.array([[0], [1]])], cc.DataError)
    invalid("Tensor.index_select", lambda t, i: t.index_select(i, 1),
            [np.ones((0, 3)), np.array([5])], cc.DataError)   # nothing gathered, still checked
    invalid("F.cross_entropy", lambda x, y: F.cross_entropy(x, y + 2),
            [np.ones((2, 3), F32), np.array([0, 1])], cc.DataError)   # computed labels


build_native_edges()


def build_along_broadcast():
    """take_along_axis / put_along_axis where x has a dim of size 1 that the indices broadcast
    (NumPy's take_along_axis: every index along that dim reads x's one position there)."""
    x, i = rand((1, 4), F64), np.array([[0, 1], [2, 3], [1, -1]])
    add(Sample("Tensor.take_along_axis", lambda t, k: t.take_along_axis(k, 1), (x, i),
               lambda a, k: np.take_along_axis(a, k, 1), grad=True, label="|x-broadcast"))
    for dtype in (F32, I32):
        add(Sample("Tensor.take_along_axis", lambda t, k: t.take_along_axis(k, 1),
                   (rand((1, 4), dtype), i), lambda a, k: np.take_along_axis(a, k, 1),
                   label="|x-broadcast"))
        v = rand((3, 2), dtype, seed=2)
        for reduce, add_up, tol in (("assign", False, EXACT), ("add", True, SUM)):
            add(Sample("Tensor.put_along_axis",
                       lambda t, k, u, r=reduce: t.put_along_axis(k, u, 1, r),
                       (rand((1, 4), dtype), i, v), lambda a, k, u, s=add_up: _scatter_loop(
                           a, k, u, 1, s), tol, terms=lambda a, k, u, s=add_up: _scatter_loop(
                           np.abs(f64(a)), k, np.abs(f64(u)), 1, s), label="|x-broadcast"))
    add(Sample("Tensor.put_along_axis", lambda t, k, u: t.put_along_axis(k, u, 1, "add"),
               (rand((1, 4), F64), i, rand((3, 2), F64, seed=2)),
               lambda a, k, u: _scatter_loop(a, k, u, 1, True), SUM,
               terms=lambda a, k, u: _scatter_loop(np.abs(a), k, np.abs(u), 1, True),
               grad=True, label="|x-broadcast"))


build_along_broadcast()


# -- signed zeros (issue 22 item 10) --------------------------------------------------------------
def _first_on_ties(is_max):
    """The project's max/min: NaN propagates, and where the two compare equal (+0.0 and -0.0
    do) the first operand is the result, as the cpu and gpu code select it."""
    def select(a, b):
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        take_b = (a < b if is_max else a > b) | (np.isnan(b) & ~np.isnan(a))
        return np.where(take_b, b, a)
    return select


def _z(a):
    return np.zeros((), a.dtype)


def build_signed_zeros():
    """Each op whose zero results can come out as +0.0 on one backend and -0.0 on another,
    over inputs holding both zeros and values that round or clamp to a zero. The comparison
    (test_opdb.assert_zero_signs) checks the sign of every zero the formula gives."""
    smax, smin = _first_on_ties(True), _first_on_ties(False)
    v = [-0.0, 0.0, -0.3, 0.3, -0.5, 0.5, -0.7, 0.7, -1.5, 1.5, -2.5, np.nan, -np.inf, np.inf]
    for dtype in FLOATS:
        x = np.array(v, dtype)
        pz, nz = np.zeros(len(v), dtype), np.full(len(v), -0.0, dtype)

        def one(api, fn, args, want, tol=EXACT):
            add(Sample(api, fn, args, want, tol, label="|signed-zero", always=True))
        one("F.relu", lambda t: F.relu(t), (x,), lambda a: smax(a, _z(a)))
        add(Sample("F.relu_", lambda t: F.relu_(t), (x.copy(),), lambda a: smax(a, _z(a)),
                   writes=0, label="|signed-zero", always=True))
        add(Sample("Tensor.relu_", lambda t: t.relu_(), (x.copy(),), lambda a: smax(a, _z(a)),
                   writes=0, label="|signed-zero", always=True))
        one("Tensor.clip", lambda t: t.clip(0, 1), (x,), lambda a: smin(smax(a, _z(a)), _z(a) + 1))
        one("cc.clip", lambda t: cc.clip(t, -1.0, 0.0), (x,),
            lambda a: smin(smax(a, _z(a) - 1), _z(a)))
        add(Sample("Tensor.clip_", lambda t: t.clip_(0.0, 1.0), (x.copy(),),
                   lambda a: smin(smax(a, _z(a)), _z(a) + 1), writes=0, label="|signed-zero",
                   always=True))
        one("F.hardtanh", lambda t: F.hardtanh(t, 0.0, 1.0), (x,),
            lambda a: smin(smax(a, _z(a)), _z(a) + 1))
        for y, yl in ((pz, "+0"), (nz, "-0")):
            one("Tensor.maximum", lambda t, u: t.maximum(u), (x, y), smax)
            one("cc.maximum", lambda t, u: cc.maximum(u, t), (x, y), lambda a, b: smax(b, a))
            one("Tensor.minimum", lambda t, u: t.minimum(u), (x, y), smin)
            one("cc.minimum", lambda t, u: cc.minimum(u, t), (x, y), lambda a, b: smin(b, a))
        one("Tensor.abs", lambda t: t.abs(), (x,), lambda a: np.where(a <= 0, 0 - a, a))
        one("Tensor.__neg__", lambda t: -t, (x,), lambda a: a * (_z(a) - 1))
        one("Tensor.__mul__", lambda t: t * 0.0, (x,), lambda a: a * _z(a))
        one("Tensor.__rmul__", lambda t: 0 * t, (x,), lambda a: _z(a) * a)
        one("Tensor.__add__", lambda t: t + 0.0, (x,), lambda a: a + _z(a))   # -0 + 0 = +0
        one("Tensor.__sub__", lambda t: t - 0.0, (x,), lambda a: a - _z(a))   # -0 - 0 = -0
        # (scale * x + bias: the bias 0.0 turns -0.0 into +0.0)
        one("Tensor.scale", lambda t: t.scale(-1.0), (x,), lambda a: a * (_z(a) - 1) + _z(a))
        one("Tensor.sign", lambda t: t.sign(), (x,),
            lambda a: np.where(a > 0, 1, np.where(a < 0, -1, np.where(a == 0, 0, a)))
            .astype(a.dtype))
        # rounding keeps the sign of its argument: -0.3 -> -0.0
        one("Tensor.round", lambda t: t.round(), (x,), lambda a: np.copysign(np.where(
            np.abs(a - np.trunc(a)) == 0.5, 2.0 * np.round(a / 2.0), np.floor(a + 0.5)), a)
            .astype(a.dtype))
        one("Tensor.floor", lambda t: t.floor(), (x,), lambda a: np.copysign(
            np.where(a - np.trunc(a) < 0, np.trunc(a) - 1, np.trunc(a)), a).astype(a.dtype))
        one("Tensor.ceil", lambda t: t.ceil(), (x,), lambda a: np.copysign(
            np.where(a - np.trunc(a) > 0, np.trunc(a) + 1, np.trunc(a)), a).astype(a.dtype))
        one("Tensor.trunc", lambda t: t.trunc(), (x,),
            lambda a: np.copysign(np.trunc(np.abs(a)), a).astype(a.dtype))
        one("F.leaky_relu", lambda t: F.leaky_relu(t, 0.1), (x,),
            lambda a: np.where(a > 0, a, a * np.asarray(0.1, a.dtype)))
        one("cc.where", lambda t: cc.where(t > 0, t, t * 0.0), (x,),
            lambda a: np.where(a > 0, a, a * _z(a)))


build_signed_zeros()


# -- rows longer than a warp and a block (the gpu's block reductions) -------------------------
def _long_rows(n, rows, dtype, spots, seed, nan=()):
    """`rows` rows of n values in [-1, 1); row r holds its maximum (+5) at spots[r][0] and its
    minimum (-5) at spots[r][1] (a list: ties, the first one wins). The gpu code reduces a row
    with up to 256 threads (runtime/gpu/emitter.py RBLOCK), thread j taking j, j + 256, ...,
    then warp shuffles: the spots are chosen in lanes 16-31, in other warps, and past the
    first 256 elements."""
    x = rand((rows, n), dtype, -1, 1, seed=seed)
    for r, (hi, lo) in enumerate(spots):
        for i in np.atleast_1d(hi):
            x[r, i] = 5
        for i in np.atleast_1d(lo):
            x[r, i] = -5
    for r, i in nan:
        x[r, i] = np.nan
    return x


def build_long_rows():
    # thread, lane, warp of each spot under 256 threads: 20 (t20: lane 20), 150 (w4 lane 22),
    # 290 (t34: w1 lane 2, 2nd pass), 1400 (t120: w3 lane 24), 700 (t188: w5 lane 28)
    cases = [
        (300, [(20, 150), (150, 290), ([270, 100], [25, 281]), (299, 0)], ()),
        (1500, [(1400, 700), ([1100, 23], 1499), (700, [1300, 17])], ()),
        (300, [(20, 150), (150, 20)], [(0, 277), (0, 280), (1, 31)]),
        (40, [(31, 17), (17, 31), (39, 32)], ()),
    ]
    for k, (n, spots, nan) in enumerate(cases):
        for dtype in FLOATS + ((I32,) if not nan else ()):
            x = _long_rows(n, len(spots), dtype, spots, seed=k, nan=nan)
            if dtype == I32:
                x = x.astype(I32) if x.dtype != I32 else x

            def one(api, fn, want, tol=EXACT, terms=None, args=(x,)):
                add(Sample(api, fn, args, want, tol, terms=terms, label="|long", always=True))
            for name, f in (("argmax", np.argmax), ("argmin", np.argmin)):
                one(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(axis=1),
                    lambda v, f=f: f(v, axis=1))
                one(f"cc.{name}", lambda t, n=name: getattr(cc, n)(t.t(), axis=0),
                    lambda v, f=f: f(v.T, axis=0))     # strided rows
            one("Tensor.max", lambda t: t.max(axis=1), lambda v: np.maximum.reduce(v, axis=1))
            one("Tensor.min", lambda t: t.min(axis=-1, keepdim=True),
                lambda v: np.minimum.reduce(v, axis=-1, keepdims=True))
            one("cc.max", lambda t: cc.max(t), lambda v: np.asarray(np.maximum.reduce(v, None)))
            one("Tensor.sum", lambda t: t.sum(axis=1),
                _reduction_want("sum", 1, False), SUM if dtype != I32 else EXACT,
                _reduction_terms("sum", 1, False))
            if dtype == I32:
                continue
            one("Tensor.mean", lambda t: t.mean(axis=1), _reduction_want("mean", 1, False), SUM,
                _reduction_terms("mean", 1, False))
            p = x / 50 + 1  # near 1: a product of 1500 stays finite
            add(Sample("Tensor.prod", lambda t: t.prod(axis=1), (p,),
                       lambda v: np.multiply.reduce(f64(v), axis=1).astype(v.dtype), SUM,
                       terms=lambda v: np.abs(np.multiply.reduce(f64(v), axis=1)),
                       label="|long", always=True))
            # softmax subtracts the row's maximum: a missed +50 overflows exp
            big = np.where(x == 5, 50, x).astype(x.dtype)
            for api, fn, ref in (("F.softmax", lambda t: F.softmax(t, axis=1), _softmax),
                                 ("F.log_softmax", lambda t: F.log_softmax(t, axis=-1),
                                  _log_softmax)):
                add(Sample(api, fn, (big,), _in(lambda v, r=ref: r(v, 1)), CLOSE,
                           label="|long", always=True))
build_long_rows()


# -- issue 24: Paddle's Tensor methods (compiler/tensor_paddle.py) and integer-tensor indexing --
def _paddle_var(x, axis=None, unbiased=True, keepdim=False):
    """Paddle's var in float64: divisor N - 1 (1 where N <= 1) with `unbiased`, else N."""
    a = f64(x)
    axes = tuple(range(a.ndim)) if axis is None else tuple(
        ax % a.ndim for ax in ((axis,) if isinstance(axis, int) else axis))
    n = int(np.prod([a.shape[ax] for ax in axes]))
    with np.errstate(all="ignore"):
        mean = a.sum(axis=axes, keepdims=True) / n
        s = ((a - mean) ** 2).sum(axis=axes, keepdims=keepdim)
        div = (n - 1 if n > 1 else 1) if unbiased else n
        return np.asarray(s / div).astype(x.dtype)


def _logsumexp(x, axis=None, keepdim=False):
    """np.logaddexp.reduce over the axes (moved last and flattened), in float64."""
    a = f64(x)
    axes = tuple(range(a.ndim)) if axis is None else tuple(
        ax % a.ndim for ax in ((axis,) if isinstance(axis, int) else axis))
    keep = [d for i, d in enumerate(a.shape) if i not in axes]
    n = int(np.prod([a.shape[i] for i in axes]))
    moved = np.moveaxis(a, axes, range(a.ndim - len(axes), a.ndim)).reshape(keep + [n])
    with np.errstate(all="ignore"):
        out = np.logaddexp.reduce(moved, axis=-1) if moved.shape[-1] else \
            np.full(keep, -np.inf)
    if keepdim:
        out = np.reshape(out, [1 if i in axes else d for i, d in enumerate(a.shape)])
    return np.asarray(out).astype(x.dtype)


def _tile(x, reps):
    return np.tile(x, reps)


def build_paddle_methods():
    start = len(SAMPLES)
    _build_paddle_methods()
    # The first sample of each API and label also runs through the gpu's CUDA C on the host
    # harness (tests/gpu/test_harness_samples.py) and on every backend in the default run.
    seen = set()
    for s in SAMPLES[start:]:
        if (s.api, s.label.split("|")[1] if "|" in s.label else "") not in seen and not s.grad:
            seen.add((s.api, s.label.split("|")[1] if "|" in s.label else ""))
            s.always = True


def _build_paddle_methods():
    # clone: a copy with the gradient path; writes to it don't reach the argument
    for dtype in ALL:
        for shape in SHAPES:
            x = rand(shape, dtype, seed=len(shape))
            add(Sample("Tensor.clone", lambda t: t.clone(), (x,), lambda a: a.copy()))
        add(Sample("cc.clone", lambda t: cc.clone(t), (rand((2, 3), dtype),), lambda a: a.copy()))
    for label, x in layouts((3, 4), F64):
        add(Sample("Tensor.clone", lambda t: t.clone().add_(t), (x,), lambda a: a + a,
                   grad=True, label=label))

    # var / std: Paddle's defaults (unbiased=True), axis lists, keepdim, N = 1 and N = 0
    for dtype in FLOATS:
        for shape, axis, unbiased, keepdim in [
                ((3, 4), None, True, False), ((3, 4), 1, True, False), ((3, 4), 0, False, True),
                ((2, 3, 4), [0, 2], True, True), ((2, 3, 4), -1, False, False), ((), None, True,
                                                                                 False),
                ((1,), None, True, False), ((1,), 0, False, False), ((4, 1), 1, True, False),
                ((0, 3), 0, True, False), ((0, 3), 0, False, False), ((2, 0), None, True, True),
                ((2, 0), 1, True, False)]:
            for label, x in layouts(shape, dtype, seed=5)[:2]:
                for name, f in (("var", _paddle_var), ("std", lambda *a, **k: np.sqrt(
                        _paddle_var(*a, **k)))):
                    add(Sample(f"Tensor.{name}",
                               lambda t, n=name, a=axis, u=unbiased, k=keepdim:
                               getattr(t, n)(a, u, k), (x,),
                               lambda v, f=f, a=axis, u=unbiased, k=keepdim: f(v, a, u, k),
                               CLOSE, label=label))
        big = rand((3, 5), dtype, seed=9) * 1e3 + 1e4     # a large mean: the shift matters
        add(Sample("cc.var", lambda t: cc.var(t, axis=1), (big,), lambda v: _paddle_var(v, 1),
                   CLOSE, label="|offset"))
        add(Sample("cc.std", lambda t: cc.std(t, unbiased=False, keepdim=True), (big,),
                   lambda v: np.sqrt(_paddle_var(v, None, False, True)), CLOSE, label="|offset"))
        sp = specials(dtype)[None, :]                     # inf and NaN rows give NaN
        add(Sample("Tensor.var", lambda t: t.var(axis=1), (sp,), lambda v: _paddle_var(v, 1),
                   CLOSE, label="|special"))
    for axis in (None, 1, [0, 1]):
        for name, f in (("var", _paddle_var), ("std", lambda *a, **k: np.sqrt(_paddle_var(*a,
                                                                                          **k)))):
            add(Sample(f"Tensor.{name}", lambda t, n=name, a=axis: getattr(t, n)(axis=a),
                       (rand((3, 4), F64, seed=7),), lambda v, f=f, a=axis: f(v, a), CLOSE,
                       grad=True))
    add(Sample("Tensor.var", lambda t: t.var(1, False, True), (rand((2, 5), F64),),
               lambda v: _paddle_var(v, 1, False, True), CLOSE, grad=True))
    for name in ("var", "std"):
        invalid(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), [np.ones(3, np.int32)],
                cc.TraceError)
        invalid(f"cc.{name}", lambda t, n=name: getattr(cc, n)(t, axis=2), [np.ones((2, 3))],
                cc.ShapeError)

    # logsumexp: max-shifted (no overflow at 1e3), -inf rows, +inf, NaN, empty axes
    for dtype in FLOATS:
        for shape, axis, keepdim in [((3, 4), None, False), ((3, 4), 1, False),
                                     ((3, 4), 0, True), ((2, 3, 4), [0, 2], False), ((), None,
                                                                                    False),
                                     ((1,), 0, True), ((0, 3), 0, False), ((0, 3), 1, False),
                                     ((2, 0), None, True)]:
            for label, x in layouts(shape, dtype, seed=4)[:2]:
                add(Sample("Tensor.logsumexp",
                           lambda t, a=axis, k=keepdim: t.logsumexp(a, k), (x,),
                           lambda v, a=axis, k=keepdim: _logsumexp(v, a, k), CLOSE,
                           label=label))
        inf = np.inf
        rows = np.array([[-inf, -inf, -inf], [1e3, 1e3 - 1, -inf], [inf, 0, 1], [inf, -inf, 0],
                         [np.nan, 0, 1], [-1e3, -1e3, -1e3], [0, 0, 0]], dtype)
        add(Sample("Tensor.logsumexp", lambda t: t.logsumexp(axis=1), (rows,),
                   lambda v: _logsumexp(v, 1), CLOSE, label="|special", always=True))
        add(Sample("cc.logsumexp", lambda t: cc.logsumexp(t, axis=-1, keepdim=True),
                   (specials(dtype).reshape(3, 5),), lambda v: _logsumexp(v, -1, True), CLOSE,
                   label="|special"))
    for axis in (None, 1, [0, 1]):
        add(Sample("Tensor.logsumexp", lambda t, a=axis: t.logsumexp(a),
                   (rand((3, 4), F64, seed=3) * 20,), lambda v, a=axis: _logsumexp(v, a), CLOSE,
                   grad=True))
    # tied maxima: the shift carries no gradient, so every tied element gets the same share
    add(Sample("Tensor.logsumexp", lambda t: t.logsumexp(axis=1), (np.array([[2.0, 2.0, 1.0],
                                                                            [5.0, 5.0, 5.0]]),),
               lambda v: _logsumexp(v, 1), CLOSE, grad=True, label="|ties"))
    invalid("Tensor.logsumexp", lambda t: t.logsumexp(), [np.ones(3, np.int64)], cc.TraceError)

    # flip: a reversed copy along one or several axes
    for dtype in ALL:
        for shape, axis in [((3, 4), 0), ((3, 4), [0, 1]), ((2, 3, 4), -1), ((5,), 0),
                            ((0, 3), 1), ((2, 0, 3), [0, 2]), ((1, 1), 1)]:
            for label, x in layouts(shape, dtype, seed=2)[:3]:
                add(Sample("Tensor.flip", lambda t, a=axis: t.flip(a), (x,),
                           lambda v, a=axis: np.flip(v, a).copy(), label=label))
        add(Sample("cc.flip", lambda t: cc.flip(t, axis=[1]), (rand((2, 3), dtype),),
                   lambda v: np.flip(v, 1).copy()))
    add(Sample("Tensor.flip", lambda t: t.flip(0).add_(1.0), (rand((3, 2), F64),),
               lambda v: np.flip(v, 0) + 1.0, grad=True, label="|written"))
    add(Sample("Tensor.flip", lambda t: t.flip([0, 1]) * t, (rand((3, 3), F64),),
               lambda v: np.flip(v) * v, grad=True))
    add(Sample("Tensor.flip", lambda t: t.flip(0), (rand((), I64),), lambda v: v.copy(),
               label="|0d"))
    invalid("Tensor.flip", lambda t: t.flip(2), [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.flip", lambda t: t.flip(1), [np.ones(())], cc.ShapeError)
    invalid("Tensor.var", lambda t: t.var(axis=1), [np.ones(())], cc.ShapeError)
    invalid("cc.flip", lambda t: cc.flip(t, [0, 0]), [np.ones((2, 3))], cc.ShapeError)

    # any / all: nonzero truth of every dtype (NaN is true); an empty reduction is the identity
    for dtype in ALL:
        for shape, axis, keepdim in [((3, 4), None, False), ((3, 4), 1, False),
                                     ((3, 4), 0, True), ((2, 3, 4), [0, 2], False),
                                     ((), None, False), ((0, 3), 0, False), ((0, 3), 1, True)]:
            x = rand(shape, dtype, -1, 1, seed=6)
            if dtype.kind == "f":
                x = np.where(rand(shape, B, seed=8), x, 0).astype(dtype)
            for name, f in (("any", np.any), ("all", np.all)):
                add(Sample(f"Tensor.{name}",
                           lambda t, n=name, a=axis, k=keepdim: getattr(t, n)(a, k), (x,),
                           lambda v, f=f, a=axis, k=keepdim: np.asarray(f(
                               v, axis=None if a is None else tuple(np.atleast_1d(a)),
                               keepdims=k))))
        for name, f in (("any", np.any), ("all", np.all)):
            add(Sample(f"cc.{name}", lambda t, n=name: getattr(cc, n)(t, axis=-1),
                       (specials(dtype).reshape(2, -1) if specials(dtype).size % 2 == 0 else
                        specials(dtype).reshape(1, -1),),
                       lambda v, f=f: np.asarray(f(v, axis=-1)), label="|special"))
    add(Sample("Tensor.all", lambda t: t.all(0), (np.array([[1, 1], [1, 0]], np.int32)[:, ::-1],),
               lambda v: v.all(0), label="|neg"))
    invalid("Tensor.any", lambda t: t.any(3), [np.ones((2, 3), bool)], cc.ShapeError)

    # isnan / isinf / isfinite over every dtype's extremal values (integers: none non-finite)
    for dtype in ALL:
        for name, f in (("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)):
            add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), (specials(dtype),),
                       lambda v, f=f: f(v) if v.dtype != B else f(v.astype(np.int8))))
            add(Sample(f"cc.{name}", lambda t, n=name: getattr(cc, n)(t),
                       (rand((2, 0, 3), dtype),), lambda v, f=f: np.zeros(v.shape, bool) if
                       f is not np.isfinite else np.ones(v.shape, bool)))
            add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), (rand((), dtype),),
                       lambda v, f=f: np.asarray(f(v) if v.dtype != B else f(v.astype(
                           np.int8)))))
    for label, x in layouts((3, 5), F32)[1:3]:
        x[0, 1], x[2, 3], x[1, 0] = np.nan, np.inf, -np.inf
        for name, f in (("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)):
            add(Sample(f"Tensor.{name}", lambda t, n=name: getattr(t, n)(), (x,),
                       lambda v, f=f: f(v), label=label))

    # tile: Paddle pads the shorter of the shape and repeat_times with leading 1s
    for dtype in ALL:
        for shape, reps in [((3,), [2]), ((2, 3), [2, 1]), ((2, 3), [3]), ((2,), [2, 3, 1]),
                            ((), [3]), ((), [2, 2]), ((0, 2), [2, 2]), ((2, 3), [0, 1]),
                            ((1, 1), (1, 1))]:
            for label, x in layouts(shape, dtype, seed=1)[:2]:
                add(Sample("Tensor.tile", lambda t, r=reps: t.tile(r), (x,),
                           lambda v, r=reps: _tile(v, r), label=label))
        add(Sample("cc.tile", lambda t: cc.tile(t, repeat_times=[2, 2]), (rand((2, 3), dtype),),
                   lambda v: _tile(v, [2, 2])))
    add(Sample("Tensor.tile", lambda t: t.tile([2, 3]), (rand((2, 3), F64),),
               lambda v: _tile(v, [2, 3]), grad=True))
    add(Sample("Tensor.tile", lambda t: t.tile([3, 1, 2]), (rand((2, 1), F64),),
               lambda v: _tile(v, [3, 1, 2]), grad=True))
    invalid("Tensor.tile", lambda t: t.tile([-1, 2]), [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.tile", lambda t: t.tile([1.5]), [np.ones((2, 3))], cc.TraceError)
    invalid("cc.tile", lambda t, r: cc.tile(t, r), [np.ones(2), np.ones(1, np.int64)],
            cc.TraceError)

    # where / where_ bound on the condition (Paddle): cond.where_(x, y) writes into x
    for dtype in ALL:
        c, x, y = rand((3, 4), B, seed=1), rand((3, 4), dtype, seed=2), rand((4,), dtype, seed=3)
        add(Sample("Tensor.where", lambda k, a, b: k.where(a, b), (c, x, y),
                   lambda k, a, b: np.where(k, a, b)))
        add(Sample("Tensor.where_", lambda k, a, b: k.where_(a, b), (c, x.copy(), y),
                   lambda k, a, b: np.where(k, a, b), writes=1))
    add(Sample("Tensor.where_", lambda k, a: k.where_(a, 0.5), (rand((2, 3), B), rand((2, 3), F64)),
               lambda k, a: np.where(k, a, 0.5), writes=1, grad=True))
    add(Sample("Tensor.where", lambda k, a, b: k.where(a, b), (rand((2, 3), B), rand((2, 3), F64),
                                                               rand((3,), F64, seed=1)),
               lambda k, a, b: np.where(k, a, b), grad=True))
    invalid("Tensor.where_", lambda k, a: k.where_(1.0, a), [np.ones(2, bool), np.ones(2)],
            cc.TraceError)

    # integer-tensor indexing: x[idx] gathers along the indexed axis, x[idx] = v scatters
    def get_want(i, idx_pos):
        def want(v, j):
            key = [slice(None)] * idx_pos + [j] if isinstance(i, tuple) else j
            return np.asarray(v[tuple(key)] if isinstance(key, list) else v[key]).copy()
        return want
    cases = [((4, 3), [2, 0, -1, 2], 0), ((4, 3), [[1, 3], [0, 0]], 0), ((4, 3), 3, 0),
             ((4, 3), [], 0), ((3, 5), [4, 0], 1), ((2, 3, 4), [1, -4], 2), ((0, 3), [], 0),
             ((3, 0), [2, 1], 0), ((1,), [0, 0, 0], 0)]
    for k, (shape, idx, pos) in enumerate(cases):
        dtype = ALL[k % len(ALL)]
        j = np.asarray(idx, I64 if k % 2 else I32)
        for label, x in layouts(shape, dtype, seed=k)[:3]:
            if pos == 0:
                add(Sample("Tensor.__getitem__", lambda t, i: t[i], (x, j),
                           lambda v, i: np.asarray(v[i]).copy(), label="|gather" + label))
            else:
                add(Sample("Tensor.__getitem__", lambda t, i, p=pos: t[(slice(None),) * p + (i,)],
                           (x, j), lambda v, i, p=pos: np.asarray(v[(slice(None),) * p
                                                                    + (i,)]).copy(),
                           label="|gather" + label))
        region = np.asarray(rand(shape, dtype)[(slice(None),) * pos + (j,)]).shape
        u = rand(region, dtype, seed=k + 7)
        x = rand(shape, dtype, seed=k)
        if j.size and len(set((j % shape[pos]).ravel().tolist())) == j.size:  # distinct indices
            add(Sample("Tensor.__setitem__", lambda t, i, v, p=pos: _setitem(
                t, (slice(None),) * p + (i,), v), (x.copy(), j, u),
                lambda t, i, v, p=pos: _set(t, (slice(None),) * p + (i,), v), writes=0,
                label="|scatter"))
    # the index as a constant NumPy array, a list, with an Ellipsis and None, and read twice
    x = rand((3, 4, 2), F32)
    add(Sample("Tensor.__getitem__", lambda t: t[np.array([2, 0])], (x,),
               lambda v: v[np.array([2, 0])].copy(), label="|const-index"))
    add(Sample("Tensor.__getitem__", lambda t: t[..., [1, 1]], (x,), lambda v: v[..., [1, 1]],
               label="|list"))
    add(Sample("Tensor.__getitem__", lambda t, i: t[None, 1:, i], (x, np.array([3, 0])),
               lambda v, i: v[None, 1:, i], label="|slices"))
    # repeated indices on a write: the last value wins (NumPy); `+=` reads then writes back
    add(Sample("Tensor.__setitem__", lambda t, i, v: _setitem(t, i, v),
               (rand((4, 2), I64), np.array([1, 3, 1]), np.array([[5, 6], [7, 8], [9, 10]])),
               lambda t, i, v: _set(t, i, v), writes=0, label="|repeated"))
    add(Sample("Tensor.__setitem__", lambda t, i: _setitem(t, (slice(None), i), 0.5),
               (rand((3, 4), F32), np.array([0, 2])), lambda t, i: _set(t, (slice(None), i), 0.5),
               writes=0, label="|scalar"))

    def iadd(t, i):
        t[i] += 1
        return t
    add(Sample("Tensor.__setitem__", iadd, (rand((4, 3), I32), np.array([3, 0])),
               lambda t, i: _set(t, i, t[i] + 1), writes=0, label="|iadd"))
    # through a view of the argument: the scatter reaches the caller's array
    add(Sample("Tensor.__setitem__", lambda t, i: (_setitem(t[1:], i, -1.0), t)[1],
               (rand((4, 3), F64), np.array([2, 0])),
               lambda t, i: _set(t, (slice(1, None),), _set(t[1:], i, -1.0)), writes=0,
               label="|view"))
    # gradients: the gather's is a scatter-add (repeated rows add up), the scatter's a gather
    add(Sample("Tensor.__getitem__", lambda t, i: t[i], (rand((4, 3), F64), np.array([2, 0, 2])),
               lambda v, i: v[i].copy(), grad=True, label="|gather"))
    add(Sample("Tensor.__getitem__", lambda t, i: t[:, i], (rand((3, 4), F64),
                                                            np.array([[3, 1], [1, 1]])),
               lambda v, i: v[:, i].copy(), grad=True, label="|gather"))
    add(Sample("Tensor.__setitem__", lambda t, i, v: _setitem(t * 1.0, (slice(None), i), v),
               (rand((3, 4), F64), np.array([3, 0]), rand((3, 2), F64, seed=1)),
               lambda t, i, v: _set(t, (slice(None), i), v), grad=True, label="|scatter"))
    add(Sample("Tensor.__setitem__", lambda t, i, v: _setitem(t * 1.0, i, v),
               (rand((4, 3), F64), np.array([1, 2]), rand((3,), F64, seed=1)),
               lambda t, i, v: _set(t, i, v), grad=True, label="|broadcast"))
    invalid("Tensor.__getitem__", lambda t, m: t[m], [np.ones(3), np.ones(3, bool)],
            cc.TraceError)
    invalid("Tensor.__getitem__", lambda t, m: t[:, m], [np.ones((2, 3)), np.ones(3, bool)],
            cc.TraceError)
    invalid("Tensor.__getitem__", lambda t, i: t[i, i], [np.ones((2, 3)), np.ones(1, np.int64)],
            cc.TraceError)
    invalid("Tensor.__getitem__", lambda t, i: t[0, i], [np.ones((2, 3)), np.ones(1, np.int64)],
            cc.TraceError)
    invalid("Tensor.__getitem__", lambda t, i: t[i], [np.ones(()), np.zeros(1, np.int64)],
            cc.ShapeError)
    invalid("Tensor.__setitem__", lambda t, i: t.__setitem__(i, t[:2]),
            [np.ones((3, 2)), np.zeros(3, np.int64)], cc.ShapeError)
    invalid("Tensor.__setitem__", lambda t, i: t.__setitem__(i, 1.0), [np.ones(3), np.ones(2)],
            cc.TraceError)


build_paddle_methods()


# -- compiler.nn layers (issue 24 item 1) ---------------------------------------------------------
# Each sample's fn builds the layer inside the trace and binds its weights to the sample's
# arguments (so values and float64 gradients are checked against the arguments, on every
# backend); the layer's other arrays (running statistics, dropout seeds) are its own.
import compiler.nn as nn  # noqa: E402
from compiler import tracer as _nn_tracer  # noqa: E402


class _nn_dtype:
    """Layers built inside have parameters of `dtype` (nn.set_default_dtype)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.saved = nn.get_default_dtype()
        nn.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        nn.set_default_dtype(self.saved)


def _bind(layer, tensors):
    """Inside a trace: `layer`'s state_dict entries, in order, read as `tensors` (the sample's
    arguments) instead of its own arrays (a state array already known to the trace is that
    Tensor)."""
    states = _nn_tracer.current().states
    entries = list(layer.state_dict().values())
    for array, t in zip(entries, tensors):
        assert tuple(array.shape) == tuple(t.shape), (array.shape, t.shape)
        states[id(array)] = t
    return layer


def _layer_fn(make, train=False):
    """fn(x, *weights): make() under the weights' dtype, in train or eval mode, weights bound,
    called on x."""
    def fn(x, *weights):
        dtype = weights[0].dtype if weights else (x.dtype if x.dtype.kind == "f" else F32)
        with _nn_dtype(dtype):
            layer = make()
        layer.train() if train else layer.eval()
        return _bind(layer, weights)(x)
    return fn


def _np_layer_norm(v, w=None, b=None, eps=1e-5):
    mu = v.mean(axis=-1, keepdims=True) if v.size else v.sum(axis=-1, keepdims=True)
    var = ((v - mu) ** 2).mean(axis=-1, keepdims=True) if v.size else mu
    out = (v - mu) / np.sqrt(var + eps)
    return out if w is None else out * w + b


def _np_softmax(v, axis=-1):
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_mha(q_in, k_in, v_in, heads, ws, mask=None):
    wq, bq, wk, bk, wv, bv, wo, bo = (f64(w) for w in ws)
    b, sq, e = q_in.shape
    d = e // heads

    def split(t):
        return t.reshape(t.shape[0], t.shape[1], heads, d).transpose(0, 2, 1, 3)
    q = split(f64(q_in) @ wq + bq) * d ** -0.5
    k, v = split(f64(k_in) @ wk + bk), split(f64(v_in) @ wv + bv)
    scores = q @ k.transpose(0, 1, 3, 2)
    if mask is not None:
        scores = scores + (mask.astype(np.float64) - 1.0) * 1e9 if mask.dtype == B else \
            scores + mask
    out = (_np_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, sq, e)
    return out @ wo + bo


def _np_encoder_layer(x, heads, ws, pre=False, act=_relu):
    attn, (w1, b1, w2, b2, g1, n1, g2, n2) = ws[:8], [f64(w) for w in ws[8:]]
    src = f64(x)
    h = _np_layer_norm(src, g1, n1) if pre else src
    src = src + _np_mha(h, h, h, heads, attn)
    if not pre:
        src = _np_layer_norm(src, g1, n1)
    h = _np_layer_norm(src, g2, n2) if pre else src
    src = src + act(h @ w1 + b1) @ w2 + b2
    return src if pre else _np_layer_norm(src, g2, n2)


def _np_bn_train(x, w, b, eps=1e-5):
    v = f64(x)
    mu = v.mean(axis=(0, 2, 3), keepdims=True)
    var = ((v - mu) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    return (v - mu) / np.sqrt(var + eps) * f64(w)[None, :, None, None] + \
        f64(b)[None, :, None, None]


def build_nn_layers():
    # Linear: Paddle's [in, out] weight; 1-d, batched, zero-size and non-contiguous inputs
    for dtype in FLOATS:
        w, b = rand((4, 5), dtype, seed=2), rand((5,), dtype, seed=3)
        for xs in [(4,), (3, 2, 4), (0, 4)]:
            add(Sample("nn.Linear", _layer_fn(lambda: nn.Linear(4, 5)),
                       (rand(xs, dtype, seed=1), w, b),
                       lambda a, ww, bb: (f64(a) @ ww + bb).astype(a.dtype), SUM,
                       terms=lambda a, ww, bb: np.abs(f64(a)) @ np.abs(ww) + np.abs(bb),
                       always=xs == (4,)))
        for label, x in layouts((3, 4), dtype, seed=4)[1:]:
            add(Sample("nn.Linear", _layer_fn(lambda: nn.Linear(4, 5)), (x, w, b),
                       lambda a, ww, bb: (f64(a) @ ww + bb).astype(a.dtype), SUM,
                       terms=lambda a, ww, bb: np.abs(f64(a)) @ np.abs(ww) + np.abs(bb),
                       label=label))
    add(Sample("nn.Linear", _layer_fn(lambda: nn.Linear(4, 3)),
               (rand((2, 4), F64), rand((4, 3), F64, seed=1), rand((3,), F64, seed=2)),
               lambda a, ww, bb: a @ ww + bb, SUM,
               terms=lambda a, ww, bb: np.abs(a) @ np.abs(ww) + np.abs(bb), grad=True))
    add(Sample("nn.Linear", _layer_fn(lambda: nn.Linear(4, 3, bias_attr=False)),
               (rand((2, 4), F64), rand((4, 3), F64, seed=1)), lambda a, ww: a @ ww, SUM,
               terms=lambda a, ww: np.abs(a) @ np.abs(ww), grad=True, label="|no-bias"))
    invalid("nn.Linear", lambda x: nn.Linear(3, 2)(x), [np.ones((2, 4), np.float32)],
            cc.ShapeError)

    # Sequential, LayerList: the layers in order
    def mlp(a, w1, b1, w2, b2):
        return (np.maximum(f64(a) @ w1 + b1, 0) @ w2 + b2).astype(a.dtype)
    for dtype in FLOATS:
        ws = (rand((4, 6), dtype, seed=1), rand((6,), dtype, seed=2),
              rand((6, 2), dtype, seed=3), rand((2,), dtype, seed=4))
        add(Sample("nn.Sequential", _layer_fn(lambda: nn.Sequential(
            nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))), (rand((3, 4), dtype), *ws), mlp,
            CLOSE, apis=("nn.ReLU",), always=dtype == F32))

    class Stack(nn.Layer):
        def __init__(self):
            super().__init__()
            self.layers = nn.LayerList([nn.Linear(4, 6)])
            self.layers.append(nn.Linear(6, 2))

        def forward(self, x):
            for k, layer in enumerate(self.layers):
                x = layer(x).relu() if k == 0 else layer(x)
            return x
    ws = (rand((4, 6), F64, seed=1), rand((6,), F64, seed=2), rand((6, 2), F64, seed=3),
          rand((2,), F64, seed=4))
    add(Sample("nn.LayerList", _layer_fn(Stack), (rand((3, 4), F64), *ws), mlp, CLOSE,
               grad=True))

    # Conv2D: stride, padding, dilation, groups, no bias; zero-size batch; gradients
    def conv_want(stride, padding, dilation, groups):
        def want(x, w, b=None):
            g = groups
            ci, co = x.shape[1] // g, w.shape[0] // g
            parts = [conv2d_loops(f64(x)[:, k * ci:(k + 1) * ci], f64(w)[k * co:(k + 1) * co],
                                  (stride, stride), (padding,) * 4, (dilation, dilation))
                     for k in range(g)]
            out = np.concatenate(parts, axis=1)
            if b is not None:
                out = out + f64(b)[None, :, None, None]
            return out.astype(x.dtype)
        return want
    for stride, padding, dilation, groups, bias in [(1, 0, 1, 1, True), (2, 1, 1, 1, True),
                                                    (1, 2, 2, 1, False), (1, 1, 1, 2, True)]:
        want = conv_want(stride, padding, dilation, groups)

        def make(s=stride, p=padding, d=dilation, g=groups, bias=bias):
            return nn.Conv2D(4, 6, 3, stride=s, padding=p, dilation=d, groups=g,
                             bias_attr=None if bias else False)
        for dtype in FLOATS:
            for n in (2, 0):
                args = (rand((n, 4, 7, 6), dtype, seed=1), rand((6, 4 // groups, 3, 3), dtype,
                                                                 seed=2))
                args += (rand((6,), dtype, seed=3),) if bias else ()
                add(Sample("nn.Conv2D", _layer_fn(make), args, want, CLOSE,
                           always=n == 2 and stride == 2))
        args = (rand((1, 4, 5, 5), F64, seed=1), rand((6, 4 // groups, 3, 3), F64, seed=2))
        args += (rand((6,), F64, seed=3),) if bias else ()
        add(Sample("nn.Conv2D", _layer_fn(make), args, want, CLOSE, grad=True))
    invalid("nn.Conv2D", lambda x: nn.Conv2D(4, 6, 3, groups=4)(x),
            [np.ones((1, 4, 5, 5), np.float32)], cc.ShapeError)
    invalid("nn.Conv2D", lambda x: nn.Conv2D(3, 2, 3)(x), [np.ones((1, 4, 5, 5), np.float32)],
            cc.ShapeError)

    # BatchNorm2D: batch statistics in training mode (gradients through them), the running
    # statistics (bound as arguments here) in eval mode
    for dtype in FLOATS:
        x = rand((3, 2, 4, 5), dtype, seed=1) * 2 + 1
        w, b = rand((2,), dtype, seed=2), rand((2,), dtype, seed=3)
        add(Sample("nn.BatchNorm2D", _layer_fn(lambda: nn.BatchNorm2D(2), train=True),
                   (x, w, b), lambda v, ww, bb: _np_bn_train(v, ww, bb).astype(v.dtype), CLOSE,
                   always=True))
        rm, rv = rand((2,), dtype, seed=4), rand((2,), dtype, 0.5, 2.0, seed=5)
        add(Sample("nn.BatchNorm2D", _layer_fn(lambda: nn.BatchNorm2D(2, epsilon=1e-3)),
                   (x, w, b, rm, rv),
                   lambda v, ww, bb, m, s: ((f64(v) - m[None, :, None, None])
                                            / np.sqrt(f64(s)[None, :, None, None] + 1e-3)
                                            * ww[None, :, None, None] + bb[None, :, None, None]
                                            ).astype(v.dtype), CLOSE, label="|eval"))
    add(Sample("nn.BatchNorm2D", _layer_fn(lambda: nn.BatchNorm2D(2), train=True),
               (rand((2, 2, 3, 3), F64, seed=1), rand((2,), F64, seed=2),
                rand((2,), F64, seed=3)), _np_bn_train, CLOSE, grad=True))
    invalid("nn.BatchNorm2D", lambda x: nn.BatchNorm2D(3)(x), [np.ones((2, 2, 3, 3),
                                                                        np.float32)],
            cc.ShapeError)

    # BatchNorm1D: [N, C] and [N, C, L]
    def bn1d(v, ww, bb):
        v = f64(v)
        axes = (0,) if v.ndim == 2 else (0, 2)
        shape = (1, -1) if v.ndim == 2 else (1, -1, 1)
        mu = v.mean(axis=axes, keepdims=True)
        var = ((v - mu) ** 2).mean(axis=axes, keepdims=True)
        return (v - mu) / np.sqrt(var + 1e-5) * f64(ww).reshape(shape) + \
            f64(bb).reshape(shape)
    for dtype in FLOATS:
        for xs in [(5, 2), (3, 2, 4)]:
            add(Sample("nn.BatchNorm1D", _layer_fn(lambda: nn.BatchNorm1D(2), train=True),
                       (rand(xs, dtype, seed=1), rand((2,), dtype, seed=2),
                        rand((2,), dtype, seed=3)),
                       lambda v, ww, bb: bn1d(v, ww, bb).astype(v.dtype), CLOSE, always=True))
    add(Sample("nn.BatchNorm1D", _layer_fn(lambda: nn.BatchNorm1D(2), train=True),
               (rand((4, 2, 3), F64, seed=1), rand((2,), F64, seed=2), rand((2,), F64, seed=3)),
               bn1d, CLOSE, grad=True))
    invalid("nn.BatchNorm1D", lambda x: nn.BatchNorm1D(2)(x), [np.ones((2, 2, 3, 3),
                                                                        np.float32)],
            cc.ShapeError)

    # LayerNorm
    for dtype in FLOATS:
        for xs in [(2, 3, 4), (0, 4), (4,)]:
            add(Sample("nn.LayerNorm", _layer_fn(lambda: nn.LayerNorm(4)),
                       (rand(xs, dtype, seed=1) * 2 + 1, rand((4,), dtype, seed=2),
                        rand((4,), dtype, seed=3)),
                       lambda v, ww, bb: _np_layer_norm(f64(v), ww, bb).astype(v.dtype), CLOSE,
                       always=xs == (2, 3, 4)))
    add(Sample("nn.LayerNorm", _layer_fn(lambda: nn.LayerNorm(4)),
               (rand((3, 4), F64, seed=1), rand((4,), F64, seed=2), rand((4,), F64, seed=3)),
               lambda v, ww, bb: _np_layer_norm(v, ww, bb), CLOSE, grad=True))
    invalid("nn.LayerNorm", lambda x: nn.LayerNorm(3)(x), [np.ones((2, 4), np.float32)],
            cc.ShapeError)

    # Embedding, padding_idx (negative: from the end) looks up zeros and gets no gradient
    ids = np.array([[1, 4], [0, 3], [4, 4]], np.int64)
    for dtype in FLOATS:
        for pad in (None, 0, -1):
            def want(i, w, pad=pad):
                w = w.copy()
                if pad is not None:
                    w[pad] = 0
                return w[i]
            add(Sample("nn.Embedding", _layer_fn(lambda p=pad: nn.Embedding(5, 3,
                                                                            padding_idx=p)),
                       (ids, rand((5, 3), dtype, seed=1)), want, always=pad == -1))
    add(Sample("nn.Embedding", _layer_fn(lambda: nn.Embedding(5, 3, padding_idx=1)),
               (np.array([1, 2, 2], np.int32), rand((5, 3), F64, seed=1)),
               lambda i, w: np.where(i[:, None] == 1, 0.0, w[i]), grad=True, wrt=(1,),
               grad_want=None))
    invalid("nn.Embedding", lambda x: nn.Embedding(5, 3, padding_idx=5)(x),
            [np.array([1], np.int64)], cc.ShapeError)

    # Dropout: the identity in eval mode and for p = 0, zeros for p = 1
    for dtype in FLOATS:
        x = rand((3, 4), dtype, seed=1)
        add(Sample("nn.Dropout", _layer_fn(lambda: nn.Dropout(0.5)), (x,), lambda v: v,
                   label="|eval", always=True))
        add(Sample("nn.Dropout", _layer_fn(lambda: nn.Dropout(0.0), train=True), (x,),
                   lambda v: v, label="|p0"))
        add(Sample("nn.Dropout", _layer_fn(lambda: nn.Dropout(1.0), train=True), (x,),
                   lambda v: v * np.zeros((), v.dtype), label="|p1"))
    invalid("nn.Dropout", lambda x: nn.Dropout(1.5)(x), [np.ones(2, np.float32)],
            cc.TraceError)

    # activations and shape layers, 0-d to 4-d
    acts = [("nn.ReLU", nn.ReLU, _relu, EXACT),
            ("nn.GELU", nn.GELU, lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2))), CLOSE),
            ("nn.Tanh", nn.Tanh, np.tanh, ULP),
            ("nn.Sigmoid", nn.Sigmoid, lambda v: 1 / (1 + np.exp(-v)), CLOSE),
            ("nn.Silu", nn.Silu, lambda v: v / (1 + np.exp(-v)), CLOSE),
            ("nn.ELU", lambda: nn.ELU(0.5), lambda v: np.where(v > 0, v, 0.5 * np.expm1(v)),
             CLOSE),
            ("nn.LeakyReLU", lambda: nn.LeakyReLU(0.1), lambda v: np.where(v > 0, v, 0.1 * v),
             CLOSE),
            ("nn.Hardtanh", lambda: nn.Hardtanh(-0.5, 1.0), lambda v: np.clip(v, -0.5, 1.0),
             EXACT),
            ("nn.Identity", nn.Identity, lambda v: v, EXACT)]
    for api, make, formula, tol in acts:
        for dtype in FLOATS:
            for xs in [(), (1,), (2, 0), (3, 4)]:
                add(Sample(api, _layer_fn(make), (rand(xs, dtype, seed=1),),
                           lambda v, f=formula: np.asarray(f(f64(v))).astype(v.dtype), tol,
                           always=xs == (3, 4)))
        x = rand((2, 3), F64, seed=1) + 0.05  # (no kinks at 0)
        if api != "nn.Hardtanh":
            add(Sample(api, _layer_fn(make), (x,), lambda v, f=formula: np.asarray(f(v)), tol,
                       grad=True))
    for api, make, axis in [("nn.Softmax", nn.Softmax, -1), ("nn.LogSoftmax",
                                                             lambda: nn.LogSoftmax(0), 0)]:
        log = api == "nn.LogSoftmax"
        for dtype in FLOATS:
            add(Sample(api, _layer_fn(make), (rand((3, 4), dtype, seed=1),),
                       lambda v, a=axis, lg=log: (np.log(_np_softmax(f64(v), a)) if lg else
                                                  _np_softmax(f64(v), a)).astype(v.dtype),
                       CLOSE, always=True))
        add(Sample(api, _layer_fn(make), (rand((3, 4), F64, seed=1),),
                   lambda v, a=axis, lg=log: np.log(_np_softmax(v, a)) if lg else
                   _np_softmax(v, a), CLOSE, grad=True))
    for dtype in FLOATS:
        x = rand((2, 3, 4, 5), dtype, seed=1)
        add(Sample("nn.Flatten", _layer_fn(nn.Flatten), (x,), lambda v: v.reshape(2, 60),
                   always=True))
        add(Sample("nn.Flatten", _layer_fn(lambda: nn.Flatten(0, 1)), (x,),
                   lambda v: v.reshape(6, 4, 5)))
        add(Sample("nn.MaxPool2D", _layer_fn(lambda: nn.MaxPool2D(2)), (x,),
                   lambda v: v[:, :, :4, :4].reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5)),
                   always=True))
    invalid("nn.MaxPool2D", lambda x: nn.MaxPool2D(2, return_mask=True)(x),
            [np.ones((1, 1, 2, 2), np.float32)], cc.TraceError)

    # MultiHeadAttention: Paddle's q/k/v/out projections, bool and additive masks
    for dtype in FLOATS:
        q, k = rand((2, 3, 8), dtype, seed=1), rand((2, 4, 8), dtype, seed=2)
        ws = tuple(rand(s, dtype, -0.5, 0.5, seed=10 + i) for i, s in
                   enumerate([(8, 8), (8,)] * 4))
        mask = rand((2, 1, 3, 4), B, seed=3)
        mask[..., 0] = True  # (each row keeps one key)

        def mha(query, *w):
            layer = _bind(nn.MultiHeadAttention(8, 2), w).eval()
            return layer(query, query, query)
        add(Sample("nn.MultiHeadAttention", _layer_fn(lambda: nn.MultiHeadAttention(8, 2)),
                   (q, *ws), lambda v, *w: _np_mha(v, v, v, 2, w).astype(v.dtype), CLOSE,
                   always=True))

        def cross(query, key, m, *w):
            with _nn_dtype(query.dtype):
                layer = _bind(nn.MultiHeadAttention(8, 2), w).eval()
            return layer(query, key, key, attn_mask=m)
        add(Sample("nn.MultiHeadAttention", cross, (q, k, mask, *ws),
                   lambda v, kk, m, *w: _np_mha(v, kk, kk, 2, w, m).astype(v.dtype), CLOSE,
                   label="|mask"))
    ws = tuple(rand(s, F64, -0.5, 0.5, seed=10 + i) for i, s in enumerate([(4, 4), (4,)] * 4))
    add(Sample("nn.MultiHeadAttention", _layer_fn(lambda: nn.MultiHeadAttention(4, 2)),
               (rand((1, 3, 4), F64, seed=1), *ws), lambda v, *w: _np_mha(v, v, v, 2, w),
               CLOSE, grad=True))
    invalid("nn.MultiHeadAttention", lambda x: nn.MultiHeadAttention(6, 4)(x),
            [np.ones((1, 2, 6), np.float32)], cc.ShapeError)

    # TransformerEncoderLayer (post- and pre-norm, relu and gelu) and TransformerEncoder, in
    # eval mode (dropout off)
    def enc_weights(dtype, d, ff, seed):
        shapes = [(d, d), (d,)] * 4 + [(d, ff), (ff,), (ff, d), (d,), (d,), (d,), (d,), (d,)]
        return tuple(rand(s, dtype, -0.5, 0.5, seed=seed + i) for i, s in enumerate(shapes))
    gelu = lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2)))  # noqa: E731
    for pre, act, actf in [(False, "relu", _relu), (True, "gelu", gelu)]:
        for dtype in FLOATS:
            add(Sample("nn.TransformerEncoderLayer", _layer_fn(
                lambda p=pre, a=act: nn.TransformerEncoderLayer(8, 2, 16, activation=a,
                                                                normalize_before=p)),
                (rand((2, 3, 8), dtype, seed=1), *enc_weights(dtype, 8, 16, 20)),
                lambda v, *w, p=pre, f=actf: _np_encoder_layer(v, 2, w, p, f).astype(v.dtype),
                CLOSE, label=f"|{act}", always=True))
        add(Sample("nn.TransformerEncoderLayer", _layer_fn(
            lambda p=pre, a=act: nn.TransformerEncoderLayer(4, 2, 6, activation=a,
                                                            normalize_before=p)),
            (rand((1, 2, 4), F64, seed=1), *enc_weights(F64, 4, 6, 20)),
            lambda v, *w, p=pre, f=actf: _np_encoder_layer(v, 2, w, p, f), CLOSE, grad=True,
            label=f"|{act}"))
    for dtype in FLOATS:
        ws = enc_weights(dtype, 8, 16, 20) + enc_weights(dtype, 8, 16, 40) + \
            (rand((8,), dtype, seed=60), rand((8,), dtype, seed=61))

        def encoder_want(v, *w):
            h = _np_encoder_layer(_np_encoder_layer(v, 2, w[:16]), 2, w[16:32])
            return _np_layer_norm(h, f64(w[32]), f64(w[33])).astype(v.dtype)
        add(Sample("nn.TransformerEncoder", _layer_fn(lambda: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16), 2, nn.LayerNorm(8))),
            (rand((2, 3, 8), dtype, seed=1), *ws), encoder_want, CLOSE, always=True))
    invalid("nn.TransformerEncoderLayer",
            lambda x: nn.TransformerEncoderLayer(4, 2, 8, activation="tanh")(x),
            [np.ones((1, 2, 4), np.float32)], cc.TraceError)


build_nn_layers()


# -- issue 24: cc.eye, cc.linspace, cc.einsum, F.one_hot, F.pad, F.avg_pool2d, F.batch_norm,
#    F.binary_cross_entropy_with_logits, F.nll_loss, F.softplus -----------------------------------
def _linspace_ref(start, stop, num, dtype):
    """Paddle's kernel: float64 step, the first half from start, the second from stop."""
    if num == 1:
        return np.array([start], np.float64).astype(dtype)
    step = (float(stop) - float(start)) / (num - 1)
    out = [start + step * i if i < num // 2 else stop - step * (num - 1 - i)
           for i in range(num)]
    return np.array(out, np.float64).astype(dtype)


def _einsum_src(eq, n):
    names = [f"x{i}" for i in range(n)]
    ns = {"cc": cc}
    src = f"def einsum_{n}({', '.join(names)}):\n    return cc.einsum({eq!r}, {', '.join(names)})"
    exec(src, ns)  # noqa: S102  (a named signature per operand count: the traced arguments)
    return ns[f"einsum_{n}"]


# (equation, operand shapes): every two-operand kind (batch, contracted, free labels on either
# side, outer products, broadcasting of size 1 and of '...'), one-operand forms, implicit outputs,
# three operands, zero-size labels
EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ji,jk->ki", [(4, 3), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),
    ("i,j->ij", [(3,), (4,)]), ("i,i->", [(5,), (5,)]), ("i,i", [(5,), (5,)]),
    ("ij,ij->ij", [(3, 4), (1, 4)]), ("ab,b->a", [(3, 4), (4,)]), ("ab,cd->", [(2, 3), (4, 5)]),
    ("ab,cd->da", [(2, 3), (4, 5)]), ("bij,jk->bki", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]), ("...i,i", [(2, 3, 4), (4,)]),
    ("i...,i...->...", [(3, 2), (3, 2)]),
    ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]), ("ij->j", [(3, 4)]), ("ba", [(2, 3)]),
    ("...", [(2, 3)]), ("i", [(0,)]), ("", [()]), (",->", [(), ()]), ("i,->i", [(3,), ()]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]), ("i,i", [(0,), (0,)]),
    ("ij,jk", [(0, 3), (3, 2)]), ("ij,jk->ik", [(2, 0), (0, 3)]), ("ij,j->i", [(1, 1), (1,)]),
    ("Ab,bA->A", [(3, 2), (2, 3)]),
    # repeated labels: diagonals, traces
    ("ii->i", [(3, 3)]), ("ii", [(4, 4)]), ("iij->ij", [(2, 2, 3)]), ("iii", [(2, 2, 2)]),
    ("ij,ii->j", [(3, 4), (3, 3)]), ("jii,ki->jk", [(2, 3, 3), (4, 3)]), ("ii", [(0, 0)]),
    ("i...i", [(3, 2, 3)]), ("ijij->", [(2, 3, 2, 3)]),
]


def build_issue24():
    # cc.eye
    for dtype in [None, "float32", "float64", "int32", "int64", "bool"]:
        d = F32 if dtype is None else np.dtype(dtype)
        for shape in [(3,), (2, 4), (4, 2), (0,), (1,), (0, 3), (2, 0)]:
            add(Sample("cc.eye", lambda s=shape, dt=dtype: cc.eye(*s, dtype=dt), (),
                       lambda s=shape, d=d: np.eye(*s, dtype=d)))
    invalid("cc.eye", lambda: cc.eye(-1), [], cc.TraceError)
    invalid("cc.eye", lambda: cc.eye(2, 2.5), [], cc.TraceError)
    # cc.linspace (Paddle's kernel rule, both ends exact)
    for args, dtype in [((0, 1, 5), None), ((0, 10, 4), "int32"), ((1, 0, 0), None),
                        ((-1, 1, 1), None), ((0, 1, 2), "float64"), ((0.1, 0.7, 7), "float64"),
                        ((0.1, 0.7, 7), None), ((3, -3, 8), "int64"), ((-5, 5, 11), "float32"),
                        ((1e-3, 1e3, 6), "float64"), ((2, 2, 3), None)]:
        d = F32 if dtype is None else np.dtype(dtype)
        add(Sample("cc.linspace", lambda a=args, dt=dtype: cc.linspace(*a, dtype=dt), (),
                   lambda a=args, d=d: _linspace_ref(*a, d)))
    for dtype in FLOATS:   # 0-d tensor ends: a new value doesn't retrace
        add(Sample("cc.linspace", lambda a, b: cc.linspace(a, b, 6), (np.array(-2.5, dtype),
                                                                      np.array(4.0, dtype)),
                   lambda a, b: _linspace_ref(float(a), float(b), 6, F32), label="|tensor"))
    invalid("cc.linspace", lambda: cc.linspace(0, 1, -1), [], cc.TraceError)
    invalid("cc.linspace", lambda: cc.linspace(0, 1, 2.5), [], cc.TraceError)
    invalid("cc.linspace", lambda a: cc.linspace(a, 1, 3), [np.ones(2)], cc.ShapeError)

    # cc.einsum against np.einsum (SUM: one matmul's accumulation)
    for k, (eq, shapes) in enumerate(EINSUM_CASES):
        fn = _einsum_src(eq, len(shapes))

        def want(*xs, eq=eq):
            return np.asarray(np.einsum(eq, *[f64(x) for x in xs])).astype(xs[0].dtype)

        def terms(*xs, eq=eq):
            return np.abs(np.einsum(eq, *[np.abs(f64(x)) for x in xs]))
        for dtype in FLOATS:
            args = tuple(rand(s, dtype, seed=k + j) for j, s in enumerate(shapes))
            add(Sample("cc.einsum", fn, args, want, SUM, terms=terms))
        if shapes[0] and len(shapes[0]) >= 2:   # a transposed / stepped caller array
            for label, x in layouts(shapes[0], F32, seed=k)[1:3]:
                args = (x,) + tuple(rand(s, F32, seed=k + j + 1) for j, s in
                                    enumerate(shapes[1:]))
                add(Sample("cc.einsum", fn, args, want, SUM, terms=terms, label=label))
        if all(int(np.prod(s)) > 0 for s in shapes) and any(len(s) for s in shapes):
            add(Sample("cc.einsum", fn, tuple(rand(s, F64, seed=k + j) for j, s in
                                              enumerate(shapes)), want, SUM, terms=terms,
                       grad=True))
    add(Sample("cc.einsum", lambda a, b: cc.einsum("ij,jk", [a, b]),
               (rand((2, 3), F32), rand((3, 2), F32, seed=1)), lambda a, b: (f64(a) @ b)
               .astype(F32), SUM, terms=lambda a, b: np.abs(a) @ np.abs(b), label="|list"))
    add(Sample("cc.einsum", lambda a, b: cc.einsum(" i j , j ", a, b),
               (rand((2, 3), I64), rand((3,), I64)), lambda a, b: a @ b, label="|int"))
    invalid("cc.einsum", lambda a: cc.einsum("ii->i", a), [np.ones((3, 2))], cc.ShapeError)
    invalid("cc.einsum", lambda a: cc.einsum("i.j->i", a), [np.ones((3, 3))], cc.TraceError)
    invalid("cc.einsum", lambda a: cc.einsum("ij,jk->ik", a), [np.ones((3, 3))], cc.TraceError)
    invalid("cc.einsum", lambda a: cc.einsum("ij->ii", a), [np.ones((3, 3))], cc.TraceError)
    invalid("cc.einsum", lambda a: cc.einsum("ij->k", a), [np.ones((3, 3))], cc.TraceError)
    invalid("cc.einsum", lambda a: cc.einsum("i1->i", a), [np.ones((3, 3))], cc.TraceError)
    invalid("cc.einsum", lambda a: cc.einsum("i...->i", a), [np.ones((3, 3))], cc.TraceError)
    invalid("cc.einsum", lambda a: cc.einsum("ijk->i", a), [np.ones((3, 3))], cc.ShapeError)
    invalid("cc.einsum", lambda a, b: cc.einsum("ij,jk", a, b), [np.ones((2, 3)),
                                                                 np.ones((4, 2))], cc.ShapeError)

    # F.one_hot: float32 [..., C]
    for lab_dtype in INTS:
        for shape in [(5,), (2, 3), (), (0,), (1, 1)]:
            labels = rand(shape, lab_dtype, 0, 3, seed=len(shape))
            add(Sample("F.one_hot", lambda t: F.one_hot(t, 4), (labels,),
                       lambda v: (v[..., None] == np.arange(4)).astype(F32)))
    add(Sample("F.one_hot", lambda t: F.one_hot(t.t(), num_classes=5),
               (np.array([[0, 4, 2], [3, 1, 1]], I64),),
               lambda v: (v.T[..., None] == np.arange(5)).astype(F32), label="|view"))
    invalid("F.one_hot", lambda t: F.one_hot(t, 3), [np.array([0, 3, 1])], cc.DataError)
    invalid("F.one_hot", lambda t: F.one_hot(t, 3), [np.array([0, -1, 1])], cc.DataError)
    invalid("F.one_hot", lambda t: F.one_hot(t, 3), [np.array([0.0, 1.0])], cc.TraceError)
    invalid("F.one_hot", lambda t: F.one_hot(t, 0), [np.array([0])], cc.TraceError)

    build_issue24_pad()
    build_issue24_pool()
    build_issue24_losses()


def build_issue24_pad():
    np_modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
                "circular": "wrap"}
    # (x shape, Paddle pad list, mode, extra kwargs, NumPy pad_width per axis)
    cases = [
        ((2, 3), [1, 2, 0, 1], "constant", {}, [(1, 2), (0, 1)]),            # 2N: from axis 0
        ((2, 3), [1, 2, 0, 1], "constant", {"pad_from_left_axis": False},
         [(0, 1), (1, 2)]),                                                    # 2N: from the last
        ((2, 3, 4), [1, 2], "constant", {}, [(0, 0), (0, 0), (1, 2)]),        # NCL: [left, right]
        ((2, 3, 4), [1, 2, 0, 1], "constant", {}, [(0, 0), (0, 1), (1, 2)]),  # from the last axis
        ((2, 3), [1], "constant", {"value": 2.5}, [(0, 0), (1, 0)]),            # odd: a trailing 0
        ((1, 2, 3, 4), [1, 0, 2, 1], "constant", {"value": -1.0},
         [(0, 0), (0, 0), (2, 1), (1, 0)]),                                    # NCHW
        ((1, 3, 4, 2), [1, 0, 2, 1], "constant", {"data_format": "NHWC"},
         [(0, 0), (2, 1), (1, 0), (0, 0)]),
        ((4,), [0, 3], "constant", {}, [(0, 3)]), ((), [], "constant", {}, []),
        ((0, 3), [1, 1, 0, 2], "constant", {}, [(1, 1), (0, 2)]),
        ((1, 2, 3, 4), [2, 3, 1, 2], "reflect", {}, [(0, 0), (0, 0), (1, 2), (2, 3)]),
        ((1, 2, 5), [4, 1], "reflect", {}, [(0, 0), (0, 0), (4, 1)]),
        ((1, 2, 3, 4), [2, 3, 1, 2], "replicate", {}, [(0, 0), (0, 0), (1, 2), (2, 3)]),
        ((1, 3, 4, 2), [2, 3, 1, 2], "replicate", {"data_format": "NHWC"},
         [(0, 0), (1, 2), (2, 3), (0, 0)]),
        ((1, 2, 3, 4), [4, 1, 3, 0], "circular", {}, [(0, 0), (0, 0), (3, 0), (4, 1)]),
        ((1, 1, 2, 2, 3), [1, 1, 0, 1, 1, 0], "replicate", {},
         [(0, 0), (0, 0), (1, 0), (0, 1), (1, 1)]),
    ]
    for k, (shape, pads, mode, kw, width) in enumerate(cases):
        def want(x, width=width, mode=mode, kw=kw):
            extra = {"constant_values": kw.get("value", 0.0)} if mode == "constant" else {}
            return np.pad(x, width or 0, mode=np_modes[mode], **extra).astype(x.dtype)

        def fn(t, p=pads, m=mode, kw=kw):
            return F.pad(t, p, mode=m, **kw)
        dtypes = ALL if mode == "constant" and "value" not in kw else NUMERIC
        for dtype in dtypes:
            add(Sample("F.pad", fn, (rand(shape, dtype, seed=k),), want))
        for label, x in layouts(shape, F32, seed=k)[1:3]:
            add(Sample("F.pad", fn, (x,), want, label=label))
        if int(np.prod(shape)) > 0:
            add(Sample("F.pad", fn, (rand(shape, F64, seed=k),), want, grad=True))
    invalid("F.pad", lambda t: F.pad(t, [3, 0], mode="reflect"), [np.ones((1, 1, 3))],
            cc.ShapeError)
    invalid("F.pad", lambda t: F.pad(t, [1, 1], mode="wrap"), [np.ones((1, 1, 3))],
            cc.TraceError)
    invalid("F.pad", lambda t: F.pad(t, [1, 1, 1, 1], mode="reflect"), [np.ones((1, 1, 3))],
            cc.TraceError)
    invalid("F.pad", lambda t: F.pad(t, [1, 1, 1, 1, 1, 1], mode="constant"), [np.ones((2, 3))],
            cc.TraceError)
    invalid("F.pad", lambda t: F.pad(t, [-1, 1]), [np.ones((2, 3))], cc.TraceError)
    invalid("F.pad", lambda t: F.pad(t, [1, 1], data_format="NHWC"), [np.ones((1, 2, 3))],
            cc.TraceError)


def _avg_pool_ref(x, kernel, stride, pads, ceil_mode, exclusive, divisor, nhwc):
    """Direct loops over Paddle's windows: a window's part outside the input adds nothing; its
    divisor is the covered input count (exclusive), kh*kw clipped at the input plus its top /
    left padding (not exclusive: Paddle's kernel, checked against Paddle 3.3), or the
    override."""
    v = f64(x).transpose(0, 3, 1, 2) if nhwc else f64(x)
    n, c, h, w = v.shape
    (kh, kw), (sh, sw), (t, b, left, r) = kernel, stride, pads

    def size(n_in, k, s, lo, hi):
        span = n_in + lo + hi - k
        return -(-span // s) + 1 if ceil_mode else span // s + 1
    ho, wo = size(h, kh, sh, t, b), size(w, kw, sw, left, r)
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            hs, ws = i * sh - t, j * sw - left
            h0, h1, w0, w1 = max(hs, 0), min(hs + kh, h), max(ws, 0), min(ws + kw, w)
            # (Paddle clips a non-exclusive window's end at the input + its FIRST padding)
            cnt = divisor or ((h1 - h0) * (w1 - w0) if exclusive else
                              (min(hs + kh, h + t) - hs) * (min(ws + kw, w + left) - ws))
            out[:, :, i, j] = v[:, :, h0:h1, w0:w1].sum(axis=(2, 3)) / cnt
    return out.transpose(0, 2, 3, 1) if nhwc else out


def build_issue24_pool():
    # (x shape, kernel, stride, padding (the call's), pads (t, b, l, r), ceil, exclusive, divisor)
    cases = [
        ((2, 3, 6, 6), 2, None, 0, (0, 0, 0, 0), False, True, None),
        ((1, 2, 5, 7), 3, 2, 1, (1, 1, 1, 1), False, True, None),
        ((1, 2, 5, 7), 3, 2, 1, (1, 1, 1, 1), False, False, None),
        ((1, 2, 6, 7), (2, 3), (2, 1), [1, 0], (1, 1, 0, 0), True, True, None),
        ((1, 2, 5, 7), (2, 3), (2, 2), [0, 1, 1, 0], (0, 1, 1, 0), True, False, None),
        ((1, 1, 4, 4), 2, 1, 1, (1, 1, 1, 1), False, True, 3.0),
        ((1, 1, 1, 1), 1, 1, 0, (0, 0, 0, 0), False, True, None),
        ((0, 2, 4, 4), 2, 2, 0, (0, 0, 0, 0), False, True, None),
    ]
    for k, (shape, kernel, stride, padding, pads, ceil, excl, div) in enumerate(cases):
        kk = (kernel, kernel) if isinstance(kernel, int) else kernel
        st = kk if stride is None else (stride, stride) if isinstance(stride, int) else stride
        for nhwc in (False, True):
            def want(x, kk=kk, st=st, pads=pads, ceil=ceil, excl=excl, div=div, nhwc=nhwc):
                return _avg_pool_ref(x, kk, st, pads, ceil, excl, div, nhwc).astype(x.dtype)

            def terms(x, want=want):
                return want(np.abs(f64(x)))

            def fn(t, kernel=kernel, stride=stride, padding=padding, ceil=ceil, excl=excl,
                   div=div, nhwc=nhwc):
                return F.avg_pool2d(t, kernel, stride, padding, ceil_mode=ceil, exclusive=excl,
                                    divisor_override=div,
                                    data_format="NHWC" if nhwc else "NCHW")
            xshape = (shape[0], shape[2], shape[3], shape[1]) if nhwc else shape
            for dtype in FLOATS:
                add(Sample("F.avg_pool2d", fn, (rand(xshape, dtype, seed=k),), want, SUM,
                           terms=terms))
            if not nhwc:
                for label, x in layouts(xshape, F32, seed=k)[1:3]:
                    add(Sample("F.avg_pool2d", fn, (x,), want, SUM, terms=terms, label=label))
            if shape[0] and not nhwc or k == 3:
                add(Sample("F.avg_pool2d", fn, (rand(xshape, F64, seed=k),), want, SUM,
                           terms=terms, grad=True))
    invalid("F.avg_pool2d", lambda t: F.avg_pool2d(t, 5), [np.ones((1, 1, 3, 3))], cc.ShapeError)
    invalid("F.avg_pool2d", lambda t: F.avg_pool2d(t, 2), [np.ones((1, 3, 3))], cc.ShapeError)
    invalid("F.avg_pool2d", lambda t: F.avg_pool2d(t, 2), [np.ones((1, 1, 3, 3), I32)],
            cc.TraceError)
    invalid("F.avg_pool2d", lambda t: F.avg_pool2d(t, 2, data_format="NCL"),
            [np.ones((1, 1, 3, 3))], cc.TraceError)


def _bn_ref(x, rm, rv, w, b, batch, momentum, eps, axis):
    """(y, running mean afterwards, running var afterwards), Paddle's rule, float64."""
    v = f64(x)
    axes = tuple(i for i in range(v.ndim) if i != axis)
    shape = [1] * v.ndim
    shape[axis] = -1
    if batch:
        mean, var = v.mean(axis=axes), v.var(axis=axes)
        rm = (f64(rm) * momentum + mean * (1 - momentum)).astype(rm.dtype)
        rv = (f64(rv) * momentum + var * (1 - momentum)).astype(rv.dtype)
    else:
        mean, var = f64(rm), f64(rv)
    y = (v - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if w is not None:
        y = y * f64(w).reshape(shape)
    if b is not None:
        y = y + f64(b).reshape(shape)
    return y.astype(x.dtype), rm, rv


def build_issue24_losses():
    # F.batch_norm: eval (running statistics) and training (batch statistics, the running
    # arrays updated in place: here copies made in the trace, returned to be checked; the
    # caller's arrays are checked in tests/compiler/test_functions_paddle.py)
    for shape, fmt in [((4, 3), "NC"), ((2, 3, 5), "NCL"), ((2, 3, 4, 5), "NCHW"),
                       ((2, 4, 5, 3), "NHWC"), ((2, 5, 3), "NLC"), ((1, 3, 1, 1), "NCHW")]:
        axis = 1 if fmt[1] == "C" else len(shape) - 1
        c = shape[axis]
        for dtype in FLOATS:
            x = rand(shape, dtype, seed=1) * 2 + 1
            rm, rv = rand((c,), dtype, seed=2), rand((c,), dtype, 0.5, 2, seed=3)
            w, b = rand((c,), dtype, seed=4), rand((c,), dtype, seed=5)
            add(Sample("F.batch_norm", lambda t, m, v, ww, bb, f=fmt:
                       F.batch_norm(t, m, v, ww, bb, data_format=f), (x, rm, rv, w, b),
                       lambda *a, ax=axis: _bn_ref(*a, False, 0.9, 1e-5, ax)[0], CLOSE))

            def train(t, m, v, ww, f=fmt):
                m, v = m * 1.0, v * 1.0
                return F.batch_norm(t, m, v, ww, training=True, momentum=0.8, data_format=f), m, v
            add(Sample("F.batch_norm", train, (x, rm, rv, w),
                       lambda t, m, v, ww, ax=axis: _bn_ref(t, m, v, ww, None, True, 0.8, 1e-5,
                                                            ax), CLOSE, label="|train"))
        x = rand(shape, F64, seed=1) * 2 + 1
        rm, rv = rand((c,), F64, seed=2), rand((c,), F64, 0.5, 2, seed=3)
        w, b = rand((c,), F64, seed=4), rand((c,), F64, seed=5)
        if int(np.prod(shape)) > c:
            add(Sample("F.batch_norm", lambda t, m, v, ww, bb, f=fmt:
                       F.batch_norm(t, m * 1.0, v * 1.0, ww, bb, training=True, data_format=f),
                       (x, rm, rv, w, b),
                       lambda *a, ax=axis: _bn_ref(*a, True, 0.9, 1e-5, ax)[0], CLOSE,
                       grad=True, wrt=(0, 3, 4), label="|train"))
        add(Sample("F.batch_norm", lambda t, m, v, ww, bb, f=fmt:
                   F.batch_norm(t, m, v, ww, bb, data_format=f), (x, rm, rv, w, b),
                   lambda *a, ax=axis: _bn_ref(*a, False, 0.9, 1e-5, ax)[0], CLOSE, grad=True))
    # use_global_stats overrides `training` (Paddle)
    x, rm, rv = rand((3, 2), F32, seed=1), rand((2,), F32, seed=2), rand((2,), F32, 1, 2, seed=3)
    add(Sample("F.batch_norm", lambda t, m, v: F.batch_norm(t, m, v, training=True,
                                                            use_global_stats=True),
               (x, rm, rv), lambda t, m, v: _bn_ref(t, m, v, None, None, False, .9, 1e-5, 1)[0],
               CLOSE, label="|global"))

    def batch_stats_in_eval(t, m, v):
        m, v = m * 1.0, v * 1.0
        return F.batch_norm(t, m, v, use_global_stats=False), m, v
    add(Sample("F.batch_norm", batch_stats_in_eval, (x, rm, rv),
               lambda t, m, v: _bn_ref(t, m, v, None, None, True, .9, 1e-5, 1), CLOSE,
               label="|batch-stats"))
    invalid("F.batch_norm", lambda t, m, v: F.batch_norm(t, m, v),
            [np.ones((2, 3)), np.ones(2), np.ones(3)], cc.ShapeError)
    invalid("F.batch_norm", lambda t, m, v: F.batch_norm(t, m, v, data_format="CHW"),
            [np.ones((2, 3)), np.ones(3), np.ones(3)], cc.TraceError)
    invalid("F.batch_norm", lambda t, m, v: F.batch_norm(t, m, v),
            [np.ones((2, 3), I32), np.ones(3), np.ones(3)], cc.TraceError)

    # F.binary_cross_entropy_with_logits: stable at any logit; the gradient at 0 is
    # sigmoid(0) - label
    def bce(x, y, w=None, pw=None, reduction="mean"):
        v, t = f64(x), f64(y)
        pos = 1.0 if pw is None else 1 + (f64(pw) - 1) * t
        loss = (1 - t) * v + pos * np.logaddexp(0.0, -v)
        if w is not None:
            loss = loss * f64(w)
        out = {"mean": loss.mean() if loss.size else np.nan, "sum": loss.sum(),
               "none": loss}[reduction]
        return np.asarray(out).astype(x.dtype)
    for reduction in ("mean", "sum", "none"):
        for dtype in FLOATS:
            x = np.concatenate([rand((10,), dtype, -5, 5),
                                np.array([0, -0.0, 40, -40, 200, -200], dtype)]).reshape(4, 4)
            y = rand((4, 4), dtype, 0, 1, seed=2)
            w, pw = rand((4,), dtype, 0, 2, seed=3), rand((4,), dtype, 0.5, 3, seed=4)
            add(Sample("F.binary_cross_entropy_with_logits",
                       lambda a, b, r=reduction: F.binary_cross_entropy_with_logits(
                           a, b, reduction=r), (x, y),
                       lambda a, b, r=reduction: bce(a, b, reduction=r), CLOSE))
            add(Sample("F.binary_cross_entropy_with_logits",
                       lambda a, b, ww, p, r=reduction: F.binary_cross_entropy_with_logits(
                           a, b, ww, r, p), (x, y, w, pw),
                       lambda a, b, ww, p, r=reduction: bce(a, b, ww, p, r), CLOSE,
                       label="|weights"))
        x = np.array([[0.0, 1.5, -2.0], [3.0, -0.5, 0.0]])
        y = np.array([[1.0, 0.0, 0.3], [0.5, 1.0, 0.0]])
        add(Sample("F.binary_cross_entropy_with_logits",
                   lambda a, b, p, r=reduction: F.binary_cross_entropy_with_logits(
                       a, b, reduction=r, pos_weight=p), (x, y, np.array([2.0, 0.5, 1.0])),
                   lambda a, b, p, r=reduction: bce(a, b, pw=p, reduction=r), CLOSE, grad=True))
    add(Sample("F.binary_cross_entropy_with_logits",
               lambda a, b: F.binary_cross_entropy_with_logits(a, b), (rand((0, 3), F32),
                                                                       rand((0, 3), F32)),
               lambda a, b: bce(a, b), CLOSE, label="|empty"))
    for dtype in FLOATS:   # 0-d and size-1
        for shape in [(), (1,)]:
            args = (rand(shape, dtype, seed=5), rand(shape, dtype, 0, 1, seed=6))
            add(Sample("F.binary_cross_entropy_with_logits",
                       lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="none"),
                       args, lambda a, b: bce(a, b, reduction="none"), CLOSE))
    invalid("F.binary_cross_entropy_with_logits",
            lambda a, b: F.binary_cross_entropy_with_logits(a, b), [np.ones(3), np.ones(2)],
            cc.ShapeError)
    invalid("F.binary_cross_entropy_with_logits",
            lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="avg"),
            [np.ones(3), np.ones(3)], cc.TraceError)

    # F.nll_loss
    def nll(x, lab, w=None, ignore_index=-100, reduction="mean"):
        v = np.moveaxis(f64(x), 1, -1)
        lab = np.asarray(lab)
        keep = lab != ignore_index
        safe = np.where(keep, lab, 0)
        picked = np.take_along_axis(v, safe[..., None], -1)[..., 0]
        rw = (np.ones(v.shape[-1]) if w is None else f64(w))[safe] * keep
        loss = -np.where(keep, picked, 0.0) * rw
        if reduction == "none":
            return loss.astype(x.dtype)
        if reduction == "sum":
            return np.asarray(loss.sum()).astype(x.dtype)
        total = rw.sum()
        return np.asarray(loss.sum() / (total if total != 0 else 1.0)).astype(x.dtype)
    for reduction in ("mean", "sum", "none"):
        for dtype in FLOATS:
            for lab_dtype in INTS:
                x = _log_softmax(rand((5, 4), dtype), 1)
                lab = np.array([0, 3, 1, 1, 2], lab_dtype)
                add(Sample("F.nll_loss", lambda a, b, r=reduction: F.nll_loss(a, b, reduction=r),
                           (x, lab), lambda a, b, r=reduction: nll(a, b, reduction=r), CLOSE))
            x = rand((2, 3, 4), dtype)
            x[0, 1, 2] = -np.inf     # log(0) at a class no label picks: no NaN
            lab = np.array([[0, 2, 0, -1], [1, 1, -1, 2]], I64)
            w = rand((3,), dtype, 0.5, 2, seed=2)
            add(Sample("F.nll_loss", lambda a, b, ww, r=reduction: F.nll_loss(
                a, b, ww, ignore_index=-1, reduction=r), (x, lab, w),
                lambda a, b, ww, r=reduction: nll(a, b, ww, -1, r), CLOSE, label="|K-dim"))
        x = rand((4, 3), F64)
        lab = np.array([2, 0, 1, 0])
        add(Sample("F.nll_loss", lambda a, b, ww, r=reduction: F.nll_loss(a, b, ww, 1, r),
                   (x, lab, rand((3,), F64, 0.5, 2, seed=3)),
                   lambda a, b, ww, r=reduction: nll(a, b, ww, 1, r), CLOSE, grad=True,
                   wrt=(0,)))
    for reduction in ("mean", "sum", "none"):   # no rows; one row of one class
        for shape in [(0, 3), (1, 1)]:
            add(Sample("F.nll_loss", lambda a, b, r=reduction: F.nll_loss(a, b, reduction=r),
                       (rand(shape, F32), np.zeros(shape[0], I64)),
                       lambda a, b, r=reduction: nll(a, b, reduction=r), CLOSE,
                       label="|edge"))
    add(Sample("F.nll_loss", lambda a, b: F.nll_loss(a, b, ignore_index=0),
               (rand((3, 2), F32), np.zeros(3, I64)), lambda a, b: np.zeros((), F32),
               label="|all-ignored"))
    invalid("F.nll_loss", lambda a, b: F.nll_loss(a, b), [np.ones((2, 3)), np.array([0, 3])],
            cc.DataError)
    invalid("F.nll_loss", lambda a, b: F.nll_loss(a, b), [np.ones((2, 3)), np.array([0])],
            cc.ShapeError)
    invalid("F.nll_loss", lambda a, b: F.nll_loss(a, b), [np.ones(3), np.array(0)],
            cc.ShapeError)

    # F.softplus: linear above the threshold, never an overflowing exp
    def softplus(x, beta=1.0, threshold=20.0):
        v = f64(x)
        xb = (x * np.asarray(beta, x.dtype)).astype(x.dtype) if beta != 1 else x
        soft = np.log1p(np.exp(np.where(xb > threshold, 0.0, f64(xb)))) / beta
        return np.where(xb > threshold, v, soft).astype(x.dtype)
    for beta, threshold in [(1, 20), (2, 20), (0.5, 3), (1, 1)]:
        for dtype in FLOATS:
            for shape in [(3, 4), (), (0, 2)]:
                add(Sample("F.softplus", lambda t, b=beta, th=threshold: F.softplus(t, b, th),
                           (rand(shape, dtype, -30, 30, seed=len(shape)),),
                           lambda v, b=beta, th=threshold: softplus(v, b, th), CLOSE))
            x = np.array([0.0, -0.0, 1e4, -1e4, 88.0, -88.0, 19.5, 21.0, np.inf, -np.inf, np.nan],
                         dtype)
            add(Sample("F.softplus", lambda t, b=beta, th=threshold: F.softplus(
                t, beta=b, threshold=th), (x,), lambda v, b=beta, th=threshold:
                softplus(v, b, th), CLOSE, label="|extreme"))
        add(Sample("F.softplus", lambda t, b=beta, th=threshold: F.softplus(t, b, th),
                   (rand((3, 4), F64, -4, 4),), lambda v, b=beta, th=threshold:
                   softplus(v, b, th), CLOSE, grad=True))
    invalid("F.softplus", lambda t: F.softplus(t), [np.ones(3, I32)], cc.TraceError)


build_issue24()


# == issue 24: sort, argsort, topk (the argsort primitive; CONVENTIONS.md "sort order") =========
def _order(x, axis, descending):
    """The pinned order, written independently of the registry: Python's stable `sorted` of
    each row by (is NaN, value) (its `reverse=True` keeps equal elements in order too), so
    NaN sorts after every number and descending puts NaNs first."""
    x = np.asarray(x)
    if x.ndim == 0 or x.size == 0:
        return np.zeros(x.shape, I64)

    def row(r):
        key = [(bool(v != v), 0 if v != v else v) for v in r.tolist()]
        return np.array(sorted(range(len(r)), key=key.__getitem__, reverse=descending), I64)
    moved = np.moveaxis(x, axis, -1)
    out = np.array([row(r) for r in moved.reshape(-1, moved.shape[-1])], I64)
    return np.moveaxis(out.reshape(moved.shape), -1, axis)


def _sorted(x, axis, descending):
    return np.take_along_axis(x, _order(x, axis, descending), axis) if np.ndim(x) else x.copy()


def _topk(x, k, axis, largest):
    if np.ndim(x) == 0:
        return x.copy(), np.zeros((), I64)
    idx = np.take(_order(x, axis, largest), np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis), idx


def build_sorting():
    for dtype in NUMERIC:
        # a small range: ties everywhere, which the stable order pins
        for shape, axis in [((3, 7), -1), ((3, 7), 0), ((2, 3, 5), 1), ((5,), 0), ((1,), 0),
                            ((), -1), ((0, 3), 1), ((3, 0), -1), ((2, 1, 3), 1)]:
            for label, x in layouts(shape, dtype, -2, 2, seed=24)[:3]:
                for desc in (False, True):
                    add(Sample("Tensor.argsort", lambda t, a=axis, d=desc: t.argsort(a, d),
                               (x,), lambda v, a=axis, d=desc: _order(v, a, d), label=label))
                add(Sample("Tensor.sort", lambda t, a=axis: t.sort(axis=a, descending=True),
                           (x,), lambda v, a=axis: _sorted(v, a, True), label=label))
        x = rand((4, 6), dtype, -2, 2, seed=25)
        add(Sample("cc.argsort", lambda t: cc.argsort(t, axis=0, stable=True), (x,),
                   lambda v: _order(v, 0, False)))
        add(Sample("cc.sort", lambda t: cc.sort(t), (x,), lambda v: _sorted(v, -1, False)))
        for k, axis, largest in [(3, None, True), (2, 0, False), (6, 1, True), (1, -1, False)]:
            add(Sample("Tensor.topk", lambda t, k=k, a=axis, g=largest: t.topk(k, a, g),
                       (x,), lambda v, k=k, a=axis, g=largest: _topk(v, k, -1 if a is None
                                                                    else a, g)))
        add(Sample("cc.topk", lambda t: cc.topk(t, 2, axis=1, largest=False, sorted=False),
                   (x,), lambda v: _topk(v, 2, 1, False)))
        add(Sample("Tensor.topk", lambda t: t.topk(1), (rand((), dtype, seed=3),),
                   lambda v: _topk(v, 1, -1, True), label="|0d"))
    for dtype in FLOATS:
        # NaN after every number (first when descending), -0.0 and +0.0 a tie, infinities
        s = np.concatenate([specials(dtype), specials(dtype)[::-1]])
        for desc in (False, True):
            add(Sample("Tensor.argsort", lambda t, d=desc: t.argsort(descending=d), (s,),
                       lambda v, d=desc: _order(v, 0, d), label="|special"))
            add(Sample("cc.sort", lambda t, d=desc: cc.sort(t, descending=d), (s,),
                       lambda v, d=desc: _sorted(v, 0, d), label="|special"))
        add(Sample("cc.topk", lambda t: cc.topk(t, 4), (s,), lambda v: _topk(v, 4, 0, True),
                   label="|special"))
        # rows of 300 and 1025 (9 and 11 merge passes, one more than a power of two) and 4
        # (2 passes), strided: every backend runs them
        for shape, axis in [((3, 300), 1), ((1025, 2), 0), ((5, 4), 1)]:
            x = rand(shape, dtype, -50, 50, seed=26).round()
            x[::7] = np.nan if dtype.kind == "f" else x[::7]
            for desc in (False, True):
                add(Sample("Tensor.argsort", lambda t, a=axis, d=desc: t.argsort(a, d), (x,),
                           lambda v, a=axis, d=desc: _order(v, a, d), label="|long",
                           always=True))
            add(Sample("Tensor.topk", lambda t, a=axis: t.t().topk(3, axis=1 - a), (x,),
                       lambda v, a=axis: _topk(v.T, 3, 1 - a, True), label="|long",
                       always=True))
    # gradients: the values' gradient goes back to the positions they came from
    x = rand((3, 5), F64, seed=27)
    add(Sample("Tensor.sort", lambda t: t.sort(axis=0), (x,), lambda v: _sorted(v, 0, False),
               grad=True))
    add(Sample("cc.sort", lambda t: cc.sort(t, descending=True), (x,),
               lambda v: _sorted(v, -1, True), grad=True))
    add(Sample("Tensor.topk", lambda t: t.topk(2)[0], (x,), lambda v: _topk(v, 2, -1, True)[0],
               grad=True))
    add(Sample("cc.topk", lambda t: cc.topk(t, 2, axis=0, largest=False)[0] * 2.0, (x,),
               lambda v: _topk(v, 2, 0, False)[0] * 2.0, grad=True))
    invalid("Tensor.argsort", lambda t: t.argsort(), [np.ones(3, bool)], cc.TraceError)
    invalid("cc.sort", lambda t: cc.sort(t, axis=2), [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.sort", lambda t: t.sort(axis=1.0), [np.ones((2, 3))], cc.TraceError)
    invalid("Tensor.topk", lambda t: t.topk(4), [np.ones((2, 3))], cc.ShapeError)
    invalid("Tensor.topk", lambda t: t.topk(-1), [np.ones((2, 3))], cc.ShapeError)
    invalid("cc.topk", lambda t: cc.topk(t, 0), [np.ones((2, 3))], cc.ShapeError)  # (Paddle)
    invalid("Tensor.topk", lambda t: t.topk(1, axis=0), [np.ones((0, 3))], cc.ShapeError)
    invalid("cc.topk", lambda t, k: cc.topk(t, k), [np.ones(3), np.array(1)], cc.TraceError)
    invalid("cc.argsort", lambda t: cc.argsort(t, axis=-3), [np.ones((2, 3))], cc.ShapeError)


build_sorting()


# -- issue 26: casts and creations in the 16-bit floats and narrow integers ------------------------
# (tests/opdb/narrow.py runs the other samples in these dtypes; a cast or a `dtype=` fixes the
# result's dtype, so its samples are written here, with NumPy's / ml_dtypes' casts as the formula)
def build_narrow_casts():
    import ml_dtypes
    bf16, f16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
    narrow = (bf16, f16, np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16))
    halfway = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -11, 65520.0, 3.4e38,
                        1e-8, -0.0, np.inf, np.nan], F32)
    for dst in narrow:
        if dst.kind in "iu":
            src = rand((3, 4), F32, -100, 100, seed=1).round()
        else:
            src = np.concatenate([halfway, rand((7,), F32, seed=2)])
        add(Sample("Tensor.cast", lambda t, d=dst.name: t.cast(d), (src,),
                   lambda v, d=dst: v.astype(d), label=f"|to-{dst.name}"))
        add(Sample("Tensor.astype", lambda t, d=dst.name: t.astype(d), (src,),
                   lambda v, d=dst: v.astype(d), label=f"|to-{dst.name}"))
        with np.errstate(over="ignore", invalid="ignore"):   # (3.4e38 -> inf, NaN -> int)
            back = src.astype(dst)
        for to in (F32, F64, I32):
            with np.errstate(invalid="ignore"):
                ok = dst.kind in "iu" or to.kind == "f"
            if ok:
                add(Sample("cc.cast", lambda t, d=to.name: cc.cast(t, d), (back,),
                           lambda v, d=to: v.astype(d), label=f"|{dst.name}-to-{to.name}"))
        add(Sample("cc.zeros", lambda d=dst.name: cc.zeros([2, 3], d), (),
                   lambda d=dst: np.zeros((2, 3), d), label=f"|{dst.name}"))
        add(Sample("cc.full", lambda d=dst.name: cc.full([3], 7, d), (),
                   lambda d=dst: np.full((3,), 7, d), label=f"|{dst.name}"))
    # a sum with dtype= widens first (Paddle), here into a 16-bit float: float32 sum, one rounding
    x = rand((4, 5), F32, seed=3)
    add(Sample("Tensor.sum", lambda t: t.sum(axis=1, dtype="bfloat16"), (x,),
               lambda v: v.sum(axis=1).astype(bf16), SUM, terms=lambda v: np.abs(v).sum(axis=1),
               label="|dtype-bf16"))


build_narrow_casts()
