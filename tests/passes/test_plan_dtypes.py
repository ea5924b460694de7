"""The planner's pictures per dtype (issue 26 item 5): the report, the JSON and the HTML page show
each buffer's dtype and the bytes per dtype at the peak; a cast feeding an elementwise consumer
fuses into it (no buffer of its own); the transformer step's bfloat16 AMP (O2) plan against its
float32 plan."""
import json
import re

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.cli import load_example
from passes.plan_html import human_bytes, render_html
from passes.plan_report import buffer_dtype, bytes_by_dtype

BF16 = np.dtype(ml_dtypes.bfloat16)


def mixed_step(x, w):
    w.stop_gradient = False
    h = (x.astype("float32") / 255).cast("bfloat16") @ w.cast("bfloat16")
    loss = F.softmax(h.cast("float32"), axis=-1).square().mean()
    loss.backward()
    with cc.no_grad():
        w.subtract_(0.1 * w.grad)
    return loss


@pytest.fixture(scope="module")
def mixed_plan():
    x = np.arange(64 * 96, dtype=np.uint8).reshape(64, 96)
    w = np.full((96, 128), 0.01, np.float32)
    return cc.compile(mixed_step, backend="numpy").lower(x, w).plan


def test_the_report_shows_each_buffers_dtype(mixed_plan):
    report = mixed_plan.report()
    rows = report.split("buffers:")[1].splitlines()
    assert rows[1].split()[:7] == ["buf", "kind", "offset", "size", "dtype", "live", "values"]
    for b in mixed_plan.buffers:
        (row,) = [r for r in rows[2:] if r.split()[0] == f"#{b.id}"]
        assert row.split()[4] == buffer_dtype(b)
    by_value = {b.values[0].name: buffer_dtype(b) for b in mixed_plan.buffers
                if b.kind == "input"}
    assert by_value == {"x": "u8", "w": "f32"}
    assert {"bf16", "f32"} <= {buffer_dtype(b) for b in mixed_plan.buffers
                               if b.kind == "arena"}
    ws = [b for b in mixed_plan.buffers if b.workspace_of is not None]
    assert ws and all(buffer_dtype(b) == "f32" for b in ws)    # softmax's scratch


def test_the_summary_counts_the_peak_bytes_per_dtype(mixed_plan):
    plan = mixed_plan
    per = bytes_by_dtype(plan)
    assert sum(per.values()) == plan.live_bytes(plan.peak_point) == plan.lower_bound_bytes
    assert set(per) >= {"f32", "bf16", "u8"} and per["u8"] == 64 * 96
    assert list(per.values()) == sorted(per.values(), reverse=True)
    summary = plan.summary()
    assert "at the peak by dtype: " in summary
    for k, v in per.items():
        assert f"{k} {v} B" in summary or f"{k} {v / 1024:.2f} KiB ({v} B)" in summary
    data = json.loads(plan.to_json())
    assert data["peak_bytes_by_dtype"] == per
    assert {b["id"]: b["dtype"] for b in data["buffers"]} == \
        {b.id: buffer_dtype(b) for b in plan.buffers}


def test_the_page_shows_dtypes(mixed_plan):
    text = render_html(mixed_plan)
    table = re.search(r'<table id="peak-table">.*?</table>', text, re.S).group(0)
    assert "<th>dtype</th>" in table
    shown = [int(i) for i in re.findall(r'<tr><td><a href="#buf-(\d+)"', table)]
    assert len(shown) >= 5
    for b in mixed_plan.buffers:
        if b.id in shown:
            assert re.search(rf'data-buf="{b.id}">#{b.id}</a></td><td>{b.kind}</td><td>\w+</td>'
                             rf'<td>{re.escape(buffer_dtype(b))}</td>', table)
        detail = re.search(rf'<section class="detail" id="buf-{b.id}">.*?</section>', text,
                           re.S).group(0)
        assert f"<dt>dtype</dt><dd>{buffer_dtype(b)}</dd>" in detail
    for k, v in bytes_by_dtype(mixed_plan).items():
        assert (f'<div class="fig dtype"><b>{human_bytes(v)}</b><span>{k} at the peak</span>'
                f'<small>{v} B</small></div>') in text


