/* Small GEMMs written for the job: C[i, j] = sum_r A(i, r) B(r, j), with the layer's epilogue
 * (accumulate into C, bias, ReLU or ELU) and, for a dW GEMM, the bias gradient (the row sums of
 * A), in one kernel launched under programmatic dependent launch. At small batch each of cuBLAS's
 * GEMMs is a plainly launched node, a dW with its bias gradient a second (BGRADB) node, and
 * ELU and the residual's sum a node each: here they are one. A long reduction is split across
 * blocks (gridDim.z); the last block of a tile sums the splits' partials in split order, so the
 * result does not depend on timing. The math is plain fp32; cuda_gemm.cu decides where it runs
 * (own_gemm: the fp32 math mode, layers at most 128 wide, at most cuda_impl.own_gemm_macs
 * multiply-adds). */
#include "backends/cuda/cuda_common.cuh"

#define SG_T 256   /* threads: a 16 x 16 grid, each thread (BM/16) x (BN/16) outputs */
#define SG_SPLIT 2 /* a dW GEMM's split: toward this many blocks a multiprocessor */

typedef struct {
    const float *A;
    long sai, sar;       /* A(i, r) = A[i * sai + r * sar] */
    const float *B;
    long sbr, sbj;       /* B(r, j) = B[r * sbr + j * sbj] */
    float *C;
    long ldc;            /* C[i * ldc + j] */
    const float *bias;   /* [N] per column, or NULL */
    int act, acc;        /* dqn_act; acc: C += */
    int M, N, R;         /* C is M x N; the reduction is R long */
    int chunk;           /* reduction rows of one split (a multiple of a stage's rows) */
    float *ws;           /* splits' partials [gridDim.z][M][N], then row sums [gridDim.z][M] */
    float *rowsum;       /* [M] = sum_r A(i, r) (blocks of column tile 0), or NULL */
    unsigned *done;      /* [gridDim.x * gridDim.y] blocks finished per tile, 0 between calls */
} sg_args;

/* the epilogue: v (+ C's value c) (+ the bias b), then the activation */
__device__ __forceinline__ float sg_epi_of(const sg_args &k, float v, float c, float b) {
    if (k.acc) v += c;
    if (k.bias) v += b;
    if (k.act == DQN_ACT_RELU) return v > 0.0f ? v : 0.0f;
    if (k.act == DQN_ACT_ELU) return v > 0.0f ? v : expm1f(v);
    return v;
}
__device__ __forceinline__ float sg_epi(const sg_args &k, float v, int i, int j) {
    return sg_epi_of(k, v, k.acc ? k.C[(long)i * k.ldc + j] : 0.0f, k.bias ? k.bias[j] : 0.0f);
}

/* 4 bytes global -> shared without a register (zeros when !ok), so that several stages of the
 * reduction are in flight at once: at these sizes a GEMM is a few round trips of latency */
__device__ __forceinline__ void sg_cp4(float *dst, const float *src, bool ok) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(__cvta_generic_to_global(src)), "r"(ok ? 4 : 0)
                 : "memory");
#else
    *dst = ok ? *src : 0.0f;
#endif
}
__device__ __forceinline__ void sg_commit(void) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void sg_wait(void) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* A_R1: A is contiguous along r (else along i); B_J1: B is contiguous along j (else along r).
 * BK reduction rows a stage, SG_STAGES stages in shared memory (all but one in flight while one
 * is multiplied; 2 stages of 16 rows measured slower at small batch). A thread computes rows ty*TM.. and columns tx*TN.. (vector reads of
 * shared memory). */
