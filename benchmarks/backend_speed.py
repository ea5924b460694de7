"""Backend speed against peers (issues 8, 25): interleaved, at 1 thread and at all cores, with
the environment's OpenBLAS settings and without them.

    python benchmarks/backend_speed.py                  # every workload, every peer installed
    python benchmarks/backend_speed.py --quick          # small shapes, 5 runs: a smoke test
    python benchmarks/backend_speed.py --plot out.png   # also a bar chart (matplotlib)
    python benchmarks/backend_speed.py --columns cpu,numpy,numpy-hand --workloads mlp
    python benchmarks/backend_speed.py --threads 1      # one thread count only

Runs: one subprocess per environment and thread count (the thread counts and OpenBLAS's
settings are read when the libraries load, so each run needs a fresh process): the
environment as given, and, when either is set, with `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE`
removed for that run only (numpy's OpenBLAS picks its kernel by them when it loads: set to
`Haswell` on an AVX-512 machine it runs the GEMMs at about half speed); each at 1 thread
(pinned to one core) and at all the cores the process may use (`--threads`). Every run prints
which OpenBLAS kernel ran (threadpoolctl's `threadpool_info()`: `internal_api`,
`architecture`, `num_threads`; said so when threadpoolctl is not installed), and the load
average before and after it: on a shared machine the figures move with it.

Workloads (float32, the same computation in every column: same shapes, same update rule):
- `add100`  / `add100_`: 100 additions of 1.0 on a [1000, 1000] tensor, written `x = x + 1.0`
  (returns a new array) and `x.add_(1.0)` (writes into the caller's array);
- `relu` / `relu_` on [1, 64, 512, 512] (out of place; in place in the caller's array);
- `mlp`, `transformer`: the training steps of `examples/mlp.py` and
  `examples/transformer_block.py` (forward, backward, SGD update of every parameter in place).

Columns: our `cpu` backend, our `numpy` backend, NumPy written by hand (always); PyTorch eager,
`torch.compile`, `jax.jit` and PaddlePaddle when installed (`pip install -e ".[bench]"`). Before
timing, each column runs one step from the same inputs as our numpy backend and must agree
with it (outputs, or each parameter's update), so a faster column is never a different program.

Method: a run with N threads is pinned to N cores (`os.sched_setaffinity`) and every library
to N threads (env vars set before numpy is imported: the BLAS pools and our own
`COMPILER_THREADS`, `torch.set_num_threads(N)`, XLA's intra-op pool, Paddle's math threads).
Idle OpenMP threads sleep (`OMP_WAIT_POLICY=PASSIVE`, `KMP_BLOCKTIME=0` unless set).

Protocol (issue 25): every column runs in a worker process of its own (spawned by the run's
process after the pinning: the same cores and environment; it loads only its own libraries
and thread pools), and gets the machine as it would alone. Each round, the run's process
asks every column in turn, in a rotating order, to "run 1" over a pipe and waits for the
answer: the worker times one step, then waits until its other threads are idle (`settle`:
two 10 ms windows in a row in which they ran under 0.5 ms of CPU, read from
/proc/self/task/*/schedstat; at most 2 s) and only then answers, so no column's threads run
while the next column is timed. Without this (all columns in one process, `--one-process`),
OpenBLAS's threads, which busy-wait ~0.1 s after each GEMM before they sleep (numpy-hand,
blas-gemms), took one of the 2 cores from the column timed after them: our 2-thread steps
barely gained. The load of a shared machine still falls on all columns alike (interleaved,
`--runs` rounds, >= 21, after warm-up calls). A cell is the median, with p25..p75, and the
ratio to our `cpu` backend's median in the same run and thread count (below 1.0: faster than
ours); the JSON keeps each column's median settle time (an OpenBLAS column's is up to 0.1 s
longer than the others').

The memory each column works on: our `cpu` and `numpy` backends, NumPy by hand, PyTorch
(`torch.from_numpy`) and `torch.compile` run on the same numpy arrays (`inputs()`, made in each
worker from the same seed); `jax.jit` and Paddle copy them into buffers of their own. relu_
is in place in that array (for JAX: the argument donated).

Memory: our plan's `peak_bytes - input_bytes` (bytes beyond the caller's arrays), JAX's
`jax.jit(f).lower(*args).compile().memory_analysis()` temp bytes (plus output bytes not
aliased to donated inputs), and PyTorch's profiler (`profile_memory=True`: the running sum of
the CPU allocator's allocations and frees during one eager step, its maximum = the peak of
bytes allocated beyond what existed before the step, which is the same footing as ours).

Compile time: trace to runnable (`cc.compile(step, backend="cpu").lower(*args)`), each
measured in a fresh subprocess (so no in-memory cache helps): with the disk cache off
(`COMPILER_CACHE_DIR=""`), "cold" with an empty `COMPILER_CACHE_DIR`, "warm" a second process
over the same directory (where the build has a disk cache; without it all three are the same
work).
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time

# This run's thread count everywhere (BENCH_THREADS: set by the parent for each run; 1 in the
# parent, which only starts runs), before numpy (and its OpenBLAS) or any peer is imported.
THREADS = int(os.environ.get("BENCH_THREADS", "1"))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "COMPILER_THREADS"):
    os.environ[_var] = str(THREADS)
# (this module runs again in each run and each worker: the earlier settings are replaced)
os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split()
     if not f.startswith(("--xla_cpu_multi_thread_eigen=", "intra_op_parallelism_threads="))]
    + [f"--xla_cpu_multi_thread_eigen={str(THREADS > 1).lower()}",
       f"intra_op_parallelism_threads={THREADS}"])
# Idle OpenMP threads sleep instead of spinning (libiomp5 spins 200 ms after each parallel
# region by default, libgomp a while too): a column's step should not pay for its own pool's
# leftovers either (the settle between columns, `settle`, waits for any that remain).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("KMP_BLOCKTIME", "0")
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")  # read by OpenBLAS when it loads
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GLOG_minloglevel", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
import compiler.nn.functional as F  # noqa: E402
from examples import mlp as ex_mlp  # noqa: E402
from examples import transformer_block as ex_tf  # noqa: E402

WORKLOADS = ("add100", "add100_", "relu", "relu_", "mlp", "transformer")
COLUMNS = ("cpu", "numpy", "numpy-hand", "torch", "torch.compile", "jax.jit", "paddle",
           "blas-gemms")


def sizes(quick: bool) -> dict:
    if quick:
        return dict(add=(100, 100), relu=(1, 4, 32, 32), mlp=dict(batch=16, sizes=(32, 64, 10)),
                    tf=dict(batch=2, seq=16, d_model=32, d_mlp=64))
    return dict(add=(1000, 1000), relu=(1, 64, 512, 512), mlp=dict(batch=256,
                sizes=(ex_mlp.IN, ex_mlp.HIDDEN, ex_mlp.OUT)),
                tf=dict(batch=ex_tf.BATCH, seq=ex_tf.SEQ, d_model=ex_tf.D_MODEL,
                        d_mlp=ex_tf.D_MLP))


def inputs(workload: str, quick: bool) -> tuple:
    """Fresh numpy inputs of a workload (the same values for every column)."""
    s = sizes(quick)
    rng = np.random.default_rng(0)
    if workload.startswith("add"):  # random values: a reassociated sum would differ
        return (rng.standard_normal(s["add"]).astype(np.float32),)
    if workload.startswith("relu"):
        return (rng.standard_normal(s["relu"]).astype(np.float32),)
    if workload == "mlp":
        return ex_mlp.example_inputs(**s["mlp"])
    return ex_tf.example_inputs(**s["tf"])


# Which arguments a step updates in place (its parameters): their updates are compared.
PARAM_ARGS = {"mlp": (2, 3, 4, 5), "transformer": tuple(range(2, 14)), "add100_": (0,),
              "relu_": (0,)}


# -- our programs (the same functions for the cpu and numpy backends, and for Paddle) -------
def ours_add100(x):
    for _ in range(100):
        x = x + 1.0
    return x


def ours_add100_(x):
    for _ in range(100):
        x.add_(1.0)
    return x


def ours_relu(x):
    return F.relu(x)


def ours_relu_(x):
    return F.relu_(x)


OURS = {"add100": ours_add100, "add100_": ours_add100_, "relu": ours_relu, "relu_": ours_relu_,
        "mlp": ex_mlp.train_step, "transformer": ex_tf.train_step}


class Runner:
    """One column on one workload: `step()` runs one call on its own inputs and returns what
    is compared (the output, or None); `params()` the arrays the step updates, as numpy."""

    def __init__(self, step, params=lambda: [], memory=None, note=""):
        self.step, self.params, self.memory, self.note = step, params, memory, note


def make_ours(workload, quick, backend):
    args = inputs(workload, quick)
    fn = cc.compile(OURS[workload], backend=backend)
    prog = fn.lower(*args)
    plan = prog.plan
    idx = PARAM_ARGS.get(workload, ())
    return Runner(lambda: prog(*args), lambda: [args[i] for i in idx],
                  memory=plan.peak_bytes - plan.input_bytes)


# -- NumPy written by hand -------------------------------------------------------------------
def _erf():
    try:  # scipy's vectorised erf when present; NumPy itself has none
        from scipy.special import erf
        return erf
    except ImportError:
        return np.vectorize(math.erf, otypes=[np.float32])


def numpy_mlp_step(x, labels, w1, b1, w2, b2, lr=ex_mlp.LR):
    n = x.shape[0]
    h = x @ w1
    h += b1
    np.maximum(h, 0, out=h)
    logits = h @ w2
    logits += b2
    m = logits.max(axis=1, keepdims=True)
    z = logits - m
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    loss = -(z[rows, labels] - np.log(s[:, 0])).mean()
    d = e / s                                   # dloss/dlogits
    d[rows, labels] -= 1.0
    d *= 1.0 / n
    dw2 = h.T @ d
    db2 = d.sum(axis=0)
    dh = d @ w2.T
    dh *= h > 0
    dw1 = x.T @ dh
    db1 = dh.sum(axis=0)
    for p, g in ((w1, dw1), (b1, db1), (w2, dw2), (b2, db2)):
        p -= np.float32(lr) * g
    return np.float32(loss)


def _ln(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    rs = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + np.float32(eps))
    n = xc * rs
    return n * g + b, n, rs


def _ln_back(dy, n, rs, g):
    """dx, dg, db of y = n * g + b, n = layer-normalised x (1/std = rs)."""
    red = tuple(range(dy.ndim - 1))
    dg, db = (dy * n).sum(axis=red), dy.sum(axis=red)
    dn = dy * g
    dx = rs * (dn - dn.mean(axis=-1, keepdims=True) - n * (dn * n).mean(axis=-1, keepdims=True))
    return dx, dg, db


def numpy_transformer_step(x, target, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1,
                           w_fc2, b_fc2, lr=ex_tf.LR, erf=None):
    erf = erf or _erf()
    B, T, D = x.shape
    H = ex_tf.HEADS
    hd = D // H
    scale = np.float32(1.0 / math.sqrt(hd))

    def heads(z):
        return z.reshape(B, T, H, hd).transpose(0, 2, 1, 3)

    def unheads(z):
        return z.transpose(0, 2, 1, 3).reshape(B, T, D)

    h, n1, rs1 = _ln(x, ln1_w, ln1_b)
    q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
    s = q @ k.transpose(0, 1, 3, 2)
    s *= scale
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    o = unheads(p @ v)
    x1 = x + o @ wo
    h2, n2, rs2 = _ln(x1, ln2_w, ln2_b)
    u = h2 @ w_fc1 + b_fc1
    cdf = 0.5 * (1.0 + erf(u * np.float32(1 / math.sqrt(2)))).astype(np.float32)
    m = u * cdf
    y = x1 + m @ w_fc2 + b_fc2
    diff = y - target
    loss = np.float32((diff * diff).mean())
    # backward
    dy = diff * np.float32(2.0 / diff.size)
    def flat(z):
        return z.reshape(-1, z.shape[-1])
    dw_fc2, db_fc2 = flat(m).T @ flat(dy), dy.sum(axis=(0, 1))
    du = dy @ w_fc2.T
    du *= cdf + u * np.exp(-0.5 * u * u) * np.float32(1 / math.sqrt(2 * math.pi))
    dw_fc1, db_fc1 = flat(h2).T @ flat(du), du.sum(axis=(0, 1))
    dx1_ln, dln2_w, dln2_b = _ln_back(du @ w_fc1.T, n2, rs2, ln2_w)
    dx1 = dy + dx1_ln
    dwo = flat(o).T @ flat(dx1)
    da = heads(dx1 @ wo.T)
    dp = da @ v.transpose(0, 1, 3, 2)
    dv = p.transpose(0, 1, 3, 2) @ da
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    ds *= scale
    dq, dk = ds @ k, ds.transpose(0, 1, 3, 2) @ q
    dq, dk, dv = unheads(dq), unheads(dk), unheads(dv)
    hf = flat(h)
    dwq, dwk, dwv = hf.T @ flat(dq), hf.T @ flat(dk), hf.T @ flat(dv)
    dh = dq @ wq.T + dk @ wk.T + dv @ wv.T
    _, dln1_w, dln1_b = _ln_back(dh, n1, rs1, ln1_w)
    grads = (dln1_w, dln1_b, dwq, dwk, dwv, dwo, dln2_w, dln2_b, dw_fc1, db_fc1, dw_fc2, db_fc2)
    params = (ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1, w_fc2, b_fc2)
    for prm, g in zip(params, grads):
        prm -= np.float32(lr) * g
    return loss


def make_numpy_hand(workload, quick):
    args = inputs(workload, quick)
    idx = PARAM_ARGS.get(workload, ())
    def params():
        return [args[i] for i in idx]
    x = args[0]
    if workload == "add100":
        def step():
            y = x + np.float32(1.0)
            for _ in range(99):
                y += np.float32(1.0)
            return y
    elif workload == "add100_":
        def step():
            for _ in range(100):
                x.__iadd__(np.float32(1.0))
            return x
    elif workload == "relu":
        def step():
            return np.maximum(x, np.float32(0))
    elif workload == "relu_":
        def step():
            return np.maximum(x, np.float32(0), out=x)
    elif workload == "mlp":
        def step():
            return numpy_mlp_step(*args)
    else:
        erf = _erf()

        def step():
            return numpy_transformer_step(*args, erf=erf)
    return Runner(step, params)


# -- PyTorch ----------------------------------------------------------------------------------
def torch_steps(torch):
    tF = torch.nn.functional

    def add100(x):
        for _ in range(100):
            x = x + 1.0
        return x

    def add100_(x):
        for _ in range(100):
            x.add_(1.0)
        return x

    def mlp(x, labels, w1, b1, w2, b2):
        h = tF.relu_(x @ w1 + b1)
        loss = tF.cross_entropy(h @ w2 + b2, labels)
        loss.backward()
        with torch.no_grad():
            for p in (w1, b1, w2, b2):
                p.sub_(ex_mlp.LR * p.grad)
                p.grad = None
        return loss.detach()

    def transformer(x, target, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1, w_fc2,
                    b_fc2):
        params = (ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1, w_fc2, b_fc2)
        b, t, d = x.shape
        hd = d // ex_tf.HEADS

        def heads(z):
            return z.reshape(b, t, ex_tf.HEADS, hd).permute(0, 2, 1, 3)

        h = tF.layer_norm(x, (d,), ln1_w, ln1_b, 1e-5)
        q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
        scores = (q @ k.transpose(-1, -2)).mul_(1.0 / math.sqrt(hd))
        attn = torch.softmax(scores, dim=-1)
        o = (attn @ v).permute(0, 2, 1, 3).reshape(b, t, d)
        x1 = x + o @ wo
        m = tF.gelu(tF.layer_norm(x1, (d,), ln2_w, ln2_b, 1e-5) @ w_fc1 + b_fc1)
        y = x1 + (m @ w_fc2 + b_fc2)
        loss = tF.mse_loss(y, target)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.sub_(ex_tf.LR * p.grad)
                p.grad = None
        return loss.detach()

    return {"add100": add100, "add100_": add100_, "relu": torch.relu, "relu_": torch.relu_,
            "mlp": mlp, "transformer": transformer}


def _torch_peak_bytes(torch, fn, args) -> int | None:
    """Peak of the CPU allocator's bytes during one call, relative to the bytes before: the
    running sum of the profiler's raw memory events (every allocation positive, every free
    negative, in time order; kineto's records, since the aggregated per-op figures net out
    what an op allocates and frees inside itself)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(*args)
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def make_torch(workload, quick, compiled=False):
    import torch
    torch.set_num_threads(THREADS)
    args = [torch.from_numpy(a) for a in inputs(workload, quick)]
    idx = PARAM_ARGS.get(workload, ())
    if workload in ("mlp", "transformer"):
        for i in idx:
            args[i].requires_grad_(True)
    fn = torch_steps(torch)[workload]
    # measured on copies, so the timed arrays start from the same values as every column's
    copies = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    memory = None if compiled else _torch_peak_bytes(torch, fn, copies)
    if compiled:
        fn = torch.compile(fn)

    def params():
        return [args[i].detach().numpy() for i in idx]
    return Runner(lambda: fn(*args), params, memory=memory)