def test_a_cast_feeding_an_elementwise_op_fuses_into_it():
    """`x.astype("float32") / 255` on a uint8 batch is one loop reading the bytes, and so is
    the cast of a matmul's bfloat16 result feeding exp; a cast feeding a matmul keeps its own
    buffer when its operand is read elsewhere too (a matmul is no elementwise consumer)."""
    def f(x, w):
        h = x.astype("float32") / 255
        return (h.cast("bfloat16") @ w).cast("float32").exp(), h.sum()
    x = np.arange(48, dtype=np.uint8).reshape(6, 8)
    w = np.ones((8, 4), BF16)
    prog = cc.compile(f, backend="numpy", fuse=True).lower(x, w)
    fused = [n for n in prog.graph.nodes if n.op == "fused"]
    bodies = sorted([m.op for m in n.attrs["body"].nodes if m.op != "full"] for n in fused)
    assert bodies == [["cast", "divide"], ["cast", "exp"]]
    (mm,) = [n for n in prog.graph.nodes if n.op == "matmul"]
    (cast,) = [n for n in prog.graph.nodes if n.op == "cast"]
    assert mm.inputs[0] is cast.out and cast.inputs[0].producer in fused
    assert cast.out.dtype == BF16
    # no buffer holds the float32 copy of the bytes or of the product
    held = {v.producer.op for b in prog.plan.buffers if b.kind == "arena"
            and b.workspace_of is None for v in b.values}
    assert held == {"fused", "cast", "matmul"}
    got = cc.compile(f, backend="numpy", fuse=True)(x, w)[0]
    want = np.exp((((x.astype(np.float32) / 255).astype(BF16).astype(np.float32)
                    @ w.astype(np.float32)).astype(BF16)).astype(np.float32))
    np.testing.assert_array_equal(got, want)


# -- the transformer step in bfloat16 AMP (O2) ------------------------------------------------
@pytest.fixture(scope="module")
def transformer():
    return load_example("transformer_block")


def _plans(tb, batch):
    amp = tb.build_amp_program(batch=batch).plan
    f32 = cc.compile(tb.train_step, backend="numpy").lower(*tb.example_inputs(batch=batch)).plan
    return amp, f32


def test_the_transformer_steps_bfloat16_amp_peak_is_at_most_57_percent(transformer):
    # At batch 16 the activations dominate: the step's planned peak in bfloat16 AMP is at most
    # 57% of float32's (measured 0.561 with attention and the queries' projection
    # recomputed in both: the queries save 2 MiB in float32, 1 MiB in bfloat16; 0.543
    # without the queries). At the example's batch 8 it is 0.611: the float32 master
    # weights (3 MiB, the caller's arrays) don't halve; the arena does (0.539).
    amp, f32 = _plans(transformer, 16)
    assert amp.peak_bytes <= 0.57 * f32.peak_bytes, (amp.summary(), f32.summary())
    assert amp.arena_bytes <= 0.53 * f32.arena_bytes
    per = bytes_by_dtype(amp)
    params = sum(p.nbytes for p in transformer.example_inputs(batch=16)[2:])
    assert per["bf16"] > per["f32"] >= params
    assert set(bytes_by_dtype(f32)) == {"f32"}
    amp8, f32_8 = _plans(transformer, 8)
    assert amp8.peak_bytes < 0.62 * f32_8.peak_bytes and amp8.arena_bytes <= 0.54 * \
        f32_8.arena_bytes


def test_the_amp_transformer_step_trains(transformer):
    args = transformer.amp_inputs(batch=2, seq=16)
    params = [a.copy() for a in args[2:]]
    step = cc.compile(transformer.amp_train_step, backend="numpy")
    losses = [float(step(*args)) for _ in range(4)]
    assert losses[-1] < losses[0]
    assert all(a.dtype == np.float32 for a in args[2:])          # the masters stay float32
    assert all(not np.array_equal(a, b) for a, b in zip(args[4:8], params[2:6]))
