/* The slot table of SPEC 4 (execution order of one update) and the ISV entries, built from the
 * architecture; fault specifications. One table, so docs/health.md, `dqn health --slots`, the
 * checks and fault injection cannot disagree. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "health/health.h"

static int add_isv(dqn_health_table *t, const char *name) {
    snprintf(t->isv[t->n_isv], sizeof t->isv[0], "%s", name);
    return t->n_isv++;
}

/* A slot whose bound is its own scale entry unless bound_isv >= 0. */
static int add_slot(dqn_health_table *t, const char *name, const char *stage, size_t n,
                    int guard, int bound_isv, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static int add_slot(dqn_health_table *t, const char *name, const char *stage, size_t n,
                    int guard, int bound_isv, const char *fmt, ...) {
    dqn_slot *s = &t->slot[t->n_slots];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->stage = stage;
    s->n = n;
    s->guard = guard;
    s->bound_isv = bound_isv;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->buffer, sizeof s->buffer, fmt, ap);
    va_end(ap);
    return t->n_slots++;
}

/* Backward order of the parameter tensors: the heads (value, then advantage), the bottleneck,
 * phi, the GRN blocks from the last, the input layer. */
static int grad_order(const dqn_layout *L, int *order) {
    static const char *const heads[] = {"v2.W", "v2.b", "v1.W", "v1.b", "a2.W", "a2.b",
                                        "a1.W", "a1.b", "bn.W", "bn.b", "phi.W", "phi.b"};
    int n = 0;
    char name[24];
    for (size_t k = 0; k < sizeof heads / sizeof heads[0]; k++) {
        const dqn_tensor *tt = dqn_layout_find(L, heads[k]);
        if (tt) order[n++] = (int)(tt - L->t);
    }
    static const char *const grn[] = {"gamma", "beta", "Wb", "bb", "Wa", "ba"};
    for (int l = L->arch.grn_blocks - 1; l >= 0; l--)
        for (size_t k = 0; k < sizeof grn / sizeof grn[0]; k++) {
            snprintf(name, sizeof name, "grn%d.%s", l, grn[k]);
            order[n++] = (int)(dqn_layout_find(L, name) - L->t);
        }
    order[n++] = (int)(dqn_layout_find(L, "in.W") - L->t);
    order[n++] = (int)(dqn_layout_find(L, "in.b") - L->t);
    return n;
}

