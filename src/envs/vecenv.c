/* The env registry and the vector of envs: time limit, episode bookkeeping, reset inside step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/error.h"
#include "envs/env.h"
#include "envs/env_slot.h"

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
    if (type) e = type->api;
    return e;
}

dqn_status dqn_env_builtin(const char *name, dqn_env_api *out) {
    memset(out, 0, sizeof *out);
    const dqn_env_type *type = dqn_env_find(name);
    if (!type || type->open)
        return dqn_error_user(DQN_ERR_ARG, "no built-in env \"%s\" (expected "
                              "cartpole|acrobot|mountaincar; the market env comes from a config)",
                              name ? name : "(null)");
    *out = type->api;
    return DQN_OK;
}

dqn_status dqn_env_check(const dqn_env *e) {
    const char *name = e->name ? e->name : "(unnamed env)";
    if (!e->reset || !e->step) return DQN_ERR(DQN_ERR_ARG, "env %s: reset and step are required", name);
    return dqn_env_check_shape(e);
}

dqn_status dqn_env_check_shape(const dqn_env *e) {
    const char *name = e->name ? e->name : "(unnamed env)";
    if (e->obs_dim < 1) return DQN_ERR(DQN_ERR_ARG, "env %s: obs_dim %d, need >= 1", name, e->obs_dim);
    if (e->n_branches < 1 || e->n_branches > DQN_MAX_BRANCHES)
        return DQN_ERR(DQN_ERR_ARG, "env %s: %d branches, need 1..%d", name, e->n_branches,
                       DQN_MAX_BRANCHES);
    for (int b = 0; b < e->n_branches; b++)
        if (e->branch_sizes[b] < 2 || e->branch_sizes[b] > 64)
            return DQN_ERR(DQN_ERR_ARG, "env %s: branch %d has %d actions, need 2..64", name, b,
                           e->branch_sizes[b]);
    if (e->max_steps < 0) return DQN_ERR(DQN_ERR_ARG, "env %s: max_steps %d < 0", name, e->max_steps);
    return DQN_OK;
}

dqn_status dqn_env_open(const dqn_config *c, dqn_env *out) {
    memset(out, 0, sizeof *out);
    if (strcmp(c->env, "external") == 0) {
        /* the host's env: its shape only (validated with the config), no calls */
        out->name = "external";
        out->obs_dim = c->obs_dim;
        if (!dqn_config_parse_branches(c->branches, out->branch_sizes, &out->n_branches) ||
            out->obs_dim < 1 || out->n_branches < 1)
            return dqn_error_user(DQN_ERR_ARG, "env external needs obs_dim >= 1 and branches "
                                  "(got obs_dim %d, branches \"%s\")", c->obs_dim, c->branches);
        return DQN_OK;
    }
    const dqn_env_type *type = dqn_env_find(c->env);
    if (!type)
        return dqn_error_user(DQN_ERR_ARG, "unknown env \"%s\" (expected %s)", c->env,
                              dqn_env_names());
    *out = type->api;
    if (type->open) DQN_TRY(type->open(c, out));
    return DQN_OK;
}

void dqn_env_close(dqn_env *env) {
    if (env->close) env->close(env->ctx);
    memset(env, 0, sizeof *env);
}

double dqn_rng_uniform(dqn_rng *r) { return dqn_rng_double_(r); }

uint32_t dqn_rng_below(dqn_rng *r, uint32_t n) {
    return dqn_philox_below(r->seed, r->stream, r->counter++, n);
}

