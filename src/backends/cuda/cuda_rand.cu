/* Random draws and the replay gathers. The draws call the same Philox header as the CPU, with the
 * counter base (*step) * stride read on the device, so a replayed graph draws fresh numbers that
 * equal the CPU's for the same step. */
#include "backends/cuda/cuda_common.cuh"
#include "dqn_philox.h"

__global__ void k_rand_uniform(float *out, size_t n, uint64_t seed, uint32_t stream,
                               const uint64_t *step, uint64_t stride) {
    KERNEL_PROLOGUE();
    uint64_t base = *step * stride;
    GRID_STRIDE(j, n) out[j] = dqn_philox_uniform(seed, stream, base + j);
}

__global__ void k_rand_index(int32_t *idx, size_t n, uint64_t seed, uint32_t stream,
                             const uint64_t *step, uint64_t stride, const uint32_t *size) {
    KERNEL_PROLOGUE();
    uint64_t base = *step * stride;
    uint32_t sz = *size;
    GRID_STRIDE(j, n) idx[j] = (int32_t)dqn_philox_below(seed, stream, base + j, sz);
}

__global__ void k_gather_f32(const float *src, const int32_t *idx, float *dst, size_t n, int row_len) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, n * (size_t)row_len) {
        size_t j = e / (size_t)row_len, k = e % (size_t)row_len;
        dst[e] = src[(size_t)idx[j] * (size_t)row_len + k];
    }
}

__global__ void k_gather_i32(const int32_t *src, const int32_t *idx, int32_t *dst, size_t n,
                             int row_len) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, n * (size_t)row_len) {
        size_t j = e / (size_t)row_len, k = e % (size_t)row_len;
        dst[e] = src[(size_t)idx[j] * (size_t)row_len + k];
    }
}

/* One item per element of a sampled row (obs, next_obs, act, R, disc); every item recomputes its
 * row's index (ten Philox rounds are cheaper than a second launch). Item e of W per row. */
__device__ __forceinline__ void sample_item(const dqn_sample_src &s, const dqn_sample_dst &d,
                                            size_t e, uint64_t seed, uint64_t base, uint32_t sz) {
    size_t o = (size_t)s.obs_dim, A = (size_t)s.D, W = 2 * o + A + 2;
    size_t j = e / W, k = e % W;
    size_t r = s.idx ? (size_t)s.idx[j] : dqn_philox_below(seed, DQN_STREAM_REPLAY, base + j, sz);
    if (k < o) d.x[j * o + k] = s.obs[r * o + k];
    else if (k < 2 * o) d.xn[j * o + (k - o)] = s.next_obs[r * o + (k - o)];
    else if (k < 2 * o + A) d.act[j * A + (k - 2 * o)] = s.act[r * A + (k - 2 * o)];
    else if (k == 2 * o + A) {
        d.R[j] = s.R[r];
        if (d.idx != s.idx) d.idx[j] = (int32_t)r;
    } else d.disc[j] = s.disc[r];
}

/* item e of the draws laid end to end; dr.n[k] = 0 past dr.count */
__device__ __forceinline__ void draw_item(const dqn_draws &dr, size_t e, uint64_t seed, uint64_t t) {
    size_t j = e;
    int k = 0;
    while (j >= dr.n[k]) j -= dr.n[k++];
    dr.out[k][j] = dqn_philox_uniform(seed, dr.stream[k], t * dr.stride[k] + j);
}

static size_t sample_items(const dqn_sample_src *s, int B) {
    return (size_t)B * (2 * (size_t)s->obs_dim + (size_t)s->D + 2);
}

__global__ void k_sample_batch(dqn_sample_src s, dqn_sample_dst d, size_t B, uint64_t seed,
                               const uint64_t *step) {
    KERNEL_PROLOGUE();
    uint64_t base = *step * (uint64_t)B;
    uint32_t sz = *s.size;
    GRID_STRIDE(e, B * (2 * (size_t)s.obs_dim + (size_t)s.D + 2)) sample_item(s, d, e, seed, base, sz);
}

__global__ void k_rand_uniform_multi(dqn_draws dr, size_t total, uint64_t seed, const uint64_t *step) {
    KERNEL_PROLOGUE();
    uint64_t t = *step;
    GRID_STRIDE(e, total) draw_item(dr, e, seed, t);
}

