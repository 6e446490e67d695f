/* The GRN block's tail fused: gate + LayerNorm forward in one kernel, and LayerNorm
 * backward + gate backward, with dgamma/dbeta, in one kernel. One warp per row, with the
 * arithmetic of cuda_elementwise.cu's gate and cuda_norm.cu's LayerNorm; dgamma and dbeta are
 * column sums: per-warp sums in shared memory, per-block partials in scratch, and the last block
 * (an integer counter) adds them in block order, so replays are bit-identical. */
#include "backends/cuda/cuda_health.cuh"

#define GRN_WARPS 8
#define GRN_BWD_WARPS 16     /* grn_ln_gate_bwd: rows in flight a block (at most 16: registers) */
#define GRN_MAX_PARTS 64     /* grn_ln_gate_bwd: blocks, each a part of the rows */
/* grn_ln_gate_bwd's per-warp sums: the 48 KiB a launch gets without opting in, less its static
 * bytes */
#define GRN_SMEM_BYTES (48 * 1024 - 64)
#define GRN_TAIL_BATCH 32    /* grn_ln_gate_bwd: partials the last block loads at once */

/* With NJ > 0 (d <= 32 NJ) a lane keeps its row elements j = lane + 32 i in registers, all loaded
 * before any store, so the statistics do not read the row back; NJ 0 streams the row (any d).
 * The arithmetic and its order are the same either way (ln_row_stats'). */
template <int NJ>
__global__ void k_grn_gate_ln_fwd(const float *__restrict__ h, const float *__restrict__ g,
                                  const float *__restrict__ gamma, const float *__restrict__ beta,
                                  float *__restrict__ r, float *__restrict__ y,
                                  float *__restrict__ mean, float *__restrict__ rstd, int M, int d) {
    KERNEL_PROLOGUE();
    const int lane = threadIdx.x & 31, m = blockIdx.x * GRN_WARPS + (threadIdx.x >> 5);
    if (m >= M) return;
    const float *hm = h + (size_t)m * d, *gm = g + (size_t)m * 2 * d;
    float *rm = r + (size_t)m * d, *ym = y + (size_t)m * d;
    float mu, rs;
    if constexpr (NJ > 0) {
        float hv[NJ], ga[NJ], gb[NJ], rv[NJ];
#pragma unroll
        for (int i = 0; i < NJ; i++) {
            const int j = lane + 32 * i;
            const bool in = j < d;
            hv[i] = in ? hm[j] : 0.0f;
            ga[i] = in ? gm[j] : 0.0f;
            gb[i] = in ? gm[d + j] : 0.0f;
        }
        float sum = 0.0f, q = 0.0f;
#pragma unroll
        for (int i = 0; i < NJ; i++)
            if (lane + 32 * i < d) {
                rv[i] = hv[i] + ga[i] * sigmoidf(gb[i]);
                sum += rv[i];
            }
        mu = warp_sum(sum) / (float)d;
#pragma unroll
        for (int i = 0; i < NJ; i++)
            if (lane + 32 * i < d) {
                float t = rv[i] - mu;
                q += t * t;
            }
        rs = 1.0f / sqrtf(warp_sum(q) / (float)d + 1e-5f);
#pragma unroll
        for (int i = 0; i < NJ; i++) {
            const int j = lane + 32 * i;
            if (j >= d) break;
            rm[j] = rv[i];
            ym[j] = (rv[i] - mu) * rs * gamma[j] + beta[j];
        }
    } else {
        for (int j = lane; j < d; j += 32) rm[j] = hm[j] + gm[j] * sigmoidf(gm[d + j]);
        __syncwarp();
        ln_row_stats(rm, d, lane, &mu, &rs);   /* each lane reads back only what it wrote */
        for (int j = lane; j < d; j += 32) ym[j] = (rm[j] - mu) * rs * gamma[j] + beta[j];
    }
    if (lane == 0) {
        mean[m] = mu;
        rstd[m] = rs;
    }
}

/* Block p takes rows [p*chunk, (p+1)*chunk), its warps row by row in turn. With NJ > 0 (d <=
 * 32 NJ) a lane holds its row elements j = lane + 32 i in registers, all loaded before the
 * row's stores, and its dgamma/dbeta sums too; NJ 0 streams the row (any d). The arithmetic of
 * an element is the same either way. Shared: per warp [2][d] sums (dgamma then dbeta). HOST
 * (NJ > 0): the check of dy of a deferred health plan (cuda_health_hosted) on the values as
 * loaded, clamped (and stored back when changed) before use; block p writes partial p. */
