/* Training N steps, saving, loading and continuing gives bit-for-bit the same loss sequence on
 * the CPU as training without the stop (replay buffer saved in the checkpoint, with its
 * priorities when prioritised), and with periodic evaluations the same best evaluation. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dqn.h"

#define TOTAL 2400
#define STOP 1300
#define CAP 8192

static void small_config(dqn_config *c, const char *env) {
    dqn_config_preset(c, env);
    c->steps = TOTAL;
    c->learning_starts = 300;
    c->batch_size = 16;
    c->n_tau = c->n_tau_target = c->k_tau = 4;
    c->save_replay = 1;
    c->target_period = 50;
    c->num_envs = 2;
    snprintf(c->device, sizeof c->device, "cpu");
}

/* Train to env step `to`, with a periodic evaluation at each multiple of c->eval_interval. */
static void advance(dqn_trainer *t, int64_t to) {
    const dqn_config *c = dqn_trainer_config(t);
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    int64_t every = c->eval_interval;
    while (st.env_steps < to) {
        int64_t next = every ? (st.env_steps / every + 1) * every : to;
        CHECK_OK(dqn_trainer_run_until(t, next < to ? next : to));
        dqn_trainer_stats(t, &st);
        if (every && st.env_steps % every == 0) {
            double m, sd;
            int improved;
            CHECK_OK(dqn_trainer_eval_periodic(t, NULL, &m, &sd, &improved));
        }
    }
}

static void run_case(const char *env, double tau_target, const char *replay, int eval_interval) {
    static double full[CAP], part[CAP];
    size_t n_full = 0, n_part = 0;
    dqn_config c;
    small_config(&c, env);
    c.tau_target = tau_target;
    snprintf(c.replay, sizeof c.replay, "%s", replay);
    c.eval_interval = eval_interval;
    c.eval_interval_episodes = 2;
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    dqn_trainer_record_losses(t, full, CAP, &n_full);
    advance(t, TOTAL);
    double best_full, best_part, at_save, at_load;
    int64_t step_full, step_part, s_save, s_load;
    dqn_trainer_eval_best(t, &best_full, &step_full);
    dqn_trainer_destroy(t);

    char path[] = "/tmp/dqn-resume-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    CHECK_OK(dqn_trainer_create(&c, &t));
    dqn_trainer_record_losses(t, part, CAP, &n_part);
    advance(t, STOP);
    dqn_trainer_eval_best(t, &at_save, &s_save);
    dqn_train_stats saved, loaded;
    dqn_trainer_stats(t, &saved);
    CHECK_OK(dqn_trainer_save(t, path));
    dqn_trainer_destroy(t);
    t = NULL;
    CHECK_OK(dqn_trainer_load(path, "cpu", &t));
    if (!t) return;
    /* a run that resumes between rounds of updates reports the last one's loss and norm, as
     * the run without the stop does at that step */
    CHECK_OK(dqn_trainer_run_until(t, STOP));
    dqn_trainer_stats(t, &loaded);
    CHECK(memcmp(&saved.last_loss, &loaded.last_loss, sizeof saved.last_loss) == 0 &&
              memcmp(&saved.grad_norm, &loaded.grad_norm, sizeof saved.grad_norm) == 0,
          "%s: loss %.9g, norm %.9g after the resume; %.9g, %.9g when saved", env,
          loaded.last_loss, loaded.grad_norm, saved.last_loss, saved.grad_norm);
    dqn_trainer_record_losses(t, part, CAP, &n_part);
    dqn_trainer_eval_best(t, &at_load, &s_load);
    advance(t, TOTAL);
    dqn_trainer_eval_best(t, &best_part, &step_part);
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    dqn_trainer_destroy(t);
    unlink(path);

    printf("%s (polyak %g, %s replay): %zu updates uninterrupted, %zu with a stop at step %d\n",
           env, tau_target, replay, n_full, n_part, STOP);
    CHECK(n_full > 100, "%s: only %zu updates", env, n_full);
    CHECK(n_full == n_part, "%s: %zu vs %zu updates", env, n_full, n_part);
    CHECK(st.env_steps == TOTAL, "%s: resumed run ended at %lld", env, (long long)st.env_steps);
    if (eval_interval) {
        printf("  best evaluation %g at step %lld (at the stop: %g at %lld)\n", best_full,
               (long long)step_full, at_save, (long long)s_save);
        CHECK(s_save > 0 && (at_load == at_save || (isnan(at_load) && isnan(at_save))) &&
                  s_load == s_save, "%s: best %g at %lld saved, %g at %lld loaded", env, at_save,
              (long long)s_save, at_load, (long long)s_load);
        CHECK(best_part == best_full && step_part == step_full, "%s: best %g at %lld resumed, "
              "%g at %lld uninterrupted", env, best_part, (long long)step_part, best_full,
              (long long)step_full);
    }
    size_t first = n_full;
    for (size_t i = 0; i < n_full && i < n_part; i++)
        if (memcmp(&full[i], &part[i], sizeof full[i]) != 0) { first = i; break; }
    CHECK(first == n_full, "%s: losses differ from update %zu: %.9g vs %.9g", env, first,
          first < n_full ? full[first] : 0.0, first < n_full ? part[first] : 0.0);
}

int main(void) {
    run_case("cartpole", 0.0, "uniform", 0);
    run_case("acrobot", 0.01, "uniform", 0);
    run_case("cartpole", 0.0, "prioritized", 0);
    run_case("cartpole", 0.0, "uniform", 500);
    return check_finish("test_resume");
}
