/* The actor: a batched greedy forward. Observations go in and actions and Q come out through
 * pinned host buffers; on a backend with graphs the whole acting step (copy in, taus, forward,
 * argmax, copy out) is captured once and replayed, so an env step costs one launch and one sync. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"
#include "train/trainer_internal.h"

dqn_status dqn_actor_create(dqn_actor *a, dqn_backend *be, const dqn_layout *L, int n, int K) {
    memset(a, 0, sizeof *a);
    a->n = n;
    a->K = K;
    const dqn_arch *ar = &L->arch;
    const dqn_ops *o = be->ops;
    size_t nk = (size_t)n * K, ob = (size_t)n * ar->obs_dim * sizeof(float);
    size_t ab = (size_t)n * ar->br.D * sizeof(int32_t), qb = (size_t)n * ar->br.A * sizeof(float);
    DQN_TRY(dqn_fwd_alloc(be, L, &a->f, n, K));
    DQN_TRY(o->alloc(be, (void **)&a->obs, ob));
    DQN_TRY(o->alloc(be, (void **)&a->tau, nk * sizeof(float)));
    DQN_TRY(o->alloc(be, (void **)&a->tau_mid, nk * sizeof(float)));
    DQN_TRY(o->alloc(be, (void **)&a->act, ab));
    DQN_TRY(o->alloc(be, (void **)&a->q, qb));
    DQN_TRY(o->alloc(be, (void **)&a->step, sizeof(uint64_t)));
    DQN_TRY(o->host_alloc(be, (void **)&a->obs_pin, ob));
    DQN_TRY(o->host_alloc(be, (void **)&a->act_pin, ab));
    DQN_TRY(o->host_alloc(be, (void **)&a->q_pin, qb));
    float *t = malloc(nk * sizeof *t);
    if (!t) return DQN_ERR(DQN_ERR_NOMEM, "%zu taus", nk);
    for (size_t j = 0; j < nk; j++) t[j] = ((float)(j % (size_t)K) + 0.5f) / (float)K;
    dqn_status s = o->h2d(be, a->tau_mid, t, nk * sizeof *t);
    free(t);
    return s;
}

void dqn_actor_destroy(dqn_actor *a, dqn_backend *be) {
    if (!be) return;
    if (a->graph) be->ops->graph_destroy(be, a->graph, 1);
    dqn_fwd_free(be, &a->f);
    void *p[] = {a->obs, a->tau, a->tau_mid, a->act, a->q, a->step};
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
        if (p[k]) be->ops->free(be, p[k]);
    void *h[] = {a->obs_pin, a->act_pin, a->q_pin};
    for (size_t k = 0; k < sizeof h / sizeof h[0]; k++)
        if (h[k]) be->ops->host_free(be, h[k]);
    memset(a, 0, sizeof *a);
}

/* One acting step on n rows, stream-ordered from the pinned obs to the pinned actions and Q. */
static dqn_status record_act(dqn_actor *a, dqn_backend *be, const dqn_layout *L, const float *P,
                             int n, uint64_t seed, int midpoint) {
    const dqn_ops *o = be->ops;
    const dqn_arch *ar = &L->arch;
    size_t nk = (size_t)n * a->K;
    const float *tau = a->tau_mid;
    DQN_TRY(o->h2d_async(be, a->obs, a->obs_pin, (size_t)n * ar->obs_dim * sizeof(float)));
    if (!midpoint) {
        DQN_TRY(o->rand_uniform(be, a->tau, nk, seed, DQN_STREAM_TAU_ACT, a->step, nk));
        DQN_TRY(o->step_incr(be, a->step));
        tau = a->tau;
    }
    DQN_TRY(dqn_forward(be, L, P, a->obs, tau, &a->f, n, a->K, 0, 0, NULL));
    DQN_TRY(o->q_argmax(be, a->f.Z, a->q, a->act, n, a->K, &ar->br));
    DQN_TRY(o->d2h_async(be, a->act_pin, a->act, (size_t)n * ar->br.D * sizeof(int32_t)));
    return o->d2h_async(be, a->q_pin, a->q, (size_t)n * ar->br.A * sizeof(float));
}

static dqn_status capture_act(dqn_actor *a, dqn_backend *be, const dqn_layout *L,
                              const float *P, uint64_t seed) {
    const dqn_ops *o = be->ops;
    void *child = NULL;
    DQN_TRY(o->capture_begin(be));
    dqn_status s = record_act(a, be, L, P, a->n, seed, 0);
    dqn_status e = o->capture_end(be, &child);
    DQN_TRY(s);
    DQN_TRY(e);
    s = o->graph_compose(be, &child, 1, &a->graph);
    o->graph_destroy(be, child, 0);
    a->graph_params = P;
    return s;
}

dqn_status dqn_actor_greedy(dqn_actor *a, dqn_backend *be, const dqn_layout *L, const float *P,
                            const float *obs_host, int n, uint64_t seed, int midpoint,
                            int32_t *act_host, float *q_host) {
    const dqn_ops *o = be->ops;
    const dqn_arch *ar = &L->arch;
    if (n > a->n) return DQN_ERR(DQN_ERR_ARG, "%d observations for an actor of %d", n, a->n);
    memcpy(a->obs_pin, obs_host, (size_t)n * ar->obs_dim * sizeof(float));
    int use_graph = o->capture_begin && !midpoint && n == a->n;
    if (use_graph && a->graph && a->graph_params != P) {
        o->graph_destroy(be, a->graph, 1);
        a->graph = NULL;
    }
    if (use_graph && !a->graph) DQN_TRY(capture_act(a, be, L, P, seed));
    if (use_graph) DQN_TRY(o->graph_launch(be, a->graph));
    else DQN_TRY(record_act(a, be, L, P, n, seed, midpoint));
    DQN_TRY(o->sync(be));
    memcpy(act_host, a->act_pin, (size_t)n * ar->br.D * sizeof(int32_t));
    if (q_host) memcpy(q_host, a->q_pin, (size_t)n * ar->br.A * sizeof(float));
    return DQN_OK;
}
