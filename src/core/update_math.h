/* The update step's element formulas, written once for both backends (C, and host+device under
 * nvcc): the clip factor, Adam's constants and element update, the Polyak average, the ISV's
 * running statistic and the guard bound. Every product and sum rounds on its own (no FMA
 * contraction: plain operators in C, the _rn intrinsics on the device) so that the CPU, the fused
 * CUDA optimizer and the health commit's optimizer pass give the same bits; the one exception is
 * the ISV's average, whose device rounding (one FMA) is what nvcc's contraction gave it. */
#ifndef DQN_UPDATE_MATH_H
#define DQN_UPDATE_MATH_H
#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define DQN_UM __host__ __device__ __forceinline__
#else
#define DQN_UM static inline
#endif

#if defined(__CUDA_ARCH__)
#define DQN_UM_MUL(a, b) __fmul_rn(a, b)
#define DQN_UM_ADD(a, b) __fadd_rn(a, b)
#define DQN_UM_SUB(a, b) __fsub_rn(a, b)
#define DQN_UM_DIV(a, b) __fdiv_rn(a, b)
#define DQN_UM_SQRT(a) __fsqrt_rn(a)
#else
#define DQN_UM_MUL(a, b) ((a) * (b))
#define DQN_UM_ADD(a, b) ((a) + (b))
#define DQN_UM_SUB(a, b) ((a) - (b))
#define DQN_UM_DIV(a, b) ((a) / (b))
#define DQN_UM_SQRT(a) sqrtf(a)
#endif

/* min(1, max_norm / norm); 1 when clipping is off (max_norm <= 0 or NaN), when there is no norm,
 * or when the norm is not finite */
DQN_UM float dqn_clip_scale(const float *norm, float max_norm) {
    if (!(max_norm > 0.0f) || !norm) return 1.0f;
    const float nv = *norm;
    return isfinite(nv) && nv > max_norm ? max_norm / nv : 1.0f;
}

/* Adam's constants for the step after `step`: the gradient's clip factor, 1 / each bias
 * correction, 1 - each beta */
typedef struct {
    float sc, c1, c2, a1, a2;
} dqn_adam_consts;

DQN_UM dqn_adam_consts dqn_adam_consts_at(uint64_t step, const float *gnorm, float max_norm,
                                          float beta1, float beta2) {
    dqn_adam_consts k;
    k.sc = dqn_clip_scale(gnorm, max_norm);
    const double t = (double)(step + 1);
    k.c1 = (float)(1.0 / (1.0 - pow((double)beta1, t)));
    k.c2 = (float)(1.0 / (1.0 - pow((double)beta2, t)));
    k.a1 = 1.0f - beta1;
    k.a2 = 1.0f - beta2;
    return k;
}

/* one element: m, v from the clipped gradient, then p -= lr (m c1 / (sqrt(v c2) + eps) + wd p)
 * (decoupled weight decay) */
DQN_UM void dqn_adam_elem(const dqn_adam_consts *k, float g, float *p, float *m, float *v,
                          float lr, float beta1, float beta2, float eps, float wd) {
    const float gi = DQN_UM_MUL(g, k->sc);
    const float mi = DQN_UM_ADD(DQN_UM_MUL(beta1, *m), DQN_UM_MUL(k->a1, gi));
    const float vi = DQN_UM_ADD(DQN_UM_MUL(beta2, *v), DQN_UM_MUL(DQN_UM_MUL(k->a2, gi), gi));
    const float den = DQN_UM_ADD(DQN_UM_SQRT(DQN_UM_MUL(vi, k->c2)), eps);
    const float u = DQN_UM_ADD(DQN_UM_DIV(DQN_UM_MUL(mi, k->c1), den), DQN_UM_MUL(wd, *p));
    *m = mi;
    *v = vi;
    *p = DQN_UM_SUB(*p, DQN_UM_MUL(lr, u));
}

/* the Polyak target: tau src + (1 - tau) dst */
DQN_UM float dqn_polyak(float tau, float src, float dst) {
    return DQN_UM_ADD(DQN_UM_MUL(tau, src), DQN_UM_MUL(1.0f - tau, dst));
}

/* An ISV entry's exponential average fed one sample: a non-finite sample is ignored, an
 * uninitialised entry (0) takes the first positive one. Returns 1 if *v changed. */
DQN_UM int dqn_isv_feed(float *v, float sample, float decay) {
    if (!isfinite(sample)) return 0;
    if (*v == 0.0f) {
        if (!(sample > 0.0f)) return 0;
        *v = sample;
        return 1;
    }
#if defined(__CUDA_ARCH__)
    *v = fmaf(sample, 1.0f - decay, decay * *v);   /* as nvcc contracted it */
#else
    *v = decay * *v + (1.0f - decay) * sample;
#endif
    return 1;
}

/* a guard's bound max(guard_scale * isv, guard_floor): the floor covers an uninitialised ISV */
DQN_UM float dqn_guard_bound(float guard_scale, float isv, float guard_floor) {
    return fmaxf(guard_scale * isv, guard_floor);
}

#endif
