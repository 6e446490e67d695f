/* The numerical-health subsystem's public side: the slot table of a config, the trainer's
 * asynchronous read of the device block, the first event's file and its replay. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckpt_file.h"
#include "core/config.h"
#include "core/error.h"
#include "train/trainer_internal.h"

void dqn_health_layout_fill(dqn_health_layout *h, const dqn_health_table *tab) {
    memset(h, 0, sizeof *h);
    h->tab = *tab;
    for (int s = 0; s < h->tab.n_slots; s++) {
        const dqn_slot *sl = &h->tab.slot[s];
        dqn_health_slot_info *i = &h->info[s];
        i->name = sl->name;
        i->stage = sl->stage;
        i->buffer = sl->buffer;
        i->elements = sl->n;
        i->guarded = sl->guard;
        i->bound_from = h->tab.isv[sl->bound_isv];
    }
    for (int k = 0; k < h->tab.n_isv; k++) h->isv[k] = h->tab.isv[k];
}

static dqn_health_event event_of(const dqn_health_layout *h, const dqn_hevent *e) {
    dqn_health_event ev;
    memset(&ev, 0, sizeof ev);
    ev.slot = e->slot >= 0 && e->slot < h->tab.n_slots ? e->slot : -1;
    if (ev.slot < 0) return ev;
    ev.slot_name = h->tab.slot[ev.slot].name;
    ev.stage = h->tab.slot[ev.slot].stage;
    ev.kind = dqn_event_kind_name(e->kind);
    ev.update = e->update;
    ev.value = e->value;
    ev.bound = e->bound;
    ev.count = e->count;
    ev.index = e->index;
    return ev;
}

void dqn_health_report_fill(const dqn_health_layout *h, const dqn_health_block *blk,
                            dqn_health_slot_stats *stats, float *isv, int64_t env_steps,
                            dqn_health_report *out) {
    memset(out, 0, sizeof *out);
    for (int s = 0; s < h->tab.n_slots; s++) {
        const dqn_hslot_cur *c = &blk->cur[s];
        const dqn_hslot_tot *t = &blk->tot[s];
        dqn_health_slot_stats *o = &stats[s];
        o->nonfinite = c->nonfinite;
        o->nan = c->nan;
        o->guarded = c->guarded;
        o->event = c->event ? dqn_event_kind_name(c->event) : NULL;
        o->max_abs = c->maxabs;
        o->rms = c->rms;
        o->mean_abs = c->meanabs;
        o->bound = c->bound;
        o->nonfinite_total = t->nonfinite;
        o->guarded_total = t->guarded;
        o->events_total = t->events;
        o->first_event_update = t->events ? t->first_event_update : -1;
        o->max_abs_total = t->maxabs;
    }
    memcpy(isv, blk->isv, (size_t)h->tab.n_isv * sizeof *isv);
    out->env_steps = env_steps;
    out->updates = blk->updates;
    out->skipped = blk->skipped;
    out->rolled_back = blk->rolled_back;
    out->guarded_updates = blk->guarded_updates;
    out->n_slots = h->tab.n_slots;
    out->n_isv = h->tab.n_isv;
    out->slots = stats;
    out->isv = isv;
    out->event = event_of(h, &blk->event);
}

/* ---- the slot table of a config ---- */

dqn_status dqn_health_layout_create(const dqn_config *c, dqn_health_layout **out) {
    *out = NULL;
    DQN_TRY(dqn_config_validate(c));
    dqn_env env;
    DQN_TRY(dqn_env_open(c, &env));
    dqn_arch a;
    dqn_status s = dqn_arch_from_config(c, &env, &a);
    dqn_env_close(&env);
    DQN_TRY(s);
    dqn_layout L;
    DQN_TRY(dqn_layout_build(&L, &a));
    dqn_health_table tab;
    int split = dqn_online_pass_split(c->bottleneck, c->batch_size, c->n_tau, c->k_tau, 0);
    DQN_TRY(dqn_health_table_build(&tab, &L, c->batch_size, c->n_tau, c->n_tau_target, split));
    dqn_health_layout *h = malloc(sizeof *h);
    if (!h) return DQN_ERR(DQN_ERR_NOMEM, "health layout");
    dqn_health_layout_fill(h, &tab);
    *out = h;
    return DQN_OK;
}

void dqn_health_layout_destroy(dqn_health_layout *h) { free(h); }

int dqn_health_layout_slots(const dqn_health_layout *h, const dqn_health_slot_info **slots) {
    if (slots) *slots = h->info;
    return h->tab.n_slots;
}

