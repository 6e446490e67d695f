/* Prioritised replay's sum-tree ops on the CPU (contracts: ops.def; layout and formulas:
 * replay/sumtree.h). Each is the reference the CUDA kernels must match bit for bit, apart from
 * powf's last bit. */
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "replay/sumtree.h"

static dqn_status per_ok(const char *op, const dqn_per *per) {
    REQUIRE(per && per->tree && per->size, "%s: NULL tree", op);
    REQUIRE(per->cap >= 1 && per->leaves >= per->cap && (per->leaves & (per->leaves - 1)) == 0,
            "%s: cap = %d, leaves = %d (a power of two >= cap)", op, per->cap, per->leaves);
    return DQN_OK;
}

/* Every ancestor of the n leaves rows[0..n) recomputed from its children. Once all the leaves
 * are written, walking each one's path in turn leaves every node equal to left + right of its
 * final children: the same bits as CUDA's level-by-level pass. */
static void fix_paths(float *tree, int leaves, const int32_t *rows, int n, int pos, int cap) {
    for (int j = 0; j < n; j++) {
        int r = rows ? rows[j] : (pos + j) % cap;
        for (int k = (leaves + r) >> 1; k >= 1; k >>= 1) tree[k] = tree[2 * k] + tree[2 * k + 1];
    }
}

dqn_status cpu_per_sample(dqn_backend *be, const dqn_per *per, int32_t *idx, float *w, int B,
                          uint64_t seed, const uint64_t *step) {
    (void)be;
    DQN_TRY(per_ok("per_sample", per));
    uint32_t size = *per->size;
    REQUIRE(B > 0 && size >= 1 && size <= (uint32_t)per->cap,
            "per_sample: B = %d, size = %u (1..%d)", B, size, per->cap);
    const float *t = per->tree;
    REQUIRE(t[1] > 0.0f && isfinite(t[1]), "per_sample: the priorities' total is %g", (double)t[1]);
    float p_min = INFINITY;
    for (int j = 0; j < B; j++) {
        float u = dqn_philox_uniform(seed, DQN_STREAM_REPLAY, *step * (uint64_t)B + (uint64_t)j);
        idx[j] = dqn_per_descend(t, per->leaves, dqn_per_target(j, B, u, t[1]), size);
        float p = t[per->leaves + idx[j]];
        w[j] = p;
        p_min = p < p_min ? p : p_min;
    }
    float beta = dqn_per_beta(*step, per->beta0, per->beta_updates);
    for (int j = 0; j < B; j++) w[j] = dqn_per_weight(w[j], p_min, beta);
    return DQN_OK;
}

dqn_status cpu_per_update(dqn_backend *be, const dqn_per *per, const int32_t *idx,
                          const float *loss, int B) {
    (void)be;
    DQN_TRY(per_ok("per_update", per));
    REQUIRE(B > 0 && idx && loss, "per_update: B = %d, idx or loss NULL", B);
    for (int j = 0; j < B; j++)
        REQUIRE(idx[j] >= 0 && idx[j] < per->cap, "per_update: idx[%d] = %d outside 0..%d", j,
                (int)idx[j], per->cap - 1);
    float *t = per->tree, top = t[0];
    for (int j = 0; j < B; j++) t[per->leaves + idx[j]] = 0.0f;
    for (int j = 0; j < B; j++) {
        float p = dqn_per_priority(loss[j], per->alpha, per->eps);
        float *leaf = &t[per->leaves + idx[j]];
        *leaf = p > *leaf ? p : *leaf;
        top = p > top ? p : top;
    }
    t[0] = top;
    fix_paths(t, per->leaves, idx, B, 0, per->cap);
    return DQN_OK;
}

dqn_status cpu_per_insert(dqn_backend *be, const dqn_per *per, int pos, int n) {
    (void)be;
    DQN_TRY(per_ok("per_insert", per));
    REQUIRE(pos >= 0 && pos < per->cap && n >= 0 && n <= per->cap,
            "per_insert: pos = %d, n = %d (capacity %d)", pos, n, per->cap);
    float *t = per->tree;
    for (int j = 0; j < n; j++) t[per->leaves + (pos + j) % per->cap] = t[0];
    fix_paths(t, per->leaves, NULL, n, pos, per->cap);
    return DQN_OK;
}
