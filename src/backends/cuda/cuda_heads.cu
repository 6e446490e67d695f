/* The branched dueling heads: the dueling combine and its backward, greedy action selection
 * (Q = mean over taus, argmax per branch) and the IQN targets. The branch layout travels to the
 * kernels by value. The means sum in double in the CPU backend's order, so that Q, and hence the
 * argmax, agree with it exactly. */
#include <math.h>

#include "backends/cuda/cuda_common.cuh"

#define QA_WARPS 4    /* q_argmax: states per block, one warp each */
#define QA_BATCH 16   /* q_argmax: a lane's loads in flight */

dqn_status cuda_check_branches(const dqn_branches *br) {
    CUDA_ARG(br, "branches: NULL");
    CUDA_ARG(br->D >= 1 && br->D <= DQN_MAX_BRANCHES, "branches: D=%d not in 1..%d", br->D,
             DQN_MAX_BRANCHES);
    int off = 0;
    for (int b = 0; b < br->D; b++) {
        CUDA_ARG(br->n[b] >= 1, "branches: size n[%d]=%d < 1", b, br->n[b]);
        CUDA_ARG(br->off[b] == off, "branches: off[%d]=%d, expected %d", b, br->off[b], off);
        off += br->n[b];
    }
    CUDA_ARG(br->A == off, "branches: A=%d but the sizes sum to %d", br->A, off);
    return DQN_OK;
}

/* one thread per (row, branch) */
__global__ void k_dueling_fwd(const float *V, const float *Adv, float *Z, size_t R, dqn_branches br) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, R * (size_t)br.D) {
        size_t r = e / (size_t)br.D;
        int b = (int)(e % (size_t)br.D), n = br.n[b];
        const float *a = Adv + r * (size_t)br.A + br.off[b];
        float *z = Z + r * (size_t)br.A + br.off[b];
        double s = 0.0;
        for (int k = 0; k < n; k++) s += a[k];
        float mean = (float)(s / n), v = V[r];
        for (int k = 0; k < n; k++) z[k] = v + a[k] - mean;
    }
}

/* one thread per row */
__global__ void k_dueling_bwd(const float *dZ, float *dV, float *dAdv, size_t R, dqn_branches br) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(r, R) dueling_bwd_row(dZ + r * (size_t)br.A, dAdv + r * (size_t)br.A, dV + r, br);
}

/* One warp per state: lane c sums column c's K values (double, k in order, QA_BATCH loads in
 * flight), then lane b takes branch b's argmax from shared memory; strict > keeps the lowest
 * index on ties. Shared: per warp A means. */
__global__ void k_q_argmax(const float *__restrict__ Z, float *__restrict__ Q,
                           int32_t *__restrict__ act, int B, int K, dqn_branches br) {
    KERNEL_PROLOGUE();
    extern __shared__ float sq[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, A = br.A;
    const int s = blockIdx.x * QA_WARPS + w;
    if (s >= B) return;
    float *q = sq + (size_t)w * A;
    const float *zs = Z + (size_t)s * K * A;
    for (int col = lane; col < A; col += 32) {
        double t = 0.0;
        for (int k0 = 0; k0 < K; k0 += QA_BATCH) {
            float z[QA_BATCH];
#pragma unroll
            for (int u = 0; u < QA_BATCH; u++)
                z[u] = k0 + u < K ? zs[(size_t)(k0 + u) * A + col] : 0.0f;
#pragma unroll
            for (int u = 0; u < QA_BATCH; u++)
                if (k0 + u < K) t += z[u];
        }
        q[col] = (float)(t / K);
        if (Q) Q[(size_t)s * A + col] = q[col];
    }
    __syncwarp();
    for (int b = lane; b < br.D; b += 32) {
        const float *qb = q + br.off[b];
        float best = -INFINITY;
        int arg = 0;
        for (int a = 0; a < br.n[b]; a++)
            if (qb[a] > best) {
                best = qb[a];
                arg = a;
            }
        act[(size_t)s * br.D + b] = arg;
    }
}

__global__ void k_targets_mean(const float *Zt, const int32_t *astar, const float *R,
                               const float *disc, float *y, size_t B, int Nt, dqn_branches br) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, B * (size_t)Nt) {
        size_t s = e / (size_t)Nt;
        y[e] = target_mean(Zt + e * (size_t)br.A, astar + s * (size_t)br.D, R[s], disc[s], br);
    }
}

