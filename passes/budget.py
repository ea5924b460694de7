"""Memory to a budget: `cc.compile(fn, memory_budget=N)` searches the plans the pipeline can
make (which forward values to recompute; for each, the scheduler's order or the written one
and the inplace choices, whichever plans lower, as the pipeline always picks) for those whose
planned peak beyond the caller's arrays (`peak_bytes - input_bytes`: the arena and the
returned buffers) is at most N, and takes the one with the least extra work.

Guarantees:
  1. Every point of the search is a real plan: `evaluate(graph)` runs the rest of the
     pipeline (fusion, schedule, reinplace, plan_memory) on the candidate graph, so a peak
     here is the peak of the program that runs, not an estimate. The plan chosen for a budget
     N peaks at most N beyond the inputs, or `MemoryBudgetError` is raised before anything
     runs (at `lower()` or the first call).
  2. The set of plans searched does not depend on N (the greedy path below is fixed by the
     graph), and the choice is the point of the Pareto frontier (extra FLOPs against peak)
     with the fewest extra FLOPs among those that fit. So raising the budget never adds work
     and never loses a fit; the peak rises only where less work is done for it.
  3. Recomputation is exact (passes.recompute, passes.recompute_attention: the same pure ops
     on the same SSA operands), so every point computes the unbudgeted program's values bit
     for bit.

Algorithm:
  1. Point 0: nothing recomputed (no extra work). If it fits, it is the choice and nothing
     else is planned (the search runs in full only when a budget needs it, or for
     `plan.budget_curve()`).
  2. Candidates: passes.recompute's (a cheap elementwise forward value the backward pass
     reads, at least MIN_BYTES, not returned, operands not overwritten before its backward
     reader), passes.recompute_attention's (a softmax over a GEMM's scores, recomputed
     with the scores; the attention output; q, k, v from their projection GEMMs) and
     those of the finders the pipeline adds (passes.recompute_gemm: matmul outputs, under
     the same conditions), the MAX_CANDIDATES largest; each priced by
     its decision's `extra_flops` (an elementwise op per element, a GEMM 2 * m * n * k).
  3. Greedy: from the recomputations chosen so far, plan each remaining candidate added;
     keep the one giving the lowest planned peak (fewer FLOPs on ties) while it lowers the
     peak; each step is a point. At most MAX_EVALS plans.
  4. Two more points: the recompute pass's own choice (`recompute="auto"`, a byte-model
     search) and every candidate recomputed at once (two values that peak together can only
     be lowered together, which one greedy step can't see).
  5. The frontier: points by extra FLOPs, each kept when it peaks lower than every cheaper
     one. A budget takes the first that fits.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from compiler.errors import MemoryBudgetError
from compiler.ir import Graph

from . import recompute as rc
from . import recompute_attention as ra

MIN_BYTES = 4096        # smaller forward values are not worth a plan each
MAX_CANDIDATES = 10     # the largest candidates are searched
MAX_EVALS = 60          # plans made by the greedy search, at most

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_budget(budget) -> int | None:
    """`memory_budget` as bytes: a whole number of bytes, or a string such as "12MiB",
    "1.5 MB", "800 KiB" (k/M/G: powers of 1000, Ki/Mi/Gi: of 1024). ValueError otherwise."""
    if budget is None:
        return None
    if isinstance(budget, bool):
        raise ValueError(f"memory_budget must be bytes (an int) or a string like '12MiB', "
                         f"not {budget!r}")
    if isinstance(budget, int) or (hasattr(budget, "__index__") and not isinstance(budget, str)):
        n = int(budget.__index__())
    elif isinstance(budget, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*", budget)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"memory_budget {budget!r} is not a size: write bytes (an int) "
                             "or a number and a unit, e.g. '12MiB', '1.5 MB', '800KiB'")
        n = int(float(m.group(1)) * _UNITS[unit])
    else:
        raise ValueError(f"memory_budget must be bytes (an int) or a string like '12MiB', "
                         f"not {budget!r}")
    if n < 0:
        raise ValueError(f"memory_budget must not be negative ({budget!r})")
    return n


@dataclass(eq=False)
class BudgetPoint:
    """One plan the search made: what it recomputes, its extra work and its planned peak
    beyond the caller's arrays."""

    recomputed: tuple                    # RecomputeDecision of the candidates recomputed
    extra_flops: int
    peak: int                            # plan.peak_bytes - plan.input_bytes
    how: str                             # "nothing recomputed", "greedy step 2", ...
    graph: Graph = field(repr=False)
    plan: object = field(repr=False)
    copies: dict = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        return {"recomputed": [d.value for d in self.recomputed], "how": self.how,
                "extra_flops": self.extra_flops, "peak": self.peak}


