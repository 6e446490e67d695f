/* Learning bars. learn_final: train a preset for its own step budget and evaluate the FINAL
 * policy greedily (midpoint taus), as `dqn train` does. learn_until: a greedy evaluation every
 * `every` env steps; the bar is met when one evaluation reaches it within the step budget. */
#ifndef DQN_TEST_LEARN_COMMON_H
#define DQN_TEST_LEARN_COMMON_H
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "dqn.h"

static inline double learn_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Trains c up to c->steps with a greedy evaluation of `episodes` every `every` env steps; returns
 * the best evaluation mean and stops at the first that reaches `bar`. *loop (when loop is not
 * NULL): the env loop the trainer ran (dqn_trainer_env_loop). */
static inline double learn_until_config(const dqn_config *cfg, int64_t every, int episodes,
                                        double bar, const char **loop) {
    dqn_config c = *cfg;
    const char *device = c.device, *env = c.env;
    const uint64_t seed = c.seed;
    const int64_t budget = c.steps;
    dqn_trainer *t = NULL;
    double t0 = learn_now(), eval_s = 0, best = -INFINITY;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return best;
    if (loop) *loop = dqn_trainer_env_loop(t);
    for (int64_t at = every; at <= budget; at += every) {
        CHECK_OK(dqn_trainer_run_until(t, at));
        double e0 = learn_now(), mean = -INFINITY, sd = 0;
        CHECK_OK(dqn_trainer_evaluate(t, episodes, seed + 1000, &mean, &sd, NULL));
        eval_s += learn_now() - e0;
        dqn_train_stats st;
        dqn_trainer_stats(t, &st);
        printf("%s %s seed %llu: step %lld, updates %lld, train return %.1f, eval %.1f +- %.1f "
               "(%d episodes), %.1f s (%.1f s of it evaluating)\n",
               device, env, (unsigned long long)seed, (long long)st.env_steps, (long long)st.updates,
               st.mean_return, mean, sd, episodes, learn_now() - t0, eval_s);
        fflush(stdout);
        if (mean > best) best = mean;
        if (mean >= bar) break;
    }
    dqn_trainer_destroy(t);
    return best;
}

/* learn_until_config on env's preset; env_loop NULL: the config's default. */
static inline double learn_until_on(const char *device, const char *env_loop, const char *env,
                                    uint64_t seed, int64_t budget, int64_t every, int episodes,
                                    double bar) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, env));
    c.seed = seed;
    c.steps = budget;
    snprintf(c.device, sizeof c.device, "%s", device);
    if (env_loop) CHECK_OK(dqn_config_set(&c, "env_loop", env_loop));
    return learn_until_config(&c, every, episodes, bar, NULL);
}

/* Returns the final policy's greedy mean over `episodes` episodes after the preset's budget. */
static inline double learn_final_on(const char *device, const char *env, uint64_t seed,
                                    int episodes) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, env));
    c.seed = seed;
    snprintf(c.device, sizeof c.device, "%s", device);
    dqn_trainer *t = NULL;
    double t0 = learn_now(), mean = -INFINITY, sd = 0;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return mean;
    for (int k = 1; k <= 5; k++) {
        CHECK_OK(dqn_trainer_run_until(t, c.steps * k / 5));
        dqn_train_stats st;
        dqn_trainer_stats(t, &st);
        printf("%s %s seed %llu: step %lld, updates %lld, train return %.1f, %.1f s\n", device,
               env, (unsigned long long)seed, (long long)st.env_steps, (long long)st.updates,
               st.mean_return, learn_now() - t0);
        fflush(stdout);
    }
    CHECK_OK(dqn_trainer_evaluate(t, episodes, seed + 1000, &mean, &sd, NULL));
    printf("%s %s seed %llu: final greedy %.1f +- %.1f (%d episodes), %.1f s\n", device, env,
           (unsigned long long)seed, mean, sd, episodes, learn_now() - t0);
    dqn_trainer_destroy(t);
    return mean;
}

static inline double learn_final(const char *env, uint64_t seed, int episodes) {
    return learn_final_on("cpu", env, seed, episodes);
}

static inline double learn_until(const char *env, uint64_t seed, int64_t budget, int64_t every,
                          int episodes, double bar) {
    return learn_until_on("cpu", NULL, env, seed, budget, every, episodes, bar);
}
#endif
