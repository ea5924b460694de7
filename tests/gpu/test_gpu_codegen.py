"""The gpu backend without a device: lowering, the CUDA C it generates, the launch list, and
NVRTC compiling every generated module to PTX (`compute_80`), one module per program.

What runs on a device (`@pytest.mark.gpu`) is at the end: those tests skip, saying why, where
CuPy or a CUDA device is missing."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import compiler as cc
from compiler.cli import load_example
from compiler.errors import DeviceError
from examples import seeds
from runtime.gpu import nvrtc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "passes"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(),
                                 reason="NVRTC from pip (cuda-bindings) is not installed")


def _module(prog):
    return prog._exec.module


def _kernels(prog) -> int:
    return prog.source.count("__global__ void")


# -- the seed programs: kernel counts and pointer reuse ---------------------------------------
def test_relu_inplace_is_one_kernel_with_one_pointer_to_the_callers_array():
    x = np.zeros((1, 64, 512, 512), np.float32)
    prog = cc.compile(seeds.relu_inplace, backend="gpu").lower(x)
    (launch,) = _module(prog).launches
    assert _kernels(prog) == 1
    assert launch.args == (("input", 0, 0),)   # reads and writes x through one pointer
    assert "unsigned char* __restrict__ input0)" in prog.source
    assert prog.plan.arena_bytes == 0 and prog.plan.peak_bytes == 64 * 2**20
    assert launch.grid[0] * launch.block[0] <= 65535 * 256  # grid-stride: capped grid


def test_relu_out_of_place_reads_the_input_and_writes_a_fresh_output():
    x = np.zeros((1, 64, 512, 512), np.float32)
    prog = cc.compile(seeds.relu_out_of_place, backend="gpu").lower(x)
    (launch,) = _module(prog).launches
    assert launch.args == (("output", 0, 0), ("input", 0, 0))
    assert "output0, unsigned char* __restrict__ input0" in prog.source


@pytest.mark.parametrize("fn", [seeds.hundred_adds_inplace, seeds.hundred_adds_out_of_place])
def test_hundred_additions_are_101_kernels_the_adds_in_place_on_one_buffer(fn):
    x = np.zeros((256, 256), np.float32)
    prog = cc.compile(fn, backend="gpu", fuse=False).lower(x)
    launches = _module(prog).launches
    # x * 1.0 into the returned buffer, then 100 adds over it; the constant 1.0 is inlined
    assert _kernels(prog) == 101 and len(launches) == 101
    assert launches[0].args == (("output", 0, 0), ("input", 0, 0))
    assert all(ln.args == (("output", 0, 0),) for ln in launches[1:])
    assert "0x1.0000000000000p+0f" in prog.source
    # fused (the default on gpu, passes.fusion): one kernel from x into the returned buffer
    fused = cc.compile(fn, backend="gpu").lower(x)
    assert _kernels(fused) == 1
    (launch,) = _module(fused).launches
    assert launch.args == (("output", 0, 0), ("input", 0, 0))


def test_in_place_adds_on_an_arena_buffer_take_the_same_arena_offset():
    def f(x):
        y = x * 2.0
        for _ in range(3):
            y.add_(1.0)
        return y.sum()
    # (fuse=False: fused, the multiply and the adds are one kernel without an arena buffer)
    prog = cc.compile(f, backend="gpu", fuse=False).lower(np.ones((64, 64), np.float32))
    launches = _module(prog).launches
    adds = [ln for ln in launches if "_add" in ln.kernel]
    assert len(adds) == 3
    (arena_arg,) = adds[0].args
    assert arena_arg[0] == "arena" and all(ln.args == (arena_arg,) for ln in adds)
    assert arena_arg[1] % 256 == 0  # the gpu plan aligns buffers to 256 bytes


def test_lower_needs_no_device_and_a_call_says_why_it_cant_run():
    fn = cc.compile(lambda x: (x + 1.0).exp(), backend="gpu")
    x = np.ones(4, np.float32)
    prog = fn.lower(x)
    assert "__global__" in prog.source and prog.plan is not None
    try:
        import cupy  # noqa: F401
        has_cupy = True
    except ImportError:
        has_cupy = False
    if has_cupy and _device_count() > 0:
        pytest.skip("a device is present: the call runs")
    with pytest.raises(DeviceError) as e:
        fn(x)
    assert ("CuPy" in str(e.value)) != has_cupy or "device" in str(e.value)
    assert isinstance(e.value, cc.CompilerError)
    assert "test_gpu_codegen.py" in str(e.value)  # names the caller's line


def _device_count() -> int:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


HAS_DEVICE = _device_count() > 0
needs_device = pytest.mark.skipif(not HAS_DEVICE, reason="no CUDA device (or no CuPy) here")


def test_demo_with_the_gpu_backend_gives_a_clear_error_without_a_device():
    if HAS_DEVICE:
        pytest.skip("a device is present: the demo runs")
    r = subprocess.run([sys.executable, "-m", "compiler", "demo", "--backend", "gpu"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2
    assert "error: demo --backend gpu: the gpu backend" in r.stderr
    assert "Traceback" not in r.stderr


def test_launch_list_covers_every_node_that_computes():
    def f(x, w, labels):
        h = (x @ w).relu()
        return cc.nn.functional.cross_entropy(h, labels), h.argmax(axis=1), h.cumsum(axis=0)
    x = np.ones((8, 4), np.float32)
    w = np.ones((4, 5), np.float32)
    labels = np.zeros(8, np.int64)
    prog = cc.compile(f, backend="gpu").lower(x, w, labels)
    launches = _module(prog).launches
    from compiler.ops import REGISTRY, VIEW
    computing = {t for t, n in enumerate(prog.graph.nodes)
                 if REGISTRY[n.op].kind != VIEW and n.out.size and n.op != "full"}
    assert computing <= {ln.node for ln in launches}
    gemm = [ln for ln in launches if ln.library == "cublas"]
    assert len(gemm) == 1 and gemm[0].dtype == "float32"
    # row-major x @ w as cuBLAS's column-major w^T x^T: (N, N, n=5, m=8, k=4)
    assert gemm[0].args[:5] == ("N", "N", 5, 8, 4)
    assert "__shfl_down_sync" in prog.source and "__syncthreads" in prog.source


# -- NVRTC ---------------------------------------------------------------------------------
@needs_nvrtc
def test_a_broken_kernel_fails_with_the_nvrtc_log():
    prog = cc.compile(lambda x: x.exp() * 2.0, backend="gpu").lower(np.ones(4, np.float32))
    nvrtc.compile_ptx(prog.source)  # the real one compiles
    broken = prog.source.replace("const float a0 =", "const float a0_renamed =", 1)
    with pytest.raises(DeviceError) as e:
        nvrtc.compile_ptx(broken, "broken.cu")
    msg = str(e.value)
    assert "NVRTC could not compile" in msg and "compute_80" in msg
    assert 'broken.cu(' in msg and 'identifier "a0" is undefined' in msg


@needs_nvrtc
@pytest.mark.parametrize("title", [s[0] for s in seeds.SEEDS])
def test_seed_programs_compile_to_ptx(title):
    (_, fn, args, _) = next(s for s in seeds.SEEDS if s[0] == title)
    prog = cc.compile(fn, backend="gpu").lower(*args)
    ptx = nvrtc.compile_ptx(prog.source)
    for ln in _module(prog).launches:
        if ln.library is None:
            assert f".entry {ln.kernel}(" in ptx


@needs_nvrtc
@pytest.mark.parametrize("name", ["mlp", "transformer_block", "cnn", "gpt"])
def test_example_training_steps_compile_to_ptx(name):
    module = load_example(name)
    prog = module.build_program(backend="gpu")
    ptx = nvrtc.compile_ptx(prog.source, f"{name}.cu")
    kernels = {ln.kernel for ln in _module(prog).launches if ln.library is None}
    assert kernels and all(f".entry {k}(" in ptx for k in kernels)
    # the plan's arena, and past it the status word when a kernel checks indices, then the
    # split reductions' partials (emitter `_reduce`)
    status = _module(prog).status_offset
    base = prog.plan.arena_bytes if status is None else status + 256
    scratch = _module(prog).scratch_bytes
    assert _module(prog).arena_bytes == (base if not scratch else
                                         -(-base // 256) * 256 + -(-scratch // 256) * 256)


def _one_sample_per_op(samples=None, key=lambda n: (n.op, n.out.dtype.name)):
    """For each registry op (and each output dtype it is sampled with: `key`), the first opdb
    sample whose traced graph contains it: every op's kernels, compiled. (The float samples'
    search is shared with test_harness_programs: `picks.py`.)"""
    from tests.gpu.picks import first_per_key
    name = None
    if samples is None:
        from opdb.samples import SAMPLES as samples
        name = "op-and-dtype"
    seen, picked = first_per_key(samples, key, name)
    return seen, [(sample.id, prog) for sample, prog in picked]


@needs_nvrtc
def test_every_registry_op_in_the_op_samples_compiles_to_ptx():
    from compiler.ops import REGISTRY
    seen, picked = _one_sample_per_op()
    # the samples are forward calls: the gradient-only ops come from the cnn's and the
    # transformer's training steps (conv and pool gradients; gelu_grad)
    for name in ("cnn", "transformer_block"):
        step = load_example(name).build_program(backend="gpu")
        seen |= {(n.op, n.out.dtype.name) for n in step.graph.nodes}
        picked.append((name, step))
    from compiler.ops import COMM_OPS  # data-parallel only, and not on the gpu yet (issue 12)
    missing = set(REGISTRY) - {op for op, _ in seen} - COMM_OPS
    assert not missing, f"no opdb sample lowers {sorted(missing)} for the gpu"
    _compile_together(picked, "opdb.cu")


def _compile_together(picked, name):
    """One module of every picked program's kernels, renamed apart: one NVRTC call."""
    from runtime.gpu.scalar import HALF_PRELUDE, PRELUDE
    from runtime.gpu.emitter import BLOCK_PRELUDE
    parts = [PRELUDE, HALF_PRELUDE, BLOCK_PRELUDE]
    for k, (_, prog) in enumerate(picked):
        body = prog.source.split(BLOCK_PRELUDE, 1)[1]
        parts.append(body.replace('void k', f'void p{k}_k').replace("const_", f"p{k}_const_"))
    ptx = nvrtc.compile_ptx("\n".join(parts), name)
    assert ptx.count(".entry ") == sum(_kernels(p) for _, p in picked)


