"""The pass pipeline: one flat list of named passes, run in order on a traced graph.

Environment switches:
  COMPILER_DUMP=name[,name...]|all   print the graph (and plan) after those passes;
                                     `llvm` (`llvm-opt`) prints the cpu backend's LLVM
                                     IR (after -O3)
  COMPILER_SANITIZE=1                run planned programs in sanitizer mode (poison dead buffers)
"""
from __future__ import annotations

import os

from .errors import CompilerError, InplaceError


class CompileState:
    """What flows through the pipeline: the graph, the inplace decisions, the memory plan."""

    def __init__(self, graph, backend, inplace, donate):
        self.graph = graph
        self.backend = backend
        self.inplace = inplace
        self.donate = donate          # names of donated array parameters
        self.decisions = None
        self.plan = None

    @property
    def alignment(self) -> int:
        from passes.memory_plan import CPU_ALIGNMENT, GPU_ALIGNMENT
        return GPU_ALIGNMENT if self.backend == "gpu" else CPU_ALIGNMENT


def _verify_graph(state):
    from passes.verify import verify_graph
    verify_graph(state.graph)
    return state


def _dce(state):
    from passes.simplify import dce
    state.graph = dce(state.graph)
    return state


def _reinplace(state):
    from passes.reinplace import reinplace
    state.graph, state.decisions = reinplace(state.graph, state.inplace, state.donate)
    return state


def _plan_memory(state):
    from passes.memory_plan import plan_memory
    state.plan = plan_memory(state.graph, state.inplace, state.donate, state.alignment,
                             decisions=state.decisions)
    return state


def _verify_plan(state):
    from passes.verify import verify_plan
    verify_plan(state.graph, state.plan)
    return state


def pipeline(backend: str = "numpy", inplace: str = "auto", donate=()) -> list[tuple[str, object]]:
    """The default pass order as (name, function) pairs; each maps a `CompileState` to a
    `CompileState`. Autodiff is not listed: it runs while tracing, at each `backward()`."""
    return [
        ("verify_graph", _verify_graph),   # SSA and types, as traced
        ("dce", _dce),                     # drop what no output or mutation needs
        ("reinplace", _reinplace),         # which outputs take an input's buffer, and why
        ("plan_memory", _plan_memory),     # buffers, live intervals, arena offsets, accounting
        ("verify_plan", _verify_plan),     # independent re-check: no live buffers overlap
    ]


def donated_names(graph, signature, donate) -> tuple[str, ...]:
    """`donate` as parameter names: positions count the function's arguments."""
    names, k, by_position = [], 0, {}
    for pos, sig in enumerate(signature):
        if sig[0] == "array":
            by_position[pos] = graph.inputs[k].name
            k += 1
    for d in donate:
        if isinstance(d, str):
            if d not in {v.name for v in graph.inputs}:
                raise InplaceError(f"donate names '{d}', which is not an array parameter of "
                                   f"{graph.name}")
            names.append(d)
        elif d in by_position:
            names.append(by_position[d])
        else:
            raise InplaceError(f"donate position {d} is not an array argument of {graph.name}")
    if len(set(names)) != len(names):
        raise InplaceError(f"argument '{next(n for n in names if names.count(n) > 1)}' is "
                           "donated twice")
    # A mutated argument's buffer must end up holding its new value: donating it frees nothing.
    mutated = {graph.inputs[k].name for k in graph.mutations}
    return tuple(n for n in names if n not in mutated)


def run_pipeline(graph, signature, backend="numpy", inplace="auto", donate=(),
                 sanitize=None):
    from .api import Program
    state = CompileState(graph, backend, inplace, donated_names(graph, signature, donate))
    dump = set(filter(None, os.environ.get("COMPILER_DUMP", "").split(",")))
    for name, fn in pipeline(backend, inplace, donate):
        try:
            state = fn(state)
        except CompilerError:
            raise
        except Exception as e:  # an internal failure: say which pass
            raise RuntimeError(f"pass '{name}' failed on {graph.name}: {e}") from e
        if name in dump or "all" in dump:
            print(f"--- after {name} ---\n{state.graph}")
            if state.plan is not None:
                print(state.plan.report())
    if sanitize is None:
        sanitize = os.environ.get("COMPILER_SANITIZE", "") not in ("", "0")
    executable = _lower(state, backend, sanitize)
    return Program(state.graph, signature, backend, inplace, state.donate, state.plan,
                   executable)


def _lower(state, backend, sanitize):
    if backend == "numpy":
        from runtime.arena import ArenaExecutable
        return ArenaExecutable(state.graph, state.plan, sanitize=sanitize)
    if backend == "cpu":
        from runtime.cpu import CpuExecutable
        executable = CpuExecutable(state.graph, state.plan, sanitize=sanitize)
        if "llvm" in os.environ.get("COMPILER_DUMP", "").split(","):
            print(executable.source)
        return executable
    raise CompilerError(f"the {backend!r} backend is not available in this build yet; use "
                        "backend='numpy'")
