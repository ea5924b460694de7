"""`cc.optimizer`: Paddle-shaped optimizers used inside the traced step,

    opt = cc.optimizer.AdamW([w1, w2], learning_rate=lr, moment1=[m1, m2], moment2=[v1, v2],
                             step=t)
    loss.backward()
    opt.step()
    opt.clear_grad()

Their state (velocities, moments, the step count) lives in arrays the caller passes and keeps
between calls, updated in place like the parameters; the learning rate is a 0-d array argument
(a Python float is a trace-time constant, and a new value retraces). As issue 10 settled:
values captured from the enclosing scope are constants, so state is never captured.

`init_state(...)` makes the zero state arrays for a list of parameter arrays (outside a trace).
"""
from __future__ import annotations

import numbers

import numpy as np

from . import tracer as _tr
from .errors import ShapeError, TraceError
from .tensor import Tensor

__all__ = ["SGD", "AdamW"]


def _tensors(xs, what, like=None):
    if isinstance(xs, Tensor):
        xs = [xs]
    xs = list(xs)
    if not all(isinstance(x, Tensor) for x in xs):
        raise TraceError(f"{what} must be traced tensors (the step function's arguments)",
                         _tr.user_loc())
    if like is not None:
        if len(xs) != len(like):
            raise ShapeError(f"{len(xs)} {what} for {len(like)} parameters", _tr.user_loc())
        for x, p in zip(xs, like):
            if x.shape != p.shape or x.dtype != p.dtype:
                raise ShapeError(f"{what}: {x.dtype}{x.shape} doesn't match the parameter's "
                                 f"{p.dtype}{p.shape}", _tr.user_loc())
    return xs


def _scalar(x, what):
    if isinstance(x, Tensor):
        if x.shape != []:
            raise ShapeError(f"{what} must be a 0-d tensor, not of shape {x.shape}",
                             _tr.user_loc())
        return x
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return float(x)
    raise TraceError(f"{what} must be a number or a 0-d tensor, not {type(x).__name__}",
                     _tr.user_loc())


class Optimizer:
    def __init__(self, parameters, learning_rate):
        self._params = _tensors(parameters, "parameters")
        self._lr = _scalar(learning_rate, "learning_rate")

    def _grads(self):
        return [(i, p, p.grad) for i, p in enumerate(self._params) if p.grad is not None]

    def _lr_as(self, p):
        lr = self._lr
        return lr.cast(p.dtype) if isinstance(lr, Tensor) and lr.dtype != p.dtype else lr

    def clear_grad(self, set_to_zero=False):
        for p in self._params:
            p.clear_grad()

    def step(self):
        with _no_grad():
            self._update()

    @staticmethod
    def init_state(parameters, *names):
        raise NotImplementedError


def _no_grad():
    return _tr.no_grad()


class SGD(Optimizer):
    """`p -= lr * g` (Paddle's SGD); with `momentum` (Paddle's Momentum): `v = momentum * v
    + g; p -= lr * v` (Nesterov: `p -= lr * (g + momentum * v)`), `v` the caller's
    `velocity` arrays. `weight_decay` adds `weight_decay * p` to the gradient (L2)."""

    def __init__(self, parameters, learning_rate=0.001, momentum=0.0, velocity=None,
                 weight_decay=0.0, nesterov=False):
        super().__init__(parameters, learning_rate)
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)
        self.nesterov = bool(nesterov)
        self._velocity = None
        if self.momentum:
            if velocity is None:
                raise TraceError("SGD with momentum keeps a velocity per parameter in arrays "
                                 "the caller passes: velocity=[...] (SGD.init_state makes "
                                 "them)", _tr.user_loc())
            self._velocity = _tensors(velocity, "velocity", self._params)

    @staticmethod
    def init_state(parameters):
        """Zero velocities for a list of parameter arrays."""
        return [np.zeros_like(p) for p in parameters]

    def _update(self):
        lr = self._lr
        for i, p, g in self._grads():
            if self.weight_decay:
                g = g + p * self.weight_decay
            if self._velocity is not None:
                v = self._velocity[i]
                v.scale_(self.momentum).add_(g)
                g = g + v * self.momentum if self.nesterov else v
            p.subtract_(g * self._lr_as(p) if isinstance(lr, Tensor) else g * lr)


class AdamW(Optimizer):
    """Paddle's AdamW (Loshchilov and Hutter, ICLR 2019): with t the step count after this step,

        p *= 1 - lr * weight_decay
        m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
        p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + epsilon)

    `moment1`, `moment2` (per parameter) and `step` (a 0-d array of the number of steps taken
    so far, incremented here) are the caller's arrays, updated in place."""

    def __init__(self, parameters, learning_rate=0.001, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, weight_decay=0.01, moment1=None, moment2=None, step=None):
        super().__init__(parameters, learning_rate)
        if moment1 is None or moment2 is None or step is None:
            raise TraceError("AdamW keeps its moments and step count in arrays the caller "
                             "passes: moment1=[...], moment2=[...], step=<0-d array> "
                             "(AdamW.init_state makes them)", _tr.user_loc())
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.epsilon, self.weight_decay = float(epsilon), float(weight_decay)
        self._m = _tensors(moment1, "moment1", self._params)
        self._v = _tensors(moment2, "moment2", self._params)
        self._t = _scalar(step, "step")
        if not isinstance(self._t, Tensor):
            raise TraceError("AdamW: step must be a 0-d array the caller keeps (the step "
                             "count), not a Python number", _tr.user_loc())

    @staticmethod
    def init_state(parameters):
        """(moment1, moment2, step) for a list of parameter arrays: zeros, and a float32 0."""
        return ([np.zeros_like(p) for p in parameters], [np.zeros_like(p) for p in parameters],
                np.zeros((), np.float32))

    def step(self):
        with _no_grad():
            self._t.add_(1)
            super().step()

    def _update(self):
        b1, b2 = self.beta1, self.beta2
        for i, p, g in self._grads():
            lr = self._lr_as(p)
            t = self._t if self._t.dtype == p.dtype else self._t.cast(p.dtype)
            m, v = self._m[i], self._v[i]
            if self.weight_decay:
                p.multiply_(1.0 - lr * self.weight_decay)
            m.scale_(b1).add_(g, alpha=1.0 - b1)
            v.scale_(b2).add_(g.square(), alpha=1.0 - b2)
            # The bias corrections are 0-d values of the step count (an argument): no retrace.
            c1 = 1.0 - p.full_like_value(b1).pow(t)
            c2 = 1.0 - p.full_like_value(b2).pow(t)
            p.subtract_((m / c1) * lr / ((v / c2).sqrt() + self.epsilon))
