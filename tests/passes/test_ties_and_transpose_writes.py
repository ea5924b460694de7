"""Two edges the random programs rarely hit: gradients at ties of max/maximum/minimum, and inplace
writes through a 3-D transpose (whose inverse is another permutation, unlike a 2-D one).

Tie rules (PyTorch's, see NOTES.md): a `max` reduction splits the gradient evenly among the tied
maxima (`amax`); `maximum`/`minimum` give each operand half where they are equal. For two-way
ties both agree with the central difference, so finite differences check them too.
"""
import numpy as np
import pytest
from gradcheck import check_grads

import compiler as cc
from tests.backends import assert_sin_equal

pytestmark = pytest.mark.usefixtures("each_backend")

RNG = np.random.default_rng(0)


def _grads(body, *arrays):
    """d sum(body(*xs)) / d xs, compiled (sanitized) and run."""
    def program(*xs):
        for x in xs:
            x.stop_gradient = False
        body(*xs).sum().backward()
        return tuple(x.grad for x in xs)
    return cc.compile(program, sanitize=True)(*[a.copy() for a in arrays])


# -- ties ----------------------------------------------------------------------------------------
X = np.array([1.0, 2.0, 3.0, 2.0])
Y = np.array([1.0, 1.0, 3.0, 5.0])   # ties at positions 0 and 2


def test_maximum_splits_a_tied_gradient_evenly():
    gx, gy = _grads(lambda x, y: x.maximum(y), X, Y)
    np.testing.assert_array_equal(gx, [0.5, 1.0, 0.5, 0.0])
    np.testing.assert_array_equal(gy, [0.5, 0.0, 0.5, 1.0])


def test_minimum_splits_a_tied_gradient_evenly():
    gx, gy = _grads(lambda x, y: x.minimum(y), X, Y)
    np.testing.assert_array_equal(gx, [0.5, 0.0, 0.5, 1.0])
    np.testing.assert_array_equal(gy, [0.5, 1.0, 0.5, 0.0])


def test_tied_maximum_with_broadcasting_sums_the_halves():
    x = np.array([[1.0, 2.0], [2.0, 3.0]])
    y = np.array([2.0])
    gx, gy = _grads(lambda x, y: x.maximum(y) * 3.0, x, y)
    np.testing.assert_array_equal(gx, [[0.0, 1.5], [1.5, 3.0]])
    np.testing.assert_array_equal(gy, [3.0 + 1.5 + 1.5])


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_an_operand_compared_with_itself_gets_the_whole_gradient(op):
    (gx,) = _grads(lambda x: getattr(x, op)(x) * 2.0, X)
    np.testing.assert_array_equal(gx, np.full(4, 2.0))


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_two_way_ties_agree_with_finite_differences(op):
    check_grads(lambda x, y: getattr(x, op)(y), X, Y)
    check_grads(lambda x, y: getattr(x.reshape([2, 2]), op)(y[:2]), X, Y)


def test_max_reduction_splits_ties_evenly_among_all_maxima():
    # Paddle's amax docstring case: 5 maxima overall, ties of 2 and 3 along the rows.
    x = np.array([[0.1, 0.9, 0.9, 0.9], [0.9, 0.9, 0.6, 0.7]])
    (g,) = _grads(lambda x: x.max(), x)
    np.testing.assert_allclose(g, [[0, 0.2, 0.2, 0.2], [0.2, 0.2, 0, 0]], rtol=1e-15)
    (g,) = _grads(lambda x: x.max(axis=0), x)
    np.testing.assert_allclose(g, [[0, 0.5, 1, 1], [1, 0.5, 0, 0]], rtol=1e-15)
    (g,) = _grads(lambda x: x.max(axis=-1, keepdim=True), x)
    np.testing.assert_allclose(g, [[0, 1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0, 0]], rtol=1e-15)


def test_two_way_max_reduction_ties_agree_with_finite_differences():
    x = np.array([[0.3, 0.9, 0.9], [0.5, -0.2, 0.5]])
    check_grads(lambda x: x.max(axis=1), x)


def test_tie_rules_match_pytorch_where_installed():
    torch = pytest.importorskip("torch")
    x = np.array([[0.1, 0.9, 0.9, 0.9], [0.9, 0.9, 0.6, 0.7]])
    tx = torch.tensor(x, requires_grad=True)
    tx.amax(dim=1).sum().backward()
    np.testing.assert_allclose(_grads(lambda x: x.max(axis=1), x)[0], tx.grad.numpy())
    for op in ("maximum", "minimum"):
        ta, tb = (torch.tensor(a, requires_grad=True) for a in (X, Y))
        getattr(torch, op)(ta, tb).sum().backward()
        gx, gy = _grads(lambda x, y: getattr(x, op)(y), X, Y)
        np.testing.assert_array_equal(gx, ta.grad.numpy())
        np.testing.assert_array_equal(gy, tb.grad.numpy())


# -- writes through a 3-D transpose ----------------------------------------------------------------
C = RNG.standard_normal((2, 3, 4))
D = RNG.standard_normal((3, 4, 2))


def writes_through_3d_transposes(c, d):
    t = c.transpose([1, 2, 0])             # [3, 4, 2]; its inverse is [2, 0, 1]
    t.add_(d)
    t[0] = 0.5                             # set-item on a slice of the transpose
    c.transpose([2, 0, 1])[1].scale_(2.0)  # [4, 2, 3], row 1: a strided region of c
    b = c * 1.0
    b.transpose([2, 0, 1]).sin_()          # on an intermediate
    return b, t * 1.0


def numpy_twin(c, d):
    t = c.transpose(1, 2, 0)
    t += d
    t[0] = 0.5
    c.transpose(2, 0, 1)[1] *= 2.0
    b = c * 1.0
    bt = b.transpose(2, 0, 1)
    bt[...] = np.sin(bt)
    return b, t * 1.0


@pytest.mark.parametrize("inplace", ["auto", "off"])
def test_inplace_writes_through_a_3d_transpose_reach_the_base(inplace, each_backend):
    c, d = C.copy(), D.copy()
    b, t = cc.compile(writes_through_3d_transposes, inplace=inplace, sanitize=True)(c, d)
    c_want = C.copy()
    b_want, t_want = numpy_twin(c_want, D.copy())
    np.testing.assert_array_equal(c, c_want)     # the caller's array, written through views
    assert_sin_equal(b, b_want, each_backend)    # b holds sin values
    np.testing.assert_array_equal(t, t_want)
    np.testing.assert_array_equal(d, D)


@pytest.mark.backends("numpy")  # the numpy pipeline's decisions
def test_the_write_through_a_3d_transpose_runs_in_place():
    prog = cc.compile(writes_through_3d_transposes, inplace="strict").lower(C, D)
    requested = [(d.op, d.inplace) for d in prog.plan.decisions if d.requested]
    assert requested and all(taken for _, taken in requested), requested


def test_gradients_through_a_3d_transpose_write_back():
    def body(c, d):
        b = c * 1.0
        t = b.transpose([1, 2, 0])
        t.multiply_(d)          # both c's and d's gradients flow through the write-back
        t[1].tanh_()
        return b.transpose([2, 0, 1]) * 1.5
    check_grads(body, C, D)
