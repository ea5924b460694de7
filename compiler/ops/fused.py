"""The `fused` op: several elementwise nodes computed as one (made by `passes.fusion`).

A fused node's one attribute, `body` (a `FusedBody`), holds the inner nodes it replaced, in
program order, the last one being the root whose value the node produces. Each operand of an
inner node is either an input of the fused node (`("in", k)`) or an earlier inner node
(`("node", j)`). Inner values never get a buffer.

What each consumer of the op uses:
  - code emitters: `FusedBody.expr()`, one scalar-expression tree (`compiler.ops.scalar`) over
    the fused node's inputs `$0..$n-1`, built from the inner ops' own registry expressions
    (`expr_for`), each inner result cast to its dtype as the unfused op's store would. A value
    used twice inside the body is the *same* `Expr` object in the tree, so an emitter that
    memoizes by identity (`runtime/cpu/scalar.Renderer`) computes it once. The tree is up to
    a few hundred levels deep: walk it with `postorder(expr)` (operands first), not by
    recursion;
  - the numpy reference (`ref`): the inner ops' references in order, on whole arrays;
  - the numpy arena executor (`into`): the same, chunk by chunk (CHUNK output elements at a
    time), each inner value written into its row of the node's planned scratch (`scratch`:
    rows reused once their value is dead), so a call allocates nothing the plan didn't place.
    A body made for a native backend (`FusedBody.scratch` False) declares no scratch, since
    native code keeps inner values in registers; its `into` then uses small temporaries.
"""
from __future__ import annotations

import numpy as np

from . import scalar as S
from ..errors import ShapeError
from .elementwise import expr_for
from .registry import ELEMENTWISE, REGISTRY, defop, format_attr

CHUNK = 512  # output elements per piece in the chunked numpy evaluation (as runtime.arena)

# Cost of one scalar operation in "scalar operations": a transcendental function is a
# polynomial (exp, erf: tens of instructions) or a libm call; the rest count 1. Casts, loads
# and constants are free. The fusion pass caps a fused node's total (LLVM's -O3 time grows
# faster than linearly with a loop body's size, measured).
_HEAVY = {"exp": 20, "expm1": 20, "erf": 40, "log": 20, "log1p": 20, "log2": 20, "log10": 20,
          "sin": 20, "cos": 20, "tan": 20, "tanh": 20, "asinh": 20, "acosh": 20, "atanh": 20,
          "sinh": 20, "cosh": 20, "asin": 20, "acos": 20, "atan": 20, "pow": 20,
          "floordiv": 8, "mod": 8}


def expr_cost(e: S.Expr) -> int:
    """Scalar operations an emitter renders for `e`, each distinct subexpression once (by
    identity: the renderers memoize by identity, so a shared subtree costs once)."""
    seen, stack, cost = set(), [e], 0
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if x.op not in ("arg", "const", "cast", "index"):
            cost += _HEAVY.get(x.op, 1)
        stack.extend(x.args)
    return cost


def postorder(e: S.Expr) -> list[S.Expr]:
    """The distinct subexpressions of `e` (by identity), each after its operands: render
    them in this order (one statement each, in C) and no recursion is needed. A fused body
    is up to ~2 * MAX_COST levels deep, beyond Python's recursion limit for a naive walk."""
    out, seen, stack = [], set(), [(e, False)]
    while stack:
        x, done = stack.pop()
        if done:
            out.append(x)
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        stack.append((x, True))
        stack.extend((a, False) for a in reversed(x.args) if id(a) not in seen)
    return out


def substitute_shared(e: S.Expr, args: dict, memo: dict | None = None) -> S.Expr:
    """`e` with `arg(i)` replaced by `args[i]`, keeping shared subtrees shared (memoized by
    identity: Philox's expression is a tree of ~2,800 nodes over ~230 distinct ones)."""
    memo = {} if memo is None else memo
    key = id(e)
    if key in memo:
        return memo[key]
    if e.op == "arg":
        out = args.get(e.value, e)
    elif not e.args:
        out = e
    else:
        out = S.Expr(e.op, tuple(substitute_shared(a, args, memo) for a in e.args), e.value)
    memo[key] = out
    return out


