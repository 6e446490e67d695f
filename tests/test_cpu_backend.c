/* The CPU backend beyond its ops (the ops themselves: tests/test_backend_ops.c): memory (alloc
 * zero-filled, also of 0 bytes; copies round-trip), no graph-capture entries, argument errors that
 * name the op, and the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
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

int main(void) {
    CHECK_OK(dqn_backend_cpu_create(&be));
    if (!be) return check_finish("test_cpu_backend");
    ops = be->ops;
    printf("gemm: %s\n", dqn_cpu_gemm_name());
    CHECK(strcmp(ops->name, "cpu") == 0, "backend name %s", ops->name);
    test_memory();
    test_errors();
    ops->destroy(be);
    return check_finish("test_cpu_backend");
}
