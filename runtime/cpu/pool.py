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

Placement: a worker woken onto the CPU its caller runs on preempts the caller, and the call
gains nothing (measured on this project's 2-vCPU VM with the pool's trace: the worker ran all
64 chunks of add100 while the caller waited for its CPU; backend_speed.py's 2-thread add100
and mlp were no faster than at 1 thread). So the workers are kept off the calling thread's
CPU: when a call posts a job or pings while some worker sleeps (its wake-up is what gets
placed), from another CPU than the one they were last kept off,
each worker gets the mask it was started with less that CPU (`keep_away`: sched_setaffinity,
a few us per worker, only when the caller's CPU changed; nothing where that leaves no CPU).
A caller that goes to sleep waiting for the workers' last chunks first gives them back their
whole mask (`let_near`: its CPU is idle now; under other load a worker descheduled in the
middle of a chunk would otherwise wait for its own CPU while the caller's idles), and its
next job keeps them off again.

Waking: a call of a program with parallel kernels and threads > 1 pings the workers first
thing (`inplace_pool_wake`, from `executable.py`: before its allocations, checks and the
entry's serial start, which its workers' wake-up then overlaps); a program that stays serial
never pings. A job posted while the workers poll needs no broadcast (one only when some
sleep), and the last chunk wakes the caller only when it sleeps.

Polling, bounded: after a job a worker polls (the job generation and the ping) for a window
that doubles, up to POLL_MAX_SECONDS, when the next call came within it, and halves, down to
SPIN_SECONDS, when it did not; after a ping it polls POLL_MAX_SECONDS (its job is coming);
then it sleeps on the condition variable. A caller whose chunks are done polls for the
workers' last ones (each already running: about a chunk's time left) as long as two of its
own chunks took, between SPIN_SECONDS and CALLER_POLL_SECONDS, before it sleeps (a futex
sleep and wake-up costs the pair 25-60 us of CPU on a 2-vCPU VM, and the sleeper's wake-up
as much again; a worker descheduled by other load would otherwise cost its caller a long
poll). So no
thread spins for longer than POLL_MAX_SECONDS (1 ms of CPU, counted in rounds of the loop)
after the last call's last job or ping: tests/runtime/test_pool_wake.py checks they sleep.
Two calls at once from Python threads (tests/runtime/test_threads.py): the first takes the
pool, the other runs its chunks on its own thread (same chunks, same results).

Measuring: `trace_start()` / `trace_stop()` record the pool's events (CLOCK_MONOTONIC time,
thread, CPU, event, value: pings, posts, chunk claims and ends, sleeps and wake-ups) while
on; off, each event costs a load and a branch. `benchmarks/parallel_loops.py --trace`.

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

import numpy as np

from . import jit

# The state block (bytes): pthread objects get 64 bytes each (glibc's mutex is 40, its
# condition variable 48); the claim and done words have cache lines of their own; _SPIN holds
# the poll's length in rounds of its loop.
_MUTEX, _WORK, _DONE = 0, 64, 128
_GEN, _FN, _CTX, _N, _LIMIT, _SPIN = 192, 200, 208, 216, 224, 232
_TRACE, _TRACE_ROWS = 240, 248
_CLAIM, _DONE_COUNT, _BUSY, _WORKERS = 256, 320, 384, 448
# (512: the ping a starting call sends, then the sleeping workers and callers: counts)
_PING, _SLEEPERS, _CALLER_SLEEPS = 512, 520, 528
# the CPU the workers are kept off (-1: none yet), the workers' thread ids (a table of
# _TIDS_CAP), the longest poll and the caller's, in rounds
_AWAY, _TIDS, _TIDS_N, _POLL_MAX = 584, 592, 600, 608
# the caller's poll, in ns: at most, and at least
_CALLER_POLL, _CALLER_POLL_MIN = 616, 624
# what is on (`configure`): 1 keeping workers off the caller's CPU, 2 the call's ping
_OPTIONS = 632
# the CPUs the workers were started on (a cpu_set_t of 1024 bits)
_ALLOWED = 640
_STATE_BYTES = 768
_TIDS_CAP = 256
# How long a thread polls before it sleeps (module docstring), converted at start-up to rounds
# of the polling loop (timed then: portable, where a cycle counter may not be readable): a
# worker after a job between SPIN_SECONDS and POLL_MAX_SECONDS (adapting to the gaps between
# calls), after a call's ping POLL_MAX_SECONDS; a caller waiting for the workers' last
# chunks about as long as two of its own took, between SPIN_SECONDS and CALLER_POLL_SECONDS.
SPIN_SECONDS = 30e-6
POLL_MAX_SECONDS = 1e-3
CALLER_POLL_SECONDS = 1e-3

