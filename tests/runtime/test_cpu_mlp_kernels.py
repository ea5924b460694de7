"""The mlp step's kernels outside its GEMMs, on the cpu backend (issue 25).

- relu's mask kept as bits (passes/recompute.py's pack_masks) is unpacked with `floor_divide`
  and `remainder` by constant powers of two: the emitter divides by a shift and a mask there
  (`emitter._pow2_divisors`), where `sdiv`/`srem` by a loaded vector became eight `idiv`s a
  vector (1.8 ms of a 13.8 ms step). Values bit for bit numpy's, rounding towards -inf.
"""
import platform
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import compiler as cc
from examples import mlp as ex_mlp
from runtime.cpu import jit

X86 = platform.machine() in ("x86_64", "AMD64")
# x86 integer division: idiv/div of any width (a vector division is scalarised into these)
DIVISION = re.compile(r"^\s*i?div[bwlq]?\s", re.MULTILINE)


def assembly(prog) -> str:
    tm = jit._init()["tm"]
    return tm.emit_assembly(llvm.parse_assembly(prog._exec.optimized_ir))


def _edge_ints(dtype, shape, seed=0):
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max, shape, dtype=dtype,
                                             endpoint=True)
    edges = np.array(sorted({info.min, info.min + 1, -1 if info.min else 1, 0, 1,
                             info.max - 1, info.max}), dtype)
    x.reshape(-1)[:edges.size * 3] = np.resize(edges, edges.size * 3)
    return x


# (the supported ints; the 8-bit ones are `slow`: LLVM takes 6-10 s over a module with an
# int8 constant operand, even `x + cc.to_tensor(int8 array)` on [37, 12]; int16 0.4 s)
INT_DTYPES = [pytest.param(np.int8, marks=pytest.mark.slow), np.int16, np.int32, np.int64,
              pytest.param(np.uint8, marks=pytest.mark.slow), np.uint64]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=["int8", "int16", "int32", "int64", "uint8",
                                                   "uint64"])
def test_floor_divide_and_remainder_by_constant_powers_of_two(dtype):
    info = np.iinfo(dtype)
    top = int(np.log2(info.max))   # the largest power of two the dtype holds
    div = np.array([1 << (k % (top + 1)) for k in range(12)], dtype)

    def f(x):
        c = cc.to_tensor(div)
        return x // c, x % c, (x // c) % c      # the last: one fused body

    x = _edge_ints(dtype, (37, 12))
    prog = cc.compile(f, backend="cpu").lower(x)
    got = prog(x.copy())
    want = (x // div, x % div, (x // div) % div)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)
    ref = cc.compile(f, backend="numpy")(x.copy())
    for g, r in zip(got, ref):
        assert np.array_equal(g, r)
    if X86:
        found = DIVISION.findall(assembly(prog))
        assert not found, f"integer divisions left: {found[:4]}"


@pytest.mark.parametrize("div", [[1, 2, 3, 4], [2, 0, 4, 8], [-2, 4, 8, 16], [4, 4, 4, 4]],
                         ids=["a three", "a zero", "a negative", "equal"])
def test_other_constant_divisors_keep_numpys_results(div):
    # not all positive powers of two: the general division (a zero gives 0, as numpy's
    # floor_divide does with its warning silenced); the equal ones are a shift too
    d = np.array(div, np.int32)

    def f(x):
        c = cc.to_tensor(d)
        return x // c, x % c

    x = _edge_ints(np.int32, (19, 4), seed=1)
    got = cc.compile(f, backend="cpu")(x.copy())
    with np.errstate(divide="ignore"):
        want = (x // d, x % d)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def test_a_runtime_divisor_beside_a_constant_one_gets_its_own_kernel():
    # the same fused body over the same layouts, once with a constant power-of-two divisor
    # and once with an argument: the kernel emitted for the first must not serve the second
    d = np.array([1, 2, 4, 8], np.int32)

    def f(x, y):
        return (x // cc.to_tensor(d)) % 2, (x // y) % 2

    x = _edge_ints(np.int32, (16, 4), seed=2)
    y = np.array([3, -5, 7, 0], np.int32)
    a, b = cc.compile(f, backend="cpu")(x.copy(), y)
    assert np.array_equal(a, (x // d) % 2)
    with np.errstate(divide="ignore"):
        assert np.array_equal(b, (x // y) % 2)


@pytest.mark.skipif(not X86, reason="x86 assembly")
def test_mlp_step_unpacks_relus_mask_bits_without_dividing():
    args = ex_mlp.example_inputs(batch=128, sizes=(32, 512, 10))  # a 64 KiB mask
    prog = cc.compile(ex_mlp.train_step, backend="cpu").lower(*args)
    inner = {i.op for n in prog.graph.nodes if n.op == "fused" for i in n.attrs["body"].nodes}
    assert "floor_divide" in inner, "relu's mask is no longer kept as bits"
    found = DIVISION.findall(assembly(prog))
    assert not found, f"integer divisions in the mlp step: {found[:4]}"
    ref = cc.compile(ex_mlp.train_step, backend="numpy")
    a = [np.array(v) for v in args]
    b = [np.array(v) for v in args]
    la, lb = prog(*a), ref(*b)
    assert np.allclose(la, lb, rtol=1e-5)
    for p, q in zip(a[2:], b[2:]):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)
