"""Finite-difference gradient checks for traced programs (the oracle of the autodiff tests).

`check_grads(body, *arrays)` compiles two programs with the numpy backend:

- the gradient program: marks the inputs `wrt` as needing gradients, computes
  `loss = (body(*xs) * W).sum()` with fixed random weights `W`, calls `loss.backward()` and
  returns the inputs' `.grad`;
- the loss program: the same loss, no backward.

It compares the gradients with fourth-order central differences of the loss program (float64,
step 1e-4, so the truncation error is ~1e-16 and the rounding error ~1e-12) at a relative
tolerance of 1e-6. Inputs must sit at least 2e-4 away from kinks.
"""
from __future__ import annotations

import contextlib

import numpy as np

import compiler as cc
from compiler.api import _rebuild
from compiler.ops import REGISTRY
from compiler import autodiff
from runtime.reference import evaluate

RTOL = 1e-8
ATOL = 1e-9
STEP = 1e-4


def weights(shape) -> np.ndarray:
    """Fixed random weights for an output of `shape` (seeded by the shape)."""
    return np.random.default_rng([7, *shape]).standard_normal(shape)


def weighted_sum(out):
    return (out * cc.to_tensor(weights(tuple(out.shape)))).sum()


def float_positions(arrays) -> list[int]:
    return [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]


def grad_program(body, wrt):
    def program(*xs):
        for i in wrt:
            xs[i].stop_gradient = False
        loss = weighted_sum(body(*xs))
        loss.backward()
        return loss, [xs[i].grad for i in wrt]
    return program


def loss_program(body):
    def program(*xs):
        return weighted_sum(body(*xs))
    return program


class Reference:
    """`fn` traced once and run by the numpy reference interpreter (no passes, no planning):
    the semantics the autodiff pass is responsible for, independent of the memory planner."""

    def __init__(self, fn, *example):
        self.graph = cc.trace(fn, *example)

    def __call__(self, *arrays):
        outs, _ = evaluate(self.graph, list(arrays))
        return _rebuild(self.graph.output_tree, outs)


def build(fn, arrays, executor):
    """A callable running `fn`: "compiled" is `cc.compile(fn)` (the whole pipeline, on the
    default backend: the one `each_backend` selects), "numpy" or "cpu" that backend,
    "reference" the traced graph in the reference interpreter."""
    if executor == "reference":
        return Reference(fn, *[a.copy() for a in arrays])
    if executor == "compiled":
        return cc.compile(fn)
    return cc.compile(fn, backend=executor)


def analytic_grads(body, arrays, wrt=None, executor="compiled"):
    wrt = float_positions(arrays) if wrt is None else list(wrt)
    fn = build(grad_program(body, wrt), arrays, executor)
    loss, grads = fn(*[a.copy() for a in arrays])
    return loss, grads


def numeric_grad(f, arrays, i, h=STEP) -> np.ndarray:
    """d f / d arrays[i] by the five-point central stencil."""
    g = np.zeros(arrays[i].shape)
    for idx in np.ndindex(arrays[i].shape):
        vals = []
        for k in (2, 1, -1, -2):
            args = [a.copy() for a in arrays]
            args[i][idx] += k * h
            vals.append(float(f(*args)))
        g[idx] = (-vals[0] + 8 * vals[1] - 8 * vals[2] + vals[3]) / (12 * h)
    return g


def check_grads(body, *arrays, wrt=None, rtol=RTOL, atol=ATOL, executor="compiled"):
    """Assert that the traced gradients of `(body(*arrays) * W).sum()` match finite
    differences; returns the analytic gradients."""
    arrays = [np.asarray(a) for a in arrays]
    wrt = float_positions(arrays) if wrt is None else list(wrt)
    loss, grads = analytic_grads(body, arrays, wrt, executor)
    f = build(loss_program(body), arrays, executor)
    np.testing.assert_allclose(loss, f(*[a.copy() for a in arrays]), rtol=1e-12)
    for i, g in zip(wrt, grads):
        assert g is not None, f"input {i} got no gradient"
        assert g.shape == arrays[i].shape and g.dtype == arrays[i].dtype, (g.shape, g.dtype)
        np.testing.assert_allclose(g, numeric_grad(f, arrays, i), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i}")
    return grads


@contextlib.contextmanager
def forced_vjp_form(op: str, form: str):
    """Make the autodiff pass use `form` for every node of `op`; yields the list of forms it
    chose, so a test can check that the op was differentiated at all."""
    assert form in REGISTRY[op].vjp, (op, form)
    original = autodiff.choose_vjp_form
    used = []

    def choose(opdef, node, overwritten):
        if opdef.name == op:
            used.append(form)
            return form
        return original(opdef, node, overwritten)

    autodiff.choose_vjp_form = choose
    try:
        yield used
    finally:
        autodiff.choose_vjp_form = original
