"""A read never changes a tensor's gradient history (issue 7): reading a view under no_grad()
after a write to its base re-derives the view from the new base with the history the view was
created with, so the gradient through it still flows."""
import numpy as np
import pytest

import compiler as cc
from tests.passes.gradcheck import check_grads

pytestmark = pytest.mark.usefixtures("each_backend")

C0 = np.array([[0.921, 1.0923, 1.7444, 1.6727], [0.8488, 0.6698, 1.6929, 0.9064]])


def test_view_read_under_no_grad_keeps_its_gradient():
    def f(v0):
        v0.stop_gradient = False
        v7 = v0.divide(cc.to_tensor(C0))
        v8 = v7[0:1]
        v8 -= -2.0
        with cc.no_grad():
            v8.sum(axis=0, keepdim=True)   # only reads v8
        (v8 * v8).sum().backward()
        return v0.grad

    grad = cc.compile(f)(np.ones(4))
    # PyTorch eager: 2 * (1 / C0[0] + 2) / C0[0]
    np.testing.assert_allclose(grad, [6.7009, 5.3383, 2.9503, 3.1062], atol=1e-4)
    np.testing.assert_allclose(grad, 2 * (1 / C0[0] + 2) / C0[0], rtol=1e-6)


def _unsqueeze_body(v0):
    v1 = v0 * 1.5
    v4 = v1.unsqueeze(2)
    v1[0].add_(1.0)          # a write into v1 through another view
    with cc.no_grad():
        v4.add(v4)           # a read of v4 under no_grad
    return v4 * v4


def test_unsqueeze_view_read_under_no_grad_against_finite_differences():
    check_grads(_unsqueeze_body, np.random.default_rng(0).standard_normal((2, 3)))


@pytest.mark.parametrize("when", ["before", "after"])
def test_view_made_under_no_grad_stays_without_history(when):
    """PyTorch: a view created in no_grad mode carries no gradient, even after its base is
    written outside no_grad; a view created with grad keeps it however it is read."""
    def f(x):
        x.stop_gradient = False
        y = x * 2.0
        with cc.no_grad():
            v = y[0:1]
        y.add_(1.0)
        w = y[1:2]
        if when == "after":
            with cc.no_grad():
                w.sum()
        return v.stop_gradient, w.stop_gradient

    assert cc.compile(f)(np.ones(3)) == (True, False)
