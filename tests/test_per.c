/* Prioritised replay on the CPU backend: the sum-tree ops against brute force (the descent
 * against a linear scan of the prefix sums, the sampled distribution against p / total by a
 * chi-squared test), the importance weights and beta schedule against a double reference, the
 * priority rules (repeats, bad losses, new rows), and the replay's checkpoint bytes (a tree
 * that is not a sum-tree is refused). Resuming a prioritised run bit for bit: test_resume. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "check.h"
#include "replay/replay.h"
#include "replay/sumtree.h"

#define CAP 50

static dqn_backend *be;

/* every internal node equal to left + right, bit for bit */
static int is_sum_tree(const float *t, int L) {
    for (int k = 1; k < L; k++)
        if (t[k] != t[2 * k] + t[2 * k + 1]) return 0;
    return 1;
}

/* the row a linear scan of the prefix sums (in double) gives for `at` */
static int scan(const float *t, int L, double at, int size) {
    double acc = 0;
    for (int i = 0; i < size; i++) {
        acc += t[L + i];
        if (at < acc) return i;
    }
    return size - 1;
}

/* a prioritised replay of capacity CAP in be */
static void make_per(dqn_replay *r, int obs_dim, float alpha, float beta, uint64_t span) {
    CHECK_OK(dqn_replay_create(r, be, CAP, obs_dim, 1));
    CHECK_OK(dqn_replay_prioritize(r, alpha, beta, 1e-6f, span));
}

/* n rows of zeros (their contents do not matter to the tree) */
static void add_rows(dqn_replay *r, int n) {
    static float obs[2 * CAP], R[CAP], disc[CAP];
    static int32_t act[CAP];
    CHECK_OK(dqn_replay_add(r, obs, act, R, disc, obs, n));
}

static void test_tree_ops(void) {
    dqn_replay r;
    make_per(&r, 2, 1.0f, 0.4f, 100);
    const dqn_per *p = &r.per;
    CHECK(p->leaves == 64, "leaves %d for capacity %d", p->leaves, CAP);
    /* 30 rows, then 30 more: the buffer wraps, and every row gets node 0 (1 at first) */
    add_rows(&r, 30);
    add_rows(&r, 30);
    float *t = p->tree;
    CHECK(t[1] == (float)CAP && t[0] == 1.0f, "after inserts: total %g, top %g", t[1], t[0]);
    CHECK(is_sum_tree(t, p->leaves), "inserts left a node that is not its children's sum");
    for (int i = CAP; i < p->leaves; i++) CHECK(t[p->leaves + i] == 0.0f, "padding leaf %d", i);

    /* priorities (loss + eps)^alpha: a repeated row keeps the larger; NaN, Inf and negative
     * losses give the least priority */
    int32_t idx[8] = {3, 7, 3, 9, 11, 12, 13, 14};
    float loss[8] = {2.0f, 5.0f, 4.0f, 0.5f, NAN, INFINITY, -1.0f, 1e-3f};
    CHECK_OK(be->ops->per_update(be, p, idx, loss, 8));
    CHECK(t[p->leaves + 3] == dqn_per_priority(4.0f, 1.0f, 1e-6f), "repeated row: %g",
          t[p->leaves + 3]);
    CHECK(fabsf(t[p->leaves + 7] - 5.0f) < 1e-5f, "row 7: %g", t[p->leaves + 7]);
    for (int k = 4; k < 7; k++)
        CHECK(t[p->leaves + idx[k]] == powf(1e-6f, 1.0f), "bad loss %g: priority %g", loss[k],
              t[p->leaves + idx[k]]);
    CHECK(t[0] == t[p->leaves + 7], "top %g, largest given %g", t[0], t[p->leaves + 7]);
    CHECK(is_sum_tree(t, p->leaves), "update left a node that is not its children's sum");
    /* a new row takes the largest priority so far */
    add_rows(&r, 1);
    CHECK(t[p->leaves + 10] == t[0], "new row 10: %g, top %g", t[p->leaves + 10], t[0]);
    CHECK(is_sum_tree(t, p->leaves), "insert left a node that is not its children's sum");
    CHECK(be->ops->per_update(be, p, (int32_t[]){CAP}, loss, 1) != DQN_OK,
          "an index past the capacity was taken");
    dqn_replay_destroy(&r);
}

/* integer priorities: every sum is exact, so the descent must agree with a linear scan */
static void test_descent(void) {
    enum { L = 64, SIZE = 45 };
    float t[2 * L] = {0};
    for (int i = 0; i < SIZE; i++) t[L + i] = (float)(1 + dqn_philox_below(9, 1, i, 7));
    t[L + 17] = 0.5f;
    for (int k = L - 1; k >= 1; k--) t[k] = t[2 * k] + t[2 * k + 1];
    int bad = 0;
    for (int j = 0; j < 20000; j++) {
        double at = dqn_philox_uniform(9, 2, j) * t[1];
        int got = dqn_per_descend(t, L, (float)at, SIZE), want = scan(t, L, (float)at, SIZE);
        if (got != want && !bad++)
            CHECK(0, "target %.6f: descent row %d, scan row %d", at, got, want);
    }
    /* rounding past the total lands on the last filled row, never past it */
    CHECK(dqn_per_descend(t, L, t[1] * 1.0001f, SIZE) == SIZE - 1, "past the total");
    CHECK(dqn_per_descend(t, L, t[1] * 1.0001f, 10) == 9, "clamp to size");
}

