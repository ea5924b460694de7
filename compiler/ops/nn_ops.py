"""Neural-network primitives: gelu and layer normalisation (fused composites that keep only
compact values for their backward), row-wise softmax, one_hot, conv2d and max_pool2d (with
their gradient ops, which are primitives of their own so that backends can implement them
directly).

Other composite functions (cross_entropy, linear, ...) live in `compiler/nn/functional.py` and
are built from primitives.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import scalar as S
from ..errors import DataError, ShapeError
from .registry import (ELEMENTWISE, OTHER, dkind, broadcast_shapes, defop, float_of, normalize_axes,
                       promote)
from .shape_ops import reduced_shape

# -- gelu: one elementwise op, whose backward reads only its input ----------------------------
# Written as one op (ARCHITECTURE.md §4, compact saved values): composed of primitives, gelu kept
# four full-size values for its backward (x / 2, erf(x / sqrt 2) + 1, exp(-x^2 / 2) and the output);
# as one op it keeps only its input, and `gelu_grad` recomputes what it needs per element.
# Both expressions follow the decomposed forms step by step (the same roundings on numpy).
_x, _g = S.arg(0), S.arg(1)
_SQRT_HALF = 1.0 / math.sqrt(2.0)
_TANH_K = math.sqrt(2.0 / math.pi)          # tanh form: k (x + 0.044715 x^3)
_PDF_K = 1.0 / math.sqrt(2.0 * math.pi)     # the standard normal density's factor


def _gelu_expr(attrs):
    if attrs.get("approximate", False):
        inner = (_x + _x * _x * _x * 0.044715) * _TANH_K
        return _x * 0.5 * (S.call("tanh", inner) + 1.0)
    return _x * 0.5 * (S.call("erf", _x * _SQRT_HALF) + 1.0)


def _gelu_grad_expr(attrs):
    """d gelu / dx times the incoming gradient (arg 1)."""
    if attrs.get("approximate", False):
        t = S.call("tanh", (_x + _x * _x * _x * 0.044715) * _TANH_K)
        slope = (1.0 - t * t) * _TANH_K * (_x * _x * (3.0 * 0.044715) + 1.0)
        return _g * ((t + 1.0) * 0.5 + _x * 0.5 * slope)
    cdf = (S.call("erf", _x * _SQRT_HALF) + 1.0) * 0.5
    pdf = S.call("exp", -(_x * _x) * 0.5) * _PDF_K
    return _g * (cdf + _x * pdf)


def _float_unary_infer(what):
    def infer(types, **attrs):
        shape, dtype = types[0]
        if len(types) > 1:
            shape = broadcast_shapes(*(t[0] for t in types))
            if shape != tuple(types[0][0]):
                raise ShapeError(f"{what}: the gradient's shape {list(types[1][0])} doesn't "
                                 f"match the input's {list(types[0][0])}")
        return shape, float_of(promote(*(t[1] for t in types)))
    return infer


def _expr_ref(expr):
    """A reference that evaluates the scalar expression with numpy, operands converted to the
    result's float dtype first (as `expr_for` casts them for the emitters)."""
    def ref(*xs, **attrs):
        dtype = float_of(promote(*(np.asarray(x).dtype for x in xs)))
        args = [np.asarray(x).astype(dtype, copy=False) for x in xs]
        with np.errstate(all="ignore"):
            return np.asarray(S.evaluate(expr(attrs), args)).astype(dtype, copy=False)
    return ref


def _gelu_vjp(ctx, g):
    x = ctx.inputs[0]
    return (x.primitive("gelu_grad", g, approximate=ctx.attrs.get("approximate", False)),)


defop("gelu", ELEMENTWISE, _float_unary_infer("gelu"), _expr_ref(_gelu_expr),
      expr=_gelu_expr, vjp={"input": _gelu_vjp},
      doc="gelu(x, approximate): x * Phi(x) (erf form) or its tanh approximation")
