/* The CUDA backend beyond single ops (the ops themselves: tests/test_backend_ops.c): graph
 * capture, composition and replay (replays bit-identical, the device counter rising), the model's
 * whole update captured into one graph against the CPU (with the IQN embedding's one kernel too),
 * side branches, arguments refused by name, and the timings of whole updates (unless
 * DQN_GPU_TEST_SMALL is set). Every CUDA output is poisoned with NaN (0xFF bytes) first, error =
 * max |cuda - cpu| / max |cpu|. Exits 77 when there is no CUDA device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/cuda_tunables.h"
#include "check.h"
#include "dqn_philox.h"
#include "model/model.h"
#ifdef DQN_HAVE_CUDA
#include <cuda_runtime_api.h>   /* only to count the nodes of a captured graph */
#endif

#define TOL_RED 1e-4   /* GEMM-based and reductions */
#define TOL_TF32 5e-3  /* GEMMs of the TF32 backend (inputs rounded to 10 bits) */
/* heads_fwd's GEMM path from R x H this large (HF_GEMM_ELEMS, backends/cuda_tunables.h, as are
 * OWN_GEMM_MACS and TRUNK_ROWS) */
#define HEADS_GEMM_ELEMS ((int)HF_GEMM_ELEMS)

static dqn_backend *gpu, *gpu_tf32, *cpu;
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

/* ---- timing: wall clock ---- */

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* the reference run of an op on the CPU backend */
#define CPU(op, ...) CHECK_OK(cpu->ops->op(cpu, __VA_ARGS__))

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