int dqn_health_layout_isv(const dqn_health_layout *h, const char *const **names) {
    if (names) *names = h->isv;
    return h->tab.n_isv;
}

const dqn_health_layout *dqn_trainer_health_layout(const dqn_trainer *t) {
    return t->model.h.mode != DQN_HEALTH_OFF ? &t->health.layout : NULL;
}

/* ---- the trainer's read of the block ---- */

dqn_status dqn_trainer_health_init(dqn_trainer *t) {
    dqn_trainer_health *h = &t->health;
    memset(h, 0, sizeof *h);
    if (t->model.h.mode == DQN_HEALTH_OFF) return DQN_OK;
    dqn_backend *be = t->be;
    dqn_health_layout_fill(&h->layout, &t->model.h.tab);
    DQN_TRY(be->ops->fence_create(be, &h->fence));
    for (int k = 0; k < 2; k++)
        DQN_TRY(be->ops->host_alloc(be, (void **)&h->pin[k], sizeof(dqn_health_block)));
    return DQN_OK;
}

void dqn_trainer_health_free(dqn_trainer *t) {
    dqn_trainer_health *h = &t->health;
    dqn_backend *be = t->be;
    if (!be) return;
    if (h->pending) be->ops->fence_wait(be, h->fence);
    if (h->fence) be->ops->fence_destroy(be, h->fence);
    for (int k = 0; k < 2; k++)
        if (h->pin[k]) be->ops->host_free(be, h->pin[k]);
    memset(h, 0, sizeof *h);
}

static dqn_status start_copy(dqn_trainer *t) {
    dqn_trainer_health *h = &t->health;
    dqn_backend *be = t->be;
    DQN_TRY(be->ops->d2h_async(be, h->pin[h->next], t->model.h.blk, sizeof(dqn_health_block)));
    DQN_TRY(be->ops->fence_record(be, h->fence));
    h->pin_steps[h->next] = t->env_steps;
    h->next ^= 1;
    h->pending = 1;
    return DQN_OK;
}

dqn_status dqn_trainer_health_poll(dqn_trainer *t, int sync, dqn_health_report *out) {
    dqn_trainer_health *h = &t->health;
    if (t->model.h.mode == DQN_HEALTH_OFF)
        return dqn_error_user(DQN_ERR_UNSUPPORTED, "health is off: no health report");
    dqn_backend *be = t->be;
    if (sync || !h->pending) {
        if (h->pending) DQN_TRY(be->ops->fence_wait(be, h->fence));
        DQN_TRY(start_copy(t));
    }
    /* the copy in flight was issued at the previous call (or just now): it is done or nearly */
    DQN_TRY(be->ops->fence_wait(be, h->fence));
    h->pending = 0;
    int ready = h->next ^ 1;
    dqn_health_report_fill(&h->layout, h->pin[ready], h->stats, h->isv, h->pin_steps[ready], out);
    t->skipped = (int64_t)out->skipped;
    if (!sync) DQN_TRY(start_copy(t));
    return DQN_OK;
}

/* ---- the first event's file ---- */

dqn_status dqn_trainer_health_save_event(dqn_trainer *t, const char *path) {
    dqn_model *m = &t->model;
    dqn_backend *be = t->be;
    if (m->h.mode == DQN_HEALTH_OFF)
        return dqn_error_user(DQN_ERR_ARG, "health is off: there is no event to save");
    dqn_hevent ev;
    DQN_TRY(be->ops->d2h(be, &ev, (const char *)m->h.blk + offsetof(dqn_health_block, event),
                         sizeof ev));
    if (ev.slot < 0) return dqn_error_user(DQN_ERR_ARG, "no health event has happened yet");
    if (t->health.snap_lost)
        return dqn_error_user(DQN_ERR_ARG, "the event at update %lld happened before this run "
                              "was resumed; its snapshot was not kept", (long long)ev.update);
    unsigned char *snap = malloc(m->h.snap_bytes);
    char *cfg = NULL;
    size_t cfg_len = 0;
    uint64_t n_params = m->L.n_params;
    dqn_ckpt_writer *w = NULL;
    dqn_status s = snap ? DQN_OK : DQN_ERR(DQN_ERR_NOMEM, "event snapshot");
    if (s == DQN_OK) s = dqn_model_health_read_snapshot(m, snap);
    if (s == DQN_OK) s = dqn_config_to_text(&t->cfg, &cfg, &cfg_len);
    if (s == DQN_OK) s = dqn_ckpt_writer_create(&w);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "config", cfg, cfg_len);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "event", &ev, sizeof ev);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "n_params", &n_params, sizeof n_params);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "snapshot", snap, m->h.snap_bytes);
    if (s == DQN_OK) s = dqn_ckpt_writer_write(w, path);
    dqn_ckpt_writer_destroy(w);
    free(snap);
    free(cfg);
    return s;
}

