"""The backends every backend-parametrized test runs: one list; "cpu" and "gpu" join when they
can compile and run a program here."""
import numpy as np

import compiler as cc

BACKENDS = ("numpy", "cpu", "gpu")


def available(backend: str) -> bool:
    try:
        cc.compile(lambda x: x + 1.0, backend=backend)(np.ones(2, np.float32))
    except (cc.CompilerError, ImportError, RuntimeError):
        return False
    return True


AVAILABLE = [b for b in BACKENDS if available(b)]


def numpy_compile(fn=None, **options):
    """cc.compile on the numpy backend, for tests that pin its plans: the unfused graph's (the
    default backend, cpu, fuses elementwise chains first)."""
    return cc.compile(fn, **{"backend": "numpy", **options})


def assert_sin_equal(got, want, backend: str):
    """Values computed with float64 sin: bit for bit, but within the op samples' ULP
    tolerance (4 ulp) on gpu, whose double sin is within 2 ulp (CUDA's documented bound), not
    correctly rounded as NumPy's is here."""
    if backend == "gpu":
        np.testing.assert_array_max_ulp(got, want, maxulp=4)
    else:
        np.testing.assert_array_equal(got, want)
