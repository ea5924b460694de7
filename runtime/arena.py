"""The planned numpy executor: runs a program inside one preallocated arena.

Every value is an ndarray view of its buffer: arena buffers at their planned offsets, caller's
arrays for inputs (written only where the plan lets an op write into them: the program's own
mutations, and donated arguments), fresh arrays for returned buffers. Each op writes its result
straight into its planned place (its registry entry's `into`: `out=` for ufuncs, reductions,
matmul, ...; scratch memory in the workspace the plan placed for it), so the plan's bytes are
what a call uses: beyond the returned buffers it allocates only small objects. An elementwise
op without an `into` runs its reference in bounded chunks; an op of another kind without one
(conv2d, max_pool2d and their gradients, arange, mixed-dtype matmul) computes a temporary and
copies it, the one place a call allocates more than its plan. Each inplace decision is
honoured: the op's result lands in its input's memory (an elementwise op over an operand of
the identical layout, which NumPy allows), and a scatter into a dead base writes only the
touched region. With `sanitize=True` the arena starts as garbage and every buffer is
poisoned (all bytes 0xFF: NaN for floats, -1 for ints) right after its last use, so a plan that
lets two live values share memory produces a wrong answer instead of a lucky right one.
"""
from __future__ import annotations

import collections
import ctypes
import mmap
import os
import threading
import tracemalloc

import numpy as np

from compiler.errors import CompilerError, InsufficientMemoryError
from compiler.ir import type_str
from compiler.layout import apply_view
from compiler.ops import ELEMENTWISE, REGISTRY, SCATTER, VIEW, scratch_offsets, scratch_specs
from compiler.ops.shape_ops import numpy_index

from .reference import run_node, widened

POISON = 0xFF
# The generic elementwise path evaluates an op's reference on chunks of this many elements,
# so its temporaries stay a few of these whatever the array's size (4 KiB for float64; erf's
# reference, a Python function, makes object arrays of Python floats: ~33 KiB).
CHUNK = 512
# NumPy's ufuncs cast and gather awkwardly strided operands through buffers of this many
# elements per operand (8192 by default: ~100 KB for three float32 operands); 1024 keeps
# them small at no measurable cost.
UFUNC_BUFSIZE = 1024
# Arenas a program keeps for later calls: one per call running at once (threads), allocated
# when a call finds none idle; beyond this many idle ones an arena is dropped after its call.
POOL_LIMIT = 8
# A fast runner's answer (runtime.cpu.executable.FastRunner) when nothing ran: the driver's
# general path takes the call.
REFUSED = object()


class _ArenaState:
    """One arena of a program and the arrays that view it."""
    __slots__ = ("arena", "slot", "scratch")

    def __init__(self, arena, slot, scratch):
        self.arena, self.slot, self.scratch = arena, slot, scratch


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


# Calls that need less than this many new bytes skip the check: reading /proc/meminfo costs
# 20-60 us, a third of a small program's call on cpu, while an allocation this small that the
# OS refuses still raises MemoryError (-> InsufficientMemoryError) before anything is written
# (both executors allocate before they run). What the check is for, a plan bigger than the
# machine that overcommit would let through and the OOM killer end, is far above it. A program
# asks once: after a check passed, its calls need at most what was checked (ArenaPool).
CHECKED_BYTES = 64 << 20

