"""Paddle's layers (`compiler.nn.Linear`, ...), written over `nn.Layer` and the functional API.

Each layer's parameters have Paddle's layout, names and default initialisers (documented per
layer; `nn.initializer.seed(n)` makes them reproducible).
"""
from __future__ import annotations

import numpy as np

from . import functional as F
from . import initializer as I
from .layer import Layer

__all__ = ["Linear", "Sequential", "LayerList"]


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
