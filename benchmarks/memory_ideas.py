"""Issue 9's table: memory beyond the caller's inputs (`peak_bytes - input_bytes`) of the two
training examples, one row per memory idea , against the lower bound.

    python benchmarks/memory_ideas.py

The ideas, each a pass or an op form that the default pipeline uses:
  - in place: the reinplace pass (on in every row; `inplace="auto"`);
  - schedule: passes/schedule.py;
  - GEMM-accumulate: passes/gemm_accumulate.py (a weight update folded into one gemm);
  - compact saved values: gelu and layer_norm as registry ops whose backward keeps only
    their input (gelu) or x, the per-row mean and 1/std and the weight (layer_norm). The rows
    without it trace the examples with the decomposed forms these functions had before
    (`composed_gelu`, `composed_layer_norm` below, patched over `F.gelu`/`F.layer_norm`);
  - recomputation: passes/recompute.py (`recompute="auto"`), with bool masks the backward
    reads kept as bits where that plans lower (`pack_masks`: only fused, so the last row,
    "default, planned for cpu", shows it: the mlp's relu mask).
  - attention recomputation: passes/recompute_attention.py (softmax(q k^T) and p @ v made
    again from q, k, v before their backward readers; `recompute="auto"` too, skipped in the
    rows without it).
The first block adds the ideas one at a time, in pipeline order; the second removes one at a
time from the default pipeline, so "share" (the growth without it) is each idea's share at the
default. Each figure is `fn.lower()`'s plan (numpy backend); "bound" is `lower_bound_bytes -
input_bytes`; "compile s" is the pipeline's wall-clock time after tracing, one run. The
report's recomputation lines for the default pipeline follow the table.
"""
from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler.nn.functional as F  # noqa: E402
from compiler.api import _trace  # noqa: E402
from compiler.options import Options  # noqa: E402
from compiler.pass_pipeline import CompileState, donated_names, pipeline  # noqa: E402
from compiler.tracer import user_loc  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
IDEAS = ("schedule", "gemm", "compact", "recompute", "attention")
NAMES = {"schedule": "schedule", "gemm": "GEMM-accumulate", "compact": "compact saved values",
         "recompute": "recomputation", "attention": "attention recomputation"}


def composed_gelu(x, approximate=False):
    """gelu as primitives (its backward keeps x / 2, erf(x / sqrt 2) + 1, exp(-x^2/2), ...)."""
    if approximate:
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (inner.tanh() + 1.0)
    return x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0)


def composed_layer_norm(x, normalized_shape, weight=None, bias=None, epsilon=1e-5):
    """layer_norm as primitives (its backward keeps the centred and the normalised input)."""
    n = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    axes = list(range(x.ndim - n, x.ndim))
    centered = x - x.mean(axis=axes, keepdim=True)
    var = centered.square().mean(axis=axes, keepdim=True)
    out = centered / (var + epsilon).sqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


@contextlib.contextmanager
def composed_functions():
    saved = F.gelu, F.layer_norm
    F.gelu, F.layer_norm = composed_gelu, composed_layer_norm
    try:
        yield
    finally:
        F.gelu, F.layer_norm = saved


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plan_of(mod, ideas, backend="numpy"):
    with composed_functions() if "compact" not in ideas else contextlib.nullcontext():
        graph, sig = _trace(mod.train_step, mod.example_inputs(), user_loc())
    options = Options.make(backend, schedule="auto" if "schedule" in ideas else "off",
                           recompute="auto" if {"recompute", "attention"} & set(ideas)
                           else "off")
    state = CompileState(graph, options, donated_names(graph, sig, ()))
    t0 = time.perf_counter()
    for name, run in pipeline():
        skip = {"gemm_accumulate": "gemm", "recompute_attention": "attention",
                "recompute": "recompute"}
        if name in skip and skip[name] not in ideas:
            continue
        state = run(state)
    return state.plan, time.perf_counter() - t0


def rows():
    yield "in place, the written order", ()
    for k in range(1, len(IDEAS) + 1):
        yield "+ " + NAMES[IDEAS[k - 1]], IDEAS[:k]
    for idea in IDEAS:
        yield f"default without {NAMES[idea]}", tuple(i for i in IDEAS if i != idea)
    yield "default, planned for cpu (fused)", IDEAS


def main() -> int:
    print("| program | ideas | peak - inputs (B) | bound - inputs (B) | peak/bound | share (B) | "
          "compile s |")
    print("|---|---|---|---|---|---|---|")
    for name in ("mlp", "transformer_block"):
        mod = load(name)
        default = plan_of(mod, IDEAS)[0]
        base = default.peak_bytes - default.input_bytes
        for row, ideas in rows():
            plan, seconds = plan_of(mod, ideas, "cpu" if "cpu" in row else "numpy")
            extra = plan.peak_bytes - plan.input_bytes
            bound = plan.lower_bound_bytes - plan.input_bytes
            share = f"{extra - base:,}" if row.startswith("default without") else ""
            print(f"| {name} | {row} | {extra:,} | {bound:,} | "
                  f"{plan.peak_bytes / plan.lower_bound_bytes:.3f} | {share} | {seconds:.2f} |")
        print()
        print(f"{name}: recomputation decisions of the default pipeline")
        for d in default.recompute_decisions:
            print(f"  {d.text}")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