template <int NJ, bool HOST>
__global__ void __launch_bounds__(GRN_BWD_WARPS * 32)
k_grn_ln_gate_bwd(const float *x, const float *gamma, const float *mean, const float *rstd,
                  const float *g, const float *dy, float *dres, float *dg, float *dgamma,
                  float *dbeta, int M, int d, int chunk, float *part, unsigned *done,
                  cuda_hosted hs) {
    KERNEL_PROLOGUE();
    static_assert(!HOST || NJ > 0, "the hosted check needs the row in registers");
    extern __shared__ float sm[];
    __shared__ bool last;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, W = blockDim.x >> 5;
    const int p = blockIdx.x, P = gridDim.x;
    float *acc = sm + (size_t)w * 2 * d;
    const int r1 = min(M, (p + 1) * chunk);
    hacc ha;
    float bound = 0.0f;
    if (HOST) {
        acc_init(&ha);
        bound = hosted_bound(&hs);
    }
    if constexpr (NJ > 0) {
        float gam[NJ], ag[NJ], ab[NJ];
#pragma unroll
        for (int i = 0; i < NJ; i++) {
            const int j = lane + 32 * i;
            gam[i] = j < d ? gamma[j] : 0.0f;
            ag[i] = ab[i] = 0.0f;
        }
        for (int m = p * chunk + w; m < r1; m += W) {
            const size_t r = (size_t)m * d;
            const float *gm = g + 2 * r;
            float xv[NJ], e[NJ], ga[NJ], gb[NJ];
#pragma unroll
            for (int i = 0; i < NJ; i++) {
                const int j = lane + 32 * i;
                const bool in = j < d;
                xv[i] = in ? x[r + j] : 0.0f;
                e[i] = in ? dy[r + j] : 0.0f;
                ga[i] = in ? gm[j] : 0.0f;
                gb[i] = in ? gm[d + j] : 0.0f;
            }
            if (HOST) {
#pragma unroll
                for (int i = 0; i < NJ; i++) {
                    const int j = lane + 32 * i;
                    if (j >= d) break;
                    e[i] = scan_one(&ha, hs.x, r + j, e[i], bound, hs.guard);
                }
            }
            const float mu = mean[m], rs = rstd[m];
            /* ln_bwd_row_sums on the registers */
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (int i = 0; i < NJ; i++)
                if (lane + 32 * i < d) {
                    float gj = e[i] * gam[i];
                    sa += gj;
                    sb += gj * ((xv[i] - mu) * rs);
                }
            const float s1 = warp_sum(sa) / (float)d, s2 = warp_sum(sb) / (float)d;
            float *dgm = dg + 2 * r;
#pragma unroll
            for (int i = 0; i < NJ; i++) {
                const int j = lane + 32 * i;
                if (j >= d) break;
                float gj = e[i] * gam[i];
                float xh = (xv[i] - mu) * rs;
                float dr = rs * (gj - s1 - xh * s2);
                float a = ga[i], sg = sigmoidf(gb[i]);
                dres[r + j] = dr;
                dgm[j] = dr * sg;
                dgm[d + j] = dr * a * sg * (1.0f - sg);
                ag[i] += e[i] * xh;
                ab[i] += e[i];
            }
        }
#pragma unroll
        for (int i = 0; i < NJ; i++) {
            const int j = lane + 32 * i;
            if (j < d) {
                acc[j] = ag[i];
                acc[d + j] = ab[i];
            }
        }
    } else {
        for (int j = lane; j < 2 * d; j += 32) acc[j] = 0.0f;
        /* lane j zeroed acc[j], but lane j updates acc[j] and acc[d + j] below */
        __syncwarp();
        for (int m = p * chunk + w; m < r1; m += W) {
            const size_t r = (size_t)m * d;
            const float mu = mean[m], rs = rstd[m];
            float s1, s2;
            ln_bwd_row_sums(x + r, gamma, dy + r, mu, rs, d, lane, &s1, &s2);
            const float *gm = g + 2 * r;
            float *dgm = dg + 2 * r;
            for (int j = lane; j < d; j += 32) {
                float e = dy[r + j], gj = e * gamma[j];
                float xh = (x[r + j] - mu) * rs;
                float dr = rs * (gj - s1 - xh * s2);
                float a = gm[j], sg = sigmoidf(gm[d + j]);
                dres[r + j] = dr;
                dgm[j] = dr * sg;
                dgm[d + j] = dr * a * sg * (1.0f - sg);
                acc[j] += e * xh;
                acc[d + j] += e;
            }
        }
    }
    if constexpr (HOST) {
        __shared__ hacc red[GRN_BWD_WARPS];
        block_reduce_w(&ha, red, W);
        if (threadIdx.x == 0) hosted_put(&hs, &ha, bound);
    }
    __syncthreads();
    /* this block's partial: the warps' sums in warp order */
    for (int j = threadIdx.x; j < 2 * d; j += blockDim.x) {
        float t = 0.0f;
        for (int v = 0; v < W; v++) t += sm[(size_t)v * 2 * d + j];
        part[(size_t)p * 2 * d + j] = t;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == (unsigned)P - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    /* the last block adds the parts in order; a thread's (column, part) pairs run column-major
     * and GRN_TAIL_BATCH loads at a time go out together (L2 only: written by other blocks).
     * The pair is stepped, not divided out: a division per load made this loop the kernel's
     * longest chain (25 us of 42 at B = 4096, d = 256). */
    const int n2 = 2 * d, T = blockDim.x;
    const int nc = threadIdx.x < n2 ? (n2 - threadIdx.x + T - 1) / T : 0, n = nc * P;
    int lq = 0, lj = threadIdx.x;   /* the next load's part and column */
    int aq = 0, aj = threadIdx.x;   /* the next addition's */
    float t = 0.0f;
    for (int f0 = 0; f0 < n; f0 += GRN_TAIL_BATCH) {
        float v[GRN_TAIL_BATCH];
#pragma unroll
        for (int u = 0; u < GRN_TAIL_BATCH; u++) {
            v[u] = f0 + u < n ? __ldcg(part + (size_t)lq * n2 + lj) : 0.0f;
            if (++lq == P) lq = 0, lj += T;
        }
#pragma unroll
        for (int u = 0; u < GRN_TAIL_BATCH; u++) {
            if (f0 + u >= n) break;
            t += v[u];
            if (++aq == P) {
                if (aj < d) dgamma[aj] = t;
                else dbeta[aj - d] = t;
                t = 0.0f, aq = 0, aj += T;
            }
        }
    }
    if (threadIdx.x == 0) *done = 0;
}

dqn_status cuda_grn_gate_ln_fwd(dqn_backend *be, const float *h, const float *g,
                                const float *gamma, const float *beta, float *r, float *y,
                                float *mean, float *rstd, int M, int d) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(M >= 0 && d > 0, "grn_gate_ln_fwd: bad shape M=%d d=%d", M, d);
    if (M == 0) return DQN_OK;
    auto kern = d <= 64    ? k_grn_gate_ln_fwd<2>
                : d <= 256 ? k_grn_gate_ln_fwd<8>
                           : k_grn_gate_ln_fwd<0>;
    KLAUNCH(c, kern, (unsigned)((M + GRN_WARPS - 1) / GRN_WARPS), GRN_WARPS * 32, 0, h, g, gamma, beta,
            r, y, mean, rstd, M, d);
    return DQN_OK;
}

