/* Replay buffer in backend memory (device-resident on CUDA). Rows are n-step transitions (obs,
 * act, R, disc = gamma^n (1 - terminated), next_obs); sampling happens inside the update step
 * (model.c): uniform (the sample_batch op) or prioritised (a sum-tree in backend memory beside
 * the rows, sampled and updated by the per_* ops, replay/sumtree.h). */
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
    uint32_t *pos_dev;                  /* next row to write (size_dev[1]: one copy sets both) */
    int pos, size;                      /* host copies: next row to write, rows filled */
    int prioritized;                    /* per holds the sum-tree */
    dqn_per per;
} dqn_replay;

dqn_status dqn_replay_create(dqn_replay *r, dqn_backend *be, int cap, int obs_dim, int D);
/* Prioritised replay from here on (before any row is added): priorities (loss + eps)^alpha,
 * importance weights with beta from beta0 to 1 over beta_updates updates. */
dqn_status dqn_replay_prioritize(dqn_replay *r, float alpha, float beta0, float eps,
                                 uint64_t beta_updates);
void dqn_replay_destroy(dqn_replay *r);
/* Append n rows from host memory, overwriting the oldest once full. */
dqn_status dqn_replay_add(dqn_replay *r, const float *obs, const int32_t *act, const float *R,
                          const float *disc, const float *next_obs, int n);
void dqn_replay_view_of(const dqn_replay *r, dqn_replay_view *v);
/* The ring as replay_push writes it (its position and size in backend memory). */
void dqn_replay_ring_of(const dqn_replay *r, dqn_ring *ring);
/* Whole-buffer host copies for checkpoints: bytes of the five arrays in a fixed order, then the
 * sum-tree when prioritised. */
size_t dqn_replay_bytes(const dqn_replay *r);
dqn_status dqn_replay_export(const dqn_replay *r, void *host);
dqn_status dqn_replay_import(dqn_replay *r, const void *host, int pos, int size);

#endif
