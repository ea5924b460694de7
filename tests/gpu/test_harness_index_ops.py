"""The gpu backend's gathers and scatters (index_select, index_add, take_along_axis,
put_along_axis, one_hot of computed labels) run through the CPU fiber harness: indices out of
range are reported through the module's status word and raise the numpy backend's `DataError`
naming the user's line, with the caller's arrays untouched; and every opdb sample of these ops
(broadcast operands included) gives the numpy backend's values and gradients."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from tests.gpu import harness

pytestmark = pytest.mark.skipif(not harness.available(), reason="needs g++ on a POSIX host")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _sub in ("tests", os.path.join("tests", "opdb"), os.path.join("tests", "passes")):
    if os.path.join(ROOT, _sub) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, _sub))

import samples as db  # noqa: E402
from gradcheck import grad_program  # noqa: E402

SCHEDULES = harness.SCHEDULES
INDEX_APIS = ("Tensor.gather", "Tensor.index_select", "Tensor.index_add", "Tensor.index_add_",
              "Tensor.take_along_axis", "Tensor.put_along_axis", "Tensor.put_along_axis_",
              "F.cross_entropy", "F.one_hot")


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def test_a_computed_label_out_of_range_raises_the_data_error_and_writes_nothing():
    logits = np.random.default_rng(0).standard_normal((4, 3))

    def f(x, y, b):
        b.add_(1.0)
        return F.cross_entropy(x, y + 1)  # <- computed label

    line = f"{os.path.basename(__file__)}:{f.__code__.co_firstlineno + 2}"
    prog = cc.compile(f, backend="gpu").lower(logits, np.array([0, 1, 1, 0]), np.zeros(3))
    assert [d for d in prog.plan.decisions if d.op == "add_"][0].inplace
    module = prog._exec.module
    assert module.status_offset is not None and module.launches[0].kernel == "k_status_clear"
    for schedule in SCHEDULES:
        host = harness.on_host(prog, schedule)
        b = np.zeros(3)
        host(logits, np.array([0, 1, 1, 0]), b)
        np.testing.assert_array_equal(b, 1.0)
        with pytest.raises(cc.DataError) as e:
            host(logits, np.array([0, 3, 1, 1]), b)
        assert "class label 4 at position [1]" in str(e.value) and line in str(e.value)
        np.testing.assert_array_equal(b, 1.0)   # the in-place add_ never reached b
        host(logits, np.array([1, 0, 1, 0]), b)  # the status word was cleared
        np.testing.assert_array_equal(b, 2.0)


def test_the_status_word_names_the_first_failing_node():
    """Two index ops out of range: the kernels record the first one in the schedule."""
    def f(x, i, j):
        a = x.index_select(i, 0)
        return a.index_select(j, 1)

    x = np.arange(12.0).reshape(3, 4)
    prog = cc.compile(f, backend="gpu").lower(x, np.array([0, 2]), np.array([1, 3]))
    at = prog._exec.module.status_offset
    sizes = [((max(b.size, 1),), np.uint8) for b in prog._exec._output_buffers]
    first, second = [t for t, n in enumerate(prog.graph.nodes) if n.op == "index_select"]

    def status(i, j):
        flat = [np.asarray(a).reshape(-1).view(np.uint8) for a in (x, i, j)]
        res = harness.run_on_cpu(prog._exec.module, flat, sizes)
        return int(res.arena[at:at + 8].view(np.uint64)[0])
    assert status(np.array([0, 9]), np.array([7, 1])) == first + 1
    assert status(np.array([0, -3]), np.array([7, 1])) == second + 1
    assert status(np.array([0, -3]), np.array([-4, 3])) == 0


INVALID = [pytest.param(*e, id=f"{e[0]}-{k}") for k, e in enumerate(db.INVALID)
           if e[0] in INDEX_APIS]


@pytest.mark.parametrize("api,fn,args,error", INVALID)
def test_invalid_indices_raise_the_numpy_backends_error(api, fn, args, error):
    """opdb's invalid calls of the index ops (tests/opdb::test_invalid), on the gpu code."""
    line = f"samples.py:{fn.__code__.co_firstlineno}"
    try:
        prog = cc.compile(fn, backend="gpu").lower(*_copy(args))
    except cc.CompilerError as e:   # found while tracing: no kernel involved
        assert isinstance(e, error) and line in str(e)
        return
    for schedule in SCHEDULES:
        call = _copy(args)
        with pytest.raises(cc.CompilerError) as info:
            harness.on_host(prog, schedule)(*call)
        assert isinstance(info.value, error), f"{api}: {info.value!r}"
        assert line in str(info.value), f"{api}: {info.value}"
        for a, b in zip(call, args):   # the caller's arrays are untouched
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)


# -- the values and gradients of every opdb sample of these ops ---------------------------------
# (the harness's per-op test runs only the first sample of each op: the x-broadcast samples
# of take_along_axis / put_along_axis, wrong on the device, were never run through it)
SAMPLES = [s for s in db.SAMPLES if s.api in INDEX_APIS]


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in _flat(t)]
    return [tree]


def _same(got, want, what):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            tol = 1e-12 if w.dtype == np.float64 else 1e-5
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=what)
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)


def _grad_body(sample):
    """As tests/opdb's: a `_` form differentiates through a non-leaf."""
    def body(*xs):
        if sample.writes is not None:
            xs = list(xs)
            xs[sample.writes] = xs[sample.writes] * 1.0
        return sample.fn(*xs)
    return body


def _programs(backend):
    """(sample id, program, arguments) of each sample's call, and of each gradient sample's
    gradient program (the loss's gradient with respect to its float64 inputs)."""
    out = []
    for s in SAMPLES:
        out.append((s.id, cc.compile(s.fn, backend=backend), s.args))
        if s.grad:
            wrt = list(s.wrt) if s.wrt is not None else \
                [i for i, a in enumerate(s.args) if np.asarray(a).dtype == np.float64]
            out.append((f"{s.id} gradient", cc.compile(grad_program(_grad_body(s), wrt),
                                                       backend=backend), s.args))
    return out


@pytest.fixture(scope="module")
def lowered():
    progs = [(what, fn.lower(*_copy(args)), args) for what, fn, args in _programs("gpu")]
    harness.prebuild([p._exec.module for _, p, _ in progs])
    return progs


def test_every_index_op_sample_and_its_gradient_match_the_numpy_backend(lowered):
    failures = []
    for (what, prog, args), (_, ref, _) in zip(lowered, _programs("numpy")):
        want_args = _copy(args)
        want = ref(*want_args)
        for schedule in SCHEDULES:
            got_args = _copy(args)
            try:
                _same(harness.on_host(prog, schedule)(*got_args), want, f"{what} ({schedule})")
                _same(got_args, want_args, f"{what}: the arguments after the call")
            except AssertionError as e:
                failures.append(str(e)[:500])
    assert not failures, f"{len(failures)} differ:\n" + "\n".join(failures)
