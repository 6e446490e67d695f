/* env_step's work on one slot (contract: backends/ops.def), shared by the CPU backend's loop and
 * the CUDA kernel (DQN_HD): the env's dynamics (envs/classic.h), then the slot's records as
 * dqn_vecenv_step keeps them (envs/env_slot.h: time limit, episode return), reset inside. The
 * market's slot is envs/market_step.h's; the argument check here covers every kind. */
#ifndef DQN_CLASSIC_STEP_H
#define DQN_CLASSIC_STEP_H
#include "backends/backend.h"
#include "core/error.h"
#include "envs/classic.h"
#include "envs/env_slot.h"
#include "envs/market_step.h"

/* env_step's arguments, checked alike by every backend; libm is the host's only */
static inline dqn_status dqn_env_io_check(const dqn_env_io *io, int has_libm) {
    if (!io) return DQN_ERR(DQN_ERR_ARG, "env_step: io is NULL");
    if (io->kind != DQN_ENV_CARTPOLE && io->kind != DQN_ENV_ACROBOT &&
        io->kind != DQN_ENV_MOUNTAINCAR && io->kind != DQN_ENV_MARKET)
        return DQN_ERR(DQN_ERR_ARG, "env_step: env kind %d (cartpole 0, acrobot 1, "
                       "mountaincar 2, market 3)", (int)io->kind);
    if (io->math != DQN_ENV_MATH_CR && !(io->math == DQN_ENV_MATH_LIBM && has_libm))
        return DQN_ERR(DQN_ERR_ARG, "env_step: math %d (%s)", (int)io->math,
                       has_libm ? "DQN_ENV_MATH_CR or DQN_ENV_MATH_LIBM"
                                : "this backend computes DQN_ENV_MATH_CR only");
    if (io->n < 1 || io->max_steps < 0)
        return DQN_ERR(DQN_ERR_ARG, "env_step: n = %d, max_steps = %d", io->n, io->max_steps);
    if (!io->state || !io->counter || !io->ep_len || !io->ep_return || !io->obs ||
        !io->final_obs || !io->reward || !io->terminated || !io->truncated || !io->done_return ||
        !io->done_len)
        return DQN_ERR(DQN_ERR_ARG, "env_step: a NULL buffer");
    if (io->kind == DQN_ENV_MARKET && !dqn_market_dev_ok(io->market, io->max_steps)) {
        const dqn_market_dev *m = io->market;
        if (!m) return DQN_ERR(DQN_ERR_ARG, "env_step: market without its data (io->market)");
        return DQN_ERR(DQN_ERR_ARG, "env_step: market data %s, rows %d, cols %d, assets %d, "
                       "levels %d, window %d, starts [%d, %d - %d], max_steps %d (want 1 .. "
                       "episode_len, the rows a slot reaches inside the table)",
                       m->z && m->price ? "set" : "NULL", m->rows, m->cols, m->assets,
                       m->levels, m->window, m->first, m->end, m->episode_len, io->max_steps);
    }
    return DQN_OK;
}

DQN_HD int dqn_classic_obs_dim(int kind) {
    return kind == DQN_ENV_CARTPOLE ? DQN_CARTPOLE_OBS
           : kind == DQN_ENV_ACROBOT ? DQN_ACROBOT_OBS
                                     : DQN_MOUNTAINCAR_OBS;
}

DQN_HD int dqn_classic_state_dim(int kind) {
    return kind == DQN_ENV_CARTPOLE ? DQN_CARTPOLE_STATE
           : kind == DQN_ENV_ACROBOT ? DQN_ACROBOT_STATE
                                     : DQN_MOUNTAINCAR_STATE;
}

/* slot i's reset: state and obs from its stream */
DQN_HD void dqn_classic_reset1(int kind, int cr, double *s, uint64_t seed, uint32_t stream,
                               uint64_t *counter, float *obs) {
    if (kind == DQN_ENV_CARTPOLE) dqn_cartpole_reset(s, seed, stream, counter, obs);
    else if (kind == DQN_ENV_ACROBOT) dqn_acrobot_reset(cr, s, seed, stream, counter, obs);
    else dqn_mountaincar_reset(s, seed, stream, counter, obs);
}

/* Slot i of env_step (actions NULL: the reset of every slot). KIND is the io's kind, a
 * constant where the caller can make it one. */
DQN_HD void dqn_classic_slot(const dqn_env_io *io, int KIND, size_t i, const int32_t *actions) {
    const int cr = io->math == DQN_ENV_MATH_CR;
    const int od = dqn_classic_obs_dim(KIND), sd = dqn_classic_state_dim(KIND);
    double s[4], *state = (double *)io->state;
    for (int k = 0; k < sd; k++) s[k] = state[i * sd + k];
    uint64_t counter = io->counter[i];
    const uint32_t stream = io->stream_base + (uint32_t)i;
    float *obs = io->obs + i * od, *final_obs = io->final_obs + i * od;
    if (!actions) {
        dqn_classic_reset1(KIND, cr, s, io->seed, stream, &counter, obs);
        for (int k = 0; k < od; k++) final_obs[k] = obs[k];
        dqn_slot_clear(&io->ep_len[i], &io->ep_return[i], &io->reward[i], &io->terminated[i],
                       &io->truncated[i], &io->done_return[i], &io->done_len[i]);
    } else {
        float reward;
        int term = KIND == DQN_ENV_CARTPOLE ? dqn_cartpole_step(cr, s, actions[i], obs, &reward)
                   : KIND == DQN_ENV_ACROBOT
                       ? dqn_acrobot_step(cr, s, actions[i], obs, &reward)
                       : dqn_mountaincar_step(cr, s, actions[i], obs, &reward);
        for (int k = 0; k < od; k++) final_obs[k] = obs[k];
        io->reward[i] = reward;
        io->terminated[i] = (uint8_t)term;
        io->truncated[i] = 0;
        if (dqn_slot_record(io->max_steps, reward, &io->terminated[i], &io->truncated[i],
                            &io->ep_len[i], &io->ep_return[i], &io->done_return[i],
                            &io->done_len[i])) {
            dqn_classic_reset1(KIND, cr, s, io->seed, stream, &counter, obs);
            io->ep_len[i] = 0;
            io->ep_return[i] = 0.0;
        }
    }
    for (int k = 0; k < sd; k++) state[i * sd + k] = s[k];
    io->counter[i] = counter;
}

#endif
