"""Random numbers without index arrays (issue 27, item 3): a Philox draw reads its counter
from the loop's element index, so `F.dropout` costs its output (and, unfused, the bool mask the
backward pass reads; the fused backends draw the mask again there: item 2c), `cc.rand` its
numbers, and nothing else: no uint64 `arange` of the output's size. The numbers are the same
bits on the numpy reference, the cpu backend at 1 and 2 threads, and the gpu backend's CUDA C
(run on the host by the fiber harness), whatever the layout of the array they land in."""
import inspect
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
def test_dropout_adds_at_most_its_mask_to_the_mlp_step(backend):
    """The issue's bar, "a dropout MLP step's arena grows by at most the mask": beyond the
    caller's arrays the dropout step plans what the plain step plans, 1,132,548 B. It grew by
    the bool mask and 20,544 B: the mask is now drawn again in the backward pass from its
    Philox counters (passes/regenerate.py), and the loss's two 10,240 B rows die before the
    w2 gradient's GEMM (the scheduler's byte model counts the mask unpacking's write over a
    reshape of the gradient in place, as planned, so the order that frees them first wins)."""
    args = mlp.example_inputs() + (np.array(3, np.uint64),)
    plain = cc.compile(mlp_step(0.0), backend=backend).lower(*args)
    dropped = cc.compile(mlp_step(0.5), backend=backend).lower(*args)
    _no_index_array(dropped)
    mask = mlp.BATCH * mlp.HIDDEN  # the bool mask's bytes: 262,144
    assert _extra(plain) == 1_132_548   # (relu's mask kept as bits: passes/recompute.py)
    assert _extra(dropped) <= _extra(plain) + mask
    assert _extra(dropped) == 1_132_548
    # no buffer holds the dropout mask, as bytes or bits
    assert not [b for b in dropped.plan.buffers
                if b.values and b.values[0].dtype == bool and b.size >= mask // 8]


def _regenerated(prog):
    """The plan's regenerated masks (decisions), after checking that the backward pass
    draws them in a loop of its own reader (a fused node holding a philox copy)."""
    done = [d for d in prog.plan.recompute_decisions
            if getattr(d, "ops_per_element", 0) and d.recomputed]
    draws = {(n.op, n.phase): n for n in prog.graph.nodes if n.op == "fused"
             and any(m.op == "philox" for m in n.attrs["body"].nodes)}
    assert bool(done) == (("fused", "backward") in draws), (done, draws)
    return done


@pytest.mark.parametrize("backend", PLANNED)
def test_the_mask_is_regenerated_from_its_philox_counters(backend):
    """Issue 27, item 2c: the backward pass's `where(keep, g, 0)` draws the numbers again
    in its own loop (same stream, same seed operand) instead of reading a kept mask; the
    report names the mask, its reader and the price."""
    args = mlp.example_inputs() + (np.array(3, np.uint64),)
    prog = cc.compile(mlp_step(0.5), backend=backend).lower(*args)
    [d] = _regenerated(prog)
    assert (d.op, d.nbytes, d.loc) == ("greater_equal", mlp.BATCH * mlp.HIDDEN,
                                       f"test_dropout_memory.py:{_DROPOUT_LINE}")
    assert d.extra_flops > 100 * mlp.BATCH * mlp.HIDDEN   # Philox-4x32-10: ~130 per element
    line = next(t for t in prog.plan.report().splitlines() if "regenerated" in t)
    assert "regenerated from its Philox counters before the backward of where at " \
        f"test_dropout_memory.py:{_DROPOUT_LINE}" in line
    streams = {m.attrs["stream"] for n in prog.graph.nodes if n.op == "fused"
               for m in n.attrs["body"].nodes if m.op == "philox"}
    assert streams == {0}   # the forward draw and its copy: one stream
    # recompute="off" keeps the mask (and no decision says otherwise)
    off = cc.compile(mlp_step(0.5), backend=backend, recompute="off").lower(*args)
    assert not _regenerated(off)


_LINES, _FIRST = inspect.getsourcelines(mlp_step)
_DROPOUT_LINE = _FIRST + next(k for k, t in enumerate(_LINES)
                              if "h = F.dropout(h, p, seed=seed)" in t)


def small_step(x, labels, w1, b1, w2, b2, seed):
    """A smaller dropout MLP (a 64 KiB mask, the smallest regenerated) returning its loss and
    every gradient, so values and gradients are compared bit for bit."""
    for q in (w1, b1, w2, b2):
        q.stop_gradient = False
    h = F.dropout(F.relu(x @ w1 + b1), 0.3, seed=seed)
    loss = F.cross_entropy(h @ w2 + b2, labels)
    loss.backward()
    return loss, w1.grad, b1.grad, w2.grad, b2.grad


def _small_args(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((64, 24)).astype(np.float32), rng.integers(0, 10, 64),
            (rng.standard_normal((24, 1024)) * 0.2).astype(np.float32),
            (rng.standard_normal(1024) * 0.1).astype(np.float32),
            (rng.standard_normal((1024, 10)) * 0.05).astype(np.float32),
            np.zeros(10, np.float32), np.array(2 ** 33 + seed, np.uint64))


@pytest.mark.parametrize("run", ["numpy-fused", "cpu-1", "cpu-2", "gpu-harness"])
def test_regenerated_masks_give_the_kept_masks_bits(run):
    """Same seed, same values and gradients bit for bit as the program that keeps the mask
    (recompute="off"), on each backend; the program compared does regenerate it."""
    if run == "gpu-harness" and not harness.available():
        pytest.skip("needs g++ on a POSIX host")
    backend, _, threads = run.partition("-")
    opts = {"threads": int(threads)} if backend == "cpu" else \
        {"fuse": True} if backend == "numpy" else {}
    for seed in (1, 2):
        args = _small_args(seed)
        progs = [cc.compile(small_step, backend=backend, recompute=r, **opts).lower(*args)
                 for r in ("auto", "off")]
        assert _regenerated(progs[0]) and not _regenerated(progs[1])
        run_ = harness.on_host if backend == "gpu" else (lambda p: p)
        got, want = (run_(p)(*args) for p in progs)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, strict=True)
        if backend == "numpy":   # and the unfused reference, which keeps it
            ref = cc.compile(small_step, backend="numpy")(*args)
            for g, w in zip(got, ref):
                np.testing.assert_array_equal(g, w, strict=True)


