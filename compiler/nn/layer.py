"""`nn.Layer` and `nn.Parameter`: Paddle's layer base, over NumPy arrays the layer owns.

A layer's parameters and buffers are NumPy arrays. Outside a trace, `layer.weight` is that array
(a `Parameter`: an ndarray with a Paddle-style `.name` and `.stop_gradient`). Inside a trace
(`cc.compile`), reading it gives `compiler.tensor.state_tensor(array, ...)`: the program takes
the array as an extra input on every call, so an optimizer's in-place update or BatchNorm's
running statistics reach the layer's own array, and new values never retrace. A change of the
layer's structure (an attribute set, `train()` / `eval()`, a parameter replaced or frozen)
makes the programs that read it retrace (their guard fails).

Calling a layer outside any trace on NumPy arrays runs its `forward` through a compiled
function the layer keeps (traced once per input signature and mode), returning NumPy arrays.
"""
from __future__ import annotations

import contextlib
import importlib
import re
import warnings
from collections import OrderedDict

import numpy as np

from .. import tracer as _tr
from ..errors import ShapeError, TraceError
from ..ops.registry import dkind
from ..tensor import state_tensor
from . import initializer as _init

__all__ = ["Layer", "ParamAttr", "Parameter", "get_default_dtype", "set_default_dtype",
           "unique_name_guard"]

_DEFAULT_DTYPE = [np.dtype(np.float32)]


def set_default_dtype(dtype) -> None:
    """The dtype of the parameters of layers built from now on (Paddle's
    `paddle.set_default_dtype`): float32 unless changed."""
    dtype = np.dtype(dtype)
    if dkind(dtype) != "f":
        raise TraceError(f"set_default_dtype: {dtype} is not a float dtype", _tr.user_loc())
    _DEFAULT_DTYPE[0] = dtype


def get_default_dtype() -> np.dtype:
    return _DEFAULT_DTYPE[0]


# -- unique names, as Paddle's unique_name.generate: "linear" -> linear_0, linear_1, ... --------
_NAME_COUNTS: list[dict] = [{}]


def _unique(key: str) -> str:
    counts = _NAME_COUNTS[-1]
    k = counts.get(key, 0)
    counts[key] = k + 1
    return f"{key}_{k}"


@contextlib.contextmanager
def unique_name_guard():
    """Fresh name counters inside (layers built inside are named linear_0, ... again), as
    Paddle's `paddle.utils.unique_name.guard()`."""
    _NAME_COUNTS.append({})
    try:
        yield
    finally:
        _NAME_COUNTS.pop()


def _snake(name: str) -> str:
    # Paddle's _convert_camel_to_snake: BatchNorm2D -> batch_norm2d, MultiHeadAttention ->
    # multi_head_attention (so parameter names match Paddle's: batch_norm2d_0.w_0)
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


