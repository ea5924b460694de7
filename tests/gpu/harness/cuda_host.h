// cuda_host.h: run CUDA C kernels on the host CPU, for tests (issue 11, "tested without a GPU").
//
// The kernel source compiles unchanged with g++ after this header, except one token rename the
// Python driver does: `extern __shared__` -> `extern __cuda_dynamic_shared__` (a macro can't
// tell a dynamic shared array from a static one, and only the static one must become `static`).
//
// Execution model (deterministic):
//  - blocks run one after another; the threads of a block run as fibers on one OS thread;
//  - a fiber runs until it reaches a barrier (`__syncthreads`, a warp collective) or returns;
//    the scheduler runs one warp as far as it gets (its lanes in order) before the next warp,
//    in thread order (or, with the "reverse" schedule, lanes, warps and blocks backwards), so
//    a missing `__syncthreads()` shows up as a read of a value another warp has not written
//    yet, or has already overwritten (shared memory is poisoned with 0xFF bytes, NaN as a
//    float: the kernel's static shared variables and its dynamic shared memory before every
//    block); each schedule catches races the other can miss;
//  - `__syncthreads()` releases the block when all its threads wait at the same call site;
//    any other state with no fiber runnable (a thread returned or waits elsewhere) is a
//    deadlock on a GPU, and here an error naming the kernel, block and lines;
//  - warp shuffles, votes and `__syncwarp` are collectives over the lanes of their mask: the
//    last lane to arrive computes every lane's result (Volta+ semantics: no lockstep);
//  - a kernel that can't block (the driver's scan of the source) runs each thread as a plain
//    call, without fibers.
// Fibers start with makecontext (once per run), then switch with _setjmp/_longjmp, which,
// unlike swapcontext, makes no sigprocmask system call: the classic trick of user-level
// thread packages (R. S. Engelschall, "Portable Multithreading", USENIX ATC 2000).
// Faults (SIGSEGV, SIGBUS, SIGFPE) while a program runs become errors (run_steps).
#pragma once
#include <math.h>      // the C++ wrapper: float overloads and isnan/isinf in the global namespace
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <type_traits>

// ---- qualifiers ----------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("cuda_shared")))
#define __cuda_dynamic_shared__
#define __CUDA_ARCH__ 800   // the architecture NVRTC compiles for (compute_80)

// ---- built-in variables and vector types ---------------------------------------------------
struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
        : x(x_), y(y_), z(z_) {}
};
inline uint3 threadIdx, blockIdx;   // set by the scheduler before it switches to a fiber
inline dim3 blockDim, gridDim;
constexpr int warpSize = 32;

#define CUDA_HOST_VEC2(T, N) struct __attribute__((aligned(2 * sizeof(T)))) N##2 { T x, y; }; \
    inline N##2 make_##N##2(T x, T y) { return {x, y}; }
#define CUDA_HOST_VEC4(T, N) struct __attribute__((aligned(4 * sizeof(T)))) N##4 { T x, y, z, w; }; \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
CUDA_HOST_VEC2(float, float) CUDA_HOST_VEC4(float, float)
CUDA_HOST_VEC2(double, double) CUDA_HOST_VEC4(double, double)
CUDA_HOST_VEC2(int, int) CUDA_HOST_VEC4(int, int)
CUDA_HOST_VEC2(unsigned int, uint) CUDA_HOST_VEC4(unsigned int, uint)
CUDA_HOST_VEC2(long long, longlong)
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }

