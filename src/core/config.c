/* The config table: one row per dqn_config field (key, type, bounds, default, help). It alone
 * drives defaults, parsing, config files, the written config, --help and validation. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "core/error.h"
#include "core/lines.h"
#include "health/health.h"

/* A config line: a key and a value (the longest, fault, is 511 characters) with room to spare. */
#define DQN_CFG_LINE_MAX 65536

typedef enum { T_INT, T_INT64, T_UINT64, T_DOUBLE, T_STRING, T_ENUM, T_BOOL } cfg_type;
static const char *const type_name[] = {"int", "int64", "uint64", "double", "string", "enum",
                                        "bool"};

typedef struct {
    const char *name;
    cfg_type type;
    size_t off, size;
    double min, max;             /* numbers: inclusive bounds (integral ones are exact doubles) */
    const char *allowed;         /* enums: "a|b|c" */
    int (*valid)(const char *s); /* strings: syntax beyond "printable, no quote" */
    const char *expect;          /* strings with valid(): what it accepts, for messages */
    const char *def;             /* default, as text, parsed like any value */
    const char *help;
} cfg_row;

/* Offset and size of field k, with a compile-time check that its C type is T. */
#define AT(k, T)                        \
    offsetof(dqn_config, k),            \
        sizeof(((dqn_config *)0)->k) +  \
            0 * sizeof(char[_Generic(((dqn_config *)0)->k, T: 1, default: -1)])