# -- JAX --------------------------------------------------------------------------------------
def jax_steps(jax, jnp):
    def add100(x):
        for _ in range(100):
            x = x + 1.0
        return x

    def mlp_loss(params, x, labels):
        w1, b1, w2, b2 = params
        h = jax.nn.relu(x @ w1 + b1)
        logp = jax.nn.log_softmax(h @ w2 + b2, axis=-1)
        return -jnp.take_along_axis(logp, labels[:, None], axis=1).mean()

    def ln(z, g, b):
        mu = z.mean(-1, keepdims=True)
        var = ((z - mu) ** 2).mean(-1, keepdims=True)
        return (z - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

    def tf_loss(params, x, target):
        ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1, w_fc2, b_fc2 = params
        b, t, d = x.shape
        hd = d // ex_tf.HEADS

        def heads(z):
            return z.reshape(b, t, ex_tf.HEADS, hd).transpose(0, 2, 1, 3)

        h = ln(x, ln1_w, ln1_b)
        q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
        attn = jax.nn.softmax((q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(hd)), axis=-1)
        o = (attn @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x1 = x + o @ wo
        m = jax.nn.gelu(ln(x1, ln2_w, ln2_b) @ w_fc1 + b_fc1, approximate=False)
        y = x1 + (m @ w_fc2 + b_fc2)
        return ((y - target) ** 2).mean()

    def train(loss_fn, lr):
        def step(params, *data):
            loss, grads = jax.value_and_grad(loss_fn)(params, *data)
            return loss, tuple(p - lr * g for p, g in zip(params, grads))
        return step

    return {"add100": add100, "add100_": add100, "relu": jax.nn.relu, "relu_": jax.nn.relu,
            "mlp": train(mlp_loss, ex_mlp.LR), "transformer": train(tf_loss, ex_tf.LR)}


def make_jax(workload, quick):
    import jax
    import jax.numpy as jnp
    args = [jnp.asarray(a) for a in inputs(workload, quick)]
    fn = jax_steps(jax, jnp)[workload]
    idx = PARAM_ARGS.get(workload, ())
    state = {}
    if workload in ("mlp", "transformer"):
        # Parameters donated: XLA may update them in place, as our program does.
        jitted = jax.jit(fn, donate_argnums=0)
        state["params"] = tuple(args[i] for i in idx)
        data = [a for i, a in enumerate(args) if i not in idx]
        compiled = jitted.lower(state["params"], *data).compile()

        def step():
            loss, state["params"] = jitted(state["params"], *data)
            return loss.block_until_ready()

        def params():
            return [np.asarray(p) for p in state["params"]]
    elif workload.endswith("_"):  # in place: the argument donated and replaced by the result
        jitted = jax.jit(fn, donate_argnums=0)
        state["x"] = args[0]
        compiled = jitted.lower(args[0]).compile()

        def step():
            state["x"] = jitted(state["x"]).block_until_ready()
            return state["x"]

        def params():
            return [np.asarray(state["x"])]
    else:
        jitted = jax.jit(fn)
        compiled = jitted.lower(*args).compile()

        def step():
            return jitted(*args).block_until_ready()

        def params():
            return []
    mem = compiled.memory_analysis()
    memory = None
    if mem is not None:
        # temporaries, plus outputs that don't reuse a donated argument's buffer
        memory = int(mem.temp_size_in_bytes + mem.output_size_in_bytes
                     - mem.alias_size_in_bytes)
    return Runner(step, params, memory=memory)


# -- PaddlePaddle: runs our own step functions (our API is Paddle's) ---------------------------
class _PaddleCC:
    """What the example steps use of `compiler` (`cc.no_grad`), from Paddle."""

    def __init__(self, paddle):
        self.no_grad = paddle.no_grad


def make_paddle(workload, quick):
    import types

    import paddle
    paddle.set_device("cpu")
    try:
        paddle.set_flags({"FLAGS_paddle_num_threads": THREADS})
    except Exception:  # an older Paddle without the flag: the env vars above hold
        pass
    fn = OURS[workload]
    if workload == "add100_":  # Paddle's add_ takes a tensor, not a Python float
        one = paddle.to_tensor(np.float32(1.0))

        def fn(x):
            for _ in range(100):
                x.add_(one)
            return x
    glob = dict(fn.__globals__, cc=_PaddleCC(paddle), F=paddle.nn.functional)
    fn = types.FunctionType(fn.__code__, glob, fn.__name__, fn.__defaults__, fn.__closure__)
    args = [paddle.to_tensor(a) for a in inputs(workload, quick)]
    idx = PARAM_ARGS.get(workload, ())
    training = workload in ("mlp", "transformer")

    def step():
        out = fn(*args)
        if training:
            for i in idx:
                args[i].clear_gradient()
        return out

    def params():
        return [args[i].numpy() for i in idx]
    return Runner(step, params)


# -- the GEMMs of our program, alone through BLAS -----------------------------------------------
def _gemm_calls(graph):
    """(m, n, k, trans_a, trans_b, alpha, beta, batch) of each GEMM our cpu backend makes for
    `graph`: matmul and gemm (GEMM-accumulate) nodes; an operand made by a transpose of the
    last two axes is a BLAS flag (the emitter never copies it); [B, M, K] @ [K, N] is one
    [B*M, K] @ [K, N] GEMM; other batches are one GEMM per batch element."""
    calls = []
    for node in graph.nodes:
        if node.op not in ("matmul", "gemm"):
            continue
        x, y = node.inputs[0], node.inputs[1]
        if node.op == "gemm":
            ta, tb = bool(node.attrs["trans_a"]), bool(node.attrs["trans_b"])
            xs = x.shape[::-1] if ta else x.shape
            ys = y.shape[::-1] if tb else y.shape
            calls.append((xs[0], ys[1], xs[1], ta, tb, float(node.attrs["alpha"]),
                          float(node.attrs["beta"]), 1))
            continue

        def flag(v):
            p = v.producer
            if p is None or p.op != "transpose":
                return False
            perm = list(p.attrs.get("perm", ()))
            n = len(perm)
            return n >= 2 and perm == list(range(n - 2)) + [n - 1, n - 2]
        m, k, n = x.shape[-2], x.shape[-1], y.shape[-1]
        batch = int(np.prod(node.out.shape[:-2], dtype=np.int64))
        if len(y.shape) == 2 and not flag(x):
            m, batch = m * batch, 1
        calls.append((m, n, k, flag(x), flag(y), 1.0, 0.0, batch))
    return calls


def make_blas_gemms(workload, quick):
    """Only the GEMMs our cpu program for this step makes, through the same cblas_sgemm of
    numpy's OpenBLAS that the generated code calls (the MLP target of issue 8)."""
    if workload not in ("mlp", "transformer"):
        raise ValueError("only the training steps have GEMMs")
    import ctypes

    from runtime.cpu import jit
    args = inputs(workload, quick)
    graph = cc.compile(OURS[workload], backend="cpu").lower(*args).graph
    sgemm = getattr(jit.openblas(), jit.BLAS_GEMM["float32"])
    i64, f32 = ctypes.c_int64, ctypes.c_float
    sgemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, i64, i64, i64, f32,
                      ctypes.c_void_p, i64, ctypes.c_void_p, i64, f32, ctypes.c_void_p, i64]
    sgemm.restype = None
    rng = np.random.default_rng(0)
    prepared = []
    for m, n, k, ta, tb, alpha, beta, batch in _gemm_calls(graph):
        a = rng.standard_normal((batch, k, m) if ta else (batch, m, k)).astype(np.float32)
        b = rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(np.float32)
        c = np.zeros((batch, m, n), np.float32)
        lda, ldb = a.shape[-1], b.shape[-1]
        for j in range(batch):
            prepared.append((112 if ta else 111, 112 if tb else 111, m, n, k, alpha,
                             a[j].ctypes.data, lda, b[j].ctypes.data, ldb, beta,
                             c[j].ctypes.data, n))
        prepared.append((a, b, c))  # keeps the arrays alive

    def step():
        for call in prepared:
            if len(call) == 13:
                ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc = call
                sgemm(101, ta, tb, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc)
    return Runner(step, note="the GEMMs alone")


MAKERS = {
    "cpu": lambda w, q: make_ours(w, q, "cpu"),
    "numpy": lambda w, q: make_ours(w, q, "numpy"),
    "numpy-hand": make_numpy_hand,
    "torch": make_torch,
    "torch.compile": lambda w, q: make_torch(w, q, compiled=True),
    "jax.jit": make_jax,
    "paddle": make_paddle,
    "blas-gemms": make_blas_gemms,
}
NOT_THE_SAME = {"blas-gemms"}  # a part of the computation: not checked, no memory
PEER_MODULE = {"torch": "torch", "torch.compile": "torch", "jax.jit": "jax", "paddle": "paddle"}


def available(column: str) -> bool:
    mod = PEER_MODULE.get(column)
    if mod is None:
        return True
    import importlib.util
    return importlib.util.find_spec(mod) is not None


def _as_numpy(v):
    if v is None:
        return None
    if hasattr(v, "detach"):
        v = v.detach()
    if hasattr(v, "numpy"):
        v = v.numpy()
    return np.asarray(v)


def _first_step(r: Runner):
    """Run a fresh runner's first step: (its output, each parameter's update in float64)."""
    before = [np.array(p, copy=True) for p in r.params()]
    out = _as_numpy(r.step())
    out = None if out is None else np.array(out, copy=True)  # it may be the caller's array
    return out, [np.asarray(a, np.float64) - b for a, b in zip(r.params(), before)]


def check_same(workload, first, reference) -> str | None:
    """None if a column's first step (`_first_step` of a fresh runner) computed what our
    numpy backend's did (the output, or every parameter's update), else what differs."""
    out, deltas = first
    ref_out, ref_delta = reference
    if workload in ("mlp", "transformer"):
        if not np.allclose(out, ref_out, rtol=1e-4, atol=1e-6):
            return f"loss {float(out)!r} vs {float(ref_out)!r}"
        for k, (delta, d) in enumerate(zip(deltas, ref_delta)):
            err = np.abs(delta - d).max()
            if err > 2e-3 * np.abs(d).max() + 1e-8:
                return f"parameter {k}: update differs by {err:.3g} (max |update| " \
                       f"{np.abs(d).max():.3g})"
        return None
    if not np.array_equal(out, ref_out):
        return f"output differs (max |diff| {np.abs(out - ref_out).max():.3g})"
    return None


# -- timing -----------------------------------------------------------------------------------
def _others_cpu_s() -> float:
    """CPU seconds run so far by this process's threads other than the calling one (Linux's
    /proc/self/task/*/schedstat, in nanoseconds; 0.0 where there is no /proc)."""
    me, total = threading.get_native_id(), 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for t in tasks:
        if int(t) == me:
            continue
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that just ended
            pass
    return total / 1e9


def settle(window=0.01, quiet=0.0005, limit=2.0) -> float:
    """Wait until this process's other threads are idle: two `window`s in a row in which
    they ran less than `quiet` CPU seconds in all (an OpenBLAS thread spinning after a GEMM
    runs most of each window). Seconds waited; at most `limit`."""
    t0 = time.perf_counter()
    prev, calm = _others_cpu_s(), 0
    while calm < 2 and time.perf_counter() - t0 < limit:
        time.sleep(window)
        cur = _others_cpu_s()
        calm = calm + 1 if cur - prev < quiet else 0
        prev = cur
    return time.perf_counter() - t0


def _serve(state, column, quick, msg, drain):
    """One request to a column: ("build", workload) makes its runner and runs its first
    step; ("warm", n) runs n steps; ("run", n) times n steps. `drain` (settle, or None in
    --one-process mode) runs after each, so the answer comes when this column's threads
    are idle."""
    cmd = msg[0]
    try:
        if cmd == "build":
            state.pop("runner", None)
            gc.collect()  # (the previous workload's arrays)
            t0 = time.perf_counter()
            state["runner"] = r = MAKERS[column](msg[1], quick)
            first = _first_step(r)
            out = ("ready", first, r.memory, time.perf_counter() - t0)
        elif cmd == "warm":
            for _ in range(msg[1]):
                state["runner"].step()
            out = ("ok",)
        elif cmd == "blas":
            return ("blas", blas_info(), 0.0)
        elif cmd == "run":
            step, ts = state["runner"].step, []
            for _ in range(msg[1]):
                t0 = time.perf_counter()
                step()
                ts.append(time.perf_counter() - t0)
            out = ("times", ts)
        else:
            raise ValueError(f"unknown request {cmd!r}")
    except Exception as e:  # a peer that can't run this workload: reported, not fatal
        state.pop("runner", None)
        return ("error", f"{type(e).__name__}: {str(e)[:200]}", 0.0)
    return out + ((drain() if drain else 0.0),)


def _worker_main(conn, column, quick):
    """A column's process: answers requests (`_serve`) until told to quit."""
    state = {}
    while True:
        msg = conn.recv()
        if msg[0] == "quit":
            return
        conn.send(_serve(state, column, quick, msg, settle))


class Worker:
    """A column in a process of its own (spawned: it loads only its own libraries and their
    thread pools, on this process's cores and environment)."""

    def __init__(self, column, quick):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, column, quick),
                                name=f"bench {column}")
        self.proc.start()
        child.close()

    def ask(self, *msg):
        try:
            self.conn.send(msg)
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(1)
            return ("error", f"its process ended (exit code {self.proc.exitcode})", 0.0)

    def close(self):
        try:
            self.conn.send(("quit",))
        except OSError:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


