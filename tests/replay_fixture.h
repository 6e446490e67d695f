/* A small replay of random transitions and the model and update settings of the tests that run
 * whole updates on the CPU (test_op_count, test_side_branch). */
#ifndef DQN_TEST_REPLAY_FIXTURE_H
#define DQN_TEST_REPLAY_FIXTURE_H
#include <string.h>

#include "dqn_philox.h"
#include "model/model.h"

enum { CAP = 300 };

typedef struct {
    float obs[CAP * 8], next_obs[CAP * 8], R[CAP], disc[CAP];
    int32_t act[CAP * 4];
    uint32_t size;
} replay_arrays;

static void fill_replay(replay_arrays *r, const dqn_arch *a, dqn_replay_view *v) {
    uint64_t c = 0;
    for (int i = 0; i < CAP * a->obs_dim; i++) {
        r->obs[i] = 2 * dqn_philox_uniform(3, 1, c++) - 1;
        r->next_obs[i] = 2 * dqn_philox_uniform(3, 1, c++) - 1;
    }
    for (int i = 0; i < CAP; i++) {
        r->R[i] = dqn_philox_uniform(3, 2, (uint64_t)i);
        r->disc[i] = i % 5 ? 0.97f : 0.0f;
        for (int b = 0; b < a->br.D; b++)
            r->act[i * a->br.D + b] = (int32_t)dqn_philox_below(3, 3, c++, (uint32_t)a->br.n[b]);
    }
    r->size = CAP - 17;
    *v = (dqn_replay_view){r->obs, r->next_obs, r->R, r->disc, r->act, &r->size, NULL};
}

static dqn_arch arch_of(int obs, int d, int grn, int bn, int hidden, int D, const int *sizes) {
    dqn_arch a;
    memset(&a, 0, sizeof a);
    a.obs_dim = obs, a.d = d, a.grn_blocks = grn, a.n_cos = 16, a.bottleneck = bn;
    a.head_hidden = hidden;
    dqn_branches_init(&a.br, D, sizes);
    return a;
}

static dqn_update_cfg ucfg_of(int B, int N, int K) {
    dqn_update_cfg u;
    memset(&u, 0, sizeof u);
    u.B = B, u.N = N, u.Nt = 6, u.K = K, u.mode = DQN_TARGET_MEAN, u.kappa = 1.0f;
    u.lr = 1e-3f, u.beta1 = 0.9f, u.beta2 = 0.999f, u.adam_eps = 1e-8f, u.grad_clip = 10.0f;
    u.head_grad_clip = 0.5f, u.target_period = 2, u.seed = 9;
    return u;
}

#endif
