"""The CPU fiber harness (tests/gpu/harness) on hand-written CUDA C kernels.

The kernels are written the way a CUDA programmer (and the emitter) writes them: grid-stride
loops, shared-memory tree reductions with `__syncthreads()`, warp-shuffle reductions, a row
softmax that uses both, dynamic shared memory, atomics, cuBLAS GEMM launches. They must match
numpy under both schedules; every copy with one `__syncthreads()` removed must give a wrong
answer under at least one schedule; deadlocks, faults and overruns must be errors, not hangs
or crashes. Most kernels share one module (one g++ build) to keep CI time down.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from tests.gpu import harness
from tests.gpu.harness import HarnessCompileError, HarnessError, run_on_cpu
from runtime.gpu.launch import GpuModule, Launch

pytestmark = pytest.mark.skipif(not harness.available(), reason="needs g++ on a POSIX host")

ELEMENTWISE = r"""
extern "C" __global__ void axpb(const float *__restrict__ x, float *__restrict__ y,
                                long long n, float a, float b) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = a * x[i] + b;
}
"""

# One block per output element, a tree reduction in shared memory (two barriers).
BLOCK_SUM = r"""
extern "C" __global__ void block_sum(const float *__restrict__ x, float *__restrict__ out,
                                     int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int i = t; i < n; i += blockDim.x) acc += x[blockIdx.x * n + i];
    s[t] = acc;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
