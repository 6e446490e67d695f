/* The data-parallel identity, checked on whatever backend the harness ran (tests/dp_harness.h):
 * after the first update every rank's gradient is the mean of the ranks' gradients, which must
 * equal one model's gradient on the ranks' batches concatenated (same weights, same taus); after
 * many updates the weights must still be bit-identical on every rank. */
#ifndef DQN_TEST_DP_CHECK_H
#define DQN_TEST_DP_CHECK_H
#include <math.h>

#include "check.h"
#include "core/crc32.h"
#include "dp_harness.h"

typedef struct {
    int updates;                                  /* per rank, >= 1 */
    size_t n_params;
    float *params0;                               /* rank 0's weights before the first update */
    /* per rank: the sampled batch and taus of the first update, and its averaged gradient */
    float *grads[DP_MAX_WORLD], *x[DP_MAX_WORLD], *xn[DP_MAX_WORLD], *R[DP_MAX_WORLD];
    float *disc[DP_MAX_WORLD], *tau[DP_MAX_WORLD], *tau_t[DP_MAX_WORLD], *tau_k[DP_MAX_WORLD];
    int32_t *act[DP_MAX_WORLD];
    float loss[DP_MAX_WORLD];
    float *params[DP_MAX_WORLD];                  /* after every update */
} dp_capture;

static inline dqn_status dp_take(dqn_backend *be, void **host, const void *src, size_t bytes) {
    if (!(*host = malloc(bytes))) return DQN_ERR(DQN_ERR_NOMEM, "%zu bytes", bytes);
    return be->ops->d2h(be, *host, src, bytes);
}

/* The harness body: one update, its batch and gradient; the other updates; the weights. */
static inline dqn_status dp_capture_body(dp_rank *r) {
    dp_capture *c = r->spec->arg;
    dqn_model *m = &r->m;
    dqn_backend *be = r->be;
    const dqn_update_cfg *u = &m->ucfg;
    size_t B = (size_t)u->B, obs = (size_t)m->L.arch.obs_dim, D = (size_t)m->L.arch.br.D;
    size_t P = m->L.n_params * sizeof(float);
    int k = r->rank;
    if (k == 0) {   /* one writer: the ranks run as threads */
        c->n_params = m->L.n_params;
        DQN_TRY(dp_take(be, (void **)&c->params0, m->params, P));
    }
    DQN_TRY(dqn_model_update(m, &r->view));
    DQN_TRY(dp_take(be, (void **)&c->grads[k], m->grads, P));
    DQN_TRY(dp_take(be, (void **)&c->x[k], m->x, B * obs * 4));
    DQN_TRY(dp_take(be, (void **)&c->xn[k], m->xn, B * obs * 4));
    DQN_TRY(dp_take(be, (void **)&c->R[k], m->R, B * 4));
    DQN_TRY(dp_take(be, (void **)&c->disc[k], m->disc, B * 4));
    DQN_TRY(dp_take(be, (void **)&c->act[k], m->act, B * D * 4));
    DQN_TRY(dp_take(be, (void **)&c->tau[k], m->tau, B * (size_t)u->N * 4));
    DQN_TRY(dp_take(be, (void **)&c->tau_t[k], m->tau_t, B * (size_t)u->Nt * 4));
    DQN_TRY(dp_take(be, (void **)&c->tau_k[k], m->tau_k, B * (size_t)u->K * 4));
    DQN_TRY(be->ops->d2h(be, &c->loss[k], m->loss, sizeof(float)));
    for (int i = 1; i < c->updates; i++) DQN_TRY(dqn_model_update(m, &r->view));
    return dp_take(be, (void **)&c->params[k], m->params, P);
}

static inline void dp_capture_free(dp_capture *c) {
    free(c->params0);
    for (int k = 0; k < DP_MAX_WORLD; k++) {
        free(c->grads[k]); free(c->x[k]); free(c->xn[k]); free(c->R[k]); free(c->disc[k]);
        free(c->tau[k]); free(c->tau_t[k]); free(c->tau_k[k]); free(c->act[k]); free(c->params[k]);
    }
    memset(c, 0, sizeof *c);
}

/* host[world * n] = the ranks' arrays one after another, uploaded to dst */
static inline dqn_status dp_concat(dqn_backend *be, void *dst, void *const *parts, int world,
                                   size_t bytes) {
    char *host = malloc(bytes * (size_t)world);
    if (!host) return DQN_ERR(DQN_ERR_NOMEM, "concat");
    for (int k = 0; k < world; k++) memcpy(host + bytes * (size_t)k, parts[k], bytes);
    dqn_status s = be->ops->h2d(be, dst, host, bytes * (size_t)world);
    free(host);
    return s;
}