# -- fresh memory on transparent huge pages ---------------------------------------------------
# A fresh buffer of HUGE_PAGE bytes or more (an output, an arena) starts on a 2 MiB boundary
# and is advised MADV_HUGEPAGE, so the kernel backs it with 2 MiB pages: a 64 MiB output then
# takes 32 page faults instead of 16,384 (or ~544 when only its unaligned head is left to
# 4 KiB pages), benchmarks/fresh_outputs.py. It is its own anonymous mapping (a `_Region`),
# rounded up to whole huge pages plus one for the alignment (address space only: untouched
# pages cost nothing), and reported to tracemalloc as NumPy reports its buffers, at its size,
# while the caller holds it, so that what a call allocates is still measurable
# (tests/runtime/test_plan_is_what_runs.py). Where transparent huge pages are off ("never")
# or missing, buffers are only ALIGNED (np.empty: glibc's malloc then keeps and reuses them).
#
# Regions are reused. A fresh mapping costs its page faults and the kernel zeroing every page
# on each call (add100's 4 MB output: ~0.5 ms of 3.6, all on the calling thread before the
# parallel kernel); glibc's malloc avoids that for blocks up to 32 MiB once its dynamic mmap
# threshold rises (it keeps freed blocks in its heap), which is what NumPy's and PyTorch's CPU
# buffers, malloc'd, get for free. So when the last view of a buffer goes, its region goes to a
# small per-process idle list instead of being unmapped, and the next fresh buffer of a size
# that fits takes it, already faulted and not zeroed. How:
# - Lifetime: the buffer is `np.asarray` of a `_Lease`, whose `__array_interface__` names the
#   region's memory: the array's base is the lease, so every view, slice, `np.asarray`,
#   buffer export (memoryview, ctypes) of it keeps the lease alive, and its `__del__` runs once
#   the last one is gone (an array kept forever keeps its region forever). A pickle or copy
#   holds the bytes, not the region.
# - Old contents never reach a result: a program writes every element of each value it
#   returns (small outputs come from np.empty, as garbage-filled as a reused region, and the
#   sanitizer fills arenas with 0xFF), so a reused region is as good as a fresh one; what the
#   caller can see beyond a returned view (its `.base`, the region's tail) is this process's
#   own earlier data, as np.empty's is. tests/runtime/test_fresh_outputs.py checks outputs that
#   kernels write piecewise (pad, scatter, concat) over regions left full of other values.
# - Bound: at most IDLE_ENTRIES regions and, after a region comes back, at most the larger of
#   IDLE_BYTES and that region's size in all (the least recently returned go first): beyond
#   IDLE_BYTES, only what the process just freed stays. Idle regions are faulted memory (they
#   count in the process's RSS). A request takes the smallest idle region of at least its
#   size and at most FIT times it (the most recently returned of equal ones: warmest).
# - Threads: the idle list is changed only under `_lock`, and `__del__` (which may run in any
#   thread, in the middle of anything, even of this code: a garbage collection) never waits
#   for it: it appends to `_returned` (atomic) and folds that into the idle list only when it
#   gets the lock at once; whoever holds the lock folds in what came back meanwhile before and
#   after it lets go. A request that finds the lock taken maps fresh memory (never blocks: a
#   signal handler's call can't deadlock with the code it interrupted).
# - Releasing: `ArenaPool.release()` (what `fn.clear_cache()` and the compiled function's
#   bound on idle arenas call) returns the idle regions to the OS too, and `trim()` does so
#   for the whole process; `idle_bytes()` says how much is held.
HUGE_PAGE = 2 << 20
ALIGNED = 64
IDLE_ENTRIES = 4
IDLE_BYTES = 64 << 20
FIT = 2
_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
_thp: list = []  # [mode]: read once per process, never per call
_TRACE_DOMAIN = getattr(np.lib, "tracemalloc_domain", 389047)  # NumPy's
_track = ctypes.pythonapi.PyTraceMalloc_Track
_track.argtypes, _track.restype = (ctypes.c_uint, ctypes.c_size_t, ctypes.c_size_t), ctypes.c_int
_untrack = ctypes.pythonapi.PyTraceMalloc_Untrack
_untrack.argtypes, _untrack.restype = (ctypes.c_uint, ctypes.c_size_t), ctypes.c_int
_tracing = tracemalloc.is_tracing


def _read_thp_mode() -> str:
    """The bracketed word of the sysfs file: "always", "madvise" or "never" ("never" where
    the file is missing or the mmap module can't advise)."""
    if not hasattr(mmap, "MADV_HUGEPAGE") or not hasattr(mmap.mmap, "madvise"):
        return "never"
    try:
        with open(_THP_ENABLED) as f:
            text = f.read()
        return text[text.index("[") + 1:text.index("]")]
    except (OSError, ValueError):
        return "never"


def thp_mode() -> str:
    if not _thp:
        _thp.append(_read_thp_mode())
    return _thp[0]


