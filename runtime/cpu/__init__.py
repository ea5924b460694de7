"""The "cpu" backend: planned graphs lowered through llvmlite to one native entry function.

`emitter.py` builds the LLVM module (kernels + the `run` entry; kernel groups in
`index_kernels.py`, `gemm_kernels.py`, `window_kernels.py`), `scalar.py` renders scalar
expressions (`mathlib.py` holds the generated transcendental functions), `jit.py` optimises
and links through ORC, `executable.py` runs it (where every value lives is
`runtime/lowering/places.py`, shared with gpu). `LOWERING` says which kernel
families it renders; `FALLBACK_OPS` lists the ops that call back into numpy.
"""
from .emitter import FALLBACK_OPS, LOWERING
from .executable import CpuExecutable

__all__ = ["CpuExecutable", "FALLBACK_OPS", "LOWERING"]
