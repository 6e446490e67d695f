/* The ranks of a data-parallel learner as threads of one process, for the tests and the
 * benchmark: each rank a backend, a model with the run's initial weights, its own replay shard
 * and its own draws (dqn_rank_seed). On CUDA rank r runs on device r joined over NCCL; on the CPU
 * the ranks share an in-process all-reduce with NCCL's contract (the mean, the same result on
 * every rank), so the data-parallel update is checked in CI without a GPU. Each rank runs
 * spec->body on its own thread (a CUDA backend is used from the thread that made it). */
#ifndef DQN_TEST_DP_HARNESS_H
#define DQN_TEST_DP_HARNESS_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "core/error.h"
#include "dqn_philox.h"
#include "model/model.h"
#include "replay/replay.h"

#define DP_MAX_WORLD 8

typedef struct dp_rank dp_rank;

typedef struct {
    int cuda;                 /* CUDA + NCCL, else CPU with the in-process all-reduce */
    int plain;                /* no communicator at all: the single-rank baseline */
    int world;
    dqn_arch arch;
    dqn_update_cfg ucfg;      /* B per rank; seed is the run's */
    int replay_rows;
    dqn_status (*body)(dp_rank *r);
    void *arg;
} dp_spec;

struct dp_rank {
    const dp_spec *spec;
    int rank;
    dqn_backend *be;
    dqn_model m;
    dqn_replay replay;
    dqn_replay_view view;
    dqn_status status;
    char error[1024];
};

/* The optimizer and loss settings every spec shares. */
static inline void dp_adam(dqn_update_cfg *u, float lr, int target_period, uint64_t seed) {
    u->mode = DQN_TARGET_MEAN;
    u->kappa = 1;
    u->lr = lr;
    u->beta1 = 0.9f;
    u->beta2 = 0.999f;
    u->adam_eps = 1e-8f;
    u->grad_clip = 10;
    u->target_period = target_period;
    u->seed = seed;
}

/* The seed model of the benchmarks (obs 64, d 256, 2 GRN blocks, n_cos 64, bottleneck 128, head
 * hidden 256, branches 3,5,5, N = N' = K = 32) on CUDA ranks, B samples per rank, no head clip. */
static inline dp_spec dp_seed_spec(int world, int B) {
    static const int br[] = {3, 5, 5};
    dp_spec s;
    memset(&s, 0, sizeof s);
    s.cuda = 1;
    s.world = world;
    s.arch.obs_dim = 64;
    s.arch.d = 256;
    s.arch.grn_blocks = 2;
    s.arch.n_cos = 64;
    s.arch.bottleneck = 128;
    s.arch.head_hidden = 256;
    dqn_branches_init(&s.arch.br, 3, br);
    s.ucfg.B = B;
    s.ucfg.N = s.ucfg.Nt = s.ucfg.K = 32;
    dp_adam(&s.ucfg, 1e-4f, 100, 3);
    s.replay_rows = 8192;
    return s;
}

/* ---- the CPU ranks' all-reduce: every rank hands in its buffer, rank 0 writes the mean (each
 * term premultiplied by 1/world, as NCCL's ncclAvg on floats) into all of them ---- */
static struct {
    pthread_barrier_t bar;
    int world, mismatch;
    const dqn_backend *be[DP_MAX_WORLD];
    float *x[DP_MAX_WORLD];
    size_t n[DP_MAX_WORLD];
    dqn_ops ops;
} dp_cpu;

static inline int dp_cpu_world(const dqn_backend *be) {
    (void)be;
    return dp_cpu.world;
}

/* The calling thread's rank: its own slot of dp_cpu.be is the only one it reads (the others are
 * written by their ranks' threads as they set up). */
static _Thread_local int dp_cpu_rank = -1;

static inline dqn_status dp_cpu_allreduce(dqn_backend *be, float *x, size_t n) {
    int r = dp_cpu_rank;
    if (r < 0 || dp_cpu.be[r] != be)
        return DQN_ERR(DQN_ERR_ARG, "all-reduce on a backend of no rank");
    dp_cpu.x[r] = x;
    dp_cpu.n[r] = n;
    pthread_barrier_wait(&dp_cpu.bar);
    if (r == 0) {
        float w = 1.0f / (float)dp_cpu.world;
        for (int k = 1; k < dp_cpu.world; k++) dp_cpu.mismatch |= dp_cpu.n[k] != n;
        for (size_t i = 0; i < n && !dp_cpu.mismatch; i++) {
            float s = 0;
            for (int k = 0; k < dp_cpu.world; k++) s += w * dp_cpu.x[k][i];
            for (int k = 0; k < dp_cpu.world; k++) dp_cpu.x[k][i] = s;
        }
    }
    pthread_barrier_wait(&dp_cpu.bar);
    return dp_cpu.mismatch ? DQN_ERR(DQN_ERR_ARG, "ranks all-reduced different sizes") : DQN_OK;
}

static pthread_barrier_t dp_all;   /* dp_barrier: every rank's thread */
static dqn_comm_id dp_id;

static inline void dp_barrier(void) { pthread_barrier_wait(&dp_all); }

