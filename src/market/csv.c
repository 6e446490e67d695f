/* The strict CSV loader of a time-indexed table: a header of column names, then one row per
 * period. Every problem is an error naming the file, the line and the column, except a missing or
 * non-finite value under an explicit fill policy (ffill, drop), whose uses are counted. */
#define _GNU_SOURCE /* strcasecmp */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/lines.h"
#include "market/market.h"

typedef enum { FILL_NONE, FILL_FFILL, FILL_DROP } fill_policy;
typedef enum { V_OK, V_MISSING, V_NONFINITE, V_BAD } value_class;

typedef struct {
    const char *path;
    int line;
    char **name;          /* [ncols] header names */
    int ncols;
    int ts_col;
    int *col;             /* [assets + features] header column of each table column */
    int cap;              /* rows allocated */
    int64_t last_ts;      /* the previous row's timestamp, dropped rows included */
} loader;

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    return s;
}

/* Splits s in place at every ',' into at most max fields; returns how many there were. */
static int split(char *s, char **field, int max) {
    int n = 0;
    for (char *p = s;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        if (n < max) field[n] = trim(p);
        n++;
        if (!comma) return n;
        p = comma + 1;
    }
}

static value_class classify(const char *s, double *out) {
    if (!*s || strcasecmp(s, "na") == 0 || strcasecmp(s, "n/a") == 0 ||
        strcasecmp(s, "null") == 0)
        return V_MISSING;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || end == s) return V_BAD;
    *out = v;
    return isfinite(v) ? V_OK : V_NONFINITE;
}

/* The header's list of names, for "no column X" messages. */
static void header_list(const loader *L, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < L->ncols && o + 8 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", L->name[i]);
}

static int find_col(const loader *L, const char *name) {
    for (int i = 0; i < L->ncols; i++)
        if (strcmp(L->name[i], name) == 0) return i;
    return -1;
}

static dqn_status parse_header(loader *L, char *line, const dqn_config *c, dqn_market_data *d) {
    if (strncmp(line, "\xEF\xBB\xBF", 3) == 0) line += 3; /* a UTF-8 byte-order mark */
    int n = 1;
    for (const char *p = line; (p = strchr(p, ',')); p++) n++;
    L->name = calloc((size_t)n, sizeof *L->name);
    if (!L->name) return DQN_ERR(DQN_ERR_NOMEM, "%s: header", L->path);
    split(line, L->name, n);
    L->ncols = n;
    for (int i = 0; i < n; i++) {
        if (!L->name[i][0])
            return dqn_error_user(DQN_ERR_FORMAT, "%s:1: column %d of the header has no name",
                                  L->path, i + 1);
        if (strlen(L->name[i]) >= DQN_CFG_NAME)
            return dqn_error_user(DQN_ERR_FORMAT, "%s:1: column %d's name is longer than %d "
                                  "characters", L->path, i + 1, DQN_CFG_NAME - 1);
        for (int k = 0; k < i; k++)
            if (strcmp(L->name[k], L->name[i]) == 0)
                return dqn_error_user(DQN_ERR_FORMAT, "%s:1: column \"%s\" appears twice "
                                      "(columns %d and %d)", L->path, L->name[i], k + 1, i + 1);
    }
    char list[512];
    header_list(L, list, sizeof list);
    if ((L->ts_col = find_col(L, c->ts_column)) < 0)
        return dqn_error_user(DQN_ERR_FORMAT, "%s:1: no timestamp column \"%s\" (ts_column); the "
                              "header has: %s", L->path, c->ts_column, list);
    char price[DQN_CFG_MAX_NAMES][DQN_CFG_NAME], feat[DQN_CFG_MAX_NAMES][DQN_CFG_NAME];
    int np = 0, nf = 0;
    if (!dqn_config_parse_names(c->price_columns, price, DQN_CFG_MAX_NAMES, &np) ||
        !dqn_config_parse_names(c->feature_columns, feat, DQN_CFG_MAX_NAMES, &nf))
        return dqn_error_user(DQN_ERR_ARG, "bad price_columns or feature_columns (see "
                              "dqn train --help)");
    /* a slot per table column: the named prices and features may outnumber the header's */
    L->col = calloc((size_t)n + (size_t)np + (size_t)nf, sizeof *L->col);
    if (!L->col) return DQN_ERR(DQN_ERR_NOMEM, "%s: header", L->path);
    for (int j = 0; j < nf; j++)
        if ((L->col[np + j] = find_col(L, feat[j])) < 0)
            return dqn_error_user(DQN_ERR_FORMAT, "%s:1: no feature column \"%s\" "
                                  "(feature_columns); the header has: %s", L->path, feat[j], list);
    if (np == 0) { /* every column that is neither the timestamp nor a feature */
        for (int i = 0; i < n; i++) {
            int used = i == L->ts_col;
            for (int j = 0; j < nf; j++) used |= L->col[j] == i;
            if (used) continue;
            if (np == DQN_MARKET_MAX_ASSETS)
                return dqn_error_user(DQN_ERR_FORMAT, "%s:1: more than %d price columns (one "
                                      "action branch each); name them with price_columns",
                                      L->path, DQN_MARKET_MAX_ASSETS);
            snprintf(price[np++], DQN_CFG_NAME, "%s", L->name[i]);
        }
        /* the feature columns were placed first: move them behind the prices */
        int tmp[DQN_CFG_MAX_NAMES];
        memcpy(tmp, L->col, (size_t)nf * sizeof *tmp);
        memcpy(L->col + np, tmp, (size_t)nf * sizeof *tmp);
    } else if (np > DQN_MARKET_MAX_ASSETS) {
        return dqn_error_user(DQN_ERR_ARG, "price_columns names %d assets, at most %d", np,
                              DQN_MARKET_MAX_ASSETS);
    }
    if (np == 0)
        return dqn_error_user(DQN_ERR_FORMAT, "%s:1: no price column (the header has: %s)",
                              L->path, list);
    for (int a = 0; a < np; a++)
        if ((L->col[a] = find_col(L, price[a])) < 0)
            return dqn_error_user(DQN_ERR_FORMAT, "%s:1: no price column \"%s\" (price_columns); "
                                  "the header has: %s", L->path, price[a], list);
    d->assets = np;
    d->features = nf;
    d->asset_names = calloc((size_t)np, sizeof *d->asset_names);
    d->feature_names = calloc((size_t)(nf ? nf : 1), sizeof *d->feature_names);
    if (!d->asset_names || !d->feature_names) return DQN_ERR(DQN_ERR_NOMEM, "%s", L->path);
    for (int a = 0; a < np; a++) snprintf(d->asset_names[a], DQN_CFG_NAME, "%s", price[a]);
    for (int j = 0; j < nf; j++) snprintf(d->feature_names[j], DQN_CFG_NAME, "%s", feat[j]);
    snprintf(d->ts_name, sizeof d->ts_name, "%s", c->ts_column);
    return DQN_OK;
}

