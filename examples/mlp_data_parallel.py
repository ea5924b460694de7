"""Data-parallel training of the MLP (examples/mlp.py) on MPI: each rank takes its share of
every batch, the compiled step averages the gradients over the ranks (buckets all-reduced in
place in the arena while backward still runs), and every rank ends with bit-identical weights.

    mpirun -n 2 python examples/mlp_data_parallel.py            (add --allow-run-as-root as
    root, --oversubscribe with more ranks than cores)

Rank 0 prints the losses, the communication part of the plan and the check.
"""
import argparse
import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compiler as cc  # noqa: E402
from mlp import BATCH, OUT, example_inputs, separable_data, train_step  # noqa: E402


def main():
    from mpi4py import MPI
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--backend", default="cpu", choices=["cpu", "numpy"])
    ap.add_argument("--batch", type=int, default=BATCH, help="global batch, split over ranks")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.batch % size:
        raise SystemExit(f"--batch {args.batch} does not split over {size} ranks")
    local = args.batch // size
    say = print if rank == 0 else (lambda *a, **k: None)

    _, _, w1, b1, w2, b2 = example_inputs()  # the same initial weights on every rank
    step = cc.compile(train_step, backend=args.backend, distributed=cc.distributed.mpi(comm))
    mine = slice(rank * local, (rank + 1) * local)
    for i in range(args.steps):
        x, labels = separable_data(args.batch, seed=i + 1)  # every rank draws the global batch
        loss = float(step(x[mine], labels[mine], w1, b1, w2, b2))
        losses = comm.gather(loss)
        if rank == 0 and (i % 20 == 0 or i == args.steps - 1):
            say(f"step {i:4d}: loss {np.mean(losses):.4f} (per rank: "
                + ", ".join(f"{v:.4f}" for v in losses) + ")")
    plan = step.lower(x[mine], labels[mine], w1, b1, w2, b2).plan
    say("\n".join(plan.communication_report()))

    digest = hashlib.sha256(b"".join(p.tobytes() for p in (w1, b1, w2, b2))).hexdigest()
    digests = comm.allgather(digest)
    same = all(d == digests[0] for d in digests)
    x, labels = separable_data(1000, seed=0)
    pred = np.argmax(np.maximum(x @ w1 + b1, 0) @ w2 + b2, axis=1)
    say(f"{size} ranks x {local} rows per step, {args.backend} backend; held-out accuracy "
        f"{np.mean(pred == labels):.1%} (chance {1 / OUT:.0%})")
    say(f"weights bit-identical on all {size} ranks: {same} (sha256 {digests[0][:16]}...)")
    if not same:
        raise SystemExit(f"rank {rank}: weights differ between ranks")


if __name__ == "__main__":
    main()
