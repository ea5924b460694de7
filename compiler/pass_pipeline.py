"""The pass pipeline: one flat list of named passes, run in order on a traced graph.

Environment switches:
  COMPILER_DUMP=name[,name...]|all   print the graph and the pass's analysis (decisions,
                                     the plan) after those passes; unknown names raise;
                                     `llvm` (`llvm-opt`) prints the cpu backend's LLVM
                                     IR (after -O3); `cuda` the gpu backend's CUDA C
  COMPILER_SANITIZE=1                run planned programs in sanitizer mode (poison dead buffers)
  COMPILER_CUDA_GRAPH=1              gpu backend: capture the launch list as a CUDA graph (at
                                     the second call) and replay it
"""
from __future__ import annotations

import copy
import os

from passes import recompute_gemm
from passes.budget import BudgetSearch
from passes.cse import cse
from passes.fusion import fuse
from passes.gemm_accumulate import gemm_accumulate
from passes.memory_plan import plan_memory
from passes.recompute import MaskDecision, mask_candidates, pack_masks, recompute
from passes.recompute_attention import recompute_attention
from passes.regenerate import regenerate
from passes.reinplace import reinplace
from passes.schedule import schedule
from passes.simplify import dce
from passes.verify import verify_graph, verify_plan

from .arguments import graph_input_positions
from .errors import CompilerError, InplaceError
from .ops import ELEMENTWISE, REGISTRY
from .options import Options


class CompileState:
    """What flows through the pipeline: the graph, the inplace decisions, the memory plan.
    The options come from one validated `Options` record; the passes read the backend's
    properties (alignment, fusion scratch), never its name."""

    def __init__(self, graph, options: Options, donate=()):
        self.graph = graph
        self.options = options
        self.backend = options.backend.name
        self.alignment = options.backend.alignment
        self.fuse = options.fuse      # passes.fusion: Options resolved the backend's default
        self.inplace = options.inplace
        self.donate = donate          # names of donated array parameters (donated_names)
        self.schedule = options.schedule    # "auto" | "off"
        self.recompute = options.recompute  # "auto" | "off"
        self.recompute_decisions = []  # passes.recompute.RecomputeDecision, per candidate
        self.mask_decisions = []       # passes.recompute.MaskDecision, per bool mask
        self.attention_decisions = []  # passes.recompute_attention.AttentionDecision
        self.regenerate_decisions = []  # passes.regenerate.RegenerateDecision, per mask
        self.unrecomputed = None       # the graph before recompute_attention rewrote it
        self.planned_peaks = {}        # id(graph) -> (graph, _planned_peak's answer)
        self.decisions = None
        self.plan = None
        self.written_graph = None     # the order as written, when the scheduler changed it
        self.schedule_info = None     # passes.schedule.Schedule
        self.gemm_decisions = []      # passes.gemm_accumulate.GemmDecision, per update
        self.budget_search = None     # passes.budget.BudgetSearch (memory_budget, curve)
        self.budget_point = None      # ... and the point it took under memory_budget


def _verify_graph(state):
    verify_graph(state.graph)
    return state


def _dce(state):
    state.graph = dce(state.graph)
    return state


def _cse(state):
    state.graph = cse(state.graph)
    return state


def _gemm_accumulate(state):
    state.graph, state.gemm_decisions = gemm_accumulate(state.graph)
    return state


def _evaluate(graph, state):
    """The plan the rest of the pipeline (fuse .. plan_memory) makes of `graph`."""
    s = copy.copy(state)
    s.graph, s.plan, s.decisions, s.written_graph, s.schedule_info = graph, None, None, None, None
    for fn in (_fuse, _schedule, _reinplace, _plan_memory):
        s = fn(s)
    return s.plan


def _pack_masks(state):
    """Bool masks the backward pass reads kept as bits (passes.recompute.pack_masks) when the
    planned peak falls; one MaskDecision per candidate either way."""
    found = mask_candidates(state.graph) if state.recompute != "off" else []
    if not found:
        return
    packed = pack_masks(state.graph, found)
    bits, bytes_ = (_evaluate(g, state).peak_bytes for g in (packed, state.graph))
    keep = bits < bytes_
    how = f"the planned peak is {bits} B with bits, {bytes_} B with bytes"
    state.mask_decisions = [MaskDecision(m, m.out.ref(), m.op, str(m.loc), m.out.nbytes, keep,
                                         how) for m, _ in found]
    if keep:
        state.graph = packed


