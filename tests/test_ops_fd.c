/* Every backward op of the CPU backend against central finite differences of its forward:
 * with a random projection r, L(x) = sum r * f(x) in double, and each gradient element (all of
 * them for small tensors, a random sample otherwise) is compared with
 * (L(x + h e_k) - L(x - h e_k)) / (2h). Inputs are never zero and keep away from the kinks of
 * ReLU, ELU and the quantile Huber loss by more than h. Outputs are poisoned with NaN before each
 * backward, so an element left unwritten fails; concat_bcast_bwd must accumulate into dh. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "check.h"

static dqn_backend *be;

/* ---- random inputs ---- */

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_rng.h"

static size_t below(size_t n) { return (size_t)(next_u64() % n); }

/* |x| in [lo, hi], random sign: never zero, never within lo of a kink at 0 */
static float away(double lo, double hi) {
    double m = unif(lo, hi);
    return (float)(next_u64() & 1 ? m : -m);
}

static float *alloc_f(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static float *rand_away(size_t n, double lo, double hi) {
    float *p = alloc_f(n);
    for (size_t i = 0; i < n; i++) p[i] = away(lo, hi);
    return p;
}

static float *poisoned(size_t n) {
    float *p = alloc_f(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static float *copy_of(const float *x, size_t n) {
    float *p = alloc_f(n);
    memcpy(p, x, n * sizeof *p);
    return p;
}

static double dot(const float *r, const float *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)r[i] * y[i];
    return s;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* ---- the finite-difference check ---- */

#define FD_TOL 1e-3
#define FD_SAMPLES 48

/* grad[k] vs the central difference of loss() in x[k], relative to max(|grad[k]|, 0.05 max|grad|)
 * (the difference of float forwards has absolute noise, so tiny elements get the tensor's scale) */
static void fd_check(const char *what, float *x, const float *grad, size_t n, double (*loss)(void),
                     float h) {
    double gmax = 0, worst = 0;
    for (size_t k = 0; k < n; k++) gmax = fmax(gmax, fabs(grad[k]));
    double floor = fmax(0.05 * gmax, 1e-9);
    size_t count = n <= FD_SAMPLES ? n : FD_SAMPLES;
    for (size_t c = 0; c < count; c++) {
        size_t k = n <= FD_SAMPLES ? c : below(n);
        float x0 = x[k];
        x[k] = x0 + h;
        double xp = x[k], lp = loss();
        x[k] = x0 - h;
        double xm = x[k], lm = loss();
        x[k] = x0;
        double fd = (lp - lm) / (xp - xm), err = fabs(fd - grad[k]) / fmax(fabs(grad[k]), floor);
        if (isnan(err) || err > worst) worst = err;
    }
    CHECK(worst <= FD_TOL, "%s: worst relative error %.3g over %zu elements", what, worst, count);
    printf("  %-44s max rel err %.2e (%zu of %zu)\n", what, worst, count, n);
}

/* ---- linear ---- */

static struct {
    float *X, *W, *b, *Y, *r;
    int M, K, N;
} lin;

static double linear_loss(void) {
    CHECK_OK(be->ops->linear_fwd(be, lin.X, lin.W, lin.b, lin.Y, lin.M, lin.K, lin.N));
    return dot(lin.r, lin.Y, (size_t)lin.M * lin.N);
}

static void test_linear(int M, int K, int N) {
    size_t nx = (size_t)M * K, nw = (size_t)N * K, ny = (size_t)M * N;
    lin.M = M, lin.K = K, lin.N = N;
    lin.X = rand_away(nx, 0.1, 1), lin.W = rand_away(nw, 0.1, 1), lin.b = rand_away(N, 0.1, 1);
    lin.Y = alloc_f(ny), lin.r = rand_away(ny, 0.1, 1);
    float *dX = poisoned(nx), *dW = poisoned(nw), *db = poisoned(N);
    CHECK_OK(be->ops->linear_bwd(be, lin.X, lin.W, lin.r, dX, dW, db, M, K, N));
    CHECK(all_finite(dX, nx) && all_finite(dW, nw) && all_finite(db, N),
          "linear_bwd M=%d K=%d N=%d left outputs unwritten", M, K, N);
    char name[96];
    snprintf(name, sizeof name, "linear M=%d K=%d N=%d dX", M, K, N);
    fd_check(name, lin.X, dX, nx, linear_loss, 1e-2f);
    snprintf(name, sizeof name, "linear M=%d K=%d N=%d dW", M, K, N);
    fd_check(name, lin.W, dW, nw, linear_loss, 1e-2f);
    snprintf(name, sizeof name, "linear M=%d K=%d N=%d db", M, K, N);
    fd_check(name, lin.b, db, N, linear_loss, 1e-2f);
    /* without dX: dW and db are the same, and overwritten again */
    float *dW2 = poisoned(nw), *db2 = poisoned(N);
    CHECK_OK(be->ops->linear_bwd(be, lin.X, lin.W, lin.r, NULL, dW2, db2, M, K, N));
    CHECK(memcmp(dW, dW2, nw * sizeof *dW) == 0 && memcmp(db, db2, N * sizeof *db) == 0,
          "linear_bwd M=%d K=%d N=%d: dW, db differ when dX is NULL", M, K, N);
    free(lin.X);
    free(lin.W);
    free(lin.b);
    free(lin.Y);
    free(lin.r);
    free(dX);
    free(dW);
    free(db);
    free(dW2);
    free(db2);
}

/* ---- ReLU and ELU (y = f(x); the backward reads y) ---- */

static struct {
    float *x, *y, *r;
    size_t n;
    int elu;
} act;

static double act_loss(void) {
    CHECK_OK(act.elu ? be->ops->elu_fwd(be, act.x, act.y, act.n)
                     : be->ops->relu_fwd(be, act.x, act.y, act.n));
    return dot(act.r, act.y, act.n);
}

static void test_activation(int elu, size_t n) {
    act.elu = elu, act.n = n;
    act.x = rand_away(n, 0.1, 2), act.y = alloc_f(n), act.r = rand_away(n, 0.1, 1);
    act_loss();
    float *dx = poisoned(n);
    CHECK_OK(elu ? be->ops->elu_bwd(be, act.y, act.r, dx, n)
                 : be->ops->relu_bwd(be, act.y, act.r, dx, n));
    CHECK(all_finite(dx, n), "%s_bwd left dx unwritten", elu ? "elu" : "relu");
    /* in place: dx may equal dy */
    float *inplace = copy_of(act.r, n);
    CHECK_OK(elu ? be->ops->elu_bwd(be, act.y, inplace, inplace, n)
                 : be->ops->relu_bwd(be, act.y, inplace, inplace, n));
    CHECK(memcmp(inplace, dx, n * sizeof *dx) == 0, "%s_bwd in place differs",
          elu ? "elu" : "relu");
    char name[64];
    snprintf(name, sizeof name, "%s n=%zu dx", elu ? "elu" : "relu", n);
    fd_check(name, act.x, dx, n, act_loss, 1e-2f);
    free(act.x);
    free(act.y);
    free(act.r);
    free(dx);
    free(inplace);
}

/* ---- GRN gate ---- */

static struct {
    float *h, *g, *out, *r;
    int M, d;
} gt;

static double gate_loss(void) {
    CHECK_OK(be->ops->gate_fwd(be, gt.h, gt.g, gt.out, gt.M, gt.d));
    return dot(gt.r, gt.out, (size_t)gt.M * gt.d);
}

static void test_gate(int M, int d) {
    size_t n = (size_t)M * d;
    gt.M = M, gt.d = d;
    gt.h = rand_away(n, 0.05, 2), gt.g = rand_away(2 * n, 0.05, 2.5);
    gt.out = alloc_f(n), gt.r = rand_away(n, 0.1, 1);
    float *dh = poisoned(n), *dg = poisoned(2 * n);
    CHECK_OK(be->ops->gate_bwd(be, gt.g, gt.r, dh, dg, M, d));
    CHECK(all_finite(dh, n) && all_finite(dg, 2 * n), "gate_bwd left outputs unwritten");
    char name[64];
    snprintf(name, sizeof name, "gate M=%d d=%d dh", M, d);
    fd_check(name, gt.h, dh, n, gate_loss, 1e-2f);
    snprintf(name, sizeof name, "gate M=%d d=%d dg", M, d);
    fd_check(name, gt.g, dg, 2 * n, gate_loss, 1e-2f);
    free(gt.h);
    free(gt.g);
    free(gt.out);
    free(gt.r);
    free(dh);
    free(dg);
}

/* ---- LayerNorm ---- */

static struct {
    float *x, *gamma, *beta, *y, *mean, *rstd, *r;
    int M, d;
} ln;

static double layernorm_loss(void) {
    CHECK_OK(
        be->ops->layernorm_fwd(be, ln.x, ln.gamma, ln.beta, ln.y, ln.mean, ln.rstd, ln.M, ln.d));
    return dot(ln.r, ln.y, (size_t)ln.M * ln.d);
}

static void test_layernorm(int M, int d) {
    size_t n = (size_t)M * d;
    ln.M = M, ln.d = d;
    ln.x = rand_away(n, 0.05, 2), ln.gamma = rand_away(d, 0.5, 1.5), ln.beta = rand_away(d, 0.1, 1);
    ln.y = alloc_f(n), ln.mean = alloc_f(M), ln.rstd = alloc_f(M), ln.r = rand_away(n, 0.1, 1);
    layernorm_loss();
    float *dx = poisoned(n), *dgamma = poisoned(d), *dbeta = poisoned(d);
    CHECK_OK(be->ops->layernorm_bwd(be, ln.x, ln.gamma, ln.mean, ln.rstd, ln.r, dx, dgamma, dbeta,
                                    M, d));
    CHECK(all_finite(dx, n) && all_finite(dgamma, d) && all_finite(dbeta, d),
          "layernorm_bwd left outputs unwritten");
    char name[64];
    snprintf(name, sizeof name, "layernorm M=%d d=%d dx", M, d);
    fd_check(name, ln.x, dx, n, layernorm_loss, 1e-2f);
    snprintf(name, sizeof name, "layernorm M=%d d=%d dgamma", M, d);
    fd_check(name, ln.gamma, dgamma, d, layernorm_loss, 1e-2f);
    snprintf(name, sizeof name, "layernorm M=%d d=%d dbeta", M, d);
    fd_check(name, ln.beta, dbeta, d, layernorm_loss, 1e-2f);
    free(ln.x);
    free(ln.gamma);
    free(ln.beta);
    free(ln.y);
    free(ln.mean);
    free(ln.rstd);
    free(ln.r);
    free(dx);
    free(dgamma);
    free(dbeta);
}

/* ---- IQN broadcasts ---- */

static struct {
    float *h, *phi, *z, *out, *r;
    int B, T, d;
} bc;

static double mul_bcast_loss(void) {
    CHECK_OK(be->ops->mul_bcast_fwd(be, bc.h, bc.phi, bc.out, bc.B, bc.T, bc.d));
    return dot(bc.r, bc.out, (size_t)bc.B * bc.T * bc.d);
}

static void test_mul_bcast(int B, int T, int d) {
    size_t nh = (size_t)B * d, nz = nh * T;
    bc.B = B, bc.T = T, bc.d = d;
    bc.h = rand_away(nh, 0.1, 1), bc.phi = rand_away(nz, 0.1, 1);
    bc.out = alloc_f(nz), bc.r = rand_away(nz, 0.1, 1);
    float *dh = poisoned(nh), *dphi = poisoned(nz);
    CHECK_OK(be->ops->mul_bcast_bwd(be, bc.h, bc.phi, bc.r, dh, dphi, B, T, d));
    CHECK(all_finite(dh, nh) && all_finite(dphi, nz), "mul_bcast_bwd left outputs unwritten");
    char name[64];
    snprintf(name, sizeof name, "mul_bcast B=%d T=%d d=%d dh", B, T, d);
    fd_check(name, bc.h, dh, nh, mul_bcast_loss, 1e-2f);
    snprintf(name, sizeof name, "mul_bcast B=%d T=%d d=%d dphi", B, T, d);
    fd_check(name, bc.phi, dphi, nz, mul_bcast_loss, 1e-2f);
    free(bc.h);
    free(bc.phi);
    free(bc.out);
    free(bc.r);
    free(dh);
    free(dphi);
}

static double concat_bcast_loss(void) {
    CHECK_OK(be->ops->concat_bcast_fwd(be, bc.z, bc.h, bc.out, bc.B, bc.T, bc.d));
    return dot(bc.r, bc.out, (size_t)bc.B * bc.T * 2 * bc.d);
}

static void test_concat_bcast(int B, int T, int d) {
    size_t nh = (size_t)B * d, nz = nh * T;
    bc.B = B, bc.T = T, bc.d = d;
    bc.z = rand_away(nz, 0.1, 1), bc.h = rand_away(nh, 0.1, 1);
    bc.out = alloc_f(2 * nz), bc.r = rand_away(2 * nz, 0.1, 1);
    float *dz = poisoned(nz), *dh0 = rand_away(nh, 0.1, 1), *dh = copy_of(dh0, nh);
    CHECK_OK(be->ops->concat_bcast_bwd(be, bc.r, dz, dh, B, T, d));
    CHECK(all_finite(dz, nz), "concat_bcast_bwd left dz unwritten");
    for (size_t k = 0; k < nh; k++) dh[k] -= dh0[k]; /* dh accumulates: keep what was added */
    char name[64];
    snprintf(name, sizeof name, "concat_bcast B=%d T=%d d=%d dz", B, T, d);
    fd_check(name, bc.z, dz, nz, concat_bcast_loss, 1e-2f);
    snprintf(name, sizeof name, "concat_bcast B=%d T=%d d=%d dh (accumulated)", B, T, d);
    fd_check(name, bc.h, dh, nh, concat_bcast_loss, 1e-2f);
    free(bc.z);
    free(bc.h);
    free(bc.out);
    free(bc.r);
    free(dz);
    free(dh0);
    free(dh);
}

/* ---- dueling combine ---- */

static struct {
    float *V, *Adv, *Z, *r;
    int R;
    dqn_branches br;
} du;

static double dueling_loss(void) {
    CHECK_OK(be->ops->dueling_fwd(be, du.V, du.Adv, du.Z, du.R, &du.br));
    return dot(du.r, du.Z, (size_t)du.R * du.br.A);
}

static void test_dueling(int R, int D, const int *sizes) {
    dqn_branches_init(&du.br, D, sizes);
    size_t nz = (size_t)R * du.br.A;
    du.R = R;
    du.V = rand_away(R, 0.1, 1), du.Adv = rand_away(nz, 0.1, 1);
    du.Z = alloc_f(nz), du.r = rand_away(nz, 0.1, 1);
    float *dV = poisoned(R), *dAdv = poisoned(nz);
    CHECK_OK(be->ops->dueling_bwd(be, du.r, dV, dAdv, R, &du.br));
    CHECK(all_finite(dV, R) && all_finite(dAdv, nz), "dueling_bwd left outputs unwritten");
    char name[64];
    snprintf(name, sizeof name, "dueling R=%d D=%d A=%d dV", R, D, du.br.A);
    fd_check(name, du.V, dV, R, dueling_loss, 1e-2f);
    snprintf(name, sizeof name, "dueling R=%d D=%d A=%d dAdv", R, D, du.br.A);
    fd_check(name, du.Adv, dAdv, nz, dueling_loss, 1e-2f);
    free(du.V);
    free(du.Adv);
    free(du.Z);
    free(du.r);
    free(dV);
    free(dAdv);
}

/* ---- quantile Huber loss w.r.t. Z ---- */

static struct {
    float *Z, *tau, *y, *w, loss;
    int32_t *act;
    int B, N, Nt;
    dqn_branches br;
    dqn_target_mode mode;
    float kappa;
} qh;

static double quantile_huber_loss(void) {
    size_t nz = (size_t)qh.B * qh.N * qh.br.A;
    float *dZ = alloc_f(nz);
    CHECK_OK(be->ops->quantile_huber(be, qh.Z, qh.tau, qh.act, qh.y, qh.w, &qh.loss, dZ, NULL, qh.B,
                                     qh.N, qh.Nt, &qh.br, qh.mode, qh.kappa));
    free(dZ);
    return qh.loss;
}

/* Taken Z on the grid 0.25 k, targets on 0.25 m + 0.125, each jittered by < 0.03: every
 * y - Z lies at least 0.065 from 0 and from +-kappa (kappa a multiple of 0.25), and h = 0.05:
 * the loss is quadratic in each Z between kinks, so the difference is exact but for rounding. */
static void test_quantile_huber(int B, int N, int Nt, int D, const int *sizes, dqn_target_mode mode,
                                float kappa, int weighted) {
    dqn_branches_init(&qh.br, D, sizes);
    qh.B = B, qh.N = N, qh.Nt = Nt, qh.mode = mode, qh.kappa = kappa;
    size_t nz = (size_t)B * N * qh.br.A, ny = (size_t)B * (mode == DQN_TARGET_MEAN ? 1 : D) * Nt;
    qh.Z = rand_away(nz, 0.1, 2), qh.tau = alloc_f((size_t)B * N), qh.y = alloc_f(ny);
    qh.act = malloc((size_t)B * D * sizeof *qh.act);
    qh.w = weighted ? alloc_f(B) : NULL;
    if (!qh.act) exit(1);
    for (int s = 0; s < B; s++) {
        if (qh.w) qh.w[s] = (float)unif(0.2, 1.5);
        for (int b = 0; b < D; b++) qh.act[s * D + b] = (int32_t)below(sizes[b]);
        for (int i = 0; i < N; i++) {
            qh.tau[s * N + i] = (float)unif(0.02, 0.98);
            for (int b = 0; b < D; b++)
                qh.Z[(size_t)(s * N + i) * qh.br.A + qh.br.off[b] + qh.act[s * D + b]] =
                    (float)(0.25 * ((int)below(9) - 4) + unif(-0.03, 0.03));
        }
    }
    for (size_t k = 0; k < ny; k++)
        qh.y[k] = (float)(0.25 * ((int)below(9) - 4) + 0.125 + unif(-0.03, 0.03));
    float *dZ = poisoned(nz), loss;
    CHECK_OK(be->ops->quantile_huber(be, qh.Z, qh.tau, qh.act, qh.y, qh.w, &loss, dZ, NULL, B, N,
                                     Nt, &qh.br, mode, kappa));
    CHECK(all_finite(dZ, nz), "quantile_huber left dZ unwritten");
    char name[96];
    snprintf(name, sizeof name, "quantile_huber B=%d N=%d Nt=%d D=%d %s k=%g%s dZ", B, N, Nt, D,
             mode == DQN_TARGET_MEAN ? "mean" : "indep", (double)kappa, weighted ? " w" : "");
    fd_check(name, qh.Z, dZ, nz, quantile_huber_loss, 5e-2f);
    free(qh.Z);
    free(qh.tau);
    free(qh.y);
    free(qh.act);
    free(qh.w);
    free(dZ);
}

/* ---- fused ops of issue 3 ---- */

/* Heads: Z = heads_fwd(ReLU(pre)) for the stacked hidden layer's pre-activation pre [R, 2H];
 * dueling_bwd then heads_bwd (no clip) give the gradients w.r.t. pre and the v2 / a2 params. */
static struct {
    float *pre, *hva, *Wv2, *bv2, *Wa2, *ba2, *V, *Adv, *Z, *r;
    int R, H;
    dqn_branches br;
} hd;

static double heads_loss(void) {
    size_t n = (size_t)hd.R * 2 * hd.H;
    CHECK_OK(be->ops->relu_fwd(be, hd.pre, hd.hva, n));
    CHECK_OK(be->ops->heads_fwd(be, hd.hva, hd.Wv2, hd.bv2, hd.Wa2, hd.ba2, hd.V, hd.Adv, hd.Z,
                                hd.R, hd.H, &hd.br));
    return dot(hd.r, hd.Z, (size_t)hd.R * hd.br.A);
}

static void test_heads(int R, int H, int D, const int *sizes) {
    dqn_branches_init(&hd.br, D, sizes);
    const int A = hd.br.A;
    size_t nh = (size_t)R * 2 * H, nz = (size_t)R * A;
    hd.R = R, hd.H = H;
    hd.pre = rand_away(nh, 0.1, 1), hd.hva = alloc_f(nh), hd.Wv2 = rand_away(H, 0.1, 1);
    hd.bv2 = rand_away(1, 0.1, 1), hd.Wa2 = rand_away((size_t)A * H, 0.1, 1);
    hd.ba2 = rand_away(A, 0.1, 1), hd.V = alloc_f(R), hd.Adv = alloc_f(nz), hd.Z = alloc_f(nz);
    hd.r = rand_away(nz, 0.1, 1);
    heads_loss();
    float *dV = poisoned(R), *dAdv = poisoned(nz), *dpre = poisoned(nh), *dWv2 = poisoned(H);
    float *dbv2 = poisoned(1), *dWa2 = poisoned((size_t)A * H), *dba2 = poisoned(A);
    CHECK_OK(be->ops->dueling_bwd(be, hd.r, dV, dAdv, R, &hd.br));
    CHECK_OK(be->ops->heads_bwd(be, hd.hva, hd.Wv2, hd.Wa2, dV, dAdv, NULL, 0.0f, dpre, NULL, dWv2,
                                dbv2, dWa2, dba2, R, H, A));
    CHECK(all_finite(dpre, nh) && all_finite(dWv2, H) && all_finite(dbv2, 1) &&
              all_finite(dWa2, (size_t)A * H) && all_finite(dba2, A),
          "heads_bwd left outputs unwritten");
    char name[64];
    snprintf(name, sizeof name, "heads R=%d H=%d A=%d dpre", R, H, A);
    fd_check(name, hd.pre, dpre, nh, heads_loss, 1e-2f);
    snprintf(name, sizeof name, "heads R=%d H=%d A=%d dWv2", R, H, A);
    fd_check(name, hd.Wv2, dWv2, H, heads_loss, 1e-2f);
    snprintf(name, sizeof name, "heads R=%d H=%d A=%d dbv2", R, H, A);
    fd_check(name, hd.bv2, dbv2, 1, heads_loss, 1e-2f);
    snprintf(name, sizeof name, "heads R=%d H=%d A=%d dWa2", R, H, A);
    fd_check(name, hd.Wa2, dWa2, (size_t)A * H, heads_loss, 1e-2f);
    snprintf(name, sizeof name, "heads R=%d H=%d A=%d dba2", R, H, A);
    fd_check(name, hd.ba2, dba2, A, heads_loss, 1e-2f);
    float *bufs[] = {hd.pre, hd.hva, hd.Wv2, hd.bv2, hd.Wa2, hd.ba2, hd.V, hd.Adv, hd.Z, hd.r,
                     dV, dAdv, dpre, dWv2, dbv2, dWa2, dba2};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) free(bufs[k]);
}

/* GRN tail: y = LayerNorm(h + g_a * sigmoid(g_b)) by grn_gate_ln_fwd; grn_ln_gate_bwd gives
 * the gradient w.r.t. h (the residual's dres), g, gamma and beta. */
static struct {
    float *h, *g, *gamma, *beta, *rr, *y, *mean, *rstd, *r;
    int M, d;
} gl;

static double grn_tail_loss(void) {
    CHECK_OK(be->ops->grn_gate_ln_fwd(be, gl.h, gl.g, gl.gamma, gl.beta, gl.rr, gl.y, gl.mean,
                                      gl.rstd, gl.M, gl.d));
    return dot(gl.r, gl.y, (size_t)gl.M * gl.d);
}

static void test_grn_tail(int M, int d) {
    size_t n = (size_t)M * d;
    gl.M = M, gl.d = d;
    gl.h = rand_away(n, 0.05, 2), gl.g = rand_away(2 * n, 0.05, 2.5);
    gl.gamma = rand_away(d, 0.5, 1.5), gl.beta = rand_away(d, 0.1, 1);
    gl.rr = alloc_f(n), gl.y = alloc_f(n), gl.mean = alloc_f(M), gl.rstd = alloc_f(M);
    gl.r = rand_away(n, 0.1, 1);
    grn_tail_loss();
    float *dres = poisoned(n), *dg = poisoned(2 * n), *dgamma = poisoned(d), *dbeta = poisoned(d);
    CHECK_OK(be->ops->grn_ln_gate_bwd(be, gl.rr, gl.gamma, gl.mean, gl.rstd, gl.g, gl.r, dres, dg,
                                      dgamma, dbeta, M, d, NULL));
    CHECK(all_finite(dres, n) && all_finite(dg, 2 * n) && all_finite(dgamma, d) &&
              all_finite(dbeta, d),
          "grn_ln_gate_bwd left outputs unwritten");
    char name[64];
    snprintf(name, sizeof name, "grn tail M=%d d=%d dh", M, d);
    fd_check(name, gl.h, dres, n, grn_tail_loss, 1e-2f);
    snprintf(name, sizeof name, "grn tail M=%d d=%d dg", M, d);
    fd_check(name, gl.g, dg, 2 * n, grn_tail_loss, 1e-2f);
    snprintf(name, sizeof name, "grn tail M=%d d=%d dgamma", M, d);
    fd_check(name, gl.gamma, dgamma, d, grn_tail_loss, 1e-2f);
    snprintf(name, sizeof name, "grn tail M=%d d=%d dbeta", M, d);
    fd_check(name, gl.beta, dbeta, d, grn_tail_loss, 1e-2f);
    float *bufs[] = {gl.h, gl.g, gl.gamma, gl.beta, gl.rr, gl.y, gl.mean, gl.rstd, gl.r,
                     dres, dg, dgamma, dbeta};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) free(bufs[k]);
}

/* IQN mixing: phi = ReLU(pre), z = h * phi and, with the bottleneck, cat = [z, h], by iqn_fwd;
 * iqn_bwd gives the gradients w.r.t. h and pre (and dz = the z half of dcat). */
static struct {
    float *h, *pre, *phi, *z, *cat, *r;
    int B, T, d, with_cat;
} mx;

static double iqn_mix_loss(void) {
    size_t nz = (size_t)mx.B * mx.T * mx.d;
    CHECK_OK(be->ops->relu_fwd(be, mx.pre, mx.phi, nz));
    CHECK_OK(be->ops->iqn_fwd(be, mx.h, mx.phi, mx.z, mx.with_cat ? mx.cat : NULL, mx.B, mx.T, mx.d));
    return mx.with_cat ? dot(mx.r, mx.cat, 2 * nz) : dot(mx.r, mx.z, nz);
}

static void test_iqn_mix(int B, int T, int d, int with_cat) {
    size_t nh = (size_t)B * d, nz = nh * T;
    mx.B = B, mx.T = T, mx.d = d, mx.with_cat = with_cat;
    mx.h = rand_away(nh, 0.1, 1), mx.pre = rand_away(nz, 0.1, 1), mx.phi = alloc_f(nz);
    mx.z = alloc_f(nz), mx.cat = alloc_f(2 * nz), mx.r = rand_away(with_cat ? 2 * nz : nz, 0.1, 1);
    iqn_mix_loss();
    float *dz = with_cat ? poisoned(nz) : copy_of(mx.r, nz), *dh = poisoned(nh);
    float *dpre = poisoned(nz);
    CHECK_OK(be->ops->iqn_bwd(be, with_cat ? mx.r : NULL, mx.h, mx.phi, dz, dh, dpre, NULL, B, T,
                              d, NULL));
    CHECK(all_finite(dz, nz) && all_finite(dh, nh) && all_finite(dpre, nz),
          "iqn_bwd left outputs unwritten");
    int dz_ok = 1;
    for (size_t r = 0; r < (size_t)B * T && with_cat; r++)
        dz_ok &= memcmp(dz + r * d, mx.r + r * 2 * d, (size_t)d * sizeof *dz) == 0;
    CHECK(dz_ok, "iqn_bwd: dz is not the z half of dcat");
    char name[64];
    snprintf(name, sizeof name, "iqn mix B=%d T=%d d=%d cat %d dh", B, T, d, with_cat);
    fd_check(name, mx.h, dh, nh, iqn_mix_loss, 1e-2f);
    snprintf(name, sizeof name, "iqn mix B=%d T=%d d=%d cat %d dphi_pre", B, T, d, with_cat);
    fd_check(name, mx.pre, dpre, nz, iqn_mix_loss, 1e-2f);
    float *bufs[] = {mx.h, mx.pre, mx.phi, mx.z, mx.cat, mx.r, dz, dh, dpre};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) free(bufs[k]);
}