/* A shard of random transitions, different on every rank. */
static inline dqn_status dp_fill_replay(dp_rank *r) {
    const dp_spec *s = r->spec;
    int n = s->replay_rows, obs = s->arch.obs_dim, D = s->arch.br.D;
    uint64_t key = dqn_rank_seed(s->ucfg.seed + 1000, (uint32_t)r->rank);
    float *o = malloc((size_t)n * obs * 4), *no = malloc((size_t)n * obs * 4);
    float *R = malloc((size_t)n * 4), *dc = malloc((size_t)n * 4);
    int32_t *a = malloc((size_t)n * D * 4);
    dqn_status st = o && no && R && dc && a ? DQN_OK : DQN_ERR_NOMEM;
    for (size_t j = 0; st == DQN_OK && j < (size_t)n * obs; j++) {
        o[j] = 2 * dqn_philox_uniform(key, 101, j) - 1;
        no[j] = 2 * dqn_philox_uniform(key, 102, j) - 1;
    }
    for (int j = 0; st == DQN_OK && j < n; j++) {
        R[j] = 2 * dqn_philox_uniform(key, 103, (uint64_t)j) - 0.5f;
        dc[j] = j % 7 == 0 ? 0.0f : 0.97f;
        for (int b = 0; b < D; b++)
            a[j * D + b] = (int32_t)dqn_philox_below(key, 104, (uint64_t)(j * D + b),
                                                     (uint32_t)s->arch.br.n[b]);
    }
    if (st == DQN_OK) st = dqn_replay_create(&r->replay, r->be, n, obs, D);
    if (st == DQN_OK) st = dqn_replay_add(&r->replay, o, a, R, dc, no, n);
    if (st == DQN_OK) dqn_replay_view_of(&r->replay, &r->view);
    free(o); free(no); free(R); free(dc); free(a);
    return st;
}

static inline dqn_status dp_setup(dp_rank *r) {
    const dp_spec *s = r->spec;
    if (s->cuda) {
        DQN_TRY(dqn_backend_cuda_create(&r->be, r->rank, DQN_MATH_FP32));
        if (!s->plain) {
            dqn_rank_info ri;
            memset(&ri, 0, sizeof ri);
            ri.rank = r->rank;
            ri.world = s->world;
            ri.device = r->rank;
            ri.timeout_s = 300;
            ri.id = dp_id;
            DQN_TRY(r->be->ops->comm_init(r->be, &ri));
        }
    } else {
        DQN_TRY(dqn_backend_cpu_create(&r->be));
        if (!s->plain) {
            dp_cpu.be[r->rank] = r->be;
            dp_cpu_rank = r->rank;
            r->be->ops = &dp_cpu.ops;
        }
    }
    dqn_update_cfg u = s->ucfg;
    u.seed = dqn_rank_seed(s->ucfg.seed, (uint32_t)r->rank);
    DQN_TRY(dqn_model_create(&r->m, r->be, &s->arch, &u));
    DQN_TRY(dqn_model_init_weights(&r->m, s->ucfg.seed));
    return dp_fill_replay(r);
}

static inline void *dp_thread(void *p) {
    dp_rank *r = p;
    r->status = dp_setup(r);
    if (r->status == DQN_OK) r->status = r->spec->body(r);
    if (r->status != DQN_OK)
        snprintf(r->error, sizeof r->error, "rank %d: %s: %s", r->rank,
                 dqn_status_str(r->status), dqn_last_error());
    if (r->be) {
        if (r->replay.be) dqn_replay_destroy(&r->replay);
        if (r->m.be) dqn_model_destroy(&r->m);
        r->be->ops->destroy(r->be);
        r->be = NULL;
    }
    return NULL;
}

/* Runs spec->world ranks to the end of their bodies; the first failure's status (its message in
 * ranks[r].error). */
static inline dqn_status dp_run(const dp_spec *s, dp_rank *ranks) {
    if (s->world < 1 || s->world > DP_MAX_WORLD) return DQN_ERR_ARG;
    if (s->cuda && !s->plain) DQN_TRY(dqn_comm_id_create(&dp_id));
    if (!s->cuda) {
        dqn_backend *tmp;
        DQN_TRY(dqn_backend_cpu_create(&tmp));
        dp_cpu.ops = *tmp->ops;
        tmp->ops->destroy(tmp);
        dp_cpu.ops.comm_world = dp_cpu_world;
        dp_cpu.ops.allreduce_mean = dp_cpu_allreduce;
        dp_cpu.world = s->world;
        dp_cpu.mismatch = 0;
        pthread_barrier_init(&dp_cpu.bar, NULL, (unsigned)s->world);
        dqn_cpu_set_threads(1);
    }
    pthread_barrier_init(&dp_all, NULL, (unsigned)s->world);
    pthread_t th[DP_MAX_WORLD];
    for (int r = 0; r < s->world; r++) {
        memset(&ranks[r], 0, sizeof ranks[r]);
        ranks[r].spec = s;
        ranks[r].rank = r;
        pthread_create(&th[r], NULL, dp_thread, &ranks[r]);
    }
    dqn_status st = DQN_OK;
    for (int r = 0; r < s->world; r++) {
        pthread_join(th[r], NULL);
        if (st == DQN_OK) st = ranks[r].status;
    }
    pthread_barrier_destroy(&dp_all);
    if (!s->cuda) pthread_barrier_destroy(&dp_cpu.bar);
    return st;
}

#endif
