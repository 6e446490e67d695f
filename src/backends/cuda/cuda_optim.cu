/* The optimizer's ops: the global L2 norm (one launch, fixed tree), clip by norm, Adam with the
 * clip folded in, the target-network update and the step counter. Every scalar that changes
 * between graph replays (the norm, the step, the skip flag) is read on the device. */
#include "backends/cuda/cuda_health.cuh"

__device__ __forceinline__ double block_sum_d(double v, double *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

/* One launch for the norms of up to two arrays: each block writes its partial sums; the last
 * block to finish (an integer counter, no float atomics) adds the partials in block order and
 * resets the counter for the next op. out[1] is written only when x1 is given. The squares add up
 * in double, as on the CPU: a float sum overflows once |x| passes ~1e19. HOST: the checks of x0
 * and x1 of a deferred health plan (cuda_health_hosted) on the values as loaded, each clamped
 * (and stored back when changed) before its square is taken; block b writes partial b of each. */
template <bool HOST>
__global__ void k_l2_norms(const float *x0, size_t n0, const float *x1, size_t n1, double *part,
                           unsigned *done, float *out, cuda_hosted h0, cuda_hosted h1) {
    KERNEL_PROLOGUE();
    __shared__ double red[CUDA_THREADS];
    __shared__ bool last;
    double acc0 = 0.0, acc1 = 0.0;
    hacc a0, a1;
    float b0 = 0.0f, b1 = 0.0f;
    if (HOST) {
        acc_init(&a0);
        acc_init(&a1);
        b0 = hosted_bound(&h0);
        b1 = hosted_bound(&h1);
    }
    GRID_STRIDE(i, n0) {
        float v = x0[i];
        if (HOST) v = scan_one(&a0, h0.x, i, v, b0, h0.guard);
        acc0 += (double)v * (double)v;
    }
    if (x1) GRID_STRIDE(i, n1) {
        float v = x1[i];
        if (HOST) v = scan_one(&a1, h1.x, i, v, b1, h1.guard);
        acc1 += (double)v * (double)v;
    }
    if (HOST) {
        __shared__ hacc hred[HW];
        block_reduce(&a0, hred);
        if (threadIdx.x == 0) hosted_put(&h0, &a0, b0);
        block_reduce(&a1, hred);
        if (threadIdx.x == 0) hosted_put(&h1, &a1, b1);
    }
    double t0 = block_sum_d(acc0, red), t1 = 0.0;
    if (x1) t1 = block_sum_d(acc1, red);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = t0;
        part[gridDim.x + blockIdx.x] = t1;
        __threadfence();
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int k = 0; k < (x1 ? 2 : 1); k++) {
        double acc = 0.0;
        for (unsigned p = threadIdx.x; p < gridDim.x; p += blockDim.x)
            acc += ((volatile double *)part)[k * gridDim.x + p];
        double t = block_sum_d(acc, red);
        if (threadIdx.x == 0) out[k] = (float)sqrt(t);
    }
    if (threadIdx.x == 0) *done = 0;
}
static_assert(CUDA_THREADS == HT, "k_l2_norms' hosted checks: the health kernels' block shape");

__global__ void k_clip(float *x, size_t n, const float *norm, float max_norm) {
    KERNEL_PROLOGUE();
    float sc = dqn_clip_scale(norm, max_norm);
    if (sc == 1.0f) return;
    GRID_STRIDE(i, n) x[i] *= sc;
}

__global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                       float beta2, float eps, float wd, const float *gnorm, float max_norm,
                       const uint64_t *step, const int32_t *skip) {
    KERNEL_PROLOGUE();
    if (skip && *skip != 0) return;
    const dqn_adam_consts ak = dqn_adam_consts_at(*step, gnorm, max_norm, beta1, beta2);
    GRID_STRIDE(i, n) {
        float pi = p[i], mi = m[i], vi = v[i];
        dqn_adam_elem(&ak, g[i], &pi, &mi, &vi, lr, beta1, beta2, eps, wd);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}

__global__ void k_target_hard(float *dst, const float *src, size_t n, int period,
                              const uint64_t *step) {
    KERNEL_PROLOGUE();
    if ((*step + 1) % (uint64_t)period != 0) return;
    GRID_STRIDE(i, n) dst[i] = src[i];
}

__global__ void k_target_polyak(float *dst, const float *src, size_t n, float tau) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, n) dst[i] = dqn_polyak(tau, src[i], dst[i]);
}