def _regenerate_random(state):
    """Random masks regenerated from their Philox counters in the backward pass
    (passes.regenerate) when the planned peak falls; one decision per candidate either way.
    Not tried unfused (the numpy reference): the copy would make the draw (4 bytes per element
    for the mask's 1) at its reader, and the two plans cost time in every compile."""
    graph, decisions = regenerate(state.graph) if state.recompute != "off" and state.fuse \
        else (None, [])
    if not decisions:
        return state
    with_, without = (_evaluate(g, state).peak_bytes for g in (graph, state.graph))
    how = f"the planned peak is {with_} B regenerated, {without} B kept"
    for d in decisions:
        d.recomputed, d.reason = with_ < without, how
        if not d.recomputed:
            d.copy = None
    state.regenerate_decisions = decisions
    if with_ < without:
        state.graph = graph
    return state


def _recompute_attention(state):
    if state.options.memory_budget is not None:
        return state   # the budget search prices these candidates with the others
    graph, state.attention_decisions = recompute_attention(
        state.graph, state.recompute, state.schedule != "off",
        lambda g: _planned_peak(g, state))
    if graph is not state.graph:
        state.unrecomputed, state.graph = state.graph, graph
    return state


def _recompute(state):
    _pack_masks(state)
    # (the search starts from the graph before recompute_attention: it prices those
    # candidates itself)
    search = BudgetSearch(state.graph if state.unrecomputed is None else state.unrecomputed,
                          lambda g, st=copy.copy(state): _evaluate(g, st),
                          recompute=state.recompute != "off",
                          more=(recompute_gemm.candidates,))  # GEMMs: under a budget only
    state.budget_search = search   # plan.budget_curve() runs it on demand
    budget = state.options.memory_budget
    if budget is not None:
        point = search.choose(budget)
        if point is None:
            raise search.error(budget, state.graph.name)
        state.graph, state.budget_point = point.graph, point
        state.recompute_decisions = state.regenerate_decisions + search.decisions(point,
                                                                                  budget)
        return state
    graph, decisions = recompute(state.graph, state.recompute,
                                 scheduled=state.schedule != "off")
    state.recompute_decisions = state.regenerate_decisions + state.attention_decisions \
        + decisions
    if graph is not state.graph and _planned_peak(graph, state) >= \
            _planned_peak(state.graph, state):
        # the byte model's estimate did not survive real planning: keep every value
        for d in decisions:
            if d.recomputed:
                d.recomputed, d.copy = False, None
                d.reason = ("kept: the estimate was lower with recomputation, but the planned "
                            "peak is not")
        return state
    state.graph = graph
    return state


def _planned_peak(graph, state) -> int:
    """The peak `plan_memory` gives `graph` in the order the scheduler picks (or as written,
    with schedule="off"), without the inplace="off" baseline."""
    if state.planned_peaks.get(id(graph), (None,))[0] is graph:   # recompute_attention's
        return state.planned_peaks[id(graph)][1]
    g = schedule(graph)[0] if state.schedule != "off" else graph
    _, decisions = reinplace(g, state.inplace, state.donate)
    peak = plan_memory(g, state.inplace, state.donate, state.alignment, decisions=decisions,
                       baseline=False).peak_bytes
    state.planned_peaks[id(graph)] = (graph, peak)
    return peak


def _fuse(state):
    if not state.fuse:
        return state
    # Native code keeps a body's inner values in registers: no scratch rows to plan.
    graph = fuse(state.graph, scratch=state.options.backend.fusion_scratch)
    # recompute_attention's copies (a body rooted at its scale or mask step's copy, a
    # softmax or GEMM copy that fusion rewired to read one) are still copies: the scheduler
    # makes them right before their readers, not in the forward pass. (Only those: remapping
    # the elementwise pass's copies too raised gpt's planned peak by 49 KB.)
    rec = state.graph.recomputed
    read, made = {id(v) for n in rec for v in n.inputs}, {id(n.out) for n in rec}
    copies = {n.out.id for n in rec if id(n.out) in read or REGISTRY[n.op].kind != ELEMENTWISE
              or any(id(v) in made for v in n.inputs)}
    if graph is not state.graph and copies:
        kept = {id(n) for n in graph.recomputed}
        graph.recomputed = graph.recomputed + [n for n in graph.nodes if n.out.id in copies
                                               and id(n) not in kept]
    state.graph = graph
    return state


