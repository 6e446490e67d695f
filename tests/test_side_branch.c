/* The model's side branches (side_begin .. side_end, joined by side_join; ops.def) keep their
 * contract: what the ops on the side write is not read, and what they read is not written, by the
 * main ops issued before the join. A CPU backend that defers every side op to the join (the
 * latest schedule the contract allows; the CUDA backend may run them anywhere in between) must
 * give the plain CPU backend's update bit for bit: an op of the main branch that read a side
 * output too early would see the previous update's values, and one that overwrote a side input
 * would change what the deferred op computes. heads_bwd's leaves, which an op may finish on the
 * side branch, likewise wait for the join. Models with one, two and three GRN blocks, the
 * bottleneck (split and not), K = N and K != N, health off and guard. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "dqn_philox.h"
#include "model/model.h"
#include "replay_fixture.h"

enum { QMAX = 64 };

/* ---- the deferring backend: the CPU's ops, the side's queued until side_join ---- */

typedef enum {
    Q_TRUNK, Q_EMBED, Q_LIN_ACT, Q_LD_FWD, Q_BCAST, Q_HEADS, Q_LIN_BWD, Q_LD_BWD, Q_COPY
} qkind;

typedef struct {
    qkind kind;
    const float *in[6];
    float *out[5];
    int n[8];
    dqn_act act;
    const void *plan;
    const dqn_branches *br;
    dqn_trunk_io trunk;   /* a copy: the caller's lives on its stack */
    size_t count;         /* Q_COPY: floats from in[0] to out[0] */
    float *own;           /* freed once the call has run */
    int lane;             /* the side lane it was issued on (0: a leaf of heads_bwd) */
} qcall;

static dqn_backend *inner;
static dqn_ops ops;
static dqn_backend dfr;
static qcall queue[QMAX];
static int queued, on_side, deferred_total, unbalanced;

static dqn_status push(const qcall *q) {
    if (queued == QMAX) return DQN_ERR(DQN_ERR_ARG, "test: raise QMAX");
    queue[queued] = *q;
    queue[queued++].lane = on_side;
    deferred_total++;
    return DQN_OK;
}

static dqn_status run_op(const qcall *q) {
    const dqn_ops *o = inner->ops;
    switch (q->kind) {
    case Q_COPY:
        memcpy(q->out[0], q->in[0], q->count * sizeof(float));
        return DQN_OK;
    case Q_TRUNK: return o->trunk_fwd(inner, &q->trunk);
    case Q_EMBED:
        return o->iqn_embed_fwd(inner, q->in[0], q->in[1], q->in[2], q->in[3], q->out[0],
                                q->out[1], q->out[2], q->out[3], q->n[0], q->n[1], q->n[2],
                                q->n[3], q->n[4], q->plan);
    case Q_LIN_ACT:
        return o->linear_act_fwd(inner, q->in[0], q->in[1], q->in[2], q->out[0], q->n[0],
                                 q->n[1], q->n[2], q->act);
    case Q_LD_FWD:
        return o->linear_ld_fwd(inner, q->in[0], q->in[1], q->n[3], q->in[2], q->out[0], q->n[0],
                                q->n[1], q->n[2], q->act);
    case Q_BCAST: return o->bcast_add_act(inner, q->in[0], q->out[0], q->n[0], q->n[1], q->n[2], q->act);
    case Q_HEADS:
        return o->heads_fwd(inner, q->in[0], q->in[1], q->in[2], q->in[3], q->in[4], q->out[0],
                            q->out[1], q->out[2], q->n[0], q->n[1], q->br);
    case Q_LIN_BWD:
        return o->linear_bwd(inner, q->in[0], q->in[1], q->in[2], q->out[0], q->out[1], q->out[2],
                             q->n[0], q->n[1], q->n[2]);
    case Q_LD_BWD:
        return o->linear_ld_bwd(inner, q->in[0], q->in[1], q->n[3], q->in[2], q->out[0], q->n[4],
                                q->out[1], q->out[2], q->n[0], q->n[1], q->n[2]);
    }
    return DQN_ERR(DQN_ERR_ARG, "test: op kind %d", (int)q->kind);
}