__global__ void k_step_incr(uint64_t *step) {
    KERNEL_PROLOGUE(); *step += 1; }

dqn_status cuda_l2_norm(dqn_backend *be, const float *x, size_t n, float *out) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(out && (x || n == 0), "l2_norm: NULL pointer");
    unsigned P = cuda_blocks(c, n, CUDA_THREADS);   /* <= 16 per SM, far below the scratch */
    cuda_hosted none;
    memset(&none, 0, sizeof none);
    KLAUNCH(c, k_l2_norms<false>, P, CUDA_THREADS, 0, x, n, nullptr, 0, (double *)c->scratch,
            c->blocks_done, out, none, none);
    return DQN_OK;
}

dqn_status cuda_l2_norm2(dqn_backend *be, const float *x0, size_t n0, const float *x1, size_t n1,
                         float *norms, const void *hplan) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(norms && (x0 || n0 == 0) && x1, "l2_norm2: NULL pointer");
    unsigned P = cuda_blocks(c, n0 > n1 ? n0 : n1, CUDA_THREADS);
    /* the plan hosted: x0's then x1's check, each with a partial for every block that has some
     * of its elements; else it runs as its own kernel first */
    cuda_hosted k[2];
    int nk = 0;
    if (hplan) cuda_health_hosted(hplan, k, 2, &nk);
    const bool host = nk == 2 && hosted_fits(&k[0], x0, n0, P, CUDA_THREADS) &&
                      hosted_fits(&k[1], x1, n1, P, CUDA_THREADS);
    if (hplan && !host) DQN_TRY(cuda_health_check(be, hplan));
    if (!host) memset(k, 0, sizeof k);
    if (host)
        KLAUNCH(c, k_l2_norms<true>, P, CUDA_THREADS, 0, x0, n0, x1, n1, (double *)c->scratch,
                c->blocks_done, norms, k[0], k[1]);
    else
        KLAUNCH(c, k_l2_norms<false>, P, CUDA_THREADS, 0, x0, n0, x1, n1, (double *)c->scratch,
                c->blocks_done, norms, k[0], k[1]);
    return DQN_OK;
}

dqn_status cuda_clip_by_norm(dqn_backend *be, float *x, size_t n, const float *norm,
                             float max_norm) {
    if (!(max_norm > 0.0f)) return DQN_OK;
    CUDA_ARG(norm, "clip_by_norm: norm is NULL");
    LAUNCH_1D(be, k_clip, n, x, n, norm, max_norm);
}

dqn_status cuda_adam(dqn_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                     float lr, float beta1, float beta2, float eps, float wd, const float *gnorm,
                     float max_norm, const uint64_t *step, const int32_t *skip) {
    CUDA_ARG(step, "adam: step is NULL");
    CUDA_ARG(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
             "adam: beta1=%g, beta2=%g, each must be in [0, 1)", (double)beta1, (double)beta2);
    CUDA_ARG(!(max_norm > 0.0f) || gnorm, "adam: max_norm=%g needs gnorm", (double)max_norm);
    LAUNCH_1D(be, k_adam, n, p, g, m, v, n, lr, beta1, beta2, eps, wd, gnorm, max_norm, step, skip);
}

