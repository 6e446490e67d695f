/* The CPU backend's forward and non-differentiable ops against naive double-precision loops
 * written here from the definitions in backends/ops.def and SPEC section 3: GEMMs (both
 * passes, shapes that cross every blocking edge), elementwise forwards, LayerNorm, cos_embed,
 * q_argmax, iqn_targets, the quantile Huber loss, norms and clipping, Adam, target updates,
 * the Philox draws, gathers, the fused ops (against the unfused ones), memory ops and argument
 * errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "check.h"
#include "dqn_philox.h"

static dqn_backend *be;
static const dqn_ops *ops;

/* ---- random inputs ---- */

#define TEST_RNG_SEED 0x243F6A8885A308D3ull
#include "test_rng.h"

static int below(int n) { return (int)(next_u64() % (uint64_t)n); }

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static float *rand_f(size_t n, double lo, double hi) {
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = (float)unif(lo, hi);
    return p;
}

static float *poisoned(size_t n) {
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static float *copy_of(const float *x, size_t n) {
    float *p = xmalloc(n * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

/* max that keeps a NaN (fmax drops it, which would hide an unwritten output) */
static double maxe(double a, double b) { return isnan(b) || b > a ? b : a; }

/* Largest |got - want| / (scale[i] + floor) over n elements (NaN if any is NaN); scale NULL =
 * |want|. */
static double worst_err(const float *got, const double *want, const double *scale, size_t n,
                        double floor) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        worst = maxe(worst, fabs(got[i] - want[i]) / ((scale ? scale[i] : fabs(want[i])) + floor));
    }
    return worst;
}

/* ---- memory ---- */

static void test_memory(void) {
    float *a = NULL, *b = NULL;
    CHECK_OK(ops->alloc(be, (void **)&a, 100 * sizeof *a));
    CHECK_OK(ops->alloc(be, (void **)&b, 100 * sizeof *b));
    if (!a || !b) return;
    int zero = 1;
    for (int i = 0; i < 100; i++) zero &= a[i] == 0.0f;
    CHECK(zero, "alloc is not zero-filled");
    float host[100], back[100];
    for (int i = 0; i < 100; i++) host[i] = (float)(i * 0.5 - 7);
    CHECK_OK(ops->h2d(be, a, host, sizeof host));
    CHECK_OK(ops->d2d(be, b, a, sizeof host));
    CHECK_OK(ops->d2h(be, back, b, sizeof back));
    CHECK(memcmp(host, back, sizeof host) == 0, "h2d -> d2d -> d2h does not round-trip");
    CHECK_OK(ops->fill(be, a, 3.25f, 37));
    int filled = 1;
    for (int i = 0; i < 100; i++) filled &= a[i] == (i < 37 ? 3.25f : host[i]);
    CHECK(filled, "fill wrote the wrong elements");
    CHECK_OK(ops->sync(be));
    void *empty = NULL;
    CHECK_OK(ops->alloc(be, &empty, 0));
    CHECK(empty != NULL, "alloc of 0 bytes gave NULL");
    ops->free(be, empty);
    ops->free(be, a);
    ops->free(be, b);
    CHECK(ops->capture_begin == NULL && ops->capture_end == NULL && ops->graph_compose == NULL &&
              ops->graph_launch == NULL && ops->graph_destroy == NULL,
          "the CPU backend has graph-capture entries");
}

/* ---- linear (whichever GEMM is compiled in) ---- */

static void test_linear(int M, int K, int N, int with_bias) {
    size_t nx = (size_t)M * K, nw = (size_t)N * K, ny = (size_t)M * N;
    float *X = rand_f(nx, -1, 1), *W = rand_f(nw, -1, 1), *b = with_bias ? rand_f(N, -1, 1) : NULL;
    float *dY = rand_f(ny, -1, 1), *Y = poisoned(ny);
    float *dX = poisoned(nx), *dW = poisoned(nw), *db = poisoned(N);
    size_t most = nx > ny ? nx : ny;
    most = most > nw ? most : nw;
    double *want = xmalloc(sizeof(double) * most), *scale = xmalloc(sizeof(double) * most);
    /* float sums of K terms err by well under 1e-5 of the sum of |terms| at these K */
    const double tol = 1e-5;

    CHECK_OK(ops->linear_fwd(be, X, W, b, Y, M, K, N));
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = b ? b[n] : 0, a = b ? fabs(b[n]) : 0;
            for (int k = 0; k < K; k++) {
                s += (double)X[(size_t)m * K + k] * W[(size_t)n * K + k];
                a += fabs((double)X[(size_t)m * K + k] * W[(size_t)n * K + k]);
            }
            want[(size_t)m * N + n] = s, scale[(size_t)m * N + n] = a;
        }
    double e = worst_err(Y, want, scale, ny, 1e-30);
    CHECK(e <= tol, "linear_fwd M=%d K=%d N=%d bias=%d: error %.3g of the |terms| sum", M, K, N,
          with_bias, e);

    CHECK_OK(ops->linear_bwd(be, X, W, dY, dX, dW, db, M, K, N));
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double s = 0, a = 0;
            for (int n = 0; n < N; n++) {
                s += (double)dY[(size_t)m * N + n] * W[(size_t)n * K + k];
                a += fabs((double)dY[(size_t)m * N + n] * W[(size_t)n * K + k]);
            }
            want[(size_t)m * K + k] = s, scale[(size_t)m * K + k] = a;
        }
    e = worst_err(dX, want, scale, nx, 1e-30);
    CHECK(e <= tol, "linear_bwd dX M=%d K=%d N=%d: error %.3g", M, K, N, e);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double s = 0, a = 0;
            for (int m = 0; m < M; m++) {
                s += (double)dY[(size_t)m * N + n] * X[(size_t)m * K + k];
                a += fabs((double)dY[(size_t)m * N + n] * X[(size_t)m * K + k]);
            }
            want[(size_t)n * K + k] = s, scale[(size_t)n * K + k] = a;
        }
    e = worst_err(dW, want, scale, nw, 1e-30);
    CHECK(e <= tol, "linear_bwd dW M=%d K=%d N=%d: error %.3g", M, K, N, e);
    for (int n = 0; n < N; n++) {
        double s = 0, a = 0;
        for (int m = 0; m < M; m++) s += dY[(size_t)m * N + n], a += fabs(dY[(size_t)m * N + n]);
        want[n] = s, scale[n] = a;
    }
    e = worst_err(db, want, scale, N, 1e-30);
    CHECK(e <= tol, "linear_bwd db M=%d K=%d N=%d: error %.3g", M, K, N, e);
    printf("  linear M=%-4d K=%-4d N=%-4d bias=%d ok\n", M, K, N, with_bias);
    free(X);
    free(W);
    free(b);
    free(dY);
    free(Y);
    free(dX);
    free(dW);
    free(db);
    free(want);
    free(scale);
}

/* ---- elementwise forwards ---- */

static void test_elementwise(void) {
    enum { n = 1003, M = 9, d = 21, B = 3, T = 5 };
    float *x = rand_f(n, -3, 3), *y = poisoned(n);
    double want[2 * B * T * d];
    CHECK_OK(ops->relu_fwd(be, x, y, n));
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= y[i] == (x[i] > 0 ? x[i] : 0.0f);
    CHECK(ok, "relu_fwd");
    float *inplace = copy_of(x, n);
    CHECK_OK(ops->relu_fwd(be, inplace, inplace, n));
    CHECK(memcmp(inplace, y, n * sizeof *y) == 0, "relu_fwd in place");

    CHECK_OK(ops->elu_fwd(be, x, y, n));
    double e = 0;
    for (int i = 0; i < n; i++) {
        double w = x[i] > 0 ? x[i] : expm1((double)x[i]);
        e = maxe(e, fabs(y[i] - w) / (fabs(w) + 1e-30));
    }
    CHECK(e <= 2.5e-7, "elu_fwd: relative error %.3g", e);
    memcpy(inplace, x, n * sizeof *x);
    CHECK_OK(ops->elu_fwd(be, inplace, inplace, n));
    CHECK(memcmp(inplace, y, n * sizeof *y) == 0, "elu_fwd in place");

    float *acc = copy_of(y, n);
    CHECK_OK(ops->axpy(be, -0.75f, x, acc, n));
    ok = 1;
    for (int i = 0; i < n; i++) ok &= acc[i] == y[i] + -0.75f * x[i];
    CHECK(ok, "axpy");

    float *h = rand_f(M * d, -2, 2), *g = rand_f(2 * M * d, -4, 4), *r = poisoned(M * d);
    CHECK_OK(ops->gate_fwd(be, h, g, r, M, d));
    e = 0;
    for (int m = 0; m < M; m++)
        for (int j = 0; j < d; j++) {
            double w = h[m * d + j] + g[m * 2 * d + j] / (1 + exp(-(double)g[m * 2 * d + d + j]));
            e = maxe(e, fabs(r[m * d + j] - w) / (fabs(h[m * d + j]) + fabs(g[m * 2 * d + j])));
        }
    CHECK(e <= 5e-7, "gate_fwd: error %.3g", e);

    float *hb = rand_f(B * d, -1, 1), *phi = rand_f(B * T * d, -1, 1), *z = poisoned(B * T * d);
    CHECK_OK(ops->mul_bcast_fwd(be, hb, phi, z, B, T, d));
    ok = 1;
    for (int s = 0; s < B; s++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < d; j++)
                ok &= z[(s * T + i) * d + j] == hb[s * d + j] * phi[(s * T + i) * d + j];
    CHECK(ok, "mul_bcast_fwd");

    float *cat = poisoned(2 * B * T * d);
    CHECK_OK(ops->concat_bcast_fwd(be, z, hb, cat, B, T, d));
    for (int rr = 0; rr < B * T; rr++)
        for (int j = 0; j < d; j++) {
            want[rr * 2 * d + j] = z[rr * d + j];
            want[rr * 2 * d + d + j] = hb[rr / T * d + j];
        }
    CHECK(worst_err(cat, want, NULL, 2 * B * T * d, 0) == 0, "concat_bcast_fwd");

    static const int sizes[] = {3, 1, 5};
    dqn_branches br;
    dqn_branches_init(&br, 3, sizes);
    float *V = rand_f(M, -1, 1), *Adv = rand_f(M * br.A, -2, 2), *Z = poisoned(M * br.A);
    CHECK_OK(ops->dueling_fwd(be, V, Adv, Z, M, &br));
    e = 0;
    for (int m = 0; m < M; m++)
        for (int b = 0; b < br.D; b++) {
            double mean = 0;
            for (int a = 0; a < br.n[b]; a++)
                mean += Adv[m * br.A + br.off[b] + a] / (double)br.n[b];
            for (int a = 0; a < br.n[b]; a++) {
                int c = m * br.A + br.off[b] + a;
                e = maxe(e, fabs(Z[c] - (V[m] + Adv[c] - mean)));
            }
        }
    CHECK(e <= 2e-6, "dueling_fwd: error %.3g", e);
    free(x);
    free(y);
    free(inplace);
    free(acc);
    free(h);
    free(g);
    free(r);
    free(hb);
    free(phi);
    free(z);
    free(cat);
    free(V);
    free(Adv);
    free(Z);
}

