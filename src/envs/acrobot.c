/* Acrobot-v1 as in Gymnasium 1.4.0 (classic_control/acrobot.py): the "book" dynamics integrated by
 * one rk4 step over dt = 0.2, angles wrapped to [-pi, pi], velocities bounded to 4 pi and 9 pi,
 * no torque noise; reward -1 per step and 0 on the terminal step. Expression order follows
 * Gymnasium's so that float64 trajectories agree bit for bit (numpy's float64 sin/cos are
 * glibc's), which matters because the double pendulum is chaotic. */
#include <math.h>

#include "dqn_philox.h"
#include "envs/env.h"

typedef struct {
    double s[4]; /* the set_state vector: Gymnasium's env.unwrapped.state (theta1, theta2,
                  * dtheta1, dtheta2) */
} acrobot_state;

#define PI_F64 3.14159265358979323846
#define DT 0.2
#define LINK_LENGTH_1 1.0
#define LINK_MASS_1 1.0
#define LINK_MASS_2 1.0
#define LINK_COM_POS_1 0.5
#define LINK_COM_POS_2 0.5
#define LINK_MOI 1.0
#define GRAVITY 9.8
#define MAX_VEL_1 (4 * PI_F64)
#define MAX_VEL_2 (9 * PI_F64)

static void acrobot_obs(const acrobot_state *st, float *obs) {
    const double *s = st->s;
    obs[0] = (float)cos(s[0]);
    obs[1] = (float)sin(s[0]);
    obs[2] = (float)cos(s[1]);
    obs[3] = (float)sin(s[1]);
    obs[4] = (float)s[2];
    obs[5] = (float)s[3];
}

/* Gymnasium draws U(-0.1, 0.1) in float64 and stores the state as float32. */
static void acrobot_reset1(const void *ctx, void *state, dqn_rng *rng, float *obs) {
    (void)ctx;
    acrobot_state *st = state;
    for (int k = 0; k < 4; k++) st->s[k] = (float)(-0.1 + (0.1 - -0.1) * dqn_rng_double_(rng));
    acrobot_obs(st, obs);
}

/* Gymnasium squares numpy float64 scalars with **, which numpy computes with libm's pow(); that
 * is not always x * x (glibc's pow is not correctly rounded), and an ulp apart the chaotic
 * trajectories would drift. The exponent is volatile so that GCC does not fold pow(x, 2). */
static volatile double two = 2.0;
static double npy_square(double x) { return pow(x, two); }

/* _dsdt: time derivative of (theta1, theta2, dtheta1, dtheta2) under torque a. */
static void acrobot_dsdt(const double *s, double a, double *ds) {
    const double m1 = LINK_MASS_1, m2 = LINK_MASS_2, l1 = LINK_LENGTH_1;
    const double lc1 = LINK_COM_POS_1, lc2 = LINK_COM_POS_2, I1 = LINK_MOI, I2 = LINK_MOI;
    const double g = GRAVITY;
    double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    double d1 =
        m1 * (lc1 * lc1) + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * cos(theta2)) + I1 + I2;
    double d2 = m2 * (lc2 * lc2 + l1 * lc2 * cos(theta2)) + I2;
    double phi2 = m2 * lc2 * g * cos(theta1 + theta2 - PI_F64 / 2.0);
    double phi1 = -m2 * l1 * lc2 * npy_square(dtheta2) * sin(theta2) -
                  2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2) +
                  (m1 * lc1 + m2 * l1) * g * cos(theta1 - PI_F64 / 2) + phi2;
    double ddtheta2 =
        (a + d2 / d1 * phi1 - m2 * l1 * lc2 * npy_square(dtheta1) * sin(theta2) - phi2) /
        (m2 * (lc2 * lc2) + I2 - npy_square(d2) / d1);
    double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    ds[0] = dtheta1;
    ds[1] = dtheta2;
    ds[2] = ddtheta1;
    ds[3] = ddtheta2;
}

static double wrap(double x, double m, double M) {
    double diff = M - m;
    while (x > M) x = x - diff;
    while (x < m) x = x + diff;
    return x;
}

static double bound(double x, double m, double M) {
    double y = m > x ? m : x; /* Python's min(max(x, m), M) */
    return M < y ? M : y;
}

static void acrobot_step1(const void *ctx, void *state, const int32_t *action, float *obs,
                         float *reward, int *terminated) {
    (void)ctx;
    acrobot_state *st = state;
    double *s = st->s;
    double torque = (double)(action[0] - 1); /* AVAIL_TORQUE = [-1, 0, +1] */
    /* rk4 over t = [0, dt], as in Gymnasium's rk4() */
    const double dt = DT - 0, dt2 = dt / 2.0;
    double k1[4], k2[4], k3[4], k4[4], y[4];
    acrobot_dsdt(s, torque, k1);
    for (int i = 0; i < 4; i++) y[i] = s[i] + dt2 * k1[i];
    acrobot_dsdt(y, torque, k2);
    for (int i = 0; i < 4; i++) y[i] = s[i] + dt2 * k2[i];
    acrobot_dsdt(y, torque, k3);
    for (int i = 0; i < 4; i++) y[i] = s[i] + dt * k3[i];
    acrobot_dsdt(y, torque, k4);
    for (int i = 0; i < 4; i++) s[i] = s[i] + dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
    s[0] = wrap(s[0], -PI_F64, PI_F64);
    s[1] = wrap(s[1], -PI_F64, PI_F64);
    s[2] = bound(s[2], -MAX_VEL_1, MAX_VEL_1);
    s[3] = bound(s[3], -MAX_VEL_2, MAX_VEL_2);
    *terminated = -cos(s[0]) - cos(s[1] + s[0]) > 1.0;
    *reward = *terminated ? 0.0f : -1.0f;
    acrobot_obs(st, obs);
}

static void acrobot_set_state(void *state, const double *v, float *obs) {
    acrobot_state *st = state;
    for (int k = 0; k < 4; k++) st->s[k] = v[k];
    acrobot_obs(st, obs);
}

DQN_ENV_BATCHED(acrobot, acrobot_state, 6, 1)

const dqn_env_type dqn_env_acrobot = {
    .name = "acrobot",
    .gym_id = "Acrobot-v1",
    .api = {.name = "acrobot", .obs_dim = 6, .n_branches = 1, .branch_sizes = {3},
            .max_steps = 500, .state_size = sizeof(acrobot_state), .reset = acrobot_reset,
            .step = acrobot_step},
    .set_state = acrobot_set_state,
    .state_dim = 4,
};