defop("gelu_grad", ELEMENTWISE, _float_unary_infer("gelu_grad"), _expr_ref(_gelu_grad_expr),
      expr=_gelu_grad_expr, doc="gelu_grad(x, g, approximate): g * gelu'(x)")

# -- layer_norm: statistics, then one elementwise op -----------------------------------------
# `F.layer_norm` computes each row's mean and 1/std with primitives (mean, a square of the
# centred row, mean, sqrt), without gradient, then this op: ((x - mean) * rstd) * w + b,
# elementwise with `mean`/`rstd` ([..., 1, ...]) broadcast along the row. Its VJP is the
# derivative of the whole normalisation (mean and rstd included, as PyTorch's
# native_layer_norm_backward), so it keeps only x, mean, rstd and the weight (the per-row
# statistics are n times smaller than x); the normalised input is recomputed from them.
# Contract: `mean` and `rstd` are x's statistics over its last `n` axes; they get no gradient.


def _layer_norm_expr(attrs):
    out = (_x - S.arg(1)) * S.arg(2)
    k = 3
    if attrs.get("weight", False):
        out, k = out * S.arg(k), k + 1
    if attrs.get("bias", False):
        out = out + S.arg(k)
    return out


def _layer_norm_infer(types, n, weight=False, bias=False):
    if len(types) != 3 + bool(weight) + bool(bias):
        raise ShapeError("layer_norm takes x, mean, rstd and the weight and bias it names")
    shape = tuple(types[0][0])
    if not 0 <= n <= len(shape):
        raise ShapeError(f"layer_norm: can't normalise {n} axes of a rank-{len(shape)} tensor")
    for what, (s, _) in zip(("mean", "rstd"), types[1:3]):
        if broadcast_shapes(shape, s) != shape or any(d != 1 for d in tuple(s)[-n:] if n):
            raise ShapeError(f"layer_norm: {what} of shape {list(s)} isn't one value per row "
                             f"of {list(shape)} (size 1 along its last {n} axes)")
    out = broadcast_shapes(*(t[0] for t in types))
    if out != shape:
        raise ShapeError(f"layer_norm: weight or bias of shape {list(types[3][0])} doesn't "
                         f"broadcast to {list(shape)}")
    return shape, float_of(promote(*(t[1] for t in types)))


def _layer_norm_vjp(ctx, g):
    x, mean, rstd = ctx.inputs[:3]
    n, has_w = ctx.attrs["n"], ctx.attrs.get("weight", False)
    w = ctx.inputs[3] if has_w else None
    axes = list(range(x.ndim - n, x.ndim))
    # recomputed from the compact saved values, never kept from the forward pass
    xhat = x.primitive("layer_norm", mean, rstd, n=n)
    gw = g * w if w is not None else g
    dx = dw = db = None
    if ctx.needs_grad[0]:
        # d/dx of (x - mean) * rstd through mean and rstd: rstd (gw - mean(gw) - xhat
        # mean(gw xhat)), the rows' means over the normalised axes
        c1 = gw.mean(axis=axes, keepdim=True)
        c2 = (gw * xhat).mean(axis=axes, keepdim=True)
        dx = (gw - c1 - xhat * c2) * rstd
    if has_w and ctx.needs_grad[3]:
        dw = g * xhat            # summed to the weight's shape by the autodiff pass
    if ctx.attrs.get("bias", False) and ctx.needs_grad[-1]:
        db = g
    grads = [dx, None, None] + ([dw] if has_w else []) + \
        ([db] if ctx.attrs.get("bias", False) else [])
    return tuple(grads)


defop("layer_norm", ELEMENTWISE, _layer_norm_infer, _expr_ref(_layer_norm_expr),
      expr=_layer_norm_expr, vjp={"input": _layer_norm_vjp},
      doc="layer_norm(x, mean, rstd[, weight][, bias], n): ((x - mean) * rstd) * w + b")

# -- softmax / log_softmax along one axis ---------------------------------------------------


def _rowwise_infer(types, axis):
    shape, dtype = types[0]
    normalize_axes(axis, len(shape))
    if dkind(dtype) != "f":
        raise ShapeError("softmax needs a floating-point input")
    return shape, dtype