def _schedule(state):
    if state.schedule == "off":
        return state
    graph, state.schedule_info = schedule(state.graph)
    if graph is not state.graph:
        state.written_graph, state.graph = state.graph, graph
    return state


def _reinplace(state):
    state.graph, state.decisions = reinplace(state.graph, state.inplace, state.donate)
    return state


def _plan_memory(state):
    state.plan = plan_memory(state.graph, state.inplace, state.donate, state.alignment,
                             decisions=state.decisions)
    state.plan.gemm_decisions = state.gemm_decisions
    state.plan.recompute_decisions = state.recompute_decisions
    state.plan.mask_decisions = state.mask_decisions
    if state.written_graph is None:
        state.plan.schedule = state.schedule_info
        _note_backend(state)
        return state
    # The written order, planned too: the report and pictures show its peak and curve beside
    # the schedule's, and it stays the program when the schedule did not lower the peak.
    written = state.written_graph
    _, decisions = reinplace(written, state.inplace, state.donate)
    # In "auto" the baseline replan may be the better plan (plan_memory's step 6): with it,
    # auto's peak is at most the best of both orders planned with inplace="off".
    auto = state.inplace == "auto"
    plan = plan_memory(written, state.inplace, state.donate, state.alignment,
                       decisions=decisions, baseline=auto)
    if plan.peak_bytes <= state.plan.peak_bytes:
        scheduled_peak = state.plan.peak_bytes
        state.graph, state.decisions, state.written_graph = written, plan.decisions, None
        state.plan = plan if auto else plan_memory(written, state.inplace, state.donate,
                                                   state.alignment, decisions=decisions)
        state.schedule_info.kept_written(scheduled_peak)
        state.plan.schedule = state.schedule_info
        state.plan.gemm_decisions = state.gemm_decisions
        state.plan.recompute_decisions = state.recompute_decisions
        state.plan.mask_decisions = state.mask_decisions
        _note_backend(state)
        return state
    state.plan.schedule = state.schedule_info
    _note_backend(state)
    state.plan.written_order_live_bytes = plan.live_curve()
    state.plan.written_order_peak_bytes = plan.peak_bytes
    return state


def _note_backend(state):
    """The plan names its backend and says how that backend communicates (its report)."""
    state.plan.budget_search = state.budget_search
    if state.budget_point is not None:
        state.plan.memory_budget = budget = state.options.memory_budget
        state.plan.budget_point = state.budget_point
        if state.plan.peak_bytes - state.plan.input_bytes > budget:  # guarantee 1
            raise RuntimeError(f"the budget search's plan ({state.budget_point.peak} B) and "
                               "the pipeline's disagree: planning is not deterministic")
    state.plan.backend = state.backend
    state.plan.communication_path = state.options.backend.communication_path


def _verify_plan(state):
    verify_plan(state.graph, state.plan)
    return state


def pipeline() -> list[tuple[str, object]]:
    """The default pass order as (name, function) pairs; each maps a `CompileState` to a
    `CompileState` (which carries the options). Autodiff is not listed: it runs while
    tracing, at each `backward()`."""
    return [
        ("verify_graph", _verify_graph),   # SSA and types, as traced
        ("dce", _dce),                     # drop what no output or mutation needs
        ("cse", _cse),                     # one node for identical constants and pure nodes
        ("gemm_accumulate", _gemm_accumulate),  # w -= lr * (a @ b): one gemm into w
        ("regenerate_random", _regenerate_random),  # dropout masks drawn again, if lower
        ("recompute_attention", _recompute_attention),  # softmax(q k^T) again, if lower
        ("recompute", _recompute),         # cheap forward values again in backward, if lower
        ("fuse", _fuse),                   # elementwise trees -> one fused node (state.fuse)
        ("schedule", _schedule),           # a lower-peak order (state.schedule="off": none)
        ("reinplace", _reinplace),         # which outputs take an input's buffer, and why
        ("plan_memory", _plan_memory),     # buffers, live intervals, arena offsets, accounting
        ("verify_plan", _verify_plan),     # independent re-check: no live buffers overlap
    ]


