"""The fusion pass (passes/fusion.py): what fuses and what doesn't (and why), the size cap, the
fused node's decisions and plan, and fused results against the op-by-op reference on the
numpy (chunked, planned scratch) and cpu (one native loop) backends."""
import re

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler import passes
from compiler.ops import REGISTRY, VIEW, scratch_specs
from compiler.ops.fused import expr_cost
from passes.fusion import MAX_COST, fuse, fused_nodes
from runtime.arena import compute
from runtime.reference import evaluate, run_graph

from backends import AVAILABLE

NATIVE = [b for b in AVAILABLE if b != "numpy"]
# numpy runs a fused node only when asked; the native backends fuse by default
FUSED_BACKENDS = [("numpy", True)] + [(b, None) for b in NATIVE]


def _fused(fn, *args, **kw):
    return fuse(cc.trace(fn, *args), **kw)


def _ops(graph):
    return [n.op for n in graph.nodes]


def _inner_ops(node):
    return [m.op for m in node.attrs["body"].nodes if m.op != "full"]


def _run_both(fn, args, backend, fuse_opt):
    """(compiled result, reference result) on fresh copies of `args`."""
    prog = cc.compile(fn, backend=backend, fuse=fuse_opt, sanitize=True)
    got = prog(*[a.copy() for a in args])
    outs, _ = evaluate(cc.trace(fn, *args), [a.copy() for a in args])
    return prog.lower(*args), got, outs


