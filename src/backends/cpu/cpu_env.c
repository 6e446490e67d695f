/* env_step on the CPU (contract: ops.def): the shared per-slot step (envs/classic_step.h,
 * envs/market_step.h) over the slots in order. With DQN_ENV_MATH_LIBM it is dqn_vecenv over the
 * built-in env, bit for bit (the same dynamics code, libm's sin and cos); with DQN_ENV_MATH_CR it
 * is the CUDA kernel's arithmetic, bit for bit. The market's step is its host env's code under
 * either. */
#include "backends/cpu/cpu_internal.h"
#include "envs/classic_step.h"

dqn_status cpu_env_step(dqn_backend *be, const dqn_env_io *io, const int32_t *actions) {
    (void)be;
    DQN_TRY(dqn_env_io_check(io, 1));
    if (io->kind == DQN_ENV_MARKET) {
        const dqn_market_dev m = *io->market;
        for (size_t i = 0; i < (size_t)io->n; i++) dqn_market_slot(io, &m, i, actions);
        return DQN_OK;
    }
    for (size_t i = 0; i < (size_t)io->n; i++) dqn_classic_slot(io, io->kind, i, actions);
    return DQN_OK;
}
