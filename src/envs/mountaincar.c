/* MountainCar-v0 as in Gymnasium 1.4.0 (classic_control/mountain_car.py): velocity clipped to
 * +-0.07, position to [-1.2, 0.6], velocity zeroed when the car sits on the left wall moving
 * left; reward -1 on every step; goal position >= 0.5 with velocity >= 0 (goal_velocity = 0);
 * start position U(-0.6, -0.4), velocity 0. */
#include <math.h>

#include "dqn_philox.h"
#include "envs/env.h"

typedef struct {
    double position, velocity; /* the set_state vector: Gymnasium's env.unwrapped.state */
} mountaincar_state;

#define MIN_POSITION -1.2
#define MAX_POSITION 0.6
#define MAX_SPEED 0.07
#define GOAL_POSITION 0.5
#define GOAL_VELOCITY 0.0
#define FORCE 0.001
#define GRAVITY 0.0025

static void mountaincar_obs(const mountaincar_state *s, float *obs) {
    obs[0] = (float)s->position;
    obs[1] = (float)s->velocity;
}

static void mountaincar_reset1(const void *ctx, void *state, dqn_rng *rng, float *obs) {
    (void)ctx;
    mountaincar_state *s = state;
    s->position = -0.6 + (-0.4 - -0.6) * dqn_rng_double_(rng);
    s->velocity = 0.0;
    mountaincar_obs(s, obs);
}

/* np.clip(x, lo, hi) */
static double clip(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

static void mountaincar_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                             float *reward, int *terminated) {
    (void)ctx;
    mountaincar_state *s = state;
    double velocity = s->velocity + ((action[0] - 1) * FORCE + cos(3 * s->position) * (-GRAVITY));
    velocity = clip(velocity, -MAX_SPEED, MAX_SPEED);
    double position = clip(s->position + velocity, MIN_POSITION, MAX_POSITION);
    if (position == MIN_POSITION && velocity < 0) velocity = 0;
    *terminated = position >= GOAL_POSITION && velocity >= GOAL_VELOCITY;
    *reward = -1.0f;
    s->position = position;
    s->velocity = velocity;
    mountaincar_obs(s, obs);
}

static void mountaincar_set_state(void *state, const double *v, float *obs) {
    mountaincar_state *s = state;
    s->position = v[0];
    s->velocity = v[1];
    mountaincar_obs(s, obs);
}

DQN_ENV_BATCHED(mountaincar, mountaincar_state, 2, 1)

const dqn_env_type dqn_env_mountaincar = {
    .name = "mountaincar",
    .gym_id = "MountainCar-v0",
    .api = {.name = "mountaincar", .obs_dim = 2, .n_branches = 1, .branch_sizes = {3},
            .max_steps = 200, .state_size = sizeof(mountaincar_state),
            .reset = mountaincar_reset, .step = mountaincar_step},
    .set_state = mountaincar_set_state,
    .state_dim = 2,
};