def _ulp_diff(a, b):
    a, b = np.asarray(a), np.asarray(b)
    bits = {4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia, ib = a.view(bits).astype(np.int64), b.view(bits).astype(np.int64)
    # map to a monotonic integer line (negative floats count down from 0)
    ia = np.where(ia < 0, np.iinfo(bits).min - ia, ia)
    ib = np.where(ib < 0, np.iinfo(bits).min - ib, ib)
    return np.abs(ia - ib)


# -- what fuses ------------------------------------------------------------------------------
def test_a_chain_becomes_one_node_and_the_listing_shows_its_ops():
    def f(x):
        y = x * 2.0
        z = y + 1.0
        return z.exp().sqrt()
    g = _fused(f, np.ones((4, 3), np.float32))
    assert _ops(g) == ["fused"]
    node = g.nodes[0]
    assert _inner_ops(node) == ["multiply", "add", "exp", "sqrt"]
    text = str(g)
    assert re.search(r"\[0\] %\d+:f32\[4,3\] = fused %x \{4 ops\}", text), text
    # each inner op on its own line with its source line, constants inline
    assert re.search(r"\| %\d+:f32\[4,3\] = multiply \$0, 2\.0 +# test_fusion\.py:\d+", text)
    assert re.search(r"\| %\d+:f32\[4,3\] = exp %\d+", text)
    assert node.out.ref() == g.outputs[0].ref()  # the root's name survives


def test_a_tree_over_several_inputs_is_one_node_with_each_input_once():
    def f(a, b, c):
        return (a * b + (a - c).abs()) / (b * b + 1.0)
    a, b, c = (np.random.default_rng(k).standard_normal((5, 7)).astype(np.float32)
               for k in range(3))
    g = _fused(f, a, b, c)
    assert _ops(g) == ["fused"]
    assert [v.name for v in g.nodes[0].inputs] == ["a", "b", "c"]
    assert len(g.nodes[0].attrs["body"]) == 7  # a*b, a-c, abs, +, b*b, +1, /


def test_a_value_read_twice_inside_the_body_is_one_shared_subexpression():
    def f(x):
        e = x.exp()
        return e * e + e
    g = _fused(f, np.ones(8, np.float32))
    expr = g.nodes[0].attrs["body"].expr()
    exps = set()

    def walk(e):
        if e.op == "exp":
            exps.add(id(e))
        for a in e.args:
            walk(a)
    walk(expr)
    assert len(exps) == 1  # one object: an emitter memoizing by identity computes it once


# -- what doesn't fuse, and why ----------------------------------------------------------------
def test_values_needed_outside_stay_outputs_of_their_own_nodes():
    def f(x):
        y = x * 2.0          # returned: must exist
        z = (y + 1.0).exp()  # read by the sum and by the final add: two groups
        s = z.sum()          # a reduction: not fused
        return y, z * s + z
    g = _fused(f, np.ones((3, 4), np.float32))
    nodes = [n for n in g.nodes if n.op != "full"]  # (the 2.0 the kept multiply reads)
    assert [n.op for n in nodes] == ["multiply", "fused", "sum", "fused"]
    assert _inner_ops(nodes[1]) == ["add", "exp"]
    assert _inner_ops(nodes[3]) == ["multiply", "add"]


def test_a_broadcast_producer_stays_outside_and_is_read_with_stride_0():
    def f(x, b):
        return (x + (b * 2.0).exp()).sin()
    g = _fused(f, np.ones((4, 5), np.float32), np.ones(5, np.float32))
    # b * 2 and exp are [5]: computing them inside the [4, 5] loop would redo them per row
    assert _ops(g) == ["fused", "fused"]
    assert _inner_ops(g.nodes[0]) == ["multiply", "exp"]
    assert _inner_ops(g.nodes[1]) == ["add", "sin"]
    assert g.nodes[1].out.shape == (4, 5) and g.nodes[1].inputs[1].shape == (5,)


def test_a_view_reader_keeps_its_operand_a_node_output():
    def f(x):
        y = x * 2.0
        return (y.t() + 1.0).exp()
    g = _fused(f, np.ones((3, 4), np.float32))
    assert [op for op in _ops(g) if op != "full"] == ["multiply", "transpose", "fused"]


def test_an_operand_written_in_place_before_the_root_is_not_read_past_the_write():
    def f(x):
        a = x * 1.0
        e = a.exp()          # reads a ...
        a.add_(1.0)          # ... which is then written in place
        return e * 2.0, a
    g = _fused(f, np.ones(6, np.float32))
    # fusing exp into `e * 2.0` would read `a` after add_ wrote it (a copy, or strict refusing)
    exp_node = next(n for n in g.nodes if n.op == "exp" or (
        n.op == "fused" and "exp" in _inner_ops(n)))
    assert exp_node.op == "exp"
    prog = cc.compile(f, backend="numpy", fuse=True, inplace="strict")
    x = np.ones(6, np.float32)
    e2, a = prog(x)
    np.testing.assert_array_equal(e2, np.exp(np.float32(1)) * np.float32(2))
    np.testing.assert_array_equal(a, np.full(6, 2, np.float32))


def test_two_random_ops_never_share_a_body():
    def f(x, seed):
        return x * cc.rand([64], seed=seed) + cc.rand([64], seed=seed)
    g = _fused(f, np.ones(64, np.float32), np.array(7, np.uint64))
    bodies = [_inner_ops(n) for n in fused_nodes(g)]
    assert sum(ops.count("philox") for ops in bodies) <= 1 * len(bodies)
    assert all(ops.count("philox") <= 1 for ops in bodies)
    assert sum(n.op == "philox" for n in g.nodes) + sum(o.count("philox") for o in bodies) == 2


# -- the size cap ---------------------------------------------------------------------------------
def test_a_long_chain_becomes_several_nodes_under_the_cap():
    def f(x):
        for _ in range(1000):
            x = x * 1.0001 + 0.5
        return x
    g = _fused(f, np.ones(16, np.float32))
    costs = [n.attrs["body"].cost() for n in g.nodes]
    assert _ops(g) == ["fused"] * len(costs) and len(costs) >= 2000 // MAX_COST
    assert max(costs) <= MAX_COST
    assert sum(len(n.attrs["body"]) for n in g.nodes) == 2000  # every op is in one body


def test_transcendentals_and_philox_count_by_their_real_size():
    philox_cost = expr_cost(REGISTRY["philox"].expr(dict(stream=1, dist="uniform",
                                                         dtype=np.dtype("float32"))))
    # its distinct operations (shared subtrees once), not its 2,800-node tree
    assert 100 < philox_cost <= MAX_COST

    def f(x):
        for _ in range(40):
            x = x.exp() * 0.5   # exp weighs 20
        return x
    g = _fused(f, np.ones(16, np.float32))
    assert len(g.nodes) >= 40 * 21 // MAX_COST
    assert all(n.attrs["body"].cost() <= MAX_COST for n in g.nodes)


# -- decisions and plans --------------------------------------------------------------------------
def hundred_adds_inplace(x):
    for _ in range(100):
        x.add_(1.0)
    return x


def hundred_adds_out_of_place(x):
    for _ in range(100):
        x = x + 1.0
    return x


@pytest.mark.parametrize("backend,fuse_opt", FUSED_BACKENDS)
def test_the_hundred_add_seed_is_one_fused_node_running_in_place_on_x(backend, fuse_opt):
    x = np.random.default_rng(0).standard_normal((100, 100)).astype(np.float32)
    prog = cc.compile(hundred_adds_inplace, backend=backend, fuse=fuse_opt,
                      sanitize=True).lower(x)
    assert _ops(prog.graph) == ["fused"]
    node = prog.graph.nodes[0]
    assert node.inplace_of == 0 and node.inputs[0].name == "x"
    d = prog.plan.decision(node.out)
    assert d.requested and d.inplace and d.reason == "writes over argument 'x'"
    inner = [d for d in prog.plan.decisions if d is not prog.plan.decision(node.out)]
    assert len(inner) == 99 and all(d.op == "add_" and d.inplace and d.requested
                                    and d.reason.startswith(f"fused into {node.out.ref()}")
                                    and d.reason.endswith("no buffer") for d in inner)
    assert prog.plan.arena_bytes == (0 if backend != "numpy" else
                                     sum(b.size for b in prog.plan.workspace.values()))
    assert prog.plan.output_bytes == 0 and prog.plan.peak_bytes == x.nbytes + (
        prog.plan.arena_bytes)
    want = x.copy()
    for _ in range(100):
        want += np.float32(1.0)
    got = x.copy()
    out = prog(got)
    np.testing.assert_array_equal(got, want)  # bit for bit: no addition reassociated
    assert out is got
    if backend == "cpu":
        kernel = next(line for line in prog.source.splitlines()
                      if line.startswith("define") and "_fused" in line)
        assert kernel.count("ptr noalias") == 1  # in place: one pointer


@pytest.mark.parametrize("backend", [b for b in NATIVE if b == "cpu"])  # LLVM's vectoriser
def test_the_fused_loop_is_vectorised_with_several_vectors_in_flight(backend):
    x = np.ones((1000, 1000), np.float32)
    prog = cc.compile(hundred_adds_out_of_place, backend=backend).lower(x)
    assert _ops(prog.graph) == ["fused"]
    opt = prog._exec.optimized_ir
    body = opt[opt.index("vector.body:"):]
    body = body[:body.index("\n\n")]
    loads = re.findall(r"load <(\d+) x float>", body)
    assert loads and int(loads[0]) >= 8, "not vectorised"
    assert len(loads) >= 4, "one vector in flight: the 100 dependent additions are latency-bound"
    # the additions stay in order (no reassociation): 100 per vector
    assert len(re.findall(r"fadd <\d+ x float>", body)) == 100 * len(loads)


def test_a_request_inside_a_body_is_reported_and_strict_accepts_it():
    def f(x):
        y = x * 2.0
        y.exp_()           # its target, y, lives inside the fused loop
        return y + 1.0
    x = np.ones(5, np.float32)
    prog = cc.compile(f, backend="numpy", fuse=True, inplace="strict").lower(x)
    # exp_ roots its fused node (a request joins a later reader's body only on that reader's
    # own request chain), with the multiply it overwrites inside
    first = prog.graph.nodes[0]
    assert first.op == "fused" and _inner_ops(first) == ["multiply", "exp"]
    assert first.inplace_of is None  # its request's target has no buffer to write over
    exp_ = first.attrs["body"].root
    # (the fused node's value keeps its root's name: `plan.decision` finds the fused node's)
    assert prog.plan.decision(exp_.out.ref()).op == "fused"
    (d,) = [d for d in prog.plan.decisions if d.node is exp_]
    assert d.op == "exp_" and d.requested and d.inplace
    assert re.fullmatch(r"fused into %\d+ \(fused at test_fusion\.py:\d+\): computed in the "
                        r"fused loop; no buffer", d.reason), d.reason
    assert [x.op for x in prog.plan.decisions_at(exp_.loc.line)] == ["fused", "exp_"]
    np.testing.assert_array_equal(prog(x), np.exp(np.float32(2)) + np.float32(1))


def test_strict_refuses_a_fused_request_as_it_refuses_the_unfused_one():
    def f(x):
        x.stop_gradient = False
        a = x * 2.0
        a.sin_()            # sin's backward needs a
        loss = (a * 3.0).sum()
        loss.backward()
        return loss, x.grad
    x = np.ones(4, np.float32)
    errors = []
    for fuse_opt in (False, True):
        with pytest.raises(cc.InplaceError) as e:
            cc.compile(f, backend="numpy", fuse=fuse_opt, inplace="strict").lower(x)
        errors.append(str(e.value))
    assert "sin_" in errors[1] and "test_fusion.py" in errors[1]
    assert errors[0] == errors[1]


EXAMPLES = ["mlp", "transformer_block"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_plan_bytes_fall_for_the_examples(name):
    """Planned as for cpu (no scratch rows): the values inside fused nodes have no buffer, so
    naive bytes fall by their sum and the peak never rises (it falls only where a fused value
    was live at the peak: the peaks here are GEMM outputs and values the backward reads)."""
    import importlib
    mod = importlib.import_module(f"examples.{name}")
    graph = cc.trace(mod.train_step, *mod.example_inputs())
    plain = passes.run_passes(graph, backend="cpu", fuse=False)
    fused = passes.run_passes(graph, backend="cpu")
    inner = [m.out for n in fused_nodes(fused.graph) for m in n.attrs["body"].nodes
             if m is not n.attrs["body"].root and m.op != "full"]
    assert inner and not any(v in fused.plan.buffer_of for v in inner)
    assert fused.plan.naive_bytes < plain.plan.naive_bytes
    assert fused.plan.peak_bytes <= plain.plan.peak_bytes, (fused.plan.summary(),
                                                            plain.plan.summary())
    assert fused.plan.lower_bound_bytes <= plain.plan.lower_bound_bytes
    # fewer kernels (views are free: a mask kept as bits adds 32 slices of its value)
    kernels = [len([n for n in r.graph.nodes if REGISTRY[n.op].kind != VIEW])
               for r in (fused, plain)]
    assert kernels[0] < kernels[1]
    passes.verify_plan(fused.graph, fused.plan)


def test_the_numpy_body_has_planned_scratch_and_the_native_one_none():
    def f(x):
        return ((x * 2.0).exp() + x).sin() > 0.5
    x = np.ones(5000, np.float32)
    numpy_prog = cc.compile(f, backend="numpy", fuse=True).lower(x)
    node = numpy_prog.graph.nodes[0]
    # a row is reused once dead, even by the op that reads it last (elementwise: in place):
    # x * 2, exp, + and sin share one float32 row of 512; the bool root writes the output
    assert scratch_specs(node) == [((512,), np.dtype("float32"))]
    assert numpy_prog.plan.workspace[node].size == 512 * 4
    native = fuse(cc.trace(f, x), scratch=False)
    assert scratch_specs(native.nodes[0]) == []


# -- results against the reference ---------------------------------------------------------------
EXACT = [  # nothing reassociated: bit for bit
    ("arith", lambda x, y: (x * y - y / (x.abs() + 1.0)) + 3.0),
    ("sqrt, min, max", lambda x, y: cc.maximum(x.abs().sqrt(), y) - cc.minimum(x, y * 0.5)),
    ("compare, select", lambda x, y: cc.where(x > y, x * 2.0, y - 1.0) + (x <= 0.25).cast(
        "float32")),
    ("casts", lambda x, y: (x * 10.0).cast("int32").cast("float64") / 3.0 + y.cast("float64")),
    ("logic", lambda x, y: ((x > 0).logical_and(y < 0).logical_or(x == y)).cast("float32") * y),
    ("clip, relu, square", lambda x, y: F.relu(x.clip(-0.5, 0.5) - y).square()),
]
# One transcendental function each, after and before exact steps (scaling by powers of two,
# selects): the result keeps the function's own error, 4 ulp at most (CONVENTIONS.md).
TRANSCENDENTAL = [
    ("exp", lambda x, y: cc.where(y > 0, (x * 0.5).exp() * 2.0, x)),
    ("log, tanh", lambda x, y: (x.abs() + 1.0).log() * 4.0 + (y * 0.25).tanh() * 0.0),
    ("sin", lambda x, y: (x - y).sin() * 0.5),
    ("erf", lambda x, y: (x * y).erf()),
    ("sigmoid", lambda x, y: F.sigmoid(x + y) * 8.0),
]
COMPOSED = [  # several transcendentals in a row: errors compound, so compared op by op
    ("exp, log, tanh", lambda x, y: (x.exp() + y.abs()).log() * x.tanh()),
    ("sigmoid, gelu", lambda x, y: F.gelu(x * y).sigmoid() + F.gelu(y, approximate=True)),
    ("sin, cos, erf", lambda x, y: x.sin() * y.cos() + (x - y).erf()),
]
ALL = EXACT + TRANSCENDENTAL + COMPOSED


def _inputs(dtype=np.float32):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((33, 65)).astype(dtype)
    y = rng.standard_normal((33, 65)).astype(dtype)
    y[0, :5] = x[0, :5]  # ties
    return x, y


@pytest.mark.parametrize("backend,fuse_opt", FUSED_BACKENDS)
@pytest.mark.parametrize("name,fn", EXACT, ids=[n for n, _ in EXACT])
def test_fused_results_are_bit_identical_where_nothing_is_reassociated(name, fn, backend,
                                                                        fuse_opt):
    prog, got, (want,) = _run_both(fn, _inputs(), backend, fuse_opt)
    assert any(n.op == "fused" for n in prog.graph.nodes), str(prog.graph)
    np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("name,fn", TRANSCENDENTAL, ids=[n for n, _ in TRANSCENDENTAL])
def test_fused_transcendentals_are_within_4_ulp(name, fn, backend):
    prog, got, (want,) = _run_both(fn, _inputs(), backend, None)
    assert any(n.op == "fused" for n in prog.graph.nodes)
    assert got.dtype == want.dtype
    assert _ulp_diff(got, want).max() <= 4


@pytest.mark.parametrize("name,fn", ALL, ids=[n for n, _ in ALL])
def test_numpy_runs_a_fused_body_bit_identically_to_the_reference(name, fn):
    prog, got, (want,) = _run_both(fn, _inputs(), "numpy", True)
    assert any(n.op == "fused" for n in prog.graph.nodes)
    np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("name,fn", ALL, ids=[n for n, _ in ALL])
def test_a_native_fused_loop_computes_what_its_unfused_kernels_compute(name, fn, backend):
    """Bit for bit: the body renders each op's registry expression and rounds each inner
    value to its dtype, as the kernels' stores and loads did."""
    args = _inputs()
    fused = cc.compile(fn, backend=backend, sanitize=True)
    plain = cc.compile(fn, backend=backend, fuse=False, sanitize=True)
    assert any(n.op == "fused" for n in fused.lower(*args).graph.nodes)
    np.testing.assert_array_equal(fused(*args), plain(*args), strict=True)


@pytest.mark.parametrize("backend,fuse_opt", FUSED_BACKENDS)
def test_fused_philox_draws_the_reference_bits(backend, fuse_opt):
    def f(x, seed):
        return x * cc.rand([4, 64], seed=seed) + 1.0
    args = (np.full((4, 64), 3.0, np.float32), np.array(2026, np.uint64))
    prog, got, (want,) = _run_both(f, args, backend, fuse_opt)
    assert any(n.op == "fused" and "philox" in _inner_ops(n) for n in prog.graph.nodes)
    np.testing.assert_array_equal(got, want, strict=True)


@pytest.mark.parametrize("backend,fuse_opt", FUSED_BACKENDS)
@pytest.mark.parametrize("name", EXAMPLES)
def test_fused_training_steps_match_the_unfused_reference(name, backend, fuse_opt):
    """Forward, backward and update with fusion: reductions and GEMMs are the reference's
    (1e-5 of the largest value, float32), elementwise ops fused around them."""
    import importlib
    mod = importlib.import_module(f"examples.{name}")
    args = mod.example_inputs()
    want_args = [a.copy() for a in args]
    want = cc.compile(mod.train_step, backend="numpy", fuse=False)(*want_args)
    got_args = [a.copy() for a in args]
    prog = cc.compile(mod.train_step, backend=backend, fuse=fuse_opt, sanitize=True)
    got = prog(*got_args)
    assert any(n.op == "fused" for n in prog.lower(*args).graph.nodes)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_args, want_args):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * max(1.0, float(np.abs(b).max())))


