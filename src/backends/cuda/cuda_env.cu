/* env_step on CUDA (contract: ops.def): one thread per slot running the per-slot step that the
 * CPU backend runs (envs/classic_step.h, envs/market_step.h), with the correctly rounded sin and
 * cos of envs/classic_math.h and every product unfusable (DQN_MUL), so that each slot's state,
 * draws and outputs are the CPU's bits (the market's log too: market/period.h's own). One
 * kernel, no sync: capturable; the market's tables go by value (their pointers and sizes). */
#include "backends/cuda/cuda_common.cuh"
#include "envs/classic_step.h"

#define ENV_THREADS 128

template <int KIND>
__global__ void k_env_step(dqn_env_io io, const int32_t *actions) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, io.n) dqn_classic_slot(&io, KIND, i, actions);
}

__global__ void k_market_step(dqn_env_io io, dqn_market_dev m, const int32_t *actions) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, io.n) dqn_market_slot(&io, &m, i, actions);
}

dqn_status cuda_env_step(dqn_backend *be, const dqn_env_io *io, const int32_t *actions) {
    DQN_TRY(dqn_env_io_check(io, 0));
    cuda_impl *c = cuda_of(be);
    const unsigned grid = cuda_blocks(c, (size_t)io->n, ENV_THREADS);
    if (io->kind == DQN_ENV_MARKET)
        KLAUNCH(c, k_market_step, grid, ENV_THREADS, 0, *io, *io->market, actions);
    else if (io->kind == DQN_ENV_CARTPOLE)
        KLAUNCH(c, k_env_step<DQN_ENV_CARTPOLE>, grid, ENV_THREADS, 0, *io, actions);
    else if (io->kind == DQN_ENV_ACROBOT)
        KLAUNCH(c, k_env_step<DQN_ENV_ACROBOT>, grid, ENV_THREADS, 0, *io, actions);
    else
        KLAUNCH(c, k_env_step<DQN_ENV_MOUNTAINCAR>, grid, ENV_THREADS, 0, *io, actions);
    return DQN_OK;
}
