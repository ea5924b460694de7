"""COMPILER_DUMP prints each named pass's graph and analysis; an unknown name raises (issue 16,
item 9)."""
import numpy as np
import pytest

import compiler as cc

from tests.backends import numpy_compile


def f(x):
    y = x * 2.0
    return y.exp()


def test_dump_reinplace_prints_its_decisions(monkeypatch, capsys):
    monkeypatch.setenv("COMPILER_DUMP", "reinplace")
    numpy_compile(f).lower(np.ones(3))
    out = capsys.readouterr().out
    assert out.startswith("--- after reinplace ---\ngraph f(x: f64[3]) {")
    assert "decisions:" in out and "exp" in out and "in place: writes over %" in out


def test_dump_plan_prints_intervals_and_offsets(monkeypatch, capsys):
    monkeypatch.setenv("COMPILER_DUMP", "plan_memory")
    numpy_compile(f).lower(np.ones(3))
    out = capsys.readouterr().out
    assert "--- after plan_memory ---" in out and "buffers:" in out and "offset" in out


def test_unknown_dump_name_raises_listing_the_valid_ones(monkeypatch):
    monkeypatch.setenv("COMPILER_DUMP", "reinplce")
    with pytest.raises(cc.CompilerError, match=r"reinplce: valid names are .*reinplace.*all"):
        numpy_compile(f).lower(np.ones(3))
