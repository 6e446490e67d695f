/* dqn health: the numerical-health report of a run directory, the slot table of a config, and the
 * replay of a run's first bad update (docs/health.md). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void health_help(void) {
    printf("usage: dqn health RUN_DIR\n"
           "       dqn health --slots [--env E] [--config FILE] [--KEY VALUE]...\n"
           "       dqn health --replay RUN_DIR [--device auto|cpu|cuda]\n"
           "\n"
           "RUN_DIR     prints the slot table of a run (per slot: non-finite elements, elements a\n"
           "            guard changed and updates with an event, since the start; the first\n"
           "            event's update; the largest |x| seen), the run's first event, and the\n"
           "            history of the ISV's named entries; writes RUN_DIR/isv.svg (their plot).\n"
           "--slots     the slots of a config's model, in execution order: stage, elements, the\n"
           "            guard points and the ISV entry each bound comes from (the config is\n"
           "            resolved as dqn train resolves it).\n"
           "--replay    re-runs the update saved at the run's first event (health_event.bin: the\n"
           "            state the update started from and its batch) and reports its slots; exit\n"
           "            status 0 when the replay's first event is the recorded one, 1 if not.\n");
}

/* ---- a CSV read whole: a header and rows of fields ---- */

typedef struct {
    char *text;
    char **field;          /* [rows * cols] */
    int rows, cols;
    char **name;           /* [cols] */
} csv;

static void csv_free(csv *c) {
    free(c->text);
    free(c->field);
    free(c->name);
    memset(c, 0, sizeof *c);
}

