"""Attention probabilities recomputed in the backward pass: for `p = softmax(s)` over scores
`s = matmul(q, k)` (then elementwise steps: a scale, an additive mask), the backward readers
of `p` (softmax's own VJP and the value GEMM's gradient `p^T @ dO`) read a copy of
`softmax(s')` with `s' = matmul(q, k)` ... computed again right before the first of them,
so that the [batch, heads, seq, seq] probabilities die in the forward pass after `p @ v`
while q and k, which the scores GEMM's own backward reads anyway, are all that stays.

This is FlashAttention's recomputation idea (Dao et al. 2022: the backward rebuilds the
probabilities from q, k and a saved row statistic, the log-sum-exp, instead of keeping
them). Here the backward recomputes whole rows in one kernel, so the row statistic is
recomputed too instead of saved: that costs the softmax's max and sum passes again (about 5
FLOPs per score against the 2 * head_dim of the scores GEMM it needs anyway), keeps no
extra [rows] vector alive from the forward pass, and makes the copy the same ops on the
same bits: bit for bit, on every backend (`exp(s - lse)` would differ from the forward
`exp(s - max) / sum` in the last bit).

Guarantees: the returned graph computes the same outputs and input mutations, bit for bit:
the copies are the same deterministic ops (matmul, elementwise, views, softmax) on the same
SSA operands, none of which is overwritten between the forward nodes and the copies (a
candidate condition), so each copy equals its original. A candidate is taken only when the
peak estimated by the scheduler's byte model is at least MIN_BYTES lower with it, and the
choice is kept only when the planned peak (`planned_peak(graph)`, as
`compiler.pass_pipeline` passes it) is at least MIN_BYTES lower too, so the pass never costs
memory there. The input graph is not changed (nodes are cloned by `passes.recompute`'s
rewrite, which this pass shares: one rewrite for both kinds of recomputation, so the budget
search (`passes.budget`) can price any mix).

A forward node `n` is a candidate when all hold (each refusal is a sentence in the report):
  1. `n` is `softmax` (or `softmax_`) and backward nodes read its value (through views too)
     as well as forward ones (`recompute.not_read_late`); its value is at least MIN_BYTES
     and not returned (`recompute.returned`);
  2. `scores_chain`: its input is made by a `matmul`, then at most MAX_CHAIN elementwise
     (deterministic) or view nodes, each reading the previous one's value (an in-place step
     writes over that value, never over another operand);
  3. `operand_overwritten`: no operand of the chain (q, k, a mask, a scale) is written by a
     requested inplace write between the GEMM and the first backward reader of `n`.

Algorithm: candidates in decreasing size (at most MAX_TRIES); each is estimated added to
those taken so far and taken when the estimated peak falls by MIN_BYTES or more; then the
choice is planned once, against the graph without it (a plan costs ~10 byte-model
estimates: examples/gpt.py's step plans in ~2 s, estimates in ~0.25 s).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.ir import Graph, Node
from compiler.ops import ELEMENTWISE, REGISTRY, VIEW

from . import recompute as rc
from .reinplace import describe_reader

MIN_BYTES = 65536
MAX_CHAIN = 8          # elementwise / view steps between the scores GEMM and softmax
MAX_TRIES = 16         # candidates tried, at most (each try schedules the whole graph)
SOFTMAX_FLOPS = 5      # per element: max, subtract, exp, sum, divide


@dataclass
class AttentionDecision(rc.RecomputeDecision):
    """Attention probabilities (a softmax over a GEMM's scores), or the attention output
    (their GEMM with the values, or a copy of it), considered for recomputation: recomputed
    with the chain they are made from before the first backward reader, or why not."""

    chain: tuple = field(default=(), repr=False)   # the scores GEMM .. node's input, in order
    what: str = "probabilities"                    # or "output"

    @property
    def extra_flops(self) -> int:
        return node_flops((self.node,) + tuple(self.chain))

    @property
    def text(self) -> str:
        head = f"{self.value} = {self.op} ({self.loc}, {self.nbytes} B)"
        if self.recomputed:
            gemm = self.chain[0]
            saved = f", saves {self.saved_bytes} B planned" if self.saved_bytes else ""
            made = "with their scores" if self.what == "probabilities" else \
                "with its probabilities and their scores"
            return (f"{head}: attention {self.what} recomputed {made} ({gemm.op} at "
                    f"{gemm.loc}) before {self.before} ({self.extra_flops} extra "
                    f"FLOPs{saved}): {self.reason}")
        return f"{head}: attention {self.what} kept from the forward pass: {self.reason}"

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["kind"] = f"attention {self.what}"
        d["chain"] = [c.out.ref() for c in self.chain]
        return d


def node_flops(nodes) -> int:
    """The price of copying `nodes` (each counted once): a GEMM 2 K FLOPs per output
    element (K the contracted length), softmax SOFTMAX_FLOPS per element, an elementwise
    step as `recompute.extra_flops` counts it, views nothing."""
    total, seen = 0, set()
    for c in nodes:
        if id(c) in seen:
            continue
        seen.add(id(c))
        kind = REGISTRY[c.op].kind
        if c.op == "matmul":
            a = c.inputs[0]
            total += 2 * c.out.size * (a.shape[-1] if a.shape else 1)
        elif c.op == "softmax":
            total += c.out.size * SOFTMAX_FLOPS
        elif kind != VIEW:
            total += rc.extra_flops(c)
    return total


def total_flops(decisions) -> int:
    """The extra FLOPs of recomputing `decisions` together: copies that several attention
    decisions share (the probabilities inside the output's chain) are made once."""
    nodes = [n for d in decisions if isinstance(d, AttentionDecision)
             for n in (d.node,) + tuple(d.chain)]
    return node_flops(nodes) + sum(d.extra_flops for d in decisions
                                   if not isinstance(d, AttentionDecision))


def scores_chain(node: Node) -> tuple[tuple, str | None]:
    """Condition 2: (the nodes from the scores GEMM to softmax's input, in program order;
    None) or ((), why not)."""
    chain = []
    v = node.inputs[0]
    while True:
        p = v.producer
        if p is None:
            return (), f"its scores are argument '{v.name}', not a GEMM's output"
        if p.phase != "forward":
            return (), f"its input comes from {p.op} outside the forward pass"
        chain.append(p)
        if p.op == "matmul":
            return tuple(reversed(chain)), None
        op = REGISTRY[p.op]
        if len(chain) > MAX_CHAIN:
            return (), f"no matmul within {MAX_CHAIN} steps before it"
        if op.kind == VIEW:
            v = p.inputs[0]
            continue
        if op.kind != ELEMENTWISE or op.random:
            return (), (f"its scores come from {p.op} at {p.loc}, not a matmul followed by "
                        "elementwise steps")
        # the step's operand from the chain: the one it writes over, or its only operand
        # of the output's shape and dtype
        if p.inplace_of is not None:
            v = p.inputs[p.inplace_of]
        else:
            same = [x for x in p.inputs if x.shape == p.out.shape and x.dtype == p.out.dtype]
            if len(same) != 1:
                return (), (f"{p.op} at {p.loc} before it combines {len(same)} values of "
                            "the scores' shape")
            v = same[0]


def _through_views(v, ops, limit=MAX_CHAIN):
    """The nodes from `v` back through views (and copies: `contiguous`) to the first node
    whose op is in `ops`, that one first; () when there is none within `limit` steps."""
    out = []
    while v.producer is not None and len(out) <= limit:
        p = v.producer
        out.append(p)
        if p.op in ops:
            return tuple(reversed(out))
        if REGISTRY[p.op].kind != VIEW and p.op != "contiguous":
            return ()
        v = p.inputs[0]
    return ()


def output_chain(node: Node) -> tuple:
    """The chain of an attention output: `node` is `matmul(p, v)` with `p` (through views) a
    softmax over a GEMM's scores, or a view copy (`contiguous`) of that matmul. Returns
    (the nodes from the scores GEMM to node's input, in program order) or () when `node`
    is not one."""
    if node.op not in ("matmul", "contiguous") or node.phase != "forward":
        return ()
    tail = (node,) if node.op == "matmul" else _through_views(node.inputs[0], ("matmul",))
    if not tail or tail[0].phase != "forward":
        return ()
    pv = tail[0]
    probs = _through_views(pv.inputs[0], ("softmax",))
    if not probs or probs[0].phase != "forward":
        return ()
    scores, why = scores_chain(probs[0])
    if why is not None:
        return ()
    chain = scores + probs + tail
    return chain[:-1] if node.op == "matmul" else chain


def operand_overwritten(node: Node, chain, f: rc._Facts) -> str | None:
    """Condition 3."""
    start = f.index[id(chain[0])]
    first = f.late_readers(node.out)[0]
    inside = {id(c.out) for c in chain}
    own = {id(c) for c in chain}
    for c in chain:
        for v in c.inputs:
            if id(v) in inside:
                continue
            for w in f.writes.get(id(f.root[v]), ()):
                if start < w < first and id(f.graph.nodes[w]) not in own:
                    writer = f.graph.nodes[w]
                    return (f"operand {v.ref()} of {c.op} at {c.loc} is overwritten by "
                            f"{writer.op} at {writer.loc} before the backward pass reads "
                            "the probabilities")
    return None


def candidates(graph: Graph, min_bytes: int = MIN_BYTES, f: rc._Facts | None = None
               ) -> tuple[rc._Facts, list[AttentionDecision], list[AttentionDecision]]:
    """(the facts, one decision per softmax the backward pass reads of at least
    `min_bytes`, those that may be recomputed in decreasing size)."""
    f = f or rc._Facts(graph)
    considered, ok = [], []
    for node in graph.nodes:
        if node.op not in ("softmax", "matmul", "contiguous") \
                or rc.not_read_late(node, f) is not None or node.out.nbytes < min_bytes:
            continue
        if node.op == "softmax":
            (chain, why), what = scores_chain(node), "probabilities"
        else:
            chain, why, what = output_chain(node), None, "output"
            if not chain:
                continue   # not an attention output: not worth a line in the report
        d = AttentionDecision(node, node.out.ref(), node.op, str(node.loc), node.out.nbytes,
                              False, "", chain=chain, what=what)
        d.reason = rc.returned(node, f) or why or operand_overwritten(node, chain, f) or ""
        considered.append(d)
        if not d.reason:
            d.before = describe_reader(graph.nodes[f.late_readers(node.out)[0]])
            ok.append(d)
    ok.sort(key=lambda d: -d.nbytes)
    return f, considered, ok


def chains_of(decisions) -> dict:
    """The `chains` argument of `recompute.rewrite` for these decisions."""
    return {id(d.node): d.chain for d in decisions if isinstance(d, AttentionDecision)}


def recompute_attention(graph: Graph, mode: str = "auto", scheduled: bool = True,
                        planned_peak=None) -> tuple[Graph, list[AttentionDecision]]:
    """Recompute the attention values that lower the peak (module docstring). `scheduled`:
    estimate peaks in the order the scheduler would pick (else as written);
    `planned_peak(graph) -> bytes`, when given, checks the choice against the real plan.
    Returns the new graph (`graph` itself when nothing is recomputed) and one decision per
    value considered."""
    if mode == "off":
        return graph, []
    f, considered, ok = candidates(graph)
    if not ok:
        return graph, considered
    best = rc._estimate(graph, scheduled)[0]
    chosen: list[AttentionDecision] = []
    out, copies = graph, {}
    for k, d in enumerate(ok):
        if k >= MAX_TRIES:
            d.reason = f"not tried: past the pass's {MAX_TRIES} tries"
            continue
        trial, trial_copies = rc.rewrite(graph, [c.node for c in chosen + [d]], f,
                                         chains_of(chosen + [d]))
        peak = rc._estimate(trial, scheduled)[0]
        d.estimated_peak = peak
        if peak <= best - MIN_BYTES:
            d.reason = (f"the estimated peak is {peak} B with it, {best} B without it (the "
                        "scheduler's byte model, arena bytes)")
            d.recomputed, best = True, peak
            chosen.append(d)
            out, copies = trial, trial_copies
        else:
            d.reason = (f"recomputing it would not lower the estimated peak by {MIN_BYTES} B "
                        f"or more ({peak} B with it, {best} B without)")
    if not chosen:
        return graph, considered
    if planned_peak is not None:
        with_them, without = planned_peak(out), planned_peak(graph)
        if with_them > without - MIN_BYTES:
            for d in chosen:
                d.recomputed = False
                d.reason = (f"kept: the estimate was lower with recomputation, but the planned "
                            f"peak is not ({with_them} B with it, {without} B without)")
            return graph, considered
        for d in chosen:
            if len(chosen) == 1:
                d.saved_bytes = without - with_them
            d.reason += (f"; planned: {with_them} B with the {len(chosen)} attention "
                         f"recomputation{'s' if len(chosen) > 1 else ''}, {without} B "
                         "without")
    for d in chosen:
        d.copy = copies.get(d.node)
    return out, considered
