"""The CPU fiber harness: runs a `GpuModule`'s CUDA C on the host, for tests without a GPU.

`run_on_cpu(module, inputs, outputs)` compiles `module.source` unchanged (but for one token
rename, see `cuda_host.h`) together with `cuda_host.h`, which maps the CUDA built-ins onto
fibers, and a generated driver: one C++ function per launch of `module.launches` (a kernel
launch over its grid, or a "cublas" GEMM through a reference GEMM) and one entry that runs
them in order over a host arena of `module.arena_bytes`. g++ -O1 builds a shared library,
cached on disk by a hash of everything it was built from; ctypes loads and runs it.

16-bit floats: `cuda_host.h` stands in for cuda_fp16.h / cuda_bf16.h (`__half`,
`__nv_bfloat16` and their round-to-nearest-even conversions, bit for bit as the device's
`cvt.rn`), so the module's own PTX definitions step aside; a float16 or bfloat16 GEMM launch
is checked to be cublasGemmEx's (CUDA_R_16F / CUDA_R_16BF, CUBLAS_COMPUTE_32F, float alpha
and beta) and run by the reference GEMM in double, rounded once.

What the harness checks beyond the values (each a `HarnessError` naming the launch, kernel,
block and thread):
  - a block whose threads can't all pass a barrier (`__syncthreads()` in a divergent branch,
    a warp collective a lane never reaches) is a deadlock on a GPU: an error here, not a hang;
  - the arena, the inputs and the outputs each lie between two inaccessible pages, with
    canary bytes in the slack: a kernel that reads or writes outside them faults or leaves a
    canary changed, reported after its launch (SIGSEGV/SIGFPE are caught while kernels run);
  - the arena, the outputs and shared memory start out as 0xFF bytes (NaN as a float), as
    uninitialised device memory might, so a read before a write shows in the values;
  - pointer arguments must lie inside their buffer; GEMM leading dimensions are checked as
    cuBLAS does.
"""
from __future__ import annotations

import copy
import ctypes
import hashlib
import math
import mmap
import os
import re
import subprocess
import tempfile
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.gpu.executable import raise_data_error
from runtime.gpu.launch import (CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16F, GEMM_EX, GpuModule,
                               Launch)

