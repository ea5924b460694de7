"""The memory plan's records: `Buffer` (a live interval and, in the arena, an offset) and
`MemoryPlan` (the buffers, the inplace decisions and the numbers of ARCHITECTURE.md §6, with
the queries a user asks of them). passes.memory_plan builds them; passes.plan_report writes
them as text and JSON."""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.ir import Graph, Node, Value, loc_matches

from . import plan_report
from .plan_html import write_html
from .plan_plot import plot_plan
from .reinplace import Decision

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
    mask_decisions: list = field(default_factory=list, repr=False)  # recompute.MaskDecision
    # Gradients computed straight into their slot of a bucket: Value -> byte offset there.
    packed: dict = field(default_factory=dict, repr=False)
    communication: list = field(default_factory=list)  # Bucket, one per all-reduced bucket
    backend: str | None = None  # the backend it was planned for (set by the pipeline)
    # How that backend runs the communication nodes, for the report (set by the pipeline)
    communication_path: str | None = None
    # passes.budget: the search (run on demand), the budget and the point it took, if any
    budget_search: object = field(default=None, repr=False)
    memory_budget: int | None = None
    budget_point: object = field(default=None, repr=False)

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

    @property
    def peak_point(self) -> int:
        """The first program point where the live bytes reach the lower bound (an attribute,
        as `peak_bytes` is)."""
        curve = self.live_curve()
        return curve.index(max(curve)) - 1

    def __repr__(self) -> str:
        # Short: the dataclass repr of every buffer, value and decision ran to ~150 KB.
        taken = sum(d.inplace for d in self.decisions)
        return (f"<MemoryPlan of {self.graph_name}: peak {plan_report._fmt(self.peak_bytes)} "
                f"at point {self.peak_point}, lower bound "
                f"{plan_report._fmt(self.lower_bound_bytes)}, "
                f"{self.num_points} nodes, {len(self.buffers)} buffers, {taken}/"
                f"{len(self.decisions)} candidates in place; .report() says it all>")

    LEGEND = (
        "Bytes: arena buffers count at their size rounded up to the alignment ({alignment} B), "
        "caller inputs and\nreturned buffers (allocated per call, outside the arena) at their "
        "size, in all four figures, so that\nnaive >= no-inplace peak >= peak >= lower bound. "
        "Program points: -1 is the call's entry, node k of the\nprinted graph "
        "([k]) is point k, {end} is the return; a buffer is live over [start, end], both "
        "included.")

    @property
    def communicated_bytes(self) -> int:
        """Bytes each rank all-reduces per call (the buckets, padding included)."""
        return sum(b.nbytes for b in self.communication)


    def budget_curve(self, budgets=None) -> list[tuple]:
        """(budget, planned peak, extra FLOPs) over a range of budgets (bytes beyond the
        caller's arrays; None where no plan fits): passes.budget.BudgetSearch.curve."""
        return self.budget_search.curve(budgets)

    def summary(self) -> str:
        return plan_report.summary(self)

    def report(self) -> str:
        return plan_report.report(self)

    def communication_report(self) -> list[str]:
        return plan_report.communication_report(self)

    def to_json(self) -> str:
        return plan_report.to_json(self)

    def to_html(self, path: str) -> str:
        """Write the memory-plan explorer: one self-contained HTML page (arena picture, bytes
        over time, decisions, graph listing; no network). Returns `path`."""
        return write_html(self, path)

    def plot(self, path: str) -> str:
        """Memory over program points as a PNG (needs matplotlib: the `plot` extra): stacked
        by buffer, coloured by phase, phases shaded, MiB axis, the largest buffers live at the
        peak labelled with their source lines."""
        return plot_plan(self, path)