/* ---- LayerNorm forward ---- */

static void test_layernorm(int M, int d) {
    size_t n = (size_t)M * d;
    float *x = rand_f(n, -3, 5), *gamma = rand_f(d, 0.5, 1.5), *beta = rand_f(d, -1, 1);
    float *y = poisoned(n), *mean = poisoned(M), *rstd = poisoned(M);
    CHECK_OK(ops->layernorm_fwd(be, x, gamma, beta, y, mean, rstd, M, d));
    double ey = 0, em = 0, er = 0;
    for (int m = 0; m < M; m++) {
        double mu = 0, var = 0;
        for (int j = 0; j < d; j++) mu += x[(size_t)m * d + j];
        mu /= d;
        for (int j = 0; j < d; j++) var += pow(x[(size_t)m * d + j] - mu, 2);
        double rs = 1 / sqrt(var / d + 1e-5);
        em = maxe(em, fabs(mean[m] - mu) / (fabs(mu) + 1 / rs));
        er = maxe(er, fabs(rstd[m] - rs) / rs);
        for (int j = 0; j < d; j++) {
            double xh = (x[(size_t)m * d + j] - mu) * rs;
            double w = xh * gamma[j] + beta[j];
            ey = maxe(
                ey, fabs(y[(size_t)m * d + j] - w) / (fabs(xh * gamma[j]) + fabs(beta[j]) + 1e-3));
        }
    }
    CHECK(em <= 1e-7 && er <= 2e-7 && ey <= 2e-6,
          "layernorm_fwd M=%d d=%d: errors mean %.3g rstd %.3g y %.3g", M, d, em, er, ey);
    /* a constant row: var 0, y = beta exactly */
    for (int j = 0; j < d; j++) x[j] = 1.5f;
    CHECK_OK(ops->layernorm_fwd(be, x, gamma, beta, y, mean, rstd, 1, d));
    CHECK(memcmp(y, beta, d * sizeof *y) == 0 && mean[0] == 1.5f &&
              fabsf(rstd[0] - (float)(1 / sqrt(1e-5))) <= 1e-7f * rstd[0],
          "layernorm_fwd of a constant row");
    free(x);
    free(gamma);
    free(beta);
    free(y);
    free(mean);
    free(rstd);
}

/* ---- cos_embed ---- */

static void test_cos_embed(int n_cos) {
    enum { R = 41 };
    float tau[R], *C = poisoned(R * n_cos);
    for (int r = 0; r < R; r++) tau[r] = (float)unif(0, 1);
    tau[0] = dqn_u32_to_unit(0), tau[1] = dqn_u32_to_unit(UINT32_MAX), tau[2] = 0.5f,
    tau[3] = 0.25f;
    CHECK_OK(ops->cos_embed(be, tau, C, R, n_cos));
    double e = 0;
    for (int r = 0; r < R; r++)
        for (int k = 1; k <= n_cos; k++)
            e = maxe(e, fabs(C[r * n_cos + k - 1] - cos(3.14159265358979323846 * k * tau[r])));
    CHECK(e <= 1e-7, "cos_embed n_cos=%d: max error %.3g", n_cos, e);
    free(C);
}

/* ---- action selection ---- */

static void test_q_argmax(int B, int K, int D, const int *sizes) {
    dqn_branches br;
    dqn_branches_init(&br, D, sizes);
    const int A = br.A;
    float *Z = rand_f((size_t)B * K * A, -2, 2), *Q = poisoned((size_t)B * A);
    int32_t *act = xmalloc(sizeof(int32_t) * B * D), *act2 = xmalloc(sizeof(int32_t) * B * D);
    /* ties: sample 0, last branch: its last two columns equal and on top (expect the first of
     * them); sample 1: every column of branch 0 equal (expect 0) */
    int lb = D - 1, nb = br.n[lb];
    for (int k = 0; k < K && nb >= 2; k++) {
        float *row = Z + (size_t)k * A + br.off[lb];
        row[nb - 1] = row[nb - 2] = 5.0f + k;
    }
    for (int k = 0; k < K && B > 1; k++)
        for (int a = 0; a < br.n[0]; a++) Z[(size_t)(K + k) * A + a] = -1.0f - 0.5f * k;
    CHECK_OK(ops->q_argmax(be, Z, Q, act, B, K, &br));
    double e = 0;
    int ok = 1;
    for (int s = 0; s < B; s++)
        for (int b = 0; b < D; b++) {
            int best = 0;
            double qbest = -INFINITY;
            for (int a = 0; a < br.n[b]; a++) {
                double q = 0;
                for (int k = 0; k < K; k++) q += Z[(size_t)(s * K + k) * A + br.off[b] + a];
                q /= K;
                e = maxe(e, fabs(Q[s * A + br.off[b] + a] - q) / (fabs(q) + 1e-30));
                if (q > qbest) best = a, qbest = q;
            }
            ok &= act[s * D + b] == best;
        }
    CHECK(e <= 1e-7, "q_argmax: Q relative error %.3g", e);
    CHECK(ok, "q_argmax B=%d K=%d D=%d: wrong actions", B, K, D);
    if (nb >= 2) CHECK(act[lb] == nb - 2, "q_argmax tie: got %d, want %d", (int)act[lb], nb - 2);
    if (B > 1) CHECK(act[D] == 0, "q_argmax all-equal branch: got %d, want 0", (int)act[D]);
    CHECK_OK(ops->q_argmax(be, Z, NULL, act2, B, K, &br));
    CHECK(memcmp(act, act2, sizeof(int32_t) * B * D) == 0, "q_argmax without Q differs");
    free(Z);
    free(Q);
    free(act);
    free(act2);
}

/* ---- targets ---- */

static void test_iqn_targets(int B, int Nt, int D, const int *sizes, dqn_target_mode mode) {
    dqn_branches br;
    dqn_branches_init(&br, D, sizes);
    const int A = br.A;
    size_t ny = (size_t)B * (mode == DQN_TARGET_MEAN ? 1 : D) * Nt;
    float *Zt = rand_f((size_t)B * Nt * A, -3, 3), *R = rand_f(B, -1, 1), *disc = rand_f(B, 0, 1);
    float *y = poisoned(ny);
    int32_t *astar = xmalloc(sizeof(int32_t) * B * D);
    disc[0] = 0.0f; /* a terminated transition */
    for (int s = 0; s < B; s++)
        for (int b = 0; b < D; b++) astar[s * D + b] = below(sizes[b]);
    CHECK_OK(ops->iqn_targets(be, Zt, astar, R, disc, y, B, Nt, &br, mode));
    double e = 0;
    for (int s = 0; s < B; s++)
        for (int j = 0; j < Nt; j++) {
            const float *z = Zt + (size_t)(s * Nt + j) * A;
            double mean = 0;
            for (int b = 0; b < D; b++) mean += z[br.off[b] + astar[s * D + b]] / (double)D;
            for (int b = 0; b < D; b++) {
                double w, got;
                if (mode == DQN_TARGET_MEAN) {
                    if (b > 0) break;
                    w = R[s] + (double)disc[s] * mean, got = y[s * Nt + j];
                } else {
                    w = R[s] + (double)disc[s] * z[br.off[b] + astar[s * D + b]];
                    got = y[(s * D + b) * Nt + j];
                }
                e = maxe(e, fabs(got - w) / (fabs(R[s]) + 3));
            }
        }
    CHECK(e <= 3e-7, "iqn_targets %s B=%d Nt=%d D=%d: error %.3g",
          mode == DQN_TARGET_MEAN ? "mean" : "independent", B, Nt, D, e);
    astar[D - 1] = sizes[D - 1];
    CHECK(ops->iqn_targets(be, Zt, astar, R, disc, y, B, Nt, &br, mode) == DQN_ERR_ARG,
          "iqn_targets accepted an action out of range");
    free(Zt);
    free(R);
    free(disc);
    free(y);
    free(astar);
}

/* ---- quantile Huber loss: the direct quadruple loop of SPEC section 3 ---- */

static double huber(double u, double k) {
    return fabs(u) <= k ? 0.5 * u * u : k * (fabs(u) - 0.5 * k);
}

