/* The numerical-health state that lives in backend memory (SPEC 4), shared by the C and CUDA
 * sides: per-slot statistics of the last update and since the start, the ISV, the first event and
 * the counters. One contiguous block, so the host reads it with one asynchronous copy. Plain
 * fixed-width fields: the same bytes on both backends and in checkpoints. */
#ifndef DQN_HEALTH_BLOCK_H
#define DQN_HEALTH_BLOCK_H
#include <stddef.h>
#include <stdint.h>

#define DQN_HEALTH_MAX_SLOTS 128
#define DQN_HEALTH_MAX_ISV 160
#define DQN_HEALTH_NO_INDEX UINT64_MAX

/* What made a slot's update an event (the first that applies). */
enum {
    DQN_EVENT_NONE = 0,
    DQN_EVENT_NAN = 1,     /* a NaN */
    DQN_EVENT_POSINF = 2,  /* +Inf (and no NaN) */
    DQN_EVENT_NEGINF = 3,  /* -Inf (and no NaN) */
    DQN_EVENT_RANGE = 4    /* all finite, but max |x| above the slot's bound */
};

/* One slot, the last update that checked it. */
typedef struct {
    uint32_t nonfinite;    /* NaN and +-Inf elements (before any guard) */
    uint32_t nan;          /* of which NaN */
    uint32_t guarded;      /* elements a guard changed (0 outside guard mode) */
    uint32_t event;        /* DQN_EVENT_* */
    float maxabs;          /* largest finite |x| (before any guard) */
    float rms;             /* over the finite elements */
    float meanabs;         /* over the finite elements */
    float bound;           /* max(guard_scale * ISV[bound entry], guard_floor) */
    uint64_t first_index;  /* first non-finite element, DQN_HEALTH_NO_INDEX if none */
    float first_value;     /* its value (NaN, +Inf or -Inf) */
    uint32_t pad;
} dqn_hslot_cur;

/* One slot, since the run started. */
typedef struct {
    uint64_t nonfinite, guarded;
    uint64_t events;             /* updates in which the slot had an event */
    int64_t first_event_update;  /* -1: none yet */
    float maxabs;                /* largest finite |x| seen */
    uint32_t pad;
} dqn_hslot_tot;

/* The first event of the run: the first slot, in execution order, of the first update with one. */
typedef struct {
    int32_t slot;          /* -1: none yet */
    uint32_t kind;         /* DQN_EVENT_* */
    int64_t update;        /* the update counter during that update (the first update is 0) */
    float value;           /* the first non-finite value, or the largest |x| for RANGE */
    float bound;
    uint32_t count;        /* non-finite elements (RANGE: 0) */
    uint32_t pad;
    uint64_t index;        /* first non-finite element (DQN_HEALTH_NO_INDEX for RANGE) */
} dqn_hevent;

typedef struct {
    dqn_hslot_cur cur[DQN_HEALTH_MAX_SLOTS];
    dqn_hslot_tot tot[DQN_HEALTH_MAX_SLOTS];
    float isv[DQN_HEALTH_MAX_ISV];   /* exponential moving averages; 0 = not yet initialised */
    dqn_hevent event;
    uint64_t updates;                /* updates checked */
    uint64_t skipped;                /* optimizer steps skipped or rolled back (guard mode) */
    uint64_t rolled_back;            /* of which: parameters restored after the update */
    uint64_t guarded_updates;        /* updates in which a guard changed something */
    int32_t skip;                    /* this update's optimizer step is skipped (reset by commit) */
    int32_t frozen;                  /* the replay snapshot holds the first event's update */
} dqn_health_block;

/* Statistics an ISV entry can follow. */
enum { DQN_HSTAT_NONE = 0, DQN_HSTAT_RMS = 1, DQN_HSTAT_MEANABS = 2 };
/* When a copy of a health plan runs. */
enum { DQN_HCOPY_ALWAYS = 0, DQN_HCOPY_ON_FREEZE = 1, DQN_HCOPY_ON_ROLLBACK = 2 };

