"""A character-level GPT trained on text this program generates from a small grammar.

Embedding + learned positions, 2 pre-norm blocks (causal scaled-dot-product attention, a GELU
MLP), AdamW. One compiled program per step holds the forward pass, the backward pass and the
AdamW update; the parameters and AdamW's moments are the caller's arrays, updated in place;
the learning rate, step count and dropout seed are 0-d array arguments, so nothing retraces.

Run: `python examples/gpt.py [--steps N] [--plot plan.png]`. It prints the unigram entropy of
the text (the loss of a model that only knows character frequencies); the loss falls below it
within the run, and a few generated characters show what the model learned.
"""
import argparse
import math
import random
import time

import numpy as np

import compiler as cc
import compiler.nn.functional as F

BATCH, CONTEXT, DIM, HEADS, LAYERS = 16, 32, 48, 4, 2
LR = 3e-3

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


def init_params(seed=0):
    """[(name, array)] in the order the step takes them."""
    rng = np.random.default_rng(seed)
    v, d = len(VOCAB), DIM

    def w(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    params = [("wte", w(v, d)), ("wpe", w(CONTEXT, d))]
    for i in range(LAYERS):
        params += [(f"ln1_w{i}", np.ones(d, np.float32)), (f"ln1_b{i}", np.zeros(d, np.float32)),
                   (f"wqkv{i}", w(d, 3 * d)), (f"wo{i}", w(d, d, scale=0.02 / math.sqrt(2))),
                   (f"ln2_w{i}", np.ones(d, np.float32)), (f"ln2_b{i}", np.zeros(d, np.float32)),
                   (f"w1_{i}", w(d, 4 * d)), (f"w2_{i}", w(4 * d, d, scale=0.02 / math.sqrt(2)))]
    params += [("lnf_w", np.ones(d, np.float32)), ("lnf_b", np.zeros(d, np.float32)),
               ("head", w(d, v))]
    return params


N_PARAMS = len(init_params())


def forward(ids, params, seed=None):
    """Logits [B, T, V]; dropout on the embeddings when a seed is given (training)."""
    wte, wpe = params[0], params[1]
    b, t = ids.shape
    x = F.embedding(ids, wte) + wpe[:t]
    if seed is not None:
        x = F.dropout(x, 0.1, seed=seed)
    for i in range(LAYERS):
        ln1_w, ln1_b, wqkv, wo, ln2_w, ln2_b, w1, w2 = params[2 + 8 * i: 10 + 8 * i]
        h = F.layer_norm(x, DIM, ln1_w, ln1_b)
        q, k, v = (a.reshape([b, t, HEADS, DIM // HEADS]) for a in (h @ wqkv).split(3, -1))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + att.reshape([b, t, DIM]) @ wo
        h = F.layer_norm(x, DIM, ln2_w, ln2_b)
        x = x + F.gelu(h @ w1) @ w2
    lnf_w, lnf_b, head = params[-3:]
    return F.layer_norm(x, DIM, lnf_w, lnf_b) @ head


def train_step(ids, targets, lr, step, seed, *state):
    """state: the parameters, then AdamW's first moments, then its second moments."""
    params, m1, m2 = state[:N_PARAMS], state[N_PARAMS:2 * N_PARAMS], state[2 * N_PARAMS:]
    for p in params:
        p.stop_gradient = False
    opt = cc.optimizer.AdamW(list(params), learning_rate=lr, weight_decay=0.01,
                             moment1=list(m1), moment2=list(m2), step=step)
    logits = forward(ids, params, seed)
    loss = F.cross_entropy(logits.reshape([-1, len(VOCAB)]), targets.reshape([-1]))
    loss.backward()
    opt.step()
    opt.clear_grad()
    return loss


def predict(ids, *params):
    return forward(ids, params)[:, -1]


def batch(rng):
    starts = rng.integers(0, len(DATA) - CONTEXT - 1, BATCH)
    ids = np.stack([DATA[s:s + CONTEXT] for s in starts])
    return ids, np.stack([DATA[s + 1:s + CONTEXT + 1] for s in starts])


def example_inputs():
    params = [a for _, a in init_params()]
    m1, m2, t = cc.optimizer.AdamW.init_state(params)
    ids, targets = batch(np.random.default_rng(0))
    return (ids, targets, np.array(LR, np.float32), t, np.array(0, np.uint64),
            *params, *m1, *m2)


def build_program(backend="numpy", inplace="auto"):
    # The plan `python -m compiler plan` and the tests study: the reference pipeline's by
    # default (unfused, every op as written); training runs on the default backend, cpu.
    return cc.compile(train_step, backend=backend, inplace=inplace).lower(*example_inputs())


def generate(params, prompt, n, backend="cpu"):
    """`n` characters after `prompt` (at least CONTEXT long), greedy."""
    fn = cc.compile(predict, backend=backend)
    out = [ENCODE[c] for c in prompt]
    for _ in range(n):
        ids = np.array([out[-CONTEXT:]], np.int64)
        out.append(int(np.argmax(fn(ids, *params)[0])))
    return "".join(VOCAB[i] for i in out[len(prompt):])


def train(steps=600, backend="cpu", log=print):
    params = [a for _, a in init_params()]
    m1, m2, t = cc.optimizer.AdamW.init_state(params)
    step = cc.compile(train_step, backend=backend)
    rng = np.random.default_rng(1)
    losses = []
    start = time.perf_counter()
    for i in range(steps):
        ids, targets = batch(rng)
        lr = np.array(LR * min(1.0, (i + 1) / 20), np.float32)  # warm-up: no retrace
        loss = float(step(ids, targets, lr, t, np.array(i, np.uint64), *params, *m1, *m2))
        losses.append(loss)
        if log and (i % 50 == 0 or i == steps - 1):
            log(f"step {i:4d}  loss {loss:.3f}  ({time.perf_counter() - start:.1f} s)")
    return params, losses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "numpy", "gpu"),
                    help="where the steps run (default: cpu, the compiler's default)")
    ap.add_argument("--plot", help="save the step's memory-over-time picture here")
    args = ap.parse_args(argv)
    h = unigram_entropy()
    print(f"text: {len(TEXT)} characters, {len(VOCAB)} symbols; unigram entropy {h:.3f} nats")
    params, losses = train(args.steps, args.backend)
    final = float(np.mean(losses[-20:]))
    print(f"mean loss of the last 20 steps {final:.3f} "
          f"({'below' if final < h else 'NOT below'} the unigram entropy {h:.3f})")
    prompt = TEXT[:CONTEXT]
    print(f"generated after {prompt!r}: {generate(params, prompt, 60, args.backend)!r}")
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
