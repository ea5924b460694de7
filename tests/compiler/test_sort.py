"""sort, argsort and topk (issue 24), on every available backend: Paddle's signatures and the
examples of its documentation, the pinned order (stable, NaN after every number: last
ascending, first descending; CONVENTIONS.md), gradients through the gathered values, the
errors naming the user's line, and what runs: a native cpu kernel over a planned workspace."""
from __future__ import annotations

import os

import numpy as np
import pytest

import compiler as cc
from tests.backends import AVAILABLE

HERE = os.path.basename(__file__)

# Paddle's documented example (paddle.argsort / paddle.sort): ties (5, 5) in the first row
X = np.array([[[5, 8, 9, 5], [0, 0, 1, 7], [6, 9, 2, 4]],
              [[5, 2, 4, 2], [4, 7, 7, 9], [1, 7, 0, 6]]], np.float32)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_paddles_documented_examples(backend):
    f = cc.compile(lambda x: (cc.argsort(x, axis=-1), cc.argsort(x, axis=0), x.argsort(axis=1),
                              cc.sort(x=x, axis=-1), cc.sort(x=x, axis=0)), backend=backend)
    a1, a0, a_1, s1, s0 = f(X)
    np.testing.assert_array_equal(a1, [[[0, 3, 1, 2], [0, 1, 2, 3], [2, 3, 0, 1]],
                                       [[1, 3, 2, 0], [0, 1, 2, 3], [2, 0, 3, 1]]], strict=False)
    assert a1.dtype == np.int64 and a0.dtype == np.int64
    np.testing.assert_array_equal(a0, [[[0, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]],
                                       [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 1]]])
    np.testing.assert_array_equal(a_1, [[[1, 1, 1, 2], [0, 0, 2, 0], [2, 2, 0, 1]],
                                        [[2, 0, 2, 0], [1, 1, 0, 2], [0, 2, 1, 1]]])
    np.testing.assert_array_equal(s1, [[[5, 5, 8, 9], [0, 0, 1, 7], [2, 4, 6, 9]],
                                       [[2, 2, 4, 5], [4, 7, 7, 9], [0, 1, 6, 7]]])
    np.testing.assert_array_equal(s0, [[[5, 2, 4, 2], [0, 0, 1, 7], [1, 7, 0, 4]],
                                       [[5, 8, 9, 5], [4, 7, 7, 9], [6, 9, 2, 6]]])
    assert s1.dtype == np.float32
    # paddle.topk's examples
    t = cc.compile(lambda d1, d2: (cc.topk(d1, k=1), cc.topk(d2, k=1), cc.topk(d2, k=1, axis=0)),
                   backend=backend)
    (v1, i1), (v2, i2), (v4, i4) = t(np.array([1, 4, 5, 7]), np.array([[1, 4, 5, 7],
                                                                       [2, 6, 2, 5]]))
    assert (v1.tolist(), i1.tolist()) == ([7], [3]) and i1.dtype == np.int64
    assert (v2.tolist(), i2.tolist()) == ([[7], [6]], [[3], [1]])
    assert (v4.tolist(), i4.tolist()) == ([[2, 6, 5, 7]], [[1, 1, 0, 0]])


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_after_every_number_and_ties_in_their_order(backend, dtype):
    x = np.array([2.0, np.nan, -0.0, 1.0, np.inf, 0.0, np.nan, 2.0, -np.inf], dtype)
    f = cc.compile(lambda t: (t.argsort(), t.argsort(descending=True), t.sort(descending=True),
                              t.topk(3), t.topk(3, largest=False)), backend=backend)
    up, down, values, (tv, ti), (bv, bi) = f(x)
    # -0.0 (2) and +0.0 (5) are a tie, as are the 2.0s (0, 7) and the NaNs (1, 6)
    assert up.tolist() == [8, 2, 5, 3, 0, 7, 4, 1, 6]
    assert down.tolist() == [1, 6, 4, 0, 7, 3, 2, 5, 8]
    np.testing.assert_array_equal(values, x[down])
    assert np.signbit(values[6]) and not np.signbit(values[7])  # the zeros kept their order
    assert ti.tolist() == [1, 6, 4] and np.isnan(tv[:2]).all() and tv[2] == np.inf
    assert bi.tolist() == [8, 2, 5] and bv.dtype == dtype


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_long_rows_with_many_ties_match_numpys_stable_sort(backend, dtype):
    """Rows of 1000 (10 merge passes) and 513 (10, one more than a power of two) of 7
    distinct values, along each axis of a transposed caller array."""
    rng = np.random.default_rng(24)
    x = rng.integers(-3, 4, size=(1000, 3)).astype(dtype).T      # strided rows
    y = rng.integers(-3, 4, size=(513, 2)).astype(dtype)
    f = cc.compile(lambda a, b: (a.argsort(), b.argsort(axis=0), a.argsort(descending=True)),
                   backend=backend)
    ga, gb, gd = f(x, y)
    np.testing.assert_array_equal(ga, np.argsort(x, axis=-1, kind="stable"))
    np.testing.assert_array_equal(gb, np.argsort(y, axis=0, kind="stable"))
    # descending and stable: equal values keep their order
    np.testing.assert_array_equal(gd, np.argsort(-x.astype(np.float64), axis=-1, kind="stable"))


