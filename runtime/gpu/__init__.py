"""The "gpu" backend: planned graphs as CUDA C kernels and a launch list, run through CuPy."""
from .emitter import LOWERING
from .executable import GpuExecutable
from .launch import GpuModule, Launch

__all__ = ["GpuExecutable", "GpuModule", "LOWERING", "Launch"]
