"""The driver: `trace()`, `compile()`, and the compiled `Program` for one input signature."""
from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import inspect
import itertools
import numbers
import operator
import threading
import warnings
from collections import OrderedDict, namedtuple

import numpy as np
from numpy.lib.array_utils import byte_bounds

from runtime.arena import REFUSED, contiguous_arguments
from runtime.backends import BACKENDS as BACKEND_OBJECTS

from . import tracer as _tr
from .arguments import as_index, bind, is_array, plain
from .distributed import RANK_STREAM_SHIFT, check_signature
from .errors import (CompilerError, DataError, InplaceError, RetraceWarning, ShapeError,
                     SignatureError, TraceError)
from .ir import Graph, type_str
from .layout import apply_view
from .ops import REGISTRY, SUPPORTED_DTYPES, VIEW
from .ops.nn_ops import bad_label, label_range_message
from .options import INPLACE_MODES, RECOMPUTE_MODES, SCHEDULE_MODES, Options  # noqa: F401
from .pass_pipeline import run_pipeline
from .signals import DeferredSignals
from .tensor import Storage, Tensor, _is_scalar

BACKENDS = tuple(BACKEND_OBJECTS)  # the names users pass as backend=


# -- tracing -----------------------------------------------------------------------------
# Tracing and building a program take this lock: the tracer's state (the active tracer,
# `no_grad`) is process-wide, and so is LLVM's. Re-entrant: a traced function may call a
# compiled function on numpy arrays.
_COMPILE_LOCK = threading.RLock()


