"""GEMM-accumulate: a weight update `w -= lr * (a @ b)` becomes one gemm writing into `w`.

Guarantees: the returned graph computes the same outputs and input mutations. Each folded
update `u` is replaced by `gemm(a, b, w, alpha=-lr, beta=1)` at `u`'s place, requested in place
of `w` (`inplace_of = 2`), so the reinplace pass runs it in the caller's array and the gradient
`a @ b` gets no buffer at all. The gemm's numpy form makes the product a block of rows at a
time (no gradient-sized temporary), which rounds like a separate matmul up to BLAS's blocking:
results agree within 1e-6 * max|ref| (on cpu, sgemm with beta = 1). The input
graph is not changed: when something folds, the graph is cloned (nodes and values keep their
ids, so listings keep their names).

An update `u` folds when all five hold, each a named predicate returning the sentence the report
shows when it does not:
  1. `not_an_update`: `u` is the user's inplace `subtract`/`add` (`w.subtract_(lr * g)`,
     `w -= lr * g`, `w.add_(g, alpha=-lr)`) into a caller's array `w`, and its other operand is
     `g`, `s * g`, `g * s` or `scale(g, s)` with `s` a scalar constant, or `g * lr` with `lr`
     a 0-d float array (an argument or a state array: `SGD(parameters=)` passes its rate so;
     `rate_wider_than_gradient` refuses an f64 rate over an f32 gradient). The gemm's alpha
     is a constant, so such a rate first scales one matmul operand (`_operand_to_scale`: a
     computed one before an argument, the smaller first; the multiply may run in place once
     that operand's other readers ran) and alpha is the sign: the product rounds as
     `a @ (b * lr)` rather than `(a @ b) * lr`, within the same 1e-6 * max|ref|;
  2. `not_a_matmul`: `g` is a 2-D matmul of 2-D operands with `w`'s shape and dtype;
  3. `gradient_read_elsewhere`: nothing else reads `g` (or `s * g`): not a returned `w.grad`,
     not a gradient read twice;
  4. `reads_a_mutated_argument`: neither operand is a view of an argument the program writes
     into (an update that reads another parameter's old value, or `w` itself, would then have
     to run where that read runs; it keeps its gradient buffer instead);
  5. `keeps_operands_alive`: the gemm must run after every read of the old `w`; when one comes
     after the gradient, the operands the gradient read last stay alive until then: fold only
     when they are smaller than the gradient buffer saved (the transformer's `w_fc2`, whose
     gradient reads the 4 MiB gelu output before `dm = dy @ w_fc2.T`, keeps its 1 MiB gradient).
A transposed operand (`x.T`) becomes the gemm's `trans_a`/`trans_b` flag. A gradient averaged
over ranks (data-parallel training) never folds: its update reads a view of
the all-reduced bucket, not the matmul (predicate 2), and the matmul's one reader is the
bucket_pack (tests/runtime/test_mpi.py pins this).

Algorithm:
  1. Readers of every value; the arguments the program mutates (their views included).
  2. For each update node, try the five predicates; record a `GemmDecision` either way
     (updates whose operand is not a matmul-derived gradient at all are not recorded).
  3. If any folds, clone the graph and replace each folded update by its gemm; dead-code
     elimination then drops the matmul and the scaling it absorbed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compiler.ir import Graph, Node, Value
from compiler.ops import REGISTRY, VIEW
from compiler.ops.registry import compute_dtype, dkind

from .alias import alias_analysis
from .liveness import liveness
from .rewrite import clone_node, rebuilt, stand_in
from .schedule import compact_derivation
from .simplify import dce


@dataclass
class GemmDecision:
    """One weight update considered for folding: folded into a gemm, or why not."""

    update: Node = field(repr=False)
    weight: str            # the argument updated
    loc: str               # the update's "file.py:LINE"
    folded: bool
    reason: str            # what was folded, or why not
    gradient_loc: str = ""

    @property
    def text(self) -> str:
        return (f"update of {self.weight} ({self.loc}): "
                + (f"one gemm writing into {self.weight}: {self.reason}" if self.folded
                   else f"NOT folded into a gemm: {self.reason}"))

    def to_dict(self) -> dict:
        return {"weight": self.weight, "loc": self.loc, "folded": self.folded,
                "reason": self.reason, "gradient_loc": self.gradient_loc}


def _scalar_constant(v: Value) -> float | None:
    p = v.producer
    if p is not None and p.op == "full" and v.shape == () and not p.inputs:
        return float(p.attrs["value"])
    return None


def _scalar_rate(v: Value) -> Value | None:
    """`v` when it is a 0-d float array other than a constant (a rate passed as an argument
    or a state array, as `SGD(parameters=)` passes it, or computed in the program)."""
    if v.shape == () and v.dtype.kind == "f" and _scalar_constant(v) is None:
        return v
    return None


def _split(u: Node) -> tuple[Value, float, Value | None]:
    """`u`'s gradient operand, alpha and 0-d rate array (or None), for `w - s*g`, `w - g`,
    `w + scale(g, s)`, `w - g * lr` (lr a 0-d array: alpha is the sign, lr the rate)..."""
    m = u.inputs[1]
    sign = -1.0 if u.op == "subtract" else 1.0
    p = m.producer
    if p is not None and p.op == "multiply":
        for i in (0, 1):
            s = _scalar_constant(p.inputs[i])
            if s is not None:
                return p.inputs[1 - i], sign * s, None
        for i in (0, 1):
            r = _scalar_rate(p.inputs[i])
            if r is not None and p.inputs[1 - i].shape == m.shape:
                return p.inputs[1 - i], sign, r
    if p is not None and p.op == "scale" and p.attrs.get("bias", 0.0) == 0.0:
        return p.inputs[0], sign * float(p.attrs["scale"]), None
    return m, sign, None


def _untransposed(v: Value) -> tuple[Value, bool]:
    p = v.producer
    if p is not None and p.op == "transpose" and len(v.shape) == 2 \
            and tuple(p.attrs["perm"]) == (1, 0):
        return p.inputs[0], True
    return v, False


class _Facts:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.users = graph.users()
        self.final = {id(v) for v in graph.live_outputs()}
        aliases = alias_analysis(graph)
        self.root = aliases.root
        self.mutated = {id(graph.inputs[k]) for k in graph.mutations}
        self.live = liveness(graph, aliases)
        self.index = {id(n): i for i, n in enumerate(graph.nodes)}


# -- the four conditions ---------------------------------------------------------------------
def not_an_update(u: Node, f: _Facts) -> str | None:
    if u.op not in ("subtract", "add") or u.inplace_of != 0:
        return "not an inplace subtract/add"
    w = f.root[u.inputs[0]]
    if w.producer is not None or id(w) not in f.mutated:
        return "it does not write into a caller's array"
    return None


def not_a_matmul(g: Value, w: Value) -> str | None:
    p = g.producer
    if p is None or p.op != "matmul" or len(g.shape) != 2 \
            or any(len(v.shape) != 2 for v in p.inputs):
        return "its gradient is not a 2-D matmul"
    if g.shape != w.shape or g.dtype != w.dtype or dkind(g.dtype) != "f":
        return f"its gradient is {g.type}, the weight {w.type}"
    return None


def gradient_read_elsewhere(u: Node, g: Value, f: _Facts) -> str | None:
    chain = [g] if u.inputs[1] is g else [g, u.inputs[1]]
    for v in chain:
        if id(v) in f.final:
            return f"its gradient {v.ref()} is returned (or is an argument's final value)"
        readers = f.users.get(v, [])
        if len(readers) != 1:
            others = [r for r in readers if r is not u and r is not u.inputs[1].producer]
            where = f" (also by {others[0].op} at {others[0].loc})" if others else ""
            return f"its gradient {v.ref()} is read {len(readers)} times{where}"
    return None


def reads_a_mutated_argument(g: Value, f: _Facts) -> str | None:
    for v in g.producer.inputs:
        r = f.root[v]
        if id(r) in f.mutated:
            return (f"the gradient reads argument '{r.name}', which the program updates: the "
                    "gemm would run where the update runs, after that read")
    return None


def keeps_operands_alive(u: Node, g: Value, f: _Facts) -> str | None:
    # The gemm writes the weight, so it runs after every read of the old weight. A backward
    # read (`dm = dy @ w.T`) is no ancestor of the weight's gradient: unfolded, the gradient
    # may run before it and free the operands it reads last; folded, they stay alive across
    # that read. Fold only when they are smaller than the gradient buffer saved.
    t = f.index[id(g.producer)]
    w = f.root[u.inputs[0]]
    reads = [f.graph.nodes[i] for i in f.live.readers[w] if i < f.live.end]
    backward = [r for r in reads if r.phase == "backward" and r is not g.producer]
    if not backward:
        return None
    kept = {}
    for v in g.producer.inputs:
        r = f.root[v]
        # the scheduler runs compact stand-ins (relu's mask) early: they don't keep r alive
        real = [i for i in f.live.readers[r]
                if i == f.live.end or compact_derivation(f.graph.nodes[i], f.root) is not r]
        if r.producer is not None and real and real[-1] == t:
            kept[id(r)] = r.nbytes
    cost = sum(kept.values())
    if cost > g.nbytes:
        return (f"folding would keep {cost} B of the gradient's operands alive across "
                f"{backward[0].op} at {backward[0].loc}, which reads the old {w.name}: more "
                f"than the {g.nbytes} B gradient buffer it saves")
    return None


def rate_wider_than_gradient(rate: Value | None, g: Value) -> str | None:
    if rate is not None and rate.dtype.itemsize > g.dtype.itemsize:
        return f"its rate {rate.ref()} is {rate.type}, wider than the gradient {g.type}"
    return None


def _operand_to_scale(a: Value, b: Value, f: _Facts) -> int:
    """Which of the gemm's operands a rate array scales (0 or 1): one the program computes
    (its scaled copy may take its buffer once its other readers ran) before an argument, then
    the smaller."""
    def key(v):
        return (f.root[v].producer is None, v.nbytes)
    return 0 if key(a) <= key(b) else 1


def gemm_accumulate(graph: Graph) -> tuple[Graph, list[GemmDecision]]:
    """Fold every foldable weight update (module docstring). Returns the new graph (the input
    graph itself when nothing folds) and one decision per update considered."""
    if not graph.mutations or not any(u.op in ("subtract", "add") and u.inplace_of == 0
                                      for u in graph.nodes):
        return graph, []  # no update to consider (`not_an_update`): skip the analyses
    f = _Facts(graph)  # Step 1
    decisions: list[GemmDecision] = []
    folds: dict[Node, tuple] = {}
    for u in graph.nodes:  # Step 2
        if not_an_update(u, f) is not None:
            continue
        w = u.inputs[0]
        g, alpha, rate = _split(u)
        name = f.root[w].name
        if not_a_matmul(g, w) is not None:
            if g.producer is not None and g.producer.op == "matmul":
                decisions.append(GemmDecision(u, name, str(u.loc), False,
                                              not_a_matmul(g, w), str(g.producer.loc)))
            continue
        reason = gradient_read_elsewhere(u, g, f) or reads_a_mutated_argument(g, f) \
            or keeps_operands_alive(u, g, f) or rate_wider_than_gradient(rate, g)
        if reason is not None:
            decisions.append(GemmDecision(u, name, str(u.loc), False, reason,
                                          str(g.producer.loc)))
            continue
        a, ta = _untransposed(g.producer.inputs[0])
        b, tb = _untransposed(g.producer.inputs[1])
        # alpha as the float32 (or float64) value the unfolded multiply used (a 16-bit
        # float's multiply computes in float32)
        alpha = float(compute_dtype(g.dtype).type(alpha))
        scaled = None if rate is None else _operand_to_scale(a, b, f)
        folds[u] = (a, b, w, alpha, ta, tb, rate, scaled)
        flags = "".join(f", trans_{n}" for n, t in (("a", ta), ("b", tb)) if t)
        by = "" if rate is None else (
            f"; operand {(a, b)[scaled].ref()} is multiplied by the rate {rate.ref()} first "
            f"({(a, b)[scaled].nbytes} B, in place when nothing reads it later)")
        decisions.append(GemmDecision(
            u, name, str(u.loc), True,
            f"alpha={alpha:g}, beta=1{flags}{by}; the gradient (matmul at {g.producer.loc}) "
            "gets no buffer", str(g.producer.loc)))
    if not folds:
        return graph, decisions
    out = _clone(graph, folds)  # Step 3
    return dce(out), decisions


def _clone(graph: Graph, folds: dict) -> Graph:
    """A copy of `graph` with fresh nodes and values (same ids), each folded update replaced
    by its gemm."""
    vmap: dict[int, Value] = {id(v): v for v in graph.inputs}
    nmap: dict[int, Node] = {}
    nodes: list[Node] = []
    next_id = graph._next_id
    for node in graph.nodes:
        if node in folds:
            a, b, w, alpha, ta, tb, rate, scaled = folds[node]
            ops = [vmap[id(a)], vmap[id(b)]]
            if rate is not None:
                # the 0-d rate scales one operand (the gemm's alpha is a constant)
                s = Node("multiply", [ops[scaled], vmap[id(rate)]], {}, None, node.loc,
                         node.phase, None, node.grad_of)
                s.out = Value(next_id, ops[scaled].shape, ops[scaled].dtype, s)
                next_id += 1
                nodes.append(s)
                ops[scaled] = s.out
            new = Node("gemm", ops + [vmap[id(w)]],
                       {"alpha": alpha, "beta": 1.0, "trans_a": ta, "trans_b": tb},
                       None, node.loc, node.phase, 2, node.grad_of)
            shape, dtype = REGISTRY["gemm"].infer(
                [(v.shape, v.dtype) for v in new.inputs], **new.attrs)
            assert tuple(shape) == node.out.shape and np.dtype(dtype) == node.out.dtype
            stand_in(node, new)
        else:
            new = clone_node(node, [vmap[id(v)] for v in node.inputs])
        vmap[id(node.out)], nmap[id(node)] = new.out, new
        nodes.append(new)
    out = rebuilt(graph, nodes, vmap, nmap, next_id)
    assert all(REGISTRY[n.op].kind != VIEW or n.inputs for n in out.nodes)
    return out
