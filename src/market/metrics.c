/* The performance metrics of a return series and the buy-and-hold baseline (docs/market.md gives
 * the definitions; one period's accounting is market/period.h, shared with the device). */
#include <math.h>

#include "market/market.h"

void dqn_market_metrics_of(const double *R, const double *turnover, const double *gross, int n,
                           double periods_per_year, dqn_market_metrics *m) {
    double equity = 1, peak = 1, mdd = 0, sum = 0, traded = 0;
    int in_market = 0, hits = 0;
    for (int t = 0; t < n; t++) {
        equity *= fmax(1.0 + R[t], 0.0);
        peak = fmax(peak, equity);
        mdd = fmax(mdd, 1.0 - equity / peak);
        sum += R[t];
        traded += turnover[t];
        if (gross[t] > 0) {
            in_market++;
            hits += R[t] > 0;
        }
    }
    double mean = n > 0 ? sum / n : 0, var = 0;
    for (int t = 0; t < n; t++) var += (R[t] - mean) * (R[t] - mean);
    double sd = n > 1 ? sqrt(var / (n - 1)) : 0;
    m->periods = n;
    m->total_return = equity - 1.0;
    m->annual_return = n > 0 ? pow(equity, periods_per_year / n) - 1.0 : 0;
    m->sharpe = sd > 0 ? mean / sd * sqrt(periods_per_year) : 0;
    m->max_drawdown = mdd;
    m->turnover = n > 0 ? traded / n : 0;
    m->hit_rate = in_market ? (double)hits / in_market : NAN;
}

void dqn_market_buy_hold(const dqn_market_data *d, int from, int to, double cost,
                         double holding, double *R, double *turnover, double *gross) {
    int A = d->assets;
    const double *p0 = d->price + (size_t)from * A;
    double before = 1.0; /* value of the basket relative to row from */
    for (int t = from + 1; t <= to; t++) {
        double now = 0;
        for (int a = 0; a < A; a++) now += d->price[(size_t)t * A + a] / p0[a];
        now /= A;
        int first = t == from + 1;
        R[t - from - 1] = now / before - 1.0 - holding - (first ? cost : 0.0);
        turnover[t - from - 1] = first ? 1.0 : 0.0;
        gross[t - from - 1] = 1.0;
        before = now;
    }
}
