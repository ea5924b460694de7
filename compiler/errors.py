"""User-facing errors. Each names the user's source line (`file.py:LINE`) of the offending call."""
from __future__ import annotations


class CompilerError(Exception):
    """Base class of every error the compiler raises for bad user input."""

    def __init__(self, message: str, loc=None):
        self.loc = loc
        self.bare_message = message
        if loc is not None:
            message = f"{message} (at {loc.describe()})"
        super().__init__(message)


class InplaceError(CompilerError, ValueError):
    """An inplace operation that is illegal or, in strict mode, cannot run in place."""


class ShapeError(CompilerError, ValueError):
    """Shapes that don't broadcast or match, at trace time or when calling a compiled function."""


class TraceError(CompilerError, TypeError):
    """Something a static graph can't express: data-dependent control flow, `.numpy()`, ..."""


class DataError(CompilerError, ValueError):
    """A value the data itself makes invalid (a class label out of range), found before the
    program writes into any caller's array (ARCHITECTURE.md §4 "Nothing half-written")."""


class RetraceWarning(UserWarning):
    """A compiled function traced again and again (Python scalar arguments or changed captured
    arrays): each trace is a new program."""


class SignatureError(ShapeError, TraceError):
    """A compiled program called with an array of another dtype than it was traced for: it
    doesn't fit the traced signature (a `ShapeError`, ARCHITECTURE.md §3) and is an argument of the
    wrong type (a `TraceError`), so either `except` clause catches it."""


class InsufficientMemoryError(CompilerError, MemoryError):
    """A call whose plan needs more memory than the machine has available: raised before
    anything is allocated or written. Planning (`fn.lower`) never allocates."""


class DeviceError(CompilerError, RuntimeError):
    """A program for the gpu backend that can't be compiled or run here: no CuPy, no CUDA
    device, or a kernel NVRTC rejects (the message carries NVRTC's log)."""


class MemoryBudgetError(CompilerError, MemoryError):
    """`memory_budget=N` that no plan the search reaches fits: raised at planning (`lower()`
    or the first call), before anything runs. The message names the lowest peak reached, the
    buffers live there (ops, source lines) and what each further idea would need."""
