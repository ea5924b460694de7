"""Where the mlp step's time goes on the cpu backend, node by node, at 1 thread.

    python benchmarks/mlp_profile.py [--repeat 15] [--no-torch] [--batch 256]
    python benchmarks/mlp_profile.py --threads 1,2 --no-torch    # wall time, side by side

Builds `examples/mlp.py`'s `train_step` with a `profile=True` executable (a tick after every
node, ~1 us each; the first node's tick also counts the call's own setup) and prints every
node in the plan's order with its median time, then the GEMMs (matmul and the fused `gemm`
weight updates: shapes, layouts, GFLOP/s, and `torch.matmul`/`addmm_` on operands of the same
layout at 1 thread beside them, as `transformer_profile.py` does) and the sum of the rest:
what issue 25 calls the time outside the GEMMs. Times are the calling thread's CPU time (at
1 thread every kernel, BLAS included, runs on it), robust on a shared machine; the load
average is printed.

`--threads 1,2`: the step built for each thread count, profiled in turns (interleaved), with
wall-clock ticks (the calling thread's CPU time would miss the workers'): each node's median
per thread count and the ratio, so what doesn't gain from a second thread shows.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from runtime.cpu.executable import CpuExecutable  # noqa: E402
from examples import mlp as ex_mlp  # noqa: E402
from transformer_profile import _CpuTimed, gemm_rows  # noqa: E402


def _describe(node) -> str:
    if node.op == "fused":
        inner = [n.op for n in node.attrs["body"].nodes if n.op != "full"]
        text = "+".join(inner[:4]) + ("+..." if len(inner) > 4 else "")
        return f"fused[{text}]"
    return node.op


def by_threads(counts, repeat, batch):
    args = ex_mlp.example_inputs(batch=batch)
    exes = {}
    for t in counts:
        prog = cc.compile(ex_mlp.train_step, backend="cpu", threads=t).lower(*args)
        exe = CpuExecutable(prog.graph, prog.plan, profile=True)
        exe.set_threads(t)
        inputs = [np.array(a) for a in args]
        exe.run(inputs)
        exes[t] = (exe, inputs)
    runs = {t: [] for t in counts}
    for r in range(repeat):
        for t in (counts if r % 2 == 0 else counts[::-1]):
            exe, inputs = exes[t]
            runs[t].append(exe.profile(inputs, repeat=1))
    med = {t: [(node, float(np.median([run[i][1] for run in runs[t]])))
               for i, (node, _) in enumerate(runs[t][0])] for t in counts}
    print(f"load average {os.getloadavg()[0]:.2f}; wall ms per node, medians of {repeat}")
    print("  ".join(f"{t:>2} thr" for t in counts) + "   ratio  node")
    totals = [sum(s for _, s in med[t]) for t in counts]
    for i, (node, _) in enumerate(med[counts[0]]):
        secs = [med[t][i][1] for t in counts]
        print("  ".join(f"{s * 1e3:6.3f}" for s in secs) +
              f"  {secs[0] / max(secs[-1], 1e-12):6.2f}  {_describe(node)} "
              f"{tuple(node.out.shape)}")
    print("  ".join(f"{s * 1e3:6.2f}" for s in totals) + f"  {totals[0] / totals[-1]:6.2f}  "
          "the step (sum of nodes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--batch", type=int, default=ex_mlp.BATCH)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--threads", help="e.g. 1,2: wall-clock profiles side by side")
    cli = ap.parse_args()
    if cli.threads:
        by_threads([int(t) for t in cli.threads.split(",")], cli.repeat, cli.batch)
        return
    torch = None
    if not cli.no_torch:
        import torch
        torch.set_num_threads(1)
    args = ex_mlp.example_inputs(batch=cli.batch)
    prog = cc.compile(ex_mlp.train_step, backend="cpu", threads=1).lower(*args)
    exe = _CpuTimed(prog.graph, prog.plan, profile=True)
    inputs = [np.array(a) for a in args]
    exe.run(inputs)
    prof = exe.profile(inputs, repeat=cli.repeat)
    total = sum(s for _, s in prof)
    rows = gemm_rows(exe, prof, torch, cli.repeat)
    g_ours = sum(r[6] for r in rows)
    print(f"load average {os.getloadavg()[0]:.2f}; mlp step (sum of nodes) {total * 1e3:.2f} ms:"
          f" GEMMs {g_ours * 1e3:.2f} ms, the rest {(total - g_ours) * 1e3:.2f} ms")
    print(f"\n{'ms':>7}  node (plan order)")
    for node, sec in prof:
        line = getattr(node.loc, "line", "") if node.loc is not None else ""
        print(f"{sec * 1e3:7.3f}  {_describe(node):40} {tuple(node.out.shape)!s:14} "
              f"{node.out.dtype!s:8} line {line}")
    g_torch = sum(r[8] for r in rows) if torch is not None else float("nan")
    print(f"\nGEMMs: {len(rows)} nodes, ours {g_ours * 1e3:.2f} ms, torch {g_torch * 1e3:.2f} ms")
    print(f"{'op':7} {'line':>5} {'m':>5} {'n':>5} {'k':>5} {'tr':2} "
          f"{'ours ms':>8} {'GF/s':>6} {'torch ms':>8} {'GF/s':>6}")
    for node, batch, m, n, k, tr, sec, flops, tt in rows:
        line = getattr(node.loc, "line", "") if node.loc is not None else ""
        ts = f"{tt * 1e3:8.3f} {flops / tt * 1e-9:6.1f}" if tt else ""
        print(f"{node.op:7} {line!s:>5} {m:5} {n:5} {k:5} {tr:2} {sec * 1e3:8.3f} "
              f"{flops / sec * 1e-9:6.1f} {ts}")


if __name__ == "__main__":
    main()