static dqn_status run(const qcall *q) {
    dqn_status s = run_op(q);
    free(q->own);
    return s;
}

static int lanes_used;   /* bit k: lane k had ops */

static dqn_status d_side_begin(dqn_backend *be, int lane) {
    (void)be;
    if (on_side || lane < 1 || lane > DQN_SIDE_LANES) unbalanced++;
    on_side = lane;
    lanes_used |= 1 << lane;
    return DQN_OK;
}
static dqn_status d_side_end(dqn_backend *be) {
    (void)be;
    if (!on_side) unbalanced++;
    on_side = 0;
    return DQN_OK;
}
static dqn_status d_side_join(dqn_backend *be, int lane) {
    (void)be;
    if (on_side || lane < 0 || lane > DQN_SIDE_LANES) unbalanced++;
    if (lane) {   /* that lane's ops, in their order; the rest stay queued */
        int kept = 0;
        for (int k = 0; k < queued; k++)
            if (queue[k].lane == lane) DQN_TRY(run(&queue[k]));
            else queue[kept++] = queue[k];
        queued = kept;
        return DQN_OK;
    }
    /* the last lane's ops first: an op that read what another lane writes would see it early or
     * late, as it may on a backend that runs the lanes side by side */
    for (int l = DQN_SIDE_LANES; l >= 0; l--)
        for (int k = 0; k < queued; k++)
            if (queue[k].lane == l) DQN_TRY(run(&queue[k]));
    queued = 0;
    return DQN_OK;
}
static int d_side_dw(dqn_backend *be, int M, int K, int N) {
    (void)be, (void)M, (void)K, (void)N;
    return 1;
}

/* each wrapper queues its call on the side, else runs it */
#define DEFER(q) return on_side ? push(&(q)) : run(&(q))

static dqn_status d_trunk_fwd(dqn_backend *be, const dqn_trunk_io *t) {
    (void)be;
    qcall q = {.kind = Q_TRUNK, .trunk = *t};
    DEFER(q);
}
static dqn_status d_iqn_embed_fwd(dqn_backend *be, const float *tau, const float *W,
                                  const float *b, const float *h, float *C, float *phi, float *z,
                                  float *cat, int B, int T, int n_cos, int d, int keep,
                                  const void *hplan) {
    (void)be;
    qcall q = {.kind = Q_EMBED, .in = {tau, W, b, h}, .out = {C, phi, z, cat},
               .n = {B, T, n_cos, d, keep}, .plan = hplan};
    DEFER(q);
}
static dqn_status d_linear_act_fwd(dqn_backend *be, const float *X, const float *W,
                                   const float *b, float *Y, int M, int K, int N, dqn_act act) {
    (void)be;
    qcall q = {.kind = Q_LIN_ACT, .in = {X, W, b}, .out = {Y}, .n = {M, K, N}, .act = act};
    DEFER(q);
}
static dqn_status d_linear_ld_fwd(dqn_backend *be, const float *X, const float *W, int ldw,
                                  const float *b, float *Y, int M, int K, int N, dqn_act act) {
    (void)be;
    qcall q = {.kind = Q_LD_FWD, .in = {X, W, b}, .out = {Y}, .n = {M, K, N, ldw}, .act = act};
    DEFER(q);
}
static dqn_status d_bcast_add_act(dqn_backend *be, const float *hb, float *Y, int B, int T, int N,
                                  dqn_act act) {
    (void)be;
    qcall q = {.kind = Q_BCAST, .in = {hb}, .out = {Y}, .n = {B, T, N}, .act = act};
    DEFER(q);
}
static dqn_status d_heads_fwd(dqn_backend *be, const float *hva, const float *Wv2,
                              const float *bv2, const float *Wa2, const float *ba2, float *V,
                              float *Adv, float *Z, int R, int H, const dqn_branches *br) {
    (void)be;
    qcall q = {.kind = Q_HEADS, .in = {hva, Wv2, bv2, Wa2, ba2}, .out = {V, Adv, Z}, .n = {R, H},
               .br = br};
    DEFER(q);
}
static dqn_status d_linear_bwd(dqn_backend *be, const float *X, const float *W, const float *dY,
                               float *dX, float *dW, float *db, int M, int K, int N) {
    (void)be;
    qcall q = {.kind = Q_LIN_BWD, .in = {X, W, dY}, .out = {dX, dW, db}, .n = {M, K, N}};
    DEFER(q);
}
static dqn_status d_linear_ld_bwd(dqn_backend *be, const float *X, const float *W, int ldw,
                                  const float *dY, float *dX, int acc_dx, float *dW, float *db,
                                  int M, int K, int N) {
    (void)be;
    qcall q = {.kind = Q_LD_BWD, .in = {X, W, dY}, .out = {dX, dW, db},
               .n = {M, K, N, ldw, acc_dx}};
    DEFER(q);
}

