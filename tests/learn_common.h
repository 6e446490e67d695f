/* Learning bars: train a preset for its step budget, then a greedy evaluation. */
#ifndef DQN_TEST_LEARN_COMMON_H
#define DQN_TEST_LEARN_COMMON_H
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "dqn.h"

static double learn_once(const char *env, uint64_t seed, int64_t steps, int episodes) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, env));
    c.seed = seed;
    c.steps = steps;
    snprintf(c.device, sizeof c.device, "cpu");
    dqn_trainer *t = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return -1e9;
    CHECK_OK(dqn_trainer_run_until(t, steps));
    double mean = -1e9, sd = 0;
    CHECK_OK(dqn_trainer_evaluate(t, episodes, seed + 1000, &mean, &sd, NULL));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    printf("%s seed %llu: %lld steps, %lld updates, train mean return %.1f, eval %.1f +- %.1f "
           "over %d episodes, %.1f s\n",
           env, (unsigned long long)seed, (long long)st.env_steps, (long long)st.updates,
           st.mean_return, mean, sd, episodes,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    fflush(stdout);
    dqn_trainer_destroy(t);
    return mean;
}
#endif
