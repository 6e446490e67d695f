/* dqn eval: greedy episodes of a checkpoint's policy, fresh env seeds, nothing written. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* xor with the golden-ratio constant: a fixed bijection, so never equal to the run seed */
uint64_t cli_eval_seed(uint64_t run_seed) { return run_seed ^ 0x9e3779b97f4a7c15ull; }

static void eval_help(void) {
    printf("usage: dqn eval --checkpoint FILE [--episodes N] [--seed S] [--device auto|cpu|cuda]\n"
           "                [--env cartpole|acrobot|mountaincar]\n"
           "\n"
           "Loads a checkpoint written by dqn train and runs N greedy episodes (midpoint taus,\n"
           "no exploration) on fresh envs; prints the mean and standard deviation of the\n"
           "returns. Writes nothing.\n"
           "\n"
           "  --checkpoint FILE  a checkpoint.bin of a run directory\n"
           "  --episodes N       episodes (default: the run's eval_episodes)\n"
           "  --seed S           env seed (default: derived from the run's seed, as the final\n"
           "                     evaluation of dqn train does, so it reproduces eval.json)\n"
           "  --device D         backend to load on (default auto)\n"
           "  --env E            evaluate on this built-in env instead of the run's own; it\n"
           "                     must have the model's shape (a checkpoint trained from Python\n"
           "                     on CartPole-v1 evaluates with --env cartpole)\n");
}

int cli_eval(int argc, char **argv) {
    cli_flags f;
    int rc = cli_flags_parse(argc, argv, &f);
    if (rc) return rc;
    if (cli_flags_help(&f)) {
        eval_help();
        cli_flags_free(&f);
        return CLI_OK;
    }
    static const char *const own[] = {"checkpoint", "episodes", "seed", "device", "env", NULL};
    for (int i = 0; i < f.n && !rc; i++) {
        int known = 0;
        for (const char *const *o = own; *o; o++) known |= cli_flag_is(&f.v[i], *o);
        if (!known) rc = cli_error(CLI_USAGE, "unknown flag %s for dqn eval (see dqn eval --help)",
                                   f.v[i].key);
    }
    for (const char *const *o = own; *o && !rc; o++) rc = cli_flags_once(&f, *o);
    const cli_flag *ck = cli_flags_last(&f, "checkpoint"), *ep = cli_flags_last(&f, "episodes");
    const cli_flag *sd = cli_flags_last(&f, "seed"), *dv = cli_flags_last(&f, "device");
    const cli_flag *en = cli_flags_last(&f, "env");
    if (!rc && !ck) rc = cli_error(CLI_USAGE, "missing --checkpoint FILE (see dqn eval --help)");
    long long episodes = 0;
    uint64_t seed = 0;
    if (!rc && ep) rc = cli_parse_int(ep->key, ep->value, 1, 100000, &episodes);
    if (!rc && sd) rc = cli_parse_u64(sd->key, sd->value, &seed);
    dqn_config scratch;
    dqn_config_defaults(&scratch);
    dqn_status s;
    if (!rc && dv && (s = dqn_config_set(&scratch, dv->key, dv->value)) != DQN_OK)
        rc = cli_fail_status(s);
    dqn_env_api env;
    if (!rc && en && (s = dqn_env_builtin(en->value, &env)) != DQN_OK) rc = cli_fail_status(s);
    dqn_trainer *t = NULL;
    if (!rc && (s = en ? dqn_trainer_load_env(ck->value, scratch.device, &env, &t)
                       : dqn_trainer_load(ck->value, scratch.device, &t)) != DQN_OK)
        rc = cli_fail_status(s);
    if (!rc && !en && strcmp(dqn_trainer_config(t)->env, "external") == 0) {
        rc = cli_error(CLI_USAGE, "%s: trained on an external env (%s): name a built-in env of "
                       "the same shape with --env", ck->value,
                       dqn_trainer_config(t)->env_id[0] ? dqn_trainer_config(t)->env_id : "unnamed");
        dqn_trainer_destroy(t);
    }
    if (rc) {
        cli_flags_free(&f);
        return rc;
    }
    const dqn_config *c = dqn_trainer_config(t);
    int n = ep ? (int)episodes : c->eval_episodes;
    if (!sd) seed = cli_eval_seed(c->seed);
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    printf("checkpoint %s: env %s, %lld env steps, %lld updates, backend %s\n", ck->value,
           en ? en->value : c->env,
           (long long)st.env_steps, (long long)st.updates, dqn_trainer_backend(t));
    double mean, std, *returns = malloc((size_t)n * sizeof *returns);
    if (!returns) rc = cli_error(CLI_FAIL, "out of memory");
    else if ((s = dqn_trainer_evaluate(t, n, seed, &mean, &std, returns)) != DQN_OK)
        rc = cli_error(CLI_FAIL, "evaluation failed: %s", dqn_last_error());
    else {
        char m[32], d[32];
        cli_fmt_double(m, sizeof m, mean, 0);
        cli_fmt_double(d, sizeof d, std, 0);
        printf("eval: %d greedy episodes, seed %llu: mean return %s, std %s\n", n,
               (unsigned long long)seed, m, d);
    }
    free(returns);
    dqn_trainer_destroy(t);
    cli_flags_free(&f);
    return rc;
}
