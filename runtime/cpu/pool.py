"""The cpu backend's thread pool: native worker threads started once per process that run
the chunks of a parallel kernel, and sleep (on a condition variable) when there is none.

A kernel that is worth splitting (`emitter.py`, `_kernel(..., split=)`) is emitted as a chunk
function `f(ctx, c)` that runs chunk `c` of its outermost loop; the entry calls

    void inplace_parallel_for(f, ctx, n_chunks, threads)

which posts the job, runs chunks on the calling thread too, and returns when all `n_chunks`
are done. The chunks are fixed by the shape when the module is emitted, never by `threads`:
each chunk computes the same values whichever thread runs it, so results are bit-identical
for any thread count (a reduction's partial sums and their combining order are chunks too).

The pool is written in LLVM IR (`POOL_IR`, compiled once through `jit.compile_ir` and linked
like libm: its `inplace_parallel_for` is one of the symbols modules import), and calls libc's
pthread mutex and condition variable; threads are started from Python through ctypes'
`pthread_create` on the JIT'd `inplace_pool_worker`. Chunks are claimed with a
compare-and-swap on one word holding (job generation, front, back), so a worker that wakes
late for a finished job claims nothing of the next one. The caller claims from the front and
workers from the back: each thread's chunks are contiguous, and the first chunks two threads
run are far apart (measured: two threads starting on neighbouring chunks of a fresh output
both fault, and zero, the same 2 MiB page). Jobs of more than 65535 chunks run serially.

Waiting: a worker that ran out of chunks polls for the next job for SPIN_SECONDS before it
sleeps, and a caller whose chunks are done polls for the workers' last ones as long before
it sleeps (measured on a 2-vCPU VM: a futex sleep and wake-up costs the pair 25-60 us of CPU
and the worker joins ~25 us late, more than polling through the short gaps between a
program's kernels); the poll is bounded, so no thread spins between calls for longer.
Two calls at once from Python threads
(tests/runtime/test_threads.py): the first takes the pool, the other runs its chunks on its
own thread (same chunks, same results).

Workers block every asynchronous signal (they are delivered to Python's threads, as the
signal tests need); faults (SIGSEGV, SIGBUS, ...) still reach Python's `faulthandler` from a
worker. After `fork` the child re-initialises the pool and starts its workers again.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import threading
import time

from . import jit

# The state block (bytes): pthread objects get 64 bytes each (glibc's mutex is 40, its
# condition variable 48); the claim and done words have cache lines of their own; _SPIN holds
# the poll's length in rounds of its loop.
_MUTEX, _WORK, _DONE = 0, 64, 128
_GEN, _FN, _CTX, _N, _LIMIT, _SPIN = 192, 200, 208, 216, 224, 232
_CLAIM, _DONE_COUNT, _BUSY, _WORKERS = 256, 320, 384, 448
_STATE_BYTES = 512
# How long a thread polls before it sleeps (module docstring), converted at start-up to rounds
# of the polling loop (timed then: portable, where a cycle counter may not be readable).
SPIN_SECONDS = 30e-6

POOL_IR = r"""
@state = internal global ptr null

declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)

; `k` rounds of the polls' loop on a word that never changes (to time them: `_poll_rate`).
define void @inplace_pool_poll(ptr %p, i64 %k) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %v = load atomic i64, ptr %p acquire, align 8
  %hit = icmp eq i64 %v, 1
  br i1 %hit, label %out, label %next
next:
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %k
  br i1 %more, label %loop, label %out
out:
  ret void
}

define void @inplace_pool_init(ptr %s) {
  store atomic ptr %s, ptr @state release, align 8
  ret void
}

