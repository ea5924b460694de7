"""The generic test over the sample database (`samples.py`), on every available backend.

For each sample: value, shape and dtype against its independent NumPy formula, with the op's
tolerance class; the caller's arrays that the call does not write stay untouched; a `_` form
returns the tensor it was called on and leaves the result in the caller's array (also when it
is applied to a non-leaf, and to a parameter inside `no_grad()`); float64 gradients against
central finite differences (or an explicit gradient where the function has a tie or a kink).
Every invalid sample raises a `CompilerError` subclass naming the user's line. A completeness
test fails when a registry op or a public function has no samples.
"""
from __future__ import annotations

import inspect
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
import compiler.nn as nn
import compiler.nn.functional as F
from compiler.ops import COMM_OPS, REGISTRY, is_half

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "passes"))
import samples as db  # noqa: E402
from gradcheck import grad_program, loss_program, numeric_grad, weights  # noqa: E402

from tests.backends import AVAILABLE, BACKENDS  # noqa: E402,F401

F32 = np.dtype(np.float32)
# Tolerances per class (CONVENTIONS.md), per float dtype.
ULPS = 4
SUM_EPS = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
CLOSE_RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-10}


def assert_zero_signs(got, want, what):
    """Where the formula gives a zero, the same zero: assert_array_equal takes -0.0 == +0.0, and
    relu, clip, maximum, round, ... of -0.0 are where backends drift apart."""
    if got.shape != want.shape:
        return  # (the caller reports the shapes)
    zero = want == 0
    if not np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])):
        at = np.argwhere(zero & (np.signbit(got) != np.signbit(want)))[:5].tolist()
        raise AssertionError(f"{what}: the sign of zero differs at {at}: got "
                             f"{got[tuple(np.transpose(at))]}, want "
                             f"{want[tuple(np.transpose(at))]}")


def assert_matches(got, want, tol, terms=None, what="output"):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, type(want)) and len(got) == len(want), (type(got), got)
        terms = terms if isinstance(terms, (tuple, list)) else [terms] * len(want)
        for i, (g, w, t) in enumerate(zip(got, want, terms)):
            assert_matches(g, w, tol, t, f"{what}[{i}]")
        return
    want = np.asarray(want)
    if is_half(want.dtype):   # 16-bit floats: 1 ulp of the dtype beyond the op's tolerance
        assert_half_matches(got, want, tol, terms, what)
        return
    assert isinstance(got, np.ndarray), f"{what}: got a {type(got).__name__}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
    if want.dtype.kind == "f" and tol in (db.EXACT, db.ULP):
        assert_zero_signs(got, want, what)
    if want.dtype.kind != "f" or tol == db.EXACT:
        np.testing.assert_array_equal(got, want, err_msg=what, strict=True)
        return
    # Non-finite values must match exactly (NaN where NaN, inf of the same sign).
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaNs")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{what}: infinities")
    fin = np.isfinite(want)
    g, w = got[fin].astype(np.float64), want[fin].astype(np.float64)
    err = np.abs(g - w)
    if tol == db.ULP:
        # (the spacing at the dtype's maximum is that of the value just below it, not inf)
        top = np.nextafter(np.finfo(want.dtype).max, 0, dtype=want.dtype)
        bound = ULPS * np.spacing(np.minimum(np.abs(want[fin]), top)).astype(np.float64)
    elif tol == db.SUM:
        t = np.broadcast_to(np.asarray(terms, np.float64), want.shape)[fin]
        bound = SUM_EPS[want.dtype] * t + np.finfo(want.dtype).tiny
    else:
        rtol = CLOSE_RTOL[want.dtype]
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        with np.errstate(over="ignore"):
            bound = rtol * (np.abs(w) + scale)
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements outside the {tol} "
                           f"tolerance; got {g[bad][:5]}, want {w[bad][:5]}, "
                           f"bound {bound[bad][:5]}")


def half_spacing(w: np.ndarray, half) -> np.ndarray:
    """The gap between `|w|` (float64 values of a `half` dtype) and the next larger `half`."""
    fi = ml_dtypes.finfo(half)
    a = np.maximum(np.abs(w), float(fi.tiny))
    return np.maximum(np.exp2(np.floor(np.log2(a))) * float(fi.eps),
                      float(fi.smallest_subnormal))