HEADER = Path(__file__).with_name("cuda_host.h")
# (-ffp-contract=off: no a*b+c fused into one rounding, as on the device with --fmad=false)
FLAGS = ("-std=c++17", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-fvisibility=hidden",
         "-fwrapv",
         "-fno-strict-aliasing", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0")
POISON = 0xFF   # arena and outputs before the run: NaN as float32/float64, -1 as an integer
CANARY = 0xA5   # the slack around every buffer (cuda_host::CANARY)
ALIGN = 256     # every buffer's start, as a CUDA allocation's
SCHEDULES = ("forward", "reverse")

_INT_CTYPES = {"int", "unsigned int", "long", "unsigned long", "long long",
               "unsigned long long", "short", "unsigned short", "char", "signed char",
               "unsigned char", "bool", "size_t", "int32_t", "uint32_t", "int64_t",
               "uint64_t"}
_FLOAT_CTYPES = {"float", "double"}


class HarnessError(RuntimeError):
    """A launch that failed on the host: a deadlock, a fault, an overrun, a bad launch."""


class HarnessCompileError(HarnessError):
    """g++ rejected the module (the message carries its log)."""


@dataclass
class HarnessResult:
    outputs: list          # the returned buffers, as arrays of the requested shapes
    inputs: list           # the inputs after the run (mutated ones hold their new values)
    arena: np.ndarray      # the arena's bytes after the run


# ---- the translation unit ------------------------------------------------------------------

_EXTERN_SHARED = re.compile(r"\bextern((?:\s+__align__\s*\([^)]*\))*)(\s+)__shared__\b")
_DYNAMIC_NAME = re.compile(r"\bextern[^;]*?__cuda_dynamic_shared__[^;]*?\b([A-Za-z_]\w*)"
                           r"\s*\[\s*\]\s*;")


def _c_int(ctype: str, value) -> str:
    v = int(value)
    if ctype.startswith("unsigned") or ctype.startswith("uint") or ctype == "size_t":
        return f"(({ctype}){v % 2 ** 64}ULL)"
    if not -2 ** 63 <= v < 2 ** 63:
        raise HarnessError(f"scalar {v} does not fit a {ctype}")
    # -2**63 has no literal: write it as an expression
    return f"(({ctype})({v + 1}LL - 1))" if v == -2 ** 63 else f"(({ctype}){v}LL)"


def _c_float(ctype: str, value) -> str:
    v = float(value)
    if math.isnan(v):
        return f"(({ctype})NAN)"
    if math.isinf(v):
        return f"(({ctype}){'-' if v < 0 else ''}INFINITY)"
    return f"(({ctype}){v.hex()})"   # exact: the double's bits, rounded once by the cast


def _scalar(ctype: str, value) -> str:
    if ctype in _FLOAT_CTYPES:
        return _c_float(ctype, value)
    if ctype in _INT_CTYPES:
        return _c_int(ctype, value)
    raise HarnessError(f"scalar argument of unknown C type {ctype!r}")


def _argument(arg, where: str) -> str:
    kind = arg[0] if isinstance(arg, tuple) and arg else None
    if kind == "arena" and len(arg) == 2:
        return f"cuda_host_ptr{{arena + {int(arg[1])}LL}}"
    if kind in ("input", "output") and len(arg) == 3:
        table = "in" if kind == "input" else "out"
        return f"cuda_host_ptr{{{table}[{int(arg[1])}] + {int(arg[2])}LL}}"
    if kind == "scalar" and len(arg) == 3:
        return _scalar(arg[1], arg[2])
    raise HarnessError(f"{where}: argument {arg!r} is not one of launch.py's forms")


def _plain(arg, where: str):
    """A GEMM size, leading dimension or flag: a scalar launch argument or a bare value."""
    if isinstance(arg, tuple) and len(arg) == 3 and arg[0] == "scalar":
        return arg[2]
    if isinstance(arg, (int, float, str, np.integer, np.floating)):
        return arg
    raise HarnessError(f"{where}: {arg!r} is not a scalar")


def _trans(flag, where: str) -> bool:
    flag = _plain(flag, where)
    if isinstance(flag, str):   # "N", "T", "CUBLAS_OP_T", ...
        letter = flag.strip().upper()[-1:]
        if letter in ("N", "T", "C"):
            return letter != "N"
    elif int(flag) in (0, 1, 2):  # cublasOperation_t: N, T, C (C is T for real types)
        return int(flag) != 0
    raise HarnessError(f"{where}: transpose flag {flag!r} is not N, T or C")


def _gemm_call(launch: Launch, where: str) -> str:
    if launch.kernel != "gemm" or len(launch.args) != 13:
        raise HarnessError(f"{where}: a cublas launch must be 'gemm' with 13 arguments "
                           f"(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)")
    ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc = launch.args
    ta, tb = _trans(ta, where), _trans(tb, where)
    m, n, k, lda, ldb, ldc = (int(_plain(x, where)) for x in (m, n, k, lda, ldb, ldc))
    # sgemm or dgemm: the launch's dtype (launch.py), else the type of a scalar alpha; a
    # 16-bit dtype is cublasGemmEx: its data and compute types as the executable passes them
    dtype = getattr(launch, "dtype", None)
    elem = None
    if dtype in GEMM_EX:
        data_type, compute = GEMM_EX[dtype]
        elem = {CUDA_R_16F: "__half", CUDA_R_16BF: "__nv_bfloat16"}.get(data_type)
        ctype = "float" if compute == CUBLAS_COMPUTE_32F else None
        if elem is None or ctype is None or any(
                not (isinstance(x, tuple) and x[0] == "scalar" and x[1] == "float")
                for x in (alpha, beta)):
            raise HarnessError(f"{where}: a {dtype} GEMM is cublasGemmEx with CUDA_R_16F or "
                               f"CUDA_R_16BF data, CUBLAS_COMPUTE_32F and float alpha and "
                               f"beta, not {GEMM_EX[dtype]}, {alpha!r}, {beta!r}")
    elif dtype is not None:
        ctype = {"float32": "float", "float64": "double"}.get(np.dtype(dtype).name)
    else:
        ctype = alpha[1] if isinstance(alpha, tuple) and alpha[0] == "scalar" else None
    if ctype not in _FLOAT_CTYPES:
        raise HarnessError(f"{where}: a GEMM of {dtype or 'unknown type'}: the launch needs "
                           f"dtype float32, float64 (sgemm, dgemm), float16 or bfloat16 "
                           f"(cublasGemmEx)")
    # cuBLAS's CUBLAS_STATUS_INVALID_VALUE conditions
    if min(m, n, k) < 0 or lda < max(1, k if ta else m) or ldb < max(1, n if tb else k) \
            or ldc < max(1, m):
        raise HarnessError(f"{where}: invalid GEMM m={m} n={n} k={k} lda={lda} ldb={ldb} "
                           f"ldc={ldc} (transa={'T' if ta else 'N'}, "
                           f"transb={'T' if tb else 'N'}), cuBLAS would refuse it")
    alpha, beta = (_scalar(ctype, _plain(x, where)) for x in (alpha, beta))
    ptrs = [_argument(x, where) for x in (a, b, c)]
    types = ctype if elem is None else f"{elem}, {ctype}"
    return (f"cuda_host::gemm<{types}>({int(ta)}, {int(tb)}, {m}, {n}, {k}, {alpha}, "
            f"{ptrs[0]}, {lda}, {ptrs[1]}, {ldb}, {beta}, {ptrs[2]}, {ldc});")


def _dim3(value, what: str, where: str) -> str:
    dims = tuple(int(v) for v in value)
    if len(dims) != 3 or min(dims) < 1:
        raise HarnessError(f"{where}: {what} {value!r} is not three positive sizes")
    # the device's limits (CUDA Programming Guide, "Compute Capabilities"): a launch past
    # them fails on a GPU with cudaErrorInvalidConfiguration, so it must fail here too
    limits = (1024, 1024, 64) if what == "block" else (2 ** 31 - 1, 65535, 65535)
    if any(d > m for d, m in zip(dims, limits)) or (what == "block" and math.prod(dims) > 1024):
        raise HarnessError(f"{where}: {what} {dims} exceeds the device's limits "
                           f"({'at most 1024 threads, ' if what == 'block' else ''}"
                           f"each dimension at most {limits})")
    return f"dim3({dims[0]}u, {dims[1]}u, {dims[2]}u)"


_BARRIER = re.compile(r"\b(?:__syncthreads\w*|__syncwarp|__shfl\w*_sync|__ballot_sync|"
                      r"__any_sync|__all_sync|__activemask)\b")
_FUNCTION = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)(.*(?:\\\n.*)*)", re.M)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof"}


