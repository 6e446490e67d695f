/* Shared by the fuzz harnesses (tests/fuzz/fuzz_*.c): each defines LLVMFuzzerTestOneInput, which
 * libFuzzer drives (make fuzz) and tests/test_crash_fuzz_corpus.c replays over the corpora in
 * tests/fuzz/<target>/ and the crash regressions in tests/fuzz/<target>/crashes/ (make test).
 * A harness aborts only on a broken property; the sanitizers catch the rest. */
#ifndef DQN_FUZZ_COMMON_H
#define DQN_FUZZ_COMMON_H
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/ckpt_file.h"
#include "core/config.h"
#include "core/crc32.h"
#include "dqn.h"

/* Inputs the loader under test accepted (the replay checks that good seeds still load). */
static int fuzz_accepted;

/* A directory of this process for the files a harness hands to the loaders (they take paths):
 * in /dev/shm where there is one (a file written per input), else in /tmp; removed at exit. */
static char fuzz_dir_name[64];

static inline void fuzz_dir_remove(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_name);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", fuzz_dir_name);
}

static inline const char *fuzz_dir(void) {
    if (!fuzz_dir_name[0]) {
        snprintf(fuzz_dir_name, sizeof fuzz_dir_name, "%s/dqn_fuzz_XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(fuzz_dir_name)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_name;
}

/* fuzz_dir()/name, in one of 4 rotating buffers */
static inline const char *fuzz_path(const char *name) {
    static char path[4][128];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", fuzz_dir(), name);
    return p;
}

static inline void fuzz_write(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* A copy of a checkpoint container (core/ckpt_file.h) with its trailing CRC recomputed, so that
 * mutations reach the structure and the sections instead of stopping at the CRC check (which
 * tests/test_ckpt_file.c covers). */
static inline unsigned char *fuzz_seal(const uint8_t *data, size_t size) {
    unsigned char *b = malloc(size ? size : 1);
    if (!b) abort();
    if (size) memcpy(b, data, size);
    if (size >= 4) {
        uint32_t crc = dqn_crc32(b, size - 4);
        for (int i = 0; i < 4; i++) b[size - 4 + i] = (unsigned char)(crc >> (8 * i));
    }
    return b;
}

/* Is every key of keys[i][0] at most keys[i][1]? */
static inline int fuzz_keys_within(const dqn_config *c, const char *const (*keys)[2], size_t n) {
    char v[512];
    for (size_t i = 0; i < n; i++)
        if (dqn_config_format(c, keys[i][0], v, sizeof v) != DQN_OK || atoll(v) > atoll(keys[i][1]))
            return 0;
    return 1;
}

/* Does a config fit the harnesses' budget? Loading a checkpoint or an event builds the config's
 * model, replay and envs: a mutated width or buffer size would spend the fuzzer's time and memory
 * on allocation rather than on parsing. A config file read from disk by the market env (data) is
 * left out too: a path such as /dev/zero would be read without end. */
static inline int fuzz_config_small(const dqn_config *c) {
    static const char *const every[][2] = {
        {"d", "32"},       {"head_hidden", "32"},  {"n_cos", "32"},      {"bottleneck", "32"},
        {"grn_blocks", "2"}, {"n_tau", "8"},       {"n_tau_target", "8"}, {"k_tau", "8"},
        {"batch_size", "32"}, {"buffer_size", "1024"}, {"num_envs", "8"}, {"eval_episodes", "4"},
        {"obs_dim", "64"}};
    /* the market env's: its synthetic table is made when the env opens */
    static const char *const market[][2] = {
        {"synth_rows", "2000"}, {"window", "32"}, {"synth_assets", "4"},
        {"synth_noise_features", "4"}, {"episode_len", "256"}, {"position_levels", "7"}};
    char env[512], data[512];
    if (dqn_config_format(c, "env", env, sizeof env) != DQN_OK ||
        dqn_config_format(c, "data", data, sizeof data) != DQN_OK)
        return 0;
    if (!fuzz_keys_within(c, every, sizeof every / sizeof every[0])) return 0;
    return strcmp(env, "market") != 0 ||
           (!data[0] && fuzz_keys_within(c, market, sizeof market / sizeof market[0]));
}

/* The config section of a container, if it parses and fits the budget: 1; else 0. */
static inline int fuzz_container_config_small(const char *path) {
    dqn_ckpt_reader *r = NULL;
    if (dqn_ckpt_reader_open(path, &r) != DQN_OK) return 1; /* the loader reports it */
    const void *p;
    uint64_t n;
    int ok = 1;
    dqn_config c;
    if (dqn_ckpt_reader_find(r, "config", &p, &n) == DQN_OK &&
        dqn_config_from_text(p, (size_t)n, path, &c) == DQN_OK)
        ok = fuzz_config_small(&c);
    dqn_ckpt_reader_destroy(r);
    return ok;
}

#endif
