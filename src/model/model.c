#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"

static dqn_status falloc(dqn_backend *be, float **p, size_t n) {
    return be->ops->alloc(be, (void **)p, (n ? n : 1) * sizeof(float));
}
static void ffree(dqn_backend *be, void *p) {
    if (p) be->ops->free(be, p);
}

static dqn_status fwd_alloc(dqn_backend *be, const dqn_layout *L, dqn_fwd *f, int B, int T,
                           int split_rows) {
    memset(f, 0, sizeof *f);
    f->B = B;
    f->T = T;
    f->split = L->arch.bottleneck > 0 && (size_t)B * (size_t)T >= (size_t)split_rows;
    const dqn_arch *a = &L->arch;
    size_t d = (size_t)a->d, R = (size_t)B * (size_t)T, H = (size_t)a->head_hidden;
    size_t A = (size_t)a->br.A;
    for (int l = 0; l <= a->grn_blocks; l++) DQN_TRY(falloc(be, &f->h[l], (size_t)B * d));
    for (int l = 0; l < a->grn_blocks; l++) {
        DQN_TRY(falloc(be, &f->e[l], (size_t)B * d));
        DQN_TRY(falloc(be, &f->g[l], (size_t)B * 2 * d));
        DQN_TRY(falloc(be, &f->r[l], (size_t)B * d));
        DQN_TRY(falloc(be, &f->mean[l], (size_t)B));
        DQN_TRY(falloc(be, &f->rstd[l], (size_t)B));
    }
    DQN_TRY(falloc(be, &f->C, R * (size_t)a->n_cos));
    DQN_TRY(falloc(be, &f->phi, R * d));
    DQN_TRY(falloc(be, &f->z, R * d));
    if (a->bottleneck > 0) {
        if (f->split) DQN_TRY(falloc(be, &f->hb, (size_t)B * (size_t)a->bottleneck));
        else DQN_TRY(falloc(be, &f->cat, R * 2 * d));
        DQN_TRY(falloc(be, &f->u, R * (size_t)a->bottleneck));
    }
    DQN_TRY(falloc(be, &f->hva, R * 2 * H));
    DQN_TRY(falloc(be, &f->V, R));
    DQN_TRY(falloc(be, &f->Adv, R * A));
    DQN_TRY(falloc(be, &f->Z, R * A));
    return DQN_OK;
}

int dqn_online_pass_split(int bottleneck, int B, int N, int K, int split_rows) {
    size_t rows = (size_t)(K == N ? 2 : 1) * (size_t)B * (size_t)N;
    return bottleneck > 0 && rows >= (size_t)(split_rows > 0 ? split_rows : DQN_BN_SPLIT_ROWS);
}

dqn_status dqn_fwd_alloc(dqn_backend *be, const dqn_layout *L, dqn_fwd *f, int B, int T) {
    return fwd_alloc(be, L, f, B, T, DQN_BN_SPLIT_ROWS);
}

void dqn_fwd_free(dqn_backend *be, dqn_fwd *f) {
    for (int l = 0; l <= DQN_MAX_GRN; l++) ffree(be, f->h[l]);
    for (int l = 0; l < DQN_MAX_GRN; l++) {
        ffree(be, f->e[l]); ffree(be, f->g[l]); ffree(be, f->r[l]);
        ffree(be, f->mean[l]); ffree(be, f->rstd[l]);
    }
    ffree(be, f->C); ffree(be, f->phi); ffree(be, f->z); ffree(be, f->cat); ffree(be, f->hb);
    ffree(be, f->u);
    ffree(be, f->hva); ffree(be, f->V); ffree(be, f->Adv); ffree(be, f->Z);
    memset(f, 0, sizeof *f);
}

static dqn_status bwd_alloc(dqn_backend *be, const dqn_layout *L, dqn_bwd *w, int B, int T,
                           int split) {
    memset(w, 0, sizeof *w);
    const dqn_arch *a = &L->arch;
    size_t d = (size_t)a->d, R = (size_t)B * (size_t)T, H = (size_t)a->head_hidden;
    size_t A = (size_t)a->br.A, U = (size_t)L->u;
    DQN_TRY(falloc(be, &w->dZ, R * A));
    DQN_TRY(falloc(be, &w->dV, R));
    DQN_TRY(falloc(be, &w->dAdv, R * A));
    DQN_TRY(falloc(be, &w->dhva, R * 2 * H));
    DQN_TRY(falloc(be, &w->du, R * U));
    if (a->bottleneck > 0 && split) DQN_TRY(falloc(be, &w->dus, (size_t)B * U));
    else if (a->bottleneck > 0) DQN_TRY(falloc(be, &w->dcat, R * 2 * d));
    DQN_TRY(falloc(be, &w->dz, R * d));
    DQN_TRY(falloc(be, &w->dphi, R * d));
    DQN_TRY(falloc(be, &w->dh, (size_t)B * d));
    for (int l = 0; l < L->arch.grn_blocks; l++) DQN_TRY(falloc(be, &w->dh_in[l], (size_t)B * d));
    DQN_TRY(falloc(be, &w->de, (size_t)B * d));
    DQN_TRY(falloc(be, &w->dg, (size_t)B * 2 * d));
    DQN_TRY(falloc(be, &w->norms, 2));
    return DQN_OK;
}

