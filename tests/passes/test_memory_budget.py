"""`cc.compile(fn, memory_budget=N)` (passes/budget.py): the planned peak beyond the caller's
arrays never exceeds N, raising the budget never adds work, the least-work plan that fits is
taken, values are those of the unbudgeted program bit for bit, and a budget no plan meets
raises MemoryBudgetError before anything runs, naming the lowest peak, what is live there and
why each further idea fails."""
import importlib.util
import inspect
import os

import numpy as np
import pytest
from hypothesis import assume, given

import compiler as cc
import compiler.nn.functional as F
import passes.budget as budget_pass
from passes.budget import parse_budget
from program_gen import programs
from tests.backends import AVAILABLE
from tests.passes.test_random_programs import STEPS, _settings

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
NATIVE = [b for b in AVAILABLE if b in ("numpy", "cpu")]


def gelu_mlp(x, w1, w2):
    w1.stop_gradient = False
    w2.stop_gradient = False
    u = x @ w1
    m = F.gelu(u)
    loss = (m @ w2).square().mean()
    loss.backward()
    with cc.no_grad():
        w1.subtract_(1.0 * w1.grad)   # lr 1.0: a wrong update order shows
        w2.subtract_(1.0 * w2.grad)
    return loss


MATMUL_LINE = inspect.getsourcelines(gelu_mlp)[1] + 3   # `u = x @ w1`


def gelu_args(seed=0, n=128, d=32, h=256):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, d)).astype(np.float32),
            (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32),
            (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)]


def beyond(plan):
    return plan.peak_bytes - plan.input_bytes


def steps(fn, args, n=3, **options):
    args = [a.copy() for a in args]
    prog = cc.compile(fn, **options)
    outs = [np.asarray(prog(*args)).copy() for _ in range(n)]
    return outs + args


@pytest.fixture(scope="module")
def search():
    return cc.compile(gelu_mlp, backend="numpy").lower(*gelu_args()).plan.budget_search


# -- the option --------------------------------------------------------------------------------
def test_budget_strings_and_numbers():
    assert parse_budget(1000) == 1000
    assert parse_budget(np.int64(7)) == 7
    assert parse_budget("12MiB") == 12 * 2**20
    assert parse_budget("1.5 MB") == 1_500_000
    assert parse_budget("800 KiB") == 800 * 1024
    assert parse_budget("64b") == 64
    assert cc.compile(gelu_mlp, memory_budget="2 MiB").memory_budget == 2 * 2**20


@pytest.mark.parametrize("bad", ["12 parsecs", "MiB", "-3MB", -1, True, 1.5, [1]])
def test_bad_budgets_are_refused_at_compile(bad):
    with pytest.raises(ValueError, match="memory_budget"):
        cc.compile(gelu_mlp, memory_budget=bad)


def test_memory_budget_error_is_a_compiler_error_and_a_memory_error():
    assert issubclass(cc.MemoryBudgetError, cc.CompilerError)
    assert issubclass(cc.MemoryBudgetError, MemoryError)


# -- the search ------------------------------------------------------------------------------
def test_the_search_recomputes_to_fit_and_takes_the_least_work(search):
    zero, low = search.zero, search.lowest()
    assert low.peak < zero.peak and low.extra_flops > 0
    # a budget the plan without recomputation meets: nothing recomputed
    plan = cc.compile(gelu_mlp, backend="numpy", memory_budget=zero.peak).lower(
        *gelu_args()).plan
    assert beyond(plan) == zero.peak
    assert not any(d.recomputed for d in plan.recompute_decisions)
    # one byte less: the least-work plan of the frontier that fits
    plan = cc.compile(gelu_mlp, backend="numpy", memory_budget=zero.peak - 1).lower(
        *gelu_args()).plan
    assert beyond(plan) <= zero.peak - 1
    fits = [p for p in search.points if p.peak <= zero.peak - 1]
    assert plan.budget_point.extra_flops == min(p.extra_flops for p in fits)
    recomputed = [d for d in plan.recompute_decisions if d.recomputed]
    assert [d.op for d in recomputed] == ["gelu"]
    # the report lists it with its extra FLOPs and the planned bytes it saved
    d = recomputed[0]
    assert d.extra_flops == 128 * 256 and d.saved_bytes == zero.peak - beyond(plan)
    text = plan.report()
    assert f"({d.extra_flops} extra FLOPs, saves {d.saved_bytes} B planned)" in text
    assert f"memory budget: {zero.peak - 1} B beyond the caller's arrays" in text


