/* The market workload's benchmarks (docs/BENCHMARKS.md, "Market environment"):
 *   bench_market env [seconds]     env steps per second of the market env, 4 assets, a 64-row
 *                                  window (644 observation floats), through the vector, random
 *                                  actions drawn beforehand from Philox; 8 envs and 1 env
 *   bench_market dump DIR          writes what bench/bench_market_py.py needs to check its numpy
 *                                  env against ours step by step: data.csv, meta.json, actions,
 *                                  our rewards and observations from a fixed start
 *   bench_market fold DEVICE [LOOP] wall clock per fold of the walk-forward run with the market
 *                                  preset on the default synthetic data (4 folds): training,
 *                                  out-of-sample evaluation, env steps/s; LOOP the env_loop
 *                                  (auto, host or device; default the config's) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dqn_philox.h"
#include "env_rate.h"
#include "envs/market.h"
#include "train/walkforward.h"

static int fail(const char *what) {
    fprintf(stderr, "bench_market: %s: %s\n", what, dqn_last_error());
    return 1;
}

/* The benchmark's env: the default synthetic table (4 assets, 6 features), window 64, fold 0. */
static void env_config(dqn_config *c) {
    dqn_config_preset(c, "market");
    c->window = 64;
    c->synth_assets = 4;
}

static int bench_env(double seconds) {
    dqn_config c;
    env_config(&c);
    dqn_env env;
    if (dqn_env_open(&c, &env) != DQN_OK) return fail("market env");
    printf("market env: %d assets, window %d, obs %d floats, %d position levels\n",
           env.n_branches, c.window, env.obs_dim, c.position_levels);
    printf("market_env_steps_per_s=%.0f\n", env_steps_per_s(&env, 8, seconds));
    printf("market_env_steps_per_s_1env=%.0f\n", env_steps_per_s(&env, 1, seconds));
    dqn_env_close(&env);
    return 0;
}

static int write_bin(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, bytes, f) == bytes;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "bench_market: cannot write %s\n", path);
    return !ok;
}

/* M steps from row `first` with random actions: the actions, our rewards, every observation. */
static int dump(const char *dir) {
    enum { M = 2000 };
    dqn_config c;
    env_config(&c);
    c.cost = 0.001;
    c.holding_cost = 0.0002;
    c.position_levels = 5;
    dqn_env env;
    if (dqn_env_open(&c, &env) != DQN_OK) return fail("market env");
    const dqn_market_ctx *x = env.ctx;
    char path[512];
    snprintf(path, sizeof path, "%s/data.csv", dir);
    if (dqn_market_csv_write(&x->data, path) != DQN_OK) return fail("data.csv");
    int A = env.n_branches, od = env.obs_dim;
    int32_t *act = malloc((size_t)M * A * sizeof *act);
    float *rew = malloc(M * sizeof *rew), *obs = malloc((size_t)(M + 1) * od * sizeof *obs);
    if (!act || !rew || !obs) return fail("memory");
    dqn_market_state s;
    dqn_market_start(x, &s, x->first, obs);
    for (int i = 0; i < M; i++) {
        int terminated;
        for (int a = 0; a < A; a++)
            act[i * A + a] = (int32_t)dqn_philox_below(2, DQN_STREAM_EXPLORE, (uint64_t)i * A + a,
                                                       (uint32_t)x->levels);
        dqn_market_step1(x, &s, act + (size_t)i * A, obs + (size_t)(i + 1) * od, &rew[i],
                       &terminated);
    }
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return fail(path);
    fprintf(f, "{\"window\": %d, \"levels\": %d, \"cost\": %.17g, \"holding_cost\": %.17g, "
               "\"reward_scale\": %.17g, \"train_lo\": %d, \"train_hi\": %d, \"first\": %d, "
               "\"end\": %d, \"episode_len\": %d, \"assets\": %d, \"features\": %d, \"steps\": %d, "
               "\"obs_dim\": %d, \"zclip\": %.17g}\n", x->window, x->levels, x->cost, x->holding,
            x->reward_scale, x->fold.train_lo, x->fold.train_hi, x->first, x->end,
            x->episode_len, A, x->data.features, M, od, DQN_MARKET_ZCLIP);
    fclose(f);
    int bad = write_bin(dir, "actions.i32", act, (size_t)M * A * sizeof *act) ||
              write_bin(dir, "rewards.f32", rew, M * sizeof *rew) ||
              write_bin(dir, "obs.f32", obs, (size_t)(M + 1) * od * sizeof *obs);
    free(act), free(rew), free(obs);
    dqn_env_close(&env);
    if (!bad) printf("wrote %s/{data.csv,meta.json,actions.i32,rewards.f32,obs.f32}\n", dir);
    return bad;
}

static int fold_timing(const char *device, const char *loop) {
    dqn_config c;
    dqn_config_preset(&c, "market");
    snprintf(c.device, sizeof c.device, "%s", device);
    if (loop && dqn_config_set(&c, "env_loop", loop) != DQN_OK) return fail("env_loop");
    dqn_fold_result r[DQN_WF_MAX_FOLDS];
    double t0 = bench_now();
    if (dqn_walkforward_run(&c, r) != DQN_OK) return fail("walk-forward");
    double total = bench_now() - t0, sum = 0;
    for (int k = 0; k < c.folds; k++) {
        printf("market fold %d %s %s: %lld env steps, train %.2f s (%.0f env steps/s incl. "
               "updates), out-of-sample eval %.3f s (%d periods), agent %+.1f%%\n",
               k, device, c.env_loop, (long long)r[k].env_steps, r[k].train_s,
               (double)r[k].env_steps / r[k].train_s, r[k].eval_s, r[k].n,
               100 * r[k].m[DQN_WF_AGENT].total_return);
        sum += r[k].train_s + r[k].eval_s;
        dqn_fold_result_free(&r[k]);
    }
    printf("market_fold_seconds_%s_%s=%.2f (mean of %d folds; whole run %.1f s)\n", device,
           c.env_loop, sum / c.folds, c.folds, total);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "env";
    if (strcmp(mode, "env") == 0) return bench_env(argc > 2 ? atof(argv[2]) : 1.0);
    if (strcmp(mode, "dump") == 0 && argc > 2) return dump(argv[2]);
    if (strcmp(mode, "fold") == 0)
        return fold_timing(argc > 2 ? argv[2] : "cpu", argc > 3 ? argv[3] : NULL);
    fprintf(stderr, "usage: bench_market env [seconds] | dump DIR | fold cpu|cuda "
                    "[auto|host|device]\n");
    return 2;
}
