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
 * oc_nodes(), oc_count("linear_bwd") or oc_print(stdout). The wrappers are generated from
 * backends/ops.def (every op of kind OP); an op whose nodes or FLOPs differ from one node and no
 * GEMM gets a cost hook here. */
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
static long oc_call_nodes;   /* the nodes of the call being counted (a cost hook may change it) */

#define OC_SLOT(op) (offsetof(dqn_ops, op) / sizeof(void (*)(void)))
#define OC_GEMM(M, K, N, count) (oc_flops += 2.0 * (double)(M) * (double)(K) * (double)(N) * (count))

/* ---- cost hooks: an op's call is one node and no GEMM FLOPs unless its hook here (same
 * arguments as the op) says otherwise; an after hook runs on the op's outputs when it succeeded.
 * Their return values are ignored. ---- */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
static dqn_status oc_cost_linear_fwd(dqn_backend *be, const float *X, const float *W,
                                     const float *b, float *Y, int M, int K, int N) {
    OC_GEMM(M, K, N, 1);
    return DQN_OK;
}
static dqn_status oc_cost_linear_act_fwd(dqn_backend *be, const float *X, const float *W,
                                         const float *b, float *Y, int M, int K, int N,
                                         dqn_act act) {
    OC_GEMM(M, K, N, 1);
    return DQN_OK;
}
/* the dX GEMM when dX is wanted, the dW GEMM, and a column-sum kernel for db past the CUDA
 * backend's BGRADB row limit */
static dqn_status oc_cost_linear_bwd(dqn_backend *be, const float *X, const float *W,
                                     const float *dY, float *dX, float *dW, float *db, int M, int K,
                                     int N) {
    OC_GEMM(M, K, N, (dX != NULL) + (dW != NULL));
    oc_call_nodes = (dX != NULL) + (dW != NULL) + (db != NULL && M > OC_BGRADB_MAX_ROWS);
    return DQN_OK;
}
/* the dx kernel and the dgamma/dbeta column sum */
static dqn_status oc_cost_layernorm_bwd(dqn_backend *be, const float *x, const float *gamma,
                                        const float *mean, const float *rstd, const float *dy,
                                        float *dx, float *dgamma, float *dbeta, int M, int d) {
    oc_call_nodes = 2;
    return DQN_OK;
}
/* the heads' custom kernels do the work of GEMMs: count it (R x H x (1 + A), twice backward) */
static dqn_status oc_cost_heads_fwd(dqn_backend *be, const float *hva, const float *Wv2,
                                    const float *bv2, const float *Wa2, const float *ba2, float *V,
                                    float *Adv, float *Z, int R, int H, const dqn_branches *br) {
    OC_GEMM(R, H, br->A + 1, 1);
    return DQN_OK;
}
static dqn_status oc_cost_heads_bwd(dqn_backend *be, const float *hva, const float *Wv2,
                                    const float *Wa2, const float *dV, const float *dAdv,
                                    const float *norms, float max_norm, float *dhva, float *dbva,
                                    float *dWv2, float *dbv2, float *dWa2, float *dba2, int R,
                                    int H, int A) {
    OC_GEMM(R, H, A + 1, 2);
    return DQN_OK;
}
/* one node: CUDA's kernel where the model is small (cuda_trunk.cu), else 1 + 3 L */
static dqn_status oc_cost_trunk_fwd(dqn_backend *be, const dqn_trunk_io *t) {
    OC_GEMM(t->M, t->obs, t->d, t->W_in != NULL);
    OC_GEMM(t->M, t->d, 3 * t->d, t->L);
    return DQN_OK;
}
static dqn_status oc_cost_iqn_embed_fwd(dqn_backend *be, const float *tau, const float *W,
                                        const float *b, const float *h, float *C, float *phi,
                                        float *z, float *cat, int B, int T, int n_cos, int d,
                                        int keep, const void *hplan) {
    OC_GEMM(B * T, n_cos, d, 1);
    return DQN_OK;
}
/* iqn_embed_fwd may leave C and phi unwritten past their first keep rows (CUDA's kernel does):
 * here they become NaN, so that an update through the counter shows whether anything reads them */
static dqn_status oc_after_iqn_embed_fwd(dqn_backend *be, const float *tau, const float *W,
                                         const float *b, const float *h, float *C, float *phi,
                                         float *z, float *cat, int B, int T, int n_cos, int d,
                                         int keep, const void *hplan) {
    const size_t R = (size_t)B * (size_t)T;
    for (size_t i = (size_t)keep * (size_t)n_cos; i < R * (size_t)n_cos; i++) C[i] = NAN;
    for (size_t i = (size_t)keep * (size_t)d; i < R * (size_t)d; i++) phi[i] = NAN;
    return DQN_OK;
}
static dqn_status oc_cost_linear_ld_fwd(dqn_backend *be, const float *X, const float *W, int ldw,
                                        const float *b, float *Y, int M, int K, int N,
                                        dqn_act act) {
    OC_GEMM(M, K, N, 1);
    return DQN_OK;
}
/* as linear_bwd, and db's column sum also when there is no dW GEMM to carry it */
static dqn_status oc_cost_linear_ld_bwd(dqn_backend *be, const float *X, const float *W, int ldw,
                                        const float *dY, float *dX, int acc_dx, float *dW,
                                        float *db, int M, int K, int N) {
    OC_GEMM(M, K, N, (dX != NULL) + (dW != NULL));
    oc_call_nodes = (dX != NULL) + (dW != NULL) +
                    (db != NULL && (dW == NULL || M > OC_BGRADB_MAX_ROWS));
    return DQN_OK;
}
#pragma GCC diagnostic pop

