/* The C env API and the host-driven loop (include/dqn.h): a user env trains and learns; the
 * host-driven loop over a built-in env is the trainer's own loop bit for bit; autoreset slots
 * (valid = 0) are left out; a user env's failure is named; close runs once; checkpoints load
 * with another env of the same shape and refuse one of another shape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dqn.h"
#include "test_tmp.h"
#include "train/trainer_internal.h"

/* A contextual bandit with two branches: the context c in 0..3 comes one-hot; branch 0 (4
 * choices) scores 1 for c, branch 1 (3 choices) scores 1 for c % 3; every episode is one step. */
typedef struct {
    int closes, fail_at, steps;
} bandit_ctx;

static dqn_status bandit_reset(void *ctx, int n, const uint8_t *mask, void *state, dqn_rng *rng,
                               float *obs) {
    (void)ctx;
    int32_t *c = state;
    for (int i = 0; i < n; i++) {
        if (mask && !mask[i]) continue;
        c[i] = (int32_t)dqn_rng_below(&rng[i], 4);
        for (int k = 0; k < 4; k++) obs[i * 4 + k] = k == c[i] ? 1.0f : 0.0f;
    }
    return DQN_OK;
}

static dqn_status bandit_step(void *ctx, int n, const int32_t *a, void *state, dqn_rng *rng,
                              float *obs, float *reward, uint8_t *terminated, uint8_t *truncated) {
    bandit_ctx *x = ctx;
    (void)rng;
    if (x->fail_at && ++x->steps == x->fail_at)
        return dqn_set_error(DQN_ERR_IO, "the simulator went away at step %d", x->steps);
    const int32_t *c = state;
    for (int i = 0; i < n; i++) {
        reward[i] = (float)((a[2 * i] == c[i]) + (a[2 * i + 1] == c[i] % 3));
        terminated[i] = 1;
        truncated[i] = 0;
        for (int k = 0; k < 4; k++) obs[i * 4 + k] = 0.0f;
    }
    return DQN_OK;
}

static void bandit_close(void *ctx) { ((bandit_ctx *)ctx)->closes++; }

static dqn_env_api bandit(bandit_ctx *x) {
    dqn_env_api e;
    memset(&e, 0, sizeof e);
    e.name = "bandit";
    e.obs_dim = 4;
    e.n_branches = 2;
    e.branch_sizes[0] = 4;
    e.branch_sizes[1] = 3;
    e.state_size = sizeof(int32_t);
    e.ctx = x;
    e.reset = bandit_reset;
    e.step = bandit_step;
    e.close = bandit_close;
    return e;
}

static void small(dqn_config *c, const char *preset) {
    CHECK_OK(dqn_config_preset(c, preset));
    CHECK_OK(dqn_config_set(c, "device", "cpu"));
    CHECK_OK(dqn_config_set(c, "d", "32"));
    CHECK_OK(dqn_config_set(c, "head_hidden", "32"));
    CHECK_OK(dqn_config_set(c, "n_cos", "16"));
    CHECK_OK(dqn_config_set(c, "learning_starts", "200"));
    CHECK_OK(dqn_config_set(c, "health", "guard"));
}

static void test_user_env_learns(void) {
    bandit_ctx x = {0, 0, 0};
    dqn_env_api e = bandit(&x);
    dqn_config c;
    dqn_config_defaults(&c);
    small(&c, "cartpole");
    CHECK_OK(dqn_config_set(&c, "steps", "4000"));
    CHECK_OK(dqn_config_set(&c, "num_envs", "4"));
    CHECK_OK(dqn_config_set(&c, "gamma", "0.5"));
    CHECK_OK(dqn_config_set(&c, "lr", "1e-3"));
    CHECK_OK(dqn_config_set(&c, "eps_fraction", "0.3"));
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create_env(&c, &e, &t));
    if (!t) return;
    const dqn_config *tc = dqn_trainer_config(t);
    CHECK(strcmp(tc->env, "external") == 0 && strcmp(tc->env_id, "bandit") == 0 &&
              tc->obs_dim == 4 && strcmp(tc->branches, "4,3") == 0,
          "the config restates the env: env %s id %s obs %d branches %s", tc->env, tc->env_id,
          tc->obs_dim, tc->branches);
    CHECK_OK(dqn_trainer_run_until(t, 0));
    double mean, sd;
    CHECK_OK(dqn_trainer_evaluate(t, 64, 99, &mean, &sd, NULL));
    printf("bandit: greedy mean %.3f (max 2, random 0.58)\n", mean);
    CHECK(mean >= 1.9, "the user env was not learned: greedy mean %g of 2", mean);
    CHECK(x.closes == 0, "closed early");
    dqn_trainer_destroy(t);
    CHECK(x.closes == 1, "close ran %d times, expected once", x.closes);
}

