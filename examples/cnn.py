"""A small CNN trained on synthetic 32x32 images: conv2d, relu_, max_pool2d, linear, SGD with
momentum (cc.optimizer.SGD, the velocities in the caller's arrays, the learning rate a 0-d
array argument).

The task: which of four quadrants holds a bright blob, on noisy images. Run:
`python examples/cnn.py [--steps N] [--plot plan.png]`.
"""
import argparse
import time

import numpy as np

import compiler as cc
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


def init_params(seed=0):
    rng = np.random.default_rng(seed)

    def w(*shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    return [w(8, 1, 3, 3, fan_in=9), np.zeros(8, np.float32),
            w(16, 8, 3, 3, fan_in=72), np.zeros(16, np.float32),
            w(16 * 8 * 8, CLASSES, fan_in=16 * 8 * 8), np.zeros(CLASSES, np.float32)]


def logits(x, c1, b1, c2, b2, wl, bl):
    h = F.max_pool2d(F.relu_(F.conv2d(x, c1, b1, padding=1)), 2)      # [B, 8, 16, 16]
    h = F.max_pool2d(F.relu_(F.conv2d(h, c2, b2, padding=1)), 2)      # [B, 16, 8, 8]
    return F.linear(h.flatten(1), wl, bl)


def train_step(x, labels, lr, *state):
    params, velocity = state[:6], state[6:]
    for p in params:
        p.stop_gradient = False
    opt = cc.optimizer.SGD(list(params), learning_rate=lr, momentum=MOMENTUM,
                           velocity=list(velocity))
    loss = F.cross_entropy(logits(x, *params), labels)
    loss.backward()
    opt.step()
    opt.clear_grad()
    return loss


def accuracy(x, labels, *params):
    return (logits(x, *params).argmax(axis=1) == labels).cast("float32").mean()


def example_inputs():
    params = init_params()
    x, labels = images(np.random.default_rng(0))
    return (x, labels, np.array(LR, np.float32), *params, *cc.optimizer.SGD.init_state(params))


def build_program(backend="numpy", inplace="auto"):
    # The plan `python -m compiler plan` and the tests study: the reference pipeline's by
    # default (unfused, every op as written); training runs on the default backend, cpu.
    return cc.compile(train_step, backend=backend, inplace=inplace).lower(*example_inputs())


def train(steps=100, backend="cpu", log=print):
    params = init_params()
    velocity = cc.optimizer.SGD.init_state(params)
    step = cc.compile(train_step, backend=backend)
    rng = np.random.default_rng(1)
    losses, start = [], time.perf_counter()
    for i in range(steps):
        x, labels = images(rng)
        losses.append(float(step(x, labels, np.array(LR, np.float32), *params, *velocity)))
        if log and (i % 25 == 0 or i == steps - 1):
            log(f"step {i:4d}  loss {losses[-1]:.3f}  ({time.perf_counter() - start:.1f} s)")
    x, labels = images(np.random.default_rng(99), 256)
    acc = float(cc.compile(accuracy, backend=backend)(x, labels, *params))
    return params, losses, acc


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