def assert_half_matches(got, want, tol, terms=None, what="output"):
    """1 ulp of the 16-bit dtype beyond the op's float32 tolerance (`narrow.py` says why)."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, type(want)) and len(got) == len(want), (type(got), got)
        terms = terms if isinstance(terms, (tuple, list)) else [terms] * len(want)
        for i, (g, w, t) in enumerate(zip(got, want, terms)):
            assert_half_matches(g, w, tol, t, f"{what}[{i}]")
        return
    want = np.asarray(want)
    if not is_half(want.dtype):
        assert_matches(got, want, tol, terms, what)
        return
    if tol == db.EXACT:
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
        assert_matches(got.astype(F32), want.astype(F32), tol, terms, what)  # (exact widening)
        return
    assert isinstance(got, np.ndarray), f"{what}: got a {type(got).__name__}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaNs")
    inf = np.isinf(w)
    np.testing.assert_array_equal(g[inf], w[inf], err_msg=f"{what}: infinities")
    fin = np.isfinite(w)
    g, w = g[fin], w[fin]
    bound = half_spacing(w, want.dtype)
    if tol == db.SUM and terms is not None:
        t = np.broadcast_to(np.asarray(terms, np.float64), want.shape)[fin]
        # a sum's float32 terms and partial sums are exact enough; its one rounding is not
        # relative to the result but to the terms (cancellation), as each addend's own was
        bound = bound + (float(ml_dtypes.finfo(want.dtype).eps) + SUM_EPS[F32]) * t
    elif tol == db.CLOSE:
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        eps = float(ml_dtypes.finfo(want.dtype).eps)
        bound = bound + (4 * eps + CLOSE_RTOL[F32]) * (np.abs(w) + scale)
    bad = ~(np.abs(g - w) <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements beyond 1 ulp of "
                           f"{want.dtype} ({tol}); got {g[bad][:5]}, want {w[bad][:5]}")


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _same_data(a, b):
    if is_half(a.dtype):   # (bfloat16's NumPy kind is "V": compare the bits)
        return a.dtype == b.dtype and np.array_equal(a.view(np.uint16), b.view(np.uint16))
    return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def _layout_copy(a):
    """A copy with the same strides (a non-contiguous caller array stays non-contiguous)."""
    if not isinstance(a, np.ndarray):
        return a
    if a.flags.c_contiguous or a.size == 0:
        return a.copy()
    lo = sum((d - 1) * s for d, s in zip(a.shape, a.strides) if s < 0)
    hi = sum((d - 1) * s for d, s in zip(a.shape, a.strides) if s > 0)
    buf = np.zeros(hi - lo + a.itemsize, np.uint8)
    out = np.ndarray(a.shape, a.dtype, buffer=buf, offset=-lo, strides=a.strides)
    out[...] = a
    return out


def _traced(sample, record):
    def body(*xs):
        out = sample.fn(*xs)
        who = sample.writes if sample.writes is not None else sample.returns
        if who is not None:
            record["same"] = out is xs[who]
        return out
    body.__signature__ = inspect.signature(sample.fn)
    return body


SAMPLE_IDS = [s.id for s in db.SAMPLES]


def _unique(ids):
    seen: dict[str, int] = {}
    out = []
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
        out.append(i if seen[i] == 1 else f"{i}#{seen[i]}")
    return out


SAMPLE_PARAMS = [pytest.param(s, id=i) for s, i in zip(db.SAMPLES, _unique(SAMPLE_IDS))]

# Native backends compile one module per sample (~15 ms of LLVM each): in the default run they
# take the first FIRST_PER_API samples of every API, one in EVERY_OTHER of the rest and the
# samples marked `always`, which keeps every op and the chosen edge cases at a tenth of the
# time; marked slow, the first SLOW_FIRST and one in SLOW_EVERY (a fifth, with the default
# run's). The numpy backend (the reference: a few ms a sample, but 10k samples) takes, per API
# and set of argument dtypes, the first NUMPY_FIRST, one in NUMPY_EVERY of the rest and the
# `always` ones; the others are marked slow (a native backend's check also compares the numpy
# backend's values with the formula first). So every API keeps each of its dtype combinations
# in the default run. OPDB_ALL_SAMPLES=1 runs them all, none marked.
FIRST_PER_API, EVERY_OTHER = 2, 10
# A native gradient check compiles two modules (the gradient and the loss, whose finite
# differences it takes): ~1.4 s a sample in a loaded run, 316 samples. The default run takes
# the first of each API (the backward ops of the others are the same registry ops, on other
# shapes and attributes), one in EVERY_OTHER and the `always` ones; the second goes to the
# slow run (SLOW_FIRST).
GRAD_FIRST_PER_API = 1
SLOW_FIRST, SLOW_EVERY = 3, 5
NUMPY_FIRST, NUMPY_EVERY = 1, 4
ALL_SAMPLES = os.environ.get("OPDB_ALL_SAMPLES", "") not in ("", "0")


def dtype_key(sample):
    """The API and the set of its array arguments' dtypes: the unit the strides keep."""
    return sample.api, tuple(sorted({a.dtype.name for a in sample.args
                                     if isinstance(a, np.ndarray)}))


