"""Reinplace: decide, for every candidate op, whether its output may take an input's buffer.

Candidates are the ops the user wrote in the `_` form (and set-item/write-backs, marked
`Node.inplace_of`) and, in `inplace="auto"`, every other elementwise or scatter op. The output
of node `n` may take the buffer of its input `a` when all four conditions of ARCHITECTURE.md §4
hold, each a named predicate below that returns None or the sentence the user reads in the plan:

  1. `cannot_overwrite`: `n` writes each element exactly where it reads it: elementwise with
     the input's shape and dtype, a scatter into its base, or gemm into its accumulator (an
     op's `overwrites` inputs); the input is not an expanded
     (self-overlapping) view; no other operand reads a different region of the same buffer.
  2. `read_later`: no node scheduled after `n` reads `a` or any view of its buffer (backward
     and update nodes included) -- except the write-back scatter of an inplace op on a view,
     when that scatter exactly inverts the view (then `n` writes straight into the region).
  3. `caller_buffer`: the buffer is not a caller's array, unless donated or `n` is part of that
     array's own mutation (the user's inplace write into an argument).
  4. `returned`: the value is not returned or needed as an input's final value.

Algorithm:
  1. Alias analysis and liveness over the whole program (passes.alias, passes.liveness).
  2. Find each mutated input's writers: the nodes on the chain from its final value back to it.
  3. Walk the nodes in program order, tracking which buffer each value lives in and where
     (its placement, an element layout inside the buffer). For each candidate, try the
     requested input (or, for auto candidates, each same-shaped input in order) against the
     four predicates; record a `Decision`; when taken, the output joins the input's buffer at
     the input's placement.
  4. In `inplace="strict"`, a requested op that was refused raises `InplaceError` naming its
     line and the line of the op that still needs the value.
  5. Requested inplace ops that dead-code elimination removed (`Graph.removed`) get a decision
     "removed: its result is never used" (strict mode has nothing to refuse there).
  6. Requested inplace ops inside a fused node (`passes.fusion`) that the fused node itself
     doesn't carry get a decision "fused into %N ...: no buffer": their value lives in
     registers inside the fused loop, so nothing is copied and nothing is refused.

Decisions are the pass's whole output: `plan_memory` rebuilds buffers from them, and the
verifier re-checks them independently.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.errors import InplaceError
from compiler.ir import Graph, Node, Value
from compiler.layout import apply_view, contiguous_probe, extent, overlaps_itself, region
from compiler.ops import ELEMENTWISE, REGISTRY, SCATTER, VIEW

from .alias import AliasInfo, alias_analysis
from .liveness import Liveness, liveness


@dataclass
class Decision:
    """One inplace candidate: what was decided, and why. `loc` is "file.py:LINE"; `source` is
    the full location (path, line, source text) of the node decided."""

    op: str               # as the user wrote it: "sin_" for a requested inplace sin
    loc: str              # "file.py:LINE"
    requested: bool       # the user wrote the inplace form (or set-item)
    inplace: bool         # the output takes the input's buffer
    reason: str           # why not, or what it reuses
    input_index: int | None = None
    node: Node | None = field(default=None, repr=False, compare=False)

    @property
    def source(self):
        """The node's `compiler.ir.Loc`: `.file` (the full path), `.line`, `.text`."""
        return self.node.loc if self.node is not None else None

    @property
    def phase(self) -> str:
        """forward / backward / update: the phase of the node decided."""
        return self.node.phase if self.node is not None else "forward"

    def to_dict(self) -> dict:
        return {"op": self.op, "loc": self.loc, "phase": self.phase,
                "requested": self.requested, "inplace": self.inplace, "reason": self.reason,
                "input_index": self.input_index,
                "value": self.node.out.ref() if self.node is not None else None}


def fused_decisions(fused: Node, inplace: str = "auto") -> list[Decision]:
    """Step 6: a decision for each requested inplace op inside `fused` (the root's own request
    is the fused node's decision when the fused node carries it). Its value has no buffer,
    so nothing is copied: counted in place, except under inplace="off", which reports no
    op in place."""
    body = fused.attrs["body"]
    out = []
    for j, inner in enumerate(body.nodes):
        if inner.inplace_of is None or (j == len(body.nodes) - 1 and fused.inplace_of is not None):
            continue
        kind, i = body.operands[j][inner.inplace_of]
        target = fused.inputs[i].ref() if kind == "in" else body.nodes[i].out.ref()
        if kind == "node" and body.nodes[i].op == "full":
            kind = "const"
        where = f"the fused loop, which reads {target}" if kind == "in" else "the fused loop"
        out.append(Decision(op_name(inner), str(inner.loc), True, inplace != "off",
                            f"fused into {fused.out.ref()} (fused at {fused.loc}): computed in "
                            f"{where}; no buffer", inner.inplace_of, inner))
    return out


