"""Command line: `python -m compiler demo` and `python -m compiler plan examples/mlp.py`."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the seed experiments and example models")
    plan = sub.add_parser("plan", help="print the memory plan of an example program")
    plan.add_argument("path")
    plan.add_argument("--html", metavar="OUT.html",
                      help="also write the plan explorer page (one self-contained HTML file)")
    args = parser.parse_args(argv)
    from . import cli
    if args.command == "demo":
        return cli.demo()
    return cli.plan(args.path, html=args.html)


if __name__ == "__main__":
    sys.exit(main())
