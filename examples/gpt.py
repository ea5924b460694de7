"""A character-level GPT trained on text this program generates from a small grammar.

Written as Paddle writes it: `nn.Layer`s (Embedding, learned positions, Dropout, 2 pre-norm
blocks with causal scaled-dot-product attention and a GELU MLP, LayerNorm, Linear) trained by
`cc.optimizer.AdamW(learning_rate=LinearWarmup(...), parameters=model.parameters())`. One
compiled program per step holds the forward pass, the backward pass and the AdamW update; the
model's parameters, AdamW's moments and beta powers, the learning rate and the dropout seed are
arrays the program updates in place, so nothing retraces.

Run: `python examples/gpt.py [--steps N] [--backend numpy] [--plot plan.png]`. It prints the
unigram entropy of the text (the loss of a model that only knows character frequencies); the
loss falls below it within the run, and a few generated characters show what the model learned.

`--size gpt2-small` builds GPT-2 small's shape instead (12 layers, width 768, 12 heads, context
256, batch 4; the vocabulary stays this text's characters): it plans the step (`lower()`,
timed), prints the default plan's peak, then runs `--steps` steps (default 2) of the step
compiled with `--budget` (bytes or "600MiB"; default: the default plan) and their times, at
the warm-up's rates for that width (`peak_lr`).
"""
import argparse
import math
import random
import time
from dataclasses import dataclass

import numpy as np

import compiler as cc
import compiler.nn as nn
import compiler.nn.functional as F

BATCH, CONTEXT, DIM, HEADS, LAYERS = 16, 32, 48, 4, 2
LR = 3e-3        # AdamW's peak rate at the example's width DIM (see `peak_lr`)
WARMUP = 20      # steps of LinearWarmup, from a 20th of the peak rate to the peak


@dataclass(frozen=True)
class Size:
    batch: int
    context: int
    dim: int
    heads: int
    layers: int


SIZES = {"small": Size(BATCH, CONTEXT, DIM, HEADS, LAYERS),   # the example's own
         "gpt2-small": Size(4, 256, 768, 12, 12)}             # GPT-2 small's shape

SUBJECTS = ["the cat", "a dog", "the bird", "my friend", "the old man", "a small child"]
VERBS = ["sees", "likes", "finds", "follows", "hears", "draws"]
OBJECTS = ["the ball", "a red box", "the green tree", "a dog", "the cat", "some water"]
ENDINGS = ["", "", " today", " again", " at night", " in the park"]


