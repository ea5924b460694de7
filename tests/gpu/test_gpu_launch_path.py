"""The gpu executable's launch path without a device: the launch steps it builds once (kernel
arguments, cuBLAS calls over fixed argument and output buffers), cuBLAS's C functions through
ctypes, the CUDA graph it captures at the second call and replays after, and its fallback to
eager launching when a capture fails.

The device is a stand-in (`_Device`): CuPy's arrays are host memory, a kernel launch is
recorded (`k_status_clear` and a data-checking kernel also write the status word, so a
replayed graph's data check is seen), and cuBLAS is `fake_cublas.c`, compiled here: cuBLAS's C
signatures, GEMMs computed on host memory, and a stream capture modelled as CUDA does it
(captured work is recorded, not run, and runs at each replay)."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import compiler as cc
from compiler.errors import DataError, DeviceError
from runtime import backends
from runtime.gpu import executable as gx

HANDLE = 0x5EED000
BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
HERE = Path(__file__).resolve().parent


# -- the fake cuBLAS library -----------------------------------------------------------------------
class _Call(ctypes.Structure):
    """fake_cublas.c's record of one GEMM, as the C function received its arguments."""
    _fields_ = [("kind", ctypes.c_int), ("handle", ctypes.c_longlong),
                ("ta", ctypes.c_int), ("tb", ctypes.c_int), ("m", ctypes.c_int),
                ("n", ctypes.c_int), ("k", ctypes.c_int), ("alpha", ctypes.c_double),
                ("beta", ctypes.c_double), ("A", ctypes.c_void_p), ("B", ctypes.c_void_p),
                ("C", ctypes.c_void_p), ("atype", ctypes.c_int), ("btype", ctypes.c_int),
                ("ctype", ctypes.c_int), ("lda", ctypes.c_int), ("ldb", ctypes.c_int),
                ("ldc", ctypes.c_int), ("compute", ctypes.c_int), ("algo", ctypes.c_int),
                ("stream", ctypes.c_longlong)]

    def key(self):
        return tuple(getattr(self, f) or 0 for f, _ in self._fields_[:-1])


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    cc_ = shutil.which("gcc") or shutil.which("cc")
    if cc_ is None:
        pytest.skip("no C compiler for the fake cuBLAS library")
    out = tmp_path_factory.mktemp("fake_cublas") / "libfake_cublas.so"
    subprocess.run([cc_, "-O1", "-shared", "-fPIC", "-o", str(out),
                    str(HERE / "fake_cublas.c")], check=True)
    lib = ctypes.CDLL(str(out))
    lib.fake_reset.argtypes = [ctypes.c_longlong]
    lib.fake_begin_capture.argtypes = [ctypes.c_void_p]
    lib.fake_call.argtypes = [ctypes.c_int, ctypes.POINTER(_Call)]
    for name in ("fake_workspace", "fake_stream"):
        getattr(lib, name).restype = ctypes.c_void_p
    lib.fake_workspace_bytes.restype = ctypes.c_size_t
    lib.fake_call_size.restype = ctypes.c_size_t
    assert lib.fake_call_size() == ctypes.sizeof(_Call)
    return lib


def _lib_calls(lib, start=0):
    out = []
    for i in range(start, lib.fake_ncalls()):
        c = _Call()
        lib.fake_call(i, ctypes.byref(c))
        out.append(c)
    return out


# -- the fake device -------------------------------------------------------------------------------
class _Ptr:
    def __init__(self, ptr):
        self.ptr = ptr

    def __add__(self, n):
        return _Ptr(self.ptr + n)


class _DevArray:
    """Host memory standing in for a CuPy array (what GpuExecutable touches of one)."""

    def __init__(self, a):
        self.a = a
        self.data = _Ptr(a.ctypes.data)
        self.size, self.nbytes = a.size, a.nbytes

    def __getitem__(self, index):
        return _DevArray(self.a[index])

    def set(self, a):
        assert a.dtype == np.uint8 and a.shape == self.a.shape
        self.a[...] = a

    def get(self, out=None):
        if out is None:
            return self.a.copy()
        out[...] = self.a
        return out


