"""`cc.optimizer`: Paddle's optimizers (`paddle.optimizer`) for compiled training steps.

Paddle's way: the optimizer is built once, outside the compiled step, over the parameters'
NumPy arrays (a layer's `parameters()`, or plain arrays), and owns its state:

    opt = cc.optimizer.AdamW(learning_rate=cc.optimizer.lr.StepDecay(0.01, step_size=10),
                             parameters=net.parameters(),
                             grad_clip=cc.nn.ClipGradByGlobalNorm(1.0))

    @cc.compile
    def train_step(x, y):
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

Inside the trace `opt.step()` finds each parameter's Tensor (`compiler.tensor.state_tensor`:
the one the layer's forward made, since the same array gives the same Tensor), skips those
without a gradient or with `stop_gradient` set, and updates the parameters and its own state
arrays (moments, velocities, beta powers) in place. The learning rate is a 0-d float32 array
too (the optimizer's own, or a scheduler's, see `compiler.lr`), so neither a new rate nor any
number of steps retraces. `state_dict()` / `set_state_dict()` save and restore that state
under Paddle's keys.

The older in-trace form is kept: `SGD`/`AdamW` called inside the step with the step
function's tensors as parameters, the state in arrays the caller passes and keeps
(`velocity=`, `moment1=`, `moment2=`, `step=`; `init_state(...)` makes them), the learning
rate a number or a 0-d array argument. As issue 10 settled, values captured from the enclosing
scope are constants, so state is never captured: it is either an argument or a state array.
"""
from __future__ import annotations

import inspect
import numbers

import numpy as np

from . import lr  # (cc.optimizer.lr)
from . import tracer as _tr
from .errors import DataError, ShapeError, TraceError
from .lr import LRScheduler
from .ops.registry import dkind
from .tensor import Tensor, state_tensor

__all__ = ["SGD", "Adam", "AdamW", "ClipGradByGlobalNorm", "ClipGradByNorm",
           "ClipGradByValue", "Momentum", "Optimizer", "lr"]


# -- gradient clipping (Paddle's paddle.nn.ClipGradBy*), computed in the graph ---------------
class ClipGradBase:
    def __call__(self, params_grads):
        """[(parameter, gradient Tensor)] -> the same with clipped gradients. A parameter
        whose array has `need_clip = False` keeps its gradient (Paddle)."""
        return self._clip(params_grads)

    @staticmethod
    def _clipped(param):
        return getattr(param, "need_clip", True)


class ClipGradByGlobalNorm(ClipGradBase):
    """Scales every gradient by `clip_norm / max(global_norm, clip_norm)`, `global_norm` the
    L2 norm of all of them together (Pascanu et al., ICML 2013), as Paddle does: the scale is
    exactly 1 below the limit, so no branch on values is needed. The sum of squares is float32
    unless a gradient is float64 (then float64), as in Paddle. `auto_skip_clip` changes no
    value here (Paddle's skips a multiplication by exactly 1)."""

    def __init__(self, clip_norm, group_name="default_group", auto_skip_clip=False):
        self.clip_norm = _real(clip_norm, "clip_norm")
        self.group_name = group_name
        self.auto_skip_clip = bool(auto_skip_clip)

    def _clip(self, params_grads):
        squares = [g.square().sum() for p, g in params_grads if self._clipped(p)]
        if not squares:
            return params_grads
        dtype = np.dtype(np.float64 if any(s.dtype == np.float64 for s in squares)
                         else np.float32)
        total = squares[0].cast(dtype) if squares[0].dtype != dtype else squares[0]
        for s in squares[1:]:
            total = total + (s.cast(dtype) if s.dtype != dtype else s)
        limit = total.full_like_value(self.clip_norm)
        scale = limit / total.sqrt().maximum(limit)
        return [(p, g * (scale.cast(g.dtype) if g.dtype != dtype else scale))
                if self._clipped(p) else (p, g) for p, g in params_grads]


