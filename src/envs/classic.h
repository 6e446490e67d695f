/* The classic control envs' dynamics (CartPole-v1, Acrobot-v1, MountainCar-v0 as in Gymnasium
 * 1.4.0), written once for the CPU envs (cartpole.c, acrobot.c, mountaincar.c), the CPU
 * backend's env_step and its CUDA kernel (DQN_HD: compiled by the C compiler and by nvcc).
 *
 * A slot's state is doubles in the order of Gymnasium's env.unwrapped.state (4 for CartPole and
 * Acrobot, 2 for MountainCar). Arithmetic follows Gymnasium's expression order so that float64
 * trajectories agree bit for bit. Every product that is added goes through DQN_MUL so that nvcc
 * cannot contract it into an fma (the C build does not contract): both compilers then evaluate
 * the same IEEE operations in the same order.
 *
 * The transcendental functions are the one thing that depends on where the code runs. With cr
 * = 0 (the host only) they are libm's sin, cos and pow(x, 2), numpy's, so that the CPU envs
 * match Gymnasium bit for bit; with cr = 1 (the device always, the host when asked) they are
 * classic_math.h's correctly rounded sin and cos and the exact square x * x rounded once, the same
 * bits on every backend. glibc rounds about 1 result in 1000 the other way (tests/test_env_math.c
 * measures it over the envs' own arguments), so the two modes' trajectories part there. */
#ifndef DQN_CLASSIC_H
#define DQN_CLASSIC_H
#include <math.h>
#include <stdint.h>

#include "dqn_philox.h"
#include "envs/classic_math.h"

#define DQN_CLASSIC_PI 3.14159265358979323846

/* A host build may define DQN_CLASSIC_TRACE(what, x) (what: 0 sincos, 1 square) before it
 * includes this file, to see every argument (tests/test_env_op.c measures the two modes' math
 * over them). */
#if !defined(DQN_CLASSIC_TRACE) || defined(__CUDA_ARCH__)
#define DQN_CL_TRACE(what, x) ((void)0)
#else
#define DQN_CL_TRACE(what, x) DQN_CLASSIC_TRACE(what, x)
#endif

DQN_HD void dqn_cl_sincos(int cr, double x, double *s, double *c) {
    DQN_CL_TRACE(0, x);
#if defined(__CUDA_ARCH__)
    (void)cr;
    dqn_sincos_cr(x, s, c);
#else
    if (cr) {
        dqn_sincos_cr(x, s, c);
    } else {
        *s = sin(x);
        *c = cos(x);
    }
#endif
}

DQN_HD double dqn_cl_cos(int cr, double x) {
    double s, c;
    dqn_cl_sincos(cr, x, &s, &c);
    return c;
}

/* Gymnasium squares numpy float64 scalars with **, which numpy computes with libm's pow(); that
 * is not always x * x (glibc's pow is not correctly rounded), and an ulp apart the chaotic
 * acrobot's trajectories drift. The exponent is volatile so that GCC does not fold pow(x, 2). */
#if !defined(__CUDA_ARCH__)
static volatile double dqn_cl_two = 2.0;
#endif
DQN_HD double dqn_cl_square(int cr, double x) {
    DQN_CL_TRACE(1, x);
#if defined(__CUDA_ARCH__)
    (void)cr;
    return DQN_MUL(x, x);
#else
    return cr ? x * x : pow(x, dqn_cl_two);
#endif
}

/* the next double of a slot's stream (dqn_rng_uniform's draw) */
DQN_HD double dqn_cl_draw(uint64_t seed, uint32_t stream, uint64_t *counter) {
    return dqn_philox_double(seed, stream, (*counter)++);
}

/* ---- CartPole-v1 (classic_control/cartpole.py): euler integrator, reward +1 on every step
 * including the terminating one (sutton_barto_reward defaults to False), start state
 * U(-0.05, 0.05)^4. State: x, x_dot, theta, theta_dot. ---- */

#define DQN_CARTPOLE_OBS 4
#define DQN_CARTPOLE_STATE 4

DQN_HD void dqn_cartpole_obs(const double *s, float *obs) {
    for (int k = 0; k < 4; k++) obs[k] = (float)s[k];
}

DQN_HD void dqn_cartpole_reset(double *s, uint64_t seed, uint32_t stream, uint64_t *counter,
                               float *obs) {
    for (int k = 0; k < 4; k++)
        s[k] = -0.05 + DQN_MUL(0.05 - -0.05, dqn_cl_draw(seed, stream, counter));
    dqn_cartpole_obs(s, obs);
}

