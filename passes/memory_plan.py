"""Memory planning: every buffer gets a live interval and, for intermediates, an arena offset.

Guarantees: two arena buffers that are live at the same program point never overlap (the
independent check is `passes.verify.verify_plan`); offsets are multiples of `alignment`
(64 bytes on CPU, 256 on GPU); the accounting follows DESIGN §6.

Algorithm (lifetimes -> buffers -> allocator -> numbers):
  1. Decide inplace (passes.reinplace) unless decisions are given.
  2. Group values into buffers: a view lives in its input's buffer; an output that a decision
     lets take an input's buffer lives there; every other value opens a buffer. A buffer holding
     a graph input is the caller's ("input"); one holding a returned value is allocated per call
     ("output"); the rest live in the arena.
  3. Live interval of a buffer: from the first definition of any value in it to the last read of
     any of them or of their views (program end for returned values and input mutations).
  4. Place arena buffers one by one, each at the best-fitting gap among the buffers already
     placed whose intervals intersect its own (touching intervals conflict: a copy never
     shares with its source); try a few orders (largest first, earliest first, longest-lived
     first, ...) and keep the smallest arena.
  5. Account: peak (inputs + arena counted whole + outputs allocated so far, at the worst
     point), the lower bound (live bytes with perfect packing at the worst point), naive (no
     reuse at all) and, by replanning with inplace="off", the no-inplace peak.
  6. In "auto", if that plan without reuse has the lower peak, it is the plan (its decisions
     say why): inplace="auto" never costs memory.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from compiler.ir import Graph, Node, Value
from compiler.ops import REGISTRY, VIEW

from .alias import alias_analysis
from .liveness import liveness
from .reinplace import Decision, reinplace

CPU_ALIGNMENT = 64
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

    def live_at(self, t: int) -> bool:
        return self.start <= t <= self.end

    def to_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "size": self.size, "offset": self.offset,
                "start": self.start, "end": self.end, "name": self.name,
                "values": [v.ref() for v in self.values]}


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
    reuse: dict = field(default_factory=dict, repr=False)      # Node -> input index taken

    # -- inspection ------------------------------------------------------------------------
    def live_bytes(self, t: int) -> int:
        return sum(b.size for b in self.buffers if b.kind == "input" or b.live_at(t))

    def summary(self) -> str:
        ratio = self.peak_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0
        taken = sum(d.inplace for d in self.decisions)
        return (f"plan {self.graph_name}: peak {_fmt(self.peak_bytes)} | lower bound "
                f"{_fmt(self.lower_bound_bytes)} (peak/bound {ratio:.3f}) | naive "
                f"{_fmt(self.naive_bytes)} | no-inplace peak {_fmt(self.no_inplace_peak_bytes)}"
                f" | arena {_fmt(self.arena_bytes)}, inputs {_fmt(self.input_bytes)}, outputs "
                f"{_fmt(self.output_bytes)} | {taken}/{len(self.decisions)} candidates in place")

    def report(self) -> str:
        lines = [self.summary(), "", "decisions:"]
        rows = [("op", "where", "requested", "in place", "reason")]
        for d in self.decisions:
            rows.append((d.op, d.loc, "yes" if d.requested else "no",
                         "yes" if d.inplace else "no", d.reason))
        lines += _table(rows)
        lines += ["", "buffers:"]
        rows = [("buf", "kind", "offset", "size", "live", "values")]
        for b in sorted(self.buffers, key=lambda b: (b.kind != "input", b.start, b.id)):
            values = " ".join(v.ref() for v in b.values[:6])
            if len(b.values) > 6:
                values += f" (+{len(b.values) - 6})"
            rows.append((f"#{b.id}", b.kind, "-" if b.offset is None else str(b.offset),
                         str(b.size), f"[{b.start}, {b.end}]", values))
        lines += _table(rows)
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({
            "graph": self.graph_name, "alignment": self.alignment, "inplace": self.inplace,
            "peak_bytes": self.peak_bytes, "lower_bound_bytes": self.lower_bound_bytes,
            "naive_bytes": self.naive_bytes, "no_inplace_peak_bytes": self.no_inplace_peak_bytes,
            "arena_bytes": self.arena_bytes, "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "decisions": [d.to_dict() for d in self.decisions],
            "buffers": [b.to_dict() for b in self.buffers],
        }, indent=1)

    def plot(self, path: str):
        """Memory over program points, stacked by buffer (needs matplotlib: the `plot` extra)."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("plan.plot needs matplotlib: pip install "
                              "'inplace-compiler[plot]'") from None
        points = list(range(-1, self.num_points + 1))
        fig, ax = plt.subplots(figsize=(10, 4))
        order = sorted(self.buffers, key=lambda b: (b.kind != "input", b.start))
        series = [[b.size if (b.kind == "input" or b.live_at(t)) else 0 for t in points]
                  for b in order]
        ax.stackplot(points, series, linewidth=0)
        ax.axhline(self.peak_bytes, color="k", linestyle="--", label="peak (as placed)")
        ax.axhline(self.lower_bound_bytes, color="r", linestyle=":", label="lower bound")
        ax.set_xlabel("program point (node index)")
        ax.set_ylabel("bytes live")
        ax.set_title(f"{self.graph_name}: peak {self.peak_bytes} B, lower bound "
                     f"{self.lower_bound_bytes} B, no-inplace peak "
                     f"{self.no_inplace_peak_bytes} B", fontsize=10)
        ax.legend(loc="upper left")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit} ({n} B)"
    return f"{n} B"


def _table(rows) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]
            for r in rows]


