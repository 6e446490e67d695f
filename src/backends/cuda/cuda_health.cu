/* The numerical-health ops on the GPU (semantics: backends/backend.h, health_check; reference:
 * cpu/cpu_health.c). A plan is one kernel launch: its blocks split the checks' and the copies'
 * elements among them (a fixed assignment made when the plan is built), each block writes its
 * partial statistics, the last block of each check (an integer counter, no float atomics)
 * reduces its partials in block order and records them, and the last block of all feeds the ISV
 * and, in a commit plan, resolves the update. A commit plan with an optimizer step gives the
 * parameters' check the blocks of Adam's pass, which scan the parameters as they write them. No
 * host round trip: it runs inside the captured update. */
#include "backends/cuda/cuda_common.cuh"

#include <limits.h>
#include <math.h>

#define HT 256                     /* threads per block */
#define HW (HT / 32)               /* warps per block */
#define H_ELEMS_PER_THREAD 16      /* the least work a block is given */
#define H_MAX_BLOCKS_PER_ITEM 4    /* x the multiprocessors */

/* One block's figures for one check. */
typedef struct {
    uint32_t nonfinite, nan, guarded;
    float bound;                   /* the bound the block used (read before any ISV update) */
    float maxabs, first_value;
    uint64_t first_index;
    double sumsq, sumabs;
} hpart;

/* A check of a deferred plan whose bookkeeping a commit plan does: where its partials are. */
typedef struct {
    const dqn_hcheck *check;       /* in the deferred plan's device memory */
    const hpart *parts;
    int b0, nb;
} hdref;

typedef struct {
    dqn_health_block *blk;
    const uint64_t *step;
    float guard_scale, guard_floor, decay;
    int guard_mode, commit, n_slots, rollback_slot, defer, step_after;
    int has_adam;                  /* the optimizer step runs in item 0 (the parameters' check) */
    dqn_hadam adam;
    const dqn_hcheck *checks;
    int n_checks;
    const hdref *drefs;            /* the deferred plans' checks (commit plans) */
    int n_drefs;
    const dqn_hcopy *copies;
    int n_copies;
    const int *block_item;         /* [blocks]: item (own checks, deferred checks, ALWAYS copies) */
    const int *item_first;         /* [items + 1]: first block of each item */
    hpart *parts;                  /* [blocks] */
    unsigned *item_done;           /* [items]: blocks of the item finished (0 between ops) */
    unsigned *done;                /* blocks finished (0 between ops) */
} hparams;

typedef struct {
    hparams k;
    int blocks;
    int *first_host;               /* item_first on the host (a commit plan reads a deferred one's) */
    void *dev;                     /* one allocation holding everything the kernel reads */
} cuda_hplan;

/* ---- reductions in a fixed order (deterministic) ---- */

typedef struct {
    uint32_t nonfinite, nan, guarded;
    float maxabs, first_value;
    uint64_t first_index;
    double sumsq, sumabs;
} hacc;

__device__ static void acc_init(hacc *a) {
    a->nonfinite = a->nan = a->guarded = 0;
    a->maxabs = 0.0f;
    a->first_value = 0.0f;
    a->first_index = DQN_HEALTH_NO_INDEX;
    a->sumsq = a->sumabs = 0.0;
}

/* b folds into a; b's indices are later than a's only by position, so the smaller index wins */
__device__ static void acc_merge(hacc *a, const hacc *b) {
    a->nonfinite += b->nonfinite;
    a->nan += b->nan;
    a->guarded += b->guarded;
    a->maxabs = fmaxf(a->maxabs, b->maxabs);
    a->sumsq += b->sumsq;
    a->sumabs += b->sumabs;
    if (b->first_index < a->first_index) {
        a->first_index = b->first_index;
        a->first_value = b->first_value;
    }
}

