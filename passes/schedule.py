"""Scheduling: reorder the nodes to lower the peak of live bytes, within every dependency.

Guarantees: the returned graph holds the same nodes (shared, never mutated), values, outputs and
input mutations as the input graph, in an order that
  1. is topological over data edges: every operand is computed before the node reading it;
  2. keeps every write after the reads it overwrites: a node that writes over an input's
     buffer by request (`Node.inplace_of`: the user's `_` forms, `+=`, an update of a caller's
     array) and every scatter (which writes into its base) stay after every node that reads
     the overwritten buffer, through any view (passes.alias), before it in the written order;
     mutations of one caller array form a chain of such writes, so they keep their order.
The IR is pure SSA, so any order that satisfies 1 computes the same values (the reinplace
pass decides buffers on the order it is given); 2 keeps every inplace write that the written
order allowed possible in the new one (an update is never moved before a read of the old
weight, e.g. `dh = dlogits @ w2.T` stays before the update of `w2`), so the schedule never turns
a user's inplace request into a copy and `inplace="strict"` never refuses more.

Algorithm (greedy list scheduling by freed-minus-allocated bytes, near-linear):
  1. Buffer roots (passes.alias) and, per root, its size, how many non-view nodes read it and
     whether it must outlive the program (a caller's array, a returned value, a final value
     of a mutated argument): those are never freed.
  2. Dependencies: data edges, plus an edge from each earlier reader of an overwritten buffer
     to its writer (guarantee 2). Earlier readers only, so the graph stays acyclic.
  3. Each node's score is the bytes its running frees (roots whose last reader it is) minus
     the bytes it allocates (nothing for views and for writes into a caller's array). When a
     root is down to its last unscheduled reader, that reader's score grows by the root's size
     (the reader is found in O(1) from a running sum of reader indices).
  4. Repeatedly run the ready node with the best key: several keys are tried (`KEYS`), each
     giving one order; each order's peak is estimated by the same byte model (elementwise ops
     whose same-shaped operand dies there count as in place); the lowest estimate wins, the
     written order included, so the estimate never grows.
  5. Describe what moved: the nodes outside a longest increasing subsequence of written
     positions (the fewest nodes whose moving explains the new order), grouped by source line,
     each run after the nearest node before it that is worth a line (not a view, constant or
     scalar), nodes that read alike told apart by op and value.
  6. Communication (data-parallel training, compiler.ops.comm_ops): in the chosen order, each
     bucket's `bucket_pack` and `allreduce_start` move to right after the last of its
     gradients; the nodes that depend on no averaged gradient keep their order and run
     first, then those that do (the updates), each `allreduce_wait` right before the first
     node that reads its bucket: the reductions overlap the rest of backward, as in PyTorch's
     DDP. Guarantee 2 holds: starts and waits write only over their bucket, which nothing
     else reads, and a node that reads what an update wrote depends on that update.
The pipeline then plans both orders and keeps the written one when its real peak is lower
(`compiler.pass_pipeline`), so scheduling never costs memory.
"""
from __future__ import annotations

import copy
import heapq
from bisect import bisect_left
from dataclasses import dataclass, field

from compiler.ir import Graph, Node, Value
from compiler.ops import CREATION, ELEMENTWISE, REGISTRY, SCATTER, VIEW

from .alias import alias_analysis
from .reinplace import describe_reader, mutation_writers


@dataclass
class Move:
    """Nodes of one source line that the schedule moved together, and where they went."""

    nodes: list[Node]
    # the nearest node before them now that is not a view, constant or scalar (None: only such
    # nodes, or none, come before them)
    after: Node | None
    written_point: int        # the first one's point in the written order
    point: int                # ... and in the schedule
    text: str

    def to_dict(self) -> dict:
        return {"text": self.text, "written_point": self.written_point, "point": self.point,
                "values": [n.out.ref() for n in self.nodes]}


