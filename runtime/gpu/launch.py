"""The launch list: what the GPU backend runs, as data.

The CUDA C emitter produces one module of `__global__` kernels (`GpuModule.source`) and the list
of launches that runs the whole schedule (`GpuModule.launches`). Two consumers read exactly this
list: the CuPy runtime on a device, and the CPU fiber harness in tests, so the
harness checks the launches the device would run.

Kernel arguments are given in the order of the kernel's parameters:
  ("arena", byte_offset)            pointer into the planned arena
  ("input", index, byte_offset)     pointer into the caller's argument `index`
  ("output", index, byte_offset)    pointer into returned buffer `index` (allocated per call)
  ("scalar", ctype, value)          a value passed by value: ctype is a C type name
                                    ("long long", "int", "float", "double", "unsigned long long")
A GEMM is a launch too, with `kernel` = "gemm" and `library` = "cublas": its args are the
BLAS call's (transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) with pointers given as
above, so the harness can run it with a reference GEMM. They are cuBLAS's own, column-major:
transa/transb are "N" or "T", m, n, k and the leading dimensions ints, alpha and beta
("scalar", "float" | "double", value) in the GEMM's compute type, and `dtype` says which gemm
("float32": sgemm, "float64": dgemm, "float16" / "bfloat16": cublasGemmEx with 16-bit A, B and
C and float32 accumulation, `GEMM_EX`: alpha and beta are then floats). As in BLAS, with
beta == 0 C is not read (it may hold anything, NaN included: a fresh arena buffer). (The
emitter passes a row-major C = A @ B as C^T = B^T A^T, so no operand is copied.)
"""
from __future__ import annotations

from dataclasses import dataclass, field

# cublasGemmEx's arguments for a GEMM on 16-bit floats: (the cudaDataType_t of A, B and C, the
# cublasComputeType_t): CUDA_R_16F = 2, CUDA_R_16BF = 14 (library_types.h), CUBLAS_COMPUTE_32F
# = 68 (cublas_api.h): products and sums in float32, C rounded once to its type.
CUDA_R_16F, CUDA_R_16BF, CUBLAS_COMPUTE_32F = 2, 14, 68
CUBLAS_GEMM_DEFAULT = -1
GEMM_EX = {"float16": (CUDA_R_16F, CUBLAS_COMPUTE_32F),
           "bfloat16": (CUDA_R_16BF, CUBLAS_COMPUTE_32F)}


@dataclass(frozen=True)
class Launch:
    kernel: str                       # a __global__ function of the module (or "gemm")
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int                 # dynamic shared memory per block
    args: tuple                       # see the module docstring
    node: int | None = None           # index in the schedule of the node it implements
    library: str | None = None        # None: a kernel of the module; "cublas": a GEMM call
    dtype: str | None = None          # a GEMM's element type ("float32" | "float64" |
                                      # "float16" | "bfloat16")


@dataclass
class GpuModule:
    source: str                                   # CUDA C, one translation unit
    launches: list[Launch] = field(default_factory=list)
    arena_bytes: int = 0
    arena_alignment: int = 256
    # byte offset in the arena of the status word (uint64: 0, or the node + 1 of the first
    # kernel that found data out of range); None when no kernel checks data
    status_offset: int | None = None
    # bytes past the planned buffers and the status word (counted in `arena_bytes`, which is
    # what the device allocates) where split reductions keep their per-slice partials
    scratch_bytes: int = 0
