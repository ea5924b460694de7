"""The tracer: records every op a traced function performs as a node of an SSA `Graph`.

It owns the bookkeeping that the pure IR does not: the current grad mode and phase, the user's
source location of each call, which values a user inplace op overwrote (the autodiff pass reads
this to choose VJP forms), and which SSA values are leaves that accumulate gradients.
"""
from __future__ import annotations

import contextlib
import dis
import linecache
import os
import sys

from .errors import CompilerError, ShapeError, TraceError
from .ir import Graph, Loc, Node, Value, infer_type
from .layout import apply_view, value_probe
from .ops import REGISTRY, dkind

_PACKAGE_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), pkg) + os.sep
    for pkg in ("compiler", "passes", "runtime"))
_SKIP_FILES = (contextlib.__file__,)


def user_loc(depth: int = 1) -> Loc:
    """The first stack frame outside our packages: the user's line that made this call."""
    return _user_loc_from(sys._getframe(depth))


class CallSite:
    """The user's line that made a call, found only when something asks for it (an error): a
    compiled function's call needs its line only to report one, and the walk up the stack
    costs more than the rest of a small call. Reads like a `Loc`."""

    __slots__ = ("_frame", "_loc")

    def __init__(self, frame):
        self._frame = frame
        self._loc = None

    def resolve(self) -> Loc:
        if self._loc is None:
            self._loc = _user_loc_from(self._frame)
            self._frame = None  # (never keep the caller's frame alive)
        return self._loc

    file = property(lambda self: self.resolve().file)
    line = property(lambda self: self.resolve().line)
    text = property(lambda self: self.resolve().text)

    def describe(self) -> str:
        return self.resolve().describe()

    def __str__(self) -> str:
        return str(self.resolve())

    def __eq__(self, other):
        return self.resolve() == (other.resolve() if isinstance(other, CallSite) else other)

    def __hash__(self):
        return hash(self.resolve())


def call_site() -> CallSite:
    """The caller's caller's line, lazily (see CallSite)."""
    return CallSite(sys._getframe(2))


# An absolute code file name -> (its normalised name, whether it is ours): tracing asks for
# every op's line, and normalising the same few names again was most of a trace's time.
_FILE_KIND: dict[str, tuple[str, bool]] = {}


def _user_loc_from(frame, locs: dict | None = None) -> Loc:
    """`locs`: (file, line) -> its Loc, made once per trace (a loop's body makes the same
    few lines' ops thousands of times; the text is read when the Loc is made)."""
    while frame is not None:
        raw = frame.f_code.co_filename
        known = _FILE_KIND.get(raw)
        if known is None:
            # (abspath calls getcwd: only relative names need it, and they are not cached,
            # since the working directory may change)
            fname = os.path.normpath(raw) if os.path.isabs(raw) else os.path.abspath(raw)
            known = (fname, fname.startswith(_PACKAGE_DIRS) or fname in _SKIP_FILES)
            if os.path.isabs(raw):
                _FILE_KIND[raw] = known
        fname, ours = known
        if not ours:
            if locs is None:
                return Loc(fname, frame.f_lineno, linecache.getline(fname, frame.f_lineno))
            key = (fname, frame.f_lineno)
            loc = locs.get(key)
            if loc is None:
                loc = locs[key] = Loc(fname, key[1], linecache.getline(fname, key[1]))
            return loc
        frame = frame.f_back
    return Loc("<unknown>", 0)


_STACK: list["Tracer"] = []

# Bumped whenever an object whose arrays a program reads as state changes its structure (a
# layer's attribute set, a parameter replaced): programs then check their guards again.
STATE_EPOCH = [0]


def state_changed() -> None:
    STATE_EPOCH[0] += 1


def active() -> "Tracer | None":
    """The tracer recording now, or None outside any trace."""
    return _STACK[-1] if _STACK else None


def current() -> "Tracer":
    if not _STACK:
        raise TraceError("no function is being traced: tensors exist only inside cc.compile "
                         "or cc.trace", user_loc())
    return _STACK[-1]


