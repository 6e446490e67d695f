/* The trunk's forward (trunk_fwd: the input layer and the GRN blocks) in one kernel, for the
 * small models and batches where each of its layers would be a GEMM node of a few blocks: at
 * cartpole B = 32 the sequence is 4 nodes a pass, each a few microseconds of latency. A block
 * takes TR_ROWS rows; all the weights it needs arrive in shared memory at once (16-byte copies,
 * rows padded so that a warp's float4 reads are conflict-free), then the layers run one after
 * another from shared memory, a thread a column. The sums are the own GEMM kernel's
 * (cuda_sgemm.cu: fmaf over the reduction in order from zero, then the bias, then the
 * activation) and the gate and LayerNorm are k_grn_gate_ln_fwd<2>'s, so the result is
 * bit-identical to the sequence on the own kernels, which is where this runs (trunk_fused). */
#include "backends/cuda/cuda_common.cuh"

#define TR_T 256      /* threads: 8 warps */
#define TR_ROWS 8     /* rows a block: a warp a row in the gate and LayerNorm */
#define TR_MAX_D 64   /* the row in registers as k_grn_gate_ln_fwd<2> holds it */

/* rows x K floats (K % 4 == 0, rows K apart) into shared rows K + 4 apart: a warp's float4
 * reads of 8 consecutive rows then fall in distinct banks */
__device__ static void tr_stage_rows(float *dst, const float *src, int rows, int K) {
    const int q = K / 4;
    for (int i = threadIdx.x; i < rows * q; i += TR_T)
        cp_async16(&dst[(i / q) * (K + 4) + 4 * (i % q)], &src[4 * i]);
}

/* out[r][j] = act(sum_k in[r][k] W[j][k] + b[j]) for the block's TR_ROWS rows (in: rows K + 4
 * apart) and N <= 128 columns (W: rows K + 4 apart; at most 4 outputs a thread), into shared out
 * (rows ldo apart) and the rows < rows of global Y (rows N apart from row0's). The own GEMM's
 * order: fmaf from zero over k, then the bias, then the activation. */
__device__ static void tr_layer(const float *in, int K, const float *W, const float *b, int N,
                                dqn_act act, float *out, int ldo, float *Y, int rows) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const float *pa[4], *pw[4];
    int r[4], j[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int o = threadIdx.x + TR_T * q;
        r[q] = o < TR_ROWS * N ? o / N : 0;
        j[q] = o < TR_ROWS * N ? o % N : 0;
        pa[q] = in + r[q] * (K + 4);
        pw[q] = W + j[q] * (K + 4);
    }
    const int nq = (TR_ROWS * N - (int)threadIdx.x + TR_T - 1) / TR_T;
#pragma unroll 2
    for (int k = 0; k < K; k += 4)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const float4 a = *(const float4 *)(pa[q] + k), w = *(const float4 *)(pw[q] + k);
            acc[q] = fmaf(a.x, w.x, acc[q]);
            acc[q] = fmaf(a.y, w.y, acc[q]);
            acc[q] = fmaf(a.z, w.z, acc[q]);
            acc[q] = fmaf(a.w, w.w, acc[q]);
        }
#pragma unroll
    for (int q = 0; q < 4; q++) {
        if (q >= nq) break;
        float v = acc[q] + b[j[q]];
        if (act == DQN_ACT_ELU) v = v > 0.0f ? v : expm1f(v);
        out[r[q] * ldo + j[q]] = v;
        if (r[q] < rows) Y[(size_t)r[q] * N + j[q]] = v;
    }
}

/* Shared memory (floats), in this order: h, e [TR_ROWS][d + 4], g [TR_ROWS][2d]; with the input
 * layer x [TR_ROWS][obs + 4], W_in [d][obs + 4], b_in [d]; per GRN block W_a [d][d + 4],
 * W_b [2d][d + 4], b_a, b_b, gamma, beta (5d): tr_smem_floats. */