POOL_IR = r"""
@state = internal global ptr null

declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @clock_gettime(i32, ptr)
declare i32 @sched_getcpu()
declare i32 @sched_getaffinity(i32, i64, ptr)
declare i32 @sched_setaffinity(i32, i64, ptr)
declare i32 @gettid()

; The debug trace (`trace_start`): when the state's trace pointer is set, one row per event
; (CLOCK_MONOTONIC ns, who << 16 | cpu, event, value) at the next free row of the buffer,
; whose first word counts the rows taken. Off: one load and a branch.
define internal void @mark(ptr %s, i64 %who, i64 %ev, i64 %val) alwaysinline {
entry:
  %ts = alloca [2 x i64], align 8
  %tp = getelementptr i8, ptr %s, i64 240
  %t = load atomic ptr, ptr %tp monotonic, align 8
  %on = icmp ne ptr %t, null
  br i1 %on, label %take, label %out, !prof !0
take:
  %capp = getelementptr i8, ptr %s, i64 248
  %cap = load i64, ptr %capp, align 8
  %k = atomicrmw add ptr %t, i64 1 monotonic
  %fits = icmp ult i64 %k, %cap
  br i1 %fits, label %put, label %out
put:
  %r0 = call i32 @clock_gettime(i32 1, ptr %ts)
  %sec = load i64, ptr %ts, align 8
  %nsp = getelementptr i64, ptr %ts, i64 1
  %nsec = load i64, ptr %nsp, align 8
  %sns = mul i64 %sec, 1000000000
  %ns = add i64 %sns, %nsec
  %cpu32 = call i32 @sched_getcpu()
  %cpu = zext i32 %cpu32 to i64
  %cpum = and i64 %cpu, 65535
  %wh = shl i64 %who, 16
  %wc = or i64 %wh, %cpum
  %k4 = mul i64 %k, 4
  %row = add i64 %k4, 1
  %p0 = getelementptr i64, ptr %t, i64 %row
  store i64 %ns, ptr %p0, align 8
  %p1 = getelementptr i64, ptr %p0, i64 1
  store i64 %wc, ptr %p1, align 8
  %p2 = getelementptr i64, ptr %p0, i64 2
  store i64 %ev, ptr %p2, align 8
  %p3 = getelementptr i64, ptr %p0, i64 3
  store i64 %val, ptr %p3, align 8
  br label %out
out:
  ret void
}

define internal i64 @now_ns() alwaysinline {
entry:
  %ts = alloca [2 x i64], align 8
  %r0 = call i32 @clock_gettime(i32 1, ptr %ts)
  %sec = load i64, ptr %ts, align 8
  %nsp = getelementptr i64, ptr %ts, i64 1
  %nsec = load i64, ptr %nsp, align 8
  %sns = mul i64 %sec, 1000000000
  %ns = add i64 %sns, %nsec
  ret i64 %ns
}

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

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

; Keep the workers off the calling thread's CPU (module docstring, "Placement"): when that
; CPU is not the one they were last kept off, give every worker the mask they were started
; with less that CPU (nothing where that leaves none: the workers keep theirs).
define internal void @keep_away(ptr %s) noinline {
entry:
  %mask = alloca [16 x i64], align 8
  %cpu32 = call i32 @sched_getcpu()
  %cpu = sext i32 %cpu32 to i64
  %awayp = getelementptr i8, ptr %s, i64 584
  %away = load atomic i64, ptr %awayp monotonic, align 8
  %same = icmp eq i64 %cpu, %away
  %bad = icmp uge i64 %cpu, 1024
  %optp = getelementptr i8, ptr %s, i64 632
  %opt = load atomic i64, ptr %optp monotonic, align 8
  %kon = and i64 %opt, 1
  %koff = icmp eq i64 %kon, 0
  ; (only a sleeping worker's wake-up is placed: one that polls stays where it runs)
  %sleepp = getelementptr i8, ptr %s, i64 520
  %asleep = load atomic i64, ptr %sleepp monotonic, align 8
  %awake = icmp eq i64 %asleep, 0
  %skip0 = or i1 %same, %bad
  %skip1 = or i1 %skip0, %koff
  %skip = or i1 %skip1, %awake
  br i1 %skip, label %out, label %get, !prof !1
get:
  %allp = getelementptr i8, ptr %s, i64 640
  call void @llvm.memcpy.p0.p0.i64(ptr %mask, ptr %allp, i64 128, i1 0)
  br label %clear
clear:
  %wi = lshr i64 %cpu, 6
  %bi = and i64 %cpu, 63
  %wp = getelementptr i64, ptr %mask, i64 %wi
  %w = load i64, ptr %wp, align 8
  %bit = shl i64 1, %bi
  %nbit = xor i64 %bit, -1
  %w1 = and i64 %w, %nbit
  store i64 %w1, ptr %wp, align 8
  br label %any
any:
  %j = phi i64 [ 0, %clear ], [ %j1, %anynext ]
  %acc = phi i64 [ 0, %clear ], [ %acc1, %anynext ]
  %mp = getelementptr i64, ptr %mask, i64 %j
  %mw = load i64, ptr %mp, align 8
  %acc1 = or i64 %acc, %mw
  %j1 = add i64 %j, 1
  br label %anynext
anynext:
  %jm = icmp ult i64 %j1, 16
  br i1 %jm, label %any, label %anyout
anyout:  ; (none left: the workers keep their masks, and the next call looks again)
  %left = icmp ne i64 %acc1, 0
  br i1 %left, label %set0, label %forget
set0:  ; (a worker just started, its id not recorded yet: again at the next call)
  %all = call i1 @set_worker_masks(ptr %s, ptr %mask)
  %again = select i1 %all, i64 %cpu, i64 -1
  store atomic i64 %again, ptr %awayp monotonic, align 8
  br label %out
forget:
  store atomic i64 -1, ptr %awayp monotonic, align 8
  br label %out
done:
  store atomic i64 %cpu, ptr %awayp monotonic, align 8
  br label %out
out:
  ret void
}

; The caller is about to sleep until the workers' last chunks are done: its CPU is free, so
; let them run there again (a worker descheduled on another CPU in the middle of a chunk,
; by other load, is then moved to the idle one instead of waiting its turn there); the next
; post keeps them off the caller's CPU again.
define internal void @let_near(ptr %s) noinline {
entry:
  %awayp = getelementptr i8, ptr %s, i64 584
  %away = load atomic i64, ptr %awayp monotonic, align 8
  %none = icmp slt i64 %away, 0
  br i1 %none, label %out, label %set0
set0:
  store atomic i64 -1, ptr %awayp monotonic, align 8
  call void @mark(ptr %s, i64 -1, i64 18, i64 %away)
  %allp = getelementptr i8, ptr %s, i64 640
  %every = call i1 @set_worker_masks(ptr %s, ptr %allp)
  br label %out
out:
  ret void
}

; Sets the CPU mask of every worker that recorded its thread id (the table at 592, its
; capacity at 600, the workers started at 448) to %mask; true when every one had.
define internal i1 @set_worker_masks(ptr %s, ptr %mask) noinline {
entry:
  %tidsp = getelementptr i8, ptr %s, i64 592
  %tids = load ptr, ptr %tidsp, align 8
  %capp = getelementptr i8, ptr %s, i64 600
  %cap = load i64, ptr %capp, align 8
  %nwp = getelementptr i8, ptr %s, i64 448
  %nw = load atomic i64, ptr %nwp monotonic, align 8
  %lt = icmp ult i64 %nw, %cap
  %lim = select i1 %lt, i64 %nw, i64 %cap
  br label %set
set:
  %q = phi i64 [ 0, %entry ], [ %q1, %setnext ]
  %all = phi i1 [ 1, %entry ], [ %all1, %setnext ]
  %more = icmp ult i64 %q, %lim
  br i1 %more, label %setone, label %setout
setone:
  %tp = getelementptr i64, ptr %tids, i64 %q
  %tid = load atomic i64, ptr %tp monotonic, align 8
  %has = icmp sgt i64 %tid, 0
  br i1 %has, label %setcall, label %setnext
setcall:
  %tid32 = trunc i64 %tid to i32
  %sr = call i32 @sched_setaffinity(i32 %tid32, i64 128, ptr %mask)
  br label %setnext
setnext:
  %all1 = and i1 %all, %has
  %q1 = add i64 %q, 1
  br label %set
setout:
  ret i1 %all
}

; Claim and run chunks of job %g until none is left (or a newer job was posted). The claim
; word is (generation:32, front:16, back:16): chunks [front, back) are unclaimed; the caller
; takes them from the front, workers from the back (%back), so each thread's chunks are
; contiguous and two threads don't start on the same memory. Returns how many it ran.
define internal i64 @chunks(ptr %s, i64 %g, ptr %f, ptr %c, i64 %n, i1 %back,
                            i64 %who) noinline {
entry:
  %claimp = getelementptr i8, ptr %s, i64 256
  %donep = getelementptr i8, ptr %s, i64 320
  %g32 = and i64 %g, 4294967295
  br label %loop
loop:
  %ran = phi i64 [ 0, %entry ], [ %ran, %claim ], [ %ran1, %work ]
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
  call void @mark(ptr %s, i64 %who, i64 3, i64 %i)
  call void %f(ptr %c, i64 %i)
  call void @mark(ptr %s, i64 %who, i64 4, i64 %i)
  %ran1 = add i64 %ran, 1
  %d = atomicrmw add ptr %donep, i64 1 seq_cst
  %d1 = add i64 %d, 1
  %last = icmp eq i64 %d1, %n
  br i1 %last, label %wake, label %loop
wake:
  call void @mark(ptr %s, i64 %who, i64 13, i64 %n)
  %sleepp = getelementptr i8, ptr %s, i64 528
  %cs = load atomic i64, ptr %sleepp seq_cst, align 8
  %asleep = icmp ne i64 %cs, 0
  br i1 %asleep, label %wake2, label %out
wake2:
  %dc = getelementptr i8, ptr %s, i64 128
  %l1 = call i32 @pthread_mutex_lock(ptr %s)
  %b1 = call i32 @pthread_cond_broadcast(ptr %dc)
  %u1 = call i32 @pthread_mutex_unlock(ptr %s)
  br label %out
out:
  %res = phi i64 [ %ran, %loop ], [ %ran, %check ], [ %ran1, %wake ], [ %ran1, %wake2 ]
  ret i64 %res
}

; A worker: run the chunks of each job posted whose limit admits this worker's id. Between
; jobs it polls (the job generation, and the ping a call starting sends: `inplace_pool_wake`)
; for `base` rounds after a job, and for the longest poll after a ping, before it sleeps on
; the condition variable; `base` doubles (up to the longest) when the next call came during
; the poll and halves (down to the shortest) when it did not.
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
  %minp = getelementptr i8, ptr %s, i64 232
  %pingp = getelementptr i8, ptr %s, i64 512
  %sleepp = getelementptr i8, ptr %s, i64 520
  %maxp = getelementptr i8, ptr %s, i64 608
  %tidsp = getelementptr i8, ptr %s, i64 592
  %capp = getelementptr i8, ptr %s, i64 600
  %tids = load ptr, ptr %tidsp, align 8
  %cap = load i64, ptr %capp, align 8
  %room = icmp ult i64 %id, %cap
  br i1 %room, label %tid, label %start
tid:
  %t32 = call i32 @gettid()
  %t64 = sext i32 %t32 to i64
  %tp = getelementptr i64, ptr %tids, i64 %id
  store atomic i64 %t64, ptr %tp monotonic, align 8
  br label %start
start:
  %min0 = load atomic i64, ptr %minp monotonic, align 8
  br label %lock

poll0:
  %seen = phi i64 [ %g, %run ], [ %lseen, %pinged.locked ], [ %seen, %pinged ]
  %pseen = phi i64 [ %tp1, %run ], [ %p2, %pinged.locked ], [ %p1, %pinged ]
  %base = phi i64 [ %lbase, %run ], [ %lbase, %pinged.locked ], [ %base.p, %pinged ]
  %afterjob = phi i1 [ 1, %run ], [ 0, %pinged.locked ], [ 0, %pinged ]
  %maxr = load atomic i64, ptr %maxp monotonic, align 8
  %win = select i1 %afterjob, i64 %base, i64 %maxr
  br label %poll
poll:
  %k = phi i64 [ 0, %poll0 ], [ %k1, %pollnext ]
  %g1 = load atomic i64, ptr %genp monotonic, align 8
  %isjob = icmp ne i64 %g1, %seen
  br i1 %isjob, label %hit, label %pollping
pollping:
  %p1 = load atomic i64, ptr %pingp monotonic, align 8
  %isping = icmp ne i64 %p1, %pseen
  br i1 %isping, label %pinged, label %pollnext
pollnext:
  %k1 = add i64 %k, 1
  %pmore = icmp ult i64 %k1, %win
  br i1 %pmore, label %poll, label %timeout
pinged:  ; a call started: its job comes soon (the longest poll); the next call came in time
  %b2 = shl i64 %base, 1
  %bbig = icmp ugt i64 %b2, %maxr
  %b2c = select i1 %bbig, i64 %maxr, i64 %b2
  %base.p = select i1 %afterjob, i64 %b2c, i64 %base
  call void @mark(ptr %s, i64 %id, i64 16, i64 %k)
  br label %poll0
hit:
  call void @mark(ptr %s, i64 %id, i64 9, i64 %k)
  %b3 = shl i64 %base, 1
  %b3big = icmp ugt i64 %b3, %maxr
  %b3c = select i1 %b3big, i64 %maxr, i64 %b3
  %base.h = select i1 %afterjob, i64 %b3c, i64 %base
  br label %lock
timeout:
  %b4 = lshr i64 %base, 1
  %min = load atomic i64, ptr %minp monotonic, align 8
  %b4small = icmp ult i64 %b4, %min
  %b4c = select i1 %b4small, i64 %min, i64 %b4
  %base.t = select i1 %afterjob, i64 %b4c, i64 %base
  br label %lock

lock:
  %lseen = phi i64 [ 0, %start ], [ %seen, %hit ], [ %seen, %timeout ], [ %g, %notmine ]
  %lpseen = phi i64 [ 0, %start ], [ %pseen, %hit ], [ %pseen, %timeout ], [ %tp1, %notmine ]
  %lbase = phi i64 [ %min0, %start ], [ %base.h, %hit ], [ %base.t, %timeout ],
                   [ %lbase, %notmine ]
  %l1 = call i32 @pthread_mutex_lock(ptr %s)
  br label %test
test:
  ; (counted as a sleeper before the words are read: a ping sent meanwhile sees it)
  %sl0 = atomicrmw add ptr %sleepp, i64 1 seq_cst
  %g = load atomic i64, ptr %genp seq_cst, align 8
  %new = icmp ne i64 %g, %lseen
  br i1 %new, label %take, label %testping
testping:
  %p2 = load atomic i64, ptr %pingp seq_cst, align 8
  %pnew = icmp ne i64 %p2, %lpseen
  br i1 %pnew, label %pinged.locked, label %wait
pinged.locked:
  %sl1 = atomicrmw sub ptr %sleepp, i64 1 seq_cst
  %u0 = call i32 @pthread_mutex_unlock(ptr %s)
  call void @mark(ptr %s, i64 %id, i64 16, i64 -1)
  br label %poll0
wait:
  call void @mark(ptr %s, i64 %id, i64 10, i64 %lseen)
  %w1 = call i32 @pthread_cond_wait(ptr %workc, ptr %s)
  call void @mark(ptr %s, i64 %id, i64 11, i64 0)
  %sl2 = atomicrmw sub ptr %sleepp, i64 1 seq_cst
  br label %test
take:
  %sl3 = atomicrmw sub ptr %sleepp, i64 1 seq_cst
  %f = load ptr, ptr %fnp, align 8
  %c = load ptr, ptr %ctxp, align 8
  %n = load i64, ptr %np, align 8
  %lim = load i64, ptr %limp, align 8
  %tp1 = load atomic i64, ptr %pingp monotonic, align 8
  %u1 = call i32 @pthread_mutex_unlock(ptr %s)
  %mine = icmp ult i64 %id, %lim
  %mine64 = zext i1 %mine to i64
  call void @mark(ptr %s, i64 %id, i64 12, i64 %mine64)
  br i1 %mine, label %run, label %notmine
run:
  %wran = call i64 @chunks(ptr %s, i64 %g, ptr %f, ptr %c, i64 %n, i1 1, i64 %id)
  call void @mark(ptr %s, i64 %id, i64 14, i64 %g)
  br label %poll0
notmine:  ; (not admitted to this job: back to sleep without polling)
  br label %lock
}

; A call of a program with parallel kernels starts (before its checks and allocations): wake
; the sleeping workers now, so that their wake-up overlaps the call's serial start, and keep
; them off this thread's CPU. Nothing when the call will run serially.
define void @inplace_pool_wake(i64 %threads) {
entry:
  %s = load atomic ptr, ptr @state acquire, align 8
  %nos = icmp eq ptr %s, null
  %one = icmp sle i64 %threads, 1
  %x = or i1 %nos, %one
  br i1 %x, label %out, label %check
check:
  %workersp = getelementptr i8, ptr %s, i64 448
  %nw = load atomic i64, ptr %workersp monotonic, align 8
  %busyp = getelementptr i8, ptr %s, i64 384
  %busy = load atomic i64, ptr %busyp monotonic, align 8
  %optp = getelementptr i8, ptr %s, i64 632
  %opt = load atomic i64, ptr %optp monotonic, align 8
  %pon = and i64 %opt, 2
  %poff = icmp eq i64 %pon, 0
  %none = icmp eq i64 %nw, 0
  %taken = icmp ne i64 %busy, 0
  %y0 = or i1 %none, %taken
  %y = or i1 %y0, %poff
  br i1 %y, label %out, label %ping
ping:
  call void @keep_away(ptr %s)
  call void @mark(ptr %s, i64 -1, i64 17, i64 %threads)
  %pingp = getelementptr i8, ptr %s, i64 512
  %p = atomicrmw add ptr %pingp, i64 1 seq_cst
  %sleepp = getelementptr i8, ptr %s, i64 520
  %sl = load atomic i64, ptr %sleepp seq_cst, align 8
  %asleep = icmp ne i64 %sl, 0
  br i1 %asleep, label %wake, label %out
wake:
  %workc = getelementptr i8, ptr %s, i64 64
  %l1 = call i32 @pthread_mutex_lock(ptr %s)
  %b1 = call i32 @pthread_cond_broadcast(ptr %workc)
  %u1 = call i32 @pthread_mutex_unlock(ptr %s)
  br label %out
out:
  ret void
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
  %sn = icmp ne ptr %s, null
  br i1 %sn, label %smark, label %sloop
smark:
  call void @mark(ptr %s, i64 -1, i64 15, i64 %n)
  br label %sloop
sloop:
  %i = phi i64 [ 0, %serial ], [ 0, %smark ], [ %i1, %sbody ]
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
  %sleepp = getelementptr i8, ptr %s, i64 520
  %csleepp = getelementptr i8, ptr %s, i64 528
  call void @keep_away(ptr %s)
  call void @mark(ptr %s, i64 -1, i64 1, i64 %n)
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
  store atomic i64 %g, ptr %genp seq_cst, align 8
  ; (workers polling see the new generation; only sleeping ones need the broadcast)
  %sl = load atomic i64, ptr %sleepp seq_cst, align 8
  %asleep = icmp ne i64 %sl, 0
  br i1 %asleep, label %bcast, label %posted
bcast:
  %b1 = call i32 @pthread_cond_broadcast(ptr %workc)
  br label %posted
posted:
  %u1 = call i32 @pthread_mutex_unlock(ptr %s)
  call void @mark(ptr %s, i64 -1, i64 2, i64 %g)
  %t0 = call i64 @now_ns()
  %mine = call i64 @chunks(ptr %s, i64 %g, ptr %f, ptr %c, i64 %n, i1 0, i64 -1)
  %d0 = load atomic i64, ptr %donep acquire, align 8
  call void @mark(ptr %s, i64 -1, i64 5, i64 %d0)
  %fin0 = icmp eq i64 %d0, %n
  br i1 %fin0, label %release, label %cspin0
cspin0:
  ; Poll for the workers' last chunks about as long as two of this thread's took, at least
  ; the shortest poll, at most the caller's longest; then sleep.
  %t1 = call i64 @now_ns()
  %minp = getelementptr i8, ptr %s, i64 624
  %cmin = load atomic i64, ptr %minp monotonic, align 8
  %maxp = getelementptr i8, ptr %s, i64 616
  %cmax = load atomic i64, ptr %maxp monotonic, align 8
  %took = sub i64 %t1, %t0
  %noown = icmp eq i64 %mine, 0
  %div = select i1 %noown, i64 1, i64 %mine
  %avg = udiv i64 %took, %div
  %two = shl i64 %avg, 1
  %two0 = select i1 %noown, i64 0, i64 %two
  %win0 = add i64 %two0, %cmin
  %big = icmp ugt i64 %win0, %cmax
  %win = select i1 %big, i64 %cmax, i64 %win0
  %until = add i64 %t1, %win
  br label %cspin
cspin:
  %dd = load atomic i64, ptr %donep acquire, align 8
  %fin1 = icmp eq i64 %dd, %n
  br i1 %fin1, label %release, label %cspin2
cspin2:
  %tn = call i64 @now_ns()
  %cmore = icmp ult i64 %tn, %until
  br i1 %cmore, label %cspin, label %block
block:
  call void @let_near(ptr %s)
  %l2 = call i32 @pthread_mutex_lock(ptr %s)
  %cs1 = atomicrmw add ptr %csleepp, i64 1 seq_cst
  br label %wtest
wtest:
  %d = load atomic i64, ptr %donep seq_cst, align 8
  %fin = icmp eq i64 %d, %n
  br i1 %fin, label %wdone, label %wwait
wwait:
  call void @mark(ptr %s, i64 -1, i64 6, i64 %d)
  %w1 = call i32 @pthread_cond_wait(ptr %donec, ptr %s)
  call void @mark(ptr %s, i64 -1, i64 7, i64 0)
  br label %wtest
wdone:
  %cs2 = atomicrmw sub ptr %csleepp, i64 1 seq_cst
  %u2 = call i32 @pthread_mutex_unlock(ptr %s)
  br label %release
release:
  call void @mark(ptr %s, i64 -1, i64 8, i64 0)
  store atomic i64 0, ptr %busyp release, align 8
  br label %exit
exit:
  ret void
}

!0 = !{!"branch_weights", i32 1, i32 2000}
!1 = !{!"branch_weights", i32 2000, i32 1}
"""
PTHREAD = ("pthread_mutex_lock", "pthread_mutex_unlock", "pthread_cond_wait",
           "pthread_cond_broadcast", "clock_gettime")
