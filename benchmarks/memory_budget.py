"""Memory to a budget (issue 27): each example's training step compiled with
`memory_budget=N` over a sweep of budgets, one row per budget:

    budget -> planned peak -> measured peak -> extra FLOPs -> step time

    python benchmarks/memory_budget.py [--backend cpu|numpy] [--examples transformer_block,mlp]
                                       [--repeat 20] [--quick]

- budget, planned peak: bytes beyond the caller's arrays (`plan.peak_bytes -
  plan.input_bytes`); the budgets are `plan.budget_curve()`'s (from below the lowest peak the
  search reaches to the peak without recomputation), "-" where no plan fits
  (MemoryBudgetError);
- measured peak: `tracemalloc`'s peak over the first call (the arena and the returned arrays
  are allocated then), on fresh copies of the inputs, which are allocated before it starts;
- step time: the median wall-clock time of `--repeat` calls after that one (one process,
  shared machines vary: compare rows of one run).
Peers (torch.compile's activation_memory_budget, JAX's checkpoint policies) are not measured
here yet.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler as cc  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(mod, backend, budget, repeat):
    """(planned peak, measured peak, extra FLOPs, median step seconds), or None when the
    budget can't be met."""
    fn = cc.compile(mod.train_step, backend=backend, memory_budget=budget)
    args = mod.example_inputs()
    try:
        plan = fn.lower(*args).plan
    except cc.MemoryBudgetError:
        return None
    args = [a.copy() for a in args]
    tracemalloc.start()
    fn(*args)
    measured = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return (plan.peak_bytes - plan.input_bytes, measured, plan.budget_point.extra_flops,
            statistics.median(times))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--examples", default="transformer_block,mlp")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="three budgets per example, 3 calls")
    a = ap.parse_args(argv)
    repeat = 3 if a.quick else a.repeat
    for name in a.examples.split(","):
        mod = load_example(name)
        plan = cc.compile(mod.train_step, backend=a.backend).lower(*mod.example_inputs()).plan
        budgets = [b for b, _, _ in plan.budget_curve()]
        if a.quick:
            budgets = sorted({budgets[0], budgets[len(budgets) // 2], budgets[-1]})
        print(f"{name} ({a.backend}); default plan {plan.peak_bytes - plan.input_bytes} B "
              "beyond the inputs")
        print(f"  {'budget B':>12}  {'planned B':>12}  {'measured B':>12}  "
              f"{'extra FLOPs':>12}  {'step ms':>8}")
        for b in budgets:
            row = measure(mod, a.backend, b, repeat)
            if row is None:
                print(f"  {b:>12}  {'-':>12}  {'-':>12}  {'-':>12}  {'-':>8}  "
                      "(MemoryBudgetError)")
                continue
            planned, measured, flops, t = row
            print(f"  {b:>12}  {planned:>12}  {measured:>12}  {flops:>12}  {t * 1e3:>8.2f}")
        print()


if __name__ == "__main__":
    main()
