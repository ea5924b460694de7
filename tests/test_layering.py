"""The floors of the product code, checked on the source and by importing it.

Floors, lowest first (declared as data in `tests/layering.py`, `FLOORS`): core (IR, layout,
op registry, errors) -> front end (Tensor, tracer, nn, optimizer, the trace-time autodiff that
`backward()` calls) -> passes -> lowering and backends (`runtime/`) -> driver (`compile`,
`Program`, the pipeline, CLI, `compiler.passes`, data parallelism). Every import statement,
those inside functions included, goes to its own floor or one below; there are no import
cycles; a function imports only an optional dependency (cupy, mpi4py, matplotlib, ...) or
says why on its line (`# lazy: ...`).

`compiler/` holds both the ground floor and the driver, and Python runs `compiler/__init__.py`
before any module under it: so that file imports nothing at module level and loads each public
name (`cc.compile`, `cc.Tensor`, `cc.passes`, ...) from its module at first use (PEP 562's
module `__getattr__`). Importing the IR, a pass or a backend therefore never runs the driver
(`test_packages_run_before_their_modules_load_no_higher_floor`), which is what made
`import passes` fail on its own: passes/alias -> compiler.ir -> compiler/__init__ -> driver ->
passes/gemm_accumulate -> passes/alias, half initialised. The alternative, the core in its own
package, would have changed every import path that users and tests write, for the same result.
"""
import json
import subprocess
import sys

import pytest

from tests import layering
from tests.layering import ROOT

IMPORTS = layering.imports()
INERT = layering.inert_packages(IMPORTS)  # compiler/__init__ (the lazy names), passes, runtime


def _lines(imps) -> str:
    return "\n".join(f"{i.source}:{i.line} imports {i.target} "
                     f"({layering.FLOORS[layering.floor_of(i.source)][0]} -> "
                     f"{layering.FLOORS[layering.floor_of(i.target)][0]})" for i in imps)


def test_every_module_is_on_a_floor():
    assert {"compiler", "passes", "runtime"} <= INERT
    floors = {m: layering.floor_of(m) for m in layering.modules()}
    assert floors["compiler.ir"] == 0 and floors["compiler.tensor"] == 1
    assert floors["passes.reinplace"] == 2 and floors["runtime.cpu.emitter"] == 3
    assert floors["compiler.api"] == 4 and floors["compiler.autodiff"] == 1


def test_no_module_imports_a_higher_floor():
    up = layering.upward(IMPORTS)
    assert not up, "imports of a higher floor:\n" + _lines(up)


def test_no_import_cycles():
    cycles = layering.cycles(layering.graph(IMPORTS))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_packages_run_before_their_modules_load_no_higher_floor():
    runs = layering.implicit_runs(IMPORTS)
    assert not runs, ("these imports run a package of a higher floor whose __init__ imports "
                      "modules:\n" + _lines(runs))


def test_imports_inside_functions_are_of_optional_dependencies_or_say_why():
    bad = layering.unjustified(IMPORTS)
    assert not bad, ("imports inside functions (move them to the top, or say why on the line "
                     f"with `{layering.MARKER} ...`):\n"
                     + "\n".join(f"{i.source}:{i.line} imports {i.target}" for i in bad))


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    # the checks above are only as good as the graph: pin what it reads
    by = {(i.source, i.target): i for i in IMPORTS}
    assert by[("compiler.ir", "networkx")].in_function          # inside Graph.to_networkx
    assert by[("compiler.ir", "networkx")].marked
    assert by[("compiler.ops.fused", "compiler.ops.elementwise")]  # `from .elementwise ...`
    assert by[("runtime.cpu.index_kernels", "runtime.cpu.loops")]  # `from . import loops`
    assert by[("passes.alias", "compiler")].implicit           # runs compiler/__init__


