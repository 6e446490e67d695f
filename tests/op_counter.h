/* A counting backend: the CPU backend's op table with every compute op wrapped, so that a test or
 * a benchmark can count the op calls of one dqn_model_update (or of any other sequence) and
 * estimate the kernel nodes a CUDA graph of the same sequence would hold. Results are the CPU
 * backend's own (each wrapper forwards its arguments unchanged).
 *
 * Node estimate: one node per op call, except linear_bwd (the dX GEMM when dX is wanted, the dW
 * GEMM, and a column-sum kernel for db past the CUDA backend's BGRADB row limit) and
 * layernorm_bwd (the dx kernel and the dgamma/dbeta column sum). cuBLAS split-K kernels and GEMMs
 * without a BGRADB kernel add nodes the estimate does not see; it is a count by construction.
 *
 * Usage: oc_create(&be) gives the counting backend; oc_reset(), run ops, then oc_calls(),
 * oc_nodes(), oc_count("linear_bwd") or oc_print(stdout). An op added to backend.h must get a
 * wrapper here to be counted; oc_unwrapped() says how many compute ops have none. */
#ifndef DQN_TEST_OP_COUNTER_H
#define DQN_TEST_OP_COUNTER_H
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

/* past this many rows the CUDA linear_bwd takes db from a separate column sum (cuda_gemm.cu) */
#define OC_BGRADB_MAX_ROWS 8192

#define OC_SLOTS (sizeof(dqn_ops) / sizeof(void (*)(void)))
static dqn_backend *oc_inner;
static dqn_ops oc_ops;
static dqn_backend oc_be;
static long oc_calls_of[OC_SLOTS], oc_nodes_of[OC_SLOTS];
static const char *oc_name_of[OC_SLOTS];
/* dry: count, compute nothing (outputs keep whatever they held), for shapes too big to run */
static int oc_dry;
static double oc_flops;   /* GEMM FLOPs (2 M K N per GEMM) since the last reset */

#define OC_SLOT(op) (offsetof(dqn_ops, op) / sizeof(void (*)(void)))
#define OC_HIT(op, nodes) (oc_calls_of[OC_SLOT(op)]++, oc_nodes_of[OC_SLOT(op)] += (nodes))
#define OC_GEMM(M, K, N, count) (oc_flops += 2.0 * (double)(M) * (double)(K) * (double)(N) * (count))
/* a wrapper that counts one call of `nodes` nodes, then forwards to the CPU backend */
#define OC_WRAP(op, nodes, params, args)                                \
    static dqn_status oc_##op params {                                  \
        (void)be;                                                       \
        OC_HIT(op, nodes);                                              \
        return oc_dry ? DQN_OK : oc_inner->ops->op args;                \
    }

OC_WRAP(fill, 1, (dqn_backend *be, float *x, float v, size_t n), (oc_inner, x, v, n))
OC_WRAP(d2d, 1, (dqn_backend *be, void *dst, const void *src, size_t bytes),
        (oc_inner, dst, src, bytes))
OC_WRAP(linear_fwd, (OC_GEMM(M, K, N, 1), 1),
        (dqn_backend *be, const float *X, const float *W, const float *b, float *Y, int M, int K,
         int N),
        (oc_inner, X, W, b, Y, M, K, N))
OC_WRAP(linear_act_fwd, (OC_GEMM(M, K, N, 1), 1),
        (dqn_backend *be, const float *X, const float *W, const float *b, float *Y, int M, int K,
         int N, dqn_act act),
        (oc_inner, X, W, b, Y, M, K, N, act))
OC_WRAP(linear_bwd,
        (OC_GEMM(M, K, N, (dX != NULL) + (dW != NULL)),
         (dX != NULL) + (dW != NULL) + (db != NULL && M > OC_BGRADB_MAX_ROWS)),
        (dqn_backend *be, const float *X, const float *W, const float *dY, float *dX, float *dW,
         float *db, int M, int K, int N),
        (oc_inner, X, W, dY, dX, dW, db, M, K, N))