/* The split bottleneck u = ReLU(W_bn[:, 0:d] z + W_bn[:, d:2d] h[s] + b) (linear_ld_fwd twice,
 * bcast_add_act); its backward by relu_bwd_tausum and linear_ld_bwd twice (dh accumulated
 * onto a nonzero start) against finite differences in z, h, W_bn and b. */
static struct {
    float *z, *h, *W, *b, *hb, *u, *r;
    int B, T, d, m;
} sp;

static double bn_split_loss(void) {
    int R = sp.B * sp.T;
    CHECK_OK(be->ops->linear_ld_fwd(be, sp.h, sp.W + sp.d, 2 * sp.d, sp.b, sp.hb, sp.B, sp.d, sp.m,
                                    DQN_ACT_NONE));
    CHECK_OK(be->ops->linear_ld_fwd(be, sp.z, sp.W, 2 * sp.d, NULL, sp.u, R, sp.d, sp.m, DQN_ACT_NONE));
    CHECK_OK(be->ops->bcast_add_act(be, sp.hb, sp.u, sp.B, sp.T, sp.m, DQN_ACT_RELU));
    return dot(sp.r, sp.u, (size_t)R * sp.m);
}

static void test_bn_split(int B, int T, int d, int m) {
    int R = B * T;
    sp.B = B, sp.T = T, sp.d = d, sp.m = m;
    sp.z = rand_away((size_t)R * d, 0.1, 1), sp.h = rand_away((size_t)B * d, 0.1, 1);
    sp.W = rand_away((size_t)m * 2 * d, 0.1, 1), sp.b = rand_away(m, 0.1, 1);
    sp.hb = alloc_f((size_t)B * m), sp.u = alloc_f((size_t)R * m);
    sp.r = rand_away((size_t)R * m, 0.1, 1);
    /* redraw b until no pre-activation lies within 0.05 of the ReLU's kink (a step of h moves
     * one by at most 1e-2) */
    for (int tries = 0; tries < 1000; tries++) {
        CHECK_OK(be->ops->linear_ld_fwd(be, sp.h, sp.W + d, 2 * d, sp.b, sp.hb, B, d, m,
                                        DQN_ACT_NONE));
        CHECK_OK(be->ops->linear_ld_fwd(be, sp.z, sp.W, 2 * d, NULL, sp.u, R, d, m, DQN_ACT_NONE));
        CHECK_OK(be->ops->bcast_add_act(be, sp.hb, sp.u, B, T, m, DQN_ACT_NONE));
        double near = INFINITY;
        for (size_t k = 0; k < (size_t)R * m; k++) near = fmin(near, fabs(sp.u[k]));
        if (near >= 0.05) break;
        for (int k = 0; k < m; k++) sp.b[k] = away(0.1, 1.5);
    }
    bn_split_loss();
    float *du = copy_of(sp.r, (size_t)R * m), *dus = poisoned((size_t)B * m);
    float *dz = poisoned((size_t)R * d), *dh0 = rand_away((size_t)B * d, 0.1, 1);
    float *dh = copy_of(dh0, (size_t)B * d), *dW = poisoned((size_t)m * 2 * d), *db = poisoned(m);
    CHECK_OK(be->ops->relu_bwd_tausum(be, sp.u, du, dus, B, T, m, NULL));
    CHECK_OK(be->ops->linear_ld_bwd(be, sp.z, sp.W, 2 * d, du, dz, 0, dW, NULL, R, d, m));
    CHECK_OK(be->ops->linear_ld_bwd(be, sp.h, sp.W + d, 2 * d, dus, dh, 1, dW + d, db, B, d, m));
    CHECK(all_finite(dz, (size_t)R * d) && all_finite(dW, (size_t)m * 2 * d) && all_finite(db, m),
          "split bottleneck backward left outputs unwritten");
    for (size_t k = 0; k < (size_t)B * d; k++) dh[k] -= dh0[k];   /* keep what was added */
    char name[64];
    snprintf(name, sizeof name, "bn split B=%d T=%d d=%d m=%d dz", B, T, d, m);
    fd_check(name, sp.z, dz, (size_t)R * d, bn_split_loss, 1e-2f);
    snprintf(name, sizeof name, "bn split B=%d T=%d d=%d m=%d dh (accumulated)", B, T, d, m);
    fd_check(name, sp.h, dh, (size_t)B * d, bn_split_loss, 1e-2f);
    snprintf(name, sizeof name, "bn split B=%d T=%d d=%d m=%d dW", B, T, d, m);
    fd_check(name, sp.W, dW, (size_t)m * 2 * d, bn_split_loss, 1e-2f);
    snprintf(name, sizeof name, "bn split B=%d T=%d d=%d m=%d db", B, T, d, m);
    fd_check(name, sp.b, db, m, bn_split_loss, 1e-2f);
    float *bufs[] = {sp.z, sp.h, sp.W, sp.b, sp.hb, sp.u, sp.r, du, dus, dz, dh0, dh, dW, db};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) free(bufs[k]);
}

