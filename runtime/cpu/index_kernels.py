"""Native kernels for issue 10's scans, gathers, scatters and order-sensitive reductions.

A mixin of `emitter.ModuleEmitter` (kept in its own module so that the kernels of the core
emitter and these evolve apart). Each `_k_<op>(b, ptrs, node, out, *ins)` fills a kernel body
as the emitter's own kernels do: `ptrs` maps a buffer slot to its `noalias` pointer, places
give offsets and strides in elements.

What they promise, against the registry's `ref` (the numpy reference):

  - `prod`: folded in the output dtype in the reference's order (each output element takes
    its reduced elements in row-major order, NumPy's for row-major inputs: a sequential
    product, since NumPy's multiply-reduce is not pairwise), so bit-identical there. When the
    kept dims are innermost in memory (a column product) the output is updated row by row
    (NumPy's own order), which vectorises across the row;
  - `min`: the same loops with `llvm.minimum` (NaN propagates, as `np.minimum`): its result
    does not depend on the order, so LLVM vectorises the reduction; exact, except that -0.0
    counts below +0.0 (NumPy returns either of two equal zeros);
  - `argmax`, `argmin`: NumPy's rules: the first extreme wins a tie, the first NaN wins over
    everything (NaN counts as the extreme), `axis=None` indexes the row-major flattening. Along
    a contiguous run: the extreme (a vectorised reduction), then the first position holding it
    (32 bytes per compare); over outer axes: chunks of 256 columns updated row by row; else
    one compare-and-select chain;
  - `cumsum`: sequential in the output dtype (NumPy's `add.accumulate`: bit-identical), along a
    row held in a register when the axis is innermost, else slab by slab (`out[i] = out[i-1] +
    x[i]`, the same additions, vectorised across the slab);
  - `index_select`, `index_add`, `take_along_axis`, `put_along_axis`: negative indices count
    from the end; `index_add` and `put_along_axis(reduce="add")` add in the order of the
    indices (as `np.add.at`: repeated indices accumulate in that order, bit-identical), and
    `put_along_axis(reduce="assign")` writes in row-major order of the indexed region, so with
    repeated indices the last write wins (NumPy).

Index range (ARCHITECTURE.md §4: native code never traps and never reads out of bounds): a checked
kernel first ORs together "out of range" over every index (a loop without an early exit, so it
vectorises) and returns 1, having written nothing, when any is outside `[-n, n)` (or a computed
one-hot label outside `[0, classes)` that isn't `ignore_index`); the entry then returns the
node's number and the driver re-runs that node's reference on its untouched operands, which
raises the very `DataError` the numpy backend raises. Only after the check does a kernel
write, so the wrap `k < 0 ? k + n : k` is all the indexing needs.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from compiler.ops.registry import dkind, is_half, normalize_axes
from runtime.lowering.layout import broadcast_strides, collapse
from runtime.lowering.places import Place

from . import loops as L
from .scalar import (I1, I64, constant, convert, intrinsic2, ll_type, load, mem_type,
                     select_max, store)

# Ops whose kernel checks its indices and returns a status (the entry tests it).
CHECKED_OPS = frozenset({"index_select", "index_add", "take_along_axis", "put_along_axis"})


class IndexKernels:
    """Kernels of the ops above (see the module docstring)."""

    def _index_kernel(self, node):
        """The kernel method for `node`, or None when it is not one of these ops."""
        op = node.op
        if op in ("min", "prod"):
            return self._k_fold
        if op in ("argmax", "argmin"):
            return self._k_arg
        if op == "one_hot":
            return self._k_one_hot_checked if self._checked(node) else None
        return getattr(self, f"_k_{op}", None) if op in CHECKED_OPS | {"cumsum"} else None

    def _index_split(self, node, out: Place, ins):
        """split= (`emitter._kernel`) for the index kernels that run in parallel chunks:
        cumsum along an inner axis (its rows); None for the others."""
        if node.op != "cumsum" or not ins[0].shape:
            return None
        x = ins[0]
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        others = [d for d in range(len(x.shape)) if d != ax]
        oshape, (_, so) = collapse([x.shape[d] for d in others],
                                   [[x.strides[d] for d in others],
                                    [out.strides[d] for d in others]])
        if not oshape or min(map(abs, so)) < abs(out.strides[ax]):
            return None  # (the axis is outer: slab by slab, serial)
        inner = int(np.prod(oshape[1:], dtype=np.int64)) if len(oshape) > 1 else 1
        return oshape[0], inner * x.shape[ax]

    def _checked(self, node) -> bool:
        """Does the kernel of `node` check data (and return a status)? Index ops always (their
        reference always does); one_hot when its labels are computed in the program (a
        caller's labels are checked by the driver at the call's entry)."""
        return node.op in CHECKED_OPS or (node.op == "one_hot"
                                          and node in self.checked_while_running)

    # -- helpers -------------------------------------------------------------------------------
    def _at(self, b, ptrs, p: Place, offset):
        return L.elem_ptr(b, ptrs[p.slot], p.dtype, offset)

    def _index_value(self, b, ptrs, p: Place, offset):
        """An integer index element as an i64 (unsigned dtypes zero-extended)."""
        v = load(b, self._at(b, ptrs, p, offset), p.dtype)
        if p.dtype.kind == "u" and p.dtype.itemsize < 8:
            return b.zext(v, I64)
        return convert(b, v, p.dtype, np.int64) if p.dtype.kind == "i" else v

    def _check_range(self, b, ptrs, p: Place, lo, hi, ignore=None):
        """Return 1 from the kernel when an element of `p` lies outside [lo, hi) (and is not
        `ignore`). An OR over all of them, then one test: the loop has no early exit."""
        if p.shape and 0 in p.shape:
            return
        flag = b.alloca(I1, name="bad")
        b.store(ir_false(), flag)
        shape, (st,) = collapse(p.shape, [p.strides])

        def body(idxs):
            v = self._index_value(b, ptrs, p, L.index(b, p.offset, st, idxs))
            bad = b.or_(b.icmp_signed("<", v, L.i64(lo)), b.icmp_signed(">=", v, L.i64(hi)))
            if ignore is not None:
                bad = b.and_(bad, b.icmp_signed("!=", v, L.i64(ignore)))
            b.store(b.or_(b.load(flag, typ=I1), bad), flag)
        L.loop_nest(b, shape, body, "chk")
        with b.if_then(b.load(flag, typ=I1), likely=False):
            b.ret(L.i64(1))

    def _wrapped(self, b, ptrs, p: Place, offset, n: int):
        """The index at `offset` of `p`, negative values counted from the end of an axis of
        `n` (the range check has run)."""
        v = self._index_value(b, ptrs, p, offset)
        return b.select(b.icmp_signed("<", v, L.i64(0)), b.add(v, L.i64(n)), v)

    @staticmethod
    def _extreme(b, a, v, dt, is_max):
        """max / min with NaN propagating. Floats use `llvm.maximum`/`minimum` (NaN-propagating
        like np.maximum; they order -0.0 below +0.0, where NumPy keeps either: equal values),
        which LLVM vectorises as a reduction, unlike a compare-and-select chain."""
        if dkind(dt) == "f":
            return intrinsic2(b, "maximum" if is_max else "minimum", a, v)
        return select_max(b, a, v, dt, is_max)

    @staticmethod
    def _combine_add(b, a, v, dt):
        if dkind(dt) == "f":
            return b.fadd(a, v)
        return b.or_(a, v) if dt.kind == "b" else b.add(a, v)

    # -- ordered reductions: min, prod -----------------------------------------------------------
    def _k_fold(self, b, ptrs, node, out: Place, x: Place):
        """min / prod over any axes, in the reference's order (module docstring)."""
        nd = len(x.shape)
        axes = [a for a in normalize_axes(node.attrs.get("axis"), nd) if a < nd]
        keepdim = node.attrs.get("keepdim", False)
        ostr, k = [], 0
        for d in range(nd):
            if d in axes:
                ostr.append(0)
                k += keepdim
            else:
                ostr.append(out.strides[k])
                k += 1
        kept = [d for d in range(nd) if d not in axes]
        kshape, (kx, ko) = collapse([x.shape[d] for d in kept],
                                      [[x.strides[d] for d in kept], [ostr[d] for d in kept]])
        rshape, (rx,) = collapse([x.shape[d] for d in axes], [[x.strides[d] for d in axes]])
        xd, od = x.dtype, out.dtype
        if node.op == "prod":
            init = constant(1, od)

            def combine(a, v):
                return b.fmul(a, v) if dkind(od) == "f" else b.mul(a, v)
        else:  # min: NaN propagates, as np.minimum
            init = (constant(np.inf, od) if dkind(od) == "f" else constant(True, od)
                    if od.kind == "b" else constant(np.iinfo(od).max, od))

            def combine(a, v):
                return self._extreme(b, a, v, od, False)

        def xval(off):
            return convert(b, load(b, self._at(b, ptrs, x, off), xd), xd, od)

        if kshape and rshape and min(map(abs, kx)) < min(map(abs, rx)) \
                and not (is_half(od) and node.op == "prod"):
            # kept dims innermost: update the output row by row (vectorises across the row;
            # not a 16-bit float's product, whose stored partial products would be rounded)
            def at_out(kidx):
                return self._at(b, ptrs, out, L.index(b, out.offset, ko, kidx))
            L.loop_nest(b, kshape, lambda kidx: store(b, init, at_out(kidx), od), "i")

            def row(ridx):
                roff = L.index(b, x.offset, rx, ridx)

                def inner(kidx):
                    p = at_out(kidx)
                    store(b, combine(load(b, p, od), xval(b.add(roff, L.index(b, 0, kx, kidx)))),
                          p, od)
                L.loop_nest(b, kshape, inner, "k")
            L.loop_nest(b, rshape, row, "r")
            return
        acc = b.alloca(ll_type(od), name="acc")

        def outer(kidx):
            b.store(init, acc)
            xoff = L.index(b, x.offset, kx, kidx)
            L.loop_nest(b, rshape, lambda ridx: b.store(combine(
                b.load(acc, typ=ll_type(od)), xval(b.add(xoff, L.index(b, 0, rx, ridx)))),
                acc), "r")
            store(b, b.load(acc, typ=ll_type(od)),
                  self._at(b, ptrs, out, L.index(b, out.offset, ko, kidx)), od)
        L.loop_nest(b, kshape, outer, "o")

    # -- argmax / argmin ------------------------------------------------------------------
    def _k_arg(self, b, ptrs, node, out: Place, x: Place):
        """The position of the first extreme along one axis (or of the row-major flattening
        for axis=None); a NaN is the extreme, its first occurrence wins."""
        nd = len(x.shape)
        axis = node.attrs.get("axis")
        axes = [a for a in normalize_axes(axis, nd) if a < nd]
        kept = [d for d in range(nd) if d not in axes]
        if axis is None or node.attrs.get("keepdim"):
            # out is x's kept dims (axis=None: 0-d, or all ones with keepdim)
            ko = [out.strides[d] for d in kept] if node.attrs.get("keepdim") else []
        else:
            ko = list(out.strides)
        kx = [x.strides[d] for d in kept]
        dt = x.dtype
        is_max = node.op == "argmax"
        rshape, (rx,) = collapse([x.shape[d] for d in axes], [[x.strides[d] for d in axes]])
        kshape, (kxc, koc) = collapse([x.shape[d] for d in kept],
                                        [[x.strides[d] for d in kept], ko])
        if len(rshape) == 1 and len(kshape) == 1 and abs(kxc[0]) < abs(rx[0]):
            self._arg_columns(b, ptrs, out, x, kshape[0], kxc[0], koc[0], rshape[0], rx[0],
                              is_max)
            return
        if len(rshape) == 1:
            self._arg_two_pass(b, ptrs, out, x, kept, ko, rshape[0], rx[0], is_max)
            return
        best = b.alloca(ll_type(dt), name="best")
        where = b.alloca(I64, name="where")
        count = b.alloca(I64, name="j")

        def step(v):
            j = b.load(count, typ=I64)
            cur = b.load(best, typ=ll_type(dt))
            better = self._better(b, v, cur, dt, is_max)
            take = b.or_(b.icmp_signed("==", j, L.i64(0)), better)
            b.store(b.select(take, v, cur), best)
            b.store(b.select(take, j, b.load(where, typ=I64)), where)
            b.store(b.add(j, L.i64(1)), count)

        def outer(kidx):
            b.store(L.i64(0), count)
            b.store(L.i64(0), where)
            xoff = L.index(b, x.offset, kx, kidx)
            L.loop_nest(b, [x.shape[d] for d in axes], lambda ridx: step(load(
                b, self._at(b, ptrs, x, b.add(xoff, L.index(b, 0, [x.strides[d] for d in axes],
                                                             ridx))), dt)), "r")
            store(b, b.load(where, typ=I64),
                  self._at(b, ptrs, out, L.index(b, out.offset, ko, kidx)), out.dtype)
        L.loop_nest(b, [x.shape[d] for d in kept], outer, "o")

    @staticmethod
    def _better(b, v, cur, dt, is_max):
        """Does `v` beat the best so far `cur`? Strictly (the first extreme stays); a NaN
        beats every number and the first NaN stays (NaN > NaN is false)."""
        if dkind(dt) == "f":
            better = b.fcmp_ordered(">" if is_max else "<", v, cur)
            return b.or_(better, b.and_(b.fcmp_unordered("uno", v, v),
                                        b.fcmp_ordered("ord", cur, cur)))
        if dt.kind == "i":
            return b.icmp_signed(">" if is_max else "<", v, cur)
        return b.icmp_unsigned(">" if is_max else "<", v, cur)  # bool, unsigned

    def _arg_columns(self, b, ptrs, out, x, k, kx, ko, n, rx, is_max):
        """argmax/argmin of `k` columns of `n` rows, the columns innermost in memory (an
        argmax over axis 0): the best value and position of a chunk of columns live in two
        small stack arrays, updated row by row, so each row update is a contiguous,
        vectorisable loop instead of `k` strided scans."""
        dt = x.dtype
        chunk = 256
        best = b.alloca(mem_type(dt), size=chunk, name="bestv")
        where = b.alloca(I64, size=chunk, name="wherev")

        def bp(lane):
            return b.gep(best, [lane], inbounds=True, source_etype=mem_type(dt))

        def wp(lane):
            return b.gep(where, [lane], inbounds=True, source_etype=I64)

        def xv(row, col):
            return load(b, self._at(b, ptrs, x, b.add(L.i64(x.offset), b.add(
                b.mul(row, L.i64(rx)), b.mul(col, L.i64(kx))))), dt)
        with L.for_range(b, -(-k // chunk), "c") as c:
            base = b.mul(c, L.i64(chunk))
            rest = b.sub(L.i64(k), base)
            m = b.select(b.icmp_signed("<", rest, L.i64(chunk)), rest, L.i64(chunk))
            with L.for_range(b, m, "l") as lane:
                store(b, xv(L.i64(0), b.add(base, lane)), bp(lane), dt)
                b.store(L.i64(0), wp(lane))
            with L.for_range(b, n - 1, "r") as r0:
                r = b.add(r0, L.i64(1))
                with L.for_range(b, m, "l") as lane:
                    v, cur = xv(r, b.add(base, lane)), load(b, bp(lane), dt)
                    better = self._better(b, v, cur, dt, is_max)
                    store(b, b.select(better, v, cur), bp(lane), dt)
                    b.store(b.select(better, r, b.load(wp(lane), typ=I64)), wp(lane))
            with L.for_range(b, m, "l") as lane:
                store(b, b.load(wp(lane), typ=I64), self._at(b, ptrs, out, b.add(
                    L.i64(out.offset), b.mul(b.add(base, lane), L.i64(ko)))), out.dtype)

    def _arg_two_pass(self, b, ptrs, out, x, kept, ko, n, stride, is_max):
        """argmax/argmin over one (collapsed) run of `n` elements: first the extreme, a
        reduction LLVM vectorises (NaN propagates: a NaN is the extreme), then the first
        position holding it (the first NaN when it is NaN), a loop that stops there. The
        one-pass compare-and-select chain runs at its latency, several times slower."""
        dt = x.dtype
        t = ll_type(dt)
        acc = b.alloca(t, name="ext")
        res = b.alloca(I64, name="pos")
        kx = [x.strides[d] for d in kept]
        # the search compares 32 bytes at a time where the run is contiguous
        # (not a 16-bit float's: its register type is float32, its memory i16)
        lanes = 32 // dt.itemsize if stride == 1 and dt.kind in "fiu" and not is_half(dt) \
            else 0
        blocks = n // lanes if lanes else 0
        if dkind(dt) == "f":
            init = constant(-np.inf if is_max else np.inf, dt)
        elif dt.kind == "b":
            init = constant(not is_max, dt)
        else:
            info = np.iinfo(dt)
            init = constant(info.min if is_max else info.max, dt)

        def outer(kidx):
            xoff = L.index(b, x.offset, kx, kidx)

            def at(j):
                return load(b, self._at(b, ptrs, x, b.add(xoff, b.mul(j, L.i64(stride)))), dt)
            b.store(init, acc)
            with L.for_range(b, n, "r") as j:
                b.store(self._extreme(b, b.load(acc, typ=t), at(j), dt, is_max), acc)
            m = b.load(acc, typ=t)

            def hit(v, m):  # v holds the extreme m (a NaN when m is one)
                if dkind(dt) != "f":
                    return b.icmp_unsigned("==", v, m)
                return b.select(b.fcmp_unordered("uno", m, m), b.fcmp_unordered("uno", v, v),
                                b.fcmp_ordered("==", v, m))
            fn = b.function
            after = fn.append_basic_block("found")
            if blocks:
                # whole blocks: a vector compare, the first set lane (cttz) of a hit
                vt = ir.VectorType(t, lanes)
                mv = ir.Constant(vt, None)
                for k in range(lanes):
                    mv = b.insert_element(mv, m, L.i64(k))
                pre = b.block
                vhead, vbody, vhit, vdone = (fn.append_basic_block(f"vfind.{k}")
                                             for k in ("head", "body", "hit", "done"))
                b.branch(vhead)
                b.position_at_end(vhead)
                q = b.phi(I64, name="q")
                q.add_incoming(L.i64(0), pre)
                b.cbranch(b.icmp_signed("<", q, L.i64(blocks)), vbody, vdone)
                b.position_at_end(vbody)
                vec = b.load(self._at(b, ptrs, x, b.add(xoff, b.mul(q, L.i64(lanes)))), typ=vt)
                vec.align = dt.itemsize
                mask = b.bitcast(hit(vec, mv), ir.IntType(lanes))
                q.add_incoming(b.add(q, L.i64(1)), vbody)
                b.cbranch(b.icmp_unsigned("!=", mask, ir.Constant(mask.type, 0)), vhit, vhead)
                b.position_at_end(vhit)
                cttz = self.module.globals.get(f"llvm.cttz.i{lanes}") or ir.Function(
                    self.module, ir.FunctionType(mask.type, [mask.type, I1]),
                    f"llvm.cttz.i{lanes}")
                lane = b.zext(b.call(cttz, [mask, ir.Constant(I1, 1)]), I64)
                b.store(b.add(b.mul(q, L.i64(lanes)), lane), res)
                b.branch(after)
                b.position_at_end(vdone)
            # the rest one by one; the loop stops at n - 1 at the latest (the extreme is there)
            pre = b.block
            head, body, done = (fn.append_basic_block(f"find.{k}")
                                for k in ("head", "body", "done"))
            b.branch(head)
            b.position_at_end(head)
            j = b.phi(I64, name="j")
            j.add_incoming(L.i64(blocks * lanes), pre)
            b.cbranch(b.icmp_signed("<", j, L.i64(n - 1)), body, done)
            b.position_at_end(body)
            j.add_incoming(b.add(j, L.i64(1)), body)
            b.cbranch(hit(at(j), m), done, head)
            b.position_at_end(done)
            b.store(j, res)
            b.branch(after)
            b.position_at_end(after)
            store(b, b.load(res, typ=I64),
                  self._at(b, ptrs, out, L.index(b, out.offset, ko, kidx)), out.dtype)
        L.loop_nest(b, [x.shape[d] for d in kept], outer, "o")

    # -- cumsum --------------------------------------------------------------------------------
    def _k_cumsum(self, b, ptrs, node, out: Place, x: Place):
        od, xd = out.dtype, x.dtype
        if not x.shape:  # a 0-d scan is a cast
            self._copy(b, ptrs, out, x)
            return
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        n = x.shape[ax]
        others = [d for d in range(len(x.shape)) if d != ax]
        oshape, (sx, so) = collapse([x.shape[d] for d in others],
                                      [[x.strides[d] for d in others],
                                       [out.strides[d] for d in others]])
        ax_x, ax_o = x.strides[ax], out.strides[ax]

        def xval(off):
            return convert(b, load(b, self._at(b, ptrs, x, off), xd), xd, od)

        if oshape and min(map(abs, so)) < abs(ax_o) and not is_half(od):
            # the axis is outer: slab by slab, out[i] = out[i-1] + x[i] (vectorised per slab;
            # not for a 16-bit float, whose stored running sums are rounded: its rows keep the
            # sum in a float32 register)
            def first(idxs):
                store(b, xval(L.index(b, x.offset, sx, idxs)),
                      self._at(b, ptrs, out, L.index(b, out.offset, so, idxs)), od)
            if n:
                L.loop_nest(b, oshape, first, "f")
            with L.for_range(b, max(n - 1, 0), "i") as i0:
                i = b.add(i0, L.i64(1))

                def slab(idxs):
                    xo = b.add(L.index(b, x.offset, sx, idxs), b.mul(i, L.i64(ax_x)))
                    oo = b.add(L.index(b, out.offset, so, idxs), b.mul(i, L.i64(ax_o)))
                    prev = load(b, self._at(b, ptrs, out, b.sub(oo, L.i64(ax_o))), od)
                    store(b, self._combine_add(b, prev, xval(xo), od),
                          self._at(b, ptrs, out, oo), od)
                L.loop_nest(b, oshape, slab, "s")
            return
        acc = b.alloca(ll_type(od), name="run")

        def row(idxs):
            xo = L.index(b, x.offset, sx, idxs)
            oo = L.index(b, out.offset, so, idxs)
            b.store(constant(0, od), acc)
            with L.for_range(b, n, "i") as i:
                v = xval(b.add(xo, b.mul(i, L.i64(ax_x))))
                # (0 + x0 is x0 bit for bit, -0.0 aside: numpy's first element is x0 itself)
                r = b.select(b.icmp_signed("==", i, L.i64(0)), v,
                             self._combine_add(b, b.load(acc, typ=ll_type(od)), v, od))
                b.store(r, acc)
                store(b, r, self._at(b, ptrs, out, b.add(oo, b.mul(i, L.i64(ax_o)))), od)
        L.loop_nest(b, oshape, row, "o")

    # -- gathers and scatters ----------------------------------------------------------------
    def _k_index_select(self, b, ptrs, node, out: Place, x: Place, idx: Place):
        """out[pre, i, post] = x[pre, wrap(idx[i]), post]."""
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        n = x.shape[ax]
        self._check_range(b, ptrs, idx, -n, n)
        pshape, (px, po) = collapse(out.shape[ax + 1:], [x.strides[ax + 1:],
                                                           out.strides[ax + 1:]])

        def pre(o):
            xb = L.index(b, x.offset, x.strides[:ax], o)
            ob = L.index(b, out.offset, out.strides[:ax], o)
            with L.for_range(b, out.shape[ax], "i") as i:
                k = self._wrapped(b, ptrs, idx, b.add(L.i64(idx.offset),
                                                      b.mul(i, L.i64(idx.strides[0]))), n)
                xo = b.add(xb, b.mul(k, L.i64(x.strides[ax])))
                oo = b.add(ob, b.mul(i, L.i64(out.strides[ax])))
                L.loop_nest(b, pshape, lambda p: store(
                    b, load(b, self._at(b, ptrs, x, b.add(xo, L.index(b, 0, px, p))), x.dtype),
                    self._at(b, ptrs, out, b.add(oo, L.index(b, 0, po, p))), out.dtype), "p")
        L.loop_nest(b, out.shape[:ax], pre, "q")

    def _k_index_add(self, b, ptrs, node, out: Place, x: Place, idx: Place, val: Place):
        """out = x; out[pre, wrap(idx[i]), post] += val[pre, i, post], i in order."""
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        n = x.shape[ax]
        self._check_range(b, ptrs, idx, -n, n)
        self._copy(b, ptrs, out, x)
        od = out.dtype
        pshape, (pv, po) = collapse(val.shape[ax + 1:], [val.strides[ax + 1:],
                                                           out.strides[ax + 1:]])

        def pre(o):
            vb = L.index(b, val.offset, val.strides[:ax], o)
            ob = L.index(b, out.offset, out.strides[:ax], o)
            with L.for_range(b, val.shape[ax], "i") as i:
                k = self._wrapped(b, ptrs, idx, b.add(L.i64(idx.offset),
                                                      b.mul(i, L.i64(idx.strides[0]))), n)
                vo = b.add(vb, b.mul(i, L.i64(val.strides[ax])))
                oo = b.add(ob, b.mul(k, L.i64(out.strides[ax])))

                def add(p):
                    dst = self._at(b, ptrs, out, b.add(oo, L.index(b, 0, po, p)))
                    v = convert(b, load(b, self._at(b, ptrs, val, b.add(vo, L.index(b, 0, pv, p))),
                                        val.dtype), val.dtype, od)
                    store(b, self._combine_add(b, load(b, dst, od), v, od), dst, od)
                L.loop_nest(b, pshape, add, "p")
        L.loop_nest(b, val.shape[:ax], pre, "q")

    def _along(self, node, x: Place, idx: Place, region):
        """(axis, x strides over `region` with the axis' stride kept apart, idx strides over
        `region`). A dim of size 1 in x is broadcast (stride 0): never addressed past its end."""
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        xs = [0 if (d != ax and x.shape[d] == 1) else s for d, s in enumerate(x.strides)]
        return ax, xs, broadcast_strides(idx, region)

    def _k_take_along_axis(self, b, ptrs, node, out: Place, x: Place, idx: Place):
        """out[s] = x[s with the axis' position replaced by wrap(idx[s])]."""
        ax, xs, ist = self._along(node, x, idx, out.shape)
        n = x.shape[ax]
        self._check_range(b, ptrs, idx, -n, n)
        other = [s if d != ax else 0 for d, s in enumerate(xs)]

        def body(s):
            k = self._wrapped(b, ptrs, idx, L.index(b, idx.offset, ist, s), n)
            xo = b.add(L.index(b, x.offset, other, s), b.mul(k, L.i64(xs[ax])))
            store(b, load(b, self._at(b, ptrs, x, xo), x.dtype),
                  self._at(b, ptrs, out, L.index(b, out.offset, out.strides, s)), out.dtype)
        L.loop_nest(b, out.shape, body)

    def _k_put_along_axis(self, b, ptrs, node, out: Place, x: Place, idx: Place, val: Place):
        """out = x; then over the indexed region in row-major order, out[s with the axis'
        position replaced by wrap(idx[s])] = val[s] (or += for reduce="add")."""
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        region = tuple(idx.shape[d] if d == ax else max(x.shape[d], idx.shape[d])
                       for d in range(len(x.shape)))
        _, os_, ist = self._along(node, out, idx, region)
        n = x.shape[ax]
        self._check_range(b, ptrs, idx, -n, n)
        self._copy(b, ptrs, out, x)
        if 0 in region:
            return
        vs = broadcast_strides(val, region)
        other = [s if d != ax else 0 for d, s in enumerate(os_)]
        od = out.dtype
        add = node.attrs["reduce"] == "add"

        def body(s):
            k = self._wrapped(b, ptrs, idx, L.index(b, idx.offset, ist, s), n)
            dst = self._at(b, ptrs, out, b.add(L.index(b, out.offset, other, s),
                                               b.mul(k, L.i64(os_[ax]))))
            v = convert(b, load(b, self._at(b, ptrs, val, L.index(b, val.offset, vs, s)),
                                val.dtype), val.dtype, od)
            if add:
                v = self._combine_add(b, load(b, dst, od), v, od)
            store(b, v, dst, od)
        L.loop_nest(b, region, body)

    # -- one_hot of computed labels -------------------------------------------------------
    def _k_one_hot_checked(self, b, ptrs, node, out: Place, labels: Place):
        """one_hot whose labels the program computed: their range is checked here (labels
        from the caller are checked by the driver before the run)."""
        ignore = node.attrs.get("ignore_index")
        self._check_range(b, ptrs, labels, 0, node.attrs["num_classes"], ignore)
        self._one_hot(b, ptrs, out, labels, ignore)


def ir_false():
    return constant(False, np.bool_)
