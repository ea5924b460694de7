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


def _status(results) -> str:
    if not results:
        return "UNCHECKED"
    failed = [what for what, ok in results if not ok]
    if failed:
        return "MISMATCH (" + ", ".join(failed) + ")"
    return "ok (" + ", ".join(what for what, _ in results) + " checked)"


def demo(seeds=None, examples=("mlp", "transformer_block")) -> int:
    """The seed experiments, then the example models: results, graphs and memory plans, and
    what was checked. Counts only the checks it ran; an experiment without a check is named
    as unchecked, never counted as passed. Returns 1 when a check failed."""
    if seeds is None:
        module = load_example("seeds")
        seeds, plan_checks = module.SEEDS, getattr(module, "PLAN_CHECKS", {})
    else:
        plan_checks = {}
    passed, failed, unchecked = 0, 0, []
    for title, fn, args, check in seeds:
        compiled = cc_compile(fn, backend="numpy")
        call_args = tuple(a.copy() for a in args)
        prog = compiled.lower(*call_args)
        out = compiled(*call_args)
        results = []
        if check is not None:
            results.append(("result", bool(check(out, *args))))
        if fn in plan_checks:
            results.append(("plan", bool(plan_checks[fn](prog.plan))))
        passed += sum(ok for _, ok in results)
        failed += sum(not ok for _, ok in results)
        if not results:
            unchecked.append(title)
        print(f"=== seed: {title}: {_status(results)}")
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
    for name in examples:
        module = load_example(name)
        prog = module.build_program()
        ok = _check_against_reference(prog, module.example_inputs())
        passed, failed = passed + ok, failed + (not ok)
        plan = prog.plan
        print(f"=== example {name}: sanitized arena run vs reference: "
              f"{'ok' if ok else 'MISMATCH'}")
        print(plan.summary())
        print(f"  peak / lower bound = {plan.peak_bytes / plan.lower_bound_bytes:.4f}; "
              f"saved by inplace: {plan.no_inplace_peak_bytes - plan.peak_bytes} B; "
              f"naive / peak = {plan.naive_bytes / plan.peak_bytes:.2f}x")
        print()
    print(f"{passed}/{passed + failed} checks passed")
    if unchecked:
        print(f"{len(unchecked)} experiment(s) ran without a check: " + "; ".join(unchecked))
    else:
        print("every experiment was checked")
    return 1 if failed else 0


def plan(path: str) -> int:
    """Print the full memory plan report of an example exposing `build_program()`."""
    module = load_example(path)
    if not hasattr(module, "build_program"):
        print(f"{path} defines no build_program()", file=sys.stderr)
        return 2
    print(module.build_program().plan.report())
    return 0


__all__ = ["demo", "plan", "load_example"]
