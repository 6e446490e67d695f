/* The market env's slot (docs/market.md): its state, reset and step, written once for the host
 * env (envs/market.c: dqn_vecenv and the walk-forward evaluation), the CPU backend's env_step
 * and its CUDA kernel (DQN_HD), each reading the tables through a dqn_market_dev (host memory
 * for the host env, backend memory for the op). The arithmetic is market/period.h's. */
#ifndef DQN_MARKET_STEP_H
#define DQN_MARKET_STEP_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backends/backend.h"
#include "dqn_philox.h"
#include "envs/env_slot.h"
#include "market/period.h"

/* One env's state: env_step's state slot for DQN_ENV_MARKET. */
typedef struct {
    int64_t t;                 /* the row of the next decision */
    double ret, turnover, gross;   /* the last period's net return, turnover and gross exposure */
    double pos[DQN_MARKET_MAX_ASSETS];   /* positions held, each in [-1, 1] */
} dqn_market_state;

/* Rows t - window + 1 .. t of the table, then the positions held. */
DQN_HD void dqn_market_observe(const dqn_market_dev *m, const dqn_market_state *s, float *obs) {
    const size_t n = (size_t)m->window * (size_t)m->cols;
    const float *z = m->z + (size_t)(s->t - m->window + 1) * (size_t)m->cols;
    memcpy(obs, z, n * sizeof *obs); /* a window is hundreds of floats: the library's copy */
    for (int a = 0; a < m->assets; a++) obs[n + a] = (float)s->pos[a];
}

/* Decision row t, flat, nothing traded yet (every byte of the state written, as a memset). */
DQN_HD void dqn_market_start_at(const dqn_market_dev *m, dqn_market_state *s, int64_t t,
                                float *obs) {
    s->t = t;
    s->ret = s->turnover = s->gross = 0.0;
    for (int a = 0; a < DQN_MARKET_MAX_ASSETS; a++) s->pos[a] = 0.0;
    dqn_market_observe(m, s, obs);
}

/* An episode starts at a uniform row of [first, end - episode_len] (one draw of the slot's
 * stream, dqn_rng_below's), flat. */
DQN_HD void dqn_market_reset1(const dqn_market_dev *m, dqn_market_state *s, uint64_t seed,
                              uint32_t stream, uint64_t *counter, float *obs) {
    const uint32_t starts = (uint32_t)(m->end - m->episode_len - m->first + 1);
    const uint32_t k = dqn_philox_below(seed, stream, (*counter)++, starts);
    dqn_market_start_at(m, s, (int64_t)m->first + k, obs);
}

/* One decision: action[a] is asset a's position level; the period from row t to t + 1 booked
 * (dqn_market_period), then the observation at t + 1. Returns the reward, the scaled log-return
 * rounded to float; a trading episode never terminates (it ends at its time limit). */
DQN_HD float dqn_market_step(const dqn_market_dev *m, dqn_market_state *s, const int32_t *action,
                             float *obs) {
    double w[DQN_MARKET_MAX_ASSETS];
    for (int a = 0; a < m->assets; a++) w[a] = dqn_market_position(action[a], m->levels);
    const double *p0 = m->price + (size_t)s->t * (size_t)m->assets;
    s->ret = dqn_market_period(p0, p0 + m->assets, s->pos, w, m->assets, m->cost, m->holding,
                               &s->turnover, &s->gross);
    for (int a = 0; a < m->assets; a++) s->pos[a] = w[a];
    s->t++;
    const float reward = (float)(m->reward_scale * dqn_market_log_return(s->ret));
    dqn_market_observe(m, s, obs);
    return reward;
}

/* Slot i of env_step on the market (actions NULL: the reset of every slot; else [n, assets]),
 * with dqn_vecenv_step's records around it (envs/env_slot.h). */
DQN_HD void dqn_market_slot(const dqn_env_io *io, const dqn_market_dev *m, size_t i,
                            const int32_t *actions) {
    dqn_market_state s = ((const dqn_market_state *)io->state)[i];
    uint64_t counter = io->counter[i];
    const uint32_t stream = io->stream_base + (uint32_t)i;
    const size_t od = (size_t)m->window * (size_t)m->cols + (size_t)m->assets;
    float *obs = io->obs + i * od, *final_obs = io->final_obs + i * od;
    if (!actions) {
        dqn_market_reset1(m, &s, io->seed, stream, &counter, obs);
        memcpy(final_obs, obs, od * sizeof *obs);
        dqn_slot_clear(&io->ep_len[i], &io->ep_return[i], &io->reward[i], &io->terminated[i],
                       &io->truncated[i], &io->done_return[i], &io->done_len[i]);
    } else {
        const float reward = dqn_market_step(m, &s, actions + i * (size_t)m->assets, obs);
        memcpy(final_obs, obs, od * sizeof *obs);
        io->reward[i] = reward;
        io->terminated[i] = 0;
        io->truncated[i] = 0;
        if (dqn_slot_record(io->max_steps, reward, &io->terminated[i], &io->truncated[i],
                            &io->ep_len[i], &io->ep_return[i], &io->done_return[i],
                            &io->done_len[i])) {
            dqn_market_reset1(m, &s, io->seed, stream, &counter, obs);
            io->ep_len[i] = 0;
            io->ep_return[i] = 0.0;
        }
    }
    ((dqn_market_state *)io->state)[i] = s;
    io->counter[i] = counter;
}

/* The market's part of env_step's argument check: the tables there, the sizes consistent, and
 * every row a slot can reach inside the table (max_steps, at most episode_len, stops it). */
static inline int dqn_market_dev_ok(const dqn_market_dev *m, int max_steps) {
    return m && m->z && m->price && m->assets >= 1 && m->assets <= DQN_MARKET_MAX_ASSETS &&
           m->levels >= 2 && m->window >= 1 && m->cols >= 1 && m->episode_len >= 1 &&
           m->first >= m->window - 1 && m->end - m->episode_len >= m->first &&
           m->end < m->rows && max_steps >= 1 && max_steps <= m->episode_len;
}

#endif
