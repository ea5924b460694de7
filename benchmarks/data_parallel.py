"""Issue 12's figures: the MLP and transformer training steps, data parallel on MPI.

    mpirun -n 2 python benchmarks/data_parallel.py [--backend cpu|numpy] [--repeat 21]
    (as root add --allow-run-as-root; with more ranks than cores --oversubscribe)

Per model, at the examples' global batch split over the ranks, rank 0 prints:
  - step ms: median wall time of one data-parallel step (all ranks start together: a barrier
    before each timed call);
  - local ms: the same step compiled without `distributed` on the rank's share of the batch
    (the computation alone, no communication);
  - comm B: bytes each rank all-reduces per step (the plan's buckets, padding included), and
    the gradient bytes they carry;
  - alone ms: the same buckets all-reduced with a blocking `Allreduce`, nothing else running
    (what the communication costs when nothing hides it), median and min: on a loaded machine
    the two differ by orders of magnitude (a rank descheduled while the other waits), and the
    hidden share below, computed from medians, is then only indicative;
  - waited ms: median time the step spent blocked in its waits (compiler.distributed.STATS);
  - hidden: 1 - waited / alone, the share of the communication that ran behind computation
    (clipped to [0, 1]; no target).
Medians of `--repeat` interleaved runs; BLAS on one thread (OPENBLAS_NUM_THREADS=1 is set
before numpy loads). On one machine the ranks share its cores and memory bandwidth.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from compiler import distributed  # noqa: E402


def _models():
    import mlp
    import transformer_block as tb
    return {
        "mlp": (mlp.train_step, lambda batch: mlp.example_inputs(batch=batch), mlp.BATCH),
        "transformer": (tb.train_step, lambda batch: tb.example_inputs(batch=batch), tb.BATCH),
    }


def _median(xs):
    return float(np.median(xs))


def bench(name, fn, inputs, global_batch, comm, backend, repeat):
    from mpi4py import MPI
    size = comm.Get_size()
    local = global_batch // size
    args = inputs(local)
    step = cc.compile(fn, backend=backend, distributed=distributed.mpi(comm))
    alone = cc.compile(fn, backend=backend)
    plan = step.lower(*args).plan
    alone_args = [a.copy() for a in args]
    bufs = [np.ones(b.nbytes // 4, np.float32) for b in plan.communication]
    step(*args)
    alone(*alone_args)  # compile and warm both
    t_step, t_local, t_comm, waited = [], [], [], []
    for _ in range(repeat):
        comm.Barrier()
        before = distributed.STATS["wait_seconds"]
        t0 = time.perf_counter()
        step(*args)
        t_step.append(time.perf_counter() - t0)
        waited.append(distributed.STATS["wait_seconds"] - before)
        t0 = time.perf_counter()
        alone(*alone_args)
        t_local.append(time.perf_counter() - t0)
        comm.Barrier()
        t0 = time.perf_counter()
        for buf in bufs:
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        t_comm.append(time.perf_counter() - t0)
    # the slowest rank decides: take each figure's max over the ranks
    figures = np.array([_median(t_step), _median(t_local), _median(t_comm), _median(waited),
                        min(t_comm)])
    comm.Allreduce(MPI.IN_PLACE, figures, op=MPI.MAX)
    step_s, local_s, comm_s, wait_s, comm_min = figures
    grad = sum(b.gradient_bytes for b in plan.communication)
    hidden = min(max(1.0 - wait_s / comm_s, 0.0), 1.0) if comm_s > 0 else 1.0
    return (name, f"{size}x{local}", f"{step_s * 1e3:.2f}", f"{local_s * 1e3:.2f}",
            f"{plan.communicated_bytes}", f"{grad}", str(len(plan.communication)),
            f"{comm_s * 1e3:.2f}", f"{comm_min * 1e3:.2f}", f"{wait_s * 1e3:.2f}",
            f"{hidden:.0%}")


def main():
    from mpi4py import MPI
    ap = argparse.ArgumentParser(description="data-parallel steps on MPI")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "numpy"])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--models", default="mlp,transformer")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rows = [("model", "ranks x rows", "step ms", "local ms", "comm B", "grad B", "buckets",
             "alone ms", "alone min", "waited ms", "hidden")]
    models = _models()
    for name in args.models.split(","):
        fn, inputs, batch = models[name]
        rows.append(bench(name, fn, inputs, batch, comm, args.backend, args.repeat))
    if comm.Get_rank() == 0:
        library = MPI.Get_library_version().splitlines()[0].strip()
        print(f"backend {args.backend}, {comm.Get_size()} ranks, {library}, "
              f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
              f"median of {args.repeat}")
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