static void test_quantile_huber(int B, int N, int Nt, int D, const int *sizes, dqn_target_mode mode,
                                float kappa, int weighted) {
    dqn_branches br;
    dqn_branches_init(&br, D, sizes);
    const int A = br.A;
    size_t nz = (size_t)B * N * A, ny = (size_t)B * (mode == DQN_TARGET_MEAN ? 1 : D) * Nt;
    float *Z = rand_f(nz, -2, 2), *tau = rand_f((size_t)B * N, 0.01, 0.99),
          *y = rand_f(ny, -2.5, 2.5);
    float *w = weighted ? rand_f(B, 0.1, 2) : NULL, *dZ = poisoned(nz), *ps = poisoned(B),
          loss = NAN;
    int32_t *act = xmalloc(sizeof(int32_t) * B * D);
    for (int s = 0; s < B; s++)
        for (int b = 0; b < D; b++) act[s * D + b] = below(sizes[b]);
    CHECK_OK(ops->quantile_huber(be, Z, tau, act, y, w, &loss, dZ, ps, B, N, Nt, &br, mode, kappa));

    double L = 0, *per = xmalloc(sizeof(double) * B), *grad = xmalloc(sizeof(double) * nz);
    for (size_t i = 0; i < nz; i++) grad[i] = 0;
    for (int s = 0; s < B; s++) {
        double ws = w ? w[s] : 1;
        per[s] = 0;
        for (int b = 0; b < D; b++)
            for (int i = 0; i < N; i++) {
                size_t zi = (size_t)(s * N + i) * A + br.off[b] + act[s * D + b];
                for (int j = 0; j < Nt; j++) {
                    double yj = mode == DQN_TARGET_MEAN ? y[s * Nt + j] : y[(s * D + b) * Nt + j];
                    double u = yj - Z[zi], t = tau[s * N + i], ind = u < 0 ? 1 : 0;
                    double rho = fabs(t - ind) * huber(u, kappa) / kappa;
                    double du = fabs(t - ind) * fmax(-kappa, fmin(kappa, u)) / kappa;
                    per[s] += rho / D / Nt;
                    L += ws * rho / B / D / Nt;
                    grad[zi] -= ws * du / B / D / Nt;
                }
            }
    }
    CHECK(fabs(loss - L) <= 1e-6 * fabs(L), "quantile_huber loss %.9g, want %.9g", (double)loss, L);
    double ep = worst_err(ps, per, NULL, B, 1e-30);
    CHECK(ep <= 1e-6, "quantile_huber per_sample: relative error %.3g", ep);
    double gmax = 0;
    for (size_t i = 0; i < nz; i++) gmax = fmax(gmax, fabs(grad[i]));
    int zeros_ok = 1;
    for (size_t i = 0; i < nz; i++)
        if (grad[i] == 0) zeros_ok &= dZ[i] == 0.0f;
    double eg = worst_err(dZ, grad, NULL, nz, 1e-6 * gmax);
    CHECK(eg <= 1e-6 && zeros_ok, "quantile_huber dZ: relative error %.3g, zeros %d", eg, zeros_ok);
    /* without per_sample: the same loss and gradient */
    float loss2 = NAN, *dZ2 = poisoned(nz);
    CHECK_OK(
        ops->quantile_huber(be, Z, tau, act, y, w, &loss2, dZ2, NULL, B, N, Nt, &br, mode, kappa));
    CHECK(loss2 == loss && memcmp(dZ, dZ2, nz * sizeof *dZ) == 0,
          "quantile_huber with per_sample NULL differs");
    printf("  quantile_huber B=%d N=%d Nt=%d D=%d %s kappa=%g w=%d: loss %.6f ok\n", B, N, Nt, D,
           mode == DQN_TARGET_MEAN ? "mean" : "indep", (double)kappa, weighted, (double)loss);
    act[0] = -1;
    CHECK(ops->quantile_huber(be, Z, tau, act, y, w, &loss2, dZ2, NULL, B, N, Nt, &br, mode,
                              kappa) == DQN_ERR_ARG,
          "quantile_huber accepted a negative action");
    free(Z);
    free(tau);
    free(y);
    free(w);
    free(dZ);
    free(ps);
    free(act);
    free(per);
    free(grad);
    free(dZ2);
}

/* ---- norms and clipping ---- */

static void test_l2_norm(size_t n) {
    float *x = rand_f(n, -1, 1), out = NAN;
    CHECK_OK(ops->l2_norm(be, x, n, &out));
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    CHECK(fabs(out - sqrt(s)) <= 1e-7 * sqrt(s), "l2_norm n=%zu: %.9g, want %.9g", n, (double)out,
          sqrt(s));
    free(x);
}

static void test_clip_by_norm(void) {
    enum { n = 77 };
    float *x = rand_f(n, -1, 1), *orig = copy_of(x, n), norm = 0;
    CHECK_OK(ops->l2_norm(be, x, n, &norm));
    float max_norm = 0.5f * norm;
    CHECK_OK(ops->clip_by_norm(be, x, n, &norm, max_norm));
    double e = 0;
    for (int i = 0; i < n; i++) e = maxe(e, fabs(x[i] - orig[i] * (double)max_norm / norm));
    CHECK(e <= 1e-7, "clip_by_norm: error %.3g", e);
    float after;
    CHECK_OK(ops->l2_norm(be, x, n, &after));
    CHECK(fabsf(after - max_norm) <= 1e-6f * max_norm, "clip_by_norm: norm %g after, want %g",
          (double)after, (double)max_norm);
    /* each of these leaves x untouched */
    const float cases[][2] = {
        {2 * norm, norm}, {0, norm}, {norm, NAN}, {norm, INFINITY}, {norm, 0}};
    for (int c = 0; c < 5; c++) {
        memcpy(x, orig, sizeof(float) * n);
        CHECK_OK(ops->clip_by_norm(be, x, n, &cases[c][1], cases[c][0]));
        CHECK(memcmp(x, orig, sizeof(float) * n) == 0, "clip_by_norm changed x (max %g, norm %g)",
              (double)cases[c][0], (double)cases[c][1]);
    }
    free(x);
    free(orig);
}

/* ---- Adam against a scalar double reference ---- */

static void test_adam(float max_norm, float wd, uint64_t step0) {
    enum { n = 37, steps = 7 };
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float gnorms[steps] = {3.0f, 25.0f, INFINITY, 12.0f, 0.5f, NAN, 40.0f};
    float *p = rand_f(n, -1, 1), *m = rand_f(n, -0.1, 0.1), *v = rand_f(n, 0, 0.01),
          *g = xmalloc(sizeof(float) * n);
    double P[n], Mm[n], Vv[n];
    for (int i = 0; i < n; i++) P[i] = p[i], Mm[i] = m[i], Vv[i] = v[i];
    uint64_t step = step0;
    for (int k = 0; k < steps; k++, step++) {
        for (int i = 0; i < n; i++) g[i] = (float)unif(-2, 2);
        int32_t skip = k == 3;
        float gn = gnorms[k];
        CHECK_OK(ops->adam(be, p, g, m, v, n, lr, b1, b2, eps, wd, &gn, max_norm, &step, &skip));
        if (skip) continue;
        double t = (double)step + 1, scale = 1;
        if (max_norm > 0 && isfinite(gn) && max_norm / (double)gn < 1)
            scale = max_norm / (double)gn;
        for (int i = 0; i < n; i++) {
            double gi = g[i] * scale;
            Mm[i] = b1 * Mm[i] + (1 - (double)b1) * gi;
            Vv[i] = b2 * Vv[i] + (1 - (double)b2) * gi * gi;
            double mh = Mm[i] / (1 - pow(b1, t)), vh = Vv[i] / (1 - pow(b2, t));
            P[i] -= lr * (mh / (sqrt(vh) + eps) + wd * P[i]);
        }
    }
    double em = 0, ev = 0, ep = 0;
    for (int i = 0; i < n; i++) {
        em = maxe(em, fabs(m[i] - Mm[i]) / (fabs(Mm[i]) + 1e-3));
        ev = maxe(ev, fabs(v[i] - Vv[i]) / (fabs(Vv[i]) + 1e-6));
        ep = maxe(ep, fabs(p[i] - P[i]));
    }
    CHECK(em <= 1e-5 && ev <= 1e-5 && ep <= 2e-6,
          "adam max_norm=%g wd=%g step0=%llu: errors m %.3g v %.3g p %.3g", (double)max_norm,
          (double)wd, (unsigned long long)step0, em, ev, ep);
    /* skip leaves every buffer bit-identical */
    float *p0 = copy_of(p, n), *m0 = copy_of(m, n), *v0 = copy_of(v, n), gn = 1.0f;
    int32_t skip = 7;
    CHECK_OK(ops->adam(be, p, g, m, v, n, lr, b1, b2, eps, wd, &gn, max_norm, &step, &skip));
    CHECK(!memcmp(p, p0, sizeof p0[0] * n) && !memcmp(m, m0, sizeof m0[0] * n) &&
              !memcmp(v, v0, sizeof v0[0] * n),
          "adam with skip changed a buffer");
    CHECK(ops->adam(be, p, g, m, v, n, lr, 1.0f, b2, eps, wd, &gn, max_norm, &step, NULL) ==
              DQN_ERR_ARG,
          "adam accepted beta1 = 1");
    free(p);
    free(m);
    free(v);
    free(g);
    free(p0);
    free(m0);
    free(v0);
}

/* ---- target network updates ---- */

