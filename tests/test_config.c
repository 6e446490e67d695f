/* The config table: defaults, every key settable and mapped to its own field, exact round trips
 * through dqn_config_write / dqn_config_load_file, every error path, presets, '-' vs '_'. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/config.h"
#include "dqn.h"

#define FIELD(k) #k, offsetof(dqn_config, k), sizeof(((dqn_config *)0)->k)

/* Written from include/dqn.h, independently of the table: each key, the field it must set and
 * a valid non-default value in the canonical form dqn_config_write prints. */
static const struct {
    const char *key;
    size_t off, size;
    const char *value;
} keys[] = {
    {FIELD(env), "acrobot"},
    {FIELD(env_id), "MyEnv-v0"},
    {FIELD(obs_dim), "8"},
    {FIELD(steps), "123456789012"},
    {FIELD(seed), "18446744073709551615"},
    {FIELD(device), "cuda"},   /* not cpu: ranks below is > 1, which needs a GPU */
    {FIELD(math), "tf32"},
    {FIELD(run_dir), "runs/my run #1"},
    {FIELD(num_envs), "8"},
    {FIELD(env_loop), "host"},
    {FIELD(log_interval), "250"},
    {FIELD(eval_episodes), "7"},
    {FIELD(eval_interval), "2500"},
    {FIELD(eval_interval_episodes), "12"},
    {FIELD(checkpoint_interval), "5000"},
    {FIELD(save_replay), "true"},
    {FIELD(threads), "4"},
    {FIELD(ranks), "8"},
    {FIELD(d), "128"},
    {FIELD(grn_blocks), "3"},
    {FIELD(n_cos), "16"},
    {FIELD(bottleneck), "32"},
    {FIELD(head_hidden), "48"},
    {FIELD(branches), "3,5,5"},
    {FIELD(n_tau), "8"},
    {FIELD(n_tau_target), "9"},
    {FIELD(k_tau), "10"},
    {FIELD(target_mode), "independent"},
    {FIELD(kappa), "0.5"},
    {FIELD(gamma), "0.997"},
    {FIELD(n_step), "5"},
    {FIELD(lr), "0.00025"},
    {FIELD(adam_eps), "0.0003125"},
    {FIELD(weight_decay), "0.0001"},
    {FIELD(grad_clip), "0.1"},
    {FIELD(head_grad_clip), "2.5"},
    {FIELD(target_period), "1000"},
    {FIELD(tau_target), "0.005"},
    {FIELD(batch_size), "256"},
    {FIELD(buffer_size), "1000000"},
    {FIELD(learning_starts), "20000"},
    {FIELD(train_freq), "4"},
    {FIELD(updates_per_round), "2"},
    {FIELD(eps_start), "0.9"},
    {FIELD(eps_end), "0.01"},
    {FIELD(eps_fraction), "0.1"},
    {FIELD(replay), "prioritized"},
    {FIELD(per_alpha), "0.7"},
    {FIELD(per_beta), "0.5"},
    {FIELD(per_eps), "1e-05"},
    {FIELD(health), "detect"},
    {FIELD(guard_scale), "1e+08"},
    {FIELD(guard_floor), "123.456"},
    {FIELD(fault), "phi:100:nan,grad.in.W:0:huge,loss:7:inf"},
    {FIELD(data), "data/prices 2020.csv"},
    {FIELD(ts_column), "date"},
    {FIELD(price_columns), "SPY,TLT"},
    {FIELD(feature_columns), "vix,term spread"},
    {FIELD(fill), "ffill"},
    {FIELD(position_levels), "5"},
    {FIELD(window), "64"},
    {FIELD(episode_len), "256"},
    {FIELD(cost), "0.001"},
    {FIELD(holding_cost), "0.0001"},
    {FIELD(reward_scale), "10"},
    {FIELD(periods_per_year), "8760"},
    {FIELD(folds), "6"},
    {FIELD(fold_mode), "expanding"},
    {FIELD(train_blocks), "3"},
    {FIELD(epochs), "20"},
    {FIELD(fold), "2"},
    {FIELD(synth_rows), "5000"},
    {FIELD(synth_assets), "8"},
    {FIELD(synth_noise_features), "4"},
    {FIELD(synth_signal), "0.35"},
    {FIELD(synth_corr), "0.5"},
    {FIELD(synth_vol), "0.02"},
    {FIELD(synth_drift), "0.001"},
    {FIELD(synth_switch), "0.05"},
};
enum { NKEYS = (int)(sizeof keys / sizeof keys[0]) };

