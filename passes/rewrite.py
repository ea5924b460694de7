"""One place where a pass that rebuilds a graph remaps the graph's side tables.

gemm_accumulate, fusion and recompute copy a graph node by node, replacing, inserting or
dropping nodes. Besides `nodes`, a `Graph` carries tables that point at nodes and values
(`outputs`, `mutations`, `data_checks`, `captured`, each node's `grad_of`); `rebuilt`
remaps all of them through the pass's maps, so that a new side table is remapped here once
rather than in every pass. Tables keyed by argument position (`mutation_locs`,
`output_tree`) and `removed` (nodes no longer in any graph) are kept as they are.

`recomputed` is kept as it is too, as the passes always did: the recompute pass sets it on
the graph it returns, and a copy that fusion later rewires (its operand became a fused
value) leaves the scheduler's "run right before the first reader" set. Remapping it would
change schedules (examples/gpt.py on cpu: planned peak 4,136,468 B -> 4,238,868 B).
"""

from __future__ import annotations

import copy

from compiler.ir import Graph, Node, Value


def clone_node(node: Node, inputs, value_id: int | None = None) -> Node:
    """A fresh copy of `node` reading `inputs`, with a fresh value of the same id, type and
    name (or a new id `value_id`, unnamed: a second copy of the node)."""
    new = Node(node.op, list(inputs), dict(node.attrs), None, node.loc, node.phase,
               node.inplace_of, node.grad_of)
    v = Value(node.out.id if value_id is None else value_id, node.out.shape, node.out.dtype,
              new, node.out.name if value_id is None else None)
    v.requires_grad = node.out.requires_grad
    new.out = v
    return new


def stand_in(node: Node, new: Node) -> Node:
    """`new` (another op computing `node`'s value) given a fresh value with `node`'s id, type,
    name and requires_grad, so every reader and side table keeps naming it."""
    v = Value(node.out.id, node.out.shape, node.out.dtype, new, node.out.name)
    v.requires_grad = node.out.requires_grad
    new.out = v
    return new


def rebuilt(graph: Graph, nodes: list[Node], values: dict[int, Value],
            node_map: dict[int, Node], next_id: int | None = None) -> Graph:
    """A shallow copy of `graph` holding `nodes`, every side table remapped: `values` maps
    id(old value) -> its replacement and `node_map` id(old node) -> its replacement; what
    the maps do not name is kept. `next_id` is the new graph's next value id (if it grew)."""
    out = copy.copy(graph)
    out.nodes = nodes
    if next_id is not None:
        out._next_id = next_id

    def value(v: Value) -> Value:
        return values.get(id(v), v)

    def node(n: Node) -> Node:
        return node_map.get(id(n), n)

    for n in nodes:
        if n.grad_of is not None:
            n.grad_of = node(n.grad_of)
    out.outputs = [value(v) for v in graph.outputs]
    out.mutations = {k: value(v) for k, v in graph.mutations.items()}
    out.data_checks = [copy.copy(c) for c in graph.data_checks]
    for c in out.data_checks:
        c.node = node(c.node)
    out.captured = [(node(n), ref, snap) for n, ref, snap in graph.captured]
    return out
