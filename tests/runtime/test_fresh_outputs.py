"""Fresh memory (runtime.arena.empty_aligned): outputs and arenas of 2 MiB and more start on a
2 MiB boundary and are advised for transparent huge pages (where the OS has them); the sysfs
switch is read once per process, /proc/meminfo once per program, never per call.
benchmarks/fresh_outputs.py measures what this buys (page faults and time per call)."""
import gc
import os
import pickle
import resource
import threading
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


# -- fresh buffers reused (runtime.arena: _Lease, the idle list) -------------------------------
def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _s(k):
    return np.array([k], np.float32)  # (a scalar argument would be a compile-time constant)


@pytest.fixture
def idle_list():
    """An empty idle list before and after (other tests' buffers don't count here)."""
    gc.collect()  # (buffers held in an earlier test's reference cycles: freed now, not mid-test)
    arena.trim()
    yield
    arena.trim()


@needs_thp
@pytest.mark.parametrize("backend", HOST)
def test_a_dropped_output_is_reused_by_the_next_call_without_faults(backend, idle_list):
    """The 16 MiB output goes back to the idle list with its last view; the next call's output
    takes it: no page fault (a fresh mapping takes 8 huge-page faults, or 4096 small ones)."""
    x = np.linspace(-4, 4, 4 * MiB, dtype=np.float32)
    prog = cc.compile(lambda t: t * 3.0 + 1.0, backend=backend).lower(x)
    want = x * np.float32(3) + np.float32(1)
    out = prog(x)
    np.testing.assert_array_equal(out, want)
    address = out.ctypes.data
    del out
    assert arena.idle_bytes() == 16 * MiB
    f0 = _faults()
    out = prog(x)
    assert _faults() - f0 < 4
    assert out.ctypes.data == address and arena.idle_bytes() == 0
    np.testing.assert_array_equal(out, want)


@needs_thp
@pytest.mark.parametrize("backend", HOST)
def test_a_region_comes_back_only_when_its_last_view_is_gone(backend, idle_list):
    """Views, buffer exports and np.asarray of an output keep its memory: later calls never
    write into it; a pickle holds its own bytes. Once nothing views it, it is reused."""
    x = np.linspace(-4, 4, MiB, dtype=np.float32)
    prog = cc.compile(lambda t, s: t * s, backend=backend).lower(x, _s(2))
    first = prog(x, _s(2))
    view, exported, same = first[8:].reshape(-1, 8), memoryview(first), np.asarray(first)
    pickled = pickle.dumps(first[:100])
    address = first.ctypes.data
    del first
    later = [prog(x, _s(k)) for k in (3, 4)]  # (while the views live: fresh memory)
    for out in later:
        for kept in (view, np.asarray(exported), same):
            assert not np.shares_memory(out, kept)
    np.testing.assert_array_equal(view, (x * np.float32(2))[8:].reshape(-1, 8))
    np.testing.assert_array_equal(np.asarray(exported), x * np.float32(2))
    np.testing.assert_array_equal(same, x * np.float32(2))
    del later, out, kept, view, same
    assert arena.idle_bytes() == 8 * MiB  # (the later two; the first is still exported)
    del exported
    assert arena.idle_bytes() == 12 * MiB
    back = pickle.loads(pickled)
    assert [prog(x, _s(5)).ctypes.data for _ in range(2)] == [address] * 2  # the most recent
    np.testing.assert_array_equal(back, x[:100] * np.float32(2))


def _region(a: np.ndarray):
    """The region under an array (its owner: the first base that is no ndarray)."""
    while isinstance(a, np.ndarray):
        a = a.base
    return a.region


def _negative_zeros(n):
    """Run a program whose 4n-byte output is all -0.0 (bits 0x80000000), drop the output: its
    region is idle, full of what no later result may show. Returns the region."""
    fn = cc.compile(lambda t: t * -0.0)
    return _region(fn(np.ones(n, np.float32)))


