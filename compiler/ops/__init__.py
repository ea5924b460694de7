"""The op registry. Importing this package registers every primitive op."""
from . import comm_ops, elementwise, fused, nn_ops, random_ops, shape_ops, sort_ops  # noqa: F401  (registration)
from .comm_ops import COMM_OPS
from .registry import (BFLOAT16, BOOL, CREATION, ELEMENTWISE, FLOAT16, HALF_DTYPES, KINDS, MATMUL,
                       OTHER, REDUCTION, REGISTRY, SCATTER, SUPPORTED_DTYPES, VIEW, OpDef,
                       compute_dtype, dkind, dtype_class, finfo, get, is_half, scratch_offsets,
                       scratch_specs, workspace_bytes)

__all__ = ["COMM_OPS", "REGISTRY", "OpDef", "get", "KINDS", "ELEMENTWISE", "REDUCTION", "VIEW",
           "SCATTER", "MATMUL", "CREATION", "OTHER", "SUPPORTED_DTYPES", "BOOL", "dtype_class",
           "BFLOAT16", "FLOAT16", "HALF_DTYPES", "dkind", "is_half", "compute_dtype", "finfo",
           "scratch_specs", "scratch_offsets", "workspace_bytes"]