dqn_status cuda_grn_ln_gate_bwd(dqn_backend *be, const float *r, const float *gamma,
                                const float *mean, const float *rstd, const float *g,
                                const float *dy, float *dres, float *dg, float *dgamma,
                                float *dbeta, int M, int d, const void *hplan) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(M >= 0 && d > 0, "grn_ln_gate_bwd: bad shape M=%d d=%d", M, d);
    CUDA_ARG(dres != dy && dg != dy, "grn_ln_gate_bwd: dres and dg must not alias dy");
    if (M == 0) {
        if (hplan) DQN_TRY(cuda_health_check(be, hplan));
        CUDA_CHECK(cudaMemsetAsync(dgamma, 0, (size_t)d * sizeof(float), c->stream));
        CUDA_CHECK(cudaMemsetAsync(dbeta, 0, (size_t)d * sizeof(float), c->stream));
        return DQN_OK;
    }
    /* fewer warps when the per-warp sums of a wide row would not fit */
    int W = GRN_BWD_WARPS;
    const size_t row_bytes = 2 * (size_t)d * sizeof(float);
    while (W > 1 && (size_t)W * row_bytes > GRN_SMEM_BYTES) W--;
    CUDA_ARG(row_bytes <= GRN_SMEM_BYTES, "grn_ln_gate_bwd: d=%d, at most %zu", d,
             GRN_SMEM_BYTES / (2 * sizeof(float)));
    /* a row per warp while the parts stay few (the last block's tail adds them all) */
    int P = (M + W - 1) / W;
    if (P > GRN_MAX_PARTS) P = GRN_MAX_PARTS;
    if ((size_t)P * 2 * d > CUDA_SCRATCH_FLOATS) P = (int)(CUDA_SCRATCH_FLOATS / (2 * (size_t)d));
    int chunk = (M + P - 1) / P;
    P = (M + chunk - 1) / chunk;   /* no empty part */
    size_t smem = (size_t)W * row_bytes;
    /* the plan hosted where the row is in registers, a partial a block (block p: rows
     * [p*chunk, (p+1)*chunk)); else its own kernel first */
    cuda_hosted k;
    const bool host = hosted_one(d <= 256 ? hplan : NULL, &k, dy, (size_t)M * d, (unsigned)P,
                                 (size_t)chunk * d);
    if (hplan && !host) DQN_TRY(cuda_health_check(be, hplan));
    auto kern = d <= 64    ? host ? k_grn_ln_gate_bwd<2, true> : k_grn_ln_gate_bwd<2, false>
                : d <= 256 ? host ? k_grn_ln_gate_bwd<8, true> : k_grn_ln_gate_bwd<8, false>
                           : k_grn_ln_gate_bwd<0, false>;
    KLAUNCH(c, kern, (unsigned)P, W * 32, smem, r, gamma, mean, rstd, g, dy, dres, dg, dgamma, dbeta, M,
            d, chunk, c->scratch, c->blocks_done + 1, k);
    return DQN_OK;
}
