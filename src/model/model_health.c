/* The numerical-health wiring of the update (SPEC 4): which buffer each slot of the table
 * (health/slots.c) checks, where in the update, with which guard; the state backup that
 * `dqn health --replay` and the guard's rollback use. Checks are batched into few plans (one op
 * each): in guard mode the clamp points where SPEC 4 puts them, run by the op next to the buffer
 * where there is one of ours (the heads' by l2_norm2, the split's d_concat by relu_bwd_tausum,
 * d_trunk by grn_ln_gate_bwd), else inline (grn0.d_in); d_z in iqn_bwd, which runs its plan (the
 * clamp of the split bottleneck's) as it reads it; phi and z in the embedding's op where the
 * backend computes their scans as it writes them; everything else in the
 * commit, which also runs the optimizer step (its pass saves the state it changes and scans the
 * parameters it writes) and does every check's bookkeeping. So every bound of an update comes
 * from the ISV as it was when the update started, and detect mode adds no node to the update. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"

/* From this many d_z elements (8 MiB) iqn_bwd scans d_z as it reads it, in place of the commit's
 * re-read; below, the scan's double sums lengthen iqn_bwd's per-thread chains more than the
 * commit's scan costs (H200: cartpole B = 256, 0.5M elements, +2 us in both modes; neutral at
 * 2M, -12 us at 8M) */
#define HOSTED_DZ_ELEMS ((size_t)1 << 21)

static dqn_hcheck check_of(const dqn_model *m, int slot, float *x, size_t n) {
    const dqn_health_table *t = &m->h.tab;
    dqn_hcheck c;
    memset(&c, 0, sizeof c);
    c.x = x;
    c.n = n;
    c.slot = slot;
    c.isv_bound = t->slot[slot].bound_isv;
    c.isv_scale = t->i_scale + slot;
    c.isv_stat = -1;
    c.guard = t->slot[slot].guard;
    return c;
}

static void feed(dqn_hcheck *c, int isv, int stat) {
    c->isv_stat = isv;
    c->stat = isv >= 0 ? stat : DQN_HSTAT_NONE;
}

typedef struct {
    dqn_hcheck checks[DQN_HEALTH_MAX_SLOTS];
    dqn_hcopy copies[16];
    int n_checks, n_copies;
} plan_build;

static int faulted(const dqn_model_health *h, int slot) {
    for (int f = 0; f < h->n_faults; f++)
        if (h->faults[f].slot == slot) return 1;
    return 0;
}

static void add_check(plan_build *p, dqn_hcheck c) { p->checks[p->n_checks++] = c; }
static void add_copy(plan_build *p, void *dst, const void *src, size_t bytes, int when) {
    p->copies[p->n_copies++] = (dqn_hcopy){dst, src, bytes, when};
}

static dqn_status make_plan(dqn_model *m, plan_build *p, int commit, int defer, int hosted,
                            const dqn_hadam *adam, void **out) {
    dqn_backend *be = m->be;
    dqn_hplan_desc d;
    memset(&d, 0, sizeof d);
    d.blk = m->h.blk;
    d.step = m->step;
    d.guard_scale = m->ucfg.guard_scale;
    d.guard_floor = m->ucfg.guard_floor;
    d.decay = DQN_ISV_DECAY;
    d.guard_mode = m->h.mode == DQN_HEALTH_GUARD;
    d.checks = p->checks;
    d.n_checks = p->n_checks;
    d.copies = p->copies;
    d.n_copies = p->n_copies;
    d.commit = commit;
    d.n_slots = m->h.tab.n_slots;
    d.rollback_slot = commit ? m->h.tab.params : -1;
    d.defer = defer;
    d.hosted = hosted;
    /* the commit runs after the fused optimizer op has incremented the counter */
    d.step_after = commit;
    d.adam = adam;
    void *deferred[6];
    if (commit) {
        const dqn_model_health *h = &m->h;
        void *const inl[6] = {h->plan_embed, h->plan_heads, h->plan_dcat, h->plan_dz,
                              h->plan_dtrunk, h->plan_dtrunk_out};
        for (int k = 0; k < 6; k++)
            if (inl[k]) deferred[d.n_deferred++] = inl[k];
        d.deferred = deferred;
    }
    return be->ops->health_plan(be, &d, out);
}

