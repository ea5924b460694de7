"""The graph-rewrite helper (passes/rewrite.py) as the three passes that rebuild graphs use
it: after gemm_accumulate, recompute and fusion every side table of the graph (outputs,
mutations, data checks, captured constants, `grad_of`) points at nodes and
values of the new graph, which the verifier accepts and which computes the same results;
and the helper itself on a hand-built graph."""
import numpy as np

import compiler as cc
import compiler.nn.functional as F
from passes.fusion import fuse
from passes.gemm_accumulate import gemm_accumulate
from passes.recompute import recompute
from passes.simplify import dce
from passes.verify import verify_graph
from runtime.reference import evaluate


def everything(x, w1, w2, labels, bias):
    """A training step whose graph sets every side table: a captured constant, a data
    check (cross_entropy's labels), three mutated arguments, backward nodes (`grad_of`),
    weight updates that fold into gemms, a gelu the recompute pass copies into the update
    phase, and elementwise chains that fuse (the gelu copy reads a fused value)."""
    w1.stop_gradient = False
    w2.stop_gradient = False
    u = (x @ w1) * 0.5 + cc.to_tensor(np.full((256,), 0.25, np.float32))
    logits = F.gelu(u) @ w2
    loss = F.cross_entropy(logits, labels) + logits.square().mean()
    loss.backward()
    with cc.no_grad():
        w1.subtract_(0.1 * w1.grad)
        w2.subtract_(0.1 * w2.grad)
        bias.add_(1.0)
    return loss


def everything_args():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((128, 32)).astype(np.float32),
            (rng.standard_normal((32, 256)) / 8).astype(np.float32),
            (rng.standard_normal((256, 256)) / 16).astype(np.float32),
            rng.integers(0, 256, 128).astype(np.int64),
            np.zeros(4, np.float32)]


def assert_side_tables_follow(old, new):
    verify_graph(new)
    assert new is not old and new.nodes is not old.nodes
    nodes = {id(n) for n in new.nodes}
    produced = nodes | {id(None)}
    assert all(id(v.producer) in produced for v in new.outputs)
    assert sorted(new.mutations) == sorted(old.mutations) == sorted(new.mutation_locs)
    assert all(id(v.producer) in produced for v in new.mutations.values())
    assert [v.shape for v in new.outputs] == [v.shape for v in old.outputs]
    assert len(new.data_checks) == len(old.data_checks) == 1
    assert all(id(c.node) in nodes for c in new.data_checks)
    assert old.data_checks[0].node in old.nodes  # the input graph's check is left alone
    assert len(new.captured) == len(old.captured) == 1
    assert all(id(n) in nodes for n, _, _ in new.captured)
    # a backward node's forward node is the new graph's copy, never the node it replaced
    # (same value id); one the pass dropped (fused into a body) may stay
    new_ids = {n.out.id for n in new.nodes}
    assert all(id(n.grad_of) in nodes or n.grad_of.out.id not in new_ids
               for n in new.nodes if n.grad_of is not None)
    assert any(n.grad_of is not None for n in new.nodes)

def test_every_side_table_follows_gemm_accumulate_recompute_and_fusion():
    args = everything_args()
    traced = dce(cc.trace(everything, *args))
    folded, gemms = gemm_accumulate(traced)
    assert sum(d.folded for d in gemms) == 2
    assert_side_tables_follow(traced, folded)
    for scratch in (True, False):
        # a fresh recompute each time: fusion sets `grad_of` on the nodes it keeps, which
        # its input graph shares
        copied, decisions = recompute(folded)
        assert [d.op for d in decisions if d.recomputed] == ["gelu"]
        assert_side_tables_follow(folded, copied)
        [copy] = copied.recomputed
        assert copy.op == "gelu" and copy.phase == "update" and copy in copied.nodes
        want_outs, want_muts = evaluate(copied, args)
        listing = str(copied)
        fused = fuse(copied, scratch=scratch)
        assert str(copied) == listing  # the pass leaves its input alone
        assert any(n.op == "fused" for n in fused.nodes)
        assert_side_tables_follow(copied, fused)
        # the gelu copy's operand is a fused value: the copy is rewired
        [gelu] = [n for n in fused.nodes if n.op == "gelu" and n.phase == "update"]
        assert gelu is not copy and gelu.out.id == copy.out.id
        assert gelu.inputs[0].producer.op == "fused"
        outs, muts = evaluate(fused, args)
        assert sorted(muts) == sorted(want_muts) == [1, 2, 4]
        for a, b in zip(outs + [muts[k] for k in sorted(muts)],
                        want_outs + [want_muts[k] for k in sorted(want_muts)]):
            np.testing.assert_array_equal(a, b)


def test_rebuilt_remaps_every_side_table_of_a_hand_built_graph():
    """A pass replaces `exp` by a copy reading another value: outputs, mutations, the data
    check, the captured constant and a backward node's `grad_of` follow the copy; the
    position-keyed tables and the input graph stay as they were."""
    from compiler.ir import DataCheck, Graph, Loc
    from passes.rewrite import clone_node, rebuilt

    g = Graph("f")
    x = g.add_input("x", (4,), np.float32)
    g.add_input("labels", (4,), np.int64)  # the data check's argument
    c = g.op("constant", value=np.ones(4, np.float32))
    y = g.op("exp", x)
    z = g.op("add", y, c)
    w = g.op("multiply", z, y, phase="backward")
    w.producer.grad_of = y.producer
    g.outputs = [y, w]
    g.mutations = {0: z}
    g.mutation_locs = {0: Loc("prog.py", 7)}
    arr = np.ones(4, np.float32)
    g.captured = [(c.producer, arr, arr.copy())]
    g.data_checks = [DataCheck("cross_entropy", y.producer, 1, (), 4, None)]
    verify_graph(g)

    old_exp = y.producer
    new_exp = clone_node(old_exp, [c])
    values, nodes_map = {id(y): new_exp.out}, {id(old_exp): new_exp}
    kept = []
    for n in g.nodes:
        if n is old_exp:
            kept.append(new_exp)
        elif any(id(v) in values for v in n.inputs):
            copy = clone_node(n, [values.get(id(v), v) for v in n.inputs])
            values[id(n.out)], nodes_map[id(n)] = copy.out, copy
            kept.append(copy)
        else:
            kept.append(n)
    out = rebuilt(g, kept, values, nodes_map)
    verify_graph(out)
    assert out.outputs[0] is new_exp.out and out.outputs[1] is values[id(w)]
    assert out.mutations == {0: values[id(z)]} and out.mutation_locs == g.mutation_locs
    assert out.data_checks[0].node is new_exp and g.data_checks[0].node is old_exp
    assert out.captured == [(c.producer, arr, g.captured[0][2])]
    assert nodes_map[id(w.producer)].grad_of is new_exp
    assert g.outputs == [y, w] and g.mutations == {0: z} and g.nodes[1] is old_exp
    assert "%3:f32[4] = exp %2" in str(out) and "exp %x" in str(g)
