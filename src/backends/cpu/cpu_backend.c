/* The CPU backend: every op of backends/ops.def on host memory, run eagerly on the calling
 * thread (the GEMMs may use OpenBLAS's threads). It is the reference the CUDA backend is checked
 * against: reductions of a loss or a norm, LayerNorm statistics and means run in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/gemm.h"
#include "core/error.h"
#include "dqn_philox.h"

static dqn_status check_branches(const char *op, const dqn_branches *br) {
    REQUIRE(br, "%s: branches is NULL", op);
    REQUIRE(br->D >= 1 && br->D <= DQN_MAX_BRANCHES, "%s: D = %d branches, allowed 1..%d", op,
            br->D, DQN_MAX_BRANCHES);
    int off = 0;
    for (int b = 0; b < br->D; b++) {
        REQUIRE(br->n[b] >= 1 && br->off[b] == off, "%s: branch %d has size %d at offset %d", op, b,
                br->n[b], br->off[b]);
        off += br->n[b];
    }
    REQUIRE(br->A == off, "%s: A = %d, branch sizes sum to %d", op, br->A, off);
    return DQN_OK;
}

/* Actions act[B, D] must each lie in [0, n_b). */
static dqn_status check_actions(const char *op, const int32_t *act, int B, const dqn_branches *br) {
    for (int s = 0; s < B; s++)
        for (int b = 0; b < br->D; b++) {
            int32_t a = act[(size_t)s * br->D + b];
            REQUIRE(a >= 0 && a < br->n[b], "%s: action[%d, %d] = %d, branch size %d", op, s, b,
                    (int)a, br->n[b]);
        }
    return DQN_OK;
}

/* ---- memory ---- */

static dqn_status cpu_alloc(dqn_backend *be, void **p, size_t bytes) {
    (void)be;
    *p = calloc(1, bytes ? bytes : 1);
    if (!*p) return DQN_ERR(DQN_ERR_NOMEM, "cpu alloc of %zu bytes", bytes);
    return DQN_OK;
}

static void cpu_free(dqn_backend *be, void *p) {
    (void)be;
    free(p);
}

static dqn_status cpu_copy(dqn_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, src, bytes);
    return DQN_OK;
}

static dqn_status cpu_fill(dqn_backend *be, float *x, float v, size_t n) {
    (void)be;
    EACH(i, n, x[i] = v);
    return DQN_OK;
}

static dqn_status cpu_sync(dqn_backend *be) {
    (void)be;
    return DQN_OK;
}

static void cpu_destroy(dqn_backend *be) {
    if (be) free(be->impl);
    free(be);
}

/* ---- dense layers ---- */

static dqn_status cpu_linear_fwd(dqn_backend *be, const float *X, const float *W, const float *b,
                                 float *Y, int M, int K, int N) {
    (void)be;
    REQUIRE(M > 0 && K > 0 && N > 0, "linear_fwd: M=%d K=%d N=%d must be positive", M, K, N);
    return dqn_gemm_xwt(X, W, b, Y, M, K, N);
}

static dqn_status cpu_linear_bwd(dqn_backend *be, const float *X, const float *W, const float *dY,
                                 float *dX, float *dW, float *db, int M, int K, int N) {
    (void)be;
    REQUIRE(M > 0 && K > 0 && N > 0, "linear_bwd: M=%d K=%d N=%d must be positive", M, K, N);
    if (dX) DQN_TRY(dqn_gemm_dyw(dY, W, dX, M, K, N));
    DQN_TRY(dqn_gemm_dytx(dY, X, dW, M, K, N));
    if (db) cpu_colsum(dY, db, M, N);
    return DQN_OK;
}

void cpu_colsum(const float *dY, float *db, int M, int N) {
    EACH(j, (size_t)N, db[j] = 0.0f);
    for (int m = 0; m < M; m++) {
        const float *restrict row = dY + (size_t)m * N;
        EACH(j, (size_t)N, db[j] += row[j]);
    }
}

static dqn_status cpu_axpy(dqn_backend *be, float a, const float *x, float *y, size_t n) {
    (void)be;
    EACH(i, n, y[i] += a * x[i]);
    return DQN_OK;
}

/* ---- activations ---- */

static dqn_status cpu_relu_fwd(dqn_backend *be, const float *x, float *y, size_t n) {
    (void)be;
    EACH(i, n, y[i] = x[i] > 0.0f ? x[i] : 0.0f);
    return DQN_OK;
}

/* c ? a : b through bit masks: gcc -O2 vectorises these where it does not if-convert a select */
CPU_INLINE double blend_d(int c, double a, double b) {
    uint64_t m = -(uint64_t)c, ab, bb;
    memcpy(&ab, &a, sizeof ab);
    memcpy(&bb, &b, sizeof bb);
    ab = (ab & m) | (bb & ~m);
    memcpy(&a, &ab, sizeof a);
    return a;
}

