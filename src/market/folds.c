/* Walk-forward folds: contiguous blocks of rows, each test block after its training window. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "market/market.h"

dqn_status dqn_market_folds(int rows, int folds, int train_blocks, int expanding, dqn_fold *out) {
    int blocks = folds + train_blocks, size = blocks > 0 ? rows / blocks : 0;
    if (folds < 1 || train_blocks < 1 || size < 2)
        return dqn_error_user(DQN_ERR_ARG, "%d rows cannot be cut into folds (%d) + train_blocks "
                              "(%d) blocks of at least 2 rows", rows, folds, train_blocks);
    int rem = rows % blocks;
#define BLOCK_START(i) ((i) == 0 ? 0 : rem + (i) * size)
    for (int k = 0; k < folds; k++) {
        dqn_fold *f = &out[k];
        f->test_lo = BLOCK_START(train_blocks + k);
        f->test_hi = k == folds - 1 ? rows : BLOCK_START(train_blocks + k + 1);
        f->train_hi = f->test_lo;
        f->train_lo = expanding ? 0 : BLOCK_START(k);
    }
#undef BLOCK_START
    return DQN_OK;
}

int dqn_market_train_first(const dqn_fold *f, int window) { return f->train_lo + window; }
int dqn_market_train_end(const dqn_fold *f) { return f->train_hi - 1; }

dqn_status dqn_market_fold_check(const dqn_config *c, const dqn_market_data *d, int k,
                                 dqn_fold *out) {
    if (k < 0 || k >= c->folds)
        return dqn_error_user(DQN_ERR_ARG, "fold %d of %d folds", k, c->folds);
    dqn_fold f[100];
    dqn_status s = dqn_market_folds(d->rows, c->folds, c->train_blocks,
                                    strcmp(c->fold_mode, "expanding") == 0, f);
    if (s != DQN_OK) { /* name the data whose rows do not suffice */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dqn_last_error());
        return dqn_error_user(s, "%s: %s", d->source, msg);
    }
    *out = f[k];
    int decisions = dqn_market_train_end(&f[k]) - dqn_market_train_first(&f[k], c->window);
    if (decisions < c->episode_len) {
        char lo[48], hi[48];
        dqn_market_ts_format(d->ts_kind, d->ts[f[k].train_lo], lo, sizeof lo);
        dqn_market_ts_format(d->ts_kind, d->ts[f[k].train_hi - 1], hi, sizeof hi);
        return dqn_error_user(DQN_ERR_ARG, "fold %d trains on rows %d-%d (%s to %s of %s): %d "
                              "decisions with window %d, fewer than episode_len %d; lower "
                              "--window or --episode-len, or give each fold more rows (fewer "
                              "--folds, more --train-blocks, --fold-mode expanding)", k,
                              f[k].train_lo, f[k].train_hi - 1, lo, hi, d->source,
                              decisions < 0 ? 0 : decisions, c->window, c->episode_len);
    }
    return DQN_OK;
}
