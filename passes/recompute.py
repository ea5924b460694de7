"""Recomputation: a cheap forward value that the backward pass reads is computed again right
before its backward readers instead of being kept alive from the forward pass, when that lowers
the peak (ARCHITECTURE.md §4: "cheap elementwise values may be recomputed in the backward pass
instead of kept, each such decision explained in the report").

Guarantees: the returned graph computes the same outputs and input mutations, bit for bit: a
recomputed node is the same pure op on the same SSA operands, so the copy equals the original.
Each recomputation is taken only when the peak estimated by the scheduler's byte model
(`passes.schedule`, in the order it would pick) is at least MIN_BYTES lower with it. The
pipeline (`compiler.pass_pipeline`) then plans the scheduled graph with and without the
recomputations and keeps them only when the planned peak is lower, so recomputation never
costs memory there. The input graph is not changed (nodes are cloned).

A forward node `n` is a candidate when all hold (each a named predicate returning the sentence
the report shows for a refused candidate):
  1. `not_cheap`: `n` is elementwise (one pass over its operands, no reduction, no matmul),
     deterministic (not a random draw) and not a user's inplace write;
  2. `not_read_late`: backward nodes (or updates: a gemm folded by GEMM-accumulate) read `n`'s
     value (through views too) and so does some forward node: only then does a copy let the
     forward value die earlier;
  3. `too_small`: the value is at least MIN_BYTES (scalars and row statistics cost next to
     nothing to keep; such values get no decision);
  4. `operand_overwritten`: no operand's buffer is overwritten by a requested inplace write (an
     update `w.subtract_(...)`, a scatter) between `n` and its first backward reader in the
     written order, so the copy reads what `n` read and the write stays in place;
  5. `returned`: the value is not returned (it would have to live to the end anyway).
Operands kept alive only for the copy are what the byte model weighs: recomputing gelu(u) can
win because gelu's own backward keeps `u` anyway; recomputing relu(z) over a matmul's `z` that
relu overwrote cannot (z would have to live on) and is refused.

Algorithm:
  1. Readers of every buffer root; the written-order index of each requested inplace write.
  2. Candidates in decreasing size (at most MAX_TRIES of them, fewer in graphs past
     TRY_NODE_BUDGET / MAX_TRIES nodes, and none after GIVE_UP_AFTER refusals in a row, so the
     pass stays near-linear on 100k-node graphs: each try schedules the whole graph).
  3. For each that is alive at the estimated peak and whose operands don't die in the forward
     pass (`not_alive_at_the_peak`, a quick test), rewrite the graph with the accepted ones
     plus it: the copy goes right before the first backward reader in the written order (the
     scheduler runs it right before its first reader), and every backward reader (of the
     value or a view of it: the views are copied too) reads the copy; keep it when the
     scheduler's estimate of the new graph's peak is at least MIN_BYTES below the best so far.
  4. Estimate each kept one's share without it, given the others; drop those a later one made
     unnecessary. The decision states both estimates.
  5. Return the graph with the kept recomputations and one decision per candidate considered
     (values below MIN_BYTES are not listed).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compiler.ir import Graph, Node, Value
from compiler.ops import ELEMENTWISE, REGISTRY, SCATTER, VIEW

from .alias import alias_analysis
from .reinplace import describe_reader
from .rewrite import clone_node, rebuilt, stand_in
from .schedule import _Model, schedule
from .simplify import dce

MIN_BYTES = 65536
LATE = ("backward", "update")  # a weight update folded into a gemm reads forward values too
MAX_TRIES = 24
TRY_NODE_BUDGET = 20_000   # tries * nodes estimated per compile, at most
GIVE_UP_AFTER = 4          # consecutive refusals that end the search


@dataclass
class RecomputeDecision:
    """One forward value considered for recomputation: recomputed, or why not."""

    node: Node = field(repr=False)       # the forward node (of the input graph)
    value: str                            # its printed name, "%57"
    op: str
    loc: str
    nbytes: int
    recomputed: bool
    reason: str
    before: str = ""                      # the backward reader the copy runs before
    estimated_peak: int | None = None     # the byte model's peak with it (when tried)
    copy: Node | None = field(default=None, repr=False)  # the copy, in the returned graph
    saved_bytes: int | None = None        # planned bytes it saved (set by passes.budget)

    @property
    def extra_flops(self) -> int:
        return extra_flops(self.node)

    @property
    def text(self) -> str:
        head = f"{self.value} = {self.op} ({self.loc}, {self.nbytes} B)"
        if self.recomputed:
            saved = f", saves {self.saved_bytes} B planned" if self.saved_bytes else ""
            return (f"{head}: recomputed before {self.before} ({self.extra_flops} extra "
                    f"FLOPs{saved}): {self.reason}")
        return f"{head}: kept from the forward pass: {self.reason}"

    def to_dict(self) -> dict:
        return {"value": self.value, "op": self.op, "loc": self.loc, "nbytes": self.nbytes,
                "recomputed": self.recomputed, "reason": self.reason, "before": self.before,
                "estimated_peak": self.estimated_peak, "extra_flops": self.extra_flops,
                "saved_bytes": self.saved_bytes,
                "copy": self.copy.out.ref() if self.copy is not None else None}


class _Facts:
    def __init__(self, graph: Graph):
        self.graph = graph
        aliases = alias_analysis(graph)
        self.root = aliases.root
        self.members = aliases.members
        self.index = {id(n): i for i, n in enumerate(graph.nodes)}
        self.final = {id(aliases.root[v]) for v in graph.live_outputs()}
        # readers of each root's buffer (non-view nodes), by index
        self.readers: dict[int, list[int]] = {}
        # written-order indices of requested writes over each root's buffer
        self.writes: dict[int, list[int]] = {}
        for i, node in enumerate(graph.nodes):
            kind = REGISTRY[node.op].kind
            if kind == VIEW:
                continue
            for v in node.inputs:
                lst = self.readers.setdefault(id(aliases.root[v]), [])
                if not lst or lst[-1] != i:
                    lst.append(i)
            target = node.inplace_of if node.inplace_of is not None else (
                0 if kind == SCATTER else None)
            if target is not None:
                self.writes.setdefault(id(aliases.root[node.inputs[target]]), []).append(i)

    def late_readers(self, v: Value) -> list[int]:
        return [i for i in self.readers.get(id(v), ())
                if self.graph.nodes[i].phase in LATE]


# -- the candidate conditions -----------------------------------------------------------------
def not_cheap(node: Node) -> str | None:
    op = REGISTRY[node.op]
    if op.kind != ELEMENTWISE or op.random or node.inplace_of is not None or not node.inputs:
        return f"{node.op} is not a cheap elementwise op"
    return None


def not_read_late(node: Node, f: _Facts) -> str | None:
    if node.phase != "forward":
        return "not a forward value"
    readers = f.readers.get(id(node.out), [])
    late = [i for i in readers if f.graph.nodes[i].phase in LATE]
    if not late:
        return "no backward node reads it"
    if len(late) == len(readers):
        return "only backward nodes read it: the scheduler can move it instead"
    return None


def too_small(node: Node) -> str | None:
    if node.out.nbytes < MIN_BYTES:
        return f"smaller than {MIN_BYTES} B"
    return None


def returned(node: Node, f: _Facts) -> str | None:
    if id(node.out) in f.final:
        return "it is returned (or is an argument's final value)"
    return None


def operand_overwritten(node: Node, f: _Facts) -> str | None:
    i = f.index[id(node)]
    first = f.late_readers(node.out)[0]
    for v in node.inputs:
        r = f.root[v]
        for w in f.writes.get(id(r), ()):
            if i < w < first:
                writer = f.graph.nodes[w]
                return (f"operand {v.ref()} is overwritten by {writer.op} at {writer.loc} "
                        "before the backward pass reads the value")
    return None


def candidate_reason(node: Node, f: _Facts) -> str | None:
    return not_cheap(node) or not_read_late(node, f) or too_small(node) or returned(node, f) \
        or operand_overwritten(node, f)


def extra_flops(node: Node) -> int:
    """The price of computing `node` once more: an elementwise op counts one FLOP per element
    per operand beyond the first, at least one (`layer_norm`'s (x - mean) * rstd * w + b: 4)."""
    return node.out.size * max(1, len(node.inputs) - 1)


def candidates(graph: Graph, min_bytes: int) -> tuple[_Facts, list[RecomputeDecision],
                                                      list[RecomputeDecision]]:
    """Every forward value of at least `min_bytes` that a backward node reads (conditions 1
    and 2): (the facts, one decision each, those that may be recomputed (3-5 hold) in
    decreasing size). passes.budget searches these; the refused ones' reasons say why."""
    f = _Facts(graph)
    considered, ok = [], []
    for node in graph.nodes:
        if not_cheap(node) is not None or not_read_late(node, f) is not None \
                or node.out.nbytes < min_bytes:
            continue
        d = RecomputeDecision(node, node.out.ref(), node.op, str(node.loc), node.out.nbytes,
                              False, "")
        d.reason = returned(node, f) or operand_overwritten(node, f) or ""
        considered.append(d)
        if not d.reason:
            d.before = describe_reader(graph.nodes[f.late_readers(node.out)[0]])
            ok.append(d)
    ok.sort(key=lambda d: -d.nbytes)
    return f, considered, ok


def rewrite(graph: Graph, chosen: list[Node], f: _Facts, chains: dict | None = None
            ) -> tuple[Graph, dict[Node, Node]]:
    """`graph` with the chosen forward nodes recomputed (`_rewrite`; `chains`: see there),
    its `recomputed` list set for the scheduler; `graph` itself when none is chosen."""
    if not chosen:
        return graph, {}
    out, copies = _rewrite(graph, chosen, f, chains)
    out.recomputed = graph.recomputed + out.recomputed + list(copies.values())
    return out, copies


# -- rewriting ----------------------------------------------------------------------------------
def _rewrite(graph: Graph, chosen: list[Node], f: _Facts, chains: dict | None = None
             ) -> tuple[Graph, dict[Node, Node]]:
    """A copy of `graph` (fresh nodes and values, same ids) where each chosen forward node is
    computed again right before its first backward reader, and the backward readers of its
    value, or of a view of it, read the copy (through copied views). Returns the graph and
    {chosen node: its copy}. `chains` (id(chosen node) -> forward nodes in program order)
    names nodes copied first, right before the chosen node's copy, which read each other's
    copies (passes.recompute_attention: the scores GEMM before softmax); they are listed in
    the returned graph's `recomputed` and never copied as requested inplace writes."""
    chains = chains or {}
    chain_copies: list[Node] = []
    shared: dict[Value, Node] = {}   # a value copied once serves every chain that needs it
    before: dict[int, list[Node]] = {}
    for n in chosen:
        before.setdefault(f.late_readers(n.out)[0], []).append(n)
    next_id = graph._next_id
    vmap: dict[Value, Value] = {v: v for v in graph.inputs}
    late_map: dict[Value, Value] = {}   # a chosen value or a view of it -> its copy
    copies: dict[Node, Node] = {}
    chosen_ids = {id(n.out) for n in chosen}
    nmap: dict[int, Node] = {}
    nodes: list[Node] = []

    def late_value(v: Value) -> Value:
        """The copy standing in for `v` in the backward pass (views copied on demand)."""
        nonlocal next_id
        if v in late_map:
            return late_map[v]
        p = v.producer
        if id(v) in chosen_ids:
            raise AssertionError("a chosen value is copied before its first backward reader")
        # a view of a chosen value: copy the view over the copy
        src = late_value(p.inputs[0])
        new = clone_node(p, [src] + [vmap[x] for x in p.inputs[1:]], next_id)
        next_id += 1
        nodes.append(new)
        late_map[v] = new.out
        return new.out

    chosen_roots = {id(n.out) for n in chosen}
    for i, node in enumerate(graph.nodes):
        for n in before.get(i, ()):
            local: dict[Value, Value] = {}
            for c in chains.get(id(n), ()):
                if c.out in shared:
                    local[c.out] = shared[c.out].out
                    continue
                new = clone_node(c, [local[x] if x in local else vmap[x] for x in c.inputs],
                                 next_id)
                # a copy writes only over its own chain's values: reinplace decides that
                new.phase, new.inplace_of = node.phase, None
                next_id += 1
                nodes.append(new)
                local[c.out], shared[c.out] = new.out, new
                chain_copies.append(new)
            if n.out in shared:   # copied already, as a step of another chain
                new = shared[n.out]
                chain_copies.remove(new)
                late_map[n.out], copies[n] = new.out, new
                continue
            new = clone_node(n, [local[x] if x in local else vmap[x] for x in n.inputs],
                             next_id)
            new.phase = node.phase
            if chains.get(id(n)):
                new.inplace_of = None
                shared[n.out] = new
            next_id += 1
            nodes.append(new)
            late_map[n.out] = new.out
            copies[n] = new
        if node.phase in LATE and REGISTRY[node.op].kind != VIEW:
            inputs = [late_value(x) if id(f.root[x]) in chosen_roots else vmap[x]
                      for x in node.inputs]
        else:
            inputs = [vmap[x] for x in node.inputs]
        new = clone_node(node, inputs)
        vmap[node.out], nmap[id(node)] = new.out, new
        nodes.append(new)
    out = rebuilt(graph, nodes, {id(k): v for k, v in vmap.items()}, nmap, next_id)
    out.recomputed = chain_copies   # rewrite() adds the graph's own and the chosen copies
    # the forward views the backward readers used to read through are dead now
    return dce(out), copies


def _estimate(graph: Graph, scheduled: bool) -> tuple[int, set[int]]:
    """The byte model's peak of `graph` in the order the scheduler picks (or as written), and
    the ids of the values alive there."""
    g = schedule(graph)[0] if scheduled else graph
    model = _Model(g)
    peak, keys = model.estimate(list(range(model.n)), at_peak=True)
    ids = {id(n.out): n.out.id for n in g.nodes}
    return peak, {ids[k] for k in keys if k in ids}


def not_alive_at_the_peak(node: Node, f: _Facts, alive: set[int]) -> str | None:
    """A copy can lower the peak only where the value is alive at the peak, and not when the
    operands it reads die in the forward pass and are as big as it: the copy would keep them
    alive instead (a quick test before the estimate)."""
    if node.out.id not in alive:
        return "it is not alive at the estimated peak"
    roots = {id(f.root[v]): f.root[v] for v in node.inputs}.values()
    extra = sum(r.nbytes for r in roots if r.producer is not None and r.id not in alive
                and not f.late_readers(r))
    if node.out.nbytes - extra < MIN_BYTES:
        return (f"its operands die in the forward pass: the copy would keep {extra} B of them "
                "alive instead")
    return None


def recompute(graph: Graph, mode: str = "auto", scheduled: bool = True
              ) -> tuple[Graph, list[RecomputeDecision]]:
    """Recompute what lowers the peak (module docstring). `scheduled`: estimate peaks in the
    order the scheduler would pick (else in the written order). Returns the new graph (the
    input graph itself when nothing is recomputed) and one decision per candidate."""
    if mode == "off":
        return graph, []
    f = _Facts(graph)  # Step 1
    decisions: list[RecomputeDecision] = []
    candidates = []
    for node in graph.nodes:  # Step 2
        if not_cheap(node) is not None or not_read_late(node, f) is not None:
            continue  # not worth a line in the report: most nodes are not candidates
        if too_small(node) is not None:
            continue  # nor are small values: scalars and row statistics
        d = RecomputeDecision(node, node.out.ref(), node.op, str(node.loc), node.out.nbytes,
                              False, "")
        reason = returned(node, f) or operand_overwritten(node, f)
        decisions.append(d)
        if reason is not None:
            d.reason = reason
            continue
        candidates.append(d)
    if not candidates:
        return graph, decisions
    candidates.sort(key=lambda d: -d.nbytes)
    tries = min(MAX_TRIES, max(1, TRY_NODE_BUDGET // max(len(graph.nodes), 1)))
    best, alive = _estimate(graph, scheduled)
    chosen: list[Node] = []
    refused = 0
    for k, d in enumerate(candidates):  # Step 3
        if k >= tries or refused >= GIVE_UP_AFTER:
            d.reason = (f"not tried: past the pass's {tries} tries for a graph of this size"
                        if k >= tries else f"not tried: the {GIVE_UP_AFTER} bigger candidates "
                        "before it were all refused")
            continue
        reader = graph.nodes[f.late_readers(d.node.out)[0]]
        d.before = describe_reader(reader)
        quick = not_alive_at_the_peak(d.node, f, alive)
        if quick is not None:
            d.reason = quick
            continue
        trial, copies = _rewrite(graph, chosen + [d.node], f)
        trial.recomputed = graph.recomputed + list(copies.values())
        peak, trial_alive = _estimate(trial, scheduled)
        d.estimated_peak = peak
        if peak <= best - MIN_BYTES:  # worth a pass over the operands
            d.recomputed, refused = True, 0
            best, alive = peak, trial_alive
            chosen.append(d.node)
        else:
            refused += 1
            d.reason = (f"recomputing it would not lower the estimated peak by {MIN_BYTES} B "
                        f"or more ({peak} B with it, {best} B without)")
    # Step 4: each kept recomputation's share, given the others (a later one can make an
    # earlier one unnecessary: then it goes)
    for d in [d for d in candidates if d.recomputed]:
        others = [n for n in chosen if n is not d.node]
        trial, copies = _rewrite(graph, others, f)
        trial.recomputed = graph.recomputed + list(copies.values())
        without = _estimate(trial if others else graph, scheduled)[0]
        if without < best + MIN_BYTES:
            d.recomputed = False
            d.reason = (f"not needed once the others are recomputed (estimated peak {without} B "
                        f"without it, {best} B with it)")
            chosen = others
        else:
            d.reason = (f"the estimated peak is {best} B with it, {without} B without it (the "
                        "scheduler's byte model, arena bytes)")
    if not chosen:
        return graph, decisions
    out, copies = _rewrite(graph, chosen, f)  # Step 5
    for d in decisions:
        d.copy = copies.get(d.node)
    out.recomputed = graph.recomputed + list(copies.values())
    return out, decisions


# -- masks kept as bits -------------------------------------------------------------------------
# relu's backward reads only `out > 0`: the scheduler already keeps that bool mask (1 byte per
# element) in place of the float value. Thirty-two elements per int32 word make it 8x smaller
# again: one fused forward loop over 32 strided views of the value packs the mask's bits (the
# last one as the word's sign: -2**31, so no sum overflows), placed right after the value is
# made, and each backward `where(mask, g, z)` unpacks them in its own fused loop. Written
# with existing ops only (slice, cast, multiply, add, floor_divide, remainder, where) on int32,
# so every backend runs it; exact (a select of the same operands), so values are bit for bit the
# byte mask's. The pipeline keeps it only where the planned peak falls: unfused (the numpy
# backend) the unpacking materialises wide temporaries and it is refused.
MASK_MIN_BYTES = MIN_BYTES
WORD = 32          # mask elements per int32 word


@dataclass
class MaskDecision:
    """One bool mask the backward pass reads: kept as bits, or as bytes and why."""

    node: Node = field(repr=False)
    value: str
    op: str
    loc: str
    nbytes: int
    packed: bool = False
    reason: str = ""

    @property
    def text(self) -> str:
        head = f"{self.value} = {self.op} ({self.loc}, {self.nbytes} B)"
        if self.packed:
            return f"{head}: kept as {self.nbytes // 8} B of bits (32 per int32): {self.reason}"
        return f"{head}: kept as bytes: {self.reason}"

    def to_dict(self) -> dict:
        return {"value": self.value, "op": self.op, "loc": self.loc, "nbytes": self.nbytes,
                "packed": self.packed, "reason": self.reason}


def _computed(v: Value) -> bool:
    """Is `v` a value the program computes into a buffer of its own (C-contiguous), so that
    a reshape of it is a view? Not an argument, a view, or an inplace write into one (those
    may be strided)."""
    while v.producer is not None and v.producer.inplace_of is not None:
        v = v.producer.inputs[v.producer.inplace_of]
    return v.producer is not None and REGISTRY[v.producer.op].kind != VIEW


def mask_candidates(graph: Graph) -> list[tuple[Node, list[Node]]]:
    """(mask node, its `where` readers) per bool value that can be kept as bits: made by an
    elementwise op from one computed value (`_computed`) of its shape (other operands scalar
    arguments or constants), at least MASK_MIN_BYTES, a size divisible by WORD, not returned,
    and read only by backward `where(mask, g, z)` nodes whose `g` is a computed value of its
    shape (relu's `out > 0`, leaky_relu's, ...)."""
    users = graph.users()
    final = {id(v) for v in graph.live_outputs()}
    # a recomputed copy (a dropout mask regenerated by passes.regenerate) is made right before
    # its backward reader already: packing it would make it in the forward pass again
    copies = {id(n) for n in graph.recomputed}
    out = []
    for node in graph.nodes:
        v = node.out
        if v.dtype != bool or v.nbytes < MASK_MIN_BYTES or v.size % WORD or id(v) in final \
                or REGISTRY[node.op].kind != ELEMENTWISE or REGISTRY[node.op].random \
                or id(node) in copies:
            continue
        big = [x for x in node.inputs if x.size > 1]
        if len(big) != 1 or not _computed(big[0]) or big[0].shape != v.shape or any(
                x.shape != () or x.producer is not None and x.producer.op != "full"
                for x in node.inputs if x is not big[0]):
            continue  # scalar operands: arguments or constants, so the pack can run early
        readers = users.get(v, [])
        if readers and all(r.op == "where" and r.inputs[0] is v and r.inputs[1] is not v
                           and r.inputs[1].shape == v.shape and _computed(r.inputs[1])
                           and r.inputs[2].shape == ()
                           and r.out.shape == v.shape and r.phase in LATE
                           and r.inplace_of is None for r in readers):
            out.append((node, readers))
    return out


def pack_masks(graph: Graph, chosen: list[tuple[Node, list[Node]]]) -> Graph:
    """`graph` with each chosen mask kept as bits (int32 words of WORD elements, element k
    of a word in bit k) and each of its `where` readers unpacking them."""
    if not chosen:
        return graph
    packs = {id(m): readers for m, readers in chosen}
    wheres = {id(r): m for m, readers in chosen for r in readers}
    next_id = graph._next_id
    vmap: dict[int, Value] = {id(v): v for v in graph.inputs}
    nmap: dict[int, Node] = {}
    nodes: list[Node] = []
    bits_of: dict[int, Value] = {}

    def add(op, inputs, phase, loc, **attrs) -> Value:
        nonlocal next_id
        shape, dtype = REGISTRY[op].infer([(v.shape, v.dtype) for v in inputs], **attrs)
        n = Node(op, list(inputs), attrs, None, loc, phase)
        n.out = Value(next_id, shape, dtype, n)
        next_id += 1
        nodes.append(n)
        return n.out

    def const(value, dtype, phase, loc) -> Value:
        return add("full", [], phase, loc, shape=[], value=value, dtype=np.dtype(dtype))

    def scalar(v):
        # the mask's scalar operand where x is made: an argument, or its constant made again
        if v.producer is None:
            return v
        p = v.producer
        return add("full", [], "forward", p.loc, **p.attrs)

    def pack(node):
        # word[i] = sum_k cmp(x[WORD*i + k]) * 2**k (bit 31: -2**31), a forward value placed
        # right after x is made (x lives on for its other readers, so fusing the 32 reads is
        # free; not a compact stand-in, which fusion leaves alone)
        ph, loc = "forward", node.loc
        x = next(v for v in node.inputs if v.size > 1)
        rows = x.size // WORD
        xv = add("reshape", [vmap[id(x)]], ph, loc, shape=[rows, WORD])
        acc = None
        for k in range(WORD):
            xk = add("slice", [xv], ph, loc, index=(("s", 0, rows, 1), ("i", k)))
            ck = add(node.op, [xk if v is x else scalar(v) for v in node.inputs], ph, loc,
                     **node.attrs)
            bk = add("cast", [ck], ph, loc, dtype=np.dtype(np.int32))
            if k:
                weight = -(1 << k) if k == WORD - 1 else 1 << k
                bk = add("multiply", [bk, const(weight, np.int32, ph, loc)], ph, loc)
            acc = bk if acc is None else add("add", [acc, bk], ph, loc)
        bits_of[id(node)] = acc

    made = {}    # id(x) -> the masks to pack once x is made (their other operands exist)
    for m, _ in chosen:
        x = next(v for v in m.inputs if v.size > 1)
        made.setdefault(id(x), []).append(m)
    for v in graph.inputs:
        for m in made.get(id(v), ()):
            pack(m)
    for node in graph.nodes:
        if id(node) in packs:
            continue
        if id(node) in wheres:
            m = wheres[id(node)]
            ph, loc = node.phase, node.loc
            bits = bits_of[id(m)]
            rows = bits.size
            # bit k of word w: (w // 2**k) % 2; the sign bit (k = 31): (w // 2**30) % 4 >= 2
            # (floor division: w // 2**30 is -2 or -1 exactly when w < 0)
            w = add("reshape", [bits], ph, loc, shape=[rows, 1])
            div, mod, low = (add("constant", [], ph, loc, value=np.array(c, np.int32)) for c in (
                [1 << min(k, WORD - 2) for k in range(WORD)],
                [2] * (WORD - 1) + [4], [1] * (WORD - 1) + [2]))
            c = add("greater_equal", [add("remainder", [add("floor_divide", [w, div], ph, loc),
                                                        mod], ph, loc), low], ph, loc)
            g = add("reshape", [vmap[id(node.inputs[1])]], ph, loc, shape=[rows, WORD])
            y = add("where", [c, g, vmap[id(node.inputs[2])]], ph, loc)
            new = Node("reshape", [y], {"shape": list(node.out.shape)}, None, loc, ph,
                       None, node.grad_of)
            stand_in(node, new)
        else:
            new = clone_node(node, [vmap[id(v)] for v in node.inputs])
        vmap[id(node.out)], nmap[id(node)] = new.out, new
        nodes.append(new)
        for m in made.get(id(node.out), ()):
            pack(m)
    return rebuilt(graph, nodes, vmap, nmap, next_id)
