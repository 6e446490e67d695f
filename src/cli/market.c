/* dqn train --env market: the walk-forward job. The data and every fold are checked before
 * anything is written; then each fold trains in its own sub-directory (Fk, through the training
 * loop of dqn train), is evaluated out of sample, and the run ends with a summary table printed
 * and saved (summary.csv) and the chained out-of-sample equity curves (equity.svg). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "train/walkforward.h"

static const char *const policy_label[DQN_WF_N] = {"agent", "buy&hold", "flat"};

static void ts_text(const dqn_market_data *d, int row, char *buf, size_t cap) {
    dqn_market_ts_format(d->ts_kind, d->ts[row], buf, cap);
}

static int close_file(FILE *f, const char *path) {
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return cli_error(CLI_FAIL, "cannot write %s: %s", path,
                                                strerror(errno));
    return CLI_OK;
}

static FILE *create(const char *dir, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    return f;
}

static void print_header(const dqn_config *c, const dqn_walkforward_plan *p) {
    const dqn_market_data *d = &p->data;
    char a[48], b[48];
    ts_text(d, 0, a, sizeof a);
    ts_text(d, d->rows - 1, b, sizeof b);
    printf("dqn %s  market walk-forward  device %s\n%-10s%s\n", DQN_VERSION, c->device, "run dir",
           c->run_dir);
    printf("%-10s%s: %d rows (%s to %s), %d assets (", "data", d->source, d->rows, a, b,
           d->assets);
    for (int i = 0; i < d->assets; i++) printf("%s%s", i ? ", " : "", d->asset_names[i]);
    printf("), %d features", d->features);
    if (d->filled || d->dropped)
        printf("; fill %s: %lld values filled, %lld rows dropped", c->fill, (long long)d->filled,
               (long long)d->dropped);
    printf("\n%-10s%d %s folds, window %d, episode_len %d, %d position levels, cost %g, "
           "holding %g, epochs %d\n", "split", c->folds, c->fold_mode, c->window, c->episode_len,
           c->position_levels, c->cost, c->holding_cost, c->epochs);
    cli_print_changed(stdout, "changed", c);
    for (int k = 0; k < p->folds; k++) {
        const dqn_fold *f = &p->fold[k];
        char tl[48], th[48], sl[48], sh[48];
        ts_text(d, f->train_lo, tl, sizeof tl);
        ts_text(d, f->train_hi - 1, th, sizeof th);
        ts_text(d, f->test_lo, sl, sizeof sl);
        ts_text(d, f->test_hi - 1, sh, sizeof sh);
        printf("  F%-3d train rows %d-%d (%s..%s)  test rows %d-%d (%s..%s)  %lld env steps\n", k,
               f->train_lo, f->train_hi - 1, tl, th, f->test_lo, f->test_hi - 1, sl, sh,
               (long long)p->steps[k]);
    }
    fflush(stdout);
}

/* fold.json: the fold's rows and the metrics of the agent and the baselines */
static int write_fold_json(const char *dir, const dqn_market_data *d, const dqn_fold_result *r) {
    char path[512];
    FILE *f = create(dir, "fold.json", path, sizeof path);
    if (!f) return CLI_FAIL;
    char tl[48], th[48], sl[48], sh[48];
    ts_text(d, r->rows.train_lo, tl, sizeof tl);
    ts_text(d, r->rows.train_hi - 1, th, sizeof th);
    ts_text(d, r->rows.test_lo, sl, sizeof sl);
    ts_text(d, r->rows.test_hi - 1, sh, sizeof sh);
    fprintf(f, "{\n  \"fold\": %d,\n  \"train\": {\"first_row\": %d, \"last_row\": %d, "
               "\"start\": \"%s\", \"end\": \"%s\"},\n  \"test\": {\"first_row\": %d, "
               "\"last_row\": %d, \"start\": \"%s\", \"end\": \"%s\"},\n  \"periods\": %d,\n"
               "  \"env_steps\": %lld", r->fold, r->rows.train_lo, r->rows.train_hi - 1, tl, th,
            r->rows.test_lo, r->rows.test_hi - 1, sl, sh, r->n, (long long)r->env_steps);
    for (int p = 0; p < DQN_WF_N; p++) {
        const dqn_market_metrics *m = &r->m[p];
        const double v[6] = {m->total_return, m->annual_return, m->sharpe, m->max_drawdown,
                             m->turnover, m->hit_rate};
        static const char *const k[6] = {"total_return", "annual_return", "sharpe",
                                         "max_drawdown", "turnover", "hit_rate"};
        fprintf(f, ",\n  \"%s\": {", dqn_wf_names[p]);
        for (int i = 0; i < 6; i++) {
            char x[32];
            cli_fmt_double(x, sizeof x, v[i], 1);
            fprintf(f, "%s\"%s\": %s", i ? ", " : "", k[i], x);
        }
        fprintf(f, "}");
    }
    fprintf(f, "\n}\n");
    return close_file(f, path);
}

