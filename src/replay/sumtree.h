/* Prioritised replay (proportional, Schaul et al. 2016): the sum-tree's layout and the formulas
 * that the CPU and CUDA backends share, compiled by both (DQN_HD).
 *
 * The tree is 2L floats for L leaves (a power of two >= the capacity): node k's children are 2k
 * and 2k + 1, row i's priority is leaf L + i, node 1 holds the total, and node 0 the largest
 * priority given so far (new rows get it, so each is sampled soon). A parent is always recomputed
 * as left + right from its children, never patched by differences: both backends hold the same
 * bits and the sums never drift. Every a*b+c is an explicit fmaf, as nvcc would contract it and
 * the C compiler would not. */
#ifndef DQN_SUMTREE_H
#define DQN_SUMTREE_H
#include <math.h>
#include <stdint.h>

#include "dqn_philox.h"

/* A priority stays below this, so that a total over 2^24 rows is still finite. */
#define DQN_PER_MAX_PRIORITY 1e30f

/* (loss + eps)^alpha for a finite loss >= 0; a non-finite or negative loss (a bad batch) gets
 * the least priority, eps^alpha, so that a poisoned row is seldom drawn again. */
DQN_HD float dqn_per_priority(float loss, float alpha, float eps) {
    if (!(loss >= 0.0f && loss <= DQN_PER_MAX_PRIORITY)) loss = 0.0f;
    float p = powf(loss + eps, alpha);
    return p < DQN_PER_MAX_PRIORITY ? p : DQN_PER_MAX_PRIORITY;
}

/* beta at update t: linear from beta0 to 1 over beta_updates updates */
DQN_HD float dqn_per_beta(uint64_t t, float beta0, uint64_t beta_updates) {
    float f = beta_updates == 0 || t >= beta_updates ? 1.0f : (float)t / (float)beta_updates;
    return fmaf(1.0f - beta0, f, beta0);
}

/* The point sample j of B aims at: stratified, one draw u in [0, 1) in each of B equal
 * segments of the total. */
DQN_HD float dqn_per_target(int j, int B, float u, float total) {
    return ((float)j + u) * (total / (float)B);
}

/* The row whose prefix-sum interval holds `at`, clamped below size (rounding can reach past the
 * last filled row). Comparisons and subtractions only: every backend takes the same path. */
DQN_HD int32_t dqn_per_descend(const float *tree, int leaves, float at, uint32_t size) {
    int k = 1;
    while (k < leaves) {
        float left = tree[2 * k];
        if (at < left) k = 2 * k;
        else {
            at -= left;
            k = 2 * k + 1;
        }
    }
    int32_t i = (int32_t)(k - leaves);
    return (uint32_t)i < size ? i : (int32_t)size - 1;
}

/* The importance weight (N P(i))^-beta over the batch's largest: (p_min / p)^beta, in (0, 1]. */
DQN_HD float dqn_per_weight(float p, float p_min, float beta) {
    return powf(p_min / p, beta);
}

/* The least power of two >= cap. */
static inline int dqn_per_leaves(int cap) {
    int L = 1;
    while (L < cap) L *= 2;
    return L;
}

#endif
