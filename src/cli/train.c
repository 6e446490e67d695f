/* dqn train: a fresh run from a resolved config, or --resume from a checkpoint. Trains in
 * chunks of log_interval env steps; after each, a metrics row and the progress display. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "core/config.h"

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* The first Ctrl-C asks for a clean stop; the handler then resets, so a second one kills. */
static void catch_sigint(int on) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on ? on_sigint : SIG_DFL;
    sa.sa_flags = on ? SA_RESTART | SA_RESETHAND : 0;
    sigaction(SIGINT, &sa, NULL);
}

static const char *const resume_keys[] = {"steps", "run_dir", "log_interval",
                                          "checkpoint_interval", "eval_episodes", "device", NULL};

static void train_help(void) {
    printf(
        "usage: dqn train [--env cartpole|acrobot|mountaincar|market] [--config FILE] "
        "[--KEY VALUE]...\n"
        "       dqn train --resume FILE [--steps N] [--run-dir DIR] [--log-interval N]\n"
        "                 [--checkpoint-interval N] [--eval-episodes N] [--device D]\n"
        "\n"
        "Trains an agent and writes its run directory (--run-dir, default\n"
        "runs/<env>-<seed>-<YYYYmmdd-HHMMSS>; one that holds a config.txt is refused):\n"
        "  config.txt      the resolved config, loadable with --config\n"
        "  metrics.csv     step,wall_s,steps_per_s,mean_return,loss,mean_q,epsilon,grad_norm\n"
        "                  every log_interval env steps (wall_s and steps_per_s: this process;\n"
        "                  steps_per_s over the last interval; mean_return over the last 100\n"
        "                  episodes; nan where there is none yet)\n"
        "  metrics.jsonl   the same rows, one JSON object a line (null for nan)\n"
        "  events.out.tfevents.<unix time>.<host>\n"
        "                  the same scalars for TensorBoard (charts/SPS, charts/episodic_return,\n"
        "                  losses/loss, losses/q_values, charts/epsilon, losses/grad_norm; nan\n"
        "                  left out); a new file each run or resume\n"
        "  checkpoint.bin  at the end, every checkpoint_interval env steps, and on Ctrl-C\n"
        "  evaluations.csv with eval_interval > 0: step,mean,std,best,best_step of each periodic\n"
        "                  evaluation (eval_interval_episodes greedy episodes on eval envs of\n"
        "                  their own; training is the same with them or without)\n"
        "  best.bin        the checkpoint at the best periodic evaluation so far (dqn eval\n"
        "                  --checkpoint and --resume read it); the final policy stays in\n"
        "                  checkpoint.bin\n"
        "  eval.json       the final greedy evaluation: eval_episodes episodes, seed derived\n"
        "                  from the run's seed (dqn eval --checkpoint reproduces it)\n"
        "  health_slots.csv, health_isv.csv\n"
        "                  with --health detect or guard (the default): every slot's figures\n"
        "                  and the ISV each log interval; the first bad slot gets one line on\n"
        "                  stdout, health_event.json and health_event.bin (dqn health --help)\n"
        "\n"
        "--env market runs walk-forward folds instead (docs/market.md): per fold k a\n"
        "sub-directory Fk with the files above for its training window, plus oos.csv and\n"
        "fold.json (out-of-sample metrics beside buy-and-hold and flat); summary.csv and\n"
        "equity.svg for all folds; data.csv when the data is synthetic (--data FILE.csv to\n"
        "use a file). --resume Fk/checkpoint.bin continues that fold's training only.\n"
        "\n"
        "The config is resolved in order: the preset of --env (else of the config file's env,\n"
        "else cartpole), then --config FILE, then each --KEY VALUE (or --KEY=VALUE) in order,\n"
        "then cross-field validation. '-' and '_' are alike in keys; booleans take true, false,\n"
        "1 or 0. Bad input exits with status 2 and one line on stderr, and writes nothing.\n"
        "\n"
        "  --config FILE   \"key = value\" lines, '#' comment lines, e.g. a run's config.txt\n"
        "  --resume FILE   continue from a checkpoint into the directory holding it (or\n"
        "                  --run-dir). The config is the checkpoint's; only the flags above may\n"
        "                  change it, and --steps may not exceed its steps (they fix the\n"
        "                  epsilon schedule). The metrics gain rows; config.txt is rewritten.\n"
        "  Ctrl-C          stop after the current log interval, save checkpoint.bin, exit 130\n"
        "\n"
        "config keys:\n");
    dqn_config_help(stdout);
}

