"""`compiler.nn.initializer`: how a layer fills a new parameter, as Paddle's initializers do.

Each initializer is a callable `init(shape, dtype) -> np.ndarray` drawing from one NumPy
Generator shared by all layers (`seed(n)` resets it, as `paddle.seed(n)` does Paddle's): two
runs that seed alike build identical models. The numbers differ from Paddle's (another random
generator) but the distributions are Paddle's: `Linear` and `Embedding` weights XavierUniform
with fan_in, fan_out = the weight's [rows, columns]; `Conv2D` weights Normal(0, sqrt(2 / (in_ch
* kh * kw))); every bias Constant(0); norm weights Constant(1).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["Assign", "Constant", "Normal", "TruncatedNormal", "Uniform", "XavierNormal",
           "XavierUniform", "KaimingNormal", "KaimingUniform", "seed", "generator"]

_GENERATOR = [np.random.default_rng(0)]


def seed(n: int) -> None:
    """Reset the generator every initializer (and each new `nn.Dropout`'s seed) draws from."""
    _GENERATOR[0] = np.random.default_rng(int(n))


def generator() -> np.random.Generator:
    return _GENERATOR[0]


def _fans(shape):
    """Paddle's fan_in / fan_out: [in, out] for a matrix (Paddle's Linear layout), and for a
    convolution kernel [out_ch, in_ch, kh, kw]: in_ch * kh * kw and out_ch * kh * kw."""
    shape = tuple(shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[2:]))
    return shape[1] * receptive, shape[0] * receptive


class Initializer:
    def __call__(self, shape, dtype="float32") -> np.ndarray:
        return np.asarray(self._draw(tuple(int(d) for d in shape)), np.dtype(dtype))

    def _draw(self, shape):
        raise NotImplementedError

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Constant(Initializer):
    def __init__(self, value: float = 0.0):
        self.value = value

    def _draw(self, shape):
        return np.full(shape, self.value)


class Normal(Initializer):
    def __init__(self, mean: float = 0.0, std: float = 1.0):
        self.mean, self.std = mean, std

    def _draw(self, shape):
        return generator().normal(self.mean, self.std, shape)


class TruncatedNormal(Initializer):
    """Normal(mean, std) redrawn outside [a, b] (Paddle's defaults: mean +- 2 std)."""

    def __init__(self, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0):
        self.mean, self.std, self.a, self.b = mean, std, a, b

    def _draw(self, shape):
        out = generator().normal(self.mean, self.std, shape)
        lo, hi = self.mean + self.a * self.std, self.mean + self.b * self.std
        bad = (out < lo) | (out > hi)
        while bad.any():
            out[bad] = generator().normal(self.mean, self.std, int(bad.sum()))
            bad = (out < lo) | (out > hi)
        return out


class Uniform(Initializer):
    def __init__(self, low: float = -1.0, high: float = 1.0):
        self.low, self.high = low, high

    def _draw(self, shape):
        return generator().uniform(self.low, self.high, shape)


class XavierUniform(Initializer):
    """U(-limit, limit), limit = gain * sqrt(6 / (fan_in + fan_out)) (0 for a zero fan)."""

    def __init__(self, fan_in=None, fan_out=None, gain: float = 1.0):
        self.fan_in, self.fan_out, self.gain = fan_in, fan_out, gain

    def _draw(self, shape):
        fi, fo = _fans(shape)
        fi, fo = self.fan_in or fi, self.fan_out or fo
        limit = 0.0 if 0 in (fi, fo) else self.gain * math.sqrt(6.0 / (fi + fo))
        return generator().uniform(-limit, limit, shape)


class XavierNormal(Initializer):
    """N(0, std), std = gain * sqrt(2 / (fan_in + fan_out))."""

    def __init__(self, fan_in=None, fan_out=None, gain: float = 1.0):
        self.fan_in, self.fan_out, self.gain = fan_in, fan_out, gain

    def _draw(self, shape):
        fi, fo = _fans(shape)
        fi, fo = self.fan_in or fi, self.fan_out or fo
        std = 0.0 if 0 in (fi, fo) else self.gain * math.sqrt(2.0 / (fi + fo))
        return generator().normal(0.0, std, shape)


class KaimingNormal(Initializer):
    """N(0, std), std = gain / sqrt(fan_in), gain = sqrt(2 / (1 + slope^2)) (relu's)."""

    def __init__(self, fan_in=None, negative_slope: float = 0.0):
        self.fan_in, self.negative_slope = fan_in, negative_slope

    def _draw(self, shape):
        fi = self.fan_in or _fans(shape)[0]
        gain = math.sqrt(2.0 / (1.0 + self.negative_slope ** 2))
        return generator().normal(0.0, 0.0 if fi == 0 else gain / math.sqrt(fi), shape)


class KaimingUniform(Initializer):
    """U(-limit, limit), limit = gain * sqrt(3 / fan_in)."""

    def __init__(self, fan_in=None, negative_slope: float = 0.0):
        self.fan_in, self.negative_slope = fan_in, negative_slope

    def _draw(self, shape):
        fi = self.fan_in or _fans(shape)[0]
        gain = math.sqrt(2.0 / (1.0 + self.negative_slope ** 2))
        limit = 0.0 if fi == 0 else gain * math.sqrt(3.0 / fi)
        return generator().uniform(-limit, limit, shape)


class Assign(Initializer):
    """The given values (broadcast to the shape)."""

    def __init__(self, value):
        self.value = np.asarray(value)

    def _draw(self, shape):
        return np.broadcast_to(self.value, shape).copy()
