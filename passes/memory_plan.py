"""Memory planning: every buffer gets a live interval and, for intermediates, an arena offset.

Guarantees: two arena buffers that are live at the same program point never overlap (the
independent check is `passes.verify.verify_plan`); offsets are multiples of `alignment`
(64 bytes on CPU, 256 on GPU); the accounting follows ARCHITECTURE.md §6.

Algorithm (lifetimes -> buffers -> allocator -> numbers):
  1. Decide inplace (passes.reinplace) unless decisions are given.
  2. Group values into buffers: a view lives in its input's buffer; an output that a decision
     lets take an input's buffer lives there; every other value opens a buffer. A buffer holding
     a graph input is the caller's ("input"); one holding a returned value is allocated per call
     ("output"); the rest live in the arena. A gradient that only its `bucket_pack` reads
     (data-parallel training, compiler.ops.comm_ops) lives in its slot of the bucket's buffer
     (`packed`: its byte offset there), so the bucket is reduced where the gradients were
     computed. A node whose implementation needs scratch
     memory (its registry entry's `scratch`) gets a workspace buffer in the arena, live only
     at its own program point.
  3. Live interval of a buffer: from the first definition of any value in it to the last read of
     any of them or of their views (program end for returned values and input mutations).
  4. Place arena buffers (touching intervals conflict: a copy never shares with its source):
     once in program order by a linear-time best-fit allocator, and, unless the graph has
     more than CONFLICT_PAIR_BUDGET pairs of buffers live together (or more than
     BEST_FIT_MAX_BUFFERS buffers), one by one in a few orders
     (largest first, earliest first, longest-lived first, ...), each at the best-fitting gap
     among the already placed buffers whose intervals intersect its own; keep the smallest
     arena.
  5. Account (MemoryPlan.LEGEND states the rule): peak (inputs + arena counted whole +
     returned buffers), the lower bound (live bytes with perfect packing at the worst point),
     naive (no reuse at all) and, by replanning with inplace="off", the no-inplace peak; arena
     buffers count at their aligned size in all four.
  6. In "auto", if that plan without reuse has the lower peak, the plan with only the user's
     own inplace ops replaces it when no bigger, else the plan without reuse does (its
     decisions say why): inplace="auto" never costs memory.

This module is the pass and the placement; the records it builds are in passes.plan_model, their
text and JSON in passes.plan_report, the data-parallel buckets' part in passes.plan_buckets.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

from compiler.ir import Graph, Node, Value
from compiler.ops import REGISTRY, VIEW, workspace_bytes

from .alias import alias_analysis
from .liveness import liveness
from .plan_buckets import Bucket, communication_buckets, packable_gradients  # noqa: F401
# The records live in passes.plan_model; importers name them here too.
from .plan_model import CPU_ALIGNMENT, GPU_ALIGNMENT, Buffer, MemoryPlan, align  # noqa: F401
from .reinplace import Decision, reinplace


# -- planning --------------------------------------------------------------------------------
def _build_buffers(graph: Graph, reuse: dict[Node, int]):
    """Step 2 and 3."""
    aliases = alias_analysis(graph)
    live = liveness(graph, aliases)
    buffer_of: dict[Value, Buffer] = {}
    buffers: list[Buffer] = []
    packed = packable_gradients(graph, reuse)
    bucket_of: dict[Node, Buffer] = {}  # bucket_pack -> the buffer its gradients open

    def open_buffer(v: Value, kind: str, name="") -> Buffer:
        b = Buffer(len(buffers), kind, 0, live.defined[v], live.defined[v], [], name=name)
        buffers.append(b)
        return b

    def join(v: Value, b: Buffer):
        buffer_of[v] = b
        b.values.append(v)
        is_view = v.producer is not None and REGISTRY[v.producer.op].kind == VIEW
        if not is_view:
            b.size = max(b.size, v.nbytes)
            b.start = min(b.start, live.defined[v])
            b.end = max(b.end, live.last_use[v])

    for v in graph.inputs:
        join(v, open_buffer(v, "input", v.name))
    for node in graph.nodes:
        if REGISTRY[node.op].kind == VIEW:
            join(node.out, buffer_of[node.inputs[0]])
        elif node in reuse:
            join(node.out, buffer_of[node.inputs[reuse[node]]])
        elif node.out in packed:
            pack = packed[node.out][0]
            if pack not in bucket_of:
                bucket_of[pack] = open_buffer(node.out, "arena")
            join(node.out, bucket_of[pack])
        elif node in bucket_of:
            join(node.out, bucket_of[node])
        else:
            join(node.out, open_buffer(node.out, "arena"))
    returned = {id(v) for v in graph.outputs}
    for b in buffers:
        if b.kind == "arena" and any(id(v) in returned for v in b.values):
            b.kind = "output"
    workspace = {}
    for t, node in enumerate(graph.nodes):
        size = workspace_bytes(node)
        if size:
            workspace[node] = Buffer(len(buffers), "arena", size, t, t, [], workspace_of=node)
            buffers.append(workspace[node])
    return buffers, buffer_of, live, workspace, {v: off for v, (_, off) in packed.items()}


# Orders in which buffers are offered to the best-fit allocator; the smallest arena wins.
# Largest-first is TFLite's "greedy by size"; the others break its ties in favour of long or
# early lifetimes, which packs better when many buffers have similar sizes.
PLACEMENT_ORDERS = {
    "size": lambda b: (-b.size, b.start, b.id),
    "start": lambda b: (b.start, -b.size, b.id),
    "lifetime": lambda b: (-(b.end - b.start), -b.size, b.id),
    "area": lambda b: (-b.size * (b.end - b.start + 1), b.id),
}
# The best-fit orders look at every pair of buffers whose lifetimes intersect. Past this many
# pairs (graphs with tens of thousands of long-lived values) only the linear-time allocator runs.
CONFLICT_PAIR_BUDGET = 300_000
# ...and past this many arena buffers (each order costs ~10 us a buffer in Python: 100k buffers,
# four orders, two plans took 17 s), where the program-order allocator is within a few percent.
BEST_FIT_MAX_BUFFERS = 20_000


def _conflicts(arena_buffers: list[Buffer]) -> dict[int, list[int]] | None:
    """Buffer id -> the ids of the buffers whose live intervals intersect its own (touching
    counts), or None when there are more than CONFLICT_PAIR_BUDGET such pairs.
    O(n log n + pairs)."""
    starts = sorted(b.start for b in arena_buffers)
    ends = sorted(b.end for b in arena_buffers)
    if len(arena_buffers) > BEST_FIT_MAX_BUFFERS:
        return None
    pairs = sum(bisect_right(starts, b.end) - bisect_left(ends, b.start) - 1
                for b in arena_buffers) // 2
    if pairs > CONFLICT_PAIR_BUDGET:
        return None
    by_start = sorted(arena_buffers, key=lambda b: (b.start, b.id))
    out: dict[int, list[int]] = {b.id: [] for b in arena_buffers}
    for i, b in enumerate(by_start):
        j = i + 1
        while j < len(by_start) and by_start[j].start <= b.end:
            out[b.id].append(by_start[j].id)
            out[by_start[j].id].append(b.id)
            j += 1
    return out


def _place_in_order(arena_buffers: list[Buffer], conflicts, alignment: int) -> tuple[int, dict]:
    """Best fit: each buffer goes into the smallest gap, among the buffers already placed
    whose intervals intersect its own, that holds it; else on top of them."""
    at, arena = {}, 0  # each placed buffer's (offset, aligned end)
    for b in arena_buffers:
        # (the placed conflicts, looked up in C: this loop is most of planning's time)
        placed = sorted(filter(None, map(at.get, conflicts[b.id])))
        best, best_gap, cursor, need = None, None, 0, b.size
        for off, end in placed:
            gap = off - cursor
            if gap >= need and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            if end > cursor:
                cursor = end
        o = cursor if best is None else best
        at[b.id] = (o, align(o + need, alignment))
        if at[b.id][1] > arena:
            arena = at[b.id][1]
    return arena, {k: o for k, (o, _) in at.items()}


class _FreeGaps:
    """The free gaps below an arena's top, indexed by offset (to merge neighbours) and by
    (size, offset) (best fit by bisection): O(log n) searches, list inserts in C."""

    def __init__(self):
        self.starts: list[int] = []             # sorted offsets
        self.size: dict[int, int] = {}
        self.by_size: list[tuple[int, int]] = []  # sorted (size, offset)

    def add(self, o: int, size: int):
        insort(self.starts, o)
        self.size[o] = size
        insort(self.by_size, (size, o))

    def remove(self, o: int) -> int:
        size = self.size.pop(o)
        del self.starts[bisect_left(self.starts, o)]
        del self.by_size[bisect_left(self.by_size, (size, o))]
        return size

    def best_fit(self, need: int) -> int | None:
        """The smallest gap that holds `need` bytes (the lowest such offset on ties)."""
        i = bisect_left(self.by_size, (need, -1))
        return self.by_size[i][1] if i < len(self.by_size) else None


def _place_by_events(arena_buffers: list[Buffer], alignment: int) -> tuple[int, dict]:
    """Allocation in program order, as a best-fit `malloc` would do it: at each point, the
    buffers born there take the smallest free gap that holds them (largest first), then the
    buffers that die there give their space back (after: touching lifetimes never share).
    Gaps merge with their neighbours. O(n log n) searches."""
    born: dict[int, list[Buffer]] = {}
    dies: dict[int, list[Buffer]] = {}
    for b in arena_buffers:
        born.setdefault(b.start, []).append(b)
        dies.setdefault(b.end, []).append(b)
    gaps = _FreeGaps()
    offsets, top = {}, 0
    for t in sorted(set(born) | set(dies)):
        for b in sorted(born.get(t, ()), key=lambda b: (-b.size, b.id)):
            need = align(b.size, alignment)
            if need == 0:  # a zero-size buffer holds no bytes: no gap to take or give back
                offsets[b.id] = 0
                continue
            o = gaps.best_fit(need)
            if o is not None:
                size = gaps.remove(o)
                if size > need:
                    gaps.add(o + need, size - need)
            elif gaps.starts and gaps.starts[-1] + gaps.size[gaps.starts[-1]] == top:
                o = gaps.starts[-1]  # the free space at the top grows to fit
                gaps.remove(o)
                top = o + need
            else:
                o, top = top, top + need
            offsets[b.id] = o
        for b in dies.get(t, ()):
            o, size = offsets[b.id], align(b.size, alignment)
            if size == 0:
                continue
            i = bisect_left(gaps.starts, o)
            if i < len(gaps.starts) and gaps.starts[i] == o + size:  # merge with the next gap
                size += gaps.remove(o + size)
            if i > 0 and gaps.starts[i - 1] + gaps.size[gaps.starts[i - 1]] == o:  # previous
                prev = gaps.starts[i - 1]
                gaps.add(prev, gaps.remove(prev) + size)
            else:
                gaps.add(o, size)
    return top, offsets


def _place(buffers: list[Buffer], alignment: int) -> int:
    """Step 4: place the arena buffers with the linear-time allocator and, when the graph is
    small enough, best fit in each order of PLACEMENT_ORDERS; keep the smallest arena."""
    arena_buffers = [b for b in buffers if b.kind == "arena"]
    best = _place_by_events(arena_buffers, alignment)
    conflicts = _conflicts(arena_buffers)
    for key in PLACEMENT_ORDERS.values() if conflicts is not None else ():
        arena, offsets = _place_in_order(sorted(arena_buffers, key=key), conflicts, alignment)
        if arena < best[0]:
            best = (arena, offsets)
    arena, offsets = best
    for b in arena_buffers:
        b.offset = offsets[b.id]
    return arena


def plan_memory(graph: Graph, inplace: str = "auto", donate=(), alignment: int = CPU_ALIGNMENT,
                decisions: list[Decision] | None = None, baseline: bool = True) -> MemoryPlan:
    """Plan `graph`'s memory. `baseline=False` skips the inplace="off" replan that fills
    `no_inplace_peak_bytes`."""
    if decisions is None:  # Step 1
        _, decisions = reinplace(graph, inplace, donate)
    nodes = set(graph.nodes)  # (not the requests inside fused nodes: their values have no buffer)
    reuse = {d.node: d.input_index for d in decisions if d.inplace and d.node in nodes}
    buffers, buffer_of, live, workspace, packed = _build_buffers(graph, reuse)
    arena = _place(buffers, alignment)
    plan = MemoryPlan(graph.name, alignment, inplace, live.end, buffers, decisions,
                      buffer_of=buffer_of, reuse=reuse, defined=live.defined, graph=graph,
                      workspace=workspace, packed=packed)
    plan.communication = communication_buckets(graph, buffer_of, reuse, packed)
    # Step 5
    plan.arena_bytes = arena
    plan.input_bytes = sum(b.size for b in buffers if b.kind == "input")
    plan.output_bytes = sum(b.size for b in buffers if b.kind == "output")
    # Returned buffers are allocated as the program reaches them and all survive the call:
    # the worst point is the end.
    plan.peak_bytes = plan.input_bytes + arena + plan.output_bytes
    plan.lower_bound_bytes = max(plan.live_curve())
    returned = {id(v) for v in graph.outputs}
    plan.naive_bytes = plan.input_bytes + sum(
        n.out.nbytes if id(n.out) in returned else align(n.out.nbytes, alignment)
        for n in graph.nodes if REGISTRY[n.op].kind != VIEW) + sum(
        align(b.size, alignment) for b in workspace.values())
    if inplace == "off" or not baseline:
        plan.no_inplace_peak_bytes = plan.peak_bytes if inplace == "off" else 0
        return plan
    off = plan_memory(graph, "off", donate, alignment, baseline=False)
    plan.no_inplace_peak_bytes = off.peak_bytes
    if inplace == "auto" and off.peak_bytes < plan.peak_bytes:
        # Step 6: placement is a heuristic, and reuse can pack worse. "auto" promises never to
        # cost memory: keep the user's own inplace ops (an optimizer's updates of caller
        # arrays) if that plan is no bigger than the one without reuse, else take that one.
        _, mine = reinplace(graph, "auto", donate, requested_only=True)
        if any(d.inplace for d in mine):
            ours = plan_memory(graph, "auto", donate, alignment, decisions=mine,
                               baseline=False)
            if ours.peak_bytes <= off.peak_bytes:
                ours.no_inplace_peak_bytes = off.peak_bytes
                return ours
        off.inplace, off.no_inplace_peak_bytes = "auto", off.peak_bytes
        off.decisions = [_without_reuse(d, plan.peak_bytes, off.peak_bytes)
                         for d in decisions]
        return off
    return plan


def _without_reuse(d: Decision, auto_peak: int, off_peak: int) -> Decision:
    if not d.inplace or d.reason.startswith("fused into"):  # (no buffer either way)
        return d
    return Decision(d.op, d.loc, d.requested, False,
                    f"reuse would pack worse: the plan without it peaks at {off_peak} B, with "
                    f"it at {auto_peak} B", d.input_index, d.node)
