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
    config.addinivalue_line(
        "markers", "slow_on(*names): `slow` for the `each_backend` runs on these backends only "
        "(a sweep whose other cases repeat the same native code paths)")


# The longest tests of the default run, longest first (150 down to 36 s each in a loaded
# 2-worker run's `--durations`, 2026-11-27): they start first. Under xdist a long test that
# starts near the end keeps one worker busy while the other has nothing left to do; started
# first, the other worker takes the short tests meanwhile (`--dist worksteal`, the default
# here, hands a worker that runs dry the tail of the other's queue). Only the order changes:
# a test not named here runs where it did, a name that no longer exists matches nothing. A
# file's name moves all of its tests together (they share a module fixture that would
# otherwise be set up twice).
LONG_FIRST = (
    "tests/gpu/test_harness_samples.py",
    "tests/passes/test_random_programs.py::test_training_programs_on_cpu_match_reference",
    "tests/gpu/test_gpu_codegen.py::test_every_op_in_narrow_and_16_bit_dtypes_compiles_to_ptx",
    "tests/gpu/test_harness_half.py::test_every_op_sampled_in_the_16_bit_dtype_runs_within_2_ulp",
    # these two share one sample search (tests/gpu/picks.py): the second reads the first's
    "tests/gpu/test_gpu_codegen.py::test_every_registry_op_in_the_op_samples_compiles_to_ptx",
    "tests/gpu/test_harness_programs.py::test_every_registry_op_runs_and_matches_the_numpy_backend",
    "tests/examples/test_examples.py::test_examples_run_as_scripts_with_a_plot",
    "tests/examples/test_gpt_depth.py::test_a_12_layer_gpt_step_plans_and_trains_in_place",
    "tests/examples/test_gpt_amp.py",
    "tests/gpu/test_harness_programs.py::test_random_programs_match_the_numpy_backend",
    "tests/passes/test_random_programs.py::test_forward_programs_on_cpu_match_reference",
    "tests/gpu/test_gpu_codegen.py::test_random_programs_generate_and_compile",
    "tests/examples/test_gpt_vs_torch.py::test_the_training_step_matches_pytorch_step_for_step",
    ("tests/passes/test_random_targeted.py::"
     "test_training_programs_on_cpu_under_a_random_budget_give_the_unbudgeted_bits"),
    "tests/examples/test_gpt_vs_torch.py::test_the_loss_and_every_gradient_match_pytorch",
    ("tests/benchmarks/test_backend_speed.py::"
     "test_quick_run_prints_the_tables_and_every_column_computes_the_same"),
    "tests/examples/test_examples.py::test_cli_demo_and_plan",
    ("tests/passes/test_random_programs.py::"
     "test_programs_on_cpu_give_the_same_bits_for_any_thread_count"),
)


def _long_rank(nodeid: str) -> int:
    for rank, name in enumerate(LONG_FIRST):
        if nodeid == name or nodeid.startswith((name + "[", name + "::")):
            return rank
    return len(LONG_FIRST)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    # with -n and no --dist: worksteal, not xdist's "load" (set here, not in addopts, so that a
    # run without -n stays undistributed and pytest-benchmark doesn't warn about xdist)
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "worksteal"


@pytest.hookimpl(tryfirst=True)   # (before `-m` deselects by the marks)
def pytest_collection_modifyitems(config, items):
    for item in items:
        only = item.get_closest_marker("slow_on")
        callspec = getattr(item, "callspec", None)
        if only and callspec and callspec.params.get("each_backend") in only.args:
            item.add_marker(pytest.mark.slow)
    # (a stable sort: every xdist worker computes the same order from the same collection)
    items.sort(key=lambda item: _long_rank(item.nodeid))


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
