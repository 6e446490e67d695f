/* The CPU backend's fused ops: the reference for the CUDA kernels that fuse. Most are
 * the unfused sequence run through the CPU op table, so they equal it bit for bit; the heads'
 * ops read the stacked hidden layer in place and sum in double; iqn_bwd is one loop in the
 * sequence's own rounding order. */
#include <stdlib.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/gemm.h"

/* sum a[j] b[j] in double */
static double dot_d(const float *a, const float *b, int n) {
    double lane[LANES] = {0}, s = 0;
    int j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += (double)a[j + l] * b[j + l];
    for (; j < n; j++) s += (double)a[j] * b[j];
    for (int l = 0; l < LANES; l++) s += lane[l];
    return s;
}

dqn_status cpu_heads_fwd(dqn_backend *be, const float *hva, const float *Wv2, const float *bv2,
                         const float *Wa2, const float *ba2, float *V, float *Adv, float *Z, int R,
                         int H, const dqn_branches *br) {
    REQUIRE(R >= 0 && H > 0 && br && br->A > 0, "heads_fwd: R=%d H=%d A=%d", R, H,
            br ? br->A : 0);
    const int A = br->A;
    for (size_t r = 0; r < (size_t)R; r++) {
        const float *hv = hva + r * 2 * H, *ha = hv + H;
        V[r] = (float)(bv2[0] + dot_d(hv, Wv2, H));
        for (int a = 0; a < A; a++)
            Adv[r * A + a] = (float)(ba2[a] + dot_d(ha, Wa2 + (size_t)a * H, H));
    }
    return be->ops->dueling_fwd(be, V, Adv, Z, R, br);
}

dqn_status cpu_l2_norm2(dqn_backend *be, const float *x0, size_t n0, const float *x1, size_t n1,
                        float *norms, const void *hplan) {
    if (hplan) DQN_TRY(be->ops->health_check(be, hplan));
    DQN_TRY(be->ops->l2_norm(be, x0, n0, norms));
    return be->ops->l2_norm(be, x1, n1, norms + 1);
}

dqn_status cpu_heads_bwd(dqn_backend *be, const float *hva, const float *Wv2, const float *Wa2,
                         const float *dV, const float *dAdv, const float *norms, float max_norm,
                         float *dhva, float *dbva, float *dWv2, float *dbv2, float *dWa2,
                         float *dba2, int R, int H, int A) {
    REQUIRE(R >= 0 && H > 0 && A > 0, "heads_bwd: R=%d H=%d A=%d", R, H, A);
    REQUIRE(!(max_norm > 0.0f) || norms, "heads_bwd: max_norm = %g needs norms", (double)max_norm);
    (void)be;
    /* x * 1 == x: scaling by an inactive factor changes nothing, as clip_by_norm skipping it */
    const float cV = dqn_clip_scale(norms, max_norm);
    const float cA = dqn_clip_scale(norms ? norms + 1 : NULL, max_norm);
    /* acc: [A+1][H] weight gradients (row 0 value, 1+a advantage), [A+1] biases, [H] one row's
     * advantage input gradient */
    size_t nw = (size_t)(A + 1) * H, nacc = nw + (size_t)(A + 1) + (size_t)H;
    double *acc = calloc(nacc, sizeof *acc);
    if (!acc) return DQN_ERR(DQN_ERR_NOMEM, "heads_bwd: %zu accumulators", nacc);
    double *db = acc + nw, *row = db + A + 1;
    for (size_t r = 0; r < (size_t)R; r++) {
        const float *hv = hva + r * 2 * H, *ha = hv + H, *ga = dAdv + r * A;
        float *dhv = dhva + r * 2 * H, *dha = dhv + H, gv = dV[r] * cV;
        for (int j = 0; j < H; j++) {
            float x = gv * Wv2[j], on = hv[j] > 0.0f;  /* linear_bwd with N = 1, then relu_bwd */
            dhv[j] = x * on;
            acc[j] += (double)gv * hv[j];
            row[j] = 0;
        }
        db[0] += gv;
        for (int a = 0; a < A; a++) {
            const float *w = Wa2 + (size_t)a * H;
            double g = ga[a] * cA, *aw = acc + (size_t)(1 + a) * H;
            for (int j = 0; j < H; j++) {
                row[j] += g * w[j];
                aw[j] += g * ha[j];
            }
            db[1 + a] += g;
        }
        for (int j = 0; j < H; j++) {
            float on = ha[j] > 0.0f;
            dha[j] = (float)row[j] * on;
        }
    }
    for (int j = 0; j < H; j++) dWv2[j] = (float)acc[j];
    for (size_t k = 0; k < (size_t)A * H; k++) dWa2[k] = (float)acc[H + k];
    dbv2[0] = (float)db[0];
    for (int a = 0; a < A; a++) dba2[a] = (float)db[1 + a];
    /* the column sum linear_bwd's db is (the same floats in the same order) */
    if (dbva) cpu_colsum(dhva, dbva, R, 2 * H);
    free(acc);
    return DQN_OK;
}