class InProcess:
    """A column in this process, not drained (`--one-process`: the protocol before issue 25's
    fix, kept to measure what the spinning threads of one column cost the next)."""

    def __init__(self, column, quick):
        self.column, self.quick, self.state = column, quick, {}

    def ask(self, *msg):
        return _serve(self.state, self.column, self.quick, msg, None)

    def close(self):
        self.state.clear()


def time_workload(workload, columns, quick, runs, warmup, log, workers):
    """Build each column in its worker (our numpy backend first: its first step is the
    reference), check its first step against the reference, warm it up, then time them
    interleaved: each round runs every column once, one column at a time, in a rotating
    order. (times, memory, check result, seconds each column's threads took to go idle after
    a step: its median; all per column)."""
    checks, ref, memory, ready = {}, None, {}, []
    for c in ["numpy"] + [c for c in columns if c != "numpy"]:
        if c in NOT_THE_SAME and workload not in ("mlp", "transformer"):
            continue
        ans = workers[c].ask("build", workload)
        if ans[0] == "ready":
            _, first, mem, secs, _ = ans
            if c == "numpy":
                ref = first
            elif c not in NOT_THE_SAME:
                checks[c] = check_same(workload, first, ref)
                if checks[c]:
                    log(f"  {workload}/{c} DIFFERS from our numpy backend: {checks[c]}")
            ans = workers[c].ask("warm", warmup)
        if ans[0] == "error":
            if c == "numpy":
                raise RuntimeError(f"our numpy backend can't run {workload}: {ans[1]}")
            log(f"  {workload}/{c}: can't run ({ans[1]})")
            continue
        if c in columns:
            ready.append(c)
            memory[c] = mem
        log(f"  {workload}/{c}: ready in {secs:.1f} s")
    times = {c: [] for c in ready}
    drained = {c: [] for c in ready}
    for r in range(runs):
        rot = ready[r % len(ready):] + ready[:r % len(ready)]  # interleaved, rotating order
        for c in rot:
            ans = workers[c].ask("run", 1)
            if ans[0] == "error":
                raise RuntimeError(f"{workload}/{c} failed while timed: {ans[1]}")
            times[c] += ans[1]
            drained[c].append(ans[2])
    return times, memory, checks, {c: float(np.median(d)) for c, d in drained.items()}


