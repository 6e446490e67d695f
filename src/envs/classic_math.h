/* sin and cos for the classic envs' device code, compiled by the C compiler and by nvcc (DQN_HD).
 *
 * The CPU envs call glibc's sin and cos (numpy's, so that trajectories match Gymnasium bit for
 * bit). CUDA's double sin and cos are not glibc's: they differ in the last bit on a share of
 * inputs, and one such bit makes a chaotic trajectory (the acrobot's, the pole's) drift. These
 * compute the correctly rounded result instead: range reduction by a 159-bit pi/2 and the Taylor
 * series in double-double arithmetic, accurate to about 2^-100 relative, so that rounding it to a
 * double gives sin(x) rounded to nearest unless x lies within about 2^-47 ulp of a rounding
 * boundary. glibc's results are not promised correctly rounded (0.52 ulp); where glibc's and
 * these agree is measured, not guaranteed: tests/test_env_math.c compares the two over every
 * argument the envs' CPU rollouts produce.
 *
 * The host and the device compute the same bits by construction: every operation is an IEEE
 * double add, multiply or fma (correctly rounded everywhere), and no product may be contracted
 * into an fma by the compiler (the C build is ISO C, which does not contract; on the device every
 * product whose result is added goes through DQN_MUL, __dmul_rn, which nvcc never fuses).
 *
 * Valid for |x| < 2^28 (the envs stay far inside); outside that the reduction loses bits. */
#ifndef DQN_CLASSIC_MATH_H
#define DQN_CLASSIC_MATH_H
#include <math.h>

#include "dqn_philox.h" /* DQN_HD */

#if defined(__CUDA_ARCH__)
#define DQN_MUL(a, b) __dmul_rn((a), (b))
#else
#define DQN_MUL(a, b) ((a) * (b))
#endif

typedef struct {
    double hi, lo;
} dqn_dd;

DQN_HD dqn_dd dqn_dd_make(double hi, double lo) {
    dqn_dd r;
    r.hi = hi;
    r.lo = lo;
    return r;
}

/* a + b exactly as hi + lo */
DQN_HD dqn_dd dqn_dd_two_sum(double a, double b) {
    double s = a + b, bb = s - a;
    return dqn_dd_make(s, (a - (s - bb)) + (b - bb));
}

/* the same for |a| >= |b| */
DQN_HD dqn_dd dqn_dd_fast(double a, double b) {
    double s = a + b;
    return dqn_dd_make(s, b - (s - a));
}

DQN_HD dqn_dd dqn_dd_add(dqn_dd a, dqn_dd b) {
    dqn_dd s = dqn_dd_two_sum(a.hi, b.hi), t = dqn_dd_two_sum(a.lo, b.lo);
    s = dqn_dd_fast(s.hi, s.lo + t.hi);
    return dqn_dd_fast(s.hi, s.lo + t.lo);
}

DQN_HD dqn_dd dqn_dd_add_d(dqn_dd a, double b) {
    dqn_dd s = dqn_dd_two_sum(a.hi, b);
    return dqn_dd_fast(s.hi, s.lo + a.lo);
}

DQN_HD dqn_dd dqn_dd_mul(dqn_dd a, dqn_dd b) {
    double p = DQN_MUL(a.hi, b.hi);
    double e = fma(a.hi, b.hi, -p);
    e = fma(a.hi, b.lo, e);
    e = fma(a.lo, b.hi, e);
    return dqn_dd_fast(p, e);
}

/* Taylor coefficients (-1)^k / (2k+1)! and (-1)^k / (2k)! as double-doubles (hi, lo), then the
 * tail's doubles: the terms past r^15 (sin) and r^16 (cos) are below 2^-53 of the result at
 * |r| <= 0.8, so a double Horner is enough for them. */
#define DQN_SIN_DD 8
#define DQN_SIN_TAIL 6
#define DQN_COS_DD 9
#define DQN_COS_TAIL 6

