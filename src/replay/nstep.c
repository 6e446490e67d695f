#include "replay/nstep.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

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

/* Emit the transition starting at window position k (0 = oldest) of env e, summing rewards to
 * the window's end. */
static void emit(dqn_nstep *s, int e, int k, const float *next_obs, int terminated) {
    int n = s->n, cnt = s->count[e];
    size_t base = (size_t)e * n;
    int first = (s->head[e] + k) % n;
    double R = 0.0, g = 1.0;
    for (int j = k; j < cnt; j++) {
        R += g * s->rew[base + (s->head[e] + j) % n];
        g *= s->gamma;
    }
    int o = s->out_n++;
    memcpy(s->out_obs + (size_t)o * s->obs_dim, s->obs + (base + first) * s->obs_dim,
           s->obs_dim * sizeof(float));
    memcpy(s->out_act + (size_t)o * s->D, s->act + (base + first) * s->D, s->D * sizeof(int32_t));
    memcpy(s->out_next + (size_t)o * s->obs_dim, next_obs, s->obs_dim * sizeof(float));
    s->out_R[o] = (float)R;
    s->out_disc[o] = terminated ? 0.0f : (float)g;
}

void dqn_nstep_push(dqn_nstep *s, int e, const float *obs, const int32_t *act, float reward,
                    const float *next_obs, int terminated, int truncated) {
    int n = s->n;
    size_t base = (size_t)e * n;
    int slot = (s->head[e] + s->count[e]) % n;
    memcpy(s->obs + (base + slot) * s->obs_dim, obs, s->obs_dim * sizeof(float));
    memcpy(s->act + (base + slot) * s->D, act, s->D * sizeof(int32_t));
    s->rew[base + slot] = reward;
    s->count[e]++;
    if (terminated || truncated) {
        for (int k = 0; k < s->count[e]; k++) emit(s, e, k, next_obs, terminated);
        s->count[e] = 0;
        s->head[e] = 0;
    } else if (s->count[e] == n) {
        emit(s, e, 0, next_obs, 0);
        s->head[e] = (s->head[e] + 1) % n;
        s->count[e]--;
    }
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
