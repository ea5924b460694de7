"""The "gpu" backend's runnable program: the CUDA C module, its launch list, and CuPy.

Building one (`GpuExecutable(graph, plan)`) needs no device: the emitter renders the CUDA C
(`source`) and the launch list (`module.launches`); nothing touches CuPy until the first call.
A call:

  - allocates the arena once, as ONE device allocation of `plan.arena_bytes` (256-byte
    aligned: CuPy's allocations are, and every planned offset is a multiple of 256), reused by
    every later call;
  - copies the numpy arguments to the device, allocates the per-call output buffers, runs
    the whole launch list from this one Python call (the module's kernels, compiled with
    `nvrtc.options` and loaded through CuPy; cuBLAS for the gemm launches), and, once the
    whole run succeeded (no index out of range: the status word), copies each mutated
    argument straight into the array the driver passed and each output into a fresh numpy
    array (an output living in an argument that came back is a view of it): the host
    allocates the plan's outputs and nothing more;
  - optionally (`graph=True`) captures the launch list as a CUDA graph at the second call and
    replays it afterwards (inputs are staged into fixed device buffers so the captured pointers
    stay valid).

Calls from several threads take turns (a lock per program: they share its one arena, staged
buffers and captured graph, and the device runs one launch list at a time anyway).

Anything that keeps a call from running (no CuPy, no device, NVRTC rejecting the source)
raises `DeviceError` saying which, never a raw CuPy exception; outputs the host can't hold,
or an arena the device can't, `InsufficientMemoryError` before anything runs.
"""
from __future__ import annotations

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


