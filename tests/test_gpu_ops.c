/* The CUDA backend against the CPU backend, op by op: the same fresh random inputs on both, every
 * CUDA output poisoned with NaN (0xFF bytes) before the run so that an unwritten element fails,
 * error = max |cuda - cpu| / max |cpu|. Odd and realistic shapes, branches [2] and [3,5,5], both
 * target modes; bit-identical reruns of the reductions; graph capture and replay. Exits 77 when
 * there is no CUDA device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/cuda_switches.h"
#include "check.h"
#include "dqn_philox.h"
#include "model/model.h"
#ifdef DQN_HAVE_CUDA
#include <cuda_runtime_api.h>   /* only to count the nodes of a captured graph */
#endif

#define TOL_EW 1e-5    /* elementwise */
#define TOL_RED 1e-4   /* GEMM-based and reductions */
#define TOL_TF32 5e-3  /* GEMMs of the TF32 backend (inputs rounded to 10 bits) */
/* heads_fwd's GEMM path from R x H this large (HF_GEMM_ELEMS, backends/cuda_switches.h, as are
 * OWN_GEMM_MACS and TRUNK_ROWS) */
#define HEADS_GEMM_ELEMS ((int)HF_GEMM_ELEMS)
/* the TF32 backend made with DQN_CUDA_OWN_TF32_MACS: the own (fp32) kernels up to this many */
#define TEST_OWN_TF32_MACS (1 << 24)

static dqn_backend *gpu, *gpu_tf32, *gpu_tf32_own, *cpu;
static uint64_t draw;   /* input draws never repeat within the run */

/* ---- buffers: every test value exists on the CPU backend and as a device copy ---- */

typedef struct { float *c, *g; size_t n; } vf;
typedef struct { int32_t *c, *g; size_t n; } vi;

#define MAX_LIVE 512
static struct { dqn_backend *be; void *p; } live[MAX_LIVE];
static int n_live;

static void *take(dqn_backend *be, size_t bytes) {
    void *p = NULL;
    CHECK_OK(be->ops->alloc(be, &p, bytes ? bytes : 4));
    if (!p) {
        fprintf(stderr, "allocation of %zu bytes failed\n", bytes);
        exit(1);
    }
    if (n_live == MAX_LIVE) {
        fprintf(stderr, "test: raise MAX_LIVE\n");
        exit(1);
    }
    live[n_live].be = be;
    live[n_live++].p = p;
    return p;
}

static void release_all(void) {
    while (n_live > 0) {
        n_live--;
        live[n_live].be->ops->free(live[n_live].be, live[n_live].p);
    }
}

static void poison(void *g, size_t bytes) {
    unsigned char *h = malloc(bytes ? bytes : 1);
    memset(h, 0xFF, bytes);
    CHECK_OK(gpu->ops->h2d(gpu, g, h, bytes));
    free(h);
}

static float urand(float lo, float hi) {
    return lo + (hi - lo) * dqn_philox_uniform(0x5eedULL, 77, draw++);
}

static void upload(vf v) { CHECK_OK(gpu->ops->h2d(gpu, v.g, v.c, v.n * sizeof(float))); }

static vf in_f(size_t n, float lo, float hi) {
    vf v = {take(cpu, n * sizeof(float)), take(gpu, n * sizeof(float)), n};
    for (size_t i = 0; i < n; i++) v.c[i] = urand(lo, hi);
    upload(v);
    return v;
}

static vi in_i(size_t n, uint32_t below) {
    vi v = {take(cpu, n * sizeof(int32_t)), take(gpu, n * sizeof(int32_t)), n};
    for (size_t i = 0; i < n; i++) v.c[i] = (int32_t)dqn_philox_below(0x5eedULL, 78, draw++, below);
    CHECK_OK(gpu->ops->h2d(gpu, v.g, v.c, n * sizeof(int32_t)));
    return v;
}

static vf out_f(size_t n) {
    vf v = {take(cpu, n * sizeof(float)), take(gpu, n * sizeof(float)), n};
    poison(v.g, n * sizeof(float));
    return v;
}

static vi out_i(size_t n) {
    vi v = {take(cpu, n * sizeof(int32_t)), take(gpu, n * sizeof(int32_t)), n};
    poison(v.g, n * sizeof(int32_t));
    return v;
}

static float *fetch(const void *g, size_t bytes) {
    float *h = malloc(bytes ? bytes : 4);
    CHECK_OK(gpu->ops->d2h(gpu, h, g, bytes));
    return h;
}

/* max |got - ref| / max |ref|; a NaN or Inf anywhere counts as infinite error */
static double err_of(const float *got, const float *ref, size_t n) {
    double maxref = 0.0, maxdiff = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(ref[i])) return INFINITY;
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > maxdiff) maxdiff = d;
        if (fabs((double)ref[i]) > maxref) maxref = fabs((double)ref[i]);
    }
    return maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
}

static double expect_f(const char *what, vf v, double tol) {
    float *h = fetch(v.g, v.n * sizeof(float));
    double e = err_of(h, v.c, v.n);
    printf("  %-44s n=%-9zu err %.2e (tol %.0e)\n", what, v.n, e, tol);
    CHECK(e <= tol, "%s: error %.3e > %.0e", what, e, tol);
    free(h);
    return e;
}

static void expect_i(const char *what, vi v) {
    int32_t *h = (int32_t *)fetch(v.g, v.n * sizeof(int32_t));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < v.n; i++)
        if (h[i] != v.c[i] && bad++ == 0) first = i;
    printf("  %-44s n=%-9zu %zu mismatches\n", what, v.n, bad);
    CHECK(bad == 0, "%s: %zu of %zu differ, first at %zu: %d vs %d", what, bad, v.n, first,
          h[first], v.c[first]);
    free(h);
}

/* the device copy equals a host snapshot bit for bit (reruns and replays) */
static void expect_same_bits(const char *what, const void *g, const void *snap, size_t bytes) {
    void *h = fetch(g, bytes);
    CHECK(memcmp(h, snap, bytes) == 0, "%s: a rerun differs in its bits", what);
    free(h);
}

/* ---- timing (realistic shapes only): mean wall time of 20 back-to-back calls ---- */

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

#define TIME_ON(be, label, call)                                               \
    do {                                                                       \
        CHECK_OK(call);                                                        \
        CHECK_OK((be)->ops->sync(be));                                         \
        double t0_ = now_us();                                                 \
        for (int r_ = 0; r_ < 20; r_++) (void)(call);                          \
        CHECK_OK((be)->ops->sync(be));                                         \
        printf("  time %-39s %9.1f us\n", label, (now_us() - t0_) / 20.0);     \
    } while (0)
#define TIME_GPU(label, call) TIME_ON(gpu, label, call)

/* the reference run of an op on the CPU backend */
#define CPU(op, ...) CHECK_OK(cpu->ops->op(cpu, __VA_ARGS__))

/* ---- dense layers ---- */

/* the same values seen off floats further on: sub-tensor pointers of unaligned offsets */
static vf shift(vf v, int off) {
    vf r = {v.c + off, v.g + off, v.n - (size_t)off};
    return r;
}

static void test_linear(int M, int K, int N, int off, int timed) {
    char w[96];
    printf("linear M=%d K=%d N=%d pointer offset %d floats\n", M, K, N, off);
    vf X = shift(in_f((size_t)M * K + off, -1, 1), off), W = shift(in_f((size_t)N * K + off, -1, 1), off);
    vf b = shift(in_f((size_t)N + off, -1, 1), off), Y = shift(out_f((size_t)M * N + off), off);
    CPU(linear_fwd, X.c, W.c, b.c, Y.c, M, K, N);
    CHECK_OK(gpu->ops->linear_fwd(gpu, X.g, W.g, b.g, Y.g, M, K, N));
    snprintf(w, sizeof w, "linear_fwd %dx%dx%d", M, K, N);
    double e32 = expect_f(w, Y, TOL_RED);
    if (M * (double)K * N >= 1e8) {
        /* true fp32: TF32 rounds inputs to 10 bits, about 1e-4..1e-3 off at this K */
        CHECK(e32 < 1e-5, "fp32 linear_fwd error %.2e looks like TF32", e32);
        poison(Y.g, Y.n * sizeof(float));
        CHECK_OK(gpu_tf32->ops->linear_fwd(gpu_tf32, X.g, W.g, b.g, Y.g, M, K, N));
        CHECK_OK(gpu_tf32->ops->sync(gpu_tf32));
        double e = expect_f("linear_fwd (tf32 backend)", Y, TOL_TF32);
        CHECK(e > e32, "tf32 error %.2e not above fp32's %.2e: TF32 not in use?", e, e32);
    } else if (gpu_tf32_own && M * (double)K * N <= TEST_OWN_TF32_MACS && K <= 128 && N <= 128) {
        /* a small layer: with DQN_CUDA_OWN_TF32_MACS the TF32 backend runs the own fp32
         * kernels, fp32's accuracy */
        poison(Y.g, Y.n * sizeof(float));
        CHECK_OK(gpu_tf32_own->ops->linear_fwd(gpu_tf32_own, X.g, W.g, b.g, Y.g, M, K, N));
        CHECK_OK(gpu_tf32_own->ops->sync(gpu_tf32_own));
        double e = expect_f("linear_fwd (tf32 backend, own kernels)", Y, TOL_RED);
        CHECK(e < 1e-5, "tf32 backend at %.3g multiply-adds: error %.2e, want fp32's (own kernels)",
              M * (double)K * N, e);
    }
    vf Ynb = out_f((size_t)M * N);
    CPU(linear_fwd, X.c, W.c, NULL, Ynb.c, M, K, N);
    CHECK_OK(gpu->ops->linear_fwd(gpu, X.g, W.g, NULL, Ynb.g, M, K, N));
    expect_f("linear_fwd without bias", Ynb, TOL_RED);
    /* ReLU epilogue, with and without the bias (the CPU is linear_fwd then relu_fwd) */
    CPU(linear_act_fwd, X.c, W.c, b.c, Y.c, M, K, N, DQN_ACT_RELU);
    CHECK_OK(gpu->ops->linear_act_fwd(gpu, X.g, W.g, b.g, Y.g, M, K, N, DQN_ACT_RELU));
    expect_f("linear_act_fwd relu", Y, TOL_RED);
    size_t zeros = 0;
    for (size_t i = 0; i < Y.n; i++) zeros += Y.c[i] == 0.0f;
    CHECK(zeros > 0 && zeros < Y.n, "linear_act_fwd: relu clipped %zu of %zu", zeros, Y.n);
    CPU(linear_act_fwd, X.c, W.c, NULL, Ynb.c, M, K, N, DQN_ACT_RELU);
    CHECK_OK(gpu->ops->linear_act_fwd(gpu, X.g, W.g, NULL, Ynb.g, M, K, N, DQN_ACT_RELU));
    expect_f("linear_act_fwd relu without bias", Ynb, TOL_RED);
    /* ELU (the CPU is linear_fwd then elu_fwd; cuBLAS's path adds an elu kernel) */
    poison(Y.g, Y.n * sizeof(float));
    CPU(linear_act_fwd, X.c, W.c, b.c, Y.c, M, K, N, DQN_ACT_ELU);
    CHECK_OK(gpu->ops->linear_act_fwd(gpu, X.g, W.g, b.g, Y.g, M, K, N, DQN_ACT_ELU));
    expect_f("linear_act_fwd elu", Y, TOL_RED);
    size_t neg = 0;
    for (size_t i = 0; i < Y.n; i++) neg += Y.c[i] < 0.0f;
    CHECK(neg > 0 && neg < Y.n, "linear_act_fwd: elu left %zu of %zu negative", neg, Y.n);

    vf dY = in_f((size_t)M * N, -1, 1), dX = out_f((size_t)M * K), dW = out_f((size_t)N * K),
       db = out_f((size_t)N);
    CPU(linear_bwd, X.c, W.c, dY.c, dX.c, dW.c, db.c, M, K, N);
    CHECK_OK(gpu->ops->linear_bwd(gpu, X.g, W.g, dY.g, dX.g, dW.g, db.g, M, K, N));
    expect_f("linear_bwd dX", dX, TOL_RED);
    expect_f("linear_bwd dW", dW, TOL_RED);
    expect_f("linear_bwd db", db, TOL_RED);
    /* dX NULL skips dX only; db must come out bit-identical on a rerun */
    float *db_snap = fetch(db.g, db.n * sizeof(float));
    poison(dW.g, dW.n * sizeof(float));
    poison(db.g, db.n * sizeof(float));
    CHECK_OK(gpu->ops->linear_bwd(gpu, X.g, W.g, dY.g, NULL, dW.g, db.g, M, K, N));
    expect_f("linear_bwd dW (dX NULL)", dW, TOL_RED);
    expect_same_bits("linear_bwd db", db.g, db_snap, db.n * sizeof(float));
    free(db_snap);
    /* W and dW with rows K + 3 apart (the gap columns kept), dX accumulated, ReLU and ELU */
    const int ldw = K + 3;
    vf Wl = in_f((size_t)N * ldw, -1, 1), dXa = in_f((size_t)M * K, -1, 1);
    vf dWl = in_f((size_t)N * ldw, -1, 1), dbl = out_f((size_t)N);
    CPU(linear_ld_fwd, X.c, Wl.c, ldw, b.c, Y.c, M, K, N, DQN_ACT_ELU);
    CHECK_OK(gpu->ops->linear_ld_fwd(gpu, X.g, Wl.g, ldw, b.g, Y.g, M, K, N, DQN_ACT_ELU));
    expect_f("linear_ld_fwd elu (ldw = K + 3)", Y, TOL_RED);
    CPU(linear_ld_fwd, X.c, Wl.c, ldw, NULL, Y.c, M, K, N, DQN_ACT_RELU);
    CHECK_OK(gpu->ops->linear_ld_fwd(gpu, X.g, Wl.g, ldw, NULL, Y.g, M, K, N, DQN_ACT_RELU));
    expect_f("linear_ld_fwd relu without bias", Y, TOL_RED);
    CPU(linear_ld_bwd, X.c, Wl.c, ldw, dY.c, dXa.c, 1, dWl.c, dbl.c, M, K, N);
    CHECK_OK(gpu->ops->linear_ld_bwd(gpu, X.g, Wl.g, ldw, dY.g, dXa.g, 1, dWl.g, dbl.g, M, K, N));
    expect_f("linear_ld_bwd dX (accumulated)", dXa, TOL_RED);
    expect_f("linear_ld_bwd dW (rows ldw apart)", dWl, TOL_RED);
    expect_f("linear_ld_bwd db", dbl, TOL_RED);
    /* the split reduction's partials are summed in a fixed order: a rerun gives the same bits */
    float *dw_snap = fetch(dWl.g, dWl.n * sizeof(float));
    CHECK_OK(gpu->ops->linear_ld_bwd(gpu, X.g, Wl.g, ldw, dY.g, NULL, 0, dWl.g, dbl.g, M, K, N));
    expect_same_bits("linear_ld_bwd dW", dWl.g, dw_snap, dWl.n * sizeof(float));
    free(dw_snap);
    if (timed) {
        TIME_GPU("linear_fwd (bias epilogue)", gpu->ops->linear_fwd(gpu, X.g, W.g, b.g, Y.g, M, K, N));
        TIME_ON(gpu_tf32, "linear_fwd tf32",
                gpu_tf32->ops->linear_fwd(gpu_tf32, X.g, W.g, b.g, Y.g, M, K, N));
        TIME_GPU("linear_bwd (dX, dW, db)",
                 gpu->ops->linear_bwd(gpu, X.g, W.g, dY.g, dX.g, dW.g, db.g, M, K, N));
    }
    release_all();
}

