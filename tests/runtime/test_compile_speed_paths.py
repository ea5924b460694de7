"""The compile-time paths of the cpu backend give the same results as the slow ones.

- Elementwise kernels keyed before emission (`emitter._elementwise_key`): a node whose kernel
  (op and attributes, or a fused body's inner nodes; each operand's layout and dtype; which
  operands share a buffer) was seen is not emitted again, it calls the first one's function.
  The bodies emitted are the distinct ones; what runs is bit for bit what the build with one
  function per node (`emitter.DEDUPE = False`) computes; constants that differ only in their
  sign bit stay apart.
- Effort by kernel size (`emitter._interleave_fits`): a big fused body on an innermost loop
  too short for INTERLEAVE full vectors is not given the interleave hint (LLVM took seconds
  over it); smaller bodies and long loops keep it; results are the numpy reference's.
- A long entry is not optimised (`emitter.ENTRY_OPTNONE_MIN_NODES`): bit for bit what the -O3
  entry computes, a checked kernel's status still raises the user's DataError; a tiny
  program's entry keeps -O3.
"""
import re
from collections import OrderedDict

import numpy as np
import pytest

import compiler as cc
from runtime.cpu import emitter, jit
from tests.backends import AVAILABLE
from tests.runtime.test_kernel_dedupe import assert_same_bits, calls, defines

pytestmark = pytest.mark.skipif("cpu" not in AVAILABLE, reason="the cpu backend can't run here")

HINT = "llvm.loop.interleave.count"


@pytest.fixture
def fresh(monkeypatch):
    """Every compile reaches LLVM or the disk (a private in-memory code cache)."""
    monkeypatch.setattr(jit, "_cache", OrderedDict())


@pytest.fixture
def bodies(monkeypatch):
    """Counts the elementwise kernel bodies the emitter builds."""
    count = [0]
    real = emitter.ModuleEmitter._elementwise

    def counted(self, *a, **k):
        count[0] += 1
        return real(self, *a, **k)
    monkeypatch.setattr(emitter.ModuleEmitter, "_elementwise", counted)
    return count


def run_both(fn, args, monkeypatch, bodies):
    """[(program, outputs, bodies built)] for the keyed build, then one function per node."""
    got = []
    for dedupe in (True, False):
        monkeypatch.setattr(emitter, "DEDUPE", dedupe)
        bodies[0] = 0
        mine = [a.copy() for a in args]
        prog = cc.compile(fn, backend="cpu", sanitize=True).lower(*mine)
        got.append((prog, prog(*mine), bodies[0]))
    return got


def long_chain(x):
    # 1,200 cheap operations: the fusion pass cuts them into fused nodes of MAX_COST
    # operations, all but the last one the same body on the same buffer.
    for _ in range(600):
        x = x * 1.0001 + 0.5
    return x


def test_a_repeated_fused_body_is_built_once_and_computes_the_same_bits(
        fresh, monkeypatch, bodies):
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    (prog, out, built), (plain, plain_out, plain_built) = run_both(long_chain, [x], monkeypatch,
                                                                  bodies)
    fused = [k for k in defines(prog.source) if k.endswith("_fused")]
    nodes = sum(calls(prog.source, k) for k in fused)
    assert nodes >= 3 and len(fused) < nodes
    assert built == len(fused)           # each distinct body built once, the rest only called
    assert plain_built == nodes          # one per node without the key
    assert_same_bits(out, plain_out)
    ref = cc.compile(long_chain, backend="numpy").lower(x)(x)
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def signed_zeros(x, y):
    # Three kernels of one shape and layout: the first and third differ only in the buffer
    # they read (one body), the second only in the sign of a constant (its own body).
    return 1.0 / (x * 0.0), 1.0 / (x * -0.0), 1.0 / (y * 0.0)


def test_kernels_whose_constants_differ_in_the_sign_bit_stay_apart(fresh, monkeypatch, bodies):
    x = np.array([1.0, -2.0, 3.0, -0.5], np.float32)
    y = np.array([-1.0, 2.0, -3.0, 0.5], np.float32)
    (prog, out, built), (plain, plain_out, plain_built) = run_both(signed_zeros, [x, y],
                                                                  monkeypatch, bodies)
    assert (built, plain_built) == (2, 3)
    for got, want in zip(out, plain_out):
        assert_same_bits(got, want)
    with np.errstate(divide="ignore"):
        want = [1.0 / (x * np.float32(0.0)), 1.0 / (x * np.float32(-0.0)),
                1.0 / (y * np.float32(0.0))]
    for got, w in zip(out, want):
        assert_same_bits(got, w)
    assert np.signbit(out[0]).tolist() == [False, True, False, True]
    assert np.signbit(out[1]).tolist() == [True, False, True, False]


def sin_tanh(x):
    for _ in range(8):  # one fused node of cost ~320 (sin and tanh count 20 each)
        x = x.sin().tanh()
    return x