OC_WRAP(axpy, 1, (dqn_backend *be, float a, const float *x, float *y, size_t n),
        (oc_inner, a, x, y, n))
OC_WRAP(relu_fwd, 1, (dqn_backend *be, const float *x, float *y, size_t n), (oc_inner, x, y, n))
OC_WRAP(relu_bwd, 1, (dqn_backend *be, const float *y, const float *dy, float *dx, size_t n),
        (oc_inner, y, dy, dx, n))
OC_WRAP(elu_fwd, 1, (dqn_backend *be, const float *x, float *y, size_t n), (oc_inner, x, y, n))
OC_WRAP(elu_bwd, 1, (dqn_backend *be, const float *y, const float *dy, float *dx, size_t n),
        (oc_inner, y, dy, dx, n))
OC_WRAP(gate_fwd, 1, (dqn_backend *be, const float *h, const float *g, float *r, int M, int d),
        (oc_inner, h, g, r, M, d))
OC_WRAP(gate_bwd, 1,
        (dqn_backend *be, const float *g, const float *dr, float *dh, float *dg, int M, int d),
        (oc_inner, g, dr, dh, dg, M, d))
OC_WRAP(layernorm_fwd, 1,
        (dqn_backend *be, const float *x, const float *gamma, const float *beta, float *y,
         float *mean, float *rstd, int M, int d),
        (oc_inner, x, gamma, beta, y, mean, rstd, M, d))
OC_WRAP(layernorm_bwd, 2,
        (dqn_backend *be, const float *x, const float *gamma, const float *mean, const float *rstd,
         const float *dy, float *dx, float *dgamma, float *dbeta, int M, int d),
        (oc_inner, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, M, d))
OC_WRAP(cos_embed, 1, (dqn_backend *be, const float *tau, float *C, int R, int n_cos),
        (oc_inner, tau, C, R, n_cos))
OC_WRAP(mul_bcast_fwd, 1,
        (dqn_backend *be, const float *h, const float *phi, float *z, int B, int T, int d),
        (oc_inner, h, phi, z, B, T, d))
OC_WRAP(mul_bcast_bwd, 1,
        (dqn_backend *be, const float *h, const float *phi, const float *dz, float *dh,
         float *dphi, int B, int T, int d),
        (oc_inner, h, phi, dz, dh, dphi, B, T, d))
OC_WRAP(concat_bcast_fwd, 1,
        (dqn_backend *be, const float *z, const float *h, float *out, int B, int T, int d),
        (oc_inner, z, h, out, B, T, d))
OC_WRAP(concat_bcast_bwd, 1,
        (dqn_backend *be, const float *dout, float *dz, float *dh, int B, int T, int d),
        (oc_inner, dout, dz, dh, B, T, d))
OC_WRAP(dueling_fwd, 1,
        (dqn_backend *be, const float *V, const float *Adv, float *Z, int R,
         const dqn_branches *br),
        (oc_inner, V, Adv, Z, R, br))
OC_WRAP(dueling_bwd, 1,
        (dqn_backend *be, const float *dZ, float *dV, float *dAdv, int R, const dqn_branches *br),
        (oc_inner, dZ, dV, dAdv, R, br))
OC_WRAP(q_argmax, 1,
        (dqn_backend *be, const float *Z, float *Q, int32_t *act, int B, int K,
         const dqn_branches *br),
        (oc_inner, Z, Q, act, B, K, br))
OC_WRAP(iqn_targets, 1,
        (dqn_backend *be, const float *Zt, const int32_t *astar, const float *R,
         const float *discount, float *y, int B, int Nt, const dqn_branches *br,
         dqn_target_mode mode),
        (oc_inner, Zt, astar, R, discount, y, B, Nt, br, mode))