dqn_status cuda_target_update(dqn_backend *be, float *dst, const float *src, size_t n, int period,
                              float tau, const uint64_t *step) {
    CUDA_ARG(period >= 0, "target_update: period=%d < 0", period);
    if (period > 0) {
        CUDA_ARG(step, "target_update: step is NULL");
        LAUNCH_1D(be, k_target_hard, n, dst, src, n, period, step);
    }
    CUDA_ARG(tau >= 0.0f && tau <= 1.0f, "target_update: tau=%g, must be in [0, 1]", (double)tau);
    LAUNCH_1D(be, k_target_polyak, n, dst, src, n, tau);
}

dqn_status cuda_step_incr(dqn_backend *be, uint64_t *step) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(step, "step_incr: step is NULL");
    KLAUNCH(c, k_step_incr, 1, 1, 0, step);
    return DQN_OK;
}

/* adam, target_update and step_incr in one launch. Every thread reads the step first; each block
 * then bumps an integer counter, and the last block, after every block has read the step,
 * increments it and resets the counter. The arithmetic is k_adam's and the target kernels'. */
__global__ void k_adam_target_step(float *p, const float *g, float *m, float *v, float *target,
                                   size_t n, float lr, float beta1, float beta2, float eps,
                                   float wd, const float *gnorm, float max_norm, int period,
                                   float tau, uint64_t *step, const int32_t *skip,
                                   unsigned *done) {
    /* the state and the gradient are older than the op issued before this one (ops.def): the
     * thread's first element is loaded while that op runs */
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float p0 = 0.0f, m0 = 0.0f, v0 = 0.0f, g0 = 0.0f, t0 = 0.0f;
    if (i0 < n) {
        p0 = p[i0];
        m0 = m[i0];
        v0 = v[i0];
        g0 = g[i0];
        t0 = target[i0];
    }
    KERNEL_PROLOGUE();
    __shared__ bool last;
    const uint64_t st = *(volatile const uint64_t *)step;
    const bool adam = !(skip && *skip != 0);
    const bool copy = period > 0 && (st + 1) % (uint64_t)period == 0;
    const dqn_adam_consts ak = dqn_adam_consts_at(st, gnorm, max_norm, beta1, beta2);
    GRID_STRIDE(i, n) {
        const bool first = i == i0;
        float pi = first ? p0 : p[i];
        if (adam) {
            float mi = first ? m0 : m[i], vi = first ? v0 : v[i];
            dqn_adam_elem(&ak, first ? g0 : g[i], &pi, &mi, &vi, lr, beta1, beta2, eps, wd);
            m[i] = mi;
            v[i] = vi;
            p[i] = pi;
        }
        if (period == 0) target[i] = dqn_polyak(tau, pi, first ? t0 : target[i]);
        else if (copy) target[i] = pi;
    }
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (last && threadIdx.x == 0) {
        *step = st + 1;
        *done = 0;
    }
}

dqn_status cuda_adam_target_step(dqn_backend *be, float *p, const float *g, float *m, float *v,
                                 float *target, size_t n, float lr, float beta1, float beta2,
                                 float eps, float wd, const float *gnorm, float max_norm,
                                 int period, float tau, uint64_t *step, const int32_t *skip) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(step, "adam_target_step: step is NULL");
    CUDA_ARG(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
             "adam_target_step: beta1=%g, beta2=%g, each must be in [0, 1)", (double)beta1,
             (double)beta2);
    CUDA_ARG(!(max_norm > 0.0f) || gnorm, "adam_target_step: max_norm=%g needs gnorm",
             (double)max_norm);
    CUDA_ARG(period > 0 || (period == 0 && tau >= 0.0f && tau <= 1.0f),
             "adam_target_step: period=%d, tau=%g (period >= 0; tau in [0, 1] when 0)", period,
             (double)tau);
    unsigned P = cuda_blocks(c, n, CUDA_THREADS);   /* one block even for n = 0: the step rises */
    KLAUNCH(c, k_adam_target_step, P, CUDA_THREADS, 0, p, g, m, v, target, n, lr, beta1, beta2, eps, wd, gnorm, max_norm, period, tau, step, skip, c->blocks_done);
    return DQN_OK;
}