static void test_target_update(void) {
    enum { n = 45 };
    float *src = rand_f(n, -1, 1), *dst = rand_f(n, -1, 1), *orig = copy_of(dst, n);
    for (uint64_t step = 0; step < 7; step++) {
        CHECK_OK(ops->target_update(be, dst, src, n, 3, 0.5f, &step));
        int copy = (step + 1) % 3 == 0;
        CHECK(memcmp(dst, copy ? src : orig, sizeof(float) * n) == 0,
              "target_update period 3 at step %llu", (unsigned long long)step);
        memcpy(dst, orig, sizeof(float) * n);
    }
    uint64_t step = 11;
    CHECK_OK(ops->target_update(be, dst, src, n, 0, 0.05f, &step));
    double e = 0;
    for (int i = 0; i < n; i++) e = maxe(e, fabs(dst[i] - (0.05 * src[i] + 0.95 * orig[i])));
    CHECK(e <= 2e-7, "target_update Polyak: error %.3g", e);
    CHECK(ops->target_update(be, dst, src, n, -1, 0.05f, &step) == DQN_ERR_ARG,
          "target_update accepted period -1");
    uint64_t counter = 41;
    CHECK_OK(ops->step_incr(be, &counter));
    CHECK(counter == 42, "step_incr: %llu", (unsigned long long)counter);
    free(src);
    free(dst);
    free(orig);
}

/* ---- random numbers ---- */

static void test_rand(void) {
    static const struct {
        uint64_t seed;
        uint32_t stream;
        uint64_t step, stride;
        size_t n;
    } cases[] = {{1234, DQN_STREAM_TAU_ONLINE, 0, 0, 1}, {42, DQN_STREAM_REPLAY, 3, 1000, 1001},
                 {7, DQN_STREAM_TAU_TARGET, 5, 13, 3},   {7, DQN_STREAM_TAU_TARGET, 5, 13, 6},
                 {~0ull, 99, 1ull << 40, 4097, 17},      {0, DQN_STREAM_EXPLORE, 2, 3, 4}};
    float u[1001];
    int32_t idx[1001];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint64_t step = cases[c].step, base = step * cases[c].stride;
        uint32_t size = 1 + (uint32_t)(c * 977);
        CHECK_OK(ops->rand_uniform(be, u, cases[c].n, cases[c].seed, cases[c].stream, &step,
                                   cases[c].stride));
        CHECK_OK(ops->rand_index(be, idx, cases[c].n, cases[c].seed, cases[c].stream, &step,
                                 cases[c].stride, &size));
        int same = 1, in_range = 1;
        for (size_t j = 0; j < cases[c].n; j++) {
            same &= u[j] == dqn_philox_uniform(cases[c].seed, cases[c].stream, base + j);
            same &= (uint32_t)idx[j] ==
                    dqn_philox_below(cases[c].seed, cases[c].stream, base + j, size);
            in_range &= u[j] > 0.0f && u[j] < 1.0f && idx[j] >= 0 && (uint32_t)idx[j] < size;
        }
        CHECK(same, "rand case %zu: differs from dqn_philox_*", c);
        CHECK(in_range, "rand case %zu: out of range", c);
    }
    /* rough uniformity: chi-square over 16 bins, 15 degrees of freedom (0.999 quantile 37.7) */
    enum { n = 160000, bins = 16 };
    float *big = xmalloc(sizeof(float) * n);
    int32_t *bidx = xmalloc(sizeof(int32_t) * n);
    uint64_t step = 9;
    uint32_t size = bins;
    CHECK_OK(ops->rand_uniform(be, big, n, 2024, DQN_STREAM_TAU_ACT, &step, n));
    CHECK_OK(ops->rand_index(be, bidx, n, 2024, DQN_STREAM_REPLAY, &step, n, &size));
    double hu[bins] = {0}, hi[bins] = {0}, chi_u = 0, chi_i = 0, mean = 0;
    for (int j = 0; j < n; j++) {
        hu[(int)((double)big[j] * bins)]++;
        hi[bidx[j]]++;
        mean += big[j] / n;
    }
    for (int b = 0; b < bins; b++) {
        chi_u += pow(hu[b] - n / bins, 2) / (n / bins);
        chi_i += pow(hi[b] - n / bins, 2) / (n / bins);
    }
    CHECK(chi_u < 37.7 && chi_i < 37.7 && fabs(mean - 0.5) < 0.005,
          "rand uniformity: chi2 uniform %.1f, index %.1f, mean %.4f", chi_u, chi_i, mean);
    uint32_t zero = 0;
    CHECK(ops->rand_index(be, bidx, 4, 1, 1, &step, 1, &zero) == DQN_ERR_ARG,
          "rand_index accepted size 0");
    free(big);
    free(bidx);
}

/* ---- gathers ---- */

static void test_gather(void) {
    enum { rows = 10, len = 3, n = 5 };
    float src[rows * len], dst[n * len];
    int32_t isrc[rows * len], idst[n * len], idx[n] = {3, 0, 9, 3, 7};
    for (int i = 0; i < rows * len; i++)
        src[i] = (float)unif(-1, 1), isrc[i] = (int32_t)(i * 31 - 100);
    CHECK_OK(ops->gather_f32(be, src, idx, dst, n, len));
    CHECK_OK(ops->gather_i32(be, isrc, idx, idst, n, len));
    int ok = 1;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < len; k++)
            ok &= dst[j * len + k] == src[idx[j] * len + k] &&
                  idst[j * len + k] == isrc[idx[j] * len + k];
    CHECK(ok, "gather rows differ");
    idx[2] = -1;
    CHECK(ops->gather_f32(be, src, idx, dst, n, len) == DQN_ERR_ARG, "gather accepted index -1");
}

/* ---- argument errors name the op ---- */

/* ---- fused ops: each equals the unfused ops it stands for, bit for bit ---- */

