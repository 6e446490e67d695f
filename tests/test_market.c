/* The market env and its data side: the accounting of a small case computed by hand, position
 * levels, observations (standardised with the training window's statistics, reading rows up to
 * t only), episode windows inside the training rows, fold boundaries, metrics and the
 * buy-and-hold baseline by hand, the synthetic generator's statistics, and the proof of no
 * look-ahead: changing the data after a fold's training window leaves its training
 * bit-identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "test_tmp.h"
#include "dqn_philox.h"
#include "envs/market.h"
#include "train/trainer_internal.h"
#include "train/walkforward.h"

static const char *file_with(const char *name, const char *text) {
    return test_tmp_file(name, text, strlen(text));
}

/* Two assets, one feature; rows 1..4 carry the hand-computed periods below. */
static const char *const HAND =
    "t,a,b,f\n1,100,50,0\n2,110,45,1\n3,99,45,2\n4,99,54,3\n5,108.9,48.6,4\n"
    "6,100,50,5\n7,100,50,6\n8,100,50,7\n9,100,50,8\n10,100,50,9\n";

static void hand_config(dqn_config *c, const char *path) {
    dqn_config_preset(c, "market");
    snprintf(c->data, sizeof c->data, "%s", path);
    snprintf(c->ts_column, sizeof c->ts_column, "t");
    snprintf(c->feature_columns, sizeof c->feature_columns, "f");
    c->window = 1;
    c->episode_len = 2;
    c->folds = 1;
    c->train_blocks = 1;
    c->cost = 0.001;
    c->holding_cost = 0.0001;
    c->reward_scale = 100;
}

static void test_accounting_by_hand(void) {
    dqn_config c;
    hand_config(&c, file_with("hand.csv", HAND));
    dqn_env env;
    CHECK_OK(dqn_env_open(&c, &env));
    if (!env.ctx) return;
    CHECK(env.obs_dim == 1 * 3 + 2 && env.n_branches == 2 && env.branch_sizes[0] == 3 &&
              env.branch_sizes[1] == 3 && env.max_steps == 2, "sizes: obs %d, %d branches",
          env.obs_dim, env.n_branches);
    const dqn_market_ctx *x = env.ctx;
    /* 10 rows, 2 blocks of 5: training rows 0-4, decisions t in [0 + window, 4) */
    CHECK(x->fold.train_lo == 0 && x->fold.train_hi == 5 && x->fold.test_lo == 5 &&
              x->fold.test_hi == 10 && x->first == 1 && x->end == 4, "fold rows");
    dqn_market_state s;
    float obs[5], reward;
    int term;
    dqn_market_start(x, &s, 1, obs);
    /* period 2 -> 3: long a, short b from flat. gain (1 (99/110 - 1) - 1 (45/45 - 1)) / 2 = -0.05,
     * turnover (1 + 1) / 2 = 1, gross 1: R = -0.05 - 0.001 - 0.0001 */
    /* period 3 -> 4: long both. gain (0 + (54/45 - 1)) / 2 = 0.1, turnover (0 + 2) / 2 = 1,
     * gross 1: R = 0.1 - 0.001 - 0.0001 */
    /* period 4 -> 5: flat a, long b. gain (0 + (48.6/54 - 1)) / 2 = -0.05, turnover (1 + 0) / 2
     * = 0.5, gross 0.5: R = -0.05 - 0.0005 - 0.00005 */
    const int32_t act[3][2] = {{2, 0}, {2, 2}, {1, 2}};
    const double R[3] = {-0.0511, 0.0989, -0.05055}, turnover[3] = {1, 1, 0.5},
                 gross[3] = {1, 1, 0.5};
    const double pos[3][2] = {{1, -1}, {1, 1}, {0, 1}};
    for (int i = 0; i < 3; i++) {
        dqn_market_step1(x, &s, act[i], obs, &reward, &term);
        CHECK(fabs(s.ret - R[i]) < 1e-12 && s.turnover == turnover[i] && s.gross == gross[i],
              "period %d: R %.17g (want %g), turnover %g, gross %g", i, s.ret, R[i], s.turnover,
              s.gross);
        CHECK(fabs(reward - 100 * log(1 + R[i])) < 1e-5 && !term && s.t == 2 + i,
              "period %d: reward %.9g, want %.9g", i, reward, 100 * log(1 + R[i]));
        CHECK(s.pos[0] == pos[i][0] && s.pos[1] == pos[i][1] && obs[3] == (float)pos[i][0] &&
                  obs[4] == (float)pos[i][1], "period %d: positions held and observed", i);
    }
    dqn_env_close(&env);
    /* the accounting alone, once more with a holding cost on a half-gross book */
    const double p0[2] = {100, 50}, p1[2] = {110, 45}, w0[2] = {0, 0}, w1[2] = {0.5, -1};
    double to, gr;
    double r = dqn_market_period(p0, p1, w0, w1, 2, 0.002, 0.01, &to, &gr);
    CHECK(fabs(r - ((0.5 * 0.1 + 0.1) / 2 - 0.002 * 0.75 - 0.01 * 0.75)) < 1e-15 && to == 0.75 &&
              gr == 0.75, "period: %.17g", r);
    CHECK(dqn_market_log_return(-2.0) == log(DQN_MARKET_RUIN), "ruin floor");
    const double levels5[5] = {-1, -0.5, 0, 0.5, 1};
    for (int k = 0; k < 5; k++)
        CHECK(dqn_market_position(k, 5) == levels5[k], "5 levels: %d -> %g", k,
              dqn_market_position(k, 5));
    CHECK(dqn_market_position(1, 3) == 0, "3 levels: flat in the middle");
}