def exp_tanh(x, m):
    return ((x - m).exp() * 0.5 + x * x - m * 0.25).tanh() * 3.0 + 1.0  # cost ~50


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_interleave_hint_is_left_off_big_bodies_on_short_loops_only(fresh, dtype):
    rng = np.random.default_rng(3)
    short = rng.standard_normal(16).astype(dtype)            # shorter than 4 vectors
    long = rng.standard_normal(4096).astype(dtype)
    rows = rng.standard_normal((64, 10)).astype(dtype)       # inner loop of 10 (broadcast)
    col = rng.standard_normal((64, 1)).astype(dtype)
    cases = [(sin_tanh, (short,), False), (sin_tanh, (long,), True),
             (exp_tanh, (rows, col), True)]
    for fn, args, hinted in cases:
        prog = cc.compile(fn, backend="cpu", sanitize=True).lower(*args)
        assert (HINT in prog.source) == hinted, (fn.__name__, args[0].shape)
        ref = cc.compile(fn, backend="numpy").lower(*args)(*args)
        np.testing.assert_allclose(prog(*args), ref, rtol=1e-5, atol=1e-6)


def _entry_line(source):
    return next(line for line in source.splitlines() if line.startswith('define i64 @"run"'))


def _long_program(x, w, i):
    # Unfused: one kernel call per op in the entry (above ENTRY_OPTNONE_MIN_NODES), a
    # parallel loop (x is big enough to be cut into chunks) and a checked gather, whose status
    # the entry tests.
    for _ in range(40):
        x = x * w + 0.25
    return x.tanh().sum(), x.reshape([64, -1]).index_select(i, 1)  # <- select


def test_a_long_entry_is_not_optimised_and_computes_the_same_bits(fresh, monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(1 << 17).astype(np.float32)
    w = (rng.standard_normal(1 << 17) * 0.5).astype(np.float32)
    good, bad = np.array([0, 3, 2047]), np.array([1, 2048])
    got = {}
    for label, at_least in (("optnone", emitter.ENTRY_OPTNONE_MIN_NODES), ("O3", 10**9)):
        monkeypatch.setattr(emitter, "ENTRY_OPTNONE_MIN_NODES", at_least)
        f = cc.compile(_long_program, backend="cpu", fuse=False, threads=2)
        prog = f.lower(x, w, good)
        assert ("optnone" in _entry_line(prog.source)) == (label == "optnone")
        # (cut into blocks of ENTRY_BLOCK_NODES nodes once unoptimised)
        assert bool(re.search(r"^after\d+:", prog.source, re.M)) == (label == "optnone")
        got[label] = prog(x, w, good)
        # the checked kernel's status still stops the run and names the user's line
        with pytest.raises(cc.DataError, match="index 2048 at position \\[1\\]") as info:
            f(x, w, bad)
        assert "# <- select" in str(info.value)
    for a, b in zip(got["optnone"], got["O3"]):
        assert_same_bits(a, b)
    ref = cc.compile(_long_program, backend="numpy", fuse=False)(x, w, good)
    assert_same_bits(got["optnone"][1], ref[1])
    np.testing.assert_allclose(got["optnone"][0], ref[0], rtol=1e-5)
    # a tiny program's entry (its call is the per-call overhead) keeps -O3
    monkeypatch.setattr(emitter, "ENTRY_OPTNONE_MIN_NODES", 64)
    tiny = cc.compile(lambda x: x * 2 + 1, backend="cpu").lower(x[:4])
    assert "optnone" not in _entry_line(tiny.source)
    assert_same_bits(tiny(x[:4]), x[:4] * 2 + 1)


def _kernel_lines(source, op):
    return [line for line in source.splitlines()
            if line.startswith("define internal") and f'_{op}"(' in line]


def _big_and_small(x, y):
    # one big GEMM beside small kernels: elementwise loops, a cast, a sum (a reduction: its
    # `reassoc` sum keeps -O3, whose vectorised order it was written for)
    return x @ x, y * 2.0 + 1.0, y.cast("int32"), y.sum()


def test_small_kernels_beside_big_ones_are_compiled_for_size_with_the_same_bits(
        fresh, monkeypatch):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((256, 256)).astype(np.float32)
    y = rng.standard_normal(300).astype(np.float32) * 8
    got = {}
    for label, work in (("size", emitter.TINY_WORK), ("O3", 0)):
        monkeypatch.setattr(emitter, "TINY_WORK", work)
        prog = cc.compile(_big_and_small, backend="cpu", fuse=False).lower(x, y)
        small = [line for op in ("multiply", "add", "cast")
                 for line in _kernel_lines(prog.source, op)]
        assert len(small) == 3
        assert all(("minsize" in line) == (label == "size") for line in small)
        assert not any("minsize" in line for line in _kernel_lines(prog.source, "sum")
                       + _kernel_lines(prog.source, "matmul"))
        got[label] = prog(x, y)
    for a, b in zip(got["size"], got["O3"]):
        assert_same_bits(a, b)
    ref = cc.compile(_big_and_small, backend="numpy", fuse=False)(x, y)
    for a, b in zip(got["size"][1:3], ref[1:3]):
        assert_same_bits(a, b)
    # a module of small kernels only keeps -O3 everywhere (its calls are its kernels' time)
    monkeypatch.setattr(emitter, "TINY_WORK", 2048)
    prog = cc.compile(lambda y: (y * 2.0 + 1.0, y - 3.0), backend="cpu", fuse=False).lower(y)
    assert "minsize" not in prog.source
