"""The SSA intermediate representation: `Graph` of `Node`s, each producing one `Value`.

The IR is pure: every node computes a fresh value from its inputs. The user's inplace intent
survives as marks on nodes (`Node.inplace_of`: the input the user asked to overwrite) and as the
graph's input mutations (`Graph.mutations`), which the reinplace pass turns back into real
in-place writes when that is provably safe.

Printed form (the format tests pin; `[k]` is the node's program point)::

    graph f(x: f32[2,3], w: f32[3,4]) {
      [0] %0:f32[2,4] = matmul %x, %w                 # model.py:12
      [1] %1:f32[2,4] = relu %0  (inplace of %0)      # model.py:13
      [2] return %1
    }
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import CompilerError
from .ops import REGISTRY
# The printed forms of types and attributes live with the dtypes, so the op registry (a floor
# below) prints them too; re-exported here, where the printer uses them.
from .ops.registry import dtype_short, format_attr, type_str  # noqa: F401

PHASES = ("forward", "backward", "update")

@dataclass(frozen=True)
class Loc:
    """A source location in the user's program."""

    file: str
    line: int
    text: str = ""

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"

    def describe(self) -> str:
        """`file.py:LINE: source text`, for error messages."""
        return f"{self}: {self.text.strip()}" if self.text else str(self)


UNKNOWN_LOC = Loc("<unknown>", 0)


def loc_matches(loc: Loc, where) -> bool:
    """Does `loc` match `where`: a line number, "file.py:LINE" or "/path/to/file.py:LINE"?"""
    if isinstance(where, int):
        return loc.line == where
    file, _, line = str(where).rpartition(":")
    return loc.line == int(line) and (loc.file == file or loc.file.endswith(os.sep + file)
                                      or os.path.basename(loc.file) == file)


class _NoInferKey(Exception):
    """An attribute `infer_type` doesn't key (an array, a fused body, a callable)."""


def _infer_attr_key(v):
    t = type(v)
    if t is int or t is bool or t is str or v is None:
        return (t, v)  # (the type too: 1, 1.0 and True are equal keys otherwise)
    if t is float:
        return (t, v.hex())  # (bits: 0.0 and -0.0 stay apart)
    if t is tuple or t is list:
        return (t,) + tuple(map(_infer_attr_key, v))
    if isinstance(v, np.dtype):
        return (np.dtype, v)
    raise _NoInferKey


def infer_type(op: str, types: list, attrs: dict, cache: dict):
    """`REGISTRY[op].infer(types, **attrs)`, remembered in `cache` when every attribute is
    of a plain type. A shape rule is a pure function of its operands' types and its
    attributes, and a long trace asks the same question thousands of times (a 20k-op chain:
    a fifth of tracing and most of `verify_graph`); errors are raised each time, not kept."""
    try:
        key = (op, tuple(types), tuple([(k, _infer_attr_key(v)) for k, v in attrs.items()]))
    except _NoInferKey:
        return REGISTRY[op].infer(types, **attrs)
    got = cache.get(key)
    if got is None:
        got = cache[key] = REGISTRY[op].infer(types, **attrs)
    return got


class Value:
    """An SSA value: produced once (by a node, or as a graph input), with a static type."""

    __slots__ = ("id", "shape", "dtype", "producer", "name", "requires_grad", "size")

    def __init__(self, id: int, shape, dtype, producer: Node | None = None,
                 name: str | None = None):
        self.id = id
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.producer = producer
        self.name = name  # graph inputs carry the parameter name
        self.requires_grad = False  # trace-time autodiff bookkeeping
        self.size = math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def type(self) -> str:
        return type_str(self.shape, self.dtype)

    def ref(self) -> str:
        return f"%{self.name}" if self.name is not None else f"%{self.id}"

    def __repr__(self) -> str:
        return f"{self.ref()}:{self.type}"


