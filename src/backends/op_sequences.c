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