/* oos.csv: a row per test period, at the timestamp of its end */
static int write_oos(const char *dir, const dqn_market_data *d, const dqn_fold_result *r) {
    char path[512];
    FILE *f = create(dir, "oos.csv", path, sizeof path);
    if (!f) return CLI_FAIL;
    fprintf(f, "timestamp,agent_equity,buy_hold_equity,flat_equity,agent_return,"
               "buy_hold_return,agent_turnover");
    for (int a = 0; a < r->assets; a++) fprintf(f, ",position_%s", d->asset_names[a]);
    fputc('\n', f);
    for (int i = 0; i < r->n; i++) {
        char ts[48];
        dqn_market_ts_format(d->ts_kind, r->ts[i + 1], ts, sizeof ts);
        fprintf(f, "%s,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g", ts, r->equity[DQN_WF_AGENT][i + 1],
                r->equity[DQN_WF_BUY_HOLD][i + 1], r->equity[DQN_WF_FLAT][i + 1],
                r->R[DQN_WF_AGENT][i], r->R[DQN_WF_BUY_HOLD][i], r->turnover[DQN_WF_AGENT][i]);
        for (int a = 0; a < r->assets; a++) fprintf(f, ",%g", r->pos[(size_t)i * r->assets + a]);
        fputc('\n', f);
    }
    return close_file(f, path);
}

static void pct(char *buf, size_t cap, double v) {
    if (isfinite(v)) snprintf(buf, cap, "%+.1f%%", 100 * v);
    else snprintf(buf, cap, "-");
}

static void print_metrics(const char *fold, const char *window, int p,
                          const dqn_market_metrics *m) {
    char tot[24], ann[24], dd[24], to[24], hit[24];
    pct(tot, sizeof tot, m->total_return);
    pct(ann, sizeof ann, m->annual_return);
    snprintf(dd, sizeof dd, "%.1f%%", 100 * m->max_drawdown);
    snprintf(to, sizeof to, "%.1f%%", 100 * m->turnover);
    if (isfinite(m->hit_rate)) snprintf(hit, sizeof hit, "%.1f%%", 100 * m->hit_rate);
    else snprintf(hit, sizeof hit, "-");
    printf("%-5s %-23s %-9s %9s %9s %7.2f %9s %9s %9s\n", fold, window, policy_label[p], tot, ann,
           m->sharpe, dd, to, hit);
}

static void csv_metrics(FILE *f, const dqn_market_metrics *m) {
    const double v[6] = {m->total_return, m->annual_return, m->sharpe, m->max_drawdown,
                         m->turnover, m->hit_rate};
    for (int i = 0; i < 6; i++) {
        char x[32];
        cli_fmt_double(x, sizeof x, v[i], 0);
        fprintf(f, ",%s", x);
    }
}

