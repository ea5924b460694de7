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


@contextmanager
def for_range(b: ir.IRBuilder, n, name="i", loop_md=None):
    """`for (i = 0; i < n; i++)`: yields the counter; the body may open nested blocks.
    `loop_md`: `!llvm.loop` metadata for the loop (e.g. `interleave_hint`)."""
    n = i64(n) if isinstance(n, int) else n
    fn = b.function
    pre = b.block
    head = fn.append_basic_block(f"{name}.head")
    body = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(i64(0), pre)
    b.cbranch(b.icmp_signed("<", i, n), body, done)
    b.position_at_end(body)
    yield i
    i.add_incoming(b.add(i, i64(1), flags=["nuw", "nsw"]), b.block)
    latch = b.branch(head)
    if loop_md is not None:
        latch.set_metadata("llvm.loop", loop_md)
    b.position_at_end(done)


def loop_nest(b: ir.IRBuilder, shape, body, prefix="d", inner_md=None):
    """Nested loops over `shape` (outermost first; ints or i64 values); `body(idxs)` emits
    one iteration. `inner_md`: `!llvm.loop` metadata for the innermost loop."""
    def rec(d, idxs):
        if d == len(shape):
            body(idxs)
            return
        n = shape[d] if isinstance(shape[d], ir.Value) else int(shape[d])
        with for_range(b, n, f"{prefix}{d}", inner_md if d == len(shape) - 1 else None) as i:
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
