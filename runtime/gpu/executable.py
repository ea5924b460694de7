"""The "gpu" backend's runnable program: the CUDA C module, its launch list, and CuPy.

Building one (`GpuExecutable(graph, plan)`) needs no device: the emitter renders the CUDA C
(`source`) and the launch list (`module.launches`); nothing touches CuPy until the first call.
A call:

  - allocates, at the first call, the arena (ONE device allocation of `plan.arena_bytes`,
    256-byte aligned: CuPy's allocations are, and every planned offset is a multiple of 256)
    and one fixed device buffer per argument and per output, all reused by every later call
    (`release()` frees them);
  - copies the numpy arguments into their buffers and runs the whole launch list from this one
    Python call: every kernel's argument tuple and every GEMM's call (pointers, host scalars)
    was built once when the buffers were (`_steps`), so the loop only calls; GEMMs go to
    cuBLAS's C functions through ctypes (`CublasC`: the library CuPy loaded, on CuPy's
    handle), or to CuPy's wrappers where that library can't be found;
  - from the second call on, replays the launch list as a CUDA graph captured once (one host
    call instead of one per launch; `COMPILER_CUDA_GRAPH=0` turns it off). A capture that
    fails for any reason leaves the program launching eagerly for good, the reason in
    `graph_refused`;
  - once the whole run succeeded (no index out of range: the status word, read every call),
    copies each mutated argument straight into the array the driver passed and each output
    into a fresh numpy array (an output living in an argument that came back is a view of
    it): the host allocates the plan's outputs and nothing more.

Calls from several threads take turns (a lock per program: they share its one arena, its
buffers and its captured graph, and the device runs one launch list at a time anyway).

Anything that keeps a call from running (no CuPy, no device, NVRTC rejecting the source, a
cuBLAS call failing) raises `DeviceError` saying which, never a raw CuPy exception; outputs
the host can't hold, or an arena the device can't, `InsufficientMemoryError` before anything
runs.
"""
from __future__ import annotations

import ctypes
import os
import re
import threading

import numpy as np

from compiler.errors import DeviceError, InsufficientMemoryError
from runtime.arena import check_memory as check_host_memory
from runtime.lowering.places import contiguous_strides
from runtime.reference import run_node

from . import nvrtc
from .emitter import ModuleEmitter
from .launch import CUBLAS_GEMM_DEFAULT, GEMM_EX

_CUBLAS_OP = {"N": 0, "T": 1}  # CUBLAS_OP_N, CUBLAS_OP_T
CUBLAS_POINTER_MODE_HOST = 0
# cublasStatus_t (cublas_api.h)
CUBLAS_STATUS = {1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
                 7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH",
                 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
                 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
                 16: "CUBLAS_STATUS_LICENSE_ERROR"}
_SCALAR = {"long long": np.int64, "int": np.int32, "float": np.float32, "double": np.float64,
           "unsigned long long": np.uint64}


def raise_data_error(graph, t: int, inputs):
    """Node `t` found data out of range on the device (the status word): the numpy
    reference, run up to it on the call's inputs (untouched on the host: the device had
    copies), raises the numpy backend's `DataError` naming the node's line."""
    env = dict(zip(map(id, graph.inputs), inputs))
    with np.errstate(all="ignore"):
        for node in graph.nodes[:t + 1]:
            env[id(node.out)] = run_node(node, [env[id(v)] for v in node.inputs])
    node = graph.nodes[t]
    raise AssertionError(f"the gpu kernel of {node.op} at {node.loc} reported data out of "
                         "range, but its reference accepts it")


def _cupy(loc=None):
    """CuPy and a usable device, or a `DeviceError` that says what is missing."""
    try:
        import cupy
    except ImportError:
        raise DeviceError("the gpu backend needs CuPy to run a program: pip install "
                          "cupy-cuda12x (lowering and prog.source work without it)", loc) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError: no driver, or an insufficient one
        raise DeviceError(f"the gpu backend found no usable CUDA device: {e}", loc) from None
    if count < 1:
        raise DeviceError("the gpu backend found no CUDA device", loc)
    return cupy


