"""The command-line jobs behind `python -m compiler`."""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np

from .api import compile as cc_compile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_example(path: str):
    """Import an example file (a path, or a name under examples/) as a module."""
    if not os.path.exists(path):
        path = os.path.join(_ROOT, "examples", path if path.endswith(".py") else path + ".py")
    name = "example_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _check_against_reference(prog, args) -> bool:
    """Run the planned program in sanitizer mode and compare with the op-by-op reference."""
    from runtime.arena import ArenaExecutable
    from runtime.reference import evaluate
    arrays = [a.copy() for a in args if isinstance(a, np.ndarray)]
    want_outs, want_muts = evaluate(prog.graph, arrays)
    got_outs, got_muts = ArenaExecutable(prog.graph, prog.plan, sanitize=True).run(
        [a.copy() for a in arrays])
    return all(np.array_equal(g, w, equal_nan=True) for g, w in zip(got_outs, want_outs)) and \
        all(np.array_equal(got_muts[k], want_muts[k], equal_nan=True) for k in want_muts)


def demo() -> int:
    """The seed experiments, then the example models: results, graphs and memory plans."""
    seeds = load_example("seeds")
    failures = 0
    for title, fn, args, check in seeds.SEEDS:
        compiled = cc_compile(fn, backend="numpy")
        call_args = tuple(a.copy() for a in args)
        prog = compiled.lower(*call_args)
        out = compiled(*call_args)
        ok = True if check is None else bool(check(out, *args))
        failures += not ok
        print(f"=== seed: {title}: {'ok' if ok else 'MISMATCH'}")
        if len(prog.graph.nodes) <= 16:
            print(prog.graph)
        else:
            print(f"({len(prog.graph.nodes)} nodes)")
        print(prog.plan.summary())
        for d in prog.plan.decisions:
            if d.requested or not d.inplace:
                print(f"  {d.op:<12} {d.loc:<14} {'in place' if d.inplace else 'NOT in place'}"
                      f": {d.reason}")
        print()
    for name in ("mlp", "transformer_block"):
        module = load_example(name)
        prog = module.build_program()
        ok = _check_against_reference(prog, module.example_inputs())
        failures += not ok
        plan = prog.plan
        print(f"=== example {name}: sanitized arena run vs reference: "
              f"{'ok' if ok else 'MISMATCH'}")
        print(plan.summary())
        print(f"  peak / lower bound = {plan.peak_bytes / plan.lower_bound_bytes:.4f}; "
              f"saved by inplace: {plan.no_inplace_peak_bytes - plan.peak_bytes} B; "
              f"naive / peak = {plan.naive_bytes / plan.peak_bytes:.2f}x")
        print()
    total = len(seeds.SEEDS) + 2
    print(f"{total - failures}/{total} checks passed")
    return 1 if failures else 0


def plan(path: str, html: str | None = None) -> int:
    """Print the full memory plan report of an example exposing `build_program()`; with
    `html`, also write the plan explorer page there."""
    module = load_example(path)
    if not hasattr(module, "build_program"):
        print(f"{path} defines no build_program()", file=sys.stderr)
        return 2
    memory_plan = module.build_program().plan
    print(memory_plan.report())
    if html:
        memory_plan.to_html(html)
        print(f"wrote {html}")
    return 0


__all__ = ["demo", "plan", "load_example"]