def _with_backends(params, first=FIRST_PER_API):
    seen: dict[str, int] = {}
    seen_dtypes: dict = {}
    out = []
    for p in params:
        sample = p.values[0]
        api = sample.api
        k = seen[api] = seen.get(api, -1) + 1
        key = dtype_key(sample)
        j = seen_dtypes[key] = seen_dtypes.get(key, -1) + 1
        native = ALL_SAMPLES or k < first or k % EVERY_OTHER == 0 or sample.always
        for backend in AVAILABLE:
            if backend == "numpy":
                default = ALL_SAMPLES or sample.always or j < NUMPY_FIRST \
                    or j % NUMPY_EVERY == 0
            else:
                default = native
            if default:
                out.append(pytest.param(sample, backend, id=f"{p.id}-{backend}"))
            elif backend == "numpy" or k < SLOW_FIRST or k % SLOW_EVERY == 0:
                out.append(pytest.param(sample, backend, id=f"{p.id}-{backend}",
                                        marks=pytest.mark.slow))
    return out


VALUE_PARAMS = _with_backends(SAMPLE_PARAMS)
GRAD_PARAMS = _with_backends([p for p in SAMPLE_PARAMS if p.values[0].grad], GRAD_FIRST_PER_API)
INPLACE_PARAMS = _with_backends([p for p in SAMPLE_PARAMS if p.values[0].writes is not None])


@pytest.mark.parametrize("sample,backend", VALUE_PARAMS)
def test_value(sample, backend):
    check_value(sample, backend)


# A larger seeded sweep: seed 0 in the default run (the one run of the random samples there),
# the others marked slow; more seeds with OPDB_SWEEP_SEEDS=N (select with -m slow).
SWEEP_SEEDS = int(os.environ.get("OPDB_SWEEP_SEEDS", "2"))


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("seed", [pytest.param(s, marks=[pytest.mark.slow] if s else [])
                                  for s in range(SWEEP_SEEDS)])
def test_seeded_sweep(seed, backend):
    for sample in db.random_samples(seed):
        try:
            check_value(sample, backend)
        except AssertionError as e:
            raise AssertionError(f"{sample.id} (seed {seed}): {e}") from None


def expected(sample, backend):
    """The numpy backend is checked against the sample's formula; any other backend against
    the numpy backend's own values, as CONVENTIONS.md words its tolerances ("within 4 ulp of
    NumPy's")."""
    with np.errstate(all="ignore"):
        want = sample.want(*_copies(sample.args))
    if backend != "numpy":
        reference = cc.compile(_traced(sample, {}), backend="numpy")(*_copies(sample.args))
        assert_matches(reference, want, sample.tol, None if sample.terms is None else
                       sample.terms(*_copies(sample.args)), "the numpy backend")
        want = reference
    return want