/* Column c at row t: a log-return (t >= 1) or a feature. */
static double column(const dqn_market_data *d, int t, int c) {
    return c < d->assets ? log(d->price[t * d->assets + c] / d->price[(t - 1) * d->assets + c])
                         : d->feat[t * d->features + c - d->assets];
}

/* Naive mean and population std of column c over the training rows, for the z-scores. */
static void naive_stats(const dqn_market_data *d, int lo, int hi, int c, double *m, double *sd) {
    double v[4096];
    int n = 0;
    for (int t = c < d->assets ? lo + 1 : lo; t < hi; t++) v[n++] = column(d, t, c);
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *m = s / n;
    for (int i = 0; i < n; i++) s2 += (v[i] - *m) * (v[i] - *m);
    *sd = sqrt(s2 / n);
}

static void synth_config(dqn_config *c, int rows) {
    dqn_config_preset(c, "market");
    c->synth_rows = rows;
    c->synth_assets = 3;
    c->synth_noise_features = 1;
    c->window = 5;
    c->episode_len = 20;
    c->folds = 3;
    c->train_blocks = 2;
    c->fold = 1;
}

/* A context of fold c->fold over d (copied), for comparisons. */
static dqn_market_ctx *ctx_of(const dqn_config *c, const dqn_market_data *d) {
    dqn_market_data copy = *d;
    size_t A = (size_t)d->assets, F = (size_t)d->features, T = (size_t)d->rows;
    copy.ts = malloc(T * sizeof *copy.ts);
    copy.price = malloc(T * A * sizeof *copy.price);
    copy.feat = malloc(T * F * sizeof *copy.feat);
    copy.asset_names = malloc(A * sizeof *copy.asset_names);
    copy.feature_names = malloc(F * sizeof *copy.feature_names);
    memcpy(copy.ts, d->ts, T * sizeof *copy.ts);
    memcpy(copy.price, d->price, T * A * sizeof *copy.price);
    memcpy(copy.feat, d->feat, T * F * sizeof *copy.feat);
    memcpy(copy.asset_names, d->asset_names, A * sizeof *copy.asset_names);
    memcpy(copy.feature_names, d->feature_names, F * sizeof *copy.feature_names);
    dqn_market_ctx *x = NULL;
    CHECK_OK(dqn_market_ctx_create(c, &copy, c->fold, &x));
    return x;
}

