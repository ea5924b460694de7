"""Issue 26's figure: the transformer training step (examples/transformer_block.py: layer_norm,
attention, GELU MLP, MSE loss, backward, SGD update of float32 weights) in float32 and in
bfloat16 mixed precision, here and in the peers, time and memory, 1 thread and all threads.

    python benchmarks/half_precision_train.py [--backend cpu|numpy] [--steps 5] [--repeat 5]
                                              [--batch 8]

Configurations (peers are skipped, with the reason, when they don't import):
- `cc float32`: `train_step`; `cc bf16 AMP O2`: `amp_train_step` (`cc.amp.auto_cast(dtype=
  "bfloat16", level="O2")`, x and target bfloat16, float32 master weights);
- `torch float32`, `torch autocast bf16`: the same step written in PyTorch, the forward under
  `torch.autocast("cpu", dtype=torch.bfloat16)`, the weights float32;
- `jax float32`, `jax bf16`: the same step in JAX (`jax.jit` of value_and_grad and the update),
  the float32 weights cast to bfloat16 inside the step, x and target bfloat16.

Time: the median seconds per step over `--repeat` rounds of `--steps` steps, the
configurations interleaved round by round (so a busy moment of the machine hits them all), in
one process per thread setting (1 thread: OMP/BLAS/XLA/torch limited to one before they load;
all: their defaults, `threads=None` here). Memory, each configuration in a process of its own:
`planned` is the compiler's planned peak (`plan.peak_bytes`) and JAX's compiled
`memory_analysis()` (arguments + outputs + temporaries); `measured` is the process's peak RSS
from building the step (trace, compile) through the steps, less its RSS before (the library
imported, the inputs made; Linux's VmHWM reset through /proc/self/clear_refs): the same
yardstick for everyone, compilers' own memory included.
On a shared machine the times are as good as the cores that were free: `os.getloadavg()` is
printed with them.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("cc float32", "cc bf16 AMP O2", "torch float32", "torch autocast bf16",
           "jax float32", "jax bf16")
LR = 0.01


def _one_thread_env():
    """The environment of a 1-thread child: set before numpy, torch and jax load."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                        "intra_op_parallelism_threads=1").strip()
    return env


def _inputs(batch):
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import transformer_block as tb
    return tb, tb.example_inputs(batch=batch)


# -- the step per configuration: make(config) -> (step(), planned bytes or None) -------------
def make_cc(tb, args, amp, backend, threads):
    import compiler as cc
    if amp:
        inputs = tb.amp_inputs(batch=args[0].shape[0])
        fn = cc.compile(tb.amp_train_step, backend=backend, threads=threads)
    else:
        inputs = tuple(a.copy() for a in args)
        fn = cc.compile(tb.train_step, backend=backend, threads=threads)
    planned = fn.lower(*inputs).plan.peak_bytes
    return (lambda: fn(*inputs)), planned


def _torch_step(torch, tb, args, amp):
    import torch.nn.functional as TF
    x, target, *params = [torch.from_numpy(a.copy()) for a in args]
    for p in params:
        p.requires_grad_(True)
    ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1, w_fc2, b_fc2 = params
    b, t, d = x.shape
    hd = d // tb.HEADS

    def heads(z):
        return z.reshape(b, t, tb.HEADS, hd).transpose(1, 2)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            h = TF.layer_norm(x, (d,), ln1_w, ln1_b)
            q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
            attn = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(hd), dim=-1)
            o = (attn @ v).transpose(1, 2).reshape(b, t, d)
            x1 = x + o @ wo
            m = TF.gelu(TF.layer_norm(x1, (d,), ln2_w, ln2_b) @ w_fc1 + b_fc1)
            y = x1 + m @ w_fc2 + b_fc2
            loss = TF.mse_loss(y.float(), target)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.sub_(LR * p.grad)
                p.grad = None
        return loss
    return step


def make_torch(tb, args, amp, threads):
    import torch
    if threads == 1:
        torch.set_num_threads(1)
    return _torch_step(torch, tb, args, amp), None


def make_jax(tb, args, amp, threads):
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    half = jnp.bfloat16

    def layer_norm(z, w, bias):
        mu = z.mean(-1, keepdims=True)
        var = ((z - mu) ** 2).mean(-1, keepdims=True)
        return (z - mu) / jnp.sqrt(var + 1e-5) * w + bias

    def loss_fn(params, x, target):
        if amp:
            params = [p.astype(half) for p in params]
        ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1, w_fc2, b_fc2 = params
        b, t, d = x.shape
        hd = d // tb.HEADS

        def heads(z):
            return z.reshape(b, t, tb.HEADS, hd).transpose(0, 2, 1, 3)
        h = layer_norm(x, ln1_w, ln1_b)
        q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
        attn = jax.nn.softmax((q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd), axis=-1)
        o = (attn @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x1 = x + o @ wo
        m = jax.nn.gelu(layer_norm(x1, ln2_w, ln2_b) @ w_fc1 + b_fc1, approximate=False)
        y = x1 + m @ w_fc2 + b_fc2
        return ((y.astype(jnp.float32) - target.astype(jnp.float32)) ** 2).mean()

    @jax.jit
    def train(params, x, target):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, target)
        return loss, [p - LR * g.astype(p.dtype) for p, g in zip(params, grads)]

    x, target, *params = args
    if amp:
        x, target = x.astype(ml_dtypes.bfloat16), target.astype(ml_dtypes.bfloat16)
    state = {"params": [jnp.asarray(p) for p in params]}
    x, target = jnp.asarray(x), jnp.asarray(target)
    compiled = train.lower(state["params"], x, target).compile()
    try:
        m = compiled.memory_analysis()
        planned = int(m.argument_size_in_bytes + m.output_size_in_bytes
                      + m.temp_size_in_bytes - m.alias_size_in_bytes)
    except Exception:  # noqa: BLE001 (not every jaxlib reports it)
        planned = None

    def step():
        loss, state["params"] = train(state["params"], x, target)
        return loss.block_until_ready()
    return step, planned


