"""Lowering a planned graph to one LLVM module with one entry function.

    i64 run(i8* arena, i8** inputs, i8** outputs, i64 (*fallback)(i64 node, i8** ptrs),
            i64 threads)

`run` executes the whole schedule: for each node, in the plan's order, it calls that node's
kernel with one pointer per distinct buffer the node touches (the arena at the buffer's
planned offset, a caller's input, a per-call output buffer, or a module constant). So:

  - a call crosses from Python to native code once;
  - an in-place kernel (the plan's reuse: output and input in one buffer) takes that buffer
    as ONE pointer and reads and writes it through the same layout; distinct buffers are
    distinct parameters marked `noalias`, which the plan proves: this is what lets LLVM
    vectorise without runtime overlap checks (LLVM otherwise adds runtime overlap checks
    or gives up on an in-place loop);
  - shapes, strides and offsets are compile-time constants (the program is specialised for
    one signature), so every index is affine in the loop counters;
  - views emit no code: they are places (`runtime/lowering/places.py`);
  - it returns 0, or `t + 1` when node `t` found data out of range (an index, a computed
    label: `index_kernels.py`) and stopped before writing anything; the driver then raises
    the numpy backend's `DataError` for that node. A fallback node whose callback returns
    nonzero (it raised: a failed all-reduce) stops the run the same way, and the driver
    re-raises the callback's exception.

Kernels by family (`LOWERING`, from the table in `runtime/lowering/families.py`;
`FALLBACK_OPS` is the explicit list of ops that call back into the numpy reference through
`fallback`: the communication ops, and the mechanism lets an op added to the registry before
its kernel work on cpu, visibly, instead of failing). The kernels live in mixins of
`ModuleEmitter`, one module per group: issue 10's scans, gathers, scatters and
min/prod/argmax/argmin in `index_kernels.py`, matmul and gemm in `gemm_kernels.py`, softmax,
conv and pooling in `window_kernels.py`, argsort (a stable merge sort) in `sort_kernels.py`;
elementwise, reductions, copies and regions here:

  - elementwise: the registry's scalar expression (`expr_for`) rendered per element
    (`scalar.Renderer`), over the output shape with broadcast operands (stride 0); dimensions
    that are contiguous in every operand are merged first, so a contiguous op is one loop;
  - reductions (sum, mean, max over any axes, keepdim): when a reduced dim is innermost in
    memory, a loop nest over the kept dims and a register accumulator over the reduced ones:
    float64 for float32 and 16-bit float sums (one rounding at the end, well inside the 1e-5
    tolerance) with `reassoc` so the accumulation vectorises; when the kept dims are innermost
    (a bias gradient), the output accumulates row by row (numpy's own order), contiguous and
    vectorised (not into a 16-bit float output: those keep the register accumulator);
  - matmul: numpy's OpenBLAS `cblas_?gemm` (64-bit ints), transposed operands as BLAS flags,
    batch loops over broadcast batch dims, and a batch that is contiguous with the rows of a
    2-D right operand folded into one GEMM; integer or non-BLAS layouts get a generated loop;
  - concat, slice_scatter (in place: only the region is written), one_hot, softmax,
    log_softmax, max_pool2d and its gradient, conv2d and both its gradients: direct loops;
  - creation: `full` is a fill loop; `constant` and `arange` (known at compile time) are module
    globals copied into their buffer (each call: a later op may write over them in place).

Parallel kernels (`_kernel(..., split=(n, work))`, the pool in `pool.py`): a kernel whose
work is at least PARALLEL_MIN_WORK has its outermost loop (extent n) cut into chunks, fixed
by the shape (`chunking`), that `inplace_parallel_for` runs on up to `threads` threads:
elementwise (and fused) loops, reductions (rows; a full reduction sums fixed chunks into
partials, then the partials in order; the bias-gradient reduction by column blocks), softmax
and log_softmax rows, cumsum rows, max_pool2d and its gradient (batch rows), conv2d and its
gradients (output channels), and BLAS matmul and gemm (batches, or row or column blocks of
one GEMM). Which thread runs a chunk never changes what it computes: results are
bit-identical for any `threads`. A fresh output's huge pages fault when a chunk first
stores into them, on the thread running it (`_first_touch`, off by default, would touch
them all on the calling thread first). Not parallel yet: copies (concat, slice_scatter,
constants), checked index kernels (gathers, scatters: their status return), min/prod/arg*,
generated matmul loops.

Identical kernels once (`_unique`, `DEDUPE`): a kernel (and a parallel kernel's `.chunk` and
`.after` functions) whose IR is the same as an earlier one's but for names (the function's,
its parameters', which name the node's buffers, and its loops' metadata nodes, numbered
module-wide) is not added: the node calls the earlier one. Shapes, strides, offsets, dtypes
and attributes are constants in the body, so equal text is equal code; every layer of a stack
shares its kernels, and LLVM optimises and compiles each distinct body once (a 24-layer MLP
step: 322 kernels -> 31, `benchmarks/compile_scaling.py --mlp`). The first node's name stays
(`k<t>_<op>`). Elementwise and fused kernels are also keyed before they are emitted
(`_elementwise_key`), so a repeated body is not even built again (a 20k-op chain: 7.2 -> 3.8 s);
so are matmul, gemm, reductions and softmax rows (`_node_key`: op, attributes, places; a
24-layer MLP's emission 0.15 -> 0.05 s CPU).

Sanitizer (`sanitize=True`): the entry fills the arena with 0xFF first, and after each node it
stores 0xFF over every arena buffer whose live interval ends there (`plan.buffers[*].end`), the
same program points as the numpy arena executor: a wrong plan gives a wrong (NaN) answer.
"""
from __future__ import annotations

import re

import numpy as np
from llvmlite import ir

from compiler.ops import ELEMENTWISE, REGISTRY, SCATTER, VIEW
from compiler.ops.registry import compute_dtype, dkind, is_half, normalize_axes
from compiler.ops import scalar as S
from compiler.ops.elementwise import expr_for
from compiler.ops.fused import expr_cost
from passes.cse import _NoKey, attr_key

from runtime.lowering import families as F
from runtime.lowering.layout import broadcast_strides, collapse
from runtime.lowering.places import Place, buffer_slots, compute_places, contiguous_strides

from . import jit
from .gemm_kernels import GemmKernels
from .index_kernels import IndexKernels
from .sort_kernels import SortKernels
from .window_kernels import WindowKernels
from .loops import Split, elem_ptr, for_range, i64, index, interleave_hint, loop_nest
from .scalar import (I1, I8, I64, Renderer, constant, convert, ll_type, load, mem_type,
                     select_max, store, store_as)

PTR = ir.PointerType()
POISON = 0xFF
# Elementwise loops whose body costs at least this many scalar operations (fused chains) are
# interleaved INTERLEAVE times: several independent vectors in flight hide the latency of a
# dependent chain (measured: 100 fused additions, [1000, 1000] float32, see benchmarks).
INTERLEAVE_MIN_COST = 8
INTERLEAVE = 4
# ...except a body of this cost or more on a loop too short for INTERLEAVE full vectors
# (`_interleave_fits`: compile time, measured).
INTERLEAVE_MAX_SHORT_COST = 160