class _Region:
    """One anonymous mapping: `span` bytes from the 2 MiB-aligned `address` are usable; it is
    unmapped when the region is dropped (`raw` views the mapping, whose last reference it
    is)."""
    __slots__ = ("raw", "address", "span")

    def __init__(self, span: int):
        try:
            mm = mmap.mmap(-1, span + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as e:
            raise MemoryError(f"can't map {span} bytes: {e}") from None
        self.raw = np.frombuffer(mm, np.uint8)
        start = (-self.raw.ctypes.data) % HUGE_PAGE
        try:
            mm.madvise(mmap.MADV_HUGEPAGE, start, span)
        except OSError:
            pass  # refused: 4 KiB pages
        self.address, self.span = self.raw.ctypes.data + start, span


class _Lease:
    """The owner of one fresh buffer (the array's base): its region goes back to the idle list
    when the last view of the buffer is gone."""
    __slots__ = ("__array_interface__", "region")

    def __init__(self, region: _Region, nbytes: int):
        self.region = region
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (region.address, False)}

    def __del__(self):
        try:
            if _tracing():  # (untracking what was never tracked does nothing)
                _untrack(_TRACE_DOMAIN, self.region.address)
            _returned.append(self.region)
            _settle_if_free()
        except Exception:  # (interpreter shutdown: the module's globals may be gone)
            pass


_idle: list = []  # idle regions, least recently returned first (changed under _lock)
_returned = collections.deque()  # regions whose lease ended, not yet in _idle
_lock = threading.Lock()


def _settle(dropped: list) -> None:
    """Under `_lock`: move the returned regions into the idle list, then drop (into
    `dropped`, unmapped by the caller after it lets go of the lock) what the bound excludes."""
    while _returned:
        region = _returned.popleft()
        _idle.append(region)
        limit = max(IDLE_BYTES, region.span)
        total = sum(r.span for r in _idle)
        while _idle and (len(_idle) > IDLE_ENTRIES or total > limit):
            old = _idle.pop(0)
            total -= old.span
            dropped.append(old)


def _settle_if_free() -> None:
    # (the check after each release: a region returned while this thread held the lock)
    while _returned and _lock.acquire(blocking=False):
        dropped: list = []
        try:
            _settle(dropped)
        finally:
            _lock.release()
        del dropped  # unmapped here, outside the lock


def _reuse(span: int) -> _Region | None:
    """The smallest idle region of `span` to FIT * `span` bytes, taken off the list (None:
    none, or the list is busy)."""
    if not (_idle or _returned) or not _lock.acquire(blocking=False):
        return None
    dropped: list = []
    best = None
    try:
        _settle(dropped)
        for k in range(len(_idle) - 1, -1, -1):  # (the most recently returned first)
            r = _idle[k]
            if span <= r.span <= FIT * span and (best is None or r.span < _idle[best].span):
                best = k
        if best is not None:
            best = _idle.pop(best)
    finally:
        _lock.release()
    del dropped
    _settle_if_free()
    return best


def idle_bytes() -> int:
    """Bytes of fresh-buffer regions held idle for reuse in this process (mapped, faulted)."""
    return sum(r.span for r in list(_idle) + list(_returned))


def trim() -> int:
    """Unmap the idle regions (returns their bytes): the memory goes back to the OS; later
    fresh buffers map new memory until some are returned again."""
    with _lock:
        dropped: list = []
        _settle(dropped)
        dropped += _idle
        _idle.clear()
    freed = sum(r.span for r in dropped)
    del dropped
    return freed


def _after_fork_in_child():
    # A thread of the parent may have held the lock at the fork; the regions are the child's
    # own copies (private mappings), still reusable.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _on_huge_pages(nbytes: int) -> np.ndarray:
    span = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    region = _reuse(span) or _Region(span)
    out = np.asarray(_Lease(region, nbytes))
    if _tracing():  # (tracemalloc counts what is allocated while it traces: 1-2 us saved)
        _track(_TRACE_DOMAIN, region.address, nbytes)
    return out


def empty_aligned(nbytes: int, align: int = ALIGNED) -> np.ndarray:
    """A fresh uint8 array of `nbytes`, its start aligned to `align` bytes; from HUGE_PAGE
    bytes on (where the OS has transparent huge pages) aligned to HUGE_PAGE and advised for
    huge pages, possibly a region an earlier buffer used (see above: its contents are
    arbitrary, as np.empty's). Raises MemoryError as np.empty does."""
    if nbytes >= HUGE_PAGE and thp_mode() != "never":
        return _on_huge_pages(nbytes)
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