# -- cuBLAS's C entry points ---------------------------------------------------------------------
_P, _I = ctypes.c_void_p, ctypes.c_int
# The C signatures (cublas_api.h): every enum (cublasOperation_t, cudaDataType_t,
# cublasComputeType_t, cublasGemmAlgo_t, cublasPointerMode_t) and cublasStatus_t is an int.
_SIGNATURES = {
    # (handle, transa, transb, m, n, k, alpha*, A*, lda, B*, ldb, beta*, C*, ldc)
    "cublasSgemm_v2": (_P, _I, _I, _I, _I, _I, _P, _P, _I, _P, _I, _P, _P, _I),
    "cublasDgemm_v2": (_P, _I, _I, _I, _I, _I, _P, _P, _I, _P, _I, _P, _P, _I),
    # (handle, transa, transb, m, n, k, alpha*, A*, Atype, lda, B*, Btype, ldb, beta*, C*,
    #  Ctype, ldc, computeType, algo)
    "cublasGemmEx": (_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I,
                     _I),
    "cublasSetStream_v2": (_P, _P),                       # (handle, cudaStream_t)
    "cublasSetPointerMode_v2": (_P, _I),                  # (handle, mode)
    "cublasSetWorkspace_v2": (_P, _P, ctypes.c_size_t),   # (handle, workspace*, bytes)
    "cublasGetVersion_v2": (_P, ctypes.POINTER(_I)),      # (handle, int* version)
}


class CublasC:
    """cuBLAS's GEMMs and set-up calls as C functions (ctypes) of one loaded library: unlike
    CuPy's wrappers they don't call `cublasSetStream` inside (CuPy refuses that during a
    stream capture), and each returns its `cublasStatus_t` for the caller to check."""

    def __init__(self, lib):
        self.lib = lib
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        self.sgemm, self.dgemm = lib.cublasSgemm_v2, lib.cublasDgemm_v2
        self.gemm_ex = lib.cublasGemmEx
        self.set_stream, self.set_pointer_mode = lib.cublasSetStream_v2, \
            lib.cublasSetPointerMode_v2
        self.set_workspace = lib.cublasSetWorkspace_v2

    def version(self, handle) -> int:
        v = ctypes.c_int(0)
        status = self.lib.cublasGetVersion_v2(handle, ctypes.byref(v))
        return v.value if status == 0 else -1


def loaded_cublas_paths(maps: str = "/proc/self/maps") -> list[str]:
    """The distinct cuBLAS libraries (libcublas.so*, not cublasLt) mapped into this process."""
    found = set()
    try:
        with open(maps) as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if re.fullmatch(r"libcublas\.so(\.\d+)*", os.path.basename(path)):
                    found.add(os.path.realpath(path))
    except OSError:
        return []
    return sorted(found)


def _of_cuda_major(paths, cupy):
    """The libraries among `paths` named for the major version of CuPy's CUDA runtime
    (libcublas.so.13.x for CUDA 13): cuBLAS's soname carries its CUDA major."""
    try:
        major = int(cupy.cuda.runtime.runtimeGetVersion()) // 1000
    except Exception:  # noqa: BLE001  (then no library is picked)
        return []
    return [p for p in paths
            if re.fullmatch(rf"libcublas\.so\.{major}(\.\d+)*", os.path.basename(p))]


_found_cublas: dict = {}   # id(CuPy's cublas module) -> (CublasC or None, why not)


def cublas_c(cupy, wrappers, handle):
    """(`CublasC` over the cuBLAS library CuPy loaded, None) or (None, why it can't be used).
    Only a library already loaded is opened (RTLD_NOLOAD: never a second copy), only when it is
    the one loaded copy, and only when it reports the version CuPy's wrappers report for the
    same handle: a handle of one library passed to another would crash."""
    key = id(wrappers)
    if key in _found_cublas:
        return _found_cublas[key]
    result = (None, "CuPy's cublas module is not a compiled extension")
    if getattr(wrappers, "__file__", None):
        paths = loaded_cublas_paths()
        if len(paths) > 1:   # another package's too (PyTorch's): the one of CuPy's CUDA major
            paths = _of_cuda_major(paths, cupy)
        if len(paths) != 1:
            result = (None, f"{len(paths)} cuBLAS libraries for CuPy's CUDA are loaded: "
                            f"{paths}")
        else:
            try:
                lib = CublasC(ctypes.CDLL(paths[0], mode=os.RTLD_NOLOAD | os.RTLD_NOW))
                ours, theirs = lib.version(handle), wrappers.getVersion(handle)
                result = (lib, None) if ours == theirs else \
                    (None, f"{paths[0]} reports version {ours}, CuPy's cuBLAS {theirs}")
            except Exception as e:  # noqa: BLE001  (OSError, a missing symbol: AttributeError)
                result = (None, f"{paths[0]}: {type(e).__name__}: {e}")
    _found_cublas[key] = result
    return result


