"""Alias analysis: which values share storage through views.

Guarantees: `root[v]` is the value whose buffer `v` views (`v` itself when `v` is not a view);
`members[r]` lists `r` and every value that views it, transitively, in program order;
`probe[v]` is `v`'s element layout inside its root's buffer (see `compiler.layout`). Every
VIEW-kind op (reshape, transpose, slice, expand, detach) is an alias edge; nothing else is.
Which *non-view* values share a buffer is decided later, by the reinplace pass.

Algorithm: one forward walk; a view node's output inherits its input's root and gets the
input's probe with the view applied.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.ir import Graph, Value
from compiler.layout import apply_view, contiguous_probe
from compiler.ops import REGISTRY, VIEW


@dataclass
class AliasInfo:
    root: dict[Value, Value]
    members: dict[Value, list[Value]]
    probe: dict[Value, np.ndarray]

    def aliases(self, v: Value) -> list[Value]:
        """Every value sharing `v`'s buffer through views (including `v` and its root)."""
        return self.members[self.root[v]]


def alias_analysis(graph: Graph) -> AliasInfo:
    """Which values of `graph` share a buffer through views (see the module docstring).
    Returns `AliasInfo`: `root[v]`, the value whose buffer `v` views; `members[r]`, `r` and
    every view of it in program order (`aliases(v)`: those of `v`'s root); `probe[v]`, `v`'s
    element layout inside that buffer. Reads the graph only."""
    root, members, view_of = {}, {}, {}
    for v in graph.inputs:
        root[v], members[v] = v, [v]
    for node in graph.nodes:
        out = node.out
        if REGISTRY[node.op].kind == VIEW:
            src = node.inputs[0]
            root[out] = root[src]
            members[root[out]].append(out)
            view_of[out] = node
        else:
            root[out], members[out] = out, [out]
    return AliasInfo(root, members, _Probes(view_of))


class _Probes(dict):
    """`probe[v]`, computed when first read: most passes read only `root` and `members`, and
    a probe per value was most of this analysis's time on a 12-layer GPT's graph."""

    def __init__(self, view_of):
        super().__init__()
        self.view_of = view_of

    def __missing__(self, v):
        chain = []  # v and the views it is made through, up to a known layout or a root
        while v not in self and v in self.view_of:
            chain.append(v)
            v = self.view_of[v].inputs[0]
        if v not in self:
            self[v] = contiguous_probe(v.shape)
        for w in reversed(chain):
            node = self.view_of[w]
            p = apply_view(self[node.inputs[0]], node.op, node.attrs)
            assert p is not None, f"reshape view of a non-contiguous layout: {node}"
            self[w] = p
        return self[chain[0]] if chain else self[v]