def check_memory(plan, arena_allocated: bool, loc=None) -> None:
    """Raise `InsufficientMemoryError` before a call that can't get the memory its plan needs:
    the arena (on the first call) and the returned buffers."""
    need = plan.output_bytes + (0 if arena_allocated else plan.arena_bytes)
    if need < CHECKED_BYTES:
        return
    available = available_memory()
    if available is not None and need > available:
        raise InsufficientMemoryError(
            f"{plan.graph_name} needs {need} B ({need / 2**30:.1f} GiB: arena "
            f"{plan.arena_bytes} B, outputs {plan.output_bytes} B) but only {available} B "
            f"({available / 2**30:.1f} GiB) are available; nothing was allocated or written",
            loc)


def contiguous_arguments(run_arrays, arrays, names, executable, loc=None) -> None:
    """Put a row-major copy of each non-contiguous argument `arrays[k]` in `run_arrays[k]` (the
    trace took every input as a row-major buffer), once the copies are known to fit beside what
    the plan needs: a zero-stride `np.broadcast_to` argument's copy is its full size, which the
    plan never counted. Refused with `InsufficientMemoryError` naming the argument and the
    bytes before any copy is made (nothing is allocated to find out)."""
    copies = [k for k, a in enumerate(arrays) if not a.flags.c_contiguous]
    if not copies:
        return
    need = sum(arrays[k].nbytes for k in copies)
    if need >= CHECKED_BYTES:
        plan = getattr(executable, "plan", None)
        if plan is not None:
            need += plan.output_bytes  # every backend returns its outputs in fresh host arrays
            if getattr(executable, "arena_on_host", False) and not executable.idle_arena_bytes():
                need += plan.arena_bytes  # (this call allocates an arena of its own)
        available = available_memory()
        if available is not None and need > available:
            what = "; ".join(f"argument '{names[k]}' ({type_str(a.shape, a.dtype)}, strides "
                             f"{a.strides}) is not contiguous: its row-major copy needs "
                             f"{a.nbytes} B" for k in copies for a in (arrays[k],))
            raise InsufficientMemoryError(
                f"{what}; with the plan's memory the call needs {need} B "
                f"({need / 2**30:.1f} GiB) but only {available} B ({available / 2**30:.1f} GiB) "
                "are available; nothing was allocated or written", loc)
    for k in copies:
        try:
            run_arrays[k] = np.ascontiguousarray(arrays[k])
        except MemoryError:
            a = arrays[k]
            raise InsufficientMemoryError(
                f"argument '{names[k]}' ({type_str(a.shape, a.dtype)}, strides {a.strides}) is "
                f"not contiguous and its row-major copy of {a.nbytes} B could not be allocated; "
                "nothing was written", loc) from None