static int save(dqn_trainer *t, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/checkpoint.bin", dir);
    dqn_status s = dqn_trainer_save(t, path);
    return s == DQN_OK ? CLI_OK : cli_error(CLI_FAIL, "%s", dqn_last_error());
}

static void print_header(dqn_trainer *t, const dqn_config *c, const char *from, int64_t at) {
    printf("dqn %s  backend %s  env %s  device %s  env loop %s\n", DQN_VERSION,
           dqn_trainer_backend(t), c->env, c->device, dqn_trainer_env_loop(t));
    printf("%-10s%s\n", "run dir", c->run_dir);
    if (from) printf("%-10sfrom %s at env step %lld\n", "resumed", from, (long long)at);
    printf("%-10sd %d, grn_blocks %d, n_cos %d, bottleneck %d, head_hidden %d, branches %s,\n"
           "%-10staus N %d N' %d K %d, batch %d, buffer %d\n",
           "model", c->d, c->grn_blocks, c->n_cos, c->bottleneck, c->head_hidden,
           c->branches[0] ? c->branches : "env's", "", c->n_tau, c->n_tau_target, c->k_tau,
           c->batch_size, c->buffer_size);
    cli_print_changed(stdout, "changed", c);
    fflush(stdout);
}

static int64_t min4(int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t m = a < b ? a : b;
    m = m < c ? m : c;
    return m < d ? m : d;
}

/* A periodic evaluation: a row of evaluations.csv, and best.bin when the mean is the best. */
static int periodic_eval(dqn_trainer *t, const char *dir, FILE *rows) {
    char best_path[512];
    snprintf(best_path, sizeof best_path, "%s/best.bin", dir);
    double mean, std, best;
    int improved;
    int64_t best_step;
    dqn_status s = dqn_trainer_eval_periodic(t, best_path, &mean, &std, &improved);
    if (s != DQN_OK) return cli_error(CLI_FAIL, "periodic evaluation failed: %s", dqn_last_error());
    dqn_trainer_eval_best(t, &best, &best_step);
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    char m[32], d[32], b[32];
    cli_fmt_double(m, sizeof m, mean, 0);
    cli_fmt_double(d, sizeof d, std, 0);
    cli_fmt_double(b, sizeof b, best, 0);
    if (fprintf(rows, "%lld,%s,%s,%s,%lld\n", (long long)st.env_steps, m, d, b,
                (long long)best_step) < 0 || fflush(rows) != 0)
        return cli_error(CLI_FAIL, "cannot write %s/evaluations.csv: %s", dir, strerror(errno));
    return CLI_OK;
}

static int final_eval(dqn_trainer *t, const dqn_config *c, double wall_s) {
    int n = c->eval_episodes;
    uint64_t seed = cli_eval_seed(c->seed);
    double mean, std, *ret = malloc((size_t)n * sizeof *ret);
    if (!ret) return cli_error(CLI_FAIL, "out of memory");
    dqn_status s = dqn_trainer_evaluate(t, n, seed, &mean, &std, ret);
    int rc;
    if (s != DQN_OK) {
        rc = cli_error(CLI_FAIL, "final evaluation failed: %s", dqn_last_error());
    } else {
        dqn_train_stats st;
        dqn_trainer_stats(t, &st);
        rc = cli_rundir_write_eval(c->run_dir, c->env, n, mean, std, ret, st.env_steps, wall_s,
                                   seed);
        char m[32], d[32];
        cli_fmt_double(m, sizeof m, mean, 0);
        cli_fmt_double(d, sizeof d, std, 0);
        if (!rc)
            printf("eval: %d greedy episodes, seed %llu: mean return %s, std %s\n"
                   "wrote %s/{config.txt,metrics.*,events.out.tfevents.*,checkpoint.bin,eval.json}\n",
                   n, (unsigned long long)seed, m, d, c->run_dir);
    }
    free(ret);
    return rc;
}