CPU_INLINE float blend_f(int c, float a, float b) {
    uint32_t m = -(uint32_t)c, ab, bb;
    memcpy(&ab, &a, sizeof ab);
    memcpy(&bb, &b, sizeof bb);
    ab = (ab & m) | (bb & ~m);
    memcpy(&a, &ab, sizeof a);
    return a;
}

/* exp(x) = 2^k (1 + e) for |x| <= 1000 (NaN gives NaN) in double, branch-free so that it
 * vectorises: x = k ln2 + r with |r| <= ln2 / 2, e = expm1(r) by its Taylor series to r^13 (the
 * rest below 1e-17), 2^k from the bits of the rounded k (a normal double for |x| <= 708). */
CPU_INLINE void exp_split(double x, double *two_k, double *e) {
    const double ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    const double shift = 0x1.8p52; /* adding it rounds to an integer held in the low bits */
    double t = x * 0x1.71547652b82fep0 + shift, k = t - shift;
    double r = (x - k * ln2_hi) - k * ln2_lo;
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    *e = p * r * r + r;
    uint64_t tb;
    memcpy(&tb, &t, sizeof tb);
    tb = (tb + 1023u) << 52; /* k's low bits plus the bias, into the exponent field */
    memcpy(two_k, &tb, sizeof tb);
}

/* expm1(x) for x <= 0 as a float: within 0.5 ulp (checked against expm1 in double over every
 * float in [-40, 0]); NaN stays NaN; below -30 the result is -1 whatever the argument */
CPU_INLINE float expm1_neg(float x) {
    double t, e;
    exp_split(blend_d(x < -30.0f, -30.0, x), &t, &e);
    return (float)(t * e + (t - 1.0));
}

/* 1 / (1 + exp(-x)) as a float, in double (NaN stays NaN) */
CPU_INLINE float sigmoid_f(float x) {
    double t, e, z = -(double)x;
    z = blend_d(z < -700.0, -700.0, z);
    z = blend_d(z > 700.0, 700.0, z);
    exp_split(z, &t, &e);
    return (float)(1.0 / (1.0 + (t * e + t)));
}

CPU_INLINE void elu_fwd_body(const float *x, float *y, size_t n) {
    EACH(i, n, float e = expm1_neg(x[i]); y[i] = blend_f(x[i] > 0.0f, x[i], e));
}
CPU_CLONE(elu_fwd, (const float *x, float *y, size_t n), (x, y, n))

static dqn_status cpu_elu_fwd(dqn_backend *be, const float *x, float *y, size_t n) {
    (void)be;
    elu_fwd_any(x, y, n);
    return DQN_OK;
}

static dqn_status cpu_linear_act_fwd(dqn_backend *be, const float *X, const float *W,
                                     const float *b, float *Y, int M, int K, int N, dqn_act act) {
    REQUIRE(act >= DQN_ACT_NONE && act <= DQN_ACT_ELU, "linear_act_fwd: act = %d", (int)act);
    dqn_status st;
    if (act == DQN_ACT_RELU && M > 0 && K > 0 && N > 0 &&
        dqn_gemm_xwt_relu(X, W, K, b, Y, M, K, N, &st))
        return st;
    DQN_TRY(cpu_linear_fwd(be, X, W, b, Y, M, K, N));
    if (act == DQN_ACT_ELU) return cpu_elu_fwd(be, Y, Y, (size_t)M * (size_t)N);
    return act == DQN_ACT_RELU ? cpu_relu_fwd(be, Y, Y, (size_t)M * (size_t)N) : DQN_OK;
}

static dqn_status cpu_relu_bwd(dqn_backend *be, const float *y, const float *dy, float *dx,
                               size_t n) {
    (void)be;
    EACH(i, n, float on = y[i] > 0.0f; dx[i] = dy[i] * on);
    return DQN_OK;
}

static dqn_status cpu_elu_bwd(dqn_backend *be, const float *y, const float *dy, float *dx,
                              size_t n) {
    (void)be;
    /* the slope as a blend (gcc -O2 does not if-convert the select); equal to the select for
     * every y but +inf, which ELU outputs only for an input of +inf */
    EACH(i, n, float pos = y[i] > 0.0f; dx[i] = dy[i] * (pos + (1.0f - pos) * (y[i] + 1.0f)));
    return DQN_OK;
}

/* ---- GRN gate ---- */

