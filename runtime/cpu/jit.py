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
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import llvmlite
import llvmlite.binding as llvm
import llvmlite.binding.ffi as _ffi
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
    `source` says where the object code came from: "llvm" or "disk". `parts`: how the module
    was cut for LLVM (`plan_parts`), None when it was compiled whole; `object_code` is then
    the parts' objects packed into one blob (`_pack`)."""
    tracker: object
    object_code: bytes
    ir_text: str
    opt: int
    source: str = "llvm"
    _optimized: str | None = None
    parts: list | None = field(default=None, repr=False)

    def address(self, name: str) -> int:
        return self.tracker[name]

    @property
    def optimized_ir(self) -> str:
        """The module after the optimiser (recomputed on demand: the hit of a cache, and every
        compile since the text is not kept). A module compiled in parts gives each part's
        module after its own optimisation, one after the other (not one parseable module)."""
        if self._optimized is None:
            if self.parts is None:
                mod = llvm.parse_assembly(self.ir_text)
                if self.opt:
                    optimize(mod, self.opt)
                self._optimized = str(mod)
            else:
                texts = []
                for part in self.parts:
                    mod = llvm.parse_assembly(part.text)
                    if self.opt and not part.light:
                        optimize(mod, self.opt)
                    texts.append(f"; part {part.kind}\n{mod}")
                self._optimized = "\n".join(texts)
        return self._optimized


# Counts in this process: "llvm", the modules LLVM compiled; "hit", "miss", "store", "refused
# ...": the disk cache's (one Counter, so a test reads one place).
STATS = disk_cache.STATS


def optimize(module_ref, speed_level: int = 3, tm=None, unlocked: bool = False):
    """The new pass manager's default pipeline at `speed_level`, vectorisers on. `unlocked`:
    run the pipeline without llvmlite's process-wide lock (a module of its own LLVMContext,
    `tm` this thread's own: see `_raw`)."""
    tm = _init()["tm"] if tm is None else tm
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    if unlocked:
        _raw("LLVMPY_RunNewModulePassManager")(pm, module_ref, pb)
    else:
        pm.run(module_ref, pb)


_cache: OrderedDict = OrderedDict()
CACHE_SIZE = 256  # linked libraries kept for reuse; a dropped one lives on in its programs


# -- a module in parts: effort by kernel size, LLVM on several threads ------------------------
# A module whose entry is `optnone` (a long program: emitter.ENTRY_OPTNONE_MIN_NODES) is cut
# into parts (`plan_parts`), each parsed into an LLVMContext of its own:
#   - "light": the entry, the kernels the emitter compiles for size (`minsize`: it marks only
#     kernels whose bits don't depend on the optimisation level, `emitter.TINY_WORK`) and
#     straight-line functions without floating-point operations (`_light`: `.chunk`
#     wrappers, GEMM kernels calling BLAS), not optimised, their machine code from a target
#     machine at opt 0 (fast instruction selection and register allocation). The entry is
#     a list of calls that -O3 skipped already (`optnone`), but at opt 3 its code generation
#     still went through SelectionDAG and the greedy allocator (1,000-step loop: ~0.5 of the
#     module's 0.65-0.8 s of LLVM);
#   - "plain": loops without floating-point operations (copies, broadcasts, `where`), at -O3
#     as before, their machine code from the target machine at opt 0 (the same bits: no
#     arithmetic for the code generator to treat otherwise; LLVM's machine schedulers were
#     quadratic in a broadcast's unrolled block: 1.4 s of the cnn example's compile);
#   - "full": every other function, at -O3 as before, cut into up to COMPILE_THREADS groups
#     of about equal IR size (a kernel stays with its `.chunk` and `.after`), compiled on as
#     many threads (the light and plain parts on the calling thread, with the first group).
# llvmlite serialises all its calls with one process-wide lock; the two long ones (the pass
# pipeline, the code generator) go around it here (`_raw`), which LLVM allows for modules of
# distinct contexts and distinct target machines (its own ORC compiles on threads that way).
# A function called from another part loses `internal` linkage (the program's JITDylib keeps
# it apart from other programs' functions of the same name), so it keeps the C calling
# convention and its unused parameters where -O3 would have made it `fastcc` and dropped
# them: the 7 workloads' -O3 kernels assemble to the same instructions as in one module but
# for registers (benchmarks/compile_scaling.py --parts measures the rest).
# Threads: COMPILER_COMPILE_THREADS, else the CPUs this process may use, at most 4.
COMPILE_THREADS = max(1, int(os.environ.get("COMPILER_COMPILE_THREADS", "0") or 0)
                      or min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                             else os.cpu_count() or 1))
