/* Vectorised environments: struct-of-arrays buffers owned by the vector, reset inside step,
 * terminated and truncated reported separately, RNG state per env (Philox stream per env). */
#ifndef DQN_ENV_H
#define DQN_ENV_H
#include <stdint.h>
#include "dqn.h"

#define DQN_ENV_MAX_BRANCHES 16

typedef struct dqn_env dqn_env;

/* An env type: its dynamics, and either fixed sizes (the classic-control envs) or an open() that
 * makes an instance whose sizes and shared data come from the config (the market env). */
typedef struct dqn_env_type {
    const char *name;          /* "cartpole" */
    const char *gym_id;        /* "CartPole-v1" ("" if none) */
    /* fixed sizes; a type with open() leaves them 0 and fills each instance's */
    int obs_dim;
    int n_branches;
    int branch_sizes[DQN_ENV_MAX_BRANCHES];
    int max_steps;             /* time limit (truncation) */
    size_t state_size;         /* bytes of one env's private state (double precision) */
    /* Reset one env's state from its generator; write its observation (float [obs_dim]).
     * ctx is the instance's shared, read-only data (NULL for a fixed env). */
    void (*reset)(const void *ctx, void *state, uint64_t seed, uint32_t stream, uint64_t *draw,
                  float *obs);
    /* Advance one env by one step with its actions [n_branches]; write obs, reward and flags.
     * The time limit is handled by the vector, not here. */
    void (*step)(const void *ctx, void *state, const int32_t *action, float *obs, float *reward,
                 int *terminated);
    /* Set the physical state from doubles (tests use Gymnasium's start states); obs written. */
    void (*set_state)(void *state, const double *v, float *obs);
    int state_dim;             /* doubles in set_state's vector */
    /* A parameterised type: make an instance from the config (sizes, ctx); close frees it. */
    dqn_status (*open)(const dqn_config *c, dqn_env *env);
    void (*close)(dqn_env *env);
} dqn_env_type;

/* One env instance: a type with its sizes (a fixed type's own, or made by its open()) and the
 * data that every env of a vector shares. */
struct dqn_env {
    const dqn_env_type *type;
    const char *name;
    int obs_dim;
    int n_branches;
    int branch_sizes[DQN_ENV_MAX_BRANCHES];
    int max_steps;
    size_t state_size;
    void *ctx;                 /* owned by the instance; NULL for a fixed type */
};

const dqn_env_type *dqn_env_find(const char *name);   /* NULL if unknown */
const char *dqn_env_names(void);                      /* "cartpole|acrobot|mountaincar|market" */
/* The instance of a fixed type (sizes copied, no ctx); a zeroed instance for NULL. */
dqn_env dqn_env_of(const dqn_env_type *type);
/* The instance c->env names, made from the config (a fixed type ignores it). */
dqn_status dqn_env_open(const dqn_config *c, dqn_env *out);
void dqn_env_close(dqn_env *env);

typedef struct {
    dqn_env env;               /* a copy; the ctx is borrowed from the instance */
    int n;                     /* envs in the vector */
    uint64_t seed;
    uint32_t stream_base;      /* env i draws from stream stream_base + i */
    /* struct of arrays, owned by the vector */
    float *obs;                /* [n, obs_dim] current observation (after auto-reset) */
    float *final_obs;          /* [n, obs_dim] observation that ended an episode this step */
    float *reward;             /* [n] */
    uint8_t *terminated;       /* [n] */
    uint8_t *truncated;        /* [n] */
    int32_t *ep_len;           /* [n] steps in the current episode */
    double *ep_return;         /* [n] return of the current episode */
    /* episodes finished in the last step: their return and length (else 0) */
    double *done_return;       /* [n] */
    int32_t *done_len;         /* [n] */
    uint64_t *draws;           /* [n] per-env generator counter */
    unsigned char *state;      /* [n * state_size] */
} dqn_vecenv;

dqn_status dqn_vecenv_create(dqn_vecenv *v, const dqn_env *env, int n, uint64_t seed,
                             uint32_t stream_base);
void dqn_vecenv_destroy(dqn_vecenv *v);
/* Reset every env (obs written). */
void dqn_vecenv_reset(dqn_vecenv *v);
/* Step every env with actions [n, n_branches]. An env whose episode ended (terminated or
 * truncated at max_steps) writes its last observation to final_obs, records done_return /
 * done_len, and is reset, so obs holds the first observation of the next episode. */
void dqn_vecenv_step(dqn_vecenv *v, const int32_t *actions);

#endif