template <int BM, int BK, int SG_STAGES, bool A_R1, bool B_J1>
__global__ void __launch_bounds__(SG_T) k_sgemm(sg_args k) {
    KERNEL_PROLOGUE();
    constexpr int BN = BM, TM = BM / 16, TN = BN / 16, P = BM + 4;
    constexpr int LA = BM * BK / SG_T, LB = BK * BN / SG_T;
    __shared__ __align__(16) float As[SG_STAGES][BK][P];
    __shared__ __align__(16) float Bs[SG_STAGES][BK][P];
    __shared__ unsigned last;
    const int t = threadIdx.x, ty = t / 16, tx = t % 16;
    const int i0 = blockIdx.x * BM, j0 = blockIdx.y * BN;
    const int r0 = blockIdx.z * k.chunk, r1 = min(k.R, r0 + k.chunk);
    const int nst = (r1 - r0 + BK - 1) / BK;
    const bool rs_on = k.rowsum && blockIdx.y == 0;
    float acc[TM][TN];
#pragma unroll
    for (int m = 0; m < TM; m++)
#pragma unroll
        for (int n = 0; n < TN; n++) acc[m][n] = 0.0f;
    float rs = 0.0f;
    /* unsplit 32-row tiles (the small layers, where a GEMM is a few round trips): the
     * epilogue's loads (bias, C to accumulate into) issued now, so that their round trip overlaps
     * the main loop's instead of following it */
    constexpr bool PRE = TM * TN <= 4;
    float cpre[TM][TN], bpre[TN];
    if (PRE && gridDim.z == 1) {
#pragma unroll
        for (int n = 0; n < TN; n++) {
            const int j = min(j0 + tx * TN + n, k.N - 1);
            bpre[n] = k.bias ? k.bias[j] : 0.0f;
#pragma unroll
            for (int m = 0; m < TM; m++) {
                const int i = min(i0 + ty * TM + m, k.M - 1);
                cpre[m][n] = k.acc ? k.C[(long)i * k.ldc + j] : 0.0f;
            }
        }
    }

    auto issue = [&](int st) {
        if (st < nst) {
            const int rb0 = r0 + st * BK, buf = st % SG_STAGES;
#pragma unroll
            for (int q = 0; q < LA; q++) {
                const int e = t + SG_T * q;
                const int ii = A_R1 ? e / BK : e % BM, rr = A_R1 ? e % BK : e / BM;
                const int gi = i0 + ii, gr = rb0 + rr;
                const bool ok = gi < k.M && gr < r1;
                sg_cp4(&As[buf][rr][ii], ok ? k.A + (long)gi * k.sai + (long)gr * k.sar : k.A, ok);
            }
#pragma unroll
            for (int q = 0; q < LB; q++) {
                const int e = t + SG_T * q;
                const int jj = B_J1 ? e % BN : e / BK, rr = B_J1 ? e / BN : e % BK;
                const int gj = j0 + jj, gr = rb0 + rr;
                const bool ok = gj < k.N && gr < r1;
                sg_cp4(&Bs[buf][rr][jj], ok ? k.B + (long)gr * k.sbr + (long)gj * k.sbj : k.B, ok);
            }
        }
        sg_commit();   /* an empty group past the end keeps the count of groups in step */
    };
#pragma unroll
    for (int st = 0; st < SG_STAGES - 1; st++) issue(st);
    for (int st = 0; st < nst; st++) {
        sg_wait<SG_STAGES - 2>();
        __syncthreads();   /* stage st is in; everyone is done with the buffer issue() refills */
        issue(st + SG_STAGES - 1);
        const int buf = st % SG_STAGES;
        if (rs_on && t < BM)
#pragma unroll
            for (int kk = 0; kk < BK; kk++) rs += As[buf][kk][t];
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float a[TM], b[TN];
            if constexpr (TM == 4) {
                const float4 va = *(const float4 *)&As[buf][kk][ty * 4];
                const float4 vb = *(const float4 *)&Bs[buf][kk][tx * 4];
                a[0] = va.x, a[1] = va.y, a[2] = va.z, a[3] = va.w;
                b[0] = vb.x, b[1] = vb.y, b[2] = vb.z, b[3] = vb.w;
            } else {
                const float2 va = *(const float2 *)&As[buf][kk][ty * 2];
                const float2 vb = *(const float2 *)&Bs[buf][kk][tx * 2];
                a[0] = va.x, a[1] = va.y;
                b[0] = vb.x, b[1] = vb.y;
            }
#pragma unroll
            for (int m = 0; m < TM; m++)
#pragma unroll
                for (int n = 0; n < TN; n++) acc[m][n] = fmaf(a[m], b[n], acc[m][n]);
        }
    }
    sg_wait<0>();

    if (gridDim.z == 1) {
#pragma unroll
        for (int m = 0; m < TM; m++)
#pragma unroll
            for (int n = 0; n < TN; n++) {
                const int i = i0 + ty * TM + m, j = j0 + tx * TN + n;
                if (i < k.M && j < k.N)
                    k.C[(long)i * k.ldc + j] = PRE ? sg_epi_of(k, acc[m][n], cpre[m][n], bpre[n])
                                                   : sg_epi(k, acc[m][n], i, j);
            }
        if (rs_on && t < BM && i0 + t < k.M) k.rowsum[i0 + t] = rs;
        return;
    }
    /* split: this block's partial, then the tile's last block sums them in split order */
    const long MN = (long)k.M * k.N;
    float *rs_ws = k.ws + MN * gridDim.z;
