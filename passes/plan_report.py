"""The memory plan as text and JSON: `MemoryPlan.summary()`, `.report()` and `.to_json()`
call these (the pictures are passes.plan_html and passes.plan_plot)."""
from __future__ import annotations

import json

from compiler.ir import Value
from compiler.ops.registry import dtype_short, scratch_specs

from .recompute_attention import total_flops

MOVES_SHOWN = 40  # lines of the schedule's moves in report()


def summary(plan) -> str:
    ratio = plan.peak_bytes / plan.lower_bound_bytes if plan.lower_bound_bytes else 1.0
    taken = sum(d.inplace for d in plan.decisions)
    return (f"plan {plan.graph_name}: peak {_fmt(plan.peak_bytes)} | lower bound "
            f"{_fmt(plan.lower_bound_bytes)} (peak/bound {ratio:.3f}) | naive "
            f"{_fmt(plan.naive_bytes)} | no-inplace peak {_fmt(plan.no_inplace_peak_bytes)}"
            f" | arena {_fmt(plan.arena_bytes)}, inputs {_fmt(plan.input_bytes)}, outputs "
            f"{_fmt(plan.output_bytes)} | {taken}/{len(plan.decisions)} candidates in place"
            f" | at the peak by dtype: {by_dtype_text(plan)}")


def buffer_dtype(b) -> str:
    """The dtype a buffer holds, short (`f32`, `bf16`, ...): its values' (several, as an
    inplace op over a same-size value of another dtype can make, joined by "/"), or its
    scratch arrays' for a workspace."""
    if b.workspace_of is not None:
        dtypes = [d for _, d in scratch_specs(b.workspace_of)]
    else:
        dtypes = [v.dtype for v in b.values]
    names = list(dict.fromkeys(dtype_short(d) for d in dtypes))
    return "/".join(names) or "-"


def bytes_by_dtype(plan, t: int | None = None) -> dict[str, int]:
    """The bytes live at program point `t` (default: the peak) per `buffer_dtype`, on the
    footing of the plan's figures (an arena buffer at its aligned size), largest first; they
    sum to `plan.live_bytes(t)`."""
    t = plan.peak_point if t is None else t
    out: dict[str, int] = {}
    for b in plan.buffers:
        if b.kind == "input" or b.live_at(t):
            key = buffer_dtype(b)
            out[key] = out.get(key, 0) + plan.counted_bytes(b)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def by_dtype_text(plan) -> str:
    return ", ".join(f"{k} {_fmt(v)}" for k, v in bytes_by_dtype(plan).items()) or "nothing"


def report(plan) -> str:
    legend = plan.LEGEND.format(alignment=plan.alignment, end=plan.num_points)
    lines = [summary(plan), legend, ""]
    if plan.gemm_decisions:
        lines.append("weight updates (GEMM-accumulate):")
        lines += [f"  {d.text}" for d in plan.gemm_decisions]
        lines.append("")
    if plan.budget_point is not None:
        lines += plan.budget_search.text(plan.budget_point, plan.memory_budget) + [""]
    if plan.recompute_decisions:
        lines.append("recomputation (forward values the backward pass reads):")
        lines += [f"  {d.text}" for d in plan.recompute_decisions]
        taken = [d for d in plan.recompute_decisions if d.recomputed]
        if taken:
            lines.append(f"  in all: {len(taken)} recomputed, {total_flops(taken)} extra "
                         "FLOPs (copies that attention values share made and counted once)")
        lines.append("")
    if plan.mask_decisions:
        lines += ["masks the backward pass reads:"] + [f"  {d.text}"
                                                        for d in plan.mask_decisions] + [""]
    if plan.communication:
        lines += communication_report(plan) + [""]
    if plan.schedule is not None:
        lines.append(plan.schedule.summary(plan.peak_bytes, plan.written_order_peak_bytes))
        lines += [f"  {m.text}" for m in plan.schedule.moves[:MOVES_SHOWN]]
        if len(plan.schedule.moves) > MOVES_SHOWN:
            lines.append(f"  ... and {len(plan.schedule.moves) - MOVES_SHOWN} more "
                         "(plan.schedule.moves, to_json)")
        lines.append("")
    lines.append("decisions:")
    rows = [("op", "where", "phase", "requested", "in place", "reason")]
    for d in plan.decisions:
        rows.append((d.op, d.loc, d.phase, "yes" if d.requested else "no",
                     "yes" if d.inplace else "no", d.reason))
    lines += _table(rows)
    lines += ["", "buffers:"]
    rows = [("buf", "kind", "offset", "size", "dtype", "live", "values")]
    for b in sorted(plan.buffers, key=lambda b: (b.kind != "input", b.start, b.id)):
        rows.append((f"#{b.id}", b.kind, "-" if b.offset is None else str(b.offset),
                     str(b.size), buffer_dtype(b), f"[{b.start}, {b.end}]", b.label))
    lines += _table(rows)
    return "\n".join(lines)


def communication_report(plan) -> list[str]:
    grad = sum(b.gradient_bytes for b in plan.communication)
    lines = [f"communication: {len(plan.communication)} bucket(s) all-reduced (sum over "
             f"the ranks, then / ranks), {plan.communicated_bytes} B per call for {grad} B "
             "of gradients (slots padded to 64 B)"]
    lines += [f"  {b.text}" for b in plan.communication]
    if plan.communication_path:
        lines.append(f"  runs through {plan.communication_path}")
    return lines


def to_json(plan) -> str:
    return json.dumps({
        "graph": plan.graph_name, "alignment": plan.alignment, "inplace": plan.inplace,
        "peak_bytes": plan.peak_bytes, "lower_bound_bytes": plan.lower_bound_bytes,
        "naive_bytes": plan.naive_bytes, "no_inplace_peak_bytes": plan.no_inplace_peak_bytes,
        "arena_bytes": plan.arena_bytes, "input_bytes": plan.input_bytes,
        "output_bytes": plan.output_bytes, "num_points": plan.num_points,
        "peak_bytes_by_dtype": bytes_by_dtype(plan),
        "written_order_peak_bytes": plan.written_order_peak_bytes,
        "schedule": plan.schedule.to_dict() if plan.schedule is not None else None,
        "gemm_decisions": [d.to_dict() for d in plan.gemm_decisions],
        "recompute_decisions": [d.to_dict() for d in plan.recompute_decisions],
        "mask_decisions": [d.to_dict() for d in plan.mask_decisions],
        "memory_budget": plan.memory_budget,
        "budget_point": plan.budget_point.to_dict() if plan.budget_point else None,
        "communication": [b.to_dict() for b in plan.communication],
        "decisions": [d.to_dict() for d in plan.decisions],
        "buffers": [{**b.to_dict(), "dtype": buffer_dtype(b)} for b in plan.buffers],
        "values": [_value_dict(plan, v) for b in plan.buffers for v in b.values],
    }, indent=1)


def _value_dict(plan, v: Value) -> dict:
    p = v.producer
    return {"value": v.ref(), "shape": list(v.shape), "dtype": v.dtype.name,
            "op": p.op if p is not None else "input",
            "point": plan.defined.get(v, -1), "phase": p.phase if p else "forward",
            "loc": str(p.loc) if p else "", "text": p.loc.text.strip() if p else "",
            "buffer": plan.buffer_of[v].id}


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit} ({n} B)"
    return f"{n} B"


def _table(rows) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]
            for r in rows]

