/* Internal status helpers: a failure records a message (file:line: text) for dqn_last_error(). */
#ifndef DQN_CORE_ERROR_H
#define DQN_CORE_ERROR_H
#include "dqn.h"

dqn_status dqn_error_at(dqn_status s, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Record a message without file and line (user-facing errors: bad key, bad file): the public
 * dqn_set_error, which env code calls too. */
#define dqn_error_user dqn_set_error
void dqn_error_clear(void);

#define DQN_ERR(s, ...) dqn_error_at((s), __FILE__, __LINE__, __VA_ARGS__)
/* Propagate a failing status. */
#define DQN_TRY(expr)                        \
    do {                                     \
        dqn_status try_s_ = (expr);          \
        if (try_s_ != DQN_OK) return try_s_; \
    } while (0)

#endif
