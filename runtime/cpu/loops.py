"""IR-building helpers of the cpu backend: loops (with their `!llvm.loop` metadata), flat
indices and element pointers. Shared by the module emitter (`emitter.py`) and its index
kernels (`index_kernels.py`); the layout maths both backends use is `runtime/lowering/layout.py`."""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

from .scalar import I32, I64, mem_type


def i64(n: int):
    return ir.Constant(I64, int(n))


class _LoopID(ir.values.MDValue):
    """A loop's `!llvm.loop` metadata: a distinct node whose first operand is itself (LLVM's
    rule for loop IDs), then the loop's properties (`hints`)."""

    def __init__(self, module: ir.Module, hints):
        super().__init__(module, [], name=str(len(module.metadata)))
        self.hints = hints

    def descr(self, buf):
        ops = [self.get_reference()] + [h.get_reference() for h in self.hints]
        buf += ("distinct !{{ {0} }}".format(", ".join(ops)), "\n")


def interleave_hint(module: ir.Module, count: int) -> ir.values.MDValue:
    """Loop metadata asking the vectoriser for `count` independent vectors per iteration."""
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"),
                                ir.Constant(I32, count)])
    return _LoopID(module, [hint])


class Split:
    """A chunk of a parallel kernel (`emitter._kernel`): its outermost loop, of extent `n`,
    runs over [lo, hi) only (i64 values). Set as `builder.split` while the kernel's body is
    emitted; the kernel's top-level `loop_nest` takes it (and must: a top-level loop of
    another extent, or none, is refused, so no chunk ever runs the whole loop)."""

    def __init__(self, n: int, lo, hi):
        self.n, self.lo, self.hi, self.used = n, lo, hi, 0

    def range_for(self, b, n):
        """(lo, hi) for a top-level loop of extent `n` (marks the split used)."""
        ext = n if isinstance(n, int) else None
        if ext != self.n:
            raise AssertionError(f"a split kernel's top-level loop has extent {n}, not the "
                                 f"split's {self.n}")
        self.used += 1
        return self.lo, self.hi


def _top_split(b):
    split = getattr(b, "split", None)
    return split if split is not None and getattr(b, "depth", 0) == 0 else None


@contextmanager
def for_range(b: ir.IRBuilder, n, name="i", loop_md=None, start=None):
    """`for (i = start; i < n; i++)` (start 0 by default): yields the counter; the body may
    open nested blocks. `loop_md`: `!llvm.loop` metadata for the loop (e.g. `interleave_hint`)."""
    if start is None and _top_split(b) is not None:
        raise AssertionError("a split kernel's top-level loop must come from loop_nest")
    n = i64(n) if isinstance(n, int) else n
    fn = b.function
    pre = b.block
    head = fn.append_basic_block(f"{name}.head")
    body = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(i64(0) if start is None else start, pre)
    b.cbranch(b.icmp_signed("<", i, n), body, done)
    b.position_at_end(body)
    b.depth = getattr(b, "depth", 0) + 1
    yield i
    b.depth -= 1
    i.add_incoming(b.add(i, i64(1), flags=["nuw", "nsw"]), b.block)
    latch = b.branch(head)
    if loop_md is not None:
        latch.set_metadata("llvm.loop", loop_md)
    b.position_at_end(done)


def loop_nest(b: ir.IRBuilder, shape, body, prefix="d", inner_md=None):
    """Nested loops over `shape` (outermost first; ints or i64 values); `body(idxs)` emits
    one iteration. `inner_md`: `!llvm.loop` metadata for the innermost loop. In a chunk of a
    parallel kernel (`Split`), a top-level nest's outermost loop runs the chunk's range."""
    split = _top_split(b)
    if split is not None and not shape:
        raise AssertionError("a split kernel's top-level code must be a loop")

    def rec(d, idxs):
        if d == len(shape):
            body(idxs)
            return
        n = shape[d] if isinstance(shape[d], ir.Value) else int(shape[d])
        md = inner_md if d == len(shape) - 1 else None
        if d == 0 and split is not None:
            lo, hi = split.range_for(b, n)
            with for_range(b, hi, f"{prefix}{d}", md, start=lo) as i:
                rec(d + 1, idxs + [i])
            return
        with for_range(b, n, f"{prefix}{d}", md) as i:
            rec(d + 1, idxs + [i])
    rec(0, [])


def index(b: ir.IRBuilder, offset: int, strides, idxs):
    """offset + sum(idx * stride) as an i64 (zero strides skipped)."""
    acc = i64(offset)
    for i, s in zip(idxs, strides):
        if s == 0:
            continue
        term = i if s == 1 else b.mul(i, i64(s), flags=["nsw"])
        acc = b.add(acc, term, flags=["nsw"])
    return acc


def elem_ptr(b: ir.IRBuilder, base, dtype, idx):
    return b.gep(base, [idx], inbounds=True, source_etype=mem_type(dtype))
