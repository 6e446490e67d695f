#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *dqn_status_str(dqn_status s) {
    switch (s) {
    case DQN_OK: return "ok";
    case DQN_ERR_ARG: return "bad argument";
    case DQN_ERR_NOMEM: return "out of memory";
    case DQN_ERR_IO: return "i/o error";
    case DQN_ERR_FORMAT: return "bad format";
    case DQN_ERR_BACKEND: return "backend error";
    case DQN_ERR_UNSUPPORTED: return "unsupported";
    case DQN_ERR_NUMERIC: return "non-finite value";
    }
    return "unknown status";
}

const char *dqn_last_error(void) { return last_error; }
void dqn_error_clear(void) { last_error[0] = 0; }

dqn_status dqn_set_error(dqn_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

dqn_status dqn_error_at(dqn_status s, const char *file, int line, const char *fmt, ...) {
    int k = snprintf(last_error, sizeof last_error, "%s:%d: ", file, line);
    if (k < 0 || (size_t)k >= sizeof last_error) k = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + k, sizeof last_error - (size_t)k, fmt, ap);
    va_end(ap);
    return s;
}

