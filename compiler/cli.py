"""The command-line jobs behind `python -m compiler`."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
import time
import warnings

import numpy as np

from runtime.arena import ArenaExecutable
from runtime.cpu import disk_cache
from runtime.reference import evaluate

from .api import compile as cc_compile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class UsageError(Exception):
    """A command line that can't be run: the message says what to pass instead."""


def resolve_example(path: str) -> str:
    """A path as given (relative to the working directory), else the name of an example under
    the project's examples/ (`mlp`, `seeds.py`)."""
    if os.path.isfile(path):
        return os.path.abspath(path)
    name = os.path.basename(path if path.endswith(".py") else path + ".py")
    candidate = os.path.join(_ROOT, "examples", name)
    if os.sep not in path and os.path.isfile(candidate):
        return candidate
    examples = sorted(f[:-3] for f in os.listdir(os.path.join(_ROOT, "examples"))
                      if f.endswith(".py") and not f.startswith("test_"))
    raise UsageError(f"no such file: {path} (examples: {', '.join(examples)})")


def _defines(path: str, *names: str) -> str | None:
    """Which of `names` the file defines at its top level, read without running it."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read(), path)
    except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{path} is not a Python program: {e}") from None
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return next((n for n in names if n in found), None)


def load_example(path: str):
    """Import an example file (a path, or a name under examples/) as a module."""
    path = resolve_example(path)
    name = "example_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _check_against_reference(prog, args) -> bool:
    """Run the planned program in sanitizer mode and compare with the op-by-op reference."""
    # the arrays read as state (a layer's parameters, an optimizer's moments) are the graph's
    # last inputs
    arrays = [a.copy() for a in args if isinstance(a, np.ndarray)] + \
        [a.copy() for a in prog.state_arrays]
    want_outs, want_muts = evaluate(prog.graph, arrays)
    got_outs, got_muts = ArenaExecutable(prog.graph, prog.plan, sanitize=True).run(
        [a.copy() for a in arrays])
    return all(np.array_equal(g, w, equal_nan=True) for g, w in zip(got_outs, want_outs)) and \
        all(np.array_equal(got_muts[k], want_muts[k], equal_nan=True) for k in want_muts)


def _check_backend(prog, args) -> bool:
    """The program's results on its backend against the op-by-op reference (within 1e-4)."""
    arrays = [a.copy() for a in args if isinstance(a, np.ndarray)] + \
        [a.copy() for a in prog.state_arrays]   # (prog() appends the state arrays itself)
    want_outs, _ = evaluate(prog.graph, arrays)
    got = prog(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    got = got if isinstance(got, (tuple, list)) else (got,)
    flat = [g for g in got if isinstance(g, np.ndarray)]
    return all(np.allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
               for g, w in zip(flat, want_outs))


def _status(results) -> str:
    if not results:
        return "UNCHECKED"
    failed = [what for what, ok in results if not ok]
    if failed:
        return "MISMATCH (" + ", ".join(failed) + ")"
    return "ok (" + ", ".join(what for what, _ in results) + " checked)"


def _table(rows) -> str:
    """The demo's summary: one row per program (issue 10)."""
    head = ("program", "nodes", "in place", "peak B", "lower bound B", "no-inplace B",
            "naive B", "checked", "ms/call")
    cells = [head] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                       enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _row(name, prog, checked, seconds):
    plan = prog.plan
    taken = sum(d.inplace for d in plan.decisions)
    return (name, len(prog.graph.nodes), f"{taken}/{len(plan.decisions)}", plan.peak_bytes,
            plan.lower_bound_bytes, plan.no_inplace_peak_bytes, plan.naive_bytes, checked,
            f"{seconds * 1e3:.1f}")


def _time_call(prog, args) -> float:
    arrays = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    start = time.perf_counter()
    prog(*arrays)
    return time.perf_counter() - start


def demo(seeds=None, examples=("mlp", "transformer_block", "cnn", "gpt"),
         backend: str = "cpu") -> int:
    """The seed experiments, then the example models: results, graphs and memory plans, and
    what was checked. Counts only the checks it ran; an experiment without a check is named
    as unchecked, never counted as passed. Returns 1 when a check failed. With another
    `backend`, the programs run there (the examples' results are compared with the reference
    within 1e-4); a backend that can't run here raises its `CompilerError` at the first call."""
    if seeds is None:
        module = load_example("seeds")
        seeds, plan_checks = module.SEEDS, getattr(module, "PLAN_CHECKS", {})
    else:
        plan_checks = {}
    passed, failed, unchecked, rows = 0, 0, [], []
    for title, fn, args, check in seeds:
        compiled = cc_compile(fn, backend=backend)
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
        rows.append(_row(title[:40], prog, "yes" if results and all(ok for _, ok in results)
                         else "NO" if results else "-", _time_call(prog, args)))
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
        print(f"... compiling and running example {name}", file=sys.stderr, flush=True)
        module = load_example(name)
        prog = module.build_program(backend=backend)
        ok = _check_against_reference(prog, module.example_inputs()) \
            if prog.options.backend.is_reference else _check_backend(prog, module.example_inputs())
        rows.append(_row(name, prog, "yes" if ok else "NO",
                         _time_call(prog, module.example_inputs())))
        passed, failed = passed + ok, failed + (not ok)
        plan = prog.plan
        print(f"=== example {name}: sanitized arena run vs reference: "
              f"{'ok' if ok else 'MISMATCH'}")
        print(plan.summary())
        print(f"  peak / lower bound = {plan.peak_bytes / plan.lower_bound_bytes:.4f}; "
              f"saved by inplace: {plan.no_inplace_peak_bytes - plan.peak_bytes} B; "
              f"naive / peak = {plan.naive_bytes / plan.peak_bytes:.2f}x")
        print()
    print(_table(rows))
    print()
    print(f"{passed}/{passed + failed} checks passed")
    if unchecked:
        print(f"{len(unchecked)} experiment(s) ran without a check: " + "; ".join(unchecked))
    else:
        print("every experiment was checked")
    return 1 if failed else 0


def plan(path: str, inplace: str = "auto", fmt: str = "report", html: str | None = None) -> int:
    """Print the memory plan of a file defining `build_program()` (or a SEEDS list): the
    report, its JSON (`fmt="json"`) or the graph as Graphviz source (`fmt="dot"`); with
    `html`, also write the plan explorer page of its program there."""
    path = resolve_example(path)
    kind = _defines(path, "build_program", "SEEDS")
    if kind is None:  # checked before the file's top level runs
        raise UsageError(f"{path} defines neither build_program(backend=..., inplace=...) "
                         "nor SEEDS: nothing to plan")
    if html and kind != "build_program":
        raise UsageError(f"--html writes the page of one program; {path} defines SEEDS")
    module = load_example(path)
    if kind == "build_program":
        programs = [("", module.build_program(inplace=inplace))]
        if html:
            programs[0][1].plan.to_html(html)
            print(f"wrote {html}", file=sys.stderr)
    else:
        programs = [(title, cc_compile(fn, inplace=inplace).lower(*args))
                    for title, fn, args, _ in module.SEEDS]
    if fmt == "json":  # one document: the plan, or a list of {title, plan} for seeds
        plans = [json.loads(prog.plan.to_json()) for _, prog in programs]
        print(json.dumps(plans[0] if kind == "build_program" else
                         [{"title": t, "plan": p} for (t, _), p in zip(programs, plans)],
                         indent=1))
        return 0
    for title, prog in programs:
        if title:
            print(f"=== {title}")
        if fmt == "dot":
            print(prog.graph.to_dot(prog.plan))
        else:
            print(prog.plan.report())
            print()
    return 0


__all__ = ["demo", "plan", "load_example", "resolve_example", "UsageError"]


def cache(action: str) -> int:
    """`python -m compiler cache info|clear`. `clear` removes only what the cache wrote; a
    refused directory (a symlink, another user's, writable by others) is not touched: exit 1."""
    with warnings.catch_warnings():  # the refusal is printed below, once
        warnings.simplefilter("ignore", RuntimeWarning)
        info = disk_cache.info()
    if action == "clear":
        if disk_cache.cache_dir() is None:
            print("the disk cache is off (COMPILER_CACHE_DIR is empty): nothing to clear")
            return 0
        if info["status"] != "in use":
            print(f"{info['directory']}: {info['status']}; nothing removed")
            return 1
        n = disk_cache.clear()
        others = info["other files"]
        print(f"removed {n} entries from {disk_cache.cache_dir()}"
              + (f" ({others} other files left alone: the cache did not write them)"
                 if others else ""))
        return 0
    print(f"directory: {info['directory']}\nstatus: {info['status']}\n"
          f"entries: {info['entries']} ({info['bytes']} bytes; at most {info['max_bytes']})"
          + (f"\nother files: {info['other files']} (not the cache's; clear leaves them)"
             if info["other files"] else ""))
    return 0