dqn_status cpu_grn_gate_ln_fwd(dqn_backend *be, const float *h, const float *g, const float *gamma,
                               const float *beta, float *r, float *y, float *mean, float *rstd,
                               int M, int d) {
    DQN_TRY(be->ops->gate_fwd(be, h, g, r, M, d));
    return be->ops->layernorm_fwd(be, r, gamma, beta, y, mean, rstd, M, d);
}

dqn_status cpu_grn_ln_gate_bwd(dqn_backend *be, const float *r, const float *gamma,
                               const float *mean, const float *rstd, const float *g,
                               const float *dy, float *dres, float *dg, float *dgamma,
                               float *dbeta, int M, int d, const void *hplan) {
    REQUIRE(dres != dy && dg != dy, "grn_ln_gate_bwd: dres and dg must not alias dy");
    if (hplan) DQN_TRY(be->ops->health_check(be, hplan));
    DQN_TRY(be->ops->layernorm_bwd(be, r, gamma, mean, rstd, dy, dres, dgamma, dbeta, M, d));
    return be->ops->gate_bwd(be, g, dres, dres, dg, M, d);
}

dqn_status cpu_iqn_fwd(dqn_backend *be, const float *h, const float *phi, float *z, float *cat,
                       int B, int T, int d) {
    DQN_TRY(be->ops->mul_bcast_fwd(be, h, phi, z, B, T, d));
    return cat ? be->ops->concat_bcast_fwd(be, z, h, cat, B, T, d) : DQN_OK;
}

/* Every row of C and phi is written (keep only says which rows a caller may read). */
dqn_status cpu_iqn_embed_fwd(dqn_backend *be, const float *tau, const float *W, const float *b,
                             const float *h, float *C, float *phi, float *z, float *cat, int B,
                             int T, int n_cos, int d, int keep, const void *hplan) {
    REQUIRE(B >= 0 && T >= 0 && (long)B * T <= INT32_MAX && keep >= 0 && keep <= B * T,
            "iqn_embed_fwd: B=%d T=%d keep=%d", B, T, keep);
    DQN_TRY(dqn_iqn_embed_seq(be, tau, W, b, h, C, phi, z, cat, B, T, n_cos, d));
    return hplan ? be->ops->health_check(be, hplan) : DQN_OK;
}

/* Per element, the sequence's operations in its order: dh2 = 0 + the dcat sums (concat_bcast_bwd
 * after the fill), dh = 0 + the dz * phi sums (mul_bcast_bwd), dh += 1 * dh2 (axpy), and dphi =
 * (dz * h) * (phi > 0) (mul_bcast_bwd, relu_bwd); dphi_b gets each column's rows in row order,
 * as cpu_colsum adds them. */
dqn_status cpu_iqn_bwd(dqn_backend *be, const float *dcat, const float *h, const float *phi,
                       float *dz, float *dh, float *dphi, float *dphi_b, int B, int T, int d,
                       const void *hplan) {
    REQUIRE(B >= 0 && T >= 0 && d >= 0, "iqn_bwd: B=%d T=%d d=%d", B, T, d);
    REQUIRE(!hplan || !dcat, "iqn_bwd: a health plan of dz needs dz as the input (dcat NULL)");
    if (hplan) DQN_TRY(be->ops->health_check(be, hplan));
    const size_t D2 = 2 * (size_t)d;
    if (dphi_b)
        for (size_t k = 0; k < (size_t)d; k++) dphi_b[k] = 0.0f;
    for (size_t s = 0; s < (size_t)B; s++)
        for (size_t k = 0; k < (size_t)d; k++) {
            float am = 0.0f, ac = 0.0f, hk = h[s * d + k];
            for (size_t r = s * T; r < (s + 1) * T; r++) {
                size_t q = r * d + k;
                float gz;
                if (dcat) {
                    gz = dcat[r * D2 + k];
                    dz[q] = gz;
                    ac += dcat[r * D2 + d + k];
                } else {
                    gz = dz[q];
                }
                float p = phi[q], dp = gz * hk, on = p > 0.0f, g = dp * on;
                am += gz * p;
                dphi[q] = g;
                if (dphi_b) dphi_b[k] += g;
            }
            dh[s * d + k] = dcat ? am + 1.0f * ac : am;
        }
    return DQN_OK;
}

