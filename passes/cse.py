"""Common-subexpression elimination: identical pure nodes become one node.

Guarantees: the returned graph computes the same outputs and input mutations, bit for bit, as
the input graph (a merged node computes exactly what its duplicate did: same op, same input
values, equal attributes). Two nodes are merged, the later into the earlier (which keeps its own
source line and phase), when all hold:

  - same op, same (already merged) input values, equal attributes: floats compared by their
    bits (`0.0` and `-0.0` stay apart), integers by value, constant arrays by dtype, shape and
    bytes;
  - the op is not random (`OpDef.random`): two calls of a random op draw different numbers;
  - neither node is a user's inplace request (`Node.inplace_of`), nor the value such a request
    overwrites (through views: the root of its target). Merging either could change what the
    reinplace pass decides for the request (a later read of the target blocks the in-place
    write; `inplace="strict"` would then refuse a program it accepted), and every request keeps
    its own decision in the plan;
  - not both of them reach the program's end (returned, an input's final value, or a view of
    one): two arrays the caller gets as distinct results must not become one buffer;
  - for nodes that own a buffer (not views), the earlier value is still live, in program
    order, where the later one is computed. Then the merged buffer is live exactly where one
    of the two was, so no program point holds more bytes than before and the lower bound
    can't rise. Two equal values whose lives don't overlap are computed twice: keeping the
    first alive across the gap would trade memory for time, which is recomputation's call.

Everything the later passes rely on is kept: views still hang off their one base, write-back
scatters and the chains that produce an input's final value are untouched nodes (only their
operands may be remapped to an equal value), and outputs and mutations are remapped. Nodes
whose inputs did not change are shared with the input graph; the others are copied with a new
output `Value` of the same id (printed names stay stable). The input graph is not modified.

Algorithm:
  1. Mark the pinned nodes (random ops, inplace requests and the roots they overwrite), the
     values that reach the end (live outputs, and the bases of views that do), and each
     buffer's last read in program order (through views; the end for values that reach it).
  2. Walk the nodes in program order; remap each node's inputs through the merges so far
     (copying the node when one changed), so chains of duplicates collapse in one walk.
  3. Look the node up by (op, input values, attribute key, type); a hit whose attributes are
     equal (arrays compared byte for byte) merges it, unless both reach the end or (for
     buffers) the first one is dead by then; a refused node becomes the one later duplicates
     meet. The survivor's buffer now lives until the later of the two last reads.
  4. Remap the graph's outputs and mutations.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import numbers

import numpy as np

from compiler.ir import Graph, Node, Value
from compiler.ops import REGISTRY, VIEW


_F8 = np.dtype(float).str


class _NoKey(Exception):
    """An attribute CSE can't compare: the node is never merged."""


def attr_key(value):
    """A hashable key such that equal keys mean attributes that give the same result.

    Arrays are keyed by a digest of their bytes; `same_attrs` confirms a hit byte for byte.
    A dict's key follows its insertion order (one op's attributes are made in one order; two
    orders only miss a merge)."""
    kind = type(value)
    # The plain Python types first, by identity (the same keys as below, without the
    # ABC isinstance checks and np.dtype(float): most of CSE's time on a long chain).
    if kind is float:
        return ("float", _F8, value.hex())
    if kind is int:
        return ("int", value)
    if kind is str or value is None:
        return value
    if kind is bool:
        return ("bool", value)
    if isinstance(value, np.dtype):  # (not an Integral: checked before that ABC)
        return ("dtype", value.str)
    if kind is dict:  # (a fused body's inner attributes, keyed by the cpu emitter)
        return ("dict",) + tuple((k, attr_key(v)) for k, v in value.items())
    if kind is tuple or kind is list:
        return (kind.__name__,) + tuple(attr_key(v) for v in value)
    if kind is float or isinstance(value, np.floating):
        # Bits, not value: 0.0 == -0.0 and nan != nan, but neither may be merged as equal.
        return ("float", np.dtype(kind).str, float(value).hex())
    if value is None or kind is str:
        return value
    if kind is bool or isinstance(value, np.bool_):
        return ("bool", bool(value))
    if isinstance(value, numbers.Integral):
        return ("int", int(value))
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return ("array", value.dtype.str, value.shape, digest)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, attr_key(v)) for k, v in value.items())
    raise _NoKey(kind.__name__)


def _has_array(value) -> bool:
    if isinstance(value, np.ndarray):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_array(v) for v in value)
    if isinstance(value, dict):
        return any(_has_array(v) for v in value.values())
    return False