/* one step under action (1: push right, else left); returns terminated */
DQN_HD int dqn_cartpole_step(int cr, double *s, int32_t action, float *obs, float *reward) {
    const double gravity = 9.8, masscart = 1.0, masspole = 0.1, length = 0.5 /* half */;
    const double force_mag = 10.0, tau = 0.02, x_threshold = 2.4;
    const double total_mass = masspole + masscart;
    const double polemass_length = masspole * length;
    const double theta_threshold = 12 * 2 * DQN_CLASSIC_PI / 360;
    double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    /* +-force_mag by an exact product, not a branch on a random action */
    double force = DQN_MUL(force_mag, (double)(2 * (action == 1) - 1));
    double sintheta, costheta;
    dqn_cl_sincos(cr, theta, &sintheta, &costheta);
    double temp =
        (force + DQN_MUL(DQN_MUL(polemass_length, DQN_MUL(theta_dot, theta_dot)), sintheta)) /
        total_mass;
    double thetaacc =
        (DQN_MUL(gravity, sintheta) - DQN_MUL(costheta, temp)) /
        DQN_MUL(length,
                4.0 / 3.0 - DQN_MUL(masspole, DQN_MUL(costheta, costheta)) / total_mass);
    double xacc = temp - DQN_MUL(DQN_MUL(polemass_length, thetaacc), costheta) / total_mass;
    s[0] = x + DQN_MUL(tau, x_dot);
    s[1] = x_dot + DQN_MUL(tau, xacc);
    s[2] = theta + DQN_MUL(tau, theta_dot);
    s[3] = theta_dot + DQN_MUL(tau, thetaacc);
    *reward = 1.0f;
    dqn_cartpole_obs(s, obs);
    return s[0] < -x_threshold || s[0] > x_threshold || s[2] < -theta_threshold ||
           s[2] > theta_threshold;
}

/* ---- Acrobot-v1 (classic_control/acrobot.py): the "book" dynamics integrated by one rk4 step
 * over dt = 0.2, angles wrapped to [-pi, pi], velocities bounded to 4 pi and 9 pi, no torque
 * noise; reward -1 per step and 0 on the terminal step. State: theta1, theta2, dtheta1,
 * dtheta2. ---- */

#define DQN_ACROBOT_OBS 6
#define DQN_ACROBOT_STATE 4

DQN_HD void dqn_acrobot_obs(int cr, const double *s, float *obs) {
    double s0, c0, s1, c1;
    dqn_cl_sincos(cr, s[0], &s0, &c0);
    dqn_cl_sincos(cr, s[1], &s1, &c1);
    obs[0] = (float)c0;
    obs[1] = (float)s0;
    obs[2] = (float)c1;
    obs[3] = (float)s1;
    obs[4] = (float)s[2];
    obs[5] = (float)s[3];
}

/* Gymnasium draws U(-0.1, 0.1) in float64 and stores the state as float32. */
DQN_HD void dqn_acrobot_reset(int cr, double *s, uint64_t seed, uint32_t stream,
                              uint64_t *counter, float *obs) {
    for (int k = 0; k < 4; k++)
        s[k] = (float)(-0.1 + DQN_MUL(0.1 - -0.1, dqn_cl_draw(seed, stream, counter)));
    dqn_acrobot_obs(cr, s, obs);
}

/* _dsdt: the time derivative of (theta1, theta2, dtheta1, dtheta2) under torque a */
DQN_HD void dqn_acrobot_dsdt(int cr, const double *s, double a, double *ds) {
    const double m1 = 1.0, m2 = 1.0, l1 = 1.0, lc1 = 0.5, lc2 = 0.5, I1 = 1.0, I2 = 1.0;
    const double g = 9.8, pi = DQN_CLASSIC_PI;
    double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    double sin2, cos2;
    dqn_cl_sincos(cr, theta2, &sin2, &cos2);
    double d1 = DQN_MUL(m1, DQN_MUL(lc1, lc1)) +
                DQN_MUL(m2, DQN_MUL(l1, l1) + DQN_MUL(lc2, lc2) +
                                DQN_MUL(DQN_MUL(DQN_MUL(2, l1), lc2), cos2)) +
                I1 + I2;
    double d2 = DQN_MUL(m2, DQN_MUL(lc2, lc2) + DQN_MUL(DQN_MUL(l1, lc2), cos2)) + I2;
    double phi2 =
        DQN_MUL(DQN_MUL(DQN_MUL(m2, lc2), g), dqn_cl_cos(cr, theta1 + theta2 - pi / 2.0));
    double phi1 =
        DQN_MUL(DQN_MUL(DQN_MUL(DQN_MUL(-m2, l1), lc2), dqn_cl_square(cr, dtheta2)), sin2) -
        DQN_MUL(DQN_MUL(DQN_MUL(DQN_MUL(DQN_MUL(DQN_MUL(2, m2), l1), lc2), dtheta2), dtheta1),
                sin2) +
        DQN_MUL(DQN_MUL(DQN_MUL(m1, lc1) + DQN_MUL(m2, l1), g), dqn_cl_cos(cr, theta1 - pi / 2)) +
        phi2;
    double ddtheta2 =
        (a + DQN_MUL(d2 / d1, phi1) -
         DQN_MUL(DQN_MUL(DQN_MUL(DQN_MUL(m2, l1), lc2), dqn_cl_square(cr, dtheta1)), sin2) -
         phi2) /
        (DQN_MUL(m2, DQN_MUL(lc2, lc2)) + I2 - dqn_cl_square(cr, d2) / d1);
    double ddtheta1 = -(DQN_MUL(d2, ddtheta2) + phi1) / d1;
    ds[0] = dtheta1;
    ds[1] = dtheta2;
    ds[2] = ddtheta1;
    ds[3] = ddtheta2;
}

