/* GEMMs for the CPU backend: OpenBLAS's cblas_sgemm when available, else a built-in GEMM in the
 * BLIS style: op(A) and op(B) are packed into cache-sized blocks of MR-row / NR-column panels
 * and an MR x NR register-blocked micro-kernel runs over them. Transposes are only strides. */
#include "backends/cpu/gemm.h"
#include "backends/cpu/cpu.h"

#include <string.h>

#include "core/error.h"

#ifdef DQN_HAVE_OPENBLAS
#include <cblas.h>

const char *dqn_cpu_gemm_name(void) { return "openblas"; }

dqn_status dqn_cpu_set_threads(int n) {
    if (n < 1) return DQN_ERR(DQN_ERR_ARG, "threads = %d, must be >= 1", n);
    openblas_set_num_threads(n);
    return DQN_OK;
}

int dqn_cpu_threads(void) { return openblas_get_num_threads(); }

dqn_status dqn_gemm_xwt_ld(const float *X, const float *W, int ldw, const float *b, float *Y, int M,
                           int K, int N) {
    if (b)
        for (int i = 0; i < M; i++) memcpy(Y + (size_t)i * N, b, (size_t)N * sizeof *b);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X, K, W, ldw,
                b ? 1.0f : 0.0f, Y, N);
    return DQN_OK;
}

dqn_status dqn_gemm_dyw_ld(const float *dY, const float *W, int ldw, float *dX, int acc, int M,
                           int K, int N) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dY, N, W, ldw,
                acc ? 1.0f : 0.0f, dX, K);
    return DQN_OK;
}

dqn_status dqn_gemm_dytx_ld(const float *dY, const float *X, float *dW, int ldw, int M, int K,
                            int N) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dY, N, X, K, 0.0f, dW, ldw);
    return DQN_OK;
}

#else /* built-in GEMM */
#include <stddef.h>
#include <stdlib.h>

const char *dqn_cpu_gemm_name(void) { return "builtin"; }

dqn_status dqn_cpu_set_threads(int n) {
    if (n < 1) return DQN_ERR(DQN_ERR_ARG, "threads = %d, must be >= 1", n);
    return DQN_OK;
}

int dqn_cpu_threads(void) { return 1; }

/* Micro-tile MR x NR; blocks: an MC x KC block of A stays in L2, a KC x NR panel of B in L1. */
enum { MR = 6, NR = 16, KC = 256, MC = 96, NC = 1024 };

typedef float v8f __attribute__((vector_size(32)));
/* Unaligned, aliasing view of 8 floats (how GCC's own _mm256_loadu_ps is written). */
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
#define LOAD8(p) ((v8f) * (const v8f_u *)(p))
#define STORE8(p, v) (*(v8f_u *)(p) = (v))

/* C[MR, 8*nv] (+)= Apanel^T Bpanel over kc: a holds MR values per k, b NR per k (uses the first
 * 8*nv of them). nv is a constant after inlining; each target picks the nv its registers hold. */
static inline __attribute__((always_inline)) void tile(int kc, const float *restrict a,
                                                       const float *restrict b, float *restrict c,
                                                       int ldc, int acc, const int nv) {
    v8f s[MR][2] = {{{0}}};
    for (int p = 0; p < kc; p++) {
        v8f b0 = LOAD8(b + p * NR), b1 = nv > 1 ? LOAD8(b + p * NR + 8) : b0;
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            float ai = a[p * MR + i];
            s[i][0] += b0 * ai;
            if (nv > 1) s[i][1] += b1 * ai;
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            float *cp = c + (ptrdiff_t)i * ldc + 8 * v;
            STORE8(cp, acc ? LOAD8(cp) + s[i][v] : s[i][v]);
        }
}

typedef void kernel_fn(int kc, const float *restrict a, const float *restrict b, float *restrict c,
                       int ldc, int acc);

