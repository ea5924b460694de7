"""GEMM kernels of the cpu backend: matmul and `gemm` (the fused weight update) through the
OpenBLAS that NumPy ships where the layouts allow (transposes as flags, alpha/beta exposed, a
batch contiguous with a 2-D right operand's rows folded into one call), generated loops
otherwise (integer dtypes, layouts BLAS can't take). 16-bit floats take the float32 GEMM on
widened panels (`gemm_half`), their generated loops a float32 accumulator.

A mixin of `emitter.ModuleEmitter`, as `index_kernels.py` is: each method fills a kernel body
with the emitter's helpers; `ptrs` maps a buffer slot to its pointer, places give offsets and
strides in elements.
"""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
from llvmlite import ir


from compiler.ops.registry import compute_dtype, dkind, is_half
from runtime.lowering.layout import blas_layout, broadcast_strides, collapse
from runtime.lowering.places import Place

from . import jit
from .loops import elem_ptr, for_range, i64, index, loop_nest
from .scalar import F32, F64, I32, I64, constant, convert, ll_type, load, mem_type, store

PTR = ir.PointerType()
# A parallel GEMM (no batch to split) is cut into blocks of whole units of rows (or columns,
# whichever of M and N is larger; `gemm_rows`): each block one single-threaded cblas call,
# which packs the other operand again and runs its own edges. Measured at one thread
# (OpenBLAS Haswell kernel, Zen 3, the transformer's and MLP's shapes), the CPU time of all
# blocks against one call: 64-row blocks 1.10-1.25x, 128-row 1.04-1.20x, 256-row 1.01-1.11x
# (that was most of the 2-thread step's extra CPU). So a GEMM is cut into 4 near-equal blocks
# (2 each for 2 threads, one each for 4), down to 2 where a block would be under
# GEMM_ROWS_MIN, more where it would be over GEMM_ROWS (`gemm_rows`); fixed by the shape, so
# the bits don't depend on the threads.
# Work per multiply-add, against an elementwise loop's element operation: BLAS does ~16 per
# cycle.
GEMM_ROWS = 256
GEMM_ROWS_MIN = 128
GEMM_WORK = 1 / 16
# A batch of small float32 products (attention's 32 of 128x128x64) runs a generated kernel
# (`_small_sgemm`): OpenBLAS packs both operands again and pays its call overhead for every
# item, ~45 GFLOP/s there (transformer step, one thread) against ~60-70 generated. A is read
# where it lies (at most SMALL_A floats: cache-resident); B in place when its rows are
# unit-stride, else packed once per item into a stack panel of at most SMALL_PANEL floats
# (64 KiB: any thread's stack takes it); then a register tile of SMALL_MR x SMALL_NR (12 ymm
# accumulators, 2 loads and 6 broadcasts per 12 FMAs) sweeps them, each element's sum over k
# in order (fma by fma): the same bits whichever thread runs the item. Items smaller than
# SMALL_MIN in m or n keep BLAS.
SMALL_MR, SMALL_NR = 6, 16
SMALL_A = 32768
SMALL_PANEL = 16384
SMALL_MIN = 16


