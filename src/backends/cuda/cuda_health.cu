/* The numerical-health ops on the GPU (semantics: backends/ops.def, health_check; reference:
 * cpu/cpu_health.c). A plan is one kernel launch: its blocks split the checks' and the copies'
 * elements among them (a fixed assignment made when the plan is built) and each block writes its
 * partial statistics; the last block of all (one integer counter, no float atomics) loads every
 * partial it needs into shared memory at once, reduces each check's partials in the fixed order
 * of a block reduction, records the checks, feeds the ISV and, in a commit plan, resolves the
 * update, reading the records from shared memory. A check with too many partials for that stage
 * is reduced first by its own last block (a counter per such check), and a deferred plan's check
 * by a block of the commit plan, both into one staged partial. A commit plan with an optimizer
 * step gives the parameters' check the blocks of Adam's pass, which scan the parameters as they
 * write them. No host round trip: it runs inside the captured update. */
#include "backends/cuda/cuda_health.cuh"

#include <limits.h>
#include <math.h>

#define H_ELEMS_PER_THREAD 16      /* the least work a block is given */
#define H_ADAM_ELEMS_PER_THREAD 4  /* Adam's pass: a few elements a thread */
#define H_MAX_BLOCKS_PER_ITEM 4    /* x the multiprocessors */
#define H_SCAN_AHEAD 4             /* float4 loads of a thread in flight at once in a scan */
/* Shared memory a block may use, static and the last block's stage: 5 blocks of HT threads (the
 * register file's limit at 48 registers) still fit a multiprocessor (228 KB, 1 KB a block). */
#define H_SMEM_BLOCK (44 * 1024)

/* One block's share of a plan. Items: the checks, the deferred plans' checks, the ALWAYS copies. */
typedef struct {
    dqn_hcheck c;                  /* a check's block: its check */
    int item, part, nparts;
    int pidx;                      /* a check's block: its partial's index in parts[] */
    int red;                       /* >= 0: the item's partials are reduced by one block (its last,
                                    * or a deferred check's own) into the staged parts[red] */
    int pad;
} block_share;

/* A check the last block records: staged partials [soff, soff + nst) (nst 1: reduced already). */
typedef struct {
    uint64_t n;
    int slot, isv_scale, isv_stat, stat;
    int soff, nst;
} check_record;

/* One warp's share of the last block's reduction: warp w's of a block reduction of nb partials. */
typedef struct {
    int soff, nb, w, pad;
} warp_task;

/* A deferred plan's check: its partials, in that plan's memory. */
typedef struct {
    const scan_partial *parts;
    int nb, pad;
} deferred_check;

typedef struct {
    dqn_health_block *blk;
    const uint64_t *step;
    float guard_scale, guard_floor, decay;
    int guard_mode, commit, n_slots, rollback_slot, defer, step_after;
    int has_adam;                  /* the optimizer step runs in item 0 (the parameters' check) */
    dqn_hadam adam;
    const block_share *blocks;
    int n_checks, n_fin;           /* items [0, n_checks) checks, [n_checks, n_fin) deferred ones */
    const deferred_check *drefs;
    const dqn_hcopy *copies;       /* the ALWAYS copies (items n_fin...), then the others */
    int n_copies;
    const check_record *fins;              /* [n_fin] */
    const warp_task *tasks;
    int n_staged, n_tasks;         /* parts[0, n_staged) is what the last block stages */
    int fins_staged;               /* and fins[] too (all but a plan of hundreds of checks) */
    int slot_hi, isv_hi, cur_hi;   /* the records' rows the last block reads */
    scan_partial *parts;
    unsigned *item_done;           /* [n_checks]: a reduced check's blocks done (0 between ops) */
    unsigned *done;                /* blocks finished (0 between ops) */
} plan_args;

typedef struct {
    plan_args k;
    int blocks;
    size_t smem;                   /* the last block's stage */
    dqn_hcheck *checks_host;       /* [n_checks], with where their partials are: a commit plan */
    int *soff_host, *nb_host;      /* that finishes this one reads them */
    void *dev;                     /* one allocation holding everything the kernel reads */
} cuda_hplan;

/* the copies into shared memory are 16-byte moves of the block's rows */
static_assert(sizeof(scan_partial) == 48 && sizeof(warp_task) == 16 &&
                  sizeof(block_share) % 8 == 0,
              "layouts");