@dataclass
class Schedule:
    """What the scheduling pass did: the key that won, the estimated peaks (the pass's byte
    model, arena bytes only) of the written and the chosen order, and what moved."""

    key: str                        # "written" when no key beat the written order
    estimated_written_peak: int
    estimated_peak: int
    moves: list[Move] = field(default_factory=list)
    written_nodes: list[Node] = field(default_factory=list, repr=False)
    # Set when the planned peak of the new order was not below the written order's, so the
    # written order was kept (compiler.pass_pipeline): that peak, for the report.
    rejected_peak: int | None = None

    @property
    def changed(self) -> bool:
        return self.key != "written" and self.rejected_peak is None

    def kept_written(self, scheduled_peak: int):
        self.rejected_peak = scheduled_peak

    def summary(self, peak: int, written_peak: int | None) -> str:
        """The report's line: which order runs, and both peaks."""
        if self.rejected_peak is not None:
            return (f"schedule: the written order is kept: its plan peaks at {peak} B, the "
                    f"scheduled order's ({self.key}) at {self.rejected_peak} B")
        if not self.changed:
            return "schedule: the written order is kept: no order the scheduler tried is lower"
        return (f"schedule: scheduled order ({self.key}, {len(self.moves)} moves) peaks at "
                f"{peak} B; the written order at {written_peak} B")

    def to_dict(self) -> dict:
        return {"key": self.key, "changed": self.changed, "rejected_peak": self.rejected_peak,
                "estimated_written_peak": self.estimated_written_peak,
                "estimated_peak": self.estimated_peak,
                "moves": [m.to_dict() for m in self.moves]}


# Keys of the ready queue (smaller runs first), each mapping (score, written index) to a
# tuple. "freed": the most bytes freed net first, the written order breaking ties.
# "tiered": a node that frees at least what it allocates first (best first), otherwise the
# written order: keeps the user's forward order while still running updates and gradient
# consumers as early as they are ready.
KEYS = {
    "freed": lambda score, i: (-score, i),
    "tiered": lambda score, i: (0, -score, i) if score >= 0 else (1, i, 0),
}


def compact_derivation(node: Node, root_of) -> Value | None:
    """The buffer root `node` is a compact stand-in for, or None: a backward elementwise node
    that reads one buffer (besides scalars) and makes a value smaller than it, like relu's
    mask `out > 0` (1 byte per 4-byte element). Run as soon as it can, it lets that buffer die
    at its other readers (ARCHITECTURE.md §4, compact saved values)."""
    if node.phase != "backward" or REGISTRY[node.op].kind != ELEMENTWISE:
        return None
    big = [root_of[v] for v in node.inputs if v.size > 1]
    if len(big) != 1 or big[0].producer is None or node.out.nbytes >= big[0].nbytes:
        return None
    if REGISTRY[big[0].producer.op].random:
        return None  # a draw needs no stand-in: a regenerated dropout mask fuses into its reader
    return big[0]


LAZY_CHAIN = 32  # longer chains of views run as ordinary nodes (keeps the pass linear)


