/* The network of SPEC section 2 and the update of SPEC section 3, composed once from the backend
 * op table. Nothing here knows which backend runs it. */
#ifndef DQN_MODEL_MODEL_H
#define DQN_MODEL_MODEL_H
#include "backends/backend.h"
#include "health/health.h"
#include "model/layout.h"

/* A pass of at least this many rows splits the bottleneck: W_bn [z ; h] + b = W_bn[:, 0:d] z +
 * (W_bn[:, d:2d] h + b), the h half on B rows, not B*T (fewer FLOPs, no concat buffer, two graph
 * nodes more); smaller passes concatenate. */
#define DQN_BN_SPLIT_ROWS 4096

/* Activations of one forward pass over B samples x T taus (R = B*T rows); kept for backward. */
typedef struct {
    int B, T;                        /* capacity: B samples, T taus */
    float *h[DQN_MAX_GRN + 1];       /* [B, d] trunk input of block l (h[L] = trunk output) */
    float *e[DQN_MAX_GRN];           /* [B, d]   ELU(W_a h + b_a) */
    float *g[DQN_MAX_GRN];           /* [B, 2d]  W_b e + b_b */
    float *r[DQN_MAX_GRN];           /* [B, d]   h + GLU(g), LayerNorm input */
    float *mean[DQN_MAX_GRN], *rstd[DQN_MAX_GRN];   /* [B] */
    float *C;                        /* [R, n_cos] cosine features */
    float *phi;                      /* [R, d] */
    float *z;                        /* [R, d] */
    int split;                       /* the bottleneck split: hb, and no cat */
    float *cat;                      /* [R, 2d] (bottleneck, not split) */
    float *hb;                       /* [B, m] W_bn[:, d:2d] h + b_bn (bottleneck, split) */
    float *u;                        /* [R, m] (bottleneck only; else u = z) */
    float *hva;                      /* [R, 2H] head hidden (post-ReLU): value 0:H, advantage H:2H */
    float *V;                        /* [R, 1] value logits */
    float *Adv;                      /* [R, A] advantage logits */
    float *Z;                        /* [R, A] */
} dqn_fwd;

/* Gradient workspace of the one pass that is differentiated. */
typedef struct {
    float *dZ, *dV, *dAdv;           /* [R, A], [R], [R, A] */
    float *dhva;                     /* [R, 2H] */
    float *du;                       /* [R, u] */
    float *dcat;                     /* [R, 2d] (bottleneck, not split) */
    float *dus;                      /* [B, m] per-sample sums over taus of du (split) */
    float *dz, *dphi;                /* [R, d] */
    float *dh;                       /* [B, d]: dh from the IQN path to the trunk */
    float *dh_in[DQN_MAX_GRN];       /* [B, d] gradient w.r.t. GRN block l's input */
    float *de;                       /* [B, d] */
    float *dg;                       /* [B, 2d] */
    float *norms;                    /* [2] head-gradient norms (value, advantage) */
} dqn_bwd;

typedef struct {
    int B, N, Nt, K;
    dqn_target_mode mode;
    float kappa, gamma_unused;
    int bn_split_rows;               /* passes of >= this many rows split; 0: DQN_BN_SPLIT_ROWS */
    float lr, beta1, beta2, adam_eps, weight_decay, grad_clip, head_grad_clip;
    int target_period;
    float tau_target;
    uint64_t seed;
    /* numerical health (SPEC 4) */
    dqn_health_mode health;
    float guard_scale, guard_floor;
    const char *fault;               /* fault spec (health/health.h) or NULL; read at create */
    int weighted;                    /* the loss takes importance weights (prioritised replay) */
} dqn_update_cfg;

/* The health subsystem's part of a model (model_health.c); empty when health is off. */
typedef struct {
    dqn_health_mode mode;
    dqn_health_table tab;
    dqn_fault faults[DQN_HEALTH_MAX_FAULTS];
    int n_faults;
    dqn_health_block *blk;           /* backend memory */
    /* the state at the start of the update (backup) and its copy frozen at the first event (snap):
     * params, target, adam_m, adam_v, the ISV, then the batch x, xn, R, disc, act (and its
     * importance weights w when the loss takes them) */
    unsigned char *backup, *snap;
    size_t off_params, off_target, off_m, off_v, off_isv, off_x, off_xn, off_R, off_disc, off_act,
        off_w, snap_bytes;
    void *plan_heads, *plan_dcat, *plan_dz, *plan_dtrunk, *plan_dtrunk_out, *plan_commit;
    void *plan_embed;   /* phi's and z's checks: run by iqn_embed_fwd, finished by the commit */
    /* guard mode's clamp plans an op runs (model_health.c): heads' by l2_norm2, d_concat's by
     * relu_bwd_tausum, d_trunk's by the last GRN block's grn_ln_gate_bwd */
    int heads_hosted, dcat_hosted, dtrunk_hosted;
} dqn_model_health;

typedef struct {
    dqn_backend *be;
    dqn_layout L;
    /* one buffer each, same layout */
    float *params, *target, *grads, *adam_m, *adam_v;
    uint64_t *step;                  /* updates done (device scalar) */
    float *gnorm;                    /* [1] global gradient norm of the last update */
    float *loss;                     /* [1] */
    dqn_update_cfg ucfg;
    /* update-step buffers */
    int32_t *idx;                    /* [B] replay indices */
    float *w, *ps;                   /* [B] importance weights, per-sample losses (prioritised) */
    const dqn_per *per;              /* the replay's sum-tree of the recorded update, or NULL */
    float *x, *xn, *R, *disc;        /* [B, obs], [B, obs] (xn = x + B*obs), [B], [B] */
    int32_t *act, *astar;            /* [B, D] */
    float *tau, *tau_t, *tau_k;      /* [B*N], [B*Nt], [B*K] (tau_k = tau + B*N) */
    float *y;                        /* [B, D, Nt] */
    /* online on x; online on x' (K taus); target on x'. When K == N, f_on holds 2B samples,
     * x then x' in one pass, and f_sel is unused. */
    dqn_fwd f_on, f_sel, f_tgt;
    dqn_bwd bw;
    dqn_model_health h;
    void *graph_exec;                /* captured update (backends with graphs) */
} dqn_model;

