/* The CUDA backend's switch table (backends/cuda_switches.h), on the CPU: the defaults are the
 * documented constants; each switch reaches its own field and no other; a value that does not
 * parse whole, lies outside its range or is no tile size fails naming the variable and leaves the
 * defaults; describe() lists exactly what differs from the defaults; docs/ARCHITECTURE.md names
 * every switch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda_switches.h"
#include "check.h"

/* the environment a test gives the reader: one variable, or none */
static const char *env_var, *env_val;
static char *fake_get(const char *var) {
    return env_var && strcmp(var, env_var) == 0 ? (char *)env_val : NULL;
}

static dqn_status read_with(dqn_cuda_switches *sw, const char *var, const char *val) {
    env_var = var, env_val = val;
    dqn_status s = dqn_cuda_switches_read(sw, fake_get);
    env_var = env_val = NULL;
    return s;
}

static void test_defaults(void) {
    dqn_cuda_switches sw;
    CHECK_OK(read_with(&sw, NULL, NULL));
    CHECK(sw.pdl == 1 && sw.gemm_splitk == 0 && sw.side == 1 && sw.side_prio == 0 &&
              sw.side_leaf == 0 && sw.fused_targets == 0,
          "the switches' defaults");
    CHECK(sw.trunk_rows == TRUNK_ROWS && sw.own_gemm_width == OWN_GEMM_WIDTH &&
              sw.gemm_one_width == GEMM_ONE_KERNEL_WIDTH && sw.sg_split == 2 && sw.sg_tile == 0 &&
              sw.iqn_embed == 1 && sw.side_sms == 0 && sw.gemm_pick == 0 &&
              sw.health_stage_parts == 0 && sw.grn_warps == 0 && sw.grn_parts == 0,
          "integer defaults");
    CHECK(sw.heads_gemm_elems == HF_GEMM_ELEMS && sw.own_gemm_macs == OWN_GEMM_MACS &&
              sw.own_dw_macs == OWN_GEMM_MACS && sw.own_tf32_macs == OWN_TF32_MACS &&
              sw.gemm_one_macs == GEMM_ONE_KERNEL_MACS && sw.iqn_embed_elems == IQN_EMBED_ELEMS &&
              sw.side_dw_macs == SIDE_DW_MACS,
          "the documented constants");
    char buf[64];
    CHECK(dqn_cuda_switches_describe(&sw, buf, sizeof buf) == 0 && buf[0] == 0,
          "defaults described as '%s'", buf);
    CHECK_OK(read_with(&sw, "DQN_CUDA_SIDE_SMS", ""));
    CHECK(sw.side_sms == 0, "an empty value is unset");
}

/* each row: a value inside its range reaches its field alone, and describe() names it alone */
static void test_each_switch(void) {
    dqn_cuda_switches def;
    CHECK_OK(read_with(&def, NULL, NULL));
    for (int i = 0; i < dqn_cuda_switch_count; i++) {
        const dqn_cuda_switch *t = &dqn_cuda_switch_table[i];
        double v = t->def == t->lo ? t->hi : t->lo;   /* not the default */
        if (t->offset == offsetof(dqn_cuda_switches, sg_tile)) v = 32;
        if (t->kind == DQN_SW_DOUBLE || t->kind == DQN_SW_LONG) v = t->def > 1 ? t->def / 2 : 12345;
        char val[64];
        snprintf(val, sizeof val, "%.17g", v);
        dqn_cuda_switches sw;
        CHECK_OK(read_with(&sw, t->var, val));
        unsigned char *a = (unsigned char *)&sw, *b = (unsigned char *)&def;
        size_t width = t->kind == DQN_SW_DOUBLE ? sizeof(double)
                       : t->kind == DQN_SW_LONG ? sizeof(long) : sizeof(int);
        double got = t->kind == DQN_SW_DOUBLE ? *(double *)(a + t->offset)
                     : t->kind == DQN_SW_LONG ? (double)*(long *)(a + t->offset)
                                              : *(int *)(a + t->offset);
        CHECK(got == v, "%s=%s read as %.17g", t->var, val, got);
        int others = 0;
        for (size_t k = 0; k < sizeof sw; k++) {
            if (k >= t->offset && k < t->offset + width) continue;
            /* OWN_DW_MACS follows OWN_GEMM_MACS where it is not set itself */
            if (t->offset == offsetof(dqn_cuda_switches, own_gemm_macs) &&
                k >= offsetof(dqn_cuda_switches, own_dw_macs) &&
                k < offsetof(dqn_cuda_switches, own_dw_macs) + sizeof(double))
                continue;
            others += a[k] != b[k];
        }
        CHECK(others == 0, "%s changed %d other bytes", t->var, others);
        char buf[256];
        dqn_cuda_switches_describe(&sw, buf, sizeof buf);
        CHECK(strncmp(buf, t->var, strlen(t->var)) == 0 && buf[strlen(t->var)] == '=' &&
                  strchr(buf, ' ') == NULL,
              "%s=%s described as '%s'", t->var, val, buf);
    }
    dqn_cuda_switches sw;
    CHECK_OK(read_with(&sw, "DQN_CUDA_OWN_GEMM_MACS", "1000"));
    CHECK(sw.own_dw_macs == 1000, "OWN_DW_MACS follows OWN_GEMM_MACS: %g", sw.own_dw_macs);
    CHECK_OK(read_with(&sw, "DQN_CUDA_OWN_DW_MACS", "0"));
    CHECK(sw.own_dw_macs == 0 && sw.own_gemm_macs == OWN_GEMM_MACS, "OWN_DW_MACS alone");
    CHECK_OK(read_with(&sw, "DQN_CUDA_SIDE_DW_MACS", "3.3554432e7"));
    CHECK(sw.side_dw_macs == 33554432.0, "a double in exponent form");
}

