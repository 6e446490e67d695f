/* Walk-forward training and out-of-sample evaluation on the market env (docs/market.md): fold k
 * trains a fresh agent on its training window (epochs passes) and is judged, greedily and in
 * time order, on the test window after it, beside buy-and-hold and flat baselines. */
#ifndef DQN_TRAIN_WALKFORWARD_H
#define DQN_TRAIN_WALKFORWARD_H
#include "dqn.h"
#include "market/market.h"

#define DQN_WF_MAX_FOLDS 100
enum { DQN_WF_AGENT = 0, DQN_WF_BUY_HOLD = 1, DQN_WF_FLAT = 2, DQN_WF_N = 3 };
extern const char *const dqn_wf_names[DQN_WF_N];  /* "agent", "buy_hold", "flat" */

typedef struct {
    dqn_market_data data;           /* the table, read once to check the split */
    int folds;
    dqn_fold fold[DQN_WF_MAX_FOLDS];
    int64_t steps[DQN_WF_MAX_FOLDS];   /* env steps of each fold's training */
} dqn_walkforward_plan;

/* Fold k's out-of-sample record: n periods, from row test_lo - 1 to row test_hi - 1. */
typedef struct {
    int fold, n, assets;
    dqn_fold rows;
    int64_t *ts;                    /* [n + 1] timestamps of the rows the periods run between */
    double *R[DQN_WF_N];            /* [n] net simple return of each period */
    double *turnover[DQN_WF_N];     /* [n] */
    double *gross[DQN_WF_N];        /* [n] */
    double *equity[DQN_WF_N];       /* [n + 1] from 1 */
    double *pos;                    /* [n, assets] the agent's positions */
    dqn_market_metrics m[DQN_WF_N];
    int64_t env_steps;              /* of the fold's training */
    double train_s, eval_s;         /* wall clock (dqn_walkforward_run only) */
} dqn_fold_result;

/* Reads the data and checks every fold against it; errors name the file or the keys. */
dqn_status dqn_walkforward_plan_make(const dqn_config *c, dqn_walkforward_plan *p);
void dqn_walkforward_plan_free(dqn_walkforward_plan *p);
/* Fold k's config: fold = k, steps = epochs x its training decisions; validated. */
dqn_status dqn_walkforward_fold_config(const dqn_config *c, const dqn_walkforward_plan *p, int k,
                                       dqn_config *out);
/* The greedy policy (midpoint taus, no exploration, no learning) of a trainer made from a fold
 * config, stepped through its fold's test window, and the baselines over the same periods. */
dqn_status dqn_walkforward_evaluate(dqn_trainer *t, dqn_fold_result *r);
void dqn_fold_result_free(dqn_fold_result *r);
/* Metrics of all folds' test periods chained in time order (one equity curve). */
void dqn_walkforward_chain(const dqn_fold_result *r, int folds, double periods_per_year,
                           dqn_market_metrics out[DQN_WF_N]);
/* The whole job with no files: results[k] for every fold (free each with
 * dqn_fold_result_free). */
dqn_status dqn_walkforward_run(const dqn_config *c, dqn_fold_result *results);

#endif
