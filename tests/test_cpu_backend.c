/* The CPU backend beyond its ops (the ops themselves: tests/test_backend_ops.c): memory (alloc
 * zero-filled, also of 0 bytes; copies round-trip), no graph-capture entries, argument errors that
 * name the op, the thread count, which GEMM the calls take, and heads_fwd's rows each summed as
 * alone (the blocked rows in the same order as a lone row). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm.h"
#include "check.h"

static dqn_backend *be;
static const dqn_ops *ops;

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

/* At one thread the built-in GEMM takes the calls wherever it has vector tile kernels, in an
 * OpenBLAS build too (the same bits as calling it directly); at more threads OpenBLAS does. */
static void test_gemm_route(void) {
    enum { M = 13, K = 37, N = 29 };
    static float X[M * K], W[N * K], b[N], Y[M * N], Yb[M * N];
    for (int i = 0; i < M * K; i++) X[i] = (float)((i * 7919) % 1009) / 1009.0f - 0.5f;
    for (int i = 0; i < N * K; i++) W[i] = (float)((i * 104729) % 997) / 997.0f - 0.5f;
    for (int i = 0; i < N; i++) b[i] = 0.01f * (float)i;
    const int vec = strcmp(dqn_gemm_builtin_isa(), "portable") != 0;
    const int ob = dqn_cpu_have_openblas();
    CHECK_OK(dqn_cpu_set_threads(1));
    const char *one = ob && !vec ? "openblas" : "builtin";
    CHECK(strcmp(dqn_cpu_gemm_name(), one) == 0, "1 thread, isa %s: %s, want %s",
          dqn_gemm_builtin_isa(), dqn_cpu_gemm_name(), one);
    CHECK_OK(dqn_gemm_xwt(X, W, b, Y, M, K, N));
    CHECK_OK(dqn_gemm_builtin_xwt_ld(X, W, K, b, Yb, M, K, N));
    if (strcmp(one, "builtin") == 0)
        CHECK(memcmp(Y, Yb, sizeof Y) == 0, "the default GEMM differs from the built-in one");
    for (int i = 0; i < M * N; i++)
        CHECK(fabsf(Y[i] - Yb[i]) <= 1e-5f, "Y[%d] = %g, built-in %g", i, Y[i], Yb[i]);
    CHECK_OK(dqn_cpu_set_threads(2));
    const char *two = ob ? "openblas" : "builtin";
    CHECK(strcmp(dqn_cpu_gemm_name(), two) == 0, "2 threads: %s, want %s", dqn_cpu_gemm_name(),
          two);
    CHECK_OK(dqn_cpu_set_threads(1));
}

/* heads_fwd runs blocks of rows at once: each row's V and Adv must be the bits it gets alone. */
static void test_heads_rows(void) {
    enum { R = 37, H = 33 };
    static const int sizes[] = {2, 1};
    dqn_branches br;
    dqn_branches_init(&br, 2, sizes);
    const int A = br.A;
    static float hva[R * 2 * H], Wv2[H], bv2[1], Wa2[8 * H], ba2[8];
    static float V[R], Adv[R * 8], Z[R * 8], V1[R], Adv1[R * 8], Z1[8];
    for (int i = 0; i < R * 2 * H; i++) hva[i] = (float)((i * 7919) % 1013) / 1013.0f;
    for (int i = 0; i < H; i++) Wv2[i] = (float)((i * 31) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < A * H; i++) Wa2[i] = (float)((i * 104729) % 101) / 101.0f - 0.5f;
    /* lanes 0 and 1 of each half cancel: a row's result then depends on the order of its sums */
    for (int r = 0; r < R; r++)
        for (int half = 0; half < 2; half++) {
            hva[(size_t)r * 2 * H + (size_t)half * H] = 1e20f;
            hva[(size_t)r * 2 * H + (size_t)half * H + 1] = -1e20f;
        }
    Wv2[0] = Wv2[1] = 1.0f;
    for (int a = 0; a < A; a++) Wa2[a * H] = Wa2[a * H + 1] = 1.0f;
    bv2[0] = 0.25f;
    for (int a = 0; a < A; a++) ba2[a] = 0.1f * (float)a;
    CHECK_OK(ops->heads_fwd(be, hva, Wv2, bv2, Wa2, ba2, V, Adv, Z, R, H, &br));
    for (int r = 0; r < R; r++)
        CHECK_OK(ops->heads_fwd(be, hva + (size_t)r * 2 * H, Wv2, bv2, Wa2, ba2, V1 + r,
                                Adv1 + (size_t)r * A, Z1, 1, H, &br));
    CHECK(memcmp(V, V1, sizeof V) == 0, "heads_fwd: V of a block of rows differs from alone");
    CHECK(memcmp(Adv, Adv1, (size_t)R * A * sizeof *Adv) == 0,
          "heads_fwd: Adv of a block of rows differs from alone");
}

int main(void) {
    CHECK_OK(dqn_backend_cpu_create(&be));
    if (!be) return check_finish("test_cpu_backend");
    ops = be->ops;
    printf("gemm: %s\n", dqn_cpu_gemm_name());
    CHECK(strcmp(ops->name, "cpu") == 0, "backend name %s", ops->name);
    test_memory();
    test_errors();
    test_gemm_route();
    test_heads_rows();
    ops->destroy(be);
    return check_finish("test_cpu_backend");
}
