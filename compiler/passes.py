"""The pass-level API, for users who test and study passes with pytest (DESIGN §3).

Build a graph by hand (`cc.Graph`, `graph.add_input`, `graph.op`) or trace one (`cc.trace`),
run any single pass, or the default pipeline up to a pass, look values and decisions up by name
or source line, and run a graph on a backend::

    import compiler as cc
    from compiler import passes

    g = cc.Graph("f")
    x = g.add_input("x", (4,), "float32")
    y = g.op("exp", g.op("multiply", x, g.op("full", shape=(), value=2.0, dtype="float32")))
    g.outputs = [y]
    state = passes.run_passes(g, until="reinplace")       # a CompileState
    assert state.decisions[0].inplace                       # exp writes over the product
    prog = passes.build(g)                                  # a runnable Program
    prog(np.ones(4, np.float32))

Every pass is a function of a graph (and options) returning a new graph or an analysis object:
`dce`, `cse`, `gemm_accumulate`, `fuse`, `schedule`, `alias_analysis`, `liveness`, `reinplace`,
`plan_memory`, `verify_graph`, `verify_plan`. `pipeline()` lists the default order as
(name, function-of-CompileState) pairs.
Lookups: `graph.value("%3")`, `graph.nodes_at("model.py:12")`, `plan.buffer("%3")`,
`plan.decision("%3")`, `plan.decisions_at(12)`.
"""
from __future__ import annotations

import passes as _passes
from passes import (AliasInfo, Buffer, Decision, GemmDecision, Liveness,  # noqa: F401
                    MemoryPlan, PlanError, Schedule, alias_analysis, dce, gemm_accumulate,
                    liveness, plan_memory, reinplace, verify_graph, verify_plan)

from .errors import CompilerError
from .ir import Graph
from .pipeline import CompileState, donated_names, pipeline  # noqa: F401

cse = getattr(_passes, "cse", None)


def _signature(graph: Graph) -> tuple:
    return tuple(("array", v.shape, v.dtype.str) for v in graph.inputs)


def run_passes(graph: Graph, until: str | None = None, *, backend: str = "numpy",
               inplace: str = "auto", donate=(), schedule: str = "auto",
               fuse: bool | None = None) -> CompileState:
    """Run the default pipeline on `graph` up to and including the pass named `until` (all of
    it when None). Returns the CompileState: `.graph`, `.decisions`, `.plan`."""
    names = [name for name, _ in pipeline(backend, inplace, donate)]
    if until is not None and until not in names:
        raise CompilerError(f"unknown pass {until!r}: the pipeline is {', '.join(names)}")
    state = CompileState(graph, backend, inplace,
                         donated_names(graph, _signature(graph), donate,
                                       [v.name for v in graph.inputs]), schedule, fuse)
    for name, run in pipeline(backend, inplace, donate):
        state = run(state)
        if name == until:
            break
    return state


def build(graph: Graph, *, backend: str = "numpy", inplace: str = "auto", donate=(),
          sanitize: bool | None = None, schedule: str = "auto", fuse: bool | None = None):
    """Compile a hand-built or traced graph into a runnable `Program` (its arguments are the
    graph's inputs, in order, as arrays)."""
    from .api import build_program
    return build_program(graph, _signature(graph), backend, inplace, donate, sanitize,
                         [v.name for v in graph.inputs], schedule, fuse)


# The scheduling pass, bound after run_passes/build, whose `schedule=` option shares its name.
schedule = _passes.schedule
# The fusion pass, likewise (the `fuse=` option of run_passes/build shares its name).
fuse = _passes.fuse
