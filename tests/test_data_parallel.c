/* Data parallelism without a GPU (docs/multi-gpu.md): ranks as threads with CPU backends and an
 * in-process all-reduce that keeps NCCL's contract. The mean of the ranks' gradients equals one
 * model's gradient on their batches concatenated (1e-5 relative, head-gradient clip off; with it
 * binding they differ, as documented); the weights stay bit-identical over many updates; the
 * all-reduce runs once per update on the gradient buffer, before the optimizer. Also the CPU
 * backend's collectives (a world of one), the communicator id as text and as a file, rank seeds,
 * and the trainer API's refusals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp_check.h"
#include "train/trainer_internal.h"

static char tmpdir[64];

static dp_spec small_spec(int world, int grn, int bn, dqn_target_mode mode, float head_clip) {
    static const int br[] = {3, 4};
    dp_spec s;
    memset(&s, 0, sizeof s);
    s.world = world;
    s.arch.obs_dim = 5;
    s.arch.d = 16;
    s.arch.grn_blocks = grn;
    s.arch.n_cos = 8;
    s.arch.bottleneck = bn;
    s.arch.head_hidden = 12;
    dqn_branches_init(&s.arch.br, 2, br);
    s.ucfg.B = 6;
    s.ucfg.N = 5;
    s.ucfg.Nt = 4;
    s.ucfg.K = 3;
    dp_adam(&s.ucfg, 1e-3f, 7, 42);
    s.ucfg.mode = mode;
    s.ucfg.head_grad_clip = head_clip;
    s.replay_rows = 64;
    return s;
}

static int run_and_check(dp_spec *s, int updates, dp_result *res) {
    dp_capture cap;
    memset(&cap, 0, sizeof cap);
    cap.updates = updates;
    s->body = dp_capture_body;
    s->arg = &cap;
    dp_rank ranks[DP_MAX_WORLD];
    dqn_status st = dp_run(s, ranks);
    for (int r = 0; r < s->world; r++)
        CHECK(ranks[r].status == DQN_OK, "%s", ranks[r].error);
    dqn_backend *cpu = NULL;
    if (st == DQN_OK) st = dqn_backend_cpu_create(&cpu);
    if (st == DQN_OK) CHECK_OK(st = dp_check(s, &cap, cpu, res));
    if (cpu) cpu->ops->destroy(cpu);
    dp_capture_free(&cap);
    return st == DQN_OK;
}

static void test_identity(void) {
    struct { int world, grn, bn; dqn_target_mode mode; } cases[] = {
        {2, 2, 0, DQN_TARGET_MEAN}, {2, 1, 10, DQN_TARGET_INDEPENDENT},
        {4, 0, 10, DQN_TARGET_MEAN}, {3, 2, 10, DQN_TARGET_INDEPENDENT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dp_spec s = small_spec(cases[i].world, cases[i].grn, cases[i].bn, cases[i].mode, 0);
        dp_result r;
        if (!run_and_check(&s, 40, &r)) continue;
        CHECK(r.grad_err <= 1e-5, "case %zu (%d ranks): averaged gradient vs concatenated batch: "
              "%.3g relative in %s", i, cases[i].world, r.grad_err, r.worst);
        CHECK(r.loss_err <= 1e-5, "case %zu: mean loss %.3g relative", i, r.loss_err);
        CHECK(r.grads_same, "case %zu: ranks hold different averaged gradients", i);
        CHECK(r.params_same, "case %zu: weights differ across ranks after 40 updates", i);
        CHECK(r.params_finite && r.params_moved, "case %zu: weights finite %d, moved %d", i,
              r.params_finite, r.params_moved);
        printf("%d ranks (grn %d, bottleneck %d, %s): gradient %.2g relative (%s), loss %.2g; "
               "weights %s after 40 updates\n", cases[i].world, cases[i].grn, cases[i].bn,
               cases[i].mode == DQN_TARGET_MEAN ? "mean" : "independent", r.grad_err, r.worst,
               r.loss_err, r.params_same ? "identical" : "DIFFER");
    }
}

/* SPEC 4's head-gradient clip acts on each rank's batch: binding, data parallel is not one big
 * batch (docs/multi-gpu.md); the ranks still take the same step. */
static void test_head_clip_binds_per_rank(void) {
    dp_spec s = small_spec(2, 1, 0, DQN_TARGET_MEAN, 1e-4f);
    dp_result r;
    if (!run_and_check(&s, 3, &r)) return;
    CHECK(r.grad_err > 1e-3, "a binding head clip should make the ranks' mean differ from the "
          "big batch, got %.3g", r.grad_err);
    CHECK(r.params_same, "weights differ across ranks with the head clip binding");
    printf("head clip 1e-4 (binding): averaged gradient differs by %.2g relative, as documented\n",
           r.grad_err);
}

/* A backend whose all-reduce zeroes the gradient and counts: the model must call it once per
 * update on the whole gradient buffer, between the backward and the optimizer (a zero gradient
 * leaves Adam's step at 0, so the weights must not move while the counter does). */