static void bwd_free(dqn_backend *be, dqn_bwd *w) {
    float **p = (float **)w;
    for (size_t k = 0; k < sizeof *w / sizeof(float *); k++) ffree(be, p[k]);
    memset(w, 0, sizeof *w);
}

/* ---------------------------------------------------------------- forward */

/* A slot of the health table, by its field name, and the questions about it (dqn_probe_*): the
 * slots cover the online pass on x (its first hB samples, also when x' shares the pass). */
#define SLOT_ID(hp, field) ((hp) ? dqn_probe_table(hp)->field : -1)
#define SLOT(hp, field, buf, n) DQN_TRY(dqn_probe_slot((hp), SLOT_ID(hp, field), (buf), (size_t)(n)))
#define SEAM(hp, field) dqn_probe_seam((hp), SLOT_ID(hp, field))
#define PLAN(hp, field) dqn_probe_plan((hp), SLOT_ID(hp, field))

_Static_assert(DQN_MAX_GRN == DQN_TRUNK_MAX_GRN, "the trunk op holds every GRN block");

/* The side branch's ops (backends/ops.def), no-ops on a backend without one (it runs in order). */
static dqn_status side_begin(dqn_backend *be, int lane) {
    return be->ops->side_begin ? be->ops->side_begin(be, lane) : DQN_OK;
}
static dqn_status side_end(dqn_backend *be) {
    return be->ops->side_end ? be->ops->side_end(be) : DQN_OK;
}
static dqn_status side_join(dqn_backend *be, int lane) {
    return be->ops->side_join ? be->ops->side_join(be, lane) : DQN_OK;
}

/* The side lanes of the backward's weight gradients: the heads' input layer and the bottleneck,
 * phi's layer, and the trunk's layers in turn over the rest. Each lane runs its GEMMs one after
 * another, so lanes of their own let the trunk's small ones start as their inputs are ready
 * rather than after phi's long reduction (R = B x N rows) or after one another. */
enum {
    LANE_HEADS = 1,
    LANE_PHI = DQN_PHI_LANE,
    LANE_TRUNK = 3,
    TRUNK_LANES = DQN_SIDE_LANES - 2
};
/* the forward's target pass, done before the backward puts anything on the lanes */
enum { LANE_TARGET = LANE_HEADS };
/* the lane of the trunk's k-th weight gradient in the backward's order (block l's W_b and W_a are
 * k = 2 (grn_blocks - 1 - l) and the next; W_in's is the last) */
static int trunk_lane(int k) { return LANE_TRUNK + k % TRUNK_LANES; }

