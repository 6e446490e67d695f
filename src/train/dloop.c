/* The trainer's env loop in backend memory (env_loop = device): what act, dqn_vecenv_step and
 * observe do on the host, as backend ops on state that stays in backend memory, so that on a
 * backend with graphs an env step is one graph launch and the updates the schedule owes are the
 * update graph's launches, with no host round trip. On the CPU the same ops run eagerly and,
 * with libm's env math, give the host loop's bits: the same actions, replay rows, updates and
 * parameters. The host reads the state back at the end of each dqn_trainer_run_until. The
 * market env's tables go up once, at create: its slots read them on every step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"
#include "envs/market.h"
#include "train/trainer_internal.h"

/* The env_step kind of the trainer's env, if it is a built-in that the op runs (a host's own
 * env is "external" by then, whatever its name). */
static int env_kind(const dqn_trainer *t, dqn_env_kind *kind) {
    static const struct {
        const char *name;
        dqn_env_kind kind;
    } k[] = {{"cartpole", DQN_ENV_CARTPOLE},
             {"acrobot", DQN_ENV_ACROBOT},
             {"mountaincar", DQN_ENV_MOUNTAINCAR},
             {"market", DQN_ENV_MARKET}};
    if (!t->env.step) return 0;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(t->cfg.env, k[i].name) == 0) {
            *kind = k[i].kind;
            /* the market's slots are dqn_market_state over its context's tables */
            return k[i].kind != DQN_ENV_MARKET ||
                   (t->env.ctx && t->env.state_size == sizeof(dqn_market_state));
        }
    return 0;
}

/* The market's tables into backend memory, and the io's view of them. */
static dqn_status market_upload(dqn_trainer *t) {
    dqn_dloop *d = &t->dl;
    dqn_backend *be = t->be;
    const dqn_market_ctx *x = t->env.ctx;
    d->market = dqn_market_dev_of(x);
    const size_t rows = (size_t)x->data.rows;
    const size_t zb = rows * (size_t)x->cols * sizeof(float);
    const size_t pb = rows * (size_t)x->assets * sizeof(double);
    void *z = NULL, *price = NULL;
    d->market.z = NULL, d->market.price = NULL;
    DQN_TRY(be->ops->alloc(be, &z, zb));
    d->market.z = z;
    DQN_TRY(be->ops->alloc(be, &price, pb));
    d->market.price = price;
    DQN_TRY(be->ops->h2d(be, z, x->z, zb));
    DQN_TRY(be->ops->h2d(be, price, x->data.price, pb));
    d->io.market = &d->market;
    return DQN_OK;
}

static int has_graphs(const dqn_backend *be) { return be->ops->capture_begin != NULL; }

void dqn_dloop_destroy(dqn_trainer *t) {
    dqn_dloop *d = &t->dl;
    dqn_backend *be = t->be;
    if (!d->on || !be) return;
    if (d->graph) be->ops->graph_destroy(be, d->graph, 1);
    dqn_nstep_win_destroy(&d->w, be);
    const dqn_env_io *io = &d->io;
    void *p[] = {io->state, io->counter, io->ep_len, io->ep_return, io->obs, io->final_obs,
                 io->reward, io->terminated, io->truncated, io->done_return, io->done_len,
                 d->rec.recent, d->rec.ctr, d->ctr, d->prev, (void *)d->market.z,
                 (void *)d->market.price};
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
        if (p[k]) be->ops->free(be, p[k]);
    memset(d, 0, sizeof *d);
}

