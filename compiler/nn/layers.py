"""Paddle's layers (`compiler.nn.Linear`, ...), written over `nn.Layer` and the functional API.

Each layer's parameters have Paddle's layout, names and default initialisers (documented per
layer; `nn.initializer.seed(n)` makes them reproducible).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import tracer as _tr
from ..errors import ShapeError, TraceError
from ..ops.registry import dkind
from ..creation import concat
from ..tensor import Tensor, to_tensor
from ..tracer import no_grad
from . import functional as F
from . import initializer as I
from .layer import Layer

__all__ = ["Linear", "Sequential", "LayerList", "Conv2D", "BatchNorm1D", "BatchNorm2D",
           "LayerNorm",
           "Embedding", "Dropout", "ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax",
           "ELU", "LeakyReLU", "Hardtanh", "Silu", "Identity", "Flatten", "MaxPool2D",
           "MultiHeadAttention", "TransformerEncoderLayer", "TransformerEncoder"]


class Linear(Layer):
    """y = x @ weight + bias. `weight` is [in_features, out_features] (Paddle's layout, the
    transpose of PyTorch's), initialised XavierUniform (U(-a, a), a = sqrt(6 / (in + out)));
    `bias` [out_features], zeros. `bias_attr=False`: no bias."""

    def __init__(self, in_features: int, out_features: int, weight_attr=None, bias_attr=None,
                 name=None):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = self.create_parameter([in_features, out_features], attr=weight_attr)
        self.bias = self.create_parameter([out_features], attr=bias_attr, is_bias=True)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"dtype={self._dtype}"


class Sequential(Layer):
    """Layers applied in order. `Sequential(l1, l2)` names them "0", "1" (state_dict keys
    `0.weight`, as Paddle's); `Sequential(("fc", l1), ("act", l2))` names them."""

    def __init__(self, *layers):
        super().__init__()
        if len(layers) > 0 and isinstance(layers[0], (list, tuple)):
            for name, layer in layers:
                self.add_sublayer(name, layer)
        else:
            for i, layer in enumerate(layers):
                self.add_sublayer(str(i), layer)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(*list(self._sub_layers.values())[index])
        if isinstance(index, str):
            return self._sub_layers[index]
        return list(self._sub_layers.values())[index]

    def __len__(self):
        return len(self._sub_layers)

    def __iter__(self):
        return iter(self._sub_layers.values())

    def forward(self, input):
        for layer in self._sub_layers.values():
            input = layer(input)
        return input


class LayerList(Layer):
    """A list of sublayers (named "0", "1", ...): indexing, `append`, `extend`, `insert`,
    iteration; its layers' parameters are the LayerList's."""

    def __init__(self, sublayers=None):
        super().__init__()
        for i, layer in enumerate(sublayers or ()):
            self.add_sublayer(str(i), layer)

    def _index(self, i):
        n = len(self._sub_layers)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for a LayerList of {n}")
        return str(i % n)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return LayerList(list(self._sub_layers.values())[index])
        return self._sub_layers[self._index(index)]

    def __setitem__(self, index, layer):
        self.add_sublayer(self._index(index), layer)

    def __delitem__(self, index):
        layers = list(self._sub_layers.values())
        del layers[index]
        self._sub_layers.clear()
        for i, layer in enumerate(layers):
            self._sub_layers[str(i)] = layer
        self._changed()

    def __len__(self):
        return len(self._sub_layers)

    def __iter__(self):
        return iter(list(self._sub_layers.values()))

    def append(self, sublayer):
        self.add_sublayer(str(len(self)), sublayer)
        return self

    def insert(self, index, sublayer):
        layers = list(self._sub_layers.values())
        layers.insert(index, sublayer)
        self._sub_layers.clear()
        for i, layer in enumerate(layers):
            self._sub_layers[str(i)] = layer
        self._changed()

    def extend(self, sublayers):
        for layer in sublayers:
            self.append(layer)
        return self


# -- activations and shape layers: the functional forms as layers ------------------------------
class ReLU(Layer):
    def forward(self, x):
        return F.relu(x)


class GELU(Layer):
    """`approximate=True` (or "tanh"): the tanh approximation."""

    def __init__(self, approximate=False, name=None):
        super().__init__()
        self.approximate = approximate in (True, "tanh")

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)


class Tanh(Layer):
    def forward(self, x):
        return x.tanh()


class Sigmoid(Layer):
    def forward(self, x):
        return F.sigmoid(x)


class Silu(Layer):
    def forward(self, x):
        return F.silu(x)


class Softmax(Layer):
    def __init__(self, axis: int = -1, name=None):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return F.softmax(x, axis=self.axis)


class LogSoftmax(Layer):
    def __init__(self, axis: int = -1, name=None):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        return F.log_softmax(x, axis=self.axis)


class ELU(Layer):
    def __init__(self, alpha: float = 1.0, name=None):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, self.alpha)