// ---- 16-bit floats: cuda_fp16.h's and cuda_bf16.h's storage types and conversions ----------
// The generated source defines these itself (runtime/gpu/scalar.py HALF_PRELUDE, PTX `cvt`)
// unless a header did: these guards stand for the headers. Round to nearest even, bit for bit
// as the device's cvt.rn (denormals kept); a NaN becomes the canonical NaN 0x7fff, as there.
#define __CUDA_FP16_H__
#define __CUDA_BF16_H__
// (bit casts of their own: the header's __uint_as_float and friends come later)
template <class To, class From> To cuda_host_cast16(From v) {
    static_assert(sizeof(To) == sizeof(From), "size");
    To t; memcpy(&t, &v, sizeof t); return t;
}
struct __align__(2) __half { unsigned short __x; };
struct __align__(2) __nv_bfloat16 { unsigned short __x; };
inline float __bfloat162float(__nv_bfloat16 h) {
    return cuda_host_cast16<float>((unsigned)h.__x << 16);
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    const unsigned u = cuda_host_cast16<unsigned>(f);
    __nv_bfloat16 h;
    h.__x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)0x7fffu
          : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);   // ties to even
    return h;
}
#if defined(__FLT16_MAX__) && !defined(CUDA_HOST_F16_BITS)
// gcc's _Float16 (x86-64, gcc >= 12): its conversions round to nearest even (libgcc or F16C)
inline float __half2float(__half h) { return (float)cuda_host_cast16<_Float16>(h.__x); }
inline __half __float2half_rn(float f) {
    __half h;
    h.__x = f != f ? (unsigned short)0x7fffu : cuda_host_cast16<unsigned short>((_Float16)f);
    return h;
}
inline __half __double2half(double d) {   // one rounding, from the double
    __half h;
    h.__x = d != d ? (unsigned short)0x7fffu : cuda_host_cast16<unsigned short>((_Float16)d);
    return h;
}
#else
// without _Float16: bit operations (IEEE binary16: 1 sign, 5 exponent, 10 fraction bits)
inline float __half2float(__half h) {
    const unsigned s = (unsigned)(h.__x & 0x8000u) << 16, e = h.__x >> 10 & 0x1fu,
                   m = h.__x & 0x3ffu;
    if (e == 0x1f) return cuda_host_cast16<float>(s | 0x7f800000u | m << 13);   // inf, NaN
    if (e) return cuda_host_cast16<float>(s | (e + 112) << 23 | m << 13);
    return s ? -ldexpf((float)m, -24) : ldexpf((float)m, -24);           // 0, denormals
}
// the magnitude |d| rounded to binary16 bits: scale to units of the result's last place,
// round to nearest even in double (exact for every input a float or double gives here)
inline unsigned short cuda_host_half_bits(double a) {
    if (a >= 65520.0) return 0x7c00u;                      // rounds to infinity
    if (a == 0.0) return 0;
    int e;
    frexp(a, &e);                                          // a = f * 2^e, 0.5 <= f < 1
    const int q = e - 11 < -24 ? -24 : e - 11;             // the last place's exponent
    const double r = nearbyint(ldexp(a, -q));              // ties to even (default mode)
    unsigned bits = (unsigned)r;
    if (q == -24) return (unsigned short)bits;             // denormal (or the smallest normal)
    // normal: r in [2^10, 2^11] (2^11 when rounding carried into the next binade)
    return (unsigned short)(((unsigned)(q + 24) << 10) + bits);
}
inline __half __double2half(double d) {
    __half h;
    if (d != d) { h.__x = 0x7fffu; return h; }
    h.__x = (unsigned short)((signbit(d) ? 0x8000u : 0u) | cuda_host_half_bits(fabs(d)));
    return h;
}
inline __half __float2half_rn(float f) { return __double2half((double)f); }
#endif

// ---- the fiber scheduler -------------------------------------------------------------------
// The linker's bounds of the `__shared__` variables' section (null when there is none).
extern "C" char __start_cuda_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_cuda_shared[] __attribute__((weak, visibility("hidden")));

