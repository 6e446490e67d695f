/* The numerical-health ops on the CPU backend (semantics: backends/ops.def, health_check). The
 * reference the CUDA kernels are checked against; sums of squares and of |x| run in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/cpu_internal.h"
#include "core/error.h"

/* One check's figures for one update, before its bookkeeping. */
typedef struct {
    dqn_hslot_cur cur;
} cpu_scan;

typedef struct {
    dqn_hplan_desc d;   /* checks and copies point into the arrays below */
    dqn_hcheck *checks;
    dqn_hcopy *copies;
    cpu_scan *scans;    /* [n_checks]: a deferred plan's figures, kept for its commit */
    dqn_hadam adam;     /* d.adam points here when the plan runs the optimizer step */
} cpu_plan;

dqn_status cpu_health_plan(dqn_backend *be, const dqn_hplan_desc *desc, void **plan) {
    (void)be;
    *plan = NULL;
    if (!desc || !desc->blk || !desc->step)
        return DQN_ERR(DQN_ERR_ARG, "health_plan: NULL block or step");
    if (desc->n_deferred < 0 || (desc->n_deferred && !desc->commit))
        return DQN_ERR(DQN_ERR_ARG, "health_plan: only a commit plan finishes deferred plans");
    for (int i = 0; i < desc->n_deferred; i++)
        if (!desc->deferred[i] || !((const cpu_plan *)desc->deferred[i])->d.defer)
            return DQN_ERR(DQN_ERR_ARG, "health_plan: deferred plan %d was not built with defer", i);
    if (desc->n_checks < 0 || desc->n_checks > DQN_HEALTH_MAX_SLOTS || desc->n_copies < 0 ||
        desc->n_slots > DQN_HEALTH_MAX_SLOTS)
        return DQN_ERR(DQN_ERR_ARG, "health_plan: %d checks, %d copies, %d slots", desc->n_checks,
                       desc->n_copies, desc->n_slots);
    for (int i = 0; i < desc->n_checks; i++) {
        const dqn_hcheck *c = &desc->checks[i];
        if (c->slot < 0 || c->slot >= DQN_HEALTH_MAX_SLOTS || c->isv_bound < 0 ||
            c->isv_bound >= DQN_HEALTH_MAX_ISV || c->isv_scale >= DQN_HEALTH_MAX_ISV ||
            c->isv_stat >= DQN_HEALTH_MAX_ISV || (c->n && !c->x))
            return DQN_ERR(DQN_ERR_ARG, "health_plan: check %d (slot %d) is malformed", i, c->slot);
    }
    const dqn_hadam *ad = desc->adam;
    if (!dqn_hadam_ok(desc))
        return DQN_ERR(DQN_ERR_ARG, "health_plan: an optimizer step needs a commit plan whose "
                                    "first check is its parameters, the plan's counter, at most "
                                    "%d faults and adam_target_step's ranges",
                       DQN_HADAM_MAX_FAULTS);
    cpu_plan *p = calloc(1, sizeof *p);
    if (!p) return DQN_ERR(DQN_ERR_NOMEM, "health plan");
    p->d = *desc;
    if (ad) {
        p->adam = *ad;
        p->d.adam = &p->adam;
    }
    p->checks = calloc((size_t)desc->n_checks + 1, sizeof *p->checks);
    p->copies = calloc((size_t)desc->n_copies + 1, sizeof *p->copies);
    p->scans = calloc((size_t)desc->n_checks + 1, sizeof *p->scans);
    if (!p->checks || !p->copies || !p->scans) {
        free(p->checks);
        free(p->copies);
        free(p->scans);
        free(p);
        return DQN_ERR(DQN_ERR_NOMEM, "health plan");
    }
    if (desc->n_checks) memcpy(p->checks, desc->checks, (size_t)desc->n_checks * sizeof *p->checks);
    if (desc->n_copies) memcpy(p->copies, desc->copies, (size_t)desc->n_copies * sizeof *p->copies);
    p->d.checks = p->checks;
    p->d.copies = p->copies;
    p->d.deferred = NULL;   /* read from desc at run time would dangle: keep our own list */
    if (desc->n_deferred) {
        void **list = calloc((size_t)desc->n_deferred, sizeof *list);
        if (!list) {
            cpu_health_plan_free(be, p);
            return DQN_ERR(DQN_ERR_NOMEM, "health plan");
        }
        memcpy(list, desc->deferred, (size_t)desc->n_deferred * sizeof *list);
        p->d.deferred = list;
    }
    *plan = p;
    return DQN_OK;
}

