"""The "gpu" backend: CUDA C kernels and the launch list that runs them (issue 11)."""