@dataclass(eq=False)
class Node:
    """One operation. `op` names a registry entry; `attrs` are its static arguments."""

    op: str
    inputs: list[Value]
    attrs: dict[str, Any]
    out: Value | None = None
    loc: Loc = UNKNOWN_LOC
    phase: str = "forward"
    # Index of the input the user asked this op to overwrite (the `_` form, `x[i] = v`,
    # `+=`), or None. A request, not a decision: the reinplace pass decides.
    inplace_of: int | None = None
    # For nodes the autodiff pass made: the forward node whose VJP they implement.
    grad_of: Node | None = None

    def __repr__(self) -> str:
        return f"<Node {self.op} -> {self.out!r} at {self.loc}>"


@dataclass(eq=False)
class DataCheck:
    """A check on data the dtype and shape rules can't decide (class labels in range),
    recorded at trace time. When the checked value is a view of a caller's argument
    (`input_index`, through the view ops of `chain`), the driver checks the array at the call's
    entry, before anything runs; otherwise `node` checks it while the program runs, and the
    driver keeps the caller's arrays untouched until the run has finished (ARCHITECTURE.md §4)."""

    what: str                       # the user's function, e.g. "cross_entropy"
    node: Node                      # the node that checks during the run
    input_index: int | None         # the argument the value is a view of, if any
    chain: tuple                    # its view ops ((op, attrs), ...) from that argument
    num_classes: int
    ignore_index: int | None
    loc: Loc = UNKNOWN_LOC