void cpu_health_plan_free(dqn_backend *be, void *plan) {
    (void)be;
    cpu_plan *p = plan;
    if (!p) return;
    free(p->checks);
    free(p->copies);
    free(p->scans);
    free((void *)p->d.deferred);
    free(p);
}

static void run_copies(const dqn_hplan_desc *d, int when) {
    for (int i = 0; i < d->n_copies; i++)
        if (d->copies[i].when == when && d->copies[i].bytes)
            memcpy(d->copies[i].dst, d->copies[i].src, d->copies[i].bytes);
}

/* The common case in one branch-free pass: max |x| and the sums in 8 independent lanes (the
 * compiler vectorises it, on the widest registers the CPU has: the lanes and their order are the
 * same in every copy). scan_fast returns 0 if x holds a non-finite value (the sums are then NaN
 * or Inf) or, with guard, a value above the bound: the exact pass below then runs. */
enum { HL = 8 };
CPU_INLINE void scan_sums_body(const float *x, size_t n, float *mo, double *sqo, double *sbo) {
    float mx[HL] = {0};
    double ss[HL] = {0}, sa[HL] = {0};
    size_t i = 0;
    for (; i + HL <= n; i += HL)
        for (int j = 0; j < HL; j++) {
            float v = x[i + j], a = fabsf(v);
            mx[j] = a > mx[j] ? a : mx[j];
            ss[j] += (double)v * (double)v;
            sa[j] += (double)a;
        }
    for (int j = 0; i < n; i++, j++) {
        float v = x[i], a = fabsf(v);
        mx[j] = a > mx[j] ? a : mx[j];
        ss[j] += (double)v * (double)v;
        sa[j] += (double)a;
    }
    float m = 0.0f;
    double sq = 0.0, sb = 0.0;
    for (int j = 0; j < HL; j++) {
        m = mx[j] > m ? mx[j] : m;
        sq += ss[j];
        sb += sa[j];
    }
    *mo = m;
    *sqo = sq;
    *sbo = sb;
}
CPU_CLONE(scan_sums, (const float *x, size_t n, float *mo, double *sqo, double *sbo),
          (x, n, mo, sqo, sbo))

static int scan_fast(const float *x, size_t n, float bound, int guard, dqn_hslot_cur *cur) {
    float m;
    double sq, sb;
    scan_sums_any(x, n, &m, &sq, &sb);
    if (!isfinite(sq) || !isfinite(sb) || !isfinite(m) || (guard && m > bound)) return 0;
    memset(cur, 0, sizeof *cur);
    cur->maxabs = m;
    cur->rms = n ? (float)sqrt(sq / (double)n) : 0.0f;
    cur->meanabs = n ? (float)(sb / (double)n) : 0.0f;
    cur->bound = bound;
    cur->first_index = DQN_HEALTH_NO_INDEX;
    cur->event = m > bound ? DQN_EVENT_RANGE : DQN_EVENT_NONE;
    return 1;
}

