/* Command-line flags: "--key value" and "--key=value", '-' and '_' alike in keys. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

int cli_flags_parse(int argc, char **argv, cli_flags *out) {
    out->n = 0;
    out->v = calloc((size_t)(argc > 0 ? argc : 1), sizeof *out->v);
    if (!out->v) return cli_error(CLI_FAIL, "out of memory");
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        cli_flag *f = &out->v[out->n];
        if (is_help(a)) {
            f->key = a;
            f->value = NULL;
        } else if (strncmp(a, "--", 2) != 0 || a[2] == 0 || a[2] == '=') {
            cli_flags_free(out);
            return cli_error(CLI_USAGE, "unexpected argument \"%.80s\" (flags are --key value "
                                        "or --key=value)", a);
        } else if (strchr(a, '=')) {
            char *eq = strchr(a, '=');
            *eq = 0;
            f->key = a;
            f->value = eq + 1;
        } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 && !is_help(argv[i + 1])) {
            f->key = a;
            f->value = argv[++i];
        } else {
            cli_flags_free(out);
            return cli_error(CLI_USAGE, "missing value for %.80s", a);
        }
        out->n++;
    }
    return CLI_OK;
}

void cli_flags_free(cli_flags *f) {
    free(f->v);
    f->v = NULL;
    f->n = 0;
}

int cli_flag_is(const cli_flag *f, const char *name) {
    const char *k = f->key;
    if (k[0] != '-' || k[1] != '-') return 0;
    k += 2;
    for (; *k && *name; k++, name++)
        if ((*k == '-' ? '_' : *k) != *name) return 0;
    return *k == 0 && *name == 0;
}

int cli_flags_help(const cli_flags *f) {
    for (int i = 0; i < f->n; i++)
        if (!f->v[i].value) return 1;
    return 0;
}

const cli_flag *cli_flags_last(const cli_flags *f, const char *name) {
    for (int i = f->n - 1; i >= 0; i--)
        if (f->v[i].value && cli_flag_is(&f->v[i], name)) return &f->v[i];
    return NULL;
}

int cli_flags_once(const cli_flags *f, const char *name) {
    int seen = 0;
    for (int i = 0; i < f->n; i++)
        if (f->v[i].value && cli_flag_is(&f->v[i], name) && seen++)
            return cli_error(CLI_USAGE, "%s given more than once", f->v[i].key);
    return CLI_OK;
}

int cli_parse_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = *v && !isspace((unsigned char)*v) ? strtoll(v, &end, 10) : 0;
    if (!*v || isspace((unsigned char)*v) || errno || *end || x < lo || x > hi)
        return cli_error(CLI_USAGE, "bad value for %s: \"%.80s\" (expected an integer in [%lld, "
                                    "%lld])", flag, v, lo, hi);
    *out = x;
    return CLI_OK;
}

int cli_parse_u64(const char *flag, const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    int ok = *v && !isspace((unsigned char)*v) && *v != '-';
    unsigned long long x = ok ? strtoull(v, &end, 10) : 0;
    if (!ok || errno || *end)
        return cli_error(CLI_USAGE, "bad value for %s: \"%.80s\" (expected an integer in [0, %"
                                    PRIu64 "])", flag, v, UINT64_MAX);
    *out = (uint64_t)x;
    return CLI_OK;
}
