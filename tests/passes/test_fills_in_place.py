"""Fills in place (issue 27 item 4): `x.zero_()`, `x.fill_(v)` and `x[i] = v` (a scalar) write
the caller's array where it lies, as `scale_` does: the plan has no buffer beyond the caller's
arrays (it had a fresh 16 MiB one per call), on every backend (numpy, cpu, and the gpu
backend's CUDA C run through the host fiber harness), with the values written."""
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F  # noqa: F401
from tests.backends import AVAILABLE
from tests.gpu import harness

NATIVE = [b for b in AVAILABLE if b in ("numpy", "cpu")]
N = 2048          # 2048 x 2048 float32: 16 MiB


def zero(x):
    x.zero_()


def fill(x):
    x.fill_(2.5)


def fill_int(x):
    x.fill_(7)


def set_all(x):
    x[:] = 3.0


def set_rows(x):
    x[1:] = -1.5


def set_column(x):
    x[:, 1] = 4


def fill_then_read(x):
    x.fill_(1.0)
    return x.sum()


CASES = [
    (zero, np.float32, lambda a: np.zeros_like(a)),
    (fill, np.float32, lambda a: np.full_like(a, 2.5)),
    (fill_int, np.int32, lambda a: np.full_like(a, 7)),
    (set_all, np.float32, lambda a: np.full_like(a, 3.0)),
    (set_rows, np.float32, lambda a: np.concatenate([a[:1], np.full_like(a[1:], -1.5)])),
    (set_column, np.float64, lambda a: np.where(np.arange(a.shape[1]) == 1, 4.0, a)),
]


def _arg(dtype, n=N):
    return (np.arange(n * n) % 251 - 125).reshape(n, n).astype(dtype)


@pytest.mark.parametrize("backend", NATIVE + ["gpu"])
@pytest.mark.parametrize("fn,dtype,want", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_fill_plans_no_bytes_beyond_the_callers_array(fn, dtype, want, backend):
    x = _arg(dtype)
    plan = cc.compile(fn, backend=backend).lower(x).plan
    assert plan.input_bytes == x.nbytes
    assert plan.peak_bytes - plan.input_bytes == 0, plan.report()
    assert plan.arena_bytes == 0
    # the fill runs in place of the caller's array, by the reinplace pass's decision
    fills = [d for d in plan.decisions if d.op == "fill"]
    assert fills and all(d.inplace for d in fills), [d.reason for d in fills]


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("fn,dtype,want", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_fill_writes_the_callers_array(fn, dtype, want, backend):
    x = _arg(dtype, 64)
    expected = want(x.copy())
    address = x.__array_interface__["data"][0]
    cf = cc.compile(fn, backend=backend, sanitize=True)
    assert cf.lower(x).plan.arena_bytes == 0
    assert cf(x) is None
    np.testing.assert_array_equal(x, expected)
    assert x.__array_interface__["data"][0] == address


def test_the_gpu_rendering_writes_the_callers_array():
    if not harness.available():
        pytest.skip("needs g++ on a POSIX host")
    for fn, dtype, want in CASES:
        x = _arg(dtype, 64)
        expected = want(x.copy())
        prog = cc.compile(fn, backend="gpu").lower(x)
        assert prog.plan.arena_bytes == 0, fn.__name__
        harness.on_host(prog)(x)
        np.testing.assert_array_equal(x, expected, err_msg=fn.__name__)


@pytest.mark.parametrize("backend", NATIVE)
def test_a_fill_then_a_read_of_the_filled_array(backend):
    x = _arg(np.float32)
    prog = cc.compile(fill_then_read, backend=backend)
    plan = prog.lower(x).plan
    # the only bytes are the returned scalar, not 16 MiB
    assert plan.peak_bytes - plan.input_bytes < 1024, plan.summary()
    assert float(prog(x)) == x.size
    assert np.all(x == 1.0)
    # a value the dtype can't hold is refused at the user's line, as `full` refuses it

    def too_big(x):
        x.fill_(2**40)
    with pytest.raises(cc.TraceError, match="doesn't fit the tensor's dtype int32") as err:
        cc.compile(too_big, backend=backend)(np.zeros(3, np.int32))
    assert "test_fills_in_place.py" in str(err.value)


def masked_step(x, w):
    w.stop_gradient = False
    h = x @ w
    h[:, :2] = 0.0          # an intermediate filled in place: no gradient through its columns
    loss = h.square().sum()
    loss.backward()
    return loss, w.grad


@pytest.mark.parametrize("backend", NATIVE)
def test_a_filled_intermediate_passes_no_gradient_through_the_fill(backend):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 5))
    w = rng.standard_normal((5, 4))
    cf = cc.compile(masked_step, backend=backend)
    fills = [d for d in cf.lower(x, w).plan.decisions if d.op == "fill"]
    assert fills and all(d.inplace for d in fills)   # in h's own buffer
    loss, grad = cf(x, w)
    h = x @ w
    h[:, :2] = 0.0
    np.testing.assert_allclose(loss, (h ** 2).sum(), rtol=1e-12)
    np.testing.assert_allclose(grad, x.T @ (2 * h), rtol=1e-12)