class ClipGradByNorm(ClipGradBase):
    """Each gradient on its own: scaled by `clip_norm / norm` where its L2 norm exceeds
    `clip_norm` (Paddle's clip_by_norm), written `clip_norm / max(norm, clip_norm)`."""

    def __init__(self, clip_norm):
        self.clip_norm = _real(clip_norm, "clip_norm")

    def _clip(self, params_grads):
        out = []
        for p, g in params_grads:
            if self._clipped(p):
                limit = g.full_like_value(self.clip_norm)
                g = g * (limit / g.square().sum().sqrt().maximum(limit))
            out.append((p, g))
        return out


class ClipGradByValue(ClipGradBase):
    """Each gradient element clipped to [min, max]; `min` defaults to `-max` (Paddle)."""

    def __init__(self, max, min=None):  # (Paddle's names)
        self.max = _real(max, "max")
        self.min = -self.max if min is None else _real(min, "min")
        if self.min > self.max:
            raise DataError(f"ClipGradByValue: min {self.min} > max {self.max}",
                            _tr.user_loc())

    def _clip(self, params_grads):
        return [(p, g.clip(self.min, self.max)) if self._clipped(p) else (p, g)
                for p, g in params_grads]


def _real(x, what):
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return float(x)
    raise TraceError(f"{what} must be a number, not {type(x).__name__}", _tr.user_loc())


