"""`python -m compiler plan`: paths from the working directory, usage errors instead of
tracebacks, --inplace/--json/--dot, the seeds (issue 16, item 10)."""
import json
import os
import shutil

import pytest

from compiler.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_plan_of_a_relative_path_from_another_directory(tmp_path, monkeypatch, capsys):
    shutil.copy(os.path.join(ROOT, "examples", "mlp.py"), tmp_path / "my_mlp.py")
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "my_mlp.py", "--inplace", "off"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("plan train_step: peak") and "decisions:" in out


def test_plan_by_example_name_json_and_dot(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "mlp", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["graph"] == "train_step" and data["peak_bytes"] >= data["lower_bound_bytes"]
    assert main(["plan", "mlp", "--dot"]) == 0
    assert capsys.readouterr().out.startswith('digraph "train_step" {')


def test_plan_seeds(capsys):
    assert main(["plan", "seeds"]) == 0
    out = capsys.readouterr().out
    assert out.count("=== ") >= 10 and "y = x.scale_(2.0) returns x itself" in out


def test_missing_file_is_a_usage_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["plan", "nope.py"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no such file: nope.py" in err and "mlp" in err and "Traceback" not in err


def test_a_file_without_build_program_is_refused_before_it_runs(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text("raise SystemExit('the top level ran')\n")
    with pytest.raises(SystemExit) as e:
        main(["plan", str(script)])
    assert e.value.code == 2
    assert "defines neither build_program" in capsys.readouterr().err


def test_help_says_what_the_file_must_define(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "build_program(backend=..., inplace=...)" in capsys.readouterr().out
