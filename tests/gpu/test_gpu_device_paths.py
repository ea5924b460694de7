"""The gpu backend's device-side paths without a device: how the executable compiles and
loads its module (NVRTC with the backend's options), and what a call copies back to the host,
checked through a fake `cupy` that records what the executable asks of it. The real NVRTC
(cuda-bindings, from pip) stands in for CuPy's, so the image the fake loads is real PTX."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import compiler as cc
from compiler.errors import DeviceError
from runtime.gpu import nvrtc

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(),
                                 reason="NVRTC from pip (cuda-bindings) is not installed")


def _denormal_program():
    """float32 arithmetic, comparisons, min/max, logical ops and a cast: each has a .ftz
    form in PTX when NVRTC flushes denormals."""
    def f(x, y):
        a = (x * y + x / y).sqrt()
        return a, x.minimum(y), x.maximum(y), x.logical_and(y), (x < y), x.cast("float64")
    x = np.full(8, 1.4e-45, np.float32)
    return cc.compile(f, backend="gpu").lower(x, x.copy())


@needs_nvrtc
def test_the_backends_nvrtc_options_keep_denormals_and_round_correctly():
    opts = nvrtc.options("compute_80")
    for o in ("--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--fmad=false"):
        assert o in opts
    prog = _denormal_program()
    ptx = nvrtc.compile_ptx(prog.source)
    assert ".f32" in ptx and ".ftz" not in ptx
    # the test has teeth: with CuPy's -ftz=true appended, the same module flushes
    assert ".ftz" in nvrtc.compile_ptx(prog.source, options=opts + ("-ftz=true",))


class _PipNvrtc:
    """CuPy's NVRTC bindings (`cupy_backends.cuda.libs.nvrtc`: createProgram, compileProgram
    raising on failure, getPTX without its NUL, getCUBIN, getProgramLog, destroyProgram,
    getSupportedArchs) over cuda-bindings' NVRTC; records the options it compiled with."""

    def __init__(self):
        from cuda.bindings import nvrtc as nv
        self.nv, self.calls = nv, []

    def getSupportedArchs(self):
        err, archs = self.nv.nvrtcGetSupportedArchs()
        return tuple(archs)

    def createProgram(self, src, name, headers, include_names):
        err, prog = self.nv.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], [])
        return prog

    def compileProgram(self, prog, options):
        self.calls.append(list(options))
        (err,) = self.nv.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        if err != self.nv.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTCError: {err.name}")

    def getProgramLog(self, prog):
        err, size = self.nv.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        self.nv.nvrtcGetProgramLog(prog, log)
        return log.decode().rstrip("\0")

    def getPTX(self, prog):
        err, size = self.nv.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        self.nv.nvrtcGetPTX(prog, ptx)
        return ptx.rstrip(b"\0")

    def getCUBIN(self, prog):
        err, size = self.nv.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        self.nv.nvrtcGetCUBIN(prog, cubin)
        return cubin

    def destroyProgram(self, prog):
        self.nv.nvrtcDestroyProgram(prog)


class _FakeModule:
    loaded: list = []

    def load(self, image):
        _FakeModule.loaded.append(image)

    def get_function(self, name):
        assert name.encode() in _FakeModule.loaded[-1], name
        return ("kernel", name)


def _fake_cupy(monkeypatch, capability="80"):
    """A `cupy` with one device of `capability`, whose function.Module records the images
    loaded, and CuPy's nvrtc bindings backed by cuda-bindings."""
    fake = types.ModuleType("cupy")
    fake.uint8 = np.uint8
    fake.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
        Device=lambda: types.SimpleNamespace(compute_capability=capability),
        function=types.SimpleNamespace(Module=_FakeModule),
        memory=types.SimpleNamespace(OutOfMemoryError=MemoryError))
    fake.empty = lambda n, dtype: types.SimpleNamespace(data=types.SimpleNamespace(ptr=0))
    nv = _PipNvrtc()
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.nvrtc = nv
    for name, mod in [("cupy", fake), ("cupy_backends", types.ModuleType("cupy_backends")),
                      ("cupy_backends.cuda", types.ModuleType("cupy_backends.cuda")),
                      ("cupy_backends.cuda.libs", libs), ("cupy_backends.cuda.libs.nvrtc", nv)]:
        monkeypatch.setitem(sys.modules, name, mod)
    _FakeModule.loaded = []
    return fake, nv


@needs_nvrtc
@pytest.mark.parametrize("capability", ["80", "81"])   # 81: no cubin target, PTX for 80
def test_the_executable_compiles_its_module_with_the_backends_options(monkeypatch, capability):
    """The device path compiles with `nvrtc.options` (no -ftz=true appended, as
    cupy.RawModule does) and loads what NVRTC made: PTX without a .ftz instruction, or a
    cubin for the device."""
    prog = _denormal_program()
    fake, nv = _fake_cupy(monkeypatch, capability=capability)
    exe = prog._exec
    exe._load(fake)
    arch = nvrtc.device_arch(int(capability), nv.getSupportedArchs())
    assert arch == ("sm_80" if capability == "80" else "compute_80")
    assert nv.calls == [list(nvrtc.options(arch))]
    (image,) = _FakeModule.loaded
    if arch.startswith("compute_"):
        assert image.endswith(b"\0") and b".ftz" not in image
    else:   # a cubin: the same options made it
        assert image[:4] == b"\x7fELF"
    assert set(exe._kernels) == {ln.kernel for ln in exe.launches if ln.library is None}


