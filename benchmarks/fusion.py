"""Fusion on the cpu backend: run time, compile time and planned peak, fused against unfused.

    python benchmarks/fusion.py              # 21 interleaved runs per program (a few minutes)
    python benchmarks/fusion.py --repeat 5   # quicker, noisier

For each program, in one process, pinned to one core with one BLAS thread, the variants run
interleaved (one call of each per round) and the table reports medians and p25..p75 in ms:

- `cpu fused`: `backend="cpu"` (fusion on, the default); `cpu unfused`: `fuse=False`;
- `numpy`: the reference arena executor (`backend="numpy"`, fusion off);
- `NumPy`: the same computation written by hand with NumPy, where the program is a seed
  (the in-place loop `np.add(x, 1, out=x)`, or `x = x + 1.0`, or `np.maximum(x, 0, out=x)`).

The 100 in-place additions come in three forms that plan alike (one fused node): `x.add_(1.0)`,
`x.add_(cc.to_tensor(1.0))` (a constant node per addition, each a literal of the body) and a
0-d array argument. Compile time is `fn.lower(...)` (trace, passes, LLVM at -O3, link) with the
in-memory code cache emptied first; peak bytes are the plan's `peak_bytes`. Ratios are within one
run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
import compiler.nn.functional as F  # noqa: E402
from runtime.cpu import jit  # noqa: E402


def adds_out_of_place(x):
    for _ in range(100):
        x = x + 1.0
    return x


def adds_inplace(x):
    for _ in range(100):
        x.add_(1.0)
    return x


def adds_inplace_to_tensor(x):  # a constant node per addition: literals of one body
    for _ in range(100):
        x.add_(cc.to_tensor(1.0))
    return x


def adds_inplace_0d_argument(x, one):  # a 0-d array argument, read with stride 0
    for _ in range(100):
        x.add_(one)
    return x


def seed_adds_inplace(x):  # examples/seeds.py: a private copy first, then 100 add_
    x = x * 1.0
    for _ in range(100):
        x.add_(1.0)
    return x


def relu_(x):
    return F.relu_(x)


def relu(x):
    return F.relu(x)


def numpy_adds_inplace(x):
    one = np.float32(1.0)
    for _ in range(100):
        np.add(x, one, out=x)
    return x


def numpy_adds_out_of_place(x):
    for _ in range(100):
        x = x + np.float32(1.0)
    return x


def _examples():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "examples"))
    import mlp
    import transformer_block
    return mlp, transformer_block


def programs():
    """name -> (function, argument maker, hand-written NumPy or None)."""
    mlp, tb = _examples()
    x1k = np.random.default_rng(0).standard_normal((1000, 1000)).astype(np.float32)
    big = np.random.default_rng(1).standard_normal((1, 64, 512, 512)).astype(np.float32)
    return {
        "100 x = x + 1.0 [1000,1000]": (adds_out_of_place, lambda: (x1k.copy(),),
                                        numpy_adds_out_of_place),
        "100 x.add_(1.0) on the argument": (adds_inplace, lambda: (x1k.copy(),),
                                            numpy_adds_inplace),
        "100 x.add_(cc.to_tensor(1.0)) on the argument": (
            adds_inplace_to_tensor, lambda: (x1k.copy(),), numpy_adds_inplace),
        "100 x.add_(one), one a 0-d array argument": (
            adds_inplace_0d_argument, lambda: (x1k.copy(), np.array(1.0, np.float32)),
            lambda x, one: numpy_adds_inplace(x)),
        "seed: x = x * 1.0; 100 x.add_(1.0)": (seed_adds_inplace, lambda: (x1k.copy(),),
                                              None),
        "F.relu_ [1,64,512,512]": (relu_, lambda: (big.copy(),),
                                   lambda x: np.maximum(x, 0, out=x)),
        "F.relu [1,64,512,512]": (relu, lambda: (big.copy(),), lambda x: np.maximum(x, 0)),
        "mlp step": (mlp.train_step, lambda: mlp.example_inputs(), None),
        "transformer step": (tb.train_step, lambda: tb.example_inputs(), None),
    }


VARIANTS = [("cpu fused", dict(backend="cpu")), ("cpu unfused", dict(backend="cpu", fuse=False)),
            ("numpy", dict(backend="numpy"))]


def _compile(fn, args, **kw):
    jit._cache.clear()  # compile time without the in-memory code cache
    cf = cc.compile(fn, sanitize=False, **kw)
    t0 = time.perf_counter()
    prog = cf.lower(*args)
    return cf, prog, time.perf_counter() - t0


def measure(fn, make_args, by_hand, repeat):
    rows = {}
    runners = []
    for name, kw in VARIANTS:
        args = make_args()
        cf, prog, seconds = _compile(fn, args, **kw)
        rows[name] = dict(compile=seconds, peak=prog.plan.peak_bytes, nodes=len(prog.graph.nodes),
                          times=[])
        runners.append((name, prog, args))
    if by_hand is not None:
        args = make_args()
        rows["NumPy"] = dict(compile=None, peak=None, nodes=None, times=[])
        runners.append(("NumPy", by_hand, args))
    for name, run, args in runners:  # warm up: arenas, page faults, BLAS
        run(*args)
    for _ in range(repeat):
        for name, run, args in runners:
            t0 = time.perf_counter()
            run(*args)
            rows[name]["times"].append(time.perf_counter() - t0)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--only", help="run the programs whose name contains this")
    args = ap.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    print("| program | variant | median ms | p25..p75 ms | vs cpu fused | compile s | "
          "peak bytes | nodes |")
    print("|---|---|---|---|---|---|---|---|")
    for pname, (fn, make_args, by_hand) in programs().items():
        if args.only and args.only not in pname:
            continue
        rows = measure(fn, make_args, by_hand, args.repeat)
        base = float(np.median(rows["cpu fused"]["times"]))
        for vname, r in rows.items():
            t = np.array(r["times"]) * 1e3
            med = float(np.median(t))
            p25, p75 = np.percentile(t, [25, 75])
            comp = "" if r["compile"] is None else f"{r['compile']:.2f}"
            peak = "" if r["peak"] is None else f"{r['peak']:,}"
            nodes = "" if r["nodes"] is None else str(r["nodes"])
            print(f"| {pname} | {vname} | {med:.2f} | {p25:.2f}..{p75:.2f} | "
                  f"{med / (base * 1e3):.2f}x | {comp} | {peak} | {nodes} |", flush=True)
    print(f"\n(one core, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, "
          f"{args.repeat} interleaved runs; numpy {np.__version__}; compile = fn.lower with "
          "the in-memory code cache emptied)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
