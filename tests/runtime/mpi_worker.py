"""One rank of the 2-rank data-parallel checks (tests/runtime/test_mpi.py starts it under
`mpirun -n 2`). Each rank writes what it saw to OUTDIR/rank<r>.json; the test asserts on both.
Run by hand: `mpirun -n 2 --oversubscribe python tests/runtime/mpi_worker.py /tmp/out`."""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", ".."), os.path.join(HERE, "..", "..", "examples")]

import compiler as cc  # noqa: E402
import compiler.nn.functional as F  # noqa: E402
from compiler.ops import COMM_OPS  # noqa: E402
from mpi4py import MPI  # noqa: E402

SIZES = (24, 40, 6)   # in, hidden, out: small, so 5 steps on 2 backends take a moment
LOCAL_BATCH = 8
STEPS = 5


def train_step(x, labels, lr, w1, b1, w2, b2):
    for p in (w1, b1, w2, b2):
        p.stop_gradient = False
    h = F.relu_(x @ w1 + b1)
    loss = F.cross_entropy(h @ w2 + b2, labels)
    loss.backward()
    with cc.no_grad():
        for p in (w1, b1, w2, b2):
            p.subtract_(lr * p.grad)
    return loss


def params(seed=0):
    rng = np.random.default_rng(seed)
    n_in, n_hidden, n_out = SIZES
    return [(rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in)).astype(np.float32),
            rng.standard_normal(n_hidden).astype(np.float32) * 0.1,
            (rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden)).astype(np.float32),
            rng.standard_normal(n_out).astype(np.float32) * 0.1]


def batch(step, n):
    rng = np.random.default_rng(100 + step)
    return (rng.standard_normal((n, SIZES[0])).astype(np.float32),
            rng.integers(0, SIZES[2], size=n).astype(np.int64))


def check_training(backend, comm, rank, size):
    """5 steps at lr 1.0 (ordering bugs hide in small learning rates) with
    small buckets (several per step, so starts and waits interleave with backward)."""
    dist = cc.distributed.mpi(comm, bucket_bytes=1024)
    step = cc.compile(train_step, backend=backend, distributed=dist)
    single = cc.compile(train_step, backend=backend)
    mine, ref = params(), params()
    lr = np.array(1.0, np.float32)
    losses = []
    for i in range(STEPS):
        x, labels = batch(i, LOCAL_BATCH * size)
        part = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH)
        losses.append(float(step(x[part], labels[part], lr, *mine)))
        single(x, labels, lr, *ref)  # the whole batch in one process
    prog = step.lower(x[part], labels[part], lr, *mine)
    plan = prog.plan
    everyone = comm.allgather([p.tobytes() for p in mine])
    comm_buffers = sorted({plan.buffer_of[n.out].id for n in prog.graph.nodes
                           if n.op in COMM_OPS})
    return {
        "identical_on_all_ranks": all(e == everyone[0] for e in everyone),
        "max_rel_error_vs_single": max(float(np.abs(a - b).max() / np.abs(b).max())
                                       for a, b in zip(mine, ref)),
        "changed": bool(any(np.abs(a - b).max() > 0 for a, b in zip(mine, params()))),
        "losses": losses,
        "buckets": [b.to_dict() for b in plan.communication],
        "comm_buffers": comm_buffers,
        "bucket_buffer_sizes": [plan.buffers[b].size for b in comm_buffers],
        "arena_bucket_kinds": [plan.buffers[b].kind for b in comm_buffers],
        "communicated_bytes": plan.communicated_bytes,
        "gradient_bytes": sum(p.nbytes for p in mine),
        "report": plan.report(),
        "ops_in_order": [n.op for n in prog.graph.nodes],
        "gemm_folded": [d.to_dict() for d in plan.gemm_decisions],
    }


