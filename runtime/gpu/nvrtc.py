"""CUDA C to PTX through NVRTC from pip (`cuda-bindings`, `nvidia-cuda-nvrtc-cu12`): no device,
no CUDA toolkit and no nvcc needed (TOOLCHAIN.md "CUDA without a GPU").

`compile_ptx(source)` returns the PTX text or raises `DeviceError` carrying NVRTC's log. The
architecture is explicit (`compute_80`: Ampere and newer run it), so the same PTX is what a
device would JIT.
"""
from __future__ import annotations

from compiler.errors import DeviceError

ARCH = "compute_80"
# --fmad=false: a*b+c stays two correctly rounded operations, as in NumPy and the cpu backend
# (ISSUE-NOTES §8: + - * / are bit-identical to the reference; NVRTC contracts by default)
OPTIONS = (f"--gpu-architecture={ARCH}", "--std=c++17", "--fmad=false")


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