/* Byte offsets of the backup / snapshot buffer. */
static void snapshot_layout(dqn_model *m) {
    dqn_model_health *h = &m->h;
    size_t pb = m->L.n_params * sizeof(float), B = (size_t)m->ucfg.B;
    size_t ob = B * (size_t)m->L.arch.obs_dim * sizeof(float);
    size_t o = 0;
    h->off_params = o; o += pb;
    h->off_target = o; o += pb;
    h->off_m = o; o += pb;
    h->off_v = o; o += pb;
    h->off_isv = o; o += sizeof h->blk->isv;
    h->off_x = o; o += ob;
    h->off_xn = o; o += ob;
    h->off_R = o; o += B * sizeof(float);
    h->off_disc = o; o += B * sizeof(float);
    h->off_act = o; o += B * (size_t)m->L.arch.br.D * sizeof(int32_t);
    h->off_w = o; o += m->ucfg.weighted ? B * sizeof(float) : 0;
    h->snap_bytes = o;
}

dqn_status dqn_model_health_reset(dqn_model *m) {
    dqn_backend *be = m->be;
    if (m->h.mode == DQN_HEALTH_OFF) return DQN_OK;
    dqn_health_block *host = calloc(1, sizeof *host);
    if (!host) return DQN_ERR(DQN_ERR_NOMEM, "health block");
    host->event.slot = -1;
    host->event.index = DQN_HEALTH_NO_INDEX;
    for (int s = 0; s < DQN_HEALTH_MAX_SLOTS; s++) {
        host->tot[s].first_event_update = -1;
        host->cur[s].first_index = DQN_HEALTH_NO_INDEX;
    }
    dqn_status s = be->ops->h2d(be, m->h.blk, host, sizeof *host);
    free(host);
    return s;
}

static dqn_status build_plans(dqn_model *m);

dqn_status dqn_model_health_create(dqn_model *m) {
    dqn_backend *be = m->be;
    dqn_model_health *h = &m->h;
    const dqn_update_cfg *c = &m->ucfg;
    h->mode = c->health;
    DQN_TRY(dqn_health_table_build(&h->tab, &m->L, c->B, c->N, c->Nt, m->f_on.split));
    if (c->fault && c->fault[0]) {
        if (h->mode == DQN_HEALTH_OFF)
            return dqn_error_user(DQN_ERR_ARG, "--fault needs --health detect or guard (health "
                                               "is off)");
        DQN_TRY(dqn_fault_parse(c->fault, &h->tab, h->faults, &h->n_faults));
    }
    if (h->mode == DQN_HEALTH_OFF) return DQN_OK;
    DQN_TRY(be->ops->alloc(be, (void **)&h->blk, sizeof *h->blk));
    DQN_TRY(dqn_model_health_reset(m));
    snapshot_layout(m);
    DQN_TRY(be->ops->alloc(be, (void **)&h->backup, h->snap_bytes));
    DQN_TRY(be->ops->alloc(be, (void **)&h->snap, h->snap_bytes));
    return build_plans(m);
}

static void free_plans(dqn_model *m) {
    dqn_model_health *h = &m->h;
    void **plans[] = {&h->plan_commit, &h->plan_embed,  &h->plan_heads,     &h->plan_dcat,
                      &h->plan_dz,     &h->plan_dtrunk, &h->plan_dtrunk_out};
    for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
        if (*plans[k]) m->be->ops->health_plan_free(m->be, *plans[k]);
        *plans[k] = NULL;
    }
}

dqn_status dqn_model_health_replan(dqn_model *m) {
    if (m->h.mode == DQN_HEALTH_OFF) return DQN_OK;
    free_plans(m);
    /* a captured update holds the old plans */
    if (m->graph_exec && m->be->ops->graph_destroy) m->be->ops->graph_destroy(m->be, m->graph_exec, 1);
    m->graph_exec = NULL;
    return build_plans(m);
}

