"""Fusion: chains and trees of elementwise ops become one `fused` node.

Guarantees:
  - the returned graph computes the same outputs and input mutations as the input graph: a
    fused node's body (`compiler.ops.fused.FusedBody`) is its inner nodes, unchanged, in their
    program order; the numpy reference evaluates them op by op (bit for bit the unfused
    result), and the native backends render the same registry expressions, each inner result
    cast to its dtype as a store would, without reassociating anything;
  - values inside a fused node get no buffer: only the root's value (the node's output)
    exists for the planner, the reinplace pass and the verifier, which see an ordinary
    elementwise node (it writes each output element from the same element of each input,
    broadcast), so it may write its output over one of its inputs under the usual rules;
  - nothing a later pass or the caller needs disappears: a value that is returned, is an
    input's final value, is read by a view, by a node outside the group, or twice by
    different groups stays a node's output (a group's root);
  - every inner node has the root's shape (a producer with a smaller, broadcast shape stays
    outside and is loaded with stride 0, so nothing is recomputed per broadcast element);
    constants are the exception: `full` and single-element `constant`s (`cc.to_tensor(1.0)`),
    read directly or through views and `broadcast_to`, become literals of every body that
    reads them (a `constant` captured from a numpy array stays a node: the program must
    still see the array change and trace again);
  - a user's inplace request (`Node.inplace_of`) inside a group is either on the root's
    request chain (root -> its target -> its target's target ...) or the group's root:
    following the chain from the root through inner nodes, when it reaches an input of the
    fused node, the fused node requests that input (`inplace_of`), so the reinplace pass
    decides it as before (strict mode refuses it as before) and a mutated argument's writer
    is still found; when it ends inside the body, the request's value has no buffer at all,
    and the reinplace pass reports it as "fused into %N: no buffer";
  - no external operand of a producer is read past an inplace write of it: moving the read
    to the root's position would make that write a copy (or a strict refusal); and a group
    whose request chain ends at an input stays unfused when a member reads another view of
    that input's storage (the fused node could not write over it where the chain's own
    node could);
  - a body's size is capped (MAX_COST scalar operations, `compiler.ops.fused.expr_cost`:
    transcendentals weigh 20-40, Philox's ~230 distinct operations count each once), so
    long chains become several fused nodes (LLVM at -O3 on a loop of 20,000 operations took
    223 s, measured); a single op above the cap stays unfused.

What code emitters render: `expr_for(fused, attrs, ...)` (compiler/ops/elementwise.py) returns
`attrs["body"].expr()`, one scalar-expression tree over the fused node's inputs `$0..$n-1`, in
which a value used twice is one shared `Expr` object (render it once: memoize by identity).
The CPU emitter renders it as one loop over the output, like any elementwise op (broadcast and
strided inputs, one pointer when the plan runs it in place); the CUDA emitter can do the same.

Not fused (yet): reductions and row-wise ops (a producer into a reduction, softmax-like rows,
layer_norm's mean/var/normalize); they keep their own kernels, and the elementwise trees
around them are fused. Values the backward pass reads stay buffers (fusion never recomputes).

Algorithm:
  1. Walk the nodes in reverse program order. An elementwise node (`broadcast_to`, whose
     reference needs the whole shape, excepted; `full` constants are inlined in step 2)
     joins the group of its readers when all hold: all its readers are in one group; it is
     not returned nor an input's final value; it has the group root's shape; its request
     (if any) is on the root's request chain; it is not a compact saved value
     (`passes.schedule.compact_derivation`: relu's mask, which the scheduler runs early so
     the bigger value dies); none of its operands is written in place between it and the
     root; the operands whose lives the move to the root's point extends are no bigger than
     the buffers fusing frees there, unless only members run in between
     (`_extension_pays`); no second random op joins a body; the group stays under MAX_COST.
     Otherwise it roots a new group.
  2. Groups of one node stay as they are. Every other group becomes one `fused` node at its
     root's position, with the root's location and phase and the root's output value (a copy
     with the same id: printed names stay stable); readers of changed values are copied with
     their inputs remapped (the input graph is not modified).
  3. Constants that only bodies read are removed (dead-code elimination).
"""
from __future__ import annotations

import copy
import dataclasses
from bisect import bisect_right