# -- Paddle's optimizers: built over arrays, owning their state ------------------------------
class Optimizer:
    """What Paddle's optimizers share: the parameter list, the learning rate (a float or a
    scheduler, read in the graph from a 0-d float32 array), gradient clipping, L2 weight
    decay, `step()`, `clear_grad()`, `get_lr()`/`set_lr()` and the state dict. A subclass
    names its per-parameter state (`_accumulators`: (key, initial value) pairs, None for
    zeros like the parameter) and defines `_update(i, p, g, lr)` on Tensors."""

    _accumulators: tuple = ()   # (key, initial value) pairs
    # During a step under cc.amp.GradScaler: its 0-d found-inf flag. Every write of the
    # update is then a select that keeps the old value where the flag is set (`_apply`).
    _skip = None

    def __init__(self, learning_rate, parameters, weight_decay, grad_clip, l2=True):
        # l2: step() adds `weight_decay * p` to the gradient (False: the subclass applies
        # its decay itself, Momentum in its kernel as Paddle's, AdamW decoupled)
        loc = _tr.user_loc()
        if isinstance(learning_rate, LRScheduler):
            self._learning_rate = learning_rate
            self._lr_array = learning_rate._value
        elif isinstance(learning_rate, numbers.Real) and not isinstance(learning_rate, bool):
            self._learning_rate = float(learning_rate)
            self._lr_array = np.array(learning_rate, np.float32)
        else:
            raise TraceError(f"learning_rate must be a float or a cc.optimizer.lr scheduler, "
                             f"not {type(learning_rate).__name__}", loc)
        if parameters is None:
            raise TraceError("parameters=... is required (a layer's parameters() or a list "
                             "of arrays): the optimizer updates those arrays in place", loc)
        if isinstance(parameters, np.ndarray):
            parameters = [parameters]
        params, seen = [], set()
        for p in parameters:
            if isinstance(p, dict):
                raise TraceError("parameter groups (dicts in parameters=...) are not "
                                 "supported: make one optimizer per group", loc)
            if isinstance(p, Tensor):
                raise TraceError(f"{type(self).__name__}(parameters=...) takes the "
                                 "parameters' arrays, built outside the compiled function "
                                 "(a layer's parameters()); traced tensors only work with "
                                 "the in-trace form cc.optimizer.SGD(tensors, ...), whose "
                                 "state is passed in arrays", loc)
            if not isinstance(p, np.ndarray) or dkind(p.dtype) != "f":
                what = p.dtype if isinstance(p, np.ndarray) else type(p).__name__
                raise TraceError(f"parameters must be float arrays, not {what}", loc)
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        self._parameter_list = params
        names, taken = [], set()
        for i, p in enumerate(params):
            name = getattr(p, "name", None) or f"param_{i}"
            if name in taken:
                name = f"{name}_{i}"
            taken.add(name)
            names.append(name)
        self._names = names
        if weight_decay is not None and not (isinstance(weight_decay, numbers.Real)
                                             and not isinstance(weight_decay, bool)):
            raise TraceError(f"weight_decay must be a float or None, not "
                             f"{type(weight_decay).__name__}", loc)
        self._coeff = float(weight_decay or 0.0)
        self._l2 = l2
        if grad_clip is not None and not isinstance(grad_clip, ClipGradBase):
            raise TraceError("grad_clip must be cc.nn.ClipGradByGlobalNorm, ClipGradByNorm "
                             f"or ClipGradByValue, not {type(grad_clip).__name__}", loc)
        self._grad_clip = grad_clip
        # The state: per accumulator, one array per parameter, in the parameter's dtype.
        self._state = {key: [np.zeros(p.shape, p.dtype) if init is None
                             else np.array(init, p.dtype) for p in params]
                       for key, init in self._accumulators}

    # -- in the trace ------------------------------------------------------------------------
    def step(self):
        """Updates every parameter that has a gradient (and no `stop_gradient`) in place:
        clip, L2 decay, then the optimizer's rule, as Paddle orders them."""
        self._step("opt.step()", None)

    def minimize(self, loss, startup_program=None, parameters=None, no_grad_set=None):
        """Paddle's dygraph `minimize`: after `loss.backward()`, `step()` over `parameters`
        (default: all of the optimizer's) less `no_grad_set` (arrays or their names)."""
        self._minimize("opt.minimize()", parameters, no_grad_set)

    def _minimize(self, what, parameters, no_grad_set, skip=None):
        names = {id(p): n for p, n in zip(self._parameter_list, self._names)}
        chosen = self._parameter_list if parameters is None else list(parameters)
        for i, p in enumerate(chosen):
            if id(p) not in names:
                raise TraceError(f"minimize: parameters[{i}] is not one of this optimizer's "
                                 "parameters", _tr.user_loc())
        excluded = no_grad_set or ()
        skip_names = {x for x in excluded if isinstance(x, str)}
        skip_ids = {id(x) for x in excluded if not isinstance(x, str)}
        which = {id(p) for p in chosen
                 if id(p) not in skip_ids and names[id(p)] not in skip_names}
        self._step(what, which, skip)

    def _step(self, what, which, skip=None):
        tracer = _tr.active()
        if tracer is None:
            raise TraceError(f"{what} updates the parameters inside the compiled step: "
                             "call it there, after loss.backward()", _tr.user_loc())
        # Which parameters are frozen is decided here: a program traced with these flags
        # is traced again once they change (checked when state_changed() was signalled).
        frozen = self._frozen()
        tracer.guards.append(lambda: self._frozen() == frozen)
        # No cc.amp.auto_cast inside: the update computes in the parameters' own dtype.
        amp, tracer.amp = tracer.amp, None
        with _tr.no_grad():
            self._skip = skip
            try:
                self._step_traced(tracer, which)
            finally:
                self._skip = None
                tracer.amp = amp

    def _step_traced(self, tracer, which):
        params_grads, index = [], {}
        for i, (arr, t) in enumerate(self._traced(tracer)):
            if which is not None and id(arr) not in which:
                continue
            if t is not None and not getattr(arr, "stop_gradient", False) \
                    and t.grad is not None:
                index[id(arr)] = (i, t)
                params_grads.append((arr, t.grad))
        if not params_grads:
            return
        if self._grad_clip is not None:
            params_grads = self._grad_clip(params_grads)
        lr = state_tensor(self._lr_array, "learning_rate")
        for arr, g in params_grads:
            i, p = index[id(arr)]
            if self._l2 and self._coeff:
                g = g + p * self._coeff
            rate = lr if lr.dtype == p.dtype else lr.cast(p.dtype)
            scale = _param_lr(arr)
            self._update(i, p, g, rate if scale == 1.0 else rate * scale)

    def clear_grad(self, set_to_zero=True):
        """Inside the trace: the parameters' gradients become zeros (`set_to_zero=True`,
        Paddle's default) or None. Outside a trace there are no gradients to clear (each call
        of a compiled step starts without any)."""
        tracer = _tr.active()
        if tracer is None:
            return
        for arr, t in self._traced(tracer):
            if t is not None and not getattr(arr, "stop_gradient", False):
                _clear(t, set_to_zero)

    def _traced(self, tracer):
        # A parameter the traced code never read has no Tensor (and no gradient): none is
        # made for it, so it doesn't become an input of the program.
        return [(p, tracer.states.get(id(p))) for p in self._parameter_list]

    def _frozen(self):
        return tuple(bool(getattr(p, "stop_gradient", False)) for p in self._parameter_list)

    def _acc(self, key, i):
        return state_tensor(self._state[key][i], f"{self._names[i]}_{key}_0")

    def _update(self, i, p, g, lr):
        raise NotImplementedError

    def _apply(self, t, inplace, functional):
        """Writes a parameter or state Tensor: `inplace(t)` (in-place ops), or under a skip
        flag `functional(t)`'s value selected where the flag is unset, so a skipped step
        leaves every bit of `t` as it was."""
        if self._skip is None:
            inplace(t)
        else:
            t._write_where(self._skip.logical_not(), functional(t), "the optimizer's update")

    # -- outside the trace ---------------------------------------------------------------------
    def get_lr(self) -> float:
        """The learning rate the next step uses (a Python float)."""
        lr = self._learning_rate
        return lr() if isinstance(lr, LRScheduler) else lr

    def set_lr(self, value) -> None:
        """Sets a float learning rate (no retrace: the programs read it from an array)."""
        if isinstance(self._learning_rate, LRScheduler):
            raise TraceError("optimizer's learning rate can't be LRScheduler when invoke this "
                             "API, because this will lead to conflict (Paddle's rule: step the "
                             "scheduler instead)", _tr.user_loc())
        self._learning_rate = _real(value, "value")
        self._lr_array[...] = self._learning_rate

    def state_dict(self) -> dict:
        """A flat dict of copies of the state arrays under Paddle's keys
        (`{param}_moment1_0`, `{param}_velocity_0`, ...) and, with a scheduler, its state as
        `LR_Scheduler.last_epoch`, `LR_Scheduler.last_lr`, ... (Paddle nests it under
        `LR_Scheduler`; flat keys go straight into `np.savez`)."""
        out = {f"{name}_{key}_0": arrays[i].copy()
               for key, arrays in self._state.items() for i, name in enumerate(self._names)}
        if isinstance(self._learning_rate, LRScheduler):
            _flatten("LR_Scheduler", self._learning_rate.state_dict(), out)
        return out

    def set_state_dict(self, state_dict) -> None:
        """Loads a dict from `state_dict()` (or `np.load` of one saved with `np.savez`; the
        nested `LR_Scheduler` of Paddle's form works too), writing into the existing arrays:
        compiled steps keep reading them, no retrace."""
        loc = _tr.user_loc()
        for key, arrays in self._state.items():
            for i, name in enumerate(self._names):
                k = f"{name}_{key}_0"
                if k not in state_dict:
                    raise DataError(f"the optimizer state has no '{k}'", loc)
                value = np.asarray(state_dict[k])
                if value.shape != arrays[i].shape:
                    raise ShapeError(f"optimizer state '{k}' has shape {list(value.shape)}, "
                                     f"the parameter's is {list(arrays[i].shape)}", loc)
        for key, arrays in self._state.items():
            for i, name in enumerate(self._names):
                arrays[i][...] = np.asarray(state_dict[f"{name}_{key}_0"])
        if isinstance(self._learning_rate, LRScheduler):
            nested = state_dict.get("LR_Scheduler")
            if not isinstance(nested, dict):
                nested = _unflatten("LR_Scheduler", state_dict)
            if not nested:
                raise DataError("the optimizer state has no 'LR_Scheduler' (its learning "
                                "rate scheduler's state)", loc)
            self._learning_rate.set_state_dict(nested)

    set_dict = set_state_dict


