/* Training N steps, saving, loading and continuing gives bit-for-bit the same loss sequence on
 * the CPU as training without the stop (replay buffer saved in the checkpoint, with its
 * priorities when prioritised). */
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

static void run_case(const char *env, double tau_target, const char *replay) {
    static double full[CAP], part[CAP];
    size_t n_full = 0, n_part = 0;
    dqn_config c;
    small_config(&c, env);
    c.tau_target = tau_target;
    snprintf(c.replay, sizeof c.replay, "%s", replay);
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    dqn_trainer_record_losses(t, full, CAP, &n_full);
    CHECK_OK(dqn_trainer_run_until(t, TOTAL));
    dqn_trainer_destroy(t);

    char path[] = "/tmp/dqn-resume-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    CHECK_OK(dqn_trainer_create(&c, &t));
    dqn_trainer_record_losses(t, part, CAP, &n_part);
    CHECK_OK(dqn_trainer_run_until(t, STOP));
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
    CHECK_OK(dqn_trainer_run_until(t, TOTAL));
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    dqn_trainer_destroy(t);
    unlink(path);

    printf("%s (polyak %g, %s replay): %zu updates uninterrupted, %zu with a stop at step %d\n",
           env, tau_target, replay, n_full, n_part, STOP);
    CHECK(n_full > 100, "%s: only %zu updates", env, n_full);
    CHECK(n_full == n_part, "%s: %zu vs %zu updates", env, n_full, n_part);
    CHECK(st.env_steps == TOTAL, "%s: resumed run ended at %lld", env, (long long)st.env_steps);
    size_t first = n_full;
    for (size_t i = 0; i < n_full && i < n_part; i++)
        if (memcmp(&full[i], &part[i], sizeof full[i]) != 0) { first = i; break; }
    CHECK(first == n_full, "%s: losses differ from update %zu: %.9g vs %.9g", env, first,
          first < n_full ? full[first] : 0.0, first < n_full ? part[first] : 0.0);
}

int main(void) {
    run_case("cartpole", 0.0, "uniform");
    run_case("acrobot", 0.01, "uniform");
    run_case("cartpole", 0.0, "prioritized");
    return check_finish("test_resume");
}