static void test_bad_values(void) {
    const char *bad[][2] = {
        {"DQN_CUDA_PDL", "no"},           {"DQN_CUDA_SIDE", "2"},
        {"DQN_CUDA_SIDE_PRIO", "1x"},     {"DQN_CUDA_TRUNK_ROWS", "-1"},
        {"DQN_CUDA_TRUNK_ROWS", "2048.5"}, {"DQN_CUDA_GEMM_PICK", "16"},
        {"DQN_CUDA_SG_TILE", "48"},       {"DQN_CUDA_GRN_WARPS", "17"},
        {"DQN_CUDA_IQN_EMBED", "3"},      {"DQN_CUDA_OWN_GEMM_MACS", "lots"},
        {"DQN_CUDA_OWN_GEMM_MACS", "-5"}, {"DQN_CUDA_SIDE_DW_MACS", "inf"},
        {"DQN_CUDA_SIDE_SMS", " 66"},     {"DQN_CUDA_HEADS_GEMM_ELEMS", "2e6"},
    };
    dqn_cuda_switches def;
    CHECK_OK(read_with(&def, NULL, NULL));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dqn_cuda_switches sw;
        dqn_status s = read_with(&sw, bad[i][0], bad[i][1]);
        char want[96];
        snprintf(want, sizeof want, "%s=%s:", bad[i][0], bad[i][1]);
        CHECK(s == DQN_ERR_ARG && strstr(dqn_last_error(), want) != NULL,
              "%s=%s: status %d, '%s'", bad[i][0], bad[i][1], (int)s, dqn_last_error());
        CHECK(memcmp(&sw, &def, sizeof sw) == 0, "%s=%s left something set", bad[i][0],
              bad[i][1]);
    }
}

/* every switch is documented where the CUDA backend's switches are listed */
static void test_documented(void) {
    FILE *f = fopen("docs/ARCHITECTURE.md", "rb");
    CHECK(f != NULL, "docs/ARCHITECTURE.md: not found (run from the repository root)");
    if (!f) return;
    static char doc[1 << 20];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = 0;
    for (int i = 0; i < dqn_cuda_switch_count; i++) {
        const char *v = dqn_cuda_switch_table[i].var;
        int found = 0;
        for (const char *p = doc; !found && (p = strstr(p, v)) != NULL; p += strlen(v))
            found = !(p[strlen(v)] == '_' || (p[strlen(v)] >= 'A' && p[strlen(v)] <= 'Z'));
        CHECK(found, "%s is not in docs/ARCHITECTURE.md", v);
    }
}

int main(void) {
    test_defaults();
    test_each_switch();
    test_bad_values();
    test_documented();
    return check_finish("test_cuda_switches");
}
