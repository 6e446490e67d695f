/* Acrobot-v1 as in Gymnasium 1.4.0: the dynamics are envs/classic.h's (shared with the env_step
 * op), with libm's sin, cos and pow (numpy's), so that float64 trajectories agree with
 * Gymnasium's bit for bit, which matters because the double pendulum is chaotic. */
#include "envs/classic.h"
#include "envs/env.h"

typedef struct {
    double s[DQN_ACROBOT_STATE]; /* the set_state vector: Gymnasium's env.unwrapped.state
                                  * (theta1, theta2, dtheta1, dtheta2) */
} acrobot_state;

static void acrobot_reset1(const void *ctx, void *state, dqn_rng *rng, float *obs) {
    (void)ctx;
    dqn_acrobot_reset(0, ((acrobot_state *)state)->s, rng->seed, rng->stream, &rng->counter, obs);
}

static void acrobot_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                          float *reward, int *terminated) {
    (void)ctx;
    *terminated = dqn_acrobot_step(0, ((acrobot_state *)state)->s, action[0], obs, reward);
}

static void acrobot_set_state(void *state, const double *v, float *obs) {
    acrobot_state *st = state;
    for (int k = 0; k < DQN_ACROBOT_STATE; k++) st->s[k] = v[k];
    dqn_acrobot_obs(0, st->s, obs);
}

DQN_ENV_BATCHED(acrobot, acrobot_state, DQN_ACROBOT_OBS, 1)

const dqn_env_type dqn_env_acrobot = {
    .name = "acrobot",
    .gym_id = "Acrobot-v1",
    .api = {.name = "acrobot", .obs_dim = DQN_ACROBOT_OBS, .n_branches = 1, .branch_sizes = {3},
            .max_steps = 500, .state_size = sizeof(acrobot_state), .reset = acrobot_reset,
            .step = acrobot_step},
    .set_state = acrobot_set_state,
    .state_dim = DQN_ACROBOT_STATE,
};
