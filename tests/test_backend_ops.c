/* The op test registry: one row per compute op of backends/ops.def (kind OP), each with its
 * shapes (odd sizes, the edges of the backends' paths, the model's real sizes), its case (inputs,
 * the op call, its reference or the op sequence it stands for: tests/op_registry.h), its NMSE
 * bounds and, for an op with a gradient, its finite-difference check. The driver runs every row:
 *   1. on the CPU backend against the reference (naive loops, double accumulators), and, for a
 *      fused op, against the op sequence of its contract, bit for bit;
 *   2. the finite-difference check of the gradients (CPU);
 *   3. on every other backend: a second CPU backend (so that this path runs everywhere, also
 *      under the sanitizers) and, when a device is there, the CUDA backend in fp32 and TF32 and
 *      with its thresholds moved to its other paths; each against the CPU by NMSE (bit for bit
 *      where the bound is 0), and a rerun there on fresh buffers bit for bit (reductions sum in
 *      a fixed order);
 * and checks that every OP entry of ops.def has a row. A failure names the op, the shape, the
 * backend, the output and the error. Without a CUDA device step 3 prints a skip line; with
 * DQN_TEST_NEED_GPU set (tests/run_gpu_tests.sh) that is a skip (exit 77) of the whole test.
 * DQN_GPU_TEST_SMALL=1 leaves out the BIG shapes (compute-sanitizer runs); DQN_TEST_OP=a,b runs
 * only those rows (the coverage check still runs). Adding a row:
 * docs/adding-an-op.md. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cuda_tunables.h"
#include "check.h"
#include "dqn_philox.h"
#include "envs/classic.h"
#include "envs/env.h"
#include "envs/market.h"
#include "op_registry.h"
#include "replay/sumtree.h"

/* bounds: NMSE = sum (got - want)^2 / sum want^2 */
#define EXACT 0.0
#define EW 1e-12       /* CPU elementwise vs double */
#define RED 1e-10      /* CPU sums vs double */
#define DEV_EW 1e-10   /* another backend vs the CPU: elementwise */
#define DEV_RED 1e-8   /* another backend vs the CPU: GEMMs and reductions */
#define DEV_TF32 1e-5  /* a GEMM row on a TF32 backend (inputs rounded to 10 bits) */

/* flags of a row */
enum { SEQ = 1, GEMM = 2 };

#define S(...) {.v = {__VA_ARGS__}}
#define S_BIG(...) {.v = {__VA_ARGS__}, .flags = BIG}
#define S_F(fl, ...) {.v = {__VA_ARGS__}, .flags = (fl)}
#define SHAPES(...)                                                                            \
    .shapes = (const shp[]){__VA_ARGS__},                                                      \
    .n_shapes = (int)(sizeof((const shp[]){__VA_ARGS__}) / sizeof(shp))
#define FD(fn, ...)                                                                            \
    .fd = (fn), .fd_shapes = (const shp[]){__VA_ARGS__},                                       \
    .n_fd = (int)(sizeof((const shp[]){__VA_ARGS__}) / sizeof(shp))

/* branch layouts a shape names by index: D, then the sizes */
static const int BRANCHES[][1 + DQN_MAX_BRANCHES] = {
    {1, 2}, {3, 3, 5, 5}, {3, 1, 4, 2}, {4, 7, 5, 6, 5}, {2, 40, 20}, {1, 4}, {3, 3, 1, 5}};

static dqn_branches br_of(int id) {
    dqn_branches br;
    dqn_branches_init(&br, BRANCHES[id][0], BRANCHES[id] + 1);
    return br;
}

static double huber(double u, double k) {
    return fabs(u) <= k ? 0.5 * u * u : k * (fabs(u) - 0.5 * k);
}
static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double act_of(double x, int act) {
    return act == DQN_ACT_RELU ? (x > 0 ? x : 0) : act == DQN_ACT_ELU ? (x > 0 ? x : expm1(x)) : x;
}

/* ======================= memory ======================= */

/* s: n */
static void c_d2d(tc *t) {
    size_t n = (size_t)t->s[0];
    const float *src = in_f(t, n, -5, 5);
    float *dst = out_f(t, "dst", n + 3);   /* the 3 past n stay poisoned */
    OP(t, d2d, dst, src, n * sizeof(float));
    if (!t->ref) return;
    double *w = want(t, dst);
    for (size_t i = 0; i < n + 3; i++) w[i] = i < n ? hf(t, src)[i] : NAN;
}

/* s: n */
static void c_fill(tc *t) {
    size_t n = (size_t)t->s[0];
    float *x = out_f(t, "x", n + 3);
    OP(t, fill, x, 3.25f, n);
    if (!t->ref) return;
    double *w = want(t, x);
    for (size_t i = 0; i < n + 3; i++) w[i] = i < n ? 3.25 : NAN;
}

/* ======================= dense layers ======================= */

/* Y [M, N] = X [M, K] W^T + b, in double; scale: none */
static void ref_linear(tc *t, const float *X, const float *W, int ldw, const float *b, int M,
                       int K, int N, int act, double *y) {
    const float *x = hf(t, X), *w = hf(t, W), *bb = b ? hf(t, b) : NULL;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = bb ? bb[n] : 0;
            for (int k = 0; k < K; k++) s += (double)x[(size_t)m * K + k] * w[(size_t)n * ldw + k];
            y[(size_t)m * N + n] = act_of(s, act);
        }
}

/* s: M K N bias */
static void c_linear_fwd(tc *t) {
    int M = t->s[0], K = t->s[1], N = t->s[2];
    const float *X = in_f(t, (size_t)M * K, -1, 1), *W = in_f(t, (size_t)N * K, -1, 1);
    const float *b = t->s[3] ? in_f(t, (size_t)N, -1, 1) : NULL;
    float *Y = out_f(t, "Y", (size_t)M * N);
    OP(t, linear_fwd, X, W, b, Y, M, K, N);
    if (t->ref) ref_linear(t, X, W, K, b, M, K, N, DQN_ACT_NONE, want(t, Y));
    if (t->ref) REFUSE(t, linear_fwd, X, W, b, Y, 0, K, N);
}

/* s: M K N bias act; the sequence: linear_fwd, then relu_fwd / elu_fwd in place */
static void c_linear_act_fwd(tc *t) {
    int M = t->s[0], K = t->s[1], N = t->s[2], act = t->s[4];
    const float *X = in_f(t, (size_t)M * K, -1, 1), *W = in_f(t, (size_t)N * K, -1, 1);
    const float *b = t->s[3] ? in_f(t, (size_t)N, -0.5, 0.5) : NULL;
    float *Y = out_f(t, "Y", (size_t)M * N);
    size_t n = (size_t)M * N;
    if (!t->seq) {
        OP(t, linear_act_fwd, X, W, b, Y, M, K, N, (dqn_act)act);
    } else {
        OP(t, linear_fwd, X, W, b, Y, M, K, N);
        if (act == DQN_ACT_RELU) OP(t, relu_fwd, Y, Y, n);
        if (act == DQN_ACT_ELU) OP(t, elu_fwd, Y, Y, n);
    }
    if (t->ref) ref_linear(t, X, W, K, b, M, K, N, act, want(t, Y));
    if (t->ref) REFUSE(t, linear_act_fwd, X, W, b, Y, M, K, N, (dqn_act)7);
}

/* s: M K N with_dX */
static void c_linear_bwd(tc *t) {
    int M = t->s[0], K = t->s[1], N = t->s[2];
    const float *X = in_f(t, (size_t)M * K, -1, 1), *W = in_f(t, (size_t)N * K, -1, 1);
    const float *dY = in_f(t, (size_t)M * N, -1, 1);
    float *dX = t->s[3] ? out_f(t, "dX", (size_t)M * K) : NULL;
    float *dW = out_f(t, "dW", (size_t)N * K), *db = out_f(t, "db", (size_t)N);
    OP(t, linear_bwd, X, W, dY, dX, dW, db, M, K, N);
    if (!t->ref) return;
    const float *x = hf(t, X), *w = hf(t, W), *dy = hf(t, dY);
    double *wx = dX ? want(t, dX) : NULL, *ww = want(t, dW), *wb = want(t, db);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double g = dy[(size_t)m * N + n];
            wb[n] += g;
            for (int k = 0; k < K; k++) {
                if (wx) wx[(size_t)m * K + k] += g * w[(size_t)n * K + k];
                ww[(size_t)n * K + k] += g * x[(size_t)m * K + k];
            }
        }
}

/* s: n */
static void c_axpy(tc *t) {
    size_t n = (size_t)t->s[0];
    const float *x = in_f(t, n, -2, 2);
    float *y = io_f(t, "y", n, -2, 2);
    OP(t, axpy, -0.75f, x, y, n);
    if (!t->ref) return;
    double *w = want(t, y);
    for (size_t i = 0; i < n; i++) w[i] = hf(t, y)[i] + -0.75 * hf(t, x)[i];
}

/* ======================= activations ======================= */

/* s: n in_place */
static void c_relu_fwd(tc *t) {
    size_t n = (size_t)t->s[0];
    float *x = in_f(t, n, -3, 3), *y = t->s[1] ? x : out_f(t, "y", n);
    if (t->s[1]) make_out(t, x, "x (in place)");
    OP(t, relu_fwd, x, y, n);
    if (!t->ref) return;
    double *w = want(t, y);
    for (size_t i = 0; i < n; i++) w[i] = hf(t, x)[i] > 0 ? hf(t, x)[i] : 0;
}

/* s: n in_place (dx = dy) */
static void c_relu_bwd(tc *t) {
    size_t n = (size_t)t->s[0];
    const float *y = in_relu(t, n, 2);
    float *dy = in_f(t, n, -1, 1), *dx = t->s[1] ? dy : out_f(t, "dx", n);
    if (t->s[1]) make_out(t, dy, "dy (in place)");
    OP(t, relu_bwd, y, dy, dx, n);
    if (!t->ref) return;
    double *w = want(t, dx);
    for (size_t i = 0; i < n; i++) w[i] = hf(t, y)[i] > 0 ? hf(t, dy)[i] : 0;
}

/* s: n in_place */
static void c_elu_fwd(tc *t) {
    size_t n = (size_t)t->s[0];
    float *x = in_f(t, n, -3, 3), *y = t->s[1] ? x : out_f(t, "y", n);
    if (t->s[1]) make_out(t, x, "x (in place)");
    OP(t, elu_fwd, x, y, n);
    if (!t->ref) return;
    double *w = want(t, y);
    for (size_t i = 0; i < n; i++) w[i] = act_of(hf(t, x)[i], DQN_ACT_ELU);
}

/* s: n in_place; y an ELU output */
static void c_elu_bwd(tc *t) {
    size_t n = (size_t)t->s[0];
    float *y = in_f(t, n, -3, 3), *hy = hf(t, y);
    for (size_t i = 0; i < n; i++) hy[i] = (float)act_of(hy[i], DQN_ACT_ELU);
    resync(t, y);
    float *dy = in_f(t, n, -1, 1), *dx = t->s[1] ? dy : out_f(t, "dx", n);
    if (t->s[1]) make_out(t, dy, "dy (in place)");
    OP(t, elu_bwd, y, dy, dx, n);
    if (!t->ref) return;
    double *w = want(t, dx);
    for (size_t i = 0; i < n; i++) w[i] = hf(t, dy)[i] * (hy[i] > 0 ? 1 : hy[i] + 1.0);
}

/* ======================= GRN gate, LayerNorm ======================= */

/* s: M d */
static void c_gate_fwd(tc *t) {
    int M = t->s[0], d = t->s[1];
    const float *h = in_f(t, (size_t)M * d, -2, 2), *g = in_f(t, (size_t)M * 2 * d, -4, 4);
    float *r = out_f(t, "r", (size_t)M * d);
    OP(t, gate_fwd, h, g, r, M, d);
    if (!t->ref) return;
    const float *H = hf(t, h), *G = hf(t, g);
    double *w = want(t, r);
    for (int m = 0; m < M; m++)
        for (int j = 0; j < d; j++)
            w[(size_t)m * d + j] = H[(size_t)m * d + j] + G[(size_t)m * 2 * d + j] *
                                                              sigm(G[(size_t)m * 2 * d + d + j]);
}

/* s: M d */
static void c_gate_bwd(tc *t) {
    int M = t->s[0], d = t->s[1];
    const float *g = in_f(t, (size_t)M * 2 * d, -4, 4), *dr = in_f(t, (size_t)M * d, -1, 1);
    float *dh = out_f(t, "dh", (size_t)M * d), *dg = out_f(t, "dg", (size_t)M * 2 * d);
    OP(t, gate_bwd, g, dr, dh, dg, M, d);
    if (!t->ref) return;
    const float *G = hf(t, g), *DR = hf(t, dr);
    double *wh = want(t, dh), *wg = want(t, dg);
    for (int m = 0; m < M; m++)
        for (int j = 0; j < d; j++) {
            double a = G[(size_t)m * 2 * d + j], s = sigm(G[(size_t)m * 2 * d + d + j]);
            double r = DR[(size_t)m * d + j];
            wh[(size_t)m * d + j] = r;
            wg[(size_t)m * 2 * d + j] = r * s;
            wg[(size_t)m * 2 * d + d + j] = r * a * s * (1 - s);
        }
}

/* mean and rstd of x's rows in double */
static void ref_moments(const float *x, int M, int d, double *mu, double *rs) {
    for (int m = 0; m < M; m++) {
        double s = 0, v = 0;
        for (int j = 0; j < d; j++) s += x[(size_t)m * d + j];
        s /= d;
        for (int j = 0; j < d; j++) v += (x[(size_t)m * d + j] - s) * (x[(size_t)m * d + j] - s);
        mu[m] = s, rs[m] = 1 / sqrt(v / d + 1e-5);
    }
}

/* s: M d; row 0 constant (variance 0: y = beta) */
static void c_layernorm_fwd(tc *t) {
    int M = t->s[0], d = t->s[1];
    float *x = in_f(t, (size_t)M * d, -3, 5);
    for (int j = 0; j < d; j++) hf(t, x)[j] = 1.5f;
    resync(t, x);
    const float *gamma = in_f(t, (size_t)d, 0.5, 1.5), *beta = in_f(t, (size_t)d, -1, 1);
    float *y = out_f(t, "y", (size_t)M * d), *mean = out_f(t, "mean", (size_t)M);
    float *rstd = out_f(t, "rstd", (size_t)M);
    OP(t, layernorm_fwd, x, gamma, beta, y, mean, rstd, M, d);
    if (!t->ref) return;
    const float *X = hf(t, x), *ga = hf(t, gamma), *be = hf(t, beta);
    double *wy = want(t, y), *wm = want(t, mean), *wr = want(t, rstd);
    ref_moments(X, M, d, wm, wr);
    for (int m = 0; m < M; m++)
        for (int j = 0; j < d; j++)
            wy[(size_t)m * d + j] = (X[(size_t)m * d + j] - wm[m]) * wr[m] * ga[j] + be[j];
    REFUSE(t, layernorm_fwd, x, gamma, beta, y, mean, rstd, M, 0);
}

/* s: M d; mean and rstd are x's, as the forward saved them */
static void c_layernorm_bwd(tc *t) {
    int M = t->s[0], d = t->s[1];
    const float *x = in_f(t, (size_t)M * d, -3, 5), *gamma = in_f(t, (size_t)d, 0.5, 1.5);
    float *mean = in_f(t, (size_t)M, 0, 0), *rstd = in_f(t, (size_t)M, 0, 0);
    double *mu = reg_xmalloc(sizeof(double) * M), *rs = reg_xmalloc(sizeof(double) * M);
    ref_moments(hf(t, x), M, d, mu, rs);
    for (int m = 0; m < M; m++) hf(t, mean)[m] = (float)mu[m], hf(t, rstd)[m] = (float)rs[m];
    resync(t, mean);
    resync(t, rstd);
    const float *dy = in_f(t, (size_t)M * d, -1, 1);
    float *dx = out_f(t, "dx", (size_t)M * d), *dgamma = out_f(t, "dgamma", (size_t)d);
    float *dbeta = out_f(t, "dbeta", (size_t)d);
    OP(t, layernorm_bwd, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, M, d);
    if (t->ref) {
        const float *X = hf(t, x), *ga = hf(t, gamma), *DY = hf(t, dy);
        const float *MU = hf(t, mean), *RS = hf(t, rstd);
        double *wx = want(t, dx), *wg = want(t, dgamma), *wb = want(t, dbeta);
        for (int m = 0; m < M; m++) {
            double s1 = 0, s2 = 0;
            for (int j = 0; j < d; j++) {
                size_t i = (size_t)m * d + j;
                double xh = (X[i] - (double)MU[m]) * RS[m], gy = (double)DY[i] * ga[j];
                s1 += gy, s2 += gy * xh;
                wg[j] += DY[i] * xh, wb[j] += DY[i];
            }
            for (int j = 0; j < d; j++) {
                size_t i = (size_t)m * d + j;
                double xh = (X[i] - (double)MU[m]) * RS[m], gy = (double)DY[i] * ga[j];
                wx[i] = RS[m] * (gy - s1 / d - xh * s2 / d);
            }
        }
    }
    free(mu);
    free(rs);
}

/* ======================= IQN ======================= */

/* s: R n_cos; the smallest and largest taus Philox gives, 0.5 and 0.25 among them */
static void c_cos_embed(tc *t) {
    int R = t->s[0], n_cos = t->s[1];
    float *tau = in_f(t, (size_t)R, 0, 1), *ht = hf(t, tau);
    const float edge[4] = {dqn_u32_to_unit(0), dqn_u32_to_unit(UINT32_MAX), 0.5f, 0.25f};
    for (int r = 0; r < R && r < 4; r++) ht[r] = edge[r];
    resync(t, tau);
    float *C = out_f(t, "C", (size_t)R * n_cos);
    OP(t, cos_embed, tau, C, R, n_cos);
    if (!t->ref) return;
    double *w = want(t, C);
    for (int r = 0; r < R; r++)
        for (int k = 1; k <= n_cos; k++)
            w[(size_t)r * n_cos + k - 1] = cos(3.14159265358979323846 * k * ht[r]);
}

/* s: B T d */
static void c_mul_bcast_fwd(tc *t) {
    int B = t->s[0], T = t->s[1], d = t->s[2];
    const float *h = in_f(t, (size_t)B * d, -1, 1), *phi = in_f(t, (size_t)B * T * d, -1, 1);
    float *z = out_f(t, "z", (size_t)B * T * d);
    OP(t, mul_bcast_fwd, h, phi, z, B, T, d);
    if (!t->ref) return;
    double *w = want(t, z);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int j = 0; j < d; j++)
            w[r * d + j] = (double)hf(t, h)[r / T * d + j] * hf(t, phi)[r * d + j];
}

/* s: B T d */
static void c_mul_bcast_bwd(tc *t) {
    int B = t->s[0], T = t->s[1], d = t->s[2];
    size_t nz = (size_t)B * T * d;
    const float *h = in_f(t, (size_t)B * d, -1, 1), *phi = in_f(t, nz, -1, 1);
    const float *dz = in_f(t, nz, -1, 1);
    float *dh = out_f(t, "dh", (size_t)B * d), *dphi = out_f(t, "dphi", nz);
    OP(t, mul_bcast_bwd, h, phi, dz, dh, dphi, B, T, d);
    if (!t->ref) return;
    double *wh = want(t, dh), *wp = want(t, dphi);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int j = 0; j < d; j++) {
            wh[r / T * d + j] += (double)hf(t, dz)[r * d + j] * hf(t, phi)[r * d + j];
            wp[r * d + j] = (double)hf(t, dz)[r * d + j] * hf(t, h)[r / T * d + j];
        }
}

/* s: B T d */
static void c_concat_bcast_fwd(tc *t) {
    int B = t->s[0], T = t->s[1], d = t->s[2];
    const float *z = in_f(t, (size_t)B * T * d, -1, 1), *h = in_f(t, (size_t)B * d, -1, 1);
    float *out = out_f(t, "out", (size_t)B * T * 2 * d);
    OP(t, concat_bcast_fwd, z, h, out, B, T, d);
    if (!t->ref) return;
    double *w = want(t, out);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int j = 0; j < d; j++) {
            w[r * 2 * d + j] = hf(t, z)[r * d + j];
            w[r * 2 * d + d + j] = hf(t, h)[r / T * d + j];
        }
}