def node_expr(node, operand_exprs) -> S.Expr:
    """One inner node's value as an expression of its operands' expressions, cast to its
    dtype (what storing it and loading it back would do)."""
    out = node.out
    if node.op == "full":
        return S.cast(S.const(node.attrs["value"]), out.dtype)
    e = expr_for(REGISTRY[node.op], node.attrs, [v.dtype for v in node.inputs], out.dtype)
    return S.cast(substitute_shared(e, dict(enumerate(operand_exprs))), out.dtype)


class FusedBody:
    """The inner nodes of one fused node (see the module docstring)."""

    def __init__(self, nodes, operands, in_types, scratch: bool = True):
        self.nodes = tuple(nodes)
        self.operands = tuple(tuple(o) for o in operands)
        self.in_types = tuple((tuple(s), np.dtype(d)) for s, d in in_types)
        self.scratch = scratch
        self._expr = None
        self._rows = None

    @property
    def root(self):
        return self.nodes[-1]

    def expr(self) -> S.Expr:
        """The body as one scalar expression over the fused node's inputs ($k is input k)."""
        if self._expr is None:
            exprs: list[S.Expr] = []
            args = [S.arg(k) for k in range(len(self.in_types))]
            for node, ops in zip(self.nodes, self.operands):
                exprs.append(node_expr(node, [args[i] if kind == "in" else exprs[i]
                                              for kind, i in ops]))
            self._expr = exprs[-1]
        return self._expr

    def cost(self) -> int:
        return expr_cost(self.expr())

    def operand_text(self, node_index: int, refs) -> str:
        """The operands of inner node `node_index` as printed: `refs[k]` for input k, the
        inner value's name, or a `full` constant's value."""
        out = []
        for kind, i in self.operands[node_index]:
            if kind == "in":
                out.append(refs[i])
            elif self.nodes[i].op == "full":
                out.append(format_attr(self.nodes[i].attrs["value"]))
            else:
                out.append(self.nodes[i].out.ref())
        return ", ".join(out)

    def __len__(self) -> int:
        """The number of ops inside (constants not counted)."""
        return sum(n.op != "full" for n in self.nodes)

    def __str__(self) -> str:
        return f"<{len(self)} ops>"

    # -- numpy evaluation ---------------------------------------------------------------------
    def _last_use(self) -> list[int]:
        last = list(range(len(self.nodes)))
        for j, ops in enumerate(self.operands):
            for kind, i in ops:
                if kind == "node":
                    last[i] = max(last[i], j)
        return last

    def rows(self) -> tuple[list[int | None], list[np.dtype]]:
        """Scratch row of each inner value (None for the root, which is written into the
        output, and for `full` constants, computed in place), and the dtype of each row: a row
        is reused by a later value of the same dtype once its value is dead."""
        if self._rows is not None:
            return self._rows
        last = self._last_use()
        free: dict[np.dtype, list[int]] = {}
        row_of: list[int | None] = []
        row_dtypes: list[np.dtype] = []
        dying: dict[int, list[int]] = {}
        for j, node in enumerate(self.nodes):
            for r in dying.pop(j, ()):  # operands read for the last time by node j
                free.setdefault(row_dtypes[r], []).append(r)
            if j == len(self.nodes) - 1 or node.op == "full":
                row_of.append(None)
                continue
            pool = free.get(node.out.dtype)
            if pool:
                r = pool.pop()
            else:
                r = len(row_dtypes)
                row_dtypes.append(node.out.dtype)
            row_of.append(r)
            dying.setdefault(max(last[j], j + 1), []).append(r)
        self._rows = (row_of, row_dtypes)
        return self._rows

    def reads_index(self) -> bool:
        """Whether an inner op reads the element index (a random op: Philox's counter)."""
        return any(REGISTRY[n.op].random for n in self.nodes)

    def evaluate(self, arrays, dest=None, rows=None, index=None):
        """The root's value from the input arrays: the inner ops' references in order (each
        result cast to its node's dtype, as the reference interpreter does). With `dest` and
        `rows` (arrays of one piece's length, `rows()`'s layout), each inner value goes into
        its row and the root into `dest`, through the ops' `into` where they have one.
        `index`: the piece's flat indices, for a random op (None: the whole output)."""
        row_of = self.rows()[0] if rows is not None else None
        vals = []
        last = len(self.nodes) - 1
        for j, (node, ops) in enumerate(zip(self.nodes, self.operands)):
            if node.op == "full":
                vals.append(_full_value(node))
                continue
            args = [arrays[i] if kind == "in" else vals[i] for kind, i in ops]
            target = None if rows is None else dest if j == last else rows[row_of[j]]
            if REGISTRY[node.op].random:  # its numbers are those of the piece's indices
                vals.append(_run(node, args, target, {"index": index}))
                continue
            vals.append(_run(node, args, target))
        return vals[-1]


