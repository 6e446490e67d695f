/* One period's accounting (the formulas of market/market.h's comments), compiled by the C
 * compiler and by nvcc (DQN_HD): the market env's host step, the env_step op on the CPU and its
 * CUDA kernel (envs/market_step.h) run this one text, so they cannot drift apart.
 *
 * Every product that is added goes through DQN_MUL (envs/classic_math.h), which nvcc never
 * contracts into an fma (the C build does not contract), and the log is computed here rather than
 * taken from libm: CUDA's double log is not glibc's (and its own code changes with nvcc's fma
 * contraction), so the host and the device evaluate the same IEEE operations in the same order
 * and the reward has the same bits on both. */
#ifndef DQN_MARKET_PERIOD_H
#define DQN_MARKET_PERIOD_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dqn.h"         /* DQN_CFG_MAX_BRANCHES */
#include "dqn_philox.h" /* DQN_HD */
#include "envs/classic_math.h" /* DQN_MUL */

#define DQN_MARKET_MAX_ASSETS DQN_CFG_MAX_BRANCHES   /* an asset is an action branch */

/* Position of action level k of n: -1 + 2k / (n - 1). */
DQN_HD double dqn_market_position(int k, int n) {
    return -1.0 + DQN_MUL(2.0, (double)k) / (n - 1);
}

/* One period: positions w_prev (each in [-1, 1], per asset) become w at row t's price p0 and are
 * held to row t + 1's price p1. Each asset carries 1/assets of the capital times its position.
 * Returns the net simple return
 *   R = sum_a w_a / A * (p1_a / p0_a - 1) - cost * turnover - holding * gross,
 * turnover = sum_a |w_a - w_prev_a| / A, gross = sum_a |w_a| / A. */
DQN_HD double dqn_market_period(const double *p0, const double *p1, const double *w_prev,
                                const double *w, int assets, double cost, double holding,
                                double *turnover, double *gross) {
    double gain = 0, traded = 0, exposure = 0;
    for (int a = 0; a < assets; a++) {
        gain += DQN_MUL(w[a], p1[a] / p0[a] - 1.0);
        traded += fabs(w[a] - w_prev[a]);
        exposure += fabs(w[a]);
    }
    *turnover = traded / assets;
    *gross = exposure / assets;
    return gain / assets - DQN_MUL(cost, *turnover) - DQN_MUL(holding, *gross);
}

/* log(x) within an ulp, from IEEE adds, products and one division only, so that the host and
 * the device give the same bits: x = 2^k (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), and
 * log(1 + f) = f - (hfsq - s (hfsq + R)) with hfsq = f^2 / 2, s = f / (2 + f) and R = 2z/3 +
 * 2z^2/5 + ... in z = s^2 (atanh's series: |s| <= 0.1716, 11 terms leave under 2^-60; summed as
 * two interleaved chains in z^2, which halves the dependent latency of one Horner chain), k ln 2
 * in two parts whose first times k is exact (fdlibm's arrangement). Not correctly rounded: it is
 * one ulp from glibc's log on a few percent of arguments (tests/test_env_op.c counts them); the
 * reward rounds it to float, where such a difference shows about once in 2^29. x <= 0, NaN and
 * infinity as log's. */
#define DQN_LOG_TERMS 11 /* odd: the two chains below */
DQN_HD double dqn_market_log(double x) {
    if (!(x > 0.0)) return x == 0.0 ? -INFINITY : NAN;
    if (x == INFINITY) return x;
    const double C[DQN_LOG_TERMS] = {
        0x1.5555555555555p-1, 0x1.999999999999ap-2, 0x1.2492492492492p-2, 0x1.c71c71c71c71cp-3,
        0x1.745d1745d1746p-3, 0x1.3b13b13b13b14p-3, 0x1.1111111111111p-3, 0x1.e1e1e1e1e1e1ep-4,
        0x1.af286bca1af28p-4, 0x1.8618618618618p-4, 0x1.642c8590b2164p-4};
    const double LN2_HI = 0x1.62e42feep-1, LN2_LO = 0x1.a39ef35793c76p-33;
    /* x = m 2^ex, m in [1/2, 1), from the bits (frexp's result, without a libm call) */
    int ex = 0;
    if (x < 0x1p-1022) { /* subnormal: scaled up first, exactly */
        x = DQN_MUL(x, 0x1p54);
        ex = -54;
    }
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    ex += (int)(bits >> 52) - 1022;
    bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FE0000000000000ull;
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m < 0x1.6a09e667f3bcdp-1) { /* below sqrt(1/2): into [1, sqrt(2)) */
        m = m + m;
        ex -= 1;
    }
    const double f = m - 1.0; /* exact (Sterbenz) */
    const double s = f / (2.0 + f), z = DQN_MUL(s, s), w = DQN_MUL(z, z);
    /* R / z = E(w) + z O(w): E the even terms C[0], C[2], .., C[10], O the odd ones */
    double even = C[DQN_LOG_TERMS - 1], odd = C[DQN_LOG_TERMS - 2];
    for (int k = DQN_LOG_TERMS - 3; k >= 2; k -= 2) {
        even = DQN_MUL(even, w) + C[k];
        odd = DQN_MUL(odd, w) + C[k - 1];
    }
    even = DQN_MUL(even, w) + C[0];
    const double r = DQN_MUL(z, even + DQN_MUL(z, odd));
    const double hfsq = DQN_MUL(0.5, DQN_MUL(f, f)), k = (double)ex;
    return DQN_MUL(k, LN2_HI) - ((hfsq - (DQN_MUL(s, hfsq + r) + DQN_MUL(k, LN2_LO))) - f);
}

/* log(1 + R), 1 + R floored at DQN_MARKET_RUIN (a short through a price more than doubling),
 * by dqn_market_log: the same bits on the host and the device. */
#define DQN_MARKET_RUIN 1e-9
DQN_HD double dqn_market_log_return(double R) {
    return dqn_market_log(fmax(1.0 + R, DQN_MARKET_RUIN));
}

#endif