namespace cuda_host {

enum State { READY, WAIT_BLOCK, WAIT_WARP, DONE };
enum WarpOp { W_SYNC, W_IDX, W_UP, W_DOWN, W_XOR, W_BALLOT };
constexpr uint64_t POISON = ~0ull;

struct Fiber {
    jmp_buf ctx;
    ucontext_t uctx;
    char *stack = nullptr;
    bool started = false;
    State state = DONE;
    uint3 tid;
    int line = 0;                       // the call site of the barrier it waits at
    unsigned mask = 0;                  // the warp collective it waits in
    int op = 0, arg = 0, width = 32;
    uint64_t value = 0, result = 0;
};

inline Fiber *fibers = nullptr;
inline int nfibers = 0, capacity = 0, current = 0;
inline long stack_bytes = 0;             // each fiber's stack: given by the caller, per run
inline jmp_buf sched;
inline void (*body)(void *) = nullptr;   // the kernel call of the running launch
inline void *body_arg = nullptr;
inline char error[1024];
inline bool failed = false;
inline int block_aggregate = 0;          // __syncthreads_count/_and/_or of the last barrier
inline const char *kernel_name = "";
inline int waiting[32];                  // per warp: lanes waiting in a collective
inline bool direct = false;              // the launch runs without fibers (run_direct)
inline jmp_buf direct_env;
inline bool reverse = false;             // the schedule: sweep threads and blocks backwards

__attribute__((noinline)) inline void yield() {
    if (!_setjmp(fibers[current].ctx)) _longjmp(sched, 1);
    asm volatile("" ::: "memory");
}

[[noreturn]] inline void fiber_main() {
    for (;;) {
        body(body_arg);
        fibers[current].state = DONE;
        yield();
    }
}

__attribute__((noinline)) inline void switch_to(int i) {
    current = i;
    threadIdx = fibers[i].tid;
    if (!_setjmp(sched)) {
        Fiber &f = fibers[i];
        if (!f.started) {
            f.started = true;
            getcontext(&f.uctx);
            f.uctx.uc_stack.ss_sp = f.stack;
            f.uctx.uc_stack.ss_size = stack_bytes;
            f.uctx.uc_link = nullptr;
            makecontext(&f.uctx, (void (*)())fiber_main, 0);
            setcontext(&f.uctx);
        }
        _longjmp(f.ctx, 1);
    }
    asm volatile("" ::: "memory");
}

// The fiber stacks come from the Python driver, one pool for the whole process (each with a
// guard page below it): a pool per library would soon exhaust the kernel's map count. So no
// fiber outlives a run (see run_steps), and one run at a time uses the pool.
inline void take_stacks(char **stacks, int n, long bytes) {
    fibers = new Fiber[n > 0 ? n : 1];
    for (int i = 0; i < n; i++) fibers[i].stack = stacks[i];
    capacity = n;
    stack_bytes = bytes;
}

inline void drop_stacks() {
    delete[] fibers;
    fibers = nullptr;
    capacity = 0;
}

// After an error the suspended fibers are abandoned: they start afresh next time.
inline void reset_fibers() {
    for (int i = 0; i < capacity; i++) fibers[i].started = false;
}

inline int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error, sizeof error, fmt, ap);
    va_end(ap);
    failed = true;
    return 1;
}

inline int linear(const uint3 &t) { return t.x + blockDim.x * (t.y + blockDim.y * t.z); }

// A stuck block: describe who waits where, as a deadlock on a GPU would leave it.
inline int deadlock() {
    int done = 0, block = 0, warp = 0, line = -1, first_warp = -1;
    for (int i = 0; i < nfibers; i++) {
        Fiber &f = fibers[i];
        if (f.state == DONE) done++;
        if (f.state == WAIT_BLOCK) { block++; if (line < 0) line = f.line; }
        if (f.state == WAIT_WARP) { warp++; if (first_warp < 0) first_warp = i; }
    }
    if (block && !done && !warp) {
        int other = -1;
        for (int i = 0; i < nfibers; i++)
            if (fibers[i].line != line) { other = i; break; }
        return fail("deadlock: the threads of the block wait at different __syncthreads() "
                    "(line %d and, for thread %d, line %d)", line, other, fibers[other].line);
    }
    if (warp)
        return fail("deadlock: thread %d waits in a warp collective at line %d (mask 0x%08x) "
                    "that a lane of its mask never reaches (%d threads returned, %d wait at "
                    "__syncthreads())", first_warp, fibers[first_warp].line,
                    fibers[first_warp].mask, done, block);
    return fail("deadlock: %d of %d threads wait at __syncthreads() (line %d) while %d have "
                "returned (a barrier in a divergent branch)", block, nfibers, line, done);
}

// Run one block: every fiber starts the kernel; sweep until all have returned.
inline int run_block() {
    for (int i = 0; i < nfibers; i++) fibers[i].state = READY;
    memset(waiting, 0, sizeof waiting);
    for (;;) {
        // warp by warp, each as far as it gets before the next one starts
        bool ran = false;
        int nwarps = (nfibers + 31) / 32;
        for (int wk = 0; wk < nwarps; wk++) {
            int base = 32 * (reverse ? nwarps - 1 - wk : wk);
            int lanes = nfibers - base < 32 ? nfibers - base : 32;
            for (bool again = true; again;) {
                again = false;
                for (int k = 0; k < lanes; k++) {
                    int i = base + (reverse ? lanes - 1 - k : k);
                    if (fibers[i].state != READY) continue;
                    switch_to(i);
                    if (failed) return 1;
                    ran = again = true;
                }
            }
        }
        if (ran) continue;
        int at_barrier = 0, done = 0;
        for (int i = 0; i < nfibers; i++) {
            at_barrier += fibers[i].state == WAIT_BLOCK && fibers[i].line == fibers[0].line;
            done += fibers[i].state == DONE;
        }
        if (done == nfibers) return 0;
        if (at_barrier != nfibers) return deadlock();
        int count = 0;
        for (int i = 0; i < nfibers; i++) count += fibers[i].arg;
        block_aggregate = count;
        for (int i = 0; i < nfibers; i++) fibers[i].state = READY;
    }
}

