"""NVRTC for the gpu backend: its options, and compiling a module (no nvcc, no CUDA toolkit).

`options(arch)` is THE list of NVRTC options of the backend: the executable compiles with it on
a device (`device_image`, through CuPy's own NVRTC bindings) and the tests compile with it here
(`compile_ptx`, through NVRTC from pip, `cuda-bindings`), so what the tests check is what runs.

The numeric options are the backend's semantics, the ones NumPy and the cpu backend have:
  --fmad=false      a*b+c stays two correctly rounded operations (NVRTC contracts by default);
  --ftz=false       denormal float32 operands and results are kept, not flushed to zero;
  --prec-div=true   float32 division and square root are correctly rounded;
  --prec-sqrt=true
The module is compiled here rather than by `cupy.RawModule`, which appends `-ftz=true` after
the caller's options (the later one wins in NVRTC; CuPy issue #9576): that flushed 1.4e-45 to 0
in casts, minimum/maximum and logical ops on the device.

`compile_ptx(source)` returns PTX for `compute_80` (Ampere and newer run it) or raises
`DeviceError` carrying NVRTC's log.
"""
from __future__ import annotations

from compiler.errors import DeviceError

ARCH = "compute_80"
SEMANTICS = ("--std=c++17", "--fmad=false", "--ftz=false", "--prec-div=true",
             "--prec-sqrt=true")


def options(arch: str = ARCH) -> tuple[str, ...]:
    """The NVRTC options of the gpu backend for `arch` ("compute_80": PTX, "sm_90": cubin)."""
    return (f"--gpu-architecture={arch}",) + SEMANTICS


OPTIONS = options()


def available() -> bool:
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError:
        return False
    return True


def _check(result, what, prog=None):
    err = result[0]
    from cuda.bindings import nvrtc
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise DeviceError(f"NVRTC {what} failed: {err.name}")
    return result[1:]


def compile_ptx(source: str, name: str = "module.cu", options=OPTIONS) -> str:
    """PTX for `source`; a kernel NVRTC rejects raises `DeviceError` with the log."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise DeviceError("compiling CUDA C needs NVRTC: pip install \"cuda-bindings==12.9.*\" "
                          "nvidia-cuda-nvrtc-cu12") from None
    (prog,) = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                     "create")
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
            log = b" " * size
            _check(nvrtc.nvrtcGetProgramLog(prog, log), "log")
            text = log.decode(errors="replace").rstrip("\x00").strip()
            raise DeviceError(f"NVRTC could not compile the generated CUDA C ({name}, "
                              f"{' '.join(options)}):\n{text}")
        (size,) = _check(nvrtc.nvrtcGetPTXSize(prog), "PTX size")
        ptx = b" " * size
        _check(nvrtc.nvrtcGetPTX(prog, ptx), "PTX")
        return ptx.decode().rstrip("\x00")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def device_arch(capability: int, supported) -> str:
    """The `--gpu-architecture` for a device of compute capability `capability` (90: sm_90)
    given the architectures this NVRTC supports: a cubin for the device itself when NVRTC
    knows it (no JIT by the driver), else PTX for the newest architecture not above it."""
    supported = sorted(int(a) for a in supported)
    if capability in supported:
        return f"sm_{capability}"
    older = [a for a in supported if a <= capability]
    if not older:
        raise DeviceError(f"this NVRTC supports the architectures {supported}, none of which "
                          f"runs on a device of compute capability {capability}")
    return f"compute_{older[-1]}"


def device_image(nv, source: str, name: str, capability: int) -> bytes:
    """The module for a device of compute capability `capability`, compiled with `options`
    through `nv`, CuPy's NVRTC bindings (`cupy_backends.cuda.libs.nvrtc`): a cubin, or
    NUL-terminated PTX, as the driver's cuModuleLoadData takes either. A source NVRTC rejects
    raises `DeviceError` with NVRTC's log."""
    arch = device_arch(capability, nv.getSupportedArchs())
    opts = options(arch)
    prog = nv.createProgram(source, name, (), ())
    try:
        try:
            nv.compileProgram(prog, list(opts))
        except Exception as e:   # NVRTCError: the log says why
            try:
                log = nv.getProgramLog(prog)
            except Exception:
                log = ""
            raise DeviceError(f"NVRTC could not compile the generated CUDA C ({name}, "
                              f"{' '.join(opts)}): {e}\n{log.strip()}") from None
        if arch.startswith("sm_"):
            return bytes(nv.getCUBIN(prog))
        return bytes(nv.getPTX(prog)).rstrip(b"\0") + b"\0"
    finally:
        nv.destroyProgram(prog)