class _Model:
    """Steps 1-3: roots, sizes, readers, dependencies and allocations of one graph."""

    def __init__(self, graph: Graph):
        nodes = graph.nodes
        self.n = n = len(nodes)
        aliases = alias_analysis(graph)
        index = {id(node): i for i, node in enumerate(nodes)}
        pinned = {id(v) for v in graph.inputs}
        pinned |= {id(aliases.root[v]) for v in graph.live_outputs()}
        writers = mutation_writers(graph)
        # Per node: the roots it reads (non-view nodes only), its allocation.
        self.reads: list[tuple] = [()] * n
        self.alloc = [0] * n
        self.out_key = [id(node.out) for node in nodes]
        self.inplace_input = [()] * n   # same-shaped elementwise operands' roots
        self.compact = [compact_derivation(node, aliases.root) is not None for node in nodes]
        self.size: dict[int, int] = {}
        self.count: dict[int, int] = {}    # unscheduled readers per root
        self.rsum: dict[int, int] = {}     # sum of their indices
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.indeg = [0] * n
        readers_so_far: dict[int, list[int]] = {}
        # Constants and views ("lazy" nodes) run right before their first reader: they cost
        # nothing to wait, and the queue would otherwise run them first (a constant then
        # lives from the program's start). A reader depends on a lazy node's own dependencies
        # instead, and `chain[i]` lists the lazy nodes to run right before node i.
        read = {id(v) for node in nodes for v in node.inputs}
        # ... and so do the recompute pass's copies: a recomputed value is made right before
        # the backward node that reads it (so its operands' other readers can't split them)
        recomputed = {id(node) for node in graph.recomputed}
        self.lazy = [False] * n
        self.chain: list[list[int]] = [[] for _ in range(n)]
        lazy_preds: dict[int, set] = {}
        for i, node in enumerate(nodes):
            kind = REGISTRY[node.op].kind
            preds, chain = set(), []
            for v in node.inputs:
                if v.producer is not None:
                    p = index[id(v.producer)]
                    if self.lazy[p]:
                        preds |= lazy_preds[p]
                        chain += [c for c in self.chain[p] if c not in chain]
                    else:
                        preds.add(p)
            target = node.inplace_of if node.inplace_of is not None else (
                0 if kind == SCATTER else None)
            if kind != VIEW:
                roots = {}
                for v in node.inputs:
                    r = aliases.root[v]
                    roots[id(r)] = r
                self.reads[i] = tuple(k for k in roots if k not in pinned)
                for k, r in roots.items():
                    if k not in pinned:
                        self.size[k] = r.nbytes
                        self.count[k] = self.count.get(k, 0) + 1
                        self.rsum[k] = self.rsum.get(k, 0) + i
                if target is not None:  # Step 2: earlier readers of what it overwrites
                    preds.update(readers_so_far.get(id(aliases.root[node.inputs[target]]),
                                                    ()))
                for k in roots:
                    readers_so_far.setdefault(k, []).append(i)
                writes_caller = node in writers and target is not None and \
                    aliases.root[node.inputs[target]].producer is None
                self.alloc[i] = 0 if writes_caller else node.out.nbytes
                if kind in (ELEMENTWISE, SCATTER):
                    # (an elementwise node writes over a view of the whole buffer too, as the
                    # reinplace pass lets it: the mask unpacking's reshape of the gradient)
                    self.inplace_input[i] = tuple(
                        id(aliases.root[v])
                        for v in (node.inputs[:1] if kind == SCATTER else node.inputs)
                        if (aliases.root[v] is v or kind == ELEMENTWISE
                            and aliases.root[v].nbytes == v.nbytes)
                        and v.shape == node.out.shape and v.dtype == node.out.dtype
                        and id(aliases.root[v]) not in pinned)
            preds.discard(i)
            if (kind == VIEW or not node.inputs or id(node) in recomputed) and target is None \
                    and id(node.out) in read and len(chain) < LAZY_CHAIN:
                self.lazy[i], lazy_preds[i], self.chain[i] = True, preds, chain + [i]
                continue
            self.chain[i] = chain
            for p in preds:
                self.succ[p].append(i)
            self.indeg[i] = len(preds)

    def run(self, key) -> list[int]:
        """Step 4 for one key: the order of node indices."""
        count, rsum, size = dict(self.count), dict(self.rsum), self.size
        indeg = list(self.indeg)
        score = [-a for a in self.alloc]
        for i in range(self.n):
            for k in self.reads[i]:
                if count[k] == 1:
                    score[i] += size[k]
        compact = self.compact

        def key(s, i, order_key=key):
            # compact stand-ins run as soon as they are ready, before anything else
            return (0, i) if compact[i] else (1,) + order_key(s, i)

        heap = [(key(score[i], i), i, score[i]) for i in range(self.n)
                if indeg[i] == 0 and not self.lazy[i]]
        heapq.heapify(heap)
        done = [False] * self.n
        order = []
        lazy = self.lazy

        def finish(i):
            done[i] = True
            order.append(i)
            for k in self.reads[i]:
                count[k] -= 1
                rsum[k] -= i
                if count[k] == 1:  # Step 3: the last reader will free it
                    j = rsum[k]
                    score[j] += size[k]
                    if indeg[j] == 0 and not done[j] and not lazy[j]:
                        heapq.heappush(heap, (key(score[j], j), j, score[j]))
            for j in self.succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0 and not lazy[j]:
                    heapq.heappush(heap, (key(score[j], j), j, score[j]))

        while heap:
            _, i, s = heapq.heappop(heap)
            if done[i] or s != score[i]:
                continue  # a stale entry: the node ran, or its score grew since
            for c in self.chain[i]:
                if not done[c]:
                    finish(c)
            finish(i)
        assert len(order) == self.n, "dependency cycle in the schedule"
        return order

    def estimate(self, order, at_peak: bool = False):
        """Peak arena bytes of `order` in the pass's model: a root lives from its node to its
        last reader; an elementwise node whose same-shaped operand dies there writes over it.
        `at_peak=True`: (peak, the ids of the Values whose buffers are live at the peak)."""
        count = dict(self.count)
        live = peak = 0
        alive: set[int] = set()
        at = set()
        for i in order:
            dying = [k for k in self.reads[i] if count[k] == 1]
            over = next((k for k in self.inplace_input[i] if k in dying), None)
            if over is not None:
                dying.remove(over)   # its bytes pass to the output
                live -= self.size[over]
                alive.discard(over)
            live += self.alloc[i]
            if at_peak and self.alloc[i]:
                alive.add(self.out_key[i])
            if live > peak or (at_peak and not at):
                peak = live
                if at_peak:
                    at = set(alive)
            for k in self.reads[i]:
                count[k] -= 1
            live -= sum(self.size[k] for k in dying)
            if at_peak:
                alive.difference_update(dying)
        return (peak, at) if at_peak else peak


