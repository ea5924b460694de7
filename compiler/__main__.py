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
    args = parser.parse_args(argv)
    from . import cli
    if args.command == "demo":
        return cli.demo()
    return cli.plan(args.path)


if __name__ == "__main__":
    sys.exit(main())
