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
"""
from __future__ import annotations

import json
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field

from compiler.ir import Graph, Node, Value, loc_matches
from compiler.ops import REGISTRY, VIEW, workspace_bytes

from .alias import alias_analysis
from .liveness import liveness
from .plan_html import write_html
from .plan_plot import plot_plan
from .reinplace import Decision, reinplace

CPU_ALIGNMENT = 64
MOVES_SHOWN = 40  # lines of the schedule's moves in report()
GPU_ALIGNMENT = 256


def align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass(eq=False)
class Buffer:
    id: int
    kind: str                 # "input" | "output" | "arena"
    size: int                 # bytes
    start: int                # first program point (-1: before the first node)
    end: int                  # last program point it is needed (= #nodes: until the end)
    values: list[Value]
    offset: int | None = None  # arena offset (arena buffers only)
    name: str = ""
    workspace_of: Node | None = None  # a workspace: the node whose scratch it holds

    @property
    def label(self) -> str:
        """What the buffer holds, for tables: its values, or whose workspace it is."""
        if self.workspace_of is not None:
            n = self.workspace_of
            return f"workspace of {n.out.ref()} ({n.op})"
        values = " ".join(v.ref() for v in self.values[:6])
        return values + (f" (+{len(self.values) - 6})" if len(self.values) > 6 else "")

    def live_at(self, t: int) -> bool:
        return self.start <= t <= self.end

    @property
    def phase(self) -> str:
        """The phase of the node that opened the buffer (forward / backward / update), or
        "input" for a caller's array: the colour the plan's pictures give it."""
        opener = self.workspace_of or (self.values[0].producer if self.values else None)
        return "input" if opener is None else opener.phase

    def to_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "size": self.size, "offset": self.offset,
                "start": self.start, "end": self.end, "name": self.name,
                "values": [v.ref() for v in self.values],
                "workspace_of": self.workspace_of.out.ref() if self.workspace_of else None}


@dataclass(eq=False)
class MemoryPlan:
    graph_name: str
    alignment: int
    inplace: str
    num_points: int           # number of nodes; program points are -1 .. num_points
    buffers: list[Buffer]
    decisions: list[Decision]
    peak_bytes: int = 0
    lower_bound_bytes: int = 0
    naive_bytes: int = 0
    no_inplace_peak_bytes: int = 0
    arena_bytes: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    buffer_of: dict = field(default_factory=dict, repr=False)  # Value -> Buffer
    defined: dict = field(default_factory=dict, repr=False)    # Value -> its program point
    reuse: dict = field(default_factory=dict, repr=False)      # Node -> input index taken
    workspace: dict = field(default_factory=dict, repr=False)  # Node -> its workspace Buffer
    graph: Graph | None = field(default=None, repr=False)      # the graph planned
    # Live bytes at each point (index t + 1 for point t) of the order the user wrote, set by a
    # pass that reorders nodes (a scheduler), so that pictures can draw it beside this plan's
    # order; None while the plan's order is the written one.
    written_order_live_bytes: list[int] | None = field(default=None, repr=False)
    written_order_peak_bytes: int | None = None  # that order's planned peak, likewise
    schedule: object = field(default=None, repr=False)  # passes.schedule.Schedule, if it ran
    gemm_decisions: list = field(default_factory=list, repr=False)  # passes.gemm_accumulate
    recompute_decisions: list = field(default_factory=list, repr=False)  # passes.recompute
    # Gradients computed straight into their slot of a bucket: Value -> byte offset there.
    packed: dict = field(default_factory=dict, repr=False)
    communication: list = field(default_factory=list)  # Bucket, one per all-reduced bucket
    backend: str | None = None  # the backend it was planned for (set by the pipeline)
    # How that backend runs the communication nodes, for the report (set by the pipeline)
    communication_path: str | None = None

    # -- inspection ------------------------------------------------------------------------
    def buffer(self, value) -> Buffer:
        """The buffer a value lives in: a `Value` or its printed name ("%3", "x")."""
        if isinstance(value, str):
            ref = value if value.startswith("%") else f"%{value}"
            value = next((v for v in self.buffer_of if v.ref() == ref), None)
            if value is None:
                raise KeyError(f"the plan of {self.graph_name} has no value {ref}")
        return self.buffer_of[value]

    def decision(self, value) -> Decision:
        """The inplace decision about the node that produces `value` (a `Value` or "%3")."""
        ref = value if isinstance(value, str) else value.ref()
        ref = ref if ref.startswith("%") else f"%{ref}"
        for d in self.decisions:
            if d.node is not None and d.node.out.ref() == ref:
                return d
        raise KeyError(f"no inplace decision about {ref} (only candidates get one)")

    def decisions_at(self, where) -> list[Decision]:
        """The decisions about one source line: a line number or "file.py:LINE"."""
        return [d for d in self.decisions
                if d.node is not None and loc_matches(d.node.loc, where)]

    def live_bytes(self, t: int) -> int:
        """Bytes live at program point `t`, on the footing of the lower bound."""
        return sum(self.counted_bytes(b)
                   for b in self.buffers if b.kind == "input" or b.live_at(t))

    def counted_bytes(self, b: Buffer) -> int:
        """What buffer `b` counts for in the accounting: an arena buffer whole (aligned)."""
        return align(b.size, self.alignment) if b.kind == "arena" else b.size

    def live_curve(self) -> list[int]:
        """`live_bytes(t)` for every point t = -1 .. num_points (index t + 1); its maximum is
        the lower bound. One sweep over the intervals, not a sum per point."""
        delta = [0] * (self.num_points + 3)
        for b in self.buffers:
            start, stop = (-1, self.num_points) if b.kind == "input" else (b.start, b.end)
            size = self.counted_bytes(b)
            delta[start + 1] += size
            delta[stop + 2] -= size
        curve, running = [], 0
        for d in delta[:-1]:
            running += d
            curve.append(running)
        return curve

    def peak_point(self) -> int:
        """The first program point where the live bytes reach the lower bound."""
        curve = self.live_curve()
        return curve.index(max(curve)) - 1

    def summary(self) -> str:
        ratio = self.peak_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0
        taken = sum(d.inplace for d in self.decisions)
        return (f"plan {self.graph_name}: peak {_fmt(self.peak_bytes)} | lower bound "
                f"{_fmt(self.lower_bound_bytes)} (peak/bound {ratio:.3f}) | naive "
                f"{_fmt(self.naive_bytes)} | no-inplace peak {_fmt(self.no_inplace_peak_bytes)}"
                f" | arena {_fmt(self.arena_bytes)}, inputs {_fmt(self.input_bytes)}, outputs "
                f"{_fmt(self.output_bytes)} | {taken}/{len(self.decisions)} candidates in place")

    LEGEND = (
        "Bytes: arena buffers count at their size rounded up to the alignment ({alignment} B), "
        "caller inputs and\nreturned buffers (allocated per call, outside the arena) at their "
        "size, in all four figures, so that\nnaive >= no-inplace peak >= peak >= lower bound. "
        "Program points: -1 is the call's entry, node k of the\nprinted graph "
        "([k]) is point k, {end} is the return; a buffer is live over [start, end], both "
        "included.")

    def report(self) -> str:
        legend = self.LEGEND.format(alignment=self.alignment, end=self.num_points)
        lines = [self.summary(), legend, ""]
        if self.gemm_decisions:
            lines.append("weight updates (GEMM-accumulate):")
            lines += [f"  {d.text}" for d in self.gemm_decisions]
            lines.append("")
        if self.recompute_decisions:
            lines.append("recomputation (forward values the backward pass reads):")
            lines += [f"  {d.text}" for d in self.recompute_decisions]
            lines.append("")
        if self.communication:
            lines += self.communication_report() + [""]
        if self.schedule is not None:
            lines.append(self.schedule.summary(self.peak_bytes, self.written_order_peak_bytes))
            lines += [f"  {m.text}" for m in self.schedule.moves[:MOVES_SHOWN]]
            if len(self.schedule.moves) > MOVES_SHOWN:
                lines.append(f"  ... and {len(self.schedule.moves) - MOVES_SHOWN} more "
                             "(plan.schedule.moves, to_json)")
            lines.append("")
        lines.append("decisions:")
        rows = [("op", "where", "phase", "requested", "in place", "reason")]
        for d in self.decisions:
            rows.append((d.op, d.loc, d.phase, "yes" if d.requested else "no",
                         "yes" if d.inplace else "no", d.reason))
        lines += _table(rows)
        lines += ["", "buffers:"]
        rows = [("buf", "kind", "offset", "size", "live", "values")]
        for b in sorted(self.buffers, key=lambda b: (b.kind != "input", b.start, b.id)):
            rows.append((f"#{b.id}", b.kind, "-" if b.offset is None else str(b.offset),
                         str(b.size), f"[{b.start}, {b.end}]", b.label))
        lines += _table(rows)
        return "\n".join(lines)

    @property
    def communicated_bytes(self) -> int:
        """Bytes each rank all-reduces per call (the buckets, padding included)."""
        return sum(b.nbytes for b in self.communication)

    def communication_report(self) -> list[str]:
        grad = sum(b.gradient_bytes for b in self.communication)
        lines = [f"communication: {len(self.communication)} bucket(s) all-reduced (sum over "
                 f"the ranks, then / ranks), {self.communicated_bytes} B per call for {grad} B "
                 "of gradients (slots padded to 64 B)"]
        lines += [f"  {b.text}" for b in self.communication]
        if self.communication_path:
            lines.append(f"  runs through {self.communication_path}")
        return lines

    def to_json(self) -> str:
        return json.dumps({
            "graph": self.graph_name, "alignment": self.alignment, "inplace": self.inplace,
            "peak_bytes": self.peak_bytes, "lower_bound_bytes": self.lower_bound_bytes,
            "naive_bytes": self.naive_bytes, "no_inplace_peak_bytes": self.no_inplace_peak_bytes,
            "arena_bytes": self.arena_bytes, "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes, "num_points": self.num_points,
            "written_order_peak_bytes": self.written_order_peak_bytes,
            "schedule": self.schedule.to_dict() if self.schedule is not None else None,
            "gemm_decisions": [d.to_dict() for d in self.gemm_decisions],
            "recompute_decisions": [d.to_dict() for d in self.recompute_decisions],
            "communication": [b.to_dict() for b in self.communication],
            "decisions": [d.to_dict() for d in self.decisions],
            "buffers": [b.to_dict() for b in self.buffers],
            "values": [self._value_dict(v) for b in self.buffers for v in b.values],
        }, indent=1)

    def _value_dict(self, v: Value) -> dict:
        p = v.producer
        return {"value": v.ref(), "shape": list(v.shape), "dtype": v.dtype.name,
                "op": p.op if p is not None else "input",
                "point": self.defined.get(v, -1), "phase": p.phase if p else "forward",
                "loc": str(p.loc) if p else "", "text": p.loc.text.strip() if p else "",
                "buffer": self.buffer_of[v].id}

    def to_html(self, path: str) -> str:
        """Write the memory-plan explorer: one self-contained HTML page (arena picture, bytes
        over time, decisions, graph listing; no network). Returns `path`."""
        return write_html(self, path)

    def plot(self, path: str) -> str:
        """Memory over program points as a PNG (needs matplotlib: the `plot` extra): stacked
        by buffer, coloured by phase, phases shaded, MiB axis, the largest buffers live at the
        peak labelled with their source lines."""
        return plot_plan(self, path)


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit} ({n} B)"
    return f"{n} B"


def _table(rows) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]
            for r in rows]


@dataclass
class Bucket:
    """One all-reduced bucket of gradients, as planned: where it is packed, where its
    reduction starts and where it is waited on (program points), and which of its gradients
    were computed straight into their slot (`packed`) rather than copied there."""

    bucket: int
    nbytes: int
    gradient_bytes: int
    names: tuple
    pack_point: int
    start_point: int
    wait_point: int
    packed: int               # gradients computed in their slot
    copied: tuple             # names of those copied into it
    in_place: bool            # start and wait run over the bucket's own buffer
    buffer: int

    @property
    def text(self) -> str:
        between = self.wait_point - self.start_point - 1
        where = "in place in the bucket" if self.in_place else "NOT in place (copies)"
        copied = f"; copied in: {', '.join(self.copied)}" if self.copied else ""
        return (f"bucket {self.bucket}: {self.nbytes} B [{', '.join(self.names)}] in buffer "
                f"#{self.buffer}; packed at [{self.pack_point}], Iallreduce started at "
                f"[{self.start_point}], waited at [{self.wait_point}] ({between} nodes between); "
                f"{self.packed}/{len(self.names)} gradients computed in their slot{copied}; "
                f"reduced {where}")

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "bucket", "nbytes", "gradient_bytes", "names", "pack_point", "start_point",
            "wait_point", "packed", "copied", "in_place", "buffer")}


def _communication(graph: Graph, buffer_of, reuse, packed) -> list[Bucket]:
    point = {id(n): t for t, n in enumerate(graph.nodes)}
    by_bucket: dict[int, dict] = {}
    for n in graph.nodes:
        if n.op in ("bucket_pack", "allreduce_start", "allreduce_wait"):
            by_bucket.setdefault(n.attrs["bucket"], {})[n.op] = n
    out = []
    packed_roots = set(packed)
    for k in sorted(by_bucket):
        ops = by_bucket[k]
        pack, start, wait = ops["bucket_pack"], ops["allreduce_start"], ops["allreduce_wait"]
        names = pack.attrs.get("names") or tuple(v.ref() for v in pack.inputs)
        in_slot = []
        for v in pack.inputs:
            while v not in packed_roots and v.producer is not None and v.producer.op == "reshape":
                v = v.producer.inputs[0]
            in_slot.append(v in packed_roots)
        out.append(Bucket(k, pack.out.nbytes, sum(v.nbytes for v in pack.inputs), names,
                          point[id(pack)], point[id(start)], point[id(wait)], sum(in_slot),
                          tuple(n for n, ok in zip(names, in_slot) if not ok),
                          reuse.get(start) == 0 and reuse.get(wait) == 0,
                          buffer_of[pack.out].id))
    return out


# -- planning --------------------------------------------------------------------------------
def _packable(graph: Graph, reuse: dict[Node, int]) -> dict:
    """Gradients that can be computed straight into their bucket's slot: Value -> (the
    bucket_pack node, byte offset). The pack (through reshapes) must be the value's only
    reader (the all-reduce then overwrites nothing another node needs), and the value must
    open its own buffer (not a view, an input, a returned value or an in-place result)."""
    users = graph.users()
    kept = {id(v) for v in graph.live_outputs()}
    packed: dict = {}
    for node in graph.nodes:
        if node.op != "bucket_pack":
            continue
        for v, off in zip(node.inputs, node.attrs["offsets"]):
            if len(users[v]) != 1 or id(v) in kept:
                continue
            # A bias gradient is a reshape of a sum: pack the summed value (a reshape of a
            # fresh value is contiguous, so it lies in the slot as the flat gradient does).
            while v.producer is not None and v.producer.op == "reshape" and \
                    len(users[v.producer.inputs[0]]) == 1 and id(v.producer.inputs[0]) not in kept:
                v = v.producer.inputs[0]
            p = v.producer
            if p is None or REGISTRY[p.op].kind == VIEW or p in reuse or v in packed \
                    or workspace_bytes(p):
                continue
            packed[v] = (node, off * v.dtype.itemsize)
    return packed


def _build_buffers(graph: Graph, reuse: dict[Node, int]):
    """Step 2 and 3."""
    aliases = alias_analysis(graph)
    live = liveness(graph, aliases)
    buffer_of: dict[Value, Buffer] = {}
    buffers: list[Buffer] = []
    packed = _packable(graph, reuse)
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


def _conflicts(arena_buffers: list[Buffer]) -> dict[int, list[Buffer]] | None:
    """Buffer id -> the buffers whose live intervals intersect its own (touching counts), or
    None when there are more than CONFLICT_PAIR_BUDGET such pairs. O(n log n + pairs)."""
    starts = sorted(b.start for b in arena_buffers)
    ends = sorted(b.end for b in arena_buffers)
    if len(arena_buffers) > BEST_FIT_MAX_BUFFERS:
        return None
    pairs = sum(bisect_right(starts, b.end) - bisect_left(ends, b.start) - 1
                for b in arena_buffers) // 2
    if pairs > CONFLICT_PAIR_BUDGET:
        return None
    by_start = sorted(arena_buffers, key=lambda b: (b.start, b.id))
    out: dict[int, list[Buffer]] = {b.id: [] for b in arena_buffers}
    for i, b in enumerate(by_start):
        j = i + 1
        while j < len(by_start) and by_start[j].start <= b.end:
            out[b.id].append(by_start[j])
            out[by_start[j].id].append(b)
            j += 1
    return out


def _place_in_order(arena_buffers: list[Buffer], conflicts, alignment: int) -> tuple[int, dict]:
    """Best fit: each buffer goes into the smallest gap, among the buffers already placed
    whose intervals intersect its own, that holds it; else on top of them."""
    offsets, arena = {}, 0
    for b in arena_buffers:
        placed = sorted((offsets[p.id], p.size) for p in conflicts[b.id] if p.id in offsets)
        best, best_gap, cursor = None, None, 0
        for off, size in placed:
            gap = off - cursor
            if gap >= b.size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, align(off + size, alignment))
        offsets[b.id] = cursor if best is None else best
        arena = max(arena, align(offsets[b.id] + b.size, alignment))
    return arena, offsets


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
    plan.communication = _communication(graph, buffer_of, reuse, packed)
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
