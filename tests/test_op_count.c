/* The update's op structure, counted on the counting CPU backend (tests/op_counter.h): the counter
 * is faithful (an update through it equals one on the plain CPU backend bit for bit, though it
 * leaves NaN in the rows of C and phi that iqn_embed_fwd need not write); with K == N
 * the online net runs one pass over x and x' (two forward passes in all, three when K != N);
 * each pass runs the fused heads, GRN and IQN ops (the embedding in one) and none of the ops they
 * replace, and the split bottleneck when asked; the backward has no axpy but the GRN residuals';
 * sampling and the optimizer are three ops. Prints the estimated CUDA graph nodes per update of
 * the benchmark's two models. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "dqn_philox.h"
#include "model/model.h"
#include "op_counter.h"
#include "replay_fixture.h"

/* Two updates on the counting backend and on a plain CPU backend: loss, parameters, target and
 * step agree bit for bit. */
static void test_faithful(dqn_backend *counting, const dqn_arch *a, const dqn_update_cfg *u) {
    dqn_backend *plain = NULL;
    CHECK_OK(dqn_backend_cpu_create(&plain));
    dqn_model m[2];
    dqn_backend *bes[2] = {counting, plain};
    static replay_arrays r;
    dqn_replay_view v;
    fill_replay(&r, a, &v);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(dqn_model_create(&m[k], bes[k], a, u));
        CHECK_OK(dqn_model_init_weights(&m[k], 4));
    }
    for (int step = 0; step < 2; step++)
        for (int k = 0; k < 2; k++) CHECK_OK(dqn_model_update(&m[k], &v));
    size_t n = m[0].L.n_params * sizeof(float);
    CHECK(memcmp(m[0].loss, m[1].loss, 4) == 0 && memcmp(m[0].params, m[1].params, n) == 0 &&
              memcmp(m[0].target, m[1].target, n) == 0 && *m[0].step == 2 && *m[1].step == 2,
          "an update through the counting backend differs from the plain CPU backend's");
    for (int k = 0; k < 2; k++) dqn_model_destroy(&m[k]);
    plain->ops->destroy(plain);
}

/* one update's counts: the loss-and-gradient stage, then the whole update */
static void count_update(dqn_model *m, const dqn_replay_view *v, long *stage_calls) {
    oc_reset();
    CHECK_OK(dqn_model_loss_grad(m));
    *stage_calls = oc_calls();
    oc_reset();
    CHECK_OK(dqn_model_update(m, v));
}

