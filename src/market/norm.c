/* The observation table: log-returns and features, standardised with the statistics of one
 * training window only, so that nothing after the window shapes what the agent sees. */
#include <math.h>

#include "market/market.h"

static double log_return(const dqn_market_data *d, int t, int a) {
    return log(d->price[(size_t)t * d->assets + a] / d->price[(size_t)(t - 1) * d->assets + a]);
}

/* column c at row t (returns need t >= 1) */
static double value(const dqn_market_data *d, int t, int c) {
    return c < d->assets ? log_return(d, t, c) : d->feat[(size_t)t * d->features + c - d->assets];
}

void dqn_market_norm(const dqn_market_data *d, int lo, int hi, double *mean, double *std) {
    for (int c = 0; c < dqn_market_cols(d); c++) {
        int first = c < d->assets ? lo + 1 : lo, n = hi - first;
        double m = 0, v = 0;
        for (int t = first; t < hi; t++) m += value(d, t, c);
        m = n > 0 ? m / n : 0;
        for (int t = first; t < hi; t++) v += (value(d, t, c) - m) * (value(d, t, c) - m);
        double s = n > 0 ? sqrt(v / n) : 0;
        mean[c] = m;
        std[c] = s > 1e-12 ? s : 1.0;
    }
}

void dqn_market_zscore(const dqn_market_data *d, const double *mean, const double *std, float *z) {
    int cols = dqn_market_cols(d);
    for (int t = 0; t < d->rows; t++)
        for (int c = 0; c < cols; c++) {
            double x = t == 0 && c < d->assets ? 0 : (value(d, t, c) - mean[c]) / std[c];
            z[(size_t)t * cols + c] = (float)fmax(-DQN_MARKET_ZCLIP, fmin(DQN_MARKET_ZCLIP, x));
        }
}