def _beyond_inputs(plan) -> int:
    return plan.peak_bytes - plan.input_bytes


class BudgetSearch:
    """The search over one graph (module docstring). `evaluate(graph) -> MemoryPlan` plans a
    candidate graph as the pipeline would; `recompute=False` searches point 0 only."""

    def __init__(self, graph: Graph, evaluate, recompute: bool = True, more=()):
        self.graph = graph
        self.evaluate = evaluate
        self.allow_recompute = recompute
        # further candidate finders, `(graph, facts, min_bytes) -> (considered, ok)`, each
        # candidate priced by its own `extra_flops` (passes.recompute_gemm: GEMM outputs)
        self.more = tuple(more)
        self._facts = None                # rc.candidates, made on first use
        self.saved: dict[int, int] = {}   # id(candidate decision) -> greedy bytes saved
        self.tried: dict[int, int] = {}   # id(candidate) -> best peak seen with it added
        self._zero: BudgetPoint | None = None
        self._points: list[BudgetPoint] | None = None

    def _find(self):
        if self._facts is None:
            f, considered, ok = rc.candidates(self.graph, MIN_BYTES)
            _, attention, attention_ok = ra.candidates(self.graph, MIN_BYTES, f)
            # an attention output's copy is its whole chain's, not the elementwise one's
            taken = {id(d.node) for d in attention}
            considered = attention + [d for d in considered if id(d.node) not in taken]
            ok = attention_ok + [d for d in ok if id(d.node) not in taken]
            for find in self.more:   # (a GEMM priced above as an attention input: once)
                c, o = find(self.graph, f, MIN_BYTES)
                c, o = ([d for d in x if id(d.node) not in taken] for x in (c, o))
                considered, ok = considered + c, ok + o
            ok.sort(key=lambda d: -d.nbytes)
            self._facts = (f, considered, ok[:MAX_CANDIDATES] if self.allow_recompute else [])
        return self._facts

    @property
    def facts(self):
        return self._find()[0]

    @property
    def considered(self) -> list:
        """A decision per forward value the backward pass reads (recompute.candidates)."""
        return self._find()[1]

    @property
    def candidates(self) -> list:
        """Those the search may recompute, the largest MAX_CANDIDATES (none when the
        recompute option is "off")."""
        return self._find()[2]

    # -- points --------------------------------------------------------------------------
    def _point(self, chosen, how) -> BudgetPoint:
        graph, copies = ra.rewrite(self.graph, chosen, self.facts)
        plan = self.evaluate(graph)
        return BudgetPoint(tuple(chosen), ra.total_flops(chosen),
                           _beyond_inputs(plan), how, graph, plan, copies)

    @property
    def zero(self) -> BudgetPoint:
        """Step 1: the plan without recomputation."""
        if self._zero is None:
            self._zero = self._point([], "nothing recomputed")
        return self._zero

    @property
    def points(self) -> list[BudgetPoint]:
        """Every plan searched (steps 1-4)."""
        if self._points is None:
            self._points = self._search()
        return self._points

    def _search(self) -> list[BudgetPoint]:
        points = [self.zero]
        if not self.candidates:
            return points
        chosen, current, evals = [], self.zero, 0
        remaining = list(self.candidates)
        while remaining and evals < MAX_EVALS:    # Step 3
            best = None
            for d in remaining:
                if evals >= MAX_EVALS:
                    break
                p = self._point(chosen + [d], f"greedy step {len(chosen) + 1}")
                evals += 1
                self.tried[id(d)] = min(self.tried.get(id(d), p.peak), p.peak)
                if best is None or (p.peak, p.extra_flops) < (best[0].peak,
                                                              best[0].extra_flops):
                    best = (p, d)
            if best is None or best[0].peak >= current.peak:
                break
            p, d = best
            self.saved[id(d)] = current.peak - p.peak
            chosen.append(d)
            remaining.remove(d)
            points.append(p)
            current = p
        everything = set(map(id, self.candidates))   # Step 4
        if set(map(id, chosen)) != everything and len(self.candidates) > 1:
            points.append(self._point(list(self.candidates), "every candidate recomputed"))
        auto_graph, auto = rc.recompute(self.graph, "auto")
        by_node = {id(d.node): d for d in self.candidates}
        auto_chosen = [by_node[id(a.node)] for a in auto if a.recomputed
                       and id(a.node) in by_node]
        if auto_chosen and {id(d) for d in auto_chosen} not in \
                [{id(d) for d in p.recomputed} for p in points]:
            points.append(self._point(auto_chosen, "the recompute pass's choice"))
        return points

    @property
    def frontier(self) -> list[BudgetPoint]:
        """Step 5: by extra FLOPs, each peaking lower than every cheaper point."""
        out = []
        for p in sorted(self.points, key=lambda p: (p.extra_flops, p.peak)):
            if not out or p.peak < out[-1].peak:
                out.append(p)
        return out

    def choose(self, budget: int) -> BudgetPoint | None:
        """The least-work plan whose peak is at most `budget`, or None."""
        if self.zero.peak <= budget:
            return self.zero
        return next((p for p in self.frontier if p.peak <= budget), None)

    def lowest(self) -> BudgetPoint:
        return min(self.points, key=lambda p: (p.peak, p.extra_flops))

    def curve(self, budgets=None) -> list[tuple]:
        """(budget, planned peak, extra FLOPs) per budget; peak and FLOPs are None where no
        plan fits. Default budgets: from below the lowest reachable peak to the peak without
        recomputation, and each frontier peak."""
        if budgets is None:
            lo, hi = self.lowest().peak, self.zero.peak
            budgets = {p.peak for p in self.frontier} | {max(lo - 1, 0)}
            budgets |= {lo + (hi - lo) * k // 8 for k in range(9)}
        out = []
        for b in sorted(budgets):
            b = parse_budget(b)
            p = self.choose(b)
            out.append((b, p.peak if p else None, p.extra_flops if p else None))
        return out

    # -- what the plan keeps -----------------------------------------------------------------
    def decisions(self, point: BudgetPoint, budget: int | None) -> list:
        """One RecomputeDecision per forward value considered, as the report lists them."""
        chosen = {id(d) for d in point.recomputed}
        out = []
        for d in self.considered:
            d = replace(d)
            key = next((id(c) for c in self.candidates if c.node is d.node), None)
            if key in chosen:
                d.recomputed = True
                d.saved_bytes = self.saved.get(key)
                d.copy = point.copies.get(d.node)
                d.reason = (f"memory budget {budget} B: the plan recomputing it peaks at "
                            f"{point.peak} B beyond the inputs (the search: {point.how})")
            elif not d.reason:
                d.reason = ("not needed to meet the memory budget" if key is not None else
                            f"not searched: past the {MAX_CANDIDATES} largest candidates")
            out.append(d)
        return out

    def text(self, point: BudgetPoint | None, budget: int | None) -> list[str]:
        """The report's lines: the budget, the plan taken, the frontier."""
        lines = [f"memory budget: {budget} B beyond the caller's arrays; planned "
                 f"{point.peak} B with {point.extra_flops} extra FLOPs ({point.how})"]
        lines.append("  plans searched on the frontier (extra FLOPs -> planned peak):")
        for p in self.frontier:
            what = ", ".join(f"{d.value} ({d.op} at {d.loc})" for d in p.recomputed) or "-"
            mark = "  <- taken" if p is point else ""
            lines.append(f"    {p.extra_flops:>12} FLOPs -> {p.peak:>12} B  recomputing "
                         f"{what}{mark}")
        return lines

    # -- why not -----------------------------------------------------------------------------
    def error(self, budget: int, graph_name: str) -> MemoryBudgetError:
        """The refusal: the lowest peak reached, the buffers live at that peak (ops, source
        lines) and what each further idea would need."""
        best = self.lowest()
        plan = best.plan
        t = plan.peak_point
        live = sorted((b for b in plan.buffers if b.kind != "input" and b.live_at(t)),
                      key=lambda b: -b.size)
        how = ", ".join(d.value for d in best.recomputed) or "nothing"
        lines = [f"memory_budget={budget} B can't be met by {graph_name}: the lowest planned "
                 f"peak the search reached is {best.peak} B beyond the caller's arrays "
                 f"(recomputing {how}; {best.extra_flops} extra FLOPs; {len(self.points)} "
                 f"plans searched). Live at its peak (point {t}):"]
        first_loc = None
        for b in live[:12]:
            vals = [v for v in b.values if v.producer is not None] or b.values
            p = vals[0].producer if vals else None
            where = (f"{vals[0].ref()} = {p.op} at {p.loc}" if p is not None
                     else b.label)
            if b.workspace_of is not None:
                where = f"{b.label} at {b.workspace_of.loc}"
                p = b.workspace_of
            if first_loc is None and p is not None:
                first_loc = p.loc
            lines.append(f"  #{b.id} {b.kind} {plan.counted_bytes(b)} B: {where}")
        if len(live) > 12:
            lines.append(f"  ... and {len(live) - 12} more buffers")
        lines.append("What else would be needed:")
        lines += self._ideas(live, plan, best)
        return MemoryBudgetError("\n".join(lines), first_loc)

    def _ideas(self, live, plan, best) -> list[str]:
        # The plan is of the fused graph, the search's nodes are not: match values by id.
        f = rc._Facts(best.graph)
        pre = {n.out.id: n for n in best.graph.nodes}
        by_id = {d.node.out.id: d for d in self.considered}
        chosen = {d.node.out.id for d in best.recomputed}
        copy_of = {c.out.id: n.out.id for n, c in best.copies.items()}
        out = []
        for b in live[:12]:
            if b.workspace_of is not None:
                out.append(f"  {b.label}: the scratch its op needs while it runs")
                continue
            vid = next((v.id for v in b.values if v.id in pre), None)
            if vid is None:
                out.append(f"  {b.label}: an input's value, live for the whole call")
                continue
            node = pre[vid]
            head = (f"  recomputing {node.out.ref()} ({node.op} at {node.loc}) would save up "
                    f"to {plan.counted_bytes(b)} B")
            d = by_id.get(copy_of.get(vid, vid))
            if copy_of.get(vid, vid) in chosen:
                out.append(f"  {node.out.ref()} ({node.op} at {node.loc}) is recomputed "
                           "already: this is where its value or its copy must live")
            elif d is not None and d.reason:
                out.append(f"{head} but it is not recomputable: {d.reason}")
            elif d is not None and id(d) in self.tried:
                out.append(f"{head}, but the plan with it added peaks at "
                           f"{self.tried[id(d)]} B")
            elif d is not None:
                out.append(f"{head}: not searched (past the {MAX_CANDIDATES} largest "
                           "candidates)")
            else:
                reason = (rc.not_cheap(node) or rc.not_read_late(node, f)
                          or (rc.too_small(node) if node.out.nbytes < MIN_BYTES else None)
                          or rc.returned(node, f) or "it is not a forward value the backward "
                          "pass reads")
                out.append(f"{head} but it is not recomputable: {reason}")
        return out
