"""DESIGN §2's dependency direction, checked on the source: the IR and the op registry import
nothing from passes/ or runtime/; passes/ never import a backend or the tracer's Tensor."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def imports(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_passes_depend_on_the_ir_and_registry_only():
    for path in (ROOT / "passes").glob("*.py"):
        for name in imports(path):
            assert not name.startswith(("runtime", "compiler.tensor", "compiler.tracer",
                                        "compiler.api", "compiler.nn")), (path.name, name)


def test_ir_and_registry_import_no_passes_or_runtime():
    files = [ROOT / "compiler" / "ir.py", ROOT / "compiler" / "layout.py",
             *(ROOT / "compiler" / "ops").glob("*.py")]
    for path in files:
        for name in imports(path):
            assert not name.startswith(("passes", "runtime")), (path.name, name)