@needs_nvrtc
@pytest.mark.parametrize("variants", ["INT_SAMPLES", "HALF_SAMPLES"])
def test_every_op_in_narrow_and_16_bit_dtypes_compiles_to_ptx(variants):
    """Each op with each combination of input and output dtypes its int8/uint8/int16 (or
    float16/bfloat16) samples give it: the templates must instantiate for those types too (a
    block reduction of int8 once shuffled as int and stopped NVRTC on the device only)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "opdb"))
    import narrow
    samples = getattr(narrow, variants)
    seen, picked = _one_sample_per_op(samples, key=lambda n: (
        n.op, n.out.dtype.name, tuple(i.dtype.name for i in n.inputs)))
    assert len(picked) > 20
    _compile_together(picked, f"{variants.lower()}.cu")


# -- random programs -------------------------------------------------------------------------
def _random_programs():
    from program_gen import programs
    return programs(errors=False)


@needs_nvrtc
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(_random_programs())
def test_random_programs_generate_and_compile(prog):
    fn = cc.compile(prog.build(), backend="gpu")
    lowered = fn.lower(*prog.arrays())
    nvrtc.compile_ptx(lowered.source, "random_program.cu")
    assert all(ln.grid[0] >= 1 and ln.block[0] % 32 == 0 for ln in _module(lowered).launches
               if ln.library is None)


# -- on a device ---------------------------------------------------------------------------
@pytest.mark.gpu
@needs_device
@pytest.mark.parametrize("name", ["mlp", "transformer_block", "cnn"])
def test_examples_on_the_device_match_the_numpy_backend(name):
    module = load_example(name)
    args = module.example_inputs()
    want = module.build_program(backend="numpy")(*[a.copy() if isinstance(a, np.ndarray)
                                                   else a for a in args])
    got = module.build_program(backend="gpu")(*[a.copy() if isinstance(a, np.ndarray)
                                               else a for a in args])
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@needs_device
@pytest.mark.parametrize("title", [s[0] for s in seeds.SEEDS])
def test_seed_programs_on_the_device(title):
    (_, fn, args, check) = next(s for s in seeds.SEEDS if s[0] == title)
    call = tuple(a.copy() for a in args)
    out = cc.compile(fn, backend="gpu")(*call)
    if check is not None:
        assert check(out, *args)


def test_cupy_without_a_device_raises_a_device_error_not_a_cupy_traceback(monkeypatch):
    """CuPy imports without a GPU and fails at the first device call
    (`cudaErrorInsufficientDriver`): the call says so as a `DeviceError`."""
    import types

    class CUDARuntimeError(RuntimeError):
        pass

    def no_device():
        raise CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is "
                               "insufficient for CUDA runtime version")
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_device))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    fn = cc.compile(lambda x: x * 3.0, backend="gpu")
    x = np.ones(3, np.float32)
    with pytest.raises(DeviceError, match="no usable CUDA device: cudaErrorInsufficientDriver"):
        fn(x)
    np.testing.assert_array_equal(x, np.ones(3, np.float32))