/* Every value of rows >= from replaced (prices scaled, features shifted). */
static void perturb_from(dqn_market_data *d, int from) {
    for (int t = from; t < d->rows; t++) {
        for (int a = 0; a < d->assets; a++) d->price[t * d->assets + a] *= 1.0 + 0.01 * (t % 7 + a);
        for (int j = 0; j < d->features; j++) d->feat[t * d->features + j] += 3.0 + j;
    }
}

static void test_observations(void) {
    dqn_config c;
    synth_config(&c, 500);
    dqn_market_data d;
    CHECK_OK(dqn_market_synth(&c, &d));
    dqn_market_ctx *x = ctx_of(&c, &d);
    if (!x) return;
    int cols = x->cols, W = x->window, A = x->assets;
    CHECK(cols == 3 + 4 && A == 3, "cols %d", cols);
    /* 500 rows, 5 blocks of 100: fold 1 trains on rows 100-299, tests on 300-399 */
    CHECK(x->fold.train_lo == 100 && x->fold.train_hi == 300 && x->fold.test_lo == 300 &&
              x->fold.test_hi == 400 && x->first == 105 && x->end == 299, "fold 1 rows");
    /* statistics of the training rows only, z-scores clipped */
    double worst = 0;
    for (int col = 0; col < cols; col++) {
        double m, sd;
        naive_stats(&d, 100, 300, col, &m, &sd);
        worst = fmax(worst, fabs(x->mean[col] - m) + fabs(x->std[col] - sd) / sd);
    }
    CHECK(worst < 1e-12, "training statistics differ from a naive pass by %g", worst);
    /* an observation at t: rows t-W+1..t of the table, then the positions */
    dqn_market_state s;
    float *obs = malloc((size_t)(W * cols + A) * sizeof *obs);
    int t = 350;
    dqn_market_start(x, &s, t, obs);
    int ok = 1;
    for (int r = 0; r < W; r++)
        for (int col = 0; col < cols; col++) {
            double v = column(&d, t - W + 1 + r, col);
            double z = fmax(-10, fmin(10, (v - x->mean[col]) / x->std[col]));
            ok &= fabsf(obs[r * cols + col] - (float)z) <= 1e-6f * fmaxf(1.0f, fabsf((float)z));
        }
    for (int a = 0; a < A; a++) ok &= obs[W * cols + a] == 0.0f;
    CHECK(ok, "observation at row %d is not the window of z-scores and flat positions", t);

    /* data after the training window changes neither statistics nor training observations;
     * data after t never changes the observation at t */
    perturb_from(&d, 300);
    dqn_market_ctx *y = ctx_of(&c, &d);
    if (y) {
        CHECK(!memcmp(x->mean, y->mean, cols * sizeof(double)) &&
                  !memcmp(x->std, y->std, cols * sizeof(double)), "statistics read test rows");
        CHECK(!memcmp(x->z, y->z, 300 * (size_t)cols * sizeof(float)),
              "table rows before the test window changed");
        CHECK(memcmp(x->z + 300 * cols, y->z + 300 * cols, 10 * (size_t)cols * sizeof(float)),
              "the perturbation did not reach the table (the test could not fail)");
        dqn_market_ctx_destroy(y);
    }
    /* data from row 351 on: the observation at 350 is the same, at 351 it is not */
    dqn_market_data_free(&d);
    CHECK_OK(dqn_market_synth(&c, &d));
    perturb_from(&d, 351);
    y = ctx_of(&c, &d);
    if (y) {
        float *o2 = malloc((size_t)(W * cols + A) * sizeof *o2);
        dqn_market_start(y, &s, 350, o2);
        CHECK(!memcmp(obs, o2, (size_t)(W * cols + A) * sizeof *obs), "obs at t read row t + 1");
        dqn_market_start(x, &s, 351, obs);
        dqn_market_start(y, &s, 351, o2);
        CHECK(memcmp(obs, o2, (size_t)(W * cols + A) * sizeof *obs), "obs at t ignores row t");
        free(o2);
        dqn_market_ctx_destroy(y);
    }
    free(obs);
    dqn_market_data_free(&d);
    dqn_market_ctx_destroy(x);
}