def schedule(graph: Graph) -> tuple[Graph, Schedule]:
    """Reorder `graph`'s nodes to lower its peak (see the module docstring). Returns the new
    graph (the input graph itself when the written order stays) and what was done."""
    model = _Model(graph)
    written = list(range(model.n))
    best_key, best_order, best_peak = "written", written, model.estimate(written)
    written_peak = best_peak
    for name, key in KEYS.items():
        order = model.run(key)
        peak = model.estimate(order)
        if peak < best_peak:
            best_key, best_order, best_peak = name, order, peak
    info = Schedule(best_key, written_peak, best_peak, written_nodes=list(graph.nodes))
    if best_order == written:
        info.key = "written"
        return graph, info
    out = copy.copy(graph)
    out.nodes = place_communication([graph.nodes[i] for i in best_order])
    written_index = {id(n): i for i, n in enumerate(graph.nodes)}
    info.moves = describe_moves(graph, [written_index[id(n)] for n in out.nodes])
    return out, info


def place_communication(nodes: list[Node]) -> list[Node]:
    """Step 6: starts (with their packs) as early as their gradients allow, waits as late as
    their readers allow. The order of everything else is kept."""
    starts = [n for n in nodes if n.op == "allreduce_start"
              and n.inputs[0].producer is not None and n.inputs[0].producer.op == "bucket_pack"]
    if not starts:
        return nodes
    order = list(nodes)
    for start in starts:
        pack = start.inputs[0].producer
        order = [n for n in order if n is not pack and n is not start]
        made = {id(n.out): i for i, n in enumerate(order)}
        after = max((made.get(id(v), -1) for v in pack.inputs), default=-1)
        order[after + 1:after + 1] = [pack, start]
    waits = [n for n in order if n.op == "allreduce_wait"]
    averaged = {id(w.out) for w in waits}
    later = []
    for n in order:
        if n.op != "allreduce_wait" and any(id(v) in averaged for v in n.inputs):
            averaged.add(id(n.out))
            later.append(n)
    moved = {id(n) for n in later}
    order = [n for n in order if id(n) not in moved] + later
    for wait in waits:
        order.remove(wait)
        first = next((i for i, n in enumerate(order) if any(v is wait.out for v in n.inputs)),
                     len(order))
        order.insert(first, wait)
    return order


def _kept(order: list[int]) -> set[int]:
    """Step 5: a longest increasing subsequence of `order` (patience sorting, O(n log n))."""
    tails, tail_pos, prev = [], [], [None] * len(order)
    for p, w in enumerate(order):
        j = bisect_left(tails, w)
        if j == len(tails):
            tails.append(w)
            tail_pos.append(p)
        else:
            tails[j], tail_pos[j] = w, p
        prev[p] = tail_pos[j - 1] if j else None
    kept, p = set(), tail_pos[-1] if tail_pos else None
    while p is not None:
        kept.add(order[p])
        p = prev[p]
    return kept


def describe_node(node: Node, writers: dict, graph: Graph) -> str:
    """`update of w1 (mlp.py:23)`, `the backward of relu_ at mlp.py:18`, `matmul at ...`."""
    if node in writers:
        return f"update of {graph.inputs[writers[node]].name} ({node.loc})"
    return describe_reader(node)