/* heads_bwd's five leaves (ops.def) are finished at the next join, as a backend with a side
 * branch may finish them there; until then they hold NaN, which a read before the join shows */
static dqn_status d_heads_bwd(dqn_backend *be, const float *hva, const float *Wv2, const float *Wa2,
                              const float *dV, const float *dAdv, const float *norms,
                              float max_norm, float *dhva, float *dbva, float *dWv2, float *dbv2,
                              float *dWa2, float *dba2, int R, int H, int A) {
    (void)be;
    float *dst[5] = {dbva, dWv2, dbv2, dWa2, dba2}, *tmp[5] = {NULL};
    const size_t cnt[5] = {dbva ? 2 * (size_t)H : 0, (size_t)H, 1, (size_t)A * H, (size_t)A};
    dqn_status s = DQN_OK;
    for (int k = 0; k < 5 && s == DQN_OK; k++)
        if (cnt[k] && !(tmp[k] = malloc(cnt[k] * sizeof(float))))
            s = DQN_ERR(DQN_ERR_NOMEM, "test: heads_bwd leaves");
    if (s == DQN_OK)
        s = inner->ops->heads_bwd(inner, hva, Wv2, Wa2, dV, dAdv, norms, max_norm, dhva, tmp[0],
                                  tmp[1], tmp[2], tmp[3], tmp[4], R, H, A);
    for (int k = 0; k < 5; k++) {
        if (s == DQN_OK && cnt[k]) {
            for (size_t i = 0; i < cnt[k]; i++) dst[k][i] = NAN;
            qcall q = {.kind = Q_COPY, .in = {tmp[k]}, .out = {dst[k]}, .count = cnt[k],
                       .own = tmp[k]};
            if ((s = push(&q)) == DQN_OK) continue;   /* the queued copy frees it */
        }
        free(tmp[k]);
    }
    return s;
}

static dqn_backend *deferring_create(void) {
    CHECK_OK(dqn_backend_cpu_create(&inner));
    if (!inner) return NULL;
    ops = *inner->ops;
    ops.name = "cpu-deferring-side";
    ops.side_begin = d_side_begin, ops.side_end = d_side_end, ops.side_join = d_side_join;
    ops.side_dw = d_side_dw;
    ops.trunk_fwd = d_trunk_fwd, ops.iqn_embed_fwd = d_iqn_embed_fwd;
    ops.linear_act_fwd = d_linear_act_fwd, ops.linear_ld_fwd = d_linear_ld_fwd;
    ops.bcast_add_act = d_bcast_add_act, ops.heads_fwd = d_heads_fwd;
    ops.linear_bwd = d_linear_bwd, ops.linear_ld_bwd = d_linear_ld_bwd;
    ops.heads_bwd = d_heads_bwd;
    dfr = *inner;
    dfr.ops = &ops;
    return &dfr;
}