/* a post-ReLU input: uniform(-1, 1) through ReLU on the CPU, then uploaded (exact zeros) */
static vf in_relu(size_t n) {
    vf v = in_f(n, -1, 1);
    CPU(relu_fwd, v.c, v.c, n);
    upload(v);
    return v;
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
    /* captured, heads_bwd gives the eager op's bits */
    {
        vf e_dhva = out_f(dhva.n), e_dWv2 = out_f(dWv2.n), e_dbv2 = out_f(1);
        vf e_dWa2 = out_f(dWa2.n), e_dba2 = out_f(dba2.n);
        CHECK_OK(gpu->ops->heads_bwd(gpu, hva.g, Wv2.g, Wa2.g, dV.g, dAdv.g, norms.g, 0.5f,
                                     e_dhva.g, NULL, e_dWv2.g, e_dbv2.g, e_dWa2.g, e_dba2.g, R,
                                     H, A));
        expect_same_bits("heads_bwd eager against captured: dWa2", e_dWa2.g, s_dwa2, dWa2.n * 4);
        expect_same_bits("heads_bwd eager against captured: dba2", e_dba2.g, s_dba2, dba2.n * 4);
        float *s = fetch(dWv2.g, dWv2.n * 4);
        expect_same_bits("heads_bwd eager against captured: dWv2", e_dWv2.g, s, dWv2.n * 4);
        free(s);
        s = fetch(dhva.g, dhva.n * 4);
        expect_same_bits("heads_bwd eager against captured: dhva", e_dhva.g, s, dhva.n * 4);
        free(s);
    }
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

/* Side branches (side_begin(lane) .. side_end, joined by side_join): out of order or out of
 * range it is refused; run eagerly and captured, their work is in place after the join. Two
 * lanes run a long GEMM each through cuBLAS (their own workspaces) while the main stream runs
 * another; the sums read lane 1's output after the join of lane 1 alone and the last lane's after
 * the join of every lane, so a join that did not wait would read a side's output still poisoned. */
/* an fp32 CUDA backend with the own GEMMs up to own_macs multiply-adds and the IQN embedding's
 * one kernel from embed_elems (NULL, checked, when it cannot be made) */
static dqn_backend *cuda_tuned(double own_macs, double embed_elems) {
    dqn_backend *be = NULL;
    CHECK_OK(dqn_backend_cuda_create(&be, 0, DQN_MATH_FP32));
    dqn_cuda_tunables *t = be ? dqn_backend_cuda_tunables(be) : NULL;
    CHECK(!be || t, "a CUDA backend without tunables");
    if (t) t->own_gemm_macs = own_macs, t->iqn_embed_elems = embed_elems;
    return be;
}

static void test_side_branch(void) {
    printf("side branch: out of order calls, then eager and captured runs\n");
    CHECK(gpu->ops->side_end(gpu) == DQN_ERR_ARG, "side_end without side_begin was accepted");
    CHECK(gpu->ops->side_begin(gpu, 0) == DQN_ERR_ARG && strstr(dqn_last_error(), "lane 0"),
          "side lane 0 was accepted: %s", dqn_last_error());
    CHECK(gpu->ops->side_begin(gpu, DQN_SIDE_LANES + 1) == DQN_ERR_ARG,
          "side lane %d was accepted", DQN_SIDE_LANES + 1);
    CHECK_OK(gpu->ops->side_begin(gpu, 1));
    CHECK(gpu->ops->side_begin(gpu, 2) == DQN_ERR_ARG, "a second side_begin was accepted");
    CHECK(gpu->ops->side_join(gpu, 0) == DQN_ERR_ARG,
          "side_join with the branch open was accepted");
    CHECK(gpu->ops->capture_begin(gpu) == DQN_ERR_ARG, "capture_begin with the branch open");
    CHECK_OK(gpu->ops->side_end(gpu));
    CHECK(gpu->ops->side_join(gpu, -1) == DQN_ERR_ARG, "side_join of lane -1 was accepted");
    CHECK(gpu->ops->side_join(gpu, DQN_SIDE_LANES + 1) == DQN_ERR_ARG,
          "side_join of lane %d was accepted", DQN_SIDE_LANES + 1);
    CHECK_OK(gpu->ops->side_join(gpu, 0));
    const int M = 40000, K = 256, N = 256, m = 64;
    vf X = in_f((size_t)M * K, -1, 1), W = in_f((size_t)N * K, -0.1f, 0.1f);
    vf b = in_f((size_t)N, -1, 1), X2 = in_f((size_t)m * K, -1, 1);
    vf W2 = in_f((size_t)N * K, -0.1f, 0.1f), b2 = in_f((size_t)N, -1, 1);
    vf W3 = in_f((size_t)N * K, -0.1f, 0.1f);
    vf Y1 = out_f((size_t)M * N), Y2 = out_f((size_t)m * N), Y3 = out_f((size_t)M * N);
    CPU(linear_fwd, X.c, W.c, b.c, Y1.c, M, K, N);
    CPU(linear_fwd, X2.c, W2.c, b2.c, Y2.c, m, K, N);
    CPU(linear_fwd, X.c, W3.c, NULL, Y3.c, M, K, N);
    CPU(axpy, 1.0f, Y1.c, Y2.c, Y2.n);   /* the sides' first m rows into the main's */
    CPU(axpy, 1.0f, Y3.c, Y2.c, Y2.n);
    for (int captured = 0; captured < 2; captured++) {
        void *child = NULL, *exec = NULL;
        poison(Y1.g, Y1.n * sizeof(float));
        poison(Y2.g, Y2.n * sizeof(float));
        poison(Y3.g, Y3.n * sizeof(float));
        if (captured) CHECK_OK(gpu->ops->capture_begin(gpu));
        CHECK_OK(gpu->ops->side_begin(gpu, 1));
        CHECK_OK(gpu->ops->linear_fwd(gpu, X.g, W.g, b.g, Y1.g, M, K, N));
        CHECK_OK(gpu->ops->side_end(gpu));
        CHECK_OK(gpu->ops->side_begin(gpu, DQN_SIDE_LANES));
        CHECK_OK(gpu->ops->linear_fwd(gpu, X.g, W3.g, NULL, Y3.g, M, K, N));
        CHECK_OK(gpu->ops->side_end(gpu));
        CHECK_OK(gpu->ops->linear_fwd(gpu, X2.g, W2.g, b2.g, Y2.g, m, K, N));
        /* lane 1 alone first: the main stream reads its output, then every lane's */
        CHECK_OK(gpu->ops->side_join(gpu, 1));
        CHECK_OK(gpu->ops->axpy(gpu, 1.0f, Y1.g, Y2.g, Y2.n));
        CHECK_OK(gpu->ops->side_join(gpu, 0));
        CHECK_OK(gpu->ops->axpy(gpu, 1.0f, Y3.g, Y2.g, Y2.n));
        if (captured) {
            CHECK_OK(gpu->ops->capture_end(gpu, &child));
            CHECK_OK(gpu->ops->graph_compose(gpu, &child, 1, &exec));
            CHECK_OK(gpu->ops->graph_launch(gpu, exec));
        }
        CHECK_OK(gpu->ops->sync(gpu));
        expect_f(captured ? "captured: side GEMM" : "eager: side GEMM", Y1, TOL_RED);
        expect_f(captured ? "captured: last lane's GEMM" : "eager: last lane's GEMM", Y3, TOL_RED);
        expect_f(captured ? "captured: main GEMM + side rows" : "eager: main GEMM + side rows",
                 Y2, TOL_RED);
        if (child) gpu->ops->graph_destroy(gpu, child, 0);
        if (exec) gpu->ops->graph_destroy(gpu, exec, 1);
    }
    /* a join with nothing put on the side since the last one waits on nothing: also in a capture
     * after one that used the branch, whose event belongs to that capture */
    void *child = NULL;
    CHECK_OK(gpu->ops->capture_begin(gpu));
    CHECK_OK(gpu->ops->side_join(gpu, 0));
    CHECK_OK(gpu->ops->axpy(gpu, 1.0f, Y1.g, Y2.g, Y2.n));
    CHECK_OK(gpu->ops->capture_end(gpu, &child));
    CHECK(child != NULL, "a capture with a join and nothing pending failed");
    if (child) gpu->ops->graph_destroy(gpu, child, 0);
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
    if (s != DQN_OK) return check_finish("test_gpu_model");
    CHECK(dqn_backend_cuda_available(), "a backend was created but available() says 0");
    CHECK_OK(dqn_backend_cuda_create(&gpu_tf32, 0, DQN_MATH_TF32));
    CHECK_OK(dqn_backend_cpu_create(&cpu));
    if (!gpu_tf32 || !cpu) return check_finish("test_gpu_model");
    /* DQN_GPU_TEST_SMALL=1 (under compute-sanitizer): no large update, no timings */
    int full = getenv("DQN_GPU_TEST_SMALL") == NULL;
    /* the IQN embedding's one kernel at every size */
    dqn_backend *emb = cuda_tuned(OWN_GEMM_MACS, 0);
    test_graph();
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
    /* the side lanes' priorities as the default does not set them: the same update */
    dqn_backend *prio = cuda_tuned(OWN_GEMM_MACS, IQN_EMBED_ELEMS);
    dqn_cuda_tunables *pt = prio ? dqn_backend_cuda_tunables(prio) : NULL;
    if (pt) {
        pt->side_priority = !SIDE_PRIORITY;
        printf("side_priority %d:\n", pt->side_priority);
        test_model_update_on(prio, 64, 24, DQN_TARGET_MEAN, 0, 64, 8, 8);
        test_model_update_on(prio, 128, 0, DQN_TARGET_INDEPENDENT, 1, 37, 8, 5);
    }
    if (prio) prio->ops->destroy(prio);
    if (full) time_model_updates();
    test_side_branch();
    test_errors();

    gpu->ops->destroy(gpu);
    gpu_tf32->ops->destroy(gpu_tf32);
    cpu->ops->destroy(cpu);
    return check_finish("test_gpu_model");
}
