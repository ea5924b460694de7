"""Random straight-line programs over the traced tensor API, each with a numpy twin.

`programs()` is a hypothesis strategy of `RandomProgram`s: Python source text of a function
written against `compiler` (Paddle style) and, for programs without `backward()`, the same
program written against plain numpy (views are numpy views, inplace ops write through them with
`out=`/`[...] =`, so numpy's own aliasing is the oracle for inplace-through-view semantics).

The generator runs the numpy twin step by step while it draws, so every choice sees the real
shapes, which values are views of which buffer (`np.shares_memory`), which are read-only
(expanded views), and their magnitudes (multiplicative steps are only drawn on small values, so
every program stays finite and well-conditioned). Unsafe functions only appear in safe forms:
`log(|x| + 1)`, `sqrt(x^2 + 0.5)`, `exp(tanh(x))`, `(|x| + 0.5) ** 1.5`, `x / (|y| + 1)`.

Menu: out-of-place unary/binary ops with broadcasting and Python scalars, user inplace ops (`add_
subtract_ multiply_ scale_ sin_ exp_ relu_ tanh_ sigmoid_ clip_ zero_ fill_ +=`) on variables and
through views (`x[1:].add_(1)`, `x.transpose([1, 0]).scale_(2)`, `x[i] += y`), views (reshape,
flatten, transpose, `t()`, slices with steps, unsqueeze/squeeze, expand, detach), set-item,
reductions, matmul, concat, Paddle's `clone flip tile var std logsumexp` and integer-array gathers
and scatters (`x[np.array([2, 0])]`); optionally leaves with `stop_gradient = False`,
`loss.backward()`, more steps after it, and an SGD update under `cc.no_grad()` that mutates the
leaves; reads of views (and of views of written bases) inside `cc.no_grad()` blocks, whose results
are only returned (so they never change what the gradient is). Some programs take arguments that
share memory (`ALIASES`: the same array twice, overlapping row slices, an array and a row of it, an
array and its transpose), so writes through one argument are seen through another, as in eager
NumPy; `hard_aliasing=True` makes every program share memory, in HARD_ALIASES' layouts too, and
writes through chains of views of one member (`_Gen.step_alias_chain`). Sometimes the last step
is one the compiler must refuse with `cc.InplaceError`: an inplace op on a leaf that needs a
gradient, a write through an expanded view, or an inplace op whose result would be bigger than
its target.

The source is compiled under the virtual file name `random_program.py` (registered in
`linecache`), so the compiler's error messages and plan decisions name its lines.
"""
from __future__ import annotations

import itertools
import linecache
import os
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

PROGRAM_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "random_program.py")

INPUTS = {"a": (3, 4), "b": (4,), "c": (2, 3, 4), "d": (4, 3)}

# Step kinds drawn beside the original menu (issue 24: `_Gen.step_paddle`).
ISSUE24_STEPS = ["paddle"]

# Arguments that share memory: (shape of the storage `s`, {parameter: the view of `s` passed
# for it}). `e` is a parameter that exists only in these layouts.
ALIASES = {
    "same": ((3, 4), {"a": "s", "e": "s"}),
    "overlap": ((4, 4), {"a": "s[0:3]", "e": "s[1:4]"}),
    "row": ((3, 4), {"a": "s", "b": "s[1]"}),
    "transposed": ((4, 3), {"d": "s", "e": "s.T"}),
}

# -- hard aliasing (`programs(hard_aliasing=True)`, tests/passes/test_random_targeted.py): where
# the bugs of arguments that share memory were (a write through a reshape of a strided member,
# a sum in another order). Every program's arguments share memory, in these layouts as well
# as ALIASES': overlapping column slices (members not contiguous), a member running backwards
# over another, a member and its reversed columns, rows beside transposed rows, three members
# of mixed directions, and a stride-0 broadcast argument (read-only: never written). Its step
# (`_Gen.step_alias_chain`) writes through a chain of views of one member, often reading
# the other member in the same op.
HARD_ALIASES = {
    "columns": ((3, 5), {"a": "s[:, 0:4]", "e": "s[:, 1:5]"}),
    "reversed": ((4, 4), {"a": "s[0:3]", "e": "s[3:0:-1]"}),
    "reversed columns": ((3, 4), {"a": "s", "e": "s[:, ::-1]"}),
    "crossed": ((4, 4), {"a": "s[0:3]", "e": "s.T[1:4]"}),
    "three": ((4, 4), {"a": "s[0:3]", "d": "s[:, 1:4]", "e": "s[1:4, ::-1]"}),
    "broadcast": ((4,), {"e": "np.broadcast_to(s, (3, 4))"}),
    "broadcast column": ((3, 1), {"e": "np.broadcast_to(s, (3, 4))"}),
}
ALIAS_STEPS = ["alias_chain"] * 8  # (about a quarter of the steps)
ALL_ALIASES = {**ALIASES, **HARD_ALIASES}
# -- end of hard aliasing's module-level data --------------------------------------------------

# -- targeted runs (tests/passes/test_random_targeted.py): other argument shapes, more steps ---
# Shape sets `programs(shapes=...)` draws from instead of INPUTS (the default draws INPUTS as
# before): size-1 axes (broadcasting and squeeze), a zero-size argument beside non-empty ones,
# and rows longer than a warp (32) and a gpu block (256) for reductions, softmax, sort and
# GEMMs cut into chunks.
SHAPE_SETS = {
    "default": INPUTS,
    "ones": {"a": (1, 4), "b": (1,), "c": (2, 1, 4), "d": (4, 1)},
    "empty": {"a": (0, 4), "b": (4,), "c": (2, 1, 4), "d": (4, 1)},
    "long": {"a": (3, 300), "b": (300,), "c": (2, 1, 300), "d": (300, 3)},
}
# Step kinds `programs(targeted=True)` adds to the menu (`_Gen.step_targeted`).
TARGETED_STEPS = ["targeted", "targeted"]
# -- end of the targeted runs' module-level data ------------------------------------------------

# Helpers the numpy twin calls: each writes its result into `t` (a numpy view or array) after
# reading every operand, and returns `t` (Paddle: an inplace op returns the same Tensor).
NUMPY_PRELUDE = '''
import math
import ml_dtypes
import numpy as np

def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))

def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)

def inplace(t, value):
    t[...] = value
    return t

def gelu(x, approximate=False):
    if approximate:
        inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)
        return (0.5 * x * (1.0 + np.tanh(inner))).astype(x.dtype)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return (0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))).astype(x.dtype)

def layer_norm(x, eps=1e-5):
    m = x.mean(axis=-1, keepdims=True)
    v = np.square(x - m).mean(axis=-1, keepdims=True)
    return ((x - m) / np.sqrt(v + eps)).astype(x.dtype)

def arr(x):
    """A computed value as the compiler makes it: an array (numpy ops on 0-d arrays give
    scalars; the compiler's give 0-d tensors), C-contiguous (a fresh buffer), so that a later
    `reshape(-1)` of it is a view in the twin too: numpy keeps `-e`'s transposed layout when
    `e` is a transposed argument, and reshaping that copies."""
    return np.asarray(x, order="C")

def cross_entropy(x, labels, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """Paddle's hard-label softmax cross entropy over the last axis (compiler.nn.functional's
    docstring): rows labelled ignore_index drop out, each row's loss is scaled by the weight of
    its (smoothed) target, "mean" divides by the sum of those weights (0 counts as 1)."""
    labels = np.asarray(labels)
    c = x.shape[-1]
    m = x.max(axis=-1, keepdims=True)
    logp = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    valid = labels != ignore_index
    hot = np.eye(c)[np.where(valid, labels, 0)] * valid[..., None]
    target = hot * (1.0 - label_smoothing) + valid[..., None] * (label_smoothing / c)
    loss = -(target * logp).sum(-1)
    denominator = valid.astype(x.dtype)
    if weight is not None:
        denominator = (target * np.asarray(weight)).sum(-1)  # weight[label], smoothed
        loss = loss * denominator
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    total = denominator.sum()
    return loss.sum() / (total if total != 0 else 1.0)

'''


# The compiler-API program's first two lines (RandomProgram.HEADER_LINES counts them).
HEADER = "import numpy as np; import compiler as cc\nimport compiler.nn.functional as F\n"