CPU_INLINE void gate_fwd_body(const float *h, const float *g, float *r, size_t M, size_t d) {
    for (size_t m = 0; m < M; m++) {
        const float *restrict hm = h + m * d, *restrict ga = g + m * 2 * d, *restrict gb = ga + d;
        float *restrict rm = r + m * d;
        EACH(j, d, float s = sigmoid_f(gb[j]); rm[j] = hm[j] + ga[j] * s);
    }
}
CPU_CLONE(gate_fwd, (const float *h, const float *g, float *r, size_t M, size_t d),
          (h, g, r, M, d))

static dqn_status cpu_gate_fwd(dqn_backend *be, const float *h, const float *g, float *r, int M,
                               int d) {
    (void)be;
    REQUIRE(M >= 0 && d >= 0, "gate_fwd: M=%d d=%d", M, d);
    gate_fwd_any(h, g, r, (size_t)M, (size_t)d);
    return DQN_OK;
}

/* dr may be dh (in place): each element of dr is read before dh is written */
CPU_INLINE void gate_bwd_body(const float *g, const float *dr, float *dg, size_t M, size_t d) {
    for (size_t m = 0; m < M; m++) {
        const float *restrict ga = g + m * 2 * d, *restrict gb = ga + d, *restrict drm = dr + m * d;
        float *restrict dga = dg + m * 2 * d, *restrict dgb = dga + d;
        EACH(j, d, float s = sigmoid_f(gb[j]); dga[j] = drm[j] * s;
             dgb[j] = drm[j] * ga[j] * s * (1.0f - s));
    }
}
CPU_CLONE(gate_bwd, (const float *g, const float *dr, float *dg, size_t M, size_t d),
          (g, dr, dg, M, d))

static dqn_status cpu_gate_bwd(dqn_backend *be, const float *g, const float *dr, float *dh,
                               float *dg, int M, int d) {
    (void)be;
    REQUIRE(M >= 0 && d >= 0, "gate_bwd: M=%d d=%d", M, d);
    gate_bwd_any(g, dr, dg, (size_t)M, (size_t)d);
    if (dh != dr && M > 0 && d > 0) memcpy(dh, dr, (size_t)M * d * sizeof *dh);
    return DQN_OK;
}

/* ---- LayerNorm ---- */

#define LN_EPS 1e-5

