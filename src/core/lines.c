#define _POSIX_C_SOURCE 200809L
#include "core/lines.h"

#include <errno.h>
#include <stdlib.h>

ssize_t dqn_getline_max(char **line, size_t *cap, FILE *f, size_t max) {
    size_t n = 0;
    int ch;
    while ((ch = getc_unlocked(f)) != EOF) {
        if (n == max) return DQN_LINE_TOO_LONG;
        if (n + 2 > *cap) {
            size_t want = *cap ? 2 * *cap : 256;
            char *p = realloc(*line, want);
            if (!p) {
                errno = ENOMEM;
                return -1;
            }
            *line = p;
            *cap = want;
        }
        (*line)[n++] = (char)ch;
        if (ch == '\n') break;
    }
    if (n == 0) return -1;
    (*line)[n] = 0;
    return (ssize_t)n;
}
