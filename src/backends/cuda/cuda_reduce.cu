/* Column sums in one launch with a fixed reduction tree (no float atomics), so a replayed graph
 * gives bit-identical results: each block sums a row chunk of a 32-column strip into scratch; the
 * last block of a strip to finish (an integer counter per strip) adds the strip's chunks in a
 * fixed order and resets the counter. */
#include "backends/cuda/cuda_common.cuh"

#define CS_COLS 32
#define CS_ROWS 8
#define CS_MIN_ROWS_PER_PART 64
#define CS_BATCH 8

__global__ void k_colsum(const float *A, int M, int N, int chunk, const float *x, const float *mean,
                         const float *rstd, float *part0, float *part1, unsigned *done,
                         float *out0, float *out1) {
    KERNEL_PROLOGUE();
    __shared__ float s0[CS_ROWS][CS_COLS + 1], s1[CS_ROWS][CS_COLS + 1];
    __shared__ bool last;
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * CS_COLS + tx;
    int p = blockIdx.y, P = gridDim.y;
    int r0 = p * chunk, r1 = min(M, r0 + chunk);
    float a0 = 0.0f, a1 = 0.0f;
    if (col < N) {
        /* CS_BATCH rows' loads go out before their sums (one round trip, not CS_BATCH) */
        for (int m0 = r0 + ty; m0 < r1; m0 += CS_ROWS * CS_BATCH) {
            float v[CS_BATCH], xh[CS_BATCH];
#pragma unroll
            for (int u = 0; u < CS_BATCH; u++) {
                const int m = m0 + u * CS_ROWS;
                const size_t i = (size_t)m * N + col;
                v[u] = m < r1 ? A[i] : 0.0f;
                xh[u] = x && m < r1 ? (x[i] - mean[m]) * rstd[m] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < CS_BATCH; u++) {
                if (m0 + u * CS_ROWS >= r1) break;
                a1 += v[u];
                if (x) a0 += v[u] * xh[u];
            }
        }
    }
    s0[ty][tx] = a0;
    s1[ty][tx] = a1;
    __syncthreads();
    if (ty == 0 && col < N) {
        float t0 = 0.0f, t1 = 0.0f;
        for (int k = 0; k < CS_ROWS; k++) {
            t0 += s0[k][tx];
            t1 += s1[k][tx];
        }
        part1[(size_t)p * N + col] = t1;
        if (x) part0[(size_t)p * N + col] = t0;
        __threadfence();
    }
    __syncthreads();
    if (tx == 0 && ty == 0) last = atomicAdd(&done[blockIdx.x], 1u) == (unsigned)P - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    a0 = a1 = 0.0f;
    if (col < N) {
        /* the parts in order, CS_BATCH loads in flight (L2: other blocks wrote them); volatile
         * loads, one round trip each, made this tail most of the kernel at 256 parts */
        for (int q0 = ty; q0 < P; q0 += CS_ROWS * CS_BATCH) {
            float v1[CS_BATCH], v0[CS_BATCH];
#pragma unroll
            for (int u = 0; u < CS_BATCH; u++) {
                const int q = q0 + u * CS_ROWS;
                v1[u] = q < P ? __ldcg(part1 + (size_t)q * N + col) : 0.0f;
                v0[u] = x && q < P ? __ldcg(part0 + (size_t)q * N + col) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < CS_BATCH; u++) {
                if (q0 + u * CS_ROWS >= P) break;
                a1 += v1[u];
                if (x) a0 += v0[u];
            }
        }
    }
    s0[ty][tx] = a0;
    s1[ty][tx] = a1;
    __syncthreads();
    if (ty == 0 && col < N) {
        float t0 = 0.0f, t1 = 0.0f;
        for (int k = 0; k < CS_ROWS; k++) {
            t0 += s0[k][tx];
            t1 += s1[k][tx];
        }
        out1[col] = t1;
        if (x) out0[col] = t0;
    }
    if (tx == 0 && ty == 0) done[blockIdx.x] = 0;
}

dqn_status cuda_colsum(cuda_impl *c, const float *A, int M, int N, const float *x, const float *mean,
                       const float *rstd, float *out0, float *out1) {
    if (N <= 0) return DQN_OK;
    if (M <= 0) {
        CUDA_CHECK(cudaMemsetAsync(out1, 0, (size_t)N * sizeof(float), c->stream));
        if (out0) CUDA_CHECK(cudaMemsetAsync(out0, 0, (size_t)N * sizeof(float), c->stream));
        return DQN_OK;
    }
    /* the number of parts depends on the shape alone, so the sum order is fixed */
    size_t fit = CUDA_SCRATCH_FLOATS / (2 * (size_t)N);
    int P = (M + CS_MIN_ROWS_PER_PART - 1) / CS_MIN_ROWS_PER_PART;
    if (P > COLSUM_MAX_PARTS) P = COLSUM_MAX_PARTS;
    if ((size_t)P > fit) P = (int)fit;
    if (P < 1)
        return DQN_ERR(DQN_ERR_UNSUPPORTED, "column sum: %d columns exceed the reduction scratch", N);
    int chunk = (M + P - 1) / P;
    float *part1 = c->scratch, *part0 = c->scratch + (size_t)P * N;
    unsigned strips = (unsigned)((N + CS_COLS - 1) / CS_COLS);
    if (strips > CUDA_COUNTERS - 1)
        return DQN_ERR(DQN_ERR_UNSUPPORTED, "column sum: %d columns exceed the %d counters", N,
                       CUDA_COUNTERS - 1);
    dim3 grid(strips, (unsigned)P), block(CS_COLS, CS_ROWS);
    KLAUNCH(c, k_colsum, grid, block, 0, A, M, N, chunk, out0 ? x : NULL, mean, rstd, part0, part1, c->blocks_done + 1, out0, out1);
    return DQN_OK;
}
