/* The NCCL path on one GPU (a world of one): the collectives of the CUDA op table (comm_init's
 * refusals, the all-reduce eager and inside a captured graph), the update step with the
 * all-reduce stage in its graph against the plain update step, and a rank trainer against a
 * plain trainer. Exits 77 when there is no CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_check.h"
#include "train/trainer_internal.h"

static int has(const char *part) { return strstr(dqn_last_error(), part) != NULL; }

static void test_ops(void) {
    dqn_backend *be = NULL;
    CHECK_OK(dqn_backend_cuda_create(&be, 0, DQN_MATH_FP32));
    if (!be) return;
    const dqn_ops *o = be->ops;
    CHECK(o->comm_world(be) == 0, "a fresh backend is in a world of %d", o->comm_world(be));
    size_t n = 1000003;
    float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back), *d = NULL;
    for (size_t i = 0; i < n; i++) h[i] = dqn_philox_uniform(9, 1, i) * 200 - 100;
    CHECK_OK(o->alloc(be, (void **)&d, n * sizeof *d));
    CHECK_OK(o->h2d(be, d, h, n * sizeof *d));
    CHECK_OK(o->allreduce_mean(be, d, n));   /* no communicator: nothing to do */

    dqn_rank_info ri;
    memset(&ri, 0, sizeof ri);
    CHECK_OK(dqn_comm_id_create(&ri.id));
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    CHECK(nvls && strcmp(nvls, "0") == 0, "NCCL_NVLS_ENABLE is %s after dqn_comm_id_create",
          nvls ? nvls : "unset");
    ri.world = 1;
    ri.timeout_s = 60;
    ri.device = 1;
    CHECK(o->comm_init(be, &ri) == DQN_ERR_ARG && has("device 1"), "%s", dqn_last_error());
    ri.device = 0;
    CHECK_OK(o->comm_init(be, &ri));
    CHECK(o->comm_world(be) == 1, "world %d after joining a world of one", o->comm_world(be));
    CHECK(o->comm_init(be, &ri) == DQN_ERR_ARG && has("already"), "%s", dqn_last_error());

    /* the mean over one rank is x, bit for bit: eager, then captured and replayed 3 times */
    CHECK_OK(o->allreduce_mean(be, d, n));
    CHECK_OK(o->d2h(be, back, d, n * sizeof *d));
    CHECK(memcmp(back, h, n * sizeof *h) == 0, "eager all-reduce over one rank changed x");
    void *g = NULL, *exec = NULL;
    CHECK_OK(o->capture_begin(be));
    dqn_status s = o->allreduce_mean(be, d, n);
    CHECK_OK(o->capture_end(be, &g));
    CHECK_OK(s);
    if (g) CHECK_OK(o->graph_compose(be, &g, 1, &exec));
    for (int k = 0; exec && k < 3; k++) CHECK_OK(o->graph_launch(be, exec));
    CHECK_OK(o->d2h(be, back, d, n * sizeof *d));
    CHECK(memcmp(back, h, n * sizeof *h) == 0, "captured all-reduce over one rank changed x");
    if (exec) o->graph_destroy(be, exec, 1);
    if (g) o->graph_destroy(be, g, 0);
    o->free(be, d);
    free(h);
    free(back);
    o->destroy(be);
    printf("collectives: comm_init refusals, all-reduce over one rank eager and captured: ok\n");
}

