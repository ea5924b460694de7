"""The cpu backend's thread pool (runtime/cpu/pool.py) and its parallel kernels (emitter.py:
`_kernel(..., split=)`): the `threads=` option and COMPILER_THREADS, small loops serial,
results bit-identical for any thread count (the examples' training steps: losses and the
updated parameters, i.e. the gradients applied), chunks really run on other threads, the
pool after fork, workers' signals, a fault in a worker reported by faulthandler.
No timings here (benchmarks/parallel_loops.py measures)."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from examples import cnn as ex_cnn
from examples import mlp as ex_mlp
from examples import transformer_block as ex_tf
from runtime import arena
from runtime.cpu import emitter, pool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64)
CHUNK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)


@pytest.fixture
def split_everything(monkeypatch):
    """Every loop that can be cut is cut, as finely as its outer loop allows."""
    monkeypatch.setattr(emitter, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(emitter, "GRAIN", 1)


def _parallel_calls(prog) -> int:
    return prog._exec.source.count('call void @"inplace_parallel_for"')


# -- the option ----------------------------------------------------------------------------
def test_threads_option_environment_variable_and_default(monkeypatch):
    monkeypatch.delenv("COMPILER_THREADS", raising=False)
    x = np.ones((4,), np.float32)
    assert cc.compile(lambda a: a + 1, threads=3).threads == 3
    prog = cc.compile(lambda a: a + 1, threads=3).lower(x)
    assert prog._exec.threads == 3
    assert cc.compile(lambda a: a + 1).threads == len(os.sched_getaffinity(0))
    monkeypatch.setenv("COMPILER_THREADS", "5")
    assert cc.compile(lambda a: a + 1).threads == 5
    assert cc.compile(lambda a: a + 1).lower(x)._exec.threads == 5
    assert cc.compile(lambda a: a + 1, threads=2).threads == 2  # the option wins


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2", True])
def test_threads_option_refuses_what_is_not_a_count(bad):
    with pytest.raises(ValueError, match=r"threads must be a whole number of threads >= 1"):
        cc.compile(lambda a: a + 1, threads=bad)


def test_threads_variable_refuses_what_is_not_a_count(monkeypatch):
    monkeypatch.setenv("COMPILER_THREADS", "many")
    with pytest.raises(ValueError, match=r"COMPILER_THREADS must be a whole number .*'many'"):
        cc.compile(lambda a: a + 1)


# -- what runs in parallel -----------------------------------------------------------------
def test_small_loops_stay_serial_and_big_ones_are_cut():
    small = np.ones((64, 64), np.float32)       # 4k elements: below PARALLEL_MIN_WORK
    big = np.ones((1000, 1000), np.float32)

    def f(x):
        return (x * 2.0 + 1.0).sum(), x.sum(1), x.exp()
    fn = cc.compile(f, threads=2)
    assert _parallel_calls(fn.lower(small)) == 0
    assert _parallel_calls(fn.lower(big)) == 4  # the fused loop, its sum, the rows, exp
    assert emitter.chunking(1000, 1) is None                       # 1k element operations
    assert emitter.chunking(emitter.PARALLEL_MIN_WORK // 8 - 1, 8) is None
    per, chunks = emitter.chunking(1000, 1000)  # 1M element operations: 1M // GRAIN chunks
    assert (per, chunks) == (34, 30) and per * chunks >= 1000 > per * (chunks - 1)
    assert emitter.chunking(10 ** 6, 100) == (15625, 64)  # at most MAX_CHUNKS


def test_chunks_are_fixed_by_the_shape_not_the_thread_count():
    x = np.random.default_rng(0).standard_normal((1000, 1000)).astype(np.float32)
    sources = {t: cc.compile(lambda a: a.sum(), threads=t).lower(x)._exec.source
               for t in (1, 2, 8)}
    assert sources[1] == sources[2] == sources[8]  # the thread count is the entry's argument


@pytest.mark.parametrize("m, n, k, blocks", [
    (1024, 256, 256, 4),     # the transformer's projections: 4 row blocks of 256
    (256, 1024, 784, 4),     # the MLP's first layer: 4 column blocks of 256
    (256, 256, 1024, 2),     # a weight gradient: 2 row blocks of 128
    (4096, 64, 64, 16),      # long: blocks of at most 256 rows
])
def test_a_parallel_gemm_is_cut_into_few_big_blocks(m, n, k, blocks):
    # each block is one cblas call that packs the other operand again: 64-row blocks cost
    # 10-25% more CPU than one call on these shapes, even at one thread (gemm_kernels.py)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n))
    b = b.astype(np.float32)
    src = cc.compile(lambda x, y: x @ y, threads=2).lower(a, b)._exec.source
    calls = [line for line in src.splitlines() if 'call void @"inplace_parallel_for"' in line]
    assert len(calls) == 1 and f"i64 {blocks}, i64 %" in calls[0], calls
    got = {t: cc.compile(lambda x, y: x @ y, threads=t)(a, b) for t in (1, 2, 3)}
    assert got[1].tobytes() == got[2].tobytes() == got[3].tobytes()
    np.testing.assert_allclose(got[1], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def _cnn():
    """The cnn example's layer step, on a fresh net (its parameters, running statistics and
    velocities are the arrays the step updates)."""
    net, opt = ex_cnn.make_net()
    arrays = list(net.state_dict().values()) + list(opt.state_dict().values())
    return ex_cnn.train_step_for(net, opt), list(ex_cnn.example_inputs()), arrays


def _fresh(step, inputs):
    return lambda: (step, [np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                           for a in inputs], [])


def _steps():
    """(name, make) of the examples, at sizes where every kernel is cut; make() gives a fresh
    (train_step, inputs, the arrays it owns and updates besides the inputs)."""
    return [
        ("mlp", _fresh(ex_mlp.train_step, ex_mlp.example_inputs(batch=32, sizes=(48, 64, 10)))),
        ("transformer", _fresh(ex_tf.train_step,
                               ex_tf.example_inputs(batch=2, seq=16, d_model=32, d_mlp=64))),
        ("cnn", _cnn),
    ]


@pytest.mark.parametrize("name, make", _steps(), ids=lambda v: v if isinstance(v, str) else "")
def test_example_steps_are_bit_identical_for_any_thread_count(name, make, split_everything):
    """Three training steps each (loss, then the parameters the step updated with its
    gradients), threads 1, 2, 3, 8: the same bits; and close to the numpy backend's."""
    results = {}
    for threads in (1, 2, 3, 8):
        step, args, owned = make()
        fn = cc.compile(step, threads=threads)
        assert _parallel_calls(fn.lower(*args)) > 0
        seen = []
        for _ in range(3):
            out = fn(*args)
            seen.append([np.asarray(o).tobytes() for o in (out if isinstance(out, tuple)
                                                           else (out,))])
            seen.append([a.tobytes() for a in args + owned if isinstance(a, np.ndarray)])
        results[threads] = seen
    assert results[1] == results[2] == results[3] == results[8]
    step, args, owned = make()
    ref_step, ref, ref_owned = make()
    np.testing.assert_allclose(np.asarray(cc.compile(step, threads=2)(*args)),
                               np.asarray(cc.compile(ref_step, backend="numpy")(*ref)),
                               rtol=1e-4, atol=1e-5)
    for a, r in zip(args + owned, ref + ref_owned):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5)


