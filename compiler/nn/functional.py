"""`compiler.nn.functional`: Paddle's functional NN API, built from registry primitives.

Composite functions (gelu, layer_norm, cross_entropy, linear, mse_loss, dropout) are written
with Tensor ops, so their gradients come from the primitives' VJPs.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import tracer as _tr
from ..errors import ShapeError, TraceError
from ..tensor import Tensor, to_tensor

__all__ = ["relu", "relu_", "gelu", "sigmoid", "softmax", "log_softmax", "cross_entropy",
           "mse_loss", "layer_norm", "linear", "dropout", "conv2d", "max_pool2d"]


def relu(x: Tensor) -> Tensor:
    return x.relu()


def relu_(x: Tensor) -> Tensor:
    return x.relu_()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def gelu(x: Tensor, approximate: bool = False) -> Tensor:
    if approximate:
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (inner.tanh() + 1.0)
    return x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.primitive("softmax", axis=int(axis))


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.primitive("log_softmax", axis=int(axis))


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise TraceError(f"unknown reduction {reduction!r}: use 'mean', 'sum' or 'none'",
                     _tr.user_loc())


def cross_entropy(input: Tensor, label: Tensor, reduction: str = "mean", axis: int = -1,
                  soft_label: bool = False) -> Tensor:
    """Softmax cross entropy over the last axis; `label` holds class indices ([N] or [N, 1])
    or, with `soft_label=True`, probabilities shaped like `input`."""
    if axis not in (-1, input.ndim - 1):
        raise TraceError("cross_entropy supports axis=-1 only", _tr.user_loc())
    logp = log_softmax(input, axis=-1)
    if soft_label:
        target = label
    else:
        if label.ndim == input.ndim and label.shape[-1] == 1:
            label = label.squeeze(-1)
        if label.shape != input.shape[:-1]:
            raise ShapeError(f"cross_entropy: labels of shape {label.shape} don't match logits "
                             f"of shape {input.shape}", _tr.user_loc())
        target = label.primitive("one_hot", num_classes=input.shape[-1], dtype=input.dtype)
    return _reduce(-(target * logp).sum(axis=-1), reduction)


def mse_loss(input: Tensor, label: Tensor, reduction: str = "mean") -> Tensor:
    return _reduce((input - label).square(), reduction)


def layer_norm(x: Tensor, normalized_shape, weight=None, bias=None, epsilon=1e-5) -> Tensor:
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = [normalized_shape]
    n = len(normalized_shape)
    if list(x.shape[x.ndim - n:]) != list(normalized_shape):
        raise ShapeError(f"layer_norm: normalized_shape {list(normalized_shape)} doesn't match "
                         f"the trailing dimensions of {x.shape}", _tr.user_loc())
    axes = list(range(x.ndim - n, x.ndim))
    centered = x - x.mean(axis=axes, keepdim=True)
    var = centered.square().mean(axis=axes, keepdim=True)
    out = centered / (var + epsilon).sqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def linear(x: Tensor, weight: Tensor, bias=None) -> Tensor:
    """Paddle layout: weight is [in_features, out_features]."""
    out = x.matmul(weight)
    return out + bias if bias is not None else out


def dropout(x: Tensor, p: float = 0.5, training: bool = True, seed: int = 0) -> Tensor:
    """Deterministic dropout: the mask comes from `numpy.random.default_rng(seed)` at trace
    time, so every backend and every call sees the same mask."""
    if not 0.0 <= p <= 1.0:
        raise TraceError(f"dropout probability {p} is not in [0, 1]", _tr.user_loc())
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = np.random.default_rng(seed).random(x.shape) >= p
    return x * to_tensor(keep.astype(x.dtype) / (1.0 - p), dtype=x.dtype)


def _pair(v):
    return (int(v), int(v)) if isinstance(v, numbers.Integral) else tuple(int(a) for a in v)


def conv2d(x: Tensor, weight: Tensor, bias=None, stride=1, padding=0, dilation=1,
           groups=1) -> Tensor:
    """NCHW input, OIHW weight."""
    if groups != 1:
        raise TraceError("conv2d supports groups=1 only", _tr.user_loc())
    out = x.primitive("conv2d", weight, stride=_pair(stride), padding=_pair(padding),
                      dilation=_pair(dilation))
    if bias is not None:
        out = out + bias.reshape([1, -1, 1, 1])
    return out


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0) -> Tensor:
    kernel = _pair(kernel_size)
    return x.primitive("max_pool2d", kernel=kernel,
                       stride=kernel if stride is None else _pair(stride),
                       padding=_pair(padding))