def blocking_functions(source: str) -> set[str]:
    """The functions (and macros) of `source` that may reach a barrier or a warp collective,
    directly or through what they call: a conservative scan of the text (a kernel it misses
    fails loudly at run time, see cuda_host::not_direct). Kernels outside it run without
    fibers."""
    source = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)
    close, open_ = {}, []   # each "{" -> its "}"
    for m in re.finditer(r"[{}]", source):
        if m.group() == "{":
            open_.append(m.start())
        elif open_:
            close[open_.pop()] = m.start()
    bodies: dict[str, list[str]] = {}
    for m in _FUNCTION.finditer(source):
        if m.group(1) not in _NOT_FUNCTIONS:
            end = close.get(m.end() - 1, len(source))
            bodies.setdefault(m.group(1), []).append(source[m.end():end])
    for m in _DEFINE.finditer(source):
        bodies.setdefault(m.group(1), []).append(m.group(2))
    text = {name: "\n".join(parts) for name, parts in bodies.items()}
    blocking = {name for name, body in text.items() if _BARRIER.search(body)}
    while True:
        calls = re.compile(r"\b(?:" + "|".join(map(re.escape, blocking)) + r")\b") \
            if blocking else None
        more = {name for name, body in text.items()
                if name not in blocking and calls is not None and calls.search(body)}
        if not more:
            return blocking
        blocking |= more