def _kernels(a, b, c, d, e, w, g):
    """A kernel of each parallel kind: matmul (row blocks, column blocks, batches, transposed
    operands), gemm (the fused update, its copy of c per block), reductions (full, rows,
    columns), softmax and log_softmax rows, cumsum rows, max_pool2d, conv2d, a broadcast
    loop (the conv gradients: the cnn step above)."""
    return (a @ b, a.T @ c, c @ d, F.softmax(e @ e.transpose([0, 2, 1]), -1),
            F.log_softmax(c @ d, 1), b.T @ a.T, w.addmm(a.T, c, alpha=-0.1, beta=1.0),
            g.sum(), g.mean(), g.max(), g.sum(0), g.sum(1), g.max(1),
            (g * d[:1, :g.shape[1]]).sum(0, keepdim=True), g.cumsum(1),
            F.max_pool2d(g.reshape([7, 4, 150, 150]), 3, stride=2, padding=1),
            F.conv2d(g.reshape([7, 4, 150, 150]),
                     e[0, :72, 0].reshape([8, 3, 3]).unsqueeze(1).expand([8, 4, 3, 3]),
                     padding=1))


def _kernel_inputs(dtype):
    rng = np.random.default_rng(1)
    shapes = [(300, 500), (500, 700), (300, 90), (90, 4000), (6, 200, 64), (500, 90),
              (700, 900)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parallel_kernels_are_bit_identical_and_match_numpy(dtype):
    inputs = _kernel_inputs(dtype)
    got = {}
    for threads in (1, 2, 3, 8):
        fn = cc.compile(_kernels, threads=threads)
        assert _parallel_calls(fn.lower(*inputs)) >= 17
        got[threads] = [np.asarray(r) for r in fn(*inputs)]
    for threads in (2, 3, 8):
        for k, (x, y) in enumerate(zip(got[1], got[threads])):
            assert x.tobytes() == y.tobytes(), (threads, k)
    ref = cc.compile(_kernels, backend="numpy")(*inputs)
    tol = dict(rtol=2e-4, atol=2e-3) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-9)
    for k, (x, r) in enumerate(zip(got[1], ref)):
        np.testing.assert_allclose(x, np.asarray(r), err_msg=f"output {k}", **tol)


