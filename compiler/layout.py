"""Element layouts of views, computed by numpy itself on zero-byte "probe" arrays.

A probe is a uint8 array over a 1-byte buffer with element-unit strides: applying a view op to
it with numpy gives the view's real strides and offset without touching memory. The tracer uses
this to decide whether a reshape can be a view; the alias analysis uses it to know exactly
which elements of a buffer each view covers.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .ops import REGISTRY, VIEW
from .ops.shape_ops import numpy_index

_BYTE = np.zeros(1, np.uint8)
_BASE_ADDRESS = _BYTE.__array_interface__["data"][0]


_PROBES: dict[tuple, np.ndarray] = {}


def contiguous_probe(shape) -> np.ndarray:
    """The layout of a row-major buffer of `shape` (probes are read-only: cached per shape)."""
    shape = tuple(int(d) for d in shape)
    probe = _PROBES.get(shape)
    if probe is None:
        probe = _PROBES[shape] = _contiguous_probe(shape)
    return probe


def _contiguous_probe(shape) -> np.ndarray:
    strides, acc = [], 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return as_strided(_BYTE, tuple(int(d) for d in shape), tuple(reversed(strides)))


def apply_view(probe: np.ndarray, op: str, attrs: dict):
    """`op(probe)` as a numpy view, or None when `op` is a reshape the strides can't express.
    Never copies, so it serves probes (layouts) and real arrays (the arena executor) alike."""
    if op == "reshape":
        out = probe.view()
        try:
            out.shape = tuple(attrs["shape"])
        except AttributeError:
            return None
        return out
    if op == "transpose":
        return probe.transpose(attrs["perm"])
    if op == "slice":
        return probe[numpy_index(attrs["index"])]
    if op == "expand":
        # broadcast_to's view is read-only; an expand that broadcasts nothing may be written.
        b = np.broadcast_to(probe, tuple(attrs["shape"]))
        return as_strided(probe, b.shape, b.strides)
    if op == "detach":
        return probe
    raise KeyError(f"{op} is not a view op")


def region(probe: np.ndarray) -> tuple:
    """(offset, shape, strides) in elements: equal regions cover exactly the same elements in
    the same order."""
    offset = probe.__array_interface__["data"][0] - _BASE_ADDRESS
    return offset, probe.shape, probe.strides


def overlaps_itself(probe: np.ndarray) -> bool:
    """True for stride-0 (expanded) views, where several elements share one location."""
    return any(s == 0 and d > 1 for s, d in zip(probe.strides, probe.shape))


def extent(probe: np.ndarray) -> tuple[int, int]:
    """[first, last] element offset a view can touch."""
    offset, shape, strides = region(probe)
    if 0 in shape:
        return offset, offset - 1
    lo = offset + sum((d - 1) * s for d, s in zip(shape, strides) if s < 0)
    hi = offset + sum((d - 1) * s for d, s in zip(shape, strides) if s > 0)
    return lo, hi


def element_offsets(probe: np.ndarray) -> np.ndarray:
    """The set of element offsets a view covers (for overlap tests on small shapes)."""
    offset, shape, strides = region(probe)
    idx = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), int)
    return np.unique(offset + (np.asarray(strides)[:, None] * idx).sum(axis=0))


def view_chain(value):
    """(root, [(op, attrs), ...]): the view ops that derive `value` from the buffer it views."""
    chain = []
    while value.producer is not None and REGISTRY[value.producer.op].kind == VIEW:
        chain.append((value.producer.op, value.producer.attrs))
        value = value.producer.inputs[0]
    return value, chain[::-1]


def value_probe(value) -> np.ndarray:
    """The layout of `value` inside the buffer of its view root."""
    root, chain = view_chain(value)
    probe = contiguous_probe(root.shape)
    for op, attrs in chain:
        probe = apply_view(probe, op, attrs)
        assert probe is not None, f"a reshape view of a non-contiguous layout in {value!r}"
    return probe