/* Episodes start uniformly in [first, end - episode_len], run episode_len steps (truncated, never
 * terminated) and never reach a row after the training window. */
static void test_episodes(void) {
    dqn_config c;
    synth_config(&c, 500);
    dqn_env env;
    CHECK_OK(dqn_env_open(&c, &env));
    if (!env.ctx) return;
    const dqn_market_ctx *x = env.ctx;
    dqn_vecenv v;
    enum { N = 16 };
    CHECK_OK(dqn_vecenv_create(&v, &env, N, 9, DQN_STREAM_ENV));
    dqn_vecenv_reset(&v);
    int lo = x->end, hi = 0, max_row = 0, episodes = 0, bad = 0;
    int32_t act[N * 3];
    uint64_t k = 0;
    for (int step = 0; step < 4000; step++) {
        for (int i = 0; i < N; i++) {
            const dqn_market_state *s = (const void *)(v.state + (size_t)i * env.state_size);
            if (v.ep_len[i] == 0) {
                lo = s->t < lo ? (int)s->t : lo;
                hi = s->t > hi ? (int)s->t : hi;
            }
            for (int a = 0; a < 3; a++)
                act[i * 3 + a] = (int32_t)dqn_philox_below(3, DQN_STREAM_EXPLORE, k++, 3);
        }
        dqn_vecenv_step(&v, act);
        for (int i = 0; i < N; i++) {
            const dqn_market_state *s = (const void *)(v.state + (size_t)i * env.state_size);
            max_row = s->t > max_row ? (int)s->t : max_row;
            if (v.truncated[i]) {
                episodes++;
                bad += v.done_len[i] != c.episode_len || v.terminated[i];
            }
            bad += v.terminated[i];
        }
    }
    CHECK(lo == x->first && hi == x->end - c.episode_len, "starts span [%d, %d], want [%d, %d]",
          lo, hi, x->first, x->end - c.episode_len);
    CHECK(max_row <= x->end && x->end == x->fold.train_hi - 1,
          "an episode decided at row %d, training ends at row %d", max_row, x->fold.train_hi - 1);
    CHECK(episodes > 1000 && bad == 0, "%d episodes, %d not truncated at %d", episodes, bad,
          c.episode_len);
    dqn_vecenv_destroy(&v);
    dqn_env_close(&env);
}

static void test_folds(void) {
    /* 103 rows, 4 folds + 2 training blocks = 6 blocks of 17, the first takes the 1 left over */
    dqn_fold f[4];
    CHECK_OK(dqn_market_folds(103, 4, 2, 0, f));
    const int roll[4][4] = {{0, 35, 35, 52}, {18, 52, 52, 69}, {35, 69, 69, 86}, {52, 86, 86, 103}};
    for (int k = 0; k < 4; k++)
        CHECK(f[k].train_lo == roll[k][0] && f[k].train_hi == roll[k][1] &&
                  f[k].test_lo == roll[k][2] && f[k].test_hi == roll[k][3],
              "rolling fold %d: %d %d %d %d", k, f[k].train_lo, f[k].train_hi, f[k].test_lo,
              f[k].test_hi);
    CHECK_OK(dqn_market_folds(103, 4, 2, 1, f));
    for (int k = 0; k < 4; k++)
        CHECK(f[k].train_lo == 0 && f[k].train_hi == roll[k][1] && f[k].test_lo == roll[k][2] &&
                  f[k].test_hi == roll[k][3], "expanding fold %d", k);
    CHECK(dqn_market_folds(11, 4, 2, 0, f) == DQN_ERR_ARG &&
              strstr(dqn_last_error(), "11 rows cannot be cut into folds (4) + train_blocks (2)"),
          "too few rows: %s", dqn_last_error());
    /* a window and an episode too long for the training window: the message names the keys */
    dqn_config c;
    synth_config(&c, 500);
    c.window = 150;
    c.episode_len = 60;
    dqn_env env;
    CHECK(dqn_env_open(&c, &env) == DQN_ERR_ARG, "window 150 + episode 60 in 200 rows");
    CHECK(strstr(dqn_last_error(), "fold 1 trains on rows 100-299") &&
              strstr(dqn_last_error(), "49 decisions with window 150, fewer than episode_len 60"),
          "message: %s", dqn_last_error());
    /* the plan checks every fold and sizes its training: epochs x decisions */
    synth_config(&c, 500);
    c.epochs = 3;
    c.learning_starts = 100;
    dqn_walkforward_plan p;
    CHECK_OK(dqn_walkforward_plan_make(&c, &p));
    CHECK(p.folds == 3 && p.steps[0] == 3 * (199 - 5) && p.steps[2] == 3 * (199 - 5),
          "plan steps %lld", (long long)p.steps[0]);
    dqn_config fc;
    CHECK_OK(dqn_walkforward_fold_config(&c, &p, 2, &fc));
    CHECK(fc.fold == 2 && fc.steps == p.steps[2], "fold config");
    c.learning_starts = 1000;
    CHECK(dqn_walkforward_fold_config(&c, &p, 0, &fc) == DQN_ERR_ARG &&
              strstr(dqn_last_error(), "not more than learning_starts (1000)"), "%s",
          dqn_last_error());
    dqn_walkforward_plan_free(&p);
}