OC_WRAP(quantile_huber, 1,
        (dqn_backend *be, const float *Z, const float *tau, const int32_t *act, const float *y,
         const float *w, float *loss_out, float *dZ, float *per_sample, int B, int N, int Nt,
         const dqn_branches *br, dqn_target_mode mode, float kappa),
        (oc_inner, Z, tau, act, y, w, loss_out, dZ, per_sample, B, N, Nt, br, mode, kappa))
OC_WRAP(l2_norm, 1, (dqn_backend *be, const float *x, size_t n, float *out),
        (oc_inner, x, n, out))
OC_WRAP(clip_by_norm, 1,
        (dqn_backend *be, float *x, size_t n, const float *norm, float max_norm),
        (oc_inner, x, n, norm, max_norm))
OC_WRAP(adam, 1,
        (dqn_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr,
         float beta1, float beta2, float eps, float wd, const float *gnorm, float max_norm,
         const uint64_t *step, const int32_t *skip),
        (oc_inner, p, g, m, v, n, lr, beta1, beta2, eps, wd, gnorm, max_norm, step, skip))
OC_WRAP(target_update, 1,
        (dqn_backend *be, float *dst, const float *src, size_t n, int period, float tau,
         const uint64_t *step),
        (oc_inner, dst, src, n, period, tau, step))
OC_WRAP(step_incr, 1, (dqn_backend *be, uint64_t *step), (oc_inner, step))
OC_WRAP(rand_uniform, 1,
        (dqn_backend *be, float *out, size_t n, uint64_t seed, uint32_t stream,
         const uint64_t *step, uint64_t stride),
        (oc_inner, out, n, seed, stream, step, stride))
OC_WRAP(rand_index, 1,
        (dqn_backend *be, int32_t *idx, size_t n, uint64_t seed, uint32_t stream,
         const uint64_t *step, uint64_t stride, const uint32_t *size),
        (oc_inner, idx, n, seed, stream, step, stride, size))
OC_WRAP(gather_f32, 1,
        (dqn_backend *be, const float *src, const int32_t *idx, float *dst, int n, int row_len),
        (oc_inner, src, idx, dst, n, row_len))
OC_WRAP(gather_i32, 1,
        (dqn_backend *be, const int32_t *src, const int32_t *idx, int32_t *dst, int n,
         int row_len),
        (oc_inner, src, idx, dst, n, row_len))
OC_WRAP(sample_batch, 1,
        (dqn_backend *be, const dqn_sample_src *src, const dqn_sample_dst *dst, int B,
         uint64_t seed, const uint64_t *step),
        (oc_inner, src, dst, B, seed, step))
OC_WRAP(rand_uniform_multi, 1,
        (dqn_backend *be, const dqn_draws *d, uint64_t seed, const uint64_t *step),
        (oc_inner, d, seed, step))

/* fused ops (issue 3) */
/* the heads' custom kernels do the work of GEMMs: count it (R x H x (1 + A), twice backward) */
OC_WRAP(heads_fwd, (OC_GEMM(R, H, br->A + 1, 1), 1),
        (dqn_backend *be, const float *hva, const float *Wv2, const float *bv2, const float *Wa2,
         const float *ba2, float *V, float *Adv, float *Z, int R, int H, const dqn_branches *br),
        (oc_inner, hva, Wv2, bv2, Wa2, ba2, V, Adv, Z, R, H, br))
OC_WRAP(l2_norm2, 1,
        (dqn_backend *be, const float *x0, size_t n0, const float *x1, size_t n1, float *norms,
         const void *hplan),
        (oc_inner, x0, n0, x1, n1, norms, hplan))
OC_WRAP(heads_bwd, (OC_GEMM(R, H, A + 1, 2), 1),
        (dqn_backend *be, const float *hva, const float *Wv2, const float *Wa2, const float *dV,
         const float *dAdv, const float *norms, float max_norm, float *dhva, float *dbva,
         float *dWv2, float *dbv2, float *dWa2, float *dba2, int R, int H, int A),
        (oc_inner, hva, Wv2, Wa2, dV, dAdv, norms, max_norm, dhva, dbva, dWv2, dbv2, dWa2, dba2,
         R, H, A))