#define CFG_INT(k, lo, hi, def, help) {#k, T_INT, AT(k, int), lo, hi, NULL, NULL, NULL, def, help}
#define CFG_INT64(k, lo, hi, def, help) \
    {#k, T_INT64, AT(k, int64_t), lo, hi, NULL, NULL, NULL, def, help}
#define CFG_UINT64(k, def, help) {#k, T_UINT64, AT(k, uint64_t), 0, 0, NULL, NULL, NULL, def, help}
#define CFG_DOUBLE(k, lo, hi, def, help) \
    {#k, T_DOUBLE, AT(k, double), lo, hi, NULL, NULL, NULL, def, help}
#define CFG_ENUM(k, allowed, def, help) \
    {#k, T_ENUM, AT(k, char *), 0, 0, allowed, NULL, NULL, def, help}
#define CFG_BOOL(k, def, help) {#k, T_BOOL, AT(k, int), 0, 1, NULL, NULL, NULL, def, help}
#define CFG_STRING(k, valid, expect, def, help) \
    {#k, T_STRING, AT(k, char *), 0, 0, NULL, valid, expect, def, help}

static int branches_ok(const char *s) {
    int sizes[DQN_CFG_MAX_BRANCHES], n;
    return dqn_config_parse_branches(s, sizes, &n);
}
#define FAULT_EXPECT \
    "\"\" or SLOT:UPDATE:nan|inf|huge items joined by ',', e.g. phi:100:nan"
#define BRANCHES_EXPECT "\"\" or 1..16 comma-separated sizes in [2, 64], e.g. 3,5,5"

static int columns_ok(const char *s) {
    char names[DQN_CFG_MAX_NAMES][DQN_CFG_NAME];
    int n;
    return dqn_config_parse_names(s, names, DQN_CFG_MAX_NAMES, &n);
}
static int column_ok(const char *s) {
    char names[1][DQN_CFG_NAME];
    int n;
    return dqn_config_parse_names(s, names, 1, &n) && n == 1;
}
#define COLUMNS_EXPECT "\"\" or comma-separated column names, each 1..63 characters, no repeats"

static const cfg_row rows[] = {
    /* run */
    CFG_ENUM(env, "cartpole|acrobot|mountaincar|market|external", "cartpole",
             "environment; dqn train --env also applies its preset; external = the host's "
             "(C env API, Python), shaped by obs_dim and branches"),
    CFG_STRING(env_id, NULL, NULL, "", "external: the env's name (e.g. a Gymnasium id), recorded"),
    CFG_INT(obs_dim, 0, 1000000, "0", "observation size of an external env; 0 = the env's own"),
    CFG_INT64(steps, 1, 1e12, "100000", "total env steps"),
    CFG_UINT64(seed, "1", "seed of every random stream (taus, replay, exploration, env resets)"),
    CFG_ENUM(device, "auto|cpu|cuda", "auto", "backend; auto = cuda when available, else cpu"),
    CFG_ENUM(math, "fp32|tf32", "fp32", "GEMM precision on cuda"),
    CFG_STRING(run_dir, NULL, NULL, "",
               "run directory; \"\" = runs/<env>-<seed>-<YYYYmmdd-HHMMSS>"),
    CFG_INT(num_envs, 1, 4096, "1", "envs stepped together (vectorised)"),
    CFG_ENUM(env_loop, "auto|host|device", "auto",
             "where the built-in envs step: host = the host's vector; device = backend memory "
             "(one graph a step on cuda; cpu: libm's math, the host loop's bits; cuda: correctly "
             "rounded sin and cos, the same dynamics with last-bit differences; the market: the "
             "host loop's bits on both); auto = device on cuda with one rank, else host; external: "
             "host"),
    CFG_INT(log_interval, 1, INT_MAX, "1000", "env steps between metrics rows"),
    CFG_INT(eval_episodes, 1, 100000, "20", "greedy episodes of the final evaluation"),
    CFG_INT(eval_interval, 0, INT_MAX, "0",
            "env steps between periodic greedy evaluations on eval envs of their own; the best "
            "mean's checkpoint is kept as best.bin; 0 = off"),
    CFG_INT(eval_interval_episodes, 1, 100000, "10",
            "greedy episodes of each periodic evaluation (stepped together)"),
    CFG_INT(checkpoint_interval, 0, INT_MAX, "0", "env steps between checkpoints; 0 = at the end"),
    CFG_BOOL(save_replay, "false", "include the replay buffer in checkpoints"),
    CFG_INT(threads, 1, 256, "1", "BLAS threads on the cpu backend"),
    CFG_INT(ranks, 1, 1024, "1",
            "data-parallel GPUs: one process each, gradients averaged over NCCL; > 1 needs "
            "device cuda (docs/multi-gpu.md)"),
    /* model */
    CFG_INT(d, 1, 4096, "64", "trunk width"),
    CFG_INT(grn_blocks, 0, 64, "1", "gated residual blocks in the trunk"),
    CFG_INT(n_cos, 1, 1024, "64", "cosine features of the tau embedding"),
    CFG_INT(bottleneck, 0, 4096, "0", "bottleneck width over [z ; h]; 0 = none"),
    CFG_INT(head_hidden, 1, 4096, "64", "hidden width of the value and advantage heads"),
    CFG_STRING(branches, branches_ok, BRANCHES_EXPECT, "",
               "action branch sizes, e.g. 3,5,5; \"\" = the env's own"),
    CFG_INT(n_tau, 1, 1024, "32", "N: online taus per sample"),
    CFG_INT(n_tau_target, 1, 1024, "32", "N': target taus per sample"),
    CFG_INT(k_tau, 1, 1024, "32", "K: action-selection taus"),
    /* loss and optimizer */
    CFG_ENUM(target_mode, "mean|independent", "mean",
             "target over branches: their mean (BDQ) or each its own"),
    CFG_DOUBLE(kappa, 1e-6, 1e6, "1", "Huber threshold of the quantile loss"),
    CFG_DOUBLE(gamma, 0, 1, "0.99", "discount"),
    CFG_INT(n_step, 1, 100, "3", "steps of the n-step return"),
    CFG_DOUBLE(lr, 1e-8, 100, "1e-3", "Adam learning rate"),
    CFG_DOUBLE(adam_eps, 1e-12, 1, "1e-8", "Adam epsilon"),
    CFG_DOUBLE(weight_decay, 0, 1, "0", "decoupled weight decay"),
    CFG_DOUBLE(grad_clip, 0, 1e9, "10", "global gradient-norm clip; 0 = off"),
    CFG_DOUBLE(head_grad_clip, 0, 1e9, "5",
               "L2 clip of d_value and d_adv logits over the batch; 0 = off"),
    CFG_INT(target_period, 0, INT_MAX, "500", "updates between hard target copies"),
    CFG_DOUBLE(tau_target, 0, 1, "0", "Polyak rate of the target per update; 0 = hard copies"),
    /* replay and schedule */
    CFG_INT(batch_size, 1, 65536, "64", "B: transitions per update"),
    CFG_INT(buffer_size, 1, 100000000, "50000", "replay capacity in transitions"),
    CFG_INT(learning_starts, 1, INT_MAX, "1000", "env steps before the first update"),
    CFG_INT(train_freq, 1, 1000000, "1", "env steps (summed over envs) per round of updates"),
    CFG_INT(updates_per_round, 1, 1024, "1", "G: updates per round"),
    CFG_DOUBLE(eps_start, 0, 1, "1", "exploration epsilon at step 0"),
    CFG_DOUBLE(eps_end, 0, 1, "0.05", "exploration epsilon after the decay"),
    CFG_DOUBLE(eps_fraction, 0, 1, "0.2", "fraction of steps over which epsilon decays linearly"),
    CFG_ENUM(replay, "uniform|prioritized", "uniform",
             "replay sampling: uniform, or prioritized by each row's last loss (proportional "
             "sum-tree, importance-weighted loss)"),
    CFG_DOUBLE(per_alpha, 0, 1, "0.6",
               "prioritized: priority = (loss + per_eps)^per_alpha; 0 = uniform"),
    CFG_DOUBLE(per_beta, 0, 1, "0.4",
               "prioritized: importance-weight exponent at the first update, annealed linearly "
               "to 1 over the run's updates"),
    CFG_DOUBLE(per_eps, 1e-12, 1, "1e-6", "prioritized: added to a loss, so every row can be drawn"),
    /* health */
    CFG_ENUM(health, "off|detect|guard", "guard",
             "numerical health: off; detect (record every slot, report the first bad one); "
             "guard (also clamp the guarded gradients, skip a non-finite update, roll back bad "
             "parameters)"),
    CFG_DOUBLE(guard_scale, 1, 1e30, "1e6",
               "guard bound = max(guard_scale * running scale, guard_floor)"),
    CFG_DOUBLE(guard_floor, 1e-3, 1e30, "1e3", "least guard bound (covers unset running scales)"),
    CFG_STRING(fault, dqn_fault_spec_ok, FAULT_EXPECT, "",
               "fault injection: poison slot SLOT at update UPDATE (the first is 0) with a NaN, "
               "+Inf or 1e30; --fault may be repeated"),
    /* market: data, env, walk-forward folds, synthetic generator (docs/market.md) */
    CFG_STRING(data, NULL, NULL, "",
               "market: CSV file of a time-indexed table; \"\" = synthetic data"),
    CFG_STRING(ts_column, column_ok, "one column name of 1..63 characters, no ','", "timestamp",
               "market: the timestamp column of --data (integers or ISO 8601 dates)"),
    CFG_STRING(price_columns, columns_ok, COLUMNS_EXPECT, "",
               "market: price columns of --data, one per asset (1..16); \"\" = every column but "
               "the timestamp and the features"),
    CFG_STRING(feature_columns, columns_ok, COLUMNS_EXPECT, "",
               "market: feature columns of --data; \"\" = none"),
    CFG_ENUM(fill, "none|ffill|drop", "none",
             "market: a missing or non-finite value is an error naming file, line and column "
             "(none), takes its column's previous value (ffill), or drops its row (drop)"),
    CFG_INT(position_levels, 3, 63, "3",
            "market: positions per asset, odd, evenly spaced from short -1 through flat 0 to "
            "long +1"),
    CFG_INT(window, 1, 4096, "8", "market: rows of returns and features in an observation"),
    CFG_INT(episode_len, 1, 1000000, "128", "market: steps of a training episode"),
    CFG_DOUBLE(cost, 0, 0.1, "0.0005", "market: transaction cost per unit of capital traded"),
    CFG_DOUBLE(holding_cost, 0, 0.1, "0", "market: cost per period per unit of gross exposure"),
    CFG_DOUBLE(reward_scale, 1e-6, 1e6, "100",
               "market: reward = reward_scale * the period's net log-return"),
    CFG_DOUBLE(periods_per_year, 1, 1e8, "252",
               "market: periods a year, for the annualised return and Sharpe ratio"),
    CFG_INT(folds, 1, 100, "4", "market: walk-forward folds"),
    CFG_ENUM(fold_mode, "rolling|expanding", "rolling",
             "market: a fold trains on the train_blocks blocks before its test block (rolling) "
             "or on every block before it (expanding)"),
    CFG_INT(train_blocks, 1, 100, "2",
            "market: the rows are cut into folds + train_blocks blocks; the first fold trains on "
            "train_blocks of them"),
    CFG_INT(epochs, 1, 1000000, "4",
            "market: passes over each training window (a fold's env steps; replaces steps)"),
    CFG_INT(fold, 0, 99, "0", "market: the fold whose training window a trainer's env uses"),
    CFG_INT(synth_rows, 64, 10000000, "8000", "synthetic market: rows (periods)"),
    CFG_INT(synth_assets, 1, 16, "4", "synthetic market: assets"),
    CFG_INT(synth_noise_features, 0, 100, "2",
            "synthetic market: features of pure noise beside each asset's signal"),
    CFG_DOUBLE(synth_signal, 0, 0.9, "0.2",
               "synthetic market: correlation of an asset's signal with its next return"),
    CFG_DOUBLE(synth_corr, 0, 0.99, "0.3", "synthetic market: correlation of the return noise"),
    CFG_DOUBLE(synth_vol, 1e-5, 0.5, "0.01",
               "synthetic market: return volatility per period (calm regime; twice it volatile)"),
    CFG_DOUBLE(synth_drift, 0, 0.1, "0.0005",
               "synthetic market: drift per period, + in the calm regime and - in the volatile"),
    CFG_DOUBLE(synth_switch, 0, 1, "0.01", "synthetic market: regime switch probability a period"),
};
enum { NROWS = (int)(sizeof rows / sizeof rows[0]) };

/* Presets of envs the host steps (external), named by env; their rows set env and the shape. */
#define PRESET_ONLY "lunarlander"

/* Each env's preset: tuned values over the defaults (which are CartPole's). The one place to
 * tune them; applied through dqn_config_set, so they obey the table. */
static const char *const presets[][3] = {
    /* RL-Zoo QR-DQN's budget and schedule (128 updates every 256 steps), 8 taus */
    {"cartpole", "steps", "50000"},
    {"cartpole", "n_tau", "8"},
    {"cartpole", "n_tau_target", "8"},
    {"cartpole", "k_tau", "8"},
    {"cartpole", "batch_size", "64"},
    {"cartpole", "buffer_size", "100000"},
    {"cartpole", "train_freq", "256"},
    {"cartpole", "updates_per_round", "128"},
    /* a Polyak target: the greedy policy of a hard copy after each round falls back from 500
     * late in some runs (seeds 105-109: 387, 500, 500, 210, 483; with tau 0.01: 500, 420, 500,
     * 500, 500); 64 updates a round left one of three tuning seeds at 453 */
    {"cartpole", "tau_target", "0.01"},
    /* a fast learner: at 5e-4 or 1e-3 some seeds are still short of 500 at 50k steps */
    {"cartpole", "lr", "2.3e-3"},
    {"cartpole", "eps_fraction", "0.16"},
    {"cartpole", "eps_end", "0.04"},
    /* RL-Zoo's schedule (B 128, an update a step, a hard copy every 250) with a GRN block, a
     * long horizon and little late exploration: tuning seeds 100-103 scored -67.8, -63.6,
     * -69.4, -69.5, where the previous preset (no GRN block, B 64 every 2 steps, a Polyak
     * target, gamma 0.99, eps_end 0.1) scored -80.5, -77.8, -89.5, -90.5 */
    {"acrobot", "steps", "100000"},
    {"acrobot", "n_step", "1"},
    {"acrobot", "n_tau", "16"},
    {"acrobot", "n_tau_target", "32"},
    {"acrobot", "k_tau", "8"},
    {"acrobot", "batch_size", "128"},
    {"acrobot", "train_freq", "1"},
    {"acrobot", "lr", "4.5e-4"},
    {"acrobot", "gamma", "0.995"},
    {"acrobot", "eps_fraction", "0.12"},
    {"acrobot", "eps_end", "0.01"},
    {"acrobot", "target_period", "250"},
    {"mountaincar", "steps", "120000"},
    /* 3-step returns: with 5, the pessimism that hides the flag spreads sooner */
    {"mountaincar", "n_step", "3"},
    {"mountaincar", "lr", "5e-4"},
    {"mountaincar", "n_tau", "8"},
    {"mountaincar", "n_tau_target", "8"},
    {"mountaincar", "k_tau", "8"},
    {"mountaincar", "batch_size", "32"},
    {"mountaincar", "train_freq", "2"},
    /* random actions almost never reach the flag; the greedy policy's optimism does */
    {"mountaincar", "eps_fraction", "0.1"},
    {"mountaincar", "eps_end", "0.01"},
    /* the rare flag transitions replayed more: seeds 9001-9005 scored -110.2 +- 21.6 with
     * prioritized replay, -132.3 +- 29.9 with uniform */
    {"mountaincar", "replay", "prioritized"},
    /* a Polyak target: tuning seeds 9001-9005 scored -98.2 +- 1.3 with it, -110.2 +- 21.6 with
     * hard copies every 500 updates (9005 at -148.6) */
    {"mountaincar", "tau_target", "0.005"},
    /* market: a reward depends on the future only through the cost of changing positions, and
     * a training window is short and noisy: a short horizon and a slow learner generalise */
    {"market", "gamma", "0.5"},
    {"market", "n_step", "1"},
    {"market", "n_tau", "8"},
    {"market", "n_tau_target", "8"},
    {"market", "k_tau", "8"},
    {"market", "num_envs", "4"},
    {"market", "lr", "1e-4"},
    {"market", "batch_size", "64"},
    {"market", "train_freq", "4"},
    {"market", "learning_starts", "1000"},
    {"market", "target_period", "250"},
    {"market", "eps_fraction", "0.3"},
    {"market", "eval_episodes", "8"},
    /* LunarLander-v3 (gymnasium[box2d]), stepped by the host */
    {"lunarlander", "env", "external"},
    {"lunarlander", "env_id", "LunarLander-v3"},
    {"lunarlander", "obs_dim", "8"},
    {"lunarlander", "branches", "4"},
    {"lunarlander", "steps", "100000"},
    {"lunarlander", "n_tau", "8"},
    {"lunarlander", "n_tau_target", "8"},
    {"lunarlander", "k_tau", "8"},
    {"lunarlander", "batch_size", "64"},
    {"lunarlander", "buffer_size", "50000"},
    {"lunarlander", "train_freq", "4"},
    {"lunarlander", "lr", "6.3e-4"},
    {"lunarlander", "eps_fraction", "0.12"},
    {"lunarlander", "eps_end", "0.1"},
    {"lunarlander", "target_period", "250"},
};

int dqn_config_parse_names(const char *s, char (*names)[DQN_CFG_NAME], int max, int *count) {
    int n = 0;
    if (!*s) {
        *count = 0;
        return 1;
    }
    for (const char *p = s;; p++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len >= DQN_CFG_NAME || n == max) return 0;
        memcpy(names[n], p, len);
        names[n][len] = 0;
        for (int k = 0; k < n; k++)
            if (strcmp(names[k], names[n]) == 0) return 0;
        n++;
        if (!end) break;
        p = end;
    }
    *count = n;
    return 1;
}

int dqn_config_parse_branches(const char *s, int *sizes, int *count) {
    int n = 0;
    for (const char *p = s; *p;) {
        int v = 0;
        if (!isdigit((unsigned char)*p)) return 0;
        while (isdigit((unsigned char)*p)) {
            v = 10 * v + (*p++ - '0');
            if (v > 64) return 0;
        }
        if (v < 2 || n == DQN_CFG_MAX_BRANCHES) return 0;
        sizes[n++] = v;
        if (*p == ',' && *++p == 0) return 0;
        if (*p && !isdigit((unsigned char)*p)) return 0;
    }
    *count = n;
    return 1;
}

/* "--batch-size", "batch-size" and "batch_size" all name the row batch_size. */
static const cfg_row *find_row(const char *key) {
    if (key[0] == '-' && key[1] == '-') key += 2;
    char k[64];
    size_t n = strlen(key);
    if (n == 0 || n >= sizeof k) return NULL;
    for (size_t i = 0; i <= n; i++) k[i] = key[i] == '-' ? '_' : key[i];
    for (int i = 0; i < NROWS; i++)
        if (strcmp(rows[i].name, k) == 0) return &rows[i];
    return NULL;
}

/* s as a double-quoted, escaped, length-capped literal (cap >= 16), so a message stays one line */
static void quote(char *dst, size_t cap, const char *s) {
    size_t o = 0, i = 0;
    dst[o++] = '"';
    for (; s[i] && o + 10 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') o += (size_t)snprintf(dst + o, cap - o, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", ch);
        else dst[o++] = (char)ch;
    }
    snprintf(dst + o, cap - o, "%s\"", s[i] ? "..." : "");
}

static void describe(const cfg_row *r, char *buf, size_t cap) {
    switch (r->type) {
    case T_INT:
    case T_INT64:
        snprintf(buf, cap, "an integer in [%lld, %lld]", (long long)r->min, (long long)r->max);
        break;
    case T_UINT64: snprintf(buf, cap, "an integer in [0, %" PRIu64 "]", UINT64_MAX); break;
    case T_DOUBLE: snprintf(buf, cap, "a number in [%g, %g]", r->min, r->max); break;
    case T_ENUM: snprintf(buf, cap, "one of %s", r->allowed); break;
    case T_BOOL: snprintf(buf, cap, "true, false, 1 or 0"); break;
    case T_STRING:
        if (r->expect) snprintf(buf, cap, "%s", r->expect);
        else snprintf(buf, cap, "at most %zu characters, no '\"' or control characters",
                      r->size - 1);
        break;
    }
}

static dqn_status bad_value(const cfg_row *r, const char *key, const char *value) {
    char q[128], want[160];
    quote(q, sizeof q, value);
    describe(r, want, sizeof want);
    return dqn_error_user(DQN_ERR_ARG, "bad value for %s: %s (expected %s)", key, q, want);
}

/* strtoll/strtoull/strtod, but the whole string must be the number (no blanks, no suffix) */
static int parse_ll(const char *s, long long *out) {
    if (!*s || isspace((unsigned char)*s)) return 0;
    char *end;
    errno = 0;
    *out = strtoll(s, &end, 10);
    return errno == 0 && *end == 0;
}
static int parse_ull(const char *s, unsigned long long *out) {
    if (!*s || isspace((unsigned char)*s) || *s == '-') return 0;
    char *end;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == 0;
}
static int parse_double(const char *s, double *out) {
    if (!*s || isspace((unsigned char)*s)) return 0;
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && *end == 0 && isfinite(*out);
}

static int in_list(const char *list, const char *v) {
    size_t n = strlen(v);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static int string_ok(const cfg_row *r, const char *v) {
    size_t n = strlen(v);
    if (n >= r->size) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (ch < 0x20 || ch == 0x7f || ch == '"') return 0;
    }
    return !r->valid || r->valid(v);
}

/* Parse value into row r's field of c (key is the user's spelling, for the message). */
static dqn_status parse_into(const cfg_row *r, const char *key, const char *v, dqn_config *c) {
    void *p = (char *)c + r->off;
    switch (r->type) {
    case T_INT:
    case T_INT64: {
        long long x;
        if (!parse_ll(v, &x) || x < (long long)r->min || x > (long long)r->max)
            return bad_value(r, key, v);
        if (r->type == T_INT) *(int *)p = (int)x;
        else *(int64_t *)p = (int64_t)x;
        return DQN_OK;
    }
    case T_UINT64: {
        unsigned long long x;
        if (!parse_ull(v, &x)) return bad_value(r, key, v);
        *(uint64_t *)p = (uint64_t)x;
        return DQN_OK;
    }
    case T_DOUBLE: {
        double x;
        if (!parse_double(v, &x) || !(x >= r->min && x <= r->max)) return bad_value(r, key, v);
        *(double *)p = x;
        return DQN_OK;
    }
    case T_BOOL:
        if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0) *(int *)p = 1;
        else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0) *(int *)p = 0;
        else return bad_value(r, key, v);
        return DQN_OK;
    case T_ENUM:
    case T_STRING:
        if (r->type == T_ENUM ? !in_list(r->allowed, v) : !string_ok(r, v))
            return bad_value(r, key, v);
        memset(p, 0, r->size);
        memcpy(p, v, strlen(v));
        return DQN_OK;
    }
    return bad_value(r, key, v);
}

/* A double prints as the shortest %.Ng (N <= 17) that reads back to the same bits. */
static void format_row(const cfg_row *r, const dqn_config *c, char *buf, size_t cap) {
    const void *p = (const char *)c + r->off;
    switch (r->type) {
    case T_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case T_INT64: snprintf(buf, cap, "%" PRId64, *(const int64_t *)p); break;
    case T_UINT64: snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)p); break;
    case T_DOUBLE: {
        double v = *(const double *)p;
        char best[32] = "", t[32];
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(t, sizeof t, "%.*g", prec, v);
            if (strtod(t, NULL) == v && (!best[0] || strlen(t) < strlen(best))) strcpy(best, t);
        }
        snprintf(buf, cap, "%s", best);
        break;
    }
    case T_BOOL: snprintf(buf, cap, "%s", *(const int *)p ? "true" : "false"); break;
    case T_ENUM:
    case T_STRING: snprintf(buf, cap, "%.*s", (int)strnlen(p, r->size), (const char *)p); break;
    }
}

