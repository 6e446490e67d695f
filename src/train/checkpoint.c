/* Trainer checkpoints and the inference-only policy. A checkpoint is a set of named sections in
 * the container of core/ckpt_file.h (versioned header, CRC32, written to .tmp then renamed). */
#define _GNU_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ckpt_file.h"
#include "core/config.h"
#include "core/error.h"
#include "train/trainer_internal.h"

typedef struct {
    int64_t env_steps, updates, episodes, since_update, skipped;
    uint64_t act_steps, model_step, actor_step;
    int32_t n_recent, recent_pos, n_envs, replay_pos, replay_size, pad;
    double last_loss, mean_q, grad_norm;
    double recent[DQN_RECENT_EPISODES];
} ckpt_counters;

/* The periodic evaluations' best (a section of its own: checkpoints without it load as none). */
typedef struct {
    double best;
    int64_t best_step;
} ckpt_eval;


/* Env vector state: obs, ep_len, ep_return, draws, private state. */
static size_t venv_bytes(const dqn_vecenv *v) {
    size_t n = (size_t)v->n;
    return n * v->env.obs_dim * sizeof(float) + n * sizeof(int32_t) + n * sizeof(double) +
           n * sizeof(uint64_t) + n * v->env.state_size;
}

static void venv_save(const dqn_vecenv *v, char *p) {
    size_t n = (size_t)v->n;
    if (n == 0) return;   /* a host-driven trainer has no vector */
    memcpy(p, v->obs, n * v->env.obs_dim * sizeof(float)); p += n * v->env.obs_dim * sizeof(float);
    memcpy(p, v->ep_len, n * sizeof(int32_t)); p += n * sizeof(int32_t);
    memcpy(p, v->ep_return, n * sizeof(double)); p += n * sizeof(double);
    for (size_t i = 0; i < n; i++, p += sizeof(uint64_t)) memcpy(p, &v->rng[i].counter, 8);
    memcpy(p, v->state, n * v->env.state_size);
}

static void venv_load(dqn_vecenv *v, const char *p) {
    size_t n = (size_t)v->n;
    if (n == 0) return;
    memcpy(v->obs, p, n * v->env.obs_dim * sizeof(float)); p += n * v->env.obs_dim * sizeof(float);
    memcpy(v->ep_len, p, n * sizeof(int32_t)); p += n * sizeof(int32_t);
    memcpy(v->ep_return, p, n * sizeof(double)); p += n * sizeof(double);
    for (size_t i = 0; i < n; i++, p += sizeof(uint64_t)) memcpy(&v->rng[i].counter, p, 8);
    memcpy(v->state, p, n * v->env.state_size);
}