# -- Parameter --------------------------------------------------------------------------------
class Parameter(np.ndarray):
    """A layer's trainable array: an ndarray with `.name` (Paddle's unique name, e.g.
    `linear_0.w_0`) and `.stop_gradient` (False: the optimizer updates it; True freezes it),
    and from its ParamAttr Paddle's `optimize_attr` ({"learning_rate": ...}), `regularizer`
    and `need_clip`.
    Arithmetic, NumPy functions and indexing on it give plain ndarrays; in-place operations
    (`p -= g`, `p[...] = v`, `np.copyto(p, v)`) write into it."""

    def __new__(cls, value, name: str | None = None, stop_gradient: bool = False):
        p = np.array(value, copy=True, order="C").view(cls)
        p.name = name
        p._stop_gradient = bool(stop_gradient)
        return p

    def __array_finalize__(self, obj):
        self.name = getattr(obj, "name", None)
        self._stop_gradient = getattr(obj, "_stop_gradient", False)
        self.optimize_attr = getattr(obj, "optimize_attr", {"learning_rate": 1.0})
        self.regularizer = getattr(obj, "regularizer", None)
        self.need_clip = getattr(obj, "need_clip", True)

    @property
    def stop_gradient(self) -> bool:
        return self._stop_gradient

    @stop_gradient.setter
    def stop_gradient(self, value):
        value = bool(value)
        if value != self._stop_gradient:
            self._stop_gradient = value
            _tr.state_changed()  # programs that read it as trainable (or not) must retrace

    @property
    def trainable(self) -> bool:
        return not self._stop_gradient

    @trainable.setter
    def trainable(self, value):
        self.stop_gradient = not value

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        args = [x.view(np.ndarray) if isinstance(x, Parameter) else x for x in inputs]
        if out is not None:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, Parameter) else o
                                  for o in out)
        result = getattr(ufunc, method)(*args, **kwargs)
        if out is not None and method != "at":
            return out[0] if len(out) == 1 else out  # `p -= g` keeps p
        return result

    def __array_function__(self, func, types, args, kwargs):
        def plain(x):
            if isinstance(x, Parameter):
                return x.view(np.ndarray)
            if isinstance(x, (list, tuple)):
                return type(x)(plain(v) for v in x)
            return x
        return func(*plain(args), **{k: plain(v) for k, v in kwargs.items()})

    def __getitem__(self, index):
        return self.view(np.ndarray)[index]

    def numpy(self) -> np.ndarray:
        """A plain copy (Paddle's `Tensor.numpy()`)."""
        return np.array(self.view(np.ndarray))

    def __reduce__(self):
        rebuild, args, state = super().__reduce__()
        return rebuild, args, (state, self.name, self._stop_gradient, self.optimize_attr,
                               self.regularizer, self.need_clip)

    def __setstate__(self, state):
        base, self.name, self._stop_gradient, self.optimize_attr, self.regularizer, \
            self.need_clip = state
        super().__setstate__(base)

    def __repr__(self):
        return (f"Parameter({self.name}, shape={list(self.shape)}, dtype={self.dtype}, "
                f"stop_gradient={self._stop_gradient})\n{self.view(np.ndarray)!r}")


class ParamAttr:
    """Paddle's ParamAttr: the parameter's `name`, `initializer` and `trainable` (False: made
    with `stop_gradient=True`). `learning_rate` and `regularizer` are kept for the optimizer."""

    def __init__(self, name=None, initializer=None, learning_rate=1.0, regularizer=None,
                 trainable=True, do_model_average=True, need_clip=True):
        self.name, self.initializer, self.learning_rate = name, initializer, learning_rate
        self.regularizer, self.trainable, self.need_clip = regularizer, trainable, need_clip


# -- guards: is a program traced against this layer still valid? -----------------------------
class _Guard:
    """True while the layer is as traced: its structure version (attributes set), its mode
    (train/eval) and whether each of its parameters is frozen. Mode and freezing are compared,
    not versioned: a step traced in training mode is valid again after eval() ... train()."""
    __slots__ = ("frozen", "layer", "training", "version")

    def __init__(self, layer):
        d = layer.__dict__
        self.layer = layer
        self.version = d["_version"]
        self.training = d["training"]
        self.frozen = tuple((p, p._stop_gradient) for p in d["_parameters"].values()
                            if p is not None)

    def __call__(self) -> bool:
        d = self.layer.__dict__
        return d["_version"] == self.version and d["training"] == self.training and all(
            p._stop_gradient == f for p, f in self.frozen)

    def _key(self):
        return (id(self.layer), self.version, self.training,
                tuple(f for _, f in self.frozen))

    def __eq__(self, other):
        return isinstance(other, _Guard) and other.layer is self.layer and \
            other._key() == self._key()

    def __hash__(self):
        return hash(self._key())

    def __str__(self):
        return (f"layer '{self.layer._full_name}' ({type(self.layer).__name__}) changed since "
                "tracing (an attribute set, train()/eval(), a parameter frozen)")


# -- Layer ------------------------------------------------------------------------------------

