/* Env steps per second of the built-in envs through the vector (random actions from Philox), for
 * comparison with Gymnasium stepped from Python (bench/bench_env_gym.py). Usage:
 * bench_env [seconds per figure, default 1]. */
#include <stdio.h>
#include <stdlib.h>

#include "env_rate.h"

static double steps_per_s(const char *name, int n, double seconds) {
    dqn_env env = dqn_env_of(dqn_env_find(name));
    return env_steps_per_s(&env, n, seconds);
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
