/* The benchmarks' update: the two models ("cartpole", "seed"), N = N' = K = 32, and a
 * replay of random transitions to sample from (bench_update, bench_timeline). */
#ifndef DQN_BENCH_MODEL_H
#define DQN_BENCH_MODEL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cuda_tunables.h"
#include "core/error.h"
#include "dqn_philox.h"
#include "model/model.h"
#include "replay/replay.h"

enum { BENCH_REPLAY_CAP = 4096 };

static dqn_arch bench_arch(const char *model) {
    dqn_arch a;
    memset(&a, 0, sizeof a);
    int seed_model = strcmp(model, "seed") == 0;
    static const int br_cart[] = {2}, br_seed[] = {3, 5, 5};
    a.obs_dim = seed_model ? 64 : 4;
    a.d = seed_model ? 256 : 64;
    a.grn_blocks = seed_model ? 2 : 1;
    a.n_cos = 64;
    a.bottleneck = seed_model ? 128 : 0;
    a.head_hidden = seed_model ? 256 : 64;
    dqn_branches_init(&a.br, seed_model ? 3 : 1, seed_model ? br_seed : br_cart);
    return a;
}

static dqn_update_cfg bench_ucfg(int B, dqn_health_mode health) {
    dqn_update_cfg u;
    memset(&u, 0, sizeof u);
    u.B = B; u.N = u.Nt = u.K = 32; u.mode = DQN_TARGET_MEAN; u.kappa = 1;
    u.lr = 1e-4f; u.beta1 = 0.9f; u.beta2 = 0.999f; u.adam_eps = 1e-8f; u.grad_clip = 10;
    u.head_grad_clip = 5; u.target_period = 1000; u.seed = 1;
    u.health = health; u.guard_scale = 1e6f; u.guard_floor = 1e3f;
    return u;
}

/* A replay on the backend, full of random transitions (the sampled batch is all that matters). */
static dqn_status bench_replay(dqn_replay *r, dqn_backend *be, const dqn_arch *a) {
    const int cap = BENCH_REPLAY_CAP, obs = a->obs_dim, D = a->br.D;
    float *o = malloc((size_t)cap * obs * 4), *no = malloc((size_t)cap * obs * 4);
    float *R = malloc((size_t)cap * 4), *dc = malloc((size_t)cap * 4);
    int32_t *ac = malloc((size_t)cap * D * 4);
    dqn_status s = o && no && R && dc && ac ? DQN_OK : DQN_ERR(DQN_ERR_NOMEM, "bench replay");
    for (size_t j = 0; s == DQN_OK && j < (size_t)cap * obs; j++) {
        o[j] = 2 * dqn_philox_uniform(5, 1, j) - 1;
        no[j] = 2 * dqn_philox_uniform(5, 2, j) - 1;
    }
    for (int j = 0; s == DQN_OK && j < cap; j++) {
        R[j] = dqn_philox_uniform(5, 3, (uint64_t)j);
        dc[j] = 0.97f;
        for (int b = 0; b < D; b++)
            ac[j * D + b] =
                (int32_t)dqn_philox_below(5, 4, (uint64_t)(j * D + b), (uint32_t)a->br.n[b]);
    }
    if (s == DQN_OK) s = dqn_replay_create(r, be, cap, obs, D);
    if (s == DQN_OK && (s = dqn_replay_add(r, o, ac, R, dc, no, cap)) != DQN_OK)
        dqn_replay_destroy(r);
    free(o); free(no); free(R); free(dc); free(ac);
    return s;
}

/* The update on be with issue 3's model (weights from seed 1) and the full replay it samples. */
typedef struct {
    dqn_model m;
    dqn_replay r;
    dqn_replay_view v;
} bench_update_run;

/* T > 0: T taus (N = N' = K) in place of bench_ucfg's */
static dqn_status bench_run_make(bench_update_run *b, dqn_backend *be, const dqn_arch *a, int B,
                                 int T, dqn_health_mode health) {
    dqn_update_cfg u = bench_ucfg(B, health);
    if (T > 0) u.N = u.Nt = u.K = T;
    dqn_status s = dqn_model_create(&b->m, be, a, &u);
    if (s != DQN_OK) return s;
    if ((s = dqn_model_init_weights(&b->m, 1)) != DQN_OK || (s = bench_replay(&b->r, be, a))) {
        dqn_model_destroy(&b->m);
        return s;
    }
    dqn_replay_view_of(&b->r, &b->v);
    return DQN_OK;
}

static void bench_run_free(bench_update_run *b) {
    dqn_replay_destroy(&b->r);
    dqn_model_destroy(&b->m);
}

/* The CUDA backend's thresholds (backends/cuda_tunables.h) a run moves: "own_gemm_macs=X",
 * "iqn_embed_elems=X", "trunk_rows=X" or "side_priority=0|1" as an argument; *set becomes 1.
 * 0: not such an argument. */
static inline int bench_tune_parse(const char *arg, dqn_cuda_tunables *t, int *set) {
    static const char *const keys[] = {"own_gemm_macs=", "iqn_embed_elems=", "trunk_rows=",
                                       "side_priority="};
    for (int k = 0; k < 4; k++) {
        size_t n = strlen(keys[k]);
        if (strncmp(arg, keys[k], n) != 0) continue;
        char *end = NULL;
        double v = strtod(arg + n, &end);
        if (end == arg + n || *end || v < 0) return 0;
        if (k == 0) t->own_gemm_macs = v;
        else if (k == 1) t->iqn_embed_elems = v;
        else if (k == 2) t->trunk_rows = (int)v;
        else t->side_priority = v != 0;
        *set = 1;
        return 1;
    }
    return 0;
}

/* what a result line adds about the backend: its thresholds where the run moved them */
static inline void bench_tune_print(char *buf, size_t n, const dqn_cuda_tunables *t, int set) {
    if (!n) return;
    buf[0] = 0;
    if (set)
        snprintf(buf, n,
                 "tune own_gemm_macs=%.0f iqn_embed_elems=%.0f trunk_rows=%d side_priority=%d",
                 t->own_gemm_macs, t->iqn_embed_elems, t->trunk_rows, t->side_priority);
}

#endif
