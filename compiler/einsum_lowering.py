"""`cc.einsum(equation, *operands)`: Einstein summation lowered to the registry's ops.

(Not `compiler/einsum.py`: importing a submodule binds its name on the package, and a module
named `einsum` would then hide the function `cc.einsum`.)

Each operand first loses the labels nobody else needs (a `sum` over them), then operands are
contracted left to right, two at a time: both are transposed to [batch, free, contracted] /
[batch, contracted, free], reshaped to 3-D (2-D without batch labels) and multiplied with ONE
`matmul`; the result is reshaped back to its labels and finally transposed to the output's
order. So there is no einsum op: the gradients are those of transpose, reshape, sum and matmul,
and every backend runs what it already runs.

The equation follows NumPy and Paddle: letters label axes, `...` stands for the axes no letter
names (aligned from the right and broadcast across operands, as NumPy broadcasts), spaces are
ignored, and without `->` the output is the ellipsis axes, then the letters used exactly once,
in alphabetical order. A label of size 1 broadcasts against the same label of another size.
A label repeated within one operand takes that operand's diagonal first (`ii->i`, the trace
`ii`, `iij->ij`): the repeated axes are moved last, flattened, and the diagonal gathered with
one `index_select` (its gradient scatters back onto the diagonal; values are copied exactly,
-0.0 included). Refused with a `TraceError` naming the caller's line: output labels that
repeat or appear in no operand, an equation whose operand count or ranks don't match the
operands.
"""
from __future__ import annotations

import math

import numpy as np

from . import tracer as _tr
from .errors import ShapeError, TraceError
from .tensor import Tensor, in_float32, rounded, to_tensor, user_errors

__all__ = ["einsum"]

_ELLIPSIS = "..."


def _parse_term(term: str, what: str, loc) -> list:
    """The labels of one term: letters, and None where the ellipsis stands (at most once)."""
    labels: list = []
    rest = term
    while rest:
        if rest.startswith(_ELLIPSIS):
            if None in labels:
                raise TraceError(f"einsum: {what} {term!r} has more than one '...'", loc)
            labels.append(None)
            rest = rest[3:]
            continue
        c = rest[0]
        if not (c.isascii() and c.isalpha()):
            raise TraceError(f"einsum: {what} {term!r} holds {c!r}: labels are letters a-z, "
                             "A-Z and one '...'", loc)
        labels.append(c)
        rest = rest[1:]
    return labels


def _expand_ellipsis(labels: list, rank: int, k: int, term: str, loc) -> list:
    """Labels with the ellipsis replaced by one label per axis it covers: ("...", j) where j
    counts from the right, so that ellipses of different ranks broadcast as NumPy's do."""
    letters = [lab for lab in labels if lab is not None]
    if None not in labels:
        if len(letters) != rank:
            raise ShapeError(f"einsum: operand {k} has rank {rank} but its term {term!r} names "
                             f"{len(letters)} axes", loc)
        return letters
    n = rank - len(letters)
    if n < 0:
        raise ShapeError(f"einsum: operand {k} has rank {rank} but its term {term!r} names "
                         f"{len(letters)} axes besides '...'", loc)
    at = labels.index(None)
    return letters[:at] + [(_ELLIPSIS, n - 1 - j) for j in range(n)] + letters[at:]


def einsum(equation, *operands) -> Tensor:
    loc = _tr.user_loc()
    if not isinstance(equation, str):
        raise TraceError(f"einsum: the equation must be a string, got {equation!r}", loc)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])  # Paddle also takes the operands as one list
    if not operands:
        raise TraceError("einsum needs at least one operand", loc)
    ops = [x if isinstance(x, Tensor) else to_tensor(np.asarray(x)) for x in operands]
    ops, half = in_float32(ops)  # several products and sums: float32 inside, one rounding
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    if "->" in rhs or "-" in lhs or ">" in lhs:
        raise TraceError(f"einsum: {equation!r} is not of the form 'in,in->out'", loc)
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise TraceError(f"einsum: {equation!r} has {len(terms)} operand terms but "
                         f"{len(ops)} operands were given", loc)
    labels, letters_used = [], []
    for k, (term, x) in enumerate(zip(terms, ops)):
        parsed = _parse_term(term, f"operand {k}'s term", loc)
        letters_used += [lab for lab in parsed if lab is not None]
        ls = _expand_ellipsis(parsed, x.ndim, k, term, loc)
        ops[k], ls = _diagonals(x, ls, k, term, loc)
        labels.append(ls)
    ell = sorted({lab for ls in labels for lab in ls if isinstance(lab, tuple)},
                 key=lambda lab: -lab[1])   # the ellipsis axes, leftmost first
    if arrow:
        out_parsed = _parse_term(rhs, "the output", loc)
        letters = [lab for lab in out_parsed if lab is not None]
        twice = sorted({lab for lab in letters if letters.count(lab) > 1})
        if twice:
            raise TraceError(f"einsum: output label {twice[0]!r} repeats in {rhs!r}", loc)
        known = {lab for ls in labels for lab in ls}
        unknown = [lab for lab in letters if lab not in known]
        if unknown:
            raise TraceError(f"einsum: output label {unknown[0]!r} appears in no operand", loc)
        if ell and None not in out_parsed:
            raise TraceError(f"einsum: the operands have '...' axes but the output {rhs!r} "
                             "has no '...'", loc)
        out = []
        for lab in out_parsed:
            out.extend(ell if lab is None else [lab])
    else:
        # (counted in the terms as written: the trace 'ii' sums i)
        out = ell + sorted(lab for lab in set(letters_used) if letters_used.count(lab) == 1)
    # sizes: equal, or 1 (broadcast)
    size: dict = {}
    for k, (ls, x) in enumerate(zip(labels, ops)):
        for lab, d in zip(ls, x.shape):
            have = size.get(lab, 1)
            if d != have and d != 1 and have != 1:
                name = "'...'" if isinstance(lab, tuple) else repr(lab)
                raise ShapeError(f"einsum: label {name} has size {have} in one operand and "
                                 f"{d} in operand {k} ({equation!r})", loc)
            size[lab] = d if have == 1 else have
    return rounded(_contract(ops, labels, out, size), half)


