"""Issue 25's figure for the cpu backend's thread pool: the same programs with threads=1 and
threads=2 (`cc.compile(..., threads=N)`), interleaved.

    python benchmarks/parallel_loops.py [--repeat 15] [--quick] [--grain] [--fresh]

Workloads: the seed's 100 additions on float32 [1000, 1000] (`x = x + 1.0` a hundred times: one
fused loop), the MLP training step (examples/mlp.py) and the transformer training step
(examples/transformer_block.py). Each repeat times a batch of calls with 1 thread, then the same
with 2 (the order alternates repeat by repeat); medians per call (p25..p75) and the ratio 1
thread / 2 threads are printed, with this process's CPU time per call (all its threads) for each
and their ratio (2 threads / 1: the cost of splitting, ~1.0 when the split adds no work; robust
under load, where the wall-time ratio is not) and, with 2 threads, the share of that CPU time
spent outside the calling thread (the pool's worker; ~0.5 when it takes half the work; counted
from clock ticks in a run of its own), then, from the timed runs, the CPU time per call of the
calling thread and of the worker with 2 threads, and the 1-thread CPU time over the busier of
the two: on free cores a call takes about as long as its busier thread, so this is the ratio the
wall-time one approaches on a quiet machine, and it is far steadier than the wall-time ratio
under load (where a descheduled worker leaves more chunks to the caller, which the sum still
counts). On a machine shared with other sessions, Linux's autogroup scheduling gives this
process one session's share of the cores however many threads it runs, and a woken worker may
wait its turn behind other sessions' jobs: the ratio then stays near 1 while the CPU columns and
the worker share still show what splitting costs; measure the ratio on a quiet machine. The
first call's outputs (and updated parameters) of both are compared bit for bit. Printed with it:
the load average (a shared machine's figure is as good as the cores that were free), the cores
this process may use, and the BLAS: OpenBLAS's kernel (`OPENBLAS_CORETYPE` picks it when set)
and its thread count outside our calls (inside them it is 1: the pool runs the GEMM blocks,
`runtime/cpu/pool.py`).

`--grain`: the measurement behind `emitter.PARALLEL_MIN_WORK`: one addition `x + 1.0` over n
float32 elements, forced parallel (the threshold set to 0), 1 thread against 2.

`--trace`: where a 2-thread call's time goes, from the pool's event trace (`pool.trace_start`:
per-thread timestamps of pings, jobs, chunk claims and the caller's wait), for calls back to
back and for calls after an idle pause (the workers asleep: backend_speed.py's protocol). Per
workload, medians over the calls: the call's wall time; before the pool (from the call to its
ping: the driver) and from the ping to the first job (allocations, argument checks, the
entry's serial start); how late the first worker event comes after the ping; the share of
chunks the workers ran and the jobs where a worker ran a chunk on the caller's CPU; the
caller's wait for the workers' last chunks (summed over the call's jobs, and the jobs where it
slept); and after the last job to the return. Then the futex wake-up of a sleeping worker
(the ping to its first event) after 0, 1, 10 and 100 ms of idleness.

`--ab`: the pool's wake-up and placement on against off (`pool.configure(keep_away=False,
ping=False)`: the workers may run on the caller's CPU and are woken by the job's post only),
2 threads, interleaved, back to back and each call after a 30 ms pause (the workers asleep).
`--without keep_away,ping` runs any mode with those off.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from examples import mlp as ex_mlp  # noqa: E402
from examples import transformer_block as ex_tf  # noqa: E402
from runtime import arena  # noqa: E402
from runtime.cpu import emitter, jit, pool  # noqa: E402


def add100(x):
    for _ in range(100):
        x = x + 1.0
    return x


def workloads(quick: bool):
    rng = np.random.default_rng(0)
    add = rng.standard_normal((100, 100) if quick else (1000, 1000)).astype(np.float32)
    if quick:
        mlp = ex_mlp.example_inputs(batch=16, sizes=(32, 64, 10))
        tf = ex_tf.example_inputs(batch=2, seq=16, d_model=32, d_mlp=64)
    else:
        mlp, tf = ex_mlp.example_inputs(), ex_tf.example_inputs()
    return {"add100": (add100, (add,)), "mlp": (ex_mlp.train_step, tuple(mlp)),
            "transformer": (ex_tf.train_step, tuple(tf))}


def _copy(args):
    return tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)


def _snapshot(result, args):
    outs = result if isinstance(result, (tuple, list)) else (result,)
    return [np.array(o) for o in outs] + [np.array(a) for a in args
                                          if isinstance(a, np.ndarray)]


def blas_description() -> str:
    lib = jit.openblas()
    core = "?"
    for name in ("scipy_openblas_get_corename64_", "openblas_get_corename"):
        if lib is not None and hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_char_p
            core = fn().decode()
            break
    return (f"OpenBLAS kernel {core}, {pool.blas_threads()} threads outside our calls "
            f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}); "
            "1 inside them (the pool runs the GEMM blocks)")


def _thread_ticks() -> dict:
    """CPU clock ticks per thread of this process (Linux: /proc/self/task)."""
    out = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = int(fields[11]) + int(fields[12])
    except OSError:
        pass
    return out


def worker_share(prog, args, calls) -> float | None:
    """The share of this process's CPU time spent outside the calling thread while `prog`
    runs (~0.5 when the pool's worker takes half the chunks; 0 when it never runs)."""
    before = _thread_ticks()
    for _ in range(calls):
        prog(*args)
    after = _thread_ticks()
    me = threading.get_native_id()
    spent = {t: after[t] - before.get(t, 0) for t in after}
    total = sum(spent.values())
    return None if not total else 1 - spent.get(me, 0) / total


def _time(prog, args, calls, cpu=None, caller=None):
    start, cpu0, own0 = time.perf_counter(), time.process_time(), time.thread_time()
    for _ in range(calls):
        prog(*args)
    wall = time.perf_counter() - start
    if cpu is not None:  # this process's CPU time per call (every thread of it)
        cpu.append((time.process_time() - cpu0) / calls)
    if caller is not None:  # the calling thread's alone
        caller.append((time.thread_time() - own0) / calls)
    return wall / calls


def compare(name, fn, args, repeat, target):
    progs, argsets = {}, {}
    first = {}
    for t in (1, 2):
        argsets[t] = _copy(args)
        progs[t] = cc.compile(fn, threads=t).lower(*argsets[t])
        first[t] = _snapshot(progs[t](*argsets[t]), argsets[t])
    same = all(np.array_equal(a, b) for a, b in zip(first[1], first[2]))
    t0 = time.perf_counter()
    progs[1](*argsets[1])
    once = time.perf_counter() - t0
    calls = max(1, int(0.2 / max(once, 1e-6)))
    times, cpu, caller = {1: [], 2: []}, {1: [], 2: []}, {1: [], 2: []}
    for r in range(repeat):
        for t in ((1, 2) if r % 2 == 0 else (2, 1)):
            times[t].append(_time(progs[t], argsets[t], calls, cpu[t], caller[t]))
    med = {t: float(np.median(v)) for t, v in times.items()}
    q = {t: (np.percentile(v, 25), np.percentile(v, 75)) for t, v in times.items()}
    ratio = med[1] / med[2]
    share = worker_share(progs[2], argsets[2], max(calls, int(1.0 / max(med[2], 1e-6))))
    c1, c2 = float(np.median(cpu[1])), float(np.median(cpu[2]))
    own = float(np.median(caller[2]))
    busiest = max(own, c2 - own)  # (the workers' CPU together: one worker at 2 threads)
    print(f"| {name} | {med[1] * 1e3:.3f} ({q[1][0] * 1e3:.3f}..{q[1][1] * 1e3:.3f}) | "
          f"{med[2] * 1e3:.3f} ({q[2][0] * 1e3:.3f}..{q[2][1] * 1e3:.3f}) | {ratio:.2f}x | "
          f"{target} | {c1 * 1e3:.3f} / {c2 * 1e3:.3f} | {c2 / c1:.2f} | "
          f"{'?' if share is None else f'{share:.2f}'} | "
          f"{own * 1e3:.3f} / {(c2 - own) * 1e3:.3f} | {c1 / busiest:.2f}x | "
          f"{'yes' if same else 'NO'} |", flush=True)
    return ratio, same


def grain(repeat):
    saved = emitter.PARALLEL_MIN_WORK
    emitter.PARALLEL_MIN_WORK = 0
    try:
        print("| elements | 1 thread (us) | 2 threads (us) | ratio |")
        print("|---|---|---|---|")
        for n in (1 << 12, 1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18, 1 << 20):
            x = np.ones(n, np.float32)
            progs = {t: cc.compile(lambda a: a + 1.0, threads=t).lower(x) for t in (1, 2)}
            calls = max(20, int(2e7 // n))
            times = {1: [], 2: []}
            for r in range(repeat):
                for t in ((1, 2) if r % 2 == 0 else (2, 1)):
                    times[t].append(_time(progs[t], (x,), calls))
            m = {t: float(np.median(v)) for t, v in times.items()}
            print(f"| {n} | {m[1] * 1e6:.1f} | {m[2] * 1e6:.1f} | {m[1] / m[2]:.2f} |",
                  flush=True)
    finally:
        emitter.PARALLEL_MIN_WORK = saved


def _med(v):
    return float(np.median(v)) if len(v) else float("nan")


def _call_trace(prog, args):
    """(wall ns, the pool's events) of one call, the trace on."""
    pool.trace_start()
    t0 = time.perf_counter_ns()
    prog(*args)
    t1 = time.perf_counter_ns()
    return t0, t1, pool.trace_stop()


def trace_calls(name, fn, args, calls):
    ev = {v: k for k, v in pool.EVENTS.items()}
    prog = cc.compile(fn, threads=2).lower(*_copy(args))
    argv = _copy(args)
    for _ in range(3):
        prog(*argv)
    for pause in (0.0, 0.05):
        rows = []
        for _ in range(calls):
            if pause:
                time.sleep(pause)
            t0, t1, tr = _call_trace(prog, argv)
            e, who, cpu = tr["event"], tr["who"], tr["cpu"]
            t = (tr["t_ns"] - t0) / 1e3
            ping = t[e == ev["wake"]]
            posts = np.flatnonzero(e == ev["post"])
            if not len(ping) or not len(posts):
                continue
            workers = t[who >= 0]
            claims = e == ev["claim"]
            wclaims = claims & (who >= 0)
            # per job: the caller's CPU at its post; a worker chunk on it is a collision
            bounds = list(posts) + [len(e)]
            collide = sum(bool(((cpu[a:b] == cpu[a]) & wclaims[a:b]).any())
                          for a, b in zip(bounds, bounds[1:]))
            own_done, finish = t[e == ev["own_done"]], t[e == ev["finish"]]
            wait = float((finish - own_done).sum()) if len(own_done) == len(finish) else np.nan
            rows.append(((t1 - t0) / 1e3, ping[0], t[posts[0]] - ping[0],
                         (workers[0] - ping[0]) if len(workers) else np.nan,
                         wclaims.sum() / max(claims.sum(), 1), collide / len(posts),
                         wait, int((e == ev["caller_sleep"]).sum() > 0) / 1,
                         (t1 - t0) / 1e3 - t[-1], len(posts)))
        r = np.array(rows, float)
        print(f"| {name} | {'back to back' if not pause else f'after {pause * 1e3:.0f} ms'} | "
              f"{_med(r[:, 0]):.0f} | {_med(r[:, 1]):.0f} | {_med(r[:, 2]):.0f} | "
              f"{np.nanmedian(r[:, 3]):.0f} | {_med(r[:, 4]):.2f} | {np.mean(r[:, 5]):.2f} | "
              f"{_med(r[:, 6]):.0f} | {np.mean(r[:, 7]):.2f} | {_med(r[:, 8]):.0f} | "
              f"{_med(r[:, 9]):.0f} |", flush=True)


def wake_latency(repeat):
    """The ping (`pool.waker`) to the sleeping worker's first event, after idle pauses."""
    pool.ensure(2)
    wake = pool.waker()
    ev = {v: k for k, v in pool.EVENTS.items()}
    print("| idle before the ping (ms) | worker's first event after the ping (us, median) | "
          "p10..p90 | its CPU = the caller's |")
    print("|---|---|---|---|")
    for idle in (0.0, 0.001, 0.01, 0.1):
        lat, same = [], 0
        for _ in range(repeat):
            time.sleep(0.005)  # (the poll ends: the worker sleeps)
            if idle:
                time.sleep(idle)
            pool.trace_start()
            wake(2)
            time.sleep(0.002)
            tr = pool.trace_stop()
            t, e = tr["t_ns"], tr["event"]
            ping = t[e == ev["wake"]]
            w = tr[tr["who"] >= 0]
            if len(ping) and len(w):
                lat.append((w["t_ns"][0] - ping[0]) / 1e3)
                same += int(w["cpu"][0] == tr[e == ev["wake"]]["cpu"][0])
        print(f"| {idle * 1e3:g} | {_med(lat):.1f} | {np.percentile(lat, 10):.1f}.."
              f"{np.percentile(lat, 90):.1f} | {same}/{len(lat)} |", flush=True)


def ab(name, fn, args, repeat):
    prog = cc.compile(fn, threads=2).lower(*_copy(args))
    argv = _copy(args)
    prog(*argv)
    t0 = time.perf_counter()
    prog(*argv)
    calls = max(1, int(0.2 / max(time.perf_counter() - t0, 1e-6)))
    for pause in (0.0, 0.03):
        times = {True: [], False: []}
        for r in range(repeat):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                pool.configure(keep_away=on, ping=on)
                prog(*argv)
                if pause:
                    for _ in range(max(1, min(calls, 5))):
                        time.sleep(pause)
                        start = time.perf_counter()
                        prog(*argv)
                        times[on].append(time.perf_counter() - start)
                else:
                    times[on].append(_time(prog, argv, calls))
        m = {k: float(np.median(v)) for k, v in times.items()}
        print(f"| {name} | {'back to back' if not pause else f'after {pause * 1e3:.0f} ms'} | "
              f"{m[False] * 1e3:.3f} | {m[True] * 1e3:.3f} | {m[False] / m[True]:.2f}x |",
              flush=True)
    pool.configure()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    ap.add_argument("--grain", action="store_true", help="the serial threshold's measurement")
    ap.add_argument("--trace", action="store_true",
                    help="where a 2-thread call's time goes (the pool's event trace)")
    ap.add_argument("--ab", action="store_true",
                    help="2 threads: the pool's ping and placement on against off")
    ap.add_argument("--without", default="",
                    help="comma-separated pool features off: keep_away, ping")
    ap.add_argument("--fresh", action="store_true",
                    help="no reuse of fresh buffers (runtime.arena.IDLE_ENTRIES = 0): every "
                         "output of 2 MiB and more a new mapping, as before issue 25's cache")
    a = ap.parse_args()
    if a.fresh:
        arena.IDLE_ENTRIES = 0
    off = set(filter(None, a.without.split(",")))
    if off - {"keep_away", "ping"}:
        ap.error(f"--without: unknown {sorted(off - {'keep_away', 'ping'})}")
    pool.configure(keep_away="keep_away" not in off, ping="ping" not in off)
    print(f"load average before: {os.getloadavg()}; cores this process may use: "
          f"{pool.available_cores()}; fresh buffers "
          f"{'never reused (--fresh)' if a.fresh else 'reused (runtime.arena)'}")
    print(blas_description())
    if a.grain:
        grain(a.repeat)
    elif a.ab:
        print("\nMedian ms per 2-thread call, the pool's ping and placement off / on "
              f"({a.repeat} interleaved repeats)\n")
        print("| workload | calls | off | on | off / on |")
        print("|---|---|---|---|---|")
        for name, (fn, args) in workloads(a.quick).items():
            ab(name, fn, args, a.repeat)
    elif a.trace:
        print("\nMedians of 2-thread calls (us; from the pool's trace), "
              f"{a.repeat * 2} calls per row\n")
        print("| workload | calls | call | to the ping | ping to 1st job | 1st worker event "
              "after the ping | worker chunks | jobs with a worker on the caller's CPU | "
              "caller's wait | calls where it slept | last event to return | jobs |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, (fn, args) in workloads(a.quick).items():
            trace_calls(name, fn, args, a.repeat * 2)
        print()
        wake_latency(a.repeat * 2)
    else:
        print("\nMedian seconds per call (ms, p25..p75) of "
              f"{a.repeat} interleaved repeats; ratio = 1 thread / 2 threads\n")
        print("| workload | 1 thread | 2 threads | ratio | target | CPU ms/call 1 / 2 | "
              "CPU 2 / 1 | worker share (2) | CPU ms caller / worker (2) | CPU 1 / busiest (2) | "
              "bit-identical |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        targets = {"add100": ">= 1.7x", "mlp": ">= 1.5x", "transformer": ">= 1.5x"}
        for name, (fn, args) in workloads(a.quick).items():
            compare(name, fn, args, a.repeat, targets[name])
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