def donated_names(graph, signature, donate, param_names=None) -> tuple[str, ...]:
    """`donate` as graph input names: positions count the function's arguments."""
    param_names = param_names or [f"arg{p}" for p in range(len(signature))]
    input_of = {p: graph.inputs[k].name
                for k, (kind, p) in enumerate(graph_input_positions(signature))
                if kind == "array"}
    names = []
    for d in donate:
        pos = param_names.index(d) if isinstance(d, str) and d in param_names else d
        if isinstance(d, str) and pos == d:
            pos = next((p for p, n in input_of.items() if n == d), None)
        if pos is None or not isinstance(pos, int) or not 0 <= pos < len(signature) \
                or signature[pos][0] == "scalar":
            what = f"names '{d}', which is not an array parameter" if isinstance(d, str) \
                else f"position {d} is not an array argument"
            raise InplaceError(f"donate {what} of {graph.name}")
        if signature[pos][0] == "view":
            others = [param_names[q] for q, e in enumerate(signature)
                      if q != pos and e[0] == "view" and e[3] == signature[pos][3]]
            raise InplaceError(f"donated argument '{param_names[pos]}' shares memory with "
                               f"argument '{others[0]}'")
        names.append(input_of[pos])
    if len(set(names)) != len(names):
        raise InplaceError(f"argument '{next(n for n in names if names.count(n) > 1)}' is "
                           "donated twice")
    # A mutated argument stays in the list: the reinplace pass never reuses its buffer (it must
    # end up holding the new value) and says so in its reasons.
    return tuple(names)


DUMP_EXTRAS = ("all", "llvm", "llvm-opt", "cuda")  # COMPILER_DUMP names beside the passes'


def dump_request(pass_names) -> set[str]:
    """The pass names in COMPILER_DUMP; an unknown name raises, listing the valid ones."""
    dump = {d.strip() for d in os.environ.get("COMPILER_DUMP", "").split(",") if d.strip()}
    unknown = dump - set(pass_names) - set(DUMP_EXTRAS)
    if unknown:
        raise CompilerError(f"COMPILER_DUMP names {', '.join(sorted(unknown))}: valid names are "
                            + ", ".join(list(pass_names) + list(DUMP_EXTRAS)))
    return dump


def dump_text(name: str, state: CompileState) -> str:
    """What COMPILER_DUMP prints after pass `name`: the graph it left, then its analysis (the
    decisions after reinplace; the plan with intervals and offsets after planning)."""
    parts = [f"--- after {name} ---", str(state.graph)]
    if state.plan is not None:
        parts.append(state.plan.report())
    elif state.decisions is not None:
        parts += ["decisions:"] + [
            f"  {d.op:<14} {d.loc:<20} {d.phase:<8} "
            f"{'in place' if d.inplace else 'NOT in place'}: {d.reason}"
            for d in state.decisions]
    return "\n".join(parts)


def run_pipeline(graph, signature, options: Options, param_names=None):
    """Run the passes on `graph` and lower the result for `options.backend`: (the final
    CompileState, the executable). compiler.api wraps them into a Program."""
    state = CompileState(graph, options,
                         donated_names(graph, signature, options.donate, param_names))
    passes = pipeline()
    dump = dump_request([name for name, _ in passes])
    for name, fn in passes:
        try:
            state = fn(state)
        except CompilerError:
            raise
        except Exception as e:  # an internal failure: say which pass
            raise RuntimeError(f"pass '{name}' failed on {graph.name}: {e}") from e
        if name in dump or "all" in dump:
            print(dump_text(name, state))
    sanitize = options.sanitize
    if sanitize is None:
        sanitize = os.environ.get("COMPILER_SANITIZE", "") not in ("", "0")
    return state, options.backend.executable(state.graph, state.plan, sanitize)
