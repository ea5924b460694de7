"""The native kernel of `argsort` (issue 24; the registry entry is compiler/ops/sort_ops.py).

A mixin of `emitter.ModuleEmitter`, like `index_kernels.py`. One row at a time (the ROW
family): a bottom-up merge sort of the row's indices, O(n log n) comparisons, stable by
construction (an element of the right run is taken only when it comes strictly before the
head of the left run). The row lives in the node's workspace (the registry's `scratch`, placed
by the planner; at least 3 rows of int64 words): a contiguous copy of its keys, then two
contiguous index rows the passes ping-pong between; the last pass's row is copied to the
output (whatever its strides). A sort along a strided axis thus reads each key from memory
once, not once per pass (measured under load: [1000, 1000] float32 along axis 0, 1.3 s
reading the keys in place, 0.3 s so). Rows share the one workspace, so they run one after
another (running rows in parallel would need a workspace per thread). The merge is
branch-free: both run heads are loaded (an exhausted run reads a safe position), one compare
decides, selects advance the heads.

Order (CONVENTIONS.md): NaN comes after every number; descending reverses the comparison but
not the stability (equal elements keep their order), so NaNs come first, in order. Keys are
compared in their own dtype (uint64 unsigned), read from the row's copy through the index.
"""
from __future__ import annotations

from compiler.ops.registry import dkind, normalize_axes
from runtime.lowering.layout import collapse
from runtime.lowering.places import Place

from . import loops as L
from .scalar import I64, load, store


class SortKernels:
    """`argsort` (see the module docstring)."""

    def _lower_argsort(self, t, node, out: Place, ins):
        x = ins[0]
        ws = self.plan.workspace[node]  # (out is not empty here: the workspace exists)
        tmp = Place(("arena", ws.id), 0, (ws.size // 8,), (1,), out.dtype)
        self._kernel(t, node, [out, x, tmp], lambda b, p: self._k_argsort(b, p, node, out, x,
                                                                            tmp))

    @staticmethod
    def _before(b, a, c, dtype, descending):
        """Does key `a` come strictly before key `c`? (NaN after every number.)"""
        if dkind(dtype) == "f":
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
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        descending = bool(node.attrs["descending"])
        n = x.shape[ax]
        others = [d for d in range(len(x.shape)) if d != ax]
        oshape, (sx, so) = collapse([x.shape[d] for d in others],
                                    [[x.strides[d] for d in others],
                                     [out.strides[d] for d in others]])
        ax_x, ax_o = x.strides[ax], out.strides[ax]
        passes = (n - 1).bit_length()       # ceil(log2 n) merge passes
        ws, xp = ptrs[tmp.slot], ptrs[x.slot]
        # the workspace, one row at a time: the row's keys, then two index rows (int64 words)
        key_words = -(-n * x.dtype.itemsize // 8)
        rows = (L.i64(key_words), L.i64(key_words + n))
        assert key_words + 2 * n <= tmp.shape[0], (n, tmp.shape)
        # allocas first, in the entry block (promoted to registers)
        head_i = b.alloca(I64, name="i")
        head_j = b.alloca(I64, name="j")

        def idx(off, k):
            return L.elem_ptr(b, ws, out.dtype, b.add(off, k))

        def key(k):
            return load(b, L.elem_ptr(b, ws, x.dtype, k), x.dtype)

        def row(idxs):
            xo = L.index(b, x.offset, sx, idxs)
            oo = L.index(b, out.offset, so, idxs)
            with L.for_range(b, n, "init") as k:
                v = load(b, L.elem_ptr(b, xp, x.dtype, b.add(xo, b.mul(k, L.i64(ax_x)))),
                         x.dtype)
                store(b, v, L.elem_ptr(b, ws, x.dtype, k), x.dtype)
                store(b, k, idx(rows[0], k), out.dtype)
            if passes:
                with L.for_range(b, passes, "pass") as p:
                    even = b.icmp_signed("==", b.and_(p, L.i64(1)), L.i64(0))
                    src = b.select(even, rows[0], rows[1])
                    dst = b.select(even, rows[1], rows[0])
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
                            ia = load(b, idx(src, b.select(i_ok, i, lo)), out.dtype)
                            ja = load(b, idx(src, b.select(j_ok, j, lo)), out.dtype)
                            before = self._before(b, key(ja), key(ia), x.dtype, descending)
                            right = b.and_(j_ok, b.or_(b.not_(i_ok), before))
                            store(b, b.select(right, ja, ia), idx(dst, b.add(lo, c)),
                                  out.dtype)
                            step = b.zext(right, I64)
                            b.store(b.add(j, step), head_j)
                            b.store(b.add(i, b.sub(L.i64(1), step)), head_i)
            done = rows[passes % 2]
            with L.for_range(b, n, "copy") as k:
                store(b, load(b, idx(done, k), out.dtype),
                      L.elem_ptr(b, ptrs[out.slot], out.dtype,
                                 b.add(oo, b.mul(k, L.i64(ax_o)))), out.dtype)
        L.loop_nest(b, oshape, row, "r")


def _min(b, a, c):
    return b.select(b.icmp_signed("<", a, c), a, c)