/* ---- elementwise ---- */

static void test_elementwise(size_t n, int timed) {
    printf("elementwise n=%zu\n", n);
    vf x = in_f(n, -2, 2), y = out_f(n), dy = in_f(n, -1, 1), dx = out_f(n);
    CPU(relu_fwd, x.c, y.c, n);
    CHECK_OK(gpu->ops->relu_fwd(gpu, x.g, y.g, n));
    expect_f("relu_fwd", y, TOL_EW);
    CPU(relu_bwd, y.c, dy.c, dx.c, n);
    CHECK_OK(gpu->ops->relu_bwd(gpu, y.g, dy.g, dx.g, n));
    expect_f("relu_bwd", dx, TOL_EW);

    CPU(elu_fwd, x.c, y.c, n);
    poison(y.g, n * sizeof(float));
    CHECK_OK(gpu->ops->elu_fwd(gpu, x.g, y.g, n));
    expect_f("elu_fwd", y, TOL_EW);
    upload(y);   /* the backward reads the same forward output on both */
    CPU(elu_bwd, y.c, dy.c, dx.c, n);
    poison(dx.g, n * sizeof(float));
    CHECK_OK(gpu->ops->elu_bwd(gpu, y.g, dy.g, dx.g, n));
    expect_f("elu_bwd", dx, TOL_EW);

    /* in place: y == x and dx == dy */
    CPU(elu_fwd, x.c, x.c, n);
    CHECK_OK(gpu->ops->elu_fwd(gpu, x.g, x.g, n));
    expect_f("elu_fwd in place", x, TOL_EW);
    CPU(relu_bwd, x.c, dy.c, dy.c, n);
    CHECK_OK(gpu->ops->relu_bwd(gpu, x.g, dy.g, dy.g, n));
    expect_f("relu_bwd in place", dy, TOL_EW);
    CPU(relu_fwd, x.c, x.c, n);
    CHECK_OK(gpu->ops->relu_fwd(gpu, x.g, x.g, n));
    expect_f("relu_fwd in place", x, TOL_EW);

    float a = urand(-2, 2);
    CPU(axpy, a, dx.c, dy.c, n);
    CHECK_OK(gpu->ops->axpy(gpu, a, dx.g, dy.g, n));
    expect_f("axpy (accumulated)", dy, TOL_EW);

    float v = urand(-3, 3);
    CPU(fill, y.c, v, n);
    poison(y.g, n * sizeof(float));
    CHECK_OK(gpu->ops->fill(gpu, y.g, v, n));
    expect_f("fill", y, 0.0);
    if (timed) {
        TIME_GPU("relu_fwd", gpu->ops->relu_fwd(gpu, x.g, y.g, n));
        TIME_GPU("elu_bwd", gpu->ops->elu_bwd(gpu, y.g, dy.g, dx.g, n));
        TIME_GPU("axpy", gpu->ops->axpy(gpu, 1.0f, dx.g, dy.g, n));
    }
    release_all();
}

static void test_gate(int M, int d, int timed) {
    printf("gate M=%d d=%d\n", M, d);
    size_t n = (size_t)M * d;
    vf h = in_f(n, -1, 1), g = in_f(2 * n, -3, 3), r = out_f(n);
    CPU(gate_fwd, h.c, g.c, r.c, M, d);
    CHECK_OK(gpu->ops->gate_fwd(gpu, h.g, g.g, r.g, M, d));
    expect_f("gate_fwd", r, TOL_EW);
    vf dr = in_f(n, -1, 1), dh = out_f(n), dg = out_f(2 * n);
    CPU(gate_bwd, g.c, dr.c, dh.c, dg.c, M, d);
    CHECK_OK(gpu->ops->gate_bwd(gpu, g.g, dr.g, dh.g, dg.g, M, d));
    expect_f("gate_bwd dh", dh, TOL_EW);
    expect_f("gate_bwd dg", dg, TOL_EW);
    if (timed) TIME_GPU("gate_bwd", gpu->ops->gate_bwd(gpu, g.g, dr.g, dh.g, dg.g, M, d));
    release_all();
}

static void test_layernorm(int M, int d, int timed) {
    printf("layernorm M=%d d=%d\n", M, d);
    size_t n = (size_t)M * d;
    vf x = in_f(n, -2, 3), gamma = in_f((size_t)d, 0.5f, 1.5f), beta = in_f((size_t)d, -0.5f, 0.5f);
    vf y = out_f(n), mean = out_f((size_t)M), rstd = out_f((size_t)M);
    CPU(layernorm_fwd, x.c, gamma.c, beta.c, y.c, mean.c, rstd.c, M, d);
    CHECK_OK(gpu->ops->layernorm_fwd(gpu, x.g, gamma.g, beta.g, y.g, mean.g, rstd.g, M, d));
    expect_f("layernorm_fwd y", y, TOL_RED);
    expect_f("layernorm_fwd mean", mean, TOL_RED);
    expect_f("layernorm_fwd rstd", rstd, TOL_RED);
    upload(mean);
    upload(rstd);
    vf dy = in_f(n, -1, 1), dx = out_f(n), dgamma = out_f((size_t)d), dbeta = out_f((size_t)d);
    CPU(layernorm_bwd, x.c, gamma.c, mean.c, rstd.c, dy.c, dx.c, dgamma.c, dbeta.c, M, d);
    CHECK_OK(gpu->ops->layernorm_bwd(gpu, x.g, gamma.g, mean.g, rstd.g, dy.g, dx.g, dgamma.g,
                                     dbeta.g, M, d));
    expect_f("layernorm_bwd dx", dx, TOL_RED);
    expect_f("layernorm_bwd dgamma", dgamma, TOL_RED);
    expect_f("layernorm_bwd dbeta", dbeta, TOL_RED);
    float *snap = fetch(dgamma.g, (size_t)d * sizeof(float));
    poison(dgamma.g, (size_t)d * sizeof(float));
    CHECK_OK(gpu->ops->layernorm_bwd(gpu, x.g, gamma.g, mean.g, rstd.g, dy.g, dx.g, dgamma.g,
                                     dbeta.g, M, d));
    expect_same_bits("layernorm_bwd dgamma", dgamma.g, snap, (size_t)d * sizeof(float));
    free(snap);
    if (timed) {
        TIME_GPU("layernorm_fwd", gpu->ops->layernorm_fwd(gpu, x.g, gamma.g, beta.g, y.g, mean.g,
                                                          rstd.g, M, d));
        TIME_GPU("layernorm_bwd", gpu->ops->layernorm_bwd(gpu, x.g, gamma.g, mean.g, rstd.g, dy.g,
                                                          dx.g, dgamma.g, dbeta.g, M, d));
    }
    release_all();
}

/* ---- IQN ---- */

static void test_iqn(int B, int T, int d, int n_cos, int timed) {
    printf("iqn B=%d T=%d d=%d n_cos=%d\n", B, T, d, n_cos);
    int R = B * T;
    size_t nz = (size_t)R * d;
    vf tau = in_f((size_t)R, 0, 1), C = out_f((size_t)R * n_cos);
    CPU(cos_embed, tau.c, C.c, R, n_cos);
    CHECK_OK(gpu->ops->cos_embed(gpu, tau.g, C.g, R, n_cos));
    expect_f("cos_embed", C, TOL_EW);

    vf h = in_f((size_t)B * d, -1, 1), phi = in_f(nz, 0, 1), z = out_f(nz);
    CPU(mul_bcast_fwd, h.c, phi.c, z.c, B, T, d);
    CHECK_OK(gpu->ops->mul_bcast_fwd(gpu, h.g, phi.g, z.g, B, T, d));
    expect_f("mul_bcast_fwd", z, TOL_EW);
    vf dz = in_f(nz, -1, 1), dh = out_f((size_t)B * d), dphi = out_f(nz);
    CPU(mul_bcast_bwd, h.c, phi.c, dz.c, dh.c, dphi.c, B, T, d);
    CHECK_OK(gpu->ops->mul_bcast_bwd(gpu, h.g, phi.g, dz.g, dh.g, dphi.g, B, T, d));
    expect_f("mul_bcast_bwd dh", dh, TOL_RED);
    expect_f("mul_bcast_bwd dphi", dphi, TOL_EW);

    vf cat = out_f(2 * nz);
    CPU(concat_bcast_fwd, z.c, h.c, cat.c, B, T, d);
    upload(z);
    CHECK_OK(gpu->ops->concat_bcast_fwd(gpu, z.g, h.g, cat.g, B, T, d));
    expect_f("concat_bcast_fwd", cat, 0.0);
    /* dh is accumulated: both start from the same nonzero values */
    vf dcat = in_f(2 * nz, -1, 1), dz2 = out_f(nz), dh2 = in_f((size_t)B * d, -1, 1);
    CPU(concat_bcast_bwd, dcat.c, dz2.c, dh2.c, B, T, d);
    CHECK_OK(gpu->ops->concat_bcast_bwd(gpu, dcat.g, dz2.g, dh2.g, B, T, d));
    expect_f("concat_bcast_bwd dz", dz2, 0.0);
    expect_f("concat_bcast_bwd dh (accumulated)", dh2, TOL_RED);
    if (timed) {
        TIME_GPU("cos_embed", gpu->ops->cos_embed(gpu, tau.g, C.g, R, n_cos));
        TIME_GPU("mul_bcast_bwd", gpu->ops->mul_bcast_bwd(gpu, h.g, phi.g, dz.g, dh.g, dphi.g, B, T, d));
        TIME_GPU("concat_bcast_fwd", gpu->ops->concat_bcast_fwd(gpu, z.g, h.g, cat.g, B, T, d));
        TIME_GPU("concat_bcast_bwd", gpu->ops->concat_bcast_bwd(gpu, dcat.g, dz2.g, dh2.g, B, T, d));
    }
    release_all();
}

/* iqn_embed_fwd against the CPU's three ops: z and cat in full, C and phi in their first keep
 * samples' rows (past them the op may leave them unwritten); d of 64, 128 and 256 with n_cos a
 * multiple of 4 up to 64 take the one-kernel path, other shapes and TF32 the three ops */
static void test_iqn_embed(dqn_backend *g, int B, int T, int d, int n_cos, int keep, int with_cat,
                           double tol, int timed) {
    printf("iqn_embed B=%d T=%d d=%d n_cos=%d keep=%d%s%s\n", B, T, d, n_cos, keep,
           with_cat ? " cat" : "", g == gpu_tf32 ? " (tf32 backend)" : "");
    const int R = B * T, kr = keep * T;
    const size_t nz = (size_t)R * d;
    vf tau = in_f((size_t)R, 0, 1), W = in_f((size_t)d * n_cos, -0.3f, 0.3f);
    vf b = in_f((size_t)d, -0.5f, 0.5f), h = in_f((size_t)B * d, -1, 1);
    vf C = out_f((size_t)R * n_cos), phi = out_f(nz), z = out_f(nz);
    vf cat = with_cat ? out_f(2 * nz) : (vf){NULL, NULL, 0};
    CPU(iqn_embed_fwd, tau.c, W.c, b.c, h.c, C.c, phi.c, z.c, cat.c, B, T, n_cos, d, kr, NULL);
    CHECK_OK(g->ops->iqn_embed_fwd(g, tau.g, W.g, b.g, h.g, C.g, phi.g, z.g, cat.g, B, T, n_cos,
                                   d, kr, NULL));
    CHECK_OK(g->ops->sync(g));
    expect_f("iqn_embed_fwd z", z, tol);
    if (with_cat) expect_f("iqn_embed_fwd cat", cat, tol);
    vf Ck = {C.c, C.g, (size_t)kr * n_cos}, pk = {phi.c, phi.g, (size_t)kr * d};
    if (kr > 0) {
        expect_f("iqn_embed_fwd C (kept rows)", Ck, TOL_EW);
        expect_f("iqn_embed_fwd phi (kept rows)", pk, tol);
    }
    if (timed) {
        TIME_ON(g, "iqn_embed_fwd", g->ops->iqn_embed_fwd(g, tau.g, W.g, b.g, h.g, C.g, phi.g, z.g,
                                                          cat.g, B, T, n_cos, d, kr, NULL));
        TIME_ON(g, "cos_embed + linear_act_fwd + iqn_fwd",
                dqn_iqn_embed_seq(g, tau.g, W.g, b.g, h.g, C.g, phi.g, z.g, cat.g, B, T, n_cos, d));
    }
    release_all();
}

/* ---- heads: dueling, action selection, targets ---- */

static void test_heads(int B, int K, int Nt, int D, const int *sizes, int timed) {
    dqn_branches br;
    dqn_branches_init(&br, D, sizes);
    printf("heads B=%d K=%d Nt=%d D=%d A=%d\n", B, K, Nt, D, br.A);
    int R = B * K, A = br.A;
    vf V = in_f((size_t)R, -1, 1), Adv = in_f((size_t)R * A, -1, 1), Z = out_f((size_t)R * A);
    CPU(dueling_fwd, V.c, Adv.c, Z.c, R, &br);
    CHECK_OK(gpu->ops->dueling_fwd(gpu, V.g, Adv.g, Z.g, R, &br));
    expect_f("dueling_fwd", Z, TOL_EW);
    vf dZ = in_f((size_t)R * A, -1, 1), dV = out_f((size_t)R), dAdv = out_f((size_t)R * A);
    CPU(dueling_bwd, dZ.c, dV.c, dAdv.c, R, &br);
    CHECK_OK(gpu->ops->dueling_bwd(gpu, dZ.g, dV.g, dAdv.g, R, &br));
    expect_f("dueling_bwd dV", dV, TOL_RED);
    expect_f("dueling_bwd dAdv", dAdv, TOL_EW);

    upload(Z);
    vf Q = out_f((size_t)B * A);
    vi act = out_i((size_t)B * D), act2 = out_i((size_t)B * D);
    CPU(q_argmax, Z.c, Q.c, act.c, B, K, &br);
    CHECK_OK(gpu->ops->q_argmax(gpu, Z.g, Q.g, act.g, B, K, &br));
    expect_f("q_argmax Q", Q, TOL_EW);
    expect_i("q_argmax act", act);
    CPU(q_argmax, Z.c, NULL, act2.c, B, K, &br);
    CHECK_OK(gpu->ops->q_argmax(gpu, Z.g, NULL, act2.g, B, K, &br));
    expect_i("q_argmax act (Q NULL)", act2);

    /* targets on a target-net Zt of Nt rows per state */
    vf Zt = in_f((size_t)B * Nt * A, -2, 2), Rw = in_f((size_t)B, -1, 1), disc = in_f((size_t)B, 0, 1);
    vi astar = {take(cpu, (size_t)B * D * 4), take(gpu, (size_t)B * D * 4), (size_t)B * D};
    for (int s = 0; s < B; s++)
        for (int b = 0; b < D; b++)
            astar.c[s * D + b] = (int32_t)dqn_philox_below(9, 9, draw++, (uint32_t)sizes[b]);
    CHECK_OK(gpu->ops->h2d(gpu, astar.g, astar.c, (size_t)B * D * 4));
    vf ym = out_f((size_t)B * Nt), yi = out_f((size_t)B * D * Nt);
    CPU(iqn_targets, Zt.c, astar.c, Rw.c, disc.c, ym.c, B, Nt, &br, DQN_TARGET_MEAN);
    CHECK_OK(gpu->ops->iqn_targets(gpu, Zt.g, astar.g, Rw.g, disc.g, ym.g, B, Nt, &br, DQN_TARGET_MEAN));
    expect_f("iqn_targets mean", ym, TOL_EW);
    CPU(iqn_targets, Zt.c, astar.c, Rw.c, disc.c, yi.c, B, Nt, &br, DQN_TARGET_INDEPENDENT);
    CHECK_OK(gpu->ops->iqn_targets(gpu, Zt.g, astar.g, Rw.g, disc.g, yi.g, B, Nt, &br,
                                   DQN_TARGET_INDEPENDENT));
    expect_f("iqn_targets independent", yi, TOL_EW);
    if (timed) {
        TIME_GPU("dueling_fwd", gpu->ops->dueling_fwd(gpu, V.g, Adv.g, Z.g, R, &br));
        TIME_GPU("dueling_bwd", gpu->ops->dueling_bwd(gpu, dZ.g, dV.g, dAdv.g, R, &br));
        TIME_GPU("q_argmax", gpu->ops->q_argmax(gpu, Z.g, Q.g, act.g, B, K, &br));
        TIME_GPU("iqn_targets mean", gpu->ops->iqn_targets(gpu, Zt.g, astar.g, Rw.g, disc.g, ym.g,
                                                           B, Nt, &br, DQN_TARGET_MEAN));
    }
    release_all();
}