class _DropoutNet(cc.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = cc.nn.Linear(24, 1024)
        self.drop = cc.nn.Dropout(0.5)
        self.fc2 = cc.nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc2(self.drop(F.relu(self.fc1(x))))


def _layer_step(net, opt):
    def step(x, labels):
        loss = F.cross_entropy(net(x), labels)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss
    return step


@pytest.mark.parametrize("backend", PLANNED)
def test_nn_dropout_regenerates_from_a_saved_seed(backend):
    """nn.Dropout advances its seed in place right after the draw (`seed.add_(1)`), so the
    backward pass can't read the seed argument: the chain reads an 8-byte copy taken before
    the write. The mask is regenerated, three training steps give the kept-mask program's
    losses and weights bit for bit, and the seed still advances once per step."""
    if backend == "gpu" and not harness.available():
        pytest.skip("needs g++ on a POSIX host")
    x, labels = _small_args(3)[:2]
    results = []
    for recompute in ("auto", "off"):
        cc.nn.initializer.seed(0)
        net = _DropoutNet()
        opt = cc.optimizer.SGD(learning_rate=0.1, parameters=net.parameters())
        prog = cc.compile(_layer_step(net, opt), backend=backend, recompute=recompute)
        lowered = prog.lower(x, labels)
        assert bool(_regenerated(lowered)) == (recompute == "auto")
        seed0 = int(net.drop._dropout_seed)
        run = harness.on_host(lowered) if backend == "gpu" else prog
        losses = [np.asarray(run(x, labels)) for _ in range(3)]
        assert int(net.drop._dropout_seed) == seed0 + 3
        results.append((losses, [np.array(v) for v in net.state_dict().values()]))
        if recompute == "auto":
            saved = [n for n in lowered.graph.nodes if n.op == "contiguous"
                     and n.inputs[0].name and "_dropout_seed" in n.inputs[0].name]
            assert len(saved) == 1 and saved[0].phase == "forward"
    (la, wa), (lo, wo) = results
    for a, b in zip(la + wa, lo + wo):
        np.testing.assert_array_equal(a, b, strict=True)


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


def test_the_schedulers_byte_model_counts_a_write_over_a_whole_buffer_view_in_place():
    """`y.reshape(...) + 1` where y dies there: the reinplace pass writes the sum over y's
    buffer through the view, and the scheduler's byte model now counts it so too (it counted
    a second 4 MiB buffer, which hid the dropout MLP's better order behind a peak that the
    plan does not have: relu's mask unpacking reads a reshape of the gradient)."""
    def f(x):
        y = x * 2.0
        return (y.reshape([2048, 512]) + 1.0).sum()
    x = np.ones((1024, 1024), np.float32)
    prog = cc.compile(f, backend="numpy").lower(x)
    assert prog.plan.schedule.estimated_written_peak == x.nbytes + 4
    assert prog.plan.peak_bytes - prog.plan.input_bytes < x.nbytes + 1024   # as planned