#pragma unroll
    for (int m = 0; m < TM; m++)
#pragma unroll
        for (int n = 0; n < TN; n++) {
            const int i = i0 + ty * TM + m, j = j0 + tx * TN + n;
            if (i < k.M && j < k.N) k.ws[MN * blockIdx.z + (long)i * k.N + j] = acc[m][n];
        }
    if (rs_on && t < BM && i0 + t < k.M) rs_ws[(long)k.M * blockIdx.z + i0 + t] = rs;
    __threadfence();
    __syncthreads();
    unsigned *done = k.done + blockIdx.x * gridDim.y + blockIdx.y;
    if (t == 0) last = atomicAdd(done, 1u) == gridDim.z - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const unsigned Z = gridDim.z;
    unsigned z;
    if constexpr (TM * TN <= 4) {
        /* every output's next 8 partials loaded before any is added (the outputs' chains side
         * by side, not one after another), each output's summed in split order */
        float s[TM][TN];
        const float *p[TM][TN];
#pragma unroll
        for (int m = 0; m < TM; m++)
#pragma unroll
            for (int n = 0; n < TN; n++) {   /* outside the matrix: read inside it, not stored */
                const int i = min(i0 + ty * TM + m, k.M - 1), j = min(j0 + tx * TN + n, k.N - 1);
                p[m][n] = k.ws + (long)i * k.N + j;
                s[m][n] = 0.0f;
            }
        for (z = 0; z + 8 <= Z; z += 8) {
            float v[TM][TN][8];
#pragma unroll
            for (int m = 0; m < TM; m++)
#pragma unroll
                for (int n = 0; n < TN; n++)
#pragma unroll
                    for (int u = 0; u < 8; u++) v[m][n][u] = __ldcg(p[m][n] + MN * (z + u));
#pragma unroll
            for (int m = 0; m < TM; m++)
#pragma unroll
                for (int n = 0; n < TN; n++)
#pragma unroll
                    for (int u = 0; u < 8; u++) s[m][n] += v[m][n][u];
        }
        for (; z < Z; z++)
#pragma unroll
            for (int m = 0; m < TM; m++)
#pragma unroll
                for (int n = 0; n < TN; n++) s[m][n] += __ldcg(p[m][n] + MN * z);
#pragma unroll
        for (int m = 0; m < TM; m++)
#pragma unroll
            for (int n = 0; n < TN; n++) {
                const int i = i0 + ty * TM + m, j = j0 + tx * TN + n;
                if (i < k.M && j < k.N) k.C[(long)i * k.ldc + j] = sg_epi(k, s[m][n], i, j);
            }
    } else {   /* 64-row tiles (rarely split: dW outputs are at most 128 x 128) */
#pragma unroll
        for (int m = 0; m < TM; m++)
#pragma unroll
            for (int n = 0; n < TN; n++) {
                const int i = i0 + ty * TM + m, j = j0 + tx * TN + n;
                if (i >= k.M || j >= k.N) continue;
                const float *p = k.ws + (long)i * k.N + j;
                float s = 0.0f;
                for (z = 0; z + 8 <= Z; z += 8) {   /* eight loads in flight, summed in order */
                    float v[8];
#pragma unroll
                    for (int u = 0; u < 8; u++) v[u] = __ldcg(p + MN * (z + u));
#pragma unroll
                    for (int u = 0; u < 8; u++) s += v[u];
                }
                for (; z < Z; z++) s += __ldcg(p + MN * z);
                k.C[(long)i * k.ldc + j] = sg_epi(k, s, i, j);
            }
    }
    if (rs_on && t < BM && i0 + t < k.M) {
        const float *q = rs_ws + i0 + t;
        float r = 0.0f;
        for (z = 0; z + 8 <= Z; z += 8) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) v[u] = __ldcg(q + (long)k.M * (z + u));
