"""MLP training step: 784 -> 1024 -> 10, batch 256, relu_, cross_entropy, SGD under no_grad.

Forward, backward and the parameter update are one compiled program; the update writes into
the caller's weight arrays. Run: `python examples/mlp.py` or `python -m compiler plan mlp`.
"""
import numpy as np

import compiler as cc
import compiler.nn.functional as F

BATCH, IN, HIDDEN, OUT = 256, 784, 1024, 10
LR = 0.1


def train_step(x, labels, w1, b1, w2, b2):
    for p in (w1, b1, w2, b2):
        p.stop_gradient = False
    h = F.relu_(x @ w1 + b1)                  # user-requested inplace
    loss = F.cross_entropy(h @ w2 + b2, labels)
    loss.backward()
    with cc.no_grad():
        for p in (w1, b1, w2, b2):
            p.subtract_(LR * p.grad)          # in place in the caller's arrays
    return loss


def example_inputs(seed=0, batch=BATCH, sizes=(IN, HIDDEN, OUT)):
    rng = np.random.default_rng(seed)
    n_in, n_hidden, n_out = sizes
    x = rng.standard_normal((batch, n_in)).astype(np.float32)
    labels = rng.integers(0, n_out, size=batch).astype(np.int64)
    w1 = (rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in)).astype(np.float32)
    b1 = np.zeros(n_hidden, np.float32)
    w2 = (rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden)).astype(np.float32)
    b2 = np.zeros(n_out, np.float32)
    return x, labels, w1, b1, w2, b2


def build_program(backend="numpy", inplace="auto"):
    return cc.compile(train_step, backend=backend, inplace=inplace).lower(*example_inputs())


if __name__ == "__main__":
    step = cc.compile(train_step, backend="numpy")
    args = example_inputs()
    for i in range(3):
        print(f"step {i}: loss {float(step(*args)):.4f}")
    print(step.lower(*args).plan.report())