/* The training loop of a run whose directory and config.txt exist. Of the ranks of a
 * data-parallel run only rank 0 writes (writer), and all stop at the same step on Ctrl-C. */
static int run(dqn_trainer *t, const dqn_config *c, int writer) {
    const char *dir = c->run_dir;
    cli_metrics metrics;
    memset(&metrics, 0, sizeof metrics);
    if (writer && cli_metrics_open(&metrics, dir)) return CLI_FAIL;
    /* the health files are rank 0's (each rank guards its own update; the weights are shared) */
    cli_health health;
    if (cli_health_open(&health, dir, writer ? dqn_trainer_health_layout(t) : NULL)) {
        cli_metrics_close(&metrics);
        return CLI_FAIL;
    }
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    int64_t log = c->log_interval, every = c->checkpoint_interval, total = c->steps;
    int64_t next_log = (st.env_steps / log + 1) * log;
    int64_t next_ckpt = every ? (st.env_steps / every + 1) * every : INT64_MAX;
    int64_t ev_every = c->eval_interval;
    int64_t next_eval = ev_every ? (st.env_steps / ev_every + 1) * ev_every : INT64_MAX;
    FILE *evals = NULL;
    if (writer && ev_every && !(evals = cli_open_evaluations(dir))) {
        cli_health_close(&health);
        cli_metrics_close(&metrics);
        return CLI_FAIL;
    }
    int64_t last_step = st.env_steps, saved_at = -1;
    cli_progress p;
    cli_progress_init(&p, st.env_steps, total);
    double last_t = p.t0;
    int rc = CLI_OK, stop = 0;
    interrupted = 0;
    catch_sigint(1);
    while (!rc && st.env_steps < total && !stop) {
        int64_t before = st.env_steps, target = min4(next_log, next_ckpt, next_eval, total);
        dqn_status s = dqn_trainer_run_until(t, target);
        dqn_trainer_stats(t, &st);
        if (s != DQN_OK || st.env_steps <= before) {
            cli_progress_end(&p);
            rc = cli_error(CLI_FAIL, "training stopped at env step %lld of %lld: %s",
                           (long long)st.env_steps, (long long)target,
                           s != DQN_OK ? dqn_last_error() : "no progress");
            break;
        }
        /* before the checkpoint of this step, so that it holds this evaluation's best */
        if (st.env_steps >= next_eval) {
            if (writer) rc = periodic_eval(t, dir, evals);
            while (next_eval <= st.env_steps) next_eval += ev_every;
            if (rc) break;
        }
        double now = cli_now();
        if (st.env_steps >= next_log || st.env_steps >= total) {
            double rate = (double)(st.env_steps - last_step) / fmax(now - last_t, 1e-9);
            if (writer) {
                rc = cli_metrics_row(&metrics, &st, now - p.t0, rate);
                if (!rc) rc = cli_health_row(&health, t, &p, 0);
                cli_progress_update(&p, &st, rate);
            }
            last_t = now;
            last_step = st.env_steps;
            while (next_log <= st.env_steps) next_log += log;
        }
        if (!rc && st.env_steps >= next_ckpt) {
            if (writer) rc = save(t, dir);
            saved_at = st.env_steps;
            while (next_ckpt <= st.env_steps) next_ckpt += every;
        }
        if (!rc) rc = cli_rank_stop(t, interrupted, &stop);
    }
    catch_sigint(0);
    if (!rc) rc = cli_health_row(&health, t, &p, 1);   /* the last interval, read now */
    cli_progress_end(&p);
    int closed = cli_health_close(&health);
    if (!rc) rc = closed;
    closed = cli_metrics_close(&metrics);
    if (!rc) rc = closed;
    if (evals && fclose(evals) != 0 && !rc)
        rc = cli_error(CLI_FAIL, "cannot write %s/evaluations.csv: %s", dir, strerror(errno));
    double wall_s = cli_now() - p.t0;
    if (!rc && writer && saved_at != st.env_steps) rc = save(t, dir);
    if (rc) return rc;
    if (stop) {
        if (writer)
            printf("interrupted at env step %lld; checkpoint saved: resume with\n"
                   "  dqn train --resume %s/checkpoint.bin\n", (long long)st.env_steps, dir);
        return CLI_INTERRUPTED;
    }
    if (writer && ev_every) {
        double best;
        int64_t best_step;
        dqn_trainer_eval_best(t, &best, &best_step);
        char b[32];
        cli_fmt_double(b, sizeof b, best, 0);
        if (best_step >= 0)
            printf("best periodic evaluation: mean return %s (%d episodes) at env step %lld, "
                   "saved as %s/best.bin\n", b, c->eval_interval_episodes, (long long)best_step,
                   dir);
    }
    return writer ? final_eval(t, c, wall_s) : CLI_OK;
}