/* Baseline SSE2 has 16 4-wide registers: the 6x16 tile runs as two 6x8 halves. */
static void kernel_base(int kc, const float *restrict a, const float *restrict b, float *restrict c,
                        int ldc, int acc) {
    tile(kc, a, b, c, ldc, acc, 1);
    tile(kc, a, b + 8, c + 8, ldc, acc, 1);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void kernel_avx2(int kc, const float *restrict a,
                                                        const float *restrict b, float *restrict c,
                                                        int ldc, int acc) {
    tile(kc, a, b, c, ldc, acc, 2);
}

static kernel_fn *pick_kernel(void) {
    return __builtin_cpu_supports("avx2") ? kernel_avx2 : kernel_base;
}
#else
static kernel_fn *pick_kernel(void) { return kernel_base; }
#endif

static inline int imin(int a, int b) { return a < b ? a : b; }

/* Packs n x kc of a matrix whose element (r, p) is src[r*rs + p*ps] into panels of w rows:
 * panel q holds, for each p, the w values of rows q*w .. q*w+w-1. Rows past n are zero: they
 * only feed tile lanes that are discarded, but garbage there could be slow denormals. */
static void pack(int n, int kc, const float *src, ptrdiff_t rs, ptrdiff_t ps, int w,
                 float *restrict dst) {
    for (int q = 0; q < n; q += w) {
        int wq = imin(w, n - q);
        float *d = dst + (ptrdiff_t)q * kc;
        const float *s = src + (ptrdiff_t)q * rs;
        if (wq < w) memset(d, 0, (size_t)kc * w * sizeof *d);
        if (rs == 1) { /* the panel's rows are contiguous in memory */
            for (int p = 0; p < kc; p++)
                for (int r = 0; r < wq; r++) d[p * w + r] = s[p * ps + r];
        } else {
            for (int r = 0; r < wq; r++)
                for (int p = 0; p < kc; p++) d[p * w + r] = s[r * rs + p * ps];
        }
    }
}

/* C[mc, nc] (+= when acc) packed A block [mc, kc] times packed B block [kc, nc], tile by tile. */
static void multiply_block(kernel_fn *kernel, int mc, int nc, int kc, const float *apack,
                           const float *bpack, float *C, int ldc, int acc) {
    float edge[MR * NR];
    for (int jr = 0; jr < nc; jr += NR)
        for (int ir = 0; ir < mc; ir += MR) {
            const float *a = apack + (ptrdiff_t)ir * kc, *b = bpack + (ptrdiff_t)jr * kc;
            float *c = C + (ptrdiff_t)ir * ldc + jr;
            int mr = imin(MR, mc - ir), nr = imin(NR, nc - jr);
            if (mr == MR && nr == NR) {
                kernel(kc, a, b, c, ldc, acc);
                continue;
            }
            kernel(kc, a, b, edge, NR, 0); /* an edge tile: keep its valid part */
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++)
                    c[(ptrdiff_t)i * ldc + j] =
                        (acc ? c[(ptrdiff_t)i * ldc + j] : 0.0f) + edge[i * NR + j];
        }
}

/* C[M,N] (row stride ldc) = op(A) op(B) (+ C when acc), op(A)(i,p) = A[i*ra + p*ca],
 * op(B)(p,j) = B[p*rb + j*cb]. */
static dqn_status gemm(int M, int N, int K, const float *A, ptrdiff_t ra, ptrdiff_t ca,
                       const float *B, ptrdiff_t rb, ptrdiff_t cb, float *C, int ldc, int acc) {
    size_t na = (size_t)(imin(M, MC) + MR - 1) / MR * MR * imin(K, KC);
    size_t nb = (size_t)(imin(N, NC) + NR - 1) / NR * NR * imin(K, KC);
    float *apack = NULL;
    if (posix_memalign((void **)&apack, 64, (na + nb) * sizeof(float)))
        return DQN_ERR(DQN_ERR_NOMEM, "gemm %dx%dx%d: packing buffers", M, N, K);
    float *bpack = apack + na;
    kernel_fn *kernel = pick_kernel();
    for (int jc = 0; jc < N; jc += NC) {
        int nc = imin(NC, N - jc);
        for (int pc = 0; pc < K; pc += KC) {
            int kc = imin(KC, K - pc);
            pack(nc, kc, B + pc * rb + jc * cb, cb, rb, NR, bpack);
            for (int ic = 0; ic < M; ic += MC) {
                int mc = imin(MC, M - ic);
                pack(mc, kc, A + ic * ra + pc * ca, ra, ca, MR, apack);
                multiply_block(kernel, mc, nc, kc, apack, bpack, C + (ptrdiff_t)ic * ldc + jc, ldc,
                               acc || pc > 0);
            }
        }
    }
    free(apack);
    return DQN_OK;
}

dqn_status dqn_gemm_xwt_ld(const float *X, const float *W, int ldw, const float *b, float *Y, int M,
                           int K, int N) {
    if (b)
        for (int i = 0; i < M; i++) memcpy(Y + (size_t)i * N, b, (size_t)N * sizeof *b);
    return gemm(M, N, K, X, K, 1, W, 1, ldw, Y, N, b != NULL);
}

dqn_status dqn_gemm_dyw_ld(const float *dY, const float *W, int ldw, float *dX, int acc, int M,
                           int K, int N) {
    return gemm(M, K, N, dY, N, 1, W, ldw, 1, dX, K, acc);
}

dqn_status dqn_gemm_dytx_ld(const float *dY, const float *X, float *dW, int ldw, int M, int K,
                            int N) {
    return gemm(N, K, M, dY, 1, N, X, K, 1, dW, ldw, 0);
}
#endif

/* the contiguous cases: W rows K floats apart */
dqn_status dqn_gemm_xwt(const float *X, const float *W, const float *b, float *Y, int M, int K,
                        int N) {
    return dqn_gemm_xwt_ld(X, W, K, b, Y, M, K, N);
}

dqn_status dqn_gemm_dyw(const float *dY, const float *W, float *dX, int M, int K, int N) {
    return dqn_gemm_dyw_ld(dY, W, K, dX, 0, M, K, N);
}

dqn_status dqn_gemm_dytx(const float *dY, const float *X, float *dW, int M, int K, int N) {
    return dqn_gemm_dytx_ld(dY, X, dW, K, M, K, N);
}