def test_into_with_garbage_scratch_equals_the_fused_reference_in_place_too():
    def f(x, y):
        return ((x * y).exp() - y) / (x.abs() + 1.0) > 0.0
    x, y = _inputs(np.float64)
    g = fuse(cc.trace(lambda x, y: ((x * y).exp() - y) / (x.abs() + 1.0), x, y))
    (node,) = g.nodes
    env = run_graph(g, [x, y])
    want = env[node.out]
    scratch = [np.full(s, np.nan, d) for s, d in scratch_specs(node)]
    dest = np.empty_like(want)
    compute(node, dest, [x, y], scratch)
    np.testing.assert_array_equal(dest, want)
    over = x.copy()  # in place over its first operand (the plan's reuse)
    compute(node, over, [over, y], scratch)
    np.testing.assert_array_equal(over, want)
    unfused, _ = evaluate(cc.trace(lambda x, y: ((x * y).exp() - y) / (x.abs() + 1.0), x, y),
                          [x, y])
    np.testing.assert_array_equal(want, unfused[0])


def test_fuse_option_defaults_and_errors():
    def f(x):
        return (x * 2.0).exp()
    x = np.ones(4, np.float32)
    assert _ops(cc.compile(f).lower(x).graph) == ["fused"]  # the default backend is cpu
    assert _ops(cc.compile(f, backend="numpy").lower(x).graph) == ["full", "multiply", "exp"]
    assert _ops(cc.compile(f, backend="numpy", fuse=True).lower(x).graph) == ["fused"]
    for b in NATIVE:
        assert _ops(cc.compile(f, backend=b).lower(x).graph) == ["fused"]
        assert _ops(cc.compile(f, backend=b, fuse=False).lower(x).graph) == [
            "full", "multiply", "exp"]
    with pytest.raises(ValueError, match="fuse must be True, False or None"):
        cc.compile(f, fuse="yes")
    assert "fuse" in [name for name, _ in cc.pipeline()]
    names = [name for name, _ in cc.pipeline()]
    assert names.index("gemm_accumulate") < names.index("fuse") < names.index("schedule")