static int same_bytes(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void test_linear_act(int M, int K, int N) {
    float *X = rand_f((size_t)M * K, -1, 1), *W = rand_f((size_t)N * K, -1, 1);
    float *b = rand_f((size_t)N, -0.5, 0.5);
    float *want = poisoned((size_t)M * N), *got = poisoned((size_t)M * N);
    size_t n = (size_t)M * N, zeros = 0;
    for (int bias = 0; bias <= 1; bias++) {
        const float *bb = bias ? b : NULL;
        CHECK_OK(ops->linear_fwd(be, X, W, bb, want, M, K, N));
        CHECK_OK(ops->linear_act_fwd(be, X, W, bb, got, M, K, N, DQN_ACT_NONE));
        CHECK(same_bytes(got, want, n * sizeof *got), "linear_act_fwd none %dx%dx%d bias %d differs",
              M, K, N, bias);
        CHECK_OK(ops->relu_fwd(be, want, want, n));
        CHECK_OK(ops->linear_act_fwd(be, X, W, bb, got, M, K, N, DQN_ACT_RELU));
        CHECK(same_bytes(got, want, n * sizeof *got), "linear_act_fwd relu %dx%dx%d bias %d differs",
              M, K, N, bias);
        for (size_t i = 0; i < n; i++) zeros += got[i] == 0.0f;
        /* ELU (the GRN's first layer): linear_fwd then elu_fwd, bit for bit */
        CHECK_OK(ops->linear_fwd(be, X, W, bb, want, M, K, N));
        CHECK_OK(ops->elu_fwd(be, want, want, n));
        CHECK_OK(ops->linear_act_fwd(be, X, W, bb, got, M, K, N, DQN_ACT_ELU));
        CHECK(same_bytes(got, want, n * sizeof *got), "linear_act_fwd elu %dx%dx%d bias %d differs",
              M, K, N, bias);
        size_t neg = 0;
        for (size_t i = 0; i < n; i++) neg += got[i] < 0.0f && got[i] > -1.0f;
        CHECK(neg > 0 && neg < n, "linear_act_fwd: elu gave %zu of %zu in (-1, 0)", neg, n);
    }
    CHECK(zeros > 0 && zeros < 2 * n, "linear_act_fwd: relu clipped %zu of %zu", zeros, 2 * n);
    CHECK(ops->linear_act_fwd(be, X, W, b, got, M, K, N, (dqn_act)7) == DQN_ERR_ARG,
          "linear_act_fwd accepted act 7");
    free(X); free(W); free(b); free(want); free(got);
}

static void test_sample_batch(int cap, int size, int B, int obs, int D, uint64_t step) {
    float *o = rand_f((size_t)cap * obs, -1, 1), *no = rand_f((size_t)cap * obs, -1, 1);
    float *R = rand_f((size_t)cap, -1, 1), *dc = rand_f((size_t)cap, 0, 1);
    int32_t *act = xmalloc((size_t)cap * D * sizeof *act);
    for (size_t i = 0; i < (size_t)cap * D; i++) act[i] = below(1000);
    uint32_t sz = (uint32_t)size;
    const dqn_sample_src src = {o, no, R, dc, act, &sz, obs, D, NULL};
    int32_t *idx[2], *a[2];
    float *x[2], *xn[2], *r[2], *d[2];
    for (int k = 0; k < 2; k++) {
        idx[k] = xmalloc((size_t)B * sizeof(int32_t));
        a[k] = xmalloc((size_t)B * D * sizeof(int32_t));
        x[k] = poisoned((size_t)B * obs);
        xn[k] = poisoned((size_t)B * obs);
        r[k] = poisoned((size_t)B);
        d[k] = poisoned((size_t)B);
    }
    uint64_t seed = 77;
    CHECK_OK(ops->rand_index(be, idx[0], (size_t)B, seed, DQN_STREAM_REPLAY, &step, (uint64_t)B, &sz));
    CHECK_OK(ops->gather_f32(be, o, idx[0], x[0], B, obs));
    CHECK_OK(ops->gather_f32(be, no, idx[0], xn[0], B, obs));
    CHECK_OK(ops->gather_i32(be, act, idx[0], a[0], B, D));
    CHECK_OK(ops->gather_f32(be, R, idx[0], r[0], B, 1));
    CHECK_OK(ops->gather_f32(be, dc, idx[0], d[0], B, 1));
    const dqn_sample_dst dst = {idx[1], a[1], x[1], xn[1], r[1], d[1]};
    CHECK_OK(ops->sample_batch(be, &src, &dst, B, seed, &step));
    int ok = same_bytes(idx[0], idx[1], (size_t)B * 4) && same_bytes(a[0], a[1], (size_t)B * D * 4) &&
             same_bytes(x[0], x[1], (size_t)B * obs * 4) && same_bytes(xn[0], xn[1], (size_t)B * obs * 4) &&
             same_bytes(r[0], r[1], (size_t)B * 4) && same_bytes(d[0], d[1], (size_t)B * 4);
    CHECK(ok, "sample_batch (B %d, obs %d, D %d, step %llu) differs from rand_index + gathers", B,
          obs, D, (unsigned long long)step);
    /* the indices are the spec's draws, all below the filled size */
    for (int j = 0; j < B; j++)
        ok &= idx[1][j] == (int32_t)dqn_philox_below(seed, DQN_STREAM_REPLAY, step * (uint64_t)B + (uint64_t)j, sz);
    CHECK(ok, "sample_batch indices are not philox_below(step * B + j)");
    free(o); free(no); free(R); free(dc); free(act);
    for (int k = 0; k < 2; k++) {
        free(idx[k]); free(a[k]); free(x[k]); free(xn[k]); free(r[k]); free(d[k]);
    }
}

static void test_rand_uniform_multi(uint64_t step) {
    const size_t n[3] = {96, 101, 7};
    const uint32_t st[3] = {DQN_STREAM_TAU_ONLINE, DQN_STREAM_TAU_TARGET, DQN_STREAM_TAU_SELECT};
    float *want[3], *got[3];
    for (int k = 0; k < 3; k++) {
        want[k] = poisoned(n[k]);
        got[k] = poisoned(n[k]);
        CHECK_OK(ops->rand_uniform(be, want[k], n[k], 9, st[k], &step, n[k]));
    }
    const dqn_draws dr = {3, {got[0], got[1], got[2]}, {n[0], n[1], n[2]}, {st[0], st[1], st[2]},
                          {n[0], n[1], n[2]}};
    CHECK_OK(ops->rand_uniform_multi(be, &dr, 9, &step));
    for (int k = 0; k < 3; k++)
        CHECK(same_bytes(got[k], want[k], n[k] * sizeof(float)), "rand_uniform_multi draw %d differs", k);
    const dqn_draws bad = {DQN_MAX_DRAWS + 1, {0}, {0}, {0}, {0}};
    CHECK(ops->rand_uniform_multi(be, &bad, 9, &step) == DQN_ERR_ARG,
          "rand_uniform_multi accepted count %d", DQN_MAX_DRAWS + 1);
    for (int k = 0; k < 3; k++) {
        free(want[k]);
        free(got[k]);
    }
}

/* ---- fused ops of issue 3 ---- */

/* relu of uniform(-1, 1): a post-ReLU hidden layer with some exact zeros */
static float *rand_relu(size_t n) {
    float *p = rand_f(n, -1, 1);
    for (size_t i = 0; i < n; i++) p[i] = p[i] > 0 ? p[i] : 0.0f;
    return p;
}

/* heads_fwd against naive double loops over the stacked hidden layer (each output within 1e-6
 * of its |terms| sum), Z against dueling_fwd of its own V and Adv; l2_norm2 against l2_norm;
 * heads_bwd against naive loops on the gradients clip_by_norm scales, dV and dAdv untouched. */
static void test_heads_fused(int R, int H, int D, const int *sizes, int clip) {
    dqn_branches br;
    dqn_branches_init(&br, D, sizes);
    const int A = br.A, H2 = 2 * H;
    float *hva = rand_relu((size_t)R * H2), *Wv2 = rand_f(H, -1, 1), *bv2 = rand_f(1, -1, 1);
    float *Wa2 = rand_f((size_t)A * H, -1, 1), *ba2 = rand_f(A, -1, 1);
    float *V = poisoned(R), *Adv = poisoned((size_t)R * A), *Z = poisoned((size_t)R * A);
    float *Zw = poisoned((size_t)R * A);
    size_t most = (size_t)R * H2 > (size_t)(A + 1) * H ? (size_t)R * H2 : (size_t)(A + 1) * H;
    double *want = xmalloc(sizeof(double) * most), *scale = xmalloc(sizeof(double) * most);
    CHECK_OK(ops->heads_fwd(be, hva, Wv2, bv2, Wa2, ba2, V, Adv, Z, R, H, &br));
    for (int r = 0; r < R; r++) {
        double s = bv2[0], a = fabs(bv2[0]);
        for (int j = 0; j < H; j++) s += (double)hva[(size_t)r * H2 + j] * Wv2[j],
                                    a += fabs((double)hva[(size_t)r * H2 + j] * Wv2[j]);
        want[r] = s, scale[r] = a;
    }
    double e = worst_err(V, want, scale, R, 1e-30);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < A; c++) {
            double s = ba2[c], a = fabs(ba2[c]);
            for (int j = 0; j < H; j++) {
                double t = (double)hva[(size_t)r * H2 + H + j] * Wa2[(size_t)c * H + j];
                s += t, a += fabs(t);
            }
            want[(size_t)r * A + c] = s, scale[(size_t)r * A + c] = a;
        }
    e = maxe(e, worst_err(Adv, want, scale, (size_t)R * A, 1e-30));
    CHECK(e <= 1e-6, "heads_fwd R=%d H=%d A=%d: V/Adv error %.3g of the |terms| sum", R, H, A, e);
    CHECK_OK(ops->dueling_fwd(be, V, Adv, Zw, R, &br));
    CHECK(same_bytes(Z, Zw, (size_t)R * A * sizeof *Z), "heads_fwd: Z is not dueling_fwd(V, Adv)");

    float *dV = rand_f(R, -1, 1), *dAdv = rand_f((size_t)R * A, -1, 1), norms[2] = {NAN, NAN};
    float n0 = NAN, n1 = NAN;
    CHECK_OK(ops->l2_norm2(be, dV, R, dAdv, (size_t)R * A, norms, NULL));
    CHECK_OK(ops->l2_norm(be, dV, R, &n0));
    CHECK_OK(ops->l2_norm(be, dAdv, (size_t)R * A, &n1));
    CHECK(norms[0] == n0 && norms[1] == n1, "l2_norm2 differs from two l2_norm");
    /* clip 1: both norms clipped; 2: only the advantage's (the bound between them); 0: off */
    float max_norm = clip == 0 ? 0.0f : clip == 1 ? 0.5f * fminf(n0, n1) : 0.5f * (n0 + n1);
    if (clip == 2 && n0 > n1) max_norm = 0.5f * (n0 + n1);
    float *gV = copy_of(dV, R), *gA = copy_of(dAdv, (size_t)R * A);
    float *dV0 = copy_of(dV, R), *dA0 = copy_of(dAdv, (size_t)R * A);
    if (clip) {
        CHECK_OK(ops->clip_by_norm(be, gV, R, &norms[0], max_norm));
        CHECK_OK(ops->clip_by_norm(be, gA, (size_t)R * A, &norms[1], max_norm));
    }
    float *dhva = poisoned((size_t)R * H2), *dWv2 = poisoned(H), *dbv2 = poisoned(1);
    float *dWa2 = poisoned((size_t)A * H), *dba2 = poisoned(A), *dbva = poisoned((size_t)H2);
    CHECK_OK(ops->heads_bwd(be, hva, Wv2, Wa2, dV, dAdv, clip ? norms : NULL, max_norm, dhva, dbva,
                            dWv2, dbv2, dWa2, dba2, R, H, A));
    CHECK(same_bytes(dV, dV0, (size_t)R * 4) && same_bytes(dAdv, dA0, (size_t)R * A * 4),
          "heads_bwd wrote dV or dAdv");
    for (int r = 0; r < R; r++)
        for (int j = 0; j < H; j++) {
            size_t i = (size_t)r * H2 + j;
            double on = hva[i] > 0, ona = hva[i + H] > 0, s = 0, a = 0;
            want[i] = (double)gV[r] * Wv2[j] * on, scale[i] = fabs(want[i]);
            for (int c = 0; c < A; c++) {
                double t = (double)gA[(size_t)r * A + c] * Wa2[(size_t)c * H + j];
                s += t, a += fabs(t);
            }
            want[i + H] = s * ona, scale[i + H] = a * ona;
        }
    double eb = worst_err(dhva, want, scale, (size_t)R * H2, 1e-30);
    for (int o = 0; o <= A; o++)
        for (int j = 0; j < H; j++) {
            double s = 0, a = 0;
            for (int r = 0; r < R; r++) {
                double g = o == 0 ? gV[r] : gA[(size_t)r * A + o - 1];
                double t = g * hva[(size_t)r * H2 + (o == 0 ? 0 : H) + j];
                s += t, a += fabs(t);
            }
            want[(size_t)o * H + j] = s, scale[(size_t)o * H + j] = a;
        }
    eb = maxe(eb, worst_err(dWv2, want, scale, H, 1e-30));
    eb = maxe(eb, worst_err(dWa2, want + H, scale + H, (size_t)A * H, 1e-30));
    for (int o = 0; o <= A; o++) {
        double s = 0, a = 0;
        for (int r = 0; r < R; r++) {
            double g = o == 0 ? gV[r] : gA[(size_t)r * A + o - 1];
            s += g, a += fabs(g);
        }
        want[o] = s, scale[o] = a;
    }
    eb = maxe(eb, worst_err(dbv2, want, scale, 1, 1e-30));
    eb = maxe(eb, worst_err(dba2, want + 1, scale + 1, A, 1e-30));
    for (int c = 0; c < H2; c++) {   /* dbva: the column sums of dhva as written */
        double s = 0, a = 0;
        for (int r = 0; r < R; r++) s += dhva[(size_t)r * H2 + c], a += fabs(dhva[(size_t)r * H2 + c]);
        want[c] = s, scale[c] = a;
    }
    eb = maxe(eb, worst_err(dbva, want, scale, H2, 1e-30));
    CHECK(eb <= 1e-6, "heads_bwd R=%d H=%d A=%d clip %d: error %.3g of the |terms| sum", R, H, A,
          clip, eb);
    CHECK(ops->heads_bwd(be, hva, Wv2, Wa2, dV, dAdv, NULL, 1.0f, dhva, NULL, dWv2, dbv2, dWa2,
                         dba2, R, H, A) == DQN_ERR_ARG,
          "heads_bwd accepted a clip without norms");
    printf("  heads fused R=%-4d H=%-3d A=%-2d clip %d ok\n", R, H, A, clip);
    float *bufs[] = {hva, Wv2, bv2, Wa2, ba2, V, Adv, Z, Zw, dV, dAdv, gV, gA, dV0, dA0, dhva,
                     dWv2, dbv2, dWa2, dba2, dbva};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) free(bufs[k]);
    free(want);
    free(scale);
}

