"""`compiler.nn.functional`: Paddle's functional NN API, built from registry primitives.

Composite functions (cross_entropy, linear, mse_loss, dropout) are written with Tensor ops, so
their gradients come from the primitives' VJPs. gelu and layer_norm are registry ops
(`compiler/ops/nn_ops.py`) whose backward keeps only compact values.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import tracer as _tr
from ..errors import DataError, ShapeError, TraceError
from ..ir import DataCheck
from ..layout import apply_view
from ..ops.nn_ops import bad_label, label_range_message
from ..ops.registry import normalize_axes
from ..creation import arange as cc_arange
from ..tensor import Tensor, random_tensor, to_tensor, user_errors

__all__ = ["relu", "relu_", "gelu", "sigmoid", "softmax", "log_softmax", "cross_entropy",
           "mse_loss", "layer_norm", "linear", "dropout", "conv2d", "max_pool2d", "elu", "elu_",
           "leaky_relu", "leaky_relu_", "hardtanh", "hardtanh_", "softmax_", "silu",
           "embedding", "scaled_dot_product_attention"]


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
    """x * Phi(x) (`approximate=True`: the tanh form). One op: its backward reads only x."""
    x = x if isinstance(x, Tensor) else to_tensor(x)
    return x.primitive("gelu", approximate=bool(approximate))


def softmax(x: Tensor, axis: int = -1, dtype=None) -> Tensor:
    """`dtype` (Paddle): the input is cast to it first."""
    x = x if dtype is None else x.cast(dtype)
    return x.primitive("softmax", axis=int(axis))


def softmax_(x: Tensor, axis: int = -1, dtype=None) -> Tensor:
    """In place: returns `x` (its backward reads only the output, so it can run in place)."""
    if dtype is not None and np.dtype(dtype) != x.dtype:
        raise TraceError("softmax_ can't change its target's dtype", _tr.user_loc())
    return x._inplace("softmax", axis=int(axis))


def silu(x: Tensor) -> Tensor:
    """x * sigmoid(x) (also called swish)."""
    return x * x.sigmoid()


def embedding(x: Tensor, weight: Tensor, padding_idx=None, sparse=False) -> Tensor:
    """Rows of `weight` [num_embeddings, dim] picked by the integer ids `x` (any shape): a
    gather, whose backward is a scatter-add into the weight's gradient. Paddle's `padding_idx`
    (in [-num_embeddings, num_embeddings)): that id looks up zeros and its row gets no
    gradient."""
    ids = x if isinstance(x, Tensor) else to_tensor(np.asarray(x))
    if weight.ndim != 2:
        raise ShapeError(f"embedding: the weight must be [num_embeddings, dim], not "
                         f"{weight.shape}", _tr.user_loc())
    flat = ids.reshape([-1]) if ids.ndim != 1 else ids
    w = weight
    if padding_idx is not None:
        n = weight.shape[0]
        pad = int(padding_idx) % n if -n <= int(padding_idx) < n else None
        if pad is None:
            raise ShapeError(f"embedding: padding_idx {padding_idx} is out of range for {n} "
                             "rows", _tr.user_loc())
        w = weight.masked_fill(cc_arange(n).reshape([n, 1]) == pad, 0.0)
    out = w.index_select(flat, axis=0)
    return out.reshape(ids.shape + [weight.shape[1]])


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 training: bool = True, name=None, seed=0) -> Tensor:
    """Paddle's layout: [batch, seq_len, num_heads, head_dim]. softmax(q k^T / sqrt(d) + mask)
    v, composed of primitives. `attn_mask`: bool (True keeps) or additive, broadcasting to
    [batch, num_heads, seq_q, seq_k]; `is_causal` keeps key j <= query i. `dropout_p` drops
    attention probabilities while `training`, drawn from `seed` (see `dropout`)."""
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise ShapeError("scaled_dot_product_attention expects [batch, seq_len, num_heads, "
                         f"head_dim] tensors, got {query.shape}, {key.shape}, {value.shape}",
                         _tr.user_loc())
    q = query.transpose([0, 2, 1, 3])
    k = key.transpose([0, 2, 3, 1])
    v = value.transpose([0, 2, 1, 3])
    scores = q.matmul(k) * (1.0 / math.sqrt(query.shape[-1]))
    if is_causal:
        scores = scores.masked_fill(_causal_drop(scores), -math.inf)
    if attn_mask is not None:
        mask = attn_mask if isinstance(attn_mask, Tensor) else to_tensor(attn_mask)
        if mask.dtype == np.bool_:
            scores = scores.masked_fill(mask.logical_not(), -math.inf)
        else:
            scores = scores + mask
    probs = softmax(scores, axis=-1)
    if dropout_p:
        probs = dropout(probs, dropout_p, training=training, seed=seed)
    return probs.matmul(v).transpose([0, 2, 1, 3])


def _causal_drop(scores: Tensor) -> Tensor:
    """True above the diagonal (key j > query i): the entries a causal mask removes."""
    return scores._triangle(0, True).logical_not()


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


def cross_entropy(input: Tensor, label: Tensor, weight=None, ignore_index: int = -100,
                  reduction: str = "mean", soft_label: bool = False, axis: int = -1,
                  use_softmax: bool = True, label_smoothing: float = 0.0,
                  name=None) -> Tensor:
    """Paddle's softmax cross entropy, with Paddle's semantics:

    - hard labels (class indices, `input`'s shape without the class `axis`, or with it of
      size 1) or, with `soft_label=True`, probabilities shaped like `input`;
    - a row whose label is `ignore_index` contributes 0 and is left out of the mean;
    - `weight[C]` scales each row's loss by `sum_i target_i * weight_i` (`weight[label]` for a
      hard label); with `reduction="mean"` the sum of losses is divided by the sum of those
      weights (Paddle), without `weight` by the number of rows not ignored; a zero divisor
      counts as 1 (Paddle: an all-ignored batch gives 0, not NaN);
    - `label_smoothing=eps` mixes the target with the uniform distribution,
      `(1 - eps) * target + eps / C` (ignored rows stay out);
    - `use_softmax=False`: `input` already holds probabilities;
    - `reduction="none"` keeps the class axis (size 1) for soft labels and for hard labels
      given with it, as Paddle does.

    A hard label outside [0, C) that isn't `ignore_index` raises `cc.DataError` naming the
    label, its position and this call's line, before the program writes into any caller's
    array (ARCHITECTURE.md §4)."""
    loc = _tr.user_loc()
    if reduction not in ("mean", "sum", "none"):
        raise TraceError(f"unknown reduction {reduction!r}: use 'mean', 'sum' or 'none'", loc)
    label = label if isinstance(label, Tensor) else to_tensor(label)
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise TraceError(f"cross_entropy: label_smoothing={label_smoothing} is not in [0, 1]",
                         loc)
    nd = input.ndim
    try:
        (axis,) = normalize_axes(int(axis), nd)
    except ShapeError as e:
        raise ShapeError(f"cross_entropy: {e.bare_message}", loc) from None
    num_classes = input.shape[axis]
    perm = [i for i in range(nd) if i != axis] + [axis]
    moved = axis != nd - 1  # the class axis is made the last one

    def last(t):
        return t.transpose(perm) if moved else t

    x = last(input)
    logp = log_softmax(x, axis=-1) if use_softmax else x.log()
    valid = None  # per row: 1 when its label counts, 0 when it is ignore_index
    if soft_label:
        if label.shape != input.shape:
            raise ShapeError(f"cross_entropy: soft labels of shape {label.shape} don't match "
                             f"input of shape {input.shape}", loc)
        target = last(label)
        if target.dtype != x.dtype:
            target = target.cast(x.dtype)
        keep_axis = True
    else:
        rows = input.shape[:axis] + input.shape[axis + 1:]
        with_axis = input.shape[:axis] + [1] + input.shape[axis + 1:]
        if label.shape == rows:
            keep_axis, labels = False, label
        elif label.shape == with_axis:
            keep_axis, labels = True, label.squeeze(axis)
        else:
            raise ShapeError(f"cross_entropy: labels of shape {label.shape} don't match input "
                             f"of shape {input.shape} (class axis {axis})", loc)
        target = labels.primitive("one_hot", num_classes=num_classes, dtype=x.dtype,
                                  ignore_index=int(ignore_index))
        _record_label_check(label, target, num_classes, int(ignore_index), loc)
        valid = target.sum(axis=-1)
    if label_smoothing:
        eps = float(label_smoothing)
        uniform = eps / num_classes if valid is None else valid.unsqueeze(-1) * (eps / num_classes)
        target = target * (1.0 - eps) + uniform
    loss = -(target * logp).sum(axis=-1)
    denominator = valid
    if weight is not None:
        weight = weight if isinstance(weight, Tensor) else to_tensor(weight, dtype=x.dtype)
        if weight.shape != [num_classes]:
            raise ShapeError(f"cross_entropy: weight of shape {weight.shape} doesn't match "
                             f"{num_classes} classes", loc)
        row_weight = (target * weight).sum(axis=-1)  # weight[label] for a hard label
        loss = loss * row_weight
        denominator = row_weight
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        if denominator is None:
            return loss.mean()
        total = denominator.sum()
        return loss.sum() / (total + (total == 0.0).cast(total.dtype))
    return loss.unsqueeze(axis) if keep_axis else loss


def _record_label_check(label: Tensor, one_hot: Tensor, num_classes, ignore_index, loc):
    """Labels are data (ARCHITECTURE.md §4 "Nothing half-written"): labels that are a caller's
    argument (or a view of one) are checked by the driver at the call's entry; constant labels right
    now; computed ones by the one_hot node during the run, with the caller's arrays kept
    untouched until it has finished (`Program.__call__`)."""
    graph = label._tracer.graph
    node = one_hot._v().producer
    origin = label._origin()
    base, chain = origin if origin is not None else (None, ())
    if base is not None and base.producer is not None and base.producer.op == "constant":
        values = base.producer.attrs["value"]
        for op, attrs in chain:
            values = apply_view(values, op, attrs)
        found = bad_label(values, num_classes, ignore_index)
        if found is not None:
            raise DataError("cross_entropy: "
                            + label_range_message(*found, num_classes, ignore_index), loc)
        return
    index = next((k for k, v in enumerate(graph.inputs) if v is base), None)
    graph.data_checks.append(DataCheck("cross_entropy", node, index,
                                       tuple(chain) if index is not None else (),
                                       num_classes, ignore_index, loc))


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
    # Per-row statistics, without gradient: the layer_norm op's VJP differentiates through
    # them, and they are all its backward keeps besides x and the weight (n times smaller).
    xs = x.detach()
    mean = xs.mean(axis=axes, keepdim=True)
    var = (xs - mean).square().mean(axis=axes, keepdim=True)
    rstd = 1.0 / (var + epsilon).sqrt()
    for what, t in (("weight", weight), ("bias", bias)):
        shape = None if t is None else tuple(np.shape(t) if not isinstance(t, Tensor)
                                             else t.shape)
        if shape is not None and (len(shape) > n or any(
                a not in (1, b) for a, b in zip(shape[::-1], list(normalized_shape)[::-1]))):
            raise ShapeError(f"layer_norm: {what} of shape {list(shape)} doesn't match "
                             f"normalized_shape {list(normalized_shape)}", _tr.user_loc())
    affine = [t for t in (weight, bias) if t is not None]
    return x.primitive("layer_norm", mean, rstd, *affine, n=n, weight=weight is not None,
                       bias=bias is not None)


def linear(x: Tensor, weight: Tensor, bias=None) -> Tensor:
    """Paddle layout: weight is [in_features, out_features]."""
    out = x.matmul(weight)
    return out + bias if bias is not None else out


def dropout(x: Tensor, p: float = 0.5, training: bool = True, seed=0) -> Tensor:
    """Dropout with Paddle's "upscale_in_train": kept elements are divided by 1 - p. The mask
    comes from Philox numbers generated inside the graph from `seed` (a 0-d uint64 tensor
    argument, or an int: a constant), so a compiled step is reproducible on every backend and
    a new seed per step doesn't retrace. The backward pass reads only the boolean mask."""
    if not 0.0 <= p <= 1.0:
        raise TraceError(f"dropout probability {p} is not in [0, 1]", _tr.user_loc())
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = random_tensor(x.shape, x.dtype, seed, "uniform", "F.dropout") >= p
    return (x * (1.0 / (1.0 - p))).where_mask(keep)


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
    for name in __all__:
        globals()[name] = user_errors(globals()[name], f"F.{name}")


_check_user_arguments()