def _softmax_ref(x, axis):
    if x.size == 0:  # an empty axis (or no rows): nothing to normalize
        return x.copy()
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax_ref(x, axis):
    if x.size == 0:
        return x.copy()
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _softmax_vjp(ctx, g):
    y, axis = ctx.out, ctx.attrs["axis"]
    return (y * (g - (g * y).sum(axis=axis, keepdim=True)),)


def _log_softmax_vjp(ctx, g):
    y, axis = ctx.out, ctx.attrs["axis"]
    return (g - y.exp() * g.sum(axis=axis, keepdim=True),)


def _row_scratch(count):
    """Scratch of a row-wise op: `count` arrays of one value per row (the max, the sum)."""
    def scratch(types, out, axis):
        shape, dtype = types[0]
        return [(reduced_shape(shape, axis, True), dtype)] * count
    return scratch


# The references' steps in the same order, into `out` (bit-identical), with the row max and
# sum in scratch. log_softmax computes `x - max` twice instead of keeping a full-size copy.
def _softmax_into(out, x, axis, scratch):
    (m,) = scratch
    if x.size:
        np.max(x, axis=axis, keepdims=True, out=m)
        np.exp(np.subtract(x, m, out=out), out=out)
        np.divide(out, np.sum(out, axis=axis, keepdims=True, out=m), out=out)


def _log_softmax_into(out, x, axis, scratch):
    m, s = scratch
    if x.size:
        np.max(x, axis=axis, keepdims=True, out=m)
        np.exp(np.subtract(x, m, out=out), out=out)
        np.log(np.sum(out, axis=axis, keepdims=True, out=s), out=s)
        np.subtract(np.subtract(x, m, out=out), s, out=out)


# softmax_ overwrites its input: its VJP reads only the output.
defop("softmax", OTHER, _rowwise_infer, _softmax_ref, vjp={"output": _softmax_vjp},
      into=_softmax_into, scratch=_row_scratch(1), inplace="softmax_")
defop("log_softmax", OTHER, _rowwise_infer, _log_softmax_ref,
      vjp={"output": _log_softmax_vjp}, into=_log_softmax_into, scratch=_row_scratch(2))


def _one_hot_infer(types, num_classes, dtype, ignore_index=None):
    shape, d = types[0]
    if dkind(d) not in "iu":
        raise ShapeError("one_hot needs integer labels")
    return tuple(shape) + (num_classes,), np.dtype(dtype)


def bad_label(labels: np.ndarray, num_classes: int, ignore_index=None):
    """(value, position) of the first label outside [0, num_classes) that isn't
    `ignore_index`, or None."""
    bad = (labels < 0) | (labels >= num_classes)
    if ignore_index is not None:
        bad &= labels != ignore_index
    if not bad.any():
        return None
    pos = tuple(int(i) for i in np.argwhere(bad)[0])
    return int(labels[pos]), list(pos)


def label_range_message(value, pos, num_classes, ignore_index=None) -> str:
    allowed = f"0 to {num_classes - 1}"
    if ignore_index is not None:
        allowed += f", or ignore_index={ignore_index}"
    return (f"class label {value} at position {pos} is out of range for {num_classes} "
            f"classes (allowed: {allowed})")


def _one_hot_ref(labels, num_classes, dtype, ignore_index=None):
    """Rows of `ignore_index` are all zeros. Labels are data: an out-of-range one raises
    `DataError` here, and the driver makes sure no caller's array was written yet."""
    labels = np.asarray(labels)
    found = bad_label(labels, num_classes, ignore_index)
    if found is not None:
        raise DataError(label_range_message(*found, num_classes, ignore_index))
    hot = labels[..., None] == np.arange(num_classes)
    if ignore_index is not None and 0 <= ignore_index < num_classes:
        hot &= (labels != ignore_index)[..., None]
    return hot.astype(dtype)