__device__ static void acc_shfl_down(hacc *a, int o) {
    hacc b;
    b.nonfinite = __shfl_down_sync(0xffffffffu, a->nonfinite, o);
    b.nan = __shfl_down_sync(0xffffffffu, a->nan, o);
    b.guarded = __shfl_down_sync(0xffffffffu, a->guarded, o);
    b.maxabs = __shfl_down_sync(0xffffffffu, a->maxabs, o);
    b.first_value = __shfl_down_sync(0xffffffffu, a->first_value, o);
    b.first_index = __shfl_down_sync(0xffffffffu, a->first_index, o);
    b.sumsq = __shfl_down_sync(0xffffffffu, a->sumsq, o);
    b.sumabs = __shfl_down_sync(0xffffffffu, a->sumabs, o);
    acc_merge(a, &b);
}

__device__ static void warp_reduce(hacc *a) {
    for (int o = 16; o > 0; o >>= 1) acc_shfl_down(a, o);
}

/* the whole block's sum in thread 0 (warps in order, lanes in a fixed tree) */
__device__ static void block_reduce(hacc *a, hacc *sh) {
    warp_reduce(a);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) sh[w] = *a;
    __syncthreads();
    if (w == 0) {
        if (l < HW) *a = sh[l];
        else acc_init(a);
        warp_reduce(a);
    }
    __syncthreads();
}

__device__ static void scan_one(hacc *a, float *x, size_t i, float v, float bound, bool guard) {
    if (!isfinite(v)) {
        a->nonfinite++;
        if (isnan(v)) a->nan++;
        if (i < a->first_index) {
            a->first_index = i;
            a->first_value = v;
        }
        if (guard) {
            x[i] = 0.0f;
            a->guarded++;
        }
        return;
    }
    float av = fabsf(v);
    a->maxabs = fmaxf(a->maxabs, av);
    a->sumsq += (double)v * (double)v;
    a->sumabs += (double)av;
    if (guard && av > bound) {
        x[i] = copysignf(bound, v);
        a->guarded++;
    }
}

/* the block's share of x: 16-byte loads where x is aligned, a grid-stride over float4s */
__device__ static void scan(hacc *a, float *x, size_t n, int part, int nparts, float bound,
                            bool guard) {
    size_t head = 0;
    if (((uintptr_t)x & 15) == 0) {
        size_t n4 = n / 4;
        const float4 *x4 = (const float4 *)x;
        for (size_t j = (size_t)part * HT + threadIdx.x; j < n4; j += (size_t)nparts * HT) {
            float4 v = x4[j];
            scan_one(a, x, 4 * j, v.x, bound, guard);
            scan_one(a, x, 4 * j + 1, v.y, bound, guard);
            scan_one(a, x, 4 * j + 2, v.z, bound, guard);
            scan_one(a, x, 4 * j + 3, v.w, bound, guard);
        }
        head = n4 * 4;
    }
    for (size_t i = head + (size_t)part * HT + threadIdx.x; i < n; i += (size_t)nparts * HT)
        scan_one(a, x, i, x[i], bound, guard);
}

__device__ static void block_copy(const dqn_hcopy *c, int part, int nparts) {
    const size_t bytes = c->bytes;
    if ((((uintptr_t)c->src | (uintptr_t)c->dst | bytes) & 15) == 0) {
        const float4 *src = (const float4 *)c->src;
        float4 *dst = (float4 *)c->dst;
        for (size_t i = (size_t)part * HT + threadIdx.x; i < bytes / 16; i += (size_t)nparts * HT)
            dst[i] = src[i];
        return;
    }
    const uint32_t *src = (const uint32_t *)c->src;
    uint32_t *dst = (uint32_t *)c->dst;
    for (size_t i = (size_t)part * HT + threadIdx.x; i < bytes / 4; i += (size_t)nparts * HT)
        dst[i] = src[i];
}

__device__ static void isv_feed(float *v, float sample, float decay) {
    if (!isfinite(sample)) return;
    if (*v == 0.0f) {
        if (sample > 0.0f) *v = sample;
    } else {
        *v = decay * *v + (1.0f - decay) * sample;
    }
}

