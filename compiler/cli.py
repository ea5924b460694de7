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


def _describe_plan(prog) -> str:
    if prog.plan is None:
        return "(no memory plan: numpy reference execution)"
    return prog.plan.summary()


def demo() -> int:
    seeds = load_example("seeds")
    failures = 0
    for title, fn, args, check in seeds.SEEDS:
        compiled = cc_compile(fn, backend="numpy")
        call_args = tuple(a.copy() for a in args)
        prog = compiled.lower(*call_args)
        out = compiled(*call_args)
        ok = True if check is None else bool(check(out, *args))
        failures += not ok
        print(f"=== {title}: {'ok' if ok else 'MISMATCH'}")
        if prog.graph.nodes and len(prog.graph.nodes) <= 24:
            print(prog.graph)
        else:
            print(f"({len(prog.graph.nodes)} nodes)")
        print(_describe_plan(prog))
        print()
    print(f"{len(seeds.SEEDS) - failures}/{len(seeds.SEEDS)} seed experiments match numpy")
    return 1 if failures else 0


def plan(path: str) -> int:
    module = load_example(path)
    prog = module.build_program() if hasattr(module, "build_program") else None
    if prog is None:
        print(f"{path} defines no build_program()", file=sys.stderr)
        return 2
    print(prog.plan.report() if prog.plan is not None else prog.graph)
    return 0


__all__ = ["demo", "plan", "load_example", "np"]
