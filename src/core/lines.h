/* Reading text files a line at a time with a bound, so a file without newlines (/dev/zero, a
 * binary dropped in by mistake) is refused instead of read until memory runs out. */
#ifndef DQN_CORE_LINES_H
#define DQN_CORE_LINES_H
#include <stdio.h>
#include <sys/types.h>

#define DQN_LINE_TOO_LONG ((ssize_t)-2)

/* getline(3) with a bound: the line with its '\n' in *line (NUL-terminated, NUL bytes kept), its
 * length returned; -1 at end of file or on a read error (ferror, errno) with nothing read;
 * DQN_LINE_TOO_LONG once max bytes passed without a '\n' (the rest of the line is not read),
 * or -1 with errno = ENOMEM when the buffer cannot grow. */
ssize_t dqn_getline_max(char **line, size_t *cap, FILE *f, size_t max);

#endif
