/* The market learning bar: the market preset's walk-forward run on the default synthetic data
 * (8,000 rows, 4 assets, signal correlation 0.2, 4 rolling folds, 4 epochs), seed 1. The agent
 * must beat the flat baseline (exactly 0) out of sample on at least 3 of the 4 folds and, over
 * all test windows chained, beat buy-and-hold's Sharpe ratio, so holding the market is not what
 * it learned. */
#ifndef DQN_TEST_LEARN_MARKET_H
#define DQN_TEST_LEARN_MARKET_H
#include <stdio.h>

#include "check.h"
#include "learn_common.h"
#include "train/walkforward.h"

static inline void learn_market_on(const char *device) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "market"));
    snprintf(c.device, sizeof c.device, "%s", device);
    dqn_fold_result r[4];
    double t0 = learn_now();
    CHECK_OK(dqn_walkforward_run(&c, r));
    if (c.folds != 4) return;
    int beat = 0;
    for (int k = 0; k < 4; k++) {
        const dqn_market_metrics *m = r[k].m;
        printf("%s market fold %d (%d test periods): agent %+.1f%% (Sharpe %.2f, turnover %.2f), "
               "buy-and-hold %+.1f%% (Sharpe %.2f), flat %+.1f%%; %.1f s training, %.2f s "
               "evaluating\n", device, k, r[k].n, 100 * m[DQN_WF_AGENT].total_return,
               m[DQN_WF_AGENT].sharpe, m[DQN_WF_AGENT].turnover,
               100 * m[DQN_WF_BUY_HOLD].total_return, m[DQN_WF_BUY_HOLD].sharpe,
               100 * m[DQN_WF_FLAT].total_return, r[k].train_s, r[k].eval_s);
        CHECK(m[DQN_WF_FLAT].total_return == 0 && m[DQN_WF_FLAT].sharpe == 0, "fold %d: flat", k);
        beat += m[DQN_WF_AGENT].total_return > 0;
    }
    dqn_market_metrics all[DQN_WF_N];
    dqn_walkforward_chain(r, 4, c.periods_per_year, all);
    printf("%s market, all folds: agent %+.1f%% (Sharpe %.2f), buy-and-hold %+.1f%% (Sharpe %.2f); "
           "beat flat on %d of 4 folds; %.1f s\n", device, 100 * all[DQN_WF_AGENT].total_return,
           all[DQN_WF_AGENT].sharpe, 100 * all[DQN_WF_BUY_HOLD].total_return,
           all[DQN_WF_BUY_HOLD].sharpe, beat, learn_now() - t0);
    CHECK(beat >= 3, "%s: the agent beat flat on %d of 4 folds, need 3", device, beat);
    CHECK(all[DQN_WF_AGENT].sharpe > all[DQN_WF_BUY_HOLD].sharpe,
          "%s: chained Sharpe %.2f does not beat buy-and-hold's %.2f", device,
          all[DQN_WF_AGENT].sharpe, all[DQN_WF_BUY_HOLD].sharpe);
    for (int k = 0; k < 4; k++) dqn_fold_result_free(&r[k]);
}
#endif
