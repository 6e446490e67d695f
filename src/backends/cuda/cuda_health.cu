/* The numerical-health ops on the GPU (semantics: backends/backend.h, health_check; reference:
 * cpu/cpu_health.c). A plan is one kernel launch: its blocks split the checks' and the copies'
 * elements among them (a fixed assignment made when the plan is built), each block writes its
 * partial statistics, and the last block to finish (an integer counter, no float atomics) reduces
 * each check's partials in block order, does the bookkeeping of every check in plan order and, in
 * a commit plan, resolves the update. No host round trip: it runs inside the captured update. */
#include "backends/cuda/cuda_common.cuh"

#include <math.h>

#define HT 256                     /* threads per block */
#define H_ELEMS_PER_THREAD 8       /* the least work a block is given */
#define H_MAX_BLOCKS_PER_ITEM 4    /* x the multiprocessors */

typedef struct {
    uint32_t nonfinite, nan, guarded;
    float bound;                   /* the bound the block used (read before any ISV update) */
    float maxabs, first_value;
    uint64_t first_index;
    double sumsq, sumabs;
} hpart;

typedef struct {
    dqn_health_block *blk;
    const uint64_t *step;
    float guard_scale, guard_floor, decay;
    int guard_mode, commit, n_slots, rollback_slot;
    const dqn_hcheck *checks;
    int n_checks;
    const dqn_hcopy *copies;
    int n_copies;
    const int *block_item;         /* [blocks]: item (checks first, then ALWAYS copies) */
    const int *item_first;         /* [items + 1]: first block of each item */
    hpart *parts;                  /* [blocks] */
    unsigned *done;
} hparams;

typedef struct {
    hparams k;
    int blocks;
    void *dev;                     /* one allocation holding everything the kernel reads */
} cuda_hplan;

/* ---- block reductions in a fixed tree (deterministic) ---- */

__device__ static double red_sum_d(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned o = HT / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__device__ static uint32_t red_sum_u(uint32_t v, uint32_t *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned o = HT / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    uint32_t r = sh[0];
    __syncthreads();
    return r;
}

__device__ static float red_max_f(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned o = HT / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + o]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

/* the smallest index and the value at it */
__device__ static void red_min_idx(uint64_t *idx, float *val, uint64_t *shi, float *shv) {
    shi[threadIdx.x] = *idx;
    shv[threadIdx.x] = *val;
    __syncthreads();
    for (unsigned o = HT / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o && shi[threadIdx.x + o] < shi[threadIdx.x]) {
            shi[threadIdx.x] = shi[threadIdx.x + o];
            shv[threadIdx.x] = shv[threadIdx.x + o];
        }
        __syncthreads();
    }
    *idx = shi[0];
    *val = shv[0];
    __syncthreads();
}

typedef struct {
    double d[HT];
    uint64_t i[HT];
    float f[HT];
    uint32_t u[HT];
    float fv[HT];
} hshared;