/* s: B T d; dh accumulates onto its start */
static void c_concat_bcast_bwd(tc *t) {
    int B = t->s[0], T = t->s[1], d = t->s[2];
    const float *dout = in_f(t, (size_t)B * T * 2 * d, -1, 1);
    float *dz = out_f(t, "dz", (size_t)B * T * d), *dh = io_f(t, "dh", (size_t)B * d, -1, 1);
    OP(t, concat_bcast_bwd, dout, dz, dh, B, T, d);
    if (!t->ref) return;
    double *wz = want(t, dz), *wh = want(t, dh);
    want_same(t, dh);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int j = 0; j < d; j++) {
            wz[r * d + j] = hf(t, dout)[r * 2 * d + j];
            wh[r / T * d + j] += hf(t, dout)[r * 2 * d + d + j];
        }
}

/* ======================= heads ======================= */

static void ref_dueling(const double *V, const double *Adv, double *Z, int R,
                        const dqn_branches *br) {
    for (int r = 0; r < R; r++)
        for (int b = 0; b < br->D; b++) {
            double mean = 0;
            for (int a = 0; a < br->n[b]; a++) mean += Adv[(size_t)r * br->A + br->off[b] + a];
            mean /= br->n[b];
            for (int a = 0; a < br->n[b]; a++) {
                size_t c = (size_t)r * br->A + br->off[b] + a;
                Z[c] = V[r] + Adv[c] - mean;
            }
        }
}

static double *to_double(const float *x, size_t n) {
    double *d = reg_xmalloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* s: R branches */
static void c_dueling_fwd(tc *t) {
    int R = t->s[0];
    dqn_branches br = br_of(t->s[1]);
    const float *V = in_f(t, (size_t)R, -1, 1), *Adv = in_f(t, (size_t)R * br.A, -2, 2);
    float *Z = out_f(t, "Z", (size_t)R * br.A);
    OP(t, dueling_fwd, V, Adv, Z, R, &br);
    if (!t->ref) return;
    double *v = to_double(hf(t, V), R), *a = to_double(hf(t, Adv), (size_t)R * br.A);
    ref_dueling(v, a, want(t, Z), R, &br);
    free(v);
    free(a);
    dqn_branches bad = br;
    bad.A++;
    REFUSE(t, dueling_fwd, V, Adv, Z, R, &bad);
}

/* s: R branches */
static void c_dueling_bwd(tc *t) {
    int R = t->s[0];
    dqn_branches br = br_of(t->s[1]);
    const float *dZ = in_f(t, (size_t)R * br.A, -1, 1);
    float *dV = out_f(t, "dV", (size_t)R), *dAdv = out_f(t, "dAdv", (size_t)R * br.A);
    OP(t, dueling_bwd, dZ, dV, dAdv, R, &br);
    if (!t->ref) return;
    const float *g = hf(t, dZ);
    double *wv = want(t, dV), *wa = want(t, dAdv);
    for (int r = 0; r < R; r++)
        for (int b = 0; b < br.D; b++) {
            double s = 0;
            for (int a = 0; a < br.n[b]; a++) s += g[(size_t)r * br.A + br.off[b] + a];
            wv[r] += s;
            for (int a = 0; a < br.n[b]; a++) {
                size_t c = (size_t)r * br.A + br.off[b] + a;
                wa[c] = g[c] - s / br.n[b];
            }
        }
}

/* s: B K branches with_Q. Ties: sample 0's last branch has its last two columns equal and on
 * top (the first of them wins), sample 1's branch 0 is all equal (column 0 wins). */
static void c_q_argmax(tc *t) {
    int B = t->s[0], K = t->s[1];
    dqn_branches br = br_of(t->s[2]);
    const int A = br.A, D = br.D, lb = D - 1, nb = br.n[lb];
    float *Z = in_f(t, (size_t)B * K * A, -2, 2), *hz = hf(t, Z);
    for (int k = 0; k < K && nb >= 2; k++)
        hz[(size_t)k * A + br.off[lb] + nb - 1] = hz[(size_t)k * A + br.off[lb] + nb - 2] =
            5.0f + k;
    for (int k = 0; k < K && B > 1; k++)
        for (int a = 0; a < br.n[0]; a++) hz[(size_t)(K + k) * A + a] = -1.0f - 0.5f * k;
    resync(t, Z);
    float *Q = t->s[3] ? out_f(t, "Q", (size_t)B * A) : NULL;
    int32_t *act = out_i(t, "act", (size_t)B * D);
    OP(t, q_argmax, Z, Q, act, B, K, &br);
    if (!t->ref) return;
    double *wq = Q ? want(t, Q) : NULL, *wa = want(t, act);
    for (int s = 0; s < B; s++)
        for (int b = 0; b < D; b++) {
            int best = 0;
            double qbest = -INFINITY;
            for (int a = 0; a < br.n[b]; a++) {
                double q = 0;
                for (int k = 0; k < K; k++) q += hz[(size_t)(s * K + k) * A + br.off[b] + a];
                q /= K;
                if (wq) wq[(size_t)s * A + br.off[b] + a] = q;
                /* the float means decide, as the op's do: ties stay ties */
                if ((float)q > qbest) best = a, qbest = (float)q;
            }
            wa[s * D + b] = best;
        }
}

/* s: B Nt branches mode; sample 0 terminated (discount 0) */
static void c_iqn_targets(tc *t) {
    int B = t->s[0], Nt = t->s[1];
    dqn_branches br = br_of(t->s[2]);
    dqn_target_mode mode = (dqn_target_mode)t->s[3];
    const int A = br.A, D = br.D;
    size_t ny = (size_t)B * (mode == DQN_TARGET_MEAN ? 1 : D) * Nt;
    const float *Zt = in_f(t, (size_t)B * Nt * A, -3, 3), *R = in_f(t, (size_t)B, -1, 1);
    float *disc = in_f(t, (size_t)B, 0, 1);
    hf(t, disc)[0] = 0.0f;
    resync(t, disc);
    const int32_t *astar = in_act(t, B, &br);
    float *y = out_f(t, "y", ny);
    OP(t, iqn_targets, Zt, astar, R, disc, y, B, Nt, &br, mode);
    if (!t->ref) return;
    const float *zt = hf(t, Zt), *r = hf(t, R), *dc = hf(t, disc);
    const int32_t *as = hi(t, astar);
    double *w = want(t, y);
    for (int s = 0; s < B; s++)
        for (int j = 0; j < Nt; j++) {
            const float *z = zt + (size_t)(s * Nt + j) * A;
            double mean = 0;
            for (int b = 0; b < D; b++) mean += z[br.off[b] + as[s * D + b]];
            mean /= D;
            if (mode == DQN_TARGET_MEAN) w[(size_t)s * Nt + j] = r[s] + (double)dc[s] * mean;
            for (int b = 0; b < D && mode == DQN_TARGET_INDEPENDENT; b++)
                w[(size_t)(s * D + b) * Nt + j] =
                    r[s] + (double)dc[s] * z[br.off[b] + as[s * D + b]];
        }
    int32_t *bad = in_act(t, B, &br);
    hi(t, bad)[D - 1] = br.n[D - 1];
    resync(t, bad);
    REFUSE(t, iqn_targets, Zt, bad, R, disc, y, B, Nt, &br, mode);
}

/* The quantile Huber loss of SPEC 3 in double: loss, dZ, per_sample */
static void ref_quantile_huber(const float *Z, const float *tau, const int32_t *act,
                               const double *y, const float *w, int B, int N, int Nt,
                               const dqn_branches *br, dqn_target_mode mode, double kappa,
                               double *loss, double *grad, double *per) {
    const int A = br->A, D = br->D;
    *loss = 0;
    for (int s = 0; s < B; s++) {
        double ws = w ? w[s] : 1;
        if (per) per[s] = 0;
        for (int b = 0; b < D; b++)
            for (int i = 0; i < N; i++) {
                size_t zi = (size_t)(s * N + i) * A + br->off[b] + act[s * D + b];
                for (int j = 0; j < Nt; j++) {
                    double yj = mode == DQN_TARGET_MEAN ? y[(size_t)s * Nt + j]
                                                        : y[(size_t)(s * D + b) * Nt + j];
                    double u = yj - Z[zi], tt = tau[s * N + i], ind = u < 0 ? 1 : 0;
                    double rho = fabs(tt - ind) * huber(u, kappa) / kappa;
                    double du = fabs(tt - ind) * fmax(-kappa, fmin(kappa, u)) / kappa;
                    if (per) per[s] += rho / D / Nt;
                    *loss += ws * rho / B / D / Nt;
                    grad[zi] -= ws * du / B / D / Nt;
                }
            }
    }
}

/* s: B N Nt branches mode kappa*100 weighted with_per_sample */
static void c_quantile_huber(tc *t) {
    int B = t->s[0], N = t->s[1], Nt = t->s[2];
    dqn_branches br = br_of(t->s[3]);
    dqn_target_mode mode = (dqn_target_mode)t->s[4];
    float kappa = (float)t->s[5] / 100;
    size_t nz = (size_t)B * N * br.A, ny = (size_t)B * (mode == DQN_TARGET_MEAN ? 1 : br.D) * Nt;
    const float *Z = in_f(t, nz, -2, 2), *tau = in_f(t, (size_t)B * N, 0.01, 0.99);
    const float *y = in_f(t, ny, -2.5, 2.5), *w = t->s[6] ? in_f(t, (size_t)B, 0.1, 2) : NULL;
    int32_t *act = in_act(t, B, &br);
    float *loss = out_f(t, "loss", 1), *dZ = out_f(t, "dZ", nz);
    float *ps = t->s[7] ? out_f(t, "per_sample", (size_t)B) : NULL;
    OP(t, quantile_huber, Z, tau, act, y, w, loss, dZ, ps, B, N, Nt, &br, mode, kappa);
    if (!t->ref) return;
    double *yd = to_double(hf(t, y), ny);
    ref_quantile_huber(hf(t, Z), hf(t, tau), hi(t, act), yd, w ? hf(t, w) : NULL, B, N, Nt, &br,
                       mode, kappa, want(t, loss), want(t, dZ), ps ? want(t, ps) : NULL);
    free(yd);
    int32_t *bad = in_act(t, B, &br);
    hi(t, bad)[0] = -1;
    resync(t, bad);
    REFUSE(t, quantile_huber, Z, tau, bad, y, w, loss, dZ, ps, B, N, Nt, &br, mode, kappa);
}

/* ======================= optimizer ======================= */

/* s: n */
static void c_l2_norm(tc *t) {
    size_t n = (size_t)t->s[0];
    const float *x = in_f(t, n, -1, 1);
    float *out = out_f(t, "out", 1);
    OP(t, l2_norm, x, n, out);
    if (!t->ref) return;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)hf(t, x)[i] * hf(t, x)[i];
    want(t, out)[0] = sqrt(s);
}

/* s: n case: 0 the bound half the norm (scales), 1 twice the norm, 2 max_norm 0, 3 norm NaN,
 * 4 norm +Inf, 5 norm 0 (1..5 leave x alone) */
static void c_clip_by_norm(tc *t) {
    size_t n = (size_t)t->s[0];
    int c = t->s[1];
    float *x = io_f(t, "x", n, -1, 1), *norm = in_f(t, 1, 0, 0);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)hf(t, x)[i] * hf(t, x)[i];
    float nv = (float)sqrt(s);
    const float norms[6] = {nv, nv, nv, NAN, INFINITY, 0.0f};
    const float maxes[6] = {0.5f * nv, 2 * nv, 0.0f, nv, nv, nv};
    hf(t, norm)[0] = norms[c];
    resync(t, norm);
    OP(t, clip_by_norm, x, n, norm, maxes[c]);
    if (!t->ref) return;
    want_same(t, x);
    double *w = want(t, x);
    for (size_t i = 0; i < n && c == 0; i++) w[i] *= (double)maxes[c] / norms[c];
}

/* One Adam step in double from the float state; scale: the global clip's factor */
static void ref_adam(const float *p, const float *g, const float *m, const float *v, size_t n,
                     double lr, double b1, double b2, double eps, double wd, double scale,
                     uint64_t step, double *wp, double *wm, double *wv) {
    double t1 = (double)step + 1;
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] * scale;
        wm[i] = b1 * m[i] + (1 - b1) * gi;
        wv[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double mh = wm[i] / (1 - pow(b1, t1)), vh = wv[i] / (1 - pow(b2, t1));
        wp[i] = p[i] - lr * (mh / (sqrt(vh) + eps) + wd * p[i]);
    }
}

/* the gradient norms an Adam case is given (the clip at 10 scales the second) */
static const float ADAM_GNORM[4] = {3.0f, 25.0f, INFINITY, NAN};

/* s: n max_norm wd*100 step gnorm_case skip(-1: NULL, 0, 1) */
static void c_adam(tc *t) {
    size_t n = (size_t)t->s[0];
    float max_norm = (float)t->s[1], wd = (float)t->s[2] / 100, gn = ADAM_GNORM[t->s[4]];
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float *p = io_f(t, "p", n, -1, 1), *m = io_f(t, "m", n, -0.1, 0.1),
          *v = io_f(t, "v", n, 0, 0.01);
    const float *g = in_f(t, n, -2, 2);
    float *gnorm = in_f(t, 1, 0, 0);
    hf(t, gnorm)[0] = gn;
    resync(t, gnorm);
    const uint64_t *step = in_u64(t, (uint64_t)t->s[3]);
    int32_t *skip = t->s[5] < 0 ? NULL : in_i(t, 1, 1);
    if (skip) hi(t, skip)[0] = t->s[5], resync(t, skip);
    OP(t, adam, p, g, m, v, n, lr, b1, b2, eps, wd, gnorm, max_norm, step, skip);
    if (!t->ref) return;
    want_same(t, p), want_same(t, m), want_same(t, v);
    if (!(skip && t->s[5])) {
        double scale =
            max_norm > 0 && isfinite(gn) && max_norm / (double)gn < 1 ? max_norm / (double)gn : 1;
        ref_adam(hf(t, p), hf(t, g), hf(t, m), hf(t, v), n, lr, b1, b2, eps, wd, scale,
                 (uint64_t)t->s[3], want(t, p), want(t, m), want(t, v));
    }
    REFUSE(t, adam, p, g, m, v, n, lr, 1.0f, b2, eps, wd, gnorm, max_norm, step, NULL);
}

/* s: n period step tau*1000 */
static void c_target_update(tc *t) {
    size_t n = (size_t)t->s[0];
    int period = t->s[1];
    float tau = (float)t->s[3] / 1000;
    float *dst = io_f(t, "dst", n, -1, 1);
    const float *src = in_f(t, n, -1, 1);
    const uint64_t *step = in_u64(t, (uint64_t)t->s[2]);
    OP(t, target_update, dst, src, n, period, tau, step);
    if (!t->ref) return;
    double *w = want(t, dst);
    for (size_t i = 0; i < n; i++) {
        double d = hf(t, dst)[i], s = hf(t, src)[i];
        w[i] = period == 0 ? tau * s + (1 - (double)tau) * d
                           : ((uint64_t)t->s[2] + 1) % (uint64_t)period == 0 ? s : d;
    }
    REFUSE(t, target_update, dst, src, n, -1, tau, step);
}

/* s: step (2^40 + s[1] when s[1] is set: past 32 bits) */
static void c_step_incr(tc *t) {
    uint64_t s0 = (uint64_t)t->s[0] + (t->s[1] ? ((uint64_t)1 << 40) + (uint64_t)t->s[1] : 0);
    uint64_t *step = io_u64(t, "step", s0);
    OP(t, step_incr, step);
    if (t->ref) want(t, step)[0] = (double)(s0 + 1);
}

/* ======================= numerical health ======================= */

/* s: n step at kind */
static void c_health_fault(tc *t) {
    size_t n = (size_t)t->s[0];
    float *x = io_f(t, "x", n, -1, 1);
    const uint64_t *step = in_u64(t, (uint64_t)t->s[1]);
    OP(t, health_fault, x, n, step, (uint64_t)t->s[2], t->s[3]);
    if (!t->ref) return;
    want_same(t, x);
    const double vals[4] = {0, NAN, INFINITY, 1e30};
    if (t->s[1] == t->s[2]) want(t, x)[n / 2] = (float)vals[t->s[3]];
}

/* ======================= random numbers, gathers, sampling ======================= */

static const struct {
    uint64_t seed;
    uint32_t stream;
    uint64_t step, stride;
    uint32_t size;
} RAND_CASES[] = {{1234, DQN_STREAM_TAU_ONLINE, 0, 0, 1},
                  {42, DQN_STREAM_REPLAY, 3, 1000, 978},
                  {7, DQN_STREAM_TAU_TARGET, 5, 13, 1955},
                  {~0ull, 99, 1ull << 40, 4097, 2932},
                  {0, DQN_STREAM_EXPLORE, 2, 3, 3909},
                  {2024, DQN_STREAM_TAU_ACT, 9, 160000, 16},
                  {0x123456789abcull, DQN_STREAM_REPLAY, 7, 3000000, 1000003}};

/* s: n case; a large draw is also checked for uniformity (chi-square over 16 bins, 15 degrees
 * of freedom: 0.999 quantile 37.7) */
static void c_rand_uniform(tc *t) {
    size_t n = (size_t)t->s[0];
    int c = t->s[1];
    const uint64_t *step = in_u64(t, RAND_CASES[c].step);
    float *u = out_f(t, "out", n);
    OP(t, rand_uniform, u, n, RAND_CASES[c].seed, RAND_CASES[c].stream, step, RAND_CASES[c].stride);
    if (!t->ref) return;
    double *w = want(t, u), hist[16] = {0}, chi = 0;
    uint64_t base = RAND_CASES[c].step * RAND_CASES[c].stride;
    for (size_t j = 0; j < n; j++) {
        w[j] = dqn_philox_uniform(RAND_CASES[c].seed, RAND_CASES[c].stream, base + j);
        hist[(int)(w[j] * 16)]++;
    }
    for (int b = 0; b < 16 && n >= 100000; b++) chi += pow(hist[b] - n / 16.0, 2) / (n / 16.0);
    CHECK(chi < 37.7, "%s: chi-square %.1f over 16 bins", t->where, chi);
}

/* s: n case */
static void c_rand_index(tc *t) {
    size_t n = (size_t)t->s[0];
    int c = t->s[1];
    const uint64_t *step = in_u64(t, RAND_CASES[c].step);
    const uint32_t *size = in_u32(t, RAND_CASES[c].size);
    int32_t *idx = out_i(t, "idx", n);
    OP(t, rand_index, idx, n, RAND_CASES[c].seed, RAND_CASES[c].stream, step,
       RAND_CASES[c].stride, size);
    if (!t->ref) return;
    double *w = want(t, idx);
    uint64_t base = RAND_CASES[c].step * RAND_CASES[c].stride;
    double hist[16] = {0}, chi = 0;
    for (size_t j = 0; j < n; j++) {
        w[j] = dqn_philox_below(RAND_CASES[c].seed, RAND_CASES[c].stream, base + j,
                                RAND_CASES[c].size);
        if (RAND_CASES[c].size == 16) hist[(int)w[j]]++;
    }
    /* a large draw below 16: uniform by chi-square (15 degrees of freedom, 0.999 quantile) */
    for (int b = 0; b < 16 && n >= 100000 && RAND_CASES[c].size == 16; b++)
        chi += pow(hist[b] - n / 16.0, 2) / (n / 16.0);
    CHECK(chi < 37.7, "%s: chi-square %.1f over 16 bins", t->where, chi);
    const uint32_t *zero = in_u32(t, 0);
    REFUSE(t, rand_index, (int32_t *)tmp_f(t, n), n, 1, 1, step, 1, zero);
}

/* s: rows row_len n */
static void c_gather_f32(tc *t) {
    int rows = t->s[0], len = t->s[1], n = t->s[2];
    const float *src = in_f(t, (size_t)rows * len, -5, 5);
    const int32_t *idx = in_i(t, (size_t)n, (uint32_t)rows);
    float *dst = out_f(t, "dst", (size_t)n * len);
    OP(t, gather_f32, src, idx, dst, n, len);
    if (!t->ref) return;
    double *w = want(t, dst);
    for (int j = 0; j < n; j++)
        for (int k = 0; k < len; k++)
            w[(size_t)j * len + k] = hf(t, src)[(size_t)hi(t, idx)[j] * len + k];
    int32_t *bad = in_i(t, (size_t)n, (uint32_t)rows);
    hi(t, bad)[n - 1] = -1;
    resync(t, bad);
    REFUSE(t, gather_f32, src, bad, tmp_f(t, (size_t)n * len), n, len);
}

