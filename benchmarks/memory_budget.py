"""Memory to a budget (issue 27): a training step compiled with `memory_budget=N` over a
sweep of budgets, one row per budget, beside torch.compile's `activation_memory_budget` and
JAX's `jax.checkpoint` policies on the same step:

    budget -> planned peak -> measured peak -> extra FLOPs -> step time

    python benchmarks/memory_budget.py [--workloads transformer,gpt] [--gpt-size small]
                                       [--backend cpu|numpy] [--repeat 5] [--quick]
                                       [--peers torch,jax] [--plot budget.png] [--json out]

Workloads: `transformer` is examples/transformer_block.py's step; `gpt` is examples/gpt.py's
model (`--gpt-size`: its own "small" shape, or "gpt2-small": 12 layers, width 768, 12 heads,
context 256, batch 4) written here as one function over loose parameter arrays with an SGD
update, and without the embedding dropout, so that the three frameworks run the same step
(torch and JAX draw other random numbers); `mlp` (ours only) is examples/mlp.py's step.

- budget, planned peak: bytes beyond the caller's arrays (`plan.peak_bytes -
  plan.input_bytes`); the budgets are `plan.budget_curve()`'s (from below the lowest peak the
  search reaches to the peak without recomputation), "-" where no plan fits
  (MemoryBudgetError);
- measured peak: `tracemalloc`'s peak over the first call (the arena and the returned arrays
  are allocated then), on fresh copies of the inputs, which are allocated before it starts;
- step time: the median wall-clock time of `--repeat` calls after that one (one process,
  shared machines vary: compare rows of one run).

Peers (each skipped when it fails to import):
- torch.compile: `torch._functorch.config.activation_memory_budget` is a fraction in [0, 1]
  of the activation memory its partitioner estimates, not bytes. The loss is compiled at each
  fraction of `--torch-fractions`, and its step (forward, `loss.backward()`, SGD under
  `no_grad`) measured: the peak of the CPU allocator's bytes during one call, from the
  profiler's memory events (benchmarks/backend_speed.py measures torch eager the same way);
  each of our budgets is then matched to the fraction whose measured peak is nearest to it,
  and both are printed.
- JAX: `jax.checkpoint` around each block with the policies nothing_saveable,
  dots_saveable and everything_saveable (and none), the step jitted with its parameters
  donated; its peak is XLA's own plan (`compiled.memory_analysis()`: temporaries plus
  outputs not aliased to a donated argument), since its CPU allocator has no public peak.
Peaks are bytes beyond the step's inputs for every column.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler as cc  # noqa: E402
import compiler.nn.functional as F  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
GPT_LR = 0.01
TORCH_FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
JAX_POLICIES = ("none", "nothing_saveable", "dots_saveable", "everything_saveable")


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- the workloads: our step, its inputs, and what the peers need ------------------------------
class Workload:
    """`step(*args)` in our API; `args()` fresh inputs; `params`: the indices of the
    parameters among them (the peers differentiate those); `torch_loss(torch, *args)` and
    `jax_loss(jax, jnp, checkpoint, *args)` the same loss (None: no peer for it)."""

    def __init__(self, name, step, args, params, lr, torch_loss=None, jax_loss=None):
        self.name, self.step, self.args, self.params, self.lr = name, step, args, params, lr
        self.torch_loss, self.jax_loss = torch_loss, jax_loss


def transformer_workload():
    tf = load_example("transformer_block")

    def torch_loss(torch, x, target, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1,
                   w_fc2, b_fc2):
        tF = torch.nn.functional
        b, t, d = x.shape
        hd = d // tf.HEADS

        def heads(z):
            return z.reshape(b, t, tf.HEADS, hd).permute(0, 2, 1, 3)
        h = tF.layer_norm(x, (d,), ln1_w, ln1_b, 1e-5)
        q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
        attn = torch.softmax((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)), dim=-1)
        o = (attn @ v).permute(0, 2, 1, 3).reshape(b, t, d)
        x1 = x + o @ wo
        m = tF.gelu(tF.layer_norm(x1, (d,), ln2_w, ln2_b, 1e-5) @ w_fc1 + b_fc1)
        return tF.mse_loss(x1 + (m @ w_fc2 + b_fc2), target)

    def jax_loss(jax, jnp, checkpoint, x, target, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b,
                 w_fc1, b_fc1, w_fc2, b_fc2):
        b, t, d = x.shape
        hd = d // tf.HEADS

        def heads(z):
            return z.reshape(b, t, tf.HEADS, hd).transpose(0, 2, 1, 3)

        def block(x):
            h = _jax_ln(jax, x, ln1_w, ln1_b)
            q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
            attn = jax.nn.softmax((q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(hd)), -1)
            o = (attn @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
            x1 = x + o @ wo
            m = jax.nn.gelu(_jax_ln(jax, x1, ln2_w, ln2_b) @ w_fc1 + b_fc1, approximate=False)
            return x1 + (m @ w_fc2 + b_fc2)
        return ((checkpoint(block)(x) - target) ** 2).mean()

    return Workload("transformer", tf.train_step, tf.example_inputs, tuple(range(2, 14)), tf.LR,
                    torch_loss, jax_loss)


def _jax_ln(jax, z, g, b):
    mu = z.mean(-1, keepdims=True)
    var = ((z - mu) ** 2).mean(-1, keepdims=True)
    return (z - mu) * jax.lax.rsqrt(var + 1e-5) * g + b


def gpt_workload(size="small"):
    """examples/gpt.py's model (its Size) over loose arrays: ids, targets, then wte, wpe,
    ln_f's weight and bias, head, and per block ln1 (w, b), qkv, proj, ln2 (w, b), fc1, fc2."""
    gpt = load_example("gpt")
    sz = gpt.SIZES[size]
    vocab, d, nh = len(gpt.VOCAB), sz.dim, sz.heads

    def arrays(seed=0):
        rng = np.random.default_rng(seed)

        def w(*shape, std=0.02):
            return (rng.standard_normal(shape) * std).astype(np.float32)
        ones, zeros = np.ones(d, np.float32), np.zeros(d, np.float32)
        params = [w(vocab, d), w(sz.context, d), ones.copy(), zeros.copy(), w(d, vocab)]
        for _ in range(sz.layers):
            params += [ones.copy(), zeros.copy(), w(d, 3 * d), w(d, d, std=0.014), ones.copy(),
                       zeros.copy(), w(d, 4 * d), w(4 * d, d, std=0.014)]
        ids, targets = gpt.example_inputs(sz)
        return (ids, targets, *params)

    def layers(params):
        return [params[5 + 8 * i: 13 + 8 * i] for i in range(sz.layers)]

    def step(ids, targets, *params):
        for p in params:
            p.stop_gradient = False
        b, t = ids.shape
        wte, wpe, lnf_w, lnf_b, head = params[:5]
        x = F.embedding(ids, wte) + F.embedding(cc.arange(t), wpe)
        for ln1_w, ln1_b, wqkv, wproj, ln2_w, ln2_b, w1, w2 in layers(params):
            q, k, v = (a.reshape([b, t, nh, d // nh])
                       for a in (F.layer_norm(x, d, ln1_w, ln1_b) @ wqkv).split(3, -1))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + att.reshape([b, t, d]) @ wproj
            x = x + F.gelu(F.layer_norm(x, d, ln2_w, ln2_b) @ w1) @ w2
        logits = F.layer_norm(x, d, lnf_w, lnf_b) @ head
        loss = F.cross_entropy(logits.reshape([-1, vocab]), targets.reshape([-1]))
        loss.backward()
        with cc.no_grad():
            for p in params:
                p.subtract_(GPT_LR * p.grad)
        return loss

    def torch_loss(torch, ids, targets, *params):
        tF = torch.nn.functional
        b, t = ids.shape
        wte, wpe, lnf_w, lnf_b, head = params[:5]
        x = wte[ids] + wpe[torch.arange(t)]
        for ln1_w, ln1_b, wqkv, wproj, ln2_w, ln2_b, w1, w2 in layers(params):
            q, k, v = (a.reshape(b, t, nh, d // nh).transpose(1, 2)
                       for a in (tF.layer_norm(x, (d,), ln1_w, ln1_b, 1e-5) @ wqkv).split(d, -1))
            att = tF.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + att.transpose(1, 2).reshape(b, t, d) @ wproj
            x = x + tF.gelu(tF.layer_norm(x, (d,), ln2_w, ln2_b, 1e-5) @ w1) @ w2
        logits = tF.layer_norm(x, (d,), lnf_w, lnf_b, 1e-5) @ head
        return tF.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    def jax_loss(jax, jnp, checkpoint, ids, targets, *params):
        b, t = ids.shape
        wte, wpe, lnf_w, lnf_b, head = params[:5]
        x = wte[ids] + wpe[jnp.arange(t)]
        mask = jnp.tril(jnp.ones((t, t), bool))

        def block(x, ln1_w, ln1_b, wqkv, wproj, ln2_w, ln2_b, w1, w2):
            qkv = _jax_ln(jax, x, ln1_w, ln1_b) @ wqkv
            q, k, v = (a.reshape(b, t, nh, d // nh).transpose(0, 2, 1, 3)
                       for a in jnp.split(qkv, 3, -1))
            s = jnp.where(mask, (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(d // nh), -jnp.inf)
            att = (jax.nn.softmax(s, -1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
            x = x + att @ wproj
            return x + jax.nn.gelu(_jax_ln(jax, x, ln2_w, ln2_b) @ w1, approximate=False) @ w2
        for layer in layers(params):
            x = checkpoint(block)(x, *layer)
        logits = (_jax_ln(jax, x, lnf_w, lnf_b) @ head).reshape(-1, vocab)
        logp = jax.nn.log_softmax(logits, -1)
        return -jnp.take_along_axis(logp, targets.reshape(-1, 1), 1).mean()

    n = 5 + 8 * sz.layers
    return Workload(f"gpt ({size})", step, arrays, tuple(range(2, 2 + n)), GPT_LR,
                    torch_loss, jax_loss)


def mlp_workload():
    mlp = load_example("mlp")
    return Workload("mlp", mlp.train_step, mlp.example_inputs, (2, 3, 4, 5), mlp.LR)


# -- ours ---------------------------------------------------------------------------------------
def measure(w: Workload, backend, budget, repeat):
    """(planned peak, measured peak, extra FLOPs, median step seconds), or None when the
    budget can't be met."""
    fn = cc.compile(w.step, backend=backend, memory_budget=budget)
    args = w.args()
    try:
        plan = fn.lower(*args).plan
    except cc.MemoryBudgetError:
        return None
    args = [a.copy() for a in args]
    tracemalloc.start()
    fn(*args)
    measured = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (plan.peak_bytes - plan.input_bytes, measured, plan.budget_point.extra_flops,
            _median_time(lambda: fn(*args), repeat))


def _median_time(call, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# -- torch.compile --------------------------------------------------------------------------------
def _torch_peak_bytes(torch, call) -> int:
    """Peak of the CPU allocator's bytes during one call, relative to the bytes before: the
    running sum of the profiler's raw memory events in time order."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def torch_sweep(w: Workload, fractions, repeat):
    """{fraction: (measured peak, median step seconds)} of torch.compile's step."""
    import torch
    import torch._dynamo
    import torch._functorch.config as fconfig
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    out = {}
    for f in fractions:
        torch._dynamo.reset()
        fconfig.activation_memory_budget = f
        args = [torch.from_numpy(a.copy()) for a in w.args()]
        params = [args[i].requires_grad_(True) for i in w.params]
        loss_fn = torch.compile(lambda *a: w.torch_loss(torch, *a))

        def step():
            loss = loss_fn(*args)
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p.sub_(w.lr * p.grad)
                    p.grad = None
            return loss.detach()
        step()  # compiles
        out[f] = (_torch_peak_bytes(torch, step), _median_time(step, repeat))
    fconfig.activation_memory_budget = 1.0
    return out


# -- JAX ------------------------------------------------------------------------------------------
def jax_sweep(w: Workload, repeat):
    """{policy: (XLA's planned peak, median step seconds)}."""
    import jax
    import jax.numpy as jnp
    out = {}
    for name in JAX_POLICIES:
        if name == "none":
            def checkpoint(f):
                return f
        else:
            policy = getattr(jax.checkpoint_policies, name)

            def checkpoint(f, policy=policy):
                return jax.checkpoint(f, policy=policy)
        args = [jnp.asarray(a) for a in w.args()]
        params = tuple(args[i] for i in w.params)
        data = [a for i, a in enumerate(args) if i not in w.params]
        order = sorted(w.params)

        def loss(params, *data, checkpoint=checkpoint):
            full, p, d = [], iter(params), iter(data)
            for i in range(len(args)):
                full.append(next(p) if i in order else next(d))
            return w.jax_loss(jax, jnp, checkpoint, *full)

        def step(params, *data, loss=loss):
            value, grads = jax.value_and_grad(loss)(params, *data)
            return value, tuple(p - w.lr * g for p, g in zip(params, grads))
        jitted = jax.jit(step, donate_argnums=0)
        compiled = jitted.lower(params, *data).compile()
        mem = compiled.memory_analysis()
        peak = None if mem is None else int(mem.temp_size_in_bytes + mem.output_size_in_bytes
                                            - mem.alias_size_in_bytes)
        state = {"p": params}

        def call():
            value, state["p"] = jitted(state["p"], *data)
            value.block_until_ready()
        call()
        out[name] = (peak, _median_time(call, repeat))
    return out


def _peer(name, run):
    try:
        return run()
    except ImportError as e:
        print(f"  ({name} skipped: {e})")
    return None


# -- the sweep ---------------------------------------------------------------------------------
def sweep(w: Workload, backend, repeat, quick, peers, fractions):
    plan = cc.compile(w.step, backend=backend).lower(*w.args()).plan
    budgets = [b for b, _, _ in plan.budget_curve()]
    if quick:
        budgets = sorted({budgets[0], budgets[len(budgets) // 2], budgets[-1]})
    print(f"{w.name} ({backend}); default plan {plan.peak_bytes - plan.input_bytes} B "
          "beyond the inputs")
    rows = []
    for b in budgets:
        rows.append((b, measure(w, backend, b, repeat)))
    torch_rows = jax_rows = None
    if "torch" in peers and w.torch_loss is not None:
        torch_rows = _peer("torch", lambda: torch_sweep(w, fractions, repeat))
    if "jax" in peers and w.jax_loss is not None:
        jax_rows = _peer("jax", lambda: jax_sweep(w, repeat))
    head = (f"  {'budget B':>12}  {'planned B':>12}  {'measured B':>12}  {'extra FLOPs':>12}  "
            f"{'step ms':>8}")
    if torch_rows:
        head += f"  | {'torch frac':>10}  {'torch B':>12}  {'torch ms':>8}"
    print(head)
    result = {"workload": w.name, "backend": backend, "ours": [], "torch": [], "jax": []}
    for b, row in rows:
        line = f"  {b:>12}  "
        if row is None:
            line += f"{'-':>12}  {'-':>12}  {'-':>12}  {'-':>8}"
        else:
            planned, measured, flops, t = row
            line += f"{planned:>12}  {measured:>12}  {flops:>12}  {t * 1e3:>8.2f}"
            result["ours"].append(dict(budget=b, planned=planned, measured=measured,
                                       extra_flops=flops, seconds=t))
        if torch_rows:  # the fraction whose measured peak is nearest to this budget
            f = min(torch_rows, key=lambda k: (abs(torch_rows[k][0] - b), k))
            peak, t = torch_rows[f]
            line += f"  | {f:>10.2f}  {peak:>12}  {t * 1e3:>8.2f}"
        print(line + ("  (MemoryBudgetError)" if row is None else ""))
    if torch_rows:
        print("  torch.compile, every fraction:  " + ";  ".join(
            f"{f:.2f}: {p} B {t * 1e3:.1f} ms" for f, (p, t) in sorted(torch_rows.items())))
        result["torch"] = [dict(fraction=f, measured=p, seconds=t)
                           for f, (p, t) in sorted(torch_rows.items())]
    if jax_rows:
        print("  JAX (jax.checkpoint per block; XLA's planned peak):  " + ";  ".join(
            f"{k}: {p} B {t * 1e3:.1f} ms" for k, (p, t) in jax_rows.items()))
        result["jax"] = [dict(policy=k, planned=p, seconds=t) for k, (p, t) in jax_rows.items()]
    print()
    return result


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 8), squeeze=False)
    for col, r in enumerate(results):
        top, bottom = axes[0][col], axes[1][col]
        ours = r["ours"]
        b = [x["budget"] / 2 ** 20 for x in ours]
        top.plot(b, [x["planned"] / 2 ** 20 for x in ours], "o-", label="ours: planned")
        top.plot(b, [x["measured"] / 2 ** 20 for x in ours], "x--", label="ours: measured")
        bottom.plot([x["measured"] / 2 ** 20 for x in ours], [x["seconds"] * 1e3 for x in ours],
                    "o-", label="ours")
        if r["torch"]:
            peaks = [x["measured"] / 2 ** 20 for x in r["torch"]]
            top.plot(peaks, peaks, "s", label="torch.compile (at its measured peak)")
            bottom.plot(peaks, [x["seconds"] * 1e3 for x in r["torch"]], "s-",
                        label="torch.compile (activation_memory_budget)")
        for x in r["jax"]:
            if x["planned"] is not None:
                bottom.plot([x["planned"] / 2 ** 20], [x["seconds"] * 1e3], "^",
                            label=f"JAX {x['policy']}")
        top.set(title=f"{r['workload']}: peak against budget", xlabel="budget (MiB)",
                ylabel="peak beyond inputs (MiB)")
        bottom.set(title="step time against peak", xlabel="peak beyond inputs (MiB)",
                   ylabel="step (ms)")
        top.legend(fontsize=7)
        bottom.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


WORKLOADS = {"transformer": transformer_workload, "transformer_block": transformer_workload,
             "gpt": None, "mlp": mlp_workload}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--workloads", "--examples", default="transformer,gpt",
                    help="comma-separated: transformer, gpt, mlp (ours only)")
    ap.add_argument("--gpt-size", default="small", help="examples/gpt.py's SIZES key")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="three budgets per workload, 3 calls")
    ap.add_argument("--peers", default="torch,jax", help="comma-separated, or 'none'")
    ap.add_argument("--torch-fractions", default=",".join(map(str, TORCH_FRACTIONS)))
    ap.add_argument("--plot", help="save peak and step time against the budget here (png)")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    repeat = 3 if a.quick else a.repeat
    fractions = [float(f) for f in a.torch_fractions.split(",")]
    if a.quick:
        fractions = [fractions[0], fractions[len(fractions) // 2], fractions[-1]]
    peers = set(a.peers.split(","))
    results = []
    for name in a.workloads.split(","):
        w = gpt_workload(a.gpt_size) if name == "gpt" else WORKLOADS[name]()
        results.append(sweep(w, a.backend, repeat, a.quick, peers, fractions))
    if a.plot:
        plot(results, a.plot)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
