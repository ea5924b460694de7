"""The JIT: one LLVM target machine for the host CPU, one ORC LLJIT per process, and the
external symbols generated code may call (libm, libc's mem* functions, numpy's OpenBLAS).

Why ORC and explicit symbols (TOOLCHAIN.md): an unresolved symbol raises "Symbols not found"
at link time under ORC, where MCJIT links silently and crashes at the call. Every external
function the emitter declares, and those LLVM's optimiser is known to introduce, is registered
here by address. (Measured: llvmlite's LLJIT also resolves symbols of the running process, so
a symbol missing from this list may still link; the list is what the backend relies on.)

Pipeline per module: parse the IR text -> verify -> the new pass manager at -O3 for the host
CPU (so loops vectorise with the host's widest vectors) -> object code -> ORC link. The object
code is kept (`Compiled.object_code`): it is what a disk cache would store.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import hashlib
import itertools
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

import llvmlite.binding as llvm

_lock = threading.Lock()
_state: dict = {}
_names = itertools.count()

# libm functions the emitter may call, as (float32 name, float64 name) per scalar function.
LIBM = {
    "exp": ("expf", "exp"), "log": ("logf", "log"), "sin": ("sinf", "sin"),
    "cos": ("cosf", "cos"), "tan": ("tanf", "tan"), "tanh": ("tanhf", "tanh"),
    "erf": ("erff", "erf"), "pow": ("powf", "pow"), "asinh": ("asinhf", "asinh"),
    "acosh": ("acoshf", "acosh"), "atanh": ("atanhf", "atanh"), "fmod": ("fmodf", "fmod"),
    "floor": ("floorf", "floor"), "expm1": ("expm1f", "expm1"),
    "log1p": ("log1pf", "log1p"), "log2": ("log2f", "log2"), "log10": ("log10f", "log10"),
    "sinh": ("sinhf", "sinh"), "cosh": ("coshf", "cosh"), "asin": ("asinf", "asin"),
    "acos": ("acosf", "acos"), "atan": ("atanf", "atan"),
}
LIBC = ("memset", "memcpy", "memmove")
# Functions LLVM's optimiser may introduce on its own (pow(2, n) -> ldexp, sin+cos -> sincos,
# pow(2, x) -> exp2): registered too, so what a module calls never depends on the process.
LIBM_EXTRA = ("ldexpf", "ldexp", "exp2f", "exp2", "sincosf", "sincos", "exp10f", "exp10")

# CBLAS entry points of numpy's bundled OpenBLAS (64-bit integer interface).
BLAS_GEMM = {"float32": "scipy_cblas_sgemm64_", "float64": "scipy_cblas_dgemm64_"}


def _init():
    if "tm" in _state:
        return _state
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                      features=llvm.get_host_cpu_features().flatten(),
                                      opt=3, reloc="default", codemodel="jitdefault")
    _state["tm"] = tm
    _state["triple"] = llvm.get_process_triple()
    _state["lljit"] = llvm.create_lljit_compiler(tm)
    _state["symbols"] = _external_symbols()
    return _state


def _external_symbols() -> dict[str, int]:
    syms = {}
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    for names in LIBM.values():
        for name in names:
            syms[name] = ctypes.cast(getattr(libm, name), ctypes.c_void_p).value
    for name in LIBM_EXTRA:
        if hasattr(libm, name):
            syms[name] = ctypes.cast(getattr(libm, name), ctypes.c_void_p).value
    for name in LIBC:
        syms[name] = ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
    blas = openblas()
    if blas is not None:
        for name in BLAS_GEMM.values():
            syms[name] = ctypes.cast(getattr(blas, name), ctypes.c_void_p).value
    return syms


def openblas_path() -> str | None:
    """numpy's bundled OpenBLAS (the file name carries a per-build hash: glob for it)."""
    import numpy
    root = os.path.dirname(os.path.dirname(numpy.__file__))
    for pattern in ("numpy.libs/libscipy_openblas64_*.so*", "numpy/.dylibs/libscipy_openblas64_*",
                    "numpy.libs/libopenblas*.so*"):
        found = sorted(glob.glob(os.path.join(root, pattern)))
        if found:
            return found[0]
    return None


def openblas():
    if "blas" not in _state:
        path = openblas_path()
        lib = ctypes.CDLL(path) if path else None
        if lib is not None and not all(hasattr(lib, n) for n in BLAS_GEMM.values()):
            lib = None
        _state["blas"] = lib
    return _state["blas"]


def has_blas() -> bool:
    return openblas() is not None


def host_triple() -> str:
    return _init()["triple"]


def target_data() -> str:
    return str(_init()["tm"].target_data)


@dataclass
class Compiled:
    """A linked library: `address(name)` of exported functions stays valid while this lives."""
    tracker: object
    optimized_ir: str
    object_code: bytes

    def address(self, name: str) -> int:
        return self.tracker[name]


def optimize(module_ref, speed_level: int = 3):
    tm = _init()["tm"]
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module_ref, pb)


_cache: OrderedDict = OrderedDict()
CACHE_SIZE = 256  # linked libraries kept for reuse; a dropped one lives on in its programs


def compile_ir(ir_text: str, exports: list[str], opt: int = 3) -> Compiled:
    """Optimise `ir_text` for the host, emit object code, link it into the process JIT.
    Cached in memory by the IR text: two programs that lower to the same module share one
    library (a module refers to nothing outside itself but the symbols registered here)."""
    st = _init()
    key = hashlib.sha256(f"{opt}|{','.join(exports)}|{ir_text}".encode()).hexdigest()
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
        if opt:
            optimize(mod, opt)
        optimized = str(mod)
        obj = st["tm"].emit_object(mod)
        builder = llvm.JITLibraryBuilder().add_object_img(obj)
        for name, addr in st["symbols"].items():
            builder.import_symbol(name, addr)
        for name in exports:
            builder.export_symbol(name)
        tracker = builder.link(st["lljit"], f"inplace_cpu_{next(_names)}")
        compiled = _cache[key] = Compiled(tracker, optimized, obj)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
        return compiled
