/* Epsilon-greedy exploration, written once for the trainer's act (host), the explore op's CPU
 * loop and its CUDA kernel (DQN_HD), so that all three draw the same actions. The schedule is
 * computed in double with every product rounded on its own (no FMA contraction on the device),
 * as the host computes it. */
#ifndef DQN_EXPLORE_H
#define DQN_EXPLORE_H
#include <stdint.h>

#include "backends/backend.h"
#include "core/error.h"
#include "dqn_philox.h"

#if defined(__CUDA_ARCH__)
#define DQN_EX_MUL(a, b) __dmul_rn((a), (b))
#else
#define DQN_EX_MUL(a, b) ((a) * (b))
#endif

/* epsilon at env step t: linear from start to end over span steps (span <= 0: end's formula) */
DQN_HD double dqn_epsilon(double start, double end, double span, int64_t t) {
    double f = span > 0 ? (double)t / span : 1.0;
    if (f > 1.0) f = 1.0;
    return start + DQN_EX_MUL(end - start, f);
}

/* Element i of an acting step's n * D coin flips, whose draws start at base: a random action
 * below n_b into *action (returns 0), or -1 there when the flip says greedy (returns 1). */
DQN_HD int dqn_explore_flip(uint64_t seed, uint64_t base, uint64_t i, double eps, int n_b,
                            int32_t *action) {
    if (dqn_philox_uniform(seed, DQN_STREAM_EXPLORE, base + 2 * i) < eps) {
        *action = (int32_t)dqn_philox_below(seed, DQN_STREAM_EXPLORE, base + 2 * i + 1,
                                            (uint32_t)n_b);
        return 0;
    }
    *action = -1;
    return 1;
}

/* explore's arguments, checked alike by every backend */
static inline dqn_status dqn_explore_check(const dqn_explore_io *x, const dqn_branches *br,
                                           const int32_t *greedy, const int32_t *actions) {
    if (!x || !br || !greedy || !actions || !x->act_steps || !x->env_steps)
        return DQN_ERR(DQN_ERR_ARG, "explore: a NULL argument or counter");
    if (x->n < 1 || br->D < 1 || br->D > DQN_MAX_BRANCHES)
        return DQN_ERR(DQN_ERR_ARG, "explore: n = %d, D = %d (1..%d)", x->n, br->D,
                       DQN_MAX_BRANCHES);
    for (int b = 0; b < br->D; b++)
        if (br->n[b] < 1) return DQN_ERR(DQN_ERR_ARG, "explore: branch %d has %d actions", b,
                                         br->n[b]);
    return DQN_OK;
}

#endif