static void test_user_env_errors(void) {
    /* a failing step is named with the env's own message */
    bandit_ctx x = {0, 7, 0};
    dqn_env_api e = bandit(&x);
    dqn_config c;
    dqn_config_defaults(&c);
    small(&c, "cartpole");
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create_env(&c, &e, &t));
    if (t) {
        CHECK(dqn_trainer_run_until(t, 100) == DQN_ERR_ARG &&
                  strstr(dqn_last_error(), "env bandit: step failed: the simulator went away at "
                                           "step 7"),
              "step failure: %s", dqn_last_error());
        dqn_trainer_destroy(t);
    }
    CHECK(x.closes == 1, "close after a failed run: %d", x.closes);
    /* a bad shape is refused at creation, and the env is closed there */
    bandit_ctx y = {0, 0, 0};
    dqn_env_api bad = bandit(&y);
    bad.branch_sizes[1] = 1;
    CHECK(dqn_trainer_create_env(&c, &bad, &t) == DQN_ERR_ARG && t == NULL &&
              strstr(dqn_last_error(), "env bandit: branch 1 has 1 actions, need 2..64"),
          "bad branch: %s", dqn_last_error());
    CHECK(y.closes == 1, "close after a refused env: %d", y.closes);
    bad = bandit(&y);
    bad.step = NULL;
    CHECK(dqn_trainer_create_env(&c, &bad, &t) == DQN_ERR_ARG && y.closes == 2,
          "missing step: %s", dqn_last_error());
}

static void read_params(dqn_trainer *t, float *out) {
    CHECK_OK(t->be->ops->d2h(t->be, out, t->model.params, t->model.L.n_params * sizeof(float)));
}