static_assert(offsetof(dqn_health_block, tot) % 16 == 0 &&
                  offsetof(dqn_health_block, isv) % 16 == 0 &&
                  offsetof(dqn_health_block, event) % 16 == 0 &&
                  (sizeof(dqn_health_block) - offsetof(dqn_health_block, event)) % 16 == 0 &&
                  sizeof(dqn_hslot_cur) % 16 == 0 &&
                  sizeof(dqn_hslot_tot) * DQN_HEALTH_MAX_SLOTS % 16 == 0 &&
                  sizeof(float) * DQN_HEALTH_MAX_ISV % 16 == 0,
              "health block rows in 16-byte units");

/* a partial's figures, from another block's (P = const volatile scan_partial: written during this
 * launch) or a staged one (P = const scan_partial, shared memory) */
template <typename P> __device__ static hacc part_acc(P *q) {
    hacc b;
    b.nonfinite = q->nonfinite;
    b.nan = q->nan;
    b.guarded = q->guarded;
    b.maxabs = q->maxabs;
    b.first_value = q->first_value;
    b.first_index = q->first_index;
    b.sumsq = q->sumsq;
    b.sumabs = q->sumabs;
    return b;
}

/* a reduction's result in place of a staged partial; its bound (partial 0's) stays */
__device__ static void put_acc(scan_partial *q, const hacc *a) { *q = to_part(a, q->bound); }

