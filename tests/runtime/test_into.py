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
    a.view(np.uint8).fill(0xFF)  # NaN / -1: an `into` must not read its scratch uninitialised
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