static void test_metrics_by_hand(void) {
    const double R[4] = {0.1, -0.2, 0.05, 0}, turnover[4] = {1, 0, 0.5, 0},
                 gross[4] = {1, 1, 0.5, 0};
    dqn_market_metrics m;
    dqn_market_metrics_of(R, turnover, gross, 4, 252, &m);
    /* equity 1.1, 0.88, 0.924, 0.924; peak 1.1; mean -0.0125; squared deviations sum 0.051875 */
    CHECK(m.periods == 4 && fabs(m.total_return - -0.076) < 1e-15, "total %.17g", m.total_return);
    CHECK(fabs(m.annual_return - (pow(0.924, 252.0 / 4) - 1)) < 1e-12, "annual %g",
          m.annual_return);
    CHECK(fabs(m.max_drawdown - 0.2) < 1e-15, "max drawdown %.17g", m.max_drawdown);
    CHECK(fabs(m.sharpe - -0.0125 / sqrt(0.051875 / 3) * sqrt(252.0)) < 1e-12, "sharpe %g",
          m.sharpe);
    CHECK(m.turnover == 0.375 && fabs(m.hit_rate - 2.0 / 3) < 1e-15, "turnover %g hit %g",
          m.turnover, m.hit_rate);
    const double zero[3] = {0, 0, 0};
    dqn_market_metrics_of(zero, zero, zero, 3, 252, &m);
    CHECK(m.total_return == 0 && m.sharpe == 0 && m.max_drawdown == 0 && isnan(m.hit_rate),
          "flat metrics");

    /* buy-and-hold over rows 0..2 of a: 100, 110, 121 and b: 50, 45, 54: the basket is worth 1,
     * (1.1 + 0.9) / 2 = 1, (1.21 + 1.08) / 2 = 1.145 of its start */
    dqn_market_data d = {.rows = 3, .assets = 2};
    double price[6] = {100, 50, 110, 45, 121, 54};
    d.price = price;
    double bR[2], bt[2], bg[2];
    dqn_market_buy_hold(&d, 0, 2, 0.001, 0.0001, bR, bt, bg);
    CHECK(fabs(bR[0] - (0 - 0.001 - 0.0001)) < 1e-15 && fabs(bR[1] - (0.145 - 0.0001)) < 1e-14,
          "buy-and-hold R %.17g %.17g", bR[0], bR[1]);
    CHECK(bt[0] == 1 && bt[1] == 0 && bg[0] == 1 && bg[1] == 1, "buy-and-hold turnover, gross");
}