class Layer:
    """Paddle's `nn.Layer`. Subclass it, create parameters and sublayers in `__init__` by
    assignment (`self.fc = nn.Linear(4, 2)`, `self.w = self.create_parameter([4])`), write
    `forward`, and call the layer. See the module docstring for what a parameter is inside and
    outside a trace."""

    def __init__(self, name_scope: str | None = None, dtype=None):
        d = self.__dict__
        d["_parameters"] = OrderedDict()
        d["_sub_layers"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_buffer_names"] = {}
        d["_non_persistable"] = set()
        d["_version"] = 0
        d["_full_name"] = _unique(name_scope or _snake(type(self).__name__))
        d["_dtype"] = np.dtype(dtype) if dtype is not None else _DEFAULT_DTYPE[0]
        d["_eager"] = None
        d["training"] = True

    # -- registration by assignment -------------------------------------------------------
    def _check_init(self):
        if "_parameters" not in self.__dict__:
            raise TraceError(f"{type(self).__name__}.__init__ must call super().__init__() "
                             "before assigning parameters or sublayers", _tr.user_loc())

    def __setattr__(self, name, value):
        d = self.__dict__
        if isinstance(value, (Parameter, Layer)) or name in d.get("_parameters", ()) or \
                name in d.get("_sub_layers", ()) or name in d.get("_buffers", ()):
            self._check_init()
            params, subs, bufs = d["_parameters"], d["_sub_layers"], d["_buffers"]
            old = params.get(name, subs.get(name, bufs.get(name)))
            if old is value and old is not None:
                return  # (`layer.w -= g` assigns the same array back: nothing changed)
            if _tr._STACK and old is not None and not isinstance(value, (Parameter, Layer)) \
                    and value is not None and not isinstance(value, np.ndarray):
                raise TraceError(f"'{name}' is the layer's array, read in this trace: write "
                                 f"its new value in place (`self.{name}[...] = value`), not "
                                 "by assignment", _tr.user_loc())
            if isinstance(value, Parameter):
                self._forget(name)
                params[name] = value
            elif isinstance(value, Layer):
                self._forget(name)
                subs[name] = value
            elif name in params:
                if value is not None:
                    raise TraceError(f"assignment to parameter '{name}' should be a "
                                     f"nn.Parameter or None, not {type(value).__name__}",
                                     _tr.user_loc())
                params[name] = None
            elif name in subs:
                if value is not None:
                    raise TraceError(f"assignment to sublayer '{name}' should be a nn.Layer "
                                     f"or None, not {type(value).__name__}", _tr.user_loc())
                subs[name] = None
            else:
                if value is not None and not isinstance(value, np.ndarray):
                    raise TraceError(f"assignment to buffer '{name}' should be a numpy array "
                                     f"or None, not {type(value).__name__}", _tr.user_loc())
                bufs[name] = value
        elif name == "training":
            self.__dict__["training"] = bool(value)
            _tr.state_changed()
            return
        else:
            object.__setattr__(self, name, value)
        self._changed()

    def _forget(self, name):
        d = self.__dict__
        for table in (d["_parameters"], d["_sub_layers"], d["_buffers"]):
            table.pop(name, None)
        d.pop(name, None)

    def __delattr__(self, name):
        d = self.__dict__
        if name in d["_parameters"] or name in d["_sub_layers"] or name in d["_buffers"]:
            self._forget(name)
        else:
            object.__delattr__(self, name)
        self._changed()

    def _changed(self):
        # Every program traced against the old structure must retrace.
        self.__dict__["_version"] = self.__dict__.get("_version", 0) + 1
        _tr.state_changed()

    def __getattr__(self, name):
        # Only called for names not in __dict__: parameters, sublayers and buffers.
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_sub_layers"):
            entries = d.get(table)
            if entries is not None and name in entries:
                value = entries[name]
                if not _tr._STACK or value is None:
                    return value
                if table == "_sub_layers":
                    self._guard_trace()
                    return value
                return self._state(table, name, value)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def _state(self, table, name, array):
        """Inside a trace: the Tensor standing for this layer's parameter or buffer."""
        if table == "_parameters":
            return state_tensor(array, array.name, trainable=not array._stop_gradient,
                                guard=_Guard(self))
        return state_tensor(array, self._buffer_names[name], guard=_Guard(self))

    def _guard_trace(self):
        guards = _tr._STACK[-1].guards
        g = _Guard(self)
        if g not in guards:
            guards.append(g)

    # -- creating parameters and buffers --------------------------------------------------
    def create_parameter(self, shape, attr=None, dtype=None, is_bias=False,
                         default_initializer=None):
        """A new Parameter named `<layer>.w_k` (`.b_k` for a bias), filled by `attr`'s
        initializer, else `default_initializer`, else Paddle's defaults: XavierUniform for a
        weight, Constant(0) for a bias. `attr=False` gives None (no parameter)."""
        if attr is False:
            return None
        if isinstance(attr, str):
            attr = ParamAttr(name=attr)
        attr = attr or ParamAttr()
        dtype = np.dtype(dtype) if dtype is not None else self._dtype
        init = attr.initializer or default_initializer or \
            (_init.Constant(0.0) if is_bias else _init.XavierUniform())
        name = attr.name or _unique(f"{self._full_name}.{'b' if is_bias else 'w'}")
        shape = [int(s) for s in shape]
        if any(s < 0 for s in shape):
            raise ShapeError(f"create_parameter: negative dimension in {shape}", _tr.user_loc())
        p = Parameter(init(shape, dtype), name=name, stop_gradient=not attr.trainable)
        # (what Paddle's optimizers and clipping read from a parameter)
        p.optimize_attr = {"learning_rate": attr.learning_rate}
        p.regularizer, p.need_clip = attr.regularizer, attr.need_clip
        return p

    def add_parameter(self, name: str, parameter):
        if parameter is not None and not isinstance(parameter, Parameter):
            raise TraceError(f"add_parameter: '{name}' must be a nn.Parameter, not "
                             f"{type(parameter).__name__}", _tr.user_loc())
        self._check_init()
        self._forget(name)
        self._parameters[name] = parameter
        self._changed()
        return parameter

    def add_sublayer(self, name: str, sublayer):
        self._check_init()
        self._forget(str(name))
        self._sub_layers[str(name)] = sublayer
        self._changed()
        return sublayer

    def register_buffer(self, name: str, tensor, persistable: bool = True):
        """`tensor`, a NumPy array the layer keeps and reads (not a parameter: no optimizer
        updates it). Persistable buffers are in `state_dict()`. The array itself is kept
        (in-place updates by a compiled step reach it)."""
        self._check_init()
        if tensor is not None and not isinstance(tensor, np.ndarray):
            raise TraceError(f"register_buffer: '{name}' must be a numpy array, not "
                             f"{type(tensor).__name__}", _tr.user_loc())
        self._forget(name)
        self._buffers[name] = tensor
        self._buffer_names[name] = f"{self._full_name}.{name}"
        if persistable:
            self._non_persistable.discard(name)
        else:
            self._non_persistable.add(name)
        self._changed()

    # -- walking the tree -----------------------------------------------------------------
    def full_name(self) -> str:
        return self._full_name

    def named_sublayers(self, prefix: str = "", include_self: bool = False, layers_set=None):
        layers_set = set() if layers_set is None else layers_set
        if include_self and id(self) not in layers_set:
            layers_set.add(id(self))
            yield prefix, self
        for key, layer in self._sub_layers.items():
            if layer is None:
                continue
            p = prefix + ("." if prefix else "") + key
            if id(layer) not in layers_set:
                layers_set.add(id(layer))
                yield p, layer
            yield from layer.named_sublayers(p, False, layers_set)

    def sublayers(self, include_self: bool = False) -> list:
        return [layer for _, layer in self.named_sublayers(include_self=include_self)]

    def named_children(self):
        seen = set()
        for key, layer in self._sub_layers.items():
            if layer is not None and id(layer) not in seen:
                seen.add(id(layer))
                yield key, layer

    def children(self):
        for _, layer in self.named_children():
            yield layer

    def _named(self, table, prefix, include_sublayers):
        layers = self.named_sublayers(prefix, include_self=True) if include_sublayers \
            else [(prefix, self)]
        seen = set()
        tracing = bool(_tr._STACK)
        for p, layer in layers:
            for key, value in layer.__dict__[table].items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                # inside a trace, as attribute reads: the Tensors the program computes with
                yield p + ("." if p else "") + key, \
                    layer._state(table, key, value) if tracing else value

    def named_parameters(self, prefix: str = "", include_sublayers: bool = True):
        yield from self._named("_parameters", prefix, include_sublayers)

    def parameters(self, include_sublayers: bool = True) -> list:
        """The layer's Parameters (its sublayers' too), each once, in registration order:
        the arrays, or inside a trace the Tensors reading them (as `layer.weight` is)."""
        return [p for _, p in self.named_parameters(include_sublayers=include_sublayers)]

    def named_buffers(self, prefix: str = "", include_sublayers: bool = True):
        yield from self._named("_buffers", prefix, include_sublayers)

    def buffers(self, include_sublayers: bool = True) -> list:
        return [b for _, b in self.named_buffers(include_sublayers=include_sublayers)]

    # -- state dicts ----------------------------------------------------------------------
    def state_dict(self, destination=None, include_sublayers: bool = True,
                   structured_name_prefix: str = "", use_hook: bool = True):
        """name -> array (the layer's own arrays, not copies): every parameter and
        persistable buffer, named by attribute path (`fc.weight`), as Paddle's."""
        out = OrderedDict() if destination is None else destination
        layers = self.named_sublayers(include_self=True) if include_sublayers \
            else [("", self)]
        for p, layer in layers:
            d = layer.__dict__
            for key, value in d["_parameters"].items():
                if value is not None:
                    out[structured_name_prefix + p + ("." if p else "") + key] = value
            for key, value in d["_buffers"].items():
                if value is not None and key not in d["_non_persistable"]:
                    out[structured_name_prefix + p + ("." if p else "") + key] = value
        return out

    def set_state_dict(self, state_dict, use_structured_name: bool = True):
        """Copy the values of `state_dict` INTO the layer's arrays (the arrays stay the same
        objects: compiled steps keep running without a retrace). Keys are attribute paths, or
        parameter names (`linear_0.w_0`) with `use_structured_name=False`. Returns (missing
        keys, unexpected keys), as Paddle; a shape that differs is a ShapeError, before any
        array is written."""
        own = self.state_dict()
        if not use_structured_name:
            own = OrderedDict((getattr(v, "name", None) or self._buffer_name_of(k), v)
                              for k, v in own.items())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        pairs = []
        for k, target in own.items():
            if k not in state_dict:
                continue
            value = np.asarray(state_dict[k])
            if value.shape != target.shape:
                raise ShapeError(f"set_state_dict: '{k}' has shape {list(value.shape)}, the "
                                 f"layer's is {list(target.shape)}", _tr.user_loc())
            pairs.append((target, value))
        for target, value in pairs:
            np.copyto(target.view(np.ndarray), value, casting="same_kind")
        if missing:
            warnings.warn(f"set_state_dict: no value for {missing}", stacklevel=2)
        return missing, unexpected

    load_dict = set_state_dict
    set_dict = set_state_dict

    def _buffer_name_of(self, path):
        *layers, key = path.split(".")
        layer = self
        for k in layers:
            layer = layer._sub_layers[k]
        return layer._buffer_names[key]

    def apply(self, fn):
        """`fn(layer)` for every sublayer, then this layer (Paddle's `apply`: custom
        initialisation, `net.apply(init_weights)`); returns self."""
        for layer in self.children():
            layer.apply(fn)
        fn(self)
        return self

    # -- modes ----------------------------------------------------------------------------
    def train(self):
        """Training mode for this layer and its sublayers (dropout drops, BatchNorm updates
        its running statistics). A program traced in the other mode retraces at its next call;
        one traced in this mode is valid again (train/eval switches per epoch don't retrace)."""
        self._set_mode(True)
        return self

    def eval(self):
        """Evaluation mode for this layer and its sublayers (see `train`)."""
        self._set_mode(False)
        return self

    def _set_mode(self, training: bool):
        changed = False
        for layer in self.sublayers(include_self=True):
            if layer.__dict__["training"] != training:
                layer.__dict__["training"] = training
                changed = True
        if changed:
            _tr.state_changed()  # (programs check their guards: the mode is in them)

    # -- calling --------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        if _tr._STACK:
            # traced inline: its ops become part of the caller's program
            self._guard_trace()
            return self.forward(*args, **kwargs)
        fn = self.__dict__["_eager"]
        if fn is None:
            # An eager call compiles, a driver job: the driver is looked up at this call (as
            # compiler/__init__ resolves its names), never imported by the front end's modules.
            driver = importlib.import_module("compiler.api")
            fn = self.__dict__["_eager"] = driver.compile(self.forward)
        return fn(*args, **kwargs)

    def __getstate__(self):
        # (copy.deepcopy, pickle: the compiled eager forward is rebuilt on the copy's first call)
        state = dict(self.__dict__)
        state["_eager"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for key, layer in self._sub_layers.items():
            sub = repr(layer).replace("\n", "\n  ")
            lines.append(f"  ({key}): {sub}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"

    def __dir__(self):
        d = self.__dict__
        return sorted(set(super().__dir__()) | set(d["_parameters"]) | set(d["_sub_layers"])
                      | set(d["_buffers"]))
