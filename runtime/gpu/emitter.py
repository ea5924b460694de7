"""Lowering a planned graph to CUDA C: one module of `__global__` kernels and a launch list.

`emit_module(graph, plan) -> GpuModule(source, launches, arena_bytes)`. The launch list
(`launch.py`) is the whole schedule in order, as data: both the CuPy runtime and the CPU
fiber harness run exactly it. As on cpu (`runtime/cpu/emitter.py`):

  - each kernel takes one `unsigned char*` per distinct buffer it touches (the arena at the
    buffer's planned offset, a caller's input, a per-call output buffer), so an in-place
    kernel (the plan's reuse) has ONE pointer for its input and output and reads and writes
    through the same layout; distinct buffers are `__restrict__`, which the plan proves
    (live buffers never overlap: `passes/verify.py`);
  - shapes, strides and element offsets are compile-time constants in the kernel (the
    program is specialised for one signature); indices are 64-bit (`long long`);
  - views emit no code: they are places (`runtime/lowering/places.py`, shared with cpu);
  - module constants (`constant`, `arange`) are `__device__` arrays in the source.

16-bit floats (float16, bfloat16) are `__half` / `__nv_bfloat16` in memory and float in
registers (`scalar.py`): every kernel loads them widened, computes as it does for float32 and
rounds once, to nearest even, in its store (`_store`); a softmax of a 16-bit output recomputes
exp(x - max) for the store rather than rounding it twice; a GEMM on them is cublasGemmEx with
float32 accumulation (`launch.GEMM_EX`). int8, uint8 and int16 wrap as numpy's.

Kernels by family (one or a few per node; `LOWERING` names the families, from the table in
`runtime/lowering/families.py`):
  - elementwise, casts, copies, fills: grid-stride loops over the output's elements
    (dimensions contiguous in every operand merged first), the registry's scalar expression
    rendered per element (`scalar.Renderer`), broadcast operands with stride 0;
  - reductions (sum, mean, max, min, prod, argmax, argmin): one block per output element, a
    per-thread accumulator (float64 for float32 sums and products, as on cpu), then warp
    shuffles (`__shfl_down_sync`) and one shared-memory step across warps. Few outputs over a
    long extent (`_slices`: fewer than SPLIT_MAX_OUT outputs, at least 2 x SLICE_MIN reduced
    elements) run as a fixed number of slices per output, one block each, whose partials
    (in the scratch region past the planned buffers and the status word,
    `GpuModule.scratch_bytes`, counted in `arena_bytes`) a second kernel combines in slice
    order: the count depends on the shapes only, so every device and run gives the same bits;
  - softmax / log_softmax: one block per row, block reductions for the max and the sum;
  - matmul / gemm: a cuBLAS launch per matrix (column-major arguments, see `launch.py`), with
    alpha/beta so a GEMM-accumulate update stays one call; integer or non-BLAS layouts get a
    generated kernel (one thread per output element);
  - concat, slice_scatter: copy kernels into regions (a scatter in place writes only its
    region); gathers (index_select, take_along_axis, one_hot) one thread per output element;
    scatter-adds (index_add, put_along_axis) one thread per output element that visits the
    indices in order, so repeated indices add (or, for assign, the last wins) exactly as
    numpy's sequential `np.add.at` does, deterministically and without atomics;
  - cumsum, argsort (a stable merge sort over the output and workspace rows): one thread per
    row; conv2d and its gradients, max_pool2d and its gradient: direct
    kernels, one thread per output element (the pooling gradient recomputes each window's
    first maximum, so no two threads write one element).

Indices that are data (index_select, index_add, take_along_axis, put_along_axis, and the
labels of a one_hot computed inside the program) are checked where they are used: an index
out of range is never used to address memory (a gather reads 0, a scatter skips it) and the
kernel records its node in the module's status word (`GpuModule.status_offset`, 8 bytes past
the planned arena: 0, or the first failing node's number + 1, by atomicCAS; the first launch
clears it). The executable reads it after the run and, before anything is copied back to the
caller, raises the numpy backend's `DataError` for that node (`executable.raise_data_error`).
"""
from __future__ import annotations

import numpy as np

from compiler.ops import ELEMENTWISE, REGISTRY, SCATTER, VIEW
from compiler.ops import scalar as S
from compiler.ops.elementwise import expr_for
from compiler.ops.registry import is_half, normalize_axes
from runtime.lowering import families as F
from runtime.lowering.layout import (blas_layout, broadcast_strides, collapse, conv_roles,
                                     leading_padding)
from runtime.lowering.places import Place, buffer_slots, compute_places, contiguous_strides

from .launch import GpuModule, Launch
from .scalar import (HALF_PRELUDE, HALF_TYPES, PRELUDE, Renderer, convert, ctype, kind, literal,
                     load_value, mtype, store_value)

ARENA_ALIGNMENT = 256
BLOCK = 256            # threads per block of a grid-stride kernel
RBLOCK = 256           # threads per block of a reduction / row kernel
MAX_GRID = 65535
# A reduction into few outputs over a long extent is split into slices (one block each) whose
# partials a second kernel combines in slice order. The slice count depends on the shapes only
# (never on the device), so results are the same on every device and every run. Reasoning, not
# measurement (none was possible here): a thread's loads in the accumulation loop wait one
# after another (a few hundred cycles each), so the time of a block is about its elements per
# thread: SLICE_MIN = 8 per thread; fewer than SPLIT_MAX_OUT blocks leave most of a ~132-SM
# device idle (it holds ~8 blocks of 256 threads per SM); SPLIT_BLOCKS = 512 blocks (~4 per
# SM) is enough, and bounds the combine's serial chain (one thread per output) to 512 adds.
SPLIT_MAX_OUT = 256
SPLIT_BLOCKS = 512
SLICE_MIN = 8 * RBLOCK

# Ops whose kernels check their indices (see the module docstring).
CHECKED_OPS = frozenset({"index_select", "index_add", "take_along_axis", "put_along_axis"})
STATUS_CLEAR = r"""// the status word: 0 until a kernel finds data out of range (then its node + 1)
extern "C" __global__ void k_status_clear(unsigned long long* status) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *status = 0ULL;
}
"""
# Non-elementwise ops whose kernel may write over input 0 in place (each output element is
# read from input 0 at the same position, by the same thread, before it is written).
_INPLACE_OTHER = frozenset({"cumsum", "index_add", "put_along_axis"})

BLOCK_PRELUDE = r"""
// -- block reductions: warp shuffles, then one shared-memory step across warps --
struct SumOp { template <typename T> __device__ static T f(T a, T b) { return a + b; } };
struct ProdOp { template <typename T> __device__ static T f(T a, T b) { return a * b; } };
struct MaxOp { template <typename T> __device__ static T f(T a, T b) { return np_max(a, b); } };
struct MinOp { template <typename T> __device__ static T f(T a, T b) { return np_min(a, b); } };
// every thread of the block calls it (blockDim.x a multiple of 32); all get the result.
// (T): 8- and 16-bit integers shuffle as int, and Op::f takes two of one type
template <typename Op, typename T> __device__ T block_reduce(T v, T ident, T* sh) {
  for (int s = 16; s > 0; s >>= 1) v = Op::f(v, (T)__shfl_down_sync(0xffffffffu, v, s));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nw = (blockDim.x + 31) >> 5;
  __syncthreads();  // sh is free: its previous use has been read by every thread
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? sh[lane] : ident;
    for (int s = 16; s > 0; s >>= 1) v = Op::f(v, (T)__shfl_down_sync(0xffffffffu, v, s));
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}
// (value, index) pairs: the extreme wins, the lower index on ties; NaN wins (numpy argmax)
template <bool IsMax, typename T> __device__ __forceinline__ bool arg_better(
    T a, long long ia, T b, long long ib) {
  const bool na = a != a, nb = b != b;
  if (na || nb) return na && (!nb || ia < ib);
  if (IsMax ? a > b : a < b) return true;
  if (a == b) return ia < ib;
  return false;
}
template <bool IsMax, typename T> __device__ long long block_arg(
    T v, long long i, T* shv, long long* shi) {
  for (int s = 16; s > 0; s >>= 1) {
    T ov = __shfl_down_sync(0xffffffffu, v, s);
    long long oi = __shfl_down_sync(0xffffffffu, i, s);
    if (arg_better<IsMax>(ov, oi, v, i)) { v = ov; i = oi; }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) { shv[warp] = v; shi[warp] = i; }
  __syncthreads();
  if (warp == 0) {
    if (lane < nw) { v = shv[lane]; i = shi[lane]; } else { i = 0x7fffffffffffffffLL; }
    for (int s = 16; s > 0; s >>= 1) {
      T ov = __shfl_down_sync(0xffffffffu, v, s);
      long long oi = __shfl_down_sync(0xffffffffu, i, s);
      if (arg_better<IsMax>(ov, oi, v, i)) { v = ov; i = oi; }
    }
    if (lane == 0) { shi[0] = i; shv[0] = v; }   // (shv[0]: the winner's value)
  }
  __syncthreads();
  return shi[0];
}
"""