static struct { int calls; const float *x; size_t n; } seen;
static int two_ranks(const dqn_backend *be) {
    (void)be;
    return 2;
}
static dqn_status zero_reduce(dqn_backend *be, float *x, size_t n) {
    seen.calls++;
    seen.x = x;
    seen.n = n;
    return be->ops->fill(be, x, 0.0f, n);
}

static void test_stage_position(void) {
    dp_spec s = small_spec(1, 1, 10, DQN_TARGET_MEAN, 0);
    for (int zero = 0; zero < 2; zero++) {
        dqn_backend *be;
        CHECK_OK(dqn_backend_cpu_create(&be));
        dqn_ops ops = *be->ops;
        ops.comm_world = two_ranks;
        ops.allreduce_mean = zero_reduce;
        if (zero) be->ops = &ops;
        dp_rank r;
        memset(&r, 0, sizeof r);
        r.spec = &s;
        r.be = be;
        CHECK_OK(dqn_model_create(&r.m, be, &s.arch, &s.ucfg));
        CHECK_OK(dqn_model_init_weights(&r.m, 1));
        CHECK_OK(dp_fill_replay(&r));
        size_t n = r.m.L.n_params;
        float *before = malloc(n * sizeof *before);
        memcpy(before, r.m.params, n * sizeof *before);
        seen.calls = 0;
        for (int k = 0; k < 3; k++) CHECK_OK(dqn_model_update(&r.m, &r.view));
        int same = memcmp(before, r.m.params, n * sizeof *before) == 0;
        if (zero) {
            CHECK(seen.calls == 3, "all-reduce called %d times in 3 updates", seen.calls);
            CHECK(seen.x == r.m.grads && seen.n == n, "all-reduce on %p [%zu], gradient %p [%zu]",
                  (const void *)seen.x, seen.n, (void *)r.m.grads, n);
            CHECK(same, "the weights moved: the all-reduce did not run before the optimizer");
        } else {
            CHECK(seen.calls == 0, "all-reduce called without a communicator");
            CHECK(!same, "a plain update did not move the weights");
        }
        CHECK(*r.m.step == 3, "update counter %llu after 3 updates", (unsigned long long)*r.m.step);
        free(before);
        dqn_replay_destroy(&r.replay);
        dqn_model_destroy(&r.m);
        be->ops->destroy(be);
    }
}

static int has(const char *part) { return strstr(dqn_last_error(), part) != NULL; }

static void test_cpu_collectives(void) {
    dqn_backend *be;
    CHECK_OK(dqn_backend_cpu_create(&be));
    CHECK(be->ops->comm_world(be) == 0, "a fresh backend is in a world of %d",
          be->ops->comm_world(be));
    dqn_rank_info ri;
    memset(&ri, 0, sizeof ri);
    ri.world = 2;
    CHECK(be->ops->comm_init(be, &ri) == DQN_ERR_UNSUPPORTED && has("--device cuda"), "%s",
          dqn_last_error());
    ri.world = 1;
    ri.rank = 1;
    CHECK(be->ops->comm_init(be, &ri) == DQN_ERR_ARG && has("rank 1"), "%s", dqn_last_error());
    ri.rank = 0;
    CHECK_OK(be->ops->comm_init(be, &ri));
    CHECK(be->ops->comm_world(be) == 1, "world %d after joining one", be->ops->comm_world(be));
    float x[5] = {1, -2.5f, 3e30f, -0.0f, 7}, y[5];
    memcpy(y, x, sizeof x);
    CHECK_OK(be->ops->allreduce_mean(be, x, 5));
    CHECK(memcmp(x, y, sizeof x) == 0, "the mean over one rank changed x");
    CHECK_OK(be->ops->allreduce_mean(be, NULL, 0));
    CHECK(be->ops->allreduce_mean(be, NULL, 3) == DQN_ERR_ARG, "NULL x accepted");
    be->ops->destroy(be);
}