/* one node, CUDA's fused kernel (its loss's final sum not counted, as quantile_huber's) */
OC_WRAP(targets_huber, 1,
        (dqn_backend *be, const dqn_target_io *t, const float *Z, const float *tau,
         const int32_t *act, const float *w, float *loss_out, float *dZ, float *per_sample, int B,
         int N, int Nt, const dqn_branches *br, dqn_target_mode mode, float kappa),
        (oc_inner, t, Z, tau, act, w, loss_out, dZ, per_sample, B, N, Nt, br, mode, kappa))
/* one node: CUDA's kernel where the model is small (cuda_trunk.cu), else 1 + 3 L */
OC_WRAP(trunk_fwd,
        (OC_GEMM(t->M, t->obs, t->d, t->W_in != NULL),
         OC_GEMM(t->M, t->d, 3 * t->d, t->L), 1),
        (dqn_backend *be, const dqn_trunk_io *t), (oc_inner, t))
OC_WRAP(grn_gate_ln_fwd, 1,
        (dqn_backend *be, const float *h, const float *g, const float *gamma, const float *beta,
         float *r, float *y, float *mean, float *rstd, int M, int d),
        (oc_inner, h, g, gamma, beta, r, y, mean, rstd, M, d))
OC_WRAP(grn_ln_gate_bwd, 1,
        (dqn_backend *be, const float *r, const float *gamma, const float *mean,
         const float *rstd, const float *g, const float *dy, float *dres, float *dg,
         float *dgamma, float *dbeta, int M, int d, const void *hplan),
        (oc_inner, r, gamma, mean, rstd, g, dy, dres, dg, dgamma, dbeta, M, d, hplan))
OC_WRAP(iqn_fwd, 1,
        (dqn_backend *be, const float *h, const float *phi, float *z, float *cat, int B, int T,
         int d),
        (oc_inner, h, phi, z, cat, B, T, d))
/* iqn_embed_fwd may leave C and phi unwritten past their first keep rows (CUDA's kernel does):
 * here they become NaN, so that an update through the counter shows whether anything reads them */
static dqn_status oc_iqn_embed_fwd(dqn_backend *be, const float *tau, const float *W,
                                   const float *b, const float *h, float *C, float *phi, float *z,
                                   float *cat, int B, int T, int n_cos, int d, int keep,
                                   const void *hplan) {
    (void)be;
    OC_HIT(iqn_embed_fwd, 1);
    OC_GEMM(B * T, n_cos, d, 1);
    if (oc_dry) return DQN_OK;
    dqn_status s = oc_inner->ops->iqn_embed_fwd(oc_inner, tau, W, b, h, C, phi, z, cat, B, T,
                                                n_cos, d, keep, hplan);
    const size_t R = (size_t)B * (size_t)T;
    for (size_t i = (size_t)keep * (size_t)n_cos; s == DQN_OK && i < R * (size_t)n_cos; i++)
        C[i] = NAN;
    for (size_t i = (size_t)keep * (size_t)d; s == DQN_OK && i < R * (size_t)d; i++) phi[i] = NAN;
    return s;
}
OC_WRAP(iqn_bwd, 1,
        (dqn_backend *be, const float *dcat, const float *h, const float *phi, float *dz,
         float *dh, float *dphi, float *dphi_b, int B, int T, int d, const void *hplan),
        (oc_inner, dcat, h, phi, dz, dh, dphi, dphi_b, B, T, d, hplan))
OC_WRAP(adam_target_step, 1,
        (dqn_backend *be, float *p, const float *g, float *m, float *v, float *target, size_t n,
         float lr, float beta1, float beta2, float eps, float wd, const float *gnorm,
         float max_norm, int period, float tau, uint64_t *step, const int32_t *skip),
        (oc_inner, p, g, m, v, target, n, lr, beta1, beta2, eps, wd, gnorm, max_norm, period,
         tau, step, skip))