_ENTRY_PARAMS = ("char *arena, char **in, char **out, const long long *guards, int nguards, "
                 "int schedule, char **stacks, int nstacks, long stack_size, char *err, "
                 "int errlen")
_EXTERN_C = re.compile(r'\bextern\s+"C"\s*')


def _program(module: GpuModule, namespace: str | None = None) -> str:
    """The kernels and the driver of `module`, and its entry: `harness_run`, or in a batch
    (`namespace`: the source's `extern "C"` dropped, so that kernels of different modules
    may share names) `harness_run_<namespace>`."""
    source = _EXTERN_SHARED.sub(r"extern\1\2__cuda_dynamic_shared__", module.source)
    if namespace:
        source = _EXTERN_C.sub("", source)
    dynamic = list(dict.fromkeys(_DYNAMIC_NAME.findall(source)))
    # the symbols of `extern __shared__` arrays (Itanium C++ ABI names inside a namespace)
    symbol = {name: f"_ZN{len(namespace)}{namespace}{len(name)}{name}E" if namespace else name
              for name in dynamic}
    dyn_bytes = max([ln.shared_bytes for ln in module.launches if ln.library is None] + [0])
    out = [f"namespace {namespace} {{" if namespace else "", '#line 1 "kernels.cu"', source,
           "", '#line 1 "driver.cpp"']
    if dynamic:
        # one storage for every `extern __shared__` name: the names alias, as on a GPU
        out.append(f'alignas(256) static unsigned char __harness_dyn[{max(dyn_bytes, 1)}] '
                   f'asm("{symbol[dynamic[0]]}") __attribute__((used));')
        for name in dynamic[1:]:
            out.append(f'asm(".globl {symbol[name]}\\n.hidden {symbol[name]}\\n'
                       f'.set {symbol[name]}, {symbol[dynamic[0]]}");')
        dyn = f"(char *)__harness_dyn, {max(dyn_bytes, 1)}"
    else:
        dyn = "nullptr, 0"
    steps = []
    blocking = blocking_functions(module.source)
    called = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", module.source))
    for i, launch in enumerate(module.launches):
        where = f"launch {i} ({launch.kernel}, node {launch.node})"
        out.append(f"static int __harness_step{i}(char *arena, char **in, char **out) {{")
        out.append("    (void)arena; (void)in; (void)out;")
        if launch.library == "cublas":
            out.append(f"    {_gemm_call(launch, where)}")
            out.append("    return 0;")
        elif launch.library is None:
            if launch.kernel not in called:
                raise HarnessError(f"{where}: no kernel {launch.kernel!r} in the source")
            args = ", ".join(_argument(a, where) for a in launch.args)
            out.append(f"    auto call = [=] {{ {launch.kernel}({args}); }};")
            out.append(f'    return cuda_host::launch_kernel("{launch.kernel}", '
                       f'{_dim3(launch.grid, "grid", where)}, '
                       f'{_dim3(launch.block, "block", where)}, {int(launch.shared_bytes)}, '
                       f'call, {dyn}, {str(launch.kernel in blocking).lower()});')
        else:
            raise HarnessError(f"{where}: unknown library {launch.library!r}")
        out.append("}")
        node = -1 if launch.node is None else int(launch.node)
        steps.append(f'    {{"{launch.kernel}", {node}, __harness_step{i}}},')
    out.append("static const cuda_host::Step __harness_steps[] = {")
    out += steps or ['    {"", -1, nullptr},']
    out.append("};")
    if namespace:
        out.append("}")
    scope = f"{namespace}::" if namespace else ""
    out.append(f'extern "C" __attribute__((visibility("default"))) int '
               f'harness_run{"_" + namespace if namespace else ""}({_ENTRY_PARAMS}) {{')
    out.append(f"    return cuda_host::run_steps({scope}__harness_steps, "
               f"{len(module.launches)}, arena, in, out, guards, nguards, schedule, stacks, "
               "nstacks, stack_size, err, errlen);")
    out.append("}")
    return "\n".join(out) + "\n"