class _Stream:
    def __init__(self, dev, ptr):
        self.dev, self.ptr, self.recorded = dev, ptr, []

    def __enter__(self):
        self.dev.current.append(self)
        return self

    def __exit__(self, *exc):
        self.dev.current.pop()

    def synchronize(self):
        pass

    def begin_capture(self):
        self.dev.begun += 1
        if self.dev.refuse == "begin":
            raise RuntimeError("cudaErrorStreamCaptureUnsupported")
        self.dev.capturing = self
        if self.dev.lib is not None:
            self.dev.lib.fake_begin_capture(self.ptr)

    def end_capture(self):
        self.dev.capturing = None
        if self.dev.lib is not None:
            self.dev.lib.fake_end_capture()
        if self.dev.refuse == "end":
            raise RuntimeError("cudaErrorStreamCaptureInvalidated")
        self.dev.captures += 1
        return _Graph(self.dev, self.recorded)


class _Graph:
    def __init__(self, dev, recorded):
        self.dev, self.recorded = dev, recorded

    def launch(self):
        self.dev.replays += 1
        for rec in self.recorded:
            self.dev.execute(rec)
        if self.dev.lib is not None:
            self.dev.lib.fake_replay()


class _Kernel:
    def __init__(self, dev, name):
        self.dev, self.name = dev, name

    def __call__(self, grid, block, params, shared_mem=0):
        rec = (self.name, grid, block, params, shared_mem)
        stream = self.dev.current[-1]
        if stream is self.dev.capturing:
            stream.recorded.append(rec)
        else:
            self.dev.execute(rec)


class _Wrappers:
    """CuPy's cuBLAS wrappers (`cupy_backends.cuda.libs.cublas`): refuse a capture, as CuPy's
    do; record their calls in the device's log. (No __file__: not a compiled extension.)"""
    CUBLAS_POINTER_MODE_HOST = 0

    def __init__(self, dev):
        self.dev = dev

    def _gemm(self, name, args):
        if self.dev.capturing is not None:
            raise NotImplementedError("calling cuBLAS API during stream capture is currently "
                                      "unsupported")
        self.dev.log.append(("wrapper " + name, args))

    def sgemm(self, *args):
        self._gemm("sgemm", args)

    def dgemm(self, *args):
        self._gemm("dgemm", args)

    def gemmEx(self, *args):
        self._gemm("gemmEx", args)

    def setStream(self, handle, stream):
        self.dev.log.append(("setStream", handle, stream))

    def setPointerMode(self, handle, mode):
        self.dev.log.append(("setPointerMode", handle, mode))

    def getVersion(self, handle):
        return 120900


