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
              "compiler.signals")),
    ("front", ("compiler.tensor", "compiler.tensor_writeback", "compiler.tensor_methods",
               "compiler.tensor_paddle",
               "compiler.tracer", "compiler.nn", "compiler.optimizer", "compiler.lr",
               "compiler.creation", "compiler.arguments", "compiler.autodiff")),
    ("passes", ("passes",)),
    ("backends", ("runtime",)),
    ("driver", ("compiler",)),
]

# Imports a function may make: optional dependencies, loaded only when their feature is used.
OPTIONAL = ("cupy", "cupy_backends", "cuda", "mpi4py", "matplotlib")
# A comment on an import inside a function that says why it cannot sit at the top.
MARKER = "# lazy:"


@dataclass(frozen=True)
class Import:
    source: str         # the importing module
    target: str         # the imported module (internal or external, dotted)
    line: int
    in_function: bool
    marked: bool        # the line carries MARKER
    implicit: bool      # only as a package above the imported module (Python runs it first)


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

    def _add(self, target: str, node, implicit: bool = False):
        marked = MARKER in self.lines[node.lineno - 1]
        self.out.append(Import(self.name, target, node.lineno, self.depth > 0, marked,
                               implicit))

    def _ancestor(self, target: str) -> bool:
        return self.name == target or self.name.startswith(target + ".")

    def visit_Import(self, node):
        for alias in node.names:
            # `import a.b.c` runs a, a.b and a.b.c
            parts = alias.name.split(".")
            for i in range(1, len(parts) + 1):
                target = ".".join(parts[:i])
                if not self._ancestor(target):
                    self._add(target, node, implicit=i < len(parts))

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
                self._add(prefix, node, implicit=True)
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


def graph(imps: list[Import] | None = None, implicit: bool = True) -> dict[str, set[str]]:
    """Module -> the product modules it imports (with `implicit`, also the packages above them,
    which Python runs first)."""
    known = modules()
    g = {m: set() for m in known}
    for imp in imps if imps is not None else imports():
        if imp.target in known and imp.target != imp.source and (implicit or not imp.implicit):
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
    """Imports of a module on a higher floor. A package run only because a module under it is
    imported (`implicit`) is checked by `implicit_runs` instead."""
    known = modules()
    return [i for i in imps if i.target in known and not i.implicit
            and floor_of(i.target) > floor_of(i.source)]


def inert_packages(imps: list[Import]) -> set[str]:
    """Packages whose `__init__` imports no product module at module level: running one (as
    Python does before any module under it) loads nothing, whatever its floor."""
    known = modules()
    eager = {i.source for i in imps if i.target in known and not i.in_function}
    return {m for m, path in known.items() if path.name == "__init__.py" and m not in eager}


def implicit_runs(imps: list[Import]) -> list[Import]:
    """Packages on a higher floor that an import runs (Python runs a package's `__init__`
    before any module under it) whose `__init__` imports product modules at module level:
    those would load a higher floor."""
    inert = inert_packages(imps)
    return [i for i in imps if i.implicit and i.target in modules() and i.target not in inert
            and floor_of(i.target) > floor_of(i.source)]


def function_imports(imps: list[Import]) -> list[Import]:
    """Imports inside functions, one per statement (the first module it names)."""
    seen, out = set(), []
    for i in imps:
        if i.in_function and (i.source, i.line) not in seen:
            seen.add((i.source, i.line))
            out.append(i)
    return out


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
    cs = cycles(graph(imps, implicit=False))
    lines.append(f"cycles between modules, leaving out the packages' own runs: {len(cs)}")
    lines.extend(f"  {' <-> '.join(c)}" for c in cs)
    fi = function_imports(imps)
    internal_fi = [i for i in fi if i.target.split(".")[0] in PACKAGES]
    per_file: dict[str, int] = {}
    for i in fi:
        per_file[i.source] = per_file.get(i.source, 0) + 1
    lines.append(f"imports inside functions: {len(fi)} statements ({len(internal_fi)} of product "
                 "modules)")
    lines.extend(f"  {m}: {n}" for m, n in sorted(per_file.items(), key=lambda kv: -kv[1]))
    up = upward(imps)
    lines.append(f"upward edges: {len(up)}")
    lines.extend(f"  {i.source}:{i.line} -> {i.target} ({FLOORS[floor_of(i.source)][0]} -> "
                 f"{FLOORS[floor_of(i.target)][0]}{', in a function' if i.in_function else ''})"
                 for i in up)
    runs = implicit_runs(imps)
    lines.append(f"higher packages run eagerly by an import: {len(runs)}")
    lines.extend(f"  {i.source}:{i.line} runs {i.target}" for i in runs)
    bad = unjustified(imps)
    lines.append(f"imports inside functions, not optional and not marked: {len(bad)}")
    lines.extend(f"  {i.source}:{i.line} -> {i.target}" for i in bad)
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