/* One block: a check's partials [b0, b0 + nb) in a fixed order, then its bookkeeping (thread 0). */
__device__ static void finalize(const hparams *k, const dqn_hcheck *c, const hpart *parts, int b0,
                                int nb, int64_t update, hacc *sh) {
    dqn_health_block *blk = k->blk;
    hacc a;
    acc_init(&a);
    for (int j = threadIdx.x; j < nb; j += HT) {
        const volatile hpart *q = (const volatile hpart *)&parts[b0 + j];
        hacc b;
        b.nonfinite = q->nonfinite;
        b.nan = q->nan;
        b.guarded = q->guarded;
        b.maxabs = q->maxabs;
        b.first_value = q->first_value;
        b.first_index = q->first_index;
        b.sumsq = q->sumsq;
        b.sumabs = q->sumabs;
        acc_merge(&a, &b);
    }
    block_reduce(&a, sh);
    if (threadIdx.x != 0) return;
    const float bound = ((const volatile hpart *)&parts[b0])->bound;
    const size_t finite = c->n - a.nonfinite;
    dqn_hslot_cur cur;
    cur.nonfinite = a.nonfinite;
    cur.nan = a.nan;
    cur.guarded = a.guarded;
    cur.maxabs = a.maxabs;
    cur.rms = finite ? (float)sqrt(a.sumsq / (double)finite) : 0.0f;
    cur.meanabs = finite ? (float)(a.sumabs / (double)finite) : 0.0f;
    cur.bound = bound;
    cur.first_index = a.first_index;
    cur.first_value = a.first_value;
    cur.pad = 0;
    cur.event = a.nan ? DQN_EVENT_NAN
                : a.nonfinite ? (a.first_value > 0 ? DQN_EVENT_POSINF : DQN_EVENT_NEGINF)
                : a.maxabs > bound ? DQN_EVENT_RANGE
                                   : DQN_EVENT_NONE;
    blk->cur[c->slot] = cur;
    dqn_hslot_tot tot = blk->tot[c->slot];
    tot.nonfinite += a.nonfinite;
    tot.guarded += a.guarded;
    tot.maxabs = fmaxf(tot.maxabs, a.maxabs);
    if (cur.event) {
        if (tot.events == 0) tot.first_event_update = update;
        tot.events++;
    }
    blk->tot[c->slot] = tot;
}

/* One check's ISV samples from its recorded figures, by the plan's last block: after every block
 * of the plan has read its bound (each ISV entry is fed by one check, so threads never collide). */
__device__ static void feed(const hparams *k, const dqn_hcheck *c) {
    dqn_health_block *blk = k->blk;
    const volatile dqn_hslot_cur *cur = (const volatile dqn_hslot_cur *)&blk->cur[c->slot];
    if (cur->event) return;
    if (c->isv_scale >= 0) isv_feed(&blk->isv[c->isv_scale], cur->maxabs, k->decay);
    if (c->isv_stat >= 0 && c->stat != DQN_HSTAT_NONE)
        isv_feed(&blk->isv[c->isv_stat], c->stat == DQN_HSTAT_RMS ? cur->rms : cur->meanabs,
                 k->decay);
}

