"""Random masks regenerated from their Philox counters (issue 27, item 2c): a forward value
that the backward pass reads and that is computed from random draws and scalars only (dropout's
keep mask `philox(seed) >= p`) is computed again right before its first backward reader
instead of being kept from the forward pass.

Why it is exact: a `philox` node's element i is a pure function of (seed, stream, i), where i
is the element's row-major position in the node's own shape (compiler/ops/random_ops.py),
whatever loop it is fused into; the copy keeps the stream, the shape and the seed operand, so
it draws the same bits, and the ops after it are pure. Values and gradients are those of the
kept mask bit for bit, on every backend.

Why it can cost nothing: the copy reads only 0-d values (the seed, constants), which live
throughout anyway, and fusion folds the copied chain into the backward reader's loop (one
`where(keep, g, 0)` loop that draws its own numbers), so the mask needs no buffer at all: the
forward pass's mask is then read by its forward reader only and fused into it too. Unfused (the
numpy backend's default) the copy would materialise the draw: the pipeline doesn't try it there.

Candidates (`candidates`): a forward elementwise node, not a user's inplace write, at least
MIN_BYTES, not returned, read by at least one forward and one backward (or update) node, whose
operands come from elementwise nodes (no views, no inplace writes) down to values of at most
one element, with at least one random draw among them. When such a scalar's buffer is
overwritten between the node and its first backward reader (nn.Dropout advances its seed in
place right after the draw), the chain reads a copy of the scalar made before the write
(`_save_scalars`), so the regenerated chain reads what the original read.

The pipeline (`compiler.pass_pipeline._regenerate_random`) plans the graph with and without
the copies (fusion, schedule, reinplace, plan_memory: the real peak) and keeps them only when
the planned peak is lower: regeneration costs the draw again (Philox-4x32-10: ~230 integer
operations per element), so it is taken only for memory it saves.
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler.ir import Graph, Node, Value
from compiler.ops import ELEMENTWISE, REGISTRY

from . import recompute as rc
from .fusion import node_cost
from .reinplace import describe_reader
from .rewrite import clone_node, rebuilt

MIN_BYTES = rc.MIN_BYTES
MAX_CHAIN = 16   # nodes a regenerated chain may hold (dropout's: the draw and its comparison)


@dataclass
class RegenerateDecision(rc.RecomputeDecision):
    """A random mask regenerated in the backward pass (or kept, and why): priced by the
    scalar operations of its whole chain (the draw included), not one op's."""

    ops_per_element: int = 0

    @property
    def extra_flops(self) -> int:
        return self.node.out.size * self.ops_per_element

    @property
    def text(self) -> str:
        head = f"{self.value} = {self.op} ({self.loc}, {self.nbytes} B)"
        if self.recomputed:
            return (f"{head}: regenerated from its Philox counters before {self.before} "
                    f"({self.extra_flops} extra scalar operations): {self.reason}")
        return f"{head}: kept from the forward pass: {self.reason}"


def _cone(v: Value) -> list[Node] | None:
    """The nodes computing `v` from values of at most one element (in no particular order),
    when all are elementwise, not views and not inplace writes, and at most MAX_CHAIN of
    them; None otherwise. (Bounded, so the pass stays linear on long chains.)"""
    nodes: dict[int, Node] = {}
    stack, seen = [v], set()
    while stack:
        x = stack.pop()
        if x.size <= 1 or id(x) in seen:
            continue
        seen.add(id(x))
        n = x.producer
        if n is None or REGISTRY[n.op].kind != ELEMENTWISE or n.inplace_of is not None:
            return None
        nodes[id(n)] = n
        if len(nodes) > MAX_CHAIN:
            return None
        stack.extend(n.inputs)
    return list(nodes.values())


def _leaves(cone: list[Node]) -> list[Value]:
    return [x for m in cone for x in m.inputs if x.size <= 1]


def candidates(graph: Graph) -> tuple[rc._Facts, list[tuple[Node, list[Node], list[Value]]]]:
    """(facts, [(node, the other nodes of its chain in program order, its scalar leaves
    overwritten before its first backward reader)]) for each value that can be regenerated
    (module docstring)."""
    f = rc._Facts(graph)
    out = []
    for node in graph.nodes:
        if node.phase != "forward" or REGISTRY[node.op].kind != ELEMENTWISE \
                or node.inplace_of is not None or node.out.nbytes < MIN_BYTES \
                or rc.not_read_late(node, f) is not None or rc.returned(node, f) is not None:
            continue
        cone = _cone(node.out)
        if not cone or not any(REGISTRY[m.op].random for m in cone):
            continue
        i, first = f.index[id(node)], f.late_readers(node.out)[0]
        written = {id(x): x for x in _leaves(cone)
                   if any(i < w < first for w in f.writes.get(id(f.root[x]), ()))}
        chain = sorted((m for m in cone if m is not node), key=lambda m: f.index[id(m)])
        out.append((node, chain, list(written.values())))
    return f, out


def _save_scalars(graph: Graph, found) -> Graph:
    """`graph` where the chains that read a scalar overwritten before their backward reader
    (nn.Dropout advances its seed in place, `seed.add_(1)`, right after the draw) read a
    copy of it made right before the chain's first reader of it: 8 bytes kept instead of
    the mask."""
    leaves = {id(x) for _, _, written in found for x in written}
    readers = {id(m) for n, chain, written in found if written for m in chain + [n]}
    next_id = graph._next_id
    vmap: dict[int, Value] = {}
    nmap: dict[int, Node] = {}
    nodes: list[Node] = []
    saved: dict[int, Value] = {}
    for node in graph.nodes:
        inputs = []
        for x in node.inputs:
            if id(x) in leaves and id(node) in readers:
                if id(x) not in saved:
                    copy = Node("contiguous", [vmap.get(id(x), x)], {}, None, node.loc,
                                node.phase)
                    copy.out = Value(next_id, x.shape, x.dtype, copy)
                    next_id += 1
                    nodes.append(copy)
                    saved[id(x)] = copy.out
                inputs.append(saved[id(x)])
            else:
                inputs.append(vmap.get(id(x), x))
        new = clone_node(node, inputs)
        vmap[id(node.out)], nmap[id(node)] = new.out, new
        nodes.append(new)
    return rebuilt(graph, nodes, vmap, nmap, next_id)


def regenerate(graph: Graph) -> tuple[Graph, list[RegenerateDecision]]:
    """`graph` with every value `candidates` finds regenerated before its first backward
    reader (each chain copied once, the copies listed in the graph's `recomputed`, so the
    scheduler makes them right before their reader), and one decision per value (marked
    regenerated; the pipeline marks them kept when it refuses the graph). `graph` itself and
    no decisions when there is none."""
    f, found = candidates(graph)
    if not found:
        return graph, []
    if any(written for _, _, written in found):
        graph = _save_scalars(graph, found)
        f, found = candidates(graph)
        assert not any(written for _, _, written in found), "a saved scalar is overwritten"
    chains = {id(n): chain for n, chain, _ in found}
    out, copies = rc.rewrite(graph, [n for n, _, _ in found], f, chains)
    decisions = []
    for n, chain, _ in found:
        d = RegenerateDecision(n, n.out.ref(), n.op, str(n.loc), n.out.nbytes, True, "",
                               ops_per_element=sum(node_cost(m) for m in chain + [n]))
        d.before = describe_reader(graph.nodes[f.late_readers(n.out)[0]])
        d.copy = copies.get(n)
        decisions.append(d)
    return out, decisions
