/* Prioritised replay on CUDA against the CPU: the sum-tree ops on the same inputs (trees equal
 * up to powf's last bit, every CUDA node exactly its children's sum; on the same tree the same
 * rows drawn and the same weights), and a CUDA training run whose captured update samples and
 * updates the tree on the device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "check.h"
#include "replay/replay.h"
#include "train/trainer_internal.h"

enum { CAP = 1000, ROWS = 700, B = 256, OBS = 3 };

static void tree_of(dqn_backend *be, const dqn_replay *r, float *host) {
    CHECK_OK(be->ops->d2h(be, host, r->per.tree, 2 * (size_t)r->per.leaves * sizeof(float)));
}

static int sum_tree_exact(const float *t, int L) {
    for (int k = 1; k < L; k++)
        if (t[k] != t[2 * k] + t[2 * k + 1]) return k;
    return 0;
}

static void test_ops(void) {
    dqn_backend *bc = NULL, *bg = NULL;
    CHECK_OK(dqn_backend_cpu_create(&bc));
    CHECK_OK(dqn_backend_cuda_create(&bg, 0, DQN_MATH_FP32));
    if (!bc || !bg) return;
    dqn_replay rc, rg;
    CHECK_OK(dqn_replay_create(&rc, bc, CAP, OBS, 1));
    CHECK_OK(dqn_replay_create(&rg, bg, CAP, OBS, 1));
    CHECK_OK(dqn_replay_prioritize(&rc, 0.6f, 0.4f, 1e-6f, 50));
    CHECK_OK(dqn_replay_prioritize(&rg, 0.6f, 0.4f, 1e-6f, 50));
    static float obs[ROWS * OBS], R[ROWS], disc[ROWS];
    static int32_t act[ROWS];
    CHECK_OK(dqn_replay_add(&rc, obs, act, R, disc, obs, ROWS));
    CHECK_OK(dqn_replay_add(&rg, obs, act, R, disc, obs, ROWS));
    const int L = rc.per.leaves;
    static float tc[2 * 1024], tg[2 * 1024];
    int32_t *idx_g = NULL, *out_g = NULL;
    float *loss_g = NULL, *w_g = NULL;
    uint64_t *step_g = NULL;
    CHECK_OK(bg->ops->alloc(bg, (void **)&idx_g, B * sizeof(int32_t)));
    CHECK_OK(bg->ops->alloc(bg, (void **)&out_g, B * sizeof(int32_t)));
    CHECK_OK(bg->ops->alloc(bg, (void **)&loss_g, B * sizeof(float)));
    CHECK_OK(bg->ops->alloc(bg, (void **)&w_g, B * sizeof(float)));
    CHECK_OK(bg->ops->alloc(bg, (void **)&step_g, sizeof(uint64_t)));
    double worst_tree = 0, worst_w = 0;
    int idx_diff = 0, not_sum = 0;
    for (uint64_t round = 0; round < 40; round++) {
        int32_t idx[B];
        float loss[B];
        for (int j = 0; j < B; j++) {
            idx[j] = (int32_t)dqn_philox_below(11, 1, round * B + j, j % 7 ? ROWS : 20);
            loss[j] = (float)dqn_philox_uniform(11, 2, round * B + j) * 4.0f;
            if (j == 5 && round % 3 == 0) loss[j] = NAN;
        }
        CHECK_OK(bc->ops->per_update(bc, &rc.per, idx, loss, B));
        CHECK_OK(bg->ops->h2d(bg, idx_g, idx, sizeof idx));
        CHECK_OK(bg->ops->h2d(bg, loss_g, loss, sizeof loss));
        CHECK_OK(bg->ops->per_update(bg, &rg.per, idx_g, loss_g, B));
        if (round % 10 == 9) {   /* new rows over old ones, wrapping */
            CHECK_OK(dqn_replay_add(&rc, obs, act, R, disc, obs, 450));
            CHECK_OK(dqn_replay_add(&rg, obs, act, R, disc, obs, 450));
        }
        tree_of(bc, &rc, tc);
        tree_of(bg, &rg, tg);
        if (!not_sum) not_sum = sum_tree_exact(tg, L);
        for (int k = 0; k < 2 * L; k++) {
            double e = fabs((double)tg[k] - tc[k]) / (fabs(tc[k]) > 1e-3 ? fabs(tc[k]) : 1e-3);
            worst_tree = e > worst_tree ? e : worst_tree;
        }
        /* the same tree on both: the same rows, the same weights */
        CHECK_OK(bg->ops->h2d(bg, rg.per.tree, tc, 2 * (size_t)L * sizeof(float)));
        int32_t out_c[B], out_h[B];
        float w_c[B], w_h[B];
        uint64_t step = round * 3;
        CHECK_OK(bc->ops->per_sample(bc, &rc.per, out_c, w_c, B, 99, &step));
        CHECK_OK(bg->ops->h2d(bg, step_g, &step, sizeof step));
        CHECK_OK(bg->ops->per_sample(bg, &rg.per, out_g, w_g, B, 99, step_g));
        CHECK_OK(bg->ops->d2h(bg, out_h, out_g, sizeof out_h));
        CHECK_OK(bg->ops->d2h(bg, w_h, w_g, sizeof w_h));
        for (int j = 0; j < B; j++) {
            idx_diff += out_c[j] != out_h[j];
            double e = fabs((double)w_h[j] - w_c[j]) / w_c[j];
            worst_w = e > worst_w ? e : worst_w;
        }
    }
    printf("per ops, cuda vs cpu: tree rel err %.2g, weights rel err %.2g, %d rows differ\n",
           worst_tree, worst_w, idx_diff);
    CHECK(not_sum == 0, "cuda node %d is not its children's sum", not_sum);
    CHECK(worst_tree < 1e-5, "trees differ: %.3g relative", worst_tree);
    CHECK(idx_diff == 0, "%d sampled rows differ on the same tree", idx_diff);
    CHECK(worst_w < 1e-5, "weights differ: %.3g relative", worst_w);
    void *bufs[] = {idx_g, out_g, loss_g, w_g, step_g};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) bg->ops->free(bg, bufs[k]);
    dqn_replay_destroy(&rc);
    dqn_replay_destroy(&rg);
    bc->ops->destroy(bc);
    bg->ops->destroy(bg);
}