class _Blas:
    """What a call's GEMMs go through: CuPy's cuBLAS handle, and `c` (`CublasC`) or CuPy's
    wrappers (`c` None, `why` says why)."""

    def __init__(self, cupy):
        from cupy_backends.cuda.libs import cublas
        self.wrappers = cublas
        self.handle = cupy.cuda.device.get_cublas_handle()
        self.c, self.why = cublas_c(cupy, cublas, self.handle)

    def gemm(self, dtype):
        """The function a GEMM of `dtype` calls (its arguments are the same either way)."""
        if dtype in GEMM_EX:
            return self.c.gemm_ex if self.c else self.wrappers.gemmEx
        if self.c:
            return self.c.sgemm if dtype == "float32" else self.c.dgemm
        return self.wrappers.sgemm if dtype == "float32" else self.wrappers.dgemm

    def on_stream(self, stream_ptr: int, what: str):
        """The handle set to `stream_ptr` in host pointer mode (alpha and beta are host
        scalars), before the launch loop and never during a capture. cublasSetStream also
        puts the handle back on cuBLAS's own workspace pool (after a capture's workspace)."""
        if self.c is None:
            self.wrappers.setPointerMode(self.handle, self.wrappers.CUBLAS_POINTER_MODE_HOST)
            self.wrappers.setStream(self.handle, stream_ptr)
            return
        _check(self.c.set_stream(self.handle, stream_ptr), "cublasSetStream_v2", what)
        _check(self.c.set_pointer_mode(self.handle, CUBLAS_POINTER_MODE_HOST),
               "cublasSetPointerMode_v2", what)


def _check(status: int, call: str, what: str, loc=None):
    if status:
        raise DeviceError(f"{call} for {what} failed: status {status} "
                          f"({CUBLAS_STATUS.get(status, 'unknown')})", loc)


def workspace_bytes(capability: int) -> int:
    """The workspace a captured graph's GEMMs get (cublasSetWorkspace's advice: 4 MiB, the
    default pool's size; 32 MiB on Hopper and later)."""
    return (32 if capability >= 90 else 4) << 20