__global__ void __launch_bounds__(TR_T) k_trunk_fwd(dqn_trunk_io k) {
    KERNEL_PROLOGUE();
    extern __shared__ __align__(16) float sm[];
    const int d = k.d, obs = k.obs, row0 = blockIdx.x * TR_ROWS, ld = d + 4;
    const int rows = min(TR_ROWS, k.M - row0);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float *hs = sm, *es = hs + TR_ROWS * ld, *gs = es + TR_ROWS * ld;
    float *p = gs + TR_ROWS * 2 * d;
    float *xs = NULL, *win = NULL, *bin = NULL;
    if (k.W_in) {
        xs = p, win = xs + TR_ROWS * (obs + 4), bin = win + d * (obs + 4), p = bin + d;
        tr_stage_rows(xs, k.x + (size_t)row0 * obs, rows, obs);
        for (int i = threadIdx.x; i < (TR_ROWS - rows) * (obs + 4); i += TR_T)
            xs[rows * (obs + 4) + i] = 0.0f;
        tr_stage_rows(win, k.W_in, d, obs);
        tr_stage_rows(bin, k.b_in, 1, d);
    } else {
        tr_stage_rows(hs, k.h0 + (size_t)row0 * d, rows, d);
        for (int i = threadIdx.x; i < (TR_ROWS - rows) * ld; i += TR_T) hs[rows * ld + i] = 0.0f;
    }
    /* every block's weights at once */
    const int per = d * ld + 2 * d * ld + 5 * d;
    for (int l = 0; l < k.L; l++) {
        const dqn_grn_io *g = &k.grn[l];
        float *wa = p + l * per, *wb = wa + d * ld, *ba = wb + 2 * d * ld;
        tr_stage_rows(wa, g->W_a, d, d);
        tr_stage_rows(wb, g->W_b, 2 * d, d);
        tr_stage_rows(ba, g->b_a, 1, d);
        tr_stage_rows(ba + d, g->b_b, 1, 2 * d);
        tr_stage_rows(ba + 3 * d, g->gamma, 1, d);
        tr_stage_rows(ba + 4 * d, g->beta, 1, d);
    }
    cp_async_wait_all();
    __syncthreads();
    if (k.W_in) {
        tr_layer(xs, obs, win, bin, d, DQN_ACT_NONE, hs, ld, k.h0 + (size_t)row0 * d, rows);
        __syncthreads();
    }
    for (int l = 0; l < k.L; l++) {
        const dqn_grn_io *g = &k.grn[l];
        const float *wa = p + l * per, *wb = wa + d * ld, *ba = wb + 2 * d * ld;
        tr_layer(hs, d, wa, ba, d, DQN_ACT_ELU, es, ld, g->e + (size_t)row0 * d, rows);
        __syncthreads();
        tr_layer(es, d, wb, ba + d, 2 * d, DQN_ACT_NONE, gs, 2 * d, g->g + (size_t)row0 * 2 * d,
                 rows);
        __syncthreads();
        /* k_grn_gate_ln_fwd<2>, row w of the block from shared memory; y becomes the next h */
        const float *gamma = ba + 3 * d, *beta = ba + 4 * d;
        float hv[2], ga[2], gb[2], rv[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int j = lane + 32 * i;
            const bool in = j < d;
            hv[i] = in ? hs[w * ld + j] : 0.0f;
            ga[i] = in ? gs[w * 2 * d + j] : 0.0f;
            gb[i] = in ? gs[w * 2 * d + d + j] : 0.0f;
        }
        float sum = 0.0f, q = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (lane + 32 * i < d) {
                rv[i] = hv[i] + ga[i] * sigmoidf(gb[i]);
                sum += rv[i];
            }
        const float mu = warp_sum(sum) / (float)d;
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (lane + 32 * i < d) {
                float t = rv[i] - mu;
                q += t * t;
            }
        const float rs = 1.0f / sqrtf(warp_sum(q) / (float)d + 1e-5f);
        /* a warp reads and writes only its own row of hs */
        const size_t m = (size_t)row0 + w;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int j = lane + 32 * i;
            if (j >= d) break;
            const float y = (rv[i] - mu) * rs * gamma[j] + beta[j];
            hs[w * ld + j] = y;
            if (w < rows) {
                g->r[m * d + j] = rv[i];
                g->y[m * d + j] = y;
            }
        }
        if (lane == 0 && w < rows) {
            g->mean[m] = mu;
            g->rstd[m] = rs;
        }
        __syncthreads();
    }
}

static size_t tr_smem_floats(const dqn_trunk_io *t) {
    const size_t d = (size_t)t->d, obs = (size_t)t->obs, ld = d + 4;
    size_t n = TR_ROWS * (2 * ld + 2 * d);   /* h, e, g */
    if (t->W_in) n += TR_ROWS * (obs + 4) + d * (obs + 4) + d;
    return n + (size_t)t->L * (3 * d * ld + 5 * d);
}

static int tr_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Where the kernel runs: d <= 64, every layer one the sequence would give the own GEMM kernel (so
 * the two agree bit for bit; in TF32 math none), at most tune.trunk_rows rows, widths a
 * multiple of 4 and 16-byte aligned inputs (its copies are 16 bytes), and the shared memory
 * there. */
static int trunk_fused(const cuda_impl *c, const dqn_trunk_io *t) {
    const double M = t->M, d = t->d;
    const double own = c->compute == CUBLAS_COMPUTE_32F ? c->tune.own_gemm_macs : 0.0;
    if (own <= 0 || t->d > TR_MAX_D || t->d % 4 || t->M > c->tune.trunk_rows) return 0;
    if (t->W_in && (t->obs > OWN_GEMM_WIDTH || t->obs % 4 || M * t->obs * d > own ||
                    !tr_aligned(t->x) || !tr_aligned(t->W_in) || !tr_aligned(t->b_in)))
        return 0;
    if (!t->W_in && !tr_aligned(t->h0)) return 0;
    if (t->L > 0 && M * d * 2 * d > own) return 0;
    for (int l = 0; l < t->L; l++) {
        const dqn_grn_io *g = &t->grn[l];
        if (!tr_aligned(g->W_a) || !tr_aligned(g->b_a) || !tr_aligned(g->W_b) ||
            !tr_aligned(g->b_b) || !tr_aligned(g->gamma) || !tr_aligned(g->beta))
            return 0;
    }
    return tr_smem_floats(t) * sizeof(float) <= (size_t)c->smem_optin;
}

dqn_status cuda_trunk_fwd(dqn_backend *be, const dqn_trunk_io *t) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(t->M >= 0 && t->d > 0 && t->L >= 0 && t->L <= DQN_TRUNK_MAX_GRN &&
                 (!t->W_in || t->obs > 0),
             "trunk_fwd: bad shape M=%d obs=%d d=%d L=%d", t->M, t->obs, t->d, t->L);
    if (t->M == 0) return DQN_OK;
    if (!trunk_fused(c, t)) return dqn_trunk_fwd_seq(be, t);
    const size_t smem = tr_smem_floats(t) * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(k_trunk_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    KLAUNCH(c, k_trunk_fwd, (unsigned)((t->M + TR_ROWS - 1) / TR_ROWS), TR_T, smem, *t);
    return DQN_OK;
}
