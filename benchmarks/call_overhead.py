"""Issue 25 item 2's figure: the CPU time of one call of a tiny compiled program, beside peers.

    python benchmarks/call_overhead.py [--calls 20000] [--repeat 7]

The program is `x * 2 + 1` on 4 float32 values: its work is nothing, so a call's time is the
driver's (binding the arguments, finding the program, the native call, wrapping the result).
Each repeat times `--calls` calls of every contender in turn (interleaved, so that load on a
shared machine falls on all of them alike) with `time.process_time` (CPU, not wall: other
processes' load doesn't count), and the medians over repeats are printed in microseconds per
call with the ratio to ours. Contenders: `fn(x)` (cc.compile, cpu backend: after its first
call, the short path of a layout seen before, `compiler.api._FastCall`: one native builtin,
`runtime.cpu.executable.FastRunner.native`), the lowered `Program` called directly, `fn(x)` on
the short path as it was before that builtin ("Python short": `executable.NATIVE_CALLS = False`
while its layout is first seen, so that `FastRunner.one` in Python drives the native
trampoline), `fn(x)` with the short path off (`compiler.api.FAST_CALLS = False`: the
general path every call binds, checks and wraps on), and where installed `jax.jit`, torch
eager and torch.compile. BLAS runs on one thread (no GEMM here anyway).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from compiler import api  # noqa: E402
from runtime.cpu import executable  # noqa: E402


def contenders():
    x = np.ones(4, np.float32)
    fn = cc.compile(lambda x: x * 2 + 1)
    fn(x)
    prog = fn.lower(x)
    general = cc.compile(lambda x: x * 2 + 1)
    general(x)
    before = cc.compile(lambda x: x * 2 + 1)
    executable.NATIVE_CALLS = False
    for _ in range(3):  # (the general call, then the first short call decides)
        before(x)
    executable.NATIVE_CALLS = True
    # (name: the callable, its argument, whether the short path is on while it runs)
    out = {"ours fn(x)": (fn, x), "ours Program(x)": (prog, x),
           "ours Python short": (before, x), "ours general path": (general, x, False)}
    try:
        import jax
        jf = jax.jit(lambda x: x * 2 + 1)
        jx = jax.numpy.asarray(x)
        jf(jx).block_until_ready()
        out["jax.jit"] = (lambda a: jf(a).block_until_ready(), jx)
    except ImportError:
        pass
    try:
        import torch
        torch.set_num_threads(1)
        tx = torch.from_numpy(x.copy())
        out["torch eager"] = (lambda a: a * 2 + 1, tx)
        tc = torch.compile(lambda a: a * 2 + 1)
        tc(tx)
        out["torch.compile"] = (tc, tx)
    except ImportError:
        pass
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    runs = contenders()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, (f, x, *fast) in runs.items():
            api.FAST_CALLS = fast[0] if fast else True
            start = time.process_time()
            for _ in range(args.calls):
                f(x)
            times[name].append((time.process_time() - start) / args.calls * 1e6)
    api.FAST_CALLS = True
    ours = statistics.median(times["ours fn(x)"])
    print(f"CPU time per call of `x * 2 + 1` on f32[4] ({args.calls} calls x {args.repeat} "
          f"interleaved repeats, medians; load average {os.getloadavg()[0]:.2f})")
    print(f"{'contender':<18} {'us/call':>9} {'ours fn(x) / it':>16}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<18} {med:9.2f} {ours / med:16.2f}")


if __name__ == "__main__":
    main()
