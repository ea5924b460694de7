"""16-bit floats on the cpu backend against float32 (issue 26): a memory-bound elementwise op
moves half the bytes in bfloat16 / float16, so it should take about half the time; a GEMM on
16-bit operands widens them into float32 panels and calls the float32 GEMM.

    python benchmarks/half_precision.py              # 16M elements (64 MiB float32), 21 rounds
    python benchmarks/half_precision.py --quick      # 1M elements, 5 rounds: a smoke test
    python benchmarks/half_precision.py --threads 2  # the compiled programs' thread count

Workloads, each on the same values in every dtype: `relu(x)` and `x * 2 + 1` (one fused loop:
a load, a store and float32 arithmetic between the 16-bit conversions), out of place on
[n] elements; `matmul` of two [512, 512] matrices. Columns: our cpu backend in float32,
bfloat16 and float16, and PyTorch eager in the same dtypes when it is installed (its CPU
kernels also compute 16-bit floats in float32). Each round runs every column once in a
rotating order (interleaved, so a change in the machine's load hits every column alike); a
cell is the median over the rounds, with p25..p75, and the ratio to float32 of the same
library. On a shared machine the figures move with its load (printed before and after).

Measured here (2 shared cores, Zen 3 with F16C, load average ~2.7, 1 thread, 16M elements,
medians of 21 rounds, fresh outputs each call):
  relu   cpu: float32 12.2 ms, bfloat16 7.7 ms (x0.63), float16 11.5 ms (x0.94);
         torch eager: float32 57 ms, bfloat16 31 ms (x0.53), float16 31 ms (x0.54)
  x*2+1  cpu: float32 14.1 ms, bfloat16 12.8 ms (x0.91), float16 36.1 ms (x2.57);
         torch eager: float32 121 ms, bfloat16 66 ms (x0.55), float16 66 ms (x0.54)
The 16-bit loops are no longer memory-bound on one core: each op's result is rounded (x*2 to
its dtype, then +1), and float16's conversions carry NumPy's NaN rules (an integer fix-up
beside each vcvtph2ps / vcvtps2ph). A 512^2 matmul runs at the float32 GEMM's speed in both
16-bit dtypes (widening is O(n^2)); torch eager's 16-bit CPU matmul took ~50x its float32 here.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import compiler as cc  # noqa: E402
import compiler.nn.functional as F  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")


def _np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def workloads(n, mm):
    rng = np.random.default_rng(0)
    x32 = rng.standard_normal(n).astype(np.float32)
    a32 = rng.standard_normal((mm, mm)).astype(np.float32)
    b32 = rng.standard_normal((mm, mm)).astype(np.float32)
    return {
        "relu": (lambda x: F.relu(x), lambda x: __import__("torch").relu(x), (x32,)),
        "x*2+1": (lambda x: x * 2.0 + 1.0, lambda x: x * 2.0 + 1.0, (x32,)),
        "matmul": (lambda a, b: a @ b, lambda a, b: a @ b, (a32, b32)),
    }


def columns(wl, threads):
    """(name, callable) per column of one workload."""
    ours, theirs, args32 = wl
    cols = []
    for d in DTYPES:
        args = [a.astype(_np_dtype(d)) for a in args32]
        fn = cc.compile(ours, threads=threads)
        fn(*args)
        cols.append((f"cpu {d}", lambda fn=fn, args=args: fn(*args)))
    try:
        import torch
    except ImportError:
        return cols
    torch.set_num_threads(threads or os.cpu_count())
    for d in DTYPES:
        targs = [torch.from_numpy(a).to(getattr(torch, d)) for a in args32]
        theirs(*targs)
        cols.append((f"torch {d}", lambda targs=targs: theirs(*targs)))
    return cols


def bench(cols, rounds):
    times = {name: [] for name, _ in cols}
    for r in range(rounds):
        order = cols[r % len(cols):] + cols[:r % len(cols)]
        for name, call in order:
            t = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t)
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--workloads", default="relu,x*2+1,matmul")
    opts = ap.parse_args(argv)
    n = (1 << 20) if opts.quick else (1 << 24)
    mm = 256 if opts.quick else 512
    rounds = opts.rounds or (5 if opts.quick else 21)
    print(f"{n} elements ({n * 4 >> 20} MiB float32, {n * 2 >> 20} MiB in 16 bits), "
          f"matmul [{mm}, {mm}]^2, {rounds} rounds, threads={opts.threads}, "
          f"load average before {os.getloadavg()[0]:.2f}")
    for name, wl in workloads(n, mm).items():
        if name not in opts.workloads.split(","):
            continue
        times = bench(columns(wl, opts.threads), rounds)
        base = {}
        for col, ts in times.items():
            med = statistics.median(ts)
            lib, d = col.split()
            base.setdefault(lib, med if d == "float32" else None)
            q = np.percentile(ts, [25, 75])
            ratio = med / base[lib] if base[lib] else float("nan")
            print(f"  {name:7s} {col:15s} median {med * 1e3:9.3f} ms  (p25..p75 "
                  f"{q[0] * 1e3:.3f}..{q[1] * 1e3:.3f})  x{ratio:.2f} of {lib} float32")
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
