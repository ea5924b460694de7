"""GEMM kernels of the cpu backend: matmul and `gemm` (the fused weight update) through the
OpenBLAS that NumPy ships where the layouts allow (transposes as flags, alpha/beta exposed, a
batch contiguous with a 2-D right operand's rows folded into one call), generated loops
otherwise (integer dtypes, layouts BLAS can't take).

A mixin of `emitter.ModuleEmitter`, as `index_kernels.py` is: each method fills a kernel body
with the emitter's helpers; `ptrs` maps a buffer slot to its pointer, places give offsets and
strides in elements.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir


from runtime.lowering.layout import blas_layout, broadcast_strides, collapse
from runtime.lowering.places import Place

from . import jit
from .loops import elem_ptr, for_range, i64, index, loop_nest
from .scalar import F32, F64, I32, I64, constant, convert, ll_type, load, store

PTR = ir.PointerType()


class GemmKernels:
    """The gemm family's kernels (`runtime/lowering/families.py`)."""

    # -- matmul ----------------------------------------------------------------------------
    def _matmul(self, b, ptrs, out: Place, x: Place, y: Place):
        bshape = out.shape[:-2]
        m, kk, n = x.shape[-2], x.shape[-1], y.shape[-1]
        xb = broadcast_strides(Place(x.slot, 0, x.shape[:-2], x.strides[:-2], x.dtype),
                               bshape)
        yb = broadcast_strides(Place(y.slot, 0, y.shape[:-2], y.strides[:-2], y.dtype),
                               bshape)
        ob = out.strides[:-2]
        xm, xk = x.strides[-2:]
        yk, yn = y.strides[-2:]
        om, on = out.strides[-2:]
        dt = out.dtype
        if kk == 0:  # an empty sum: zeros (never hand BLAS k = 0)
            self._fill(b, ptrs, out)
            return
        use_blas = (self.blas_ok and dt.kind == "f" and x.dtype == dt and y.dtype == dt
                    and (blas_layout(m, n, om, on) or ("T",))[0] == "N"
                    and blas_layout(m, kk, xm, xk) and blas_layout(kk, n, yk, yn))
        if not use_blas:
            self._matmul_loops(b, ptrs, out, x, y, bshape, xb, yb, ob)
            return
        # Fold a batch that runs contiguously into the rows when the right operand is shared:
        # [B, M, K] @ [K, N] is one [B*M, K] @ [K, N] GEMM.
        if bshape and all(s == 0 for s in yb):
            fshape, (fx, fo) = collapse(tuple(bshape) + (m,),
                                        [tuple(xb) + (xm,), tuple(ob) + (om,)])
            if len(fshape) == 1 and (blas_layout(fshape[0], kk, fx[0], xk) or "T")[0] == "N" \
                    and (blas_layout(fshape[0], n, fo[0], on) or "T")[0] == "N":
                bshape, xb, yb, ob = (), (), (), ()
                m, xm, om = fshape[0], fx[0], fo[0]
        ldc = blas_layout(m, n, om, on)[1]
        bshape_c, (cxb, cyb, cob) = collapse(bshape, [xb, yb, ob]) if bshape else ((), ((),) * 3)

        def one(idxs):
            xo = index(b, x.offset, cxb, idxs)
            yo = index(b, y.offset, cyb, idxs)
            oo = index(b, out.offset, cob, idxs)
            self.gemm(b, dt, m, n, kk,
                      elem_ptr(b, ptrs[x.slot], dt, xo), (xm, xk),
                      elem_ptr(b, ptrs[y.slot], dt, yo), (yk, yn),
                      elem_ptr(b, ptrs[out.slot], dt, oo), ldc)
        loop_nest(b, bshape_c, one, "b")

    def gemm(self, b, dtype, m, n, k, a_ptr, a_strides, b_ptr, b_strides, c_ptr, ldc,
             alpha=1.0, beta=0.0):
        """C = alpha * A @ B + beta * C through cblas_?gemm (row-major; 64-bit sizes, C-int
        enums). A and B are given by their (row, column) element strides: whichever of them
        is 1 decides the transpose flag; no operand is ever copied."""
        ta, lda = blas_layout(m, k, *a_strides)
        tb, ldb = blas_layout(k, n, *b_strides)
        ft = F32 if np.dtype(dtype) == np.float32 else F64
        name = jit.BLAS_GEMM[np.dtype(dtype).name]
        fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(
            ir.VoidType(), [I32, I32, I32, I64, I64, I64, ft, PTR, I64, PTR, I64, ft, PTR,
                            I64]), name)
        flag = {"N": 111, "T": 112}
        b.call(fn, [ir.Constant(I32, 101), ir.Constant(I32, flag[ta]),
                    ir.Constant(I32, flag[tb]), i64(m), i64(n), i64(k),
                    ir.Constant(ft, alpha), a_ptr, i64(lda), b_ptr, i64(ldb),
                    ir.Constant(ft, beta), c_ptr, i64(ldc)])

    def _gemm(self, b, ptrs, node, out: Place, x: Place, y: Place, c: Place):
        """out = beta * c + alpha * op(x) @ op(y) (GEMM-accumulate, `cc.addmm`): in place over
        c when the plan says so, else c is copied into out first; then one cblas_?gemm with
        alpha, beta and the transposes as flags, or a generated loop."""
        at = node.attrs
        alpha, beta = float(at["alpha"]), float(at["beta"])

        def op(p: Place, t: bool) -> Place:
            return Place(p.slot, p.offset, p.shape[::-1], p.strides[::-1], p.dtype) if t else p
        x, y = op(x, at["trans_a"]), op(y, at["trans_b"])
        if (c.slot, c.offset, c.strides, c.dtype) != (out.slot, out.offset, out.strides,
                                                      out.dtype):
            self._copy(b, ptrs, out, c)
        m, kk, n = x.shape[0], x.shape[1], y.shape[1]
        dt = out.dtype
        lc = blas_layout(m, n, *out.strides)
        if (self.blas_ok and kk > 0 and x.dtype == dt and y.dtype == dt and lc
                and lc[0] == "N" and blas_layout(m, kk, *x.strides)
                and blas_layout(kk, n, *y.strides)):
            self.gemm(b, dt, m, n, kk,
                      elem_ptr(b, ptrs[x.slot], dt, index(b, x.offset, (), ())), x.strides,
                      elem_ptr(b, ptrs[y.slot], dt, index(b, y.offset, (), ())), y.strides,
                      elem_ptr(b, ptrs[out.slot], dt, index(b, out.offset, (), ())), lc[1],
                      alpha, beta)
            return
        acc = b.alloca(ll_type(dt))

        def body(idxs):
            i, j = idxs
            b.store(constant(0, dt), acc)
            with for_range(b, kk, "k") as kv:
                xv = convert(b, load(b, elem_ptr(b, ptrs[x.slot], x.dtype, index(
                    b, x.offset, x.strides, (i, kv))), x.dtype), x.dtype, dt)
                yv = convert(b, load(b, elem_ptr(b, ptrs[y.slot], y.dtype, index(
                    b, y.offset, y.strides, (kv, j))), y.dtype), y.dtype, dt)
                b.store(b.fadd(b.load(acc, typ=ll_type(dt)), b.fmul(xv, yv)), acc)
            at_out = elem_ptr(b, ptrs[out.slot], dt, index(b, out.offset, out.strides, idxs))
            prod = b.fmul(constant(alpha, dt), b.load(acc, typ=ll_type(dt)))
            old = b.fmul(constant(beta, dt), load(b, at_out, dt))
            store(b, b.fadd(old, prod), at_out, dt)
        loop_nest(b, (m, n), body)

    def _matmul_loops(self, b, ptrs, out, x, y, bshape, xb, yb, ob):
        """A generated loop for what BLAS can't take (ints, odd layouts): out[.., i, j] =
        sum_k x[.., i, k] * y[.., k, j], accumulated in the output dtype."""
        dt = out.dtype
        xm, xk = x.strides[-2:]
        yk, yn = y.strides[-2:]
        shape = tuple(bshape) + (out.shape[-2], out.shape[-1])
        acc = b.alloca(ll_type(dt))

        def body(idxs):
            bi, i, j = idxs[:-2], idxs[-2], idxs[-1]
            xo = b.add(index(b, x.offset, xb, bi), b.mul(i, i64(xm)))
            yo = b.add(index(b, y.offset, yb, bi), b.mul(j, i64(yn)))
            b.store(constant(0, dt), acc)
            with for_range(b, x.shape[-1], "k") as kv:
                xv = convert(b, load(b, elem_ptr(b, ptrs[x.slot], x.dtype,
                                                 b.add(xo, b.mul(kv, i64(xk)))), x.dtype),
                             x.dtype, dt)
                yv = convert(b, load(b, elem_ptr(b, ptrs[y.slot], y.dtype,
                                                 b.add(yo, b.mul(kv, i64(yk)))), y.dtype),
                             y.dtype, dt)
                a = b.load(acc, typ=ll_type(dt))
                if dt.kind == "f":
                    a = b.fadd(a, b.fmul(xv, yv))
                elif dt.kind == "b":
                    a = b.or_(a, b.and_(xv, yv))
                else:
                    a = b.add(a, b.mul(xv, yv))
                b.store(a, acc)
            store(b, b.load(acc, typ=ll_type(dt)),
                  elem_ptr(b, ptrs[out.slot], dt, index(b, out.offset, tuple(ob) + out.strides[
                      -2:], idxs)), dt)
        loop_nest(b, shape, body)
