/* Column sums, two passes with a fixed reduction tree (no float atomics), so a replayed graph
 * gives bit-identical results: pass 1 sums row chunks of 32-column strips into scratch, pass 2
 * adds the chunks of each column in order. */
#include "backends/cuda/cuda_common.cuh"

#define CS_COLS 32
#define CS_ROWS 8
#define CS_MAX_PARTS 256
#define CS_MIN_ROWS_PER_PART 64

__global__ void k_colsum_partial(const float *A, int M, int N, int chunk, const float *x,
                                 const float *mean, const float *rstd, float *part0,
                                 float *part1) {
    __shared__ float s0[CS_ROWS][CS_COLS + 1], s1[CS_ROWS][CS_COLS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * CS_COLS + tx;
    int p = blockIdx.y;
    int r0 = p * chunk, r1 = min(M, r0 + chunk);
    float a0 = 0.0f, a1 = 0.0f;
    if (col < N) {
        for (int m = r0 + ty; m < r1; m += CS_ROWS) {
            size_t i = (size_t)m * N + col;
            float v = A[i];
            a1 += v;
            if (x) a0 += v * ((x[i] - mean[m]) * rstd[m]);
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
    }
}

__global__ void k_colsum_final(const float *part0, const float *part1, int P, int N, float *out0,
                               float *out1) {
    GRID_STRIDE(j, N) {
        float t0 = 0.0f, t1 = 0.0f;
        for (int p = 0; p < P; p++) {
            t1 += part1[(size_t)p * N + j];
            if (out0) t0 += part0[(size_t)p * N + j];
        }
        out1[j] = t1;
        if (out0) out0[j] = t0;
    }
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
    if (P > CS_MAX_PARTS) P = CS_MAX_PARTS;
    if ((size_t)P > fit) P = (int)fit;
    if (P < 1)
        return DQN_ERR(DQN_ERR_UNSUPPORTED, "column sum: %d columns exceed the reduction scratch", N);
    int chunk = (M + P - 1) / P;
    float *part1 = c->scratch, *part0 = c->scratch + (size_t)P * N;
    dim3 grid((unsigned)((N + CS_COLS - 1) / CS_COLS), (unsigned)P), block(CS_COLS, CS_ROWS);
    k_colsum_partial<<<grid, block, 0, c->stream>>>(A, M, N, chunk, out0 ? x : NULL, mean, rstd,
                                                    part0, part1);
    LAUNCH_CHECK();
    k_colsum_final<<<cuda_blocks(c, (size_t)N, CUDA_THREADS), CUDA_THREADS, 0, c->stream>>>(
        part0, part1, P, N, out0, out1);
    LAUNCH_CHECK();
    return DQN_OK;
}