def check_value(sample, backend):
    want = expected(sample, backend)
    terms = sample.terms(*_copies(sample.args)) if sample.terms else None
    args = [_layout_copy(a) for a in sample.args]
    record: dict = {}
    out = cc.compile(_traced(sample, record), backend=backend)(*args)
    assert_matches(out, want, sample.tol, terms)
    for i, (before, after) in enumerate(zip(sample.args, args)):
        if not isinstance(before, np.ndarray):
            continue
        if i == sample.writes:
            # the caller's array holds the result, and the call returned that very array
            assert_matches(after, want, sample.tol, terms, "the caller's array afterwards")
            assert out is after, "an inplace op on an argument returns the caller's array"
        else:
            assert _same_data(after, before), f"argument {i} was written"
    if sample.writes is not None or sample.returns is not None:
        assert record["same"], "the `_` form must return the tensor it was called on"


@pytest.mark.parametrize("sample,backend", INPLACE_PARAMS)
def test_inplace_on_non_leaf_and_under_no_grad(sample, backend):
    """The `_` form applied to an intermediate (a copy made in the trace) and, for floats, to a
    parameter (stop_gradient=False) inside `no_grad()`, as an optimizer update does."""
    w = sample.writes
    with np.errstate(all="ignore"):
        want = sample.want(*_copies(sample.args))
    terms = sample.terms(*_copies(sample.args)) if sample.terms else None

    def on_copy(*xs):
        xs = list(xs)
        xs[w] = cc.to_tensor(xs[w])
        copy = xs[w]
        out = sample.fn(*xs)
        assert out is copy
        return out
    on_copy.__signature__ = inspect.signature(sample.fn)
    args = _copies(sample.args)
    out = cc.compile(on_copy, backend=backend)(*args)
    assert_matches(out, want, sample.tol, terms)
    assert _same_data(args[w], sample.args[w]), "the copy's write reached the caller's array"
    if sample.args[w].dtype.kind != "f":
        return

    def update(*xs):
        xs[w].stop_gradient = False
        with cc.no_grad():
            sample.fn(*xs)
        return xs[w] * 1.0
    update.__signature__ = inspect.signature(sample.fn)
    args = _copies(sample.args)
    out = cc.compile(update, backend=backend)(*args)
    assert_matches(args[w], want, sample.tol, terms, "the parameter afterwards")


def _wrt(sample, arrays):
    if sample.wrt is not None:
        return list(sample.wrt)
    return [i for i, a in enumerate(arrays) if a.dtype == np.float64]


@pytest.mark.parametrize("sample,backend", INPLACE_PARAMS)
def test_inplace_off_gives_the_same_values(sample, backend):
    """`inplace="off"` changes buffers, never values."""
    want = expected(sample, backend)
    args = _copies(sample.args)
    out = cc.compile(_traced(sample, {}), backend=backend, inplace="off")(*args)
    terms = sample.terms(*_copies(sample.args)) if sample.terms else None
    assert_matches(out, want, sample.tol, terms)
    assert_matches(args[sample.writes], want, sample.tol, terms, "the caller's array")


def _grad_body(sample):
    w = sample.writes

    def body(*xs):
        if w is not None:  # a `_` form differentiates through a non-leaf
            xs = list(xs)
            xs[w] = xs[w] * 1.0
        return sample.fn(*xs)
    return body


@pytest.mark.parametrize("sample,backend", GRAD_PARAMS)
def test_gradient(sample, backend):
    arrays = [np.asarray(a) for a in sample.args]
    wrt = _wrt(sample, arrays)
    assert wrt, "a gradient sample needs float64 inputs"
    body = _grad_body(sample)
    grad_fn = cc.compile(grad_program(body, wrt), backend=backend)
    loss_fn = cc.compile(loss_program(body), backend=backend)
    loss, grads = grad_fn(*_copies(arrays))
    assert np.allclose(loss, loss_fn(*_copies(arrays)), rtol=1e-12, equal_nan=True)
    with np.errstate(all="ignore"):
        out = sample.want(*_copies(arrays))
    if sample.grad_want is not None:
        want = sample.grad_want(*_copies(arrays), weights(np.asarray(out).shape))
        want = want if isinstance(want, tuple) else (want,)
        for i, g, gw in zip(wrt, grads, want):
            np.testing.assert_allclose(g, gw, rtol=1e-12, atol=1e-15,
                                       err_msg=f"gradient of input {i}")
        return
    for i, g in zip(wrt, grads):
        assert g is not None, f"input {i} got no gradient"
        assert g.shape == arrays[i].shape and g.dtype == arrays[i].dtype, (g.shape, g.dtype)
        np.testing.assert_allclose(g, numeric_grad(loss_fn, arrays, i), rtol=1e-7, atol=1e-8,
                                   err_msg=f"gradient of input {i}")