static void test_structure(dqn_backend *be, const dqn_arch *a, int B, int N, int K, int split) {
    dqn_update_cfg u = ucfg_of(B, N, K);
    u.bn_split_rows = split ? 1 : 0;
    dqn_model m;
    static replay_arrays r;
    dqn_replay_view v;
    fill_replay(&r, a, &v);
    CHECK_OK(dqn_model_create(&m, be, a, &u));
    CHECK_OK(dqn_model_init_weights(&m, 4));
    long stage = 0;
    count_update(&m, &v, &stage);
    const long passes = K == N ? 2 : 3, L = a->grn_blocks;
    const long bn = a->bottleneck > 0 && !split, sp = a->bottleneck > 0 && split;
    printf("bottleneck %d%s, grn %ld, K %s N: %ld ops per update, ~%ld nodes;", a->bottleneck > 0,
           sp ? " (split)" : "", L, K == N ? "==" : "!=", oc_calls(), oc_nodes());
    oc_print(stdout);
    CHECK(oc_unwrapped() == 0, "%d compute ops are not counted", oc_unwrapped());
    CHECK(oc_count("iqn_embed_fwd") == passes && oc_count("heads_fwd") == passes,
          "K %d, N %d: %ld / %ld forward passes (iqn_embed_fwd / heads_fwd), want %ld", K, N,
          oc_count("iqn_embed_fwd"), oc_count("heads_fwd"), passes);
    CHECK(oc_count("q_argmax") == 1 && oc_count("targets_huber") == 1 &&
              oc_count("iqn_targets") == 0 && oc_count("quantile_huber") == 0,
          "argmax once, targets and loss in one op");
    /* per pass: the trunk (input layer and GRN blocks) in one op, then [bn], va (phi's is
     * iqn_embed_fwd's); split: the bottleneck's two halves and the broadcast add */
    CHECK(oc_count("trunk_fwd") == passes, "%ld trunk forwards, want %ld", oc_count("trunk_fwd"),
          passes);
    CHECK(oc_count("linear_fwd") + oc_count("linear_act_fwd") == passes * (1 + bn),
          "%ld linear forwards, want %ld", oc_count("linear_fwd") + oc_count("linear_act_fwd"),
          passes * (1 + bn));
    CHECK(oc_count("linear_ld_fwd") == 2 * sp * passes && oc_count("bcast_add_act") == sp * passes,
          "split bottleneck: %ld linear_ld_fwd, %ld bcast_add_act", oc_count("linear_ld_fwd"),
          oc_count("bcast_add_act"));
    CHECK(oc_count("grn_gate_ln_fwd") == 0 && oc_count("grn_ln_gate_bwd") == L,
          "GRN tails: %ld forward, %ld backward", oc_count("grn_gate_ln_fwd"),
          oc_count("grn_ln_gate_bwd"));
    /* the ops the fused ones replace are gone */
    const char *gone[] = {"dueling_fwd", "gate_fwd", "layernorm_fwd", "gate_bwd", "layernorm_bwd",
                          "mul_bcast_fwd", "mul_bcast_bwd", "concat_bcast_fwd", "cos_embed", "iqn_fwd",
                          "concat_bcast_bwd", "clip_by_norm", "adam", "target_update",
                          "step_incr", "sample_batch", "rand_uniform_multi", "fill"};
    for (size_t k = 0; k < sizeof gone / sizeof gone[0]; k++)
        CHECK(oc_count(gone[k]) == 0, "%s called %ld times", gone[k], oc_count(gone[k]));
    /* backward: in, L x b, phi, [bn], va; each GRN block's a accumulates its input gradient
     * into the residual's (linear_ld_bwd, no axpy); relu_bwd only for the bottleneck's ReLU; the
     * GRN's ELU forward is linear_act_fwd's */
    CHECK(oc_count("linear_bwd") == 1 + L + 1 + bn + 1 &&
              oc_count("linear_ld_bwd") == 2 * sp + L && oc_count("relu_bwd_tausum") == sp,
          "%ld linear backwards, %ld linear_ld_bwd, %ld relu_bwd_tausum", oc_count("linear_bwd"),
          oc_count("linear_ld_bwd"), oc_count("relu_bwd_tausum"));
    CHECK(oc_count("axpy") == 0 && oc_count("elu_fwd") == 0 && oc_count("relu_bwd") == bn &&
              oc_count("heads_bwd") == 1 && oc_count("l2_norm2") == 1 && oc_count("iqn_bwd") == 1,
          "backward: axpy %ld, elu_fwd %ld (want 0), relu_bwd %ld (want %ld), heads_bwd %ld, "
          "l2_norm2 %ld",
          oc_count("axpy"), oc_count("elu_fwd"), oc_count("relu_bwd"), bn, oc_count("heads_bwd"),
          oc_count("l2_norm2"));
    /* sampling and the optimizer around the stage: sample_draws, l2_norm, adam_target_step */
    CHECK(oc_calls() - stage == 3 && oc_count("sample_draws") == 1 && oc_count("l2_norm") == 1 &&
              oc_count("adam_target_step") == 1,
          "%ld ops outside the loss-and-gradient stage, want 3", oc_calls() - stage);
    dqn_model_destroy(&m);
}

/* The health kernels of one update: detect mode adds the commit alone (it runs the optimizer
 * step); guard mode its inline clamp points too, except those an op runs as it reads or writes
 * the buffer (the heads' in l2_norm2 while the clip is on, the split's d_concat in
 * relu_bwd_tausum, d_trunk in the last GRN block's backward, the split's d_z in iqn_bwd):
 * grn0.d_in always, d_concat without the split, d_trunk without a GRN block, the heads' without
 * the clip. */