def op_name(node: Node) -> str:
    opdef = REGISTRY[node.op]
    if node.inplace_of is not None and opdef.inplace:
        return opdef.inplace
    return node.op


def describe_value(v: Value) -> str:
    """`argument 'x'`, `%3 (multiply at model.py:3)`, or for a view `%4 (transpose at
    model.py:4, a view of %3 (multiply at model.py:3))`."""
    if v.producer is None:
        return f"argument '{v.name}'"
    p = v.producer
    if REGISTRY[p.op].kind == VIEW:
        root = p.inputs[0]
        while root.producer is not None and REGISTRY[root.producer.op].kind == VIEW:
            root = root.producer.inputs[0]
        return f"{v.ref()} ({p.op} at {p.loc}, a view of {describe_value(root)})"
    return f"{v.ref()} ({op_name(p)} at {p.loc})"


def describe_reader(node: Node, root: Value | None = None, aliases=None) -> str:
    """The node that reads a value, as the user wrote it; for a fused node, the op inside
    it that reads `root`'s storage (its root value, by `aliases`)."""
    if node.op == "fused" and root is not None:
        body = node.attrs["body"]
        for inner, ops in zip(body.nodes, body.operands):
            if any(kind == "in" and aliases.root.get(node.inputs[i]) is root
                   for kind, i in ops):
                node = inner
                break
    if node.phase == "backward" and node.grad_of is not None:
        return f"the backward of {op_name(node.grad_of)} at {node.grad_of.loc}"
    return f"{op_name(node)} at {node.loc}"


def donated_inputs(graph: Graph, donate, mutated_too: bool = False) -> set[int]:
    """Donation by parameter name or by position among the graph's (array) inputs. Arguments
    the program mutates are never treated as donated (`mutated_too=True`: just those)."""
    names = {v.name: k for k, v in enumerate(graph.inputs)}
    out = set()
    for d in donate or ():
        if isinstance(d, str):
            if d not in names:
                raise InplaceError(f"donate names '{d}', which is not an array parameter of "
                                   f"{graph.name} ({', '.join(names)})")
            out.add(names[d])
        else:
            out.add(int(d))
    # A mutated argument's buffer must end up holding its new value: donating it frees nothing.
    return out & set(graph.mutations) if mutated_too else out - set(graph.mutations)


def mutation_writers(graph: Graph) -> dict[Node, int]:
    """Step 2: node -> input index, for nodes on the chain that produces an input's final
    value from that input (through inplace ops, scatters and views)."""
    writers: dict[Node, int] = {}
    for k, final in graph.mutations.items():
        path, stack, reached = set(), [final], False
        while stack:
            v = stack.pop()
            if v is graph.inputs[k]:
                reached = True
                continue
            n = v.producer
            if n is None:
                continue
            kind = REGISTRY[n.op].kind
            if kind == VIEW:
                stack.append(n.inputs[0])
            elif kind == SCATTER:
                path.add(n)
                stack.extend(n.inputs[:2])
            elif n.inplace_of is not None:
                path.add(n)
                stack.append(n.inputs[n.inplace_of])
        if reached:
            writers.update({n: k for n in path})
    return writers


class _State:
    """Step 3's bookkeeping: which buffer each value lives in, and where inside it."""

    def __init__(self, graph, aliases, live, inplace, donated, writers):
        self.graph, self.aliases, self.live = graph, aliases, live
        self.inplace, self.donated, self.writers = inplace, donated, writers
        self.index = {n: i for i, n in enumerate(graph.nodes)}
        self.buffer: dict[Value, Value] = {}  # value -> the value that created its buffer
        self.place: dict = {}
        self.final = {id(v) for v in graph.live_outputs()}
        for v in graph.inputs:
            self.buffer[v], self.place[v] = v, contiguous_probe(v.shape)

    def take(self, node: Node, i: int | None):
        out = node.out
        if i is None:
            self.buffer[out], self.place[out] = out, contiguous_probe(out.shape)
        else:
            a = node.inputs[i]
            self.buffer[out], self.place[out] = self.buffer[a], self.place[a]

    def view(self, node: Node):
        src = node.inputs[0]
        self.buffer[node.out] = self.buffer[src]
        self.place[node.out] = apply_view(self.place[src], node.op, node.attrs)