/* The update's resolution, by the last block: the first slot with an event, guards at work. */
__device__ static void commit(const hparams *k, int64_t update, int *decide) {
    __shared__ int first_w[HW], guarded_w[HW];
    dqn_health_block *blk = k->blk;
    int first = INT_MAX, guarded = 0;
    /* thread 0's loads first, in flight beside the slots' */
    int32_t ev_slot = 0, skip = 0;
    uint32_t rb_event = 0;
    uint64_t n_rolled = 0, n_skipped = 0, n_guarded = 0, n_updates = 0;
    if (threadIdx.x == 0) {
        ev_slot = blk->event.slot;
        skip = blk->skip;
        rb_event = k->rollback_slot >= 0 ? blk->cur[k->rollback_slot].event : 0;
        n_rolled = blk->rolled_back;
        n_skipped = blk->skipped;
        n_guarded = blk->guarded_updates;
        n_updates = blk->updates;
    }
    for (int s = threadIdx.x; s < k->n_slots; s += HT) {
        const volatile dqn_hslot_cur *c = (const volatile dqn_hslot_cur *)&blk->cur[s];
        if (c->event && s < first) first = s;
        guarded |= c->guarded != 0;
    }
    for (int o = 16; o > 0; o >>= 1) {
        first = min(first, __shfl_down_sync(0xffffffffu, first, o));
        guarded |= __shfl_down_sync(0xffffffffu, guarded, o);
    }
    if (threadIdx.x % 32 == 0) {
        first_w[threadIdx.x / 32] = first;
        guarded_w[threadIdx.x / 32] = guarded;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < HW; w++) {
            first = min(first, first_w[w]);
            guarded |= guarded_w[w];
        }
        first = first == INT_MAX ? -1 : first;
        decide[0] = first;
        decide[1] = first >= 0 && ev_slot < 0;
        decide[2] = k->guard_mode && rb_event != 0;
        if (decide[1]) {
            const dqn_hslot_cur *c = &blk->cur[first];
            blk->event.slot = first;
            blk->event.kind = c->event;
            blk->event.update = update;
            blk->event.value = c->event == DQN_EVENT_RANGE ? c->maxabs : c->first_value;
            blk->event.bound = c->bound;
            blk->event.count = c->nonfinite;
            blk->event.index = c->first_index;
            blk->frozen = 1;
        }
        if (decide[2]) blk->rolled_back = n_rolled + 1;
        if (skip || decide[2]) blk->skipped = n_skipped + 1;
        if (guarded) blk->guarded_updates = n_guarded + 1;
        blk->updates = n_updates + 1;
        blk->skip = 0;
    }
    __syncthreads();
    /* rare (the first event of a run, a rollback): the one block copies */
    if (!decide[1] && !decide[2]) return;
    for (int i = 0; i < k->n_copies; i++) {
        const dqn_hcopy *c = &k->copies[i];
        if ((c->when == DQN_HCOPY_ON_FREEZE && decide[1]) ||
            (c->when == DQN_HCOPY_ON_ROLLBACK && decide[2]))
            block_copy(c, 0, 1);
    }
}

/* Item 0 of a plan with an optimizer step: the block's share of Adam's pass (adam_target_step's
 * arithmetic, cuda_common.cuh), the backup of what it changes, the faults, and the scan of the
 * parameters it writes. */
__device__ static void adam_scan(const hparams *k, hacc *a, int part, int nparts, uint64_t st,
                                 float bound, bool skip) {
    const dqn_hadam *d = &k->adam;
    const adam_k ak = adam_consts(st, d->gnorm, d->max_norm, d->beta1, d->beta2);
    const bool copy = d->period > 0 && (st + 1) % (uint64_t)d->period == 0;
    for (size_t i = (size_t)part * HT + threadIdx.x; i < d->n; i += (size_t)nparts * HT) {
        float pi = d->p[i], mi = d->m[i], vi = d->v[i], ti = d->target[i];
        if (d->bk_p) d->bk_p[i] = pi;
        if (d->bk_m) d->bk_m[i] = mi;
        if (d->bk_v) d->bk_v[i] = vi;
        if (d->bk_target) d->bk_target[i] = ti;
        if (!skip) {
            adam_elem(ak, d->g[i], &pi, &mi, &vi, d->lr, d->beta1, d->beta2, d->eps, d->wd);
            d->m[i] = mi;
            d->v[i] = vi;
        }
        if (d->period == 0) d->target[i] = polyak_elem(d->tau, pi, ti);
        else if (copy) d->target[i] = pi;
        if (i == d->n / 2)
            for (int f = 0; f < d->n_faults; f++)
                if (st == d->fault_at[f])
                    pi = d->fault_kind[f] == 1   ? __int_as_float(0x7fc00000)
                         : d->fault_kind[f] == 2 ? __int_as_float(0x7f800000)
                                                 : 1e30f;
        d->p[i] = pi;
        scan_one(a, d->p, i, pi, bound, false);
    }
}

