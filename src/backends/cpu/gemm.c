/* GEMMs for the CPU backend: the built-in GEMM below, or OpenBLAS's cblas_sgemm in an OpenBLAS
 * build where the built-in one has no vector tile kernels or more than one thread is asked for
 * (use_builtin).
 *
 * The built-in GEMM is made for the model's small layers (tens to hundreds of rows and columns),
 * where packing both operands BLIS-style costs as much as the multiply: an MR x NR register tile
 * reads op(A) in place (a broadcast per element, whichever of its strides is 1) and reads rows of
 * op(B) in place where they are contiguous (the dX and dW products); only Y = X W^T packs W^T,
 * in blocks. Edge tiles go through small zero-padded copies. Each element of C is one
 * accumulator summed over k in order (in KC-long chunks added to C), whatever the shape or the
 * tile it falls in, so a row's result does not depend on M or on where the row sits. The tile
 * kernel is picked once per call from the CPU's features (AVX-512F, AVX2 + FMA, else portable
 * vector code): results are the same run to run on one machine, not across machines. */
#include "backends/cpu/gemm.h"
#include "backends/cpu/cpu.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define GEMM_X86 1
#include <immintrin.h>
#endif

static inline int imin(int a, int b) { return a < b ? a : b; }

/* A tile kernel: S[MR, NR] = sum over p < kc of op(A)(i, p) B[p, j], where B's row p is
 * b + p * ldb (NR floats) and op(A)(i, p) is a[i * lda + p] (kern_row) or a[p * lda + i]
 * (kern_col), then C = S, C + S (EP_ACC) or bias[j] + S (bias not NULL), and ReLU'd when EP_RELU
 * (as relu_fwd: NaN becomes 0). */
enum { EP_ACC = 1, EP_RELU = 2 };
typedef void kern_fn(int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b,
                     ptrdiff_t ldb, float *restrict c, ptrdiff_t ldc, const float *bias, int ep);
typedef struct {
    int mr, nr;
    kern_fn *row, *col;
    const char *name;
} kernel_set;

enum { MR_MAX = 8, NR_MAX = 32 };

/* ---- portable: GCC/Clang vector extensions of the 4-wide registers every 64-bit target has
 * (SSE2, NEON), 6 x 8: twelve accumulators ---- */
enum { MR_P = 6, NR_P = 8 };
typedef float v4f __attribute__((vector_size(16)));
typedef int v4i __attribute__((vector_size(16)));
/* Unaligned, aliasing view of 4 floats (how GCC's own _mm_loadu_ps is written). */
typedef float v4f_u __attribute__((vector_size(16), aligned(4), may_alias));
#define LOAD4(p) ((v4f) * (const v4f_u *)(p))
#define STORE4(p, v) (*(v4f_u *)(p) = (v))