[[noreturn]] inline void not_direct(int line);

__attribute__((noinline)) inline int block_sync(int line, int pred) {
    if (direct) not_direct(line);
    Fiber &f = fibers[current];
    f.state = WAIT_BLOCK;
    f.line = line;
    f.arg = pred != 0;
    yield();
    return block_aggregate;
}

// A warp collective: wait until every lane of `mask` (that exists in this block) is here
// with the same mask; the last to arrive computes all results (CUDA Programming Guide,
// "Warp Shuffle Functions": an out-of-segment source returns the caller's own value).
__attribute__((noinline)) inline uint64_t warp_collective(unsigned mask, int op, int arg,
                                                        int width, uint64_t value, int line) {
    if (direct) not_direct(line);
    Fiber &me = fibers[current];
    int lin = linear(me.tid), lane = lin % 32, base = lin - lane;
    unsigned exists = nfibers - base >= 32 ? ~0u : (1u << (nfibers - base)) - 1;
    if (!(mask >> lane & 1)) {
        fail("thread %d calls a warp collective at line %d with mask 0x%08x that excludes "
             "its own lane %d", lin, line, mask, lane);
        _longjmp(sched, 1);
    }
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        fail("warp collective at line %d: width %d is not a power of two <= 32", line, width);
        _longjmp(sched, 1);
    }
    me.state = WAIT_WARP;
    me.mask = mask; me.op = op; me.arg = arg; me.width = width; me.value = value;
    me.line = line;
    unsigned members = mask & exists;
    // most arrivals are not the last: count before looking at every lane
    if (++waiting[lin / 32] < __builtin_popcount(members)) {
        yield();
        return fibers[current].result;
    }
    for (int l = 0; l < 32; l++) {
        if (!(members >> l & 1)) continue;
        Fiber &o = fibers[base + l];
        if (o.state != WAIT_WARP || o.mask != mask) {
            yield();                     // not everyone is here: someone else completes it
            return fibers[current].result;
        }
    }
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++)
        if (members >> l & 1) ballot |= (fibers[base + l].value != 0) << l;
    for (int l = 0; l < 32; l++) {
        if (!(members >> l & 1)) continue;
        Fiber &o = fibers[base + l];
        int seg = l & ~(o.width - 1), src = l;
        bool own = false;
        switch (o.op) {
        case W_IDX: src = seg + (o.arg & (o.width - 1)); break;
        case W_UP: src = l - o.arg; own = src < seg; break;
        case W_DOWN: src = l + o.arg; own = src >= seg + o.width; break;
        case W_XOR: src = l ^ o.arg; own = (src & ~(o.width - 1)) > seg; break;
        default: break;
        }
        if (o.op == W_BALLOT) o.result = ballot;
        else if (o.op == W_SYNC || own) o.result = o.value;
        else o.result = src >= 0 && src < 32 && (members >> src & 1)
                            ? fibers[base + src].value : POISON;   // an inactive source
        o.state = READY;
    }
    waiting[lin / 32] -= __builtin_popcount(members);
    return me.result;
}

// Launch: every block of the grid in turn. `shared_lo..hi` is the static shared memory
// (section `cuda_shared`, every kernel's), `dyn` the dynamic shared memory.
// A kernel that can't block (no barrier or warp collective in anything it calls, as the
// driver's scan of the source found) runs without fibers: each thread is a plain call, far
// cheaper than two context switches. A barrier reached anyway is an error, not a wrong answer.
[[noreturn]] inline void not_direct(int line) {
    fail("the kernel reaches a barrier or warp collective at line %d, but the harness's scan "
         "of the source found none, so it runs without fibers", line);
    _longjmp(direct_env, 1);
}

__attribute__((noinline)) inline int run_direct(dim3 grid, dim3 block) {
    direct = true;
    if (_setjmp(direct_env)) {
        direct = false;
        return 1;
    }
    int n = (int)(block.x * block.y * block.z);
    for (unsigned zz = 0; zz < grid.z; zz++)
        for (unsigned yy = 0; yy < grid.y; yy++)
            for (unsigned xx = 0; xx < grid.x; xx++) {
                blockIdx = {reverse ? grid.x - 1 - xx : xx, reverse ? grid.y - 1 - yy : yy,
                            reverse ? grid.z - 1 - zz : zz};
                for (int k = 0; k < n; k++) {
                    unsigned i = reverse ? n - 1 - k : k;
                    threadIdx = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
                    body(body_arg);
                }
            }
    direct = false;
    return 0;
}

