"""Shared pytest setup: deterministic single-threaded BLAS, repo root importable."""
import os
import sys

# Must happen before numpy is imported anywhere: BLAS reads these once, at load time.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

# Every compiled program in the tests runs in sanitizer mode: each arena buffer is poisoned
# when it dies, so a plan that lets live values share memory fails loudly (DESIGN §4).
os.environ.setdefault("COMPILER_SANITIZE", "1")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
