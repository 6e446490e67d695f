/* The numerical-health subsystem on the CUDA backend against the CPU backend: the health_check op
 * on fresh random buffers with NaN, Inf and huge values sprinkled in (every statistic, the guard's
 * clamps, the ISV, the event, the copies; bit-identical reruns); then the whole update captured as
 * a graph: every slot x {nan, inf, huge} is reported at exactly that slot and update, as on the
 * CPU, guard mode keeps the weights finite, and on healthy training detect and guard leave every
 * value bitwise as health off does. Exits 77 when there is no CUDA device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda_tunables.h"
#include "health_rig.h"

static dqn_backend *gpu, *cpu;
static uint64_t draw_ctr;

static float rnd(void) { return 2.0f * dqn_philox_uniform(4242, 7, draw_ctr++) - 1.0f; }

/* ---- the op ---- */

typedef struct {
    float *c, *g;
    size_t n;
} buf;

static buf make_buf(size_t n, int poison_every) {
    buf b = {malloc(n * 4), NULL, n};
    for (size_t i = 0; i < n; i++) {
        float v = rnd() * 3.0f;
        if (poison_every && (i * 2654435761u) % (size_t)poison_every == 0) {
            uint32_t k = (uint32_t)(dqn_philox_below(4242, 8, draw_ctr++, 4));
            v = k == 0 ? NAN : k == 1 ? INFINITY : k == 2 ? -INFINITY : 5e8f;
        }
        b.c[i] = v;
    }
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&b.g, n * 4));
    CHECK_OK(gpu->ops->h2d(gpu, b.g, b.c, n * 4));
    return b;
}

static void free_buf(buf *b) {
    free(b->c);
    gpu->ops->free(gpu, b->g);
}

static void compare_blocks(const dqn_health_block *c, const dqn_health_block *g, int n_slots,
                           int n_isv, const char *what) {
    for (int s = 0; s < n_slots; s++) {
        const dqn_hslot_cur *a = &c->cur[s], *b = &g->cur[s];
        CHECK(a->nonfinite == b->nonfinite && a->nan == b->nan && a->guarded == b->guarded &&
                  a->event == b->event && a->maxabs == b->maxabs && a->bound == b->bound &&
                  a->first_index == b->first_index &&
                  (a->first_value == b->first_value ||
                   (isnan(a->first_value) && isnan(b->first_value))),
              "%s slot %d: cpu %u/%u/%u ev %u max %g idx %llu, cuda %u/%u/%u ev %u max %g idx %llu",
              what, s, a->nonfinite, a->nan, a->guarded, a->event, a->maxabs,
              (unsigned long long)a->first_index, b->nonfinite, b->nan, b->guarded, b->event,
              b->maxabs, (unsigned long long)b->first_index);
        CHECK(rel_err(b->rms, a->rms, 1e-30) < 1e-5 && rel_err(b->meanabs, a->meanabs, 1e-30) < 1e-5,
              "%s slot %d: rms %g / %g, mean %g / %g", what, s, a->rms, b->rms, a->meanabs,
              b->meanabs);
        CHECK(c->tot[s].nonfinite == g->tot[s].nonfinite && c->tot[s].events == g->tot[s].events &&
                  c->tot[s].first_event_update == g->tot[s].first_event_update &&
                  c->tot[s].guarded == g->tot[s].guarded && c->tot[s].maxabs == g->tot[s].maxabs,
              "%s slot %d totals", what, s);
    }
    for (int k = 0; k < n_isv; k++)
        CHECK(rel_err(g->isv[k], c->isv[k], 1e-30) < 1e-5, "%s isv %d: cpu %g cuda %g", what, k,
              c->isv[k], g->isv[k]);
    CHECK(c->event.slot == g->event.slot && c->event.kind == g->event.kind &&
              c->event.update == g->event.update && c->event.index == g->event.index &&
              c->skipped == g->skipped && c->rolled_back == g->rolled_back &&
              c->updates == g->updates && c->guarded_updates == g->guarded_updates && c->skip == g->skip,
          "%s: event / counters", what);
}

static void test_op(size_t big) {
    size_t sizes[5] = {1, 37, 4096 + 3, 200003, big};
    enum { NC = 5 };
    buf b[NC], cp_src;
    for (int k = 0; k < NC; k++) b[k] = make_buf(sizes[k], k == 1 ? 0 : k == 3 ? 5000 : 97);
    cp_src = make_buf(1000, 0);
    dqn_health_block *hc = calloc(1, sizeof *hc), *hg, *hback = calloc(1, sizeof *hback);
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&hg, sizeof *hg));
    hc->event.slot = -1;
    for (int k = 0; k < 8; k++) hc->isv[k] = k == 2 ? 0.0f : 0.5f + (float)k;   /* 2: unset */
    CHECK_OK(gpu->ops->h2d(gpu, hg, hc, sizeof *hc));
    uint64_t stepc = 7, *stepg;
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&stepg, 8));
    CHECK_OK(gpu->ops->h2d(gpu, stepg, &stepc, 8));
    float *dstc = calloc(2000, 4), *dstg;
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&dstg, 2000 * 4));
    for (int commit = 0; commit <= 1; commit++) {
        dqn_hcheck ck[NC][2];
        for (int side = 0; side < 2; side++)
            for (int k = 0; k < NC; k++) {
                dqn_hcheck *c = &ck[k][side];
                memset(c, 0, sizeof *c);
                c->x = side ? b[k].g : b[k].c;
                c->n = b[k].n;
                c->slot = k;
                c->isv_bound = k % 3;
                c->isv_scale = 3 + k;
                c->isv_stat = k == 4 ? 2 : -1;
                c->stat = k == 4 ? DQN_HSTAT_RMS : DQN_HSTAT_NONE;
                c->guard = k >= 3;
            }
        dqn_hcopy cc[2] = {{dstc, cp_src.c, 4000, DQN_HCOPY_ALWAYS},
                           {dstc + 1000, cp_src.c, 4000, DQN_HCOPY_ON_FREEZE}};
        dqn_hcopy cg[2] = {{dstg, cp_src.g, 4000, DQN_HCOPY_ALWAYS},
                           {dstg + 1000, cp_src.g, 4000, DQN_HCOPY_ON_FREEZE}};
        dqn_hcheck hcc[NC], hcg[NC];
        for (int k = 0; k < NC; k++) hcc[k] = ck[k][0], hcg[k] = ck[k][1];
        /* checks 0-2 in a deferred plan, 3-4 and the copies in a plan that finishes it */
        dqn_hplan_desc da = {.blk = hc, .step = &stepc, .guard_scale = 1e6f, .guard_floor = 1e3f,
                             .decay = 0.99f, .guard_mode = 1, .checks = hcc, .n_checks = 3,
                             .defer = 1};
        dqn_hplan_desc ga = da;
        ga.blk = hg;
        ga.step = stepg;
        ga.checks = hcg;
        void *pca, *pga;
        CHECK_OK(cpu->ops->health_plan(cpu, &da, &pca));
        CHECK_OK(gpu->ops->health_plan(gpu, &ga, &pga));
        void *const dfc[1] = {pca}, *const dfg[1] = {pga};
        dqn_hplan_desc dc = {.blk = hc, .step = &stepc, .guard_scale = 1e6f, .guard_floor = 1e3f,
                             .decay = 0.99f, .guard_mode = 1, .checks = hcc + 3, .n_checks = 2,
                             .copies = cc, .n_copies = 2, .commit = commit, .n_slots = NC,
                             .rollback_slot = 4, .deferred = dfc, .n_deferred = commit};
        dqn_hplan_desc dg = dc;
        dg.blk = hg;
        dg.step = stepg;
        dg.checks = hcg + 3;
        dg.copies = cg;
        dg.deferred = dfg;
        void *pc, *pg;
        CHECK_OK(cpu->ops->health_plan(cpu, &dc, &pc));
        CHECK_OK(gpu->ops->health_plan(gpu, &dg, &pg));
        for (int rep = 0; rep < 2; rep++) {   /* the second run sees the ISV the first fed */
            CHECK_OK(cpu->ops->health_check(cpu, pca));
            CHECK_OK(gpu->ops->health_check(gpu, pga));
            CHECK_OK(cpu->ops->health_check(cpu, pc));
            CHECK_OK(gpu->ops->health_check(gpu, pg));
            CHECK_OK(gpu->ops->d2h(gpu, hback, hg, sizeof *hback));
            char what[64];
            snprintf(what, sizeof what, "op commit %d run %d", commit, rep);
            compare_blocks(hc, hback, commit ? NC : 3 + 2, 8, what);
            for (int k = 0; k < NC; k++) {
                float *got = malloc(b[k].n * 4);
                CHECK_OK(gpu->ops->d2h(gpu, got, b[k].g, b[k].n * 4));
                CHECK(memcmp(got, b[k].c, b[k].n * 4) == 0, "%s: guarded buffer %d differs", what, k);
                free(got);
            }
            float got[2000];
            CHECK_OK(gpu->ops->d2h(gpu, got, dstg, sizeof got));
            CHECK(memcmp(got, dstc, sizeof got) == 0, "%s: copies", what);
        }
        cpu->ops->health_plan_free(cpu, pca);
        gpu->ops->health_plan_free(gpu, pga);
        cpu->ops->health_plan_free(cpu, pc);
        gpu->ops->health_plan_free(gpu, pg);
    }
    CHECK(hc->event.slot >= 0 && hc->tot[3].guarded > 0 && hc->updates == 2, "the op test had "
          "events and guards to compare (event %d, guarded %llu)", hc->event.slot,
          (unsigned long long)hc->tot[3].guarded);
    for (int k = 0; k < NC; k++) free_buf(&b[k]);
    free_buf(&cp_src);
    free(hc);
    free(hback);
    free(dstc);
    gpu->ops->free(gpu, hg);
    gpu->ops->free(gpu, stepg);
    gpu->ops->free(gpu, dstg);
}