/* ---- the models and the comparison ---- */

/* three updates on each backend from the same weights and replay: loss, gradient, parameters and
 * target bit for bit */
static void compare(dqn_backend *deferring, const char *what, const dqn_arch *a, int K, int split,
                    dqn_health_mode health) {
    dqn_backend *plain = NULL;
    CHECK_OK(dqn_backend_cpu_create(&plain));
    if (!plain) return;
    dqn_update_cfg u = ucfg_of(8, 5, K);
    u.health = health;
    u.bn_split_rows = split;
    static replay_arrays r;
    dqn_replay_view v;
    fill_replay(&r, a, &v);
    dqn_model m[2];
    dqn_backend *bes[2] = {deferring, plain};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(dqn_model_create(&m[k], bes[k], a, &u));
        CHECK_OK(dqn_model_init_weights(&m[k], 6));
    }
    const int before = deferred_total;
    lanes_used = 0;
    for (int step = 0; step < 3; step++)
        for (int k = 0; k < 2; k++) CHECK_OK(dqn_model_update(&m[k], &v));
    const size_t n = m[0].L.n_params * sizeof(float);
    printf("%s, K %d%s, health %d: %d side ops deferred to their joins\n", what, K,
           split ? ", split bottleneck" : "", (int)health, deferred_total - before);
    CHECK(deferred_total - before > 3 * (2 + a->grn_blocks), "%s: too few side ops (%d)", what,
          deferred_total - before);
    const int every = (1 << (DQN_SIDE_LANES + 1)) - 2;
    CHECK(lanes_used == every, "%s: side lanes used %#x, want %#x: 1 (the target pass, the heads' "
          "layer), 2 (phi's layer) and the trunk's layers in turn over the rest", what,
          (unsigned)lanes_used, (unsigned)every);
    CHECK(queued == 0 && !on_side && unbalanced == 0,
          "%s: %d side ops never joined, side open %d, %d unbalanced calls", what, queued, on_side,
          unbalanced);
    CHECK(memcmp(m[0].loss, m[1].loss, 4) == 0 && memcmp(m[0].grads, m[1].grads, n) == 0 &&
              memcmp(m[0].params, m[1].params, n) == 0 &&
              memcmp(m[0].target, m[1].target, n) == 0,
          "%s: the side ops run at their joins change the update (a main op read or wrote what "
          "the side had not finished)", what);
    queued = on_side = unbalanced = 0;   /* nothing of this model's left for the next */
    for (int k = 0; k < 2; k++) dqn_model_destroy(&m[k]);
    plain->ops->destroy(plain);
}

int main(void) {
    dqn_backend *be = deferring_create();
    if (!be) return check_finish("test_side_branch");
    static const int one[] = {2}, three[] = {3, 5, 5};
    const dqn_arch plain = arch_of(5, 16, 1, 0, 12, 1, one);
    const dqn_arch wide = arch_of(6, 16, 2, 10, 12, 3, three);
    const dqn_arch deep = arch_of(4, 12, 3, 0, 8, 1, one);
    for (int h = 0; h < 2; h++) {
        const dqn_health_mode mode = h ? DQN_HEALTH_GUARD : DQN_HEALTH_OFF;
        compare(be, "one GRN block", &plain, 5, 0, mode);
        compare(be, "one GRN block", &plain, 3, 0, mode);
        compare(be, "two GRN blocks, bottleneck", &wide, 5, 0, mode);
        compare(be, "two GRN blocks, bottleneck", &wide, 5, 1, mode);
        compare(be, "two GRN blocks, bottleneck", &wide, 2, 1, mode);
        compare(be, "three GRN blocks", &deep, 5, 0, mode);
    }
    inner->ops->destroy(inner);
    return check_finish("test_side_branch");
}
