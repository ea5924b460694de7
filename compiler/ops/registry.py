"""The op registry: every primitive op is defined once, by one `defop(...)` call.

An entry holds everything any part of the compiler needs to know about the op:

- `kind`: one of KINDS; passes ask `op.kind in (...)`, never compare op names;
- `infer(types, **attrs) -> (shape, dtype)`: the shape/dtype rule, raising `ShapeError`;
- `ref(*arrays, **attrs) -> ndarray`: the numpy reference implementation (the semantics);
- `vjp`: reverse-mode rules keyed by what they need from the forward pass
  ("none", "input", "output", "input+output"); ops that can be written either way offer both
  and the autodiff pass picks the one that leaves a buffer free for an inplace op;
- `expr`: for elementwise ops, the scalar expression both code emitters render;
- `inplace`: the name of the Paddle-style `_` method, when the op has one;
- `random`: each call draws fresh random numbers, so two identical calls are not one value
  (common-subexpression elimination never merges them);
- `into(out, *arrays, **attrs)`: optional, the result written straight into `out` (an array of
  the node's shape and dtype, possibly an input itself when the op runs in place over it with
  the identical layout), bit-identical to `ref`; it returns NotImplemented for argument types
  it doesn't handle (the executor then falls back). Executors use it so that a call touches
  only the memory its plan placed;
- `scratch(in_types, out_type, **attrs) -> [(shape, dtype), ...]`: the temporaries `into`
  needs (a composite computed in several NumPy steps), passed to it as `scratch=[arrays]`.
  The memory planner places them as one workspace buffer live only at the node's point
  (`workspace_bytes`), as XLA and TVM do, so the plan stays the truth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import ml_dtypes
import numpy as np

from ..errors import ShapeError

# -- printed forms (the IR's printer and the fused op's operands) --------------------------------
_DTYPE_SHORT = {
    "float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "bool",
    "uint64": "u64", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "uint8": "u8",
    "int16": "i16",
}


def dtype_short(dtype: np.dtype) -> str:
    return _DTYPE_SHORT.get(np.dtype(dtype).name, np.dtype(dtype).name)


def type_str(shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"{dtype_short(dtype)}[{','.join(str(d) for d in shape)}]"


def format_attr(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"<{type_str(v.shape, v.dtype)}>"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, np.dtype):
        return dtype_short(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(format_attr(x) for x in v) + "]"
    return str(v)


ELEMENTWISE = "elementwise"  # out[i] depends on in[i] only (after broadcasting)
REDUCTION = "reduction"
VIEW = "view"                # output shares the input's storage
SCATTER = "scatter"          # writes a region of input 0 (its base), keeps the rest
MATMUL = "matmul"
CREATION = "creation"        # no tensor inputs
OTHER = "other"              # anything else (row-wise softmax, conv, concat, ...)
KINDS = (ELEMENTWISE, REDUCTION, VIEW, SCATTER, MATMUL, CREATION, OTHER)

VJP_NEEDS = ("none", "input", "output", "input+output")

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)  # NumPy has none: the ml_dtypes package's, as JAX's
FLOAT16 = np.dtype(np.float16)
# The 16-bit floats are storage types: every op computes in float32 and rounds once to nearest
# even when it stores (PyTorch's CPU kernels do the same), so a result is the float32 result
# rounded once.
HALF_DTYPES = (FLOAT16, BFLOAT16)
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64)) + HALF_DTYPES
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.int8), np.dtype(np.uint8),
              np.dtype(np.int16))
BOOL = np.dtype(np.bool_)
# uint64 is the type of random seeds; it takes part in promotion as
# NumPy says (uint64 with a signed integer is float64), which user code has no reason to meet.
UINT64 = np.dtype(np.uint64)
SUPPORTED_DTYPES = FLOAT_DTYPES + INT_DTYPES + (BOOL, UINT64)
DEFAULT_FLOAT = np.dtype(np.float32)  # Paddle's default dtype


def dkind(dtype) -> str:
    """NumPy's kind letter, with bfloat16 a float ("f"): ml_dtypes gives it kind "V"."""
    dtype = np.dtype(dtype)
    return "f" if dtype == BFLOAT16 else dtype.kind


def is_half(dtype) -> bool:
    return np.dtype(dtype) in HALF_DTYPES


def compute_dtype(dtype) -> np.dtype:
    """The dtype arithmetic on `dtype` values happens in: float32 for the 16-bit floats."""
    dtype = np.dtype(dtype)
    return DEFAULT_FLOAT if dtype in HALF_DTYPES else dtype


def finfo(dtype):
    """np.finfo, also for bfloat16."""
    return ml_dtypes.finfo(np.dtype(dtype))


