"""Inplace Compiler: trace Paddle-style tensor programs into SSA graphs, differentiate them at
trace time, reuse buffers in place where provably safe, plan all memory into one arena.

    import compiler as cc
    fn = cc.compile(step, backend="numpy", inplace="auto")

The package holds both the ground floor (IR, op registry, errors) and the driver (`compile`,
`Program`, the pipeline), and Python runs this file before any of its modules: so it imports
nothing itself and loads each public name from its module at first use (PEP 562), then keeps
it here. `import compiler.ir` (or `import passes`, whose modules import the IR) thus loads the
IR alone, not the driver above it; `tests/test_layering.py` checks the floors.
"""
import importlib
import importlib.util

# Each public name and the module that defines it.
_HOMES = {
    "api": ("CompiledFunction", "Program", "compile", "trace"),
    "creation": ("arange", "concat", "full", "full_like", "ones", "ones_like", "rand", "randn",
                 "stack", "where", "where_", "zeros", "zeros_like", "eye", "linspace"),
    "einsum_lowering": ("einsum",),
    "errors": ("CompilerError", "DataError", "DeviceError", "InplaceError",
               "InsufficientMemoryError", "MemoryBudgetError", "RetraceWarning", "ShapeError",
               "TraceError"),
    "ir": ("Graph", "Loc", "Node", "Value"),
    "pass_pipeline": ("pipeline",),
    "serialization": ("load", "save"),
    "tensor": ("Tensor", "to_tensor"),
    "tracer": ("no_grad",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "compile", "trace", "pipeline", "Program", "CompiledFunction", "Tensor", "Graph", "Node",
    "Value", "Loc", "no_grad", "to_tensor", "zeros", "ones", "full", "full_like", "arange",
    "zeros_like", "ones_like", "concat", "where", "where_", "stack", "rand", "randn", "eye",
    "linspace", "einsum",
    "CompilerError", "InplaceError", "ShapeError", "TraceError", "InsufficientMemoryError",
    "passes", "DataError", "RetraceWarning", "optimizer", "DeviceError", "distributed",
    "save", "load", "MemoryBudgetError", "jit", "amp",
]


def __getattr__(name: str):
    # Called only for a name not bound yet: the value is bound below, so each name costs one
    # import and later reads are plain attribute reads.
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a submodule (cc.passes, cc.optimizer, cc.distributed, cc.nn, ...)
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        # the functional forms of the Tensor methods (cc.exp(x), cc.add_(x, y), ...)
        functions = importlib.import_module(f"{__name__}.creation").module_functions()
        if name not in functions:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = functions[name]
    globals()[name] = value
    return value


def __dir__():
    names = set(globals()) | set(__all__)
    names.update(importlib.import_module(f"{__name__}.creation").module_functions())
    return sorted(names)
