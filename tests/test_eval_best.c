/* Periodic evaluation (eval_interval): it leaves training bit-identical, best.bin holds the
 * parameters of the best evaluation, and a bad mean is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/ckpt_file.h"
#include "dqn.h"
#include "test_tmp.h"

#define TOTAL 3000
#define EVERY 500
#define CAP 8192
#define NEVAL (TOTAL / EVERY)

static void small_config(dqn_config *c) {
    dqn_config_preset(c, "cartpole");
    c->steps = TOTAL;
    c->learning_starts = 200;
    c->batch_size = 16;
    c->train_freq = 4;
    c->updates_per_round = 1;
    c->target_period = 50;
    c->n_tau = c->n_tau_target = c->k_tau = 4;
    c->eval_interval = EVERY;
    c->eval_interval_episodes = 3;
    snprintf(c->device, sizeof c->device, "cpu");
}

/* The bytes of section `name` of the checkpoint at path (malloc'd), or NULL. */
static void *section_copy(const char *path, const char *name, uint64_t *len) {
    dqn_ckpt_reader *r = NULL;
    const void *p;
    void *out = NULL;
    if (dqn_ckpt_reader_open(path, &r) != DQN_OK) return NULL;
    if (dqn_ckpt_reader_find(r, name, &p, len) == DQN_OK && (out = malloc(*len)))
        memcpy(out, p, *len);
    dqn_ckpt_reader_destroy(r);
    return out;
}

static int same_section(const char *a, const char *b, const char *name) {
    uint64_t la = 0, lb = 0;
    void *pa = section_copy(a, name, &la), *pb = section_copy(b, name, &lb);
    int same = pa && pb && la == lb && memcmp(pa, pb, la) == 0;
    free(pa);
    free(pb);
    return same;
}