from compiler.ir import Graph, Node, Value
from compiler.ops import ELEMENTWISE, REGISTRY, SCATTER, VIEW
from compiler.ops.elementwise import expr_for
from compiler.ops.fused import FusedBody, expr_cost

from .cse import last_reads
from .rewrite import rebuilt
from .schedule import compact_derivation
from .simplify import dce

MAX_COST = 320  # scalar operations per fused node (LLVM's time grows faster than linearly)
# Elementwise ops whose reference depends on the whole array's shape (not per element).
_NOT_FUSIBLE = frozenset({"broadcast_to", "fused"})


def node_cost(node: Node) -> int:
    if node.op == "full":
        return 0
    e = expr_for(REGISTRY[node.op], node.attrs, [v.dtype for v in node.inputs], node.out.dtype)
    return expr_cost(e)


def _literal_root(v: Value, captured=()) -> Node | None:
    """The constant whose one value every element of `v` is, when a body can hold `v` as a
    literal: a `full` or a single-element `constant` not captured from a caller's array (ids
    in `captured`), read directly or through views and `broadcast_to` (`cc.to_tensor(1.0)
    .expand(shape)`); else None."""
    n = v.producer
    while n is not None and (REGISTRY[n.op].kind == VIEW or n.op == "broadcast_to"):
        n = n.inputs[0].producer
    if n is not None and (n.op == "full" or n.op == "constant" and n.out.size == 1
                          and id(n) not in captured):
        return n
    return None


def _literal(v: Value, captured=()) -> bool:
    return _literal_root(v, captured) is not None


def _as_full(v: Value, root: Node) -> Node:
    """`v`, whose elements are all the value of `root` (a `full` or single-element
    `constant`), as an inner `full` node with `v` as its output (the value as a Python scalar:
    exact for every dtype; a body broadcasts it)."""
    if root.op == "full" and root.out is v:
        return root
    value = root.attrs["value"]
    scalar = value if root.op == "full" else value.reshape(()).item()
    new = Node("full", [], {"shape": tuple(v.shape), "value": scalar, "dtype": v.dtype}, None,
               root.loc, root.phase, None, None)
    new.out = v
    return new


def _fusible(node: Node) -> bool:
    return (REGISTRY[node.op].kind == ELEMENTWISE and node.op not in _NOT_FUSIBLE
            and node.out.size > 0)


def _root_value(v: Value) -> Value:
    while v.producer is not None and REGISTRY[v.producer.op].kind == VIEW:
        v = v.producer.inputs[0]
    return v


class _Roots:
    """value -> the value that owns its storage (through views), as a mapping."""

    def __getitem__(self, v: Value) -> Value:
        return _root_value(v)


_ROOTS = _Roots()


class _Group:
    def __init__(self, root: Node, cost: int):
        self.root = root
        self.members = [root]
        self.cost = cost
        self.min_bytes = root.out.nbytes
        # The root's request chain: nodes whose value the next one on the chain overwrites.
        self.chain = {id(root)}