def _one_hot_into(out, labels, num_classes, dtype, ignore_index=None, scratch=()):
    (classes,) = scratch
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        found = bad_label(labels, num_classes, ignore_index)  # (the error path may allocate)
        if found is not None:
            raise DataError(label_range_message(*found, num_classes, ignore_index))
    np.equal(labels[..., None], _iota(classes), out=out, casting="unsafe")
    if ignore_index is not None and 0 <= ignore_index < num_classes:
        out[..., ignore_index] = 0  # its rows had their one there


defop("one_hot", OTHER, _one_hot_infer, _one_hot_ref, into=_one_hot_into,
      scratch=lambda types, out, num_classes, **kw: [((num_classes,), np.int64)],
      doc="one_hot(labels) [..., num_classes]; checks each label's range (DataError)")

# -- conv2d (NCHW, weights OIHW, groups=1; padding (top, bottom, left, right)) -------------


def conv_out_size(size, k, stride, pad, dilation):
    """`pad` is the total padding of the axis (both sides)."""
    return (size + pad - dilation * (k - 1) - 1) // stride + 1


def _conv2d_infer(types, stride, padding, dilation):
    (sx, dx), (sw, dw) = types
    if len(sx) != 4 or len(sw) != 4:
        raise ShapeError(f"conv2d expects x [N,C,H,W] and weight [O,C,kH,kW], got {list(sx)} "
                         f"and {list(sw)}")
    if sx[1] != sw[1]:
        raise ShapeError(f"conv2d: input has {sx[1]} channels, weight expects {sw[1]}")
    if len(padding) != 4 or min(padding) < 0 or min(stride) < 1 or min(dilation) < 1:
        raise ShapeError(f"conv2d: bad stride {list(stride)}, padding {list(padding)} or "
                         f"dilation {list(dilation)}")
    oh = conv_out_size(sx[2], sw[2], stride[0], padding[0] + padding[1], dilation[0])
    ow = conv_out_size(sx[3], sw[3], stride[1], padding[2] + padding[3], dilation[1])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"conv2d: kernel {list(sw[2:])} is larger than the padded input")
    return (sx[0], sw[0], oh, ow), np.result_type(dx, dw)


def _windows(xp, kh, kw, stride, dilation, oh, ow):
    """[N, C, OH, OW, kh, kw] strided view of the padded input."""
    win = sliding_window_view(xp, ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1),
                              axis=(2, 3))
    win = win[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]
    return win[:, :, :oh, :ow]


def _pad(x, padding, value=0):
    """`padding`: (h, w) on both sides, or (top, bottom, left, right)."""
    top, bottom, left, right = padding if len(padding) == 4 else \
        (padding[0], padding[0], padding[1], padding[1])
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def _conv2d_ref(x, w, stride, padding, dilation):
    (_, _, oh, ow), _ = _conv2d_infer([(x.shape, x.dtype), (w.shape, w.dtype)],
                                      stride, padding, dilation)
    win = _windows(_pad(x, padding), w.shape[2], w.shape[3], stride, dilation, oh, ow)
    out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))  # [N, OH, OW, O]
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def _conv2d_grad_input_ref(g, w, x_shape, stride, padding, dilation):
    n, c, h, wd = x_shape
    ph, _, pw, _ = padding
    gx = np.zeros((n, c, h + padding[0] + padding[1], wd + padding[2] + padding[3]),
                  dtype=g.dtype)
    oh, ow = g.shape[2], g.shape[3]
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            r0, c0 = i * dilation[0], j * dilation[1]
            contrib = np.tensordot(g, w[:, :, i, j], axes=([1], [0]))  # [N, OH, OW, C]
            gx[:, :, r0:r0 + stride[0] * oh:stride[0], c0:c0 + stride[1] * ow:stride[1]] += \
                contrib.transpose(0, 3, 1, 2)
    return gx[:, :, ph:ph + h, pw:pw + wd]


