/* A line chart as a standalone SVG file (no dependencies): series of (x, y) points, linear or
 * log10 y axis, ticks, a legend. Used for the ISV history of `dqn health`. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define W 960
#define H 540
#define ML 80   /* margins */
#define MR 220
#define MT 50
#define MB 60

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* the value as plotted: log10 for a log axis (points <= 0 or non-finite are skipped) */
static int plotted(double y, int logy, double *out) {
    if (!isfinite(y) || (logy && y <= 0)) return 0;
    *out = logy ? log10(y) : y;
    return 1;
}

int cli_svg_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                  int logy, const cli_svg_series *series, int n_series) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY, v;
    for (int s = 0; s < n_series; s++)
        for (int i = 0; i < series[s].n; i++) {
            if (!isfinite(series[s].x[i]) || !plotted(series[s].y[i], logy, &v)) continue;
            x0 = fmin(x0, series[s].x[i]);
            x1 = fmax(x1, series[s].x[i]);
            y0 = fmin(y0, v);
            y1 = fmax(y1, v);
        }
    if (!(x0 <= x1)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;   /* nothing to plot: empty axes */
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) y0 -= 0.5, y1 += 0.5;
    if (logy) y0 = floor(y0), y1 = ceil(y1);
    FILE *f = fopen(path, "w");
    if (!f) return cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    double pw = W - ML - MR, ph = H - MT - MB;
#define PX(x) (ML + ((x) - x0) / (x1 - x0) * pw)
#define PY(y) (MT + ph - ((y) - y0) / (y1 - y0) * ph)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"16\">", ML);
    xml_text(f, title);
    fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
               "stroke=\"#444\"/>\n", ML, MT, pw, ph);
    for (int k = 0; k <= 5; k++) {   /* ticks: 6 on x; on y, each decade (log) or 6 */
        double x = x0 + (x1 - x0) * k / 5.0;
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.6g</text>\n", PX(x),
                H - MB + 18, x);
    }
    int ny = logy ? (int)(y1 - y0) : 5;
    if (ny > 12) ny = 12;
    for (int k = 0; k <= ny; k++) {
        double y = y0 + (y1 - y0) * k / (ny ? ny : 1);
        fprintf(f, "<line x1=\"%d\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML,
                ML + pw, PY(y), PY(y));
        if (logy) fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">1e%.3g</text>\n",
                          ML - 6, PY(y) + 4, y);
        else fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n", ML - 6,
                     PY(y) + 4, y);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%d\" text-anchor=\"middle\">", ML + pw / 2, H - 18);
    xml_text(f, xlabel);
    fprintf(f, "</text>\n<text x=\"18\" y=\"%.0f\" text-anchor=\"middle\" "
               "transform=\"rotate(-90 18 %.0f)\">", MT + ph / 2, MT + ph / 2);
    xml_text(f, ylabel);
    fputs("</text>\n", f);
    for (int s = 0; s < n_series; s++) {
        const char *col = palette[s % (int)(sizeof palette / sizeof palette[0])];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", col,
                s >= 10 ? " stroke-dasharray=\"4 3\"" : "");
        for (int i = 0; i < series[s].n; i++)
            if (isfinite(series[s].x[i]) && plotted(series[s].y[i], logy, &v))
                fprintf(f, "%.1f,%.1f ", PX(series[s].x[i]), PY(v));
        fputs("\"/>\n", f);
        double ly = MT + 14 + 16 * s;
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
                   "stroke-width=\"2\"%s/>\n", ML + pw + 12, ML + pw + 32, ly - 4, ly - 4, col,
                s >= 10 ? " stroke-dasharray=\"4 3\"" : "");
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">", ML + pw + 38, ly);
        xml_text(f, series[s].name);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
#undef PX
#undef PY
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return cli_error(CLI_FAIL, "cannot write %s: %s", path, strerror(errno));
    return CLI_OK;
}