dqn_status dqn_forward(dqn_backend *be, const dqn_layout *L, const float *P, const float *x,
                       const float *tau, dqn_fwd *f, int B, int T, int nb, int phi_lane,
                       dqn_model *hm) {
    const dqn_arch *a = &L->arch;
    int d = a->d, H = a->head_hidden, R = B * T, A = a->br.A;
    /* the slots cover the online pass on x: its first hB samples */
    size_t hB = hm ? (size_t)hm->ucfg.B : (size_t)B, hR = hB * (size_t)T;
    /* phi's layer reads only the taus: where iqn_embed_fwd would run it as its own ops anyway,
     * it goes to side lane phi_lane, beside the trunk */
    const int phi_side = phi_lane > 0 && be->ops->side_begin && !SEAM(hm, phi) && !SEAM(hm, z) &&
                         !(be->ops->iqn_embed_hosts &&
                           be->ops->iqn_embed_hosts(be, B, T, a->n_cos, d));
    if (phi_side) {
        DQN_TRY(side_begin(be, phi_lane));
        DQN_TRY(be->ops->cos_embed(be, tau, f->C, R, a->n_cos));
        DQN_TRY(be->ops->linear_act_fwd(be, f->C, P + L->phi.W, P + L->phi.b, f->phi, R, a->n_cos,
                                        d, DQN_ACT_RELU));
        DQN_TRY(side_end(be));
    }
    /* trunk: h0 = W_in x + b_in; GRN blocks. One op, unless a fault must land between blocks */
    dqn_trunk_io t = {.x = x, .W_in = P + L->in.W, .b_in = P + L->in.b, .h0 = f->h[0], .M = B,
                      .obs = a->obs_dim, .d = d, .L = a->grn_blocks};
    for (int l = 0; l < a->grn_blocks; l++) {
        const dqn_grn_offsets *g = &L->grn[l];
        t.grn[l] = (dqn_grn_io){P + g->a.W, P + g->a.b, P + g->b.W,  P + g->b.b,
                                P + g->gamma, P + g->beta, f->e[l], f->g[l],
                                f->r[l],      f->h[l + 1], f->mean[l], f->rstd[l]};
    }
    /* a seam at a block's output but the last's: the blocks run one by one */
    int by_block = 0;
    for (int l = 0; l + 1 < a->grn_blocks; l++) by_block |= SEAM(hm, grn_out[l]);
    dqn_trunk_io first = t;
    if (by_block) first.L = 0;   /* the input layer alone, then each block from the h before it */
    DQN_TRY(be->ops->trunk_fwd(be, &first));
    for (int l = 0; l < a->grn_blocks; l++) {
        if (by_block) {
            dqn_trunk_io one = {.h0 = f->h[l], .M = B, .d = d, .L = 1};
            one.grn[0] = t.grn[l];
            DQN_TRY(be->ops->trunk_fwd(be, &one));
        }
        SLOT(hm, grn_out[l], f->h[l + 1], hB * d);
    }
    const float *h = f->h[a->grn_blocks];
    /* IQN: phi = ReLU(W_phi cos(pi k tau) + b_phi), z = h * phi; C and phi are needed only for
     * the nb samples a backward reads */
    const int m = a->bottleneck;
    float *cat = m > 0 && !f->split ? f->cat : NULL;
    /* phi's and z's checks, where the op computes them as it writes the buffers (model_health.c) */
    const void *hplan = PLAN(hm, phi);
    if (phi_side) {
        DQN_TRY(side_join(be, phi_lane));
        SLOT(hm, phi, f->phi, hR * d);
        DQN_TRY(be->ops->iqn_fwd(be, h, f->phi, f->z, cat, B, T, d));
        SLOT(hm, z, f->z, hR * d);
        if (hplan) DQN_TRY(be->ops->health_check(be, hplan));
    } else if (SEAM(hm, phi) || SEAM(hm, z)) {
        DQN_TRY(be->ops->cos_embed(be, tau, f->C, R, a->n_cos));
        DQN_TRY(be->ops->linear_act_fwd(be, f->C, P + L->phi.W, P + L->phi.b, f->phi, R, a->n_cos, d,
                                    DQN_ACT_RELU));
        SLOT(hm, phi, f->phi, hR * d);
        DQN_TRY(be->ops->iqn_fwd(be, h, f->phi, f->z, cat, B, T, d));
        SLOT(hm, z, f->z, hR * d);
        if (hplan) DQN_TRY(be->ops->health_check(be, hplan));
    } else {
        DQN_TRY(be->ops->iqn_embed_fwd(be, tau, P + L->phi.W, P + L->phi.b, h, f->C, f->phi, f->z, cat,
                                   B, T, a->n_cos, d, nb * T, hplan));
        SLOT(hm, phi, f->phi, hR * d);
        SLOT(hm, z, f->z, hR * d);
    }
    if (m > 0 && !f->split) SLOT(hm, cat, f->cat, hR * 2 * d);
    const float *u = m > 0 ? f->u : f->z;
    if (m > 0 && f->split) {
        /* W_bn [z ; h] + b = W_bn[:, 0:d] z + (W_bn[:, d:2d] h + b): the h half on B rows */
        DQN_TRY(be->ops->linear_ld_fwd(be, h, P + L->bn.W + d, 2 * d, P + L->bn.b, f->hb, B, d, m,
                                   DQN_ACT_NONE));
        DQN_TRY(be->ops->linear_ld_fwd(be, f->z, P + L->bn.W, 2 * d, NULL, f->u, R, d, m,
                                   DQN_ACT_NONE));
        DQN_TRY(be->ops->bcast_add_act(be, f->hb, f->u, B, T, m, DQN_ACT_RELU));
    } else if (m > 0) {
        DQN_TRY(be->ops->linear_act_fwd(be, f->cat, P + L->bn.W, P + L->bn.b, f->u, R, 2 * d, m,
                                    DQN_ACT_RELU));
    }
    if (m > 0) SLOT(hm, bn_out, f->u, hR * m);
    /* dueling heads: v1 and a1 as one stacked layer, then v2, a2 and the combine in one op */
    DQN_TRY(be->ops->linear_act_fwd(be, u, P + L->va.W, P + L->va.b, f->hva, R, L->u, 2 * H,
                                DQN_ACT_RELU));
    DQN_TRY(be->ops->heads_fwd(be, f->hva, P + L->v2.W, P + L->v2.b, P + L->a2.W, P + L->a2.b, f->V,
                           f->Adv, f->Z, R, H, &a->br));
    SLOT(hm, value, f->V, hR);
    SLOT(hm, adv, f->Adv, hR * A);
    SLOT(hm, Z, f->Z, hR * A);
    return DQN_OK;
}

/* ---------------------------------------------------------------- backward */

/* From this many dphi elements (16 MiB) iqn_bwd sums phi's bias gradient as it writes dphi; below,
 * linear_bwd's GEMM gives it with the weight gradient (cublasLt's BGRADB, the own dW kernel) at no
 * extra node */