def _conv2d_grad_weight_ref(x, g, w_shape, stride, padding, dilation):
    win = _windows(_pad(x, padding), w_shape[2], w_shape[3], stride, dilation,
                   g.shape[2], g.shape[3])
    return np.tensordot(g, win, axes=([0, 2, 3], [0, 2, 3]))  # [O, C, kh, kw]


def _conv2d_vjp(ctx, g):
    x, w = ctx.inputs
    attrs = dict(stride=ctx.attrs["stride"], padding=ctx.attrs["padding"],
                 dilation=ctx.attrs["dilation"])
    gx = g.primitive("conv2d_grad_input", w, x_shape=x.shape, **attrs) \
        if ctx.needs_grad[0] else None
    gw = x.primitive("conv2d_grad_weight", g, w_shape=w.shape, **attrs) \
        if ctx.needs_grad[1] else None
    return gx, gw


# -- the conv ops into planned memory: the references' steps (np.pad, the copies tensordot
# makes, one np.dot) with every temporary in the node's workspace, so results are identical.


def _padded_shape(shape, padding):
    n, c, h, w = shape
    return (n, c, h + padding[0] + padding[1], w + padding[2] + padding[3])


def _pad_into(xp, x, padding, value=0):
    """`_pad(x, padding, value)` into the scratch array `xp`."""
    top, _, left, _ = padding
    xp.fill(value)
    xp[:, :, top:top + x.shape[2], left:left + x.shape[3]] = x


def _conv2d_scratch(types, out, stride, padding, dilation):
    (sx, dx), (sw, _) = types
    n, o, oh, ow = out[0]
    rows, k = n * oh * ow, sw[1] * sw[2] * sw[3]
    pad = [(_padded_shape(sx, padding), dx)] if any(padding) else []
    return pad + [((rows, k), dx), ((k, o), dx), ((rows, o), dx)]


def _conv2d_into(out, x, w, stride, padding, dilation, scratch):
    if not x.dtype == w.dtype == out.dtype:
        return NotImplemented
    *pad, cols, wt, res = scratch
    n, o, oh, ow = out.shape
    c, kh, kw = w.shape[1:]
    if pad:
        _pad_into(pad[0], x, padding)
    win = _windows(pad[0] if pad else x, kh, kw, stride, dilation, oh, ow)
    np.copyto(cols.reshape(n, oh, ow, c, kh, kw), win.transpose(0, 2, 3, 1, 4, 5))
    np.copyto(wt.reshape(c, kh, kw, o), w.transpose(1, 2, 3, 0))
    np.dot(cols, wt, out=res)
    np.copyto(out, res.reshape(n, oh, ow, o).transpose(0, 3, 1, 2))


def _conv2d_grad_input_scratch(types, out, x_shape, stride, padding, dilation):
    (sg, dg), (sw, _) = types
    n, o, oh, ow = sg
    rows, c = n * oh * ow, sw[1]
    pad = [(_padded_shape(x_shape, padding), dg)] if any(padding) else []
    return pad + [((rows, o), dg), ((o, c), dg), ((rows, c), dg)]


def _conv2d_grad_input_into(out, g, w, x_shape, stride, padding, dilation, scratch):
    if not g.dtype == w.dtype == out.dtype:
        return NotImplemented
    *pad, gt, wij, contrib = scratch
    n, o, oh, ow = g.shape
    c = w.shape[1]
    gx = pad[0] if pad else out
    gx.fill(0)
    np.copyto(gt.reshape(n, oh, ow, o), g.transpose(0, 2, 3, 1))
    part = contrib.reshape(n, oh, ow, c).transpose(0, 3, 1, 2)
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            r0, c0 = i * dilation[0], j * dilation[1]
            np.copyto(wij, w[:, :, i, j])
            np.dot(gt, wij, out=contrib)
            region = gx[:, :, r0:r0 + stride[0] * oh:stride[0], c0:c0 + stride[1] * ow:stride[1]]
            np.add(region, part, out=region)
    if pad:
        np.copyto(out, gx[:, :, padding[0]:padding[0] + x_shape[2],
                          padding[2]:padding[2] + x_shape[3]])