typedef struct {
    double grad_err;       /* max over tensors and ranks of max|g_rank - g_ref| / max|g_ref| */
    double loss_err;       /* |mean of the ranks' losses - loss_ref| / |loss_ref| */
    int grads_same;        /* every rank's gradient bit-identical to rank 0's */
    int params_same;       /* every rank's final weights bit-identical to rank 0's */
    int params_finite, params_moved;
    uint32_t crc[DP_MAX_WORLD];   /* CRC-32 of each rank's final weights */
    char worst[32];        /* the tensor of grad_err */
} dp_result;

/* The reference: one model of world * B samples on ref_be, the run's initial weights, the ranks'
 * batches and taus concatenated. */
static inline dqn_status dp_check(const dp_spec *s, const dp_capture *c, dqn_backend *ref_be,
                                  dp_result *out) {
    memset(out, 0, sizeof *out);
    int W = s->world;
    dqn_update_cfg u = s->ucfg;
    size_t B = (size_t)u.B, obs = (size_t)s->arch.obs_dim, D = (size_t)s->arch.br.D;
    u.B *= W;
    dqn_model ref;
    DQN_TRY(dqn_model_create(&ref, ref_be, &s->arch, &u));
    dqn_status st = dqn_model_init_weights(&ref, s->ucfg.seed);
    if (st == DQN_OK) st = dp_concat(ref_be, ref.x, (void *const *)c->x, W, B * obs * 4);
    if (st == DQN_OK) st = dp_concat(ref_be, ref.xn, (void *const *)c->xn, W, B * obs * 4);
    if (st == DQN_OK) st = dp_concat(ref_be, ref.R, (void *const *)c->R, W, B * 4);
    if (st == DQN_OK) st = dp_concat(ref_be, ref.disc, (void *const *)c->disc, W, B * 4);
    if (st == DQN_OK) st = dp_concat(ref_be, ref.act, (void *const *)c->act, W, B * D * 4);
    if (st == DQN_OK) st = dp_concat(ref_be, ref.tau, (void *const *)c->tau, W, B * u.N * 4);
    if (st == DQN_OK) st = dp_concat(ref_be, ref.tau_t, (void *const *)c->tau_t, W, B * u.Nt * 4);
    if (st == DQN_OK) st = dp_concat(ref_be, ref.tau_k, (void *const *)c->tau_k, W, B * u.K * 4);
    if (st == DQN_OK) st = dqn_model_loss_grad(&ref);
    size_t n = ref.L.n_params;
    float *g = malloc(n * sizeof *g), loss = 0;
    if (st == DQN_OK && !g) st = DQN_ERR(DQN_ERR_NOMEM, "reference gradient");
    if (st == DQN_OK) st = ref_be->ops->d2h(ref_be, g, ref.grads, n * sizeof *g);
    if (st == DQN_OK) st = ref_be->ops->d2h(ref_be, &loss, ref.loss, sizeof loss);
    if (st == DQN_OK) {
        for (int t = 0; t < ref.L.n_tensors; t++) {
            const dqn_tensor *T = &ref.L.t[t];
            double scale = 1e-30, diff = 0;
            for (size_t j = T->offset; j < T->offset + T->size; j++) scale = fmax(scale, fabs(g[j]));
            for (int k = 0; k < W; k++)
                for (size_t j = T->offset; j < T->offset + T->size; j++)
                    diff = fmax(diff, fabs((double)c->grads[k][j] - g[j]));
            if (diff / scale > out->grad_err) {
                out->grad_err = diff / scale;
                snprintf(out->worst, sizeof out->worst, "%s", T->name);
            }
        }
        double mean = 0;
        for (int k = 0; k < W; k++) mean += c->loss[k] / W;
        out->loss_err = fabs(mean - loss) / fmax(fabs(loss), 1e-30);
        for (int k = 0; k < W; k++) out->crc[k] = dqn_crc32(c->params[k], n * sizeof(float));
        out->grads_same = out->params_same = 1;
        for (int k = 1; k < W; k++) {
            out->grads_same &= memcmp(c->grads[k], c->grads[0], n * sizeof(float)) == 0;
            out->params_same &= memcmp(c->params[k], c->params[0], n * sizeof(float)) == 0;
        }
        out->params_finite = 1;
        for (size_t j = 0; j < n; j++) {
            out->params_finite &= isfinite(c->params[0][j]) != 0;
            out->params_moved |= c->params[0][j] != c->params0[j];
        }
    }
    free(g);
    dqn_model_destroy(&ref);
    return st;
}

#endif
