/* Fuzz target: dqn health RUN_DIR, the reader of a run's health files (src/cli/health.c:
 * health_slots.csv, health_isv.csv, health_event.json; it writes isv.svg). Input: the three
 * files' contents separated by lines "=====" (a missing part: that file is absent). Linked with
 * the CLI's objects but main.o; cli_error and cli_fail_status are defined here as main.c does. */
#include <stdarg.h>

#include "cli/cli.h"
#include "fuzz_common.h"

#ifndef FUZZ_NO_CLI_ERROR
int cli_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[1200];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return code;
}

int cli_fail_status(dqn_status s) {
    return s == DQN_ERR_ARG || s == DQN_ERR_IO || s == DQN_ERR_FORMAT || s == DQN_ERR_UNSUPPORTED
               ? CLI_USAGE
               : CLI_FAIL;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[3] = {"health_slots.csv", "health_isv.csv",
                                         "health_event.json"};
    char dir[160];
    snprintf(dir, sizeof dir, "%s/run", fuzz_dir());
    mkdir(dir, 0777);
    size_t pos = 0;
    for (int i = 0; i < 3; i++) {
        char path[200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
        if (i > 0 && pos >= size + 1) continue; /* no separator before this part */
        size_t end = pos;
        while (end < size && !(size - end >= 7 && memcmp(data + end, "\n=====\n", 7) == 0)) end++;
        fuzz_write(path, data + pos, end - pos);
        pos = end < size ? end + 7 : size + 1;
    }
    /* the report goes to stdout: away from it, the replay's and libFuzzer's output */
    fflush(stdout);
    int saved = dup(1), null = open("/dev/null", O_WRONLY);
    if (saved < 0 || null < 0 || dup2(null, 1) < 0) abort();
    char *argv[2] = {dir, NULL};
    int rc = cli_health_cmd(1, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(null);
    if (rc != CLI_OK && rc != CLI_USAGE && rc != CLI_FAIL) abort();
    if (rc == CLI_OK) fuzz_accepted++;
    return 0;
}