# Linux's: where libc lacks one, a stand-in that fails (-1), so the pool runs without
# keeping its workers off the caller's CPU and the trace's rows name no CPU.
OPTIONAL = ("sched_getcpu", "sched_getaffinity", "sched_setaffinity", "gettid")
_FAIL = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: -1)

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
    for name in PTHREAD + OPTIONAL:
        for lib in libs:
            if hasattr(lib, name):
                syms[name] = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                break
        else:
            if name in OPTIONAL:
                syms[name] = ctypes.cast(_FAIL, ctypes.c_void_p).value
    return syms


def _init_state(addr: int):
    libc = _libc()
    ctypes.memset(addr, 0, _STATE_BYTES)
    for off, fn in ((_MUTEX, libc.pthread_mutex_init), (_WORK, libc.pthread_cond_init),
                    (_DONE, libc.pthread_cond_init)):
        if fn(ctypes.c_void_p(addr + off), None) != 0:
            raise OSError("pthread_*_init failed")
    rounds = _pool.get("poll_rate", 0.0)
    for off, seconds in ((_SPIN, SPIN_SECONDS), (_POLL_MAX, POLL_MAX_SECONDS)):
        ctypes.c_int64.from_address(addr + off).value = int(rounds * seconds)
    ctypes.c_int64.from_address(addr + _CALLER_POLL).value = int(CALLER_POLL_SECONDS * 1e9)
    ctypes.c_int64.from_address(addr + _CALLER_POLL_MIN).value = int(SPIN_SECONDS * 1e9)
    ctypes.c_int64.from_address(addr + _AWAY).value = -1
    ctypes.c_int64.from_address(addr + _OPTIONS).value = _pool.get("options", 3)
    words = (ctypes.c_uint64 * 16).from_address(addr + _ALLOWED)
    try:
        allowed = os.sched_getaffinity(0)  # (the spawning thread's: the workers inherit it)
    except (AttributeError, OSError):
        allowed = set()
    for cpu in allowed:
        if cpu < 1024:
            words[cpu >> 6] |= 1 << (cpu & 63)
    # (after a fork the parent's thread ids are stale: never touch those threads' masks)
    ctypes.memset(_pool["tids"], 0, ctypes.sizeof(_pool["tids"]))
    ctypes.c_void_p.from_address(addr + _TIDS).value = ctypes.addressof(_pool["tids"])
    ctypes.c_int64.from_address(addr + _TIDS_N).value = _TIDS_CAP


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
                                                "inplace_parallel_for", "inplace_pool_poll",
                                                "inplace_pool_wake"])
            st["poll_rate"] = _poll_rate(ctypes.CFUNCTYPE(None, ctypes.c_void_p,
                                                          ctypes.c_int64)(
                compiled.address("inplace_pool_poll")))
            st["tids"] = (ctypes.c_int64 * _TIDS_CAP)()
            buf = ctypes.create_string_buffer(_STATE_BYTES + 64)
            addr = ctypes.addressof(buf) + (-ctypes.addressof(buf)) % 64
            _init_state(addr)
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(compiled.address("inplace_pool_init"))(addr)
            st.update(compiled=compiled, buf=buf, addr=addr, size=0,
                      worker=compiled.address("inplace_pool_worker"),
                      parallel_for=compiled.address("inplace_parallel_for"),
                      wake=ctypes.CFUNCTYPE(None, ctypes.c_int64)(
                          compiled.address("inplace_pool_wake")))
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