#define PHI_BIAS_IN_IQN_ELEMS ((size_t)1 << 22)

/* A layer's backward with its weight gradient (and bias gradient) on side lane `lane` where the
 * backend has side branches and finds the GEMM worth it (side_dw): dX, on the main lane, is the
 * chain to the layers below, while dW and db are read only by the optimizer (and the health
 * checks of the gradient), after dqn_backward's last side_join. Elsewhere the one op. ldw: W's
 * row stride, as linear_ld_bwd's; ld 0: linear_bwd (W's rows K apart). */
static dqn_status lin_bwd_at(dqn_backend *be, int lane, const float *X, const float *W, int ldw,
                             int ld, const float *dY, float *dX, int acc, float *dW, float *db,
                             int M, int K, int N) {
    if (!be->ops->side_begin || !be->ops->side_dw || !be->ops->side_dw(be, M, K, N))
        return ld ? be->ops->linear_ld_bwd(be, X, W, ldw, dY, dX, acc, dW, db, M, K, N)
                  : be->ops->linear_bwd(be, X, W, dY, dX, dW, db, M, K, N);
    if (dX) DQN_TRY(be->ops->linear_ld_bwd(be, X, W, ldw, dY, dX, acc, NULL, NULL, M, K, N));
    DQN_TRY(side_begin(be, lane));
    DQN_TRY(be->ops->linear_ld_bwd(be, X, W, ldw, dY, NULL, 0, dW, db, M, K, N));
    return side_end(be);
}

static dqn_status lin_ld_bwd(dqn_backend *be, int lane, const float *X, const float *W, int ldw,
                             const float *dY, float *dX, int acc, float *dW, float *db, int M,
                             int K, int N) {
    return lin_bwd_at(be, lane, X, W, ldw, 1, dY, dX, acc, dW, db, M, K, N);
}

static dqn_status lin_bwd(dqn_backend *be, int lane, const float *X, const float *W,
                          const float *dY, float *dX, float *dW, float *db, int M, int K, int N) {
    return lin_bwd_at(be, lane, X, W, K, 0, dY, dX, 0, dW, db, M, K, N);
}

