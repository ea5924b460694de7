"""Communication ops of data-parallel training (issue 12): a gradient bucket and its all-reduce.

A bucket is a flat 1-D value that holds several gradients side by side (`bucket_pack`); its
average over the ranks is computed by a non-blocking all-reduce split in two nodes, so the
scheduler can put computation between them:

    %b = bucket_pack %g1, %g2 {offsets=[0,16] bucket=0 comm=1}   # the gradients, side by side
    %s = allreduce_start %b {bucket=0 comm=1}   # posts MPI_Iallreduce(IN_PLACE, SUM) over %b
    ...                                          # the rest of backward runs meanwhile
    %w = allreduce_wait %s {bucket=0 comm=1}    # MPI_Wait (with a timeout), then * 1/size

Both all-reduce nodes overwrite their operand element by element (`overwrites=(0,)`), so the
reinplace pass runs them over the bucket's buffer, and the memory planner places each packed
gradient straight inside the bucket (passes.memory_plan), so `bucket_pack` writes nothing when
its operands already lie there: the reduction happens where the gradients were computed.

The reference semantics (`ref`, what the op-by-op interpreter runs): `allreduce_start` is the
blocking sum over the ranks, `allreduce_wait` the scaling by 1/size. The planned executors use
`into`, which posts the request at the start and completes it at the wait. `comm` is a key of
`compiler.distributed`'s table of communicators (attributes stay plain ints, so the graph prints,
hashes and caches as before).
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from .registry import OTHER, defop

COMM_OPS = frozenset({"bucket_pack", "allreduce_start", "allreduce_wait"})


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return a.ctypes.data == b.ctypes.data and a.nbytes == b.nbytes


# -- bucket_pack ------------------------------------------------------------------------------
def _pack_infer(types, offsets, size, bucket, comm, names=()):
    if len(types) != len(offsets) or not types:
        raise ShapeError("bucket_pack takes one offset per gradient")
    dtype = types[0][1]
    end = 0
    for (shape, dt), off in zip(types, offsets):
        n = int(np.prod(shape, dtype=np.int64))
        if dt != dtype or off < end or off + n > size:
            raise ShapeError("bucket_pack: gradients of one dtype at increasing, disjoint "
                             "offsets inside the bucket")
        end = off + n
    return (int(size),), dtype


def _pack_into(out, *grads, offsets, size, bucket, comm, names=()):
    end = 0
    for g, off in zip(grads, offsets):
        out[end:off] = 0  # the padding between slots (they start on 64-byte boundaries)
        region = out[off:off + g.size]
        if not (_same_memory(region, g) and g.flags.c_contiguous):
            region[...] = g.reshape(-1)  # (skipped when the plan computed g in its slot)
        end = off + g.size
    out[end:] = 0
    return None


def _pack_ref(*grads, offsets, size, bucket, comm, names=()):
    out = np.empty(size, grads[0].dtype)
    _pack_into(out, *grads, offsets=offsets, size=size, bucket=bucket, comm=comm)
    return out


defop("bucket_pack", OTHER, _pack_infer, _pack_ref, into=_pack_into,
      doc="gradients laid side by side in one flat bucket (each slot on a 64-byte boundary)")


# -- allreduce_start / allreduce_wait ----------------------------------------------------------
def _same_type(types, bucket, comm):
    ((shape, dtype),) = types
    if len(shape) != 1:
        raise ShapeError("an all-reduce works on a flat bucket")
    return shape, dtype


# The communication runtime the implementations call (`allreduce_blocking`, `start`, `wait`,
# `size`, each given the communicator's key that the graph attribute holds): the driver's
# compiler.distributed installs it when imported, which is before any graph can hold a key (keys
# come from its `mpi()`), so this floor imports nothing above it.
_runtime = None


def install_runtime(runtime) -> None:
    global _runtime
    _runtime = runtime


def _start_ref(b, bucket, comm):
    out = np.array(b, copy=True)
    _runtime.allreduce_blocking(comm, out)
    return out


def _start_into(out, b, bucket, comm):
    if not _same_memory(out, b):
        out[...] = b  # the plan could not run it over its bucket (inplace="off")
    _runtime.start(comm, bucket, out)
    return None


def _wait_ref(s, bucket, comm):
    return s * s.dtype.type(1.0 / _runtime.size(comm))


def _wait_into(out, s, bucket, comm):
    _runtime.wait(comm, bucket, s)
    np.multiply(s, s.dtype.type(1.0 / _runtime.size(comm)), out=out)
    return None


defop("allreduce_start", OTHER, _same_type, _start_ref, into=_start_into, overwrites=(0,),
      doc="posts the sum over all ranks of a bucket, in place (MPI_Iallreduce)")
defop("allreduce_wait", OTHER, _same_type, _wait_ref, into=_wait_into, overwrites=(0,),
      doc="completes a bucket's all-reduce (MPI_Wait, with a timeout) and divides by the "
          "number of ranks: the average")