class _Device:
    """A `cupy` (and `cupy_backends`) over host memory; `log` holds the launches run, in
    order; `refuse` makes a capture fail at "begin" or "end"."""

    def __init__(self, monkeypatch, lib=None, refuse=None, capability="90"):
        self.lib, self.refuse = lib, refuse
        self.log, self.allocs = [], 0
        self.capturing, self.begun, self.captures, self.replays = None, 0, 0, 0
        self.report = 0            # what a data-checking kernel writes into the status word
        self.streams = 0
        self.current = [_Stream(self, 0)]   # CuPy's null stream
        if lib is not None:
            lib.fake_reset(HANDLE)
            monkeypatch.setattr(gx, "cublas_c",
                                lambda cupy, wrappers, handle: (gx.CublasC(lib), None))
        else:
            monkeypatch.setattr(gx, "cublas_c",
                                lambda cupy, wrappers, handle: (None, "no library here"))
        dev = self

        class Module:
            def load(self, image):
                pass

            def get_function(self, name):
                return _Kernel(dev, name)

        def empty(n, dtype):
            dev.allocs += 1
            raw = np.zeros(n + 256, np.uint8)
            start = (-raw.ctypes.data) % 256
            return _DevArray(raw[start:start + n])

        def ndarray(shape, dtype, memptr, strides=None):
            dtype = np.dtype(dtype)
            span = 1 + sum((n - 1) * s for n, s in zip(shape, strides or ())) \
                if all(shape) else 1
            buf = (ctypes.c_uint8 * max(span + dtype.itemsize, 1)).from_address(memptr.ptr)
            return _DevArray(np.ndarray(shape, dtype, buffer=buf, strides=strides))

        def stream(non_blocking=False):
            assert non_blocking, "a capture needs a non-blocking stream"
            dev.streams += 1
            return _Stream(dev, 0x1000 * dev.streams)

        cupy = types.ModuleType("cupy")
        cupy.uint8, cupy.empty, cupy.ndarray = np.uint8, empty, ndarray
        cupy.cuda = types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDeviceCount=lambda: 1,
                                          memGetInfo=lambda: (1 << 40, 1 << 40)),
            memory=types.SimpleNamespace(OutOfMemoryError=type("OutOfMemoryError",
                                                               (Exception,), {})),
            get_current_stream=lambda: dev.current[-1],
            Stream=stream,
            Device=lambda: types.SimpleNamespace(compute_capability=capability),
            device=types.SimpleNamespace(get_cublas_handle=lambda: HANDLE),
            function=types.SimpleNamespace(Module=Module))
        self.wrappers = _Wrappers(self)
        libs = types.ModuleType("cupy_backends.cuda.libs")
        libs.cublas = self.wrappers
        libs.nvrtc = types.ModuleType("cupy_backends.cuda.libs.nvrtc")
        monkeypatch.setattr("runtime.gpu.nvrtc.device_image", lambda *args, **kw: b"")
        pkg, cuda = types.ModuleType("cupy_backends"), types.ModuleType("cupy_backends.cuda")
        pkg.cuda, cuda.libs = cuda, libs
        for name, module in [("cupy", cupy), ("cupy_backends", pkg),
                             ("cupy_backends.cuda", cuda), ("cupy_backends.cuda.libs", libs),
                             ("cupy_backends.cuda.libs.cublas", self.wrappers),
                             ("cupy_backends.cuda.libs.nvrtc", libs.nvrtc)]:
            monkeypatch.setitem(sys.modules, name, module)

    def execute(self, rec):
        name, params = rec[0], rec[3]
        self.log.append(rec)
        if name == "k_status_clear":
            ctypes.c_uint64.from_address(int(params[0])).value = 0
        elif self.report and self.status is not None and int(params[-1]) == self.status:
            ctypes.c_uint64.from_address(self.status).value = self.report

    status = None


# -- what a call passed before the launch steps were prebuilt (the per-call code, as it was) -------
_TYPES = {"long long": np.int64, "int": np.int32, "float": np.float32, "double": np.float64,
          "unsigned long long": np.uint64}


def _old_pointer(exe, arg, inputs, outputs):
    if arg[0] == "arena":
        return exe._arena.data.ptr + arg[1]
    base = inputs[arg[1]] if arg[0] == "input" else outputs[arg[1]]
    return base.data.ptr + arg[2]


def _old_kernel_calls(exe):
    """Each kernel launch as the per-call loop made it, over the executable's bound buffers."""
    _, dev_in, outputs, _ = exe._bound
    calls = []
    for ln in exe.module.launches:
        if ln.library is not None:
            continue
        args = tuple(np.dtype(_TYPES[a[1]]).type(a[2]) if a[0] == "scalar" else
                     np.uint64(_old_pointer(exe, a, dev_in, outputs)) for a in ln.args)
        calls.append((ln.kernel, ln.grid, ln.block, args, ln.shared_bytes))
    return calls


def _old_gemm_calls(exe):
    """Each GEMM as the per-call loop called cuBLAS: (kind, handle, ops, sizes, alpha, beta,
    pointers, types, leading dimensions, compute type, algorithm), as `_Call.key`."""
    _, dev_in, outputs, _ = exe._bound
    calls = []
    for ln in exe.module.launches:
        if ln.library != "cublas":
            continue
        ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc = ln.args
        ptrs = [_old_pointer(exe, p, dev_in, outputs) for p in (a, b, c)]
        op = {"N": 0, "T": 1}
        if ln.dtype in ("float16", "bfloat16"):
            t = 2 if ln.dtype == "float16" else 14
            calls.append((3, HANDLE, op[ta], op[tb], m, n, k, float(np.float32(alpha[2])),
                          float(np.float32(beta[2])), *ptrs, t, t, t, lda, ldb, ldc, 68, -1))
        else:
            dt = np.dtype(ln.dtype)
            calls.append((1 if dt == np.float32 else 2, HANDLE, op[ta], op[tb], m, n, k,
                          float(dt.type(alpha[2])), float(dt.type(beta[2])), *ptrs, 0, 0, 0,
                          lda, ldb, ldc, 0, 0))
    return calls