def _param_names(fn, n: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                  params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        else:
            names.append(f"arg{i}")
    return names


def _check_arg(i, name, a, loc):
    if isinstance(a, np.ndarray):
        if type(a) is not np.ndarray and isinstance(a, np.ma.MaskedArray):
            # Every other subclass runs as the plain array over its memory (arguments.plain);
            # a masked array's masked elements would be computed as ordinary values.
            raise TraceError(f"argument '{name}' is a numpy masked array: a compiled program "
                             f"would ignore its mask; pass {name}.filled(value) (or "
                             f"{name}.data to ignore the mask)", loc)
        if a.dtype not in SUPPORTED_DTYPES:
            raise TraceError(f"argument '{name}' has unsupported dtype {a.dtype}: use one of "
                             + ", ".join(d.name for d in SUPPORTED_DTYPES), loc)
        return
    if _is_scalar(a):
        return
    raise TraceError(f"argument '{name}' is a {type(a).__name__}: pass numpy arrays or Python "
                     "scalars", loc)


def _flatten_result(result, tensors: list, loc):
    """The returned structure with each Tensor replaced by ("t", k)."""
    if isinstance(result, Tensor):
        tensors.append(result)
        return ("t", len(tensors) - 1)
    if isinstance(result, (tuple, list)):
        return (type(result).__name__, [_flatten_result(r, tensors, loc) for r in result])
    if isinstance(result, dict):
        return ("dict", [(k, _flatten_result(v, tensors, loc)) for k, v in result.items()])
    if result is None or isinstance(result, (numbers.Number, str, np.ndarray)):
        return ("c", result)
    raise TraceError(f"the traced function returned a {type(result).__name__}; return tensors "
                     "in tuples, lists or dicts", loc)


def trace(fn, *args, name: str | None = None, **kwargs) -> Graph:
    """Trace `fn` on example arguments (numpy arrays and Python scalars) into an SSA graph,
    backward included when `fn` calls `backward()`. Arguments that share memory are traced
    as views of one storage (see `compiler.arguments`). Keyword arguments are passed by
    keyword and become graph inputs named after them, after the positional ones."""
    args = tuple(args) + tuple(kwargs.values())
    with _COMPILE_LOCK, _no_gc():
        return _trace(fn, args, _tr.user_loc(), name, tuple(kwargs))[0]


def _trace(fn, args, loc, name=None, kwnames=(), distributed=None) -> tuple[Graph, tuple]:
    """(graph, signature) of `fn` on `args`; the last `len(kwnames)` of them are passed by
    keyword. `distributed` (an MpiConfig) makes every leaf's gradient averaged over the ranks
    and the random streams rank-local (compiler.distributed)."""
    npos = len(args) - len(kwnames)
    names = _param_names(fn, npos) + list(kwnames)
    for i, (n, a) in enumerate(zip(names, args)):
        _check_arg(i, n, a, loc)
    signature, _ = _bind(args, names, loc)
    tracer = _tr.Tracer(name or getattr(fn, "__name__", "f"))
    graph = tracer.graph
    if distributed is not None:
        tracer.distributed = distributed
        tracer.stream_base = distributed.rank << RANK_STREAM_SHIFT
    targs, storages = [], []  # storages[k]: the buffer of graph input k
    tracer.input_storages = storages  # (state_tensor adds the inputs it makes)
    tracer.argument_arrays = [a for a in args if isinstance(a, np.ndarray)]
    tracer.argument_names = [n for n, a in zip(names, args) if isinstance(a, np.ndarray)]
    shared: dict = {}         # alias group -> the Tensor of its one storage
    with tracer:
        for n, a, entry in zip(names, args, signature):
            if entry[0] == "scalar":
                targs.append(a)
            elif entry[0] == "array":
                storage = Storage(graph.add_input(n, a.shape, a.dtype),
                                  input_index=len(storages))
                storages.append(storage)
                targs.append(Tensor(tracer, storage, name=n))
            else:  # a view of the storage its alias group shares
                _, _, _, group, index, perm = entry
                if group not in shared:
                    # Named after the first argument that is the whole storage, if any.
                    whole = next((m for m, e in zip(names, signature) if e[0] == "view"
                                  and e[3] == group and e[4] == ()), f"{n}_storage")
                    # (a.dtype: the group's, as every member's; its .str, the key's,
                    # is "<V2" for bfloat16)
                    storage = Storage(graph.add_input(whole, group[2], a.dtype),
                                      input_index=len(storages))
                    storages.append(storage)
                    shared[group] = Tensor(tracer, storage, name=whole)
                if index == () and perm == ():
                    targs.append(shared[group])
                else:
                    t = shared[group][as_index(index)].transpose(perm)
                    t._name = n
                    targs.append(t)
        result = fn(*targs[:npos], **dict(zip(kwnames, targs[npos:])))
        tensors: list[Tensor] = []
        graph.output_tree = _flatten_result(result, tensors, loc)
        tracer.return_loc = _tr.return_loc(fn)
        graph.outputs = [t._v() for t in tensors]
    graph.mutations = {k: s.base for k, s in enumerate(storages)
                       if s.base is not graph.inputs[k]}
    graph.mutation_locs = {k: loc for k, loc in graph.mutation_locs.items()
                           if k in graph.mutations}
    # Arrays read as state (compiler.tensor.state_tensor) are the graph's last inputs.
    graph.state_arrays = list(tracer.state_arrays)
    graph.guards = list(tracer.guards)
    signature = tuple(signature) + tuple(("array", a.shape, a.dtype.str)
                                         for a in tracer.state_arrays)
    return graph, signature


@contextlib.contextmanager
def _no_gc():
    """Compiling makes a few objects per node and frees none: Python's cyclic collector would
    rescan all of them again and again (2.5x the planning time of a 100k-node graph)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _bind(args, names, loc):
    """`compiler.arguments.bind`, its error naming the caller's line."""
    try:
        return bind(args, names)
    except CompilerError as e:
        raise type(e)(e.bare_message, loc) from None


def _rebuild(tree, arrays):
    kind, payload = tree
    if kind == "t":
        return arrays[payload]
    if kind == "c":
        return payload
    if kind == "dict":
        return {k: _rebuild(v, arrays) for k, v in payload}
    items = [_rebuild(v, arrays) for v in payload]
    return tuple(items) if kind == "tuple" else items


# -- the compiled program ------------------------------------------------------------------
class Program:
    """A traced, planned and lowered function for one input signature (see
    `compiler.arguments` for what a signature holds)."""

    def __init__(self, graph: Graph, signature, options: Options, donate=(), plan=None,
                 executable=None, param_names=None, states=(), guards=()):
        self.graph = graph
        self.signature = signature
        # The arrays read as state (layers' parameters, optimizers' moments): the last graph
        # inputs, passed by the program itself on every call after the caller's arguments.
        self.state_arrays = [plain(a) for a in states]  # (a Parameter runs as its ndarray)
        # The state objects themselves: a Parameter's own writeable flag is not its plain
        # view's (made once, above), so a read-only check reads these.
        self._state_objects = list(states)
        self._n_args = len(signature) - len(self.state_arrays)
        self._guards = list(guards)
        self._epoch = _tr.STATE_EPOCH[0]
        self._state_bounds = _Bounds(self.state_arrays)
        self.options = options
        self.backend = options.backend.name  # (users and reports read the name)
        self.inplace = options.inplace
        self.donate = tuple(donate)          # the graph inputs donated (resolved names)
        self.plan = plan
        self._exec = executable
        self.param_names = list(param_names or _param_names_from_graph(graph, signature))
        self._bind_call = None  # set by CompiledFunction: binds keyword arguments
        live = set(graph.nodes)
        # Labels computed inside the program are checked while it runs (DataCheck): then the
        # caller's arrays are written only once the run has finished.
        self._checks_while_running = any(c.input_index is None and c.node in live
                                         for c in graph.data_checks)
        self._captured = [(node, ref, snap) for node, ref, snap in graph.captured
                          if node in live]
        self.distributed = options.distributed  # an MpiConfig for a data-parallel step
        # Whether the last call copied a mutated argument's value back from elsewhere (the
        # plan decides; assumed until a call shows otherwise): then its region is deferred.
        self._copies_back = True
        self._fast: dict = {}  # _fast_key(args) -> _FastCall, or False: the general path

    @property
    def _exec(self):
        return self._executable

    @_exec.setter
    def _exec(self, executable):
        # Another executable (tests swap in a sanitizing one): the short paths built for the
        # old one are retired, wherever they are kept.
        self._executable = executable
        for fast in self.__dict__.get("_fast", {}).values():
            if fast:
                fast.retire()
        self._fast = {}

    @property
    def source(self) -> str:
        return getattr(self._exec, "source", "")

    def stale_state(self) -> str | None:
        """Why the program must be traced again for its state (a guard that no longer holds:
        a layer's structure changed since tracing), or None. Guards are checked only after
        some state-owning object changed (compiler.tracer.state_changed)."""
        if not self._guards or self._epoch == _tr.STATE_EPOCH[0]:
            return None
        for guard in self._guards:
            if not guard():
                return str(guard)
        self._epoch = _tr.STATE_EPOCH[0]
        return None

    def _bind_args(self, args, loc) -> list[np.ndarray]:
        """Check `args` against the signature; the arrays for the graph's inputs (the state
        arrays last)."""
        n = self._n_args
        if len(args) != n:
            raise TraceError(f"{self.graph.name} was compiled for {n} "
                             f"arguments, got {len(args)}", loc)
        for name, a, sig in zip(self.param_names, args, self.signature):
            _check_arg(0, name, a, loc)
            if is_array(sig):
                if not isinstance(a, np.ndarray):
                    raise TraceError(f"argument '{name}' must be an array", loc)
                if a.shape != sig[1]:
                    raise ShapeError(f"argument '{name}' has shape {list(a.shape)}, but "
                                     f"{self.graph.name} was compiled for "
                                     f"{type_str(sig[1], np.dtype(sig[2]))}", loc)
                if a.dtype.str != sig[2]:
                    raise SignatureError(f"argument '{name}' has dtype {a.dtype}, but "
                                         f"{self.graph.name} was compiled for "
                                         f"{np.dtype(sig[2]).name}", loc)
            elif isinstance(a, np.ndarray) or a != sig[2]:
                raise TraceError(f"scalar argument '{name}' is {a!r}; this program was traced "
                                 f"with {sig[2]!r} (scalars are compile-time constants)", loc)
        signature, arrays = _bind(args, self.param_names[:n], loc)
        if signature != self.signature[:n]:
            raise TraceError(f"the arguments of this call share memory differently than those "
                             f"{self.graph.name} was compiled for: call the compiled function "
                             "(it traces each way of sharing once)", loc)
        return self._with_states(arrays, loc)

    def _with_states(self, arrays, loc):
        """The caller's bound arrays followed by the state arrays, none sharing memory."""
        if self.state_arrays:
            n = self._n_args
            for a, v in zip(arrays, self.graph.inputs):
                k = self._state_bounds.overlapping(a)
                if k is not None:
                    raise TraceError(f"argument '{v.name}' shares memory with "
                                     f"'{self.param_names[n + k]}', an array the program "
                                     "reads as state: pass a copy", loc)
            arrays = arrays + self.state_arrays
        return arrays

    def _input_facts(self):
        """(input names, donated input indices, the inputs a call writes), made once."""
        facts = self.__dict__.get("_facts")
        if facts is None:
            names = [v.name for v in self.graph.inputs]
            donated = {names.index(n) for n in self.donate}
            facts = self._facts = (names, donated,
                                   sorted(set(self.graph.mutations) | donated))
        return facts

    def _check_data(self, arrays):
        """Data checks on the caller's arrays (labels in range), before anything runs."""
        for c in self.graph.data_checks:
            if c.input_index is None:
                continue
            values = np.ascontiguousarray(arrays[c.input_index])  # as traced: row-major
            for op, attrs in c.chain:
                values = apply_view(values, op, attrs)
            found = bad_label(values, c.num_classes, c.ignore_index)
            if found is not None:
                name = self.graph.inputs[c.input_index].name
                raise DataError(f"{c.what}: in argument '{name}', "
                                + label_range_message(*found, c.num_classes, c.ignore_index),
                                c.loc)

    def changed_capture(self) -> str | None:
        """Which captured numpy array differs from its value at trace time, if any: a bitwise
        comparison with the trace-time copy (as unsigned ints, so NaNs compare equal; ~30 us
        per MB here); arrays that are gone can't have changed."""
        for node, ref, snap in self._captured:
            a = ref()
            if a is None:
                continue
            bits = f"u{a.itemsize}"
            if a.shape != snap.shape or a.dtype != snap.dtype or not np.array_equal(
                    a.view(bits), snap.view(bits)):
                return f"the numpy array captured at {node.loc} ({type_str(a.shape, a.dtype)})"
        return None

    def __call__(self, *args, **kwargs):
        if not kwargs and self._fast and FAST_CALLS:
            try:
                if len(args) == 1 and type(a := args[0]) is np.ndarray:  # (_fast_key's case)
                    fast = self._fast.get((a.shape, a.strides, a.dtype))
                else:
                    fast = self._fast.get(_fast_key(args))
            except Exception:  # noqa: BLE001 - an unhashable argument: the general path's
                fast = None
            if fast:
                call = fast.call
                result = call(args) if call is not None else fast(args)
                if result is not _SLOW:
                    return result
        loc = _tr.call_site()
        if kwargs:
            if self._bind_call is None:
                raise TraceError("this program takes its arguments by position", loc)
            args, kwargs = self._bind_call(args, kwargs, loc)
            args = tuple(args) + tuple(kwargs.values())
        if self.distributed is not None:
            # Before anything is checked or written: ranks called with other shapes raise on
            # every rank, instead of hanging in an all-reduce of another size.
            check_signature(self.distributed, self._call_text(args), loc, program=self)
            return self._run_bound(self._bind_args(args, loc), loc)
        result = self._run_bound(self._bind_args(args, loc), loc)
        if not kwargs:
            self._fast_entry(args)
        return result

    def _fast_entry(self, args) -> _FastCall | None:
        """The short path for calls laid out as `args` (a call that just succeeded on the
        general path), made once per layout; None where this program's calls need the general
        path: another backend, private copies, a view signature, an argument that is no
        plain C-contiguous ndarray (see `_FastCall`)."""
        try:
            key = _fast_key(args)
            fast = self._fast.get(key)
        except Exception:  # noqa: BLE001 - (unhashable: no short path)
            return None
        if fast is None:
            fast = self._make_fast(args, key) or False
            if len(self._fast) >= FAST_LIMIT:
                self._fast.clear()
            self._fast[key] = fast
        return fast or None

    def _make_fast(self, args, key):
        make = getattr(self._exec, "fast_runner", None)
        # (checks while running need private copies only of what the program writes)
        if (make is None or self.distributed is not None
                or (self._checks_while_running and self.graph.mutations)
                or not getattr(self._exec, "_memory_checked", False)
                or len(args) != self._n_args
                or not all(a.flags.c_contiguous for a in self.state_arrays)):
            return None  # (a strided state array runs through a private copy)
        positions = []
        for p, (a, sig) in enumerate(zip(args, self.signature)):
            if sig[0] == "array":
                if type(a) is not np.ndarray or not a.flags.c_contiguous \
                        or a.shape != sig[1] or a.dtype.str != sig[2]:
                    return None
                positions.append(p)
            elif sig[0] != "scalar" or isinstance(a, np.ndarray):
                return None  # (a view signature: its binding is the general path's)
        outputs = self.graph.outputs
        routes = [self._argument_route(v) for v in outputs]
        arrays = [args[p] for p in positions] + self.state_arrays
        if any(r is not None and self._argument_view(v, arrays) is None
               for v, r in zip(outputs, routes)):
            return None  # (the same layout each call: a route that can't view never will)
        wanted = [v for v, r in zip(outputs, routes) if r is None]
        # (the state objects: the trampoline reads their own writeable flags)
        runner = make(positions, self._state_objects, self._input_facts()[2], wanted)
        if runner is None:
            return None
        checks = any(c.input_index is not None for c in self.graph.data_checks)
        return _FastCall(self, key, (self.signature[:self._n_args], ()), runner, positions,
                         routes, checks)

    def _run_bound(self, arrays, loc):
        """Run on `arrays` (one per graph input, state arrays included: they never share
        memory), bound and checked against the signature by the caller."""
        self._check_data(arrays)
        names, donated, written = self._input_facts()
        first_state = len(arrays) - len(self._state_objects)
        for k in written:
            if not arrays[k].flags.writeable or (
                    k >= first_state
                    and not self._state_objects[k - first_state].flags.writeable):
                where = self.graph.mutation_locs.get(k)
                why = f"the function writes into it at {where}" if where else "it is donated"
                raise InplaceError(f"argument '{names[k]}' is a read-only array, but {why}",
                                   loc)
        check = getattr(self._exec, "check_memory", None)
        if check is not None:
            check(loc)  # before anything is allocated or written
        run_arrays = list(arrays)
        if self._checks_while_running or self.distributed is not None:
            # A data check runs mid-program, or a collective may fail mid-program: the program
            # writes into private copies, so that a failing run leaves the caller's arrays as
            # they were (ARCHITECTURE.md §4).
            for k in self.graph.mutations:
                run_arrays[k] = arrays[k].copy()
        for a in arrays:
            if not a.flags.c_contiguous:
                # Row-major copies, counted by the memory check first (mutations are copied
                # back below).
                contiguous_arguments(run_arrays, arrays, names, self._exec, loc)
                break
        exe = self._exec
        run_held = getattr(exe, "run_held", None)
        held = None
        with self._all_or_nothing(arrays, run_arrays):
            if run_held is None:  # (an executable with no arena pool: each call its own memory)
                outs, muts = exe.run(run_arrays)
            else:
                # The call's arena stays this call's until the mutations are copied out of it.
                outs, muts, held = run_held(run_arrays)
            try:
                # The whole program succeeded: the caller's arrays get their final values.
                copied = False
                for k, arr in muts.items():
                    if not _same_memory(arr, arrays[k]):
                        np.copyto(arrays[k], arr)
                        copied = True
            finally:
                if run_held is not None:
                    exe.put_back(held)
        self._copies_back = copied
        results = []
        for v, arr in zip(self.graph.outputs, outs):
            # An argument, or a view of one, is returned as that array or that view of it, as
            # NumPy and PyTorch do (`return x`, `return x[1:]`, `return x.add_(1)`): 0 output
            # bytes, as planned.
            view = self._argument_view(v, arrays)
            if view is not None:
                results.append(view)
            elif any(np.may_share_memory(arr, a) for k, a in enumerate(arrays)
                     if k not in donated):
                results.append(arr.copy())  # never hand out an alias of a caller's array
            else:
                results.append(arr)
            if 0 in results[-1].strides:
                _read_only_if_repeated(results[-1], arrays)
        tree = self.graph.output_tree
        if tree is None:  # a hand-built graph: one output, or a tuple of them
            tree = ("t", 0) if len(results) == 1 else \
                ("tuple", [("t", i) for i in range(len(results))])
        return _rebuild(tree, results)

    def _all_or_nothing(self, arrays, run_arrays):
        """The region that runs the program and writes the caller's arrays: one that signal
        handlers can't split (compiler.signals, ~2 us a call) when Python code writes them;
        none when nothing of the caller's is written or one native call writes all of it
        (cpu, no fallback op calling back into Python, every mutation in place in the
        caller's array): no handler runs inside a native call."""
        mutations = self.graph.mutations
        if not mutations or (self.options.backend.native_call_writes_in_place
                             and not self._copies_back
                             and not getattr(self._exec, "fallback_nodes", None)
                             and not any(map(operator.is_not, run_arrays, arrays))):
            return _NOT_DEFERRED
        return DeferredSignals()

    def _call_text(self, args) -> str:
        """The argument types of a call, as the ranks compare them."""
        parts = []
        for name, a in zip(self.param_names, args):
            t = type_str(a.shape, a.dtype) if isinstance(a, np.ndarray) else repr(a)
            parts.append(f"{name}: {t}")
        return f"{self.graph.name}({', '.join(parts)})"

    def _argument_view(self, v, arrays) -> np.ndarray | None:
        """`v` as a view of the caller's array it lives in, if it is an argument's value at
        the end of the call (its value at the call when it is never written), or a view of it."""
        routes = self.__dict__.get("_routes")
        if routes is None:  # (the graph decides the route: found once per program)
            routes = self._routes = {id(o): self._argument_route(o) for o in self.graph.outputs}
        route = routes[id(v)]
        if route is None:
            return None
        k, chain = route
        out = arrays[k]
        for op, attrs in chain:
            out = apply_view(out, op, attrs)
            if out is None:  # a reshape the caller's strides can't take as a view
                return None
        return out

    def _argument_route(self, v):
        """(input k, the views from its array to `v`) when `v` lives in a caller's array at
        the end of the call, else None (computed, or a view of an argument's value before it
        was written)."""
        final = {id(m): k for k, m in self.graph.mutations.items()}
        chain, cur = [], v
        while id(cur) not in final and cur.producer is not None \
                and REGISTRY[cur.producer.op].kind == VIEW:
            chain.append((cur.producer.op, cur.producer.attrs))
            cur = cur.producer.inputs[0]
        chain.reverse()
        if id(cur) in final:
            return final[id(cur)], chain
        if cur.producer is None and self.graph.inputs.index(cur) not in self.graph.mutations:
            return self.graph.inputs.index(cur), chain
        return None


_NOT_DEFERRED = contextlib.nullcontext()
_SLOW = REFUSED  # what a _FastCall returns when the call must take the general path
# False: every call takes the general path (tests that hook the executable's general path,
# and comparisons of the two paths).
FAST_CALLS = True
FAST_LIMIT = 64   # layouts remembered per program (and per compiled function)


def _fast_key(args) -> tuple:
    """A call's layout, compared in one step: each array argument's type, shape, strides
    and dtype (so contiguity too), each scalar's type and value. Raises TypeError for an
    unhashable argument."""
    if len(args) == 1:
        a = args[0]
        if type(a) is np.ndarray:
            return (a.shape, a.strides, a.dtype)
        return (type(a), a)
    key = []
    for a in args:
        if type(a) is np.ndarray:
            key += (a.shape, a.strides, a.dtype)
        else:
            key += (type(a), a)
    return tuple(key)


class _FastCall:
    """A program's call for one layout of its arguments, seen before on the general path
    (`Program._run_bound`), doing only what can differ from call to call: the native
    trampoline (`runtime.cpu.executable.FastRunner`) reads the data pointers, refuses a
    read-only array the program writes and overlapping inputs (the general path then raises
    or traces the aliasing), and fresh outputs are allocated. A call with nothing to check
    or assemble here is `call`: from the second short call on the native builtin
    (`FastRunner.native`), so that `fn(x)` runs one Python frame, the driver's. What the
    general path checks once per layout holds by construction: the key fixes the shapes,
    dtypes and contiguity; no private copies (data checks while running beside mutations) or
    copies back (an in-place mutation is written by the one native call, so no signal can
    split it); the memory check passed. State guards and captured arrays are checked as on
    the general path; when they changed, the call takes it. Returns _SLOW when nothing ran
    and the general path must take the call."""

    __slots__ = ("call", "checks", "key", "one", "positions", "prog", "repeats", "routes",
                 "run", "single", "slow_key", "tree")

    def __init__(self, prog, key, slow_key, run, positions, routes, checks):
        self.prog, self.key, self.slow_key, self.run = prog, key, slow_key, run
        self.positions, self.checks = positions, checks
        self.routes = routes if any(r is not None for r in routes) else None
        tree = prog.graph.output_tree
        if tree is None:  # a hand-built graph: one output, or a tuple of them
            tree = ("t", 0) if len(routes) == 1 else \
                ("tuple", [("t", i) for i in range(len(routes))])
        self.tree = tree
        self.single = tree == ("t", 0) and self.routes is None
        # Fresh outputs that repeat elements (stride 0) are returned read-only, as there.
        self.repeats = [i for i, (v, r) in enumerate(zip(prog.graph.outputs, routes))
                        if r is not None or 0 in prog._exec.places[id(v)].strides]
        # Nothing to check or assemble (no guards, captured arrays, data checks; one fresh
        # output): the runner's `one` is the whole call, from the second short call on as a
        # native builtin where there is one (`FastRunner.native`: no Python frame at all).
        one = run.single and self.single and not self.repeats
        self.call = self._first_one if (one and not checks and not prog._guards
                                        and not prog._captured) else None
        # With guards, captured arrays or data checks, the run after them: the native builtin
        # too from the second call on (False: not made yet).
        self.one = False if one else None

    def _first_one(self, args):
        run = self.run
        if run is None:
            return _SLOW
        result = run.one(args)  # (the first short call builds the trampoline)
        native = run.native()
        if self.run is not None:  # (not retired meanwhile)
            self.call = run.one if native is None else native
        return result

    def retire(self):
        """Its program's executable was replaced: every later call takes the general path."""
        self.call = self.run = self.one = None

    def __call__(self, args):
        prog = self.prog
        if self.run is None:
            return _SLOW
        if prog._guards and prog._epoch != _tr.STATE_EPOCH[0]:
            return _SLOW  # (a layer's structure may have changed: the guards decide there)
        if prog._captured and prog.changed_capture() is not None:
            return _SLOW
        if self.checks:  # labels in the caller's arrays: checked before anything runs
            prog._check_data([args[p] for p in self.positions] + prog.state_arrays)
        one = self.one
        if one:
            return one(args)  # (REFUSED is _SLOW)
        outs = self.run(args)
        if outs is _SLOW:
            return _SLOW
        if self.single and not self.repeats:
            if one is False and self.run is not None:  # (the first call built the trampoline)
                self.one = self.run.native()
            return outs[0]
        arrays = [args[p] for p in self.positions] + prog.state_arrays
        if self.routes is not None:  # (returned as views of the caller's arrays, as there)
            fresh = iter(outs)
            outs = [next(fresh) if r is None else prog._argument_view(v, arrays)
                    for v, r in zip(prog.graph.outputs, self.routes)]
        for i in self.repeats:
            if 0 in outs[i].strides:
                _read_only_if_repeated(outs[i], arrays)
        return _rebuild(self.tree, outs)


class _Bounds:
    """The memory ranges of a fixed set of arrays, sorted: which one an array overlaps, in
    O(log n) (a program with hundreds of state arrays checks each argument per call)."""

    def __init__(self, arrays):
        spans = sorted((*byte_bounds(a), k) for k, a in enumerate(arrays) if a.size)
        self._starts = [lo for lo, _, _ in spans]
        self._spans = spans
        # (the arrays never overlap each other: state_tensor refuses that at trace time)

    def overlapping(self, a) -> int | None:
        if not self._spans or not a.size:
            return None
        lo, hi = byte_bounds(a)
        i = bisect.bisect_right(self._starts, hi - 1) - 1
        if i >= 0 and self._spans[i][1] > lo:
            return self._spans[i][2]
        return None


def _read_only_if_repeated(result: np.ndarray, arrays) -> None:
    """An `expand()` view repeats elements (stride 0 over an axis longer than 1): returned
    read-only, as NumPy's `broadcast_to` returns it, since a write through one element would
    change all its repeats. A caller's own array comes back as it was given."""
    if any(s == 0 and n > 1 for n, s in zip(result.shape, result.strides)) \
            and not any(result is a for a in arrays):
        result.flags.writeable = False


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.shape == b.shape and a.strides == b.strides
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _param_names_from_graph(graph, signature):
    """Parameter names of a Program built without them: its array inputs' names."""
    names, k = [], 0
    for i, sig in enumerate(signature):
        if sig[0] == "array":
            names.append(graph.inputs[k].name)
            k += 1
        else:
            names.append(f"arg{i}")
    return names


def build_program(graph: Graph, signature, options: Options, param_names=None):
    """Run the pass pipeline on a traced graph and lower it for `options.backend`."""
    states = getattr(graph, "state_arrays", ())
    guards = getattr(graph, "guards", ())
    if param_names is not None and states:
        param_names = list(param_names) + [v.name for v in graph.inputs[-len(states):]]
    state, executable = run_pipeline(graph, signature, options, param_names)
    if hasattr(executable, "set_threads"):  # (the cpu backend's pool)
        executable.set_threads(options.threads)
    return Program(state.graph, signature, options, state.donate, state.plan, executable,
                   param_names, states, guards)


def _describe_sig(entry) -> str:
    if is_array(entry):
        return type_str(entry[1], np.dtype(entry[2])) + (" (a view)" if entry[0] == "view"
                                                          else "")
    return repr(entry[2])


RETRACE_LIMIT = 8  # as torch.compile's cache_size_limit
# Signatures whose programs keep their arenas while idle: the most recently called ones. An
# older signature's program stays cached (no retrace) but gives its arenas back; its next call
# allocates them again.
ARENA_LIMIT = 8

CacheInfo = namedtuple("CacheInfo", "hits misses maxsize currsize arenas arena_bytes")
CacheInfo.__doc__ = """`fn.cache_info()`, as functools' (`maxsize` is None: programs are kept
until `fn.clear_cache()`); `arenas`: programs holding idle arenas (at most ARENA_LIMIT, plus
calls in flight), `arena_bytes`: the bytes of those idle arenas."""


class CompiledFunction:
    """What `cc.compile` returns: traces per input signature and caches the Program.

    Arguments bind as in a Python call (`fn(x, w=w)` is `fn(x, w)`: one cache entry). The
    cache key is the signature (`compiler.arguments`: shapes, dtypes, memory sharing, Python
    scalars' values) and the names of keyword-only arguments. A cached program is traced
    again when a numpy array it captured has changed since; past RETRACE_LIMIT retraces a
    `RetraceWarning` says why (once).

    Thread-safe: calls from several threads run at once, each on an arena of its own from the
    program's pool; threads making the first call of a signature together trace it once.
    Only the ARENA_LIMIT most recently called signatures keep their arenas while idle."""

    def __init__(self, fn, backend="cpu", inplace="auto", donate=(), sanitize=None,
                 schedule="auto", distributed=None, fuse=None, recompute="auto", threads=None,
                 memory_budget=None):
        # Validated here, once: a bad value fails at compile, not at the first call.
        self.options = options = Options.make(backend, inplace, donate, sanitize, schedule,
                                              distributed, fuse, recompute, threads,
                                              memory_budget)
        self.memory_budget = options.memory_budget
        self.fn = fn
        # The options as attributes, as users passed them (backend: its name).
        self.backend = options.backend.name
        self.inplace, self.schedule, self.recompute = inplace, schedule, recompute
        self.fuse, self.donate, self.sanitize = fuse, options.donate, sanitize
        self.distributed, self.threads = distributed, options.threads
        self._cache: dict = {}
        self._positional_names: dict[int, list[str]] = {}
        self.traces = 0          # how many times fn was traced
        self._retraces = 0       # traces for a changed signature or capture (not the first)
        self._last_key = None
        self._warned = False
        self._lock = threading.Lock()   # the counters and the arenas' LRU below
        self._hits = self._misses = 0
        self._with_arenas: OrderedDict = OrderedDict()  # key -> program, last called last
        self._last_prog = None
        self._fast: dict = {}    # _fast_key(args) -> a cached program's _FastCall
        self._fast_hits = itertools.count()  # hits on the short path (next() is atomic)
        functools.update_wrapper(self, fn)

    def _bind_call(self, args, kwargs, loc):
        """(positional, keyword-only) arguments in the function's parameter order. Positional
        parameters are passed by position (a gap before a later one takes its default), so
        `fn(a, b)` and `fn(a, b=b)` make the same call."""
        if not kwargs:
            return list(args), {}
        try:
            sig = inspect.signature(self.fn)
            bound = sig.bind(*args, **kwargs)
        except (TypeError, ValueError) as e:
            raise TraceError(_python_binding_message(self.fn, args, kwargs) or
                             f"{getattr(self.fn, '__name__', 'f')}: {e}", loc) from None
        given = bound.arguments
        params = list(sig.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                      p.POSITIONAL_OR_KEYWORD)]
        upto = max((i + 1 for i, p in enumerate(positional) if p.name in given), default=0)
        out = [given[p.name] if p.name in given else p.default for p in positional[:upto]]
        keywords = {}
        for p in params:
            if p.name not in given:
                continue
            if p.kind == p.VAR_POSITIONAL:
                out += list(given[p.name])
            elif p.kind == p.KEYWORD_ONLY:
                keywords[p.name] = given[p.name]
            elif p.kind == p.VAR_KEYWORD:  # sorted: one cache entry whatever the order
                keywords.update(sorted(given[p.name].items()))
        return out, keywords

    def lower(self, *args, **kwargs) -> Program:
        """The compiled program for these arguments' signature, without running it."""
        loc = _tr.user_loc()
        args, kwargs = self._bind_call(args, kwargs, loc)
        return self._lower(args, kwargs, loc)

    def _lower(self, args, kwargs, loc, call=False) -> Program:
        return self._lower_bound(args, kwargs, loc, call)[0]

    def _lower_bound(self, args, kwargs, loc, call=False):
        """(the program for these arguments, their arrays bound to its graph inputs)."""
        values = tuple(args) + tuple(kwargs.values())
        positional = self._positional_names.get(len(args))
        if positional is None:  # (inspect.signature costs ~20 us: once per arity, not per call)
            positional = self._positional_names[len(args)] = _param_names(self.fn, len(args))
        names = positional + list(kwargs)
        for i, (name, a) in enumerate(zip(names, values)):
            _check_arg(i, name, a, loc)  # before the cache lookup: a list isn't hashable
        sig, arrays = _bind(values, names, loc)
        key = (sig, tuple(kwargs))
        prog = self._cache.get(key)
        reason = None
        if prog is not None:
            changed = prog.changed_capture()
            if changed is not None:
                reason, prog = f"{changed} changed since tracing", None
            else:
                stale = prog.stale_state()
                if stale is not None:
                    reason, prog = stale, None
        elif self._last_key is not None:
            reason = self._what_changed(self._last_key, key, names)
        traced = False
        if prog is None:
            with _COMPILE_LOCK:
                # Another thread may have built it while this one waited.
                prog = self._cache.get(key)
                if prog is not None and (prog.changed_capture() is not None
                                         or prog.stale_state() is not None):
                    prog = None
                if prog is None:
                    prog = self._build(values, names, kwargs, loc)
                    self._cache[key] = prog
                    self.traces += 1
                    traced = True
                    if reason is not None:
                        self._retraces += 1
                        self._note_retrace(reason, loc)
        self._last_key = key
        if call or traced:
            self._count(key, prog, traced)
        return prog, arrays

    def _build(self, values, names, kwargs, loc) -> Program:
        loc = loc.resolve() if isinstance(loc, _tr.CallSite) else loc  # (kept by the graph)
        positional = values[:len(values) - len(kwargs)]
        try:  # once per trace: a call that doesn't bind fails as Python would, at its line
            inspect.signature(self.fn).bind(*positional, **kwargs)
        except TypeError:
            message = _python_binding_message(self.fn, positional, kwargs)
            if message is not None:
                raise TraceError(message, loc) from None
        except ValueError:  # (no signature to check against)
            pass
        with _no_gc():
            graph, sig = _trace(self.fn, values, loc, kwnames=tuple(kwargs),
                                distributed=self.options.distributed)
            prog = build_program(graph, sig, self.options, names)
        prog._bind_call = self._bind_call
        return prog

    def _count(self, key, prog, traced):
        """A call's (or a trace's) statistics; a signature called after another one becomes the
        most recent with arenas, and past ARENA_LIMIT the least recent gives its arenas back."""
        idle = []
        with self._lock:
            if traced:
                self._misses += 1
            else:
                self._hits += 1
            if prog is not self._last_prog:  # (the same signature again: nothing moves)
                self._last_prog = prog
                lru = self._with_arenas
                old = lru.pop(key, None)
                if old is not None and old is not prog:
                    idle.append(old)  # traced again (a captured array changed)
                lru[key] = prog
                while len(lru) > ARENA_LIMIT:
                    idle.append(lru.popitem(last=False)[1])
        for p in idle:  # (outside the lock: the gpu's release waits for a call in flight)
            _release_arenas(p)

    def cache_info(self) -> CacheInfo:
        """Hits (calls that found their program), misses (traces), maxsize (None: programs are
        kept), currsize (programs cached), arenas and arena_bytes (idle arenas held)."""
        with self._lock:
            held = [getattr(p._exec, "idle_arena_bytes", lambda: 0)()
                    for p in list(self._cache.values())]
            fast = int(repr(self._fast_hits)[6:-1])  # "count(n)": read, not advanced
            return CacheInfo(self._hits + fast, self._misses, None, len(held),
                             sum(1 for b in held if b), sum(held))

    def clear_cache(self) -> None:
        """Drop every cached program and its arenas (a call in flight finishes on its own);
        the next call traces again. The statistics start again from zero."""
        with self._lock:
            progs = list(self._cache.values())
            self._cache = {}
            self._with_arenas = OrderedDict()
            self._hits = self._misses = 0
            self._fast, self._fast_hits = {}, itertools.count()
            self._last_key = self._last_prog = None
        for p in progs:
            _release_arenas(p)

    @staticmethod
    def _what_changed(old, new, names) -> str:
        (old_sig, old_kw), (new_sig, new_kw) = old, new
        if old_kw != new_kw or len(old_sig) != len(new_sig):
            return "a different set of arguments"
        for name, a, b in zip(names, old_sig, new_sig):
            if a == b:
                continue
            if a[0] == b[0] == "scalar":
                return f"argument '{name}' (Python scalar {a[2]!r} -> {b[2]!r})"
            return f"argument '{name}' ({_describe_sig(a)} -> {_describe_sig(b)})"
        return "an argument"

    def _note_retrace(self, reason, loc):
        retraces = self._retraces
        if retraces <= RETRACE_LIMIT or self._warned:
            return
        self._warned = True
        name = getattr(self.fn, "__name__", "f")
        warnings.warn_explicit(
            f"cc.compile: '{name}' was traced {self.traces} times ({retraces} retraces, more "
            f"than {RETRACE_LIMIT}); the last one because of {reason}. Each trace builds a new "
            "program: Python scalar arguments are compile-time constants (pass a 0-d array "
            "for a value that changes) and values captured from the enclosing scope are "
            "trace-time constants.", RetraceWarning, loc.file, loc.line)

    def __call__(self, *args, **kwargs):
        if not kwargs and not _tr._STACK and FAST_CALLS:
            # A layout seen before: the short path (Program._fast_entry), no binding or lookup.
            try:
                if len(args) == 1 and type(a := args[0]) is np.ndarray:  # (_fast_key's case)
                    fast = self._fast.get((a.shape, a.strides, a.dtype))
                else:
                    fast = self._fast.get(_fast_key(args))
            except Exception:  # noqa: BLE001 - an unhashable argument: the general path's
                fast = None
            if fast is not None:
                call = fast.call
                result = call(args) if call is not None else fast(args)
                if result is not _SLOW:
                    if fast.prog is self._last_prog:
                        next(self._fast_hits)
                    else:  # (another signature's program: the arenas' LRU moves)
                        self._count(fast.slow_key, fast.prog, False)
                    self._last_key = fast.slow_key
                    return result
        if _tr._STACK and _holds_tensor(args, kwargs):
            # Called inside another traced function on its tensors: traced inline, as part of
            # the caller's program (as nested `jax.jit` calls are).
            return self.fn(*args, **kwargs)
        loc = _tr.call_site()
        args, kwargs = self._bind_call(args, kwargs, loc)
        prog, arrays = self._lower_bound(args, kwargs, loc, call=True)
        if prog.distributed is not None:  # (its ranks compare the call's text first)
            return prog(*args, *kwargs.values())
        result = prog._run_bound(prog._with_states(arrays, loc), loc)
        if not kwargs and not _tr._STACK:
            fast = prog._fast_entry(args)
            if fast is not None and self._cache.get(fast.slow_key) is prog:
                if len(self._fast) >= FAST_LIMIT:
                    self._fast.clear()
                self._fast[fast.key] = fast
        return result

    def trace(self, *args, **kwargs) -> Graph:
        loc = _tr.user_loc()
        args, kwargs = self._bind_call(args, kwargs, loc)
        with _COMPILE_LOCK, _no_gc():
            return _trace(self.fn, tuple(args) + tuple(kwargs.values()), loc,
                          kwnames=tuple(kwargs), distributed=self.distributed)[0]


