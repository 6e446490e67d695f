/* The backend op table: every op the model, the loss, the optimizer and the replay need, listed
 * once in ops.def and implemented per backend (cpu/, cuda/). The model (src/model) composes only these,
 * so there is one network definition. Pointers are backend memory (host for CPU, device for CUDA).
 * Every op is asynchronous with respect to the host on CUDA (stream-ordered, capturable into a
 * graph: no allocation, no sync, no pageable copies inside). Scalars that change between graph
 * replays (the update counter, the replay size, the gradient norm) live in backend memory and are
 * passed by pointer.
 *
 * Layouts: row-major. A linear layer's W is [out, in] (PyTorch's), y = x W^T + b.
 * Rows of per-tau tensors are ordered (sample s, tau i): row s*T + i.
 * Branches: D branches of sizes n_1..n_D packed into A = sum n_b columns; branch b occupies
 * columns [off_b, off_b + n_b). Actions are int32 [B, D], each in [0, n_b).
 */
#ifndef DQN_BACKEND_H
#define DQN_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "dqn.h"
#include "health/health_block.h"

#define DQN_MAX_BRANCHES 16

typedef struct dqn_backend dqn_backend;

typedef struct {
    int D;                        /* number of branches */
    int n[DQN_MAX_BRANCHES];      /* branch sizes */
    int off[DQN_MAX_BRANCHES];    /* column offsets, off[0] = 0 */
    int A;                        /* total columns */
} dqn_branches;

#define DQN_TRUNK_MAX_GRN 8       /* the model's DQN_MAX_GRN */
#define DQN_SIDE_LANES 5          /* side_begin's lanes (ops.def) */

/* One GRN block of the trunk's forward (trunk_fwd): its parameters and the buffers it writes. */
typedef struct {
    const float *W_a, *b_a;       /* [d, d], [d] */
    const float *W_b, *b_b;       /* [2d, d], [2d] */
    const float *gamma, *beta;    /* [d] */
    float *e, *g, *r, *y;         /* [M, d] ELU(W_a h + b_a), [M, 2d], [M, d] h + GLU(g), LN(r) */
    float *mean, *rstd;           /* [M] */
} dqn_grn_io;

/* The trunk's forward: x [M, obs] through the input layer (W_in [d, obs]) into h0 [M, d], then
 * L GRN blocks, block l reading the previous one's y (h0 for the first). W_in NULL: no input
 * layer, h0 [M, d] is the first block's input (read, not written). */
typedef struct {
    const float *x, *W_in, *b_in;
    float *h0;
    dqn_grn_io grn[DQN_TRUNK_MAX_GRN];
    int M, obs, d, L;
} dqn_trunk_io;

/* The targets' inputs and output (iqn_targets' arguments; targets_huber). */
typedef struct {
    const float *Zt;              /* [B*Nt, A] the target net on x' */
    const int32_t *astar;         /* [B, D] */
    const float *R, *discount;    /* [B] */
    float *y;                     /* [B, 1, Nt] (mean) or [B, D, Nt] (independent) */
} dqn_target_io;

typedef enum { DQN_TARGET_MEAN = 0, DQN_TARGET_INDEPENDENT = 1 } dqn_target_mode;
typedef enum { DQN_MATH_FP32 = 0, DQN_MATH_TF32 = 1 } dqn_math_mode;
typedef enum { DQN_ACT_NONE = 0, DQN_ACT_RELU = 1, DQN_ACT_ELU = 2 } dqn_act;

/* One replay sample for sample_batch: the replay's arrays (read) and the batch it fills. */
typedef struct {
    const float *obs, *next_obs, *R, *disc;   /* [size, obs_dim] x2, [size] x2 */
    const int32_t *act;                       /* [size, D] */
    const uint32_t *size;                     /* rows filled (backend memory) */
    int obs_dim, D;
    const int32_t *idx;   /* [B] the rows to take (prioritised replay), or NULL: uniform draws */
} dqn_sample_src;
typedef struct {
    int32_t *idx, *act;          /* [B], [B, D] */
    float *x, *xn, *R, *disc;    /* [B, obs_dim] x2, [B] x2 */
} dqn_sample_dst;