/* The kernel's shapes against the CPU: a plan of one block (no counter, no fence); checks with
 * more partials than the last block stages (the largest reduced first by their own last blocks,
 * the rest in the last block) beside a deferred check of hundreds of partials; a one-block commit
 * whose optimizer step is skipped, then taken. n: elements of the large checks (each at least
 * 4 x multiprocessors blocks of 4096, so that three of them overflow the stage). */
static void test_op_shapes(size_t n) {
    enum { NS = 5 };
    const size_t sizes[NS] = {37, n, n + 5, n + 9, 4099};
    buf b[NS];
    for (int k = 0; k < NS; k++) b[k] = make_buf(sizes[k], k == 0 ? 0 : 97);
    dqn_health_block *hc = calloc(1, sizeof *hc), *hg, *hback = calloc(1, sizeof *hback);
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&hg, sizeof *hg));
    hc->event.slot = -1;
    for (int k = 0; k < 8; k++) hc->isv[k] = k == 2 ? 0.0f : 0.5f + (float)k;
    CHECK_OK(gpu->ops->h2d(gpu, hg, hc, sizeof *hc));
    uint64_t stepc = 3, *stepg;
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&stepg, 8));
    CHECK_OK(gpu->ops->h2d(gpu, stepg, &stepc, 8));
    dqn_hcheck hcc[NS], hcg[NS];
    for (int k = 0; k < NS; k++) {
        dqn_hcheck c = {b[k].c, b[k].n, k, k % 3, 3 + k, k == 1 ? 2 : -1,
                        k == 1 ? DQN_HSTAT_MEANABS : DQN_HSTAT_NONE, k >= 2};
        hcc[k] = hcg[k] = c;
        hcg[k].x = b[k].g;
    }
    /* shape 0: check 0 alone, one block; shape 1: checks 1 and 2 with deferred 3 and 4 */
    for (int shape = 0; shape < 2; shape++) {
        void *pca = NULL, *pga = NULL, *pc, *pg;
        dqn_hplan_desc dc = {.blk = hc, .step = &stepc, .guard_scale = 1e6f, .guard_floor = 1e3f,
                             .decay = 0.99f, .guard_mode = 1, .checks = hcc, .n_checks = 1,
                             .commit = 1, .n_slots = NS, .rollback_slot = -1};
        if (shape == 1) {
            dqn_hplan_desc da = dc;
            da.checks = hcc + 3;
            da.n_checks = 2;
            da.commit = 0;
            da.defer = 1;
            dqn_hplan_desc ga = da;
            ga.blk = hg;
            ga.step = stepg;
            ga.checks = hcg + 3;
            CHECK_OK(cpu->ops->health_plan(cpu, &da, &pca));
            CHECK_OK(gpu->ops->health_plan(gpu, &ga, &pga));
            dc.checks = hcc + 1;
            dc.n_checks = 2;
            dc.rollback_slot = 2;
        }
        void *const dfc[1] = {pca}, *const dfg[1] = {pga};
        dc.deferred = dfc;
        dc.n_deferred = shape;
        dqn_hplan_desc dg = dc;
        dg.blk = hg;
        dg.step = stepg;
        dg.checks = shape ? hcg + 1 : hcg;
        dg.deferred = dfg;
        CHECK_OK(cpu->ops->health_plan(cpu, &dc, &pc));
        CHECK_OK(gpu->ops->health_plan(gpu, &dg, &pg));
        for (int rep = 0; rep < 2; rep++) {
            if (shape) {
                CHECK_OK(cpu->ops->health_check(cpu, pca));
                CHECK_OK(gpu->ops->health_check(gpu, pga));
            }
            CHECK_OK(cpu->ops->health_check(cpu, pc));
            CHECK_OK(gpu->ops->health_check(gpu, pg));
            CHECK_OK(gpu->ops->d2h(gpu, hback, hg, sizeof *hback));
            char what[64];
            snprintf(what, sizeof what, "op shape %d run %d", shape, rep);
            compare_blocks(hc, hback, NS, 8, what);
            for (int k = 0; k < NS; k++) {
                float *got = malloc(b[k].n * 4);
                CHECK_OK(gpu->ops->d2h(gpu, got, b[k].g, b[k].n * 4));
                CHECK(memcmp(got, b[k].c, b[k].n * 4) == 0, "%s: guarded buffer %d differs", what,
                      k);
                free(got);
            }
        }
        if (shape) {
            cpu->ops->health_plan_free(cpu, pca);
            gpu->ops->health_plan_free(gpu, pga);
        }
        cpu->ops->health_plan_free(cpu, pc);
        gpu->ops->health_plan_free(gpu, pg);
    }
    CHECK(hc->updates == 4 && hc->tot[2].guarded > 0 && hc->tot[4].guarded > 0,
          "the shapes' test had guards at work in its checks and deferred checks");

    /* a commit of one block (1000 parameters) with its optimizer step: skipped, then taken */
    const size_t na = 1000;
    buf s[5];   /* p, g, m, v, target */
    for (int k = 0; k < 5; k++) s[k] = make_buf(na, 0);
    for (size_t i = 0; i < na; i++) s[3].c[i] = fabsf(s[3].c[i]) * 1e-3f;
    CHECK_OK(gpu->ops->h2d(gpu, s[3].g, s[3].c, na * 4));
    float gnc = 0.0f, *gng;
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&gng, 4));
    dqn_hadam ac = {s[0].c, s[1].c, s[2].c, s[3].c, s[4].c, na, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f,
                    &gnc, 10.0f, 0, 0.005f, &stepc, NULL, NULL, NULL, NULL, 1, 0, {0}, {0}};
    dqn_hadam ag = {s[0].g, s[1].g, s[2].g, s[3].g, s[4].g, na, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f,
                    gng, 10.0f, 0, 0.005f, stepg, NULL, NULL, NULL, NULL, 1, 0, {0}, {0}};
    dqn_hcheck kc = {s[0].c, na, 0, 0, 3, -1, DQN_HSTAT_NONE, 0}, kg = kc;
    kg.x = s[0].g;
    dqn_hplan_desc dc = {.blk = hc, .step = &stepc, .guard_scale = 1e6f, .guard_floor = 1e3f,
                         .decay = 0.99f, .guard_mode = 1, .checks = &kc, .n_checks = 1,
                         .commit = 1, .n_slots = 1, .rollback_slot = 0, .step_after = 1,
                         .adam = &ac};
    dqn_hplan_desc dg = dc;
    dg.blk = hg;
    dg.step = stepg;
    dg.checks = &kg;
    dg.adam = &ag;
    void *pc, *pg;
    CHECK_OK(cpu->ops->health_plan(cpu, &dc, &pc));
    CHECK_OK(gpu->ops->health_plan(gpu, &dg, &pg));
    const float norms[2] = {3e7f, 2.0f};   /* the bound: 1e6 x isv[1] = 1.5e6 */
    const uint64_t skipped0 = hc->skipped;
    for (int u = 0; u < 2; u++) {
        gnc = norms[u];
        CHECK_OK(gpu->ops->h2d(gpu, gng, &gnc, 4));
        CHECK_OK(cpu->ops->health_check(cpu, pc));
        CHECK_OK(gpu->ops->health_check(gpu, pg));
        CHECK_OK(gpu->ops->d2h(gpu, hback, hg, sizeof *hback));
        char what[64];
        snprintf(what, sizeof what, "one-block commit, update %d", u);
        compare_blocks(hc, hback, 1, 8, what);
        uint64_t sg = 0;
        CHECK_OK(gpu->ops->d2h(gpu, &sg, stepg, 8));
        CHECK(sg == stepc, "%s: counter %llu (cpu %llu)", what, (unsigned long long)sg,
              (unsigned long long)stepc);
        float *got = malloc(na * 4);
        CHECK_OK(gpu->ops->d2h(gpu, got, s[0].g, na * 4));
        size_t bad = 0;
        for (size_t i = 0; i < na; i++) bad += rel_err(got[i], s[0].c[i], 1e-6) > 1e-4;
        CHECK(bad == 0, "%s: %zu parameters differ from the CPU's", what, bad);
        free(got);
    }
    CHECK(hc->skipped == skipped0 + 1 && hback->skipped == skipped0 + 1,
          "one-block commit: skipped %llu (cpu %llu), %llu before", (unsigned long long)hback->skipped,
          (unsigned long long)hc->skipped, (unsigned long long)skipped0);
    cpu->ops->health_plan_free(cpu, pc);
    gpu->ops->health_plan_free(gpu, pg);
    for (int k = 0; k < 5; k++) free_buf(&s[k]);
    gpu->ops->free(gpu, gng);
    for (int k = 0; k < NS; k++) free_buf(&b[k]);
    free(hc);
    free(hback);
    gpu->ops->free(gpu, hg);
    gpu->ops->free(gpu, stepg);
}

