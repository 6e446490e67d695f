/* The op sequences a fused op stands for, run through any backend's own table: the CPU backend's
 * definition of the fused op, and what a backend without a kernel for a shape falls back to. */
#include "backends/backend.h"
#include "core/error.h"

dqn_status dqn_iqn_embed_seq(dqn_backend *be, const float *tau, const float *W, const float *b,
                             const float *h, float *C, float *phi, float *z, float *cat, int B,
                             int T, int n_cos, int d) {
    DQN_TRY(be->ops->cos_embed(be, tau, C, B * T, n_cos));
    DQN_TRY(be->ops->linear_act_fwd(be, C, W, b, phi, B * T, n_cos, d, DQN_ACT_RELU));
    return be->ops->iqn_fwd(be, h, phi, z, cat, B, T, d);
}

dqn_status dqn_trunk_fwd_seq(dqn_backend *be, const dqn_trunk_io *t) {
    if (t->L < 0 || t->L > DQN_TRUNK_MAX_GRN)
        return DQN_ERR(DQN_ERR_ARG, "trunk_fwd: %d GRN blocks, at most %d", t->L,
                       DQN_TRUNK_MAX_GRN);
    const int M = t->M, d = t->d;
    if (t->W_in) DQN_TRY(be->ops->linear_fwd(be, t->x, t->W_in, t->b_in, t->h0, M, t->obs, d));
    const float *h = t->h0;
    for (int l = 0; l < t->L; l++) {
        const dqn_grn_io *g = &t->grn[l];
        DQN_TRY(be->ops->linear_act_fwd(be, h, g->W_a, g->b_a, g->e, M, d, d, DQN_ACT_ELU));
        DQN_TRY(be->ops->linear_fwd(be, g->e, g->W_b, g->b_b, g->g, M, d, 2 * d));
        DQN_TRY(be->ops->grn_gate_ln_fwd(be, h, g->g, g->gamma, g->beta, g->r, g->y, g->mean,
                                         g->rstd, M, d));
        h = g->y;
    }
    return DQN_OK;
}

dqn_status dqn_targets_huber_seq(dqn_backend *be, const dqn_target_io *t, const float *Z,
                                 const float *tau, const int32_t *act, const float *w,
                                 float *loss_out, float *dZ, float *per_sample, float *dV,
                                 float *dAdv, int B, int N, int Nt, const dqn_branches *br,
                                 dqn_target_mode mode, float kappa) {
    if (!dV != !dAdv)
        return DQN_ERR(DQN_ERR_ARG, "targets_huber: dV and dAdv go together (one is NULL)");
    DQN_TRY(be->ops->iqn_targets(be, t->Zt, t->astar, t->R, t->discount, t->y, B, Nt, br, mode));
    DQN_TRY(be->ops->quantile_huber(be, Z, tau, act, t->y, w, loss_out, dZ, per_sample, B, N, Nt,
                                    br, mode, kappa));
    return dV ? be->ops->dueling_bwd(be, dZ, dV, dAdv, B * N, br) : DQN_OK;
}