__device__ static void block_copy(const dqn_hcopy *c, int part, int nparts) {
    size_t words = c->bytes / 4;
    const uint32_t *src = (const uint32_t *)c->src;
    uint32_t *dst = (uint32_t *)c->dst;
    for (size_t i = (size_t)part * HT + threadIdx.x; i < words; i += (size_t)nparts * HT)
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

__global__ void __launch_bounds__(HT) k_health(hparams k) {
    __shared__ hshared sh;
    __shared__ bool last;
    __shared__ int decide[3];   /* event slot (-1), freeze, rollback */
    const int b = blockIdx.x, item = k.block_item[b];
    const int part = b - k.item_first[item], nparts = k.item_first[item + 1] - k.item_first[item];
    dqn_health_block *blk = k.blk;

    if (item >= k.n_checks) {
        block_copy(&k.copies[item - k.n_checks], part, nparts);
    } else {
        const dqn_hcheck c = k.checks[item];
        const float bound = fmaxf(k.guard_scale * blk->isv[c.isv_bound], k.guard_floor);
        const bool guard = c.guard && k.guard_mode;
        uint32_t nonfinite = 0, nan_count = 0, guarded = 0;
        uint64_t first = DQN_HEALTH_NO_INDEX;
        float first_value = 0.0f, maxabs = 0.0f;
        double sumsq = 0.0, sumabs = 0.0;
        for (size_t i = (size_t)part * HT + threadIdx.x; i < c.n; i += (size_t)nparts * HT) {
            float v = c.x[i];
            if (!isfinite(v)) {
                nonfinite++;
                if (isnan(v)) nan_count++;
                if (first == DQN_HEALTH_NO_INDEX) {   /* a thread's indices only grow */
                    first = i;
                    first_value = v;
                }
                if (guard) {
                    c.x[i] = 0.0f;
                    guarded++;
                }
                continue;
            }
            float a = fabsf(v);
            maxabs = fmaxf(maxabs, a);
            sumsq += (double)v * (double)v;
            sumabs += (double)a;
            if (guard && a > bound) {
                c.x[i] = copysignf(bound, v);
                guarded++;
            }
        }
        hpart p;
        p.nonfinite = red_sum_u(nonfinite, sh.u);
        p.nan = red_sum_u(nan_count, sh.u);
        p.guarded = red_sum_u(guarded, sh.u);
        p.bound = bound;
        p.maxabs = red_max_f(maxabs, sh.f);
        p.sumsq = red_sum_d(sumsq, sh.d);
        p.sumabs = red_sum_d(sumabs, sh.d);
        red_min_idx(&first, &first_value, sh.i, sh.fv);
        p.first_index = first;
        p.first_value = first_value;
        if (threadIdx.x == 0) k.parts[b] = p;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(k.done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();

    /* the last block: every check's totals, in plan order */
    for (int ci = 0; ci < k.n_checks; ci++) {
        const dqn_hcheck c = k.checks[ci];
        const int b0 = k.item_first[ci], nb = k.item_first[ci + 1] - b0;
        uint32_t nf = 0, nn = 0, gd = 0;
        float mx = 0.0f, fv = 0.0f;
        uint64_t fi = DQN_HEALTH_NO_INDEX;
        double sq = 0.0, sa = 0.0;
        for (int j = threadIdx.x; j < nb; j += HT) {   /* thread t: partials t, t + HT, ... */
            const volatile hpart *q = (const volatile hpart *)&k.parts[b0 + j];
            nf += q->nonfinite;
            nn += q->nan;
            gd += q->guarded;
            mx = fmaxf(mx, q->maxabs);
            sq += q->sumsq;
            sa += q->sumabs;
            if (q->first_index < fi) {
                fi = q->first_index;
                fv = q->first_value;
            }
        }
        nf = red_sum_u(nf, sh.u);
        nn = red_sum_u(nn, sh.u);
        gd = red_sum_u(gd, sh.u);
        mx = red_max_f(mx, sh.f);
        sq = red_sum_d(sq, sh.d);
        sa = red_sum_d(sa, sh.d);
        red_min_idx(&fi, &fv, sh.i, sh.fv);
        if (threadIdx.x == 0) {
            const float bound = ((const volatile hpart *)&k.parts[b0])->bound;
            size_t finite = c.n - nf;
            dqn_hslot_cur *cur = &blk->cur[c.slot];
            cur->nonfinite = nf;
            cur->nan = nn;
            cur->guarded = gd;
            cur->maxabs = mx;
            cur->rms = finite ? (float)sqrt(sq / (double)finite) : 0.0f;
            cur->meanabs = finite ? (float)(sa / (double)finite) : 0.0f;
            cur->bound = bound;
            cur->first_index = fi;
            cur->first_value = fv;
            cur->event = nn ? DQN_EVENT_NAN
                         : nf ? (fv > 0 ? DQN_EVENT_POSINF : DQN_EVENT_NEGINF)
                         : mx > bound ? DQN_EVENT_RANGE
                                      : DQN_EVENT_NONE;
            dqn_hslot_tot *tot = &blk->tot[c.slot];
            tot->nonfinite += nf;
            tot->guarded += gd;
            if (mx > tot->maxabs) tot->maxabs = mx;
            if (cur->event) {
                if (tot->events == 0) tot->first_event_update = (int64_t)*k.step;
                tot->events++;
                if (c.skip && k.guard_mode) blk->skip = 1;
            } else {
                if (c.isv_scale >= 0) isv_feed(&blk->isv[c.isv_scale], mx, k.decay);
                if (c.isv_stat >= 0 && c.stat != DQN_HSTAT_NONE)
                    isv_feed(&blk->isv[c.isv_stat], c.stat == DQN_HSTAT_RMS ? cur->rms : cur->meanabs,
                             k.decay);
            }
        }
        __syncthreads();
    }

    if (k.commit) {
        if (threadIdx.x == 0) {
            int first = -1, any_guarded = 0;
            for (int s = 0; s < k.n_slots; s++) {
                if (first < 0 && blk->cur[s].event) first = s;
                if (blk->cur[s].guarded) any_guarded = 1;
            }
            decide[0] = first;
            decide[1] = first >= 0 && blk->event.slot < 0;
            decide[2] = k.guard_mode && k.rollback_slot >= 0 && blk->cur[k.rollback_slot].event;
            if (decide[1]) {
                const dqn_hslot_cur *c = &blk->cur[first];
                blk->event.slot = first;
                blk->event.kind = c->event;
                blk->event.update = (int64_t)*k.step;
                blk->event.value = c->event == DQN_EVENT_RANGE ? c->maxabs : c->first_value;
                blk->event.bound = c->bound;
                blk->event.count = c->nonfinite;
                blk->event.index = c->first_index;
                blk->frozen = 1;
            }
            if (decide[2]) blk->rolled_back++;
            if (blk->skip || decide[2]) blk->skipped++;
            if (any_guarded) blk->guarded_updates++;
            blk->updates++;
            blk->skip = 0;
        }
        __syncthreads();
        /* rare (the first event of a run, a rollback): the one block copies */
        for (int i = 0; i < k.n_copies; i++) {
            const dqn_hcopy *c = &k.copies[i];
            if ((c->when == DQN_HCOPY_ON_FREEZE && decide[1]) ||
                (c->when == DQN_HCOPY_ON_ROLLBACK && decide[2]))
                block_copy(c, 0, 1);
        }
    }
    if (threadIdx.x == 0) *k.done = 0;
}

static int blocks_for(const cuda_impl *c, size_t n) {
    size_t want = (n + (size_t)HT * H_ELEMS_PER_THREAD - 1) / ((size_t)HT * H_ELEMS_PER_THREAD);
    size_t cap = (size_t)c->sm_count * H_MAX_BLOCKS_PER_ITEM;
    if (want > cap) want = cap;
    return want ? (int)want : 1;
}

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

dqn_status cuda_health_plan(dqn_backend *be, const dqn_hplan_desc *desc, void **plan) {
    cuda_impl *c = cuda_of(be);
    *plan = NULL;
    CUDA_ARG(desc && desc->blk && desc->step, "health_plan: NULL block or step");
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
    /* items: the checks, then the ALWAYS copies (the others run in the last block) */
    int items = desc->n_checks + always;
    CUDA_ARG(items > 0, "health_plan: nothing to check or copy");
    int *first = (int *)malloc(sizeof(int) * (size_t)(items + 1));
    dqn_hcopy *order = (dqn_hcopy *)malloc(sizeof(dqn_hcopy) * (size_t)(desc->n_copies + 1));
    if (!first || !order) {
        free(first);
        free(order);
        return DQN_ERR(DQN_ERR_NOMEM, "health plan");
    }
    int nc = 0;
    for (int i = 0; i < desc->n_copies; i++)
        if (desc->copies[i].when == DQN_HCOPY_ALWAYS) order[nc++] = desc->copies[i];
    for (int i = 0; i < desc->n_copies; i++)
        if (desc->copies[i].when != DQN_HCOPY_ALWAYS) order[nc++] = desc->copies[i];
    int blocks = 0;
    for (int it = 0; it < items; it++) {
        first[it] = blocks;
        blocks += it < desc->n_checks ? blocks_for(c, desc->checks[it].n)
                                      : blocks_for(c, order[it - desc->n_checks].bytes / 4);
    }
    first[items] = blocks;
    int *owner = (int *)malloc(sizeof(int) * (size_t)blocks);
    if (!owner) {
        free(first);
        free(order);
        return DQN_ERR(DQN_ERR_NOMEM, "health plan");
    }
    for (int it = 0; it < items; it++)
        for (int bb = first[it]; bb < first[it + 1]; bb++) owner[bb] = it;

    size_t o_checks = 0, o_copies = align16(o_checks + sizeof(dqn_hcheck) * (size_t)desc->n_checks);
    size_t o_owner = align16(o_copies + sizeof(dqn_hcopy) * (size_t)nc);
    size_t o_first = align16(o_owner + sizeof(int) * (size_t)blocks);
    size_t o_parts = align16(o_first + sizeof(int) * (size_t)(items + 1));
    size_t o_done = align16(o_parts + sizeof(hpart) * (size_t)blocks);
    size_t total = o_done + 16;
    cuda_hplan *p = (cuda_hplan *)calloc(1, sizeof *p);
    unsigned char *host = (unsigned char *)calloc(1, total);
    dqn_status s = DQN_OK;
    if (!p || !host) s = DQN_ERR(DQN_ERR_NOMEM, "health plan");
    if (s == DQN_OK) {
        if (desc->n_checks) memcpy(host + o_checks, desc->checks, sizeof(dqn_hcheck) * desc->n_checks);
        if (nc) memcpy(host + o_copies, order, sizeof(dqn_hcopy) * (size_t)nc);
        memcpy(host + o_owner, owner, sizeof(int) * (size_t)blocks);
        memcpy(host + o_first, first, sizeof(int) * (size_t)(items + 1));
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
    free(host);
    if (s != DQN_OK) {
        if (p && p->dev) cudaFree(p->dev);
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
    *plan = p;
    return DQN_OK;
}

void cuda_health_plan_free(dqn_backend *be, void *plan) {
    (void)be;
    cuda_hplan *p = (cuda_hplan *)plan;
    if (!p) return;
    if (p->dev) cudaFree(p->dev);
    free(p);
}

dqn_status cuda_health_check(dqn_backend *be, const void *plan) {
    cuda_impl *c = cuda_of(be);
    const cuda_hplan *p = (const cuda_hplan *)plan;
    CUDA_ARG(p, "health_check: NULL plan");
    k_health<<<p->blocks, HT, 0, c->stream>>>(p->k);
    LAUNCH_CHECK();
    return DQN_OK;
}

__global__ void k_fault(float *x, size_t n, const uint64_t *step, uint64_t at, int kind) {
    if (*step != at) return;
    x[n / 2] = kind == 1 ? __int_as_float(0x7fc00000) : kind == 2 ? __int_as_float(0x7f800000) : 1e30f;
}

dqn_status cuda_health_fault(dqn_backend *be, float *x, size_t n, const uint64_t *step,
                                        uint64_t at, int kind) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(x && step && n > 0 && kind >= 1 && kind <= 3, "health_fault: x %p, n %zu, kind %d",
             (void *)x, n, kind);
    k_fault<<<1, 1, 0, c->stream>>>(x, n, step, at, kind);
    LAUNCH_CHECK();
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
