/* Uniform replay buffer in backend memory (device-resident on CUDA). Rows are n-step
 * transitions (obs, act, R, disc = gamma^n (1 - terminated), next_obs); sampling happens inside
 * the update step (model.c) through the rand_index and gather ops. */
#ifndef DQN_REPLAY_H
#define DQN_REPLAY_H
#include "backends/backend.h"
#include "model/model.h"

typedef struct {
    dqn_backend *be;
    int cap, obs_dim, D;
    float *obs, *next_obs, *R, *disc;   /* [cap, obs], [cap, obs], [cap], [cap] */
    int32_t *act;                       /* [cap, D] */
    uint32_t *size_dev;                 /* rows filled, read by the update step */
    int pos, size;                      /* host copies: next row to write, rows filled */
} dqn_replay;

dqn_status dqn_replay_create(dqn_replay *r, dqn_backend *be, int cap, int obs_dim, int D);
void dqn_replay_destroy(dqn_replay *r);
/* Append n rows from host memory, overwriting the oldest once full. */
dqn_status dqn_replay_add(dqn_replay *r, const float *obs, const int32_t *act, const float *R,
                          const float *disc, const float *next_obs, int n);
void dqn_replay_view_of(const dqn_replay *r, dqn_replay_view *v);
/* Whole-buffer host copies for checkpoints: bytes of the five arrays in a fixed order. */
size_t dqn_replay_bytes(const dqn_replay *r);
dqn_status dqn_replay_export(const dqn_replay *r, void *host);
dqn_status dqn_replay_import(dqn_replay *r, const void *host, int pos, int size);

#endif
