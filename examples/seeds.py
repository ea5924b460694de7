"""The seed experiments from PaddlePaddle's articles on Inplace, as traced programs.

Each entry of SEEDS: (title, function, example arguments, numpy check of the result: a
function of the result and the arguments, true when the numbers are right). PLAN_CHECKS adds
checks of the memory plan for the experiments that are about memory. Run them all with
`python -m compiler demo`: it counts only the checks it ran, and names any experiment without
one; `python examples/seeds.py [--backend numpy]` runs the seeds alone and prints their table.
"""
import numpy as np

import compiler as cc
import compiler.nn.functional as F


def inplace_returns_same_object(x):
    y = x.scale_(2.0)
    assert y is x  # inplace ops share data *and* meta data
    return y


def view_write_reaches_base(x):
    b = x.reshape([4])
    b.add_(1.0)       # b is a view: x changes too
    return x, b


def transpose_inplace():
    x = cc.arange(12).reshape([3, 4])
    x.transpose_([1, 0])
    return x


def alias_sees_zero(x):
    y = x
    x.zero_()
    return y


def setitem(x):
    x[0] = 4.0
    return x


def add_sub_alpha(x, y):
    a = x * 1.0
    a.add_(y, alpha=1)          # 2 + 3 = 5
    x.subtract_(y, alpha=2)     # 2 - 2 * 3 = -4, written into the caller's x
    return a, x


def relu_inplace(x):
    return F.relu_(x)


def relu_out_of_place(x):
    return F.relu(x)


def hundred_adds_inplace(x):
    x = x * 1.0
    for _ in range(100):
        x.add_(1.0)
    return x


def hundred_adds_out_of_place(x):
    x = x * 1.0
    for _ in range(100):
        x = x + 1.0
    return x


def grad_scale_inplace(a):
    a.stop_gradient = False
    x = a.scale(2.0)
    y = x.scale_(2.0)   # scale's backward needs nothing: fine in place
    y.sum().backward()
    return y, a.grad


def grad_sin_inplace(a):
    a.stop_gradient = False
    x = cc.sin(a)
    y = x.sin_()        # sin's backward needs x: the compiler keeps the old value
    y.sum().backward()
    return y, a.grad


def grad_add_after_sin(x):
    x.stop_gradient = False
    y = cc.sin(x)
    y += 1.0
    (y ** 2).sum().backward()
    return x.grad


_r = np.random.default_rng(0)
_a = _r.standard_normal((2, 3)).astype(np.float32)
_a64 = _r.standard_normal((2, 3))
# The [1,64,512,512] float32 tensor of Paddle's relu example (64 MiB): negative and positive
# values, so that the check of relu's result means something.
_big = np.empty((1, 64, 512, 512), np.float32)
_big[..., 0::2] = -1.5
_big[..., 1::2] = 2.5

SEEDS = [
    ("y = x.scale_(2.0) returns x itself", inplace_returns_same_object,
     (np.ones((2, 2), np.float32),), lambda out, x: np.array_equal(out, np.full((2, 2), 2.0))),
    ("a write through a reshape view changes the base", view_write_reaches_base,
     (np.zeros((2, 2), np.float32),),
     lambda out, x: np.array_equal(out[0], np.ones((2, 2))) and np.array_equal(out[1], np.ones(4))),
    ("x.transpose_([1, 0]) on arange(12).reshape([3, 4])", transpose_inplace, (),
     lambda out: np.array_equal(out, np.arange(12).reshape(3, 4).T)),
    ("y = x; x.zero_() zeroes y", alias_sees_zero, (np.ones((2, 2), np.float32),),
     lambda out, x: np.array_equal(out, np.zeros((2, 2)))),
    ("x[0] = 4.0", setitem, (np.zeros((2, 2), np.float32),),
     lambda out, x: np.array_equal(out, [[4, 4], [0, 0]])),
    ("add_(y, alpha=1) and subtract_(y, alpha=2)", add_sub_alpha,
     (np.full((2, 2), 2.0, np.float32), np.full((2, 2), 3.0, np.float32)),
     lambda out, x, y: np.array_equal(out[0], np.full((2, 2), 5.0))
     and np.array_equal(out[1], np.full((2, 2), -4.0))),
    ("F.relu_ on [1,64,512,512] float32", relu_inplace, (_big,),
     lambda out, x: np.array_equal(out, np.maximum(x, 0))),
    ("F.relu on [1,64,512,512] float32", relu_out_of_place, (_big,),
     lambda out, x: np.array_equal(out, np.maximum(x, 0))),
    ("100 x.add_(1.0)", hundred_adds_inplace, (np.zeros((256, 256), np.float32),),
     lambda out, x: np.array_equal(out, np.full((256, 256), 100.0))),
    ("100 x = x + 1.0", hundred_adds_out_of_place, (np.zeros((256, 256), np.float32),),
     lambda out, x: np.array_equal(out, np.full((256, 256), 100.0))),
    ("x = a.scale(2.0); y = x.scale_(2.0); y.backward()", grad_scale_inplace, (_a64,),
     lambda out, a: np.allclose(out[0], 4 * a) and np.allclose(out[1], 4.0)),
    ("x = sin(a); y = x.sin_(); y.backward()", grad_sin_inplace, (_a64,),
     lambda out, a: np.allclose(out[0], np.sin(np.sin(a)))
     and np.allclose(out[1], np.cos(np.sin(a)) * np.cos(a))),
    ("y = sin(x); y += 1.0; (y**2).sum().backward()", grad_add_after_sin, (_a64,),
     lambda g, x: np.allclose(g, 2 * (np.sin(x) + 1) * np.cos(x))),
]

# The seed check of ARCHITECTURE.md §6: relu_ on the 64 MiB tensor peaks at the input alone (it
# writes into the caller's array); relu needs a second 64 MiB for its result.
PLAN_CHECKS = {
    relu_inplace: lambda plan: plan.peak_bytes == 67108864,
    relu_out_of_place: lambda plan: plan.peak_bytes == 134217728,
}


if __name__ == "__main__":
    import argparse
    import sys

    from compiler.cli import demo
    ap = argparse.ArgumentParser(description="The seed experiments: results, plans, a table.")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "numpy", "gpu"),
                    help="where the steps run (default: cpu, the compiler's default)")
    sys.exit(demo(examples=(), backend=ap.parse_args().backend))
