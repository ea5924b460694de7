"""The executor's direct writes (`into`, the chunked elementwise path, workspaces) give the
reference interpreter's results bit for bit, out of place and in place over an operand with
the identical layout, on the inputs of the sample database."""
from __future__ import annotations

import os
import sys
from collections import Counter

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.ops import ELEMENTWISE, REGISTRY, VIEW, scratch_specs
from runtime.arena import compute
from runtime.reference import run_graph

HERE = os.path.dirname(os.path.dirname(__file__))
sys.path.insert(0, os.path.join(HERE, "opdb"))
sys.path.insert(0, os.path.join(HERE, "passes"))
import samples as db  # noqa: E402


def _pick(samples, per_kind=3):
    """A few samples of each API for each set of dtypes (the int, bool and mixed paths)."""
    seen: Counter = Counter()
    out = []
    for s in samples:
        key = (s.api, tuple(sorted({a.dtype.str for a in s.args if isinstance(a, np.ndarray)})))
        seen[key] += 1
        if seen[key] <= per_kind:
            out.append(s)
    return out


SAMPLES = _pick(db.SAMPLES)


def _garbage(shape, dtype):
    a = np.empty(shape, dtype)
    # NaN / -1 everywhere: an `into` must not read its scratch before writing it
    a.reshape(-1).view(np.uint8).fill(0xFF)
    return a


def _check(node, dest, args, want, what):
    scratch = [_garbage(s, d) for s, d in scratch_specs(node)] \
        if REGISTRY[node.op].scratch else None
    compute(node, dest, args, scratch)
    np.testing.assert_array_equal(dest, want, strict=True,
                                  err_msg=f"{what} {node.op} {node.out.ref()}")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_direct_writes_match_the_reference(sample):
    arrays = [a for a in sample.args if isinstance(a, np.ndarray)]
    graph = cc.trace(sample.fn, *sample.args)
    if [v.shape for v in graph.inputs] != [a.shape for a in arrays]:
        pytest.skip("arguments that share memory are traced as views of one input")
    with np.errstate(all="ignore"):
        env = run_graph(graph, arrays)
        for node in graph.nodes:
            op = REGISTRY[node.op]
            if op.kind == VIEW:
                continue
            args, want = [env[v] for v in node.inputs], env[node.out]
            _check(node, np.empty(want.shape, want.dtype), args, want, "out of place")
            if op.kind != ELEMENTWISE:
                continue
            for v in set(node.inputs):
                if v.shape == node.out.shape and v.dtype == node.out.dtype:
                    dest = np.array(env[v], order="C")  # in place: the operand is the output
                    _check(node, dest, [dest if w is v else env[w] for w in node.inputs],
                           want, f"in place over {v.ref()}")


def _check_graph(graph, arrays):
    """Every non-view node written directly equals the reference interpreter's value."""
    with np.errstate(all="ignore"):
        env = run_graph(graph, arrays)
        for node in graph.nodes:
            if REGISTRY[node.op].kind != VIEW:
                want = env[node.out]
                _check(node, np.empty(want.shape, want.dtype), [env[v] for v in node.inputs],
                       want, "out of place")


def _conv_step(stride, padding, dilation):
    def step(x, w):
        w.stop_gradient = False
        x.stop_gradient = False
        y = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
        z = F.max_pool2d(y, 2, stride=1, padding=1)
        (z * z).sum().backward()
        return z, x.grad, w.grad
    return step


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stride,padding,dilation", [(1, 0, 1), (2, 1, 1), (1, [0, 1, 2, 0], 2)])
def test_conv_and_pool_gradients_written_directly_match_the_reference(stride, padding, dilation,
                                                                      dtype):
    # The gradient ops only appear in backward graphs, which the samples above don't trace.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 9, 8)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 2)).astype(dtype)
    graph = cc.trace(_conv_step(stride, padding, dilation), x, w)
    ops = {n.op for n in graph.nodes}
    assert {"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "max_pool2d",
            "max_pool2d_grad"} <= ops
    _check_graph(graph, [x, w])


def _pool_step(x):
    x.stop_gradient = False
    z = F.max_pool2d(x * 1.0, 2, stride=1, padding=1)
    z.sum().backward()
    return x.grad


def test_pool_gradient_of_a_window_of_minus_infinity_matches_the_reference():
    # The top-left window holds only padding and x[0, 0, 0, 0] = -inf: its argmax is padding,
    # an index outside x that the reference wraps; the direct write must fall back to it.
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    x[0, 0, 0, 0] = -np.inf
    graph = cc.trace(_pool_step, x)
    assert "max_pool2d_grad" in {n.op for n in graph.nodes}
    _check_graph(graph, [x])
