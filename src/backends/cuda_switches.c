/* The CUDA backend's switch table (cuda_switches.h): read, checked, described from one list. */
#include "backends/cuda_switches.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SW(var, kind, field, def, lo, hi, help) \
    {"DQN_CUDA_" var, kind, offsetof(dqn_cuda_switches, field), def, lo, hi, help}
#define BIG 1e300

const dqn_cuda_switch dqn_cuda_switch_table[] = {
    SW("PDL", DQN_SW_BOOL, pdl, 1, 0, 1, "programmatic dependent launch of every kernel of ours"),
    SW("GEMM_SPLITK", DQN_SW_BOOL, gemm_splitk, 0, 0, 1,
       "cublasLt's first-ranked algorithm even where it is split-K (two nodes)"),
    SW("SIDE", DQN_SW_BOOL, side, 1, 0, 1,
       "side branches (the target pass, the weight gradients); 0: one lane"),
    SW("SIDE_PRIO", DQN_SW_BOOL, side_prio, 0, 0, 1,
       "the main lane at the greatest stream priority, the side at the least (per graph node)"),
    SW("SIDE_LEAF", DQN_SW_BOOL, side_leaf, 0, 0, 1,
       "heads_bwd's parts' sum on the idle side lane while capturing"),
    SW("FUSED_TARGETS", DQN_SW_BOOL, fused_targets, 0, 0, 1,
       "targets_huber in one kernel (the loss kernel's blocks compute their targets)"),
    SW("TRUNK_ROWS", DQN_SW_INT, trunk_rows, TRUNK_ROWS, 0, 1 << 30,
       "trunk_fwd in one kernel up to this many rows (0: the sequence)"),
    SW("OWN_GEMM_WIDTH", DQN_SW_INT, own_gemm_width, OWN_GEMM_WIDTH, 1, 1 << 20,
       "own GEMM kernels for K and N up to this"),
    SW("HEALTH_STAGE_PARTS", DQN_SW_INT, health_stage_parts, 0, 0, 1 << 30,
       "a health check with more partials is first reduced by its own last block"),
    SW("GEMM_ONE_WIDTH", DQN_SW_INT, gemm_one_width, GEMM_ONE_KERNEL_WIDTH, 0, 1 << 20,
       "cublasLt algorithms without split-K for K and N up to this ..."),
    SW("GRN_WARPS", DQN_SW_INT, grn_warps, 0, 0, 16,
       "grn_ln_gate_bwd's warps a block (0: its default, 16)"),
    SW("GRN_PARTS", DQN_SW_INT, grn_parts, 0, 0, 1 << 20,
       "grn_ln_gate_bwd's most blocks (0: its default, 64)"),
    SW("GEMM_PICK", DQN_SW_INT, gemm_pick, 0, 0, GEMM_HEURISTICS - 1,
       "cublasLt's candidate of this rank instead of its first"),
    SW("SG_SPLIT", DQN_SW_INT, sg_split, 2, 0, 1024,
       "own dW GEMMs split toward this many blocks a multiprocessor (0: no split)"),
    SW("SG_TILE", DQN_SW_INT, sg_tile, 0, 0, 64, "own GEMMs' tile: 32, 64, or 0 (by the grid)"),
    SW("IQN_EMBED", DQN_SW_INT, iqn_embed, 1, 0, 2,
       "iqn_embed_fwd's one kernel: 0 never, 1 in fp32 math, 2 also in TF32"),
    SW("SIDE_SMS", DQN_SW_INT, side_sms, 0, 0, 1 << 20,
       "cuBLAS on the side lane picks its kernels for this many multiprocessors (0: all)"),
    SW("HEADS_GEMM_ELEMS", DQN_SW_LONG, heads_gemm_elems, (double)HF_GEMM_ELEMS, 0, 9e18,
       "heads_fwd through cuBLAS GEMMs from R x H this large"),
    SW("OWN_GEMM_MACS", DQN_SW_DOUBLE, own_gemm_macs, OWN_GEMM_MACS, 0, BIG,
       "own GEMM kernels up to this many multiply-adds (0: cuBLAS everywhere)"),
    SW("OWN_DW_MACS", DQN_SW_DOUBLE, own_dw_macs, -1, 0, BIG,
       "the same for the dW GEMMs alone (default: OWN_GEMM_MACS's value)"),
    SW("OWN_TF32_MACS", DQN_SW_DOUBLE, own_tf32_macs, OWN_TF32_MACS, 0, BIG,
       "in TF32 math, own fp32 kernels and trunk_fwd up to this many multiply-adds"),
    SW("GEMM_ONE_MACS", DQN_SW_DOUBLE, gemm_one_macs, GEMM_ONE_KERNEL_MACS, 0, BIG,
       "... and up to this many multiply-adds"),
    SW("IQN_EMBED_ELEMS", DQN_SW_DOUBLE, iqn_embed_elems, IQN_EMBED_ELEMS, 0, BIG,
       "iqn_embed_fwd's one kernel from R x d this large"),
    SW("SIDE_DW_MACS", DQN_SW_DOUBLE, side_dw_macs, SIDE_DW_MACS, 0, BIG,
       "weight gradients on the side branch up to this many multiply-adds (0: none)"),
};
const int dqn_cuda_switch_count =
    (int)(sizeof dqn_cuda_switch_table / sizeof dqn_cuda_switch_table[0]);

