/* The training episodes' record in backend memory (dqn_episodes), written once for the
 * episode_record op's CPU loop and its CUDA kernel (DQN_HD): its arguments' check, and how the
 * counters move on after E finished episodes were written from entry ctr[2] on. */
#ifndef DQN_EPISODES_H
#define DQN_EPISODES_H
#include <stdint.h>

#include "backends/backend.h"
#include "core/error.h"
#include "dqn_philox.h" /* DQN_HD */

DQN_HD void dqn_episodes_advance(uint64_t *ctr, uint64_t cap, uint64_t E) {
    ctr[0] += E;
    ctr[1] = ctr[1] + E < cap ? ctr[1] + E : cap;
    ctr[2] = (ctr[2] + E) % cap;
}

/* episode_record's arguments, checked alike by every backend */
static inline dqn_status dqn_episode_record_check(const dqn_episodes *rec,
                                                  const uint8_t *terminated,
                                                  const uint8_t *truncated,
                                                  const double *done_return, int n) {
    if (!rec || !rec->recent || !rec->ctr || !terminated || !truncated || !done_return)
        return DQN_ERR(DQN_ERR_ARG, "episode_record: a NULL argument or buffer");
    if (n < 1 || rec->cap < 1)
        return DQN_ERR(DQN_ERR_ARG, "episode_record: n = %d, cap = %d (both >= 1)", n, rec->cap);
    return DQN_OK;
}

#endif