/* Prioritised replay's sum-tree and its settings (replay/sumtree.h has the layout and the
 * formulas both backends share). */
typedef struct {
    float *tree;                  /* [2 * leaves] backend memory */
    int leaves, cap;              /* leaves: a power of two >= cap */
    const uint32_t *size;         /* rows filled (backend memory) */
    float alpha, beta0, eps;      /* priority = (loss + eps)^alpha; beta from beta0 to 1 */
    uint64_t beta_updates;        /* updates over which beta reaches 1 (0: 1 from the start) */
} dqn_per;

#define DQN_MAX_DRAWS 4
/* Up to DQN_MAX_DRAWS uniform arrays drawn at once (the taus of one update). */
typedef struct {
    int count;
    float *out[DQN_MAX_DRAWS];
    size_t n[DQN_MAX_DRAWS];
    uint32_t stream[DQN_MAX_DRAWS];
    uint64_t stride[DQN_MAX_DRAWS];
} dqn_draws;

/* The envs the env_step op runs: the classic control ones (their dynamics: envs/classic.h) and
 * the market (envs/market_step.h). */
typedef enum {
    DQN_ENV_CARTPOLE = 0,
    DQN_ENV_ACROBOT = 1,
    DQN_ENV_MOUNTAINCAR = 2,
    DQN_ENV_MARKET = 3
} dqn_env_kind;
/* Which sin, cos and square the dynamics use: the correctly rounded ones of envs/classic_math.h
 * (every backend, the same bits), or libm's (the CPU only: the CPU envs' bits, Gymnasium's). */
typedef enum { DQN_ENV_MATH_CR = 0, DQN_ENV_MATH_LIBM = 1 } dqn_env_math;

/* The market env's read-only data for env_step, as its host context (envs/market.h) holds it:
 * the tables in backend memory, the sizes and costs by value. The struct itself is host memory,
 * read when the op is called (a captured graph keeps those values). */
typedef struct {
    const float *z;             /* [rows, cols] the standardised table */
    const double *price;        /* [rows, assets] */
    int rows, cols, assets, levels, window;
    /* episodes start at a uniform row of [first, end - episode_len] */
    int first, end, episode_len;
    double cost, holding, reward_scale;
} dqn_market_dev;

/* n slots of one env, struct of arrays in backend memory, laid out as dqn_vecenv's buffers:
 * slot i draws its resets from the Philox stream (seed, stream_base + i) at index counter[i]
 * onwards. state, counter, ep_len and ep_return carry from step to step; the rest is what one
 * step writes (a caller may point them elsewhere on every call). */
typedef struct {
    dqn_env_kind kind;
    dqn_env_math math;
    int n;
    int max_steps;              /* truncation after this many steps (0: never) */
    uint64_t seed;
    uint32_t stream_base;
    /* [n] slots of the env's state_size bytes, dqn_vecenv's layout: 4 doubles (cartpole,
     * acrobot), 2 (mountaincar), a dqn_market_state (market: envs/market_step.h) */
    void *state;
    const dqn_market_dev *market;   /* DQN_ENV_MARKET's data (other kinds: unused) */
    uint64_t *counter;          /* [n] each slot's next draw */
    int32_t *ep_len;            /* [n] steps in the current episode */
    double *ep_return;          /* [n] return of the current episode */
    float *obs;                 /* [n, obs_dim] the observation after the step (and reset) */
    float *final_obs;           /* [n, obs_dim] the observation the step produced */
    float *reward;              /* [n] */
    uint8_t *terminated;        /* [n] */
    uint8_t *truncated;         /* [n] */
    double *done_return;        /* [n] the return of an episode that ended here, else 0 */
    int32_t *done_len;          /* [n] its length, else 0 */
} dqn_env_io;

/* explore's settings and counters: epsilon-greedy over n envs' D branches (the trainer's act).
 * eps(t) = start + (end - start) * min(1, t / span) at env step t (span <= 0: the factor is 1),
 * in double (train/explore.h). The counters live in backend memory so that a captured graph
 * reads the step it runs at. */