static char tmpdir[] = "/tmp/dqn_test_config_XXXXXX";
static int nfiles = 0;

/* A fresh file under tmpdir holding text; returns its path (static storage, rotating). */
static const char *file_with(const char *text) {
    static char paths[8][128];
    char *p = paths[nfiles % 8];
    snprintf(p, sizeof paths[0], "%s/f%d.txt", tmpdir, nfiles++);
    FILE *f = fopen(p, "w");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return p;
}

static int has(const char *needle) { return strstr(dqn_last_error(), needle) != NULL; }

/* dqn_config_set must fail with DQN_ERR_ARG, leave c untouched and name key and value */
static void expect_bad(const char *key, const char *value, const char *msg_part) {
    dqn_config c, before;
    dqn_config_defaults(&c);
    before = c;
    dqn_status s = dqn_config_set(&c, key, value);
    CHECK(s == DQN_ERR_ARG, "set %s=%s: status %d", key, value, s);
    CHECK(memcmp(&c, &before, sizeof c) == 0, "set %s=%s changed the config", key, value);
    CHECK(has(key), "set %s=%s: message does not name the key: %s", key, value, dqn_last_error());
    CHECK(has(msg_part), "set %s=%s: message lacks '%s': %s", key, value, msg_part,
          dqn_last_error());
}

static void test_every_key_maps_to_its_field(void) {
    CHECK(dqn_config_key_count() == NKEYS, "table has %d keys, dqn.h has %d fields",
          dqn_config_key_count(), NKEYS);
    size_t covered = 0;
    for (int i = 0; i < NKEYS; i++) {
        CHECK(dqn_config_has_key(keys[i].key), "key %s missing", keys[i].key);
        CHECK(strcmp(dqn_config_key_name(i), keys[i].key) == 0, "key %d is %s, expected %s", i,
              dqn_config_key_name(i), keys[i].key);
        dqn_config a, b;
        dqn_config_defaults(&a);
        b = a;
        CHECK_OK(dqn_config_set(&b, keys[i].key, keys[i].value));
        const unsigned char *pa = (const unsigned char *)&a, *pb = (const unsigned char *)&b;
        int inside = 0, outside = 0;
        for (size_t j = 0; j < sizeof a; j++) {
            int in = j >= keys[i].off && j < keys[i].off + keys[i].size;
            if (pa[j] != pb[j]) *(in ? &inside : &outside) += 1;
        }
        CHECK(inside > 0, "setting %s did not change its field", keys[i].key);
        CHECK(outside == 0, "setting %s changed %d bytes outside its field", keys[i].key, outside);
        char buf[512];
        CHECK_OK(dqn_config_format(&b, keys[i].key, buf, sizeof buf));
        CHECK(strcmp(buf, keys[i].value) == 0, "%s formats as %s, set to %s", keys[i].key, buf,
              keys[i].value);
        covered += keys[i].size;
    }
    CHECK(covered <= sizeof(dqn_config), "fields overlap");
}

