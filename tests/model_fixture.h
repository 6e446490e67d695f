/* A model on the CPU backend with random weights and a random batch, for gradient tests. */
#ifndef DQN_TEST_MODEL_FIXTURE_H
#define DQN_TEST_MODEL_FIXTURE_H
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "dqn_philox.h"
#include "model/model.h"

typedef struct {
    int obs, d, grn, n_cos, bn, hidden, D, br[4], B, N, Nt, K;
    dqn_target_mode mode;
    float kappa, head_clip;
    int split;   /* 1: every pass splits the bottleneck (bn_split_rows 1); 0: the default */
} fixture_cfg;

static float fx_uniform(uint64_t *c, float lo, float hi) {
    return lo + (hi - lo) * dqn_philox_uniform(777, 99, (*c)++);
}

/* Builds the model and fills weights (online and a different target), batch and taus. */
static dqn_status fixture_make(dqn_backend **be, dqn_model *m, const fixture_cfg *f) {
    dqn_status s = dqn_backend_cpu_create(be);
    if (s != DQN_OK) return s;
    dqn_arch a;
    memset(&a, 0, sizeof a);
    a.obs_dim = f->obs; a.d = f->d; a.grn_blocks = f->grn; a.n_cos = f->n_cos;
    a.bottleneck = f->bn; a.head_hidden = f->hidden;
    dqn_branches_init(&a.br, f->D, f->br);
    dqn_update_cfg u;
    memset(&u, 0, sizeof u);
    u.B = f->B; u.N = f->N; u.Nt = f->Nt; u.K = f->K; u.mode = f->mode; u.kappa = f->kappa;
    u.head_grad_clip = f->head_clip;
    u.bn_split_rows = f->split ? 1 : 0;
    if ((s = dqn_model_create(m, *be, &a, &u)) != DQN_OK) return s;
    size_t n = m->L.n_params;
    uint64_t c = 0;
    dqn_layout_init_params(&m->L, 11, m->params);
    dqn_layout_init_params(&m->L, 12, m->target);
    for (int k = 0; k < m->L.n_tensors; k++) {
        const dqn_tensor *t = &m->L.t[k];
        if (t->fan_in != 0) continue;   /* LayerNorm gamma / beta: move off 1 / 0 */
        for (size_t j = 0; j < t->size; j++) {
            m->params[t->offset + j] += fx_uniform(&c, -0.3f, 0.3f);
            m->target[t->offset + j] += fx_uniform(&c, -0.3f, 0.3f);
        }
    }
    (void)n;
    int B = f->B;
    for (int j = 0; j < B * f->obs; j++) m->x[j] = fx_uniform(&c, -1.5f, 1.5f);
    for (int j = 0; j < B * f->obs; j++) m->xn[j] = fx_uniform(&c, -1.5f, 1.5f);
    for (int s2 = 0; s2 < B; s2++) {
        for (int b = 0; b < f->D; b++)
            m->act[s2 * f->D + b] = (int32_t)(dqn_philox_below(777, 98, c++, (uint32_t)f->br[b]));
        m->R[s2] = fx_uniform(&c, -1.0f, 2.0f);
        m->disc[s2] = s2 % 3 == 0 ? 0.0f : fx_uniform(&c, 0.5f, 0.99f);
    }
    for (int j = 0; j < B * f->N; j++) m->tau[j] = fx_uniform(&c, 0.01f, 0.99f);
    for (int j = 0; j < B * f->Nt; j++) m->tau_t[j] = fx_uniform(&c, 0.01f, 0.99f);
    for (int j = 0; j < B * f->K; j++) m->tau_k[j] = fx_uniform(&c, 0.01f, 0.99f);
    return DQN_OK;
}
#endif
