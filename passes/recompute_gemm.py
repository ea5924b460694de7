"""GEMM recomputation: a matmul output that the backward pass reads may be computed again from
its saved operands right before its first backward reader instead of being kept alive from the
forward pass (activation checkpointing decided per value, not per layer).

Guarantees:
  1. What it returns are candidates for `passes.budget`'s search, each priced by its extra
     FLOPs (2 * m * n * k per product, times the batch); the search takes one only where a
     `memory_budget` needs it (a recomputed GEMM costs real work, so the default pipeline,
     without a budget, never takes one of these; the one exception is an attention input's
     projection, which passes.recompute_attention prices with the layer_norm copy it reads,
     within a small share of the program's FLOPs; the search prices such a GEMM there, not
     here). The report lists each taken with its extra FLOPs and the planned bytes it saved.
  2. A recomputation is exact: the copy is the same matmul on the same SSA operands
     (`passes.recompute.rewrite` places it), and every backend's matmul partitions its work by
     the shapes alone, so the copy's bits are the original's: a budgeted program computes the
     unbudgeted program's values bit for bit.
  3. The input graph is not changed (the rewrite clones).

A forward matmul `n` is a candidate when all hold (the same conditions as an elementwise
value's, `passes.recompute`, but for the op): it is a matmul, not a user's inplace write
(`not_a_gemm`); backward nodes and some forward node read its value (`not_read_late`); it is
at least `min_bytes`; it is not returned (`returned`); no operand's buffer is overwritten by a
requested inplace write before its first backward reader (`operand_overwritten`: the copy
reads what the original read).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.ir import Graph, Node

from . import recompute as rc
from .reinplace import describe_reader


def gemm_flops(node: Node) -> int:
    """2 * m * n * k per product of `node` (a matmul), times its batch."""
    a, b = (v.shape for v in node.inputs)
    k = a[-1] if len(a) else 1
    return 2 * k * math.prod(node.out.shape)


@dataclass
class GemmRecomputeDecision(rc.RecomputeDecision):
    """A matmul output considered for recomputation, priced as a GEMM."""

    @property
    def extra_flops(self) -> int:
        return gemm_flops(self.node)


def not_a_gemm(node: Node) -> str | None:
    if node.op != "matmul" or node.inplace_of is not None or not node.inputs:
        return f"{node.op} is not a matmul"
    return None


def candidates(graph: Graph, f: rc._Facts, min_bytes: int) -> tuple[list, list]:
    """(one decision per forward matmul output of at least `min_bytes` that the backward
    pass reads, those that may be recomputed); `f` is `passes.recompute`'s facts of `graph`."""
    considered, ok = [], []
    for node in graph.nodes:
        if not_a_gemm(node) is not None or rc.not_read_late(node, f) is not None \
                or node.out.nbytes < min_bytes:
            continue
        d = GemmRecomputeDecision(node, node.out.ref(), node.op, str(node.loc),
                                  node.out.nbytes, False, "")
        d.reason = rc.returned(node, f) or rc.operand_overwritten(node, f) or ""
        considered.append(d)
        if not d.reason:
            d.before = describe_reader(graph.nodes[f.late_readers(node.out)[0]])
            ok.append(d)
    return considered, ok