INVALID_PARAMS = [pytest.param(*entry, id=f"{entry[0]}-{k}") for k, entry in
                  enumerate(db.INVALID)]


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("api,fn,args,error", INVALID_PARAMS)
def test_invalid(api, fn, args, error, backend):
    line = f"samples.py:{fn.__code__.co_firstlineno}"
    with pytest.raises(cc.CompilerError) as info:
        cc.compile(fn, backend=backend)(*_copies(args))
    assert isinstance(info.value, error), f"{api}: {type(info.value).__name__}: {info.value}"
    assert line in str(info.value), f"{api}: the message doesn't name {line}: {info.value}"


# -- completeness --------------------------------------------------------------------------------
# Registry ops with no public function of their own name, and the public API that reaches them
# (the completeness test checks that a sample of that API does).
INTERNAL_OPS = {
    "conv2d_grad_input": "F.conv2d (its gradient with respect to the input)",
    "conv2d_grad_weight": "F.conv2d (its gradient with respect to the weight)",
    "max_pool2d_grad": "F.max_pool2d (its gradient)",
    "gelu_grad": "F.gelu (its gradient)",
    "one_hot": "F.cross_entropy (class-index labels)",
    "slice": "Tensor.__getitem__",
    "slice_scatter": "Tensor.__setitem__ (and the gradient of __getitem__)",
    "constant": "cc.to_tensor",
    "full": "cc.full, cc.zeros, cc.ones, Python scalars",
    "fill": "Tensor.fill_, Tensor.zero_, Tensor.__setitem__ with a scalar",
    "gemm": "Tensor.addmm (and the GEMM-accumulate pass, for weight updates)",
    "philox": "cc.rand, cc.randn, Tensor.uniform_, Tensor.normal_, F.dropout",
}
# Ops no trace makes: a pass builds them from traced ops, and its tests run them.
PASS_MADE_OPS = {"fused": "passes.fusion (tests/passes/test_fusion.py)"}
# Public names that are not ops: what they do is tested elsewhere (autodiff, api, errors).
NOT_OPS = {
    "Tensor": {"backward", "clear_grad", "grad", "stop_gradient", "shape", "dtype", "ndim",
               "size", "name", "is_leaf", "primitive", "reshape_to", "where_mask",
               "where_positive", "full_like_value", "zeros_like_shape", "slice_index",
               "slice_scatter"},
    "cc": {"compile", "trace", "pipeline", "no_grad", "distributed", "CompiledFunction",
           "CompilerError",
           "Graph", "InplaceError", "Loc", "Node", "Program", "ShapeError", "Tensor",
           "TraceError", "Value", "save", "load"},
}
OPERATORS = ("__abs__", "__add__", "__and__", "__eq__", "__floordiv__", "__ge__", "__getitem__",
             "__gt__", "__iadd__", "__ifloordiv__", "__imod__", "__imul__", "__invert__",
             "__isub__", "__iter__", "__itruediv__", "__le__", "__lt__", "__matmul__", "__mod__",
             "__mul__", "__ne__", "__neg__", "__or__", "__pow__", "__radd__", "__rfloordiv__",
             "__rmatmul__", "__rmod__", "__rmul__", "__rpow__", "__rsub__", "__rtruediv__",
             "__setitem__", "__sub__", "__truediv__", "__bool__", "__float__", "__int__",
             "__index__", "__len__")