OC_WRAP(sample_draws, 1,
        (dqn_backend *be, const dqn_sample_src *src, const dqn_sample_dst *dst, int B,
         const dqn_draws *d, uint64_t seed, const uint64_t *step),
        (oc_inner, src, dst, B, d, seed, step))

OC_WRAP(linear_ld_fwd, (OC_GEMM(M, K, N, 1), 1),
        (dqn_backend *be, const float *X, const float *W, int ldw, const float *b, float *Y, int M,
         int K, int N, dqn_act act),
        (oc_inner, X, W, ldw, b, Y, M, K, N, act))
OC_WRAP(linear_ld_bwd,
        (OC_GEMM(M, K, N, (dX != NULL) + (dW != NULL)),
         (dX != NULL) + (dW != NULL) + (db != NULL && (dW == NULL || M > OC_BGRADB_MAX_ROWS))),
        (dqn_backend *be, const float *X, const float *W, int ldw, const float *dY, float *dX,
         int acc_dx, float *dW, float *db, int M, int K, int N),
        (oc_inner, X, W, ldw, dY, dX, acc_dx, dW, db, M, K, N))
OC_WRAP(bcast_add_act, 1,
        (dqn_backend *be, const float *hb, float *Y, int B, int T, int N, dqn_act act),
        (oc_inner, hb, Y, B, T, N, act))
OC_WRAP(relu_bwd_tausum, 1,
        (dqn_backend *be, const float *u, float *du, float *dus, int B, int T, int N,
         const void *hplan),
        (oc_inner, u, du, dus, B, T, N, hplan))

/* numerical health (one kernel a plan or a fault) and the data-parallel all-reduce */
OC_WRAP(health_check, 1, (dqn_backend *be, const void *plan), (oc_inner, plan))
OC_WRAP(health_fault, 1,
        (dqn_backend *be, float *x, size_t n, const uint64_t *step, uint64_t at, int kind),
        (oc_inner, x, n, step, at, kind))
OC_WRAP(allreduce_mean, 1, (dqn_backend *be, float *x, size_t n), (oc_inner, x, n))

/* the memory, host-staging, set-up and fence entries, which are not compute ops and stay
 * unwrapped */
static inline int oc_is_memory(size_t slot) {
    static const size_t mem[] = {OC_SLOT(alloc),     OC_SLOT(free),      OC_SLOT(h2d),
                                 OC_SLOT(d2h),       OC_SLOT(sync),      OC_SLOT(destroy),
                                 OC_SLOT(host_alloc), OC_SLOT(host_free), OC_SLOT(h2d_async),
                                 OC_SLOT(d2h_async), OC_SLOT(health_plan),
                                 OC_SLOT(health_plan_free), OC_SLOT(fence_create),
                                 OC_SLOT(fence_destroy), OC_SLOT(fence_record),
                                 OC_SLOT(fence_wait), OC_SLOT(comm_init), OC_SLOT(comm_world)};
    for (size_t k = 0; k < sizeof mem / sizeof mem[0]; k++)
        if (mem[k] == slot) return 1;
    return 0;
}

static inline void oc_destroy(dqn_backend *be) {
    (void)be;
    if (oc_inner) oc_inner->ops->destroy(oc_inner);
    oc_inner = NULL;
}

#define OC_SET(op) (oc_ops.op = oc_##op, oc_name_of[OC_SLOT(op)] = #op)

