/* LayerNorm over the last dim (eps 1e-5), one warp per row, two passes for the variance. The
 * backward's dgamma and dbeta are column sums over rows, done by cuda_colsum (deterministic). */
#include "backends/cuda/cuda_common.cuh"

#define LN_WARPS 8

__global__ void k_layernorm_fwd(const float *x, const float *gamma, const float *beta, float *y,
                                float *mean, float *rstd, int M, int d) {
    KERNEL_PROLOGUE();
    int lane = threadIdx.x & 31;
    int m = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (m >= M) return;
    const float *xr = x + (size_t)m * d;
    float mu, rs;
    ln_row_stats(xr, d, lane, &mu, &rs);
    float *yr = y + (size_t)m * d;
    for (int j = lane; j < d; j += 32) yr[j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
    if (lane == 0) {
        mean[m] = mu;
        rstd[m] = rs;
    }
}

__global__ void k_layernorm_bwd_dx(const float *x, const float *gamma, const float *mean,
                                   const float *rstd, const float *dy, float *dx, int M, int d) {
    KERNEL_PROLOGUE();
    int lane = threadIdx.x & 31;
    int m = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (m >= M) return;
    size_t r = (size_t)m * d;
    float mu = mean[m], rs = rstd[m];
    float s1, s2;
    ln_bwd_row_sums(x + r, gamma, dy + r, mu, rs, d, lane, &s1, &s2);
    for (int j = lane; j < d; j += 32) {
        float g = dy[r + j] * gamma[j];
        float xh = (x[r + j] - mu) * rs;
        dx[r + j] = rs * (g - s1 - xh * s2);
    }
}

dqn_status cuda_layernorm_fwd(dqn_backend *be, const float *x, const float *gamma,
                              const float *beta, float *y, float *mean, float *rstd, int M, int d) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(M >= 0 && d > 0, "layernorm_fwd: bad shape M=%d d=%d", M, d);
    if (M == 0) return DQN_OK;
    KLAUNCH(c, k_layernorm_fwd, (unsigned)((M + LN_WARPS - 1) / LN_WARPS), LN_WARPS * 32, 0, x, gamma, beta, y, mean, rstd, M, d);
    return DQN_OK;
}

dqn_status cuda_layernorm_bwd(dqn_backend *be, const float *x, const float *gamma,
                              const float *mean, const float *rstd, const float *dy, float *dx,
                              float *dgamma, float *dbeta, int M, int d) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(M >= 0 && d > 0, "layernorm_bwd: bad shape M=%d d=%d", M, d);
    CUDA_ARG(dgamma && dbeta, "layernorm_bwd: dgamma and dbeta must be non-NULL");
    if (M > 0 && dx) {
        KLAUNCH(c, k_layernorm_bwd_dx, (unsigned)((M + LN_WARPS - 1) / LN_WARPS), LN_WARPS * 32, 0, x, gamma, mean, rstd, dy, dx, M, d);
    }
    return cuda_colsum(c, dy, M, d, x, mean, rstd, dgamma, dbeta);
}