def test_budget_sweep_never_exceeds_and_never_adds_work_as_the_budget_rises(search):
    lo, hi = search.lowest().peak, search.zero.peak
    budgets = sorted({lo, lo + 1, (lo + hi) // 2, hi - 1, hi, hi + 4096})
    got = []
    for b in budgets:
        plan = cc.compile(gelu_mlp, backend="numpy", memory_budget=b).lower(*gelu_args()).plan
        assert beyond(plan) <= b
        got.append((b, beyond(plan), plan.budget_point.extra_flops))
    for (b1, p1, f1), (b2, p2, f2) in zip(got, got[1:]):
        assert f2 <= f1, got          # more budget: never more work
        assert p2 <= b2               # and the peak stays within it
        assert p2 == p1 or f2 < f1, got  # the peak moves only to save work
    assert got[0][1] == lo and got[-1][2] == 0


def test_budget_curve(search):
    curve = cc.compile(gelu_mlp, backend="numpy").lower(*gelu_args()).plan.budget_curve()
    lo = search.lowest().peak
    assert curve[0] == (lo - 1, None, None)          # below the lowest reachable: no plan
    assert (lo, lo, search.lowest().extra_flops) in curve
    assert curve[-1] == (search.zero.peak, search.zero.peak, 0)
    reached = [c for c in curve if c[1] is not None]
    for (b, p, f), (b2, p2, f2) in zip(reached, reached[1:]):
        assert p <= b and p2 <= b2 and f2 <= f
    assert cc.compile(gelu_mlp, backend="numpy").lower(*gelu_args()).plan.budget_curve(
        ["1 KiB"]) == [(1024, None, None)]


# -- the refusal -------------------------------------------------------------------------------
def test_an_unreachable_budget_raises_before_anything_runs(search):
    lo = search.lowest().peak
    cf = cc.compile(gelu_mlp, backend="numpy", memory_budget=lo - 1)
    with pytest.raises(cc.MemoryBudgetError) as err:
        cf.lower(*gelu_args())
    text = str(err.value)
    assert f"memory_budget={lo - 1} B can't be met by gelu_mlp" in text
    assert f"the lowest planned peak the search reached is {lo} B" in text
    # the buffers live at that peak, with their ops and source lines, and what each needs
    assert f"matmul at test_memory_budget.py:{MATMUL_LINE}" in text
    assert f"(matmul at test_memory_budget.py:{MATMUL_LINE}) would save up to" in text
    # a GEMM output is a candidate too (passes/recompute_gemm.py): searched, and no help here
    assert (f"recomputing %3 (matmul at test_memory_budget.py:{MATMUL_LINE}) would save up "
            f"to 131072 B, but the plan with it added peaks at {lo} B") in text
    # the first call raises too, and writes none of the caller's arrays
    args = gelu_args()
    before = [a.copy() for a in args]
    with pytest.raises(cc.MemoryBudgetError):
        cf(*args)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(args, before))


def test_recompute_off_searches_no_recomputation(search):
    with pytest.raises(cc.MemoryBudgetError, match="lowest planned peak the search reached is "
                       f"{search.zero.peak} B"):
        cc.compile(gelu_mlp, backend="numpy", recompute="off",
                   memory_budget=search.zero.peak - 1).lower(*gelu_args())


# -- values: recomputation is exact ---------------------------------------------------------------
@pytest.mark.parametrize("backend", NATIVE)
def test_budgeted_training_steps_are_bit_identical(search, backend):
    want = steps(gelu_mlp, gelu_args(), backend=backend, recompute="off", schedule="off")
    got = steps(gelu_mlp, gelu_args(), backend=backend, memory_budget=search.lowest().peak,
                sanitize=True)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def _transformer():
    spec = importlib.util.spec_from_file_location(
        "transformer_block", os.path.join(EXAMPLES, "transformer_block.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("backend", NATIVE)
def test_transformer_under_a_budget_matches_the_unrecomputed_program(backend, monkeypatch):
    t = _transformer()
    monkeypatch.setattr(t, "LR", 1.0)
    args = t.example_inputs()
    budget = 19_000_000   # below the 19,935,300 B of the plan without recomputation
    plan = cc.compile(t.train_step, backend=backend, memory_budget=budget).lower(*args).plan
    assert beyond(plan) <= budget
    assert any(d.recomputed for d in plan.recompute_decisions)
    want = steps(t.train_step, args, backend=backend, recompute="off", schedule="off")
    got = steps(t.train_step, args, backend=backend, memory_budget=budget)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


# -- many programs, many budgets ---------------------------------------------------------------
def _run(fn, prog, **options):
    args = prog.arrays()
    out = cc.compile(fn, backend="numpy", sanitize=True, **options)(*args)
    flat = out if isinstance(out, (tuple, list)) else [out]
    return [None if o is None else np.asarray(o).copy() for o in flat] + args


@_settings(20)
@given(prog=programs(STEPS, backward=True))
def test_random_training_programs_meet_every_reachable_budget(prog):
    assume(prog.expect_error is None)
    saved = budget_pass.MIN_BYTES
    budget_pass.MIN_BYTES = 1   # the values are small: every one is a candidate
    try:
        fn = prog.build()
        s = cc.compile(fn, backend="numpy").lower(*prog.arrays()).plan.budget_search
        lo, hi = s.lowest().peak, s.zero.peak
        want = _run(fn, prog, recompute="off", schedule="off")
        last = None
        for b in sorted({lo, (lo + hi) // 2, hi}):
            plan = cc.compile(fn, backend="numpy", memory_budget=b).lower(*prog.arrays()).plan
            assert beyond(plan) <= b, (b, plan.summary())
            flops = plan.budget_point.extra_flops
            assert last is None or flops <= last
            last = flops
            for g, w in zip(_run(fn, prog, memory_budget=b), want):
                if w is None:
                    assert g is None
                else:
                    np.testing.assert_array_equal(g, w)
        if lo > 0:
            with pytest.raises(cc.MemoryBudgetError):
                cc.compile(fn, backend="numpy", memory_budget=lo - 1).lower(*prog.arrays())
    finally:
        budget_pass.MIN_BYTES = saved


def test_the_plan_page_draws_the_budget_search(search, tmp_path):
    lo = search.lowest().peak
    plan = cc.compile(gelu_mlp, backend="numpy", memory_budget=lo).lower(*gelu_args()).plan
    page = open(plan.to_html(str(tmp_path / "plan.html"))).read()
    section = page[page.index("<h2>Memory budget</h2>"):page.index("<h2>Inplace decisions")]
    assert section.count("<circle") == len(search.frontier)
    assert section.count('r="6"') == 1                   # the plan taken
    assert f"<title>budget {lo} B</title>" in section
    plain = cc.compile(gelu_mlp, backend="numpy").lower(*gelu_args()).plan
    assert "<h2>Memory budget</h2>" not in open(plain.to_html(str(tmp_path / "p.html"))).read()