static dqn_status grow(loader *L, dqn_market_data *d) {
    if (d->rows < L->cap) return DQN_OK;
    int cap = L->cap ? 2 * L->cap : 1024;
    int64_t *ts = realloc(d->ts, (size_t)cap * sizeof *ts);
    if (ts) d->ts = ts;
    double *p = realloc(d->price, (size_t)cap * d->assets * sizeof *p);
    if (p) d->price = p;
    double *f = realloc(d->feat, (size_t)cap * (d->features ? d->features : 1) * sizeof *f);
    if (f) d->feat = f;
    if (!ts || !p || !f) return DQN_ERR(DQN_ERR_NOMEM, "%s: %d rows", L->path, cap);
    L->cap = cap;
    return DQN_OK;
}

/* One data row; *dropped is set when the fill policy skipped it. */
static dqn_status parse_row(loader *L, char *line, fill_policy fill, dqn_market_data *d,
                            char **field, int *dropped) {
    *dropped = 0;
    if (!*line)
        return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: empty line (expected %d comma-separated "
                              "fields)", L->path, L->line, L->ncols);
    int n = split(line, field, L->ncols);
    if (n != L->ncols)
        return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: %d fields, expected %d as in the header",
                              L->path, L->line, n, L->ncols);
    const char *tsn = L->name[L->ts_col], *tsv = field[L->ts_col];
    int64_t ts;
    dqn_ts_kind kind;
    if (!*tsv)
        return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: column %s: missing timestamp (no fill "
                              "policy applies to timestamps)", L->path, L->line, tsn);
    if (!dqn_market_ts_parse(tsv, &ts, &kind))
        return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: column %s: \"%.40s\" is not an integer or an "
                              "ISO 8601 date (YYYY-MM-DD[THH:MM[:SS]])", L->path, L->line, tsn,
                              tsv);
    static const char *const kinds[3] = {"an integer", "a date", "a date and time"};
    int first = d->rows + d->dropped == 0;
    if (!first && kind != d->ts_kind)
        return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: column %s: \"%s\" is %s, the first row's "
                              "timestamp is %s", L->path, L->line, tsn, tsv, kinds[kind],
                              kinds[d->ts_kind]);
    if (!first && ts <= L->last_ts) {
        char prev[48];
        dqn_market_ts_format(kind, L->last_ts, prev, sizeof prev);
        return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: column %s: %s is not after the previous "
                              "row's %s (timestamps must increase strictly)", L->path, L->line,
                              tsn, tsv, prev);
    }
    d->ts_kind = kind;
    L->last_ts = ts;
    DQN_TRY(grow(L, d));
    int A = d->assets, F = d->features;
    double *price = d->price + (size_t)d->rows * A, *feat = d->feat + (size_t)d->rows * F;
    value_class k[DQN_MARKET_MAX_ASSETS + DQN_CFG_MAX_NAMES];
    /* malformed values are errors whatever the fill policy, so check them all first */
    for (int j = 0; j < A + F; j++) {
        const char *name = L->name[L->col[j]], *v = field[L->col[j]];
        double *x = j < A ? &price[j] : &feat[j - A];
        if ((k[j] = classify(v, x)) == V_BAD)
            return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: column %s: \"%.40s\" is not a number",
                                  L->path, L->line, name, v);
        if (k[j] == V_OK && j < A && !(*x > 0))
            return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: column %s: price %s is not positive",
                                  L->path, L->line, name, v);
    }
    for (int j = 0; j < A + F; j++) {
        if (k[j] == V_OK) continue;
        const char *name = L->name[L->col[j]], *v = field[L->col[j]];
        const char *what = k[j] == V_MISSING ? "missing value" : "non-finite value";
        if (fill == FILL_NONE)
            return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: column %s: %s \"%s\" (fill = none; "
                                  "--fill ffill or drop handles it)", L->path, L->line, name,
                                  what, v);
        if (fill == FILL_DROP) {
            *dropped = 1;
            return DQN_OK;
        }
        if (d->rows == 0)
            return dqn_error_user(DQN_ERR_FORMAT, "%s:%d: column %s: %s \"%s\" in the first row: "
                                  "nothing to fill forward from", L->path, L->line, name, what, v);
        if (j < A) price[j] = price[j - A]; /* the previous row's value of the column */
        else feat[j - A] = feat[j - A - F];
        d->filled++;
    }
    d->ts[d->rows] = ts;
    return DQN_OK;
}