@dataclass(eq=False)
class Graph:
    """A traced program.

    `inputs` are the caller's arguments (one Value each, named after the parameter);
    `outputs` are the values returned, `output_tree` rebuilds the returned Python structure
    from them; `mutations` maps an input's position to the value the caller's array must hold
    after the call (the function wrote into that argument), `mutation_locs` says where;
    `removed` lists the requested inplace nodes that dead-code elimination dropped.
    """

    name: str = "f"
    inputs: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    output_tree: Any = None
    mutations: dict[int, Value] = field(default_factory=dict)
    mutation_locs: dict[int, Loc] = field(default_factory=dict)
    data_checks: list[DataCheck] = field(default_factory=list)
    # numpy arrays the function captured as constants (cc.to_tensor, operands):
    # [(node, reference to the array, snapshot of its values at trace time)]
    captured: list = field(default_factory=list)
    # Nodes the user asked to run in place (`Node.inplace_of`) that dead-code elimination
    # removed: the plan still reports them, so a user looking for `x.sin_()` finds it.
    removed: list[Node] = field(default_factory=list)
    # Copies of forward nodes that the recompute pass placed in the backward pass: the
    # scheduler runs each right before its first reader (passes.recompute).
    recomputed: list[Node] = field(default_factory=list)
    _next_id: int = 0

    # -- construction -------------------------------------------------------------------
    def new_value(self, shape, dtype, producer=None, name=None) -> Value:
        """A fresh value, numbered in this graph, not yet an input or any node's output."""
        v = Value(self._next_id, shape, dtype, producer, name)
        self._next_id += 1
        return v

    def add_input(self, name: str, shape, dtype) -> Value:
        """Append an input (a parameter of the program) and return its value: `name` is how
        the listing, reports and errors print it (`%x`), `shape` a sequence of ints, `dtype`
        anything `np.dtype` takes. Inputs are the program's arguments, in the order added."""
        v = self.new_value(shape, dtype, None, name)
        self.inputs.append(v)
        return v

    def add_node(self, op: str, inputs, attrs, shape, dtype, loc=UNKNOWN_LOC,
                 phase="forward", inplace_of=None) -> Node:
        """Append a node whose output type is given, not inferred (`op` checks it against the
        registry's rule), and return the node: for passes that build graphs."""
        node = Node(op, list(inputs), dict(attrs), None, loc, phase, inplace_of)
        node.out = self.new_value(shape, dtype, node)
        self.nodes.append(node)
        return node

    def op(self, op: str, *inputs: Value, loc=UNKNOWN_LOC, phase: str = "forward",
           inplace_of: int | None = None, **attrs) -> Value:
        """Append `op(*inputs, **attrs)`, typed by the registry's rule, and return its value:
        the way to build a graph by hand (`y = g.op("exp", x)`)."""
        if op not in REGISTRY:
            raise CompilerError(f"unknown op {op!r}: the registry has "
                                + ", ".join(sorted(REGISTRY)))
        shape, dtype = REGISTRY[op].infer([(v.shape, v.dtype) for v in inputs], **attrs)
        return self.add_node(op, inputs, attrs, shape, dtype, loc, phase, inplace_of).out

    # -- queries ------------------------------------------------------------------------
    def value(self, name: str) -> Value:
        """The value printed as `name` ("%3", "%x" or "x")."""
        ref = name if name.startswith("%") else f"%{name}"
        for v in self.all_values():
            if v.ref() == ref:
                return v
        raise KeyError(f"{self.name} has no value {ref}")

    def nodes_at(self, where) -> list[Node]:
        """The nodes made by one source line: `where` is a line number, "file.py:LINE" or a
        path ending in "file.py:LINE"."""
        return [n for n in self.nodes if loc_matches(n.loc, where)]

    def users(self) -> dict[Value, list[Node]]:
        """Map every value to the nodes that read it, in program order."""
        users: dict[Value, list[Node]] = {v: [] for v in self.inputs}
        for n in self.nodes:
            users.setdefault(n.out, [])
            for v in n.inputs:
                users.setdefault(v, []).append(n)
        return users

    def all_values(self) -> list[Value]:
        """The inputs, then each node's output, in program order."""
        return list(self.inputs) + [n.out for n in self.nodes]

    def live_outputs(self) -> list[Value]:
        """Values that must exist when the program ends: returns and input mutations."""
        return list(self.outputs) + list(self.mutations.values())

    # -- printing -----------------------------------------------------------------------
    def __str__(self) -> str:
        return format_graph(self)

    def to_networkx(self):
        """A networkx DiGraph over values (node keys are the printed names, e.g. "%3"), with
        each edge from an operand to the value computed from it; for graph algorithms."""
        import networkx as nx  # lazy: 0.17 s to import, for this export only
        g = nx.DiGraph()
        for v in self.inputs:
            g.add_node(v.ref(), op="input", type=v.type)
        for n in self.nodes:
            g.add_node(n.out.ref(), op=n.op, type=n.out.type, loc=str(n.loc), phase=n.phase)
            for v in n.inputs:
                g.add_edge(v.ref(), n.out.ref())
        return g

    def to_dot(self, plan=None) -> str:
        """Graphviz source: inputs as boxes, nodes as ellipses, requested inplace in red,
        backward/update nodes dashed. With `plan` (a MemoryPlan of this graph), each value is
        filled with its buffer's colour and labelled `#buffer`, and each decided node shows
        "in place" or "copy" (the reason is its tooltip)."""
        lines = [f'digraph "{self.name}" {{', "  rankdir=TB;", "  node [fontname=monospace];"]

        def buffer_attrs(v):
            if plan is None or v not in plan.buffer_of:
                return "", ""
            b = plan.buffer_of[v]
            hue = (b.id * 0.618034) % 1.0  # golden-ratio hues: neighbours look different
            return (f", style=filled, fillcolor=\"{hue:.3f} 0.35 1.0\"",
                    f"\\n#{b.id} {b.kind}")

        decided = {id(d.node): d for d in (plan.decisions if plan is not None else ())
                   if d.node is not None}
        for v in self.inputs:
            fill, tag = buffer_attrs(v)
            lines.append(f'  v{v.id} [shape=box, label="{v.ref()}\\n{v.type}{tag}"{fill}];')
        for n in self.nodes:
            color = ', color=red' if n.inplace_of is not None else ''
            fill, tag = buffer_attrs(n.out)
            style = ', style=dashed' if n.phase != "forward" else ''
            if fill and style:
                style, fill = "", fill.replace("style=filled", "style=\"filled,dashed\"")
            d = decided.get(id(n))
            if d is not None:
                reason = d.reason.replace('"', "'")
                tag += f"\\n{'in place' if d.inplace else 'copy'}"
                fill += f', tooltip="{reason}"'
            lines.append(f'  v{n.out.id} [label="{n.out.ref()} = {n.op}\\n{n.out.type}\\n'
                         f'{n.loc}{tag}"{color}{style}{fill}];')
            for v in n.inputs:
                lines.append(f"  v{v.id} -> v{n.out.id};")
        for i, v in enumerate(self.outputs):
            lines.append(f'  out{i} [shape=doublecircle, label="out{i}"]; v{v.id} -> out{i};')
        for i, v in self.mutations.items():
            lines.append(f'  mut{i} [shape=box, style=bold, label="{self.inputs[i].ref()}\''
                         f'"]; v{v.id} -> mut{i};')
        lines.append("}")
        return "\n".join(lines)


