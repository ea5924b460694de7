"""The pass-level API, for users who test and study passes with pytest (ARCHITECTURE.md §3).

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
`dce`, `cse`, `gemm_accumulate`, `recompute`, `fuse`, `schedule`, `alias_analysis`,
`liveness`, `reinplace`, `plan_memory`, `verify_graph`, `verify_plan`. `pipeline()` lists the
default order as
(name, function-of-CompileState) pairs.
Lookups: `graph.value("%3")`, `graph.nodes_at("model.py:12")`, `plan.buffer("%3")`,
`plan.decision("%3")`, `plan.decisions_at(12)`.
"""
from __future__ import annotations

from passes.alias import AliasInfo, alias_analysis  # noqa: F401
from passes.cse import cse  # noqa: F401
from passes.fusion import fuse as _fuse
from passes.gemm_accumulate import GemmDecision, gemm_accumulate  # noqa: F401
from passes.liveness import Liveness, liveness  # noqa: F401
from passes.memory_plan import Buffer, MemoryPlan, plan_memory  # noqa: F401
from passes.recompute import RecomputeDecision  # noqa: F401
from passes.recompute import recompute as _recompute
from passes.reinplace import Decision, reinplace  # noqa: F401
from passes.schedule import Schedule  # noqa: F401
from passes.schedule import schedule as _schedule
from passes.simplify import dce  # noqa: F401
from passes.verify import PlanError, verify_graph, verify_plan  # noqa: F401

from .api import build_program
from .errors import CompilerError
from .ir import Graph
from .options import Options
from .pass_pipeline import CompileState, donated_names, pipeline  # noqa: F401


def _signature(graph: Graph) -> tuple:
    return tuple(("array", v.shape, v.dtype.str) for v in graph.inputs)


def run_passes(graph: Graph, until: str | None = None, *, backend: str = "numpy",
               inplace: str = "auto", donate=(), schedule: str = "auto",
               fuse: bool | None = None, recompute: str = "auto") -> CompileState:
    """Run the default pipeline on `graph` up to and including the pass named `until` (all of
    it when None). Returns the CompileState: `.graph`, `.decisions`, `.plan`."""
    options = Options.make(backend, inplace, donate, None, schedule, None, fuse, recompute)
    names = [name for name, _ in pipeline()]
    if until is not None and until not in names:
        raise CompilerError(f"unknown pass {until!r}: the pipeline is {', '.join(names)}")
    state = CompileState(graph, options,
                         donated_names(graph, _signature(graph), options.donate,
                                       [v.name for v in graph.inputs]))
    for name, run in pipeline():
        state = run(state)
        if name == until:
            break
    return state


def build(graph: Graph, *, backend: str = "numpy", inplace: str = "auto", donate=(),
          sanitize: bool | None = None, schedule: str = "auto", fuse: bool | None = None,
          recompute: str = "auto"):
    """Compile a hand-built or traced graph into a runnable `Program` (its arguments are the
    graph's inputs, in order, as arrays)."""
    options = Options.make(backend, inplace, donate, sanitize, schedule, None, fuse, recompute)
    return build_program(graph, _signature(graph), options, [v.name for v in graph.inputs])


# The scheduling and recompute passes, bound after run_passes/build, whose `schedule=` and
# `recompute=` options share their names.
schedule = _schedule
recompute = _recompute
# The fusion pass, likewise (the `fuse=` option of run_passes/build shares its name).
fuse = _fuse
