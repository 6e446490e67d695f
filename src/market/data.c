/* The market table: which one a config names, its timestamps as text, and its CSV form. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "market/market.h"

void dqn_market_data_free(dqn_market_data *d) {
    free(d->ts);
    free(d->price);
    free(d->feat);
    free(d->asset_names);
    free(d->feature_names);
    memset(d, 0, sizeof *d);
}

dqn_status dqn_market_data_load(const dqn_config *c, dqn_market_data *d) {
    return c->data[0] ? dqn_market_csv_load(c->data, c, d) : dqn_market_synth(c, d);
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* n digits at *p as an integer, advancing p; -1 if they are not all digits */
static int digits(const char **p, int n) {
    int v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (!isdigit((unsigned char)**p)) return -1;
        v = 10 * v + (**p - '0');
    }
    return v;
}

int dqn_market_ts_parse(const char *s, int64_t *ts, dqn_ts_kind *kind) {
    const char *p = s;
    if (*p == '-' || *p == '+' || isdigit((unsigned char)*p)) {
        const char *q = p + (*p == '-' || *p == '+');
        while (isdigit((unsigned char)*q)) q++;
        if (*q == 0 && q > p + (*p == '-' || *p == '+')) {
            char *end;
            errno = 0;
            long long v = strtoll(s, &end, 10);
            if (errno || *end) return 0;
            *ts = v;
            *kind = DQN_TS_INTEGER;
            return 1;
        }
    }
    int y = digits(&p, 4);
    if (y < 0 || *p++ != '-') return 0;
    int m = digits(&p, 2);
    if (m < 1 || m > 12 || *p++ != '-') return 0;
    int d = digits(&p, 2);
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d < 1 || d > mdays[m - 1] || (m == 2 && d == 29 && !leap)) return 0;
    int64_t secs = days_from_civil(y, m, d) * 86400;
    if (*p == 0) {
        *ts = secs;
        *kind = DQN_TS_DATE;
        return 1;
    }
    if (*p != 'T' && *p != ' ') return 0;
    p++;
    int hh = digits(&p, 2);
    if (hh < 0 || hh > 23 || *p++ != ':') return 0;
    int mm = digits(&p, 2), ss = 0;
    if (mm < 0 || mm > 59) return 0;
    if (*p == ':') {
        p++;
        if ((ss = digits(&p, 2)) < 0 || ss > 59) return 0;
    }
    if (*p == 'Z') p++;
    if (*p) return 0;
    *ts = secs + hh * 3600 + mm * 60 + ss;
    *kind = DQN_TS_DATETIME;
    return 1;
}

void dqn_market_ts_format(dqn_ts_kind kind, int64_t ts, char *buf, size_t cap) {
    if (kind == DQN_TS_INTEGER) {
        snprintf(buf, cap, "%" PRId64, ts);
        return;
    }
    int64_t days = ts >= 0 ? ts / 86400 : -((-ts + 86399) / 86400), y;
    int64_t sec = ts - days * 86400;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    if (kind == DQN_TS_DATE)
        snprintf(buf, cap, "%04" PRId64 "-%02d-%02d", y, m, d);
    else
        snprintf(buf, cap, "%04" PRId64 "-%02d-%02dT%02d:%02d:%02d", y, m, d, (int)(sec / 3600),
                 (int)(sec / 60 % 60), (int)(sec % 60));
}

dqn_status dqn_market_csv_write(const dqn_market_data *d, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return dqn_error_user(DQN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "%s", d->ts_name);
    for (int a = 0; a < d->assets; a++) fprintf(f, ",%s", d->asset_names[a]);
    for (int j = 0; j < d->features; j++) fprintf(f, ",%s", d->feature_names[j]);
    fputc('\n', f);
    char ts[48];
    for (int t = 0; t < d->rows; t++) {
        dqn_market_ts_format(d->ts_kind, d->ts[t], ts, sizeof ts);
        fputs(ts, f);
        for (int a = 0; a < d->assets; a++)
            fprintf(f, ",%.17g", d->price[(size_t)t * d->assets + a]);
        for (int j = 0; j < d->features; j++)
            fprintf(f, ",%.17g", d->feat[(size_t)t * d->features + j]);
        fputc('\n', f);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return dqn_error_user(DQN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return DQN_OK;
}
