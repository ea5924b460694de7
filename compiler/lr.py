"""`cc.optimizer.lr`: Paddle's learning-rate schedulers (`paddle.optimizer.lr`).

    sched = cc.optimizer.lr.LinearWarmup(
        cc.optimizer.lr.CosineAnnealingDecay(0.1, T_max=100), warmup_steps=10,
        start_lr=0.0, end_lr=0.1)
    opt = cc.optimizer.AdamW(learning_rate=sched, parameters=params)
    for batch in data:
        train_step(batch)     # compiled once: opt.step() reads the rate from an array
        sched.step()          # outside the trace, as in Paddle

Each scheduler computes its rate in Python floats, exactly as Paddle's does (`step()`,
`last_epoch`, `last_lr`, `get_lr()`, `state_dict()`), and also keeps the current rate in a
0-d float32 NumPy array that `step()` updates in place. A compiled step reads that array as
state (`compiler.tensor.state_tensor`), so a new rate never retraces; float32 is the dtype
Paddle's optimizers hold their learning rate in.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import tracer as _tr
from .errors import DataError, TraceError

__all__ = ["CosineAnnealingDecay", "LRScheduler", "LinearWarmup", "StepDecay"]


def _number(x, what, integer=False):
    kinds = numbers.Integral if integer else numbers.Real
    if not isinstance(x, kinds) or isinstance(x, bool):
        raise TraceError(f"{what} must be {'an int' if integer else 'a number'}, not "
                         f"{type(x).__name__}", _tr.user_loc())
    return int(x) if integer else float(x)


class LRScheduler:
    """The base of the schedulers (Paddle's `LRScheduler`): a subclass defines `get_lr()`
    from `base_lr`, `last_epoch` and `last_lr`. Construction takes the first step
    (`last_epoch` -1 -> 0), as Paddle's does."""

    def __init__(self, learning_rate=0.1, last_epoch=-1, verbose=False):
        learning_rate = _number(learning_rate, "learning_rate")
        if learning_rate < 0:
            raise DataError(f"invalid learning rate: {learning_rate}", _tr.user_loc())
        self.base_lr = learning_rate
        self.last_lr = learning_rate
        self.last_epoch = _number(last_epoch, "last_epoch", integer=True)
        self.verbose = bool(verbose)
        # The array compiled programs read (state: updated in place, never replaced).
        self._value = np.array(learning_rate, np.float32)
        self.step()

    def __call__(self) -> float:
        """The current learning rate (a Python float)."""
        return self.last_lr

    def step(self, epoch=None) -> None:
        """Advances one epoch (or jumps to `epoch`, using the closed form where there is one,
        as Paddle does); the new rate takes effect at the next `opt.step()`."""
        if epoch is None:
            self.last_epoch += 1
            self.last_lr = self.get_lr()
        else:
            self.last_epoch = _number(epoch, "epoch", integer=True)
            closed = getattr(self, "_get_closed_form_lr", None)
            self.last_lr = closed() if closed is not None else self.get_lr()
        self._value[...] = self.last_lr
        if self.verbose:
            print(f"Epoch {self.last_epoch}: {type(self).__name__} set learning rate to "
                  f"{self.last_lr}.")

    def get_lr(self) -> float:
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def state_keys(self) -> None:
        self.keys = ["last_epoch", "last_lr"]

    def state_dict(self) -> dict:
        """{'last_epoch': int, 'last_lr': float} (Paddle's keys)."""
        self.state_keys()
        return {k: self.__dict__[k] for k in self.keys if k in self.__dict__}

    def set_state_dict(self, state_dict) -> None:
        self.state_keys()
        for key in self.keys:
            if key not in state_dict:
                raise DataError(f"the scheduler's state has no '{key}'", _tr.user_loc())
        self.last_epoch = int(state_dict["last_epoch"])
        self.last_lr = float(state_dict["last_lr"])
        for key in self.keys:
            if key not in ("last_epoch", "last_lr"):
                self.__dict__[key] = state_dict[key]
        self._value[...] = self.last_lr

    set_dict = set_state_dict


class StepDecay(LRScheduler):
    """`learning_rate * gamma ** (last_epoch // step_size)`."""

    def __init__(self, learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        self.step_size = _number(step_size, "step_size", integer=True)
        if self.step_size <= 0:
            raise DataError(f"step_size must be a positive int, not {step_size}",
                            _tr.user_loc())
        self.gamma = _number(gamma, "gamma")
        if self.gamma >= 1.0:
            raise DataError(f"gamma should be < 1.0, not {gamma}", _tr.user_loc())
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class CosineAnnealingDecay(LRScheduler):
    """Cosine annealing (SGDR, Loshchilov and Hutter 2017) from `learning_rate` down to
    `eta_min` over `T_max` epochs, then back up: Paddle's (and PyTorch's) recursive form
    when stepping by one, the closed form `eta_min + (base - eta_min) (1 + cos(pi e /
    T_max)) / 2` when `step(epoch)` jumps."""

    def __init__(self, learning_rate, T_max, eta_min=0, last_epoch=-1, verbose=False):
        self.T_max = _number(T_max, "T_max", integer=True)
        if self.T_max <= 0:
            raise DataError(f"T_max must be a positive int, not {T_max}", _tr.user_loc())
        self.eta_min = _number(eta_min, "eta_min")
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        e, t, lo = self.last_epoch, self.T_max, self.eta_min
        if e == 0:
            return self.base_lr
        if (e - 1 - t) % (2 * t) == 0:
            return self.last_lr + (self.base_lr - lo) * (1 - math.cos(math.pi / t)) / 2
        return ((1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t))
                * (self.last_lr - lo) + lo)

    def _get_closed_form_lr(self) -> float:
        return (self.eta_min + (self.base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2)


class LinearWarmup(LRScheduler):
    """Rises linearly from `start_lr` to `end_lr` over `warmup_steps` epochs, then follows
    `learning_rate`: a float, or a scheduler stepped to `last_epoch - warmup_steps`."""

    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr, last_epoch=-1,
                 verbose=False):
        if not isinstance(learning_rate, LRScheduler):
            learning_rate = _number(learning_rate, "learning_rate")
        self.learning_rate = learning_rate
        self.warmup_steps = _number(warmup_steps, "warmup_steps", integer=True)
        if self.warmup_steps <= 0:
            raise DataError(f"warmup_steps must be a positive int, not {warmup_steps}",
                            _tr.user_loc())
        self.start_lr = _number(start_lr, "start_lr")
        self.end_lr = _number(end_lr, "end_lr")
        if not self.end_lr > self.start_lr:
            raise DataError(f"end_lr {end_lr} must be greater than start_lr {start_lr}",
                            _tr.user_loc())
        super().__init__(start_lr, last_epoch, verbose)

    def get_lr(self) -> float:
        if self.last_epoch < self.warmup_steps:
            return ((self.end_lr - self.start_lr) * float(self.last_epoch)
                    / float(self.warmup_steps) + self.start_lr)
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return self.learning_rate

    def state_dict(self) -> dict:
        state = super().state_dict()
        if isinstance(self.learning_rate, LRScheduler):
            state["LinearWarmup_LR"] = self.learning_rate.state_dict()
        return state

    def set_state_dict(self, state_dict) -> None:
        super().set_state_dict(state_dict)
        if isinstance(self.learning_rate, LRScheduler):
            if "LinearWarmup_LR" not in state_dict:
                raise DataError("the scheduler's state has no 'LinearWarmup_LR' (the state "
                                "of the scheduler it wraps)", _tr.user_loc())
            self.learning_rate.set_state_dict(state_dict["LinearWarmup_LR"])

    set_dict = set_state_dict
