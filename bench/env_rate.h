/* Env steps per second of a vector of n envs of an instance: actions drawn beforehand from
 * Philox (as the Python peers draw theirs beforehand with numpy) and cycled; the best of 20 ms
 * windows over `seconds`, since the machine may be shared. Shared by bench_env and bench_market. */
#ifndef DQN_BENCH_ENV_RATE_H
#define DQN_BENCH_ENV_RATE_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dqn_philox.h"
#include "envs/env.h"

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { BENCH_ACTION_ROWS = 1024 }; /* steps of pre-drawn actions, cycled */

static inline double env_steps_per_s(const dqn_env *env, int n, double seconds) {
    dqn_vecenv v;
    size_t per_row = (size_t)n * (size_t)(env->step ? env->n_branches : 1);
    int32_t *act = malloc(BENCH_ACTION_ROWS * per_row * sizeof *act);
    if (!act || dqn_vecenv_create(&v, env, n, 1, DQN_STREAM_ENV) != DQN_OK) {
        fprintf(stderr, "cannot create %d %s envs: %s\n", n, env->name ? env->name : "(null)",
                dqn_last_error());
        exit(1);
    }
    for (size_t k = 0; k < BENCH_ACTION_ROWS * per_row; k++) {
        uint32_t n_act = (uint32_t)env->branch_sizes[k % (size_t)env->n_branches];
        act[k] = (int32_t)dqn_philox_below(1, DQN_STREAM_EXPLORE, k, n_act);
    }
    dqn_vecenv_reset(&v);
    double best = 0, start = bench_now();
    while (bench_now() - start < seconds) {
        uint64_t steps = 0;
        double t0 = bench_now(), t1 = t0;
        while (t1 - t0 < 0.02) {
            for (int r = 0; r < BENCH_ACTION_ROWS; r++)
                dqn_vecenv_step(&v, act + (size_t)r * per_row);
            steps += BENCH_ACTION_ROWS;
            t1 = bench_now();
        }
        double rate = (double)steps * n / (t1 - t0);
        if (rate > best) best = rate;
    }
    dqn_vecenv_destroy(&v);
    free(act);
    return best;
}
#endif
