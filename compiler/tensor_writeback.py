"""Functionalization's write-back: an inplace op on a `Tensor` computes its new value
functionally, then writes it back onto the storage's base, through the inverse of each view of
the chain (`reshape` back, `transpose` back, `slice_scatter` into the parent), after the checks
that make the write legal (the leaf rule, no write through an overlapping view). The functions
are `Tensor` methods (`compiler.tensor` binds them in its class body: `x._inplace(...)`).
"""
from __future__ import annotations

import numpy as np

from . import tracer as _tr
from .errors import InplaceError
from .ir import Value
from .layout import overlaps_itself
from .ops import BOOL, REGISTRY, dtype_class


def check_leaf(self, what: str):
    """Paddle's and PyTorch's rule, for data-writing and view-changing inplace ops alike."""
    leaf = self._storage.leaf
    if leaf is not None and self._tracer.grad_enabled \
            and self._storage.base.requires_grad and not self._through_detach():
        raise InplaceError(f"leaf tensor '{leaf.name}' that doesn't stop gradient can't use "
                           f"inplace strategy ({what})", _tr.user_loc())


def check_writable(self, what: str):
    self._check_leaf(what)
    if overlaps_itself(self._layout) or self._through_broadcast():
        raise InplaceError(f"{what} writes to an expanded (overlapping) view: several "
                           "elements share one memory location", _tr.user_loc())


def through_detach(self) -> bool:
    """Whether this tensor is (a view of) a `detach()`: writes through it record no
    gradient, as PyTorch's `w.detach().zero_()` idiom for parameters relies on."""
    return any(op == "detach" for op, _ in self._chain)


def origin(self):
    """(value, view chain): this tensor is `value` seen through the view ops of the chain,
    where `value` is the storage's first value (a caller's argument, a constant, ...) when
    no inplace op has written the storage yet; None once one has."""
    if self._storage.version != 0:
        return None
    return self._storage.base, self._chain


def through_broadcast(self) -> bool:
    """Whether an `expand` in the view chain broadcasts. Its stride-0 dims may be sliced
    away (`x.expand([2, 3])[0]`), but the write would still reach one element from several
    positions of the expanded view, and has no inverse to write back through."""
    shape, dtype = self._storage.base.shape, self._storage.base.dtype
    for op, attrs in self._chain:
        out, _ = REGISTRY[op].infer([(shape, dtype)], **attrs)
        if op == "expand" and int(np.prod(out)) != int(np.prod(shape)):
            return True
        shape = out
    return False


def inplace(self, op: str, *others, **attrs):  # returns self
    what = REGISTRY[op].inplace or op
    self._check_writable(what)
    old = self._v()
    ins = [old] + [self._operand(o) for o in others]
    new = self._tracer.emit(op, ins, attrs, inplace_of=0)
    if tuple(new.shape) != tuple(old.shape):
        raise InplaceError(f"{what} would change the shape of its target from "
                           f"{list(old.shape)} to {list(new.shape)}", _tr.user_loc())
    if new.dtype != old.dtype:
        # A bool result (comparisons, logic) keeps the target's dtype as 1/0, as in Paddle;
        # any other change of dtype class can't be written into the target.
        if dtype_class(new.dtype) != dtype_class(old.dtype) and new.dtype != BOOL:
            raise InplaceError(f"{what} would turn a {old.dtype} tensor into "
                               f"{new.dtype}", _tr.user_loc())
        new = self._tracer.emit("cast", [new], {"dtype": old.dtype})
    self._tracer.overwritten.add(old)
    self._write(new)
    return self


def write(self, new: Value):
    """Make `new` this tensor's value, updating the storage's base through the views."""
    tracer, storage = self._tracer, self._storage
    # Intermediate values of the view chain, base first.
    chain_vals = [storage.base]
    for op, attrs in self._chain[:-1]:
        chain_vals.append(tracer.emit(op, [chain_vals[-1]], attrs))
    value = new
    for (op, attrs), parent in zip(reversed(self._chain), reversed(chain_vals)):
        if op == "reshape":
            value = tracer.emit("reshape", [value], {"shape": parent.shape})
        elif op == "transpose":
            inverse = tuple(int(i) for i in np.argsort(attrs["perm"]))
            value = tracer.emit("transpose", [value], {"perm": inverse})
        elif op == "slice":
            value = tracer.emit("slice_scatter", [parent, value], attrs, inplace_of=0)
        elif op == "expand":
            # Only an expand that broadcasts nothing is writable (checked before).
            value = tracer.emit("reshape", [value], {"shape": parent.shape})
        else:
            assert op == "detach", op
            # The inverse of a detach is a detach: the base takes the data of `new`, not
            # its history (which stays with the detached tensor: `d.add_(y)`).
            value = tracer.emit("detach", [value], {})
    if (not tracer.grad_enabled or self._through_detach()) and storage.base.requires_grad:
        # A write that records no gradient changes the data, not the history (Paddle,
        # PyTorch): a parameter updated under no_grad stays a leaf; an intermediate passes
        # its gradient on to its old value unchanged.
        value.requires_grad = True
        if storage.leaf is not None:
            tracer.leaf_of[value] = storage.leaf
        else:
            tracer.grad_alias[value] = storage.base
    # The whole buffer is written, not just this view of it: a VJP that could read either
    # the base's old value or something else should read the other (autodiff's form choice).
    tracer.overwritten.add(storage.base)
    storage.base = value
    storage.version += 1
    if storage.input_index is not None:
        tracer.graph.mutation_locs.setdefault(storage.input_index, tracer.loc())
    if any(op == "slice" for op, _ in self._chain):
        # A view of a region re-derives its value from the new base when next used, so no
        # value that was scattered back into a region is read after its write-back (the
        # planner may then reuse the whole buffer).
        self._version = -1
    else:
        self._value, self._version = new, storage.version
