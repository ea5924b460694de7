/* A stand-in for cuBLAS's C library (tests/gpu/test_gpu_launch_path.py): the entry points the
 * gpu executable calls through ctypes, with cuBLAS's C signatures, computing on host memory.
 * It records each GEMM's arguments (as the C function received them) and models what a CUDA
 * stream capture does to a GEMM: issued on the stream being captured it is recorded, not run
 * (alpha and beta captured by value, as in host pointer mode), and it runs at each replay; a
 * GEMM captured without a user workspace fails, as do calls on another handle or in device
 * pointer mode. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int kind;                 /* 1 sgemm, 2 dgemm, 3 gemmEx */
    long long handle;
    int ta, tb, m, n, k;
    double alpha, beta;       /* read through the host pointers at the call */
    const void *A, *B;
    void *C;
    int atype, btype, ctype, lda, ldb, ldc, compute, algo;
    long long stream;         /* the handle's stream at the call */
} Call;

#define MAXCALLS 4096
static Call calls[MAXCALLS];
static int ncalls;
static Call graph[MAXCALLS];
static int ngraph;
static void *stream, *capturing, *workspace;
static size_t workspace_bytes;
static long long expected_handle = -1;
static int pointer_mode, fail_status, replays;

int fake_ncalls(void) { return ncalls; }
int fake_ngraph(void) { return ngraph; }
int fake_replays(void) { return replays; }
void fake_reset(long long handle) {
    ncalls = ngraph = replays = 0;
    stream = capturing = workspace = NULL;
    workspace_bytes = 0;
    expected_handle = handle;
    pointer_mode = 0;
    fail_status = 0;
}
void fake_fail_with(int status) { fail_status = status; }
void fake_call(int i, Call *out) { *out = calls[i]; }
size_t fake_call_size(void) { return sizeof(Call); }
void *fake_workspace(void) { return workspace; }
size_t fake_workspace_bytes(void) { return workspace_bytes; }
void *fake_stream(void) { return stream; }
void fake_begin_capture(void *s) { capturing = s; ngraph = 0; }
void fake_end_capture(void) { capturing = NULL; }

static float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t float_to_bf16(float f) {   /* round to nearest even (no NaNs here) */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static double load(const void *p, int kind, int type, long i) {
    if (kind == 1) return ((const float *)p)[i];
    if (kind == 2) return ((const double *)p)[i];
    if (type == 14) return bf16_to_float(((const uint16_t *)p)[i]);
    return (float)((const _Float16 *)p)[i];   /* CUDA_R_16F */
}

static void store(void *p, int kind, int type, long i, double v) {
    if (kind == 1) ((float *)p)[i] = (float)v;
    else if (kind == 2) ((double *)p)[i] = v;
    else if (type == 14) ((uint16_t *)p)[i] = float_to_bf16((float)v);
    else ((_Float16 *)p)[i] = (_Float16)(float)v;
}

/* column-major C = alpha op(A) op(B) + beta C; with beta == 0 C is not read */
static void run(const Call *c) {
    for (int j = 0; j < c->n; j++)
        for (int i = 0; i < c->m; i++) {
            double s = 0;
            for (int l = 0; l < c->k; l++) {
                long ia = c->ta ? l + (long)i * c->lda : i + (long)l * c->lda;
                long ib = c->tb ? j + (long)l * c->ldb : l + (long)j * c->ldb;
                s += load(c->A, c->kind, c->atype, ia) * load(c->B, c->kind, c->btype, ib);
            }
            long ic = i + (long)j * c->ldc;
            double v = c->alpha * s;
            if (c->beta != 0) v += c->beta * load(c->C, c->kind, c->ctype, ic);
            store(c->C, c->kind, c->ctype, ic, v);
        }
}

static int issue(Call *c) {
    c->stream = (long long)(intptr_t)stream;
    if (ncalls < MAXCALLS) calls[ncalls++] = *c;
    if (fail_status) return fail_status;
    if (c->handle != expected_handle) return 1;          /* CUBLAS_STATUS_NOT_INITIALIZED */
    if (pointer_mode != 0) return 7;                      /* CUBLAS_STATUS_INVALID_VALUE */
    if (capturing && stream == capturing) {
        if (!workspace) return 3;                         /* CUBLAS_STATUS_ALLOC_FAILED */
        graph[ngraph++] = *c;
        return 0;
    }
    run(c);
    return 0;
}

void fake_replay(void) {
    replays++;
    for (int i = 0; i < ngraph; i++) run(&graph[i]);
}

int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                   const float *A, int lda, const float *B, int ldb, const float *beta,
                   float *C, int ldc) {
    Call c = {1, (long long)(intptr_t)h, ta, tb, m, n, k, *alpha, *beta, A, B, C,
              0, 0, 0, lda, ldb, ldc, 0, 0, 0};
    return issue(&c);
}

int cublasDgemm_v2(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
                   const double *A, int lda, const double *B, int ldb, const double *beta,
                   double *C, int ldc) {
    Call c = {2, (long long)(intptr_t)h, ta, tb, m, n, k, *alpha, *beta, A, B, C,
              0, 0, 0, lda, ldb, ldc, 0, 0, 0};
    return issue(&c);
}

int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                 const void *A, int atype, int lda, const void *B, int btype, int ldb,
                 const void *beta, void *C, int ctype, int ldc, int compute, int algo) {
    /* CUBLAS_COMPUTE_32F: alpha and beta are floats */
    Call c = {3, (long long)(intptr_t)h, ta, tb, m, n, k, *(const float *)alpha,
              *(const float *)beta, A, B, C, atype, btype, ctype, lda, ldb, ldc, compute,
              algo, 0};
    if (compute != 68 || atype != btype || btype != ctype || (atype != 2 && atype != 14))
        return 15;                                        /* CUBLAS_STATUS_NOT_SUPPORTED */
    return issue(&c);
}

int cublasSetStream_v2(void *h, void *s) {
    if ((long long)(intptr_t)h != expected_handle) return 1;
    stream = s;
    workspace = NULL;            /* as cuBLAS: back to its own workspace pool */
    workspace_bytes = 0;
    return 0;
}

int cublasSetPointerMode_v2(void *h, int mode) {
    if ((long long)(intptr_t)h != expected_handle) return 1;
    pointer_mode = mode;
    return 0;
}

int cublasSetWorkspace_v2(void *h, void *w, size_t bytes) {
    if ((long long)(intptr_t)h != expected_handle) return 1;
    if ((uintptr_t)w % 256) return 7;
    workspace = w;
    workspace_bytes = bytes;
    return 0;
}

int cublasGetVersion_v2(void *h, int *version) {
    (void)h;
    *version = 120900;
    return 0;
}
