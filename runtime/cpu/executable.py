"""The "cpu" backend's runnable program: the JIT'd entry, the arena, and per-call outputs.

`run(inputs)` passes the caller's (C-contiguous) arrays, a freshly allocated buffer for each
returned buffer of the plan and the arena to the native `run` in ONE ctypes call, then wraps
the results as numpy views of those buffers (the layouts come from
`runtime/lowering/places.py`). The arena is allocated at the first call and reused (64-byte
aligned, the plan's alignment; from 2 MiB on 2 MiB aligned and on transparent huge pages, as
the outputs: `runtime.arena.empty_aligned`), so lowering a program bigger than the machine
works, and a call that can't get its memory raises `InsufficientMemoryError` before anything
runs (`check_memory`, as the numpy executor).
Calls may run at once from several threads (the ctypes call releases the GIL): each takes an
arena, with its own pointer tables, from the program's pool (`runtime.arena.POOL_LIMIT`).

Fallback nodes (`emitter.FALLBACK_OPS`) call back into Python: the callback rebuilds the
operands as numpy views from the buffer pointers it gets (nothing of the call is kept on the
executable: calls in other threads run the same callback), runs the op's reference and writes
the result into the planned place; the communication ops of data-parallel training run their
`into` instead (the all-reduce is posted on, and completed in, the bucket's arena memory, so the
native entry runs the whole step in one crossing, with a callback per communication node). An
exception there is kept (per thread) and re-raised after the native call returns (ctypes would
otherwise print and swallow it); the callback then returns 1 and the native entry stops at that
node, so a failed all-reduce is the last thing the step does (no update runs with a gradient
that was never reduced).

Data out of range (an index, a computed class label): the native entry returns `t + 1` when
node `t` found some, before that node wrote anything (`index_kernels.py`); the driver then runs
that node's reference on its operands, still as they were, which raises the numpy backend's
own `DataError`, naming the user's line. Nothing was written into a caller's array: the driver
runs programs with such checks on private copies (`compiler.api.Program.__call__`).
"""
from __future__ import annotations

import ctypes
import os
import threading
import time

import numpy as np

from compiler.errors import InsufficientMemoryError
from compiler.ops import COMM_OPS
from runtime.arena import ArenaPool, compute, empty_aligned
from runtime.reference import run_node

from . import jit, pool
from .emitter import ModuleEmitter

_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_int64)
_FALLBACK = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p))
ALIGN = 64


def _aligned(nbytes: int) -> np.ndarray:
    # 2 MiB aligned and advised for huge pages from 2 MiB on (runtime.arena.empty_aligned)
    return empty_aligned(nbytes, ALIGN)


def _view(storage: np.ndarray, place) -> np.ndarray:
    """The ndarray for `place` over a uint8 buffer."""
    item = place.dtype.itemsize
    return np.ndarray(place.shape, place.dtype, buffer=storage, offset=place.offset * item,
                      strides=tuple(s * item for s in place.strides))


def _buffer_at(address: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(address))


class _ArenaState:
    """One arena of a program and the pointer tables of the calls that use it (filled in
    place: building ctypes arrays per call costs more)."""
    __slots__ = ("arena", "arena_ptr", "in_ptrs", "out_ptrs", "in_addr", "out_addr")

    def __init__(self, arena, n_in, n_out):
        self.arena, self.arena_ptr = arena, arena.ctypes.data
        self.in_ptrs = (ctypes.c_void_p * max(n_in, 1))()
        self.out_ptrs = (ctypes.c_void_p * max(n_out, 1))()
        self.in_addr = ctypes.addressof(self.in_ptrs)
        self.out_addr = ctypes.addressof(self.out_ptrs)


