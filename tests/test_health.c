/* The numerical-health subsystem on the CPU backend (SPEC 4): the slot table; healthy runs record
 * no event, feed the ISV with the figures a direct computation gives, and leave every value
 * bitwise as health off leaves it (detect and guard); for every slot, a NaN, an Inf and a huge
 * value injected at update 5 are reported at exactly that slot and update, and in guard mode the
 * weights stay finite; a real overflow (a learning rate of 1e4, no injection) is localised in
 * detect mode and survived in guard mode; the replay of a saved event reproduces it; the health
 * state goes through a checkpoint; the commit's optimizer step equals adam_target_step, with its
 * backup, its skip and its rollback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "health_rig.h"
#include "train/trainer_internal.h"

static const char *const arch_name[2] = {"cartpole", "seed"};

static int stage_rank(const char *s) {
    static const char *const order[] = {"sample", "forward", "target", "loss", "backward",
                                        "optimizer"};
    for (int k = 0; k < 6; k++)
        if (strcmp(s, order[k]) == 0) return k;
    return -1;
}

static void test_table(void) {
    for (int sm = 0; sm < 2; sm++) {
        dqn_arch a;
        rig_arch(&a, sm, 0);
        dqn_layout L;
        CHECK_OK(dqn_layout_build(&L, &a));
        dqn_health_table t;
        CHECK_OK(dqn_health_table_build(&t, &L, 8, 4, 4, 0));
        /* SPEC 4's slots: obs, GRN outputs, phi, z, concat + bottleneck out (m > 0), V, A, Z, y,
         * loss, dZ, dV, dA, d_concat (m > 0), d_z, d_trunk, GRN input grads, every parameter
         * gradient, the norm, the parameters */
        int want = 1 + a.grn_blocks + 2 + (a.bottleneck ? 2 : 0) + 5 + 3 + (a.bottleneck ? 1 : 0) +
                   2 + a.grn_blocks + L.n_tensors + 2;
        CHECK(t.n_slots == want, "%s: %d slots, want %d", arch_name[sm], t.n_slots, want);
        int guards = 0, prev = 0;
        for (int s = 0; s < t.n_slots; s++) {
            int r = stage_rank(t.slot[s].stage);
            CHECK(r >= prev, "%s: slot %s (%s) out of execution order", arch_name[sm],
                  t.slot[s].name, t.slot[s].stage);
            prev = r;
            for (int u = 0; u < s; u++)
                CHECK(strcmp(t.slot[u].name, t.slot[s].name) != 0, "duplicate slot %s",
                      t.slot[s].name);
            CHECK(t.slot[s].bound_isv >= 0 && t.slot[s].bound_isv < t.n_isv, "slot %s bound",
                  t.slot[s].name);
            guards += t.slot[s].guard;
            char spec[64];
            snprintf(spec, sizeof spec, "%s:7:huge", t.slot[s].name);
            dqn_fault f[4];
            int n = 0;
            CHECK_OK(dqn_fault_parse(spec, &t, f, &n));
            CHECK(n == 1 && f[0].slot == s && f[0].at == 7 && f[0].kind == 3, "parse %s", spec);
        }
        /* the default guard points and their bounds */
        CHECK(guards == (a.bottleneck ? 5 : 4), "%s: %d guard points", arch_name[sm], guards);
        CHECK(t.slot[t.d_value].guard && t.slot[t.d_adv].guard && t.slot[t.d_trunk].guard &&
                  t.slot[t.grn_din[0]].guard, "guard points");
        CHECK(t.slot[t.d_value].bound_isv == t.i_q && t.slot[t.d_adv].bound_isv == t.i_q,
              "head guards are bounded by the Q-value scale");
        CHECK(t.slot[t.d_trunk].bound_isv == t.i_ln[a.grn_blocks - 1] &&
                  t.slot[t.grn_din[0]].bound_isv == t.i_ln[0],
              "trunk guards are bounded by the LayerNorm RMS");
        CHECK(strcmp(t.isv[t.i_scale + t.phi], "scale.phi") == 0, "scale entry of phi");
        dqn_fault f[4];
        int n;
        CHECK(dqn_fault_parse("nope:1:nan", &t, f, &n) == DQN_ERR_ARG &&
                  strstr(dqn_last_error(), "\"nope\" is not a slot"),
              "unknown slot: %s", dqn_last_error());
        CHECK(dqn_fault_parse("phi:1:nan,z:2:inf", &t, f, &n) == DQN_OK && n == 2 &&
                  f[1].slot == t.z && f[1].kind == 2, "two faults");
        if (a.bottleneck) {   /* split: no concat buffer; d_concat is [B, m]; d_z is guarded */
            dqn_health_table u;
            CHECK_OK(dqn_health_table_build(&u, &L, 8, 4, 4, 1));
            CHECK(u.n_slots == t.n_slots - 1 && u.cat == -1 && u.slot[u.d_concat].n == 8u * 8u &&
                      u.slot[u.d_z].guard && u.slot[u.d_concat].guard, "split slot table");
        }
    }
}

