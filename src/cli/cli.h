/* The dqn program: the one place that prints and exits. Exit status 0 ok, 1 a failure while
 * running, 2 bad input (nothing written), 130 interrupted (checkpoint saved). */
#ifndef DQN_CLI_H
#define DQN_CLI_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/tfevents.h"
#include "dqn.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_INTERRUPTED = 130 };

/* "dqn: <message>" as one line on stderr; returns code. */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Report a failed library call (dqn_last_error); bad input is CLI_USAGE, the rest CLI_FAIL. */
int cli_fail_status(dqn_status s);

/* ---- flags: --key value | --key=value; --help and -h take no value ---- */
typedef struct {
    const char *key;   /* as typed, without "=value": "--batch-size" */
    const char *value; /* NULL only for --help */
} cli_flag;

typedef struct {
    cli_flag *v;
    int n;
} cli_flags;

/* Split argv (which it may modify) into flags; on bad syntax prints and returns CLI_USAGE. */
int cli_flags_parse(int argc, char **argv, cli_flags *out);
void cli_flags_free(cli_flags *f);
/* Does the flag spell name (canonical '_' form, e.g. "run_dir")? */
int cli_flag_is(const cli_flag *f, const char *name);
int cli_flags_help(const cli_flags *f);
/* The last flag spelled name, or NULL. */
const cli_flag *cli_flags_last(const cli_flags *f, const char *name);
/* Reject a second occurrence of a flag that may appear once (prints, CLI_USAGE). */
int cli_flags_once(const cli_flags *f, const char *name);

/* Strict number parsing for the subcommands' own flags (prints, CLI_USAGE on failure). */
int cli_parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out);
int cli_parse_u64(const char *flag, const char *v, uint64_t *out);

/* The resolved config of train and bench: preset (--env, else the config file's env, else
 * cartpole), then --config FILE, then every other flag in order, then validation. Flags named
 * in own (canonical names, NULL-terminated) belong to the subcommand and are skipped. */
int cli_build_config(const cli_flags *f, const char *const *own, dqn_config *c);
/* Print the keys whose values differ from dqn_config_defaults, wrapped, after a label. */
void cli_print_changed(FILE *out, const char *label, const dqn_config *c);

/* The final evaluation's seed, derived from the run seed so it differs from training's. */
uint64_t cli_eval_seed(uint64_t run_seed);
double cli_now(void);
/* Shortest text that reads back to v; "null" for a non-finite v when json, else "nan". */
void cli_fmt_double(char *buf, size_t cap, double v, int json);

/* ---- the run directory (src/cli/rundir.c) ---- */
/* "runs/<env>-<seed>-<YYYYmmdd-HHMMSS>" from the local time now */
void cli_rundir_default(const dqn_config *c, char *buf, size_t cap);
/* CLI_USAGE (printed) if dir holds a run already (config.txt) or is not a directory. */
int cli_rundir_check_free(const char *dir);
int cli_rundir_create(const char *dir);
int cli_rundir_write_config(const char *dir, const dqn_config *c);
/* A run's metrics, a row each log interval in three forms: metrics.csv (appended; its header
 * written when the file is new or empty), metrics.jsonl (appended) and a new TensorBoard event
 * file (TensorBoard merges the files of a directory, so a resumed run shows as one). */
typedef struct {
    const char *dir;
    FILE *csv, *jsonl;
    dqn_tfevents *events;
} cli_metrics;

int cli_metrics_open(cli_metrics *m, const char *dir);
/* The rows of metrics.csv and metrics.jsonl past env_steps dropped: a run resumed from its
 * checkpoint logs those steps again. */
int cli_metrics_trim(const char *dir, int64_t env_steps);
/* One row in every file, each flushed so that a live reader sees it. */
int cli_metrics_row(cli_metrics *m, const dqn_train_stats *st, double wall_s, double steps_per_s);
int cli_metrics_close(cli_metrics *m);
/* evaluations.csv opened for appending (its header written when new); NULL after a message. */
FILE *cli_open_evaluations(const char *dir);
int cli_rundir_write_eval(const char *dir, const char *env, int episodes, double mean, double std,
                          const double *returns, int64_t env_steps, double wall_s, uint64_t seed);

/* ---- the progress display (src/cli/progress.c) ---- */
typedef struct {
    int tty;           /* live line rewritten with '\r', else one line per interval */
    int pending;       /* a live line is on screen without its newline */
    int64_t start, total;
    double t0;
} cli_progress;

void cli_progress_init(cli_progress *p, int64_t start, int64_t total);
void cli_progress_update(cli_progress *p, const dqn_train_stats *st, double rate);
/* End a pending live line so that what follows starts on its own line. */
void cli_progress_end(cli_progress *p);

/* ---- the health files of a run directory (src/cli/health_files.c) ---- */
typedef struct {
    const char *dir;
    const dqn_health_layout *layout;   /* NULL: health is off, nothing is written */
    FILE *slots, *isv;
    uint64_t last_updates;
    int rows, announced;
} cli_health;

int cli_health_open(cli_health *h, const char *dir, const dqn_health_layout *layout);
/* Poll the trainer's health (sync: a fresh copy) and append the rows; the first event gets one
 * log line, health_event.json and health_event.bin. */
int cli_health_row(cli_health *h, dqn_trainer *t, cli_progress *p, int sync);
int cli_health_close(cli_health *h);
/* "update U, slot "S" (stage): ..." */
void cli_health_describe(char *buf, size_t cap, const dqn_health_event *e);

/* ---- a line chart as an SVG file (src/cli/svg.c) ---- */
typedef struct {
    const char *name;
    const double *x, *y;
    int n;
} cli_svg_series;
/* Points with a non-finite x or y (and y <= 0 on a log axis) are left out. */
int cli_svg_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                  int logy, const cli_svg_series *series, int n_series);

/* ---- data parallelism: the launcher and the ranks of dqn train (src/cli/ranks.c) ---- */
typedef struct {
    int active;             /* DQN_RANK is set: this process is one rank */
    int have_id;            /* info.id came from DQN_NCCL_ID */
    const char *id_file;    /* DQN_NCCL_ID_FILE, else NULL */
    dqn_rank_info info;
} cli_rank;

/* This process's rank from the environment (r->active = 0 when DQN_RANK is unset); checks it
 * against c. Bad values print one line and return CLI_USAGE. */
int cli_rank_from_env(const dqn_config *c, cli_rank *r);
/* The rank's trainer: its NCCL id (DQN_NCCL_ID, DQN_NCCL_ID_FILE or NCCL_COMM_ID), then
 * dqn_trainer_create_rank, which waits for every rank. */
int cli_rank_trainer(const dqn_config *c, cli_rank *r, dqn_trainer **t);
/* All ranks at once: *stop = 1 if local is set on any rank (a trainer of one rank: local). */
int cli_rank_stop(dqn_trainer *t, int local, int *stop);
/* One `dqn train` per GPU with the flags f (and c's run directory); waits for all of them and
 * returns rank 0's exit status. */
int cli_ranks_launch(const cli_flags *f, const dqn_config *c);

/* ---- subcommands ---- */
int cli_train(int argc, char **argv);
/* The training loop of dqn train on a trainer whose run directory and config.txt exist:
 * metrics, progress, checkpoints, Ctrl-C, the final evaluation (src/cli/train.c). */
int cli_train_run(dqn_trainer *t, const dqn_config *c);
/* dqn train --env market: the walk-forward job into c->run_dir, which must be free. */
int cli_market_train(const dqn_config *c);
int cli_eval(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_health_cmd(int argc, char **argv);

#endif