def _diagonals(x: Tensor, ls: list, k: int, term: str, loc):
    """`x` with each label that repeats in `ls` reduced to its diagonal: the label's axes are
    moved last, flattened to n**r, and positions i * (1 + n + ... + n**(r-1)) gathered."""
    for lab in dict.fromkeys(ls):
        at = [i for i, other in enumerate(ls) if other == lab]
        if len(at) < 2:
            continue
        sizes = {x.shape[i] for i in at}
        if len(sizes) > 1:
            raise ShapeError(f"einsum: label {lab!r} repeats in operand {k}'s term {term!r} "
                             f"over axes of sizes {[x.shape[i] for i in at]}", loc)
        (n,) = sizes
        rest = [i for i in range(len(ls)) if i not in at]
        moved = x.transpose(rest + at) if rest + at != list(range(len(ls))) else x
        flat = moved.reshape_to([x.shape[i] for i in rest] + [n ** len(at)])
        stride = sum(n ** j for j in range(len(at)))
        index = to_tensor(np.arange(n, dtype=np.int64) * stride)
        x = flat.index_select(index, axis=len(rest))
        ls = [ls[i] for i in rest] + [lab]
    return x, ls


def _reduce_unneeded(x: Tensor, ls: list, needed: set):
    """Sum the axes whose label nothing after this point needs (a label in this operand
    only)."""
    axes = [i for i, lab in enumerate(ls) if lab not in needed]
    if not axes:
        return x, ls
    return x.sum(axis=axes), [lab for lab in ls if lab in needed]


def _to(x: Tensor, ls: list, order: list, size: dict) -> Tensor:
    """`x` (labelled `ls`) transposed to `order`, each axis broadcast to its label's size."""
    perm = [ls.index(lab) for lab in order]
    if perm != list(range(len(perm))):
        x = x.transpose(perm)
    want = [size[lab] for lab in order]
    if x.shape != want:
        x = x.expand(want)
    return x


def _contract(ops, labels, out, size) -> Tensor:
    def needed_after(k):
        later = {lab for ls in labels[k + 1:] for lab in ls}
        return later | set(out)

    x, lx = _reduce_unneeded(ops[0], labels[0], needed_after(0))
    for k in range(1, len(ops)):
        keep = needed_after(k)
        y, ly = _reduce_unneeded(ops[k], labels[k], keep | set(lx))
        x, lx = _reduce_unneeded(x, lx, keep | set(ly))
        x, lx = _pair(x, lx, y, ly, keep, size)
    x, lx = _reduce_unneeded(x, lx, set(out))
    return _to(x, lx, out, size) if lx != out or x.shape != [size[lab] for lab in out] else x


def _pair(x: Tensor, lx: list, y: Tensor, ly: list, keep: set, size: dict):
    """x (labels lx) times y (labels ly), summed over the shared labels not in `keep`: one
    matmul over [batch, free_x, contracted] x [batch, contracted, free_y]."""
    batch = [lab for lab in lx if lab in ly and lab in keep]
    summed = [lab for lab in lx if lab in ly and lab not in keep]
    free_x = [lab for lab in lx if lab not in ly]
    free_y = [lab for lab in ly if lab not in lx]
    nb, m, n, kk = (math.prod(size[lab] for lab in group)
                    for group in (batch, free_x, free_y, summed))
    a = _to(x, lx, batch + free_x + summed, size)
    b = _to(y, ly, batch + summed + free_y, size)
    if batch:
        prod = a.reshape_to([nb, m, kk]).matmul(b.reshape_to([nb, kk, n]))
    else:
        prod = a.reshape_to([m, kk]).matmul(b.reshape_to([kk, n]))
    labels = batch + free_x + free_y
    return prod.reshape_to([size[lab] for lab in labels]), labels


einsum = user_errors(einsum, "cc.einsum")
