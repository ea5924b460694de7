"""Where a gpu program's time goes: each launch of its launch list timed alone on the device.

    python benchmarks/gpu_profile.py                       # the transformer step
    python benchmarks/gpu_profile.py --workload mlp --top 15

The workloads and inputs are `benchmarks/backend_speed.py`'s. Each launch is bracketed by its
own pair of CUDA events, queued behind a spinning kernel so that the device's time is measured
and not the host's launching; beside them the whole list as `benchmarks/gpu_speed.py`'s
`gpu-device` column times it (host-bound when launches are short), with the host ahead,
replayed as the executable's own CUDA graph (or why it has none: `graph_refused`), and a whole
call from numpy arguments. Launches are grouped by the node's
op and by kernel, so a slow kernel family stands out. Without a CUDA device it says so.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import numpy as np  # noqa: E402

import backend_speed as bs  # noqa: E402
import compiler as cc  # noqa: E402
from runtime.gpu import executable as gx  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="transformer", choices=sorted(bs.WORKLOADS))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--bf16", action="store_true", help="float32 inputs in bfloat16")
    args = ap.parse_args(argv)
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception as e:  # noqa: BLE001
        print(f"no CUDA device (or no CuPy) here: {e}")
        return 0
    inputs = bs.inputs(args.workload, False)
    if args.bf16:
        import ml_dtypes
        inputs = tuple(a.astype(ml_dtypes.bfloat16) if a.dtype == np.float32 else a
                       for a in inputs)
    prog = cc.compile(bs.OURS[args.workload], backend="gpu").lower(*inputs)
    call_args = [a.copy() for a in inputs]
    prog(*call_args)                         # NVRTC, module load, arena: eager
    prog(*call_args)                         # the CUDA graph captured (COMPILER_CUDA_GRAPH=0: not)
    exe = prog._exec
    dev_in = [cupy.asarray(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
              if a.size else cupy.empty(1, cupy.uint8) for a in inputs]
    outputs = [cupy.empty(max(b.size, 1), cupy.uint8) for b in exe._output_buffers]
    launches = exe.module.launches
    nodes = exe.graph.nodes   # a launch's `node` indexes the graph in its run order

    # A kernel that spins for a while first, so the host queues the whole list before the
    # device reaches it: the events then time the device's work, not the host's launching.
    spin = cupy.RawKernel(r"""
    extern "C" __global__ void spin(unsigned long long ns) {
      unsigned long long t0, t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
      do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    }""", "spin")

    def spin_for(seconds):
        spin((1,), (1,), (np.uint64(seconds * 1e9),))

    def timed(fn, ahead):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        if ahead:
            spin_for(ahead)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) * 1e3

    def run_list():   # eagerly, as a call without a graph launches (prebuilt steps)
        exe._run_launches(cupy, dev_in, outputs)

    for _ in range(3):
        run_list()
    # the launch steps over these buffers, to launch one at a time
    blas = gx._Blas(cupy) if exe._has_gemm else None
    steps, _keep = exe._build_steps(dev_in, outputs, blas)   # (_keep: alpha/beta alive)
    graph = exe._cuda_graph   # the executable's own, captured at its second call
    if graph is None:
        print(f"no CUDA graph: {exe.graph_refused or 'COMPILER_CUDA_GRAPH=0'}")
    cupy.cuda.Device().synchronize()
    host_bound, device_only, replay, per = [], [], [], [[] for _ in launches]
    whole = []
    marks = [cupy.cuda.Event() for _ in range(len(launches) + 1)]
    for _ in range(args.runs):
        host_bound.append(timed(run_list, 0))
        device_only.append(timed(run_list, 0.05))
        replay.append(timed(graph.launch, 0) if graph else float('nan'))
        t0 = time.perf_counter()
        prog(*call_args)
        whole.append((time.perf_counter() - t0) * 1e6)
        # one launch at a time, all queued behind the spin
        if blas is not None:
            blas.on_stream(cupy.cuda.get_current_stream().ptr, "the profile")
        spin_for(0.05)
        for i, step in enumerate(steps):
            marks[i].record()
            exe._launch([step])
        marks[-1].record()
        marks[-1].synchronize()
        for i in range(len(steps)):
            per[i].append(cupy.cuda.get_elapsed_time(marks[i], marks[i + 1]) * 1e3)
    med = [float(np.median(p)) for p in per]

    def op_of(ln):
        if ln.node is not None and ln.node < len(nodes):
            return nodes[ln.node].op
        return ln.kernel.split("_", 1)[-1] if "_" in ln.kernel else ln.kernel

    print(f"{args.workload}{' bf16' if args.bf16 else ''}: {len(launches)} launches; medians "
          f"of {args.runs}: the list as launched now {np.median(host_bound):.1f} us; "
          f"the same with the host ahead (device time) {np.median(device_only):.1f} us; "
          f"replayed as a CUDA graph {np.median(replay):.1f} us; launches timed alone, "
          f"summed {sum(med):.1f} us; a whole call (prog(*args), host clock, "
          f"{'graph' if graph else 'eager'}) {np.median(whole):.1f} us")
    print("\n| launch | kernel | op | grid | block | us |\n|---|---|---|---|---|---|")
    order = sorted(range(len(launches)), key=lambda i: -med[i])
    for i in order[:args.top]:
        ln = launches[i]
        name = "cublas " + str(ln.dtype) if ln.library else ln.kernel
        print(f"| {i} | {name} | {op_of(ln)} | {ln.grid} | {ln.block} | {med[i]:.1f} |")
    by_op: dict = defaultdict(lambda: [0, 0.0])
    for i, ln in enumerate(launches):
        key = "cublas gemm" if ln.library else op_of(ln)
        by_op[key][0] += 1
        by_op[key][1] += med[i]
    print("\n| op | launches | us | share |\n|---|---|---|---|")
    total = sum(med)
    for key, (n, t) in sorted(by_op.items(), key=lambda kv: -kv[1][1]):
        print(f"| {key} | {n} | {t:.1f} | {t / total:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
