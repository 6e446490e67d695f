/* dqn: distributional deep Q-networks (IQN + GRN trunk + dueling + action branching) in C.
 * Public API for embedding: configure, train, act with a trained policy, save and load.
 * Library calls return a dqn_status and never exit; dqn_last_error() explains a failure. */
#ifndef DQN_H
#define DQN_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DQN_VERSION "0.1.0"

typedef enum {
    DQN_OK = 0,
    DQN_ERR_ARG = 1,          /* a bad argument or configuration value */
    DQN_ERR_NOMEM = 2,
    DQN_ERR_IO = 3,           /* a file could not be read or written */
    DQN_ERR_FORMAT = 4,       /* a file is malformed or corrupt */
    DQN_ERR_BACKEND = 5,      /* a CUDA / cuBLAS / BLAS failure */
    DQN_ERR_UNSUPPORTED = 6,  /* asked for something this build or machine lacks */
    DQN_ERR_NUMERIC = 7       /* a non-finite value where none may be */
} dqn_status;

const char *dqn_status_str(dqn_status s);
/* The message of the last failure on this thread ("" if none). */
const char *dqn_last_error(void);
/* For code called by the library (an env): record why it fails; returns s. */
dqn_status dqn_set_error(dqn_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define DQN_CFG_STR 64
#define DQN_CFG_MAX_BRANCHES 16

/* Every field is one row of the config table (src/core/config.c), which gives its key, bounds,
 * default and help; dqn_config_set() is the only validated way in from text. */
typedef struct {
    /* run */
    char env[DQN_CFG_STR];          /* cartpole | acrobot | mountaincar | market | external */
    char env_id[DQN_CFG_STR];       /* external: the env's name (e.g. a Gymnasium id), for records */
    int obs_dim;                    /* external: observation size (built-in envs: 0, their own) */
    int64_t steps;                  /* total env steps */
    uint64_t seed;
    char device[DQN_CFG_STR];       /* cpu | cuda | auto */
    char math[DQN_CFG_STR];         /* fp32 | tf32 */
    char run_dir[256];              /* "" = runs/<env>-<seed>-<time> */
    int num_envs;
    char env_loop[DQN_CFG_STR];     /* auto | host | device: where a built-in env's step runs */
    int log_interval;               /* env steps between metrics rows */
    int eval_episodes;
    int eval_interval;              /* env steps between periodic evaluations, 0 = off */
    int eval_interval_episodes;     /* greedy episodes of each periodic evaluation */
    int checkpoint_interval;        /* env steps between checkpoints, 0 = only at the end */
    int save_replay;                /* include the replay buffer in checkpoints */
    int threads;                    /* BLAS threads on the CPU backend */
    int ranks;                      /* data-parallel processes, one GPU each (docs/multi-gpu.md) */
    /* model */
    int d;                          /* trunk width */
    int grn_blocks;
    int n_cos;
    int bottleneck;                 /* 0 = none */
    int head_hidden;
    char branches[DQN_CFG_STR];     /* "" = the env's own; else comma list, e.g. "3,5,5" */
    int n_tau;                      /* N, online taus */
    int n_tau_target;               /* N', target taus */
    int k_tau;                      /* K, action-selection taus */
    /* loss and optimizer */
    char target_mode[DQN_CFG_STR];  /* mean | independent */
    double kappa;
    double gamma;
    int n_step;
    double lr;
    double adam_eps;
    double weight_decay;
    double grad_clip;               /* global norm, 0 = off */
    double head_grad_clip;          /* L2 norm of d_value / d_adv logits, 0 = off */
    int target_period;              /* hard copy every C updates (used when tau_target = 0) */
    double tau_target;              /* Polyak rate, 0 = hard copies */
    /* replay and schedule */
    int batch_size;
    int buffer_size;
    int learning_starts;            /* env steps before the first update */
    int train_freq;                 /* env steps (summed over envs) per round of updates */
    int updates_per_round;          /* G updates each round */
    double eps_start;
    double eps_end;
    double eps_fraction;            /* fraction of steps over which epsilon decays linearly */
    char replay[DQN_CFG_STR];       /* uniform | prioritized */
    double per_alpha;               /* prioritised: priority = (loss + per_eps)^per_alpha */
    double per_beta;                /* prioritised: importance exponent at the start (to 1) */
    double per_eps;
    /* health */
    char health[DQN_CFG_STR];       /* off | detect | guard */
    double guard_scale;
    double guard_floor;
    char fault[512];                /* "SLOT:UPDATE:nan|inf|huge[,...]": fault injection (tests) */
    /* market (docs/market.md): data, env, walk-forward folds, synthetic generator */
    char data[256];                 /* CSV file; "" = synthetic data */
    char ts_column[DQN_CFG_STR];
    char price_columns[256];        /* one per asset, comma-separated; "" = the other columns */
    char feature_columns[256];      /* comma-separated; "" = none */
    char fill[DQN_CFG_STR];         /* none | ffill | drop */
    int position_levels;            /* odd: short -1 .. flat 0 .. long +1 */
    int window;                     /* rows in an observation */
    int episode_len;
    double cost;                    /* proportional, per unit of capital traded */
    double holding_cost;            /* per period, per unit of gross exposure */
    double reward_scale;
    double periods_per_year;
    int folds;
    char fold_mode[DQN_CFG_STR];    /* rolling | expanding */
    int train_blocks;
    int epochs;
    int fold;                       /* the fold whose training window the env uses */
    int synth_rows;
    int synth_assets;
    int synth_noise_features;
    double synth_signal;
    double synth_corr;
    double synth_vol;
    double synth_drift;
    double synth_switch;
} dqn_config;

void dqn_config_defaults(dqn_config *c);
/* Apply an env preset's tuned defaults (sets env too). */
dqn_status dqn_config_preset(dqn_config *c, const char *env);
/* Parse and validate one key = value; on failure c is unchanged and dqn_last_error() names the
 * key, the value and what is allowed. Keys use '_' or '-' interchangeably. */
dqn_status dqn_config_set(dqn_config *c, const char *key, const char *value);
/* Load a "key = value" file ('#' comments, blank lines); errors name the file and line. */
dqn_status dqn_config_load_file(dqn_config *c, const char *path);
/* Cross-field validation (e.g. batch_size <= buffer_size). */
dqn_status dqn_config_validate(const dqn_config *c);
/* Write every key = value, loadable by dqn_config_load_file. */
dqn_status dqn_config_write(const dqn_config *c, FILE *f);
/* The help table: key, type, allowed range, default, description. */
void dqn_config_help(FILE *f);
/* 1 if key names a config field */
int dqn_config_has_key(const char *key);

/* ---- environments: the C env API ----
 * An env is num_envs slots stepped together. The vector that drives it owns every buffer
 * (struct of arrays, row i = slot i), each slot's private state and each slot's random stream,
 * applies the time limit, and resets a finished slot itself, after keeping its last observation;
 * the built-in envs are values of this same type (dqn_env_builtin). */
#define DQN_MAX_BRANCHES 16

/* A slot's random stream: Philox4x32-10 keyed by (seed, stream), one block per draw. The vector
 * seeds slot i with the run's seed and its own stream id; counter is saved in checkpoints. */
typedef struct {
    uint64_t seed;
    uint32_t stream;
    uint64_t counter;
} dqn_rng;
double dqn_rng_uniform(dqn_rng *r);               /* [0, 1), 53 bits */
uint32_t dqn_rng_below(dqn_rng *r, uint32_t n);   /* [0, n) */

typedef struct dqn_env_api {
    const char *name;
    int obs_dim;                             /* floats in one observation */
    int n_branches;                          /* action dimensions: one index per branch */
    int branch_sizes[DQN_MAX_BRANCHES];      /* choices of each branch, each in [2, 64] */
    int max_steps;                           /* the vector truncates an episode here; 0 = never */
    size_t state_size;                       /* bytes of one slot's state (0 allowed) */
    void *ctx;                               /* the env's own data, handed to every call */
    /* New episodes in the slots i < n with mask[i] != 0 (mask NULL: every slot): slot i's
     * state at state + i * state_size from rng[i], its first observation at obs + i * obs_dim. */
    dqn_status (*reset)(void *ctx, int n, const uint8_t *mask, void *state, dqn_rng *rng,
                        float *obs);
    /* One step of every slot with actions [n, n_branches]: obs [n, obs_dim], reward [n],
     * terminated [n] and truncated [n] (the env's own time limit; may stay 0). No reset here. */
    dqn_status (*step)(void *ctx, int n, const int32_t *actions, void *state, dqn_rng *rng,
                       float *obs, float *reward, uint8_t *terminated, uint8_t *truncated);
    void (*close)(void *ctx);                /* optional: called once when the trainer is done */
} dqn_env_api;

/* A built-in env ("cartpole", "acrobot", "mountaincar") as an env API value. The market env
 * takes its data from a config: dqn_trainer_create makes it. */
dqn_status dqn_env_builtin(const char *name, dqn_env_api *out);

/* ---- trainer ---- */
typedef struct dqn_trainer dqn_trainer;

typedef struct {
    int64_t env_steps;
    int64_t updates;
    int64_t episodes;
    double mean_return;     /* over the last (up to) 100 finished episodes; NAN if none */
    double last_loss;       /* NAN before the first update */
    double mean_q;          /* greedy Q, mean over envs and branches: a running average over
                             * the greedy acting steps (host loop), the last acting step's
                             * (device loop) */
    double grad_norm;
    double epsilon;
    int64_t skipped_updates;
} dqn_train_stats;

/* A trainer on the config's env. With env = external it has no env of its own: the host steps
 * the env and drives the loop with dqn_trainer_act / dqn_trainer_observe (obs_dim and branches
 * give the shape). */
dqn_status dqn_trainer_create(const dqn_config *c, dqn_trainer **out);
/* A trainer on a user env (the config's env, obs_dim and branches are taken from it; env_id is
 * env->name). The trainer calls env->close, if any, when destroyed, also on failure here. */
dqn_status dqn_trainer_create_env(const dqn_config *c, const dqn_env_api *env, dqn_trainer **out);
void dqn_trainer_destroy(dqn_trainer *t);
/* Run env steps until stats.env_steps >= target_env_steps (or the config's steps). With the
 * config's env_loop on the device (a built-in classic env) the steps stay in backend memory and
 * the stats, the env state and what a save writes are brought back when this returns. */
dqn_status dqn_trainer_run_until(dqn_trainer *t, int64_t target_env_steps);
void dqn_trainer_stats(const dqn_trainer *t, dqn_train_stats *out);
const dqn_config *dqn_trainer_config(const dqn_trainer *t);
/* Backend name ("cpu", "cuda") and the GEMM in use ("openblas", "builtin", "cublas"). */
const char *dqn_trainer_backend(const dqn_trainer *t);
/* Where run_until steps the env: "device" (backend memory, the config's env_loop resolved) or
 * "host". */
const char *dqn_trainer_env_loop(const dqn_trainer *t);
/* Checkpoint: versioned header + CRC32; written to path.tmp then renamed. */
dqn_status dqn_trainer_save(const dqn_trainer *t, const char *path);
/* Resume: the config is taken from the checkpoint; the run continues bit-exactly on the CPU. */
dqn_status dqn_trainer_load(const char *path, const char *device, dqn_trainer **out);
/* A checkpoint loaded with another env of the same shape (obs_dim and branch sizes): env NULL
 * gives a host-driven trainer (env = external), else a trainer on env (closed as above). The
 * model, optimizer, replay, counters and streams resume; the envs start fresh episodes. */
dqn_status dqn_trainer_load_env(const char *path, const char *device, const dqn_env_api *env,
                                dqn_trainer **out);

/* ---- the host-driven loop: the host steps num_envs envs, the trainer acts and learns ---- */
/* Actions [num_envs, D] for observations [num_envs, obs_dim]: epsilon-greedy per branch at the
 * schedule's epsilon (steps, eps_*), else greedy on K random taus. */
dqn_status dqn_trainer_act(dqn_trainer *t, const float *obs, int32_t *actions);
/* One step of every env: obs [num_envs, obs_dim] the step started from, its actions, reward,
 * next_obs (what the step returned, before any reset), terminated and truncated [num_envs];
 * valid [num_envs] (NULL = all) leaves out a slot's non-transition (an autoreset step).
 * Truncation bootstraps, termination does not. Then the updates the schedule owes (learning_starts,
 * train_freq, updates_per_round) run before it returns. */
dqn_status dqn_trainer_observe(dqn_trainer *t, const float *obs, const int32_t *actions,
                               const float *reward, const float *next_obs,
                               const uint8_t *terminated, const uint8_t *truncated,
                               const uint8_t *valid);
/* A host-driven trainer's number of envs (its config's num_envs, 1..4096), e.g. after loading a
 * checkpoint for another vector of envs: the n-step windows in flight are dropped. */
dqn_status dqn_trainer_set_num_envs(dqn_trainer *t, int num_envs);
/* n more updates now, off the schedule (DQN_ERR_ARG while the replay holds < batch_size). */
dqn_status dqn_trainer_update(dqn_trainer *t, int n);
/* Greedy actions [n, D] for any n observations (midpoint taus, as evaluation uses). */
dqn_status dqn_trainer_predict(dqn_trainer *t, const float *obs, int n, int32_t *actions);
/* The model's shape: observation size, and branches (sizes written when non-NULL). */
int dqn_trainer_obs_dim(const dqn_trainer *t);
int dqn_trainer_branches(const dqn_trainer *t, int *sizes);

/* Greedy evaluation on fresh episodes (fixed midpoint taus), results per episode optional.
 * DQN_ERR_ARG on a host-driven trainer (it has no env to run). */
dqn_status dqn_trainer_evaluate(dqn_trainer *t, int episodes, uint64_t seed, double *mean,
                                double *std, double *returns_out);
/* Periodic evaluation: eval_interval_episodes greedy episodes (midpoint taus) on eval envs of
 * their own, stepped together, seeded apart from training's streams and from the final
 * evaluation's episodes (training goes on bit-identically). The mean is noted as with
 * dqn_trainer_eval_note; when it beats the best so far and best_path is non-NULL, the trainer is
 * saved there (dqn_trainer_save). DQN_ERR_ARG on a host-driven trainer. */
dqn_status dqn_trainer_eval_periodic(dqn_trainer *t, const char *best_path, double *mean,
                                     double *std, int *improved);
/* Note an evaluation's mean at the current env step: *improved = 1 when it beats the best so
 * far (the first one always does), which becomes the best. The best is part of the trainer's
 * state (checkpoints keep it). A non-finite mean is DQN_ERR_ARG. */
dqn_status dqn_trainer_eval_note(dqn_trainer *t, double mean, int *improved);
/* The best noted mean and its env step; NAN and -1 before the first. */
void dqn_trainer_eval_best(const dqn_trainer *t, double *mean, int64_t *env_steps);
/* Losses of every update so far are appended here when non-NULL (tests of resume use it). */
void dqn_trainer_record_losses(dqn_trainer *t, double *buf, size_t cap, size_t *count);

/* ---- numerical health (SPEC 4; docs/health.md) ---- */
typedef struct {
    const char *name;        /* "phi" */
    const char *stage;       /* sample | forward | target | loss | backward | optimizer */
    const char *buffer;      /* what it holds, with its shape */
    size_t elements;         /* checked per update */
    int guarded;             /* a clamp point in guard mode */
    const char *bound_from;  /* the ISV entry its bound is guard_scale times */
} dqn_health_slot_info;

typedef struct {
    /* the last update of the copy */
    uint32_t nonfinite, nan, guarded;
    const char *event;       /* NULL, "nan", "+inf", "-inf" or "out of range" */
    float max_abs, rms, mean_abs, bound;
    /* since the run started */
    uint64_t nonfinite_total, guarded_total, events_total;
    int64_t first_event_update;   /* -1: none */
    float max_abs_total;
} dqn_health_slot_stats;

typedef struct {
    int slot;                /* -1: no event yet */
    const char *slot_name, *stage, *kind;
    int64_t update;          /* the update counter during it (the first update is 0) */
    float value;             /* the first non-finite value, or the largest |x| out of range */
    float bound;
    uint32_t count;          /* non-finite elements */
    uint64_t index;          /* first non-finite element (UINT64_MAX for out of range) */
} dqn_health_event;

typedef struct {
    int64_t env_steps;       /* env steps when the copy was taken */
    uint64_t updates, skipped, rolled_back, guarded_updates;
    int n_slots, n_isv;
    const dqn_health_slot_stats *slots;   /* [n_slots], in execution order */
    const float *isv;                     /* [n_isv] */
    dqn_health_event event;               /* the run's first event */
} dqn_health_report;

/* The slot table and ISV names of a config's model (works with health off too). */
typedef struct dqn_health_layout dqn_health_layout;
dqn_status dqn_health_layout_create(const dqn_config *c, dqn_health_layout **out);
void dqn_health_layout_destroy(dqn_health_layout *h);
int dqn_health_layout_slots(const dqn_health_layout *h, const dqn_health_slot_info **slots);
int dqn_health_layout_isv(const dqn_health_layout *h, const char *const **names);
/* A trainer's own (NULL with health off); owned by the trainer. */
const dqn_health_layout *dqn_trainer_health_layout(const dqn_trainer *t);

/* The health state: each call starts an asynchronous copy and returns the one the previous call
 * started (so the step never waits); sync = 1 waits for a fresh copy instead. The report's arrays
 * belong to the trainer and stay valid until the next call. DQN_ERR_UNSUPPORTED with health off. */
dqn_status dqn_trainer_health_poll(dqn_trainer *t, int sync, dqn_health_report *out);
/* Write the first event's update (the state it started from, its batch, the config) to path for
 * `dqn health --replay`. DQN_ERR_ARG if there has been no event. */
dqn_status dqn_trainer_health_save_event(dqn_trainer *t, const char *path);

/* Re-run the update saved at path on device ("" = the run's own) in the run's health mode (detect
 * if it was off): the replay's report, the saved event, the replayed model's layout. */
typedef struct dqn_health_replay dqn_health_replay;
dqn_status dqn_health_replay_run(const char *path, const char *device, dqn_health_replay **out);
const dqn_health_report *dqn_health_replay_report(const dqn_health_replay *r);
const dqn_health_event *dqn_health_replay_saved(const dqn_health_replay *r);
const dqn_health_layout *dqn_health_replay_layout(const dqn_health_replay *r);
const dqn_config *dqn_health_replay_config(const dqn_health_replay *r);
void dqn_health_replay_destroy(dqn_health_replay *r);

/* ---- data-parallel training over NCCL (docs/multi-gpu.md) ---- */
#define DQN_COMM_ID_BYTES 128
#define DQN_COMM_ID_HEX (2 * DQN_COMM_ID_BYTES + 1)   /* hex digits and the NUL */
/* The rendezvous of one communicator (an NCCL unique id): the same on every rank. */
typedef struct { unsigned char bytes[DQN_COMM_ID_BYTES]; } dqn_comm_id;
/* One rank of a data-parallel learner. */
typedef struct {
    int rank, world;      /* 0 <= rank < world; world = the config's ranks */
    int device;           /* this rank's CUDA device on its host */
    double timeout_s;     /* a wait on the other ranks longer than this aborts the run; 0 = never */
    dqn_comm_id id;
} dqn_rank_info;

/* CUDA devices visible to this process (0 when built without CUDA or without a driver). */
int dqn_cuda_device_count(void);
/* A fresh id; sets NCCL_NVLS_ENABLE=0 in the environment first. The calling process serves the
 * rendezvous, so it must live until every rank has joined; with NCCL_COMM_ID=host:port set,
 * every process gets the same id instead and rank 0 serves it. */
dqn_status dqn_comm_id_create(dqn_comm_id *id);
void dqn_comm_id_to_hex(const dqn_comm_id *id, char hex[DQN_COMM_ID_HEX]);
/* Exactly 2 * DQN_COMM_ID_BYTES hex digits; the error names `what` (e.g. "DQN_NCCL_ID"). */
dqn_status dqn_comm_id_from_hex(const char *hex, const char *what, dqn_comm_id *id);
/* The id as one hex line, made visible atomically; DQN_ERR_IO if path exists (a stale id). */
dqn_status dqn_comm_id_write_file(const char *path, const dqn_comm_id *id);
/* Wait up to timeout_s (0 = forever) for path to appear, then read it. */
dqn_status dqn_comm_id_read_file(const char *path, double timeout_s, dqn_comm_id *id);

/* A trainer as rank r->rank of r->world (c->ranks must equal r->world): a CUDA backend on
 * r->device joined to the other ranks (this blocks until all have joined), the initial weights
 * of c->seed on every rank, and its own envs, exploration, replay draws and taus (keyed by
 * dqn_rank_seed(c->seed, rank), which dqn_trainer_config reports). Each update averages the
 * gradient over the ranks before the optimizer step, so the weights stay identical. */
dqn_status dqn_trainer_create_rank(const dqn_config *c, const dqn_rank_info *r, dqn_trainer **out);
/* A collective (every rank calls it at the same point): *any = 1 if local != 0 on some rank.
 * On a trainer from dqn_trainer_create, *any = (local != 0). */
dqn_status dqn_trainer_any_rank(dqn_trainer *t, int local, int *any);

/* ---- inference-only policy ---- */
typedef struct dqn_policy dqn_policy;
dqn_status dqn_policy_load(const char *checkpoint, dqn_policy **out);
void dqn_policy_destroy(dqn_policy *p);
int dqn_policy_obs_dim(const dqn_policy *p);
int dqn_policy_branches(const dqn_policy *p, int *sizes /* may be NULL */);
/* obs [n, obs_dim] -> actions [n, D], greedy with midpoint taus */
dqn_status dqn_policy_act(dqn_policy *p, const float *obs, int n, int32_t *actions);

#ifdef __cplusplus
}
#endif
#endif
