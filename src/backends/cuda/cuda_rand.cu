/* Random draws and the replay gathers. The draws call the same Philox header as the CPU, with the
 * counter base (*step) * stride read on the device, so a replayed graph draws fresh numbers that
 * equal the CPU's for the same step. */
#include "backends/cuda/cuda_common.cuh"
#include "dqn_philox.h"

__global__ void k_rand_uniform(float *out, size_t n, uint64_t seed, uint32_t stream,
                               const uint64_t *step, uint64_t stride) {
    uint64_t base = *step * stride;
    GRID_STRIDE(j, n) out[j] = dqn_philox_uniform(seed, stream, base + j);
}

__global__ void k_rand_index(int32_t *idx, size_t n, uint64_t seed, uint32_t stream,
                             const uint64_t *step, uint64_t stride, const uint32_t *size) {
    uint64_t base = *step * stride;
    uint32_t sz = *size;
    GRID_STRIDE(j, n) idx[j] = (int32_t)dqn_philox_below(seed, stream, base + j, sz);
}

__global__ void k_gather_f32(const float *src, const int32_t *idx, float *dst, size_t n, int row_len) {
    GRID_STRIDE(e, n * (size_t)row_len) {
        size_t j = e / (size_t)row_len, k = e % (size_t)row_len;
        dst[e] = src[(size_t)idx[j] * (size_t)row_len + k];
    }
}

__global__ void k_gather_i32(const int32_t *src, const int32_t *idx, int32_t *dst, size_t n,
                             int row_len) {
    GRID_STRIDE(e, n * (size_t)row_len) {
        size_t j = e / (size_t)row_len, k = e % (size_t)row_len;
        dst[e] = src[(size_t)idx[j] * (size_t)row_len + k];
    }
}

dqn_status cuda_rand_uniform(dqn_backend *be, float *out, size_t n, uint64_t seed, uint32_t stream,
                             const uint64_t *step, uint64_t stride) {
    CUDA_ARG(step, "rand_uniform: step is NULL");
    LAUNCH_1D(k_rand_uniform, n, out, n, seed, stream, step, stride);
}

dqn_status cuda_rand_index(dqn_backend *be, int32_t *idx, size_t n, uint64_t seed, uint32_t stream,
                           const uint64_t *step, uint64_t stride, const uint32_t *size) {
    CUDA_ARG(step && size, "rand_index: step and size must be non-NULL");
    LAUNCH_1D(k_rand_index, n, idx, n, seed, stream, step, stride, size);
}

dqn_status cuda_gather_f32(dqn_backend *be, const float *src, const int32_t *idx, float *dst, int n,
                           int row_len) {
    CUDA_ARG(n >= 0 && row_len >= 0, "gather_f32: bad shape n=%d row_len=%d", n, row_len);
    LAUNCH_1D(k_gather_f32, (size_t)n * (size_t)row_len, src, idx, dst, (size_t)n, row_len);
}

dqn_status cuda_gather_i32(dqn_backend *be, const int32_t *src, const int32_t *idx, int32_t *dst,
                           int n, int row_len) {
    CUDA_ARG(n >= 0 && row_len >= 0, "gather_i32: bad shape n=%d row_len=%d", n, row_len);
    LAUNCH_1D(k_gather_i32, (size_t)n * (size_t)row_len, src, idx, dst, (size_t)n, row_len);
}
