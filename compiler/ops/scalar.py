"""A tiny scalar-expression language: how one output element of an elementwise op is computed.

Each elementwise registry entry carries `expr`, a function from argument expressions to an
expression tree; the LLVM and CUDA emitters render the same tree, and `evaluate` runs it with
numpy so tests can check every expression against the op's reference implementation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .registry import is_half, promote

# Function names an emitter must know. Arithmetic and comparisons are spelled as operators.
FUNCTIONS = ("neg", "abs", "exp", "expm1", "log", "sin", "cos", "tan", "tanh", "sqrt", "erf",
             "asinh", "acosh", "atanh", "max", "min", "pow", "where", "not", "and", "or", "cast",
             "floordiv", "mod", "floor", "ceil", "rint", "trunc", "log1p", "log2",
             "log10", "sinh", "cosh", "asin", "acos", "atan", "bitand", "bitxor", "shr")
# `bitand`, `bitxor` and `shr` (logical shift right) work on unsigned integers: the random
# number generator (Philox, `compiler/ops/random_ops.py`) is written with them.
# `rint` rounds half to even (IEEE roundeven, NumPy's and PyTorch's `round`).
# `floordiv` and `mod` round towards -inf (Python, NumPy); for integers a zero divisor gives 0
# and INT_MIN // -1 wraps to INT_MIN (NumPy's results), so generated code never traps.
BINARY_OPERATORS = ("+", "-", "*", "/", "<", ">", "<=", ">=", "==", "!=")


@dataclass(frozen=True)
class Expr:
    op: str            # "arg", "const", "index", an operator or a FUNCTIONS name
    args: tuple = ()
    value: object = None  # arg index, constant value, or cast dtype name

    def _bin(self, op, other, swap=False):
        other = other if isinstance(other, Expr) else const(other)
        return Expr(op, (other, self) if swap else (self, other))

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, True)
    def __lt__(self, o): return self._bin("<", o)
    def __gt__(self, o): return self._bin(">", o)
    def __le__(self, o): return self._bin("<=", o)
    def __ge__(self, o): return self._bin(">=", o)
    def __neg__(self): return Expr("neg", (self,))

    def eq(self, o): return self._bin("==", o)
    def ne(self, o): return self._bin("!=", o)

    def __str__(self) -> str:
        if self.op == "arg":
            return f"${self.value}"
        if self.op == "index":
            return "$index"
        if self.op == "const":
            return repr(self.value)
        if self.op in BINARY_OPERATORS:
            return f"({self.args[0]} {self.op} {self.args[1]})"
        if self.op == "cast":
            return f"cast<{self.value}>({self.args[0]})"
        return f"{self.op}({', '.join(str(a) for a in self.args)})"


def arg(i: int) -> Expr:
    return Expr("arg", value=i)


def index() -> Expr:
    """The output element's flat row-major index (uint64) in the node's logical shape: the
    loop counter of the kernel that computes it. A random op reads it (Philox's counter), so
    it needs no index array; every emitter knows its loop's position."""
    return Expr("index")


def const(c) -> Expr:
    return Expr("const", value=c)


def call(fn: str, *args) -> Expr:
    assert fn in FUNCTIONS, fn
    return Expr(fn, tuple(a if isinstance(a, Expr) else const(a) for a in args))


def cast(e: Expr, dtype) -> Expr:
    return Expr("cast", (e,), np.dtype(dtype).name)


def substitute(e: Expr, args: dict) -> Expr:
    """`e` with `arg(i)` replaced by `args[i]` where given."""
    if e.op == "arg":
        return args.get(e.value, e)
    if not e.args:
        return e
    return Expr(e.op, tuple(substitute(x, args) for x in e.args), e.value)


# -- typing, as every renderer does it -----------------------------------------------------
class Weak:
    """A Python constant whose type is decided by the operand it meets (NEP 50)."""

    def __init__(self, value):
        self.value = value

    @property
    def is_float(self) -> bool:
        return isinstance(self.value, float)


def d_value(w):
    return w.value if isinstance(w, Weak) else w


def common_dtype(items) -> np.dtype:
    """numpy's result type of typed operands (dtypes) and weak Python constants (Weak): the
    type every renderer (LLVM, CUDA C) gives an operator's operands."""
    typed = [d for d in items if not isinstance(d, Weak)]
    weak = [d for d in items if isinstance(d, Weak)]
    if typed:
        # np.result_type knows no bfloat16 with float16 (and no int with a half's rule):
        # the registry's promotion where a 16-bit float takes part, numpy's elsewhere
        t = promote(*typed) if any(is_half(d) for d in typed) else np.result_type(*typed)
        if any(w.is_float for w in weak) and t.kind in "iub":
            t = np.dtype(np.float64)
        elif weak and t == np.dtype(np.bool_):
            t = np.dtype(np.int64)
        return t
    return np.dtype(np.float64 if any(w.is_float for w in weak) else np.int64)


# -- max/min as the generated code computes them -------------------------------------------
# The project's max/min keep the *first* operand where the two compare equal, so +0.0 and -0.0
# come out as the cpu and gpu code give them (relu(-0.0) and clip(-0.0, 0, 1) are -0.0, as in
# NumPy's clip and torch). NumPy does not document its choice: on x86 its maximum/minimum keep
# the second (maxps/minps, and its scalar loops), so swapping the operands is exact and free;
# the probe checks that, and elsewhere an explicit select is used.
def _keeps_second_on_ties() -> bool:
    for dt in (np.float32, np.float64):
        for n in (1, 3, 8, 17, 64):
            m, p = np.full(n, -0.0, dt), np.zeros(n, dt)
            for f in (np.maximum, np.minimum):
                for x, y in ((m, p), (p, m), (m[::-1], p[:1]), (m[0], p[0])):
                    if not np.array_equal(np.signbit(f(x, y)),
                                          np.signbit(np.broadcast_to(y, np.shape(m)
                                                                     if np.ndim(x) else ()))):
                        return False
    return True


def _select_first_on_ties(ufunc):
    if _keeps_second_on_ties():
        def swapped(x, y, **kw):
            return ufunc(y, x, **kw)
        return swapped

    def select(x, y, out=None, dtype=None, casting="same_kind"):
        x, y = np.asarray(x), np.asarray(y)
        if dtype is not None:
            x, y = x.astype(dtype, copy=False), y.astype(dtype, copy=False)
        r = ufunc(x, y)
        if r.dtype.kind == "f":  # equal values differ only in a zero's sign
            r = np.where((x == y) | (x != x), x, r).astype(r.dtype, copy=False)
        if out is None:
            return r
        np.copyto(out, r, casting=casting)
        return out
    return select


maximum = _select_first_on_ties(np.maximum)
minimum = _select_first_on_ties(np.minimum)


# -- numpy evaluation (for testing expressions against reference implementations) ---------
_NP_FUNCS = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "expm1": np.expm1, "log": np.log,
    "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sqrt": np.sqrt,
    "erf": np.frompyfunc(math.erf, 1, 1), "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "floordiv": np.floor_divide, "mod": np.remainder,
    "max": maximum, "min": minimum, "floor": np.floor, "ceil": np.ceil, "rint": np.rint,
    "trunc": np.trunc, "log1p": np.log1p, "log2": np.log2,
    "log10": np.log10, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "bitand": np.bitwise_and, "bitxor": np.bitwise_xor,
    "shr": np.right_shift,
    "pow": np.power, "where": np.where, "not": np.logical_not, "and": np.logical_and,
    "or": np.logical_or,
}
_NP_OPS = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "<": np.less,
    ">": np.greater, "<=": np.less_equal, ">=": np.greater_equal, "==": np.equal,
    "!=": np.not_equal,
}


