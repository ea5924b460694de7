"""Regenerate what README.md shows of real runs: the demo table, and the plan explorer's
screenshot with the address it was taken at.

The README's tour shows the table between the markers below; this script replaces what is
between them with the table the demo prints now (times per call vary by machine and run). The
"Seeing a plan" section shows examples/plan_explorer.png: the transformer step's page with the
largest computed buffer live at the peak selected, taken by headless Chromium at `#buf-N`;
the script takes it again and writes that N into the section.
Run from the repository root: `python examples/update_readme.py [table] [screenshot]` (both
when none is named).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
BEGIN, END = "<!-- demo table: examples/update_readme.py -->", "<!-- end of demo table -->"
SCREENSHOT = os.path.join(ROOT, "examples", "plan_explorer.png")
WINDOW = (1440, 1000)
SECTION = "## Seeing a plan"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def demo_table() -> str:
    run = subprocess.run([sys.executable, "-m", "compiler", "demo"], capture_output=True,
                         text=True, cwd=ROOT, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    lines = run.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("program "))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return "\n".join(lines[start:end] + [""] + lines[end + 1:])


def update(path=README) -> str:
    text = open(path).read()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    table = demo_table()
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n```text\n{table.rstrip()}\n```\n{END}{tail}")
    return table


def shown_buffer(plan):
    """The buffer the screenshot selects: the largest computed one live at the peak (the
    lowest id among equals)."""
    live = [b for b in plan.buffers if b.kind != "input" and b.live_at(plan.peak_point)]
    return min(live, key=lambda b: (-b.size, b.id))


def screenshot(png=SCREENSHOT, readme=README, browser=None) -> int:
    """Take the plan explorer's picture of the transformer step again and write its address
    into the README's section; returns the selected buffer's id."""
    sys.path.insert(0, ROOT)
    from compiler.cli import load_example
    browser = browser or os.environ.get("COMPILER_TEST_BROWSER") or next(
        (p for p in map(shutil.which, BROWSERS) if p), None)
    if browser is None:
        raise SystemExit("no Chromium/Chrome found: install chromium or set "
                         "COMPILER_TEST_BROWSER")
    plan = load_example("transformer_block").build_program().plan
    target = shown_buffer(plan)
    with tempfile.TemporaryDirectory() as tmp:
        page = plan.to_html(os.path.join(tmp, "plan.html"))
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--user-data-dir={os.path.join(tmp, 'profile')}",
                        f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={png}",
                        f"file://{page}#buf-{target.id}"],
                       check=True, capture_output=True, timeout=120)
    try:  # 256 colours: a third of the bytes in the repository, the picture unchanged to see
        from PIL import Image
        Image.open(png).convert("RGB").quantize(256).save(png, optimize=True)
    except ImportError:  # Pillow comes with matplotlib (the `plot` extra)
        pass
    text = open(readme).read()
    at = text.index(SECTION)
    end = text.find("\n## ", at + len(SECTION))
    end = len(text) if end < 0 else end
    section, n = re.subn(r"plan\.html#buf-\d+", f"plan.html#buf-{target.id}", text[at:end])
    if n != 1:
        raise SystemExit(f"README.md's {SECTION!r} section names the address {n} times, not once")
    with open(readme, "w") as f:
        f.write(text[:at] + section + text[end:])
    return target.id


if __name__ == "__main__":
    what = sys.argv[1:] or ["table", "screenshot"]
    unknown = set(what) - {"table", "screenshot"}
    if unknown:
        raise SystemExit(f"usage: {sys.argv[0]} [table] [screenshot] (not {' '.join(unknown)})")
    if "table" in what:
        print(update())
    if "screenshot" in what:
        print(f"wrote {os.path.relpath(SCREENSHOT, ROOT)}: the page at #buf-{screenshot()}")