/* ---- the loss ---- */

static void test_loss(int B, int N, int Nt, int D, const int *sizes, dqn_target_mode mode,
                      float kappa, int weighted, int timed) {
    dqn_branches br;
    dqn_branches_init(&br, D, sizes);
    int A = br.A, Dy = mode == DQN_TARGET_MEAN ? 1 : D;
    printf("quantile_huber B=%d N=%d Nt=%d D=%d %s kappa=%g %s\n", B, N, Nt, D,
           mode == DQN_TARGET_MEAN ? "mean" : "independent", (double)kappa,
           weighted ? "weighted" : "w NULL, per_sample NULL");
    vf Z = in_f((size_t)B * N * A, -2, 2), tau = in_f((size_t)B * N, 0, 1);
    vf y = in_f((size_t)B * Dy * Nt, -2, 2), w = in_f((size_t)B, 0.2f, 2.0f);
    vi act = {take(cpu, (size_t)B * D * 4), take(gpu, (size_t)B * D * 4), (size_t)B * D};
    for (int s = 0; s < B; s++)
        for (int b = 0; b < D; b++)
            act.c[s * D + b] = (int32_t)dqn_philox_below(10, 10, draw++, (uint32_t)sizes[b]);
    CHECK_OK(gpu->ops->h2d(gpu, act.g, act.c, (size_t)B * D * 4));
    vf loss = out_f(1), dZ = out_f((size_t)B * N * A), per = out_f((size_t)B);
    const float *wc = weighted ? w.c : NULL, *wg = weighted ? w.g : NULL;
    float *pc = weighted ? per.c : NULL, *pg = weighted ? per.g : NULL;
    CPU(quantile_huber, Z.c, tau.c, act.c, y.c, wc, loss.c, dZ.c, pc, B, N, Nt, &br, mode, kappa);
    CHECK_OK(gpu->ops->quantile_huber(gpu, Z.g, tau.g, act.g, y.g, wg, loss.g, dZ.g, pg, B, N, Nt,
                                      &br, mode, kappa));
    expect_f("quantile_huber loss", loss, TOL_RED);
    expect_f("quantile_huber dZ", dZ, TOL_RED);
    if (weighted) expect_f("quantile_huber per_sample", per, TOL_RED);
    float *l_snap = fetch(loss.g, sizeof(float)), *dz_snap = fetch(dZ.g, dZ.n * sizeof(float));
    poison(loss.g, sizeof(float));
    poison(dZ.g, dZ.n * sizeof(float));
    CHECK_OK(gpu->ops->quantile_huber(gpu, Z.g, tau.g, act.g, y.g, wg, loss.g, dZ.g, pg, B, N, Nt,
                                      &br, mode, kappa));
    expect_same_bits("quantile_huber loss", loss.g, l_snap, sizeof(float));
    expect_same_bits("quantile_huber dZ", dZ.g, dz_snap, dZ.n * sizeof(float));
    free(l_snap);
    free(dz_snap);
    if (timed)
        TIME_GPU("quantile_huber", gpu->ops->quantile_huber(gpu, Z.g, tau.g, act.g, y.g, wg, loss.g,
                                                            dZ.g, pg, B, N, Nt, &br, mode, kappa));
    release_all();
}

/* targets_huber on g: the CPU's two ops, and g's own two ops into the same buffers bit for bit
 * (g with DQN_CUDA_FUSED_TARGETS=1 runs one kernel) */
static void test_targets_huber(dqn_backend *g, int B, int N, int Nt, int D, const int *sizes,
                               dqn_target_mode mode, int weighted) {
    dqn_branches br;
    dqn_branches_init(&br, D, sizes);
    const int A = br.A, Dy = mode == DQN_TARGET_MEAN ? 1 : D;
    printf("targets_huber B=%d N=%d Nt=%d D=%d %s%s\n", B, N, Nt, D,
           mode == DQN_TARGET_MEAN ? "mean" : "independent", weighted ? " weighted" : "");
    vf Z = in_f((size_t)B * N * A, -2, 2), tau = in_f((size_t)B * N, 0, 1);
    vf Zt = in_f((size_t)B * Nt * A, -2, 2), R = in_f((size_t)B, -1, 1);
    vf disc = in_f((size_t)B, 0, 0.99f), w = in_f((size_t)B, 0.2f, 2.0f);
    vi act = {take(cpu, (size_t)B * D * 4), take(gpu, (size_t)B * D * 4), (size_t)B * D};
    vi ast = {take(cpu, (size_t)B * D * 4), take(gpu, (size_t)B * D * 4), (size_t)B * D};
    for (int s = 0; s < B; s++)
        for (int b = 0; b < D; b++) {
            act.c[s * D + b] = (int32_t)dqn_philox_below(10, 12, draw++, (uint32_t)sizes[b]);
            ast.c[s * D + b] = (int32_t)dqn_philox_below(10, 13, draw++, (uint32_t)sizes[b]);
        }
    CHECK_OK(gpu->ops->h2d(gpu, act.g, act.c, act.n * 4));
    CHECK_OK(gpu->ops->h2d(gpu, ast.g, ast.c, ast.n * 4));
    vf y = out_f((size_t)B * Dy * Nt), loss = out_f(1), dZ = out_f((size_t)B * N * A);
    vf per = out_f((size_t)B);
    const float *wc = weighted ? w.c : NULL, *wg = weighted ? w.g : NULL;
    float *pc = weighted ? per.c : NULL, *pg = weighted ? per.g : NULL;
    const dqn_target_io tc = {Zt.c, ast.c, R.c, disc.c, y.c}, tg = {Zt.g, ast.g, R.g, disc.g, y.g};
    CPU(targets_huber, &tc, Z.c, tau.c, act.c, wc, loss.c, dZ.c, pc, B, N, Nt, &br, mode, 1.0f);
    CHECK_OK(g->ops->targets_huber(g, &tg, Z.g, tau.g, act.g, wg, loss.g, dZ.g, pg, B, N, Nt, &br,
                                   mode, 1.0f));
    CHECK_OK(g->ops->sync(g));
    expect_f("targets_huber y", y, TOL_EW);
    expect_f("targets_huber loss", loss, TOL_RED);
    expect_f("targets_huber dZ", dZ, TOL_RED);
    if (weighted) expect_f("targets_huber per_sample", per, TOL_RED);
    vf outs[4] = {y, loss, dZ, per};
    void *snap[4];
    for (int k = 0; k < 3 + weighted; k++) {
        snap[k] = fetch(outs[k].g, outs[k].n * sizeof(float));
        poison(outs[k].g, outs[k].n * sizeof(float));
    }
    CHECK_OK(g->ops->iqn_targets(g, tg.Zt, tg.astar, tg.R, tg.discount, tg.y, B, Nt, &br, mode));
    CHECK_OK(g->ops->quantile_huber(g, Z.g, tau.g, act.g, y.g, wg, loss.g, dZ.g, pg, B, N, Nt,
                                    &br, mode, 1.0f));
    CHECK_OK(g->ops->sync(g));
    for (int k = 0; k < 3 + weighted; k++) {
        expect_same_bits("targets_huber against its two ops", outs[k].g, snap[k],
                         outs[k].n * sizeof(float));
        free(snap[k]);
    }
    release_all();
}

/* ---- optimizer ---- */

static void set_scalar_f(vf v, float x) {
    v.c[0] = x;
    upload(v);
}

static void test_optim(size_t n, int timed) {
    printf("optimizer n=%zu\n", n);
    vf x = in_f(n, -1, 1), norm = out_f(1);
    CPU(l2_norm, x.c, n, norm.c);
    CHECK_OK(gpu->ops->l2_norm(gpu, x.g, n, norm.g));
    expect_f("l2_norm", norm, TOL_RED);
    float *snap = fetch(norm.g, sizeof(float));
    poison(norm.g, sizeof(float));
    CHECK_OK(gpu->ops->l2_norm(gpu, x.g, n, norm.g));
    expect_same_bits("l2_norm", norm.g, snap, sizeof(float));
    free(snap);

    /* clip: scaling, no-op below the bound, disabled, non-finite norm */
    const float maxn = 3.0f, norms[4] = {7.5f, 1.5f, 7.5f, NAN}, maxes[4] = {maxn, maxn, 0.0f, maxn};
    const char *names[4] = {"clip_by_norm (scales)", "clip_by_norm (below the bound)",
                            "clip_by_norm (max_norm 0)", "clip_by_norm (NaN norm)"};
    vf nv = out_f(1);
    for (int k = 0; k < 4; k++) {
        set_scalar_f(nv, norms[k]);
        CPU(clip_by_norm, x.c, n, nv.c, maxes[k]);
        CHECK_OK(gpu->ops->clip_by_norm(gpu, x.g, n, nv.g, maxes[k]));
        expect_f(names[k], x, TOL_EW);
    }

    /* Adam: clip on and off, weight decay, steps 0 and 41, skip NULL / 0 / 1 */
    vf p = in_f(n, -1, 1), g = in_f(n, -1, 1), m = in_f(n, -0.1f, 0.1f), v = in_f(n, 0, 0.01f);
    vf gn = out_f(1);
    uint64_t *step_c = take(cpu, 8), *step_g = take(gpu, 8);
    int32_t *skip_c = take(cpu, 4), *skip_g = take(gpu, 4);
    struct { uint64_t step; float gnorm, max_norm, wd; int skip; const char *what; } cases[] = {
        {0, 25.0f, 10.0f, 0.0f, -1, "adam step 0 clipped, skip NULL"},
        {41, 4.0f, 10.0f, 0.01f, 0, "adam step 41 unclipped, wd, skip 0"},
        {41, 25.0f, 0.0f, 0.01f, 0, "adam clip disabled"},
        {7, 25.0f, 10.0f, 0.0f, 1, "adam skip 1 (nothing changes)"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        *step_c = cases[k].step;
        *skip_c = cases[k].skip;
        CHECK_OK(gpu->ops->h2d(gpu, step_g, step_c, 8));
        CHECK_OK(gpu->ops->h2d(gpu, skip_g, skip_c, 4));
        set_scalar_f(gn, cases[k].gnorm);
        const int32_t *sc = cases[k].skip < 0 ? NULL : skip_c, *sg = cases[k].skip < 0 ? NULL : skip_g;
        CPU(adam, p.c, g.c, m.c, v.c, n, 1e-3f, 0.9f, 0.999f, 1e-8f, cases[k].wd, gn.c,
             cases[k].max_norm, step_c, sc);
        CHECK_OK(gpu->ops->adam(gpu, p.g, g.g, m.g, v.g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, cases[k].wd,
                                gn.g, cases[k].max_norm, step_g, sg));
        char w[96];
        snprintf(w, sizeof w, "%s: p", cases[k].what);
        expect_f(w, p, TOL_EW);
        snprintf(w, sizeof w, "%s: m", cases[k].what);
        expect_f(w, m, TOL_EW);
        snprintf(w, sizeof w, "%s: v", cases[k].what);
        expect_f(w, v, TOL_EW);
    }

    /* target update: Polyak; hard copy due at step 3 (period 4), not due at step 4 */
    vf dst = in_f(n, -1, 1), src = in_f(n, -1, 1);
    *step_c = 4;
    CHECK_OK(gpu->ops->h2d(gpu, step_g, step_c, 8));
    CPU(target_update, dst.c, src.c, n, 0, 0.005f, step_c);
    CHECK_OK(gpu->ops->target_update(gpu, dst.g, src.g, n, 0, 0.005f, step_g));
    expect_f("target_update polyak", dst, TOL_EW);
    CPU(target_update, dst.c, src.c, n, 4, 0.0f, step_c);
    CHECK_OK(gpu->ops->target_update(gpu, dst.g, src.g, n, 4, 0.0f, step_g));
    expect_f("target_update hard, not due (step 4)", dst, TOL_EW);
    *step_c = 3;
    CHECK_OK(gpu->ops->h2d(gpu, step_g, step_c, 8));
    CPU(target_update, dst.c, src.c, n, 4, 0.0f, step_c);
    CHECK_OK(gpu->ops->target_update(gpu, dst.g, src.g, n, 4, 0.0f, step_g));
    expect_f("target_update hard, due (step 3)", dst, 0.0);

    CHECK_OK(gpu->ops->step_incr(gpu, step_g));
    CHECK_OK(cpu->ops->step_incr(cpu, step_c));
    uint64_t got = 0;
    CHECK_OK(gpu->ops->d2h(gpu, &got, step_g, 8));
    CHECK(got == 4 && *step_c == 4, "step_incr: cuda %llu, cpu %llu, want 4",
          (unsigned long long)got, (unsigned long long)*step_c);
    if (timed) {
        TIME_GPU("l2_norm", gpu->ops->l2_norm(gpu, x.g, n, norm.g));
        TIME_GPU("adam", gpu->ops->adam(gpu, p.g, g.g, m.g, v.g, n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                        0.01f, gn.g, 10.0f, step_g, NULL));
        TIME_GPU("target_update polyak", gpu->ops->target_update(gpu, dst.g, src.g, n, 0, 0.005f, step_g));
    }
    release_all();
}

/* ---- random numbers and gathers ---- */

static void test_rand(size_t n, int timed) {
    printf("rand n=%zu\n", n);
    uint64_t *step_c = take(cpu, 8), *step_g = take(gpu, 8);
    uint32_t *size_c = take(cpu, 4), *size_g = take(gpu, 4);
    *step_c = 7;
    *size_c = 1000003;
    CHECK_OK(gpu->ops->h2d(gpu, step_g, step_c, 8));
    CHECK_OK(gpu->ops->h2d(gpu, size_g, size_c, 4));
    uint64_t seed = 0x123456789abcULL;
    vf u = out_f(n);
    vi idx = out_i(n);
    CPU(rand_uniform, u.c, n, seed, DQN_STREAM_TAU_ONLINE, step_c, (uint64_t)n);
    CHECK_OK(gpu->ops->rand_uniform(gpu, u.g, n, seed, DQN_STREAM_TAU_ONLINE, step_g, (uint64_t)n));
    expect_f("rand_uniform", u, 0.0);
    CPU(rand_index, idx.c, n, seed, DQN_STREAM_REPLAY, step_c, 3 * (uint64_t)n, size_c);
    CHECK_OK(gpu->ops->rand_index(gpu, idx.g, n, seed, DQN_STREAM_REPLAY, step_g, 3 * (uint64_t)n, size_g));
    expect_i("rand_index", idx);

    int rows = 1000, row_len = 17, k = 513;
    vf srcf = in_f((size_t)rows * row_len, -5, 5), dstf = out_f((size_t)k * row_len);
    vi srci = in_i((size_t)rows * row_len, 1u << 30), dsti = out_i((size_t)k * row_len);
    vi gi = in_i((size_t)k, (uint32_t)rows);
    CPU(gather_f32, srcf.c, gi.c, dstf.c, k, row_len);
    CHECK_OK(gpu->ops->gather_f32(gpu, srcf.g, gi.g, dstf.g, k, row_len));
    expect_f("gather_f32", dstf, 0.0);
    CPU(gather_i32, srci.c, gi.c, dsti.c, k, row_len);
    CHECK_OK(gpu->ops->gather_i32(gpu, srci.g, gi.g, dsti.g, k, row_len));
    expect_i("gather_i32", dsti);

    /* the fused sample: indices, then the five gathers, equal to the CPU's */
    int obs = 7, D = 3, B = (int)(n < 4096 ? n : 4096);
    *size_c = (uint32_t)rows - 13;
    CHECK_OK(gpu->ops->h2d(gpu, size_g, size_c, 4));
    vf so = in_f((size_t)rows * obs, -1, 1), sno = in_f((size_t)rows * obs, -1, 1);
    vf sR = in_f((size_t)rows, -1, 1), sd = in_f((size_t)rows, 0, 1);
    vi sa = in_i((size_t)rows * D, 5);
    vi bidx = out_i((size_t)B), ba = out_i((size_t)B * D);
    vf bx = out_f((size_t)B * obs), bxn = out_f((size_t)B * obs), bR = out_f((size_t)B),
       bd = out_f((size_t)B);
    const dqn_sample_src src_c = {so.c, sno.c, sR.c, sd.c, sa.c, size_c, obs, D, NULL};
    const dqn_sample_src src_g = {so.g, sno.g, sR.g, sd.g, sa.g, size_g, obs, D, NULL};
    const dqn_sample_dst dst_c = {bidx.c, ba.c, bx.c, bxn.c, bR.c, bd.c};
    const dqn_sample_dst dst_g = {bidx.g, ba.g, bx.g, bxn.g, bR.g, bd.g};
    CPU(sample_batch, &src_c, &dst_c, B, seed, step_c);
    CHECK_OK(gpu->ops->sample_batch(gpu, &src_g, &dst_g, B, seed, step_g));
    expect_i("sample_batch idx", bidx);
    expect_i("sample_batch act", ba);
    expect_f("sample_batch x", bx, 0.0);
    expect_f("sample_batch xn", bxn, 0.0);
    expect_f("sample_batch R", bR, 0.0);
    expect_f("sample_batch disc", bd, 0.0);

    /* three draws in one launch, of unequal sizes */
    vf t0 = out_f(n), t1 = out_f(n / 2 + 3), t2 = out_f(5);
    const dqn_draws dr_c = {3, {t0.c, t1.c, t2.c}, {t0.n, t1.n, t2.n}, {2, 3, 4}, {t0.n, t1.n, t2.n}};
    const dqn_draws dr_g = {3, {t0.g, t1.g, t2.g}, {t0.n, t1.n, t2.n}, {2, 3, 4}, {t0.n, t1.n, t2.n}};
    CPU(rand_uniform_multi, &dr_c, seed, step_c);
    CHECK_OK(gpu->ops->rand_uniform_multi(gpu, &dr_g, seed, step_g));
    expect_f("rand_uniform_multi 0", t0, 0.0);
    expect_f("rand_uniform_multi 1", t1, 0.0);
    expect_f("rand_uniform_multi 2", t2, 0.0);
    /* both at once (fused, issue 3): the same draws, into outputs poisoned again */
    vf *outs[] = {&bx, &bxn, &bR, &bd, &t0, &t1, &t2};
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) poison(outs[k]->g, outs[k]->n * 4);
    poison(bidx.g, bidx.n * 4);
    poison(ba.g, ba.n * 4);
    CHECK_OK(gpu->ops->sample_draws(gpu, &src_g, &dst_g, B, &dr_g, seed, step_g));
    expect_i("sample_draws idx", bidx);
    expect_i("sample_draws act", ba);
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) expect_f("sample_draws", *outs[k], 0.0);
    if (timed) {
        TIME_GPU("sample_draws", gpu->ops->sample_draws(gpu, &src_g, &dst_g, B, &dr_g, seed, step_g));
        TIME_GPU("sample_batch", gpu->ops->sample_batch(gpu, &src_g, &dst_g, B, seed, step_g));
        TIME_GPU("rand_uniform_multi", gpu->ops->rand_uniform_multi(gpu, &dr_g, seed, step_g));
        TIME_GPU("rand_uniform", gpu->ops->rand_uniform(gpu, u.g, n, seed, 2, step_g, (uint64_t)n));
        TIME_GPU("rand_index", gpu->ops->rand_index(gpu, idx.g, n, seed, 5, step_g, (uint64_t)n, size_g));
    }
    release_all();
}