# -- the four conditions -----------------------------------------------------------------
def cannot_overwrite(node: Node, i: int, st: _State) -> str | None:
    a, out = node.inputs[i], node.out
    kind = REGISTRY[node.op].kind
    if kind == SCATTER:
        if i != 0:
            return "a scatter can only write into its base"
        src = node.inputs[1]
        target = apply_view(st.place[a], "slice", node.attrs)
        if st.buffer[src] is st.buffer[a] and region(st.place[src]) != region(target):
            (lo, hi), (tlo, thi) = extent(st.place[src]), extent(target)
            if lo <= thi and tlo <= hi:
                return "the written value overlaps the region it is written to"
            return "the written value is read from another region of the same buffer"
        if not _views_fit(out, st.place[a], st):
            return "a later reshape of the result can't be expressed in the base's layout"
        return None
    if kind != ELEMENTWISE and i not in REGISTRY[node.op].overwrites:
        return f"{node.op} can't write its output over an input"
    if tuple(a.shape) != tuple(out.shape):
        return (f"output {list(out.shape)} is larger than the input {list(a.shape)} "
                "(broadcast)")
    if a.dtype != out.dtype:
        return f"output is {out.dtype}, the input is {a.dtype}"
    if overlaps_itself(st.place[a]):
        return "the input is an expanded view: several elements share one location"
    if node.inplace_of is None and a.nbytes < st.buffer[a].nbytes:
        # Only a user's write through a view (whose write-back follows) may land in a region:
        # otherwise the whole bigger buffer would stay alive as long as the output.
        return (f"the input is a view of a bigger buffer ({st.buffer[a].nbytes} B), which "
                "would stay alive as long as the output")
    for j, other in enumerate(node.inputs):
        if kind != ELEMENTWISE and j != i and st.buffer[other] is st.buffer[a]:
            # a gemm reads whole rows and columns of its operands while it writes
            return f"operand {j} is read from the buffer that {node.op} writes"
        if j != i and st.buffer[other] is st.buffer[a] \
                and region(st.place[other]) != region(st.place[a]):
            return (f"operand {j} reads another part of the same buffer, which the op "
                    "would overwrite")
    if not _views_fit(out, st.place[a], st):
        return "a later reshape of the output can't be expressed in the input's layout"
    return None


def _views_fit(out: Value, placement, st: _State) -> bool:
    """Can every view of `out` be taken if `out` lives at `placement`?"""
    if region(placement) == region(contiguous_probe(out.shape)):
        return True
    probes = {out: placement}
    for m in st.aliases.members[out][1:]:
        p = m.producer
        probes[m] = apply_view(probes[p.inputs[0]], p.op, p.attrs)
        if probes[m] is None:
            return False
    return True


def read_later(node: Node, i: int, st: _State) -> str | None:
    a = node.inputs[i]
    root = st.aliases.root[a]
    t = st.index[node]
    later = st.live.read_after(root, t)
    if later and later[-1] == st.live.end:
        later = later[:-1]
    if not later:
        return None
    if a is not root and len(later) == 1 and _is_exact_writeback(st.graph.nodes[later[0]],
                                                                 node, a, st):
        return None
    return f"input {describe_value(a)} is read later by " \
           f"{describe_reader(st.graph.nodes[later[0]], root, st.aliases)}"


def _is_exact_writeback(s: Node, node: Node, a: Value, st: _State) -> bool:
    """`s` scatters `node`'s output back into exactly the region `a` views, and `s` itself
    can write into that buffer: then `node` may write the region directly (ARCHITECTURE.md §8.3)."""
    if REGISTRY[s.op].kind != SCATTER or s.inputs[1] is not node.out:
        return False
    if st.live.readers[node.out] != [st.index[s]]:
        # The region value must die at its write-back: read later, it would sit in a buffer
        # that later inplace ops on the scatter's result may overwrite.
        return False
    base = s.inputs[0]
    if st.aliases.root[base] is not st.aliases.root[a]:
        return False
    written = apply_view(st.aliases.probe[base], "slice", s.attrs)
    if region(written) != region(st.aliases.probe[a]):
        return False
    return all(check(s, 0, st) is None for check in (read_later, caller_buffer, returned))


