"""Call signatures: which arguments a program was traced for, including which share memory.

Array arguments that share memory (`fn(x, x)`, `fn(x, x[1:])`, `fn(x, x.T)`) behave as in eager
NumPy and PyTorch: they are traced as views of one storage, the array that owns their memory,
so a write through one is seen through the other (ARCHITECTURE.md §4). The signature, the compile
cache's key, says for each argument either `("array", shape, dtype)` (its own buffer: one graph
input) or
`("view", shape, dtype, base, index, perm)`: argument = `base[index].transpose(perm)` where
`base = (group, box, shape, dtype)` names the alias group's storage: the smallest box of the
smallest array that all the group's members view, traced as one graph input. A member that is
exactly that storage has `index == perm == ()`: every such member is one and the same Tensor
(`fn(w, w)` passes one tensor twice, as in eager PyTorch: a gradient sees both uses).
Overlaps that are not such views of one owner (another dtype, a stride-0 broadcast, memory
owned by something other than an ndarray) are
refused before anything runs.

The storage is then bound in the order its members run over it (`_in_members_order`): on the
grid of their coordinates, an axis they all run backwards turned round, axes they all transpose
swapped. The trace takes every graph input as a row-major buffer, so the program traced for
members that are strided, reversed or Fortran-ordered in the caller's memory is the one traced
for the C layout (a write through `a.reshape(...)` reaches the caller, a sum adds in the same
order), as for an argument that shares nothing. Members that disagree on an axis's direction
or order (`fn(x, x.T)`, `fn(x[0:3], x[3:0:-1])`) leave the storage in the memory's order, as
eager NumPy sees it.

An instance of an ndarray subclass (`np.matrix`, `np.memmap`, a user's subclass) is bound as
the plain ndarray over its memory (`np.asarray`): the program writes into that memory, and no
subclass method (`matrix.sum` without `keepdims`, an `__array_ufunc__` override) runs inside
a backend, so every backend computes the same values. Masked arrays are refused before this
(`compiler.api._check_arg`): their mask would be ignored.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import InplaceError


def _base_candidates(members: list[np.ndarray]):
    """C-contiguous arrays that the members might all be views of, smallest first: a member
    itself (`fn(x, x[1:])`), then the memory's owner, then the owner reshaped to the grid of
    the members' strides (`fn(x[:, 1:], x[:, :2])`: numpy's `.base` is the owner, often a
    1-D buffer), then the owner flat."""
    for a in members:
        if a.flags.c_contiguous:
            yield a
    owner = members[0]
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    owner = plain(owner)  # (a subclass's reshape or indexing may differ: np.matrix stays 2-D)
    if not owner.flags.c_contiguous and owner.flags.f_contiguous:
        owner = owner.T  # (the same memory in C order: rows of a Fortran array are views of it)
    if not owner.flags.c_contiguous or owner.dtype != members[0].dtype:
        return
    yield owner
    flat = owner.reshape(-1)
    item = owner.itemsize
    strides = []  # a divisibility chain of the members' strides (a stepped slice's is dropped)
    for s in sorted({abs(s) // item for a in members for d, s in zip(a.shape, a.strides)
                     if d > 1 and s % item == 0 and s} | {1}, reverse=True):
        if not strides or strides[-1] % s == 0:
            strides.append(s)
    inner = [s // t for s, t in zip(strides, strides[1:])]
    if flat.size % strides[0] == 0:
        yield flat.reshape([flat.size // strides[0]] + inner)
    # The grid from the members' lowest element, when the strides don't divide its offset
    # (`raw[1:17].reshape(4, 4)`: rows of 4 from element 1 of `raw`).
    start = flat.__array_interface__["data"][0]
    lowest = min(a.__array_interface__["data"][0]
                 + sum((d - 1) * s for d, s in zip(a.shape, a.strides) if s < 0)
                 for a in members) - start
    if lowest % item == 0 and (lowest // item) % strides[0]:
        rest = flat[lowest // item:]
        rows = rest.size // strides[0]
        if rows:
            yield rest[:rows * strides[0]].reshape([rows] + inner)
    yield flat


def _shares_memory(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except np.exceptions.TooHardError:
        return True


def as_index(index: tuple) -> tuple:
    """A signature's (hashable) index as a Python index: ("s", start, stop, step) entries
    become slices; a trailing Ellipsis keeps a 0-d result an array."""
    return tuple(slice(*e[1:]) if isinstance(e, tuple) else e for e in index) + (Ellipsis,)


def view_of_owner(a: np.ndarray, base: np.ndarray):
    """(index, perm) with `base[as_index(index)].transpose(perm)` being exactly `a`, or None.

    `index` holds ints (axes of `base` that `a` doesn't span), ("s", start, stop, step) (one
    per axis of `a` of size > 1, in `base`'s axis order) and then one `None` per size-1 axis
    of `a`."""
    item = base.itemsize
    if a.dtype != base.dtype or not base.flags.c_contiguous:
        return None
    offset = a.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    if offset % item or any(s % item for s in a.strides):
        return None
    offset //= item
    bstrides = [s // item for s in base.strides]
    start = [(offset // s) % n if n > 1 else 0 for s, n in zip(bstrides, base.shape)]
    used: dict[int, tuple[int, int]] = {}  # base axis -> (axis of a, step)
    widest = sorted(range(base.ndim), key=lambda i: -bstrides[i])
    for j, (d, s) in enumerate(zip(a.shape, (s // item for s in a.strides))):
        if d == 1:
            continue
        for i in widest:
            if i in used or base.shape[i] == 1 or s % bstrides[i]:
                continue
            step = s // bstrides[i]
            last = start[i] + step * (d - 1)
            if step and 0 <= last < base.shape[i]:
                used[i] = (j, step)
                break
        else:
            return None
    index, order = [], []
    for i in range(base.ndim):
        if i not in used:
            index.append(start[i])
            continue
        j, step = used[i]
        stop = start[i] + step * (a.shape[j] - 1) + (1 if step > 0 else -1)
        index.append(("s", start[i], None if stop < 0 else stop, step))
        order.append(j)
    ones = [j for j, d in enumerate(a.shape) if d == 1]
    index += [None] * len(ones)
    order += ones
    perm = tuple(_inverse(order))  # (order is a permutation of a's axes)
    view = base[as_index(tuple(index))].transpose(perm)
    same = (view.shape == a.shape  # a size-1 axis may have any stride
            and all(d == 1 or s == t for d, s, t in zip(a.shape, a.strides, view.strides))
            and view.__array_interface__["data"][0] == a.__array_interface__["data"][0])
    return (tuple(index), perm) if same else None


def _box(members: list[np.ndarray], names: list[str]):
    """The smallest box (one slice per axis) of the members' common owner that holds them all,
    and each member as (index, perm) relative to the box. Raises when a member is not a view
    of the owner."""
    for base in _base_candidates(members):
        views = [view_of_owner(a, base) for a in members]
        if all(v is not None for v in views):
            break
    else:
        raise InplaceError(f"arguments {', '.join(repr(n) for n in names)} share memory, but "
                           "not as views (slices, transposes) of one array of their dtype: "
                           "pass copies")
    lo, hi = [None] * base.ndim, [None] * base.ndim
    for index, _ in views:
        for i, e in enumerate(index[:base.ndim]):
            if isinstance(e, tuple):
                _, start, stop, step = e
                covered = range(start, -1 if stop is None else stop, step)
                first, final = min(covered[0], covered[-1]), max(covered[0], covered[-1])
            else:
                first = final = e
            lo[i] = first if lo[i] is None else min(lo[i], first)
            hi[i] = final if hi[i] is None else max(hi[i], final)
    box = tuple((lo[i], hi[i] + 1) for i in range(base.ndim))
    shifted = []
    for index, perm in views:
        out = []
        for i, e in enumerate(index):
            if i >= base.ndim or not isinstance(e, (int, tuple)):
                out.append(e)
            elif isinstance(e, tuple):
                _, start, stop, step = e
                stop = None if stop is None or stop - lo[i] < 0 else stop - lo[i]
                out.append(("s", start - lo[i], stop, step))
            else:
                out.append(e - lo[i])
        shifted.append((tuple(out), perm))
    return box, base[tuple(slice(a, b) for a, b in box)], shifted


def _span(e) -> tuple[int, int, int]:
    """(start, count, step) of a ("s", start, stop, step) index entry."""
    _, start, stop, step = e
    return start, len(range(start, -1 if stop is None else stop, step)), step


def _entry(start: int, count: int, step: int) -> tuple:
    stop = start + step * (count - 1) + (1 if step > 0 else -1)
    return ("s", start, None if stop < 0 else stop, step)


def _inverse(perm) -> list[int]:
    """The inverse permutation (numpy's argsort of a permutation, without an array)."""
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return out


def _axis_order(nd: int, views) -> list[int] | None:
    """The region axes in the order the members run over them (a member's axis j before its
    axis j + 1), the axes no member spans in their places; None when two members disagree
    (`fn(x, x.T)`)."""
    after: dict[int, set[int]] = {i: set() for i in range(nd)}  # axis -> axes that follow it
    for index, perm in views:
        spanned = [i for i in range(nd) if isinstance(index[i], tuple)]
        # (the t-th spanned axis of `base[index]` is axis argsort(perm)[t] of the member)
        of_member = dict(zip(_inverse(perm), spanned))
        chain = [of_member[j] for j in sorted(of_member)]
        for x, y in zip(chain, chain[1:]):
            after[x].add(y)
    slots = sorted(i for i in range(nd) if after[i] or any(i in s for s in after.values()))
    ordered, left = [], set(slots)
    while left:  # a topological order, ties by the axis (the memory's order)
        ready = [i for i in sorted(left) if not any(i in after[x] for x in left)]
        if not ready:
            return None
        ordered.append(ready[0])
        left.remove(ready[0])
    q = list(range(nd))
    for slot, axis in zip(slots, ordered):
        q[slot] = axis
    return q


def _in_members_order(region: np.ndarray, views, members: list[np.ndarray]):
    """The group's storage as the members run over it, and the members as views of it.

    The trace takes the storage as a row-major buffer (a strided one is copied in and out, as
    any argument), so binding it in the members' own order (every other column of a bigger
    array taken as one column each, an axis all members run backwards turned round, axes all
    members transpose swapped) makes their views of it, and so the traced program, the same
    for every layout of the caller's memory: a reshape of a member is then a view (a write
    through it reaches the caller) and a sum over it adds in its own order. Where members
    disagree on any axis's direction or order (`fn(x, x.T)`, `fn(x[:, ::-1], x)`), no order
    suits all of them: the storage keeps the memory's directions and order, as eager NumPy
    sees them (the grid still applies). None should a member not come out as a view of it
    (the caller keeps the memory's order then).
    """
    nd = region.ndim
    idxs = [list(index) for index, _ in views]
    # Every other element: each axis on the grid of the members' coordinates.
    for i in range(nd):
        g = 0
        for index in idxs:
            e = index[i]
            g = math.gcd(g, e[1], abs(e[3])) if isinstance(e, tuple) else math.gcd(g, e)
        if g > 1:
            region = region[(slice(None),) * i + (slice(None, None, g),)]
            for index in idxs:
                e = index[i]
                if isinstance(e, tuple):
                    start, count, step = _span(e)
                    index[i] = _entry(start // g, count, step // g)
                else:
                    index[i] = e // g
    # Backwards and transposed: only where the members agree on every axis's direction and
    # order (else the memory's order stays, as eager NumPy sees it: no mixture of the two).
    q = _axis_order(nd, [(index, perm) for index, (_, perm) in zip(idxs, views)])
    signs = [{index[i][3] > 0 for index in idxs if isinstance(index[i], tuple)}
             for i in range(nd)]
    if q is None or any(len(s) > 1 for s in signs):
        q = list(range(nd))
    else:
        for i in range(nd):
            if signs[i] != {False}:
                continue
            n = region.shape[i]
            region = region[(slice(None),) * i + (slice(None, None, -1),)]
            for index in idxs:
                e = index[i]
                if isinstance(e, tuple):
                    start, count, step = _span(e)
                    index[i] = _entry(n - 1 - start, count, -step)
                else:
                    index[i] = n - 1 - e
    out = []
    region = region.transpose(q)
    for index, (_, perm) in zip(idxs, views):
        spanned = [i for i in range(nd) if isinstance(index[i], tuple)]
        member_axis = dict(zip(spanned, _inverse(perm)))
        tail = _inverse(perm)[len(spanned):]  # (the size-1 axes, placed last)
        new = tuple(index[q[k]] for k in range(nd)) + tuple(index[nd:])
        order = [member_axis[q[k]] for k in range(nd) if q[k] in member_axis] + tail
        out.append((new, tuple(_inverse(order))))
    for a, (index, perm) in zip(members, out):
        view = region[as_index(index)].transpose(perm)
        if not (view.shape == a.shape
                and all(d == 1 or s == t for d, s, t in zip(a.shape, a.strides, view.strides))
                and view.__array_interface__["data"][0] == a.__array_interface__["data"][0]):
            return None
    return region, out


def _covers_exactly(a: np.ndarray, region: np.ndarray) -> bool:
    return (a.shape == region.shape
            and a.__array_interface__["data"][0] == region.__array_interface__["data"][0]
            and all(d == 1 or s == t for d, s, t in zip(a.shape, a.strides, region.strides)))


def plain(a: np.ndarray) -> np.ndarray:
    """`a` as a plain ndarray over the same memory (itself when it is one)."""
    return a if type(a) is np.ndarray else np.asarray(a)


def bind(args, names) -> tuple[tuple, list[np.ndarray]]:
    """(signature, arrays): the cache key of a call, one entry per argument (see the module
    docstring), and the arrays the call hands to the program, one per graph input (plain
    ndarrays: a subclass instance's memory as an ndarray)."""
    args = [plain(a) if isinstance(a, np.ndarray) else a for a in args]
    arrays = {p: a for p, a in enumerate(args) if isinstance(a, np.ndarray)}
    if len(arrays) <= 1:  # nothing can share memory (the common small call: no search)
        return tuple(("array", a.shape, a.dtype.str) if isinstance(a, np.ndarray)
                     else ("scalar", type(a).__name__, a) for a in args), list(arrays.values())
    units = [[p] for p in sorted(arrays)]
    boxes = {}  # (the boxes of merged units, found once)

    def box_of(u):
        key = tuple(u)
        if key not in boxes:
            boxes[key] = _box([arrays[p] for p in u], [names[p] for p in u])
        return boxes[key]
    while True:  # merge arguments (and boxes of merged ones) that share memory, to a fixpoint
        regions = [arrays[u[0]] if len(u) == 1 else box_of(u)[1] for u in units]
        merged = None
        for i in range(len(units)):
            for j in range(i + 1, len(units)):
                if _shares_memory(regions[i], regions[j]):
                    merged = (i, j)
                    break
            if merged:
                break
        if merged is None:
            break
        i, j = merged
        units[i] = sorted(units[i] + units.pop(j))
    views, regions = {}, {}
    for g, group in enumerate(u for u in units if len(u) > 1):
        members = [arrays[p] for p in group]
        box, regions[g], shifted = box_of(group)
        ordered = _in_members_order(regions[g], shifted, members)
        if ordered is not None:
            regions[g], shifted = ordered
        for p, (index, perm) in zip(group, shifted):
            if _covers_exactly(arrays[p], regions[g]):
                index, perm = (), ()  # the storage itself: one Tensor, as `fn(x, x)` in eager
            views[p] = ((g, box, regions[g].shape, regions[g].dtype), index, perm)
    sig = []
    for p, a in enumerate(args):
        if p in views:
            base, index, perm = views[p]
            sig.append(("view", a.shape, a.dtype.str, base, index, perm))
        elif isinstance(a, np.ndarray):
            sig.append(("array", a.shape, a.dtype.str))
        else:
            sig.append(("scalar", type(a).__name__, a))
    inputs = [args[p] if kind == "array" else regions[sig[p][3][0]]
              for kind, p in graph_input_positions(sig)]
    return tuple(sig), inputs


def is_array(entry) -> bool:
    return entry[0] in ("array", "view")


def graph_input_positions(signature) -> list[tuple[str, int]]:
    """For each graph input, in order: ("array", position) for an argument with its own
    buffer, ("base", position of the group's first member) for an alias group's owner."""
    out, seen = [], set()
    for p, entry in enumerate(signature):
        if entry[0] == "array":
            out.append(("array", p))
        elif entry[0] == "view" and entry[3] not in seen:
            seen.add(entry[3])
            out.append(("base", p))
    return out