class LeakyReLU(Layer):
    def __init__(self, negative_slope: float = 0.01, name=None):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)


class Hardtanh(Layer):
    def __init__(self, min: float = -1.0, max: float = 1.0, name=None):
        super().__init__()
        self.min, self.max = min, max

    def forward(self, x):
        return F.hardtanh(x, self.min, self.max)


class Identity(Layer):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Flatten(Layer):
    """Paddle's default flattens from axis 1 (the batch axis stays)."""

    def __init__(self, start_axis: int = 1, stop_axis: int = -1):
        super().__init__()
        self.start_axis, self.stop_axis = start_axis, stop_axis

    def forward(self, x):
        return x.flatten(self.start_axis, self.stop_axis)


class MaxPool2D(Layer):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 return_mask=False, data_format="NCHW", name=None):
        super().__init__()
        if return_mask or data_format != "NCHW":
            raise TraceError("MaxPool2D: only data_format='NCHW' without return_mask",
                             _tr.user_loc())
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode = ceil_mode

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode)


# -- dropout -----------------------------------------------------------------------------------
def _new_seed(layer):
    """A 0-d uint64 buffer (not in state_dict): the layer's dropout seed, drawn from the
    initializers' generator (nn.initializer.seed makes it reproducible). Each training call
    advances it in place, so every step draws a new mask without retracing."""
    seed = np.array(I.generator().integers(0, 2 ** 63), np.uint64)
    layer.register_buffer("_dropout_seed", seed, persistable=False)


def _dropout(layer, x, p):
    seed = layer._dropout_seed
    out = F.dropout(x, p, training=True, seed=seed)
    with no_grad():
        seed.add_(1)
    return out


class Dropout(Layer):
    """Paddle's "upscale_in_train" dropout (F.dropout) while training; the identity in eval
    mode. The mask comes from the layer's own seed buffer, advanced by every training call
    (a compiled step draws a new mask each call, no retrace)."""

    def __init__(self, p: float = 0.5, axis=None, mode: str = "upscale_in_train", name=None):
        super().__init__()
        if axis is not None or mode != "upscale_in_train":
            raise TraceError("Dropout: only axis=None, mode='upscale_in_train' are supported",
                             _tr.user_loc())
        if not 0.0 <= p <= 1.0:
            raise TraceError(f"Dropout: p={p} is not in [0, 1]", _tr.user_loc())
        self.p = p
        _new_seed(self)

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        return _dropout(self, x, self.p)

    def extra_repr(self):
        return f"p={self.p}"