class GpuExecutable:
    """A planned graph as CUDA C plus a launch list; runs on a CUDA device through CuPy."""

    def __init__(self, graph, plan, use_graph: bool = True):
        self.graph, self.plan = graph, plan
        emitter = ModuleEmitter(graph, plan)
        self.module = emitter.module
        self.source = emitter.source
        self.places = emitter.places
        self._output_buffers = emitter.output_buffers
        self.use_graph = use_graph
        self.graph_refused: str | None = None   # why launching stays eager, once it must
        self._has_gemm = any(ln.library == "cublas" for ln in self.module.launches)
        self._kernels = None
        self._arena = None
        self._bound = None        # (input sizes, input buffers, output buffers, status view)
        self._steps = None        # the prebuilt launch loop over the bound buffers
        self._cuda_graph = None
        self._workspace = None    # the captured GEMMs' cuBLAS workspace
        self._other = None        # `_run_launches`'s steps over a caller's buffers
        self.calls = 0
        self._lock = threading.Lock()  # one call at a time: they share the arena

    @property
    def launches(self):
        return self.module.launches

    def check_memory(self, loc=None):
        """Raise `InsufficientMemoryError` when the host can't hold the outputs a call
        returns (as the other backends: `runtime.arena.check_memory`; the arena is on the
        device) or the device the arena and the outputs (before anything is allocated or
        written); `DeviceError` when there is no device."""
        cupy = _cupy(loc)
        check_host_memory(self.plan, True, loc)
        if self._arena is not None:
            return
        free, _ = cupy.cuda.runtime.memGetInfo()
        need = self.module.arena_bytes + self.plan.output_bytes
        if need > free:
            raise InsufficientMemoryError(f"{self.graph.name}: its arena and outputs need "
                                          f"{need} bytes of device memory; {free} are free",
                                          loc)

    # -- setup -----------------------------------------------------------------------------------
    def release(self) -> None:
        """Free the device arena, the argument and output buffers and the captured graph (its
        addresses point into them); the next call allocates them again (and captures again
        at its second call). Waits for a call in flight."""
        with self._lock:
            self._cuda_graph = None
            self._steps = self._other = None
            self._bound = None
            self._workspace = None
            self._arena = None
            self.calls = 0

    def idle_arena_bytes(self) -> int:
        # (the device allocation: the plan's arena, the status word, reductions' partials)
        return 0 if self._arena is None else self.module.arena_bytes

    def _load(self, cupy):
        if self._kernels is not None:
            if self._arena is None:
                self._allocate_arena(cupy)
            return
        names = {ln.kernel for ln in self.module.launches if ln.library is None}
        try:
            # compiled here with the backend's NVRTC options (not cupy.RawModule, which
            # appends -ftz=true after ours: see nvrtc.py)
            from cupy_backends.cuda.libs import nvrtc as nv
            capability = int(cupy.cuda.Device().compute_capability)
            image = nvrtc.device_image(nv, self.source, f"{self.graph.name}.cu", capability)
            mod = cupy.cuda.function.Module()
            mod.load(image)
            kernels = {n: mod.get_function(n) for n in names}
        except DeviceError:
            raise
        except Exception as e:
            raise DeviceError(f"loading the CUDA module of {self.graph.name} failed: "
                              f"{type(e).__name__}: {e}") from None
        self._cuda_module, self._kernels = mod, kernels   # the module outlives its functions
        self._allocate_arena(cupy)

    def _allocate_arena(self, cupy):
        try:
            self._arena = cupy.empty(max(self.module.arena_bytes, 1), cupy.uint8)
        except cupy.cuda.memory.OutOfMemoryError:
            raise InsufficientMemoryError(f"{self.graph.name}: can't allocate its arena of "
                                          f"{self.module.arena_bytes} bytes on the device") \
                from None
        assert self._arena.data.ptr % self.module.arena_alignment == 0

    def _bind(self, cupy, inputs):
        """The fixed device buffers of the arguments (holding this call's values) and of the
        outputs; allocated at the first call (again if an argument's size changed, which the
        driver's shapes rule out) with the status word's view, reused after."""
        sizes = [a.nbytes for a in inputs]
        if self._bound is None or self._bound[0] != sizes:
            self._cuda_graph = self._steps = None   # they hold the old buffers' addresses
            self._bound = None
            dev_in = [cupy.empty(max(n, 1), cupy.uint8) for n in sizes]
            outputs = [cupy.empty(max(b.size, 1), cupy.uint8) for b in self._output_buffers]
            at = self.module.status_offset
            status = None if at is None else self._arena[at:at + 8]
            self._bound = (sizes, dev_in, outputs, status)
        dev_in = self._bound[1]
        for buf, a in zip(dev_in, inputs):
            if a.size:
                buf.set(a.reshape(-1).view(np.uint8))
        return dev_in, self._bound[2]

    # -- the launch loop -------------------------------------------------------------------------
    def _pointer(self, arg, inputs, outputs) -> int:
        kind = arg[0]
        if kind == "arena":
            return self._arena.data.ptr + arg[1]
        base = inputs[arg[1]] if kind == "input" else outputs[arg[1]]
        return base.data.ptr + arg[2]

    def _build_steps(self, inputs, outputs, blas):
        """The launch list over these buffers as (function, arguments, launch) triples, every
        argument computed here once: a kernel's (grid, block, its parameters as numpy scalars
        and uint64 addresses, shared bytes), a GEMM's cuBLAS call (handle, ops, sizes, host
        alpha/beta addresses, pointers, types). `keep` holds the alpha/beta arrays alive."""
        steps, keep = [], []
        for ln in self.module.launches:
            if ln.library == "cublas":
                (ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) = ln.args
                pa, pb, pc = (self._pointer(p, inputs, outputs) for p in (a, b, c))
                # 16-bit A, B, C: float32 alpha, beta and accumulation (cublasGemmEx)
                dt = np.float32 if ln.dtype in GEMM_EX else np.dtype(ln.dtype)
                al, be = np.array(alpha[2], dt), np.array(beta[2], dt)
                keep += [al, be]
                head = (blas.handle, _CUBLAS_OP[ta], _CUBLAS_OP[tb], m, n, k, al.ctypes.data)
                if ln.dtype in GEMM_EX:
                    dtype, compute = GEMM_EX[ln.dtype]
                    args = head + (pa, dtype, lda, pb, dtype, ldb, be.ctypes.data, pc, dtype,
                                   ldc, compute, CUBLAS_GEMM_DEFAULT)
                else:
                    args = head + (pa, lda, pb, ldb, be.ctypes.data, pc, ldc)
                steps.append((blas.gemm(ln.dtype), args, ln))
                continue
            params = tuple(_SCALAR[a[1]](a[2]) if a[0] == "scalar" else
                           # a pointer is passed by value as its 64-bit address
                           np.uint64(self._pointer(a, inputs, outputs)) for a in ln.args)
            steps.append((self._kernels[ln.kernel], (ln.grid, ln.block, params,
                                                     ln.shared_bytes), ln))
        return steps, keep

    def _launch(self, steps):
        """Only calls: a kernel returns None, a cuBLAS C function its status (CuPy's wrappers
        raise)."""
        for fn, args, ln in steps:
            status = fn(*args)
            if status:
                self._gemm_failed(fn, status, ln)

    def _gemm_failed(self, fn, status, ln):
        node = self.graph.nodes[ln.node] if ln.node is not None else None
        what = f"the {ln.dtype} GEMM of {self.graph.name}" + \
            (f" ({node.op})" if node is not None else "")
        _check(status, getattr(fn, "__name__", "cuBLAS"), what,
               getattr(node, "loc", None))

    def _blas(self, cupy):
        """This thread's cuBLAS handle and functions (None without a GEMM): CuPy keeps a
        handle per thread, so the prebuilt GEMM calls are rebuilt when it changes."""
        if not self._has_gemm:
            return None
        blas = _Blas(cupy)
        if self._steps is not None and self._steps[2] != blas.handle:
            self._steps = None
        return blas

    def _run_launches(self, cupy, inputs, outputs):
        """The launch list, eagerly, over the caller's buffers (the benchmarks' device-only
        column): prebuilt once per set of buffers, as a call's."""
        blas = _Blas(cupy) if self._has_gemm else None
        key = (tuple(b.data.ptr for b in inputs), tuple(b.data.ptr for b in outputs),
               self._arena.data.ptr, blas and blas.handle, self.module.launches)
        if self._other is None or self._other[0] != key:
            self._other = (key, *self._build_steps(inputs, outputs, blas))
        if blas is not None:
            blas.on_stream(cupy.cuda.get_current_stream().ptr, self.graph.name)
        self._launch(self._other[1])

    def run(self, inputs):
        """(outputs, mutations) as numpy arrays, like the other backends' executables."""
        cupy = _cupy()
        with self._lock:  # until the results are on the host: the next call reuses the arena
            return self._run(cupy, inputs)

    def _run(self, cupy, inputs):
        try:
            self._load(cupy)
            self.calls += 1
            dev_in, outputs = self._bind(cupy, inputs)
            blas = None
            if self._cuda_graph is None:
                blas = self._blas(cupy)
                if self._steps is None:
                    self._steps = (*self._build_steps(dev_in, outputs, blas),
                                   blas and blas.handle)
                if self.use_graph and self.graph_refused is None and self.calls >= 2:
                    # (the first call ran eagerly: cuBLAS and the module are warm)
                    self._cuda_graph = self._capture(cupy, blas)
            if self._cuda_graph is not None:
                self._cuda_graph.launch()   # on the current stream, after the copies in
            else:
                if blas is not None:
                    blas.on_stream(cupy.cuda.get_current_stream().ptr, self.graph.name)
                self._launch(self._steps[0])
            cupy.cuda.get_current_stream().synchronize()
            status = self._bound[3]
            if status is not None:   # read every call: a replayed graph checks data too
                status = int(status.get().view(np.uint64)[0])
        except (DeviceError, InsufficientMemoryError):
            raise
        except Exception as e:
            if type(e).__module__.startswith(("cupy", "cupy_backends")):
                raise DeviceError(f"running {self.graph.name} on the device failed: "
                                  f"{type(e).__name__}: {e}") from None
            raise
        if status:   # before anything is copied back: the caller's arrays are untouched
            raise_data_error(self.graph, status - 1, inputs)

        def storage(slot):
            kind, k = slot
            if kind == "input":
                return dev_in[k]
            return outputs[k] if kind == "output" else \
                self._arena[self.plan.buffers[k].offset:]
        try:
            return self._copy_back(cupy, storage, inputs)
        except Exception as e:
            if type(e).__module__.startswith(("cupy", "cupy_backends")):
                raise DeviceError(f"copying the results of {self.graph.name} from the device "
                                  f"failed: {type(e).__name__}: {e}") from None
            raise

    def _capture(self, cupy, blas):
        """The prebuilt launch list captured as a CUDA graph on a non-blocking stream, or None
        with the reason in `graph_refused` (then eager for good, quietly). A graph freezes
        the addresses (the arena, the bound buffers: fixed), the kernels' scalars and the
        GEMMs' host alpha/beta (fixed), and cuBLAS's workspace: the captured GEMMs get one
        this program owns (`cublasSetWorkspace`, as cuBLAS advises for graphs) instead of
        memory cuBLAS would allocate inside the graph."""
        if blas is not None and blas.c is None:
            self.graph_refused = ("CuPy's cuBLAS wrappers can't be captured (they set the "
                                  f"stream inside) and cuBLAS's C library wasn't found: "
                                  f"{blas.why}")
            return None
        stream = None
        try:
            stream = cupy.cuda.Stream(non_blocking=True)
            if blas is not None:
                if self._workspace is None:
                    capability = int(cupy.cuda.Device().compute_capability)
                    self._workspace = cupy.empty(workspace_bytes(capability), cupy.uint8)
                what = f"capturing {self.graph.name}"
                blas.on_stream(stream.ptr, what)
                _check(blas.c.set_workspace(blas.handle, self._workspace.data.ptr,
                                            self._workspace.nbytes),
                       "cublasSetWorkspace_v2", what)
            with stream:
                stream.begin_capture()
                try:
                    self._launch(self._steps[0])
                except BaseException:
                    try:   # end the capture; what it made is incomplete
                        stream.end_capture()
                    except Exception:  # noqa: BLE001, S110
                        pass
                    raise
                graph = stream.end_capture()
        except Exception as e:  # noqa: BLE001  (any reason: eager for good)
            self.graph_refused = f"{type(e).__name__}: {e}"
            return None
        finally:
            if blas is not None and stream is not None:
                try:   # back on the call's stream and cuBLAS's own workspace pool
                    blas.on_stream(cupy.cuda.get_current_stream().ptr, self.graph.name)
                except Exception:  # noqa: BLE001, S110  (the next eager call sets it, or says why)
                    pass
        return graph

    @staticmethod
    def _device_view(cupy, storage, place):
        item = place.dtype.itemsize
        # A zero-size view reads nothing: its planned offset may lie past its zero-byte
        # buffer (`x[:, -3]` of a [0, 4] value), so it is built at the buffer's start (as
        # the cpu executable's `_view`).
        offset = 0 if 0 in place.shape else place.offset * item
        return cupy.ndarray(place.shape, place.dtype, storage.data + offset,
                            strides=tuple(s * item for s in place.strides))

    def _copy_back(self, cupy, storage, inputs):
        """(outputs, mutations) once the whole run succeeded, allocating on the host only the
        outputs that don't live in an argument: a mutated argument's value is copied straight
        into `inputs[k]` (the driver's array: it then copies nothing), and an output in an
        argument's buffer that came back whole is a view of that array (`return x`,
        `F.relu_(x)`: the driver returns the caller's array, as planned: 0 bytes)."""
        whole, muts = set(), {}
        for k, v in self.graph.mutations.items():
            place, dst = self.places[id(v)], inputs[k]
            if dst.size:
                if place.slot == ("input", k) and place.offset == 0 \
                        and place.strides == contiguous_strides(place.shape):
                    storage(place.slot)[:dst.nbytes].get(out=dst.reshape(-1).view(np.uint8))
                    whole.add(k)
                else:
                    self._device_view(cupy, storage(place.slot), place).get(out=dst)
            muts[k] = dst
        outs = []
        for v in self.graph.outputs:
            place = self.places[id(v)]
            kind, k = place.slot
            if kind == "input" and k in whole:
                item = place.dtype.itemsize
                outs.append(np.ndarray(place.shape, place.dtype, inputs[k],
                                       place.offset * item,
                                       tuple(s * item for s in place.strides)))
            else:
                outs.append(self._device_view(cupy, storage(place.slot), place).get())
                if any(s == 0 and n > 1 for n, s in zip(place.shape, place.strides)):
                    # an expand() view comes back as a copy: read-only, as on the host backends
                    outs[-1].flags.writeable = False
        return outs, muts