/* the gradient norm stays finite where the squares pass FLT_MAX (as on the CPU) */
static void test_norm_range(void) {
    float h[3] = {3e19f, -4e19f, 0.0f}, *g, *out, got = 0;
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&g, sizeof h));
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&out, 4));
    CHECK_OK(gpu->ops->h2d(gpu, g, h, sizeof h));
    CHECK_OK(gpu->ops->l2_norm(gpu, g, 3, out));
    CHECK_OK(gpu->ops->d2h(gpu, &got, out, 4));
    CHECK(rel_err(got, 5e19, 1) < 1e-6, "l2_norm of 3e19, -4e19: %g", got);
    gpu->ops->free(gpu, g);
    gpu->ops->free(gpu, out);
}

/* The commit's optimizer step (dqn_hadam) against adam_target_step on the same GPU, bit for bit
 * (the same arithmetic: health on and off must train alike), with its backup, its skip in guard
 * mode (a norm above its bound) and a fault that the commit rolls back; its health block against
 * the CPU's. */
static void test_op_adam(void) {
    const size_t n = 100003, nb = n * 4;
    enum { F = 4 };   /* p, m, v, target */
    buf s[F];
    for (int k = 0; k < F; k++) s[k] = make_buf(n, 0);
    for (size_t i = 0; i < n; i++) s[2].c[i] = fabsf(s[2].c[i]) * 1e-3f;   /* v >= 0 */
    CHECK_OK(gpu->ops->h2d(gpu, s[2].g, s[2].c, nb));
    buf gr = make_buf(n, 0);
    float *plain[F], *bkg, *bkc = malloc(F * nb), *prev = malloc(F * nb), *got = malloc(F * nb);
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&bkg, F * nb));
    for (int k = 0; k < F; k++) {
        CHECK_OK(gpu->ops->alloc(gpu, (void **)&plain[k], nb));
        CHECK_OK(gpu->ops->d2d(gpu, plain[k], s[k].g, nb));
    }
    float *gng, *gnp;
    int32_t *skipg;
    uint64_t *stg, *stp, stc = 7, st0 = 7;
    dqn_health_block *hc = calloc(1, sizeof *hc), *hb = calloc(1, sizeof *hb), *hg;
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&gng, 4));
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&gnp, 4));
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&skipg, 4));
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&stg, 8));
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&stp, 8));
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&hg, sizeof *hg));
    CHECK_OK(gpu->ops->h2d(gpu, stg, &st0, 8));
    CHECK_OK(gpu->ops->h2d(gpu, stp, &st0, 8));
    hc->event.slot = -1;
    hc->isv[0] = 2.0f;    /* the parameters' bound: 1e6 * 2 */
    hc->isv[1] = 10.0f;   /* the norm's: 1e7 */
    CHECK_OK(gpu->ops->h2d(gpu, hg, hc, sizeof *hc));
    float gnc = 0.0f;
    dqn_hadam ac = {s[0].c, gr.c, s[1].c, s[2].c, s[3].c, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f,
                    &gnc, 10.0f, 2, 0.0f, &stc, bkc, bkc + n, bkc + 2 * n, bkc + 3 * n, 1, 1,
                    {10}, {1}};
    dqn_hadam ag = {s[0].g, gr.g, s[1].g, s[2].g, s[3].g, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f,
                    gng, 10.0f, 2, 0.0f, stg, bkg, bkg + n, bkg + 2 * n, bkg + 3 * n, 1, 1,
                    {10}, {1}};
    dqn_hcheck kc = {s[0].c, n, 0, 0, 2, -1, DQN_HSTAT_NONE, 0}, kg = kc;
    kg.x = s[0].g;
    dqn_hcopy cc[F], cg[F];
    for (int k = 0; k < F; k++) {
        cc[k] = (dqn_hcopy){s[k].c, bkc + k * n, nb, DQN_HCOPY_ON_ROLLBACK};
        cg[k] = (dqn_hcopy){s[k].g, bkg + k * n, nb, DQN_HCOPY_ON_ROLLBACK};
    }
    dqn_hplan_desc dc = {.blk = hc, .step = &stc, .guard_scale = 1e6f, .guard_floor = 1e3f,
                         .decay = 0.99f, .guard_mode = 1, .checks = &kc, .n_checks = 1,
                         .copies = cc, .n_copies = F, .commit = 1, .n_slots = 1,
                         .rollback_slot = 0, .step_after = 1, .adam = &ac};
    dqn_hplan_desc dg = dc;
    dg.blk = hg;
    dg.step = stg;
    dg.checks = &kg;
    dg.copies = cg;
    dg.adam = &ag;
    void *pc, *pg;
    CHECK_OK(cpu->ops->health_plan(cpu, &dc, &pc));
    CHECK_OK(gpu->ops->health_plan(gpu, &dg, &pg));
    /* updates 7..10: healthy, a norm of 3e7 (above 1e7: skipped), healthy, the fault */
    const float norms[4] = {3.0f, 3e7f, 5.0f, 4.0f};
    for (int u = 0; u < 4; u++) {
        for (int k = 0; k < F; k++) CHECK_OK(gpu->ops->d2h(gpu, prev + k * n, plain[k], nb));
        gnc = norms[u];
        int32_t sk = u == 1;
        CHECK_OK(gpu->ops->h2d(gpu, gng, &gnc, 4));
        CHECK_OK(gpu->ops->h2d(gpu, gnp, &gnc, 4));
        CHECK_OK(gpu->ops->h2d(gpu, skipg, &sk, 4));
        CHECK_OK(gpu->ops->adam_target_step(gpu, plain[0], gr.g, plain[1], plain[2], plain[3], n,
                                            1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, gnp, 10.0f, 2, 0.0f,
                                            stp, skipg));
        CHECK_OK(gpu->ops->health_check(gpu, pg));
        CHECK_OK(cpu->ops->health_check(cpu, pc));
        for (int k = 0; k < F; k++) CHECK_OK(gpu->ops->d2h(gpu, got + k * n, s[k].g, nb));
        /* the fault's update is rolled back: the state before it */
        const float *want = u == 3 ? prev : NULL;
        float *pl = malloc(F * nb);
        for (int k = 0; k < F; k++) CHECK_OK(gpu->ops->d2h(gpu, pl + k * n, plain[k], nb));
        if (!want) want = pl;
        CHECK(memcmp(got, want, F * nb) == 0, "commit's optimizer step, update %d: differs from "
              "adam_target_step%s", 7 + u, u == 3 ? " (rolled back: the state before)" : "");
        size_t bad = 0;
        for (int k = 0; k < F; k++)
            for (size_t i = 0; i < n; i++)
                bad += rel_err(got[k * n + i], s[k].c[i], 1e-6) > 1e-4;
        CHECK(bad == 0, "update %d: %zu values differ from the CPU's", 7 + u, bad);
        float *bk = malloc(F * nb);
        CHECK_OK(gpu->ops->d2h(gpu, bk, bkg, F * nb));
        CHECK(memcmp(bk, prev, F * nb) == 0, "update %d: the backup is not the state before",
              7 + u);
        free(bk);
        free(pl);
        CHECK_OK(gpu->ops->d2h(gpu, hb, hg, sizeof *hb));
        uint64_t sg = 0;
        CHECK_OK(gpu->ops->d2h(gpu, &sg, stg, 8));
        CHECK(sg == stc && sg == 8 + (uint64_t)u, "update %d: counter %llu (cpu %llu)", 7 + u,
              (unsigned long long)sg, (unsigned long long)stc);
        CHECK(hb->cur[0].event == hc->cur[0].event && hb->cur[0].nonfinite == hc->cur[0].nonfinite &&
                  hb->skipped == hc->skipped && hb->rolled_back == hc->rolled_back &&
                  hb->updates == hc->updates && hb->event.slot == hc->event.slot &&
                  hb->event.update == hc->event.update,
              "update %d: cuda event %u skipped %llu rolled %llu, cpu event %u skipped %llu "
              "rolled %llu", 7 + u, hb->cur[0].event, (unsigned long long)hb->skipped,
              (unsigned long long)hb->rolled_back, hc->cur[0].event,
              (unsigned long long)hc->skipped, (unsigned long long)hc->rolled_back);
    }
    CHECK(hb->skipped == 2 && hb->rolled_back == 1 && hb->event.slot == 0 &&
              hb->event.update == 10 && hb->event.kind == DQN_EVENT_NAN,
          "the skip and the fault: skipped %llu, rolled back %llu, event at %lld",
          (unsigned long long)hb->skipped, (unsigned long long)hb->rolled_back,
          (long long)hb->event.update);
    cpu->ops->health_plan_free(cpu, pc);
    gpu->ops->health_plan_free(gpu, pg);
    for (int k = 0; k < F; k++) {
        free_buf(&s[k]);
        gpu->ops->free(gpu, plain[k]);
    }
    free_buf(&gr);
    void *dev[] = {bkg, gng, gnp, skipg, stg, stp, hg};
    for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++) gpu->ops->free(gpu, dev[k]);
    free(bkc);
    free(prev);
    free(got);
    free(hc);
    free(hb);
}

