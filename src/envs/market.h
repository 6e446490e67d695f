/* The market env (docs/market.md): one action branch per asset over position_levels positions,
 * observations of a window of standardised returns and features plus the positions held, reward
 * the scaled net log-return of the portfolio; episodes are contiguous windows of a fold's
 * training rows. The walk-forward evaluation steps it through a test window in time order. */
#ifndef DQN_ENVS_MARKET_H
#define DQN_ENVS_MARKET_H
#include "envs/env.h"
#include "market/market.h"
#include "envs/market_step.h"

/* An instance's data, shared read-only by every env of a vector. */
typedef struct {
    dqn_market_data data;      /* the whole table; training reads only the fold's rows */
    dqn_fold fold;
    int window, levels, assets, cols, episode_len;
    int first, end;            /* training decisions: rows t in [first, end) */
    double cost, holding, reward_scale;
    double *mean, *std;        /* [cols] the training window's statistics */
    float *z;                  /* [rows, cols] standardised returns and features */
} dqn_market_ctx;

/* One env's state: dqn_market_state (envs/market_step.h, where its reset and step are). */

/* Takes the data (moved into the context) and builds fold `fold`'s context. */
dqn_status dqn_market_ctx_create(const dqn_config *c, dqn_market_data *data, int fold,
                                 dqn_market_ctx **out);
void dqn_market_ctx_destroy(dqn_market_ctx *x);
/* The context's tables and settings as env_step reads them (its pointers: the host's). */
dqn_market_dev dqn_market_dev_of(const dqn_market_ctx *x);
/* Puts an env at decision row t with flat positions and writes its observation. */
void dqn_market_start(const dqn_market_ctx *x, dqn_market_state *s, int t, float *obs);
/* One step of one slot (ctx: a dqn_market_ctx): walk-forward evaluation steps it outside a vector. */
void dqn_market_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                      float *reward, int *terminated);

#endif
