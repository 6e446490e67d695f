/* Training progress: a live line rewritten with '\r' on a terminal, else a line per interval. */
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_progress_init(cli_progress *p, int64_t start, int64_t total) {
    p->tty = isatty(fileno(stdout));
    p->pending = 0;
    p->start = start;
    p->total = total;
    p->t0 = cli_now();
}

static void fmt_or_dash(char *buf, size_t cap, const char *fmt, double v) {
    if (isfinite(v)) snprintf(buf, cap, fmt, v);
    else snprintf(buf, cap, "-");
}

static void fmt_eta(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) snprintf(buf, cap, "-");
    else if (s < 60) snprintf(buf, cap, "%.0fs", s);
    else if (s < 3600) snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)s / 60 % 60);
}

void cli_progress_update(cli_progress *p, const dqn_train_stats *st, double rate) {
    double elapsed = cli_now() - p->t0;
    double done = (double)(st->env_steps - p->start);
    double eta = done > 0 ? (double)(p->total - st->env_steps) * elapsed / done : NAN;
    char ret[32], loss[32], q[32], e[32];
    fmt_or_dash(ret, sizeof ret, "%.1f", st->mean_return);
    fmt_or_dash(loss, sizeof loss, "%.4g", st->last_loss);
    fmt_or_dash(q, sizeof q, "%.4g", st->mean_q);
    fmt_eta(e, sizeof e, eta);
    printf("%sstep %lld/%lld (%.0f%%)  %.0f steps/s  return %s  loss %s  Q %s  eps %.3f  ETA %s%s",
           p->tty ? "\r" : "", (long long)st->env_steps, (long long)p->total,
           100.0 * (double)st->env_steps / (double)p->total, rate, ret, loss, q, st->epsilon, e,
           p->tty ? "\033[K" : "\n");
    fflush(stdout);
    p->pending = p->tty;
}

void cli_progress_end(cli_progress *p) {
    if (p->pending) printf("\n");
    p->pending = 0;
    fflush(stdout);
}
