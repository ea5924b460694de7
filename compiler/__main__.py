"""Command line: `python -m compiler demo`, `python -m compiler plan examples/mlp.py` and
`python -m compiler cache info|clear` (the cpu backend's compiled-code cache on disk)."""
from __future__ import annotations

import argparse
import sys

from . import cli
from .errors import CompilerError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the seed experiments and example models")
    demo.add_argument("--backend", choices=("numpy", "cpu", "gpu"), default="cpu",
                      help="the backend that runs the programs (default: cpu)")
    plan = sub.add_parser(
        "plan", help="print the memory plan of an example program",
        description="Print the memory plan of a program file. The file must define "
                    "build_program(backend=..., inplace=...) returning a Program (as "
                    "examples/mlp.py does) or a SEEDS list (as examples/seeds.py). A name "
                    "without a path (mlp, seeds) is looked up in the project's examples/.")
    plan.add_argument("path", help="a .py file, or the name of one of the examples")
    plan.add_argument("--inplace", choices=("auto", "off", "strict"), default="auto")
    out = plan.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the plan as JSON")
    out.add_argument("--dot", action="store_true", help="print the graph as Graphviz source")
    plan.add_argument("--html", metavar="OUT.html",
                      help="also write the plan explorer page (one self-contained HTML file)")
    cache = sub.add_parser(
        "cache", help="show or empty the cpu backend's compiled-code cache on disk",
        description="The cpu backend keeps compiled object code in a per-user directory "
                    "(COMPILER_CACHE_DIR, default $XDG_CACHE_HOME or ~/.cache, "
                    "inplace-compiler/cpu; COMPILER_CACHE_DIR= turns it off).")
    cache.add_argument("action", choices=("info", "clear"))
    args = parser.parse_args(argv)
    if args.command == "demo":
        try:
            return cli.demo(backend=args.backend)
        except CompilerError as e:  # e.g. backend="gpu" with no CuPy or no device
            print(f"error: demo --backend {args.backend}: {e.bare_message}", file=sys.stderr)
            return 2
    if args.command == "cache":
        return cli.cache(args.action)
    try:
        return cli.plan(args.path, inplace=args.inplace,
                        fmt="json" if args.json else "dot" if args.dot else "report",
                        html=args.html)
    except cli.UsageError as e:
        plan.error(str(e))


if __name__ == "__main__":
    sys.exit(main())