def _param_lr(param) -> float:
    """A parameter's own learning-rate factor (Paddle's `param.optimize_attr['learning_rate']`,
    from its ParamAttr), 1.0 when it has none."""
    attr = getattr(param, "optimize_attr", None)
    if not isinstance(attr, dict):
        return 1.0
    return _real(attr.get("learning_rate", 1.0), "optimize_attr['learning_rate']")


def _flatten(prefix, d, out):
    for k, v in d.items():
        if isinstance(v, dict):
            _flatten(f"{prefix}.{k}", v, out)
        else:
            out[f"{prefix}.{k}"] = v


def _unflatten(prefix, flat):
    out = {}
    for k, v in flat.items():
        if k.startswith(prefix + "."):
            *path, last = k[len(prefix) + 1:].split(".")
            d = out
            for part in path:
                d = d.setdefault(part, {})
            d[last] = v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v
    return out


def _clear(t, set_to_zero):
    g = t.grad
    if g is None:
        return
    # zeros rather than None: `p.grad * 1.0` keeps working after clear_grad() (Paddle)
    t.grad = g.zeros_like_shape(g.shape) if set_to_zero else None


def _constant(value, dtype):
    """A coefficient rounded to the parameter's dtype, `1 - beta` computed in that dtype as
    Paddle's kernels do (as Python float: exact)."""
    return float(np.dtype(dtype).type(value))


