/* The run directory: its name, its creation, config.txt, the metrics and eval.json. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"
#include "core/lines.h"

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

/* The scalars of a row in TensorBoard, under CleanRL's names where it has them. */
static const char *const event_tags[] = {"charts/SPS", "charts/episodic_return", "losses/loss",
                                         "losses/q_values", "charts/epsilon", "losses/grad_norm"};

static double unix_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static FILE *open_append(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "a");
    if (!f) cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    return f;
}

/* name's rows past env step `at` dropped (through name.tmp and a rename); a row is a line that
 * starts with prefix and then a step number, every other line is kept. */
static int trim_rows(const char *dir, const char *name, const char *prefix, long long at) {
    char path[512], tmp[520];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *in = fopen(path, "r");
    if (!in) return errno == ENOENT ? CLI_OK : cli_error(CLI_FAIL, "cannot read %s: %s", path,
                                                          strerror(errno));
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return cli_error(CLI_FAIL, "cannot write %s: %s", tmp, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0, k = strlen(prefix);
    ssize_t len;
    int rc = CLI_OK, dropped = 0;
    errno = 0;
    while (!rc && (len = dqn_getline_max(&line, &cap, in, 1 << 20)) != -1) {
        if (len == DQN_LINE_TOO_LONG) {
            rc = cli_error(CLI_FAIL, "%s: a line longer than 1 MiB", path);
            break;
        }
        char *end = line;
        long long step = strncmp(line, prefix, k) == 0 ? strtoll(line + k, &end, 10) : 0;
        if (end != line && step > at) dropped++;
        else if (fwrite(line, 1, (size_t)len, out) != (size_t)len)
            rc = cli_error(CLI_FAIL, "cannot write %s: %s", tmp, strerror(errno));
    }
    if (!rc && (ferror(in) || errno == ENOMEM))
        rc = cli_error(CLI_FAIL, "cannot read %s: %s", path, strerror(errno));
    free(line);
    fclose(in);
    if (fclose(out) != 0 && !rc) rc = cli_error(CLI_FAIL, "cannot write %s: %s", tmp, strerror(errno));
    if (!rc && dropped && rename(tmp, path) != 0)
        rc = cli_error(CLI_FAIL, "cannot replace %s: %s", path, strerror(errno));
    if (rc || !dropped) remove(tmp);
    return rc;
}

FILE *cli_open_evaluations(const char *dir) {
    FILE *f = open_append(dir, "evaluations.csv");
    if (f && ftell(f) == 0 && (fputs("step,mean,std,best,best_step\n", f) < 0 || fflush(f) != 0)) {
        cli_error(CLI_FAIL, "cannot write %s/evaluations.csv: %s", dir, strerror(errno));
        fclose(f);
        return NULL;
    }
    return f;
}

int cli_metrics_trim(const char *dir, int64_t env_steps) {
    int rc = trim_rows(dir, "evaluations.csv", "", (long long)env_steps);
    if (!rc) rc = trim_rows(dir, "metrics.csv", "", (long long)env_steps);
    return rc ? rc : trim_rows(dir, "metrics.jsonl", "{\"step\": ", (long long)env_steps);
}

int cli_metrics_open(cli_metrics *m, const char *dir) {
    memset(m, 0, sizeof *m);
    m->dir = dir;
    if (!(m->csv = open_append(dir, "metrics.csv"))) return CLI_FAIL;
    if (ftell(m->csv) == 0 && (fputs(METRICS_HEADER, m->csv) < 0 || fflush(m->csv) != 0)) {
        cli_error(CLI_FAIL, "cannot write %s/metrics.csv: %s", dir, strerror(errno));
        cli_metrics_close(m);
        return CLI_FAIL;
    }
    if (!(m->jsonl = open_append(dir, "metrics.jsonl"))) {
        cli_metrics_close(m);
        return CLI_FAIL;
    }
    dqn_status s = dqn_tfevents_open(dir, unix_time(), &m->events);
    if (s != DQN_OK) {
        cli_error(CLI_FAIL, "%s", dqn_last_error());
        cli_metrics_close(m);
        return CLI_FAIL;
    }
    return CLI_OK;
}

static int flush(FILE *f, const char *dir, const char *name) {
    if (fflush(f) != 0 || ferror(f))
        return cli_error(CLI_FAIL, "cannot write %s/%s: %s", dir, name, strerror(errno));
    return CLI_OK;
}

int cli_metrics_row(cli_metrics *m, const dqn_train_stats *st, double wall_s,
                    double steps_per_s) {
    /* each value is formatted once; the JSONL and TensorBoard carry what the CSV shows */
    enum { WALL, SPS, RET, LOSS, Q, EPS, GN, N };
    static const char *const names[N] = {"wall_s", "steps_per_s", "mean_return", "loss",
                                         "mean_q", "epsilon", "grad_norm"};
    char csv[N][32], json[N][32];
    snprintf(csv[WALL], 32, "%.3f", wall_s);
    snprintf(csv[SPS], 32, "%.1f", steps_per_s);
    const double v[N] = {wall_s, steps_per_s, st->mean_return, st->last_loss, st->mean_q,
                         st->epsilon, st->grad_norm};
    for (int i = RET; i < N; i++) cli_fmt_double(csv[i], 32, v[i], 0);
    for (int i = 0; i < N; i++) snprintf(json[i], 32, "%s", isfinite(v[i]) ? csv[i] : "null");

    long long step = (long long)st->env_steps;
    fprintf(m->csv, "%lld", step);
    fprintf(m->jsonl, "{\"step\": %lld", step);
    for (int i = 0; i < N; i++) {
        fprintf(m->csv, ",%s", csv[i]);
        fprintf(m->jsonl, ", \"%s\": %s", names[i], json[i]);
    }
    fputs("\n", m->csv);
    fputs("}\n", m->jsonl);
    int rc = flush(m->csv, m->dir, "metrics.csv");
    if (!rc) rc = flush(m->jsonl, m->dir, "metrics.jsonl");

    /* non-finite values (no episode ended yet, no update yet) are left out, as CleanRL does */
    double now = unix_time();
    dqn_status s = DQN_OK;
    for (int i = SPS; i < N && !rc && s == DQN_OK; i++) {
        double x = strtod(csv[i], NULL);
        if (isfinite(x)) s = dqn_tfevents_scalar(m->events, now, st->env_steps, event_tags[i - SPS],
                                                 (float)x);
    }
    if (!rc && s == DQN_OK) s = dqn_tfevents_flush(m->events);
    if (!rc && s != DQN_OK) rc = cli_error(CLI_FAIL, "%s", dqn_last_error());
    return rc;
}

int cli_metrics_close(cli_metrics *m) {
    int rc = CLI_OK;
    if (m->csv && fclose(m->csv) != 0)
        rc = cli_error(CLI_FAIL, "cannot write %s/metrics.csv: %s", m->dir, strerror(errno));
    if (m->jsonl && fclose(m->jsonl) != 0 && !rc)
        rc = cli_error(CLI_FAIL, "cannot write %s/metrics.jsonl: %s", m->dir, strerror(errno));
    if (dqn_tfevents_close(m->events) != DQN_OK && !rc)
        rc = cli_error(CLI_FAIL, "%s", dqn_last_error());
    memset(m, 0, sizeof *m);
    return rc;
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
