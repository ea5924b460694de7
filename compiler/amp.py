"""`cc.amp`: Paddle's automatic mixed precision (`paddle.amp`) inside a compiled step.

    scaler = cc.amp.GradScaler(init_loss_scaling=1024)

    @cc.compile
    def train_step(x, y):
        with cc.amp.auto_cast(dtype="float16"):      # or "bfloat16"; level "O1" or "O2"
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.minimize(opt, loss)                   # or scaler.step(opt); scaler.update()
        opt.clear_grad()
        return loss

What it guarantees:

- **Casts are decided at trace time, per op, and are ordinary `cast` nodes.** While an
  `auto_cast` block is open, each op the traced code emits (forward only: gradients, the
  optimizer's update and in-place writes are never cast) gets its float inputs cast by the
  level's lists: a white-list op (matmul, conv2d, max_pool2d) computes in the 16-bit dtype, a
  black-list op (softmax, log_softmax, layer_norm, exp/log, mean/sum, ...) in float32; the
  rest (gray) follow the dtype promotion (a float32 input makes the op float32) in O1, and
  compute in 16 bits in O2. The casts fuse like any elementwise op, and their gradients are
  casts back: a float32 parameter gets a float32 gradient.
- **Master weights stay float32.** Parameters are the caller's float32 arrays; O2 computes
  with 16-bit casts of them and the optimizer updates the float32 arrays in place
  (`decorate` changes no array).
- **The loss scaler is in the graph.** `GradScaler`'s scale and its two counters are state
  arrays the program updates in place; the found-inf check (every gradient finite), the
  skipped update (a select in the optimizer's writes: every weight and moment keeps its bits)
  and the scale's rule (Paddle's `AmpScaler._update`) are ops, so no step branches in Python
  and no value retraces.
"""
from __future__ import annotations

import contextlib
import numbers

import numpy as np

from . import tracer as _tr
from .creation import full
from .errors import TraceError
from .nn.layer import Layer
from .ops.registry import BFLOAT16, DEFAULT_FLOAT, FLOAT16, HALF_DTYPES, REGISTRY
from .optimizer import Optimizer
from .tensor import state_tensor

__all__ = ["AmpScaler", "GradScaler", "amp_guard", "auto_cast", "black_list", "decorate",
           "white_list"]

# -- the op lists (Paddle 3.3.1's python/paddle/amp/amp_lists.py, in this registry's names) --
# Paddle's names that are one of our primitives under another name.
_PADDLE_NAMES = {
    "matmul_v2": "matmul", "mul": "matmul", "linear_v2": "matmul",
    "max_pool2d_with_index": "max_pool2d", "reduce_sum": "sum", "reduce_mean": "mean",
    "reduce_prod": "prod", "elementwise_add": "add", "elementwise_sub": "subtract",
    "elementwise_mul": "multiply", "elementwise_div": "divide", "elementwise_pow": "pow",
    "elementwise_max": "maximum", "elementwise_min": "minimum",
    # embedding and scatter (Paddle's EXTRA_BLACK_LIST)
    "lookup_table": "index_select", "lookup_table_v2": "index_select",
    "scatter": "put_along_axis",
    # the losses are compositions here: their float32 starts at the softmax
    "softmax_with_cross_entropy": "log_softmax", "cross_entropy": "log_softmax",
    "cross_entropy2": "log_softmax", "c_softmax_with_cross_entropy": "log_softmax",
}
# Names in Paddle's lists with no primitive here (fused kernels, ops this project composes or
# lacks): accepted in a custom list, as Paddle accepts them, and change nothing.
_PADDLE_ONLY = {
    "einsum", "fused_gemm_epilogue", "fused_rotary_position_embedding", "flash_attn",
    "fake_quantize_dequantize_abs_max", "fake_quantize_dequantize_moving_average_abs_max",
    "fused_attention", "fused_feedforward", "tanh_shrink", "erfinv", "cumprod", "dist",
    "pnorm", "frobenius_norm", "renorm", "group_norm", "softmin", "softplus",
    "sigmoid_cross_entropy_with_logits", "c_softmax_with_multi_label_cross_entropy",
    "nll_loss", "huber_loss", "triplet_margin_loss", "log_loss", "hsigmoid_loss",
    "margin_cross_entropy", "linear_interp_v2", "nearest_interp_v2", "bilinear_interp_v2",
    "bicubic_interp_v2", "trilinear_interp_v2",
}

