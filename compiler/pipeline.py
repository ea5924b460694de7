"""The pass pipeline: one flat list of named passes, run in order on a traced graph.

Set `COMPILER_DUMP=name[,name...]` (or `all`) to print the graph after those passes.
"""
from __future__ import annotations

import os

from .errors import CompilerError


def pipeline(backend: str = "numpy", inplace: str = "auto", donate=()) -> list[tuple[str, object]]:
    """The default pass order as (name, function) pairs; each function maps a
    `CompileState` to a `CompileState`."""
    return []


class CompileState:
    """What flows through the pipeline: the graph and, once planned, the memory plan."""

    def __init__(self, graph, backend, inplace, donate):
        self.graph = graph
        self.backend = backend
        self.inplace = inplace
        self.donate = donate
        self.decisions = []
        self.plan = None


def run_pipeline(graph, signature, backend="numpy", inplace="auto", donate=()):
    from .api import Program
    state = CompileState(graph, backend, inplace, donate)
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
    executable = _lower(state, backend)
    return Program(state.graph, signature, backend, inplace, donate, state.plan, executable)


def _lower(state, backend):
    if backend == "numpy":
        from runtime.numpy_backend import NumpyExecutable
        return NumpyExecutable(state.graph, state.plan)
    raise CompilerError(f"the {backend!r} backend is not available in this build; "
                        "use backend='numpy'")