static double corr(const double *x, const double *y, int n) {
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= n, my /= n;
    for (int i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    return sxy / sqrt(sxx * syy);
}

static void test_synthetic(void) {
    dqn_config c;
    dqn_config_preset(&c, "market");
    c.synth_rows = 20000;
    c.synth_assets = 3;
    c.synth_signal = 0.3;
    c.synth_corr = 0.5;
    c.synth_switch = 0; /* calm throughout: the statistics below are the calm regime's */
    dqn_market_data d, e;
    CHECK_OK(dqn_market_synth(&c, &d));
    CHECK_OK(dqn_market_synth(&c, &e));
    size_t np = (size_t)d.rows * d.assets, nf = (size_t)d.rows * d.features;
    CHECK(d.rows == 20000 && d.features == 3 + 2 && !memcmp(d.price, e.price, np * 8) &&
              !memcmp(d.feat, e.feat, nf * 8) && !memcmp(d.ts, e.ts, (size_t)d.rows * 8),
          "the same seed gives the same table");
    dqn_market_data_free(&e);
    c.seed = 2;
    CHECK_OK(dqn_market_synth(&c, &e));
    CHECK(memcmp(d.price, e.price, np * 8) != 0, "another seed gives another table");
    dqn_market_data_free(&e);
    int n = d.rows - 1, weekend = 0, up = 1;
    double *r0 = malloc((size_t)n * sizeof *r0), *r1 = malloc((size_t)n * sizeof *r1);
    double *s0 = malloc((size_t)n * sizeof *s0), mean = 0, var = 0;
    for (int t = 0; t < n; t++) {
        r0[t] = log(d.price[(t + 1) * 3] / d.price[t * 3]);
        r1[t] = log(d.price[(t + 1) * 3 + 1] / d.price[t * 3 + 1]);
        s0[t] = d.feat[t * d.features];
        mean += r0[t] / n;
        int64_t day = d.ts[t + 1] / 86400; /* 1970-01-01 was a Thursday */
        weekend += (day + 3) % 7 >= 5;
        up &= d.ts[t + 1] > d.ts[t];
    }
    for (int t = 0; t < n; t++) var += (r0[t] - mean) * (r0[t] - mean) / n;
    /* sampling errors about 1 / sqrt(20000) = 0.007 on correlations */
    double ic = corr(s0, r0, n), rr = corr(r0, r1, n);
    CHECK(fabs(ic - 0.3) < 0.03, "signal correlation with the next return %g, want 0.3", ic);
    CHECK(fabs(rr - (1 - 0.09) * 0.5) < 0.03, "return correlation %g, want %g", rr, 0.91 * 0.5);
    CHECK(fabs(sqrt(var) - 0.01) < 0.0005 && fabs(mean - 0.0005) < 0.0002,
          "calm regime: vol %g mean %g", sqrt(var), mean);
    CHECK(weekend == 0 && up, "timestamps: %d on weekends, increasing %d", weekend, up);
    /* switching every period: half the periods volatile, variance (1 + 4) / 2 times the calm */
    c.seed = 1;
    c.synth_switch = 1;
    CHECK_OK(dqn_market_synth(&c, &e));
    double var2 = 0, mean2 = 0;
    for (int t = 0; t < n; t++) mean2 += log(e.price[(t + 1) * 3] / e.price[t * 3]) / n;
    for (int t = 0; t < n; t++) {
        double x = log(e.price[(t + 1) * 3] / e.price[t * 3]) - mean2;
        var2 += x * x / n;
    }
    CHECK(fabs(var2 / var - 2.5) < 0.25 && fabs(mean2) < 0.0003, "regimes: variance ratio %g, "
          "mean %g", var2 / var, mean2);
    dqn_market_data_free(&e);
    free(r0), free(r1), free(s0);
    dqn_market_data_free(&d);
}

/* ---- no look-ahead through the whole trainer ---- */

typedef struct {
    double loss[4096];
    size_t n_loss;
    float *params;
    size_t n_params;
    double in_sample;
    dqn_fold_result oos;
} fold_run;

static void lookahead_config(dqn_config *c, const char *csv) {
    dqn_config_preset(c, "market");
    snprintf(c->data, sizeof c->data, "%s", csv);
    c->d = 16;
    c->head_hidden = 16;
    c->n_cos = 16;
    c->n_tau = c->n_tau_target = c->k_tau = 4;
    c->batch_size = 16;
    c->learning_starts = 100;
    c->buffer_size = 2000;
    c->num_envs = 2;
    c->train_freq = 2;
    c->window = 4;
    c->episode_len = 32;
    c->folds = 2;
    c->train_blocks = 1; /* 300 rows: fold 0 trains on rows 0-99, tests on rows 100-199 */
    c->fold = 0;
    c->steps = 600;
    snprintf(c->feature_columns, sizeof c->feature_columns, "%s",
             "signal0,signal1,signal2,signal3,noise0,noise1");
    c->eval_episodes = 3;
    snprintf(c->device, sizeof c->device, "cpu");
}

static void train_fold0(const char *csv, fold_run *r) {
    dqn_config c;
    lookahead_config(&c, csv);
    dqn_trainer *t = NULL;
    memset(r, 0, sizeof *r);
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    dqn_trainer_record_losses(t, r->loss, 4096, &r->n_loss);
    CHECK_OK(dqn_trainer_run_until(t, c.steps));
    r->n_params = t->model.L.n_params;
    r->params = malloc(r->n_params * sizeof(float));
    CHECK_OK(t->be->ops->d2h(t->be, r->params, t->model.params, r->n_params * sizeof(float)));
    double sd;
    CHECK_OK(dqn_trainer_evaluate(t, 3, 77, &r->in_sample, &sd, NULL));
    CHECK_OK(dqn_walkforward_evaluate(t, &r->oos));
    dqn_trainer_destroy(t);
}

static int same_training(const fold_run *a, const fold_run *b) {
    return a->n_loss > 50 && a->n_loss == b->n_loss &&
           !memcmp(a->loss, b->loss, a->n_loss * sizeof(double)) && a->n_params == b->n_params &&
           !memcmp(a->params, b->params, a->n_params * sizeof(float)) &&
           !memcmp(&a->in_sample, &b->in_sample, sizeof(double));
}

static void free_run(fold_run *r) {
    free(r->params);
    dqn_fold_result_free(&r->oos);
}

static void test_no_lookahead(void) {
    dqn_config c;
    lookahead_config(&c, "");
    c.synth_rows = 300;
    dqn_market_data d;
    CHECK_OK(dqn_market_synth(&c, &d));
    const char *base = test_tmp_path("base.csv"), *after_train = test_tmp_path("after_train.csv");
    const char *mid_test = test_tmp_path("mid_test.csv"), *in_train = test_tmp_path("in.csv");
    CHECK_OK(dqn_market_csv_write(&d, base));
    perturb_from(&d, 150);
    CHECK_OK(dqn_market_csv_write(&d, mid_test));
    perturb_from(&d, 100);
    CHECK_OK(dqn_market_csv_write(&d, after_train));
    dqn_market_data_free(&d);
    CHECK_OK(dqn_market_synth(&c, &d));
    d.feat[50 * d.features] += 1.0; /* one value inside the training window */
    CHECK_OK(dqn_market_csv_write(&d, in_train));
    dqn_market_data_free(&d);

    fold_run a, b, m, in;
    train_fold0(base, &a);
    train_fold0(after_train, &b);
    train_fold0(mid_test, &m);
    train_fold0(in_train, &in);
    printf("no look-ahead: %zu updates, in-sample return %g; out of sample %g (base) vs %g "
           "(rows from 100 changed)\n", a.n_loss, a.in_sample,
           a.oos.m[DQN_WF_AGENT].total_return, b.oos.m[DQN_WF_AGENT].total_return);
    CHECK(same_training(&a, &b), "changing rows 100+ (after fold 0's training window) changed its "
          "training: %zu vs %zu losses", a.n_loss, b.n_loss);
    CHECK(same_training(&a, &m), "changing rows 150+ changed fold 0's training");
    CHECK(!same_training(&a, &in), "changing a training row did not change training: the test "
          "could not fail");
    /* evaluation in time order: periods ending at rows 100..149 see only unchanged rows */
    int n = a.oos.n, prefix = 50;
    CHECK(n == 100 && m.oos.n == n, "test periods %d", n);
    CHECK(n == 100 && !memcmp(a.oos.R[DQN_WF_AGENT], m.oos.R[DQN_WF_AGENT],
                              (size_t)prefix * sizeof(double)) &&
              !memcmp(a.oos.pos, m.oos.pos, (size_t)prefix * a.oos.assets * sizeof(double)),
          "out-of-sample periods before row 150 depend on rows after it");
    CHECK(n == 100 && memcmp(a.oos.R[DQN_WF_AGENT] + prefix, m.oos.R[DQN_WF_AGENT] + prefix,
                             (size_t)(n - prefix) * sizeof(double)),
          "rows from 150 changed nothing out of sample: the test could not fail");
    /* the baselines over the same periods */
    const dqn_fold_result *o = &a.oos;
    int flat_zero = 1;
    for (int i = 0; i < n; i++)
        flat_zero &= o->R[DQN_WF_FLAT][i] == 0 && o->equity[DQN_WF_FLAT][i] == 1;
    CHECK(flat_zero && o->m[DQN_WF_FLAT].total_return == 0, "flat is not 0");
    CHECK(o->ts[0] != 0 && o->equity[DQN_WF_AGENT][0] == 1 &&
              fabs(o->equity[DQN_WF_AGENT][n] - 1 - o->m[DQN_WF_AGENT].total_return) < 1e-12,
          "agent equity and total return");
    free_run(&a), free_run(&b), free_run(&m), free_run(&in);
}

/* A market run stopped, saved and resumed continues bit-exactly (the env state is saved). */
static void test_resume(void) {
    dqn_config c;
    lookahead_config(&c, "");
    c.synth_rows = 300;
    c.save_replay = 1;
    static double full[4096], part[4096];
    size_t nf = 0, np = 0;
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    dqn_trainer_record_losses(t, full, 4096, &nf);
    CHECK_OK(dqn_trainer_run_until(t, 600));
    dqn_trainer_destroy(t);
    const char *path = test_tmp_path("ckpt.bin");
    CHECK_OK(dqn_trainer_create(&c, &t));
    dqn_trainer_record_losses(t, part, 4096, &np);
    CHECK_OK(dqn_trainer_run_until(t, 300));
    CHECK_OK(dqn_trainer_save(t, path));
    dqn_trainer_destroy(t);
    t = NULL;
    CHECK_OK(dqn_trainer_load(path, "cpu", &t));
    if (!t) return;
    dqn_trainer_record_losses(t, part, 4096, &np);
    CHECK_OK(dqn_trainer_run_until(t, 600));
    dqn_trainer_destroy(t);
    CHECK(nf > 100 && nf == np && !memcmp(full, part, nf * sizeof(double)),
          "market resume: %zu vs %zu losses, or different", nf, np);
    /* the trainer's architecture comes from the env: branches may only restate it */
    snprintf(c.branches, sizeof c.branches, "3,3,3,3");
    CHECK_OK(dqn_trainer_create(&c, &t));
    dqn_trainer_destroy(t);
    snprintf(c.branches, sizeof c.branches, "3,3");
    CHECK(dqn_trainer_create(&c, &t) == DQN_ERR_ARG && strstr(dqn_last_error(), "--branches"),
          "%s", dqn_last_error());
}

int main(void) {
    test_tmp_init();
    test_accounting_by_hand();
    test_observations();
    test_episodes();
    test_folds();
    test_metrics_by_hand();
    test_synthetic();
    test_no_lookahead();
    test_resume();
    test_tmp_cleanup();
    return check_finish("test_market");
}
