"""Common-subexpression elimination (passes/cse.py): what merges, what never does, and that the
programs still compute the same numbers, bit for bit."""
import numpy as np
import pytest

import compiler as cc
from compiler.cli import load_example
from compiler.ir import Graph
from compiler.ops import REGISTRY
from compiler.ops.registry import ELEMENTWISE, defop
from compiler.passes import cse, dce, plan_memory, reinplace, verify_graph, verify_plan
from runtime.arena import ArenaExecutable
from runtime.reference import evaluate

from tests.backends import numpy_compile

X = np.random.default_rng(0).standard_normal((3, 4))


def _graphs(fn, *args):
    """The traced graph after DCE, and after DCE and CSE."""
    g = dce(cc.trace(fn, *args))
    return g, cse(g)


def _body(graph) -> str:
    """The listing without source-line comments (the file name varies with the runner)."""
    return "\n".join(line.split("  #")[0].rstrip() for line in str(graph).splitlines())


def _ops(graph, op):
    return [n for n in graph.nodes if n.op == op]


def _assert_same_results(before, after, args):
    want, want_muts = evaluate(before, [a.copy() for a in args])
    got, got_muts = evaluate(after, [a.copy() for a in args])
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()
    assert got_muts.keys() == want_muts.keys()
    for k in want_muts:
        assert got_muts[k].tobytes() == want_muts[k].tobytes()


def scaled_exp_step(x):
    x.stop_gradient = False
    y = (x * 0.1).exp() * 0.1
    y.sum().backward()
    return x.grad


def test_two_equal_scalar_constants_become_one_node_and_one_buffer():
    before, after = _graphs(scaled_exp_step, X)
    assert len(_ops(before, "full")) == 3 and len(_ops(after, "full")) == 2
    assert _body(after) == """\
graph scaled_exp_step(x: f64[3,4]) {
  [0] %1:f64[] = full {shape=[] value=0.1 dtype=f64}
  [1] %2:f64[3,4] = multiply %x, %1
  [2] %3:f64[3,4] = exp %2
  // backward
  [3] %7:f64[] = full {shape=[] value=1 dtype=f64}
  [4] %8:f64[1,1] = reshape %7 {shape=[1,1]}
  [5] %9:f64[3,4] = broadcast_to %8 {shape=[3,4]}
  [6] %10:f64[3,4] = multiply %9, %1
  [7] %11:f64[3,4] = multiply %10, %3
  [8] %12:f64[3,4] = multiply %11, %1
  [9] return %12
}"""
    # Both 0.1s were live from the forward pass to their backward reads: one buffer less.
    p0, p1 = plan_memory(before), plan_memory(after)
    buffers_of_01 = [b for b in p1.buffers if any(v.producer is not None
                                                  and v.producer.op == "full"
                                                  and v.producer.attrs["value"] == 0.1
                                                  for v in b.values)]
    assert len(buffers_of_01) == 1
    assert len(p1.buffers) == len(p0.buffers) - 1
    assert (p0.arena_bytes, p0.peak_bytes, p0.lower_bound_bytes) == (320, 512, 512)
    assert (p1.arena_bytes, p1.peak_bytes, p1.lower_bound_bytes) == (256, 448, 448)
    assert p1.naive_bytes == p0.naive_bytes - 64  # one 8-byte buffer, aligned
    # The pipeline runs it: the compiled program is planned on the merged graph.
    prog = numpy_compile(scaled_exp_step, schedule="off").lower(X)
    assert prog.plan.arena_bytes == 256 and len(_ops(prog.graph, "full")) == 2
    assert numpy_compile(scaled_exp_step).lower(X).plan.arena_bytes <= 256  # scheduled
    _assert_same_results(before, after, [X])
    np.testing.assert_array_equal(numpy_compile(scaled_exp_step)(X.copy()),
                                  evaluate(before, [X.copy()])[0][0])


def test_merged_constants_make_their_users_identical_in_one_walk():
    def program(x):
        p = cc.full([4], 0.1, "float64")
        q = cc.full([4], 0.1, "float64")
        return x * p + x * q

    before, after = _graphs(program, X)
    assert _body(after) == """\
graph program(x: f64[3,4]) {
  [0] %1:f64[4] = full {shape=[4] value=0.1 dtype=f64}
  [1] %3:f64[3,4] = multiply %x, %1
  [2] %5:f64[3,4] = add %3, %3
  [3] return %5
}"""
    # The survivor is the earliest node, with its own source line.
    assert after.nodes[0] is before.nodes[0]
    assert after.nodes[0].loc.line == before.nodes[0].loc.line != before.nodes[1].loc.line
    _assert_same_results(before, after, [X])
    verify_graph(after)