/* ---- phi's and z's checks computed by the embedding's kernel (hosted) ---- */

/* One side of a hosted plan's comparison, on backend be: a health block and counter in its
 * memory, the deferred plan of the checks ck and a commit that finishes it. */
typedef struct {
    dqn_backend *be;
    dqn_health_block *blk;
    uint64_t *step;
    void *pd, *pc;
} hside;

static void hside_make(hside *h, dqn_backend *be, const dqn_health_block *init, uint64_t step,
                       const dqn_hcheck *ck, int n, int guard_mode, int hosted) {
    h->be = be;
    CHECK_OK(be->ops->alloc(be, (void **)&h->blk, sizeof *h->blk));
    CHECK_OK(be->ops->h2d(be, h->blk, init, sizeof *init));
    CHECK_OK(be->ops->alloc(be, (void **)&h->step, 8));
    CHECK_OK(be->ops->h2d(be, h->step, &step, 8));
    dqn_hplan_desc dd = {.blk = h->blk, .step = h->step, .guard_scale = 1e6f, .guard_floor = 1e3f,
                         .decay = 0.99f, .guard_mode = guard_mode, .checks = ck, .n_checks = n,
                         .defer = 1, .hosted = hosted};
    CHECK_OK(be->ops->health_plan(be, &dd, &h->pd));
    void *const df[1] = {h->pd};
    dqn_hplan_desc dc = {.blk = h->blk, .step = h->step, .guard_scale = 1e6f, .guard_floor = 1e3f,
                         .decay = 0.99f, .guard_mode = guard_mode, .commit = 1, .n_slots = n,
                         .rollback_slot = -1, .deferred = df, .n_deferred = 1};
    CHECK_OK(be->ops->health_plan(be, &dc, &h->pc));
}

/* the commit, then its records into out; frees the side */
static void hside_finish(hside *h, dqn_health_block *out) {
    dqn_backend *be = h->be;
    CHECK_OK(be->ops->health_check(be, h->pc));
    CHECK_OK(be->ops->sync(be));
    CHECK_OK(be->ops->d2h(be, out, h->blk, sizeof *out));
    be->ops->health_plan_free(be, h->pc);
    be->ops->health_plan_free(be, h->pd);
    be->ops->free(be, h->blk);
    be->ops->free(be, h->step);
}

/* emb (a backend that takes the one-kernel embedding at any size) runs iqn_embed_fwd with the
 * deferred plan of phi's and z's first keep rows, then a commit that finishes it: its records
 * must be those of the same op without the plan followed by the plan as its own kernel (the
 * same values, so counts, maxima and indices exactly, sums to rounding), and the CPU's op with
 * the plan must count the same non-finite elements at the same first index. Variants: 0 clean;
 * 1 NaN, +-Inf and 1e25 in h (z's tiles rescanned exactly); 2 an infinite bias (a column of phi
 * +Inf); 3 weights and biases near 1e-20 (sub-1e-18 tiles, whose float squares would flush). */
static void test_hosted_embed(dqn_backend *emb, int B, int T, int d, int n_cos, int keep_states,
                              int variant) {
    const int R = B * T, keep = keep_states * T;
    const size_t nz = (size_t)R * d;
    float *tau = malloc((size_t)R * 4), *W = malloc((size_t)d * n_cos * 4);
    float *bb = malloc((size_t)d * 4), *h = malloc((size_t)B * d * 4);
    for (int i = 0; i < R; i++) tau[i] = 0.5f + 0.5f * rnd();
    for (int i = 0; i < d * n_cos; i++) W[i] = (variant == 3 ? 1e-20f : 0.3f) * rnd();
    for (int i = 0; i < d; i++) bb[i] = (variant == 3 ? 1e-21f : 0.5f) * rnd();
    for (int i = 0; i < B * d; i++) h[i] = rnd();
    if (variant == 1) {
        h[1 * d + 5] = NAN;
        h[2 * d + 1] = INFINITY;
        h[(keep_states - 1) * d + 3] = -INFINITY;
        h[3 * d + 2] = -1e25f;
    }
    if (variant == 2) bb[4] = INFINITY;
    const float *host_in[4] = {tau, W, bb, h};
    const size_t in_n[4] = {(size_t)R, (size_t)d * n_cos, (size_t)d, (size_t)B * d};
    float *gin[4], *go[4], *co[4];   /* outputs: C, phi, z (and a spare) */
    for (int k = 0; k < 4; k++) {
        CHECK_OK(gpu->ops->alloc(gpu, (void **)&gin[k], in_n[k] * 4));
        CHECK_OK(gpu->ops->h2d(gpu, gin[k], host_in[k], in_n[k] * 4));
    }
    const size_t out_n[3] = {(size_t)R * n_cos, nz, nz};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(gpu->ops->alloc(gpu, (void **)&go[k], out_n[k] * 4));
        co[k] = malloc(out_n[k] * 4);
    }
    CHECK_OK(gpu->ops->sync(gpu));
    /* three sides: hosted (0), the plan as its own kernel (1), the CPU (2) */
    dqn_health_block *init = calloc(1, sizeof *init), *got[3];
    init->event.slot = -1;
    for (int i = 0; i < 4; i++) init->isv[i] = i == 1 ? 0.0f : 0.25f * (float)(i + 1);
    for (int k = 0; k < 3; k++) {
        got[k] = calloc(1, sizeof *got[k]);
        dqn_backend *be = k < 2 ? emb : cpu;
        float *C = k < 2 ? go[0] : co[0], *phi = k < 2 ? go[1] : co[1], *z = k < 2 ? go[2] : co[2];
        dqn_hcheck ck[2];
        memset(ck, 0, sizeof ck);
        for (int j = 0; j < 2; j++) {
            ck[j].x = j ? z : phi;
            ck[j].n = (size_t)keep * d;
            ck[j].slot = j;
            ck[j].isv_bound = j;   /* 1: unset, the floor */
            ck[j].isv_scale = 2 + j;
            ck[j].isv_stat = -1;
        }
        hside hs;
        hside_make(&hs, be, init, 3, ck, 2, 1, 0);
        const float *in[4] = {gin[0], gin[1], gin[2], gin[3]};
        if (k == 2)
            for (int i = 0; i < 4; i++) in[i] = host_in[i];
        CHECK_OK(be->ops->iqn_embed_fwd(be, in[0], in[1], in[2], in[3], C, phi, z, NULL, B, T,
                                        n_cos, d, keep, k == 1 ? NULL : hs.pd));
        if (k == 1) CHECK_OK(be->ops->health_check(be, hs.pd));
        hside_finish(&hs, got[k]);
    }
    const dqn_hslot_cur *a = got[0]->cur, *e = got[1]->cur, *c = got[2]->cur;
    int events = 0;
    for (int j = 0; j < 2; j++) {
        const char *nm = j ? "z" : "phi";
        CHECK(a[j].nonfinite == e[j].nonfinite && a[j].nan == e[j].nan &&
                  a[j].event == e[j].event && a[j].maxabs == e[j].maxabs &&
                  a[j].bound == e[j].bound && a[j].first_index == e[j].first_index &&
                  (a[j].first_value == e[j].first_value ||
                   (isnan(a[j].first_value) && isnan(e[j].first_value))),
              "hosted %s B=%d T=%d d=%d keep=%d v%d: %u/%u ev %u max %g idx %llu; as a kernel "
              "%u/%u ev %u max %g idx %llu", nm, B, T, d, keep, variant, a[j].nonfinite, a[j].nan,
              a[j].event, a[j].maxabs, (unsigned long long)a[j].first_index, e[j].nonfinite,
              e[j].nan, e[j].event, e[j].maxabs, (unsigned long long)e[j].first_index);
        CHECK(rel_err(a[j].rms, e[j].rms, 1e-37) < 1e-6 &&
                  rel_err(a[j].meanabs, e[j].meanabs, 1e-37) < 1e-6,
              "hosted %s v%d: rms %g / %g, mean %g / %g", nm, variant, a[j].rms, e[j].rms,
              a[j].meanabs, e[j].meanabs);
        CHECK(a[j].nonfinite == c[j].nonfinite && a[j].nan == c[j].nan &&
                  a[j].first_index == c[j].first_index && a[j].event == c[j].event &&
                  rel_err(a[j].maxabs, c[j].maxabs, 1e-37) < 1e-5,
              "hosted %s v%d against the cpu: %u/%u idx %llu max %g; cpu %u/%u idx %llu max %g",
              nm, variant, a[j].nonfinite, a[j].nan, (unsigned long long)a[j].first_index,
              a[j].maxabs, c[j].nonfinite, c[j].nan, (unsigned long long)c[j].first_index,
              c[j].maxabs);
        CHECK(got[0]->isv[2 + j] == got[1]->isv[2 + j] && got[0]->tot[j].nonfinite ==
                  got[1]->tot[j].nonfinite, "hosted %s v%d: isv / totals", nm, variant);
        events += a[j].event != 0;
    }
    CHECK(got[0]->event.slot == got[1]->event.slot && got[0]->updates == 1,
          "hosted v%d: event slot %d / %d", variant, got[0]->event.slot, got[1]->event.slot);
    CHECK((variant == 1 || variant == 2) == (events > 0) &&
              (variant != 3 || (a[1].maxabs > 0.0f && a[1].maxabs < 1e-17f && a[1].rms > 0.0f)),
          "hosted v%d: the variant's values were not what it tests (%d events, z max %g rms %g)",
          variant, events, a[1].maxabs, a[1].rms);
    printf("  hosted embedding B=%d T=%d d=%d keep=%d variant %d: phi %u non-finite, max %g, rms "
           "%g; z %u non-finite, max %g, rms %g\n", B, T, d, keep, variant, a[0].nonfinite,
           a[0].maxabs, a[0].rms, a[1].nonfinite, a[1].maxabs, a[1].rms);
    for (int k = 0; k < 4; k++) gpu->ops->free(gpu, gin[k]);
    for (int k = 0; k < 3; k++) {
        gpu->ops->free(gpu, go[k]);
        free(co[k]);
        free(got[k]);
    }
    free(init);
    free(tau);
    free(W);
    free(bb);
    free(h);
}