# -- the debug trace ---------------------------------------------------------------------------
# Events the pool records while a trace is on (`trace_start`), with who: -1 a caller of
# `inplace_parallel_for`, k >= 0 worker k.
EVENTS = {1: "post", 2: "posted", 3: "claim", 4: "chunk_end", 5: "own_done",
          6: "caller_sleep", 7: "caller_woke", 8: "finish", 9: "worker_spin_hit",
          10: "worker_sleep", 11: "worker_woke", 12: "worker_take", 13: "last_chunk",
          14: "worker_out", 15: "serial", 16: "worker_pinged", 17: "wake", 18: "let_near"}


def trace_start(rows: int = 1 << 16) -> None:
    """Record the pool's events (time, thread, cpu, event, value) into a buffer of `rows`
    rows from now on (benchmarks: where a parallel call's time goes)."""
    ensure(1)
    # A thread may have read the buffer's address just before a `trace_stop` and write its
    # row any time later: buffers are never freed (one per size asked, reused).
    bufs = _pool.setdefault("trace_buffers", {})
    buf = bufs.get(rows)
    if buf is None:
        buf = bufs[rows] = np.zeros(1 + 4 * rows, np.int64)
    buf[0] = 0
    _pool["trace"] = buf
    ctypes.c_int64.from_address(_pool["addr"] + _TRACE_ROWS).value = rows
    ctypes.c_void_p.from_address(_pool["addr"] + _TRACE).value = buf.ctypes.data