/* s: rows row_len n */
static void c_gather_i32(tc *t) {
    int rows = t->s[0], len = t->s[1], n = t->s[2];
    const int32_t *src = in_i(t, (size_t)rows * len, 1u << 30);
    const int32_t *idx = in_i(t, (size_t)n, (uint32_t)rows);
    int32_t *dst = out_i(t, "dst", (size_t)n * len);
    OP(t, gather_i32, src, idx, dst, n, len);
    if (!t->ref) return;
    double *w = want(t, dst);
    for (int j = 0; j < n; j++)
        for (int k = 0; k < len; k++)
            w[(size_t)j * len + k] = hi(t, src)[(size_t)hi(t, idx)[j] * len + k];
}

/* a replay of cap rows (size filled) and the sample's outputs */
typedef struct {
    dqn_sample_src src;
    dqn_sample_dst dst;
} sample_io;

static sample_io make_sample(tc *t, int cap, int size, int B, int obs, int D) {
    sample_io s = {0};   /* fields this case does not set stay NULL */
    s.src.obs = in_f(t, (size_t)cap * obs, -1, 1);
    s.src.next_obs = in_f(t, (size_t)cap * obs, -1, 1);
    s.src.R = in_f(t, (size_t)cap, -1, 1);
    s.src.disc = in_f(t, (size_t)cap, 0, 1);
    s.src.act = in_i(t, (size_t)cap * D, 1000);
    s.src.size = in_u32(t, (uint32_t)size);
    s.src.obs_dim = obs, s.src.D = D;
    s.dst.idx = out_i(t, "idx", (size_t)B);
    s.dst.act = out_i(t, "act", (size_t)B * D);
    s.dst.x = out_f(t, "x", (size_t)B * obs);
    s.dst.xn = out_f(t, "xn", (size_t)B * obs);
    s.dst.R = out_f(t, "R", (size_t)B);
    s.dst.disc = out_f(t, "disc", (size_t)B);
    return s;
}

/* the reference of a sample: idx = philox_below(step * B + j) (or src.idx), the rows it names */
static void ref_sample(tc *t, const sample_io *s, int B, uint64_t seed, uint64_t step) {
    int obs = s->src.obs_dim, D = s->src.D;
    uint32_t size = *(const uint32_t *)find_buf(t, s->src.size)->host0;
    double *wi = want(t, s->dst.idx), *wa = want(t, s->dst.act), *wx = want(t, s->dst.x);
    double *wn = want(t, s->dst.xn), *wr = want(t, s->dst.R), *wd = want(t, s->dst.disc);
    for (int j = 0; j < B; j++) {
        uint32_t r = s->src.idx ? (uint32_t)hi(t, s->src.idx)[j]
                                : dqn_philox_below(seed, DQN_STREAM_REPLAY,
                                                   step * (uint64_t)B + (uint64_t)j, size);
        wi[j] = r;
        for (int k = 0; k < obs; k++) {
            wx[(size_t)j * obs + k] = hf(t, s->src.obs)[(size_t)r * obs + k];
            wn[(size_t)j * obs + k] = hf(t, s->src.next_obs)[(size_t)r * obs + k];
        }
        for (int b = 0; b < D; b++) wa[(size_t)j * D + b] = hi(t, s->src.act)[(size_t)r * D + b];
        wr[j] = hf(t, s->src.R)[r], wd[j] = hf(t, s->src.disc)[r];
    }
}

/* the sample as its ops: rand_index (or a copy of the rows given), then the gathers */
static void seq_sample(tc *t, const sample_io *s, int B, uint64_t seed, const uint64_t *step) {
    int obs = s->src.obs_dim, D = s->src.D;
    if (s->src.idx) OP(t, d2d, s->dst.idx, s->src.idx, (size_t)B * sizeof(int32_t));
    else
        OP(t, rand_index, s->dst.idx, (size_t)B, seed, DQN_STREAM_REPLAY, step, (uint64_t)B,
           s->src.size);
    OP(t, gather_f32, s->src.obs, s->dst.idx, s->dst.x, B, obs);
    OP(t, gather_f32, s->src.next_obs, s->dst.idx, s->dst.xn, B, obs);
    OP(t, gather_i32, s->src.act, s->dst.idx, s->dst.act, B, D);
    OP(t, gather_f32, s->src.R, s->dst.idx, s->dst.R, B, 1);
    OP(t, gather_f32, s->src.disc, s->dst.idx, s->dst.disc, B, 1);
}

/* s: cap size B obs D step rows_given (src.idx: the rows prioritised replay drew) */
static void c_sample_batch(tc *t) {
    int B = t->s[2];
    sample_io s = make_sample(t, t->s[0], t->s[1], B, t->s[3], t->s[4]);
    if (t->s[6]) s.src.idx = in_i(t, (size_t)B, (uint32_t)t->s[1]);
    const uint64_t *step = in_u64(t, (uint64_t)t->s[5]);
    if (t->seq) seq_sample(t, &s, B, 77, step);
    else OP(t, sample_batch, &s.src, &s.dst, B, 77, step);
    if (t->ref) ref_sample(t, &s, B, 77, (uint64_t)t->s[5]);
}

/* three draws: the online, target and selection taus of B states */
static dqn_draws make_draws(tc *t, int B, const int *T) {
    const uint32_t st[3] = {DQN_STREAM_TAU_ONLINE, DQN_STREAM_TAU_TARGET, DQN_STREAM_TAU_SELECT};
    static const char *names[3] = {"tau online", "tau target", "tau select"};
    dqn_draws d = {.count = 3};
    for (int k = 0; k < 3; k++) {
        d.n[k] = (size_t)B * T[k];
        d.out[k] = out_f(t, names[k], d.n[k]);
        d.stream[k] = st[k];
        d.stride[k] = d.n[k];
    }
    return d;
}

static void ref_draws(tc *t, const dqn_draws *d, uint64_t seed, uint64_t step) {
    for (int k = 0; k < d->count; k++) {
        double *w = want(t, d->out[k]);
        for (size_t j = 0; j < d->n[k]; j++)
            w[j] = dqn_philox_uniform(seed, d->stream[k], step * d->stride[k] + j);
    }
}

/* s: B T T' K step */
static void c_rand_uniform_multi(tc *t) {
    dqn_draws d = make_draws(t, t->s[0], t->s + 1);
    const uint64_t *step = in_u64(t, (uint64_t)t->s[4]);
    OP(t, rand_uniform_multi, &d, 9, step);
    if (!t->ref) return;
    ref_draws(t, &d, 9, (uint64_t)t->s[4]);
    dqn_draws bad = d;
    bad.count = DQN_MAX_DRAWS + 1;
    REFUSE(t, rand_uniform_multi, &bad, 9, step);
}

/* s: B obs D step T T' K (a replay of 3B rows, 5 short of full) */
static void c_sample_draws(tc *t) {
    int B = t->s[0];
    sample_io s = make_sample(t, 3 * B, 3 * B - 5, B, t->s[1], t->s[2]);
    dqn_draws d = make_draws(t, B, t->s + 4);
    const uint64_t *step = in_u64(t, (uint64_t)t->s[3]);
    if (t->seq) {
        OP(t, sample_batch, &s.src, &s.dst, B, 5, step);
        OP(t, rand_uniform_multi, &d, 5, step);
    } else {
        OP(t, sample_draws, &s.src, &s.dst, B, &d, 5, step);
    }
    if (!t->ref) return;
    ref_sample(t, &s, B, 5, (uint64_t)t->s[3]);
    ref_draws(t, &d, 5, (uint64_t)t->s[3]);
}

/* ======================= prioritised replay ======================= */

/* A sum-tree of L leaves (the least power of two >= cap) over size rows: leaf priorities uniform
 * in [0.01, 2), zero past size, every parent left + right, node 0 above the largest leaf (a
 * larger priority given earlier) */
static dqn_per make_per(tc *t, int cap, int size) {
    dqn_per per = {.cap = cap, .alpha = 0.6f, .beta0 = 0.4f, .eps = 1e-6f, .beta_updates = 50};
    per.leaves = dqn_per_leaves(cap);
    const int L = per.leaves;
    per.tree = in_f(t, 2 * (size_t)L, 0.01, 2);
    float *h = hf(t, per.tree), most = 0;
    for (int i = 0; i < L; i++) h[L + i] = i < size ? h[L + i] : 0.0f;
    for (int i = 0; i < size; i++) most = fmaxf(most, h[L + i]);
    for (int k = L - 1; k >= 1; k--) h[k] = h[2 * k] + h[2 * k + 1];
    h[0] = 1.25f * most;
    resync(t, per.tree);
    per.size = in_u32(t, (uint32_t)size);
    return per;
}

/* every parent of tree (L leaves) recomputed as left + right, bottom up, into want */
static void want_tree(tc *t, const dqn_per *per, float *tree) {
    const int L = per->leaves;
    for (int k = L - 1; k >= 1; k--) tree[k] = tree[2 * k] + tree[2 * k + 1];
    double *w = want(t, per->tree);
    for (int k = 0; k < 2 * L; k++) w[k] = tree[k];
}

/* s: cap size B step (beta anneals over 50 updates) */
static void c_per_sample(tc *t) {
    int cap = t->s[0], size = t->s[1], B = t->s[2];
    uint64_t st = (uint64_t)t->s[3];
    dqn_per per = make_per(t, cap, size);
    const uint64_t *step = in_u64(t, st);
    int32_t *idx = out_i(t, "idx", (size_t)B);
    float *w = out_f(t, "w", (size_t)B);
    OP(t, per_sample, &per, idx, w, B, 17, step);
    if (!t->ref) return;
    const float *tree = hf(t, per.tree);
    double *wi = want(t, idx), *ww = want(t, w);
    float p_min = INFINITY;
    for (int j = 0; j < B; j++) {
        float u = dqn_philox_uniform(17, DQN_STREAM_REPLAY, st * (uint64_t)B + (uint64_t)j);
        int32_t i =
            dqn_per_descend(tree, per.leaves, dqn_per_target(j, B, u, tree[1]), (uint32_t)size);
        wi[j] = i;
        p_min = fminf(p_min, tree[per.leaves + i]);
    }
    float beta = dqn_per_beta(st, per.beta0, per.beta_updates);
    for (int j = 0; j < B; j++) ww[j] = dqn_per_weight(tree[per.leaves + (int)wi[j]], p_min, beta);
    dqn_per bad = per;
    bad.leaves = 3 * per.leaves;   /* not a power of two */
    REFUSE(t, per_sample, &bad, (int32_t *)tmp_f(t, (size_t)B), tmp_f(t, (size_t)B), B, 17, step);
}

/* s: cap size B. Rows 0 and 1 of the batch name the same row (the larger priority wins), row 2's
 * loss is NaN and row 3's negative (both the least priority), row 4's above every priority so far
 * (node 0 rises). */
static void c_per_update(tc *t) {
    int cap = t->s[0], size = t->s[1], B = t->s[2];
    dqn_per per = make_per(t, cap, size);
    make_out(t, per.tree, "tree");
    int32_t *idx = in_i(t, (size_t)B, (uint32_t)size);
    float *loss = in_f(t, (size_t)B, 0, 4), *hl = hf(t, loss);
    hi(t, idx)[1] = hi(t, idx)[0];
    hl[2] = NAN, hl[3] = -1.0f, hl[4] = 1e3f;
    resync(t, idx);
    resync(t, loss);
    OP(t, per_update, &per, idx, loss, B);
    if (!t->ref) return;
    const int L = per.leaves;
    float *tree = reg_xmalloc(2 * (size_t)L * sizeof(float));
    memcpy(tree, hf(t, per.tree), 2 * (size_t)L * sizeof(float));
    for (int j = 0; j < B; j++) {   /* first the batch's priorities, then the largest of repeats */
        int32_t i = hi(t, idx)[j];
        float p = dqn_per_priority(hl[j], per.alpha, per.eps);
        int first = 1;
        for (int k = 0; k < j; k++) first &= hi(t, idx)[k] != i;
        tree[L + i] = first ? p : fmaxf(tree[L + i], p);
        tree[0] = fmaxf(tree[0], p);
    }
    want_tree(t, &per, tree);
    free(tree);
    int32_t *bad = in_i(t, (size_t)B, (uint32_t)size);
    hi(t, bad)[0] = cap;
    resync(t, bad);
    REFUSE(t, per_update, &per, bad, loss, B);
}

/* s: cap size pos n (the rows from pos wrap past cap) */
static void c_per_insert(tc *t) {
    int cap = t->s[0], size = t->s[1], pos = t->s[2], n = t->s[3];
    dqn_per per = make_per(t, cap, size);
    make_out(t, per.tree, "tree");
    OP(t, per_insert, &per, pos, n);
    if (!t->ref) return;
    const int L = per.leaves;
    float *tree = reg_xmalloc(2 * (size_t)L * sizeof(float));
    memcpy(tree, hf(t, per.tree), 2 * (size_t)L * sizeof(float));
    for (int j = 0; j < n; j++) tree[L + (pos + j) % cap] = tree[0];
    want_tree(t, &per, tree);
    free(tree);
    REFUSE(t, per_insert, &per, cap, 1);
}

/* ======================= the classic envs ======================= */

/* The classic envs with the correctly rounded math (cr = 1) as vector envs: the reference of
 * env_step is dqn_vecenv's bookkeeping over the same dynamics. */
typedef struct {
    double s[4];
} cl_state4;
typedef struct {
    double s[2];
} cl_state2;
#define CL_CR_ENV(NAME, STATE_T, OBS, RESET, STEP)                                             \
    static void NAME##_reset1(const void *ctx, void *st, dqn_rng *rng, float *obs) {           \
        (void)ctx;                                                                             \
        RESET;                                                                                 \
    }                                                                                          \
    static void NAME##_step1(const void *ctx, void *st, const int32_t *a, float *obs,          \
                             float *reward, int *term) {                                       \
        (void)ctx;                                                                             \
        *term = STEP(1, ((STATE_T *)st)->s, a[0], obs, reward);                                \
    }                                                                                          \
    DQN_ENV_BATCHED(NAME, STATE_T, OBS, 1)
CL_CR_ENV(cp_cr, cl_state4, DQN_CARTPOLE_OBS,
          dqn_cartpole_reset(((cl_state4 *)st)->s, rng->seed, rng->stream, &rng->counter, obs),
          dqn_cartpole_step)
CL_CR_ENV(ac_cr, cl_state4, DQN_ACROBOT_OBS,
          dqn_acrobot_reset(1, ((cl_state4 *)st)->s, rng->seed, rng->stream, &rng->counter, obs),
          dqn_acrobot_step)
CL_CR_ENV(mc_cr, cl_state2, DQN_MOUNTAINCAR_OBS,
          dqn_mountaincar_reset(((cl_state2 *)st)->s, rng->seed, rng->stream, &rng->counter,
                                obs),
          dqn_mountaincar_step)

static dqn_env cl_cr_env(int kind, int max_steps) {
    dqn_env e;
    memset(&e, 0, sizeof e);
    e.name = kind == DQN_ENV_CARTPOLE ? "cartpole_cr" : kind == DQN_ENV_ACROBOT ? "acrobot_cr"
                                                                                : "mountaincar_cr";
    e.obs_dim = kind == DQN_ENV_CARTPOLE ? DQN_CARTPOLE_OBS
                : kind == DQN_ENV_ACROBOT ? DQN_ACROBOT_OBS
                                          : DQN_MOUNTAINCAR_OBS;
    e.n_branches = 1;
    e.branch_sizes[0] = kind == DQN_ENV_CARTPOLE ? 2 : 3;
    e.max_steps = max_steps;
    e.state_size = kind == DQN_ENV_MOUNTAINCAR ? sizeof(cl_state2) : sizeof(cl_state4);
    e.reset = kind == DQN_ENV_CARTPOLE ? cp_cr_reset : kind == DQN_ENV_ACROBOT ? ac_cr_reset
                                                                               : mc_cr_reset;
    e.step = kind == DQN_ENV_CARTPOLE ? cp_cr_step : kind == DQN_ENV_ACROBOT ? ac_cr_step
                                                                             : mc_cr_step;
    return e;
}

/* env_step's registry rows: the carried buffers (counters from c0, a state of state_n elements
 * of type st) and rn calls' outputs (row k: call k's, row 0 the reset's), then the op called rn
 * times: the reset, then steps under act ([rn - 1][n * A]). */
typedef struct {
    float *obs, *fobs, *rew;
    uint8_t *term, *trunc;
    double *dret;
    int32_t *dlen;
} env_rows;

static env_rows env_rows_run(tc *t, dqn_env_io *io, const uint64_t *c0, btype st, size_t state_n,
                             size_t rn, size_t od, const int32_t *act, size_t A) {
    const size_t N = (size_t)io->n;
    env_rows r;
    io->counter = in_u64n(t, N, c0);
    make_out(t, io->counter, "counter");
    io->state = out_part(t, st, "state", state_n, state_n);
    io->ep_len = out_i(t, "ep_len", N);
    io->ep_return = out_part(t, T_F64, "ep_return", N, N);
    r.obs = out_f(t, "obs", rn * N * od), r.fobs = out_f(t, "final_obs", rn * N * od);
    r.rew = out_f(t, "reward", rn * N);
    r.term = out_part(t, T_U8, "terminated", rn * N, rn * N);
    r.trunc = out_part(t, T_U8, "truncated", rn * N, rn * N);
    r.dret = out_part(t, T_F64, "done_return", rn * N, rn * N);
    r.dlen = out_i(t, "done_len", rn * N);
    for (size_t k = 0; k < rn && !t->failed; k++) {
        dqn_env_io at = *io;
        at.obs = r.obs + k * N * od, at.final_obs = r.fobs + k * N * od, at.reward = r.rew + k * N;
        at.terminated = r.term + k * N, at.truncated = r.trunc + k * N;
        at.done_return = r.dret + k * N, at.done_len = r.dlen + k * N;
        OP(t, env_step, &at, k == 0 ? NULL : act + (k - 1) * N * A);
    }
    return r;
}

/* The reference of env_rows_run: v (over the same env, seed and streams) from counters c0,
 * reset, then stepped under act; its outputs after each call and its state (as st's elements),
 * counters, lengths and returns at the end are t's wants. Counts the terminations and
 * truncations, and the rewards equal to *mark where mark is given. */
static void env_rows_want(tc *t, const dqn_env_io *io, const env_rows *r, dqn_vecenv *v,
                          const uint64_t *c0, btype st, size_t state_n, size_t rn, size_t od,
                          const int32_t *act, size_t A, long *terminations, long *truncations,
                          const float *mark, long *marks) {
    const size_t N = (size_t)io->n;
    for (size_t i = 0; i < N; i++) v->rng[i].counter = c0[i];
    double *wo = want(t, r->obs), *wf = want(t, r->fobs), *wr = want(t, r->rew);
    double *wt = want(t, r->term), *wu = want(t, r->trunc), *wd = want(t, r->dret);
    double *wl = want(t, r->dlen);
    for (size_t k = 0; k < rn; k++) {
        CHECK_OK(k == 0 ? dqn_vecenv_reset(v) : dqn_vecenv_step(v, hi(t, act) + (k - 1) * N * A));
        for (size_t j = 0; j < N * od; j++) {
            wo[k * N * od + j] = v->obs[j];
            wf[k * N * od + j] = v->final_obs[j];
        }
        for (size_t i = 0; i < N; i++) {
            size_t q = k * N + i;
            wr[q] = v->reward[i], wt[q] = v->terminated[i], wu[q] = v->truncated[i];
            wd[q] = v->done_return[i], wl[q] = v->done_len[i];
            *terminations += v->terminated[i], *truncations += v->truncated[i];
            if (mark) *marks += v->reward[i] == *mark;
        }
    }
    double *ws = want(t, io->state), *wc = want(t, io->counter), *wel = want(t, io->ep_len);
    double *wer = want(t, io->ep_return);
    for (size_t j = 0; j < state_n; j++)
        ws[j] = st == T_F64 ? ((const double *)v->state)[j] : ((const uint8_t *)v->state)[j];
    for (size_t i = 0; i < N; i++)
        wc[i] = (double)v->rng[i].counter, wel[i] = v->ep_len[i], wer[i] = v->ep_return[i];
}

/* s: DQN_ENV_MARKET n steps max_steps assets levels window cols episode_len spread. A table of
 * window + episode_len + spread + 2 rows (z uniform in [-3, 3), prices uniform in [20, 120): the
 * periods gain, lose, and a short through a price more than doubling hits the ruin floor),
 * episodes starting in [window, window + spread]; each slot's first decision from flat, then
 * actions [n, assets] uniform below levels; counters as c_env_step's. The reference: dqn_vecenv
 * over the market env on the same tables (a host context of them), as c_env_step's; the states
 * compared as bytes (dqn_market_state: its row, the last period's accounting, the positions). */
