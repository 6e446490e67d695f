/* Minimal test harness: CHECK records a failure with file and line and goes on; a test binary
 * exits 1 if anything failed, 77 to report "skipped" (the runner counts it as such). */
#ifndef DQN_TEST_CHECK_H
#define DQN_TEST_CHECK_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        check_count++;                                                          \
        if (!(cond)) {                                                          \
            check_failures++;                                                   \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
        }                                                                       \
    } while (0)

#define CHECK_OK(expr)                                                          \
    do {                                                                        \
        dqn_status st_ = (expr);                                                \
        CHECK(st_ == DQN_OK, "%s -> %s: %s", #expr, dqn_status_str(st_), dqn_last_error()); \
    } while (0)

/* relative error |a-b| / max(|b|, floor) */
static inline double rel_err(double a, double b, double floor) {
    double den = fabs(b) > floor ? fabs(b) : floor;
    return fabs(a - b) / den;
}

/* calloc for test buffers: a test that cannot allocate stops there */
static inline void *test_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "out of memory (%zu x %zu bytes)\n", n, size);
        exit(1);
    }
    return p;
}

static inline int check_finish(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures, check_count);
        return 1;
    }
    printf("%s: %d checks passed\n", name, check_count);
    return 0;
}
#endif