/* The table on stdout and in summary.csv: each fold's test window, then all of them chained. */
static int summary(const dqn_config *c, const dqn_market_data *d, const dqn_fold_result *r,
                   int folds) {
    dqn_market_metrics all[DQN_WF_N];
    dqn_walkforward_chain(r, folds, c->periods_per_year, all);
    char path[512];
    FILE *f = create(c->run_dir, "summary.csv", path, sizeof path);
    if (!f) return CLI_FAIL;
    fprintf(f, "fold,test_start,test_end,periods");
    for (int p = 0; p < DQN_WF_N; p++)
        fprintf(f, ",%s_total_return,%s_annual_return,%s_sharpe,%s_max_drawdown,%s_turnover,"
                   "%s_hit_rate", dqn_wf_names[p], dqn_wf_names[p], dqn_wf_names[p],
                dqn_wf_names[p], dqn_wf_names[p], dqn_wf_names[p]);
    fputc('\n', f);
    printf("\nout-of-sample, %d folds (annualised with %g periods a year; max_dd is the maximum "
           "drawdown)\n%-5s %-23s %-9s %9s %9s %7s %9s %9s %9s\n", folds, c->periods_per_year,
           "fold", "test window", "policy", "total", "annual", "sharpe", "max_dd", "turnover",
           "hit_rate");
    for (int k = 0; k <= folds; k++) {
        int chained = k == folds;
        const dqn_fold_result *x = chained ? NULL : &r[k];
        char lo[48], hi[48], window[100], name[16];
        ts_text(d, chained ? r[0].rows.test_lo : x->rows.test_lo, lo, sizeof lo);
        ts_text(d, (chained ? r[folds - 1].rows.test_hi : x->rows.test_hi) - 1, hi, sizeof hi);
        snprintf(window, sizeof window, "%s..%s", lo, hi);
        snprintf(name, sizeof name, chained ? "all" : "F%d", k);
        int periods = chained ? all[0].periods : x->n;
        fprintf(f, "%s,%s,%s,%d", chained ? "all" : name + 1, lo, hi, periods);
        for (int p = 0; p < DQN_WF_N; p++) {
            const dqn_market_metrics *m = chained ? &all[p] : &x->m[p];
            csv_metrics(f, m);
            print_metrics(p == 0 ? name : "", p == 0 ? window : "", p, m);
        }
        fputc('\n', f);
    }
    int beat = 0;
    for (int k = 0; k < folds; k++) beat += r[k].m[DQN_WF_AGENT].total_return > 0;
    printf("the agent beat flat on %d of %d folds\n", beat, folds);
    return close_file(f, path);
}

/* equity.svg: the folds' test windows are consecutive, so their curves chain into one */
static int plot(const dqn_config *c, const dqn_market_data *d, const dqn_fold_result *r,
                int folds) {
    int n = 1;
    for (int k = 0; k < folds; k++) n += r[k].n;
    double *y = malloc(3 * (size_t)n * sizeof *y);
    int64_t *ts = malloc((size_t)n * sizeof *ts);
    int *marks = malloc((size_t)folds * sizeof *marks);
    if (!y || !ts || !marks) {
        free(y), free(ts), free(marks);
        return cli_error(CLI_FAIL, "out of memory");
    }
    dqn_svg_series s[DQN_WF_N];
    static const char *const color[DQN_WF_N] = {"#1f77b4", "#ff7f0e", "#7f7f7f"};
    static const char *const label[DQN_WF_N] = {"agent (greedy, out of sample)",
                                                "buy-and-hold (equal weight)", "flat"};
    for (int p = 0; p < DQN_WF_N; p++) {
        double *yp = y + (size_t)p * n, base = 1;
        yp[0] = 1;
        for (int k = 0, o = 0; k < folds; o += r[k].n, k++) {
            for (int i = 1; i <= r[k].n; i++) yp[o + i] = base * r[k].equity[p][i];
            base = yp[o + r[k].n];
            if (p == 0) {
                marks[k] = o;
                memcpy(ts + o, r[k].ts, (size_t)(r[k].n + 1) * sizeof *ts);
            }
        }
        s[p] = (dqn_svg_series){label[p], color[p], yp};
    }
    char path[512], title[400];
    snprintf(path, sizeof path, "%s/equity.svg", c->run_dir);
    snprintf(title, sizeof title, "out-of-sample equity, %d %s walk-forward folds (dashed: fold "
             "starts), %s", folds, c->fold_mode, d->source);
    dqn_status st = dqn_market_svg(path, title, s, DQN_WF_N, n, ts, d->ts_kind, marks, folds);
    free(y), free(ts), free(marks);
    return st == DQN_OK ? CLI_OK : cli_error(CLI_FAIL, "%s", dqn_last_error());
}