typedef struct {
    int n;                      /* envs */
    uint64_t seed;
    double eps_start, eps_end, eps_span;
    uint64_t *act_steps;        /* acting steps so far: keys the draws */
    int64_t *env_steps;         /* env steps so far: epsilon's t */
    uint64_t *tau_step;         /* the actor's tau counter (may be NULL) */
} dqn_explore_io;

/* The n-step windows of n_envs envs in backend memory, laid out as replay/nstep.h's: env e's
 * entries are rows e*n .. e*n + n - 1, a ring whose oldest entry is head[e], count[e] long. */
typedef struct {
    int n_envs, n, obs_dim, D;
    double gamma;
    float *obs;                 /* [n_envs * n, obs_dim] */
    int32_t *act;               /* [n_envs * n, D] */
    float *rew;                 /* [n_envs * n] */
    int32_t *head, *count;      /* [n_envs] */
} dqn_nstep_win;

/* The training episodes' record in backend memory, as the trainer keeps it on the host: the
 * returns of the last cap finished episodes in a ring (recent[ctr[2]] is the next written) and
 * ctr = {episodes finished, ring entries filled (at most cap), next ring entry}. */
typedef struct {
    int cap;
    double *recent;             /* [cap] */
    uint64_t *ctr;              /* [3] */
} dqn_episodes;

/* The replay ring in backend memory (replay/replay.h's arrays) with its position and size. */
typedef struct {
    int cap, obs_dim, D;
    float *obs, *next_obs, *R, *disc;   /* [cap, obs_dim] x2, [cap] x2 */
    int32_t *act;                       /* [cap, D] */
    uint32_t *size, *pos;               /* rows filled, next row to write */
    const dqn_per *per;                 /* the sum-tree (prioritised replay), or NULL */
} dqn_ring;

/* The op table: one function pointer per entry of ops.def (each op's contract is there), in
 * that order, after the backend's name. */
typedef struct dqn_ops {
    const char *name;
#define DQN_OP(name, ret, kind, params, args, doc) ret(*name) params;
#include "backends/ops.def"
#undef DQN_OP
} dqn_ops;

struct dqn_backend {
    const dqn_ops *ops;
    dqn_math_mode math;
    void *impl;   /* backend-private state (streams, handles) */
};

/* Constructors. The CUDA one returns DQN_ERR_UNSUPPORTED when built without CUDA or when no
 * device is present, with a message in dqn_last_error(). */
dqn_status dqn_backend_cpu_create(dqn_backend **out);
dqn_status dqn_backend_cuda_create(dqn_backend **out, int device_index, dqn_math_mode math);
/* 1 when a CUDA device is usable (0 when built without CUDA) */
int dqn_backend_cuda_available(void);

void dqn_branches_init(dqn_branches *br, int D, const int *sizes);

/* trunk_fwd as its ops through be's table (op_sequences.c): linear_fwd, then per GRN block
 * linear_act_fwd (ELU), linear_fwd, grn_gate_ln_fwd */
dqn_status dqn_trunk_fwd_seq(dqn_backend *be, const dqn_trunk_io *t);

/* targets_huber as its ops through be's table (op_sequences.c): iqn_targets, quantile_huber,
 * [dueling_bwd] */
dqn_status dqn_targets_huber_seq(dqn_backend *be, const dqn_target_io *t, const float *Z,
                                 const float *tau, const int32_t *act, const float *w,
                                 float *loss_out, float *dZ, float *per_sample, float *dV,
                                 float *dAdv, int B, int N, int Nt, const dqn_branches *br,
                                 dqn_target_mode mode, float kappa);

/* iqn_embed_fwd as its three ops through be's table (op_sequences.c): cos_embed, linear_act_fwd
 * (ReLU), iqn_fwd; every row of C and phi written */
dqn_status dqn_iqn_embed_seq(dqn_backend *be, const float *tau, const float *W, const float *b,
                             const float *h, float *C, float *phi, float *z, float *cat, int B,
                             int T, int n_cos, int d);

#endif
