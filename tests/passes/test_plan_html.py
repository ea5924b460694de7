"""The memory-plan explorer page (passes/plan_html.py) and plan.plot(): its content checked as
HTML without a browser, then the page loaded, clicked and filtered in a real headless Chromium
with the network switched off (skipped, with the reason, where no browser is installed)."""
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

import compiler as cc
from compiler.__main__ import main
from compiler.cli import load_example
from passes.plan_html import byte_ticks, human_bytes, phase_runs, reason_kind, render_html
from passes.plan_plot import peak_labels, plan_figure

from browser import Browser, find_browser  # tests/passes/browser.py


def training_step(x, w):
    w.stop_gradient = False
    h = (x @ w).relu_()   # a <b>line</b> & "quotes" <script>alert(1)</script>
    loss = (h * h).mean()
    loss.backward()
    with cc.no_grad():
        w.subtract_(0.1 * w.grad)
    return loss


def small_plan():
    x = np.ones((8, 16), np.float32)
    w = np.full((16, 32), 0.1, np.float32)
    return cc.compile(training_step).lower(x, w).plan


@pytest.fixture(scope="module")
def example_plans():
    return {name: load_example(name).build_program().plan
            for name in ("mlp", "transformer_block")}


class Page(HTMLParser):
    """The elements the tests look at, by their attributes."""

    def __init__(self, text):
        super().__init__()
        self.elements = []  # (tag, attrs)
        self.scripts = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        self.scripts += tag == "script"

    def find(self, tag=None, cls=None, **attrs):
        return [a for t, a in self.elements
                if (tag is None or t == tag)
                and (cls is None or cls in a.get("class", "").split())
                and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def test_page_is_self_contained_and_escapes_the_users_source_text():
    plan = small_plan()
    text = render_html(plan)
    page = Page(text)
    # one script (the page's own), nothing to fetch, a policy that forbids fetching anyway
    assert page.scripts == 1
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", text)
    assert not [a for _, a in page.elements if "src" in a or a.get("rel") == "stylesheet"]
    assert "default-src 'none'" in page.find("meta", http_equiv="Content-Security-Policy")[0][
        "content"]
    # the comment on the relu_ line is shown, escaped, never as markup
    assert "<script>alert" not in text and "<b>line" not in text
    assert "a &lt;b&gt;line&lt;/b&gt; &amp; &quot;quotes&quot; &lt;script&gt;" in text


def test_every_buffer_has_a_rectangle_details_and_links_that_resolve():
    plan = small_plan()
    page = Page(render_html(plan))
    rects = page.find("rect", cls="buf")
    assert sorted(int(r["data-buf"]) for r in rects) == [b.id for b in plan.buffers]
    details = {a["id"] for a in page.find("section", cls="detail")}
    assert details == {f"buf-{b.id}" for b in plan.buffers}
    links = [a["href"] for a in page.find("a") if a.get("href", "").startswith("#buf-")]
    assert links and set(links) <= {"#" + d for d in details}
    # colours: one per phase, the phase of the node that opened the buffer
    for r in rects:
        b = plan.buffers[int(r["data-buf"])]
        assert r["data-phase"] == b.phase
    assert {r["data-phase"] for r in rects} >= {"input", "forward", "backward"}
    colours = {r["data-phase"]: r["fill"] for r in rects}
    assert len(set(colours.values())) == len(colours)
    # hovering: the tooltip names the values, their lines, the interval and the in-place ops
    relu = next(n for n in plan.graph.nodes if n.op == "relu")
    b = plan.buffer_of[relu.out]
    tip = re.search(rf'id="rect-{b.id}"[^>]*><title>(.*?)</title>', render_html(plan), re.S)
    tip = tip.group(1)
    assert f"live [{b.start}, {b.end}]" in tip and f"relu at {relu.loc}" in tip
    assert f"in place: relu_ at {relu.loc}" in tip and "&lt;script&gt;" in tip


def test_rectangles_are_placed_by_program_point_and_arena_offset(example_plans):
    plan = example_plans["transformer_block"]
    page = Page(render_html(plan))
    geom = {int(r["data-buf"]): tuple(float(r[k]) for k in ("x", "y", "width", "height"))
            for r in page.find("rect", cls="buf")}
    cell = geom[next(b.id for b in plan.buffers if b.kind == "input")][2] / (plan.num_points + 2)
    arena = [b for b in plan.buffers if b.kind == "arena"]
    for b in arena:
        x, y, w, h = geom[b.id]
        assert w == pytest.approx(cell * (b.end - b.start + 1), abs=0.02)
        assert x == pytest.approx(geom[0][0] + cell * (b.start + 1), abs=0.02)
    # y: the bottom edge is the offset, the height the size (at least 1.5 px, to be clickable)
    big = max(arena, key=lambda b: b.size)
    scale = geom[big.id][3] / big.size
    zero = geom[big.id][1] + geom[big.id][3] + big.offset * scale
    for b in arena:
        x, y, w, h = geom[b.id]
        assert y + h == pytest.approx(zero - b.offset * scale, abs=0.05)  # 2 decimals
        assert h == pytest.approx(max(b.size * scale, 1.5), abs=0.05)
    # inputs and returned buffers are drawn above the arena's top
    top = min(geom[b.id][1] + geom[b.id][3] for b in arena if b.offset + b.size
              == max(c.offset + c.size for c in arena))
    assert all(geom[b.id][1] + geom[b.id][3] <= top + 0.01
               for b in plan.buffers if b.kind != "arena")


def test_tables_and_listing_link_to_the_right_buffers():
    plan = small_plan()
    page = Page(render_html(plan))
    rows = [a for t, a in page.elements if t == "tr" and a.get("id", "").startswith("dec-")]
    assert len(rows) == len(plan.decisions)
    assert [r["data-inplace"] for r in rows] == ["yes" if d.inplace else "no"
                                                 for d in plan.decisions]
    text = render_html(plan)
    for i, d in enumerate(plan.decisions):
        row = re.search(rf'<tr id="dec-{i}".*?</tr>', text).group(0)
        want = plan.buffer_of[d.node.out].id
        assert f'href="#buf-{want}"' in row and f">{d.op}<" in row and d.loc in row
    listing = re.search(r'<div id="listing">(.*?)</div>\s*</main>', text, re.S).group(1)
    lines = re.findall(r'<div class="ln[^"]*" id="pt-(\d+)">(.*?)</div>', listing)
    assert [int(k) for k, _ in lines] == list(range(len(plan.graph.nodes) + 1))
    for (k, line), node in zip(lines, plan.graph.nodes):
        first = re.search(r'<a href="#buf-(\d+)" data-buf="\d+">(%\w+)</a>', line)
        assert first.group(2) == node.out.ref()
        assert int(first.group(1)) == plan.buffer_of[node.out].id
    relu = next(n for n in plan.graph.nodes if n.op == "relu")
    assert "test_plan_html.py:" in listing and str(relu.loc) in listing


def test_filters_offer_requested_refused_phase_and_each_kind_of_reason(example_plans):
    plan = example_plans["transformer_block"]
    text = render_html(plan)
    page = Page(text)
    kinds = {a["value"] for a in page.find("option") if a.get("value")} - {"yes", "no"}
    assert kinds == {reason_kind(d.reason) for d in plan.decisions}
    assert 3 <= len(kinds) < len(plan.decisions) / 3  # reasons grouped, not listed one by one
    assert reason_kind("input argument 'x' is read later by add at model.py:3") == \
        reason_kind("input argument 'w1' is read later by exp at m.py:12")
    assert reason_kind("input %3 (add at a.py:2) is read later by mul at a.py:4") == \
        reason_kind("input %71 (exp at b.py:9, a view of %70 (sum at b.py:8)) is read later "
                    "by divide at b.py:10")
    assert reason_kind("a later reshape of the output can't be expressed in the input's "
                       "layout").startswith("a later reshape of the output can't")


def test_the_peak_table_lists_what_is_live_there_largest_first(example_plans):
    plan = example_plans["transformer_block"]
    text = render_html(plan)
    table = re.search(r'<table id="peak-table">.*?</table>', text, re.S).group(0)
    shown = [int(i) for i in re.findall(r'<tr><td><a href="#buf-(\d+)"', table)]
    live = [b for b in plan.buffers if b.kind == "input" or b.live_at(plan.peak_point)]
    want = sorted(live, key=lambda b: (-b.size, b.id))
    assert shown == [b.id for b in want[:12]]
    assert f"and {len(live) - 12} smaller" in table
    assert f"{human_bytes(plan.lower_bound_bytes)} are live in {len(live)} buffers" in text
    assert f"{want[0].values[0].ref()} = {want[0].values[0].producer.op}" in table


def test_bytes_over_time_draws_the_written_order_only_when_a_schedule_gave_one():
    plan = small_plan()
    assert 'class="curve written"' not in render_html(plan)
    assert 'class="curve live"' in render_html(plan)
    plan.written_order_live_bytes = [v + 4096 for v in plan.live_curve()]
    text = render_html(plan)
    assert 'class="curve written"' in text and "written order" in text
    assert "scheduled order" in text


def test_each_phase_is_named_once_per_picture_and_shaded_per_run(example_plans):
    # The schedules interleave backward and update nodes: a name per run overlapped.
    for plan in example_plans.values():
        runs = phase_runs(plan)
        assert len(runs) > len({p for p, _, _ in runs})  # interleaved
        text = render_html(plan)
        for svg in ("arena", "curve"):
            part = text[text.index(f'<svg id="{svg}"'):]
            part = part[:part.index("</svg>")]
            names = re.findall(r'<text class="phase" x="([-\d.]+)"[^>]*>(\w+)</text>', part)
            assert sorted(n for _, n in names) == sorted({p for p, _, _ in runs})
            xs = [float(x) for x, _ in names]
            assert xs == sorted(xs) and len(set(xs)) == len(xs)
            titles = re.findall(r'<rect class="shade"[^>]*><title>(\w+) \[(\d+), (\d+)\]'
                                r'</title></rect>', part)
            assert [(p, int(a), int(b)) for p, a, b in titles] == runs


def test_live_curve_is_live_bytes_at_each_point_and_peaks_at_the_lower_bound(example_plans):
    for plan in example_plans.values():
        curve = plan.live_curve()
        assert curve == [plan.live_bytes(t) for t in range(-1, plan.num_points + 1)]
        assert max(curve) == plan.lower_bound_bytes == curve[plan.peak_point + 1]


def test_units_and_ticks_are_human():
    assert human_bytes(512) == "512 B" and human_bytes(3 << 19) == "1.50 MiB"
    ticks, unit, size = byte_ticks(45.2 * (1 << 20))
    assert unit == "MiB" and size == 1 << 20 and ticks[-1] >= 45.2 * (1 << 20)
    assert [t / size for t in ticks] == [0, 10, 20, 30, 40, 50]


def test_cli_writes_the_page(tmp_path, capsys):
    out = tmp_path / "mlp.html"
    assert main(["plan", "mlp", "--json", "--html", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"wrote {out}" in printed.err
    assert json.loads(printed.out)["num_points"] > 0  # stdout stays the JSON alone
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "mlp.py:" in text and 'id="arena"' in text
    with pytest.raises(SystemExit):  # a SEEDS file has many programs: say so, write nothing
        main(["plan", "seeds", "--html", str(tmp_path / "seeds.html")])
    assert "defines SEEDS" in capsys.readouterr().err
    assert not (tmp_path / "seeds.html").exists()


def test_plot_labels_the_five_largest_buffers_live_at_the_peak(example_plans, tmp_path):
    pytest.importorskip("matplotlib")
    plan = example_plans["transformer_block"]
    labels = peak_labels(plan)
    peak = plan.peak_point
    live = [b for b in plan.buffers if b.kind == "input" or b.live_at(peak)]
    assert len(labels) == 5 and all(b in live for b, _ in labels)
    assert min(b.size for b, _ in labels) >= max(b.size for b in live
                                                  if b not in [c for c, _ in labels])
    biggest, text = labels[0]
    assert text.startswith(str(biggest.values[0].producer.loc) + ": ")
    assert biggest.values[0].producer.loc.text.strip() in text  # the line itself
    assert "F.gelu(F.linear(" in text  # the scheduled order peaks in the MLP's backward
    fig = plan_figure(plan)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "bytes live (MiB)"
    written = plan.written_order_live_bytes  # the scheduler moved nodes: both curves drawn
    assert written is not None and max(written) > plan.peak_bytes
    assert ax.get_ylim()[1] == pytest.approx(max(written) / (1 << 20) * 1.08)
    assert any(line.get_label().startswith("written order (peak ") for line in ax.lines)
    notes = {int(t.get_text().split()[0][1:]): t.get_text() for t in ax.texts
             if hasattr(t, "arrow_patch")}  # annotations, not the phase names
    assert sorted(notes) == sorted(b.id for b, _ in labels)
    for b, _ in labels:
        if b.kind == "input":  # (1 MiB ties: a caller's array may be among the five)
            assert f"argument '{b.name}'" in notes[b.id]
            continue
        loc = b.values[0].producer.loc
        assert f"{loc}: {loc.text.strip()[:20]}" in notes[b.id]
    phases = [t.get_text() for t in ax.texts if not hasattr(t, "arrow_patch")]
    assert sorted(phases) == ["backward", "forward", "update"]  # each named once
    path = plan.plot(str(tmp_path / "plan.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


# -- in a real browser -----------------------------------------------------------------------
BROWSER = find_browser()


@pytest.fixture(scope="module")
def browser():
    if BROWSER is None:
        pytest.skip("no Chromium/Chrome installed (apt-get install chromium, or set "
                    "COMPILER_TEST_BROWSER)")
    b = Browser(BROWSER)
    yield b
    b.close()


CENTRE_OF = """(function (el) {
  el.scrollIntoView({block: 'center'});
  var r = el.getBoundingClientRect();
  return [r.x + r.width / 2, r.y + r.height / 2, r.width, r.height];
})(%s)"""


def visible(browser, element_id):
    return browser.eval(f"getComputedStyle(document.getElementById('{element_id}')).display") \
        != "none"


@pytest.mark.parametrize("name", ["mlp", "transformer_block"])
def test_the_page_works_in_a_headless_browser_without_network(browser, example_plans, name,
                                                              tmp_path):
    plan = example_plans[name]
    path = plan.to_html(str(tmp_path / f"{name}.html"))
    browser.open(f"file://{path}", offline=True)
    # nothing was fetched but the page itself, and no script failed
    assert browser.requests() == [f"file://{path}"]
    assert browser.errors() == []
    # the pictures: a laid-out rectangle per buffer, the peak marked in both
    sizes = browser.eval("Array.from(document.querySelectorAll('rect.buf')).map(function (r) "
                         "{ var b = r.getBBox(); return [b.width, b.height]; })")
    assert len(sizes) == len(plan.buffers) and all(w > 0 and h > 0 for w, h in sizes)
    for marker in ("peak-arena", "peak-curve"):
        label = browser.eval(f"document.getElementById('{marker}').textContent")
        assert label.startswith(f"peak at [{plan.peak_point}]")
    # the scheduled order's curve and the written order's
    assert browser.eval("document.querySelectorAll('#curve path.curve').length") == 2
    # the phase names, laid out: none overlaps another (the schedule interleaves phases)
    for svg in ("arena", "curve"):
        boxes = sorted(browser.eval(
            f"Array.from(document.querySelectorAll('#{svg} text.phase')).map(function (t) "
            "{ var b = t.getBBox(); return [b.x, b.x + b.width]; })"))
        assert len(boxes) == len({p for p, _, _ in phase_runs(plan)})
        assert all(right < left for (_, right), (left, _) in zip(boxes, boxes[1:]))
    # the tables
    assert browser.eval("document.querySelectorAll('#decisions tbody tr').length") == \
        len(plan.decisions)
    assert browser.eval("document.querySelectorAll('#listing [id^=pt-]').length") == \
        len(plan.graph.nodes) + 1
    # a real click on the largest computed buffer live at the peak shows its source line
    target = next(b for b, _ in peak_labels(plan, len(plan.buffers)) if b.kind != "input")
    assert not visible(browser, f"buf-{target.id}")
    x, y, w, h = browser.eval(CENTRE_OF % f"document.getElementById('rect-{target.id}')")
    assert w > 2 and h > 2
    assert browser.eval(f"document.elementFromPoint({x}, {y}).id") == f"rect-{target.id}"
    browser.click(x, y)
    assert visible(browser, f"buf-{target.id}")
    details = browser.eval(f"document.getElementById('buf-{target.id}').innerText")
    producer = target.values[0].producer
    line = " ".join(producer.loc.text.split())  # as rendered: runs of blanks collapse
    assert str(producer.loc) in details and line in " ".join(details.split())
    assert f"[{target.start}, {target.end}]" in details
    assert "rect-" + str(target.id) in browser.eval(
        "Array.from(document.querySelectorAll('rect.sel')).map(function (r) "
        "{ return r.id; }).join(' ')")
    # the decisions filter, then a link from a refused decision to its buffer
    refused = [i for i, d in enumerate(plan.decisions) if not d.inplace]
    browser.eval("var s = document.getElementById('f-inplace'); s.value = 'no'; "
                 "s.dispatchEvent(new Event('change'))")
    shown = browser.eval("Array.from(document.querySelectorAll('#decisions tbody tr'))"
                         ".filter(function (r) { return !r.hidden; }).map(function (r) "
                         "{ return r.id; })")
    assert shown == [f"dec-{i}" for i in refused]
    assert browser.eval("document.getElementById('f-count').textContent") == \
        f"{len(refused)} of {len(plan.decisions)}"
    d = plan.decisions[refused[0]]
    want = plan.buffer_of[d.node.out].id
    link = f"document.querySelector('#dec-{refused[0]} a[data-buf]')"
    x, y, w, h = browser.eval(CENTRE_OF % link)
    browser.click(x, y)
    assert visible(browser, f"buf-{want}") and not visible(browser, f"buf-{target.id}")
    assert d.reason in browser.eval(f"document.getElementById('buf-{want}').innerText")
    # a value in the graph listing: the node at the peak
    node = plan.graph.nodes[plan.peak_point]
    x, y, w, h = browser.eval(CENTRE_OF % f"document.querySelector('#pt-{plan.peak_point} "
                                          f"a[data-buf]')")
    browser.click(x, y)
    assert visible(browser, f"buf-{plan.buffer_of[node.out].id}")
    # what makes the peak, largest first
    assert browser.eval("document.querySelector('#peak-table tbody tr a').textContent") == \
        f"#{peak_labels(plan, 1)[0][0].id}"
    assert browser.errors() == []


def test_the_page_json_and_plan_agree(example_plans):
    """The figures on the page are the plan's (the JSON's) figures."""
    plan = example_plans["mlp"]
    data = json.loads(plan.to_json())
    text = render_html(plan)
    for key in ("peak_bytes", "lower_bound_bytes", "naive_bytes", "arena_bytes"):
        assert f"<small>{data[key]} B</small>" in text
