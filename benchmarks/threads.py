"""Issue 22's figure: calls of one compiled function from 2 threads against the same calls in 1.

    python benchmarks/threads.py [--backend cpu|numpy|both] [--calls 64] [--repeat 9]

One program, `((x * 2.0).sin() + x.exp()).sum(axis=1)` on a float32 [512, 1024] input (no
matmul: the native loop runs alone, not BLAS's threads), compiled once. Each repeat times
`--calls` calls made in one thread, then the same calls (the same inputs, half per thread) made
from two threads started together; the two are interleaved repeat by repeat, and the medians
are printed with their ratio (1 thread / 2 threads: 2.0 is perfect scaling on 2 free cores,
1.0 none). Every result of the 2-thread run is checked bit for bit against the 1-thread run.
The native call (cpu) releases the GIL, as do NumPy's ufunc loops (numpy), so the two threads'
calls run at once, each on an arena of its own (the program's pool). BLAS runs on one thread
(OPENBLAS_NUM_THREADS=1 etc. are set before numpy loads; the program calls no BLAS anyway).
On a shared machine the figure is as good as the cores that were free: see `os.getloadavg()`
printed with it.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402


def program(x):
    return ((x * 2.0).sin() + x.exp()).sum(axis=1)


def _serial(fn, inputs):
    start = time.perf_counter()
    outs = [fn(x) for x in inputs]
    return time.perf_counter() - start, outs


def _two_threads(fn, inputs):
    halves = [inputs[0::2], inputs[1::2]]
    outs: list = [None, None]
    barrier = threading.Barrier(3)

    def work(i):
        barrier.wait()
        outs[i] = [fn(x) for x in halves[i]]
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    merged = [None] * len(inputs)
    merged[0::2], merged[1::2] = outs
    return elapsed, merged


def measure(backend: str, calls: int, repeat: int) -> tuple[float, float]:
    fn = cc.compile(program, backend=backend)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((512, 1024)).astype(np.float32) for _ in range(calls)]
    fn(inputs[0])  # trace, compile, allocate: not timed
    _two_threads(fn, inputs[:4])  # the second arena of the pool, too
    one, two = [], []
    for _ in range(repeat):
        t1, serial = _serial(fn, inputs)
        t2, threaded = _two_threads(fn, inputs)
        one.append(t1)
        two.append(t2)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(serial, threaded)), \
            "a 2-thread result differs from the 1-thread one"
    return float(np.median(one)), float(np.median(two))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="both", choices=("cpu", "numpy", "both"))
    ap.add_argument("--calls", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    backends = ("cpu", "numpy") if a.backend == "both" else (a.backend,)
    print(f"cores: {os.cpu_count()}, load average: "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}, BLAS threads: "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")
    print(f"{a.calls} calls of {program.__name__} on f32[512,1024], medians of {a.repeat} "
          "interleaved repeats")
    print(f"{'backend':8} {'1 thread ms':>12} {'2 threads ms':>13} {'ratio':>7}")
    for backend in backends:
        one, two = measure(backend, a.calls, a.repeat)
        print(f"{backend:8} {one * 1e3:12.1f} {two * 1e3:13.1f} {one / two:7.2f}")


if __name__ == "__main__":
    main()
