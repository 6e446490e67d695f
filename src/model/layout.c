#include "model/layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"

/* 16 floats = 64 bytes: every tensor starts on a cache line / 16-byte vector boundary. */
#define ALIGN_FLOATS 16

/* packed: the next tensor follows with no padding (the halves of a stacked layer) */
static size_t add_tensor_at(dqn_layout *L, const char *name, int rows, int cols, int fan_in,
                            float init, int packed) {
    dqn_tensor *t = &L->t[L->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->size = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    t->offset = L->n_params;
    t->fan_in = fan_in;
    t->init_value = init;
    L->n_params += packed ? t->size : (t->size + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    return t->offset;
}

static size_t add_tensor(dqn_layout *L, const char *name, int rows, int cols, int fan_in,
                         float init) {
    return add_tensor_at(L, name, rows, cols, fan_in, init, 0);
}

static dqn_lin add_linear(dqn_layout *L, const char *prefix, int out, int in) {
    char name[24];
    dqn_lin l;
    l.out = out;
    l.in = in;
    snprintf(name, sizeof name, "%s.W", prefix);
    l.W = add_tensor(L, name, out, in, in, 0.0f);
    snprintf(name, sizeof name, "%s.b", prefix);
    l.b = add_tensor(L, name, out, 0, in, 0.0f);
    return l;
}

dqn_status dqn_layout_build(dqn_layout *L, const dqn_arch *a) {
    memset(L, 0, sizeof *L);
    if (a->obs_dim < 1 || a->d < 1 || a->n_cos < 1 || a->head_hidden < 1 || a->bottleneck < 0)
        return DQN_ERR(DQN_ERR_ARG, "bad architecture (obs %d, d %d, n_cos %d, hidden %d)",
                       a->obs_dim, a->d, a->n_cos, a->head_hidden);
    if (a->grn_blocks < 0 || a->grn_blocks > DQN_MAX_GRN)
        return DQN_ERR(DQN_ERR_ARG, "grn_blocks %d outside [0, %d]", a->grn_blocks, DQN_MAX_GRN);
    if (a->br.D < 1 || a->br.D > DQN_MAX_BRANCHES)
        return DQN_ERR(DQN_ERR_ARG, "%d action branches outside [1, %d]", a->br.D, DQN_MAX_BRANCHES);
    L->arch = *a;
    int d = a->d;
    L->in = add_linear(L, "in", d, a->obs_dim);
    for (int l = 0; l < a->grn_blocks; l++) {
        /* names grn{l}.Wa / .ba / .Wb / .bb, as docs/dump-format.md lists them */
        dqn_grn_offsets *g = &L->grn[l];
        char n[24];
        snprintf(n, sizeof n, "grn%d.Wa", l); g->a.W = add_tensor(L, n, d, d, d, 0.0f);
        snprintf(n, sizeof n, "grn%d.ba", l); g->a.b = add_tensor(L, n, d, 0, d, 0.0f);
        g->a.out = d; g->a.in = d;
        snprintf(n, sizeof n, "grn%d.Wb", l); g->b.W = add_tensor(L, n, 2 * d, d, d, 0.0f);
        snprintf(n, sizeof n, "grn%d.bb", l); g->b.b = add_tensor(L, n, 2 * d, 0, d, 0.0f);
        g->b.out = 2 * d; g->b.in = d;
        snprintf(n, sizeof n, "grn%d.gamma", l); g->gamma = add_tensor(L, n, d, 0, 0, 1.0f);
        snprintf(n, sizeof n, "grn%d.beta", l); g->beta = add_tensor(L, n, d, 0, 0, 0.0f);
    }
    L->phi = add_linear(L, "phi", d, a->n_cos);
    if (a->bottleneck > 0) L->bn = add_linear(L, "bn", a->bottleneck, 2 * d);
    L->u = a->bottleneck > 0 ? a->bottleneck : d;
    /* v1 and a1 stacked: v1.W then a1.W, v1.b then a1.b, each pair with no gap, so that both
     * heads' hidden layers are one linear layer va ([2H, u], [2H]) */
    const int H = a->head_hidden, U = L->u;
    L->v1 = L->a1 = L->va = (dqn_lin){0, 0, H, U};
    L->va.out = 2 * H;
    L->va.W = L->v1.W = add_tensor_at(L, "v1.W", H, U, U, 0.0f, 1);
    L->a1.W = add_tensor_at(L, "a1.W", H, U, U, 0.0f, 0);
    L->va.b = L->v1.b = add_tensor_at(L, "v1.b", H, 0, U, 0.0f, 1);
    L->a1.b = add_tensor_at(L, "a1.b", H, 0, U, 0.0f, 0);
    L->v2 = add_linear(L, "v2", 1, H);
    L->a2 = add_linear(L, "a2", a->br.A, H);
    return DQN_OK;
}

void dqn_layout_init_params(const dqn_layout *L, uint64_t seed, float *host) {
    memset(host, 0, L->n_params * sizeof *host);
    for (int k = 0; k < L->n_tensors; k++) {
        const dqn_tensor *t = &L->t[k];
        float *p = host + t->offset;
        if (t->fan_in == 0) {
            for (size_t j = 0; j < t->size; j++) p[j] = t->init_value;
            continue;
        }
        float bound = 1.0f / sqrtf((float)t->fan_in);
        for (size_t j = 0; j < t->size; j++) {
            float u = dqn_philox_uniform(seed, DQN_STREAM_INIT, t->offset + j);
            p[j] = (2.0f * u - 1.0f) * bound;
        }
    }
}

const dqn_tensor *dqn_layout_find(const dqn_layout *L, const char *name) {
    for (int k = 0; k < L->n_tensors; k++)
        if (strcmp(L->t[k].name, name) == 0) return &L->t[k];
    return NULL;
}
