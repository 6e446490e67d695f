/* What the CPU backend's files share: argument checks that name the op, the elementwise loop
 * macro, run-time ISA dispatch for hot loops, and the lane count of its double accumulators. */
#ifndef DQN_CPU_INTERNAL_H
#define DQN_CPU_INTERNAL_H
#include <math.h>

#include "backends/backend.h"
#include "core/error.h"
#include "core/update_math.h"

/* gcc -O2 (GCC >= 12: vect-cost-model=very-cheap) only vectorises loops whose trip count is a
 * known multiple of the vector width, so elementwise loops run in fixed blocks plus a tail.
 * ivdep: each element is read and written at the same index, so in-place calls are safe. */
#if defined(__clang__)
#define IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define IVDEP _Pragma("GCC ivdep")
#endif
#define EACH_BLOCK 16
#define EACH(i, n, ...)                                                 \
    do {                                                                \
        size_t i##0_ = 0, i##n_ = (n);                                  \
        for (; i##0_ + EACH_BLOCK <= i##n_; i##0_ += EACH_BLOCK)        \
            IVDEP for (size_t i##j_ = 0; i##j_ < EACH_BLOCK; i##j_++) { \
                size_t i = i##0_ + i##j_;                               \
                __VA_ARGS__;                                            \
            }                                                           \
        for (size_t i = i##0_; i < i##n_; i++) {                        \
            __VA_ARGS__;                                                \
        }                                                               \
    } while (0)

/* CPU_CLONE(name, params, args): name##_any, a static function whose body is the always-inline
 * name##_body, compiled three times on x86-64 (baseline SSE2, AVX2 and AVX-512F) and picked at run
 * time. No copy may use FMA (ISO C mode does not contract), so all give the same floats: the wider
 * copies only run the same vectorised loops on wider registers. */
#if defined(__x86_64__) && defined(__GNUC__)
#define CPU_CLONE(name, params, args)                                                    \
    static void name##_base params { name##_body args; }                                 \
    __attribute__((target("avx2"))) static void name##_avx2 params { name##_body args; } \
    __attribute__((target("avx512f"))) static void name##_avx512 params {                \
        name##_body args;                                                                \
    }                                                                                    \
    static void name##_any params {                                                      \
        if (__builtin_cpu_supports("avx512f"))                                           \
            name##_avx512 args;                                                          \
        else if (__builtin_cpu_supports("avx2"))                                         \
            name##_avx2 args;                                                            \
        else                                                                             \
            name##_base args;                                                            \
    }
#else
#define CPU_CLONE(name, params, args) \
    static void name##_any params { name##_body args; }
#endif
#define CPU_INLINE static inline __attribute__((always_inline))

/* Double accumulators in independent lanes: vectorisable, and a shorter rounding chain. */
enum { LANES = 8 };

/* LANES doubles or floats as one value (GCC vector extensions: registers on every target, split
 * where the target's are narrower); elementwise arithmetic on them rounds as the scalar code. */
typedef double cpu_vd __attribute__((vector_size(LANES * sizeof(double))));
typedef float cpu_vf __attribute__((vector_size(LANES * sizeof(float))));
typedef long long cpu_vl __attribute__((vector_size(LANES * sizeof(long long))));

