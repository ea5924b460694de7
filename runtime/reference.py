"""The numpy reference interpreter: the semantics every backend is tested against.

Runs a graph op by op with fresh arrays from each registry entry's `ref`, checking that each
result has the shape and dtype the trace inferred (a mismatch is a registry bug).

16-bit floats (float16, bfloat16) are storage types: a node that reads or makes one computes
in float32 (its 16-bit operands widened, exactly) and rounds its result once, to nearest even,
into its dtype. So every op's half result is its float32 result rounded once, the rule the
compiled backends follow too.
"""
from __future__ import annotations

import numpy as np

from compiler.errors import CompilerError
from compiler.ir import Graph, Value
from compiler.ops import REGISTRY, is_half

F32 = np.dtype(np.float32)


def widened(node, args: list[np.ndarray]) -> list[np.ndarray] | None:
    """`args` with 16-bit float operands widened to float32 when `node` reads or makes a
    16-bit float (else None: the op runs on its operands as they are)."""
    if not (is_half(node.out.dtype) or any(is_half(a.dtype) for a in args)):
        return None
    return [a.astype(F32) if is_half(a.dtype) else a for a in args]


def run_node(node, args: list[np.ndarray]) -> np.ndarray:
    """Evaluate one node with its op's reference implementation."""
    args = widened(node, args) or args
    try:
        out = np.asarray(REGISTRY[node.op].ref(*args, **node.attrs))
    except CompilerError as e:  # a data check (a label out of range): name the user's line
        if e.loc is not None:
            raise
        raise type(e)(e.bare_message, node.loc) from None
    if out.dtype != node.out.dtype:
        out = out.astype(node.out.dtype)
    assert out.shape == node.out.shape, (
        f"registry bug: {node.op} produced {out.shape}, trace inferred {node.out.shape}")
    return out


def run_graph(graph: Graph, inputs: list[np.ndarray]) -> dict[Value, np.ndarray]:
    """Every value of the graph, computed from `inputs` (which are never written)."""
    env: dict[Value, np.ndarray] = {}
    for v, arr in zip(graph.inputs, inputs):
        env[v] = np.asarray(arr)
    with np.errstate(all="ignore"):  # inf/nan follow IEEE rules, as in compiled code
        for node in graph.nodes:
            env[node.out] = run_node(node, [env[v] for v in node.inputs])
    return env


def evaluate(graph: Graph, inputs: list[np.ndarray]):
    """(outputs, mutations): arrays for `graph.outputs` and for each mutated input."""
    env = run_graph(graph, inputs)
    outs = [env[v] for v in graph.outputs]
    muts = {i: env[v] for i, v in graph.mutations.items()}
    return outs, muts