def format_node(n: Node) -> str:
    args = ", ".join(v.ref() for v in n.inputs)
    attrs = " ".join(f"{k}={format_attr(v)}" for k, v in n.attrs.items()) \
        if n.op != "fused" else f"{len(n.attrs['body'])} ops"
    text = f"{n.out.ref()}:{n.out.type} = {n.op}"
    if args:
        text += f" {args}"
    if attrs:
        text += f" {{{attrs}}}"
    if n.inplace_of is not None:
        text += f"  (inplace of {n.inputs[n.inplace_of].ref()})"
    return text


def _fused_lines(n: Node, indent: str) -> list[str]:
    """The inner ops of a fused node (`passes.fusion`): `$k` is the fused node's input k."""
    body = n.attrs["body"]
    refs = [f"${k}" for k in range(len(n.inputs))]
    lines = []
    for j, inner in enumerate(body.nodes):
        if inner.op == "full":
            continue  # printed as its value where it is read
        attrs = " ".join(f"{k}={format_attr(v)}" for k, v in inner.attrs.items())
        text = (f"| {inner.out.ref()}:{inner.out.type} = {inner.op} "
                f"{body.operand_text(j, refs)}").rstrip()
        if attrs:
            text += f" {{{attrs}}}"
        if inner.inplace_of is not None:
            text += f"  (inplace of {body.operand_text(j, refs).split(', ')[inner.inplace_of]})"
        text = f"  {indent}{text}"
        lines.append(f"{text:<54}  # {inner.loc}" if inner.loc is not UNKNOWN_LOC else text)
    return lines


def format_graph(g: Graph) -> str:
    """The listing: each node prefixed with its program point `[k]` (the numbering that live
    intervals, the plan's report, its JSON and `plot()` use; the arguments are point -1, the
    return is point len(nodes))."""
    params = ", ".join(f"{v.name}: {v.type}" for v in g.inputs)
    lines = [f"graph {g.name}({params}) {{"]
    phase = "forward"
    width = len(str(len(g.nodes)))
    for i, n in enumerate(g.nodes):
        if n.phase != phase:
            lines.append(f"  // {n.phase}")
            phase = n.phase
        body = f"[{i:>{width}}] {format_node(n)}"
        lines.append(f"  {body:<52}  # {n.loc}" if n.loc is not UNKNOWN_LOC else f"  {body}")
        if n.op == "fused":  # what the fused node computes, one inner op a line
            lines += _fused_lines(n, " " * (width + 3))
    rets = ", ".join(v.ref() for v in g.outputs)
    end = f"[{len(g.nodes):>{width}}]"
    lines.append(f"  {end} return {rets}" if rets else f"  {end} return")
    for i, v in g.mutations.items():
        lines.append(f"  mutate {g.inputs[i].ref()} <- {v.ref()}  # {g.mutation_locs.get(i, '')}")
    lines.append("}")
    return "\n".join(lines)
