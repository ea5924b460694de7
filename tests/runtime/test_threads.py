"""One compiled function called from several threads at once gives, call for call, the serial
run's results, bit for bit (each call runs on an arena of its own from the program's pool; the
native call and NumPy's loops release the GIL, so the calls really overlap). Threads making the
first call of a signature together trace it once. A compiled function keeps the arenas of its
ARENA_LIMIT most recently called signatures only; `cache_info()` / `clear_cache()` report and
drop what it holds."""
import sys
import threading
import time
import types
import warnings

import numpy as np
import pytest

import compiler as cc
from compiler import api
from runtime import arena as arena_mod
from tests.backends import AVAILABLE

CPU_BACKENDS = [b for b in AVAILABLE if b in ("numpy", "cpu")]
THREADS = 8


def _in_threads(work, n=THREADS):
    """work(i) in n threads started together; their results, or the first error raised."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def body(i):
        try:
            barrier.wait(timeout=120)
            results[i] = work(i)
        except BaseException as e:  # re-raised in the test's thread
            errors.append(e)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_calls_from_8_threads_give_the_serial_results_bit_for_bit(backend):
    fn = cc.compile(lambda x: ((x * 2.0).sin() + x.exp()).sum(axis=1), backend=backend)
    calls = 40
    rng = np.random.default_rng(0)
    inputs = [[rng.standard_normal((128, 256)).astype(np.float32) for _ in range(calls)]
              for _ in range(THREADS)]
    serial = [[fn(x) for x in xs] for xs in inputs]
    got = _in_threads(lambda i: [fn(x) for x in inputs[i]])
    wrong = [sum(not _same_bits(g, s) for g, s in zip(gs, ss)) for gs, ss in zip(got, serial)]
    assert wrong == [0] * THREADS, f"results differing from the serial run, per thread: {wrong}"
    assert fn.cache_info().misses == 1


def sgd_step(x, y, w, b):
    w.stop_gradient = False
    b.stop_gradient = False
    h = (x @ w + b).tanh()
    loss = ((h - y) ** 2).mean()
    loss.backward()
    with cc.no_grad():
        w.subtract_(0.05 * w.grad)      # the caller's arrays, updated in place
        b.subtract_(0.05 * b.grad)
    return loss


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_threads_training_their_own_weights_with_one_step_end_as_the_serial_runs(backend):
    step = cc.compile(sgd_step, backend=backend)
    steps = 25
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((64, 48)).astype(np.float32),
             rng.standard_normal((64, 32)).astype(np.float32)) for _ in range(THREADS)]
    init = [(rng.standard_normal((48, 32)).astype(np.float32) * 0.3,
             rng.standard_normal(32).astype(np.float32) * 0.1) for _ in range(THREADS)]

    def train(i):
        x, y = data[i]
        w, b = init[i][0].copy(), init[i][1].copy()
        losses = [step(x, y, w, b) for _ in range(steps)]
        return w, b, losses
    serial = [train(i) for i in range(THREADS)]
    got = _in_threads(train)
    for i, ((w, b, losses), (sw, sb, slosses)) in enumerate(zip(got, serial)):
        assert _same_bits(w, sw) and _same_bits(b, sb), f"thread {i}'s weights differ"
        assert all(_same_bits(a, c) for a, c in zip(losses, slosses)), f"thread {i}'s losses"
        assert not _same_bits(w, init[i][0])  # (it trained)


def slow_to_trace(x):
    time.sleep(0.05)  # runs while tracing: the other thread's first call arrives meanwhile
    return (x * 3.0).exp().sum()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_first_calls_from_two_threads_at_once_trace_one_program(backend):
    fn = cc.compile(slow_to_trace, backend=backend)
    x = np.linspace(-1, 1, 100).astype(np.float32)
    results = _in_threads(lambda i: fn(x), n=2)
    assert fn.traces == 1
    info = fn.cache_info()
    assert (info.misses, info.hits, info.currsize) == (1, 1, 1)
    want = cc.compile(slow_to_trace, backend=backend)(x)
    assert all(_same_bits(r, want) for r in results)


def test_two_functions_traced_at_once_from_two_threads_each_get_their_own_graph():
    # The tracer's state is process-wide: tracing is serialised, not interleaved.
    def f(x):
        time.sleep(0.05)
        return (x * 2.0).sin()

    def g(x):
        time.sleep(0.05)
        return x.exp() + 1.0
    fns = [cc.compile(f, backend="numpy"), cc.compile(g, backend="numpy")]
    x = np.linspace(-1, 1, 50)
    got = _in_threads(lambda i: fns[i](x), n=2)
    assert _same_bits(got[0], np.sin(x * 2.0)) and _same_bits(got[1], np.exp(x) + 1.0)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_concurrent_calls_use_arenas_of_their_own_and_the_pool_keeps_a_few(backend,
                                                                           monkeypatch):
    monkeypatch.setattr(api, "FAST_CALLS", False)  # (hooks the general path's run_held)
    fn = cc.compile(lambda x: (x * 2.0).exp().sum(axis=0), backend=backend)
    x = np.ones((256, 64), np.float32)
    fn(x)
    exe = fn.lower(x)._exec
    first = exe.arena
    seen = []
    release = threading.Event()
    entered = threading.Barrier(3)
    run_held = exe.run_held

    def held_run(inputs):  # three calls hold their arenas at the same moment
        outs, muts, held = run_held(inputs)
        seen.append(held[1].arena)
        entered.wait(timeout=120)
        release.wait(timeout=120)
        return outs, muts, held
    exe.run_held = held_run
    try:
        def work(i):
            if i == 0:
                entered.wait(timeout=120)
                release.set()
                return None
            return fn(x)
        # (two calls plus a coordinator: the barrier opens when both calls are inside)
        got = _in_threads(work, n=3)
    finally:
        del exe.run_held
    assert len(seen) == 2 and seen[0] is not seen[1]
    assert not np.shares_memory(seen[0], seen[1])
    assert all(_same_bits(r, fn(x)) for r in got[1:])
    assert exe.arena is first and 2 <= len(exe._free) <= arena_mod.POOL_LIMIT


# -- what a compiled function holds -------------------------------------------------------------
def small(x, w):
    return (x @ w).tanh().sum(0)


@pytest.mark.filterwarnings("ignore::compiler.errors.RetraceWarning")
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_only_the_most_recent_signatures_keep_their_arenas(backend):
    fn = cc.compile(small, backend=backend)
    w = np.full((16, 8), 0.01, np.float32)
    sizes = list(range(1, 13))
    outs = {n: fn(np.ones((n, 16), np.float32), w) for n in sizes}
    progs = {n: fn.lower(np.ones((n, 16), np.float32), w) for n in sizes}
    kept = sizes[-api.ARENA_LIMIT:]
    info = fn.cache_info()
    assert (info.currsize, info.misses, info.hits) == (12, 12, 0)
    assert info.arenas == api.ARENA_LIMIT
    assert info.arena_bytes == sum(progs[n].plan.arena_bytes for n in kept)
    for n in sizes:
        assert (progs[n]._exec.arena is not None) == (n in kept), n
    # An old signature is still cached (no retrace); called again, it allocates its arena and
    # the least recently called one gives its arena back.
    again = fn(np.ones((1, 16), np.float32), w)
    assert _same_bits(again, outs[1])
    info = fn.cache_info()
    assert (info.misses, info.hits, info.arenas) == (12, 1, api.ARENA_LIMIT)
    assert progs[1]._exec.arena is not None and progs[kept[0]]._exec.arena is None


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_cache_info_counts_calls_and_clear_cache_drops_programs_and_arenas(backend):
    fn = cc.compile(small, backend=backend)
    w = np.full((16, 8), 0.5, np.float32)
    a, b = np.ones((4, 16), np.float32), np.ones((6, 16), np.float32)
    first = fn(a, w)
    fn(a, w)
    fn(b, w)
    info = fn.cache_info()
    assert info == api.CacheInfo(hits=1, misses=2, maxsize=None, currsize=2, arenas=2,
                                 arena_bytes=fn.lower(a, w).plan.arena_bytes
                                 + fn.lower(b, w).plan.arena_bytes)
    old = fn.lower(a, w)
    fn.clear_cache()
    assert fn.cache_info() == api.CacheInfo(0, 0, None, 0, 0, 0)
    assert old._exec.arena is None  # its memory is given back
    assert _same_bits(fn(a, w), first) and fn.traces == 3  # traced again
    assert fn.cache_info()[:4] == (0, 1, None, 1)


def test_clearing_the_cache_is_not_a_retrace():
    fn = cc.compile(small, backend="numpy")
    w = np.ones((16, 8), np.float32)
    x = np.ones((2, 16), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cc.RetraceWarning)
        for _ in range(api.RETRACE_LIMIT + 3):
            fn(x, w)
            fn.clear_cache()
    assert fn.traces == api.RETRACE_LIMIT + 3


# -- the gpu backend: its Python side, with a stand-in for CuPy ----------------------------------
class _Ptr:
    def __init__(self, ptr):
        self.ptr = ptr

    def __add__(self, n):
        return _Ptr(self.ptr + n)


class _DevArray:
    """Host memory standing in for a CuPy array (what GpuExecutable touches of one)."""
    def __init__(self, a):
        self.a = a
        self.data = _Ptr(a.ctypes.data)
        self.size, self.nbytes = a.size, a.nbytes

    def reshape(self, *shape):
        return _DevArray(self.a.reshape(*shape))

    def view(self, dtype):
        return _DevArray(self.a.view(dtype))

    def __getitem__(self, index):
        return _DevArray(self.a[index])

    def set(self, a):
        self.a[...] = a

    def get(self, out=None):
        if out is None:
            return self.a.copy()
        out[...] = self.a
        return out


def _fake_cupy(kernel):
    def empty(n, dtype):
        raw = np.zeros(n + 256, np.uint8)
        start = (-raw.ctypes.data) % 256
        return _DevArray(raw[start:start + n])

    def ndarray(shape, dtype, memptr, strides=None):
        import ctypes
        dtype = np.dtype(dtype)
        span = 1 + sum((n - 1) * s for n, s in zip(shape, strides or ())) if all(shape) else 1
        buf = (ctypes.c_uint8 * max(span + dtype.itemsize, 1)).from_address(memptr.ptr)
        return _DevArray(np.ndarray(shape, dtype, buffer=buf, strides=strides))

    class Module:
        def load(self, image):
            pass

        def get_function(self, name):
            return kernel

    cupy = types.ModuleType("cupy")
    stream = types.SimpleNamespace(synchronize=lambda: None)
    cupy.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1,
                                      memGetInfo=lambda: (1 << 40, 1 << 40)),
        compiler=types.SimpleNamespace(CompileException=type("CompileException",
                                                             (Exception,), {})),
        memory=types.SimpleNamespace(OutOfMemoryError=type("OutOfMemoryError",
                                                           (Exception,), {})),
        get_current_stream=lambda: stream,
        Device=lambda: types.SimpleNamespace(compute_capability="80"),
        function=types.SimpleNamespace(Module=Module))
    cupy.uint8 = np.uint8
    cupy.empty = empty
    cupy.asarray = lambda a: _DevArray(np.array(a))
    cupy.ndarray = ndarray
    cupy.asnumpy = lambda a: np.array(a)
    return cupy


def test_gpu_calls_from_8_threads_take_turns_and_release_frees_the_arena(monkeypatch):
    # The device arena is one per program: calls must not overlap on it. The stand-in kernel
    # counts the launches in flight (sleeping lets another thread in, were there no lock).
    state = {"now": 0, "most": 0, "launches": 0}
    guard = threading.Lock()

    def kernel(grid, block, args, shared_mem=0):
        with guard:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            state["launches"] += 1
        time.sleep(0.002)
        with guard:
            state["now"] -= 1
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(kernel))
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.cublas = types.ModuleType("cupy_backends.cuda.libs.cublas")  # (no gemm launched)
    libs.nvrtc = types.ModuleType("cupy_backends.cuda.libs.nvrtc")  # (no module compiled:)
    monkeypatch.setattr("runtime.gpu.nvrtc.device_image", lambda *args, **kw: b"")
    for name, module in [("cupy_backends", types.ModuleType("cupy_backends")),
                         ("cupy_backends.cuda", types.ModuleType("cupy_backends.cuda")),
                         ("cupy_backends.cuda.libs", libs),
                         ("cupy_backends.cuda.libs.cublas", libs.cublas),
                         ("cupy_backends.cuda.libs.nvrtc", libs.nvrtc)]:
        monkeypatch.setitem(sys.modules, name, module)
    sys.modules["cupy_backends"].cuda = sys.modules["cupy_backends.cuda"]
    sys.modules["cupy_backends.cuda"].libs = libs
    fn = cc.compile(lambda x: (x * 3.0).exp(), backend="gpu")
    x = np.ones(1000, np.float32)
    prog = fn.lower(x)
    _in_threads(lambda i: [fn(x) for _ in range(5)])
    assert state["launches"] >= THREADS * 5
    assert state["most"] == 1, "two calls ran on the program's arena at once"
    assert prog._exec._arena is not None
    fn.clear_cache()
    assert prog._exec._arena is None and prog._exec.idle_arena_bytes() == 0
