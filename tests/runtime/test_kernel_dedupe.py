"""Identical kernels compiled once (runtime/cpu/emitter.py, `ModuleEmitter._unique`): nodes whose
kernels have the same IR but for names (every layer of a stack: same shapes, strides, dtypes and
attributes) call one function, defined once in the module; what runs is unchanged (bit for bit
against the build with one function per node, `emitter.DEDUPE = False`); kernels that differ
(layout, shape, constants in the body) stay apart; the disk cache stores and reloads the smaller
module."""
import re
from collections import OrderedDict

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.ops import REGISTRY, VIEW
from runtime.cpu import disk_cache, emitter, jit
from tests.backends import AVAILABLE

pytestmark = pytest.mark.skipif("cpu" not in AVAILABLE, reason="the cpu backend can't run here")

LAYERS = 6


def sgd_step(lr):
    """A training step of a stack of identical hidden layers (relu), SGD with learning rate
    `lr` (a constant in the update kernels) into the caller's arrays."""
    def step(x, labels, *params):
        for p in params:
            p.stop_gradient = False
        ws, bs = params[0::2], params[1::2]
        h = x
        for w, b in zip(ws[:-1], bs[:-1]):
            h = F.relu_(h @ w + b)
        loss = F.cross_entropy(h @ ws[-1] + bs[-1], labels)
        loss.backward()
        with cc.no_grad():
            for p in params:
                p.subtract_(lr * p.grad)
        return loss
    return step


deep_mlp_step = sgd_step(0.1)


def mlp_inputs(layers=LAYERS, width=32, batch=8, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, width)).astype(np.float32)
    labels = rng.integers(0, classes, size=batch).astype(np.int64)
    params = []
    for i in range(layers):
        n_out = classes if i == layers - 1 else width
        params += [(rng.standard_normal((width, n_out)) / np.sqrt(width)).astype(np.float32),
                   (rng.standard_normal(n_out) * 0.1).astype(np.float32)]
    return [x, labels] + params


@pytest.fixture
def fresh(monkeypatch):
    """Every compile reaches LLVM or the disk (a private in-memory code cache)."""
    monkeypatch.setattr(jit, "_cache", OrderedDict())


def defines(source):
    return re.findall(r'^define [^@]*@"([^"]+)"', source, re.MULTILINE)


def calls(source, name):
    return source.count(f'@"{name}"(') - 1  # (one is the definition)


def kernel_nodes(prog):
    return [n for n in prog.graph.nodes if REGISTRY[n.op].kind != VIEW and n.out.size > 0]


def run_both(fn, args, monkeypatch, **options):
    """(program, outputs, arrays after the call) for the deduplicated build, then the same for
    the build with one function per node; each on its own copies of `args`."""
    got = []
    for dedupe in (True, False):
        monkeypatch.setattr(emitter, "DEDUPE", dedupe)
        mine = [a.copy() for a in args]
        prog = cc.compile(fn, backend="cpu", sanitize=True, **options).lower(*mine)
        out = prog(*mine)
        got.append((prog, out, mine))
    return got