@dataclass
class RandomProgram:
    inputs: dict                      # name -> shape
    seed: int                         # input values: default_rng(seed).standard_normal
    lines: list = field(default_factory=list)      # body lines, compiler API
    np_lines: list = field(default_factory=list)   # body lines, numpy twin (None: skip)
    returns: list = field(default_factory=list)    # (compiler expr, numpy expr or None)
    leaves: list = field(default_factory=list)
    has_backward: bool = False
    expect_error: str | None = None   # "leaf" | "expand" | "broadcast" | "numpy" | "label"
    error_step: int | None = None     # index into lines of the refused step
    inplace_steps: set = field(default_factory=set)  # indices of lines with inplace writes
    alias: str | None = None          # a key of ALL_ALIASES: some arguments share memory
    nograd_reads: list = field(default_factory=list)  # values read under no_grad (returned)
    twin: bool = True                 # False: a step the numpy twin can't follow (dropout)

    # -- rendering --------------------------------------------------------------------------
    HEADER_LINES = 3  # two imports and `def program(...)` precede body line 0

    def line_number(self, step: int) -> int:
        """The line of `random_program.py` that holds body line `step`."""
        return step + 1 + self.HEADER_LINES

    def source(self) -> str:
        params = ", ".join(self.inputs)
        body = list(self.lines)
        if self.expect_error is None:
            body.append("return (" + "".join(r[0] + ", " for r in self.returns) + ")")
        else:
            body.append("return None")
        return (HEADER + f"def program({params}):\n"
                + "".join("    " + line + "\n" for line in body))

    def numpy_source(self) -> str | None:
        if self.has_backward or self.expect_error is not None or not self.twin:
            return None
        params = ", ".join(self.inputs)
        body = [line for line in self.np_lines if line is not None]
        body.append("return (" + "".join(r[1] + ", " for r in self.returns) + ")")
        return (NUMPY_PRELUDE + f"def program({params}):\n"
                + "".join("    " + line + "\n" for line in body))

    def storages(self) -> list[np.ndarray]:
        """The memory the arguments live in: the shared storage of an alias layout first, then
        one array per other argument (`default_rng(seed).standard_normal`, in that order)."""
        rng = np.random.default_rng(self.seed)
        out = [rng.standard_normal(ALL_ALIASES[self.alias][0])] if self.alias else []
        shared = ALL_ALIASES[self.alias][1] if self.alias else {}
        return out + [rng.standard_normal(shape) for name, shape in self.inputs.items()
                      if name not in shared]

    def arguments(self, storages) -> list[np.ndarray]:
        """The call's arguments over `storages` (views of the shared one, as laid out)."""
        rest = iter(storages)
        views = {}
        if self.alias:
            s = next(rest)
            views = {n: eval(expr, {"s": s, "np": np})
                     for n, expr in ALL_ALIASES[self.alias][1].items()}
        return [views[n] if n in views else next(rest) for n in self.inputs]

    def storage_index(self, name) -> int:
        """Which of `storages()` argument `name` lives in."""
        shared = ALL_ALIASES[self.alias][1] if self.alias else {}
        if name in shared:
            return 0
        own = [n for n in self.inputs if n not in shared]
        return own.index(name) + bool(self.alias)

    def arrays(self) -> list[np.ndarray]:
        """Fresh arguments (a copy of them would lose the sharing of an alias layout)."""
        return self.arguments(self.storages())

    def build(self, src: str | None = None):
        """The compiler-API function, compiled under PROGRAM_FILE (lines of `source()`, or of
        `src`: one of `gradient_sources()`)."""
        src = self.source() if src is None else src
        linecache.cache[PROGRAM_FILE] = (len(src), None, src.splitlines(True), PROGRAM_FILE)
        ns: dict = {}
        exec(compile(src, PROGRAM_FILE, "exec"), ns)  # noqa: S102
        return ns["program"]

    def gradient_sources(self) -> tuple[str, str]:
        """Two programs cut from a training program, for finite-difference checks: the loss
        (`loss`, plus `loss2` when a second `backward()` accumulates into the same leaves) as a
        function of the arguments, and the leaves' `.grad` after the backward calls. Both stop
        before the update."""
        assert self.has_backward
        lines = list(self.lines)
        calls = [i for i, line in enumerate(lines) if line.startswith(("loss.backward(",
                                                                       "loss2.backward("))]
        last = calls[-1]
        forward = [line for i, line in enumerate(lines[:last]) if i not in calls]
        total = "loss + loss2" if len(calls) == 2 else "loss"
        grads = "".join(f"{w}.grad, " for w in self.leaves)
        head = (HEADER + f"def program({', '.join(self.inputs)}):\n")
        loss_src = head + "".join(f"    {line}\n" for line in forward + [f"return {total}"])
        grad_src = head + "".join(f"    {line}\n" for line in lines[:last + 1]
                                  + [f"return ({grads})"])
        return loss_src, grad_src

    def build_numpy(self):
        src = self.numpy_source()
        if src is None:
            return None
        ns: dict = {}
        exec(compile(src, "<numpy twin>", "exec"), ns)  # noqa: S102
        return ns["program"]

    def __str__(self) -> str:
        return self.source().split("\n", 2)[2]  # without the imports


# -- the generator ------------------------------------------------------------------------------
def _mag(x: np.ndarray) -> float:
    return float(np.max(np.abs(x))) if x.size else 0.0


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def _np_shape(shape) -> str:
    return "(" + "".join(f"{int(d)}, " for d in shape) + ")"


def _np_index(idx: str) -> str:
    """numpy returns a scalar copy, not a 0-d view, when ints index every axis: an Ellipsis
    keeps it a view (as the compiler's indexing always is)."""
    return idx if "..." in idx else idx + ", ..."


def _number(expr: str) -> bool:
    """Whether an operand expression is a Python number (`-1.5`, `1.0 / 3.0`), not a tensor."""
    return not any(c.isalpha() or c == "_" for c in expr)