class GemmKernels:
    """The gemm family's kernels (`runtime/lowering/families.py`)."""

    # -- matmul ----------------------------------------------------------------------------
    def _matmul_plan(self, out: Place, x: Place, y: Place):
        """How `_matmul` computes out = x @ y: ("fill",), ("loops", bshape, xb, yb, ob) or
        ("blas", m, kk, n, xm, om, bshape_c, (cxb, cyb, cob), ldc)."""
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
            return ("fill",)
        use_blas = (self.blas_ok and _blas_dtype(dt) and x.dtype == dt and y.dtype == dt
                    and (blas_layout(m, n, om, on) or ("T",))[0] == "N"
                    and blas_layout(m, kk, xm, xk) and blas_layout(kk, n, yk, yn))
        if not use_blas:
            return ("loops", bshape, xb, yb, ob)
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
        bshape_c, cs = collapse(bshape, [xb, yb, ob]) if bshape else ((), ((),) * 3)
        return ("blas", m, kk, n, xm, om, bshape_c, cs, ldc)

    def _matmul_split(self, out: Place, x: Place, y: Place):
        """split= for the matmul kernel (`emitter._kernel`): batches, or GEMM blocks."""
        plan = self._matmul_plan(out, x, y)
        if plan[0] != "blas":
            return None
        _, m, kk, n, _, _, bshape_c, _, _ = plan
        flops = m * n * kk * GEMM_WORK
        if bshape_c:
            return bshape_c[0], flops * int(np.prod(bshape_c[1:], dtype=np.int64))
        return gemm_units(m, n, kk)

    def _matmul(self, b, ptrs, out: Place, x: Place, y: Place):
        plan = self._matmul_plan(out, x, y)
        if plan[0] == "fill":
            self._fill(b, ptrs, out)
            return
        if plan[0] == "loops":
            self._matmul_loops(b, ptrs, out, x, y, *plan[1:])
            return
        _, m, kk, n, xm, om, bshape_c, (cxb, cyb, cob), ldc = plan
        xk, yk, yn, on = x.strides[-1], y.strides[-2], y.strides[-1], out.strides[-1]
        dt = out.dtype

        small = bshape_c and _small_ok(dt, m, n, kk)

        def one(idxs):
            xo = index(b, x.offset, cxb, idxs)
            yo = index(b, y.offset, cyb, idxs)
            oo = index(b, out.offset, cob, idxs)
            if small:
                fn = self._small_sgemm(m, n, kk, (xm, xk), (yk, yn), ldc)
                b.call(fn, [elem_ptr(b, ptrs[x.slot], dt, xo), elem_ptr(b, ptrs[y.slot], dt, yo),
                            elem_ptr(b, ptrs[out.slot], dt, oo)])
                return
            self.gemm_blocked(b, dt, m, n, kk,
                              ptrs[x.slot], xo, (xm, xk), ptrs[y.slot], yo, (yk, yn),
                              ptrs[out.slot], oo, (om, on), ldc)
        if bshape_c:
            loop_nest(b, bshape_c, one, "b")
        else:
            one([])

    def _small_sgemm(self, m, n, kk, xs, ys, ldc):
        """`inplace_sgemm_<shape, strides>(A, B, C)`: C = A @ B for one small float32 item
        (m x kk times kk x n, element strides xs and ys, C rows ldc apart, columns unit),
        generated once per module. B is read in column tiles of SMALL_NR: in place where its
        rows are unit-stride and n a whole number of tiles, else packed once (k-major,
        zero-padded) into a stack panel. A is read where it lies (six rows' elements at each
        k: a broadcast each; the last tile's rows past m repeat row m - 1, whose results are
        dropped). Each tile of C is accumulated in registers over k in order, stored once."""
        name = "inplace_sgemm_" + "_".join(str(v) for v in (m, n, kk, *xs, *ys, ldc))
        fn = self.module.globals.get(name)
        if fn is not None:
            return fn
        mr, nr = SMALL_MR, SMALL_NR
        mb, nb = -(-m // mr), -(-n // nr)
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR] * 3), name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        for a, nm in zip(fn.args, "abc"):
            a.add_attribute("noalias")
            a.name = nm
        pa, pb, pc = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        vt = ir.VectorType(F32, 8)
        yk, yn = ys
        direct = yn == 1 and n % nr == 0
        if direct:
            panel, pk, tile_step = pb, yk, nr  # B[p, tj * nr + e] at p * yk + tj * nr + e
        else:
            panel = b.alloca(F32, size=i64(nb * nr * kk), name="bpack")
            panel.align = 64
            pk, tile_step = nr, nr * kk
            zero = ir.Constant(F32, 0.0)
            # panel[(t * kk + p) * nr + e] = B[p, t * nr + e], 0 past n
            with for_range(b, nb, "pt") as t:
                with for_range(b, kk, "pp") as pv:
                    base = b.mul(b.add(b.mul(t, i64(kk)), pv), i64(nr))
                    for e in range(nr):
                        j = b.add(b.mul(t, i64(nr)), i64(e))
                        jc = b.select(b.icmp_signed("<", j, i64(n)), j, i64(n - 1)) \
                            if n % nr else j
                        v = b.load(b.gep(pb, [b.add(b.mul(pv, i64(yk)), b.mul(jc, i64(yn)))],
                                         inbounds=True, source_etype=F32), typ=F32)
                        if n % nr:
                            v = b.select(b.icmp_signed("<", j, i64(n)), v, zero)
                        b.store(v, b.gep(panel, [b.add(base, i64(e))], inbounds=True,
                                         source_etype=F32))
        fma = _declare_fma(self.module, vt)
        undef = ir.Constant(vt, ir.Undefined)
        splat_mask = ir.Constant(ir.VectorType(I32, 8), [0] * 8)
        xm, xk = xs
        with for_range(b, nb, "tj") as tj:
            bbase = b.mul(tj, i64(tile_step))
            with for_range(b, mb, "ti") as ti:
                rows = []
                for u in range(mr):
                    r = b.add(b.mul(ti, i64(mr)), i64(u))
                    if m % mr:
                        r = b.select(b.icmp_signed("<", r, i64(m)), r, i64(m - 1))
                    rows.append(b.mul(r, i64(xm)))
                pre = b.block
                head = fn.append_basic_block("k.body")
                done = fn.append_basic_block("k.done")
                b.branch(head)
                b.position_at_end(head)
                pv = b.phi(I64, name="k")
                pv.add_incoming(i64(0), pre)
                accs = []
                for u in range(mr * 2):
                    ph = b.phi(vt, name=f"acc{u}")
                    ph.add_incoming(ir.Constant(vt, [0.0] * 8), pre)
                    accs.append(ph)
                boff = b.add(bbase, b.mul(pv, i64(pk)))
                bv = [b.load(b.gep(panel, [b.add(boff, i64(8 * h))], inbounds=True,
                                   source_etype=F32), typ=vt, align=4) for h in range(2)]
                koff = b.mul(pv, i64(xk))
                new = []
                for u in range(mr):
                    a = b.load(b.gep(pa, [b.add(rows[u], koff)], inbounds=True,
                                     source_etype=F32), typ=F32)
                    av = b.shuffle_vector(b.insert_element(undef, a, ir.Constant(I32, 0)),
                                          undef, splat_mask)
                    for h in range(2):
                        new.append(b.call(fma, [av, bv[h], accs[2 * u + h]]))
                nxt = b.add(pv, i64(1), flags=["nuw", "nsw"])
                for ph, v in zip(accs, new):
                    ph.add_incoming(v, b.block)
                pv.add_incoming(nxt, b.block)
                b.cbranch(b.icmp_signed("<", nxt, i64(kk)), head, done)
                b.position_at_end(done)
                for u in range(mr):
                    row = b.add(b.mul(ti, i64(mr)), i64(u))
                    self._small_store(b, pc, row, tj, new[2 * u:2 * u + 2], m, n, ldc)
        b.ret_void()
        return fn

    @staticmethod
    def _small_store(b, pc, row, tj, vals, m, n, ldc):
        """Row `row` of tile column `tj`: two 8-float vectors into C, padding dropped."""
        def emit():
            col = b.mul(tj, i64(SMALL_NR))
            at = b.add(b.mul(row, i64(ldc)), col)
            if n % SMALL_NR == 0:
                for h, v in enumerate(vals):
                    b.store(v, b.gep(pc, [b.add(at, i64(8 * h))], inbounds=True,
                                     source_etype=F32), align=4)
                return
            for h, v in enumerate(vals):
                for e in range(8):
                    j = 8 * h + e
                    with b.if_then(b.icmp_signed("<", b.add(col, i64(j)), i64(n))):
                        b.store(b.extract_element(v, ir.Constant(I32, e)), b.gep(
                            pc, [b.add(at, i64(j))], inbounds=True, source_etype=F32))
        if m % SMALL_MR == 0:
            emit()
        else:
            with b.if_then(b.icmp_signed("<", row, i64(m))):
                emit()

    def gemm_blocked(self, b, dt, m, n, kk, xp, xo, xs, yp, yo, ys, op, oo, os_, ldc,
                     alpha=1.0, beta=0.0):
        """One GEMM, or in a chunk of a parallel kernel whose split is its blocks
        (`gemm_units`), this chunk's block of rows (or columns): the same cblas call on
        the block's rows of A and C (or columns of B and C)."""
        split = getattr(b, "split", None) if getattr(b, "depth", 0) == 0 else None
        if split is None:
            self.gemm(b, dt, m, n, kk, elem_ptr(b, xp, dt, xo), xs, elem_ptr(b, yp, dt, yo), ys,
                      elem_ptr(b, op, dt, oo), ldc, alpha, beta)
            return
        rows = m >= n
        dim = m if rows else n
        unit = gemm_rows(dim)
        lo, hi = split.range_for(b, -(-dim // unit))
        first = b.mul(lo, i64(unit))
        last = b.mul(hi, i64(unit))
        last = b.select(b.icmp_signed("<", last, i64(dim)), last, i64(dim))
        count = b.sub(last, first)
        if rows:
            xo = b.add(xo, b.mul(first, i64(xs[0])))
            oo = b.add(oo, b.mul(first, i64(os_[0])))
            m = count
        else:
            yo = b.add(yo, b.mul(first, i64(ys[1])))
            oo = b.add(oo, b.mul(first, i64(os_[1])))
            n = count
        self.gemm(b, dt, m, n, kk, elem_ptr(b, xp, dt, xo), xs, elem_ptr(b, yp, dt, yo), ys,
                  elem_ptr(b, op, dt, oo), ldc, alpha, beta)

    def gemm(self, b, dtype, m, n, k, a_ptr, a_strides, b_ptr, b_strides, c_ptr, ldc,
             alpha=1.0, beta=0.0):
        """C = alpha * A @ B + beta * C through cblas_?gemm (row-major; 64-bit sizes, C-int
        enums). A and B are given by their (row, column) element strides: whichever of them
        is 1 decides the transpose flag; no operand is ever copied."""
        # (m or n may be an i64 value: a block of a parallel GEMM; the layout's leading
        # dimension and transpose don't depend on it)
        if is_half(dtype):
            self.gemm_half(b, dtype, m, n, k, a_ptr, a_strides, b_ptr, b_strides, c_ptr, ldc,
                           alpha, beta)
            return
        ta, lda = blas_layout(m if isinstance(m, int) else 2, k, *a_strides)
        tb, ldb = blas_layout(k, n if isinstance(n, int) else 2, *b_strides)
        ft = F32 if np.dtype(dtype) == np.float32 else F64
        name = jit.BLAS_GEMM[np.dtype(dtype).name]
        fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(
            ir.VoidType(), [I32, I32, I32, I64, I64, I64, ft, PTR, I64, PTR, I64, ft, PTR,
                            I64]), name)
        flag = {"N": 111, "T": 112}
        b.call(fn, [ir.Constant(I32, 101), ir.Constant(I32, flag[ta]),
                    ir.Constant(I32, flag[tb]), _i64(m), _i64(n), i64(k),
                    ir.Constant(ft, alpha), a_ptr, i64(lda), b_ptr, i64(ldb),
                    ir.Constant(ft, beta), c_ptr, i64(ldc)])

    def gemm_half(self, b, dtype, m, n, k, a_ptr, a_strides, b_ptr, b_strides, c_ptr, ldc,
                  alpha=1.0, beta=0.0):
        """`gemm` on 16-bit floats: A and B widened into contiguous float32 panels (one
        malloc per call), cblas_sgemm into a float32 C (C's old values widened first when
        beta is not 0), C rounded once into the output. Accumulates in float32, as PyTorch's
        CPU bfloat16 GEMM does."""
        _register_alloc()
        split, b.split = getattr(b, "split", None), None  # (loops inside a chunk's block)
        mi, ni = _i64(m), _i64(n)
        nbytes = b.mul(b.add(b.add(b.mul(mi, i64(k)), b.mul(i64(k), ni)), b.mul(mi, ni)),
                       i64(4))
        mod = self.module
        malloc = mod.globals.get("malloc") or ir.Function(mod, ir.FunctionType(PTR, [I64]),
                                                          "malloc")
        free = mod.globals.get("free") or ir.Function(mod, ir.FunctionType(ir.VoidType(),
                                                                            [PTR]), "free")
        a32 = b.call(malloc, [nbytes])
        b32 = b.gep(a32, [b.mul(mi, i64(k))], source_etype=F32)
        c32 = b.gep(b32, [b.mul(i64(k), ni)], source_etype=F32)

        def widen_panel(src, strides, rows, cols, dst, ld):
            """dst[i * ld + j] = src[i * strides[0] + j * strides[1]] as float32, the loop
            along src's unit stride innermost."""
            def one(i, j):
                v = load(b, b.gep(src, [b.add(b.mul(i, i64(strides[0])),
                                              b.mul(j, i64(strides[1])))],
                                  source_etype=mem_type(dtype)), dtype)
                b.store(v, b.gep(dst, [b.add(b.mul(i, _i64(ld)), j)], source_etype=F32))
            if strides[1] == 1:
                with for_range(b, _i64(rows), "wi") as i:
                    with for_range(b, _i64(cols), "wj") as j:
                        one(i, j)
            else:
                with for_range(b, _i64(cols), "wj") as j:
                    with for_range(b, _i64(rows), "wi") as i:
                        one(i, j)
        widen_panel(a_ptr, a_strides, mi, k, a32, k)
        widen_panel(b_ptr, b_strides, k, ni, b32, ni)
        if beta != 0.0:
            widen_panel(c_ptr, (ldc, 1), mi, ni, c32, ni)
        fn = mod.globals.get(jit.BLAS_GEMM["float32"]) or ir.Function(mod, ir.FunctionType(
            ir.VoidType(), [I32, I32, I32, I64, I64, I64, F32, PTR, I64, PTR, I64, F32, PTR,
                            I64]), jit.BLAS_GEMM["float32"])
        no = ir.Constant(I32, 111)
        b.call(fn, [ir.Constant(I32, 101), no, no, mi, ni, i64(k), ir.Constant(F32, alpha),
                    a32, i64(k), b32, ni, ir.Constant(F32, beta), c32, ni])
        with for_range(b, mi, "ci") as i:
            with for_range(b, ni, "cj") as j:
                v = b.load(b.gep(c32, [b.add(b.mul(i, ni), j)], source_etype=F32), typ=F32)
                store(b, v, b.gep(c_ptr, [b.add(b.mul(i, i64(ldc)), j)],
                                  source_etype=mem_type(dtype)), dtype)
        b.call(free, [a32])
        b.split = split

    def _gemm(self, b, ptrs, node, out: Place, x: Place, y: Place, c: Place):
        """out = beta * c + alpha * op(x) @ op(y) (GEMM-accumulate, `cc.addmm`): in place over
        c when the plan says so, else c is copied into out first; then one cblas_?gemm with
        alpha, beta and the transposes as flags, or a generated loop."""
        at = node.attrs
        alpha, beta = float(at["alpha"]), float(at["beta"])

        def op(p: Place, t: bool) -> Place:
            return Place(p.slot, p.offset, p.shape[::-1], p.strides[::-1], p.dtype) if t else p
        x, y = op(x, at["trans_a"]), op(y, at["trans_b"])
        copy = (c.slot, c.offset, c.strides, c.dtype) != (out.slot, out.offset, out.strides,
                                                          out.dtype)
        m, kk, n = x.shape[0], x.shape[1], y.shape[1]
        dt = out.dtype
        if self._gemm_blas(out, x, y):
            if getattr(b, "split", None) is None:
                if copy:
                    self._copy(b, ptrs, out, c)
            elif copy:  # a block of a parallel gemm: copy its block of c, then its cblas call
                self._copy_block(b, ptrs, out, c, m, n)
            self.gemm_blocked(b, dt, m, n, kk, ptrs[x.slot], i64(x.offset), x.strides,
                              ptrs[y.slot], i64(y.offset), y.strides, ptrs[out.slot],
                              i64(out.offset), out.strides,
                              blas_layout(m, n, *out.strides)[1], alpha, beta)
            return
        if copy:
            self._copy(b, ptrs, out, c)
        acc = b.alloca(ll_type(dt))
        cd = compute_dtype(dt)  # (a 16-bit float's alpha and beta are not rounded to it)

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
            prod = b.fmul(constant(alpha, cd), b.load(acc, typ=ll_type(dt)))
            old = b.fmul(constant(beta, cd), load(b, at_out, dt))
            store(b, b.fadd(old, prod), at_out, dt)
        loop_nest(b, (m, n), body)

    def _gemm_blas(self, out: Place, x: Place, y: Place) -> bool:
        """Whether `_gemm` (x, y already transposed as the node says) is one cblas call."""
        m, kk, n = x.shape[0], x.shape[1], y.shape[1]
        dt = out.dtype
        lc = blas_layout(m, n, *out.strides)
        return bool(self.blas_ok and kk > 0 and _blas_dtype(dt) and x.dtype == dt
                    and y.dtype == dt and lc
                    and lc[0] == "N" and blas_layout(m, kk, *x.strides)
                    and blas_layout(kk, n, *y.strides))

    def _gemm_split(self, node, out: Place, x: Place, y: Place, c: Place):
        """split= for the gemm kernel: blocks (`gemm_units`) when it is one cblas call."""
        at = node.attrs

        def op(p: Place, t: bool) -> Place:
            return Place(p.slot, p.offset, p.shape[::-1], p.strides[::-1], p.dtype) if t else p
        x, y = op(x, at["trans_a"]), op(y, at["trans_b"])
        if not self._gemm_blas(out, x, y):
            return None
        return gemm_units(x.shape[0], y.shape[1], x.shape[1])

    def _copy_block(self, b, ptrs, out: Place, c: Place, m: int, n: int):
        """out = c over this chunk's block of rows (or columns) (`gemm_blocked`'s block)."""
        split = b.split
        rows = m >= n
        dim = m if rows else n
        lo, hi = split.lo, split.hi
        unit = gemm_rows(dim)
        first = b.mul(lo, i64(unit))
        last = b.mul(hi, i64(unit))
        last = b.select(b.icmp_signed("<", last, i64(dim)), last, i64(dim))
        cs = broadcast_strides(c, out.shape)

        def elem(i, j):
            v = load(b, elem_ptr(b, ptrs[c.slot], c.dtype, index(b, c.offset, cs, (i, j))),
                     c.dtype)
            store(b, convert(b, v, c.dtype, out.dtype), elem_ptr(
                b, ptrs[out.slot], out.dtype, index(b, out.offset, out.strides, (i, j))),
                out.dtype)
        with for_range(b, last if rows else m, "ci", start=first if rows else i64(0)) as i:
            with for_range(b, n if rows else last, "cj", start=None if rows else first) as j:
                elem(i, j)

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
                if dkind(dt) == "f":
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


def _i64(v):
    return v if isinstance(v, ir.Value) else i64(v)


def _small_ok(dt, m, n, kk) -> bool:
    """Whether one item of a batched product runs `_small_sgemm` (float32, small operands)."""
    return (np.dtype(dt) == np.float32 and m >= SMALL_MIN and n >= SMALL_MIN and kk >= 1
            and m * kk <= SMALL_A and -(-n // SMALL_NR) * SMALL_NR * kk <= SMALL_PANEL)


def _declare_fma(module, vt):
    name = f"llvm.fma.v{vt.count}f32"
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(vt, [vt] * 3),
                                                   name)


def _blas_dtype(dt) -> bool:
    """float32 and float64 call their cblas_?gemm; 16-bit floats sgemm on float32 panels."""
    return np.dtype(dt).name in jit.BLAS_GEMM or is_half(dt)


_ALLOC: dict = {}


def _register_alloc():
    """libc's malloc and free for the JIT (gemm_half's panels), once per process."""
    if not _ALLOC:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        for name in ("malloc", "free"):
            _ALLOC[name] = ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
            jit.register_symbol(name, _ALLOC[name])


def gemm_rows(dim: int) -> int:
    """Rows (or columns) of one unit of a parallel GEMM whose split dimension is `dim`:
    `dim` cut into 4 near-equal blocks (a multiple of 16), down to 2 where they would be
    under GEMM_ROWS_MIN, more where they would be over GEMM_ROWS."""
    blocks = min(4, max(2, dim // GEMM_ROWS_MIN))
    return min(GEMM_ROWS, -(-dim // (16 * blocks)) * 16)


def gemm_units(m: int, n: int, kk: int):
    """split= for one GEMM cut into blocks: units of `gemm_rows` rows (or columns) of the
    larger of M and N, and the work of one unit."""
    dim, other = (m, n) if m >= n else (n, m)
    unit = gemm_rows(dim)
    return -(-dim // unit), unit * other * kk * GEMM_WORK