static void test_comm_id(void) {
    dqn_comm_id id, back;
    for (int i = 0; i < DQN_COMM_ID_BYTES; i++) id.bytes[i] = (unsigned char)(i * 37 + 11);
    char hex[DQN_COMM_ID_HEX];
    dqn_comm_id_to_hex(&id, hex);
    CHECK(strlen(hex) == 2 * DQN_COMM_ID_BYTES && strncmp(hex, "0b30", 4) == 0, "hex %.8s...", hex);
    CHECK_OK(dqn_comm_id_from_hex(hex, "DQN_NCCL_ID", &back));
    CHECK(memcmp(&id, &back, sizeof id) == 0, "hex round trip");
    hex[0] = 'A';   /* upper case is fine */
    CHECK_OK(dqn_comm_id_from_hex(hex, "DQN_NCCL_ID", &back));
    CHECK(back.bytes[0] == 0xAB, "byte 0 is %02x", back.bytes[0]);
    hex[7] = 'z';
    memcpy(&back, &id, sizeof id);
    CHECK(dqn_comm_id_from_hex(hex, "DQN_NCCL_ID", &back) == DQN_ERR_ARG &&
          has("DQN_NCCL_ID") && has("character 8"), "%s", dqn_last_error());
    CHECK(memcmp(&id, &back, sizeof id) == 0, "a bad id changed the output");
    CHECK(dqn_comm_id_from_hex("abc", "X", &back) == DQN_ERR_ARG && has("3 characters"), "%s",
          dqn_last_error());

    char path[128], bad[128];
    snprintf(path, sizeof path, "%s/nccl_id", tmpdir);
    CHECK(dqn_comm_id_read_file(path, 0.2, &back) == DQN_ERR_IO && has("did not appear"), "%s",
          dqn_last_error());
    CHECK_OK(dqn_comm_id_write_file(path, &id));
    memset(&back, 0, sizeof back);
    CHECK_OK(dqn_comm_id_read_file(path, 1, &back));
    CHECK(memcmp(&id, &back, sizeof id) == 0, "file round trip");
    CHECK(dqn_comm_id_write_file(path, &id) == DQN_ERR_IO && has("exists"), "%s",
          dqn_last_error());
    snprintf(bad, sizeof bad, "%s/nccl_id_bad", tmpdir);
    FILE *f = fopen(bad, "w");
    fputs("0123\n", f);
    fclose(f);
    CHECK(dqn_comm_id_read_file(bad, 1, &back) == DQN_ERR_FORMAT && has(bad), "%s",
          dqn_last_error());
    unlink(path);
    unlink(bad);
    /* nothing but the id is left behind (no temporary file) */
    char probe[160];
    snprintf(probe, sizeof probe, "%s/nccl_id.tmp.%ld", tmpdir, (long)getpid());
    CHECK(access(probe, F_OK) != 0, "%s left behind", probe);
}

static void test_rank_seed(void) {
    uint64_t seen_keys[8];
    CHECK(dqn_rank_seed(1234, 0) == 1234, "rank 0 keeps the run's seed");
    for (uint32_t r = 0; r < 8; r++) {
        seen_keys[r] = dqn_rank_seed(1234, r);
        for (uint32_t q = 0; q < r; q++)
            CHECK(seen_keys[q] != seen_keys[r], "ranks %u and %u share a seed key", q, r);
    }
    CHECK(dqn_rank_seed(1235, 1) != dqn_rank_seed(1234, 1), "rank keys ignore the seed");
}

static void test_trainer_api(void) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    snprintf(c.device, sizeof c.device, "cpu");
    dqn_trainer *t = NULL;
    c.ranks = 2;
    snprintf(c.device, sizeof c.device, "cuda");
    CHECK(dqn_trainer_create(&c, &t) == DQN_ERR_ARG && has("dqn_trainer_create_rank") && !t,
          "%s", dqn_last_error());
    dqn_rank_info ri;
    memset(&ri, 0, sizeof ri);
    ri.world = 3;
    CHECK(dqn_trainer_create_rank(&c, &ri, &t) == DQN_ERR_ARG && has("ranks is 2"), "%s",
          dqn_last_error());
    ri.world = 2;
    ri.rank = 2;
    CHECK(dqn_trainer_create_rank(&c, &ri, &t) == DQN_ERR_ARG && has("rank 2 of a world of 2"),
          "%s", dqn_last_error());
    c.ranks = 1;
    ri.world = 1;
    ri.rank = 0;
    snprintf(c.device, sizeof c.device, "cpu");
    CHECK(dqn_trainer_create_rank(&c, &ri, &t) == DQN_ERR_ARG && has("need device cuda") && !t,
          "%s", dqn_last_error());

    /* a single-process trainer: any_rank is its own flag */
    c.steps = 300;
    c.learning_starts = 100;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    int any = -1;
    CHECK_OK(dqn_trainer_any_rank(t, 1, &any));
    CHECK(any == 1, "any_rank(1) = %d", any);
    CHECK_OK(dqn_trainer_any_rank(t, 0, &any));
    CHECK(any == 0, "any_rank(0) = %d", any);

    /* a data-parallel run's checkpoint loads as one process on any device, keeping its ranks */
    CHECK_OK(dqn_trainer_run_until(t, 200));
    t->cfg.ranks = 4;
    snprintf(t->cfg.device, sizeof t->cfg.device, "cuda");
    char path[128];
    snprintf(path, sizeof path, "%s/ranks4.bin", tmpdir);
    CHECK_OK(dqn_trainer_save(t, path));
    dqn_trainer_destroy(t);
    t = NULL;
    CHECK_OK(dqn_trainer_load(path, "cpu", &t));
    if (t) {
        CHECK(dqn_trainer_config(t)->ranks == 4, "ranks %d after load",
              dqn_trainer_config(t)->ranks);
        dqn_train_stats st;
        dqn_trainer_stats(t, &st);
        CHECK(st.env_steps == 200, "env steps %lld after load", (long long)st.env_steps);
        dqn_trainer_destroy(t);
    }
    unlink(path);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dqn_test_dp_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_cpu_collectives();
    test_stage_position();
    test_identity();
    test_head_clip_binds_per_rank();
    test_comm_id();
    test_rank_seed();
    test_trainer_api();
    rmdir(tmpdir);
    return check_finish("test_data_parallel");
}