static dqn_status cpu_layernorm_fwd(dqn_backend *be, const float *x, const float *gamma,
                                    const float *beta, float *y, float *mean, float *rstd, int M,
                                    int d) {
    (void)be;
    REQUIRE(M >= 0 && d > 0, "layernorm_fwd: M=%d d=%d", M, d);
    for (size_t m = 0; m < (size_t)M; m++) {
        const float *restrict xm = x + m * d;
        double sum[LANES] = {0}, sq[LANES] = {0}, mu = 0, var = 0;
        int j = 0;
        for (; j + LANES <= d; j += LANES)
            for (int l = 0; l < LANES; l++) sum[l] += xm[j + l];
        for (; j < d; j++) mu += xm[j];
        for (int l = 0; l < LANES; l++) mu += sum[l];
        mu /= d;
        for (j = 0; j + LANES <= d; j += LANES)
            for (int l = 0; l < LANES; l++) sq[l] += (xm[j + l] - mu) * (xm[j + l] - mu);
        for (; j < d; j++) var += (xm[j] - mu) * (xm[j] - mu);
        for (int l = 0; l < LANES; l++) var += sq[l];
        float mf = (float)mu, rs = (float)(1.0 / sqrt(var / d + LN_EPS));
        mean[m] = mf;
        rstd[m] = rs;
        float *restrict ym = y + m * d;
        EACH(k, (size_t)d, ym[k] = (xm[k] - mf) * rs * gamma[k] + beta[k]);
    }
    return DQN_OK;
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma, xhat = (x - mean) * rstd */
static dqn_status cpu_layernorm_bwd(dqn_backend *be, const float *x, const float *gamma,
                                    const float *mean, const float *rstd, const float *dy,
                                    float *dx, float *dgamma, float *dbeta, int M, int d) {
    (void)be;
    REQUIRE(M >= 0 && d > 0, "layernorm_bwd: M=%d d=%d", M, d);
    EACH(k, (size_t)d, dgamma[k] = 0.0f; dbeta[k] = 0.0f);
    for (size_t m = 0; m < (size_t)M; m++) {
        const float *restrict xm = x + m * d, *restrict dym = dy + m * d;
        float mf = mean[m], rs = rstd[m];
        double sg[LANES] = {0}, sgx[LANES] = {0}, mg = 0, mgx = 0;
        int j = 0;
        for (; j + LANES <= d; j += LANES)
            for (int l = 0; l < LANES; l++) {
                float gj = dym[j + l] * gamma[j + l];
                sg[l] += gj;
                sgx[l] += gj * ((xm[j + l] - mf) * rs);
            }
        for (; j < d; j++) {
            float gj = dym[j] * gamma[j];
            mg += gj;
            mgx += gj * ((xm[j] - mf) * rs);
        }
        for (int l = 0; l < LANES; l++) {
            mg += sg[l];
            mgx += sgx[l];
        }
        float a = (float)(mg / d), c = (float)(mgx / d);
        float *restrict dxm = dx + m * d;
        EACH(k, (size_t)d, float xh = (xm[k] - mf) * rs; dgamma[k] += dym[k] * xh;
             dbeta[k] += dym[k]; dxm[k] = rs * (dym[k] * gamma[k] - a - xh * c));
    }
    return DQN_OK;
}

/* ---- IQN ---- */

/* cos(k theta), theta = pi tau, by rotations in double (exact to float rounding for the tens of
 * terms used): the first COS_BLOCK angles one step at a time, then every block of COS_BLOCK
 * at once by rotating it through COS_BLOCK * theta. The first steps run for LANES rows at once
 * (one row in each element, then transposed); a block is one vector value. The arithmetic of
 * each element is the one-row scalar code's (no FMA). */
enum { COS_BLOCK = LANES };

/* the blocks of one row from its first COS_BLOCK angles */
CPU_INLINE void cos_row(cpu_vd c, cpu_vd s, float *Cr, int n_cos) {
    const double cb = c[COS_BLOCK - 1], sb = s[COS_BLOCK - 1];
    for (int k0 = 0; k0 < n_cos; k0 += COS_BLOCK) {
        cpu_vf f = __builtin_convertvector(c, cpu_vf);
        if (n_cos - k0 >= COS_BLOCK)
            memcpy(Cr + k0, &f, sizeof f);
        else
            for (int j = 0; j < n_cos - k0; j++) Cr[k0 + j] = f[j];
        cpu_vd cn = c * cb - s * sb;
        s = s * cb + c * sb;
        c = cn;
    }
}

CPU_INLINE void cos_embed_body(const float *tau, float *C, size_t R, int n_cos) {
    const double pi = 3.14159265358979323846;
    size_t r = 0;
    for (; r + LANES <= R; r += LANES) {
        cpu_vd c[COS_BLOCK], s[COS_BLOCK]; /* [j][i]: cos, sin of (j + 1) theta of row r + i */
        for (int i = 0; i < LANES; i++) c[0][i] = cos(pi * tau[r + i]), s[0][i] = sin(pi * tau[r + i]);
        for (int j = 1; j < COS_BLOCK; j++) {
            c[j] = c[j - 1] * c[0] - s[j - 1] * s[0];
            s[j] = s[j - 1] * c[0] + c[j - 1] * s[0];
        }
        cpu_vd ct[LANES], st[LANES];
        cpu_transpose8(c, ct);
        cpu_transpose8(s, st);
        for (int i = 0; i < LANES; i++) cos_row(ct[i], st[i], C + (r + i) * n_cos, n_cos);
    }
    for (; r < R; r++) {
        cpu_vd c, s;
        c[0] = cos(pi * tau[r]), s[0] = sin(pi * tau[r]);
        for (int j = 1; j < COS_BLOCK; j++) {
            c[j] = c[j - 1] * c[0] - s[j - 1] * s[0];
            s[j] = s[j - 1] * c[0] + c[j - 1] * s[0];
        }
        cos_row(c, s, C + r * n_cos, n_cos);
    }
}
CPU_CLONE(cos_embed, (const float *tau, float *C, size_t R, int n_cos), (tau, C, R, n_cos))

static dqn_status cpu_cos_embed(dqn_backend *be, const float *tau, float *C, int R, int n_cos) {
    (void)be;
    REQUIRE(R >= 0 && n_cos >= 0, "cos_embed: R=%d n_cos=%d", R, n_cos);
    cos_embed_any(tau, C, (size_t)R, n_cos);
    return DQN_OK;
}

static dqn_status cpu_mul_bcast_fwd(dqn_backend *be, const float *h, const float *phi, float *z,
                                    int B, int T, int d) {
    (void)be;
    REQUIRE(B >= 0 && T >= 0 && d >= 0, "mul_bcast_fwd: B=%d T=%d d=%d", B, T, d);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        const float *restrict hs = h + r / T * d, *restrict pr = phi + r * d;
        float *restrict zr = z + r * d;
        EACH(k, (size_t)d, zr[k] = hs[k] * pr[k]);
    }
    return DQN_OK;
}