/* The plans of the update (the faults and the optimizer's settings are baked into them). */
static dqn_status build_plans(dqn_model *m) {
    dqn_model_health *h = &m->h;
    const dqn_update_cfg *c = &m->ucfg;
    const dqn_health_table *t = &h->tab;
    const dqn_layout *L = &m->L;
    const dqn_arch *a = &L->arch;
    int guard = h->mode == DQN_HEALTH_GUARD, Lb = a->grn_blocks;
    size_t pb = L->n_params * sizeof(float), B = (size_t)c->B, R = B * (size_t)c->N;
    size_t d = (size_t)a->d, A = (size_t)a->br.A;
    unsigned char *bk = h->backup;
    plan_build *p = calloc(1, sizeof *p);
    if (!p) return DQN_ERR(DQN_ERR_NOMEM, "health plan");
    dqn_status s = DQN_OK;
    dqn_hcheck k;

    /* phi and z: where the embedding's op computes a plan's scans as it writes them, a deferred
     * plan for it (model.c); else the commit reads them back with the rest */
    const int joint = c->K == c->N;
    const dqn_backend *be = m->be;
    const int hosted = be->ops->iqn_embed_hosts &&
                       be->ops->iqn_embed_hosts(m->be, joint ? 2 * c->B : c->B, c->N, a->n_cos, a->d);
    if (hosted) {
        add_check(p, check_of(m, t->phi, m->f_on.phi, R * d));
        add_check(p, check_of(m, t->z, m->f_on.z, R * d));
        s = make_plan(m, p, 0, 1, 0, NULL, &h->plan_embed);
        memset(p, 0, sizeof *p);
    }

    /* the heads' gradients: clamped before the head clip's norms and their GEMMs read them, by
     * the norms' op as it reads them where the clip is on (the clip does not write them, so
     * detect mode checks them with the rest) */
    dqn_hcheck kv = check_of(m, t->d_value, m->bw.dV, R), ka = check_of(m, t->d_adv, m->bw.dAdv, R * A);
    feed(&kv, t->i_rms_dv, DQN_HSTAT_RMS);
    feed(&ka, t->i_rms_da, DQN_HSTAT_RMS);
    h->heads_hosted = guard && c->head_grad_clip > 0;
    if (guard && s == DQN_OK) {
        add_check(p, kv);
        add_check(p, ka);
        s = make_plan(m, p, 0, 1, h->heads_hosted, NULL, &h->plan_heads);
    }

    /* the other clamp points: inline plans in guard mode, else checked with the rest */
    const int split = m->f_on.split, bn = a->bottleneck > 0;
    float *dz = bn ? m->bw.dz : m->bw.du;
    dqn_hcheck kc, kz, kt, ko;
    memset(&kc, 0, sizeof kc);
    memset(&ko, 0, sizeof ko);
    if (bn) {
        kc = split ? check_of(m, t->d_concat, m->bw.dus, B * (size_t)a->bottleneck)
                   : check_of(m, t->d_concat, m->bw.dcat, R * 2 * d);
        feed(&kc, t->i_rms_dcat, DQN_HSTAT_RMS);
    }
    kz = check_of(m, t->d_z, dz, R * d);   /* a clamp point only when split */
    /* iqn_bwd runs d_z's plan as it reads it, where it is the op's input (model.c), when that
     * saves a node (the split's clamp in guard mode) or a re-read worth its cost */
    const int dz_hosted = (!bn || split) && ((guard && split) || R * d >= HOSTED_DZ_ELEMS);
    kt = check_of(m, t->d_trunk, m->bw.dh, B * d);
    feed(&kt, t->i_rms_dtrunk, DQN_HSTAT_RMS);
    if (Lb > 0) {
        ko = check_of(m, t->grn_din[0], m->bw.dh_in[0], B * d);
        feed(&ko, t->i_rms_dtrunk_out, DQN_HSTAT_RMS);
    }
    /* run by the op next to them: the split's d_concat by relu_bwd_tausum, which writes it (so
     * not when a fault must land on it first), d_trunk by the last GRN block's backward, which
     * reads it; grn0.d_in's last writer and reader are GEMMs */
    h->dcat_hosted = guard && split && !faulted(h, t->d_concat);
    h->dtrunk_hosted = guard && Lb > 0;
    if (guard) {
        const struct { int on, hosted; dqn_hcheck *k; void **plan; } inl[] = {
            {bn, h->dcat_hosted, &kc, &h->plan_dcat},
            {1, h->dtrunk_hosted, &kt, &h->plan_dtrunk},
            {Lb > 0, 0, &ko, &h->plan_dtrunk_out},
        };
        for (size_t j = 0; j < sizeof inl / sizeof inl[0] && s == DQN_OK; j++) {
            if (!inl[j].on) continue;
            memset(p, 0, sizeof *p);
            add_check(p, *inl[j].k);
            s = make_plan(m, p, 0, 1, inl[j].hosted, NULL, inl[j].plan);
        }
    }
    if (dz_hosted && s == DQN_OK) {
        memset(p, 0, sizeof *p);
        add_check(p, kz);
        s = make_plan(m, p, 0, 1, 0, NULL, &h->plan_dz);
    }

    /* The commit runs the optimizer step (Adam, the target, the counter), which saves the state
     * it changes to the backup and scans the parameters as it writes them; then the rest of the
     * backup, every slot that is not checked inline (the forward's buffers persist to the end of
     * the update), the bookkeeping of every check and the update's resolution: one op. */
    memset(p, 0, sizeof *p);
    add_check(p, check_of(m, t->params, m->params, L->n_params));
    add_copy(p, bk + h->off_isv, h->blk->isv, sizeof h->blk->isv, DQN_HCOPY_ALWAYS);
    add_copy(p, bk + h->off_x, m->x, B * a->obs_dim * sizeof(float), DQN_HCOPY_ALWAYS);
    add_copy(p, bk + h->off_xn, m->xn, B * a->obs_dim * sizeof(float), DQN_HCOPY_ALWAYS);
    add_copy(p, bk + h->off_R, m->R, B * sizeof(float), DQN_HCOPY_ALWAYS);
    add_copy(p, bk + h->off_disc, m->disc, B * sizeof(float), DQN_HCOPY_ALWAYS);
    add_copy(p, bk + h->off_act, m->act, B * a->br.D * sizeof(int32_t), DQN_HCOPY_ALWAYS);
    if (c->weighted) add_copy(p, bk + h->off_w, m->w, B * sizeof(float), DQN_HCOPY_ALWAYS);
    add_check(p, check_of(m, t->obs, m->x, B * a->obs_dim));
    for (int l = 0; l < Lb; l++) {
        k = check_of(m, t->grn_out[l], m->f_on.h[l + 1], B * d);
        feed(&k, t->i_ln[l], DQN_HSTAT_RMS);
        add_check(p, k);
    }
    if (!hosted) {
        add_check(p, check_of(m, t->phi, m->f_on.phi, R * d));
        add_check(p, check_of(m, t->z, m->f_on.z, R * d));
    }
    if (bn && !split) add_check(p, check_of(m, t->cat, m->f_on.cat, R * 2 * d));
    if (bn) add_check(p, check_of(m, t->bn_out, m->f_on.u, R * (size_t)a->bottleneck));
    add_check(p, check_of(m, t->value, m->f_on.V, R));
    add_check(p, check_of(m, t->adv, m->f_on.Adv, R * A));
    k = check_of(m, t->Z, m->f_on.Z, R * A);
    feed(&k, t->i_q, DQN_HSTAT_MEANABS);
    add_check(p, k);
    k = check_of(m, t->y, m->y, t->slot[t->y].n);
    feed(&k, t->i_target, DQN_HSTAT_MEANABS);
    add_check(p, k);
    k = check_of(m, t->loss, m->loss, 1);
    feed(&k, t->i_loss, DQN_HSTAT_MEANABS);
    add_check(p, k);
    add_check(p, check_of(m, t->dZ, m->bw.dZ, R * A));
    if (!guard) {
        add_check(p, kv);
        add_check(p, ka);
        if (bn) add_check(p, kc);
        add_check(p, kt);
        if (Lb > 0) add_check(p, ko);
    }
    if (!dz_hosted) add_check(p, kz);
    for (int l = 1; l < Lb; l++) add_check(p, check_of(m, t->grn_din[l], m->bw.dh_in[l], B * d));
    for (int j = 0; j < L->n_tensors; j++)
        add_check(p, check_of(m, t->grad[j], m->grads + L->t[j].offset, L->t[j].size));
    k = check_of(m, t->grad_norm, m->gnorm, 1);
    feed(&k, t->i_gnorm, DQN_HSTAT_MEANABS);
    add_check(p, k);
    add_copy(p, h->snap, h->backup, h->snap_bytes, DQN_HCOPY_ON_FREEZE);
    add_copy(p, m->params, bk + h->off_params, pb, DQN_HCOPY_ON_ROLLBACK);
    add_copy(p, m->adam_m, bk + h->off_m, pb, DQN_HCOPY_ON_ROLLBACK);
    add_copy(p, m->adam_v, bk + h->off_v, pb, DQN_HCOPY_ON_ROLLBACK);
    add_copy(p, m->target, bk + h->off_target, pb, DQN_HCOPY_ON_ROLLBACK);

    dqn_hadam ad;
    memset(&ad, 0, sizeof ad);
    ad.p = m->params;
    ad.g = m->grads;
    ad.m = m->adam_m;
    ad.v = m->adam_v;
    ad.target = m->target;
    ad.n = L->n_params;
    ad.lr = c->lr;
    ad.beta1 = c->beta1;
    ad.beta2 = c->beta2;
    ad.eps = c->adam_eps;
    ad.wd = c->weight_decay;
    ad.gnorm = m->gnorm;
    ad.max_norm = c->grad_clip;
    ad.period = c->tau_target > 0 ? 0 : c->target_period;
    ad.tau = c->tau_target;
    ad.step = m->step;
    ad.bk_p = (float *)(bk + h->off_params);
    ad.bk_m = (float *)(bk + h->off_m);
    ad.bk_v = (float *)(bk + h->off_v);
    ad.bk_target = (float *)(bk + h->off_target);
    ad.skip_isv = t->slot[t->grad_norm].bound_isv;
    for (int f = 0; f < h->n_faults && s == DQN_OK; f++) {
        if (h->faults[f].slot != t->params) continue;
        if (ad.n_faults == DQN_HADAM_MAX_FAULTS)
            s = dqn_error_user(DQN_ERR_ARG, "--fault: at most %d faults on the params slot",
                               DQN_HADAM_MAX_FAULTS);
        else {
            ad.fault_at[ad.n_faults] = h->faults[f].at;
            ad.fault_kind[ad.n_faults++] = h->faults[f].kind;
        }
    }
    if (s == DQN_OK) s = make_plan(m, p, 1, 0, 0, &ad, &h->plan_commit);
    free(p);
    return s;
}