void dqn_config_defaults(dqn_config *c) {
    memset(c, 0, sizeof *c);
    /* every default is a valid value (tests/test_config.c proves it), so this cannot fail */
    for (int i = 0; i < NROWS; i++) parse_into(&rows[i], rows[i].name, rows[i].def, c);
}

dqn_status dqn_config_set(dqn_config *c, const char *key, const char *value) {
    const cfg_row *r = find_row(key);
    char q[128];
    if (!r) {
        quote(q, sizeof q, key);
        return dqn_error_user(DQN_ERR_ARG, "unknown key %s (see dqn train --help)", q);
    }
    if (!value) return dqn_error_user(DQN_ERR_ARG, "missing value for %s", key);
    dqn_config tmp = *c;
    DQN_TRY(parse_into(r, key, value, &tmp));
    memcpy((char *)c + r->off, (const char *)&tmp + r->off, r->size);
    return DQN_OK;
}

int dqn_config_has_key(const char *key) { return find_row(key) != NULL; }
int dqn_config_key_count(void) { return NROWS; }
const char *dqn_config_key_name(int i) { return i >= 0 && i < NROWS ? rows[i].name : NULL; }

dqn_status dqn_config_format(const dqn_config *c, const char *key, char *buf, size_t cap) {
    const cfg_row *r = find_row(key);
    if (!r) return dqn_error_user(DQN_ERR_ARG, "unknown key \"%s\"", key);
    format_row(r, c, buf, cap);
    return DQN_OK;
}

