"""`cc.save(obj, path)` / `cc.load(path)`: a (nested) state dict of NumPy arrays as one `.npz`.

`obj` is a dict (a layer's `state_dict()`, an optimizer's, or a dict of several), whose values
are arrays, nested dicts, lists or tuples, or Python scalars (int, float, bool, str, None).
Keys are kept as they are, dots included (`fc1.weight`): the tree is stored as a JSON
manifest beside the arrays (entries `a0`, `a1`, ...), so no key is ever split or escaped. The
round trip is exact (bytes, dtypes, shapes, key order); loading never unpickles.

    cc.save(net.state_dict(), "net.npz")
    net.set_state_dict(cc.load("net.npz"))
"""
from __future__ import annotations

import json
import numbers
import os

import numpy as np

from . import tracer as _tr
from .errors import DataError, TraceError

__all__ = ["save", "load"]

_MANIFEST = "__tree__"
_FORMAT = "inplace-compiler-state/1"


def save(obj, path) -> None:
    """Write `obj` (see the module docstring) to `path` (written as given: no `.npz` is
    appended)."""
    arrays: dict[str, np.ndarray] = {}

    def encode(x, where):
        if isinstance(x, np.ndarray):
            name = f"a{len(arrays)}"
            if x.dtype.hasobject:
                raise TraceError(f"cc.save: {where} is an object array", _tr.user_loc())
            arrays[name] = np.asarray(x)  # (a Parameter is saved as its plain array)
            return {"array": name}
        if isinstance(x, dict):
            items = []
            for k, v in x.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TraceError(f"cc.save: key {k!r} of {where} is not a str or an int",
                                     _tr.user_loc())
                items.append([k, encode(v, f"{where}[{k!r}]")])
            return {"dict": items}
        if isinstance(x, (list, tuple)):
            kind = "list" if isinstance(x, list) else "tuple"
            return {kind: [encode(v, f"{where}[{i}]") for i, v in enumerate(x)]}
        if x is None or isinstance(x, (bool, str)):
            return {"value": x}
        if isinstance(x, numbers.Integral):
            return {"value": int(x)}
        if isinstance(x, numbers.Real):
            return {"float": float(x).hex()}  # (exact, inf and nan included)
        raise TraceError(f"cc.save: {where} is a {type(x).__name__}: only arrays, dicts, lists, "
                         "tuples and Python scalars are saved", _tr.user_loc())

    tree = encode(obj, "the object")
    manifest = json.dumps({"format": _FORMAT, "tree": tree})
    with open(os.fspath(path), "wb") as f:
        np.savez(f, **{_MANIFEST: np.array(manifest)}, **arrays)


def load(path):
    """The object `save` wrote to `path`: dicts, lists, tuples and scalars as saved, arrays as
    plain writable ndarrays."""
    with np.load(os.fspath(path), allow_pickle=False) as data:
        if _MANIFEST not in data.files:
            raise DataError(f"cc.load: {os.fspath(path)} was not written by cc.save (no "
                            "manifest)", _tr.user_loc())
        manifest = json.loads(str(data[_MANIFEST]))
        if manifest.get("format") != _FORMAT:
            raise DataError(f"cc.load: {os.fspath(path)} has format "
                            f"{manifest.get('format')!r}, not {_FORMAT!r}", _tr.user_loc())

        def decode(node):
            (kind, value), = node.items()
            if kind == "array":
                return np.array(data[value])
            if kind == "dict":
                return {k: decode(v) for k, v in value}
            if kind == "list":
                return [decode(v) for v in value]
            if kind == "tuple":
                return tuple(decode(v) for v in value)
            if kind == "float":
                return float.fromhex(value)
            return value
        return decode(manifest["tree"])
