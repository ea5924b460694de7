"""Inplace Compiler: trace Paddle-style tensor programs into SSA graphs, differentiate them at
trace time, reuse buffers in place where provably safe, plan all memory into one arena.

    import compiler as cc
    fn = cc.compile(step, backend="numpy", inplace="auto")
"""
from . import creation as _creation
from .api import CompiledFunction, Program, compile, trace
from .creation import (arange, concat, full, full_like, ones, ones_like, rand, randn, stack,
                       where, where_, zeros, zeros_like)
from .errors import (CompilerError, DataError, DeviceError, InplaceError,
                     InsufficientMemoryError, RetraceWarning, ShapeError, TraceError)
from .ir import Graph, Loc, Node, Value
from .pipeline import pipeline
from .tensor import Tensor, to_tensor
from .tracer import no_grad

from . import passes  # noqa: E402  (the pass-level API: compiler.passes)
from . import optimizer  # noqa: E402  (cc.optimizer.SGD, cc.optimizer.AdamW)
from . import distributed  # noqa: E402  (cc.distributed.mpi)

globals().update({k: v for k, v in _creation.module_functions().items() if k not in globals()})

__all__ = [
    "compile", "trace", "pipeline", "Program", "CompiledFunction", "Tensor", "Graph", "Node",
    "Value", "Loc", "no_grad", "to_tensor", "zeros", "ones", "full", "full_like", "arange",
    "zeros_like", "ones_like", "concat", "where", "where_", "stack", "rand", "randn",
    "CompilerError", "InplaceError", "ShapeError", "TraceError", "InsufficientMemoryError",
    "passes", "DataError", "RetraceWarning", "optimizer", "DeviceError", "distributed",
]
