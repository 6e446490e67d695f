/* The CPU backend's fused ops: the reference for the CUDA kernels that fuse. Most are
 * the unfused sequence run through the CPU op table, so they equal it bit for bit; the heads'
 * ops read the stacked hidden layer in place and sum in double; iqn_bwd is one loop in the
 * sequence's own rounding order. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/gemm.h"

/* sum a[j] b[j] in double: LANES lanes (one vector value, kept in registers), each summed in
 * order, then the tail and the lanes in order */
CPU_INLINE double dot_d(const float *a, const float *b, int n) {
    cpu_vd lane = {0};
    double s = 0;
    int j = 0;
    for (; j + LANES <= n; j += LANES) {
        cpu_vf va, vb;
        memcpy(&va, a + j, sizeof va);
        memcpy(&vb, b + j, sizeof vb);
        lane += __builtin_convertvector(va, cpu_vd) * __builtin_convertvector(vb, cpu_vd);
    }
    for (; j < n; j++) s += (double)a[j] * b[j];
    for (int l = 0; l < LANES; l++) s += lane[l];
    return s;
}

/* The dots of LANES rows x[i * ldx ..] with one w at once: dot_d's lanes for each row, then its
 * in-order sums of them, run down the columns of the transposed lanes (one vector add per lane:
 * each row's sum in its own element, in dot_d's order). out[i] = (float)(b + sum). */
CPU_INLINE void dot_d_rows(const float *x, size_t ldx, const float *w, int n, float b, float *out,
                           size_t ldo) {
    cpu_vd L[LANES];
#pragma GCC unroll 8
    for (int i = 0; i < LANES; i++) L[i] = (cpu_vd){0};
    int j = 0;
    for (; j + LANES <= n; j += LANES) {
        cpu_vf vw;
        memcpy(&vw, w + j, sizeof vw);
        const cpu_vd dw = __builtin_convertvector(vw, cpu_vd);
#pragma GCC unroll 8
        for (int i = 0; i < LANES; i++) {
            cpu_vf vx;
            memcpy(&vx, x + i * ldx + j, sizeof vx);
            L[i] += __builtin_convertvector(vx, cpu_vd) * dw;
        }
    }
    cpu_vd S;
    for (int i = 0; i < LANES; i++) {
        double t = 0;
        for (int k = j; k < n; k++) t += (double)x[i * ldx + k] * w[k];
        S[i] = t;
    }
    cpu_vd T[LANES]; /* T[l]: lane l of the rows */
    cpu_transpose8(L, T);
    for (int l = 0; l < LANES; l++) S += T[l];
    const cpu_vd r = (double)b + S;
    for (int i = 0; i < LANES; i++) out[i * ldo] = (float)r[i];
}

CPU_INLINE void heads_fwd_body(const float *hva, const float *Wv2, const float *bv2,
                               const float *Wa2, const float *ba2, float *V, float *Adv, size_t R,
                               int H, int A) {
    const size_t ld = 2 * (size_t)H;
    size_t r = 0;
    for (; r + LANES <= R; r += LANES) {
        const float *hv = hva + r * ld;
        dot_d_rows(hv, ld, Wv2, H, bv2[0], V + r, 1);
        for (int a = 0; a < A; a++)
            dot_d_rows(hv + H, ld, Wa2 + (size_t)a * H, H, ba2[a], Adv + r * A + a, (size_t)A);
    }
    for (; r < R; r++) {
        const float *hv = hva + r * ld, *ha = hv + H;
        V[r] = (float)(bv2[0] + dot_d(hv, Wv2, H));
        for (int a = 0; a < A; a++)
            Adv[r * A + a] = (float)(ba2[a] + dot_d(ha, Wa2 + (size_t)a * H, H));
    }
}
CPU_CLONE(heads_fwd,
          (const float *hva, const float *Wv2, const float *bv2, const float *Wa2,
           const float *ba2, float *V, float *Adv, size_t R, int H, int A),
          (hva, Wv2, bv2, Wa2, ba2, V, Adv, R, H, A))

dqn_status cpu_heads_fwd(dqn_backend *be, const float *hva, const float *Wv2, const float *bv2,
                         const float *Wa2, const float *ba2, float *V, float *Adv, float *Z, int R,
                         int H, const dqn_branches *br) {
    REQUIRE(R >= 0 && H > 0 && br && br->A > 0, "heads_fwd: R=%d H=%d A=%d", R, H,
            br ? br->A : 0);
    heads_fwd_any(hva, Wv2, bv2, Wa2, ba2, V, Adv, (size_t)R, H, br->A);
    return be->ops->dueling_fwd(be, V, Adv, Z, R, br);
}

dqn_status cpu_l2_norm2(dqn_backend *be, const float *x0, size_t n0, const float *x1, size_t n1,
                        float *norms, const void *hplan) {
    if (hplan) DQN_TRY(be->ops->health_check(be, hplan));
    DQN_TRY(be->ops->l2_norm(be, x0, n0, norms));
    return be->ops->l2_norm(be, x1, n1, norms + 1);
}