; Claim and run chunks of job %g until none is left (or a newer job was posted). The claim
; word is (generation:32, front:16, back:16): chunks [front, back) are unclaimed; the caller
; takes them from the front, workers from the back (%back), so each thread's chunks are
; contiguous and two threads don't start on the same memory.
define internal void @chunks(ptr %s, i64 %g, ptr %f, ptr %c, i64 %n, i1 %back) noinline {
entry:
  %claimp = getelementptr i8, ptr %s, i64 256
  %donep = getelementptr i8, ptr %s, i64 320
  %g32 = and i64 %g, 4294967295
  br label %loop
loop:
  %w = load atomic i64, ptr %claimp acquire, align 8
  %wg = lshr i64 %w, 32
  %same = icmp eq i64 %wg, %g32
  br i1 %same, label %check, label %out
check:
  %fr0 = lshr i64 %w, 16
  %fr = and i64 %fr0, 65535
  %bk = and i64 %w, 65535
  %more = icmp ult i64 %fr, %bk
  br i1 %more, label %claim, label %out
claim:
  %bk1 = sub i64 %bk, 1
  %i = select i1 %back, i64 %bk1, i64 %fr
  %wb = sub i64 %w, 1
  %wf = add i64 %w, 65536
  %w1 = select i1 %back, i64 %wb, i64 %wf
  %r = cmpxchg ptr %claimp, i64 %w, i64 %w1 acq_rel acquire
  %ok = extractvalue { i64, i1 } %r, 1
  br i1 %ok, label %work, label %loop
work:
  call void %f(ptr %c, i64 %i)
  %d = atomicrmw add ptr %donep, i64 1 acq_rel
  %d1 = add i64 %d, 1
  %last = icmp eq i64 %d1, %n
  br i1 %last, label %wake, label %loop
wake:
  %dc = getelementptr i8, ptr %s, i64 128
  %l1 = call i32 @pthread_mutex_lock(ptr %s)
  %b1 = call i32 @pthread_cond_broadcast(ptr %dc)
  %u1 = call i32 @pthread_mutex_unlock(ptr %s)
  br label %out
out:
  ret void
}

; A worker: sleep until a job newer than the last one seen is posted; join it when its
; limit admits this worker's id.
define ptr @inplace_pool_worker(ptr %arg) {
entry:
  %id = ptrtoint ptr %arg to i64
  %s = load atomic ptr, ptr @state acquire, align 8
  %workc = getelementptr i8, ptr %s, i64 64
  %genp = getelementptr i8, ptr %s, i64 192
  %fnp = getelementptr i8, ptr %s, i64 200
  %ctxp = getelementptr i8, ptr %s, i64 208
  %np = getelementptr i8, ptr %s, i64 216
  %limp = getelementptr i8, ptr %s, i64 224
  %spinp = getelementptr i8, ptr %s, i64 232
  br label %sleep
sleep:
  %seen = phi i64 [ 0, %entry ], [ %g, %run ]
  %slim = load atomic i64, ptr %spinp monotonic, align 8
  br label %spin
spin:
  %si = phi i64 [ 0, %sleep ], [ %si1, %spin2 ]
  %sg = load atomic i64, ptr %genp monotonic, align 8
  %snew = icmp ne i64 %sg, %seen
  br i1 %snew, label %lock, label %spin2
spin2:
  %si1 = add i64 %si, 1
  %smore = icmp ult i64 %si1, %slim
  br i1 %smore, label %spin, label %lock
lock:
  %lseen = phi i64 [ %seen, %spin ], [ %seen, %spin2 ], [ %g, %got ]
  %l1 = call i32 @pthread_mutex_lock(ptr %s)
  br label %test
test:
  %g = load atomic i64, ptr %genp monotonic, align 8
  %new = icmp ne i64 %g, %lseen
  br i1 %new, label %take, label %wait
wait:
  %w1 = call i32 @pthread_cond_wait(ptr %workc, ptr %s)
  br label %test
take:
  %f = load ptr, ptr %fnp, align 8
  %c = load ptr, ptr %ctxp, align 8
  %n = load i64, ptr %np, align 8
  %lim = load i64, ptr %limp, align 8
  %u1 = call i32 @pthread_mutex_unlock(ptr %s)
  %mine = icmp ult i64 %id, %lim
  br i1 %mine, label %run, label %got
run:
  call void @chunks(ptr %s, i64 %g, ptr %f, ptr %c, i64 %n, i1 1)
  br label %sleep
got:  ; (not admitted to this job: back to sleep without polling)
  br label %lock
}