/* ---- graphs: two captured stages, composed, replayed three times ---- */

static void test_graph(void) {
    const int M = 301, K = 64, N = 33;
    const uint64_t seed = 42;
    printf("graph: [rand_uniform(step) + linear_fwd] then [step_incr], replayed 3 times\n");
    uint64_t *step_g = take(gpu, 8), *step_c = take(cpu, 8);
    vf W = in_f((size_t)N * K, -1, 1), b = in_f((size_t)N, -1, 1);
    vf U = out_f((size_t)M * K), Y = out_f((size_t)M * N);
    *step_c = 0;
    CHECK_OK(gpu->ops->h2d(gpu, step_g, step_c, 8));
    void *stage[2] = {NULL, NULL}, *exec = NULL;
    CHECK_OK(gpu->ops->capture_begin(gpu));
    CHECK_OK(gpu->ops->rand_uniform(gpu, U.g, U.n, seed, DQN_STREAM_TAU_ONLINE, step_g, U.n));
    CHECK_OK(gpu->ops->linear_fwd(gpu, U.g, W.g, b.g, Y.g, M, K, N));
    CHECK_OK(gpu->ops->capture_end(gpu, &stage[0]));
    CHECK_OK(gpu->ops->capture_begin(gpu));
    CHECK_OK(gpu->ops->step_incr(gpu, step_g));
    CHECK_OK(gpu->ops->capture_end(gpu, &stage[1]));
    CHECK_OK(gpu->ops->graph_compose(gpu, stage, 2, &exec));
    /* capture only records: nothing ran, the outputs are still poisoned */
    float *h = fetch(U.g, sizeof(float));
    CHECK(isnan(h[0]), "capture executed the ops");
    free(h);
    float *prev = NULL;
    for (uint64_t s = 0; s < 3; s++) {
        poison(U.g, U.n * sizeof(float));
        poison(Y.g, Y.n * sizeof(float));
        CHECK_OK(gpu->ops->graph_launch(gpu, exec));
        CHECK_OK(gpu->ops->sync(gpu));
        *step_c = s;
        CPU(rand_uniform, U.c, U.n, seed, DQN_STREAM_TAU_ONLINE, step_c, U.n);
        CPU(linear_fwd, U.c, W.c, b.c, Y.c, M, K, N);
        char w[64];
        snprintf(w, sizeof w, "replay %llu: rand_uniform at step %llu", (unsigned long long)s,
                 (unsigned long long)s);
        expect_f(w, U, 0.0);
        snprintf(w, sizeof w, "replay %llu: linear_fwd", (unsigned long long)s);
        expect_f(w, Y, TOL_RED);
        float *cur = fetch(U.g, U.n * sizeof(float));
        if (prev) CHECK(memcmp(cur, prev, U.n * sizeof(float)) != 0, "replay %llu drew the same numbers", (unsigned long long)s);
        free(prev);
        prev = cur;
    }
    free(prev);
    uint64_t got = 0;
    CHECK_OK(gpu->ops->d2h(gpu, &got, step_g, 8));
    CHECK(got == 3, "step after 3 replays: %llu", (unsigned long long)got);
    gpu->ops->graph_destroy(gpu, exec, 1);
    gpu->ops->graph_destroy(gpu, stage[0], 0);
    gpu->ops->graph_destroy(gpu, stage[1], 0);

    /* replays of the reductions are bit-identical: linear_bwd (db) + quantile loss + l2_norm */
    const int sz[3] = {3, 5, 5};
    dqn_branches br;
    dqn_branches_init(&br, 3, sz);
    const int B = 64, T = 8;
    vf X = in_f((size_t)B * T * K, -1, 1), dY = in_f((size_t)B * T * N, -1, 1);
    vf dW = out_f((size_t)N * K), db = out_f((size_t)N), gn = out_f(1);
    vf Z = in_f((size_t)B * T * br.A, -2, 2), tau = in_f((size_t)B * T, 0, 1);
    vf y = in_f((size_t)B * T, -2, 2), loss = out_f(1), dZ = out_f((size_t)B * T * br.A);
    vi act = in_i((size_t)B * 3, 3);
    void *g1 = NULL, *ex1 = NULL;
    CHECK_OK(gpu->ops->capture_begin(gpu));
    CHECK_OK(gpu->ops->linear_bwd(gpu, X.g, W.g, dY.g, NULL, dW.g, db.g, B * T, K, N));
    CHECK_OK(gpu->ops->quantile_huber(gpu, Z.g, tau.g, act.g, y.g, NULL, loss.g, dZ.g, NULL, B, T,
                                      T, &br, DQN_TARGET_MEAN, 1.0f));
    CHECK_OK(gpu->ops->l2_norm(gpu, dW.g, dW.n, gn.g));
    CHECK_OK(gpu->ops->capture_end(gpu, &g1));
    CHECK_OK(gpu->ops->graph_compose(gpu, &g1, 1, &ex1));
    CHECK_OK(gpu->ops->graph_launch(gpu, ex1));
    float *s_db = fetch(db.g, db.n * 4), *s_loss = fetch(loss.g, 4), *s_gn = fetch(gn.g, 4);
    CPU(linear_bwd, X.c, W.c, dY.c, NULL, dW.c, db.c, B * T, K, N);
    CPU(l2_norm, dW.c, dW.n, gn.c);
    expect_f("graph: linear_bwd db", db, TOL_RED);
    expect_f("graph: l2_norm of dW", gn, TOL_RED);
    for (int r = 0; r < 2; r++) {
        poison(db.g, db.n * 4);
        poison(loss.g, 4);
        poison(gn.g, 4);
        CHECK_OK(gpu->ops->graph_launch(gpu, ex1));
        expect_same_bits("graph replay: db", db.g, s_db, db.n * 4);
        expect_same_bits("graph replay: loss", loss.g, s_loss, 4);
        expect_same_bits("graph replay: l2_norm", gn.g, s_gn, 4);
    }
    free(s_db);
    free(s_loss);
    free(s_gn);
    gpu->ops->graph_destroy(gpu, ex1, 1);
    gpu->ops->graph_destroy(gpu, g1, 0);
    release_all();
}

/* ---- fused ops (issue 3) ---- */

/* a post-ReLU input: uniform(-1, 1) through ReLU on the CPU, then uploaded (exact zeros) */
static vf in_relu(size_t n) {
    vf v = in_f(n, -1, 1);
    CPU(relu_fwd, v.c, v.c, n);
    upload(v);
    return v;
}

/* heads_fwd, l2_norm2 and heads_bwd (clip 0: off, 1: both norms clipped); dV and dAdv must stay
 * as they were; the reductions bit-identical on a rerun */
