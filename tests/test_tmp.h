/* A temporary directory for one test binary, files written into it, and its removal. */
#ifndef DQN_TEST_TMP_H
#define DQN_TEST_TMP_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char test_tmp_dir[] = "/tmp/dqn_test_XXXXXX";

static inline void test_tmp_init(void) {
    if (!mkdtemp(test_tmp_dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

/* test_tmp_dir/name, in one of 8 rotating buffers */
static inline const char *test_tmp_path(const char *name) {
    static char path[8][256];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, sizeof path[0], "%s/%s", test_tmp_dir, name);
    return p;
}

/* Writes len bytes to test_tmp_dir/name; returns its path. */
static inline const char *test_tmp_file(const char *name, const void *bytes, size_t len) {
    const char *p = test_tmp_path(name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(bytes, 1, len, f) != len) {
        perror(p);
        exit(1);
    }
    fclose(f);
    return p;
}

static inline void test_tmp_cleanup(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_tmp_dir);
}
#endif