def _holds_tensor(args, kwargs) -> bool:
    def holds(x):
        if isinstance(x, Tensor):
            return True
        if isinstance(x, (list, tuple)):
            return any(map(holds, x))
        if isinstance(x, dict):
            return any(map(holds, x.values()))
        return False
    return holds(args) or holds(kwargs)


def _python_binding_message(fn, args, kwargs) -> str | None:
    """What Python itself says when `fn(*args, **kwargs)` doesn't bind ("f() got an unexpected
    keyword argument 'z'"; inspect's wording differs and checks in another order): a function
    with `fn`'s parameters and name, and an empty body, is called with the same arguments."""
    try:
        sig = inspect.signature(fn)
        params = [p.replace(annotation=p.empty,
                            default=None if p.default is not p.empty else p.empty)
                  for p in sig.parameters.values()]
        source = f"def {fn.__name__ if fn.__name__.isidentifier() else 'f'}" \
                 f"{sig.replace(parameters=params, return_annotation=sig.empty)}: pass"
        scope: dict = {}
        exec(source, scope)  # (only the parameter list is ours: names and None defaults)
        proxy = next(v for k, v in scope.items() if k != "__builtins__")
        proxy.__qualname__ = getattr(fn, "__qualname__", proxy.__name__)
        proxy.__code__ = proxy.__code__.replace(co_name=fn.__name__,
                                                co_qualname=proxy.__qualname__)
        proxy(*args, **kwargs)
    except TypeError as e:
        return str(e)
    except Exception:  # noqa: BLE001 - no signature to copy: the caller's fallback wording
        return None
    return None


