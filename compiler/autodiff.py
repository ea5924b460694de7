"""Trace-time reverse-mode autodiff: `t.backward()` appends the backward graph.

Guarantees: after `backward(tracer, root)`, every leaf tensor whose SSA value reaches `root`
through differentiable ops holds (or has accumulated into) `leaf.grad`, a traced Tensor equal to
d(sum(root * grad))/d(leaf). Backward nodes carry phase "backward", `grad_of` (the forward node)
and that node's source line; the seed and the accumulation into `leaf.grad` count as the backward
of the root's node. Forward values are read as they were when the forward op ran: the
SSA graph keeps an overwritten value alive for as long as a VJP reads it.

Algorithm:
  1. Seed the root's gradient (ones for a non-scalar root, as Paddle does).
  2. Walk the nodes recorded so far in reverse program order; skip nodes whose output has no
     gradient, does not require grad, or is a leaf (parameters updated under no_grad stay leaves).
     A value that a write recording no gradient produced (under no_grad or through a detach,
     `tracer.grad_alias`) hands its gradient to the value it overwrote. (2a) A node that an
     earlier backward() released raises.
  3. For each node, choose a VJP form: an op that can read either its input or its output reads
     the one no user inplace op overwrote, so the other buffer can be reused (ARCHITECTURE.md §4).
  4. Run the VJP under no_grad (no higher-order gradients) with a context that exposes only what
     the chosen form declared (values it did not declare are shape-only), reduce broadcast
     gradients to each input's shape and accumulate with `+`.
  5. Accumulate each leaf's gradient into `leaf.grad`: a Tensor of its own the first time, then
     in place (`add_`), as repeated `backward()` calls do in Paddle.
  5a. When the program is data parallel, note each such leaf as pending: its gradient is
     averaged over the ranks at its first read (compiler.distributed).
  6. Unless `retain_graph=True`, mark the differentiated nodes released: a later backward()
     that reaches one raises (step 2a), naming both backward() lines (ARCHITECTURE.md §3).
"""
from __future__ import annotations

from typing import Callable

from .errors import TraceError
from .ir import Value
from .ops import REGISTRY


class ShapeOnly:
    """Stands in for a forward value that the chosen VJP form did not declare it needs."""

    def __init__(self, value, what):
        self.shape, self.dtype = list(value.shape), value.dtype
        self.ndim, self.size = len(value.shape), value.size
        self._what = what

    def __getattr__(self, name):
        raise AssertionError(f"VJP read the forward {self._what}, which its form does not "
                             "declare")


class VjpContext:
    def __init__(self, node, form, wrap):
        self.node, self.form, self.attrs = node, form, node.attrs
        self.needs_grad = [v.requires_grad for v in node.inputs]
        if "input" in form:
            self.inputs = [wrap(v) for v in node.inputs]
        else:
            self.inputs = [ShapeOnly(v, "input") for v in node.inputs]
        self.out = wrap(node.out) if "output" in form else ShapeOnly(node.out, "output")


def choose_vjp_form(opdef, node, overwritten) -> str:
    """Step 3: prefer reading the output, unless a user inplace op overwrote the output and
    not the input."""
    forms = list(opdef.vjp)
    if "input" in forms and "output" in forms:
        out_gone = node.out in overwritten
        in_gone = any(v in overwritten for v in node.inputs)
        return "input" if out_gone and not in_gone else "output"
    return forms[0]


def sum_to(g, shape):
    """Reduce a broadcast gradient back to `shape`."""
    shape = list(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                if d == 1 and g.shape[lead + i] != 1]
    if axes:
        g = g.sum(axis=axes, keepdim=True)
    return g.reshape_to(shape)


def _check_not_released(tracer, node, loc):
    """Step 2a: a node whose graph an earlier backward() released (no retain_graph) can't be
    differentiated again (Paddle, PyTorch): its saved values are gone there."""
    first = tracer.released.get(node)
    if first is not None:
        raise TraceError(f"backward() runs through {node.op} at {node.loc}, which the "
                         f"backward() at {first} already differentiated and released: pass "
                         "retain_graph=True to that earlier backward() to backpropagate "
                         "through it again", loc)


