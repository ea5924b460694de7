"""Regenerate the demo table in README.md from a real run of `python -m compiler demo`.

The README's tour shows the table between the markers below; this script replaces what is
between them with the table the demo prints now (times per call vary by machine and run).
Run from the repository root: `python examples/update_readme.py`.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- demo table: examples/update_readme.py -->", "<!-- end of demo table -->"


def demo_table() -> str:
    run = subprocess.run([sys.executable, "-m", "compiler", "demo"], capture_output=True,
                         text=True, cwd=ROOT, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    lines = run.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("program "))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return "\n".join(lines[start:end] + [""] + lines[end + 1:])


def update(path=os.path.join(ROOT, "README.md")) -> str:
    text = open(path).read()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    table = demo_table()
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n```text\n{table.rstrip()}\n```\n{END}{tail}")
    return table


if __name__ == "__main__":
    print(update())