/* The counting backend over a fresh CPU backend (one per process). */
static inline dqn_status oc_create(dqn_backend **out) {
    dqn_status s = dqn_backend_cpu_create(&oc_inner);
    if (s != DQN_OK) return s;
    oc_ops = *oc_inner->ops;
    oc_ops.name = "cpu-counting";
    oc_ops.destroy = oc_destroy;
    OC_SET(fill); OC_SET(d2d); OC_SET(linear_fwd); OC_SET(linear_act_fwd); OC_SET(linear_bwd);
    OC_SET(axpy); OC_SET(relu_fwd); OC_SET(relu_bwd); OC_SET(elu_fwd); OC_SET(elu_bwd);
    OC_SET(gate_fwd); OC_SET(gate_bwd); OC_SET(layernorm_fwd); OC_SET(layernorm_bwd);
    OC_SET(cos_embed); OC_SET(mul_bcast_fwd); OC_SET(mul_bcast_bwd); OC_SET(concat_bcast_fwd);
    OC_SET(concat_bcast_bwd); OC_SET(dueling_fwd); OC_SET(dueling_bwd); OC_SET(q_argmax);
    OC_SET(iqn_targets); OC_SET(quantile_huber); OC_SET(l2_norm); OC_SET(clip_by_norm);
    OC_SET(adam); OC_SET(target_update); OC_SET(step_incr); OC_SET(rand_uniform);
    OC_SET(rand_index); OC_SET(gather_f32); OC_SET(gather_i32); OC_SET(sample_batch);
    OC_SET(rand_uniform_multi);
    OC_SET(heads_fwd); OC_SET(l2_norm2); OC_SET(heads_bwd); OC_SET(targets_huber);
    OC_SET(trunk_fwd);
    OC_SET(grn_gate_ln_fwd);
    OC_SET(grn_ln_gate_bwd); OC_SET(iqn_fwd); OC_SET(iqn_embed_fwd); OC_SET(iqn_bwd);
    OC_SET(adam_target_step); OC_SET(sample_draws); OC_SET(linear_ld_fwd); OC_SET(linear_ld_bwd); OC_SET(bcast_add_act);
    OC_SET(relu_bwd_tausum);
    OC_SET(health_check); OC_SET(health_fault); OC_SET(allreduce_mean);
    oc_be = *oc_inner;
    oc_be.ops = &oc_ops;
    *out = &oc_be;
    return DQN_OK;
}

/* Compute ops of the CPU table that have no wrapper (their calls go uncounted). */
static inline int oc_unwrapped(void) {
    typedef void (*fn)(void);
    fn mine[OC_SLOTS], theirs[OC_SLOTS];
    memcpy(mine, &oc_ops, sizeof mine);
    memcpy(theirs, oc_inner->ops, sizeof theirs);
    int n = 0;
    for (size_t k = 1; k < OC_SLOTS; k++)   /* slot 0 is the name */
        if (theirs[k] && mine[k] == theirs[k] && !oc_is_memory(k)) n++;
    return n;
}

static inline void oc_reset(void) {
    oc_flops = 0;
    memset(oc_calls_of, 0, sizeof oc_calls_of);
    memset(oc_nodes_of, 0, sizeof oc_nodes_of);
}

static inline long oc_calls(void) {
    long n = 0;
    for (size_t k = 0; k < OC_SLOTS; k++) n += oc_calls_of[k];
    return n;
}

static inline long oc_nodes(void) {
    long n = 0;
    for (size_t k = 0; k < OC_SLOTS; k++) n += oc_nodes_of[k];
    return n;
}

/* calls of the op named `name` since the last reset (-1: no such counted op) */
static inline long oc_count(const char *name) {
    for (size_t k = 0; k < OC_SLOTS; k++)
        if (oc_name_of[k] && strcmp(oc_name_of[k], name) == 0) return oc_calls_of[k];
    return -1;
}

/* "op xN" for every op called since the last reset, in table order */
static inline void oc_print(FILE *f) {
    for (size_t k = 0; k < OC_SLOTS; k++)
        if (oc_calls_of[k])
            fprintf(f, " %s x%ld", oc_name_of[k] ? oc_name_of[k] : "?", oc_calls_of[k]);
    fprintf(f, "\n");
}

#endif