inline int launch(const char *name, dim3 grid, dim3 block, void (*fn)(void *), void *arg,
                  char *shared_lo, char *shared_hi, char *dyn, size_t dyn_bytes,
                  bool may_block) {
    failed = false;
    kernel_name = name;
    long threads = (long)block.x * block.y * block.z;
    if (threads < 1 || threads > 1024 || block.z > 64)
        return fail("invalid block (%u, %u, %u): 1 to 1024 threads, z <= 64",
                    block.x, block.y, block.z);
    if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535 || grid.z > 65535)
        return fail("invalid grid (%u, %u, %u)", grid.x, grid.y, grid.z);
    if (threads > capacity) return fail("%ld threads per block, %d fiber stacks", threads,
                                        capacity);
    nfibers = (int)threads;
    body = fn;
    body_arg = arg;
    blockDim = block;
    gridDim = grid;
    if (!may_block) {   // shared memory is poisoned once per launch, not per block
        if (shared_hi > shared_lo) memset(shared_lo, 0xFF, shared_hi - shared_lo);
        if (dyn_bytes) memset(dyn, 0xFF, dyn_bytes);
        if (!run_direct(grid, block)) return 0;
        char what[sizeof error];
        memcpy(what, error, sizeof error);
        snprintf(error, sizeof error, "block (%u, %u, %u): %s", blockIdx.x, blockIdx.y,
                 blockIdx.z, what);
        return 1;
    }
    for (int i = 0; i < nfibers; i++)
        fibers[i].tid = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
    // The static shared memory of every kernel of the module is one section: poison it all
    // once per launch, then per block only the bytes the first block wrote (this kernel's).
    if (shared_hi > shared_lo) memset(shared_lo, 0xFF, shared_hi - shared_lo);
    char *used_lo = nullptr, *used_hi = nullptr;
    bool first = true;
    for (unsigned zz = 0; zz < grid.z; zz++)
        for (unsigned yy = 0; yy < grid.y; yy++)
            for (unsigned xx = 0; xx < grid.x; xx++) {
                unsigned x = reverse ? grid.x - 1 - xx : xx, y = reverse ? grid.y - 1 - yy : yy,
                         z = reverse ? grid.z - 1 - zz : zz;
                blockIdx = {x, y, z};
                if (used_hi > used_lo) memset(used_lo, 0xFF, used_hi - used_lo);
                if (dyn_bytes) memset(dyn, 0xFF, dyn_bytes);
                int rc = run_block();
                if (first && !rc) {
                    first = false;
                    for (char *p = shared_lo; p < shared_hi; p++)
                        if ((unsigned char)*p != 0xFF) { used_lo = p; break; }
                    for (char *p = shared_hi; used_lo && p > used_lo; p--)
                        if ((unsigned char)p[-1] != 0xFF) { used_hi = p; break; }
                }
                if (rc) {
                    char what[sizeof error];
                    memcpy(what, error, sizeof error);
                    reset_fibers();
                    snprintf(error, sizeof error, "block (%u, %u, %u): %s", x, y, z, what);
                    return 1;
                }
            }
    return 0;
}

