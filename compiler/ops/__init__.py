"""The op registry. Importing this package registers every primitive op."""
from . import comm_ops, elementwise, fused, nn_ops, random_ops, shape_ops, sort_ops  # noqa: F401  (registration)
from .comm_ops import COMM_OPS
from .registry import (BOOL, CREATION, ELEMENTWISE, KINDS, MATMUL, OTHER, REDUCTION, REGISTRY,
                       SCATTER, SUPPORTED_DTYPES, VIEW, OpDef, dtype_class, get, scratch_offsets,
                       scratch_specs, workspace_bytes)

__all__ = ["COMM_OPS", "REGISTRY", "OpDef", "get", "KINDS", "ELEMENTWISE", "REDUCTION", "VIEW",
           "SCATTER", "MATMUL", "CREATION", "OTHER", "SUPPORTED_DTYPES", "BOOL", "dtype_class",
           "scratch_specs", "scratch_offsets", "workspace_bytes"]