def assert_same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def test_a_stack_of_layers_defines_fewer_functions_than_nodes_and_computes_the_same_bits(
        fresh, monkeypatch):
    args = mlp_inputs()
    (prog, out, arrays), (plain, plain_out, plain_arrays) = run_both(deep_mlp_step, args,
                                                                     monkeypatch)
    kernels = defines(prog.source)
    nodes = len(kernel_nodes(prog))
    assert len(defines(plain.source)) - 1 >= nodes  # one function (or more) per node, + run
    assert len(kernels) - 1 < nodes / 2               # the layers share theirs
    # Every hidden layer's forward matmul (same shapes, strides, dtypes) calls one function.
    matmuls = [k for k in kernels if k.endswith("_matmul")]
    assert max(calls(prog.source, k) for k in matmuls) >= LAYERS - 1
    # What runs is unchanged: the loss and every updated weight, bit for bit.
    assert_same_bits(out, plain_out)
    for a, b in zip(arrays, plain_arrays):
        assert_same_bits(a, b)
    # and it is the numpy reference's training step
    ref = [a.copy() for a in args]
    ref_loss = cc.compile(deep_mlp_step, backend="numpy").lower(*ref)(*ref)
    np.testing.assert_allclose(out, ref_loss, rtol=1e-5)
    for a, b in zip(arrays, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def fused_stack(x, w):
    # Fused chains of 10 operations (interleaved loops: each its own `!llvm.loop` metadata
    # node, numbered module-wide) between matmuls that keep them apart.
    for _ in range(4):
        x = x @ w
        for _ in range(5):
            x = x * 0.5 + 0.25
    return x


def test_kernels_that_differ_only_in_their_loop_metadata_are_one(fresh, monkeypatch):
    x = np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((16, 16)).astype(np.float32) * 0.25
    (prog, out, _), (plain, plain_out, _) = run_both(fused_stack, [x, w], monkeypatch)
    fused = [k for k in defines(prog.source) if k.endswith("_fused")]
    assert len([k for k in defines(plain.source) if k.endswith("_fused")]) == 4
    assert "llvm.loop.interleave.count" in prog.source
    assert len(fused) == 1 and calls(prog.source, fused[0]) == 4
    assert_same_bits(out, plain_out)


def parallel_stack(x, w):
    # Elementwise loops and full reductions above the parallel threshold: their bodies, their
    # `.chunk` functions and the reductions' `.after` functions, per layer.
    total = None
    for _ in range(3):
        x = (x * w).tanh()
        s = x.sum()
        total = s if total is None else total + s
    return x, total


def test_parallel_kernels_and_their_chunk_and_after_functions_are_shared(fresh, monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1 << 18).astype(np.float32)
    w = rng.standard_normal(1 << 18).astype(np.float32)
    (prog, out, _), (plain, plain_out, _) = run_both(parallel_stack, [x, w], monkeypatch,
                                                     threads=2)
    names, plain_names = defines(prog.source), defines(plain.source)

    def ending(names, suffix):
        return [k for k in names if k.endswith(suffix)]
    # One sum (body, chunk, after) for the three; two fused loops: the first layer reads the
    # caller's x, the others write over their input in place (one pointer fewer).
    assert len(ending(plain_names, ".chunk")) == 6 and len(ending(plain_names, ".after")) == 3
    assert len(ending(names, ".chunk")) == 3 and len(ending(names, ".after")) == 1
    assert len(ending(names, "_sum")) == 1 and len(ending(names, "_fused")) == 2
    assert calls(prog.source, ending(names, "_sum.after")[0]) == 3
    for a, b in zip(out, plain_out):
        assert_same_bits(a, b)


def test_kernels_with_other_layouts_or_shapes_stay_apart(fresh, monkeypatch):
    def f(x, y, z):
        # same op: a transposed operand, another shape, another dtype stay apart; another
        # array of x's shape (z) shares x's kernel
        return x + 1.0, x.t() + 1.0, y + 1.0, x.cast("float64") + 1.0, z + 1.0
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.arange(10, dtype=np.float32)
    z = -x
    monkeypatch.setattr(emitter, "DEDUPE", True)
    prog = cc.compile(f, backend="cpu", sanitize=True, fuse=False).lower(x, y, z)
    adds = [k for k in defines(prog.source) if k.endswith("_add")]
    assert len(adds) == 4
    out = prog(x, y, z)
    for got, want in zip(out, (x + 1, x.T + 1, y + 1, x.astype(np.float64) + 1, z + 1)):
        assert_same_bits(got, want)


def test_the_disk_cache_stores_and_reloads_the_deduplicated_module(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    monkeypatch.setattr(emitter, "DEDUPE", True)
    disk_cache._reset()
    try:
        results = []
        for _ in range(2):
            jit._cache.clear()
            args = mlp_inputs(seed=4)
            llvm = jit.STATS["llvm"]
            hits = jit.STATS["hit"]
            prog = cc.compile(deep_mlp_step, backend="cpu").lower(*args)
            results.append((prog(*args), args, jit.STATS["llvm"] - llvm,
                            jit.STATS["hit"] - hits, prog.source))
        (out1, args1, llvm1, hit1, src1), (out2, args2, llvm2, hit2, src2) = results
        assert (llvm1, hit1) == (1, 0) and (llvm2, hit2) == (0, 1)
        assert src1 == src2 and len(defines(src1)) - 1 < len(kernel_nodes(prog)) / 2
        assert_same_bits(out1, out2)
        for a, b in zip(args1, args2):
            assert_same_bits(a, b)
    finally:
        disk_cache._reset()


def test_each_distinct_gemm_reduction_and_softmax_kernel_is_built_once(fresh, monkeypatch):
    # Keyed before emission (`emitter._node_key`): a layer whose matmul, bias-gradient sum or
    # log_softmax has the same op, attributes and places as an earlier one's calls that
    # function without building its body again (building it and then merging identical text
    # was most of the emitter's time on a deep MLP).
    builds = []
    for name in ("_matmul", "_gemm", "_reduce", "_reduce_chunk", "_softmax"):
        def wrapped(self, *a, _orig=getattr(emitter.ModuleEmitter, name), **k):
            builds.append(_orig.__name__)
            return _orig(self, *a, **k)
        monkeypatch.setattr(emitter.ModuleEmitter, name, wrapped)
    args = mlp_inputs(layers=LAYERS)
    (prog, out, arrays), (plain, plain_out, plain_arrays) = run_both(deep_mlp_step, args,
                                                                     monkeypatch)
    families = ("matmul", "gemm", "sum", "log_softmax")
    nodes = [n for n in kernel_nodes(prog) if n.op in families]
    kernels = [k for k in defines(prog.source)
               if re.fullmatch(r"k\d+_(\w+)", k) and k.split("_", 1)[1] in families]
    dedupe_builds = builds[:len(builds) - len(nodes)]  # (then the plain build: one per node)
    assert len(dedupe_builds) < len(nodes) / 2
    # every matmul body built is a function of the module (none built and merged away)
    assert dedupe_builds.count("_matmul") == len([k for k in kernels if k.endswith("_matmul")])
    # (two sums with other attributes but the same code may still be merged by `_unique`)
    assert len(dedupe_builds) >= len(kernels)
    assert_same_bits(out, plain_out)
    for a, b in zip(arrays, plain_arrays):
        assert_same_bits(a, b)