dqn_status dqn_trainer_save(const dqn_trainer *t, const char *path) {
    dqn_backend *be = t->be;
    const dqn_ops *o = be->ops;
    size_t np = t->model.L.n_params, pb = np * sizeof(float);
    ckpt_counters k;
    memset(&k, 0, sizeof k);
    k.env_steps = t->env_steps; k.updates = t->updates; k.episodes = t->episodes;
    k.since_update = t->since_update; k.skipped = t->skipped; k.act_steps = t->act_steps;
    k.n_recent = t->n_recent; k.recent_pos = t->recent_pos; k.n_envs = t->cfg.num_envs;
    k.replay_pos = t->replay.pos; k.replay_size = t->replay.size;
    k.last_loss = t->last_loss; k.mean_q = t->mean_q; k.grad_norm = t->grad_norm;
    memcpy(k.recent, t->recent, sizeof k.recent);
    char *cfg = NULL, *params = NULL, *venv = NULL, *nstep = NULL, *replay = NULL;
    size_t cfg_len = 0;
    dqn_ckpt_writer *w = NULL;
    dqn_status s = dqn_config_to_text(&t->cfg, &cfg, &cfg_len);
    if (s == DQN_OK) s = o->d2h(be, &k.model_step, t->model.step, sizeof k.model_step);
    if (s == DQN_OK) s = o->d2h(be, &k.actor_step, t->actor.step, sizeof k.actor_step);
    if (s == DQN_OK && !(params = malloc(4 * pb))) s = DQN_ERR(DQN_ERR_NOMEM, "checkpoint");
    if (s == DQN_OK) s = o->d2h(be, params, t->model.params, pb);
    if (s == DQN_OK) s = o->d2h(be, params + pb, t->model.target, pb);
    if (s == DQN_OK) s = o->d2h(be, params + 2 * pb, t->model.adam_m, pb);
    if (s == DQN_OK) s = o->d2h(be, params + 3 * pb, t->model.adam_v, pb);
    size_t vb = venv_bytes(&t->venv), nb = dqn_nstep_state_bytes(&t->nstep);
    if (s == DQN_OK && (!(venv = malloc(vb + 1)) || !(nstep = malloc(nb))))
        s = DQN_ERR(DQN_ERR_NOMEM, "checkpoint");
    if (s == DQN_OK) {
        venv_save(&t->venv, venv);
        dqn_nstep_state_save(&t->nstep, nstep);
    }
    dqn_health_block *hb = NULL;   /* the ISV, counters and first event (SPEC 4) */
    if (s == DQN_OK && t->model.h.blk) {
        if (!(hb = malloc(sizeof *hb))) s = DQN_ERR(DQN_ERR_NOMEM, "checkpoint");
        else s = o->d2h(be, hb, t->model.h.blk, sizeof *hb);
    }
    size_t rb = t->cfg.save_replay ? dqn_replay_bytes(&t->replay) : 0;
    if (s == DQN_OK && rb) {
        if (!(replay = malloc(rb))) s = DQN_ERR(DQN_ERR_NOMEM, "replay copy (%zu bytes)", rb);
        else s = dqn_replay_export(&t->replay, replay);
    }
    if (s == DQN_OK) s = dqn_ckpt_writer_create(&w);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "config", cfg, cfg_len);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "counters", &k, sizeof k);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "params", params, pb);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "target", params + pb, pb);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "adam_m", params + 2 * pb, pb);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "adam_v", params + 3 * pb, pb);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "envs", venv, vb);
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "nstep", nstep, nb);
    if (s == DQN_OK && rb) s = dqn_ckpt_writer_add(w, "replay", replay, rb);
    if (s == DQN_OK && hb) s = dqn_ckpt_writer_add(w, "health", hb, sizeof *hb);
    ckpt_eval ev;
    memset(&ev, 0, sizeof ev);
    ev.best = t->eval_best;
    ev.best_step = t->eval_best_step;
    if (s == DQN_OK) s = dqn_ckpt_writer_add(w, "eval", &ev, sizeof ev);
    if (s == DQN_OK) s = dqn_ckpt_writer_write(w, path);
    dqn_ckpt_writer_destroy(w);
    free(cfg); free(params); free(venv); free(nstep); free(replay); free(hb);
    return s;
}

/* A section that must have exactly `size` bytes. */
static dqn_status section(dqn_ckpt_reader *r, const char *path, const char *name, size_t size,
                          const void **p) {
    uint64_t got;
    DQN_TRY(dqn_ckpt_reader_find(r, name, p, &got));
    if (got != size)
        return dqn_error_user(DQN_ERR_FORMAT, "%s: section \"%s\" has %llu bytes, expected %zu",
                              path, name, (unsigned long long)got, size);
    return DQN_OK;
}

static dqn_status read_config(dqn_ckpt_reader *r, const char *path, dqn_config *c) {
    const void *p;
    uint64_t len;
    DQN_TRY(dqn_ckpt_reader_find(r, "config", &p, &len));
    return dqn_config_from_text(p, (size_t)len, path, c);
}

static void sizes_text(const dqn_env *e, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int b = 0; b < e->n_branches && k < cap; b++)
        k += (size_t)snprintf(buf + k, cap - k, b ? ",%d" : "%d", e->branch_sizes[b]);
}

/* The config a checkpoint's state loads into with its env swapped for env (NULL: the host's):
 * env = external with the checkpoint's shape, which env must have. */
static dqn_status swapped_config(const char *path, const dqn_config *c, const dqn_env *env,
                                 dqn_config *out) {
    dqn_env shape;
    DQN_TRY(dqn_env_open(c, &shape));
    dqn_env mine = env ? *env : shape;
    int same = mine.obs_dim == shape.obs_dim && mine.n_branches == shape.n_branches;
    for (int b = 0; same && b < shape.n_branches; b++)
        same = mine.branch_sizes[b] == shape.branch_sizes[b];
    char want[DQN_CFG_STR * 2], got[DQN_CFG_STR * 2];
    sizes_text(&shape, want, sizeof want);
    sizes_text(&mine, got, sizeof got);
    dqn_status s = same ? dqn_config_for_env(c, &mine, out)
                        : dqn_error_user(DQN_ERR_ARG, "%s: the model is for obs_dim %d and "
                                         "branches %s; env %s has obs_dim %d and branches %s",
                                         path, shape.obs_dim, want, mine.name ? mine.name : "",
                                         mine.obs_dim, got);
    /* the host's env steps on the host: the device loop steps built-in envs only */
    if (s == DQN_OK) snprintf(out->env_loop, sizeof out->env_loop, "host");
    if (s == DQN_OK && !env)   /* keep the name of the env it was trained on */
        snprintf(out->env_id, sizeof out->env_id, "%s", c->env_id[0] ? c->env_id : c->env);
    dqn_env_close(&shape);
    return s;
}