/* The scan of one check: its figures, and the guard's clamps. */
static void scan_one(const dqn_hplan_desc *d, const dqn_hcheck *c, float bound, dqn_hslot_cur *cur) {
    int guard = c->guard && d->guard_mode;
    if (scan_fast(c->x, c->n, bound, guard, cur)) return;
    uint32_t nonfinite = 0, nan_count = 0, guarded = 0;
    uint64_t first = DQN_HEALTH_NO_INDEX;
    float first_value = 0.0f, maxabs = 0.0f;
    double sumsq = 0.0, sumabs = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        float v = c->x[i];
        if (!isfinite(v)) {
            nonfinite++;
            if (isnan(v)) nan_count++;
            if (first == DQN_HEALTH_NO_INDEX) {
                first = i;
                first_value = v;
            }
            if (guard) {
                c->x[i] = 0.0f;
                guarded++;
            }
            continue;
        }
        float a = fabsf(v);
        if (a > maxabs) maxabs = a;
        sumsq += (double)v * (double)v;
        sumabs += (double)a;
        if (guard && a > bound) {
            c->x[i] = copysignf(bound, v);
            guarded++;
        }
    }
    size_t finite = c->n - nonfinite;
    memset(cur, 0, sizeof *cur);
    cur->nonfinite = nonfinite;
    cur->nan = nan_count;
    cur->guarded = guarded;
    cur->maxabs = maxabs;
    cur->rms = finite ? (float)sqrt(sumsq / (double)finite) : 0.0f;
    cur->meanabs = finite ? (float)(sumabs / (double)finite) : 0.0f;
    cur->bound = bound;
    cur->first_index = first;
    cur->first_value = first_value;
    cur->event = nan_count ? DQN_EVENT_NAN
                 : nonfinite ? (first_value > 0 ? DQN_EVENT_POSINF : DQN_EVENT_NEGINF)
                 : maxabs > bound ? DQN_EVENT_RANGE
                                  : DQN_EVENT_NONE;
}

/* The bookkeeping of one check: cur, the totals, the ISV. */
static void apply_one(const dqn_hplan_desc *d, const dqn_hcheck *c, const dqn_hslot_cur *cur) {
    dqn_health_block *blk = d->blk;
    blk->cur[c->slot] = *cur;
    dqn_hslot_tot *tot = &blk->tot[c->slot];
    tot->nonfinite += cur->nonfinite;
    tot->guarded += cur->guarded;
    if (cur->maxabs > tot->maxabs) tot->maxabs = cur->maxabs;
    if (cur->event) {
        if (tot->events == 0) tot->first_event_update = (int64_t)(*d->step - (uint64_t)d->step_after);
        tot->events++;
        return;
    }
    if (c->isv_scale >= 0) dqn_isv_feed(&blk->isv[c->isv_scale], cur->maxabs, d->decay);
    if (c->isv_stat >= 0 && c->stat != DQN_HSTAT_NONE)
        dqn_isv_feed(&blk->isv[c->isv_stat], c->stat == DQN_HSTAT_RMS ? cur->rms : cur->meanabs,
                     d->decay);
}

static void commit(const dqn_hplan_desc *d) {
    dqn_health_block *blk = d->blk;
    int first = -1, any_guarded = 0;
    for (int s = 0; s < d->n_slots; s++) {
        if (first < 0 && blk->cur[s].event) first = s;
        if (blk->cur[s].guarded) any_guarded = 1;
    }
    if (first >= 0 && blk->event.slot < 0) {
        const dqn_hslot_cur *c = &blk->cur[first];
        blk->event.slot = first;
        blk->event.kind = c->event;
        blk->event.update = (int64_t)(*d->step - (uint64_t)d->step_after);
        blk->event.value = c->event == DQN_EVENT_RANGE ? c->maxabs : c->first_value;
        blk->event.bound = c->bound;
        blk->event.count = c->nonfinite;
        blk->event.index = c->first_index;
        run_copies(d, DQN_HCOPY_ON_FREEZE);
        blk->frozen = 1;
    }
    int rolled = 0;
    if (d->guard_mode && d->rollback_slot >= 0 && blk->cur[d->rollback_slot].event) {
        run_copies(d, DQN_HCOPY_ON_ROLLBACK);
        blk->rolled_back++;
        rolled = 1;
    }
    if (blk->skip || rolled) blk->skipped++;
    if (any_guarded) blk->guarded_updates++;
    blk->updates++;
    blk->skip = 0;
}