def compile_time_child(workload, quick):
    """(In a subprocess) seconds from trace to runnable for `workload` on cpu."""
    args = inputs(workload, quick)
    t0 = time.perf_counter()
    fn = cc.compile(OURS[workload], backend="cpu")
    fn.lower(*args)
    return time.perf_counter() - t0


def compile_times(workload, quick, repeat=3):
    """Median seconds, each in a fresh process: no disk cache (`COMPILER_CACHE_DIR=""` turns
    it off), cold (an empty COMPILER_CACHE_DIR: compiles and stores), warm (the same
    directory again). Without a disk cache in the build, the three do the same work."""
    off, cold, warm = [], [], []

    def child(env):
        cmd = [sys.executable, os.path.abspath(__file__), "--compile-child", workload]
        if quick:
            cmd.append("--quick")
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return float(out.stdout.strip().splitlines()[-1])
    for _ in range(repeat):
        off.append(child(dict(os.environ, COMPILER_CACHE_DIR="")))
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, COMPILER_CACHE_DIR=cache)
            cold.append(child(env))
            warm.append(child(env))
    return float(np.median(off)), float(np.median(cold)), float(np.median(warm))


def stats(ts):
    ts = np.asarray(ts)
    return float(np.median(ts)), float(np.percentile(ts, 25)), float(np.percentile(ts, 75))


