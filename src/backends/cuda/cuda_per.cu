/* Prioritised replay's sum-tree ops (contracts: ops.def; layout and formulas: replay/sumtree.h).
 * Each runs as one block: a batch touches a few thousand leaves, and a block's barriers let the
 * ancestors be recomputed level by level, every node as left + right of its final children, the
 * bits the CPU's path walks give. */
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_sumtree.cuh"
#include "replay/sumtree.h"

#define PER_THREADS 1024

/* Positive floats order as their bit patterns do. */
__device__ __forceinline__ void max_positive(float *at, float v) {
    atomicMax(reinterpret_cast<int *>(at), __float_as_int(v));
}

__global__ void k_per_sample(dqn_per per, int32_t *idx, float *w, int B, uint64_t seed,
                             const uint64_t *step) {
    KERNEL_PROLOGUE();
    __shared__ float lo[PER_THREADS];
    const float *t = per.tree;
    uint32_t size = *per.size;
    uint64_t base = *step * (uint64_t)B;
    float mine = INFINITY;
    for (int j = threadIdx.x; j < B; j += blockDim.x) {
        float u = dqn_philox_uniform(seed, DQN_STREAM_REPLAY, base + (uint64_t)j);
        int32_t i = dqn_per_descend(t, per.leaves, dqn_per_target(j, B, u, t[1]), size);
        idx[j] = i;
        float p = t[per.leaves + i];
        w[j] = p;
        mine = fminf(mine, p);
    }
    lo[threadIdx.x] = mine;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) lo[threadIdx.x] = fminf(lo[threadIdx.x], lo[threadIdx.x + h]);
        __syncthreads();
    }
    float beta = dqn_per_beta(*step, per.beta0, per.beta_updates);
    for (int j = threadIdx.x; j < B; j += blockDim.x) w[j] = dqn_per_weight(w[j], lo[0], beta);
}

__global__ void k_per_update(dqn_per per, const int32_t *idx, const float *loss, int B) {
    KERNEL_PROLOGUE();
    float *t = per.tree;
    for (int j = threadIdx.x; j < B; j += blockDim.x) t[per.leaves + idx[j]] = 0.0f;
    __syncthreads();
    for (int j = threadIdx.x; j < B; j += blockDim.x) {
        float p = dqn_per_priority(loss[j], per.alpha, per.eps);
        max_positive(&t[per.leaves + idx[j]], p);
        max_positive(&t[0], p);
    }
    dqn_tree_fix_levels(t, per.leaves, idx, B, 0, per.cap);
}

__global__ void k_per_insert(dqn_per per, int pos, int n) {
    KERNEL_PROLOGUE();
    float *t = per.tree;
    float top = t[0];
    for (int j = threadIdx.x; j < n; j += blockDim.x) t[per.leaves + (pos + j) % per.cap] = top;
    dqn_tree_fix_levels(t, per.leaves, NULL, n, pos, per.cap);
}

static dqn_status per_ok(const char *op, const dqn_per *per) {
    CUDA_ARG(per && per->tree && per->size, "%s: NULL tree", op);
    CUDA_ARG(per->cap >= 1 && per->leaves >= per->cap && (per->leaves & (per->leaves - 1)) == 0,
             "%s: cap = %d, leaves = %d (a power of two >= cap)", op, per->cap, per->leaves);
    return DQN_OK;
}

dqn_status cuda_per_sample(dqn_backend *be, const dqn_per *per, int32_t *idx, float *w, int B,
                           uint64_t seed, const uint64_t *step) {
    DQN_TRY(per_ok("per_sample", per));
    CUDA_ARG(idx && w && step && B > 0, "per_sample: B = %d, NULL output", B);
    cuda_impl *c = cuda_of(be);
    KLAUNCH(c, k_per_sample, 1, PER_THREADS, 0, *per, idx, w, B, seed, step);
    return DQN_OK;
}

dqn_status cuda_per_update(dqn_backend *be, const dqn_per *per, const int32_t *idx,
                           const float *loss, int B) {
    DQN_TRY(per_ok("per_update", per));
    CUDA_ARG(idx && loss && B > 0, "per_update: B = %d, idx or loss NULL", B);
    cuda_impl *c = cuda_of(be);
    KLAUNCH(c, k_per_update, 1, PER_THREADS, 0, *per, idx, loss, B);
    return DQN_OK;
}

dqn_status cuda_per_insert(dqn_backend *be, const dqn_per *per, int pos, int n) {
    DQN_TRY(per_ok("per_insert", per));
    CUDA_ARG(pos >= 0 && pos < per->cap && n >= 0 && n <= per->cap,
             "per_insert: pos = %d, n = %d (capacity %d)", pos, n, per->cap);
    if (n == 0) return DQN_OK;
    cuda_impl *c = cuda_of(be);
    KLAUNCH(c, k_per_insert, 1, PER_THREADS, 0, *per, pos, n);
    return DQN_OK;
}