@needs_thp
@pytest.mark.parametrize("backend", HOST)
@pytest.mark.parametrize("case", ["pad", "scatter", "concat", "setitem", "masked"])
def test_outputs_written_piecewise_never_show_a_reused_regions_old_contents(
        backend, case, idle_list):
    """Outputs whose kernels write them piece by piece (a pad's border, the untouched rows of
    a scatter into zeros, concatenated halves, a strided assignment into zeros) over a region
    left full of -0.0 by another program: every element is the program's own."""
    n = 2048  # (16 MiB: a fresh mapping takes 8 or more faults)
    x = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    if case == "pad":
        fn = lambda t: F.pad(t, [0, 0, 3, 5], value=0.0)  # noqa: E731
        want = np.pad(x, ((0, 0), (3, 5)))
    elif case == "scatter":
        idx = np.arange(0, n, 3, dtype=np.int64)[:, None] * np.ones((1, n), np.int64)

        def fn(t):
            return cc.zeros([n, n], "float32").put_along_axis(cc.to_tensor(idx), t[:len(idx)],
                                                                0)
        want = np.zeros_like(x)
        want[::3] = x[:len(idx)]
    elif case == "concat":
        fn = lambda t: cc.concat([t[:, :7] + 1.0, t * 2.0], axis=1)  # noqa: E731
        want = np.concatenate([x[:, :7] + np.float32(1), x * np.float32(2)], axis=1)
    elif case == "setitem":
        def fn(t):
            z = cc.zeros([n, n], "float32")
            z[::2, 1::3] = t[::2, 1::3] * 2.0
            return z
        want = np.zeros_like(x)
        want[::2, 1::3] = x[::2, 1::3] * np.float32(2)
    else:
        fn = lambda t: cc.where(t > 0.5, t, cc.zeros_like(t))  # noqa: E731
        want = np.where(x > 0.5, x, np.float32(0))
    prog = cc.compile(fn, backend=backend).lower(x)
    size = prog(x).nbytes
    region = _negative_zeros(size // 4)
    got = prog(x)
    assert _region(got) is region  # (the reused region, not fresh zeroed memory)
    assert got.tobytes() == want.tobytes()  # (a left-over -0.0 would differ in its bits)


@needs_thp
def test_idle_regions_are_bounded(idle_list):
    """At most IDLE_ENTRIES regions, and at most the larger of IDLE_BYTES and the region just
    returned in all (the least recently returned go first); trim() unmaps them."""
    held = [arena.empty_aligned(4 * MiB + 1 + k) for k in range(6)]  # (spans: 6 MiB each)
    del held
    assert arena.idle_bytes() == arena.IDLE_ENTRIES * 6 * MiB
    big = arena.empty_aligned(100 * MiB)  # (address space: nothing touched)
    del big
    assert arena.idle_bytes() == 100 * MiB  # (the older ones went, past 100 MiB)
    small = arena.empty_aligned(3 * MiB)
    assert arena.idle_bytes() == 100 * MiB  # (100 MiB is more than FIT times 4 MiB)
    del small
    assert arena.idle_bytes() == 4 * MiB  # (past IDLE_BYTES: the 100 MiB went)
    assert arena.trim() == 4 * MiB and arena.idle_bytes() == 0


@needs_thp
@pytest.mark.parametrize("backend", HOST)
def test_releasing_a_program_unmaps_the_idle_regions(backend, idle_list):
    """`fn.clear_cache()` (and the arena pool's `release`) give the idle memory back: the
    program's arena and a dropped output were idle, none is after."""
    def f(x):
        y = x * 3.0  # a 4 MiB value that dies inside: in the arena
        return y[:5] + y[-5:], y * 2.0
    x = np.linspace(-1, 1, MiB, dtype=np.float32)
    fn = cc.compile(f, backend=backend, fuse=False)
    small, big = fn(x)
    del big
    assert arena.idle_bytes() == 4 * MiB
    fn.clear_cache()
    assert arena.idle_bytes() == 0
    small, big = fn(x)
    np.testing.assert_array_equal(big, x * np.float32(6))


@needs_thp
def test_tracemalloc_sees_a_reused_buffer_while_it_is_held(idle_list):
    """Idle regions are not the caller's: reported while a buffer holds one, not after."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        a = arena.empty_aligned(5 * MiB + 3)
        address = a.ctypes.data
        del a
        assert arena.idle_bytes() == 6 * MiB
        assert abs(tracemalloc.get_traced_memory()[0] - before) < 4096
        b = arena.empty_aligned(4 * MiB + 1)  # (fits: the same region)
        assert b.ctypes.data == address
        assert abs(tracemalloc.get_traced_memory()[0] - before - (4 * MiB + 1)) < 4096
        del b
        assert abs(tracemalloc.get_traced_memory()[0] - before) < 4096
    finally:
        tracemalloc.stop()


@needs_thp
@pytest.mark.parametrize("backend", HOST)
def test_two_threads_calling_at_once_never_share_an_output(backend, idle_list):
    """Each thread keeps its last two outputs while it calls again: every output is right and
    no two live ones overlap; the regions go round (far fewer faults than fresh mappings, which
    take at least 2 each)."""
    x = np.linspace(-4, 4, MiB, dtype=np.float32)
    prog = cc.compile(lambda t, s: t * s + 0.5, backend=backend).lower(x, _s(1))
    prog(x, _s(1))
    live: dict = {}
    errors = []
    barrier = threading.Barrier(2)

    def calls(me):
        try:
            barrier.wait()
            kept = []
            for k in range(40):
                s = me * 100 + k
                kept = kept[-1:] + [(s, prog(x, _s(s)))]
                live[me] = kept
                for other in list(live.get(1 - me, ())):
                    for _, mine in kept:
                        assert not np.shares_memory(mine, other[1])
                for s_, out in kept:  # (samples: a full-size temporary would fault itself)
                    np.testing.assert_array_equal(
                        out[::1021], x[::1021] * np.float32(s_) + np.float32(0.5))
        except BaseException as e:  # (reported by the main thread)
            errors.append(e)
    f0 = _faults()
    threads = [threading.Thread(target=calls, args=(me,)) for me in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert _faults() - f0 < 80


@needs_thp
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fresh_buffers_work_in_a_child_forked_while_another_thread_held_the_idle_list(
        idle_list):
    """The child neither waits for a lock that no thread of it will let go of, nor loses
    the idle region it inherited (its own copy)."""
    x = np.linspace(-4, 4, MiB, dtype=np.float32)
    fn = cc.compile(lambda t: t + 1.0)
    # (no collection from here on: a cycle of an earlier test freed now would put a region
    # of its own on the idle list and change what the child trims)
    gc.collect()
    gc.disable()
    try:
        answer = _forked_call_while_the_idle_list_is_held(fn, x)
    finally:
        gc.enable()
    assert answer == "values right, idle region reused and trimmed"


def _forked_call_while_the_idle_list_is_held(fn, x) -> str:
    arena.trim()
    fn(x)  # (its output dropped: an idle region the child inherits)
    held, done = threading.Event(), threading.Event()

    def hold():
        with arena._lock:
            held.set()
            done.wait(10)
    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        answer = "the child raised"
        try:
            idle = arena.idle_bytes()
            out = fn(x)  # (the inherited region: written, it is copied, not shared)
            right = out.tobytes() == (x + np.float32(1)).tobytes()
            del out
            trimmed = arena.trim()  # (one region: it was reused)
            answer = ("values right, idle region reused and trimmed"
                      if right and idle == trimmed == 4 * MiB else
                      f"values right: {right}, idle at fork {idle} B, trimmed {trimmed} B")
        finally:
            os.write(write, answer.encode())
            os._exit(0)
    done.set()
    t.join()
    os.close(write)
    answer = os.read(read, 200).decode()
    os.close(read)
    os.waitpid(pid, 0)
    return answer


@needs_thp
@pytest.mark.skipif("cpu" not in AVAILABLE, reason="the cpu backend's first touch")
@pytest.mark.parametrize("threads", [1, 2])
def test_a_fresh_output_faults_once_per_huge_page(threads):
    """Each huge page of a fresh output faults once, straight to a huge page, when the
    loop's first store reaches it (on the thread running that chunk): a load first would
    fault twice (the zero page, then the page written)."""
    n = 2048  # float32 [2048, 2048]: 16 MiB, 8 huge pages
    x = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    fn = cc.compile(F.relu, backend="cpu", threads=threads)
    fn(x), fn(x)  # (the second call builds the short path's trampoline once per process)
    counts = []
    for _ in range(3):  # (the fewest: a call may also fault a page of the interpreter's heap)
        arena.trim()  # (no idle region to reuse: the next output is a fresh mapping)
        f0 = _faults()
        y = fn(x)
        counts.append(_faults() - f0)
        assert y.tobytes() == np.maximum(x, np.float32(0)).tobytes()
        del y
    assert min(counts) < 12, counts


# -- the order a call faults its fresh output in (issue 25: fresh outputs at the floor) ---------
class _FaultRecorder:
    """A 2 MiB-aligned anonymous mapping of `span` bytes whose page faults are reported through
    userfaultfd (Linux): `faults` lists (offset of the 4 KiB page, written, the faulting
    thread's native id or None) in the order they happened, each served with the zero page by
    a Python thread (so the faulting code must run without the GIL, as compiled entries do).
    `region` is an `arena._Region` over it, for the idle list. Raises OSError where
    userfaultfd (or, with `thread_ids`, its thread ids) is missing or not allowed."""

    API, REGISTER, ZEROPAGE = 0xc018aa3f, 0xc020aa00, 0xc020aa04  # _IOWR(0xAA, ...)
    PAGEFAULT, USER_MODE_ONLY, FEATURE_THREAD_ID = 0x12, 1, 1 << 8

    def __init__(self, span: int, thread_ids: bool = False):
        import ctypes
        import mmap
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
        self.ctypes, self.libc = ctypes, libc
        flags = os.O_CLOEXEC | os.O_NONBLOCK
        # (user-mode faults only: allowed without privileges since Linux 5.11; older kernels
        # refuse the flag, and may allow the plain call)
        fd = libc.syscall(323, flags | self.USER_MODE_ONLY)
        if fd < 0:
            fd = libc.syscall(323, flags)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "userfaultfd")
        self.fd = fd
        self.thread_ids = thread_ids
        api = (ctypes.c_uint64 * 3)(0xAA, self.FEATURE_THREAD_ID if thread_ids else 0, 0)
        self._ioctl(self.API, api)
        mm = mmap.mmap(-1, span + arena.HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = np.frombuffer(mm, np.uint8)
        self.address = raw.ctypes.data + (-raw.ctypes.data) % arena.HUGE_PAGE
        self._ioctl(self.REGISTER, (ctypes.c_uint64 * 4)(self.address, span, 1, 0))  # missing
        self.region = object.__new__(arena._Region)
        self.region.raw, self.region.address, self.region.span = raw, self.address, span
        self.faults: list = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _ioctl(self, request, arg):
        if self.libc.ioctl(self.fd, request, arg) != 0:
            err = self.ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"userfaultfd ioctl {request:#x}")

    def _serve(self):
        import select
        import struct
        while not self._stop:
            if not select.select([self.fd], [], [], 0.02)[0]:
                continue
            try:
                msg = os.read(self.fd, 32)  # struct uffd_msg
            except BlockingIOError:
                continue
            if msg[0] != self.PAGEFAULT:
                continue
            flags, address, tid = struct.unpack_from("QQI", msg, 8)
            page = address & ~4095
            self.faults.append((page - self.address, bool(flags & 1),
                                tid if self.thread_ids else None))
            self.libc.ioctl(self.fd, self.ZEROPAGE, (self.ctypes.c_uint64 * 4)(page, 4096, 0, 0))

    def close(self):
        """Stop serving; later faults of the mapping are ordinary ones."""
        self._stop = True
        self._thread.join()
        os.close(self.fd)


def _faults_of_a_relu_call(n: int, threads: int) -> "_FaultRecorder":
    """The page faults (with the faulting thread's id when threads > 1) of one call of a
    compiled relu whose fresh n-byte output lands in a region the recorder serves; checks the
    output's place and bits."""
    import faulthandler
    x = np.random.default_rng(threads).standard_normal(n // 4).astype(np.float32)
    fn = cc.compile(F.relu, backend="cpu", threads=threads)
    fn(x), fn(x)  # (compiled, and the short path's trampoline built)
    arena.trim()
    try:
        rec = _FaultRecorder(n, thread_ids=threads > 1)
    except OSError as e:
        pytest.skip(f"userfaultfd: {e}")
    with arena._lock:
        arena._idle.append(rec.region)  # the next fresh output's memory
    faulthandler.dump_traceback_later(120, exit=True)  # (a fault nobody serves: no hang)
    try:
        y = fn(x)
    finally:
        rec.close()
        faulthandler.cancel_dump_traceback_later()
    assert y.ctypes.data == rec.address
    assert y.tobytes() == np.maximum(x, np.float32(0)).tobytes()
    return rec


@needs_thp
@pytest.mark.skipif("cpu" not in AVAILABLE, reason="the cpu backend's kernels")
def test_a_one_thread_call_writes_its_fresh_output_in_one_pass(idle_list):
    """At one thread, relu's loop faults its fresh output's pages in the order it stores into
    them, as a C loop does: no pass first faulting every huge page (so the kernel zeroing the
    whole output) before the loop, whose stores then missed the cache (relu of 64 MiB: 1.9 ms
    of 14.4, benchmarks/fresh_outputs.py). Observed through userfaultfd on 4 KiB pages."""
    n = 4 * MiB  # float32 [1 Mi]: 2 huge pages, a parallel kernel at any thread count
    rec = _faults_of_a_relu_call(n, threads=1)
    assert rec.faults == [(k, True, None) for k in range(0, n, 4096)], rec.faults[:4]


@needs_thp
@pytest.mark.skipif("cpu" not in AVAILABLE, reason="the cpu backend's kernels")
def test_at_two_threads_each_thread_faults_the_fresh_pages_it_writes(idle_list):
    """At 2 threads no pass faults the fresh output first either: the calling thread, which
    claims chunks from the front, faults the pages of its chunks in order as it writes them,
    and the worker those of its own (from the back); every page faults, for writing. A first
    touch by the caller put all the huge pages' faults (and their zeroing) before the loop:
    relu of 64 MiB took 2.8 ms more CPU (benchmarks/fresh_outputs.py --threads 2)."""
    n = 4 * MiB
    rec = _faults_of_a_relu_call(n, threads=2)
    assert {k for k, _, _ in rec.faults} == set(range(0, n, 4096))
    assert all(written for _, written, _ in rec.faults)
    me = threading.get_native_id()
    mine = [k for k, _, tid in rec.faults if tid == me]
    assert mine[0] == 0 and mine == sorted(mine), mine[:4]
