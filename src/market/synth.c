/* The seeded synthetic market, the default data: every draw is Philox keyed by (seed,
 * DQN_STREAM_MARKET_DATA, counter), so the table is a function of the config alone.
 *
 * Row t (business days from 2000-01-03) holds each asset's price and, as features, each asset's
 * signal s_t,a and synth_noise_features columns of N(0, 1) noise. Between rows t-1 and t:
 *   r_t,a = drift_m + vol_m * (k * s_t-1,a + sqrt(1 - k^2) * e_t,a),  p_t,a = p_t-1,a exp(r_t,a)
 *   e_t,a = sqrt(rho) g_t + sqrt(1 - rho) u_t,a   (g, u iid N(0, 1): noise correlation rho)
 *   regime m: calm (drift +synth_drift, vol synth_vol) or volatile (-synth_drift, 2 synth_vol),
 *   switching with probability synth_switch after each row
 *   s_t,a = SIGNAL_AR s_t-1,a + sqrt(1 - SIGNAL_AR^2) z_t,a   (stationary N(0, 1))
 * so corr(s_t,a, r_t+1,a) = k = synth_signal: a weak signal, known at t, about the next period. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"
#include "market/market.h"

#define SIGNAL_AR 0.8
#define PI_F64 3.14159265358979323846

typedef struct {
    uint64_t seed, k;
} draws;

static double uniform(draws *r) {
    return dqn_philox_double(r->seed, DQN_STREAM_MARKET_DATA, r->k++);
}

/* Box-Muller; 1 - u is in (0, 1], so the log is finite */
static double gauss(draws *r) {
    double u1 = uniform(r), u2 = uniform(r);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * PI_F64 * u2);
}

dqn_status dqn_market_synth(const dqn_config *c, dqn_market_data *d) {
    memset(d, 0, sizeof *d);
    int T = c->synth_rows, A = c->synth_assets, F = A + c->synth_noise_features;
    d->rows = T;
    d->assets = A;
    d->features = F;
    d->ts_kind = DQN_TS_DATE;
    snprintf(d->source, sizeof d->source, "synthetic");
    snprintf(d->ts_name, sizeof d->ts_name, "timestamp");
    d->ts = malloc((size_t)T * sizeof *d->ts);
    d->price = malloc((size_t)T * A * sizeof *d->price);
    d->feat = malloc((size_t)T * F * sizeof *d->feat);
    d->asset_names = calloc((size_t)A, sizeof *d->asset_names);
    d->feature_names = calloc((size_t)F, sizeof *d->feature_names);
    if (!d->ts || !d->price || !d->feat || !d->asset_names || !d->feature_names) {
        dqn_market_data_free(d);
        return DQN_ERR(DQN_ERR_NOMEM, "synthetic market of %d rows", T);
    }
    for (int a = 0; a < A; a++) {
        snprintf(d->asset_names[a], DQN_CFG_NAME, "asset%d", a);
        snprintf(d->feature_names[a], DQN_CFG_NAME, "signal%d", a);
    }
    for (int j = A; j < F; j++) snprintf(d->feature_names[j], DQN_CFG_NAME, "noise%d", j - A);

    draws r = {c->seed, 0};
    double k = c->synth_signal, rho = c->synth_corr, ar = sqrt(1.0 - SIGNAL_AR * SIGNAL_AR);
    int volatile_regime = 0, weekday = 0; /* 2000-01-03 is a Monday */
    dqn_ts_kind kind;
    dqn_market_ts_parse("2000-01-03", &d->ts[0], &kind);
    for (int a = 0; a < A; a++) {
        d->price[a] = 100.0;
        d->feat[a] = gauss(&r);
    }
    for (int j = A; j < F; j++) d->feat[j] = gauss(&r);
    for (int t = 1; t < T; t++) {
        int step = weekday == 4 ? 3 : 1;
        weekday = (weekday + step) % 7;
        d->ts[t] = d->ts[t - 1] + 86400 * step;
        double drift = volatile_regime ? -c->synth_drift : c->synth_drift;
        double vol = volatile_regime ? 2 * c->synth_vol : c->synth_vol;
        double g = gauss(&r);
        const double *prev = d->price + (size_t)(t - 1) * A, *s = d->feat + (size_t)(t - 1) * F;
        double *price = d->price + (size_t)t * A, *feat = d->feat + (size_t)t * F;
        for (int a = 0; a < A; a++) {
            double e = sqrt(rho) * g + sqrt(1.0 - rho) * gauss(&r);
            price[a] = prev[a] * exp(drift + vol * (k * s[a] + sqrt(1.0 - k * k) * e));
        }
        for (int a = 0; a < A; a++) feat[a] = SIGNAL_AR * s[a] + ar * gauss(&r);
        for (int j = A; j < F; j++) feat[j] = gauss(&r);
        if (uniform(&r) < c->synth_switch) volatile_regime = !volatile_regime;
    }
    return DQN_OK;
}