static const dqn_ops oc_cost = {
    .linear_fwd = oc_cost_linear_fwd,
    .linear_act_fwd = oc_cost_linear_act_fwd,
    .linear_bwd = oc_cost_linear_bwd,
    .layernorm_bwd = oc_cost_layernorm_bwd,
    .heads_fwd = oc_cost_heads_fwd,
    .heads_bwd = oc_cost_heads_bwd,
    .trunk_fwd = oc_cost_trunk_fwd,
    .iqn_embed_fwd = oc_cost_iqn_embed_fwd,
    .linear_ld_fwd = oc_cost_linear_ld_fwd,
    .linear_ld_bwd = oc_cost_linear_ld_bwd,
};
static const dqn_ops oc_after = {.iqn_embed_fwd = oc_after_iqn_embed_fwd};

/* ---- a wrapper for every compute op of backends/ops.def (kind OP): it counts the call and its
 * nodes, then forwards its arguments to the CPU backend ---- */
#define OC_WRAP_OP(op, params, args)                                    \
    static dqn_status oc_##op params {                                  \
        (void)be;                                                       \
        oc_call_nodes = 1;                                              \
        if (oc_cost.op) oc_cost.op args;                                \
        oc_calls_of[OC_SLOT(op)]++;                                     \
        oc_nodes_of[OC_SLOT(op)] += oc_call_nodes;                      \
        if (oc_dry) return DQN_OK;                                      \
        dqn_status s_ = oc_inner->ops->op(oc_inner, OC_REST args);      \
        if (s_ == DQN_OK && oc_after.op) oc_after.op args;              \
        return s_;                                                      \
    }
#define OC_WRAP_CTL(op, params, args)
#define OC_WRAP_OPT(op, params, args)
/* the arguments after the first (be) */
#define OC_REST(be, ...) __VA_ARGS__
#define DQN_OP(name, ret, kind, params, args, doc) OC_WRAP_##kind(name, params, args)
#include "backends/ops.def"
#undef DQN_OP

/* 1 for a compute op's slot (they are counted), 0 for the memory, host-staging, set-up and fence
 * entries and the optional ones */
static inline int oc_is_compute(size_t slot) {
#define OC_KIND_OP 1
#define OC_KIND_CTL 0
#define OC_KIND_OPT 0
#define DQN_OP(name, ret, kind, params, args, doc)                      \
    if (slot == OC_SLOT(name)) return OC_KIND_##kind;
#include "backends/ops.def"
#undef DQN_OP
    return 0;
}

static inline void oc_destroy(dqn_backend *be) {
    (void)be;
    if (oc_inner) oc_inner->ops->destroy(oc_inner);
    oc_inner = NULL;
}

/* The counting backend over a fresh CPU backend (one per process). */
static inline dqn_status oc_create(dqn_backend **out) {
    dqn_status s = dqn_backend_cpu_create(&oc_inner);
    if (s != DQN_OK) return s;
    oc_ops = *oc_inner->ops;
    oc_ops.name = "cpu-counting";
    oc_ops.destroy = oc_destroy;
#define OC_SET_OP(op) (oc_ops.op = oc_##op, oc_name_of[OC_SLOT(op)] = #op);
#define OC_SET_CTL(op)
#define OC_SET_OPT(op)
#define DQN_OP(name, ret, kind, params, args, doc) OC_SET_##kind(name)
#include "backends/ops.def"
#undef DQN_OP
    oc_be = *oc_inner;
    oc_be.ops = &oc_ops;
    *out = &oc_be;
    return DQN_OK;
}

/* Compute ops of the CPU table that have no wrapper (their calls go uncounted): 0 by
 * construction, every compute op of ops.def being wrapped. */
static inline int oc_unwrapped(void) {
    typedef void (*fn)(void);
    fn mine[OC_SLOTS], theirs[OC_SLOTS];
    memcpy(mine, &oc_ops, sizeof mine);
    memcpy(theirs, oc_inner->ops, sizeof theirs);
    int n = 0;
    for (size_t k = 1; k < OC_SLOTS; k++)   /* slot 0 is the name */
        if (theirs[k] && mine[k] == theirs[k] && oc_is_compute(k)) n++;
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