static double get_value(const dqn_cuda_switches *sw, const dqn_cuda_switch *t) {
    const char *p = (const char *)sw + t->offset;
    switch (t->kind) {
    case DQN_SW_BOOL:
    case DQN_SW_INT: return *(const int *)p;
    case DQN_SW_LONG: return (double)*(const long *)p;
    case DQN_SW_DOUBLE: return *(const double *)p;
    }
    return 0;
}

static void set_value(dqn_cuda_switches *sw, const dqn_cuda_switch *t, double v) {
    char *p = (char *)sw + t->offset;
    switch (t->kind) {
    case DQN_SW_BOOL:
    case DQN_SW_INT: *(int *)p = (int)v; break;
    case DQN_SW_LONG: *(long *)p = (long)v; break;
    case DQN_SW_DOUBLE: *(double *)p = v; break;
    }
}

static void set_defaults(dqn_cuda_switches *sw) {
    memset(sw, 0, sizeof *sw);
    for (int i = 0; i < dqn_cuda_switch_count; i++)
        set_value(sw, &dqn_cuda_switch_table[i], dqn_cuda_switch_table[i].def);
}

/* the whole string as the row's kind: integers in decimal, doubles as strtod reads them (no
 * blanks around either) */
static int parse(const dqn_cuda_switch *t, const char *s, double *out) {
    char *end = NULL;
    errno = 0;
    if (isspace((unsigned char)s[0])) return 0;
    if (t->kind == DQN_SW_DOUBLE) {
        *out = strtod(s, &end);
        return end != s && *end == 0 && errno == 0 && isfinite(*out);
    }
    long long v = strtoll(s, &end, 10);
    *out = (double)v;
    return end != s && *end == 0 && errno == 0;
}

static dqn_status read_all(dqn_cuda_switches *sw, char *(*get)(const char *var)) {
    set_defaults(sw);
    for (int i = 0; i < dqn_cuda_switch_count; i++) {
        const dqn_cuda_switch *t = &dqn_cuda_switch_table[i];
        const char *s = get(t->var);
        if (!s || !*s) continue;
        double v = 0;
        const int tile = t->offset == offsetof(dqn_cuda_switches, sg_tile);
        if (!parse(t, s, &v) || v < t->lo || v > t->hi || (tile && v != 0 && v != 32 && v != 64)) {
            if (t->kind == DQN_SW_BOOL)
                return DQN_ERR(DQN_ERR_ARG, "%s=%s: want 0 or 1 (%s)", t->var, s, t->help);
            if (tile) return DQN_ERR(DQN_ERR_ARG, "%s=%s: want 0, 32 or 64", t->var, s);
            return DQN_ERR(DQN_ERR_ARG, "%s=%s: want %s in [%.15g, %.15g] (%s)", t->var, s,
                           t->kind == DQN_SW_DOUBLE ? "a number" : "an integer", t->lo, t->hi,
                           t->help);
        }
        set_value(sw, t, v);
    }
    return DQN_OK;
}

dqn_status dqn_cuda_switches_read(dqn_cuda_switches *sw, char *(*get)(const char *var)) {
    dqn_status s = read_all(sw, get);
    if (s != DQN_OK) set_defaults(sw);
    if (sw->own_dw_macs < 0) sw->own_dw_macs = sw->own_gemm_macs;   /* its default */
    return s;
}

size_t dqn_cuda_switches_describe(const dqn_cuda_switches *sw, char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < dqn_cuda_switch_count; i++) {
        const dqn_cuda_switch *t = &dqn_cuda_switch_table[i];
        double v = get_value(sw, t), def = t->def;
        if (t->offset == offsetof(dqn_cuda_switches, own_dw_macs)) def = sw->own_gemm_macs;
        if (v == def) continue;
        int w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%s=%.15g",
                         len ? " " : "", t->var, v);
        if (w > 0) len += (size_t)w;
    }
    return len;
}