static dqn_status cpu_mul_bcast_bwd(dqn_backend *be, const float *h, const float *phi,
                                    const float *dz, float *dh, float *dphi, int B, int T, int d) {
    (void)be;
    REQUIRE(B >= 0 && T >= 0 && d >= 0, "mul_bcast_bwd: B=%d T=%d d=%d", B, T, d);
    for (size_t s = 0; s < (size_t)B; s++) {
        const float *restrict hs = h + s * d;
        float *restrict dhs = dh + s * d;
        EACH(k, (size_t)d, dhs[k] = 0.0f);
        for (size_t r = s * T; r < (s + 1) * T; r++) {
            const float *restrict dzr = dz + r * d, *restrict pr = phi + r * d;
            float *restrict dpr = dphi + r * d;
            EACH(k, (size_t)d, dhs[k] += dzr[k] * pr[k]; dpr[k] = dzr[k] * hs[k]);
        }
    }
    return DQN_OK;
}

static dqn_status cpu_concat_bcast_fwd(dqn_backend *be, const float *z, const float *h, float *out,
                                       int B, int T, int d) {
    (void)be;
    REQUIRE(B >= 0 && T >= 0 && d >= 0, "concat_bcast_fwd: B=%d T=%d d=%d", B, T, d);
    size_t row = (size_t)d * sizeof(float);
    for (size_t r = 0; r < (size_t)B * T && d > 0; r++) {
        memcpy(out + r * 2 * d, z + r * d, row);
        memcpy(out + r * 2 * d + d, h + r / T * d, row);
    }
    return DQN_OK;
}

static dqn_status cpu_concat_bcast_bwd(dqn_backend *be, const float *dout, float *dz, float *dh,
                                       int B, int T, int d) {
    (void)be;
    REQUIRE(B >= 0 && T >= 0 && d >= 0, "concat_bcast_bwd: B=%d T=%d d=%d", B, T, d);
    for (size_t r = 0; r < (size_t)B * T && d > 0; r++) {
        const float *restrict dr = dout + r * 2 * d;
        float *restrict dhs = dh + r / T * d;
        memcpy(dz + r * d, dr, (size_t)d * sizeof *dz);
        EACH(k, (size_t)d, dhs[k] += dr[d + k]);
    }
    return DQN_OK;
}

/* ---- dueling combine ---- */

static dqn_status cpu_dueling_fwd(dqn_backend *be, const float *V, const float *Adv, float *Z,
                                  int R, const dqn_branches *br) {
    (void)be;
    REQUIRE(R >= 0, "dueling_fwd: R=%d", R);
    DQN_TRY(check_branches("dueling_fwd", br));
    for (size_t r = 0; r < (size_t)R; r++)
        for (int b = 0; b < br->D; b++) {
            const float *a = Adv + r * br->A + br->off[b];
            float *z = Z + r * br->A + br->off[b];
            double sum = 0;
            for (int k = 0; k < br->n[b]; k++) sum += a[k];
            float mu = (float)(sum / br->n[b]);
            for (int k = 0; k < br->n[b]; k++) z[k] = V[r] + a[k] - mu;
        }
    return DQN_OK;
}

static dqn_status cpu_dueling_bwd(dqn_backend *be, const float *dZ, float *dV, float *dAdv, int R,
                                  const dqn_branches *br) {
    (void)be;
    REQUIRE(R >= 0, "dueling_bwd: R=%d", R);
    DQN_TRY(check_branches("dueling_bwd", br));
    for (size_t r = 0; r < (size_t)R; r++) {
        double total = 0;
        for (int b = 0; b < br->D; b++) {
            const float *g = dZ + r * br->A + br->off[b];
            float *ga = dAdv + r * br->A + br->off[b];
            double sum = 0;
            for (int k = 0; k < br->n[b]; k++) sum += g[k];
            float mu = (float)(sum / br->n[b]);
            for (int k = 0; k < br->n[b]; k++) ga[k] = g[k] - mu;
            total += sum;
        }
        dV[r] = (float)total;
    }
    return DQN_OK;
}

/* ---- action selection ---- */

static dqn_status cpu_q_argmax(dqn_backend *be, const float *Z, float *Q, int32_t *act, int B,
                               int K, const dqn_branches *br) {
    (void)be;
    REQUIRE(B >= 0 && K > 0, "q_argmax: B=%d K=%d", B, K);
    DQN_TRY(check_branches("q_argmax", br));
    const int A = br->A;
    for (size_t s = 0; s < (size_t)B; s++)
        for (int b = 0; b < br->D; b++) {
            int best = 0;
            float qbest = 0.0f;
            for (int a = 0; a < br->n[b]; a++) {
                int c = br->off[b] + a;
                double sum = 0;
                for (size_t k = 0; k < (size_t)K; k++) sum += Z[(s * K + k) * A + c];
                float q = (float)(sum / K);
                if (Q) Q[s * A + c] = q;
                if (a == 0 || q > qbest) { /* strict: the lowest index wins ties */
                    best = a;
                    qbest = q;
                }
            }
            act[s * br->D + b] = best;
        }
    return DQN_OK;
}

