"""Fresh memory (runtime.arena.empty_aligned): outputs and arenas of 2 MiB and more start on a
2 MiB boundary and are advised for transparent huge pages (where the OS has them); the sysfs
switch is read once per process, /proc/meminfo once per program, never per call.
benchmarks/fresh_outputs.py measures what this buys (page faults and time per call)."""
import tracemalloc

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from runtime import arena

from backends import AVAILABLE

MiB = 1 << 20
HOST = [b for b in AVAILABLE if b in ("numpy", "cpu")]  # (the gpu's arena is on the device)


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping holding `address` (/proc/self/smaps)."""
    current = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(p, 16) for p in head.split("-"))
                current = lo <= address < hi
            elif head == "VmFlags:" and current:
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


needs_thp = pytest.mark.skipif(arena.thp_mode() == "never",
                               reason="transparent huge pages are off here")


@needs_thp
@pytest.mark.parametrize("backend", HOST)
def test_fresh_outputs_of_2_MiB_and_more_are_2_MiB_aligned_and_advised(backend):
    x = np.random.default_rng(0).standard_normal((3, MiB // 4 + 5)).astype(np.float32)
    fn = cc.compile(lambda t: (F.relu(t), t[:, :8] * 2.0), backend=backend)
    for _ in range(2):  # each call's outputs are fresh
        big, small = fn(x)
        np.testing.assert_array_equal(big, np.maximum(x, 0))
        np.testing.assert_array_equal(small, x[:, :8] * 2.0)
        assert big.ctypes.data % (2 * MiB) == 0
        assert "hg" in _vm_flags(big.ctypes.data)  # MADV_HUGEPAGE
        assert small.ctypes.data % 64 == 0


@needs_thp
@pytest.mark.parametrize("backend", HOST)
def test_an_arena_of_2_MiB_and_more_is_2_MiB_aligned_and_advised(backend):
    def f(x):
        y = x * 3.0              # a 4 MiB value that dies inside: in the arena
        return y[:5] + y[-5:]
    x = np.linspace(-1, 1, MiB, dtype=np.float32)
    prog = cc.compile(f, backend=backend, fuse=False).lower(x)
    assert prog.plan.arena_bytes >= 4 * MiB
    np.testing.assert_array_equal(prog(x), x[:5] * np.float32(3) + x[-5:] * np.float32(3))
    a = prog._exec.arena
    assert a.ctypes.data % (2 * MiB) == 0 and "hg" in _vm_flags(a.ctypes.data)


@needs_thp
def test_the_huge_page_threshold_is_2_MiB():
    for n in (1, 100, 2 * MiB - 1):  # (small buffers: 64-byte aligned, as the plan's)
        a = arena.empty_aligned(n)
        assert a.nbytes == n and a.ctypes.data % 64 == 0
    for n in (2 * MiB, 2 * MiB + 1, 5 * MiB + 3):
        a = arena.empty_aligned(n)
        a[...] = 7  # (every byte is there)
        assert a.nbytes == n and a.ctypes.data % (2 * MiB) == 0
        assert "hg" in _vm_flags(a.ctypes.data + n - 1)  # the tail too


@pytest.mark.parametrize("backend", HOST)
def test_a_program_asks_proc_meminfo_once_not_per_call(backend, monkeypatch):
    """relu on 64 MiB needs CHECKED_BYTES of fresh output each call: the first call asks the
    OS, later calls of the same program need no more than was checked (they read it each
    time before: 20-60 us a call)."""
    asked = []

    def available():
        asked.append(1)
        return 1 << 40
    monkeypatch.setattr(arena, "available_memory", available)
    x = np.ones(arena.CHECKED_BYTES // 4, np.float32)
    fn = cc.compile(lambda t: F.relu(t), backend=backend)
    for _ in range(3):
        out = fn(x)
        assert out[0] == 1.0 and out.nbytes == arena.CHECKED_BYTES
        del out
    assert asked == [1]
    # another program asks for itself, and a refusal still refuses
    monkeypatch.setattr(arena, "available_memory", lambda: 1 << 20)
    with pytest.raises(cc.InsufficientMemoryError, match="only 1048576 B"):
        cc.compile(lambda t: t * 2.0, backend=backend)(x)


@needs_thp
def test_tracemalloc_sees_a_huge_buffer_at_its_size_until_it_is_freed():
    """What a call allocates stays measurable (tests/runtime/test_plan_is_what_runs.py): the
    mapping's alignment slack is address space, not counted."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        a = arena.empty_aligned(5 * MiB + 3)
        view = a[10:]
        del a
        assert abs(tracemalloc.get_traced_memory()[0] - before - (5 * MiB + 3)) < 4096
        del view
        assert abs(tracemalloc.get_traced_memory()[0] - before) < 4096
    finally:
        tracemalloc.stop()


def test_the_huge_page_switch_is_read_once_per_process(monkeypatch):
    reads = []

    def read():
        reads.append(1)
        return "madvise"
    monkeypatch.setattr(arena, "_read_thp_mode", read)
    monkeypatch.setattr(arena, "_thp", [])
    x = np.ones(MiB, np.float32)
    fn = cc.compile(lambda t: t + 1.0, backend="cpu")
    for _ in range(3):
        out = fn(x)
        assert out.ctypes.data % (2 * MiB) == 0
    assert reads == [1]
