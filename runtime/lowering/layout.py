"""Layout maths shared by the cpu and gpu lowerings: pure functions of shapes and element
strides (no IR, no CUDA), so both renderers address tensors the same way."""
from __future__ import annotations

from .places import Place


def broadcast_strides(place: Place, shape) -> tuple:
    """`place`'s strides over the broadcast `shape` (0 where it is broadcast)."""
    lead = len(shape) - len(place.shape)
    out = [0] * lead
    for d, s in zip(place.shape, place.strides):
        out.append(s if d != 1 else 0)
    for k, d in enumerate(shape):
        if d == 1:
            out[k] = 0
    return tuple(out)


def collapse(shape, stride_lists):
    """Merge adjacent dims that are contiguous in every operand and drop size-1 dims, so a
    contiguous op becomes one loop (what the vectoriser wants)."""
    dims = [(d, [s[k] for s in stride_lists]) for k, d in enumerate(shape) if d != 1]
    merged = []
    for d, ss in dims:
        if merged:
            pd, pss = merged[-1]
            if all(ps == s * d for ps, s in zip(pss, ss)):
                merged[-1] = (pd * d, ss)
                continue
        merged.append((d, ss))
    new_shape = tuple(d for d, _ in merged)
    return new_shape, [tuple(ss[k] for _, ss in merged) for k in range(len(stride_lists))]


def blas_layout(rows, cols, rs, cs):
    """(flag, leading dimension) for a row-major CBLAS operand of `rows x cols` with element
    strides (rs, cs), or None when the layout needs a copy. Size-1 dims take any stride."""
    if cols == 1:
        cs = 1
        if rows == 1:
            rs = 1
    if rows == 1:
        rs = max(cols, 1)
    if cs == 1 and rs >= max(cols, 1):
        return ("N", rs)
    if rs == 1 and cs >= max(rows, 1):
        return ("T", cs)
    return None


def leading_padding(padding):
    """(top, left) of a (top, bottom, left, right) or (h, w) padding: output position i reads
    row i*stride + k*dilation - top; the trailing padding only sets the output size."""
    return (padding[0], padding[2]) if len(padding) == 4 else (padding[0], padding[1])


def conv_roles(op: str, out, p0, p1):
    """(x, w, g): the input, weight and output(-gradient) places of a conv2d node or of one of
    its gradients, whatever their operand order: conv2d(x, w) -> g,
    conv2d_grad_input(g, w) -> x, conv2d_grad_weight(x, g) -> w."""
    if op == "conv2d":
        return p0, p1, out
    if op == "conv2d_grad_input":
        return out, p1, p0
    return p0, out, p1