/* The host-driven loop over a built-in env is the trainer's own loop: same weights, counters. */
static void test_host_loop_is_run_until(void) {
    dqn_config c;
    dqn_config_defaults(&c);
    small(&c, "cartpole");
    CHECK_OK(dqn_config_set(&c, "steps", "3000"));
    CHECK_OK(dqn_config_set(&c, "num_envs", "3"));
    CHECK_OK(dqn_config_set(&c, "n_step", "3"));
    dqn_trainer *a = NULL, *b = NULL;
    CHECK_OK(dqn_trainer_create(&c, &a));
    dqn_config h = c;
    CHECK_OK(dqn_config_set(&h, "env", "external"));
    CHECK_OK(dqn_config_set(&h, "obs_dim", "4"));
    CHECK_OK(dqn_config_set(&h, "branches", "2"));
    CHECK_OK(dqn_trainer_create(&h, &b));
    if (!a || !b) return;
    CHECK(dqn_trainer_run_until(b, 0) == DQN_ERR_ARG &&
              strstr(dqn_last_error(), "the host steps the env"),
          "run_until on a host-driven trainer: %s", dqn_last_error());
    double m, sd;
    CHECK(dqn_trainer_evaluate(b, 2, 1, &m, &sd, NULL) == DQN_ERR_ARG, "evaluate without an env");
    CHECK_OK(dqn_trainer_run_until(a, 0));
    dqn_env_api cp;
    CHECK_OK(dqn_env_builtin("cartpole", &cp));
    dqn_vecenv v;
    CHECK_OK(dqn_vecenv_create(&v, &cp, 3, c.seed, DQN_STREAM_ENV));
    CHECK_OK(dqn_vecenv_reset(&v));
    float prev[12];
    int32_t act[3];
    dqn_train_stats sa, sb;
    do {
        memcpy(prev, v.obs, sizeof prev);
        CHECK_OK(dqn_trainer_act(b, v.obs, act));
        CHECK_OK(dqn_vecenv_step(&v, act));
        CHECK_OK(dqn_trainer_observe(b, prev, act, v.reward, v.final_obs, v.terminated,
                                     v.truncated, NULL));
        dqn_trainer_stats(b, &sb);
    } while (sb.env_steps < 3000);
    CHECK_OK(dqn_trainer_update(b, 0));
    dqn_trainer_stats(a, &sa);
    dqn_trainer_stats(b, &sb);
    size_t np = a->model.L.n_params;
    float *pa = malloc(np * sizeof *pa), *pb = malloc(np * sizeof *pb);
    read_params(a, pa);
    read_params(b, pb);
    printf("host loop: %lld env steps, %lld updates, %lld episodes\n", (long long)sb.env_steps,
           (long long)sb.updates, (long long)sb.episodes);
    CHECK(sa.env_steps == sb.env_steps && sa.updates == sb.updates && sa.updates > 0 &&
              sa.episodes == sb.episodes && sa.mean_return == sb.mean_return &&
              sa.last_loss == sb.last_loss,
          "counters differ: steps %lld/%lld updates %lld/%lld episodes %lld/%lld return %g/%g",
          (long long)sa.env_steps, (long long)sb.env_steps, (long long)sa.updates,
          (long long)sb.updates, (long long)sa.episodes, (long long)sb.episodes, sa.mean_return,
          sb.mean_return);
    CHECK(memcmp(pa, pb, np * sizeof *pa) == 0, "weights differ after the same steps");
    /* greedy actions of both agree on any batch */
    float obs[5 * 4];
    int32_t ga[5], gb[5];
    for (int k = 0; k < 20; k++) obs[k] = 0.05f * (float)((k * 7) % 11 - 5);
    CHECK_OK(dqn_trainer_predict(a, obs, 5, ga));
    CHECK_OK(dqn_trainer_predict(b, obs, 5, gb));
    CHECK(memcmp(ga, gb, sizeof ga) == 0, "predict differs");
    /* an action out of range is refused, naming the slot */
    int32_t badact[3] = {0, 2, 1};
    CHECK(dqn_trainer_observe(b, prev, badact, v.reward, v.final_obs, v.terminated, v.truncated,
                              NULL) == DQN_ERR_ARG &&
              strstr(dqn_last_error(), "env 1, branch 0: action 2 outside [0, 2)"),
          "bad action: %s", dqn_last_error());
    /* a slot marked invalid (an autoreset step) is left out: no step counted, no transition */
    uint8_t valid[3] = {1, 0, 1};
    int before = b->replay.size;
    dqn_trainer_stats(b, &sb);
    int64_t steps = sb.env_steps;
    CHECK_OK(dqn_trainer_observe(b, prev, badact, v.reward, v.final_obs, v.terminated,
                                 v.truncated, valid));
    dqn_trainer_stats(b, &sb);
    CHECK(sb.env_steps == steps + 2, "valid mask: %lld steps after %lld",
          (long long)sb.env_steps, (long long)steps);
    CHECK(b->replay.size <= before + 2, "valid mask: replay %d after %d", b->replay.size, before);
    free(pa);
    free(pb);
    dqn_vecenv_destroy(&v);
    dqn_trainer_destroy(a);
    dqn_trainer_destroy(b);
}