class GpuExecutable:
    """A planned graph as CUDA C plus a launch list; runs on a CUDA device through CuPy."""

    def __init__(self, graph, plan, use_graph: bool = False):
        self.graph, self.plan = graph, plan
        emitter = ModuleEmitter(graph, plan)
        self.module = emitter.module
        self.source = emitter.source
        self.places = emitter.places
        self._output_buffers = emitter.output_buffers
        self.use_graph = use_graph
        self._kernels = None
        self._arena = None
        self._cuda_graph = None
        self._staged = None
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
        """Free the device arena (and what a captured graph holds: its addresses point into
        it); the next call allocates it again. Waits for a call in flight."""
        with self._lock:
            self._arena = None
            self._cuda_graph = None
            self._staged = self._staged_outputs = None
            self.calls = 0

    def idle_arena_bytes(self) -> int:
        return 0 if self._arena is None else self.plan.arena_bytes

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
                                          f"{self.plan.arena_bytes} bytes on the device") \
                from None
        assert self._arena.data.ptr % self.module.arena_alignment == 0

    # -- a call ------------------------------------------------------------------------------------
    def _pointer(self, arg, inputs, outputs) -> int:
        kind = arg[0]
        if kind == "arena":
            return self._arena.data.ptr + arg[1]
        base = inputs[arg[1]] if kind == "input" else outputs[arg[1]]
        return base.data.ptr + arg[2]

    @staticmethod
    def _cublas_on_current_stream(cupy):
        """cuBLAS's handle set to this call's stream (before a capture: CuPy refuses cuBLAS
        set-up calls while a stream is being captured)."""
        from cupy_backends.cuda.libs import cublas
        handle = cupy.cuda.device.get_cublas_handle()
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
        cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
        return handle

    def _run_launches(self, cupy, inputs, outputs, handle=None):
        from cupy_backends.cuda.libs import cublas
        for ln in self.module.launches:
            if ln.library == "cublas":
                if handle is None:
                    handle = self._cublas_on_current_stream(cupy)
                (ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) = ln.args
                ptrs = [self._pointer(p, inputs, outputs) for p in (a, b, c)]
                if ln.dtype in GEMM_EX:   # 16-bit A, B, C; float32 alpha, beta, accumulation
                    dtype, compute = GEMM_EX[ln.dtype]
                    al, be = np.array(alpha[2], np.float32), np.array(beta[2], np.float32)
                    cublas.gemmEx(handle, _CUBLAS_OP[ta], _CUBLAS_OP[tb], m, n, k,
                                  al.ctypes.data, ptrs[0], dtype, lda, ptrs[1], dtype, ldb,
                                  be.ctypes.data, ptrs[2], dtype, ldc, compute,
                                  CUBLAS_GEMM_DEFAULT)
                    continue
                dt = np.dtype(ln.dtype)
                al, be = np.array(alpha[2], dt), np.array(beta[2], dt)
                gemm = cublas.sgemm if dt == np.float32 else cublas.dgemm
                gemm(handle, _CUBLAS_OP[ta], _CUBLAS_OP[tb], m, n, k, al.ctypes.data,
                     ptrs[0], lda, ptrs[1], ldb, be.ctypes.data, ptrs[2], ldc)
                continue
            args = []
            for a in ln.args:
                if a[0] == "scalar":
                    args.append(np.dtype({"long long": np.int64, "int": np.int32,
                                          "float": np.float32, "double": np.float64,
                                          "unsigned long long": np.uint64}[a[1]]).type(a[2]))
                else:
                    # a pointer is passed by value as its 64-bit address
                    args.append(np.uint64(self._pointer(a, inputs, outputs)))
            self._kernels[ln.kernel](ln.grid, ln.block, tuple(args), shared_mem=ln.shared_bytes)

    def run(self, inputs):
        """(outputs, mutations) as numpy arrays, like the other backends' executables."""
        cupy = _cupy()
        with self._lock:  # until the results are on the host: the next call reuses the arena
            return self._run(cupy, inputs)

    def _run(self, cupy, inputs):
        try:
            self._load(cupy)
            self.calls += 1
            if self.use_graph:
                dev_in = self._stage(cupy, inputs)
            else:   # straight from the caller's (contiguous) arrays: no host staging copy
                dev_in = [cupy.empty(max(a.nbytes, 1), cupy.uint8) for a in inputs]
                for buf, a in zip(dev_in, inputs):
                    if a.size:
                        buf.set(a.reshape(-1).view(np.uint8))
            if self.use_graph and self._staged_outputs is not None:
                outputs = self._staged_outputs
            else:
                outputs = [cupy.empty(max(b.size, 1), cupy.uint8) for b in self._output_buffers]
            if self.use_graph:
                self._launch_graph(cupy, dev_in, outputs)
            else:
                self._run_launches(cupy, dev_in, outputs)
            cupy.cuda.get_current_stream().synchronize()
            status = self.module.status_offset
            if status is not None:
                status = int(self._arena[status:status + 8].get().view(np.uint64)[0])
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

    @staticmethod
    def _device_view(cupy, storage, place):
        item = place.dtype.itemsize
        return cupy.ndarray(place.shape, place.dtype, storage.data + place.offset * item,
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

    _staged_outputs = None

    def _stage(self, cupy, inputs):
        """Fixed device buffers for the inputs (a captured graph holds their addresses)."""
        if self._staged is None:
            self._staged = [cupy.empty(max(a.nbytes, 1), cupy.uint8) for a in inputs]
            self._staged_outputs = [cupy.empty(max(b.size, 1), cupy.uint8)
                                    for b in self._output_buffers]
        for buf, a in zip(self._staged, inputs):
            if a.size:
                buf[:a.nbytes].set(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
        return self._staged

    def _launch_graph(self, cupy, dev_in, outputs):
        """The launch list captured once as a CUDA graph (at the second call: the first one
        runs eagerly, so cuBLAS's handle and workspace exist before capture), replayed after."""
        if self._cuda_graph is not None:
            self._cuda_graph.launch()
            return
        if self.calls < 2:
            self._run_launches(cupy, dev_in, outputs)
            return
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            handle = self._cublas_on_current_stream(cupy)
            stream.begin_capture()
            self._run_launches(cupy, dev_in, outputs, handle)
            self._cuda_graph = stream.end_capture()
        self._cuda_graph.launch()
