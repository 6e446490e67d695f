/* The data side of the market workload (docs/market.md): the time-indexed table, its CSV loader
 * and writer, the seeded synthetic generator, walk-forward fold splitting, the normalisation
 * statistics of a training window, performance metrics and baselines, the SVG equity plot. */
#ifndef DQN_MARKET_H
#define DQN_MARKET_H
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "dqn.h"
#include "market/period.h"

typedef enum { DQN_TS_INTEGER = 0, DQN_TS_DATE = 1, DQN_TS_DATETIME = 2 } dqn_ts_kind;

/* A table of `rows` periods in time order. */
typedef struct {
    int rows, assets, features;
    dqn_ts_kind ts_kind;               /* every row's timestamp has the first row's kind */
    int64_t *ts;                       /* [rows] strictly increasing; dates: seconds since 1970 */
    double *price;                     /* [rows, assets], each > 0 */
    double *feat;                      /* [rows, features] */
    char (*asset_names)[DQN_CFG_NAME];   /* [assets] */
    char (*feature_names)[DQN_CFG_NAME]; /* [features] */
    char ts_name[DQN_CFG_NAME];
    int64_t filled, dropped;           /* values filled forward, rows dropped (fill policy) */
    char source[256];                  /* the file, or "synthetic" */
} dqn_market_data;

void dqn_market_data_free(dqn_market_data *d);
/* The table a config names: --data FILE, else the synthetic generator keyed by the seed. */
dqn_status dqn_market_data_load(const dqn_config *c, dqn_market_data *d);
/* Strict CSV loader (csv.c); errors name the file, line and column (DQN_ERR_FORMAT). */
dqn_status dqn_market_csv_load(const char *path, const dqn_config *c, dqn_market_data *d);
/* Writes the table as a CSV that dqn_market_csv_load reads back exactly (%.17g). */
dqn_status dqn_market_csv_write(const dqn_market_data *d, const char *path);
/* The seeded synthetic market (synth.c): synth_assets correlated assets, a calm and a volatile
 * regime, one signal feature per asset that weakly predicts its next return, noise features. */
dqn_status dqn_market_synth(const dqn_config *c, dqn_market_data *d);
/* "2020-01-31", "2020-01-31T09:30:00" or the integer, by the table's kind. */
void dqn_market_ts_format(dqn_ts_kind kind, int64_t ts, char *buf, size_t cap);
/* Parses an integer or an ISO 8601 date "YYYY-MM-DD[(T| )HH:MM[:SS][Z]]"; 0 if malformed. */
int dqn_market_ts_parse(const char *s, int64_t *ts, dqn_ts_kind *kind);

/* ---- walk-forward folds (folds.c) ---- */
/* Rows [train_lo, train_hi) train, rows [test_lo, test_hi) test; test_lo == train_hi. */
typedef struct {
    int train_lo, train_hi, test_lo, test_hi;
} dqn_fold;

/* The rows are cut into folds + train_blocks blocks of rows / blocks rows (the first block takes
 * the remainder); fold k tests on block train_blocks + k and trains on the train_blocks blocks
 * before it (rolling) or on every block before it (expanding). */
dqn_status dqn_market_folds(int rows, int folds, int train_blocks, int expanding, dqn_fold *out);
/* The decisions of a window: an observation at row t reads rows t - window + 1 .. t (returns
 * need the row before those too), and its period ends at row t + 1. Training decisions of a
 * fold: [train_lo + window, train_hi - 1); test decisions: [test_lo - 1, test_hi - 1). */
int dqn_market_train_first(const dqn_fold *f, int window);
int dqn_market_train_end(const dqn_fold *f);
/* Checks that fold k of c's split of d fits the window and the episode; errors name the keys. */
dqn_status dqn_market_fold_check(const dqn_config *c, const dqn_market_data *d, int k,
                                 dqn_fold *out);

/* ---- the observation table (norm.c) ---- */
/* Columns: the log-return of each asset, then each feature. */
static inline int dqn_market_cols(const dqn_market_data *d) { return d->assets + d->features; }
/* Mean and standard deviation of each column over the training rows [lo, hi) only (returns from
 * lo + 1, whose previous price is in the window too); a constant column gets std 1. */
void dqn_market_norm(const dqn_market_data *d, int lo, int hi, double *mean, double *std);
#define DQN_MARKET_ZCLIP 10.0
/* z [rows, cols]: (value - mean) / std clipped to +-DQN_MARKET_ZCLIP; row 0's returns are 0. */
void dqn_market_zscore(const dqn_market_data *d, const double *mean, const double *std, float *z);

/* ---- accounting, metrics and baselines (metrics.c) ---- */
/* One period's net return and log-return: market/period.h (host and device code). */

typedef struct {
    int periods;
    double total_return;    /* E_n - 1, E_0 = 1, E_t = E_{t-1} (1 + R_t) */
    double annual_return;   /* E_n^(periods_per_year / n) - 1 */
    double sharpe;          /* mean(R) / std(R) * sqrt(periods_per_year), sample std; 0 if std 0 */
    double max_drawdown;    /* max_t 1 - E_t / max_{s<=t} E_s */
    double turnover;        /* mean per period of the capital traded */
    double hit_rate;        /* periods with R > 0 among those with gross > 0; NAN if none */
} dqn_market_metrics;

void dqn_market_metrics_of(const double *R, const double *turnover, const double *gross, int n,
                           double periods_per_year, dqn_market_metrics *m);
/* Buy-and-hold over rows [from, to]: 1/assets of the capital long in each asset at row from
 * (paying cost on it), never rebalanced, paying holding on the gross exposure of 1 each period.
 * Writes the to - from periods' R, turnover and gross. */
void dqn_market_buy_hold(const dqn_market_data *d, int from, int to, double cost,
                         double holding, double *R, double *turnover, double *gross);

/* ---- the SVG equity plot (svg.c) ---- */
typedef struct {
    const char *label, *color;
    const double *y;        /* [n] */
} dqn_svg_series;

/* Line chart of series over x = 0..n-1 (time labels from ts), with dashed vertical lines at the
 * given x positions (fold boundaries); errors name the path. */
dqn_status dqn_market_svg(const char *path, const char *title, const dqn_svg_series *series,
                          int n_series, int n, const int64_t *ts, dqn_ts_kind kind,
                          const int *marks, int n_marks);

#endif