static inline __attribute__((always_inline)) void tile_p(int kc, const float *restrict a,
                                                         ptrdiff_t lda, const float *restrict b,
                                                         ptrdiff_t ldb, float *restrict c,
                                                         ptrdiff_t ldc, const float *bias, int ep,
                                                         const int colA) {
    v4f s[MR_P][2] = {{{0}}};
    for (int p = 0; p < kc; p++) {
        v4f b0 = LOAD4(b + p * ldb), b1 = LOAD4(b + p * ldb + 4);
#pragma GCC unroll 6
        for (int i = 0; i < MR_P; i++) {
            float ai = colA ? a[p * lda + i] : a[i * lda + p];
            s[i][0] += b0 * ai;
            s[i][1] += b1 * ai;
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR_P; i++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            float *cp = c + i * ldc + 4 * h;
            v4f r = s[i][h];
            if (bias || ep & EP_ACC) r = LOAD4(bias ? bias + 4 * h : cp) + r;
            if (ep & EP_RELU) r = (v4f)((v4i)(r > 0.0f) & (v4i)r);
            STORE4(cp, r);
        }
}

static void kern_p_row(int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b,
                       ptrdiff_t ldb, float *restrict c, ptrdiff_t ldc, const float *bias,
                       int ep) {
    tile_p(kc, a, lda, b, ldb, c, ldc, bias, ep, 0);
}

static void kern_p_col(int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b,
                       ptrdiff_t ldb, float *restrict c, ptrdiff_t ldc, const float *bias,
                       int ep) {
    tile_p(kc, a, lda, b, ldb, c, ldc, bias, ep, 1);
}

#ifdef GEMM_X86
/* ---- AVX2 + FMA: 6 x 16, twelve accumulators ---- */
enum { MR_2 = 6, NR_2 = 16 };
static inline __attribute__((always_inline, target("avx2,fma"))) void tile_avx2(
    int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b, ptrdiff_t ldb,
    float *restrict c, ptrdiff_t ldc, const float *bias, int ep, const int colA) {
    __m256 s[MR_2][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR_2; i++) s[i][0] = s[i][1] = _mm256_setzero_ps();
    for (int p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_loadu_ps(b + p * ldb + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR_2; i++) {
            __m256 ai = _mm256_broadcast_ss(colA ? a + p * lda + i : a + i * lda + p);
            s[i][0] = _mm256_fmadd_ps(ai, b0, s[i][0]);
            s[i][1] = _mm256_fmadd_ps(ai, b1, s[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR_2; i++) {
        float *cp = c + i * ldc;
        if (bias || ep & EP_ACC) {
            const float *q = bias ? bias : cp;
            s[i][0] = _mm256_add_ps(_mm256_loadu_ps(q), s[i][0]);
            s[i][1] = _mm256_add_ps(_mm256_loadu_ps(q + 8), s[i][1]);
        }
        if (ep & EP_RELU) {
            s[i][0] = _mm256_max_ps(s[i][0], _mm256_setzero_ps());
            s[i][1] = _mm256_max_ps(s[i][1], _mm256_setzero_ps());
        }
        _mm256_storeu_ps(cp, s[i][0]);
        _mm256_storeu_ps(cp + 8, s[i][1]);
    }
}

__attribute__((target("avx2,fma"))) static void kern_2_row(
    int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b, ptrdiff_t ldb,
    float *restrict c, ptrdiff_t ldc, const float *bias, int ep) {
    tile_avx2(kc, a, lda, b, ldb, c, ldc, bias, ep, 0);
}

__attribute__((target("avx2,fma"))) static void kern_2_col(
    int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b, ptrdiff_t ldb,
    float *restrict c, ptrdiff_t ldc, const float *bias, int ep) {
    tile_avx2(kc, a, lda, b, ldb, c, ldc, bias, ep, 1);
}

/* ---- AVX-512F: 8 x 32, sixteen accumulators ---- */
enum { MR_5 = 8, NR_5 = 32 };
static inline __attribute__((always_inline, target("avx512f"))) void tile_avx512(
    int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b, ptrdiff_t ldb,
    float *restrict c, ptrdiff_t ldc, const float *bias, int ep, const int colA) {
    __m512 s[MR_5][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR_5; i++) s[i][0] = s[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++) {
        __m512 b0 = _mm512_loadu_ps(b + p * ldb), b1 = _mm512_loadu_ps(b + p * ldb + 16);
#pragma GCC unroll 8
        for (int i = 0; i < MR_5; i++) {
            __m512 ai = _mm512_set1_ps(colA ? a[p * lda + i] : a[i * lda + p]);
            s[i][0] = _mm512_fmadd_ps(ai, b0, s[i][0]);
            s[i][1] = _mm512_fmadd_ps(ai, b1, s[i][1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR_5; i++) {
        float *cp = c + i * ldc;
        if (bias || ep & EP_ACC) {
            const float *q = bias ? bias : cp;
            s[i][0] = _mm512_add_ps(_mm512_loadu_ps(q), s[i][0]);
            s[i][1] = _mm512_add_ps(_mm512_loadu_ps(q + 16), s[i][1]);
        }
        if (ep & EP_RELU) {
            s[i][0] = _mm512_max_ps(s[i][0], _mm512_setzero_ps());
            s[i][1] = _mm512_max_ps(s[i][1], _mm512_setzero_ps());
        }
        _mm512_storeu_ps(cp, s[i][0]);
        _mm512_storeu_ps(cp + 16, s[i][1]);
    }
}

__attribute__((target("avx512f"))) static void kern_5_row(
    int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b, ptrdiff_t ldb,
    float *restrict c, ptrdiff_t ldc, const float *bias, int ep) {
    tile_avx512(kc, a, lda, b, ldb, c, ldc, bias, ep, 0);
}

__attribute__((target("avx512f"))) static void kern_5_col(
    int kc, const float *restrict a, ptrdiff_t lda, const float *restrict b, ptrdiff_t ldb,
    float *restrict c, ptrdiff_t ldc, const float *bias, int ep) {
    tile_avx512(kc, a, lda, b, ldb, c, ldc, bias, ep, 1);
}
#endif

static const kernel_set kset_portable = {MR_P, NR_P, kern_p_row, kern_p_col, "portable"};
#ifdef GEMM_X86
static const kernel_set kset_avx2 = {MR_2, NR_2, kern_2_row, kern_2_col, "avx2"};
static const kernel_set kset_avx512 = {MR_5, NR_5, kern_5_row, kern_5_col, "avx512"};
#endif

/* 0 auto, 1 portable, 2 avx2, 3 avx512: set only by the benchmarks, between runs */
static _Atomic int isa_forced;

static const kernel_set *pick_kernels(void) {
#ifdef GEMM_X86
    int f = isa_forced;
    if (f == 1) return &kset_portable;
    if ((f == 0 || f == 3) && __builtin_cpu_supports("avx512f")) return &kset_avx512;
    if ((f == 0 || f == 2) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return &kset_avx2;
#endif
    return &kset_portable;
}

int dqn_gemm_builtin_force_isa(const char *isa) {
    static const char *const names[] = {"auto", "portable", "avx2", "avx512"};
    for (int i = 0; i < 4; i++)
        if (strcmp(isa, names[i]) == 0) {
            isa_forced = i;
            return strcmp(pick_kernels()->name, isa) == 0 || i == 0;
        }
    return 0;
}

const char *dqn_gemm_builtin_isa(void) { return pick_kernels()->name; }

/* Blocks: KC values of k per pass over C; packed W^T in KC x NC pieces (64 KiB). */
enum { KC = 256, NC = 64 };

/* dst[p * w + j] = op(B)(p, j) = src[p * rb + j * cb] for p < kc, j < n, zero for n <= j < w */
static void pack_b(int kc, int n, int w, const float *src, ptrdiff_t rb, ptrdiff_t cb,
                   float *restrict dst) {
    if (cb == 1) {
        for (int p = 0; p < kc; p++) {
            memcpy(dst + (ptrdiff_t)p * w, src + p * rb, (size_t)n * sizeof *dst);
            memset(dst + (ptrdiff_t)p * w + n, 0, (size_t)(w - n) * sizeof *dst);
        }
        return;
    }
    /* op(B) is a transpose: read source rows (along p, contiguous) a few at a time */
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *s0 = src + j * cb, *s1 = s0 + cb, *s2 = s1 + cb, *s3 = s2 + cb;
        for (int p = 0; p < kc; p++) {
            float *d = dst + (ptrdiff_t)p * w + j;
            d[0] = s0[p * rb];
            d[1] = s1[p * rb];
            d[2] = s2[p * rb];
            d[3] = s3[p * rb];
        }
    }
    for (; j < n; j++)
        for (int p = 0; p < kc; p++) dst[(ptrdiff_t)p * w + j] = src[p * rb + j * cb];
    for (int p = 0; p < kc && n < w; p++)
        memset(dst + (ptrdiff_t)p * w + n, 0, (size_t)(w - n) * sizeof *dst);
}

/* C[M,N] (row stride ldc) = op(A) op(B) (+ C when acc, + bias[j] when bias), ReLU'd when relu;
 * op(A)(i,p) = A[i*ra + p*ca], op(B)(p,j) = B[p*rb + j*cb]; ca == 1 or ra == 1. */
static dqn_status builtin_gemm(int M, int N, int K, const float *A, ptrdiff_t ra, ptrdiff_t ca,
                               const float *B, ptrdiff_t rb, ptrdiff_t cb, float *C, int ldc,
                               int acc, const float *bias, int relu) {
    const kernel_set *ks = pick_kernels();
    const int MR = ks->mr, NR = ks->nr, colA = ca != 1;
    const ptrdiff_t lda = colA ? ca : ra;
    kern_fn *kern = colA ? ks->col : ks->row;
    /* B in place when its rows are contiguous; else packed W^T pieces of NC columns */
    const int packB = cb != 1, ncb = packB ? NC : N;
    float *bpack = NULL;
    if (packB) {
        size_t n = (size_t)imin(K, KC) * ((imin(N, NC) + NR - 1) / NR * NR);
        if (posix_memalign((void **)&bpack, 64, n * sizeof *bpack))
            return DQN_ERR(DQN_ERR_NOMEM, "gemm %dx%dx%d: packing buffer", M, N, K);
    }
    float apad[MR_MAX * KC], bedge[KC * NR_MAX], edge[MR_MAX * NR_MAX];
    for (int jc = 0; jc < N; jc += ncb) {
        const int nc = imin(ncb, N - jc);
        for (int pc = 0; pc < K; pc += KC) {
            const int kc = imin(KC, K - pc), acc_c = acc || pc > 0;
            const int ep = (acc_c ? EP_ACC : 0) | (relu && pc + kc == K ? EP_RELU : 0);
            const float *bias_c = pc == 0 && bias ? bias + jc : NULL;
            const float *bblk = B + pc * rb + jc * cb;
            ptrdiff_t ldb = rb;
            int nfull = nc / NR * NR; /* columns read in place (or packed) as full tiles */
            if (packB) {
                int w = (nc + NR - 1) / NR * NR;
                pack_b(kc, nc, w, bblk, rb, cb, bpack);
                bblk = bpack;
                ldb = w;
                nfull = w;
            } else if (nfull < nc) {
                pack_b(kc, nc - nfull, NR, bblk + nfull, rb, 1, bedge);
            }
            for (int ir = 0; ir < M; ir += MR) {
                const int mr = imin(MR, M - ir);
                const float *a = A + ir * ra + pc * ca;
                kern_fn *k = kern;
                ptrdiff_t la = lda;
                if (mr < MR) { /* the last rows, zero-padded, as a column-major panel */
                    for (int p = 0; p < kc; p++) {
                        for (int i = 0; i < mr; i++) apad[p * MR + i] = a[i * ra + p * ca];
                        for (int i = mr; i < MR; i++) apad[p * MR + i] = 0.0f;
                    }
                    a = apad;
                    k = ks->col;
                    la = MR;
                }
                float *c = C + (ptrdiff_t)ir * ldc + jc;
                for (int jr = 0; jr < nc; jr += NR) {
                    const int nr = imin(NR, nc - jr);
                    const float *b = jr < nfull ? bblk + jr : bedge;
                    const ptrdiff_t lb = jr < nfull ? ldb : NR;
                    if (mr == MR && nr == NR) {
                        k(kc, a, la, b, lb, c + jr, ldc, bias_c ? bias_c + jr : NULL, ep);
                        continue;
                    }
                    /* an edge tile: its valid part, with the kernel's epilogue in scalar code */
                    k(kc, a, la, b, lb, edge, NR, NULL, 0);
                    for (int i = 0; i < mr; i++)
                        for (int j = 0; j < nr; j++) {
                            float *cij = c + (ptrdiff_t)i * ldc + jr + j, e = edge[i * NR + j];
                            float v = bias_c ? bias_c[jr + j] + e : acc_c ? *cij + e : e;
                            *cij = ep & EP_RELU && !(v > 0.0f) ? 0.0f : v;
                        }
                }
            }
        }
    }
    free(bpack);
    return DQN_OK;
}

dqn_status dqn_gemm_builtin_xwt_ld(const float *X, const float *W, int ldw, const float *b,
                                   float *Y, int M, int K, int N) {
    return builtin_gemm(M, N, K, X, K, 1, W, 1, ldw, Y, N, 0, b, 0);
}

dqn_status dqn_gemm_builtin_xwt_relu(const float *X, const float *W, int ldw, const float *b,
                                     float *Y, int M, int K, int N) {
    return builtin_gemm(M, N, K, X, K, 1, W, 1, ldw, Y, N, 0, b, 1);
}

dqn_status dqn_gemm_builtin_dyw_ld(const float *dY, const float *W, int ldw, float *dX, int acc,
                                   int M, int K, int N) {
    return builtin_gemm(M, K, N, dY, N, 1, W, ldw, 1, dX, K, acc, NULL, 0);
}

dqn_status dqn_gemm_builtin_dytx_ld(const float *dY, const float *X, float *dW, int ldw, int M,
                                    int K, int N) {
    return builtin_gemm(N, K, M, dY, 1, N, X, K, 1, dW, ldw, 0, NULL, 0);
}

#ifdef DQN_HAVE_OPENBLAS
#include <cblas.h>

/* Which GEMM takes the calls: -1 the default below, 0 OpenBLAS, 1 the built-in one (set only by
 * the benchmarks, between runs). */
static _Atomic int route = -1;
static _Atomic int threads_asked = 1;

/* The default: the built-in GEMM wherever it has vector tile kernels (AVX2 or AVX-512) and one
 * thread is asked for. At the model's shapes it beats OpenBLAS's single thread (docs/
 * BENCHMARKS.md), it does not hang on OpenBLAS's CPU detection (0.3.21 takes AVX-512 VMs for
 * Prescott and runs its slowest kernels there), and an OpenBLAS build then computes what a
 * built-in one does, bit for bit. OpenBLAS keeps the CPUs without AVX2 and the threaded runs. */
static int use_builtin(void) {
    int r = route;
    if (r >= 0) return r;
    return threads_asked == 1 && pick_kernels() != &kset_portable;
}

void dqn_cpu_gemm_force_builtin(int on) { route = on != 0; }

int dqn_cpu_have_openblas(void) { return 1; }

const char *dqn_cpu_gemm_name(void) { return use_builtin() ? "builtin" : "openblas"; }

dqn_status dqn_cpu_set_threads(int n) {
    if (n < 1) return DQN_ERR(DQN_ERR_ARG, "threads = %d, must be >= 1", n);
    openblas_set_num_threads(n);
    threads_asked = n;
    return DQN_OK;
}

int dqn_cpu_threads(void) { return openblas_get_num_threads(); }

dqn_status dqn_gemm_xwt_ld(const float *X, const float *W, int ldw, const float *b, float *Y, int M,
                           int K, int N) {
    if (use_builtin()) return dqn_gemm_builtin_xwt_ld(X, W, ldw, b, Y, M, K, N);
    if (b)
        for (int i = 0; i < M; i++) memcpy(Y + (size_t)i * N, b, (size_t)N * sizeof *b);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, X, K, W, ldw,
                b ? 1.0f : 0.0f, Y, N);
    return DQN_OK;
}

int dqn_gemm_xwt_relu(const float *X, const float *W, int ldw, const float *b, float *Y, int M,
                      int K, int N, dqn_status *st) {
    if (!use_builtin()) return 0;
    *st = dqn_gemm_builtin_xwt_relu(X, W, ldw, b, Y, M, K, N);
    return 1;
}

dqn_status dqn_gemm_dyw_ld(const float *dY, const float *W, int ldw, float *dX, int acc, int M,
                           int K, int N) {
    if (use_builtin()) return dqn_gemm_builtin_dyw_ld(dY, W, ldw, dX, acc, M, K, N);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dY, N, W, ldw,
                acc ? 1.0f : 0.0f, dX, K);
    return DQN_OK;
}

dqn_status dqn_gemm_dytx_ld(const float *dY, const float *X, float *dW, int ldw, int M, int K,
                            int N) {
    if (use_builtin()) return dqn_gemm_builtin_dytx_ld(dY, X, dW, ldw, M, K, N);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dY, N, X, K, 0.0f, dW, ldw);
    return DQN_OK;
}

#else /* built-in GEMM */

void dqn_cpu_gemm_force_builtin(int on) { (void)on; }

int dqn_cpu_have_openblas(void) { return 0; }

const char *dqn_cpu_gemm_name(void) { return "builtin"; }

dqn_status dqn_cpu_set_threads(int n) {
    if (n < 1) return DQN_ERR(DQN_ERR_ARG, "threads = %d, must be >= 1", n);
    return DQN_OK;
}

int dqn_cpu_threads(void) { return 1; }

dqn_status dqn_gemm_xwt_ld(const float *X, const float *W, int ldw, const float *b, float *Y, int M,
                           int K, int N) {
    return dqn_gemm_builtin_xwt_ld(X, W, ldw, b, Y, M, K, N);
}

int dqn_gemm_xwt_relu(const float *X, const float *W, int ldw, const float *b, float *Y, int M,
                      int K, int N, dqn_status *st) {
    *st = dqn_gemm_builtin_xwt_relu(X, W, ldw, b, Y, M, K, N);
    return 1;
}

dqn_status dqn_gemm_dyw_ld(const float *dY, const float *W, int ldw, float *dX, int acc, int M,
                           int K, int N) {
    return dqn_gemm_builtin_dyw_ld(dY, W, ldw, dX, acc, M, K, N);
}

dqn_status dqn_gemm_dytx_ld(const float *dY, const float *X, float *dW, int ldw, int M, int K,
                            int N) {
    return dqn_gemm_builtin_dytx_ld(dY, X, dW, ldw, M, K, N);
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