/* equal, or NaN in both (the CPU and the GPU make NaNs of different bits) */
static int same_or_nan(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(isnan(a[i]) ? isnan(b[i]) : memcmp(&a[i], &b[i], 4) == 0)) return 0;
    return 1;
}

/* iqn_bwd with the deferred plan of dz (its input) runs it as it loads dz: against the plan run
 * as its own kernel before the op, the records (counts, maxima, indices exactly; sums to
 * rounding) and every output, the clamped dz included, bit for bit; against the CPU's op with the
 * plan, the same counts, clamps and dz. dz holds NaN, +-Inf and 1e30 (past the bound: clamped in
 * guard mode, a RANGE event in detect mode) every few hundred elements. */
static void test_hosted_dz(int B, int T, int d, int guard_mode) {
    const size_t R = (size_t)B * T, n = R * d, nh = (size_t)B * d;
    buf h = make_buf(nh, 0), phi = make_buf(n, 0), dz[3];
    for (size_t i = 0; i < n; i++) phi.c[i] = phi.c[i] > 0.0f ? phi.c[i] : 0.0f;   /* post-ReLU */
    CHECK_OK(gpu->ops->h2d(gpu, phi.g, phi.c, n * 4));
    dz[0] = make_buf(n, 331);
    for (size_t i = 0; i < n; i++)
        if (dz[0].c[i] == 5e8f) dz[0].c[i] = 1e30f;
    dz[0].c[n / 3] = 1e30f;
    dz[0].c[n - 2] = NAN;
    for (int k = 1; k < 3; k++) {
        dz[k] = make_buf(n, 0);
        memcpy(dz[k].c, dz[0].c, n * 4);
        CHECK_OK(gpu->ops->h2d(gpu, dz[k].g, dz[0].c, n * 4));
    }
    CHECK_OK(gpu->ops->h2d(gpu, dz[0].g, dz[0].c, n * 4));
    float *dh[3], *dphi[3];
    dqn_health_block *init = calloc(1, sizeof *init), *got[3];
    init->event.slot = -1;
    init->isv[0] = 2.0f;   /* the bound: 2e6 */
    for (int k = 0; k < 3; k++) {
        dqn_backend *be = k < 2 ? gpu : cpu;
        got[k] = calloc(1, sizeof *got[k]);
        CHECK_OK(be->ops->alloc(be, (void **)&dh[k], nh * 4));
        CHECK_OK(be->ops->alloc(be, (void **)&dphi[k], n * 4));
        float *x = k < 2 ? dz[k].g : dz[k].c;
        dqn_hcheck ck = {x, n, 0, 0, 1, -1, DQN_HSTAT_NONE, 1};
        hside hs;
        hside_make(&hs, be, init, 5, &ck, 1, guard_mode, 0);
        if (k == 1) CHECK_OK(be->ops->health_check(be, hs.pd));
        CHECK_OK(be->ops->iqn_bwd(be, NULL, k < 2 ? h.g : h.c, k < 2 ? phi.g : phi.c, x, dh[k],
                                  dphi[k], NULL, B, T, d, k == 1 ? NULL : hs.pd));
        hside_finish(&hs, got[k]);
    }
    const dqn_hslot_cur *a = &got[0]->cur[0], *e = &got[1]->cur[0], *c = &got[2]->cur[0];
    const char *mode = guard_mode ? "guard" : "detect";
    CHECK(a->nonfinite == e->nonfinite && a->nan == e->nan && a->guarded == e->guarded &&
              a->event == e->event && a->maxabs == e->maxabs && a->bound == e->bound &&
              a->first_index == e->first_index && isnan(a->first_value) == isnan(e->first_value),
          "hosted dz %s B=%d T=%d d=%d: %u/%u/%u ev %u max %g idx %llu; as a kernel %u/%u/%u ev %u "
          "max %g idx %llu", mode, B, T, d, a->nonfinite, a->nan, a->guarded, a->event, a->maxabs,
          (unsigned long long)a->first_index, e->nonfinite, e->nan, e->guarded, e->event,
          e->maxabs, (unsigned long long)e->first_index);
    CHECK(rel_err(a->rms, e->rms, 1e-30) < 1e-6 && rel_err(a->meanabs, e->meanabs, 1e-30) < 1e-6,
          "hosted dz %s: rms %g / %g", mode, a->rms, e->rms);
    CHECK(a->nonfinite == c->nonfinite && a->nan == c->nan && a->guarded == c->guarded &&
              a->first_index == c->first_index && a->maxabs == c->maxabs && a->event == c->event &&
              rel_err(a->rms, c->rms, 1e-30) < 1e-5,
          "hosted dz %s against the cpu: %u/%u/%u idx %llu; cpu %u/%u/%u idx %llu", mode,
          a->nonfinite, a->nan, a->guarded, (unsigned long long)a->first_index, c->nonfinite,
          c->nan, c->guarded, (unsigned long long)c->first_index);
    CHECK(a->nonfinite > 0 && a->maxabs == 1e30f && (a->guarded > 0) == (guard_mode != 0),
          "hosted dz %s: the inputs were not what the test needs (%u non-finite, max %g, %u "
          "guarded)", mode, a->nonfinite, a->maxabs, a->guarded);
    float *o[2][3];
    const size_t on[3] = {n, nh, n};
    for (int k = 0; k < 2; k++) {
        const float *src[3] = {dz[k].g, dh[k], dphi[k]};
        for (int q = 0; q < 3; q++) {
            o[k][q] = malloc(on[q] * 4);
            CHECK_OK(gpu->ops->d2h(gpu, o[k][q], src[q], on[q] * 4));
        }
    }
    CHECK(memcmp(o[0][0], o[1][0], n * 4) == 0 && memcmp(o[0][1], o[1][1], nh * 4) == 0 &&
              memcmp(o[0][2], o[1][2], n * 4) == 0,
          "hosted dz %s: dz, dh or dphi differ from the plan run before the op", mode);
    CHECK(same_or_nan(o[0][0], dz[2].c, n) && same_or_nan(o[0][2], dphi[2], n),
          "hosted dz %s: dz or dphi differ from the cpu's", mode);
    printf("  hosted dz %s B=%d T=%d d=%d: %u non-finite, %u guarded, max %g, event %u\n", mode, B,
           T, d, a->nonfinite, a->guarded, a->maxabs, a->event);
    for (int k = 0; k < 2; k++)
        for (int q = 0; q < 3; q++) free(o[k][q]);
    for (int k = 0; k < 3; k++) {
        free_buf(&dz[k]);
        free(got[k]);
        dqn_backend *be = k < 2 ? gpu : cpu;
        be->ops->free(be, dh[k]);
        be->ops->free(be, dphi[k]);
    }
    free(init);
    free_buf(&h);
    free_buf(&phi);
}

/* ---- the plans that l2_norm2, grn_ln_gate_bwd and relu_bwd_tausum compute (hosted) ---- */

/* b's values 5e8 (make_buf's huge one) made 1e30, past the bound 2e6 */
static void make_huge(buf *b) {
    for (size_t i = 0; i < b->n; i++)
        if (b->c[i] == 5e8f) b->c[i] = 1e30f;
}

static void upload_buf(buf *b) { CHECK_OK(gpu->ops->h2d(gpu, b->g, b->c, b->n * 4)); }