def _bits(calls):
    """Kernel launches with each parameter as (its numpy type, its bytes): bit for bit."""
    return [(name, grid, block, tuple((type(p), np.asarray(p).tobytes()) for p in params),
             shared) for name, grid, block, params, shared in calls]


# -- programs --------------------------------------------------------------------------------------
def _transformer():
    sys.path.insert(0, str(HERE.parent.parent / "benchmarks"))
    import backend_speed as bs
    args = bs.inputs("transformer", True)
    return cc.compile(bs.OURS["transformer"], backend="gpu").lower(*args), args


def _half_gemm_with_check(dtype):
    def f(a, b, i):
        c = a @ b
        return c.take_along_axis(i, 1) * 2.0
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (4, 8)).astype(dtype)
    b = rng.integers(-3, 4, (8, 3)).astype(dtype)
    i = np.array([[0, 2], [1, 1], [2, 0], [0, 0]], np.int64)
    return cc.compile(f, backend="gpu").lower(a, b, i), (a, b, i)


PROGRAMS = {"transformer": _transformer,
            "bfloat16 gemm, data check": lambda: _half_gemm_with_check(BF16),
            "float16 gemm, data check": lambda: _half_gemm_with_check(F16)}


@pytest.mark.parametrize("which", list(PROGRAMS))
def test_the_prebuilt_launches_are_what_each_call_computed_before(monkeypatch, fake_lib,
                                                                  which):
    """Every call (eager, captured and replayed, replayed) launches exactly the kernels, with
    exactly the parameters (types and bits), and calls exactly the GEMMs the per-call code
    did; the capture records them on its own stream with a workspace the program owns."""
    prog, args = PROGRAMS[which]()
    dev = _Device(monkeypatch, fake_lib)
    exe = prog._exec
    assert exe.use_graph and any(ln.library == "cublas" for ln in exe.launches)
    for call in range(3):
        start, gemms = len(dev.log), fake_lib.fake_ncalls()
        prog(*[a.copy() for a in args])
        assert _bits(dev.log[start:]) == _bits(_old_kernel_calls(exe)), call
        made = _lib_calls(fake_lib, gemms)
        if call < 2:   # call 1 runs them, call 2 captures them; call 3 calls nothing
            assert [c.key() for c in made] == _old_gemm_calls(exe)
            assert {c.stream for c in made} == ({0} if call == 0 else {0x1000})
        else:
            assert made == []
    assert exe.graph_refused is None and (dev.begun, dev.captures, dev.replays) == (1, 1, 2)
    assert fake_lib.fake_replays() == 2
    assert exe._workspace.nbytes == 32 << 20   # compute capability 9.0: 32 MiB
    # after the capture the handle is back on the call's stream and cuBLAS's own workspace
    assert fake_lib.fake_stream() is None and fake_lib.fake_workspace() is None


GEMMS = [(np.float32, (5, 7), (7, 3)), (np.float64, (2, 9), (9, 4)), (BF16, (3, 8), (8, 6)),
         (F16, (4, 4), (4, 5))]


@pytest.mark.parametrize("dtype,sa,sb", GEMMS, ids=lambda v: str(v))
def test_a_gemm_runs_through_the_fixed_buffers_and_the_replayed_graph(monkeypatch, fake_lib,
                                                                      dtype, sa, sb):
    """a @ b on new values at each call: the values are copied into the fixed argument
    buffers that the prebuilt GEMM (eager at call 1, the captured graph after) reads, and the
    output comes back right each time (small integers: exact in every type)."""
    dev = _Device(monkeypatch, fake_lib)
    rng = np.random.default_rng(1)
    prog = cc.compile(lambda a, b: a @ b, backend="gpu").lower(
        np.zeros(sa, dtype), np.zeros(sb, dtype))
    for call in range(4):
        a = rng.integers(-4, 5, sa).astype(dtype)
        b = rng.integers(-4, 5, sb).astype(dtype)
        out = prog(a, b)
        want = (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)
        assert out.dtype == want.dtype and np.array_equal(out, want), call
        if call == 0:
            allocs = dev.allocs
    assert dev.allocs == allocs + 1   # the capture's workspace, nothing per call
    assert (dev.captures, dev.replays, fake_lib.fake_replays()) == (1, 3, 3)


