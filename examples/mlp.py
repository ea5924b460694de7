"""MLP training step: 784 -> 1024 -> 10, batch 256, relu_, cross_entropy, SGD.

`MLP` is an `nn.Layer` (two `nn.Linear`) trained by `cc.optimizer.SGD(parameters=
net.parameters())`: forward, backward and the update are one compiled program that writes
into the layer's own weight arrays. `train_step` is the same step over loose arrays with the
update written by hand (what the plan tests, `python -m compiler plan mlp` and the benchmarks
study; the same losses bit for bit: tests/examples/test_examples.py). Both plans peak at
5.17 MiB on numpy and 4.95 MiB on cpu: `w -= 0.1 * (a @ b)` and SGD's `w -= g * lr` (its rate
a 0-d array) fold into one gemm writing into `w` (passes/gemm_accumulate.py), and on cpu relu's
mask is kept as bits (passes/recompute.py). Run: `python examples/mlp.py [--backend numpy]`.
"""
import numpy as np

import compiler as cc
import compiler.nn as nn
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


class MLP(nn.Layer):
    def __init__(self, sizes=(IN, HIDDEN, OUT)):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(sizes[0], sizes[1]), nn.Linear(sizes[1], sizes[2])

    def forward(self, x):
        return self.fc2(F.relu_(self.fc1(x)))     # user-requested inplace


def make_net(seed=0):
    """The layer with example_inputs()'s weights, and its SGD."""
    net = MLP()
    _, _, w1, b1, w2, b2 = example_inputs(seed)
    net.set_state_dict({"fc1.weight": w1, "fc1.bias": b1, "fc2.weight": w2, "fc2.bias": b2})
    return net, cc.optimizer.SGD(learning_rate=LR, parameters=net.parameters())


def layer_train_step_for(net, opt):
    def layer_train_step(x, labels):
        loss = F.cross_entropy(net(x), labels)
        loss.backward()
        opt.step()          # in place in the layer's arrays
        opt.clear_grad()
        return loss
    return layer_train_step


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


def train(steps=300, backend="cpu", log=print):
    """`steps` SGD steps of the layer on fresh batches of separable data; (losses, held-out
    accuracy)."""
    net, opt = make_net()
    step = cc.compile(layer_train_step_for(net, opt), backend=backend)
    losses = []
    for i in range(steps):
        x, labels = separable_data(BATCH, seed=i + 1)
        losses.append(float(step(x, labels)))
        if log and (i % 50 == 0 or i == steps - 1):
            log(f"step {i:4d}: loss {losses[-1]:.4f}")
    x, labels = separable_data(1000, seed=0)
    accuracy = cc.compile(lambda x, labels: (net(x).argmax(axis=1) == labels)
                          .cast("float32").mean(), backend=backend)
    return losses, float(accuracy(x, labels))


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