def fuse(graph: Graph, scratch: bool = True, max_cost: int = MAX_COST) -> Graph:
    """Fuse `graph`'s elementwise chains and trees (see the module docstring). `scratch`:
    the bodies declare the chunked numpy evaluation's scratch rows (False for native
    backends, whose inner values live in registers). Returns a new graph."""
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    users = graph.users()
    final = {id(v) for v in graph.live_outputs()}
    # Program points where each storage (a root value) is written in place: requested
    # inplace ops on it or a view of it, and scatters into it.
    writes: dict[int, list[int]] = {}
    for i, n in enumerate(graph.nodes):
        target = n.inputs[n.inplace_of] if n.inplace_of is not None else \
            n.inputs[0] if REGISTRY[n.op].kind == SCATTER else None
        if target is not None:
            writes.setdefault(id(_root_value(target)), []).append(i)

    def written_between(v: Value, lo: int, hi: int) -> bool:
        pts = writes.get(id(_root_value(v)), ())
        k = bisect_right(pts, lo)
        return k < len(pts) and pts[k] < hi

    group_of: dict[int, _Group] = {}
    groups: list[_Group] = []
    member_ids: set[int] = set()
    # Nodes that are no work between a producer and its group's root (views, single-element
    # constants), decided once per node rather than once per scan (`_extension_pays`).
    free = [REGISTRY[n.op].kind == VIEW or _literal(n.out) for n in graph.nodes]
    # The first point after the node being looked at that is work outside every group's
    # members: the walk goes backwards and a node's membership is settled once it is passed,
    # so this replaces a scan of up to GAP_SCAN nodes per node (`_extension_pays`).
    next_work = [len(graph.nodes)]
    ctx = (last_reads(graph), next_work)
    for i in range(len(graph.nodes) - 1, -1, -1):  # Step 1
        node = graph.nodes[i]
        if node.op != "full" and _fusible(node):
            cost = node_cost(node)
            g = _join(node, users, final, group_of, index, cost, max_cost, written_between,
                      ctx)
            if g is None:
                g = _Group(node, cost)
                groups.append(g)
            else:
                g.members.append(node)
                g.cost += cost
                g.min_bytes = min(g.min_bytes, node.out.nbytes)
                if _on_chain(node, users, g):
                    g.chain.add(id(node))
            group_of[id(node)] = g
            member_ids.add(id(node))
        if not free[i] and id(node) not in member_ids:
            next_work[0] = i
    fused = [g for g in groups if len(g.members) > 1 and not _target_conflict(g)]
    if not fused:
        return graph
    captured = {id(n) for n, _, _ in graph.captured}
    return dce(_rewrite(graph, fused, group_of, scratch, captured))  # Steps 2 and 3


def _join(node, users, final, group_of, index, cost, max_cost, written_between, ctx):
    """The group `node` joins (step 1's conditions), or None."""
    us = users.get(node.out, [])
    if not us or id(node.out) in final:
        return None
    g = group_of.get(id(us[0]))
    if g is None or any(group_of.get(id(u)) is not g for u in us):
        return None
    if node.out.shape != g.root.out.shape or g.cost + cost > max_cost:
        return None
    if REGISTRY[node.op].random and any(REGISTRY[m.op].random for m in g.members):
        return None  # two Philox bodies in one loop: rarely worth its size
    if compact_derivation(node, _ROOTS) is not None:
        # relu's mask `out > 0`: the scheduler runs it early so that the float value dies;
        # inside a later reader's loop it would keep that value alive instead
        return None
    if node.inplace_of is not None and not _on_chain(node, users, g):
        return None  # a request off the root's chain keeps its own node and decision
    lo, hi = index[id(node)], index[id(g.root)]
    if any(written_between(v, lo, hi) for v in node.inputs):
        return None
    if not _extension_pays(node, g, lo, hi, ctx):
        return None
    return g


GAP_SCAN = 64  # nodes looked at between a producer and its group's root (beyond: "a gap")


def _extension_pays(node, g, lo, hi, ctx) -> bool:
    """Fusing `node` moves its operand reads from its own point `lo` to the root's `hi`:
    operands that died at `lo` now live until `hi`. That costs nothing when only members of
    the group (or views, constants) run in between; otherwise only when the operands so
    extended are no bigger than what fusing frees there (`node`'s own buffer, and the
    group's smallest one). So a node that makes a smaller value from a bigger one (relu's
    1-byte mask `out > 0`, taken early so the float output can die: the scheduler's
    compact saved values) is not fused into a later reader across other work."""
    last, next_work = ctx
    # (views and single-element constants, captured or not, are no work in between)
    if next_work[0] >= min(hi, lo + 1 + GAP_SCAN) and hi - lo - 1 <= GAP_SCAN:
        return True
    extended = 0
    for v in {id(v): v for v in node.inputs}.values():
        r = _root_value(v)
        if r.producer is None or _literal(v):
            continue  # a caller's array lives throughout; a constant is inlined
        if last.get(id(r), hi) < hi:
            extended += r.nbytes
    return extended <= min(node.out.nbytes, g.min_bytes)