def backward(tracer, root, grad=None, *, wrap: Callable[[Value], object],
             retain_graph: bool = False):
    """Append the backward of `root` (a traced tensor) to `tracer`'s graph. `wrap(value)`
    makes a fresh traced tensor of an SSA value: the tracer passes it in, so this pass
    depends on the IR and the registry only, never on the tracer's Tensor class.
    `retain_graph=False` releases the differentiated nodes (step 6)."""
    loc = tracer.loc()
    r = root._v()
    if not r.requires_grad:
        raise TraceError(f"backward() on '{root.name}', which doesn't require gradients: set "
                         "stop_gradient = False on the parameters it depends on", loc)
    saved_grad_mode = tracer.grad_enabled
    tracer.grad_enabled, tracer.backward_loc = False, loc
    # The seed and the accumulation into leaf.grad belong to the backward of the root's
    # forward node: every backward node then has a grad_of and carries its source line.
    root_node = r.producer
    try:
        tracer.in_backward = root_node  # Step 1
        if grad is None:
            seed = wrap(tracer.emit(
                "full", [], {"shape": r.shape, "value": 1, "dtype": r.dtype}))
        else:
            seed = wrap(root._operand(grad))
            if seed.dtype != r.dtype:
                seed = seed.cast(r.dtype)
            if seed.shape != root.shape:
                seed = seed.broadcast_to(root.shape)
        grads = {r: seed}
        differentiated = []
        for node in reversed(list(tracer.graph.nodes)):  # Step 2
            g = grads.get(node.out)
            if g is None or not node.out.requires_grad or node.out in tracer.leaf_of:
                continue
            old = tracer.grad_alias.get(node.out)
            if old is not None:  # a write that recorded no gradient: pass it on unchanged
                grads[old] = grads[old] + g if old in grads else g
                continue
            _check_not_released(tracer, node, loc)
            differentiated.append(node)
            opdef = REGISTRY[node.op]
            form = choose_vjp_form(opdef, node, tracer.overwritten)  # Step 3
            tracer.in_backward = node
            try:  # Step 4
                input_grads = opdef.vjp[form](VjpContext(node, form, wrap), g)
                for v, gi in zip(node.inputs, input_grads):
                    if gi is None or not v.requires_grad:
                        continue
                    gi = sum_to(gi, v.shape)
                    if gi.dtype != v.dtype:
                        gi = gi.cast(v.dtype)
                    grads[v] = grads[v] + gi if v in grads else gi
            finally:
                tracer.in_backward = root_node
        # Step 5
        per_leaf: dict[int, tuple] = {}  # leaf -> (leaf, grad), keyed by id: Tensor.__eq__ traces
        for v, leaf in tracer.leaf_of.items():
            if v in grads:
                if id(leaf) in per_leaf:
                    per_leaf[id(leaf)] = (leaf, per_leaf[id(leaf)][1] + grads[v])
                else:
                    per_leaf[id(leaf)] = (leaf, grads[v])
        for leaf, g in per_leaf.values():
            if leaf.grad is None:
                # A Tensor of its own: `g` may be another leaf's gradient (add's VJP returns
                # (g, g)) or a view of one (concat, slice_scatter), and a later accumulation
                # (`add_`) into this leaf.grad must not write through to them.
                leaf.grad = wrap(g._v())
            else:
                leaf.grad.add_(g)
            if tracer.distributed is not None:  # averaged over the ranks before its first use
                tracer.pending_grads.append((leaf, loc))
        tracer.backward_calls += 1
        if not retain_graph:
            for node in differentiated:
                tracer.released[node] = loc
    finally:
        tracer.grad_enabled, tracer.backward_loc = saved_grad_mode, None
        tracer.in_backward = None