def _moves_trivial(node: Node) -> bool:
    """Views, constants and scalars cost (next to) nothing: no line of their own, and no
    anchor of another's line."""
    return REGISTRY[node.op].kind in (VIEW, CREATION) or node.out.size <= 1


def _count_trivial(nodes: list[Node]) -> str:
    """`2 constants and 1 view`: the nodes a line skips between its anchor and the move."""
    counts: dict[str, int] = {}
    for n in nodes:
        kind = REGISTRY[n.op].kind
        what = "view" if kind == VIEW else "constant" if kind == CREATION else "scalar"
        counts[what] = counts.get(what, 0) + 1
    parts = [f"{k} {what}{'s' if k > 1 else ''}" for what, k in counts.items()]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


class _Names:
    """Each node as `describe_node` says it, plus the node itself (op and value) when another
    node of the graph reads the same, so that two lines never name two nodes alike."""

    def __init__(self, graph: Graph, writers: dict):
        self.base = {id(n): describe_node(n, writers, graph) for n in graph.nodes}
        self.count: dict[str, int] = {}
        for text in self.base.values():
            self.count[text] = self.count.get(text, 0) + 1

    @staticmethod
    def which(node: Node) -> str:
        return f"{node.op} {node.out.ref()}"

    def __call__(self, node: Node) -> str:
        text = self.base[id(node)]
        return text if self.count[text] == 1 else f"{text} ({self.which(node)})"

    def run(self, nodes: list[Node]) -> str:
        """Several nodes of one line moved together: one name, and each of them."""
        texts = {self.base[id(n)] for n in nodes}
        if len(nodes) == 1 or len(texts) > 1:
            return ", ".join(self(n) for n in nodes)
        return f"{self.base[id(nodes[0])]} ({', '.join(self.which(n) for n in nodes)})"


def describe_moves(graph: Graph, order: list[int]) -> list[Move]:
    """Step 5: one `Move` per run of moved nodes of one source line (`order`: the written
    index of each node of the new order)."""
    kept = _kept(order)
    writers = mutation_writers(graph)
    root = alias_analysis(graph).root
    nodes = graph.nodes
    names = _Names(graph, writers)
    kept_before_written, n = [], 0
    for w in range(len(nodes)):  # kept nodes written before node w
        kept_before_written.append(n)
        n += w in kept
    runs: list[tuple[int, list[int]]] = []  # (kept nodes before it now, new positions)
    kept_before = 0
    for p, w in enumerate(order):
        if w in kept:
            kept_before += 1
            continue
        if _moves_trivial(nodes[w]):
            continue
        last = runs[-1][1] if runs else None
        if last is not None and last[-1] == p - 1 and nodes[order[last[0]]].loc == nodes[w].loc:
            last.append(p)
        else:
            runs.append((kept_before, [p]))
    moves: list[Move] = []
    for kept_now, run in runs:
        p, w = run[0], order[run[0]]
        node, moved = nodes[w], [nodes[order[q]] for q in run]
        q = p - 1
        while q >= 0 and _moves_trivial(nodes[order[q]]):
            q -= 1
        after = nodes[order[q]] if q >= 0 else None
        between = _count_trivial([nodes[order[i]] for i in range(q + 1, p)])
        if after is None:
            where = "to the start of the program" + (f" (after {between} only)" if between else "")
        else:
            where = f"to right after {names(after)}" + (f" and {between}" if between else "")
        if w != p:
            at = f"point {w} -> {p}"
            direction = "earlier" if p < w else "later"
        else:
            at = f"point {p} in both orders: as many nodes moved from before it to after it " \
                 "as the other way"
            # Relative to the nodes that kept their order; never equal, or the node would
            # extend their longest increasing subsequence.
            direction = "earlier" if kept_now < kept_before_written[w] else "later"
        text = f"{names.run(moved)} moved {direction} {where} ({at})"
        big = compact_derivation(node, root)
        if big is not None:
            text += (f": a compact saved value ({node.out.type}, {node.out.nbytes} B) in place "
                     f"of {big.ref()} ({big.nbytes} B), which need not outlive its other readers")
        moves.append(Move(moved, after, w, p, text))
    return moves