dqn_status dqn_dloop_create(dqn_trainer *t) {
    const dqn_config *c = &t->cfg;
    dqn_dloop *d = &t->dl;
    memset(d, 0, sizeof *d);
    dqn_env_kind kind = DQN_ENV_CARTPOLE;
    const int op_env = env_kind(t, &kind);
    if (strcmp(c->env_loop, "device") == 0 && !op_env)   /* validation refuses it first */
        return dqn_error_user(DQN_ERR_ARG, "env_loop device: env %s steps on the host", c->env);
    /* auto: the device loop where a step is one graph launch; a data-parallel rank keeps the
     * host loop, which the multi-GPU tests cover */
    d->on = op_env && (strcmp(c->env_loop, "device") == 0 ||
                       (strcmp(c->env_loop, "auto") == 0 && has_graphs(t->be) && c->ranks == 1));
    if (!d->on) return DQN_OK;
    dqn_backend *be = t->be;
    const dqn_ops *o = be->ops;
    const size_t n = (size_t)c->num_envs, od = (size_t)t->env.obs_dim;
    dqn_env_io *io = &d->io;
    io->kind = kind;
    /* libm's sin and cos run on the host only; CR is the same dynamics on every backend */
    io->math = has_graphs(be) ? DQN_ENV_MATH_CR : DQN_ENV_MATH_LIBM;
    io->n = c->num_envs;
    io->max_steps = t->env.max_steps;
    io->seed = c->seed;
    io->stream_base = DQN_STREAM_ENV;
    if (kind == DQN_ENV_MARKET) DQN_TRY(market_upload(t));
    DQN_TRY(o->alloc(be, (void **)&io->state, n * t->env.state_size));
    DQN_TRY(o->alloc(be, (void **)&io->counter, n * sizeof(uint64_t)));
    DQN_TRY(o->alloc(be, (void **)&io->ep_len, n * sizeof(int32_t)));
    DQN_TRY(o->alloc(be, (void **)&io->ep_return, n * sizeof(double)));
    DQN_TRY(o->alloc(be, (void **)&io->obs, n * od * sizeof(float)));
    DQN_TRY(o->alloc(be, (void **)&io->final_obs, n * od * sizeof(float)));
    DQN_TRY(o->alloc(be, (void **)&io->reward, n * sizeof(float)));
    DQN_TRY(o->alloc(be, (void **)&io->terminated, n));
    DQN_TRY(o->alloc(be, (void **)&io->truncated, n));
    DQN_TRY(o->alloc(be, (void **)&io->done_return, n * sizeof(double)));
    DQN_TRY(o->alloc(be, (void **)&io->done_len, n * sizeof(int32_t)));
    DQN_TRY(dqn_nstep_win_create(&d->w, be, c->num_envs, c->n_step, t->env.obs_dim,
                                 t->arch.br.D, c->gamma));
    d->rec.cap = DQN_RECENT_EPISODES;
    DQN_TRY(o->alloc(be, (void **)&d->rec.recent, DQN_RECENT_EPISODES * sizeof(double)));
    DQN_TRY(o->alloc(be, (void **)&d->rec.ctr, 3 * sizeof(uint64_t)));
    DQN_TRY(o->alloc(be, (void **)&d->ctr, 2 * sizeof(uint64_t)));
    DQN_TRY(o->alloc(be, (void **)&d->prev, n * od * sizeof(float)));
    dqn_replay_ring_of(&t->replay, &d->ring);
    d->x = (dqn_explore_io){.n = c->num_envs, .seed = c->seed, .eps_start = c->eps_start,
                            .eps_end = c->eps_end, .eps_span = c->eps_fraction * (double)c->steps,
                            .act_steps = d->ctr, .env_steps = (int64_t *)(d->ctr + 1),
                            .tau_step = t->actor.step};
    return DQN_OK;
}

/* The host's state into backend memory. A trainer that has not stepped resets its envs there
 * (its streams from the start), which on the CPU is the host vector's reset bit for bit and on
 * CUDA the CR math's own first observations. */