def public_api() -> set[str]:
    names = {f"Tensor.{n}" for n in dir(cc.Tensor)
             if not n.startswith("_") and n not in NOT_OPS["Tensor"]}
    names |= {f"Tensor.{n}" for n in OPERATORS if n in vars(cc.Tensor)}
    names |= {f"cc.{n}" for n in dir(cc) if not n.startswith("_") and callable(getattr(cc, n))
              and not inspect.ismodule(getattr(cc, n)) and not inspect.isclass(getattr(cc, n))
              and n not in NOT_OPS["cc"]}
    names |= {f"F.{n}" for n in F.__all__}
    names |= {f"nn.{n}" for n in nn.__all__ if inspect.isclass(getattr(nn, n))  # the layers
              and issubclass(getattr(nn, n), nn.Layer) and n != "Layer"}
    return names


def test_every_public_function_has_samples():
    covered = {s.api for s in db.SAMPLES} | {a for s in db.SAMPLES for a in s.apis} \
        | {entry[0] for entry in db.INVALID}
    missing = sorted(public_api() - covered)
    assert not missing, f"public functions without samples: {missing}"
    unknown = sorted(covered - public_api())
    assert not unknown, f"samples name APIs that don't exist: {unknown}"


def _ops_of(fn, args):
    graph = cc.trace(fn, *_copies(args))
    return {n.op for n in graph.nodes}


def test_every_registry_op_has_samples():
    reached: dict[str, set[str]] = {}
    for s in db.SAMPLES:
        fns = [(s.fn, s.args)]
        if s.grad:
            arrays = [np.asarray(a) for a in s.args]
            wrt = _wrt(s, arrays)
            fns.append((grad_program(_grad_body(s), wrt), arrays))
        for fn, args in fns:
            with np.errstate(all="ignore"):
                for op in _ops_of(fn, args):
                    reached.setdefault(op, set()).add(s.api)
    # The communication ops appear only in a data-parallel program (a communicator, ranks):
    # tests/runtime/test_mpi.py runs them on 2 ranks.
    missing = sorted(set(REGISTRY) - set(reached) - COMM_OPS - set(PASS_MADE_OPS))
    assert not missing, f"registry ops no sample reaches: {missing}"
    for op, via in INTERNAL_OPS.items():
        assert op in REGISTRY, f"INTERNAL_OPS names {op}, which is not a registry op"
        api = via.split(" ")[0].rstrip(",")
        assert api in reached[op], f"{op} is said to be covered by {api}, which doesn't reach it"
    # every op either has a public namesake that reaches it or is in the table above
    public = public_api()
    for op in REGISTRY:
        if op in INTERNAL_OPS or op in COMM_OPS or op in PASS_MADE_OPS:
            continue
        namesakes = {f"Tensor.{op}", f"cc.{op}", f"F.{op}"} & public
        assert namesakes & reached[op], (f"{op}: no sample of its namesake ({namesakes}) reaches "
                                         "it; add samples or an INTERNAL_OPS entry")


def test_database_size():
    """The database is what the issue asks for, not a token: every op has several dtypes and
    edge shapes (a guard against a generator silently producing nothing)."""
    assert len(db.SAMPLES) > 2000 and len(db.INVALID) > 100
    assert sum(1 for s in db.SAMPLES if s.grad) > 150
    assert sum(1 for s in db.SAMPLES if s.writes is not None) > 300


@pytest.mark.parametrize("backend", AVAILABLE)
def test_negative_int_power_fails_before_any_write(backend):
    """Issue 13 item 4: the program that raised NumPy's ValueError mid-run, after `b` was
    written, is a trace-time error naming the line, and the caller's arrays stay as they were."""
    def f(a, b):
        b.add_(1)
        return b, a ** -1
    a, b = np.arange(1, 4, dtype=np.int32), np.zeros(3, np.float32)
    with pytest.raises(cc.TraceError) as info:
        cc.compile(f, backend=backend)(a, b)
    assert f"test_opdb.py:{f.__code__.co_firstlineno + 2}" in str(info.value)
    assert "negative integer powers" in str(info.value)
    np.testing.assert_array_equal(b, 0)
    np.testing.assert_array_equal(a, [1, 2, 3])
    # a negative exponent *tensor* is data: defined, no error (issue 18 item 7)
    out = cc.compile(lambda x, e: x ** e, backend=backend)(
        np.array([2, 1, -1, -1, 0], np.int32), np.array([-1, -3, -3, -2, -1], np.int32))
    np.testing.assert_array_equal(out, [0, 1, -1, 1, 0])
