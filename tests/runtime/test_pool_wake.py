"""How the cpu backend's pool (runtime/cpu/pool.py) wakes, places and puts to sleep its
workers: kept off the calling thread's CPU, pinged at the start of a call of a parallel
program (never for a serial one), asleep (not spinning) after the bounded poll, a caller that
sleeps while a worker's chunk runs long is woken, results bit-identical after idle pauses,
overlapping calls from two Python threads finish. Behaviour, no timings (the pauses only let
threads fall asleep; benchmarks/parallel_loops.py measures speed)."""
from __future__ import annotations

import ctypes
import os
import threading
import time

import numpy as np
import pytest

import compiler as cc
from runtime.cpu import pool

PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64)
CHUNK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
EV = {name: k for k, name in pool.EVENTS.items()}
PROC = os.path.exists("/proc/self/task")


def add100(x):
    for _ in range(100):
        x = x + 1.0
    return x


def _x(seed=0, shape=(1000, 1000)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run_ns(tid) -> int:
    """Nanoseconds thread `tid` of this process has run (the scheduler's own count)."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def _traced(fn, *args):
    pool.trace_start()
    try:
        out = fn(*args)
    finally:
        rows = pool.trace_stop()
    return out, rows


def _asleep(timeout=5.0):
    """Waits until every worker has gone to sleep (its poll is bounded); True if they did."""
    end = time.monotonic() + timeout
    addr = pool._pool["addr"]
    while time.monotonic() < end:
        if ctypes.c_int64.from_address(addr + pool._SLEEPERS).value >= pool.workers():
            return True
        time.sleep(0.005)
    return False


def _check_masks(rows, started):
    """After a traced call of one job: the workers were kept off the CPU its caller posted
    from, unless the caller then slept waiting for their last chunks (its CPU idle: they got
    back the whole mask they were started with, `let_near`)."""
    tids = pool.worker_tids()
    assert len(tids) == pool.workers() >= 1
    post = rows[rows["event"] == EV["post"]]
    assert len(post) == 1
    near = np.flatnonzero(rows["event"] == EV["let_near"])
    if len(near):
        assert pool.kept_off() == -1
        for tid in tids:
            assert os.sched_getaffinity(tid) == started, tid
    else:
        away = pool.kept_off()
        assert away == post["cpu"][0] and away in started
        for tid in tids:
            assert os.sched_getaffinity(tid) == started - {away}, (tid, away)
    before = rows[:near[0]] if len(near) else rows
    worker_chunks = before[(before["event"] == EV["claim"]) & (before["who"] >= 0)]
    assert (worker_chunks["cpu"] != post["cpu"][0]).all(), rows


@pytest.mark.skipif(not PROC or pool.available_cores() < 2, reason="needs 2 cores and /proc")
def test_workers_are_kept_off_the_calling_threads_cpu():
    """A worker woken onto the CPU its caller runs on preempts the caller and the call gains
    nothing (measured on a 2-vCPU VM: the worker ran all 64 chunks of add100 while the caller
    waited): after a parallel call every worker may run anywhere the caller may but on the
    CPU the caller was on, and every chunk a worker ran was on another CPU than the caller's
    (once the caller sleeps waiting for their last chunks, its CPU is theirs again)."""
    x = _x()
    fn = cc.compile(add100, threads=2)
    expected = cc.compile(add100, threads=1)(x)
    fn(x)
    for _ in range(3):
        assert _asleep()  # (a sleeping worker's wake-up is what gets placed)
        out, rows = _traced(fn, x)
        assert out.tobytes() == expected.tobytes()
        _check_masks(rows, os.sched_getaffinity(0))


def test_serial_programs_never_ping_or_wake_the_workers():
    """threads=2 but every loop below the parallel threshold: a call records no pool event
    (no ping, no job), and the sleeping workers don't run at all over 200 calls."""
    x = _x(1, (16, 16))
    fn = cc.compile(add100, threads=2)
    fn(x)
    assert fn.lower(x)._exec._wake is None
    pool.ensure(2)
    assert _asleep()
    before = {t: _run_ns(t) for t in pool.worker_tids()} if PROC else {}
    pool.trace_start()
    try:
        for _ in range(200):
            fn(x)
    finally:
        rows = pool.trace_stop()
    assert len(rows) == 0, rows
    for tid, ns in before.items():
        assert _run_ns(tid) == ns, tid


@pytest.mark.skipif(not PROC, reason="needs /proc")
def test_a_call_pings_sleeping_workers_first_and_they_sleep_again_after_the_poll():
    """After an idle pause the workers sleep; a call of a parallel program pings them before
    it posts its first job (its wake-up overlaps the call's own start), and after the last
    job the workers go back to sleep: over an idle 200 ms after that their CPU time stays
    flat (a bounded poll, no spinning between calls)."""
    x = _x(2)

    def total(a):  # (one small output: the native short call, `fast_one`)
        return (a * 2.0 + 1.0).sum()
    for f in (add100, total):
        fn = cc.compile(f, threads=2)
        expected = cc.compile(f, threads=1)(x).tobytes()
        for _ in range(3):
            fn(x)
        for _ in range(2):
            assert _asleep()
            out, rows = _traced(fn, x)
            assert out.tobytes() == expected
            events = rows["event"].tolist()
            assert EV["wake"] in events and EV["post"] in events, (f.__name__, events)
            assert events.index(EV["wake"]) < events.index(EV["post"])
    assert _asleep()
    before = {t: _run_ns(t) for t in pool.worker_tids()}
    time.sleep(0.2)
    for tid, ns in before.items():
        assert _run_ns(tid) - ns < 20e6, tid  # (asleep: at most a few stray wake-ups)


def test_results_are_bit_identical_at_1_and_2_threads_after_idle_pauses():
    """The same values whether the workers were polling (back-to-back calls) or asleep and
    pinged (after a pause), for a fused loop and a full reduction (partials combined in chunk
    order)."""
    x = _x(3)

    def reduce(a):
        return (a * 1.5 + 0.25).sum()
    for f in (add100, reduce):
        ref = cc.compile(f, threads=1)(x).tobytes()
        fn = cc.compile(f, threads=2)
        for pause in (0, 0.05, 0, 0.2, 0):
            time.sleep(pause)
            assert fn(x).tobytes() == ref, (f.__name__, pause)


def test_a_caller_asleep_on_a_long_chunk_is_woken_by_the_last_one():
    """The caller's chunks are done long before a worker's (chunk 1 takes 300 ms): the caller
    polls, then sleeps on the condition variable, and the worker that finishes the last chunk
    wakes it (the broadcast goes only to sleeping callers: a lost one would hang here)."""
    pool.ensure(2)
    caller = threading.get_native_id()
    ran = []

    def chunk(ctx, c):
        ran.append(c)
        if threading.get_native_id() != caller:
            time.sleep(0.3)
    cb = CHUNK(chunk)
    pool.trace_start()
    try:
        PARALLEL_FOR(pool.parallel_for_address())(ctypes.cast(cb, ctypes.c_void_p), None, 2,
                                                  2)
    finally:
        rows = pool.trace_stop()
    assert sorted(ran) == [0, 1]
    mine = rows[rows["who"] == -1]["event"].tolist()
    if EV["claim"] in [e for e, w in zip(rows["event"], rows["who"]) if w >= 0]:
        assert EV["caller_sleep"] in mine and EV["caller_woke"] in mine, rows
    assert mine[-1] == EV["finish"]


def test_overlapping_calls_from_two_python_threads_finish_with_the_serial_results():
    """Two Python threads calling parallel programs at once, with pauses that let the workers
    fall asleep between some calls: pings, jobs and sleeps interleave; every call returns
    (no lost wake-up) with the serial result."""
    x, y = _x(4), _x(5)

    def scale(a):
        return (a * 3.0 - 1.0) * a
    ref = {0: cc.compile(add100, threads=1)(x).tobytes(),
           1: cc.compile(scale, threads=1)(y).tobytes()}
    progs = {0: (cc.compile(add100, threads=2), x), 1: (cc.compile(scale, threads=2), y)}
    barrier = threading.Barrier(2)
    bad: list = []

    def calls(k):
        fn, a = progs[k]
        barrier.wait()
        for i in range(40):
            if i % 10 == 9:
                time.sleep(0.01)
            if fn(a).tobytes() != ref[k]:
                bad.append((k, i))
    ts = [threading.Thread(target=calls, args=(k,), daemon=True) for k in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts), "a call never returned"
    assert not bad


@pytest.mark.skipif(not PROC or pool.available_cores() < 2, reason="needs 2 cores and /proc")
def test_a_caller_allowed_one_cpu_keeps_the_workers_off_it_within_their_own_mask():
    """A Python thread pinned to one CPU calls a parallel program: the workers keep the CPUs
    they were started on but that one (not the caller's one-CPU mask less its CPU: none),
    and the results are the serial ones; a call from this thread then keeps them off its
    CPU, within the same mask."""
    x = _x(6)
    fn = cc.compile(add100, threads=2)
    expected = cc.compile(add100, threads=1)(x).tobytes()
    fn(x)
    started = os.sched_getaffinity(0)  # (this process's threads all start with it here)
    cpu = sorted(started)[-1]
    got, traces = [], []

    def pinned():
        os.sched_setaffinity(0, {cpu})
        for _ in range(3):
            assert _asleep()
            out, rows = _traced(fn, x)
            got.append(out.tobytes())
            traces.append(rows)
    t = threading.Thread(target=pinned)
    t.start()
    t.join(60)
    assert got == [expected] * 3
    assert (traces[-1][traces[-1]["event"] == EV["post"]]["cpu"] == cpu).all()
    _check_masks(traces[-1], started)
    assert _asleep()
    out, rows = _traced(fn, x)
    assert out.tobytes() == expected
    _check_masks(rows, started)