def test_compiler_dump_names_the_fusion_pass(capsys, monkeypatch):
    monkeypatch.setenv("COMPILER_DUMP", "fuse")
    cc.compile(lambda x: (x * 2.0).exp(), fuse=True).lower(np.ones(3, np.float32))
    out = capsys.readouterr().out
    assert "--- after fuse ---" in out and "= fused %x {2 ops}" in out


def test_a_chain_target_read_through_another_view_by_a_member_is_not_fused():
    # found by the random programs: add_(alpha=) scales its operand, a reversed view of the
    # target's storage; fused, that view would be read by the node that writes the target
    def f(a):
        a.flatten().add_(a.flatten()[::-1], alpha=0.5)
        return a
    a = np.random.default_rng(0).standard_normal((3, 4))
    g = _fused(f, a)
    assert "fused" not in _ops(g)
    want = a.reshape(-1) + 0.5 * a.reshape(-1)[::-1]
    for backend, fuse_opt in FUSED_BACKENDS:
        got = a.copy()
        cc.compile(f, backend=backend, fuse=fuse_opt, inplace="strict")(got)
        np.testing.assert_array_equal(got.reshape(-1), want)


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_a_deep_shared_body_renders_once_per_value(backend):
    """`x = x * x + x` thirty times: a tree of 2^30 leaves, a DAG of 60 operations, 120
    levels deep. Both emitters render each distinct value once, operands first."""
    def f(x):
        for _ in range(30):
            x = x * x + x
        return x
    x = np.full(64, 0.01, np.float32)
    g = _fused(f, x)
    assert _ops(g) == ["fused"] and g.nodes[0].attrs["body"].cost() == 60
    try:
        prog = cc.compile(f, backend=backend).lower(x)
    except cc.CompilerError as e:  # gpu: lowering needs no device, but may need NVRTC
        pytest.skip(str(e))
    kernel = prog.source
    if backend == "cpu":
        assert len(re.findall(r"= fmul float", kernel)) == 30
    else:
        assert 30 <= kernel.count(" * ") <= 40
    if backend == "cpu":
        want = x.copy()
        for _ in range(30):
            want = want * want + want
        np.testing.assert_array_equal(prog(x), want)