def test_cublas_c_passes_the_c_signatures_arguments(fake_lib):
    """The ctypes marshalling of the three GEMMs and the set-up calls: 64-bit pointers and
    handles whole, enums as ints (the algorithm -1), alpha and beta through host pointers."""
    fake_lib.fake_reset(HANDLE)
    c = gx.CublasC(fake_lib)
    fake_lib.fake_fail_with(13)   # record only: the pointers below are not memory
    al, be = np.array(1.5, np.float32), np.array(-0.25, np.float32)
    ad, bd = np.array(2.0 ** 60, np.float64), np.array(0.5, np.float64)
    A, B, C = 0x7F12_3456_7800, 0x7F12_3456_7900 + (1 << 44), 0x7FFF_FFFF_FF00
    assert c.sgemm(HANDLE, 1, 0, 3, 4, 5, al.ctypes.data, A, 5, B, 5, be.ctypes.data, C,
                   3) == 13
    assert c.dgemm(HANDLE, 0, 1, 7, 1, 2, ad.ctypes.data, A, 7, B, 1, bd.ctypes.data, C,
                   7) == 13
    assert c.gemm_ex(HANDLE, 1, 1, 2, 3, 4, al.ctypes.data, A, 14, 4, B, 14, 3,
                     be.ctypes.data, C, 14, 2, 68, -1) == 13
    s, d, e = _lib_calls(fake_lib)
    assert s.key() == (1, HANDLE, 1, 0, 3, 4, 5, 1.5, -0.25, A, B, C, 0, 0, 0, 5, 5, 3, 0, 0)
    assert d.key() == (2, HANDLE, 0, 1, 7, 1, 2, 2.0 ** 60, 0.5, A, B, C, 0, 0, 0, 7, 1, 7, 0,
                       0)
    assert e.key() == (3, HANDLE, 1, 1, 2, 3, 4, 1.5, -0.25, A, B, C, 14, 14, 14, 4, 3, 2, 68,
                       -1)
    assert c.set_stream(HANDLE, 0x7F00_0000_1000) == 0 and \
        fake_lib.fake_stream() == 0x7F00_0000_1000
    assert c.set_workspace(HANDLE, 0x7F00_0001_0000, 5 << 30) == 0
    assert fake_lib.fake_workspace() == 0x7F00_0001_0000
    assert fake_lib.fake_workspace_bytes() == 5 << 30
    assert c.set_pointer_mode(HANDLE + 1, 0) == 1   # another handle: NOT_INITIALIZED
    assert c.version(HANDLE) == 120900


def test_a_failing_gemm_is_a_device_error_naming_the_line(monkeypatch, fake_lib):
    dev = _Device(monkeypatch, fake_lib)
    x = np.ones((3, 4), np.float32)
    prog = cc.compile(lambda a, b: (a @ b) + 1.0, backend="gpu").lower(x, x.T.copy())
    fake_lib.fake_fail_with(13)
    with pytest.raises(DeviceError, match=r"cublasSgemm_v2 for the float32 GEMM of .* "
                                          r"failed: status 13 \(CUBLAS_STATUS_EXECUTION_FAILED"
                                          r"\) \(at .*test_gpu_launch_path.py:\d+"):
        prog(x, x.T.copy())
    assert dev.captures == 0


def _check_values(prog, args, want, calls=4):
    for call in range(calls):
        got = prog(*[a.copy() for a in args])
        assert np.array_equal(got, want), call


