"""Bigger than the examples (issue 27, item 5): examples/gpt.py at GPT-2 small's depth.

`--size gpt2-small` is GPT-2 small's shape (12 layers, width 768, 12 heads, context 256,
batch 4); its plan takes minutes on a shared 2-core machine (the figures are in the README's
"Memory budget" section), so the test plans and runs a narrower model of the same depth,
heads and context (width 48) on one sequence: GPT-2 small's layers with small arrays. (A
batch of 4 only multiplies the arrays: it cost a third of the test's time, in the numpy
backend's call.)"""
import math
import os
import sys

import numpy as np

import compiler as cc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(ROOT, "examples") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "examples"))

import gpt  # noqa: E402

DEEP = gpt.Size(batch=1, context=256, dim=48, heads=12, layers=12)


def test_gpt2_small_is_gpt2_smalls_shape():
    assert gpt.SIZES["gpt2-small"] == gpt.Size(batch=4, context=256, dim=768, heads=12,
                                               layers=12)
    assert gpt.SIZES["small"] == gpt.Size(gpt.BATCH, gpt.CONTEXT, gpt.DIM, gpt.HEADS,
                                          gpt.LAYERS)


def test_a_12_layer_gpt_step_plans_and_trains_in_place():
    """The deep model's step: planned once (`lower()`), AdamW's 8 updates per parameter all
    in place, a first loss of about ln(vocabulary) (GPT-2's 0.02 initialisation gives logits
    near 0), and the parameters updated in the model's own arrays."""
    model, opt, _ = gpt.make_model(size=DEEP)
    params = model.parameters()
    assert len(params) == 2 + 8 * DEEP.layers + 3
    assert tuple(model.wpe.weight.shape) == (DEEP.context, DEEP.dim)
    ids, targets = gpt.example_inputs(DEEP)
    assert ids.shape == targets.shape == (DEEP.batch, DEEP.context)
    step = cc.compile(gpt.train_step_for(model, opt), backend="numpy")
    plan = step.lower(ids, targets).plan
    updates = [d for d in plan.decisions if d.requested and d.phase == "update"]
    assert len(updates) == 8 * len(params) and all(d.inplace for d in updates)
    assert 0 < plan.peak_bytes - plan.input_bytes < plan.no_inplace_peak_bytes
    before = [np.array(p.numpy()) for p in params]
    model.train()
    loss = float(step(ids, targets))
    assert abs(loss - math.log(len(gpt.VOCAB))) < 0.1
    assert all(not np.array_equal(b, p.numpy()) for b, p in zip(before, params))