static void test_typed_values(void) {
    dqn_config c;
    dqn_config_defaults(&c);
    CHECK(strcmp(c.env, "cartpole") == 0 && c.steps == 100000 && c.seed == 1, "run defaults");
    CHECK(strcmp(c.device, "auto") == 0 && strcmp(c.math, "fp32") == 0 && c.run_dir[0] == 0,
          "device defaults");
    CHECK(c.num_envs == 1 && c.log_interval == 1000 && c.eval_episodes == 20, "run defaults 2");
    CHECK(c.checkpoint_interval == 0 && c.save_replay == 0 && c.threads == 1, "run defaults 3");
    CHECK(c.eval_interval == 0 && c.eval_interval_episodes == 10, "periodic evaluation is off");
    CHECK(c.d == 64 && c.grn_blocks == 1 && c.n_cos == 64 && c.bottleneck == 0, "model defaults");
    CHECK(c.head_hidden == 64 && c.branches[0] == 0 && c.n_tau == 32 && c.n_tau_target == 32 &&
              c.k_tau == 32, "model defaults 2");
    CHECK(strcmp(c.target_mode, "mean") == 0 && c.kappa == 1 && c.gamma == 0.99 && c.n_step == 3,
          "loss defaults");
    CHECK(c.lr == 1e-3 && c.adam_eps == 1e-8 && c.weight_decay == 0 && c.grad_clip == 10 &&
              c.head_grad_clip == 5, "optimizer defaults");
    CHECK(c.target_period == 500 && c.tau_target == 0, "target defaults");
    CHECK(c.batch_size == 64 && c.buffer_size == 50000 && c.learning_starts == 1000 &&
              c.train_freq == 1 && c.updates_per_round == 1, "replay defaults");
    CHECK(c.eps_start == 1 && c.eps_end == 0.05 && c.eps_fraction == 0.2, "epsilon defaults");
    CHECK(strcmp(c.health, "guard") == 0 && c.fault[0] == 0 && c.guard_scale == 1e6 && c.guard_floor == 1e3,
          "health defaults");
    CHECK(c.data[0] == 0 && strcmp(c.ts_column, "timestamp") == 0 && c.price_columns[0] == 0 &&
              c.feature_columns[0] == 0 && strcmp(c.fill, "none") == 0, "market data defaults");
    CHECK(c.position_levels == 3 && c.window == 8 && c.episode_len == 128 && c.cost == 5e-4 &&
              c.holding_cost == 0 && c.reward_scale == 100 && c.periods_per_year == 252,
          "market env defaults");
    CHECK(c.folds == 4 && strcmp(c.fold_mode, "rolling") == 0 && c.train_blocks == 2 &&
              c.epochs == 4 && c.fold == 0, "walk-forward defaults");
    CHECK(c.synth_rows == 8000 && c.synth_assets == 4 && c.synth_noise_features == 2 &&
              c.synth_signal == 0.2 && c.synth_corr == 0.3 && c.synth_vol == 0.01 &&
              c.synth_drift == 5e-4 && c.synth_switch == 0.01, "synthetic market defaults");
    CHECK_OK(dqn_config_validate(&c));

    CHECK_OK(dqn_config_set(&c, "steps", "123456789012"));
    CHECK(c.steps == 123456789012LL, "steps %lld", (long long)c.steps);
    CHECK_OK(dqn_config_set(&c, "seed", "18446744073709551615"));
    CHECK(c.seed == UINT64_MAX, "seed");
    CHECK_OK(dqn_config_set(&c, "lr", "2.5e-4"));
    CHECK(c.lr == 2.5e-4, "lr %g", c.lr);
    CHECK_OK(dqn_config_set(&c, "lr", "1"));
    CHECK(c.lr == 1, "lr upper bound is inclusive");
    CHECK_OK(dqn_config_set(&c, "lr", "1e-8"));
    CHECK(c.lr == 1e-8, "lr lower bound is inclusive");
    for (int k = 0; k < 4; k++) {
        const char *text[] = {"true", "0", "1", "false"};
        CHECK_OK(dqn_config_set(&c, "save_replay", text[k]));
        CHECK(c.save_replay == (k % 2 == 0), "save_replay %s -> %d", text[k], c.save_replay);
    }
    CHECK_OK(dqn_config_set(&c, "run_dir", "abc"));
    CHECK_OK(dqn_config_set(&c, "run_dir", "x"));
    CHECK(strcmp(c.run_dir, "x") == 0 && c.run_dir[2] == 0, "shorter string clears the tail");
    CHECK_OK(dqn_config_set(&c, "run_dir", ""));
    CHECK(c.run_dir[0] == 0, "empty string");
}

static void test_dash_underscore(void) {
    dqn_config c;
    dqn_config_defaults(&c);
    const char *spell[] = {"batch_size", "batch-size", "--batch-size", "--batch_size"};
    for (int i = 0; i < 4; i++) {
        char v[16];
        snprintf(v, sizeof v, "%d", 100 + i);
        CHECK_OK(dqn_config_set(&c, spell[i], v));
        CHECK(c.batch_size == 100 + i, "%s", spell[i]);
        CHECK(dqn_config_has_key(spell[i]), "has_key %s", spell[i]);
    }
    CHECK(!dqn_config_has_key("batchsize") && !dqn_config_has_key("") &&
              !dqn_config_has_key("--") && !dqn_config_has_key("-batch-size"),
          "has_key accepts only real keys");
    char buf[64];
    CHECK_OK(dqn_config_format(&c, "n-tau-target", buf, sizeof buf));
    CHECK(strcmp(buf, "32") == 0, "format by dashed key: %s", buf);
}

