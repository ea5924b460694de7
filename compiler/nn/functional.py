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
from ..ops.registry import dkind, normalize_axes
from ..creation import arange as cc_arange
from ..creation import concat as cc_concat
from ..creation import full as cc_full
from ..creation import where as cc_where
from ..tensor import Tensor, in_float32, random_tensor, rounded, to_tensor, user_errors

__all__ = ["relu", "relu_", "gelu", "sigmoid", "softmax", "log_softmax", "cross_entropy",
           "mse_loss", "layer_norm", "linear", "dropout", "conv2d", "max_pool2d", "elu", "elu_",
           "leaky_relu", "leaky_relu_", "hardtanh", "hardtanh_", "softmax_", "silu",
           "embedding", "scaled_dot_product_attention"]
# issue 24 (Paddle's functions users reach for): defined in the marked section below
__all__ += ["avg_pool2d", "batch_norm", "binary_cross_entropy_with_logits", "nll_loss",
            "one_hot", "pad", "softplus"]


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


def _record_label_check(label: Tensor, one_hot: Tensor, num_classes, ignore_index, loc,
                        what="cross_entropy"):
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
            raise DataError(f"{what}: "
                            + label_range_message(*found, num_classes, ignore_index), loc)
        return
    index = next((k for k, v in enumerate(graph.inputs) if v is base), None)
    graph.data_checks.append(DataCheck(what, node, index,
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

# -- issue 24: one_hot, pad, avg_pool2d, batch_norm, binary_cross_entropy_with_logits,
#    nll_loss, softplus (Paddle's signatures and semantics; compositions of registry ops, so
#    every backend runs them and their gradients are the primitives' VJPs) ---------------------
def _as_tensor(x, dtype=None) -> Tensor:
    return x if isinstance(x, Tensor) else to_tensor(np.asarray(x), dtype=dtype)


def one_hot(x, num_classes, name=None) -> Tensor:
    """Paddle's `one_hot`: integer labels of any shape -> float32 [..., num_classes]. A label
    outside [0, num_classes) raises `cc.DataError` naming it, its position and this line,
    before the program writes into any caller's array (as cross_entropy's labels)."""
    loc = _tr.user_loc()
    labels = _as_tensor(x)
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) \
            or num_classes < 1:
        raise TraceError(f"one_hot: num_classes must be a positive int, got {num_classes!r}",
                         loc)
    if dkind(labels.dtype) not in "iu":
        raise TraceError(f"one_hot: labels must be integers, not {labels.dtype}", loc)
    out = labels.primitive("one_hot", num_classes=int(num_classes), dtype=np.dtype(np.float32),
                           ignore_index=None)
    _record_label_check(labels, out, int(num_classes), None, loc, "one_hot")
    return out


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_pairs(x: Tensor, pad, mode, data_format, pad_from_left_axis, loc):
    """Paddle's pad list -> {axis: (before, after)}."""
    if isinstance(pad, Tensor):
        raise TraceError("pad: pass the paddings as a list of ints (a Tensor's values aren't "
                         "known while tracing)", loc)
    try:
        pads = [int(p) for p in pad]
    except (TypeError, ValueError):
        raise TraceError(f"pad: pad must be a list of ints, got {pad!r}", loc) from None
    if any(not isinstance(p, numbers.Integral) for p in pad):
        raise TraceError(f"pad: pad must be a list of ints, got {pad!r}", loc)
    if any(p < 0 for p in pads):
        raise TraceError(f"pad: negative paddings {pads} are not supported", loc)
    n = x.ndim
    spatial = len(pads) == 2 * (n - 2) and 3 <= n <= 5
    if mode != "constant" and not spatial:
        raise TraceError(f"pad: mode {mode!r} pads the [D, H, W] axes of a 3-D to 5-D input: "
                         f"it needs {2 * (n - 2) if n >= 3 else 'a 3-D to 5-D input and'} "
                         f"paddings, got {len(pads)} for a {n}-D input", loc)
    if spatial:
        fmt = data_format or {3: "NCL", 4: "NCHW", 5: "NCDHW"}[n]
        formats = {3: ("NCL", "NLC"), 4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC")}[n]
        if fmt not in formats:
            raise TraceError(f"pad: data_format {fmt!r} doesn't fit a {n}-D input (use one of "
                             f"{', '.join(formats)})", loc)
        axes = list(range(2, n)) if fmt[1] == "C" else list(range(1, n - 1))
        order = axes[::-1]      # [left, right] pads the last spatial axis, then upwards
    else:
        if len(pads) % 2:
            pads.append(0)      # Paddle: an odd list gets a trailing 0
        if len(pads) > 2 * n:
            raise TraceError(f"pad: {len(pads)} paddings for a {n}-D input (at most {2 * n})",
                             loc)
        if len(pads) == 2 * n and pad_from_left_axis:
            order = list(range(n))
        else:
            order = list(range(n - 1, -1, -1))
    return {axis: (pads[2 * k], pads[2 * k + 1]) for k, axis in enumerate(order[:len(pads) // 2])}


def _pad_index(size, before, after, mode, axis, loc) -> np.ndarray:
    """The source index of every output position along one axis (non-constant modes)."""
    i = np.arange(-before, size + after)
    if size == 0:
        raise ShapeError(f"pad: mode {mode!r} can't pad axis {axis} of size 0", loc)
    if mode == "replicate":
        return np.clip(i, 0, size - 1)
    if mode == "circular":
        if max(before, after) > size:
            raise ShapeError(f"pad: circular paddings ({before}, {after}) exceed axis {axis}'s "
                             f"size {size}", loc)
        return i % size
    if max(before, after) >= size:  # reflect
        raise ShapeError(f"pad: reflect paddings ({before}, {after}) must be less than axis "
                         f"{axis}'s size {size}", loc)
    return np.where(i < 0, -i, np.where(i >= size, 2 * (size - 1) - i, i))


def pad(x, pad, mode="constant", value=0.0, data_format=None, pad_from_left_axis=True,
        name=None) -> Tensor:
    """Paddle's `pad`, with Paddle's order of the pad list:

    - a list of 2*(N-2) ints for a 3-D to 5-D input (every mode) pads the spatial axes of
      `data_format` (NCL/NCHW/NCDHW by default, or NLC/NHWC/NDHWC) from the last one up:
      [left, right, top, bottom, front, back];
    - in "constant" mode, a list of 2*N ints pads axis 0 first ([before_0, after_0,
      before_1, ...]; `pad_from_left_axis=False`: the last axis first), and any other even
      length pads from the last axis up (an odd list gets a trailing 0).

    "constant" fills with `value` (concat with filled blocks); "reflect" (the edge is not
    repeated, paddings < the axis size), "replicate" and "circular" gather with a constant
    index per axis (`index_select`, whose gradient adds back into the source)."""
    loc = _tr.user_loc()
    x = _as_tensor(x)
    if mode not in _PAD_MODES:
        raise TraceError(f"pad: unknown mode {mode!r}: use one of {', '.join(_PAD_MODES)}", loc)
    pairs = _pad_pairs(x, pad, mode, data_format, pad_from_left_axis, loc)
    out = x
    for axis in sorted(pairs):
        before, after = pairs[axis]
        if not before and not after:
            continue
        if mode == "constant":
            parts = []
            for width in (before, after):
                shape = list(out.shape)
                shape[axis] = width
                parts.append(cc_full(shape, value, out.dtype) if width else None)
            out = cc_concat([p for p in (parts[0], out, parts[1]) if p is not None], axis=axis)
        else:
            index = _pad_index(out.shape[axis], before, after, mode, axis, loc)
            out = out.index_select(to_tensor(index.astype(np.int64)), axis=axis)
    return out


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True,
               divisor_override=None, data_format="NCHW", name=None) -> Tensor:
    """Paddle's `avg_pool2d`: NCHW (or NHWC) windows averaged. `exclusive=True` (Paddle's
    default) divides by the number of input elements the window covers, padding not counted;
    `exclusive=False` by kh*kw (by less for a `ceil_mode` window that reaches past the input
    and its top / left padding, as Paddle's kernel); `divisor_override` by that number.
    `ceil_mode` sizes the output with ceil((size + pads - k) / stride) + 1, as Paddle. The
    window sums are one conv2d of each (batch, channel) plane with a ones kernel, so the
    backward is conv2d's;
    the divisors depend only on shapes and are a constant."""
    loc = _tr.user_loc()
    x = _as_tensor(x)
    if data_format not in ("NCHW", "NHWC"):
        raise TraceError(f"avg_pool2d: data_format {data_format!r} is not 'NCHW' or 'NHWC'",
                         loc)
    if x.ndim != 4:
        raise ShapeError(f"avg_pool2d expects a 4-D input, got shape {x.shape}", loc)
    if dkind(x.dtype) != "f":
        raise TraceError(f"avg_pool2d needs a float input, not {x.dtype}", loc)
    if data_format == "NHWC":
        x = x.transpose([0, 3, 1, 2])
    kernel = _pair(kernel_size, "avg_pool2d kernel_size")
    stride = kernel if stride is None else _pair(stride, "avg_pool2d stride")
    if min(kernel) < 1 or min(stride) < 1:
        raise TraceError(f"avg_pool2d: kernel_size {kernel} and stride {stride} must be "
                         "positive", loc)
    pads, _ = _padding("avg_pool2d", padding, x, kernel, stride)
    n, c, h, w = x.shape
    sizes, extra = [], []
    for size, k, s, lo, hi in zip((h, w), kernel, stride, pads[0::2], pads[1::2]):
        span = size + lo + hi - k
        if span < 0:
            raise ShapeError(f"avg_pool2d: kernel {list(kernel)} is larger than the padded "
                             f"input {[h + pads[0] + pads[1], w + pads[2] + pads[3]]}", loc)
        out = (span + s - 1) // s + 1 if ceil_mode else span // s + 1
        sizes.append(out)
        extra.append(max((out - 1) * s + k - (size + lo + hi), 0))
    (ho, wo) = sizes
    planes = x.reshape_to([n * c, 1, h, w])
    ones = cc_full([1, 1, kernel[0], kernel[1]], 1.0, x.dtype)
    sums = planes.primitive("conv2d", ones, stride=stride, dilation=(1, 1),
                            padding=(pads[0], pads[1] + extra[0], pads[2], pads[3] + extra[1]))
    if divisor_override:
        divisor = np.full((ho, wo), float(divisor_override))
    elif exclusive:
        counts = []
        for size, k, s, lo, out in zip((h, w), kernel, stride, pads[0::2], sizes):
            start = np.arange(out) * s - lo
            counts.append(np.minimum(start + k, size) - np.maximum(start, 0))
        divisor = np.multiply.outer(counts[0], counts[1]).astype(np.float64)
    else:
        # Paddle's kernel: a window's end is clipped at size + the FIRST padding (top / left,
        # also for asymmetric paddings), its start is not: kh*kw except for a ceil_mode window
        # past that end (0 when wholly past it: 0/0)
        counts = []
        for size, k, s, lo, out in zip((h, w), kernel, stride, pads[0::2], sizes):
            start = np.arange(out) * s - lo
            counts.append(np.minimum(start + k, size + lo) - start)
        divisor = np.multiply.outer(counts[0], counts[1]).astype(np.float64)
    out = (sums / to_tensor(divisor.astype(x.dtype))).reshape_to([n, c, ho, wo])
    return out.transpose([0, 2, 3, 1]) if data_format == "NHWC" else out


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.9, epsilon=1e-05, data_format="NCHW", use_global_stats=None,
               name=None) -> Tensor:
    """Paddle's `batch_norm`. Statistics per channel (axis 1 for "NC", "NCL", "NCHW",
    "NCDHW"; the last axis for "NLC", "NHWC", "NDHWC"):

    - batch statistics (mean and the biased variance, divided by the element count) when
      `training` (or `use_global_stats=False`), otherwise `running_mean` / `running_var`
      (`use_global_stats=True` uses them also in training);
    - whenever batch statistics are used, the running arrays are updated IN PLACE with
      Paddle's rule `running = running * momentum + batch * (1 - momentum)`, the variance
      being the biased batch variance (Paddle's; PyTorch uses the unbiased one): the caller's
      arrays passed for them hold the new statistics after the call;
    - y = (x - mean) / sqrt(var + epsilon) * weight + bias."""
    loc = _tr.user_loc()
    x = _as_tensor(x)
    formats = ("NC", "NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")
    if data_format not in formats:
        raise TraceError(f"batch_norm: unknown data_format {data_format!r} (use one of "
                         f"{', '.join(formats)})", loc)
    if x.ndim < 2:
        raise ShapeError(f"batch_norm expects an input of rank >= 2, got shape {x.shape}", loc)
    if dkind(x.dtype) != "f":
        raise TraceError(f"batch_norm needs a float input, not {x.dtype}", loc)
    axis = 1 if data_format[1] == "C" else x.ndim - 1
    channels = x.shape[axis]
    stats = {}
    for what, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is None:
            if what.startswith("running"):
                raise TraceError(f"batch_norm: {what} is required", loc)
            continue
        t = _as_tensor(t, x.dtype)
        if t.shape != [channels]:
            raise ShapeError(f"batch_norm: {what} of shape {t.shape} doesn't match "
                             f"{channels} channels (axis {axis} of {x.shape})", loc)
        stats[what] = t
    shape = [1] * x.ndim
    shape[axis] = channels

    def per_channel(t):
        return t.reshape_to(shape)
    global_stats = (not training) if use_global_stats is None else bool(use_global_stats)
    if global_stats:
        mean, var = per_channel(stats["running_mean"]), per_channel(stats["running_var"])
    else:
        axes = [i for i in range(x.ndim) if i != axis]
        mean = x.mean(axis=axes, keepdim=True)
        var = (x - mean).square().mean(axis=axes, keepdim=True)
        m = float(momentum)
        with _tr.no_grad():
            for what, batch in (("running_mean", mean), ("running_var", var)):
                running = stats[what]
                batch = batch.detach().reshape_to([channels])
                if batch.dtype != running.dtype:
                    batch = batch.cast(running.dtype)
                running.multiply_(m).add_(batch * (1.0 - m))
    y = (x - mean) / (var + float(epsilon)).sqrt()
    if "weight" in stats:
        y = y * per_channel(stats["weight"])
    if "bias" in stats:
        y = y + per_channel(stats["bias"])
    return y


def _softplus_of_negative(x: Tensor) -> Tensor:
    """log(1 + exp(-x)) without overflow: log1p(exp(-|x|)) + max(-x, 0). The two branches
    are picked by one `where` on x >= 0 (not by abs and relu, whose kinks at 0 would give a
    gradient of 0 there instead of -1/2); no branch computes an exp that overflows."""
    nonneg = x >= 0.0
    t = cc_where(nonneg, -x, x)                      # -|x|, with x >= 0's derivative at 0
    return t.exp().log1p() + cc_where(nonneg, 0.0, -x)


def binary_cross_entropy_with_logits(logit, label, weight=None, reduction="mean",
                                     pos_weight=None, name=None) -> Tensor:
    """Paddle's numerically stable form: `(1 - label) * logit + (1 + (pos_weight - 1) *
    label) * log(1 + exp(-logit))`, the softplus evaluated without overflow; `weight`
    (broadcast to the loss) scales each element; `reduction` "mean" (over every element),
    "sum" or "none"."""
    loc = _tr.user_loc()
    if reduction not in ("mean", "sum", "none"):
        raise TraceError(f"unknown reduction {reduction!r}: use 'mean', 'sum' or 'none'", loc)
    x = _as_tensor(logit)
    if dkind(x.dtype) != "f":
        raise TraceError(f"binary_cross_entropy_with_logits: logit must be a float tensor, "
                         f"not {x.dtype}", loc)
    y = _as_tensor(label, x.dtype)
    if y.shape != x.shape:
        raise ShapeError(f"binary_cross_entropy_with_logits: label of shape {y.shape} doesn't "
                         f"match logit of shape {x.shape}", loc)
    if y.dtype != x.dtype:
        y = y.cast(x.dtype)
    softplus_neg = _softplus_of_negative(x)
    if pos_weight is not None:
        pw = _as_tensor(pos_weight, x.dtype)
        softplus_neg = softplus_neg * ((pw - 1.0) * y + 1.0)
    loss = (1.0 - y) * x + softplus_neg
    if weight is not None:
        loss = loss * _as_tensor(weight, x.dtype)
    return _reduce(loss, reduction)


def nll_loss(input, label, weight=None, ignore_index=-100, reduction="mean",
             name=None) -> Tensor:
    """Paddle's `nll_loss` over log-probabilities `input` [N, C] or [N, C, d1, ...] and class
    labels [N] or [N, d1, ...]: `loss = -weight[label] * input[label]`; a label equal to
    `ignore_index` gives 0 and weighs 0; "mean" divides the sum by the sum of the weights
    (`weight[label]`, 1 without `weight`) of the rows not ignored, a zero total counting as 1
    (as cross_entropy); an out-of-range label raises `cc.DataError` before any caller's array
    is written. The pick is a `where` over a boolean one-hot (not a product with it), so a
    -inf at another class doesn't turn into NaN."""
    loc = _tr.user_loc()
    if reduction not in ("mean", "sum", "none"):
        raise TraceError(f"unknown reduction {reduction!r}: use 'mean', 'sum' or 'none'", loc)
    x = _as_tensor(input)
    labels = _as_tensor(label)
    if x.ndim < 2:
        raise ShapeError(f"nll_loss expects input [N, C] or [N, C, d1, ...], got {x.shape}",
                         loc)
    if dkind(x.dtype) != "f":
        raise TraceError(f"nll_loss: input must be a float tensor, not {x.dtype}", loc)
    want = [x.shape[0]] + x.shape[2:]
    if labels.shape != want:
        raise ShapeError(f"nll_loss: labels of shape {labels.shape} don't match input of "
                         f"shape {x.shape} (want {want})", loc)
    if dkind(labels.dtype) not in "iu":
        raise TraceError(f"nll_loss: labels must be integers, not {labels.dtype}", loc)
    classes = x.shape[1]
    if x.ndim > 2:
        x = x.transpose([0] + list(range(2, x.ndim)) + [1])
    hot = labels.primitive("one_hot", num_classes=classes, dtype=np.dtype(np.bool_),
                           ignore_index=int(ignore_index))
    _record_label_check(labels, hot, classes, int(ignore_index), loc, "nll_loss")
    picked = cc_where(hot, x, 0.0).sum(axis=-1)
    if weight is not None:
        w = _as_tensor(weight, x.dtype)
        if w.shape != [classes]:
            raise ShapeError(f"nll_loss: weight of shape {w.shape} doesn't match {classes} "
                             "classes", loc)
        row_weight = cc_where(hot, w, 0.0).sum(axis=-1)
        picked = picked * row_weight
    else:
        row_weight = hot.cast(x.dtype).sum(axis=-1)
    loss = 0.0 - picked     # (an ignored row's loss is +0.0, as Paddle's, not -0.0)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    total = row_weight.sum()
    return loss.sum() / (total + (total == 0.0).cast(total.dtype))


def softplus(x, beta=1, threshold=20, name=None) -> Tensor:
    """Paddle's `softplus`: `log(1 + exp(beta * x)) / beta`, and `x` itself where
    `beta * x > threshold`. The exp sees 0 there, so an unselected branch never overflows
    (its NaN would reach the gradient through the where)."""
    x = _as_tensor(x)
    if dkind(x.dtype) != "f":
        raise TraceError(f"softplus needs a float input, not {x.dtype}", _tr.user_loc())
    beta, threshold = float(beta), float(threshold)
    (x,), half = in_float32([x])
    xb = x * beta if beta != 1.0 else x
    linear = xb > threshold
    soft = cc_where(linear, 0.0, xb).exp().log1p()
    if beta != 1.0:
        soft = soft / beta
    return rounded(cc_where(linear, x, soft), half)
# -- end of issue 24's section --------------------------------------------------------------



def _check_user_arguments():
    for name in __all__:
        globals()[name] = user_errors(globals()[name], f"F.{name}")


_check_user_arguments()