def translation_unit(module: GpuModule) -> str:
    """The C++ that g++ compiles: the header, the kernels and the driver."""
    return f'#include "{HEADER}"\n' + _program(module)


_UNITS: dict = {}   # id(module) -> (weak reference, launch count, source, unit, key)


def _unit_and_key(module: GpuModule) -> tuple[str, str]:
    """`translation_unit(module)` and its cache key, remembered per module object (a program
    runs many times; scanning a large source each time would cost more than the run)."""
    memo = _UNITS.get(id(module))
    if memo is not None and memo[0]() is module and memo[1] == len(module.launches) \
            and memo[2] is module.source:
        return memo[3], memo[4]
    unit = translation_unit(module)
    key = _key(unit)
    _UNITS[id(module)] = (weakref.ref(module), len(module.launches), module.source, unit, key)
    return unit, key


# ---- compiling, with a cache on disk -------------------------------------------------------

_LOADED: dict = {}   # key -> the library's entry point
_GXX_VERSION: list[str] = []


def cache_dir() -> Path:
    """Where built libraries are kept: $INPLACE_HARNESS_CACHE or a per-user temp folder."""
    path = os.environ.get("INPLACE_HARNESS_CACHE")
    return Path(path) if path else Path(tempfile.gettempdir()) / f"inplace-harness-{os.getuid()}"


def _gxx() -> str:
    return os.environ.get("CXX", "g++")


def _gxx_version() -> str:
    if not _GXX_VERSION:
        try:
            run = subprocess.run([_gxx(), "--version"], capture_output=True, text=True)
        except FileNotFoundError as e:
            raise HarnessCompileError(f"no C++ compiler: {_gxx()} not found") from e
        _GXX_VERSION.append(run.stdout)
    return _GXX_VERSION[0]


def available() -> bool:
    """Whether the harness can build here (a g++ on PATH, a POSIX host)."""
    try:
        _gxx_version()
    except HarnessCompileError:
        return False
    return os.name == "posix"


def _key(unit: str) -> str:
    return hashlib.sha256("\0".join(
        [_gxx_version(), " ".join(FLAGS), HEADER.read_text(), unit]).encode()).hexdigest()[:32]