/* ---- targets and loss ---- */

static dqn_status cpu_iqn_targets(dqn_backend *be, const float *Zt, const int32_t *astar,
                                  const float *R, const float *discount, float *y, int B, int Nt,
                                  const dqn_branches *br, dqn_target_mode mode) {
    (void)be;
    REQUIRE(B >= 0 && Nt >= 0, "iqn_targets: B=%d Nt=%d", B, Nt);
    REQUIRE(mode == DQN_TARGET_MEAN || mode == DQN_TARGET_INDEPENDENT,
            "iqn_targets: target mode %d", (int)mode);
    DQN_TRY(check_branches("iqn_targets", br));
    DQN_TRY(check_actions("iqn_targets", astar, B, br));
    const int A = br->A, D = br->D;
    for (size_t s = 0; s < (size_t)B; s++)
        for (size_t j = 0; j < (size_t)Nt; j++) {
            const float *z = Zt + (s * Nt + j) * A;
            if (mode == DQN_TARGET_MEAN) {
                double sum = 0;
                for (int b = 0; b < D; b++) sum += z[br->off[b] + astar[s * D + b]];
                y[s * Nt + j] = R[s] + discount[s] * (float)(sum / D);
            } else {
                for (int b = 0; b < D; b++)
                    y[(s * D + b) * Nt + j] = R[s] + discount[s] * z[br->off[b] + astar[s * D + b]];
            }
        }
    return DQN_OK;
}

/* rho(u) = |tau - 1{u<0}| Huber_kappa(u) / kappa, u = y - z, summed as in SPEC section 3; dZ at
 * each branch's taken column is -d/dz of the loss. */
static dqn_status cpu_quantile_huber(dqn_backend *be, const float *Z, const float *tau,
                                     const int32_t *act, const float *y, const float *w,
                                     float *loss_out, float *dZ, float *per_sample, int B, int N,
                                     int Nt, const dqn_branches *br, dqn_target_mode mode,
                                     float kappa) {
    (void)be;
    REQUIRE(B > 0 && N > 0 && Nt > 0, "quantile_huber: B=%d N=%d Nt=%d must be positive", B, N, Nt);
    REQUIRE(kappa > 0.0f, "quantile_huber: kappa = %g, must be > 0", (double)kappa);
    REQUIRE(mode == DQN_TARGET_MEAN || mode == DQN_TARGET_INDEPENDENT,
            "quantile_huber: target mode %d", (int)mode);
    DQN_TRY(check_branches("quantile_huber", br));
    DQN_TRY(check_actions("quantile_huber", act, B, br));
    const int A = br->A, D = br->D;
    const double k = kappa, norm = 1.0 / ((double)D * Nt);
    memset(dZ, 0, (size_t)B * N * A * sizeof *dZ);
    double loss = 0;
    for (size_t s = 0; s < (size_t)B; s++) {
        double ws = w ? w[s] : 1.0, rho_s = 0;
        for (int b = 0; b < D; b++) {
            const float *ys = y + (mode == DQN_TARGET_MEAN ? s : s * D + b) * Nt;
            size_t col = (size_t)br->off[b] + act[s * D + b];
            for (size_t i = s * N; i < (s + 1) * N; i++) {
                double z = Z[i * A + col], t = tau[i], rho = 0, drho = 0;
                for (int j = 0; j < Nt; j++) {
                    /* branch-free: with q = min(|u|, k), Huber_k(u) = q (|u| - q/2) and its
                     * derivative is copysign(q, u) */
                    double u = ys[j] - z, au = fabs(u), q = au < k ? au : k;
                    double wt = fabs(t - (u < 0.0));
                    rho += wt * q * (au - 0.5 * q);
                    drho += wt * copysign(q, u);
                }
                rho_s += rho / k;
                dZ[i * A + col] = (float)(-drho / k * ws * norm / B);
            }
        }
        rho_s *= norm;
        if (per_sample) per_sample[s] = (float)rho_s;
        loss += ws * rho_s;
    }
    loss_out[0] = (float)(loss / B);
    return DQN_OK;
}

/* ---- optimizer ---- */

static dqn_status cpu_l2_norm(dqn_backend *be, const float *x, size_t n, float *out) {
    (void)be;
    double lane[LANES] = {0}, sum = 0;
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += (double)x[i + l] * x[i + l];
    for (; i < n; i++) sum += (double)x[i] * x[i];
    for (int l = 0; l < LANES; l++) sum += lane[l];
    out[0] = (float)sqrt(sum);
    return DQN_OK;
}

