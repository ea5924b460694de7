"""The backends as objects: what each one decides for the pipeline and the driver.

A `Backend` holds every per-backend fact the passes and the driver used to read off the
backend's name (`if backend == "gpu"`): the arena's alignment, whether fusion is on by
default and whether fused bodies need scratch rows, whether data-parallel steps run on it,
whether one native call writes every mutation in place, which ops its renderer lowers
natively (`native_ops`, from the lowering table) and how to build its executable.
Adding a backend means one new `Backend` here and its renderer under runtime/, not new string
comparisons in the driver. `backend_named` is the one place a user's string becomes a backend.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from passes.memory_plan import CPU_ALIGNMENT, GPU_ALIGNMENT

from .arena import ArenaExecutable
from .cpu import LOWERING as CPU_LOWERING
from .cpu import CpuExecutable
from .gpu import LOWERING as GPU_LOWERING
from .gpu import GpuExecutable
from .lowering.families import REFERENCE, Lowering


def _dump_requested(name: str) -> bool:
    return name in os.environ.get("COMPILER_DUMP", "").split(",")


def _numpy_executable(graph, plan, sanitize):
    return ArenaExecutable(graph, plan, sanitize=sanitize)


def _cpu_executable(graph, plan, sanitize):
    executable = CpuExecutable(graph, plan, sanitize=sanitize)
    if _dump_requested("llvm"):
        print(executable.source)
    return executable


def _gpu_executable(graph, plan, sanitize):
    # (no sanitizer on the device: the arena lives in GPU memory)
    # CUDA graph replay from the second call on; COMPILER_CUDA_GRAPH=0 launches eagerly
    graph_capture = os.environ.get("COMPILER_CUDA_GRAPH", "").strip().lower() \
        not in ("0", "off", "false")
    executable = GpuExecutable(graph, plan, use_graph=graph_capture)
    if _dump_requested("cuda"):
        print(executable.source)
    return executable


@dataclass(frozen=True, eq=False)
class Backend:
    """One backend. Compared by identity: there is one object per backend."""
    name: str
    alignment: int              # arena offsets (passes.memory_plan): 64 B cpu, 256 B gpu
    fuses_by_default: bool      # fuse=None: native code fuses, the reference stays op by op
    fusion_scratch: bool        # fused bodies keep inner values in scratch rows (numpy's
                                # chunked bodies); native code keeps them in registers
    distributed_refusal: str | None  # why distributed= can't run here; None: it can
    # One native call writes every mutation into the caller's array (no Python in between
    # when nothing is copied back and no op falls back): no signal-deferring region needed.
    native_call_writes_in_place: bool
    # The program is the reference executor's plan: the CLI checks it against the op-by-op
    # reference bit for bit in sanitizer mode (the others within a tolerance, by running).
    is_reference: bool
    communication_path: str | None = None  # how it runs all-reduces (the plan's report)
    _build: Callable = None
    # Which kernel families its renderer lowers (`runtime/lowering/families.py`).
    lowering: Lowering = REFERENCE

    @property
    def native_ops(self) -> frozenset:
        """The registry ops this backend runs as its own code (the rest: `fallback_ops`, or
        refused by the driver before lowering)."""
        return self.lowering.native_ops()

    @property
    def fallback_ops(self) -> frozenset:
        """The ops that call back into the numpy reference from this backend's code."""
        return self.lowering.fallback

    def executable(self, graph, plan, sanitize: bool):
        """The runnable form of a planned graph on this backend."""
        return self._build(graph, plan, sanitize)

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


NUMPY = Backend("numpy", CPU_ALIGNMENT, fuses_by_default=False, fusion_scratch=True,
                distributed_refusal=None, native_call_writes_in_place=False,
                is_reference=True, _build=_numpy_executable,
                communication_path="mpi4py's Iallreduce/Wait on the arena views")
CPU = Backend("cpu", CPU_ALIGNMENT, fuses_by_default=True, fusion_scratch=False,
              distributed_refusal=None, native_call_writes_in_place=True,
              is_reference=False, _build=_cpu_executable, lowering=CPU_LOWERING,
              communication_path="the native entry calls back into Python (mpi4py's "
                                 "Iallreduce/Wait on the arena views) at each pack, start and "
                                 "wait node: one crossing per communication node, not native "
                                 "MPI calls")
GPU = Backend("gpu", GPU_ALIGNMENT, fuses_by_default=True, fusion_scratch=False,
              distributed_refusal="distributed= runs on the numpy and cpu backends; the gpu "
                                  "backend has no host staging of its buckets yet",
              native_call_writes_in_place=False, is_reference=False, _build=_gpu_executable,
              lowering=GPU_LOWERING)

BACKENDS: dict[str, Backend] = {b.name: b for b in (NUMPY, CPU, GPU)}


def backend_named(name) -> Backend:
    """The backend called `name` (a Backend passes through); ValueError for an unknown one."""
    if isinstance(name, Backend):
        return name
    backend = BACKENDS.get(name) if isinstance(name, str) else None
    if backend is None:
        raise ValueError(f"unknown backend {name!r}: choose one of {tuple(BACKENDS)}")
    return backend