def _full_value(node):
    # A `full` inside a body is a constant: 0-d, broadcast by whatever reads it.
    return np.asarray(node.attrs["value"]).astype(node.out.dtype)


def _run(node, args, target, extra=None):
    """One inner node: into `target` when given (its `into`, else its reference and a copy),
    else its reference's fresh result. `extra`: keywords for the reference only (a random
    op's `index`)."""
    op = REGISTRY[node.op]
    if target is not None and op.into is not None and extra is None \
            and op.into(target, *args, **node.attrs) is not NotImplemented:
        return target
    out = np.asarray(op.ref(*args, **node.attrs, **(extra or {})))
    if out.dtype != node.out.dtype:
        out = out.astype(node.out.dtype)
    if target is None:
        return out
    np.copyto(target, out, casting="unsafe")
    return target


def _infer(types, body):
    if tuple((tuple(s), np.dtype(d)) for s, d in types) != body.in_types:
        raise ShapeError("fused: the operands' types differ from those the body was made for")
    root = body.root.out
    return root.shape, root.dtype


def _ref(*arrays, body):
    root = body.root.out
    with np.errstate(all="ignore"):
        out = body.evaluate(arrays)
    return np.array(np.broadcast_to(out, root.shape), dtype=root.dtype)


def _scratch(in_types, out_type, body):
    if not body.scratch:
        return []
    n = max(1, min(CHUNK, int(np.prod(out_type[0], dtype=np.int64))))
    return [((n,), dtype) for dtype in body.rows()[1]]


def _into(out, *arrays, body, scratch=None):
    """The body chunk by chunk into `out` (which may be one of `arrays` with its exact layout:
    each piece is read before it is written)."""
    if out.size == 0:
        return
    if scratch is None:  # a body for a native backend evaluated here anyway: small temporaries
        scratch = [np.empty(min(CHUNK, out.size), dt) for dt in body.rows()[1]]
    # A body that reads the element index walks the output in row-major order, so that each
    # piece's flat indices are a running count
    counted = body.reads_index()
    it = np.nditer(list(arrays) + [out], flags=["external_loop", "buffered", "zerosize_ok"],
                   op_flags=[["readonly"]] * len(arrays) + [["writeonly"]],
                   buffersize=CHUNK, order="C" if counted else "K")
    start = 0
    with it:
        for pieces in it:
            if not arrays:  # (over one operand nditer yields the piece itself, not a tuple)
                pieces = (pieces,)
            n = len(pieces[-1])
            index = np.arange(start, start + n, dtype=np.uint64) if counted else None
            start += n
            body.evaluate(pieces[:-1], pieces[-1], [row[:n] for row in scratch], index)


defop("fused", ELEMENTWISE, _infer, _ref, into=_into, scratch=_scratch,
      doc="several elementwise ops computed as one node (passes.fusion); `body` lists them")