/* t[l][i] = x[i][l]: an 8 x 8 transpose in three rounds of shuffles (no arithmetic) */
#define CPU_SHUF(a, b, ...) __builtin_shuffle((a), (b), (cpu_vl){__VA_ARGS__})
CPU_INLINE void cpu_transpose8(const cpu_vd x[LANES], cpu_vd t[LANES]) {
    cpu_vd a[LANES], c[LANES];
    for (int i = 0; i < LANES; i += 2) {
        a[i] = CPU_SHUF(x[i], x[i + 1], 0, 8, 2, 10, 4, 12, 6, 14);
        a[i + 1] = CPU_SHUF(x[i], x[i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
    }
    for (int i = 0; i < LANES; i += 4)
        for (int h = 0; h < 2; h++) {
            c[i + h] = CPU_SHUF(a[i + h], a[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            c[i + h + 2] = CPU_SHUF(a[i + h], a[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
    /* c[0..3]: elements 0|4, 1|5, 2|6, 3|7 of rows 0-3; c[4..7] the same of rows 4-7 */
    for (int l = 0; l < 4; l++) {
        t[l] = CPU_SHUF(c[l], c[l + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        t[l + 4] = CPU_SHUF(c[l], c[l + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}

#define REQUIRE(cond, ...)                                     \
    do {                                                       \
        if (!(cond)) return DQN_ERR(DQN_ERR_ARG, __VA_ARGS__); \
    } while (0)

/* the fused ops (cpu_fused.c), for the op table (cpu_backend.c: cpu_<name> for each entry of
 * backends/ops.def) */
dqn_status cpu_heads_fwd(dqn_backend *be, const float *hva, const float *Wv2, const float *bv2,
                         const float *Wa2, const float *ba2, float *V, float *Adv, float *Z, int R,
                         int H, const dqn_branches *br);
dqn_status cpu_l2_norm2(dqn_backend *be, const float *x0, size_t n0, const float *x1, size_t n1,
                        float *norms, const void *hplan);
dqn_status cpu_heads_bwd(dqn_backend *be, const float *hva, const float *Wv2, const float *Wa2,
                         const float *dV, const float *dAdv, const float *norms, float max_norm,
                         float *dhva, float *dbva, float *dWv2, float *dbv2, float *dWa2,
                         float *dba2, int R, int H, int A);
dqn_status cpu_grn_gate_ln_fwd(dqn_backend *be, const float *h, const float *g, const float *gamma,
                               const float *beta, float *r, float *y, float *mean, float *rstd,
                               int M, int d);
dqn_status cpu_grn_ln_gate_bwd(dqn_backend *be, const float *r, const float *gamma,
                               const float *mean, const float *rstd, const float *g,
                               const float *dy, float *dres, float *dg, float *dgamma,
                               float *dbeta, int M, int d, const void *hplan);
dqn_status cpu_iqn_fwd(dqn_backend *be, const float *h, const float *phi, float *z, float *cat,
                       int B, int T, int d);
dqn_status cpu_iqn_embed_fwd(dqn_backend *be, const float *tau, const float *W, const float *b,
                             const float *h, float *C, float *phi, float *z, float *cat, int B,
                             int T, int n_cos, int d, int keep, const void *hplan);
dqn_status cpu_iqn_bwd(dqn_backend *be, const float *dcat, const float *h, const float *phi,
                       float *dz, float *dh, float *dphi, float *dphi_b, int B, int T, int d,
                       const void *hplan);
dqn_status cpu_adam_target_step(dqn_backend *be, float *p, const float *g, float *m, float *v,
                                float *target, size_t n, float lr, float beta1, float beta2,
                                float eps, float wd, const float *gnorm, float max_norm,
                                int period, float tau, uint64_t *step, const int32_t *skip);
dqn_status cpu_per_sample(dqn_backend *be, const dqn_per *per, int32_t *idx, float *w, int B,
                          uint64_t seed, const uint64_t *step);
dqn_status cpu_per_update(dqn_backend *be, const dqn_per *per, const int32_t *idx,
                          const float *loss, int B);
dqn_status cpu_per_insert(dqn_backend *be, const dqn_per *per, int pos, int n);
dqn_status cpu_sample_draws(dqn_backend *be, const dqn_sample_src *src, const dqn_sample_dst *dst,
                            int B, const dqn_draws *d, uint64_t seed, const uint64_t *step);
dqn_status cpu_linear_ld_fwd(dqn_backend *be, const float *X, const float *W, int ldw,
                            const float *b, float *Y, int M, int K, int N, dqn_act act);
dqn_status cpu_linear_ld_bwd(dqn_backend *be, const float *X, const float *W, int ldw,
                            const float *dY, float *dX, int acc_dx, float *dW, float *db, int M,
                            int K, int N);
dqn_status cpu_bcast_add_act(dqn_backend *be, const float *hb, float *Y, int B, int T, int N,
                             dqn_act act);
dqn_status cpu_relu_bwd_tausum(dqn_backend *be, const float *u, float *du, float *dus, int B,
                               int T, int N, const void *hplan);
/* the classic envs' step (cpu_env.c), for the op table */
dqn_status cpu_env_step(dqn_backend *be, const dqn_env_io *io, const int32_t *actions);
/* the rest of an env step (cpu_loop.c), for the op table */
dqn_status cpu_explore(dqn_backend *be, const dqn_explore_io *x, const dqn_branches *br,
                       const int32_t *greedy, int32_t *actions);
dqn_status cpu_replay_push(dqn_backend *be, const dqn_nstep_win *w, const dqn_ring *r,
                           const float *obs, const int32_t *act, const float *reward,
                           const float *final_obs, const uint8_t *terminated,
                           const uint8_t *truncated);
dqn_status cpu_episode_record(dqn_backend *be, const dqn_episodes *rec, const uint8_t *terminated,
                              const uint8_t *truncated, const double *done_return, int n);
/* the health ops and the fences (cpu_health.c), for the op table */
dqn_status cpu_health_plan(dqn_backend *be, const dqn_hplan_desc *desc, void **plan);
void cpu_health_plan_free(dqn_backend *be, void *plan);
dqn_status cpu_health_check(dqn_backend *be, const void *plan);
dqn_status cpu_health_fault(dqn_backend *be, float *x, size_t n, const uint64_t *step,
                            uint64_t at, int kind);
dqn_status cpu_fence_create(dqn_backend *be, void **fence);
void cpu_fence_destroy(dqn_backend *be, void *fence);
dqn_status cpu_fence_noop(dqn_backend *be, void *fence);
/* db[N] = column sums of dY [M, N], in row order (linear_bwd's) */
void cpu_colsum(const float *dY, float *db, int M, int N);

#endif
