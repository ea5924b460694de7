"""Draw a MemoryPlan as a PNG (matplotlib): bytes live over program points, stacked by buffer
and coloured by phase like the explorer page, phases shaded, the peak marked, and the largest
buffers live at the peak labelled with their source lines."""
from __future__ import annotations

from .plan_html import (PHASE_COLORS, PHASE_SHADES, buffer_source, byte_unit, human_bytes,
                        phase_runs)

LABELLED = 5  # how many of the buffers live at the peak get a label


def peak_labels(plan, count: int = LABELLED) -> list[tuple[object, str]]:
    """The `count` largest buffers live at the peak point, largest first, each with the source
    line that made it: what plot() labels."""
    peak = plan.peak_point
    live = [b for b in plan.buffers if b.kind == "input" or b.live_at(peak)]
    live.sort(key=lambda b: (-b.size, b.id))
    return [(b, buffer_source(b)) for b in live[:count]]


def plot_plan(plan, path: str) -> str:
    fig = plan_figure(plan)  # first: it says what to install when matplotlib is missing
    import matplotlib.pyplot as plt
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plan_figure(plan):
    """The matplotlib Figure that plot() saves."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plan.plot needs matplotlib: pip install "
                          "'inplace-compiler[plot]'") from None
    points = list(range(-1, plan.num_points + 1))
    curve = plan.live_curve()
    unit, scale = byte_unit(max(curve + [plan.peak_bytes]))
    peak = plan.peak_point

    counted = plan.counted_bytes  # the footing of live_bytes and the lower bound

    def live(b, t) -> bool:
        return b.kind == "input" or b.live_at(t)

    order = sorted(plan.buffers, key=lambda b: (b.kind != "input", b.start, b.id))
    series = [[counted(b) / scale if live(b, t) else 0.0 for t in points] for b in order]
    fig, ax = plt.subplots(figsize=(11, 4.8))
    # Step 1: phases shaded behind everything, each named once at the top, over its longest
    # run (a schedule interleaves them: an update runs right after its gradient).
    longest = {}
    for phase, first, last in phase_runs(plan):
        ax.axvspan(first - 0.5, last + 0.5, color=PHASE_SHADES.get(phase, "#f4f4f4"), zorder=0)
        if phase not in longest or last - first > longest[phase][1] - longest[phase][0]:
            longest[phase] = (first, last)
    for phase, (first, last) in longest.items():
        ax.text((first + last) / 2, 1.01, phase, transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=8, color="#555")
    # Step 2: the stack, one band per buffer, coloured by the phase that opened it.
    ax.stackplot(points, series, colors=[PHASE_COLORS.get(b.phase, "#888") for b in order],
                 step="mid", linewidth=0.3, edgecolor="white", zorder=2)
    ax.axhline(plan.lower_bound_bytes / scale, color="#2ca02c", linestyle=":", zorder=3,
               label=f"lower bound {human_bytes(plan.lower_bound_bytes)}")
    ax.axhline(plan.peak_bytes / scale, color="k", linestyle="--", linewidth=0.8, zorder=3,
               label=f"peak as placed {human_bytes(plan.peak_bytes)}")
    ax.axvline(peak, color="#d62728", linestyle="--", linewidth=1, zorder=3,
               label=f"peak point [{peak}]")
    written = plan.written_order_live_bytes
    if written is not None:  # a scheduler reordered the program: the order as written too
        ax.step(points, [v / scale for v in written], where="mid", color="#9467bd",
                linewidth=1.2, zorder=3, label=f"written order (peak "
                f"{human_bytes(plan.written_order_peak_bytes or max(written))})")
    # Step 3: label the largest buffers live at the peak, from their band's middle to a
    # column of labels beside the peak, top-down in the order of their bands (so that neither
    # the labels nor their leader lines cross).
    bottoms, running = {}, 0.0
    for b, s in zip(order, series):
        bottoms[b.id] = running
        running += s[peak + 1]

    def mid(b):
        return bottoms[b.id] + counted(b) / scale / 2

    top = curve[peak + 1] / scale
    right = peak < (plan.num_points / 2)
    labelled = sorted((b for b, _ in peak_labels(plan)), key=lambda b: -mid(b))
    for i, b in enumerate(labelled):
        ty = top * (0.92 - 0.17 * i)
        tx = peak + (0.06 if right else -0.06) * (plan.num_points + 2)
        text = buffer_source(b, comment=False)
        text = text if len(text) <= 60 else text[:57] + "..."
        opener = b.workspace_of or b.values[0].producer
        op = opener.op if opener is not None else "input"
        ax.annotate(f"#{b.id} {human_bytes(b.size)} {op}  {text}", xy=(peak, mid(b)),
                    xytext=(tx, ty), fontsize=7.5, ha="left" if right else "right",
                    va="center", zorder=4,
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="#999", lw=0.5),
                    arrowprops=dict(arrowstyle="-", color="#555", lw=0.6))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in PHASE_COLORS.values()]
    lines, names = ax.get_legend_handles_labels()
    ax.legend(lines + handles, names + list(PHASE_COLORS),
              loc="upper left" if right else "upper right", fontsize=7.5,
              ncol=2, framealpha=0.9)
    ax.set_xlim(-1.5, plan.num_points + 0.5)
    highest = max([top, plan.peak_bytes / scale] + ([max(written) / scale] if written else []))
    ax.set_ylim(0, highest * 1.08)
    ax.set_xlabel("program point (node [k] of the printed graph; -1 = entry)")
    ax.set_ylabel(f"bytes live ({unit})")
    ax.set_title(f"{plan.graph_name}: peak {human_bytes(plan.peak_bytes)}, lower bound "
                 f"{human_bytes(plan.lower_bound_bytes)}, no-inplace peak "
                 f"{human_bytes(plan.no_inplace_peak_bytes)}", fontsize=10, pad=14)
    fig.tight_layout()
    return fig