/* sin(r) and cos(r) for |r| <= 0.8, r = rh + rl */
DQN_HD void dqn_sincos_poly(dqn_dd r, double *s, double *c) {
    const double SD[DQN_SIN_DD][2] = {
        {0x1p+0, 0.0},
        {-0x1.5555555555555p-3, -0x1.5555555555555p-57},
        {0x1.1111111111111p-7, 0x1.1111111111111p-63},
        {-0x1.a01a01a01a01ap-13, -0x1.a01a01a01a01ap-73},
        {0x1.71de3a556c734p-19, -0x1.c154f8ddc6c00p-73},
        {-0x1.ae64567f544e4p-26, 0x1.c062e06d1f209p-80},
        {0x1.6124613a86d09p-33, 0x1.f28e0cc748ebep-87},
        {-0x1.ae7f3e733b81fp-41, -0x1.1d8656b0ee8cbp-97}};
    const double ST[DQN_SIN_TAIL] = {0x1.952c77030ad4ap-49, -0x1.2f49b46814157p-57,
                                     0x1.71b8ef6dcf572p-66, -0x1.761b41316381ap-75,
                                     0x1.3f3ccdd165fa9p-84, -0x1.d1ab1c2dccea3p-94};
    const double CD[DQN_COS_DD][2] = {
        {0x1p+0, 0.0},
        {-0x1p-1, 0.0},
        {0x1.5555555555555p-5, 0x1.5555555555555p-59},
        {-0x1.6c16c16c16c17p-10, 0x1.f49f49f49f49fp-65},
        {0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-76},
        {-0x1.27e4fb7789f5cp-22, -0x1.cbbc05b4fa99ap-76},
        {0x1.1eed8eff8d898p-29, -0x1.2aec959e14c06p-83},
        {-0x1.93974a8c07c9dp-37, -0x1.05d6f8a2efd1fp-92},
        {0x1.ae7f3e733b81fp-45, 0x1.1d8656b0ee8cbp-101}};
    const double CT[DQN_COS_TAIL] = {-0x1.6827863b97d97p-53, 0x1.e542ba4020225p-62,
                                     -0x1.0ce396db7f853p-70, 0x1.f2cf01972f578p-80,
                                     -0x1.88e85fc6a4e5ap-89, 0x1.0a18a2635085dp-98};
    dqn_dd r2 = dqn_dd_mul(r, r);
    double ts = ST[DQN_SIN_TAIL - 1], tc = CT[DQN_COS_TAIL - 1];
    for (int k = DQN_SIN_TAIL - 2; k >= 0; k--) ts = fma(ts, r2.hi, ST[k]);
    for (int k = DQN_COS_TAIL - 2; k >= 0; k--) tc = fma(tc, r2.hi, CT[k]);
    dqn_dd as = dqn_dd_make(ts, 0.0), ac = dqn_dd_make(tc, 0.0);
    for (int k = DQN_SIN_DD - 1; k >= 0; k--)
        as = dqn_dd_add(dqn_dd_mul(as, r2), dqn_dd_make(SD[k][0], SD[k][1]));
    for (int k = DQN_COS_DD - 1; k >= 0; k--)
        ac = dqn_dd_add(dqn_dd_mul(ac, r2), dqn_dd_make(CD[k][0], CD[k][1]));
    as = dqn_dd_mul(as, r);
    *s = as.hi + as.lo;
    *c = ac.hi + ac.lo;
}

/* sin(x) and cos(x), each rounded to nearest (see the top of the file) */
DQN_HD void dqn_sincos_cr(double x, double *s, double *c) {
    if (fabs(x) < 0x1p-27) { /* sin x = x and cos x = 1 once rounded (also -0 and subnormals) */
        *s = x;
        *c = 1.0;
        return;
    }
    if (!(fabs(x) < 0x1p28)) { /* non-finite: NaN, as glibc; past the valid range: the same */
        *s = *c = x - x + (x != x ? x : NAN);
        return;
    }
    /* pi/2 = P1 + P2 + P3 to 159 bits; k = x * 2/pi to nearest (a k one off near the odd
     * multiples of pi/4 leaves |r| below 0.8, inside the series' range) */
    const double P1 = 0x1.921fb54442d18p+0, P2 = 0x1.1a62633145c07p-54,
                 P3 = -0x1.f1976b7ed8fbcp-110;
    double k = rint(DQN_MUL(x, 0x1.45f306dc9c883p-1));
    double p1 = DQN_MUL(k, P1), e1 = fma(k, P1, -p1);
    double p2 = DQN_MUL(k, P2), e2 = fma(k, P2, -p2);
    dqn_dd r = dqn_dd_two_sum(x, -p1);
    r = dqn_dd_add_d(r, -e1);
    r = dqn_dd_add_d(r, -p2);
    r = dqn_dd_add_d(r, -e2);
    r = dqn_dd_add_d(r, -DQN_MUL(k, P3));
    double sr, cr;
    dqn_sincos_poly(r, &sr, &cr);
    int q = (int)((long long)k & 3);
    *s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
    *c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
}

DQN_HD double dqn_sin_cr(double x) {
    double s, c;
    dqn_sincos_cr(x, &s, &c);
    return s;
}

DQN_HD double dqn_cos_cr(double x) {
    double s, c;
    dqn_sincos_cr(x, &s, &c);
    return c;
}

#endif