static buf clone_buf(const buf *s) {
    buf b = {malloc(s->n * 4), NULL, s->n};
    memcpy(b.c, s->c, s->n * 4);
    CHECK_OK(gpu->ops->alloc(gpu, (void **)&b.g, s->n * 4));
    upload_buf(&b);
    return b;
}

static float *fetch_gpu(const float *p, size_t n) {
    float *h = malloc(n * 4);
    CHECK_OK(gpu->ops->d2h(gpu, h, p, n * 4));
    return h;
}

/* a within tol of ref, relative to ref's largest finite magnitude (the reduction orders
 * differ), and non-finite exactly where ref is */
static int near_nf(const float *a, const float *ref, size_t n, double tol) {
    double m = 1e-30;
    for (size_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs((double)ref[i]) > m) m = fabs((double)ref[i]);
    for (size_t i = 0; i < n; i++) {
        if (isfinite(a[i]) != isfinite(ref[i])) return 0;
        if (isfinite(ref[i]) && rel_err(a[i], ref[i], m) > tol) return 0;
    }
    return 1;
}

/* a check of slot j: bound from isv[0] (2.0: 2e6), max |x| into isv[1 + j], guarded */
static dqn_hcheck hosted_ck(float *x, size_t n, int j) {
    dqn_hcheck ck = {x, n, j, 0, 1 + j, -1, DQN_HSTAT_NONE, 1};
    return ck;
}

static dqn_health_block *hosted_init(void) {
    dqn_health_block *init = calloc(1, sizeof *init);
    init->event.slot = -1;
    init->isv[0] = 2.0f;   /* the bound: 2e6 */
    return init;
}

/* The records of a plan's n checks on the three sides: hosted (got[0]) against the plan as its
 * own kernel (got[1]): counts, clamps, maxima, bounds, indices, events exactly, sums to
 * rounding; against the CPU (got[2]): the same counts, clamps, index, maximum and event, rms to
 * 1e-5. And the inputs did what the test needs: each check saw a non-finite value and one past
 * the bound, clamped iff guard mode. */
static void check_hosted_recs(dqn_health_block *const got[3], int n, int guard_mode,
                              const char *what) {
    for (int j = 0; j < n; j++) {
        const dqn_hslot_cur *a = &got[0]->cur[j], *e = &got[1]->cur[j], *c = &got[2]->cur[j];
        CHECK(a->nonfinite == e->nonfinite && a->nan == e->nan && a->guarded == e->guarded &&
                  a->event == e->event && a->maxabs == e->maxabs && a->bound == e->bound &&
                  a->first_index == e->first_index &&
                  (a->first_value == e->first_value ||
                   (isnan(a->first_value) && isnan(e->first_value))),
              "%s check %d: %u/%u/%u ev %u max %g idx %llu; as a kernel %u/%u/%u ev %u max %g "
              "idx %llu", what, j, a->nonfinite, a->nan, a->guarded, a->event, a->maxabs,
              (unsigned long long)a->first_index, e->nonfinite, e->nan, e->guarded, e->event,
              e->maxabs, (unsigned long long)e->first_index);
        CHECK(rel_err(a->rms, e->rms, 1e-30) < 1e-6 &&
                  rel_err(a->meanabs, e->meanabs, 1e-30) < 1e-6,
              "%s check %d: rms %g / %g, mean %g / %g", what, j, a->rms, e->rms, a->meanabs,
              e->meanabs);
        CHECK(got[0]->isv[1 + j] == got[1]->isv[1 + j] &&
                  got[0]->tot[j].nonfinite == got[1]->tot[j].nonfinite &&
                  got[0]->tot[j].guarded == got[1]->tot[j].guarded &&
                  got[0]->tot[j].events == got[1]->tot[j].events,
              "%s check %d: isv / totals", what, j);
        CHECK(a->nonfinite == c->nonfinite && a->nan == c->nan && a->guarded == c->guarded &&
                  a->first_index == c->first_index && a->maxabs == c->maxabs &&
                  a->event == c->event && rel_err(a->rms, c->rms, 1e-30) < 1e-5,
              "%s check %d against the cpu: %u/%u/%u idx %llu max %g; cpu %u/%u/%u idx %llu "
              "max %g", what, j, a->nonfinite, a->nan, a->guarded,
              (unsigned long long)a->first_index, a->maxabs, c->nonfinite, c->nan, c->guarded,
              (unsigned long long)c->first_index, c->maxabs);
        CHECK(a->nonfinite > 0 && a->maxabs > a->bound && a->bound == 2e6f &&
                  (a->guarded > 0) == (guard_mode != 0),
              "%s check %d: the inputs were not what the test needs (%u non-finite, max %g, "
              "bound %g, %u guarded)", what, j, a->nonfinite, a->maxabs, a->bound, a->guarded);
    }
    for (int k = 1; k < 3; k++)
        CHECK(got[0]->event.slot == got[k]->event.slot &&
                  got[0]->event.kind == got[k]->event.kind &&
                  got[0]->event.index == got[k]->event.index && got[0]->event.slot >= 0 &&
                  got[0]->updates == got[k]->updates && got[0]->updates == 1 &&
                  got[0]->guarded_updates == got[k]->guarded_updates,
              "%s: the event / counters differ from side %d's (slot %d / %d)", what, k,
              got[0]->event.slot, got[k]->event.slot);
}

/* l2_norm2 with the deferred plan of x0 and x1 (hosted: its kernel scans and clamps each value as
 * it loads it) against the plan run as its own kernel before the op (the records; x0, x1 and the
 * norms bit for bit) and against the CPU's op with the plan (the records; x0, x1 exactly, the
 * norms to 1e-5). x0 and x1 hold NaN, +-Inf and 1e30 (a RANGE event, or clamped). */
static void test_hosted_l2(size_t n0, size_t n1, int guard_mode) {
    const size_t nx[2] = {n0, n1};
    buf x[2][3];
    for (int j = 0; j < 2; j++) {
        x[j][0] = make_buf(nx[j], 331);
        make_huge(&x[j][0]);
    }
    x[0][0].c[n0 / 3] = 1e30f;
    x[0][0].c[n0 - 2] = NAN;
    x[1][0].c[n1 / 2] = -1e30f;
    x[1][0].c[n1 - 1] = INFINITY;
    x[1][0].c[1] = -INFINITY;
    for (int j = 0; j < 2; j++) {
        upload_buf(&x[j][0]);
        for (int k = 1; k < 3; k++) x[j][k] = clone_buf(&x[j][0]);
    }
    dqn_health_block *init = hosted_init(), *got[3];
    float *norms[3];
    for (int k = 0; k < 3; k++) {
        dqn_backend *be = k < 2 ? gpu : cpu;
        got[k] = calloc(1, sizeof *got[k]);
        CHECK_OK(be->ops->alloc(be, (void **)&norms[k], 2 * 4));
        float *p0 = k < 2 ? x[0][k].g : x[0][k].c, *p1 = k < 2 ? x[1][k].g : x[1][k].c;
        const dqn_hcheck ck[2] = {hosted_ck(p0, n0, 0), hosted_ck(p1, n1, 1)};
        hside hs;
        hside_make(&hs, be, init, 5, ck, 2, guard_mode, k != 1);
        if (k == 1) CHECK_OK(be->ops->health_check(be, hs.pd));
        CHECK_OK(be->ops->l2_norm2(be, p0, n0, p1, n1, norms[k], k == 1 ? NULL : hs.pd));
        hside_finish(&hs, got[k]);
    }
    const char *mode = guard_mode ? "guard" : "detect";
    char what[96];
    snprintf(what, sizeof what, "hosted l2_norm2 %s n0=%zu n1=%zu", mode, n0, n1);
    check_hosted_recs(got, 2, guard_mode, what);
    float *o[2][3];
    for (int k = 0; k < 2; k++) {
        o[k][0] = fetch_gpu(x[0][k].g, n0);
        o[k][1] = fetch_gpu(x[1][k].g, n1);
        o[k][2] = fetch_gpu(norms[k], 2);
    }
    CHECK(memcmp(o[0][0], o[1][0], n0 * 4) == 0 && memcmp(o[0][1], o[1][1], n1 * 4) == 0 &&
              memcmp(o[0][2], o[1][2], 2 * 4) == 0,
          "%s: x0, x1 or the norms differ from the plan run before the op (%g %g / %g %g)", what,
          o[0][2][0], o[0][2][1], o[1][2][0], o[1][2][1]);
    CHECK(same_or_nan(o[0][0], x[0][2].c, n0) && same_or_nan(o[0][1], x[1][2].c, n1) &&
              near_nf(o[0][2], norms[2], 1, 1e-5) && near_nf(o[0][2] + 1, norms[2] + 1, 1, 1e-5),
          "%s: x0, x1 or the norms differ from the cpu's (%g %g / %g %g)", what, o[0][2][0],
          o[0][2][1], norms[2][0], norms[2][1]);
    printf("  %s: %u + %u non-finite, %u + %u guarded, norms %g %g, event slot %d\n", what,
           got[0]->cur[0].nonfinite, got[0]->cur[1].nonfinite, got[0]->cur[0].guarded,
           got[0]->cur[1].guarded, o[0][2][0], o[0][2][1], got[0]->event.slot);
    for (int k = 0; k < 3; k++) {
        if (k < 2)
            for (int q = 0; q < 3; q++) free(o[k][q]);
        for (int j = 0; j < 2; j++) free_buf(&x[j][k]);
        (k < 2 ? gpu : cpu)->ops->free(k < 2 ? gpu : cpu, norms[k]);
        free(got[k]);
    }
    free(init);
}