# -- convolution and normalisation -------------------------------------------------------------
class Conv2D(Layer):
    """NCHW convolution (F.conv2d). `weight` [out_channels, in_channels / groups, kh, kw],
    initialised Normal(0, sqrt(2 / (in_channels * kh * kw))) as Paddle's; `bias`
    [out_channels], zeros (`bias_attr=False`: none). `groups > 1` convolves each group of
    channels separately and concatenates."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, padding_mode="zeros", weight_attr=None, bias_attr=None,
                 data_format="NCHW"):
        super().__init__()
        if data_format != "NCHW" or padding_mode != "zeros":
            raise TraceError("Conv2D: only data_format='NCHW' and padding_mode='zeros' are "
                             "supported", _tr.user_loc())
        if in_channels % groups or out_channels % groups:
            raise ShapeError(f"Conv2D: in_channels {in_channels} and out_channels "
                             f"{out_channels} must be divisible by groups {groups}",
                             _tr.user_loc())
        kh, kw = F._pair(kernel_size, "Conv2D kernel_size")
        self._in_channels, self._out_channels, self._groups = in_channels, out_channels, groups
        self._kernel_size = [kh, kw]
        self._stride, self._padding, self._dilation = stride, padding, dilation
        std = math.sqrt(2.0 / (in_channels * kh * kw))
        self.weight = self.create_parameter([out_channels, in_channels // groups, kh, kw],
                                            attr=weight_attr,
                                            default_initializer=I.Normal(0.0, std))
        self.bias = self.create_parameter([out_channels], attr=bias_attr, is_bias=True)

    def forward(self, x):
        g = self._groups
        w, b = self.weight, self.bias
        if g == 1:
            return F.conv2d(x, w, b, self._stride, self._padding, self._dilation)
        ci, co = self._in_channels // g, self._out_channels // g
        parts = [F.conv2d(x[:, k * ci:(k + 1) * ci], w[k * co:(k + 1) * co], None,
                          self._stride, self._padding, self._dilation) for k in range(g)]
        out = concat(parts, axis=1)
        return out if b is None else out + b.reshape([1, -1, 1, 1])

    def extra_repr(self):
        return f"{self._in_channels}, {self._out_channels}, kernel_size={self._kernel_size}"


def _batch_norm(x, running_mean, running_var, weight, bias, training, momentum, epsilon):
    """Batch normalisation over axis 1 with Tensor ops. Training: the batch's mean and biased
    variance normalise x, and the running statistics are updated in place with Paddle's rule
    (running = momentum * running + (1 - momentum) * batch, the biased variance); otherwise
    the running statistics normalise."""
    c = x.shape[1]
    axes = [0] + list(range(2, x.ndim))
    shape = [1, c] + [1] * (x.ndim - 2)
    if training:
        mean = x.mean(axis=axes, keepdim=True)
        centred = x - mean
        var = centred.square().mean(axis=axes, keepdim=True)
        with no_grad():
            running_mean.scale_(momentum).add_(mean.detach().reshape([c]) * (1.0 - momentum))
            running_var.scale_(momentum).add_(var.detach().reshape([c]) * (1.0 - momentum))
    else:
        centred = x - running_mean.reshape(shape)
        var = running_var.reshape(shape)
    out = centred * (var + epsilon).rsqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


class _BatchNormBase(Layer):
    _ranks, _formats, _layout = (4,), ("NCHW",), "NCHW"

    def __init__(self, num_features, momentum=0.9, epsilon=1e-5, weight_attr=None,
                 bias_attr=None, data_format=None, use_global_stats=None, name=None):
        super().__init__()
        if data_format is not None and data_format not in self._formats:
            raise TraceError(f"{type(self).__name__}: only data_format={self._formats[0]!r} "
                             "is supported", _tr.user_loc())
        self._num_features, self._momentum, self._epsilon = num_features, momentum, epsilon
        self._use_global_stats = use_global_stats
        c = [num_features]
        # (locals, not self.weight: a layer built inside a trace reads its parameters as
        # Tensors)
        weight = self.create_parameter(c, attr=None if weight_attr is False else weight_attr,
                                       default_initializer=I.Constant(1.0))
        bias = self.create_parameter(c, attr=None if bias_attr is False else bias_attr,
                                     is_bias=True)
        weight.stop_gradient = weight_attr is False or weight.stop_gradient
        bias.stop_gradient = bias_attr is False or bias.stop_gradient
        mean = self.create_parameter(c, default_initializer=I.Constant(0.0))
        variance = self.create_parameter(c, default_initializer=I.Constant(1.0))
        mean.stop_gradient = variance.stop_gradient = True
        self.weight, self.bias, self._mean, self._variance = weight, bias, mean, variance

    def forward(self, x):
        name = type(self).__name__
        if x.ndim not in self._ranks:
            raise ShapeError(f"{name} expects {self._layout} input, got shape {x.shape}",
                             _tr.user_loc())
        if x.shape[1] != self._num_features:
            raise ShapeError(f"{name}({self._num_features}): input has {x.shape[1]} "
                             "channels", _tr.user_loc())
        training = self.training and not self._use_global_stats
        return _batch_norm(x, self._mean, self._variance, self.weight, self.bias, training,
                           self._momentum, self._epsilon)

    def extra_repr(self):
        return f"num_features={self._num_features}, momentum={self._momentum}, " \
               f"epsilon={self._epsilon}"


class BatchNorm1D(_BatchNormBase):
    """BatchNorm2D's rules (parameters, running statistics updated in place, modes) over
    [N, C] or [N, C, L] input, normalising over N (and L)."""
    _ranks, _formats, _layout = (2, 3), ("NCL", "NC"), "[N, C] or [N, C, L]"


class BatchNorm2D(_BatchNormBase):
    """Batch normalisation of NCHW input over (N, H, W). Parameters as Paddle's: `weight`
    (ones) and `bias` (zeros), and `_mean` (zeros) and `_variance` (ones), the running
    statistics: parameters with `stop_gradient=True` (no optimizer updates them), in
    `state_dict()` under those names. In training mode a call normalises with the batch's
    statistics and updates `_mean` and `_variance` IN PLACE: running = momentum * running +
    (1 - momentum) * batch (momentum 0.9, the biased batch variance, as Paddle); in eval mode
    (or `use_global_stats=True`) it normalises with them. `weight_attr=False` / `bias_attr=
    False`: fixed at 1 / 0, not trained."""


class LayerNorm(Layer):
    """Normalises the trailing `normalized_shape` dimensions (F.layer_norm). `weight` ones and
    `bias` zeros, as Paddle's both FLAT: [prod(normalized_shape)] (PyTorch's have the shape
    `normalized_shape`); `weight_attr=False` / `bias_attr=False`: none."""

    def __init__(self, normalized_shape, epsilon=1e-5, weight_attr=None, bias_attr=None,
                 name=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = [normalized_shape]
        self._normalized_shape = [int(d) for d in normalized_shape]
        self._epsilon = epsilon
        size = [int(np.prod(self._normalized_shape))]
        self.weight = self.create_parameter(size, attr=weight_attr,
                                            default_initializer=I.Constant(1.0))
        self.bias = self.create_parameter(size, attr=bias_attr, is_bias=True)

    def forward(self, x):
        shape = self._normalized_shape
        w, b = self.weight, self.bias
        if len(shape) > 1:
            w = None if w is None else w.reshape(shape)
            b = None if b is None else b.reshape(shape)
        return F.layer_norm(x, shape, w, b, self._epsilon)

    def extra_repr(self):
        return f"normalized_shape={self._normalized_shape}, epsilon={self._epsilon}"


class Embedding(Layer):
    """Rows of `weight` [num_embeddings, embedding_dim] (XavierUniform, as Paddle's) picked by
    integer ids. `padding_idx` (negative counts from the end): that row is zeroed at creation,
    looks up zeros and gets no gradient (F.embedding)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, sparse=False,
                 weight_attr=None, name=None):
        super().__init__()
        n = int(num_embeddings)
        if padding_idx is not None and not -n <= int(padding_idx) < n:
            raise ShapeError(f"Embedding: padding_idx must be within [-{n}, {n}), got "
                             f"{padding_idx}", _tr.user_loc())
        self._num_embeddings, self._embedding_dim = n, int(embedding_dim)
        self._padding_idx = None if padding_idx is None else int(padding_idx) % n
        weight = self.create_parameter([n, embedding_dim], attr=weight_attr)
        if self._padding_idx is not None:
            weight[self._padding_idx] = 0.0
        self.weight = weight

    def forward(self, x):
        return F.embedding(x, self.weight, self._padding_idx)

    def extra_repr(self):
        return f"{self._num_embeddings}, {self._embedding_dim}"