static dqn_status upload(dqn_trainer *t) {
    dqn_dloop *d = &t->dl;
    dqn_backend *be = t->be;
    const dqn_ops *o = be->ops;
    const dqn_vecenv *v = &t->venv;
    const dqn_nstep *ns = &t->nstep;
    const size_t n = (size_t)v->n, od = (size_t)v->env.obs_dim, D = (size_t)ns->D;
    const size_t rows = n * (size_t)ns->n;
    const int fresh = t->env_steps == 0 && t->act_steps == 0;
    uint64_t *cnt = malloc(n * sizeof *cnt);
    if (!cnt) return DQN_ERR(DQN_ERR_NOMEM, "%zu env counters", n);
    for (size_t i = 0; i < n; i++) cnt[i] = fresh ? 0 : v->rng[i].counter;
    dqn_status s = o->h2d(be, d->io.counter, cnt, n * sizeof *cnt);
    free(cnt);
    DQN_TRY(s);
    if (fresh) {
        DQN_TRY(o->env_step(be, &d->io, NULL));
    } else {
        DQN_TRY(o->h2d(be, d->io.state, v->state, n * v->env.state_size));
        DQN_TRY(o->h2d(be, d->io.ep_len, v->ep_len, n * sizeof(int32_t)));
        DQN_TRY(o->h2d(be, d->io.ep_return, v->ep_return, n * sizeof(double)));
        DQN_TRY(o->h2d(be, d->io.obs, v->obs, n * od * sizeof(float)));
    }
    DQN_TRY(o->h2d(be, d->w.obs, ns->obs, rows * od * sizeof(float)));
    DQN_TRY(o->h2d(be, d->w.act, ns->act, rows * D * sizeof(int32_t)));
    DQN_TRY(o->h2d(be, d->w.rew, ns->rew, rows * sizeof(float)));
    DQN_TRY(o->h2d(be, d->w.head, ns->head, n * sizeof(int32_t)));
    DQN_TRY(o->h2d(be, d->w.count, ns->count, n * sizeof(int32_t)));
    const uint64_t ctr[2] = {t->act_steps, (uint64_t)t->env_steps};
    DQN_TRY(o->h2d(be, d->ctr, ctr, sizeof ctr));
    const uint64_t rc[3] = {(uint64_t)t->episodes, (uint64_t)t->n_recent,
                            (uint64_t)t->recent_pos};
    DQN_TRY(o->h2d(be, d->rec.recent, t->recent, sizeof t->recent));
    DQN_TRY(o->h2d(be, d->rec.ctr, rc, sizeof rc));
    const uint32_t sp[2] = {(uint32_t)t->replay.size, (uint32_t)t->replay.pos};
    DQN_TRY(o->h2d(be, t->replay.size_dev, sp, sizeof sp));
    d->live = 1;
    d->size_ok = 0;
    d->stepped = 0;
    d->live_steps = t->env_steps;
    d->live_size = t->replay.size;
    return DQN_OK;
}