dqn_status dqn_health_table_build(dqn_health_table *t, const dqn_layout *L, int B, int N, int Nt,
                                  int split) {
    memset(t, 0, sizeof *t);
    const dqn_arch *a = &L->arch;
    int Lb = a->grn_blocks, m = a->bottleneck, D = a->br.D, A = a->br.A;
    size_t d = (size_t)a->d, Bs = (size_t)B, R = Bs * (size_t)N, H = (size_t)a->head_hidden;
    (void)H;
    char nm[40];
    /* ISV: the named statistics of SPEC 4 first */
    for (int l = 0; l < DQN_MAX_GRN; l++) t->i_ln[l] = -1;
    for (int l = 0; l < Lb; l++) {
        snprintf(nm, sizeof nm, "ln_rms.grn%d", l);
        t->i_ln[l] = add_isv(t, nm);
    }
    t->i_q = add_isv(t, "q_scale");
    t->i_target = add_isv(t, "target_scale");
    t->i_loss = add_isv(t, "loss");
    t->i_gnorm = add_isv(t, "grad_norm");
    t->i_rms_dv = add_isv(t, "rms.d_value_logits");
    t->i_rms_da = add_isv(t, "rms.d_adv_logits");
    t->i_rms_dcat = m > 0 ? add_isv(t, "rms.d_concat") : -1;
    t->i_rms_dtrunk = add_isv(t, "rms.d_trunk");
    t->i_rms_dtrunk_out = Lb > 0 ? add_isv(t, "rms.d_trunk_out") : -1;
    t->i_scale = t->n_isv;

    for (int l = 0; l < DQN_MAX_GRN; l++) t->grn_out[l] = t->grn_din[l] = -1;
    for (int k = 0; k < DQN_MAX_TENSORS; k++) t->grad[k] = -1;
    t->cat = t->bn_out = t->d_concat = -1;

    t->obs = add_slot(t, "obs", "sample", Bs * (size_t)a->obs_dim, 0, -1, "x [B, obs]");
    for (int l = 0; l < Lb; l++) {
        snprintf(nm, sizeof nm, "grn%d.out", l);
        t->grn_out[l] = add_slot(t, nm, "forward", Bs * d, 0, -1, "h%d = LayerNorm(...) [B, d]",
                                 l + 1);
    }
    t->phi = add_slot(t, "phi", "forward", R * d, 0, -1, "ReLU(W_phi cos + b) [B*N, d]");
    t->z = add_slot(t, "z", "forward", R * d, 0, -1, "h * phi [B*N, d]");
    split = split && m > 0;
    if (m > 0 && !split) t->cat = add_slot(t, "concat", "forward", R * 2 * d, 0, -1, "[z ; h] [B*N, 2d]");
    if (m > 0) t->bn_out = add_slot(t, "bn.out", "forward", R * (size_t)m, 0, -1, "u [B*N, m]");
    t->value = add_slot(t, "value_logits", "forward", R, 0, -1, "V [B*N, 1]");
    t->adv = add_slot(t, "adv_logits", "forward", R * (size_t)A, 0, -1, "A [B*N, A]");
    t->Z = add_slot(t, "Z", "forward", R * (size_t)A, 0, -1, "Z [B*N, A]");
    t->y = add_slot(t, "y", "target", Bs * (size_t)D * (size_t)Nt, 0, -1,
                    "targets [B, 1 or D, N']");
    t->loss = add_slot(t, "loss", "loss", 1, 0, -1, "L [1]");
    t->dZ = add_slot(t, "d_Z", "backward", R * (size_t)A, 0, -1, "dL/dZ [B*N, A]");
    t->d_value = add_slot(t, "d_value_logits", "backward", R, 1, t->i_q, "dV [B*N, 1]");
    t->d_adv = add_slot(t, "d_adv_logits", "backward", R * (size_t)A, 1, t->i_q, "dA [B*N, A]");
    if (m > 0 && split)
        t->d_concat = add_slot(t, "d_concat", "backward", Bs * (size_t)m, 1, t->i_rms_dcat,
                               "d[z ; h]'s h half before its GEMM, sum over taus [B, m]");
    else if (m > 0)
        t->d_concat = add_slot(t, "d_concat", "backward", R * 2 * d, 1, t->i_rms_dcat,
                               "d[z ; h] [B*N, 2d]");
    t->d_z = add_slot(t, "d_z", "backward", R * d, split, -1,
                      split ? "dz, d[z ; h]'s z half [B*N, d]" : "dz [B*N, d]");
    t->d_trunk = add_slot(t, "d_trunk", "backward", Bs * d, 1,
                          Lb > 0 ? t->i_ln[Lb - 1] : t->i_rms_dtrunk,
                          "dh%d, IQN path -> trunk [B, d]", Lb);
    for (int l = Lb - 1; l >= 0; l--) {
        snprintf(nm, sizeof nm, "grn%d.d_in", l);
        /* the trunk's output gradient (block 0's input gradient) is guarded before in.W's GEMM */
        t->grn_din[l] = add_slot(t, nm, "backward", Bs * d, l == 0, l == 0 ? t->i_ln[0] : -1,
                                 "dh%d [B, d]", l);
    }
    int order[DQN_MAX_TENSORS];
    int no = grad_order(L, order);
    for (int k = 0; k < no; k++) {
        const dqn_tensor *tt = &L->t[order[k]];
        snprintf(nm, sizeof nm, "grad.%s", tt->name);
        t->grad[order[k]] = tt->cols
                                ? add_slot(t, nm, "backward", tt->size, 0, -1, "[%d, %d]", tt->rows,
                                           tt->cols)
                                : add_slot(t, nm, "backward", tt->size, 0, -1, "[%d]", tt->rows);
    }
    t->grad_norm = add_slot(t, "grad_norm", "optimizer", 1, 0, -1, "||g|| [1]");
    t->params = add_slot(t, "params", "optimizer", L->n_params, 0, -1,
                         "parameters after the update [%zu]", L->n_params);
    if (t->n_slots > DQN_HEALTH_MAX_SLOTS || t->i_scale + t->n_slots > DQN_HEALTH_MAX_ISV)
        return DQN_ERR(DQN_ERR_UNSUPPORTED, "health: %d slots, %d ISV entries exceed the limits",
                       t->n_slots, t->i_scale + t->n_slots);
    for (int s = 0; s < t->n_slots; s++) {
        snprintf(nm, sizeof nm, "scale.%s", t->slot[s].name);
        add_isv(t, nm);
        if (t->slot[s].bound_isv < 0) t->slot[s].bound_isv = t->i_scale + s;
    }
    return DQN_OK;
}

