/* Walk-forward folds on the market env: plan, per-fold configs, out-of-sample evaluation. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "envs/market.h"
#include "train/trainer_internal.h"
#include "train/walkforward.h"

const char *const dqn_wf_names[DQN_WF_N] = {"agent", "buy_hold", "flat"};

dqn_status dqn_walkforward_plan_make(const dqn_config *c, dqn_walkforward_plan *p) {
    memset(p, 0, sizeof *p);
    if (strcmp(c->env, "market") != 0)
        return dqn_error_user(DQN_ERR_ARG, "walk-forward folds need --env market, not %s", c->env);
    DQN_TRY(dqn_config_validate(c));
    DQN_TRY(dqn_market_data_load(c, &p->data));
    p->folds = c->folds;
    for (int k = 0; k < c->folds; k++) {
        dqn_status s = dqn_market_fold_check(c, &p->data, k, &p->fold[k]);
        if (s != DQN_OK) {
            dqn_walkforward_plan_free(p);
            return s;
        }
        int decisions = dqn_market_train_end(&p->fold[k]) -
                        dqn_market_train_first(&p->fold[k], c->window);
        p->steps[k] = (int64_t)c->epochs * decisions;
    }
    return DQN_OK;
}

void dqn_walkforward_plan_free(dqn_walkforward_plan *p) {
    dqn_market_data_free(&p->data);
    memset(p, 0, sizeof *p);
}

dqn_status dqn_walkforward_fold_config(const dqn_config *c, const dqn_walkforward_plan *p, int k,
                                       dqn_config *out) {
    if (k < 0 || k >= p->folds) return DQN_ERR(DQN_ERR_ARG, "fold %d of %d", k, p->folds);
    *out = *c;
    out->fold = k;
    out->steps = p->steps[k];
    if (out->steps <= c->learning_starts)
        return dqn_error_user(DQN_ERR_ARG, "fold %d trains %lld env steps (epochs %d x %lld "
                              "decisions), not more than learning_starts (%d): raise --epochs or "
                              "lower --learning-starts", k, (long long)out->steps, c->epochs,
                              (long long)(p->steps[k] / c->epochs), c->learning_starts);
    return dqn_config_validate(out);
}

void dqn_fold_result_free(dqn_fold_result *r) {
    free(r->ts);
    free(r->pos);
    for (int i = 0; i < DQN_WF_N; i++) {
        free(r->R[i]);
        free(r->turnover[i]);
        free(r->gross[i]);
        free(r->equity[i]);
    }
    memset(r, 0, sizeof *r);
}

static dqn_status result_alloc(dqn_fold_result *r, int n, int assets) {
    r->n = n;
    r->assets = assets;
    r->ts = malloc((size_t)(n + 1) * sizeof *r->ts);
    r->pos = malloc((size_t)n * assets * sizeof *r->pos);
    int ok = r->ts && r->pos;
    for (int i = 0; i < DQN_WF_N; i++) {
        r->R[i] = calloc((size_t)n, sizeof(double));
        r->turnover[i] = calloc((size_t)n, sizeof(double));
        r->gross[i] = calloc((size_t)n, sizeof(double));
        r->equity[i] = malloc((size_t)(n + 1) * sizeof(double));
        ok = ok && r->R[i] && r->turnover[i] && r->gross[i] && r->equity[i];
    }
    return ok ? DQN_OK : DQN_ERR(DQN_ERR_NOMEM, "fold result of %d periods", n);
}

dqn_status dqn_walkforward_evaluate(dqn_trainer *t, dqn_fold_result *r) {
    memset(r, 0, sizeof *r);
    if (strcmp(t->env.name, "market") != 0)
        return DQN_ERR(DQN_ERR_ARG, "out-of-sample evaluation needs a market trainer, not %s",
                       t->env.name);
    const dqn_config *c = &t->cfg;
    const dqn_market_ctx *x = t->env.ctx;
    int from = x->fold.test_lo - 1, n = x->fold.test_hi - x->fold.test_lo, A = x->assets;
    r->fold = c->fold;
    r->rows = x->fold;
    r->env_steps = t->env_steps;
    DQN_TRY(result_alloc(r, n, A));
    float *obs = malloc((size_t)t->env.obs_dim * sizeof *obs);
    if (!obs) {
        dqn_fold_result_free(r);
        return DQN_ERR(DQN_ERR_NOMEM, "observation");
    }
    dqn_market_state s;
    dqn_market_start(x, &s, from, obs);
    dqn_status st = DQN_OK;
    for (int i = 0; i < n && st == DQN_OK; i++) {
        int32_t act[DQN_MARKET_MAX_ASSETS];
        float reward;
        int terminated;
        st = dqn_actor_greedy(&t->actor, t->be, &t->model.L, t->model.params, obs, 1, c->seed, 1,
                              act, NULL);
        if (st != DQN_OK) break;
        dqn_market_step1(x, &s, act, obs, &reward, &terminated);
        r->R[DQN_WF_AGENT][i] = s.ret;
        r->turnover[DQN_WF_AGENT][i] = s.turnover;
        r->gross[DQN_WF_AGENT][i] = s.gross;
        memcpy(r->pos + (size_t)i * A, s.pos, (size_t)A * sizeof *s.pos);
    }
    free(obs);
    if (st != DQN_OK) {
        dqn_fold_result_free(r);
        return st;
    }
    dqn_market_buy_hold(&x->data, from, from + n, c->cost, c->holding_cost, r->R[DQN_WF_BUY_HOLD],
                        r->turnover[DQN_WF_BUY_HOLD], r->gross[DQN_WF_BUY_HOLD]);
    memcpy(r->ts, x->data.ts + from, (size_t)(n + 1) * sizeof *r->ts);
    for (int k = 0; k < DQN_WF_N; k++) {
        r->equity[k][0] = 1.0;
        for (int i = 0; i < n; i++) r->equity[k][i + 1] = r->equity[k][i] * (1.0 + r->R[k][i]);
        dqn_market_metrics_of(r->R[k], r->turnover[k], r->gross[k], n, c->periods_per_year,
                              &r->m[k]);
    }
    return DQN_OK;
}

void dqn_walkforward_chain(const dqn_fold_result *r, int folds, double periods_per_year,
                           dqn_market_metrics out[DQN_WF_N]) {
    int n = 0;
    for (int k = 0; k < folds; k++) n += r[k].n;
    double *buf = malloc(3 * (size_t)(n ? n : 1) * sizeof *buf);
    for (int i = 0; i < DQN_WF_N; i++) {
        memset(&out[i], 0, sizeof out[i]);
        if (!buf) continue;
        double *R = buf, *tr = buf + n, *gr = buf + 2 * n;
        for (int k = 0, o = 0; k < folds; o += r[k].n, k++) {
            memcpy(R + o, r[k].R[i], (size_t)r[k].n * sizeof *R);
            memcpy(tr + o, r[k].turnover[i], (size_t)r[k].n * sizeof *tr);
            memcpy(gr + o, r[k].gross[i], (size_t)r[k].n * sizeof *gr);
        }
        dqn_market_metrics_of(R, tr, gr, n, periods_per_year, &out[i]);
    }
    free(buf);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dqn_status dqn_walkforward_run(const dqn_config *c, dqn_fold_result *results) {
    dqn_walkforward_plan p;
    DQN_TRY(dqn_walkforward_plan_make(c, &p));
    dqn_status s = DQN_OK;
    int done = 0;
    for (int k = 0; k < p.folds && s == DQN_OK; k++) {
        dqn_config fc;
        dqn_trainer *t = NULL;
        double t0 = now_s();
        s = dqn_walkforward_fold_config(c, &p, k, &fc);
        if (s == DQN_OK) s = dqn_trainer_create(&fc, &t);
        if (s == DQN_OK) s = dqn_trainer_run_until(t, fc.steps);
        double t1 = now_s();
        if (s == DQN_OK && (s = dqn_walkforward_evaluate(t, &results[k])) == DQN_OK) {
            results[k].train_s = t1 - t0;
            results[k].eval_s = now_s() - t1;
            done++;
        }
        dqn_trainer_destroy(t);
    }
    if (s != DQN_OK)
        for (int k = 0; k < done; k++) dqn_fold_result_free(&results[k]);
    dqn_walkforward_plan_free(&p);
    return s;
}
