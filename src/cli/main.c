/* dqn: the command-line program. Dispatches to the subcommands; only it prints and exits. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int cli_error(int code, const char *fmt, ...) {
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one line, whatever the message held */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    fflush(stdout);
    fprintf(stderr, "dqn: %s\n", msg);
    return code;
}

int cli_fail_status(dqn_status s) {
    int usage = s == DQN_ERR_ARG || s == DQN_ERR_IO || s == DQN_ERR_FORMAT ||
                s == DQN_ERR_UNSUPPORTED;
    const char *msg = dqn_last_error();
    return cli_error(usage ? CLI_USAGE : CLI_FAIL, "%s", msg[0] ? msg : dqn_status_str(s));
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: dqn <command> [--key value | --key=value]...\n"
            "\n"
            "Distributional deep Q-networks (IQN + GRN trunk + dueling heads + action branching).\n"
            "\n"
            "commands:\n"
            "  train    train an agent into a run directory; resume one (dqn train --help)\n"
            "  eval     greedy evaluation of a checkpoint (dqn eval --help)\n"
            "  bench    time the training loop through the public API (dqn bench --help)\n"
            "  health   a run's numerical health, the slot table, the replay of a bad update\n"
            "           (dqn health --help)\n"
            "\n"
            "  dqn --help | --version\n"
            "\n"
            "exit status: 0 ok, 1 failure while running, 2 bad input (nothing written),\n"
            "130 interrupted (checkpoint saved)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) return cli_error(CLI_USAGE, "missing command (see dqn --help)");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("dqn %s\n", DQN_VERSION);
        return CLI_OK;
    }
    if (strcmp(cmd, "train") == 0) return cli_train(argc - 2, argv + 2);
    if (strcmp(cmd, "eval") == 0) return cli_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) return cli_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "health") == 0) return cli_health_cmd(argc - 2, argv + 2);
    char q[80];
    snprintf(q, sizeof q, "%s", cmd);
    return cli_error(CLI_USAGE, "unknown command \"%s\" (expected train, eval, bench or health; "
                                "see dqn --help)", q);
}