static void c_env_step_market(tc *t) {
    const int n = t->s[1], steps = t->s[2], max_steps = t->s[3], A = t->s[4], levels = t->s[5];
    const int W = t->s[6], cols = t->s[7], L = t->s[8], spread = t->s[9];
    const int first = W, end = W + L + spread, rows = end + 2;
    const size_t N = (size_t)n, od = (size_t)(W * cols + A), rn = (size_t)steps + 1;
    const size_t sb = sizeof(dqn_market_state);
    const uint64_t seed = 0x5EED0000ull + DQN_ENV_MARKET;
    const float *z = in_f(t, (size_t)rows * cols, -3, 3);
    tbuf *pb = new_buf(t, T_F64, (size_t)rows * A, B_IN, NULL);
    for (size_t j = 0; j < pb->n; j++)
        ((double *)pb->host0)[j] = 20.0 + 100.0 * reg_u01(t->key, t->nb - 1, j);
    upload(t, pb);
    const dqn_market_dev m = {.z = z, .price = pb->dev, .rows = rows, .cols = cols, .assets = A,
                              .levels = levels, .window = W, .first = first, .end = end,
                              .episode_len = L, .cost = 0.001, .holding = 0.0003,
                              .reward_scale = 50.0};
    uint64_t *c0 = reg_xmalloc(N * sizeof *c0);
    for (size_t i = 0; i < N; i++) c0[i] = i % 3 == 1 ? (1ull << 32) - 2 - i % 7 : i % 5;
    dqn_env_io io = {.kind = DQN_ENV_MARKET, .math = DQN_ENV_MATH_CR, .n = n,
                     .max_steps = max_steps, .seed = seed, .stream_base = DQN_STREAM_ENV,
                     .market = &m};
    const int32_t *act = in_i(t, (size_t)steps * N * A, (uint32_t)levels);
    const env_rows r = env_rows_run(t, &io, c0, T_U8, N * sb, rn, od, act, (size_t)A);
    if (!t->ref) {
        free(c0);
        return;
    }
    dqn_market_ctx x;
    memset(&x, 0, sizeof x);
    x.z = hf(t, z);
    x.data.price = pb->host0;
    x.data.rows = rows, x.data.assets = A;
    x.cols = cols, x.assets = A, x.levels = levels, x.window = W, x.first = first, x.end = end;
    x.episode_len = L, x.cost = m.cost, x.holding = m.holding, x.reward_scale = m.reward_scale;
    dqn_env env = dqn_env_of(dqn_env_find("market"));
    env.ctx = &x;
    env.obs_dim = (int)od;
    env.n_branches = A;
    for (int a = 0; a < A; a++) env.branch_sizes[a] = levels;
    env.max_steps = max_steps;
    env.state_size = sb;
    dqn_vecenv v;
    CHECK_OK(dqn_vecenv_create(&v, &env, n, seed, DQN_STREAM_ENV));
    const float ruin = (float)(m.reward_scale * dqn_market_log(DQN_MARKET_RUIN));
    long terminations = 0, truncations = 0, ruins = 0;
    env_rows_want(t, &io, &r, &v, c0, T_U8, N * sb, rn, od, act, (size_t)A, &terminations,
                  &truncations, &ruin, &ruins);
    CHECK(steps < max_steps || truncations > 0, "%s: no truncation", t->where);
    CHECK(A > 1 || steps * n < 200 || ruins > 0, "%s: no period reached the ruin floor",
          t->where);
    dqn_vecenv_destroy(&v);
    free(c0);
    dqn_env_io bad = io;
    bad.market = NULL;
    REFUSE(t, env_step, &bad, NULL);
    bad = io, bad.max_steps = L + 1;
    REFUSE(t, env_step, &bad, NULL);
    dqn_market_dev bm = m;
    bm.end = rows;
    bad = io, bad.market = &bm;
    REFUSE(t, env_step, &bad, NULL);
}

/* s: kind n steps max_steps (kind: DQN_ENV_*; DQN_ENV_MARKET: c_env_step_market's). The op
 * resets every slot (actions NULL), then
 * steps them `steps` times, each call's outputs into its own rows (row 0: the reset's), under
 * actions uniform below the env's count; the streams start at counters near 2^32 for a share of
 * the slots (the index's high word). The reference: dqn_vecenv over the same dynamics and math,
 * seed and streams, its outputs after each call, its state, counters, lengths and returns at
 * the end. */
static void c_env_step(tc *t) {
    if (t->s[0] == DQN_ENV_MARKET) {
        c_env_step_market(t);
        return;
    }
    const int kind = t->s[0], n = t->s[1], steps = t->s[2], max_steps = t->s[3];
    const dqn_env env = cl_cr_env(kind, max_steps);
    const size_t od = (size_t)env.obs_dim, sd = env.state_size / sizeof(double), N = (size_t)n;
    const size_t rows = (size_t)steps + 1;
    const uint64_t seed = 0x5EED0000ull + (uint64_t)kind;
    uint64_t *c0 = reg_xmalloc(N * sizeof *c0);
    for (size_t i = 0; i < N; i++) c0[i] = i % 3 == 1 ? (1ull << 32) - 2 - i % 7 : i % 5;
    dqn_env_io io = {.kind = (dqn_env_kind)kind, .math = DQN_ENV_MATH_CR, .n = n,
                     .max_steps = max_steps, .seed = seed, .stream_base = DQN_STREAM_ENV};
    const int32_t *act = in_i(t, (size_t)steps * N, (uint32_t)env.branch_sizes[0]);
    const env_rows r = env_rows_run(t, &io, c0, T_F64, N * sd, rows, od, act, 1);
    if (!t->ref) {
        free(c0);
        return;
    }
    dqn_vecenv v;
    CHECK_OK(dqn_vecenv_create(&v, &env, n, seed, DQN_STREAM_ENV));
    long terminations = 0, truncations = 0;
    env_rows_want(t, &io, &r, &v, c0, T_F64, N * sd, rows, od, act, 1, &terminations,
                  &truncations, NULL, NULL);
    /* the rows are worth their steps: the time limit ends episodes where it falls inside them,
     * and random pushes drop the pole within 30 steps (the other envs' random walks seldom reach
     * their goals: their terminal step is the same slot code) */
    CHECK(max_steps == 0 || steps < max_steps || truncations > 0, "%s: no truncation", t->where);
    CHECK(kind != DQN_ENV_CARTPOLE || steps < 30 || terminations > 0, "%s: no pole fell",
          t->where);
    dqn_vecenv_destroy(&v);
    free(c0);
    dqn_env_io bad = io;
    bad.kind = (dqn_env_kind)4;
    REFUSE(t, env_step, &bad, NULL);
    bad = io, bad.n = 0;
    REFUSE(t, env_step, &bad, NULL);
    bad = io, bad.reward = NULL;
    REFUSE(t, env_step, &bad, NULL);
}

/* ======================= the rest of an env step ======================= */

/* epsilon schedules a shape names by index: start, end, span */
static const double EPS_SCHED[][3] = {
    {1.0, 0.05, 1000.0}, {1.0, 1.0, 0.0}, {0.0, 0.0, 100.0}, {1.0, 0.02, 0.0}, {0.9, 0.1, 50.0}};

/* s: n branches act_steps env_steps schedule no_tau in_place. The reference: the trainer's act
 * written out (epsilon in double, one coin flip and one action draw per element). */
static void c_explore(tc *t) {
    const int n = t->s[0];
    const dqn_branches br = br_of(t->s[1]);
    const uint64_t a0 = (uint64_t)t->s[2], tau0 = 11;
    const int64_t e0 = t->s[3];
    const double *sc = EPS_SCHED[t->s[4]];
    const size_t nd = (size_t)n * br.D;
    int32_t *greedy = in_act(t, n, &br), *actions = greedy;
    if (t->s[6]) make_out(t, greedy, "actions (in place)");
    else actions = out_i(t, "actions", nd);
    dqn_explore_io x = {.n = n, .seed = 0xE4B10E, .eps_start = sc[0], .eps_end = sc[1],
                        .eps_span = sc[2]};
    x.act_steps = io_u64(t, "act_steps", a0);
    x.env_steps = (int64_t *)io_u64(t, "env_steps", (uint64_t)e0);
    x.tau_step = t->s[5] ? NULL : io_u64(t, "tau_step", tau0);
    OP(t, explore, &x, &br, greedy, actions);
    if (!t->ref) return;
    double f = sc[2] > 0 ? (double)e0 / sc[2] : 1.0;
    const double eps = sc[0] + (sc[1] - sc[0]) * (f < 1.0 ? f : 1.0);
    const uint64_t base = a0 * nd * 2;
    double *wa = want(t, actions);
    int greedy_any = 0, random_any = 0;
    for (size_t i = 0; i < nd; i++) {
        float u = dqn_philox_uniform(x.seed, DQN_STREAM_EXPLORE, base + 2 * i);
        if (u < eps) {
            wa[i] = dqn_philox_below(x.seed, DQN_STREAM_EXPLORE, base + 2 * i + 1,
                                     (uint32_t)br.n[i % br.D]);
            random_any = 1;
        } else {
            wa[i] = hi(t, greedy)[i];
            greedy_any = 1;
        }
    }
    want(t, x.act_steps)[0] = (double)(a0 + 1);
    want(t, x.env_steps)[0] = (double)(e0 + n);
    if (x.tau_step) want(t, x.tau_step)[0] = (double)(tau0 + (uint64_t)greedy_any);
    /* the schedules' point: all random, all greedy, or both */
    CHECK(t->s[4] != 1 || !greedy_any, "%s: a greedy action at epsilon 1", t->where);
    CHECK(t->s[4] != 2 || !random_any, "%s: a random action at epsilon 0", t->where);
    dqn_explore_io bad = x;
    bad.n = 0;
    REFUSE(t, explore, &bad, &br, greedy, actions);
    bad = x, bad.env_steps = NULL;
    REFUSE(t, explore, &bad, &br, greedy, actions);
    dqn_branches bb = br;
    bb.n[0] = 0;
    REFUSE(t, explore, &x, &bb, greedy, actions);
}

/* s: n_envs n_step obs_dim D cap pos size steps per p_end (percent). The windows start at
 * random heads and lengths (below n_step), the ring at random rows, pos and size, the sum-tree
 * as per_insert's case makes it (per 1); each of `steps` calls pushes one step of every env,
 * terminated with probability p_end / 2 and, independently, truncated with p_end / 2 (so both at
 * once too: terminated wins). The reference: the n-step assembler and the ring written out
 * naively, the tree's parents recomputed at the end. Shapes with more emissions in one call than
 * the ring holds, and with more envs than CUDA's block has threads. */
static void c_replay_push(tc *t) {
    const int NE = t->s[0], n = t->s[1], od = t->s[2], D = t->s[3], cap = t->s[4];
    const int pos0 = t->s[5], size0 = t->s[6], steps = t->s[7], use_per = t->s[8];
    const double p_end = t->s[9] / 100.0;
    const size_t S = (size_t)steps, E = (size_t)NE, W = E * (size_t)n;
    const float *obs = in_f(t, S * E * od, -2, 2), *fobs = in_f(t, S * E * od, -2, 2);
    const int32_t *act = in_i(t, S * E * D, 1000);
    const float *rew = in_f(t, S * E, -1, 1);
    const uint8_t *term = in_u8(t, S * E, p_end / 2), *trunc = in_u8(t, S * E, p_end / 2);
    dqn_nstep_win w = {.n_envs = NE, .n = n, .obs_dim = od, .D = D, .gamma = 0.97};
    w.obs = io_f(t, "win.obs", W * od, -2, 2);
    w.act = in_i(t, W * D, 1000);
    w.rew = io_f(t, "win.rew", W, -1, 1);
    w.head = in_i(t, E, (uint32_t)n);
    w.count = in_i(t, E, (uint32_t)n);
    make_out(t, w.act, "win.act");
    make_out(t, w.head, "win.head");
    make_out(t, w.count, "win.count");
    dqn_per per;
    dqn_ring r = {.cap = cap, .obs_dim = od, .D = D};
    if (use_per) {
        per = make_per(t, cap, size0);
        make_out(t, per.tree, "tree");
        r.size = (uint32_t *)per.size;
        r.per = &per;
    } else {
        r.size = in_u32(t, (uint32_t)size0);
    }
    make_out(t, r.size, "size");
    r.pos = in_u32(t, (uint32_t)pos0);
    make_out(t, r.pos, "pos");
    r.obs = io_f(t, "ring.obs", (size_t)cap * od, -3, 3);
    r.next_obs = io_f(t, "ring.next_obs", (size_t)cap * od, -3, 3);
    r.R = io_f(t, "ring.R", (size_t)cap, -3, 3);
    r.disc = io_f(t, "ring.disc", (size_t)cap, -3, 3);
    r.act = in_i(t, (size_t)cap * D, 1000);
    make_out(t, r.act, "ring.act");
    for (size_t k = 0; k < S && !t->failed; k++)
        OP(t, replay_push, &w, &r, obs + k * E * od, act + k * E * D, rew + k * E,
           fobs + k * E * od, term + k * E, trunc + k * E);
    if (!t->ref) return;
    /* host copies of everything the op writes, stepped naively */
    float *wo = hf(t, w.obs), *wr = hf(t, w.rew), *ro = hf(t, r.obs), *rn = hf(t, r.next_obs);
    float *rR = hf(t, r.R), *rd = hf(t, r.disc);
    int32_t *wa = hi(t, w.act), *head = hi(t, w.head), *count = hi(t, w.count), *ra = hi(t, r.act);
    const uint8_t *hterm = find_buf(t, term)->host0, *htrunc = find_buf(t, trunc)->host0;
    const int L = use_per ? per.leaves : 0;
    float *tree = NULL;
    if (use_per) {
        tree = reg_xmalloc(2 * (size_t)L * sizeof(float));
        memcpy(tree, hf(t, per.tree), 2 * (size_t)L * sizeof(float));
    }
    int pos = pos0, size = size0;
    long ends = 0, flushes = 0, wraps = 0;
    for (size_t k = 0; k < S; k++)
        for (int e = 0; e < NE; e++) {
            const size_t i = k * E + (size_t)e;
            const size_t slot = (size_t)e * n + (size_t)((head[e] + count[e]) % n);
            memcpy(wo + slot * od, hf(t, obs) + i * od, (size_t)od * sizeof(float));
            memcpy(wa + slot * D, hi(t, act) + i * D, (size_t)D * sizeof(int32_t));
            wr[slot] = hf(t, rew)[i];
            count[e]++;
            const int tm = hterm[i] != 0, done = tm || htrunc[i];
            const int emit_n = done ? count[e] : count[e] == n ? 1 : 0;
            for (int q = 0; q < emit_n; q++) {
                double R = 0, g = 1;
                for (int j = q; j < count[e]; j++) {
                    R += g * wr[(size_t)e * n + (size_t)((head[e] + j) % n)];
                    g *= w.gamma;
                }
                const size_t src = (size_t)e * n + (size_t)((head[e] + q) % n);
                memcpy(ro + (size_t)pos * od, wo + src * od, (size_t)od * sizeof(float));
                memcpy(ra + (size_t)pos * D, wa + src * D, (size_t)D * sizeof(int32_t));
                memcpy(rn + (size_t)pos * od, hf(t, fobs) + i * od, (size_t)od * sizeof(float));
                rR[pos] = (float)R;
                rd[pos] = tm ? 0.0f : (float)g;
                if (tree) tree[L + pos] = tree[0];
                pos = (pos + 1) % cap;
                wraps += pos == 0;
                size = size < cap ? size + 1 : cap;
            }
            if (done) {
                head[e] = 0, count[e] = 0;
                ends++, flushes += emit_n > 1;
            } else if (count[e] == n) {
                head[e] = (head[e] + 1) % n, count[e]--;
            }
        }
    want_same(t, w.obs), want_same(t, w.act), want_same(t, w.rew);
    want_same(t, w.head), want_same(t, w.count);
    want_same(t, r.obs), want_same(t, r.next_obs), want_same(t, r.R), want_same(t, r.disc);
    want_same(t, r.act);
    want(t, r.pos)[0] = pos;
    want(t, r.size)[0] = size;
    if (tree) {
        want_tree(t, &per, tree);
        free(tree);
    }
    CHECK(p_end == 0 || (ends > 0 && (n == 1 || flushes > 0)), "%s: no episode ended",
          t->where);
    CHECK(S * E * (size_t)n < (size_t)cap || wraps > 0, "%s: the ring never wrapped", t->where);
    dqn_nstep_win bw = w;
    bw.n = 0;
    REFUSE(t, replay_push, &bw, &r, obs, act, rew, fobs, term, trunc);
    dqn_ring br2 = r;
    br2.D = D + 1;
    REFUSE(t, replay_push, &w, &br2, obs, act, rew, fobs, term, trunc);
    REFUSE(t, replay_push, &w, &r, obs, act, rew, fobs, NULL, trunc);
}

/* s: n cap filled next steps p_end (percent). The ring starts with random returns, filled
 * entries and next entry (with `filled` < cap, next = filled, as a record fills it); each of
 * `steps` calls ends an env's episode with probability p_end / 2 by terminated and,
 * independently, p_end / 2 by truncated (so both at once too). The reference: the trainer's
 * observe written out. Shapes with more episodes in one call than the ring holds, and with more
 * envs than CUDA's block has threads. */
static void c_episode_record(tc *t) {
    const int n = t->s[0], cap = t->s[1], steps = t->s[4];
    const uint64_t filled = (uint64_t)t->s[2], next = (uint64_t)t->s[3], ep0 = 1000003;
    const double p_end = t->s[5] / 100.0;
    const size_t S = (size_t)steps, N = (size_t)n;
    const uint8_t *term = in_u8(t, S * N, p_end / 2), *trunc = in_u8(t, S * N, p_end / 2);
    tbuf *rb = new_buf(t, T_F64, (size_t)cap, B_IN, NULL), *db;
    for (int i = 0; i < cap; i++) ((double *)rb->host0)[i] = 500.0 * reg_u01(t->key, 90, i) - 250;
    upload(t, rb);
    db = new_buf(t, T_F64, S * N, B_IN, NULL);
    for (size_t i = 0; i < S * N; i++) ((double *)db->host0)[i] = 1e3 * reg_u01(t->key, 91, i);
    upload(t, db);
    const double *dret = db->dev;
    const uint64_t c0[3] = {ep0, filled, next};
    dqn_episodes rec = {.cap = cap, .recent = rb->dev, .ctr = in_u64n(t, 3, c0)};
    make_out(t, rec.recent, "recent");
    make_out(t, rec.ctr, "ctr");
    for (size_t k = 0; k < S && !t->failed; k++)
        OP(t, episode_record, &rec, term + k * N, trunc + k * N, dret + k * N, n);
    if (!t->ref) return;
    const uint8_t *hterm = find_buf(t, term)->host0, *htrunc = find_buf(t, trunc)->host0;
    const double *hret = db->host0;
    double *wr = want(t, rec.recent), *wc = want(t, rec.ctr);
    for (int i = 0; i < cap; i++) wr[i] = ((double *)rb->host0)[i];
    uint64_t ep = ep0, fill = filled, at = next;
    for (size_t i = 0; i < S * N; i++) {
        if (!hterm[i] && !htrunc[i]) continue;
        wr[at] = hret[i];
        at = (at + 1) % (uint64_t)cap;
        fill += fill < (uint64_t)cap;
        ep++;
    }
    wc[0] = (double)ep, wc[1] = (double)fill, wc[2] = (double)at;
    CHECK(p_end == 0 || ep > ep0, "%s: no episode ended", t->where);
    dqn_episodes bad = rec;
    bad.cap = 0;
    REFUSE(t, episode_record, &bad, term, trunc, dret, n);
    REFUSE(t, episode_record, &rec, term, NULL, dret, n);
    REFUSE(t, episode_record, &rec, term, trunc, dret, 0);
}

/* ======================= fused ops ======================= */

