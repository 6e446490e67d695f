/* CartPole-v1 as in Gymnasium 1.4.0 (classic_control/cartpole.py): euler integrator, reward +1
 * on every step including the terminating one (sutton_barto_reward defaults to False), start
 * state U(-0.05, 0.05)^4. Arithmetic follows Gymnasium's expression order so that float64
 * trajectories agree bit for bit (numpy's float64 sin/cos are glibc's). */
#include <math.h>

#include "dqn_philox.h"
#include "envs/env.h"

typedef struct {
    /* the set_state vector: Gymnasium's env.unwrapped.state, in its order */
    double x, x_dot, theta, theta_dot;
} cartpole_state;

#define GRAVITY 9.8
#define MASSCART 1.0
#define MASSPOLE 0.1
#define LENGTH 0.5 /* half the pole's length */
#define FORCE_MAG 10.0
#define TAU 0.02
#define X_THRESHOLD 2.4
#define PI_F64 3.14159265358979323846

static void cartpole_obs(const cartpole_state *s, float *obs) {
    obs[0] = (float)s->x;
    obs[1] = (float)s->x_dot;
    obs[2] = (float)s->theta;
    obs[3] = (float)s->theta_dot;
}

static void cartpole_reset1(const void *ctx, void *state, dqn_rng *rng, float *obs) {
    (void)ctx;
    double u[4];
    for (int k = 0; k < 4; k++) u[k] = -0.05 + (0.05 - -0.05) * dqn_rng_double_(rng);
    cartpole_state *s = state;
    *s = (cartpole_state){u[0], u[1], u[2], u[3]};
    cartpole_obs(s, obs);
}

static void cartpole_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                          float *reward, int *terminated) {
    (void)ctx;
    const double total_mass = MASSPOLE + MASSCART;
    const double polemass_length = MASSPOLE * LENGTH;
    const double theta_threshold = 12 * 2 * PI_F64 / 360;
    cartpole_state *s = state;
    static const double forces[2] = {-FORCE_MAG, FORCE_MAG};
    double force = forces[action[0] == 1]; /* a load, not a branch on a random action */
    double costheta = cos(s->theta), sintheta = sin(s->theta);
    double temp = (force + polemass_length * (s->theta_dot * s->theta_dot) * sintheta) / total_mass;
    double thetaacc = (GRAVITY * sintheta - costheta * temp) /
                      (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / total_mass));
    double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    s->x = s->x + TAU * s->x_dot;
    s->x_dot = s->x_dot + TAU * xacc;
    s->theta = s->theta + TAU * s->theta_dot;
    s->theta_dot = s->theta_dot + TAU * thetaacc;
    *terminated = s->x < -X_THRESHOLD || s->x > X_THRESHOLD || s->theta < -theta_threshold ||
                  s->theta > theta_threshold;
    *reward = 1.0f;
    cartpole_obs(s, obs);
}

static void cartpole_set_state(void *state, const double *v, float *obs) {
    cartpole_state *s = state;
    *s = (cartpole_state){v[0], v[1], v[2], v[3]};
    cartpole_obs(s, obs);
}

DQN_ENV_BATCHED(cartpole, cartpole_state, 4, 1)

const dqn_env_type dqn_env_cartpole = {
    .name = "cartpole",
    .gym_id = "CartPole-v1",
    .api = {.name = "cartpole", .obs_dim = 4, .n_branches = 1, .branch_sizes = {2},
            .max_steps = 500, .state_size = sizeof(cartpole_state), .reset = cartpole_reset,
            .step = cartpole_step},
    .set_state = cartpole_set_state,
    .state_dim = 4,
};