def fmt_time(s):
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def table(runs_, columns) -> str:
    """Markdown: one row per workload and thread count (the runs `runs_` of one environment),
    a cell per column (median, p25..p75, ratio to our cpu backend at that thread count)."""
    head = "| workload | threads | " + " | ".join(columns) + " |"
    lines = [head, "|" + "---|" * (len(columns) + 2)]
    for w in runs_[0]["times"]:
        for run in runs_:
            times, checks = run["times"].get(w, {}), run["checks"]
            base = np.median(times["cpu"]) if times.get("cpu") else None
            cells = []
            for c in columns:
                if c not in times:
                    cells.append("—")
                    continue
                med, lo, hi = stats(times[c])
                ratio = f" **{med / base:.2f}×**" if base else ""
                bad = " (differs!)" if checks.get(f"{w}/{c}") else ""
                cells.append(f"{fmt_time(med)} ({fmt_time(lo)}..{fmt_time(hi)}){ratio}{bad}")
            lines.append(f"| {w} | {run['threads']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fmt_bytes(n):
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def memory_table(memory, columns) -> str:
    cols = [c for c in ("cpu", "numpy", "torch", "jax.jit") if c in columns]
    names = {"cpu": "ours (peak - inputs)", "numpy": "ours, numpy backend",
             "torch": "PyTorch eager (profiler peak)", "jax.jit": "JAX (XLA temp + outputs)"}
    lines = ["| workload | " + " | ".join(names[c] for c in cols) + " |",
             "|" + "---|" * (len(cols) + 1)]
    for w, mem in memory.items():
        cells = [fmt_bytes(mem[c]) if mem.get(c) is not None else "—" for c in cols]
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results, columns, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ws = list(results)
    fig, ax = plt.subplots(figsize=(1.6 * len(ws) + 3, 4.5))
    width = 0.8 / len(columns)
    for j, c in enumerate(columns):
        ratios, errs = [], [[], []]
        for w in ws:
            times = results[w][0]
            if c in times and times.get("cpu"):
                base = np.median(times["cpu"])
                med, lo, hi = stats(times[c])
                ratios.append(med / base)
                errs[0].append((med - lo) / base)
                errs[1].append((hi - med) / base)
            else:
                ratios.append(np.nan)
                errs[0].append(0)
                errs[1].append(0)
        ax.bar(np.arange(len(ws)) + j * width, ratios, width, yerr=errs, label=c)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(ws)) + 0.4 - width / 2)
    ax.set_xticklabels(ws)
    ax.set_ylabel("median time / our cpu backend's (log)")
    ax.legend(fontsize=8)
    ax.set_title("One core, one thread, the environment as given; error bars p25..p75")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def blas_info():
    """The thread pools loaded in this process (threadpoolctl), or None without it."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    keys = ("user_api", "internal_api", "architecture", "num_threads", "version", "filepath")
    return [{k: d.get(k) for k in keys} for d in threadpool_info()]


def merge_blas(infos):
    """The pools of several processes (`blas_info` of each), each library once."""
    if any(i is None for i in infos):
        return None
    seen = {}
    for info in infos:
        for d in info:
            seen.setdefault((d.get("filepath"), d.get("internal_api")), d)
    return list(seen.values())


def fmt_blas(info) -> str:
    if info is None:
        return ("threadpoolctl is not installed: which BLAS kernel ran is unknown "
                "(`pip install threadpoolctl`)")
    parts = []
    for d in info:
        name = f"{d['internal_api']} {d.get('version') or ''}".strip()
        arch = f", kernel `{d['architecture']}`" if d.get("architecture") else ""
        lib = os.path.basename(d.get("filepath") or "")
        n = d["num_threads"]
        parts.append(f"{name}{arch}, {n} thread{'s' if n != 1 else ''} ({lib})")
    return "; ".join(parts) or "no BLAS or OpenMP library loaded"


def fmt_load(load) -> str:
    return ", ".join(f"{v:.2f}" for v in load)


def child_run(a, columns, workloads, runs) -> dict:
    """(In a subprocess with BENCH_THREADS set) time every workload on THREADS cores."""
    allowed = sorted(os.sched_getaffinity(0))
    if a.core is not None and THREADS == 1:
        cores = [a.core]
    else:
        cores = allowed[-THREADS:]
    os.sched_setaffinity(0, set(cores))

    def log(s):
        print(s, file=sys.stderr, flush=True)
    log(f"{THREADS} thread(s) on cores {cores}; {runs} runs; columns {', '.join(columns)}; "
        + ", ".join(f"{v}={os.environ.get(v, '(unset)')}" for v in OPENBLAS_VARS))
    load_before = os.getloadavg()
    out = {"threads": THREADS, "cores": cores, "times": {}, "memory": {}, "checks": {},
           "settle": {}, "protocol": "one process" if a.one_process else "a process a column",
           "env": {v: os.environ.get(v) for v in OPENBLAS_VARS}}
    # (started after the pinning: the workers inherit this process's cores and environment)
    workers = {c: (InProcess if a.one_process else Worker)(c, a.quick)
               for c in ["numpy"] + [c for c in columns if c != "numpy"]}
    try:
        for w in workloads:
            times, memory, checked, drained = time_workload(w, columns, a.quick, runs,
                                                            a.warmup, log, workers)
            out["times"][w] = times
            out["memory"][w] = memory
            out["checks"].update({f"{w}/{c}": v for c, v in checked.items()})
            out["settle"][w] = drained
            if not a.one_process:
                log(f"  {w}: a column's threads idle again after its step (median): "
                    + ", ".join(f"{c} {d * 1e3:.0f} ms" for c, d in drained.items()))
        # every library that ran is loaded by now: the workers' pools, or this process's
        out["blas"] = (blas_info() if a.one_process else
                       merge_blas([wk.ask("blas")[1] for wk in workers.values()]))
    finally:
        for wk in workers.values():
            wk.close()
    out["load"] = [list(load_before), list(os.getloadavg())]
    return out


def environments() -> list[tuple[str, dict]]:
    """(title, environment) of each run: as given, and without OpenBLAS's kernel settings
    when the environment sets them."""
    given = {v: os.environ[v] for v in OPENBLAS_VARS if v in os.environ}
    said = ", ".join(f"`{v}={given[v]}`" if v in given else f"`{v}` unset"
                     for v in OPENBLAS_VARS)
    out = [(f"the environment as given ({said})", dict(os.environ))]
    if given:
        out.append(("`OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` removed for this run "
                    "(OpenBLAS picks its kernel for the CPU)",
                    {k: v for k, v in os.environ.items() if k not in OPENBLAS_VARS}))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes, 5 runs: a smoke test")
    ap.add_argument("--runs", type=int, help="timed rounds (default 21; 5 with --quick)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--columns", help=f"comma-separated subset of {','.join(COLUMNS)}")
    ap.add_argument("--workloads", help=f"comma-separated subset of {','.join(WORKLOADS)}")
    ap.add_argument("--threads", default="1,all",
                    help="comma-separated thread counts; `all`: the cores this process may use")
    ap.add_argument("--core", type=int, help="the core a 1-thread run pins to (default: the "
                                             "last allowed)")
    ap.add_argument("--one-process", action="store_true",
                    help="every column in one process, not drained between columns (the old "
                         "protocol: shows what one column's spinning threads cost the next)")
    ap.add_argument("--no-compile-time", action="store_true")
    ap.add_argument("--compile-workloads", default="mlp,transformer",
                    help="the steps whose compile time is measured (default: both)")
    ap.add_argument("--plot", help="save a bar chart of the ratios here (matplotlib)")
    ap.add_argument("--json", help="save the raw times here")
    ap.add_argument("--compile-child", help=argparse.SUPPRESS)
    ap.add_argument("--child-json", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.compile_child:
        print(compile_time_child(a.compile_child, a.quick))
        return 0
    runs = a.runs or (5 if a.quick else 21)
    columns = [c for c in (a.columns.split(",") if a.columns else COLUMNS)]
    for c in columns:
        if c not in MAKERS:
            ap.error(f"unknown column {c!r}")
    missing = [c for c in columns if not available(c)]
    columns = [c for c in columns if c not in missing]
    if "cpu" not in columns:
        ap.error("the cpu column is the baseline of every ratio")
    workloads = a.workloads.split(",") if a.workloads else list(WORKLOADS)
    if a.child_json:
        with open(a.child_json, "w") as f:
            json.dump(child_run(a, columns, workloads, runs), f)
        return 0
    ncores = len(os.sched_getaffinity(0))
    threads = sorted({ncores if t.strip() == "all" else int(t) for t in a.threads.split(",")})
    if not threads or min(threads) < 1 or max(threads) > ncores:
        ap.error(f"--threads: between 1 and the {ncores} cores this process may use")
    if missing:
        print(f"(not installed: {', '.join(missing)})", file=sys.stderr)
    sections = []  # (title, [child results, one per thread count])
    forwarded = ["--runs", str(runs), "--warmup", str(a.warmup), "--columns", ",".join(columns),
                 "--workloads", ",".join(workloads)] + (["--quick"] if a.quick else []) + \
                (["--core", str(a.core)] if a.core is not None else []) + \
                (["--one-process"] if a.one_process else [])
    for title, env in environments():
        results = []
        for n in threads:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "run.json")
                cmd = [sys.executable, os.path.abspath(__file__), "--child-json", path] + forwarded
                subprocess.run(cmd, env=dict(env, BENCH_THREADS=str(n)), check=True)
                with open(path) as f:
                    results.append(json.load(f))
        sections.append((title, results))
    print(f"Median of {runs} interleaved runs (p25..p75) at each thread count (pinned to that "
          "many cores; every library on that many threads; "
          + ("all columns in one process" if a.one_process else
             "each column in a process of its own, its threads idle before the next runs")
          + "); **ratio** = time / our cpu "
          "backend's time in the same run (below 1: faster than ours). Measured on this "
          f"shared {ncores}-core machine while other jobs ran: the load average (1, 5, 15 "
          "min) of each run is given, before and after it.")
    for title, results in sections:
        print(f"\nWith {title}:\n")
        for r in results:
            before, after = r["load"]
            print(f"- {r['threads']} thread{'s' if r['threads'] > 1 else ''} (cores "
                  f"{r['cores']}; load average {fmt_load(before)} before, {fmt_load(after)} "
                  f"after): {fmt_blas(r['blas'])}")
        print()
        print(table(results, columns))
    first = sections[0][1][0]
    print(f"\nMemory for one call beyond the caller's arrays ({first['threads']} thread, the "
          "environment as given):\n")
    print(memory_table(first["memory"], columns))
    compile_rows = {}
    if not a.no_compile_time:
        for w in a.compile_workloads.split(","):
            if w in ("mlp", "transformer"):
                compile_rows[w] = compile_times(w, a.quick, repeat=1 if a.quick else 3)
        if compile_rows:
            print("\nCompile time, trace to runnable on cpu (fresh process each; median of "
                  f"{1 if a.quick else 3}):\n")
            print("| step | no disk cache | cold (empty COMPILER_CACHE_DIR) | warm (same "
                  "directory again) |")
            print("|---|---|---|---|")
            for w, (off, cold, warm) in compile_rows.items():
                print(f"| {w} | {off:.2f} s | {cold:.2f} s | {warm:.2f} s |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "sections": [{"environment": t, "runs": r}
                                                  for t, r in sections],
                       "compile": compile_rows}, f, indent=1)
    if a.plot:
        plot({w: (t, None) for w, t in first["times"].items()}, columns, a.plot)
        print(f"chart saved to {a.plot}", file=sys.stderr)
    return 1 if any(v for _, results in sections for r in results
                    for v in r["checks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