static int run_fold(const dqn_config *c, const dqn_walkforward_plan *p, int k,
                    dqn_fold_result *r) {
    dqn_config fc;
    dqn_status s = dqn_walkforward_fold_config(c, p, k, &fc);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/F%d", c->run_dir, k);
    if (s == DQN_OK) s = dqn_config_set(&fc, "run_dir", dir);
    dqn_trainer *t = NULL;
    if (s == DQN_OK) s = dqn_trainer_create(&fc, &t);
    if (s != DQN_OK) return cli_error(CLI_FAIL, "fold %d: %s", k, dqn_last_error());
    int rc = cli_rundir_create(dir);
    if (!rc) rc = cli_rundir_write_config(dir, &fc);
    if (!rc) {
        printf("\n== fold F%d of %d: training %lld env steps on rows %d-%d, backend %s\n", k,
               p->folds, (long long)fc.steps, p->fold[k].train_lo, p->fold[k].train_hi - 1,
               dqn_trainer_backend(t));
        fflush(stdout);
        rc = cli_train_run(t, &fc);
    }
    if (!rc && (s = dqn_walkforward_evaluate(t, r)) != DQN_OK)
        rc = cli_error(CLI_FAIL, "fold %d: out-of-sample evaluation: %s", k, dqn_last_error());
    dqn_trainer_destroy(t);
    if (rc) return rc;
    rc = write_oos(dir, &p->data, r);
    if (!rc) rc = write_fold_json(dir, &p->data, r);
    if (!rc) {
        char a[24], b[24];
        pct(a, sizeof a, r->m[DQN_WF_AGENT].total_return);
        pct(b, sizeof b, r->m[DQN_WF_BUY_HOLD].total_return);
        printf("F%d out of sample (%d periods): agent %s (Sharpe %.2f), buy-and-hold %s, flat "
               "+0.0%%; wrote %s/{oos.csv,fold.json}\n", k, r->n, a,
               r->m[DQN_WF_AGENT].sharpe, b, dir);
        fflush(stdout);
    }
    return rc;
}

int cli_market_train(const dqn_config *c) {
    dqn_walkforward_plan p;
    dqn_status s = dqn_walkforward_plan_make(c, &p);
    if (s != DQN_OK) return cli_fail_status(s);
    dqn_config check;
    for (int k = 0; k < p.folds && s == DQN_OK; k++)
        s = dqn_walkforward_fold_config(c, &p, k, &check);
    int rc = s != DQN_OK ? cli_fail_status(s) : cli_rundir_create(c->run_dir);
    if (!rc) rc = cli_rundir_write_config(c->run_dir, c);
    if (!rc && !c->data[0]) {
        char path[512];
        snprintf(path, sizeof path, "%s/data.csv", c->run_dir);
        if ((s = dqn_market_csv_write(&p.data, path)) != DQN_OK)
            rc = cli_error(CLI_FAIL, "%s", dqn_last_error());
    }
    dqn_fold_result *r = rc ? NULL : calloc((size_t)p.folds, sizeof *r);
    if (!rc && !r) rc = cli_error(CLI_FAIL, "out of memory");
    if (!rc) print_header(c, &p);
    for (int k = 0; !rc && k < p.folds; k++) rc = run_fold(c, &p, k, &r[k]);
    if (!rc) rc = summary(c, &p.data, r, p.folds);
    if (!rc) rc = plot(c, &p.data, r, p.folds);
    if (!rc)
        printf("wrote %s/{config.txt,%ssummary.csv,equity.svg} and F0..F%d/\n", c->run_dir,
               c->data[0] ? "" : "data.csv,", p.folds - 1);
    for (int k = 0; r && k < p.folds; k++) dqn_fold_result_free(&r[k]);
    free(r);
    dqn_walkforward_plan_free(&p);
    return rc;
}
