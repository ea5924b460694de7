"""Fresh outputs: out-of-place `F.relu` on 64 MiB (float32 [1, 64, 512, 512]) on the cpu
backend, time, CPU time and minor page faults per call, against C loops writing fresh and warm
memory.

    python benchmarks/fresh_outputs.py            # 21 interleaved rounds, one core
    python benchmarks/fresh_outputs.py --repeat 5
    python benchmarks/fresh_outputs.py --threads 2  # the compiled columns on 2 threads

Columns, interleaved (one call of each per round), one process pinned to one core (to
`--threads` cores, the compiled program's threads; the C and NumPy loops stay serial):
- `cpu, reused`: the compiled relu as a caller meets it: the previous call's output was
  dropped, so its 2 MiB-aligned, huge-page-advised region comes back from the idle list
  (`runtime.arena`: no faults, no zeroing);
- `cpu, fresh`: the same with the idle list emptied (`arena.trim()`, untimed) before the call:
  a new mapping, 32 huge pages faulted and zeroed by the kernel, each as the loop's stores
  reach it (as in the C loop), on the thread that runs that chunk;
- `cpu, fresh, touched first`: `cpu, fresh` with the calling thread touching each huge page
  of the output before the kernel (`emitter.TOUCH_MIN_THREADS = 1`: what every call did
  before issue 25's fresh-output work; where the default is changed to touch, this column is
  `cpu, fresh, faulted by the loop`, the default's opposite);
- `cpu, 64-byte aligned`: the same program with the huge-page path off (`arena.HUGE_PAGE`
  raised past the output's size) and /proc/meminfo read before each call, as calls did before
  issue 25;
- `C, fresh` (the floor): a C loop (`y[i] = x[i] > 0 ? x[i] : 0`, gcc -O3 -march=native,
  compiled into a temporary directory when the benchmark starts) writing into a new anonymous
  mapping, 2 MiB aligned and advised MADV_HUGEPAGE, the mmap and madvise inside the timed call
  (unmapped after, untimed, as the other columns' outputs are freed): a C program's best with
  fresh memory;
- `C, warm`: the same loop into one reused buffer (no faults: the gap to `C, fresh` is what
  fresh memory costs);
- `C, fresh, streaming stores` and `C, warm, streaming stores`: the same two with
  non-temporal stores (`_mm256_stream_ps`, aligned, then `sfence`; same bits): what writing
  around the cache would buy an output written once and not read soon (the compiled loop
  has plain stores: LLVM's vectoriser leaves a loop with `!nontemporal` stores of unknown
  alignment scalar, one `movntss` per element);
- `numpy, fresh` and `numpy, warm`: `np.maximum(x, 0, out=y)` into the same kinds of memory
  (NumPy's loop is slower than ours here: not a floor).
Faults are `resource.getrusage(RUSAGE_SELF).ru_minflt` before and after the call; CPU time is
`time.process_time()` (steadier than wall time on a loaded machine). Every column's result is
compared bit for bit with NumPy's first. The target (issue 25): the cpu backend within 1.1x of
the fresh-memory floor (`C, fresh`). Figures depend on the machine's load: the load average is
printed before and after.
"""
from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import compiler as cc  # noqa: E402
import compiler.nn.functional as F  # noqa: E402
from runtime import arena  # noqa: E402
from runtime.cpu import emitter  # noqa: E402

SHAPE = (1, 64, 512, 512)