/* the sampler draws row i with probability p_i / total: chi-squared over many batches */
static void test_distribution(void) {
    dqn_replay r;
    make_per(&r, 1, 1.0f, 0.5f, 1000);
    int32_t idx[CAP];
    float loss[CAP];
    add_rows(&r, 40);
    for (int i = 0; i < 40; i++) {
        idx[i] = i;
        loss[i] = (float)(i % 8 + 1) * 0.25f;   /* eight levels, 1 : 8 */
    }
    CHECK_OK(be->ops->per_update(be, &r.per, idx, loss, 40));
    const float *t = r.per.tree;
    enum { B = 32, ROUNDS = 4000 };
    static double count[CAP];
    int32_t out[B];
    float w[B];
    double total = 0;
    for (int i = 0; i < 40; i++) total += t[r.per.leaves + i];
    for (uint64_t s = 0; s < ROUNDS; s++) {
        CHECK_OK(be->ops->per_sample(be, &r.per, out, w, B, 77, &s));
        for (int j = 0; j < B; j++) count[out[j]]++;
    }
    double chi2 = 0;
    for (int i = 0; i < 40; i++) {
        double e = (double)B * ROUNDS * t[r.per.leaves + i] / total;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    for (int i = 40; i < CAP; i++) CHECK(count[i] == 0, "row %d past the filled ones drawn", i);
    /* 39 degrees of freedom: P(chi2 > 72) < 0.001 */
    printf("chi-squared over 40 rows, %d draws: %.1f (39 dof)\n", B * ROUNDS, chi2);
    CHECK(chi2 < 72.0, "sampled frequencies do not follow the priorities: chi2 %.1f", chi2);
    dqn_replay_destroy(&r);
}

/* w_j = (N P_j)^-beta / max_k (N P_k)^-beta, beta from beta0 to 1 over the planned updates */
static void test_weights(void) {
    dqn_replay r;
    make_per(&r, 1, 0.6f, 0.4f, 200);
    int32_t idx[CAP];
    float loss[CAP];
    add_rows(&r, CAP);
    for (int i = 0; i < CAP; i++) {
        idx[i] = i;
        loss[i] = 0.01f + (float)dqn_philox_uniform(4, 4, i) * 3.0f;
    }
    CHECK_OK(be->ops->per_update(be, &r.per, idx, loss, CAP));
    const float *t = r.per.tree;
    double total = 0;
    for (int i = 0; i < CAP; i++) total += t[r.per.leaves + i];
    uint64_t steps[] = {0, 50, 100, 199, 200, 5000};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        enum { B = 16 };
        int32_t out[B];
        float w[B];
        CHECK_OK(be->ops->per_sample(be, &r.per, out, w, B, 5, &steps[k]));
        double beta = 0.4 + 0.6 * (steps[k] >= 200 ? 1.0 : (double)steps[k] / 200.0), wmax = 0;
        double ref[B];
        for (int j = 0; j < B; j++) {
            double P = t[r.per.leaves + out[j]] / total;
            ref[j] = pow(CAP * P, -beta);
            wmax = ref[j] > wmax ? ref[j] : wmax;
        }
        double worst = 0;
        for (int j = 0; j < B; j++) {
            double e = fabs(w[j] - ref[j] / wmax) / (ref[j] / wmax);
            worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-5, "update %llu: weights off by %.2g (relative)",
              (unsigned long long)steps[k], worst);
    }
    dqn_replay_destroy(&r);
}

/* a checkpoint's tree goes through the same checks as any input */
static void test_import(void) {
    dqn_replay r;
    make_per(&r, 1, 0.6f, 0.4f, 10);
    add_rows(&r, 20);
    size_t n = dqn_replay_bytes(&r);
    CHECK(n == (size_t)CAP * 4 * sizeof(float) + CAP * sizeof(int32_t) + 2 * 64 * sizeof(float),
          "replay bytes %zu", n);
    static unsigned char buf[4096];
    CHECK_OK(dqn_replay_export(&r, buf));
    float *tree = (float *)(buf + n - 2 * 64 * sizeof(float));
    CHECK_OK(dqn_replay_import(&r, buf, 20, 20));
    tree[64 + 3] = 7.0f;   /* a leaf its parents do not sum */
    CHECK(dqn_replay_import(&r, buf, 20, 20) == DQN_ERR_FORMAT, "a broken tree was taken");
    tree[64 + 3] = tree[64 + 4];
    tree[64 + 25] = 1.0f;   /* a priority past the filled rows, in a true sum-tree */
    for (int k = 63; k >= 1; k--) tree[k] = tree[2 * k] + tree[2 * k + 1];
    CHECK(dqn_replay_import(&r, buf, 20, 20) == DQN_ERR_FORMAT, "priority past size taken");
    dqn_replay_destroy(&r);
}

int main(void) {
    if (dqn_backend_cpu_create(&be) != DQN_OK) return 1;
    test_tree_ops();
    test_descent();
    test_distribution();
    test_weights();
    test_import();
    be->ops->destroy(be);
    return check_finish("test_per");
}
