/* The trainer's state, shared by trainer.c (the loop), actor.c (acting, evaluation) and
 * checkpoint.c (save / load / policy). */
#ifndef DQN_TRAINER_INTERNAL_H
#define DQN_TRAINER_INTERNAL_H
#include "backends/backend.h"
#include "dqn.h"
#include "envs/env.h"
#include "model/model.h"
#include "replay/nstep.h"
#include "replay/replay.h"

#define DQN_RECENT_EPISODES 100

/* Batched greedy forward for acting: obs [n, obs] -> actions [n, D] and Q [n, A]. */
typedef struct {
    int n, K;
    dqn_fwd f;
    float *obs;        /* backend [n, obs] */
    float *tau;        /* backend [n*K] */
    int32_t *act;      /* backend [n, D] */
    float *q;          /* backend [n, A] */
    float *tau_mid;    /* backend [n*K]: the midpoints (k + 0.5) / K, for evaluation */
    uint64_t *step;    /* backend: acting steps so far (keys the taus) */
    /* pinned host staging: one copy in, one copy out per step, no pageable transfers */
    float *obs_pin, *q_pin;
    int32_t *act_pin;
    void *graph;       /* the captured acting step (backends with graphs; random taus, n rows) */
    const float *graph_params;
} dqn_actor;

struct dqn_trainer {
    dqn_config cfg;
    dqn_backend *be;
    dqn_env env;              /* the instance (market: its data and fold) */
    dqn_arch arch;
    dqn_model model;
    dqn_replay replay;
    dqn_nstep nstep;
    dqn_vecenv venv;
    dqn_actor actor;
    int32_t *actions;         /* host [n_envs, D] */
    float *q_host;            /* host [n_envs, A] */
    float *prev_obs;          /* host [n_envs, obs] */
    /* counters (all saved in checkpoints) */
    int64_t env_steps, updates, episodes, since_update, skipped;
    uint64_t act_steps;
    double recent[DQN_RECENT_EPISODES];
    int n_recent, recent_pos;
    double last_loss, mean_q, grad_norm;
    /* optional loss log (tests of resume) */
    double *loss_log;
    size_t loss_cap, *loss_count;
};

dqn_status dqn_actor_create(dqn_actor *a, dqn_backend *be, const dqn_layout *L, int n, int K);
void dqn_actor_destroy(dqn_actor *a, dqn_backend *be);
/* Greedy actions and Q for obs (host [n, obs]) with taus drawn from (seed, TAU_ACT, step),
 * or the fixed midpoints (k + 0.5) / K when midpoint != 0. */
dqn_status dqn_actor_greedy(dqn_actor *a, dqn_backend *be, const dqn_layout *L, const float *P,
                            const float *obs_host, int n, uint64_t seed, int midpoint,
                            int32_t *act_host, float *q_host);

/* Open a backend by the config's device key ("cpu", "cuda", "auto"). */
dqn_status dqn_backend_open(const char *device, const char *math, int threads, dqn_backend **out);
/* Architecture of a config on an env (branches from the config or the env). */
dqn_status dqn_arch_from_config(const dqn_config *c, const dqn_env *env, dqn_arch *a);

#endif
