/* MountainCar-v0 as in Gymnasium 1.4.0: the dynamics are envs/classic.h's (shared with the
 * env_step op), with libm's cos (numpy's), so that float64 trajectories agree with Gymnasium's
 * bit for bit. */
#include "envs/classic.h"
#include "envs/env.h"

typedef struct {
    double s[DQN_MOUNTAINCAR_STATE]; /* the set_state vector: Gymnasium's env.unwrapped.state
                                      * (position, velocity) */
} mountaincar_state;

static void mountaincar_reset1(const void *ctx, void *state, dqn_rng *rng, float *obs) {
    (void)ctx;
    dqn_mountaincar_reset(((mountaincar_state *)state)->s, rng->seed, rng->stream, &rng->counter,
                          obs);
}

static void mountaincar_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                              float *reward, int *terminated) {
    (void)ctx;
    *terminated = dqn_mountaincar_step(0, ((mountaincar_state *)state)->s, action[0], obs, reward);
}

static void mountaincar_set_state(void *state, const double *v, float *obs) {
    mountaincar_state *st = state;
    for (int k = 0; k < DQN_MOUNTAINCAR_STATE; k++) st->s[k] = v[k];
    dqn_mountaincar_obs(st->s, obs);
}

DQN_ENV_BATCHED(mountaincar, mountaincar_state, DQN_MOUNTAINCAR_OBS, 1)

const dqn_env_type dqn_env_mountaincar = {
    .name = "mountaincar",
    .gym_id = "MountainCar-v0",
    .api = {.name = "mountaincar", .obs_dim = DQN_MOUNTAINCAR_OBS, .n_branches = 1,
            .branch_sizes = {3}, .max_steps = 200, .state_size = sizeof(mountaincar_state),
            .reset = mountaincar_reset, .step = mountaincar_step},
    .set_state = mountaincar_set_state,
    .state_dim = DQN_MOUNTAINCAR_STATE,
};
