"""The planned numpy executor: runs a program inside one preallocated arena.

Every value is an ndarray view of its buffer: arena buffers at their planned offsets, caller's
arrays for inputs (written only where the plan lets an op write into them: the program's own
mutations, and donated arguments), fresh arrays for returned buffers. Each inplace decision is
honoured: the op's result lands in its input's memory, and a scatter into a dead base writes
only the touched region. With `sanitize=True` the arena starts as garbage and every buffer is
poisoned (all bytes 0xFF: NaN for floats, -1 for ints) right after its last use, so a plan that
lets two live values share memory produces a wrong answer instead of a lucky right one.
"""
from __future__ import annotations

import numpy as np

from compiler.errors import InsufficientMemoryError
from compiler.layout import apply_view
from compiler.ops import REGISTRY, SCATTER, VIEW
from compiler.ops.shape_ops import numpy_index

from .reference import run_node

POISON = 0xFF


def available_memory() -> int | None:
    """Bytes the OS can give this process now without swapping (Linux `MemAvailable`), or
    None where that is unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(plan, arena_allocated: bool, loc=None) -> None:
    """Raise `InsufficientMemoryError` before a call that can't get the memory its plan needs:
    the arena (on the first call) and the returned buffers."""
    need = plan.output_bytes + (0 if arena_allocated else plan.arena_bytes)
    available = available_memory()
    if available is not None and need > available:
        raise InsufficientMemoryError(
            f"{plan.graph_name} needs {need} B ({need / 2**30:.1f} GiB: arena "
            f"{plan.arena_bytes} B, outputs {plan.output_bytes} B) but only {available} B "
            f"({available / 2**30:.1f} GiB) are available; nothing was allocated or written",
            loc)


class ArenaExecutable:
    """Runs a planned graph. Building one allocates nothing: the arena is allocated by the
    first call (so `fn.lower(...)` of a program bigger than the machine can be inspected)."""

    def __init__(self, graph, plan, sanitize: bool = False):
        self.graph, self.plan, self.sanitize = graph, plan, sanitize
        self.source = ""
        self.arena = None  # allocated once per program, at its first call
        index = {id(n): i for i, n in enumerate(graph.nodes)}
        # Buffers to poison after each node (sanitizer): arena buffers whose life ends there.
        self._dies_after: dict[int, list] = {}
        for b in plan.buffers:
            if b.kind == "arena" and b.size:
                self._dies_after.setdefault(b.end, []).append(b)
        self._index = index

    def _fresh(self, value, buffer, outputs_storage):
        if buffer.kind == "arena":
            return np.ndarray(value.shape, value.dtype, buffer=self.arena, offset=buffer.offset)
        # A returned buffer: allocated per call, shared by the values that live in it.
        storage = outputs_storage.get(id(buffer))
        if storage is None:
            storage = outputs_storage[id(buffer)] = np.empty(buffer.size, np.uint8)
        return np.ndarray(value.shape, value.dtype, buffer=storage, offset=0)

    def check_memory(self, loc=None):
        check_memory(self.plan, self.arena is not None, loc)

    def run(self, inputs):
        graph, plan = self.graph, self.plan
        if self.arena is None:
            self.arena = np.empty(plan.arena_bytes, np.uint8)
        if self.sanitize:
            self.arena.fill(POISON)
        arrays: dict[int, np.ndarray] = {}
        for v, arr in zip(graph.inputs, inputs):
            arrays[id(v)] = arr
        outputs_storage: dict[int, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for t, node in enumerate(graph.nodes):
                kind = REGISTRY[node.op].kind
                args = [arrays[id(v)] for v in node.inputs]
                if kind == VIEW:
                    view = apply_view(args[0], node.op, node.attrs)
                    assert view is not None, f"plan bug: {node} is not a view of its input"
                    arrays[id(node.out)] = view
                    continue
                taken = plan.reuse.get(node)
                if taken is None:
                    dest = self._fresh(node.out, plan.buffer_of[node.out], outputs_storage)
                    np.copyto(dest, run_node(node, args))
                elif kind == SCATTER:
                    dest = args[0]  # in place: write only the touched region
                    region = dest[numpy_index(node.attrs["index"])]
                    src = args[1]
                    if not (region.ctypes.data == src.ctypes.data
                            and region.strides == src.strides):
                        region[...] = src  # (skipped when the op already wrote it there)
                else:
                    dest = args[taken]
                    np.copyto(dest, run_node(node, args))
                arrays[id(node.out)] = dest
                if self.sanitize:
                    for b in self._dies_after.get(t, ()):
                        self.arena[b.offset:b.offset + b.size] = POISON
        outs = [arrays[id(v)] for v in graph.outputs]
        muts = {k: arrays[id(v)] for k, v in graph.mutations.items()}
        return outs, muts