_WHITE = frozenset({"matmul", "gemm", "conv2d", "max_pool2d"})
_EXTRA_BLACK = frozenset({"index_select", "put_along_axis"})
_BLACK_O1 = frozenset({
    "tan", "acos", "asin", "sinh", "cosh", "atanh", "exp", "expm1", "log", "log10", "log2",
    "reciprocal", "rsqrt", "pow", "square", "sum", "mean", "prod", "cumsum", "layer_norm",
    "softmax", "log_softmax"}) | _EXTRA_BLACK

_LEVELS = ("O0", "OD", "O1", "O2")
_DTYPES = {"float16": FLOAT16, "bfloat16": BFLOAT16}
# Ops whose inputs are never cast: they move or reinterpret data without arithmetic (a view,
# a copy, a cast itself), or make random bits.
_NEVER = frozenset({"cast", "contiguous", "broadcast_to", "fill", "philox", "detach",
                    "reshape", "transpose", "slice", "expand", "slice_scatter",
                    "allreduce_start", "allreduce_wait", "bucket_pack"})


def white_list() -> dict:
    """{dtype: {level: set of op names}}: Paddle's `paddle.amp.white_list()` in this
    registry's op names."""
    return {d: {lvl: set(_WHITE) for lvl in ("OD", "O1", "O2")} for d in _DTYPES}


def black_list() -> dict:
    return {d: {"OD": set(), "O1": set(_BLACK_O1), "O2": set(_EXTRA_BLACK)} for d in _DTYPES}


def _op_names(names, what, loc):
    if names is None:
        return set()
    if isinstance(names, str):
        names = [names]
    out = set()
    for name in names:
        if not isinstance(name, str):
            raise TraceError(f"auto_cast: {what} holds {name!r}, not an op name", loc)
        if name in REGISTRY:
            out.add(name)
        elif name in _PADDLE_NAMES:
            out.add(_PADDLE_NAMES[name])
        elif name not in _PADDLE_ONLY:
            raise TraceError(f"auto_cast: {what} names {name!r}, which is neither an op of "
                             "this compiler nor one of Paddle's AMP op names", loc)
    return out


class _State:
    """One open auto_cast block: what the tracer's emit hook asks (see `cast_inputs`)."""

    __slots__ = ("black", "dtype", "level", "white")

    def __init__(self, dtype, level, white, black):
        self.dtype, self.level, self.white, self.black = dtype, level, white, black

    def target(self, op: str) -> np.dtype | None:
        """The float dtype `op` computes in under this block, or None: leave it as it is."""
        if op in self.white:
            return self.dtype
        if op in self.black:
            return DEFAULT_FLOAT
        if self.level == "O2":
            return self.dtype
        if self.level == "OD":
            return DEFAULT_FLOAT
        return None  # O1's gray ops: the promotion decides (a float32 input wins, as Paddle)

    def cast_inputs(self, tracer, op: str, inputs: list) -> list:
        if op in _NEVER or not inputs or (not tracer.grad_enabled and tracer.backward_calls):
            return inputs  # (nor the update after a backward: it computes in float32)
        target = self.target(op)
        if target is None or (op in _NO_FLOAT and op not in self.white
                              and op not in self.black):
            return inputs  # (a gray comparison or arg-reduction compares what it was given)
        # Only float32 goes down and only the 16-bit floats go up (as Paddle casts): float64,
        # ints and bools pass through.
        frm = HALF_DTYPES if target == DEFAULT_FLOAT else (DEFAULT_FLOAT,)
        if not any(v.dtype in frm for v in inputs):
            return inputs
        return [tracer.emit("cast", [v], {"dtype": target}) if v.dtype in frm else v
                for v in inputs]


