/* The dueling heads after the stacked hidden layer hva [R, 2H] (value hidden in columns 0:H,
 * advantage hidden in H:2H), fused: the forward (v2, a2 and the dueling combine) is one
 * kernel, or at large R a cuBLAS GEMM for the advantages and a combine kernel (the values too),
 * and the backward from dV, dAdv (the head-gradient clip, the v2/a2 input gradients through the
 * ReLUs, and the v2/a2 parameter gradients) is two: the parameter gradients are sums over rows,
 * partial sums per row part in scratch, then a second kernel adds the parts in a fixed order (no
 * atomics, no counters), so replays are bit-identical. */
#include "backends/cuda/cuda_common.cuh"

#define HF_WARPS 8      /* heads_fwd: rows per block, one warp each */
#define HF_NJ 8         /* heads_fwd: a lane's row elements in registers at once */
#ifndef HB_RB
#define HB_RB 8         /* heads_bwd: rows whose gradients are staged in shared memory at once */
#endif
#ifndef HB_MAX_BLOCKS
#define HB_MAX_BLOCKS 512   /* heads_bwd: rows per part double until tiles x parts fit (one wave) */
#endif
#ifndef HB_MIN_BLOCKS
#define HB_MIN_BLOCKS 4     /* heads_bwd: blocks a multiprocessor holds (caps its registers) */
#endif
#define HB_SUM_GROUPS 16    /* heads_bwd_sum: threads that share one element's parts */
#define SMEM_FLOATS 12288   /* the 48 KiB of shared memory a launch gets without opting in */
#define HC_ROWS 256         /* heads_combine: rows per block (fewer when A is wide) */
#define HC_VR 4             /* heads_combine: rows whose values a warp computes at once */

/* One warp per row: the 1 + A dot products of length H as warp sums, then the dueling combine
 * with each branch's mean summed in double in the CPU's order. With A <= AMAX the row is read
 * once and the A + 1 sums run side by side (each lane's products in j order, then the butterfly:
 * the same rounding as one dot at a time); AMAX 0 takes them one after another. Shared: per warp
 * A advantages and D branch means. */
