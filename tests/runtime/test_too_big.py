"""Issue 22 item 11: values and argument copies too big for the machine are the project's errors,
naming what is too big, its bytes and the user's line, before anything is allocated or written.

- `a[2**32, 1] + b[1, 2**32]`: the shapes broadcast; the result (2**64 float32 elements) is
  what no array can hold. A `ShapeError` at trace time says so (NumPy's broadcast_shapes
  refuses such shapes, which read as "can't be broadcast together").
- A zero-stride argument (`np.broadcast_to`) is copied to a row-major buffer before the run;
  that copy is counted by the memory check with the plan's memory and refused naming the
  argument (it was a raw `MemoryError` from inside NumPy's copy, never counted).
"""
from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest

import compiler as cc
import runtime.arena as arena
from tests.backends import AVAILABLE

BIG = 2 ** 32


def _zero_stride(shape, dtype=np.float32):
    return np.broadcast_to(np.ones((), dtype), shape)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_a_result_too_big_for_an_array_is_a_shape_error_naming_its_bytes(backend):
    def f(a, b, out):
        out.add_(1.0)
        return a + b, out
    out = np.zeros(3, np.float32)
    with pytest.raises(cc.ShapeError) as info:
        cc.compile(f, backend=backend)(_zero_stride((BIG, 1)), _zero_stride((1, BIG)), out)
    msg = str(info.value)
    assert f"test_too_big.py:{f.__code__.co_firstlineno + 2}" in msg, msg
    assert f"[{BIG}, {BIG}] float32" in msg and f"{BIG * BIG * 4} bytes" in msg, msg
    assert "too big" in msg and "can't be broadcast" not in msg, msg
    np.testing.assert_array_equal(out, 0)
    # shapes that don't broadcast still say so; big operands whose result fits still trace
    with pytest.raises(cc.ShapeError, match=r"shapes \[4294967296, 3\] and \[1, 4\] can't be "
                                            r"broadcast together"):
        cc.trace(lambda a, b: a + b, _zero_stride((BIG, 3)), np.ones((1, 4), np.float32))
    g = cc.trace(lambda a, b: a + b, _zero_stride((BIG, 1)), np.ones((0,), np.float32))
    assert g.outputs[0].shape == (BIG, 0)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_a_result_too_big_made_inside_the_program(backend):
    def f(x):
        return cc.zeros([BIG, 1], "float64") * cc.zeros([1, BIG], "float64") + x
    with pytest.raises(cc.ShapeError) as info:
        cc.compile(f, backend=backend)(np.ones(1))
    msg = str(info.value)
    assert f"test_too_big.py:{f.__code__.co_firstlineno + 1}" in msg, msg
    assert msg.startswith("multiply: ") and f"{BIG * BIG * 8} bytes" in msg, msg


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("n,whole", [(64 << 20, False), (32 << 20, True)],
                         ids=["the-copy-alone", "the-copy-with-the-plan"])
def test_the_copy_of_a_zero_stride_argument_is_counted_and_refused(backend, n, whole,
                                                                   monkeypatch):
    """An `np.broadcast_to` argument of n float32 (its copy is 4n bytes; its own memory 4) on a
    machine said to have 200 MiB free: 256 MiB of copy alone, or 128 MiB of copy beside a
    128 MiB result (each fits alone, the plan's check passes). Refused naming the argument
    and the bytes, with no allocation anywhere near that size, the caller's arrays untouched."""
    x = _zero_stride((n,))
    y = np.zeros(3, np.float32)

    def f(x, y):
        y.add_(1.0)
        return x * 2.0 if whole else x[:3] * 2.0

    prog = cc.compile(f, backend=backend)
    monkeypatch.setattr(arena, "available_memory", lambda: 200 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(cc.InsufficientMemoryError) as info:
            line = sys._getframe().f_lineno + 1
            prog(x, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    assert f"argument 'x' (f32[{n}], strides (0,)) is not contiguous: its row-major copy " \
        f"needs {n * 4} B" in msg, msg
    assert "nothing was allocated or written" in msg, msg
    assert f"test_too_big.py:{line}" in msg, msg
    assert peak < 16 << 20, f"{peak} bytes were allocated to find out"
    np.testing.assert_array_equal(y, 0)
    # below the checked size a copy is made without asking the OS (as the plan's check does)
    monkeypatch.setattr(arena, "available_memory", lambda: 0)
    small = np.arange(12.0, dtype=np.float32)[::-2]
    got = prog(small, y)
    np.testing.assert_array_equal(got, (small * 2.0) if whole else (small[:3] * 2.0))
    np.testing.assert_array_equal(y, 1)


def test_a_copy_numpy_cannot_allocate_is_an_insufficient_memory_error(monkeypatch):
    """Where the OS's figure is unknown the copy itself may fail: the project's error, naming
    the argument, not NumPy's MemoryError."""
    monkeypatch.setattr(arena, "available_memory", lambda: None)

    def refuse(a, *args, **kwargs):
        raise MemoryError("Unable to allocate")
    monkeypatch.setattr(arena.np, "ascontiguousarray", refuse)
    x = _zero_stride((1000, 1000), np.float64)
    with pytest.raises(cc.InsufficientMemoryError, match=r"argument 'x' .*8000000 B"):
        cc.compile(lambda x: x + 1.0, backend="numpy")(x)