def evaluate(e: Expr, args: list[np.ndarray], _memo=None, index=None):
    """Evaluate `e` elementwise with numpy over broadcast arguments; `index()` is `index` (a
    uint64 array of the elements' flat indices). A subexpression shared by identity is
    evaluated once (expressions such as Philox's and Box-Muller's are DAGs)."""
    if e.op == "arg":
        return args[e.value]
    if e.op == "const":
        return e.value
    if e.op == "index":
        if index is None:
            raise ValueError("evaluating an expression that reads the element index: pass "
                             "index=")
        return np.asarray(index, np.uint64)
    memo = {} if _memo is None else _memo
    if id(e) in memo:
        return memo[id(e)][0]
    vals = [evaluate(a, args, memo, index) for a in e.args]
    out = _apply(e, vals)
    memo[id(e)] = (out, e)  # (keeps e alive, so its id stays unique while memo lives)
    return out


def _apply(e: Expr, vals):
    if e.op == "cast":
        return np.asarray(vals[0]).astype(e.value)
    if e.op in _NP_OPS:
        return _NP_OPS[e.op](*vals)
    with np.errstate(all="ignore"):
        out = _NP_FUNCS[e.op](*vals)
    if e.op == "erf":
        out = np.asarray(out).astype(np.result_type(vals[0], np.float32))
    return out