def trace_stop():
    """Stop recording; the events as a structured array (t_ns on CLOCK_MONOTONIC, the clock
    of `time.perf_counter_ns` and `time.monotonic_ns` on Linux; who; cpu; event; value) in
    the order their rows were taken, those written by now (None: no trace was on)."""
    if "addr" not in _pool or "trace" not in _pool:
        return None
    ctypes.c_void_p.from_address(_pool["addr"] + _TRACE).value = None
    buf = _pool.pop("trace")
    n = min(int(buf[0]), (len(buf) - 1) // 4)
    rows = buf[1:1 + 4 * n].reshape(n, 4).copy()
    out = np.zeros(n, [("t_ns", np.int64), ("who", np.int64), ("cpu", np.int64),
                       ("event", np.int64), ("value", np.int64)])
    out["t_ns"], out["who"], out["cpu"] = rows[:, 0], rows[:, 1] >> 16, rows[:, 1] & 65535
    out["event"], out["value"] = rows[:, 2], rows[:, 3]
    return out[out["event"] != 0]  # (a row taken but not written yet)


def waker():
    """`wake(threads)`: the pre-wake a call of a parallel program makes before anything else
    (`inplace_pool_wake`: pings the workers and wakes those asleep; nothing for threads <= 1
    or while another call has the pool). A ctypes function: ~0.2 us a call."""
    ensure(1)
    return _pool["wake"]


def configure(keep_away: bool = True, ping: bool = True) -> None:
    """Switch keeping the workers off the caller's CPU and the call's ping on or off (both on
    by default; off: the workers get back the mask they were started with). For measuring
    what each does (`benchmarks/parallel_loops.py --without`)."""
    ensure(1)
    _pool["options"] = int(keep_away) | 2 * int(ping)
    ctypes.c_int64.from_address(_pool["addr"] + _OPTIONS).value = _pool["options"]
    ctypes.c_int64.from_address(_pool["addr"] + _AWAY).value = -1
    if not keep_away:
        words = (ctypes.c_uint64 * 16).from_address(_pool["addr"] + _ALLOWED)
        started = {64 * w + b for w in range(16) for b in range(64) if words[w] >> b & 1}
        for tid in worker_tids():
            try:
                os.sched_setaffinity(tid, started)
            except OSError:
                pass


def wake_address() -> int:
    """The address of `inplace_pool_wake(threads)` (for native callers: fast_one)."""
    ensure(1)
    return ctypes.cast(_pool["wake"], ctypes.c_void_p).value


def kept_off() -> int:
    """The CPU the workers were last kept off (the calling thread's then; -1: none yet)."""
    if "addr" not in _pool:
        return -1
    return ctypes.c_int64.from_address(_pool["addr"] + _AWAY).value


def worker_tids() -> list[int]:
    """The workers' Linux thread ids (those that recorded theirs; the tests' hook)."""
    if "addr" not in _pool:
        return []
    n = min(workers(), _TIDS_CAP)
    return [t for t in _pool["tids"][:n] if t > 0]


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