/* Load path on device; with swap, its env replaced by env (NULL: the host's; owned from here). */
static dqn_status load(const char *path, const char *device, int swap, const dqn_env *env,
                       dqn_trainer **out) {
    *out = NULL;
    dqn_env owned;
    memset(&owned, 0, sizeof owned);
    if (env) owned = *env;
    dqn_ckpt_reader *r = NULL;
    dqn_status s = dqn_ckpt_reader_open(path, &r);
    if (s != DQN_OK) {
        dqn_env_close(&owned);
        return s;
    }
    dqn_config c;
    dqn_trainer *t = NULL;
    s = read_config(r, path, &c);
    if (s == DQN_OK && device && *device) snprintf(c.device, sizeof c.device, "%s", device);
    /* a data-parallel run's checkpoint is rank 0's state: it loads as one process (on any
     * device) and keeps its ranks key, which dqn train --resume refuses */
    dqn_config one = c;
    one.ranks = 1;
    if (s == DQN_OK && swap) s = swapped_config(path, &c, env, &one);
    one.ranks = 1;
    if (s == DQN_OK) {
        s = dqn_trainer_make(&one, NULL, env ? &owned : NULL, &t);
        memset(&owned, 0, sizeof owned);   /* the trainer's now, or closed by it */
        if (s == DQN_OK) t->cfg.ranks = c.ranks;
    }
    dqn_env_close(&owned);
    const void *p;
    ckpt_counters k;
    if (s == DQN_OK && (s = dqn_ckpt_reader_copy(r, "counters", &k, sizeof k)) == DQN_OK) {
        if (!swap && k.n_envs != c.num_envs)
            s = dqn_error_user(DQN_ERR_FORMAT, "%s: counters for %d envs, config has %d", path,
                               k.n_envs, c.num_envs);
    }
    dqn_backend *be = t ? t->be : NULL;
    size_t pb = t ? t->model.L.n_params * sizeof(float) : 0;
    static const char *names[4] = {"params", "target", "adam_m", "adam_v"};
    for (int i = 0; i < 4 && s == DQN_OK; i++) {
        float *dst[4] = {t->model.params, t->model.target, t->model.adam_m, t->model.adam_v};
        if ((s = section(r, path, names[i], pb, &p)) == DQN_OK) s = be->ops->h2d(be, dst[i], p, pb);
    }
    /* a swapped env starts fresh episodes: its vector and n-step windows are not the saved ones */
    if (s == DQN_OK && !swap &&
        (s = section(r, path, "envs", venv_bytes(&t->venv), &p)) == DQN_OK) {
        venv_load(&t->venv, p);
        for (int e = 0; e < t->venv.n; e++) t->ep_ret[e] = t->venv.ep_return[e];
    }
    if (s == DQN_OK && !swap &&
        (s = section(r, path, "nstep", dqn_nstep_state_bytes(&t->nstep), &p)) == DQN_OK)
        dqn_nstep_state_load(&t->nstep, p);
    if (s == DQN_OK && dqn_ckpt_reader_has(r, "replay")) {
        if ((s = section(r, path, "replay", dqn_replay_bytes(&t->replay), &p)) == DQN_OK)
            s = dqn_replay_import(&t->replay, p, k.replay_pos, k.replay_size);
    }
    if (s == DQN_OK && t->model.h.blk && dqn_ckpt_reader_has(r, "health")) {
        if ((s = section(r, path, "health", sizeof(dqn_health_block), &p)) == DQN_OK)
            s = be->ops->h2d(be, t->model.h.blk, p, sizeof(dqn_health_block));
        int32_t frozen = 0;
        if (s == DQN_OK) memcpy(&frozen, (const char *)p + offsetof(dqn_health_block, frozen), 4);
        t->health.snap_lost = frozen != 0;
    }
    if (s == DQN_OK && dqn_ckpt_reader_has(r, "eval")) {
        ckpt_eval ev;
        if ((s = section(r, path, "eval", sizeof ev, &p)) == DQN_OK) {
            memcpy(&ev, p, sizeof ev);
            t->eval_best = ev.best;
            t->eval_best_step = ev.best_step;
        }
    }
    if (s == DQN_OK) s = be->ops->h2d(be, t->model.step, &k.model_step, sizeof k.model_step);
    if (s == DQN_OK) s = be->ops->h2d(be, t->actor.step, &k.actor_step, sizeof k.actor_step);
    /* the backend holds the last update's loss and norm until the next one: a resume with no
     * update before its next save must report them, as the uninterrupted run does */
    float last[2] = {(float)k.last_loss, (float)k.grad_norm};
    if (s == DQN_OK && k.updates > 0) s = be->ops->h2d(be, t->model.loss, &last[0], sizeof(float));
    if (s == DQN_OK && k.updates > 0) s = be->ops->h2d(be, t->model.gnorm, &last[1], sizeof(float));
    if (s == DQN_OK) {
        t->env_steps = k.env_steps; t->updates = k.updates; t->episodes = k.episodes;
        t->since_update = k.since_update; t->skipped = k.skipped; t->act_steps = k.act_steps;
        t->n_recent = k.n_recent; t->recent_pos = k.recent_pos;
        t->last_loss = k.last_loss; t->mean_q = k.mean_q; t->grad_norm = k.grad_norm;
        memcpy(t->recent, k.recent, sizeof k.recent);
        *out = t;
    } else {
        dqn_trainer_destroy(t);
    }
    dqn_ckpt_reader_destroy(r);
    return s;
}