def _one_minus(value, dtype):
    t = np.dtype(dtype).type
    return float(t(1) - t(value))


def _in_trace_form(args, kwargs):
    """The older form passes the step function's tensors as the first argument."""
    first = args[0] if args else kwargs.get("parameters")
    if isinstance(first, Tensor):
        return True
    return (isinstance(first, (list, tuple)) and len(first) > 0
            and all(isinstance(x, Tensor) for x in first))


class _InTraceForm:
    """SGD's and AdamW's older in-trace form (built inside the trace over tensors, with
    explicit state arrays): when `_legacy` holds one, step and clear_grad are its."""

    _legacy = None

    def step(self):
        if self._legacy is not None:
            return self._legacy.step()
        return super().step()

    def clear_grad(self, set_to_zero=True):
        if self._legacy is not None:
            return self._legacy.clear_grad(set_to_zero)
        return super().clear_grad(set_to_zero)


class SGD(_InTraceForm, Optimizer):
    """Paddle's SGD: `p -= lr * g`, `weight_decay` a float L2 coefficient (`g += wd * p`).

    Also the in-trace form `SGD(tensors, learning_rate=..., momentum=0.0, velocity=None,
    weight_decay=0.0, nesterov=False)`: with `momentum`, `v = momentum * v + g; p -= lr * v`
    (Nesterov: `p -= lr * (g + momentum * v)`), `v` the caller's `velocity` arrays."""

    def __init__(self, *args, **kwargs):
        if _in_trace_form(args, kwargs):
            self._legacy = _InTraceSGD(*args, **kwargs)
        else:
            self._legacy = None
            self._init(*args, **kwargs)

    def _init(self, learning_rate=0.001, parameters=None, weight_decay=None, grad_clip=None,
              multi_precision=False, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip)

    def _update(self, i, p, g, lr):
        d = g * lr
        self._apply(p, lambda t: t.subtract_(d), lambda t: t - d)

    @staticmethod
    def init_state(parameters):
        """(In-trace form) zero velocities for a list of parameter arrays."""
        return _InTraceSGD.init_state(parameters)