/* One slot check of a plan: scan x, record its statistics, feed the ISV, optionally guard. */
typedef struct {
    float *x;
    size_t n;
    int slot;          /* its row of cur / tot */
    int isv_bound;     /* the ISV entry its bound comes from */
    int isv_scale;     /* ISV entry fed with max |x| (-1: none) */
    int isv_stat;      /* ISV entry fed with `stat` of x (-1: none) */
    int stat;          /* DQN_HSTAT_* */
    int guard;         /* clamp_finite in place (guard mode only) */
} dqn_hcheck;

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    int when;          /* DQN_HCOPY_* */
} dqn_hcopy;

#define DQN_HADAM_MAX_FAULTS 8

/* The optimizer step a plan can run first (adam_target_step's arithmetic and arguments, see
 * backends/ops.def), so that the parameters' check, the bookkeeping and the commit need no node
 * of their own: before the step, the state it changes is saved to bk_* (the backup for
 * `dqn health --replay` and the rollback); the step is skipped, in guard mode, when the gradient
 * norm is non-finite or above its bound max(guard_scale * isv[skip_isv], guard_floor) (a
 * non-finite gradient makes the norm non-finite); after it, each fault with fault_at == the
 * update poisons p[n / 2] (NaN, +Inf or 1e30: kind 1, 2, 3), as if it were the slot's write. */
typedef struct {
    float *p;
    const float *g;
    float *m, *v, *target;
    size_t n;
    float lr, beta1, beta2, eps, wd;
    const float *gnorm;
    float max_norm;
    int period;
    float tau;
    uint64_t *step;
    float *bk_p, *bk_m, *bk_v, *bk_target;
    int skip_isv;
    int n_faults;
    uint64_t fault_at[DQN_HADAM_MAX_FAULTS];
    int fault_kind[DQN_HADAM_MAX_FAULTS];
} dqn_hadam;

/* A health plan: one op call that runs its ALWAYS copies, its checks, their bookkeeping and, for
 * the commit plan (the last of an update), the update's resolution. Built once, outside the step. */
typedef struct {
    dqn_health_block *blk;     /* backend memory */
    const uint64_t *step;      /* the update counter (backend memory) */
    float guard_scale, guard_floor;
    float decay;               /* ISV: v = decay * v + (1 - decay) * sample */
    int guard_mode;            /* guards, skip and rollback act (else they only count) */
    const dqn_hcheck *checks;
    int n_checks;
    const dqn_hcopy *copies;
    int n_copies;
    int commit;                /* resolve the update: first event, freeze, rollback, counters */
    int n_slots;               /* commit: slots in execution order */
    int rollback_slot;         /* commit: an event there restores the ON_ROLLBACK copies (-1) */
    /* A backend may leave a plan's bookkeeping (not its scan and guard) to the commit plan that
     * lists it in `deferred`: such a plan must feed only ISV entries that no check before the
     * commit reads as a bound (the inline guard points are such plans). */
    int defer;
    /* A deferred plan an op computes as it runs (l2_norm2, grn_ln_gate_bwd, relu_bwd_tausum): a
     * backend may give each check as many partials as such an op has blocks. */
    int hosted;
    void *const *deferred;
    int n_deferred;
    /* The counter was incremented before this plan runs (by the fused optimizer op): the update
     * it records is *step - 1. */
    int step_after;
    /* A commit plan may run the optimizer step first (NULL: none); its first check must then be
     * the parameters (adam->p, adam->n), which the step's pass scans as it writes them. */
    const dqn_hadam *adam;
} dqn_hplan_desc;

/* 1 if d's optimizer step (if any) is one a backend can run: a commit plan whose first check is
 * the parameters the step writes, on the plan's counter, within the faults' room and
 * adam_target_step's ranges. */
static inline int dqn_hadam_ok(const dqn_hplan_desc *d) {
    const dqn_hadam *a = d->adam;
    return !a || (d->commit && d->n_checks >= 1 && d->checks[0].x == a->p &&
                  d->checks[0].n == a->n && a->step && a->step == d->step && a->n_faults >= 0 &&
                  a->n_faults <= DQN_HADAM_MAX_FAULTS && a->skip_isv < DQN_HEALTH_MAX_ISV &&
                  a->beta1 >= 0.0f && a->beta1 < 1.0f && a->beta2 >= 0.0f && a->beta2 < 1.0f &&
                  (a->period > 0 || (a->period == 0 && a->tau >= 0.0f && a->tau <= 1.0f)));
}

#endif