/* The optimizer step of a plan (health_block.h, dqn_hadam), as the CUDA kernel runs it. */
static dqn_status run_adam(dqn_backend *be, const dqn_hplan_desc *d, const dqn_hadam *a) {
    dqn_health_block *blk = d->blk;
    const uint64_t st = *a->step;
    const size_t pb = a->n * sizeof(float);
    if (a->bk_p) memcpy(a->bk_p, a->p, pb);
    if (a->bk_m) memcpy(a->bk_m, a->m, pb);
    if (a->bk_v) memcpy(a->bk_v, a->v, pb);
    if (a->bk_target) memcpy(a->bk_target, a->target, pb);
    int32_t skip = 0;
    if (d->guard_mode && a->gnorm && a->skip_isv >= 0) {
        const float g = *a->gnorm;
        skip = !(isfinite(g) && g <= dqn_guard_bound(d->guard_scale, blk->isv[a->skip_isv],
                                                     d->guard_floor));
    }
    blk->skip = skip;
    DQN_TRY(cpu_adam_target_step(be, a->p, a->g, a->m, a->v, a->target, a->n, a->lr, a->beta1,
                                 a->beta2, a->eps, a->wd, a->gnorm, a->max_norm, a->period, a->tau,
                                 a->step, &skip));
    for (int f = 0; f < a->n_faults && a->n; f++)
        DQN_TRY(cpu_health_fault(be, a->p, a->n, &st, a->fault_at[f], a->fault_kind[f]));
    return DQN_OK;
}

dqn_status cpu_health_check(dqn_backend *be, const void *plan) {
    cpu_plan *p = (cpu_plan *)plan;
    if (!p) return DQN_ERR(DQN_ERR_ARG, "health_check: NULL plan");
    const dqn_hplan_desc *d = &p->d;
    if (d->adam) DQN_TRY(run_adam(be, d, d->adam));
    run_copies(d, DQN_HCOPY_ALWAYS);
    /* every bound is read before any of the op's bookkeeping feeds the ISV */
    float bound[DQN_HEALTH_MAX_SLOTS];
    for (int i = 0; i < d->n_checks; i++)
        bound[i] = dqn_guard_bound(d->guard_scale, d->blk->isv[d->checks[i].isv_bound],
                                   d->guard_floor);
    for (int i = 0; i < d->n_checks; i++) scan_one(d, &d->checks[i], bound[i], &p->scans[i].cur);
    if (d->defer) return DQN_OK;   /* the commit plan applies them */
    for (int k = 0; k < d->n_deferred; k++) {
        const cpu_plan *q = d->deferred[k];
        /* the commit's own step and mode: the deferred checks belong to its update */
        for (int i = 0; i < q->d.n_checks; i++) apply_one(d, &q->d.checks[i], &q->scans[i].cur);
    }
    for (int i = 0; i < d->n_checks; i++) apply_one(d, &d->checks[i], &p->scans[i].cur);
    if (d->commit) commit(d);
    return DQN_OK;
}

dqn_status cpu_health_fault(dqn_backend *be, float *x, size_t n, const uint64_t *step,
                            uint64_t at, int kind) {
    (void)be;
    if (!x || !step || n == 0 || kind < 1 || kind > 3)
        return DQN_ERR(DQN_ERR_ARG, "health_fault: x %p, n %zu, kind %d", (void *)x, n, kind);
    if (*step == at) x[n / 2] = kind == 1 ? NAN : kind == 2 ? INFINITY : 1e30f;
    return DQN_OK;
}

dqn_status cpu_fence_create(dqn_backend *be, void **fence) {
    (void)be;
    *fence = NULL;
    return DQN_OK;
}
void cpu_fence_destroy(dqn_backend *be, void *fence) {
    (void)be;
    (void)fence;
}
dqn_status cpu_fence_noop(dqn_backend *be, void *fence) {
    (void)be;
    (void)fence;
    return DQN_OK;
}