dqn_status dqn_backward(dqn_backend *be, const dqn_layout *L, const float *P, const float *x,
                        const dqn_fwd *f, dqn_bwd *w, float *G, int B, int T,
                        float head_grad_clip, int dueling_done, dqn_model *hm) {
    const dqn_arch *a = &L->arch;
    int d = a->d, H = a->head_hidden, R = B * T, U = L->u, A = a->br.A;
    const float *u = a->bottleneck > 0 ? f->u : f->z;
    if (!dueling_done) DQN_TRY(be->ops->dueling_bwd(be, w->dZ, w->dV, w->dAdv, R, &a->br));
    SLOT(hm, d_value, w->dV, R);
    SLOT(hm, d_adv, w->dAdv, (size_t)R * A);
    /* SPEC 4: the whole-batch L2 norms of d_value_logits and d_adv_logits; heads_bwd applies
     * the clip as it reads them (dV and dAdv stay unclipped). In guard mode the norms' op runs
     * their clamp as it reads them (model_health.c). */
    const float clip = head_grad_clip > 0 ? head_grad_clip : 0.0f;
    if (clip > 0)
        DQN_TRY(be->ops->l2_norm2(be, w->dV, (size_t)R, w->dAdv, (size_t)R * A, w->norms,
                                  PLAN(hm, d_adv)));
    DQN_TRY(be->ops->heads_bwd(be, f->hva, P + L->v2.W, P + L->a2.W, w->dV, w->dAdv,
                           clip > 0 ? w->norms : NULL, clip, w->dhva, G + L->va.b, G + L->v2.W,
                           G + L->v2.b, G + L->a2.W, G + L->a2.b, R, H, A));
    /* the stacked v1/a1 layer (its bias gradient came with dhva): one GEMM gives du, the sum of
     * both heads' input gradients */
    DQN_TRY(lin_bwd(be, LANE_HEADS, u, P + L->va.W, w->dhva, w->du, G + L->va.W, NULL, R, U,
                    2 * H));
    /* bottleneck: du -> dcat, or split: du -> the per-sample sums dus, and dz */
    const float *h = f->h[a->grn_blocks];
    const int bn = a->bottleneck > 0, split = bn && f->split;
    if (split) {
        DQN_TRY(be->ops->relu_bwd_tausum(be, f->u, w->du, w->dus, B, T, U, PLAN(hm, d_concat)));
        SLOT(hm, d_concat, w->dus, (size_t)B * U);
        DQN_TRY(lin_ld_bwd(be, LANE_HEADS, f->z, P + L->bn.W, 2 * d, w->du, w->dz, 0,
                           G + L->bn.W, NULL, R, d, U));
        SLOT(hm, d_z, w->dz, (size_t)R * d);
    } else if (bn) {
        DQN_TRY(be->ops->relu_bwd(be, f->u, w->du, w->du, (size_t)R * U));
        DQN_TRY(lin_bwd(be, LANE_HEADS, f->cat, P + L->bn.W, w->du, w->dcat, G + L->bn.W,
                        G + L->bn.b, R, 2 * d, U));
        SLOT(hm, d_concat, w->dcat, (size_t)R * 2 * d);
    } else {
        SLOT(hm, d_z, w->du, (size_t)R * d);
    }
    /* z = h * phi (and cat = [z, h]): dz, the dh the IQN path hands to the trunk, and dphi
     * through phi's ReLU; with many rows also phi's bias gradient, so that its column sum need not
     * read dphi once more (the same bits either way on the CPU) */
    float *phi_b = (size_t)R * (size_t)d >= PHI_BIAS_IN_IQN_ELEMS ? G + L->phi.b : NULL;
    /* d_z's check (and in guard mode with the split, its clamp) as iqn_bwd reads it */
    const void *hplan = PLAN(hm, d_z);
    DQN_TRY(be->ops->iqn_bwd(be, bn && !split ? w->dcat : NULL, h, f->phi, bn ? w->dz : w->du, w->dh,
                         w->dphi, phi_b, B, T, d, hplan));
    if (bn && !split) SLOT(hm, d_z, w->dz, (size_t)R * d);
    /* split: the h half adds dus W_bn[:, d:2d] to dh; its weight and b_bn gradients from dus */
    if (split)
        DQN_TRY(lin_ld_bwd(be, LANE_HEADS, h, P + L->bn.W + d, 2 * d, w->dus, w->dh, 1,
                           G + L->bn.W + d, G + L->bn.b, B, d, U));
    SLOT(hm, d_trunk, w->dh, (size_t)B * d);
    DQN_TRY(lin_bwd(be, LANE_PHI, f->C, P + L->phi.W, w->dphi, NULL, G + L->phi.W,
                    phi_b ? NULL : G + L->phi.b, R, a->n_cos, d));
    /* trunk, last block first: block l's output gradient in, its input gradient to dh_in[l] */
    const float *dout = w->dh;
    for (int l = a->grn_blocks - 1; l >= 0; l--) {
        const dqn_grn_offsets *g = &L->grn[l];
        /* the weight gradients of the block after this one read dg and de, which this one
         * rewrites */
        const int k = 2 * (a->grn_blocks - 1 - l);
        if (l + 1 < a->grn_blocks) {
            DQN_TRY(side_join(be, trunk_lane(k - 2)));
            DQN_TRY(side_join(be, trunk_lane(k - 1)));
        }
        /* LayerNorm and gate: the residual's gradient w.r.t. h into dh_in[l], the gate's into
         * dg; fc1's input gradient is then added to it by its GEMM (the residual's sum). The
         * last block reads d_trunk: in guard mode it runs d_trunk's clamp first. */
        const void *ht = l == a->grn_blocks - 1 ? PLAN(hm, d_trunk) : NULL;
        DQN_TRY(be->ops->grn_ln_gate_bwd(be, f->r[l], P + g->gamma, f->mean[l], f->rstd[l], f->g[l],
                                     dout, w->dh_in[l], w->dg, G + g->gamma, G + g->beta, B, d,
                                     ht));
        DQN_TRY(lin_bwd(be, trunk_lane(k), f->e[l], P + g->b.W, w->dg, w->de, G + g->b.W,
                        G + g->b.b, B, d, 2 * d));
        DQN_TRY(be->ops->elu_bwd(be, f->e[l], w->de, w->de, (size_t)B * d));
        DQN_TRY(lin_ld_bwd(be, trunk_lane(k + 1), f->h[l], P + g->a.W, d, w->de, w->dh_in[l], 1,
                           G + g->a.W, G + g->a.b, B, d, d));
        SLOT(hm, grn_din[l], w->dh_in[l], (size_t)B * d);
        dout = w->dh_in[l];
    }
    DQN_TRY(lin_bwd(be, trunk_lane(2 * a->grn_blocks), x, P + L->in.W, dout, NULL, G + L->in.W,
                    G + L->in.b, B, a->obs_dim, d));
    DQN_TRY(side_join(be, 0));
    for (int k = 0; hm && k < L->n_tensors; k++) SLOT(hm, grad[k], G + L->t[k].offset, L->t[k].size);
    return DQN_OK;
}

/* ---------------------------------------------------------------- model */