def caller_buffer(node: Node, i: int, st: _State) -> str | None:
    # Through the root: in a look-ahead (`_is_exact_writeback`) the input may be a view that
    # is created after the node being decided.
    owner = st.buffer[st.aliases.root[node.inputs[i]]]
    if owner.producer is not None:
        return None
    k = st.graph.inputs.index(owner)
    if k in st.donated or st.writers.get(node) == k:
        return None
    if k in st.donated_but_mutated:
        return (f"input {describe_value(node.inputs[i])} is donated, but the function writes "
                f"into it (at {st.graph.mutation_locs.get(k, '?')}): its buffer must end up "
                "holding the new value")
    return f"input {describe_value(node.inputs[i])} is a caller's array that was not donated"


def returned(node: Node, i: int, st: _State) -> str | None:
    a = node.inputs[i]
    for m in st.aliases.aliases(a):
        if id(m) in st.final:
            what = "returned by the program" if m in st.graph.outputs \
                else "the final value of a mutated argument"
            return f"input {describe_value(a)} is {what}"
    return None


CONDITIONS = (cannot_overwrite, read_later, caller_buffer, returned)
REQUESTED_ONLY = ("automatic reuse packs worse here: only the inplace ops the user wrote run "
                  "in place")


def _candidates(node: Node) -> list[int]:
    kind = REGISTRY[node.op].kind
    if node.inplace_of is not None:
        return [node.inplace_of]
    if kind == SCATTER:
        return [0]
    if REGISTRY[node.op].overwrites:  # gemm's accumulator
        return list(REGISTRY[node.op].overwrites)
    if kind == ELEMENTWISE:
        same = [i for i, v in enumerate(node.inputs) if tuple(v.shape) == tuple(node.out.shape)]
        if same:
            return same
        if any(v.shape for v in node.inputs):
            return [0]  # refused as a broadcast, and said so
    return []


def reinplace(graph: Graph, inplace: str = "auto", donate=(),
              requested_only: bool = False) -> tuple[Graph, list[Decision]]:
    """Decide every inplace candidate of `graph`. Returns the graph unchanged and the
    decisions (in program order). `requested_only=True` leaves the ops the user wrote out of
    place out of place (the planner's fallback when automatic reuse packs worse)."""
    assert inplace in ("auto", "off", "strict"), inplace
    aliases: AliasInfo = alias_analysis(graph)  # Step 1
    live: Liveness = liveness(graph, aliases)
    st = _State(graph, aliases, live, inplace, donated_inputs(graph, donate),
                mutation_writers(graph))  # Step 2
    st.donated_but_mutated = donated_inputs(graph, donate, mutated_too=True)
    decisions: list[Decision] = []
    for node in graph.nodes:  # Step 3
        if REGISTRY[node.op].kind == VIEW:
            st.view(node)
            continue
        candidates = _candidates(node)
        if not candidates:
            st.take(node, None)
            continue
        requested = node.inplace_of is not None
        taken, first_reason = None, None
        for i in candidates:
            if inplace == "off":
                reason = "inplace='off': every op writes a fresh buffer"
            elif requested_only and not requested:
                reason = REQUESTED_ONLY
            else:
                reason = next((r for r in (c(node, i, st) for c in CONDITIONS) if r), None)
            if reason is None:
                taken = i
                break
            first_reason = first_reason or (i, reason)
        if taken is not None:
            a = node.inputs[taken]
            text = f"writes over {describe_value(a)}"
            decisions.append(Decision(op_name(node), str(node.loc), requested, True, text,
                                      taken, node))
        else:
            i, reason = first_reason
            if requested and inplace == "strict":  # Step 4
                raise InplaceError(f"{op_name(node)} can't run in place (inplace='strict'): "
                                   f"{reason}", node.loc)
            if requested and inplace == "auto":
                reason += "; the old value is kept in its own buffer"
            decisions.append(Decision(op_name(node), str(node.loc), requested, False, reason,
                                      i, node))
        st.take(node, taken)
    for node in graph.removed:
        decisions.append(Decision(op_name(node), str(node.loc), True, False,
                                  "removed: its result is never used", node.inplace_of, node))
    for node in graph.nodes:  # Step 6
        if node.op == "fused":
            decisions += fused_decisions(node, inplace)
    decisions.sort(key=lambda d: d.node.out.id)  # program order (ids grow as nodes are traced)
    return graph, decisions
