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
           "mse_loss", "layer_norm", "linear", "dropout", "conv2d", "max_pool2d", "elu", "elu_",
           "leaky_relu", "leaky_relu_", "hardtanh", "hardtanh_"]


def relu(x: Tensor) -> Tensor:
    return x.relu()


def relu_(x: Tensor) -> Tensor:
    return x.relu_()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return x.elu(alpha=float(alpha))


def elu_(x: Tensor, alpha: float = 1.0) -> Tensor:
    return x.elu_(alpha=float(alpha))


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return x.leaky_relu(negative_slope=float(negative_slope))


def leaky_relu_(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return x.leaky_relu_(negative_slope=float(negative_slope))


def _hardtanh_bounds(min, max):
    if min > max:
        raise ShapeError(f"hardtanh: min {min} is greater than max {max}", _tr.user_loc())
    return dict(min=float(min), max=float(max))


def hardtanh(x: Tensor, min: float = -1.0, max: float = 1.0) -> Tensor:
    return x.hardtanh(**_hardtanh_bounds(min, max))


def hardtanh_(x: Tensor, min: float = -1.0, max: float = 1.0) -> Tensor:
    return x.hardtanh_(**_hardtanh_bounds(min, max))


def gelu(x: Tensor, approximate: bool = False) -> Tensor:
    if approximate:
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (inner.tanh() + 1.0)
    return x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0)


def softmax(x: Tensor, axis: int = -1, dtype=None) -> Tensor:
    """`dtype` (Paddle): the input is cast to it first."""
    x = x if dtype is None else x.cast(dtype)
    return x.primitive("softmax", axis=int(axis))


def log_softmax(x: Tensor, axis: int = -1, dtype=None) -> Tensor:
    x = x if dtype is None else x.cast(dtype)
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


def _pair(v, what="value"):
    if isinstance(v, numbers.Integral):
        return (int(v), int(v))
    try:
        pair = tuple(int(a) for a in v)
    except (TypeError, ValueError):
        pair = ()
    if len(pair) != 2:
        raise TraceError(f"{what} must be an int or a pair of ints, got {v!r}", _tr.user_loc())
    return pair


def _padding(what, padding, x, kernel, stride):
    """Paddle's padding forms -> ((top, bottom, left, right), same): an int, [h, w],
    [top, bottom, left, right], [[0, 0], [0, 0], [top, bottom], [left, right]], or "SAME" /
    "VALID" (any case). Paddle's "SAME" gives an output of ceil(size / stride) with the extra
    pixel at the bottom/right (Paddle's UpdatePaddingAndDilation)."""
    if isinstance(padding, str):
        algo = padding.upper()
        if algo == "VALID":
            return (0, 0, 0, 0), False
        if algo != "SAME":
            raise TraceError(f"{what}: unknown padding {padding!r}: use 'SAME', 'VALID' or "
                             "ints", _tr.user_loc())
        if x.ndim != 4 or len(kernel) != 2:
            return (0, 0, 0, 0), True  # the op's shape rule reports the ranks
        pads = []
        for size, k, s in zip(x.shape[2:], kernel, stride):
            out = -(-size // max(s, 1))
            total = max((out - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        return tuple(pads), True
    if isinstance(padding, numbers.Integral):
        return (int(padding),) * 4, False
    items = list(padding)
    if len(items) == 4 and all(not isinstance(p, numbers.Integral) for p in items):
        if [list(p) for p in items[:2]] != [[0, 0], [0, 0]]:
            raise TraceError(f"{what}: padding {padding!r} pads the batch or channel axis",
                             _tr.user_loc())
        items = list(items[2]) + list(items[3])
    if len(items) == 2:
        ph, pw = _pair(items, f"{what} padding")
        return (ph, ph, pw, pw), False
    if len(items) == 4 and all(isinstance(p, numbers.Integral) for p in items):
        return tuple(int(p) for p in items), False
    raise TraceError(f"{what}: unsupported padding {padding!r}", _tr.user_loc())


def conv2d(x: Tensor, weight: Tensor, bias=None, stride=1, padding=0, dilation=1,
           groups=1) -> Tensor:
    """NCHW input, OIHW weight; `padding` in any of Paddle's forms (see `_conv_padding`)."""
    if groups != 1:
        raise TraceError("conv2d supports groups=1 only", _tr.user_loc())
    stride, dilation = _pair(stride, "conv2d stride"), _pair(dilation, "conv2d dilation")
    padding, same = _padding("conv2d", padding, x, weight.shape[2:], stride)
    if same:
        dilation = (1, 1)  # Paddle: "SAME" sets the dilation to 1
    out = x.primitive("conv2d", weight, stride=stride, padding=padding, dilation=dilation)
    if bias is not None:
        out = out + bias.reshape([1, -1, 1, 1])
    return out


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode=False) -> Tensor:
    """NCHW; `padding` in any of Paddle's forms (see `_padding`)."""
    if ceil_mode:
        raise TraceError("max_pool2d: ceil_mode=True is not supported", _tr.user_loc())
    kernel = _pair(kernel_size, "max_pool2d kernel_size")
    stride = kernel if stride is None else _pair(stride, "max_pool2d stride")
    padding, _ = _padding("max_pool2d", padding, x, kernel, stride)
    return x.primitive("max_pool2d", kernel=kernel, stride=stride, padding=padding)


def _check_user_arguments():
    from ..tensor import user_errors
    for name in __all__:
        globals()[name] = user_errors(globals()[name], f"F.{name}")


_check_user_arguments()
