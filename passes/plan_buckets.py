"""Data-parallel gradient buckets in the memory plan: which gradients are computed straight
into their slot of a bucket's buffer (`packable_gradients`, used by passes.memory_plan when it
builds buffers) and the planned `Bucket`s the report and the runtime read."""
from __future__ import annotations

from dataclasses import dataclass

from compiler.ir import Graph, Node
from compiler.ops import REGISTRY, VIEW, workspace_bytes


@dataclass
class Bucket:
    """One all-reduced bucket of gradients, as planned: where it is packed, where its
    reduction starts and where it is waited on (program points), and which of its gradients
    were computed straight into their slot (`packed`) rather than copied there."""

    bucket: int
    nbytes: int
    gradient_bytes: int
    names: tuple
    pack_point: int
    start_point: int
    wait_point: int
    packed: int               # gradients computed in their slot
    copied: tuple             # names of those copied into it
    in_place: bool            # start and wait run over the bucket's own buffer
    buffer: int

    @property
    def text(self) -> str:
        between = self.wait_point - self.start_point - 1
        where = "in place in the bucket" if self.in_place else "NOT in place (copies)"
        copied = f"; copied in: {', '.join(self.copied)}" if self.copied else ""
        return (f"bucket {self.bucket}: {self.nbytes} B [{', '.join(self.names)}] in buffer "
                f"#{self.buffer}; packed at [{self.pack_point}], Iallreduce started at "
                f"[{self.start_point}], waited at [{self.wait_point}] ({between} nodes between); "
                f"{self.packed}/{len(self.names)} gradients computed in their slot{copied}; "
                f"reduced {where}")

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "bucket", "nbytes", "gradient_bytes", "names", "pack_point", "start_point",
            "wait_point", "packed", "copied", "in_place", "buffer")}


def communication_buckets(graph: Graph, buffer_of, reuse, packed) -> list[Bucket]:
    point = {id(n): t for t, n in enumerate(graph.nodes)}
    by_bucket: dict[int, dict] = {}
    for n in graph.nodes:
        if n.op in ("bucket_pack", "allreduce_start", "allreduce_wait"):
            by_bucket.setdefault(n.attrs["bucket"], {})[n.op] = n
    out = []
    packed_roots = set(packed)
    for k in sorted(by_bucket):
        ops = by_bucket[k]
        pack, start, wait = ops["bucket_pack"], ops["allreduce_start"], ops["allreduce_wait"]
        names = pack.attrs.get("names") or tuple(v.ref() for v in pack.inputs)
        in_slot = []
        for v in pack.inputs:
            while v not in packed_roots and v.producer is not None and v.producer.op == "reshape":
                v = v.producer.inputs[0]
            in_slot.append(v in packed_roots)
        out.append(Bucket(k, pack.out.nbytes, sum(v.nbytes for v in pack.inputs), names,
                          point[id(pack)], point[id(start)], point[id(wait)], sum(in_slot),
                          tuple(n for n, ok in zip(names, in_slot) if not ok),
                          reuse.get(start) == 0 and reuse.get(wait) == 0,
                          buffer_of[pack.out].id))
    return out



def packable_gradients(graph: Graph, reuse: dict[Node, int]) -> dict:
    """Gradients that can be computed straight into their bucket's slot: Value -> (the
    bucket_pack node, byte offset). The pack (through reshapes) must be the value's only
    reader (the all-reduce then overwrites nothing another node needs), and the value must
    open its own buffer (not a view, an input, a returned value or an in-place result)."""
    users = graph.users()
    kept = {id(v) for v in graph.live_outputs()}
    packed: dict = {}
    for node in graph.nodes:
        if node.op != "bucket_pack":
            continue
        for v, off in zip(node.inputs, node.attrs["offsets"]):
            if len(users[v]) != 1 or id(v) in kept:
                continue
            # A bias gradient is a reshape of a sum: pack the summed value (a reshape of a
            # fresh value is contiguous, so it lies in the slot as the flat gradient does).
            while v.producer is not None and v.producer.op == "reshape" and \
                    len(users[v.producer.inputs[0]]) == 1 and id(v.producer.inputs[0]) not in kept:
                v = v.producer.inputs[0]
            p = v.producer
            if p is None or REGISTRY[p.op].kind == VIEW or p in reuse or v in packed \
                    or workspace_bytes(p):
                continue
            packed[v] = (node, off * v.dtype.itemsize)
    return packed
