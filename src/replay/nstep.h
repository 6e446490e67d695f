/* n-step return assembler: per env a window of the last n (obs, action, reward). A full window
 * emits its oldest transition with R = sum_k gamma^k r_k and disc = gamma^n; an episode end
 * flushes the whole window, stopping the return there: disc = 0 if terminated, gamma^len if
 * truncated (a time limit is not termination: the target bootstraps through it). */
#ifndef DQN_NSTEP_H
#define DQN_NSTEP_H
#include <stdint.h>
#include "backends/backend.h"
#include "dqn.h"

typedef struct {
    int n_envs, n, obs_dim, D;
    double gamma;
    float *obs;        /* [n_envs, n, obs_dim] ring */
    int32_t *act;      /* [n_envs, n, D] */
    float *rew;        /* [n_envs, n] */
    int32_t *head;     /* [n_envs] ring index of the oldest entry */
    int32_t *count;    /* [n_envs] entries in the window */
    /* emitted transitions since the last dqn_nstep_clear_out (capacity n_envs * n) */
    int out_n;
    float *out_obs, *out_next, *out_R, *out_disc;
    int32_t *out_act;
} dqn_nstep;

dqn_status dqn_nstep_create(dqn_nstep *s, int n_envs, int n, int obs_dim, int D, double gamma);
void dqn_nstep_destroy(dqn_nstep *s);
/* One env step of env e: obs before the step, its action and reward, the observation after
 * (the final observation if the episode ended), and the end flags. */
void dqn_nstep_push(dqn_nstep *s, int e, const float *obs, const int32_t *act, float reward,
                    const float *next_obs, int terminated, int truncated);
void dqn_nstep_clear_out(dqn_nstep *s);
/* Window state for checkpoints: obs, act, rew, head, count in that order. */
size_t dqn_nstep_state_bytes(const dqn_nstep *s);
void dqn_nstep_state_save(const dqn_nstep *s, void *dst);
void dqn_nstep_state_load(dqn_nstep *s, const void *src);

/* The same windows in backend memory, empty (zero-filled), for the replay_push op. */
dqn_status dqn_nstep_win_create(dqn_nstep_win *w, dqn_backend *be, int n_envs, int n,
                                int obs_dim, int D, double gamma);
void dqn_nstep_win_destroy(dqn_nstep_win *w, dqn_backend *be);

#endif
