"""Dead-code elimination.

Guarantees: the returned graph computes the same outputs and input mutations, and every node in
it contributes to one of them. Nodes are shared with the input graph (they are never mutated).

Algorithm:
  1. Mark the values the program must produce: returns and input mutations.
  2. Walk the nodes in reverse; a node is live when its output is marked; mark its inputs.
  3. Keep the live nodes in their original order; remember the requested inplace nodes that
     were dropped (`Graph.removed`), so that the plan can still report them.
"""
from __future__ import annotations

import copy

from compiler.ir import Graph


def dce(graph: Graph) -> Graph:
    """Drop the nodes that no output or input mutation needs (see the module docstring).
    Returns a new graph sharing the kept nodes; the requested inplace nodes dropped are
    appended to its `removed`, so that the plan still reports them. `graph` is unchanged."""
    needed = {id(v) for v in graph.live_outputs()}  # Step 1
    live = []
    for node in reversed(graph.nodes):  # Step 2
        if id(node.out) in needed:
            live.append(node)
            needed.update(id(v) for v in node.inputs)
    out = copy.copy(graph)  # Step 3
    out.nodes = live[::-1]
    kept = set(map(id, live))
    out.removed = graph.removed + [n for n in graph.nodes
                                   if id(n) not in kept and n.inplace_of is not None]
    return out