static void test_health_kernels(dqn_backend *be, const dqn_arch *a, int split, float clip) {
    static replay_arrays r;
    dqn_replay_view v;
    fill_replay(&r, a, &v);
    const long L = a->grn_blocks, bn = a->bottleneck > 0;
    for (int mode = DQN_HEALTH_OFF; mode <= DQN_HEALTH_GUARD; mode++) {
        dqn_update_cfg u = ucfg_of(8, 4, 4);
        u.bn_split_rows = split;
        u.head_grad_clip = clip;
        u.health = (dqn_health_mode)mode;
        dqn_model m;
        CHECK_OK(dqn_model_create(&m, be, a, &u));
        CHECK_OK(dqn_model_init_weights(&m, 4));
        long stage = 0;
        count_update(&m, &v, &stage);
        const long want = mode == DQN_HEALTH_OFF     ? 0
                          : mode == DQN_HEALTH_DETECT ? 1
                                                      : 1 + (L > 0) + (bn && !split) + (L == 0) +
                                                            (clip == 0.0f);
        CHECK(oc_count("health_check") == want && oc_count("health_fault") == 0 &&
                  oc_count("adam_target_step") == (mode == DQN_HEALTH_OFF),
              "health mode %d, grn %ld, bottleneck %ld, split %d, clip %g: %ld health kernels, "
              "want %ld; adam_target_step %ld", mode, L, bn, split, (double)clip,
              oc_count("health_check"), want, oc_count("adam_target_step"));
        dqn_model_destroy(&m);
    }
}

/* the benchmark's models (bench_update), counted dry at B = 32 and 4096 */
static void print_bench_models(void) {
    static const int br2[] = {2}, br355[] = {3, 5, 5};
    const dqn_arch models[2] = {arch_of(4, 64, 1, 0, 64, 1, br2), arch_of(64, 256, 2, 128, 256, 3, br355)};
    const char *names[2] = {"cartpole", "seed"};
    oc_dry = 1;
    for (int k = 0; k < 2; k++)
        for (int B = 32; B <= 4096; B *= 128) {
            dqn_arch a = models[k];
            a.n_cos = 64;
            dqn_update_cfg u = ucfg_of(B, 32, 32);
            u.Nt = 32;
            dqn_backend *be = &oc_be;
            dqn_model m;
            CHECK_OK(dqn_model_create(&m, be, &a, &u));
            oc_reset();
            uint32_t size = 1;
            dqn_replay_view v = {NULL, NULL, NULL, NULL, NULL, &size, NULL};
            CHECK_OK(dqn_model_update(&m, &v));
            printf("%s model, B %d, N = N' = K = 32: %ld ops, ~%ld CUDA nodes, %.4g GFLOP per update\n",
                   names[k], B, oc_calls(), oc_nodes(), oc_flops * 1e-9);
            dqn_model_destroy(&m);
        }
    oc_dry = 0;
}

int main(void) {
    dqn_backend *be = NULL;
    CHECK_OK(oc_create(&be));
    if (!be) return check_finish("test_op_count");
    static const int one[] = {2}, three[] = {3, 5, 5};
    const dqn_arch plain = arch_of(5, 16, 1, 0, 12, 1, one);
    const dqn_arch wide = arch_of(6, 16, 2, 10, 12, 3, three);
    dqn_update_cfg u = ucfg_of(8, 4, 4);
    test_faithful(be, &wide, &u);
    u.bn_split_rows = 1;
    test_faithful(be, &wide, &u);
    u = ucfg_of(8, 4, 3);
    test_faithful(be, &plain, &u);
    test_structure(be, &plain, 8, 4, 4, 0);
    test_structure(be, &plain, 8, 4, 3, 0);
    test_structure(be, &wide, 8, 5, 5, 0);
    test_structure(be, &wide, 8, 5, 2, 0);
    test_structure(be, &wide, 8, 5, 5, 1);
    test_structure(be, &wide, 8, 5, 2, 1);
    const dqn_arch bare = arch_of(5, 16, 0, 0, 12, 1, one);
    for (int sp = 0; sp < 2; sp++) {
        test_health_kernels(be, &wide, sp, 0.5f);
        test_health_kernels(be, &wide, sp, 0.0f);
    }
    test_health_kernels(be, &plain, 0, 0.5f);
    test_health_kernels(be, &bare, 0, 0.5f);
    print_bench_models();
    be->ops->destroy(be);
    return check_finish("test_op_count");
}