def _build(unit: str, key: str) -> Path:
    """The library of `unit` in the cache, built unless it is there already."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / f"{key}.so"
    if not lib.exists():
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src = Path(tmp) / "unit.cpp"
            src.write_text(unit)
            built = Path(tmp) / "unit.so"
            run = subprocess.run([_gxx(), *FLAGS, str(src), "-o", str(built)],
                                 capture_output=True, text=True)
            if run.returncode:
                raise HarnessCompileError("g++ could not build the module:\n"
                                          + run.stderr[-6000:])
            os.replace(built, lib)   # atomic: a concurrent build of the same key is harmless
    return lib


def _entry(lib: Path, name: str):
    entry = getattr(ctypes.CDLL(str(lib)), name)
    entry.restype = ctypes.c_int
    entry.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                      ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong),
                      ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                      ctypes.c_int, ctypes.c_long, ctypes.c_char_p, ctypes.c_int]
    return entry


def compile_module(module: GpuModule):
    """The entry point (a ctypes function) of `module`'s library: built, or from the cache
    (in this process, or on disk: its own library or a batch `prebuild` made)."""
    unit, key = _unit_and_key(module)
    if key not in _LOADED:
        folder = cache_dir()
        batch = folder / f"{key}.entry"
        if not (folder / f"{key}.so").exists() and batch.exists():
            lib, name = batch.read_text().split()
            _LOADED[key] = _entry(folder / lib, name)
        else:
            _LOADED[key] = _entry(_build(unit, key), "harness_run")
    return _LOADED[key]


_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)", re.M)


def _batchable(module: GpuModule) -> bool:
    """Whether the module can share a translation unit: no preprocessor lines but
    conditionals (a macro would leak into the next module; the 16-bit float types' `#if`
    guards don't) and no `extern "C" {` block (a namespace can't hold it)."""
    directives = set(_DIRECTIVE.findall(module.source))
    return directives <= {"if", "ifdef", "ifndef", "else", "elif", "endif"} \
        and not re.search(r'extern\s+"C"\s*\{', module.source)


def _build_batch(group) -> None:
    """One library for `group` ((key, module) pairs), each module in namespace m<key>; a
    `<key>.entry` file points its key at it. If g++ refuses the batch, each module is built
    alone (so a failure raises with that module's own log)."""
    text = f'#include "{HEADER}"\n' + "".join(_program(m, f"m{k}") for k, m in group)
    try:
        lib = _build(text, _key(text))
    except HarnessCompileError:
        for k, m in group:
            _build(translation_unit(m), k)
        return
    for k, _ in group:
        tmp = cache_dir() / f"{k}.entry.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(f"{lib.name} harness_run_m{k}")
        os.replace(tmp, cache_dir() / f"{k}.entry")


def prebuild(modules, jobs: int | None = None, batch: int = 24,
             batch_chars: int = 400_000) -> None:
    """Build the libraries of many modules ahead of their runs, so that a test over many
    programs spends less time compiling: up to `batch` modules (and `batch_chars` of source)
    share one translation unit (the header is parsed once, g++ starts once), and `jobs` g++
    processes run side by side (one per core by default). Later `run_on_cpu` calls find
    the libraries in the cache. A module g++ refuses raises here, with its log."""
    folder = cache_dir()
    todo = {}
    for module in modules:
        _, key = _unit_and_key(module)
        if key not in _LOADED and not (folder / f"{key}.so").exists() \
                and not (folder / f"{key}.entry").exists():
            todo[key] = module
    groups, singles, size = [[]], [], 0
    for key, module in todo.items():
        if not _batchable(module):
            singles.append((key, module))
            continue
        if len(groups[-1]) >= batch or (groups[-1] and size + len(module.source) > batch_chars):
            groups.append([])
            size = 0
        groups[-1].append((key, module))
        size += len(module.source)
    work = [(_build_batch, g) for g in groups if g]
    work += [(lambda km: _build(translation_unit(km[1]), km[0]), s) for s in singles]
    if not work:
        return
    workers = max(1, min(len(work), jobs or os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:   # threads: each waits on its g++ process
        for future in [pool.submit(fn, arg) for fn, arg in work]:
            future.result()


# ---- guarded host buffers ------------------------------------------------------------------

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class _Guarded:
    """`nbytes` bytes starting on an `align` boundary, between two inaccessible pages; the
    slack up to the pages holds canary bytes, so an overrun faults or shows."""

    def __init__(self, nbytes: int, align: int = ALIGN):
        page = mmap.PAGESIZE
        body = -(-max(nbytes, 1) // align) * align
        span = -(-body // page) * page
        self._map = mmap.mmap(-1, span + 2 * page)
        whole = np.frombuffer(self._map, np.uint8)
        base = whole.ctypes.data
        for at in (base, base + page + span):
            if _LIBC.mprotect(at, page, 0):
                raise OSError(ctypes.get_errno(), "mprotect failed")
        start = page + span - body   # the end of the data touches the upper guard page
        whole[page:page + span] = CANARY
        self.nbytes = nbytes
        self.data = whole[start:start + nbytes]
        self.address = base + start
        self.guards = [(base + page, start - page),
                       (base + start + nbytes, page + span - start - nbytes)]


class _Stacks:
    """The fiber stacks of every library in the process: one pool (a guard page below each),
    grown to the most threads per block any module has launched; one run at a time uses it
    (`_RUN_LOCK`). 256 KiB each, committed only where touched."""

    BYTES = 256 * 1024

    def __init__(self):
        self._maps, self._addresses = [], []

    def get(self, n: int):
        page = mmap.PAGESIZE
        while len(self._addresses) < n:
            m = mmap.mmap(-1, self.BYTES + page)
            base = np.frombuffer(m, np.uint8).ctypes.data
            if _LIBC.mprotect(base, page, 0):
                raise OSError(ctypes.get_errno(), "mprotect failed")
            self._maps.append(m)
            self._addresses.append(base + page)
        return (ctypes.c_void_p * max(n, 1))(*self._addresses[:n])


_STACKS = _Stacks()
_RUN_LOCK = threading.Lock()


def _output_spec(spec, i):
    if isinstance(spec, np.ndarray):
        return spec.shape, spec.dtype
    try:
        shape, dtype = spec
        return tuple(int(s) for s in shape), np.dtype(dtype)
    except (TypeError, ValueError) as e:
        raise HarnessError(f"output {i}: {spec!r} is neither an array nor (shape, dtype)") from e


def _input_buffers(arrays):
    """One guarded buffer per group of inputs that share memory (so a write through one is
    seen through the other, as on the device); each input's byte offset in its buffer."""
    spans = []
    for i, a in enumerate(arrays):
        low, high = np.lib.array_utils.byte_bounds(a) if hasattr(np.lib, "array_utils") \
            else np.byte_bounds(a)
        spans.append([low, high, i])
    groups = []   # [low, high, [indices]] of overlapping inputs, by address
    for low, high, i in sorted(spans):
        if groups and low < groups[-1][1] and arrays[i].nbytes:
            groups[-1][1] = max(groups[-1][1], high)
            groups[-1][2].append(i)
        else:
            groups.append([low, high, [i]])
    buffers, place = [], [None] * len(arrays)
    for low, high, members in groups:
        if len(members) > 1:
            for i in members:
                if not arrays[i].flags.c_contiguous:
                    raise HarnessError(f"input {i} shares memory with input {members[0]} "
                                       f"and is not C-contiguous")
        buf = _Guarded(high - low)
        if high > low:
            buf.data[:] = np.ctypeslib.as_array((ctypes.c_uint8 * (high - low))
                                                .from_address(low))
        buffers.append(buf)
        for i in members:
            place[i] = (buf, spans[i][0] - low)
    return buffers, place


def _check_bounds(module: GpuModule, sizes: dict):
    for i, launch in enumerate(module.launches):
        for arg in launch.args:
            if not (isinstance(arg, tuple) and arg and arg[0] in ("arena", "input", "output")):
                continue
            key = ("arena", 0) if arg[0] == "arena" else (arg[0], int(arg[1]))
            offset = int(arg[-1])
            if key not in sizes:
                raise HarnessError(f"launch {i} ({launch.kernel}, node {launch.node}): "
                                   f"{arg[0]} {key[1]} does not exist")
            if not 0 <= offset <= sizes[key]:
                raise HarnessError(f"launch {i} ({launch.kernel}, node {launch.node}): "
                                   f"offset {offset} lies outside {arg[0]} {key[1]} "
                                   f"({sizes[key]} bytes)")


def run_on_cpu(module: GpuModule, inputs=(), outputs=(), schedule: str = "forward"
               ) -> HarnessResult:
    """Run every launch of `module` in order on the host and return the outputs and inputs.

    `inputs`: the caller's arguments (arrays or scalars), copied into host buffers (C order)
    and never written; inputs that share memory share one buffer. `outputs`: one spec per
    returned buffer, an array (its shape and dtype) or a pair (shape, dtype); each is
    allocated per call. Returns copies of both, after the run.

    `schedule`: "forward" runs the threads of a block, and the blocks, in index order up to
    each barrier; "reverse" backwards. A race (a missing barrier) that one order hides, the
    other often shows, so tests run both.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r}: one of {SCHEDULES}")
    arrays = [np.ascontiguousarray(x) if isinstance(x, np.ndarray) else np.asarray(x)
              for x in inputs]
    buffers, place = _input_buffers(arrays)
    specs = [_output_spec(s, i) for i, s in enumerate(outputs)]
    outs = []
    for shape, dtype in specs:
        buf = _Guarded(math.prod(shape) * dtype.itemsize)
        buf.data[:] = POISON
        outs.append(buf)
    arena = _Guarded(module.arena_bytes, max(ALIGN, module.arena_alignment))
    arena.data[:] = POISON
    sizes = {("arena", 0): module.arena_bytes}
    sizes.update({("input", i): a.nbytes for i, a in enumerate(arrays)})
    sizes.update({("output", i): b.nbytes for i, b in enumerate(outs)})
    _check_bounds(module, sizes)
    entry = compile_module(module)

    ptrs = ctypes.c_void_p * max(1, len(arrays), len(outs))
    in_ptrs = ptrs(*[buf.address + off for buf, off in place])
    out_ptrs = ptrs(*[b.address for b in outs])
    guards = [g for b in [arena, *buffers, *outs] for g in b.guards]
    guard_arr = (ctypes.c_longlong * (2 * len(guards)))(*[v for g in guards for v in g])
    err = ctypes.create_string_buffer(2048)
    threads = max([math.prod(ln.block) for ln in module.launches if ln.library is None] + [0])
    with _RUN_LOCK:
        failed = entry(arena.address, in_ptrs, out_ptrs, guard_arr, len(guards),
                       SCHEDULES.index(schedule), _STACKS.get(threads), threads,
                       _Stacks.BYTES, err, len(err))
    if failed:
        raise HarnessError(err.value.decode(errors="replace"))

    def array(buf, offset, shape, dtype):
        n = math.prod(shape) * dtype.itemsize
        return buf.data[offset:offset + n].view(dtype).reshape(shape).copy()

    return HarnessResult(
        outputs=[array(b, 0, shape, dtype) for b, (shape, dtype) in zip(outs, specs)],
        inputs=[array(buf, off, a.shape, a.dtype) for (buf, off), a in zip(place, arrays)],
        arena=arena.data.copy())


# ---- a whole program -----------------------------------------------------------------------

class HostExecutable:
    """A gpu executable (`runtime.gpu.executable.GpuExecutable`: its `module`, `places`,
    `plan`, per-call output buffers) whose launch list runs on the host: `run(inputs) ->
    (outputs, mutations)` as every backend's executable, so a `Program` runs through it with
    all of its call semantics (argument binding, write-back of mutated arguments, the
    returned structure)."""

    def __init__(self, gpu, schedule: str = "forward", module: GpuModule | None = None):
        self.gpu, self.schedule = gpu, schedule
        self.graph, self.plan = gpu.graph, gpu.plan
        self.module = gpu.module if module is None else module   # (tests run edited ones)
        self.source = self.module.source

    def run(self, inputs):
        flat = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in inputs]
        sizes = [max(b.size, 1) for b in self.gpu._output_buffers]
        result = run_on_cpu(self.module, flat, [((n,), np.uint8) for n in sizes],
                            self.schedule)
        at = self.module.status_offset
        if at is not None:   # as the device executable: raise before anything is returned
            status = int(result.arena[at:at + 8].view(np.uint64)[0])
            if status:
                raise_data_error(self.graph, status - 1, inputs)

        def host(v):
            place = self.gpu.places[id(v)]
            kind, k = place.slot
            if kind == "input":
                storage = result.inputs[k]
            elif kind == "output":
                storage = result.outputs[k]
            else:
                storage = result.arena[self.plan.buffers[k].offset:]
            item = place.dtype.itemsize
            # A zero-size view reads nothing: its planned offset may lie past its zero-byte
            # buffer (`x[:, -3]` of a [0, 4] value), which np.ndarray refuses (as the cpu
            # executable's `_view`).
            return np.ndarray(place.shape, place.dtype, buffer=storage,
                              offset=0 if 0 in place.shape else place.offset * item,
                              strides=tuple(s * item for s in place.strides)).copy()
        outs = [host(v) for v in self.graph.outputs]
        muts = {k: host(v) for k, v in self.graph.mutations.items()}
        return outs, muts


def on_host(prog, schedule: str = "forward", module: GpuModule | None = None):
    """A copy of `prog` (a `Program` lowered with backend="gpu") whose calls run its launch
    list (or `module`'s, an edited copy of it) on the host, through this harness, instead of
    on a device through CuPy."""
    host = copy.copy(prog)
    host._exec = HostExecutable(prog._exec, schedule, module)
    return host
