"""The cpu backend's per-call driver (runtime/cpu/executable.py): a small call skips the
/proc/meminfo estimate, yet a call that can't get its memory still fails before anything is
written."""
import numpy as np
import pytest

import compiler as cc
from runtime.cpu import executable


def test_small_call_that_cant_allocate_its_outputs_writes_nothing(monkeypatch):
    def f(x):
        x.add_(1.0)                 # writes into the caller's array...
        return x * 2.0              # ...and returns a fresh array
    x = np.zeros(8, np.float32)
    prog = cc.compile(f, backend="cpu").lower(x)
    prog(x)                         # the arena exists now
    np.testing.assert_array_equal(x, np.ones(8, np.float32))
    reads = []
    monkeypatch.setattr("runtime.arena.available_memory", lambda: reads.append(1))

    def no_memory(nbytes):
        raise MemoryError
    monkeypatch.setattr(executable, "_aligned", no_memory)
    monkeypatch.setattr(executable, "_with_room", no_memory)  # (the fast path's)
    with pytest.raises(cc.InsufficientMemoryError, match="can't allocate its outputs"):
        prog(x)
    np.testing.assert_array_equal(x, np.ones(8, np.float32))  # nothing ran
    assert reads == []              # 32 bytes of outputs: no /proc/meminfo read


def test_big_call_still_asks_the_os_first(monkeypatch):
    x = np.zeros((1 << 24) + 1024, np.float32)  # a bit over 64 MiB of output
    prog = cc.compile(lambda t: t + 1.0, backend="cpu").lower(x)
    monkeypatch.setattr("runtime.arena.available_memory", lambda: 1 << 20)
    with pytest.raises(cc.InsufficientMemoryError, match="only 1048576 B"):
        prog(x)
    assert prog._exec.arena is None