SPLIT = True  # False: one module, one thread, as before (the tests compare both)
UNLOCKED = True  # False: llvmlite's lock held (threads then take turns: the benchmark's check)
# A group of the full part worth a module and a thread of its own: at least this much IR
# text. An extra module costs ~4 ms of CPU (most of it LLVM's per-module set-up): a 24-layer
# MLP's full part (~17k characters) cost 0.02 s more CPU in two (0.18 -> 0.20 s, load 2.6,
# `compile_scaling.py --parts`), the transformer's (~120k) 0.03 s less.
THREAD_MIN_CHARS = 20000
# The light part's IR costs about a tenth of the full part's per character (1,000-step loop:
# its 301k-character entry ~0.15 s, the 26k characters of -O3 kernels ~0.13 s).
LIGHT_COST_SHARE = 10
# Loops without floating-point operations get a "plain" part of their own (code generated at
# opt 0) when they have at least this much IR text (an extra module's ~4 ms is then paid
# back: a broadcast of the cnn example, 1.4 s of machine scheduling at opt 3, 4 ms at opt 0).
PLAIN_MIN_CHARS = 3000

_DEFINE = re.compile(r'define (internal )?[^@]*@"([^"]+)"\((.*)\)[^)]*$')
_GLOBAL_REF = re.compile(r'@"([^"]+)"')
_LABEL = re.compile(r'^[^\s;]+:', re.MULTILINE)  # a basic block's label
_FLOAT_OP = re.compile(r"\b(fadd|fsub|fmul|fdiv|frem|fcmp|fneg|fptrunc|fpext|sitofp|uitofp|"
                       r"fptosi|fptoui)\b|@\"?llvm\.")
_PACK_MAGIC = b"INPLACE-PARTS 1\n"


@dataclass
class Part:
    """A module of its own (the original's header, declarations and metadata, and some of
    its functions). `kind`: "light" (not optimised, code generated at opt 0), "plain" (-O3,
    code generated at opt 0) or "full" (-O3, code generated at opt 3); `size`: characters of
    its function definitions (the cost estimate); `slot`: the thread that compiles it (0:
    the calling one)."""
    text: str
    kind: str
    size: int
    slot: int = 0

    @property
    def light(self) -> bool:
        return self.kind == "light"


def _items(ir_text: str):
    """The module's top-level items as (kind, name, text): "define", "declare", "global",
    "meta", "head". None for anything else (a module this cutter doesn't know: kept whole)."""
    out, lines, i = [], ir_text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define "):
            m = _DEFINE.match(line)
            try:
                j = lines.index("}", i)
            except ValueError:
                return None
            if m is None:
                return None
            out.append(("define", m.group(2), "\n".join(lines[i:j + 1])))
            i = j + 1
            continue
        if line.startswith("declare "):
            m = _GLOBAL_REF.search(line)
            if m is None:
                return None
            out.append(("declare", m.group(1), line))
        elif line.startswith("@"):
            m = _GLOBAL_REF.match(line)
            if m is None or " = internal constant " not in line:
                return None  # (a writable global would need one home, not a copy per part)
            out.append(("global", m.group(1), line))
        elif line.startswith("!"):
            out.append(("meta", None, line))
        elif line.startswith("target "):
            out.append(("head", None, line))
        elif line.strip() and not line.startswith(";"):
            return None  # types, attribute groups, comdats...: not what the emitter writes
        i += 1
    return out


def _declaration(define_text: str) -> str:
    """`declare` for a function defined in another part: its definition's first line (LLVM
    takes parameter names and attributes in a declaration too)."""
    head = define_text.split("\n", 1)[0].removeprefix("define ")
    return "declare " + head.removeprefix("internal ")


def _light(define_text: str) -> bool:
    """Is this function compiled in the light part? A kernel the emitter compiles for size
    (`minsize`: same bits at any optimisation level), or a straight-line function without a
    floating-point operation or intrinsic (a `.chunk` computing its range and calling its
    kernel, a GEMM kernel calling BLAS): integer and pointer arithmetic is exact, and a few
    instructions run once per call."""
    head, body = define_text.split("\n", 1)
    if " minsize " in head + " ":
        return True
    return _LABEL.search(body.split("\nentry:\n", 1)[-1]) is None \
        and _FLOAT_OP.search(body) is None