/* the block's share of x: 16-byte loads where x is aligned, a grid-stride over float4s */
__device__ static void scan(hacc *a, float *x, size_t n, int part, int nparts, float bound,
                            bool guard) {
    size_t head = 0;
    if (((uintptr_t)x & 15) == 0) {
        size_t n4 = n / 4;
        const float4 *x4 = (const float4 *)x;
        const size_t stride = (size_t)nparts * HT;
        /* H_SCAN_AHEAD of the thread's float4s loaded before any is scanned (a guard's store may
         * alias a later load, so the compiler would not hoist them): the same order of sums */
        for (size_t j0 = (size_t)part * HT + threadIdx.x; j0 < n4; j0 += H_SCAN_AHEAD * stride) {
            float4 v[H_SCAN_AHEAD];
#pragma unroll
            for (int u = 0; u < H_SCAN_AHEAD; u++)
                if (j0 + u * stride < n4) v[u] = x4[j0 + u * stride];
#pragma unroll
            for (int u = 0; u < H_SCAN_AHEAD; u++) {
                const size_t j = j0 + u * stride;
                if (j >= n4) break;
                scan_one(a, x, 4 * j, v[u].x, bound, guard);
                scan_one(a, x, 4 * j + 1, v[u].y, bound, guard);
                scan_one(a, x, 4 * j + 2, v[u].z, bound, guard);
                scan_one(a, x, 4 * j + 3, v[u].w, bound, guard);
            }
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

/* the value a fault writes (health_fault's kinds) */
__device__ static float fault_value(int kind) {
    return kind == 1 ? __int_as_float(0x7fc00000) : kind == 2 ? __int_as_float(0x7f800000) : 1e30f;
}

/* bytes (rounded up to 16) from 16-byte aligned src, the block's threads in turn */
__device__ static void stage_bytes(void *dst, const void *src, size_t bytes) {
    for (size_t i = threadIdx.x; i < (bytes + 15) / 16; i += HT)
        cp_async16((uint4 *)dst + i, (const uint4 *)src + i);
}

/* One block: partials src[0, nb) in the order of a block reduction, into the staged *dst (and the
 * block's copy, for the case that it is the last block). */
__device__ static void reduce_parts(const scan_partial *src, int nb, scan_partial *dst, int at,
                                    hacc *sh, scan_partial *mine, int *mine_at) {
    hacc a;
    acc_init(&a);
    for (int j = threadIdx.x; j < nb; j += HT) {
        const hacc b = part_acc((const volatile scan_partial *)&src[j]);
        acc_merge(&a, &b);
    }
    block_reduce(&a, sh);
    if (threadIdx.x != 0) return;
    const scan_partial p = to_part(&a, ((const volatile scan_partial *)src)->bound);
    *dst = p;
    *mine = p;
    *mine_at = at;
}

/* One check's record from its staged partials: the rest of the block reduction (the warps'
 * results, in the tree warp 0 sums them in), cur, tot and its ISV samples (every block of the
 * plan read its bound before the last one started; each ISV entry is fed by one check). */
__device__ static void record(const plan_args *k, const check_record *f, scan_partial *stage,
                              dqn_health_block *sb, int64_t update) {
    dqn_health_block *blk = k->blk;
    scan_partial *e = &stage[f->soff];
    if (f->nst > 1) {
        const int nw = min(HW, (f->nst + 31) / 32);
        for (int o = HW / 2; o > 0; o >>= 1)
            for (int w = 0; w < o && w + o < nw; w++) {
                hacc a = part_acc(&e[32 * w]);
                const hacc b = part_acc(&e[32 * (w + o)]);
                acc_merge(&a, &b);
                put_acc(&e[32 * w], &a);
            }
    }
    const hacc a = part_acc(e);
    const float bound = e->bound;
    const size_t finite = f->n - a.nonfinite;
    /* built in the shared copy, which the resolution reads, then stored */
    dqn_hslot_cur *cur = &sb->cur[f->slot];
    cur->nonfinite = a.nonfinite;
    cur->nan = a.nan;
    cur->guarded = a.guarded;
    cur->maxabs = a.maxabs;
    cur->rms = finite ? (float)sqrt(a.sumsq / (double)finite) : 0.0f;
    cur->meanabs = finite ? (float)(a.sumabs / (double)finite) : 0.0f;
    cur->bound = bound;
    cur->first_index = a.first_index;
    cur->first_value = a.first_value;
    cur->pad = 0;
    cur->event = a.nan ? DQN_EVENT_NAN
                 : a.nonfinite ? (a.first_value > 0 ? DQN_EVENT_POSINF : DQN_EVENT_NEGINF)
                 : a.maxabs > bound ? DQN_EVENT_RANGE
                                    : DQN_EVENT_NONE;
    dqn_hslot_tot *tot = &sb->tot[f->slot];
    tot->nonfinite += a.nonfinite;
    tot->guarded += a.guarded;
    tot->maxabs = fmaxf(tot->maxabs, a.maxabs);
    if (cur->event) {
        if (tot->events == 0) tot->first_event_update = update;
        tot->events++;
    }
    blk->cur[f->slot] = *cur;
    blk->tot[f->slot] = *tot;
    if (cur->event) return;
    if (f->isv_scale >= 0 && dqn_isv_feed(&sb->isv[f->isv_scale], cur->maxabs, k->decay))
        blk->isv[f->isv_scale] = sb->isv[f->isv_scale];
    if (f->isv_stat >= 0 && f->stat != DQN_HSTAT_NONE &&
        dqn_isv_feed(&sb->isv[f->isv_stat], f->stat == DQN_HSTAT_RMS ? cur->rms : cur->meanabs,
                     k->decay))
        blk->isv[f->isv_stat] = sb->isv[f->isv_stat];
}

/* The update's resolution from the records in shared memory: the first slot with an event,
 * guards at work. */
__device__ static void commit(const plan_args *k, const dqn_health_block *sb, int64_t update) {
    __shared__ int first_w[HW], guarded_w[HW], decide[3];   /* event slot (-1), freeze, rollback */
    dqn_health_block *blk = k->blk;
    int first = INT_MAX, guarded = 0;
    for (int s = threadIdx.x; s < k->n_slots; s += HT) {
        if (sb->cur[s].event && s < first) first = s;
        guarded |= sb->cur[s].guarded != 0;
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
        decide[1] = first >= 0 && sb->event.slot < 0;
        decide[2] = k->guard_mode && k->rollback_slot >= 0 && sb->cur[k->rollback_slot].event != 0;
        if (decide[1]) {
            const dqn_hslot_cur *c = &sb->cur[first];
            blk->event.slot = first;
            blk->event.kind = c->event;
            blk->event.update = update;
            blk->event.value = c->event == DQN_EVENT_RANGE ? c->maxabs : c->first_value;
            blk->event.bound = c->bound;
            blk->event.count = c->nonfinite;
            blk->event.index = c->first_index;
            blk->frozen = 1;
        }
        if (decide[2]) blk->rolled_back = sb->rolled_back + 1;
        if (sb->skip || decide[2]) blk->skipped = sb->skipped + 1;
        if (guarded) blk->guarded_updates = sb->guarded_updates + 1;
        blk->updates = sb->updates + 1;
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

/* The last block of a plan. (a) Every load at once: the staged partials, the warps' tasks, the
 * checks' descriptors, the rows of the records it updates, the ISV entries it feeds, the
 * resolution's counters; (b) each warp's share of the checks' reductions; (c) a thread per check
 * records it; (d) the resolution. What this block wrote itself, the staged partial `mine` (at
 * mine_at, or -1) and the skip flag (own_skip, or -1), comes from shared memory, so a plan of one
 * block needs no fence. */
__device__ static void tail(const plan_args *k, int64_t update, const scan_partial *mine,
                            int mine_at, int own_skip) {
    extern __shared__ uint4 dyn[];
    __shared__ __align__(16) dqn_health_block sb;
    scan_partial *stage = (scan_partial *)dyn;
    warp_task *task = (warp_task *)(stage + k->n_staged);
    check_record *sfin = (check_record *)(task + k->n_tasks);
    const check_record *fin = k->fins_staged ? sfin : k->fins;
    dqn_health_block *blk = k->blk;
    const int t = threadIdx.x, lane = t % 32;
    const uint4 *parts = (const uint4 *)k->parts;
    for (int i = t; i < 3 * k->n_staged; i += HT)
        if (i / 3 != mine_at) cp_async16(&dyn[i], &parts[i]);
    stage_bytes(task, k->tasks, sizeof(warp_task) * (size_t)k->n_tasks);
    if (k->fins_staged) stage_bytes(sfin, k->fins, sizeof(check_record) * (size_t)k->n_fin);
    stage_bytes(sb.tot, blk->tot, sizeof(dqn_hslot_tot) * (size_t)k->slot_hi);
    stage_bytes(sb.isv, blk->isv, sizeof(float) * (size_t)k->isv_hi);
    if (k->commit) {
        stage_bytes(sb.cur, blk->cur, sizeof(dqn_hslot_cur) * (size_t)k->cur_hi);
        stage_bytes(&sb.event, &blk->event,
                    sizeof(dqn_health_block) - offsetof(dqn_health_block, event));
    }
    if (t == 0 && mine_at >= 0) stage[mine_at] = *mine;
    cp_async_wait_all();
    __syncthreads();
    if (t == 0 && own_skip >= 0) sb.skip = own_skip;   /* read by commit, after the next barrier */
#pragma unroll 1
    for (int i = t / 32; i < k->n_tasks; i += HW) {
        const warp_task q = task[i];
        hacc a;
        acc_init(&a);
#pragma unroll 1
        for (int j = 32 * q.w + lane; j < q.nb; j += HT) {
            const hacc b = part_acc(&stage[q.soff + j]);
            acc_merge(&a, &b);
        }
        warp_reduce(&a);
        if (lane == 0) put_acc(&stage[q.soff + 32 * q.w], &a);
    }
    __syncthreads();
    for (int j = t; j < k->n_fin; j += HT) record(k, &fin[j], stage, &sb, update);
    if (k->commit) {
        __syncthreads();
        commit(k, &sb, update);
    }
}

/* Item 0 of a plan with an optimizer step: the block's share of Adam's pass (adam_target_step's
 * arithmetic, cuda_common.cuh), the backup of what it changes, the faults, and the scan of the
 * parameters it writes. */
__device__ static void adam_scan(const plan_args *k, hacc *a, int part, int nparts, uint64_t st,
                                 float bound, bool skip) {
    const dqn_hadam *d = &k->adam;
    const dqn_adam_consts ak = dqn_adam_consts_at(st, d->gnorm, d->max_norm, d->beta1, d->beta2);
    const bool copy = d->period > 0 && (st + 1) % (uint64_t)d->period == 0;
    for (size_t i = (size_t)part * HT + threadIdx.x; i < d->n; i += (size_t)nparts * HT) {
        float pi = d->p[i], mi = d->m[i], vi = d->v[i], ti = d->target[i];
        if (d->bk_p) d->bk_p[i] = pi;
        if (d->bk_m) d->bk_m[i] = mi;
        if (d->bk_v) d->bk_v[i] = vi;
        if (d->bk_target) d->bk_target[i] = ti;
        if (!skip) {
            dqn_adam_elem(&ak, d->g[i], &pi, &mi, &vi, d->lr, d->beta1, d->beta2, d->eps, d->wd);
            d->m[i] = mi;
            d->v[i] = vi;
        }
        if (d->period == 0) d->target[i] = dqn_polyak(d->tau, pi, ti);
        else if (copy) d->target[i] = pi;
        if (i == d->n / 2)
            for (int f = 0; f < d->n_faults; f++)
                if (st == d->fault_at[f]) pi = fault_value(d->fault_kind[f]);
        d->p[i] = pi;
        scan_one(a, d->p, i, pi, bound, false);
    }
}

__global__ void __launch_bounds__(HT) k_health(plan_args k) {
    KERNEL_PROLOGUE();
    __shared__ hacc sh[HW];
    __shared__ scan_partial mine;
    __shared__ int mine_at, own_skip, last;
    const block_share *hb = &k.blocks[blockIdx.x];
    dqn_health_block *blk = k.blk;
    /* every block reads the counter before the last one (with an optimizer step) raises it */
    const uint64_t st = *(const volatile uint64_t *)k.step;
    const int64_t update = (int64_t)st - (k.has_adam ? 0 : k.step_after);
    if (threadIdx.x == 0) mine_at = own_skip = -1;

    if (hb->item >= k.n_fin) {
        block_copy(&k.copies[hb->item - k.n_fin], hb->part, hb->nparts);
    } else if (hb->item < k.n_checks) {
        const float bound =
            dqn_guard_bound(k.guard_scale, blk->isv[hb->c.isv_bound], k.guard_floor);
        hacc a;
        acc_init(&a);
        if (hb->item == 0 && k.has_adam) {
            bool skip = false;
            if (k.guard_mode && k.adam.gnorm && k.adam.skip_isv >= 0) {
                const float g = *k.adam.gnorm;
                skip = !(isfinite(g) && g <= dqn_guard_bound(k.guard_scale,
                                                             blk->isv[k.adam.skip_isv],
                                                             k.guard_floor));
            }
            if (hb->part == 0 && threadIdx.x == 0) blk->skip = own_skip = skip;
            adam_scan(&k, &a, hb->part, hb->nparts, st, bound, skip);
        } else {
            scan(&a, hb->c.x, hb->c.n, hb->part, hb->nparts, bound, hb->c.guard && k.guard_mode);
        }
        block_reduce(&a, sh);
        if (threadIdx.x == 0) {
            const scan_partial p = to_part(&a, bound);
            k.parts[hb->pidx] = p;
            if (hb->red < 0) {
                mine = p;
                mine_at = hb->pidx;
            }
        }
        if (hb->red >= 0) {   /* too many partials to stage: the check's last block reduces them */
            if (threadIdx.x == 0) {
                __threadfence();
                last = atomicAdd(&k.item_done[hb->item], 1u) == (unsigned)hb->nparts - 1;
            }
            __syncthreads();
            if (last) {
                __threadfence();
                reduce_parts(k.parts + (hb->pidx - hb->part), hb->nparts, &k.parts[hb->red],
                             hb->red, sh, &mine, &mine_at);
                if (threadIdx.x == 0) k.item_done[hb->item] = 0;
            }
        }
    } else {   /* a deferred check: its plan ran before this one */
        const deferred_check r = k.drefs[hb->item - k.n_checks];
        reduce_parts(r.parts, r.nb, &k.parts[hb->red], hb->red, sh, &mine, &mine_at);
    }
    if (k.defer) return;   /* the commit plan does the bookkeeping */
    __syncthreads();
    if (gridDim.x > 1) {
        if (threadIdx.x == 0) {
            __threadfence();
            last = atomicAdd(k.done, 1u) == gridDim.x - 1;
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
    }
    tail(&k, update, &mine, mine_at, own_skip);
    if (threadIdx.x == 0) {
        if (k.has_adam) *k.adam.step = st + 1;
        if (gridDim.x > 1) *k.done = 0;
    }
}

static int blocks_for(const cuda_impl *c, size_t n, int per_thread) {
    size_t want = (n + (size_t)HT * per_thread - 1) / ((size_t)HT * per_thread);
    size_t cap = (size_t)c->sm_count * H_MAX_BLOCKS_PER_ITEM;
    if (want > cap) want = cap;
    return want ? (int)want : 1;
}

/* the warps' tasks of a check of nb staged partials */
static int tasks_for(int nb) { return nb > 1 ? (nb + 31) / 32 < HW ? (nb + 31) / 32 : HW : 0; }

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
    CUDA_ARG(desc->n_checks >= 0 && desc->n_checks <= DQN_HEALTH_MAX_SLOTS && desc->n_copies >= 0 &&
                 desc->n_slots <= DQN_HEALTH_MAX_SLOTS &&
                 (!desc->commit || desc->rollback_slot < DQN_HEALTH_MAX_SLOTS),
             "health_plan: %d checks, %d copies, %d slots, rollback slot %d", desc->n_checks,
             desc->n_copies, desc->n_slots, desc->rollback_slot);
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
    CUDA_ARG(dqn_hadam_ok(desc),
             "health_plan: an optimizer step needs a commit plan whose first check is its "
             "parameters, the plan's counter, at most %d faults and adam_target_step's ranges",
             DQN_HADAM_MAX_FAULTS);
    /* the last block's stage: what shared memory the kernel leaves */
    size_t budget = 0;
    if (!desc->defer) {
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncGetAttributes(&fa, k_health));
        budget = fa.sharedSizeBytes < H_SMEM_BLOCK ? H_SMEM_BLOCK - fa.sharedSizeBytes : 0;
    }
    const int nc = desc->n_checks;
    int n_drefs = 0;
    for (int i = 0; i < desc->n_deferred; i++)
        n_drefs += ((const cuda_hplan *)desc->deferred[i])->k.n_checks;
    /* items: the checks, the deferred checks (a block each that reduces its partials), then the
     * ALWAYS copies (the others run in the last block) */
    const int n_fin = nc + n_drefs, items = n_fin + always;
    CUDA_ARG(items > 0, "health_plan: nothing to check or copy");
    /* per item: blocks; per check: staged partials' offset, whether one block reduces them, where
     * its partials are */
    int *nb = (int *)calloc((size_t)items + 3 * (size_t)n_fin + 1, sizeof(int));
    dqn_hcopy *order = (dqn_hcopy *)malloc(sizeof(dqn_hcopy) * (size_t)(desc->n_copies + 1));
    deferred_check *drefs =
        (deferred_check *)malloc(sizeof(deferred_check) * (size_t)(n_drefs + 1));
    check_record *fins = (check_record *)calloc((size_t)n_fin + 1, sizeof(check_record));
    if (!nb || !order || !drefs || !fins) {
        free(nb);
        free(order);
        free(drefs);
        free(fins);
        return DQN_ERR(DQN_ERR_NOMEM, "health plan");
    }
    int *soff = nb + items, *big = soff + n_fin, *raw = big + n_fin;
    n_drefs = 0;
    for (int i = 0; i < desc->n_deferred; i++) {
        const cuda_hplan *q = (const cuda_hplan *)desc->deferred[i];
        for (int j = 0; j < q->k.n_checks; j++) {
            deferred_check r = {q->k.parts + q->soff_host[j], q->nb_host[j], 0};
            const dqn_hcheck *ck = &q->checks_host[j];
            check_record f = {ck->n, ck->slot, ck->isv_scale, ck->isv_stat, ck->stat, 0, 1};
            fins[nc + n_drefs] = f;
            drefs[n_drefs++] = r;
        }
    }
    int ncp = 0;
    for (int i = 0; i < desc->n_copies; i++)
        if (desc->copies[i].when == DQN_HCOPY_ALWAYS) order[ncp++] = desc->copies[i];
    for (int i = 0; i < desc->n_copies; i++)
        if (desc->copies[i].when != DQN_HCOPY_ALWAYS) order[ncp++] = desc->copies[i];
    /* a hosted plan's check: a partial for each block of a thread-an-element launch over it */
    int blocks = 0;
    for (int it = 0; it < items; it++) {
        nb[it] = it == 0 && ad   ? blocks_for(c, ad->n, H_ADAM_ELEMS_PER_THREAD)
                 : it < nc       ? desc->hosted ? (int)cuda_blocks(c, desc->checks[it].n, HT)
                                                : blocks_for(c, desc->checks[it].n,
                                                             H_ELEMS_PER_THREAD)
                 : it < n_fin    ? 1
                                 : blocks_for(c, order[it - n_fin].bytes / 4, H_ELEMS_PER_THREAD);
        blocks += nb[it];
    }
    /* the checks with the most partials reduce them first where the stage would not hold them */
    size_t staged = (size_t)n_drefs, tasks = 0;
    for (int j = 0; j < nc; j++) {
        staged += (size_t)nb[j];
        tasks += (size_t)tasks_for(nb[j]);
    }
    const size_t fin_bytes = sizeof(check_record) * (size_t)n_fin;
    while (!desc->defer &&
           sizeof(scan_partial) * staged + sizeof(warp_task) * tasks + fin_bytes > budget) {
        int pick = -1;
        for (int j = 0; j < nc; j++)
            if (!big[j] && nb[j] > 1 && (pick < 0 || nb[j] > nb[pick])) pick = j;
        if (pick < 0) break;
        big[pick] = 1;
        staged -= (size_t)nb[pick] - 1;
        tasks -= (size_t)tasks_for(nb[pick]);
    }
    size_t smem = desc->defer ? 0 : sizeof(scan_partial) * staged + sizeof(warp_task) * tasks;
    const int fins_staged = !desc->defer && smem + fin_bytes <= budget;
    if (fins_staged) smem += fin_bytes;
    if (smem > budget) {
        free(nb);
        free(order);
        free(drefs);
        free(fins);
        return DQN_ERR(DQN_ERR_ARG, "health_plan: %d checks with the deferred ones: more than the "
                                    "last block can stage", n_fin);
    }
    int n_parts = 0;
    for (int j = 0; j < n_fin; j++) {
        soff[j] = n_parts;
        n_parts += j < nc && !big[j] ? nb[j] : 1;
    }
    const int n_staged = n_parts;
    for (int j = 0; j < nc; j++)
        if (big[j]) {
            raw[j] = n_parts;
            n_parts += nb[j];
        }
    int slot_hi = 0, isv_hi = 0;
    for (int j = 0; j < n_fin; j++) {
        check_record *f = &fins[j];
        if (j < nc) {
            const dqn_hcheck *ck = &desc->checks[j];
            check_record g = {ck->n, ck->slot, ck->isv_scale, ck->isv_stat, ck->stat, 0, 0};
            *f = g;
        }
        f->soff = soff[j];
        f->nst = j < nc && !big[j] ? nb[j] : 1;
        slot_hi = f->slot + 1 > slot_hi ? f->slot + 1 : slot_hi;
        isv_hi = f->isv_scale + 1 > isv_hi ? f->isv_scale + 1 : isv_hi;
        if (f->stat != DQN_HSTAT_NONE)
            isv_hi = f->isv_stat + 1 > isv_hi ? f->isv_stat + 1 : isv_hi;
    }
    int cur_hi = 0;
    if (desc->commit) {
        cur_hi = desc->n_slots > 0 ? desc->n_slots : 0;
        if (desc->rollback_slot + 1 > cur_hi) cur_hi = desc->rollback_slot + 1;
    }

    size_t o_blocks = 0, o_copies = align16(o_blocks + sizeof(block_share) * (size_t)blocks);
    size_t o_drefs = align16(o_copies + sizeof(dqn_hcopy) * (size_t)ncp);
    size_t o_fins = align16(o_drefs + sizeof(deferred_check) * (size_t)n_drefs);
    size_t o_tasks = align16(o_fins + sizeof(check_record) * (size_t)n_fin);
    size_t o_parts = align16(o_tasks + sizeof(warp_task) * tasks);
    size_t o_done = align16(o_parts + sizeof(scan_partial) * (size_t)n_parts);
    size_t o_idone = align16(o_done + 16);
    size_t total = align16(o_idone + sizeof(unsigned) * (size_t)(nc + 1));
    cuda_hplan *p = (cuda_hplan *)calloc(1, sizeof *p);
    unsigned char *host = (unsigned char *)calloc(1, total);
    dqn_status s = DQN_OK;
    if (!p || !host) s = DQN_ERR(DQN_ERR_NOMEM, "health plan");
    if (s == DQN_OK) {
        p->checks_host = (dqn_hcheck *)malloc(sizeof(dqn_hcheck) * (size_t)(nc + 1));
        p->soff_host = (int *)malloc(sizeof(int) * 2 * (size_t)(nc + 1));
        if (!p->checks_host || !p->soff_host) s = DQN_ERR(DQN_ERR_NOMEM, "health plan");
    }
    if (s == DQN_OK) {
        p->nb_host = p->soff_host + nc + 1;
        if (nc) memcpy(p->checks_host, desc->checks, sizeof(dqn_hcheck) * (size_t)nc);
        for (int j = 0; j < nc; j++) {
            p->soff_host[j] = big[j] ? raw[j] : soff[j];
            p->nb_host[j] = nb[j];
        }
        /* the deferred checks' blocks first: their partials are ready at the start */
        block_share *hbk = (block_share *)(host + o_blocks);
        int b = 0;
        for (int r = 0; r < n_drefs; r++) {
            block_share h;
            memset(&h, 0, sizeof h);
            h.item = nc + r;
            h.nparts = 1;
            h.pidx = -1;
            h.red = soff[nc + r];
            hbk[b++] = h;
        }
        for (int it = 0; it < items; it++) {
            if (it >= nc && it < n_fin) continue;
            for (int part = 0; part < nb[it]; part++) {
                block_share h;
                memset(&h, 0, sizeof h);
                if (it < nc) h.c = desc->checks[it];
                h.item = it;
                h.part = part;
                h.nparts = nb[it];
                h.pidx = it >= nc ? -1 : big[it] ? raw[it] + part : soff[it] + part;
                h.red = it < nc && big[it] ? soff[it] : -1;
                hbk[b++] = h;
            }
        }
        warp_task *tk = (warp_task *)(host + o_tasks);
        int nt = 0;
        for (int j = 0; j < nc; j++)
            for (int w = 0; !big[j] && w < tasks_for(nb[j]); w++) {
                warp_task q = {soff[j], nb[j], w, 0};
                tk[nt++] = q;
            }
        if (ncp) memcpy(host + o_copies, order, sizeof(dqn_hcopy) * (size_t)ncp);
        if (n_drefs) memcpy(host + o_drefs, drefs, sizeof(deferred_check) * (size_t)n_drefs);
        if (n_fin) memcpy(host + o_fins, fins, sizeof(check_record) * (size_t)n_fin);
        cudaError_t e = cudaMalloc(&p->dev, total);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(p->dev, host, total, cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            s = DQN_ERR(DQN_ERR_BACKEND, "health plan (%zu bytes): %s%s", total,
                        cudaGetErrorString(e), cuda_hint(e));
    }
    free(nb);
    free(order);
    free(drefs);
    free(fins);
    free(host);
    if (s != DQN_OK) {
        cuda_health_plan_free(be, p);
        return s;
    }
    unsigned char *d = (unsigned char *)p->dev;
    p->blocks = blocks;
    p->smem = smem;
    p->k.blk = desc->blk;
    p->k.step = desc->step;
    p->k.guard_scale = desc->guard_scale;
    p->k.guard_floor = desc->guard_floor;
    p->k.decay = desc->decay;
    p->k.guard_mode = desc->guard_mode;
    p->k.commit = desc->commit;
    p->k.n_slots = desc->n_slots;
    p->k.rollback_slot = desc->rollback_slot;
    p->k.defer = desc->defer;
    p->k.step_after = desc->step_after;
    p->k.has_adam = ad != NULL;
    if (ad) p->k.adam = *ad;
    p->k.blocks = (const block_share *)(d + o_blocks);
    p->k.n_checks = nc;
    p->k.n_fin = n_fin;
    p->k.drefs = (const deferred_check *)(d + o_drefs);
    /* the kernel sees the ALWAYS copies as items and runs the rest (n_copies in all) in commit */
    p->k.copies = (const dqn_hcopy *)(d + o_copies);
    p->k.n_copies = ncp;
    p->k.fins = (const check_record *)(d + o_fins);
    p->k.tasks = (const warp_task *)(d + o_tasks);
    p->k.n_staged = desc->defer ? 0 : n_staged;
    p->k.n_tasks = desc->defer ? 0 : (int)tasks;
    p->k.fins_staged = fins_staged;
    p->k.slot_hi = slot_hi;
    p->k.isv_hi = isv_hi;
    p->k.cur_hi = cur_hi;
    p->k.parts = (scan_partial *)(d + o_parts);
    p->k.done = (unsigned *)(d + o_done);
    p->k.item_done = (unsigned *)(d + o_idone);
    *plan = p;
    return DQN_OK;
}

void cuda_health_plan_free(dqn_backend *be, void *plan) {
    (void)be;
    cuda_hplan *p = (cuda_hplan *)plan;
    if (!p) return;
    if (p->dev) cudaFree(p->dev);
    free(p->checks_host);
    free(p->soff_host);
    free(p);
}

void cuda_health_hosted(const void *plan, cuda_hosted *out, int max, int *n) {
    const cuda_hplan *p = (const cuda_hplan *)plan;
    *n = 0;
    if (!p || !p->k.defer || p->k.n_copies || p->k.has_adam || p->k.n_checks > max) return;
    for (int j = 0; j < p->k.n_checks; j++) {
        const dqn_hcheck *c = &p->checks_host[j];
        cuda_hosted h = {c->x, c->n, p->k.parts + p->soff_host[j], p->nb_host[j],
                         c->guard && p->k.guard_mode,
                         &p->k.blk->isv[c->isv_bound], p->k.guard_scale, p->k.guard_floor};
        out[j] = h;
    }
    *n = p->k.n_checks;
}

dqn_status cuda_health_check(dqn_backend *be, const void *plan) {
    cuda_impl *c = cuda_of(be);
    const cuda_hplan *p = (const cuda_hplan *)plan;
    CUDA_ARG(p, "health_check: NULL plan");
    KLAUNCH(c, k_health, p->blocks, HT, p->smem, p->k);
    return DQN_OK;
}

__global__ void k_fault(float *x, size_t n, const uint64_t *step, uint64_t at, int kind) {
    KERNEL_PROLOGUE();
    if (*step != at) return;
    x[n / 2] = fault_value(kind);
}

dqn_status cuda_health_fault(dqn_backend *be, float *x, size_t n, const uint64_t *step,
                                        uint64_t at, int kind) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(x && step && n > 0 && kind >= 1 && kind <= 3, "health_fault: x %p, n %zu, kind %d",
             (void *)x, n, kind);
    KLAUNCH(c, k_fault, 1, 1, 0, x, n, step, at, kind);
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