static dqn_status cpu_clip_by_norm(dqn_backend *be, float *x, size_t n, const float *norm,
                                   float max_norm) {
    (void)be;
    float s = dqn_clip_scale(norm, max_norm);
    if (s < 1.0f) EACH(i, n, x[i] *= s);
    return DQN_OK;
}

static dqn_status cpu_adam(dqn_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                           float lr, float beta1, float beta2, float eps, float wd,
                           const float *gnorm, float max_norm, const uint64_t *step,
                           const int32_t *skip) {
    (void)be;
    REQUIRE(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
            "adam: beta1 = %g, beta2 = %g, each must be in [0, 1)", (double)beta1, (double)beta2);
    REQUIRE(max_norm <= 0.0f || gnorm, "adam: max_norm = %g needs gnorm", (double)max_norm);
    if (skip && *skip) return DQN_OK;
    const dqn_adam_consts k = dqn_adam_consts_at(*step, gnorm, max_norm, beta1, beta2);
    EACH(i, n, dqn_adam_elem(&k, g[i], &p[i], &m[i], &v[i], lr, beta1, beta2, eps, wd));
    return DQN_OK;
}

static dqn_status cpu_target_update(dqn_backend *be, float *dst, const float *src, size_t n,
                                    int period, float tau, const uint64_t *step) {
    (void)be;
    REQUIRE(period >= 0, "target_update: period = %d, must be >= 0", period);
    if (period > 0) {
        if ((*step + 1) % (uint64_t)period == 0 && n) memcpy(dst, src, n * sizeof *dst);
        return DQN_OK;
    }
    REQUIRE(tau >= 0.0f && tau <= 1.0f, "target_update: tau = %g, must be in [0, 1]", (double)tau);
    EACH(i, n, dst[i] = dqn_polyak(tau, src[i], dst[i]));
    return DQN_OK;
}

static dqn_status cpu_step_incr(dqn_backend *be, uint64_t *step) {
    (void)be;
    *step += 1;
    return DQN_OK;
}

/* ---- random numbers: word i of a stream is lane i%4 of Philox block i/4, so each block is
 * computed once for its (up to) four consecutive words. ---- */

static dqn_status cpu_rand_uniform(dqn_backend *be, float *out, size_t n, uint64_t seed,
                                   uint32_t stream, const uint64_t *step, uint64_t stride) {
    (void)be;
    const uint64_t base = *step * stride;
    for (size_t j = 0; j < n;) {
        uint64_t i = base + j;
        dqn_philox_out o = dqn_philox4x32_10(seed, stream, i >> 2);
        for (unsigned lane = i & 3; lane < 4 && j < n; lane++, j++)
            out[j] = dqn_u32_to_unit(o.v[lane]);
    }
    return DQN_OK;
}

static dqn_status cpu_rand_index(dqn_backend *be, int32_t *idx, size_t n, uint64_t seed,
                                 uint32_t stream, const uint64_t *step, uint64_t stride,
                                 const uint32_t *size) {
    (void)be;
    const uint64_t base = *step * stride, range = *size;
    REQUIRE(range >= 1 && range <= INT32_MAX, "rand_index: size = %llu, allowed 1..%d",
            (unsigned long long)range, INT32_MAX);
    for (size_t j = 0; j < n;) {
        uint64_t i = base + j;
        dqn_philox_out o = dqn_philox4x32_10(seed, stream, i >> 2);
        for (unsigned lane = i & 3; lane < 4 && j < n; lane++, j++)
            idx[j] = (int32_t)(((uint64_t)o.v[lane] * range) >> 32);
    }
    return DQN_OK;
}

/* ---- gathers ---- */

static dqn_status gather_rows(const char *op, const void *src, const int32_t *idx, void *dst, int n,
                              int row_len, size_t elem) {
    REQUIRE(n >= 0 && row_len >= 0, "%s: n=%d row_len=%d", op, n, row_len);
    size_t row = (size_t)row_len * elem;
    for (int j = 0; j < n; j++) {
        REQUIRE(idx[j] >= 0, "%s: idx[%d] = %d is negative", op, j, (int)idx[j]);
        if (row)
            memcpy((char *)dst + (size_t)j * row, (const char *)src + (size_t)idx[j] * row, row);
    }
    return DQN_OK;
}

static dqn_status cpu_gather_f32(dqn_backend *be, const float *src, const int32_t *idx, float *dst,
                                 int n, int row_len) {
    (void)be;
    return gather_rows("gather_f32", src, idx, dst, n, row_len, sizeof(float));
}

static dqn_status cpu_gather_i32(dqn_backend *be, const int32_t *src, const int32_t *idx,
                                 int32_t *dst, int n, int row_len) {
    (void)be;
    return gather_rows("gather_i32", src, idx, dst, n, row_len, sizeof(int32_t));
}