#pragma unroll
            for (int u = 0; u < 8; u++) r += v[u];
        }
        for (; z < Z; z++) r += __ldcg(q + (long)k.M * z);
        k.rowsum[i0 + t] = r;
    }
    if (t == 0) *done = 0;
}

/* tiles of 64 (16 reduction rows a stage) where they give the GPU enough blocks, else 32 (32) */
template <bool A_R1, bool B_J1>
static dqn_status sg_launch(cuda_impl *c, sg_args *k, int split) {
    const int big = ((k->M + 63) / 64) * ((k->N + 63) / 64) >= c->sm_count / 2;
    const int bm = big ? 64 : 32, bk = big ? 16 : 32;
    dim3 grid((unsigned)((k->M + bm - 1) / bm), (unsigned)((k->N + bm - 1) / bm), 1);
    const long tiles = (long)grid.x * grid.y;
    int z = 1;
    if (split) {
        /* about SG_SPLIT blocks a multiprocessor, each at least two stages of the reduction, as
         * many as the workspace and the counters hold */
        long want = ((long)SG_SPLIT * c->sm_count + tiles - 1) / tiles;
        long most = (k->R + 2 * bk - 1) / (2 * bk);
        long room = (long)(CUDA_WORKSPACE_BYTES / sizeof(float)) / ((long)k->M * k->N + k->M);
        z = (int)(want < most ? want : most);
        if (z > room) z = (int)room;
        if (z < 1 || tiles > SG_COUNTERS) z = 1;
    }
    k->chunk = z > 1 ? ((k->R + z - 1) / z + bk - 1) / bk * bk : k->R;
    grid.z = (unsigned)((k->R + k->chunk - 1) / k->chunk);
    k->ws = (float *)c->workspace;
    k->done = c->sg_done;
    if (big) KLAUNCH(c, (k_sgemm<64, 16, 4, A_R1, B_J1>), grid, SG_T, 0, *k);
    else KLAUNCH(c, (k_sgemm<32, 32, 4, A_R1, B_J1>), grid, SG_T, 0, *k);
    return DQN_OK;
}

/* Y[M, N] = act(X[M, K] W^T + b), W [N, K] with rows ldw apart */
dqn_status cuda_sgemm_fwd(cuda_impl *c, const float *X, const float *W, int ldw, const float *b,
                          float *Y, int M, int K, int N, dqn_act act) {
    sg_args k = {};
    k.A = X, k.sai = K, k.sar = 1;
    k.B = W, k.sbr = 1, k.sbj = ldw;
    k.C = Y, k.ldc = N, k.bias = b, k.act = act;
    k.M = M, k.N = N, k.R = K;
    return sg_launch<true, false>(c, &k, 0);
}

/* dX[M, K] (+)= dY[M, N] W (W rows ldw apart) */
dqn_status cuda_sgemm_dx(cuda_impl *c, const float *dY, const float *W, int ldw, float *dX,
                         int acc, int M, int K, int N) {
    sg_args k = {};
    k.A = dY, k.sai = N, k.sar = 1;
    k.B = W, k.sbr = ldw, k.sbj = 1;
    k.C = dX, k.ldc = K, k.acc = acc;
    k.M = M, k.N = K, k.R = N;
    return sg_launch<true, true>(c, &k, 0);
}

/* dW[N, K] (rows ldw apart) = dY^T X, and db[N] = column sums of dY when db is not NULL */
dqn_status cuda_sgemm_dw(cuda_impl *c, const float *X, const float *dY, float *dW, int ldw,
                         float *db, int M, int K, int N) {
    sg_args k = {};
    k.A = dY, k.sai = 1, k.sar = N;
    k.B = X, k.sbr = K, k.sbj = 1;
    k.C = dW, k.ldc = ldw, k.rowsum = db;
    k.M = N, k.N = K, k.R = M;
    return sg_launch<false, true>(c, &k, 1);
}
