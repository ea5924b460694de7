"""`python -m compiler demo` counts only the checks it ran (compiler/cli.py), and every seed
experiment (examples/seeds.py) has one."""
import numpy as np

import compiler as cc
from compiler import cli
from compiler.cli import load_example


def _double(x):
    return x * 2.0


X = np.arange(4.0)


def test_an_unchecked_experiment_is_named_and_not_counted_as_passed(capsys):
    seeds = [("checked", _double, (X,), lambda out, x: np.array_equal(out, 2 * x)),
             ("no check", _double, (X,), None)]
    assert cli.demo(seeds, examples=()) == 0
    out = capsys.readouterr().out
    assert "=== seed: checked: ok (result checked)" in out
    assert "=== seed: no check: UNCHECKED" in out
    assert "1/1 checks passed" in out
    assert "1 experiment(s) ran without a check: no check" in out
    assert "every experiment was checked" not in out


def test_a_failed_check_is_a_mismatch_and_fails_the_demo(capsys):
    seeds = [("wrong", _double, (X,), lambda out, x: np.array_equal(out, 3 * x)),
             ("right", _double, (X,), lambda out, x: np.array_equal(out, 2 * x))]
    assert cli.demo(seeds, examples=()) == 1
    out = capsys.readouterr().out
    assert "=== seed: wrong: MISMATCH (result)" in out
    assert "1/2 checks passed" in out and "every experiment was checked" in out


def test_every_seed_experiment_has_a_check_and_the_relu_seeds_check_their_plans():
    seeds = load_example("seeds")
    assert all(check is not None for _, _, _, check in seeds.SEEDS)
    by_fn = {fn: args for _, fn, args, _ in seeds.SEEDS}
    assert set(seeds.PLAN_CHECKS) <= set(by_fn)
    for fn, plan_check in seeds.PLAN_CHECKS.items():
        plan = cc.compile(fn).lower(*by_fn[fn]).plan
        assert plan_check(plan), (fn.__name__, plan.peak_bytes)
    # ARCHITECTURE.md §6's seed check, restated here so that a wrong PLAN_CHECKS entry fails too.
    relu_args = by_fn[seeds.relu_inplace]
    assert cc.compile(seeds.relu_inplace).lower(*relu_args).plan.peak_bytes == 67108864
    assert cc.compile(seeds.relu_out_of_place).lower(*relu_args).plan.peak_bytes == 134217728
