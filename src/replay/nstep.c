#include "replay/nstep.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "replay/nstep_math.h"

dqn_status dqn_nstep_create(dqn_nstep *s, int n_envs, int n, int obs_dim, int D, double gamma) {
    memset(s, 0, sizeof *s);
    if (n < 1 || n_envs < 1) return DQN_ERR(DQN_ERR_ARG, "n_step %d, envs %d", n, n_envs);
    s->n_envs = n_envs;
    s->n = n;
    s->obs_dim = obs_dim;
    s->D = D;
    s->gamma = gamma;
    size_t w = (size_t)n_envs * n;
    s->obs = calloc(w * obs_dim, sizeof(float));
    s->act = calloc(w * D, sizeof(int32_t));
    s->rew = calloc(w, sizeof(float));
    s->head = calloc((size_t)n_envs, sizeof(int32_t));
    s->count = calloc((size_t)n_envs, sizeof(int32_t));
    s->out_obs = calloc(w * obs_dim, sizeof(float));
    s->out_next = calloc(w * obs_dim, sizeof(float));
    s->out_R = calloc(w, sizeof(float));
    s->out_disc = calloc(w, sizeof(float));
    s->out_act = calloc(w * D, sizeof(int32_t));
    if (!s->obs || !s->act || !s->rew || !s->head || !s->count || !s->out_obs || !s->out_next ||
        !s->out_R || !s->out_disc || !s->out_act) {
        dqn_nstep_destroy(s);
        return DQN_ERR(DQN_ERR_NOMEM, "n-step windows for %d envs", n_envs);
    }
    return DQN_OK;
}

void dqn_nstep_destroy(dqn_nstep *s) {
    free(s->obs); free(s->act); free(s->rew); free(s->head); free(s->count);
    free(s->out_obs); free(s->out_next); free(s->out_R); free(s->out_disc); free(s->out_act);
    memset(s, 0, sizeof *s);
}

void dqn_nstep_clear_out(dqn_nstep *s) { s->out_n = 0; }

/* The windows as the shared arithmetic (nstep_math.h) takes them. */
static dqn_nstep_win win_of(const dqn_nstep *s) {
    dqn_nstep_win w = {.n_envs = s->n_envs, .n = s->n, .obs_dim = s->obs_dim, .D = s->D,
                       .gamma = s->gamma, .obs = s->obs, .act = s->act, .rew = s->rew,
                       .head = s->head, .count = s->count};
    return w;
}

void dqn_nstep_push(dqn_nstep *s, int e, const float *obs, const int32_t *act, float reward,
                    const float *next_obs, int terminated, int truncated) {
    const dqn_nstep_win w = win_of(s);
    const int done = terminated || truncated;
    const int m = dqn_nstep_emits(s->count[e], s->n, done);
    dqn_nstep_enter(&w, e, obs, act, reward);
    for (int k = 0; k < m; k++) {
        int o = s->out_n++;
        dqn_nstep_emit(&w, e, k, next_obs, terminated, s->out_obs + (size_t)o * s->obs_dim,
                       s->out_act + (size_t)o * s->D, s->out_next + (size_t)o * s->obs_dim,
                       &s->out_R[o], &s->out_disc[o]);
    }
    dqn_nstep_advance(&w, e, done);
}

size_t dqn_nstep_state_bytes(const dqn_nstep *s) {
    size_t w = (size_t)s->n_envs * s->n;
    return w * s->obs_dim * sizeof(float) + w * s->D * sizeof(int32_t) + w * sizeof(float) +
           2 * (size_t)s->n_envs * sizeof(int32_t);
}

#define COPY_OUT(p, ptr, bytes) do { memcpy((p), (ptr), (bytes)); (p) += (bytes); } while (0)
#define COPY_IN(p, ptr, bytes) do { memcpy((ptr), (p), (bytes)); (p) += (bytes); } while (0)

void dqn_nstep_state_save(const dqn_nstep *s, void *dst) {
    size_t w = (size_t)s->n_envs * s->n;
    char *p = dst;
    COPY_OUT(p, s->obs, w * s->obs_dim * sizeof(float));
    COPY_OUT(p, s->act, w * s->D * sizeof(int32_t));
    COPY_OUT(p, s->rew, w * sizeof(float));
    COPY_OUT(p, s->head, (size_t)s->n_envs * sizeof(int32_t));
    COPY_OUT(p, s->count, (size_t)s->n_envs * sizeof(int32_t));
}

void dqn_nstep_state_load(dqn_nstep *s, const void *src) {
    size_t w = (size_t)s->n_envs * s->n;
    const char *p = src;
    COPY_IN(p, s->obs, w * s->obs_dim * sizeof(float));
    COPY_IN(p, s->act, w * s->D * sizeof(int32_t));
    COPY_IN(p, s->rew, w * sizeof(float));
    COPY_IN(p, s->head, (size_t)s->n_envs * sizeof(int32_t));
    COPY_IN(p, s->count, (size_t)s->n_envs * sizeof(int32_t));
}

dqn_status dqn_nstep_win_create(dqn_nstep_win *w, dqn_backend *be, int n_envs, int n,
                                int obs_dim, int D, double gamma) {
    memset(w, 0, sizeof *w);
    if (n < 1 || n_envs < 1 || obs_dim < 1 || D < 1)
        return DQN_ERR(DQN_ERR_ARG, "n-step windows: n_step %d, envs %d, obs_dim %d, D %d", n,
                       n_envs, obs_dim, D);
    w->n_envs = n_envs, w->n = n, w->obs_dim = obs_dim, w->D = D, w->gamma = gamma;
    const size_t rows = (size_t)n_envs * n;
    const dqn_ops *o = be->ops;
    dqn_status s = o->alloc(be, (void **)&w->obs, rows * obs_dim * sizeof(float));
    if (s == DQN_OK) s = o->alloc(be, (void **)&w->act, rows * D * sizeof(int32_t));
    if (s == DQN_OK) s = o->alloc(be, (void **)&w->rew, rows * sizeof(float));
    if (s == DQN_OK) s = o->alloc(be, (void **)&w->head, (size_t)n_envs * sizeof(int32_t));
    if (s == DQN_OK) s = o->alloc(be, (void **)&w->count, (size_t)n_envs * sizeof(int32_t));
    if (s != DQN_OK) dqn_nstep_win_destroy(w, be);
    return s;
}

void dqn_nstep_win_destroy(dqn_nstep_win *w, dqn_backend *be) {
    void *p[] = {w->obs, w->act, w->rew, w->head, w->count};
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
        if (p[k]) be->ops->free(be, p[k]);
    memset(w, 0, sizeof *w);
}