/* the captured update samples from the tree and writes the priorities back on the device */
static void test_training(void) {
    dqn_config c;
    dqn_config_preset(&c, "cartpole");
    snprintf(c.device, sizeof c.device, "cuda");
    snprintf(c.replay, sizeof c.replay, "prioritized");
    c.steps = 4000;
    c.learning_starts = 500;
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    CHECK_OK(dqn_trainer_run_until(t, c.steps));
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    const dqn_replay *r = &t->replay;
    int L = r->per.leaves;
    float *tree = malloc(2 * (size_t)L * sizeof *tree);
    CHECK(tree != NULL, "%d leaves", L);
    if (!tree) return;
    tree_of(t->be, r, tree);
    double total = 0;
    int distinct = 0;
    for (int i = 0; i < r->size; i++) {
        total += tree[L + i];
        distinct += tree[L + i] != tree[0];
    }
    printf("cuda training, prioritized: %lld updates, loss %g, %d of %d rows below the top "
           "priority %g\n", (long long)st.updates, st.last_loss, distinct, r->size, tree[0]);
    CHECK(st.updates > 1000 && isfinite(st.last_loss), "updates %lld, loss %g",
          (long long)st.updates, st.last_loss);
    CHECK(sum_tree_exact(tree, L) == 0, "the device tree is not a sum-tree");
    CHECK(fabs(total - tree[1]) <= 1e-4 * total, "total %g, leaves sum to %g", tree[1], total);
    CHECK(distinct > 1000, "only %d rows got a priority from a loss", distinct);
    free(tree);
    dqn_trainer_destroy(t);
}

int main(void) {
    if (!dqn_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    test_ops();
    if (!getenv("DQN_GPU_TEST_SMALL")) test_training();   /* (compute-sanitizer runs: ops only) */
    return check_finish("test_gpu_per");
}
