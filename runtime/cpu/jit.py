"""The JIT: one LLVM target machine for the host CPU, one ORC LLJIT per process, and the
external symbols generated code may call (libm, libc's mem* functions, numpy's OpenBLAS).

Why ORC and explicit symbols (measured with llvmlite here): an unresolved symbol raises "Symbols
not found" at link time under ORC, where MCJIT links silently and crashes at the call. Every
external
function the emitter declares, and those LLVM's optimiser is known to introduce, is registered
here by address. (Measured: llvmlite's LLJIT also resolves symbols of the running process, so
a symbol missing from this list may still link; the list is what the backend relies on.)

Pipeline per module: parse the IR text -> verify -> the new pass manager at -O3 for the host
CPU (so loops vectorise with the host's widest vectors) -> object code -> ORC link. The object
code is cached in memory (by the IR text) and on disk (`disk_cache.py`, keyed by the IR text,
the options and this machine): a hit links the stored object code into ORC
(`JITLibraryBuilder.add_object_img`, the same call a fresh compile uses) and runs no LLVM pass.
`STATS["llvm"]` counts the modules LLVM compiled in this process (the tests' hook).
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

import llvmlite
import llvmlite.binding as llvm
import numpy

from . import disk_cache

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
    # Everything besides the IR and the options that the object code depends on.
    _state["machine"] = {
        "cpu": llvm.get_host_cpu_name(), "features": llvm.get_host_cpu_features().flatten(),
        "triple": _state["triple"], "target": "opt=3 reloc=default codemodel=jitdefault",
        "llvmlite": llvmlite.__version__, "llvm": list(llvm.llvm_version_info)}
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


def register_symbol(name: str, address: int):
    """One more symbol modules linked from now on import (the pool's `inplace_parallel_for`)."""
    with _lock:
        _init()["symbols"][name] = address


def openblas_path() -> str | None:
    """numpy's bundled OpenBLAS (the file name carries a per-build hash: glob for it)."""
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


def machine_description() -> dict:
    """What object code depends on besides its IR: host CPU and features, triple, versions."""
    return _init()["machine"]


@dataclass
class Compiled:
    """A linked library: `address(name)` of exported functions stays valid while this lives.
    `source` says where the object code came from: "llvm" or "disk"."""
    tracker: object
    object_code: bytes
    ir_text: str
    opt: int
    source: str = "llvm"
    _optimized: str | None = None

    def address(self, name: str) -> int:
        return self.tracker[name]

    @property
    def optimized_ir(self) -> str:
        """The module after the optimiser (recomputed on demand for a disk-cache hit)."""
        if self._optimized is None:
            mod = llvm.parse_assembly(self.ir_text)
            if self.opt:
                optimize(mod, self.opt)
            self._optimized = str(mod)
        return self._optimized


# Counts in this process: "llvm", the modules LLVM compiled; "hit", "miss", "store", "refused
# ...": the disk cache's (one Counter, so a test reads one place).
STATS = disk_cache.STATS


def optimize(module_ref, speed_level: int = 3):
    tm = _init()["tm"]
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module_ref, pb)


_cache: OrderedDict = OrderedDict()
CACHE_SIZE = 256  # linked libraries kept for reuse; a dropped one lives on in its programs


def _llvm_compile(ir_text: str, opt: int) -> tuple[bytes, str]:
    """Parse, verify, optimise and emit object code: all the LLVM work of a module."""
    STATS["llvm"] += 1
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    if opt:
        optimize(mod, opt)
    return _init()["tm"].emit_object(mod), str(mod)


def _link(obj: bytes, exports: list[str]):
    st = _init()
    builder = llvm.JITLibraryBuilder().add_object_img(obj)
    for name, addr in st["symbols"].items():
        builder.import_symbol(name, addr)
    for name in exports:
        builder.export_symbol(name)
    return builder.link(st["lljit"], f"inplace_cpu_{next(_names)}")


def compile_ir(ir_text: str, exports: list[str], opt: int = 3) -> Compiled:
    """Optimise `ir_text` for the host, emit object code, link it into the process JIT.
    Cached in memory by the IR text: two programs that lower to the same module share one
    library (a module refers to nothing outside itself but the symbols registered here);
    and on disk (`disk_cache`), so that another process links the stored object code."""
    st = _init()
    key = hashlib.sha256(f"{opt}|{','.join(exports)}|{ir_text}".encode()).hexdigest()
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        disk_key = disk_cache.entry_key(ir_text, exports, opt, st["machine"])
        obj, optimized, source = disk_cache.load(disk_key), None, "disk"
        tracker = None
        if obj is not None:
            try:
                tracker = _link(obj, exports)
            except RuntimeError:  # an entry we wrote but LLVM can't link: build it afresh
                STATS["refused: does not link"] += 1
        if tracker is None:
            obj, optimized = _llvm_compile(ir_text, opt)
            source = "llvm"
            tracker = _link(obj, exports)
            disk_cache.store(disk_key, obj, st["machine"])
        compiled = _cache[key] = Compiled(tracker, obj, ir_text, opt, source, optimized)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
        return compiled
