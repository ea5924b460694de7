"""Schedule and liveness over the whole program (forward, backward and update alike).

Guarantees: with the schedule = program order (node index), `defined[v]` is the index of `v`'s
producer (-1 for graph inputs); `readers[r]` lists, for every buffer root `r` (see
`passes.alias`), the indices of the non-view nodes that read `r` or any view of it, sorted, plus
`end` (= number of nodes) when `r` or a view of it is returned or is an input's final value.
Creating a view is not a use; consuming or returning it is. `last_use[r]` is the last of those
readers (or `defined[r]` when nothing reads it).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from compiler.ir import Graph, Value
from compiler.ops import REGISTRY, VIEW

from .alias import AliasInfo, alias_analysis


@dataclass
class Liveness:
    end: int
    defined: dict[Value, int]
    readers: dict[Value, list[int]]
    last_use: dict[Value, int]

    def read_after(self, root: Value, index: int) -> list[int]:
        """Indices of the reads of `root`'s buffer scheduled after node `index`."""
        readers = self.readers[root]
        return readers[bisect_right(readers, index):]


def liveness(graph: Graph, aliases: AliasInfo | None = None) -> Liveness:
    """When each buffer root is defined and read, over the whole program in program order
    (see the module docstring). `aliases` defaults to `alias_analysis(graph)`."""
    aliases = aliases or alias_analysis(graph)
    end = len(graph.nodes)
    defined = {v: -1 for v in graph.inputs}
    readers: dict[Value, set[int]] = {r: set() for r in aliases.members}
    for i, node in enumerate(graph.nodes):
        defined[node.out] = i
        if REGISTRY[node.op].kind == VIEW:
            continue
        for v in node.inputs:
            readers[aliases.root[v]].add(i)
    for v in graph.live_outputs():
        readers[aliases.root[v]].add(end)
    sorted_readers = {r: sorted(ks) for r, ks in readers.items()}
    last_use = {r: (ks[-1] if ks else defined[r]) for r, ks in sorted_readers.items()}
    return Liveness(end, defined, sorted_readers, last_use)