def _conv_pool_grads(x, w):
    x.stop_gradient = False
    w.stop_gradient = False
    y = F.max_pool2d(F.conv2d(x, w, padding=1), 2)
    (y * y).sum().backward()
    return x.grad, w.grad


def test_conv_and_pool_gradients_are_bit_identical_and_match_numpy():
    """conv2d's two gradients (output channels) and max_pool2d's (batch rows), at sizes
    that run in parallel as they are."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 6, 40, 40)).astype(np.float32)
    w = rng.standard_normal((12, 6, 3, 3)).astype(np.float32)
    got = {}
    for threads in (1, 2, 3, 8):
        fn = cc.compile(_conv_pool_grads, threads=threads)
        assert _parallel_calls(fn.lower(x, w)) >= 4
        got[threads] = [g.tobytes() for g in fn(x, w)]
    assert got[1] == got[2] == got[3] == got[8]
    ref = cc.compile(_conv_pool_grads, backend="numpy")(x, w)
    for g, r in zip(cc.compile(_conv_pool_grads, threads=2)(x, w), ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-3)


def test_full_reduction_partials_combine_in_chunk_order():
    """A full float32 sum with a fixed partition: the same bits with any thread count, and
    its partials are float64 (a float32 accumulator would stop at 2**24: x is 2**24 and 1s)."""
    x = np.ones(1 << 20, np.float32)
    x[0] = 2.0 ** 24  # a float32 accumulator would stop at 2**24; float64 partials don't
    outs = {t: cc.compile(lambda a: a.sum(), threads=t)(x) for t in (1, 2, 8)}
    assert outs[1].tobytes() == outs[2].tobytes() == outs[8].tobytes()
    assert float(outs[1]) == np.float32(2.0 ** 24 + (1 << 20) - 1)


@pytest.mark.parametrize("keepdim", [False, True])
def test_a_reduction_whose_kept_dims_are_all_size_one_is_a_full_one(keepdim,
                                                                      split_everything):
    """[2, 1, 1].sum(0): the kept dims collapse away, so it is cut as a full reduction
    (partials), which must still find the output's place."""
    x = np.random.default_rng(5).standard_normal((2, 1, 1)).astype(np.float32)
    outs = [cc.compile(lambda a: a.sum(0, keepdim=keepdim), threads=t)(x) for t in (1, 2)]
    assert outs[0].tobytes() == outs[1].tobytes()
    np.testing.assert_allclose(outs[0], x.sum(0, keepdims=keepdim), rtol=1e-6)


# -- the pool itself ------------------------------------------------------------------------
def _run_chunks(n, threads, fn):
    """inplace_parallel_for over a ctypes callback `fn(chunk)`."""
    pool.ensure(max(threads, 1))
    cb = CHUNK(lambda ctx, c: fn(c))
    PARALLEL_FOR(pool.parallel_for_address())(ctypes.cast(cb, ctypes.c_void_p), None, n,
                                              threads)