# Parallel kernels. Work is counted in element operations (an element of a loop times its
# body's cost). Below PARALLEL_MIN_WORK a kernel stays serial: 128k additions are ~30 us on
# one core, about what waking a sleeping worker (a futex wake, then the scheduler) may cost.
# PROVISIONAL: `benchmarks/parallel_loops.py --grain` measures the crossover, but only on a
# machine no other session keeps busy (on the shared one it was written on, 2 threads never
# got more than one session's share of the cores). Above it, chunks of about GRAIN work, at
# most MAX_CHUNKS of them (enough to balance 2-16 threads, few enough that a full
# reduction's partials fit in SCRATCH_SLOTS).
PARALLEL_MIN_WORK = 1 << 17
GRAIN = 1 << 15
MAX_CHUNKS = 64
ROW_COST = 8        # work per element of a softmax row (max, exp, sum, divide)
CTX_SLOTS = 16      # pointers a parallel kernel may take (its distinct buffers, + scratch)
SCRATCH_SLOTS = MAX_CHUNKS
# Fresh outputs of TOUCH_BYTES or more (those on 2 MiB pages: runtime.arena.HUGE_PAGE) are
# touched once per TOUCH_STRIDE by the calling thread before a parallel kernel writes them
# in calls on TOUCH_MIN_THREADS threads or more (`_first_touch`); None: never (the default,
# measured: see there). `benchmarks/fresh_outputs.py` compares it with 1 in one column.
TOUCH_BYTES = TOUCH_STRIDE = 2 << 20
TOUCH_MIN_THREADS = None
# Kernels whose IR is identical but for their names (every layer of a stack: same shapes,
# strides, dtypes and attributes) are emitted once per module and called from every node
# that needs one, so LLVM optimises and compiles each distinct body once (`_unique`).
# False: one function per node (the tests compare both builds).
DEDUPE = True
# An entry that runs at least this many nodes is not optimised (`optnone`: LLVM's fast
# instruction selection and register allocation): it is a straight list of kernel calls that
# -O3 gains nothing measurable on, and it was the most expensive function of a deep
# model's module (24-layer MLP: 0.08 of 0.38 s of LLVM -> 0.03). A small program's entry
# keeps -O3 (its call is the per-call overhead of a tiny program).
ENTRY_OPTNONE_MIN_NODES = 64
# ...and such an entry is cut into basic blocks of this many nodes: one block of thousands
# of calls made instruction selection superlinear (1,000-step loop with backward, 2,089
# calls: the module's LLVM time 1.13 s at -O3, 1.33 unoptimised in one block, 0.72 in
# blocks of 32).
ENTRY_BLOCK_NODES = 32
# Effort by kernel size: a serial elementwise, copy or one_hot kernel of less than TINY_WORK
# element operations is compiled for size (`minsize optsize`: scalar, not vectorised or
# unrolled) when all such kernels together are at most 1/TINY_SHARE of the module's work (a
# deep model's loss and bias kernels beside its GEMMs: 24-layer MLP, ~0.1 s less LLVM, the
# step's time unchanged). A module made of small kernels keeps -O3 (x * 2 + 1 on 1,000
# floats: 5.1 us a call at -O3, 6.3 us scalar), and so do reductions and softmax rows,
# whose `reassoc` sums would add in another order unvectorised (other bits).
TINY_WORK = 2048
TINY_SHARE = 100
TINY_ATTRS = ("optsize", "minsize")
_MD_REF = re.compile(r"!(\d+)\b")


