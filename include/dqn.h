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

#define DQN_CFG_STR 64
#define DQN_CFG_MAX_BRANCHES 16

/* Every field is one row of the config table (src/core/config.c), which gives its key, bounds,
 * default and help; dqn_config_set() is the only validated way in from text. */
typedef struct {
    /* run */
    char env[DQN_CFG_STR];          /* cartpole | acrobot | mountaincar | market */
    int64_t steps;                  /* total env steps */
    uint64_t seed;
    char device[DQN_CFG_STR];       /* cpu | cuda | auto */
    char math[DQN_CFG_STR];         /* fp32 | tf32 */
    char run_dir[256];              /* "" = runs/<env>-<seed>-<time> */
    int num_envs;
    int log_interval;               /* env steps between metrics rows */
    int eval_episodes;
    int checkpoint_interval;        /* env steps between checkpoints, 0 = only at the end */
    int save_replay;                /* include the replay buffer in checkpoints */
    int threads;                    /* BLAS threads on the CPU backend */
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
    /* health */
    char health[DQN_CFG_STR];       /* off | detect | guard */
    double guard_scale;
    double guard_floor;
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

/* ---- trainer ---- */
typedef struct dqn_trainer dqn_trainer;

typedef struct {
    int64_t env_steps;
    int64_t updates;
    int64_t episodes;
    double mean_return;     /* over the last (up to) 100 finished episodes; NAN if none */
    double last_loss;       /* NAN before the first update */
    double mean_q;
    double grad_norm;
    double epsilon;
    int64_t skipped_updates;
} dqn_train_stats;

dqn_status dqn_trainer_create(const dqn_config *c, dqn_trainer **out);
void dqn_trainer_destroy(dqn_trainer *t);
/* Run env steps until stats.env_steps >= target_env_steps (or the config's steps). */
dqn_status dqn_trainer_run_until(dqn_trainer *t, int64_t target_env_steps);
void dqn_trainer_stats(const dqn_trainer *t, dqn_train_stats *out);
const dqn_config *dqn_trainer_config(const dqn_trainer *t);
/* Backend name ("cpu", "cuda") and the GEMM in use ("openblas", "builtin", "cublas"). */
const char *dqn_trainer_backend(const dqn_trainer *t);
/* Checkpoint: versioned header + CRC32; written to path.tmp then renamed. */
dqn_status dqn_trainer_save(const dqn_trainer *t, const char *path);
/* Resume: the config is taken from the checkpoint; the run continues bit-exactly on the CPU. */
dqn_status dqn_trainer_load(const char *path, const char *device, dqn_trainer **out);
/* Greedy evaluation on fresh episodes (fixed midpoint taus), results per episode optional. */
dqn_status dqn_trainer_evaluate(dqn_trainer *t, int episodes, uint64_t seed, double *mean,
                                double *std, double *returns_out);
/* Losses of every update so far are appended here when non-NULL (tests of resume use it). */
void dqn_trainer_record_losses(dqn_trainer *t, double *buf, size_t cap, size_t *count);

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
