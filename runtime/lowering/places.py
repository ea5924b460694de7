"""Where every value of a planned graph lives: a buffer slot, an element offset, strides.

A `Place` is what the emitted code needs to address a tensor: the slot names the pointer the
entry function hands to a kernel (the arena at a planned offset, a caller's input, a per-call
output buffer, or a module constant), and offset/strides are in elements of the value's dtype.
The rules mirror `runtime.arena.ArenaExecutable` exactly, so both backends run the same plan:

  - an input is its caller's (C-contiguous) array;
  - a view is its operand's place with the view applied (numpy computes the strides on a
    zero-byte probe, `compiler.layout.apply_view`): views cost no code;
  - an op the plan runs in place has the place of the input it takes (which may be a strided
    view: an in-place kernel writes through the same layout it reads);
  - a gradient packed into a bucket is contiguous at its slot's offset (`plan.packed`);
  - any other value is contiguous at the start of its own buffer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from compiler.layout import apply_view
from compiler.ops import REGISTRY, VIEW

_BYTE = np.zeros(1, np.uint8)
_BASE = _BYTE.__array_interface__["data"][0]


@dataclass(frozen=True)
class Place:
    slot: tuple            # ("arena", buffer id) | ("input", k) | ("output", j) | ("const", n)
    offset: int            # elements
    shape: tuple
    strides: tuple         # elements
    dtype: np.dtype

    def region(self, index_op: str, attrs: dict) -> Place:
        """This place with a view op applied (same slot)."""
        probe = as_strided(_BYTE, self.shape, self.strides)
        out = apply_view(probe, index_op, attrs)
        if out is None:
            raise NotImplementedError(f"{index_op} of a layout it can't view: {self}")
        delta = out.__array_interface__["data"][0] - _BASE
        return Place(self.slot, self.offset + delta, tuple(out.shape), tuple(out.strides),
                     self.dtype)

    def with_dtype(self, dtype) -> Place:
        return Place(self.slot, self.offset, self.shape, self.strides, np.dtype(dtype))


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


def buffer_slots(graph, plan) -> dict:
    """Buffer (by id) -> slot, and the ordered list of per-call output buffers."""
    slots, outputs = {}, []
    input_index = {id(v): k for k, v in enumerate(graph.inputs)}
    for b in plan.buffers:
        if b.kind == "input":
            slots[b.id] = ("input", input_index[id(b.values[0])])
        elif b.kind == "output":
            slots[b.id] = ("output", len(outputs))
            outputs.append(b)
        else:
            slots[b.id] = ("arena", b.id)
    return slots, outputs


def compute_places(graph, plan) -> dict:
    """id(value) -> Place for every value of `graph` under `plan`."""
    slots, _ = buffer_slots(graph, plan)
    places = {}
    for v in graph.inputs:
        places[id(v)] = Place(slots[plan.buffer_of[v].id], 0, v.shape,
                              contiguous_strides(v.shape), v.dtype)
    for node in graph.nodes:
        out = node.out
        kind = REGISTRY[node.op].kind
        if kind == VIEW:
            places[id(out)] = places[id(node.inputs[0])].region(node.op, node.attrs)
        elif node in plan.reuse:
            src = places[id(node.inputs[plan.reuse[node]])]
            assert src.shape == out.shape, f"plan bug: {node} reuses a differently shaped input"
            places[id(out)] = src.with_dtype(out.dtype)
        else:  # (a gradient packed into a bucket: at its slot, plan.packed)
            places[id(out)] = Place(slots[plan.buffer_of[out].id],
                                    plan.packed.get(out, 0) // out.dtype.itemsize, out.shape,
                                    contiguous_strides(out.shape), out.dtype)
        assert places[id(out)].slot == slots[plan.buffer_of[out].id], \
            f"plan bug: {node} is not placed in its planned buffer"
    return places