dqn_status dqn_trainer_load(const char *path, const char *device, dqn_trainer **out) {
    return load(path, device, 0, NULL, out);
}

dqn_status dqn_trainer_load_env(const char *path, const char *device, const dqn_env_api *env,
                                dqn_trainer **out) {
    return load(path, device, 1, env, out);
}

/* ---------------------------------------------------------------- policy */

struct dqn_policy {
    dqn_config cfg;
    dqn_backend *be;
    dqn_layout L;
    float *params;
    dqn_actor actor;
};

void dqn_policy_destroy(dqn_policy *p) {
    if (!p) return;
    if (p->be) {
        dqn_actor_destroy(&p->actor, p->be);
        if (p->params) p->be->ops->free(p->be, p->params);
        p->be->ops->destroy(p->be);
    }
    free(p);
}

dqn_status dqn_policy_load(const char *path, dqn_policy **out) {
    *out = NULL;
    dqn_ckpt_reader *r = NULL;
    DQN_TRY(dqn_ckpt_reader_open(path, &r));
    dqn_policy *p = calloc(1, sizeof *p);
    dqn_status s = p ? read_config(r, path, &p->cfg) : DQN_ERR(DQN_ERR_NOMEM, "policy");
    dqn_env env;
    dqn_arch a;
    if (s == DQN_OK && (s = dqn_env_open(&p->cfg, &env)) == DQN_OK) {
        s = dqn_arch_from_config(&p->cfg, &env, &a);
        dqn_env_close(&env);
    }
    if (s == DQN_OK) s = dqn_layout_build(&p->L, &a);
    if (s == DQN_OK) s = dqn_backend_cpu_create(&p->be);
    size_t pb = s == DQN_OK ? p->L.n_params * sizeof(float) : 0;
    const void *src;
    if (s == DQN_OK) s = section(r, path, "params", pb, &src);
    if (s == DQN_OK) s = p->be->ops->alloc(p->be, (void **)&p->params, pb);
    if (s == DQN_OK) s = p->be->ops->h2d(p->be, p->params, src, pb);
    dqn_ckpt_reader_destroy(r);
    if (s != DQN_OK) {
        dqn_policy_destroy(p);
        return s;
    }
    *out = p;
    return DQN_OK;
}

int dqn_policy_obs_dim(const dqn_policy *p) { return p->L.arch.obs_dim; }

int dqn_policy_branches(const dqn_policy *p, int *sizes) {
    if (sizes)
        for (int b = 0; b < p->L.arch.br.D; b++) sizes[b] = p->L.arch.br.n[b];
    return p->L.arch.br.D;
}

dqn_status dqn_policy_act(dqn_policy *p, const float *obs, int n, int32_t *actions) {
    if (n < 1) return DQN_ERR(DQN_ERR_ARG, "%d observations", n);
    if (n > p->actor.n) {
        dqn_actor_destroy(&p->actor, p->be);
        DQN_TRY(dqn_actor_create(&p->actor, p->be, &p->L, n, p->cfg.k_tau));
    }
    return dqn_actor_greedy(&p->actor, p->be, &p->L, p->params, obs, n, p->cfg.seed, 1, actions,
                            NULL);
}