dqn_status dqn_model_create(dqn_model *m, dqn_backend *be, const dqn_arch *arch,
                            const dqn_update_cfg *uc) {
    memset(m, 0, sizeof *m);
    m->be = be;
    m->ucfg = *uc;
    DQN_TRY(dqn_layout_build(&m->L, arch));
    size_t n = m->L.n_params;
    int B = uc->B, D = arch->br.D, obs = arch->obs_dim;
    DQN_TRY(falloc(be, &m->params, n));
    DQN_TRY(falloc(be, &m->target, n));
    DQN_TRY(falloc(be, &m->grads, n));
    DQN_TRY(falloc(be, &m->adam_m, n));
    DQN_TRY(falloc(be, &m->adam_v, n));
    DQN_TRY(be->ops->alloc(be, (void **)&m->step, sizeof(uint64_t)));
    DQN_TRY(falloc(be, &m->gnorm, 1));
    DQN_TRY(falloc(be, &m->loss, 1));
    DQN_TRY(be->ops->alloc(be, (void **)&m->idx, (size_t)B * sizeof(int32_t)));
    DQN_TRY(falloc(be, &m->w, (size_t)2 * B));
    m->ps = m->w + B;
    /* x then x', and tau then tau_k, adjacent: with K == N one online pass covers both */
    DQN_TRY(falloc(be, &m->x, (size_t)2 * B * obs));
    m->xn = m->x + (size_t)B * obs;
    DQN_TRY(falloc(be, &m->R, (size_t)B));
    DQN_TRY(falloc(be, &m->disc, (size_t)B));
    DQN_TRY(be->ops->alloc(be, (void **)&m->act, (size_t)B * D * sizeof(int32_t)));
    DQN_TRY(be->ops->alloc(be, (void **)&m->astar, (size_t)B * D * sizeof(int32_t)));
    DQN_TRY(falloc(be, &m->tau, (size_t)B * (uc->N + uc->K)));
    m->tau_k = m->tau + (size_t)B * uc->N;
    DQN_TRY(falloc(be, &m->tau_t, (size_t)B * uc->Nt));
    DQN_TRY(falloc(be, &m->y, (size_t)B * D * uc->Nt));
    int joint = uc->K == uc->N, split = uc->bn_split_rows > 0 ? uc->bn_split_rows : DQN_BN_SPLIT_ROWS;
    /* (dqn_online_pass_split says the same of f_on, for the health table of a config) */
    DQN_TRY(fwd_alloc(be, &m->L, &m->f_on, joint ? 2 * B : B, uc->N, split));
    if (!joint) DQN_TRY(fwd_alloc(be, &m->L, &m->f_sel, B, uc->K, split));
    DQN_TRY(fwd_alloc(be, &m->L, &m->f_tgt, B, uc->Nt, split));
    DQN_TRY(bwd_alloc(be, &m->L, &m->bw, B, uc->N, m->f_on.split));
    return dqn_model_health_create(m);
}

void dqn_model_destroy(dqn_model *m) {
    dqn_backend *be = m->be;
    if (!be) return;
    if (m->graph_exec && be->ops->graph_destroy) be->ops->graph_destroy(be, m->graph_exec, 1);
    dqn_model_health_destroy(m);
    void *bufs[] = {m->params, m->target, m->grads, m->adam_m, m->adam_v, m->step, m->gnorm,
                    m->loss, m->idx, m->w, m->x, m->R, m->disc, m->act, m->astar, m->tau, m->tau_t,
                    m->y};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) ffree(be, bufs[k]);
    dqn_fwd_free(be, &m->f_on);
    dqn_fwd_free(be, &m->f_sel);
    dqn_fwd_free(be, &m->f_tgt);
    bwd_free(be, &m->bw);
    memset(m, 0, sizeof *m);
}

dqn_status dqn_model_init_weights(dqn_model *m, uint64_t seed) {
    dqn_backend *be = m->be;
    size_t n = m->L.n_params;
    float *host = malloc(n * sizeof *host);
    if (!host) return DQN_ERR(DQN_ERR_NOMEM, "%zu parameters", n);
    dqn_layout_init_params(&m->L, seed, host);
    dqn_status s = be->ops->h2d(be, m->params, host, n * sizeof *host);
    free(host);
    DQN_TRY(s);
    DQN_TRY(be->ops->d2d(be, m->target, m->params, n * sizeof(float)));
    DQN_TRY(be->ops->fill(be, m->adam_m, 0.0f, n));
    DQN_TRY(be->ops->fill(be, m->adam_v, 0.0f, n));
    DQN_TRY(be->ops->fill(be, m->grads, 0.0f, n));
    uint64_t zero = 0;
    return be->ops->h2d(be, m->step, &zero, sizeof zero);
}

/* ---------------------------------------------------------------- the update's stages */

/* Stage 1, forward: the target net on x' (N' taus), the online net on x (N taus; the pass the
 * health slots watch) and the online net on x' (K taus) for the double-DQN argmax (one pass over
 * [x; x'] when K == N). */
