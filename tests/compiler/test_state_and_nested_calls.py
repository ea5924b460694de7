"""Arrays read as state (`compiler.tensor.state_tensor`: what layers and optimizers use), compiled
functions called inside traced ones, and arguments that don't bind."""
import numpy as np
import pytest

import compiler as cc
from compiler import tracer as _tr
from compiler.tensor import state_tensor
from tests.backends import AVAILABLE


class Owner:
    """A stand-in for a layer: owns an array and a structure version."""

    def __init__(self):
        self.w = np.ones((3, 3), np.float32)
        self.version = 0

    def guard(self):
        v = self.version
        g = lambda: self.version == v  # noqa: E731
        return g


@pytest.mark.parametrize("backend", AVAILABLE)
def test_state_arrays_are_inputs_updated_in_place_and_never_retrace(backend):
    owner = Owner()

    def step(x):
        w = state_tensor(owner.w, "w", trainable=True)
        loss = (x @ w).sum()
        loss.backward()
        with cc.no_grad():
            w.subtract_(0.1 * w.grad)
        return loss

    fn = cc.compile(step, backend=backend)
    x = np.ones((2, 3), np.float32)
    w_before = owner.w
    assert float(fn(x)) == 18.0
    np.testing.assert_allclose(owner.w, np.full((3, 3), 0.8, np.float32))  # 1 - 0.1 * 2
    assert owner.w is w_before
    owner.w[...] = 2.0  # a new value of the state: read by the next call, no retrace
    assert float(fn(x)) == 36.0
    assert fn.traces == 1
    prog = fn.lower(x)
    assert [v.name for v in prog.graph.inputs] == ["x", "w"]
    assert prog.param_names == ["x", "w"]


def test_a_guard_that_fails_retraces_and_one_that_holds_does_not():
    owner = Owner()
    guards = []

    def f(x):
        g = owner.guard()
        guards.append(g)
        return x + state_tensor(owner.w, "w", guard=g)

    fn = cc.compile(f, backend="numpy")
    x = np.zeros((3, 3), np.float32)
    fn(x)
    _tr.state_changed()          # something changed, but not this owner: no retrace
    fn(x)
    assert fn.traces == 1
    owner.version += 1
    _tr.state_changed()
    fn(x)
    assert fn.traces == 2


def test_state_sharing_memory_with_an_argument_is_refused():
    owner = Owner()
    fn = cc.compile(lambda x: x + state_tensor(owner.w, "w"), backend="numpy")
    with pytest.raises(cc.TraceError, match="the array of 'w' shares memory with 'x'"):
        fn(owner.w[:2])
    fn(np.zeros((3, 3), np.float32))
    with pytest.raises(cc.TraceError, match="argument 'x' shares memory with 'w'"):
        fn(owner.w)  # same signature as the traced call: caught by the call's check


@pytest.mark.parametrize("backend", AVAILABLE)
def test_a_compiled_function_called_inside_a_trace_is_traced_inline(backend):
    inner = cc.compile(lambda a, b: (a * b).sin(), backend=backend)

    @cc.compile(backend=backend)
    def outer(x, y):
        x.stop_gradient = False
        out = inner(x, y) + inner(x, 2.0)
        out.sum().backward()
        return out, x.grad

    x, y = np.linspace(-1, 1, 4).astype(np.float32), np.full(4, 0.5, np.float32)
    out, grad = outer(x, y)
    np.testing.assert_allclose(out, np.sin(x * y) + np.sin(2 * x), rtol=1e-6)
    np.testing.assert_allclose(grad, y * np.cos(x * y) + 2 * np.cos(2 * x), rtol=1e-5)
    assert inner.traces == 0  # never compiled on its own
    ops = [n.op for n in outer.lower(x, y).graph.nodes]
    assert "sin" in ops or "fused" in ops


def _python_error(fn, *args, **kwargs):
    with pytest.raises(TypeError) as e:
        fn(*args, **kwargs)
    return str(e.value)


@pytest.mark.parametrize("call", [
    lambda f: ((np.ones(2),), {"z": np.ones(2)}),                  # unexpected keyword
    lambda f: ((np.ones(2),), {}),                                  # missing argument
    lambda f: ((np.ones(2), np.ones(2), np.ones(2)), {}),           # too many
    lambda f: ((np.ones(2),), {"x": np.ones(2)}),                   # twice
])
def test_arguments_that_dont_bind_fail_with_pythons_wording(call):
    def f(x, y):
        return x * y

    args, kwargs = call(f)
    want = _python_error(f, *args, **kwargs)
    fn = cc.compile(f, backend="numpy")
    with pytest.raises(TypeError) as e:
        fn(*args, **kwargs)
    assert isinstance(e.value, cc.TraceError)  # (a TypeError naming the caller's line)
    assert e.value.bare_message == want
    assert "test_state_and_nested_calls.py" in str(e.value)