dqn_status dqn_config_preset(dqn_config *c, const char *env) {
    const cfg_row *envrow = find_row("env");
    int own = in_list(envrow->allowed, env) && strcmp(env, "external") != 0;
    if (!own && !in_list(PRESET_ONLY, env)) {
        char q[128];
        quote(q, sizeof q, env);
        return dqn_error_user(DQN_ERR_ARG, "unknown preset %s (expected one of "
                              "cartpole|acrobot|mountaincar|market|" PRESET_ONLY ")", q);
    }
    dqn_config tmp;
    dqn_config_defaults(&tmp);
    if (own) DQN_TRY(dqn_config_set(&tmp, "env", env));
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i][0], env) == 0)
            DQN_TRY(dqn_config_set(&tmp, presets[i][1], presets[i][2]));
    *c = tmp;
    return DQN_OK;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

static dqn_status load_line(dqn_config *c, char *line, const char *path, int lineno) {
    char *s = trim(line), q[128];
    if (*s == 0 || *s == '#') return DQN_OK;
    char *eq = strchr(s, '=');
    if (!eq || eq == s) {
        quote(q, sizeof q, s);
        return dqn_error_user(DQN_ERR_ARG, "%s:%d: expected \"key = value\", got %s", path, lineno,
                              q);
    }
    *eq = 0;
    char *key = trim(s), *value = trim(eq + 1);
    size_t n = strlen(value);
    if (n > 0 && value[0] == '"') {
        if (n < 2 || value[n - 1] != '"')
            return dqn_error_user(DQN_ERR_ARG, "%s:%d: unterminated quote in the value of %s",
                                  path, lineno, key);
        value[n - 1] = 0;
        value++;
    }
    dqn_status st = dqn_config_set(c, key, value);
    if (st != DQN_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dqn_last_error());
        return dqn_error_user(st, "%s:%d: %s", path, lineno, msg);
    }
    return DQN_OK;
}

