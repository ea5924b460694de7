"""Render a MemoryPlan as one self-contained HTML page: the memory-plan explorer.

The page holds, with no network access at all (inline CSS, inline JS, SVG drawn here; a
Content-Security-Policy forbids every fetch):
  1. the arena as a picture: x = program point, y = arena offset, one rectangle per buffer
     coloured by the phase that opened it; caller inputs and returned buffers (which live
     outside the arena) are stacked above it; the peak point is marked;
  2. bytes over time (KiB/MiB) with the lower bound and the placed peak, and the written
     order's curve when a scheduler set `plan.written_order_live_bytes`;
  3. the inplace decisions, filterable (requested, in place or refused, phase, kind of reason,
     free text), each row linking to its buffer;
  4. the graph listing with source lines, each value linking to its buffer.
Clicking a buffer (its rectangle or any link to it) shows its details beside the page: values
with their ops, source lines and program points, its live interval and the decisions on its
values. Hovering a rectangle shows the same in a tooltip.

Why so: every user string (source lines can hold `<`, names, reasons) is escaped here, in
Python, once; the script only toggles classes and `hidden`, and never builds markup from data.
The details are plain elements that CSS's `:target` also shows, so links work without script.
"""
from __future__ import annotations

import html
import math
import re

from compiler.ir import UNKNOWN_LOC, format_node

from .plan_report import buffer_dtype, bytes_by_dtype

PHASE_COLORS = {"forward": "#4e79a7", "backward": "#f28e2b", "update": "#59a14f",
                "input": "#a0a0a0"}
PHASE_SHADES = {"forward": "#eef3f9", "backward": "#fdf1e6", "update": "#eef6ec"}

