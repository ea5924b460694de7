"""A long program's module compiled in parts (runtime/cpu/jit.py, `plan_parts`): the entry and
the kernels compiled for size unoptimised at codegen opt 0, the other kernels at -O3 on up to
`jit.COMPILE_THREADS` threads. What runs is what the whole module computed (bit for bit, every
array the step writes), every function of the module is defined in exactly one part (identical
kernels stay one function), a short program is still compiled whole, the disk cache stores the
parts' objects as one entry and a later compile links them without LLVM, two programs whose
kernels have the same names each run their own, and a failure on a compile thread reaches the
caller."""
import json
import os
import re
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest

import compiler as cc
from runtime.cpu import disk_cache, jit
from tests.backends import AVAILABLE
from tests.runtime.test_kernel_dedupe import assert_same_bits, defines, mlp_inputs, sgd_step

pytestmark = pytest.mark.skipif("cpu" not in AVAILABLE, reason="the cpu backend can't run here")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Six layers 128 wide: the entry runs more than emitter.ENTRY_OPTNONE_MIN_NODES kernels (it is
# `optnone`) and the loss and bias kernels are compiled for size (`minsize`).
SHAPE = {"layers": 6, "width": 128, "batch": 32}
# Its -O3 kernels (~19k characters of IR) in one group per thread: below the default
# jit.THREAD_MIN_CHARS, so the tests lower it.
SMALL_GROUP = 4000


@pytest.fixture
def fresh(monkeypatch):
    """Every compile reaches LLVM (a private in-memory code cache, no disk cache)."""
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    monkeypatch.setenv("COMPILER_CACHE_DIR", "")
    disk_cache._reset()
    yield
    disk_cache._reset()


def _step(monkeypatch, split, threads=2, lr=0.1):
    """(program, loss, the arrays after the step) of one training step built with `split`."""
    monkeypatch.setattr(jit, "SPLIT", split)
    monkeypatch.setattr(jit, "COMPILE_THREADS", threads)
    monkeypatch.setattr(jit, "THREAD_MIN_CHARS", SMALL_GROUP)
    args = mlp_inputs(**SHAPE)
    prog = cc.compile(sgd_step(lr), backend="cpu").lower(*args)
    return prog, prog(*args), args


def _body(source, name):
    """The basic blocks of function `name` after its `entry:` label."""
    start = re.search(rf'^define [^\n]*@"{re.escape(name)}"\(', source, re.MULTILINE).end()
    start = source.index("\nentry:\n", start) + len("\nentry:\n")
    return source[start:source.index("\n}", start)]


def _part_defines(part):
    return defines(part.text)


def test_a_long_program_in_parts_computes_the_whole_modules_bits(fresh, monkeypatch):
    whole, whole_loss, whole_arrays = _step(monkeypatch, split=False)
    assert whole._exec._compiled.parts is None
    for threads in (1, 2):
        jit._cache.clear()
        prog, loss, arrays = _step(monkeypatch, split=True, threads=threads)
        parts = prog._exec._compiled.parts
        assert prog.source == whole.source  # (the module itself is the same)
        # the light part: the entry and every kernel compiled for size; the rest at -O3
        light, *full = parts
        assert light.light and not any(p.light for p in full)
        assert len(full) == threads
        sized = {n for n in defines(prog.source)
                 if re.search(rf'^define [^\n]*@"{re.escape(n)}"[^\n]*minsize', prog.source,
                              re.MULTILINE)}
        lighter = set(_part_defines(light))
        assert sized and sized | {"run"} <= lighter
        # ...and straight-line functions without floating-point arithmetic (the `.chunk`
        # wrappers, the GEMM kernels calling BLAS)
        for n in lighter - sized - {"run"}:
            body = _body(prog.source, n)
            assert not re.search(r"\b(fadd|fsub|fmul|fdiv|fcmp)\b|^\S+:", body, re.MULTILINE)
        assert any(n.endswith("_matmul") for n in lighter)
        # every function of the module defined once, in one part
        names = [n for p in parts for n in _part_defines(p)]
        assert sorted(names) == sorted(defines(prog.source))
        # what runs: the loss and every array the step updated, bit for bit
        assert_same_bits(loss, whole_loss)
        for a, b in zip(arrays, whole_arrays):
            assert_same_bits(a, b)


def test_the_light_part_is_not_optimised_and_the_full_part_is(fresh, monkeypatch):
    prog, _, _ = _step(monkeypatch, split=True)
    opt = prog._exec.optimized_ir
    light, full = opt.split("; part full", 1)
    assert light.startswith("; part light")
    # -O3 makes internal callees `fastcc`; nothing ran over the light part
    assert "fastcc" not in light and "vector.body" in full


def test_a_short_program_is_compiled_whole(fresh, monkeypatch):
    monkeypatch.setattr(jit, "SPLIT", True)
    x = np.arange(1000, dtype=np.float32)
    prog = cc.compile(lambda t: t * 2.0 + 1.0, backend="cpu").lower(x)
    assert prog._exec._compiled.parts is None
    assert_same_bits(prog(x), x * np.float32(2) + np.float32(1))


def test_the_disk_cache_stores_the_parts_as_one_entry_and_links_them_again(
        tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    disk_cache._reset()
    try:
        got = []
        for _ in range(2):
            jit._cache.clear()
            llvm, hits, stores = jit.STATS["llvm"], jit.STATS["hit"], jit.STATS["store"]
            prog, loss, arrays = _step(monkeypatch, split=True)
            got.append((loss, arrays, jit.STATS["llvm"] - llvm, jit.STATS["hit"] - hits,
                        jit.STATS["store"] - stores, prog._exec._compiled))
        (loss1, arrays1, *counts1, c1), (loss2, arrays2, *counts2, c2) = got
        assert counts1 == [1, 0, 1] and counts2 == [0, 1, 0]
        assert c1.source == "llvm" and c2.source == "disk"
        (entry,) = [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".o"]
        assert c2.object_code == c1.object_code and c2.object_code in entry.read_bytes()
        assert len(jit._unpack(c2.object_code)) == len(c1.parts) == 3
        assert_same_bits(loss1, loss2)
        for a, b in zip(arrays1, arrays2):
            assert_same_bits(a, b)
    finally:
        disk_cache._reset()


def test_programs_whose_kernels_share_names_each_run_their_own(fresh, monkeypatch):
    # The same step with another learning rate: the same kernel names (k<node>_<op>), the
    # kernels called across parts external in both programs' libraries, other constants.
    a, _, arrays_a = _step(monkeypatch, split=True, lr=0.1)
    b, _, arrays_b = _step(monkeypatch, split=True, lr=0.05)
    assert defines(a.source) == defines(b.source) and a.source != b.source
    monkeypatch.setattr(jit, "SPLIT", False)
    for lr, arrays in ((0.1, arrays_a), (0.05, arrays_b)):
        jit._cache.clear()
        _, _, want = _step(monkeypatch, split=False, lr=lr)
        for got, ref in zip(arrays, want):
            assert_same_bits(got, ref)
    assert not np.array_equal(arrays_a[2], arrays_b[2])


def test_a_failure_on_a_compile_thread_reaches_the_caller(fresh, monkeypatch):
    real = jit._compile_part

    def failing(part, opt, slot):
        if slot == 1:
            raise RuntimeError("LLVM failed on the second thread")
        return real(part, opt, slot)
    monkeypatch.setattr(jit, "_compile_part", failing)
    with pytest.raises(RuntimeError, match="second thread"):
        _step(monkeypatch, split=True, threads=2)
    assert not jit._cache  # nothing half-built was kept


CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
from runtime.cpu import jit
from tests.runtime.test_compile_parts import SMALL_GROUP
jit.THREAD_MIN_CHARS = SMALL_GROUP
if {forbid_llvm!r}:
    def _no_llvm(*a, **k):
        raise AssertionError("LLVM ran in a process that should have hit the disk cache")
    jit._llvm_compile = _no_llvm
from tests.runtime.test_compile_parts import SHAPE, mlp_inputs, sgd_step
import compiler as cc
args = mlp_inputs(**SHAPE)
prog = cc.compile(sgd_step(0.1), backend="cpu").lower(*args)
loss = prog(*args)
print(json.dumps({{"bits": [a.tobytes().hex() for a in [loss] + args],
                  "parts": len(prog._exec._compiled.parts), "stats": dict(jit.STATS)}}))
"""


def test_another_process_links_the_stored_parts_without_llvm(tmp_path):
    # (each process hashes strings with its own seed: the parts, and so the key, must not
    # depend on set order)
    env = dict(os.environ, COMPILER_CACHE_DIR=str(tmp_path / "cache"),
               COMPILER_COMPILE_THREADS="2")
    got = []
    for forbid in (False, True):
        out = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT, forbid_llvm=forbid)],
                             env=env, capture_output=True, text=True, timeout=600, check=False)
        assert out.returncode == 0, out.stderr
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = got
    assert first["parts"] == second["parts"] == 3
    assert first["stats"]["llvm"] >= 1 and first["stats"]["store"] >= 1
    assert second["stats"].get("llvm", 0) == 0 and second["stats"]["hit"] >= 1
    assert first["bits"] == second["bits"]


def test_loops_without_float_arithmetic_get_code_generated_at_opt_0_and_the_same_bits(
        fresh, monkeypatch):
    # The transformer step's copies, broadcasts and `contiguous` kernels: a "plain" part
    # (-O3, then code generated at opt 0) beside the -O3 groups.
    from examples import transformer_block as tb
    got = {}
    for split in (False, True):
        monkeypatch.setattr(jit, "SPLIT", split)
        monkeypatch.setattr(jit, "COMPILE_THREADS", 2)
        jit._cache.clear()
        args = [np.array(a, copy=True) for a in tb.example_inputs()]
        prog = cc.compile(tb.train_step, backend="cpu").lower(*args)
        got[split] = (prog, prog(*args), args)
    prog = got[True][0]
    kinds = [p.kind for p in prog._exec._compiled.parts]
    assert kinds[:2] == ["light", "plain"] and set(kinds[2:]) == {"full"}
    plain = _part_defines(prog._exec._compiled.parts[1])
    assert any(n.endswith("_broadcast_to") for n in plain)
    for n in plain:
        body = _body(prog.source, n)
        assert re.search(r"^\S+:", body, re.MULTILINE)  # a loop...
        assert not re.search(r"\b(fadd|fsub|fmul|fdiv|fcmp|fneg)\b|@\"?llvm\.", body)
    (_, loss0, arrays0), (_, loss1, arrays1) = got[False], got[True]
    for a, b in zip([loss0, *arrays0], [loss1, *arrays1]):
        assert_same_bits(a, b)
