"""Row and window kernels of the cpu backend: softmax / log_softmax row by row (three passes,
the sum in float64), conv2d and both its gradients, max_pool2d and its gradient, as direct
loops in the reference's order.

A mixin of `emitter.ModuleEmitter`, as `index_kernels.py` is: each method fills a kernel body
with the emitter's helpers; `ptrs` maps a buffer slot to its pointer, places give offsets and
strides in elements.
"""
from __future__ import annotations

import numpy as np

from compiler.ops.registry import compute_dtype, dkind, is_half, normalize_axes

from runtime.lowering.layout import conv_roles, leading_padding
from runtime.lowering.places import Place

from .loops import elem_ptr, for_range, i64, index, loop_nest
from .mathlib import intrinsic2
from .scalar import (F64, I64, constant, convert, fast_exp, libm,
                     ll_type, load, select_max, store)


class WindowKernels:
    """The row and conv-pool families' kernels (`runtime/lowering/families.py`)."""

    # -- row-wise ----------------------------------------------------------------------------
    def _softmax(self, b, ptrs, node, out: Place, x: Place):
        """Three passes per row, as the reference: max, sum of exp(x - max), normalise.
        The sum accumulates in float64 and is rounded to the dtype once."""
        if not x.shape:  # a 0-d input is one row of one element
            x = Place(x.slot, x.offset, (1,), (1,), x.dtype)
            out = Place(out.slot, out.offset, (1,), (1,), out.dtype)
        ax = normalize_axes(node.attrs["axis"], len(x.shape))[0]
        dt = x.dtype
        # A 16-bit float row computes in float32 and rounds once at the store: its exps are
        # computed again in the last pass rather than kept (rounded) in the output.
        cd, half = compute_dtype(dt), is_half(dt)
        t = ll_type(cd)
        others = [d for d in range(len(x.shape)) if d != ax]
        n, sx, so = x.shape[ax], x.strides[ax], out.strides[ax]
        mx, sm = b.alloca(t, name="max"), b.alloca(F64, name="sum")
        log = node.op == "log_softmax"

        def row(idxs):
            xo = index(b, x.offset, [x.strides[d] for d in others], idxs)
            oo = index(b, out.offset, [out.strides[d] for d in others], idxs)

            def xat(j):
                return load(b, elem_ptr(b, ptrs[x.slot], dt, b.add(xo, b.mul(j, i64(sx)))), dt)

            def oat(j):
                return elem_ptr(b, ptrs[out.slot], dt, b.add(oo, b.mul(j, i64(so))))
            b.store(constant(-np.inf, cd), mx)
            with for_range(b, n, "j") as j:
                # (softmax: llvm.maximum, NaN-propagating as select_max, vectorises; only
                # the max's zero sign may differ, which exp(x - max) doesn't see)
                b.store(intrinsic2(b, "maximum", b.load(mx, typ=t), xat(j)) if not log else
                        select_max(b, b.load(mx, typ=t), xat(j), cd), mx)
            m = b.load(mx, typ=t)
            b.store(constant(0.0, np.float64), sm)
            with for_range(b, n, "j") as j:
                e = fast_exp(b, b.fsub(xat(j), m))
                if not log and not half:
                    store(b, e, oat(j), dt)
                b.store(b.fadd(b.load(sm, typ=F64), convert(b, e, cd, np.float64),
                               flags=["reassoc"]), sm)
            s = convert(b, b.load(sm, typ=F64), np.float64, cd)
            if log:
                lse = libm(b, "log", s)
                with for_range(b, n, "j") as j:
                    store(b, b.fsub(b.fsub(xat(j), m), lse), oat(j), dt)
            elif half:
                with for_range(b, n, "j") as j:
                    store(b, b.fdiv(fast_exp(b, b.fsub(xat(j), m)), s), oat(j), dt)
            else:
                with for_range(b, n, "j") as j:
                    store(b, b.fdiv(b.load(oat(j), typ=t), s), oat(j), dt)
        loop_nest(b, [x.shape[d] for d in others], row, "o")

    # -- convolution -------------------------------------------------------------------------
    def _conv(self, b, ptrs, node, out: Place, p0: Place, p1: Place):
        """conv2d (NCHW, OIHW) and its two gradients as direct loops over each kernel offset
        (u, v), with the range of output positions valid for that offset computed once per
        offset (no bounds tests inside), so the innermost loop runs along an output (or
        input-gradient) row and vectorises for stride 1:

          conv2d:       out[n,o,i,j]  += x[n,c,r,q] * w[o,c,u,v]
          grad_input:   gx[n,c,r,q]   += g[n,o,i,j] * w[o,c,u,v]
          grad_weight:  gw[o,c,u,v]    = sum_{n,i,j} g[n,o,i,j] * x[n,c,r,q]
        with r = i*sh + u*dh - ph, q = j*sw + v*dw - pw. Sums are reassociated (within the
        reduction tolerance); grad_weight accumulates float32 in float64. (u, v) are loops, not
        unrolled: code size, hence compile time, does not grow with the kernel's area."""
        op = node.op
        (sh, sw), (dh, dw) = node.attrs["stride"], node.attrs["dilation"]
        ph, pw = leading_padding(node.attrs["padding"])
        dt = out.dtype
        x, w, g = conv_roles(op, out, p0, p1)
        nb, cin, h, wd = x.shape
        co, _, kh, kw = w.shape
        oh, ow = g.shape[2], g.shape[3]
        t = ll_type(dt)

        def at(p, idx):
            return elem_ptr(b, ptrs[p.slot], p.dtype, index(b, p.offset, p.strides, idx))

        def val(p, idx):
            return convert(b, load(b, at(p, idx), p.dtype), p.dtype, dt)

        def floor_div(a, k):  # k > 0
            q, r = b.sdiv(a, i64(k)), b.srem(a, i64(k))
            return b.sub(q, b.zext(b.icmp_signed("<", r, i64(0)), I64))

        def smax(a, c):
            return b.select(b.icmp_signed(">", a, c), a, c)

        def smin(a, c):
            return b.select(b.icmp_signed("<", a, c), a, c)

        def valid(k, stride, pad, dil, size, osize):
            """[lo, lo + count): output positions i with 0 <= i*stride + k*dil - pad < size."""
            base = b.sub(i64(pad), b.mul(k, i64(dil)))        # pad - k*dil
            lo = smax(floor_div(b.add(base, i64(stride - 1)), stride), i64(0))
            hi = smin(b.add(floor_div(b.add(base, i64(size - 1)), stride), i64(1)),
                      i64(osize))
            return lo, smax(b.sub(hi, lo), i64(0))

        def pos(i, lo, stride, k, dil, pad):
            i = b.add(i, lo)
            return i, b.add(b.mul(i, i64(stride)), b.sub(b.mul(k, i64(dil)), i64(pad)))
        # A chunk of a parallel kernel (`conv_split`) runs the output's channels [lo, hi) of
        # every loop below: each output element still sums in the same (u, v, c) order.
        split, b.split = getattr(b, "split", None), None
        lo, hi = split.range_for(b, self.conv_split(node, out, p0, p1)[0]) \
            if split is not None else (i64(0), i64(cin if op == "conv2d_grad_input" else co))

        def nest(before, after, body, prefix):
            """Loops over before + [lo, hi) + after."""
            def mid(pre):
                with for_range(b, hi, f"{prefix}k", start=lo) as k:
                    loop_nest(b, after, lambda post: body(list(pre) + [k] + list(post)),
                              f"{prefix}_")
            loop_nest(b, before, mid, prefix)
        if op != "conv2d_grad_weight":
            if split is None:
                self._fill(b, ptrs, out)
            else:
                nest((nb,), out.shape[2:], lambda idx: store(b, constant(0, dt), at(out, idx),
                                                             dt), "z")
        acc_d = np.dtype(np.float64) if dkind(dt) == "f" else np.dtype(np.int64)
        acc = b.alloca(ll_type(acc_d))
        with for_range(b, kh, "u") as u:
            ilo, ni = valid(u, sh, ph, dh, h, oh)
            with for_range(b, kw, "v") as v:
                jlo, nj = valid(v, sw, pw, dw, wd, ow)
                if op == "conv2d_grad_weight":
                    def wbody(idx):
                        o, c = idx
                        b.store(constant(0, acc_d), acc)

                        def inner(nij):
                            n, i, j = nij
                            i, r = pos(i, ilo, sh, u, dh, ph)
                            j, q = pos(j, jlo, sw, v, dw, pw)
                            prod = convert(b, self._mul(b, val(g, [n, o, i, j]),
                                                        val(x, [n, c, r, q]), dt), dt, acc_d)
                            a = b.load(acc, typ=ll_type(acc_d))
                            b.store(self._add(b, a, prod, acc_d), acc)
                        loop_nest(b, (nb, ni, nj), inner, "r")
                        res = convert(b, b.load(acc, typ=ll_type(acc_d)), acc_d, dt)
                        store(b, res, at(w, [o, c, u, v]), dt)
                    nest((), (cin,), wbody, "w")
                else:
                    def body(idx):
                        n, a1, a2, i, j = idx
                        o, c = (a1, a2) if op == "conv2d" else (a2, a1)
                        i, r = pos(i, ilo, sh, u, dh, ph)
                        j, q = pos(j, jlo, sw, v, dw, pw)
                        wv = val(w, [o, c, u, v])
                        if op == "conv2d":
                            dst, src = at(out, [n, o, i, j]), val(x, [n, c, r, q])
                        else:
                            dst, src = at(out, [n, c, r, q]), val(g, [n, o, i, j])
                        cur = b.load(dst, typ=t)
                        b.store(self._add(b, cur, self._mul(b, src, wv, dt), dt), dst)
                    inner = cin if op == "conv2d" else co
                    nest((nb,), (inner, ni, nj), body, "c")
        b.split = split

    @staticmethod
    def conv_split(node, out: Place, p0: Place, p1: Place):
        """split= for a conv kernel: the output's channels (conv2d: o; grad_input: c;
        grad_weight: o), each worth its share of the multiply-adds."""
        x, w, g = conv_roles(node.op, out, p0, p1)
        nb, cin = x.shape[:2]
        co, _, kh, kw = w.shape
        macs = nb * cin * co * kh * kw * g.shape[2] * g.shape[3]
        n = cin if node.op == "conv2d_grad_input" else co
        return n, macs / max(n, 1)

    @staticmethod
    def _mul(b, x, y, dt):
        return b.fmul(x, y) if dkind(dt) == "f" else b.mul(x, y)

    @staticmethod
    def _add(b, x, y, dt):
        return b.fadd(x, y, flags=["reassoc"]) if dkind(dt) == "f" else b.add(x, y)

    # -- pooling -----------------------------------------------------------------------------
    def _pool_window(self, b, node, x: Place, idxs, visit):
        """Visit each in-bounds input position of output (n, c, oh, ow)'s window, in the
        reference's order; `visit(flat_index_into_x)`. Padded positions hold -inf in the
        reference, which never wins a max, so they are skipped."""
        kh, kw = node.attrs["kernel"]
        sh, sw = node.attrs["stride"]
        ph, pw = leading_padding(node.attrs["padding"])
        n, c, oh, ow = idxs
        h, w = x.shape[2], x.shape[3]
        base = index(b, x.offset, x.strides[:2], [n, c])
        for i in range(kh):
            r = b.sub(b.add(b.mul(oh, i64(sh)), i64(i)), i64(ph))
            for j in range(kw):
                col = b.sub(b.add(b.mul(ow, i64(sw)), i64(j)), i64(pw))
                inside = b.and_(b.and_(b.icmp_signed(">=", r, i64(0)),
                                       b.icmp_signed("<", r, i64(h))),
                                b.and_(b.icmp_signed(">=", col, i64(0)),
                                       b.icmp_signed("<", col, i64(w))))
                with b.if_then(inside):
                    visit(b.add(base, b.add(b.mul(r, i64(x.strides[2])),
                                            b.mul(col, i64(x.strides[3])))))

    def _max_pool(self, b, ptrs, node, out: Place, x: Place):
        dt = x.dtype
        t = ll_type(dt)
        acc = b.alloca(t)

        def body(idxs):
            b.store(constant(-np.inf, dt) if dkind(dt) == "f" else
                    constant(np.iinfo(dt).min, dt), acc)
            self._pool_window(b, node, x, idxs, lambda k: b.store(
                select_max(b, b.load(acc, typ=t), load(b, elem_ptr(b, ptrs[x.slot], dt, k), dt),
                           dt), acc))
            store(b, b.load(acc, typ=t), elem_ptr(b, ptrs[out.slot], dt,
                                                  index(b, out.offset, out.strides, idxs)), dt)
        loop_nest(b, out.shape, body)

    def _max_pool_grad(self, b, ptrs, node, out: Place, x: Place, g: Place):
        """gx = 0; each output gradient goes to the first maximum of its window (numpy's
        argmax: the first NaN, else the first largest)."""
        dt = out.dtype
        t = ll_type(dt)
        # A chunk of a parallel kernel: its batch rows [lo, hi) of gx (zeroed) and of g (no
        # window reaches another batch row, so no two chunks write one element).
        split, b.split = getattr(b, "split", None), None
        if split is None:
            self._fill(b, ptrs, out)
        else:
            lo, hi = split.range_for(b, g.shape[0])
            with for_range(b, hi, "zn", start=lo) as n:
                loop_nest(b, out.shape[1:], lambda rest: store(
                    b, constant(0, dt), elem_ptr(b, ptrs[out.slot], dt, index(
                        b, out.offset, out.strides, [n] + list(rest))), dt), "z")
        best, where = b.alloca(ll_type(x.dtype)), b.alloca(I64)
        fl = dkind(x.dtype) == "f"

        def body(idxs):
            b.store(i64(-1), where)
            b.store(constant(-np.inf, x.dtype) if fl else constant(np.iinfo(x.dtype).min,
                                                                      x.dtype), best)

            def visit(k):
                v = load(b, elem_ptr(b, ptrs[x.slot], x.dtype, k), x.dtype)
                cur = b.load(best, typ=ll_type(x.dtype))
                first = b.icmp_signed("<", b.load(where, typ=I64), i64(0))
                if fl:
                    better = b.or_(b.fcmp_ordered(">", v, cur),
                                   b.and_(b.fcmp_unordered("uno", v, v),
                                          b.fcmp_ordered("ord", cur, cur)))
                else:
                    better = b.icmp_signed(">", v, cur)
                take = b.or_(first, better)
                b.store(b.select(take, v, cur), best)
                b.store(b.select(take, k, b.load(where, typ=I64)), where)
            self._pool_window(b, node, x, idxs, visit)
            k = b.load(where, typ=I64)
            with b.if_then(b.icmp_signed(">=", k, i64(0))):
                # x and out share shape [N, C, H, W]: map x's element to out's.
                gv = load(b, elem_ptr(b, ptrs[g.slot], g.dtype,
                                      index(b, g.offset, g.strides, idxs)), g.dtype)
                gv = convert(b, gv, g.dtype, dt)
                optr = elem_ptr(b, ptrs[out.slot], dt, self._remap(b, k, x, out))
                b.store(b.fadd(b.load(optr, typ=t), gv), optr)
        if split is None:
            loop_nest(b, g.shape, body)
        else:
            with for_range(b, hi, "gn", start=lo) as n:
                loop_nest(b, g.shape[1:], lambda rest: body([n] + list(rest)))
        b.split = split