def test_a_body_of_constants_alone_runs_on_numpy_too():
    """Found by the random programs: `c = zeros; c += 0.5; c += 0.5` fuses into a body with no
    array operand (the zero is an inlined constant); the numpy executor's chunked loop then
    iterates over the output alone, where nditer yields pieces, not tuples of pieces. (The
    random programs met it as `a.zero_()` on an argument, which is now a `fill` over `a`'s own
    buffer: a body with `a` as its operand.)"""
    def program(a, b):
        v0 = a.matmul(b)  # noqa: F841
        c = cc.zeros([3, 4])
        c += 0.5
        c += 0.5
        return -c
    a0, b = np.ones((3, 4), np.float32), np.ones(4, np.float32)
    for backend in ("numpy", "cpu"):
        fn = cc.compile(program, backend=backend, fuse=True, sanitize=True)
        a = a0.copy()
        fused = [n for n in fn.lower(a, b).graph.nodes if n.op == "fused"]
        assert fused and not fused[0].inputs
        np.testing.assert_array_equal(fn(a, b), np.full((3, 4), -1.0, np.float32))
        np.testing.assert_array_equal(a, a0)


# -- constants inside bodies (issue 25: `cc.to_tensor(1.0)` broke fusion) ---------------------
def _hundred_adds_of(make_one):
    def f(x):
        for _ in range(100):
            x.add_(make_one())
        return x
    return f


