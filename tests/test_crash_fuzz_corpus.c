/* The fuzz harnesses of tests/fuzz/ without libFuzzer: each harness runs over every file of its
 * seed corpus tests/fuzz/<target>/ and of its crash regressions tests/fuzz/<target>/crashes/
 * (inputs that once crashed a loader, kept for good), so that `make test` replays them in seconds
 * on the normal and the ASan/UBSan build. A harness aborts on a broken property and the sanitizer
 * build stops on a memory error: either fails this test. Each corpus must hold at least one file.
 * The corpora are read from tests/fuzz under DQN_SRC_DIR (default: the source tree it was built
 * from). With arguments, it replays just those files through every harness (a new crash file). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"

#define LLVMFuzzerTestOneInput fuzz_config_input
#include "fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_csv_input
#include "fuzz/fuzz_csv.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_ckpt_input
#include "fuzz/fuzz_ckpt.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_health_event_input
#include "fuzz/fuzz_health_event.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_health_report_input
#include "fuzz/fuzz_health_report.c"
#undef LLVMFuzzerTestOneInput

typedef int (*harness_fn)(const uint8_t *, size_t);
static const struct {
    const char *name;
    harness_fn fn;
} targets[] = {{"config", fuzz_config_input},
               {"csv", fuzz_csv_input},
               {"ckpt", fuzz_ckpt_input},
               {"health_event", fuzz_health_event_input},
               {"health_report", fuzz_health_report_input}};
enum { NTARGETS = (int)(sizeof targets / sizeof targets[0]) };

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0, got;
    unsigned char *b = malloc(cap);
    while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            unsigned char *t = realloc(b, 2 * cap);
            if (!t) {
                free(b);
                b = NULL;
            }
            b = t;
            cap *= 2;
        }
    }
    fclose(f);
    *n = len;
    return b;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs fn over every regular file of dir (sorted, names starting with '.' and README* skipped);
 * returns how many, or -1 if the directory cannot be read. */
static int replay_dir(const char *dir, harness_fn fn, const char *target) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, "README", 6) == 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **t = realloc(names, (size_t)cap * sizeof *t);
            if (!t) abort();
            names = t;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    int count = 0;
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            size_t len = 0;
            unsigned char *b = slurp(path, &len);
            CHECK(b != NULL, "%s: cannot read %s", target, path);
            if (b) {
                fn(b, len);
                count++;
            }
            free(b);
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv) {
    if (argc > 1) { /* replay the given files through every harness */
        for (int i = 1; i < argc; i++)
            for (int t = 0; t < NTARGETS; t++) {
                size_t len = 0;
                unsigned char *b = slurp(argv[i], &len);
                CHECK(b != NULL, "cannot read %s", argv[i]);
                if (b) targets[t].fn(b, len);
                free(b);
            }
        return check_finish("test_crash_fuzz_corpus");
    }
    const char *src = getenv("DQN_SRC_DIR");
#ifdef DQN_SRC_DIR_DEFAULT
    if (!src) src = DQN_SRC_DIR_DEFAULT;
#endif
    if (!src) src = ".";
    for (int t = 0; t < NTARGETS; t++) {
        char dir[900];
        snprintf(dir, sizeof dir, "%s/tests/fuzz/%s", src, targets[t].name);
        fuzz_accepted = 0;
        int seeds = replay_dir(dir, targets[t].fn, targets[t].name);
        int good = fuzz_accepted;
        CHECK(seeds > 0, "%s: no seed corpus in %s", targets[t].name, dir);
        /* the seeds made by tests/fuzz/make_seeds.sh load: a format change calls for new ones */
        CHECK(good > 0, "%s: no seed of %s loads (rerun tests/fuzz/make_seeds.sh)",
              targets[t].name, dir);
        char crashes[1000];
        snprintf(crashes, sizeof crashes, "%s/crashes", dir);
        int regress = replay_dir(crashes, targets[t].fn, targets[t].name);
        printf("%-14s %4d corpus files (%d load), %3d crash regressions replayed\n",
               targets[t].name, seeds, good, regress < 0 ? 0 : regress);
    }
    return check_finish("test_crash_fuzz_corpus");
}