class ArenaPool:
    """The arenas of one program, one per call running at once (a base of the numpy and cpu
    executables). A call takes an idle arena (`_take`, a new one when none is idle) and keeps
    it until `put_back`, so concurrent calls share no memory but their inputs; at most
    POOL_LIMIT idle arenas are kept. A subclass says how an arena is made (`_make_arena`) and
    what it keeps beside it (`_state`: views, pointer tables), made once per arena."""

    arena_on_host = True  # (its arena counts against the host's memory; the gpu's does not)

    def _init_pool(self):
        self._free: list = []  # the pool: idle arenas' states, at most POOL_LIMIT
        self._arena = None
        self._memory_checked = False  # a call's memory check passed (see check_memory)

    arena = property(lambda self: self._arena, lambda self, a: self._adopt(a),
                     doc="The program's first arena (None before the first call and after "
                         "`release()`); concurrent calls take further ones from the pool.")

    def _adopt(self, arena):
        self._arena, self._free = arena, ([] if arena is None else [self._state(arena)])

    def release(self) -> None:
        """Drop the idle arenas (a call in flight keeps its own, which is then dropped as it
        ends) and unmap the process's idle fresh-buffer regions (`trim`: an arena's goes there
        first); the next call allocates a new one."""
        self._arena, self._free = None, []
        trim()

    def idle_arena_bytes(self) -> int:
        return len(self._free) * self.plan.arena_bytes

    def check_memory(self, loc=None):
        """Raise `InsufficientMemoryError` before a call that can't get its memory (the
        driver calls this before anything is allocated or written). Once a check passed, the
        program's calls need at most what it checked (the arena and the outputs): later
        calls skip it (no /proc read per call), and an allocation the OS refuses then still
        raises InsufficientMemoryError before anything runs."""
        if not self._memory_checked:
            check_memory(self.plan, bool(self._free), loc)  # small calls skip the read
            self._memory_checked = True

    def _new_state(self):
        """A new arena for a call (the first one is `self.arena`)."""
        state = self._state(self._make_arena())
        if self._arena is None:
            self._arena = state.arena
        return state

    def _allocate(self):
        """A new arena, idle in the pool."""
        state = self._new_state()
        self._free.append(state)
        return state

    def _take(self):
        """(the pool, an arena's state) for one call, to hand to `put_back` when it ends."""
        free = self._free
        try:  # (list.pop and append are atomic: two threads never get one arena)
            return free, free.pop()
        except IndexError:
            return free, self._new_state()

    @staticmethod
    def put_back(held) -> None:
        """Return a call's arena to the pool it came from (after `release()` that pool is
        gone, and the arena with it); the pool keeps at most POOL_LIMIT."""
        free, state = held
        if len(free) < POOL_LIMIT:
            free.append(state)

    def run(self, inputs):
        """(outputs, mutations) of a call; the arena goes back to the pool."""
        outs, muts, held = self.run_held(inputs)
        self.put_back(held)
        return outs, muts