def _fail(t: int) -> str:
    """Node `t` found data out of range: the status word keeps the first node that did."""
    return f"atomicCAS(status, 0ULL, {t + 1}ULL);"


def _grid(n: int, block: int = BLOCK) -> tuple[int, int, int]:
    return (max(1, min(-(-n // block), MAX_GRID)), 1, 1)


def _unravel(lines, var, shape, prefix, indent="    "):
    """Emit `const long long {prefix}{d} = ...` for each dim of `shape` from flat index `var`
    (row-major); returns the index names."""
    names, inner = [], 1
    sizes = list(shape)
    for d in range(len(sizes) - 1, -1, -1):
        name = f"{prefix}{d}"
        if d == 0:
            expr = f"{var} / {inner}LL" if inner != 1 else var
        else:
            expr = f"({var} / {inner}LL) % {sizes[d]}LL" if inner != 1 else \
                f"{var} % {sizes[d]}LL"
        lines.append(f"{indent}const long long {name} = {expr};")
        names.append(name)
        inner *= max(int(sizes[d]), 1)
    return list(reversed(names))


def _offset(offset, strides, idxs) -> str:
    terms = [f"{offset}LL"] if offset else []
    for i, s in zip(idxs, strides):
        if s == 0:
            continue
        terms.append(i if s == 1 else f"{i} * {s}LL")
    return " + ".join(terms) or "0LL"


class ModuleEmitter:
    """Builds the CUDA C module and the launch list of one planned graph."""

    def __init__(self, graph, plan):
        self.graph, self.plan = graph, plan
        self.places = compute_places(graph, plan)
        self.slots, self.output_buffers = buffer_slots(graph, plan)
        self.arena_offset = {b.id: b.offset for b in plan.buffers if b.kind == "arena"}
        self.kernels: list[str] = []
        self.consts: list[str] = []
        self.launches: list[Launch] = []
        self._nconst = 0
        self.inlined = self._inlined_fills()
        self.checked_while_running = {c.node for c in getattr(graph, "data_checks", ())
                                      if c.input_index is None}
        self.status_offset = None
        if any(self._checked(n) for n in graph.nodes):
            # the status word lies past the planned buffers (256-aligned, as every buffer)
            self.status_offset = -(-plan.arena_bytes // ARENA_ALIGNMENT) * ARENA_ALIGNMENT
            self.launches.append(Launch("k_status_clear", (1, 1, 1), (32, 1, 1), 0,
                                        (("arena", self.status_offset),)))
        # the partials of split reductions (`_reduce`): one region past the planned buffers
        # and the status word, reused by every split node (its two launches are consecutive)
        self.scratch_offset = -(-plan.arena_bytes // ARENA_ALIGNMENT) * ARENA_ALIGNMENT + (
            0 if self.status_offset is None else ARENA_ALIGNMENT)
        self.scratch_bytes = 0
        for t, node in enumerate(graph.nodes):
            if REGISTRY[node.op].kind != VIEW and node.out.size > 0 \
                    and id(node.out) not in self.inlined:
                self._emit_node(t, node)
            elif node.op in CHECKED_OPS and node.inputs[1].size > 0:
                self._check_indices(t, node)   # nothing to write, the indices still checked
        # (the 16-bit float types only where a kernel uses them: other modules stay as they were)
        halves = [HALF_PRELUDE] if any(h in k for k in self.kernels for h in HALF_TYPES) else []
        self.source = "\n".join([
            f"// {graph.name}: generated by runtime/gpu/emitter.py "
            f"({len(self.kernels)} kernels, {len(self.launches)} launches)",
            PRELUDE, *halves, BLOCK_PRELUDE, *self.consts, *self.kernels,
            *([STATUS_CLEAR] if self.status_offset is not None else [])])
        arena_bytes = plan.arena_bytes if self.status_offset is None else \
            self.status_offset + ARENA_ALIGNMENT
        if self.scratch_bytes:   # (counted in the bytes the device allocates and checks)
            arena_bytes = self.scratch_offset + \
                -(-self.scratch_bytes // ARENA_ALIGNMENT) * ARENA_ALIGNMENT
        self.module = GpuModule(self.source, self.launches, arena_bytes, ARENA_ALIGNMENT,
                                self.status_offset, self.scratch_bytes)

    def _checked(self, node) -> bool:
        """Does `node`'s kernel check data and record a failure in the status word? Index
        ops always (their reference always checks); one_hot when its labels are computed in
        the program (a caller's labels are checked by the driver before the run)."""
        return node.op in CHECKED_OPS or (node.op == "one_hot"
                                          and node in self.checked_while_running)

    def _inlined_fills(self) -> dict:
        """`full` values read only by elementwise kernels: those render the constant instead
        of loading it, and the fill itself emits no kernel (`x + 1.0` is one kernel, not a
        fill of a 0-d buffer and an add)."""
        readers: dict = {}
        for node in self.graph.nodes:
            for v in node.inputs:
                readers.setdefault(id(v), []).append(node)
        keep = {id(v) for v in self.graph.outputs} | {id(v) for v in
                                                       self.graph.mutations.values()}
        out = {}
        for node in self.graph.nodes:
            v = node.out
            if node.op == "full" and id(v) not in keep and readers.get(id(v)) and all(
                    REGISTRY[r.op].kind == ELEMENTWISE for r in readers[id(v)]):
                out[id(v)] = (node.attrs["value"], v.dtype)
        return out

    # -- slots and pointers ---------------------------------------------------------------------
    def _slot_arg(self, slot, byte_offset=0):
        kind, k = slot
        if kind == "arena":
            return ("arena", self.arena_offset[k] + byte_offset)
        return (kind, k, byte_offset)

    def _kernel(self, t, node, tag, places, body: list[str], grid, block, shared=0,
                scalars=(), status=False, scratch=None):
        """Add `k{t}_{op}{tag}` with one pointer per distinct (non-constant) slot of
        `places` and launch it once; `status`: it also takes the status word; `scratch`:
        it also takes a pointer `scratch` at that byte offset of the arena."""
        slots = list(dict.fromkeys(p.slot for p in places if p.slot[0] != "const"))
        name = f"k{t}_{node.op}{tag}"
        params = [f"unsigned char* __restrict__ {self._pname(s)}" for s in slots]
        params += [f"{c} {n}" for c, n, _ in scalars]
        if status:   # past every planned buffer: __restrict__ holds
            params.append("unsigned long long* __restrict__ status")
        if scratch is not None:   # (past every planned buffer too)
            params.append("unsigned char* __restrict__ scratch")
        head = f"// node {t}: {node.op} {list(node.out.shape)} {node.out.dtype}"
        if getattr(node, "loc", None):
            head += f" ({str(node.loc).splitlines()[0]})"
        self.kernels.append("\n".join([
            head, f'extern "C" __global__ void {name}({", ".join(params)}) {{', *body, "}", ""]))
        args = tuple(self._slot_arg(s) for s in slots) + tuple(
            ("scalar", c, v) for c, _, v in scalars)
        if status:
            args += (("arena", self.status_offset),)
        if scratch is not None:
            args += (("arena", scratch),)
        self.launches.append(Launch(name, tuple(grid), tuple(block), shared, args, node=t))

    @staticmethod
    def _pname(slot):
        return f"{slot[0]}{slot[1]}"

    def _ref(self, place: Place, idx: str) -> str:
        """The C lvalue of `place`'s element at element index `idx` of its slot."""
        base = f"const_{place.slot[1]}" if place.slot[0] == "const" else self._pname(place.slot)
        return f"(({mtype(place.dtype)}*){base})[{idx}]"

    def _load(self, place: Place, idx: str) -> str:
        """The register value (a 16-bit float as its float32 value, a bool as bool)."""
        return load_value(self._ref(place, idx), place.dtype)

    def _store(self, place: Place, idx: str, value: str, src=None) -> str:
        """Store register `value` of dtype `src` (default: the place's): converted as numpy's
        astype, a 16-bit float rounded once to nearest even."""
        value = store_value(value, place.dtype if src is None else src, place.dtype)
        return f"{self._ref(place, idx)} = {value};"

    # -- dispatch ----------------------------------------------------------------------------------
    def _emit_node(self, t, node):
        op = node.op
        opdef = REGISTRY[op]
        if node in self.plan.reuse and opdef.kind not in (ELEMENTWISE, SCATTER) \
                and self.plan.reuse[node] not in opdef.overwrites \
                and not (op in _INPLACE_OTHER and self.plan.reuse[node] == 0):
            raise NotImplementedError(f"the plan runs {op} in place; the gpu backend only "
                                      "writes elementwise ops and scatters over an input")
        lower = LOWER_BY_FAMILY.get(F.family_of(op))
        if lower is None:
            raise NotImplementedError(f"no gpu kernel for {op} ({opdef.kind})")
        out = self.places[id(node.out)]
        ins = [self.places[id(v)] for v in node.inputs]
        lower(self, t, node, out, ins)

    # -- one method per kernel family (LOWER_BY_FAMILY) ---------------------------------------
    def _lower_elementwise(self, t, node, out, ins):
        self._elementwise(t, node, out, ins)

    def _lower_reduction(self, t, node, out, ins):
        self._reduce(t, node, out, ins[0])

    def _lower_gemm(self, t, node, out, ins):
        if node.op == "gemm":
            self._gemm(t, node, out, *ins)
        else:
            self._matmul(t, node, out, *ins)

    def _lower_row(self, t, node, out, ins):
        if node.op == "cumsum":
            self._cumsum(t, node, out, ins[0])
        elif node.op == "argsort":
            self._argsort(t, node, out, ins[0])
        else:
            self._softmax(t, node, out, ins[0])

    def _lower_gather_scatter(self, t, node, out, ins):
        if node.op in ("index_add", "put_along_axis"):
            self._scatter_add(t, node, out, ins)
        else:
            self._gather(t, node, out, ins)

    def _lower_conv_pool(self, t, node, out, ins):
        if node.op == "max_pool2d":
            self._max_pool(t, node, out, ins[0])
        elif node.op == "max_pool2d_grad":
            self._max_pool_grad(t, node, out, *ins)
        else:
            self._conv(t, node, out, *ins)

    def _lower_copy(self, t, node, out, ins):
        if node.op in ("constant", "arange"):
            value = np.ascontiguousarray(REGISTRY[node.op].ref(**node.attrs), node.out.dtype)
            self._copy(t, node, "", out, self._const_place(value))
        elif node.op == "slice_scatter":
            self._scatter(t, node, out, *ins)
        else:
            self._concat(t, node, out, ins)

    def _const_place(self, value: np.ndarray) -> Place:
        """A `__device__` array holding `value`'s bytes (exact: as unsigned words)."""
        k = self._nconst
        self._nconst += 1
        raw = value.tobytes() or b"\0"
        raw += b"\0" * (-len(raw) % 8)
        words = np.frombuffer(raw, np.uint64)
        body = ", ".join(f"{int(w):#x}ULL" for w in words)
        self.consts.append(f"__device__ const unsigned long long const_{k}[{len(words)}] = "
                           f"{{{body}}};")
        return Place(("const", k), 0, value.shape, contiguous_strides(value.shape), value.dtype)

    # -- grid-stride elementwise kernels ----------------------------------------------------------
    def _pointwise(self, t, node, tag, out: Place, ins, value, consts=None):
        """out[i] = value(loaded operands) over out's elements, operands broadcast; operand k
        in `consts` is the constant (value, dtype) instead of a load."""
        consts = consts or {}
        kept = [k for k in range(len(ins)) if k not in consts]
        loaded = [ins[k] for k in kept]
        strides = [out.strides] + [broadcast_strides(p, out.shape) for p in loaded]
        shape, strides = collapse(out.shape, strides)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        body = [f"  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"i < {n}LL; i += (long long)blockDim.x * gridDim.x) {{"]
        idxs = _unravel(body, "i", shape, "d")
        args = []
        for k, p in enumerate(ins):
            if k in consts:
                args.append((literal(*consts[k]), np.dtype(consts[k][1])))
                continue
            j = kept.index(k)
            body.append(f"    const {ctype(p.dtype)} a{k} = "
                        f"{self._load(p, _offset(p.offset, strides[j + 1], idxs))};")
            args.append((f"a{k}", p.dtype))
        v = value(body, args)   # out's register value, or (value, its dtype)
        v, src = v if isinstance(v, tuple) else (v, None)
        body.append("    " + self._store(out, _offset(out.offset, strides[0], idxs), v, src))
        body.append("  }")
        self._kernel(t, node, tag, [out] + loaded, body, _grid(n), (BLOCK, 1, 1))

    def _elementwise(self, t, node, out, ins):
        if node.op == "full":
            expr = S.const(node.attrs["value"])
        else:
            expr = expr_for(REGISTRY[node.op], node.attrs, [p.dtype for p in ins], out.dtype)

        if is_half(out.dtype) and expr.op == "cast" and np.dtype(expr.value) == out.dtype:
            expr = expr.args[0]   # the node's own rounding: the store's

        def value(body, args):   # converted once, by the store (one rounding to a half)
            # `i`: _pointwise's flat row-major index over the collapsed shape, which is the
            # element's index in the logical shape (a random op's counter)
            return Renderer(body, args, indent="    ", index="i").render(expr, out.dtype)
        consts = {k: self.inlined[id(v)] for k, v in enumerate(node.inputs)
                  if id(v) in self.inlined}
        self._pointwise(t, node, "", out, ins, value, consts)

    def _copy(self, t, node, tag, dst: Place, src: Place):
        """dst = src (cast to dst's dtype), src broadcast to dst's shape."""
        self._pointwise(t, node, tag, dst, [src], lambda body, args: (args[0][0], src.dtype))

    def _fill(self, t, node, tag, dst: Place, value=0):
        self._pointwise(t, node, tag, dst, [], lambda body, args: literal(value, dst.dtype))

    # -- reductions -------------------------------------------------------------------------------
    def _reduce(self, t, node, out: Place, x: Place):
        op = node.op
        arg = op in ("argmax", "argmin")
        axis = node.attrs.get("axis")
        axes = normalize_axes(axis, len(x.shape))
        keepdim = node.attrs.get("keepdim", False)
        ostr, k = [], 0
        for d in range(len(x.shape)):
            if d in axes:
                ostr.append(0)
                k += keepdim
            else:
                ostr.append(out.strides[k] if k < len(out.strides) else 0)
                k += 1
        kept = [d for d in range(len(x.shape)) if d not in axes]
        red = list(axes)
        kshape, (kx, ko) = collapse([x.shape[d] for d in kept],
                                    [[x.strides[d] for d in kept], [ostr[d] for d in kept]])
        if arg:  # the index counts the reduced elements row-major: keep every reduced dim
            rshape, rx = [x.shape[d] for d in red], [x.strides[d] for d in red]
        else:
            rshape, (rx,) = collapse([x.shape[d] for d in red], [[x.strides[d] for d in red]])
        nout = int(np.prod(kshape, dtype=np.int64)) if kshape else 1
        nred = int(np.prod(rshape, dtype=np.int64)) if rshape else 1
        xd, od = x.dtype, out.dtype
        if arg or op in ("max", "min"):
            acc_d = np.dtype(np.int32) if xd == np.bool_ else xd
        elif kind(xd) == "f" or op == "mean":
            acc_d = np.dtype(np.float64)   # (16-bit floats too: at least float32, as promised)
        else:
            acc_d = np.dtype(np.int64)
        acc = ctype(acc_d)
        if op in ("max", "argmax"):
            ident = literal(-np.inf, acc_d) if kind(acc_d) == "f" else \
                literal(np.iinfo(acc_d).min, acc_d)
        elif op in ("min", "argmin"):
            ident = literal(np.inf, acc_d) if kind(acc_d) == "f" else \
                literal(np.iinfo(acc_d).max, acc_d)
        else:
            ident = literal(1 if op == "prod" else 0, acc_d)
        fn = {"sum": "SumOp", "mean": "SumOp", "prod": "ProdOp", "max": "MaxOp",
              "min": "MinOp", "argmax": None, "argmin": None}[op]
        ismax = "true" if op == "argmax" else "false"
        # a block no wider than the reduced extent (in whole warps)
        block = min(RBLOCK, max(32, -(-nred // 32) * 32))
        nslice = self._slices(nout, nred)
        if nslice > 1:
            block = RBLOCK
            span = -(-nred // nslice)

        def finish(result, rd, oidx):
            """The output element from the reduction's `result` (of dtype `rd`)."""
            if is_half(od):   # one rounding, from the accumulator (the mean divided in it)
                res = result if op != "mean" else f"{result} / {literal(float(nred), rd)}"
                return self._store(out, _offset(out.offset, ko, oidx), res, rd)
            res = convert(result, rd, od)
            if op == "mean":
                res = f"{res} / {literal(float(nred), od)}"
            return self._store(out, _offset(out.offset, ko, oidx), res)

        body = [f"  __shared__ {acc} shv[32];"]
        if arg:
            body.append("  __shared__ long long shi[32];")
        if nslice > 1:   # block b: output b / nslice, its slice b % nslice of the extent
            body += [f"  {{ const long long o = blockIdx.x / {nslice}LL;",
                     f"    const long long lo = (blockIdx.x % {nslice}LL) * {span}LL;",
                     f"    const long long hi = lo + {span}LL < {nred}LL ? lo + {span}LL "
                     f": {nred}LL;"]
            first, last = "lo + threadIdx.x", "hi"
        else:
            body += [f"  for (long long o = blockIdx.x; o < {nout}LL; o += gridDim.x) {{"]
            first, last = "threadIdx.x", f"{nred}LL"
        oidx = _unravel(body, "o", kshape, "k")
        body.append(f"    const long long xo = {_offset(x.offset, kx, oidx)};")
        body.append(f"    {acc} acc = {ident};")
        if arg:
            body.append("    long long ai = 0x7fffffffffffffffLL;")
        body.append(f"    for (long long r = {first}; r < {last}; r += blockDim.x) {{")
        ridx = _unravel(body, "r", rshape, "q", "      ")
        v = convert(self._load(x, "xo + " + _offset(0, rx, ridx)), xd, acc_d)
        body.append(f"      const {acc} v = {v};")
        if arg:
            body.append(f"      if (arg_better<{ismax}>(v, r, acc, ai)) {{ acc = v; ai = r; }}")
        else:
            body.append(f"      acc = {fn}::f(acc, v);")
        body.append("    }")
        if arg:
            body.append(f"    const long long res = block_arg<{ismax}>(acc, ai, shv, shi);")
            result, rd = "res", np.dtype(np.int64)
        else:
            body.append(f"    const {acc} res = block_reduce<{fn}>(acc, {ident}, shv);")
            result, rd = "res", acc_d
        if nslice == 1:
            body.append(f"    if (threadIdx.x == 0) {finish(result, rd, oidx)}")
            body.append("  }")
            self._kernel(t, node, "", [out, x], body, (max(1, min(nout, MAX_GRID)), 1, 1),
                         (block, 1, 1))
            return
        # the partials: one value (8 bytes whatever its type) per block, then (arg) its index
        parts = nout * nslice
        self.scratch_bytes = max(self.scratch_bytes, parts * (16 if arg else 8))
        pv = f"(({acc}*)scratch)"
        pi = f"((long long*)(scratch + {parts * 8}LL))"
        if arg:   # (block_arg leaves the winner's value in shv[0])
            body.append(f"    if (threadIdx.x == 0) {{ {pv}[blockIdx.x] = shv[0]; "
                        f"{pi}[blockIdx.x] = res; }}")
        else:
            body.append(f"    if (threadIdx.x == 0) {pv}[blockIdx.x] = res;")
        body.append("  }")
        self._kernel(t, node, "_slices", [x], body, (parts, 1, 1), (block, 1, 1),
                     scratch=self.scratch_offset)
        # one thread per output combines its partials in slice order (a fixed order: the
        # same sum on every device, whichever block finished first)
        body = [f"  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"o < {nout}LL; o += (long long)blockDim.x * gridDim.x) {{"]
        oidx = _unravel(body, "o", kshape, "k")
        body.append(f"    {acc} acc = {ident};")
        if arg:
            body.append("    long long ai = 0x7fffffffffffffffLL;")
        body.append(f"    for (long long s = o * {nslice}LL; s < (o + 1) * {nslice}LL; ++s) {{")
        if arg:
            body.append(f"      if (arg_better<{ismax}>({pv}[s], {pi}[s], acc, ai)) "
                        f"{{ acc = {pv}[s]; ai = {pi}[s]; }}")
            result = "ai"
        else:
            body.append(f"      acc = {fn}::f(acc, {pv}[s]);")
            result = "acc"
        body.append("    }")
        body.append("    " + finish(result, rd, oidx))
        body.append("  }")
        cblock = min(BLOCK, max(32, -(-nout // 32) * 32))
        self._kernel(t, node, "_combine", [out], body, _grid(nout, cblock), (cblock, 1, 1),
                     scratch=self.scratch_offset)

    @staticmethod
    def _slices(nout: int, nred: int) -> int:
        """How many slices (blocks) each output's reduced extent is split into: 1 (not
        split) unless the outputs are few and the extent long (SPLIT_MAX_OUT, SLICE_MIN);
        a function of the shapes only. Every slice is non-empty."""
        if nout >= SPLIT_MAX_OUT or nred < 2 * SLICE_MIN:
            return 1
        n = min(nred // SLICE_MIN, max(1, SPLIT_BLOCKS // nout))
        if n < 2:
            return 1
        span = -(-nred // n)
        return -(-nred // span)

    # -- row kernels ------------------------------------------------------------------------------
    def _softmax(self, t, node, out: Place, x: Place):
        """One block per row: the max, then the float64 sum of exp(x - max), then the
        normalised values (log_softmax: x - max - log(sum))."""
        if not x.shape:
            x = Place(x.slot, x.offset, (1,), (1,), x.dtype)
            out = Place(out.slot, out.offset, (1,), (1,), out.dtype)
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        dt = x.dtype
        c = ctype(dt)
        f = "f" if c == "float" else ""
        # a 16-bit output: exp(x - max) is recomputed in the last pass, so the value stored is
        # the float32 result rounded once (storing e and dividing it after would round twice)
        half = is_half(out.dtype)
        others = [d for d in range(len(x.shape)) if d != ax]
        oshape = [x.shape[d] for d in others]
        nrows = int(np.prod(oshape, dtype=np.int64)) if oshape else 1
        n, sx, so = x.shape[ax], x.strides[ax], out.strides[ax]
        body = ["  __shared__ double shd[32];", f"  __shared__ {c} shm[32];",
                f"  for (long long o = blockIdx.x; o < {nrows}LL; o += gridDim.x) {{"]
        idx = _unravel(body, "o", oshape, "k")
        xo = _offset(x.offset, [x.strides[d] for d in others], idx)
        oo = _offset(out.offset, [out.strides[d] for d in others], idx)
        body += [f"    const long long xo = {xo};", f"    const long long oo = {oo};"]
        xat = self._load(x, f"xo + j * {sx}LL")
        oref = self._ref(out, f"oo + j * {so}LL")
        ninf = literal(-np.inf, dt)
        body += [f"    {c} m = {ninf};",
                 f"    for (long long j = threadIdx.x; j < {n}LL; j += blockDim.x) "
                 f"m = np_max(m, ({c}){xat});",
                 f"    m = block_reduce<MaxOp>(m, {ninf}, shm);",
                 "    double s = 0.0;",
                 f"    for (long long j = threadIdx.x; j < {n}LL; j += blockDim.x) {{",
                 f"      const {c} e = exp{f}(({c}){xat} - m);"]
        if node.op == "softmax" and not half:
            body.append(f"      {oref} = e;")
        body += ["      s += (double)e;", "    }",
                 "    s = block_reduce<SumOp>(s, 0.0, shd);",
                 f"    const {c} sum = ({c})s;"]
        oj = f"oo + j * {so}LL"
        if node.op == "softmax" and half:
            body.append(f"    for (long long j = threadIdx.x; j < {n}LL; j += blockDim.x) "
                        + self._store(out, oj, f"exp{f}(({c}){xat} - m) / sum", dt))
        elif node.op == "softmax":
            body.append(f"    for (long long j = threadIdx.x; j < {n}LL; j += blockDim.x) "
                        f"{oref} = {oref} / sum;")
        else:
            body += [f"    const {c} lse = log{f}(sum);",
                     f"    for (long long j = threadIdx.x; j < {n}LL; j += blockDim.x) "
                     + self._store(out, oj, f"(({c}){xat} - m) - lse", dt)]
        body.append("  }")
        block = min(RBLOCK, max(32, -(-n // 32) * 32))
        self._kernel(t, node, "", [out, x], body, (max(1, min(nrows, MAX_GRID)), 1, 1),
                     (block, 1, 1))

    def _cumsum(self, t, node, out: Place, x: Place):
        """One thread per row, the row in order (numpy's order: bit-identical sums)."""
        if not x.shape:
            self._copy(t, node, "", out, x)
            return
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        others = [d for d in range(len(x.shape)) if d != ax]
        oshape = [x.shape[d] for d in others]
        nrows = int(np.prod(oshape, dtype=np.int64)) if oshape else 1
        od = out.dtype
        c = ctype(od)
        body = [f"  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"o < {nrows}LL; o += (long long)blockDim.x * gridDim.x) {{"]
        idx = _unravel(body, "o", oshape, "k")
        xo = _offset(x.offset, [x.strides[d] for d in others], idx)
        oo = _offset(out.offset, [out.strides[d] for d in others], idx)
        body += [f"    const long long xo = {xo};", f"    const long long oo = {oo};"]
        body.append(f"    {c} acc = {literal(0, od)};")
        body.append(f"    for (long long j = 0; j < {x.shape[ax]}LL; ++j) {{")
        v = convert(self._load(x, f"xo + j * {x.strides[ax]}LL"), x.dtype, od)
        if od == np.bool_:
            body.append(f"      acc = acc || {v};")
        else:
            body.append(f"      acc = acc + {v};")
        body.append("      " + self._store(out, f"oo + j * {out.strides[ax]}LL", "acc"))
        body += ["    }", "  }"]
        self._kernel(t, node, "", [out, x], body, _grid(nrows), (BLOCK, 1, 1))

    # -- argsort (issue 24; compiler/ops/sort_ops.py, the cpu kernel runtime/cpu/sort_kernels.py)
    def _argsort(self, t, node, out: Place, x: Place):
        """One thread per row: the cpu's bottom-up stable merge sort of the row's indices,
        ping-ponging between the output row and the node's workspace row (so that the last
        pass ends in the output); branch-free merge, NaN after every number, descending
        reverses the comparison but keeps equal elements in order."""
        ws = self.plan.workspace[node]
        tmp = Place(("arena", ws.id), 0, out.shape, contiguous_strides(out.shape), out.dtype)
        if not x.shape:  # a 0-d tensor is a row of one
            x = Place(x.slot, x.offset, (1,), (1,), x.dtype)
            out = Place(out.slot, out.offset, (1,), (1,), out.dtype)
            tmp = Place(tmp.slot, 0, (1,), (1,), tmp.dtype)
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        n = x.shape[ax]
        others = [d for d in range(len(x.shape)) if d != ax]
        oshape = [x.shape[d] for d in others]
        nrows = int(np.prod(oshape, dtype=np.int64)) if oshape else 1
        passes = (n - 1).bit_length()      # ceil(log2 n) merge passes
        c = ctype(x.dtype)
        if kind(x.dtype) == "f":
            before = ("(a > b) || (a != a && b == b)" if node.attrs["descending"]
                      else "(a < b) || (a == a && b != b)")
        else:
            before = "(a > b)" if node.attrs["descending"] else "(a < b)"
        body = [f"  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"o < {nrows}LL; o += (long long)blockDim.x * gridDim.x) {{"]
        idx = _unravel(body, "o", oshape, "k")
        bufs = [(out, _offset(out.offset, [out.strides[d] for d in others], idx)),
                (tmp, _offset(tmp.offset, [tmp.strides[d] for d in others], idx))]
        if passes % 2:   # an odd number of passes: start in the workspace, end in the output
            bufs.reverse()
        for k, (p, off) in enumerate(bufs):
            body.append(f"    long long* const b{k} = ((long long*){self._pname(p.slot)}) + "
                        f"({off});")
        (p0, _), (p1, _) = bufs
        s0, s1 = p0.strides[ax], p1.strides[ax]
        xo = _offset(x.offset, [x.strides[d] for d in others], idx)
        key = self._load(x, f"xo + {{}} * {x.strides[ax]}LL")
        body += [f"    const long long xo = {xo};",
                 f"    for (long long k = 0; k < {n}LL; ++k) b0[k * {s0}LL] = k;",
                 f"    for (int p = 0; p < {passes}; ++p) {{",
                 "      const long long* src = (p & 1) ? b1 : b0;",
                 "      long long* dst = (p & 1) ? b0 : b1;",
                 f"      const long long ss = (p & 1) ? {s1}LL : {s0}LL;",
                 f"      const long long ds = (p & 1) ? {s0}LL : {s1}LL;",
                 "      const long long w = 1LL << p;",
                 f"      for (long long lo = 0; lo < {n}LL; lo += 2 * w) {{",
                 f"        const long long mid = lo + w < {n}LL ? lo + w : {n}LL;",
                 f"        const long long hi = lo + 2 * w < {n}LL ? lo + 2 * w : {n}LL;",
                 "        long long i = lo, j = mid;",
                 "        for (long long k = lo; k < hi; ++k) {",
                 "          const bool iok = i < mid, jok = j < hi;",
                 "          const long long ia = src[(iok ? i : lo) * ss];",
                 "          const long long ja = src[(jok ? j : lo) * ss];",
                 f"          const {c} b = {key.format('ia')};",
                 f"          const {c} a = {key.format('ja')};",
                 f"          const bool right = jok && (!iok || ({before}));",
                 "          dst[k * ds] = right ? ja : ia;",
                 "          j += right;",
                 "          i += !right;",
                 "        }", "      }", "    }", "  }"]
        self._kernel(t, node, "", [out, x, tmp], body, _grid(nrows), (BLOCK, 1, 1))

    # -- matmul -----------------------------------------------------------------------------------
    def _cublas(self, t, node, dt, m, n, k, a: Place, a_strides, a_off, b: Place, b_strides,
                b_off, c: Place, c_off, ldc, alpha=1.0, beta=0.0):
        """Row-major C[m,n] = alpha A[m,k] @ B[k,n] + beta C as cuBLAS's column-major call:
        C^T = alpha B^T A^T + beta C^T (no operand is copied; transposes are flags)."""
        ta, lda = blas_layout(m, k, *a_strides)
        tb, ldb = blas_layout(k, n, *b_strides)
        item = np.dtype(dt).itemsize
        ct = ctype(dt)
        args = (tb, ta, n, m, k, ("scalar", ct, float(alpha)),
                self._slot_arg(b.slot, b_off * item), ldb,
                self._slot_arg(a.slot, a_off * item), lda, ("scalar", ct, float(beta)),
                self._slot_arg(c.slot, c_off * item), ldc)
        self.launches.append(Launch("gemm", (1, 1, 1), (1, 1, 1), 0, args, node=t,
                                    library="cublas", dtype=np.dtype(dt).name))

    def _blas_ok(self, dt, x, y, m, kk, n, xs, ys, os_):
        return (kind(dt) == "f" and x.dtype == dt and y.dtype == dt and kk > 0
                and (blas_layout(m, n, *os_) or ("T",))[0] == "N"
                and blas_layout(m, kk, *xs) is not None and blas_layout(kk, n, *ys) is not None)

    def _matmul(self, t, node, out: Place, x: Place, y: Place):
        bshape = out.shape[:-2]
        m, kk, n = x.shape[-2], x.shape[-1], y.shape[-1]
        xb = broadcast_strides(Place(x.slot, 0, x.shape[:-2], x.strides[:-2], x.dtype), bshape)
        yb = broadcast_strides(Place(y.slot, 0, y.shape[:-2], y.strides[:-2], y.dtype), bshape)
        ob = out.strides[:-2]
        dt = out.dtype
        nb = int(np.prod(bshape, dtype=np.int64)) if bshape else 1
        if kk == 0:
            self._fill(t, node, "", out)
            return
        if not self._blas_ok(dt, x, y, m, kk, n, x.strides[-2:], y.strides[-2:],
                             out.strides[-2:]) or nb > 256:
            self._matmul_kernel(t, node, out, x, y, bshape, xb, yb, ob)
            return
        ldc = blas_layout(m, n, *out.strides[-2:])[1]
        for bi in np.ndindex(*bshape) if bshape else [()]:
            xo = x.offset + sum(i * s for i, s in zip(bi, xb))
            yo = y.offset + sum(i * s for i, s in zip(bi, yb))
            oo = out.offset + sum(i * s for i, s in zip(bi, ob))
            self._cublas(t, node, dt, m, n, kk, x, x.strides[-2:], xo, y, y.strides[-2:], yo,
                         out, oo, ldc)

    def _matmul_kernel(self, t, node, out, x, y, bshape, xb, yb, ob):
        """out[.., i, j] = sum_k x[.., i, k] y[.., k, j] in the output dtype, one thread per
        output element (integers and layouts cuBLAS can't take)."""
        dt = out.dtype
        c = ctype(dt)
        shape = tuple(bshape) + (out.shape[-2], out.shape[-1])
        total = int(np.prod(shape, dtype=np.int64))
        body = [f"  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"i < {total}LL; i += (long long)blockDim.x * gridDim.x) {{"]
        idx = _unravel(body, "i", shape, "d")
        bi, r, col = idx[:-2], idx[-2], idx[-1]
        xm, xk = x.strides[-2:]
        yk, yn = y.strides[-2:]
        body.append(f"    const long long xo = {_offset(x.offset, tuple(xb) + (xm,), bi + [r])};")
        body.append(f"    const long long yo = {_offset(y.offset, tuple(yb) + (yn,), bi + [col])};")
        body.append(f"    {c} acc = {literal(0, dt)};")
        body.append(f"    for (long long k = 0; k < {x.shape[-1]}LL; ++k) {{")
        xv = convert(self._load(x, f"xo + k * {xk}LL"), x.dtype, dt)
        yv = convert(self._load(y, f"yo + k * {yk}LL"), y.dtype, dt)
        if dt == np.bool_:
            body.append(f"      acc = acc || ({xv} && {yv});")
        else:
            body.append(f"      acc = acc + {xv} * {yv};")
        body.append("    }")
        body.append("    " + self._store(out, _offset(out.offset, tuple(ob) + out.strides[-2:],
                                                      idx), "acc"))
        body.append("  }")
        self._kernel(t, node, "", [out, x, y], body, _grid(total), (BLOCK, 1, 1))

    def _gemm(self, t, node, out: Place, x: Place, y: Place, c: Place):
        """out = beta c + alpha op(x) @ op(y): in place over c when the plan says so, else c
        is copied into out first; then one cuBLAS call (or a generated kernel)."""
        at = node.attrs
        alpha, beta = float(at["alpha"]), float(at["beta"])

        def op(p: Place, tr: bool) -> Place:
            return Place(p.slot, p.offset, p.shape[::-1], p.strides[::-1], p.dtype) if tr else p
        x, y = op(x, at["trans_a"]), op(y, at["trans_b"])
        if (c.slot, c.offset, c.strides, c.dtype) != (out.slot, out.offset, out.strides,
                                                      out.dtype):
            self._copy(t, node, "_c", out, c)
        m, kk, n = x.shape[0], x.shape[1], y.shape[1]
        dt = out.dtype
        if self._blas_ok(dt, x, y, m, kk, n, x.strides, y.strides, out.strides):
            ldc = blas_layout(m, n, *out.strides)[1]
            self._cublas(t, node, dt, m, n, kk, x, x.strides, x.offset, y, y.strides, y.offset,
                         out, out.offset, ldc, alpha, beta)
            return
        cc = ctype(dt)
        body = [f"  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"i < {m * n}LL; i += (long long)blockDim.x * gridDim.x) {{"]
        r, col = _unravel(body, "i", (m, n), "d")
        body.append(f"    {cc} acc = {literal(0, dt)};")
        xv = convert(self._load(x, _offset(x.offset, x.strides, [r, "k"])), x.dtype, dt)
        yv = convert(self._load(y, _offset(y.offset, y.strides, ["k", col])), y.dtype, dt)
        body.append(f"    for (long long k = 0; k < {kk}LL; ++k) acc = acc + {xv} * {yv};")
        oi = _offset(out.offset, out.strides, [r, col])
        body.append("    " + self._store(out, oi, f"{literal(alpha, dt)} * acc + "
                                         f"{literal(beta, dt)} * {self._load(out, oi)}"))
        body.append("  }")
        self._kernel(t, node, "", [out, x, y], body, _grid(m * n), (BLOCK, 1, 1))

    # -- regions ----------------------------------------------------------------------------------
    def _scatter(self, t, node, out: Place, base: Place, src: Place):
        region = out.region("slice", node.attrs)
        if node not in self.plan.reuse:
            self._copy(t, node, "_base", out, base)
        elif (src.slot, src.offset, src.strides) == (region.slot, region.offset, region.strides):
            return  # the producer already wrote the region where it belongs (ARCHITECTURE.md §8.3)
        if region.shape and 0 in region.shape:
            return
        self._copy(t, node, "", region, src)

    def _concat(self, t, node, out: Place, ins):
        ax = normalize_axes(node.attrs["axis"], len(out.shape))[0]
        start = 0
        for k, p in enumerate(ins):
            stop = start + p.shape[ax]
            idx = tuple(("s", start, stop, 1) if d == ax else ("s", None, None, None)
                        for d in range(len(out.shape)))
            if stop > start:
                self._copy(t, node, f"_{k}", out.region("slice", {"index": idx}), p)
            start = stop

    # -- gathers and scatters ---------------------------------------------------------------------
    def _gather(self, t, node, out: Place, ins):
        """One thread per output element: the element it reads, or 0 (one_hot: the class
        test). An index out of range reads 0 (see the module docstring)."""
        op = node.op
        od = out.dtype
        total = int(np.prod(out.shape, dtype=np.int64))
        body = [f"  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"i < {total}LL; i += (long long)blockDim.x * gridDim.x) {{"]
        idx = _unravel(body, "i", out.shape, "d")
        oi = _offset(out.offset, out.strides, idx)
        checked = self._checked(node)
        if op == "one_hot":
            lab = ins[0]
            li = _offset(lab.offset, lab.strides, idx[:-1])
            body.append(f"    const long long lab = (long long){self._load(lab, li)};")
            hit = f"lab == {idx[-1]}"
            ig = node.attrs.get("ignore_index")
            if ig is not None:
                hit += f" && lab != {int(ig)}LL"
            if checked:
                bad = f"lab < 0 || lab >= {int(node.attrs['num_classes'])}LL"
                if ig is not None:
                    bad = f"({bad}) && lab != {int(ig)}LL"
                body.append(f"    if ({bad}) {_fail(t)}")
            body.append("    " + self._store(out, oi, convert(f"({hit})", np.bool_, od)))
        else:
            x, index = ins
            ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
            size = x.shape[ax]
            if op == "index_select":
                ii = _offset(index.offset, index.strides, [idx[ax]])
            else:
                ii = _offset(index.offset, broadcast_strides(index, out.shape), idx)
            body.append(f"    long long j = (long long){self._load(index, ii)};")
            body.append(f"    if (j < 0) j += {size}LL;")
            body.append(f"    if (j < 0 || j >= {size}LL) {_fail(t)}")
            xs = broadcast_strides(x, tuple(out.shape[d] if d != ax else x.shape[ax]
                                            for d in range(len(out.shape))))
            xs = tuple(x.strides[ax] if d == ax else xs[d] for d in range(len(out.shape)))
            xi = _offset(x.offset, xs, [("j" if d == ax else idx[d]) for d in range(len(idx))])
            body.append(f"    const {ctype(od)} v = (j >= 0 && j < {size}LL) ? "
                        f"{convert(self._load(x, xi), x.dtype, od)} : {literal(0, od)};")
            body.append("    " + self._store(out, oi, "v"))
        body.append("  }")
        self._kernel(t, node, "", [out] + list(ins), body, _grid(total), (BLOCK, 1, 1),
                     status=checked)

    def _check_indices(self, t, node):
        """An index op with an empty result: a kernel that only checks its indices (input 1)
        against the extent of x's axis, as the reference does."""
        x, index = (self.places[id(v)] for v in node.inputs[:2])
        size = x.shape[normalize_axes(node.attrs["axis"], len(x.shape))[0]]
        total = int(np.prod(index.shape, dtype=np.int64))
        body = [f"  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"i < {total}LL; i += (long long)blockDim.x * gridDim.x) {{"]
        idx = _unravel(body, "i", index.shape, "d")
        body.append(f"    const long long j = (long long)"
                    f"{self._load(index, _offset(index.offset, index.strides, idx))};")
        body.append(f"    if (j < -{size}LL || j >= {size}LL) {_fail(t)}")
        body.append("  }")
        self._kernel(t, node, "_check", [index], body, _grid(total), (BLOCK, 1, 1),
                     status=True)

    def _scatter_add(self, t, node, out: Place, ins):
        """index_add / put_along_axis: one thread per output element (o with o[ax] = k)
        starts from x[o] and visits the indices j along the axis in order, adding (or, for
        assign, taking) the value of each j whose index is k: numpy's sequential order."""
        x, index, val = ins
        op = node.op
        od = out.dtype
        c = ctype(od)
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        size = x.shape[ax]
        total = int(np.prod(out.shape, dtype=np.int64))
        body = [f"  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"i < {total}LL; i += (long long)blockDim.x * gridDim.x) {{"]
        idx = _unravel(body, "i", out.shape, "d")
        body.append(f"    {c} acc = "
                    f"{convert(self._load(x, _offset(x.offset, x.strides, idx)), x.dtype, od)};")
        if op == "index_add":
            loops = [(ax, "j", index.shape[0])]
            ii = _offset(index.offset, index.strides, ["j"])
            vs = val.strides
            vi = _offset(val.offset, vs, [("j" if d == ax else idx[d]) for d in range(len(idx))])
            add = True
        else:
            # NumPy's region: the indices' extent along the axis, elsewhere the larger of x's
            # and the indices' (x broadcast where it has 1). An x-broadcast dim is a loop of
            # its own: every index along it lands on x's one position there. The loops nest
            # in dim order, so the updates come in the region's row-major order (the last
            # assignment wins, additions in order, as the reference's loop)
            region = tuple(index.shape[d] if d == ax else max(out.shape[d], index.shape[d])
                           for d in range(len(out.shape)))
            loops = [(d, "j" if d == ax else f"b{d}", region[d]) for d in range(len(region))
                     if d == ax or out.shape[d] != region[d]]
            istr = broadcast_strides(index, region)
            istr = tuple(index.strides[ax] if d == ax else istr[d] for d in range(len(region)))
            vstr = broadcast_strides(val, region)
            if val.shape and len(val.shape) == len(region) and val.shape[ax] != 1:
                vstr = tuple(val.strides[ax] if d == ax else vstr[d] for d in range(len(region)))
            var = {d: v for d, v, _ in loops}
            sub = [var.get(d, idx[d]) for d in range(len(idx))]
            ii = _offset(index.offset, istr, sub)
            vi = _offset(val.offset, vstr, sub)
            add = node.attrs["reduce"] == "add"
        pad = "    "
        for _, v, n in loops:
            pad += "  "
            body.append(f"{pad[:-2]}for (long long {v} = 0; {v} < {n}LL; ++{v}) {{")
        body.append(f"{pad}long long k = (long long){self._load(index, ii)};")
        body.append(f"{pad}if (k < 0) k += {size}LL;")
        body.append(f"{pad}if (k < 0 || k >= {size}LL) {_fail(t)}")
        v = convert(self._load(val, vi), val.dtype, od)
        upd = (f"acc || {v}" if od == np.bool_ else f"acc + {v}") if add else v
        body.append(f"{pad}if (k == {idx[ax]}) acc = {upd};")
        for _ in loops:
            pad = pad[:-2]
            body.append(f"{pad}}}")
        body.append("    " + self._store(out, _offset(out.offset, out.strides, idx), "acc"))
        body.append("  }")
        self._kernel(t, node, "", [out] + list(ins), body, _grid(total), (BLOCK, 1, 1),
                     status=True)

    # -- convolution and pooling ------------------------------------------------------------------
    def _conv(self, t, node, out: Place, p0: Place, p1: Place):
        """Direct kernels, one thread per output element (r = i*sh + u*dh - ph):
          conv2d:       out[n,o,i,j] = sum_{c,u,v} x[n,c,r,q] w[o,c,u,v]
          grad_input:   gx[n,c,r,q]  = sum_{o,u,v: i integral, in range} g[n,o,i,j] w[o,c,u,v]
          grad_weight:  gw[o,c,u,v]  = sum_{n,i,j} g[n,o,i,j] x[n,c,r,q]
        accumulated in float64 for float32 (one rounding, as the cpu kernels)."""
        op = node.op
        (sh, sw), (dh, dw) = node.attrs["stride"], node.attrs["dilation"]
        ph, pw = leading_padding(node.attrs["padding"])
        dt = out.dtype
        x, w, g = conv_roles(op, out, p0, p1)
        nb, cin, h, wd = x.shape
        co, _, kh, kw = w.shape
        oh, ow = g.shape[2], g.shape[3]
        acc_d = np.dtype(np.float64) if kind(dt) == "f" else np.dtype(np.int64)
        acc = ctype(acc_d)
        total = int(np.prod(out.shape, dtype=np.int64))

        def ld(p, idx):
            return convert(self._load(p, _offset(p.offset, p.strides, idx)), p.dtype, acc_d)
        body = [f"  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"e < {total}LL; e += (long long)blockDim.x * gridDim.x) {{"]
        a, b_, c_, d_ = _unravel(body, "e", out.shape, "d")
        body.append(f"    {acc} acc = 0;")
        if op == "conv2d":
            body += [f"    for (long long c = 0; c < {cin}LL; ++c)",
                     f"    for (long long u = 0; u < {kh}LL; ++u) {{",
                     f"      const long long r = {c_} * {sh}LL + u * {dh}LL - {ph}LL;",
                     f"      if (r < 0 || r >= {h}LL) continue;",
                     f"      for (long long v = 0; v < {kw}LL; ++v) {{",
                     f"        const long long q = {d_} * {sw}LL + v * {dw}LL - {pw}LL;",
                     f"        if (q < 0 || q >= {wd}LL) continue;",
                     f"        acc += {ld(x, [a, 'c', 'r', 'q'])} * {ld(w, [b_, 'c', 'u', 'v'])};",
                     "      }", "    }"]
        elif op == "conv2d_grad_input":
            body += [f"    for (long long o = 0; o < {co}LL; ++o)",
                     f"    for (long long u = 0; u < {kh}LL; ++u) {{",
                     f"      const long long ri = {c_} + {ph}LL - u * {dh}LL;",
                     f"      if (ri < 0 || ri % {sh}LL != 0 || ri / {sh}LL >= {oh}LL) continue;",
                     f"      const long long i = ri / {sh}LL;",
                     f"      for (long long v = 0; v < {kw}LL; ++v) {{",
                     f"        const long long qj = {d_} + {pw}LL - v * {dw}LL;",
                     f"        if (qj < 0 || qj % {sw}LL != 0 || qj / {sw}LL >= {ow}LL) continue;",
                     f"        const long long j = qj / {sw}LL;",
                     f"        acc += {ld(g, [a, 'o', 'i', 'j'])} * {ld(w, ['o', b_, 'u', 'v'])};",
                     "      }", "    }"]
        else:
            body += [f"    for (long long n = 0; n < {nb}LL; ++n)",
                     f"    for (long long i = 0; i < {oh}LL; ++i) {{",
                     f"      const long long r = i * {sh}LL + {c_} * {dh}LL - {ph}LL;",
                     f"      if (r < 0 || r >= {h}LL) continue;",
                     f"      for (long long j = 0; j < {ow}LL; ++j) {{",
                     f"        const long long q = j * {sw}LL + {d_} * {dw}LL - {pw}LL;",
                     f"        if (q < 0 || q >= {wd}LL) continue;",
                     f"        acc += {ld(g, ['n', a, 'i', 'j'])} * {ld(x, ['n', b_, 'r', 'q'])};",
                     "      }", "    }"]
        body.append("    " + self._store(out, _offset(out.offset, out.strides, [a, b_, c_, d_]),
                                         "acc", acc_d))
        body.append("  }")
        self._kernel(t, node, "", [out, p0, p1], body, _grid(total), (BLOCK, 1, 1))

    def _window(self, node, x: Place, n, c, oh, ow, lines, indent):
        """Lines that visit each in-bounds input position of output (n, c, oh, ow)'s window
        in the reference's order, with `k` its element index in x (padding is -inf in the
        reference: it never wins, so it is skipped). Returns the closing lines."""
        kh, kw = node.attrs["kernel"]
        sh, sw = node.attrs["stride"]
        ph, pw = leading_padding(node.attrs["padding"])
        h, w = x.shape[2], x.shape[3]
        base = _offset(x.offset, x.strides[:2], [n, c])
        lines += [f"{indent}for (long long wi = 0; wi < {kh}LL; ++wi) {{",
                  f"{indent}  const long long r = {oh} * {sh}LL + wi - {ph}LL;",
                  f"{indent}  if (r < 0 || r >= {h}LL) continue;",
                  f"{indent}  for (long long wj = 0; wj < {kw}LL; ++wj) {{",
                  f"{indent}    const long long q = {ow} * {sw}LL + wj - {pw}LL;",
                  f"{indent}    if (q < 0 || q >= {w}LL) continue;",
                  f"{indent}    const long long k = {base} + r * {x.strides[2]}LL + "
                  f"q * {x.strides[3]}LL;"]
        return [f"{indent}  }}", f"{indent}}}"]

    def _max_pool(self, t, node, out: Place, x: Place):
        dt = x.dtype
        c = ctype(dt)
        total = int(np.prod(out.shape, dtype=np.int64))
        init = literal(-np.inf, dt) if kind(dt) == "f" else literal(np.iinfo(dt).min, dt)
        body = [f"  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"e < {total}LL; e += (long long)blockDim.x * gridDim.x) {{"]
        idx = _unravel(body, "e", out.shape, "d")
        body.append(f"    {c} m = {init};")
        close = self._window(node, x, *idx, body, "    ")
        body.append(f"        m = np_max(m, ({c}){self._load(x, 'k')});")
        body += close
        body.append("    " + self._store(out, _offset(out.offset, out.strides, idx), "m"))
        body.append("  }")
        self._kernel(t, node, "", [out, x], body, _grid(total), (BLOCK, 1, 1))

    def _max_pool_grad(self, t, node, out: Place, x: Place, g: Place):
        """gx[n,c,r,q] = the sum of g over the windows whose first maximum (numpy's argmax:
        the first NaN, else the first largest) is at (r, q): one thread per element of gx,
        visiting the windows that contain it."""
        kh, kw = node.attrs["kernel"]
        sh, sw = node.attrs["stride"]
        ph, pw = leading_padding(node.attrs["padding"])
        dt = out.dtype
        xd = x.dtype
        c = ctype(xd)
        oh, ow = g.shape[2], g.shape[3]
        total = int(np.prod(out.shape, dtype=np.int64))
        init = literal(-np.inf, xd) if kind(xd) == "f" else literal(np.iinfo(xd).min, xd)
        body = [f"  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                f"e < {total}LL; e += (long long)blockDim.x * gridDim.x) {{"]
        n, ch, rr, qq = _unravel(body, "e", out.shape, "d")
        self_k = _offset(x.offset, x.strides, [n, ch, rr, qq])
        body.append(f"    const long long self_k = {self_k};")
        body.append(f"    {ctype(dt)} acc = {literal(0, dt)};")
        body += [f"    for (long long pi = 0; pi < {oh}LL; ++pi) {{",
                 f"      const long long wr = {rr} + {ph}LL - pi * {sh}LL;",
                 f"      if (wr < 0 || wr >= {kh}LL) continue;",
                 f"      for (long long pj = 0; pj < {ow}LL; ++pj) {{",
                 f"        const long long wc = {qq} + {pw}LL - pj * {sw}LL;",
                 f"        if (wc < 0 || wc >= {kw}LL) continue;",
                 f"        {c} best = {init};",
                 "        long long where = -1;"]
        close = self._window(node, x, n, ch, "pi", "pj", body, "        ")
        body += [f"            const {c} v = {self._load(x, 'k')};",
                 "            if (where < 0 || v > best || (v != v && best == best)) "
                 "{ best = v; where = k; }"]
        body += close
        gi = _offset(g.offset, g.strides, [n, ch, "pi", "pj"])
        body += [f"        if (where == self_k) acc = acc + "
                 f"{convert(self._load(g, gi), g.dtype, dt)};",
                 "      }", "    }"]
        body.append("    " + self._store(out, _offset(out.offset, out.strides,
                                                      [n, ch, rr, qq]), "acc"))
        body.append("  }")
        self._kernel(t, node, "", [out, x, g], body, _grid(total), (BLOCK, 1, 1))


# Kernel family (the lowering table, `runtime/lowering/families.py`) -> the method that lowers
# a node of it. What this renderer lowers natively is these families and views (no code); the
# driver refuses communication on gpu before lowering (distributed=, see
# `Backend.distributed_refusal`); no op calls back into numpy.
LOWER_BY_FAMILY = F.lower_by_family(ModuleEmitter)
LOWERING = F.Lowering(frozenset(LOWER_BY_FAMILY) | {F.VIEW_FAMILY},
                      refused=frozenset({F.COMMUNICATION}))


def emit_module(graph, plan) -> GpuModule:
    """The CUDA C module and launch list of a planned graph (no device needed)."""
    return ModuleEmitter(graph, plan).module