int main(void) {
    test_tmp_init();
    static double plain[CAP], with[CAP];
    size_t n_plain = 0, n_with = 0;
    dqn_config c;
    small_config(&c);

    /* the same config trained straight through, the evaluations never asked for */
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return check_finish("test_eval_best");
    dqn_trainer_record_losses(t, plain, CAP, &n_plain);
    CHECK_OK(dqn_trainer_run_until(t, TOTAL));
    double fm_plain = 0, fs_plain = 0;
    CHECK_OK(dqn_trainer_evaluate(t, 5, 77, &fm_plain, &fs_plain, NULL));
    char final_plain[256], final_with[256], best[256];
    snprintf(final_plain, sizeof final_plain, "%s", test_tmp_path("plain.bin"));
    snprintf(final_with, sizeof final_with, "%s", test_tmp_path("with.bin"));
    snprintf(best, sizeof best, "%s", test_tmp_path("best.bin"));
    CHECK_OK(dqn_trainer_save(t, final_plain));
    double bm;
    int64_t bs;
    dqn_trainer_eval_best(t, &bm, &bs);
    CHECK(isnan(bm) && bs == -1, "no evaluation yet: best %g at %lld", bm, (long long)bs);
    dqn_trainer_destroy(t);

    /* ... and stopped every EVERY steps for a periodic evaluation, with a snapshot of each */
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return check_finish("test_eval_best");
    dqn_trainer_record_losses(t, with, CAP, &n_with);
    double means[NEVAL];
    int improved[NEVAL];
    char snap[NEVAL][32];
    for (int k = 0; k < NEVAL; k++) {
        CHECK_OK(dqn_trainer_run_until(t, (int64_t)(k + 1) * EVERY));
        double sd;
        CHECK_OK(dqn_trainer_eval_periodic(t, best, &means[k], &sd, &improved[k]));
        snprintf(snap[k], sizeof snap[k], "snap%d.bin", k);
        CHECK_OK(dqn_trainer_save(t, test_tmp_path(snap[k])));
    }
    double fm = 0, fs = 0;
    CHECK_OK(dqn_trainer_evaluate(t, 5, 77, &fm, &fs, NULL));
    CHECK_OK(dqn_trainer_save(t, final_with));

    /* training is the same with the evaluations or without */
    CHECK(n_plain > 500 && n_plain == n_with, "%zu vs %zu updates", n_plain, n_with);
    CHECK(memcmp(plain, with, n_plain * sizeof plain[0]) == 0, "losses differ");
    CHECK(fm == fm_plain && fs == fs_plain, "final evaluation %g vs %g", fm, fm_plain);
    CHECK(same_section(final_plain, final_with, "params") &&
              same_section(final_plain, final_with, "adam_v") &&
              same_section(final_plain, final_with, "envs") &&
              same_section(final_plain, final_with, "counters"),
          "the final states differ");

    /* the best is the first evaluation of the highest mean, and best.bin its parameters */
    int arg = 0;
    for (int k = 1; k < NEVAL; k++)
        if (means[k] > means[arg]) arg = k;
    printf("periodic means:");
    for (int k = 0; k < NEVAL; k++) printf(" %g%s", means[k], improved[k] ? "*" : "");
    printf("; best at evaluation %d\n", arg);
    dqn_trainer_eval_best(t, &bm, &bs);
    CHECK(bm == means[arg] && bs == (int64_t)(arg + 1) * EVERY, "best %g at %lld, expected %g at %d",
          bm, (long long)bs, means[arg], (arg + 1) * EVERY);
    CHECK(improved[0], "the first evaluation is a best");
    for (int k = 1; k < NEVAL; k++) {
        double before = means[0];
        for (int j = 1; j < k; j++) before = means[j] > before ? means[j] : before;
        CHECK(improved[k] == (means[k] > before), "evaluation %d: improved %d", k, improved[k]);
    }
    CHECK(same_section(best, test_tmp_path(snap[arg]), "params"),
          "best.bin's params are not those of evaluation %d", arg);
    for (int k = 0; k < NEVAL; k++)
        if (k != arg && !same_section(test_tmp_path(snap[k]), test_tmp_path(snap[arg]), "params"))
            CHECK(!same_section(best, test_tmp_path(snap[k]), "params"),
                  "best.bin has evaluation %d's params", k);
    /* it is a checkpoint like any: it loads, and holds its own best */
    dqn_trainer *b = NULL;
    CHECK_OK(dqn_trainer_load(best, "cpu", &b));
    if (b) {
        double lm;
        int64_t ls;
        dqn_trainer_eval_best(b, &lm, &ls);
        dqn_train_stats st;
        dqn_trainer_stats(b, &st);
        CHECK(lm == means[arg] && ls == bs && st.env_steps == bs, "best.bin: best %g at %lld, "
              "env step %lld", lm, (long long)ls, (long long)st.env_steps);
        dqn_trainer_destroy(b);
    }
    dqn_policy *p = NULL;
    CHECK_OK(dqn_policy_load(best, &p));
    dqn_policy_destroy(p);

    /* a mean that is not a number is refused and changes nothing */
    int imp = 1;
    CHECK(dqn_trainer_eval_note(t, NAN, &imp) == DQN_ERR_ARG && imp == 0, "NaN mean accepted");
    CHECK(dqn_trainer_eval_note(t, INFINITY, &imp) == DQN_ERR_ARG, "+Inf mean accepted");
    CHECK_OK(dqn_trainer_eval_note(t, bm, &imp));
    CHECK(imp == 0, "an equal mean is not an improvement");
    CHECK_OK(dqn_trainer_eval_note(t, bm + 1, &imp));
    dqn_trainer_eval_best(t, &fm, &bs);
    CHECK(imp == 1 && fm == bm + 1 && bs == TOTAL, "a better mean: best %g at %lld", fm,
          (long long)bs);
    dqn_trainer_destroy(t);
    test_tmp_cleanup();
    return check_finish("test_eval_best");
}