class Momentum(Optimizer):
    """Paddle's Momentum: `v = momentum * v + g`, then `p -= lr * v`, or with `use_nesterov`
    `p -= lr * (g + momentum * v)`; `g` is first `rescale_grad * g + weight_decay * p`
    (weight_decay a float L2 coefficient, applied in the kernel as Paddle does)."""

    _accumulators = (("velocity", None),)

    def __init__(self, learning_rate=0.001, momentum=0.9, parameters=None, use_nesterov=False,
                 weight_decay=None, grad_clip=None, multi_precision=False, rescale_grad=1.0,
                 use_multi_tensor=False, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, l2=False)
        self._momentum = _real(momentum, "momentum")
        self._use_nesterov = bool(use_nesterov)
        self._rescale_grad = _real(rescale_grad, "rescale_grad")

    def _update(self, i, p, g, lr):
        if self._rescale_grad != 1.0:
            g = g * self._rescale_grad
        if self._coeff:
            g = g + p * _constant(self._coeff, p.dtype)
        mu = _constant(self._momentum, p.dtype)
        v = self._acc("velocity", i)
        self._apply(v, lambda t: t.scale_(mu).add_(g), lambda t: t.scale(mu).add(g))
        d = (g + v * mu) * lr if self._use_nesterov else v * lr
        self._apply(p, lambda t: t.subtract_(d), lambda t: t - d)


class Adam(Optimizer):
    """Paddle's Adam (Kingma and Ba, ICLR 2015), with Paddle's per-parameter beta powers
    `b1p`, `b2p` (start at beta1, beta2; multiplied by them after each update):

        m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
        p -= lr sqrt(1 - b2p) / (1 - b1p) * m / (sqrt(v) + epsilon sqrt(1 - b2p))

    (the same value as PyTorch's `lr (m / (1 - b1p)) / (sqrt(v / (1 - b2p)) + epsilon)`).
    `weight_decay` a float is an L2 coefficient added to the gradient (`g += wd * p`)."""

    _accumulators = (("moment1", None), ("moment2", None))  # and the beta powers
    _decoupled = False

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-08,
                 parameters=None, weight_decay=None, grad_clip=None, lazy_mode=False,
                 multi_precision=False, use_multi_tensor=False, amsgrad=False, name=None):
        self._adam_init(learning_rate, beta1, beta2, epsilon, parameters, weight_decay,
                        grad_clip, amsgrad)

    def _adam_init(self, learning_rate, beta1, beta2, epsilon, parameters, weight_decay,
                   grad_clip, amsgrad):
        self._beta1, self._beta2 = _real(beta1, "beta1"), _real(beta2, "beta2")
        self._epsilon = _real(epsilon, "epsilon")
        if amsgrad:
            raise TraceError("amsgrad=True is not supported", _tr.user_loc())
        # the beta powers start at beta1, beta2 (Paddle's accumulators)
        self._accumulators = (*self._accumulators, ("beta1_pow_acc", self._beta1),
                              ("beta2_pow_acc", self._beta2))
        super().__init__(learning_rate, parameters, weight_decay, grad_clip,
                         l2=not self._decoupled)

    def _update(self, i, p, g, lr):
        d = p.dtype
        b1, b2 = _constant(self._beta1, d), _constant(self._beta2, d)
        m, v = self._acc("moment1", i), self._acc("moment2", i)
        b1p, b2p = self._acc("beta1_pow_acc", i), self._acc("beta2_pow_acc", i)
        if self._decoupled:
            self._decay(i, p, lr)
        a1, a2 = _one_minus(self._beta1, d), _one_minus(self._beta2, d)
        self._apply(m, lambda t: t.scale_(b1).add_(g, alpha=a1),
                    lambda t: t.scale(b1).add(g, alpha=a1))
        g2 = g.square()
        self._apply(v, lambda t: t.scale_(b2).add_(g2, alpha=a2),
                    lambda t: t.scale(b2).add(g2, alpha=a2))
        root = (1.0 - b2p).sqrt()
        step = lr * (root / (1.0 - b1p))
        delta = step * (m / (v.sqrt() + root * _constant(self._epsilon, d)))
        self._apply(p, lambda t: t.subtract_(delta), lambda t: t - delta)
        self._apply(b1p, lambda t: t.scale_(b1), lambda t: t.scale(b1))
        self._apply(b2p, lambda t: t.scale_(b2), lambda t: t.scale(b2))

    def _decay(self, i, p, lr):
        raise NotImplementedError