/* the GRN tail's fused ops equal the unfused pairs bit for bit */
static void test_grn_fused(int M, int d) {
    size_t n = (size_t)M * d;
    float *h = rand_f(n, -2, 2), *g = rand_f(2 * n, -3, 3), *gamma = rand_f(d, 0.5, 1.5);
    float *beta = rand_f(d, -0.5, 0.5), *dy = rand_f(n, -1, 1);
    float *r[2], *y[2], *mean[2], *rstd[2], *dres[2], *dg[2], *dgam[2], *dbet[2];
    for (int k = 0; k < 2; k++) {
        r[k] = poisoned(n), y[k] = poisoned(n), mean[k] = poisoned(M), rstd[k] = poisoned(M);
        dres[k] = poisoned(n), dg[k] = poisoned(2 * n), dgam[k] = poisoned(d), dbet[k] = poisoned(d);
    }
    CHECK_OK(ops->gate_fwd(be, h, g, r[0], M, d));
    CHECK_OK(ops->layernorm_fwd(be, r[0], gamma, beta, y[0], mean[0], rstd[0], M, d));
    CHECK_OK(ops->grn_gate_ln_fwd(be, h, g, gamma, beta, r[1], y[1], mean[1], rstd[1], M, d));
    CHECK(same_bytes(r[0], r[1], n * 4) && same_bytes(y[0], y[1], n * 4) &&
              same_bytes(mean[0], mean[1], (size_t)M * 4) && same_bytes(rstd[0], rstd[1], (size_t)M * 4),
          "grn_gate_ln_fwd M=%d d=%d differs from gate_fwd + layernorm_fwd", M, d);
    float *dr = poisoned(n);
    CHECK_OK(ops->layernorm_bwd(be, r[0], gamma, mean[0], rstd[0], dy, dr, dgam[0], dbet[0], M, d));
    CHECK_OK(ops->gate_bwd(be, g, dr, dres[0], dg[0], M, d));
    CHECK_OK(ops->grn_ln_gate_bwd(be, r[0], gamma, mean[0], rstd[0], g, dy, dres[1], dg[1], dgam[1],
                                  dbet[1], M, d, NULL));
    CHECK(same_bytes(dres[0], dres[1], n * 4) && same_bytes(dg[0], dg[1], 2 * n * 4) &&
              same_bytes(dgam[0], dgam[1], (size_t)d * 4) && same_bytes(dbet[0], dbet[1], (size_t)d * 4),
          "grn_ln_gate_bwd M=%d d=%d differs from layernorm_bwd + gate_bwd", M, d);
    CHECK(ops->grn_ln_gate_bwd(be, r[0], gamma, mean[0], rstd[0], g, dy, dy, dg[1], dgam[1],
                               dbet[1], M, d, NULL) == DQN_ERR_ARG,
          "grn_ln_gate_bwd accepted dres == dy");
    for (int k = 0; k < 2; k++) {
        free(r[k]); free(y[k]); free(mean[k]); free(rstd[k]);
        free(dres[k]); free(dg[k]); free(dgam[k]); free(dbet[k]);
    }
    free(h); free(g); free(gamma); free(beta); free(dy); free(dr);
}

/* iqn_embed_fwd equals cos_embed, linear_act_fwd (ReLU) and iqn_fwd bit for bit, every row of C
 * and phi written whatever keep says */
static void test_iqn_embed(int B, int T, int d, int n_cos, int keep, int with_cat) {
    const size_t R = (size_t)B * T, nz = R * d;
    float *tau = rand_f(R, 0, 1), *W = rand_f((size_t)d * n_cos, -0.3, 0.3);
    float *b = rand_f((size_t)d, -0.5, 0.5), *h = rand_f((size_t)B * d, -1, 1);
    float *C[2], *phi[2], *z[2], *cat[2];
    for (int k = 0; k < 2; k++) {
        C[k] = poisoned(R * n_cos), phi[k] = poisoned(nz), z[k] = poisoned(nz);
        cat[k] = with_cat ? poisoned(2 * nz) : NULL;
    }
    CHECK_OK(ops->cos_embed(be, tau, C[0], (int)R, n_cos));
    CHECK_OK(ops->linear_act_fwd(be, C[0], W, b, phi[0], (int)R, n_cos, d, DQN_ACT_RELU));
    CHECK_OK(ops->iqn_fwd(be, h, phi[0], z[0], cat[0], B, T, d));
    CHECK_OK(ops->iqn_embed_fwd(be, tau, W, b, h, C[1], phi[1], z[1], cat[1], B, T, n_cos, d,
                                keep * T, NULL));
    CHECK(same_bytes(C[0], C[1], R * n_cos * 4) && same_bytes(phi[0], phi[1], nz * 4) &&
              same_bytes(z[0], z[1], nz * 4) && (!with_cat || same_bytes(cat[0], cat[1], 8 * nz)),
          "iqn_embed_fwd B=%d T=%d d=%d n_cos=%d keep=%d differs from its three ops", B, T, d,
          n_cos, keep);
    CHECK(ops->iqn_embed_fwd(be, tau, W, b, h, C[1], phi[1], z[1], NULL, B, T, n_cos, d,
                             B * T + 1, NULL) == DQN_ERR_ARG,
          "iqn_embed_fwd accepted keep past its rows");
    for (int k = 0; k < 2; k++) {
        free(C[k]); free(phi[k]); free(z[k]); free(cat[k]);
    }
    free(tau); free(W); free(b); free(h);
}

/* the IQN mixing's fused ops equal the unfused sequences bit for bit */
static void test_iqn_fused(int B, int T, int d) {
    size_t nh = (size_t)B * d, nz = nh * T;
    float *h = rand_f(nh, -1, 1), *phi = rand_relu(nz), *dcat = rand_f(2 * nz, -1, 1);
    float *z[2], *cat[2], *dz[2], *dh[2], *dphi[2];
    for (int k = 0; k < 2; k++) {
        z[k] = poisoned(nz), cat[k] = poisoned(2 * nz), dz[k] = poisoned(nz);
        dh[k] = poisoned(nh), dphi[k] = poisoned(nz);
    }
    CHECK_OK(ops->mul_bcast_fwd(be, h, phi, z[0], B, T, d));
    CHECK_OK(ops->concat_bcast_fwd(be, z[0], h, cat[0], B, T, d));
    CHECK_OK(ops->iqn_fwd(be, h, phi, z[1], cat[1], B, T, d));
    CHECK(same_bytes(z[0], z[1], nz * 4) && same_bytes(cat[0], cat[1], 2 * nz * 4),
          "iqn_fwd B=%d T=%d d=%d differs from mul_bcast_fwd + concat_bcast_fwd", B, T, d);
    float *z2 = poisoned(nz);
    CHECK_OK(ops->iqn_fwd(be, h, phi, z2, NULL, B, T, d));
    CHECK(same_bytes(z[0], z2, nz * 4), "iqn_fwd without cat differs");
    /* with the bottleneck: fill, concat_bcast_bwd, mul_bcast_bwd, axpy, relu_bwd */
    float *dh2 = poisoned(nh);
    CHECK_OK(ops->fill(be, dh2, 0.0f, nh));
    CHECK_OK(ops->concat_bcast_bwd(be, dcat, dz[0], dh2, B, T, d));
    CHECK_OK(ops->mul_bcast_bwd(be, h, phi, dz[0], dh[0], dphi[0], B, T, d));
    CHECK_OK(ops->axpy(be, 1.0f, dh2, dh[0], nh));
    CHECK_OK(ops->relu_bwd(be, phi, dphi[0], dphi[0], nz));
    CHECK_OK(ops->iqn_bwd(be, dcat, h, phi, dz[1], dh[1], dphi[1], NULL, B, T, d, NULL));
    CHECK(same_bytes(dz[0], dz[1], nz * 4) && same_bytes(dh[0], dh[1], nh * 4) &&
              same_bytes(dphi[0], dphi[1], nz * 4),
          "iqn_bwd B=%d T=%d d=%d (dcat) differs from the unfused sequence", B, T, d);
    /* with phi's bias gradient: the same outputs, and linear_bwd's db of dphi bit for bit */
    float *db[2] = {poisoned((size_t)d), poisoned((size_t)d)}, *dphi3 = poisoned(nz);
    float *cosx = rand_f((size_t)B * T * 3, -1, 1), *w3 = rand_f((size_t)d * 3, -1, 1);
    float *dw3 = poisoned((size_t)d * 3);
    CHECK_OK(ops->iqn_bwd(be, dcat, h, phi, dz[1], dh[1], dphi3, db[1], B, T, d, NULL));
    CHECK_OK(ops->linear_bwd(be, cosx, w3, dphi3, NULL, dw3, db[0], B * T, 3, d));
    CHECK(same_bytes(dphi[0], dphi3, nz * 4) && same_bytes(db[0], db[1], (size_t)d * 4),
          "iqn_bwd B=%d T=%d d=%d: dphi_b differs from linear_bwd's column sum of dphi", B, T, d);
    free(db[0]); free(db[1]); free(dphi3); free(cosx); free(w3); free(dw3);
    /* without: mul_bcast_bwd, relu_bwd, dz the input */
    CHECK_OK(ops->mul_bcast_bwd(be, h, phi, z[0], dh[0], dphi[0], B, T, d));
    CHECK_OK(ops->relu_bwd(be, phi, dphi[0], dphi[0], nz));
    CHECK_OK(ops->iqn_bwd(be, NULL, h, phi, z[0], dh[1], dphi[1], NULL, B, T, d, NULL));
    CHECK(same_bytes(dh[0], dh[1], nh * 4) && same_bytes(dphi[0], dphi[1], nz * 4) &&
              same_bytes(z[0], z[1], nz * 4),
          "iqn_bwd B=%d T=%d d=%d (no dcat) differs from mul_bcast_bwd + relu_bwd", B, T, d);
    for (int k = 0; k < 2; k++) {
        free(z[k]); free(cat[k]); free(dz[k]); free(dh[k]); free(dphi[k]);
    }
    free(h); free(phi); free(dcat); free(z2); free(dh2);
}