"""

# Shuffles within each warp, then the warps' partial sums through dynamic shared memory.
WARP_SUM = r"""
extern "C" __global__ void warp_sum(const double *__restrict__ x, double *__restrict__ out,
                                    int n) {
    extern __shared__ double partial[];
    int t = threadIdx.x, lane = t % 32, warp = t / 32;
    double acc = 0.0;
    for (int i = t; i < n; i += blockDim.x) acc += x[blockIdx.x * n + i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < blockDim.x / 32 ? partial[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) out[blockIdx.x] = acc;
    }
}
"""

# One block per row: max and sum each reduced by shuffles within warps, then across warps in
# shared memory; the middle barrier keeps `red` from being overwritten while others read it.
SOFTMAX = r"""
extern "C" __global__ void softmax_rows(const float *__restrict__ x, float *__restrict__ y,
                                        int cols) {
    __shared__ float red[32];
    const float *xr = x + (long long)blockIdx.x * cols;
    float *yr = y + (long long)blockIdx.x * cols;
    int t = threadIdx.x, lane = t % 32, warp = t / 32, nwarps = blockDim.x / 32;
    float m = -INFINITY;
    for (int j = t; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < nwarps; w++) m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.0f;
    for (int j = t; j < cols; j += blockDim.x) s += __expf(xr[j] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    s = 0.0f;
    for (int w = 0; w < nwarps; w++) s += red[w];
    for (int j = t; j < cols; j += blockDim.x) yr[j] = __expf(xr[j] - m) / s;
}
"""

# The built-in variables over a 2-D grid of 3-D blocks: each thread writes its global index.
INDEXING = r"""
__device__ __forceinline__ long long global_id() {
    long long block = blockIdx.x + (long long)gridDim.x * blockIdx.y;
    int local = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    return block * blockDim.x * blockDim.y * blockDim.z + local;
}
extern "C" __global__ void indexing(long long *out) {
    long long g = global_id();
    out[g] = g * 1000 + threadIdx.z * 100 + threadIdx.y * 10 + threadIdx.x;
}
"""

# Atomics from every block, votes, barrier counts and the math built-ins.
MISC = r"""
extern "C" __global__ void zero_int(int *p, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = 0;
}
extern "C" __global__ void histogram(const int *__restrict__ v, int *bins, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&bins[v[i]], 1);
}
extern "C" __global__ void votes(const float *__restrict__ x, unsigned *out) {
    int t = threadIdx.x;
    unsigned b = __ballot_sync(0xffffffffu, x[t] > 0.0f);
    int all = __all_sync(0xffffffffu, x[t] > -10.0f);
    int count = __syncthreads_count(x[t] > 0.0f);
#if __CUDA_ARCH__ >= 700
    __syncwarp();
    __syncwarp(__activemask());
#endif
    if (t == 0) { out[0] = b; out[1] = all; out[2] = count; }
    if (t == 40) out[3] = b;   // the second warp's ballot
}
extern "C" __global__ void math(const float *__restrict__ x, float *__restrict__ y, int n) {
    int i = threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    y[0 * n + i] = __expf(v) + expf(-v);
    y[1 * n + i] = rsqrtf(v + 2.0f);
    y[2 * n + i] = erff(v) + tanhf(v);
    y[3 * n + i] = fmaxf(v, 0.0f) + min(i, 3) + max(v, -0.5f);
    y[4 * n + i] = (float)(__umulhi(0xD2511F53u, (unsigned)i * 2654435761u) >> 16);
    y[5 * n + i] = __int_as_float(__float_as_int(v)) + __shfl_sync(0xffffffffu, v, 3);
}
"""

KERNELS = {"block_sum": BLOCK_SUM, "warp_sum": WARP_SUM, "softmax_rows": SOFTMAX}


def drop_barrier(kernel: str, name: str, k: int) -> str:
    """`kernel` renamed `{name}_drop{k}`, without its k-th `__syncthreads();`."""
    calls = [m.start() for m in re.finditer(r"__syncthreads\(\);", kernel)]
    at = calls[k]
    src = kernel[:at] + "/* removed */" + kernel[at + len("__syncthreads();"):]
    return src.replace(f"void {name}(", f"void {name}_drop{k}(")


def barrier_count(kernel: str) -> int:
    return kernel.count("__syncthreads();")


RNG = np.random.default_rng(11)
N_ELEM = 5000
ROWS, COLS = 6, 300
X_ELEM = RNG.standard_normal(N_ELEM).astype(np.float32)
X_ROWS = RNG.standard_normal((ROWS, COLS)).astype(np.float32)
X_ROWS64 = RNG.standard_normal((ROWS, COLS))
VALUES = RNG.integers(0, 10, 3000).astype(np.int32)
X_VOTE = RNG.standard_normal(64).astype(np.float32)
X_MATH = RNG.uniform(-1.5, 1.5, 40).astype(np.float32)


def suite_module() -> tuple[GpuModule, list, list, dict]:
    """All the correct kernels and every one-barrier-removed copy, in one module."""
    source = ELEMENTWISE + INDEXING + MISC + "".join(KERNELS.values())
    inputs = [X_ELEM, X_ROWS, X_ROWS64, VALUES, X_VOTE, X_MATH]
    outputs, launches, where = [], [], {}

    def out(name, shape, dtype):
        where[name] = len(outputs)
        outputs.append((shape, dtype))
        return ("output", where[name], 0)

    f32 = ("scalar", "float", None)
    launches.append(Launch("axpb", (7, 1, 1), (128, 1, 1), 0, (
        ("input", 0, 0), out("axpb", (N_ELEM,), np.float32),
        ("scalar", "long long", N_ELEM), f32[:2] + (1.5,), f32[:2] + (-0.25,))))
    launches.append(Launch("indexing", (3, 2, 1), (4, 3, 2), 0, (
        out("indexing", (6 * 24,), np.int64),)))
    bins = out("histogram", (10,), np.int32)
    launches.append(Launch("zero_int", (1, 1, 1), (32, 1, 1), 0, (bins, ("scalar", "int", 10))))
    launches.append(Launch("histogram", (5, 1, 1), (64, 1, 1), 0, (
        ("input", 3, 0), bins, ("scalar", "int", len(VALUES)))))
    launches.append(Launch("votes", (1, 1, 1), (64, 1, 1), 0, (
        ("input", 4, 0), out("votes", (4,), np.uint32))))
    launches.append(Launch("math", (1, 1, 1), (40, 1, 1), 0, (
        ("input", 5, 0), out("math", (6, 40), np.float32), ("scalar", "int", 40))))
    variants = {name: [name] for name in KERNELS}
    for name, kernel in KERNELS.items():
        for k in range(barrier_count(kernel)):
            source += drop_barrier(kernel, name, k)
            variants[name].append(f"{name}_drop{k}")
    for name, kernels in variants.items():
        for kernel in kernels:
            if name == "block_sum":
                args = (("input", 1, 0), out(kernel, (ROWS,), np.float32))
                launches.append(Launch(kernel, (ROWS, 1, 1), (256, 1, 1), 0,
                                       args + (("scalar", "int", COLS),)))
            elif name == "warp_sum":
                args = (("input", 2, 0), out(kernel, (ROWS,), np.float64))
                launches.append(Launch(kernel, (ROWS, 1, 1), (128, 1, 1), 4 * 8,
                                       args + (("scalar", "int", COLS),)))
            else:
                args = (("input", 1, 0), out(kernel, (ROWS, COLS), np.float32))
                launches.append(Launch(kernel, (ROWS, 1, 1), (64, 1, 1), 0,
                                       args + (("scalar", "int", COLS),)))
    return GpuModule(source, launches, arena_bytes=0), inputs, outputs, where


def softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


REFERENCE = {
    "block_sum": lambda: X_ROWS.astype(np.float64).sum(axis=1),
    "warp_sum": lambda: X_ROWS64.sum(axis=1),
    "softmax_rows": lambda: softmax_ref(X_ROWS.astype(np.float64)),
}


@pytest.fixture(scope="module", params=harness.SCHEDULES)
def suite(request):
    module, inputs, outputs, where = suite_module()
    result = run_on_cpu(module, inputs, outputs, schedule=request.param)
    return {name: result.outputs[i] for name, i in where.items()}, result


def test_elementwise_grid_stride_loop(suite):
    got, _ = suite
    np.testing.assert_array_equal(got["axpb"], np.float32(1.5) * X_ELEM + np.float32(-0.25))


def test_built_in_variables_over_a_2d_grid_of_3d_blocks(suite):
    got, _ = suite
    g = np.arange(6 * 24)
    local = g % 24
    x, y, z = local % 4, local // 4 % 3, local // 12
    np.testing.assert_array_equal(got["indexing"], g * 1000 + z * 100 + y * 10 + x)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_reductions_and_softmax_match_numpy(suite, name):
    got, _ = suite
    np.testing.assert_allclose(got[name], REFERENCE[name](), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_removed_syncthreads_gives_a_wrong_result(name):
    """Every copy of the kernel with one `__syncthreads()` removed gives a wrong answer under
    at least one of the two schedules (and every barrier of these kernels matters)."""
    module, inputs, outputs, where = suite_module()
    copies = [f"{name}_drop{k}" for k in range(barrier_count(KERNELS[name]))]
    assert copies
    wrong = {copy: [] for copy in copies}
    for schedule in harness.SCHEDULES:
        result = run_on_cpu(module, inputs, outputs, schedule=schedule)
        for copy in copies:
            if not np.allclose(result.outputs[where[copy]], REFERENCE[name](),
                               rtol=2e-5, atol=1e-6):
                wrong[copy].append(schedule)
    assert all(wrong.values()), f"a missing barrier went unnoticed: {wrong}"


def test_atomics_from_every_block(suite):
    got, _ = suite
    np.testing.assert_array_equal(got["histogram"], np.bincount(VALUES, minlength=10))


def test_votes_and_barrier_counts(suite):
    got, _ = suite
    positive = X_VOTE > 0
    first = sum(1 << i for i in range(32) if positive[i])
    second = sum(1 << i for i in range(32) if positive[32 + i])
    np.testing.assert_array_equal(got["votes"], [first, 1, positive.sum(), second])


def test_math_built_ins(suite):
    got, _ = suite
    v = X_MATH.astype(np.float64)
    i = np.arange(40)
    from math import erf
    expect = [np.exp(v) + np.exp(-v), 1 / np.sqrt(v + 2), np.vectorize(erf)(v) + np.tanh(v),
              np.maximum(v, 0) + np.minimum(i, 3) + np.maximum(v, -0.5),
              [(0xD2511F53 * (j * 2654435761 % 2 ** 32)) >> 48 for j in range(40)],
              v + np.where(i < 32, v[3], v[35])]
    np.testing.assert_allclose(got["math"], np.array(expect), rtol=1e-5, atol=1e-6)


def test_inputs_are_copied_and_outputs_fresh(suite):
    _, result = suite
    np.testing.assert_array_equal(result.inputs[0], X_ELEM)   # nothing wrote it
    assert result.inputs[0] is not X_ELEM


def colmajor(buf, rows, cols, ld):
    """The rows x cols column-major matrix with leading dimension `ld` that `buf` holds."""
    return buf[:ld * cols].reshape(cols, ld).T[:rows]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cublas_gemm_launches_honour_flags_scalars_and_leading_dimensions(dtype):
    """Four GEMMs, each writing its own region of the arena: every transpose pair, leading
    dimensions bigger than the rows, beta = 0 over poisoned (NaN) memory and beta != 0 over
    a C that an earlier GEMM wrote (the accumulate form). Results come back through a copy
    kernel into the output."""
    m, n, k = 5, 4, 3
    ctype = "float" if dtype == np.float32 else "double"
    rng = np.random.default_rng(3)
    size = np.dtype(dtype).itemsize
    a = rng.standard_normal(8 * 8).astype(dtype)     # room for any ld <= 8
    b = rng.standard_normal(8 * 8).astype(dtype)
    cases = [(0, 0, 6, 7), (1, 0, 4, 3), (0, 1, 5, 6), (1, 1, 3, 4)]   # ta, tb, lda, ldb
    ldc = 7
    c_bytes = ldc * n * size
    launches = []
    for j, (ta, tb, lda, ldb) in enumerate(cases):   # as the emitter writes them
        launches.append(Launch("gemm", (1, 1, 1), (1, 1, 1), 0, (
            "NT"[ta], "NT"[tb], m, n, k, 1.5, ("input", 0, 0), lda, ("input", 1, 0), ldb,
            0.0, ("arena", j * 256), ldc), library="cublas", dtype=np.dtype(dtype).name))
    # the accumulate form, C1 += -0.5 * op(A) op(B) of case 0, with cublasOperation_t flags
    # and scalar arguments (alpha's type says which GEMM)
    launches.append(Launch("gemm", (1, 1, 1), (1, 1, 1), 0, (
        ("scalar", "int", 0), ("scalar", "int", 0), m, n, k, ("scalar", ctype, -0.5),
        ("input", 0, 0), 6, ("input", 1, 0), 7, ("scalar", ctype, 1.0), ("arena", 256), ldc),
        library="cublas"))
    copy = r"""