def chunking(n: int, work: float):
    """(per, chunks) cutting a loop of `n` iterations of `work` each, or None: serial. Fixed
    by the shape alone (never by the thread count: that is what keeps results identical)."""
    total = n * work
    if n < 2 or total < PARALLEL_MIN_WORK:
        return None
    chunks = int(min(n, MAX_CHUNKS, max(2, total // GRAIN)))
    per = -(-n // chunks)
    return per, -(-n // per)

# Ops that run through the numpy reference via the fallback callback, explicit (a test pins
# this set). Everything else is native. Data-parallel communication (issue 12): mpi4py posts
# and completes the all-reduce on the bucket's arena memory from the callback (the entry is
# not split; see executable.py).
FALLBACK_OPS: frozenset = F.ops_of(F.COMMUNICATION)
# Kernels that accumulate in their output's memory, which in a 16-bit float would round every
# partial sum: on those dtypes these ops run the numpy reference (float32, rounded once)
# through the same callback until they get a float32 accumulator of their own.
HALF_FALLBACK_OPS = frozenset({"conv2d", "conv2d_grad_input", "max_pool2d_grad"})


# -- the module ---------------------------------------------------------------------------
class ModuleEmitter(IndexKernels, GemmKernels, WindowKernels, SortKernels):
    """Builds the module for one planned graph. `ir_text` is the result."""

    def __init__(self, graph, plan, sanitize: bool = False, name: str = "program",
                 profile: bool = False):
        self.graph, self.plan, self.sanitize = graph, plan, sanitize
        self.profile = profile  # tick the fallback callback with -1 - t after each node
        self.places = compute_places(graph, plan)
        self.slots, self.output_buffers = buffer_slots(graph, plan)
        self.arena_offset = {b.id: b.offset for b in plan.buffers if b.kind == "arena"}
        self.fallback_nodes: dict[int, object] = {}
        self.checked_while_running = {c.node for c in getattr(graph, "data_checks", ())
                                      if c.input_index is None}
        self.module = ir.Module(name=name)
        self.module.triple = jit.host_triple()
        self.module.data_layout = jit.target_data()
        self.blas_ok = jit.has_blas()
        self._consts = 0
        self._bodies: dict[str, ir.Function] = {}  # normalised IR -> its first function
        # Before emission (`_elementwise_key`): a kernel's key -> how to call the function
        # emitted for it, and an elementwise key -> (cost, split).
        self._by_key: dict = {}
        self._costs: dict = {}
        # Effort by kernel size (TINY_WORK): the module's work, the small kernels' functions
        # (in order) and their work, counted per call.
        self._work = self._tiny_work = 0
        self._tiny: dict = {}
        self.const_data: dict[int, bytearray] = {}
        self._emit_entry()
        self.ir_text = str(self.module)

    # -- entry ------------------------------------------------------------------------------
    def _emit_entry(self):
        cb_type = ir.FunctionType(I64, [I64, PTR])
        fn = ir.Function(self.module, ir.FunctionType(I64, [PTR, PTR, PTR, PTR, I64]), "run")
        arena, ins, outs, cb, self.threads_arg = fn.args
        for a, n in zip(fn.args, ("arena", "inputs", "outputs", "fallback", "threads")):
            a.name = n
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.entry_builder = b
        self.parallel = False      # some kernel calls inplace_parallel_for
        self._touched: set = set()  # output slots touched before a parallel kernel
        self._ctx = self._scratch = None
        self._slot_ptr: dict = {}

        def slot_ptr(slot):
            if slot not in self._slot_ptr:
                kind, k = slot
                if kind == "arena":
                    p = b.gep(arena, [i64(self.arena_offset[k])], inbounds=True,
                              source_etype=I8)
                elif kind == "const":
                    p = self._const_globals[k]
                else:
                    table = ins if kind == "input" else outs
                    p = b.load(b.gep(table, [i64(k)], source_etype=PTR), typ=PTR,
                               name=f"{kind}{k}")
                self._slot_ptr[slot] = p
            return self._slot_ptr[slot]
        self.slot_ptr = slot_ptr
        self._const_globals = {}

        if self.sanitize and self.plan.arena_bytes:
            self._memset(b, arena, self.plan.arena_bytes)
        dies_after: dict[int, list] = {}
        for buf in self.plan.buffers:
            if buf.kind == "arena" and buf.size:
                dies_after.setdefault(buf.end, []).append(buf)
        emitted = 0
        for t, node in enumerate(self.graph.nodes):
            kind = REGISTRY[node.op].kind
            # (a checked node runs on an empty output too: its indices may still be bad)
            if kind != VIEW and (node.out.size > 0 or self._checked(node)):
                self._emit_node(t, node, cb, cb_type)
                emitted += 1
                if emitted >= ENTRY_OPTNONE_MIN_NODES and emitted % ENTRY_BLOCK_NODES == 0:
                    b.branch(fn.append_basic_block(f"after{t}"))
                    b.position_at_end(fn.blocks[-1])
                if self.profile:
                    b.call(_Callee(cb, cb_type), [i64(-1 - t), ir.Constant(PTR, None)])
            if self.sanitize:
                for buf in dies_after.get(t, ()):
                    self._memset(b, slot_ptr(("arena", buf.id)), buf.size)
        b.ret(i64(0))
        if self._tiny and self._tiny_work * TINY_SHARE <= self._work:
            for f in self._tiny:
                for a in TINY_ATTRS:
                    f.attributes.add(a)
        if emitted >= ENTRY_OPTNONE_MIN_NODES:
            fn.attributes.add("noinline")  # (LLVM requires it beside optnone)
            fn.attributes.add("optnone")

    def _memset(self, b, ptr, size):
        fn = self.module.globals.get("llvm.memset.p0.i64") or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [PTR, I8, I64, I1]),
            "llvm.memset.p0.i64")
        b.call(fn, [ptr, ir.Constant(I8, POISON), i64(size), ir.Constant(I1, 0)])

    def _emit_node(self, t, node, cb, cb_type):
        op = node.op
        opdef = REGISTRY[op]
        if node in self.plan.reuse and opdef.kind not in (ELEMENTWISE, SCATTER) \
                and self.plan.reuse[node] not in opdef.overwrites:
            raise NotImplementedError(f"the plan runs {op} in place; the cpu backend only "
                                      "writes elementwise ops and scatters over an input")
        if op in FALLBACK_OPS or (op in HALF_FALLBACK_OPS and is_half(node.out.dtype)):
            self._emit_fallback(t, node, cb, cb_type)
            return
        lower = LOWER_BY_FAMILY.get(F.family_of(op))
        if lower is None:
            raise NotImplementedError(f"no cpu kernel for {op} ({opdef.kind})")
        out = self.places[id(node.out)]
        ins = [self.places[id(v)] for v in node.inputs]
        kern = self._index_kernel(node)
        if kern is not None:  # index_kernels.py (scans, gathers, scatters, min/prod/arg*)
            self._kernel(t, node, [out] + ins, lambda b, p: kern(b, p, node, out, *ins),
                         checked=self._checked(node), split=self._index_split(node, out, ins))
            return
        lower(self, t, node, out, ins)

    # -- one method per kernel family (LOWER_BY_FAMILY) ---------------------------------------
    def _lower_elementwise(self, t, node, out, ins):
        pow2 = _pow2_divisors(node)
        key = _elementwise_key(node, [out] + ins) if DEDUPE else None
        key = key if key is None or not pow2 else key + (pow2,)
        cost = self._costs.get(key)
        if cost is None:  # (a known key: the kernel is called, never emitted or costed again)
            strides = [out.strides] + [broadcast_strides(p, out.shape) for p in ins]
            shape, _ = collapse(out.shape, strides)
            cost = max(expr_cost(self._expr(node, out, ins)), 1) if node.op != "full" else 1
            cost = (cost, _outer_split(shape, cost))
            if key is not None:
                self._costs[key] = cost
        self._kernel(t, node, [out] + ins, lambda b, p: self._elementwise(
            b, p, node, out, ins, pow2), split=cost[1], key=key, tiny_ok=True)

    def _lower_reduction(self, t, node, out, ins):
        x = ins[0]
        key = _node_key(node, [out, x]) if DEDUPE else None
        if key in self._by_key:  # (the kernel is called, never emitted again)
            self._kernel(t, node, [out, x], None, key=key)
            return
        kshape, rshape, outer = self._reduce_shapes(node, out, x)
        count = int(np.prod(rshape, dtype=np.int64)) if rshape else 1
        emit = lambda b, p: self._reduce(b, p, node, out, x)  # noqa: E731
        if not kshape and rshape:  # a full reduction: partial sums of fixed chunks
            if self._kernel(t, node, [out, x], lambda b, p: self._reduce_chunk(
                    b, p, node, out, x, rshape), split=_outer_split(rshape, 1), scratch=True,
                    after=lambda b, p: self._reduce_combine(b, p, node, out, x, rshape),
                    key=key):
                return
            self._kernel(t, node, [out, x], emit, key=key)
        elif outer:  # column blocks of the kept dims: each column's order is unchanged
            self._kernel(t, node, [out, x], emit, split=(kshape[0], int(np.prod(
                kshape[1:], dtype=np.int64)) * count), key=key)
        else:
            self._kernel(t, node, [out, x], emit, split=_outer_split(kshape, count), key=key)

    def _lower_gemm(self, t, node, out, ins):
        key = _node_key(node, [out] + ins) if DEDUPE else None
        if key in self._by_key:
            self._kernel(t, node, [out] + ins, None, key=key)
        elif node.op == "gemm":
            self._kernel(t, node, [out] + ins, lambda b, p: self._gemm(b, p, node, out, *ins),
                         split=self._gemm_split(node, out, *ins), key=key)
        else:
            self._kernel(t, node, [out] + ins, lambda b, p: self._matmul(b, p, out, *ins),
                         split=self._matmul_split(out, *ins), key=key)

    def _lower_row(self, t, node, out, ins):
        # (cumsum is an index kernel)
        if node.op == "argsort":  # sort_kernels.py (its workspace is a third pointer)
            return self._lower_argsort(t, node, out, ins)
        key = _node_key(node, [out] + ins) if DEDUPE else None
        if key in self._by_key:
            self._kernel(t, node, [out] + ins, None, key=key)
            return
        x, split = ins[0], None
        if x.shape:  # rows: the dims but the axis; per row ~4 passes of `n`, an exp each
            ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
            others = [x.shape[d] for d in range(len(x.shape)) if d != ax]
            split = _outer_split(others, x.shape[ax] * ROW_COST)
        self._kernel(t, node, [out] + ins, lambda b, p: self._softmax(b, p, node, out, ins[0]),
                     split=split, key=key)

    def _lower_gather_scatter(self, t, node, out, ins):
        # (all but an unchecked one_hot are index kernels)
        self._kernel(t, node, [out] + ins, lambda b, p: self._one_hot(
            b, p, out, ins[0], node.attrs.get("ignore_index")), tiny_ok=True)

    def _lower_conv_pool(self, t, node, out, ins):
        if node.op == "max_pool2d":  # (one loop nest over the output: its batch rows split)
            kh, kw = node.attrs["kernel"]
            self._kernel(t, node, [out] + ins, lambda b, p: self._max_pool(b, p, node, out,
                                                                          ins[0]),
                         split=_outer_split(out.shape, kh * kw))
        elif node.op == "max_pool2d_grad":  # (batch rows: see _max_pool_grad)
            kh, kw = node.attrs["kernel"]
            self._kernel(t, node, [out] + ins, lambda b, p: self._max_pool_grad(
                b, p, node, out, *ins), split=_outer_split(ins[1].shape, kh * kw))
        else:
            self._kernel(t, node, [out] + ins, lambda b, p: self._conv(b, p, node, out, *ins),
                         split=self.conv_split(node, out, *ins))

    def _lower_copy(self, t, node, out, ins):
        op = node.op
        if op in ("constant", "arange"):
            value = np.ascontiguousarray(REGISTRY[op].ref(**node.attrs), node.out.dtype)
            src = self._const_place(value)
            self._kernel(t, node, [out, src], lambda b, p: self._copy(b, p, out, src),
                         tiny_ok=True)
        elif op == "slice_scatter":
            self._kernel(t, node, [out] + ins, lambda b, p: self._scatter(b, p, node, out,
                                                                         *ins), tiny_ok=True)
        else:
            self._kernel(t, node, [out] + ins, lambda b, p: self._concat(b, p, node, out,
                                                                        ins), tiny_ok=True)

    def _const_place(self, value: np.ndarray) -> Place:
        k = self._consts
        self._consts += 1
        data = bytearray(value.tobytes()) or bytearray(1)
        arr_t = ir.ArrayType(I8, len(data))
        g = ir.GlobalVariable(self.module, arr_t, f"const{k}")
        g.global_constant = True
        g.linkage = "internal"
        g.align = 64
        g.initializer = ir.Constant(arr_t, data)
        self._const_globals[k] = g
        self.const_data[k] = data  # (the driver reads an index constant on a DataError)
        return Place(("const", k), 0, value.shape, contiguous_strides(value.shape), value.dtype)

    def _kernel(self, t, node, places, emit, checked=False, split=None, scratch=False,
                after=None, key=None, tiny_ok=False):
        """A function `k<t>_<op>` with one noalias pointer per distinct slot, called from the
        entry; `emit(builder, {slot: ptr})` fills its body. A `checked` kernel returns an i64
        (nonzero: data out of range, nothing written) and the entry returns `t + 1` on it.
        `split=(n, work)`: the body's top-level loop has extent n, each iteration `work`
        element operations; when `chunking` cuts it, the kernel runs in parallel chunks
        (`_parallel_kernel`; `scratch`, `after`: see there). Returns the chunking or None.
        `key` (not None): equal keys mean equal kernels (`_elementwise_key`, `_node_key`); a
        kernel whose key was seen is not emitted again (`emit` may then be None): the node
        calls the first one's function. `tiny_ok`: the kernel computes the same bits at any
        optimisation level (no `reassoc`), so it may be compiled for size (TINY_WORK)."""
        slots = list(dict.fromkeys(p.slot for p in places))
        work = split[0] * split[1] if split is not None else \
            max((int(np.prod(p.shape, dtype=np.int64)) for p in places), default=0)
        self._work += work
        tiny = tiny_ok and not checked and work < TINY_WORK
        hit = self._by_key.get(key) if key is not None else None
        if hit is not None:
            fn, cut, fin, scratch = hit  # (the first kernel's: a later call may not know it)
            if cut is None:
                if tiny:
                    self._tiny[fn] = None
                    self._tiny_work += work
                self.entry_builder.call(fn, [self.slot_ptr(s) for s in slots])
            else:
                self._call_chunks(fn, slots + [("scratch", 0)] if scratch else slots, cut[1],
                                  fin)
            return cut
        if split is not None and not checked and len(slots) + 1 <= CTX_SLOTS:
            cut = chunking(*split)
            if cut is not None:
                chunk, fin = self._parallel_kernel(t, node, slots, emit, split[0], *cut,
                                                   scratch, after)
                if key is not None:
                    self._by_key[key] = (chunk, cut, fin, scratch)
                return cut
        if scratch or after is not None:
            return None  # (the caller emits its serial form)
        fn = ir.Function(self.module, ir.FunctionType(I64 if checked else ir.VoidType(),
                                                      [PTR] * len(slots)), f"k{t}_{node.op}")
        fn.linkage = "internal"
        # Kept out of line: a kernel is a loop nest that gains nothing from being inlined into
        # `run`, and one giant function costs the optimiser far more than many small ones.
        fn.attributes.add("noinline")
        ptrs = {}
        for a, slot in zip(fn.args, slots):
            a.add_attribute("noalias")
            a.name = f"{slot[0]}{slot[1]}"
            ptrs[slot] = a
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        emit(b, ptrs)
        if not checked:
            b.ret_void()
            fn = self._unique(fn)
            if tiny:
                self._tiny[fn] = None
                self._tiny_work += work
            if key is not None:
                self._by_key[key] = (fn, None, None, False)
            self.entry_builder.call(fn, [self.slot_ptr(s) for s in slots])
            return
        b.ret(i64(0))
        fn = self._unique(fn)
        e = self.entry_builder
        status = e.call(fn, [self.slot_ptr(s) for s in slots])
        with e.if_then(e.icmp_signed("!=", status, i64(0)), likely=False):
            e.ret(i64(t + 1))

    def _parallel_kernel(self, t, node, slots, emit, n, per, chunks, scratch, after):
        """`k<t>_<op>(ptrs..., lo, hi)` runs iterations [lo, hi) of the top-level loop (the
        builder's `Split`); `k<t>_<op>.chunk(ctx, c)` runs chunk c (ctx: the pointers); the
        entry calls `inplace_parallel_for(chunk, ctx, chunks, threads)`. `scratch`: the
        kernel also gets a per-call float64[MAX_CHUNKS] (the slot ("scratch", 0)), for a
        value per chunk; `after(builder, ptrs)` is emitted in `k<t>_<op>.after`, run once
        when every chunk is done (a reduction combines its partials there, in order).
        Returns (the chunk function, the after function or None)."""
        e = self.entry_builder
        if self._ctx is None:  # at the top of the entry: one array for every parallel kernel
            here = e.block
            e.position_at_start(e.function.entry_basic_block)
            self._ctx = e.alloca(PTR, size=CTX_SLOTS, name="ctx")
            self._scratch = e.alloca(ir.DoubleType(), size=SCRATCH_SLOTS, name="partials")
            e.position_at_end(here)
        if scratch:
            slots = slots + [("scratch", 0)]
        name = f"k{t}_{node.op}"
        body = ir.Function(self.module, ir.FunctionType(ir.VoidType(),
                                                         [PTR] * len(slots) + [I64, I64]),
                           name)
        body.linkage = "internal"
        body.attributes.add("noinline")
        ptrs = {}
        for a, slot in zip(body.args, slots):
            a.add_attribute("noalias")
            a.name = f"{slot[0]}{slot[1]}"
            ptrs[slot] = a
        lo, hi = body.args[-2:]
        lo.name, hi.name = "lo", "hi"
        b = ir.IRBuilder(body.append_basic_block("entry"))
        b.split = Split(n, lo, hi)
        emit(b, ptrs)
        if not b.split.used:
            raise AssertionError(f"{name}: the split loop was never emitted")
        b.ret_void()
        body = self._unique(body)  # (before the chunk: an identical body, an identical chunk)

        chunk = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64]),
                            f"{name}.chunk")
        chunk.linkage = "internal"
        c = ir.IRBuilder(chunk.append_basic_block("entry"))
        ctx, k = chunk.args
        args = [c.load(c.gep(ctx, [i64(j)], source_etype=PTR), typ=PTR)
                for j in range(len(slots))]
        start = c.mul(k, i64(per))
        end = c.add(start, i64(per))
        end = c.select(c.icmp_signed("<", end, i64(n)), end, i64(n))
        c.call(body, args + [start, end])
        c.ret_void()
        chunk = self._unique(chunk)
        fin = None
        if after is not None:
            fin = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR] * len(slots)),
                              f"{name}.after")
            fin.linkage = "internal"
            fin.attributes.add("noinline")
            fptrs = dict(zip(slots, fin.args))
            fb = ir.IRBuilder(fin.append_basic_block("entry"))
            after(fb, fptrs)
            fb.ret_void()
            fin = self._unique(fin)
        self._call_chunks(chunk, slots, chunks, fin)
        return chunk, fin

    def _call_chunks(self, chunk, slots, chunks, fin):
        """In the entry: the slots' pointers into the context array, `chunks` chunks run by
        the pool, then `fin` (the after function) when there is one."""
        e = self.entry_builder
        for s in slots:
            if s[0] == "output" and s not in self._touched:
                self._touched.add(s)
                self._first_touch(e, self.slot_ptr(s), self.output_buffers[s[1]].size,
                                  self.threads_arg)
        pf = self.module.globals.get("inplace_parallel_for") or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64]),
            "inplace_parallel_for")
        vals = [self._scratch if s == ("scratch", 0) else self.slot_ptr(s) for s in slots]
        for j, v in enumerate(vals):
            e.store(v, e.gep(self._ctx, [i64(j)], source_etype=PTR))
        e.call(pf, [chunk, self._ctx, i64(chunks), self.threads_arg])
        self.parallel = True
        if fin is not None:
            e.call(fin, vals)

    @staticmethod
    def _first_touch(e, ptr, size, threads):
        """Write one byte (its own value) per huge page of a fresh output of TOUCH_BYTES or more, on
        the calling thread, before its first parallel kernel, in calls on TOUCH_MIN_THREADS threads
        or more (None: never, the default). It was always done, so that no worker took a fault
        (measured then: add100's worker spent 1-3 ms per call on its 4 MB output's faults: two
        threads zeroing the same 2 MiB page, and faults on the worker's CPU thought to cost more).
        Since the caller claims chunks from the front and workers from the back (pool.py), each
        thread faults its own pages, and the touch only cost: the kernel zeroed the whole output
        before the loop, whose stores then missed the cache, and the faults were serial. Measured
        (2-vCPU VM, load ~3, benchmarks/fresh_outputs.py and add100 fresh): relu of 64 MiB at 1
        thread 12.5 against 14.4 ms CPU (the same 32 faults), at 2 threads 12.4 against 15.2 ms CPU
        and 19.8 against 23.6 ms; add100 at 2 threads the same CPU, its fastest tenth of calls 1.97
        against 2.2 ms. A 2 MiB fault took ~230 us on either vCPU (~245 on the one that did not free
        the pages)."""
        if size < TOUCH_BYTES or TOUCH_MIN_THREADS is None:
            return
        with e.if_then(e.icmp_signed(">=", threads, i64(TOUCH_MIN_THREADS))):
            with for_range(e, -(-size // TOUCH_STRIDE), "touch") as i:
                p = e.gep(ptr, [e.mul(i, i64(TOUCH_STRIDE))], inbounds=True, source_etype=I8)
                # (a compare-and-swap of 0 with 0: it keeps the byte, and x86's locked
                # instruction is a write whatever the byte holds, so the page faults once,
                # for writing: a load then a store faulted twice, the zero page then the
                # huge page)
                e.cmpxchg(p, ir.Constant(I8, 0), ir.Constant(I8, 0), "monotonic",
                          "monotonic")

    def _unique(self, fn: ir.Function) -> ir.Function:
        """`fn`, or the function emitted earlier whose IR is the same as fn's but for the
        names of the function, its parameters (named after the node's buffers) and its loops'
        metadata nodes (numbered module-wide); then fn is removed from the module."""
        if not DEDUPE:
            return fn
        key = str(fn).replace(fn.get_reference(), '@"\0"', 1)  # (first: the define line)
        for j, a in enumerate(fn.args):
            key = key.replace(a.get_reference(), f'%"\0{j}"')
        # Metadata references renumbered in order of first use, and the referenced nodes'
        # own text (a loop's hints) appended, renumbered the same way.
        order: dict[str, int] = {}

        def ref(m):
            return f"!\0{order.setdefault(m.group(1), len(order))}"
        key = _MD_REF.sub(ref, key)
        seen = 0
        while seen < len(order):
            n = list(order)[seen]
            key += "\n" + _MD_REF.sub(ref, str(self.module.metadata[int(n)]))
            seen += 1
        first = self._bodies.setdefault(key, fn)
        if first is not fn:
            del self.module.globals[fn.name]
        return first

    def _emit_fallback(self, t, node, cb, cb_type):
        """Hand the node to the numpy reference: an array of (operand..., output) buffer
        pointers and the node's index; Python builds the views from `places`."""
        b = self.entry_builder
        places = [self.places[id(v)] for v in node.inputs] + [self.places[id(node.out)]]
        arr = b.alloca(PTR, size=len(places))
        for k, p in enumerate(places):
            b.store(self.slot_ptr(p.slot), b.gep(arr, [i64(k)], source_etype=PTR))
        status = b.call(_Callee(cb, cb_type), [i64(t), arr])
        # The callback raised (kept for the driver): stop here, as a checked node does, so
        # that nothing after it runs (no update with a gradient that was never reduced).
        with b.if_then(b.icmp_signed("!=", status, i64(0)), likely=False):
            b.ret(i64(t + 1))
        self.fallback_nodes[t] = node

    # -- kernels ---------------------------------------------------------------------------
    def _copy(self, b, ptrs, dst: Place, src: Place):
        """dst = src (with a cast when dtypes differ), src broadcast to dst's shape."""
        shape, (so, si) = collapse(dst.shape, [dst.strides, broadcast_strides(src, dst.shape)])
        raw = src.dtype == dst.dtype and is_half(src.dtype)  # a copy moves the bits (NaNs too)

        def body(idxs):
            p = elem_ptr(b, ptrs[src.slot], src.dtype, index(b, src.offset, si, idxs))
            q = elem_ptr(b, ptrs[dst.slot], dst.dtype, index(b, dst.offset, so, idxs))
            if raw:
                b.store(b.load(p, typ=mem_type(src.dtype)), q)
                return
            store(b, convert(b, load(b, p, src.dtype), src.dtype, dst.dtype), q, dst.dtype)
        loop_nest(b, shape, body)

    @staticmethod
    def _expr(node, out, ins):
        if node.op == "full":
            return S.const(node.attrs["value"])
        return expr_for(REGISTRY[node.op], node.attrs, [p.dtype for p in ins], out.dtype)

    def _elementwise(self, b, ptrs, node, out: Place, ins, pow2=()):
        expr = self._expr(node, out, ins)
        strides = [out.strides] + [broadcast_strides(p, out.shape) for p in ins]
        shape, strides = collapse(out.shape, strides)

        def body(idxs):
            def loader(k):
                p = ins[k]
                return lambda: (load(b, elem_ptr(b, ptrs[p.slot], p.dtype,
                                                 index(b, p.offset, strides[k + 1], idxs)),
                                     p.dtype), p.dtype)
            r = _Pow2Renderer(b, [loader(k) for k in range(len(ins))],
                              index=lambda: _flat_index(b, shape, idxs), pow2=dict(pow2))
            v, d = r.render(expr, out.dtype)
            store_as(b, v, d, elem_ptr(b, ptrs[out.slot], out.dtype,
                                       index(b, out.offset, strides[0], idxs)), out.dtype,
                     frozen=True)  # (no masked store: see `store`)
        # A long body (a fused chain: 100 dependent additions) is latency-bound with one
        # vector in flight: ask for several independent ones per iteration.
        md = interleave_hint(self.module, INTERLEAVE) \
            if _interleave_fits(shape, [out] + list(ins), expr_cost(expr)) else None
        loop_nest(b, shape, body, inner_md=md)

    def _reduce_shapes(self, node, out: Place, x: Place):
        """(kept shape, reduced shape, outer): the collapsed kept and reduced dims, and
        whether the kept dims are innermost in memory (`_reduce_outer`)."""
        k = self._reduce_layout(node, out, x)
        kshape, kx, rshape, rx = k[0], k[1], k[3], k[4]
        return kshape, rshape, _rows_outer(out.dtype, kshape, kx, rshape, rx)

    def _reduce_layout(self, node, out: Place, x: Place):
        axes = normalize_axes(node.attrs.get("axis"), len(x.shape))
        keepdim = node.attrs.get("keepdim", False)
        # Output strides per input dim (0 on reduced dims).
        ostr, k = [], 0
        for d in range(len(x.shape)):
            if d in axes:
                ostr.append(0)
                k += keepdim
            else:
                ostr.append(out.strides[k])
                k += 1
        kept = [d for d in range(len(x.shape)) if d not in axes]
        red = list(axes)
        kshape, (kx, ko) = collapse([x.shape[d] for d in kept],
                                    [[x.strides[d] for d in kept], [ostr[d] for d in kept]])
        rshape, (rx,) = collapse([x.shape[d] for d in red], [[x.strides[d] for d in red]])
        return kshape, kx, ko, rshape, rx

    @staticmethod
    def _acc_dtype(op, xd):
        # 16-bit floats accumulate as float32 does, in float64 (max: in their float32
        # register), and round once at the end
        if op == "max":
            return xd
        if dkind(xd) == "f" or op == "mean":
            return np.dtype(np.float64)  # one rounding at the end (see module docstring)
        return np.dtype(np.int64)

    @staticmethod
    def _acc_init(op, acc_d):
        if op == "max":
            return constant(-np.inf, acc_d) if dkind(acc_d) == "f" else \
                constant(np.iinfo(acc_d).min if acc_d.kind == "i" else 0, acc_d)
        return constant(0, acc_d)

    def _reduce_chunk(self, b, ptrs, node, out: Place, x: Place, rshape):
        """One chunk of a full reduction (`_lower_reduction`; kept dims, if any, of size 1):
        its part of the reduced loop, accumulated as `_reduce` does, into scratch[chunk]."""
        _, _, _, _, rx = self._reduce_layout(node, out, x)
        op, xd = node.op, x.dtype
        acc_d = self._acc_dtype(op, xd)
        acc_t = ll_type(acc_d)
        slot = b.alloca(acc_t, name="acc")
        b.store(self._acc_init(op, acc_d), slot)

        def inner(ridx):
            v = convert(b, load(b, elem_ptr(b, ptrs[x.slot], xd, index(b, x.offset, rx, ridx)),
                                xd), xd, acc_d)
            b.store(_accumulate(b, op, b.load(slot, typ=acc_t), v, acc_d), slot)
        loop_nest(b, rshape, inner, "r")
        # chunk number = lo / per: the scratch holds float64 bits (an i64 or a float
        # accumulator is stored through its own type in that 8-byte cell)
        per = chunking(rshape[0], int(np.prod(rshape[1:], dtype=np.int64)))[0]
        c = b.sdiv(b.split.lo, i64(per))
        cell = b.gep(ptrs[("scratch", 0)], [c], source_etype=ir.DoubleType())
        b.store(b.load(slot, typ=acc_t), cell)

    def _reduce_combine(self, b, ptrs, node, out: Place, x: Place, rshape):
        """out = the chunks' partials combined in chunk order (then the mean's division)."""
        op, xd, od = node.op, x.dtype, out.dtype
        acc_d = self._acc_dtype(op, xd)
        acc_t = ll_type(acc_d)
        per, chunks = chunking(rshape[0], int(np.prod(rshape[1:], dtype=np.int64)))
        a = b.load(ptrs[("scratch", 0)], typ=acc_t)
        for c in range(1, chunks):
            v = b.load(b.gep(ptrs[("scratch", 0)], [i64(c)], source_etype=ir.DoubleType()),
                       typ=acc_t)
            if op == "max":
                a = select_max(b, a, v, acc_d)
            elif dkind(acc_d) == "f":
                a = b.fadd(a, v)
            else:
                a = b.add(a, v)
        self._store_result(b, op, a, acc_d, int(np.prod(rshape, dtype=np.int64)),
                           elem_ptr(b, ptrs[out.slot], od, i64(out.offset)), od)

    @staticmethod
    def _store_result(b, op, a, acc_d, count, ptr, od):
        """A reduction's accumulator into its output: converted to the output's dtype (a
        mean divided there), a 16-bit float's quotient taken in float32 and rounded once."""
        cd = compute_dtype(od)
        a = convert(b, a, acc_d, cd)
        if op == "mean":
            a = b.fdiv(a, constant(float(count), cd))
        store_as(b, a, cd, ptr, od)

    def _reduce(self, b, ptrs, node, out: Place, x: Place):
        kshape, kx, ko, rshape, rx = self._reduce_layout(node, out, x)
        op = node.op
        xd, od = x.dtype, out.dtype
        acc_d = self._acc_dtype(op, xd)
        acc_t = ll_type(acc_d)
        count = int(np.prod(rshape, dtype=np.int64)) if rshape else 1
        if _rows_outer(od, kshape, kx, rshape, rx):
            self._reduce_outer(b, ptrs, op, out, x, kshape, kx, ko, rshape, rx, count)
            return
        slot = b.alloca(acc_t, name="acc")

        def outer(oidx):
            b.store(self._acc_init(op, acc_d), slot)
            xoff = index(b, x.offset, kx, oidx)

            def inner(ridx):
                v = load(b, elem_ptr(b, ptrs[x.slot], xd, b.add(xoff, index(b, 0, rx, ridx))),
                         xd)
                v = convert(b, v, xd, acc_d)
                b.store(_accumulate(b, op, b.load(slot, typ=acc_t), v, acc_d), slot)
            loop_nest(b, rshape, inner, "r")
            self._store_result(b, op, b.load(slot, typ=acc_t), acc_d, count,
                               elem_ptr(b, ptrs[out.slot], od, index(b, out.offset, ko, oidx)),
                               od)
        loop_nest(b, kshape, outer, "o")

    def _reduce_outer(self, b, ptrs, op, out, x, kshape, kx, ko, rshape, rx, count):
        """A reduction over axes that are outer in memory (a bias gradient: [B, N] -> [N]):
        accumulate into the output row by row, the kept dims innermost, so each pass is a
        contiguous, vectorisable loop. Same order as numpy's own outer-axis reductions
        (out = x[0]; out += x[1]; ...), in the output dtype as numpy does."""
        xd, od = x.dtype, out.dtype
        # In a chunk (parallel kernel), this chunk's block of the kept dims' outermost one,
        # in each of the three nests (in the row nest it is the inner loop).
        split, b.split = getattr(b, "split", None), None

        def knest(body, prefix):
            if split is None:
                loop_nest(b, kshape, body, prefix)
                return
            lo, hi = split.range_for(b, kshape[0])
            with for_range(b, hi, f"{prefix}0", start=lo) as i0:
                loop_nest(b, kshape[1:], lambda rest: body([i0] + rest), f"{prefix}_")

        def at_out(kidx):
            return elem_ptr(b, ptrs[out.slot], od, index(b, out.offset, ko, kidx))
        if op == "max":
            init = constant(-np.inf, od) if od.kind == "f" else \
                constant(np.iinfo(od).min if od.kind == "i" else 0, od)
        else:
            init = constant(0, od)
        knest(lambda kidx: store(b, init, at_out(kidx), od), "i")

        def row(ridx):
            roff = index(b, x.offset, rx, ridx)

            def inner(kidx):
                v = load(b, elem_ptr(b, ptrs[x.slot], xd, b.add(roff, index(b, 0, kx, kidx))),
                         xd)
                v = convert(b, v, xd, od)
                p = at_out(kidx)
                a = load(b, p, od)
                if op == "max":
                    r = select_max(b, a, v, od)
                elif od.kind == "f":
                    r = b.fadd(a, v)
                elif od.kind == "b":
                    r = b.or_(a, v)
                else:
                    r = b.add(a, v)
                store(b, r, p, od)
            knest(inner, "k")
        loop_nest(b, rshape, row, "r")
        if op == "mean":
            knest(lambda kidx: store(
                b, b.fdiv(load(b, at_out(kidx), od), constant(float(count), od)), at_out(kidx),
                od), "m")
        b.split = split

    def _fill(self, b, ptrs, dst: Place):
        """dst = 0."""
        shape, (so,) = collapse(dst.shape, [dst.strides])
        loop_nest(b, shape, lambda idxs: store(
            b, constant(0, dst.dtype), elem_ptr(b, ptrs[dst.slot], dst.dtype,
                                                index(b, dst.offset, so, idxs)), dst.dtype))

    # -- regions ---------------------------------------------------------------------------
    def _scatter(self, b, ptrs, node, out: Place, base: Place, src: Place):
        region = out.region("slice", node.attrs)
        if node not in self.plan.reuse:
            self._copy(b, ptrs, out, base)
        elif (src.slot, src.offset, src.strides) == (region.slot, region.offset, region.strides):
            return  # the producer already wrote the region where it belongs (ARCHITECTURE.md §8.3)
        if region.shape and 0 in region.shape:
            return
        self._copy(b, ptrs, region, src)

    def _concat(self, b, ptrs, node, out: Place, ins):
        ax = normalize_axes(node.attrs["axis"], len(out.shape))[0]
        start = 0
        for p in ins:
            stop = start + p.shape[ax]
            idx = tuple(("s", start, stop, 1) if d == ax else ("s", None, None, None)
                        for d in range(len(out.shape)))
            if stop > start:
                self._copy(b, ptrs, out.region("slice", {"index": idx}), p)
            start = stop

    def _one_hot(self, b, ptrs, out: Place, labels: Place, ignore_index=None):
        """out[..., k] = (labels[...] == k), and a row of `ignore_index` all zeros. Labels out
        of range give a zero row here: the driver checked them before the run (a check on
        computed labels runs the reference instead, see `checked_while_running`)."""
        ls = broadcast_strides(Place(labels.slot, labels.offset, labels.shape + (1,),
                                     labels.strides + (0,), labels.dtype), out.shape)

        def body(idxs):
            lab = load(b, elem_ptr(b, ptrs[labels.slot], labels.dtype,
                                   index(b, labels.offset, ls, idxs)), labels.dtype)
            lab = convert(b, lab, labels.dtype, np.int64)
            hit = b.icmp_signed("==", lab, idxs[-1])
            if ignore_index is not None:
                hit = b.and_(hit, b.icmp_signed("!=", lab, i64(ignore_index)))
            v = convert(b, hit, np.bool_, out.dtype)
            store(b, v, elem_ptr(b, ptrs[out.slot], out.dtype,
                                 index(b, out.offset, out.strides, idxs)), out.dtype)
        loop_nest(b, out.shape, body)

    def _remap(self, b, k, src: Place, dst: Place):
        """The element of `dst` at the same logical index as element `k` of `src` (same
        shape); the identity when their layouts agree."""
        if src.strides == dst.strides and src.offset == dst.offset:
            return k
        rem = b.sub(k, i64(src.offset))
        # Decompose by src strides (descending positive strides: a contiguous-like layout).
        order = sorted(range(len(src.shape)), key=lambda d: -src.strides[d])
        acc = i64(dst.offset)
        for d in order:
            q = b.sdiv(rem, i64(src.strides[d]))
            rem = b.srem(rem, i64(src.strides[d]))
            acc = b.add(acc, b.mul(q, i64(dst.strides[d])))
        return acc


def _flat_index(b, shape, idxs):
    """The element's row-major index in the output's logical shape, from the loop indices
    over its collapsed `shape` (collapsing merges adjacent dims and drops size-1 ones, which
    keeps row-major order): what a random op's counter reads, whatever the thread split."""
    strides, inner = [], 1
    for d in reversed(shape):
        strides.insert(0, inner)
        inner *= int(d)
    return index(b, 0, strides, idxs)


def _places_key(places):
    """Each place's layout and dtype, and which distinct buffer it is (by first appearance)."""
    slots = {}
    return tuple((slots.setdefault(p.slot, len(slots)), p.offset, p.shape, p.strides,
                  p.dtype.str) for p in places)


def _node_key(node, places):
    """A key naming a kernel's code before it is emitted, or None, for the families whose code
    is a function of the op, its attributes and its places alone (reductions, matmul and
    gemm, softmax rows; `self.blas_ok` is the module's): every layer of a stack then builds
    its GEMM and bias-gradient kernels once, not once per node for `_unique` to merge."""
    try:
        op = (node.op, attr_key(node.attrs))
    except _NoKey:
        return None
    return op, _places_key(places)


def _elementwise_key(node, places):
    """A key naming an elementwise kernel's code before it is emitted, or None: the op and
    its attributes (a fused node's: every inner node's op, attributes, dtypes and operands,
    which `FusedBody.expr` is built from), and each place's layout, dtype and which distinct
    buffer it is. Emitting and printing the same fused body once per layer was most of the
    emitter's time on long chains; equal keys give equal IR (`_unique` would merge them)."""
    try:
        body = node.attrs.get("body") if node.op == "fused" else None
        if body is not None:
            op = ("fused", body.in_types, body.operands, tuple(
                (n.op, attr_key(n.attrs), tuple(v.dtype.str for v in n.inputs), n.out.dtype.str)
                for n in body.nodes))
        else:
            op = (node.op, attr_key(node.attrs))
    except _NoKey:
        return None
    return op, _places_key(places)


def _pow2_divisors(node) -> tuple:
    """((k, values), ...) for the integer operands k of an elementwise node whose values are
    known when emitting and all positive powers of two: a small `constant` (or a view of one,
    which holds some of its values). pack_masks' unpacking divides each mask word by 2**k
    and takes it modulo 2: as `sdiv`/`srem` by a loaded vector LLVM scalarises both (8 `idiv`
    per vector), 1.8 ms of the mlp step's 13.8 at 1 thread; a shift and a mask are exact."""
    out = []
    for k, v in enumerate(node.inputs):
        while v.producer is not None and REGISTRY[v.producer.op].kind == VIEW \
                and len(v.producer.inputs) == 1 and v.producer.inputs[0].dtype == v.dtype:
            v = v.producer.inputs[0]
        p = v.producer
        if p is None or p.op != "constant" or v.dtype.kind not in "iu" or v.size > 1024:
            continue
        vals = np.asarray(p.attrs["value"]).astype(np.int64).ravel()
        if vals.size and np.all(vals > 0) and not np.any(vals & (vals - 1)):
            out.append((k, tuple(int(x) for x in vals)))
    return tuple(out)


class _Pow2Renderer(Renderer):
    """A Renderer for which integer `floordiv`/`mod` by operand k of `pow2` (its known values,
    all positive powers of two: `_pow2_divisors`) is an arithmetic (or, unsigned, logical)
    shift by the divisor's trailing zeros / an `and` with divisor - 1: numpy's results, as
    rounding towards -inf is what a two's complement shift does."""

    def __init__(self, b, args, index=None, pow2=None):
        super().__init__(b, args, index=index)
        self.pow2 = pow2 or {}

    def _r1(self, e):
        if e.op in ("floordiv", "mod") and e.args[1].op == "arg" \
                and e.args[1].value in self.pow2:
            items = [self._r(a) for a in e.args]
            t = compute_dtype(S.common_dtype([x[1] for x in items]))
            top = 1 << (8 * t.itemsize - (t.kind == "i"))  # (still positive in t)
            if t.kind in "iu" and max(self.pow2[e.args[1].value]) < top:
                b = self.b
                x, y = (self._materialize(v, t) for v in items)
                if e.op == "mod":
                    return b.and_(x, b.sub(y, ir.Constant(y.type, 1))), t
                s = b.cttz(y, ir.Constant(I1, 1))  # (never zero: undefined there is fine)
                return (b.lshr if t.kind == "u" else b.ashr)(x, s), t
        return super()._r1(e)


def _interleave_fits(shape, places, cost: int) -> bool:
    """Whether to ask for INTERLEAVE vectors on this loop nest (a body of at least
    INTERLEAVE_MIN_COST). Not on a huge body (INTERLEAVE_MAX_SHORT_COST) whose innermost loop is
    shorter than INTERLEAVE vectors of the widest (64-byte) registers: LLVM then vectorises
    that short loop at a narrow width four times over and the SLP vectoriser works through the
    copies, which is where the time goes (measured, a chain of 1,000 sin/tanh on 16 floats,
    fused into kernels of 8 pairs: 5 s of LLVM with the hint, 0.7 s without; each call
    12-25% slower without, ~240 against ~275 us, noisy). A smaller body keeps the hint: it
    compiles in a fraction of a second and interleaving pays there (exp/tanh over [4096, 10]
    with a broadcast column, ~50 operations: 1.1 ms against 1.9 without). backend_speed's
    workloads have the same IR either way."""
    if not shape or cost < INTERLEAVE_MIN_COST:
        return False
    lanes = 64 // min(np.dtype(p.dtype).itemsize for p in places)
    return cost < INTERLEAVE_MAX_SHORT_COST or shape[-1] >= INTERLEAVE * lanes


def _rows_outer(od, kshape, kx, rshape, rx) -> bool:
    """Whether a reduction accumulates into its output row by row (`_reduce_outer`: the kept
    dims innermost in memory). Not into a 16-bit float output: each row's sum would be
    rounded to 8 or 11 bits; those take a register accumulator per element instead."""
    return bool(kshape and rshape and not is_half(od)
                and min(map(abs, kx)) < min(map(abs, rx)))


def _outer_split(shape, work_per_element):
    """split= for a kernel whose top-level loop nest is `shape` (collapsed): its outer extent
    and the work of one outer iteration; None for a 0-d loop."""
    if not shape:
        return None
    inner = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    return int(shape[0]), inner * work_per_element


# Kernel family (the lowering table, `runtime/lowering/families.py`) -> the method that lowers
# a node of it. What this renderer lowers natively is these families and views (no code);
# communication goes through the callback.
LOWER_BY_FAMILY = F.lower_by_family(ModuleEmitter)
LOWERING = F.Lowering(frozenset(LOWER_BY_FAMILY) | {F.VIEW_FAMILY}, fallback=FALLBACK_OPS)


class _Callee:
    """An opaque `ptr` value called as a function of type `ftype` (llvmlite's builder wants a
    typed callee; printing uses only the pointer's name)."""

    def __init__(self, value, ftype):
        self.value, self.function_type, self.type = value, ftype, value.type

    def get_reference(self):
        return self.value.get_reference()


def _accumulate(b, op, acc, v, acc_d):
    """One step of a sum or max reduction: `acc` combined with `v` (NaN-propagating max; a
    float sum may reassociate, which the partition keeps fixed)."""
    if op == "max":
        return select_max(b, acc, v, acc_d)
    if dkind(acc_d) == "f":
        return b.fadd(acc, v, flags=["reassoc"])
    return b.add(acc, v)