@pytest.mark.parametrize("second", [
    "cc.full([4], -0.0, 'float64')",   # equal as floats, other bits
    "cc.full([4], 0.0, 'float32')",    # another dtype
    "cc.full([3, 4], 0.0, 'float64')",  # another shape
    "cc.full([4], float('nan'), 'float64')",
    "cc.to_tensor(np.zeros(4))",       # a constant array, not a fill
])
def test_constants_that_differ_in_bits_dtype_shape_or_op_stay_apart(second):
    ns = {"cc": cc, "np": np}
    exec("def program(x):\n"  # noqa: S102
         "    p = cc.full([4], 0.0, 'float64')\n"
         f"    q = {second}\n"
         "    return x * p + x * q\n", ns)
    before, after = _graphs(ns["program"], X)
    assert len(after.nodes) == len(before.nodes)
    _assert_same_results(before, after, [X])


def test_equal_constant_arrays_merge_and_different_ones_do_not():
    data = np.arange(4.0)

    def program(x):
        a = cc.to_tensor(data)
        b = cc.to_tensor(data.copy())     # equal bytes: one constant
        c = cc.to_tensor(data + 1.0)      # other bytes
        return x * a + x * b + x * c

    before, after = _graphs(program, X)
    assert len(_ops(before, "constant")) == 3 and len(_ops(after, "constant")) == 2
    _assert_same_results(before, after, [X])


def test_duplicate_views_that_functionalization_rederives_merge():
    # a and b are two tensors viewing y; after the write to y each re-derives its value with
    # its own slice node.
    def program(x):
        y = x * 2.0
        a = y[1]
        b = y[1]
        y[0] = x.sum(0)  # (not a scalar: that would be a `fill` of y[0], one slice more)
        return (a + b).sum() + y.sum()

    before, after = _graphs(program, X)
    assert len(_ops(before, "slice")) == 2 and len(_ops(after, "slice")) == 1
    add = next(n for n in after.nodes if n.op == "add")
    assert add.inputs[0] is add.inputs[1] is _ops(after, "slice")[0].out
    # The write-back scatter still runs in place over y: CSE kept what reinplace relies on.
    _, decisions = reinplace(after)
    scatter = next(d for d in decisions if d.op == "slice_scatter")
    assert scatter.requested and scatter.inplace
    np.testing.assert_array_equal(numpy_compile(program, sanitize=True)(X.copy()),
                                  evaluate(before, [X])[0][0])


def test_rederived_transposes_merge_and_the_requested_write_stays_in_place():
    def program(x):
        y = x * 2.0
        a = y.t()
        b = y.t()
        y.add_(1.0)
        return a * b

    before, after = _graphs(program, X)
    assert len(_ops(before, "transpose")) == 2 and len(_ops(after, "transpose")) == 1
    prog = numpy_compile(program, inplace="strict").lower(X)
    assert [(d.op, d.inplace) for d in prog.plan.decisions if d.requested] == [("add_", True)]
    np.testing.assert_array_equal(numpy_compile(program)(X.copy()), ((2 * X + 1) ** 2).T)


def test_an_inplace_request_and_the_value_it_overwrites_are_never_merged():
    # Merging b into a would make `b.sin_()` overwrite a, which is returned: the request could
    # no longer run in place, and inplace="strict" would refuse a program it accepts.
    def program(x):
        a = x.exp()
        b = x.exp()
        b.sin_()
        return a, b

    before, after = _graphs(program, X)
    assert len(after.nodes) == len(before.nodes)
    prog = numpy_compile(program, inplace="strict").lower(X)
    sin = next(d for d in prog.plan.decisions if d.op == "sin_")
    assert sin.requested and sin.inplace
    a, b = numpy_compile(program)(X.copy())
    np.testing.assert_array_equal(a, np.exp(X))
    np.testing.assert_array_equal(b, np.sin(np.exp(X)))

    def program2(x):  # the request itself is identical to an earlier node
        y = x * 2.0
        s = y.sin()
        y.sin_()
        return s * y

    before, after = _graphs(program2, X)
    assert len(_ops(after, "sin")) == 2
    assert [n.inplace_of for n in _ops(after, "sin")] == [None, 0]


def test_two_returned_values_stay_two_arrays():
    def program(x):
        return x.sin(), x.sin()

    before, after = _graphs(program, X)
    assert len(_ops(after, "sin")) == 2
    a, b = numpy_compile(program)(X.copy())
    assert not np.shares_memory(a, b)

    def program2(x):  # only one of them is returned: one node
        a = x.sin()
        b = x.sin()
        return a, (a * b).sum()

    before, after = _graphs(program2, X)
    assert len(_ops(after, "sin")) == 1
    _assert_same_results(before, after, [X])