extern "C" __global__ void copy_bytes(const unsigned char *src, unsigned char *dst, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}"""
    launches.append(Launch("copy_bytes", (1, 1, 1), (128, 1, 1), 0, (
        ("arena", 0), ("output", 0, 0), ("scalar", "int", 4 * 256))))
    module = GpuModule(copy, launches, arena_bytes=4 * 256)
    got = run_on_cpu(module, [a, b], [((4 * 256,), np.uint8)]).outputs[0]
    assert c_bytes <= 256
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for j, (ta, tb, lda, ldb) in enumerate(cases):
        opa = colmajor(a64, k, m, lda).T if ta else colmajor(a64, m, k, lda)
        opb = colmajor(b64, n, k, ldb).T if tb else colmajor(b64, k, n, ldb)
        expect = 1.5 * opa @ opb
        if j == 1:   # the accumulate GEMM added case 0's product into case 1's C
            expect += -0.5 * colmajor(a64, m, k, 6) @ colmajor(b64, k, n, 7)
        region = got[j * 256:j * 256 + c_bytes].view(dtype)
        c = colmajor(region, m, n, ldc)
        np.testing.assert_allclose(c, expect, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_inputs_that_share_memory_share_one_buffer():
    """As on the device, a write through one argument is seen through an overlapping one."""
    src = r"""