# Gray ops whose result is no float: never cast in O2/OD.
_NO_FLOAT = frozenset({"argmax", "argmin", "argsort", "equal", "not_equal", "less_than",
                       "less_equal", "greater_than", "greater_equal", "logical_and",
                       "logical_or", "logical_xor", "logical_not", "one_hot"})


@contextlib.contextmanager
def auto_cast(enable=True, custom_white_list=None, custom_black_list=None, level="O1",
              dtype="float16", use_promote=True):
    """Paddle's `paddle.amp.auto_cast`, inside a traced function (see the module's text).
    `use_promote` is accepted (O2's gray ops compute in 16 bits here either way)."""
    loc = _tr.user_loc(3)
    tracer = _tr.active()
    if tracer is None:
        raise TraceError("cc.amp.auto_cast decides the casts while the step is traced: open "
                         "it inside the compiled function", loc)
    if level not in _LEVELS:
        raise TraceError(f"auto_cast: level should be O0, OD, O1 or O2, not {level!r}", loc)
    if dtype not in _DTYPES:
        raise TraceError(f"auto_cast: dtype should be 'float16' or 'bfloat16', not {dtype!r}",
                         loc)
    white = _op_names(custom_white_list, "custom_white_list", loc)
    black = _op_names(custom_black_list, "custom_black_list", loc)
    if white & black:
        raise TraceError(f"auto_cast: custom_white_list and custom_black_list both name "
                         f"{sorted(white & black)}", loc)
    saved = tracer.amp
    if not enable or level == "O0":
        tracer.amp = None
    else:
        base_white = set(_WHITE)
        base_black = set({"OD": (), "O1": _BLACK_O1, "O2": _EXTRA_BLACK}[level])
        tracer.amp = _State(_DTYPES[dtype], level, frozenset((base_white - black) | white),
                            frozenset((base_black - white) | black))
    try:
        yield
    finally:
        tracer.amp = saved


amp_guard = auto_cast


@contextlib.contextmanager
def suspended():
    """No auto_cast inside (an optimizer's update computes in its parameters' dtype)."""
    tracer = _tr.active()
    saved = tracer.amp if tracer is not None else None
    if tracer is not None:
        tracer.amp = None
    try:
        yield
    finally:
        if tracer is not None:
            tracer.amp = saved


def decorate(models, optimizers=None, level="O1", dtype="float16", master_weight=None,
             save_dtype=None, master_grad=False, excluded_layers=None):
    """Paddle's `paddle.amp.decorate`: returns `models` (and `optimizers`) as given. Paddle's
    O2 casts the layers' parameters to 16 bits and keeps float32 master copies in the
    optimizer; here the parameters *are* the float32 masters (the caller's arrays, updated
    in place in float32) and `auto_cast(level="O2")` computes with 16-bit casts of them, so
    no array changes. Checked as Paddle checks: the level, the dtype, and master_weight
    (False, 16-bit parameters only, is refused: the arrays stay float32)."""
    loc = _tr.user_loc()
    if level not in ("O1", "O2"):
        raise TraceError(f"decorate: level should be O1 or O2, not {level!r}", loc)
    if dtype not in _DTYPES:
        raise TraceError(f"decorate: dtype should be 'float16' or 'bfloat16', not {dtype!r}",
                         loc)
    if level == "O2" and master_weight is False:
        raise TraceError("decorate(master_weight=False) would keep only 16-bit parameters: "
                         "here the parameters stay the caller's float32 arrays (the master "
                         "weights) and O2 computes with 16-bit casts of them", loc)
    for m in (models if isinstance(models, (list, tuple)) else [models]):
        if not isinstance(m, Layer):
            raise TraceError(f"decorate: models must be cc.nn.Layer objects, not "
                             f"{type(m).__name__}", loc)
    return models if optimizers is None else (models, optimizers)


