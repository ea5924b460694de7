"""A small CNN trained on synthetic 32x32 images, written as Paddle writes it: an `nn.Layer`
with Conv2D, BatchNorm2D, relu_, max_pool2d and Linear, trained by `cc.optimizer.Momentum(
parameters=net.parameters())`.

One compiled program per step holds the forward pass, the backward pass, the momentum update
of the net's arrays and BatchNorm2D's running statistics, all updated in place. The task: which
of four quadrants holds a bright blob, on noisy images. Run:
`python examples/cnn.py [--steps N] [--backend numpy] [--plot plan.png]`.
"""
import argparse
import time

import numpy as np

import compiler as cc
import compiler.nn as nn
import compiler.nn.functional as F

BATCH, SIZE, CLASSES = 32, 32, 4
LR, MOMENTUM = 0.01, 0.9


def images(rng, n=BATCH):
    """Noise plus a 6x6 blob in the labelled quadrant."""
    labels = rng.integers(0, CLASSES, n)
    x = rng.standard_normal((n, 1, SIZE, SIZE)).astype(np.float32)
    for i, c in enumerate(labels):
        r0 = (c // 2) * 16 + rng.integers(2, 8)
        c0 = (c % 2) * 16 + rng.integers(2, 8)
        x[i, 0, r0:r0 + 6, c0:c0 + 6] += 1.5
    return x, labels.astype(np.int64)


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2D(1, 8, 3, padding=1), nn.BatchNorm2D(8)
        self.conv2, self.bn2 = nn.Conv2D(8, 16, 3, padding=1), nn.BatchNorm2D(16)
        self.fc = nn.Linear(16 * 8 * 8, CLASSES)

    def forward(self, x):
        h = F.max_pool2d(F.relu_(self.bn1(self.conv1(x))), 2)     # [B, 8, 16, 16]
        h = F.max_pool2d(F.relu_(self.bn2(self.conv2(h))), 2)     # [B, 16, 8, 8]
        return self.fc(h.flatten(1))


def make_net(seed=0):
    """The net and its optimizer, initialised as Paddle does (seeded)."""
    nn.initializer.seed(seed)
    net = Net()
    return net, cc.optimizer.Momentum(learning_rate=LR, momentum=MOMENTUM,
                                      parameters=net.parameters())


def train_step_for(net, opt):
    def train_step(x, labels):
        loss = F.cross_entropy(net(x), labels)
        loss.backward()
        opt.step()          # velocities and parameters updated in place
        opt.clear_grad()
        return loss
    return train_step


def accuracy_for(net):
    def accuracy(x, labels):
        return (net(x).argmax(axis=1) == labels).cast("float32").mean()
    return accuracy


def example_inputs():
    return images(np.random.default_rng(0))


def build_program(backend="numpy", inplace="auto"):
    # The plan `python -m compiler plan` and the tests study: the reference pipeline's by
    # default (unfused, every op as written); training runs on the default backend, cpu.
    return cc.compile(train_step_for(*make_net()), backend=backend,
                      inplace=inplace).lower(*example_inputs())


def train(steps=100, backend="cpu", log=print):
    """(the net, the losses, held-out accuracy in eval mode)."""
    net, opt = make_net()
    step = cc.compile(train_step_for(net, opt), backend=backend)
    rng = np.random.default_rng(1)
    losses, start = [], time.perf_counter()
    net.train()
    for i in range(steps):
        x, labels = images(rng)
        losses.append(float(step(x, labels)))
        if log and (i % 25 == 0 or i == steps - 1):
            log(f"step {i:4d}  loss {losses[-1]:.3f}  ({time.perf_counter() - start:.1f} s)")
    net.eval()    # BatchNorm2D normalises with its running statistics
    x, labels = images(np.random.default_rng(99), 256)
    acc = float(cc.compile(accuracy_for(net), backend=backend)(x, labels))
    return net, losses, acc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "numpy", "gpu"),
                    help="where the steps run (default: cpu, the compiler's default)")
    ap.add_argument("--plot", help="save the step's memory-over-time picture here")
    args = ap.parse_args(argv)
    _, losses, acc = train(args.steps, args.backend)
    print(f"loss {np.mean(losses[:10]):.3f} -> {np.mean(losses[-10:]):.3f}; held-out accuracy "
          f"{acc:.1%} (chance 25%)")
    plan = build_program(args.backend).plan
    print(f"plan: peak {plan.peak_bytes} B, lower bound {plan.lower_bound_bytes} B, "
          f"no-inplace {plan.no_inplace_peak_bytes} B, naive {plan.naive_bytes} B")
    if args.plot:
        plan.plot(args.plot)
    return losses, acc


if __name__ == "__main__":
    main()
