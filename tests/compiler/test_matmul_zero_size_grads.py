"""Issue 22 item 12: matmul's gradients where a dimension is 0 (the inner one, a batch one, the
rows or the columns), batched and broadcast operands included, on every backend, with the
sanitizer on (the arena starts poisoned, so a gradient buffer the program never writes shows
as NaN instead of as a lucky zero). The reference is numpy's: for loss = sum(w * (x @ y)),
dx = (w @ y^T) summed over x's broadcast dims and dy = (x^T @ w) summed over y's."""
from __future__ import annotations

import numpy as np
import pytest

import compiler as cc
from tests.backends import AVAILABLE

CASES = [
    ((5, 5, 0), (0, 5)),        # the reported case: a 2-D weight under a batch, inner dim 0
    ((5, 0, 4), (4, 3)),        # no rows under a batch: dy is a sum of nothing (zeros)
    ((0, 3, 4), (4, 2)),        # an empty batch, 2-D weight
    ((2, 3, 4), (4, 0)),        # no columns
    ((3, 0), (0, 4)),           # 2-D, inner dim 0: the product is zeros, so are... nothing
    ((0, 3), (3, 4)),           # 2-D, no rows: dy = zeros
    ((3, 4), (4, 0)),           # 2-D, no columns: dx = zeros
    ((2, 3, 0), (2, 0, 4)),     # batched, inner dim 0
    ((2, 0, 3), (2, 3, 4)),     # batched, no rows
    ((2, 1, 3, 4), (0, 4, 5)),  # broadcast batch of size 0: both gradients are zeros
    ((0, 1, 3, 4), (2, 4, 5)),  # the other operand's batch broadcast against 0
    ((1, 3, 0), (2, 0, 5)),     # broadcast batch, inner dim 0
    ((4,), (4, 0)),             # a vector times a matrix with no columns
    ((0,), (0, 3)),             # an empty vector
]


def _reference(x, y, w):
    """numpy's gradients of sum(w * (x @ y)), batch dims reduced as broadcasting expanded
    them; vectors promoted as matmul promotes them."""
    xv, yv = x.ndim == 1, y.ndim == 1
    x2 = x[None, :] if xv else x
    y2 = y[:, None] if yv else y
    w2 = w
    if xv:
        w2 = np.expand_dims(w2, -2)
    if yv:
        w2 = np.expand_dims(w2, -1)
    gx = w2 @ np.swapaxes(y2, -1, -2)
    gy = np.swapaxes(x2, -1, -2) @ w2

    def reduce_to(g, shape):
        g = g.sum(axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
        return g.sum(axis=tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1),
                     keepdims=True).reshape(shape)
    gx = reduce_to(gx, x2.shape).reshape(x.shape)
    gy = reduce_to(gy, y2.shape).reshape(y.shape)
    return gx, gy


def _program(x, y, w):
    x.stop_gradient = False
    y.stop_gradient = False
    (x.matmul(y) * w).sum().backward()
    return x.grad, y.grad


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("xs,ys", CASES, ids=[f"{a}@{b}" for a, b in CASES])
def test_matmul_gradients_with_zero_size_dimensions(xs, ys, backend):
    rng = np.random.default_rng(len(xs) * 10 + len(ys))
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    w = rng.standard_normal(np.matmul(x, y).shape)
    want = _reference(x, y, w)
    got = cc.compile(_program, backend=backend, sanitize=True)(x, y, w)
    for g, wg, name in zip(got, want, ("x", "y")):
        assert g.shape == wg.shape and g.dtype == wg.dtype, (name, g.shape, wg.shape)
        np.testing.assert_allclose(g, wg, rtol=1e-12, atol=1e-12, err_msg=f"d/d{name}")