class ArenaExecutable(ArenaPool):
    """Runs a planned graph. Building one allocates nothing: the arena is allocated by the
    first call (so `fn.lower(...)` of a program bigger than the machine can be inspected).
    Calls may run at once from several threads: each takes an arena of its own from the
    program's pool (a new one when none is idle), so they share no memory but the inputs."""

    def __init__(self, graph, plan, sanitize: bool = False):
        self.graph, self.plan, self.sanitize = graph, plan, sanitize
        self.source = ""
        self._ops = [REGISTRY[n.op] for n in graph.nodes]
        # Buffers to poison after each node (sanitizer): arena buffers whose life ends there.
        self._dies_after: dict[int, list] = {}
        for b in plan.buffers:
            if b.kind == "arena" and b.size:
                self._dies_after.setdefault(b.end, []).append(b)
        self._init_pool()

    # -- the arena pool (ArenaPool): an arena and the arrays that view it ----------------------
    def _make_arena(self):
        return empty_aligned(self.plan.arena_bytes)

    def _state(self, arena) -> "_ArenaState":
        """The arrays that view `arena` (made once per arena: a call creates none)."""
        plan = self.plan
        slot, scratch = {}, {}
        for t, node in enumerate(self.graph.nodes):
            if self._ops[t].kind == VIEW:
                continue
            b = plan.buffer_of[node.out]
            if b.kind == "arena" and node not in plan.reuse:
                # (a gradient packed into a bucket lies at its slot's offset there)
                slot[t] = np.ndarray(node.out.shape, node.out.dtype, buffer=arena,
                                     offset=b.offset + plan.packed.get(node.out, 0))
            # (a node running in place over its input needs its scratch too: a fused body)
            if self._ops[t].scratch is not None:
                ws = plan.workspace.get(node)  # (none when every scratch array is empty)
                specs = scratch_specs(node)
                offsets, _ = scratch_offsets(specs)
                scratch[t] = [
                    np.empty(shape, dtype) if ws is None else
                    np.ndarray(shape, dtype, buffer=arena, offset=ws.offset + o)
                    for (shape, dtype), o in zip(specs, offsets)]
        return _ArenaState(arena, slot, scratch)

    def _fresh(self, value, buffer, outputs_storage):
        # A returned buffer: allocated per call, shared by the values that live in it.
        storage = outputs_storage.get(id(buffer))
        if storage is None:
            storage = outputs_storage[id(buffer)] = empty_aligned(buffer.size)
        return np.ndarray(value.shape, value.dtype, buffer=storage, offset=0)

    def run_held(self, inputs):
        """(outputs, mutations, held): a mutation's final value may lie in the call's arena,
        which no other call uses until `put_back(held)` (the driver copies it out first)."""
        graph = self.graph
        held = free, state = self._take()
        try:
            if self.sanitize:
                state.arena.fill(POISON)
            arrays: dict[int, np.ndarray] = {}
            for v, arr in zip(graph.inputs, inputs):
                arrays[id(v)] = arr
            outputs_storage: dict[int, np.ndarray] = {}
            bufsize = np.setbufsize(UFUNC_BUFSIZE)  # (NumPy keeps it per thread)
            try:
                self._run_nodes(state, arrays, outputs_storage)
            finally:
                np.setbufsize(bufsize)
        except BaseException:
            self.put_back(held)
            raise
        outs = [arrays[id(v)] for v in graph.outputs]
        muts = {k: arrays[id(v)] for k, v in graph.mutations.items()}
        return outs, muts, held

    def _run_nodes(self, state, arrays, outputs_storage):
        graph, plan, slot, arena = self.graph, self.plan, state.slot, state.arena
        with np.errstate(all="ignore"):
            for t, node in enumerate(graph.nodes):
                op = self._ops[t]
                args = [arrays[id(v)] for v in node.inputs]
                if op.kind == VIEW:
                    view = apply_view(args[0], node.op, node.attrs)
                    assert view is not None, f"plan bug: {node} is not a view of its input"
                    arrays[id(node.out)] = view
                    continue
                taken = plan.reuse.get(node)
                if taken is None:
                    dest = slot[t] if t in slot else \
                        self._fresh(node.out, plan.buffer_of[node.out], outputs_storage)
                    compute(node, dest, args, state.scratch.get(t))
                elif op.kind == SCATTER:
                    dest = args[0]  # in place: write only the touched region
                    region = dest[numpy_index(node.attrs["index"])]
                    src = args[1]
                    if not (region.ctypes.data == src.ctypes.data
                            and region.strides == src.strides):
                        region[...] = src  # (skipped when the op already wrote it there)
                else:
                    dest = args[taken]
                    compute(node, dest, args, state.scratch.get(t))
                arrays[id(node.out)] = dest
                if self.sanitize:
                    for b in self._dies_after.get(t, ()):
                        arena[b.offset:b.offset + b.size] = POISON


def compute(node, dest: np.ndarray, args: list[np.ndarray], scratch=None) -> None:
    """Write `node`'s result into `dest` (its planned place: an array of the node's shape and
    dtype, or for an inplace decision the operand it takes), bit-identical to the reference
    interpreter. `scratch`: the arrays of the node's workspace, when its op declares one."""
    op = REGISTRY[node.op]
    if widened(node, args) is not None:  # a 16-bit float: float32 math, one rounding
        np.copyto(dest, run_node(node, args))
        return
    try:
        if op.into is not None:
            kw = node.attrs if scratch is None else {**node.attrs, "scratch": scratch}
            if op.into(dest, *args, **kw) is not NotImplemented:
                return
        if op.kind == ELEMENTWISE:
            if dest.size:
                _chunked(op.ref, dest, args, node.attrs)
            return
    except CompilerError as e:  # a data check (a label out of range): name the user's line
        if e.loc is not None:
            raise
        raise type(e)(e.bare_message, node.loc) from None
    np.copyto(dest, run_node(node, args))  # no `into`: a temporary, then a copy


def _chunked(ref, dest, args, attrs):
    """An elementwise op's reference evaluated chunk by chunk into `dest`: the operands,
    broadcast to `dest`'s shape, in pieces of at most CHUNK elements (an operand that overlaps
    `dest` does so element for element, so each piece is read before it is written)."""
    it = np.nditer(args + [dest], flags=["external_loop", "buffered", "zerosize_ok"],
                   op_flags=[["readonly"]] * len(args) + [["writeonly"]],
                   buffersize=CHUNK, order="K")
    with it:
        for pieces in it:
            pieces[-1][...] = ref(*pieces[:-1], **attrs)