DQN_HD double dqn_acrobot_wrap(double x, double m, double M) {
    double diff = M - m;
    while (x > M) x = x - diff;
    while (x < m) x = x + diff;
    return x;
}

/* Python's min(max(x, m), M) */
DQN_HD double dqn_acrobot_bound(double x, double m, double M) {
    double y = m > x ? m : x;
    return M < y ? M : y;
}

/* one step under action (torque action - 1: AVAIL_TORQUE = [-1, 0, +1]); returns terminated */
DQN_HD int dqn_acrobot_step(int cr, double *s, int32_t action, float *obs, float *reward) {
    const double pi = DQN_CLASSIC_PI;
    double torque = (double)(action - 1);
    /* rk4 over t = [0, dt], as in Gymnasium's rk4() */
    const double dt = 0.2 - 0, dt2 = dt / 2.0;
    double k1[4], k2[4], k3[4], k4[4], y[4];
    dqn_acrobot_dsdt(cr, s, torque, k1);
    for (int i = 0; i < 4; i++) y[i] = s[i] + DQN_MUL(dt2, k1[i]);
    dqn_acrobot_dsdt(cr, y, torque, k2);
    for (int i = 0; i < 4; i++) y[i] = s[i] + DQN_MUL(dt2, k2[i]);
    dqn_acrobot_dsdt(cr, y, torque, k3);
    for (int i = 0; i < 4; i++) y[i] = s[i] + DQN_MUL(dt, k3[i]);
    dqn_acrobot_dsdt(cr, y, torque, k4);
    for (int i = 0; i < 4; i++)
        s[i] = s[i] + DQN_MUL(dt / 6.0, k1[i] + DQN_MUL(2, k2[i]) + DQN_MUL(2, k3[i]) + k4[i]);
    s[0] = dqn_acrobot_wrap(s[0], -pi, pi);
    s[1] = dqn_acrobot_wrap(s[1], -pi, pi);
    s[2] = dqn_acrobot_bound(s[2], -4 * pi, 4 * pi);
    s[3] = dqn_acrobot_bound(s[3], -9 * pi, 9 * pi);
    int terminated = -dqn_cl_cos(cr, s[0]) - dqn_cl_cos(cr, s[1] + s[0]) > 1.0;
    *reward = terminated ? 0.0f : -1.0f;
    dqn_acrobot_obs(cr, s, obs);
    return terminated;
}

/* ---- MountainCar-v0 (classic_control/mountain_car.py): velocity clipped to +-0.07, position
 * to [-1.2, 0.6], velocity zeroed when the car sits on the left wall moving left; reward -1 on
 * every step; goal position >= 0.5 with velocity >= 0 (goal_velocity = 0); start position
 * U(-0.6, -0.4), velocity 0. State: position, velocity. ---- */

#define DQN_MOUNTAINCAR_OBS 2
#define DQN_MOUNTAINCAR_STATE 2

DQN_HD void dqn_mountaincar_obs(const double *s, float *obs) {
    obs[0] = (float)s[0];
    obs[1] = (float)s[1];
}

DQN_HD void dqn_mountaincar_reset(double *s, uint64_t seed, uint32_t stream, uint64_t *counter,
                                  float *obs) {
    s[0] = -0.6 + DQN_MUL(-0.4 - -0.6, dqn_cl_draw(seed, stream, counter));
    s[1] = 0.0;
    dqn_mountaincar_obs(s, obs);
}

/* np.clip(x, lo, hi) */
DQN_HD double dqn_mountaincar_clip(double x, double lo, double hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

/* one step under action (push action - 1); returns terminated */
DQN_HD int dqn_mountaincar_step(int cr, double *s, int32_t action, float *obs, float *reward) {
    const double min_position = -1.2, max_position = 0.6, max_speed = 0.07;
    const double goal_position = 0.5, goal_velocity = 0.0, force = 0.001, gravity = 0.0025;
    double velocity = s[1] + (DQN_MUL((double)(action - 1), force) +
                              DQN_MUL(dqn_cl_cos(cr, DQN_MUL(3, s[0])), -gravity));
    velocity = dqn_mountaincar_clip(velocity, -max_speed, max_speed);
    double position = dqn_mountaincar_clip(s[0] + velocity, min_position, max_position);
    if (position == min_position && velocity < 0) velocity = 0;
    s[0] = position;
    s[1] = velocity;
    *reward = -1.0f;
    dqn_mountaincar_obs(s, obs);
    return position >= goal_position && velocity >= goal_velocity;
}

#endif
