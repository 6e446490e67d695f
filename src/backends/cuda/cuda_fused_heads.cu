/* The dueling heads after the stacked hidden layer hva [R, 2H] (value hidden in columns 0:H,
 * advantage hidden in H:2H), fused (issue 3): the forward (v2, a2 and the dueling combine) is one
 * kernel, and the backward from dV, dAdv (the head-gradient clip, the v2/a2 input gradients
 * through the ReLUs, and the v2/a2 parameter gradients) is one kernel. Its parameter gradients
 * are sums over rows: partial sums per row part in scratch, the last block of each column tile
 * (an integer counter) adds them in part order, so replays are bit-identical. */
#include "backends/cuda/cuda_common.cuh"

#define HF_WARPS 8      /* heads_fwd: rows per block, one warp each */
#define HB_RB 16        /* heads_bwd: rows whose gradients are staged in shared memory at once */
#define HB_MAX_PARTS 256
#define HB_MIN_ROWS_PER_PART 64
#define SMEM_FLOATS 12288   /* the 48 KiB of shared memory a launch gets without opting in */

/* One warp per row: the 1 + A dot products of length H as warp sums, then the dueling combine
 * with each branch's mean summed in double in the CPU's order. Shared: per warp A advantages
 * and D branch means. */
__global__ void k_heads_fwd(const float *hva, const float *Wv2, const float *bv2, const float *Wa2,
                            const float *ba2, float *V, float *Adv, float *Z, int R, int H,
                            dqn_branches br) {
    extern __shared__ float sm[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, A = br.A;
    float *sadv = sm + w * (A + br.D), *smean = sadv + A;
    const int r = blockIdx.x * HF_WARPS + w;
    if (r >= R) return;
    const float *hv = hva + (size_t)r * 2 * H, *ha = hv + H;
    float s = 0.0f;
    for (int j = lane; j < H; j += 32) s += hv[j] * Wv2[j];
    const float v = warp_sum(s) + bv2[0];
    for (int a = 0; a < A; a++) {
        const float *wa = Wa2 + (size_t)a * H;
        float t = 0.0f;
        for (int j = lane; j < H; j += 32) t += ha[j] * wa[j];
        t = warp_sum(t) + ba2[a];
        if (lane == 0) sadv[a] = t;
    }
    __syncwarp();
    for (int b = lane; b < br.D; b += 32) {
        double sum = 0.0;
        for (int k = 0; k < br.n[b]; k++) sum += sadv[br.off[b] + k];
        smean[b] = (float)(sum / br.n[b]);
    }
    __syncwarp();
    if (lane == 0) V[r] = v;
    for (int col = lane; col < A; col += 32) {
        int b = 0;
        while (b + 1 < br.D && col >= br.off[b + 1]) b++;
        Adv[(size_t)r * A + col] = sadv[col];
        Z[(size_t)r * A + col] = v + sadv[col] - smean[b];
    }
}

typedef struct {
    const float *hva, *Wv2, *Wa2, *dV, *dAdv, *norms;
    float max_norm;
    float *dhva, *dWv2, *dbv2, *dWa2, *dba2;
    int R, H, A, chunk;
    float *part;         /* [P][A+1][H] weight partials, then [P][A+1] bias partials */
    unsigned *done;      /* one counter per column tile */
} hb_args;

/* Block (tile, part): blockDim.x columns j of H, the rows of part `part`. Each thread owns its
 * column: the input gradients of its column for every row, and its column's A+1 weight-gradient
 * sums (in registers when AMAX > 0, i.e. A <= AMAX; else in shared memory). The first tile also
 * sums the bias gradients. dV and dAdv are only read (scaled on the fly), so tiles never race. */
template <int AMAX>
__global__ void k_heads_bwd(hb_args k) {
    extern __shared__ float sm[];
    __shared__ bool last;
    const int A = k.A, A1 = A + 1, H = k.H, T = blockDim.x, tj = threadIdx.x;
    const int j = blockIdx.x * T + tj, p = blockIdx.y, P = gridDim.y;
    const bool col = j < H, first = blockIdx.x == 0;
    float *sG = sm, *sDb = sG + HB_RB * A1, *sW = sDb + A1, *sAcc = sW + A * T;
    float racc[AMAX + 1], rw[AMAX > 0 ? AMAX : 1];
    const float cV = clip_scale(k.norms, k.max_norm);
    const float cA = clip_scale(k.norms ? k.norms + 1 : NULL, k.max_norm);
    const float wv = col ? k.Wv2[j] : 0.0f;
    if constexpr (AMAX > 0) {
#pragma unroll
        for (int o = 0; o <= AMAX; o++) racc[o] = 0.0f;
#pragma unroll
        for (int a = 0; a < AMAX; a++) rw[a] = col && a < A ? k.Wa2[(size_t)a * H + j] : 0.0f;
    } else {
        for (int a = 0; a < A; a++) sW[a * T + tj] = col ? k.Wa2[(size_t)a * H + j] : 0.0f;
        for (int o = 0; o < A1; o++) sAcc[o * T + tj] = 0.0f;
    }
    for (int o = tj; o < A1; o += T) sDb[o] = 0.0f;
    const int r0 = p * k.chunk, r1 = min(k.R, r0 + k.chunk);
    for (int rb = r0; rb < r1; rb += HB_RB) {
        const int nr = min(HB_RB, r1 - rb);
        __syncthreads();
        for (int e = tj; e < nr * A1; e += T) {
            const size_t r = (size_t)rb + e / A1;
            const int o = e % A1;
            sG[e] = o == 0 ? k.dV[r] * cV : k.dAdv[r * A + o - 1] * cA;
        }
        __syncthreads();
        if (first)
            for (int o = tj; o < A1; o += T)
                for (int q = 0; q < nr; q++) sDb[o] += sG[q * A1 + o];
        if (!col) continue;
        for (int q = 0; q < nr; q++) {
            const size_t r = (size_t)rb + q;
            const float *g = sG + q * A1;
            const float hv = k.hva[r * 2 * H + j], ha = k.hva[r * 2 * H + H + j], gv = g[0];
            float t = 0.0f;
            /* (dV w) * mask as the CPU's linear_bwd + relu_bwd: two roundings, no FMA */
            k.dhva[r * 2 * H + j] = __fmul_rn(__fmul_rn(gv, wv), (float)(hv > 0.0f));
            if constexpr (AMAX > 0) {
                racc[0] += gv * hv;
#pragma unroll
                for (int a = 0; a < AMAX; a++)
                    if (a < A) {
                        t += g[1 + a] * rw[a];
                        racc[1 + a] += g[1 + a] * ha;
                    }
            } else {
                sAcc[tj] += gv * hv;
                for (int a = 0; a < A; a++) {
                    t += g[1 + a] * sW[a * T + tj];
                    sAcc[(1 + a) * T + tj] += g[1 + a] * ha;
                }
            }
            k.dhva[r * 2 * H + H + j] = __fmul_rn(t, (float)(ha > 0.0f));
        }
    }
    /* partials of this part, then the tile's last block adds all parts in order */
    __syncthreads();
    float *pw = k.part + (size_t)p * A1 * H, *pb = k.part + (size_t)P * A1 * H + (size_t)p * A1;
    if (col) {
        if constexpr (AMAX > 0) {
#pragma unroll
            for (int o = 0; o <= AMAX; o++)
                if (o < A1) pw[(size_t)o * H + j] = racc[o];
        } else {
            for (int o = 0; o < A1; o++) pw[(size_t)o * H + j] = sAcc[o * T + tj];
        }
    }
    if (first)
        for (int o = tj; o < A1; o += T) pb[o] = sDb[o];
    __threadfence();
    __syncthreads();
    if (tj == 0) last = atomicAdd(&k.done[blockIdx.x], 1u) == (unsigned)P - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const volatile float *vp = k.part;
    if (col)
        for (int o = 0; o < A1; o++) {
            float s = 0.0f;
            for (int q = 0; q < P; q++) s += vp[((size_t)q * A1 + o) * H + j];
            if (o == 0) k.dWv2[j] = s;
            else k.dWa2[(size_t)(o - 1) * H + j] = s;
        }
    if (first)
        for (int o = tj; o < A1; o += T) {
            float s = 0.0f;
            for (int q = 0; q < P; q++) s += vp[(size_t)P * A1 * H + (size_t)q * A1 + o];
            if (o == 0) k.dbv2[0] = s;
            else k.dba2[o - 1] = s;
        }
    if (tj == 0) k.done[blockIdx.x] = 0;
}

dqn_status cuda_heads_fwd(dqn_backend *be, const float *hva, const float *Wv2, const float *bv2,
                          const float *Wa2, const float *ba2, float *V, float *Adv, float *Z, int R,
                          int H, const dqn_branches *br) {
    cuda_impl *c = cuda_of(be);
    DQN_TRY(cuda_check_branches(br));
    CUDA_ARG(R >= 0 && H > 0, "heads_fwd: bad shape R=%d H=%d", R, H);
    size_t smem = (size_t)HF_WARPS * (size_t)(br->A + br->D) * sizeof(float);
    CUDA_ARG(smem <= SMEM_FLOATS * sizeof(float), "heads_fwd: A=%d advantage columns, at most %d",
             br->A, SMEM_FLOATS / HF_WARPS - br->D);
    if (R == 0) return DQN_OK;
    k_heads_fwd<<<(unsigned)((R + HF_WARPS - 1) / HF_WARPS), HF_WARPS * 32, smem, c->stream>>>(
        hva, Wv2, bv2, Wa2, ba2, V, Adv, Z, R, H, *br);
    LAUNCH_CHECK();
    return DQN_OK;
}

dqn_status cuda_heads_bwd(dqn_backend *be, const float *hva, const float *Wv2, const float *Wa2,
                          const float *dV, const float *dAdv, const float *norms, float max_norm,
                          float *dhva, float *dWv2, float *dbv2, float *dWa2, float *dba2, int R,
                          int H, int A) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(R >= 0 && H > 0 && A > 0, "heads_bwd: bad shape R=%d H=%d A=%d", R, H, A);
    CUDA_ARG(!(max_norm > 0.0f) || norms, "heads_bwd: max_norm=%g needs norms", (double)max_norm);
    const int A1 = A + 1;
    if (R == 0) {   /* nothing flows back, but the parameter gradients are still overwritten */
        CUDA_CHECK(cudaMemsetAsync(dWv2, 0, (size_t)H * sizeof(float), c->stream));
        CUDA_CHECK(cudaMemsetAsync(dbv2, 0, sizeof(float), c->stream));
        CUDA_CHECK(cudaMemsetAsync(dWa2, 0, (size_t)A * H * sizeof(float), c->stream));
        CUDA_CHECK(cudaMemsetAsync(dba2, 0, (size_t)A * sizeof(float), c->stream));
        return DQN_OK;
    }
    /* columns per block: up to 128, fewer when the shared-memory accumulators (A > 16) need it */
    int T = H >= 128 ? 128 : (H + 31) / 32 * 32;
    const int amax = A <= 4 ? 4 : A <= 16 ? 16 : 0;
    size_t fixed = (size_t)HB_RB * A1 + A1;
    while (amax == 0 && T > 32 && fixed + (size_t)(A + A1) * T > SMEM_FLOATS) T -= 32;
    size_t smem_f = fixed + (amax == 0 ? (size_t)(A + A1) * T : 0);
    CUDA_ARG(smem_f <= SMEM_FLOATS, "heads_bwd: A=%d advantage columns need %zu floats of shared "
             "memory, at most %d", A, smem_f, SMEM_FLOATS);
    const unsigned tiles = (unsigned)((H + T - 1) / T);
    CUDA_ARG(tiles <= CUDA_COUNTERS - 1, "heads_bwd: H=%d needs %u column tiles, at most %d", H,
             tiles, CUDA_COUNTERS - 1);
    /* the number of parts depends on the shape alone, so the sum order is fixed */
    int P = (R + HB_MIN_ROWS_PER_PART - 1) / HB_MIN_ROWS_PER_PART;
    if (P > HB_MAX_PARTS) P = HB_MAX_PARTS;
    size_t per_part = (size_t)A1 * H + A1;
    if ((size_t)P * per_part > CUDA_SCRATCH_FLOATS) P = (int)(CUDA_SCRATCH_FLOATS / per_part);
    CUDA_ARG(P >= 1, "heads_bwd: A=%d, H=%d exceed the reduction scratch", A, H);
    hb_args k = {hva, Wv2, Wa2, dV, dAdv, norms, max_norm, dhva, dWv2, dbv2, dWa2, dba2,
                 R, H, A, (R + P - 1) / P, c->scratch, c->blocks_done + 1};
    dim3 grid(tiles, (unsigned)P);
    size_t smem = smem_f * sizeof(float);
    if (amax == 4) k_heads_bwd<4><<<grid, T, smem, c->stream>>>(k);
    else if (amax == 16) k_heads_bwd<16><<<grid, T, smem, c->stream>>>(k);
    else k_heads_bwd<0><<<grid, T, smem, c->stream>>>(k);
    LAUNCH_CHECK();
    return DQN_OK;
}
