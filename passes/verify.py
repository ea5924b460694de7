"""The verifier: SSA well-formedness of a graph, and the soundness of a memory plan.

`verify_plan` re-derives everything it checks from the graph and the plan's buffer membership,
sharing no code with the planner's liveness or reinplace logic:
  1. every value is in exactly one buffer, a view in its input's, big enough for it;
  2. arena offsets are aligned and inside the arena;
  3. each buffer's interval covers every read of its values (through views) and their
     definitions; returned values and input mutations live to the end;
  4. no two arena buffers live at the same program point overlap in address range (a sweep
     over program points, O(n log n));
  5. inside one buffer, successive values never live at once: the older one's last read is
     at the node that overwrites it (an op writing element-for-element over its operand), or
     it is the write-back scatter that replaces exactly the region the newer value occupies;
     an output the plan lets write over an input (`plan.reuse`) is in that input's buffer.
  5a. a gradient packed into its bucket (`plan.packed`: compiler.ops.comm_ops) occupies its
     own slot inside the bucket, disjoint from the other slots, and its only read is the
     `bucket_pack` that makes the bucket (so the all-reduce over the bucket destroys nothing);
  6. every node that needs scratch memory has a workspace buffer in the arena, big enough,
     live at its point (and, by 4, overlapping nothing live there).
A failure raises `PlanError` with the IR around the offending node.
"""
from __future__ import annotations

from bisect import bisect_left

from compiler.ir import Graph, format_node, infer_type
from compiler.layout import apply_view, contiguous_probe, region
from compiler.ops import ELEMENTWISE, REGISTRY, SCATTER, VIEW, workspace_bytes


class PlanError(AssertionError):
    """An internal invariant of a graph or plan is broken (a compiler bug, not user error)."""


def _context(graph: Graph, index: int, radius: int = 3) -> str:
    lo, hi = max(0, index - radius), min(len(graph.nodes), index + radius + 1)
    return "\n".join(("> " if i == index else "  ") + f"[{i}] {format_node(graph.nodes[i])}"
                     for i in range(lo, hi))


def verify_graph(graph: Graph) -> None:
    """SSA: each value defined once, before use; types agree with the registry's rules."""
    defined = {id(v) for v in graph.inputs}
    rules: dict = {}  # (infer_type's answers: a chain repeats a few types thousands of times)
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if id(v) not in defined:
                raise PlanError(f"{v.ref()} used before definition\n{_context(graph, i)}")
        if n.op not in REGISTRY:
            raise PlanError(f"{n.out.ref()} uses unknown op {n.op!r}\n{_context(graph, i)}")
        shape, dtype = infer_type(n.op, [(v.shape, v.dtype) for v in n.inputs], n.attrs, rules)
        if tuple(shape) != n.out.shape or dtype != n.out.dtype:
            raise PlanError(f"type of {n.out.ref()} disagrees with {n.op}'s rule\n"
                            f"{_context(graph, i)}")
        if id(n.out) in defined:
            raise PlanError(f"{n.out.ref()} defined twice\n{_context(graph, i)}")
        defined.add(id(n.out))
    for v in graph.live_outputs():
        if id(v) not in defined:
            raise PlanError(f"output {v.ref()} is never defined")


def _is_view(v) -> bool:
    return v.producer is not None and REGISTRY[v.producer.op].kind == VIEW


