"""Optional cross-check of issue 10's ops against PyTorch, forward and backward (float64), where
torch is installed (`pip install torch==2.13.0`); skipped otherwise. The op database compares
the same ops with NumPy formulas and finite differences in every run."""
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("each_backend")

R = np.random.default_rng(10)
X = R.uniform(0.2, 0.9, (3, 4))          # in every op's domain (asin, acos, log, rsqrt)
Y = R.uniform(-1.0, 1.0, (3, 4))
IDX = np.array([2, 0, 2])
W = R.standard_normal((5, 6))
IDS = np.array([[1, 4, 0], [3, 3, 2]])
Q = R.standard_normal((2, 3, 2, 4))      # [batch, seq, heads, head_dim] (Paddle's layout)

T = torch
CASES = {
    # name: (our function of tensors, torch function of tensors, arguments)
    "reciprocal": (lambda x: x.reciprocal(), lambda x: x.reciprocal(), (X,)),
    "rsqrt": (lambda x: x.rsqrt(), lambda x: x.rsqrt(), (X,)),
    "expm1": (lambda x: x.expm1(), lambda x: x.expm1(), (Y,)),
    "log1p": (lambda x: x.log1p(), lambda x: x.log1p(), (X,)),
    "log2": (lambda x: x.log2(), lambda x: x.log2(), (X,)),
    "log10": (lambda x: x.log10(), lambda x: x.log10(), (X,)),
    "sinh": (lambda x: x.sinh(), lambda x: x.sinh(), (Y,)),
    "cosh": (lambda x: x.cosh(), lambda x: x.cosh(), (Y,)),
    "asin": (lambda x: x.asin(), lambda x: x.asin(), (X,)),
    "acos": (lambda x: x.acos(), lambda x: x.acos(), (X,)),
    "atan": (lambda x: x.atan(), lambda x: x.atan(), (Y,)),
    "lerp": (lambda x, y: x.lerp(y, 0.3), lambda x, y: T.lerp(x, y, 0.3), (X, Y)),
    "cumsum": (lambda x: x.cumsum(axis=1), lambda x: x.cumsum(1), (Y,)),
    "tril": (lambda x: x.tril(), lambda x: x.tril(), (Y,)),
    "triu": (lambda x: x.triu(1), lambda x: x.triu(1), (Y,)),
    "prod": (lambda x: x.prod(axis=1), lambda x: x.prod(1), (Y,)),
    "min": (lambda x: x.min(axis=0), lambda x: x.amin(0), (Y,)),
    "index_select": (lambda x: x.index_select(cc.to_tensor(IDX), axis=1),
                     lambda x: x.index_select(1, T.tensor(IDX)), (Y,)),
    "take_along_axis": (lambda x: x.take_along_axis(cc.to_tensor(np.argsort(Y, 1)), 1),
                        lambda x: x.gather(1, T.tensor(np.argsort(Y, 1))), (Y,)),
    "masked_fill": (lambda x: x.masked_fill(cc.to_tensor(Y > 0), 2.0),
                    lambda x: x.masked_fill(T.tensor(Y > 0), 2.0), (X,)),
    "silu": (lambda x: F.silu(x), lambda x: T.nn.functional.silu(x), (Y,)),
    "embedding": (lambda w: F.embedding(cc.to_tensor(IDS), w),
                  lambda w: T.nn.functional.embedding(T.tensor(IDS), w), (W,)),
    "stack": (lambda x, y: cc.stack([x, y], axis=1), lambda x, y: T.stack([x, y], 1), (X, Y)),
    "split": (lambda x: x.split(2, axis=1)[1] * 2.0, lambda x: x.split(2, 1)[1] * 2.0, (Y,)),
    "sdpa_causal": (
        lambda q: F.scaled_dot_product_attention(q, q * 0.5, q + 1.0, is_causal=True),
        lambda q: T.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), (q * 0.5).transpose(1, 2), (q + 1.0).transpose(1, 2),
            is_causal=True).transpose(1, 2), (Q,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_backward_match_pytorch(name):
    ours, theirs, args = CASES[name]
    out_shape = np.asarray(theirs(*[T.tensor(a) for a in args]).detach()).shape
    weight = R.standard_normal(out_shape)

    def step(*xs):
        for x in xs:
            x.stop_gradient = False
        out = ours(*xs)
        (out * cc.to_tensor(weight)).sum().backward()
        return out, [x.grad for x in xs]

    out, grads = cc.compile(step)(*[a.copy() for a in args])
    targs = [T.tensor(a, requires_grad=True) for a in args]
    tout = theirs(*targs)
    (tout * T.tensor(weight)).sum().backward()
    np.testing.assert_allclose(out, tout.detach().numpy(), rtol=1e-12, atol=1e-12)
    for g, t in zip(grads, targs):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-10, atol=1e-12)