dqn_status cpu_adam_target_step(dqn_backend *be, float *p, const float *g, float *m, float *v,
                                float *target, size_t n, float lr, float beta1, float beta2,
                                float eps, float wd, const float *gnorm, float max_norm,
                                int period, float tau, uint64_t *step, const int32_t *skip) {
    /* the target's arguments first: a refusal must leave every buffer as it was */
    REQUIRE(period > 0 || (period == 0 && tau >= 0.0f && tau <= 1.0f),
            "adam_target_step: period = %d, tau = %g (period >= 0; tau in [0, 1] when 0)", period,
            (double)tau);
    DQN_TRY(be->ops->adam(be, p, g, m, v, n, lr, beta1, beta2, eps, wd, gnorm, max_norm, step,
                          skip));
    DQN_TRY(be->ops->target_update(be, target, p, n, period, tau, step));
    return be->ops->step_incr(be, step);
}

dqn_status cpu_sample_draws(dqn_backend *be, const dqn_sample_src *src, const dqn_sample_dst *dst,
                            int B, const dqn_draws *d, uint64_t seed, const uint64_t *step) {
    DQN_TRY(be->ops->sample_batch(be, src, dst, B, seed, step));
    return be->ops->rand_uniform_multi(be, d, seed, step);
}

/* ---- the bottleneck split ---- */

dqn_status cpu_linear_ld_fwd(dqn_backend *be, const float *X, const float *W, int ldw,
                             const float *b, float *Y, int M, int K, int N, dqn_act act) {
    REQUIRE(M > 0 && K > 0 && N > 0 && ldw >= K, "linear_ld_fwd: M=%d K=%d N=%d ldw=%d", M, K, N,
            ldw);
    REQUIRE(act >= DQN_ACT_NONE && act <= DQN_ACT_ELU, "linear_ld_fwd: act = %d", (int)act);
    DQN_TRY(dqn_gemm_xwt_ld(X, W, ldw, b, Y, M, K, N));
    if (act == DQN_ACT_ELU) return be->ops->elu_fwd(be, Y, Y, (size_t)M * N);
    return act == DQN_ACT_RELU ? be->ops->relu_fwd(be, Y, Y, (size_t)M * N) : DQN_OK;
}

dqn_status cpu_linear_ld_bwd(dqn_backend *be, const float *X, const float *W, int ldw,
                             const float *dY, float *dX, int acc_dx, float *dW, float *db, int M,
                             int K, int N) {
    (void)be;
    REQUIRE(M > 0 && K > 0 && N > 0 && ldw >= K, "linear_ld_bwd: M=%d K=%d N=%d ldw=%d", M, K, N,
            ldw);
    if (dX) DQN_TRY(dqn_gemm_dyw_ld(dY, W, ldw, dX, acc_dx, M, K, N));
    if (dW) DQN_TRY(dqn_gemm_dytx_ld(dY, X, dW, ldw, M, K, N));
    if (db) cpu_colsum(dY, db, M, N);
    return DQN_OK;
}

dqn_status cpu_bcast_add_act(dqn_backend *be, const float *hb, float *Y, int B, int T, int N,
                             dqn_act act) {
    (void)be;
    REQUIRE(B >= 0 && T >= 0 && N >= 0, "bcast_add_act: B=%d T=%d N=%d", B, T, N);
    REQUIRE(act == DQN_ACT_NONE || act == DQN_ACT_RELU, "bcast_add_act: act = %d", (int)act);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        const float *h = hb + r / T * N;
        float *y = Y + r * N;
        for (int k = 0; k < N; k++) {
            float v = y[k] + h[k];
            y[k] = act == DQN_ACT_RELU && !(v > 0.0f) ? 0.0f : v;
        }
    }
    return DQN_OK;
}

dqn_status cpu_relu_bwd_tausum(dqn_backend *be, const float *u, float *du, float *dus, int B,
                               int T, int N, const void *hplan) {
    REQUIRE(B >= 0 && T >= 0 && N >= 0, "relu_bwd_tausum: B=%d T=%d N=%d", B, T, N);
    for (size_t s = 0; s < (size_t)B; s++)
        for (size_t k = 0; k < (size_t)N; k++) {
            float acc = 0.0f;
            for (size_t r = s * T; r < (s + 1) * T; r++) {
                float on = u[r * N + k] > 0.0f, g = du[r * N + k] * on;
                du[r * N + k] = g;
                acc += g;
            }
            dus[s * N + k] = acc;
        }
    return hplan ? be->ops->health_check(be, hplan) : DQN_OK;
}