# -- the loss scaler -------------------------------------------------------------------------
class AmpScaler:
    """Paddle's `paddle.amp.AmpScaler` / `GradScaler` (dynamic loss scaling, Micikevicius et
    al., ICLR 2018), in the graph: `scale` (0-d float32), the good-step and bad-step counters
    (0-d int32) are state arrays; per step `unscale_` multiplies every gradient by
    `1 / scale` and records whether any element of any of them is not finite, `step` runs
    the optimizer's update as a select that keeps every parameter and moment where one was
    found, `update` applies Paddle's rule (`AmpScaler._update`): a bad step resets the good
    count and, at `decr_every_n_nan_or_inf` bad steps in a row, multiplies the scale by
    `decr_ratio`; a good step resets the bad count and, at `incr_every_n_steps` good steps,
    multiplies it by `incr_ratio`."""

    def __init__(self, enable=True, init_loss_scaling=2.0 ** 15, incr_ratio=2.0,
                 decr_ratio=0.5, incr_every_n_steps=1000, decr_every_n_nan_or_inf=1,
                 use_dynamic_loss_scaling=True):
        loc = _tr.user_loc()
        self._enable = bool(enable)
        self._init_loss_scaling = _positive(init_loss_scaling, "init_loss_scaling", loc)
        self._incr_ratio = _positive(incr_ratio, "incr_ratio", loc)
        self._decr_ratio = _positive(decr_ratio, "decr_ratio", loc)
        if not self._incr_ratio > 1.0:
            raise TraceError(f"GradScaler: incr_ratio must be > 1.0, not {incr_ratio}", loc)
        if not self._decr_ratio < 1.0:
            raise TraceError(f"GradScaler: decr_ratio must be < 1.0, not {decr_ratio}", loc)
        self._incr_every_n_steps = _count(incr_every_n_steps, "incr_every_n_steps", loc)
        self._decr_every_n_nan_or_inf = _count(decr_every_n_nan_or_inf,
                                               "decr_every_n_nan_or_inf", loc)
        self._use_dynamic_loss_scaling = bool(use_dynamic_loss_scaling)
        self._scale = np.array(self._init_loss_scaling, np.float32)
        self._incr_count = np.zeros((), np.int32)
        self._decr_count = np.zeros((), np.int32)
        self._found_inf = np.zeros((), np.bool_)   # the last step's, written in the graph
        # per trace: (tracer, {id(optimizer): found-inf Tensor}, stepped ids, last found-inf)
        self._trace = None

    # -- in the trace ----------------------------------------------------------------------
    def scale(self, var):
        """`var * scale` (the scale a float32 0-d state array)."""
        if not self._enable:
            return var
        self._in_trace("scale(loss)")
        # (a 16-bit loss times the float32 scale is float32: the scale itself may exceed
        # float16's range, the scaled loss's gradient then overflows and the scale comes down)
        return var * self._state(self._scale, "loss_scaling")

    def unscale_(self, optimizer):
        """The optimizer's gradients times `1 / scale`, and the found-inf flag, once."""
        if not self._enable:
            return
        tr = self._in_trace("unscale_(optimizer)")
        pending = self._trace[1]
        if id(optimizer) in pending:
            raise TraceError("unscale_() has already been called on this optimizer since the "
                             "last update()", _tr.user_loc())
        _check_optimizer(optimizer)
        with _tr.no_grad(), suspended():
            inv = 1.0 / self._state(self._scale, "loss_scaling")
            finite = None
            for arr, t in optimizer._traced(tr):
                if t is None or t.grad is None or getattr(arr, "stop_gradient", False):
                    continue
                g = t.grad
                ok = g.isfinite().all()
                finite = ok if finite is None else finite.logical_and(ok)
                t.grad = g * (inv if g.dtype == inv.dtype else inv.cast(g.dtype))
            if finite is None:
                finite = full([], True, "bool")
            found = finite.logical_not()
            flag = self._state(self._found_inf, "found_inf")
            flag._write_where(finite.logical_or(found), found, "GradScaler.unscale_()")
        pending[id(optimizer)] = found
        self._trace[3] = found

    def step(self, optimizer):
        """The optimizer's update, skipped (every parameter and moment kept bit for bit)
        when a gradient is not finite."""
        if not self._enable:
            return optimizer.step()
        self._in_trace("step(optimizer)")
        if id(optimizer) in self._trace[2]:
            raise TraceError("step() has already been called since the last update()",
                             _tr.user_loc())
        if id(optimizer) not in self._trace[1]:
            self.unscale_(optimizer)
        optimizer._step("scaler.step(optimizer)", None, skip=self._trace[1][id(optimizer)])
        self._trace[2].add(id(optimizer))
        if not self._use_dynamic_loss_scaling:
            self._reset()

    def minimize(self, optimizer, *args, **kwargs):
        """`step(optimizer)` then `update()` (Paddle's order; `args` are `minimize`'s)."""
        if not self._enable:
            return optimizer.minimize(*args, **kwargs)
        self._in_trace("minimize(optimizer, loss)")
        if id(optimizer) not in self._trace[1]:
            self.unscale_(optimizer)
        loss = args[0] if args else kwargs.pop("loss", None)
        rest = args[1:]
        parameters = kwargs.get("parameters", rest[1] if len(rest) > 1 else None)
        no_grad_set = kwargs.get("no_grad_set", rest[2] if len(rest) > 2 else None)
        del loss
        optimizer._minimize("scaler.minimize(optimizer)", parameters, no_grad_set,
                            skip=self._trace[1][id(optimizer)])
        if self._use_dynamic_loss_scaling:
            self._update()
        self._reset()

    def update(self):
        """The scale's rule, in place (after `step`)."""
        if not self._enable or not self._use_dynamic_loss_scaling:
            return
        self._in_trace("update()")
        self._update()
        self._reset()

    def _update(self):
        found = self._trace[3]
        if found is None:
            raise TraceError("update() needs the found-inf flag of a step: call "
                             "scaler.step(optimizer) (or unscale_) first", _tr.user_loc())
        with _tr.no_grad(), suspended():
            scale = self._state(self._scale, "loss_scaling")
            good = self._state(self._incr_count, "incr_count")
            bad = self._state(self._decr_count, "decr_count")
            ok = found.logical_not()
            bad_new = (bad + 1).where_mask(found)     # a bad step counts, a good one resets
            good_new = (good + 1).where_mask(ok)
            lower = bad_new == self._decr_every_n_nan_or_inf
            higher = good_new == self._incr_every_n_steps
            one = scale.full_like_value(1.0)
            factor = one.full_like_value(self._decr_ratio).where_mask(lower) + \
                one.full_like_value(self._incr_ratio).where_mask(higher) + \
                one.where_mask(lower.logical_or(higher).logical_not())
            scale.multiply_(factor)
            always = ok.logical_or(found)
            bad._write_where(always, bad_new.where_mask(lower.logical_not()),
                             "GradScaler.update()")
            good._write_where(always, good_new.where_mask(higher.logical_not()),
                              "GradScaler.update()")

    def _state(self, array, name):
        return state_tensor(array, name)

    def _in_trace(self, what):
        tr = _tr.active()
        if tr is None:
            raise TraceError(f"GradScaler.{what} works inside the compiled step (the scale "
                             "and its counters are updated in the graph)", _tr.user_loc())
        if self._trace is None or self._trace[0] is not tr:
            self._trace = [tr, {}, set(), None]
        return tr

    def _reset(self):
        self._trace[1] = {}
        self._trace[2] = set()

    # -- outside the trace -------------------------------------------------------------------
    def is_enable(self) -> bool:
        return self._enable

    def is_use_dynamic_loss_scaling(self) -> bool:
        return self._use_dynamic_loss_scaling

    def get_init_loss_scaling(self) -> float:
        return self._init_loss_scaling

    def get_loss_scaling(self) -> float:
        """The scale the next step uses (a Python float)."""
        return float(self._scale)

    def found_inf(self) -> bool:
        """Whether the last step's gradients held an inf or NaN (its update was skipped)."""
        return bool(self._found_inf)

    def get_incr_ratio(self) -> float:
        return self._incr_ratio

    def get_decr_ratio(self) -> float:
        return self._decr_ratio

    def get_incr_every_n_steps(self) -> int:
        return self._incr_every_n_steps

    def get_decr_every_n_nan_or_inf(self) -> int:
        return self._decr_every_n_nan_or_inf

    def state_dict(self) -> dict:
        """Paddle's keys; the values are copies."""
        if not self._enable:
            return {}
        return {"scale": self._scale.copy(), "incr_ratio": self._incr_ratio,
                "decr_ratio": self._decr_ratio, "incr_every_n_steps": self._incr_every_n_steps,
                "decr_every_n_nan_or_inf": self._decr_every_n_nan_or_inf,
                "incr_count": int(self._incr_count), "decr_count": int(self._decr_count),
                "use_dynamic_loss_scaling": self._use_dynamic_loss_scaling}

    def load_state_dict(self, state_dict: dict) -> None:
        """Writes into the state arrays (the compiled programs keep reading them)."""
        self._scale[...] = np.asarray(state_dict["scale"], np.float32).reshape(())
        self._incr_count[...] = int(state_dict["incr_count"])
        self._decr_count[...] = int(state_dict["decr_count"])
        self._incr_ratio = float(state_dict["incr_ratio"])
        self._decr_ratio = float(state_dict["decr_ratio"])
        self._incr_every_n_steps = int(state_dict["incr_every_n_steps"])
        self._decr_every_n_nan_or_inf = int(state_dict["decr_every_n_nan_or_inf"])
        self._use_dynamic_loss_scaling = bool(state_dict["use_dynamic_loss_scaling"])