def test_no_package_binds_a_name_of_its_own_submodule():
    # `passes.reinplace` was both the module and the function; and the import system sets
    # `compiler.pipeline` to the module whenever the module is first imported, so a public
    # name must not be a submodule's
    import ast

    import compiler
    known = layering.modules()
    bad = []
    for package, path in known.items():
        if path.name != "__init__.py":
            continue
        bound = set()
        for node in ast.parse(path.read_text()).body:
            # (`from . import x` binds the submodule x itself)
            if isinstance(node, ast.ImportFrom) and not (node.level and not node.module):
                bound.update(a.asname or a.name for a in node.names)
        if package == "compiler":
            bound |= set(getattr(compiler, "_HOME", ()))
        bad += [f"{package}.{n}" for n in sorted(bound) if f"{package}.{n}" in known]
    assert not bad, f"names that are also submodules: {bad}"


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("module", ["passes", "runtime", "compiler.ir", "passes.reinplace",
                                    "runtime.cpu", "compiler.tensor"])
def test_a_module_imports_alone_in_a_fresh_process(module):
    # the import a user writing a pass test starts with; loads nothing above its floor (but
    # `compiler`'s __init__, which Python runs first and which imports nothing)
    p = _fresh(f"import json, sys, {module}\n"
               "print(json.dumps(sorted(m for m in sys.modules "
               "if m.split('.')[0] in ('compiler', 'passes', 'runtime'))))")
    assert p.returncode == 0, p.stderr
    floor = layering.floor_of(module)
    above = [m for m in json.loads(p.stdout) if m in layering.modules() and m not in INERT
             and layering.floor_of(m) > floor]
    assert not above, f"import {module} loaded {above}"


def test_each_module_alone_loads_only_its_floor_and_below():
    # every module in turn, each after forgetting all product modules (one process: external
    # libraries stay loaded, so this is cheap)
    code = """
import importlib, json, sys
names = json.loads(sys.argv[1])
out = {}
def ours(m):
    return m.split(".")[0] in ("compiler", "passes", "runtime")
for name in names:
    for m in [m for m in sys.modules if ours(m)]:
        del sys.modules[m]
    try:
        importlib.import_module(name)
        out[name] = sorted(m for m in sys.modules if ours(m))
    except Exception as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""
    names = [m for m in layering.modules() if m != "compiler.__main__"]
    p = subprocess.run([sys.executable, "-c", code, json.dumps(names)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    known = layering.modules()
    problems = []
    for name, loaded in json.loads(p.stdout).items():
        if isinstance(loaded, str):
            problems.append(f"import {name} raised {loaded}")
            continue
        above = [m for m in loaded if m in known and m not in INERT
                 and layering.floor_of(m) > layering.floor_of(name)]
        if above:
            problems.append(f"import {name} loaded {', '.join(above)}")
    assert not problems, "\n".join(problems)


def test_the_public_names_resolve_lazily():
    p = _fresh("import sys, compiler as cc\n"
               "assert 'compiler.api' not in sys.modules, 'import compiler ran the driver'\n"
               "missing = [n for n in cc.__all__ if getattr(cc, n, None) is None]\n"
               "assert not missing, missing\n"
               "assert cc.exp is not None and cc.nn.functional.relu is not None\n"
               "assert cc.distributed.mpi is not None and cc.passes.reinplace is not None\n"
               "import compiler.api, passes.reinplace, types\n"
               "assert callable(cc.pipeline) and isinstance(passes.reinplace, types.ModuleType)\n"
               "print(cc.compile.__module__, cc.Tensor.__module__)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["compiler.api", "compiler.tensor"]


def test_no_renderer_imports_another_backend():
    # what cpu and gpu lowering share is in runtime/lowering, so adding a backend never means
    # importing (or editing) another backend's renderer
    renderers = ("runtime.cpu", "runtime.gpu")
    crossing = [i for i in IMPORTS for a in renderers for b in renderers
                if a != b and (i.source == a or i.source.startswith(a + "."))
                and (i.target == b or i.target.startswith(b + "."))]
    assert not crossing, "\n".join(f"{i.source}:{i.line} imports {i.target}" for i in crossing)


def test_pyproject_ships_every_package():
    """A package missing from pyproject's list is absent from a (non-editable) install."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("compiler", "passes", "runtime")
             for p in (ROOT / top).rglob("__init__.py")}
    assert found == listed, (sorted(found - listed), sorted(listed - found))