dqn_status dqn_dloop_download(dqn_trainer *t) {
    dqn_dloop *d = &t->dl;
    if (!d->on || !d->live) return DQN_OK;
    dqn_backend *be = t->be;
    const dqn_ops *o = be->ops;
    dqn_vecenv *v = &t->venv;
    dqn_nstep *ns = &t->nstep;
    const dqn_branches *br = &t->arch.br;
    const size_t n = (size_t)v->n, od = (size_t)v->env.obs_dim, D = (size_t)ns->D;
    const size_t rows = n * (size_t)ns->n;
    uint64_t *cnt = malloc(n * sizeof *cnt);
    if (!cnt) return DQN_ERR(DQN_ERR_NOMEM, "%zu env counters", n);
    dqn_status s = o->d2h(be, cnt, d->io.counter, n * sizeof *cnt);
    for (size_t i = 0; s == DQN_OK && i < n; i++) v->rng[i].counter = cnt[i];
    free(cnt);
    DQN_TRY(s);
    DQN_TRY(o->d2h(be, v->state, d->io.state, n * v->env.state_size));
    DQN_TRY(o->d2h(be, v->ep_len, d->io.ep_len, n * sizeof(int32_t)));
    DQN_TRY(o->d2h(be, v->ep_return, d->io.ep_return, n * sizeof(double)));
    DQN_TRY(o->d2h(be, v->obs, d->io.obs, n * od * sizeof(float)));
    for (size_t i = 0; i < n; i++) t->ep_ret[i] = v->ep_return[i];
    DQN_TRY(o->d2h(be, ns->obs, d->w.obs, rows * od * sizeof(float)));
    DQN_TRY(o->d2h(be, ns->act, d->w.act, rows * D * sizeof(int32_t)));
    DQN_TRY(o->d2h(be, ns->rew, d->w.rew, rows * sizeof(float)));
    DQN_TRY(o->d2h(be, ns->head, d->w.head, n * sizeof(int32_t)));
    DQN_TRY(o->d2h(be, ns->count, d->w.count, n * sizeof(int32_t)));
    uint64_t ctr[2], rc[3];
    uint32_t sp[2];
    DQN_TRY(o->d2h(be, ctr, d->ctr, sizeof ctr));
    DQN_TRY(o->d2h(be, t->recent, d->rec.recent, sizeof t->recent));
    DQN_TRY(o->d2h(be, rc, d->rec.ctr, sizeof rc));
    DQN_TRY(o->d2h(be, sp, t->replay.size_dev, sizeof sp));
    if ((int64_t)ctr[1] != t->env_steps)
        return DQN_ERR(DQN_ERR_BACKEND, "device env loop: %lld env steps in backend memory, the "
                       "host counted %lld", (long long)ctr[1], (long long)t->env_steps);
    t->act_steps = ctr[0];
    t->episodes = (int64_t)rc[0];
    t->n_recent = (int)rc[1];
    t->recent_pos = (int)rc[2];
    t->replay.size = (int)sp[0];
    t->replay.pos = (int)sp[1];
    if (d->stepped) {
        /* mean_q here is the last acting step's mean over envs and branches of the greedy Q
         * (the host loop keeps a running average over its greedy steps instead: reading Q back
         * every step is the round trip this loop exists to avoid) */
        float *q = malloc(n * (size_t)br->A * sizeof *q);
        if (!q) return DQN_ERR(DQN_ERR_NOMEM, "%zu Q rows", n);
        s = o->d2h(be, q, t->actor.q, n * (size_t)br->A * sizeof *q);
        double qsum = 0;
        for (size_t e = 0; s == DQN_OK && e < n; e++)
            for (int b = 0; b < br->D; b++) {
                const float *qe = q + e * br->A + br->off[b];
                float best = qe[0];
                for (int a = 1; a < br->n[b]; a++) best = qe[a] > best ? qe[a] : best;
                qsum += best;
            }
        free(q);
        DQN_TRY(s);
        t->mean_q = qsum / (double)(n * (size_t)br->D);
    }
    return DQN_OK;
}

/* One acting step, stream-ordered: the actor's taus from its counter (which explore advances,
 * only when some action was greedy, as the host's skipped forward leaves it), the forward on the
 * current observations, the greedy actions, epsilon-greedy in place, the env step from a copy of
 * the observations it started from, the n-step windows and the ring, the episodes' record. */