@pytest.mark.parametrize("refuse", ["begin", "end"])
def test_a_refused_capture_leaves_the_program_eager_for_good(monkeypatch, fake_lib, refuse):
    """A capture that raises (when it begins, or when it ends) is tried once: the program
    then launches eagerly at every call, the same launches, with the same results, and says
    why; cuBLAS's handle is left on the call's stream and its own workspace."""
    dev = _Device(monkeypatch, fake_lib, refuse=refuse)
    rng = np.random.default_rng(2)
    a, b = rng.integers(-4, 5, (6, 5)).astype(np.float32), \
        rng.integers(-4, 5, (5, 2)).astype(np.float32)
    prog = cc.compile(lambda a, b: a @ b, backend="gpu").lower(a, b)
    _check_values(prog, (a, b), a @ b)
    exe = prog._exec
    assert exe.graph_refused == "RuntimeError: " + ("cudaErrorStreamCaptureUnsupported"
                                                    if refuse == "begin" else
                                                    "cudaErrorStreamCaptureInvalidated")
    assert (dev.begun, dev.captures, dev.replays) == (1, 0, 0)
    eager = [c for c in _lib_calls(fake_lib) if c.stream == 0]
    assert len(eager) == 4 and fake_lib.fake_replays() == 0
    assert fake_lib.fake_stream() is None and fake_lib.fake_workspace() is None
    # a program with kernels: each eager call launches what the per-call code did
    prog, args = _half_gemm_with_check(BF16)
    start = len(dev.log)
    for _ in range(3):
        prog(*args)
    assert _bits(dev.log[start:]) == _bits(_old_kernel_calls(prog._exec) * 3)
    assert prog._exec.graph_refused is not None and dev.captures == 0


def test_without_cublas_c_the_capture_is_refused_before_it_begins(monkeypatch):
    """Where cuBLAS's C library isn't found, GEMMs go through CuPy's wrappers, which refuse a
    capture: none is tried, the reason is kept, and every call runs eagerly."""
    dev = _Device(monkeypatch, lib=None)
    prog, args = _half_gemm_with_check(F16)
    for _ in range(3):
        prog(*args)
    exe = prog._exec
    assert "CuPy's cuBLAS wrappers" in exe.graph_refused and "no library here" in \
        exe.graph_refused
    assert dev.begun == 0 and dev.captures == 0
    (old,) = _old_gemm_calls(exe)
    gemms = [r for r in dev.log if r[0] == "wrapper gemmEx"]
    assert len(gemms) == 3
    for _, got in gemms:   # (handle, ops, sizes, alpha*, A, type, lda, B, .., beta*, C, ..)
        alpha, beta = (float(np.frombuffer((ctypes.c_char * 4).from_address(got[i]),
                                           np.float32)[0]) for i in (6, 13))
        assert (*got[:6], alpha, beta, got[7], got[10], got[14], got[8], got[11], got[15],
                got[9], got[12], got[16], got[17], got[18]) == old[1:]
    # the handle was put on the call's stream, in host pointer mode, before each call's loop
    assert dev.log.count(("setStream", HANDLE, 0)) == 3
    assert dev.log.count(("setPointerMode", HANDLE, 0)) == 3


def test_the_status_word_is_read_at_every_call_the_replayed_ones_too(monkeypatch, fake_lib):
    """A data-checking kernel's report, written by the replayed graph, raises the numpy
    backend's DataError naming the user's line; the caller's arrays are untouched."""
    dev = _Device(monkeypatch, fake_lib)
    prog, (a, b, i) = _half_gemm_with_check(BF16)
    exe = prog._exec
    for _ in range(3):
        prog(a, b, i)
    assert dev.replays == 2
    dev.status = exe._arena.data.ptr + exe.module.status_offset
    (checked,) = [ln for ln in exe.launches if ln.kernel.endswith("take_along_axis")]
    dev.report = checked.node + 1
    bad = np.full_like(i, 7)
    with pytest.raises(DataError, match=r"index 7 .* out of range .*test_gpu_launch_path"):
        prog(a, b, bad)
    assert dev.replays == 3 and np.all(bad == 7)
    dev.report = 0
    prog(a, b, i)   # the status word cleared again by the replayed graph
    assert dev.replays == 4


def test_release_drops_the_graph_and_the_buffers(monkeypatch, fake_lib):
    dev = _Device(monkeypatch, fake_lib)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    prog = cc.compile(lambda a, b: a @ b, backend="gpu").lower(x, x.T.copy())
    exe = prog._exec
    for _ in range(3):
        prog(x, x.T.copy())
    assert exe._cuda_graph is not None and exe._bound is not None
    exe.release()
    assert (exe._cuda_graph, exe._bound, exe._steps, exe._workspace, exe._arena) == \
        (None,) * 5
    assert exe.calls == 0 and exe.idle_arena_bytes() == 0
    allocs = dev.allocs
    assert np.array_equal(prog(x, x.T.copy()), x @ x.T)   # eager again, on new buffers
    assert dev.allocs == allocs + 1 + 2 + 1 and dev.replays == 2
    assert np.array_equal(prog(x, x.T.copy()), x @ x.T)   # captured again
    assert dev.captures == 2 and dev.replays == 3