def check_mismatch(backend, comm, rank):
    """Rank 1 passes a smaller batch: every rank must raise a ShapeError, none hang."""
    dist = cc.distributed.mpi(comm, timeout=30.0)
    step = cc.compile(train_step, backend=backend, distributed=dist)
    n = LOCAL_BATCH if rank == 0 else LOCAL_BATCH - 2
    x, labels = batch(0, n)
    try:
        step(x, labels, np.array(0.1, np.float32), *params())
    except cc.ShapeError as e:
        return {"raised": type(e).__name__, "message": str(e)}
    return {"raised": None, "message": ""}


def check_dropout(backend, comm, rank):
    """Random numbers are rank-local: one seed, a different dropout mask on each rank."""
    def noisy(x, seed):
        return F.dropout(x, p=0.5, seed=seed)
    fn = cc.compile(noisy, backend=backend, distributed=cc.distributed.mpi(comm))
    out = fn(np.ones((4, 64), np.float32), np.array(7, np.uint64))
    masks = comm.allgather((out != 0).tobytes())
    return {"masks_differ": masks[0] != masks[1]}


def check_timeout(comm, rank):
    """A wait for a rank that never calls the step ends in CommunicationError after the
    timeout (rank 1 stays out until rank 0 has given up, then completes the exchange)."""
    result = {}
    dup = comm.Dup()
    if rank == 0:
        step = cc.compile(train_step, distributed=cc.distributed.mpi(dup, timeout=1.0))
        x, labels = batch(0, LOCAL_BATCH)
        try:
            step(x, labels, np.array(0.1, np.float32), *params())
            result["raised"] = None
        except cc.distributed.CommunicationError as e:
            result["raised"], result["message"] = type(e).__name__, str(e)
    comm.Barrier()
    if rank != 0:  # the signature exchange rank 0 posted before giving up (2 hashes a rank)
        dup.Iallgather(np.zeros(2, np.uint64), np.empty((dup.Get_size(), 2), np.uint64)).Wait()
    return result


def make_step(lr=0.1, act=F.relu):
    """train_step with a learning rate and activation fixed at trace time: ranks that build it
    with other values run other programs under the same name and argument types."""
    def train_step(x, labels, w1, b1, w2, b2):
        for p in (w1, b1, w2, b2):
            p.stop_gradient = False
        loss = F.cross_entropy(act(x @ w1 + b1) @ w2 + b2, labels)
        loss.backward()
        with cc.no_grad():
            for p in (w1, b1, w2, b2):
                p.subtract_(lr * p.grad)
        return loss
    return train_step


class CountStarts:
    """Counts the all-reduces this rank posts (and can delay one bucket's start, `late`)."""

    def __init__(self, late=None):
        self.real, self.count, self.late = cc.distributed.start, 0, late

    def __enter__(self):
        def start(key, bucket, buf):
            self.count += 1
            if self.late is not None and bucket == self.late[0]:
                time.sleep(self.late[1])
            self.real(key, bucket, buf)
        cc.distributed.start = start
        return self

    def __exit__(self, *exc):
        cc.distributed.start = self.real


def check_different_programs(backend, comm, rank):
    """Same function name and argument types, another program on rank 1: every rank raises
    before any all-reduce, and no argument is written."""
    cases = {"lr": ({"lr": 0.1}, {"lr": 0.05}, {}),
             "activation": ({}, {"act": F.sigmoid}, {}),
             "bucket_bytes": ({}, {}, {"bucket_bytes": 4096})}
    out = {}
    for name, (kw0, kw1, dist1) in cases.items():
        kw = kw0 if rank == 0 else kw1
        dist = cc.distributed.mpi(comm, timeout=20.0,
                                  **({"bucket_bytes": 1024} | (dist1 if rank else {})))
        step = cc.compile(make_step(**kw), backend=backend, distributed=dist)
        x, labels = batch(0, LOCAL_BATCH)
        args = [x, labels, *params()]
        before = [a.copy() for a in args]
        result = {"raised": None, "message": ""}
        with CountStarts() as starts:
            try:
                step(*args)
            except cc.ShapeError as e:
                result = {"raised": type(e).__name__, "message": str(e)}
        result["allreduces_posted"] = starts.count
        result["untouched"] = all(np.array_equal(a, b) for a, b in zip(args, before))
        out[name] = result
    # the communicator is still in step: the same program on every rank trains
    step = cc.compile(make_step(), backend=backend,
                      distributed=cc.distributed.mpi(comm, bucket_bytes=1024))
    x, labels = batch(0, LOCAL_BATCH)
    w = params()
    step(x, labels, *w)
    everyone = comm.allgather([p.tobytes() for p in w])
    out["then_same_program_trains"] = all(e == everyone[0] for e in everyone) and \
        any(not np.array_equal(a, b) for a, b in zip(w, params()))
    return out


