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
search (`passes.budget`) can price any mix; `rewrite` here runs it twice, the inputs below
second, so that the scores and output copies read the inputs' copies).

Attention inputs: with the probabilities and output recomputed, the forward pass of a
transformer block still keeps q, k and v for the backward pass (examples/transformer_block.py:
1 MiB each, live at all three of its 14 MiB points: the loss, the fc2 weight gradient and
fc2's input gradient, beside the MLP's two 4 MiB activations). Any one of them can instead
be made again in the backward pass by its projection GEMM, from a copy of the cheap
elementwise node that feeds the GEMM (the block's layer_norm, whose operands, the block's
input and two row statistics, stay alive anyway), so neither the input nor the normalized
activations are kept for it. Unlike the copies above this costs a whole GEMM (2 * d_model
FLOPs per element: 1/36 of a block's training step), so without a memory budget the pass
takes inputs only while their extra FLOPs together stay within INPUT_WORK_SHARE of the
program's (`program_flops`); each left out says so, and the budget search prices them all.
The transformer's default plan: 14,696,516 -> 13,647,940 B beyond its inputs (the queries),
11,550,788 B under a budget (all three).

A forward node `n` is a candidate when all hold (each refusal is a sentence in the report):
  1. `n` is `softmax` (or `softmax_`) and backward nodes read its value (through views too)
     as well as forward ones (`recompute.not_read_late`); its value is at least MIN_BYTES
     and not returned (`recompute.returned`);
  2. `scores_chain`: its input is made by a `matmul`, then at most MAX_CHAIN elementwise
     (deterministic) or view nodes, each reading the previous one's value (an in-place step
     writes over that value, never over another operand);
  3. `operand_overwritten`: no operand of the chain (q, k, a mask, a scale) is written by a
     requested inplace write between the GEMM and the first backward reader of `n`.