int cli_train_run(dqn_trainer *t, const dqn_config *c) { return run(t, c, 1); }

static int fresh(const cli_flags *f) {
    static const char *const own[] = {NULL};
    dqn_config c;
    int rc = cli_build_config(f, own, &c);
    if (rc) return rc;
    dqn_status s;
    if (!c.run_dir[0]) {
        char dir[300];
        cli_rundir_default(&c, dir, sizeof dir);
        if ((s = dqn_config_set(&c, "run_dir", dir)) != DQN_OK) return cli_fail_status(s);
    }
    /* data parallel (src/cli/ranks.c): this process launches the ranks, or is one of them */
    cli_rank rank;
    if ((rc = cli_rank_from_env(&c, &rank))) return rc;
    int writer = rank.info.rank == 0;
    if (writer && (rc = cli_rundir_check_free(c.run_dir))) return rc;
    if (strcmp(c.env, "market") == 0) {
        if (c.ranks > 1 || rank.active)
            return cli_error(CLI_USAGE, "--env market runs its walk-forward folds on one device "
                                        "(--ranks %d is not supported with it)", c.ranks);
        return cli_market_train(&c);
    }
    if (!rank.active && c.ranks > 1) return cli_ranks_launch(f, &c);
    dqn_trainer *t;
    if (rank.active) {
        if ((rc = cli_rank_trainer(&c, &rank, &t))) return rc;
    } else if ((s = dqn_trainer_create(&c, &t)) != DQN_OK) {
        return cli_fail_status(s);
    }
    if (writer) rc = cli_rundir_create(c.run_dir);
    if (!rc && writer) rc = cli_rundir_write_config(c.run_dir, &c);
    if (!rc) {
        if (writer) print_header(t, &c, NULL, 0);
        rc = run(t, &c, writer);
    }
    dqn_trainer_destroy(t);
    return rc;
}

static int is_resume_key(const cli_flag *fl) {
    for (const char *const *k = resume_keys; *k; k++)
        if (cli_flag_is(fl, *k)) return 1;
    return 0;
}

