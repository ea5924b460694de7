"""A pre-norm transformer block training step: batch 8, seq 128, d_model 256, 4 heads,
MLP 1024, gelu, layer_norm, softmax attention; forward + backward + SGD update in one program.

Run: `python examples/transformer_block.py` or `python -m compiler plan transformer_block`.
"""
import math

import numpy as np

import compiler as cc
import compiler.nn.functional as F

BATCH, SEQ, D_MODEL, HEADS, D_MLP = 8, 128, 256, 4, 1024
LR = 0.01
PARAMS = ("ln1_w", "ln1_b", "wq", "wk", "wv", "wo", "ln2_w", "ln2_b", "w_fc1", "b_fc1",
          "w_fc2", "b_fc2")


def train_step(x, target, ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1, w_fc2,
               b_fc2):
    params = (ln1_w, ln1_b, wq, wk, wv, wo, ln2_w, ln2_b, w_fc1, b_fc1, w_fc2, b_fc2)
    for p in params:
        p.stop_gradient = False
    b, t, d = x.shape
    hd = d // HEADS

    def heads(z):  # [b, t, d] -> [b, heads, t, hd]
        return z.reshape([b, t, HEADS, hd]).transpose([0, 2, 1, 3])

    h = F.layer_norm(x, d, ln1_w, ln1_b)
    q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
    scores = (q @ k.transpose([0, 1, 3, 2])).scale_(1.0 / math.sqrt(hd))
    attn = F.softmax(scores, axis=-1)
    o = (attn @ v).transpose([0, 2, 1, 3]).reshape([b, t, d])
    x1 = x + o @ wo
    m = F.gelu(F.linear(F.layer_norm(x1, d, ln2_w, ln2_b), w_fc1, b_fc1))
    y = x1 + F.linear(m, w_fc2, b_fc2)
    loss = F.mse_loss(y, target)
    loss.backward()
    with cc.no_grad():
        for p in params:
            p.subtract_(LR * p.grad)
    return loss


def example_inputs(seed=0, batch=BATCH, seq=SEQ, d_model=D_MODEL, d_mlp=D_MLP):
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    x = rng.standard_normal((batch, seq, d_model)).astype(np.float32)
    target = rng.standard_normal((batch, seq, d_model)).astype(np.float32)
    ones, zeros = np.ones(d_model, np.float32), np.zeros(d_model, np.float32)
    return (x, target, ones.copy(), zeros.copy(), w(d_model, d_model), w(d_model, d_model),
            w(d_model, d_model), w(d_model, d_model), ones.copy(), zeros.copy(),
            w(d_model, d_mlp), np.zeros(d_mlp, np.float32), w(d_mlp, d_model), zeros.copy())


def build_program(backend="numpy", inplace="auto"):
    # The plan `python -m compiler plan` and the tests study: the reference pipeline's by
    # default (unfused, every op as written); training runs on the default backend, cpu.
    return cc.compile(train_step, backend=backend, inplace=inplace).lower(*example_inputs())


# -- mixed precision (Paddle's AMP O2 in bfloat16) -------------------------------------------
def amp_train_step(x, target, *params):
    """`train_step` under `cc.amp.auto_cast(dtype="bfloat16", level="O2")`: every forward op
    computes in bfloat16 from 16-bit casts of the float32 parameters (the master weights,
    updated in place in float32 by the same SGD lines); the gradients come back to float32
    through the casts' backward."""
    with cc.amp.auto_cast(dtype="bfloat16", level="O2"):
        return train_step(x, target, *params)


def amp_inputs(seed=0, **sizes):
    """`example_inputs` with the data (x, target) in bfloat16, the parameters float32."""
    import ml_dtypes  # (here: the lines above are pinned by tests that read this file)
    x, target, *params = example_inputs(seed, **sizes)
    return (x.astype(ml_dtypes.bfloat16), target.astype(ml_dtypes.bfloat16), *params)


def build_amp_program(backend="numpy", inplace="auto", **sizes):
    return cc.compile(amp_train_step, backend=backend, inplace=inplace).lower(
        *amp_inputs(**sizes))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "numpy", "gpu"),
                    help="where the steps run (default: cpu, the compiler's default)")
    cli = ap.parse_args()
    step = cc.compile(train_step, backend=cli.backend)
    args = example_inputs()
    for i in range(cli.steps):
        print(f"step {i}: loss {float(step(*args)):.5f}")
    print(step.lower(*args).plan.report())
