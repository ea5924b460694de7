"""The "gpu" backend: planned graphs as CUDA C kernels and a launch list, run through CuPy."""
from .executable import GpuExecutable
from .launch import GpuModule, Launch

__all__ = ["GpuExecutable", "GpuModule", "Launch"]