template <int AMAX>
__global__ void __launch_bounds__(HF_WARPS * 32, 2)
    k_heads_fwd(const float *__restrict__ hva, const float *__restrict__ Wv2,
                const float *__restrict__ bv2, const float *__restrict__ Wa2,
                const float *__restrict__ ba2, float *__restrict__ V, float *__restrict__ Adv,
                float *__restrict__ Z, int R, int H, dqn_branches br) {
    KERNEL_PROLOGUE();
    extern __shared__ float sm[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, A = br.A;
    float *sadv = sm + w * (A + br.D), *smean = sadv + A;
    const int r = blockIdx.x * HF_WARPS + w;
    if (r >= R) return;
    const float *hv = hva + (size_t)r * 2 * H, *ha = hv + H;
    float s = 0.0f, v;
    if constexpr (AMAX > 0) {
        float t[AMAX];
#pragma unroll
        for (int a = 0; a < AMAX; a++) t[a] = 0.0f;
        for (int j0 = lane; j0 < H; j0 += 32 * HF_NJ) {
            float x[HF_NJ], y[HF_NJ];   /* loaded before use: one round trip per HF_NJ */
#pragma unroll
            for (int i = 0; i < HF_NJ; i++) {
                const int j = j0 + 32 * i;
                x[i] = j < H ? hv[j] : 0.0f;
                y[i] = j < H ? ha[j] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < HF_NJ; i++) {
                const int j = j0 + 32 * i;
                if (j >= H) break;
                s += x[i] * Wv2[j];
#pragma unroll
                for (int a = 0; a < AMAX; a++)
                    if (a < A) t[a] += y[i] * Wa2[(size_t)a * H + j];
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            s += __shfl_xor_sync(0xffffffffu, s, o);
#pragma unroll
            for (int a = 0; a < AMAX; a++)
                if (a < A) t[a] += __shfl_xor_sync(0xffffffffu, t[a], o);
        }
        v = s + bv2[0];
        if (lane == 0) {
#pragma unroll
            for (int a = 0; a < AMAX; a++)
                if (a < A) sadv[a] = t[a] + ba2[a];
        }
    } else {
        for (int j = lane; j < H; j += 32) s += hv[j] * Wv2[j];
        v = warp_sum(s) + bv2[0];
        for (int a = 0; a < A; a++) {
            const float *wa = Wa2 + (size_t)a * H;
            float t = 0.0f;
            for (int j = lane; j < H; j += 32) t += ha[j] * wa[j];
            t = warp_sum(t) + ba2[a];
            if (lane == 0) sadv[a] = t;
        }
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

/* heads_fwd's combine at large R, after the advantage GEMM left its raw products in araw (rows
 * lda apart): a block takes blockDim.x rows. Its warps first compute the rows' values
 * V = hva[:, 0:H] Wv2^T (HC_VR rows a warp at once, lane-strided products then a butterfly;
 * as a cuBLAS GEMV it was a node of its own at a third of the bandwidth); the rows' advantages
 * pass through shared memory so that global loads and stores are coalesced; then a thread takes
 * its row: the biases added, V and Adv written, and Z = V + Adv - the branch mean, summed in
 * double in the CPU's order as k_heads_fwd does.
 * Shared: the block's advantages [blockDim.x][A] (odd A: the rows' strided reads do not
 * conflict), then its values [blockDim.x]. */
__global__ void k_heads_combine(const float *__restrict__ hva, int H, const float *__restrict__ Wv2,
                                float *__restrict__ V, const float *araw, int lda, float *Adv,
                                float *__restrict__ Z, const float *__restrict__ bv2,
                                const float *__restrict__ ba2, int R, dqn_branches br) {
    KERNEL_PROLOGUE();
    extern __shared__ float sm[];
    const int A = br.A, T = blockDim.x, tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int NW = T >> 5;
    const size_t r0 = (size_t)blockIdx.x * T;
    const int nr = (int)min((size_t)T, (size_t)R - r0), n = nr * A;
    float *adv = Adv + r0 * A, *z = Z + r0 * A, *sv = sm + (size_t)T * A;
    const float *ar = araw + r0 * (size_t)lda;
    for (int q0 = w; q0 < nr; q0 += NW * HC_VR) {
        float acc[HC_VR];
#pragma unroll
        for (int u = 0; u < HC_VR; u++) acc[u] = 0.0f;
#pragma unroll 4
        for (int j = lane; j < H; j += 32) {
            const float wv = Wv2[j];
#pragma unroll
            for (int u = 0; u < HC_VR; u++) {
                const int q = q0 + u * NW;
                if (q < nr) acc[u] += hva[(r0 + q) * 2 * (size_t)H + j] * wv;
            }
        }
#pragma unroll
        for (int u = 0; u < HC_VR; u++) {
            const float t = warp_sum(acc[u]);
            if (lane == 0 && q0 + u * NW < nr) sv[q0 + u * NW] = t;
        }
    }
    for (int e = tid; e < n; e += T) sm[e] = ar[(size_t)(e / A) * lda + e % A] + ba2[e % A];
    __syncthreads();
    for (int e = tid; e < n; e += T) adv[e] = sm[e];
    __syncthreads();   /* each row is rewritten as Z in place */
    if (tid < nr) {
        float *s = sm + (size_t)tid * A;
        const float v = sv[tid] + bv2[0];
        for (int b = 0; b < br.D; b++) {
            float *sb = s + br.off[b];
            const int nb = br.n[b];
            double sum = 0.0;
            for (int k = 0; k < nb; k++) sum += sb[k];
            const float mean = (float)(sum / nb);
            for (int k = 0; k < nb; k++) sb[k] = v + sb[k] - mean;
        }
        V[r0 + tid] = v;
    }
    __syncthreads();
    for (int e = tid; e < n; e += T) z[e] = sm[e];
}

typedef struct {
    const float *hva, *Wv2, *Wa2, *dV, *dAdv, *norms;
    float max_norm;
    float *dhva;
    int R, H, A, chunk;
    int dbva;      /* dhva's column sums asked for */
    float *part;   /* [P][W], W = (A+1) H + A+1 (+ 2H): weight partials [A+1][H], then bias
                    * partials, then (dbva) dhva's column sums */
} hb_args;

/* A staged row's stride in shared memory: with AMAX > 0, gA in [0, AMAX) (zero past A, so the
 * row is read as float4s and the loops need no bound) and gV at AMAX; else gV, then gA. */
__host__ __device__ constexpr int hb_stride(int amax, int A1) { return amax > 0 ? amax + 4 : A1; }
template <int AMAX>
__device__ __forceinline__ int hb_at(int A1, int o) {
    return AMAX > 0 ? (o == 0 ? AMAX : o - 1) : o;
}

/* Element e of a stage's gradients [rows][A+1] from row rb on: gV, then gA, clipped. */
__device__ __forceinline__ float stage_grad(const hb_args &k, int rb, int e, float cV, float cA) {
    const int A1 = k.A + 1, o = e % A1;
    const size_t r = (size_t)rb + e / A1;
    return o == 0 ? k.dV[r] * cV : k.dAdv[r * k.A + o - 1] * cA;
}

/* Block (tile, part): blockDim.x columns j of H, the rows of part `part`. Each thread owns its
 * column: the input gradients of its column for every row, and its column's A+1 weight-gradient
 * sums (in registers when AMAX > 0, i.e. A <= AMAX; else in shared memory). The first tile also
 * sums the bias gradients. dV and dAdv are only read (scaled on the fly), so tiles never race.
 * A stage's HB_RB rows of hva are loaded into registers before any store, so a stage costs one
 * memory round trip instead of one per row. */
template <int AMAX>
__global__ void __launch_bounds__(128, HB_MIN_BLOCKS) k_heads_bwd(hb_args k) {
    KERNEL_PROLOGUE();
    extern __shared__ __align__(16) float sm[];   /* staged rows are read as float4s */
    const float *__restrict__ hva = k.hva;
    float *__restrict__ dhva = k.dhva;
    const int A = k.A, A1 = A + 1, H = k.H, T = blockDim.x, tj = threadIdx.x;
    const int j = blockIdx.x * T + tj, p = blockIdx.y;
    const bool col = j < H, first = blockIdx.x == 0;
    constexpr int S0 = hb_stride(AMAX, 0);
    const int S = AMAX > 0 ? S0 : A1;   /* a staged row's stride */
    float *sG = sm, *sDb = sG + HB_RB * S, *sW = sDb + A1, *sAcc = sW + A * T;
    float racc[AMAX + 1], rw[AMAX > 0 ? AMAX : 1];
    const float cV = dqn_clip_scale(k.norms, k.max_norm);
    const float cA = dqn_clip_scale(k.norms ? k.norms + 1 : NULL, k.max_norm);
    const float wv = col ? k.Wv2[j] : 0.0f;
    float csv = 0.0f, csa = 0.0f;   /* this part's sums of dhva's columns j and H + j */
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
    if constexpr (AMAX > 0)   /* the padding past A stays zero */
        for (int e = tj; e < HB_RB * S; e += T) sG[e] = 0.0f;
    const int r0 = p * k.chunk, r1 = min(k.R, r0 + k.chunk);
    /* the next stage's rows of hva and its gradients (one a thread; more, on wide A, are loaded
     * when the stage is staged) are loaded while this stage computes */
    float hn[HB_RB], an[HB_RB], gq;
    auto load_stage = [&](int rb) {
        const int nr = min(HB_RB, r1 - rb);
#pragma unroll
        for (int q = 0; q < HB_RB; q++) {
            const size_t r = (size_t)(rb + q) * 2 * H + j;
            hn[q] = col && q < nr ? hva[r] : 0.0f;
            an[q] = col && q < nr ? hva[r + H] : 0.0f;
        }
        gq = tj < nr * A1 ? stage_grad(k, rb, tj, cV, cA) : 0.0f;
    };
    if (r0 < r1) load_stage(r0);
    for (int rb = r0; rb < r1; rb += HB_RB) {
        const int nr = min(HB_RB, r1 - rb);
        float hv[HB_RB], ha[HB_RB];
#pragma unroll
        for (int q = 0; q < HB_RB; q++) {
            hv[q] = hn[q];
            ha[q] = an[q];
        }
        __syncthreads();   /* the previous stage's reads of sG are done */
        if (tj < nr * A1) sG[tj / A1 * S + hb_at<AMAX>(A1, tj % A1)] = gq;
        for (int e = tj + T; e < nr * A1; e += T)
            sG[e / A1 * S + hb_at<AMAX>(A1, e % A1)] = stage_grad(k, rb, e, cV, cA);
        __syncthreads();
        if (rb + HB_RB < r1) load_stage(rb + HB_RB);
        if (first)
            for (int o = tj; o < A1; o += T)
                for (int q = 0; q < nr; q++) sDb[o] += sG[q * S + hb_at<AMAX>(A1, o)];
        if (!col) continue;
#pragma unroll
        for (int q = 0; q < HB_RB; q++) {
            if (q >= nr) break;
            const size_t r = (size_t)(rb + q) * 2 * H + j;
            const float *g = sG + q * S;
            const float gv = g[hb_at<AMAX>(A1, 0)];
            float t = 0.0f;
            /* (dV w) * mask as the CPU's linear_bwd + relu_bwd: two roundings, no FMA */
            const float dv = __fmul_rn(__fmul_rn(gv, wv), (float)(hv[q] > 0.0f));
            dhva[r] = dv;
            csv += dv;
            if constexpr (AMAX > 0) {
                racc[0] += gv * hv[q];
                float ga[AMAX];
#pragma unroll
                for (int a = 0; a < AMAX; a += 4) {
                    const float4 v = *(const float4 *)(g + a);
                    ga[a] = v.x, ga[a + 1] = v.y, ga[a + 2] = v.z, ga[a + 3] = v.w;
                }
                /* past A the products are zeros: t keeps its value, racc's padding is unused */
#pragma unroll
                for (int a = 0; a < AMAX; a++) {
                    t += ga[a] * rw[a];
                    racc[1 + a] += ga[a] * ha[q];
                }
            } else {
                sAcc[tj] += gv * hv[q];
                for (int a = 0; a < A; a++) {
                    t += g[1 + a] * sW[a * T + tj];
                    sAcc[(1 + a) * T + tj] += g[1 + a] * ha[q];
                }
            }
            const float da = __fmul_rn(t, (float)(ha[q] > 0.0f));
            dhva[r + H] = da;
            csa += da;
        }
    }
    /* this part's partials; k_heads_bwd_sum adds the parts */
    const size_t W = (size_t)A1 * H + A1 + (k.dbva ? 2 * (size_t)H : 0);
    float *pw = k.part + (size_t)p * W, *pb = pw + (size_t)A1 * H;
    if (col && k.dbva) {
        pb[A1 + j] = csv;
        pb[A1 + H + j] = csa;
    }
    if (col) {
        if constexpr (AMAX > 0) {
#pragma unroll
            for (int o = 0; o <= AMAX; o++)
                if (o < A1) pw[(size_t)o * H + j] = racc[o];
        } else {
            for (int o = 0; o < A1; o++) pw[(size_t)o * H + j] = sAcc[o * T + tj];
        }
    }
    if (first)   /* thread tj alone zeroed and summed sDb[tj], sDb[tj + T], ... */
        for (int o = tj; o < A1; o += T) pb[o] = sDb[o];
}

/* Element e of a part's row [W] (weights [A+1][H], biases [A+1], then with dbva dhva's column
 * sums [2H]) summed over the P parts:
 * HB_SUM_GROUPS threads per element take the parts q = ty, ty + G, ... in order (coalesced over
 * e), then thread ty = 0 adds the groups in order: a fixed tree. Element e < H is dWv2[e], e <
 * (A+1) H is dWa2[e - H] (row o - 1 of dWa2 is row o of the weights), then dbv2, dba2, dbva. */
__global__ void k_heads_bwd_sum(const float *__restrict__ part, int P, int H, int A,
                                float *__restrict__ dWv2, float *__restrict__ dbv2,
                                float *__restrict__ dWa2, float *__restrict__ dba2,
                                float *__restrict__ dbva) {
    KERNEL_PROLOGUE();
    __shared__ float red[HB_SUM_GROUPS][33];
    const int tx = threadIdx.x, ty = threadIdx.y, A1 = A + 1;
    const size_t W = (size_t)A1 * H + A1 + (dbva ? 2 * (size_t)H : 0);
    const size_t e = (size_t)blockIdx.x * 32 + tx;
    float s = 0.0f;
    if (e < W) {
#pragma unroll 8
        for (int q = ty; q < P; q += HB_SUM_GROUPS) s += part[(size_t)q * W + e];
    }
    red[ty][tx] = s;
    __syncthreads();
    if (ty != 0 || e >= W) return;
    float t = 0.0f;
#pragma unroll
    for (int g = 0; g < HB_SUM_GROUPS; g++) t += red[g][tx];
    const size_t nw = (size_t)A1 * H;
    if (e < (size_t)H) dWv2[e] = t;
    else if (e < nw) dWa2[e - H] = t;
    else if (e == nw) dbv2[0] = t;
    else if (e < nw + A1) dba2[e - nw - 1] = t;
    else dbva[e - nw - A1] = t;
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
    /* rows per combine block: as many of HC_ROWS as fit in shared memory, in whole warps */
    const int A1 = br->A + 1;
    const int ct = HC_ROWS * A1 <= SMEM_FLOATS ? HC_ROWS : SMEM_FLOATS / A1 / 32 * 32;
    if ((long)R * H >= HF_GEMM_ELEMS && ct >= 32) {
        /* the raw advantages in the scratch with 16-byte rows when A is not a multiple of 4:
         * cuBLAS then takes an aligned kernel (at A = 13 an align1 one ran at half the speed) */
        int lda = (br->A + 3) & ~3;
        float *araw = c->scratch;
        if (lda == br->A || (size_t)R * (size_t)lda > CUDA_SCRATCH_FLOATS) lda = br->A, araw = Adv;
        DQN_TRY(cuda_gemm_ldx(c, hva + H, 2 * H, Wa2, araw, lda, R, H, br->A));
        KLAUNCH(c, k_heads_combine, (unsigned)(((size_t)R + ct - 1) / ct), ct,
                (size_t)ct * (size_t)A1 * sizeof(float), hva, H, Wv2, V, (const float *)araw, lda,
                Adv, Z, bv2, ba2, R, *br);
        return DQN_OK;
    }
    const unsigned blocks = (unsigned)((R + HF_WARPS - 1) / HF_WARPS);
    auto kern = br->A <= 4 ? k_heads_fwd<4> : br->A <= 16 ? k_heads_fwd<16> : k_heads_fwd<0>;
    KLAUNCH(c, kern, blocks, HF_WARPS * 32, smem, hva, Wv2, bv2, Wa2, ba2, V, Adv, Z, R, H, *br);
    return DQN_OK;
}

dqn_status cuda_heads_bwd(dqn_backend *be, const float *hva, const float *Wv2, const float *Wa2,
                          const float *dV, const float *dAdv, const float *norms, float max_norm,
                          float *dhva, float *dbva, float *dWv2, float *dbv2, float *dWa2,
                          float *dba2, int R, int H, int A) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(R >= 0 && H > 0 && A > 0, "heads_bwd: bad shape R=%d H=%d A=%d", R, H, A);
    CUDA_ARG(!(max_norm > 0.0f) || norms, "heads_bwd: max_norm=%g needs norms", (double)max_norm);
    const int A1 = A + 1;
    if (R == 0) {   /* nothing flows back, but the parameter gradients are still overwritten */
        CUDA_CHECK(cudaMemsetAsync(dWv2, 0, (size_t)H * sizeof(float), c->stream));
        CUDA_CHECK(cudaMemsetAsync(dbv2, 0, sizeof(float), c->stream));
        CUDA_CHECK(cudaMemsetAsync(dWa2, 0, (size_t)A * H * sizeof(float), c->stream));
        CUDA_CHECK(cudaMemsetAsync(dba2, 0, (size_t)A * sizeof(float), c->stream));
        if (dbva) CUDA_CHECK(cudaMemsetAsync(dbva, 0, 2 * (size_t)H * sizeof(float), c->stream));
        return DQN_OK;
    }
    /* columns per block: up to 128, fewer when the shared-memory accumulators (A > 16) need it */
    int T = H >= 128 ? 128 : (H + 31) / 32 * 32;
    const int amax = A <= 4 ? 4 : A <= 16 ? 16 : 0;
    size_t fixed = (size_t)HB_RB * hb_stride(amax, A1) + A1;
    while (amax == 0 && T > 32 && fixed + (size_t)(A + A1) * T > SMEM_FLOATS) T -= 32;
    size_t smem_f = fixed + (amax == 0 ? (size_t)(A + A1) * T : 0);
    CUDA_ARG(smem_f <= SMEM_FLOATS, "heads_bwd: A=%d advantage columns need %zu floats of shared "
             "memory, at most %d", A, smem_f, SMEM_FLOATS);
    const unsigned tiles = (unsigned)((H + T - 1) / T);
    /* parts of HB_RB * 2^k rows: short row loops while the grid stays near one wave; the parts
     * depend on the shape alone, so the sum order is fixed */
    const size_t W = (size_t)A1 * H + A1 + (dbva ? 2 * (size_t)H : 0);
    CUDA_ARG(W <= CUDA_SCRATCH_FLOATS, "heads_bwd: A=%d, H=%d exceed the reduction scratch", A, H);
    long long chunk = HB_RB, P = (R + chunk - 1) / chunk;
    while (P > 1 && ((size_t)tiles * P > HB_MAX_BLOCKS || (size_t)P * W > CUDA_SCRATCH_FLOATS)) {
        chunk *= 2;
        P = (R + chunk - 1) / chunk;
    }
    float *part = c->scratch;
    hb_args k = {hva, Wv2, Wa2, dV, dAdv, norms, max_norm, dhva, R, H, A, (int)chunk,
                 dbva != NULL, part};
    dim3 grid(tiles, (unsigned)P);
    size_t smem = smem_f * sizeof(float);
    auto kern = amax == 4 ? k_heads_bwd<4> : amax == 16 ? k_heads_bwd<16> : k_heads_bwd<0>;
    KLAUNCH(c, kern, grid, T, smem, k);
    dim3 sgrid((unsigned)((W + 31) / 32)), sblock(32, HB_SUM_GROUPS);
    KLAUNCH(c, k_heads_bwd_sum, sgrid, sblock, 0, part, (int)P, H, A, dWv2, dbv2, dWa2, dba2, dbva);
    return DQN_OK;
}