int main(void) {
    CHECK_OK(dqn_backend_cpu_create(&be));
    if (!be) return check_finish("test_ops_fd");

    static const int lin_shapes[][3] = {{1, 1, 1},   {7, 5, 3},      {33, 17, 20},
                                        {8, 64, 64}, {300, 260, 21}, {97, 30, 1030}};
    for (size_t i = 0; i < sizeof lin_shapes / sizeof *lin_shapes; i++)
        test_linear(lin_shapes[i][0], lin_shapes[i][1], lin_shapes[i][2]);

    test_activation(0, 37);
    test_activation(0, 1000);
    test_activation(1, 37);
    test_activation(1, 1000);
    test_gate(7, 5);
    test_gate(4, 33);
    test_layernorm(7, 5);
    test_layernorm(3, 37);
    test_layernorm(2, 128);
    test_mul_bcast(3, 4, 5);
    test_mul_bcast(2, 7, 33);
    test_concat_bcast(3, 4, 5);
    test_concat_bcast(2, 7, 33);

    static const int one[] = {2}, three[] = {3, 5, 5}, mixed[] = {1, 4, 2};
    test_dueling(7, 1, one);
    test_dueling(5, 3, three);
    test_dueling(4, 3, mixed);

    for (int mode = DQN_TARGET_MEAN; mode <= DQN_TARGET_INDEPENDENT; mode++) {
        test_quantile_huber(3, 4, 5, 1, one, (dqn_target_mode)mode, 1.0f, 0);
        test_quantile_huber(3, 4, 5, 3, three, (dqn_target_mode)mode, 1.0f, 1);
        test_quantile_huber(2, 5, 3, 3, mixed, (dqn_target_mode)mode, 0.5f, 1);
    }

    test_heads(7, 5, 1, one);
    test_heads(5, 9, 3, three);
    test_grn_tail(7, 5);
    test_grn_tail(3, 37);
    test_iqn_mix(3, 4, 5, 1);
    test_iqn_mix(2, 7, 33, 0);
    test_bn_split(3, 4, 5, 6);
    test_bn_split(2, 6, 16, 9);

    be->ops->destroy(be);
    return check_finish("test_ops_fd");
}
