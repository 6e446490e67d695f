/* The n-step windows' arithmetic, written once for the host assembler (nstep.c), the
 * replay_push op's CPU loop and its CUDA kernel (DQN_HD), so that the three cannot drift: where
 * an env's step goes in its window, which transitions it emits, their return (summed in double,
 * every product rounded on its own: no FMA contraction on the device) and discount, and how the
 * window moves on. A push is dqn_nstep_enter, then dqn_nstep_emit for k < the count
 * dqn_nstep_emits gave, then dqn_nstep_advance. */
#ifndef DQN_NSTEP_MATH_H
#define DQN_NSTEP_MATH_H
#include <stdint.h>

#include "backends/backend.h"
#include "core/error.h"
#include "dqn_philox.h" /* DQN_HD */

#if defined(__CUDA_ARCH__)
#define DQN_NS_MUL(a, b) __dmul_rn((a), (b))
#else
#define DQN_NS_MUL(a, b) ((a) * (b))
#endif

/* The transitions env e's step emits, count being its window's length before the step: an
 * ended episode (terminated or truncated) flushes the window with the new entry, a window that
 * the entry fills emits its oldest, else none. */
DQN_HD int dqn_nstep_emits(int count, int n, int done) {
    return done ? count + 1 : (count + 1 == n ? 1 : 0);
}

/* The step (obs before it, its action and reward) into env e's window, after its last entry. */
DQN_HD void dqn_nstep_enter(const dqn_nstep_win *w, int e, const float *obs, const int32_t *act,
                            float reward) {
    const size_t row = (size_t)e * w->n + (size_t)((w->head[e] + w->count[e]) % w->n);
    for (int k = 0; k < w->obs_dim; k++) w->obs[row * w->obs_dim + k] = obs[k];
    for (int b = 0; b < w->D; b++) w->act[row * w->D + b] = act[b];
    w->rew[row] = reward;
    w->count[e] += 1;
}

/* The transition from window position k (0: the oldest) of env e, its return summed to the
 * window's end: obs and act of that entry, next_obs, R = sum_j gamma^j r_(k+j) (in double),
 * disc = 0 if terminated, else gamma^(count - k). */
DQN_HD void dqn_nstep_emit(const dqn_nstep_win *w, int e, int k, const float *next_obs,
                           int terminated, float *o_obs, int32_t *o_act, float *o_next,
                           float *o_R, float *o_disc) {
    const int n = w->n, cnt = w->count[e], head = w->head[e];
    const size_t base = (size_t)e * n;
    double R = 0.0, g = 1.0;
    for (int j = k; j < cnt; j++) {
        R += DQN_NS_MUL(g, (double)w->rew[base + (size_t)((head + j) % n)]);
        g = DQN_NS_MUL(g, w->gamma);
    }
    const size_t first = base + (size_t)((head + k) % n);
    for (int i = 0; i < w->obs_dim; i++) {
        o_obs[i] = w->obs[first * w->obs_dim + i];
        o_next[i] = next_obs[i];
    }
    for (int b = 0; b < w->D; b++) o_act[b] = w->act[first * w->D + b];
    *o_R = (float)R;
    *o_disc = terminated ? 0.0f : (float)g;
}

/* After the emissions: an ended episode empties the window, a full one drops its oldest. */
DQN_HD void dqn_nstep_advance(const dqn_nstep_win *w, int e, int done) {
    if (done) {
        w->count[e] = 0;
        w->head[e] = 0;
    } else if (w->count[e] == w->n) {
        w->head[e] = (w->head[e] + 1) % w->n;
        w->count[e] -= 1;
    }
}

/* replay_push's arguments, checked alike by every backend */
static inline dqn_status dqn_push_check(const dqn_nstep_win *w, const dqn_ring *r,
                                        const float *obs, const int32_t *act,
                                        const float *reward, const float *final_obs,
                                        const uint8_t *terminated, const uint8_t *truncated) {
    if (!w || !r || !obs || !act || !reward || !final_obs || !terminated || !truncated)
        return DQN_ERR(DQN_ERR_ARG, "replay_push: a NULL argument");
    if (w->n_envs < 1 || w->n < 1 || w->obs_dim < 1 || w->D < 1 || r->cap < 1 ||
        r->obs_dim != w->obs_dim || r->D != w->D)
        return DQN_ERR(DQN_ERR_ARG, "replay_push: envs %d, n %d, obs_dim %d / %d, D %d / %d, "
                       "cap %d", w->n_envs, w->n, w->obs_dim, r->obs_dim, w->D, r->D, r->cap);
    if (!w->obs || !w->act || !w->rew || !w->head || !w->count || !r->obs || !r->next_obs ||
        !r->R || !r->disc || !r->act || !r->size || !r->pos)
        return DQN_ERR(DQN_ERR_ARG, "replay_push: a NULL window or ring buffer");
    const dqn_per *p = r->per;
    if (p && (!p->tree || p->cap != r->cap || p->leaves < p->cap ||
              (p->leaves & (p->leaves - 1)) != 0))
        return DQN_ERR(DQN_ERR_ARG, "replay_push: a sum-tree of cap %d, %d leaves for a ring "
                       "of %d", p->cap, p->leaves, r->cap);
    return DQN_OK;
}

#endif