def fresh_mapping(nbytes: int) -> tuple[mmap.mmap, np.ndarray]:
    """A fresh anonymous mapping with a 2 MiB aligned, huge-page-advised float32 view."""
    huge = 2 << 20
    span = -(-nbytes // huge) * huge
    # private: an anonymous shared mapping is shmem, whose huge pages another switch governs
    mm = mmap.mmap(-1, span + huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(mm, np.uint8)
    start = (-raw.ctypes.data) % huge
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        mm.madvise(mmap.MADV_HUGEPAGE, start, span)
    return mm, raw[start:start + nbytes].view(np.float32)


C_SOURCE = r"""
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <immintrin.h>
#define HUGE ((size_t)2 << 20)

static void relu(const float *restrict x, float *restrict y, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* the same with non-temporal (streaming) stores: written around the cache, no read for
   ownership of the line. max(x, 0) returns its second operand for a NaN or equal zeros,
   as `x > 0 ? x : 0` does: the same bits. */
static void relu_stream(const float *restrict x, float *restrict y, size_t n) {
    size_t i = 0;
#ifdef __AVX__
    for (; i < n && (uintptr_t)(y + i) % 32; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    for (; i + 8 <= n; i += 8)
        _mm256_stream_ps(y + i, _mm256_max_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps()));
#else
    for (; i < n && (uintptr_t)(y + i) % 16; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    for (; i + 4 <= n; i += 4)
        _mm_stream_ps(y + i, _mm_max_ps(_mm_loadu_ps(x + i), _mm_setzero_ps()));
#endif
    for (; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    _mm_sfence();
}

/* relu (streaming: relu_stream) into a new 2 MiB-aligned, huge-page-advised mapping; *map
   and *len say what to unmap later (NULL: mmap failed) */
float *relu_fresh(const float *x, size_t n, void **map, size_t *len, int streaming) {
    size_t span = (n * sizeof(float) + HUGE - 1) / HUGE * HUGE;
    char *m = mmap(NULL, span + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) {
        *map = NULL;
        return NULL;
    }
    float *y = (float *)(m + (HUGE - (uintptr_t)m % HUGE) % HUGE);
    madvise(y, span, MADV_HUGEPAGE);
    (streaming ? relu_stream : relu)(x, y, n);
    *map = m;
    *len = span + HUGE;
    return y;
}

void relu_into(const float *x, float *y, size_t n) { relu(x, y, n); }

void relu_stream_into(const float *x, float *y, size_t n) { relu_stream(x, y, n); }

void unmap(void *map, size_t len) { munmap(map, len); }
"""


def c_library(tmp: str):
    """The C loops, compiled here and now (None, with the reason, where no compiler works)."""
    cc_ = shutil.which("gcc") or shutil.which("cc")
    if cc_ is None:
        return None, "no C compiler found"
    src, lib = os.path.join(tmp, "relu.c"), os.path.join(tmp, "librelu.so")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    r = subprocess.run([cc_, "-O3", "-march=native", "-shared", "-fPIC", src, "-o", lib],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"{cc_} failed: {r.stderr.strip()[:200]}"
    c = ctypes.CDLL(lib)
    c.relu_fresh.restype = ctypes.c_void_p
    c.relu_fresh.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                             ctypes.c_int]
    c.relu_into.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    c.relu_stream_into.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    c.unmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return c, f"{cc_} -O3 -march=native"


class _CMapping:
    """A C column's fresh result: the mapping is unmapped when this goes (untimed)."""

    def __init__(self, c, x, streaming=False):
        self.c, self.map, self.len = c, ctypes.c_void_p(), ctypes.c_size_t()
        y = c.relu_fresh(x.ctypes.data, x.size, ctypes.byref(self.map), ctypes.byref(self.len),
                         int(streaming))
        if not y:
            raise MemoryError("mmap failed")
        self.y = np.ctypeslib.as_array((ctypes.c_float * x.size).from_address(y))

    def __del__(self):
        if self.map.value:
            self.c.unmap(self.map, self.len)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of the compiled program (and cores the process runs on)")
    args = ap.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, set(cores[-args.threads:]))
    load_before = os.getloadavg()
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    want = np.maximum(x, 0)
    prog = cc.compile(lambda t: F.relu(t), backend="cpu", threads=args.threads).lower(x)
    before = cc.compile(lambda t: F.relu(t), backend="cpu", threads=args.threads).lower(x)
    # the same with the other first-touch setting at this thread count (a compile-time one)
    saved = emitter.TOUCH_MIN_THREADS
    touch_now = saved is not None and args.threads >= saved
    other_name = "cpu, fresh, faulted by the loop" if touch_now else "cpu, fresh, touched first"
    emitter.TOUCH_MIN_THREADS = None if touch_now else 1
    try:
        other = cc.compile(lambda t: F.relu(t), backend="cpu", threads=args.threads).lower(x)
    finally:
        emitter.TOUCH_MIN_THREADS = saved
    warm = np.empty_like(x)
    c_warm = np.empty_like(x)
    huge = arena.HUGE_PAGE
    tmp = tempfile.TemporaryDirectory(prefix="fresh-outputs-")
    c, c_note = c_library(tmp.name)

    def run_reused():
        return prog(x)

    def run_fresh():
        return prog(x)

    def run_other():
        return other(x)

    def run_before():
        before._exec._memory_checked = False  # the check read /proc/meminfo each call
        arena.HUGE_PAGE = 1 << 62
        try:
            return before(x)
        finally:
            arena.HUGE_PAGE = huge

    def run_c_fresh():
        return _CMapping(c, x)

    def run_c_warm():
        c.relu_into(x.ctypes.data, c_warm.ctypes.data, x.size)
        return c_warm

    def run_c_fresh_stream():
        return _CMapping(c, x, streaming=True)

    def run_c_warm_stream():
        c.relu_stream_into(x.ctypes.data, c_warm.ctypes.data, x.size)
        return c_warm

    def run_numpy_fresh():
        mm, y = fresh_mapping(x.nbytes)
        np.maximum(x, 0, out=y.reshape(SHAPE))
        return mm, y

    def run_numpy_warm():
        return np.maximum(x, 0, out=warm)

    # (name, call, untimed step before it)
    # ("cpu, reused" right after "cpu, fresh": it takes the region that call's output left)
    columns = [("cpu, fresh", run_fresh, arena.trim), ("cpu, reused", run_reused, None),
               (other_name, run_other, arena.trim), ("cpu, 64-byte aligned", run_before, None)]
    if c is not None:
        columns += [("C, fresh (floor)", run_c_fresh, None), ("C, warm", run_c_warm, None),
                    ("C, fresh, streaming stores", run_c_fresh_stream, None),
                    ("C, warm, streaming stores", run_c_warm_stream, None)]
    columns += [("numpy, fresh", run_numpy_fresh, None), ("numpy, warm", run_numpy_warm, None)]
    for name, fn, prep in columns:  # check and warm up
        if prep is not None:
            prep()
        out = fn()
        got = out[1] if isinstance(out, tuple) else getattr(out, "y", out)
        assert got.reshape(SHAPE).tobytes() == want.tobytes(), name
        del out, got
    times = {name: [] for name, _, _ in columns}
    cpu = {name: [] for name, _, _ in columns}
    faults = {name: [] for name, _, _ in columns}
    for _ in range(args.repeat):
        for name, fn, prep in columns:
            if prep is not None:
                prep()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            c0, t0 = time.process_time(), time.perf_counter()
            out = fn()
            t1, c1 = time.perf_counter(), time.process_time()
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            times[name].append(t1 - t0)
            cpu[name].append(c1 - c0)
            del out  # (freed outside the timed region, as a caller would later)
    floor_name = "C, fresh (floor)" if c is not None else "numpy, fresh"
    floor = float(np.median(times[floor_name]))
    floor_cpu = float(np.median(cpu[floor_name]))
    print(f"out-of-place F.relu on float32{list(SHAPE)} (64 MiB), cpu backend; "
          f"transparent huge pages: {arena.thp_mode()}; median of {args.repeat} interleaved "
          f"rounds, {args.threads} thread(s) on as many cores; C loops: {c_note}; load average "
          f"{', '.join(f'{v:.2f}' for v in load_before)} before, "
          f"{', '.join(f'{v:.2f}' for v in os.getloadavg())} after")
    print()
    print(f"| column | median ms | p25..p75 ms | CPU ms | minor faults per call | "
          f"vs {floor_name}: time | CPU |")
    print("|---|---|---|---|---|---|---|")
    for name, _, _ in columns:
        t = np.array(times[name]) * 1e3
        p25, p75 = np.percentile(t, [25, 75])
        med = float(np.median(t))
        c_med = float(np.median(cpu[name])) * 1e3
        print(f"| {name} | {med:.2f} | {p25:.2f}..{p75:.2f} | {c_med:.2f} | "
              f"{int(np.median(faults[name]))} | {med / (floor * 1e3):.2f}x | "
              f"{c_med / (floor_cpu * 1e3):.2f}x |")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
