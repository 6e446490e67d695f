/* A real overflow, no fault injection: a user env (the C env API of include/dqn.h) whose sensor
 * reports FLT_MAX, a common "no reading" sentinel, in place of a reading on 0.2% of the steps.
 * The value is finite; the network's arithmetic on it is not: with a trunk of no GRN blocks (no
 * LayerNorm between the input layer and the heads) the products and sums of the forward pass
 * exceed the float range, and the update turns Inf - Inf into NaN.
 *   health off:   the weights become non-finite and the greedy policy is no better than chance;
 *   health detect: the same, and the first slot that went non-finite is named;
 *   health guard: (the default) the run finishes with finite weights, the guards or the skip at
 *                 work, and the greedy policy solves the task.
 * The task: a contextual bandit, 4 contexts one-hot, reward 1 when the action names the context,
 * 20 steps an episode (greedy optimum 20, chance 5). The weights are read from a checkpoint of
 * the trainer (its "params" section). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/ckpt_file.h"
#include "dqn.h"
#include "test_tmp.h"

typedef struct {
    double p;   /* chance that a reading is the sentinel */
    long sentinels;
} sensor_ctx;

static void observe(sensor_ctx *x, dqn_rng *rng, int32_t context, float *obs) {
    int lost = dqn_rng_uniform(rng) < x->p;
    x->sentinels += lost;
    for (int k = 0; k < 4; k++) obs[k] = k == context ? (lost ? FLT_MAX : 1.0f) : 0.0f;
}

static dqn_status sensor_reset(void *ctx, int n, const uint8_t *mask, void *state, dqn_rng *rng,
                               float *obs) {
    int32_t *c = state;
    for (int i = 0; i < n; i++) {
        if (mask && !mask[i]) continue;
        c[i] = (int32_t)dqn_rng_below(&rng[i], 4);
        observe(ctx, &rng[i], c[i], obs + 4 * i);
    }
    return DQN_OK;
}

static dqn_status sensor_step(void *ctx, int n, const int32_t *a, void *state, dqn_rng *rng,
                              float *obs, float *reward, uint8_t *terminated,
                              uint8_t *truncated) {
    int32_t *c = state;
    for (int i = 0; i < n; i++) {
        reward[i] = a[i] == c[i] ? 1.0f : 0.0f;
        terminated[i] = truncated[i] = 0;
        c[i] = (int32_t)dqn_rng_below(&rng[i], 4);
        observe(ctx, &rng[i], c[i], obs + 4 * i);
    }
    return DQN_OK;
}

typedef struct {
    double eval_mean, last_loss;
    size_t params, nonfinite;
    uint64_t skipped, guarded;
    long sentinels;
    char event[160];   /* the first bad slot, with health on */
} outcome;

static void run(const char *health, outcome *o) {
    memset(o, 0, sizeof *o);
    sensor_ctx x = {0.002, 0};
    dqn_env_api e;
    memset(&e, 0, sizeof e);
    e.name = "sentinel";
    e.obs_dim = 4;
    e.n_branches = 1;
    e.branch_sizes[0] = 4;
    e.max_steps = 20;
    e.state_size = sizeof(int32_t);
    e.ctx = &x;
    e.reset = sensor_reset;
    e.step = sensor_step;
    static const char *const set[][2] = {
        {"device", "cpu"}, {"grn_blocks", "0"},       {"d", "16"},     {"head_hidden", "16"},
        {"n_cos", "8"},    {"learning_starts", "200"}, {"steps", "4000"}, {"gamma", "0.5"},
        {"lr", "1e-3"},    {"eps_fraction", "0.3"}};
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        CHECK_OK(dqn_config_set(&c, set[i][0], set[i][1]));
    CHECK_OK(dqn_config_set(&c, "health", health));
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create_env(&c, &e, &t));
    if (!t) return;
    CHECK_OK(dqn_trainer_run_until(t, 0));
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    o->last_loss = st.last_loss;
    o->sentinels = x.sentinels;
    if (strcmp(health, "off") != 0) {
        dqn_health_report r;
        CHECK_OK(dqn_trainer_health_poll(t, 1, &r));
        o->skipped = r.skipped;
        o->guarded = r.guarded_updates;
        if (r.event.slot >= 0)
            snprintf(o->event, sizeof o->event, "slot %s (%s) at update %lld: %s",
                     r.event.slot_name, r.event.stage, (long long)r.event.update, r.event.kind);
    }
    /* the weights, from the checkpoint's params section */
    const char *path = test_tmp_path(health);
    CHECK_OK(dqn_trainer_save(t, path));
    dqn_ckpt_reader *rd = NULL;
    CHECK_OK(dqn_ckpt_reader_open(path, &rd));
    const void *p;
    uint64_t bytes = 0;
    if (rd) CHECK_OK(dqn_ckpt_reader_find(rd, "params", &p, &bytes));
    o->params = (size_t)(bytes / sizeof(float));
    for (size_t i = 0; i < o->params; i++) {
        float w;
        memcpy(&w, (const char *)p + i * sizeof w, sizeof w);
        o->nonfinite += !isfinite(w);
    }
    dqn_ckpt_reader_destroy(rd);
    /* the greedy policy on clean readings */
    x.p = 0;
    double sd;
    CHECK_OK(dqn_trainer_evaluate(t, 20, 7, &o->eval_mean, &sd, NULL));
    dqn_trainer_destroy(t);
    printf("health %-6s: %ld sentinel readings, last loss %g, %zu of %zu weights non-finite, "
           "%llu updates skipped, %llu guarded; greedy mean return %.2f (optimum 20, chance 5)%s%s"
           "\n", health, o->sentinels, o->last_loss, o->nonfinite, o->params,
           (unsigned long long)o->skipped, (unsigned long long)o->guarded, o->eval_mean,
           o->event[0] ? "; first event: " : "", o->event);
}

int main(void) {
    test_tmp_init();
    outcome off, detect, guard;
    run("off", &off);
    run("detect", &detect);
    run("guard", &guard);
    CHECK(off.sentinels > 0 && off.sentinels == guard.sentinels,
          "sentinel readings: %ld off, %ld guard", off.sentinels, guard.sentinels);
    /* without the guards the overflow reaches the weights */
    CHECK(off.params > 0 && off.nonfinite > 0, "health off: %zu of %zu weights non-finite",
          off.nonfinite, off.params);
    CHECK(!isfinite(off.last_loss), "health off: last loss %g is finite", off.last_loss);
    CHECK(off.eval_mean <= 10, "health off: greedy mean %g, expected chance level", off.eval_mean);
    /* detect mode changes nothing, but names the first slot that went bad */
    CHECK(detect.nonfinite == off.nonfinite && detect.event[0],
          "health detect: %zu non-finite weights (off: %zu), first event \"%s\"",
          detect.nonfinite, off.nonfinite, detect.event);
    /* with the guards it does not, and the run learns the task */
    CHECK(guard.params == off.params && guard.nonfinite == 0,
          "health guard: %zu of %zu weights non-finite", guard.nonfinite, guard.params);
    CHECK(isfinite(guard.last_loss), "health guard: last loss %g", guard.last_loss);
    CHECK(guard.skipped + guard.guarded > 0, "health guard: no update was skipped or guarded");
    CHECK(guard.eval_mean >= 18, "health guard: greedy mean %g of 20", guard.eval_mean);
    test_tmp_cleanup();
    return check_finish("test_overflow");
}
