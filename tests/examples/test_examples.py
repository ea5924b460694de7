"""The example programs: plans near the lower bound, sanitized arena runs equal to the
reference, the seed experiments, and the CLI. Training runs on every backend (`AVAILABLE`);
plans are the numpy pipeline's."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from compiler.cli import load_example
from runtime.arena import ArenaExecutable
from runtime.reference import evaluate
from tests.backends import AVAILABLE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name", ["mlp", "transformer_block"])
def test_training_step_plan_is_within_5_percent_of_the_lower_bound(name):
    module = load_example(name)
    plan = module.build_program().plan
    assert plan.peak_bytes <= 1.05 * plan.lower_bound_bytes
    assert plan.peak_bytes < plan.no_inplace_peak_bytes < plan.naive_bytes
    # the requested relu_ / scale_ and every parameter update run in place
    requested = [d for d in plan.decisions if d.requested]
    assert requested and all(d.inplace for d in requested)


@pytest.mark.parametrize("name", ["mlp", "transformer_block"])
def test_sanitized_arena_run_equals_the_reference(name):
    module = load_example(name)
    prog = module.build_program()
    args = [a for a in module.example_inputs() if isinstance(a, np.ndarray)]
    want_outs, want_muts = evaluate(prog.graph, [a.copy() for a in args])
    got_outs, got_muts = ArenaExecutable(prog.graph, prog.plan, sanitize=True).run(
        [a.copy() for a in args])
    for got, want in zip(got_outs, want_outs):
        np.testing.assert_array_equal(got, want)
    assert set(got_muts) == set(want_muts) and len(want_muts) == len(args) - 2
    for k in want_muts:
        np.testing.assert_array_equal(got_muts[k], want_muts[k])


@pytest.mark.parametrize("backend", AVAILABLE)
def test_mlp_training_reduces_the_loss_and_updates_the_callers_weights(backend):
    import compiler as cc
    mlp = load_example("mlp")
    args = mlp.example_inputs(batch=64)
    w1_before = args[2].copy()
    step = cc.compile(mlp.train_step, backend=backend, sanitize=True)
    losses = [float(step(*args)) for _ in range(3)]
    assert losses[2] < losses[1] < losses[0]
    assert not np.array_equal(args[2], w1_before)


def test_every_seed_experiment_matches_numpy_in_sanitizer_mode():
    import compiler as cc
    seeds = load_example("seeds")
    for title, fn, args, check in seeds.SEEDS:
        out = cc.compile(fn, sanitize=True)(*[a.copy() for a in args])
        if check is not None:
            assert check(out, *args), title


def test_cli_demo_and_plan():
    demo = subprocess.run([sys.executable, "-m", "compiler", "demo"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert demo.returncode == 0, demo.stderr
    assert "19/19 checks passed" in demo.stdout and "every experiment was checked" in demo.stdout
    # one table: a row per seed and per example (issue 10)
    table = demo.stdout[demo.stdout.index("program "):]
    assert "lower bound B" in table and "ms/call" in table
    for name in ("mlp", "transformer_block", "cnn", "gpt", "F.relu_ on [1,64,512,512]"):
        assert f"\n{name}" in table, name
    assert "... compiling and running example gpt" in demo.stderr
    # the README's copy of the table (examples/update_readme.py) lists the same programs
    readme = open(os.path.join(ROOT, "README.md")).read()
    pasted = readme.split("<!-- demo table: examples/update_readme.py -->")[1] \
        .split("<!-- end of demo table -->")[0]

    def names(text):
        rows = text[text.index("program "):].split("\n\n")[0].splitlines()[2:]
        return [r[:40].rstrip() for r in rows]
    assert names(pasted) == names(table)
    assert "sin_" in demo.stdout and "NOT in place" in demo.stdout
    plan = subprocess.run([sys.executable, "-m", "compiler", "plan", "examples/mlp.py"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("plan train_step: peak") and "decisions:" in plan.stdout


# (on cpu, since fusion, the step compiles and trains 60 steps in ~3 s; it took ~20 s of -O3
# for 1.3 MB of IR unfused). The numpy interpreter takes ~20 s for the 60 steps: that run is
# marked slow, the default run trains on the other backends (cpu: the default one).
@pytest.mark.parametrize("backend", [pytest.param(b, marks=pytest.mark.slow) if b == "numpy"
                                     else b for b in AVAILABLE])
def test_gpt_loss_falls_below_the_unigram_entropy(backend):
    gpt = load_example("gpt")
    h = gpt.unigram_entropy()
    assert 2.0 < h < 3.5  # the grammar's character frequencies
    model, losses = gpt.train(steps=60, backend=backend, log=None)
    assert np.mean(losses[-10:]) < h < losses[0]
    text = gpt.generate(model, gpt.TEXT[:gpt.CONTEXT], 5, backend=backend)
    assert len(text) == 5 and set(text) <= set(gpt.VOCAB)


def test_gpt_adamw_updates_run_in_place():
    gpt = load_example("gpt")
    plan = gpt.build_program().plan
    updates = [d for d in plan.decisions if d.requested and d.phase == "update"]
    # per parameter (Paddle's AdamW): p *= (1 - lr wd), m and v scale_ + add_, p -= ..., and
    # its two beta powers scale_
    assert len(updates) == 8 * gpt.N_PARAMS
    assert gpt.N_PARAMS == len(gpt.make_model()[0].parameters())
    assert all(d.inplace for d in updates), [d.reason for d in updates if not d.inplace]
    assert plan.peak_bytes <= 1.05 * plan.lower_bound_bytes


@pytest.mark.parametrize("backend", AVAILABLE)
def test_cnn_trains_with_sgd_momentum(backend):
    cnn = load_example("cnn")
    _, losses, acc = cnn.train(steps=30, backend=backend, log=None)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert acc > 0.5


def test_cnn_momentum_updates_are_requested_in_place():
    cnn = load_example("cnn")
    plan = cnn.build_program().plan
    updates = [d for d in plan.decisions if d.requested and d.phase == "update"]
    # 10 parameters (2 Conv2D, 2 BatchNorm2D, Linear: weight and bias each); each velocity:
    # scale_ and add_; each parameter: subtract_
    assert len(updates) == 3 * 10
    # and in the forward pass the two relu_ and BatchNorm2D's running mean and variance,
    # updated in the layers' own arrays
    requested = [d for d in plan.decisions if d.requested]
    assert len(requested) == 30 + 2 + 4 * 2
    assert all(d.inplace for d in requested), [d.reason for d in requested if not d.inplace]
    assert plan.peak_bytes <= 1.05 * plan.lower_bound_bytes


@pytest.mark.parametrize("backend", AVAILABLE)
def test_mlp_example_trains_on_separable_data(backend):
    mlp = load_example("mlp")
    losses, acc = mlp.train(steps=20, backend=backend, log=None)
    assert np.mean(losses[-5:]) < 0.5 * losses[0]
    assert acc > 0.5


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt"])
def test_examples_run_as_scripts_with_a_plot(name, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plan.png"
    run = subprocess.run([sys.executable, f"examples/{name}.py", "--steps", "3", "--plot",
                          str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert run.returncode == 0, run.stderr
    assert "peak" in run.stdout and out.stat().st_size > 1000


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt", "transformer_block", "seeds"])
def test_examples_run_on_the_default_backend_and_take_backend(name):
    # issue 24: each passed backend="numpy" though cpu is the default; mlp.py had no --backend
    import inspect

    import compiler as cc
    default = inspect.signature(cc.compile).parameters["backend"].default
    module = load_example(name)
    for fn in ("train", "generate"):
        if hasattr(module, fn):
            assert inspect.signature(getattr(module, fn)).parameters["backend"].default \
                == default, fn
    run = subprocess.run([sys.executable, f"examples/{name}.py", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert run.returncode == 0, run.stderr
    assert "--backend {cpu,numpy,gpu}" in run.stdout and f"default: {default}" in run.stdout


def test_seeds_prints_its_table_when_run_directly():
    seeds = load_example("seeds")
    run = subprocess.run([sys.executable, "examples/seeds.py", "--backend", "numpy"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert run.returncode == 0, run.stderr
    table = run.stdout[run.stdout.index("\nprogram ") + 1:].split("\n\n")[0].splitlines()
    assert table[0].split()[:3] == ["program", "nodes", "in"]
    assert [r[:40].rstrip() for r in table[2:]] == [t[:40] for t, _, _, _ in seeds.SEEDS]
    assert all(r.split()[-2] == "yes" for r in table[2:])
    checks = sum(c is not None for _, _, _, c in seeds.SEEDS) + len(seeds.PLAN_CHECKS)
    assert f"{checks}/{checks} checks passed" in run.stdout


def _update_readme():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "update_readme", os.path.join(ROOT, "examples", "update_readme.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _readme_address(text):
    section = text[text.index("## Seeing a plan"):]
    section = section[:section.index("\n## ")]
    return [int(n) for n in re.findall(r"plan\.html#buf-(\d+)", section)]


def test_readme_screenshot_address_selects_todays_largest_buffer_at_the_peak():
    # issue 24: the README said #buf-51 of an older plan (45.01 MiB peak, 215 nodes)
    plan = load_example("transformer_block").build_program().plan
    live = [b for b in plan.buffers if b.kind != "input" and b.live_at(plan.peak_point)]
    biggest = max(b.size for b in live)
    readme = open(os.path.join(ROOT, "README.md")).read()
    (n,) = _readme_address(readme)
    assert n == min(b.id for b in live if b.size == biggest)
    assert _update_readme().shown_buffer(plan).id == n


def test_update_readme_takes_the_screenshot_and_writes_its_address(tmp_path):
    from tests.passes.browser import find_browser
    browser = find_browser()
    if browser is None:
        pytest.skip("no Chromium/Chrome installed (apt-get install chromium, or set "
                    "COMPILER_TEST_BROWSER)")
    readme = tmp_path / "README.md"
    text = open(os.path.join(ROOT, "README.md")).read()
    readme.write_text(re.sub(r"plan\.html#buf-\d+", "plan.html#buf-9999", text))
    png = tmp_path / "shot.png"
    n = _update_readme().screenshot(png=str(png), readme=str(readme), browser=browser)
    assert _readme_address(readme.read_text()) == [n]
    assert readme.read_text().replace(f"#buf-{n}", "") == text.replace(f"#buf-{n}", "")
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")) == \
        (1440, 1000)


def test_mlp_layer_step_is_the_loose_array_step():
    # the example trains an nn.Layer with cc.optimizer.SGD; the plans and benchmarks study
    # train_step over loose arrays: the same step (losses bit for bit; the weights within an
    # ulp, as SGD multiplies by its rate as a float32 array (0.1f) where train_step scales by
    # the Python float 0.1)
    import compiler as cc
    mlp = load_example("mlp")
    x, labels, *weights = mlp.example_inputs()       # make_net's weights
    net, opt = mlp.make_net()
    layer_step = cc.compile(mlp.layer_train_step_for(net, opt), backend="numpy")
    loose_step = cc.compile(mlp.train_step, backend="numpy")
    for _ in range(2):
        assert layer_step(x, labels).tobytes() == loose_step(x, labels, *weights).tobytes()
    initial = mlp.example_inputs()[2:]
    for key, w, w0 in zip(("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"), weights, initial):
        assert not np.array_equal(w, w0), key            # both steps trained
        np.testing.assert_allclose(net.state_dict()[key], w, rtol=2.4e-7, atol=7.5e-9,  # ulp(0.1f)
                                   err_msg=key)
