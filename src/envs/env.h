/* Vectorised environments: struct-of-arrays buffers owned by the vector, reset inside step,
 * terminated and truncated reported separately, RNG state per env (Philox stream per env). */
#ifndef DQN_ENV_H
#define DQN_ENV_H
#include <stdint.h>
#include "dqn.h"
#include "dqn_philox.h"

#define DQN_ENV_MAX_BRANCHES DQN_MAX_BRANCHES

/* An env instance is a value of the public env API: a built-in's, the market's (its ctx made
 * from a config) or a user's. */
typedef dqn_env_api dqn_env;

/* A built-in env type: its API value (fixed sizes; a parameterised type's come from open()),
 * and what the tests against Gymnasium need. */
typedef struct dqn_env_type {
    const char *name;          /* "cartpole" */
    const char *gym_id;        /* "CartPole-v1" ("" if none) */
    dqn_env_api api;
    /* Set one slot's physical state from doubles (tests use Gymnasium's start states). */
    void (*set_state)(void *state, const double *v, float *obs);
    int state_dim;             /* doubles in set_state's vector */
    /* A parameterised type: its instance (sizes, ctx, close) from the config. */
    dqn_status (*open)(const dqn_config *c, dqn_env_api *env);
} dqn_env_type;

/* The batched API calls of a built-in written one slot at a time: NAME##_reset1(ctx, state, rng,
 * obs) and NAME##_step1(ctx, state, action, obs, reward, int *terminated), over slots of type
 * STATE_T; OBS and D are expressions (of ctx) giving obs_dim and n_branches. */
#define DQN_ENV_BATCHED(NAME, STATE_T, OBS, D)                                                  \
    static dqn_status NAME##_reset(void *ctx, int n, const uint8_t *mask, void *state,         \
                                   dqn_rng *rng, float *obs) {                                  \
        for (int i = 0; i < n; i++)                                                             \
            if (!mask || mask[i])                                                               \
                NAME##_reset1(ctx, (STATE_T *)state + i, &rng[i], obs + (size_t)i * (OBS));     \
        return DQN_OK;                                                                          \
    }                                                                                           \
    static dqn_status NAME##_step(void *ctx, int n, const int32_t *actions, void *state,       \
                                  dqn_rng *rng, float *obs, float *reward, uint8_t *terminated, \
                                  uint8_t *truncated) {                                         \
        (void)rng;                                                                              \
        for (int i = 0; i < n; i++) {                                                           \
            int term = 0;                                                                       \
            NAME##_step1(ctx, (STATE_T *)state + i, actions + (size_t)i * (D),                  \
                         obs + (size_t)i * (OBS), &reward[i], &term);                           \
            terminated[i] = (uint8_t)term;                                                      \
            truncated[i] = 0;                                                                   \
        }                                                                                       \
        return DQN_OK;                                                                          \
    }

/* The next draws of a slot's stream, as dqn_rng_uniform / dqn_rng_below give them. */
static inline double dqn_rng_double_(dqn_rng *r) {
    return dqn_philox_double(r->seed, r->stream, r->counter++);
}

const dqn_env_type *dqn_env_find(const char *name);   /* NULL if unknown */
const char *dqn_env_names(void);                      /* "cartpole|acrobot|mountaincar|market" */
/* The instance of a fixed type; a zeroed instance for NULL. */
dqn_env dqn_env_of(const dqn_env_type *type);
/* The instance c->env names, made from the config (a fixed type ignores it). */
dqn_status dqn_env_open(const dqn_config *c, dqn_env *out);
/* An env the vector can run: its calls, and its sizes against the API's limits (the shape
 * alone: an external env's); errors name the env. */
dqn_status dqn_env_check(const dqn_env *env);
dqn_status dqn_env_check_shape(const dqn_env *env);
void dqn_env_close(dqn_env *env);

typedef struct {
    dqn_env env;               /* a copy; the ctx is borrowed from the instance */
    int n;                     /* envs in the vector */
    uint64_t seed;
    uint32_t stream_base;      /* env i draws from stream stream_base + i */
    uint8_t *done;             /* [n] scratch: the slots to reset */
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
    dqn_rng *rng;              /* [n] each env's stream (its counter is its state) */
    unsigned char *state;      /* [n * state_size] */
} dqn_vecenv;

dqn_status dqn_vecenv_create(dqn_vecenv *v, const dqn_env *env, int n, uint64_t seed,
                             uint32_t stream_base);
void dqn_vecenv_destroy(dqn_vecenv *v);
/* Reset every env (obs written). */
dqn_status dqn_vecenv_reset(dqn_vecenv *v);
/* Step every env with actions [n, n_branches]. An env whose episode ended (terminated or
 * truncated at max_steps) writes its last observation to final_obs, records done_return /
 * done_len, and is reset, so obs holds the first observation of the next episode. */
dqn_status dqn_vecenv_step(dqn_vecenv *v, const int32_t *actions);

#endif