static double mean_abs(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += fabs((double)x[i]);
    return s / (double)n;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* The commit's optimizer step (dqn_hadam) on the CPU: the same values as adam_target_step, the
 * backup of the state before it, the skip when the norm leaves its range (guard mode) and when it
 * is NaN, a fault that the commit rolls back. */
static void test_commit_optimizer(void) {
    dqn_backend *be;
    CHECK_OK(dqn_backend_cpu_create(&be));
    enum { N = 1001, F = 4 };
    static float st[F][N], ref[F][N], bk[F][N], before[F][N];
    float g[N];
    for (int i = 0; i < N; i++) {
        g[i] = 2.0f * dqn_philox_uniform(9, 1, (uint64_t)i) - 1.0f;
        for (int k = 0; k < F; k++) {
            float u = dqn_philox_uniform(9, 2 + (uint32_t)k, (uint64_t)i);
            st[k][i] = ref[k][i] = k == 2 ? 1e-3f * u : 2.0f * u - 1.0f;   /* v >= 0 */
        }
    }
    dqn_health_block *blk = calloc(1, sizeof *blk);
    blk->event.slot = -1;
    blk->isv[0] = 2.0f;    /* the parameters' bound: 2e6 */
    blk->isv[1] = 10.0f;   /* the norm's: 1e7 */
    uint64_t step = 7, rstep = 7;
    float gn = 0.0f;
    dqn_hadam ad = {st[0], g, st[1], st[2], st[3], N, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, &gn,
                    10.0f, 2, 0.0f, &step, bk[0], bk[1], bk[2], bk[3], 1, 1, {10}, {1}};
    dqn_hcheck kp = {st[0], N, 0, 0, 2, -1, DQN_HSTAT_NONE, 0};
    dqn_hcopy rb[F];
    for (int k = 0; k < F; k++) rb[k] = (dqn_hcopy){st[k], bk[k], sizeof st[k], DQN_HCOPY_ON_ROLLBACK};
    dqn_hplan_desc d = {.blk = blk, .step = &step, .guard_scale = 1e6f, .guard_floor = 1e3f,
                        .decay = 0.99f, .guard_mode = 1, .checks = &kp, .n_checks = 1,
                        .copies = rb, .n_copies = F, .commit = 1, .n_slots = 1,
                        .rollback_slot = 0, .step_after = 1, .adam = &ad};
    void *plan;
    CHECK_OK(be->ops->health_plan(be, &d, &plan));
    /* updates 7..10: healthy, a norm of 3e7 (above 1e7: skipped), a NaN norm (skipped), the fault */
    const float norms[4] = {3.0f, 3e7f, NAN, 4.0f};
    for (int u = 0; u < 4; u++) {
        memcpy(before, st, sizeof st);
        gn = norms[u];
        int32_t skip = u == 1 || u == 2;
        CHECK_OK(be->ops->adam_target_step(be, ref[0], g, ref[1], ref[2], ref[3], N, 1e-2f, 0.9f,
                                           0.999f, 1e-8f, 0.01f, &gn, 10.0f, 2, 0.0f, &rstep,
                                           &skip));
        CHECK_OK(be->ops->health_check(be, plan));
        CHECK(memcmp(bk, before, sizeof bk) == 0, "update %d: the backup is not the state before",
              7 + u);
        CHECK(step == rstep && step == 8 + (uint64_t)u, "update %d: counter %llu", 7 + u,
              (unsigned long long)step);
        if (u < 3)
            CHECK(memcmp(st, ref, sizeof st) == 0, "update %d: the commit's step differs from "
                  "adam_target_step", 7 + u);
        else
            CHECK(memcmp(st, before, sizeof st) == 0, "update 10: the fault was not rolled back");
    }
    CHECK(blk->skipped == 3 && blk->rolled_back == 1 && blk->event.slot == 0 &&
              blk->event.update == 10 && blk->event.kind == DQN_EVENT_NAN && blk->updates == 4,
          "skips %llu (want 3), rollbacks %llu (1), event at %lld (10)",
          (unsigned long long)blk->skipped, (unsigned long long)blk->rolled_back,
          (long long)blk->event.update);
    /* detect mode counts but never skips */
    blk->isv[1] = 10.0f;
    be->ops->health_plan_free(be, plan);
    d.guard_mode = 0;
    CHECK_OK(be->ops->health_plan(be, &d, &plan));
    memcpy(st, ref, sizeof st);   /* (the rollback left st a step behind ref) */
    step = rstep;
    gn = 3e7f;
    int32_t noskip = 0;
    CHECK_OK(be->ops->adam_target_step(be, ref[0], g, ref[1], ref[2], ref[3], N, 1e-2f, 0.9f,
                                       0.999f, 1e-8f, 0.01f, &gn, 10.0f, 2, 0.0f, &rstep, &noskip));
    CHECK_OK(be->ops->health_check(be, plan));
    CHECK(memcmp(st, ref, sizeof st) == 0 && blk->skipped == 3, "detect mode skipped a step");
    be->ops->health_plan_free(be, plan);
    free(blk);
    be->ops->destroy(be);
}

/* iqn_embed_fwd with a deferred plan of phi and z leaves what the op and then health_check(plan)
 * leave (the CPU's side of the contract CUDA's kernel hosts; test_gpu_health checks that one):
 * the commits that finish either record the same bytes, a NaN and an Inf in h included. */
static void test_embed_hplan(void) {
    dqn_backend *be;
    CHECK_OK(dqn_backend_cpu_create(&be));
    enum { B = 5, T = 6, NC = 8, D = 16, R = B * T, KEEP = 3 * T };
    static float tau[R], W[D * NC], b[D], h[B * D], C[2][R * NC], phi[2][R * D], z[2][R * D];
    for (int i = 0; i < R; i++) tau[i] = dqn_philox_uniform(5, 1, (uint64_t)i);
    for (int i = 0; i < D * NC; i++) W[i] = dqn_philox_uniform(5, 2, (uint64_t)i) - 0.5f;
    for (int i = 0; i < D; i++) b[i] = dqn_philox_uniform(5, 3, (uint64_t)i) - 0.5f;
    for (int i = 0; i < B * D; i++) h[i] = 2.0f * dqn_philox_uniform(5, 4, (uint64_t)i) - 1.0f;
    h[D + 3] = NAN;
    h[2 * D + 7] = INFINITY;
    dqn_health_block *blk[2];
    for (int k = 0; k < 2; k++) {
        uint64_t step = 4;
        blk[k] = calloc(1, sizeof *blk[k]);
        blk[k]->event.slot = -1;
        blk[k]->isv[0] = 0.5f;
        dqn_hcheck ck[2] = {{phi[k], (size_t)KEEP * D, 0, 0, 2, -1, DQN_HSTAT_NONE, 0},
                            {z[k], (size_t)KEEP * D, 1, 1, 3, -1, DQN_HSTAT_NONE, 0}};
        dqn_hplan_desc dd = {.blk = blk[k], .step = &step, .guard_scale = 1e6f,
                             .guard_floor = 1e3f, .decay = 0.99f, .guard_mode = 1, .checks = ck,
                             .n_checks = 2, .defer = 1};
        void *pd, *pc;
        CHECK_OK(be->ops->health_plan(be, &dd, &pd));
        void *const df[1] = {pd};
        dqn_hplan_desc dc = {.blk = blk[k], .step = &step, .guard_scale = 1e6f,
                             .guard_floor = 1e3f, .decay = 0.99f, .guard_mode = 1, .commit = 1,
                             .n_slots = 2, .rollback_slot = -1, .deferred = df, .n_deferred = 1};
        CHECK_OK(be->ops->health_plan(be, &dc, &pc));
        CHECK_OK(be->ops->iqn_embed_fwd(be, tau, W, b, h, C[k], phi[k], z[k], NULL, B, T, NC, D,
                                        KEEP, k ? NULL : pd));
        if (k) CHECK_OK(be->ops->health_check(be, pd));
        CHECK_OK(be->ops->health_check(be, pc));
        /* iqn_bwd hosts a plan of dz only where dz is its input */
        static float dcat[R * 2 * D], dh[B * D], dphi[R * D];
        CHECK(be->ops->iqn_bwd(be, dcat, h, phi[k], z[k], dh, dphi, NULL, B, T, D, pd) ==
                  DQN_ERR_ARG,
              "iqn_bwd took a plan of dz with dcat given");
        be->ops->health_plan_free(be, pc);
        be->ops->health_plan_free(be, pd);
    }
    CHECK(memcmp(blk[0], blk[1], sizeof *blk[0]) == 0 && blk[0]->cur[1].nan > 0 &&
              blk[0]->event.slot == 1 && blk[0]->updates == 1,
          "iqn_embed_fwd's plan: the records differ from the op's then the plan's (z: %u NaN, "
          "event at slot %d)", blk[0]->cur[1].nan, blk[0]->event.slot);
    free(blk[0]);
    free(blk[1]);
    be->ops->destroy(be);
}

/* (variant 2, the split bottleneck: its ISV entries come from the checks guard mode's ops run) */
static void test_healthy(void) {
    for (int variant = 0; variant < 3; variant++)
        for (int mode = DQN_HEALTH_DETECT; mode <= DQN_HEALTH_GUARD; mode++) {
            dqn_health_table tab;
            const int sm = rig_fault_variant(variant, &tab);
            dqn_backend *be;
            CHECK_OK(dqn_backend_cpu_create(&be));
            rig g;
            CHECK_OK(rig_make_on(&g, be, sm, 0, 8, 4, (dqn_health_mode)mode, NULL));
            /* one update: every first sample initialises its ISV entry */
            CHECK_OK(rig_updates(&g, 1));
            dqn_health_block b;
            CHECK_OK(rig_block(&g, &b));
            const dqn_health_table *t = &g.m.h.tab;
            size_t R = 8 * 4 * (size_t)g.m.L.arch.br.A;
            CHECK(rel_err(b.isv[t->i_q], mean_abs(g.m.f_on.Z, R), 1e-12) < 1e-6,
                  "q_scale %g vs mean |Z| %g", b.isv[t->i_q], mean_abs(g.m.f_on.Z, R));
            CHECK(b.cur[t->Z].maxabs == (float)max_abs(g.m.f_on.Z, R), "max |Z|");
            CHECK(b.isv[t->i_loss] == fabsf(*g.m.loss) && b.isv[t->i_gnorm] == *g.m.gnorm,
                  "loss %g / %g, grad norm %g / %g", b.isv[t->i_loss], *g.m.loss,
                  b.isv[t->i_gnorm], *g.m.gnorm);
            size_t nd = 8 * (size_t)g.m.L.arch.d;
            double ss = 0;
            for (size_t i = 0; i < nd; i++) ss += (double)g.m.f_on.h[1][i] * g.m.f_on.h[1][i];
            CHECK(rel_err(b.isv[t->i_ln[0]], sqrt(ss / nd), 1e-12) < 1e-6, "ln_rms %g vs %g",
                  b.isv[t->i_ln[0]], sqrt(ss / nd));
            CHECK(b.isv[t->i_scale + t->params] == (float)max_abs(g.m.params, g.m.L.n_params),
                  "scale.params");
            float q1 = b.isv[t->i_q];
            CHECK_OK(rig_updates(&g, 39));
            CHECK_OK(rig_block(&g, &b));
            /* the second sample on: v = 0.99 v + 0.01 sample, so it moved, but little */
            CHECK(b.isv[t->i_q] != q1 && rel_err(b.isv[t->i_q], q1, 1e-9) < 0.5, "q_scale moves");
            CHECK(b.event.slot == -1, "%s %s: healthy run has an event at %d", arch_name[sm],
                  mode == 1 ? "detect" : "guard", b.event.slot);
            CHECK(b.updates == 40 && b.skipped == 0 && b.rolled_back == 0 && b.guarded_updates == 0,
                  "counters %llu %llu %llu %llu", (unsigned long long)b.updates,
                  (unsigned long long)b.skipped, (unsigned long long)b.rolled_back,
                  (unsigned long long)b.guarded_updates);
            for (int k = 0; k < t->i_scale; k++)
                CHECK(b.isv[k] > 0 && isfinite(b.isv[k]),
                      "variant %d, mode %d: ISV %s = %g after 40 updates", variant, mode,
                      t->isv[k], b.isv[k]);
            for (int s = 0; s < t->n_slots; s++)
                CHECK(b.tot[s].nonfinite == 0 && b.tot[s].events == 0 &&
                          b.tot[s].first_event_update == -1, "slot %s", t->slot[s].name);
            rig_free(&g);
            be->ops->destroy(be);
        }
    rig_split_rows = 0;
}

/* health off, detect and guard give the same bits on healthy training */
static void test_bitwise(void) {
    for (int sm = 0; sm < 2; sm++) {
        float *st[3] = {NULL, NULL, NULL};
        float loss[3];
        for (int mode = 0; mode < 3; mode++) {
            dqn_backend *be;
            CHECK_OK(dqn_backend_cpu_create(&be));
            rig g;
            CHECK_OK(rig_make_on(&g, be, sm, 0, 8, 4, (dqn_health_mode)mode, NULL));
            CHECK_OK(rig_updates(&g, 30));
            st[mode] = rig_state(&g);
            loss[mode] = *g.m.loss;
            size_t n = 4 * g.m.L.n_params;
            if (mode > 0 && st[0] && st[mode])
                CHECK(memcmp(st[0], st[mode], n * sizeof(float)) == 0 && loss[0] == loss[mode],
                      "%s: health %s changed values", arch_name[sm], mode == 1 ? "detect" : "guard");
            rig_free(&g);
            be->ops->destroy(be);
        }
        for (int k = 0; k < 3; k++) free(st[k]);
    }
}

static int expected_kind(int kind) {
    return kind == 1 ? DQN_EVENT_NAN : kind == 2 ? DQN_EVENT_POSINF : DQN_EVENT_RANGE;
}

/* every slot x {nan, inf, huge}: detect names it; guard keeps the weights finite. Variant 2 is
 * the seed model with the bottleneck split (no concat buffer). */
static void test_faults(void) {
    int runs = 0;
    for (int variant = 0; variant < 3; variant++) {
        dqn_health_table tab;
        int sm = rig_fault_variant(variant, &tab);
        for (int s = 0; s < tab.n_slots; s++)
            for (int kind = 1; kind <= 3; kind++)
                for (int mode = DQN_HEALTH_DETECT; mode <= DQN_HEALTH_GUARD; mode++) {
                    char spec[64];
                    snprintf(spec, sizeof spec, "%s:5:%s", tab.slot[s].name, kind_name[kind]);
                    dqn_backend *be;
                    CHECK_OK(dqn_backend_cpu_create(&be));
                    rig g;
                    CHECK_OK(rig_make_on(&g, be, sm, 0, 8, 4, (dqn_health_mode)mode, spec));
                    CHECK_OK(rig_updates(&g, mode == DQN_HEALTH_GUARD ? 12 : 8));
                    dqn_health_block b;
                    CHECK_OK(rig_block(&g, &b));
                    const char *mn = mode == DQN_HEALTH_GUARD ? "guard" : "detect";
                    CHECK(b.event.slot == s && b.event.update == 5 &&
                              b.event.kind == (uint32_t)expected_kind(kind),
                          "%s %s %s: event at slot %d (%s) update %lld kind %u", arch_name[sm], mn,
                          spec, b.event.slot, b.event.slot >= 0 ? tab.slot[b.event.slot].name : "-",
                          (long long)b.event.update, b.event.kind);
                    CHECK(b.tot[s].first_event_update == 5, "%s: first event of the slot",
                          spec);
                    if (s == tab.phi && kind == 1)   /* the embedding's one op would hide it */
                        CHECK(b.tot[tab.z].first_event_update == 5,
                              "%s %s: the fault in phi missed z (z's first event %lld)",
                              arch_name[sm], mn, (long long)b.tot[tab.z].first_event_update);
                    if (s == tab.y && kind == 1)   /* the targets' and loss's one op would */
                        CHECK(b.tot[tab.loss].first_event_update == 5,
                              "%s %s: the fault in y missed the loss (its first event %lld)",
                              arch_name[sm], mn, (long long)b.tot[tab.loss].first_event_update);
                    for (int l = 0; l + 1 < g.m.L.arch.grn_blocks && kind == 1; l++)
                        if (s == tab.grn_out[l])   /* the trunk's one op would hide it */
                            CHECK(b.tot[tab.grn_out[l + 1]].first_event_update == 5,
                                  "%s %s: the fault in %s missed the next block (its first "
                                  "event %lld)",
                                  arch_name[sm], mn, spec,
                                  (long long)b.tot[tab.grn_out[l + 1]].first_event_update);
                    if (kind == 3)
                        CHECK(b.event.value == 1e30f && b.event.index == DQN_HEALTH_NO_INDEX,
                              "%s: value %g", spec, b.event.value);
                    else
                        CHECK(b.event.count >= 1 && b.event.index != DQN_HEALTH_NO_INDEX, "%s",
                              spec);
                    if (mode == DQN_HEALTH_GUARD) {
                        float *st = rig_state(&g);
                        CHECK(st && all_finite(st, 4 * g.m.L.n_params),
                              "%s guard %s: non-finite weights", arch_name[sm], spec);
                        free(st);
                        if (s == tab.params)
                            CHECK(b.rolled_back == 1 && b.skipped == 1, "%s: rollback", spec);
                        if (tab.slot[s].guard)
                            CHECK(b.guarded_updates >= 1 && b.tot[s].guarded >= 1,
                                  "%s: the guard acted", spec);
                        if (s > tab.grn_din[0] && s < tab.params)   /* gradients, norm */
                            CHECK(b.skipped >= 1, "%s: skipped %llu", spec,
                                  (unsigned long long)b.skipped);
                    }
                    rig_free(&g);
                    be->ops->destroy(be);
                    runs++;
                }
    }
    rig_split_rows = 0;
    printf("fault runs: %d\n", runs);
}

/* The update of the first event, re-run from its snapshot on a fresh model: the first slot in
 * execution order with an event is the recorded one, and every slot before it was clean. */
static void check_localised(rig *g, const char *what) {
    dqn_health_block b;
    CHECK_OK(rig_block(g, &b));
    if (b.event.slot < 0) return;
    unsigned char *snap = malloc(g->m.h.snap_bytes);
    CHECK_OK(dqn_model_health_read_snapshot(&g->m, snap));
    rig f;
    CHECK_OK(rig_make_on(&f, g->be, g->m.L.arch.grn_blocks == 2, 0, 8, 4, DQN_HEALTH_DETECT,
                         NULL));
    f.m.ucfg.lr = g->m.ucfg.lr;
    f.m.ucfg.weight_decay = g->m.ucfg.weight_decay;
    CHECK_OK(dqn_model_health_replan(&f.m));   /* the optimizer's settings live in the commit */
    CHECK_OK(dqn_model_health_load_snapshot(&f.m, snap, (uint64_t)b.event.update));
    CHECK_OK(dqn_model_update_loaded(&f.m));
    dqn_health_block c;
    CHECK_OK(rig_block(&f, &c));
    const dqn_health_table *t = &g->m.h.tab;
    CHECK(c.event.slot == b.event.slot && c.event.update == b.event.update &&
              c.event.kind == b.event.kind, "%s: the replay's first event is slot %d, recorded %d",
          what, c.event.slot, b.event.slot);
    for (int s = 0; s < b.event.slot; s++)
        CHECK(c.cur[s].event == 0 && c.cur[s].nonfinite == 0, "%s: slot %s before the reported "
              "one was bad in that update", what, t->slot[s].name);
    CHECK(c.cur[b.event.slot].event != 0, "%s: the reported slot was clean on replay", what);
    rig_free(&f);
    free(snap);
}

/* A diverging learning rate, no injection: lr 10 with decoupled weight decay 0.5 multiplies the
 * weights by about -4 an update (|1 - lr * wd| > 1) on top of Adam's steps of ~lr. With the
 * default bounds the value logits leave their range at update 1; with the floor raised out of the
 * way the first non-finite value appears a few updates later. Either way detect mode names the
 * first slot (checked by re-running that update: every earlier slot was clean) and guard mode
 * keeps the weights finite. (The quantile-Huber gradient is bounded and the head clip rescales
 * dV and dA, so neither a reward scale nor a large learning rate alone overflows this model's
 * backward pass first; a diverging one overflows the forward, and the guards keep it out of the
 * backward GEMMs.) */
static void test_real_overflow(void) {
    for (int sm = 0; sm < 2; sm++)
        for (int pass = 0; pass < 4; pass++) {
            int mode = pass % 2 ? DQN_HEALTH_GUARD : DQN_HEALTH_DETECT, raised = pass >= 2;
            dqn_backend *be;
            CHECK_OK(dqn_backend_cpu_create(&be));
            rig g;
            CHECK_OK(rig_make_on(&g, be, sm, 0, 8, 4, (dqn_health_mode)mode, NULL));
            g.m.ucfg.lr = 10.0f;
            g.m.ucfg.weight_decay = 0.5f;
            /* the bounds and the optimizer's settings are baked into the plans: rebuild them */
            dqn_model_health_destroy(&g.m);
            if (raised) g.m.ucfg.guard_floor = 1e30f;
            CHECK_OK(dqn_model_health_create(&g.m));
            CHECK_OK(rig_updates(&g, 60));
            dqn_health_block b;
            CHECK_OK(rig_block(&g, &b));
            const dqn_health_table *t = &g.m.h.tab;
            char what[96];
            snprintf(what, sizeof what, "%s lr 10 wd 0.5 %s%s", arch_name[sm],
                     mode == 1 ? "detect" : "guard", raised ? " floor 1e30" : "");
            CHECK(b.event.slot >= 0, "%s: no event in 60 updates", what);
            if (b.event.slot >= 0)
                printf("%s: first event at update %lld, slot %s (%s), %s, value %g\n", what,
                       (long long)b.event.update, t->slot[b.event.slot].name,
                       t->slot[b.event.slot].stage, dqn_event_kind_name(b.event.kind),
                       b.event.value);
            if (mode == DQN_HEALTH_DETECT) {
                check_localised(&g, what);
                if (raised)
                    CHECK(b.event.kind != DQN_EVENT_RANGE || b.tot[b.event.slot].nonfinite == 0,
                          "%s", what);
            } else {
                float *st = rig_state(&g);
                CHECK(st && all_finite(st, 4 * g.m.L.n_params), "%s: non-finite weights", what);
                free(st);
                CHECK(b.skipped > 0, "%s: guard skipped nothing", what);
            }
            rig_free(&g);
            be->ops->destroy(be);
        }
}

static dqn_trainer *trainer_for(const char *health, const char *fault, const char *lr) {
    /* lr "10" comes with weight decay 0.5: a diverging run */
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    CHECK_OK(dqn_config_set(&c, "device", "cpu"));
    CHECK_OK(dqn_config_set(&c, "steps", "6000"));
    CHECK_OK(dqn_config_set(&c, "save_replay", "true"));
    CHECK_OK(dqn_config_set(&c, "health", health));
    if (fault) CHECK_OK(dqn_config_set(&c, "fault", fault));
    if (lr) CHECK_OK(dqn_config_set(&c, "lr", lr));
    if (lr) CHECK_OK(dqn_config_set(&c, "weight_decay", "0.5"));
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    return t;
}


/* CartPole through the trainer: guard leaves the run bitwise as off leaves it */
static void test_trainer_bitwise(void) {
    dqn_trainer *t[2] = {trainer_for("off", NULL, NULL), trainer_for("guard", NULL, NULL)};
    if (!t[0] || !t[1]) return;
    for (int k = 0; k < 2; k++) CHECK_OK(dqn_trainer_run_until(t[k], 6000));
    size_t n = t[0]->model.L.n_params * sizeof(float);
    CHECK(t[0]->updates == t[1]->updates && t[0]->updates > 2000, "updates %lld",
          (long long)t[0]->updates);
    CHECK(memcmp(t[0]->model.params, t[1]->model.params, n) == 0 &&
              memcmp(t[0]->model.target, t[1]->model.target, n) == 0 &&
              memcmp(t[0]->model.adam_v, t[1]->model.adam_v, n) == 0,
          "cartpole: guard changed the weights");
    dqn_health_report r;
    CHECK_OK(dqn_trainer_health_poll(t[1], 1, &r));
    CHECK(r.event.slot == -1 && r.updates == (uint64_t)t[1]->updates && r.skipped == 0,
          "cartpole guard: event %d, %llu updates", r.event.slot, (unsigned long long)r.updates);
    CHECK(dqn_trainer_health_poll(t[0], 1, &r) == DQN_ERR_UNSUPPORTED, "poll with health off");
    for (int k = 0; k < 2; k++) dqn_trainer_destroy(t[k]);
}

static char tmpdir[] = "/tmp/dqn_test_health_XXXXXX";

/* a saved event re-runs to the same slot; the asynchronous poll lags one call */
static void test_replay(const char *health, const char *fault, const char *lr) {
    dqn_trainer *t = trainer_for(health, fault, lr);
    if (!t) return;
    dqn_health_report r;
    CHECK_OK(dqn_trainer_run_until(t, 2000));
    CHECK_OK(dqn_trainer_health_poll(t, 0, &r));   /* the first call waits for its copy */
    uint64_t u2000 = r.updates;
    CHECK_OK(dqn_trainer_run_until(t, 3000));
    CHECK_OK(dqn_trainer_health_poll(t, 0, &r));   /* the copy started at 2000 */
    CHECK(r.updates == u2000 && r.env_steps == 2000, "async poll: %llu updates at %lld",
          (unsigned long long)r.updates, (long long)r.env_steps);
    CHECK_OK(dqn_trainer_run_until(t, 6000));
    CHECK_OK(dqn_trainer_health_poll(t, 1, &r));
    CHECK(r.updates == (uint64_t)t->updates, "sync poll");
    CHECK(r.event.slot >= 0, "%s %s lr %s: no event", health, fault ? fault : "-", lr ? lr : "-");
    char path[256];
    snprintf(path, sizeof path, "%s/event-%s.bin", tmpdir, health);
    if (r.event.slot >= 0) {
        CHECK_OK(dqn_trainer_health_save_event(t, path));
        dqn_health_replay *rp = NULL;
        CHECK_OK(dqn_health_replay_run(path, "cpu", &rp));
        if (rp) {
            const dqn_health_report *q = dqn_health_replay_report(rp);
            const dqn_health_event *sv = dqn_health_replay_saved(rp);
            CHECK(sv->slot == r.event.slot && sv->update == r.event.update, "saved event");
            CHECK(q->event.slot == r.event.slot && q->event.update == r.event.update &&
                      strcmp(q->event.kind, r.event.kind) == 0 && q->event.count == r.event.count &&
                      (q->event.value == r.event.value ||
                       (isnan(q->event.value) && isnan(r.event.value))),
                  "replay: slot %d update %lld %s, recorded slot %d update %lld %s", q->event.slot,
                  (long long)q->event.update, q->event.kind, r.event.slot,
                  (long long)r.event.update, r.event.kind);
            CHECK(q->updates == 1, "the replay runs one update");
            dqn_health_replay_destroy(rp);
        }
    }
    dqn_trainer_destroy(t);
}

/* With prioritised replay the event's snapshot holds the batch's importance weights: the replay's
 * loss is the recorded update's, bit for bit (the fault lands after the loss, on grad_norm). */
static void test_replay_weighted(void) {
    enum { K = 40 };
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    /* one update per env step, so that the run can stop right after update K */
    const char *kv[][2] = {{"device", "cpu"},   {"health", "detect"},
                           {"replay", "prioritized"}, {"fault", "grad_norm:40:huge"},
                           {"train_freq", "1"}, {"updates_per_round", "1"},
                           {"save_replay", "true"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK_OK(dqn_config_set(&c, kv[i][0], kv[i][1]));
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    int64_t step = 0;
    while (t->updates < K + 1 && step < 6000) CHECK_OK(dqn_trainer_run_until(t, ++step));
    dqn_health_report r;
    CHECK_OK(dqn_trainer_health_poll(t, 1, &r));
    int loss = t->model.h.tab.loss;
    CHECK(r.updates == K + 1 && r.event.update == K && r.event.slot == t->model.h.tab.grad_norm,
          "%llu updates, event at %lld slot %d", (unsigned long long)r.updates,
          (long long)r.event.update, r.event.slot);
    char path[256];
    snprintf(path, sizeof path, "%s/event-weighted.bin", tmpdir);
    CHECK_OK(dqn_trainer_health_save_event(t, path));
    dqn_health_replay *rp = NULL;
    CHECK_OK(dqn_health_replay_run(path, "cpu", &rp));
    if (rp) {
        const dqn_health_report *q = dqn_health_replay_report(rp);
        float a = r.slots[loss].max_abs, b = q->slots[loss].max_abs;
        CHECK(memcmp(&a, &b, sizeof a) == 0 && q->event.slot == r.event.slot,
              "weighted replay: loss %.9g, recorded %.9g", b, a);
        dqn_health_replay_destroy(rp);
    }
    dqn_trainer_destroy(t);
}

/* the health block (ISV, totals, first event) is saved and restored */
static void test_checkpoint(void) {
    dqn_trainer *t = trainer_for("guard", "z:700:nan", NULL);
    if (!t) return;
    CHECK_OK(dqn_trainer_run_until(t, 3000));
    char path[256];
    snprintf(path, sizeof path, "%s/ck.bin", tmpdir);
    CHECK_OK(dqn_trainer_save(t, path));
    dqn_trainer *u = NULL;
    CHECK_OK(dqn_trainer_load(path, "cpu", &u));
    if (u) {
        dqn_health_block a, b;
        CHECK_OK(t->be->ops->d2h(t->be, &a, t->model.h.blk, sizeof a));
        CHECK_OK(u->be->ops->d2h(u->be, &b, u->model.h.blk, sizeof b));
        CHECK(memcmp(&a, &b, sizeof a) == 0 && a.event.slot == t->model.h.tab.z &&
                  a.isv[t->model.h.tab.i_q] > 0, "health block through a checkpoint");
        CHECK(dqn_trainer_health_save_event(u, path) == DQN_ERR_ARG &&
                  strstr(dqn_last_error(), "resumed"), "event snapshot after resume: %s",
              dqn_last_error());
        CHECK_OK(dqn_trainer_run_until(t, 4000));
        CHECK_OK(dqn_trainer_run_until(u, 4000));
        CHECK_OK(t->be->ops->d2h(t->be, &a, t->model.h.blk, sizeof a));
        CHECK_OK(u->be->ops->d2h(u->be, &b, u->model.h.blk, sizeof b));
        CHECK(memcmp(&a, &b, sizeof a) == 0, "health block after resuming 1000 steps");
        dqn_trainer_destroy(u);
    }
    dqn_trainer_destroy(t);
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    CHECK_OK(dqn_config_set(&c, "health", "off"));
    CHECK_OK(dqn_config_set(&c, "fault", "phi:3:nan"));
    CHECK(dqn_trainer_create(&c, &t) == DQN_ERR_ARG && strstr(dqn_last_error(), "--fault needs"),
          "fault with health off: %s", dqn_last_error());
    CHECK_OK(dqn_config_set(&c, "health", "detect"));
    CHECK_OK(dqn_config_set(&c, "fault", "phi:3:nan,bn.out:4:inf"));
    CHECK(dqn_trainer_create(&c, &t) == DQN_ERR_ARG && strstr(dqn_last_error(), "bn.out"),
          "a slot this model lacks: %s", dqn_last_error());
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_table();
    test_commit_optimizer();
    test_embed_hplan();
    test_healthy();
    test_bitwise();
    test_faults();
    test_real_overflow();
    test_trainer_bitwise();
    test_replay("detect", "d_trunk:900:inf", NULL);
    test_replay("guard", "grad.grn0.Wb:1200:huge", NULL);
    test_replay("detect", NULL, "10");   /* a diverging run: no injection */
    test_replay_weighted();
    test_checkpoint();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_finish("test_health");
}
