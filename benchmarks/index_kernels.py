"""The cpu backend's native scans, gathers, scatters and ordered reductions against the numpy
callback they replaced (`runtime/cpu/index_kernels.py`; before, `emitter.FALLBACK_OPS` sent
these ops back into the registry's numpy reference from the native entry).

    python benchmarks/index_kernels.py [--size 1024] [--runs 21]

One program per op on a medium float32 [N, N] tensor (N = --size; indices of length N). Each
program is compiled twice in this process: native, and with the op put back on the fallback
list (the old path: a ctypes callback that builds numpy views and runs the reference). The
two are timed interleaved, one thread (OPENBLAS_NUM_THREADS=1), and the table gives medians
with p25..p75 in milliseconds and the ratio callback / native (above 1: native is faster).
The program is just the op on a caller's array (plus what makes its result), so the figure
includes the per-call overhead both paths share (output allocation, one native call).
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
from runtime.cpu import emitter  # noqa: E402


def programs(n):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(np.float32)
    pos = rng.uniform(0.999, 1.001, (n, n)).astype(np.float32)
    idx = rng.integers(-n, n, n)
    along = rng.integers(-n, n, (n, n // 8))
    vals = rng.standard_normal((n, n // 8)).astype(np.float32)
    labels = rng.integers(0, 9, n)
    return [
        ("min", "axis=1", lambda t: t.min(axis=1), (x,)),
        ("min", "axis=0", lambda t: t.min(axis=0), (x,)),
        ("prod", "axis=1", lambda t: t.prod(axis=1), (pos,)),
        ("prod", "axis=0", lambda t: t.prod(axis=0), (pos,)),
        ("argmax", "axis=1", lambda t: t.argmax(axis=1), (x,)),
        ("argmax", "axis=0", lambda t: t.argmax(axis=0), (x,)),
        ("argmin", "axis=None", lambda t: t.argmin(), (x,)),
        ("cumsum", "axis=1", lambda t: t.cumsum(1), (x,)),
        ("cumsum", "axis=0", lambda t: t.cumsum(0), (x,)),
        ("index_select", "axis=0", lambda t, i: t.index_select(i, 0), (x, idx)),
        ("index_select", "axis=1", lambda t, i: t.index_select(i, 1), (x, idx)),
        ("index_add", "axis=0", lambda t, i, u: t.index_add(i, 0, u), (x, idx, x)),
        ("index_add", "axis=1", lambda t, i, u: t.index_add(i, 1, u), (x, idx, x)),
        ("take_along_axis", f"[{n},{n // 8}]", lambda t, i: t.take_along_axis(i, 1),
         (x, along)),
        ("put_along_axis", f"assign [{n},{n // 8}]",
         lambda t, i, u: t.put_along_axis(i, u, 1), (x, along, vals)),
        ("put_along_axis", f"add [{n},{n // 8}]",
         lambda t, i, u: t.put_along_axis(i, u, 1, "add"), (x, along, vals)),
        ("one_hot", f"computed labels [{n}] x 10",
         lambda y: F.one_hot(y % 10, 10) if hasattr(F, "one_hot") else
         y.primitive("one_hot", num_classes=10, dtype=np.float32), (labels,)),
    ]


def build(fn, args, op, fallback: bool):
    saved = emitter.FALLBACK_OPS
    if fallback:
        emitter.FALLBACK_OPS = frozenset({op})
    try:
        f = cc.compile(fn, backend="cpu")
        prog = f.lower(*args)
    finally:
        emitter.FALLBACK_OPS = saved
    assert bool(prog._exec.fallback_nodes) == fallback, (op, fallback)
    return prog


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=21)
    a = ap.parse_args()
    print(f"float32 [{a.size}, {a.size}], one thread, medians of {a.runs} interleaved runs (ms)")
    print()
    print("| op | case | native | callback | callback / native |")
    print("|---|---|---|---|---|")
    for op, case, fn, args in programs(a.size):
        native, back = build(fn, args, op, False), build(fn, args, op, True)
        np.testing.assert_array_equal(native(*args), back(*args))
        times = {"n": [], "b": []}
        for _ in range(a.runs):
            for key, prog in (("n", native), ("b", back)):
                t0 = time.perf_counter()
                prog(*args)
                times[key].append(time.perf_counter() - t0)
        q = {k: np.percentile(np.array(v) * 1e3, [25, 50, 75]) for k, v in times.items()}
        fmt = "{1:.3f} ({0:.3f}..{2:.3f})"
        print(f"| {op} | {case} | {fmt.format(*q['n'])} | {fmt.format(*q['b'])} | "
              f"{q['b'][1] / q['n'][1]:.2f} |")


if __name__ == "__main__":
    main()