def dtype_class(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return "bool"
    return "float" if dkind(dtype) == "f" else "int"


@dataclass
class OpDef:
    name: str
    kind: str
    infer: Callable
    ref: Callable
    vjp: dict[str, Callable] = field(default_factory=dict)
    expr: Callable | None = None
    inplace: str | None = None
    doc: str = ""
    # A random op: two calls with the same inputs are different draws, so common-subexpression
    # elimination must never merge them (each call site also gets its own stream attribute).
    random: bool = False
    into: Callable | None = None
    scratch: Callable | None = None
    # Inputs a non-elementwise op may write its output over element by element (gemm's
    # accumulator `c`): the reinplace pass's rule 1 accepts them like an elementwise operand.
    overwrites: tuple = ()

    @property
    def differentiable(self) -> bool:
        return bool(self.vjp)


REGISTRY: dict[str, OpDef] = {}


def defop(name, kind, infer, ref, *, vjp=None, expr=None, inplace=None, doc="",
          random=False, into=None, scratch=None, overwrites=()) -> OpDef:
    assert kind in KINDS, kind
    assert name not in REGISTRY, f"op {name} defined twice"
    assert scratch is None or into is not None, f"{name}: scratch is for an `into`"
    for need in (vjp or {}):
        assert need in VJP_NEEDS, (name, need)
    op = OpDef(name, kind, _sized(infer), ref, dict(vjp or {}), expr, inplace, doc, random,
               into, scratch, tuple(overwrites))
    REGISTRY[name] = op
    return op


# A value no array can hold: NumPy's limit (its byte size must fit an intp), which the planner's
# int64 offsets share. Refused where the trace makes it, naming the user's line.
MAX_VALUE_BYTES = np.iinfo(np.intp).max


def _sized(infer):
    def sized_infer(types, **attrs):
        shape, dtype = infer(types, **attrs)
        nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize  # (no overflow)
        if nbytes > MAX_VALUE_BYTES:
            raise ShapeError(f"the result, {list(shape)} {np.dtype(dtype)}, is {nbytes} bytes: "
                             f"too big (an array holds at most {MAX_VALUE_BYTES})")
        return shape, dtype
    return sized_infer


SCRATCH_ALIGN = 64  # each scratch array of a workspace starts on a cache line


def scratch_specs(node) -> list[tuple[tuple[int, ...], np.dtype]]:
    """The (shape, dtype) of each temporary the node's `into` needs (none for most ops)."""
    op = REGISTRY[node.op]
    if op.scratch is None:
        return []
    return [(tuple(int(d) for d in shape), np.dtype(dtype)) for shape, dtype in op.scratch(
        [(v.shape, v.dtype) for v in node.inputs], (node.out.shape, node.out.dtype),
        **node.attrs)]


def scratch_offsets(specs) -> tuple[list[int], int]:
    """Byte offsets of the scratch arrays inside the workspace, and its size."""
    offsets, size = [], 0
    for shape, dtype in specs:
        offsets.append(size)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size += -(-nbytes // SCRATCH_ALIGN) * SCRATCH_ALIGN
    return offsets, size


def workspace_bytes(node) -> int:
    """Bytes of scratch memory the node needs while it runs (0 for most ops)."""
    return scratch_offsets(scratch_specs(node))[1]


def get(name: str) -> OpDef:
    return REGISTRY[name]


# -- shape/dtype rule helpers shared by many entries ---------------------------------------
def broadcast_shapes(*shapes) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        pass
    # NumPy also refuses shapes that do broadcast when the result would be too big for an
    # array: the rule itself, so that the size check names the result and its bytes.
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, rank - len(s)):
            if d != 1 and out[i] not in (1, d):
                raise ShapeError("shapes " + " and ".join(str(list(s)) for s in shapes)
                                 + " can't be broadcast together")
            out[i] = d if d != 1 else out[i]
    return tuple(int(d) for d in out)


def promote(*dtypes) -> np.dtype:
    """The result dtype of mixing `dtypes` (Paddle / PyTorch): the highest category present
    (float > int > bool) decides, and within it the widest dtype. So an int tensor times a
    weakly typed float scalar (a float32 `full`) stays float32, as `int / int` and
    `int ** 0.5` do, where numpy would widen int32 + float32 to float64. float16 with
    bfloat16 is float32 (neither holds the other), as in Paddle and PyTorch; uint8 with int8 is
    int16, as NumPy says."""
    dtypes = [np.dtype(d) for d in dtypes]
    floats = [d for d in dtypes if dkind(d) == "f"]
    if floats:
        halves = {d for d in floats if d in HALF_DTYPES}
        wide = [d for d in floats if d not in HALF_DTYPES]
        if len(halves) == 2:
            wide.append(DEFAULT_FLOAT)
        return np.result_type(*wide) if wide else halves.pop()
    ints = [d for d in dtypes if d.kind in "iu"]
    if ints:
        return np.result_type(*ints)
    return np.result_type(*dtypes)


def float_of(dtype) -> np.dtype:
    """The float dtype an int/bool input computes in (Paddle: float32)."""
    dtype = np.dtype(dtype)
    return dtype if dkind(dtype) == "f" else DEFAULT_FLOAT


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """`None` -> all axes; ints are wrapped; duplicates and out-of-range axes raise."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        a = int(a)
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise ShapeError(f"axis {a} is out of range for a tensor of rank {ndim}")
        out.append(a % max(ndim, 1))
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {list(axes)}")
    return tuple(sorted(out))
