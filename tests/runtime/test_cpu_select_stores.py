"""Ops written in place through a select (relu_, maximum_, masked_fill_, tril_, ...) store
every element with a plain store: LLVM's X86 code generator turns a store of
`select(c, k, load p)` back to `p` into a masked store of `k` (`vmaskmovps`; with AVX-512 a
`{%k}`-masked move), which is microcoded on AMD Zen (relu_ of 64 MiB: twice the time of a
plain loop, benchmarks/backend_speed.py). The emitter freezes the stored value
(`runtime.cpu.scalar.store`); the bits must be what they were, signed zeros and NaN payloads
included."""
import platform
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import compiler as cc
import compiler.nn.functional as F
from runtime.cpu import jit

# A masked store: AVX's vmaskmovps/pd, vpmaskmovd/q, SSE2's maskmovdqu, or an AVX-512 move
# to memory under a mask register.
MASKED_STORE = re.compile(r"maskmov|^\s*vmov\w*\s+%[xyz]mm\d+,\s*[^,\s]*\([^)]*\)\s*\{%k",
                          re.MULTILINE)

CASES = {
    "relu_": lambda x: F.relu_(x),
    "leaky_relu_": lambda x: F.leaky_relu_(x, 0.1),
    "maximum_ with zeros": lambda x: cc.maximum_(x, cc.zeros_like(x)),
    "minimum_ with zeros": lambda x: cc.minimum_(x, cc.zeros_like(x)),
    "masked_fill_": lambda x: x.masked_fill_(x < 0.5, 0.0),
    "tril_": lambda x: cc.tril_(x),
    "sign_": lambda x: cc.sign_(x),
}


def special_values(dtype, shape):
    """Random values with -0.0, +0.0, NaNs of both signs (with payloads), infinities and
    denormals spread through, so the vector body and the tail both see them."""
    x = np.random.default_rng(1).standard_normal(int(np.prod(shape))).astype(dtype)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    nans = np.array([0x7FC00001, 0xFFC00002, 0x7F800003] if dtype == np.float32 else
                    [0x7FF8000000000001, 0xFFF8000000000002, 0x7FF0000000000003],
                    bits).view(dtype)
    tiny = np.finfo(dtype).smallest_subnormal
    special = np.concatenate([np.array([-0.0, 0.0, np.inf, -np.inf, tiny, -tiny], dtype), nans])
    x[::7][:special.size * 40] = np.resize(special, x[::7][:special.size * 40].shape)
    x[-3:] = special[:3]
    return x.reshape(shape)


def assembly(prog) -> str:
    tm = jit._init()["tm"]
    return tm.emit_assembly(llvm.parse_assembly(prog._exec.optimized_ir))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="x86's masked store instructions")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", CASES)
def test_in_place_select_stores_every_element_and_keeps_the_bits(name, dtype):
    fn = CASES[name]
    shape = (67, 61)  # 4087 elements: vector body and a scalar tail
    x = special_values(dtype, shape)
    want = x.copy()
    cc.compile(fn, backend="numpy")(want)  # the reference, in place too
    prog = cc.compile(fn, backend="cpu").lower(x.copy())
    got = x.copy()
    out = prog(got)
    # written in place, bit for bit the reference's (-0.0 stays -0.0, NaN payloads kept)
    assert np.shares_memory(np.asarray(out), got)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    assert np.array_equal(got.view(bits), want.view(bits)), name
    asm = assembly(prog)
    assert re.search(r"\bv\w+ps\b|\bv\w+pd\b", asm), "the kernel is not vectorised"
    found = [line.strip() for line in asm.splitlines() if MASKED_STORE.search(line)]
    assert not found, f"{name}: masked stores in the kernel: {found[:4]}"