static void test_fused_heads(int R, int H, int D, const int *sizes, int clip, int timed) {
    dqn_branches br;
    dqn_branches_init(&br, D, sizes);
    const int A = br.A;
    printf("fused heads R=%d H=%d D=%d A=%d clip %d\n", R, H, D, A, clip);
    vf hva = in_relu((size_t)R * 2 * H), Wv2 = in_f((size_t)H, -1, 1), bv2 = in_f(1, -1, 1);
    vf Wa2 = in_f((size_t)A * H, -1, 1), ba2 = in_f((size_t)A, -1, 1);
    vf V = out_f((size_t)R), Adv = out_f((size_t)R * A), Z = out_f((size_t)R * A);
    const int gemm = (long)R * H >= HEADS_GEMM_ELEMS;
    CPU(heads_fwd, hva.c, Wv2.c, bv2.c, Wa2.c, ba2.c, V.c, Adv.c, Z.c, R, H, &br);
    CHECK_OK(gpu->ops->heads_fwd(gpu, hva.g, Wv2.g, bv2.g, Wa2.g, ba2.g, V.g, Adv.g, Z.g, R, H, &br));
    printf("  heads_fwd path: %s\n", gemm ? "cuBLAS GEMMs + combine" : "warp kernel");
    vf fo[3] = {V, Adv, Z};
    const char *fname[3] = {"V", "Adv", "Z"};
    double e32[3];
    float *snap[3];
    char w[96];
    for (int i = 0; i < 3; i++) {
        snprintf(w, sizeof w, "heads_fwd %s", fname[i]);
        e32[i] = expect_f(w, fo[i], TOL_RED);
        /* true fp32 on the fp32 backend: TF32 would be about 1e-4 off at these H */
        if (gemm)
            CHECK(e32[i] < 1e-5, "fp32 heads_fwd %s error %.2e looks like TF32", fname[i], e32[i]);
        snap[i] = fetch(fo[i].g, fo[i].n * sizeof(float));
        poison(fo[i].g, fo[i].n * sizeof(float));
    }
    CHECK_OK(gpu->ops->heads_fwd(gpu, hva.g, Wv2.g, bv2.g, Wa2.g, ba2.g, V.g, Adv.g, Z.g, R, H, &br));
    for (int i = 0; i < 3; i++) {
        snprintf(w, sizeof w, "heads_fwd %s", fname[i]);
        expect_same_bits(w, fo[i].g, snap[i], fo[i].n * sizeof(float));
        poison(fo[i].g, fo[i].n * sizeof(float));
    }
    /* the TF32 backend: its GEMM path takes the backend's math; the warp kernel is fp32 in
     * either, so below the threshold the bits must equal the fp32 backend's */
    CHECK_OK(gpu_tf32->ops->heads_fwd(gpu_tf32, hva.g, Wv2.g, bv2.g, Wa2.g, ba2.g, V.g, Adv.g, Z.g,
                                      R, H, &br));
    CHECK_OK(gpu_tf32->ops->sync(gpu_tf32));
    for (int i = 0; i < 3; i++) {
        snprintf(w, sizeof w, "heads_fwd %s (tf32 backend)", fname[i]);
        if (!gemm) {
            expect_same_bits(w, fo[i].g, snap[i], fo[i].n * sizeof(float));
        } else {
            double e = expect_f(w, fo[i], TOL_TF32);
            /* cuBLAS may keep an N = 1 or N = A GEMM off the tensor cores: reported, not required */
            printf("  %-44s %s\n", "  (TF32 in use)", e > e32[i] ? "yes" : "no: cuBLAS chose fp32");
        }
        free(snap[i]);
    }
    /* the outputs as the fp32 backend left them, for the timings below */
    CHECK_OK(gpu->ops->heads_fwd(gpu, hva.g, Wv2.g, bv2.g, Wa2.g, ba2.g, V.g, Adv.g, Z.g, R, H, &br));

    vf dV = in_f((size_t)R, -1, 1), dAdv = in_f((size_t)R * A, -1, 1), norms = out_f(2);
    CPU(l2_norm2, dV.c, dV.n, dAdv.c, dAdv.n, norms.c, NULL);
    CHECK_OK(gpu->ops->l2_norm2(gpu, dV.g, dV.n, dAdv.g, dAdv.n, norms.g, NULL));
    expect_f("l2_norm2", norms, TOL_RED);
    float *nsnap = fetch(norms.g, 2 * sizeof(float));
    poison(norms.g, 2 * sizeof(float));
    CHECK_OK(gpu->ops->l2_norm2(gpu, dV.g, dV.n, dAdv.g, dAdv.n, norms.g, NULL));
    expect_same_bits("l2_norm2", norms.g, nsnap, 2 * sizeof(float));
    free(nsnap);
    upload(norms);   /* both backends clip by the same norms */
    float max_norm = clip ? 0.5f * fminf(norms.c[0], norms.c[1]) : 0.0f;
    vf dhva = out_f((size_t)R * 2 * H), dWv2 = out_f((size_t)H), dbv2 = out_f(1);
    vf dWa2 = out_f((size_t)A * H), dba2 = out_f((size_t)A), dbva = out_f(2 * (size_t)H);
    CPU(heads_bwd, hva.c, Wv2.c, Wa2.c, dV.c, dAdv.c, norms.c, max_norm, dhva.c, dbva.c, dWv2.c,
        dbv2.c, dWa2.c, dba2.c, R, H, A);
    CHECK_OK(gpu->ops->heads_bwd(gpu, hva.g, Wv2.g, Wa2.g, dV.g, dAdv.g, norms.g, max_norm, dhva.g,
                                 dbva.g, dWv2.g, dbv2.g, dWa2.g, dba2.g, R, H, A));
    expect_f("heads_bwd dhva", dhva, TOL_RED);
    expect_f("heads_bwd dbva", dbva, TOL_RED);
    expect_f("heads_bwd dWv2", dWv2, TOL_RED);
    expect_f("heads_bwd dbv2", dbv2, TOL_RED);
    expect_f("heads_bwd dWa2", dWa2, TOL_RED);
    expect_f("heads_bwd dba2", dba2, TOL_RED);
    expect_f("heads_bwd leaves dV as it was", dV, 0.0);
    expect_f("heads_bwd leaves dAdv as it was", dAdv, 0.0);
    float *wsnap = fetch(dWa2.g, dWa2.n * sizeof(float)), *bsnap = fetch(dba2.g, dba2.n * sizeof(float));
    poison(dWa2.g, dWa2.n * sizeof(float));
    poison(dba2.g, dba2.n * sizeof(float));
    /* without dbva (a shorter part row): the same sums, and dbva left alone */
    float *csnap = fetch(dbva.g, dbva.n * sizeof(float));
    CHECK_OK(gpu->ops->heads_bwd(gpu, hva.g, Wv2.g, Wa2.g, dV.g, dAdv.g, norms.g, max_norm, dhva.g,
                                 NULL, dWv2.g, dbv2.g, dWa2.g, dba2.g, R, H, A));
    expect_same_bits("heads_bwd without dbva leaves it", dbva.g, csnap, dbva.n * sizeof(float));
    free(csnap);
    expect_same_bits("heads_bwd dWa2", dWa2.g, wsnap, dWa2.n * sizeof(float));
    expect_same_bits("heads_bwd dba2", dba2.g, bsnap, dba2.n * sizeof(float));
    free(wsnap);
    free(bsnap);
    if (timed) {
        TIME_GPU("heads_fwd", gpu->ops->heads_fwd(gpu, hva.g, Wv2.g, bv2.g, Wa2.g, ba2.g, V.g,
                                                  Adv.g, Z.g, R, H, &br));
        TIME_ON(gpu_tf32, "heads_fwd tf32",
                gpu_tf32->ops->heads_fwd(gpu_tf32, hva.g, Wv2.g, bv2.g, Wa2.g, ba2.g, V.g, Adv.g,
                                         Z.g, R, H, &br));
        TIME_GPU("l2_norm2", gpu->ops->l2_norm2(gpu, dV.g, dV.n, dAdv.g, dAdv.n, norms.g, NULL));
        TIME_GPU("heads_bwd", gpu->ops->heads_bwd(gpu, hva.g, Wv2.g, Wa2.g, dV.g, dAdv.g, norms.g,
                                                  max_norm, dhva.g, dbva.g, dWv2.g, dbv2.g,
                                                  dWa2.g, dba2.g, R, H, A));
    }
    release_all();
}

static void test_fused_grn(int M, int d, int timed) {
    printf("fused grn M=%d d=%d\n", M, d);
    size_t n = (size_t)M * d;
    vf h = in_f(n, -1, 1), g = in_f(2 * n, -3, 3), gamma = in_f((size_t)d, 0.5f, 1.5f);
    vf beta = in_f((size_t)d, -0.5f, 0.5f);
    vf r = out_f(n), y = out_f(n), mean = out_f((size_t)M), rstd = out_f((size_t)M);
    CPU(grn_gate_ln_fwd, h.c, g.c, gamma.c, beta.c, r.c, y.c, mean.c, rstd.c, M, d);
    CHECK_OK(gpu->ops->grn_gate_ln_fwd(gpu, h.g, g.g, gamma.g, beta.g, r.g, y.g, mean.g, rstd.g, M, d));
    expect_f("grn_gate_ln_fwd r", r, TOL_EW);
    expect_f("grn_gate_ln_fwd y", y, TOL_RED);
    expect_f("grn_gate_ln_fwd mean", mean, TOL_RED);
    expect_f("grn_gate_ln_fwd rstd", rstd, TOL_RED);
    upload(r);
    upload(mean);
    upload(rstd);
    vf dy = in_f(n, -1, 1), dres = out_f(n), dg = out_f(2 * n), dgamma = out_f((size_t)d);
    vf dbeta = out_f((size_t)d);
    CPU(grn_ln_gate_bwd, r.c, gamma.c, mean.c, rstd.c, g.c, dy.c, dres.c, dg.c, dgamma.c, dbeta.c,
        M, d, NULL);
    CHECK_OK(gpu->ops->grn_ln_gate_bwd(gpu, r.g, gamma.g, mean.g, rstd.g, g.g, dy.g, dres.g, dg.g,
                                       dgamma.g, dbeta.g, M, d, NULL));
    expect_f("grn_ln_gate_bwd dres", dres, TOL_RED);
    expect_f("grn_ln_gate_bwd dg", dg, TOL_RED);
    expect_f("grn_ln_gate_bwd dgamma", dgamma, TOL_RED);
    expect_f("grn_ln_gate_bwd dbeta", dbeta, TOL_RED);
    float *snap = fetch(dgamma.g, (size_t)d * sizeof(float));
    poison(dgamma.g, (size_t)d * sizeof(float));
    CHECK_OK(gpu->ops->grn_ln_gate_bwd(gpu, r.g, gamma.g, mean.g, rstd.g, g.g, dy.g, dres.g, dg.g,
                                       dgamma.g, dbeta.g, M, d, NULL));
    expect_same_bits("grn_ln_gate_bwd dgamma", dgamma.g, snap, (size_t)d * sizeof(float));
    free(snap);
    if (timed) {
        TIME_GPU("grn_gate_ln_fwd", gpu->ops->grn_gate_ln_fwd(gpu, h.g, g.g, gamma.g, beta.g, r.g,
                                                              y.g, mean.g, rstd.g, M, d));
        TIME_GPU("grn_ln_gate_bwd", gpu->ops->grn_ln_gate_bwd(gpu, r.g, gamma.g, mean.g, rstd.g,
                                                              g.g, dy.g, dres.g, dg.g, dgamma.g,
                                                              dbeta.g, M, d, NULL));
    }
    release_all();
}

/* iqn_fwd / iqn_bwd: the CUDA kernels keep the CPU's rounding order, so all but dh are exact */
/* trunk_fwd on backend g against the CPU's sequence (every output, poisoned first) and against
 * g's own sequence (dqn_trunk_fwd_seq through g's table) bit for bit where bits is set: the
 * one-kernel path computes the own GEMM kernel's sums in its order. in 0: no input layer, h0 is
 * the first block's input. */
static void test_trunk(dqn_backend *g, int M, int obs, int d, int L, int in, int bits,
                       double tol, int timed) {
    printf("trunk_fwd M=%d obs=%d d=%d L=%d%s%s\n", M, obs, d, L, in ? "" : " (no input layer)",
           g == gpu_tf32 ? " (tf32 backend)" : "");
    const size_t n = (size_t)M * d;
    vf x = in_f((size_t)M * obs, -2, 2), Win = in_f((size_t)d * obs, -0.5f, 0.5f);
    vf bin = in_f((size_t)d, -0.5f, 0.5f);
    vf h0 = in ? out_f(n) : in_f(n, -2, 2);
    vf Wa[DQN_TRUNK_MAX_GRN], ba[DQN_TRUNK_MAX_GRN], Wb[DQN_TRUNK_MAX_GRN], bb[DQN_TRUNK_MAX_GRN];
    vf ga[DQN_TRUNK_MAX_GRN], bt[DQN_TRUNK_MAX_GRN], e[DQN_TRUNK_MAX_GRN], gg[DQN_TRUNK_MAX_GRN];
    vf r[DQN_TRUNK_MAX_GRN], y[DQN_TRUNK_MAX_GRN], mu[DQN_TRUNK_MAX_GRN], rs[DQN_TRUNK_MAX_GRN];
    const float ws = 1.5f / sqrtf((float)d);
    dqn_trunk_io tc = {.x = x.c, .W_in = in ? Win.c : NULL, .b_in = bin.c, .h0 = h0.c, .M = M,
                       .obs = obs, .d = d, .L = L};
    dqn_trunk_io tg = {.x = x.g, .W_in = in ? Win.g : NULL, .b_in = bin.g, .h0 = h0.g, .M = M,
                       .obs = obs, .d = d, .L = L};
    for (int l = 0; l < L; l++) {
        Wa[l] = in_f((size_t)d * d, -ws, ws), ba[l] = in_f((size_t)d, -0.5f, 0.5f);
        Wb[l] = in_f((size_t)2 * d * d, -ws, ws), bb[l] = in_f((size_t)2 * d, -0.5f, 0.5f);
        ga[l] = in_f((size_t)d, 0.5f, 1.5f), bt[l] = in_f((size_t)d, -0.5f, 0.5f);
        e[l] = out_f(n), gg[l] = out_f(2 * n), r[l] = out_f(n), y[l] = out_f(n);
        mu[l] = out_f((size_t)M), rs[l] = out_f((size_t)M);
        tc.grn[l] = (dqn_grn_io){Wa[l].c, ba[l].c, Wb[l].c, bb[l].c, ga[l].c, bt[l].c,
                                 e[l].c,  gg[l].c, r[l].c,  y[l].c,  mu[l].c, rs[l].c};
        tg.grn[l] = (dqn_grn_io){Wa[l].g, ba[l].g, Wb[l].g, bb[l].g, ga[l].g, bt[l].g,
                                 e[l].g,  gg[l].g, r[l].g,  y[l].g,  mu[l].g, rs[l].g};
    }
    CPU(trunk_fwd, &tc);
    CHECK_OK(g->ops->trunk_fwd(g, &tg));
    CHECK_OK(g->ops->sync(g));
    vf outs[1 + 6 * DQN_TRUNK_MAX_GRN];
    const char *names[6] = {"e", "g", "r", "y", "mean", "rstd"};
    char what[64];
    int no = 0;
    if (in) {
        expect_f("trunk_fwd h0", h0, tol);
        outs[no++] = h0;
    }
    for (int l = 0; l < L; l++) {
        vf o[6] = {e[l], gg[l], r[l], y[l], mu[l], rs[l]};
        for (int k = 0; k < 6; k++) {
            snprintf(what, sizeof what, "trunk_fwd block %d %s", l, names[k]);
            expect_f(what, o[k], tol);
            outs[no++] = o[k];
        }
    }
    if (bits) {   /* the sequence into the same buffers, from a snapshot of the op's */
        void *snap[1 + 6 * DQN_TRUNK_MAX_GRN];
        for (int k = 0; k < no; k++) {
            snap[k] = fetch(outs[k].g, outs[k].n * sizeof(float));
            poison(outs[k].g, outs[k].n * sizeof(float));
        }
        CHECK_OK(dqn_trunk_fwd_seq(g, &tg));
        for (int k = 0; k < no; k++) {
            expect_same_bits("trunk_fwd against its sequence", outs[k].g, snap[k],
                             outs[k].n * sizeof(float));
            free(snap[k]);
        }
    }
    if (timed) {
        TIME_ON(g, "trunk_fwd", g->ops->trunk_fwd(g, &tg));
        TIME_ON(g, "trunk_fwd's sequence", dqn_trunk_fwd_seq(g, &tg));
    }
    release_all();
}

static void test_fused_iqn(int B, int T, int d, int timed) {
    printf("fused iqn B=%d T=%d d=%d\n", B, T, d);
    size_t nh = (size_t)B * d, nz = nh * T;
    vf h = in_f(nh, -1, 1), phi = in_relu(nz), z = out_f(nz), cat = out_f(2 * nz);
    CPU(iqn_fwd, h.c, phi.c, z.c, cat.c, B, T, d);
    CHECK_OK(gpu->ops->iqn_fwd(gpu, h.g, phi.g, z.g, cat.g, B, T, d));
    expect_f("iqn_fwd z", z, 0.0);
    expect_f("iqn_fwd cat", cat, 0.0);
    poison(z.g, nz * sizeof(float));
    CHECK_OK(gpu->ops->iqn_fwd(gpu, h.g, phi.g, z.g, NULL, B, T, d));
    expect_f("iqn_fwd z (no cat)", z, 0.0);
    vf dcat = in_f(2 * nz, -1, 1), dz = out_f(nz), dh = out_f(nh), dphi = out_f(nz);
    vf dphib = out_f((size_t)d);
    CPU(iqn_bwd, dcat.c, h.c, phi.c, dz.c, dh.c, dphi.c, dphib.c, B, T, d, NULL);
    CHECK_OK(
        gpu->ops->iqn_bwd(gpu, dcat.g, h.g, phi.g, dz.g, dh.g, dphi.g, dphib.g, B, T, d, NULL));
    expect_f("iqn_bwd dz (dcat)", dz, 0.0);
    expect_f("iqn_bwd dh (dcat)", dh, TOL_RED);
    expect_f("iqn_bwd dphi (dcat)", dphi, 0.0);
    expect_f("iqn_bwd dphi_b (dcat)", dphib, TOL_RED);
    poison(dz.g, nz * sizeof(float));
    CHECK_OK(gpu->ops->iqn_bwd(gpu, dcat.g, h.g, phi.g, dz.g, dh.g, dphi.g, NULL, B, T, d, NULL));
    expect_f("iqn_bwd dz (dcat, no dphi_b)", dz, 0.0);
    vf dz2 = in_f(nz, -1, 1);
    poison(dh.g, nh * sizeof(float));
    poison(dphi.g, nz * sizeof(float));
    CPU(iqn_bwd, NULL, h.c, phi.c, dz2.c, dh.c, dphi.c, NULL, B, T, d, NULL);
    CHECK_OK(gpu->ops->iqn_bwd(gpu, NULL, h.g, phi.g, dz2.g, dh.g, dphi.g, NULL, B, T, d, NULL));
    expect_f("iqn_bwd dh (no dcat)", dh, TOL_RED);
    expect_f("iqn_bwd dphi (no dcat)", dphi, 0.0);
    if (timed) {
        TIME_GPU("iqn_fwd (z and cat)", gpu->ops->iqn_fwd(gpu, h.g, phi.g, z.g, cat.g, B, T, d));
        TIME_GPU("iqn_bwd (dcat)", gpu->ops->iqn_bwd(gpu, dcat.g, h.g, phi.g, dz.g, dh.g, dphi.g,
                                                     NULL, B, T, d, NULL));
        TIME_GPU("iqn_bwd (dcat, dphi_b)", gpu->ops->iqn_bwd(gpu, dcat.g, h.g, phi.g, dz.g, dh.g,
                                                             dphi.g, dphib.g, B, T, d, NULL));
    }
    release_all();
}