/* Are a and b the same existing directory? */
static int same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static int resume(const cli_flags *f) {
    int rc = cli_flags_once(f, "resume");
    if (rc) return rc;
    const cli_flag *ck = cli_flags_last(f, "resume");
    dqn_config scratch;
    dqn_config_defaults(&scratch);
    dqn_status s;
    /* every flag is checked before the checkpoint is read */
    for (int i = 0; i < f->n; i++) {
        const cli_flag *fl = &f->v[i];
        if (cli_flag_is(fl, "resume")) continue;
        if (cli_flag_is(fl, "config"))
            return cli_error(CLI_USAGE, "%s cannot be used with --resume (the config comes from "
                                        "the checkpoint)", fl->key);
        if (dqn_config_has_key(fl->key) && !is_resume_key(fl))
            return cli_error(CLI_USAGE, "%s cannot be changed on --resume (the config comes from "
                                        "the checkpoint; allowed: --steps, --run-dir, "
                                        "--log-interval, --checkpoint-interval, --eval-episodes, "
                                        "--device)", fl->key);
        if ((s = dqn_config_set(&scratch, fl->key, fl->value)) != DQN_OK) return cli_fail_status(s);
    }
    dqn_trainer *t;
    const char *device = cli_flags_last(f, "device") ? scratch.device : "auto";
    if ((s = dqn_trainer_load(ck->value, device, &t)) != DQN_OK) return cli_fail_status(s);
    dqn_config c = *dqn_trainer_config(t);
    if (c.ranks > 1) {
        dqn_trainer_destroy(t);
        return cli_error(CLI_USAGE, "%s is a checkpoint of a data-parallel run (ranks = %d): "
                                    "resuming one is not supported yet (docs/multi-gpu.md)",
                         ck->value, c.ranks);
    }
    int64_t max_steps = c.steps;
    dqn_train_stats st;
    dqn_trainer_stats(t, &st);
    for (int i = 0; i < f->n && !rc; i++)
        if (!cli_flag_is(&f->v[i], "resume") &&
            (s = dqn_config_set(&c, f->v[i].key, f->v[i].value)) != DQN_OK)
            rc = cli_fail_status(s);
    /* the checkpoint's directory, whole (a truncated path named another directory); the
     * checkpoint loaded, so its path fits PATH_MAX */
    char from[4096];
    int len = snprintf(from, sizeof from, "%s", ck->value);
    if (!rc && len >= (int)sizeof from)
        rc = cli_error(CLI_USAGE, "%.80s...: the checkpoint's path is too long", ck->value);
    char *slash = strrchr(from, '/');
    if (!slash) snprintf(from, sizeof from, ".");
    else if (slash == from) from[1] = 0;
    else *slash = 0;
    if (!rc && !cli_flags_last(f, "run_dir") && (s = dqn_config_set(&c, "run_dir", from)))
        rc = cli_fail_status(s);
    if (!rc && (s = dqn_config_validate(&c)) != DQN_OK) rc = cli_fail_status(s);
    if (!rc && c.steps > max_steps)
        rc = cli_error(CLI_USAGE, "--steps %lld is beyond the checkpoint's steps (%lld), which "
                                  "fix its epsilon schedule", (long long)c.steps,
                       (long long)max_steps);
    if (!rc && c.steps <= st.env_steps)
        rc = cli_error(CLI_USAGE, "nothing to resume: %s is at env step %lld of %lld", ck->value,
                       (long long)st.env_steps, (long long)c.steps);
    if (!rc && !same_dir(c.run_dir, from)) rc = cli_rundir_check_free(c.run_dir);
    else if (!rc) rc = cli_metrics_trim(c.run_dir, st.env_steps);
    if (!rc) rc = cli_rundir_create(c.run_dir);
    if (!rc) rc = cli_rundir_write_config(c.run_dir, &c);
    if (!rc) {
        print_header(t, &c, ck->value, st.env_steps);
        rc = run(t, &c, 1);
    }
    dqn_trainer_destroy(t);
    return rc;
}

int cli_train(int argc, char **argv) {
    cli_flags f;
    int rc = cli_flags_parse(argc, argv, &f);
    if (rc) return rc;
    if (cli_flags_help(&f)) train_help();
    else if (cli_flags_last(&f, "resume")) rc = resume(&f);
    else rc = fresh(&f);
    cli_flags_free(&f);
    return rc;
}