static dqn_status stage_forward(dqn_model *m, dqn_model *hm) {
    dqn_backend *be = m->be;
    const dqn_update_cfg *c = &m->ucfg;
    const dqn_layout *L = &m->L;
    const dqn_branches *br = &L->arch.br;
    int B = c->B;
    SLOT(hm, obs, m->x, (size_t)B * L->arch.obs_dim);
    /* the target pass reads only the sample: a branch of its own beside the online passes */
    DQN_TRY(side_begin(be, LANE_TARGET));
    DQN_TRY(dqn_forward(be, L, m->target, m->xn, m->tau_t, &m->f_tgt, B, c->Nt, 0, 0, NULL));
    DQN_TRY(side_end(be));
    if (c->K == c->N) {
        /* one online pass over [x; x'] with [tau; tau_k] (adjacent buffers): its first B*N rows
         * are the online net on x (the backward reads that prefix), the rest pick a* */
        DQN_TRY(dqn_forward(be, L, m->params, m->x, m->tau, &m->f_on, 2 * B, c->N, B, LANE_PHI,
                            hm));
        DQN_TRY(be->ops->q_argmax(be, m->f_on.Z + (size_t)B * c->N * br->A, NULL, m->astar, B, c->K,
                              br));
    } else {
        DQN_TRY(dqn_forward(be, L, m->params, m->x, m->tau, &m->f_on, B, c->N, B, LANE_PHI, hm));
        DQN_TRY(dqn_forward(be, L, m->params, m->xn, m->tau_k, &m->f_sel, B, c->K, 0, LANE_PHI,
                            NULL));
        DQN_TRY(be->ops->q_argmax(be, m->f_sel.Z, NULL, m->astar, B, c->K, br));
    }
    return side_join(be, 0);
}

/* Whether the IQN stage's op also takes dZ through the dueling combine's backward (dV, dAdv):
 * unless a fault goes between its parts. */
static int iqn_stage_fused(const dqn_model *m, const dqn_model *hm) {
    return m->be->ops->targets_huber && !SEAM(hm, y) && !SEAM(hm, dZ);
}

/* Stage 2, IQN: the targets and the quantile Huber loss with its gradient dZ, and the dueling
 * combine's backward, one op (targets_huber) unless a fault goes between them; with prioritised
 * replay the loss is importance-weighted and each sample's loss becomes its row's priority. */
static dqn_status stage_iqn(dqn_model *m, dqn_model *hm) {
    dqn_backend *be = m->be;
    const dqn_update_cfg *c = &m->ucfg;
    const dqn_branches *br = &m->L.arch.br;
    int B = c->B;
    const size_t ny = (size_t)B * (c->mode == DQN_TARGET_MEAN ? 1 : br->D) * c->Nt;
    float *w = c->weighted ? m->w : NULL, *ps = m->per ? m->ps : NULL;
    const int fused = iqn_stage_fused(m, hm);
    if (be->ops->targets_huber && !SEAM(hm, y)) {
        const dqn_target_io t = {m->f_tgt.Z, m->astar, m->R, m->disc, m->y};
        DQN_TRY(be->ops->targets_huber(be, &t, m->f_on.Z, m->tau, m->act, w, m->loss, m->bw.dZ, ps,
                                       fused ? m->bw.dV : NULL, fused ? m->bw.dAdv : NULL, B,
                                       c->N, c->Nt, br, c->mode, c->kappa));
        SLOT(hm, y, m->y, ny);
    } else {
        DQN_TRY(be->ops->iqn_targets(be, m->f_tgt.Z, m->astar, m->R, m->disc, m->y, B, c->Nt, br,
                                 c->mode));
        SLOT(hm, y, m->y, ny);
        DQN_TRY(be->ops->quantile_huber(be, m->f_on.Z, m->tau, m->act, m->y, w, m->loss, m->bw.dZ,
                                    ps, B, c->N, c->Nt, br, c->mode, c->kappa));
    }
    if (m->per) DQN_TRY(be->ops->per_update(be, m->per, m->idx, m->ps, B));
    SLOT(hm, loss, m->loss, 1);
    SLOT(hm, dZ, m->bw.dZ, (size_t)B * c->N * br->A);
    return DQN_OK;
}

/* Stage 3, backward of the online pass on x. */
static dqn_status stage_backward(dqn_model *m, dqn_model *hm) {
    const dqn_update_cfg *c = &m->ucfg;
    return dqn_backward(m->be, &m->L, m->params, m->x, &m->f_on, &m->bw, m->grads, c->B, c->N,
                        c->head_grad_clip, iqn_stage_fused(m, hm), hm);
}

/* Stage 4, optimizer: the global norm; Adam, the target update and the counter increment in one
 * op; with health, that op is the health commit's (model_health.c), which skips Adam on the
 * device when the gradient is not finite (guard mode). */
static dqn_status stage_optimizer(dqn_model *m, dqn_model *hm) {
    dqn_backend *be = m->be;
    const dqn_update_cfg *c = &m->ucfg;
    size_t n = m->L.n_params;
    DQN_TRY(be->ops->l2_norm(be, m->grads, n, m->gnorm));
    SLOT(hm, grad_norm, m->gnorm, 1);
    if (hm) return dqn_model_health_commit(m);
    return be->ops->adam_target_step(be, m->params, m->grads, m->adam_m, m->adam_v, m->target, n, c->lr,
                                 c->beta1, c->beta2, c->adam_eps, c->weight_decay, m->gnorm,
                                 c->grad_clip, c->tau_target > 0 ? 0 : c->target_period,
                                 c->tau_target, m->step, NULL);
}

