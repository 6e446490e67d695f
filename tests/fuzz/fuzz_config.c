/* Fuzz target: the config file parser and the key setter (dqn_config_from_text, the parser of
 * --config files and of the config inside checkpoints; dqn_config_set, every flag's value).
 * Input: a config file. Its first line, if it holds '=', is also tried as one flag KEY=VALUE.
 * Properties: a config that loads is written (dqn_config_to_text) and reads back to the same
 * value of every key; dqn_config_validate never crashes on it. */
#include "fuzz_common.h"

static void fuzz_config_same(const dqn_config *a, const dqn_config *b) {
    char va[600], vb[600];
    for (int i = 0; i < dqn_config_key_count(); i++) {
        const char *k = dqn_config_key_name(i);
        if (dqn_config_format(a, k, va, sizeof va) != DQN_OK ||
            dqn_config_format(b, k, vb, sizeof vb) != DQN_OK || strcmp(va, vb) != 0) {
            fprintf(stderr, "config round trip: %s = %s became %s\n", k, va, vb);
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dqn_config c, back;
    if (dqn_config_from_text((const char *)data, size, "fuzz.cfg", &c) == DQN_OK) {
        char *text = NULL;
        size_t len = 0;
        if (dqn_config_to_text(&c, &text, &len) != DQN_OK) abort();
        if (dqn_config_from_text(text, len, "written.cfg", &back) != DQN_OK) {
            fprintf(stderr, "written config does not load: %s\n%s", dqn_last_error(), text);
            abort();
        }
        free(text);
        fuzz_config_same(&c, &back);
        (void)dqn_config_validate(&c);
        fuzz_accepted++;
    }
    /* the first line as --KEY=VALUE */
    size_t n = 0;
    while (n < size && data[n] != '\n') n++;
    char *line = malloc(n + 1);
    if (!line) abort();
    memcpy(line, data, n);
    line[n] = 0;
    char *eq = strchr(line, '=');
    if (eq) {
        *eq = 0;
        dqn_config_defaults(&c);
        if (dqn_config_set(&c, line, eq + 1) == DQN_OK) {
            back = c;
            char v[600];
            if (dqn_config_format(&c, line, v, sizeof v) != DQN_OK ||
                dqn_config_set(&back, line, v) != DQN_OK) {
                fprintf(stderr, "%s = %s: its formatted value %s does not set\n", line, eq + 1, v);
                abort();
            }
            fuzz_config_same(&c, &back);
            (void)dqn_config_validate(&c);
        }
    }
    free(line);
    return 0;
}