def _conv2d_grad_weight_scratch(types, out, w_shape, stride, padding, dilation):
    (sx, dx), (sg, _) = types
    n, o, oh, ow = sg
    rows, k = n * oh * ow, w_shape[1] * w_shape[2] * w_shape[3]
    pad = [(_padded_shape(sx, padding), dx)] if any(padding) else []
    return pad + [((o, rows), dx), ((rows, k), dx)]


def _conv2d_grad_weight_into(out, x, g, w_shape, stride, padding, dilation, scratch):
    if not x.dtype == g.dtype == out.dtype:
        return NotImplemented
    *pad, gt, cols = scratch
    n, o, oh, ow = g.shape
    c, kh, kw = w_shape[1:]
    if pad:
        _pad_into(pad[0], x, padding)
    win = _windows(pad[0] if pad else x, kh, kw, stride, dilation, oh, ow)
    np.copyto(gt.reshape(o, n, oh, ow), g.transpose(1, 0, 2, 3))
    np.copyto(cols.reshape(n, oh, ow, c, kh, kw), win.transpose(0, 2, 3, 1, 4, 5))
    np.dot(gt, cols, out=out.reshape(o, c * kh * kw))


defop("conv2d", OTHER, _conv2d_infer, _conv2d_ref, vjp={"input": _conv2d_vjp},
      into=_conv2d_into, scratch=_conv2d_scratch)
defop("conv2d_grad_input", OTHER,
      lambda types, x_shape, **kw: (tuple(x_shape), types[0][1]), _conv2d_grad_input_ref,
      into=_conv2d_grad_input_into, scratch=_conv2d_grad_input_scratch)
defop("conv2d_grad_weight", OTHER,
      lambda types, w_shape, **kw: (tuple(w_shape), types[0][1]), _conv2d_grad_weight_ref,
      into=_conv2d_grad_weight_into, scratch=_conv2d_grad_weight_scratch)

# -- max_pool2d (padding (top, bottom, left, right)) ----------------------------------------


def _pool_infer(types, kernel, stride, padding):
    shape, dtype = types[0]
    if len(shape) != 4:
        raise ShapeError(f"max_pool2d expects [N,C,H,W], got {list(shape)}")
    if len(padding) != 4 or min(padding) < 0 or min(stride) < 1 or min(kernel) < 1:
        raise ShapeError(f"max_pool2d: bad kernel {list(kernel)}, stride {list(stride)} or "
                         f"padding {list(padding)}")
    oh = conv_out_size(shape[2], kernel[0], stride[0], padding[0] + padding[1], 1)
    ow = conv_out_size(shape[3], kernel[1], stride[1], padding[2] + padding[3], 1)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"max_pool2d: kernel {list(kernel)} is larger than the input")
    return (shape[0], shape[1], oh, ow), dtype


def _pool_windows(x, kernel, stride, padding):
    (_, _, oh, ow), _ = _pool_infer([(x.shape, x.dtype)], kernel, stride, padding)
    # Padding never wins a window: -inf for floats, the dtype's minimum for integers.
    xp = _pad(x, padding, _pool_low(x.dtype)) if any(padding) else x
    return _windows(xp, kernel[0], kernel[1], stride, (1, 1), oh, ow)


def _max_pool2d_ref(x, kernel, stride, padding):
    return _pool_windows(x, kernel, stride, padding).max(axis=(4, 5))


def _max_pool2d_grad_ref(x, g, kernel, stride, padding):
    """Route each output gradient to the first maximum of its window (PyTorch's rule)."""
    win = _pool_windows(x, kernel, stride, padding)
    n, c, oh, ow, kh, kw = win.shape
    arg = win.reshape(n, c, oh, ow, kh * kw).argmax(axis=-1)
    rows = np.arange(oh)[:, None] * stride[0] + arg // kw - padding[0]
    cols = np.arange(ow)[None, :] * stride[1] + arg % kw - padding[2]
    gx = np.zeros_like(x)
    ni, ci = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    np.add.at(gx, (ni[:, :, None, None], ci[:, :, None, None], rows, cols), g)
    return gx