class Tracer:
    def __init__(self, name: str = "f"):
        self.graph = Graph(name=name)
        self.grad_enabled = True
        self.backward_calls = 0
        # During backward construction: the phase and the forward node being differentiated.
        self.in_backward: Node | None = None
        self.backward_loc: Loc | None = None   # the `backward()` call being built
        self.overwritten: set[Value] = set()   # old values of user inplace targets
        self.leaf_of: dict[Value, object] = {}  # leaf SSA value -> its leaf Tensor
        # A value written by an op that records no gradient (under no_grad, or through a
        # detach()) onto a non-leaf that needs one -> the old value: the write changes the data,
        # not the history, so autodiff passes the new value's gradient on to the old one.
        self.grad_alias: dict[Value, Value] = {}
        self.input_storages: list = []         # graph input k -> its Storage
        # Arrays the program reads that are not arguments (a layer's parameters and buffers, an
        # optimizer's moments): id(array) -> its Tensor, and in input order the arrays, their
        # names and whether each is trainable. The program passes them on every call.
        self.states: dict[int, object] = {}
        self.state_arrays: list = []
        self.state_names: list[str] = []
        # Callables that must all return True for the program to stay valid (a layer's
        # structure unchanged since tracing); checked only when STATE_EPOCH moved.
        self.guards: list = []
        self.argument_arrays: list = []        # the traced function's array arguments
        self.argument_names: list[str] = []
        # While the returned values are materialized (views re-derived after the function
        # returned): the line of its `return`, not the caller's `lower()` / `fn(x)` line.
        self.return_loc: Loc | None = None
        # Nodes a backward() without retain_graph differentiated -> that backward()'s line.
        self.released: dict[Node, Loc] = {}
        # Random call sites so far: each gets its own Philox stream, in program order.
        self.random_streams = 0
        # Data parallelism (compiler.distributed.MpiConfig, or None): leaves whose gradient a
        # backward() gave or changed and that are not yet averaged over the ranks, with that
        # backward()'s line; the all-reduce is emitted at the first read of a `.grad`.
        self.distributed = None
        self.pending_grads: list = []
        self.buckets = 0
        self.stream_base = 0  # random streams of rank r start at r << 40 (per-rank dropout)
        # The open cc.amp.auto_cast block (compiler/amp.py), or None: it casts the inputs of
        # the forward ops it covers.
        self.amp = None
        self.rules: dict = {}  # infer_type's answers in this trace
        self.locs: dict = {}   # the user's lines met in this trace (_user_loc_from)

    def __enter__(self):
        _STACK.append(self)
        return self

    def __exit__(self, *exc):
        _STACK.pop()
        return False

    # -- recording ------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        if self.in_backward is not None or self.backward_loc is not None:
            return "backward"
        if not self.grad_enabled and self.backward_calls:
            return "update"
        return "forward"

    def loc(self) -> Loc:
        if self.in_backward is not None:
            return self.in_backward.loc
        if self.backward_loc is not None:
            return self.backward_loc
        if self.return_loc is not None:
            return self.return_loc
        return _user_loc_from(sys._getframe(1), self.locs)

    def emit(self, op: str, inputs: list[Value], attrs: dict | None = None,
             inplace_of: int | None = None, record_grad: bool | None = None) -> Value:
        """Append one node; infer its type with the registry's rule; track requires_grad.
        `record_grad` overrides the grad mode (re-deriving a view keeps the history it was
        created with, whatever the mode at the read)."""
        attrs = attrs or {}
        opdef = REGISTRY[op]
        if self.amp is not None and inplace_of is None and self.in_backward is None \
                and self.backward_loc is None:
            inputs = self.amp.cast_inputs(self, op, inputs)
        loc = self.loc()
        try:
            shape, dtype = infer_type(op, [(v.shape, v.dtype) for v in inputs], attrs, self.rules)
        except CompilerError as e:
            msg = e.bare_message  # name the op once, even when the rule already does
            raise type(e)(msg if msg.startswith(op) else f"{op}: {msg}", loc) from None
        except (TypeError, ValueError) as e:  # bad attrs from the user
            raise ShapeError(f"{op}: {e}", loc) from None
        if op == "reshape" and inputs and \
                apply_view(value_probe(inputs[0]), "reshape", attrs) is None:
            # In the IR a reshape is always a view. A value whose memory layout can't take this
            # one (it came back through a transpose: `h.t()[1:].add_(1)` leaves the base as a
            # transposed view) is copied first. What user code *sees* as a view or a copy is
            # decided by the Tensor's own layout, not here.
            inputs = [self.emit("contiguous", inputs)]
        node = self.graph.add_node(op, inputs, attrs, shape, dtype, loc, self.phase,
                                   inplace_of)
        if self.in_backward is not None:
            node.grad_of = self.in_backward
        # Only float values carry gradients (Paddle, PyTorch): `x.cast("int64")` ends the
        # graph instead of passing a gradient through the rounding.
        grad_mode = self.grad_enabled if record_grad is None else record_grad
        node.out.requires_grad = (grad_mode and opdef.differentiable
                                  and dkind(node.out.dtype) == "f"
                                  and any(v.requires_grad for v in inputs))
        return node.out


def return_loc(fn) -> Loc | None:
    """The line of `fn`'s `return` statement when it has exactly one (found in its bytecode),
    else its last line; None for callables without Python code."""
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    if code is None:
        return None
    lines = {i.positions.lineno for i in dis.get_instructions(code)
             if i.opname.startswith("RETURN") and i.positions and i.positions.lineno}
    explicit = sorted(lines)
    if not explicit:
        return None
    line = explicit[0] if len(explicit) == 1 else explicit[-1]
    return Loc(code.co_filename, line, linecache.getline(code.co_filename, line))


@contextlib.contextmanager
def no_grad():
    """Ops inside record no gradient (an optimizer update); inplace on leaves is allowed."""
    tracer = _STACK[-1] if _STACK else None
    if tracer is None:
        yield
        return
    saved = tracer.grad_enabled
    tracer.grad_enabled = False
    try:
        yield
    finally:
        tracer.grad_enabled = saved