An attention input `n` (`input_decision`) is a candidate when: 4. its value is, through
views, an operand of an attention's scores GEMM (queries, keys) or value GEMM (values),
made by a forward `matmul` (not an inplace write) and at most MAX_CHAIN elementwise steps
(a bias), read by forward and backward nodes, at least MIN_BYTES, not returned; and 3.
holds for its chain (the feeding node's operands, the weights).

Algorithm: 1. the probabilities and outputs in decreasing size (at most MAX_TRIES); each is
estimated added to those taken so far and taken when the estimated peak falls by MIN_BYTES
or more; then the choice is planned once, against the graph without it (a plan costs ~10
byte-model estimates: examples/gpt.py's step plans in ~2 s, estimates in ~0.25 s). 2. The
same for the inputs of the graph step 1 returns, each also within the allowance.
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
INPUT_WORK_SHARE = 0.03  # without a budget, attention inputs recomputed within this share


@dataclass
class AttentionDecision(rc.RecomputeDecision):
    """Attention probabilities (a softmax over a GEMM's scores), or the attention output
    (their GEMM with the values, or a copy of it), considered for recomputation: recomputed
    with the chain they are made from before the first backward reader, or why not."""

    chain: tuple = field(default=(), repr=False)   # the scores GEMM .. node's input, in order
    what: str = "probabilities"                    # or "output", or "input"
    role: str = ""                                 # an input's: "queries", "keys", "values"

    @property
    def extra_flops(self) -> int:
        return node_flops((self.node,) + tuple(self.chain))

    @property
    def kind(self) -> str:
        return f"attention {self.role}" if self.what == "input" else f"attention {self.what}"

    @property
    def text(self) -> str:
        head = f"{self.value} = {self.op} ({self.loc}, {self.nbytes} B)"
        if self.recomputed:
            saved = f", saves {self.saved_bytes} B planned" if self.saved_bytes else ""
            if self.what == "input":
                gemm = next(c for c in (self.node,) + tuple(self.chain) if c.op == "matmul")
                src = self.chain[0] if self.chain and self.chain[0] is not gemm else None
                made = (f"with their projection ({gemm.op} at {gemm.loc}"
                        + (f", from a copy of {src.op} at {src.loc})" if src else ")"))
            else:
                gemm = self.chain[0]
                made = ("with their scores" if self.what == "probabilities" else
                        "with its probabilities and their scores") + \
                    f" ({gemm.op} at {gemm.loc})"
            return (f"{head}: {self.kind} recomputed {made} before {self.before} "
                    f"({self.extra_flops} extra FLOPs{saved}): {self.reason}")
        return f"{head}: {self.kind} kept from the forward pass: {self.reason}"

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["kind"] = self.kind
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
    return gemm_chain(node.inputs[0])


def gemm_chain(v) -> tuple[tuple, str | None]:
    """(the nodes from a forward matmul to `v`'s producer through at most MAX_CHAIN
    elementwise or view steps, in program order; None) or ((), why not)."""
    chain = []
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


def operand_overwritten(node: Node, chain, f: rc._Facts, what: str = "the probabilities"
                        ) -> str | None:
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
                            f"{what}")
    return None


def _made_from(v) -> tuple:
    """The nodes that make `v` from a cheap elementwise forward node (through views), that
    node first; () when no such node makes it."""
    out = []
    while v.producer is not None and len(out) <= MAX_CHAIN:
        p = v.producer
        if p.phase != "forward":
            return ()
        out.append(p)
        if REGISTRY[p.op].kind != VIEW:
            return tuple(reversed(out)) if rc.not_cheap(p) is None else ()
        v = p.inputs[0]
    return ()


def attention_operands(graph: Graph, f: rc._Facts) -> list[tuple]:
    """(value, role) of each forward attention's operands: the scores GEMM's (queries, keys)
    and the value GEMM's second (values), for every softmax over a GEMM's scores."""
    scores = {}
    for node in graph.nodes:
        if node.op == "softmax" and node.phase == "forward":
            chain, why = scores_chain(node)
            if why is None:
                scores[id(node.out)] = chain[0]
    gemms = {id(g) for g in scores.values()}
    out = []
    for node in graph.nodes:
        if node.op != "matmul" or node.phase != "forward" or len(node.inputs) != 2:
            continue
        if id(node) in gemms:
            out += [(node.inputs[0], "queries"), (node.inputs[1], "keys")]
        if id(f.root[node.inputs[0]]) in scores:
            out.append((node.inputs[1], "values"))
    return out


def input_decision(v, role: str, f: rc._Facts, min_bytes: int) -> AttentionDecision | None:
    """Condition 4's candidate, or None: the attention operand `v` is (through views) the
    value of a forward projection GEMM, then at most MAX_CHAIN elementwise steps (a bias);
    its copy is that chain made again, after a copy of the cheap elementwise node that makes
    the GEMM's activations (a layer_norm), so that neither the operand nor those activations
    stay alive for it; read by forward and backward nodes, at least `min_bytes`."""
    root = f.root[v]
    if root.producer is None:
        return None
    made, why = gemm_chain(root)
    if why is not None or made[0].inplace_of is not None or len(made[0].inputs) != 2:
        return None
    node = made[-1]
    if rc.not_read_late(node, f) is not None or node.out.nbytes < min_bytes:
        return None
    chain = _made_from(made[0].inputs[0]) + made[:-1]
    return AttentionDecision(node, node.out.ref(), node.op, str(node.loc), node.out.nbytes,
                             False, "", chain=chain, what="input", role=role)


def candidates(graph: Graph, min_bytes: int = MIN_BYTES, f: rc._Facts | None = None,
               kinds=("probabilities", "output", "input")
               ) -> tuple[rc._Facts, list[AttentionDecision], list[AttentionDecision]]:
    """(the facts, one decision per attention value of `kinds` the backward pass reads of
    at least `min_bytes`, those that may be recomputed in decreasing size)."""
    f = f or rc._Facts(graph)
    considered, ok = [], []
    for node in graph.nodes:
        if node.op not in ("softmax", "matmul", "contiguous") \
                or rc.not_read_late(node, f) is not None or node.out.nbytes < min_bytes:
            continue
        if node.op == "softmax":
            chain, what = scores_chain(node)[0], "probabilities"
        else:
            chain, what = output_chain(node), "output"
            if not chain:
                continue   # not an attention output: not worth a line in the report
        if what not in kinds:
            continue
        d = AttentionDecision(node, node.out.ref(), node.op, str(node.loc), node.out.nbytes,
                              False, "", chain=chain, what=what)
        considered.append(d)
    if "input" in kinds:
        seen = {id(d.node) for d in considered}
        for v, role in attention_operands(graph, f):
            d = input_decision(v, role, f, min_bytes)
            if d is not None and id(d.node) not in seen:
                seen.add(id(d.node))
                considered.append(d)
    for d in considered:
        whole = (tuple(d.chain) + (d.node,)) if d.what == "input" else d.chain
        what = f"the {d.role}" if d.what == "input" else f"the {d.what}"
        d.reason = rc.returned(d.node, f) or (scores_chain(d.node)[1]
                                              if d.what == "probabilities" else None) \
            or operand_overwritten(d.node, whole, f, what) or ""
        if not d.reason:
            d.before = describe_reader(graph.nodes[f.late_readers(d.node.out)[0]])
            ok.append(d)
    ok.sort(key=lambda d: -d.nbytes)
    return f, considered, ok


def chains_of(decisions) -> dict:
    """The `chains` argument of `recompute.rewrite` for these decisions."""
    return {id(d.node): d.chain for d in decisions if isinstance(d, AttentionDecision)}


def _is_input(d) -> bool:
    return isinstance(d, AttentionDecision) and d.what == "input"


def rewrite(graph: Graph, decisions, f: rc._Facts | None = None) -> tuple[Graph, dict]:
    """`graph` with `decisions` recomputed (this pass's, the elementwise pass's and GEMMs'
    together; `recompute.rewrite` places each copy), and {decision node: its copy}. In two
    rewrites: the attention inputs go second, so that the copies the first makes (the
    scores GEMM, the output's value GEMM) are backward readers of the inputs and read the
    inputs' copies, not the forward values."""
    f = f or rc._Facts(graph)
    first = [d for d in decisions if not _is_input(d)]
    inputs = [d for d in decisions if _is_input(d)]
    out, copies = rc.rewrite(graph, [d.node for d in first], f, chains_of(first))
    if not inputs:
        return out, copies
    by_id = {n.out.id: n for n in out.nodes}
    nodes = [by_id[d.node.out.id] for d in inputs]
    chains = {id(n): tuple(by_id[c.out.id] for c in d.chain) for n, d in zip(nodes, inputs)}
    final, late = rc.rewrite(out, nodes, rc._Facts(out), chains)
    # the first rewrite's copies, cloned by the second, stay copies for the scheduler
    now = {n.out.id: n for n in final.nodes}
    seen, rec = set(), []
    for n in final.recomputed:
        n = now.get(n.out.id)
        if n is not None and id(n) not in seen:
            seen.add(id(n))
            rec.append(n)
    final.recomputed = rec
    result = {k: now[c.out.id] for k, c in copies.items() if c.out.id in now}
    for d, n in zip(inputs, nodes):
        result[d.node] = late[n]
    return final, result


def program_flops(graph: Graph) -> int:
    """The program's own work as `node_flops` prices it (its GEMMs, mostly)."""
    return node_flops(graph.nodes)


def recompute_attention(graph: Graph, mode: str = "auto", scheduled: bool = True,
                        planned_peak=None) -> tuple[Graph, list[AttentionDecision]]:
    """Recompute the attention values that lower the peak (module docstring). `scheduled`:
    estimate peaks in the order the scheduler would pick (else as written);
    `planned_peak(graph) -> bytes`, when given, checks the choice against the real plan.
    Returns the new graph (`graph` itself when nothing is recomputed) and one decision per
    value considered."""
    if mode == "off":
        return graph, []
    f, considered, ok = candidates(graph, kinds=("probabilities", "output"))
    best = rc._estimate(graph, scheduled)[0] if ok else None
    out = _take(graph, f, ok, best, scheduled, planned_peak, "attention recomputation")
    # Step 2: the attention inputs, from the graph with the values above recomputed
    f2, considered2, ok2 = candidates(out, kinds=("input",))
    if ok2:
        staged = out
        out = _take(out, f2, ok2, rc._estimate(out, scheduled)[0], scheduled, planned_peak,
                    "attention input recomputation", program_flops(graph))
        if out is not staged:    # the first step's copies were cloned again
            now = {n.out.id: n for n in out.nodes}
            for d in considered:
                if d.copy is not None:
                    d.copy = now.get(d.copy.out.id, d.copy)
    return out, considered + considered2


def _take(graph, f, ok, best, scheduled, planned_peak, what, program=None):
    """Steps 1 and 2's greedy choice among `ok` (decisions about `graph`), checked against
    the planned peak; with `program` (the program's FLOPs) those taken cost at most
    INPUT_WORK_SHARE of it together. Sets each decision's outcome and returns the graph
    with the chosen ones recomputed."""
    chosen: list[AttentionDecision] = []
    out, copies, spent = graph, {}, 0
    allowance = None if program is None else int(INPUT_WORK_SHARE * program)
    for k, d in enumerate(ok):
        if k >= MAX_TRIES:
            d.reason = f"not tried: past the pass's {MAX_TRIES} tries"
            continue
        if allowance is not None and spent + d.extra_flops > allowance:
            d.reason = (f"its {d.extra_flops} extra FLOPs would take the default's GEMM "
                        f"recomputation to {spent + d.extra_flops} FLOPs, past its allowance "
                        f"of {allowance} ({INPUT_WORK_SHARE:.0%} of the program's "
                        f"{program} FLOPs; a memory_budget may take it)")
            continue
        trial, trial_copies = rewrite(graph, chosen + [d], f)
        peak = rc._estimate(trial, scheduled)[0]
        d.estimated_peak = peak
        if peak <= best - MIN_BYTES:
            d.reason = (f"the estimated peak is {peak} B with it, {best} B without it (the "
                        "scheduler's byte model, arena bytes)")
            if allowance is not None:
                d.reason += (f"; within the default's allowance for it ({spent + d.extra_flops}"
                             f" of {allowance} extra FLOPs, {INPUT_WORK_SHARE:.0%} of the "
                             "program's)")
            d.recomputed, best = True, peak
            spent += d.extra_flops
            chosen.append(d)
            out, copies = trial, trial_copies
        else:
            d.reason = (f"recomputing it would not lower the estimated peak by {MIN_BYTES} B "
                        f"or more ({peak} B with it, {best} B without)")
    if not chosen:
        return graph
    if planned_peak is not None:
        with_them, without = planned_peak(out), planned_peak(graph)
        if with_them > without - MIN_BYTES:
            for d in chosen:
                d.recomputed = False
                d.reason = (f"kept: the estimate was lower with recomputation, but the planned "
                            f"peak is not ({with_them} B with it, {without} B without)")
            return graph
        n = len(chosen)
        for d in chosen:
            if n == 1:
                d.saved_bytes = without - with_them
            d.reason += (f"; planned: {with_them} B with the {n} {what}{'s' if n > 1 else ''}"
                         f", {without} B without")
    for d in chosen:
        d.copy = copies.get(d.node)
    return out