int dqn_health_slot_find(const dqn_health_table *t, const char *name) {
    for (int s = 0; s < t->n_slots; s++)
        if (strcmp(t->slot[s].name, name) == 0) return s;
    return -1;
}

dqn_status dqn_health_mode_parse(const char *s, dqn_health_mode *out) {
    if (strcmp(s, "off") == 0) *out = DQN_HEALTH_OFF;
    else if (strcmp(s, "detect") == 0) *out = DQN_HEALTH_DETECT;
    else if (strcmp(s, "guard") == 0) *out = DQN_HEALTH_GUARD;
    else return dqn_error_user(DQN_ERR_ARG, "bad value for health: \"%s\" (expected off|detect|guard)", s);
    return DQN_OK;
}

const char *dqn_event_kind_name(uint32_t kind) {
    switch (kind) {
    case DQN_EVENT_NAN: return "nan";
    case DQN_EVENT_POSINF: return "+inf";
    case DQN_EVENT_NEGINF: return "-inf";
    case DQN_EVENT_RANGE: return "out of range";
    default: return "none";
    }
}

/* One item "SLOT:UPDATE:KIND" of [p, end): its parts, or 0 if malformed. */
static int split_item(const char *p, const char *end, char *slot, size_t cap, uint64_t *at,
                      int *kind) {
    const char *c1 = memchr(p, ':', (size_t)(end - p));
    if (!c1 || c1 == p || (size_t)(c1 - p) >= cap) return 0;
    const char *c2 = memchr(c1 + 1, ':', (size_t)(end - c1 - 1));
    if (!c2 || c2 == c1 + 1) return 0;
    for (const char *q = p; q < c1; q++)
        if (!(isalnum((unsigned char)*q) || *q == '_' || *q == '.')) return 0;
    uint64_t v = 0;
    for (const char *q = c1 + 1; q < c2; q++) {
        if (!isdigit((unsigned char)*q) || v > (UINT64_MAX - 9) / 10) return 0;
        v = 10 * v + (uint64_t)(*q - '0');
    }
    size_t kl = (size_t)(end - c2 - 1);
    const char *k = c2 + 1;
    if (kl == 3 && strncmp(k, "nan", 3) == 0) *kind = 1;
    else if (kl == 3 && strncmp(k, "inf", 3) == 0) *kind = 2;
    else if (kl == 4 && strncmp(k, "huge", 4) == 0) *kind = 3;
    else return 0;
    memcpy(slot, p, (size_t)(c1 - p));
    slot[c1 - p] = 0;
    *at = v;
    return 1;
}

static dqn_status walk(const char *spec, const dqn_health_table *t, dqn_fault *out, int *n) {
    int count = 0;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        char slot[40];
        uint64_t at;
        int kind;
        if (!split_item(p, end, slot, sizeof slot, &at, &kind))
            return dqn_error_user(DQN_ERR_ARG, "bad value for fault: \"%.*s\" (expected "
                                  "SLOT:UPDATE:nan|inf|huge, e.g. phi:100:nan)", (int)(end - p), p);
        if (count == DQN_HEALTH_MAX_FAULTS)
            return dqn_error_user(DQN_ERR_ARG, "bad value for fault: more than %d faults",
                                  DQN_HEALTH_MAX_FAULTS);
        if (t) {
            int s = dqn_health_slot_find(t, slot);
            if (s < 0)
                return dqn_error_user(DQN_ERR_ARG, "bad value for fault: \"%s\" is not a slot of "
                                      "this model (dqn health --slots lists them)", slot);
            out[count].slot = s;
            out[count].at = at;
            out[count].kind = kind;
        }
        count++;
        if (!*end) break;
        p = end + 1;
        if (!*p) return dqn_error_user(DQN_ERR_ARG, "bad value for fault: trailing ','");
    }
    if (n) *n = count;
    return DQN_OK;
}

int dqn_fault_spec_ok(const char *spec) {
    int n;
    return walk(spec, NULL, NULL, &n) == DQN_OK;
}

dqn_status dqn_fault_parse(const char *spec, const dqn_health_table *t, dqn_fault *out, int *n) {
    return walk(spec, t, out, n);
}
