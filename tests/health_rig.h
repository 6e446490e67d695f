/* A model with a replay of random transitions on one backend, in a health mode, with faults:
 * for the health tests on the CPU and the GPU. Two architectures: "cartpole" (1 GRN block, no
 * bottleneck, one branch) and "seed" (2 GRN blocks, a bottleneck, branches 3,5,5), small. */
#ifndef DQN_TEST_HEALTH_RIG_H
#define DQN_TEST_HEALTH_RIG_H
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "core/error.h"
#include "check.h"
#include "dqn_philox.h"
#include "model/model.h"
#include "replay/replay.h"

/* > 0: passes of at least this many rows split the bottleneck (1: always) */
static int rig_split_rows = 0;

typedef struct {
    dqn_backend *be;
    dqn_model m;
    dqn_replay r;
    dqn_replay_view v;
    int ok;
} rig;

static void rig_arch(dqn_arch *a, int seed_model, int big) {
    static const int br_cart[] = {2}, br_seed[] = {3, 5, 5};
    memset(a, 0, sizeof *a);
    a->obs_dim = seed_model ? 64 : 4;
    a->d = big ? (seed_model ? 256 : 64) : 16;
    a->grn_blocks = seed_model ? 2 : 1;
    a->n_cos = big ? 64 : 8;
    a->bottleneck = seed_model ? (big ? 128 : 8) : 0;
    a->head_hidden = big ? (seed_model ? 256 : 64) : 16;
    dqn_branches_init(&a->br, seed_model ? 3 : 1, seed_model ? br_seed : br_cart);
}

/* B transitions per update, N = N' = K = T taus; lr high enough that the weights move. */
static dqn_status rig_make_on(rig *g, dqn_backend *be, int seed_model, int big, int B, int T,
                              dqn_health_mode mode, const char *fault) {
    memset(g, 0, sizeof *g);
    g->be = be;
    dqn_arch a;
    rig_arch(&a, seed_model, big);
    dqn_update_cfg u;
    memset(&u, 0, sizeof u);
    u.B = B; u.N = u.Nt = u.K = T; u.mode = DQN_TARGET_MEAN; u.kappa = 1;
    u.lr = 1e-3f; u.beta1 = 0.9f; u.beta2 = 0.999f; u.adam_eps = 1e-8f; u.grad_clip = 10;
    u.head_grad_clip = 5; u.target_period = 7; u.seed = 3;
    u.health = mode; u.guard_scale = 1e6f; u.guard_floor = 1e3f; u.fault = fault;
    u.bn_split_rows = rig_split_rows;
    DQN_TRY(dqn_model_create(&g->m, be, &a, &u));
    DQN_TRY(dqn_model_init_weights(&g->m, 3));
    int cap = 512, obs = a.obs_dim, D = a.br.D;
    DQN_TRY(dqn_replay_create(&g->r, be, cap, obs, D));
    float *o = malloc((size_t)cap * obs * 4), *no = malloc((size_t)cap * obs * 4);
    float *R = malloc((size_t)cap * 4), *dc = malloc((size_t)cap * 4);
    int32_t *ac = malloc((size_t)cap * D * 4);
    if (!o || !no || !R || !dc || !ac) return DQN_ERR(DQN_ERR_NOMEM, "rig");
    for (size_t j = 0; j < (size_t)cap * obs; j++) {
        o[j] = 2 * dqn_philox_uniform(5, 1, j) - 1;
        no[j] = 2 * dqn_philox_uniform(5, 2, j) - 1;
    }
    for (int j = 0; j < cap; j++) {
        R[j] = 2 * dqn_philox_uniform(5, 3, (uint64_t)j) - 0.5f;
        dc[j] = j % 5 == 0 ? 0.0f : 0.97f;
        for (int b = 0; b < D; b++)
            ac[j * D + b] = (int32_t)dqn_philox_below(5, 4, (uint64_t)(j * D + b), (uint32_t)a.br.n[b]);
    }
    dqn_status s = dqn_replay_add(&g->r, o, ac, R, dc, no, cap);
    free(o); free(no); free(R); free(dc); free(ac);
    DQN_TRY(s);
    dqn_replay_view_of(&g->r, &g->v);
    g->ok = 1;
    return DQN_OK;
}

static void rig_free(rig *g) {
    if (g->be) {
        dqn_replay_destroy(&g->r);
        dqn_model_destroy(&g->m);
    }
    memset(g, 0, sizeof *g);
}

static dqn_status rig_updates(rig *g, int n) {
    for (int k = 0; k < n; k++) DQN_TRY(dqn_model_update(&g->m, &g->v));
    return g->be->ops->sync(g->be);
}

static dqn_status rig_block(rig *g, dqn_health_block *out) {
    return g->be->ops->d2h(g->be, out, g->m.h.blk, sizeof *out);
}

/* host copies of params, target, adam m and v (4 * n_params floats) */
static float *rig_state(rig *g) {
    size_t n = g->m.L.n_params;
    float *h = malloc(4 * n * sizeof *h);
    if (!h) return NULL;
    const dqn_ops *o = g->be->ops;
    o->d2h(g->be, h, g->m.params, n * 4);
    o->d2h(g->be, h + n, g->m.target, n * 4);
    o->d2h(g->be, h + 2 * n, g->m.adam_m, n * 4);
    o->d2h(g->be, h + 3 * n, g->m.adam_v, n * 4);
    return h;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static const char *const kind_name[4] = {"", "nan", "inf", "huge"};

/* The fault runs' architectures: 0 cartpole, 1 seed, 2 seed with the bottleneck split (set for
 * the rigs made after this); the slot table of the variant's rig. Returns the seed_model flag. */
static int rig_fault_variant(int variant, dqn_health_table *tab) {
    int sm = variant > 0;
    rig_split_rows = variant == 2 ? 1 : 0;
    dqn_arch a;
    rig_arch(&a, sm, 0);
    dqn_layout L;
    CHECK_OK(dqn_layout_build(&L, &a));
    CHECK_OK(dqn_health_table_build(tab, &L, 8, 4, 4, variant == 2));
    return sm;
}
#endif
