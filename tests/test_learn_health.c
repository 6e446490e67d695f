/* Guard mode under fire: CartPole with every slot poisoned three times (a NaN, an Inf and 1e30,
 * one fault every 41 updates from update 500 on, 3 x slots faults in all) still learns: a greedy
 * mean >= 475 over 20 episodes at one of the evaluations every 5,000 env steps within the
 * preset's budget, seeds 1-3, with finite weights at the end. */
#include <math.h>

#include "learn_common.h"
#include "train/trainer_internal.h"

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

int main(void) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        dqn_config c;
        CHECK_OK(dqn_config_preset(&c, "cartpole"));
        c.seed = seed;
        snprintf(c.device, sizeof c.device, "cpu");
        snprintf(c.health, sizeof c.health, "guard");
        dqn_trainer *t = NULL;
        CHECK_OK(dqn_trainer_create(&c, &t));
        if (!t) return check_finish("test_learn_health");
        dqn_model_health *h = &t->model.h;
        h->n_faults = 0;
        for (int kind = 1; kind <= 3; kind++)
            for (int s = 0; s < h->tab.n_slots && h->n_faults < DQN_HEALTH_MAX_FAULTS; s++) {
                dqn_fault *f = &h->faults[h->n_faults];
                f->slot = s;
                f->kind = kind;
                f->at = 500 + 41 * (uint64_t)h->n_faults;
                h->n_faults++;
            }
        CHECK(h->n_faults == 3 * h->tab.n_slots, "%d faults for %d slots", h->n_faults,
              h->tab.n_slots);
        CHECK_OK(dqn_model_health_replan(&t->model));   /* some faults live in the plans */
        double t0 = learn_now(), best = -INFINITY;
        for (int64_t at = 5000; at <= c.steps; at += 5000) {
            CHECK_OK(dqn_trainer_run_until(t, at));
            double mean = -INFINITY, sd = 0;
            CHECK_OK(dqn_trainer_evaluate(t, 20, seed + 1000, &mean, &sd, NULL));
            dqn_health_report r;
            CHECK_OK(dqn_trainer_health_poll(t, 1, &r));
            printf("guard, faults, seed %llu: step %lld, updates %lld, eval %.1f, skipped %llu, "
                   "rolled back %llu, guarded updates %llu, %.1f s\n", (unsigned long long)seed,
                   (long long)at, (long long)t->updates, mean, (unsigned long long)r.skipped,
                   (unsigned long long)r.rolled_back, (unsigned long long)r.guarded_updates,
                   learn_now() - t0);
            fflush(stdout);
            best = mean > best ? mean : best;
            if (mean >= 475.0 && t->updates > 500 + 41 * (int64_t)h->n_faults) break;
        }
        CHECK(t->updates > 500 + 41 * (int64_t)h->n_faults, "the run ended before its last fault");
        size_t n = t->model.L.n_params;
        CHECK(all_finite(t->model.params, n) && all_finite(t->model.target, n) &&
                  all_finite(t->model.adam_m, n) && all_finite(t->model.adam_v, n),
              "seed %llu: non-finite weights", (unsigned long long)seed);
        dqn_health_report r;
        CHECK_OK(dqn_trainer_health_poll(t, 1, &r));
        CHECK(r.event.slot == 0 && r.event.update == 500 && r.rolled_back == 3 && r.skipped >= 3,
              "seed %llu: first event slot %d at %lld, rolled back %llu", (unsigned long long)seed,
              r.event.slot, (long long)r.event.update, (unsigned long long)r.rolled_back);
        CHECK(best >= 475.0, "guard with faults, seed %llu: best eval mean %.1f < 475",
              (unsigned long long)seed, best);
        dqn_trainer_destroy(t);
    }
    return check_finish("test_learn_health");
}