/* The update with the all-reduce stage in its graph (a world of one) against the plain one. */
static void test_update_path(void) {
    dp_spec s[2];
    dp_capture cap[2];
    dp_rank ranks[2][DP_MAX_WORLD];
    for (int k = 0; k < 2; k++) {
        s[k] = dp_seed_spec(1, 128);
        s[k].plain = k == 1;
        s[k].body = dp_capture_body;
        memset(&cap[k], 0, sizeof cap[k]);
        cap[k].updates = 200;
        s[k].arg = &cap[k];
        CHECK_OK(dp_run(&s[k], ranks[k]));
        CHECK(ranks[k][0].status == DQN_OK, "%s", ranks[k][0].error);
    }
    if (cap[0].params[0] && cap[1].params[0]) {
        size_t n = cap[0].n_params;
        CHECK(memcmp(cap[0].grads[0], cap[1].grads[0], n * sizeof(float)) == 0,
              "first gradient: NCCL path differs from the plain path");
        double diff = 0, scale = 0;
        for (size_t j = 0; j < n; j++) {
            diff = fmax(diff, fabs((double)cap[0].params[0][j] - cap[1].params[0][j]));
            scale = fmax(scale, fabs(cap[1].params[0][j]));
        }
        CHECK(diff == 0, "weights after 200 updates: NCCL path differs by %.3g (scale %.3g)",
              diff, scale);
        dqn_backend *ref = NULL;
        dp_result r;
        CHECK_OK(dqn_backend_cuda_create(&ref, 0, DQN_MATH_FP32));
        if (ref) {
            CHECK_OK(dp_check(&s[0], &cap[0], ref, &r));
            CHECK(r.grad_err <= 1e-5, "gradient vs the same batch: %.3g (%s)", r.grad_err, r.worst);
            ref->ops->destroy(ref);
        }
        printf("update step with the all-reduce stage (world of one) = plain update step: first "
               "gradient bit-equal, weights after 200 updates differ by %g\n", diff);
    }
    for (int k = 0; k < 2; k++) dp_capture_free(&cap[k]);
}

/* A rank trainer in a world of one trains like the plain trainer; any_rank is a collective. */
static void test_trainer_rank(void) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    snprintf(c.device, sizeof c.device, "cuda");
    c.steps = 3000;
    c.learning_starts = 500;
    dqn_rank_info ri;
    memset(&ri, 0, sizeof ri);
    ri.world = 1;
    ri.timeout_s = 60;
    CHECK_OK(dqn_comm_id_create(&ri.id));
    dqn_trainer *t[2] = {NULL, NULL};
    CHECK_OK(dqn_trainer_create_rank(&c, &ri, &t[0]));
    CHECK_OK(dqn_trainer_create(&c, &t[1]));
    if (!t[0] || !t[1]) goto done;
    CHECK(t[0]->be->ops->comm_world(t[0]->be) == 1, "the rank trainer joined no communicator");
    for (int k = 0; k < 2; k++) CHECK_OK(dqn_trainer_run_until(t[k], 3000));
    int any = -1;
    CHECK_OK(dqn_trainer_any_rank(t[0], 1, &any));
    CHECK(any == 1, "any_rank(1) = %d", any);
    CHECK_OK(dqn_trainer_any_rank(t[0], 0, &any));
    CHECK(any == 0, "any_rank(0) = %d", any);
    size_t n = t[0]->model.L.n_params;
    float *p[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
    for (int k = 0; k < 2; k++)
        CHECK_OK(t[k]->be->ops->d2h(t[k]->be, p[k], t[k]->model.params, n * sizeof(float)));
    double diff = 0, scale = 0;
    for (size_t j = 0; j < n; j++) {
        diff = fmax(diff, fabs((double)p[0][j] - p[1][j]));
        scale = fmax(scale, fabs(p[1][j]));
    }
    dqn_train_stats st;
    dqn_trainer_stats(t[0], &st);
    CHECK(st.updates > 1000, "%lld updates", (long long)st.updates);
    CHECK(diff <= 1e-6 * scale, "rank trainer vs plain trainer after %lld updates: %.3g (scale "
          "%.3g)", (long long)st.updates, diff, scale);
    printf("rank trainer (world of one) vs plain trainer after %lld updates: weights differ by "
           "%g\n", (long long)st.updates, diff);
    free(p[0]);
    free(p[1]);
done:
    for (int k = 0; k < 2; k++) dqn_trainer_destroy(t[k]);
}

int main(void) {
    if (!dqn_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    test_ops();
    test_update_path();
    test_trainer_rank();
    return check_finish("test_gpu_nccl");
}
