/* The optimizer's ops: the global L2 norm (one launch, fixed tree), clip by norm, Adam with the
 * clip folded in, the target-network update and the step counter. Every scalar that changes
 * between graph replays (the norm, the step, the skip flag) is read on the device. */
#include "backends/cuda/cuda_common.cuh"

__device__ __forceinline__ double block_sum_d(double v, double *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    return red[0];
}

/* One launch: each block writes its partial sum; the last block to finish (an integer counter,
 * no float atomics) adds the partials in block order and resets the counter for the next op. The
 * squares add up in double, as on the CPU: a float sum overflows once |x| passes ~1e19. */
__global__ void k_l2_norm(const float *x, size_t n, double *part, unsigned *done, float *out) {
    __shared__ double red[CUDA_THREADS];
    __shared__ bool last;
    double acc = 0.0;
    GRID_STRIDE(i, n) acc += (double)x[i] * (double)x[i];
    double t = block_sum_d(acc, red);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = t;
        __threadfence();
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    acc = 0.0;
    for (unsigned p = threadIdx.x; p < gridDim.x; p += blockDim.x) acc += ((volatile double *)part)[p];
    __syncthreads();
    t = block_sum_d(acc, red);
    if (threadIdx.x == 0) {
        out[0] = (float)sqrt(t);
        *done = 0;
    }
}

/* the clip factor min(1, max_norm / norm): 1 when disabled or when the norm is not finite */
__device__ __forceinline__ float clip_scale(const float *norm, float max_norm) {
    if (!(max_norm > 0.0f) || !norm) return 1.0f;
    float nv = *norm;
    return isfinite(nv) && nv > max_norm ? max_norm / nv : 1.0f;
}

__global__ void k_clip(float *x, size_t n, const float *norm, float max_norm) {
    float sc = clip_scale(norm, max_norm);
    if (sc == 1.0f) return;
    GRID_STRIDE(i, n) x[i] *= sc;
}

__global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                       float beta2, float eps, float wd, const float *gnorm, float max_norm,
                       const uint64_t *step, const int32_t *skip) {
    if (skip && *skip != 0) return;
    float sc = clip_scale(gnorm, max_norm);
    double t = (double)(*step + 1);
    float c1 = (float)(1.0 / (1.0 - pow((double)beta1, t)));   /* 1 / bias correction */
    float c2 = (float)(1.0 / (1.0 - pow((double)beta2, t)));
    float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    GRID_STRIDE(i, n) {
        float gi = g[i] * sc;
        float mi = beta1 * m[i] + a1 * gi;
        float vi = beta2 * v[i] + a2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i];
        p[i] = pi - lr * (mi * c1 / (sqrtf(vi * c2) + eps) + wd * pi);
    }
}

__global__ void k_target_hard(float *dst, const float *src, size_t n, int period,
                              const uint64_t *step) {
    if ((*step + 1) % (uint64_t)period != 0) return;
    GRID_STRIDE(i, n) dst[i] = src[i];
}

__global__ void k_target_polyak(float *dst, const float *src, size_t n, float tau) {
    GRID_STRIDE(i, n) dst[i] = tau * src[i] + (1.0f - tau) * dst[i];
}

__global__ void k_step_incr(uint64_t *step) { *step += 1; }

dqn_status cuda_l2_norm(dqn_backend *be, const float *x, size_t n, float *out) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(out && (x || n == 0), "l2_norm: NULL pointer");
    unsigned P = cuda_blocks(c, n, CUDA_THREADS);   /* <= 16 per SM, far below the scratch */
    k_l2_norm<<<P, CUDA_THREADS, 0, c->stream>>>(x, n, (double *)c->scratch, c->blocks_done, out);
    LAUNCH_CHECK();
    return DQN_OK;
}

dqn_status cuda_clip_by_norm(dqn_backend *be, float *x, size_t n, const float *norm,
                             float max_norm) {
    if (!(max_norm > 0.0f)) return DQN_OK;
    CUDA_ARG(norm, "clip_by_norm: norm is NULL");
    LAUNCH_1D(k_clip, n, x, n, norm, max_norm);
}

dqn_status cuda_adam(dqn_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                     float lr, float beta1, float beta2, float eps, float wd, const float *gnorm,
                     float max_norm, const uint64_t *step, const int32_t *skip) {
    CUDA_ARG(step, "adam: step is NULL");
    CUDA_ARG(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
             "adam: beta1=%g, beta2=%g, each must be in [0, 1)", (double)beta1, (double)beta2);
    CUDA_ARG(!(max_norm > 0.0f) || gnorm, "adam: max_norm=%g needs gnorm", (double)max_norm);
    LAUNCH_1D(k_adam, n, p, g, m, v, n, lr, beta1, beta2, eps, wd, gnorm, max_norm, step, skip);
}

dqn_status cuda_target_update(dqn_backend *be, float *dst, const float *src, size_t n, int period,
                              float tau, const uint64_t *step) {
    CUDA_ARG(period >= 0, "target_update: period=%d < 0", period);
    if (period > 0) {
        CUDA_ARG(step, "target_update: step is NULL");
        LAUNCH_1D(k_target_hard, n, dst, src, n, period, step);
    }
    CUDA_ARG(tau >= 0.0f && tau <= 1.0f, "target_update: tau=%g, must be in [0, 1]", (double)tau);
    LAUNCH_1D(k_target_polyak, n, dst, src, n, tau);
}

dqn_status cuda_step_incr(dqn_backend *be, uint64_t *step) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(step, "step_incr: step is NULL");
    k_step_incr<<<1, 1, 0, c->stream>>>(step);
    LAUNCH_CHECK();
    return DQN_OK;
}