# -- attention ---------------------------------------------------------------------------------
def _attention_mask(mask, dtype):
    """Paddle's _convert_attention_mask: a bool or int mask keeps where True / nonzero, by
    adding (mask - 1) * 1e9 (a fully masked row stays finite); a float mask is added."""
    if not isinstance(mask, Tensor):
        mask = to_tensor(np.asarray(mask))
    if dkind(mask.dtype) in "biu":
        return (mask.cast(dtype) - 1.0) * 1e9
    return mask


class MultiHeadAttention(Layer):
    """Paddle's MultiHeadAttention: `q_proj`, `k_proj`, `v_proj`, `out_proj` Linear layers
    (Paddle's layout and XavierUniform weights, zero biases; k and v take `kdim` / `vdim`
    inputs). forward(query, key=None, value=None, attn_mask=None): inputs [batch, seq,
    embed_dim]; key and value default to query; q is scaled by head_dim ** -0.5 before q k^T;
    `attn_mask` (bool/int: True keeps; float: added) broadcasts to [batch, heads, seq_q,
    seq_k]; attention weights dropped with probability `dropout` while training. Returns the
    output, or (output, weights) with `need_weights=True`. `cache` is not supported."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, kdim=None, vdim=None,
                 need_weights=False, weight_attr=None, bias_attr=None):
        super().__init__()
        if embed_dim % num_heads:
            raise ShapeError(f"MultiHeadAttention: embed_dim {embed_dim} is not divisible by "
                             f"num_heads {num_heads}", _tr.user_loc())
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.head_dim = embed_dim // num_heads
        self.dropout, self.need_weights = dropout, need_weights
        self.q_proj = Linear(embed_dim, embed_dim, weight_attr, bias_attr)
        self.k_proj = Linear(self.kdim, embed_dim, weight_attr, bias_attr)
        self.v_proj = Linear(self.vdim, embed_dim, weight_attr, bias_attr)
        self.out_proj = Linear(embed_dim, embed_dim, weight_attr, bias_attr)
        if dropout:
            _new_seed(self)

    def _heads(self, t):
        b, s = t.shape[0], t.shape[1]
        return t.reshape([b, s, self.num_heads, self.head_dim]).transpose([0, 2, 1, 3])

    def forward(self, query, key=None, value=None, attn_mask=None, cache=None):
        if cache is not None:
            raise TraceError("MultiHeadAttention: cache is not supported", _tr.user_loc())
        key = query if key is None else key
        value = query if value is None else value
        q = self._heads(self.q_proj(query)).scale(self.head_dim ** -0.5)
        k = self._heads(self.k_proj(key))
        v = self._heads(self.v_proj(value))
        product = q.matmul(k.transpose([0, 1, 3, 2]))
        if attn_mask is not None:
            product = product + _attention_mask(attn_mask, product.dtype)
        weights = F.softmax(product, axis=-1)
        if self.dropout and self.training:
            weights = _dropout(self, weights, self.dropout)
        out = weights.matmul(v).transpose([0, 2, 1, 3])
        out = self.out_proj(out.reshape([out.shape[0], out.shape[1], self.embed_dim]))
        return (out, weights) if self.need_weights else out


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class TransformerEncoderLayer(Layer):
    """Paddle's TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.1,
    activation="relu", attn_dropout=None, act_dropout=None, normalize_before=False,
    layer_norm_eps=1e-5): `self_attn` (MultiHeadAttention), `linear1` [d_model,
    dim_feedforward], `linear2`, `norm1`, `norm2` (LayerNorm) and `dropout` (after the
    activation, p = act_dropout, default dropout), `dropout1`, `dropout2` (p = dropout);
    attn_dropout defaults to dropout. Post-norm (x = norm(x + sublayer(x))) unless
    `normalize_before`. forward(src, src_mask=None)."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, activation="relu",
                 attn_dropout=None, act_dropout=None, normalize_before=False,
                 weight_attr=None, bias_attr=None, layer_norm_eps=1e-5):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise TraceError(f"TransformerEncoderLayer: activation {activation!r} is not one "
                             f"of {sorted(_ACTIVATIONS)}", _tr.user_loc())
        self._config = dict(d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward,
                            dropout=dropout, activation=activation, attn_dropout=attn_dropout,
                            act_dropout=act_dropout, normalize_before=normalize_before,
                            weight_attr=weight_attr, bias_attr=bias_attr,
                            layer_norm_eps=layer_norm_eps)
        attn_dropout = dropout if attn_dropout is None else attn_dropout
        act_dropout = dropout if act_dropout is None else act_dropout
        self.normalize_before = normalize_before
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=attn_dropout,
                                            weight_attr=weight_attr, bias_attr=bias_attr)
        self.linear1 = Linear(d_model, dim_feedforward, weight_attr, bias_attr)
        self.dropout = Dropout(act_dropout)
        self.linear2 = Linear(dim_feedforward, d_model, weight_attr, bias_attr)
        self.norm1 = LayerNorm(d_model, layer_norm_eps)
        self.norm2 = LayerNorm(d_model, layer_norm_eps)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _ACTIVATIONS[activation]

    def forward(self, src, src_mask=None, cache=None):
        if cache is not None:
            raise TraceError("TransformerEncoderLayer: cache is not supported", _tr.user_loc())
        residual = src
        if self.normalize_before:
            src = self.norm1(src)
        src = residual + self.dropout1(self.self_attn(src, src, src, src_mask))
        if not self.normalize_before:
            src = self.norm1(src)
        residual = src
        if self.normalize_before:
            src = self.norm2(src)
        src = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = residual + self.dropout2(src)
        if not self.normalize_before:
            src = self.norm2(src)
        return src


class TransformerEncoder(Layer):
    """`num_layers` encoder layers in a LayerList `layers` (the first is `encoder_layer`, the
    others new layers of the same configuration, freshly initialised, as Paddle's), then
    `norm` if given. forward(src, src_mask=None)."""

    def __init__(self, encoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = LayerList([encoder_layer if i == 0 else
                                 type(encoder_layer)(**encoder_layer._config)
                                 for i in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, src_mask=None, cache=None):
        if cache is not None:
            raise TraceError("TransformerEncoder: cache is not supported", _tr.user_loc())
        for layer in self.layers:
            src = layer(src, src_mask)
        if self.norm is not None:
            src = self.norm(src)
        return src