/* ---- fused sampling: the unfused ops in sequence, so both give the same numbers ---- */

static dqn_status cpu_sample_batch(dqn_backend *be, const dqn_sample_src *src,
                                   const dqn_sample_dst *dst, int B, uint64_t seed,
                                   const uint64_t *step) {
    REQUIRE(B > 0 && src->obs_dim > 0 && src->D > 0, "sample_batch: B=%d obs_dim=%d D=%d", B,
            src->obs_dim, src->D);
    if (!src->idx)
        DQN_TRY(cpu_rand_index(be, dst->idx, (size_t)B, seed, DQN_STREAM_REPLAY, step,
                               (uint64_t)B, src->size));
    else if (src->idx != dst->idx)
        memcpy(dst->idx, src->idx, (size_t)B * sizeof *dst->idx);
    DQN_TRY(cpu_gather_f32(be, src->obs, dst->idx, dst->x, B, src->obs_dim));
    DQN_TRY(cpu_gather_f32(be, src->next_obs, dst->idx, dst->xn, B, src->obs_dim));
    DQN_TRY(cpu_gather_i32(be, src->act, dst->idx, dst->act, B, src->D));
    DQN_TRY(cpu_gather_f32(be, src->R, dst->idx, dst->R, B, 1));
    return cpu_gather_f32(be, src->disc, dst->idx, dst->disc, B, 1);
}

static dqn_status cpu_rand_uniform_multi(dqn_backend *be, const dqn_draws *d, uint64_t seed,
                                         const uint64_t *step) {
    REQUIRE(d->count >= 0 && d->count <= DQN_MAX_DRAWS, "rand_uniform_multi: count = %d, allowed 0..%d",
            d->count, DQN_MAX_DRAWS);
    for (int k = 0; k < d->count; k++)
        DQN_TRY(cpu_rand_uniform(be, d->out[k], d->n[k], seed, d->stream[k], step, d->stride[k]));
    return DQN_OK;
}

/* ---- collectives: the CPU backend is a world of one, so the mean over the ranks is x itself */

typedef struct {
    int world;   /* 1 once it joined its world of one, else 0 */
} cpu_impl;

static dqn_status cpu_comm_init(dqn_backend *be, const dqn_rank_info *r) {
    REQUIRE(r, "comm_init: rank info is NULL");
    if (r->world != 1)
        return DQN_ERR(DQN_ERR_UNSUPPORTED,
                       "comm_init: the cpu backend has one rank, asked for a world of %d "
                       "(data parallelism needs --device cuda)", r->world);
    REQUIRE(r->rank == 0, "comm_init: rank %d of a world of 1", r->rank);
    ((cpu_impl *)be->impl)->world = 1;
    return DQN_OK;
}

static int cpu_comm_world(const dqn_backend *be) { return ((const cpu_impl *)be->impl)->world; }

static dqn_status cpu_allreduce_mean(dqn_backend *be, float *x, size_t n) {
    (void)be;
    REQUIRE(x || n == 0, "allreduce_mean: x is NULL");
    return DQN_OK;
}

/* The table: cpu_<name> for each entry of backends/ops.def. The entries that share an
 * implementation are named here; the OPT ones (graph capture, side branches and their queries)
 * stay NULL, as the CPU runs its ops eagerly, one after another. */
#define cpu_h2d cpu_copy
#define cpu_d2h cpu_copy
#define cpu_d2d cpu_copy
#define cpu_h2d_async cpu_copy
#define cpu_d2h_async cpu_copy
#define cpu_host_alloc cpu_alloc
#define cpu_host_free cpu_free
#define cpu_fence_record cpu_fence_noop
#define cpu_fence_wait cpu_fence_noop
#define cpu_targets_huber dqn_targets_huber_seq
#define cpu_trunk_fwd dqn_trunk_fwd_seq
#define CPU_ENTRY_OP(name) .name = cpu_##name,
#define CPU_ENTRY_CTL(name) .name = cpu_##name,
#define CPU_ENTRY_OPT(name)
static const dqn_ops cpu_ops = {
    .name = "cpu",
#define DQN_OP(name, ret, kind, params, args, doc) CPU_ENTRY_##kind(name)
#include "backends/ops.def"
#undef DQN_OP
};

dqn_status dqn_backend_cpu_create(dqn_backend **out) {
    dqn_backend *be = calloc(1, sizeof *be);
    cpu_impl *impl = calloc(1, sizeof *impl);
    if (!be || !impl) {
        free(be);
        free(impl);
        return DQN_ERR(DQN_ERR_NOMEM, "cpu backend");
    }
    be->impl = impl;
    be->ops = &cpu_ops;
    be->math = DQN_MATH_FP32;
    *out = be;
    return DQN_OK;
}