def make(config, tb, args, backend, threads):
    amp = "bf16" in config
    if config.startswith("cc"):
        return make_cc(tb, args, amp, backend, threads)
    if config.startswith("torch"):
        return make_torch(tb, args, amp, threads)
    return make_jax(tb, args, amp, threads)


# -- the two kinds of run --------------------------------------------------------------------
def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def run_memory(config, backend, batch, steps):
    tb, args = _inputs(batch)
    __import__(config.split()[0] if not config.startswith("cc") else "compiler")
    before = _status_kib("VmRSS")
    try:  # the peak RSS starts again from the current RSS (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        peak = "VmHWM"
    except OSError:
        peak = None
    step, planned = make(config, tb, args, backend, None)
    for _ in range(steps):
        step()
    if peak is None:
        return {"planned": planned, "measured": None}
    return {"planned": planned, "measured": (_status_kib(peak) - before) * 1024}


def run_time(configs, backend, batch, steps, repeat, threads):
    tb, args = _inputs(batch)
    steps_of, out = {}, {}
    for c in configs:
        try:
            steps_of[c] = make(c, tb, args, backend, threads)[0]
            steps_of[c]()  # compile, warm up: not timed
        except Exception as e:  # noqa: BLE001 (a peer or a dtype this backend lacks)
            out[c] = f"n/a ({type(e).__name__}: {str(e).splitlines()[0][:70]})"
    times = {c: [] for c in steps_of}
    for _ in range(repeat):
        for c, step in steps_of.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times[c].append((time.perf_counter() - start) / steps)
    out.update({c: sorted(ts)[len(ts) // 2] for c, ts in times.items()})
    return out


def _child(argv, env=None):
    cmd = [sys.executable, os.path.abspath(__file__), *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:90]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _available(config):
    mod = config.split()[0]
    if mod == "cc":
        return True
    try:
        __import__(mod)
    except ImportError:
        return False
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu", choices=("cpu", "numpy"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--child", choices=("memory", "time"), help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--threads", choices=("1", "all"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child == "memory":
        print(json.dumps(run_memory(a.config, a.backend, a.batch, a.steps)))
        return
    if a.child == "time":
        threads = 1 if a.threads == "1" else None
        print(json.dumps(run_time([c for c in CONFIGS if _available(c)], a.backend, a.batch,
                                  a.steps, a.repeat, threads)))
        return
    configs = [c for c in CONFIGS if _available(c)]
    skipped = [c for c in CONFIGS if c not in configs]
    common = ["--backend", a.backend, "--steps", str(a.steps), "--batch", str(a.batch)]
    memory = {c: _child(["--child", "memory", "--config", c, *common]) for c in configs}
    times = {th: _child(["--child", "time", "--threads", th, "--repeat", str(a.repeat),
                         *common], _one_thread_env() if th == "1" else None)
             for th in ("1", "all")}
    print(f"transformer step, batch {a.batch}, backend {a.backend}, {a.steps} steps x "
          f"{a.repeat} rounds; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if skipped:
        print(f"skipped (not importable): {', '.join(skipped)}")
    print(f"{'config':22s} {'1 thread':>12s} {'all threads':>12s} {'planned':>12s} "
          f"{'measured':>12s}")

    def fmt_t(v):
        return f"{v * 1e3:9.1f} ms" if isinstance(v, float) else "n/a"

    def fmt_b(v):
        return f"{v / 2**20:8.2f} MiB" if isinstance(v, (int, float)) and v else "-"
    for c in configs:
        m = memory[c]
        print(f"{c:22s} {fmt_t(times['1'].get(c)):>12s} {fmt_t(times['all'].get(c)):>12s} "
              f"{fmt_b(m.get('planned')):>12s} {fmt_b(m.get('measured')):>12s}")
        for th in ("1", "all"):
            if isinstance(times[th].get(c), str):
                print(f"  ({th} thread(s): {times[th][c]})")
        if "error" in m:
            print(f"  (memory: {m['error']})")
    for peer in ("cc", "torch", "jax"):
        f32 = memory.get(f"{peer} float32", {}).get("planned")
        half = next((memory[c].get("planned") for c in configs
                     if c.startswith(peer) and "bf16" in c), None)
        if f32 and half:
            print(f"{peer}: bf16 planned peak / float32 planned peak = {half / f32:.3f}")


if __name__ == "__main__":
    main()