/* s: R H branches */
static void c_heads_fwd(tc *t) {
    int R = t->s[0], H = t->s[1];
    dqn_branches br = br_of(t->s[2]);
    const int A = br.A, H2 = 2 * H;
    const float *hva = in_relu(t, (size_t)R * H2, 1), *Wv2 = in_f(t, (size_t)H, -1, 1);
    const float *bv2 = in_f(t, 1, -1, 1), *Wa2 = in_f(t, (size_t)A * H, -1, 1);
    const float *ba2 = in_f(t, (size_t)A, -1, 1);
    float *V = out_f(t, "V", (size_t)R), *Adv = out_f(t, "Adv", (size_t)R * A);
    float *Z = out_f(t, "Z", (size_t)R * A);
    OP(t, heads_fwd, hva, Wv2, bv2, Wa2, ba2, V, Adv, Z, R, H, &br);
    if (!t->ref) return;
    const float *x = hf(t, hva), *wv = hf(t, Wv2), *wa = hf(t, Wa2);
    double *v = want(t, V), *a = want(t, Adv);
    for (int r = 0; r < R; r++) {
        v[r] = hf(t, bv2)[0];
        for (int j = 0; j < H; j++) v[r] += (double)x[(size_t)r * H2 + j] * wv[j];
        for (int c = 0; c < A; c++) {
            double s = hf(t, ba2)[c];
            for (int j = 0; j < H; j++)
                s += (double)x[(size_t)r * H2 + H + j] * wa[(size_t)c * H + j];
            a[(size_t)r * A + c] = s;
        }
    }
    ref_dueling(v, a, want(t, Z), R, &br);
}

/* s: n0 n1; the sequence: two l2_norm */
static void c_l2_norm2(tc *t) {
    size_t n0 = (size_t)t->s[0], n1 = (size_t)t->s[1];
    const float *x0 = in_f(t, n0, -1, 1), *x1 = in_f(t, n1, -3, 3);
    float *norms = out_f(t, "norms", 2);
    if (t->seq) {
        OP(t, l2_norm, x0, n0, norms);
        OP(t, l2_norm, x1, n1, norms + 1);
    } else {
        OP(t, l2_norm2, x0, n0, x1, n1, norms, NULL);
    }
    if (!t->ref) return;
    double *w = want(t, norms);
    for (size_t i = 0; i < n0; i++) w[0] += (double)hf(t, x0)[i] * hf(t, x0)[i];
    for (size_t i = 0; i < n1; i++) w[1] += (double)hf(t, x1)[i] * hf(t, x1)[i];
    w[0] = sqrt(w[0]), w[1] = sqrt(w[1]);
}

/* s: R H A clip with_dbva. clip 0: off (norms NULL); 1: both norms clipped (the bound half the
 * smaller); 2: only the larger (the bound between them). dV and dAdv stay as they were. */
static void c_heads_bwd(tc *t) {
    int R = t->s[0], H = t->s[1], A = t->s[2], clip = t->s[3], H2 = 2 * H;
    const float *hva = in_relu(t, (size_t)R * H2, 1), *Wv2 = in_f(t, (size_t)H, -1, 1);
    const float *Wa2 = in_f(t, (size_t)A * H, -1, 1);
    float *dV = io_f(t, "dV (read only)", (size_t)R, -1, 1);
    float *dAdv = io_f(t, "dAdv (read only)", (size_t)R * A, -1, 1);
    double n0 = 0, n1 = 0;
    for (int r = 0; r < R; r++) n0 += (double)hf(t, dV)[r] * hf(t, dV)[r];
    for (size_t i = 0; i < (size_t)R * A; i++) n1 += (double)hf(t, dAdv)[i] * hf(t, dAdv)[i];
    n0 = sqrt(n0), n1 = sqrt(n1);
    float *norms = clip ? in_f(t, 2, 0, 0) : NULL;
    if (norms) hf(t, norms)[0] = (float)n0, hf(t, norms)[1] = (float)n1, resync(t, norms);
    float max_norm = clip == 0   ? 0.0f
                     : clip == 1 ? (float)(0.5 * fmin(n0, n1))
                                 : (float)(0.5 * (n0 + n1));
    float *dhva = out_f(t, "dhva", (size_t)R * H2);
    float *dbva = t->s[4] ? out_f(t, "dbva", (size_t)H2) : NULL;
    float *dWv2 = out_f(t, "dWv2", (size_t)H), *dbv2 = out_f(t, "dbv2", 1);
    float *dWa2 = out_f(t, "dWa2", (size_t)A * H), *dba2 = out_f(t, "dba2", (size_t)A);
    OP(t, heads_bwd, hva, Wv2, Wa2, dV, dAdv, norms, max_norm, dhva, dbva, dWv2, dbv2, dWa2, dba2,
       R, H, A);
    if (!t->ref) return;
    want_same(t, dV), want_same(t, dAdv);
    const float *x = hf(t, hva), *wv = hf(t, Wv2), *wa = hf(t, Wa2);
    /* the factors clip_by_norm applies (in float, as the op's contract names it) */
    float fv = clip && max_norm / (float)n0 < 1 ? max_norm / (float)n0 : 1.0f;
    float fa = clip && max_norm / (float)n1 < 1 ? max_norm / (float)n1 : 1.0f;
    double *wh = want(t, dhva), *wwv = want(t, dWv2), *wbv = want(t, dbv2), *wwa = want(t, dWa2);
    double *wba = want(t, dba2), *wbh = dbva ? want(t, dbva) : NULL;
    for (int r = 0; r < R; r++) {
        double gv = (double)hf(t, dV)[r] * fv;
        wbv[0] += gv;
        for (int j = 0; j < H; j++) {
            size_t i = (size_t)r * H2 + j;
            wh[i] = x[i] > 0 ? gv * wv[j] : 0;
            wwv[j] += gv * x[i];
            double s = 0;
            for (int c = 0; c < A; c++)
                s += (double)hf(t, dAdv)[(size_t)r * A + c] * fa * wa[(size_t)c * H + j];
            wh[i + H] = x[i + H] > 0 ? s : 0;
        }
        for (int c = 0; c < A; c++) {
            double ga = (double)hf(t, dAdv)[(size_t)r * A + c] * fa;
            wba[c] += ga;
            for (int j = 0; j < H; j++) wwa[(size_t)c * H + j] += ga * x[(size_t)r * H2 + H + j];
        }
        for (int c = 0; c < H2 && wbh; c++) wbh[c] += wh[(size_t)r * H2 + c];
    }
    REFUSE(t, heads_bwd, hva, Wv2, Wa2, dV, dAdv, NULL, 1.0f, dhva, dbva, dWv2, dbv2, dWa2, dba2,
           R, H, A);
}

/* s: B N Nt branches mode kappa*100 weighted heads; the sequence: iqn_targets, quantile_huber,
 * with heads dueling_bwd */
static void c_targets_huber(tc *t) {
    int B = t->s[0], N = t->s[1], Nt = t->s[2];
    dqn_branches br = br_of(t->s[3]);
    dqn_target_mode mode = (dqn_target_mode)t->s[4];
    float kappa = (float)t->s[5] / 100;
    const int A = br.A, D = br.D;
    size_t nz = (size_t)B * N * A, ny = (size_t)B * (mode == DQN_TARGET_MEAN ? 1 : D) * Nt;
    dqn_target_io io;
    io.Zt = in_f(t, (size_t)B * Nt * A, -3, 3);
    io.astar = in_act(t, B, &br);
    io.R = in_f(t, (size_t)B, -1, 1);
    io.discount = in_f(t, (size_t)B, 0, 1);
    io.y = out_f(t, "y", ny);
    const float *Z = in_f(t, nz, -3, 3), *tau = in_f(t, (size_t)B * N, 0.01, 0.99);
    const float *w = t->s[6] ? in_f(t, (size_t)B, 0.1, 2) : NULL;
    const int32_t *act = in_act(t, B, &br);
    float *loss = out_f(t, "loss", 1), *dZ = out_f(t, "dZ", nz),
          *ps = out_f(t, "per_sample", (size_t)B);
    float *dV = t->s[7] ? out_f(t, "dV", (size_t)B * N) : NULL;
    float *dAdv = t->s[7] ? out_f(t, "dAdv", nz) : NULL;
    if (t->seq) {
        OP(t, iqn_targets, io.Zt, io.astar, io.R, io.discount, io.y, B, Nt, &br, mode);
        OP(t, quantile_huber, Z, tau, act, io.y, w, loss, dZ, ps, B, N, Nt, &br, mode, kappa);
        if (dV) OP(t, dueling_bwd, dZ, dV, dAdv, B * N, &br);
    } else {
        OP(t, targets_huber, &io, Z, tau, act, w, loss, dZ, ps, dV, dAdv, B, N, Nt, &br, mode,
           kappa);
    }
}

/* s: M obs d L in (0: no input layer, h0 the first block's input); the sequence: linear_fwd,
 * then per block linear_act_fwd (ELU), linear_fwd, grn_gate_ln_fwd */
static void c_trunk_fwd(tc *t) {
    int M = t->s[0], obs = t->s[1], d = t->s[2], L = t->s[3], in = t->s[4];
    size_t n = (size_t)M * d;
    const double ws = 1.5 / sqrt((double)d);
    dqn_trunk_io io = {.M = M, .obs = obs, .d = d, .L = L};
    io.x = in_f(t, (size_t)M * obs, -2, 2);
    io.W_in = in ? in_f(t, (size_t)d * obs, -0.5, 0.5) : NULL;
    io.b_in = in_f(t, (size_t)d, -0.5, 0.5);
    io.h0 = in ? out_f(t, "h0", n) : in_f(t, n, -2, 2);
    for (int l = 0; l < L; l++) {
        dqn_grn_io *g = &io.grn[l];
        g->W_a = in_f(t, (size_t)d * d, -ws, ws), g->b_a = in_f(t, (size_t)d, -0.5, 0.5);
        g->W_b = in_f(t, (size_t)2 * d * d, -ws, ws), g->b_b = in_f(t, (size_t)2 * d, -0.5, 0.5);
        g->gamma = in_f(t, (size_t)d, 0.5, 1.5), g->beta = in_f(t, (size_t)d, -0.5, 0.5);
        g->e = out_f(t, "e", n), g->g = out_f(t, "g", 2 * n), g->r = out_f(t, "r", n);
        g->y = out_f(t, "y", n), g->mean = out_f(t, "mean", (size_t)M);
        g->rstd = out_f(t, "rstd", (size_t)M);
    }
    if (!t->seq) {
        OP(t, trunk_fwd, &io);
        return;
    }
    if (in) OP(t, linear_fwd, io.x, io.W_in, io.b_in, io.h0, M, obs, d);
    const float *h = io.h0;
    for (int l = 0; l < L; l++) {
        const dqn_grn_io *g = &io.grn[l];
        OP(t, linear_act_fwd, h, g->W_a, g->b_a, g->e, M, d, d, DQN_ACT_ELU);
        OP(t, linear_fwd, g->e, g->W_b, g->b_b, g->g, M, d, 2 * d);
        OP(t, grn_gate_ln_fwd, h, g->g, g->gamma, g->beta, g->r, g->y, g->mean, g->rstd, M, d);
        h = g->y;
    }
}

/* s: M d; the sequence: gate_fwd, layernorm_fwd */
static void c_grn_gate_ln_fwd(tc *t) {
    int M = t->s[0], d = t->s[1];
    size_t n = (size_t)M * d;
    const float *h = in_f(t, n, -2, 2), *g = in_f(t, 2 * n, -3, 3);
    const float *gamma = in_f(t, (size_t)d, 0.5, 1.5), *beta = in_f(t, (size_t)d, -0.5, 0.5);
    float *r = out_f(t, "r", n), *y = out_f(t, "y", n), *mean = out_f(t, "mean", (size_t)M);
    float *rstd = out_f(t, "rstd", (size_t)M);
    if (t->seq) {
        OP(t, gate_fwd, h, g, r, M, d);
        OP(t, layernorm_fwd, r, gamma, beta, y, mean, rstd, M, d);
    } else {
        OP(t, grn_gate_ln_fwd, h, g, gamma, beta, r, y, mean, rstd, M, d);
    }
}

/* s: M d; r's mean and rstd as the forward saved them; the sequence: layernorm_bwd, gate_bwd */
static void c_grn_ln_gate_bwd(tc *t) {
    int M = t->s[0], d = t->s[1];
    size_t n = (size_t)M * d;
    const float *r = in_f(t, n, -2, 2), *gamma = in_f(t, (size_t)d, 0.5, 1.5);
    float *mean = in_f(t, (size_t)M, 0, 0), *rstd = in_f(t, (size_t)M, 0, 0);
    double *mu = reg_xmalloc(sizeof(double) * M), *rs = reg_xmalloc(sizeof(double) * M);
    ref_moments(hf(t, r), M, d, mu, rs);
    for (int m = 0; m < M; m++) hf(t, mean)[m] = (float)mu[m], hf(t, rstd)[m] = (float)rs[m];
    free(mu);
    free(rs);
    resync(t, mean);
    resync(t, rstd);
    const float *g = in_f(t, 2 * n, -3, 3), *dy = in_f(t, n, -1, 1);
    float *dres = out_f(t, "dres", n), *dg = out_f(t, "dg", 2 * n);
    float *dgamma = out_f(t, "dgamma", (size_t)d), *dbeta = out_f(t, "dbeta", (size_t)d);
    if (t->seq) {
        float *dr = tmp_f(t, n);
        OP(t, layernorm_bwd, r, gamma, mean, rstd, dy, dr, dgamma, dbeta, M, d);
        OP(t, gate_bwd, g, dr, dres, dg, M, d);
    } else {
        OP(t, grn_ln_gate_bwd, r, gamma, mean, rstd, g, dy, dres, dg, dgamma, dbeta, M, d, NULL);
    }
    if (t->ref)
        REFUSE(t, grn_ln_gate_bwd, r, gamma, mean, rstd, g, dy, (float *)dy, dg, dgamma, dbeta, M,
               d, NULL);
}

/* s: B T d with_cat; the sequence: mul_bcast_fwd (and concat_bcast_fwd) */
static void c_iqn_fwd(tc *t) {
    int B = t->s[0], T = t->s[1], d = t->s[2];
    size_t nz = (size_t)B * T * d;
    const float *h = in_f(t, (size_t)B * d, -1, 1), *phi = in_relu(t, nz, 1);
    float *z = out_f(t, "z", nz), *cat = t->s[3] ? out_f(t, "cat", 2 * nz) : NULL;
    if (t->seq) {
        OP(t, mul_bcast_fwd, h, phi, z, B, T, d);
        if (cat) OP(t, concat_bcast_fwd, z, h, cat, B, T, d);
    } else {
        OP(t, iqn_fwd, h, phi, z, cat, B, T, d);
    }
}

/* s: B T d n_cos keep with_cat; C and phi compared in their first keep*T rows (past them they
 * are the backend's scratch); the sequence: cos_embed, linear_act_fwd (ReLU), iqn_fwd */
static void c_iqn_embed_fwd(tc *t) {
    int B = t->s[0], T = t->s[1], d = t->s[2], n_cos = t->s[3], keep = t->s[4] * T;
    size_t R = (size_t)B * T, nz = R * d;
    const float *tau = in_f(t, R, 0, 1), *W = in_f(t, (size_t)d * n_cos, -0.3, 0.3);
    const float *b = in_f(t, (size_t)d, -0.5, 0.5), *h = in_f(t, (size_t)B * d, -1, 1);
    float *C = out_part(t, T_F32, "C", R * n_cos, (size_t)keep * n_cos);
    float *phi = out_part(t, T_F32, "phi", nz, (size_t)keep * d);
    float *z = out_f(t, "z", nz), *cat = t->s[5] ? out_f(t, "cat", 2 * nz) : NULL;
    if (t->seq) {
        OP(t, cos_embed, tau, C, (int)R, n_cos);
        OP(t, linear_act_fwd, C, W, b, phi, (int)R, n_cos, d, DQN_ACT_RELU);
        OP(t, iqn_fwd, h, phi, z, cat, B, T, d);
    } else {
        OP(t, iqn_embed_fwd, tau, W, b, h, C, phi, z, cat, B, T, n_cos, d, keep, NULL);
    }
    if (t->ref)
        REFUSE(t, iqn_embed_fwd, tau, W, b, h, C, phi, z, NULL, B, T, n_cos, d, (int)R + 1, NULL);
}

/* s: B T d with_dcat with_dphi_b. The sequence: with dcat, fill(dh2, 0), concat_bcast_bwd,
 * mul_bcast_bwd, axpy(1, dh2, dh), relu_bwd; without, dz is the input: mul_bcast_bwd, relu_bwd;
 * dphi_b: linear_bwd's column sums of dphi (its db). */
static void c_iqn_bwd(tc *t) {
    int B = t->s[0], T = t->s[1], d = t->s[2], R = B * T;
    size_t nh = (size_t)B * d, nz = nh * T;
    const float *dcat = t->s[3] ? in_f(t, 2 * nz, -1, 1) : NULL;
    const float *h = in_f(t, nh, -1, 1), *phi = in_relu(t, nz, 1);
    float *dz = dcat ? out_f(t, "dz", nz) : in_f(t, nz, -1, 1);
    float *dh = out_f(t, "dh", nh), *dphi = out_f(t, "dphi", nz);
    float *dphi_b = t->s[4] ? out_f(t, "dphi_b", (size_t)d) : NULL;
    if (!t->seq) {
        OP(t, iqn_bwd, dcat, h, phi, dz, dh, dphi, dphi_b, B, T, d, NULL);
        return;
    }
    if (dcat) {
        float *dh2 = tmp_f(t, nh);
        OP(t, fill, dh2, 0.0f, nh);
        OP(t, concat_bcast_bwd, dcat, dz, dh2, B, T, d);
        OP(t, mul_bcast_bwd, h, phi, dz, dh, dphi, B, T, d);
        OP(t, axpy, 1.0f, dh2, dh, nh);
    } else {
        OP(t, mul_bcast_bwd, h, phi, dz, dh, dphi, B, T, d);
    }
    OP(t, relu_bwd, phi, dphi, dphi, nz);
    if (dphi_b) {
        const float *X = tmp_f(t, (size_t)R * 3), *W = tmp_f(t, (size_t)d * 3);
        OP(t, linear_bwd, X, W, dphi, NULL, tmp_f(t, (size_t)d * 3), dphi_b, R, 3, d);
    }
}

/* s: n period step tau*1000 skip; the sequence: adam, target_update, step_incr */
static void c_adam_target_step(tc *t) {
    size_t n = (size_t)t->s[0];
    int period = t->s[1];
    float tau = (float)t->s[3] / 1000;
    float *p = io_f(t, "p", n, -1, 1), *m = io_f(t, "m", n, -0.1, 0.1),
          *v = io_f(t, "v", n, 0, 0.01);
    float *target = io_f(t, "target", n, -1, 1);
    const float *g = in_f(t, n, -2, 2);
    float *gnorm = in_f(t, 1, 0, 0);
    hf(t, gnorm)[0] = 14.0f;
    resync(t, gnorm);
    uint64_t *step = io_u64(t, "step", (uint64_t)t->s[2]);
    int32_t *skip = in_i(t, 1, 1);
    hi(t, skip)[0] = t->s[4];
    resync(t, skip);
    if (t->seq) {
        OP(t, adam, p, g, m, v, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, gnorm, 10.0f, step, skip);
        OP(t, target_update, target, p, n, period, tau, step);
        OP(t, step_incr, step);
    } else {
        OP(t, adam_target_step, p, g, m, v, target, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, gnorm,
           10.0f, period, tau, step, skip);
    }
    if (t->ref)
        REFUSE(t, adam_target_step, p, g, m, v, target, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f,
               gnorm, 10.0f, 0, 1.5f, step, NULL);
}

/* s: M K N ldw act bias */
static void c_linear_ld_fwd(tc *t) {
    int M = t->s[0], K = t->s[1], N = t->s[2], ldw = t->s[3], act = t->s[4];
    const float *X = in_f(t, (size_t)M * K, -1, 1), *W = in_f(t, (size_t)N * ldw, -1, 1);
    const float *b = t->s[5] ? in_f(t, (size_t)N, -0.5, 0.5) : NULL;
    float *Y = out_f(t, "Y", (size_t)M * N);
    OP(t, linear_ld_fwd, X, W, ldw, b, Y, M, K, N, (dqn_act)act);
    if (!t->ref) return;
    ref_linear(t, X, W, ldw, b, M, K, N, act, want(t, Y));
    REFUSE(t, linear_ld_fwd, X, W, K - 1, b, Y, M, K, N, DQN_ACT_NONE);
}

