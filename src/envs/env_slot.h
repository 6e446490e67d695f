/* A vector env slot's records around its env's step, written once for dqn_vecenv_step and the
 * env_step op's per-slot code (host and device, DQN_HD). */
#ifndef DQN_ENV_SLOT_H
#define DQN_ENV_SLOT_H
#include <stdint.h>

#include "dqn_philox.h" /* DQN_HD */

/* A slot just (re)started: no episode behind it and nothing to report. */
DQN_HD void dqn_slot_clear(int32_t *ep_len, double *ep_return, float *reward,
                           uint8_t *terminated, uint8_t *truncated, double *done_return,
                           int32_t *done_len) {
    *ep_len = 0;
    *ep_return = 0.0;
    *reward = 0.0f;
    *terminated = 0;
    *truncated = 0;
    *done_return = 0.0;
    *done_len = 0;
}

/* After the env's step with its reward and flags: the episode's length and return grow, the time
 * limit truncates (Gymnasium's TimeLimit: len >= max_steps, also on a terminal step), and an
 * ending episode reports its return and length. Returns whether it ended: the caller resets the
 * slot and zeroes ep_len and ep_return. */
DQN_HD int dqn_slot_record(int max_steps, float reward, uint8_t *terminated, uint8_t *truncated,
                           int32_t *ep_len, double *ep_return, double *done_return,
                           int32_t *done_len) {
    *ep_len += 1;
    *ep_return += reward;
    *terminated = *terminated != 0;
    *truncated = *truncated || (max_steps > 0 && *ep_len >= max_steps);
    int done = *terminated || *truncated;
    *done_return = done ? *ep_return : 0.0;
    *done_len = done ? *ep_len : 0;
    return done;
}

#endif
