"""Random numbers without index arrays (issue 27, item 3): a Philox draw reads its counter
from the loop's element index, so `F.dropout` costs its output (and the bool mask when the
backward pass reads it), `cc.rand` its numbers, and nothing else: no uint64 `arange` of the
output's size. The numbers are the same bits on the numpy reference, the cpu backend at 1 and
2 threads, and the gpu backend's CUDA C (run on the host by the fiber harness), whatever the
layout of the array they land in."""
import os
import sys

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from tests.gpu import harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _sub in ("examples", os.path.join("tests", "opdb")):
    if os.path.join(ROOT, _sub) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, _sub))

import mlp  # noqa: E402
from samples import philox_normal, philox_uniform  # noqa: E402  (an independent Philox)

PLANNED = ["cpu", "gpu"]   # the native backends (gpu: planned and rendered, no device needed)


def _extra(prog):
    return prog.plan.peak_bytes - prog.plan.input_bytes


def _no_index_array(prog):
    assert not [n for n in prog.graph.nodes if n.op == "arange"], prog.graph


def mlp_step(p):
    """examples/mlp.py's step, with dropout on the hidden activation when p > 0."""
    def step(x, labels, w1, b1, w2, b2, seed):
        for q in (w1, b1, w2, b2):
            q.stop_gradient = False
        h = F.relu_(x @ w1 + b1)
        if p:
            h = F.dropout(h, p, seed=seed)
        loss = F.cross_entropy(h @ w2 + b2, labels)
        loss.backward()
        with cc.no_grad():
            for q in (w1, b1, w2, b2):
                q.subtract_(0.1 * q.grad)
        return loss
    return step


@pytest.mark.parametrize("backend", PLANNED)
def test_dropout_adds_exactly_its_mask_to_the_mlp_step(backend):
    """The issue's bar: the step's arena grows by the bool mask backward reads (1 byte per
    hidden element), not by the output's size again nor by a uint64 index array (it grew by
    2,832,384 B: 10.8 bytes per element)."""
    args = mlp.example_inputs() + (np.array(3, np.uint64),)
    plain = cc.compile(mlp_step(0.0), backend=backend).lower(*args)
    dropped = cc.compile(mlp_step(0.5), backend=backend).lower(*args)
    _no_index_array(dropped)
    mask = mlp.BATCH * mlp.HIDDEN  # bool
    assert _extra(plain) == 1_132_548   # (relu's mask kept as bits: passes/recompute.py)
    # the dropout mask, and ~20 KB more: with it the peak moves to a point where the loss's
    # log_softmax and one_hot rows (10,240 B each) are still live (NOTES.md; cpu 20,544 B,
    # gpu 20,736 B: its alignment)
    assert mask + 20_480 <= _extra(dropped) - _extra(plain) <= mask + 20_736


@pytest.mark.parametrize("backend", PLANNED)
def test_a_forward_dropout_costs_its_output_and_is_one_loop(backend):
    """Dropout of a 4 MiB activation: the plan holds the 4 MiB output and nothing else, and
    the draw, the comparison and the scaling are one fused loop (were: 16 MiB of index
    arrays beside it)."""
    def f(x, seed):
        return F.dropout(x, 0.3, seed=seed)
    x = np.ones((1024, 1024), np.float32)
    prog = cc.compile(f, backend=backend).lower(x, np.array(5, np.uint64))
    _no_index_array(prog)
    assert _extra(prog) == x.nbytes
    assert [n.op for n in prog.graph.nodes] == ["fused"]


@pytest.mark.parametrize("backend", ["numpy"] + PLANNED)
def test_rand_and_randn_cost_their_numbers_only(backend):
    def f(seed):
        return cc.rand([1024, 1024], seed=seed), cc.randn([7], "float64", seed=seed)
    prog = cc.compile(f, backend=backend).lower(np.array(5, np.uint64))
    _no_index_array(prog)
    assert _extra(prog) == 1024 * 1024 * 4 + 7 * 8


def draws(x, y, seed):
    """A fill into the caller's (strided) array, dropout over a transposed operand, normal
    numbers of both float dtypes: each element's counter is its row-major position."""
    x.uniform_(-2.0, 3.0, seed=seed)
    d = F.dropout(y.t(), 0.25, seed=seed)
    return d, cc.randn([301], seed=seed), cc.randn([3, 5], "float64", seed=seed)


def _draw_args():
    base = np.zeros((40, 2 * 129), np.float32)
    y = np.arange(129 * 40, dtype=np.float32).reshape(129, 40) / 7.0
    return base, base[:, ::2], y, np.array(2 ** 40 + 9, np.uint64)


def _independent_reference():
    """What `draws` must give, from the sample database's Philox on Python ints."""
    _, _, y, seed = _draw_args()
    s = int(seed)
    x = (philox_uniform((40, 129), np.float32, s, 0) * np.float32(5.0) + np.float32(-2.0))
    keep = philox_uniform((40, 129), np.float32, s, 1) >= np.float32(0.25)
    d = np.where(keep, y.T * np.float32(1 / 0.75), np.float32(0))
    return (x, d, philox_normal((301,), np.float32, s, 2), philox_normal((3, 5), np.float64, s, 3))


@pytest.mark.parametrize("run", ["numpy", "numpy-fused", "cpu-1", "cpu-2", "gpu-harness"])
def test_draws_are_the_same_bits_on_every_backend_thread_count_and_layout(run):
    if run == "gpu-harness" and not harness.available():
        pytest.skip("needs g++ on a POSIX host")
    base, x, y, seed = _draw_args()
    want_x, *want = _independent_reference()
    if run.startswith("numpy"):
        prog = cc.compile(draws, backend="numpy", fuse=run == "numpy-fused").lower(x, y, seed)
        got = prog(x, y, seed)
    elif run.startswith("cpu"):
        prog = cc.compile(draws, backend="cpu", threads=int(run[-1])).lower(x, y, seed)
        got = prog(x, y, seed)
    else:
        prog = cc.compile(draws, backend="gpu").lower(x, y, seed)
        got = harness.on_host(prog)(x, y, seed)
    _no_index_array(prog)
    if run != "numpy":  # the fused backends draw inside their readers' loops
        assert any(n.op == "fused" for n in prog.graph.nodes)
    np.testing.assert_array_equal(x, want_x)
    assert not base[:, 1::2].any()  # the fill wrote its own elements only
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w, strict=True)


def test_cpu_draws_split_over_threads_are_the_one_thread_bits():
    """A draw big enough for the cpu backend to cut its loop into chunks on 2 threads: each
    chunk counts from its own first element, so the bits are the 1-thread program's."""
    def f(x, seed):
        return x * cc.rand([512, 1024], seed=seed) + cc.randn([512, 1024], seed=seed)
    x = np.full((512, 1024), 2.0, np.float32)
    seed = np.array(77, np.uint64)
    one = cc.compile(f, threads=1).lower(x, seed)
    two = cc.compile(f, threads=2).lower(x, seed)
    _no_index_array(two)
    assert "inplace_parallel_for" in two._exec.source  # the draw's loop runs in chunks
    want = cc.compile(f, backend="numpy")(x, seed)
    np.testing.assert_array_equal(one(x, seed), want, strict=True)
    np.testing.assert_array_equal(two(x, seed), want, strict=True)