@pytest.mark.parametrize("value,graph", [(None, True), ("1", True), ("0", False),
                                         ("off", False)])
def test_cuda_graphs_are_on_unless_compiler_cuda_graph_is_0(monkeypatch, value, graph):
    if value is None:
        monkeypatch.delenv("COMPILER_CUDA_GRAPH", raising=False)
    else:
        monkeypatch.setenv("COMPILER_CUDA_GRAPH", value)
    prog = cc.compile(lambda x: x * 2.0, backend="gpu").lower(np.ones(3, np.float32))
    assert prog._exec.use_graph is graph
    assert backends.GPU is backends.backend_named("gpu")


def test_eager_launching_when_graphs_are_off(monkeypatch, fake_lib):
    monkeypatch.setenv("COMPILER_CUDA_GRAPH", "0")
    dev = _Device(monkeypatch, fake_lib)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    prog = cc.compile(lambda a, b: a @ b, backend="gpu").lower(x, x.T.copy())
    _check_values(prog, (x, x.T.copy()), x @ x.T)
    assert dev.begun == 0 and prog._exec.graph_refused is None
    assert len(_lib_calls(fake_lib)) == 4


def test_the_loaded_cublas_libraries_are_read_from_the_process_maps(tmp_path):
    lib = tmp_path / "libcublas.so.12.9.1"
    lib.write_bytes(b"")
    link = tmp_path / "libcublas.so.12"
    link.symlink_to(lib)
    maps = tmp_path / "maps"
    rows = [f"7f00-7f10 r-xp 00000000 08:01 1 {link}",
            f"7f10-7f20 r--p 00010000 08:01 1 {lib}",
            "7f20-7f30 r-xp 00000000 08:01 2 /opt/nvidia/libcublasLt.so.12",
            "7f30-7f40 rw-p 00000000 00:00 0 ",
            "7f40-7f50 r-xp 00000000 08:01 3 /usr/lib/libcublas_fake_helper.so"]
    maps.write_text("\n".join(rows) + "\n")
    assert gx.loaded_cublas_paths(str(maps)) == [str(lib)]
    maps.write_text("\n".join(rows + ["7f60-7f70 r-xp 0 08:01 4 /other/libcublas.so.13"]))
    assert gx.loaded_cublas_paths(str(maps)) == ["/other/libcublas.so.13", str(lib)]
    assert gx.loaded_cublas_paths(str(tmp_path / "missing")) == []


def test_cublas_c_is_not_looked_for_behind_cupys_back(monkeypatch):
    """CuPy's cublas module that isn't a compiled extension (a stand-in), or a process with
    no cuBLAS loaded: the wrappers are used, with the reason."""
    monkeypatch.setattr(gx, "_found_cublas", {})
    stand_in = types.SimpleNamespace()
    lib, why = gx.cublas_c(None, stand_in, HANDLE)
    assert lib is None and "not a compiled extension" in why
    ext = types.SimpleNamespace(__file__="/site/cupy_backends/cuda/libs/cublas.so")
    monkeypatch.setattr(gx, "loaded_cublas_paths", list)
    lib, why = gx.cublas_c(None, ext, HANDLE)
    assert lib is None and why == "0 cuBLAS libraries for CuPy's CUDA are loaded: []"