static dqn_status record_step(dqn_trainer *t) {
    dqn_dloop *d = &t->dl;
    dqn_backend *be = t->be;
    const dqn_ops *o = be->ops;
    dqn_actor *a = &t->actor;
    const dqn_layout *L = &t->model.L;
    const int n = t->cfg.num_envs;
    const size_t nk = (size_t)n * a->K;
    DQN_TRY(o->rand_uniform(be, a->tau, nk, t->cfg.seed, DQN_STREAM_TAU_ACT, a->step, nk));
    DQN_TRY(dqn_forward(be, L, t->model.params, d->io.obs, a->tau, &a->f, n, a->K, 0,
                        DQN_PHI_LANE, NULL));
    DQN_TRY(o->q_argmax(be, a->f.Z, a->q, a->act, n, a->K, &L->arch.br));
    DQN_TRY(o->explore(be, &d->x, &L->arch.br, a->act, a->act));
    DQN_TRY(o->d2d(be, d->prev, d->io.obs, (size_t)n * t->env.obs_dim * sizeof(float)));
    DQN_TRY(o->env_step(be, &d->io, a->act));
    DQN_TRY(o->replay_push(be, &d->w, &d->ring, d->prev, a->act, d->io.reward, d->io.final_obs,
                           d->io.terminated, d->io.truncated));
    return o->episode_record(be, &d->rec, d->io.terminated, d->io.truncated, d->io.done_return,
                             n);
}

static dqn_status capture_step(dqn_trainer *t) {
    const dqn_ops *o = t->be->ops;
    void *child = NULL;
    DQN_TRY(o->capture_begin(t->be));
    dqn_status s = record_step(t);
    dqn_status e = o->capture_end(t->be, &child);
    DQN_TRY(s);
    DQN_TRY(e);
    s = o->graph_compose(t->be, &child, 1, &t->dl.graph);
    o->graph_destroy(t->be, child, 0);
    return s;
}

/* Whether the replay holds batch_size rows. Each env emits a row a step but for the (at most
 * n_step - 1) entries its window holds, and the size never falls, so the size at going live
 * plus the steps since less those entries bounds it from below; only while that bound falls
 * short is the backend's size read (a sync). */
static dqn_status replay_ready(dqn_trainer *t, int *ready) {
    dqn_dloop *d = &t->dl;
    const dqn_config *c = &t->cfg;
    *ready = d->size_ok;
    if (d->size_ok) return DQN_OK;
    const int64_t bound = (int64_t)d->live_size + (t->env_steps - d->live_steps) -
                          (int64_t)c->num_envs * (c->n_step - 1);
    if (bound >= c->batch_size) {
        *ready = d->size_ok = 1;
        return DQN_OK;
    }
    uint32_t size;
    DQN_TRY(t->be->ops->d2h(t->be, &size, t->replay.size_dev, sizeof size));
    *ready = d->size_ok = (int)size >= c->batch_size;
    return DQN_OK;
}

/* One iteration: the acting step, then the updates the schedule owes. */
static dqn_status iterate(dqn_trainer *t) {
    const dqn_config *c = &t->cfg;
    dqn_dloop *d = &t->dl;
    const dqn_ops *o = t->be->ops;
    if (d->graph) DQN_TRY(o->graph_launch(t->be, d->graph));
    else DQN_TRY(record_step(t));
    d->stepped = 1;
    t->env_steps += c->num_envs;
    if (t->env_steps < c->learning_starts) return DQN_OK;
    int ready;
    DQN_TRY(replay_ready(t, &ready));
    if (!ready) return DQN_OK;
    t->since_update += c->num_envs;
    /* the update's first capture starts on a stream with no acting steps in flight */
    if (has_graphs(t->be) && !t->model.graph_exec && t->since_update >= c->train_freq)
        DQN_TRY(o->sync(t->be));
    while (t->since_update >= c->train_freq) {
        t->since_update -= c->train_freq;
        for (int g = 0; g < c->updates_per_round; g++) DQN_TRY(dqn_trainer_do_update(t));
    }
    return DQN_OK;
}

dqn_status dqn_dloop_run_until(dqn_trainer *t, int64_t target) {
    dqn_dloop *d = &t->dl;
    if (!d->live) DQN_TRY(upload(t));
    dqn_status s = DQN_OK;
    if (has_graphs(t->be) && !d->graph) s = capture_step(t);
    while (s == DQN_OK && t->env_steps < target) s = iterate(t);
    DQN_TRY(s);   /* the backend's state stays the loop's; the next run goes on from it */
    return dqn_dloop_download(t);
}
