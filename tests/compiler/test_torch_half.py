"""Optional cross-check of 16-bit float results against PyTorch's CPU bfloat16/float16 kernels
(issue 26), where torch is installed (`pip install torch==2.13.0`); skipped otherwise. PyTorch's
CPU kernels compute in float32 and round once, the rule every backend here follows, so a result
is within 1 ulp of the 16-bit dtype of theirs (plus, for sums and products of many terms, the
rounding of float32 partial sums, which neither side does in the same order)."""
import ml_dtypes
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("each_backend")

T, TF = torch, torch.nn.functional
R = np.random.default_rng(26)
X = R.uniform(-3, 3, (6, 40)).astype(np.float32)
P = R.uniform(0.1, 4, (6, 40)).astype(np.float32)
W = R.standard_normal((40, 24)).astype(np.float32)
G = R.uniform(0.5, 1.5, (40,)).astype(np.float32)

# name: (ours over Tensors, theirs over torch tensors, arguments (float32 arrays), terms)
# `terms`: the number of float32 products a result sums (0: one op, one rounding)
CASES = {
    "add": (lambda x, p: x + p, lambda x, p: x + p, (X, P), 0),
    "mul": (lambda x, p: x * p, lambda x, p: x * p, (X, P), 0),
    "div": (lambda x, p: x / p, lambda x, p: x / p, (X, P), 0),
    "exp": (lambda x: x.exp(), lambda x: x.exp(), (X,), 0),
    "log": (lambda p: p.log(), lambda p: p.log(), (P,), 0),
    "tanh": (lambda x: x.tanh(), lambda x: x.tanh(), (X,), 0),
    "sigmoid": (lambda x: F.sigmoid(x), lambda x: T.sigmoid(x), (X,), 0),
    "sqrt": (lambda p: p.sqrt(), lambda p: p.sqrt(), (P,), 0),
    "relu": (lambda x: F.relu(x), lambda x: TF.relu(x), (X,), 0),
    "gelu": (lambda x: F.gelu(x), lambda x: TF.gelu(x), (X,), 0),
    "silu": (lambda x: F.silu(x), lambda x: TF.silu(x), (X,), 0),
    "softplus": (lambda x: F.softplus(x), lambda x: TF.softplus(x), (X,), 0),
    "softmax": (lambda x: F.softmax(x, axis=-1), lambda x: T.softmax(x, -1), (X,), 40),
    "sum": (lambda x: x.sum(axis=1), lambda x: x.sum(1), (X,), 40),
    "mean": (lambda x: x.mean(axis=0), lambda x: x.mean(0), (X,), 6),
    "max": (lambda x: x.max(axis=1), lambda x: x.amax(1), (X,), 0),
    "matmul": (lambda x, w: x @ w, lambda x, w: x @ w, (X, W), 40),
    "layer_norm": (lambda x, g: F.layer_norm(x, 40, g), lambda x, g: TF.layer_norm(
        x, (40,), g), (X, G), 40),
    "sub": (lambda x, p: x - p, lambda x, p: x - p, (X, P), 0),
    "neg": (lambda x: -x, lambda x: -x, (X,), 0),
    "abs": (lambda x: x.abs(), lambda x: x.abs(), (X,), 0),
    "sin": (lambda x: x.sin(), lambda x: x.sin(), (X,), 0),
    "cos": (lambda x: x.cos(), lambda x: x.cos(), (X,), 0),
    "erf": (lambda x: x.erf(), lambda x: x.erf(), (X,), 0),
    "rsqrt": (lambda p: p.rsqrt(), lambda p: p.rsqrt(), (P,), 0),
    "square": (lambda x: x.square(), lambda x: x.square(), (X,), 0),
    "pow": (lambda p: p ** 1.5, lambda p: p ** 1.5, (P,), 0),
    "maximum": (lambda x, p: cc.maximum(x, p), lambda x, p: T.maximum(x, p), (X, P), 0),
    "minimum": (lambda x, p: cc.minimum(x, p), lambda x, p: T.minimum(x, p), (X, P), 0),
    "clip": (lambda x: x.clip(-1.0, 2.0), lambda x: x.clamp(-1.0, 2.0), (X,), 0),
    "floor": (lambda x: x.floor(), lambda x: x.floor(), (X,), 0),
    "round": (lambda x: x.round(), lambda x: x.round(), (X,), 0),
    "where": (lambda x, p: cc.where(x > 0, x, p), lambda x, p: T.where(x > 0, x, p), (X, P), 0),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), lambda x: TF.leaky_relu(x, 0.1), (X,), 0),
    "elu": (lambda x: F.elu(x), lambda x: TF.elu(x), (X,), 0),
    "log_softmax": (lambda x: F.log_softmax(x, axis=-1), lambda x: T.log_softmax(x, -1), (X,),
                    40),
    "min": (lambda x: x.min(axis=0), lambda x: x.amin(0), (X,), 0),
    "prod": (lambda p: p[:, :6].prod(axis=1), lambda p: p[:, :6].prod(1), (P,), 6),
    "cumsum": (lambda x: x.cumsum(axis=1), lambda x: x.cumsum(1), (X,), 40),
    "logsumexp": (lambda x: x.logsumexp(axis=1), lambda x: x.logsumexp(1), (X,), 40),
    "linear": (lambda x, w: F.linear(x, w), lambda x, w: x @ w, (X, W), 40),
    "max_pool2d": (lambda x: F.max_pool2d(x.reshape([1, 6, 5, 8]), 2),
                   lambda x: TF.max_pool2d(x.reshape(1, 6, 5, 8), 2), (X,), 0),
    "avg_pool2d": (lambda x: F.avg_pool2d(x.reshape([1, 6, 4, 10]), 2),
                   lambda x: TF.avg_pool2d(x.reshape(1, 6, 4, 10), 2), (X,), 4),
}
DTYPES = {"bfloat16": (np.dtype(ml_dtypes.bfloat16), T.bfloat16),
          "float16": (np.dtype(np.float16), T.float16)}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_half_results_match_pytorch(name, dtype):
    ours, theirs, args, terms = CASES[name]
    nd, td = DTYPES[dtype]
    halves = [a.astype(nd) for a in args]
    got = cc.compile(ours)(*[h.copy() for h in halves])
    want = theirs(*[T.tensor(h.astype(np.float32)).to(td) for h in halves])
    want = want.to(T.float32).numpy()
    assert got.dtype == nd and got.shape == want.shape
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    eps = float(ml_dtypes.finfo(nd).eps)
    tiny = float(ml_dtypes.finfo(nd).smallest_subnormal)
    # 1 ulp of the result (its exponent's spacing), and for a sum of `terms` rounded partial
    # results (torch's softmax and layer_norm round nothing inside; its GEMMs may) 1e-6 of
    # the terms' size
    spacing = np.maximum(np.exp2(np.floor(np.log2(np.maximum(np.abs(w), tiny)))) * eps, tiny)
    scale = float(np.max(np.abs(w))) if terms else 0.0
    bound = spacing + (eps * scale if terms else 0.0)
    bad = ~(np.abs(g - w) <= bound)
    assert not bad.any(), (f"{name} {dtype}: {int(bad.sum())} of {bad.size} beyond the bound; "
                           f"got {g[bad][:5]}, torch {w[bad][:5]}")
