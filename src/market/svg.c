/* A small SVG line chart: the out-of-sample equity curves of a walk-forward run. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "market/market.h"

enum { W = 960, H = 480, LEFT = 70, RIGHT = 20, TOP = 40, BOTTOM = 50 };

/* A "nice" tick step (1, 2 or 5 times a power of ten) near span / 5. */
static double tick_step(double span) {
    double raw = span / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* Text with the five XML specials escaped. */
static void put_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*s, f);
        }
    }
}

dqn_status dqn_market_svg(const char *path, const char *title, const dqn_svg_series *series,
                          int n_series, int n, const int64_t *ts, dqn_ts_kind kind,
                          const int *marks, int n_marks) {
    if (n < 2 || n_series < 1)
        return DQN_ERR(DQN_ERR_ARG, "%s: a chart needs 2 points and a series (%d, %d)", path, n,
                       n_series);
    double lo = INFINITY, hi = -INFINITY;
    for (int s = 0; s < n_series; s++)
        for (int i = 0; i < n; i++)
            if (isfinite(series[s].y[i])) {
                lo = fmin(lo, series[s].y[i]);
                hi = fmax(hi, series[s].y[i]);
            }
    if (!(hi > lo)) {
        lo = isfinite(lo) ? lo - 0.5 : 0;
        hi = lo + 1;
    }
    double pad = 0.05 * (hi - lo);
    lo -= pad;
    hi += pad;
    FILE *f = fopen(path, "w");
    if (!f) return dqn_error_user(DQN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    double pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
#define X(i) (LEFT + pw * (double)(i) / (n - 1))
#define Y(v) (TOP + ph * (hi - (v)) / (hi - lo))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"15\">", LEFT);
    put_text(f, title);
    fputs("</text>\n", f);
    double step = tick_step(hi - lo);
    for (double v = ceil(lo / step) * step; v <= hi; v += step) {
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT,
                W - RIGHT, Y(v), Y(v));
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", LEFT - 6,
                Y(v) + 4, fabs(v) < step * 1e-9 ? 0.0 : v);
    }
    for (int k = 0; k <= 5; k++) {
        int i = (int)((double)k * (n - 1) / 5);
        char label[48];
        dqn_market_ts_format(kind, ts[i], label, sizeof label);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", X(i),
                H - BOTTOM + 18, label);
    }
    for (int m = 0; m < n_marks; m++)
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#999\" "
                   "stroke-dasharray=\"4 4\"/>\n", X(marks[m]), X(marks[m]), TOP, H - BOTTOM);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
               "stroke=\"#333\"/>\n", LEFT, TOP, pw, ph);
    for (int s = 0; s < n_series; s++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                series[s].color);
        for (int i = 0; i < n; i++)
            if (isfinite(series[s].y[i])) fprintf(f, "%.1f,%.1f ", X(i), Y(series[s].y[i]));
        fputs("\"/>\n", f);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" "
                   "stroke-width=\"3\"/>\n", LEFT + 10, LEFT + 30, TOP + 16 + 18 * s,
                TOP + 16 + 18 * s, series[s].color);
        fprintf(f, "<text x=\"%d\" y=\"%d\">", LEFT + 36, TOP + 20 + 18 * s);
        put_text(f, series[s].label);
        fputs("</text>\n", f);
    }
#undef X
#undef Y
    fputs("</svg>\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return dqn_error_user(DQN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return DQN_OK;
}
