/* The run directory: its name, its creation, config.txt, metrics.csv and eval.json. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"

#define METRICS_HEADER "step,wall_s,steps_per_s,mean_return,loss,mean_q,epsilon,grad_norm\n"

void cli_fmt_double(char *buf, size_t cap, double v, int json) {
    if (!isfinite(v)) {
        snprintf(buf, cap, "%s", json ? "null" : "nan");
        return;
    }
    char best[32] = "", t[32];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, v);
        if (strtod(t, NULL) == v && (!best[0] || strlen(t) < strlen(best))) strcpy(best, t);
    }
    snprintf(buf, cap, "%s", best);
}

void cli_rundir_default(const dqn_config *c, char *buf, size_t cap) {
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32];
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(buf, cap, "runs/%s-%" PRIu64 "-%s", c->env, c->seed, stamp);
}

int cli_rundir_check_free(const char *dir) {
    struct stat st;
    char path[512];
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? CLI_OK
                               : cli_error(CLI_USAGE, "run directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cli_error(CLI_USAGE, "run directory %s exists and is not a directory", dir);
    snprintf(path, sizeof path, "%s/config.txt", dir);
    if (stat(path, &st) == 0)
        return cli_error(CLI_USAGE, "run directory %s already holds a run (config.txt): choose "
                                    "another --run-dir, or continue it with --resume "
                                    "%s/checkpoint.bin", dir, dir);
    return CLI_OK;
}

int cli_rundir_create(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char keep = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return cli_error(CLI_FAIL, "cannot create run directory %s: %s", p, strerror(errno));
        *s = keep;
        if (!keep) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_error(CLI_FAIL, "cannot create run directory %s: not a directory", dir);
    return CLI_OK;
}

int cli_rundir_write_config(const char *dir, const dqn_config *c) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    dqn_status s = dqn_config_write(c, f);
    if (fclose(f) != 0 && s == DQN_OK)
        return cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    if (s != DQN_OK) return cli_error(CLI_FAIL, "cannot write %s: %s", path, dqn_last_error());
    return CLI_OK;
}

FILE *cli_metrics_open(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "a");
    if (!f) {
        cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    if (ftell(f) == 0 && (fputs(METRICS_HEADER, f) < 0 || fflush(f) != 0)) {
        cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    return f;
}

int cli_metrics_row(FILE *f, const char *dir, const dqn_train_stats *st, double wall_s,
                    double steps_per_s) {
    char ret[32], loss[32], q[32], eps[32], gn[32];
    cli_fmt_double(ret, sizeof ret, st->mean_return, 0);
    cli_fmt_double(loss, sizeof loss, st->last_loss, 0);
    cli_fmt_double(q, sizeof q, st->mean_q, 0);
    cli_fmt_double(eps, sizeof eps, st->epsilon, 0);
    cli_fmt_double(gn, sizeof gn, st->grad_norm, 0);
    fprintf(f, "%lld,%.3f,%.1f,%s,%s,%s,%s,%s\n", (long long)st->env_steps, wall_s, steps_per_s,
            ret, loss, q, eps, gn);
    if (fflush(f) != 0 || ferror(f))
        return cli_error(CLI_FAIL, "cannot write %s/metrics.csv: %s", dir, strerror(errno));
    return CLI_OK;
}

int cli_rundir_write_eval(const char *dir, const char *env, int episodes, double mean, double std,
                          const double *returns, int64_t env_steps, double wall_s, uint64_t seed) {
    char path[512], m[32], s[32], w[32], r[32];
    snprintf(path, sizeof path, "%s/eval.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    cli_fmt_double(m, sizeof m, mean, 1);
    cli_fmt_double(s, sizeof s, std, 1);
    cli_fmt_double(w, sizeof w, wall_s, 1);
    fprintf(f, "{\n  \"env\": \"%s\",\n  \"episodes\": %d,\n  \"mean_return\": %s,\n"
               "  \"std_return\": %s,\n  \"returns\": [", env, episodes, m, s);
    for (int i = 0; i < episodes; i++) {
        cli_fmt_double(r, sizeof r, returns[i], 1);
        fprintf(f, "%s%s", i ? ", " : "", r);
    }
    fprintf(f, "],\n  \"env_steps\": %lld,\n  \"wall_s\": %s,\n  \"seed\": %" PRIu64 "\n}\n",
            (long long)env_steps, w, seed);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return cli_error(CLI_FAIL, "cannot write %s: %s", path,
                                                strerror(errno));
    return CLI_OK;
}
