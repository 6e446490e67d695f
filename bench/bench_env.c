/* Env steps per second of the built-in envs through the vector (random actions from Philox), for
 * comparison with Gymnasium stepped from Python (bench/bench_env_gym.py). Usage:
 * bench_env [seconds per figure, default 1]. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dqn_philox.h"
#include "envs/env.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { ROWS = 1024 }; /* steps of pre-drawn actions, cycled */

/* Steps the vector for about `seconds` with random actions drawn beforehand from Philox (as the
 * Gymnasium script draws its actions beforehand with numpy); returns env steps per second, the
 * best of short windows. */
static double steps_per_s(const char *name, int n, double seconds) {
    const dqn_env_type *t = dqn_env_find(name);
    dqn_vecenv v;
    size_t per_row = (size_t)n * (size_t)(t ? t->n_branches : 1);
    int32_t *act = malloc(ROWS * per_row * sizeof *act);
    dqn_env env = dqn_env_of(t);
    if (!t || !act || dqn_vecenv_create(&v, &env, n, 1, DQN_STREAM_ENV) != DQN_OK) {
        fprintf(stderr, "bench_env: cannot create %d %s envs: %s\n", n, name, dqn_last_error());
        exit(1);
    }
    for (size_t k = 0; k < ROWS * per_row; k++)
        act[k] = (int32_t)dqn_philox_below(1, DQN_STREAM_EXPLORE, k,
                                           (uint32_t)t->branch_sizes[k % (size_t)t->n_branches]);
    dqn_vecenv_reset(&v);
    double best = 0, start = now();
    while (now() - start < seconds) { /* best of 20 ms windows: the machine is shared */
        uint64_t steps = 0;
        double t0 = now(), t1 = t0;
        while (t1 - t0 < 0.02) {
            for (int r = 0; r < ROWS; r++) dqn_vecenv_step(&v, act + (size_t)r * per_row);
            steps += ROWS;
            t1 = now();
        }
        double rate = (double)steps * n / (t1 - t0);
        if (rate > best) best = rate;
    }
    dqn_vecenv_destroy(&v);
    free(act);
    return best;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    if (!(seconds > 0)) {
        fprintf(stderr, "usage: bench_env [seconds per figure > 0]\n");
        return 2;
    }
    printf("cartpole_env_steps_per_s=%.0f\n", steps_per_s("cartpole", 8, seconds));
    printf("cartpole_env_steps_per_s_1env=%.0f\n", steps_per_s("cartpole", 1, seconds));
    printf("cartpole_env_steps_per_s_64env=%.0f\n", steps_per_s("cartpole", 64, seconds));
    printf("acrobot_env_steps_per_s=%.0f\n", steps_per_s("acrobot", 8, seconds));
    printf("mountaincar_env_steps_per_s=%.0f\n", steps_per_s("mountaincar", 8, seconds));
    return 0;
}