def _broadcast(*shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _factorizations(n: int, parts: int):
    if parts == 1:
        yield (n,)
        return
    for d in range(1, n + 1):
        if n % d == 0:
            for rest in _factorizations(n // d, parts - 1):
                yield (d,) + rest


def _reshape_targets(shape) -> list:
    n = int(np.prod(shape))
    out = {(n,)}
    for parts in (2, 3):
        out.update(f for f in _factorizations(n, parts) if sum(d == 1 for d in f) <= 1)
    out.discard(tuple(shape))
    return sorted(out)


class _Gen:
    """One program being drawn; `ns` holds the numpy twin's live arrays."""

    def __init__(self, draw, prog: RandomProgram, detach: bool = True, targeted: bool = False):
        self.draw, self.prog = draw, prog
        self.allow_detach = detach
        self.targeted = targeted  # draws TARGETED_STEPS too
        self.exact = False  # only exactly rounded ops (`programs(exact=True)`)
        self.dropouts = False  # a dropout in about a quarter of the steps
        self.hard_aliasing = False  # draws ALIAS_STEPS too (`programs(hard_aliasing=True)`)
        arrays = prog.arrays()
        self.ns = {"np": np}
        exec(compile(NUMPY_PRELUDE, "<prelude>", "exec"), self.ns)  # noqa: S102
        self.vars: list[str] = []
        for name, arr in zip(prog.inputs, arrays):
            self.ns[name] = arr
            self.vars.append(name)
        self.count = 0
        self.detached: set[str] = set()  # variables that view a buffer through a detach()
        self.side = prog.nograd_reads  # values read under no_grad: returned, never used again

    # -- state queries -------------------------------------------------------------------------
    def arr(self, name) -> np.ndarray:
        return self.ns[name]

    def on_leaf(self, name) -> bool:
        """Whether an inplace write through `name` would write a leaf that needs a gradient:
        it views a leaf's buffer, not through a `detach()` (`w.detach().zero_()` is allowed)."""
        return name not in self.detached and any(
            np.shares_memory(self.arr(name), self.arr(leaf)) for leaf in self.prog.leaves)

    def writable(self, name, grad_enabled=True) -> bool:
        a = self.arr(name)
        return a.flags.writeable and a.size > 0 and not (grad_enabled and self.on_leaf(name))

    def pick(self, names):
        return self.draw(st.sampled_from(sorted(names, key=self.vars.index)))

    def choice(self, options):
        return self.draw(st.sampled_from(options))

    def fresh(self) -> str:
        name = f"v{self.count}"
        self.count += 1
        return name

    # -- emitting ------------------------------------------------------------------------------
    def emit(self, line: str, np_line: str | None, inplace=False, define: str | None = None):
        self.prog.lines.append(line)
        self.prog.np_lines.append(np_line)
        if inplace:
            self.prog.inplace_steps.add(len(self.prog.lines) - 1)
        if np_line is not None:
            with np.errstate(all="ignore"):
                exec(np_line, self.ns)  # noqa: S102
        if define is not None and define not in self.vars:
            self.vars.append(define)

    # -- views ---------------------------------------------------------------------------------
    def draw_index(self, shape) -> str:
        items = []
        for d in shape:
            # (a zero-size axis has no index to draw: only its full slice)
            kind = self.choice(["all", "all", "int", "range", "step", "neg"]) if d else "all"
            if kind == "all":
                items.append(":")
            elif kind == "int":
                k = self.draw(st.integers(-d, d - 1))
                items.append(str(k))
            elif kind == "range":
                lo = self.draw(st.integers(0, d - 1))
                hi = self.draw(st.integers(lo + 1, d))
                items.append(f"{lo}:{hi}" if hi < d else f"{lo}:")
            elif kind == "step":
                lo = self.draw(st.integers(0, d - 1))
                items.append(f"{lo or ''}::{self.choice([2, 3])}")
            else:
                hi = self.draw(st.integers(0, d - 1))
                items.append(f"{hi}::-{self.choice([1, 2])}")
        if shape and self.draw(st.booleans()):
            # Trailing full slices are implicit; sometimes write an Ellipsis or a None instead.
            extra = self.choice(["ellipsis", "none", "trim"])
            if extra == "ellipsis":
                k = self.draw(st.integers(0, len(items)))
                items[k:] = ["..."]
            elif extra == "none":
                items.insert(self.draw(st.integers(0, len(items))), "None")
            else:
                while len(items) > 1 and items[-1] == ":":
                    items.pop()
        if not items:
            items = ["..."]
        return ", ".join(items)

    def draw_view(self, name) -> tuple[str, str] | None:
        """(compiler expr, numpy expr) of one view of `name`."""
        a = self.arr(name)
        shape = a.shape
        kinds = ["slice", "reshape", "flatten", "unsqueeze", "expand"]
        if self.allow_detach:
            kinds.append("detach")
        if len(shape) >= 2:
            kinds += ["transpose", "transpose"]
        if len(shape) == 2:
            kinds += ["t"]
        if 1 in shape:
            kinds += ["squeeze"]
        kind = self.choice(kinds)
        if kind == "slice" and shape:
            idx = self.draw_index(shape)
            return f"{name}[{idx}]", f"{name}[{_np_index(idx)}]"
        if kind == "reshape" and a.size:
            target = self.choice(_reshape_targets(shape) or [(a.size,)])
            if self.draw(st.booleans()) and len(target) > 1:
                t = list(target)
                t[self.draw(st.integers(0, len(t) - 1))] = -1
                target = tuple(t)
            return (f"{name}.reshape({_fmt_shape(target)})",
                    f"{name}.reshape({_np_shape(target)})")
        if kind == "flatten" and len(shape) >= 1:
            return f"{name}.flatten()", f"{name}.reshape(-1)"
        if kind == "unsqueeze":
            ax = self.draw(st.integers(-len(shape) - 1, len(shape)))
            return f"{name}.unsqueeze({ax})", f"np.expand_dims({name}, {ax})"
        if kind == "squeeze":
            ax = self.choice([i for i, d in enumerate(shape) if d == 1])
            return f"{name}.squeeze({ax})", f"{name}.squeeze({ax})"
        if kind == "transpose":
            perm = list(self.draw(st.permutations(range(len(shape)))))
            return f"{name}.transpose({perm})", f"{name}.transpose({tuple(perm)})"
        if kind == "t":
            return f"{name}.t()", f"{name}.T"
        if kind == "expand":
            target = [self.choice([d, 2]) if d == 1 else d for d in shape]
            if self.draw(st.booleans()) or target == list(shape):
                target = [self.choice([1, 2])] + target
            if int(np.prod(target)) == a.size:  # broadcasts nothing: a plain writable view
                return (f"{name}.expand({_fmt_shape(target)})",
                        f"{name}.reshape({_np_shape(target)})")
            return (f"{name}.expand({_fmt_shape(target)})",
                    f"np.broadcast_to({name}, {_np_shape(target)})")
        if not self.allow_detach:  # what's left for a 0-d value (a slice kind, say)
            return f"{name}.unsqueeze(0)", f"np.expand_dims({name}, 0)"
        return f"{name}.detach()", f"{name}.view()"

    # -- operand choices --------------------------------------------------------------------------
    def scalar(self) -> str:
        return repr(self.choice([0.5, -1.5, 2.0, 0.25, 1, -3, 3.0]))

    def operand_for(self, target_shape, max_mag=None, alias=None) -> tuple[str, str]:
        """A variable that broadcasts into `target_shape`, a scalar, or (given `alias`, the
        (compiler, numpy) expressions of a target) a view of that target itself, so that the
        operand overlaps what the op writes: `x.add_(x[::-1])`, `x += x[0]`."""
        if alias is not None and target_shape and self.draw(st.integers(0, 3)) == 1:
            t, n = alias
            view = self.choice(["", "[::-1]", "[0]", "[-1:]"]
                               + (["[1:2]"] if target_shape[0] >= 2 else []))
            if view == "[0]":
                return f"{t}[0]", f"{n}[0, ...]"
            return f"{t}{view}", f"{n}{view}"
        fits = [v for v in self.vars if _broadcast(self.arr(v).shape, target_shape)
                == tuple(target_shape) and (max_mag is None or _mag(self.arr(v)) <= max_mag)]
        if fits and self.draw(st.integers(0, 3)) > 0:
            v = self.pick(fits)
            return v, v
        s = self.scalar()
        return s, s

    # -- steps -----------------------------------------------------------------------------------
    def step(self, grad_enabled=True):
        if self.exact:
            return self.step_exact(grad_enabled)
        if self.dropouts and self.draw(st.integers(0, 3)) == 0:
            return self.step_dropout(grad_enabled)
        kind = self.choice(["unary", "unary", "binary", "binary", "inplace", "inplace",
                            "inplace", "view", "view", "view_inplace", "view_inplace",
                            "setitem", "setitem", "reduce", "matmul", "concat", "nograd_read",
                            "xent", "paddle_fn", "sort"] + ISSUE24_STEPS  # issue 24's steps
                           + (TARGETED_STEPS if self.targeted else [])
                           + (ALIAS_STEPS if self.hard_aliasing else []))
        getattr(self, "step_" + kind)(grad_enabled)

    # -- issue 24: Paddle's Tensor methods and integer-tensor indexing ---------------------------
    def step_paddle(self, grad_enabled):
        """clone / flip / tile copies, var / std / logsumexp along an axis, `x[idx]` gathers
        and `x[idx] = y` scatters with a constant integer array (distinct rows)."""
        kind = self.choice(["copy", "stat", "gather", "scatter"])
        if kind == "scatter":
            targets = [v for v in self.vars if self.writable(v, grad_enabled)
                       and self.arr(v).ndim >= 1]
            if not targets:
                return self.step_binary(grad_enabled)
            x = self.pick(targets)
            shape = self.arr(x).shape
            rows = self.draw(st.permutations(range(shape[0])))[:self.draw(
                st.integers(1, shape[0]))]
            idx = f"np.array({list(rows)})"
            y, ny = self.operand_for((len(rows),) + shape[1:])
            return self.emit(f"{x}[{idx}] = {y}", f"{x}[{idx}] = {ny}", inplace=True)
        x = self.pick(self.vars)
        a = self.arr(x)
        out = self.fresh()
        ops = [("{x}.clone()", "np.array({x})")]
        if a.ndim >= 1:
            ax = self.draw(st.integers(-a.ndim, a.ndim - 1))
            ops += [(f"{{x}}.flip({ax})", f"np.flip({{x}}, {ax})"),
                    ("{x}.tile([2, 1])", "np.tile({x}, [2, 1])")]
            if kind == "gather" and a.shape[0]:
                rows = self.draw(st.lists(st.integers(-a.shape[0], a.shape[0] - 1),
                                          min_size=1, max_size=4))
                ops = [(f"{{x}}[np.array({rows})]", f"{{x}}[np.array({rows})]")]
            elif kind == "stat" and a.shape[ax] >= 2:
                ops = [(f"{{x}}.logsumexp(axis={ax})", f"np.logaddexp.reduce({{x}}, axis={ax})")]
                if _mag(a) <= 10:
                    ops.append((f"{{x}}.var(axis={ax})", f"np.var({{x}}, axis={ax}, ddof=1)"))
                if np.all(np.ptp(a, axis=ax) > 1e-3):  # std's gradient is NaN at no spread
                    ops.append((f"{{x}}.std({ax}, unbiased=False)", f"np.std({{x}}, axis={ax})"))
        pd, npx = self.choice(ops)
        self.emit(f"{out} = " + pd.format(x=x), f"{out} = arr(" + npx.format(x=x) + ")",
                  define=out)

    def step_nograd_read(self, grad_enabled):
        """`with cc.no_grad(): vN = <a view of x>.<read>`: a read never changes a tensor's
        gradient history (issue 7), even of a view whose base was written. Views are picked
        first, and read through a further view half of the time."""
        targets = [v for v in self.vars if self.writable(v, grad_enabled)]
        if targets and self.draw(st.booleans()):
            # The case of issue 7: a view, a write to its base, then the view's first read
            # (which re-derives it from the new base) under no_grad; later steps and the loss
            # may still use the view with its gradient.
            base = self.pick(targets)
            view = self.draw_view(base)
            x = self.fresh()
            self.emit(f"{x} = {view[0]}", f"{x} = {view[1]}", define=x)
            if base in self.detached or view[0].endswith(".detach()"):
                self.detached.add(x)
            pd, npx = self.inplace_op(base, base, self.arr(base).shape, _mag(self.arr(base)),
                                      grad_enabled)
            self.emit(pd, npx, inplace=True)
            pd, npx = x, x
        else:
            views = [v for v in self.vars if self.arr(v).base is not None]
            x = self.pick(views if views and self.draw(st.booleans()) else self.vars)
            pd, npx = x, x
            if self.draw(st.booleans()):
                pd, npx = self.draw_view(x)
        with np.errstate(all="ignore"):
            a = eval(npx, self.ns)
        reads = [("{x} * 2.0", "{x} * 2.0"), ("{x}.tanh()", "np.tanh({x})"),
                 ("{x}.sum()", "np.sum({x})")]
        if a.ndim:
            reads.append(("{x}.sum(axis=0, keepdim=True)", "np.sum({x}, axis=0, keepdims=True)"))
        read, np_read = self.choice(reads)
        out = self.fresh()
        self.emit("with cc.no_grad():", None)
        self.emit(f"    {out} = " + read.format(x=pd), f"{out} = arr(" + np_read.format(x=npx)
                  + ")")
        self.side.append(out)

    def _labels(self, rows_shape, classes, bad=False):
        """A nested list of class indices for rows of `rows_shape`: sometimes the ignored
        label; with `bad`, one out of range (issue 13: raised, never silently used)."""
        n = int(np.prod(rows_shape))
        flat = [self.draw(st.integers(0, classes - 1)) for _ in range(n)]
        if n and self.draw(st.booleans()):
            flat[self.draw(st.integers(0, n - 1))] = -100
        if bad:
            flat[self.draw(st.integers(0, n - 1))] = self.choice([classes, classes + 3, -1])
        return np.array(flat, dtype=np.int64).reshape(rows_shape).tolist()

    def step_xent(self, grad_enabled):
        """`F.cross_entropy` with Paddle's options against a numpy formula (issue 13)."""
        xs = [v for v in self.vars if self.arr(v).ndim >= 2 and self.arr(v).size]
        if not xs:
            return self.step_unary(grad_enabled)
        x = self.pick(xs)
        shape = self.arr(x).shape
        labels = self._labels(shape[:-1], shape[-1])
        opts = []
        if self.draw(st.booleans()):
            w = [round(0.5 + 0.25 * i, 2) for i in range(shape[-1])]
            opts.append(f"weight={w}")
        red = self.choice(["mean", "mean", "sum", "none"])
        opts.append(f"reduction={red!r}")
        if self.draw(st.booleans()):
            opts.append("label_smoothing=0.1")
        extra = "".join(", " + o for o in opts)
        out = self.fresh()
        self.emit(f"{out} = F.cross_entropy({x}, {labels}{extra})",
                  f"{out} = arr(cross_entropy({x}, {labels}{extra}))", define=out)

    def step_unary(self, grad_enabled):
        x = self.pick(self.vars)
        m = _mag(self.arr(x))
        ops = [("-{x}", "-{x}"), ("{x}.abs()", "np.abs({x})"), ("{x}.sin()", "np.sin({x})"),
               ("{x}.cos()", "np.cos({x})"), ("{x}.tanh()", "np.tanh({x})"),
               ("F.sigmoid({x})", "sigmoid({x})"), ("{x}.sigmoid()", "sigmoid({x})"),
               ("F.relu({x})", "np.maximum({x}, 0.0)"),
               ("{x}.scale(0.5, bias=1.0)", "{x} * 0.5 + 1.0"),
               ("{x}.scale(-2.0, bias=0.5, bias_after_scale=False)", "({x} + 0.5) * -2.0"),
               ("{x}.clip(-0.5, 0.75)", "np.clip({x}, -0.5, 0.75)"),
               ("{x}.clip(min=0.1)", "np.maximum({x}, 0.1)"),
               ("{x}.tanh().exp()", "np.exp(np.tanh({x}))"),
               ("({x}.abs() + 1.0).log()", "np.log(np.abs({x}) + 1.0)"),
               ("({x}.square() + 0.5).sqrt()", "np.sqrt(np.square({x}) + 0.5)")]
        if m <= 10:
            ops += [("{x}.square()", "np.square({x})"),
                    ("({x}.abs() + 0.5) ** 1.5", "(np.abs({x}) + 0.5) ** 1.5")]
        if self.arr(x).ndim >= 1:
            ax = self.draw(st.integers(-1, self.arr(x).ndim - 1))
            ops.append((f"F.softmax({{x}}, axis={ax})", f"softmax({{x}}, {ax})"))
        if m <= 10:  # the composite ops of issue 9 (their own VJPs, recomputation, fusion)
            ops += [("F.gelu({x})", "gelu({x})"), ("F.gelu({x}, approximate=True)",
                                                   "gelu({x}, approximate=True)")]
        if self.arr(x).ndim >= 1 and self.arr(x).shape[-1] >= 3 and self.arr(x).size:
            n = self.arr(x).shape[-1]
            ops.append((f"F.layer_norm({{x}}, {n})", "layer_norm({x})"))
        pd, npx = self.choice(ops)
        out = self.fresh()
        self.emit(f"{out} = " + pd.format(x=x), f"{out} = arr(" + npx.format(x=x) + ")", define=out)

    def step_binary(self, grad_enabled):
        x = self.pick(self.vars)
        sx = self.arr(x).shape
        partners = [v for v in self.vars if _broadcast(sx, self.arr(v).shape) is not None]
        y = self.pick(partners) if self.draw(st.integers(0, 3)) > 0 else None
        mx = _mag(self.arr(x))
        my = _mag(self.arr(y)) if y is not None else 3.0
        ny = y
        if y is not None and sx and self.draw(st.integers(0, 4)) == 3:
            # Operands that overlap: `x + x[::-1]` can't be computed over x element by element.
            y, ny, my = f"{x}[::-1]", f"{x}[::-1]", mx
        if y is None and sx and self.draw(st.integers(0, 3)) == 0:
            # A numpy array on the left: numpy hands the operator to the tensor (issue 13).
            const = f"np.linspace(-1.0, 1.0, {int(np.prod(sx))}).reshape({_fmt_shape(sx)})"
            op = self.choice(["+", "-", "*"])
            out = self.fresh()
            self.emit(f"{out} = {const} {op} {x}", f"{out} = arr({const} {op} {x})", define=out)
            return
        if y is None:
            s = self.scalar()
            ops = [("{x} + {s}", "{x} + {s}"), ("{s} - {x}", "{s} - {x}"),
                   ("{x} * {s}", "{x} * {s}"), ("{x} / {s}", "{x} / {s}"),
                   ("{s} / ({x}.abs() + 1.0)", "{s} / (np.abs({x}) + 1.0)"),
                   ("{x}.maximum({s})", "np.maximum({x}, {s})")]
            pd, npx = self.choice(ops)
            pd, npx = pd.format(x=x, s=s), npx.format(x=x, s=s)
        else:
            ops = [("{x} + {y}", "{x} + {y}"), ("{x} - {y}", "{x} - {y}"),
                   ("{x}.add({y})", "{x} + {y}"), ("{x}.subtract({y})", "{x} - {y}"),
                   ("{x} / ({y}.abs() + 1.0)", "{x} / (np.abs({y}) + 1.0)"),
                   ("{x}.maximum({y})", "np.maximum({x}, {y})"),
                   ("{x}.minimum({y})", "np.minimum({x}, {y})"),
                   ("cc.where({x} > {y}, {x}, {y} * 0.5)", "np.where({x} > {y}, {x}, {y} * 0.5)")]
            if mx * my <= 100:
                ops += [("{x} * {y}", "{x} * {y}"), ("{x}.multiply({y})", "{x} * {y}")]
            pd, npx = self.choice(ops)
            pd, npx = pd.format(x=x, y=y), npx.format(x=x, y=ny)
        out = self.fresh()
        self.emit(f"{out} = {pd}", f"{out} = arr({npx})", define=out)

    def inplace_op(self, target_pd, target_np, shape, mag, grad_enabled):
        """One inplace op on the target expression: (compiler line, numpy line)."""
        ops = ["add_", "subtract_", "scale_", "sin_", "relu_", "F.relu_", "tanh_",
               "sigmoid_", "clip_", "zero_", "fill_", "add_alpha"]
        if mag <= 3:
            ops.append("exp_")
        if mag <= 10:
            ops.append("multiply_")
        op = self.choice(ops)
        t, n = target_pd, target_np
        if op in ("add_", "subtract_", "add_alpha"):
            y, ny = self.operand_for(shape, alias=(t, n))
            sign = "-" if op == "subtract_" else "+"
            if op == "add_alpha":
                return f"{t}.add_({y}, alpha=0.5)", f"inplace({n}, {n} + 0.5 * {ny})"
            return f"{t}.{op}({y})", f"inplace({n}, {n} {sign} {ny})"
        if op == "multiply_":
            y, ny = self.operand_for(shape, max_mag=10, alias=(t, n))
            return f"{t}.multiply_({y})", f"inplace({n}, {n} * {ny})"
        if op == "scale_":
            return f"{t}.scale_(2.0, bias=-0.5)", f"inplace({n}, {n} * 2.0 - 0.5)"
        if op == "clip_":
            return f"{t}.clip_(-1.0, 0.5)", f"inplace({n}, np.clip({n}, -1.0, 0.5))"
        if op == "zero_":
            return f"{t}.zero_()", f"inplace({n}, 0.0)"
        if op == "fill_":
            return f"{t}.fill_(1.5)", f"inplace({n}, 1.5)"
        if op == "F.relu_":
            return f"F.relu_({t})", f"inplace({n}, np.maximum({n}, 0.0))"
        fn = {"sin_": "np.sin", "relu_": "np.maximum", "tanh_": "np.tanh",
              "sigmoid_": "sigmoid", "exp_": "np.exp"}[op]
        extra = ", 0.0" if op == "relu_" else ""
        return f"{t}.{op}()", f"inplace({n}, {fn}({n}{extra}))"

    def step_inplace(self, grad_enabled):
        targets = [v for v in self.vars if self.writable(v, grad_enabled)]
        if not targets:
            return self.step_unary(grad_enabled)
        x = self.pick(targets)
        a = self.arr(x)
        if self.draw(st.integers(0, 4)) == 0:  # Python's augmented assignment
            op = self.choice(["+=", "-="] + (["*="] if _mag(a) <= 10 else []))
            y, ny = self.operand_for(a.shape, max_mag=10 if op == "*=" else None,
                                     alias=(x, x))
            return self.emit(f"{x} {op} {y}", f"{x} {op} {ny}", inplace=True)
        pd, npx = self.inplace_op(x, x, a.shape, _mag(a), grad_enabled)
        if self.draw(st.booleans()):  # the result is the same object
            out = self.fresh()
            if x in self.detached:
                self.detached.add(out)
            return self.emit(f"{out} = {pd}", f"{out} = {npx}", inplace=True, define=out)
        self.emit(pd, npx, inplace=True)

    def step_view(self, grad_enabled):
        x = self.pick(self.vars)
        view = self.draw_view(x)
        out = self.fresh()
        self.emit(f"{out} = {view[0]}", f"{out} = {view[1]}", define=out)
        if (x in self.detached or view[0].endswith(".detach()")) \
                and np.shares_memory(self.arr(out), self.arr(x)):
            self.detached.add(out)

    def step_view_inplace(self, grad_enabled):
        """An inplace op through a view that is never named (`x[1:].add_(1)`), or `x[i] += y`."""
        targets = [v for v in self.vars if self.writable(v, grad_enabled)]
        if not targets:
            return self.step_view(grad_enabled)
        x = self.pick(targets)
        view = self.draw_view(x)
        with np.errstate(all="ignore"):
            v = eval(view[1], self.ns)
        if not v.flags.writeable or v.size == 0:
            return self.step_view(grad_enabled)
        if view[0].startswith(f"{x}[") and self.draw(st.integers(0, 2)) == 0:
            y, ny = self.operand_for(v.shape, alias=(x, x) if v.shape == self.arr(x).shape
                                     else None)
            return self.emit(f"{view[0]} += {y}", f"{view[1]} += {ny}", inplace=True)
        pd, npx = self.inplace_op(view[0], view[1], v.shape, _mag(v), grad_enabled)
        self.emit(pd, npx, inplace=True)

    def step_setitem(self, grad_enabled):
        targets = [v for v in self.vars if self.writable(v, grad_enabled)
                   and self.arr(v).ndim >= 1]
        if not targets:
            return self.step_binary(grad_enabled)
        x = self.pick(targets)
        idx = self.draw_index(self.arr(x).shape)
        region = self.arr(x)[eval(f"np.index_exp[{idx}]", self.ns)]
        if region.size == 0:
            return self.step_binary(grad_enabled)
        y, ny = self.operand_for(region.shape, alias=(x, x) if region.shape == self.arr(x).shape
                                 else None)
        if y in self.vars and self.draw(st.booleans()):
            y, ny = f"{y}.tanh()", f"np.tanh({ny})"
        self.emit(f"{x}[{idx}] = {y}", f"{x}[{idx}] = {ny}", inplace=True)

    def step_reduce(self, grad_enabled):
        x = self.pick(self.vars)
        a = self.arr(x)
        op = self.choice(["sum", "mean", "max"])
        if op == "sum" and _mag(a) * a.size > 1000:
            op = "mean"
        if a.size == 0:  # (max has no identity, a mean of nothing is NaN)
            op = "sum"
        out = self.fresh()
        if a.ndim == 0 or self.draw(st.integers(0, 3)) == 0:
            npx = {"sum": "np.sum({x})", "mean": "np.mean({x})", "max": "np.max({x})"}[op]
            return self.emit(f"{out} = {x}.{op}()", f"{out} = arr(" + npx.format(x=x) + ")",
                             define=out)
        ax = self.draw(st.integers(-a.ndim, a.ndim - 1))
        keep = self.draw(st.booleans())
        kw = ", keepdim=True" if keep else ""
        nkw = ", keepdims=True" if keep else ""
        self.emit(f"{out} = {x}.{op}(axis={ax}{kw})", f"{out} = arr(np.{op}({x}, axis={ax}{nkw}))",
                  define=out)

    def step_matmul(self, grad_enabled):
        pairs = []
        for x, y in itertools.product(self.vars, repeat=2):
            sx, sy = self.arr(x).shape, self.arr(y).shape
            if len(sx) >= 1 and len(sy) in (1, 2) and sx[-1] == sy[0] and (
                    _mag(self.arr(x)) * _mag(self.arr(y)) * sx[-1] <= 100):
                pairs.append((x, y))
        if not pairs:
            return self.step_unary(grad_enabled)
        x, y = self.choice(pairs)
        out = self.fresh()
        if self.draw(st.booleans()):
            self.emit(f"{out} = {x} @ {y}", f"{out} = arr({x} @ {y})", define=out)
        else:
            self.emit(f"{out} = {x}.matmul({y})", f"{out} = arr(np.matmul({x}, {y}))", define=out)

    def step_concat(self, grad_enabled):
        x = self.pick([v for v in self.vars if self.arr(v).ndim >= 1])
        sx = self.arr(x).shape
        ax = self.draw(st.integers(0, len(sx) - 1))
        partners = [v for v in self.vars if self.arr(v).ndim == len(sx) and all(
            d == e for i, (d, e) in enumerate(zip(sx, self.arr(v).shape)) if i != ax)]
        y = self.pick(partners)
        out = self.fresh()
        self.emit(f"{out} = cc.concat([{x}, {y}], axis={ax})",
                  f"{out} = np.concatenate([{x}, {y}], axis={ax})", define=out)

    # -- issue 24: cc.einsum, cc.eye, F.pad, F.softplus, F.binary_cross_entropy_with_logits --------
    def step_paddle_fn(self, grad_enabled):
        """One of issue 24's functions, each a composition of registry ops, against NumPy."""
        x = self.pick(self.vars)
        a = self.arr(x)
        m = _mag(a)
        options = [("F.softplus({x})",
                    "np.where({x} > 20, {x}, np.log1p(np.exp(np.minimum({x}, 20))))")]
        if a.ndim >= 1:
            # (at least one element: a pad of nothing returns x itself, a view the twin lacks)
            before, after = self.draw(st.integers(0, 2)), self.draw(st.integers(1, 2))
            width = [(0, 0)] * (a.ndim - 1) + [(before, after)]
            options.append((f"F.pad({{x}}, [{before}, {after}], value=0.5)",
                            f"np.pad({{x}}, {width}, constant_values=0.5)"))
        if a.ndim == 2:
            r, c = a.shape
            options += [(f"{{x}} + cc.eye({r}, {c}, dtype='float64')",
                         f"{{x}} + np.eye({r}, {c})"),
                        ("cc.einsum('ij->j', {x})", "np.einsum('ij->j', {x})")]
            partners = [v for v in self.vars if self.arr(v).ndim == 2 and
                        self.arr(v).shape[1] == c and m * _mag(self.arr(v)) * c <= 100]
            if partners:
                y = self.pick(partners)
                options.append((f"cc.einsum('ij,kj->ik', {{x}}, {y})",
                                f"np.einsum('ij,kj->ik', {{x}}, {y})"))
        if a.size and m <= 10:
            options.append((("F.binary_cross_entropy_with_logits({x}, F.sigmoid({x} * 0.5), "
                             "reduction='none')"),
                            "np.logaddexp(0, {x}) - {x} * sigmoid({x} * 0.5)"))
        pd, npx = self.choice(options)
        out = self.fresh()
        self.emit(f"{out} = " + pd.format(x=x), f"{out} = arr(" + npx.format(x=x) + ")",
                  define=out)
    # -- end of issue 24's steps --------------------------------------------------------------

    # -- issue 24: sort, argsort, topk (values only: the indices are int64, which the twin's
    # float arithmetic would widen differently); ties give equal values in any order --------
    def step_sort(self, grad_enabled):
        xs = [v for v in self.vars if self.arr(v).ndim >= 1 and self.arr(v).size]
        if not xs:
            return self.step_unary(grad_enabled)
        x = self.pick(xs)
        a = self.arr(x)
        ax = self.draw(st.integers(-a.ndim, a.ndim - 1))
        k = self.draw(st.integers(1, a.shape[ax]))
        up = f"np.sort({{x}}, axis={ax})"
        down = f"np.flip({up}, axis={ax})"
        pd, npx = self.choice([
            (f"{{x}}.sort(axis={ax})", up),
            (f"cc.sort({{x}}, axis={ax}, descending=True)", down),
            (f"{{x}}.take_along_axis({{x}}.argsort(axis={ax}), {ax})", up),
            (f"{{x}}.topk({k}, axis={ax})[0]", f"np.take({down}, np.arange({k}), axis={ax})"),
            (f"cc.topk({{x}}, {k}, axis={ax}, largest=False)[0]",
             f"np.take({up}, np.arange({k}), axis={ax})")])
        out = self.fresh()
        self.emit(f"{out} = " + pd.format(x=x), f"{out} = arr(" + npx.format(x=x) + ")",
                  define=out)

    # -- targeted runs: where this project's bugs were (tests/passes/test_random_targeted.py) -----
    def step_targeted(self, grad_enabled):
        """One of: an arg-reduction, ties included (`x.clip(-0.5, 0.5).argmax(axis)`: equal
        maxima; returned only, its int64 never enters later float arithmetic); an inplace op
        through a view of a view (`x[1:].t()[::-1].add_(y)`); a float32 / float16 round trip
        whose each op rounds once (`(x.astype('float32') * 3.0 + 0.1).astype('float64')`:
        exactly rounded ops, so a fused chain that skips a rounding shows); a chain of literal
        constants (fusion renders them inline); a GEMM with transposed operands; min along
        an axis."""
        kind = self.choice(["arg", "arg", "view2", "view2", "round", "round", "literals",
                            "gemm_t", "min", "dropout", "dropout"])
        out = self.fresh()
        if kind == "dropout":
            return self.step_dropout(grad_enabled, out)
        if kind == "view2":
            targets = [v for v in self.vars if self.writable(v, grad_enabled)]
            if not targets:
                return self.step_unary(grad_enabled)
            x = self.pick(targets)
            first = self.draw_view(x)
            with np.errstate(all="ignore"):
                mid = eval(first[1], self.ns)
            if not mid.flags.writeable or mid.size == 0:
                return self.step_view(grad_enabled)
            self.ns["_mid"] = mid
            second = self.draw_view("_mid")
            with np.errstate(all="ignore"):
                v = eval(second[1], self.ns)
            del self.ns["_mid"]
            if not v.flags.writeable or v.size == 0 or not np.shares_memory(v, self.arr(x)):
                return self.step_view(grad_enabled)
            # the outer view's text in place of `_mid` (a call or an index binds tighter)
            pd_t = second[0].replace("_mid", f"({first[0]})" if " " in first[0] else first[0])
            np_t = second[1].replace("_mid", f"({first[1]})" if " " in first[1] else first[1])
            if pd_t.startswith(f"{x}[") and "[" in pd_t[len(x) + 1:] and \
                    self.draw(st.booleans()):
                y, ny = self.operand_for(v.shape)
                return self.emit(f"{pd_t} += {y}", f"{np_t} += {ny}", inplace=True)
            pd, npx = self.inplace_op(pd_t, np_t, v.shape, _mag(v), grad_enabled)
            return self.emit(pd, npx, inplace=True)
        if kind == "arg":
            xs = [v for v in self.vars if self.arr(v).ndim >= 1 and self.arr(v).size]
            if not xs:
                return self.step_unary(grad_enabled)
            x = self.pick(xs)
            a = self.arr(x)
            op = self.choice(["argmax", "argmin"])
            src, nsrc = x, x
            if self.draw(st.booleans()):  # ties: every element beyond +-0.5 is one
                src, nsrc = f"{x}.clip(-0.5, 0.5)", f"np.clip({x}, -0.5, 0.5)"
            if self.draw(st.integers(0, 3)) == 0:
                pd, npx = f"{src}.{op}()", f"np.{op}({nsrc})"
            else:
                ax = self.draw(st.integers(-a.ndim, a.ndim - 1))
                keep = self.draw(st.booleans())
                pd = f"{src}.{op}(axis={ax}" + (", keepdim=True)" if keep else ")")
                npx = f"np.{op}({nsrc}, axis={ax}" + (", keepdims=True)" if keep else ")")
            self.prog.lines.append(f"{out} = {pd}")
            self.prog.np_lines.append(f"{out} = arr({npx})")
            exec(self.prog.np_lines[-1], self.ns)  # noqa: S102
            self.side.append(out)  # (returned, never an operand: it is int64)
            return None
        x = self.pick(self.vars)
        a = self.arr(x)
        m = _mag(a)
        if kind == "round":
            # (not bfloat16: ml_dtypes widens `bfloat16 * 3.0` to float32, where Paddle and the
            # compiler round to bfloat16; the exact programs check bfloat16 chains)
            narrow = self.choice(["float32", "float32", "float16"])
            s1, s2 = self.choice([3.0, -0.7, 0.1, 1.5]), self.choice([0.1, -2.5, 1.0 / 3.0])
            ops = [f"* {s1!r} + {s2!r}", f"- {s2!r}", f"/ {s1!r}", f"* {s1!r} * {s1!r}"]
            chain = self.choice(ops)
            if m > 100:
                chain = f"- {s2!r}"
            nt = {"float32": "np.float32", "float16": "np.float16"}[narrow]
            pd = f"({x}.astype('{narrow}') {chain}).astype('float64')"
            # numpy rounds each op of the chain to the narrow dtype, as every backend must
            npx = f"({x}.astype({nt}) {chain}).astype(np.float64)"
        elif kind == "literals":
            c1, c2 = self.choice([1e-3, 0.1, 1.0 / 3.0, 7.0]), self.choice([-0.25, 2.0, 1e-8])
            pd = f"({x} * {c1!r} + {c2!r}) * ({x} - {c2!r}) / {c1!r}"
            if m > 30:
                pd = f"{x} * {c1!r} + {c2!r}"
            npx = pd
        elif kind == "gemm_t":
            # `p.t() @ q` contracts axis 0 of both, `p @ q.t()` axis 1 of both
            pairs = [(p, q, k) for p in self.vars for q in self.vars for k in (0, 1)
                     if self.arr(p).ndim == 2 and self.arr(q).ndim == 2
                     and self.arr(p).shape[k] == self.arr(q).shape[k]
                     and _mag(self.arr(p)) * _mag(self.arr(q)) * self.arr(p).shape[k] <= 100]
            if not pairs:
                return self.step_unary(grad_enabled)
            p, q, k = self.choice(pairs)
            pd, npx = (f"{p}.t() @ {q}", f"{p}.T @ {q}") if k == 0 else \
                (f"{p} @ {q}.t()", f"{p} @ {q}.T")
        else:  # min along an axis (ties at the clip bound, or over a zero-size axis refused)
            if a.ndim == 0 or a.size == 0:
                return self.step_unary(grad_enabled)
            ax = self.draw(st.integers(-a.ndim, a.ndim - 1))
            pd, npx = f"{x}.clip(-0.5, 0.5).min(axis={ax})", \
                f"np.min(np.clip({x}, -0.5, 0.5), axis={ax})"
        self.emit(f"{out} = {pd}", f"{out} = arr({npx})", define=out)

    # -- hard aliasing: writes through chains of views of arguments that share memory ----------
    def _view_chain(self, x, length):
        """(compiler expr, numpy expr, numpy array) of up to `length` views of `x` in a row,
        each still a writable view of x's memory (a chain stops before a view that copies)."""
        t, n = x, x
        for _ in range(length):
            self.ns["Q__"] = eval(n, self.ns)
            pd_v, np_v = self.draw_view("Q__")
            del self.ns["Q__"]
            with np.errstate(all="ignore"):
                v = eval(np_v.replace("Q__", f"({n})"), self.ns)
            if not v.flags.writeable or v.size == 0 or not np.shares_memory(v, self.arr(x)):
                break
            t, n = pd_v.replace("Q__", f"({t})"), np_v.replace("Q__", f"({n})")
        return t, n, eval(n, self.ns)

    def step_alias_chain(self, grad_enabled):
        """An inplace op through a chain of one to three views of an argument that shares
        memory with another (`a.t()[::-1].reshape([12]).add_(...)`), its operand often the
        other argument's elements, which the write overlaps (`e.flatten()[:12].reshape([4,
        3])`), or a leaf (a gradient through the shared memory); then sometimes a read of the
        other argument, which must see the write."""
        args = [v for v in self.prog.inputs if v in self.vars]
        members = [v for v in args if self.writable(v, grad_enabled) and any(
            np.shares_memory(self.arr(v), self.arr(w)) for w in args if w != v)]
        targets = members or [v for v in self.vars if self.writable(v, grad_enabled)]
        if not targets:
            return self.step_view(grad_enabled)
        x = self.pick(targets)
        t, n, v = self._view_chain(x, self.draw(st.integers(1, 3)))
        if v.size == 0 or not v.flags.writeable:
            return self.step_view(grad_enabled)
        shape = v.shape
        others = [w for w in args if w != x and np.shares_memory(self.arr(w), self.arr(x))
                  and self.arr(w).size >= v.size]
        kind = self.choice(["other", "other", "leaf", "any"] if others else ["leaf", "any"])
        leaves = [w for w in self.prog.leaves if w in self.vars
                  and _broadcast(self.arr(w).shape, shape) == tuple(shape)]
        if kind == "other":
            w = self.pick(others)
            size = int(np.prod(shape))
            y = f"{w}.flatten()[:{size}].reshape({_fmt_shape(shape)})"
            ny = f"{w}.reshape(-1)[:{size}].reshape({_np_shape(shape)})"
            if _mag(self.arr(w)) > 10:
                y, ny = f"{y}.tanh()", f"np.tanh({ny})"
        elif kind == "leaf" and leaves and grad_enabled:
            y = ny = self.pick(leaves)
            if _mag(self.arr(y)) > 10:
                y, ny = f"{y}.tanh()", f"np.tanh({ny})"
        else:
            y, ny = self.operand_for(shape, max_mag=10, alias=(t, n))
        op = self.choice(["add_", "subtract_", "multiply_", "setitem", "setitem_add"])
        if op == "multiply_" and _mag(v) > 10:
            op = "add_"
        if op == "setitem":
            self.emit(f"({t})[...] = {y}", f"({n})[...] = {ny}", inplace=True)
        elif op == "setitem_add":  # `x[...] += y`: the tail assigns the region to itself
            self.emit(f"({t})[...] += {y}", f"({n})[...] += {ny}", inplace=True)
        else:
            sign = {"add_": "+", "subtract_": "-", "multiply_": "*"}[op]
            self.emit(f"({t}).{op}({y})", f"inplace({n}, ({n}) {sign} {ny})", inplace=True)
        readers = [w for w in args if w != x and np.shares_memory(self.arr(w), self.arr(x))]
        if readers and self.draw(st.booleans()):
            w = self.pick(readers)
            out = self.fresh()
            read, np_read = self.choice([("{w} * 1.0", "{w} * 1.0"),
                                         ("{w}.sum(axis=0)", "np.sum({w}, axis=0)"),
                                         ("{w}.t() * 0.5", "{w}.T * 0.5")]
                                        if self.arr(w).ndim == 2 else
                                        [("{w} * 1.0", "{w} * 1.0")])
            self.emit(f"{out} = " + read.format(w=w), f"{out} = arr(" + np_read.format(w=w)
                      + ")", define=out)
    # -- end of hard aliasing's steps ------------------------------------------------------------

    def step_dropout(self, grad_enabled, out=None):
        """Philox numbers from a constant seed (`F.dropout`): regenerate_random's case, which
        the numpy twin can't follow (its value `x / 0.8` only bounds the magnitude)."""
        out = out or self.fresh()
        x = self.pick(self.vars)
        seed = self.draw(st.integers(0, 3))
        self.prog.twin = False
        self.emit(f"{out} = F.dropout({x}, p=0.2, seed={seed})", f"{out} = arr({x} / 0.8)",
                  define=out)

    def step_exact(self, grad_enabled):
        """Only ops whose every result is one rounding of the exact value (or no rounding):
        `+ - *` with variables or Python scalars, `/ (|y| + 1)`, negation, abs, maximum,
        minimum, where, clip, casts, views, copies, concat, flip, max/min along an axis, and
        inplace adds, products, clips and fills through views. The project holds every
        backend to the same bits on these in every dtype (CONVENTIONS.md, "Tolerances"), so
        programs of them compare the cpu backend's fused chains (literal constants inline,
        16-bit values rounded per op) with the numpy backend's op-by-op run bit for bit."""
        kind = self.choice(["binary", "binary", "binary", "unary", "unary", "inplace",
                            "inplace", "view", "select", "reduce", "copy", "setitem"])
        if kind == "view":
            return self.step_view(grad_enabled)
        out = self.fresh()
        scalars = ["0.1", "2.5", "-3", "7", "0.5", "1.0 / 3.0", "1"]
        if kind in ("inplace", "setitem"):
            targets = [v for v in self.vars if self.writable(v, grad_enabled)]
            if not targets:
                return self.step_view(grad_enabled)
            x = self.pick(targets)
            t, n = x, x
            if self.draw(st.booleans()):  # through a view (sometimes of a view)
                for _ in range(self.draw(st.integers(1, 2))):
                    self.ns["Q__"] = eval(n, self.ns)
                    pd_v, np_v = self.draw_view("Q__")
                    del self.ns["Q__"]
                    v = eval(np_v.replace("Q__", f"({n})"), self.ns)
                    if not v.flags.writeable or v.size == 0:
                        break
                    t, n = pd_v.replace("Q__", f"({t})"), np_v.replace("Q__", f"({n})")
            shape = eval(n, self.ns).shape
            y, ny = self.operand_for(shape, alias=(t, n))
            if kind == "setitem" and shape:
                idx = self.draw_index(shape)
                region = eval(f"({n})[np.index_exp[{idx}]]", self.ns)
                if region.size == 0:
                    return self.step_view(grad_enabled)
                y, ny = self.operand_for(region.shape)
                return self.emit(f"({t})[{idx}] = {y}", f"({n})[{idx}] = {ny}", inplace=True)
            op = self.choice(["add_", "subtract_", "multiply_", "clip_", "fill_", "zero_",
                              "+="])
            if op == "multiply_" and _mag(eval(n, self.ns)) > 100:
                op = "add_"
            if op in ("add_", "subtract_", "multiply_"):
                sign = {"add_": "+", "subtract_": "-", "multiply_": "*"}[op]
                return self.emit(f"({t}).{op}({y})", f"inplace({n}, ({n}) {sign} {ny})",
                                 inplace=True)
            if op == "+=":
                if not t.startswith(x + "[") and t != x:
                    return self.emit(f"({t}).add_({y})", f"inplace({n}, ({n}) + {ny})",
                                     inplace=True)
                return self.emit(f"{t} += {y}", f"{n} += {ny}", inplace=True)
            if op == "clip_":
                return self.emit(f"({t}).clip_(-0.5, 7.0)",
                                 f"inplace({n}, np.clip({n}, -0.5, 7.0))", inplace=True)
            if op == "fill_":
                return self.emit(f"({t}).fill_(2.5)", f"inplace({n}, 2.5)", inplace=True)
            return self.emit(f"({t}).zero_()", f"inplace({n}, 0.0)", inplace=True)
        x = self.pick(self.vars)
        a = self.arr(x)
        if kind == "binary":
            y, ny = self.operand_for(a.shape) if self.draw(st.booleans()) else (None, None)
            partners = [v for v in self.vars if _broadcast(a.shape, self.arr(v).shape)]
            if y is None:
                y = ny = self.pick(partners) if self.draw(st.booleans()) else \
                    self.choice(scalars)
            op = self.choice(["+", "-", "*", "/", "r-"])
            if op == "*" and _mag(a) * (10 if _number(ny) else _mag(eval(ny, self.ns))) > 1e4:
                op = "+"
            if op == "/":
                pd, npx = f"{x} / {y}" if _number(y) else f"{x} / ({y}.abs() + 1)", \
                    f"{x} / {ny}" if _number(ny) else f"{x} / (np.abs({ny}) + 1)"
            elif op == "r-":
                pd = npx = f"{y} - {x}" if _number(y) else f"{x} - {y}"
            else:
                pd, npx = f"{x} {op} {y}", f"{x} {op} {ny}"
        elif kind == "unary":
            pd, npx = self.choice([
                (f"-{x}", f"-{x}"), (f"{x}.abs()", f"np.abs({x})"),
                (f"{x}.clip(-0.5, 0.75)", f"np.clip({x}, -0.5, 0.75)"),
                (f"{x}.astype('float32')", f"{x}.astype(np.float32)"),
                (f"{x}.astype('float16')", f"{x}.astype(np.float16)"),
                (f"{x}.astype('float64')", f"{x}.astype(np.float64)"),
                (f"{x}.maximum({x}.t())" if a.ndim == 2 and a.shape[0] == a.shape[1]
                 else f"{x}.maximum({x}[..., ::-1])",
                 f"np.maximum({x}, {x}.T)" if a.ndim == 2 and a.shape[0] == a.shape[1]
                 else f"np.maximum({x}, {x}[..., ::-1])")])
        elif kind == "select":
            partners = [v for v in self.vars if _broadcast(a.shape, self.arr(v).shape)]
            y = self.pick(partners)
            pd, npx = self.choice([
                (f"cc.where({x} > {y}, {x}, {y})", f"np.where({x} > {y}, {x}, {y})"),
                (f"{x}.minimum({y})", f"np.minimum({x}, {y})"),
                (f"{x}.maximum({y})", f"np.maximum({x}, {y})"),
                (f"cc.where({x} >= 0.5, {y}, 2.5)", f"np.where({x} >= 0.5, {y}, 2.5)")])
        elif kind == "reduce":
            if a.ndim == 0 or a.size == 0:
                pd, npx = f"{x}.abs()", f"np.abs({x})"
            else:
                ax = self.draw(st.integers(-a.ndim, a.ndim - 1))
                op = self.choice(["max", "min"])
                keep = self.draw(st.booleans())
                pd = f"{x}.{op}(axis={ax}" + (", keepdim=True)" if keep else ")")
                npx = f"np.{op}({x}, axis={ax}" + (", keepdims=True)" if keep else ")")
        else:  # copies
            opts = [(f"{x}.clone()", f"np.array({x})")]
            if a.ndim >= 1:
                ax = self.draw(st.integers(-a.ndim, a.ndim - 1))
                opts += [(f"{x}.flip({ax})", f"np.flip({x}, {ax})"),
                         (f"cc.concat([{x}, {x}], axis={ax})",
                          f"np.concatenate([{x}, {x}], axis={ax})")]
            pd, npx = self.choice(opts)
        self.emit(f"{out} = {pd}", f"{out} = arr({npx})", define=out)
    # -- end of the targeted runs' steps ----------------------------------------------------------

    # -- refused steps ----------------------------------------------------------------------------
    def error_step(self) -> bool:
        # (a zero-size leaf shares no memory: nothing writes it)
        kinds = ["expand", "broadcast", "numpy", "label"] + (
            ["leaf"] if any(self.on_leaf(v) for v in self.vars) else [])
        kind = self.choice(kinds)
        if kind == "numpy":  # any conversion of a traced tensor to numpy (issue 13)
            x = self.pick(self.vars)
            pd = self.choice([f"np.exp({x})", f"np.sum({x})", f"np.asarray({x})",
                              f"float({x}.sum())", f"{x}.numpy()", f"np.add.reduce({x})",
                              f"np.concatenate([{x}, {x}])"])
        elif kind == "label":  # an out-of-range class index (issue 13)
            xs = [v for v in self.vars if self.arr(v).ndim >= 2 and self.arr(v).size]
            if not xs:
                return False
            x = self.pick(xs)
            shape = self.arr(x).shape
            pd = f"F.cross_entropy({x}, {self._labels(shape[:-1], shape[-1], bad=True)})"
        elif kind == "leaf":
            x = self.pick([v for v in self.vars if self.on_leaf(v)])
            pd, _ = self.inplace_op(x, x, self.arr(x).shape, 0.0, True)
            if self.draw(st.booleans()) and self.arr(x).ndim:
                idx = self.draw_index(self.arr(x).shape)
                pd = f"{x}[{idx}] = 0.5"
        elif kind == "expand":
            free = [v for v in self.vars if not self.on_leaf(v)]
            if not free:
                return False
            x = self.pick(free)
            shape = self.arr(x).shape
            target = _fmt_shape((2,) + shape)
            pd = self.choice([f"{x}.expand({target}).add_(1.0)",
                              f"{x}.expand({target})[1].zero_()",
                              f"{x}.expand({target}).sin_()",
                              f"{x}.expand({target})[0] = 1.0"])
        else:
            small = [v for v in self.vars if not self.on_leaf(v) and self.arr(v).ndim
                     and any(len(self.arr(w).shape) > self.arr(v).ndim
                             and _broadcast(self.arr(w).shape, self.arr(v).shape)
                             for w in self.vars)]
            if not small:
                return False
            x = self.pick(small)
            y = self.pick([w for w in self.vars if len(self.arr(w).shape) > self.arr(x).ndim
                           and _broadcast(self.arr(w).shape, self.arr(x).shape)])
            pd = self.choice([f"{x}.add_({y})", f"{x}.multiply_({y})", f"{x} += {y}"])
        self.prog.lines.append(pd)
        self.prog.np_lines.append(None)
        self.prog.expect_error = kind
        self.prog.error_step = len(self.prog.lines) - 1
        return True


@st.composite
def programs(draw, max_steps: int = 10, backward: bool | None = None,
             errors: bool = True, detach: bool = True, whole_loss: bool = False,
             aliasing: bool = True, shapes: str = "default",
             targeted: bool = False, exact: bool = False,
             dropouts: bool = False, hard_aliasing: bool = False) -> RandomProgram:
    """`detach=False` leaves out `detach()` views: a write through one changes data without
    history (PyTorch's semantics), which finite differences of the program can't follow.
    `whole_loss=True` puts every value the program made into the loss (by default, up to 3
    of them), so that every step is on the gradient's path. `aliasing=False` gives every
    argument its own memory. `shapes` names one of SHAPE_SETS (other than "default", the
    arguments never share memory); `targeted=True` adds TARGETED_STEPS to the menu;
    `hard_aliasing=True` makes every program's arguments share memory (HARD_ALIASES or
    ALIASES) and adds ALIAS_STEPS to the menu."""
    table = SHAPE_SETS[shapes]
    names = list(table)
    alias = draw(st.sampled_from([None] * 4 + sorted(ALIASES))) \
        if aliasing and shapes == "default" and not hard_aliasing else None
    if hard_aliasing:  # (hard aliasing: every program shares memory, mostly in the new ways)
        alias = draw(st.sampled_from(sorted(HARD_ALIASES) * 2 + sorted(ALIASES)))
    if alias is None:
        k = draw(st.integers(2, len(names)))
        inputs = {n: table[n] for n in names[:k]}
    else:
        shape, views = ALL_ALIASES[alias]
        s = np.empty(shape)
        inputs = {n: eval(expr, {"s": s, "np": np}).shape for n, expr in views.items()}
        others = [n for n in names if n not in inputs]
        inputs.update({n: INPUTS[n] for n in others[:draw(st.integers(1, len(others)))]})
    names = list(inputs)
    prog = RandomProgram(inputs, draw(st.integers(0, 2**16)), alias=alias)
    g = _Gen(draw, prog, detach, targeted)
    g.dropouts = dropouts
    g.hard_aliasing = hard_aliasing
    if exact:  # (forward only, no refused step: the backends' bits are what is compared)
        g.exact, prog.twin, backward, errors = True, False, False, False
    if backward is None:
        backward = draw(st.booleans())
    mark = not exact and (backward or draw(st.integers(0, 3)) == 0)
    if mark:
        # An argument that shares memory with another is a leaf only when both are one array
        # (one tensor: `fn(w, w)`); which of two overlapping views would own the gradient?
        shared = set(ALL_ALIASES[alias][1]) - ({"a"} if alias == "same" else set()) \
            if alias else set()
        candidates = [n for n in names if n not in shared]
        prog.leaves = draw(st.lists(st.sampled_from(candidates), min_size=1,
                                    max_size=len(candidates), unique=True)
                           .map(lambda ls: sorted(ls, key=names.index)))
        for leaf in prog.leaves:
            g.emit(f"{leaf}.stop_gradient = False", None)
    for _ in range(draw(st.integers(1, max_steps))):
        g.step()
    if errors and draw(st.integers(0, 9)) == 7 and g.error_step():
        return prog
    if backward:
        prog.has_backward = True
        terms = [f"{w}.tanh().sum()" for w in prog.leaves]
        new = [v for v in g.vars if v not in inputs]
        chosen = new if whole_loss else \
            draw(st.lists(st.sampled_from(new), max_size=3, unique=True)) if new else []
        for v in chosen:
            term = draw(st.sampled_from([f"{v}.sum()", f"({v} * {v}).mean()",
                                         f"{v}.sin().sum()"]))
            terms.append(term if g.arr(v).size else f"{v}.sum()")
        terms = draw(st.permutations(terms))
        g.emit("loss = " + " + ".join(terms), None, define=None)
        # retain_graph: a second backward below may run through this one's graph (ARCHITECTURE.md
        # §3)
        g.emit("loss.backward(retain_graph=True)", None)
        for _ in range(draw(st.integers(0, 2))):
            g.step()
        if draw(st.integers(0, 3)) == 2:  # a second backward accumulates into the grads
            w = draw(st.sampled_from(prog.leaves))
            new = [v for v in g.vars if v not in inputs]
            extra = f" + {draw(st.sampled_from(new))}.sum()" if new else ""
            g.emit(f"loss2 = ({w} * {w}).sum(){extra}", None)
            g.emit("loss2.backward()", None)
        updated = draw(st.lists(st.sampled_from(prog.leaves), max_size=len(prog.leaves),
                                unique=True))
        if updated:
            g.emit("with cc.no_grad():", None)
            # targeted: also lr 1.0 (`w -= 1.0 * w.grad`: a scale by one the rewrites may drop)
            lr = draw(st.sampled_from([0.1, 1.0])) if targeted else 0.1
            for w in updated:
                form = draw(st.sampled_from([f"{w}.subtract_({lr} * {w}.grad)",
                                             f"{w} -= {lr} * {w}.grad",
                                             f"{w}.add_({w}.grad, alpha=-{lr})"]))
                g.emit("    " + form, None, inplace=True)
    # What to return: some variables (views included), the grads, maybe the loss.
    pool = [v for v in g.vars if v not in inputs] or list(g.vars)
    chosen = draw(st.lists(st.sampled_from(g.vars), min_size=0, max_size=3, unique=True))
    last = pool[-1]
    rets = [(last, last)] + [(v, v) for v in chosen if v != last] + [(v, v) for v in g.side]
    if backward:
        rets += [(f"{w}.grad", None) for w in prog.leaves]
        if draw(st.booleans()):
            rets.append(("loss", None))
    prog.returns = rets
    return prog