ONE_FORMS = {"python-scalar": lambda: 1.0, "to_tensor": lambda: cc.to_tensor(1.0),
             "to_tensor-np-scalar": lambda: cc.to_tensor(np.float32(1.0)),
             "to_tensor-[[1]]": lambda: cc.to_tensor([[1.0]]),
             "full-0d": lambda: cc.full([], 1.0), "full-[1]": lambda: cc.full([1], 1.0),
             "to_tensor-expanded": lambda: cc.to_tensor(1.0).expand([100, 100]),
             "to_tensor-broadcast_to": lambda: cc.broadcast_to(cc.to_tensor(1.0), [100, 100]),
             "full-sliced": lambda: cc.full([200, 100], 1.0)[50:150]}


@pytest.mark.parametrize("backend,fuse_opt", FUSED_BACKENDS)
@pytest.mark.parametrize("form", list(ONE_FORMS))
def test_single_element_constants_are_literals_of_one_fused_node(form, backend, fuse_opt):
    """100 x `x.add_(cc.to_tensor(1.0))` plans as `x.add_(1.0)` does: one fused node writing
    over x (it planned 199 nodes, 100 passes over memory), bit for bit the sequential sum."""
    x = np.random.default_rng(1).standard_normal((100, 100)).astype(np.float32)
    prog = cc.compile(_hundred_adds_of(ONE_FORMS[form]), backend=backend, fuse=fuse_opt,
                      sanitize=True).lower(x)
    assert _ops(prog.graph) == ["fused"]
    node = prog.graph.nodes[0]
    assert [v.name for v in node.inputs] == ["x"] and node.inplace_of == 0
    assert len(node.attrs["body"]) == 100
    assert prog.plan.output_bytes == 0
    want = x.copy()
    for _ in range(100):
        want += np.float32(1.0)
    got = x.copy()
    assert prog(got) is got
    np.testing.assert_array_equal(got, want)