def test_cublas_c_opens_the_one_library_cupy_loaded(tmp_path):
    """In a process where libcublas.so.12 is loaded (the fake, built under that name), it is
    found in the maps and opened (not loaded again); with a libcublas.so.13 loaded beside it
    (another package's CUDA), the one of CuPy's CUDA major is picked, or none. (In a child
    process: this one must not hold fake cuBLAS libraries.)"""
    cc_ = shutil.which("gcc") or shutil.which("cc")
    if cc_ is None:
        pytest.skip("no C compiler for the fake cuBLAS library")
    libs = {}
    for major in (12, 13):
        (tmp_path / str(major)).mkdir()
        libs[major] = str((tmp_path / str(major) / f"libcublas.so.{major}").resolve())
        subprocess.run([cc_, "-O1", "-shared", "-fPIC", "-o", libs[major],
                        str(HERE / "fake_cublas.c")], check=True)
    script = f"""
import ctypes, types
from runtime.gpu import executable as gx
libs = {libs!r}
assert gx.loaded_cublas_paths() == [], gx.loaded_cublas_paths()

def find(cuda_version):
    gx._found_cublas.clear()
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
        runtimeGetVersion=lambda: cuda_version)))
    ext = types.SimpleNamespace(__file__="/site/cupy_backends/cuda/libs/cublas.so",
                                getVersion=lambda handle: 120900)
    return gx.cublas_c(cupy, ext, {HANDLE})

lib, why = find(12090)
assert lib is None and why.startswith("0 cuBLAS libraries"), why
loaded = [ctypes.CDLL(libs[12])]
assert gx.loaded_cublas_paths() == [libs[12]]
lib, why = find(12090)
assert why is None and lib.lib._name == libs[12] and lib.version({HANDLE}) == 120900
loaded.append(ctypes.CDLL(libs[13]))
assert gx.loaded_cublas_paths() == [libs[12], libs[13]]
assert find(13000)[0].lib._name == libs[13] and find(12000)[0].lib._name == libs[12]
lib, why = find(11080)
assert lib is None and why.startswith("0 cuBLAS libraries for CuPy's CUDA are loaded"), why
print("checked")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, cwd=HERE.parent.parent)
    assert done.returncode == 0 and done.stdout.strip() == "checked", done.stderr


# -- on a device (benchmarks/gpu_check.sh; skipped here) -------------------------------------------
def _device_count() -> int:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001  (no CuPy, no driver: no device)
        return 0


on_device = pytest.mark.skipif(_device_count() < 1, reason="no CUDA device (or no CuPy) here")


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _step(workload):
    sys.path.insert(0, str(HERE.parent.parent / "benchmarks"))
    import backend_speed as bs
    return bs.OURS[workload], bs.inputs(workload, True)


@pytest.mark.gpu
@on_device
@pytest.mark.parametrize("workload", ["mlp", "transformer"])
def test_on_the_device_the_replayed_graph_computes_what_eager_launching_does(monkeypatch,
                                                                             workload):
    """Four calls of a training step from the same inputs: eager (COMPILER_CUDA_GRAPH=0) and
    by default (call 2 captures, calls 2-4 replay, cuBLAS through ctypes) agree at each call
    (within float32 rounding: cuBLAS may pick other algorithms in its own workspace)."""
    fn, args = _step(workload)
    monkeypatch.setenv("COMPILER_CUDA_GRAPH", "0")
    eager = cc.compile(fn, backend="gpu").lower(*args)
    monkeypatch.delenv("COMPILER_CUDA_GRAPH")
    graphed = cc.compile(fn, backend="gpu").lower(*args)
    assert not eager._exec.use_graph and graphed._exec.use_graph
    for call in range(4):
        ea, ga = [a.copy() for a in args], [a.copy() for a in args]
        want, got = eager(*ea), graphed(*ga)
        for w, g in zip([*_tuple(want), *ea], [*_tuple(got), *ga], strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=f"call {call}")
    exe = graphed._exec
    assert exe.graph_refused is None and exe._cuda_graph is not None
    import cupy
    assert gx._Blas(cupy).c is not None, gx._Blas(cupy).why


@pytest.mark.gpu
@on_device
def test_on_the_device_a_replayed_graph_checks_data_and_release_recaptures():
    prog, (a, b, i) = _half_gemm_with_check(BF16)
    want = cc.compile(lambda a, b, i: (a @ b).take_along_axis(i, 1) * 2.0,
                      backend="numpy")(a, b, i)
    for _ in range(3):
        assert np.array_equal(prog(a, b, i), want)
    exe = prog._exec
    assert exe.graph_refused is None and exe._cuda_graph is not None
    bad = np.full_like(i, 7)
    with pytest.raises(DataError, match=r"index 7 .* out of range .*test_gpu_launch_path"):
        prog(a, b, bad)
    assert np.array_equal(prog(a, b, i), want)   # the status word cleared by the replay
    exe.release()
    assert exe._cuda_graph is None and exe._bound is None
    for _ in range(3):
        assert np.array_equal(prog(a, b, i), want)
    assert exe._cuda_graph is not None