def test_chunks_run_on_another_thread_when_allowed():
    """Chunk 0 (the caller's) waits until another thread has run chunk 1: with 2 threads a
    worker does; with 1 the caller runs both, in order (chunk 0 then gives up waiting)."""
    caller = threading.get_native_id()
    for threads, expect_worker in ((2, True), (1, False)):
        other = threading.Event()
        ran: list = []

        def chunk(c):
            ran.append((c, threading.get_native_id()))
            if threading.get_native_id() != caller:
                other.set()
            elif c == 0:
                other.wait(10 if expect_worker else 0.05)
        _run_chunks(2, threads, chunk)
        assert sorted(c for c, _ in ran) == [0, 1]
        assert other.is_set() == expect_worker
        if not expect_worker:
            assert ran == [(0, caller), (1, caller)]


def test_calls_at_once_each_run_every_chunk_once():
    """Two Python threads calling at once: one has the pool, the other runs its chunks
    itself; each call runs each of its chunks exactly once."""
    counts = [np.zeros(50, np.int64), np.zeros(50, np.int64)]
    barrier = threading.Barrier(2)

    def call(k):
        barrier.wait()
        for _ in range(20):
            _run_chunks(50, 3, lambda c: counts[k].__setitem__(c, counts[k][c] + 1))
    threads = [threading.Thread(target=call, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts[0].tolist() == [20] * 50 and counts[1].tolist() == [20] * 50


def test_the_caller_takes_chunks_from_the_front_and_a_worker_from_the_back():
    """Each thread's chunks are contiguous, and a worker starts at the far end of the caller's
    (not on the chunk next to it: two threads on the same fresh huge page both fault it). The
    caller's chunk 0 waits until the worker has run one. Jobs of more chunks than the claim
    word's 16 bits hold run serially, each chunk once."""
    caller = threading.get_native_id()
    for _ in range(3):
        ran: list = []
        other = threading.Event()

        def chunk(c, ran=ran, other=other):
            mine = threading.get_native_id() == caller
            ran.append((c, mine))
            if not mine:
                other.set()
            elif c == 0:
                other.wait(10)
        _run_chunks(12, 2, chunk)
        front = [c for c, mine in ran if mine]
        back = [c for c, mine in ran if not mine]
        assert other.is_set() and back[0] == 11, ran
        assert front == list(range(len(front))), ran
        assert back == list(range(11, 11 - len(back), -1)), ran
        assert sorted(front + back) == list(range(12))
    counts = np.zeros(70000, np.int64)
    _run_chunks(70000, 2, lambda c: counts.__setitem__(c, counts[c] + 1))
    assert (counts == 1).all()


def _minor_faults(tid) -> int:
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc")
def test_fresh_outputs_fault_on_the_calling_thread_not_on_a_worker(monkeypatch):
    """A fresh 4 MB output written by a parallel loop takes its page faults on the calling
    thread, before the job (as a serial call does): a worker that faulted them as well costs
    1-3 ms of kernel time per call on a VM (benchmarks/parallel_loops.py: CPU per
    call). The worker does run chunks (its share of the CPU time); the values are the
    serial ones. (The first touch is off by default since issue 25's fresh outputs: each
    thread faults its own pages; this checks it where it is asked for.)"""
    monkeypatch.setattr(emitter, "TOUCH_MIN_THREADS", 2)
    x = np.random.default_rng(4).standard_normal((1000, 1000)).astype(np.float32)

    def f(a):
        for _ in range(20):
            a = a + 1.0
        return a
    expected = cc.compile(f, threads=1)(x).tobytes()
    prog = cc.compile(f, threads=2).lower(x)
    assert prog(x).tobytes() == expected
    workers = _worker_ids()
    assert workers
    me = threading.get_native_id()
    before = {t: _minor_faults(t) for t in workers | {me}}
    mine = total = 0.0
    calls = 0
    for _ in range(400):  # until the worker has done a tenth of the work (a loaded machine)
        t0, p0 = time.thread_time(), time.process_time()
        for _ in range(10):
            arena.trim()  # (fresh memory: a reused output region takes no faults at all)
            out = prog(x)
        calls += 10
        mine += time.thread_time() - t0
        total += time.process_time() - p0
        if total - mine > 0.1 * total and total > 0.05:
            break
    after = {t: _minor_faults(t) for t in workers | {me}}
    assert out.tobytes() == expected
    assert total - mine > 0.1 * total, "the worker never ran"
    if after[me] - before[me] > 100 * calls:  # (4 KiB pages: ~1000 a call)
        pytest.skip("the outputs are not on 2 MiB pages here")
    assert sum(after[t] - before[t] for t in workers) == 0
    assert after[me] > before[me]  # (the caller took them)


def test_parallel_programs_called_from_threads_match_the_serial_calls():
    """Big (parallel) programs called from 3 Python threads at once, each on its own data:
    whichever call has the pool, each result is the serial call's, bit for bit."""
    rng = np.random.default_rng(3)
    data = [rng.standard_normal((600, 800)).astype(np.float32) for _ in range(3)]
    w = rng.standard_normal((800, 300)).astype(np.float32)
    fn = cc.compile(lambda x, w: (F.softmax(x @ w, 1).sum(0), (x * 2.0).exp().sum()),
                    threads=2)
    serial = [[r.tobytes() for r in fn(x, w)] for x in data]
    got: list = [None] * 3
    barrier = threading.Barrier(3)

    def work(i):
        barrier.wait()
        got[i] = [[r.tobytes() for r in fn(data[i], w)] for _ in range(4)]
    ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in range(3):
        assert got[i] == [serial[i]] * 4, i


def _worker_ids(threads=2):
    ids = set()
    caller = threading.get_native_id()
    seen = threading.Event()

    def chunk(c):
        if threading.get_native_id() != caller:
            ids.add(threading.get_native_id())
            seen.set()
        elif c == 0:
            seen.wait(10)
    _run_chunks(2, threads, chunk)
    return ids


def _mask(tid, field):
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1], 16)
    raise AssertionError(field)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc")