dqn_status dqn_config_load_file(dqn_config *c, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return dqn_error_user(DQN_ERR_IO, "%s: cannot open config file: %s", path,
                                  strerror(errno));
    dqn_status s = dqn_config_load_stream(c, f, path);
    fclose(f);
    return s;
}

dqn_status dqn_config_load_stream(dqn_config *c, FILE *f, const char *path) {
    dqn_config tmp = *c;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    dqn_status s = DQN_OK;
    errno = 0;
    while (s == DQN_OK && (len = dqn_getline_max(&line, &cap, f, DQN_CFG_LINE_MAX)) != -1) {
        lineno++;
        if (len == DQN_LINE_TOO_LONG)
            s = dqn_error_user(DQN_ERR_FORMAT, "%s:%d: line longer than %d bytes", path, lineno,
                               DQN_CFG_LINE_MAX);
        else if ((size_t)len != strlen(line))
            s = dqn_error_user(DQN_ERR_FORMAT, "%s:%d: NUL byte in line", path, lineno);
        else s = load_line(&tmp, line, path, lineno);
    }
    if (s == DQN_OK && (ferror(f) || errno == ENOMEM))
        s = dqn_error_user(DQN_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    free(line);
    if (s == DQN_OK) *c = tmp;
    return s;
}

dqn_status dqn_config_to_text(const dqn_config *c, char **text, size_t *len) {
    FILE *f = open_memstream(text, len);
    if (!f) return DQN_ERR(DQN_ERR_NOMEM, "config text");
    dqn_status s = dqn_config_write(c, f);
    fclose(f);
    return s;
}

dqn_status dqn_config_from_text(const char *text, size_t len, const char *path, dqn_config *c) {
    dqn_config_defaults(c);
    FILE *f = fmemopen((void *)text, len, "r");
    if (!f) return DQN_ERR(DQN_ERR_NOMEM, "config text");
    dqn_status s = dqn_config_load_stream(c, f, path);
    fclose(f);
    return s;
}

dqn_status dqn_config_write(const dqn_config *c, FILE *f) {
    char v[512];
    fprintf(f, "# dqn %s config (see dqn train --help); load with dqn train --config FILE\n",
            DQN_VERSION);
    for (int i = 0; i < NROWS; i++) {
        format_row(&rows[i], c, v, sizeof v);
        if (rows[i].type == T_STRING) fprintf(f, "%s = \"%s\"\n", rows[i].name, v);
        else fprintf(f, "%s = %s\n", rows[i].name, v);
    }
    if (fflush(f) != 0 || ferror(f))
        return dqn_error_user(DQN_ERR_IO, "writing the config failed: %s", strerror(errno));
    return DQN_OK;
}

static void range_text(const cfg_row *r, char *buf, size_t cap) {
    switch (r->type) {
    case T_INT:
    case T_INT64: snprintf(buf, cap, "[%lld, %lld]", (long long)r->min, (long long)r->max); break;
    case T_UINT64: snprintf(buf, cap, "[0, 2^64-1]"); break;
    case T_DOUBLE: snprintf(buf, cap, "[%g, %g]", r->min, r->max); break;
    case T_ENUM: snprintf(buf, cap, "%s", r->allowed); break;
    case T_BOOL: snprintf(buf, cap, "true|false"); break;
    case T_STRING: snprintf(buf, cap, "%s", r->valid ? "list" : "text"); break;
    }
}

void dqn_config_help(FILE *f) {
    dqn_config def;
    dqn_config_defaults(&def);
    char range[NROWS][64], dflt[NROWS][80];
    int wk = 3, wt = 4, wr = 5, wd = 7;
    for (int i = 0; i < NROWS; i++) {
        const cfg_row *r = &rows[i];
        char v[72];
        range_text(r, range[i], sizeof range[i]);
        format_row(r, &def, v, sizeof v);
        snprintf(dflt[i], sizeof dflt[i], r->type == T_STRING ? "\"%s\"" : "%s", v);
        int lk = (int)strlen(r->name), lt = (int)strlen(type_name[r->type]);
        int lr = (int)strlen(range[i]), ld = (int)strlen(dflt[i]);
        wk = lk > wk ? lk : wk;
        wt = lt > wt ? lt : wt;
        wr = lr > wr ? lr : wr;
        wd = ld > wd ? ld : wd;
    }
    fprintf(f, "  %-*s  %-*s  %-*s  %-*s  %s\n", wk, "key", wt, "type", wr, "range", wd,
            "default", "meaning");
    for (int i = 0; i < NROWS; i++)
        fprintf(f, "  %-*s  %-*s  %-*s  %-*s  %s\n", wk, rows[i].name, wt, type_name[rows[i].type],
                wr, range[i], wd, dflt[i], rows[i].help);
}

/* A field set directly in the struct is checked as if it came in as text: format, then parse. */
static dqn_status check_field(const cfg_row *r, const dqn_config *c) {
    const char *p = (const char *)c + r->off;
    if ((r->type == T_STRING || r->type == T_ENUM) && !memchr(p, 0, r->size))
        return dqn_error_user(DQN_ERR_ARG, "bad value for %s: not NUL-terminated within %zu bytes",
                              r->name, r->size);
    if (r->type == T_BOOL && *(const int *)p != 0 && *(const int *)p != 1) {
        char v[32];
        snprintf(v, sizeof v, "%d", *(const int *)p);
        return bad_value(r, r->name, v);
    }
    char v[512];
    format_row(r, c, v, sizeof v);
    dqn_config scratch = *c;
    return parse_into(r, r->name, v, &scratch);
}

/* The market keys' cross-field rules; those that need the data are checked when it is read. */
static dqn_status validate_market(const dqn_config *c) {
    if (c->position_levels % 2 == 0)
        return dqn_error_user(DQN_ERR_ARG, "position_levels (%d) must be odd, so that flat (0) is "
                              "one of them", c->position_levels);
    if (c->fold >= c->folds)
        return dqn_error_user(DQN_ERR_ARG, "fold (%d) must be < folds (%d)", c->fold, c->folds);
    char price[DQN_CFG_MAX_NAMES][DQN_CFG_NAME], feat[DQN_CFG_MAX_NAMES][DQN_CFG_NAME];
    int np = 0, nf = 0;
    dqn_config_parse_names(c->price_columns, price, DQN_CFG_MAX_NAMES, &np);
    dqn_config_parse_names(c->feature_columns, feat, DQN_CFG_MAX_NAMES, &nf);
    if (np > DQN_CFG_MAX_BRANCHES)
        return dqn_error_user(DQN_ERR_ARG, "price_columns names %d assets, at most %d (one action "
                              "branch each)", np, DQN_CFG_MAX_BRANCHES);
    for (int i = 0; i < np + nf; i++) {
        const char *name = i < np ? price[i] : feat[i - np];
        if (strcmp(name, c->ts_column) == 0)
            return dqn_error_user(DQN_ERR_ARG, "column \"%s\" is the timestamp column (ts_column) "
                                  "and cannot be a price or feature column too", name);
        for (int k = 0; i >= np && k < np; k++)
            if (strcmp(name, price[k]) == 0)
                return dqn_error_user(DQN_ERR_ARG, "column \"%s\" is in both price_columns and "
                                      "feature_columns", name);
    }
    return DQN_OK;
}

dqn_status dqn_config_validate(const dqn_config *c) {
    for (int i = 0; i < NROWS; i++) DQN_TRY(check_field(&rows[i], c));
    if (c->batch_size > c->buffer_size)
        return dqn_error_user(DQN_ERR_ARG, "batch_size (%d) must be <= buffer_size (%d)",
                              c->batch_size, c->buffer_size);
    if (c->learning_starts < c->batch_size)
        return dqn_error_user(DQN_ERR_ARG, "learning_starts (%d) must be >= batch_size (%d)",
                              c->learning_starts, c->batch_size);
    if (c->tau_target == 0 && c->target_period < 1)
        return dqn_error_user(DQN_ERR_ARG,
                              "target_period (%d) must be >= 1 when tau_target is 0 (hard copies)",
                              c->target_period);
    if (c->ranks > 1 && strcmp(c->device, "cpu") == 0)
        return dqn_error_user(DQN_ERR_ARG,
                              "ranks (%d) > 1 needs device cuda (or auto), got cpu: the cpu "
                              "backend has one rank", c->ranks);
    if (c->eps_end > c->eps_start)
        return dqn_error_user(DQN_ERR_ARG, "eps_end (%g) must be <= eps_start (%g)", c->eps_end,
                              c->eps_start);
    if (strcmp(c->env, "external") == 0 && (c->obs_dim < 1 || !c->branches[0]))
        return dqn_error_user(DQN_ERR_ARG, "env external needs obs_dim >= 1 and branches (the "
                              "shape of the host's env), got obs_dim %d and branches \"%s\"",
                              c->obs_dim, c->branches);
    if (strcmp(c->env_loop, "device") == 0 && c->ranks > 1)
        return dqn_error_user(DQN_ERR_ARG, "env_loop device runs one rank, got ranks %d (env_loop "
                              "host or auto)", c->ranks);
    if (strcmp(c->env_loop, "device") == 0 && strcmp(c->env, "external") == 0)
        return dqn_error_user(DQN_ERR_ARG,
                              "env_loop device needs a built-in env (cartpole, acrobot, "
                              "mountaincar, market), got env %s: its steps run on the host "
                              "(env_loop host or auto)", c->env);
    return validate_market(c);
}
