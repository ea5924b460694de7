"""The README's "Testing a pass" code and examples/test_my_pass.py run here (issue 16)."""
import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_testing_a_pass_code_runs():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Testing a pass"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})


def _student_tests():
    spec = importlib.util.spec_from_file_location("test_my_pass",
                                                  ROOT / "examples" / "test_my_pass.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [getattr(module, n) for n in dir(module) if n.startswith("test_")]


@pytest.mark.parametrize("test", _student_tests(), ids=lambda t: t.__name__)
def test_examples_test_my_pass(test):
    test()


def test_unknown_ops_get_clear_errors():
    import compiler as cc
    from compiler import passes
    g = cc.Graph("f")
    x = g.add_input("x", (2,), "float32")
    with pytest.raises(cc.CompilerError, match="unknown op 'expp'"):
        g.op("expp", x)
    g.add_node("expp", [x], {}, (2,), "float32")      # bypassing the registry on purpose
    g.outputs = [g.nodes[-1].out]
    with pytest.raises(passes.PlanError, match="unknown op 'expp'"):
        passes.verify_graph(g)
    with pytest.raises(passes.CompilerError if hasattr(passes, "CompilerError")
                       else cc.CompilerError, match="unknown pass 'reinplce'"):
        passes.run_passes(g, until="reinplce")


def test_every_pass_level_function_and_graph_method_says_what_it_does():
    # issue 24: `passes.dce`, `passes.alias_analysis`, `passes.verify_plan` and
    # `Graph.add_input` had no docstring, so `help()` showed only their signatures
    import inspect

    import compiler as cc
    from compiler import passes
    functions = {n: f for n, f in vars(passes).items()
                 if not n.startswith("_") and inspect.isfunction(f)}
    assert {"dce", "alias_analysis", "verify_plan", "verify_graph", "cse", "liveness",
            "reinplace", "plan_memory", "schedule", "run_passes", "build"} <= set(functions)
    methods = {f"Graph.{n}": f for n, f in vars(cc.Graph).items()
               if not n.startswith("_") and inspect.isfunction(f)}
    assert "Graph.add_input" in methods
    undocumented = [n for n, f in {**functions, **methods}.items()
                    if len((inspect.getdoc(f) or "").split()) < 5]
    assert undocumented == []