; Run f(ctx, 0..n-1), on up to `threads` threads (this one included; workers with an id
; below min(threads, n) - 1 join).
define void @inplace_parallel_for(ptr %f, ptr %c, i64 %n, i64 %threads) {
entry:
  %s = load atomic ptr, ptr @state acquire, align 8
  %nos = icmp eq ptr %s, null
  %one = icmp sle i64 %threads, 1
  %few = icmp sle i64 %n, 1
  %many = icmp sgt i64 %n, 65535
  %x0 = or i1 %few, %many
  %x1 = or i1 %nos, %one
  %x2 = or i1 %x1, %x0
  br i1 %x2, label %serial, label %pool
pool:
  %workersp = getelementptr i8, ptr %s, i64 448
  %nw = load atomic i64, ptr %workersp monotonic, align 8
  %none = icmp eq i64 %nw, 0
  br i1 %none, label %serial, label %take
take:
  %busyp = getelementptr i8, ptr %s, i64 384
  %was = atomicrmw xchg ptr %busyp, i64 1 acquire
  %free = icmp eq i64 %was, 0
  br i1 %free, label %post, label %serial
serial:
  br label %sloop
sloop:
  %i = phi i64 [ 0, %serial ], [ %i1, %sbody ]
  %sdone = icmp sge i64 %i, %n
  br i1 %sdone, label %exit, label %sbody
sbody:
  call void %f(ptr %c, i64 %i)
  %i1 = add i64 %i, 1
  br label %sloop
post:
  %workc = getelementptr i8, ptr %s, i64 64
  %donec = getelementptr i8, ptr %s, i64 128
  %genp = getelementptr i8, ptr %s, i64 192
  %fnp = getelementptr i8, ptr %s, i64 200
  %ctxp = getelementptr i8, ptr %s, i64 208
  %np = getelementptr i8, ptr %s, i64 216
  %limp = getelementptr i8, ptr %s, i64 224
  %claimp = getelementptr i8, ptr %s, i64 256
  %donep = getelementptr i8, ptr %s, i64 320
  %l1 = call i32 @pthread_mutex_lock(ptr %s)
  %g0 = load atomic i64, ptr %genp monotonic, align 8
  %g = add i64 %g0, 1
  store ptr %f, ptr %fnp, align 8
  store ptr %c, ptr %ctxp, align 8
  store i64 %n, ptr %np, align 8
  %want0 = sub i64 %threads, 1
  %nm1 = sub i64 %n, 1
  %lt0 = icmp slt i64 %nm1, %want0
  %want = select i1 %lt0, i64 %nm1, i64 %want0
  %lt = icmp slt i64 %want, %nw
  %lim = select i1 %lt, i64 %want, i64 %nw
  store i64 %lim, ptr %limp, align 8
  store atomic i64 0, ptr %donep monotonic, align 8
  %gs = shl i64 %g, 32
  %gsn = or i64 %gs, %n
  store atomic i64 %gsn, ptr %claimp release, align 8
  store atomic i64 %g, ptr %genp release, align 8
  %b1 = call i32 @pthread_cond_broadcast(ptr %workc)
  %u1 = call i32 @pthread_mutex_unlock(ptr %s)
  call void @chunks(ptr %s, i64 %g, ptr %f, ptr %c, i64 %n, i1 0)
  %d0 = load atomic i64, ptr %donep acquire, align 8
  %fin0 = icmp eq i64 %d0, %n
  br i1 %fin0, label %release, label %cspin0
cspin0:
  %spinp = getelementptr i8, ptr %s, i64 232
  %climit = load atomic i64, ptr %spinp monotonic, align 8
  br label %cspin
cspin:
  %ci = phi i64 [ 0, %cspin0 ], [ %ci1, %cspin2 ]
  %dd = load atomic i64, ptr %donep acquire, align 8
  %fin1 = icmp eq i64 %dd, %n
  br i1 %fin1, label %release, label %cspin2
cspin2:
  %ci1 = add i64 %ci, 1
  %cmore = icmp ult i64 %ci1, %climit
  br i1 %cmore, label %cspin, label %block
block:
  %l2 = call i32 @pthread_mutex_lock(ptr %s)
  br label %wtest
wtest:
  %d = load atomic i64, ptr %donep acquire, align 8
  %fin = icmp eq i64 %d, %n
  br i1 %fin, label %wdone, label %wwait
wwait:
  %w1 = call i32 @pthread_cond_wait(ptr %donec, ptr %s)
  br label %wtest
wdone:
  %u2 = call i32 @pthread_mutex_unlock(ptr %s)
  br label %release
release:
  store atomic i64 0, ptr %busyp release, align 8
  br label %exit
exit:
  ret void
}
"""
PTHREAD = ("pthread_mutex_lock", "pthread_mutex_unlock", "pthread_cond_wait",
           "pthread_cond_broadcast")

# Signals a worker keeps: those a fault raises in the faulting thread (blocked, the kernel
# would kill the process without running Python's faulthandler).
_SYNCHRONOUS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT,
                signal.SIGTRAP, signal.SIGSYS}

_lock = threading.Lock()
_pool: dict = {}


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def _libc():
    if "libc" not in _pool:
        _pool["libc"] = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6",
                                    use_errno=True)
    return _pool["libc"]


def pthread_symbols() -> dict[str, int]:
    """Addresses of the pthread functions the pool's IR calls (libc; libpthread before glibc
    2.34)."""
    libs = [_libc()]
    found = ctypes.util.find_library("pthread")
    if found:
        libs.append(ctypes.CDLL(found))
    syms = {}
    for name in PTHREAD:
        for lib in libs:
            if hasattr(lib, name):
                syms[name] = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                break
    return syms


def _init_state(addr: int):
    libc = _libc()
    ctypes.memset(addr, 0, _STATE_BYTES)
    for off, fn in ((_MUTEX, libc.pthread_mutex_init), (_WORK, libc.pthread_cond_init),
                    (_DONE, libc.pthread_cond_init)):
        if fn(ctypes.c_void_p(addr + off), None) != 0:
            raise OSError("pthread_*_init failed")
    ctypes.c_int64.from_address(addr + _SPIN).value = _pool.get("spin_rounds", 0)


def _poll_rate(poll) -> float:
    """Rounds of the polls' loop per second on this machine (the fastest of a few timings:
    one that was preempted only shortens the poll)."""
    word = ctypes.c_int64(0)
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        poll(ctypes.byref(word), 20000)
        best = max(best, 20000 / max(time.perf_counter() - t0, 1e-9))
    return best


def _spawn(count: int):
    """Start workers until there are `count` (called under `_lock`)."""
    libc, st = _libc(), _pool
    workers = ctypes.c_int64.from_address(st["addr"] + _WORKERS)
    # Workers inherit the creating thread's signal mask: block the asynchronous signals for
    # them (not for this thread: the mask is restored right after).
    block = set(signal.valid_signals()) - _SYNCHRONOUS
    old = signal.pthread_sigmask(signal.SIG_BLOCK, block)
    try:
        while workers.value < count:
            tid = ctypes.c_ulong()
            rc = libc.pthread_create(ctypes.byref(tid), None, ctypes.c_void_p(st["worker"]),
                                     ctypes.c_void_p(workers.value))
            if rc != 0:  # no more threads: run with those we have
                break
            libc.pthread_detach(tid)
            # (the workers read this count only in `inplace_parallel_for`, to bound a job)
            workers.value += 1
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _after_fork_in_child():
    # The parent's workers don't exist here, and a worker may have held the mutex at the
    # fork: a fresh state, then as many workers as before.
    if "addr" not in _pool:
        return
    wanted = ctypes.c_int64.from_address(_pool["addr"] + _WORKERS).value
    _init_state(_pool["addr"])
    global _lock
    _lock = threading.Lock()
    _spawn(wanted)


def ensure(threads: int) -> None:
    """The pool exists with at least `threads - 1` workers (the caller is the other)."""
    st = _pool
    if "addr" in st and st["size"] >= threads - 1:
        return
    with _lock:
        if "addr" not in st:
            for name, address in pthread_symbols().items():  # (what POOL_IR calls)
                jit.register_symbol(name, address)
            compiled = jit.compile_ir(POOL_IR, ["inplace_pool_init", "inplace_pool_worker",
                                                "inplace_parallel_for", "inplace_pool_poll"])
            rate = _poll_rate(ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
                compiled.address("inplace_pool_poll")))
            st["spin_rounds"] = int(rate * SPIN_SECONDS)
            buf = ctypes.create_string_buffer(_STATE_BYTES + 64)
            addr = ctypes.addressof(buf) + (-ctypes.addressof(buf)) % 64
            _init_state(addr)
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(compiled.address("inplace_pool_init"))(addr)
            st.update(compiled=compiled, buf=buf, addr=addr, size=0,
                      worker=compiled.address("inplace_pool_worker"),
                      parallel_for=compiled.address("inplace_parallel_for"))
            jit.register_symbol("inplace_parallel_for", st["parallel_for"])
            os.register_at_fork(after_in_child=_after_fork_in_child)
        if threads - 1 > st["size"]:
            _spawn(threads - 1)
            st["size"] = ctypes.c_int64.from_address(st["addr"] + _WORKERS).value


def parallel_for_address() -> int:
    """The address modules link `inplace_parallel_for` to (the pool is compiled first)."""
    if "parallel_for" not in _pool:
        ensure(1)
    return _pool["parallel_for"]


def workers() -> int:
    """Worker threads started in this process (the tests' hook)."""
    if "addr" not in _pool:
        return 0
    return ctypes.c_int64.from_address(_pool["addr"] + _WORKERS).value


# -- BLAS threads ------------------------------------------------------------------------------
# One policy for both: the pool is the only source of threads in a call. A program that calls
# OpenBLAS cuts its GEMMs into blocks run by the pool (emitter: `_matmul`), each block one
# single-threaded cblas call, so OpenBLAS is set to one thread while such a call runs (its own
# threads would otherwise compete with the pool's, and busy-wait after each GEMM). The count
# the process had is restored when the last such call running ends (numpy's own `@`
# between calls keeps its threads). Measured: a set/restore pair costs ~1.3 us.
_blas_lock = threading.Lock()
_blas = {"running": 0, "saved": None, "set": None, "get": None}


def _blas_functions():
    lib = jit.openblas()
    for prefix in ("scipy_openblas_", "openblas_"):
        for suffix in ("64_", ""):
            set_name = f"{prefix}set_num_threads{suffix}"
            get_name = f"{prefix}get_num_threads{suffix}"
            if lib is not None and hasattr(lib, set_name) and hasattr(lib, get_name):
                return getattr(lib, set_name), getattr(lib, get_name)
    return None, None


def blas_enter():
    """A call that runs GEMM blocks on the pool starts: OpenBLAS on one thread."""
    with _blas_lock:
        if _blas["set"] is None:
            _blas["set"], _blas["get"] = _blas_functions() or (None, None)
            if _blas["set"] is None:
                _blas["set"] = False
        if _blas["set"] and _blas["running"] == 0:
            _blas["saved"] = _blas["get"]()
            if _blas["saved"] != 1:
                _blas["set"](1)
        _blas["running"] += 1


def blas_exit():
    with _blas_lock:
        _blas["running"] -= 1
        if _blas["set"] and _blas["running"] == 0 and _blas["saved"] not in (None, 1):
            _blas["set"](_blas["saved"])


def blas_threads() -> int | None:
    """OpenBLAS's thread count now (None: no OpenBLAS found)."""
    if _blas["get"] is None:
        _blas["set"], _blas["get"] = _blas_functions()
        if _blas["set"] is None:
            _blas["set"] = False
    return _blas["get"]() if _blas["get"] else None
