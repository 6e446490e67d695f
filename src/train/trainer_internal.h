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

/* The env loop in backend memory (dloop.c): a built-in env's slots, their n-step
 * windows, the acting counters and the episodes' record live beside the replay ring, and one
 * acting step (forward, argmax, explore, env_step, replay_push, episode_record) is one captured
 * graph on a backend with graphs. The host's copies (the vector, the assembler, the counters)
 * are brought up to date at the end of every dqn_trainer_run_until, so that stats, saves and
 * the host loop's functions read them as the host loop leaves them. */
typedef struct {
    int on;                /* this trainer's env steps in backend memory */
    int live;              /* the backend's state is the loop's (else the host's copies are) */
    int size_ok;           /* the replay holds batch_size rows (its size never falls) */
    int stepped;           /* an acting step ran since going live: the actor's Q is current */
    int64_t live_steps;    /* env steps at going live */
    int live_size;         /* the replay's size then */
    dqn_env_io io;
    dqn_market_dev market; /* the market env's tables in backend memory (io.market) */
    dqn_nstep_win w;
    dqn_ring ring;
    dqn_episodes rec;
    dqn_explore_io x;
    uint64_t *ctr;         /* backend [2]: explore's acting steps and env steps */
    float *prev;           /* backend [n, obs]: the observations the step started from */
    void *graph;           /* the captured acting step (backends with graphs) */
} dqn_dloop;

/* The slot table as the public API shows it. */
struct dqn_health_layout {
    dqn_health_table tab;
    dqn_health_slot_info info[DQN_HEALTH_MAX_SLOTS];
    const char *isv[DQN_HEALTH_MAX_ISV];
};
void dqn_health_layout_fill(dqn_health_layout *h, const dqn_health_table *tab);
/* A block read back from the backend, as a report (stats and isv are the report's storage). */
void dqn_health_report_fill(const dqn_health_layout *h, const dqn_health_block *blk,
                            dqn_health_slot_stats *stats, float *isv, int64_t env_steps,
                            dqn_health_report *out);

/* The trainer's side of the health subsystem: the asynchronous read of the block. */
typedef struct {
    dqn_health_layout layout;
    void *fence;
    dqn_health_block *pin[2];        /* pinned host copies, alternating */
    int64_t pin_steps[2];
    int next;                        /* the buffer the next copy goes to */
    int pending;                     /* a copy is in flight in pin[next ^ 1] */
    int snap_lost;                   /* resumed after the first event: its snapshot is gone */
    dqn_health_slot_stats stats[DQN_HEALTH_MAX_SLOTS];
    float isv[DQN_HEALTH_MAX_ISV];
} dqn_trainer_health;

dqn_status dqn_trainer_health_init(dqn_trainer *t);
void dqn_trainer_health_free(dqn_trainer *t);

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
    dqn_actor pred;           /* greedy midpoint actions for dqn_trainer_predict (made on use) */
    dqn_trainer_health health;
    dqn_dloop dl;
    int32_t *actions;         /* host [n_envs, D] */
    float *q_host;            /* host [n_envs, A] */
    float *prev_obs;          /* host [n_envs, obs] */
    double *ep_ret;           /* host [n_envs]: return of each slot's episode so far */
    int64_t next_refresh;     /* env steps at which observe next reads the loss back */
    /* counters (all saved in checkpoints) */
    int64_t env_steps, updates, episodes, since_update, skipped;
    uint64_t act_steps;
    double recent[DQN_RECENT_EPISODES];
    int n_recent, recent_pos;
    double last_loss, mean_q, grad_norm;
    double eval_best;         /* best periodic evaluation mean (NAN: none yet) */
    int64_t eval_best_step;   /* its env step (-1: none) */
    /* optional loss log (tests of resume) */
    double *loss_log;
    size_t loss_cap, *loss_count;
    /* a rank of a data-parallel run (ranks.c): backend scratch of dqn_trainer_any_rank */
    float *rank_flag;
};

dqn_status dqn_actor_create(dqn_actor *a, dqn_backend *be, const dqn_layout *L, int n, int K);
void dqn_actor_destroy(dqn_actor *a, dqn_backend *be);
/* Greedy actions and Q for obs (host [n, obs]) with taus drawn from (seed, TAU_ACT, step),
 * or the fixed midpoints (k + 0.5) / K when midpoint != 0. */
dqn_status dqn_actor_greedy(dqn_actor *a, dqn_backend *be, const dqn_layout *L, const float *P,
                            const float *obs_host, int n, uint64_t seed, int midpoint,
                            int32_t *act_host, float *q_host);

/* dqn_trainer_create, or with r != NULL the trainer of one rank (its backend from
 * dqn_rank_backend_open); the config's ranks key is not checked. */
dqn_status dqn_trainer_create_with(const dqn_config *c, const dqn_rank_info *r, dqn_trainer **out);
/* The same on the env `user` (NULL: the config's own; env = external: none), which the trainer
 * then owns (closed with it, also on failure). */
dqn_status dqn_trainer_make(const dqn_config *c, const dqn_rank_info *r, const dqn_env *user,
                            dqn_trainer **out);
/* The config restating a user env's shape (env = external, env_id, obs_dim, branches). */
dqn_status dqn_config_for_env(const dqn_config *c, const dqn_env *env, dqn_config *out);
/* The CUDA backend of rank r on its device, joined to the other ranks. */
dqn_status dqn_rank_backend_open(const dqn_config *c, const dqn_rank_info *r, dqn_backend **out);

/* The device env loop: chosen and made at creation (nothing for the host loop), freed, run to
 * `target` env steps, and its state copied back into the host's structures. */
dqn_status dqn_dloop_create(dqn_trainer *t);
void dqn_dloop_destroy(dqn_trainer *t);
dqn_status dqn_dloop_run_until(dqn_trainer *t, int64_t target);
dqn_status dqn_dloop_download(dqn_trainer *t);
/* Shared by both loops (trainer.c): one update and its loss's bookkeeping; the loss and the
 * gradient norm read back. */
dqn_status dqn_trainer_do_update(dqn_trainer *t);
dqn_status dqn_trainer_refresh_stats(dqn_trainer *t);

/* Open a backend by the config's device key ("cpu", "cuda", "auto"). */
dqn_status dqn_backend_open(const char *device, const char *math, int threads, dqn_backend **out);
/* The model's update settings from a config. */
void dqn_update_cfg_of(const dqn_config *c, dqn_update_cfg *u);
/* Architecture of a config on an env (branches from the config or the env). */
dqn_status dqn_arch_from_config(const dqn_config *c, const dqn_env *env, dqn_arch *a);

#endif