class AdamW(_InTraceForm, Adam):
    """Paddle's AdamW (Loshchilov and Hutter, ICLR 2019): Adam's update after the decoupled
    decay `p *= 1 - lr * weight_decay` (default 0.01), applied only to the parameters whose
    name `apply_decay_param_fun(name)` accepts (all when it is None); `lr_ratio(param)`
    scales the learning rate per parameter.

    Also the in-trace form `AdamW(tensors, learning_rate=..., beta1, beta2, epsilon,
    weight_decay, moment1=[...], moment2=[...], step=<0-d array>)`, the step count in the
    caller's array (see `init_state`)."""

    _decoupled = True

    def __init__(self, *args, **kwargs):
        if _in_trace_form(args, kwargs):
            self._legacy = _InTraceAdamW(*args, **kwargs)
        else:
            self._legacy = None
            self._init(*args, **kwargs)

    def _init(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-08,
              parameters=None, weight_decay=0.01, use_lowprecision_moment=False,
              lr_ratio=None, apply_decay_param_fun=None, grad_clip=None, lazy_mode=False,
              multi_precision=False, amsgrad=False, name=None):
        if weight_decay is None:
            weight_decay = 0.0
        self._lr_ratio = lr_ratio
        self._apply_decay_param_fun = apply_decay_param_fun
        self._adam_init(learning_rate, beta1, beta2, epsilon, parameters, weight_decay,
                        grad_clip, amsgrad)

    def _update(self, i, p, g, lr):
        if self._lr_ratio is not None:
            lr = lr * _real(self._lr_ratio(self._parameter_list[i]), "lr_ratio(param)")
        super()._update(i, p, g, lr)

    def _decay(self, i, p, lr):
        fun = self._apply_decay_param_fun
        if self._coeff and (fun is None or fun(self._names[i])):
            f = 1.0 - lr * _constant(self._coeff, p.dtype)
            self._apply(p, lambda t: t.multiply_(f), lambda t: t * f)

    @staticmethod
    def init_state(parameters):
        """(In-trace form) (moment1, moment2, step) for a list of parameter arrays: zeros,
        and a float32 0."""
        return _InTraceAdamW.init_state(parameters)


# -- the in-trace form (issue 10): the step function's tensors, state the caller passes -------
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
    if isinstance(x, LRScheduler):
        return state_tensor(x._value, "learning_rate")
    raise TraceError(f"{what} must be a number, a 0-d tensor or a cc.optimizer.lr scheduler, "
                     f"not {type(x).__name__}",
                     _tr.user_loc())


class _InTrace:
    def __init__(self, parameters, learning_rate):
        self._params = _tensors(parameters, "parameters")
        self._lr = _scalar(learning_rate, "learning_rate")

    def _grads(self):
        return [(i, p, p.grad) for i, p in enumerate(self._params) if p.grad is not None]

    def _lr_as(self, p):
        lr = self._lr
        return lr.cast(p.dtype) if isinstance(lr, Tensor) and lr.dtype != p.dtype else lr

    def clear_grad(self, set_to_zero=True):
        for p in self._params:
            _clear(p, set_to_zero)

    def step(self):
        with _no_grad():
            self._update()

    @staticmethod
    def init_state(parameters, *names):
        raise NotImplementedError


def _no_grad():
    return _tr.no_grad()


class _InTraceSGD(_InTrace):
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


class _InTraceAdamW(_InTrace):
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


# help() and inspect show Paddle's signatures (the in-trace form is told apart at call time).
SGD.__init__.__signature__ = inspect.signature(SGD._init)
AdamW.__init__.__signature__ = inspect.signature(AdamW._init)