def test_workers_block_asynchronous_signals_but_not_faults():
    """Ctrl-C and friends go to Python's threads (the signal tests rely on it); SIGSEGV is
    not blocked in a worker, so faulthandler still reports a fault there."""
    ids = _worker_ids()
    assert ids
    for tid in ids:
        blocked = _mask(tid, "SigBlk")
        for sig in (2, 15, 14, 10):            # SIGINT, SIGTERM, SIGALRM, SIGUSR1
            assert blocked >> (sig - 1) & 1, (tid, sig)
        for sig in (11, 7, 8, 4):              # SIGSEGV, SIGBUS, SIGFPE, SIGILL
            assert not blocked >> (sig - 1) & 1, (tid, sig)
    assert not _mask(threading.get_native_id(), "SigBlk") >> 1 & 1  # this thread: as before


def test_a_fault_in_a_worker_is_reported_not_silent():
    code = (
        "import ctypes, faulthandler, sys, threading\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "faulthandler.enable()\n"
        "from runtime.cpu import pool\n"
        "pool.ensure(2)\n"
        "caller = threading.get_native_id()\n"
        "def chunk(ctx, c):\n"
        "    if threading.get_native_id() != caller:\n"
        "        ctypes.string_at(0)\n"
        "    else:\n"
        "        threading.Event().wait(10)\n"
        "cb = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(chunk)\n"
        "pf = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,\n"
        "                      ctypes.c_int64)(pool.parallel_for_address())\n"
        "pf(ctypes.cast(cb, ctypes.c_void_p), None, 2, 2)\n"
        "print('not reached')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "not reached" not in r.stdout
    assert "Fatal Python error: Segmentation fault" in r.stderr, r.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_the_pool_works_again_after_fork():
    x = np.random.default_rng(2).standard_normal((1000, 1000)).astype(np.float32)
    fn = cc.compile(lambda a: (a * 2.0).sum(1), threads=2)
    expected = fn(x).tobytes()
    assert _worker_ids()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: workers started again, the program runs, a worker joins
        ok = False
        try:
            ok = fn(x).tobytes() == expected and bool(_worker_ids()) and pool.workers() >= 1
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"


def test_blas_threads_are_restored_after_calls_that_run_gemm_blocks():
    before = pool.blas_threads()
    if before is None:
        pytest.skip("no OpenBLAS")
    a = np.ones((400, 300), np.float32)
    fn = cc.compile(lambda x: x @ x.T, threads=2)
    assert _parallel_calls(fn.lower(a)) == 1
    barrier = threading.Barrier(3)

    def calls():
        barrier.wait()
        for _ in range(5):
            fn(a)
    ts = [threading.Thread(target=calls) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert pool.blas_threads() == before