static int csv_read(const char *path, csv *c) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "r");
    if (!f) return cli_error(CLI_USAGE, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0, got;
    c->text = malloc(cap + 1);
    while (c->text && (got = fread(c->text + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *t = realloc(c->text, 2 * cap + 1);
            if (!t) break;
            c->text = t;
            cap *= 2;
        }
    }
    fclose(f);
    if (!c->text) return cli_error(CLI_FAIL, "out of memory reading %s", path);
    c->text[len] = 0;
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += c->text[i] == '\n';
    char *save = NULL, *line = strtok_r(c->text, "\n", &save);
    if (!line) {
        csv_free(c);
        return cli_error(CLI_USAGE, "%s is empty", path);
    }
    c->cols = 1;
    for (char *p = line; *p; p++) c->cols += *p == ',';
    c->name = calloc((size_t)c->cols, sizeof *c->name);
    c->field = calloc((size_t)(lines + 1) * (size_t)c->cols, sizeof *c->field);
    if (!c->name || !c->field) {
        csv_free(c);
        return cli_error(CLI_FAIL, "out of memory reading %s", path);
    }
    int k = 0;
    for (char *p = line, *q; p; p = q, k++) {
        q = strchr(p, ',');
        if (q) *q++ = 0;
        c->name[k] = p;
    }
    for (line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char **row = c->field + (size_t)c->rows * c->cols;
        k = 0;
        for (char *p = line, *q; p && k < c->cols; p = q, k++) {
            q = strchr(p, ',');
            if (q) *q++ = 0;
            row[k] = p;
        }
        if (k != c->cols) {
            int r = c->rows + 2;
            csv_free(c);
            return cli_error(CLI_USAGE, "%s:%d: %d fields, the header has more", path, r, k);
        }
        c->rows++;
    }
    return CLI_OK;
}

static int csv_col(const csv *c, const char *name) {
    for (int k = 0; k < c->cols; k++)
        if (strcmp(c->name[k], name) == 0) return k;
    return -1;
}

static const char *cell(const csv *c, int r, int k) { return c->field[(size_t)r * c->cols + k]; }

/* ---- dqn health RUN_DIR ---- */

static int report(const char *dir) {
    char path[600];
    csv sl, iv;
    snprintf(path, sizeof path, "%s/health_slots.csv", dir);
    FILE *probe = fopen(path, "r");
    if (!probe)
        return cli_error(CLI_USAGE, "%s has no health record (%s: %s; was it trained with "
                                    "--health off?)", dir, path, strerror(errno));
    fclose(probe);
    int rc = csv_read(path, &sl);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/health_isv.csv", dir);
    if ((rc = csv_read(path, &iv))) {
        csv_free(&sl);
        return rc;
    }
    const char *need[] = {"env_step", "slot", "stage", "nonfinite_total", "guarded_total",
                          "events_total", "first_event_update", "max_abs_total", "rms"};
    int col[9];
    for (int k = 0; k < 9 && !rc; k++)
        if ((col[k] = csv_col(&sl, need[k])) < 0)
            rc = cli_error(CLI_USAGE, "%s/health_slots.csv lacks the column %s", dir, need[k]);
    int cu = csv_col(&iv, "updates"), cs = csv_col(&iv, "skipped"), cr = csv_col(&iv, "rolled_back"),
        cg = csv_col(&iv, "guarded_updates");
    if (!rc && (cu < 0 || cs < 0 || cr < 0 || cg < 0 || iv.rows == 0 || sl.rows == 0))
        rc = cli_error(CLI_USAGE, "%s: the health files are incomplete", dir);
    if (rc) {
        csv_free(&sl);
        csv_free(&iv);
        return rc;
    }
    /* the last interval's rows */
    const char *last = cell(&sl, sl.rows - 1, col[0]);
    int first_row = sl.rows - 1;
    while (first_row > 0 && strcmp(cell(&sl, first_row - 1, col[0]), last) == 0) first_row--;
    int li = iv.rows - 1;
    printf("health of %s at env step %s, %s updates: %s optimizer steps skipped (%s rolled "
           "back), %s updates with a guard at work\n\n",
           dir, last, cell(&iv, li, cu), cell(&iv, li, cs), cell(&iv, li, cr), cell(&iv, li, cg));
    printf("%-4s %-18s %-10s %12s %12s %8s %12s %12s %12s\n", "#", "slot", "stage", "nonfinite",
           "guarded", "events", "first event", "max |x|", "last rms");
    for (int r = first_row; r < sl.rows; r++) {
        const char *fe = cell(&sl, r, col[6]);
        printf("%-4d %-18s %-10s %12s %12s %8s %12s %12.4g %12.4g\n", r - first_row,
               cell(&sl, r, col[1]), cell(&sl, r, col[2]), cell(&sl, r, col[3]),
               cell(&sl, r, col[4]), cell(&sl, r, col[5]), strcmp(fe, "-1") ? fe : "-",
               strtod(cell(&sl, r, col[7]), NULL), strtod(cell(&sl, r, col[8]), NULL));
    }
    snprintf(path, sizeof path, "%s/health_event.json", dir);
    FILE *ev = fopen(path, "r");
    if (ev) {
        char buf[1024];
        size_t n = fread(buf, 1, sizeof buf - 1, ev);
        buf[n] = 0;
        fclose(ev);
        printf("\nfirst event (%s):\n%s", path, buf);
        printf("re-run it: dqn health --replay %s\n", dir);
    } else {
        printf("\nno event: every slot stayed finite and within its bound\n");
    }

    /* the ISV history: the named entries (the per-slot scales are in the CSV) */
    int first_isv = cg + 1, named = 0;
    for (int k = first_isv; k < iv.cols && strncmp(iv.name[k], "scale.", 6) != 0; k++) named++;
    printf("\nISV history (%d rows in health_isv.csv; first, min, max, last):\n", iv.rows);
    cli_svg_series *ser = calloc((size_t)named + 1, sizeof *ser);
    double *xs = calloc((size_t)iv.rows + 1, sizeof *xs);
    double *ys = calloc((size_t)named * iv.rows + 1, sizeof *ys);
    if (!ser || !xs || !ys) rc = cli_error(CLI_FAIL, "out of memory");
    for (int r = 0; r < iv.rows && !rc; r++) xs[r] = strtod(cell(&iv, r, cu), NULL);
    for (int j = 0; j < named && !rc; j++) {
        int k = first_isv + j;
        double mn = INFINITY, mx = -INFINITY;
        for (int r = 0; r < iv.rows; r++) {
            double v = strtod(cell(&iv, r, k), NULL);
            ys[(size_t)j * iv.rows + r] = v;
            if (isfinite(v)) {
                mn = fmin(mn, v);
                mx = fmax(mx, v);
            }
        }
        printf("  %-22s %12.5g %12.5g %12.5g %12.5g\n", iv.name[k], ys[(size_t)j * iv.rows],
               mn, mx, ys[(size_t)j * iv.rows + iv.rows - 1]);
        ser[j].name = iv.name[k];
        ser[j].x = xs;
        ser[j].y = ys + (size_t)j * iv.rows;
        ser[j].n = iv.rows;
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/isv.svg", dir);
        rc = cli_svg_chart(path, "ISV history (0 = not yet set)", "update", "value (log scale)",
                           1, ser, named);
        if (!rc) printf("\nwrote %s\n", path);
    }
    free(ser);
    free(xs);
    free(ys);
    csv_free(&sl);
    csv_free(&iv);
    return rc;
}

/* ---- dqn health --slots ---- */

static int slots(int argc, char **argv) {
    cli_flags f;
    int rc = cli_flags_parse(argc, argv, &f);
    if (rc) return rc;
    static const char *const own[] = {NULL};
    dqn_config c;
    rc = cli_build_config(&f, own, &c);
    cli_flags_free(&f);
    if (rc) return rc;
    dqn_health_layout *h;
    dqn_status s = dqn_health_layout_create(&c, &h);
    if (s != DQN_OK) return cli_fail_status(s);
    const dqn_health_slot_info *in;
    int n = dqn_health_layout_slots(h, &in);
    printf("slots of the %s model (d %d, grn_blocks %d, bottleneck %d, batch %d, N %d, N' %d), "
           "in execution order:\n", c.env, c.d, c.grn_blocks, c.bottleneck, c.batch_size, c.n_tau,
           c.n_tau_target);
    printf("%-4s %-18s %-10s %10s %-6s %-22s %s\n", "#", "slot", "stage", "elements", "guard",
           "bound from", "buffer");
    for (int k = 0; k < n; k++)
        printf("%-4d %-18s %-10s %10zu %-6s %-22s %s\n", k, in[k].name, in[k].stage,
               in[k].elements, in[k].guarded ? "yes" : "-", in[k].bound_from, in[k].buffer);
    dqn_health_layout_destroy(h);
    return CLI_OK;
}

/* ---- dqn health --replay RUN_DIR ---- */

static int replay(const cli_flags *f) {
    int rc = CLI_OK;
    for (int i = 0; i < f->n && !rc; i++)
        if (!cli_flag_is(&f->v[i], "replay") && !cli_flag_is(&f->v[i], "device"))
            rc = cli_error(CLI_USAGE, "unknown flag %s for dqn health --replay (see dqn health "
                                      "--help)", f->v[i].key);
    if (!rc) rc = cli_flags_once(f, "replay");
    if (!rc) rc = cli_flags_once(f, "device");
    if (rc) return rc;
    const char *dir = cli_flags_last(f, "replay")->value;
    const cli_flag *dv = cli_flags_last(f, "device");
    dqn_config scratch;
    dqn_config_defaults(&scratch);
    dqn_status s;
    if (dv && (s = dqn_config_set(&scratch, dv->key, dv->value)) != DQN_OK) return cli_fail_status(s);
    char path[600];
    snprintf(path, sizeof path, "%s/health_event.bin", dir);
    dqn_health_replay *r;
    if ((s = dqn_health_replay_run(path, dv ? scratch.device : "", &r)) != DQN_OK)
        return cli_fail_status(s);
    const dqn_health_report *rep = dqn_health_replay_report(r);
    const dqn_health_event *saved = dqn_health_replay_saved(r);
    const dqn_health_slot_info *in;
    dqn_health_layout_slots(dqn_health_replay_layout(r), &in);
    char line[512];
    cli_health_describe(line, sizeof line, saved);
    printf("recorded: %s\n", line);
    printf("replayed on %s, health %s:\n", dqn_health_replay_config(r)->device,
           dqn_health_replay_config(r)->health);
    printf("  %-18s %-10s %10s %10s %10s %12s %12s\n", "slot", "stage", "nonfinite", "nan",
           "guarded", "max |x|", "bound");
    for (int k = 0; k < rep->n_slots; k++) {
        const dqn_health_slot_stats *x = &rep->slots[k];
        if (!x->event && !x->guarded) continue;
        printf("  %-18s %-10s %10u %10u %10u %12.5g %12.5g  %s\n", in[k].name, in[k].stage,
               x->nonfinite, x->nan, x->guarded, x->max_abs, x->bound, x->event ? x->event : "");
    }
    int same = rep->event.slot == saved->slot && rep->event.update == saved->update &&
               strcmp(rep->event.kind, saved->kind) == 0;
    if (rep->event.slot >= 0) {
        cli_health_describe(line, sizeof line, &rep->event);
        printf("replay:   %s\n", line);
    } else {
        printf("replay:   no event\n");
    }
    printf("%s\n", same ? "reproduced: the replay's first bad slot is the recorded one"
                        : "NOT reproduced: the replay's first bad slot differs");
    dqn_health_replay_destroy(r);
    return same ? CLI_OK : CLI_FAIL;
}

int cli_health_cmd(int argc, char **argv) {
    if (argc >= 1 && strcmp(argv[0], "--slots") == 0) {
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                health_help();
                return CLI_OK;
            }
        return slots(argc - 1, argv + 1);
    }
    if (argc >= 1 && strncmp(argv[0], "--", 2) != 0 && strcmp(argv[0], "-h") != 0) {
        if (argc > 1)
            return cli_error(CLI_USAGE, "unexpected argument \"%.80s\" after the run directory "
                                        "(see dqn health --help)", argv[1]);
        return report(argv[0]);
    }
    cli_flags f;
    int rc = cli_flags_parse(argc, argv, &f);
    if (rc) return rc;
    if (cli_flags_help(&f)) health_help();
    else if (cli_flags_last(&f, "replay")) rc = replay(&f);
    else rc = cli_error(CLI_USAGE, "expected RUN_DIR, --slots or --replay RUN_DIR (see dqn "
                                   "health --help)");
    cli_flags_free(&f);
    return rc;
}
