/* dqn bench: the training loop's throughput through the public API, as dqn train drives it. */
#include <string.h>

#include "cli/cli.h"

static void bench_help(void) {
    printf(
        "usage: dqn bench [--env E] [--config FILE] [--bench-steps N] [--KEY VALUE]...\n"
        "\n"
        "Creates a trainer from the config (resolved as for dqn train) and times\n"
        "dqn_trainer_run_until in three phases:\n"
        "  fill     learning_starts env steps: acting and env stepping into the replay,\n"
        "           (almost) no updates\n"
        "  warm-up  max(N/10, train_freq) env steps with updates, reported but not counted,\n"
        "           so one-time set-up of the first updates (e.g. CUDA graph capture) is out\n"
        "  timed    N env steps with updates\n"
        "and prints env steps/s and updates/s of the timed phase. Both include acting, env\n"
        "stepping, n-step assembly, replay insertion and the updates (train_freq and\n"
        "updates_per_round set how many updates per env step): this is the update\n"
        "throughput of the whole training loop, not of the update step alone. The steps key\n"
        "is set to cover the phases; run_dir is unused; nothing is written.\n"
        "\n"
        "  --bench-steps N  env steps of the timed phase (default 2000)\n"
        "  config keys      as for dqn train (dqn train --help)\n");
}

static int phase(dqn_trainer *t, const char *name, int64_t target, double *secs,
                 dqn_train_stats *before, dqn_train_stats *after) {
    dqn_trainer_stats(t, before);
    double t0 = cli_now();
    dqn_status s = dqn_trainer_run_until(t, target);
    *secs = cli_now() - t0;
    dqn_trainer_stats(t, after);
    if (s != DQN_OK) return cli_error(CLI_FAIL, "%s phase failed: %s", name, dqn_last_error());
    long long steps = (long long)(after->env_steps - before->env_steps);
    long long ups = (long long)(after->updates - before->updates);
    printf("%-8s %8lld env steps %8lld updates  %8.3f s  %10.1f env steps/s  %9.1f updates/s\n",
           name, steps, ups, *secs, (double)steps / *secs, (double)ups / *secs);
    return CLI_OK;
}

int cli_bench(int argc, char **argv) {
    cli_flags f;
    int rc = cli_flags_parse(argc, argv, &f);
    if (rc) return rc;
    if (cli_flags_help(&f)) {
        bench_help();
        cli_flags_free(&f);
        return CLI_OK;
    }
    static const char *const own[] = {"bench_steps", NULL};
    long long n = 2000;
    const cli_flag *bs = cli_flags_last(&f, "bench_steps");
    rc = cli_flags_once(&f, "bench_steps");
    if (!rc && bs) rc = cli_parse_int(bs->key, bs->value, 1, 1000000000, &n);
    dqn_config c;
    if (!rc) rc = cli_build_config(&f, own, &c);
    cli_flags_free(&f);
    if (rc) return rc;
    int64_t warm = n / 10 > c.train_freq ? n / 10 : c.train_freq;
    c.steps = c.learning_starts + warm + n;
    dqn_trainer *t;
    dqn_status s = dqn_config_validate(&c);
    if (s != DQN_OK || (s = dqn_trainer_create(&c, &t)) != DQN_OK) return cli_fail_status(s);
    printf("dqn %s bench  backend %s  env %s  batch %d  d %d  grn_blocks %d  taus %d/%d/%d  "
           "train_freq %d  updates_per_round %d\n",
           DQN_VERSION, dqn_trainer_backend(t), c.env, c.batch_size, c.d, c.grn_blocks, c.n_tau,
           c.n_tau_target, c.k_tau, c.train_freq, c.updates_per_round);
    double secs;
    dqn_train_stats a, b;
    rc = phase(t, "fill", c.learning_starts, &secs, &a, &b);
    if (!rc) rc = phase(t, "warm-up", c.learning_starts + warm, &secs, &a, &b);
    if (!rc) rc = phase(t, "timed", c.steps, &secs, &a, &b);
    if (!rc)
        printf("result: %.1f env steps/s, %.1f updates/s (%.3f ms per update incl. acting)\n",
               (double)(b.env_steps - a.env_steps) / secs, (double)(b.updates - a.updates) / secs,
               b.updates > a.updates ? 1e3 * secs / (double)(b.updates - a.updates) : 0.0);
    dqn_trainer_destroy(t);
    return rc;
}
