"""The native kernel of `argsort` (issue 24; the registry entry is compiler/ops/sort_ops.py).

A mixin of `emitter.ModuleEmitter`, like `index_kernels.py`. One row at a time (the ROW
family): a bottom-up merge sort of the row's indices, O(n log n) comparisons, stable by
construction (an element of the right run is taken only when it comes strictly before the
head of the left run). The passes ping-pong between the output row and the node's workspace
row (the registry's `scratch`: an int64 array of the output's shape, placed by the planner),
starting in whichever makes the last pass end in the output. The merge is branch-free: both
run heads are loaded (an exhausted run reads a safe position), one compare decides, selects
advance the heads.

Order (CONVENTIONS.md): NaN comes after every number; descending reverses the comparison but
not the stability (equal elements keep their order), so NaNs come first, in order. Keys are
compared in their own dtype (uint64 unsigned), read from `x` through the index.
"""
from __future__ import annotations

from llvmlite import ir

from compiler.ops.registry import normalize_axes
from runtime.lowering.layout import collapse
from runtime.lowering.places import Place, contiguous_strides

from . import loops as L
from .scalar import I64, load, store


class SortKernels:
    """`argsort` (see the module docstring)."""

    def _lower_argsort(self, t, node, out: Place, ins):
        x = ins[0]
        ws = self.plan.workspace[node]  # (out is not empty here: the workspace exists)
        tmp = Place(("arena", ws.id), 0, out.shape, contiguous_strides(out.shape), out.dtype)
        self._kernel(t, node, [out, x, tmp], lambda b, p: self._k_argsort(b, p, node, out, x,
                                                                            tmp))

    @staticmethod
    def _before(b, a, c, dtype, descending):
        """Does key `a` come strictly before key `c`? (NaN after every number.)"""
        if dtype.kind == "f":
            if descending:
                return b.or_(b.fcmp_ordered(">", a, c),
                             b.and_(b.fcmp_unordered("uno", a, a), b.fcmp_ordered("ord", c, c)))
            return b.or_(b.fcmp_ordered("<", a, c),
                         b.and_(b.fcmp_ordered("ord", a, a), b.fcmp_unordered("uno", c, c)))
        cmp = b.icmp_unsigned if dtype.kind == "u" else b.icmp_signed
        return cmp(">" if descending else "<", a, c)

    def _k_argsort(self, b, ptrs, node, out: Place, x: Place, tmp: Place):
        if not x.shape:  # a 0-d tensor is a row of one
            x = Place(x.slot, x.offset, (1,), (1,), x.dtype)
            out = Place(out.slot, out.offset, (1,), (1,), out.dtype)
            tmp = Place(tmp.slot, 0, (1,), (1,), tmp.dtype)
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        descending = bool(node.attrs["descending"])
        n = x.shape[ax]
        others = [d for d in range(len(x.shape)) if d != ax]
        oshape, (sx, so, sw) = collapse([x.shape[d] for d in others],
                                        [[x.strides[d] for d in others],
                                         [out.strides[d] for d in others],
                                         [tmp.strides[d] for d in others]])
        ax_x, ax_o, ax_w = x.strides[ax], out.strides[ax], tmp.strides[ax]
        passes = (n - 1).bit_length()       # ceil(log2 n) merge passes
        p_out, p_tmp = ptrs[out.slot], ptrs[tmp.slot]
        # allocas first, in the entry block (promoted to registers)
        head_i = b.alloca(I64, name="i")
        head_j = b.alloca(I64, name="j")
        z = L.i64(0)

        def at(ptr, base, stride, k):
            return L.elem_ptr(b, ptr, out.dtype, b.add(base, b.mul(k, stride)))

        def row(idxs):
            xo = L.index(b, x.offset, sx, idxs)
            bufs = [(p_out, L.index(b, out.offset, so, idxs), L.i64(ax_o)),
                    (p_tmp, L.index(b, tmp.offset, sw, idxs), L.i64(ax_w))]
            if passes % 2:   # an odd number of passes: start in the workspace, end in out
                bufs.reverse()
            (p0, o0, s0), (p1, o1, s1) = bufs
            with L.for_range(b, n, "init") as k:
                store(b, k, at(p0, o0, s0, k), out.dtype)
            if not passes:
                return
            with L.for_range(b, passes, "pass") as p:
                even = b.icmp_signed("==", b.and_(p, L.i64(1)), z)
                sp, so_, ss = b.select(even, p0, p1), b.select(even, o0, o1), \
                    b.select(even, s0, s1)
                dp, do, ds = b.select(even, p1, p0), b.select(even, o1, o0), \
                    b.select(even, s1, s0)
                w = b.shl(L.i64(1), p)
                w2 = b.shl(w, L.i64(1))
                nblk = b.udiv(b.add(L.i64(n - 1), w2), w2)
                with L.for_range(b, nblk, "blk") as blk:
                    lo = b.mul(blk, w2)
                    mid = _min(b, b.add(lo, w), L.i64(n))
                    hi = _min(b, b.add(lo, w2), L.i64(n))
                    b.store(lo, head_i)
                    b.store(mid, head_j)
                    with L.for_range(b, b.sub(hi, lo), "m") as c:
                        i, j = b.load(head_i, typ=I64), b.load(head_j, typ=I64)
                        i_ok = b.icmp_signed("<", i, mid)
                        j_ok = b.icmp_signed("<", j, hi)
                        ia = load(b, at(sp, so_, ss, b.select(i_ok, i, lo)), out.dtype)
                        ja = load(b, at(sp, so_, ss, b.select(j_ok, j, lo)), out.dtype)
                        ki = load(b, L.elem_ptr(b, ptrs[x.slot], x.dtype,
                                                b.add(xo, b.mul(ia, L.i64(ax_x)))), x.dtype)
                        kj = load(b, L.elem_ptr(b, ptrs[x.slot], x.dtype,
                                                b.add(xo, b.mul(ja, L.i64(ax_x)))), x.dtype)
                        right = b.and_(j_ok, b.or_(b.not_(i_ok),
                                                   self._before(b, kj, ki, x.dtype, descending)))
                        store(b, b.select(right, ja, ia), at(dp, do, ds, b.add(lo, c)),
                              out.dtype)
                        step = b.zext(right, I64)
                        b.store(b.add(j, step), head_j)
                        b.store(b.add(i, b.sub(L.i64(1), step)), head_i)
        L.loop_nest(b, oshape, row, "r")


def _min(b, a, c):
    return b.select(b.icmp_signed("<", a, c), a, c)

