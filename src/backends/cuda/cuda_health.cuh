/* The health scans' per-block figures and their reductions in a fixed order, shared by the
 * health kernels (cuda_health.cu) and the ops that compute a deferred plan's scans as they write
 * its buffers (cuda_health_hosted). */
#ifndef DQN_CUDA_HEALTH_CUH
#define DQN_CUDA_HEALTH_CUH
#include <string.h>

#include "backends/cuda/cuda_common.cuh"

#define HT 256                     /* threads per block */
#define HW (HT / 32)               /* warps per block */
/* One block's figures for one check. */
typedef struct {
    uint32_t nonfinite, nan, guarded;
    float bound;                   /* the bound the block used (read before any ISV update) */
    float maxabs, first_value;
    uint64_t first_index;
    double sumsq, sumabs;
} scan_partial;

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

/* the whole block's sum in thread 0 (warps in order, lanes in a fixed tree); nw warps, sh[nw] */
__device__ static void block_reduce_w(hacc *a, hacc *sh, int nw) {
    warp_reduce(a);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) sh[w] = *a;
    __syncthreads();
    if (w == 0) {
        if (l < nw) *a = sh[l];
        else acc_init(a);
        warp_reduce(a);
    }
    __syncthreads();
}

/* the health kernels' block shape */
__device__ static void block_reduce(hacc *a, hacc *sh) { block_reduce_w(a, sh, HW); }

__device__ static scan_partial to_part(const hacc *a, float bound) {
    scan_partial p;
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

/* v's figures into a (a non-finite value counts and sets the first index; a finite one feeds the
 * max and the sums); returned clamped with guard (NaN and +-Inf to 0, beyond +-bound to it),
 * counted in guarded: for an op that stores the value itself */
__device__ static float scan_val(hacc *a, size_t i, float v, float bound, bool guard) {
    if (!isfinite(v)) {
        a->nonfinite++;
        if (isnan(v)) a->nan++;
        if (i < a->first_index) {
            a->first_index = i;
            a->first_value = v;
        }
        if (!guard) return v;
        a->guarded++;
        return 0.0f;
    }
    float av = fabsf(v);
    a->maxabs = fmaxf(a->maxabs, av);
    a->sumsq += (double)v * (double)v;
    a->sumabs += (double)av;
    if (!(guard && av > bound)) return v;
    a->guarded++;
    return copysignf(bound, v);
}

/* scan_val of x[i] = v, the clamp stored back in x where it changed the value */
__device__ static float scan_one(hacc *a, float *x, size_t i, float v, float bound, bool guard) {
    const float w = scan_val(a, i, v, bound, guard);
    if (guard && !(w == v)) x[i] = w;
    return w;
}

/* What an op needs to compute check j of a deferred plan itself: block b of its launch writes
 * parts[b] for b < nparts (its figures of x's n elements, in any split among the blocks), with
 * the bound max(guard_scale * *isv_bound, guard_floor) read before the commit feeds the ISV. */
typedef struct {
    float *x;
    size_t n;
    scan_partial *parts;
    int nparts, guard;             /* guard: clamps in place (a guard point in guard mode) */
    const float *isv_bound;
    float guard_scale, guard_floor;
} cuda_hosted;

__device__ static float hosted_bound(const cuda_hosted *h) {
    return dqn_guard_bound(h->guard_scale, *h->isv_bound, h->guard_floor);
}

/* Block b's figures a as partial b of h (b < h->nparts: a hosting launch's grid checks it) and
 * empty partials past the grid, by thread 0 after a block reduction. */
__device__ static void hosted_put(const cuda_hosted *h, const hacc *a, float bound) {
    hacc none;
    acc_init(&none);
    const scan_partial pt = to_part(a, bound), pe = to_part(&none, bound);
    for (int q = blockIdx.x; q < h->nparts; q += gridDim.x)
        h->parts[q] = q == (int)blockIdx.x ? pt : pe;
}

/* Whether check k can be hosted by a launch of grid blocks over x's n elements in which block b
 * holds elements only if b < min(grid, ceil(n / per_block)) (a grid-stride of per_block threads,
 * or blocks of rows): each such block must have a partial of its own. */
static inline bool hosted_fits(const cuda_hosted *k, const float *x, size_t n, unsigned grid,
                               size_t per_block) {
    const size_t used = (n + per_block - 1) / per_block;
    return k->x == x && k->n == n && k->nparts >= 1 &&
           (size_t)k->nparts >= (used < grid ? used : (size_t)grid);
}

/* A deferred plan's checks as cuda_hosted (at most max): *n of them, 0 if the plan has copies or
 * an optimizer step or is not deferred (an op then runs it as a kernel after itself). */
void cuda_health_hosted(const void *plan, cuda_hosted *out, int max, int *n);

/* *k from plan when it is one check of x's n elements that a launch of grid blocks can host
 * (hosted_fits); else *k zeroed (nparts 0) and false: the op runs the plan as a kernel */
static inline bool hosted_one(const void *plan, cuda_hosted *k, const float *x, size_t n,
                              unsigned grid, size_t per_block) {
    int nk = 0;
    if (plan) cuda_health_hosted(plan, k, 1, &nk);
    if (nk == 1 && n > 0 && hosted_fits(k, x, n, grid, per_block)) return true;
    memset(k, 0, sizeof *k);
    return false;
}

#endif