/* grn_ln_gate_bwd with the deferred plan of dy (hosted for d <= 256: the kernel scans and clamps
 * dy as it loads a row; wider, CUDA runs the plan as its own kernel first) against the plan run
 * as its own kernel before the op (the records; dy, dres, dg, dgamma, dbeta bit for bit) and
 * against the CPU's op with the plan (the records; dy exactly, the gradients to 1e-5). r is
 * random, mean and rstd its LayerNorm's (the CPU's); dy holds NaN, -Inf and 1e30. */
static void test_hosted_grn(int M, int d, int guard_mode) {
    const size_t n = (size_t)M * d;
    buf r = make_buf(n, 0), gamma = make_buf((size_t)d, 0), g = make_buf(2 * n, 0);
    buf mean = make_buf((size_t)M, 0), rstd = make_buf((size_t)M, 0), dy[3];
    float *beta = calloc((size_t)d, 4), *y = malloc(n * 4);
    CHECK_OK(cpu->ops->layernorm_fwd(cpu, r.c, gamma.c, beta, y, mean.c, rstd.c, M, d));
    upload_buf(&mean);
    upload_buf(&rstd);
    dy[0] = make_buf(n, 997);
    make_huge(&dy[0]);
    dy[0].c[n / 3] = 1e30f;
    dy[0].c[n / 2] = -INFINITY;
    dy[0].c[n - 2] = NAN;
    upload_buf(&dy[0]);
    for (int k = 1; k < 3; k++) dy[k] = clone_buf(&dy[0]);
    const size_t on[4] = {n, 2 * n, (size_t)d, (size_t)d};   /* dres, dg, dgamma, dbeta */
    float *out[3][4];
    dqn_health_block *init = hosted_init(), *got[3];
    for (int k = 0; k < 3; k++) {
        dqn_backend *be = k < 2 ? gpu : cpu;
        got[k] = calloc(1, sizeof *got[k]);
        for (int q = 0; q < 4; q++) CHECK_OK(be->ops->alloc(be, (void **)&out[k][q], on[q] * 4));
        float *x = k < 2 ? dy[k].g : dy[k].c;
        const dqn_hcheck ck = hosted_ck(x, n, 0);
        hside hs;
        hside_make(&hs, be, init, 5, &ck, 1, guard_mode, k != 1);
        if (k == 1) CHECK_OK(be->ops->health_check(be, hs.pd));
        CHECK_OK(be->ops->grn_ln_gate_bwd(be, k < 2 ? r.g : r.c, k < 2 ? gamma.g : gamma.c,
                                          k < 2 ? mean.g : mean.c, k < 2 ? rstd.g : rstd.c,
                                          k < 2 ? g.g : g.c, x, out[k][0], out[k][1], out[k][2],
                                          out[k][3], M, d, k == 1 ? NULL : hs.pd));
        hside_finish(&hs, got[k]);
    }
    const char *mode = guard_mode ? "guard" : "detect";
    char what[96];
    snprintf(what, sizeof what, "hosted grn_ln_gate_bwd %s M=%d d=%d", mode, M, d);
    check_hosted_recs(got, 1, guard_mode, what);
    static const char *const names[4] = {"dres", "dg", "dgamma", "dbeta"};
    float *o[2][5];
    for (int k = 0; k < 2; k++) {
        o[k][4] = fetch_gpu(dy[k].g, n);
        for (int q = 0; q < 4; q++) o[k][q] = fetch_gpu(out[k][q], on[q]);
    }
    CHECK(memcmp(o[0][4], o[1][4], n * 4) == 0, "%s: dy differs from the plan run before the op",
          what);
    CHECK(same_or_nan(o[0][4], dy[2].c, n), "%s: dy differs from the cpu's", what);
    for (int q = 0; q < 4; q++) {
        CHECK(memcmp(o[0][q], o[1][q], on[q] * 4) == 0,
              "%s: %s differs from the plan run before the op", what, names[q]);
        CHECK(near_nf(o[0][q], out[2][q], on[q], 1e-5), "%s: %s differs from the cpu's", what,
              names[q]);
    }
    printf("  %s: %u non-finite, %u guarded, max %g, event %u\n", what, got[0]->cur[0].nonfinite,
           got[0]->cur[0].guarded, got[0]->cur[0].maxabs, got[0]->cur[0].event);
    for (int k = 0; k < 3; k++) {
        dqn_backend *be = k < 2 ? gpu : cpu;
        for (int q = 0; q < 4; q++) be->ops->free(be, out[k][q]);
        if (k < 2)
            for (int q = 0; q < 5; q++) free(o[k][q]);
        free_buf(&dy[k]);
        free(got[k]);
    }
    buf *in[5] = {&r, &gamma, &g, &mean, &rstd};
    for (int q = 0; q < 5; q++) free_buf(in[q]);
    free(beta);
    free(y);
    free(init);
}

/* relu_bwd_tausum with the deferred plan of dus (hosted: the kernel scans and clamps each sum
 * before it stores it) against the plan run as its own kernel after the op (the records; du and
 * dus bit for bit) and against the CPU's op with the plan (the records; du and dus exactly: the
 * same additions in the same order). du holds NaN, +-Inf and 1e30 where u > 0, so that they
 * reach dus, and one column of 5e5s whose sum (T * 5e5) is finite and past the bound. */
static void test_hosted_tausum(int B, int T, int N, int guard_mode) {
    const size_t n = (size_t)B * T * N, ns = (size_t)B * N;
    buf u = make_buf(n, 0), du[3], dus[3];
    du[0] = make_buf(n, 331);
#define AT(s, i, k) (((size_t)(s) * T + (size_t)(i)) * N + (size_t)(k))
    du[0].c[AT(0, 1, 2)] = NAN;
    du[0].c[AT(B - 1, T - 1, N - 1)] = INFINITY;
    du[0].c[AT(B / 2, 0, 1)] = -1e30f;
    make_huge(&du[0]);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(du[0].c[i]) || fabsf(du[0].c[i]) == 1e30f) u.c[i] = fabsf(u.c[i]) + 0.5f;
    const size_t big = (size_t)(B / 3) * N + (size_t)(N / 2);   /* the huge finite sum */
    for (int i = 0; i < T; i++) {
        du[0].c[AT(B / 3, i, N / 2)] = 5e5f;
        u.c[AT(B / 3, i, N / 2)] = 1.0f;
    }
#undef AT
    upload_buf(&u);
    upload_buf(&du[0]);
    for (int k = 0; k < 3; k++) {
        if (k) du[k] = clone_buf(&du[0]);
        dus[k] = make_buf(ns, 0);
    }
    dqn_health_block *init = hosted_init(), *got[3];
    for (int k = 0; k < 3; k++) {
        dqn_backend *be = k < 2 ? gpu : cpu;
        got[k] = calloc(1, sizeof *got[k]);
        float *s = k < 2 ? dus[k].g : dus[k].c;
        const dqn_hcheck ck = hosted_ck(s, ns, 0);
        hside hs;
        hside_make(&hs, be, init, 5, &ck, 1, guard_mode, k != 1);
        CHECK_OK(be->ops->relu_bwd_tausum(be, k < 2 ? u.g : u.c, k < 2 ? du[k].g : du[k].c, s, B,
                                          T, N, k == 1 ? NULL : hs.pd));
        if (k == 1) CHECK_OK(be->ops->health_check(be, hs.pd));
        hside_finish(&hs, got[k]);
    }
    const char *mode = guard_mode ? "guard" : "detect";
    char what[96];
    snprintf(what, sizeof what, "hosted relu_bwd_tausum %s B=%d T=%d N=%d", mode, B, T, N);
    check_hosted_recs(got, 1, guard_mode, what);
    float *o[2][2];
    for (int k = 0; k < 2; k++) {
        o[k][0] = fetch_gpu(du[k].g, n);
        o[k][1] = fetch_gpu(dus[k].g, ns);
    }
    CHECK(memcmp(o[0][0], o[1][0], n * 4) == 0 && memcmp(o[0][1], o[1][1], ns * 4) == 0,
          "%s: du or dus differ from the plan run after the op", what);
    CHECK(same_or_nan(o[0][0], du[2].c, n) && same_or_nan(o[0][1], dus[2].c, ns),
          "%s: du or dus differ from the cpu's", what);
    const float want = guard_mode ? 2e6f : (float)T * 5e5f;
    CHECK(dus[2].c[big] == want && o[0][1][big] == want, "%s: the huge sum %g / %g, not %g", what,
          o[0][1][big], dus[2].c[big], want);
    printf("  %s: %u non-finite, %u guarded, max %g, event %u\n", what, got[0]->cur[0].nonfinite,
           got[0]->cur[0].guarded, got[0]->cur[0].maxabs, got[0]->cur[0].event);
    for (int k = 0; k < 3; k++) {
        if (k < 2) {
            free(o[k][0]);
            free(o[k][1]);
        }
        free_buf(&du[k]);
        free_buf(&dus[k]);
        free(got[k]);
    }
    free_buf(&u);
    free(init);
}

