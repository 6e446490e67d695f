/* The parameter layout: one table of named tensors (offsets into one float buffer) built from the
 * architecture. Parameters, gradients, both Adam moments and the target network share it, so
 * zeroing, clipping, the optimizer, checkpoints and target copies are single passes. */
#ifndef DQN_MODEL_LAYOUT_H
#define DQN_MODEL_LAYOUT_H
#include <stddef.h>
#include <stdint.h>
#include "backends/backend.h"

#define DQN_MAX_GRN 8
#define DQN_MAX_TENSORS (16 + 6 * DQN_MAX_GRN)

typedef struct {
    int obs_dim, d, grn_blocks, n_cos, bottleneck, head_hidden;
    dqn_branches br;
} dqn_arch;

typedef struct {
    char name[24];
    int rows, cols;      /* cols = 0 for vectors */
    size_t offset, size; /* in floats */
    int fan_in;          /* > 0: U(-1/sqrt(fan_in), +); 0: constant init_value */
    float init_value;
} dqn_tensor;

typedef struct { size_t W, b; int out, in; } dqn_lin;   /* offsets of a linear layer */
typedef struct { dqn_lin a, b; size_t gamma, beta; } dqn_grn_offsets;

typedef struct {
    dqn_arch arch;
    int u;                              /* head input width: bottleneck or d */
    dqn_lin in, phi, bn, v1, v2, a1, a2;
    dqn_lin va;                         /* v1 and a1 stacked: [2H, u] (v1.W then a1.W), [2H] */
    dqn_grn_offsets grn[DQN_MAX_GRN];
    dqn_tensor t[DQN_MAX_TENSORS];
    int n_tensors;
    size_t n_params;                    /* floats, including alignment padding (kept at 0) */
} dqn_layout;

dqn_status dqn_layout_build(dqn_layout *L, const dqn_arch *arch);
/* PyTorch nn.Linear-style init drawn from Philox (stream INIT, index = element offset), so every
 * backend starts from identical weights. host must hold n_params floats. */
void dqn_layout_init_params(const dqn_layout *L, uint64_t seed, float *host);
const dqn_tensor *dqn_layout_find(const dqn_layout *L, const char *name);

#endif