extern "C" __global__ void write_then_read(float *a, const float *b, float *out, int n) {
    int i = threadIdx.x;
    if (i < n) a[i] = 10.0f * i;
    __syncthreads();
    if (i < n - 2) out[i] = b[i];
}"""
    base = np.zeros(8, np.float32)
    module = GpuModule(src, [Launch("write_then_read", (1, 1, 1), (32, 1, 1), 0, (
        ("input", 0, 0), ("input", 1, 0), ("output", 0, 0), ("scalar", "int", 8)))])
    result = run_on_cpu(module, [base, base[2:]], [((6,), np.float32)])
    np.testing.assert_array_equal(result.outputs[0], 10.0 * np.arange(2, 8))
    np.testing.assert_array_equal(result.inputs[1], 10.0 * np.arange(2, 8))
    np.testing.assert_array_equal(base, 0)   # the caller's array is not written


# ---- what a GPU would hang on or corrupt is an error here ----------------------------------

FAULTS = r"""
extern "C" __global__ void divergent_barrier(float *out) {
    if (threadIdx.x < 16) __syncthreads();
    out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void two_barriers(float *out) {
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void shuffle_after_return(float *out) {
    if (threadIdx.x == 7) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}
extern "C" __global__ void overrun(float *out, int n) {
    out[threadIdx.x + n] = 1.0f;
}
extern "C" __global__ void wild(float *out) {
    out[-1024 * (long long)threadIdx.x] = 1.0f;   // thread 1: into the page below the buffer
}
extern "C" __global__ void divide(int *out, int d) {
    out[threadIdx.x] = 7 / d;
}
#define SYNC(what) __sync##what()
extern "C" __global__ void pasted_barrier(float *out) {   // hidden from the harness's scan
    out[threadIdx.x] = 1.0f;
    SYNC(threads);
}
"""

FAULT_CASES = {
    "divergent_barrier": ((), r"block \(0, 0, 0\): deadlock: 16 of 32 threads wait at "
                              r"__syncthreads\(\) \(line 3\) while 16 have returned"),
    "two_barriers": ((), r"different __syncthreads\(\) \(line 10 and, for thread 1, line 8\)"),
    "shuffle_after_return": ((), r"deadlock: thread 0 waits in a warp collective at line "
                                 r"16 \(mask 0xffffffff\) that a lane of its mask never"),
    "overrun": ((("scalar", "int", 32),), r"kernel overrun, node 4\) wrote outside its buffers"),
    "wild": ((), r"kernel wild, node 4\), block \(0, 0, 0\), thread \(1, 0, 0\): a memory "
                 r"fault"),
    "divide": ((("scalar", "int", 0),), r"thread \(0, 0, 0\): SIGFPE"),
    # a kernel run without fibers that reaches a barrier anyway: an error, never a wrong value
    "pasted_barrier": ((), r"block \(0, 0, 0\): the kernel reaches a barrier or warp "
                           r"collective at line 30, but the harness's scan"),
}


@pytest.mark.parametrize("kernel", sorted(FAULT_CASES))
def test_deadlocks_faults_and_overruns_are_errors(kernel):
    extra, message = FAULT_CASES[kernel]
    dtype = np.int32 if kernel == "divide" else np.float32
    launch = Launch(kernel, (2, 1, 1), (32, 1, 1), 0, (("output", 0, 0),) + extra, node=4)
    with pytest.raises(HarnessError, match=message):
        run_on_cpu(GpuModule(FAULTS, [launch]), [], [((32,), dtype)])


def test_the_harness_runs_again_after_an_error():
    """A deadlock abandons suspended fibers; the next run must start them afresh."""
    launch = Launch("two_barriers", (1, 1, 1), (64, 1, 1), 0, (("output", 0, 0),))
    with pytest.raises(HarnessError, match="different __syncthreads"):
        run_on_cpu(GpuModule(FAULTS, [launch]), [], [((64,), np.float32)])
    module, inputs, outputs, where = suite_module()
    result = run_on_cpu(module, inputs, outputs)
    np.testing.assert_allclose(result.outputs[where["block_sum"]], REFERENCE["block_sum"](),
                               rtol=2e-5)


@pytest.mark.parametrize("launch, message", [
    (Launch("axpb", (1, 1, 1), (2048, 1, 1), 0, ()), r"block \(2048, 1, 1\) exceeds"),
    (Launch("nope", (1, 1, 1), (32, 1, 1), 0, ()), "no kernel 'nope' in the source"),
    (Launch("axpb", (1, 1, 1), (32, 1, 1), 0, (("arena", 4096),)), "offset 4096 lies outside "
                                                                   "arena 0 \\(256 bytes\\)"),
    (Launch("axpb", (1, 1, 1), (32, 1, 1), 0, (("input", 1, 0),)), "input 1 does not exist"),
    (Launch("axpb", (1, 1, 1), (32, 1, 1), 0, (("pointer", 0),)), "not one of launch.py"),
    (Launch("gemm", (1, 1, 1), (1, 1, 1), 0, ("N", "N", 4, 4, 4, ("scalar", "float", 1.0),
                                              ("arena", 0), 2, ("arena", 0), 4,
                                              ("scalar", "float", 0.0), ("arena", 0), 4),
            library="cublas"), "invalid GEMM m=4 n=4 k=4 lda=2"),
])
def test_bad_launches_are_refused_before_compiling(launch, message):
    with pytest.raises(HarnessError, match=message):
        run_on_cpu(GpuModule(ELEMENTWISE, [launch], arena_bytes=256), [X_ELEM], [])


def test_a_compile_error_carries_the_g_plus_plus_log():
    src = ELEMENTWISE + '\nextern "C" __global__ void broken(float *y) { y[0] = undefined_var; }\n'
    launch = Launch("broken", (1, 1, 1), (1, 1, 1), 0, (("output", 0, 0),))
    with pytest.raises(HarnessCompileError, match=r"kernels.cu:9:.*undefined_var"):
        run_on_cpu(GpuModule(src, [launch]), [], [((1,), np.float32)])


def test_libraries_are_cached_by_source(tmp_path, monkeypatch):
    monkeypatch.setenv("INPLACE_HARNESS_CACHE", str(tmp_path))
    module = GpuModule(ELEMENTWISE + "// cache test\n", [Launch(
        "axpb", (2, 1, 1), (64, 1, 1), 0, (("input", 0, 0), ("output", 0, 0),
                                           ("scalar", "long long", 100),
                                           ("scalar", "float", 2.0), ("scalar", "float", 0.0)))])
    first = run_on_cpu(module, [X_ELEM[:100]], [((100,), np.float32)]).outputs[0]
    assert len(list(tmp_path.glob("*.so"))) == 1
    assert harness.compile_module(module) is harness.compile_module(module)
    np.testing.assert_array_equal(first, 2 * X_ELEM[:100])


def test_prebuild_puts_modules_with_the_same_kernel_names_in_one_library(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("INPLACE_HARNESS_CACHE", str(tmp_path))
    modules = [GpuModule(ELEMENTWISE + WARP_SUM + "// batch test\n", [
        Launch("axpb", (2, 1, 1), (64, 1, 1), 0, (
            ("input", 0, 0), ("arena", 0), ("scalar", "long long", 100),
            ("scalar", "float", a), ("scalar", "float", 1.0))),
        Launch("warp_sum", (1, 1, 1), (64, 1, 1), 16, (
            ("input", 1, 0), ("output", 0, 0), ("scalar", "int", 100)))],
        arena_bytes=512) for a in (2.0, 3.0)]
    harness.prebuild(modules)
    assert len(list(tmp_path.glob("*.so"))) == 1 and len(list(tmp_path.glob("*.entry"))) == 2
    x64 = X_ROWS64[0, :100].copy()
    for module, a in zip(modules, (2.0, 3.0)):
        got = run_on_cpu(module, [X_ELEM[:100], x64], [((1,), np.float64)])
        np.testing.assert_allclose(got.outputs[0], [x64.sum()], rtol=1e-12)
        np.testing.assert_array_equal(got.arena[:400].view(np.float32),
                                      np.float32(a) * X_ELEM[:100] + np.float32(1.0))
    assert len(list(tmp_path.glob("*.so"))) == 1   # nothing was built again