void dqn_model_health_destroy(dqn_model *m) {
    dqn_backend *be = m->be;
    dqn_model_health *h = &m->h;
    free_plans(m);
    if (h->blk) be->ops->free(be, h->blk);
    if (h->backup) be->ops->free(be, h->backup);
    if (h->snap) be->ops->free(be, h->snap);
    memset(h, 0, sizeof *h);
}

static int watching(const dqn_model *hp) { return hp && hp->h.mode != DQN_HEALTH_OFF; }

dqn_model *dqn_model_probe(dqn_model *m) { return watching(m) ? m : NULL; }

const dqn_health_table *dqn_probe_table(const dqn_model *hp) { return hp ? &hp->h.tab : NULL; }

dqn_status dqn_probe_slot(dqn_model *hp, int slot, float *buf, size_t n) {
    if (!watching(hp) || slot < 0) return DQN_OK;
    dqn_backend *be = hp->be;
    dqn_model_health *h = &hp->h;
    /* (the parameters' faults are the commit's: it writes them) */
    for (int f = 0; f < h->n_faults; f++)
        if (h->faults[f].slot == slot)
            DQN_TRY(be->ops->health_fault(be, buf, n, hp->step, h->faults[f].at,
                                          h->faults[f].kind));
    const dqn_health_table *t = &h->tab;
    if (h->mode != DQN_HEALTH_GUARD) return DQN_OK;
    /* (the hosted ones run in the ops next to their slots: dqn_probe_plan) */
    if (slot == t->d_adv && !h->heads_hosted) return be->ops->health_check(be, h->plan_heads);
    if (slot == t->d_concat && !h->dcat_hosted) return be->ops->health_check(be, h->plan_dcat);
    if (slot == t->d_trunk && !h->dtrunk_hosted) return be->ops->health_check(be, h->plan_dtrunk);
    if (slot == t->grn_din[0]) return be->ops->health_check(be, h->plan_dtrunk_out);
    return DQN_OK;
}