LATE_TIMEOUT = 1.0


def check_late_rank(backend, comm, rank):
    """Rank 1 is late: 0.6 timeout to the call, then 1.3 timeout before it posts bucket 1 (a
    straggler; bucket 0, posted, makes no progress either while rank 1 calls no MPI). Rank 0
    gives up once the call has waited `timeout` in all (the exchange included), at bucket 0,
    with every argument as it was: not 0.6 + 1 timeouts, nor one timeout per bucket. Rank 1
    then completes its step against the reductions rank 0 had posted and kept."""
    T = LATE_TIMEOUT
    dup = comm.Dup()
    step = cc.compile(make_step(), backend=backend,
                      distributed=cc.distributed.mpi(dup, bucket_bytes=1024, timeout=T))
    x, labels = batch(0, LOCAL_BATCH)
    args = [x, labels, *params()]
    step(*args)  # traced, compiled and run once on both ranks: the timed call only runs
    comm.Barrier()
    result = {}
    if rank == 0:
        before = [a.copy() for a in args]
        t0 = time.monotonic()
        try:
            step(*args)
            result["raised"] = None
        except cc.distributed.CommunicationError as e:
            result["raised"], result["message"] = type(e).__name__, str(e)
        result["seconds"] = time.monotonic() - t0
        result["untouched"] = [bool(np.array_equal(a, b)) for a, b in zip(args, before)]
        try:  # the communicator is out of step now: the next call says so at once
            step(*args)
            result["next_call"] = None
        except cc.distributed.CommunicationError as e:
            result["next_call"] = str(e)
    else:
        time.sleep(0.6 * T)
        with CountStarts(late=(1, 1.3 * T)):
            step(*args)
        result["completed"] = True
    comm.Barrier()
    return result


def check_mpi_error(backend, comm, rank):
    """An error MPI itself reports: on an intercommunicator MPI refuses an in-place
    all-reduce (MPI_ERR_BUFFER) at the first bucket; the signature exchange works there."""
    local = comm.Split(rank, 0)
    inter = local.Create_intercomm(0, comm, 1 - rank, tag=7)
    step = cc.compile(make_step(), backend=backend,
                      distributed=cc.distributed.mpi(inter, bucket_bytes=1024, timeout=30.0))
    x, labels = batch(0, LOCAL_BATCH)
    args = [x, labels, *params()]
    before = [a.copy() for a in args]
    result = {"raised": None, "message": ""}
    try:
        step(*args)
    except Exception as e:  # noqa: BLE001 - the test asserts which class
        result = {"raised": type(e).__name__, "message": str(e)}
    result["untouched"] = all(np.array_equal(a, b) for a, b in zip(args, before))
    comm.Barrier()
    return result


def main(outdir):
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    backends = ["numpy", "cpu"]
    out = {"size": size}
    for backend in backends:
        out[f"train_{backend}"] = check_training(backend, comm, rank, size)
        out[f"mismatch_{backend}"] = check_mismatch(backend, comm, rank)
        out[f"dropout_{backend}"] = check_dropout(backend, comm, rank)
        out[f"programs_{backend}"] = check_different_programs(backend, comm, rank)
        out[f"late_{backend}"] = check_late_rank(backend, comm, rank)
        out[f"mpi_error_{backend}"] = check_mpi_error(backend, comm, rank)
    out["timeout"] = check_timeout(comm, rank)
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1])