/* the row loop of heads_bwd: acc as there */
CPU_INLINE void heads_bwd_body(const float *hva, const float *Wv2, const float *Wa2,
                               const float *dV, const float *dAdv, float cV, float cA,
                               float *dhva, double *acc, size_t R, int H, int A) {
    double *restrict db = acc + (size_t)(A + 1) * H, *restrict row = db + A + 1;
    double *restrict accv = acc;
    for (size_t r = 0; r < R; r++) {
        const float *restrict hv = hva + r * 2 * H, *restrict ha = hv + H;
        const float *restrict ga = dAdv + r * A;
        float *restrict dhv = dhva + r * 2 * H, *restrict dha = dhv + H;
        const float gv = dV[r] * cV;
        /* linear_bwd with N = 1, then relu_bwd */
        EACH(j, (size_t)H, float on = hv[j] > 0.0f; dhv[j] = (gv * Wv2[j]) * on);
        EACH(j, (size_t)H, accv[j] += (double)gv * hv[j]; row[j] = 0);
        db[0] += gv;
        for (int a = 0; a < A; a++) {
            const float *restrict w = Wa2 + (size_t)a * H;
            const double g = ga[a] * cA;
            double *restrict aw = acc + (size_t)(1 + a) * H;
            EACH(j, (size_t)H, row[j] += g * w[j]; aw[j] += g * ha[j]);
            db[1 + a] += g;
        }
        EACH(j, (size_t)H, float on = ha[j] > 0.0f; dha[j] = (float)row[j] * on);
    }
}
CPU_CLONE(heads_bwd,
          (const float *hva, const float *Wv2, const float *Wa2, const float *dV,
           const float *dAdv, float cV, float cA, float *dhva, double *acc, size_t R, int H,
           int A),
          (hva, Wv2, Wa2, dV, dAdv, cV, cA, dhva, acc, R, H, A))

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
    heads_bwd_any(hva, Wv2, Wa2, dV, dAdv, cV, cA, dhva, acc, (size_t)R, H, A);
    const double *db = acc + nw;
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
 * as cpu_colsum adds them. Rows run outermost so that the columns vectorise. */
CPU_INLINE void iqn_bwd_rows(
    const float *restrict dcat, const float *restrict h, const float *restrict phi,
    float *restrict dz, float *restrict dh, float *restrict dphi, float *restrict dphi_b,
    float *restrict ac, size_t B, size_t T, size_t d, const int cat, const int bias) {
    const size_t D2 = 2 * d;
    for (size_t s = 0; s < B; s++) {
        const float *restrict hs = h + s * d;
        float *restrict am = dh + s * d;
        EACH(k, d, am[k] = 0.0f; if (cat) ac[k] = 0.0f);
        for (size_t r = s * T; r < (s + 1) * T; r++) {
            const float *restrict pr = phi + r * d, *restrict dc = cat ? dcat + r * D2 : NULL;
            float *restrict dzr = dz + r * d, *restrict dpr = dphi + r * d;
            EACH(k, d, float on = pr[k] > 0.0f; float gz = cat ? dc[k] : dzr[k];
                 float g = (gz * hs[k]) * on; dpr[k] = g; am[k] += gz * pr[k];
                 if (cat) dzr[k] = gz; if (cat) ac[k] += dc[d + k]; if (bias) dphi_b[k] += g);
        }
        if (cat) EACH(k, d, am[k] = am[k] + 1.0f * ac[k]);
    }
}

CPU_INLINE void iqn_bwd_body(const float *dcat, const float *h, const float *phi, float *dz,
                             float *dh, float *dphi, float *dphi_b, float *ac, size_t b, size_t t,
                             size_t n) {
    if (dcat && dphi_b) iqn_bwd_rows(dcat, h, phi, dz, dh, dphi, dphi_b, ac, b, t, n, 1, 1);
    else if (dcat) iqn_bwd_rows(dcat, h, phi, dz, dh, dphi, NULL, ac, b, t, n, 1, 0);
    else if (dphi_b) iqn_bwd_rows(NULL, h, phi, dz, dh, dphi, dphi_b, NULL, b, t, n, 0, 1);
    else iqn_bwd_rows(NULL, h, phi, dz, dh, dphi, NULL, NULL, b, t, n, 0, 0);
}
CPU_CLONE(iqn_bwd,
          (const float *dcat, const float *h, const float *phi, float *dz, float *dh, float *dphi,
           float *dphi_b, float *ac, size_t b, size_t t, size_t n),
          (dcat, h, phi, dz, dh, dphi, dphi_b, ac, b, t, n))

dqn_status cpu_iqn_bwd(dqn_backend *be, const float *dcat, const float *h, const float *phi,
                       float *dz, float *dh, float *dphi, float *dphi_b, int B, int T, int d,
                       const void *hplan) {
    REQUIRE(B >= 0 && T >= 0 && d >= 0, "iqn_bwd: B=%d T=%d d=%d", B, T, d);
    REQUIRE(!hplan || !dcat, "iqn_bwd: a health plan of dz needs dz as the input (dcat NULL)");
    if (hplan) DQN_TRY(be->ops->health_check(be, hplan));
    if (dphi_b) EACH(k, (size_t)d, dphi_b[k] = 0.0f);
    float *ac = NULL;
    if (dcat && !(ac = malloc(((size_t)d + 1) * sizeof *ac)))
        return DQN_ERR(DQN_ERR_NOMEM, "iqn_bwd: %d accumulators", d);
    iqn_bwd_any(dcat, h, phi, dz, dh, dphi, dphi_b, ac, (size_t)B, (size_t)T, (size_t)d);
    free(ac);
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
    dqn_status st;
    if (act == DQN_ACT_RELU && dqn_gemm_xwt_relu(X, W, ldw, b, Y, M, K, N, &st)) return st;
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
