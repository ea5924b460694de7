"""Arguments that share memory behave as in eager NumPy / PyTorch (issue 7, ARCHITECTURE.md §4):
they are traced as views of one storage, a write through one is seen through the other, and how
they share is part of the compile cache's key. Every test runs on each backend."""
import numpy as np
import pytest

import compiler as cc

pytestmark = pytest.mark.usefixtures("each_backend")

X = np.arange(12, dtype=np.float64).reshape(3, 4) / 7.0


def twice(a, b):
    a.multiply_(2.0)
    return a + b


def test_same_array_twice_one_of_them_mutated():
    x = np.ones(4)
    out = cc.compile(twice)(x, x)
    np.testing.assert_array_equal(out, [4.0] * 4)   # eager: both are the doubled array
    np.testing.assert_array_equal(x, [2.0] * 4)


def numpy_twice(a, b):
    a *= 2.0
    return a + b


@pytest.mark.parametrize("views", [
    lambda x: (x[0:2], x[1:3]),                 # overlapping row slices
    lambda x: (x[:, 1:], x[:, :3]),             # overlapping column slices (not contiguous)
    lambda x: (x, x[1]),                        # an array and a row of it (broadcast)
    lambda x: (x[1:, ::-1], x[1:]),             # a reversed view
    lambda x: (x[:, ::2], x[:, 1:3]),           # a stepped view
], ids=["rows", "columns", "slice", "reversed", "stepped"])
def test_overlapping_views_match_numpy(views):
    def f(a, b):
        a.multiply_(2.0)
        return a + b
    want_base = X.copy()
    want = numpy_twice(*views(want_base))
    base = X.copy()
    got = cc.compile(f)(*views(base))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(base, want_base, rtol=1e-12)


def test_transposed_alias():
    def f(a, b):
        b.add_(1.0)
        return a * 1.0
    x = np.eye(3) + np.arange(9.0).reshape(3, 3)
    want = x.copy()
    np.add(want.T, 1.0, out=want.T)
    out = cc.compile(f)(x, x.T)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(x, want)


def test_aliasing_is_part_of_the_cache_key():
    fn = cc.compile(twice)
    x, y = np.ones(4), np.ones(4)
    shared = fn.lower(x, x)
    separate = fn.lower(x, y)
    assert shared is not separate
    assert len(shared.graph.inputs) == 1 and len(separate.graph.inputs) == 2
    np.testing.assert_array_equal(fn(x, y), [3.0] * 4)   # a fresh pair: no sharing
    np.testing.assert_array_equal(fn(y, y), [4.0] * 4)
    assert fn.lower(y, y) is shared
    with pytest.raises(cc.TraceError, match="share memory differently"):
        separate(y, y)


def test_aliasing_arguments_with_backward():
    """A leaf whose array is also passed as another argument: the gradient sees both uses,
    the update under no_grad lands in the one caller array."""
    def step(w, w_again, x):
        w.stop_gradient = False
        loss = ((x @ w) * w_again.sum()).sum()
        loss.backward()
        with cc.no_grad():
            w_again.subtract_(0.1 * w.grad)
        return loss, w.grad

    rng = np.random.default_rng(3)
    w0, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    w = w0.copy()
    loss, grad = cc.compile(step)(w, w, x)
    # loss = sum(x @ w) * sum(w): d/dw = x.sum(0)[:, None] * sum(w) + sum(x @ w)
    want = np.broadcast_to(x.sum(0)[:, None], w0.shape) * w0.sum() + (x @ w0).sum()
    np.testing.assert_allclose(loss, (x @ w0).sum() * w0.sum(), rtol=1e-12)
    np.testing.assert_allclose(grad, want, rtol=1e-12)
    np.testing.assert_allclose(w, w0 - 0.1 * want, rtol=1e-12)


def test_overlap_that_is_not_a_view_is_refused_before_anything_runs():
    x = np.arange(4, dtype=np.int64)
    other = x.view(np.float64)                  # same bytes, another dtype
    before = x.copy()

    def f(a, b):
        a.add_(1)
        return b * 2.0

    with pytest.raises(cc.InplaceError, match="share memory, but not as views") as e:
        cc.compile(f)(x, other)
    assert "test_aliasing_arguments.py:" in str(e.value)
    np.testing.assert_array_equal(x, before)


def test_disjoint_views_of_one_array_stay_separate_arguments():
    def f(a, b):
        a.add_(1.0)
        return b * 1.0
    x = X.copy()
    prog = cc.compile(f).lower(x[:, ::2], x[:, 1::2])  # interleaved, no element shared
    assert [v.name for v in prog.graph.inputs] == ["a", "b"]
    out = cc.compile(f)(x[:, ::2], x[:, 1::2])
    np.testing.assert_array_equal(out, X[:, 1::2])
    np.testing.assert_array_equal(x[:, ::2], X[:, ::2] + 1)