static void test_set_errors(void) {
    dqn_config c;
    dqn_config_defaults(&c);
    CHECK(dqn_config_set(&c, "--lr", "abc") == DQN_ERR_ARG, "lr abc");
    CHECK(strcmp(dqn_last_error(), "bad value for --lr: \"abc\" (expected a number in [1e-08, 100])")
              == 0, "lr message: %s", dqn_last_error());
    CHECK(dqn_config_set(&c, "--foo", "1") == DQN_ERR_ARG, "unknown key");
    CHECK(strcmp(dqn_last_error(), "unknown key \"--foo\" (see dqn train --help)") == 0,
          "unknown message: %s", dqn_last_error());
    CHECK(dqn_config_set(&c, "lr", NULL) == DQN_ERR_ARG && has("lr"), "missing value");

    /* integers */
    expect_bad("batch_size", "abc", "expected an integer in [1, 65536]");
    expect_bad("eval_interval", "-1", "expected an integer in [0, 2147483647]");
    expect_bad("eval_interval", "1k", "\"1k\"");
    expect_bad("eval_interval_episodes", "0", "expected an integer in [1, 100000]");
    expect_bad("eval-interval-episodes", "100001", "expected an integer in [1, 100000]");
    expect_bad("batch_size", "", "\"\"");
    expect_bad("batch_size", "12x", "\"12x\"");
    expect_bad("batch_size", " 12", "\" 12\"");
    expect_bad("batch_size", "12 ", "\"12 \"");
    expect_bad("batch_size", "1.5", "\"1.5\"");
    expect_bad("batch_size", "1e3", "\"1e3\"");
    expect_bad("batch_size", "0", "[1, 65536]");
    expect_bad("batch_size", "65537", "[1, 65536]");
    expect_bad("batch_size", "-3", "[1, 65536]");
    expect_bad("batch_size", "99999999999999999999", "[1, 65536]");
    expect_bad("log_interval", "2147483648", "[1, 2147483647]");
    expect_bad("steps", "0", "[1, 1000000000000]");
    expect_bad("steps", "1000000000001", "[1, 1000000000000]");
    expect_bad("seed", "-1", "[0, 18446744073709551615]");
    expect_bad("seed", "18446744073709551616", "[0, 18446744073709551615]");
    expect_bad("seed", "0x10", "\"0x10\"");
    /* doubles */
    expect_bad("gamma", "1.0000001", "expected a number in [0, 1]");
    expect_bad("gamma", "-0.1", "[0, 1]");
    expect_bad("gamma", "nan", "\"nan\"");
    expect_bad("gamma", "inf", "\"inf\"");
    expect_bad("gamma", "0.9x", "\"0.9x\"");
    expect_bad("gamma", "", "\"\"");
    expect_bad("gamma", " 0.9", "\" 0.9\"");
    expect_bad("lr", "1e-400", "[1e-08, 100]");
    expect_bad("lr", "1e400", "[1e-08, 100]");
    expect_bad("lr", "0", "[1e-08, 100]");
    expect_bad("guard_scale", "0.5", "[1, 1e+30]");
    /* enums, bools, strings */
    expect_bad("env", "pong", "expected one of cartpole|acrobot|mountaincar|market");
    expect_bad("env", "cart", "cartpole|acrobot|mountaincar");
    expect_bad("env", "cartpole|acrobot", "cartpole|acrobot|mountaincar");
    expect_bad("env", "", "cartpole|acrobot|mountaincar");
    expect_bad("device", "tpu", "auto|cpu|cuda");
    expect_bad("health", "on", "off|detect|guard");
    expect_bad("fault", "phi", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("fault", "phi:1", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("fault", "phi:x:nan", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("fault", "phi:-1:nan", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("fault", "phi:1:NaN", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("fault", ":1:nan", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("fault", "phi:1:nan,", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("fault", "phi:1:nan,,z:2:inf", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("fault", "phi:99999999999999999999:nan", "SLOT:UPDATE:nan|inf|huge");
    expect_bad("target_mode", "Mean", "mean|independent");
    expect_bad("save_replay", "yes", "expected true, false, 1 or 0");
    expect_bad("save_replay", "2", "true, false, 1 or 0");
    expect_bad("save_replay", "", "true, false, 1 or 0");
    char longdir[300];
    memset(longdir, 'a', sizeof longdir - 1);
    longdir[sizeof longdir - 1] = 0;
    expect_bad("run_dir", longdir, "at most 255 characters");
    expect_bad("run_dir", "a\"b", "\"a\\\"b\"");
    expect_bad("run_dir", "a\nb", "\"a\\x0ab\"");
    expect_bad("branches", "1", "1..16 comma-separated sizes in [2, 64]");
    expect_bad("branches", "65", "[2, 64]");
    expect_bad("branches", "3,", "\"3,\"");
    expect_bad("branches", ",3", "\",3\"");
    expect_bad("branches", "3,,5", "\"3,,5\"");
    expect_bad("branches", "3, 5", "\"3, 5\"");
    expect_bad("branches", "a", "\"a\"");
    expect_bad("branches", "2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2", "1..16");
    expect_bad("branches", "99999999999", "[2, 64]");
    CHECK_OK(dqn_config_set(&c, "branches", "2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,64"));
    /* market keys */
    expect_bad("position_levels", "1", "[3, 63]");
    expect_bad("position_levels", "65", "[3, 63]");
    expect_bad("fill", "zero", "none|ffill|drop");
    expect_bad("fold_mode", "anchored", "rolling|expanding");
    expect_bad("folds", "0", "[1, 100]");
    expect_bad("epochs", "0", "[1, 1000000]");
    expect_bad("synth_assets", "17", "[1, 16]");
    expect_bad("synth_signal", "1", "[0, 0.9]");
    expect_bad("cost", "-0.001", "[0, 0.1]");
    expect_bad("price_columns", "a,,b", "comma-separated column names");
    expect_bad("price_columns", "a,b,a", "no repeats");
    expect_bad("price_columns", ",a", "\",a\"");
    expect_bad("feature_columns", "x,", "\"x,\"");
    expect_bad("ts_column", "", "one column name");
    expect_bad("ts_column", "a,b", "no ','");
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = 0;
    expect_bad("feature_columns", longname, "1..63 characters");
    CHECK_OK(dqn_config_set(&c, "feature_columns", "a b,c-d,e.f"));
    CHECK(strcmp(c.feature_columns, "a b,c-d,e.f") == 0, "names with blanks and dots");
    /* the echoed value is capped and escaped: the message stays one line */
    char huge[2000];
    memset(huge, '\n', sizeof huge - 1);
    huge[sizeof huge - 1] = 0;
    CHECK(dqn_config_set(&c, "lr", huge) == DQN_ERR_ARG, "huge value");
    CHECK(!strchr(dqn_last_error(), '\n') && strlen(dqn_last_error()) < 300 && has("..."),
          "huge value message: %.80s", dqn_last_error());
}

static void test_branches_parser(void) {
    int sizes[DQN_CFG_MAX_BRANCHES], n = -1;
    CHECK(dqn_config_parse_branches("", sizes, &n) && n == 0, "empty -> env's own");
    CHECK(dqn_config_parse_branches("3,5,5", sizes, &n) && n == 3 && sizes[0] == 3 &&
              sizes[1] == 5 && sizes[2] == 5, "3,5,5");
    CHECK(dqn_config_parse_branches("64", sizes, &n) && n == 1 && sizes[0] == 64, "64");
    CHECK(!dqn_config_parse_branches("3;5", sizes, &n), "3;5");
}

/* write -> load reproduces the struct bit for bit, from a config that differs in every key */
static void test_round_trip(void) {
    dqn_config all, def, back;
    dqn_config_defaults(&all);
    for (int i = 0; i < NKEYS; i++) CHECK_OK(dqn_config_set(&all, keys[i].key, keys[i].value));
    CHECK_OK(dqn_config_validate(&all));
    for (int which = 0; which < 2; which++) {
        dqn_config_defaults(&def);
        const dqn_config *src = which ? &def : &all;
        char path[128];
        snprintf(path, sizeof path, "%s/written%d.txt", tmpdir, which);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL, "open %s", path);
        if (!f) return;
        CHECK_OK(dqn_config_write(src, f));
        fclose(f);
        dqn_config_defaults(&back);
        if (!which) dqn_config_preset(&back, "mountaincar");
        else back = all;
        CHECK_OK(dqn_config_load_file(&back, path));
        CHECK(memcmp(&back, src, sizeof back) == 0, "round trip %d differs", which);
    }
    /* random doubles, uniform and spread over the lr range's 8 decades, read back bit-exactly */
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u = (double)(x >> 11) / 9007199254740992.0;
        const char *key = i % 2 ? "gamma" : "lr";
        double v = i % 2 ? u : pow(10.0, -8.0 * u);
        dqn_config c;
        dqn_config_defaults(&c);
        char in[64], out[64];
        snprintf(in, sizeof in, "%.17g", v);
        CHECK_OK(dqn_config_set(&c, key, in));
        double got = i % 2 ? c.gamma : c.lr;
        CHECK(got == v, "%s %s parsed as %.17g", key, in, got);
        CHECK_OK(dqn_config_format(&c, key, out, sizeof out));
        CHECK_OK(dqn_config_set(&c, key, out));
        CHECK((i % 2 ? c.gamma : c.lr) == v, "%s %s -> %s does not read back", key, in, out);
    }
}

static void test_load_file(void) {
    dqn_config c, before;
    dqn_config_defaults(&c);
    const char *ok = file_with("# a comment\n\n   # indented comment\n"
                               "  batch-size   =  128  \r\n"
                               "lr=0.0005\n"
                               "run_dir = \"out/x y\"\n"
                               "branches =\n"
                               "env = \"acrobot\"\n"
                               "\t\n"
                               "lr = 0.0002\n");
    CHECK_OK(dqn_config_load_file(&c, ok));
    CHECK(c.batch_size == 128 && c.lr == 0.0002 && strcmp(c.run_dir, "out/x y") == 0 &&
              c.branches[0] == 0 && strcmp(c.env, "acrobot") == 0, "file values");

    struct {
        const char *text, *part;
        dqn_status st;
        int line;
    } bad[] = {
        {"lr = 0.001\nbatch_size 64\n", "expected \"key = value\", got \"batch_size 64\"",
         DQN_ERR_ARG, 2},
        {"# c\n\nfoo = 1\n", "unknown key \"foo\" (see dqn train --help)", DQN_ERR_ARG, 3},
        {"lr = abc\n", "bad value for lr: \"abc\" (expected a number in [1e-08, 100])", DQN_ERR_ARG,
         1},
        {"lr = 0.001 # inline\n", "bad value for lr: \"0.001 # inline\"", DQN_ERR_ARG, 1},
        {"batch_size = 64\n= 5\n", "expected \"key = value\"", DQN_ERR_ARG, 2},
        {"run_dir = \"abc\n", "unterminated quote in the value of run_dir", DQN_ERR_ARG, 1},
        {"run_dir = \"\n", "unterminated quote", DQN_ERR_ARG, 1},
        {"batch_size = 64\nbatch_size = 0\n", "bad value for batch_size: \"0\"", DQN_ERR_ARG, 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dqn_config_defaults(&c);
        before = c;
        const char *path = file_with(bad[i].text);
        dqn_status s = dqn_config_load_file(&c, path);
        char where[160];
        snprintf(where, sizeof where, "%s:%d: ", path, bad[i].line);
        CHECK(s == bad[i].st, "case %zu: status %d", i, s);
        CHECK(strncmp(dqn_last_error(), where, strlen(where)) == 0, "case %zu: no '%s' in: %s", i,
              where, dqn_last_error());
        CHECK(has(bad[i].part), "case %zu: no '%s' in: %s", i, bad[i].part, dqn_last_error());
        CHECK(memcmp(&c, &before, sizeof c) == 0, "case %zu: a failed load changed the config", i);
    }
    /* a NUL byte inside a line */
    char nulpath[128];
    snprintf(nulpath, sizeof nulpath, "%s/nul.txt", tmpdir);
    FILE *f = fopen(nulpath, "wb");
    fwrite("lr = 0.1\nd = 6\0004\n", 1, 18, f);
    fclose(f);
    CHECK(dqn_config_load_file(&c, nulpath) == DQN_ERR_FORMAT && has(":2: NUL byte"), "NUL: %s",
          dqn_last_error());
    /* a line past the bound is refused without being read whole (/dev/zero has no newline) */
    f = fopen(nulpath, "wb");
    fputs("lr = 0.1\n# ", f);
    for (int k = 0; k < 70000; k++) fputc('x', f);
    fputs("\nd = 8\n", f);
    fclose(f);
    CHECK(dqn_config_load_file(&c, nulpath) == DQN_ERR_FORMAT &&
              has(":2: line longer than 65536 bytes"), "long line: %s", dqn_last_error());
    CHECK(dqn_config_load_file(&c, "/dev/zero") == DQN_ERR_FORMAT &&
              has("/dev/zero:1: line longer than 65536 bytes"), "/dev/zero: %s", dqn_last_error());

    char missing[128];
    snprintf(missing, sizeof missing, "%s/does-not-exist.txt", tmpdir);
    CHECK(dqn_config_load_file(&c, missing) == DQN_ERR_IO, "missing file");
    CHECK(has(missing) && has("No such file"), "missing message: %s", dqn_last_error());
    CHECK(dqn_config_load_file(&c, tmpdir) != DQN_OK && has(tmpdir), "a directory: %s",
          dqn_last_error());
}

static void test_validate(void) {
    dqn_config c;
    struct {
        const char *k1, *v1, *k2, *v2, *part;
    } cross[] = {
        {"batch_size", "512", "buffer_size", "256", "batch_size (512) must be <= buffer_size (256)"},
        {"batch_size", "64", "learning_starts", "63", "learning_starts (63) must be >= batch_size"},
        {"tau_target", "0", "target_period", "0", "target_period (0) must be >= 1 when tau_target"},
        {"eps_start", "0.1", "eps_end", "0.2", "eps_end (0.2) must be <= eps_start (0.1)"},
        {"device", "cpu", "ranks", "2", "ranks (2) > 1 needs device cuda (or auto), got cpu"},
        {"position_levels", "4", "fold", "0", "position_levels (4) must be odd"},
        {"folds", "3", "fold", "3", "fold (3) must be < folds (3)"},
        {"ts_column", "date", "price_columns", "a,date", "column \"date\" is the timestamp column"},
        {"feature_columns", "date", "ts_column", "date", "column \"date\" is the timestamp"},
        {"price_columns", "a,b", "feature_columns", "c,b", "\"b\" is in both price_columns and "
                                                          "feature_columns"},
        {"price_columns", "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", "fold", "0",
         "price_columns names 17 assets, at most 16"},
    };
    for (size_t i = 0; i < sizeof cross / sizeof cross[0]; i++) {
        dqn_config_defaults(&c);
        CHECK_OK(dqn_config_set(&c, cross[i].k1, cross[i].v1));
        CHECK_OK(dqn_config_set(&c, cross[i].k2, cross[i].v2));
        CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has(cross[i].part), "cross %zu: %s", i,
              dqn_last_error());
    }
    dqn_config_defaults(&c);
    CHECK_OK(dqn_config_set(&c, "target_period", "0"));
    CHECK_OK(dqn_config_set(&c, "tau_target", "0.01"));
    CHECK_OK(dqn_config_validate(&c));  /* Polyak averaging needs no period */
    CHECK_OK(dqn_config_set(&c, "learning_starts", "64"));
    CHECK_OK(dqn_config_validate(&c));  /* learning_starts == batch_size is fine */

    /* fields written straight into the struct are checked like text */
    dqn_config_defaults(&c);
    c.n_tau = 0;
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has("bad value for n_tau: \"0\""), "%s",
          dqn_last_error());
    dqn_config_defaults(&c);
    c.k_tau = -5;
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has("k_tau"), "%s", dqn_last_error());
    dqn_config_defaults(&c);
    c.lr = 500;
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has("bad value for lr: \"500\""), "%s",
          dqn_last_error());
    dqn_config_defaults(&c);
    c.gamma = NAN;
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has("gamma"), "%s", dqn_last_error());
    dqn_config_defaults(&c);
    strcpy(c.env, "pong");
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has("bad value for env: \"pong\""), "%s",
          dqn_last_error());
    dqn_config_defaults(&c);
    strcpy(c.branches, "3,1");
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has("branches"), "%s", dqn_last_error());
    dqn_config_defaults(&c);
    memset(c.device, 'x', sizeof c.device);
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has("device") && has("NUL"), "%s",
          dqn_last_error());
    dqn_config_defaults(&c);
    c.save_replay = 2;
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && has("save_replay"), "%s", dqn_last_error());
}

