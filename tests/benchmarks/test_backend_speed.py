"""The backend benchmark's smoke test: `--quick` with the columns that are always there, so the
script can't rot. No timing is asserted (speed figures live in benchmarks/, ARCHITECTURE.md §7)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "backend_speed.py")


def test_quick_run_prints_the_tables_and_every_column_computes_the_same(tmp_path):
    pytest.importorskip("matplotlib")
    out_json, out_png = tmp_path / "speed.json", tmp_path / "speed.png"
    proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--runs", "3", "--warmup", "1",
                           "--columns", "cpu,numpy,numpy-hand", "--compile-workloads", "mlp",
                           "--json", str(out_json),
                           "--plot", str(out_png)],
                          capture_output=True, text=True, timeout=600)
    # exit status 1 would mean a column computed something else than our numpy backend
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "| workload | threads | cpu | numpy | numpy-hand |" in lines  # (1 and all cores)
    for w in ("add100", "add100_", "relu", "relu_", "mlp", "transformer"):
        row = next(line for line in lines if line.startswith(f"| {w} |"))
        assert row.count("×") == 3 and "**1.00×**" in row  # ratios to cpu, cpu's own is 1
    assert any(line.startswith("| mlp |") and "KiB" in line for line in lines)  # memory
    assert any(line.startswith("| mlp |") and line.endswith(" s |")
               and line.count(" s |") == 3 for line in lines)  # compile: off, cold, warm
    data = json.loads(out_json.read_text())
    # one section per environment, one run per thread count in each
    runs = [r for section in data["sections"] for r in section["runs"]]
    assert data["runs"] == 3 and runs
    for r in runs:
        assert set(r["times"]["mlp"]) == {"cpu", "numpy", "numpy-hand"}
        assert all(len(t) == 3 for t in r["times"]["mlp"].values())
        assert not any(r["checks"].values())
        # each column ran in its own process and waited for its threads before the next ran
        assert r["protocol"] == "a process a column"
        assert set(r["settle"]["mlp"]) == {"cpu", "numpy", "numpy-hand"}
        assert all(s >= 0.02 for s in r["settle"]["mlp"].values())  # two quiet 10 ms windows
    assert out_png.stat().st_size > 0


def test_a_wrong_update_is_caught():
    # the check that makes every column compute the same step must fail on a different one
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import backend_speed as bs
    ref = bs._first_step(bs.make_ours("mlp", True, "numpy"))
    hand = bs._first_step(bs.make_numpy_hand("mlp", True))
    assert bs.check_same("mlp", hand, ref) is None
    loss, deltas = hand
    wrong = (loss, [d * 1.01 for d in deltas])  # a 1% larger step on every parameter
    assert "update differs" in bs.check_same("mlp", wrong, ref)


def test_settle_waits_until_the_other_threads_are_idle():
    # What keeps a column's leftover threads (OpenBLAS spins ~0.1 s after a GEMM) off the
    # next column's step: settle() returns only once no other thread of the process runs.
    import threading
    import time
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import backend_speed as bs
    if not os.path.exists("/proc/self/task"):
        pytest.skip("reads /proc/self/task")
    stop = time.perf_counter() + 0.3

    def spin():
        while time.perf_counter() < stop:
            pass
    t = threading.Thread(target=spin)
    t.start()
    bs.settle(limit=30.0)
    busy_after = t.is_alive()
    t.join()
    assert not busy_after
