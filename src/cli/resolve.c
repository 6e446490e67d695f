/* The resolved config of a run: preset, then config file, then flags, then validation. */
#include <string.h>

#include "cli/cli.h"
#include "core/config.h"

static int is_own(const cli_flag *f, const char *const *own) {
    for (; *own; own++)
        if (cli_flag_is(f, *own)) return 1;
    return 0;
}

int cli_build_config(const cli_flags *f, const char *const *own, dqn_config *c) {
    int rc = cli_flags_once(f, "config");
    if (rc) return rc;
    const cli_flag *envf = cli_flags_last(f, "env"), *file = cli_flags_last(f, "config");
    dqn_config scratch;
    dqn_config_defaults(&scratch);
    char env[DQN_CFG_STR] = "cartpole";
    dqn_status s;
    if (envf) {
        if ((s = dqn_config_set(&scratch, envf->key, envf->value)) != DQN_OK)
            return cli_fail_status(s);
        snprintf(env, sizeof env, "%s", scratch.env);
    } else if (file) {
        /* the file's env, if it names one, picks the preset */
        scratch.env[0] = 0;
        if ((s = dqn_config_load_file(&scratch, file->value)) != DQN_OK) return cli_fail_status(s);
        if (scratch.env[0]) snprintf(env, sizeof env, "%s", scratch.env);
    }
    if ((s = dqn_config_preset(c, env)) != DQN_OK) return cli_fail_status(s);
    if (file && (s = dqn_config_load_file(c, file->value)) != DQN_OK) return cli_fail_status(s);
    char faults[sizeof c->fault] = "";   /* --fault may be repeated: the items add up */
    for (int i = 0; i < f->n; i++) {
        const cli_flag *fl = &f->v[i];
        if (!fl->value || is_own(fl, own) || cli_flag_is(fl, "config")) continue;
        const char *v = fl->value;
        if (cli_flag_is(fl, "fault") && faults[0] && fl->value[0]) {
            size_t n = strlen(faults);
            if (n + 1 + strlen(fl->value) >= sizeof faults)
                return cli_error(CLI_USAGE, "bad value for fault: the --fault items exceed %zu "
                                            "characters", sizeof faults - 1);
            snprintf(faults + n, sizeof faults - n, ",%s", fl->value);
            v = faults;
        }
        if ((s = dqn_config_set(c, fl->key, v)) != DQN_OK) return cli_fail_status(s);
        if (cli_flag_is(fl, "fault")) snprintf(faults, sizeof faults, "%s", c->fault);
    }
    if ((s = dqn_config_validate(c)) != DQN_OK) return cli_fail_status(s);
    return CLI_OK;
}

void cli_print_changed(FILE *out, const char *label, const dqn_config *c) {
    dqn_config def;
    dqn_config_defaults(&def);
    int col = fprintf(out, "%-10s", label), any = 0;
    for (int i = 0; i < dqn_config_key_count(); i++) {
        const char *k = dqn_config_key_name(i);
        char a[300], b[300], item[640];
        dqn_config_format(c, k, a, sizeof a);
        dqn_config_format(&def, k, b, sizeof b);
        if (strcmp(a, b) == 0 || strcmp(k, "run_dir") == 0) continue;
        int len = snprintf(item, sizeof item, "%s=%s", k, a);
        if (any && col + 1 + len > 100) col = fprintf(out, "\n%-10s", "") - 1;
        else if (any) col += fprintf(out, " ");
        col += fprintf(out, "%s", item);
        any = 1;
    }
    fprintf(out, "%s\n", any ? "" : "(all defaults)");
}