def _max_pool2d_vjp(ctx, g):
    return (ctx.inputs[0].primitive("max_pool2d_grad", g, **ctx.attrs),)


def _pool_low(dtype):
    return -np.inf if dkind(dtype) == "f" else np.iinfo(dtype).min if dkind(dtype) in "iu" \
        else False


def _max_pool2d_into(out, x, kernel, stride, padding, scratch):
    if any(padding):
        _pad_into(scratch[0], x, padding, _pool_low(x.dtype))
    xp = scratch[0] if any(padding) else x
    win = _windows(xp, kernel[0], kernel[1], stride, (1, 1), out.shape[2], out.shape[3])
    np.max(win, axis=(4, 5), out=out)


defop("max_pool2d", OTHER, _pool_infer, _max_pool2d_ref, vjp={"input": _max_pool2d_vjp},
      into=_max_pool2d_into,
      scratch=lambda types, out, kernel, stride, padding: (
          [(_padded_shape(types[0][0], padding), types[0][1])] if any(padding) else []))
def _iota(a):
    """Fill the int64 array `a` (any shape, contiguous) with 0, 1, 2, ... without a temporary."""
    flat = a.reshape(-1)
    flat.fill(1)
    flat[:1] = 0
    np.cumsum(flat, out=flat)
    return a


def _max_pool2d_grad_scratch(types, out, kernel, stride, padding):
    (sx, dx), (sg, _) = types
    n, c, oh, ow = sg
    i64 = np.dtype(np.int64)
    pad = [(_padded_shape(sx, padding), dx)] if any(padding) else []
    return pad + [((n, c, oh, ow, kernel[0] * kernel[1]), dx)] + [((n, c, oh, ow), i64)] * 3 \
        + [((n, 1, 1, 1), i64), ((1, c, 1, 1), i64), ((oh, 1), i64), ((ow,), i64)]


def _max_pool2d_grad_into(out, x, g, kernel, stride, padding, scratch):
    if not x.dtype == g.dtype == out.dtype:
        return NotImplemented
    *pad, win, arg, rows, cols, ni, ci, oh_i, ow_i = scratch
    if pad:
        _pad_into(pad[0], x, padding, _pool_low(x.dtype))
    n, c, oh, ow = g.shape
    kh, kw = kernel
    np.copyto(win.reshape(n, c, oh, ow, kh, kw),
              _windows(pad[0] if pad else x, kh, kw, stride, (1, 1), oh, ow))
    np.argmax(win, axis=-1, out=arg)
    # rows = arange(oh)[:, None] * stride[0] + arg // kw - padding[0]; cols likewise
    np.floor_divide(arg, kw, out=rows)
    np.add(rows, np.multiply(_iota(oh_i), stride[0], out=oh_i), out=rows)
    np.subtract(rows, padding[0], out=rows)
    np.remainder(arg, kw, out=cols)
    np.add(cols, np.multiply(_iota(ow_i), stride[1], out=ow_i), out=cols)
    np.subtract(cols, padding[2], out=cols)
    h, w = x.shape[2:]
    if rows.min() < 0 or cols.min() < 0 or rows.max() >= h or cols.max() >= w:
        return NotImplemented  # a window of -inf picked padding: the reference's index wraps
    # One flat index instead of four broadcast ones, which np.add.at would copy in full;
    # the same positions in the same order, so the same sums.
    np.add(np.multiply(rows, w, out=rows), cols, out=rows)
    np.add(rows, np.multiply(_iota(ni), c * h * w, out=ni), out=rows)
    np.add(rows, np.multiply(_iota(ci), h * w, out=ci), out=rows)
    out.fill(0)
    np.add.at(out.reshape(-1), rows, g)


defop("max_pool2d_grad", OTHER, lambda types, **kw: types[0], _max_pool2d_grad_ref,
      into=_max_pool2d_grad_into, scratch=_max_pool2d_grad_scratch)
