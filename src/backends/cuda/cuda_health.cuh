/* The health checks' per-element scan and fixed-order reductions (semantics: backends/backend.h,
 * health_check), shared by the health kernel (cuda_health.cu) and by the ops that host a check:
 * an op given a hosted plan (health_block.h, `hosted`) scans and guards the buffer it reads as it
 * reads it, each of its blocks reduces its figures into a partial, and its last block reduces
 * those, in block order, into the one partial per check that the commit plan reads (as it reads
 * any deferred plan's). So a hosted check costs no node of its own. */
#ifndef DQN_CUDA_HEALTH_CUH
#define DQN_CUDA_HEALTH_CUH
#include "backends/cuda/cuda_common.cuh"

#define HT 256          /* threads per block of the health kernel */
#define HW (HT / 32)    /* warps per block: at most, in every kernel that reduces an hacc */

/* One block's figures for one check. */
typedef struct {
    uint32_t nonfinite, nan, guarded;
    float bound;                   /* the bound the block used (read before any ISV update) */
    float maxabs, first_value;
    uint64_t first_index;
    double sumsq, sumabs;
} hpart;

/* ---- reductions in a fixed order (deterministic) ---- */

typedef struct {
    uint32_t nonfinite, nan, guarded;
    float maxabs, first_value;
    uint64_t first_index;
    double sumsq, sumabs;
} hacc;

__device__ __forceinline__ void acc_init(hacc *a) {
    a->nonfinite = a->nan = a->guarded = 0;
    a->maxabs = 0.0f;
    a->first_value = 0.0f;
    a->first_index = DQN_HEALTH_NO_INDEX;
    a->sumsq = a->sumabs = 0.0;
}

/* b folds into a; b's indices are later than a's only by position, so the smaller index wins */
__device__ __forceinline__ void acc_merge(hacc *a, const hacc *b) {
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

__device__ __forceinline__ void acc_shfl_down(hacc *a, int o) {
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

__device__ __forceinline__ void warp_reduce(hacc *a) {
    for (int o = 16; o > 0; o >>= 1) acc_shfl_down(a, o);
}

/* the whole block's sum in thread 0 (warps in order, lanes in a fixed tree); sh[HW], blockDim.x a
 * multiple of 32 and at most HT; every thread of the block calls it */
__device__ __forceinline__ void block_reduce(hacc *a, hacc *sh) {
    warp_reduce(a);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) sh[w] = *a;
    __syncthreads();
    if (w == 0) {
        if (l < (int)(blockDim.x / 32)) *a = sh[l];
        else acc_init(a);
        warp_reduce(a);
    }
    __syncthreads();
}

__device__ __forceinline__ hpart to_part(const hacc *a, float bound) {
    hpart p;
    p.nonfinite = a->nonfinite;
    p.nan = a->nan;
    p.guarded = a->guarded;
    p.bound = bound;
    p.maxabs = a->maxabs;
    p.first_value = a->first_value;
    p.first_index = a->first_index;
    p.sumsq = a->sumsq;
    p.sumabs = a->sumabs;
    return p;
}

/* a partial's figures (Q: const hpart, or const volatile hpart for another block's partial
 * written during this launch) */
template <typename Q> __device__ __forceinline__ hacc part_acc_of(Q *q) {
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

/* another block's partial (volatile: written during this launch) */
__device__ __forceinline__ hacc part_acc_v(const hpart *p) {
    return part_acc_of((const volatile hpart *)p);
}

/* partials src[0, nb), written by this launch's blocks, in the order of a block reduction: the
 * sum in thread 0's *a (every thread of the block calls it) */
__device__ __forceinline__ void parts_reduce(const hpart *src, int nb, hacc *a, hacc *sh) {
    acc_init(a);
    for (int j = threadIdx.x; j < nb; j += blockDim.x) {
        const hacc b = part_acc_v(&src[j]);
        acc_merge(a, &b);
    }
    block_reduce(a, sh);
}

/* Element i of a check's buffer x, whose value v was just read: its figures into a; with guard,
 * NaN and +-Inf become 0 and finite values are clamped to +-bound, written back to x[i]. Returns
 * the value after the guard (v when it changed nothing). */
__device__ __forceinline__ float scan_one(hacc *a, float *x, size_t i, float v, float bound,
                                          bool guard) {
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
            return 0.0f;
        }
        return v;
    }
    float av = fabsf(v);
    a->maxabs = fmaxf(a->maxabs, av);
    a->sumsq += (double)v * (double)v;
    a->sumabs += (double)av;
    if (guard && av > bound) {
        const float c = copysignf(bound, v);
        x[i] = c;
        a->guarded++;
        return c;
    }
    return v;
}

/* ---- hosted checks: what the op that hosts a plan's checks passes to its kernel ---- */

/* a hosted plan has room for the partials of this many blocks a multiprocessor (cuda_blocks'
 * cap): an op's grid must not exceed it */
#define H_HOSTED_BLOCKS_PER_SM 16

typedef struct {
    float *x;                      /* the op's input buffer, written where the guard clamps */
    size_t n;
    int isv_bound;
    int guard;                     /* the check's guard, in guard mode */
} hhcheck;

typedef struct {
    const float *isv;              /* the health block's ISV (read: the bound) */
    float guard_scale, guard_floor;
    int n_checks, max_parts;
    hhcheck c[DQN_HOSTED_MAX_CHECKS];
    hpart *parts;                  /* [n_checks][max_parts]: the op's blocks' partials */
    hpart *out;                    /* [n_checks]: a check's one partial, which the commit reads */
} hhost;

/* check k's bound, as the health kernel reads it (k a constant: an index computed at run time
 * would copy the kernel's hhost argument to local memory) */
__device__ __forceinline__ float hosted_bound(const hhost &h, int k) {
    return fmaxf(h.guard_scale * h.isv[h.c[k].isv_bound], h.guard_floor);
}

/* shared room for the reductions of the hosted checks */
__device__ __forceinline__ hacc *hosted_sh(void) {
    __shared__ hacc sh[HW];
    return sh;
}

/* The end of a block's scan of the NC checks (NC = h.n_checks, which cuda_hosted verified): a[k]
 * (each thread's figures of check k) reduced over the block into the block's partial. Every
 * thread of the block calls it; thread 0 writes, so a fence of thread 0 after it publishes the
 * partials. */
template <int NC> __device__ __forceinline__ void hosted_block_end(const hhost &h, hacc (&a)[NC]) {
#pragma unroll
    for (int k = 0; k < NC; k++) {
        block_reduce(&a[k], hosted_sh());
        if (threadIdx.x == 0)
            h.parts[(size_t)k * h.max_parts + blockIdx.x] = to_part(&a[k], hosted_bound(h, k));
    }
}

/* In the op's last block (after its counter showed every block done, and a fence): the partials
 * of the nb blocks into each check's one partial. Every thread of the block calls it. */
template <int NC> __device__ __forceinline__ void hosted_finish(const hhost &h, int nb) {
#pragma unroll
    for (int k = 0; k < NC; k++) {
        hacc a;
        parts_reduce(h.parts + (size_t)k * h.max_parts, nb, &a, hosted_sh());
        if (threadIdx.x == 0) h.out[k] = to_part(&a, hosted_bound(h, k));
    }
}

/* The hosted plan `plan` (cuda_health.cu) for an op's kernel: its checks must be exactly the
 * buffers (x[k], n[k]), k < count, and the op's grid at most out->max_parts blocks. */
dqn_status cuda_hosted(const void *plan, int count, float *const *x, const size_t *n,
                       unsigned blocks, hhost *out);

#endif