dqn_status dqn_model_loss_grad(dqn_model *m) {
    DQN_TRY(stage_forward(m, NULL));
    DQN_TRY(stage_iqn(m, NULL));
    return stage_backward(m, NULL);
}

static dqn_draws taus_of(dqn_model *m) {
    const dqn_update_cfg *c = &m->ucfg;
    size_t B = (size_t)c->B, nN = B * c->N, nT = B * c->Nt, nK = B * c->K;
    const dqn_draws taus = {3,
                            {m->tau, m->tau_t, m->tau_k},
                            {nN, nT, nK},
                            {DQN_STREAM_TAU_ONLINE, DQN_STREAM_TAU_TARGET, DQN_STREAM_TAU_SELECT},
                            {nN, nT, nK}};
    return taus;
}

/* Sampling and taus: every draw is keyed by the update counter, so replays draw fresh numbers. */
static dqn_status record_sample(dqn_model *m, const dqn_replay_view *rv) {
    dqn_backend *be = m->be;
    dqn_sample_src src = {rv->obs, rv->next_obs, rv->R, rv->disc, rv->act, rv->size,
                          m->L.arch.obs_dim, m->L.arch.br.D, NULL};
    const dqn_sample_dst dst = {m->idx, m->act, m->x, m->xn, m->R, m->disc};
    const dqn_draws taus = taus_of(m);
    m->per = rv->per;
    if (rv->per) {
        DQN_TRY(be->ops->per_sample(be, rv->per, m->idx, m->w, m->ucfg.B, m->ucfg.seed, m->step));
        src.idx = m->idx;
    }
    return be->ops->sample_draws(be, &src, &dst, m->ucfg.B, &taus, m->ucfg.seed, m->step);
}

/* The taus alone (the batch is already in place): the same draws as record_sample's. */
static dqn_status record_taus(dqn_model *m) {
    const dqn_draws taus = taus_of(m);
    m->per = NULL;
    return m->be->ops->rand_uniform_multi(m->be, &taus, m->ucfg.seed, m->step);
}

/* Data parallelism (docs/multi-gpu.md): once the backend joined a communicator, the gradient is
 * averaged over the ranks between the backward and the optimizer, so that the clip, the health
 * checks of the gradients and Adam see the same gradient on every rank. A world of one runs it too
 * (the single-GPU test of the path). */
static int data_parallel(const dqn_model *m) { return m->be->ops->comm_world(m->be) > 0; }
static dqn_status stage_allreduce(dqn_model *m, dqn_model *hm) {
    (void)hm;
    return m->be->ops->allreduce_mean(m->be, m->grads, m->L.n_params);
}

typedef dqn_status (*stage_fn)(dqn_model *, dqn_model *);
enum { MAX_STAGES = 5 };

/* forward, IQN (targets and loss), backward, [the all-reduce], optimizer */
static int stages_of(const dqn_model *m, stage_fn *st) {
    int n = 0;
    st[n++] = stage_forward;
    st[n++] = stage_iqn;
    st[n++] = stage_backward;
    if (data_parallel(m)) st[n++] = stage_allreduce;
    st[n++] = stage_optimizer;
    return n;
}

static dqn_status record_update(dqn_model *m, const dqn_replay_view *rv) {
    dqn_model *hm = dqn_model_probe(m);
    if (rv) DQN_TRY(record_sample(m, rv));
    else DQN_TRY(record_taus(m));
    stage_fn st[MAX_STAGES];
    int n = stages_of(m, st);
    for (int k = 0; k < n; k++) DQN_TRY(st[k](m, hm));
    return DQN_OK;
}

dqn_status dqn_model_update_loaded(dqn_model *m) { return record_update(m, NULL); }

/* The capture of the update: every stage (the sampling goes with the forward) in one capture, so
 * that programmatic dependent launch carries across the stages' seams (a child graph per stage
 * would end each with a full dependency); made one executable graph. */
static dqn_status capture_update(dqn_model *m, const dqn_replay_view *rv) {
    dqn_backend *be = m->be;
    void *child = NULL;
    DQN_TRY(be->ops->capture_begin(be));
    dqn_status s = record_update(m, rv);
    dqn_status e = be->ops->capture_end(be, &child);
    if (s == DQN_OK) s = e;
    if (s == DQN_OK) s = be->ops->graph_compose(be, &child, 1, &m->graph_exec);
    if (child) be->ops->graph_destroy(be, child, 0);
    return s;
}

dqn_status dqn_model_update(dqn_model *m, const dqn_replay_view *rv) {
    dqn_backend *be = m->be;
    if (!be->ops->capture_begin) return record_update(m, rv);
    if (!m->graph_exec) DQN_TRY(capture_update(m, rv));
    return be->ops->graph_launch(be, m->graph_exec);
}
