"""Random numbers (issue 10): Philox-4x32-10 as a scalar expression, the seed a 0-d uint64
argument, one stream per call site."""
import math

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.ops import REGISTRY
from compiler.ops import scalar as S
from compiler.ops.elementwise import expr_for
from compiler.ops.random_ops import philox4x32

# Known-answer vectors of Random123 (kat_vectors, philox4x32_10): counter, key -> output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


@pytest.mark.parametrize("counter,key,want", KAT)
def test_philox_known_answers(counter, key, want):
    got = philox4x32(*counter, *key)
    assert [int(w) for w in got] == list(want)


@pytest.mark.parametrize("dist,dtype", [("uniform", "float32"), ("uniform", "float64"),
                                        ("normal", "float32"), ("normal", "float64")])
def test_scalar_expression_computes_the_reference_bits(dist, dtype):
    """What native backends render (the expression) is what the reference computes: the same
    bits, for uniform numbers (integer arithmetic and exact conversions) and normal ones
    (Box-Muller from correctly rounded float64 operations, in one order)."""
    op = REGISTRY["philox"]
    attrs = dict(shape=(997,), stream=2 ** 33 + 5, dist=dist, dtype=np.dtype(dtype))
    index = np.arange(0, 2 ** 40, 2 ** 40 // 997, dtype=np.uint64)[:997]  # high words too
    seed = np.array(2 ** 63 + 12345, np.uint64)
    want = op.ref(seed, **attrs, index=index)
    expr = expr_for(op, attrs, [seed.dtype], np.dtype(dtype))
    with np.errstate(all="ignore"):
        got = np.asarray(S.evaluate(expr, [seed], index=index)).astype(dtype)
    assert got.dtype == want.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


def test_box_muller_is_accurate_to_a_few_float64_ulp():
    """The project's own ln and cos (no library calls, so every backend rounds alike) against
    math.log and math.cos over the whole input range, the ends included."""
    from compiler.ops.random_ops import _NumpyOps, box_muller
    rng = np.random.default_rng(0)
    k = np.concatenate([rng.integers(0, 2 ** 53, 20000, dtype=np.uint64),
                        np.array([0, 1, 2, 2 ** 52, 2 ** 53 - 1], np.uint64)])
    u1 = 1.0 - k.astype(np.float64) * 2.0 ** -53           # (0, 1], as the generator makes it
    u2 = rng.permutation(k).astype(np.float64) * 2.0 ** -53  # [0, 1)
    got = box_muller(u1, u2, _NumpyOps)
    want = np.array([math.sqrt(-2.0 * math.log(a)) * math.cos(2.0 * math.pi * b)
                     for a, b in zip(u1, u2)])
    radius = np.sqrt(-2.0 * np.log(u1))  # |z| <= radius; cos's error is absolute
    inner = u1 < 1.0
    assert np.max(np.abs(got - want)[inner] / radius[inner]) < 2e-15  # measured: 7.4e-16
    assert np.all(got[~inner] == 0.0)


def test_uniform_and_normal_statistics():
    u, z = cc.compile(lambda s: (cc.rand([200_000], seed=s), cc.randn([200_000], "float64",
                                                                       seed=s)))(
        np.array(1, np.uint64))
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert counts.min() > 19_000 and counts.max() < 21_000
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    assert abs(np.mean(np.abs(z) < 1.0) - 0.6827) < 0.005


def test_same_seed_same_numbers_new_seed_no_retrace():
    def step(x, seed):
        y = F.dropout(x, 0.5, seed=seed)
        return y, cc.rand([3], seed=seed)
    fn = cc.compile(step)
    x = np.ones((8, 16), np.float32)
    a = fn(x, np.array(1, np.uint64))
    b = fn(x, np.array(1, np.uint64))
    c = fn(x, np.array(2, np.uint64))
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[1], c[1])
    assert fn.lower(x, np.array(3, np.uint64)) is fn.lower(x, np.array(1, np.uint64))


def test_every_call_site_has_its_own_stream():
    graph = cc.trace(lambda s: (cc.rand([4], seed=s), cc.rand([4], seed=s),
                                cc.randn([4], seed=s)), np.array(0, np.uint64))
    streams = [n.attrs["stream"] for n in graph.nodes if n.op == "philox"]
    assert streams == [0, 1, 2]
    a, b, _ = cc.compile(lambda s: (cc.rand([4], seed=s), cc.rand([4], seed=s),
                                    cc.randn([4], seed=s)))(np.array(0, np.uint64))
    assert not np.array_equal(a, b)


def test_random_ops_are_marked_for_cse():
    """A common-subexpression pass must never merge two random calls."""
    assert REGISTRY["philox"].random
    assert [n for n, op in REGISTRY.items() if op.random] == ["philox"]


def test_dropout_backward_keeps_only_the_mask():
    def step(x, w, seed):
        w.stop_gradient = False
        h = F.dropout(x @ w, 0.5, seed=seed)
        h.sum().backward()
        return w.grad
    x, w = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    # (the numpy backend's graph: unfused, so the mask and its readers are nodes of their own)
    prog = cc.compile(step, backend="numpy").lower(x, w, np.array(7, np.uint64))
    philox = [n for n in prog.graph.nodes if n.op == "philox"]
    assert len(philox) == 1  # the mask is drawn once, in the forward pass
    readers = [n for n in prog.graph.nodes if n.phase == "backward"
               and any(v.producer is not None and v.producer.op == "greater_equal"
                       for v in n.inputs)]
    assert readers and all(n.op == "where" for n in readers)
    g = cc.compile(step)(x, w, np.array(7, np.uint64))
    keep = cc.compile(lambda s: cc.rand([4, 5], seed=s) >= 0.5)(np.array(7, np.uint64))
    np.testing.assert_allclose(g, x.T @ (keep * 2.0).astype(np.float32))


def test_seed_must_be_integer():
    with pytest.raises(cc.TraceError, match="seed"):
        cc.compile(lambda s: cc.rand([2], seed=s))(np.array(1.5))


def test_cpu_draws_the_same_bits_as_numpy():
    """The native code renders the same expression: uniform and normal numbers bit for bit,
    for a seed above 2**32 and counters past 2**16."""
    def draw(s):
        return (cc.rand([300, 257], seed=s), cc.rand([5], "float64", seed=s),
                cc.randn([1000], seed=s), F.dropout(cc.ones([64, 64]), 0.3, seed=s))
    seed = np.array(2 ** 40 + 77, np.uint64)
    want = cc.compile(draw, backend="numpy")(seed)
    got = cc.compile(draw, backend="cpu")(seed)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[3], want[3])