# Geometry of the two pictures (SVG user units = CSS pixels).
_LEFT, _RIGHT, _TOP, _BOTTOM = 78, 16, 24, 34
_WIDTH = 1000
_ARENA_HEIGHT = 380
_CURVE_HEIGHT = 210
_PHASE_CHAR, _PHASE_GAP = 7.0, 8.0  # a phase name's width per character (11 px), the gap
_MIN_RECT_HEIGHT = 1.5  # a 4-byte scalar stays visible and clickable


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def human_bytes(n: float) -> str:
    """`12 B`, `3.5 KiB`, `45.02 MiB`: the unit the page and plot() use."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def byte_unit(top: float) -> tuple[str, int]:
    """The unit a scale up to `top` bytes reads best in: ("MiB", 1 << 20), ..."""
    return next(((u, s) for u, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
                 if top >= s), ("B", 1))


def byte_ticks(top: float, count: int = 5) -> tuple[list[float], str, int]:
    """Round tick values from 0 to >= top in B, KiB or MiB: (ticks in bytes, unit, unit size)."""
    unit, size = byte_unit(top)
    span = max(top / size, 1e-9)
    raw = span / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks = [i * step * size for i in range(int(math.ceil(span / step - 1e-9)) + 1)]
    return ticks, unit, size


def buffer_source(b, comment: bool = True) -> str:
    """Where a buffer's first value comes from: `model.py:12: h = x @ w` or `argument 'x'`
    (a workspace: its node's line)."""
    v = b.values[0] if b.values else b.workspace_of.out
    p = v.producer
    if p is None:
        return f"argument '{v.name}'"
    text = p.loc.text.strip()
    if not comment:
        text = re.split(r"\s+#\s", text)[0]
    return f"{p.loc}: {text}" if text else f"{p.loc} ({p.op})"


def first_value(b) -> str:
    """The value that opened a buffer, as the listing writes it: `%83 = matmul`."""
    if not b.values:
        return b.label
    v = b.values[0]
    return v.ref() if v.producer is None else f"{v.ref()} = {v.producer.op}"


def phase_runs(plan) -> list[tuple[str, int, int]]:
    """(phase, first point, last point) for each run of nodes of one phase; none without the
    graph."""
    phases = [n.phase for n in plan.graph.nodes] if plan.graph is not None else []
    runs, start = [], 0
    for k in range(1, len(phases) + 1):
        if k == len(phases) or phases[k] != phases[start]:
            runs.append((phases[start], start, k - 1))
            start = k
    return runs


PEAK_ROWS = 12  # buffers listed by name under the arena picture; the rest are summed


def reason_kind(reason: str) -> str:
    """A reason with its particulars (values, names, shapes, lines, numbers) removed, so that
    decisions refused for the same rule group together: "input argument 'x' is a caller's
    array that was not donated" -> "input argument … is a caller's array that was not donated"."""
    text = reason
    while True:  # innermost parentheses first: they nest ("(reshape at …, a view of (…))")
        stripped = re.sub(r"\s*\([^()]*\)", "", text)
        if stripped == text:
            break
        text = stripped
    text = re.sub(r"(?<!\w)'[^']*'(?!\w)", "…", text)  # not the ' of can't
    text = re.sub(r"%\w+", "…", text)
    text = re.sub(r"\[[^\]]*\]", "…", text)
    text = re.sub(r"\S+\.py:\d+", "…", text)
    text = re.sub(r"\b\d+(\.\d+)?\b", "N", text)
    text = re.sub(r"\b(by|of|at) (the backward of )?[a-z_0-9]+ at …", r"\1 \2… at …", text)
    text = re.sub(r"(…[ ,]*)+…", "…", text)
    return " ".join(text.split())[:90]


class _Page:
    """The data the page shows, computed once from the plan."""

    def __init__(self, plan):
        self.plan = plan
        self.graph = plan.graph
        self.curve = plan.live_curve()
        self.peak = plan.peak_point
        self.buf_of_ref = {v.ref(): b.id for v, b in plan.buffer_of.items()}
        self.decisions_of: dict[int, list] = {}
        self.decision_buf: list[int | None] = []
        for d in plan.decisions:
            b = plan.buffer_of.get(d.node.out) if d.node is not None else None
            self.decision_buf.append(b.id if b is not None else None)
            if b is not None:
                self.decisions_of.setdefault(b.id, []).append(d)

    # -- x axis shared by both pictures -------------------------------------------------------
    def x(self, t: float) -> float:
        """Left edge of program point t's cell."""
        return _LEFT + (t + 1) * _WIDTH / (self.plan.num_points + 2)

    def x_axis(self, height: float) -> list[str]:
        out = [f'<line class="axis" x1="{_LEFT}" y1="{height}" x2="{_LEFT + _WIDTH}" '
               f'y2="{height}"/>']
        n = self.plan.num_points
        step = next(m * 10 ** e for e in range(12) for m in (1, 2, 5) if n / (m * 10 ** e) <= 20)
        for t in ([-1] if step == 1 else []) + list(range(0, n + 1, step)):
            cx = self.x(t + 0.5)
            label = "entry" if t == -1 else str(t)
            out.append(f'<text class="tick" x="{cx:.1f}" y="{height + 14}" '
                       f'text-anchor="middle">{label}</text>')
        out.append(f'<text class="axlabel" x="{_LEFT + _WIDTH / 2}" y="{height + 30}" '
                   f'text-anchor="middle">program point (node [k] of the listing; the return '
                   f'is {n})</text>')
        return out

    def shading(self, height: float) -> list[str]:
        out, longest = [], {}
        for phase, a, b in phase_runs(self.plan):
            out.append(f'<rect class="shade" x="{self.x(a):.2f}" y="{_TOP}" '
                       f'width="{self.x(b + 1) - self.x(a):.2f}" height="{height - _TOP}" '
                       f'fill="{PHASE_SHADES.get(phase, "#f4f4f4")}"><title>{esc(phase)} '
                       f'[{a}, {b}]</title></rect>')
            if phase not in longest or b - a > longest[phase][1] - longest[phase][0]:
                longest[phase] = (a, b)
        # Each phase named once, centred over its longest run: a schedule interleaves the
        # phases (an update runs right after its gradient), and a name per run overlapped.
        # Left to right, a name that would touch the one before is pushed right past it.
        end = -math.inf
        for phase, (a, b) in sorted(longest.items(), key=lambda item: item[1]):
            width = _PHASE_CHAR * len(phase)
            x = max((self.x(a) + self.x(b + 1) - width) / 2, _LEFT, end + _PHASE_GAP)
            x = min(x, _LEFT + _WIDTH - width)
            end = x + width
            out.append(f'<text class="phase" x="{x:.1f}" y="{_TOP - 6}">{esc(phase)}</text>')
        return out

    def peak_marker(self, height: float, label: str) -> list[str]:
        cx = self.x(self.peak + 0.5)
        return [f'<g class="peak" id="{label}"><line x1="{cx:.1f}" y1="{_TOP}" x2="{cx:.1f}" '
                f'y2="{height}"/><text x="{cx + 4:.1f}" y="{_TOP + 12}">peak at [{self.peak}]'
                f': {esc(human_bytes(self.curve[self.peak + 1]))} live</text></g>']

    def y_axis(self, ticks, unit, size, y_of, title) -> list[str]:
        out = []
        for v in ticks:
            y = y_of(v)
            out.append(f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + _WIDTH}" '
                       f'y2="{y:.1f}"/><text class="tick" x="{_LEFT - 6}" y="{y + 4:.1f}" '
                       f'text-anchor="end">{v / size:g} {unit}</text>')
        mid = (_TOP + y_of(0)) / 2
        out.append(f'<text class="axlabel" transform="translate(14 {mid:.0f}) rotate(-90)" '
                   f'text-anchor="middle">{esc(title)}</text>')
        return out

    # -- 1. the arena picture --------------------------------------------------------------
    def arena_svg(self) -> str:
        plan = self.plan
        # Caller inputs and returned buffers live outside the arena: they are stacked above it,
        # outputs first, so that the arena's own offsets read from zero.
        base = {}
        top = plan.arena_bytes
        bands = []
        for kind in ("output", "input"):
            group = sorted((b for b in plan.buffers if b.kind == kind), key=lambda b: b.id)
            if group:
                bands.append((kind, top, top + sum(b.size for b in group)))
                for b in group:
                    base[b.id] = top
                    top += b.size
        total = max(top, 1)
        height = _TOP + _ARENA_HEIGHT
        scale = _ARENA_HEIGHT / total

        def y_of(v):
            return height - v * scale

        out = [f'<svg id="arena" class="chart" viewBox="0 0 {_LEFT + _WIDTH + _RIGHT} '
               f'{height + _BOTTOM}" role="img" aria-label="arena: buffers over program '
               f'points">']
        out += self.shading(height)
        ticks, unit, size = byte_ticks(total)
        out += self.y_axis([t for t in ticks if t <= total], unit, size, y_of,
                           "arena offset (inputs and outputs above it)")
        for kind, lo, hi in bands:
            y = y_of(lo)
            out.append(f'<line class="band" x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + _WIDTH}" '
                       f'y2="{y:.1f}"/><text class="bandlabel" x="{_LEFT + _WIDTH - 4}" '
                       f'y="{y - 3:.1f}" text-anchor="end">'
                       f'{"returned buffers" if kind == "output" else "caller inputs"} '
                       f'(outside the arena) above</text>')
        for b in plan.buffers:
            lo = b.offset if b.kind == "arena" else base[b.id]
            start, end = (-1, plan.num_points) if b.kind == "input" else (b.start, b.end)
            x0, x1 = self.x(start), self.x(end + 1)
            h = max(b.size * scale, _MIN_RECT_HEIGHT)
            y = y_of(lo) - h
            out.append(f'<a href="#buf-{b.id}" data-buf="{b.id}"><rect class="buf k-{b.kind}" '
                       f'id="rect-{b.id}" data-buf="{b.id}" data-phase="{esc(b.phase)}" '
                       f'x="{x0:.2f}" y="{y:.2f}" width="{x1 - x0:.2f}" height="{h:.2f}" '
                       f'fill="{PHASE_COLORS.get(b.phase, "#888")}">'
                       f'<title>{esc(self.tooltip(b))}</title></rect></a>')
        out += self.peak_marker(height, "peak-arena")
        out += self.x_axis(height)
        out.append("</svg>")
        return "\n".join(out)

    def tooltip(self, b) -> str:
        lines = [f"buffer #{b.id} ({b.kind}{'' if b.offset is None else f' @ {b.offset}'}): "
                 f"{human_bytes(b.size)} {buffer_dtype(b)}, live [{b.start}, {b.end}], "
                 f"{b.phase}"]
        if b.workspace_of is not None:
            lines.append(b.label)
        for v in b.values[:6]:
            lines.append(f"{v.ref()}:{v.type} {self.value_origin(v)}")
        if len(b.values) > 6:
            lines.append(f"... and {len(b.values) - 6} more values")
        taken = [d for d in self.decisions_of.get(b.id, []) if d.inplace]
        for d in taken[:3]:
            lines.append(f"in place: {d.op} at {d.loc} ({d.reason})")
        if len(taken) > 3:
            lines.append(f"... and {len(taken) - 3} more in-place decisions")
        return "\n".join(lines)

    @staticmethod
    def value_origin(v) -> str:
        p = v.producer
        if p is None:
            return f"argument '{v.name}'"
        where = "" if p.loc is UNKNOWN_LOC else f" at {p.loc}"
        text = f": {p.loc.text.strip()}" if p.loc.text.strip() else ""
        return f"{p.op}{where}{text}"

    def peak_html(self) -> str:
        """What makes the peak: the buffers live there, largest first."""
        plan, t = self.plan, self.peak
        live = sorted((b for b in plan.buffers if b.kind == "input" or b.live_at(t)),
                      key=lambda b: (-b.size, b.id))
        total = self.curve[t + 1]

        def counted(b):
            return -(-b.size // plan.alignment) * plan.alignment if b.kind == "arena" else b.size

        rows = [f'<tr><td><a href="#buf-{b.id}" data-buf="{b.id}">#{b.id}</a></td>'
                f'<td>{esc(b.kind)}</td><td>{esc(b.phase)}</td><td>{esc(buffer_dtype(b))}</td>'
                f'<td>{human_bytes(b.size)}</td>'
                f'<td>{100 * counted(b) / total:.1f}%</td><td class="code">'
                f'{esc(first_value(b))}</td><td class="src">{esc(buffer_source(b))}</td></tr>'
                for b in live[:PEAK_ROWS]]
        rest = live[PEAK_ROWS:]
        if rest:
            rows.append(f'<tr><td colspan="4">and {len(rest)} smaller</td>'
                        f'<td>{human_bytes(sum(b.size for b in rest))}</td><td>'
                        f'{100 * sum(counted(b) for b in rest) / total:.1f}%</td>'
                        f'<td colspan="2"></td></tr>')
        return (f'<p>At the peak, point [{t}], {human_bytes(total)} are live in '
                f'{len(live)} buffers:</p><table id="peak-table"><thead><tr><th>buffer</th>'
                f'<th>kind</th><th>phase</th><th>dtype</th><th>size</th><th>share</th>'
                f'<th>first value</th>'
                f'<th>made by</th></tr>'
                f'</thead><tbody>{"".join(rows)}</tbody></table>')

    # -- 2. bytes over time ------------------------------------------------------------------
    def curves(self) -> list[tuple[str, str, list[int]]]:
        """(css class, label, live bytes per point) for each order drawn."""
        written = self.plan.written_order_live_bytes
        if written is None:
            return [("live", "live bytes (program order as written)", self.curve)]
        return [("live", "live bytes (scheduled order)", self.curve),
                ("written", "live bytes (written order)", list(written))]

    def curve_svg(self) -> str:
        plan = self.plan
        curves = self.curves()
        top = max([plan.peak_bytes, plan.lower_bound_bytes] + [max(c) for _, _, c in curves])
        ticks, unit, size = byte_ticks(top * 1.05)
        total = max(ticks[-1], 1)
        height = _TOP + _CURVE_HEIGHT

        def y_of(v):
            return height - v * _CURVE_HEIGHT / total

        legend_rows = (len(curves) + 2 + 3) // 4
        out = [f'<svg id="curve" class="chart" viewBox="0 0 {_LEFT + _WIDTH + _RIGHT} '
               f'{height + _BOTTOM + 6 + 16 * legend_rows}" role="img" '
               f'aria-label="bytes live over program points">']
        out += self.shading(height)
        out += self.y_axis(ticks, unit, size, y_of, "bytes live")
        for cls, label, values in curves:
            d = [f"M{self.x(-1):.2f},{y_of(values[0]):.2f}"]
            for i, v in enumerate(values):  # a step per program point
                d.append(f"V{y_of(v):.2f}H{self.x(i):.2f}")
            out.append(f'<path class="curve {cls}" d="{"".join(d)}"><title>{esc(label)}</title>'
                       f'</path>')
        for cls, label, value in (("bound", "lower bound", plan.lower_bound_bytes),
                                  ("placed", "peak as placed", plan.peak_bytes)):
            y = y_of(value)
            out.append(f'<line class="{cls}" x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + _WIDTH}" '
                       f'y2="{y:.1f}"/>')
        out += self.peak_marker(height, "peak-curve")
        legend = [(cls, label) for cls, label, _ in curves] + [
            ("bound", f"lower bound {human_bytes(plan.lower_bound_bytes)}"),
            ("placed", f"peak as placed {human_bytes(plan.peak_bytes)}")]
        for i, (cls, label) in enumerate(legend):
            lx, ly = _LEFT + 10 + 250 * (i % 4), height + _BOTTOM + 16 + 16 * (i // 4)
            out.append(f'<line class="{cls}" x1="{lx}" y1="{ly - 4}" x2="{lx + 22}" '
                       f'y2="{ly - 4}"/><text class="tick" x="{lx + 26}" y="{ly}">'
                       f'{esc(label)}</text>')
        out.append("</svg>")
        return "\n".join(out)

    # -- memory budget (issue 27): the plans the search made, peak against extra work ----------
    def budget_html(self) -> str:
        """With `memory_budget`: the frontier of the budget search (planned peak beyond the
        inputs against extra FLOPs), the budget as a line, the plan taken marked; else ""."""
        plan = self.plan
        if plan.budget_point is None:
            return ""
        points = plan.budget_search.frontier
        taken, budget = plan.budget_point, plan.memory_budget
        top = max([p.peak for p in points] + [budget]) * 1.05 or 1
        most = max(p.extra_flops for p in points) or 1
        ticks, unit, size = byte_ticks(top)
        total = max(ticks[-1], 1)
        height = _TOP + _CURVE_HEIGHT

        def x_of(f):
            return _LEFT + f * _WIDTH / most

        def y_of(v):
            return height - v * _CURVE_HEIGHT / total

        out = [f'<h2>Memory budget</h2><p class="keys">budget {human_bytes(budget)} beyond '
               f'the caller\'s arrays: the plan taken peaks at {human_bytes(taken.peak)} with '
               f'{taken.extra_flops} extra FLOPs ({esc(taken.how)})</p>',
               f'<svg id="budget" class="chart" viewBox="0 0 {_LEFT + _WIDTH + _RIGHT} '
               f'{height + _BOTTOM}" role="img" aria-label="planned peak against extra work">']
        out += self.y_axis(ticks, unit, size, y_of, "planned peak")
        y = y_of(budget)
        out.append(f'<line class="placed" x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + _WIDTH}" '
                   f'y2="{y:.1f}"><title>budget {budget} B</title></line>')
        d = "".join(f"{'M' if i == 0 else 'L'}{x_of(p.extra_flops):.1f},{y_of(p.peak):.1f}"
                    for i, p in enumerate(points))
        out.append(f'<path class="curve live" d="{d}"/>')
        for p in points:
            what = ", ".join(r.value for r in p.recomputed) or "nothing"
            r = 6 if p is taken else 3
            out.append(f'<circle cx="{x_of(p.extra_flops):.1f}" cy="{y_of(p.peak):.1f}" '
                       f'r="{r}"><title>{p.extra_flops} extra FLOPs, peak {p.peak} B, '
                       f'recomputing {esc(what)}</title></circle>')
        out.append(f'<text class="tick" x="{_LEFT}" y="{height + 28}">extra FLOPs: 0 .. '
                   f'{most}</text></svg>')
        return "\n".join(out)

    # -- 3. decisions ------------------------------------------------------------------------
    def decisions_html(self) -> str:
        kinds = sorted({reason_kind(d.reason) for d in self.plan.decisions})
        options = "".join(f'<option value="{esc(k)}">{esc(k)}</option>' for k in kinds)
        rows = []
        for i, (d, buf) in enumerate(zip(self.plan.decisions, self.decision_buf)):
            value = esc(d.node.out.ref()) if d.node is not None else ""
            point = self.plan.defined.get(d.node.out) if d.node is not None else None
            if point is not None:
                value = f'<a href="#pt-{point}">{value}</a>'
            link = f'<a href="#buf-{buf}" data-buf="{buf}">#{buf}</a>' if buf is not None else ""
            rows.append(
                f'<tr id="dec-{i}" data-requested="{"yes" if d.requested else "no"}" '
                f'data-inplace="{"yes" if d.inplace else "no"}" data-phase="{esc(d.phase)}" '
                f'data-kind="{esc(reason_kind(d.reason))}">'
                f'<td class="code">{esc(d.op)}</td><td>{esc(d.loc)}</td><td>{esc(d.phase)}</td>'
                f'<td>{"yes" if d.requested else "no"}</td>'
                f'<td class="{"yes" if d.inplace else "no"}">'
                f'{"in place" if d.inplace else "refused"}</td>'
                f'<td class="code">{value}</td><td>{link}</td>'
                f'<td>{esc(d.reason)}</td></tr>')
        return f"""<div class="filters" id="decision-filters">
<label>requested <select id="f-requested"><option value="">any</option>
<option value="yes">requested (the _ form)</option><option value="no">not requested</option>
</select></label>
<label>outcome <select id="f-inplace"><option value="">any</option>
<option value="yes">in place</option><option value="no">refused</option></select></label>
<label>phase <select id="f-phase"><option value="">any</option><option>forward</option>
<option>backward</option><option>update</option></select></label>
<label>reason <select id="f-kind"><option value="">any</option>{options}</select></label>
<label>text <input id="f-text" type="search" placeholder="op, line, value, reason"></label>
<span id="f-count">{len(rows)} of {len(rows)}</span></div>
<table id="decisions"><thead><tr><th>op</th><th>where</th><th>phase</th><th>requested</th>
<th>outcome</th><th>value</th><th>buffer</th><th>reason</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>"""

    # -- 4. the graph listing ----------------------------------------------------------------
    def link_refs(self, text: str) -> str:
        """Escape a listing line and make each value reference a link to its buffer."""
        def repl(m):
            buf = self.buf_of_ref.get(m.group(0))
            if buf is None:
                return m.group(0)
            return f'<a href="#buf-{buf}" data-buf="{buf}">{m.group(0)}</a>'
        return re.sub(r"%\w+", repl, esc(text))

    def listing_html(self) -> str:
        g = self.graph
        if g is None:
            return "<p>This plan does not hold its graph (it was built by hand).</p>"
        params = ", ".join(f"{v.ref()}: {v.type}" for v in g.inputs)
        lines = [f'<div class="ln">graph {esc(g.name)}({self.link_refs(params)}) {{</div>']
        phase = "forward"
        for k, n in enumerate(g.nodes):
            if n.phase != phase:
                lines.append(f'<div class="ln cm">  // {esc(n.phase)}</div>')
                phase = n.phase
            loc = "" if n.loc is UNKNOWN_LOC else str(n.loc)
            lines.append(
                f'<div class="ln ph-{esc(n.phase)}" id="pt-{k}"><span class="pt">[{k}]</span> '
                f'{self.link_refs(format_node(n))}<span class="loc">{esc(loc)}</span>'
                f'<span class="src">{esc(n.loc.text.strip())}</span></div>')
        rets = ", ".join(v.ref() for v in g.outputs)
        lines.append(f'<div class="ln" id="pt-{len(g.nodes)}"><span class="pt">'
                     f'[{len(g.nodes)}]</span> return {self.link_refs(rets)}</div>')
        for i, v in g.mutations.items():
            loc = g.mutation_locs.get(i, "")
            lines.append(f'<div class="ln">  mutate {self.link_refs(g.inputs[i].ref())} &lt;- '
                         f'{self.link_refs(v.ref())}<span class="loc">{esc(loc)}</span></div>')
        lines.append('<div class="ln">}</div>')
        return f'<div id="listing">{"".join(lines)}</div>'

    # -- buffer details (shown beside the page) -----------------------------------------------
    def details_html(self) -> str:
        out = []
        for b in self.plan.buffers:
            rows = []
            for v in b.values:
                p = v.producer
                point = self.plan.defined.get(v, -1)
                at = f'<a href="#pt-{point}">[{point}]</a>' if point >= 0 else "[-1] entry"
                what = (f"= {esc(p.op)} · {esc(p.phase)}" if p is not None
                        else f"argument {esc(repr(v.name))}")
                where = "" if p is None or p.loc is UNKNOWN_LOC else esc(p.loc)
                src = esc(p.loc.text.strip()) if p is not None else ""
                rows.append(f'<li><span class="code">{esc(v.ref())}:{esc(v.type)}</span> {what}'
                            f' at {at}<div class="where">{where} <span class="src">{src}'
                            f'</span></div></li>')
            decs = []
            for d in self.decisions_of.get(b.id, []):
                decs.append(f'<li class="{"yes" if d.inplace else "no"}"><span class="code">'
                            f'{esc(d.op)}</span> {esc(d.loc)}: '
                            f'{"in place" if d.inplace else "refused"}: {esc(d.reason)}</li>')
            where = (f"offset {b.offset} ({human_bytes(b.offset)})" if b.kind == "arena"
                     else "outside the arena (a caller's array)" if b.kind == "input"
                     else "outside the arena (allocated per call, returned)")
            live = (f"[{b.start}, {b.end}]" if b.kind != "input"
                    else f"the whole call ([-1, {self.plan.num_points}])")
            out.append(
                f'<section class="detail" id="buf-{b.id}"><h3>buffer #{b.id} '
                f'<span class="swatch" style="background:{PHASE_COLORS.get(b.phase, "#888")}">'
                f'</span> {esc(b.phase)}</h3><dl>'
                f'<dt>kind</dt><dd>{esc(b.kind)}{" " + esc(repr(b.name)) if b.name else ""}</dd>'
                f'<dt>size</dt><dd>{b.size} B ({human_bytes(b.size)})</dd>'
                f'<dt>dtype</dt><dd>{esc(buffer_dtype(b))}</dd>'
                f'<dt>where</dt><dd>{where}</dd><dt>live</dt><dd>{live}</dd></dl>'
                f'<h4>values ({len(b.values)})</h4><ul class="values">{"".join(rows)}</ul>'
                f'<h4>decisions on its values ({len(decs)})</h4>'
                f'<ul class="decs">{"".join(decs) or "<li>none</li>"}</ul></section>')
        return "\n".join(out)

    # -- the page ----------------------------------------------------------------------------
    def figures_html(self) -> str:
        plan = self.plan
        ratio = plan.peak_bytes / plan.lower_bound_bytes if plan.lower_bound_bytes else 1.0
        taken = sum(d.inplace for d in plan.decisions)
        items = [("peak", plan.peak_bytes), ("lower bound", plan.lower_bound_bytes),
                 ("no-inplace peak", plan.no_inplace_peak_bytes), ("naive", plan.naive_bytes),
                 ("arena", plan.arena_bytes), ("inputs", plan.input_bytes),
                 ("outputs", plan.output_bytes)]
        cells = "".join(f'<div class="fig"><b>{human_bytes(v)}</b><span>{esc(k)}</span>'
                        f'<small>{v} B</small></div>' for k, v in items)
        cells += "".join(f'<div class="fig dtype"><b>{human_bytes(v)}</b><span>{esc(k)} at the '
                         f'peak</span><small>{v} B</small></div>'
                         for k, v in bytes_by_dtype(plan).items())
        cells += (f'<div class="fig"><b>{ratio:.3f}</b><span>peak / lower bound</span></div>'
                  f'<div class="fig"><b>{taken} / {len(plan.decisions)}</b>'
                  f'<span>candidates in place</span></div>')
        return f'<div id="figures">{cells}</div>'

    def legend_html(self) -> str:
        return "".join(f'<span class="key"><span class="swatch" style="background:{c}"></span>'
                       f'{p}</span>' for p, c in PHASE_COLORS.items())

    def render(self) -> str:
        plan = self.plan
        legend = plan.LEGEND.format(alignment=plan.alignment, end=plan.num_points)
        title = f"memory plan: {plan.graph_name}"
        return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{_CSS}</style></head>
<body><div id="page"><main>
<h1>{esc(title)} <small>inplace="{esc(plan.inplace)}", {plan.num_points} nodes,
{len(plan.buffers)} buffers, alignment {plan.alignment} B</small></h1>
{self.figures_html()}
<p class="legend">{esc(legend)}</p>
<h2 id="arena-title">Arena over program points</h2>
<p class="keys">{self.legend_html()} <span class="key">outlined: returned buffer</span>
<span class="key">click a buffer for its values, source lines and decisions</span></p>
{self.arena_svg()}
{self.peak_html()}
<h2>Bytes over time</h2>
{self.curve_svg()}
{self.budget_html()}
<h2>Inplace decisions</h2>
{self.decisions_html()}
<h2>Graph</h2>
{self.listing_html()}
</main><aside id="details"><p id="detail-empty">Click a buffer in the picture, or a value
or buffer link, to see what it holds.</p>
{self.details_html()}</aside></div>
<script>{_JS}</script></body></html>
"""


# Nothing may be fetched: no URL at all, only the inline style and script of the page itself.
_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "img-src data:; connect-src 'none'; form-action 'none'")

_CSS = """
body{margin:0;font:13px/1.4 system-ui,sans-serif;color:#222;background:#fff}
#page{display:grid;grid-template-columns:minmax(0,1fr) 430px;gap:16px;padding:12px 16px}
h1{font-size:18px;margin:4px 0 8px}h1 small{font-weight:normal;color:#666;font-size:12px}
h2{font-size:15px;margin:18px 0 6px;border-bottom:1px solid #ddd}
#figures{display:flex;flex-wrap:wrap;gap:6px}
.fig{border:1px solid #ddd;border-radius:4px;padding:4px 8px;min-width:92px}
.fig b{display:block;font-size:14px}.fig span,.fig small{display:block;color:#555}
.fig small{font-size:10px;color:#888}
.legend{white-space:pre-line;color:#555;font-size:12px}
.keys .key{margin-right:12px}.swatch{display:inline-block;width:11px;height:11px;
margin-right:4px;vertical-align:-1px;border-radius:2px}
svg.chart{width:100%;height:auto;display:block;font-size:11px}
.axis{stroke:#444}.grid{stroke:#e4e4e4}.tick{fill:#444}.axlabel{fill:#333;font-size:12px}
.phase{fill:#777;font-size:11px}.band{stroke:#555;stroke-dasharray:2 3}
.bandlabel{fill:#555;font-size:10px}
rect.buf{stroke:#fff;stroke-width:.5;cursor:pointer}rect.buf:hover{stroke:#000;stroke-width:1.5}
rect.k-output{stroke:#222;stroke-width:1.2}rect.buf.sel{stroke:#d00;stroke-width:2.5}
.peak line{stroke:#d62728;stroke-width:1.5;stroke-dasharray:5 3}.peak text{fill:#d62728}
path.curve{fill:none;stroke-width:1.8}path.live{stroke:#1f4e8c}
path.written,line.written{stroke:#8c564b;stroke-dasharray:6 3}
line.live{stroke:#1f4e8c;stroke-width:2}
line.bound{stroke:#2ca02c;stroke-dasharray:3 3;stroke-width:1.5}
line.placed{stroke:#111;stroke-width:1}
.filters{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:6px;align-items:center}
.filters select{max-width:330px}#f-count{color:#555}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #eee;padding:2px 5px;
text-align:left;vertical-align:top}th{background:#f6f6f6}
td.yes,li.yes{color:#1a7f37}td.no,li.no{color:#b35900}.code{font-family:monospace}
#listing{font:12px/1.45 monospace;overflow-x:auto;white-space:pre;border:1px solid #eee;
padding:6px}
.ln .pt{color:#888}.ln .loc{color:#888;margin-left:2em}.ln .src{color:#4a6a2a;margin-left:1em}
.ln.cm{color:#888}.ln.ph-backward{background:#fffaf4}.ln.ph-update{background:#f6fbf4}
.ln:target{background:#ffe9a8}
a{color:#1f5fbf;text-decoration:none}a.sel{background:#ffe2e2;outline:1px solid #d00}
aside{position:sticky;top:0;align-self:start;max-height:100vh;overflow:auto;
border-left:1px solid #ddd;padding-left:12px}
.detail{display:none}.detail.on,.detail:target{display:block}
.detail h3{margin:6px 0}.detail dl{display:grid;grid-template-columns:60px 1fr;margin:0}
.detail dt{color:#666}.detail dd{margin:0}
.detail h4{margin:10px 0 4px}.values{font-size:12px;padding-left:16px;margin:0}
.values li{margin-bottom:3px;overflow-wrap:anywhere}
#peak-table td:not(.src){white-space:nowrap}
.where{color:#666}.src{color:#4a6a2a;font-family:monospace}
.decs{padding-left:16px;margin:0}
"""

# Only toggles classes and `hidden`; never writes markup (all text was escaped in Python).
_JS = """
(function () {
  var current = null;
  function show(id) {
    var d = document.getElementById('buf-' + id);
    if (!d) return;
    if (current) current.classList.remove('on');
    document.querySelectorAll('.sel').forEach(function (e) { e.classList.remove('sel'); });
    d.classList.add('on');
    current = d;
    document.querySelectorAll('[data-buf="' + id + '"]').forEach(function (e) {
      e.classList.add('sel');
    });
    document.getElementById('detail-empty').hidden = true;
  }
  document.addEventListener('click', function (e) {
    var a = e.target.closest('a');
    if (!a) return;
    var href = a.getAttribute('href') || '';
    if (href.indexOf('#buf-') !== 0) return;
    e.preventDefault();  // show the details beside the page instead of jumping to them
    history.replaceState(null, '', href);
    show(href.slice(5));
  });
  if (location.hash.indexOf('#buf-') === 0) show(location.hash.slice(5));

  var rows = Array.prototype.slice.call(document.querySelectorAll('#decisions tbody tr'));
  var f = {requested: 'f-requested', inplace: 'f-inplace', phase: 'f-phase', kind: 'f-kind'};
  function apply() {
    var text = document.getElementById('f-text').value.toLowerCase();
    var shown = 0;
    rows.forEach(function (r) {
      var ok = Object.keys(f).every(function (k) {
        var want = document.getElementById(f[k]).value;
        return !want || r.dataset[k] === want;
      }) && (!text || r.textContent.toLowerCase().indexOf(text) >= 0);
      r.hidden = !ok;
      if (ok) shown++;
    });
    document.getElementById('f-count').textContent = shown + ' of ' + rows.length;
  }
  Object.keys(f).forEach(function (k) {
    document.getElementById(f[k]).addEventListener('change', apply);
  });
  document.getElementById('f-text').addEventListener('input', apply);
})();
"""


def render_html(plan) -> str:
    """The explorer page for `plan`, as a string."""
    return _Page(plan).render()


def write_html(plan, path: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_html(plan))
    return path
