"""The module import graph of the product code (compiler/, passes/, runtime/), computed from the
source with `ast`: every import statement, those inside functions included, relative imports
resolved. `tests/test_layering.py` checks it against the floors declared there; run this file
for a report (modules per floor, cycles, imports inside functions, upward edges):

    python -m tests.layering
"""
from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("compiler", "passes", "runtime")

# The floors, lowest first: a module belongs to the floor of the longest prefix that names it
# (a prefix names a module and everything under it). Each module may import only from its own
# floor and the floors below.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("compiler.errors", "compiler.ir", "compiler.layout", "compiler.ops",
              "compiler.signals", "compiler.hooks")),
    ("front", ("compiler.tensor", "compiler.tracer", "compiler.nn", "compiler.optimizer",
               "compiler.creation", "compiler.arguments", "compiler.autodiff")),
    ("passes", ("passes",)),
    ("backends", ("runtime",)),
    ("driver", ("compiler",)),
]

# Imports a function may make: optional dependencies, loaded only when their feature is used.
OPTIONAL = ("cupy", "mpi4py", "matplotlib", "torch", "cuda", "jax", "paddle", "scipy")
# A comment on an import inside a function that says why it cannot sit at the top.
MARKER = "# lazy:"


@dataclass(frozen=True)
class Import:
    source: str         # the importing module
    target: str         # the imported module (internal or external, dotted)
    line: int
    in_function: bool
    marked: bool        # the line carries MARKER


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, pathlib.Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[module_name(path)] = path
    return out


def floor_of(module: str) -> int:
    best, floor = -1, None
    for i, (_, prefixes) in enumerate(FLOORS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, floor = len(p), i
    if floor is None:
        raise KeyError(f"module {module} is on no floor: add it to FLOORS")
    return floor


class _Visitor(ast.NodeVisitor):
    def __init__(self, name: str, is_package: bool, known: set[str], lines: list[str]):
        self.name, self.is_package, self.known, self.lines = name, is_package, known, lines
        self.depth = 0
        self.out: list[Import] = []

    def _function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _add(self, target: str, node):
        marked = MARKER in self.lines[node.lineno - 1]
        self.out.append(Import(self.name, target, node.lineno, self.depth > 0, marked))

    def _ancestor(self, target: str) -> bool:
        return self.name == target or self.name.startswith(target + ".")

    def visit_Import(self, node):
        for alias in node.names:
            # `import a.b.c` runs a, a.b and a.b.c
            parts = alias.name.split(".")
            for i in range(1, len(parts) + 1):
                target = ".".join(parts[:i])
                if not self._ancestor(target):
                    self._add(target, node)

    def visit_ImportFrom(self, node):
        if node.level:
            base = self.name.split(".")
            if not self.is_package:
                base.pop()
            base = base[:len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module
        parts = module.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if not self._ancestor(prefix):
                self._add(prefix, node)
        attrs = False
        for alias in node.names:
            sub = f"{module}.{alias.name}"
            if sub in self.known:
                self._add(sub, node)
            else:
                attrs = True
        # Names read from a module are an edge to it, even to a package's own __init__ from
        # inside the package (they need it run); a submodule alone only needs its ancestors,
        # which Python runs first.
        if attrs:
            self._add(module, node)


def imports() -> list[Import]:
    known = modules()
    out = []
    for name, path in known.items():
        text = path.read_text()
        v = _Visitor(name, path.name == "__init__.py", set(known), text.splitlines())
        v.visit(ast.parse(text))
        out.extend(v.out)
    return out


def internal(imp: Import, known) -> bool:
    return imp.target in known


def graph(imps: list[Import] | None = None) -> dict[str, set[str]]:
    known = modules()
    g = {m: set() for m in known}
    for imp in imps if imps is not None else imports():
        if imp.target in known and imp.target != imp.source:
            g[imp.source].add(imp.target)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def upward(imps: list[Import]) -> list[Import]:
    known = modules()
    return [i for i in imps if i.target in known and floor_of(i.target) > floor_of(i.source)]


def function_imports(imps: list[Import]) -> list[Import]:
    return [i for i in imps if i.in_function]


def unjustified(imps: list[Import]) -> list[Import]:
    """Imports inside functions of neither an optional dependency nor marked with why."""
    return [i for i in function_imports(imps)
            if not i.marked and i.target.split(".")[0] not in OPTIONAL]


def report() -> str:
    imps = imports()
    g = graph(imps)
    lines = []
    by_floor: dict[int, list[str]] = {}
    for m in sorted(g):
        by_floor.setdefault(floor_of(m), []).append(m)
    for i, (name, _) in enumerate(FLOORS):
        ms = by_floor.get(i, [])
        lines.append(f"floor {i} {name}: {len(ms)} modules: {', '.join(ms)}")
    cs = cycles(g)
    lines.append(f"cycles: {len(cs)}")
    lines.extend(f"  {' <-> '.join(c)}" for c in cs)
    fi = function_imports(imps)
    internal_fi = [i for i in fi if i.target in g]
    per_file: dict[str, int] = {}
    for i in fi:
        per_file[i.source] = per_file.get(i.source, 0) + 1
    lines.append(f"imports inside functions: {len(fi)} ({len(internal_fi)} of product modules)")
    lines.extend(f"  {m}: {n}" for m, n in sorted(per_file.items(), key=lambda kv: -kv[1]))
    up = upward(imps)
    lines.append(f"upward edges: {len(up)}")
    lines.extend(f"  {i.source}:{i.line} -> {i.target} ({FLOORS[floor_of(i.source)][0]} -> "
                 f"{FLOORS[floor_of(i.target)][0]}{', in a function' if i.in_function else ''})"
                 for i in up)
    bad = unjustified(imps)
    lines.append(f"imports inside functions, not optional and not marked: {len(bad)}")
    lines.extend(f"  {i.source}:{i.line} -> {i.target}" for i in bad)
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
