"""The numpy reference interpreter: the semantics every backend is tested against.

Runs a graph op by op with fresh arrays from each registry entry's `ref`, checking that each
result has the shape and dtype the trace inferred (a mismatch is a registry bug).
"""
from __future__ import annotations

import numpy as np

from compiler.errors import CompilerError
from compiler.ir import Graph, Value
from compiler.ops import REGISTRY


def run_node(node, args: list[np.ndarray]) -> np.ndarray:
    """Evaluate one node with its op's reference implementation."""
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