/* adam_target_step: hard copy due / not due, Polyak, skip; the step rises by exactly 1 however
 * many blocks run */
static void test_fused_optim(size_t n, int timed) {
    printf("fused optimizer n=%zu\n", n);
    vf p = in_f(n, -1, 1), g = in_f(n, -1, 1), m = in_f(n, -0.1f, 0.1f), v = in_f(n, 0, 0.01f);
    vf t = in_f(n, -1, 1), gn = out_f(1);
    uint64_t *step_c = take(cpu, 8), *step_g = take(gpu, 8);
    int32_t *skip_c = take(cpu, 4), *skip_g = take(gpu, 4);
    const struct { uint64_t step; int period; float tau; int skip; const char *what; } cases[] = {
        {3, 4, 0.0f, 0, "adam_target_step hard copy due"},
        {4, 4, 0.0f, 0, "adam_target_step hard copy not due"},
        {9, 0, 0.05f, 0, "adam_target_step polyak"},
        {7, 2, 0.0f, 1, "adam_target_step skip, copy due"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        *step_c = cases[k].step;
        *skip_c = cases[k].skip;
        CHECK_OK(gpu->ops->h2d(gpu, step_g, step_c, 8));
        CHECK_OK(gpu->ops->h2d(gpu, skip_g, skip_c, 4));
        gn.c[0] = 25.0f;
        upload(gn);
        CPU(adam_target_step, p.c, g.c, m.c, v.c, t.c, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, gn.c,
            10.0f, cases[k].period, cases[k].tau, step_c, skip_c);
        CHECK_OK(gpu->ops->adam_target_step(gpu, p.g, g.g, m.g, v.g, t.g, n, 1e-3f, 0.9f, 0.999f,
                                            1e-8f, 0.01f, gn.g, 10.0f, cases[k].period,
                                            cases[k].tau, step_g, skip_g));
        char w[96];
        snprintf(w, sizeof w, "%s: p", cases[k].what);
        expect_f(w, p, TOL_EW);
        snprintf(w, sizeof w, "%s: m, v", cases[k].what);
        expect_f(w, m, TOL_EW);
        expect_f(w, v, TOL_EW);
        snprintf(w, sizeof w, "%s: target", cases[k].what);
        expect_f(w, t, TOL_EW);
        uint64_t got = 0;
        CHECK_OK(gpu->ops->d2h(gpu, &got, step_g, 8));
        CHECK(got == cases[k].step + 1 && *step_c == got, "%s: step cuda %llu, cpu %llu, want %llu",
              cases[k].what, (unsigned long long)got, (unsigned long long)*step_c,
              (unsigned long long)cases[k].step + 1);
    }
    if (timed)
        TIME_GPU("adam_target_step", gpu->ops->adam_target_step(gpu, p.g, g.g, m.g, v.g, t.g, n,
                                                                1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f,
                                                                gn.g, 10.0f, 0, 0.005f, step_g,
                                                                NULL));
    release_all();
}

/* the bottleneck split's ops: GEMMs on a column block (ldw > K) of a wider weight, dX accumulated,
 * dW written into strided rows (the other columns kept), the broadcast add + ReLU, and the
 * ReLU mask with the tau sums (exact: the CPU's rounding order) */
static void test_fused_split(int B, int T, int d, int m, int timed) {
    printf("bottleneck split B=%d T=%d d=%d m=%d\n", B, T, d, m);
    const int R = B * T, ldw = 2 * d;
    vf z = in_f((size_t)R * d, -1, 1), h = in_f((size_t)B * d, -1, 1);
    vf W = in_f((size_t)m * ldw, -1, 1), b = in_f((size_t)m, -0.5f, 0.5f);
    vf hb = out_f((size_t)B * m), u = out_f((size_t)R * m);
    CPU(linear_ld_fwd, h.c, W.c + d, ldw, b.c, hb.c, B, d, m, DQN_ACT_NONE);
    CHECK_OK(gpu->ops->linear_ld_fwd(gpu, h.g, W.g + d, ldw, b.g, hb.g, B, d, m, DQN_ACT_NONE));
    expect_f("linear_ld_fwd (h half, bias)", hb, TOL_RED);
    upload(hb);
    CPU(linear_ld_fwd, z.c, W.c, ldw, NULL, u.c, R, d, m, DQN_ACT_NONE);
    CHECK_OK(gpu->ops->linear_ld_fwd(gpu, z.g, W.g, ldw, NULL, u.g, R, d, m, DQN_ACT_NONE));
    expect_f("linear_ld_fwd (z half)", u, TOL_RED);
    upload(u);
    CPU(bcast_add_act, hb.c, u.c, B, T, m, DQN_ACT_RELU);
    CHECK_OK(gpu->ops->bcast_add_act(gpu, hb.g, u.g, B, T, m, DQN_ACT_RELU));
    expect_f("bcast_add_act relu", u, 0.0);
    vf du = in_f((size_t)R * m, -1, 1), dus = out_f((size_t)B * m);
    CPU(relu_bwd_tausum, u.c, du.c, dus.c, B, T, m, NULL);
    CHECK_OK(gpu->ops->relu_bwd_tausum(gpu, u.g, du.g, dus.g, B, T, m, NULL));
    expect_f("relu_bwd_tausum du", du, 0.0);
    expect_f("relu_bwd_tausum dus", dus, 0.0);
    vf dz = out_f((size_t)R * d), dh = in_f((size_t)B * d, -1, 1);
    vf dW = in_f((size_t)m * ldw, -1, 1), db = out_f((size_t)m);
    CPU(linear_ld_bwd, z.c, W.c, ldw, du.c, dz.c, 0, dW.c, NULL, R, d, m);
    CHECK_OK(gpu->ops->linear_ld_bwd(gpu, z.g, W.g, ldw, du.g, dz.g, 0, dW.g, NULL, R, d, m));
    expect_f("linear_ld_bwd dz", dz, TOL_RED);
    CPU(linear_ld_bwd, h.c, W.c + d, ldw, dus.c, dh.c, 1, dW.c + d, db.c, B, d, m);
    CHECK_OK(gpu->ops->linear_ld_bwd(gpu, h.g, W.g + d, ldw, dus.g, dh.g, 1, dW.g + d, db.g, B, d, m));
    expect_f("linear_ld_bwd dh (accumulated)", dh, TOL_RED);
    expect_f("linear_ld_bwd dW (both halves, strided)", dW, TOL_RED);
    expect_f("linear_ld_bwd db", db, TOL_RED);
    if (timed) {
        TIME_GPU("linear_ld_fwd (z half)", gpu->ops->linear_ld_fwd(gpu, z.g, W.g, ldw, NULL, u.g, R,
                                                                   d, m, DQN_ACT_NONE));
        TIME_GPU("bcast_add_act", gpu->ops->bcast_add_act(gpu, hb.g, u.g, B, T, m, DQN_ACT_RELU));
        TIME_GPU("relu_bwd_tausum",
                 gpu->ops->relu_bwd_tausum(gpu, u.g, du.g, dus.g, B, T, m, NULL));
        TIME_GPU("linear_ld_bwd (z half: dz, dW)", gpu->ops->linear_ld_bwd(gpu, z.g, W.g, ldw, du.g,
                                                                           dz.g, 0, dW.g, NULL, R,
                                                                           d, m));
    }
    release_all();
}

/* The fused reductions and the step counter inside a captured graph: replays give the same bits,
 * the counter rises by one per replay. */
static void test_fused_graph(void) {
    printf("graph: [l2_norm2, heads_bwd, grn_ln_gate_bwd, adam_target_step], replayed\n");
    const int sizes[3] = {3, 5, 5}, R = 700, H = 40, M = 90, d = 48;
    const size_t n = 5000;
    dqn_branches br;
    dqn_branches_init(&br, 3, sizes);
    const int A = br.A;
    vf hva = in_relu((size_t)R * 2 * H), Wv2 = in_f((size_t)H, -1, 1), Wa2 = in_f((size_t)A * H, -1, 1);
    vf dV = in_f((size_t)R, -1, 1), dAdv = in_f((size_t)R * A, -1, 1), norms = out_f(2);
    vf dhva = out_f((size_t)R * 2 * H), dWv2 = out_f((size_t)H), dbv2 = out_f(1);
    vf dWa2 = out_f((size_t)A * H), dba2 = out_f((size_t)A);
    vf x = in_f((size_t)M * d, -2, 2), gamma = in_f((size_t)d, 0.5f, 1.5f), mean = in_f((size_t)M, -0.1f, 0.1f);
    vf rstd = in_f((size_t)M, 0.5f, 1.5f), g = in_f((size_t)M * 2 * d, -2, 2), dy = in_f((size_t)M * d, -1, 1);
    vf dres = out_f((size_t)M * d), dg = out_f((size_t)M * 2 * d), dgamma = out_f((size_t)d), dbeta = out_f((size_t)d);
    vf p = in_f(n, -1, 1), gr = in_f(n, -1, 1), m = in_f(n, -0.1f, 0.1f), v = in_f(n, 0, 0.01f), t = in_f(n, -1, 1);
    uint64_t *step_g = take(gpu, 8), zero = 0;
    CHECK_OK(gpu->ops->h2d(gpu, step_g, &zero, 8));
    void *g1 = NULL, *ex = NULL;
    CHECK_OK(gpu->ops->capture_begin(gpu));
    CHECK_OK(gpu->ops->l2_norm2(gpu, dV.g, dV.n, dAdv.g, dAdv.n, norms.g, NULL));
    CHECK_OK(gpu->ops->heads_bwd(gpu, hva.g, Wv2.g, Wa2.g, dV.g, dAdv.g, norms.g, 0.5f, dhva.g,
                                 NULL, dWv2.g, dbv2.g, dWa2.g, dba2.g, R, H, A));
    CHECK_OK(gpu->ops->grn_ln_gate_bwd(gpu, x.g, gamma.g, mean.g, rstd.g, g.g, dy.g, dres.g, dg.g,
                                       dgamma.g, dbeta.g, M, d, NULL));
    CHECK_OK(gpu->ops->adam_target_step(gpu, p.g, gr.g, m.g, v.g, t.g, n, 1e-3f, 0.9f, 0.999f,
                                        1e-8f, 0.0f, norms.g, 0.0f, 0, 0.01f, step_g, NULL));
    CHECK_OK(gpu->ops->capture_end(gpu, &g1));
    CHECK_OK(gpu->ops->graph_compose(gpu, &g1, 1, &ex));
    CHECK_OK(gpu->ops->graph_launch(gpu, ex));
    float *s_norms = fetch(norms.g, 8), *s_dwa2 = fetch(dWa2.g, dWa2.n * 4);
    float *s_dba2 = fetch(dba2.g, dba2.n * 4), *s_dgamma = fetch(dgamma.g, dgamma.n * 4);
    for (int k = 0; k < 2; k++) {
        poison(norms.g, 8);
        poison(dWa2.g, dWa2.n * 4);
        poison(dba2.g, dba2.n * 4);
        poison(dgamma.g, dgamma.n * 4);
        CHECK_OK(gpu->ops->graph_launch(gpu, ex));
        expect_same_bits("graph replay: l2_norm2", norms.g, s_norms, 8);
        expect_same_bits("graph replay: heads_bwd dWa2", dWa2.g, s_dwa2, dWa2.n * 4);
        expect_same_bits("graph replay: heads_bwd dba2", dba2.g, s_dba2, dba2.n * 4);
        expect_same_bits("graph replay: grn_ln_gate_bwd dgamma", dgamma.g, s_dgamma, dgamma.n * 4);
    }
    uint64_t got = 0;
    CHECK_OK(gpu->ops->d2h(gpu, &got, step_g, 8));
    CHECK(got == 3, "adam_target_step in a graph: step %llu after 3 launches", (unsigned long long)got);
    free(s_norms);
    free(s_dwa2);
    free(s_dba2);
    free(s_dgamma);
    gpu->ops->graph_destroy(gpu, ex, 1);
    gpu->ops->graph_destroy(gpu, g1, 0);
    release_all();
}

/* ---- the model's whole update: captured into one graph on CUDA, replayed, against the CPU ---- */

/* on the backend g, with trunk width d and K taus for the argmax (K == T: one online pass over
 * x and x', whose backward reads the first half) */
static void test_model_update_on(dqn_backend *g, int d, int bottleneck, dqn_target_mode mode,
                                 int split, int B, int T, int K) {
    printf("model update x3 (graph capture + 2 replays): B=%d N=Nt=%d K=%d d=%d, bottleneck %d%s, "
           "%s targets\n", B, T, K, d, bottleneck, split ? " (split)" : "",
           mode == DQN_TARGET_MEAN ? "mean" : "independent");
    const int sizes[3] = {3, 5, 5}, cap = 500, obs = 6, D = 3;
    dqn_arch a = {.obs_dim = obs, .d = d, .grn_blocks = 2, .n_cos = 16, .bottleneck = bottleneck,
                  .head_hidden = 32};
    dqn_branches_init(&a.br, D, sizes);
    /* eps well above gradient rounding: Adam's sign-like first steps must not amplify it */
    dqn_update_cfg u = {.B = B, .N = T, .Nt = T, .K = K, .mode = mode, .kappa = 1.0f,
                        .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .adam_eps = 1e-4f,
                        .weight_decay = 0.01f, .grad_clip = 10.0f, .head_grad_clip = 5.0f,
                        .target_period = 2, .tau_target = 0.0f, .seed = 7,
                        .bn_split_rows = split ? 1 : 0};
    dqn_model mc, mg;
    CHECK_OK(dqn_model_create(&mc, cpu, &a, &u));
    CHECK_OK(dqn_model_create(&mg, g, &a, &u));
    CHECK_OK(dqn_model_init_weights(&mc, 3));
    CHECK_OK(dqn_model_init_weights(&mg, 3));
    /* one replay of random transitions on each backend */
    vf o = in_f((size_t)cap * obs, -1.5f, 1.5f), on = in_f((size_t)cap * obs, -1.5f, 1.5f);
    vf R = in_f((size_t)cap, -1, 2), disc = in_f((size_t)cap, 0, 0.99f);
    vi act = {take(cpu, (size_t)cap * D * 4), take(gpu, (size_t)cap * D * 4), (size_t)cap * D};
    for (int s = 0; s < cap; s++)
        for (int b = 0; b < D; b++)
            act.c[s * D + b] = (int32_t)dqn_philox_below(11, 11, draw++, (uint32_t)sizes[b]);
    CHECK_OK(gpu->ops->h2d(gpu, act.g, act.c, act.n * 4));
    uint32_t *size_c = take(cpu, 4), *size_g = take(gpu, 4);
    *size_c = 431;   /* a partly filled buffer: draws stay below the size */
    CHECK_OK(gpu->ops->h2d(gpu, size_g, size_c, 4));
    dqn_replay_view rc = {o.c, on.c, R.c, disc.c, act.c, size_c, NULL};
    dqn_replay_view rg = {o.g, on.g, R.g, disc.g, act.g, size_g, NULL};
    size_t n = mc.L.n_params;
    for (int k = 0; k < 3; k++) {
        CHECK_OK(dqn_model_update(&mc, &rc));
        CHECK_OK(dqn_model_update(&mg, &rg));
        CHECK_OK(g->ops->sync(g));   /* fetch() reads on gpu's stream, g may have its own */
        CHECK(mg.graph_exec != NULL, "the CUDA update did not run as a graph");
        char w[96];
        vf loss = {mc.loss, mg.loss, 1}, grads = {mc.grads, mg.grads, n};
        vf params = {mc.params, mg.params, n}, target = {mc.target, mg.target, n};
        vi astar = {mc.astar, mg.astar, (size_t)u.B * D};
        snprintf(w, sizeof w, "update %d: a* (double-DQN argmax)", k);
        expect_i(w, astar);
        snprintf(w, sizeof w, "update %d: loss", k);
        expect_f(w, loss, TOL_RED);
        snprintf(w, sizeof w, "update %d: gradients", k);
        expect_f(w, grads, 1e-3);
        snprintf(w, sizeof w, "update %d: parameters", k);
        expect_f(w, params, TOL_RED);
        snprintf(w, sizeof w, "update %d: target (hard copy every 2)", k);
        expect_f(w, target, TOL_RED);
    }
    uint64_t steps = 0;
    CHECK_OK(gpu->ops->d2h(gpu, &steps, mg.step, 8));
    CHECK(steps == 3 && *mc.step == 3, "update counter: cuda %llu, cpu %llu, want 3",
          (unsigned long long)steps, (unsigned long long)*mc.step);
    dqn_model_destroy(&mc);
    dqn_model_destroy(&mg);
    release_all();
}

static void test_model_update(int bottleneck, dqn_target_mode mode, int split, int B, int T) {
    test_model_update_on(gpu, 32, bottleneck, mode, split, B, T, T);
}

/* Time of one whole update as a graph replay (CUDA only): the figure the update step is judged by. */
static void time_model_update(dqn_backend *be, const char *label, const dqn_arch *a,
                              const dqn_update_cfg *u) {
    const int cap = 2 * u->B, obs = a->obs_dim, D = a->br.D;
    dqn_model mg;
    CHECK_OK(dqn_model_create(&mg, be, a, u));
    CHECK_OK(dqn_model_init_weights(&mg, 5));
    vf o = in_f((size_t)cap * obs, -1.5f, 1.5f), on = in_f((size_t)cap * obs, -1.5f, 1.5f);
    vf R = in_f((size_t)cap, -1, 2), disc = in_f((size_t)cap, 0, 0.99f);
    vi act = {take(cpu, (size_t)cap * D * 4), take(gpu, (size_t)cap * D * 4), (size_t)cap * D};
    for (int s = 0; s < cap; s++)
        for (int b = 0; b < D; b++)
            act.c[s * D + b] = (int32_t)dqn_philox_below(12, 12, draw++, (uint32_t)a->br.n[b]);
    CHECK_OK(gpu->ops->h2d(gpu, act.g, act.c, act.n * 4));
    uint32_t size = (uint32_t)cap, *size_g = take(gpu, 4);
    CHECK_OK(gpu->ops->h2d(gpu, size_g, &size, 4));
    dqn_replay_view rg = {o.g, on.g, R.g, disc.g, act.g, size_g, NULL};
    size_t nodes = 0;
#ifdef DQN_HAVE_CUDA
    /* the loss-and-gradient stage alone, captured once more to count its nodes */
    void *g = NULL;
    CHECK_OK(be->ops->capture_begin(be));
    CHECK_OK(dqn_model_loss_grad(&mg));
    CHECK_OK(be->ops->capture_end(be, &g));
    CHECK(g && cudaGraphGetNodes((cudaGraph_t)g, NULL, &nodes) == cudaSuccess, "node count");
    be->ops->graph_destroy(be, g, 0);
#endif
    double t0 = now_us();
    CHECK_OK(dqn_model_update(&mg, &rg));   /* capture, instantiate, first launch */
    CHECK_OK(be->ops->sync(be));
    double t_capture = now_us() - t0;
    for (int k = 0; k < 3; k++) CHECK_OK(dqn_model_update(&mg, &rg));
    CHECK_OK(be->ops->sync(be));
    const int reps = 50;
    t0 = now_us();
    for (int k = 0; k < reps; k++) CHECK_OK(dqn_model_update(&mg, &rg));
    CHECK_OK(be->ops->sync(be));
    double per = (now_us() - t0) / reps;
    float loss = NAN;
    CHECK_OK(be->ops->d2h(be, &loss, mg.loss, 4));
    CHECK(isfinite(loss), "%s: loss %g after %d updates", label, (double)loss, reps + 4);
    printf("  time model update (graph replay) %-24s %9.1f us  (first call with capture %.0f us; "
           "%zu params; loss+grad stage %zu nodes; loss %.4f)\n", label, per, t_capture,
           mg.L.n_params, nodes, (double)loss);
    dqn_model_destroy(&mg);
    release_all();
}

static void time_model_updates(void) {
    printf("model update timings\n");
    const int br2[1] = {2}, br355[3] = {3, 5, 5};
    /* the config table's defaults (CartPole-sized) */
    dqn_arch small = {.obs_dim = 4, .d = 64, .grn_blocks = 1, .n_cos = 64, .bottleneck = 0,
                      .head_hidden = 64};
    dqn_branches_init(&small.br, 1, br2);
    dqn_update_cfg u = {.B = 64, .N = 32, .Nt = 32, .K = 32, .mode = DQN_TARGET_MEAN,
                        .kappa = 1.0f, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                        .adam_eps = 1e-8f, .grad_clip = 10.0f, .head_grad_clip = 5.0f,
                        .target_period = 500, .seed = 1};
    time_model_update(gpu, "defaults B=64", &small, &u);
    /* a large model: B*N = 131072 rows */
    dqn_arch big = {.obs_dim = 8, .d = 256, .grn_blocks = 2, .n_cos = 64, .bottleneck = 128,
                    .head_hidden = 256};
    dqn_branches_init(&big.br, 3, br355);
    u.B = 4096;
    time_model_update(gpu, "large B=4096 d=256", &big, &u);
    time_model_update(gpu_tf32, "large, tf32 backend", &big, &u);
}

/* ---- bad input is refused by name, not crashed on ---- */

/* A side branch (side_begin .. side_end, joined by side_join): out of order it is refused; run
 * eagerly and captured, its work is in place after the join. The side runs a long GEMM through
 * cuBLAS (its own workspace) while the main stream runs another; the sum after the join reads
 * both, so a join that did not wait would read the side's output still poisoned. */
/* an fp32 CUDA backend made with the switch var=val (NULL, checked, when it cannot be made) */
static dqn_backend *cuda_with(const char *var, const char *val) {
    dqn_backend *be = NULL;
    setenv(var, val, 1);
    CHECK_OK(dqn_backend_cuda_create(&be, 0, DQN_MATH_FP32));
    unsetenv(var);
    return be;
}

static void test_side_branch(void) {
    printf("side branch: out of order calls, then eager and captured runs\n");
    CHECK(gpu->ops->side_end(gpu) == DQN_ERR_ARG, "side_end without side_begin was accepted");
    CHECK_OK(gpu->ops->side_begin(gpu));
    CHECK(gpu->ops->side_begin(gpu) == DQN_ERR_ARG, "a second side_begin was accepted");
    CHECK(gpu->ops->side_join(gpu) == DQN_ERR_ARG, "side_join with the branch open was accepted");
    CHECK(gpu->ops->capture_begin(gpu) == DQN_ERR_ARG, "capture_begin with the branch open");
    CHECK_OK(gpu->ops->side_end(gpu));
    CHECK_OK(gpu->ops->side_join(gpu));
    const int M = 40000, K = 256, N = 256, m = 64;
    vf X = in_f((size_t)M * K, -1, 1), W = in_f((size_t)N * K, -0.1f, 0.1f);
    vf b = in_f((size_t)N, -1, 1), X2 = in_f((size_t)m * K, -1, 1);
    vf W2 = in_f((size_t)N * K, -0.1f, 0.1f), b2 = in_f((size_t)N, -1, 1);
    vf Y1 = out_f((size_t)M * N), Y2 = out_f((size_t)m * N);
    CPU(linear_fwd, X.c, W.c, b.c, Y1.c, M, K, N);
    CPU(linear_fwd, X2.c, W2.c, b2.c, Y2.c, m, K, N);
    CPU(axpy, 1.0f, Y1.c, Y2.c, Y2.n);   /* the side's first m rows into the main's */
    for (int captured = 0; captured < 2; captured++) {
        void *child = NULL, *exec = NULL;
        poison(Y1.g, Y1.n * sizeof(float));
        poison(Y2.g, Y2.n * sizeof(float));
        if (captured) CHECK_OK(gpu->ops->capture_begin(gpu));
        CHECK_OK(gpu->ops->side_begin(gpu));
        CHECK_OK(gpu->ops->linear_fwd(gpu, X.g, W.g, b.g, Y1.g, M, K, N));
        CHECK_OK(gpu->ops->side_end(gpu));
        CHECK_OK(gpu->ops->linear_fwd(gpu, X2.g, W2.g, b2.g, Y2.g, m, K, N));
        CHECK_OK(gpu->ops->side_join(gpu));
        CHECK_OK(gpu->ops->axpy(gpu, 1.0f, Y1.g, Y2.g, Y2.n));
        if (captured) {
            CHECK_OK(gpu->ops->capture_end(gpu, &child));
            CHECK_OK(gpu->ops->graph_compose(gpu, &child, 1, &exec));
            CHECK_OK(gpu->ops->graph_launch(gpu, exec));
        }
        CHECK_OK(gpu->ops->sync(gpu));
        expect_f(captured ? "captured: side GEMM" : "eager: side GEMM", Y1, TOL_RED);
        expect_f(captured ? "captured: main GEMM + side rows" : "eager: main GEMM + side rows",
                 Y2, TOL_RED);
        if (child) gpu->ops->graph_destroy(gpu, child, 0);
        if (exec) gpu->ops->graph_destroy(gpu, exec, 1);
    }
    /* a join with nothing put on the side since the last one waits on nothing: also in a capture
     * after one that used the branch, whose event belongs to that capture */
    void *child = NULL;
    CHECK_OK(gpu->ops->capture_begin(gpu));
    CHECK_OK(gpu->ops->side_join(gpu));
    CHECK_OK(gpu->ops->axpy(gpu, 1.0f, Y1.g, Y2.g, Y2.n));
    CHECK_OK(gpu->ops->capture_end(gpu, &child));
    CHECK(child != NULL, "a capture with a join and nothing pending failed");
    if (child) gpu->ops->graph_destroy(gpu, child, 0);
    /* an op's leaf left on the side (heads_bwd's sums with DQN_CUDA_SIDE_LEAF=1): capture_end
     * joins it, and the graph gives the CPU's values */
    dqn_backend *lb = cuda_with("DQN_CUDA_SIDE_LEAF", "1");
    if (lb) {
        const int R = 96, H = 32, A = 4;
        vf hva = in_relu((size_t)R * 2 * H), Wv2 = in_f((size_t)H, -1, 1);
        vf Wa2 = in_f((size_t)A * H, -1, 1), dV = in_f((size_t)R, -1, 1);
        vf dAdv = in_f((size_t)R * A, -1, 1), dhva = out_f((size_t)R * 2 * H);
        vf o[5] = {out_f(2 * (size_t)H), out_f((size_t)H), out_f(1), out_f((size_t)A * H),
                   out_f((size_t)A)};
        CPU(heads_bwd, hva.c, Wv2.c, Wa2.c, dV.c, dAdv.c, NULL, 0.0f, dhva.c, o[0].c, o[1].c,
            o[2].c, o[3].c, o[4].c, R, H, A);
        void *g = NULL, *ex = NULL;
        CHECK_OK(lb->ops->capture_begin(lb));
        CHECK_OK(lb->ops->heads_bwd(lb, hva.g, Wv2.g, Wa2.g, dV.g, dAdv.g, NULL, 0.0f, dhva.g,
                                    o[0].g, o[1].g, o[2].g, o[3].g, o[4].g, R, H, A));
        CHECK_OK(lb->ops->capture_end(lb, &g));
        if (g) CHECK_OK(lb->ops->graph_compose(lb, &g, 1, &ex));
        if (ex) CHECK_OK(lb->ops->graph_launch(lb, ex));
        CHECK_OK(lb->ops->sync(lb));
        expect_f("captured heads_bwd, sums on the side: dhva", dhva, TOL_RED);
        const char *nm[5] = {"dbva", "dWv2", "dbv2", "dWa2", "dba2"};
        char w[80];
        for (int k = 0; k < 5; k++) {
            snprintf(w, sizeof w, "captured heads_bwd, sums on the side: %s", nm[k]);
            expect_f(w, o[k], TOL_RED);
        }
        if (g) lb->ops->graph_destroy(lb, g, 0);
        if (ex) lb->ops->graph_destroy(lb, ex, 1);
        lb->ops->destroy(lb);
    }
    release_all();
}

static void test_errors(void) {
    dqn_branches br;
    const int sz[2] = {3, 4};
    dqn_branches_init(&br, 2, sz);
    br.A = 9;
    dqn_status s = gpu->ops->dueling_fwd(gpu, NULL, NULL, NULL, 4, &br);
    CHECK(s == DQN_ERR_ARG && strstr(dqn_last_error(), "A=9"), "bad branches: %s",
          dqn_last_error());
    s = gpu->ops->linear_fwd(gpu, NULL, NULL, NULL, NULL, 4, -1, 3);
    CHECK(s == DQN_ERR_ARG && strstr(dqn_last_error(), "K=-1"), "bad shape: %s", dqn_last_error());
    dqn_backend *none = NULL;
    s = dqn_backend_cuda_create(&none, 1 << 20, DQN_MATH_FP32);
    CHECK(s == DQN_ERR_ARG && none == NULL, "device index out of range: %s", dqn_last_error());
}

int main(void) {
    dqn_status s = dqn_backend_cuda_create(&gpu, 0, DQN_MATH_FP32);
    if (s == DQN_ERR_UNSUPPORTED) {
        CHECK(!dqn_backend_cuda_available(), "create says no device, available() says 1");
        printf("SKIP: no CUDA device (%s)\n", dqn_last_error());
        return check_failures ? 1 : 77;
    }
    CHECK_OK(s);
    if (s != DQN_OK) return check_finish("test_gpu_ops");
    CHECK(dqn_backend_cuda_available(), "a backend was created but available() says 0");
    CHECK_OK(dqn_backend_cuda_create(&gpu_tf32, 0, DQN_MATH_TF32));
    CHECK_OK(dqn_backend_cpu_create(&cpu));
    if (!gpu_tf32 || !cpu) return check_finish("test_gpu_ops");
    char own_tf32[32];
    snprintf(own_tf32, sizeof own_tf32, "%d", TEST_OWN_TF32_MACS);
    setenv("DQN_CUDA_OWN_TF32_MACS", own_tf32, 1);
    CHECK_OK(dqn_backend_cuda_create(&gpu_tf32_own, 0, DQN_MATH_TF32));
    unsetenv("DQN_CUDA_OWN_TF32_MACS");
    const int br2[1] = {2}, br355[3] = {3, 5, 5};
    /* DQN_GPU_TEST_SMALL=1 (under compute-sanitizer): the odd shapes only, no timings */
    int full = getenv("DQN_GPU_TEST_SMALL") == NULL;

    /* the own GEMM kernels (fp32, layers at most 128 wide, up to OWN_GEMM_MACS): 32-row tiles,
     * no split; 32-row tiles, dW split 38 ways; 64-row forward tiles; 3 output rows of dW; then
     * cuBLAS, with BGRADB and past BGRADB_MAX_ROWS with the column sum (the TF32 backend takes
     * cuBLAS at every size; with DQN_CUDA_OWN_TF32_MACS the own kernels up to that) */
    test_linear(37, 19, 23, 1, 0);
    test_linear(3000, 70, 45, 1, 0);
    test_linear(4100, 33, 120, 0, 0);
    test_linear(9000, 64, 3, 0, 0);
    if (full) test_linear(8192, 256, 128, 0, 1);
    if (full) test_linear(4096, 256, 512, 1, 0);
    if (full) test_linear((int)(OWN_GEMM_MACS / (64 * 48)) + 1000, 64, 48, 0, 0);
    {   /* cuBLAS at the small shapes too (DQN_CUDA_OWN_GEMM_MACS=0), as the A/B benchmarks use it */
        dqn_backend *own = gpu, *blas = cuda_with("DQN_CUDA_OWN_GEMM_MACS", "0");
        if (blas) {
            gpu = blas;
            printf("cuBLAS at every size:\n");
            test_linear(37, 19, 23, 1, 0);
            test_linear(3000, 70, 45, 1, 0);
            gpu = own;
            blas->ops->destroy(blas);
        }
        /* the own kernels at the seed model's widths (DQN_CUDA_OWN_GEMM_WIDTH, to compare) */
        dqn_backend *wide = cuda_with("DQN_CUDA_OWN_GEMM_WIDTH", "512");
        if (wide) {
            gpu = wide;
            printf("own GEMMs up to 512 wide:\n");
            test_linear(64, 256, 256, 0, 0);
            test_linear(200, 256, 512, 1, 0);
            test_linear(200, 512, 128, 0, 0);
            gpu = own;
            wide->ops->destroy(wide);
        }
        /* own dW GEMMs with cuBLAS's dX (DQN_CUDA_OWN_DW_MACS above DQN_CUDA_OWN_GEMM_MACS), and
         * cuBLAS's dW with own dX (below) */
        const char *mix[2][2] = {{"0", "1e12"}, {"1e12", "0"}};
        for (int k = 0; k < 2; k++) {
            dqn_backend *m = NULL;
            setenv("DQN_CUDA_OWN_GEMM_MACS", mix[k][0], 1);
            setenv("DQN_CUDA_OWN_DW_MACS", mix[k][1], 1);
            CHECK_OK(dqn_backend_cuda_create(&m, 0, DQN_MATH_FP32));
            unsetenv("DQN_CUDA_OWN_GEMM_MACS");
            unsetenv("DQN_CUDA_OWN_DW_MACS");
            if (!m) continue;
            gpu = m;
            printf("own GEMMs for %s only:\n", k == 0 ? "dW" : "the forward and dX");
            test_linear(3000, 70, 45, 1, 0);
            test_linear(9000, 64, 3, 0, 0);
            if (full) test_linear(70000, 64, 128, 0, 0);
            gpu = own;
            m->ops->destroy(m);
        }
    }
    test_elementwise(37, 0);
    if (full) test_elementwise(1000003, 1);
    test_gate(37, 13, 0);
    if (full) test_gate(8192, 256, 1);
    test_layernorm(37, 13, 0);
    if (full) test_layernorm(8192, 256, 1);
    test_iqn(5, 3, 7, 5, 0);
    if (full) test_iqn(256, 32, 256, 64, 1);
    test_iqn(3, 5, 8, 37, 0);   /* rows longer than a warp, not a multiple of it */
    test_iqn(3, 5, 8, 12, 0);   /* float4 stores of the cosines */
    /* iqn_embed_fwd: the one-kernel path (emb takes it at any size) at each width, with a short
     * last tile and keep inside a tile; the three ops (d = 96, n_cos = 37, TF32, and below
     * IQN_EMBED_ELEMS on the default backend) */
    dqn_backend *emb = cuda_with("DQN_CUDA_IQN_EMBED_ELEMS", "0");
    if (emb) {
        test_iqn_embed(emb, 9, 7, 64, 64, 4, 0, TOL_RED, 0);
        test_iqn_embed(emb, 5, 11, 128, 12, 5, 1, TOL_RED, 0);
        test_iqn_embed(emb, 13, 8, 256, 64, 0, 0, TOL_RED, 0);
        test_iqn_embed(emb, 3, 33, 256, 32, 2, 1, TOL_RED, 0);
        test_iqn_embed(emb, 4, 5, 96, 64, 4, 0, TOL_RED, 0);
        test_iqn_embed(emb, 4, 5, 64, 37, 2, 1, TOL_RED, 0);
        if (full) {   /* more tiles than blocks: the blocks loop */
            test_iqn_embed(emb, 2300, 32, 64, 64, 1150, 0, TOL_RED, 1);
            test_iqn_embed(emb, 4096, 32, 256, 64, 2048, 0, TOL_RED, 1);
            test_iqn_embed(emb, 601, 32, 128, 64, 300, 1, TOL_RED, 0);
            test_iqn_embed(emb, 1024, 32, 256, 64, 1024, 0, TOL_RED, 1);
            test_iqn_embed(emb, 256, 32, 256, 64, 128, 0, TOL_RED, 1);
        }
    }
    /* trunk_fwd: the one kernel (d <= 64, widths a multiple of 4, up to TRUNK_ROWS rows, fp32)
     * with a short last block of rows, d not a multiple of a warp, several blocks, wide input, no
     * input layer, no block; the sequence past its limits (obs, rows, d); TF32 math */
    test_trunk(gpu, 1, 4, 64, 1, 1, 1, TOL_RED, 0);
    test_trunk(gpu, 37, 8, 48, 2, 1, 1, TOL_RED, 0);
    test_trunk(gpu, 11, 6, 64, 1, 1, 1, TOL_RED, 0);
    test_trunk(gpu, 13, 100, 20, 3, 1, 1, TOL_RED, 0);
    test_trunk(gpu, 21, 4, 64, 2, 0, 1, TOL_RED, 0);
    test_trunk(gpu, 9, 5, 64, 0, 1, 1, TOL_RED, 0);
    test_trunk(gpu, 130, 4, 96, 1, 1, 0, TOL_RED, 0);
    test_trunk(gpu_tf32, 40, 4, 64, 1, 1, 0, TOL_TF32, 0);
    if (gpu_tf32_own) {   /* the kernel in TF32 math too; past TRUNK_ROWS the sequence, its
                           * d -> 2d layer past TEST_OWN_TF32_MACS on cuBLAS's TF32 */
        test_trunk(gpu_tf32_own, 40, 4, 64, 1, 1, 1, TOL_RED, 0);
        test_trunk(gpu_tf32_own, 3000, 4, 64, 1, 1, 0, TOL_TF32, 0);
    }
    if (full) {
        test_trunk(gpu, 64, 4, 64, 1, 1, 1, TOL_RED, 1);
        test_trunk(gpu, 512, 4, 64, 1, 1, 1, TOL_RED, 1);
        test_trunk(gpu, TRUNK_ROWS, 4, 64, 1, 1, 1, TOL_RED, 1);
        test_trunk(gpu, TRUNK_ROWS + 5, 4, 64, 1, 1, 1, TOL_RED, 0);
    }
    test_iqn_embed(gpu, 6, 8, 64, 64, 3, 0, TOL_RED, 0);
    test_iqn_embed(gpu_tf32, 6, 8, 64, 64, 3, 0, TOL_TF32, 0);
    test_heads(7, 3, 5, 1, br2, 0);
    test_heads(37, 5, 3, 3, br355, 0);
    if (full) test_heads(2048, 32, 32, 3, br355, 1);
    for (int m = 0; m < 2; m++) {
        dqn_target_mode mode = m ? DQN_TARGET_INDEPENDENT : DQN_TARGET_MEAN;
        test_loss(7, 5, 3, 1, br2, mode, 1.0f, 1, 0);
        test_loss(9, 4, 6, 3, br355, mode, 0.5f, 0, 0);
        test_loss(6, 3, 5, 3, br355, mode, 0.7f, 1, 0);   /* kappa not a power of two: divides */
        if (full) test_loss(1024, 32, 32, 3, br355, mode, 1.0f, 1, m == 0);
        if (full) test_loss(512, 16, 16, 1, br2, mode, 1.0f, 0, 0);
        dqn_backend *ft = cuda_with("DQN_CUDA_FUSED_TARGETS", "1");
        dqn_backend *on[2] = {gpu, ft};   /* the two ops, then the one kernel */
        for (int k = 0; k < 2 && on[k]; k++) {
            test_targets_huber(on[k], 7, 5, 3, 1, br2, mode, 1);
            test_targets_huber(on[k], 9, 4, 6, 3, br355, mode, 0);
            if (full) test_targets_huber(on[k], 1024, 32, 32, 3, br355, mode, 1);
        }
        if (ft) ft->ops->destroy(ft);
    }
    test_optim(37, 0);
    if (full) test_optim(1000003, 1);
    test_rand(37, 0);
    if (full) test_rand(131072, 1);
    test_graph();
    /* fused ops (issue 3); A = 23 > 16 takes heads_bwd's shared-memory accumulators */
    const int br_wide[4] = {7, 5, 6, 5}, br60[2] = {40, 20};
    test_fused_heads(37, 13, 1, br2, 0, 0);
    test_fused_heads(301, 70, 3, br355, 1, 0);
    test_fused_heads(129, 33, 4, br_wide, 1, 0);
    test_fused_heads(9001, 130, 3, br355, 1, 0);   /* two column tiles, parts of several stages */
    /* heads_fwd's GEMM path: a partial last combine block; A = 23 (wide) and A = 2 (even) */
    test_fused_heads(HEADS_GEMM_ELEMS / 256 + 37, 256, 3, br355, 1, 0);
    test_fused_heads(HEADS_GEMM_ELEMS / 33 + 1, 33, 4, br_wide, 0, 0);
    test_fused_heads(HEADS_GEMM_ELEMS / 64, 64, 1, br2, 0, 0);
    test_fused_heads(HEADS_GEMM_ELEMS / 40 + 5, 40, 2, br60, 0, 0);   /* A = 60: 192 rows a block */
    test_fused_heads(HEADS_GEMM_ELEMS / 64 - 1, 64, 1, br2, 0, 0);   /* the warp kernel's last R */
    if (full) test_fused_heads(262144, 64, 1, br2, 1, 1);
    if (full) test_fused_heads(131072, 256, 3, br355, 1, 1);
    test_fused_grn(37, 13, 0);
    test_fused_grn(300, 200, 0);   /* rows in registers (d <= 256), a tail of several batches */
    test_fused_grn(41, 300, 0);    /* d > 256: streamed rows */
    test_fused_grn(70, 768, 0);    /* 7 warps: the per-warp sums and the static bytes in 48 KiB */
    test_fused_grn(4100, 64, 0);   /* the most parts, the last one short */
    if (full) test_fused_grn(8192, 256, 1);
    test_fused_iqn(5, 3, 7, 0);
    test_fused_iqn(6, 11, 12, 0);   /* float4 columns, a partial group of taus */
    if (full) test_fused_iqn(4096, 32, 256, 1);
    test_fused_optim(37, 0);
    if (full) test_fused_optim(1000003, 1);
    test_fused_split(5, 3, 7, 6, 0);
    test_fused_split(300, 8, 48, 20, 0);
    test_fused_split(7, 11, 12, 8, 0);
    if (full) test_fused_split(4096, 32, 256, 128, 1);
    test_fused_graph();
    test_model_update(24, DQN_TARGET_MEAN, 0, 64, 8);
    test_model_update(24, DQN_TARGET_INDEPENDENT, 1, 64, 8);
    test_model_update(0, DQN_TARGET_INDEPENDENT, 0, 64, 8);
    /* H = 32: the joint online pass of 2 B N rows takes heads_fwd's GEMM path, the target pass
     * (B Nt) the warp kernel */
    if (full) test_model_update(24, DQN_TARGET_MEAN, 0, HEADS_GEMM_ELEMS / 32 / 32, 16);
    /* the IQN embedding's one kernel in the update: phi and the cosines kept for the backward's
     * rows only, with and without the joint pass */
    if (emb) {
        test_model_update_on(emb, 64, 24, DQN_TARGET_MEAN, 0, 64, 8, 8);
        test_model_update_on(emb, 64, 24, DQN_TARGET_INDEPENDENT, 1, 37, 8, 5);
        test_model_update_on(emb, 128, 0, DQN_TARGET_MEAN, 0, 48, 8, 8);
        emb->ops->destroy(emb);
    }
    /* the switches that wait for an H200's A/B before they become defaults: the update on each
     * against the CPU (SMS: the side's cuBLAS GEMMs at d = 256; the own kernels at d = 256; TF32
     * with own kernels: fp32's accuracy at these sizes) */
    const char *sw[5][2] = {{"DQN_CUDA_SIDE_LEAF", "1"}, {"DQN_CUDA_SIDE_PRIO", "1"},
                            {"DQN_CUDA_SIDE_SMS", "66"}, {"DQN_CUDA_OWN_GEMM_WIDTH", "512"},
                            {"DQN_CUDA_FUSED_TARGETS", "1"}};
    for (int k = 0; k < 5; k++) {
        dqn_backend *be = cuda_with(sw[k][0], sw[k][1]);
        if (!be) continue;
        printf("with %s=%s:\n", sw[k][0], sw[k][1]);
        test_model_update_on(be, 32, 24, DQN_TARGET_MEAN, 0, 64, 8, 8);
        test_model_update_on(be, 256, 24, DQN_TARGET_INDEPENDENT, 1, 37, 8, 5);
        be->ops->destroy(be);
    }
    if (gpu_tf32_own) {
        printf("TF32 backend with DQN_CUDA_OWN_TF32_MACS:\n");
        test_model_update_on(gpu_tf32_own, 32, 24, DQN_TARGET_MEAN, 0, 64, 8, 8);
    }
    if (full) time_model_updates();
    test_side_branch();
    test_errors();

    gpu->ops->destroy(gpu);
    gpu_tf32->ops->destroy(gpu_tf32);
    if (gpu_tf32_own) gpu_tf32_own->ops->destroy(gpu_tf32_own);
    cpu->ops->destroy(cpu);
    return check_finish("test_gpu_ops");
}