def test_inlined_constants_of_each_dtype_keep_their_values_on_every_backend():
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    i = np.arange(15, dtype=np.int64).reshape(3, 5)
    b = (i % 3 == 0)

    def f(x, i, b):  # each result a chain of two ops or more: one fused node
        y = x * cc.to_tensor(np.float32(0.1)) + cc.to_tensor(-0.0)
        return ((y - cc.to_tensor([[2.5]])) * cc.to_tensor(np.inf),
                i + cc.to_tensor(2 ** 40) - cc.to_tensor(np.int64(-(2 ** 62))),
                cc.where(b, cc.to_tensor(False), cc.to_tensor(True)).logical_not(),
                x.cast("float64") * cc.to_tensor(np.float64(0.1)) - cc.to_tensor(np.nan))
    want, _ = evaluate(cc.trace(f, x, i, b), [x, i, b])
    for backend, fuse_opt in FUSED_BACKENDS:
        prog = cc.compile(f, backend=backend, fuse=fuse_opt, sanitize=True).lower(x, i, b)
        assert "constant" not in _ops(prog.graph), (backend, str(prog.graph))
        for got, w in zip(prog(x, i, b), want):
            assert got.dtype == w.dtype
            np.testing.assert_array_equal(got, w)
            assert np.array_equal(np.signbit(got), np.signbit(w)) if got.dtype.kind == "f" \
                else True