int dqn_probe_seam(const dqn_model *hp, int slot) {
    return watching(hp) && slot >= 0 && faulted(&hp->h, slot);
}

const void *dqn_probe_plan(const dqn_model *hp, int slot) {
    if (!watching(hp) || slot < 0) return NULL;
    const dqn_model_health *h = &hp->h;
    const dqn_health_table *t = &h->tab;
    int guard = h->mode == DQN_HEALTH_GUARD;
    if (slot == t->phi || slot == t->z) return h->plan_embed;
    if (slot == t->d_z) return h->plan_dz;
    if (slot == t->d_value || slot == t->d_adv) return guard && h->heads_hosted ? h->plan_heads : NULL;
    if (slot == t->d_concat) return guard && h->dcat_hosted ? h->plan_dcat : NULL;
    if (slot == t->d_trunk) return guard && h->dtrunk_hosted ? h->plan_dtrunk : NULL;
    return NULL;
}

dqn_status dqn_model_health_commit(dqn_model *m) {
    return m->h.plan_commit ? m->be->ops->health_check(m->be, m->h.plan_commit) : DQN_OK;
}

dqn_status dqn_model_health_read_snapshot(dqn_model *m, void *host) {
    if (!m->h.snap) return dqn_error_user(DQN_ERR_ARG, "health is off: no snapshot");
    return m->be->ops->d2h(m->be, host, m->h.snap, m->h.snap_bytes);
}