def _target_conflict(g: _Group) -> bool:
    """Does the group's request chain end at an input whose storage another member reads
    through another value (`a.flatten().add_(a.flatten()[::-1])`: the scaled reversed view is
    a member)? The fused node would then read another part of the buffer it must write
    (reinplace refuses), where the chain's own node reads only its own operands' buffers:
    such a group stays unfused, so that `inplace="strict"` decides as it does without."""
    members = {id(m.out) for m in g.members}
    node = g.root
    while node.inplace_of is not None and id(node.inputs[node.inplace_of]) in members:
        node = node.inputs[node.inplace_of].producer
    if node.inplace_of is None:
        return False
    target = node.inputs[node.inplace_of]
    root = _root_value(target)
    return any(v is not target and id(v) not in members and _root_value(v) is root
               for m in g.members for v in m.inputs)


def _on_chain(node, users, g) -> bool:
    """Is `node`'s value the target of a request on `g`'s root chain?"""
    return any(id(u) in g.chain and u.inplace_of is not None
               and u.inputs[u.inplace_of] is node.out for u in users[node.out])


def _rewrite(graph: Graph, fused: list[_Group], group_of, scratch: bool, captured) -> Graph:
    """Step 2: one fused node per group, at its root's place; readers remapped."""
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    inner = {id(m) for g in fused for m in g.members if m is not g.root}
    root_group = {id(g.root): g for g in fused}
    replaced: dict[int, Value] = {}
    nmap: dict[int, Node] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        if id(node) in inner:
            continue
        g = root_group.get(id(node))
        if g is not None:
            new = _fused_node(g, replaced, scratch, index, captured)
        elif any(id(v) in replaced for v in node.inputs):
            new = dataclasses.replace(node, inputs=[replaced.get(id(v), v) for v in node.inputs])
            new.out = copy.copy(node.out)
            new.out.producer = new
        else:
            new = node
        if new is not node:
            replaced[id(node.out)] = new.out
            nmap[id(node)] = new
        nodes.append(new)
    return rebuilt(graph, nodes, replaced, nmap)


def _fused_node(g: _Group, replaced, scratch: bool, index, captured) -> Node:
    members = sorted(g.members, key=lambda m: index[id(m)])  # program order
    position = {id(m.out): j for j, m in enumerate(members)}
    inputs: list[Value] = []
    slot: dict[int, int] = {}
    operands = []
    for m in members:
        ops = []
        for v in m.inputs:
            if id(v) in position:
                ops.append(("node", position[id(v)]))
                continue
            if id(v) not in slot:
                slot[id(v)] = len(inputs)
                inputs.append(replaced.get(id(v), v))
            ops.append(("in", slot[id(v)]))
        operands.append(ops)
    # constant operands become literals of the body (no input, no buffer)
    members, operands, inputs = _inline_constants(members, operands, inputs, captured)
    body = FusedBody(members, operands, [(v.shape, v.dtype) for v in inputs], scratch)
    root = g.root
    # the request chain, followed from the root through inner nodes to an input
    inplace_of, j = None, len(members) - 1
    while members[j].inplace_of is not None:
        kind, i = operands[j][members[j].inplace_of]
        if kind == "in":
            inplace_of = i
            break
        j = i
    new = Node("fused", inputs, {"body": body}, None, root.loc, root.phase, inplace_of,
               root.grad_of)
    new.out = copy.copy(root.out)
    new.out.producer = new
    return new


def _inline_constants(members, operands, inputs, captured=()):
    """Inputs that are literals (`_literal`) become inner `full` nodes (constants of the
    body)."""
    consts = [k for k, v in enumerate(inputs) if _literal(v, captured)]
    if not consts:
        return members, operands, inputs
    keep = [k for k in range(len(inputs)) if k not in consts]
    new_slot = {k: i for i, k in enumerate(keep)}
    const_nodes = [_as_full(inputs[k], _literal_root(inputs[k], captured)) for k in consts]
    const_pos = {k: i for i, k in enumerate(consts)}
    shift = len(const_nodes)

    def remap(o):
        kind, i = o
        if kind == "node":
            return ("node", i + shift)
        if i in const_pos:
            return ("node", const_pos[i])
        return ("in", new_slot[i])
    new_ops = [[] for _ in const_nodes] + [[remap(o) for o in ops] for ops in operands]
    return const_nodes + list(members), new_ops, [inputs[k] for k in keep]


def fused_nodes(graph: Graph) -> list[Node]:
    """The fused nodes of a graph, in program order."""
    return [n for n in graph.nodes if n.op == "fused"]