/* s: M K N ldw with_dX acc_dx with_dW with_db; dW [N, ldw]: the columns past K stay */
static void c_linear_ld_bwd(tc *t) {
    int M = t->s[0], K = t->s[1], N = t->s[2], ldw = t->s[3], acc = t->s[5];
    const float *X = in_f(t, (size_t)M * K, -1, 1), *W = in_f(t, (size_t)N * ldw, -1, 1);
    const float *dY = in_f(t, (size_t)M * N, -1, 1);
    float *dX = !t->s[4] ? NULL
                : acc    ? io_f(t, "dX", (size_t)M * K, -1, 1)
                         : out_f(t, "dX", (size_t)M * K);
    float *dW = t->s[6] ? io_f(t, "dW", (size_t)N * ldw, -1, 1) : NULL;
    float *db = t->s[7] ? out_f(t, "db", (size_t)N) : NULL;
    OP(t, linear_ld_bwd, X, W, ldw, dY, dX, acc, dW, db, M, K, N);
    if (!t->ref) return;
    const float *x = hf(t, X), *w = hf(t, W), *dy = hf(t, dY);
    double *wx = dX ? want(t, dX) : NULL, *ww = dW ? want(t, dW) : NULL,
           *wb = db ? want(t, db) : NULL;
    if (wx && acc) want_same(t, dX);
    if (ww) {
        want_same(t, dW);
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) ww[(size_t)n * ldw + k] = 0;
    }
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double g = dy[(size_t)m * N + n];
            if (wb) wb[n] += g;
            for (int k = 0; k < K; k++) {
                if (wx) wx[(size_t)m * K + k] += g * w[(size_t)n * ldw + k];
                if (ww) ww[(size_t)n * ldw + k] += g * x[(size_t)m * K + k];
            }
        }
}

/* s: B T N act */
static void c_bcast_add_act(tc *t) {
    int B = t->s[0], T = t->s[1], N = t->s[2], act = t->s[3];
    const float *hb = in_f(t, (size_t)B * N, -1, 1);
    float *Y = io_f(t, "Y", (size_t)B * T * N, -2, 2);
    OP(t, bcast_add_act, hb, Y, B, T, N, (dqn_act)act);
    if (!t->ref) return;
    double *w = want(t, Y);
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int k = 0; k < N; k++)
            w[r * N + k] = act_of((double)hf(t, Y)[r * N + k] + hf(t, hb)[r / T * N + k], act);
}

/* s: B T N */
static void c_relu_bwd_tausum(tc *t) {
    int B = t->s[0], T = t->s[1], N = t->s[2];
    size_t n = (size_t)B * T * N;
    const float *u = in_relu(t, n, 1);
    float *du = io_f(t, "du", n, -1, 1), *dus = out_f(t, "dus", (size_t)B * N);
    OP(t, relu_bwd_tausum, u, du, dus, B, T, N, NULL);
    if (!t->ref) return;
    double *wd = want(t, du), *ws = want(t, dus);
    for (size_t i = 0; i < n; i++) {
        wd[i] = hf(t, u)[i] > 0 ? hf(t, du)[i] : 0;
        ws[i / ((size_t)T * N) * N + i % N] += wd[i];
    }
}

/* s: n (no communicator, or the CPU's world of one: x stays) */
static void c_allreduce_mean(tc *t) {
    size_t n = (size_t)t->s[0];
    float *x = io_f(t, "x", n, -1, 1);
    OP(t, allreduce_mean, x, n);
    if (t->ref) want_same(t, x);
}

/* ======================= finite differences (CPU) ======================= */

/* s: M K N */
static void fd_linear(fc *f) {
    int M = f->s[0], K = f->s[1], N = f->s[2];
    float *X = fx(f, "X", (size_t)M * K, 0.1, 1), *W = fx(f, "W", (size_t)N * K, 0.1, 1);
    float *b = fx(f, "b", (size_t)N, 0.1, 1), *Y = fy(f, (size_t)M * N);
    FOP(f, linear_fwd, X, W, b, Y, M, K, N);
    if (f->bwd) FOP(f, linear_bwd, X, W, fdy(f, Y), fg(f, X), fg(f, W), fg(f, b), M, K, N);
}

/* s: n elu */
static void fd_act(fc *f) {
    size_t n = (size_t)f->s[0];
    float *x = fx(f, "x", n, 0.1, 2), *y = fy(f, n);
    FOP(f, relu_fwd, x, y, n);
    if (f->s[1]) FOP(f, elu_fwd, x, y, n);
    if (f->bwd && !f->s[1]) FOP(f, relu_bwd, y, fdy(f, y), fg(f, x), n);
    if (f->bwd && f->s[1]) FOP(f, elu_bwd, y, fdy(f, y), fg(f, x), n);
}

/* s: M d */
static void fd_gate(fc *f) {
    int M = f->s[0], d = f->s[1];
    float *h = fx(f, "h", (size_t)M * d, 0.05, 2), *g = fx(f, "g", (size_t)M * 2 * d, 0.05, 2.5);
    float *r = fy(f, (size_t)M * d);
    FOP(f, gate_fwd, h, g, r, M, d);
    if (f->bwd) FOP(f, gate_bwd, g, fdy(f, r), fg(f, h), fg(f, g), M, d);
}

/* s: M d */
static void fd_layernorm(fc *f) {
    int M = f->s[0], d = f->s[1];
    float *x = fx(f, "x", (size_t)M * d, 0.05, 2), *gamma = fx(f, "gamma", (size_t)d, 0.5, 1.5);
    float *beta = fx(f, "beta", (size_t)d, 0.1, 1), *y = fy(f, (size_t)M * d);
    float *mean = ftmp(f, (size_t)M), *rstd = ftmp(f, (size_t)M);
    FOP(f, layernorm_fwd, x, gamma, beta, y, mean, rstd, M, d);
    if (f->bwd)
        FOP(f, layernorm_bwd, x, gamma, mean, rstd, fdy(f, y), fg(f, x), fg(f, gamma), fg(f, beta),
            M, d);
}

/* s: B T d */
static void fd_mul_bcast(fc *f) {
    int B = f->s[0], T = f->s[1], d = f->s[2];
    size_t nh = (size_t)B * d, nz = nh * T;
    float *h = fx(f, "h", nh, 0.1, 1), *phi = fx(f, "phi", nz, 0.1, 1), *z = fy(f, nz);
    FOP(f, mul_bcast_fwd, h, phi, z, B, T, d);
    if (f->bwd) FOP(f, mul_bcast_bwd, h, phi, fdy(f, z), fg(f, h), fg(f, phi), B, T, d);
}

/* s: B T d; dh accumulates (from zero here; the row's reference checks the accumulation) */
static void fd_concat_bcast(fc *f) {
    int B = f->s[0], T = f->s[1], d = f->s[2];
    size_t nh = (size_t)B * d, nz = nh * T;
    float *z = fx(f, "z", nz, 0.1, 1), *h = fx(f, "h", nh, 0.1, 1), *out = fy(f, 2 * nz);
    FOP(f, concat_bcast_fwd, z, h, out, B, T, d);
    if (f->bwd) FOP(f, concat_bcast_bwd, fdy(f, out), fg(f, z), fg0(f, h), B, T, d);
}

/* s: R branches */
static void fd_dueling(fc *f) {
    int R = f->s[0];
    dqn_branches br = br_of(f->s[1]);
    float *V = fx(f, "V", (size_t)R, 0.1, 1), *Adv = fx(f, "Adv", (size_t)R * br.A, 0.1, 1);
    float *Z = fy(f, (size_t)R * br.A);
    FOP(f, dueling_fwd, V, Adv, Z, R, &br);
    if (f->bwd) FOP(f, dueling_bwd, fdy(f, Z), fg(f, V), fg(f, Adv), R, &br);
}

/* s: B N Nt branches mode kappa*100 weighted. The taken Z on the grid 0.25 k, the targets on
 * 0.25 m + 0.125, each jittered by < 0.03: every y - Z lies at least 0.065 from 0 and from
 * +-kappa (a multiple of 0.25); h = 0.05, so the loss is quadratic between the kinks. The loss
 * is the op's own output (projection 1); dZ its gradient. */
static void fd_quantile_huber(fc *f) {
    int B = f->s[0], N = f->s[1], Nt = f->s[2];
    dqn_branches br = br_of(f->s[3]);
    dqn_target_mode mode = (dqn_target_mode)f->s[4];
    float kappa = (float)f->s[5] / 100;
    size_t nz = (size_t)B * N * br.A, ny = (size_t)B * (mode == DQN_TARGET_MEAN ? 1 : br.D) * Nt;
    float *Z = fx(f, "Z", nz, 0.1, 2), *tau = ftmp(f, (size_t)B * N), *y = ftmp(f, ny);
    float *w = f->s[6] ? ftmp(f, (size_t)B) : NULL, *act_f = ftmp(f, (size_t)B * br.D);
    int32_t *act = (int32_t *)act_f;
    if (f->first) {
        f->h = 0.05f;
        for (int s = 0; s < B; s++) {
            if (w) w[s] = (float)(0.2 + 1.3 * reg_u01(f->key, 50, (size_t)s));
            for (int b = 0; b < br.D; b++)
                act[s * br.D + b] =
                    (int32_t)(reg_u01(f->key, 51, (size_t)(s * br.D + b)) * br.n[b]);
            for (int i = 0; i < N; i++) {
                tau[s * N + i] = (float)(0.02 + 0.96 * reg_u01(f->key, 52, (size_t)(s * N + i)));
                for (int b = 0; b < br.D; b++) {
                    size_t k = (size_t)(s * N + i) * br.A + br.off[b] + act[s * br.D + b];
                    Z[k] = (float)(0.25 * ((int)(reg_u01(f->key, 53, k) * 9) - 4) +
                                   0.06 * reg_u01(f->key, 54, k) - 0.03);
                }
            }
        }
        for (size_t k = 0; k < ny; k++)
            y[k] = (float)(0.25 * ((int)(reg_u01(f->key, 55, k) * 9) - 4) + 0.125 +
                           0.06 * reg_u01(f->key, 56, k) - 0.03);
    }
    float *loss = fy1(f, 1), *dZ = f->bwd ? fg(f, Z) : ftmp(f, nz);
    FOP(f, quantile_huber, Z, tau, act, y, w, loss, dZ, NULL, B, N, Nt, &br, mode, kappa);
}

/* s: R H branches. Z = heads_fwd(ReLU(pre)) for the stacked hidden layer's pre-activation;
 * dueling_bwd then heads_bwd (no clip) give the gradients w.r.t. pre and the v2 / a2 params. */
static void fd_heads(fc *f) {
    int R = f->s[0], H = f->s[1];
    dqn_branches br = br_of(f->s[2]);
    const int A = br.A;
    size_t nh = (size_t)R * 2 * H, nz = (size_t)R * A;
    float *pre = fx(f, "pre", nh, 0.1, 1), *Wv2 = fx(f, "Wv2", (size_t)H, 0.1, 1);
    float *bv2 = fx(f, "bv2", 1, 0.1, 1), *Wa2 = fx(f, "Wa2", (size_t)A * H, 0.1, 1);
    float *ba2 = fx(f, "ba2", (size_t)A, 0.1, 1);
    float *hva = ftmp(f, nh), *V = ftmp(f, (size_t)R), *Adv = ftmp(f, nz), *Z = fy(f, nz);
    FOP(f, relu_fwd, pre, hva, nh);
    FOP(f, heads_fwd, hva, Wv2, bv2, Wa2, ba2, V, Adv, Z, R, H, &br);
    if (!f->bwd) return;
    float *dV = fbtmp(f, (size_t)R), *dAdv = fbtmp(f, nz);
    FOP(f, dueling_bwd, fdy(f, Z), dV, dAdv, R, &br);
    FOP(f, heads_bwd, hva, Wv2, Wa2, dV, dAdv, NULL, 0.0f, fg(f, pre), NULL, fg(f, Wv2),
        fg(f, bv2), fg(f, Wa2), fg(f, ba2), R, H, A);
}

/* s: M d. y = LayerNorm(h + g_a * sigmoid(g_b)) by grn_gate_ln_fwd; grn_ln_gate_bwd gives the
 * gradients w.r.t. h (the residual's dres), g, gamma and beta. */
static void fd_grn_tail(fc *f) {
    int M = f->s[0], d = f->s[1];
    size_t n = (size_t)M * d;
    float *h = fx(f, "h", n, 0.05, 2), *g = fx(f, "g", 2 * n, 0.05, 2.5);
    float *gamma = fx(f, "gamma", (size_t)d, 0.5, 1.5), *beta = fx(f, "beta", (size_t)d, 0.1, 1);
    float *r = ftmp(f, n), *mean = ftmp(f, (size_t)M), *rstd = ftmp(f, (size_t)M), *y = fy(f, n);
    FOP(f, grn_gate_ln_fwd, h, g, gamma, beta, r, y, mean, rstd, M, d);
    if (f->bwd)
        FOP(f, grn_ln_gate_bwd, r, gamma, mean, rstd, g, fdy(f, y), fg(f, h), fg(f, g),
            fg(f, gamma), fg(f, beta), M, d, NULL);
}

/* s: B T d with_cat. phi = ReLU(pre), z = h * phi (and cat = [z, h]) by iqn_fwd; iqn_bwd gives
 * the gradients w.r.t. h and pre (dphi_b: pre's column sums, a bias gradient). */
static void fd_iqn_mix(fc *f) {
    int B = f->s[0], T = f->s[1], d = f->s[2], cat = f->s[3];
    size_t nh = (size_t)B * d, nz = nh * T;
    float *h = fx(f, "h", nh, 0.1, 1), *pre = fx(f, "pre", nz, 0.1, 1), *phi = ftmp(f, nz);
    float *z = cat ? ftmp(f, nz) : fy(f, nz), *c = cat ? fy(f, 2 * nz) : NULL;
    FOP(f, relu_fwd, pre, phi, nz);
    FOP(f, iqn_fwd, h, phi, z, c, B, T, d);
    if (!f->bwd) return;
    float *dz = cat ? fbtmp(f, nz) : fdy(f, z);
    FOP(f, iqn_bwd, cat ? fdy(f, c) : NULL, h, phi, dz, fg(f, h), fg(f, pre), NULL, B, T, d, NULL);
}

/* s: B T d m. The split bottleneck u = ReLU(W[:, 0:d] z + W[:, d:2d] h[s] + b) (linear_ld_fwd
 * twice, bcast_add_act); its backward by relu_bwd_tausum and linear_ld_bwd twice (dh
 * accumulated). b is redrawn until no pre-activation lies within 0.05 of the ReLU's kink. */
static void fd_bn_split(fc *f) {
    int B = f->s[0], T = f->s[1], d = f->s[2], m = f->s[3], R = B * T;
    float *z = fx(f, "z", (size_t)R * d, 0.1, 1), *h = fx(f, "h", (size_t)B * d, 0.1, 1);
    float *W = fx(f, "W", (size_t)m * 2 * d, 0.1, 1), *b = fx(f, "b", (size_t)m, 0.1, 1);
    float *hb = ftmp(f, (size_t)B * m), *u = fy(f, (size_t)R * m);
    for (int tries = 0; f->first && tries < 1000; tries++) {
        FOP(f, linear_ld_fwd, h, W + d, 2 * d, b, hb, B, d, m, DQN_ACT_NONE);
        FOP(f, linear_ld_fwd, z, W, 2 * d, NULL, u, R, d, m, DQN_ACT_NONE);
        FOP(f, bcast_add_act, hb, u, B, T, m, DQN_ACT_NONE);
        double near = INFINITY;
        for (size_t k = 0; k < (size_t)R * m; k++) near = fmin(near, fabs(u[k]));
        if (near >= 0.05) break;
        for (int k = 0; k < m; k++)
            b[k] = (float)((reg_u01(f->key, 60 + tries, (size_t)k) - 0.5) * 3);
    }
    FOP(f, linear_ld_fwd, h, W + d, 2 * d, b, hb, B, d, m, DQN_ACT_NONE);
    FOP(f, linear_ld_fwd, z, W, 2 * d, NULL, u, R, d, m, DQN_ACT_NONE);
    FOP(f, bcast_add_act, hb, u, B, T, m, DQN_ACT_RELU);
    if (!f->bwd) return;
    float *du = fdy(f, u), *dus = fbtmp(f, (size_t)B * m), *dW = fg(f, W);
    FOP(f, relu_bwd_tausum, u, du, dus, B, T, m, NULL);
    FOP(f, linear_ld_bwd, z, W, 2 * d, du, fg(f, z), 0, dW, NULL, R, d, m);
    FOP(f, linear_ld_bwd, h, W + d, 2 * d, dus, fg0(f, h), 1, dW + d, fg(f, b), B, d, m);
}

/* ======================= the registry ======================= */

typedef struct {
    const char *op;           /* the ops.def name */
    void (*run)(tc *);        /* the case */
    const shp *shapes;
    int n_shapes;
    double nmse;              /* the CPU against the reference */
    double nmse_dev;          /* another backend against the CPU (0: bit for bit) */
    int flags;                /* SEQ: the case has the sequence; GEMM: TF32 bound on TF32 */
    void (*fd)(fc *);         /* the finite-difference check of its gradient, if it has one */
    const shp *fd_shapes;
    int n_fd;
    const char *elsewhere;    /* only an op whose contract another test holds: that test */
} row;

/* Shapes: odd sizes, the edges of each backend's paths (the built-in GEMM's blocks MR 6, NR 16,
 * MC 96, KC 256, NC 1024; CUDA's own GEMM kernels up to OWN_GEMM_MACS and 128 wide, heads_fwd's
 * GEMM path from HF_GEMM_ELEMS, trunk_fwd's one kernel up to TRUNK_ROWS rows, iqn_embed_fwd's
 * from IQN_EMBED_ELEMS) and the model's: B 64, N = N' = K 32, d 64, n_cos 64, H 64, the
 * CartPole [2] and the [3, 5, 5] branches (rows B*N = 2048). */
