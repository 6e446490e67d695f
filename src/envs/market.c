/* The market env: its context (the standardised table of a fold) and the vector API over the
 * slot code it shares with the env_step op (envs/market_step.h). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"
#include "envs/market.h"

void dqn_market_ctx_destroy(dqn_market_ctx *x) {
    if (!x) return;
    dqn_market_data_free(&x->data);
    free(x->mean);
    free(x->std);
    free(x->z);
    free(x);
}

dqn_status dqn_market_ctx_create(const dqn_config *c, dqn_market_data *data, int fold,
                                 dqn_market_ctx **out) {
    *out = NULL;
    dqn_market_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        dqn_market_data_free(data);
        return DQN_ERR(DQN_ERR_NOMEM, "market env");
    }
    x->data = *data;
    memset(data, 0, sizeof *data);
    dqn_status s = dqn_market_fold_check(c, &x->data, fold, &x->fold);
    if (s != DQN_OK) {
        dqn_market_ctx_destroy(x);
        return s;
    }
    const dqn_market_data *d = &x->data;
    x->window = c->window;
    x->levels = c->position_levels;
    x->assets = d->assets;
    x->cols = dqn_market_cols(d);
    x->episode_len = c->episode_len;
    x->first = dqn_market_train_first(&x->fold, c->window);
    x->end = dqn_market_train_end(&x->fold);
    x->cost = c->cost;
    x->holding = c->holding_cost;
    x->reward_scale = c->reward_scale;
    x->mean = malloc((size_t)x->cols * sizeof *x->mean);
    x->std = malloc((size_t)x->cols * sizeof *x->std);
    x->z = malloc((size_t)d->rows * x->cols * sizeof *x->z);
    if (!x->mean || !x->std || !x->z) {
        dqn_market_ctx_destroy(x);
        return DQN_ERR(DQN_ERR_NOMEM, "market table of %d rows", d->rows);
    }
    dqn_market_norm(d, x->fold.train_lo, x->fold.train_hi, x->mean, x->std);
    dqn_market_zscore(d, x->mean, x->std, x->z);
    *out = x;
    return DQN_OK;
}

dqn_market_dev dqn_market_dev_of(const dqn_market_ctx *x) {
    return (dqn_market_dev){.z = x->z, .price = x->data.price, .rows = x->data.rows,
                            .cols = x->cols, .assets = x->assets, .levels = x->levels,
                            .window = x->window, .first = x->first, .end = x->end,
                            .episode_len = x->episode_len, .cost = x->cost,
                            .holding = x->holding, .reward_scale = x->reward_scale};
}

void dqn_market_start(const dqn_market_ctx *x, dqn_market_state *s, int t, float *obs) {
    const dqn_market_dev m = dqn_market_dev_of(x);
    dqn_market_start_at(&m, s, t, obs);
}

static void market_reset1(const void *ctx, void *state, dqn_rng *rng, float *obs) {
    const dqn_market_dev m = dqn_market_dev_of(ctx);
    dqn_market_reset1(&m, state, rng->seed, rng->stream, &rng->counter, obs);
}

void dqn_market_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                      float *reward, int *terminated) {
    const dqn_market_dev m = dqn_market_dev_of(ctx);
    *reward = dqn_market_step(&m, state, action, obs);
    *terminated = 0;
}

#define MARKET_OBS(ctx) \
    ((const dqn_market_ctx *)(ctx))->window * ((const dqn_market_ctx *)(ctx))->cols + \
        ((const dqn_market_ctx *)(ctx))->assets
#define market_step1 dqn_market_step1
DQN_ENV_BATCHED(market, dqn_market_state, MARKET_OBS(ctx), ((const dqn_market_ctx *)ctx)->assets)

static void market_close(void *ctx) { dqn_market_ctx_destroy(ctx); }

static dqn_status market_open(const dqn_config *c, dqn_env *env) {
    dqn_market_data data;
    DQN_TRY(dqn_market_data_load(c, &data));
    dqn_market_ctx *x;
    DQN_TRY(dqn_market_ctx_create(c, &data, c->fold, &x));
    env->obs_dim = x->window * x->cols + x->assets;
    env->n_branches = x->assets;
    for (int a = 0; a < x->assets; a++) env->branch_sizes[a] = x->levels;
    env->max_steps = x->episode_len;
    env->state_size = sizeof(dqn_market_state);
    env->ctx = x;
    env->close = market_close;
    return DQN_OK;
}

const dqn_env_type dqn_env_market = {
    .name = "market",
    .gym_id = "",
    .api = {.name = "market", .reset = market_reset, .step = market_step},
    .open = market_open,
};
