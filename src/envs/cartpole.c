/* CartPole-v1 as in Gymnasium 1.4.0: the dynamics are envs/classic.h's (shared with the
 * env_step op), with libm's sin and cos (numpy's), so that float64 trajectories agree with
 * Gymnasium's bit for bit. */
#include "envs/classic.h"
#include "envs/env.h"

typedef struct {
    double s[DQN_CARTPOLE_STATE]; /* the set_state vector: Gymnasium's env.unwrapped.state */
} cartpole_state;

static void cartpole_reset1(const void *ctx, void *state, dqn_rng *rng, float *obs) {
    (void)ctx;
    dqn_cartpole_reset(((cartpole_state *)state)->s, rng->seed, rng->stream, &rng->counter, obs);
}

static void cartpole_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                           float *reward, int *terminated) {
    (void)ctx;
    *terminated = dqn_cartpole_step(0, ((cartpole_state *)state)->s, action[0], obs, reward);
}

static void cartpole_set_state(void *state, const double *v, float *obs) {
    cartpole_state *st = state;
    for (int k = 0; k < DQN_CARTPOLE_STATE; k++) st->s[k] = v[k];
    dqn_cartpole_obs(st->s, obs);
}

DQN_ENV_BATCHED(cartpole, cartpole_state, DQN_CARTPOLE_OBS, 1)

const dqn_env_type dqn_env_cartpole = {
    .name = "cartpole",
    .gym_id = "CartPole-v1",
    .api = {.name = "cartpole", .obs_dim = DQN_CARTPOLE_OBS, .n_branches = 1,
            .branch_sizes = {2}, .max_steps = 500, .state_size = sizeof(cartpole_state),
            .reset = cartpole_reset, .step = cartpole_step},
    .set_state = cartpole_set_state,
    .state_dim = DQN_CARTPOLE_STATE,
};