/* the sample's items first, then the draws' */
__global__ void k_sample_draws(dqn_sample_src s, dqn_sample_dst d, size_t B, size_t n_sample,
                               dqn_draws dr, size_t n_draws, uint64_t seed, const uint64_t *step) {
    KERNEL_PROLOGUE();
    uint64_t t = *step, base = t * (uint64_t)B;
    uint32_t sz = *s.size;
    GRID_STRIDE(e, n_sample + n_draws) {
        if (e < n_sample) sample_item(s, d, e, seed, base, sz);
        else draw_item(dr, e - n_sample, seed, t);
    }
}

/* the draws with n[k] = 0 past count, and their total */
static dqn_status draws_of(const char *op, const dqn_draws *d, dqn_draws *out, size_t *total) {
    CUDA_ARG(d->count >= 0 && d->count <= DQN_MAX_DRAWS, "%s: count = %d, allowed 0..%d", op,
             d->count, DQN_MAX_DRAWS);
    *out = *d;
    *total = 0;
    for (int k = 0; k < DQN_MAX_DRAWS; k++) {
        if (k >= d->count) out->n[k] = 0;
        *total += out->n[k];
    }
    return DQN_OK;
}

dqn_status cuda_sample_batch(dqn_backend *be, const dqn_sample_src *src, const dqn_sample_dst *dst,
                             int B, uint64_t seed, const uint64_t *step) {
    CUDA_ARG(src && dst && step && src->size, "sample_batch: NULL argument");
    CUDA_ARG(B > 0 && src->obs_dim > 0 && src->D > 0, "sample_batch: B=%d obs_dim=%d D=%d", B,
             src->obs_dim, src->D);
    LAUNCH_1D(be, k_sample_batch, sample_items(src, B), *src, *dst, (size_t)B, seed, step);
}

dqn_status cuda_rand_uniform_multi(dqn_backend *be, const dqn_draws *d, uint64_t seed,
                                   const uint64_t *step) {
    CUDA_ARG(d && step, "rand_uniform_multi: NULL argument");
    dqn_draws dr;
    size_t total = 0;
    DQN_TRY(draws_of("rand_uniform_multi", d, &dr, &total));
    LAUNCH_1D(be, k_rand_uniform_multi, total, dr, total, seed, step);
}

dqn_status cuda_sample_draws(dqn_backend *be, const dqn_sample_src *src, const dqn_sample_dst *dst,
                             int B, const dqn_draws *d, uint64_t seed, const uint64_t *step) {
    CUDA_ARG(src && dst && d && step && src->size, "sample_draws: NULL argument");
    CUDA_ARG(B > 0 && src->obs_dim > 0 && src->D > 0, "sample_draws: B=%d obs_dim=%d D=%d", B,
             src->obs_dim, src->D);
    dqn_draws dr;
    size_t total = 0;
    DQN_TRY(draws_of("sample_draws", d, &dr, &total));
    size_t ns = sample_items(src, B);
    LAUNCH_1D(be, k_sample_draws, ns + total, *src, *dst, (size_t)B, ns, dr, total, seed, step);
}

dqn_status cuda_rand_uniform(dqn_backend *be, float *out, size_t n, uint64_t seed, uint32_t stream,
                             const uint64_t *step, uint64_t stride) {
    CUDA_ARG(step, "rand_uniform: step is NULL");
    LAUNCH_1D(be, k_rand_uniform, n, out, n, seed, stream, step, stride);
}

dqn_status cuda_rand_index(dqn_backend *be, int32_t *idx, size_t n, uint64_t seed, uint32_t stream,
                           const uint64_t *step, uint64_t stride, const uint32_t *size) {
    CUDA_ARG(step && size, "rand_index: step and size must be non-NULL");
    LAUNCH_1D(be, k_rand_index, n, idx, n, seed, stream, step, stride, size);
}

dqn_status cuda_gather_f32(dqn_backend *be, const float *src, const int32_t *idx, float *dst, int n,
                           int row_len) {
    CUDA_ARG(n >= 0 && row_len >= 0, "gather_f32: bad shape n=%d row_len=%d", n, row_len);
    LAUNCH_1D(be, k_gather_f32, (size_t)n * (size_t)row_len, src, idx, dst, (size_t)n, row_len);
}

dqn_status cuda_gather_i32(dqn_backend *be, const int32_t *src, const int32_t *idx, int32_t *dst,
                           int n, int row_len) {
    CUDA_ARG(n >= 0 && row_len >= 0, "gather_i32: bad shape n=%d row_len=%d", n, row_len);
    LAUNCH_1D(be, k_gather_i32, (size_t)n * (size_t)row_len, src, idx, dst, (size_t)n, row_len);
}