def verify_plan(graph: Graph, plan) -> None:
    """Check that `plan` (a MemoryPlan of `graph`, in the order of `graph.nodes`) is sound:
    the six checks of the module docstring, derived afresh from the graph and the plan's
    buffers. Returns None; raises `PlanError` naming the broken invariant and showing the IR
    around the offending node."""
    end = len(graph.nodes)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    defined = {id(v): -1 for v in graph.inputs}
    defined.update({id(n.out): i for i, n in enumerate(graph.nodes)})

    # 1. membership
    owner = {}
    for b in plan.buffers:
        for v in b.values:
            if id(v) in owner:
                raise PlanError(f"{v.ref()} is in two buffers")
            owner[id(v)] = b
            if not _is_view(v) and v.nbytes > b.size:
                raise PlanError(f"{v.ref()} ({v.nbytes} B) doesn't fit buffer #{b.id}")
    for v in graph.all_values():
        if id(v) not in owner:
            raise PlanError(f"{v.ref()} has no buffer")
        if _is_view(v) and owner[id(v)] is not owner[id(v.producer.inputs[0])]:
            raise PlanError(f"view {v.ref()} is not in its input's buffer")
    # 2. arena bounds and alignment
    for b in plan.buffers:
        if b.kind == "arena":
            if b.offset % plan.alignment or b.offset + b.size > plan.arena_bytes:
                raise PlanError(f"buffer #{b.id} at {b.offset} (+{b.size}) is misaligned or "
                                f"outside the arena of {plan.arena_bytes} B")
    # 3. intervals: each non-view value's own live range, reads through views included
    def root(v):
        while _is_view(v):
            v = v.producer.inputs[0]
        return v
    last_read = {id(v): defined[id(v)] for v in graph.all_values()}
    reads: dict[int, list[int]] = {}  # root -> the (non-view) nodes reading it, in order
    for i, n in enumerate(graph.nodes):
        if REGISTRY[n.op].kind != VIEW:
            for v in n.inputs:
                r = root(v)
                last_read[id(r)] = max(last_read[id(r)], i)
                if not reads.setdefault(id(r), []) or reads[id(r)][-1] != i:
                    reads[id(r)].append(i)
    for v in graph.live_outputs():
        last_read[id(root(v))] = end
    for v in graph.all_values():
        if _is_view(v):
            continue
        b = owner[id(v)]
        if b.kind != "input" and not (b.start <= defined[id(v)] and last_read[id(v)] <= b.end):
            raise PlanError(f"buffer #{b.id} [{b.start}, {b.end}] doesn't cover {v.ref()} "
                            f"live [{defined[id(v)]}, {last_read[id(v)]}]")
    # 4. no overlap of simultaneously live arena buffers: a sweep over program points keeps
    # the live buffers sorted by offset; while they are disjoint, a newcomer overlaps one of
    # them only if it overlaps its neighbour below or above (O(n log n)).
    arena = [b for b in plan.buffers if b.kind == "arena" and b.size]
    by_id = {b.id: b for b in arena}
    events = sorted([(b.start, 1, b.id, b) for b in arena] + [(b.end + 1, 0, b.id, b)
                                                              for b in arena],
                    key=lambda e: e[:3])  # at a point, deaths (of the point before) first
    live_offsets: list[tuple[int, int]] = []
    for _, born, _, b in events:
        key = (b.offset, b.id)
        i = bisect_left(live_offsets, key)
        if not born:
            del live_offsets[i]
            continue
        for j in (i - 1, i):
            if 0 <= j < len(live_offsets):
                c = by_id[live_offsets[j][1]]
                if b.offset < c.offset + c.size and c.offset < b.offset + b.size:
                    first, second = sorted((b, c), key=lambda x: (x.start, x.id))
                    raise PlanError(f"buffers #{first.id} and #{second.id} are live together "
                                    f"and overlap in the arena")
        live_offsets.insert(i, key)
    # 5a. gradients packed into a bucket: own slot, read only by the pack
    packed = getattr(plan, "packed", {})
    slots: dict[int, list] = {}
    for v, offset in packed.items():
        b = plan.buffer_of[v]
        readers = reads.get(id(v), [])
        pack = graph.nodes[readers[0]] if len(readers) == 1 else None
        if pack is None or pack.op != "bucket_pack" or plan.buffer_of.get(pack.out) is not b \
                or offset < 0 or offset + v.nbytes > pack.out.nbytes:
            raise PlanError(f"{v.ref()} is packed into buffer #{b.id}, but not as a slot that "
                            "only its bucket_pack reads")
        slots.setdefault(b.id, []).append((offset, offset + v.nbytes, v))
    for b_id, spans in slots.items():
        spans.sort(key=lambda s: s[0])
        for (_, end1, v1), (start2, _, v2) in zip(spans, spans[1:]):
            if start2 < end1:
                raise PlanError(f"{v1.ref()} and {v2.ref()} overlap in bucket #{b_id}")
    # 5. successive values inside one buffer
    for b in plan.buffers:
        versions = sorted((v for v in b.values if not _is_view(v) and v not in packed),
                          key=lambda v: defined[id(v)])
        place = {}
        # Placement of each value inside the buffer, re-derived in program order.
        for v in sorted(b.values, key=lambda v: defined[id(v)]):
            if _is_view(v):
                p = v.producer
                place[id(v)] = apply_view(place[id(p.inputs[0])], p.op, p.attrs)
            elif v.producer is not None and v.producer in plan.reuse:
                taken = v.producer.inputs[plan.reuse[v.producer]]
                if id(taken) not in place:
                    raise PlanError(f"{v.ref()} is planned to write over {taken.ref()}, which "
                                    f"is not in its buffer #{b.id}\n"
                                    f"{_context(graph, defined[id(v)])}")
                place[id(v)] = place[id(taken)]
            else:
                place[id(v)] = contiguous_probe(v.shape)
        for old, new in zip(versions, versions[1:]):
            writer = new.producer
            if writer is None or (REGISTRY[writer.op].kind not in (ELEMENTWISE, SCATTER)
                                  and plan.reuse.get(writer) not in
                                  REGISTRY[writer.op].overwrites):
                raise PlanError(f"{new.ref()} reuses buffer #{b.id} but {writer and writer.op} "
                                "can't write over its operand")
            if REGISTRY[writer.op].overwrites and any(
                    plan.buffer_of.get(v) is b for k, v in enumerate(writer.inputs)
                    if k != plan.reuse[writer]):
                raise PlanError(f"{new.ref()}: {writer.op} writes buffer #{b.id} while it reads "
                                "another operand from it")
            t = index[id(writer)]
            if last_read[id(old)] <= t:
                continue
            if last_read[id(old)] == end:
                raise PlanError(f"{new.ref()} overwrites {old.ref()}, which is still needed at "
                                f"the end\n{_context(graph, t)}")
            # Allowed only as the exact write-back of a region (ARCHITECTURE.md §8.3).
            later = [i for i in reads.get(id(old), ()) if t < i < end]
            s = graph.nodes[later[0]] if len(later) == 1 else None
            ok = (s is not None and REGISTRY[s.op].kind == SCATTER and s.inputs[1] is new
                  and root(s.inputs[0]) is old
                  and region(apply_view(place[id(s.inputs[0])], "slice", s.attrs))
                  == region(place[id(new)]))
            if not ok:
                raise PlanError(f"{new.ref()} overwrites {old.ref()} in buffer #{b.id}, but "
                                f"{old.ref()} is read later\n{_context(graph, t)}")
    # 6. workspaces
    workspace = getattr(plan, "workspace", {})
    for i, n in enumerate(graph.nodes):
        need = workspace_bytes(n)
        if not need:
            continue
        b = workspace.get(n)
        if b is None or b.kind != "arena" or b.workspace_of is not n or b.size < need \
                or not b.start <= i <= b.end or b not in plan.buffers:
            raise PlanError(f"{n.out.ref()} ({n.op}) needs a workspace of {need} B live at "
                            f"point {i}; the plan has {b and f'#{b.id}'}\n{_context(graph, i)}")
