"""Issue 9's table: memory beyond the caller's inputs (`peak_bytes - input_bytes`) of the two
training examples, one row per combination of the memory ideas, against the lower bound.

    python benchmarks/memory_ideas.py

Rows: the written order as traced; + scheduling (passes/schedule.py); + GEMM-accumulate
(passes/gemm_accumulate.py) in the written order; both (the default pipeline). Each figure is
`fn.lower()`'s plan (numpy backend, inplace="auto"); "bound" is `lower_bound_bytes -
input_bytes`; "compile s" is the pipeline's wall-clock time after tracing, one run.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compiler.api import _trace  # noqa: E402
from compiler.pipeline import CompileState, donated_names, pipeline  # noqa: E402
from compiler.tracer import user_loc  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
ROWS = {
    "written order": dict(schedule="off", gemm=False),
    "+ schedule": dict(schedule="auto", gemm=False),
    "+ GEMM-accumulate (written order)": dict(schedule="off", gemm=True),
    "+ schedule + GEMM-accumulate (default)": dict(schedule="auto", gemm=True),
}


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plan_of(mod, schedule, gemm):
    graph, sig = _trace(mod.train_step, mod.example_inputs(), user_loc())
    state = CompileState(graph, "numpy", "auto", donated_names(graph, sig, ()), schedule)
    t0 = time.perf_counter()
    for name, run in pipeline():
        if name == "gemm_accumulate" and not gemm:
            continue
        state = run(state)
    return state.plan, time.perf_counter() - t0


def main() -> int:
    print("| program | ideas | peak - inputs (B) | bound - inputs (B) | peak/bound | "
          "compile s |")
    print("|---|---|---|---|---|---|")
    for name in ("mlp", "transformer_block"):
        mod = load(name)
        for row, options in ROWS.items():
            plan, seconds = plan_of(mod, **options)
            extra, bound = plan.peak_bytes - plan.input_bytes, \
                plan.lower_bound_bytes - plan.input_bytes
            print(f"| {name} | {row} | {extra:,} | {bound:,} | "
                  f"{plan.peak_bytes / plan.lower_bound_bytes:.3f} | {seconds:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
