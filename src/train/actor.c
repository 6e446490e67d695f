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
    DQN_TRY(dqn_fwd_alloc(be, L, &a->f, n, K));
    DQN_TRY(be->ops->alloc(be, (void **)&a->obs, (size_t)n * ar->obs_dim * sizeof(float)));
    DQN_TRY(be->ops->alloc(be, (void **)&a->tau, (size_t)n * K * sizeof(float)));
    DQN_TRY(be->ops->alloc(be, (void **)&a->act, (size_t)n * ar->br.D * sizeof(int32_t)));
    DQN_TRY(be->ops->alloc(be, (void **)&a->q, (size_t)n * ar->br.A * sizeof(float)));
    return be->ops->alloc(be, (void **)&a->step, sizeof(uint64_t));
}

void dqn_actor_destroy(dqn_actor *a, dqn_backend *be) {
    if (!be) return;
    dqn_fwd_free(be, &a->f);
    void *p[] = {a->obs, a->tau, a->act, a->q, a->step};
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
        if (p[k]) be->ops->free(be, p[k]);
    memset(a, 0, sizeof *a);
}

dqn_status dqn_actor_greedy(dqn_actor *a, dqn_backend *be, const dqn_layout *L, const float *P,
                            const float *obs_host, int n, uint64_t seed, int midpoint,
                            int32_t *act_host, float *q_host) {
    const dqn_ops *o = be->ops;
    const dqn_arch *ar = &L->arch;
    if (n > a->n) return DQN_ERR(DQN_ERR_ARG, "%d observations for an actor of %d", n, a->n);
    size_t nk = (size_t)n * a->K;
    DQN_TRY(o->h2d(be, a->obs, obs_host, (size_t)n * ar->obs_dim * sizeof(float)));
    if (midpoint) {
        float *t = malloc(nk * sizeof *t);
        if (!t) return DQN_ERR(DQN_ERR_NOMEM, "%zu taus", nk);
        for (size_t j = 0; j < nk; j++) t[j] = ((float)(j % a->K) + 0.5f) / (float)a->K;
        dqn_status s = o->h2d(be, a->tau, t, nk * sizeof *t);
        free(t);
        DQN_TRY(s);
    } else {
        DQN_TRY(o->rand_uniform(be, a->tau, nk, seed, DQN_STREAM_TAU_ACT, a->step, nk));
        DQN_TRY(o->step_incr(be, a->step));
    }
    DQN_TRY(dqn_forward(be, L, P, a->obs, a->tau, &a->f, n, a->K));
    DQN_TRY(o->q_argmax(be, a->f.Z, a->q, a->act, n, a->K, &ar->br));
    DQN_TRY(o->d2h(be, act_host, a->act, (size_t)n * ar->br.D * sizeof(int32_t)));
    if (q_host) DQN_TRY(o->d2h(be, q_host, a->q, (size_t)n * ar->br.A * sizeof(float)));
    return DQN_OK;
}
