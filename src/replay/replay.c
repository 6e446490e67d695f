#include "replay/replay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "replay/sumtree.h"

dqn_status dqn_replay_create(dqn_replay *r, dqn_backend *be, int cap, int obs_dim, int D) {
    memset(r, 0, sizeof *r);
    if (cap < 1) return DQN_ERR(DQN_ERR_ARG, "replay capacity %d < 1", cap);
    r->be = be;
    r->cap = cap;
    r->obs_dim = obs_dim;
    r->D = D;
    size_t c = (size_t)cap;
    DQN_TRY(be->ops->alloc(be, (void **)&r->obs, c * obs_dim * sizeof(float)));
    DQN_TRY(be->ops->alloc(be, (void **)&r->next_obs, c * obs_dim * sizeof(float)));
    DQN_TRY(be->ops->alloc(be, (void **)&r->R, c * sizeof(float)));
    DQN_TRY(be->ops->alloc(be, (void **)&r->disc, c * sizeof(float)));
    DQN_TRY(be->ops->alloc(be, (void **)&r->act, c * D * sizeof(int32_t)));
    DQN_TRY(be->ops->alloc(be, (void **)&r->size_dev, 2 * sizeof(uint32_t)));
    r->pos_dev = r->size_dev + 1;
    return DQN_OK;
}

/* size_dev and pos_dev from the host copies, in one copy */
static dqn_status put_counters(dqn_replay *r) {
    uint32_t sp[2] = {(uint32_t)r->size, (uint32_t)r->pos};
    return r->be->ops->h2d(r->be, r->size_dev, sp, sizeof sp);
}

dqn_status dqn_replay_prioritize(dqn_replay *r, float alpha, float beta0, float eps,
                                 uint64_t beta_updates) {
    if (r->size > 0 || r->prioritized)
        return DQN_ERR(DQN_ERR_ARG, "replay: prioritised only before the first row");
    if (!(alpha >= 0.0f && beta0 >= 0.0f && beta0 <= 1.0f && eps > 0.0f))
        return DQN_ERR(DQN_ERR_ARG, "replay: alpha = %g, beta = %g, eps = %g (alpha >= 0, beta "
                       "in [0, 1], eps > 0)", (double)alpha, (double)beta0, (double)eps);
    dqn_per *p = &r->per;
    p->leaves = dqn_per_leaves(r->cap);
    p->cap = r->cap;
    p->size = r->size_dev;
    p->alpha = alpha;
    p->beta0 = beta0;
    p->eps = eps;
    p->beta_updates = beta_updates;
    DQN_TRY(r->be->ops->alloc(r->be, (void **)&p->tree, 2 * (size_t)p->leaves * sizeof(float)));
    r->prioritized = 1;
    const float top = 1.0f;   /* the first rows' priority, until a loss sets the scale */
    return r->be->ops->h2d(r->be, p->tree, &top, sizeof top);
}

void dqn_replay_destroy(dqn_replay *r) {
    if (!r->be) return;
    void *p[] = {r->obs, r->next_obs, r->R, r->disc, r->act, r->size_dev, r->per.tree};
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
        if (p[k]) r->be->ops->free(r->be, p[k]);
    memset(r, 0, sizeof *r);
}

/* rows [0, n) of the host arrays into rows [at, at + n) of the buffer (no wrap) */
static dqn_status put_rows(dqn_replay *r, int at, const float *obs, const int32_t *act,
                           const float *R, const float *disc, const float *next_obs, int n) {
    const dqn_ops *o = r->be->ops;
    size_t od = (size_t)r->obs_dim, D = (size_t)r->D;
    DQN_TRY(o->h2d(r->be, r->obs + at * od, obs, n * od * sizeof(float)));
    DQN_TRY(o->h2d(r->be, r->next_obs + at * od, next_obs, n * od * sizeof(float)));
    DQN_TRY(o->h2d(r->be, r->act + at * D, act, n * D * sizeof(int32_t)));
    DQN_TRY(o->h2d(r->be, r->R + at, R, n * sizeof(float)));
    return o->h2d(r->be, r->disc + at, disc, n * sizeof(float));
}

dqn_status dqn_replay_add(dqn_replay *r, const float *obs, const int32_t *act, const float *R,
                          const float *disc, const float *next_obs, int n) {
    if (n <= 0) return DQN_OK;
    size_t od = (size_t)r->obs_dim, D = (size_t)r->D;
    while (n > 0) {
        int k = r->cap - r->pos < n ? r->cap - r->pos : n;
        DQN_TRY(put_rows(r, r->pos, obs, act, R, disc, next_obs, k));
        if (r->prioritized) DQN_TRY(r->be->ops->per_insert(r->be, &r->per, r->pos, k));
        obs += k * od; next_obs += k * od; act += k * D; R += k; disc += k;
        n -= k;
        r->pos = (r->pos + k) % r->cap;
        r->size = r->size + k < r->cap ? r->size + k : r->cap;
    }
    return put_counters(r);
}