def _release_arenas(prog):
    release = getattr(prog._exec, "release", None)
    if release is not None:
        release()


def compile(fn=None, *, backend="cpu", inplace="auto", donate=(), sanitize=None,
            schedule="auto", distributed=None, fuse=None, recompute="auto", threads=None,
            memory_budget=None):
    """Compile a function written against the traced Tensor API. Usable as `cc.compile(fn)`,
    `@cc.compile` or `@cc.compile(backend=..., inplace=..., donate=...)`.

    `backend`: "cpu" (default; native code through llvmlite), "numpy" (the reference
    executor) or "gpu" (CUDA C run by CuPy; lowering needs no device).
    `sanitize=True` runs the planned program with every dead buffer poisoned (also switched
    on for every program by the environment variable COMPILER_SANITIZE=1). `schedule="auto"`
    reorders the program to lower its peak (passes.schedule; never above the written order's
    plan); `"off"` keeps the order as written, so that its plan stays inspectable.
    `distributed=cc.distributed.mpi(comm)` makes the function the per-rank step of
    data-parallel training: every leaf's gradient is averaged over the ranks between
    `backward()` and its first use (compiler.distributed).
    `fuse` (passes.fusion): elementwise chains and trees run as one fused node; None (the
    default) means on for the native backends ("cpu", "gpu"), off for "numpy".
    `recompute="auto"` computes cheap elementwise forward values again in the backward pass
    where that lowers the peak (passes.recompute; the report lists each decision); `"off"`
    keeps every forward value the backward pass reads.
    `threads` (cpu backend): the threads a call's loops, reductions, row kernels and GEMMs run
    on; None: the COMPILER_THREADS environment variable, else the cores this process may use.
    Results are bit-identical for any value.
    `memory_budget` (bytes beyond the caller's arrays, or a string like "12MiB"): the plan
    with the least extra work whose planned peak fits, else `MemoryBudgetError` before anything
    runs (passes.budget)."""
    if fn is None:
        return lambda f: CompiledFunction(f, backend, inplace, donate, sanitize, schedule,
                                          distributed, fuse, recompute, threads, memory_budget)
    return CompiledFunction(fn, backend, inplace, donate, sanitize, schedule, distributed, fuse,
                            recompute, threads, memory_budget)