/* ---- the replay ---- */

struct dqn_health_replay {
    dqn_config cfg;
    dqn_backend *be;
    dqn_model model;
    dqn_health_layout layout;
    dqn_health_block blk;
    dqn_health_slot_stats stats[DQN_HEALTH_MAX_SLOTS];
    float isv[DQN_HEALTH_MAX_ISV];
    dqn_health_report report;
    dqn_health_event saved;
};

static dqn_status replay_load(dqn_health_replay *r, dqn_ckpt_reader *rd, const char *path,
                              const char *device) {
    const void *p;
    uint64_t len;
    DQN_TRY(dqn_ckpt_reader_find(rd, "config", &p, &len));
    dqn_status s = dqn_config_from_text(p, (size_t)len, path, &r->cfg);
    DQN_TRY(s);
    if (device && *device) DQN_TRY(dqn_config_set(&r->cfg, "device", device));
    if (strcmp(r->cfg.health, "off") == 0) DQN_TRY(dqn_config_set(&r->cfg, "health", "detect"));
    dqn_hevent ev;
    DQN_TRY(dqn_ckpt_reader_copy(rd, "event", &ev, sizeof ev));
    dqn_env env;
    DQN_TRY(dqn_env_open(&r->cfg, &env));
    dqn_arch a;
    s = dqn_arch_from_config(&r->cfg, &env, &a);
    dqn_env_close(&env);
    DQN_TRY(s);
    DQN_TRY(dqn_backend_open(r->cfg.device, r->cfg.math, r->cfg.threads, &r->be));
    dqn_update_cfg uc;
    dqn_update_cfg_of(&r->cfg, &uc);
    DQN_TRY(dqn_model_create(&r->model, r->be, &a, &uc));
    dqn_model *m = &r->model;
    dqn_health_layout_fill(&r->layout, &m->h.tab);
    r->saved = event_of(&r->layout, &ev);
    uint64_t n_params;
    DQN_TRY(dqn_ckpt_reader_copy(rd, "n_params", &n_params, sizeof n_params));
    if (n_params != m->L.n_params || r->saved.slot < 0)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: the event (slot %d) or its %llu parameters do "
                              "not fit the config's model (%zu parameters)", path, ev.slot,
                              (unsigned long long)n_params, m->L.n_params);
    unsigned char *snap = malloc(m->h.snap_bytes);
    if (!snap) return DQN_ERR(DQN_ERR_NOMEM, "event snapshot");
    s = dqn_ckpt_reader_copy(rd, "snapshot", snap, m->h.snap_bytes);
    if (s == DQN_OK) s = dqn_model_health_load_snapshot(m, snap, (uint64_t)ev.update);
    free(snap);
    return s;
}

dqn_status dqn_health_replay_run(const char *path, const char *device, dqn_health_replay **out) {
    *out = NULL;
    dqn_health_replay *r = calloc(1, sizeof *r);
    if (!r) return DQN_ERR(DQN_ERR_NOMEM, "replay");
    dqn_ckpt_reader *rd = NULL;
    dqn_status s = dqn_ckpt_reader_open(path, &rd);
    if (s == DQN_OK) s = replay_load(r, rd, path, device);
    dqn_ckpt_reader_destroy(rd);
    if (s == DQN_OK) s = dqn_model_update_loaded(&r->model);
    if (s == DQN_OK) s = r->be->ops->d2h(r->be, &r->blk, r->model.h.blk, sizeof r->blk);
    if (s != DQN_OK) {
        dqn_health_replay_destroy(r);
        return s;
    }
    dqn_health_report_fill(&r->layout, &r->blk, r->stats, r->isv, 0, &r->report);
    *out = r;
    return DQN_OK;
}

const dqn_health_report *dqn_health_replay_report(const dqn_health_replay *r) { return &r->report; }
const dqn_health_event *dqn_health_replay_saved(const dqn_health_replay *r) { return &r->saved; }
const dqn_health_layout *dqn_health_replay_layout(const dqn_health_replay *r) { return &r->layout; }
const dqn_config *dqn_health_replay_config(const dqn_health_replay *r) { return &r->cfg; }

void dqn_health_replay_destroy(dqn_health_replay *r) {
    if (!r) return;
    if (r->be) {
        dqn_model_destroy(&r->model);
        r->be->ops->destroy(r->be);
    }
    free(r);
}
