/* The health files of a run directory, written while training (docs/health.md):
 *   health_slots.csv  a row per slot per log interval (the last update's figures and the totals)
 *   health_isv.csv    a row per log interval: the counters and every ISV entry
 *   health_event.json the run's first event; health_event.bin, its update for --replay
 * and the one log line that announces the first event. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "cli/cli.h"

#define SLOTS_HEADER                                                                         \
    "env_step,updates,slot,stage,nonfinite,nan,guarded,event,max_abs,rms,mean_abs,bound,"      \
    "nonfinite_total,guarded_total,events_total,first_event_update,max_abs_total\n"

static FILE *open_csv(const char *dir, const char *name, int *fresh) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "a");
    if (!f) cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    else *fresh = ftell(f) == 0;
    return f;
}

int cli_health_open(cli_health *h, const char *dir, const dqn_health_layout *layout) {
    memset(h, 0, sizeof *h);
    h->dir = dir;
    h->layout = layout;
    if (!layout) return CLI_OK;
    int fresh;
    if (!(h->slots = open_csv(dir, "health_slots.csv", &fresh))) return CLI_FAIL;
    if (fresh) fputs(SLOTS_HEADER, h->slots);
    if (!(h->isv = open_csv(dir, "health_isv.csv", &fresh))) {
        cli_health_close(h);
        return CLI_FAIL;
    }
    if (fresh) {
        const char *const *names;
        int n = dqn_health_layout_isv(layout, &names);
        fputs("env_step,updates,skipped,rolled_back,guarded_updates", h->isv);
        for (int k = 0; k < n; k++) fprintf(h->isv, ",%s", names[k]);
        fputs("\n", h->isv);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/health_event.json", dir);
    FILE *f = fopen(path, "r");
    if (f) {   /* a resumed run has announced its event already */
        h->announced = 1;
        fclose(f);
    }
    return CLI_OK;
}

static void fmt_f(char *buf, size_t cap, double v) { cli_fmt_double(buf, cap, v, 0); }

static int write_event(cli_health *h, dqn_trainer *t, const dqn_health_event *e) {
    char path[512], v[32], b[32], idx[32];
    snprintf(path, sizeof path, "%s/health_event.json", h->dir);
    FILE *f = fopen(path, "w");
    if (!f) return cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    if (isfinite(e->value)) cli_fmt_double(v, sizeof v, e->value, 1);
    else snprintf(v, sizeof v, "\"%s\"", isnan(e->value) ? "nan" : e->value > 0 ? "inf" : "-inf");
    cli_fmt_double(b, sizeof b, e->bound, 1);
    if (e->index == UINT64_MAX) snprintf(idx, sizeof idx, "null");
    else snprintf(idx, sizeof idx, "%" PRIu64, e->index);
    fprintf(f, "{\n  \"update\": %lld,\n  \"slot\": \"%s\",\n  \"stage\": \"%s\",\n"
               "  \"kind\": \"%s\",\n  \"value\": %s,\n  \"bound\": %s,\n  \"count\": %u,\n"
               "  \"index\": %s,\n  \"replay\": \"health_event.bin\"\n}\n",
            (long long)e->update, e->slot_name, e->stage, e->kind, v, b, e->count, idx);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/health_event.bin", h->dir);
    dqn_status s = dqn_trainer_health_save_event(t, path);
    if (s != DQN_OK) return cli_error(CLI_FAIL, "%s", dqn_last_error());
    return CLI_OK;
}

void cli_health_describe(char *buf, size_t cap, const dqn_health_event *e) {
    char v[32], b[32];
    fmt_f(v, sizeof v, e->value);
    fmt_f(b, sizeof b, e->bound);
    if (strcmp(e->kind, "out of range") == 0)
        snprintf(buf, cap, "update %lld, slot \"%s\" (%s): out of range, max |x| = %s > bound %s",
                 (long long)e->update, e->slot_name, e->stage, v, b);
    else
        snprintf(buf, cap, "update %lld, slot \"%s\" (%s): %s, %u non-finite element%s (the first "
                 "at index %" PRIu64 ")", (long long)e->update, e->slot_name, e->stage, e->kind,
                 e->count, e->count == 1 ? "" : "s", e->index);
}

int cli_health_row(cli_health *h, dqn_trainer *t, cli_progress *p, int sync) {
    if (!h->layout) return CLI_OK;
    dqn_health_report r;
    dqn_status s = dqn_trainer_health_poll(t, sync, &r);
    if (s != DQN_OK) return cli_error(CLI_FAIL, "%s", dqn_last_error());
    if (r.updates == h->last_updates && h->rows) return CLI_OK;   /* nothing new since */
    h->last_updates = r.updates;
    h->rows++;
    const dqn_health_slot_info *info;
    dqn_health_layout_slots(h->layout, &info);
    char a[32], b[32], c[32], d[32], e[32];
    for (int k = 0; k < r.n_slots; k++) {
        const dqn_health_slot_stats *x = &r.slots[k];
        fmt_f(a, sizeof a, x->max_abs);
        fmt_f(b, sizeof b, x->rms);
        fmt_f(c, sizeof c, x->mean_abs);
        fmt_f(d, sizeof d, x->bound);
        fmt_f(e, sizeof e, x->max_abs_total);
        fprintf(h->slots, "%lld,%" PRIu64 ",%s,%s,%u,%u,%u,%s,%s,%s,%s,%s,%" PRIu64 ",%" PRIu64
                          ",%" PRIu64 ",%lld,%s\n",
                (long long)r.env_steps, r.updates, info[k].name, info[k].stage, x->nonfinite,
                x->nan, x->guarded, x->event ? x->event : "", a, b, c, d, x->nonfinite_total,
                x->guarded_total, x->events_total, (long long)x->first_event_update, e);
    }
    fprintf(h->isv, "%lld,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, (long long)r.env_steps,
            r.updates, r.skipped, r.rolled_back, r.guarded_updates);
    for (int k = 0; k < r.n_isv; k++) {
        fmt_f(a, sizeof a, r.isv[k]);
        fprintf(h->isv, ",%s", a);
    }
    fputs("\n", h->isv);
    if (fflush(h->slots) != 0 || fflush(h->isv) != 0 || ferror(h->slots) || ferror(h->isv))
        return cli_error(CLI_FAIL, "cannot write the health files in %s: %s", h->dir,
                         strerror(errno));
    if (r.event.slot >= 0 && !h->announced) {
        h->announced = 1;
        char line[512];
        cli_health_describe(line, sizeof line, &r.event);
        cli_progress_end(p);
        const dqn_config *cfg = dqn_trainer_config(t);
        printf("health: first bad value at %s; %s; saved: dqn health --replay %s\n", line,
               strcmp(cfg->health, "guard") == 0 ? "guarded, the weights stay finite"
                                                  : "detect mode changes nothing",
               h->dir);
        fflush(stdout);
        return write_event(h, t, &r.event);
    }
    return CLI_OK;
}

int cli_health_close(cli_health *h) {
    int rc = CLI_OK;
    if (h->slots && fclose(h->slots) != 0)
        rc = cli_error(CLI_FAIL, "cannot write %s/health_slots.csv: %s", h->dir, strerror(errno));
    if (h->isv && fclose(h->isv) != 0 && !rc)
        rc = cli_error(CLI_FAIL, "cannot write %s/health_isv.csv: %s", h->dir, strerror(errno));
    h->slots = h->isv = NULL;
    return rc;
}
