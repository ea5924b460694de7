"""One lowering table for every renderer: each registry op belongs to one kernel family.

A family is a shape of kernel that a renderer writes once and parametrises per op (the
registry's scalar expression, the axes, the attributes): elementwise (fused chains and `full`
included), reduction, view (no code: a place), GEMM, row (one row at a time: softmax, scans),
gather-scatter (data-dependent indices), conv/pool (windows), copy (regions, concatenation,
module constants) and communication (data-parallel all-reduces). The registry's kind decides
the family of most ops (`BY_KIND`); the kinds that say less (`other`, `scatter`, `creation`)
are listed op by op (`EXPLICIT`). An op in neither has no family, which the tests report, so
a new op says how it lowers before any backend meets it.

Each renderer declares a `Lowering`: the families it renders natively, the ops it runs
through a callback into the numpy reference, and the families it never sees because the
driver refuses them first. The `Backend` objects (`runtime/backends.py`) answer `native_ops`
from it.
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler.ops import ELEMENTWISE, MATMUL, REDUCTION, REGISTRY, VIEW

ELEMENTWISE_FAMILY = "elementwise"
REDUCTION_FAMILY = "reduction"
VIEW_FAMILY = "view"
GEMM = "gemm"
ROW = "row"
GATHER_SCATTER = "gather-scatter"
CONV_POOL = "conv-pool"
COPY = "copy"
COMMUNICATION = "communication"
FAMILIES = (ELEMENTWISE_FAMILY, REDUCTION_FAMILY, VIEW_FAMILY, GEMM, ROW, GATHER_SCATTER,
            CONV_POOL, COPY, COMMUNICATION)

# Registry kinds that name their family: every op of the kind lowers the same way.
BY_KIND = {ELEMENTWISE: ELEMENTWISE_FAMILY, REDUCTION: REDUCTION_FAMILY, VIEW: VIEW_FAMILY,
           MATMUL: GEMM}
# The ops of the other kinds, one by one.
EXPLICIT = {
    "full": ELEMENTWISE_FAMILY,          # a fill: an elementwise loop with no operand
    "softmax": ROW, "log_softmax": ROW, "cumsum": ROW,
    "argsort": ROW,                      # one row at a time (a merge sort over its workspace)
    "one_hot": GATHER_SCATTER, "index_select": GATHER_SCATTER, "index_add": GATHER_SCATTER,
    "take_along_axis": GATHER_SCATTER, "put_along_axis": GATHER_SCATTER,
    "conv2d": CONV_POOL, "conv2d_grad_input": CONV_POOL, "conv2d_grad_weight": CONV_POOL,
    "max_pool2d": CONV_POOL, "max_pool2d_grad": CONV_POOL,
    "concat": COPY, "slice_scatter": COPY,
    "constant": COPY, "arange": COPY,    # known at compile time: a module constant copied in
    "bucket_pack": COMMUNICATION, "allreduce_start": COMMUNICATION,
    "allreduce_wait": COMMUNICATION,
}


def family_of(op: str) -> str | None:
    """The kernel family of registry op `op`, or None when the table has none for it."""
    family = EXPLICIT.get(op)
    if family is None:
        family = BY_KIND.get(REGISTRY[op].kind)
    return family


def ops_of(*families: str) -> frozenset:
    """The registry ops of the given families."""
    return frozenset(op for op in REGISTRY if family_of(op) in families)


@dataclass(frozen=True)
class Lowering:
    """What one renderer lowers. `families`: rendered natively; `fallback`: ops that call
    back into the numpy reference instead (ops of a native family included: the explicit
    gap wins); `refused`: families the driver refuses before this renderer sees them."""
    families: frozenset
    fallback: frozenset = frozenset()
    refused: frozenset = frozenset()

    def native_ops(self) -> frozenset:
        # (read from the registry at each question: an op registered later is included)
        return ops_of(*self.families) - self.fallback


def lower_by_family(renderer) -> dict:
    """Family -> the renderer's method that lowers a node of it: `_lower_<family>` (dashes as
    underscores), for each family the renderer class defines one for. Views need no code."""
    methods = {}
    for family in FAMILIES:
        method = getattr(renderer, "_lower_" + family.replace("-", "_"), None)
        if method is not None:
            methods[family] = method
    return methods


# The reference interpreter runs every op of the registry through its `ref`.
REFERENCE = Lowering(frozenset(FAMILIES))
