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
    # The plan `python -m compiler plan` and the tests study: the reference pipeline's by
    # default (unfused, every op as written); training runs on the default backend, cpu.
    return cc.compile(train_step, backend=backend, inplace=inplace).lower(*example_inputs())


def separable_data(n, seed=0):
    """MNIST-shaped synthetic data that a linear layer could separate: each class is a random
    784-dim prototype; an input is its class's prototype plus noise."""
    rng = np.random.default_rng(seed)
    protos = np.random.default_rng(1234).standard_normal((OUT, IN)).astype(np.float32)
    labels = rng.integers(0, OUT, size=n).astype(np.int64)
    x = protos[labels] * 0.3 + rng.standard_normal((n, IN)).astype(np.float32)
    return x, labels


def accuracy(x, labels, w1, b1, w2, b2):
    pred = (F.relu(x @ w1 + b1) @ w2 + b2).argmax(axis=1)
    return (pred == labels).cast("float32").mean()


def train(steps=300, backend="cpu", log=print):
    """`steps` SGD steps on fresh batches of separable data; (losses, held-out accuracy)."""
    _, _, w1, b1, w2, b2 = example_inputs()
    step = cc.compile(train_step, backend=backend)
    losses = []
    for i in range(steps):
        x, labels = separable_data(BATCH, seed=i + 1)
        losses.append(float(step(x, labels, w1, b1, w2, b2)))
        if log and (i % 50 == 0 or i == steps - 1):
            log(f"step {i:4d}: loss {losses[-1]:.4f}")
    x, labels = separable_data(1000, seed=0)
    return losses, float(cc.compile(accuracy, backend=backend)(x, labels, w1, b1, w2, b2))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Train the MLP on separable synthetic data.")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "numpy", "gpu"),
                    help="where the steps run (default: cpu, the compiler's default)")
    ap.add_argument("--plot", help="save the step's memory-over-time picture here")
    args = ap.parse_args()
    losses, acc = train(args.steps, args.backend)
    print(f"loss {losses[0]:.3f} -> {np.mean(losses[-10:]):.3f}; held-out accuracy {acc:.1%} "
          f"(chance {1 / OUT:.0%})")
    plan = build_program(args.backend).plan
    print(plan.summary())
    if args.plot:
        plan.plot(args.plot)