/* __fmul_rn as in target_mean */
__global__ void k_targets_indep(const float *Zt, const int32_t *astar, const float *R,
                                const float *disc, float *y, size_t B, int Nt, dqn_branches br) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, B * (size_t)br.D * (size_t)Nt) {
        size_t sb = e / (size_t)Nt, j = e % (size_t)Nt;
        size_t s = sb / (size_t)br.D;
        int b = (int)(sb % (size_t)br.D);
        float z = Zt[(s * (size_t)Nt + j) * (size_t)br.A + br.off[b] + astar[sb]];
        y[e] = R[s] + __fmul_rn(disc[s], z);
    }
}

dqn_status cuda_dueling_fwd(dqn_backend *be, const float *V, const float *Adv, float *Z, int R,
                            const dqn_branches *br) {
    DQN_TRY(cuda_check_branches(br));
    CUDA_ARG(R >= 0, "dueling_fwd: R=%d < 0", R);
    LAUNCH_1D(be, k_dueling_fwd, (size_t)R * (size_t)br->D, V, Adv, Z, (size_t)R, *br);
}

dqn_status cuda_dueling_bwd(dqn_backend *be, const float *dZ, float *dV, float *dAdv, int R,
                            const dqn_branches *br) {
    DQN_TRY(cuda_check_branches(br));
    CUDA_ARG(R >= 0, "dueling_bwd: R=%d < 0", R);
    LAUNCH_1D(be, k_dueling_bwd, (size_t)R, dZ, dV, dAdv, (size_t)R, *br);
}

dqn_status cuda_q_argmax(dqn_backend *be, const float *Z, float *Q, int32_t *act, int B, int K,
                         const dqn_branches *br) {
    cuda_impl *c = cuda_of(be);
    DQN_TRY(cuda_check_branches(br));
    CUDA_ARG(B >= 0 && K >= 1, "q_argmax: bad shape B=%d K=%d", B, K);
    if (B == 0) return DQN_OK;
    const size_t smem = (size_t)QA_WARPS * (size_t)br->A * sizeof(float);
    CUDA_ARG(smem <= 48 * 1024, "q_argmax: A=%d columns, at most %d", br->A,
             48 * 1024 / (int)sizeof(float) / QA_WARPS);
    KLAUNCH(c, k_q_argmax, (unsigned)((B + QA_WARPS - 1) / QA_WARPS), QA_WARPS * 32, smem, Z, Q, act, B, K, *br);
    return DQN_OK;
}

dqn_status cuda_iqn_targets(dqn_backend *be, const float *Zt, const int32_t *astar, const float *R,
                            const float *discount, float *y, int B, int Nt, const dqn_branches *br,
                            dqn_target_mode mode) {
    DQN_TRY(cuda_check_branches(br));
    CUDA_ARG(B >= 0 && Nt >= 1, "iqn_targets: bad shape B=%d Nt=%d", B, Nt);
    if (mode == DQN_TARGET_MEAN)
        LAUNCH_1D(be, k_targets_mean, (size_t)B * (size_t)Nt, Zt, astar, R, discount, y, (size_t)B, Nt,
                  *br);
    CUDA_ARG(mode == DQN_TARGET_INDEPENDENT, "iqn_targets: unknown target mode %d", (int)mode);
    LAUNCH_1D(be, k_targets_indep, (size_t)B * (size_t)br->D * (size_t)Nt, Zt, astar, R, discount, y,
              (size_t)B, Nt, *br);
}