@pytest.mark.parametrize("backend", AVAILABLE)
def test_gradients_reach_the_positions_the_values_came_from(backend):
    x = np.array([[0.3, -1.2, 2.5, 0.7], [1.1, 0.2, -0.4, 3.0]])

    def step(w):
        w.stop_gradient = False
        v, i = w.topk(2)                 # [[2.5, 0.7], [3.0, 1.1]]
        s = w.sort(axis=0, descending=True)
        ((v * cc.to_tensor(np.array([[1.0, 10.0]]))).sum() + (s[0:1] * 100.0).sum()).backward()
        return w.grad, i

    g, i = cc.compile(step, backend=backend)(x)
    want = np.array([[0.0, 0.0, 1.0, 10.0], [10.0, 0.0, 0.0, 1.0]])
    want[np.argmax(x, axis=0), np.arange(4)] += 100.0   # the column maxima, sorted first
    np.testing.assert_array_equal(g, want)
    assert i.tolist() == [[2, 3], [3, 0]]


@pytest.mark.parametrize("backend", AVAILABLE)
def test_sorting_leaves_the_callers_array_alone(backend):
    x = np.array([3.0, 1.0, 2.0])
    keep = x.copy()
    out = cc.compile(lambda t: t.sort(), backend=backend)(x)
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x, keep)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_edge_shapes(backend):
    f = cc.compile(lambda s, e, one: (s.sort(), s.argsort(), s.topk(1), e.argsort(axis=0),
                                      e.topk(2, axis=1), one.topk(1, largest=False)),
                   backend=backend)
    s, si, (tv, ti), ea, (ev, _), (ov, oi) = f(np.array(2.5, np.float32),
                                                np.zeros((0, 3)), np.array([[4]]))
    assert s.shape == () and s == 2.5 and si.shape == () and si == 0
    assert tv.shape == () and ti.shape == () and ti.dtype == np.int64
    assert ea.shape == (0, 3) and ea.dtype == np.int64 and ev.shape == (0, 2)
    assert ov.tolist() == [[4]] and oi.tolist() == [[0]]


@pytest.mark.parametrize("call, error, words", [
    (lambda t: t.topk(4), cc.ShapeError, "k=4 is out of range for an axis of size 3"),
    (lambda t: t.topk(t.shape[0] - 5), cc.ShapeError, "k=-2 is out of range"),
    (lambda t: t.topk(0), cc.ShapeError, "k=0 is out of range for an axis of size 3 (1 <= k"),
    (lambda t: t.sort(axis=1), cc.ShapeError, "axis 1 is out of range"),
    (lambda t: (t > 0).argsort(), cc.TraceError, "bool tensors can't be sorted"),
    (lambda t: t.topk(cc.to_tensor(np.array(1))), cc.TraceError, "k must be a Python int"),
])
def test_refused_calls_name_the_users_line(call, error, words):
    line = f"{HERE}:{call.__code__.co_firstlineno}"
    with pytest.raises(error) as e:
        cc.compile(call, backend="numpy")(np.ones(3))
    assert words in str(e.value) and line in str(e.value), str(e.value)


@pytest.mark.skipif("cpu" not in AVAILABLE, reason="no cpu backend here")
def test_cpu_sorts_natively_in_the_planned_workspace():
    x = np.random.default_rng(0).standard_normal((6, 50)).astype(np.float32)
    fn = cc.compile(lambda t: t.argsort(axis=0, descending=True), backend="cpu", sanitize=True)
    prog = fn.lower(x)
    assert not prog._exec.fallback_nodes
    (node,) = [n for n in prog.graph.nodes if n.op == "argsort"]
    assert prog.plan.workspace[node].size >= x.size * 8   # the merge sort's second row
    assert 'void @"k0_argsort"(' in prog._exec.source    # a generated kernel, not a callback
    # the sanitizer poisons the arena (workspace included) before the call
    np.testing.assert_array_equal(fn(x), np.argsort(-x, axis=0, kind="stable"))


def test_paddle_itself_agrees_where_it_documents_or_pins_the_order():
    """PaddlePaddle, when installed: sort/argsort (stable=True: ties in order, NaN last
    ascending, first descending) and topk's values; topk's indices on distinct values (Paddle
    leaves its tie order unspecified: 3.3.1 returned [1, 3] for the top 2 of [1, 3, 3, 3, 0],
    this project [1, 2], as CONVENTIONS.md says)."""
    paddle = pytest.importorskip("paddle")
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 4, size=(4, 9)).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = np.nan
    d = rng.permutation(36).reshape(4, 9).astype(np.float64)
    f = cc.compile(lambda t, u: (t.argsort(axis=1, stable=True),
                                 t.argsort(axis=0, descending=True, stable=True),
                                 t.sort(axis=1, descending=True), u.topk(3, axis=0),
                                 u.topk(2, largest=False)), backend="numpy")
    mine = f(x, d)
    px, pd = paddle.to_tensor(x), paddle.to_tensor(d)
    theirs = (paddle.argsort(px, axis=1, stable=True),
              paddle.argsort(px, axis=0, descending=True, stable=True),
              paddle.sort(px, axis=1, descending=True), paddle.topk(pd, 3, axis=0),
              paddle.topk(pd, 2, largest=False))
    for m, t in zip(mine, theirs):
        for a, b in zip(m if isinstance(m, tuple) else (m,), t if isinstance(t, tuple) else (t,)):
            np.testing.assert_array_equal(a, b.numpy(), strict=True)