void dqn_replay_view_of(const dqn_replay *r, dqn_replay_view *v) {
    v->obs = r->obs;
    v->next_obs = r->next_obs;
    v->R = r->R;
    v->disc = r->disc;
    v->act = r->act;
    v->size = r->size_dev;
    v->per = r->prioritized ? &r->per : NULL;
}

void dqn_replay_ring_of(const dqn_replay *r, dqn_ring *ring) {
    ring->cap = r->cap;
    ring->obs_dim = r->obs_dim;
    ring->D = r->D;
    ring->obs = r->obs;
    ring->next_obs = r->next_obs;
    ring->R = r->R;
    ring->disc = r->disc;
    ring->act = r->act;
    ring->size = r->size_dev;
    ring->pos = r->pos_dev;
    ring->per = r->prioritized ? &r->per : NULL;
}

static size_t tree_bytes(const dqn_replay *r) {
    return r->prioritized ? 2 * (size_t)r->per.leaves * sizeof(float) : 0;
}

size_t dqn_replay_bytes(const dqn_replay *r) {
    size_t c = (size_t)r->cap;
    return c * (2 * r->obs_dim + 2) * sizeof(float) + c * r->D * sizeof(int32_t) + tree_bytes(r);
}

dqn_status dqn_replay_export(const dqn_replay *r, void *host) {
    const dqn_ops *o = r->be->ops;
    size_t c = (size_t)r->cap, od = c * r->obs_dim * sizeof(float);
    char *p = host;
    DQN_TRY(o->d2h(r->be, p, r->obs, od)); p += od;
    DQN_TRY(o->d2h(r->be, p, r->next_obs, od)); p += od;
    DQN_TRY(o->d2h(r->be, p, r->R, c * sizeof(float))); p += c * sizeof(float);
    DQN_TRY(o->d2h(r->be, p, r->disc, c * sizeof(float))); p += c * sizeof(float);
    DQN_TRY(o->d2h(r->be, p, r->act, c * r->D * sizeof(int32_t))); p += c * r->D * sizeof(int32_t);
    return r->prioritized ? o->d2h(r->be, p, r->per.tree, tree_bytes(r)) : DQN_OK;
}

/* A checkpoint's tree, checked before it replaces ours: a bad one would make the sampler pick
 * rows past the filled ones or divide by a zero total. */
static dqn_status import_tree(dqn_replay *r, const void *host, int size) {
    int L = r->per.leaves;
    size_t bytes = tree_bytes(r);
    float *t = malloc(bytes);
    if (!t) return DQN_ERR(DQN_ERR_NOMEM, "replay priorities: %zu bytes", bytes);
    memcpy(t, host, bytes);   /* the section need not be aligned for floats */
    dqn_status s = DQN_OK;
    for (int i = 0; i < 2 * L && s == DQN_OK; i++) {
        int leaf = i >= L, row = i - L;
        int bad = !(isfinite(t[i]) && t[i] >= 0.0f) || (i == 0 && !(t[0] > 0.0f)) ||
                  (leaf && row >= size && t[i] != 0.0f) || (leaf && row < size && !(t[i] > 0.0f)) ||
                  (!leaf && i > 0 && t[i] != t[2 * i] + t[2 * i + 1]);
        if (bad)
            s = DQN_ERR(DQN_ERR_FORMAT, "replay priorities: node %d of %d is %g, not a sum-tree "
                        "over %d rows", i, 2 * L, (double)t[i], size);
    }
    if (s == DQN_OK) s = r->be->ops->h2d(r->be, r->per.tree, t, bytes);
    free(t);
    return s;
}

dqn_status dqn_replay_import(dqn_replay *r, const void *host, int pos, int size) {
    if (pos < 0 || pos >= r->cap || size < 0 || size > r->cap)
        return DQN_ERR(DQN_ERR_FORMAT, "replay position %d / size %d outside capacity %d", pos,
                       size, r->cap);
    const dqn_ops *o = r->be->ops;
    size_t c = (size_t)r->cap, od = c * r->obs_dim * sizeof(float);
    const char *p = host;
    DQN_TRY(o->h2d(r->be, r->obs, p, od)); p += od;
    DQN_TRY(o->h2d(r->be, r->next_obs, p, od)); p += od;
    DQN_TRY(o->h2d(r->be, r->R, p, c * sizeof(float))); p += c * sizeof(float);
    DQN_TRY(o->h2d(r->be, r->disc, p, c * sizeof(float))); p += c * sizeof(float);
    DQN_TRY(o->h2d(r->be, r->act, p, c * r->D * sizeof(int32_t))); p += c * r->D * sizeof(int32_t);
    if (r->prioritized) DQN_TRY(import_tree(r, p, size));
    r->pos = pos;
    r->size = size;
    return put_counters(r);
}