def test_outputs_and_mutations_are_remapped():
    # A mutated argument whose final value is a duplicate (built by hand: `fill_` writes a
    # `fill` over the argument's own buffer, which no other node duplicates).
    f64 = np.dtype("float64")
    before = Graph(name="program")
    x, _ = before.add_input("x", (3, 4), f64), before.add_input("y", (3, 4), f64)
    z = before.op("full", shape=(3, 4), value=1.5, dtype=f64)
    y_final = before.op("full", shape=(3, 4), value=1.5, dtype=f64)   # y's final value = z
    before.outputs = [before.op("multiply", x, z)]
    before.mutations = {1: y_final}
    after = cse(before)
    assert len(_ops(before, "full")) == 2 and before.mutations[1] is before.nodes[1].out
    assert len(_ops(after, "full")) == 1 and after.mutations[1] is after.nodes[0].out
    _assert_same_results(before, after, [X, X.copy()])

    def program2(x):
        a = x.sin()
        b = x.sin()
        return (a * a).sum(), b

    before, after = _graphs(program2, X)
    assert len(_ops(after, "sin")) == 1 and after.outputs[1] is _ops(after, "sin")[0].out
    _assert_same_results(before, after, [X])
    total, b = numpy_compile(program2)(X.copy())
    np.testing.assert_array_equal(b, np.sin(X))


def test_values_whose_lives_do_not_overlap_are_not_kept_alive_to_be_shared():
    # The first 0.1 dies at its multiply, before the second is made: merging would keep it
    # alive across the sin, so CSE leaves both (recomputing a constant costs no memory).
    def program(x):
        return (x * 0.1).sum() + (x.sin() * 0.1).sum()

    before, after = _graphs(program, X)
    assert len(_ops(after, "full")) == 2
    assert plan_memory(after).lower_bound_bytes == plan_memory(before).lower_bound_bytes


def test_random_ops_are_never_merged():
    name = "test_cse_noise"
    try:
        for flag in (True, False):
            REGISTRY.pop(name, None)
            defop(name, ELEMENTWISE, lambda types: types[0], lambda x: x, random=flag)
            g = Graph("noise")
            x = g.add_input("x", (4,), np.float64)
            a = g.add_node(name, [x], {}, (4,), np.float64).out
            b = g.add_node(name, [x], {}, (4,), np.float64).out
            g.outputs = [g.add_node("add", [a, b], {}, (4,), np.float64).out]
            assert len(cse(g).nodes) == (3 if flag else 2)
    finally:
        REGISTRY.pop(name, None)


def test_cse_does_not_modify_its_input_graph():
    g = dce(cc.trace(scaled_exp_step, X))
    listing, nodes = str(g), list(g.nodes)
    ins = [list(n.inputs) for n in g.nodes]
    cse(g)
    assert str(g) == listing and g.nodes == nodes and [list(n.inputs) for n in g.nodes] == ins
    assert all(n.out.producer is n for n in g.nodes)


def test_pipeline_runs_cse_after_dce():
    names = [name for name, _ in cc.pipeline()]
    assert names[names.index("dce") + 1] == "cse"
    assert names.index("cse") < names.index("reinplace")


@pytest.mark.parametrize("name", ["mlp", "transformer_block"])
def test_examples_match_the_unmerged_reference_bit_for_bit(name):
    module = load_example(name)
    args = [a for a in module.example_inputs() if isinstance(a, np.ndarray)]
    traced = cc.trace(module.train_step, *[a.copy() for a in args])
    want, want_muts = evaluate(traced, [a.copy() for a in args])
    prog = module.build_program()
    verify_plan(prog.graph, prog.plan)
    got, got_muts = ArenaExecutable(prog.graph, prog.plan, sanitize=True).run(
        [a.copy() for a in args])
    # A weight update folded into a gemm (GEMM-accumulate) rounds its product in row blocks:
    # 1e-6 * max|ref| there; everything else bit for bit.
    folded = any(n.op == "gemm" for n in prog.graph.nodes)

    def same(g, w):
        if folded:
            return np.abs(g - w).max() <= 1e-6 * max(np.abs(w).max(), 1.0)
        return g.tobytes() == w.tobytes()
    for g, w in zip(got, want):
        assert same(g, w)
    assert got_muts.keys() == want_muts.keys()
    for k in want_muts:
        assert same(got_muts[k], want_muts[k])
    merged = len(dce(traced).nodes) - len(cse(dce(traced)).nodes)
    # transformer: 2 transposes, and the [b*t, d] reshapes of LN1's output that the q, k and v
    # weight gradients share (matmul's VJP folds the batch for a 2-D weight)
    assert merged == {"mlp": 0, "transformer_block": 4}[name]


def test_constant_arrays_with_one_digest_are_compared_byte_for_byte(monkeypatch):
    # Arrays are keyed by a SHA-256 of their bytes; a collision must not merge them.
    import passes.cse as cse_module

    class Colliding:
        def __init__(self, data):
            pass

        def hexdigest(self):
            return "0" * 64

    monkeypatch.setattr(cse_module.hashlib, "sha256", Colliding)

    def program(x):
        a = cc.to_tensor(np.arange(4.0))
        b = cc.to_tensor(np.arange(4.0) + 1.0)  # live together with a: a merge candidate
        return x * a + x * b

    before, after = _graphs(program, X)
    assert len(_ops(after, "constant")) == 2
    _assert_same_results(before, after, [X])