def test_the_device_architecture_is_the_devices_own_or_the_newest_ptx_below_it():
    assert nvrtc.device_arch(90, (75, 80, 86, 89, 90, 100)) == "sm_90"
    assert nvrtc.device_arch(121, (75, 80, 90, 100, 120)) == "compute_120"
    with pytest.raises(DeviceError, match="compute capability 70"):
        nvrtc.device_arch(70, (75, 80))


@needs_nvrtc
def test_a_module_nvrtc_rejects_is_a_device_error_with_the_log(monkeypatch):
    prog = _denormal_program()
    fake, nv = _fake_cupy(monkeypatch)
    exe = prog._exec
    exe.source = exe.source.replace("const float a0 =", "const float a0_renamed =", 1)
    with pytest.raises(DeviceError, match=r'(?s)NVRTC could not compile.*--ftz=false.*'
                                          r'identifier "a0" is undefined'):
        exe._load(fake)


# -- what a call copies back to the host -----------------------------------------------------
SLACK = 64 * 1024   # array headers (as tests/runtime/test_plan_is_what_runs.py)


class _Dev:
    """A device array: memory from mmap, which tracemalloc doesn't see (as device memory);
    `get` as CuPy's (into `out`, or a fresh host array); records each copy."""

    copies: list = []

    def __init__(self, a):
        self.a = a

    @classmethod
    def holding(cls, values):
        import mmap
        raw = np.frombuffer(mmap.mmap(-1, max(values.nbytes, 1)), np.uint8)
        raw[:values.nbytes] = values.reshape(-1).view(np.uint8)
        return cls(raw)

    def __getitem__(self, key):
        return _Dev(self.a[key])

    def get(self, out=None):
        _Dev.copies.append("into" if out is not None else "fresh")
        if out is None:
            return self.a.copy()
        assert out.shape == self.a.shape and out.dtype == self.a.dtype
        np.copyto(out, self.a)
        return out


def _view(cupy, storage, place):
    item = place.dtype.itemsize
    return _Dev(np.ndarray(place.shape, place.dtype, storage.a, place.offset * item,
                           tuple(s * item for s in place.strides)))


def _copied_back(exe, device, inputs):
    """`exe._copy_back` over `device` (slot -> _Dev), and the host bytes it allocated."""
    import tracemalloc
    _Dev.copies = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        outs, muts = exe._copy_back(None, lambda slot: device[slot], inputs)
        return outs, muts, tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_a_mutated_argument_comes_back_into_the_callers_array_and_nothing_else(monkeypatch):
    """F.relu_(x) on 16 MiB: the device's x is copied straight into the array the call got
    (the driver then copies nothing), and the output, x itself, is a view of it: no host
    allocation, where the plan promises none (it was 2 x 16 MiB, and x copied twice)."""
    from runtime.gpu.executable import GpuExecutable
    import compiler.nn.functional as F
    monkeypatch.setattr(GpuExecutable, "_device_view", staticmethod(_view))
    x = np.linspace(-1.0, 1.0, 4 * 2**20, dtype=np.float32)
    prog = cc.compile(lambda x: F.relu_(x), backend="gpu").lower(x)
    assert prog.plan.output_bytes == 0
    host = x.copy()
    outs, muts, used = _copied_back(prog._exec, {("input", 0): _Dev.holding(np.maximum(x, 0))},
                                    [host])
    assert used <= SLACK, used
    assert _Dev.copies == ["into"]
    assert muts[0] is host and np.array_equal(host, np.maximum(x, 0))
    assert np.shares_memory(outs[0], host) and np.array_equal(outs[0], host)


def test_an_output_comes_back_as_one_fresh_array(monkeypatch):
    from runtime.gpu.executable import GpuExecutable
    import compiler.nn.functional as F
    monkeypatch.setattr(GpuExecutable, "_device_view", staticmethod(_view))
    x = np.linspace(-1.0, 1.0, 4 * 2**20, dtype=np.float32)
    prog = cc.compile(lambda x: F.relu(x), backend="gpu").lower(x)
    slot = prog._exec.places[id(prog.graph.outputs[0])].slot
    host = x.copy()
    outs, muts, used = _copied_back(prog._exec, {slot: _Dev.holding(np.maximum(x, 0))},
                                    [host])
    assert x.nbytes <= used <= x.nbytes + SLACK
    assert _Dev.copies == ["fresh"] and muts == {}
    assert np.array_equal(outs[0], np.maximum(x, 0)) and np.array_equal(host, x)


def test_the_memory_check_counts_the_host_bytes_of_the_outputs(monkeypatch):
    """As the cpu and numpy backends: a call whose outputs the host can't hold is refused
    before anything runs (the device's own check follows)."""
    from runtime import arena
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDeviceCount=lambda: 1, memGetInfo=lambda: (2**40, 2**40)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(arena, "available_memory", lambda: 0)
    n = arena.CHECKED_BYTES // 8
    prog = cc.compile(lambda x: x.expand([2, n]) + 1.0, backend="gpu").lower(np.ones(n))
    with pytest.raises(cc.InsufficientMemoryError, match=r"only 0 B"):
        prog._exec.check_memory()
    small = cc.compile(lambda x: x * 2.0, backend="gpu").lower(np.ones(4))
    small._exec.check_memory()   # under CHECKED_BYTES: the host isn't asked