// cuBLAS's GEMM, column-major: C = alpha op(A) op(B) + beta C, C m x n; C is not read when
// beta == 0 (BLAS semantics: a NaN in C does not survive). Accumulates in double, over p in
// order, a column of C at a time, with op(B)'s column gathered first so that every inner
// loop walks memory contiguously.
// The element type T is float or double (sgemm, dgemm) or a 16-bit float (cublasGemmEx with
// CUBLAS_COMPUTE_32F: float alpha and beta, S; C rounded once to T at the end).
inline double gemm_widen(float v) { return v; }
inline double gemm_widen(double v) { return v; }
inline double gemm_widen(__half v) { return __half2float(v); }
inline double gemm_widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> T gemm_narrow(double v) { return (T)v; }
template <> inline __half gemm_narrow<__half>(double v) { return __double2half(v); }
template <> inline __nv_bfloat16 gemm_narrow<__nv_bfloat16>(double v) {
    return __float2bfloat16_rn((float)v);
}
template <class T, class S = T>
__attribute__((optimize("O3"))) void gemm(bool ta, bool tb, long m, long n, long k, S alpha,
                                          const T *A, long lda, const T *B, long ldb, S beta,
                                          T *C, long ldc) {
    double *acc = new double[m + k + 1], *col = acc + m;
    for (long j = 0; j < n; j++) {
        for (long p = 0; p < k; p++) col[p] = gemm_widen(tb ? B[j + p * ldb] : B[p + j * ldb]);
        if (ta) {
            for (long i = 0; i < m; i++) {
                const T *a = A + i * lda;
                double s = 0.0;
                for (long p = 0; p < k; p++) s += gemm_widen(a[p]) * col[p];
                acc[i] = s;
            }
        } else {
            for (long i = 0; i < m; i++) acc[i] = 0.0;
            for (long p = 0; p < k; p++) {
                const T *a = A + p * lda;
                const double b = col[p];
                for (long i = 0; i < m; i++) acc[i] += gemm_widen(a[i]) * b;
            }
        }
        for (long i = 0; i < m; i++) {
            T &c = C[i + j * ldc];
            c = beta == S(0) ? gemm_narrow<T>(alpha * acc[i])
                             : gemm_narrow<T>(alpha * acc[i] + (double)beta * gemm_widen(c));
        }
    }
    delete[] acc;
}

// ---- running a program: its launches in order, faults and buffer overruns as errors ------
inline sigjmp_buf trap_env;
inline volatile sig_atomic_t trap_signal = 0;
inline void *trap_address = nullptr;
inline bool in_kernel = false;

inline void on_trap(int sig, siginfo_t *info, void *) {
    trap_signal = sig;
    trap_address = info->si_addr;
    siglongjmp(trap_env, 1);
}

struct Step {
    const char *kernel;
    int node;                           // the schedule index the launch implements, or -1
    int (*run)(char *arena, char **in, char **out);
};

inline const unsigned char CANARY = 0xA5;

// The bytes around each buffer that no kernel may write (`guards`: pairs address, length).
inline long overrun(const long long *guards, int nguards) {
    static unsigned char canaries[4096];
    if (canaries[0] != CANARY) memset(canaries, CANARY, sizeof canaries);
    for (int g = 0; g < nguards; g++) {
        const unsigned char *p = (const unsigned char *)guards[2 * g];
        for (long long at = 0, n; at < guards[2 * g + 1]; at += n) {
            n = guards[2 * g + 1] - at < 4096 ? guards[2 * g + 1] - at : 4096;
            if (memcmp(p + at, canaries, n)) return g;
        }
    }
    return -1;
}

inline int run_steps(const Step *steps, int nsteps, char *arena, char **in, char **out,
                     const long long *guards, int nguards, int schedule, char **stacks,
                     int nstacks, long stack_size, char *err, int errlen) {
    // (the caller runs one program at a time: the scheduler's state and the stacks are global)
    reverse = schedule == 1;
    take_stacks(stacks, nstacks, stack_size);
    static char altstack[1 << 16];
    stack_t alt = {}, old_alt;
    alt.ss_sp = altstack;
    alt.ss_size = sizeof altstack;
    sigaltstack(&alt, &old_alt);
    struct sigaction sa = {}, old[3];
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    const int sigs[3] = {SIGSEGV, SIGBUS, SIGFPE};
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, &old[i]);
    int rc = 0;
    volatile int at = 0;
    if (sigsetjmp(trap_env, 1)) {
        const char *what = trap_signal == SIGFPE
            ? "SIGFPE (an integer division by zero or INT_MIN / -1: it traps on a CPU, and a "
              "GPU gives an unspecified value, so the kernel must guard it)"
            : "a memory fault (an access outside the arena, the inputs and the outputs, or a "
              "fiber stack overflow)";
        if (in_kernel)
            snprintf(err, errlen, "launch %d (kernel %s, node %d), block (%u, %u, %u), thread "
                     "(%u, %u, %u): %s at address %p", (int)at, steps[at].kernel,
                     steps[at].node, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
                     threadIdx.y, threadIdx.z, what, trap_address);
        else
            snprintf(err, errlen, "launch %d (%s, node %d): %s at address %p", (int)at,
                     steps[at].kernel, steps[at].node, what, trap_address);
        reset_fibers();
        rc = 1;
    } else {
        for (at = 0; at < nsteps; at++) {
            in_kernel = false;
            error[0] = 0;
            if (steps[at].run(arena, in, out)) {
                snprintf(err, errlen, "launch %d (kernel %s, node %d), %s", (int)at,
                         steps[at].kernel, steps[at].node, error);
                rc = 1;
                break;
            }
            long g = overrun(guards, nguards);
            if (g >= 0) {
                snprintf(err, errlen, "launch %d (kernel %s, node %d) wrote outside its "
                         "buffers: guard region %ld was overwritten", (int)at,
                         steps[at].kernel, steps[at].node, g);
                rc = 1;
                break;
            }
        }
    }
    in_kernel = false;
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], nullptr);
    sigaltstack(&old_alt, nullptr);
    drop_stacks();
    return rc;
}

