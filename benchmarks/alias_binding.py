"""The CPU time of binding arguments that share memory (`compiler.arguments.bind`), and of a
call of a tiny compiled program on them, in several caller layouts.

    python benchmarks/alias_binding.py [--calls 500] [--repeat 15]
    python benchmarks/alias_binding.py --against OLD_arguments.py   # beside another version
                                                                    # (e.g. `git show main:...`)

A call whose arguments share memory takes the general path every time (its signature is a view
signature): `bind` finds the group's storage (`_box`) and binds it in its members' order
(`_in_members_order`). Each repeat times `--calls` binds (or calls) of every contender in turn
(interleaved: load on a shared machine falls on all alike) with `time.process_time`; medians
over the repeats, in microseconds, with the load average before and after.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
from compiler import arguments  # noqa: E402


def _load(path: str):
    spec = importlib.util.spec_from_file_location("compiler._arguments_against", path)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "compiler"
    spec.loader.exec_module(module)
    return module


def _layouts():
    x = np.random.default_rng(0).standard_normal((4, 4))
    big = np.zeros((4, 9))
    strided = big[:, 1::2]
    strided[...] = x
    return {"C": x.copy(), "strided": strided, "F": np.array(x, order="F")}


def _program(a, e):
    a.add_(1.0)
    return e * 2.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--against", help="another compiler/arguments.py to bind with, beside")
    opts = ap.parse_args()
    binders = {"bind": arguments.bind}
    if opts.against:
        binders["bind (--against)"] = _load(opts.against).bind
    layouts = _layouts()
    fn = cc.compile(_program)
    work = {}
    for kind, s in layouts.items():
        args = (s[0:3], s[1:4])
        for name, bind in binders.items():
            work[f"{name}, overlapping rows, {kind}"] = \
                (lambda bind=bind, args=args: bind(args, ["a", "e"]))
        work[f"call (cpu), overlapping rows, {kind}"] = (lambda args=args: fn(*args))
    times = {k: [] for k in work}
    print(f"load average before: {os.getloadavg()}")
    for _ in range(opts.repeat):
        for name, run in work.items():
            t0 = time.process_time()
            for _ in range(opts.calls):
                run()
            times[name].append((time.process_time() - t0) / opts.calls)
    for name, ts in times.items():
        print(f"{name:45s} {statistics.median(ts) * 1e6:9.1f} us CPU (median of {opts.repeat})")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
