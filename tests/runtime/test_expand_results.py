"""Returned `expand()` views (stride 0 over an axis longer than 1) come back read-only on every
backend, as NumPy's `broadcast_to` returns them: a write through one element would change every
repeat of it. Results that repeat nothing, and the caller's own arrays, stay as they were."""
import numpy as np
import pytest

import compiler as cc

from tests.backends import AVAILABLE

X = np.arange(4, dtype=np.float32)

CASES = {
    # name: (function, what numpy makes of it)
    "argument": (lambda x: x.expand([3, 4]), lambda x: np.broadcast_to(x, (3, 4))),
    "computed": (lambda x: (x * 2).expand([2, 3, 4]), lambda x: np.broadcast_to(x * 2, (2, 3, 4))),
    "transposed": (lambda x: x.expand([3, 4]).T, lambda x: np.broadcast_to(x, (3, 4)).T),
    "sliced": (lambda x: x.reshape([4, 1]).expand([4, 5])[1:3],
               lambda x: np.broadcast_to(x.reshape(4, 1), (4, 5))[1:3]),
}


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("case", sorted(CASES))
def test_expanded_result_is_read_only(backend, case):
    fn, want = CASES[case]
    x = X.copy()
    got = cc.compile(fn, backend=backend)(x)
    np.testing.assert_array_equal(got, want(X))
    # before: writeable, and `got[0, 0] = 9` changed a whole column
    assert not got.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        got[(0,) * got.ndim] = 9.0
    np.testing.assert_array_equal(got, want(X))
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_only_results_that_repeat_elements_are_read_only(backend):
    def f(x, y):
        return (x.expand([3, 4]), x.expand([1, 4]), x.expand([3, 4]).reshape([12]),
                x.expand([0, 4]), x + 1.0, y)
    # a caller's writeable stride-0 array, returned as itself, keeps the caller's flags
    y = np.lib.stride_tricks.as_strided(X.copy(), (3, 4), (0, 4))
    assert y.flags.writeable
    got = cc.compile(f, backend=backend)(X.copy(), y)
    assert not got[0].flags.writeable  # before: writeable
    for r in got[1:5]:
        assert r.flags.writeable
        if r.size:
            r[(0,) * r.ndim] = 7.0
    assert y.flags.writeable and (got[5] is y or got[5].flags.writeable)


def test_two_calls_return_independent_read_only_views():
    fn = cc.compile(lambda x: (x * 2).expand([3, 4]))
    a = fn(X.copy())
    b = fn(X + 1)
    assert not a.flags.writeable and not b.flags.writeable
    np.testing.assert_array_equal(a, np.broadcast_to(X * 2, (3, 4)))
    np.testing.assert_array_equal(b, np.broadcast_to((X + 1) * 2, (3, 4)))


def test_gpu_copy_back_of_an_expanded_output_is_read_only(monkeypatch):
    # no device needed: the copy-back runs over host arrays standing for device memory
    from runtime.gpu.executable import GpuExecutable
    from tests.gpu.test_gpu_device_paths import _copied_back, _Dev, _view
    monkeypatch.setattr(GpuExecutable, "_device_view", staticmethod(_view))
    prog = cc.compile(lambda x: ((x * 2).expand([3, 4]), x * 3), backend="gpu").lower(X)
    places = [prog._exec.places[id(v)] for v in prog.graph.outputs]
    assert 0 in places[0].strides  # a stride-0 view on the device too
    memory = {}  # slot -> its float32 elements
    for place, value in zip(places, (X * 2, X * 3)):
        held = memory.setdefault(place.slot, np.zeros(0, np.float32))
        if held.size < place.offset + 4:
            held = memory[place.slot] = np.concatenate(
                [held, np.zeros(place.offset + 4 - held.size, np.float32)])
        held[place.offset:place.offset + 4] = value
    device = {slot: _Dev.holding(held) for slot, held in memory.items()}
    outs, _, _ = _copied_back(prog._exec, device, [X.copy()])
    np.testing.assert_array_equal(outs[0], np.broadcast_to(X * 2, (3, 4)))
    np.testing.assert_array_equal(outs[1], X * 3)
    assert not outs[0].flags.writeable and outs[1].flags.writeable