template <class F> void thunk(void *f) { (*(F *)f)(); }

// One kernel launch of a program: the call `f` runs in every thread of every block.
template <class F>
int launch_kernel(const char *name, dim3 grid, dim3 block, size_t dyn_bytes, F &f, char *dyn,
                  size_t dyn_capacity, bool may_block) {
    if (dyn_bytes > dyn_capacity)
        return fail("%zu bytes of dynamic shared memory, but the source declares no "
                    "`extern __shared__` array", dyn_bytes);
    in_kernel = true;
    int rc = launch(name, grid, block, thunk<F>, &f, __start_cuda_shared, __stop_cuda_shared,
                    dyn, dyn_bytes, may_block);
    in_kernel = false;
    return rc;
}

}  // namespace cuda_host

// A pointer argument of a launch: converts to whatever pointer type the kernel declares.
// (In the global namespace: argument-dependent lookup must not find cuda_host's functions.)
struct cuda_host_ptr {
    char *p;
    template <class T> operator T *() const { return (T *)p; }
};

// ---- synchronization -----------------------------------------------------------------------
#define __syncthreads() cuda_host::block_sync(__LINE__, 0)
#define __syncthreads_count(p) cuda_host::block_sync(__LINE__, (p))
#define __syncthreads_and(p) (cuda_host::block_sync(__LINE__, (p)) == (int)cuda_host::nfibers)
#define __syncthreads_or(p) (cuda_host::block_sync(__LINE__, (p)) != 0)
#define __syncwarp(...) cuda_host::SyncWarp{__LINE__}(__VA_ARGS__)   // (mask optional)
inline void __threadfence() { asm volatile("" ::: "memory"); }
inline void __threadfence_block() { asm volatile("" ::: "memory"); }

namespace cuda_host {
struct SyncWarp {
    int line;
    void operator()(unsigned mask = 0xffffffffu) const {
        warp_collective(mask, W_SYNC, 0, 32, 0, line);
    }
};
template <class T> T shfl(unsigned mask, T v, int op, int arg, int width, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffle of a value wider than 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = warp_collective(mask, op, arg, width, bits, line);
    memcpy(&v, &bits, sizeof(T));
    return v;
}
template <class T> T shfl_idx(int line, unsigned m, T v, int src, int w = 32) {
    return shfl(m, v, W_IDX, src, w, line);
}
template <class T> T shfl_up(int line, unsigned m, T v, unsigned d, int w = 32) {
    return shfl(m, v, W_UP, (int)d, w, line);
}
template <class T> T shfl_down(int line, unsigned m, T v, unsigned d, int w = 32) {
    return shfl(m, v, W_DOWN, (int)d, w, line);
}
template <class T> T shfl_xor(int line, unsigned m, T v, int x, int w = 32) {
    return shfl(m, v, W_XOR, x, w, line);
}
inline unsigned ballot(int line, unsigned mask, int pred) {
    return (unsigned)warp_collective(mask, W_BALLOT, 0, 32, pred != 0, line);
}
// The lanes of the calling thread's warp that exist in this block.
inline unsigned lanes() {
    int lin = linear(threadIdx), base = lin - lin % 32;
    return nfibers - base >= 32 ? ~0u : (1u << (nfibers - base)) - 1;
}
}  // namespace cuda_host

