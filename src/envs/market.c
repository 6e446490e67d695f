/* The market env: accounting by dqn_market_period, observations from the standardised table. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"
#include "envs/market.h"

double dqn_market_position(int k, int n) { return -1.0 + 2.0 * k / (n - 1); }

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

/* Rows t - window + 1 .. t of the table, then the positions held. */
static void observe(const dqn_market_ctx *x, const dqn_market_state *s, float *obs) {
    size_t n = (size_t)x->window * x->cols;
    memcpy(obs, x->z + (size_t)(s->t - x->window + 1) * x->cols, n * sizeof *obs);
    for (int a = 0; a < x->assets; a++) obs[n + a] = (float)s->pos[a];
}

void dqn_market_start(const dqn_market_ctx *x, dqn_market_state *s, int t, float *obs) {
    memset(s, 0, sizeof *s);
    s->t = t;
    observe(x, s, obs);
}

/* An episode starts at a uniform row of [first, end - episode_len], flat. */
static void market_reset1(const void *ctx, void *state, dqn_rng *rng, float *obs) {
    const dqn_market_ctx *x = ctx;
    uint32_t starts = (uint32_t)(x->end - x->episode_len - x->first + 1);
    dqn_market_start(x, state, x->first + (int)dqn_rng_below(rng, starts), obs);
}

void dqn_market_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                        float *reward, int *terminated) {
    const dqn_market_ctx *x = ctx;
    dqn_market_state *s = state;
    double w[DQN_MARKET_MAX_ASSETS];
    for (int a = 0; a < x->assets; a++) w[a] = dqn_market_position(action[a], x->levels);
    const double *p0 = x->data.price + (size_t)s->t * x->assets;
    s->ret = dqn_market_period(p0, p0 + x->assets, s->pos, w, x->assets, x->cost, x->holding,
                               &s->turnover, &s->gross);
    memcpy(s->pos, w, (size_t)x->assets * sizeof *w);
    s->t++;
    *reward = (float)(x->reward_scale * dqn_market_log_return(s->ret));
    *terminated = 0; /* a trading episode only ends at its time limit (truncation) */
    observe(x, s, obs);
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