def grammar_text(n_chars=20_000, seed=0):
    """Sentences of a tiny grammar: subject verb object [ending]."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_chars:
        s = (f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
             f"{rng.choice(ENDINGS)}. ")
        out.append(s)
        size += len(s)
    return "".join(out)[:n_chars]


TEXT = grammar_text()
VOCAB = sorted(set(TEXT))
ENCODE = {c: i for i, c in enumerate(VOCAB)}
DATA = np.array([ENCODE[c] for c in TEXT], np.int64)


def unigram_entropy(data=DATA) -> float:
    """Entropy of the character frequencies, in nats (the unit of cross_entropy)."""
    p = np.bincount(data) / len(data)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _normal(std):
    # GPT-2's initialisation (Paddle's default for Linear is XavierUniform)
    return nn.ParamAttr(initializer=nn.initializer.Normal(0.0, std))


class Block(nn.Layer):
    """Pre-norm: x + attention(ln1(x)), then x + mlp(ln2(x)); no biases in the projections."""

    def __init__(self, dim=DIM, heads=HEADS):
        super().__init__()
        self.dim, self.heads = dim, heads
        out_std = 0.02 / math.sqrt(2)    # the residual projections, scaled for 2 sums
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, weight_attr=_normal(0.02), bias_attr=False)
        self.proj = nn.Linear(dim, dim, weight_attr=_normal(out_std), bias_attr=False)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim, weight_attr=_normal(0.02), bias_attr=False)
        self.fc2 = nn.Linear(4 * dim, dim, weight_attr=_normal(out_std), bias_attr=False)

    def forward(self, x):
        b, t, dim = x.shape[0], x.shape[1], self.dim
        q, k, v = (a.reshape([b, t, self.heads, dim // self.heads])
                   for a in self.qkv(self.ln1(x)).split(3, -1))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.reshape([b, t, dim]))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Layer):
    def __init__(self, size: Size = SIZES["small"]):
        super().__init__()
        self.wte = nn.Embedding(len(VOCAB), size.dim, weight_attr=_normal(0.02))
        self.wpe = nn.Embedding(size.context, size.dim, weight_attr=_normal(0.02))
        self.drop = nn.Dropout(0.1)     # training mode only; a new mask each step
        self.blocks = nn.LayerList([Block(size.dim, size.heads) for _ in range(size.layers)])
        self.ln_f = nn.LayerNorm(size.dim)
        self.head = nn.Linear(size.dim, len(VOCAB), weight_attr=_normal(0.02),
                              bias_attr=False)

    def forward(self, ids):
        """Logits [B, T, V]."""
        x = self.drop(self.wte(ids) + self.wpe(cc.arange(ids.shape[1])))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _size(size) -> Size:
    return SIZES[size] if isinstance(size, str) else size


def peak_lr(size="small") -> float:
    """AdamW's peak rate for this width: LR at DIM, times DIM / width.

    Adam moves every weight by about the rate whatever its gradient's size (its first update
    is rate * sign(g)), all of a Linear's fan-in the same way, so the change of a unit's
    output grows with the width: the same change at width n needs a rate ~1/n (the width
    rule for Adam's hidden weights in Yang et al., "Tensor Programs V", 2022).

    At GPT-2 small's shape that is 1.9e-4, the warm-up starting at 9.4e-6: 25 steps took the
    loss from 3.26 to 2.07 (one rise, 2.33 to 3.01 at 1.3e-4 to 1.4e-4, undone in a step).
    LR itself there (the warm-up's 1.5e-4 first) raised the loss on the second step (3.26 to
    4.53), in this compiler and in PyTorch alike from the same weights and batches
    (tests/examples/test_gpt_vs_torch.py compares the two); at a constant rate from the same
    start the second step rose at 3e-5 and above and fell at 1.5e-5 and below. GPT-2 small's
    usual peak (6e-4, with batches of 0.5M tokens and a warm-up from 0 over hundreds of
    steps) is for batches 500 times this one's (1,024 tokens)."""
    return LR * (DIM / _size(size).dim)


def make_model(seed=0, size="small"):
    """The model, its AdamW and the warm-up schedule (stepped after each step), seeded."""
    nn.initializer.seed(seed)
    model = GPT(_size(size))
    peak = peak_lr(size)
    sched = cc.optimizer.lr.LinearWarmup(peak, warmup_steps=WARMUP, start_lr=peak / 20,
                                         end_lr=peak)
    opt = cc.optimizer.AdamW(learning_rate=sched, parameters=model.parameters(),
                             weight_decay=0.01)
    return model, opt, sched


# wte, wpe; per block 2 LayerNorms (weight, bias) and 4 weights; ln_f's weight, bias; head
N_PARAMS = 2 + 8 * LAYERS + 3


def train_step_for(model, opt, amp=None, scaler=None):
    """`amp`: "bfloat16" or "float16", Paddle's AMP O1 (matmuls in 16 bits, softmax,
    layer_norm and the loss in float32; the parameters stay float32); `scaler`: a
    cc.amp.GradScaler (float16 needs one: its gradients underflow without it)."""
    def train_step(ids, targets):
        with cc.amp.auto_cast(enable=amp is not None, dtype=amp or "float16"):
            logits = model(ids)
            loss = F.cross_entropy(logits.reshape([-1, len(VOCAB)]), targets.reshape([-1]))
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.minimize(opt, loss)   # skipped (weights kept) when a gradient overflows
        opt.clear_grad()
        return loss
    return train_step


def batch(rng, size="small"):
    size = _size(size)
    starts = rng.integers(0, len(DATA) - size.context - 1, size.batch)
    ids = np.stack([DATA[s:s + size.context] for s in starts])
    return ids, np.stack([DATA[s + 1:s + size.context + 1] for s in starts])


def example_inputs(size="small"):
    return batch(np.random.default_rng(0), size)


def build_program(backend="numpy", inplace="auto", size="small", **options):
    # The plan `python -m compiler plan` and the tests study: the reference pipeline's by
    # default (unfused, every op as written); training runs on the default backend, cpu.
    model, opt, _ = make_model(size=size)
    return cc.compile(train_step_for(model, opt), backend=backend, inplace=inplace,
                      **options).lower(*example_inputs(size))


def generate(model, prompt, n, backend="cpu"):
    """`n` characters after `prompt` (at least CONTEXT long), greedy, in eval mode."""
    model.eval()
    fn = cc.compile(lambda ids: model(ids)[:, -1], backend=backend)
    out = [ENCODE[c] for c in prompt]
    for _ in range(n):
        ids = np.array([out[-CONTEXT:]], np.int64)
        out.append(int(np.argmax(fn(ids)[0])))
    return "".join(VOCAB[i] for i in out[len(prompt):])


def train(steps=600, backend="cpu", log=print, amp=None, overflow_at=None, on_step=None):
    """(the model, the losses). `amp`: "bfloat16" or "float16" mixed precision (float16 with
    a GradScaler). `overflow_at`: a step whose gradients are made to overflow (the scaler's
    scale raised to 2**24 before it), to show the scaler skipping it. `on_step(i, model,
    opt, scaler)`: called after each step."""
    model, opt, sched = make_model()
    scaler = cc.amp.GradScaler(init_loss_scaling=2.0 ** 12, incr_every_n_steps=100) \
        if amp == "float16" else None
    step = cc.compile(train_step_for(model, opt, amp, scaler), backend=backend)
    rng = np.random.default_rng(1)
    losses = []
    start = time.perf_counter()
    model.train()
    for i in range(steps):
        ids, targets = batch(rng)
        if i == overflow_at and scaler is not None:
            scaler.load_state_dict({**scaler.state_dict(), "scale": 2.0 ** 24})
        loss = float(step(ids, targets))
        sched.step()          # the rate is an array the program reads: no retrace
        losses.append(loss)
        if on_step is not None:
            on_step(i, model, opt, scaler)
        if log and scaler is not None and scaler.found_inf():
            log(f"step {i:4d}  gradients overflowed float16: update skipped, loss scale "
                f"now {scaler.get_loss_scaling():g}")
        if log and (i % 50 == 0 or i == steps - 1):
            log(f"step {i:4d}  loss {loss:.3f}  ({time.perf_counter() - start:.1f} s)")
    return model, losses


def loss_curves(steps, backend, amp, path=None, window=20):
    """Trains in float32 and in `amp` from the same start on the same batches; returns both
    loss lists and the largest gap between their running means over `window` steps. Writes
    the curves to `path` (PNG with matplotlib, else a text table)."""
    _, ref = train(steps, backend, log=None)
    _, mixed = train(steps, backend, log=None, amp=amp)

    def smooth(xs):
        return np.convolve(xs, np.ones(window) / window, mode="valid")
    gap = float(np.max(np.abs(smooth(ref) - smooth(mixed))))
    if path:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            plt = None
        if plt is not None and path.endswith(".png"):
            fig, ax = plt.subplots(figsize=(7, 4))
            ax.plot(ref, lw=0.8, alpha=0.5, label="float32")
            ax.plot(mixed, lw=0.8, alpha=0.5, label=f"{amp} AMP (O1)")
            xs = np.arange(window - 1, steps)
            ax.plot(xs, smooth(ref), lw=1.5, label=f"float32, mean of {window}")
            ax.plot(xs, smooth(mixed), lw=1.5, label=f"{amp}, mean of {window}")
            ax.set_xlabel("step")
            ax.set_ylabel("cross-entropy (nats)")
            ax.set_title(f"gpt.py: float32 vs {amp} AMP (largest gap of the means {gap:.2g})")
            ax.legend()
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            plt.close(fig)
        else:
            with open(path, "w") as f:
                f.write(f"step\tfloat32\t{amp}\n")
                f.writelines(f"{i}\t{a:.5f}\t{b:.5f}\n" for i, (a, b) in
                             enumerate(zip(ref, mixed)))
    return ref, mixed, gap


def big_step(size="gpt2-small", backend="cpu", memory_budget=None, steps=2, log=print):
    """Plan and run the step of a bigger model: {"lower_s": the default plan's lower() time,
    "default_peak": its peak beyond the inputs, "peak": the run plan's (the budget's, when
    given), "step_s": each step's time, "losses": ..., "lrs": the rate of each step}. The
    rate is the warm-up's of `peak_lr(size)`, stepped after each step as in `train`."""
    model, opt, sched = make_model(size=size)
    step = train_step_for(model, opt)
    ids, targets = example_inputs(size)
    start, cpu = time.perf_counter(), time.process_time()
    default = cc.compile(step, backend=backend).lower(ids, targets)
    out = {"lower_s": time.perf_counter() - start, "lower_cpu_s": time.process_time() - cpu,
           "default_peak": default.plan.peak_bytes - default.plan.input_bytes}
    log(f"{size}: {sum(p.size for p in model.parameters()):,} parameters; lower() "
        f"{out['lower_s']:.1f} s ({out['lower_cpu_s']:.1f} s of CPU); default plan "
        f"{out['default_peak']:,} B beyond the inputs")
    prog = default
    if memory_budget is not None:
        start, cpu = time.perf_counter(), time.process_time()
        prog = cc.compile(step, backend=backend, memory_budget=memory_budget).lower(ids, targets)
        log(f"budget {memory_budget}: lower() {time.perf_counter() - start:.1f} s "
            f"({time.process_time() - cpu:.1f} s of CPU)")
    out["peak"] = prog.plan.peak_bytes - prog.plan.input_bytes
    log(f"running plan: {out['peak']:,} B beyond the inputs")
    out["step_s"], out["step_cpu_s"], out["losses"], out["lrs"] = [], [], [], []
    rng = np.random.default_rng(1)
    model.train()
    for i in range(steps):
        ids, targets = batch(rng, size)
        out["lrs"].append(sched())
        start, cpu = time.perf_counter(), time.process_time()
        out["losses"].append(float(prog(ids, targets)))
        out["step_s"].append(time.perf_counter() - start)
        out["step_cpu_s"].append(time.process_time() - cpu)  # (all of its threads)
        sched.step()           # the warm-up goes on, as in train()
        log(f"step {i}: loss {out['losses'][-1]:.3f} at rate {out['lrs'][-1]:.3g} "
            f"({out['step_s'][-1]:.1f} s, {out['step_cpu_s'][-1]:.1f} s of CPU)")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None,
                    help="steps to train (default: 600; 2 with --size gpt2-small)")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "numpy", "gpu"),
                    help="where the steps run (default: cpu, the compiler's default)")
    ap.add_argument("--plot", help="save the step's memory-over-time picture here")
    ap.add_argument("--amp", choices=("bfloat16", "float16"),
                    help="mixed precision (Paddle's AMP O1; float16 with a GradScaler)")
    ap.add_argument("--overflow-at", type=int, metavar="STEP",
                    help="with --amp float16: make that step's gradients overflow (the "
                    "scaler skips its update and lowers the scale)")
    ap.add_argument("--curve", metavar="PATH", help="with --amp: also train in float32 and "
                    "write both loss curves here (.png with matplotlib, else a text table)")
    ap.add_argument("--size", default="small", choices=sorted(SIZES),
                    help="the model's shape (gpt2-small: 12 layers, width 768, 12 heads, "
                         "context 256, batch 4): plan it and time a few steps")
    ap.add_argument("--budget", help="with --size gpt2-small: run the plan of this "
                                     "memory_budget (bytes, or a string such as '600MiB')")
    args = ap.parse_args(argv)
    if args.size != "small":
        budget = int(args.budget) if args.budget and args.budget.isdigit() else args.budget
        return big_step(args.size, args.backend, budget,
                        2 if args.steps is None else args.steps)
    if args.steps is None:
        args.steps = 600
    h = unigram_entropy()
    print(f"text: {len(TEXT)} characters, {len(VOCAB)} symbols; unigram entropy {h:.3f} nats")
    if args.amp and args.curve:
        gap = loss_curves(args.steps, args.backend, args.amp, args.curve)[2]
        print(f"float32 vs {args.amp}: the running means (20 steps) differ by at most "
              f"{gap:.3f} nats; curves in {args.curve}")
    model, losses = train(args.steps, args.backend, amp=args.amp,
                          overflow_at=args.overflow_at)
    final = float(np.mean(losses[-20:]))
    print(f"mean loss of the last 20 steps {final:.3f} "
          f"({'below' if final < h else 'NOT below'} the unigram entropy {h:.3f})")
    prompt = TEXT[:CONTEXT]
    print(f"generated after {prompt!r}: {generate(model, prompt, 60, args.backend)!r}")
    prog = build_program(args.backend)
    plan = prog.plan
    print(f"plan: peak {plan.peak_bytes} B, lower bound {plan.lower_bound_bytes} B, "
          f"no-inplace {plan.no_inplace_peak_bytes} B, naive {plan.naive_bytes} B")
    updates = [d for d in plan.decisions if d.requested and d.phase == "update"]
    print(f"AdamW: {sum(d.inplace for d in updates)}/{len(updates)} requested updates in place")
    if args.plot:
        plan.plot(args.plot)
    return final, h


if __name__ == "__main__":
    main()
