/* The env registry and the vector of envs: time limit, episode bookkeeping, reset inside step. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "envs/env.h"

extern const dqn_env_type dqn_env_cartpole, dqn_env_acrobot, dqn_env_mountaincar, dqn_env_market;

static const dqn_env_type *const env_types[] = {&dqn_env_cartpole, &dqn_env_acrobot,
                                                &dqn_env_mountaincar, &dqn_env_market};

const dqn_env_type *dqn_env_find(const char *name) {
    if (!name) return NULL;
    for (size_t k = 0; k < sizeof env_types / sizeof env_types[0]; k++)
        if (strcmp(env_types[k]->name, name) == 0) return env_types[k];
    return NULL;
}

const char *dqn_env_names(void) { return "cartpole|acrobot|mountaincar|market"; }

dqn_env dqn_env_of(const dqn_env_type *type) {
    dqn_env e;
    memset(&e, 0, sizeof e);
    if (!type) return e;
    e.type = type;
    e.name = type->name;
    e.obs_dim = type->obs_dim;
    e.n_branches = type->n_branches;
    memcpy(e.branch_sizes, type->branch_sizes, sizeof e.branch_sizes);
    e.max_steps = type->max_steps;
    e.state_size = type->state_size;
    return e;
}

dqn_status dqn_env_open(const dqn_config *c, dqn_env *out) {
    memset(out, 0, sizeof *out);
    const dqn_env_type *type = dqn_env_find(c->env);
    if (!type)
        return dqn_error_user(DQN_ERR_ARG, "unknown env \"%s\" (expected %s)", c->env,
                              dqn_env_names());
    if (!type->open) {
        *out = dqn_env_of(type);
        return DQN_OK;
    }
    dqn_status s = type->open(c, out);
    if (s != DQN_OK) return s;
    out->type = type;
    out->name = type->name;
    return DQN_OK;
}

void dqn_env_close(dqn_env *env) {
    if (env->type && env->type->close) env->type->close(env);
    memset(env, 0, sizeof *env);
}

dqn_status dqn_vecenv_create(dqn_vecenv *v, const dqn_env *env, int n, uint64_t seed,
                             uint32_t stream_base) {
    memset(v, 0, sizeof *v);
    if (!env || !env->type) return DQN_ERR(DQN_ERR_ARG, "env type is NULL");
    if (n < 1) return DQN_ERR(DQN_ERR_ARG, "%s: number of envs %d, need at least 1", env->name, n);
    v->env = *env;
    v->n = n;
    v->seed = seed;
    v->stream_base = stream_base;
    size_t nn = (size_t)n, od = (size_t)env->obs_dim;
    v->obs = calloc(nn * od, sizeof *v->obs);
    v->final_obs = calloc(nn * od, sizeof *v->final_obs);
    v->reward = calloc(nn, sizeof *v->reward);
    v->terminated = calloc(nn, sizeof *v->terminated);
    v->truncated = calloc(nn, sizeof *v->truncated);
    v->ep_len = calloc(nn, sizeof *v->ep_len);
    v->ep_return = calloc(nn, sizeof *v->ep_return);
    v->done_return = calloc(nn, sizeof *v->done_return);
    v->done_len = calloc(nn, sizeof *v->done_len);
    v->draws = calloc(nn, sizeof *v->draws);
    v->state = calloc(nn, env->state_size);
    if (!v->obs || !v->final_obs || !v->reward || !v->terminated || !v->truncated || !v->ep_len ||
        !v->ep_return || !v->done_return || !v->done_len || !v->draws || !v->state) {
        dqn_vecenv_destroy(v);
        return DQN_ERR(DQN_ERR_NOMEM, "%s: buffers for %d envs", env->name, n);
    }
    return DQN_OK;
}

void dqn_vecenv_destroy(dqn_vecenv *v) {
    free(v->obs);
    free(v->final_obs);
    free(v->reward);
    free(v->terminated);
    free(v->truncated);
    free(v->ep_len);
    free(v->ep_return);
    free(v->done_return);
    free(v->done_len);
    free(v->draws);
    free(v->state);
    memset(v, 0, sizeof *v);
}

static void reset_one(dqn_vecenv *v, int i) {
    const dqn_env *e = &v->env;
    e->type->reset(e->ctx, v->state + (size_t)i * e->state_size, v->seed,
                   v->stream_base + (uint32_t)i, &v->draws[i],
                   v->obs + (size_t)i * (size_t)e->obs_dim);
    v->ep_len[i] = 0;
    v->ep_return[i] = 0.0;
}

void dqn_vecenv_reset(dqn_vecenv *v) {
    size_t od = (size_t)v->env.obs_dim;
    for (int i = 0; i < v->n; i++) {
        reset_one(v, i);
        memcpy(v->final_obs + (size_t)i * od, v->obs + (size_t)i * od, od * sizeof(float));
        v->reward[i] = 0.0f;
        v->terminated[i] = 0;
        v->truncated[i] = 0;
        v->done_return[i] = 0.0;
        v->done_len[i] = 0;
    }
}

/* final_obs is written for every env, not only for those that finished: it is always the
 * observation this step produced, before any reset, i.e. the next observation of the transition.
 *
 * Time limit as Gymnasium 1.4.0's TimeLimit wrapper: truncated = (steps in the episode >=
 * max_steps), set whether or not the env also terminated on that step, so a terminal step at the
 * limit reports terminated = 1 and truncated = 1 (as Gymnasium does). Consumers must let
 * terminated win: such a step does not bootstrap. */
void dqn_vecenv_step(dqn_vecenv *v, const int32_t *actions) {
    const dqn_env *e = &v->env;
    size_t od = (size_t)e->obs_dim;
    for (int i = 0; i < v->n; i++) {
        float *obs = v->obs + (size_t)i * od;
        int terminated = 0;
        e->type->step(e->ctx, v->state + (size_t)i * e->state_size,
                      actions + (size_t)i * (size_t)e->n_branches, obs, &v->reward[i], &terminated);
        v->ep_len[i]++;
        v->ep_return[i] += v->reward[i];
        int truncated = v->ep_len[i] >= e->max_steps;
        v->terminated[i] = (uint8_t)terminated;
        v->truncated[i] = (uint8_t)truncated;
        memcpy(v->final_obs + (size_t)i * od, obs, od * sizeof(float));
        if (terminated || truncated) {
            v->done_return[i] = v->ep_return[i];
            v->done_len[i] = v->ep_len[i];
            reset_one(v, i);
        } else {
            v->done_return[i] = 0.0;
            v->done_len[i] = 0;
        }
    }
}