__global__ void __launch_bounds__(HT) k_health(hparams k) {
    KERNEL_PROLOGUE();
    __shared__ hacc sh[HW];
    __shared__ bool last;
    __shared__ int decide[3];   /* event slot (-1), freeze, rollback */
    const int b = blockIdx.x, item = k.block_item[b];
    const int part = b - k.item_first[item], nparts = k.item_first[item + 1] - k.item_first[item];
    const int n_fin = k.n_checks + k.n_drefs;   /* items with bookkeeping */
    dqn_health_block *blk = k.blk;
    /* every block reads the counter before the last one (with an optimizer step) raises it */
    const uint64_t st = *(const volatile uint64_t *)k.step;
    const int64_t update = (int64_t)st - (k.has_adam ? 0 : k.step_after);

    if (item >= n_fin) {
        block_copy(&k.copies[item - n_fin], part, nparts);
    } else if (item < k.n_checks) {
        const dqn_hcheck c = k.checks[item];
        const float bound = fmaxf(k.guard_scale * blk->isv[c.isv_bound], k.guard_floor);
        hacc a;
        acc_init(&a);
        if (item == 0 && k.has_adam) {
            bool skip = false;
            if (k.guard_mode && k.adam.gnorm && k.adam.skip_isv >= 0) {
                const float g = *k.adam.gnorm;
                skip = !(isfinite(g) &&
                         g <= fmaxf(k.guard_scale * blk->isv[k.adam.skip_isv], k.guard_floor));
            }
            if (part == 0 && threadIdx.x == 0) blk->skip = skip;
            adam_scan(&k, &a, part, nparts, st, bound, skip);
        } else {
            scan(&a, c.x, c.n, part, nparts, bound, c.guard && k.guard_mode);
        }
        block_reduce(&a, sh);
        if (threadIdx.x == 0) {
            hpart p;
            p.nonfinite = a.nonfinite;
            p.nan = a.nan;
            p.guarded = a.guarded;
            p.bound = bound;
            p.maxabs = a.maxabs;
            p.first_value = a.first_value;
            p.first_index = a.first_index;
            p.sumsq = a.sumsq;
            p.sumabs = a.sumabs;
            k.parts[b] = p;
        }
    }
    if (k.defer) return;   /* the commit plan does the bookkeeping */
    __syncthreads();
    /* the last block of a check records it: the checks' in parallel */
    if (item < n_fin) {
        if (threadIdx.x == 0) {
            __threadfence();
            last = atomicAdd(&k.item_done[item], 1u) == (unsigned)nparts - 1;
        }
        __syncthreads();
        if (last) {
            __threadfence();
            if (item < k.n_checks) {
                finalize(&k, &k.checks[item], k.parts, k.item_first[item], nparts, update, sh);
            } else {
                const hdref *r = &k.drefs[item - k.n_checks];
                finalize(&k, r->check, r->parts, r->b0, r->nb, update, sh);
            }
            if (threadIdx.x == 0) k.item_done[item] = 0;
        }
        __syncthreads();
    }
    /* the last block of all: the ISV, the update's resolution, the counter */
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(k.done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    /* the ISV (written only here) beside the commit (which reads the slots, not the ISV) */
    for (int j = threadIdx.x; j < n_fin; j += HT)
        feed(&k, j < k.n_checks ? &k.checks[j] : k.drefs[j - k.n_checks].check);
    if (k.commit) commit(&k, update, decide);
    if (threadIdx.x == 0) {
        if (k.has_adam) *k.adam.step = st + 1;
        *k.done = 0;
    }
}

static int blocks_for(const cuda_impl *c, size_t n) {
    size_t want = (n + (size_t)HT * H_ELEMS_PER_THREAD - 1) / ((size_t)HT * H_ELEMS_PER_THREAD);
    size_t cap = (size_t)c->sm_count * H_MAX_BLOCKS_PER_ITEM;
    if (want > cap) want = cap;
    return want ? (int)want : 1;
}

static int adam_blocks(const cuda_impl *c, size_t n) {
    size_t want = (n + (size_t)HT * 4 - 1) / ((size_t)HT * 4);
    size_t cap = (size_t)c->sm_count * H_MAX_BLOCKS_PER_ITEM;
    if (want > cap) want = cap;
    return want ? (int)want : 1;
}

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

dqn_status cuda_health_plan(dqn_backend *be, const dqn_hplan_desc *desc, void **plan) {
    cuda_impl *c = cuda_of(be);
    *plan = NULL;
    CUDA_ARG(desc && desc->blk && desc->step, "health_plan: NULL block or step");
    CUDA_ARG(desc->n_deferred >= 0 && (desc->n_deferred == 0 || desc->commit),
             "health_plan: only a commit plan finishes deferred plans");
    for (int i = 0; i < desc->n_deferred; i++)
        CUDA_ARG(desc->deferred[i] && ((const cuda_hplan *)desc->deferred[i])->k.defer,
                 "health_plan: deferred plan %d was not built with defer", i);
    CUDA_ARG(desc->n_checks >= 0 && desc->n_copies >= 0 && desc->n_slots <= DQN_HEALTH_MAX_SLOTS,
             "health_plan: %d checks, %d copies, %d slots", desc->n_checks, desc->n_copies,
             desc->n_slots);
    int always = 0;
    for (int i = 0; i < desc->n_copies; i++) {
        const dqn_hcopy *cp = &desc->copies[i];
        CUDA_ARG(cp->bytes % 4 == 0 && ((uintptr_t)cp->dst | (uintptr_t)cp->src) % 4 == 0,
                 "health_plan: copy %d of %zu bytes is not in whole aligned words", i, cp->bytes);
        always += cp->when == DQN_HCOPY_ALWAYS;
    }
    for (int i = 0; i < desc->n_checks; i++) {
        const dqn_hcheck *ck = &desc->checks[i];
        CUDA_ARG(ck->slot >= 0 && ck->slot < DQN_HEALTH_MAX_SLOTS && ck->isv_bound >= 0 &&
                     ck->isv_bound < DQN_HEALTH_MAX_ISV && ck->isv_scale < DQN_HEALTH_MAX_ISV &&
                     ck->isv_stat < DQN_HEALTH_MAX_ISV && (ck->x || ck->n == 0),
                 "health_plan: check %d (slot %d) is malformed", i, ck->slot);
    }
    const dqn_hadam *ad = desc->adam;
    CUDA_ARG(!ad || (desc->commit && desc->n_checks >= 1 && desc->checks[0].x == ad->p &&
                     desc->checks[0].n == ad->n && ad->step == desc->step && ad->n_faults >= 0 &&
                     ad->n_faults <= DQN_HADAM_MAX_FAULTS && ad->skip_isv < DQN_HEALTH_MAX_ISV &&
                     ad->beta1 >= 0.0f && ad->beta1 < 1.0f && ad->beta2 >= 0.0f &&
                     ad->beta2 < 1.0f && (ad->period > 0 || (ad->period == 0 && ad->tau >= 0.0f &&
                                                            ad->tau <= 1.0f))),
             "health_plan: an optimizer step needs a commit plan whose first check is its "
             "parameters, the plan's counter, at most %d faults and adam_target_step's ranges",
             DQN_HADAM_MAX_FAULTS);
    /* the deferred plans' checks, each an item of one block that does its bookkeeping */
    int n_drefs = 0;
    for (int i = 0; i < desc->n_deferred; i++)
        n_drefs += ((const cuda_hplan *)desc->deferred[i])->k.n_checks;
    /* items: the checks, the deferred checks, then the ALWAYS copies (the others run in the last
     * block) */
    int n_fin = desc->n_checks + n_drefs;
    int items = n_fin + always;
    CUDA_ARG(items > 0, "health_plan: nothing to check or copy");
    int *first = (int *)malloc(sizeof(int) * (size_t)(items + 1));
    dqn_hcopy *order = (dqn_hcopy *)malloc(sizeof(dqn_hcopy) * (size_t)(desc->n_copies + 1));
    hdref *drefs = (hdref *)malloc(sizeof(hdref) * (size_t)(n_drefs + 1));
    if (!first || !order || !drefs) {
        free(first);
        free(order);
        free(drefs);
        return DQN_ERR(DQN_ERR_NOMEM, "health plan");
    }
    n_drefs = 0;
    for (int i = 0; i < desc->n_deferred; i++) {
        const cuda_hplan *q = (const cuda_hplan *)desc->deferred[i];
        for (int j = 0; j < q->k.n_checks; j++) {
            hdref r = {q->k.checks + j, q->k.parts, q->first_host[j],
                       q->first_host[j + 1] - q->first_host[j]};
            drefs[n_drefs++] = r;
        }
    }
    int nc = 0;
    for (int i = 0; i < desc->n_copies; i++)
        if (desc->copies[i].when == DQN_HCOPY_ALWAYS) order[nc++] = desc->copies[i];
    for (int i = 0; i < desc->n_copies; i++)
        if (desc->copies[i].when != DQN_HCOPY_ALWAYS) order[nc++] = desc->copies[i];
    int blocks = 0;
    for (int it = 0; it < items; it++) {
        first[it] = blocks;
        /* Adam's pass: a few elements a thread (each block also reduces its statistics) */
        blocks += it == 0 && ad      ? adam_blocks(c, ad->n)
                  : it < desc->n_checks ? blocks_for(c, desc->checks[it].n)
                  : it < n_fin        ? 1
                                      : blocks_for(c, order[it - n_fin].bytes / 4);
    }
    first[items] = blocks;
    int *owner = (int *)malloc(sizeof(int) * (size_t)blocks);
    if (!owner) {
        free(first);
        free(order);
        free(drefs);
        return DQN_ERR(DQN_ERR_NOMEM, "health plan");
    }
    for (int it = 0; it < items; it++)
        for (int bb = first[it]; bb < first[it + 1]; bb++) owner[bb] = it;

    size_t o_checks = 0, o_copies = align16(o_checks + sizeof(dqn_hcheck) * (size_t)desc->n_checks);
    size_t o_owner = align16(o_copies + sizeof(dqn_hcopy) * (size_t)nc);
    size_t o_first = align16(o_owner + sizeof(int) * (size_t)blocks);
    size_t o_parts = align16(o_first + sizeof(int) * (size_t)(items + 1));
    size_t o_done = align16(o_parts + sizeof(hpart) * (size_t)blocks);
    size_t o_idone = align16(o_done + 16);
    size_t o_drefs = align16(o_idone + sizeof(unsigned) * (size_t)items);
    size_t total = o_drefs + sizeof(hdref) * (size_t)(n_drefs + 1);
    cuda_hplan *p = (cuda_hplan *)calloc(1, sizeof *p);
    unsigned char *host = (unsigned char *)calloc(1, total);
    dqn_status s = DQN_OK;
    if (!p || !host) s = DQN_ERR(DQN_ERR_NOMEM, "health plan");
    if (s == DQN_OK && !(p->first_host = (int *)malloc(sizeof(int) * (size_t)(items + 1))))
        s = DQN_ERR(DQN_ERR_NOMEM, "health plan");
    if (s == DQN_OK) {
        memcpy(p->first_host, first, sizeof(int) * (size_t)(items + 1));
        if (desc->n_checks) memcpy(host + o_checks, desc->checks, sizeof(dqn_hcheck) * desc->n_checks);
        if (nc) memcpy(host + o_copies, order, sizeof(dqn_hcopy) * (size_t)nc);
        memcpy(host + o_owner, owner, sizeof(int) * (size_t)blocks);
        memcpy(host + o_first, first, sizeof(int) * (size_t)(items + 1));
        if (n_drefs) memcpy(host + o_drefs, drefs, sizeof(hdref) * (size_t)n_drefs);
        cudaError_t e = cudaMalloc(&p->dev, total);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(p->dev, host, total, cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            s = DQN_ERR(DQN_ERR_BACKEND, "health plan (%zu bytes): %s%s", total,
                        cudaGetErrorString(e), cuda_hint(e));
    }
    free(first);
    free(order);
    free(owner);
    free(drefs);
    free(host);
    if (s != DQN_OK) {
        if (p && p->dev) cudaFree(p->dev);
        if (p) free(p->first_host);
        free(p);
        return s;
    }
    unsigned char *d = (unsigned char *)p->dev;
    p->blocks = blocks;
    p->k.blk = desc->blk;
    p->k.step = desc->step;
    p->k.guard_scale = desc->guard_scale;
    p->k.guard_floor = desc->guard_floor;
    p->k.decay = desc->decay;
    p->k.guard_mode = desc->guard_mode;
    p->k.commit = desc->commit;
    p->k.n_slots = desc->n_slots;
    p->k.rollback_slot = desc->rollback_slot;
    p->k.checks = (const dqn_hcheck *)(d + o_checks);
    p->k.n_checks = desc->n_checks;
    /* the kernel sees the ALWAYS copies as items and runs the rest (n_copies in all) in commit */
    p->k.copies = (const dqn_hcopy *)(d + o_copies);
    p->k.n_copies = nc;
    p->k.block_item = (const int *)(d + o_owner);
    p->k.item_first = (const int *)(d + o_first);
    p->k.parts = (hpart *)(d + o_parts);
    p->k.done = (unsigned *)(d + o_done);
    p->k.item_done = (unsigned *)(d + o_idone);
    p->k.defer = desc->defer;
    p->k.step_after = desc->step_after;
    p->k.has_adam = ad != NULL;
    if (ad) p->k.adam = *ad;
    p->k.drefs = (const hdref *)(d + o_drefs);
    p->k.n_drefs = n_drefs;
    *plan = p;
    return DQN_OK;
}

void cuda_health_plan_free(dqn_backend *be, void *plan) {
    (void)be;
    cuda_hplan *p = (cuda_hplan *)plan;
    if (!p) return;
    if (p->dev) cudaFree(p->dev);
    free(p->first_host);
    free(p);
}

dqn_status cuda_health_check(dqn_backend *be, const void *plan) {
    cuda_impl *c = cuda_of(be);
    const cuda_hplan *p = (const cuda_hplan *)plan;
    CUDA_ARG(p, "health_check: NULL plan");
    KLAUNCH(k_health, p->blocks, HT, 0, p->k);
    return DQN_OK;
}

__global__ void k_fault(float *x, size_t n, const uint64_t *step, uint64_t at, int kind) {
    KERNEL_PROLOGUE();
    if (*step != at) return;
    x[n / 2] = kind == 1 ? __int_as_float(0x7fc00000) : kind == 2 ? __int_as_float(0x7f800000) : 1e30f;
}

dqn_status cuda_health_fault(dqn_backend *be, float *x, size_t n, const uint64_t *step,
                                        uint64_t at, int kind) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(x && step && n > 0 && kind >= 1 && kind <= 3, "health_fault: x %p, n %zu, kind %d",
             (void *)x, n, kind);
    KLAUNCH(k_fault, 1, 1, 0, x, n, step, at, kind);
    return DQN_OK;
}

dqn_status cuda_fence_create(dqn_backend *be, void **fence) {
    (void)be;
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *fence = (void *)e;
    return DQN_OK;
}

void cuda_fence_destroy(dqn_backend *be, void *fence) {
    (void)be;
    if (fence) cudaEventDestroy((cudaEvent_t)fence);
}

dqn_status cuda_fence_record(dqn_backend *be, void *fence) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)fence, cuda_of(be)->stream));
    return DQN_OK;
}

dqn_status cuda_fence_wait(dqn_backend *be, void *fence) {
    (void)be;
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)fence));
    return DQN_OK;
}