/* A data row: a timestamp and up to a few hundred numeric columns, with room to spare. */
#define CSV_LINE_MAX (1 << 20)

dqn_status dqn_market_csv_load(const char *path, const dqn_config *c, dqn_market_data *d) {
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "r");
    if (!f) return dqn_error_user(DQN_ERR_IO, "%s: cannot open the data file: %s", path,
                                  strerror(errno));
    fill_policy fill = strcmp(c->fill, "ffill") == 0 ? FILL_FFILL
                       : strcmp(c->fill, "drop") == 0 ? FILL_DROP : FILL_NONE;
    loader L = {.path = path};
    snprintf(d->source, sizeof d->source, "%s", path);
    char *line = NULL, *header = NULL, **field = NULL;
    size_t cap = 0;
    ssize_t len;
    dqn_status s = DQN_OK;
    errno = 0;
    while (s == DQN_OK && (len = dqn_getline_max(&line, &cap, f, CSV_LINE_MAX)) != -1) {
        L.line++;
        if (len == DQN_LINE_TOO_LONG) {
            s = dqn_error_user(DQN_ERR_FORMAT, "%s:%d: line longer than %d bytes", path, L.line,
                               CSV_LINE_MAX);
            break;
        }
        if ((size_t)len != strlen(line)) {
            s = dqn_error_user(DQN_ERR_FORMAT, "%s:%d: NUL byte in the line", path, L.line);
            break;
        }
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (len > 0 && line[len - 1] == '\r') line[--len] = 0;
        if (L.line == 1) {
            s = parse_header(&L, line, c, d);
            if (s == DQN_OK && !(field = calloc((size_t)L.ncols, sizeof *field)))
                s = DQN_ERR(DQN_ERR_NOMEM, "%s", path);
            /* the header's names point into its line: keep it, read rows into a new buffer */
            header = line;
            line = NULL;
            cap = 0;
            continue;
        }
        int dropped;
        s = parse_row(&L, line, fill, d, field, &dropped);
        if (s == DQN_OK && dropped) d->dropped++;
        else if (s == DQN_OK) d->rows++;
    }
    if (s == DQN_OK && (ferror(f) || errno == ENOMEM))
        s = dqn_error_user(DQN_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    if (s == DQN_OK && L.line == 0)
        s = dqn_error_user(DQN_ERR_FORMAT, "%s: empty file (expected a header line)", path);
    if (s == DQN_OK && d->rows < 2)
        s = dqn_error_user(DQN_ERR_FORMAT, "%s: %d data row(s)%s; need at least 2", path, d->rows,
                           d->dropped ? " after the fill policy dropped some" : "");
    fclose(f);
    free(line);
    free(header);
    free(field);
    free(L.name);
    free(L.col);
    if (s != DQN_OK) dqn_market_data_free(d);
    return s;
}