/* Checkpoints with the env swapped: host-driven, another built-in of the same shape, refusal. */
static void test_load_env(void) {
    char path[300], hpath[300];
    snprintf(path, sizeof path, "%s", test_tmp_path("cartpole.bin"));
    snprintf(hpath, sizeof hpath, "%s", test_tmp_path("host.bin"));
    dqn_config c;
    dqn_config_defaults(&c);
    small(&c, "cartpole");
    CHECK_OK(dqn_config_set(&c, "steps", "1500"));
    dqn_trainer *a = NULL, *h = NULL, *e = NULL, *back = NULL;
    CHECK_OK(dqn_trainer_create(&c, &a));
    if (!a) return;
    CHECK_OK(dqn_trainer_run_until(a, 0));
    CHECK_OK(dqn_trainer_save(a, path));
    float obs[8 * 4];
    for (int k = 0; k < 32; k++) obs[k] = 0.04f * (float)((k * 5) % 9 - 4);
    int32_t ga[8], gh[8], ge[8], gback[8];
    CHECK_OK(dqn_trainer_predict(a, obs, 8, ga));
    /* host-driven: the same model, env external with cartpole's shape */
    CHECK_OK(dqn_trainer_load_env(path, "", NULL, &h));
    if (h) {
        const dqn_config *hc = dqn_trainer_config(h);
        CHECK(strcmp(hc->env, "external") == 0 && hc->obs_dim == 4 &&
                  strcmp(hc->branches, "2") == 0 && strcmp(hc->env_id, "cartpole") == 0,
              "host-driven config: env %s obs %d branches %s id %s", hc->env, hc->obs_dim,
              hc->branches, hc->env_id);
        CHECK(dqn_trainer_obs_dim(h) == 4 && dqn_trainer_branches(h, NULL) == 1, "shape");
        CHECK_OK(dqn_trainer_predict(h, obs, 8, gh));
        CHECK(memcmp(ga, gh, sizeof ga) == 0, "host-driven load: predict differs");
        dqn_train_stats s;
        dqn_trainer_stats(h, &s);
        CHECK(s.env_steps == 1500 && s.updates > 0, "counters kept: %lld", (long long)s.env_steps);
        /* it saves, and loads back as it was; a CLI-style load (no swap) keeps it host-driven */
        CHECK_OK(dqn_trainer_save(h, hpath));
        CHECK_OK(dqn_trainer_load(hpath, "", &back));
        if (back) {
            CHECK_OK(dqn_trainer_predict(back, obs, 8, gback));
            CHECK(memcmp(ga, gback, sizeof ga) == 0, "host-driven save/load: predict differs");
            dqn_trainer_destroy(back);
        }
        /* a host-driven checkpoint loads host-driven again (Python's save, then load) */
        back = NULL;
        CHECK_OK(dqn_trainer_load_env(hpath, "", NULL, &back));
        if (back) {
            CHECK_OK(dqn_trainer_predict(back, obs, 8, gback));
            CHECK(memcmp(ga, gback, sizeof ga) == 0, "host-driven load_env: predict differs");
            CHECK(strcmp(dqn_trainer_config(back)->env_id, "cartpole") == 0, "env_id %s kept",
                  dqn_trainer_config(back)->env_id);
            dqn_trainer_destroy(back);
        }
        /* another number of envs: acts and observes for 3 */
        CHECK_OK(dqn_trainer_set_num_envs(h, 3));
        CHECK(dqn_trainer_config(h)->num_envs == 3, "num_envs %d", dqn_trainer_config(h)->num_envs);
        int32_t a3[3];
        float r3[3] = {1, 1, 1};
        uint8_t z3[3] = {0, 0, 0};
        CHECK_OK(dqn_trainer_act(h, obs, a3));
        CHECK_OK(dqn_trainer_observe(h, obs, a3, r3, obs + 12, z3, z3, NULL));
        dqn_trainer_stats(h, &s);
        CHECK(s.env_steps == 1503, "3 envs stepped: %lld", (long long)s.env_steps);
        CHECK(dqn_trainer_set_num_envs(h, 0) == DQN_ERR_ARG &&
                  strstr(dqn_last_error(), "num_envs"), "num_envs 0: %s", dqn_last_error());
        CHECK(dqn_trainer_set_num_envs(a, 2) == DQN_ERR_ARG, "a trainer with its own env");
    }
    /* on a built-in env of the same shape: evaluates */
    dqn_env_api cp, ac;
    CHECK_OK(dqn_env_builtin("cartpole", &cp));
    CHECK_OK(dqn_trainer_load_env(hpath, "", &cp, &e));
    if (e) {
        CHECK_OK(dqn_trainer_predict(e, obs, 8, ge));
        CHECK(memcmp(ga, ge, sizeof ga) == 0, "load on cartpole: predict differs");
        double m, sd;
        CHECK_OK(dqn_trainer_evaluate(e, 3, 5, &m, &sd, NULL));
        dqn_trainer_destroy(e);
    }
    /* another shape is refused, naming both */
    CHECK_OK(dqn_env_builtin("acrobot", &ac));
    CHECK(dqn_trainer_load_env(path, "", &ac, &e) == DQN_ERR_ARG && e == NULL &&
              strstr(dqn_last_error(), "the model is for obs_dim 4 and branches 2; env acrobot "
                                       "has obs_dim 6 and branches 3"),
          "shape mismatch: %s", dqn_last_error());
    CHECK(dqn_env_builtin("market", &ac) == DQN_ERR_ARG, "market is not a fixed built-in");
    dqn_trainer_destroy(a);
    dqn_trainer_destroy(h);
}

int main(void) {
    test_tmp_init();
    test_host_loop_is_run_until();
    test_load_env();
    test_user_env_errors();
    test_user_env_learns();
    test_tmp_cleanup();
    return check_finish("test_env_api");
}