dqn_status dqn_vecenv_create(dqn_vecenv *v, const dqn_env *env, int n, uint64_t seed,
                             uint32_t stream_base) {
    memset(v, 0, sizeof *v);
    if (!env) return DQN_ERR(DQN_ERR_ARG, "env is NULL");
    DQN_TRY(dqn_env_check(env));
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
    v->done = calloc(nn, sizeof *v->done);
    v->ep_len = calloc(nn, sizeof *v->ep_len);
    v->ep_return = calloc(nn, sizeof *v->ep_return);
    v->done_return = calloc(nn, sizeof *v->done_return);
    v->done_len = calloc(nn, sizeof *v->done_len);
    v->rng = calloc(nn, sizeof *v->rng);
    v->state = calloc(nn, env->state_size ? env->state_size : 1);
    if (!v->obs || !v->final_obs || !v->reward || !v->terminated || !v->truncated || !v->done ||
        !v->ep_len || !v->ep_return || !v->done_return || !v->done_len || !v->rng || !v->state) {
        dqn_vecenv_destroy(v);
        return DQN_ERR(DQN_ERR_NOMEM, "%s: buffers for %d envs", env->name, n);
    }
    for (int i = 0; i < n; i++) v->rng[i] = (dqn_rng){seed, stream_base + (uint32_t)i, 0};
    return DQN_OK;
}

void dqn_vecenv_destroy(dqn_vecenv *v) {
    free(v->obs);
    free(v->final_obs);
    free(v->reward);
    free(v->terminated);
    free(v->truncated);
    free(v->done);
    free(v->ep_len);
    free(v->ep_return);
    free(v->done_return);
    free(v->done_len);
    free(v->rng);
    free(v->state);
    memset(v, 0, sizeof *v);
}

/* A user env's failure, named; its own message (dqn_set_error) kept. */
static dqn_status env_failed(const dqn_vecenv *v, const char *what, dqn_status s) {
    char why[512];
    snprintf(why, sizeof why, "%s", dqn_last_error());
    return dqn_error_user(s == DQN_ERR_NOMEM ? s : DQN_ERR_ARG, "env %s: %s failed%s%s",
                          v->env.name ? v->env.name : "", what, *why ? ": " : "", why);
}

dqn_status dqn_vecenv_reset(dqn_vecenv *v) {
    const dqn_env *e = &v->env;
    dqn_error_clear();
    dqn_status s = e->reset(e->ctx, v->n, NULL, v->state, v->rng, v->obs);
    if (s != DQN_OK) return env_failed(v, "reset", s);
    size_t od = (size_t)e->obs_dim;
    memcpy(v->final_obs, v->obs, (size_t)v->n * od * sizeof(float));
    for (int i = 0; i < v->n; i++)
        dqn_slot_clear(&v->ep_len[i], &v->ep_return[i], &v->reward[i], &v->terminated[i],
                       &v->truncated[i], &v->done_return[i], &v->done_len[i]);
    return DQN_OK;
}

/* final_obs is written for every env, not only for those that finished: it is always the
 * observation this step produced, before any reset, i.e. the next observation of the transition.
 *
 * Time limit as Gymnasium 1.4.0's TimeLimit wrapper: truncated = (steps in the episode >=
 * max_steps), set whether or not the env also terminated on that step, so a terminal step at the
 * limit reports terminated = 1 and truncated = 1 (as Gymnasium does). Consumers must let
 * terminated win: such a step does not bootstrap. */
dqn_status dqn_vecenv_step(dqn_vecenv *v, const int32_t *actions) {
    const dqn_env *e = &v->env;
    size_t od = (size_t)e->obs_dim;
    dqn_error_clear();
    dqn_status s = e->step(e->ctx, v->n, actions, v->state, v->rng, v->obs, v->reward,
                           v->terminated, v->truncated);
    if (s != DQN_OK) return env_failed(v, "step", s);
    memcpy(v->final_obs, v->obs, (size_t)v->n * od * sizeof(float));
    int any = 0;
    for (int i = 0; i < v->n; i++) {
        v->done[i] = (uint8_t)dqn_slot_record(e->max_steps, v->reward[i], &v->terminated[i],
                                              &v->truncated[i], &v->ep_len[i], &v->ep_return[i],
                                              &v->done_return[i], &v->done_len[i]);
        any |= v->done[i];
    }
    if (!any) return DQN_OK;
    if ((s = e->reset(e->ctx, v->n, v->done, v->state, v->rng, v->obs)) != DQN_OK)
        return env_failed(v, "reset", s);
    for (int i = 0; i < v->n; i++)
        if (v->done[i]) {
            v->ep_len[i] = 0;
            v->ep_return[i] = 0.0;
        }
    return DQN_OK;
}