class CpuExecutable(ArenaPool):
    """A planned graph compiled to native code through llvmlite."""

    def __init__(self, graph, plan, sanitize: bool = False, opt: int = 3,
                 profile: bool = False):
        self.graph, self.plan, self.sanitize = graph, plan, sanitize
        emitter = ModuleEmitter(graph, plan, sanitize, name=graph.name, profile=profile)
        self._ticks = [] if profile else None
        self.source = emitter.ir_text          # the LLVM IR as emitted (readable)
        self.places = emitter.places
        self.fallback_nodes = emitter.fallback_nodes
        self._const_data = {k: np.frombuffer(bytes(d), np.uint8)
                             for k, d in emitter.const_data.items()}
        self._output_buffers = emitter.output_buffers
        # Threads a call may use (`set_threads`; the driver passes the `threads=` option);
        # the pool is compiled before a module that calls it is linked.
        self.parallel, self.threads = emitter.parallel, 1
        if self.parallel:
            pool.ensure(1)
        self._blas = any(name in emitter.module.globals for name in jit.BLAS_GEMM.values())
        self._compiled = jit.compile_ir(self.source, ["run"], opt=opt)
        self._entry = _ENTRY(self._compiled.address("run"))
        self._cb = _FALLBACK(self._fallback)
        self._cb_address = ctypes.cast(self._cb, ctypes.c_void_p).value
        self._out_sizes = [max(b.size, 1) for b in self._output_buffers]
        self._init_pool()
        self._sizes = self._buffer_sizes()
        self._errors: dict[int, BaseException] = {}  # a fallback's exception, per thread
        if "llvm-opt" in os.environ.get("COMPILER_DUMP", "").split(","):
            print(self.optimized_ir)  # (COMPILER_DUMP=llvm, in the pipeline, prints `source`)

    def set_threads(self, threads: int):
        """Run this program's parallel kernels on up to `threads` threads (1: all on the
        calling thread); results are the same for any value."""
        self.threads = int(threads)
        if self.parallel and self.threads > 1:
            pool.ensure(self.threads)

    @property
    def optimized_ir(self) -> str:
        """The LLVM IR after -O3 (for a disk-cache hit, optimised again when asked)."""
        return self._compiled.optimized_ir

    # -- the arena pool (ArenaPool): an aligned arena and its pointer tables ------------------
    def _make_arena(self):
        try:
            return _aligned(self.plan.arena_bytes)
        except MemoryError:
            raise InsufficientMemoryError(f"{self.graph.name}: can't allocate its arena of "
                                          f"{self.plan.arena_bytes} bytes") from None

    def _state(self, arena) -> _ArenaState:
        return _ArenaState(arena, len(self.graph.inputs), len(self._output_buffers))

    def _buffer_sizes(self) -> dict:
        sizes = {}
        for b in self.plan.buffers:
            if b.kind == "arena":
                sizes[("arena", b.id)] = b.size
        for j, b in enumerate(self._output_buffers):
            sizes[("output", j)] = b.size
        return sizes

    # -- the fallback callback (temporary gap: see emitter.FALLBACK_OPS) ----------------------
    def _fallback(self, t, ptrs):
        if t < 0:  # a profiling tick after node -1 - t
            self._ticks.append((-1 - t, time.perf_counter_ns()))
            return 0
        try:
            node = self.fallback_nodes[t]
            values = list(node.inputs) + [node.out]
            arrays = []
            for k, v in enumerate(values):
                place = self.places[id(v)]
                arrays.append(_view(self._storage_at(place.slot, ptrs[k]), place))
            if node.op in COMM_OPS:  # posts / completes the request on the planned memory
                compute(node, arrays[-1], arrays[:-1])
            else:
                np.copyto(arrays[-1], run_node(node, arrays[:-1]))
        except BaseException as e:  # re-raised by run() (the callback runs in its thread);
            self._errors.setdefault(threading.get_ident(), e)  # the entry stops at this node
            return 1
        return 0

    def _storage_at(self, slot, address):
        """The memory at `address`, the start of `slot` in this call (an arena buffer's start:
        the view may reach to the arena's end, as `arena[offset:]`)."""
        kind, k = slot
        if kind == "input":
            v = self.graph.inputs[k]
            return _buffer_at(address, v.size * v.dtype.itemsize)
        if kind == "arena":
            return _buffer_at(address, self.plan.arena_bytes - self._arena_offset(k))
        return _buffer_at(address, self._sizes[slot])

    def _arena_offset(self, buffer_id):
        return self.plan.buffers[buffer_id].offset

    def profile(self, inputs, repeat: int = 5) -> list[tuple[object, float]]:
        """(node, median seconds) per node that runs code, measured between the ticks a
        `profile=True` build makes after each node (a callback costs ~1 us: fine for spotting
        the expensive kernels, not for timing tiny ones)."""
        assert self._ticks is not None, "build with profile=True"
        runs = []
        for _ in range(repeat):
            self._ticks = []
            start = time.perf_counter_ns()
            self.run(inputs)
            prev, times = start, {}
            for t, ns in self._ticks:
                times[t] = (ns - prev) * 1e-9
                prev = ns
            runs.append(times)
        return [(self.graph.nodes[t], float(np.median([r[t] for r in runs])))
                for t in sorted(runs[0])]

    def _raise_data_error(self, node, arena, flat, outputs):
        """`node` found data out of range and stopped before writing: its reference, run on
        the same operands, raises the numpy backend's `DataError` (with the node's line)."""
        storage = {"input": flat, "output": outputs}
        arrays = []
        for v in node.inputs:
            place = self.places[id(v)]
            kind, k = place.slot
            if kind == "arena":
                buf = arena[self._arena_offset(k):]
            elif kind == "const":
                buf = self._const_data[k]
            else:
                buf = storage[kind][k]
            arrays.append(_view(buf, place))
        run_node(node, arrays)
        raise AssertionError(f"the native {node.op} at {node.loc} reported data out of range, "
                             "but its reference accepts it")

    # -- a call --------------------------------------------------------------------------------
    def run_held(self, inputs):
        """(outputs, mutations, held): a mutation's final value may lie in the call's arena,
        which no other call uses until `put_back(held)` (the driver copies it out first)."""
        graph = self.graph
        flat = []
        for v, a in zip(graph.inputs, inputs):
            assert a.flags.c_contiguous and a.dtype == v.dtype and a.shape == v.shape
            flat.append(a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8))
        held = _, state = self._take()
        try:
            outs, muts = self._run_on(state, inputs, flat)
        except BaseException:
            self.put_back(held)
            raise
        return outs, muts, held

    def _run_on(self, state, inputs, flat):
        graph = self.graph
        try:
            outputs = [_aligned(n) for n in self._out_sizes]
        except MemoryError:
            raise InsufficientMemoryError(f"{graph.name}: can't allocate its outputs "
                                          f"({self.plan.output_bytes} bytes)") from None
        in_ptrs, out_ptrs = state.in_ptrs, state.out_ptrs
        for k, a in enumerate(inputs):
            in_ptrs[k] = a.ctypes.data
        for k, o in enumerate(outputs):
            out_ptrs[k] = o.ctypes.data
        if self._blas:
            pool.blas_enter()
            try:
                status = self._entry(state.arena_ptr, state.in_addr, state.out_addr,
                                     self._cb_address, self.threads)
            finally:
                pool.blas_exit()
        else:
            status = self._entry(state.arena_ptr, state.in_addr, state.out_addr,
                                 self._cb_address, self.threads)
        if self._errors:  # (some thread's callback failed: this one's?)
            error = self._errors.pop(threading.get_ident(), None)
            if error is not None:
                raise error
        arena = state.arena
        if status:
            self._raise_data_error(graph.nodes[status - 1], arena, flat, outputs)

        def array_of(v):
            place = self.places[id(v)]
            kind, k = place.slot
            if kind == "input":
                storage = flat[k]
            elif kind == "output":
                storage = outputs[k]
            else:
                storage = arena[self._arena_offset(k):]
            return _view(storage, place)
        outs = [array_of(v) for v in graph.outputs]
        muts = {k: array_of(v) for k, v in graph.mutations.items()}
        return outs, muts
