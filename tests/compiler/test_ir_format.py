"""The printed IR is the oracle other tests pin (STYLE §5): pin its exact format here."""
import inspect
import re

import numpy as np

import compiler as cc
import compiler.nn.functional as F

from tests.backends import numpy_compile


def program(x, w):
    h = F.relu_(x @ w)
    h[0] = 1.0
    x.scale_(2.0)
    return h.sum(axis=1, keepdim=True), h.t()


def _trace():
    return cc.trace(program, np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))


def test_printed_graph():
    first = inspect.getsourcelines(program)[1]  # the `def` line; the body follows it
    l1, l2, l3, l4 = (f"test_ir_format.py:{first + k}" for k in (1, 2, 3, 4))
    expected = f"""\
graph program(x: f32[2,3], w: f32[3,4]) {{
  [0] %2:f32[2,4] = matmul %x, %w                       # {l1}
  [1] %3:f32[2,4] = relu %2  (inplace of %2)            # {l1}
  [2] %4:f32[4] = slice %3 {{index=[[i,0],[s,None,None,None]]}}  # {l2}
  [3] %5:f32[4] = fill %4 {{value=1.0}}  (inplace of %4)  # {l2}
  [4] %6:f32[2,4] = slice_scatter %3, %5 {{index=[[i,0],[s,None,None,None]]}}  (inplace of %3)  # {l2}
  [5] %7:f32[2,3] = scale %x {{scale=2.0 bias=0.0 bias_after_scale=True}}  (inplace of %x)  # {l3}
  [6] %8:f32[2,1] = sum %6 {{axis=[1] keepdim=True}}      # {l4}
  [7] %9:f32[4,2] = transpose %6 {{perm=[1,0]}}           # {l4}
  [8] return %8, %9
  mutate %x <- %7  # {l3}
}}"""
    assert str(_trace()) == expected


def test_printed_phases():
    def step(w, x):
        w.stop_gradient = False
        loss = (w * x).sum()
        loss.backward()
        with cc.no_grad():
            w.subtract_(w.grad * 0.1)
        return loss

    text = str(cc.trace(step, np.ones(3), np.ones(3)))
    lines = text.splitlines()
    assert lines[0] == "graph step(w: f64[3], x: f64[3]) {" and lines[-1] == "}"
    assert lines.index("  // backward") < lines.index("  // update")
    update = "\n".join(lines[lines.index("  // update"):])
    assert re.search(r"= subtract %w, %\d+  \(inplace of %w\)", update)
    assert re.search(r"^  \[ ?0\] %", text, re.M)  # each node shows its program point
    assert re.search(r"  mutate %w <- %\d+  # test_ir_format\.py:\d+", text)
    assert any(line.endswith("] return %3") for line in lines)


def test_to_dot_mentions_every_node():
    graph = _trace()
    dot = graph.to_dot()
    assert dot.startswith('digraph "program" {') and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    for v in graph.inputs:
        assert f'v{v.id} [shape=box, label="{v.ref()}' in dot
    for n in graph.nodes:
        decl = re.search(rf'^  v{n.out.id} \[label="{re.escape(n.out.ref())} = {n.op}\\n'
                         rf'{re.escape(n.out.type)}\\n{re.escape(str(n.loc))}"(.*)\];$', dot,
                         re.M)
        assert decl, f"{n} missing from the dot graph"
        assert ("color=red" in decl.group(1)) == (n.inplace_of is not None)
        for v in n.inputs:
            assert f"  v{v.id} -> v{n.out.id};" in dot
    for i, v in enumerate(graph.outputs):
        assert f"v{v.id} -> out{i};" in dot
    for i, v in graph.mutations.items():
        assert f"v{v.id} -> mut{i};" in dot


def test_to_dot_with_a_plan_shows_buffers_and_decisions():
    def f(x):
        return (x * 2.0).exp()
    prog = numpy_compile(f).lower(np.ones(3))
    dot = prog.graph.to_dot(prog.plan)
    exp = prog.graph.nodes[-1]
    line = next(s for s in dot.splitlines() if s.startswith(f"  v{exp.out.id} ["))
    buf = prog.plan.buffer(exp.out)
    assert f"#{buf.id} {buf.kind}" in line and "in place" in line
    assert 'tooltip="writes over %' in line and "fillcolor=" in line