/* ---- the captured update ---- */

/* on be; hosted: only the slots around the embedding (obs and the first GRN block's output,
 * whose faults reach phi's and z's hosted checks, and phi and z themselves), on the models'
 * full widths (the embedding's kernel takes d = 64 and 256, not the small rigs' 16) */
static void test_faults_on(dqn_backend *be, int small, int hosted) {
    int runs = 0;
    for (int variant = 0; variant < (small ? 1 : 3); variant++) {   /* 2: the bottleneck split */
        dqn_health_table tab;
        int sm = rig_fault_variant(variant, &tab);
        for (int s = 0; s < tab.n_slots; s++) {
            if (hosted && s != tab.obs && s != tab.grn_out[0] && s != tab.phi && s != tab.z)
                continue;
            for (int kind = 1; kind <= (small ? 1 : 3); kind++)
                for (int mode = DQN_HEALTH_DETECT; mode <= DQN_HEALTH_GUARD; mode++) {
                    char spec[64];
                    snprintf(spec, sizeof spec, "%s:5:%s", tab.slot[s].name, kind_name[kind]);
                    rig g, c;
                    CHECK_OK(rig_make_on(&g, be, sm, hosted, 8, 4, (dqn_health_mode)mode, spec));
                    CHECK_OK(rig_make_on(&c, cpu, sm, hosted, 8, 4, (dqn_health_mode)mode, spec));
                    int n = mode == DQN_HEALTH_GUARD ? 12 : 8;
                    CHECK_OK(rig_updates(&g, n));
                    CHECK_OK(rig_updates(&c, n));
                    dqn_health_block bg, bc;
                    CHECK_OK(rig_block(&g, &bg));
                    CHECK_OK(rig_block(&c, &bc));
                    CHECK(bg.event.slot == s && bg.event.update == 5 &&
                              bg.event.kind == bc.event.kind && bc.event.slot == s,
                          "cuda %s %s: event at slot %d update %lld kind %u (cpu: slot %d kind %u)",
                          mode == 1 ? "detect" : "guard", spec, bg.event.slot,
                          (long long)bg.event.update, bg.event.kind, bc.event.slot, bc.event.kind);
                    if (mode == DQN_HEALTH_GUARD) {
                        float *st = rig_state(&g);
                        CHECK(st && all_finite(st, 4 * g.m.L.n_params),
                              "cuda guard %s: non-finite weights", spec);
                        free(st);
                        CHECK(bg.skipped == bc.skipped && bg.rolled_back == bc.rolled_back,
                              "cuda guard %s: skipped %llu / cpu %llu", spec,
                              (unsigned long long)bg.skipped, (unsigned long long)bc.skipped);
                    }
                    /* the checks downstream of the fault count what the CPU's count */
                    CHECK(bg.cur[tab.z].nonfinite == bc.cur[tab.z].nonfinite &&
                              bg.tot[tab.z].nonfinite == bc.tot[tab.z].nonfinite,
                          "cuda %s %s: z has %u non-finite, %llu in all; cpu %u, %llu",
                          mode == 1 ? "detect" : "guard", spec, bg.cur[tab.z].nonfinite,
                          (unsigned long long)bg.tot[tab.z].nonfinite, bc.cur[tab.z].nonfinite,
                          (unsigned long long)bc.tot[tab.z].nonfinite);
                    rig_free(&g);
                    rig_free(&c);
                    runs++;
                }
        }
    }
    rig_split_rows = 0;
    printf("cuda fault runs%s: %d\n", hosted ? " (the embedding's checks hosted)" : "", runs);
}

/* detect and guard change no value on healthy training; the health state matches the CPU's */
static void test_bitwise_and_parity(dqn_backend *be, int big, int B, int T) {
    for (int sm = 0; sm < 2; sm++) {
        float *st[3] = {NULL, NULL, NULL};
        for (int mode = 0; mode < 3; mode++) {
            rig g;
            CHECK_OK(rig_make_on(&g, be, sm, big, B, T, (dqn_health_mode)mode, NULL));
            CHECK_OK(rig_updates(&g, 20));
            st[mode] = rig_state(&g);
            size_t n = 4 * g.m.L.n_params * sizeof(float);
            if (mode > 0 && st[0] && st[mode])
                CHECK(memcmp(st[0], st[mode], n) == 0, "cuda %s big %d: health %s changed values",
                      sm ? "seed" : "cartpole", big, mode == 1 ? "detect" : "guard");
            if (mode == DQN_HEALTH_GUARD) {
                rig c;
                CHECK_OK(rig_make_on(&c, cpu, sm, big, B, T, DQN_HEALTH_GUARD, NULL));
                CHECK_OK(rig_updates(&c, 20));
                dqn_health_block bg, bc;
                CHECK_OK(rig_block(&g, &bg));
                CHECK_OK(rig_block(&c, &bc));
                CHECK(bg.event.slot == -1 && bc.event.slot == -1 && bg.updates == 20 &&
                          bg.skipped == 0, "healthy cuda run: event %d", bg.event.slot);
                /* the trajectories differ in rounding (cuBLAS vs the CPU GEMM), so the ISV agrees
                 * to a tolerance, not bitwise */
                for (int k = 0; k < g.m.h.tab.i_scale; k++)
                    CHECK(rel_err(bg.isv[k], bc.isv[k], 1e-12) < 1e-3, "isv %s: cuda %g cpu %g",
                          g.m.h.tab.isv[k], bg.isv[k], bc.isv[k]);
                rig_free(&c);
            }
            rig_free(&g);
        }
        for (int k = 0; k < 3; k++) free(st[k]);
    }
}

int main(void) {
    if (!dqn_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    CHECK_OK(dqn_backend_cuda_create(&gpu, 0, DQN_MATH_FP32));
    CHECK_OK(dqn_backend_cpu_create(&cpu));
    if (!gpu || !cpu) return check_finish("test_gpu_health");
    int small = getenv("DQN_GPU_TEST_SMALL") != NULL;
    test_norm_range();
    test_op(small ? 70001 : 9000001);
    test_op_shapes(2200003);
    test_op_adam();
    for (int g = 0; g < 2; g++) {
        test_hosted_dz(7, 9, 24, g);
        test_hosted_dz(300, 32, 64, g);
        if (!small) test_hosted_dz(4096, 32, 256, g);
    }
    /* the plans the fused ops compute as they run: past a non-hosted plan's grid, and d = 320,
     * which CUDA's grn_ln_gate_bwd does not host (it runs the plan first) */
    for (int g = 0; g < 2; g++) {
        test_hosted_l2(37, 37 * 3, g);
        test_hosted_l2(300 * 32, 300 * 32 * 13, g);
        test_hosted_grn(7, 24, g);
        test_hosted_grn(300, 64, g);
        if (!small) test_hosted_grn(1000, 256, g);
        test_hosted_grn(40, 320, g);
        test_hosted_tausum(7, 9, 24, g);
        test_hosted_tausum(300, 32, 128, g);
    }
    /* phi's and z's checks computed by the embedding's kernel: emb takes it at any size */
    dqn_backend *emb = NULL;
    CHECK_OK(dqn_backend_cuda_create(&emb, 0, DQN_MATH_FP32));
    dqn_cuda_tunables *tune = emb ? dqn_backend_cuda_tunables(emb) : NULL;
    if (tune) tune->iqn_embed_elems = 0;
    if (emb) {
        for (int v = 0; v < 4; v++) {
            test_hosted_embed(emb, 9, 7, 64, 64, 5, v);
            test_hosted_embed(emb, 40, 32, 256, 64, 20, v);
        }
        test_hosted_embed(emb, 300, 32, 128, 32, 150, 1);
        if (!small) {
            test_hosted_embed(emb, 2048, 32, 64, 64, 1024, 1);
            test_hosted_embed(emb, 4096, 32, 256, 64, 2048, 1);
            test_hosted_embed(emb, 4096, 32, 256, 64, 2048, 0);
        }
    }
    if (!getenv("DQN_GPU_HEALTH_OPS_ONLY")) {   /* (the sanitizer runs: the kernels alone) */
        test_faults_on(gpu, small, 0);
        test_bitwise_and_parity(gpu, 0, 8, 4);
        if (!small) test_bitwise_and_parity(gpu, 1, 256, 32);
        if (emb) {
            test_faults_on(emb, small, 1);
            test_bitwise_and_parity(emb, 1, 32, 8);
        }
    }
    if (emb) emb->ops->destroy(emb);
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);
    return check_finish("test_gpu_health");
}