/* adam_target_step equals adam, target_update, step_incr bit for bit: hard copy due and not
 * due, Polyak, skip; a refused argument changes nothing */
static void test_adam_target_step(void) {
    enum { n = 53 };
    const struct { uint64_t step; int period; float tau; int32_t skip; } cases[] = {
        {3, 4, 0.0f, 0}, {4, 4, 0.0f, 0}, {9, 0, 0.05f, 0}, {7, 2, 0.0f, 1}, {0, 0, 0.5f, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *p = rand_f(n, -1, 1), *g = rand_f(n, -2, 2), *m = rand_f(n, -0.1, 0.1);
        float *v = rand_f(n, 0, 0.01), *t = rand_f(n, -1, 1), gn = 14.0f;
        float *p2 = copy_of(p, n), *m2 = copy_of(m, n), *v2 = copy_of(v, n), *t2 = copy_of(t, n);
        uint64_t s1 = cases[c].step, s2 = cases[c].step;
        int32_t skip = cases[c].skip;
        CHECK_OK(ops->adam(be, p, g, m, v, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, &gn, 10.0f, &s1, &skip));
        CHECK_OK(ops->target_update(be, t, p, n, cases[c].period, cases[c].tau, &s1));
        CHECK_OK(ops->step_incr(be, &s1));
        CHECK_OK(ops->adam_target_step(be, p2, g, m2, v2, t2, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f,
                                       &gn, 10.0f, cases[c].period, cases[c].tau, &s2, &skip));
        CHECK(s1 == s2 && same_bytes(p, p2, n * 4) && same_bytes(m, m2, n * 4) &&
                  same_bytes(v, v2, n * 4) && same_bytes(t, t2, n * 4),
              "adam_target_step case %zu differs from adam + target_update + step_incr", c);
        CHECK(ops->adam_target_step(be, p2, g, m2, v2, t2, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, &gn,
                                    10.0f, 0, 1.5f, &s2, NULL) == DQN_ERR_ARG,
              "adam_target_step accepted tau 1.5");
        CHECK(s1 == s2 && same_bytes(p, p2, n * 4) && same_bytes(t, t2, n * 4),
              "a refused adam_target_step changed something");
        free(p); free(g); free(m); free(v); free(t); free(p2); free(m2); free(v2); free(t2);
    }
}

/* sample_draws equals sample_batch then rand_uniform_multi */
static void test_sample_draws(int B, int obs, int D, uint64_t step) {
    int cap = 3 * B;
    float *o = rand_f((size_t)cap * obs, -1, 1), *no = rand_f((size_t)cap * obs, -1, 1);
    float *R = rand_f(cap, -1, 1), *dc = rand_f(cap, 0, 1);
    int32_t *act = xmalloc((size_t)cap * D * sizeof *act);
    for (size_t i = 0; i < (size_t)cap * D; i++) act[i] = below(7);
    uint32_t sz = (uint32_t)(cap - 5);
    const dqn_sample_src src = {o, no, R, dc, act, &sz, obs, D, NULL};
    int32_t *idx[2], *a[2];
    float *x[2], *xn[2], *r[2], *d[2], *t[2][3];
    const size_t tn[3] = {(size_t)B * 8, (size_t)B * 5, (size_t)B * 8};
    for (int k = 0; k < 2; k++) {
        idx[k] = xmalloc((size_t)B * 4), a[k] = xmalloc((size_t)B * D * 4);
        x[k] = poisoned((size_t)B * obs), xn[k] = poisoned((size_t)B * obs);
        r[k] = poisoned(B), d[k] = poisoned(B);
        for (int q = 0; q < 3; q++) t[k][q] = poisoned(tn[q]);
    }
    for (int k = 0; k < 2; k++) {
        const dqn_sample_dst dst = {idx[k], a[k], x[k], xn[k], r[k], d[k]};
        const dqn_draws dr = {3, {t[k][0], t[k][1], t[k][2]}, {tn[0], tn[1], tn[2]},
                              {DQN_STREAM_TAU_ONLINE, DQN_STREAM_TAU_TARGET, DQN_STREAM_TAU_SELECT},
                              {tn[0], tn[1], tn[2]}};
        if (k == 0) {
            CHECK_OK(ops->sample_batch(be, &src, &dst, B, 5, &step));
            CHECK_OK(ops->rand_uniform_multi(be, &dr, 5, &step));
        } else {
            CHECK_OK(ops->sample_draws(be, &src, &dst, B, &dr, 5, &step));
        }
    }
    int ok = same_bytes(idx[0], idx[1], (size_t)B * 4) && same_bytes(a[0], a[1], (size_t)B * D * 4) &&
             same_bytes(x[0], x[1], (size_t)B * obs * 4) && same_bytes(xn[0], xn[1], (size_t)B * obs * 4) &&
             same_bytes(r[0], r[1], (size_t)B * 4) && same_bytes(d[0], d[1], (size_t)B * 4);
    for (int q = 0; q < 3; q++) ok &= same_bytes(t[0][q], t[1][q], tn[q] * 4);
    CHECK(ok, "sample_draws (B %d, step %llu) differs from sample_batch + rand_uniform_multi", B,
          (unsigned long long)step);
    free(o); free(no); free(R); free(dc); free(act);
    for (int k = 0; k < 2; k++) {
        free(idx[k]); free(a[k]); free(x[k]); free(xn[k]); free(r[k]); free(d[k]);
        for (int q = 0; q < 3; q++) free(t[k][q]);
    }
}

/* linear_ld_fwd / linear_ld_bwd on a column block of a wider matrix (ldw > K) against naive
 * loops; the columns of dW's rows past K are left alone, and acc_dx adds to dX */
/* want = act(X W^T + b) in double, W's rows ldw apart; scale = the sum of |terms| (the error's
 * yardstick) */
static void ref_linear_ld(const float *X, const float *Wf, int ldw, const float *b, int M, int K,
                          int N, dqn_act act, double *want, double *scale) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = b[n], a = fabs(b[n]);
            for (int k = 0; k < K; k++) {
                double t = (double)X[(size_t)m * K + k] * Wf[(size_t)n * ldw + k];
                s += t, a += fabs(t);
            }
            want[(size_t)m * N + n] = act == DQN_ACT_RELU  ? (s > 0 ? s : 0)
                                      : act == DQN_ACT_ELU ? (s > 0 ? s : expm1(s))
                                                           : s;
            scale[(size_t)m * N + n] = a;
        }
}