class GradScaler(AmpScaler):
    """Paddle's `paddle.amp.GradScaler`, with its defaults (PaddlePaddle 3.3.1:
    `init_loss_scaling=2**16`, `incr_every_n_steps=2000`, `decr_every_n_nan_or_inf=1`)."""

    def __init__(self, enable=True, init_loss_scaling=2.0 ** 16, incr_ratio=2.0,
                 decr_ratio=0.5, incr_every_n_steps=2000, decr_every_n_nan_or_inf=1,
                 use_dynamic_loss_scaling=True):
        super().__init__(enable, init_loss_scaling, incr_ratio, decr_ratio,
                         incr_every_n_steps, decr_every_n_nan_or_inf,
                         use_dynamic_loss_scaling)


def _positive(x, what, loc):
    if isinstance(x, numbers.Real) and not isinstance(x, bool) and x > 0 and np.isfinite(x):
        return float(x)
    raise TraceError(f"GradScaler: {what} must be a positive number, not {x!r}", loc)


def _count(x, what, loc):
    if isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 1:
        return int(x)
    raise TraceError(f"GradScaler: {what} must be an int >= 1, not {x!r}", loc)


def _check_optimizer(optimizer):
    if not isinstance(optimizer, Optimizer) or getattr(optimizer, "_legacy", None) is not None:
        raise TraceError("GradScaler works with the cc.optimizer optimizers built over "
                         "parameter arrays (SGD, Momentum, Adam, AdamW(parameters=...)), not "
                         f"{type(optimizer).__name__} in the in-trace form", _tr.user_loc())