dqn_status dqn_model_health_load_snapshot(dqn_model *m, const void *host, uint64_t update) {
    dqn_backend *be = m->be;
    const dqn_model_health *h = &m->h;
    if (!h->blk) return dqn_error_user(DQN_ERR_ARG, "health is off: no snapshot to load");
    const unsigned char *p = host;
    size_t pb = m->L.n_params * sizeof(float), B = (size_t)m->ucfg.B;
    size_t ob = B * (size_t)m->L.arch.obs_dim * sizeof(float);
    DQN_TRY(be->ops->h2d(be, m->params, p + h->off_params, pb));
    DQN_TRY(be->ops->h2d(be, m->target, p + h->off_target, pb));
    DQN_TRY(be->ops->h2d(be, m->adam_m, p + h->off_m, pb));
    DQN_TRY(be->ops->h2d(be, m->adam_v, p + h->off_v, pb));
    DQN_TRY(be->ops->h2d(be, h->blk->isv, p + h->off_isv, sizeof h->blk->isv));
    DQN_TRY(be->ops->h2d(be, m->x, p + h->off_x, ob));
    DQN_TRY(be->ops->h2d(be, m->xn, p + h->off_xn, ob));
    DQN_TRY(be->ops->h2d(be, m->R, p + h->off_R, B * sizeof(float)));
    DQN_TRY(be->ops->h2d(be, m->disc, p + h->off_disc, B * sizeof(float)));
    DQN_TRY(be->ops->h2d(be, m->act, p + h->off_act, B * (size_t)m->L.arch.br.D * sizeof(int32_t)));
    if (m->ucfg.weighted) DQN_TRY(be->ops->h2d(be, m->w, p + h->off_w, B * sizeof(float)));
    return be->ops->h2d(be, m->step, &update, sizeof update);
}