static void test_presets(void) {
    dqn_config def, c;
    dqn_config_defaults(&def);
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    CHECK(strcmp(c.env, "cartpole") == 0 && c.steps == 50000 && c.n_tau == 8 &&
              c.batch_size == 64 && c.train_freq == 256 && c.updates_per_round == 128 &&
              c.lr == 2.3e-3 && c.tau_target == 0.01 && c.d == def.d,
          "cartpole preset");
    CHECK_OK(dqn_config_preset(&c, "acrobot"));
    CHECK(strcmp(c.env, "acrobot") == 0 && c.gamma == 0.995 && c.steps == 100000 && c.n_step == 1 &&
              c.grn_blocks == def.grn_blocks && c.lr == 4.5e-4 && c.batch_size == 128 &&
              c.train_freq == 1 && c.tau_target == 0 && c.target_period == 250 &&
              c.n_tau == 16 && c.n_tau_target == 32 && c.k_tau == 8 && c.eps_end == 0.01,
          "acrobot preset");
    CHECK_OK(dqn_config_validate(&c));
    /* a preset starts from the defaults, whatever c held */
    CHECK_OK(dqn_config_set(&c, "d", "7"));
    CHECK_OK(dqn_config_preset(&c, "mountaincar"));
    CHECK(strcmp(c.env, "mountaincar") == 0 && c.steps == 120000 && c.n_step == 3 &&
              c.lr == 5e-4 && c.eps_fraction == 0.1 && c.d == 64 &&
              strcmp(c.replay, "prioritized") == 0, "mountaincar preset");
    CHECK_OK(dqn_config_validate(&c));
    CHECK_OK(dqn_config_preset(&c, "market"));
    CHECK(strcmp(c.env, "market") == 0 && c.gamma == 0.5 && c.n_step == 1 && c.num_envs == 4 &&
              c.folds == 4 && c.position_levels == 3 && c.data[0] == 0, "market preset");
    CHECK_OK(dqn_config_validate(&c));
    /* a preset of a host-stepped env: env external with the env's shape */
    CHECK_OK(dqn_config_preset(&c, "lunarlander"));
    CHECK(strcmp(c.env, "external") == 0 && c.obs_dim == 8 && strcmp(c.branches, "4") == 0 &&
              strcmp(c.env_id, "LunarLander-v3") == 0, "lunarlander preset");
    CHECK_OK(dqn_config_validate(&c));
    CHECK(dqn_config_preset(&c, "external") == DQN_ERR_ARG, "external is no preset");
    /* external needs the shape */
    dqn_config ext;
    dqn_config_defaults(&ext);
    CHECK_OK(dqn_config_set(&ext, "env", "external"));
    CHECK(dqn_config_validate(&ext) == DQN_ERR_ARG &&
              strstr(dqn_last_error(), "env external needs obs_dim >= 1 and branches"),
          "external without a shape: %s", dqn_last_error());
    CHECK_OK(dqn_config_set(&ext, "obs_dim", "3"));
    CHECK_OK(dqn_config_set(&ext, "branches", "2,5"));
    CHECK_OK(dqn_config_validate(&ext));
    dqn_config before = c;
    CHECK(dqn_config_preset(&c, "pong") == DQN_ERR_ARG, "unknown preset");
    CHECK(strcmp(dqn_last_error(),
                 "unknown preset \"pong\" (expected one of "
                 "cartpole|acrobot|mountaincar|market|lunarlander)")
              == 0,
          "preset message: %s", dqn_last_error());
    CHECK(memcmp(&c, &before, sizeof c) == 0, "a failed preset changed the config");
}