static void test_linear_ld(int M, int K, int N, int ldw) {
    float *X = rand_f((size_t)M * K, -1, 1), *Wf = rand_f((size_t)N * ldw, -1, 1);
    float *b = rand_f(N, -0.5, 0.5), *dY = rand_f((size_t)M * N, -1, 1);
    float *Y = poisoned((size_t)M * N), *dX = rand_f((size_t)M * K, -1, 1);
    float *dX0 = copy_of(dX, (size_t)M * K), *dWf = rand_f((size_t)N * ldw, -1, 1);
    float *dWf0 = copy_of(dWf, (size_t)N * ldw), *db = poisoned(N);
    size_t most = (size_t)M * (K > N ? K : N) + (size_t)N * K;
    double *want = xmalloc(sizeof(double) * most), *scale = xmalloc(sizeof(double) * most);
    CHECK_OK(ops->linear_ld_fwd(be, X, Wf, ldw, b, Y, M, K, N, DQN_ACT_RELU));
    ref_linear_ld(X, Wf, ldw, b, M, K, N, DQN_ACT_RELU, want, scale);
    double e = worst_err(Y, want, scale, (size_t)M * N, 1e-30);
    CHECK(e <= 1e-5, "linear_ld_fwd M=%d K=%d N=%d ldw=%d: error %.3g", M, K, N, ldw, e);
    CHECK_OK(ops->linear_ld_bwd(be, X, Wf, ldw, dY, dX, 1, dWf, db, M, K, N));
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double s = dX0[(size_t)m * K + k], a = fabs(s);
            for (int n = 0; n < N; n++) {
                double t = (double)dY[(size_t)m * N + n] * Wf[(size_t)n * ldw + k];
                s += t, a += fabs(t);
            }
            want[(size_t)m * K + k] = s, scale[(size_t)m * K + k] = a;
        }
    e = worst_err(dX, want, scale, (size_t)M * K, 1e-30);
    int kept = 1;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < ldw; k++) {
            size_t i = (size_t)n * ldw + k;
            if (k >= K) {
                kept &= dWf[i] == dWf0[i];
                continue;
            }
            double s = 0, a = 0;
            for (int m = 0; m < M; m++) {
                double t = (double)dY[(size_t)m * N + n] * X[(size_t)m * K + k];
                s += t, a += fabs(t);
            }
            e = maxe(e, fabs(dWf[i] - s) / (a + 1e-30));
        }
    for (int n = 0; n < N; n++) {
        double s = 0, a = 0;
        for (int m = 0; m < M; m++) s += dY[(size_t)m * N + n], a += fabs(dY[(size_t)m * N + n]);
        e = maxe(e, fabs(db[n] - s) / (a + 1e-30));
    }
    CHECK(e <= 1e-5 && kept, "linear_ld_bwd M=%d K=%d N=%d ldw=%d: error %.3g, other columns kept %d",
          M, K, N, ldw, e, kept);
    CHECK(ops->linear_ld_fwd(be, X, Wf, K - 1, b, Y, M, K, N, DQN_ACT_NONE) == DQN_ERR_ARG,
          "linear_ld_fwd accepted ldw < K");
    /* ELU: the same GEMM, then x > 0 ? x : expm1(x) */
    CHECK_OK(ops->linear_ld_fwd(be, X, Wf, ldw, b, Y, M, K, N, DQN_ACT_ELU));
    ref_linear_ld(X, Wf, ldw, b, M, K, N, DQN_ACT_ELU, want, scale);
    e = worst_err(Y, want, scale, (size_t)M * N, 1e-30);
    CHECK(e <= 1e-5, "linear_ld_fwd elu M=%d K=%d N=%d ldw=%d: error %.3g", M, K, N, ldw, e);
    free(X); free(Wf); free(b); free(dY); free(Y); free(dX); free(dX0); free(dWf); free(dWf0);
    free(db); free(want); free(scale);
}

/* the split bottleneck equals the concatenated one: ReLU(W_bn [z ; h] + b) two ways, and
 * relu_bwd_tausum equals relu_bwd then per-sample sums in tau order */
static void test_bn_split(int B, int T, int d, int m) {
    size_t R = (size_t)B * T, nz = R * d;
    float *z = rand_f(nz, -1, 1), *h = rand_f((size_t)B * d, -1, 1);
    float *W = rand_f((size_t)m * 2 * d, -1, 1), *b = rand_f(m, -0.5, 0.5);
    float *cat = poisoned(2 * nz), *u0 = poisoned(R * m), *u1 = poisoned(R * m), *hb = poisoned((size_t)B * m);
    CHECK_OK(ops->concat_bcast_fwd(be, z, h, cat, B, T, d));
    CHECK_OK(ops->linear_act_fwd(be, cat, W, b, u0, (int)R, 2 * d, m, DQN_ACT_RELU));
    CHECK_OK(ops->linear_ld_fwd(be, h, W + d, 2 * d, b, hb, B, d, m, DQN_ACT_NONE));
    CHECK_OK(ops->linear_ld_fwd(be, z, W, 2 * d, NULL, u1, (int)R, d, m, DQN_ACT_NONE));
    CHECK_OK(ops->bcast_add_act(be, hb, u1, B, T, m, DQN_ACT_RELU));
    double e = 0;
    for (size_t i = 0; i < R * m; i++) e = maxe(e, fabs(u1[i] - u0[i]));
    CHECK(e <= 1e-5 * d, "split bottleneck B=%d T=%d d=%d m=%d: max |split - concat| %.3g", B, T, d,
          m, e);
    float *du = rand_f(R * m, -1, 1), *du0 = copy_of(du, R * m), *dus = poisoned((size_t)B * m);
    CHECK_OK(ops->relu_bwd(be, u1, du0, du0, R * m));
    CHECK_OK(ops->relu_bwd_tausum(be, u1, du, dus, B, T, m, NULL));
    int same = same_bytes(du, du0, R * m * 4);
    for (int s = 0; s < B; s++)
        for (int k = 0; k < m; k++) {
            float acc = 0.0f;
            for (int i = 0; i < T; i++) acc += du0[((size_t)s * T + i) * m + k];
            same &= dus[(size_t)s * m + k] == acc;
        }
    CHECK(same, "relu_bwd_tausum differs from relu_bwd and per-sample sums");
    free(z); free(h); free(W); free(b); free(cat); free(u0); free(u1); free(hb); free(du);
    free(du0); free(dus);
}

static void test_errors(void) {
    float x[4] = {1, 2, 3, 4}, y[4];
    CHECK(ops->linear_fwd(be, x, x, NULL, y, 0, 2, 2) == DQN_ERR_ARG, "linear_fwd accepted M = 0");
    CHECK(strstr(dqn_last_error(), "linear_fwd") != NULL, "message: %s", dqn_last_error());
    static const int sizes[] = {2, 2};
    dqn_branches br;
    dqn_branches_init(&br, 2, sizes);
    br.A = 5;
    CHECK(ops->dueling_fwd(be, x, x, y, 1, &br) == DQN_ERR_ARG, "dueling_fwd accepted A = 5");
    CHECK(strstr(dqn_last_error(), "dueling_fwd") != NULL, "message: %s", dqn_last_error());
    CHECK(ops->layernorm_fwd(be, x, x, x, y, y, y, 1, 0) == DQN_ERR_ARG,
          "layernorm_fwd accepted d = 0");
    CHECK(dqn_cpu_set_threads(0) == DQN_ERR_ARG, "set_threads accepted 0");
    CHECK_OK(dqn_cpu_set_threads(1));
    CHECK(dqn_cpu_threads() == 1, "threads: %d", dqn_cpu_threads());
}

int main(void) {
    CHECK_OK(dqn_backend_cpu_create(&be));
    if (!be) return check_finish("test_ops_ref");
    ops = be->ops;
    printf("gemm: %s\n", dqn_cpu_gemm_name());
    CHECK(strcmp(ops->name, "cpu") == 0, "backend name %s", ops->name);
    test_memory();

    /* edges of the built-in GEMM's blocks: MR 6, NR 16, MC 96, KC 256, NC 1024 */
    static const int shapes[][3] = {{1, 1, 1},     {7, 5, 3},       {6, 16, 16},    {13, 33, 17},
                                    {97, 257, 31}, {200, 70, 1030}, {300, 520, 40}, {64, 64, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        test_linear(shapes[i][0], shapes[i][1], shapes[i][2], (int)(i % 2 == 0));
    test_linear(50, 40, 30, 0);
    test_linear(50, 40, 30, 1);

    test_elementwise();
    test_layernorm(7, 5);
    test_layernorm(33, 128);
    test_layernorm(3, 513);
    test_cos_embed(64);
    test_cos_embed(13);
    test_cos_embed(3);
    test_cos_embed(128);

    static const int one[] = {4}, three[] = {3, 5, 5}, mixed[] = {1, 4, 2};
    test_q_argmax(6, 4, 1, one);
    test_q_argmax(5, 8, 3, three);
    test_q_argmax(3, 1, 3, mixed);
    for (int mode = DQN_TARGET_MEAN; mode <= DQN_TARGET_INDEPENDENT; mode++) {
        test_iqn_targets(5, 7, 1, one, (dqn_target_mode)mode);
        test_iqn_targets(4, 6, 3, three, (dqn_target_mode)mode);
        test_quantile_huber(4, 5, 6, 1, one, (dqn_target_mode)mode, 1.0f, 0);
        test_quantile_huber(4, 5, 6, 3, three, (dqn_target_mode)mode, 1.0f, 1);
        test_quantile_huber(3, 8, 4, 3, mixed, (dqn_target_mode)mode, 0.7f, 1);
        test_quantile_huber(2, 32, 32, 3, three, (dqn_target_mode)mode, 2.0f, 0);
    }

    test_l2_norm(0);
    test_l2_norm(7);
    test_l2_norm(1000003);
    test_clip_by_norm();
    test_adam(10.0f, 0.1f, 0);
    test_adam(0.0f, 0.0f, 0);
    test_adam(10.0f, 0.0f, 1000);
    test_target_update();
    test_rand();
    test_gather();
    test_linear_act(13, 33, 17);
    test_linear_act(64, 64, 64);
    test_sample_batch(50, 37, 32, 4, 1, 0);
    test_sample_batch(300, 300, 64, 9, 3, 12345);
    test_rand_uniform_multi(0);
    test_rand_uniform_multi(41);
    static const int heads1[] = {2}, heads3[] = {3, 5, 5};
    test_heads_fused(13, 7, 1, heads1, 0);
    test_heads_fused(37, 33, 3, heads3, 1);
    test_heads_fused(64, 64, 3, heads3, 2);
    test_heads_fused(5, 1, 1, heads1, 1);
    test_grn_fused(9, 21);
    test_grn_fused(33, 64);
    test_iqn_fused(3, 5, 7);
    test_iqn_fused(4, 8, 64);
    test_iqn_embed(3, 5, 7, 13, 2, 1);
    test_iqn_embed(4, 8, 64, 64, 0, 0);
    test_adam_target_step();
    test_sample_draws(32, 4, 1, 0);
    test_sample_draws(17, 9, 3, 777);
    test_linear_ld(13, 7, 5, 16);
    test_linear_ld(97, 64, 33, 128);
    test_linear_ld(8, 9, 3, 9);
    test_bn_split(3, 5, 8, 6);
    test_bn_split(4, 8, 64, 32);
    test_errors();

    ops->destroy(be);
    return check_finish("test_ops_ref");
}