def plan_parts(ir_text: str, threads: int | None = None) -> list[Part] | None:
    """The parts of a module compiled in parts (see above), or None: compile it whole (a
    short program's entry is optimised with its kernels, as its call overhead matters)."""
    threads = COMPILE_THREADS if threads is None else threads
    if not SPLIT:
        return None
    items = _items(ir_text)
    if items is None:
        return None
    defs = {n: t for k, n, t in items if k == "define"}
    run = defs.get("run")
    if run is None or "optnone" not in run.split("\n", 1)[0]:
        return None
    light = {n for n, t in defs.items() if n == "run" or _light(t)}
    # Loops without floating-point operations (copies, broadcasts, `where`): -O3 as before,
    # their code generated at opt 0 (same bits: integer and select work is exact)...
    plain = {n for n, t in defs.items()
             if n not in light and _FLOAT_OP.search(t.split("\n", 1)[1]) is None}
    if sum(len(defs[n]) for n in plain) < PLAIN_MIN_CHARS:
        plain = set()  # (...when there are enough of them for a module of their own)
    # The full part's groups: a kernel with its .chunk and .after, largest first onto the
    # group with the least text (the light and plain parts share group 0's thread and count
    # for a share of their text: cheaper per character).
    kernels: dict[str, list[str]] = {}
    for n in defs:
        if n not in light and n not in plain:
            kernels.setdefault(n.split(".", 1)[0], []).append(n)
    cost = {k: sum(len(defs[n]) for n in ns) for k, ns in kernels.items()}
    first = (sum(len(defs[n]) for n in light) // LIGHT_COST_SHARE
             + sum(len(defs[n]) for n in plain) // 2)
    k = max(1, min(threads, len(kernels), sum(cost.values()) // THREAD_MIN_CHARS))
    while True:
        groups: list[list[str]] = [[] for _ in range(k)]
        load = [first] + [0] * (k - 1)
        for key in sorted(kernels, key=lambda key: -cost[key]):
            g = load.index(min(load))
            groups[g] += kernels[key]
            load[g] += cost[key]
        own = [load[0] - first] + load[1:]
        if k == 1 or min(own) >= THREAD_MIN_CHARS // 2:
            break
        k -= 1  # a group too small for a module and a thread of its own
    homes = [("light", light, 0)] + ([("plain", plain, 0)] if plain else []) \
        + [("full", set(g), slot) for slot, g in enumerate(groups) if g]
    home = {n: h for h, (_, names, _) in enumerate(homes) for n in names}
    refs = {n: set(_GLOBAL_REF.findall(t)) - {n} for n, t in defs.items()}
    crossed = {m for n in defs for m in refs[n] if m in defs and home[m] != home[n]}
    heads = [t for kind, _, t in items if kind == "head"]
    meta = [t for kind, _, t in items if kind == "meta"]
    parts = []
    for kind, names, slot in homes:
        used = set(names).union(*(refs[n] for n in names))
        texts = list(heads)
        texts += [t for what, n, t in items if what in ("global", "declare") and n in used]
        texts += [_declaration(defs[m]) for m in defs if m in used and m not in names]
        for n, t in defs.items():
            if n in names:
                texts.append(t.replace("define internal ", "define ", 1) if n in crossed else t)
        parts.append(Part("\n\n".join(texts + meta) + "\n", kind,
                          sum(len(defs[n]) for n in names), slot))
    return parts


def _raw(name: str):
    """llvmlite's C function `name` without its process-wide lock (the plain ctypes
    function: ctypes releases the GIL for the call); the locked one if llvmlite's wrapper
    ever changes shape."""
    fn = getattr(_ffi.lib, name)
    return getattr(fn, "_cfn", fn)


def _emit(tm, module_ref, unlocked: bool) -> bytes:
    """Object code of an optimised module (TargetMachine.emit_object, optionally unlocked)."""
    if not unlocked:
        return tm.emit_object(module_ref)
    with _ffi.OutputString() as err:
        mb = _raw("LLVMPY_TargetMachineEmitToMemory")(tm, module_ref, 1, err)
        if not mb:
            raise RuntimeError(str(err))
    try:
        return ctypes.string_at(_ffi.lib.LLVMPY_GetBufferStart(mb),
                                _ffi.lib.LLVMPY_GetBufferSize(mb))
    finally:
        _ffi.lib.LLVMPY_DisposeMemoryBuffer(mb)


def _target_machine(opt: int, slot: int):
    """A target machine per (opt level, thread slot): LLVM's target machines aren't shared
    between threads compiling at once (nor with the process's own, which the JIT and
    `optimized_ir` use without this module's lock)."""
    tms = _init().setdefault("tms", {})
    if (opt, slot) not in tms:
        tms[opt, slot] = llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
            opt=opt, reloc="default", codemodel="jitdefault")
    return tms[opt, slot]


def _compile_part(part: Part, opt: int, slot: int) -> bytes:
    """Parse, verify, optimise and emit one part, in an LLVMContext of its own."""
    tm = _target_machine(3 if part.kind == "full" else 0, slot)
    ctx = llvm.create_context()
    try:
        mod = llvm.parse_assembly(part.text, context=ctx)
        try:
            mod.verify()
            if opt and not part.light:
                optimize(mod, opt, _target_machine(3, slot), unlocked=UNLOCKED)
            return _emit(tm, mod, unlocked=UNLOCKED)
        finally:
            mod.close()
    finally:
        ctx.close()


def _compile_parts(parts: list[Part], opt: int) -> list[bytes]:
    """The parts' object codes, in order: each part on its slot's thread (slot 0: this one,
    the others on threads started here)."""
    objs: list = [None] * len(parts)
    errors: list = []

    def work(idxs, slot):
        try:
            for i in idxs:
                objs[i] = _compile_part(parts[i], opt, slot)
        except Exception as e:  # noqa: BLE001 - raised again on the calling thread
            errors.append(e)
    slots: dict[int, list[int]] = {}
    for i, part in enumerate(parts):
        slots.setdefault(part.slot, []).append(i)
    for slot in slots:  # (target machines created before the threads start)
        _target_machine(3, slot)
        _target_machine(0, slot)
    threads = [threading.Thread(target=work, args=(idxs, slot), daemon=True)
               for slot, idxs in slots.items() if slot]
    for t in threads:
        t.start()
    work(slots.get(0, []), 0)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return objs


def _pack(objs: list[bytes]) -> bytes:
    """Several object files as one blob (one disk cache entry): magic, sizes, objects."""
    if len(objs) == 1:
        return objs[0]
    head = " ".join(str(len(o)) for o in objs).encode() + b"\n"
    return _PACK_MAGIC + head + b"".join(objs)


def _unpack(blob: bytes) -> list[bytes]:
    if not blob.startswith(_PACK_MAGIC):
        return [blob]
    end = blob.index(b"\n", len(_PACK_MAGIC))
    sizes = [int(x) for x in blob[len(_PACK_MAGIC):end].split()]
    objs, at = [], end + 1
    for n in sizes:
        objs.append(blob[at:at + n])
        at += n
    if at != len(blob) or any(len(o) != n for o, n in zip(objs, sizes)):
        raise ValueError("a packed object blob of the wrong size")
    return objs


def _llvm_compile(ir_text: str, opt: int, parts: list[Part] | None = None) -> tuple[bytes, None]:
    """Parse, verify, optimise and emit object code: all the LLVM work of a module (in parts
    when `parts` is given). Returns (the object code, packed when in parts; None: the
    optimised IR is recomputed when asked, `Compiled.optimized_ir`)."""
    STATS["llvm"] += 1
    if parts is not None:
        return _pack(_compile_parts(parts, opt)), None
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    if opt:
        optimize(mod, opt)
    return _init()["tm"].emit_object(mod), None


def _link(obj: bytes, exports: list[str]):
    st = _init()
    builder = llvm.JITLibraryBuilder()
    for one in _unpack(obj):
        builder.add_object_img(one)
    for name, addr in st["symbols"].items():
        builder.import_symbol(name, addr)
    for name in exports:
        builder.export_symbol(name)
    return builder.link(st["lljit"], f"inplace_cpu_{next(_names)}")


def _build(parts: list[Part] | None) -> dict | None:
    """What the object code depends on besides the IR when compiled in parts (disk key)."""
    if parts is None:
        return None
    return {"parts": [(p.kind, len(p.text)) for p in parts],
            "scheme": "light: -, opt 0; plain: O3, opt 0; full: O3, opt 3"}


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
        parts = plan_parts(ir_text) if opt else None
        machine = st["machine"] if parts is None else dict(st["machine"], build=_build(parts))
        disk_key = disk_cache.entry_key(ir_text, exports, opt, machine)
        obj, optimized, source = disk_cache.load(disk_key), None, "disk"
        tracker = None
        if obj is not None:
            try:
                tracker = _link(obj, exports)
            except (RuntimeError, ValueError):  # an entry we wrote but LLVM can't link:
                STATS["refused: does not link"] += 1  # build it afresh
        if tracker is None:
            obj, optimized = _llvm_compile(ir_text, opt, parts)
            source = "llvm"
            tracker = _link(obj, exports)
            disk_cache.store(disk_key, obj, machine)
        compiled = _cache[key] = Compiled(tracker, obj, ir_text, opt, source, optimized, parts)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
        return compiled