dqn_status dqn_model_create(dqn_model *m, dqn_backend *be, const dqn_arch *arch,
                            const dqn_update_cfg *ucfg);
void dqn_model_destroy(dqn_model *m);
/* Initialise the online weights from the seed (Philox), copy them to the target, zero Adam. */
dqn_status dqn_model_init_weights(dqn_model *m, uint64_t seed);

dqn_status dqn_fwd_alloc(dqn_backend *be, const dqn_layout *L, dqn_fwd *f, int B, int T);
void dqn_fwd_free(dqn_backend *be, dqn_fwd *f);
/* Z [B*T, A] of the net with parameters P on x [B, obs] and taus [B*T]. nb: the first samples a
 * dqn_backward will read the pass of (0: none; the IQN embedding keeps its cosines and phi for
 * those only). phi_lane: a side lane (no side branch open) phi's layer may run on beside the
 * trunk, joined before z = h * phi; 0: none. hm: the model whose health slots this pass fills (its
 * online pass on x), else NULL. */
dqn_status dqn_forward(dqn_backend *be, const dqn_layout *L, const float *P, const float *x,
                       const float *tau, dqn_fwd *f, int B, int T, int nb, int phi_lane,
                       dqn_model *hm);
/* the side lane of phi's layer in the update's online passes and the device loop's acting pass */
enum { DQN_PHI_LANE = 2 };
/* Gradients of the loss w.r.t. P into G, given dZ in bw->dZ (and, when dueling_done, its
 * dueling_bwd in bw->dV and bw->dAdv), for the pass f on x; hm as above. */
dqn_status dqn_backward(dqn_backend *be, const dqn_layout *L, const float *P, const float *x,
                        const dqn_fwd *f, dqn_bwd *bw, float *G, int B, int T,
                        float head_grad_clip, int dueling_done, dqn_model *hm);

/* The loss and gradients of one batch already in m->x .. m->tau_k (no sampling, no optimizer,
 * no health checks). */
dqn_status dqn_model_loss_grad(dqn_model *m);

typedef struct {
    const float *obs, *next_obs, *R, *disc;  /* replay columns in backend memory */
    const int32_t *act;
    const uint32_t *size;                    /* current replay size (backend memory) */
    const dqn_per *per;                      /* the sum-tree, or NULL: uniform sampling */
} dqn_replay_view;

/* One whole update: sample, taus, forwards, loss, backward, clip, Adam, target sync, step++.
 * On a backend with graphs, the first call captures it and later calls replay the graph. */
dqn_status dqn_model_update(dqn_model *m, const dqn_replay_view *rv);
/* Does the online pass split the bottleneck (it holds 2B samples when K == N)? */
int dqn_online_pass_split(int bottleneck, int B, int N, int K, int split_rows);
/* The same update on the batch already in m->x, xn, act, R, disc (taus drawn from the counter),
 * run eagerly: `dqn health --replay` re-runs a recorded update with it. */
dqn_status dqn_model_update_loaded(dqn_model *m);

/* ---- health (model_health.c) ---- */
dqn_status dqn_model_health_create(dqn_model *m);
void dqn_model_health_destroy(dqn_model *m);
/* Zero the block and mark every "none" (event slot -1, first event updates -1). */
dqn_status dqn_model_health_reset(dqn_model *m);
/* Rebuild the health plans from h.faults and ucfg as they are now (the faults and the
 * optimizer's settings are baked into the plans at create), keeping the health block; drops a
 * captured update. */
dqn_status dqn_model_health_replan(dqn_model *m);
/* The questions the update's ops ask the health subsystem, about one slot of the table. hp is
 * the model whose health state answers, NULL (or health off) for a pass nobody watches: then
 * nothing happens and every answer is no. */
/* The slot's buffer was just written: inject its faults; run the inline check it triggers. */
dqn_status dqn_probe_slot(dqn_model *hp, int slot, float *buf, size_t n);
/* 1 if something must reach the slot's buffer before the next op reads it (a fault lands
 * there): a fused op must then run as its parts, stopping at the slot. */
int dqn_probe_seam(const dqn_model *hp, int slot);
/* The check (a health plan) the op at the slot runs itself as it reads or writes the buffer, or
 * NULL: the op hosts none. */
const void *dqn_probe_plan(const dqn_model *hp, int slot);
/* The slot table of hp's update (NULL when hp is) */
const dqn_health_table *dqn_probe_table(const dqn_model *hp);
/* m when its health is on, else NULL: the hp its update's ops pass on */
dqn_model *dqn_model_probe(dqn_model *m);
/* The optimizer step with the checks of every slot that is not checked inline, the bookkeeping
 * and the update's resolution, in one op (the commit plan). */
dqn_status dqn_model_health_commit(dqn_model *m);
/* The snapshot frozen at the first event (h.snap_bytes bytes) to the host; and loaded back as the
 * live state, ISV, batch and counter, so that dqn_model_update_loaded re-runs that update. */
dqn_status dqn_model_health_read_snapshot(dqn_model *m, void *host);
dqn_status dqn_model_health_load_snapshot(dqn_model *m, const void *host, uint64_t update);

#endif