def test_a_constant_captured_from_an_array_stays_a_node_and_is_seen_to_change():
    """A 0-d numpy array the function captured may change between calls (the program traces
    again): it is not frozen into a body as a literal."""
    w = np.array(2.0, np.float32)

    def f(x):
        for _ in range(3):
            x = x + cc.to_tensor(w)
        return x * cc.to_tensor(1.0)
    x = np.ones(4, np.float32)
    fn = cc.compile(f, backend="cpu")
    # one loop reading w's three captures (0-d, stride 0); the 1.0 is a literal
    assert _ops(fn.lower(x).graph) == ["constant"] * 3 + ["fused"]
    np.testing.assert_array_equal(fn(x), np.full(4, 7.0, np.float32))
    w[...] = 3.0
    np.testing.assert_array_equal(fn(x), np.full(4, 10.0, np.float32))


def test_the_gpu_kernel_of_a_constant_chain_is_one_loop_with_literals():
    x = np.ones((64, 64), np.float32)
    try:
        prog = cc.compile(_hundred_adds_of(ONE_FORMS["to_tensor"]), backend="gpu").lower(x)
    except cc.CompilerError as e:  # lowering needs no device, but may need NVRTC
        pytest.skip(str(e))
    assert _ops(prog.graph) == ["fused"]
    kernels = prog.source.split("__global__")[1:]
    assert len(kernels) == 1  # one launch, no constant copied in
    assert kernels[0].count("= 0x1.0000000000000p+0f;") == 100  # the literal, per addition
    assert len(re.findall(r"= t\d+ \+ t\d+;", kernels[0])) == 99  # in order