# -- planning --------------------------------------------------------------------------------
def _build_buffers(graph: Graph, reuse: dict[Node, int]):
    """Step 2 and 3."""
    aliases = alias_analysis(graph)
    live = liveness(graph, aliases)
    buffer_of: dict[Value, Buffer] = {}
    buffers: list[Buffer] = []

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
        else:
            join(node.out, open_buffer(node.out, "arena"))
    returned = {id(v) for v in graph.outputs}
    for b in buffers:
        if b.kind == "arena" and any(id(v) in returned for v in b.values):
            b.kind = "output"
    return buffers, buffer_of, live


# Orders in which buffers are offered to the allocator; the smallest arena wins. Largest-first
# is TFLite's "greedy by size"; the others break its ties in favour of long or early lifetimes,
# which packs better when many buffers have similar sizes.
PLACEMENT_ORDERS = {
    "size": lambda b: (-b.size, b.start, b.id),
    "start": lambda b: (b.start, -b.size, b.id),
    "lifetime": lambda b: (-(b.end - b.start), -b.size, b.id),
    "area": lambda b: (-b.size * (b.end - b.start + 1), b.id),
}


def _place_in_order(arena_buffers: list[Buffer], alignment: int) -> tuple[int, dict]:
    """Best fit: each buffer goes into the smallest gap, among the buffers already placed
    whose intervals intersect its own, that holds it; else on top of them."""
    placed: list[tuple[Buffer, int]] = []
    offsets, arena = {}, 0
    for b in arena_buffers:
        conflicts = sorted(((off, p) for p, off in placed
                            if p.start <= b.end and b.start <= p.end), key=lambda c: c[0])
        best, best_gap, cursor = None, None, 0
        for off, p in conflicts:
            gap = off - cursor
            if gap >= b.size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, align(off + p.size, alignment))
        offsets[b.id] = cursor if best is None else best
        placed.append((b, offsets[b.id]))
        arena = max(arena, align(offsets[b.id] + b.size, alignment))
    return arena, offsets


def _place(buffers: list[Buffer], alignment: int) -> int:
    """Step 4: place the arena buffers in each order of PLACEMENT_ORDERS, keep the smallest
    arena. Returns its size."""
    arena_buffers = [b for b in buffers if b.kind == "arena"]
    best = None
    for key in PLACEMENT_ORDERS.values():
        arena, offsets = _place_in_order(sorted(arena_buffers, key=key), alignment)
        if best is None or arena < best[0]:
            best = (arena, offsets)
    arena, offsets = best or (0, {})
    for b in arena_buffers:
        b.offset = offsets[b.id]
    return arena


def _max_live_bytes(buffers: list[Buffer], end: int) -> int:
    """The lower bound: the most bytes live at one program point (a sweep over intervals)."""
    delta = [0] * (end + 3)
    for b in buffers:
        start, stop = (-1, end) if b.kind == "input" else (b.start, b.end)
        delta[start + 1] += b.size
        delta[stop + 2] -= b.size
    best = running = 0
    for d in delta:
        running += d
        best = max(best, running)
    return best


def plan_memory(graph: Graph, inplace: str = "auto", donate=(), alignment: int = CPU_ALIGNMENT,
                decisions: list[Decision] | None = None, baseline: bool = True) -> MemoryPlan:
    """Plan `graph`'s memory. `baseline=False` skips the inplace="off" replan that fills
    `no_inplace_peak_bytes`."""
    if decisions is None:  # Step 1
        _, decisions = reinplace(graph, inplace, donate)
    reuse = {d.node: d.input_index for d in decisions if d.inplace}
    buffers, buffer_of, live = _build_buffers(graph, reuse)
    arena = _place(buffers, alignment)
    plan = MemoryPlan(graph.name, alignment, inplace, live.end, buffers, decisions,
                      buffer_of=buffer_of, reuse=reuse)
    # Step 5
    plan.arena_bytes = arena
    plan.input_bytes = sum(b.size for b in buffers if b.kind == "input")
    plan.output_bytes = sum(b.size for b in buffers if b.kind == "output")
    points = range(-1, live.end + 1)
    outputs = [b for b in buffers if b.kind == "output"]
    plan.peak_bytes = max(plan.input_bytes + arena
                          + sum(b.size for b in outputs if b.start <= t) for t in points)
    plan.lower_bound_bytes = _max_live_bytes(buffers, live.end)
    plan.naive_bytes = plan.input_bytes + sum(
        n.out.nbytes for n in graph.nodes if REGISTRY[n.op].kind != VIEW)
    if inplace == "off" or not baseline:
        plan.no_inplace_peak_bytes = plan.peak_bytes if inplace == "off" else 0
        return plan
    off = plan_memory(graph, "off", donate, alignment, baseline=False)
    plan.no_inplace_peak_bytes = off.peak_bytes
    if inplace == "auto" and off.peak_bytes < plan.peak_bytes:
        # Step 6: placement is a heuristic, and reuse can pack worse (rarely, and by a few
        # cache lines). "auto" promises never to cost memory: take the plan without reuse.
        off.inplace, off.no_inplace_peak_bytes = "auto", off.peak_bytes
        off.decisions = [_without_reuse(d, plan.peak_bytes, off.peak_bytes)
                         for d in decisions]
        return off
    return plan


def _without_reuse(d: Decision, auto_peak: int, off_peak: int) -> Decision:
    if not d.inplace:
        return d
    return Decision(d.op, d.loc, d.requested, False,
                    f"reuse would pack worse: the plan without it peaks at {off_peak} B, with "
                    f"it at {auto_peak} B", d.input_index, d.node)