def _same_value(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    return attr_key(a) == attr_key(b)


def same_attrs(a: Node, b: Node) -> bool:
    """Whether two nodes whose `attr_key`s are equal have equal attributes: only arrays (keyed
    by a digest) need a second look, byte for byte."""
    if not _has_array(a.attrs):
        return True
    return a.attrs.keys() == b.attrs.keys() and all(
        _same_value(a.attrs[k], b.attrs[k]) for k in a.attrs)


def _root_producer(v: Value) -> Node | None:
    while v.producer is not None and REGISTRY[v.producer.op].kind == VIEW:
        v = v.producer.inputs[0]
    return v.producer


def pinned_nodes(graph: Graph) -> set[int]:
    """Step 1: ids of the nodes CSE must leave alone (see the module docstring)."""
    pinned = set()
    for node in graph.nodes:
        if REGISTRY[node.op].random:
            pinned.add(id(node))
        if node.inplace_of is not None:
            pinned.add(id(node))
            target = _root_producer(node.inputs[node.inplace_of])
            if target is not None:
                pinned.add(id(target))
    return pinned


def reaching_end(graph: Graph) -> set[int]:
    """Step 1: ids of the values that reach the program's end, directly or through views."""
    reach = {id(v) for v in graph.live_outputs()}
    for node in reversed(graph.nodes):
        if REGISTRY[node.op].kind == VIEW and id(node.out) in reach:
            reach.add(id(node.inputs[0]))
    return reach


def last_reads(graph: Graph) -> dict[int, int]:
    """Step 1: id(value) -> index of the last node that reads its buffer (a non-view node
    reading it or a view of it; `len(graph.nodes)` when it reaches the end), for every value
    that owns a buffer; its own index when nothing reads it."""
    end = len(graph.nodes)
    root: dict[int, Value] = {}
    last: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        if REGISTRY[node.op].kind == VIEW:
            root[id(node.out)] = root.get(id(node.inputs[0]), node.inputs[0])
            continue
        last[id(node.out)] = i
        for v in node.inputs:
            r = root.get(id(v), v)
            last[id(r)] = max(last.get(id(r), -1), i)
    for v in graph.live_outputs():
        last[id(root.get(id(v), v))] = end
    return last


def _with_inputs(node: Node, inputs: list[Value]) -> Node:
    new = dataclasses.replace(node, inputs=inputs)
    new.out = copy.copy(node.out)  # same id, name and type; its own producer
    new.out.producer = new
    return new


def cse(graph: Graph) -> Graph:
    """Merge identical pure nodes of `graph` (see the module docstring). Returns a new graph."""
    pinned = pinned_nodes(graph)  # Step 1
    reach = reaching_end(graph)
    last = last_reads(graph)
    replaced: dict[int, Value] = {}  # id(value of the input graph) -> its value here
    table: dict[tuple, tuple[Node, Node]] = {}  # key -> (node here, the input graph's node)
    nodes: list[Node] = []
    for i, orig in enumerate(graph.nodes):  # Step 2
        inputs = [replaced.get(id(v), v) for v in orig.inputs]
        node = orig
        if any(a is not b for a, b in zip(inputs, orig.inputs)):
            node = _with_inputs(orig, inputs)
            replaced[id(orig.out)] = node.out
            if id(orig.out) in reach:
                reach.add(id(node.out))
        if id(orig) not in pinned:  # Step 3
            try:
                attrs = tuple((k, attr_key(v)) for k, v in node.attrs.items()) \
                    if node.attrs else ()
                key = (node.op, tuple(map(id, inputs)), attrs, node.out.shape,
                       node.out.dtype.str)
            except _NoKey:
                key = None
            if key is not None:
                first, first_orig = table.setdefault(key, (node, orig))
                is_view = REGISTRY[node.op].kind == VIEW
                if first is not node and (is_view or last[id(first_orig.out)] > i) and not (
                        id(first.out) in reach and id(node.out) in reach) and \
                        same_attrs(first, node):
                    replaced[id(orig.out)] = first.out
                    if id(node.out) in reach:
                        reach.add(id(first.out))
                    if not is_view:
                        last[id(first_orig.out)] = max(last[id(first_orig.out)],
                                                       last[id(orig.out)])
                    continue
                # Refused: later duplicates are compared with this one, which lives longer.
                table[key] = (node, orig)
        nodes.append(node)
    out = copy.copy(graph)  # Step 4
    out.nodes = nodes
    out.outputs = [replaced.get(id(v), v) for v in graph.outputs]
    out.mutations = {k: replaced.get(id(v), v) for k, v in graph.mutations.items()}
    return out
