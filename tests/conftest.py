"""Shared pytest setup: deterministic single-threaded BLAS, repo root importable, the cpu
backend's disk cache in a private temporary directory."""
import atexit
import os
import shutil
import sys
import tempfile

# Must happen before numpy is imported anywhere: BLAS reads these once, at load time.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

# Every compiled program in the tests runs in sanitizer mode: each arena buffer is poisoned
# when it dies, so a plan that lets live values share memory fails loudly (ARCHITECTURE.md §4).
os.environ.setdefault("COMPILER_SANITIZE", "1")

# The suite never reads or writes the user's real compile cache (~/.cache/inplace-compiler):
# one fresh directory per session, inherited by the subprocesses tests start, removed at exit.
_CACHE_DIR = tempfile.mkdtemp(prefix="inplace-compiler-test-cache-")
os.environ["COMPILER_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)

# A folder per test session that the xdist workers share (they inherit the variable), for what
# one test finds and another reuses (tests/gpu/picks.py); removed by the process that made it.
if "INPLACE_TEST_SESSION_DIR" not in os.environ:
    os.environ["INPLACE_TEST_SESSION_DIR"] = tempfile.mkdtemp(prefix="inplace-test-session-")
    atexit.register(shutil.rmtree, os.environ["INPLACE_TEST_SESSION_DIR"], True)

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import pytest  # noqa: E402

from tests.backends import AVAILABLE  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "backends(*names): `each_backend` runs the test on these backends only "
        "(e.g. a test that pins the numpy pipeline's plan, which the cpu pipeline's fusion "
        "changes, or one that runs no backend at all)")


def pytest_generate_tests(metafunc):
    if "each_backend" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("backends")
        names = [b for b in AVAILABLE if only is None or b in only.args]
        metafunc.parametrize("each_backend", names, indirect=True)


@pytest.fixture
def each_backend(request, monkeypatch):
    """Runs the test once per available backend (numpy, cpu, ...): `cc.compile` called without
    `backend=` compiles for it. A module opts in with
    `pytestmark = pytest.mark.usefixtures("each_backend")`; `@pytest.mark.backends("numpy")`
    keeps one test to the backends it names."""
    import compiler as cc
    backend = request.param
    real = cc.compile

    def compile_for_backend(fn=None, **options):
        options.setdefault("backend", backend)
        return real(fn, **options)
    monkeypatch.setattr(cc, "compile", compile_for_backend)
    return backend