static void test_help(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/help.txt", tmpdir);
    FILE *f = fopen(path, "w+");
    CHECK(f != NULL, "help file");
    if (!f) return;
    dqn_config_help(f);
    rewind(f);
    char line[512];
    int col = -1, lines = 0, aligned = 1;
    char seen[NKEYS] = {0};
    while (fgets(line, sizeof line, f)) {
        lines++;
        char key[64];
        if (sscanf(line, " %63s", key) != 1) continue;
        int c = (int)(strstr(line, key) - line + strlen(key));
        while (line[c] == ' ') c++;
        if (col < 0) col = c;
        aligned &= c == col;
        for (int i = 0; i < NKEYS; i++)
            if (strcmp(key, keys[i].key) == 0) seen[i] = 1;
    }
    fclose(f);
    CHECK(lines == NKEYS + 1, "help has %d lines, expected a header and %d keys", lines, NKEYS);
    CHECK(aligned, "the type column is not aligned");
    for (int i = 0; i < NKEYS; i++) CHECK(seen[i], "help lacks %s", keys[i].key);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_every_key_maps_to_its_field();
    test_typed_values();
    test_dash_underscore();
    test_set_errors();
    test_branches_parser();
    test_round_trip();
    test_load_file();
    test_validate();
    test_presets();
    test_help();
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_finish("test_config");
}