#define __shfl_sync(...) cuda_host::shfl_idx(__LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) cuda_host::shfl_up(__LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) cuda_host::shfl_down(__LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) cuda_host::shfl_xor(__LINE__, __VA_ARGS__)
#define __ballot_sync(m, p) cuda_host::ballot(__LINE__, (m), (p))
#define __any_sync(m, p) (cuda_host::ballot(__LINE__, (m), (p)) != 0)
#define __all_sync(m, p) (cuda_host::ballot(__LINE__, (m), (p)) == ((m) & cuda_host::lanes()))
#define __activemask() cuda_host::activemask(__LINE__)
namespace cuda_host {
inline unsigned activemask(int line) {
    if (direct) not_direct(line);
    int lin = linear(threadIdx), base = lin - lin % 32;
    unsigned live = 0;
    for (int l = 0; l < 32 && base + l < nfibers; l++)
        live |= (fibers[base + l].state != DONE) << l;
    return live;
}
}  // namespace cuda_host

// ---- atomics: a fiber is never interrupted between the read and the write -----------------
template <class T> T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <class T> T atomicSub(T *p, T v) { T o = *p; *p = o - v; return o; }
template <class T> T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <class T> T atomicMax(T *p, T v) { T o = *p; *p = o < v ? v : o; return o; }
template <class T> T atomicMin(T *p, T v) { T o = *p; *p = v < o ? v : o; return o; }
template <class T> T atomicAnd(T *p, T v) { T o = *p; *p = o & v; return o; }
template <class T> T atomicOr(T *p, T v) { T o = *p; *p = o | v; return o; }
template <class T> T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
template <class T> T __ldg(const T *p) { return *p; }

// ---- math: CUDA's names that glibc lacks ---------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float *s, float *c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline double __dadd_rn(double x, double y) { return x + y; }
inline double __dmul_rn(double x, double y) { return x * y; }
inline double __ddiv_rn(double x, double y) { return x / y; }
inline double __fma_rn(double x, double y, double z) { return fma(x, y, z); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }
inline float sinpif(float x) { return sinf(3.14159265358979323846f * x); }
inline float cospif(float x) { return cosf(3.14159265358979323846f * x); }

// reinterpretation and conversions with a rounding mode (rn: to nearest even, rz: toward zero)
template <class To, class From> To cuda_host_bits(From v) {
    static_assert(sizeof(To) == sizeof(From), "size");
    To t; memcpy(&t, &v, sizeof t); return t;
}
inline float __int_as_float(int v) { return cuda_host_bits<float>(v); }
inline int __float_as_int(float v) { return cuda_host_bits<int>(v); }
inline float __uint_as_float(unsigned v) { return cuda_host_bits<float>(v); }
inline unsigned __float_as_uint(float v) { return cuda_host_bits<unsigned>(v); }
inline double __longlong_as_double(long long v) { return cuda_host_bits<double>(v); }
inline long long __double_as_longlong(double v) { return cuda_host_bits<long long>(v); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline unsigned __float2uint_rz(float x) { return (unsigned)x; }
inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
inline long long __float2ll_rz(float x) { return (long long)x; }
inline int __double2int_rn(double x) { return (int)nearbyint(x); }
inline int __double2int_rz(double x) { return (int)x; }
inline long long __double2ll_rn(double x) { return (long long)nearbyint(x); }
inline long long __double2ll_rz(double x) { return (long long)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline double __ll2double_rn(long long x) { return (double)x; }
inline float __double2float_rn(double x) { return (float)x; }

// integer intrinsics
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline long long __mul64hi(long long a, long long b) {
    return (long long)(((__int128)a * b) >> 64);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= (x >> i & 1u) << (31 - i);
    return r;
}

// min/max: CUDA's overloads; a mixed pair takes the common type (nvcc/NVRTC check the rest)
#define CUDA_HOST_MINMAX(T) \
    inline T min(T a, T b) { return b < a ? b : a; } \
    inline T max(T a, T b) { return a < b ? b : a; }
CUDA_HOST_MINMAX(int) CUDA_HOST_MINMAX(unsigned int) CUDA_HOST_MINMAX(long)
CUDA_HOST_MINMAX(unsigned long) CUDA_HOST_MINMAX(long long)
CUDA_HOST_MINMAX(unsigned long long)
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
// (a + b: the usual arithmetic conversions, which also promote char/short to int)
template <class A, class B> auto min(A a, B b) -> decltype(a + b) {
    return min((decltype(a + b))a, (decltype(a + b))b);
}
template <class A, class B> auto max(A a, B b) -> decltype(a + b) {
    return max((decltype(a + b))a, (decltype(a + b))b);
}
inline unsigned umin(unsigned a, unsigned b) { return min(a, b); }
inline unsigned umax(unsigned a, unsigned b) { return max(a, b); }
inline long long llmin(long long a, long long b) { return min(a, b); }
inline long long llmax(long long a, long long b) { return max(a, b); }