static const row ROWS[] = {
    {.op = "d2d",
     .run = c_d2d,
     SHAPES(S(1), S(37), S(4099), S(1000003)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "fill",
     .run = c_fill,
     SHAPES(S(1), S(37), S(4099), S(1000003)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "linear_fwd",
     .run = c_linear_fwd,
     SHAPES(S(1, 1, 1, 1), S(7, 5, 3, 0), S(6, 16, 16, 1), S(13, 33, 17, 0), S(97, 257, 31, 1),
            S(200, 70, 1030, 0), S(300, 520, 40, 1), S(64, 64, 64, 1), S_F(ODD, 37, 19, 23, 1),
            S(3000, 70, 45, 1), S(4100, 33, 120, 0), S(9000, 64, 3, 0), S(2048, 64, 64, 1),
            S(2048, 4, 64, 1), S(64, 256, 256, 0), S(200, 256, 512, 1), S(200, 512, 128, 0),
            S_BIG(8192, 256, 128, 0), S_BIG(4096, 256, 512, 1),
            S_BIG((int)(OWN_GEMM_MACS / (64 * 48)) + 1000, 64, 48, 0), S_BIG(70000, 64, 128, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = GEMM},
    {.op = "linear_act_fwd",
     .run = c_linear_act_fwd,
     SHAPES(S(13, 33, 17, 1, DQN_ACT_RELU), S(13, 33, 17, 0, DQN_ACT_ELU),
            S(13, 33, 17, 1, DQN_ACT_NONE), S(64, 64, 64, 1, DQN_ACT_ELU),
            S(64, 64, 64, 0, DQN_ACT_RELU), S_F(ODD, 37, 19, 23, 1, DQN_ACT_RELU),
            S(3000, 70, 45, 1, DQN_ACT_ELU), S(2048, 64, 64, 1, DQN_ACT_RELU),
            S(2048, 64, 64, 1, DQN_ACT_ELU), S_BIG(8192, 256, 128, 1, DQN_ACT_ELU)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = SEQ | GEMM},
    {.op = "linear_bwd",
     .run = c_linear_bwd,
     SHAPES(S(1, 1, 1, 1), S(7, 5, 3, 1), S(6, 16, 16, 0), S(13, 33, 17, 1), S(97, 257, 31, 1),
            S(200, 70, 1030, 1), S(300, 520, 40, 0), S_F(ODD, 37, 19, 23, 1), S(3000, 70, 45, 1),
            S(4100, 33, 120, 1), S(9000, 64, 3, 1), S(2048, 64, 64, 1), S(2048, 64, 128, 0),
            S_BIG(8192, 256, 128, 1), S_BIG(4096, 256, 512, 1), S_BIG(70000, 64, 128, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = GEMM,
     FD(fd_linear, S(1, 1, 1), S(7, 5, 3), S(33, 17, 20), S(8, 64, 64), S(300, 260, 21),
        S(97, 30, 1030))},
    {.op = "axpy",
     .run = c_axpy,
     SHAPES(S(1), S(1003), S(37), S(1000003)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "relu_fwd",
     .run = c_relu_fwd,
     SHAPES(S(1, 0), S(1003, 0), S(1003, 1), S(37, 0), S(1000003, 0)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "relu_bwd",
     .run = c_relu_bwd,
     SHAPES(S(1, 0), S(1003, 0), S(1003, 1), S(37, 1), S(1000003, 0)),
     .nmse = EXACT,
     .nmse_dev = EXACT,
     FD(fd_act, S(37, 0), S(1000, 0))},
    {.op = "elu_fwd",
     .run = c_elu_fwd,
     SHAPES(S(1, 0), S(1003, 0), S(1003, 1), S(37, 0), S(1000003, 1)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "elu_bwd",
     .run = c_elu_bwd,
     SHAPES(S(1, 0), S(1003, 0), S(1003, 1), S(37, 1), S(1000003, 0)),
     .nmse = EW,
     .nmse_dev = DEV_EW,
     FD(fd_act, S(37, 1), S(1000, 1))},
    {.op = "gate_fwd",
     .run = c_gate_fwd,
     SHAPES(S(1, 1), S(9, 21), S(37, 13), S(2048, 64), S_BIG(8192, 256)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "gate_bwd",
     .run = c_gate_bwd,
     SHAPES(S(1, 1), S(9, 21), S(37, 13), S(2048, 64), S_BIG(8192, 256)),
     .nmse = EW,
     .nmse_dev = DEV_EW,
     FD(fd_gate, S(7, 5), S(4, 33))},
    {.op = "layernorm_fwd",
     .run = c_layernorm_fwd,
     SHAPES(S(7, 5), S(33, 128), S(3, 513), S(37, 13), S(2048, 64), S_BIG(8192, 256)),
     .nmse = EW,
     .nmse_dev = DEV_RED},
    {.op = "layernorm_bwd",
     .run = c_layernorm_bwd,
     SHAPES(S(7, 5), S(33, 128), S(3, 513), S(37, 13), S(2048, 64), S_BIG(8192, 256)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     FD(fd_layernorm, S(7, 5), S(3, 37), S(2, 128))},
    {.op = "cos_embed",
     .run = c_cos_embed,
     SHAPES(S(41, 64), S(41, 13), S(41, 3), S(41, 128), S(15, 37), S(15, 12), S(2048, 64),
            S_BIG(131072, 64)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "mul_bcast_fwd",
     .run = c_mul_bcast_fwd,
     SHAPES(S(3, 5, 7), S(3, 5, 8), S(64, 32, 64), S_BIG(256, 32, 256)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "mul_bcast_bwd",
     .run = c_mul_bcast_bwd,
     SHAPES(S(3, 5, 7), S(3, 5, 8), S(64, 32, 64), S_BIG(256, 32, 256)),
     .nmse = EW,
     .nmse_dev = DEV_RED,
     FD(fd_mul_bcast, S(3, 4, 5), S(2, 7, 33))},
    {.op = "concat_bcast_fwd",
     .run = c_concat_bcast_fwd,
     SHAPES(S(3, 5, 7), S(3, 5, 8), S(64, 32, 64), S_BIG(256, 32, 256)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "concat_bcast_bwd",
     .run = c_concat_bcast_bwd,
     SHAPES(S(3, 5, 7), S(3, 5, 8), S(64, 32, 64), S_BIG(256, 32, 256)),
     .nmse = EW,
     .nmse_dev = DEV_RED,
     FD(fd_concat_bcast, S(3, 4, 5), S(2, 7, 33))},
    {.op = "dueling_fwd",
     .run = c_dueling_fwd,
     SHAPES(S(9, 6), S(7, 0), S(37, 1), S(129, 3), S(2048, 1), S_BIG(65536, 1)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "dueling_bwd",
     .run = c_dueling_bwd,
     SHAPES(S(9, 6), S(7, 0), S(37, 1), S(129, 3), S(2048, 1), S_BIG(65536, 1)),
     .nmse = EW,
     .nmse_dev = DEV_EW,
     FD(fd_dueling, S(7, 0), S(5, 1), S(4, 2))},
    {.op = "q_argmax",
     .run = c_q_argmax,
     SHAPES(S(6, 4, 5, 1), S(5, 8, 1, 1), S(3, 1, 2, 0), S(7, 3, 0, 1), S(37, 5, 1, 1),
            S(64, 32, 0, 1), S(64, 32, 1, 0), S_BIG(2048, 32, 1, 1)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "iqn_targets",
     .run = c_iqn_targets,
     SHAPES(S(5, 7, 5, 0), S(5, 7, 5, 1), S(4, 6, 1, 0), S(4, 6, 1, 1), S(7, 3, 0, 1),
            S(64, 32, 1, 0), S(64, 32, 1, 1), S_BIG(2048, 32, 1, 0)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "quantile_huber",
     .run = c_quantile_huber,
     SHAPES(S(4, 5, 6, 5, 0, 100, 0, 1), S(4, 5, 6, 1, 0, 100, 1, 1), S(3, 8, 4, 2, 0, 70, 1, 1),
            S(2, 32, 32, 1, 0, 200, 0, 0), S(4, 5, 6, 5, 1, 100, 0, 1), S(4, 5, 6, 1, 1, 100, 1, 0),
            S(3, 8, 4, 2, 1, 70, 1, 1), S(7, 5, 3, 0, 1, 100, 1, 1), S(9, 4, 6, 1, 0, 50, 0, 1),
            S(64, 32, 32, 1, 0, 100, 1, 1), S(64, 32, 32, 0, 1, 100, 0, 1),
            S_BIG(1024, 32, 32, 1, 0, 100, 1, 1), S_BIG(512, 16, 16, 0, 1, 100, 0, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     FD(fd_quantile_huber, S(3, 4, 5, 0, 0, 100, 0), S(3, 4, 5, 1, 0, 100, 1),
        S(2, 5, 3, 2, 0, 50, 1), S(3, 4, 5, 0, 1, 100, 0), S(3, 4, 5, 1, 1, 100, 1),
        S(2, 5, 3, 2, 1, 50, 1))},
    {.op = "l2_norm",
     .run = c_l2_norm,
     SHAPES(S(0), S(1), S(7), S(37), S(1000003)),
     .nmse = RED,
     .nmse_dev = DEV_RED},
    {.op = "clip_by_norm",
     .run = c_clip_by_norm,
     SHAPES(S(77, 0), S(77, 1), S(77, 2), S(77, 3), S(77, 4), S(77, 5), S(37, 0), S(1000003, 0)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "adam",
     .run = c_adam,
     SHAPES(S(37, 10, 10, 0, 0, -1), S(37, 10, 10, 1, 1, 0), S(37, 10, 0, 2, 2, 0),
            S(37, 0, 0, 3, 1, -1), S(37, 10, 0, 1000, 0, 0), S(37, 10, 10, 4, 3, 0),
            S(37, 10, 10, 7, 1, 1), S(41, 10, 1, 41, 1, 0), S(1000003, 10, 1, 41, 1, -1)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "target_update",
     .run = c_target_update,
     SHAPES(S(45, 3, 0, 0), S(45, 3, 1, 0), S(45, 3, 2, 0), S(45, 3, 5, 0), S(45, 0, 11, 50),
            S(45, 4, 3, 0), S(45, 4, 4, 0), S(37, 0, 4, 5), S(1000003, 0, 4, 5)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "step_incr",
     .run = c_step_incr,
     SHAPES(S(0, 0), S(41, 0), S(0, 5)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "health_check",
     .elsewhere = "tests/test_health.c (CPU) and tests/test_gpu_health.c (CUDA against the CPU): "
                  "its contract is a health plan's (docs/health.md), built by the model"},
    {.op = "health_fault",
     .run = c_health_fault,
     SHAPES(S(37, 5, 5, 1), S(37, 5, 5, 2), S(37, 5, 5, 3), S(37, 4, 5, 1), S(1, 0, 0, 1)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "rand_uniform",
     .run = c_rand_uniform,
     SHAPES(S(1, 0), S(1001, 1), S(3, 2), S(6, 2), S(17, 3), S(4, 4), S(160000, 5), S(131072, 6)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "rand_index",
     .run = c_rand_index,
     SHAPES(S(1, 0), S(1001, 1), S(3, 2), S(6, 2), S(17, 3), S(4, 4), S(160000, 5), S(131072, 6)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "gather_f32",
     .run = c_gather_f32,
     SHAPES(S(10, 3, 5), S(1000, 17, 513), S(100, 4, 37), S(1000, 1, 64)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "gather_i32",
     .run = c_gather_i32,
     SHAPES(S(10, 3, 5), S(1000, 17, 513), S(100, 3, 37), S(1000, 1, 64)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "sample_batch",
     .run = c_sample_batch,
     SHAPES(S(50, 37, 32, 4, 1, 0), S(300, 300, 64, 9, 3, 12345), S(40, 21, 7, 3, 2, 3),
            S(100000, 50000, 64, 4, 1, 777), S(50, 37, 32, 4, 1, 0, 1),
            S(300, 300, 64, 9, 3, 5, 1)),
     .nmse = EXACT,
     .nmse_dev = EXACT,
     .flags = SEQ},
    {.op = "per_sample",
     .run = c_per_sample,
     SHAPES(S(1, 1, 3, 0), S(7, 5, 8, 3), S(1000, 700, 256, 10), S(1000, 1000, 64, 60),
            S(1024, 513, 37, 49), S(100000, 65537, 64, 7)),
     .nmse = EXACT,
     .nmse_dev = DEV_EW},
    {.op = "per_update",
     .run = c_per_update,
     SHAPES(S(7, 5, 6), S(1000, 700, 256), S(1024, 1024, 37), S(100000, 65537, 64)),
     .nmse = EXACT,
     .nmse_dev = DEV_EW},
    {.op = "per_insert",
     .run = c_per_insert,
     SHAPES(S(7, 5, 5, 0), S(7, 5, 5, 4), S(1000, 700, 700, 64), S(1000, 1000, 990, 37),
            S(1024, 0, 0, 1024), S(100000, 65537, 99990, 64)),
     .nmse = EXACT,
     .nmse_dev = DEV_EW},
    {.op = "rand_uniform_multi",
     .run = c_rand_uniform_multi,
     SHAPES(S(12, 8, 8, 1, 0), S(64, 32, 32, 32, 41), S(3, 5, 7, 2, 9)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "env_step",
     .run = c_env_step,
     SHAPES(S(DQN_ENV_CARTPOLE, 1, 40, 25), S(DQN_ENV_CARTPOLE, 37, 300, 20),
            S(DQN_ENV_ACROBOT, 37, 120, 50), S(DQN_ENV_ACROBOT, 5, 600, 500),
            S(DQN_ENV_MOUNTAINCAR, 37, 250, 200), S(DQN_ENV_MOUNTAINCAR, 300, 60, 0),
            S(DQN_ENV_CARTPOLE, 1000, 120, 60), S(DQN_ENV_ACROBOT, 1000, 60, 30),
            S_BIG(DQN_ENV_CARTPOLE, 65537, 40, 30), S_BIG(DQN_ENV_ACROBOT, 20000, 60, 50),
            S_BIG(DQN_ENV_MOUNTAINCAR, 65537, 40, 30),
            S(DQN_ENV_MARKET, 1, 300, 7, 1, 3, 1, 1, 7, 5),
            S(DQN_ENV_MARKET, 37, 120, 30, 4, 5, 8, 9, 30, 40),
            S(DQN_ENV_MARKET, 5, 200, 64, 16, 63, 3, 20, 64, 100),
            S(DQN_ENV_MARKET, 300, 40, 13, 2, 3, 2, 3, 20, 0),
            S_BIG(DQN_ENV_MARKET, 20000, 40, 16, 4, 3, 8, 7, 16, 500)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "explore",
     .run = c_explore,
     SHAPES(S(1, 0, 0, 0, 0, 0, 0), S(37, 1, 5, 300, 0, 0, 0), S(37, 1, 5, 300, 1, 0, 0),
            S(37, 3, 9, 20, 2, 0, 0), S(64, 1, 300000007, 1000, 0, 0, 0),
            S(13, 6, 2, 7, 3, 1, 0), S(29, 3, 4, 1000000000, 4, 0, 1),
            S(4096, 0, 77, 500, 0, 0, 0), S(1500, 6, 123457, 640, 0, 0, 1),
            S_BIG(65537, 1, 9, 100, 0, 0, 0)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "replay_push",
     .run = c_replay_push,
     SHAPES(S(1, 1, 1, 1, 5, 0, 0, 12, 0, 30), S(4, 3, 4, 1, 7, 5, 2, 40, 0, 15),
            S(4, 3, 4, 1, 7, 5, 2, 40, 1, 15), S(37, 5, 3, 3, 50, 49, 50, 30, 1, 20),
            S(37, 4, 2, 2, 16, 3, 9, 25, 0, 100), S(9, 6, 3, 2, 20, 0, 0, 30, 1, 50),
            S(600, 3, 4, 1, 1000, 990, 1000, 6, 1, 10), S(1200, 2, 4, 2, 3000, 7, 40, 5, 0, 5),
            S_BIG(20000, 3, 8, 3, 100000, 99990, 65537, 8, 1, 3)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "episode_record",
     .run = c_episode_record,
     SHAPES(S(1, 1, 0, 0, 5, 50), S(4, 100, 0, 0, 40, 10), S(4, 100, 100, 37, 40, 10),
            S(37, 5, 3, 3, 10, 40), S(600, 100, 100, 99, 3, 30), S(1300, 100, 12, 12, 4, 2),
            S(4096, 100, 0, 0, 2, 100)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
    {.op = "heads_fwd",
     .run = c_heads_fwd,
     SHAPES(S(13, 7, 0), S(37, 33, 1), S(5, 1, 0), S(129, 33, 3), S(37, 13, 0), S(301, 70, 1),
            S(2048, 64, 0), S(2048, 64, 1), S_BIG((int)(HF_GEMM_ELEMS / 256) + 37, 256, 1),
            S_BIG((int)(HF_GEMM_ELEMS / 33) + 1, 33, 3), S_BIG((int)(HF_GEMM_ELEMS / 64), 64, 0),
            S_BIG((int)(HF_GEMM_ELEMS / 40) + 5, 40, 4),
            S_BIG((int)(HF_GEMM_ELEMS / 64) - 1, 64, 0), S_BIG(262144, 64, 0),
            S_BIG(131072, 256, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = GEMM},
    {.op = "l2_norm2",
     .run = c_l2_norm2,
     SHAPES(S(13, 13), S(1, 23), S(37, 555), S(2048, 2048 * 13), S(1000003, 7)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = SEQ},
    {.op = "heads_bwd",
     .run = c_heads_bwd,
     SHAPES(S(13, 7, 2, 0, 1), S(37, 33, 13, 1, 1), S(64, 64, 13, 2, 0), S(5, 1, 2, 1, 1),
            S(37, 13, 2, 0, 1), S(301, 70, 13, 1, 1), S(129, 33, 23, 1, 1), S(9001, 130, 13, 1, 1),
            S(2048, 64, 2, 1, 1), S(2048, 64, 13, 1, 0), S_BIG(262144, 64, 2, 1, 1),
            S_BIG(131072, 256, 13, 1, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = GEMM,
     FD(fd_heads, S(7, 5, 0), S(5, 9, 1))},
    {.op = "targets_huber",
     .run = c_targets_huber,
     SHAPES(S_F(DEVSEQ, 7, 5, 3, 0, 0, 100, 1, 1), S_F(DEVSEQ, 9, 4, 6, 1, 0, 100, 0, 1),
            S_F(DEVSEQ, 7, 5, 3, 0, 1, 100, 1, 0), S_F(DEVSEQ, 9, 4, 6, 1, 1, 70, 0, 1),
            S_F(DEVSEQ, 6, 3, 5, 2, 0, 50, 1, 1), S_F(DEVSEQ, 64, 32, 32, 1, 0, 100, 1, 0),
            S_F(DEVSEQ, 64, 32, 32, 1, 0, 100, 1, 1), S_F(DEVSEQ, 1500, 8, 8, 0, 0, 100, 0, 1),
            S_F(DEVSEQ, 3, 200, 250, 4, 1, 100, 1, 1),
            S_F(DEVSEQ | BIG, 1024, 32, 32, 1, 1, 100, 1, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = SEQ},
    {.op = "trunk_fwd",
     .run = c_trunk_fwd,
     SHAPES(S_F(DEVSEQ, 1, 4, 64, 1, 1), S_F(DEVSEQ, 37, 8, 48, 2, 1), S_F(DEVSEQ, 11, 6, 64, 1, 1),
            S_F(DEVSEQ, 13, 100, 20, 3, 1), S_F(DEVSEQ, 21, 4, 64, 2, 0),
            S_F(DEVSEQ, 9, 5, 64, 0, 1), S(130, 4, 96, 1, 1), S_F(DEVSEQ, 64, 4, 64, 1, 1),
            S_F(DEVSEQ, 512, 4, 64, 1, 1), S_F(DEVSEQ, TRUNK_ROWS, 4, 64, 1, 1),
            S(TRUNK_ROWS + 5, 4, 64, 1, 1), S(3000, 4, 64, 1, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = SEQ | GEMM},
    {.op = "grn_gate_ln_fwd",
     .run = c_grn_gate_ln_fwd,
     SHAPES(S(9, 21), S(33, 64), S(37, 13), S(300, 200), S(41, 300), S(2048, 64), S_BIG(8192, 256)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = SEQ},
    {.op = "grn_ln_gate_bwd",
     .run = c_grn_ln_gate_bwd,
     SHAPES(S(9, 21), S(33, 64), S(37, 13), S(300, 200), S(41, 300), S(70, 768), S(4100, 64),
            S(2048, 64), S_BIG(8192, 256)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = SEQ,
     FD(fd_grn_tail, S(7, 5), S(3, 37))},
    {.op = "iqn_fwd",
     .run = c_iqn_fwd,
     SHAPES(S(3, 5, 7, 1), S(4, 8, 64, 0), S(5, 3, 7, 1), S(6, 11, 12, 1), S(64, 32, 64, 0),
            S(64, 32, 64, 1), S_BIG(4096, 32, 256, 1)),
     .nmse = EXACT,
     .nmse_dev = EXACT,
     .flags = SEQ},
    {.op = "iqn_embed_fwd",
     .run = c_iqn_embed_fwd,
     SHAPES(S(3, 5, 7, 13, 2, 1), S(4, 8, 64, 64, 0, 0), S(9, 7, 64, 64, 4, 0),
            S(5, 11, 128, 12, 5, 1), S(13, 8, 256, 64, 0, 0), S(3, 33, 256, 32, 2, 1),
            S(4, 5, 96, 64, 4, 0), S(4, 5, 64, 37, 2, 1), S(6, 8, 64, 64, 3, 0),
            S(64, 32, 64, 64, 64, 0), S(128, 32, 64, 64, 64, 1), S_BIG(2300, 32, 64, 64, 1150, 0),
            S_BIG(4096, 32, 256, 64, 2048, 0), S_BIG(601, 32, 128, 64, 300, 1),
            S_BIG(1024, 32, 256, 64, 1024, 0)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = SEQ | GEMM},
    {.op = "iqn_bwd",
     .run = c_iqn_bwd,
     SHAPES(S(3, 5, 7, 1, 0), S(3, 5, 7, 0, 1), S(4, 8, 64, 1, 1), S(4, 8, 64, 0, 0),
            S(6, 11, 12, 1, 1), S(64, 32, 64, 0, 1), S(64, 32, 64, 1, 1), S(2048, 64, 64, 0, 1),
            S_BIG(4096, 32, 256, 1, 1)),
     .nmse = EXACT,
     .nmse_dev = DEV_RED,
     .flags = SEQ,
     FD(fd_iqn_mix, S(3, 4, 5, 1), S(2, 7, 33, 0))},
    {.op = "adam_target_step",
     .run = c_adam_target_step,
     SHAPES(S(53, 4, 3, 0, 0), S(53, 4, 4, 0, 0), S(53, 0, 9, 50, 0), S(53, 2, 7, 0, 1),
            S(53, 0, 0, 500, 1), S(37, 0, 2, 10, 0), S(1000003, 500, 499, 0, 0)),
     .nmse = EXACT,
     .nmse_dev = DEV_EW,
     .flags = SEQ},
    {.op = "sample_draws",
     .run = c_sample_draws,
     SHAPES(S(32, 4, 1, 0, 8, 8, 8), S(17, 9, 3, 777, 8, 5, 8), S(5, 3, 2, 1, 3, 1, 2),
            S(64, 4, 1, 12, 32, 32, 32)),
     .nmse = EXACT,
     .nmse_dev = EXACT,
     .flags = SEQ},
    {.op = "linear_ld_fwd",
     .run = c_linear_ld_fwd,
     SHAPES(S(13, 7, 5, 16, DQN_ACT_RELU, 1), S(97, 64, 33, 128, DQN_ACT_ELU, 1),
            S(8, 9, 3, 9, DQN_ACT_NONE, 0), S_F(ODD, 37, 19, 23, 22, DQN_ACT_ELU, 1),
            S(3000, 70, 45, 73, DQN_ACT_RELU, 0), S(2048, 64, 24, 128, DQN_ACT_NONE, 0),
            S(64, 64, 24, 128, DQN_ACT_NONE, 1), S_BIG(4096, 256, 128, 512, DQN_ACT_NONE, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = GEMM},
    {.op = "linear_ld_bwd",
     .run = c_linear_ld_bwd,
     SHAPES(S(13, 7, 5, 16, 1, 1, 1, 1), S(97, 64, 33, 128, 1, 0, 1, 0), S(8, 9, 3, 9, 1, 1, 1, 1),
            S(8, 9, 3, 9, 0, 0, 1, 1), S(8, 9, 3, 9, 1, 0, 0, 0),
            S_F(ODD, 37, 19, 23, 22, 1, 1, 1, 1), S(3000, 70, 45, 73, 1, 1, 1, 1),
            S(2048, 64, 24, 128, 1, 0, 1, 0), S(64, 64, 24, 128, 1, 1, 1, 1),
            S_BIG(4096, 256, 128, 512, 1, 1, 1, 1)),
     .nmse = RED,
     .nmse_dev = DEV_RED,
     .flags = GEMM,
     FD(fd_bn_split, S(3, 4, 5, 6), S(2, 6, 16, 9))},
    {.op = "bcast_add_act",
     .run = c_bcast_add_act,
     SHAPES(S(3, 5, 6, DQN_ACT_RELU), S(3, 5, 6, DQN_ACT_NONE), S(4, 8, 32, DQN_ACT_NONE),
            S(7, 11, 8, DQN_ACT_RELU), S(64, 32, 24, DQN_ACT_RELU),
            S_BIG(4096, 32, 128, DQN_ACT_RELU)),
     .nmse = EW,
     .nmse_dev = DEV_EW},
    {.op = "relu_bwd_tausum",
     .run = c_relu_bwd_tausum,
     SHAPES(S(3, 5, 6), S(4, 8, 32), S(7, 11, 8), S(64, 32, 24), S_BIG(4096, 32, 128)),
     .nmse = RED,
     .nmse_dev = DEV_RED},
    {.op = "allreduce_mean",
     .run = c_allreduce_mean,
     SHAPES(S(1), S(37), S(1000003)),
     .nmse = EXACT,
     .nmse_dev = EXACT},
};
#define N_ROWS ((int)(sizeof ROWS / sizeof ROWS[0]))

/* ======================= the driver ======================= */

/* the backends other than the CPU: the CUDA backend, in fp32 and TF32 math, and with its
 * thresholds moved to take its other paths at these sizes (backends/cuda_tunables.h; own: the
 * own GEMMs' multiply-adds, embed: the IQN embedding kernel's elements, trunk: trunk_fwd's rows;
 * -1 keeps the default). seqbits: a DEVSEQ shape's sequence runs there bit for bit as the op
 * (the paths that keep the sequence's order). */
typedef struct {
    const char *label;
    dqn_math_mode math;
    double own, embed;
    int trunk;
    int seqbits;
    dqn_backend *be;
} variant;

static variant VARIANTS[] = {
    {"cuda", DQN_MATH_FP32, -1, -1, -1, 1, NULL},
    {"cuda tf32", DQN_MATH_TF32, -1, -1, -1, 0, NULL},
    {"cuda cublas only", DQN_MATH_FP32, 0, -1, -1, 0, NULL},
    {"cuda iqn_embed kernel", DQN_MATH_FP32, -1, 0, -1, 1, NULL},
    {"cuda trunk sequence", DQN_MATH_FP32, -1, -1, 0, 1, NULL},
};
#define N_VARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

static dqn_backend *cpu;
static int n_dev;   /* CUDA variants made */
/* A second CPU backend as one more "other backend": it runs the compare, rerun and sequence
 * path every CUDA variant takes (bit for bit here), so that path is exercised, sanitizers
 * included, on machines without a GPU. */
static dqn_backend *cpu2;
static int small;   /* DQN_GPU_TEST_SMALL: no BIG shapes */

/* the outputs of one run, fetched */
typedef struct {
    int nb;
    void *got[MAX_BUFS];
} snapshot;

static void shape_str(const row *r, const shp *s, char *out, size_t cap) {
    int last = 0;
    for (int k = 0; k < SHAPE_INTS; k++)
        if (s->v[k]) last = k;
    size_t n = (size_t)snprintf(out, cap, "%s [", r->op);
    for (int k = 0; k <= last && n < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, k ? " %d" : "%d", s->v[k]);
    if (n < cap)
        snprintf(out + n, cap - n, "]%s%s", s->flags & BIG ? " big" : "",
                 s->flags & ODD ? " odd" : "");
}

/* a row's inputs are keyed by its op's name, so that adding a row changes no other row's */
static uint64_t row_key(const row *r) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = r->op; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return h << 8;
}

/* one run of a case; the caller frees t's buffers */
static void run_case(tc *t, const row *r, int si, dqn_backend *be, int ref, int seq,
                     const char *where) {
    memset(t, 0, sizeof *t);
    t->be = be, t->ops = be->ops, t->s = r->shapes[si].v, t->ref = ref, t->seq = seq;
    t->odd = (r->shapes[si].flags & ODD) != 0;
    t->key = reg_mix(row_key(r) + (uint64_t)si);
    t->where = where;
    r->run(t);
    if (!t->failed) tcall(t, "sync", be->ops->sync(be));
}

static void take_snapshot(tc *t, snapshot *s) {
    s->nb = t->nb;
    for (int k = 0; k < t->nb; k++) {
        const tbuf *b = &t->b[k];
        s->got[k] = NULL;
        if (!b->out) continue;
        size_t bytes = b->n * reg_esz(b->type);
        s->got[k] = reg_xmalloc(bytes);
        tcall(t, "d2h", t->ops->d2h(t->be, s->got[k], b->dev, bytes));
    }
}

static void free_snapshot(snapshot *s) {
    for (int k = 0; k < s->nb; k++) free(s->got[k]);
}

static double value_of(const tbuf *b, const void *p, size_t i) {
    switch (b->type) {
    case T_F32: return ((const float *)p)[i];
    case T_I32: return ((const int32_t *)p)[i];
    case T_U32: return ((const uint32_t *)p)[i];
    case T_F64: return ((const double *)p)[i];
    case T_U8: return ((const uint8_t *)p)[i];
    default: return (double)((const uint64_t *)p)[i];
    }
}

/* NMSE of got against want over b's compared elements: a non-finite value must be matched by
 * the same one (NaN by NaN); integers must be equal (else infinite) */
static double nmse_of(const tbuf *b, const void *got, const double *want) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < b->check_n; i++) {
        double g = value_of(b, got, i), w = want[i];
        if (!isfinite(w) || !isfinite(g)) {
            if (!(isnan(w) && isnan(g)) && g != w) return INFINITY;
            continue;
        }
        if (b->type != T_F32 && g != w) return INFINITY;
        err += (g - w) * (g - w), ref += w * w;
    }
    return err == 0 ? 0 : ref > 0 ? err / ref : INFINITY;
}

/* got against a snapshot of the same case: bit for bit (bound 0) or by NMSE */
static double compare_runs(const tbuf *b, const void *got, const void *base, double bound) {
    size_t esz = reg_esz(b->type);
    if (memcmp(got, base, b->check_n * esz) == 0) return 0;
    if (bound == 0 || b->type != T_F32) return INFINITY;
    double *w = reg_xmalloc(sizeof(double) * (b->check_n ? b->check_n : 1));
    for (size_t i = 0; i < b->check_n; i++) w[i] = ((const float *)base)[i];
    double e = nmse_of(b, got, w);
    free(w);
    return e;
}

/* every output of t against the snapshot base; returns the worst NMSE */
static double check_against(tc *t, const snapshot *got, const snapshot *base, double bound,
                            const char *what) {
    double worst = 0;
    for (int k = 0; k < t->nb; k++) {
        const tbuf *b = &t->b[k];
        if (!b->out) continue;
        if (k >= base->nb || !base->got[k]) {
            CHECK(0, "%s: output %s has no counterpart in the run it is compared with", t->where,
                  b->name);
            continue;
        }
        double e = compare_runs(b, got->got[k], base->got[k], bound);
        if (bound == 0)
            CHECK(e == 0, "%s: output %s: %s its bits differ", t->where, b->name, what);
        else
            CHECK(e <= bound, "%s: output %s: %s NMSE %.3g > %.3g", t->where, b->name, what, e,
                  bound);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Row r at shape si: the CPU against the reference and the sequence, then every other backend */
static void run_row_shape(const row *r, int si) {
    const shp *sh = &r->shapes[si];
    if ((sh->flags & BIG) && (n_dev == 0 || small)) return;
    char name[160], where[256];
    shape_str(r, sh, name, sizeof name);
    int ref = !(sh->flags & BIG);
    tc *t = calloc(1, sizeof *t), *u = calloc(1, sizeof *u);
    if (!t || !u) exit(1);
    snapshot base, got;
    snprintf(where, sizeof where, "%s on cpu", name);
    run_case(t, r, si, cpu, ref, 0, where);
    take_snapshot(t, &base);
    double worst_ref = 0;
    int have_ref = 0;
    for (int k = 0; k < t->nb && ref && !t->failed; k++) {
        const tbuf *b = &t->b[k];
        if (!b->out) continue;
        have_ref |= b->want != NULL;
        if (!b->want) {
            CHECK(r->flags & SEQ, "%s: output %s has no reference (write it into want())",
                  where, b->name);
            continue;
        }
        double e = nmse_of(b, base.got[k], b->want);
        CHECK(e <= r->nmse, "%s: output %s: NMSE %.3g against the reference > %.3g", where,
              b->name, e, r->nmse);
        worst_ref = e > worst_ref ? e : worst_ref;
    }
    char line[320];
    int nl = ref && have_ref ? snprintf(line, sizeof line, "  %-58s cpu: ref %.1e", name, worst_ref)
                             : snprintf(line, sizeof line, "  %-58s cpu", name);
    if ((r->flags & SEQ) && !t->failed) {
        snprintf(where, sizeof where, "%s on cpu, its sequence", name);
        run_case(u, r, si, cpu, 0, 1, where);
        take_snapshot(u, &got);
        check_against(u, &got, &base, 0, "the op against its sequence (bit for bit):");
        free_snapshot(&got);
        free_bufs(u);
        nl += snprintf(line + nl, sizeof line - (size_t)nl, ", seq bits");
    }
    double worst_dev = 0;
    for (int v = -1; v < N_VARIANTS && !t->failed; v++) {
        const variant cv = {"cpu, a second backend", DQN_MATH_FP32, -1, -1, -1, 1, cpu2};
        const variant *va = v < 0 ? &cv : &VARIANTS[v];
        if (!va->be) continue;
        double bound = va->math == DQN_MATH_TF32 && (r->flags & GEMM) ? DEV_TF32 : r->nmse_dev;
        if (v < 0) bound = 0;   /* the same code on the same inputs */
        snapshot first;
        snprintf(where, sizeof where, "%s on %s", name, va->label);
        run_case(u, r, si, va->be, 0, 0, where);
        take_snapshot(u, &first);
        double e = check_against(u, &first, &base, bound, "against the cpu:");
        worst_dev = e > worst_dev ? e : worst_dev;
        free_bufs(u);
        /* a rerun on fresh buffers gives the same bits */
        snprintf(where, sizeof where, "%s on %s, rerun", name, va->label);
        run_case(u, r, si, va->be, 0, 0, where);
        take_snapshot(u, &got);
        check_against(u, &got, &first, 0, "against the first run (bit for bit):");
        free_snapshot(&got);
        free_bufs(u);
        if ((sh->flags & DEVSEQ) && va->seqbits && (r->flags & SEQ)) {
            snprintf(where, sizeof where, "%s on %s, its sequence", name, va->label);
            run_case(u, r, si, va->be, 0, 1, where);
            take_snapshot(u, &got);
            check_against(u, &got, &first, 0, "the op against its sequence (bit for bit):");
            free_snapshot(&got);
            free_bufs(u);
        }
        free_snapshot(&first);
    }
    if (n_dev)
        snprintf(line + nl, sizeof line - (size_t)nl, ", %d cuda backends: worst %.1e", n_dev,
                 worst_dev);
    printf("%s\n", line);
    free_snapshot(&base);
    free_bufs(t);
    free(t);
    free(u);
}

/* the central difference of L = sum proj * y against each gradient element */
static double fd_loss(fc *f, void (*fn)(fc *)) {
    f->bwd = 0, f->first = 0, f->nx = f->ny = f->nt = 0;
    fn(f);
    double L = 0;
    for (int k = 0; k < f->cy; k++)
        for (size_t i = 0; i < f->y[k].n; i++) L += (double)f->y[k].proj[i] * f->y[k].p[i];
    return L;
}

static void run_fd(const row *r, int si) {
    const shp *sh = &r->fd_shapes[si];
    char name[160], where[200];
    shape_str(r, sh, name, sizeof name);
    snprintf(where, sizeof where, "%s finite differences", name);
    fc *f = calloc(1, sizeof *f);
    if (!f) exit(1);
    f->be = cpu, f->ops = cpu->ops, f->s = sh->v, f->bwd = 1, f->first = 1, f->h = 1e-2f;
    f->key = reg_mix(row_key(r) + 0x8000u + (uint64_t)si);
    f->where = where;
    r->fd(f);
    double worst = 0;
    size_t checked = 0;
    for (int k = 0; k < f->cx && !f->failed; k++) {
        fdbuf *x = &f->x[k];
        const float *g = x->proj;
        if (!g) continue;
        double gmax = 0;
        int finite = 1;
        for (size_t i = 0; i < x->n; i++)
            gmax = fmax(gmax, fabs(g[i])), finite &= isfinite(g[i]) != 0;
        CHECK(finite, "%s: the gradient of %s is not all written (or not finite)", where,
              f->names[k]);
        /* the difference of float forwards has absolute noise: tiny elements get the scale */
        double floor = fmax(0.05 * gmax, 1e-9), wk = 0;
        size_t count = x->n <= FD_SAMPLES ? x->n : FD_SAMPLES;
        for (size_t c = 0; c < count; c++) {
            size_t i = x->n <= FD_SAMPLES ? c : (size_t)(reg_u01(f->key, 900 + k, c) * x->n);
            float x0 = x->p[i];
            x->p[i] = x0 + f->h;
            double xp = x->p[i], lp = fd_loss(f, r->fd);
            x->p[i] = x0 - f->h;
            double xm = x->p[i], lm = fd_loss(f, r->fd);
            x->p[i] = x0;
            double fd = (lp - lm) / (xp - xm), e = fabs(fd - g[i]) / fmax(fabs(g[i]), floor);
            if (isnan(e) || e > wk) wk = e;
        }
        CHECK(wk <= FD_TOL, "%s: d/d%s: worst relative error %.3g over %zu elements", where,
              f->names[k], wk, count);
        worst = isnan(wk) || wk > worst ? wk : worst;
        checked += count;
    }
    printf("  %-58s fd: %zu elements, worst %.1e\n", name, checked, worst);
    fd_free(f);
    free(f);
}

/* ---- every OP entry of ops.def has a row, and every row an op ---- */

#define KIND_OP 1
#define KIND_CTL 0
#define KIND_OPT 0
static const struct {
    const char *name;
    int is_op;
} OPS_DEF[] = {
#define DQN_OP(name, ret, kind, params, args, doc) {#name, KIND_##kind},
#include "backends/ops.def"
#undef DQN_OP
};

static void test_coverage(void) {
    int n_ops = (int)(sizeof OPS_DEF / sizeof OPS_DEF[0]), n_op = 0;
    for (int i = 0; i < n_ops; i++) {
        if (!OPS_DEF[i].is_op) continue;
        n_op++;
        int rows = 0;
        for (int r = 0; r < N_ROWS; r++) rows += strcmp(ROWS[r].op, OPS_DEF[i].name) == 0;
        CHECK(rows == 1, "op %s (kind OP in ops.def) has %d rows in the registry, want 1 "
              "(docs/adding-an-op.md)", OPS_DEF[i].name, rows);
    }
    for (int r = 0; r < N_ROWS; r++) {
        int found = 0;
        for (int i = 0; i < n_ops; i++)
            found |= OPS_DEF[i].is_op && strcmp(ROWS[r].op, OPS_DEF[i].name) == 0;
        CHECK(found, "registry row %s names no OP entry of ops.def", ROWS[r].op);
        CHECK((ROWS[r].run && ROWS[r].n_shapes > 0) != (ROWS[r].elsewhere != NULL),
              "registry row %s: give it a case and shapes, or (only) the test that holds it",
              ROWS[r].op);
    }
    printf("coverage: %d OP entries of ops.def, %d rows\n", n_op, N_ROWS);
}

/* name is one of the comma-separated names of list */
static int list_has(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static void make_variants(void) {
    for (int v = 0; v < N_VARIANTS; v++) {
        variant *va = &VARIANTS[v];
        dqn_status s = dqn_backend_cuda_create(&va->be, 0, va->math);
        dqn_cuda_tunables *t = s == DQN_OK ? dqn_backend_cuda_tunables(va->be) : NULL;
        if (t && va->own >= 0) t->own_gemm_macs = va->own;
        if (t && va->embed >= 0) t->iqn_embed_elems = va->embed;
        if (t && va->trunk >= 0) t->trunk_rows = va->trunk;
        if (v == 0 && s == DQN_ERR_UNSUPPORTED) {
            CHECK(!dqn_backend_cuda_available(), "cuda_create says no device, available() says 1");
            printf("SKIP cuda: no CUDA device (%s): the registry ran on the CPU only\n",
                   dqn_last_error());
            va->be = NULL;
            return;
        }
        CHECK(s == DQN_OK, "the backend \"%s\" could not be made: %s", va->label, dqn_last_error());
        if (s != DQN_OK) va->be = NULL;
        n_dev += va->be != NULL;
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* the lines between the failures they explain */
    CHECK_OK(dqn_backend_cpu_create(&cpu));
    if (!cpu) return check_finish("test_backend_ops");
    small = getenv("DQN_GPU_TEST_SMALL") != NULL;
    CHECK_OK(dqn_backend_cpu_create(&cpu2));
    test_coverage();
    make_variants();
    printf("backends: cpu, a second cpu");
    for (int v = 0; v < N_VARIANTS; v++)
        if (VARIANTS[v].be) printf(", %s", VARIANTS[v].label);
    printf("\n");
    const char *only = getenv("DQN_TEST_OP");   /* one row (a comma-separated list) */
    for (int r = 0; r < N_ROWS; r++) {
        if (only && !list_has(only, ROWS[r].op)) continue;
        if (ROWS[r].elsewhere) {
            printf("  %-58s held by %s\n", ROWS[r].op, ROWS[r].elsewhere);
            continue;
        }
        for (int s = 0; s < ROWS[r].n_shapes; s++) run_row_shape(&ROWS[r], s);
        for (int s = 0; s < ROWS[r].n_fd; s++) run_fd(&ROWS[r], s);
    }
    for (int v = 0; v < N_VARIANTS; v++)
        if (VARIANTS[v].be) VARIANTS[v].be->ops->destroy(VARIANTS[v].be);
    cpu->ops->destroy(cpu);
    if (cpu2) cpu2->ops->destroy(cpu2);
    int rc = check_finish("test_backend_ops");
    if (rc == 0 && n_dev == 0 && getenv("DQN_TEST_NEED_GPU")) {
        printf("SKIP: DQN_TEST_NEED_GPU is set and there is no CUDA device\n");
        return 77;
    }
    return rc;
}
