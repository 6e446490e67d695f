/* Shared state and helpers of the CUDA backend: the per-backend handles, the error macros that turn
 * a CUDA or cuBLAS failure into a dqn_status (file, line, the call, a hint), launch geometry. */
#ifndef DQN_CUDA_COMMON_CUH
#define DQN_CUDA_COMMON_CUH
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "backends/backend.h"
#include "backends/cuda_tunables.h"
#include "core/error.h"
}
#include "core/update_math.h"

/* cuBLAS and cublasLt share one workspace (both run on the one stream, so never at once); it is
 * allocated at start-up so that a GEMM inside graph capture never allocates. */
#define CUDA_WORKSPACE_BYTES ((size_t)32 << 20)
/* Scratch for the partial sums of two-pass reductions, fixed at start-up for the same reason. */
#define CUDA_SCRATCH_FLOATS ((size_t)4 << 20)
#define CUDA_LT_CACHE 64
/* Counters of the single-launch reductions: [0] for l2_norm, [1 + strip] for column sums. */
#define CUDA_COUNTERS 4097
/* Tile counters of the own GEMM's split reductions */
#define SG_COUNTERS 1024

/* One cublasLt plan of linear_fwd, keyed by shape and by the alignment of each pointer (the
 * heuristic's choice depends on both). */
typedef struct {
    int M, K, N, ld, has_bias, relu;   /* ld: W's row stride (dgrad: dW's) */
    int dgrad;           /* the dW GEMM with db from the BGRADB epilogue (else a forward plan) */
    uint32_t align[4];   /* X, W, Y, b (dgrad: X, dY, dW, db) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} cuda_lt_plan;

typedef struct {
    int device;
    int sm_count;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    cublasComputeType_t compute;   /* 32F, or 32F_FAST_TF32 under DQN_MATH_TF32 */
    void *workspace;
    float *scratch;                /* CUDA_SCRATCH_FLOATS */
    unsigned *blocks_done;         /* CUDA_COUNTERS: blocks finished per reduction (0 between ops) */
    cuda_lt_plan plans[CUDA_LT_CACHE];
    int n_plans;
    /* data parallelism (cuda_nccl.cu): the communicator this backend joined, if any */
    struct ncclComm *comm;
    int comm_world;
    int comm_aborted;              /* aborted after a peer failed or a wait timed out */
    double comm_timeout_s;         /* 0 = wait on peers forever */
    int pdl;                       /* launch kernels with programmatic dependent launch */
    /* lane 0, the main stream, and lanes 1..DQN_SIDE_LANES, the side branches (side_begin ..
     * side_end): the fields above are copies of the lane the ops issue on (cuda_lane_use) */
    struct {
        cudaStream_t stream;
        void *workspace;
        float *scratch;
        unsigned *blocks_done, *sg_done;
        cudaEvent_t done;            /* a side lane: recorded by side_end */
        int pending;                 /* a side lane: work since the last join */
    } lane[1 + DQN_SIDE_LANES];
    int on_side;                   /* the side lane issued on (0: the main stream) */
    int prio_hi, prio_lo;          /* the device's greatest and least stream priorities */
    cudaEvent_t side_fork;
    int smem_optin;                /* shared memory a block may ask for (bytes) */
    unsigned *sg_done;             /* SG_COUNTERS, 0 between the own GEMM's calls */
    dqn_cuda_tunables tune;        /* the thresholds tests may move (backends/cuda_tunables.h) */
} cuda_impl;

static inline cuda_impl *cuda_of(dqn_backend *be) { return (cuda_impl *)be->impl; }

const char *cuda_hint(cudaError_t e);

#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess)                                                                  \
            return DQN_ERR(DQN_ERR_BACKEND, "%s: %s (%s)%s", #call, cudaGetErrorName(e_),       \
                           cudaGetErrorString(e_), cuda_hint(e_));                              \
    } while (0)

#define CUBLAS_CHECK(call)                                                                      \
    do {                                                                                        \
        cublasStatus_t s_ = (call);                                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                        \
            return DQN_ERR(DQN_ERR_BACKEND, "%s: %s%s", #call, cublasGetStatusName(s_),          \
                           s_ == CUBLAS_STATUS_NOT_SUPPORTED                                    \
                               ? " (hint: no cuBLAS kernel for this shape/alignment)"           \
                               : "");                                                           \
    } while (0)

/* After a kernel launch: a bad configuration shows up here, not at the next sync. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

#define CUDA_ARG(cond, ...)                                                                     \
    do {                                                                                        \
        if (!(cond)) return DQN_ERR(DQN_ERR_ARG, __VA_ARGS__);                                  \
    } while (0)

#define CUDA_THREADS 256

/* Programmatic dependent launch (sm_90): a kernel launched with it is scheduled while the kernel
 * before it on the stream still runs, so the gap between two dependent graph nodes (launch and
 * the completion's memory flush, about a microsecond) overlaps the first one's tail. Its blocks
 * wait (griddepcontrol.wait) for the previous kernel's completion and memory before doing
 * anything, then allow the next kernel to be scheduled. Every kernel of the backend starts with
 * it: one that skipped the wait could read its inputs before they are written, and let the
 * kernel after it start before the one before it ended. A no-op for a kernel launched plainly. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KERNEL_PROLOGUE()                                                                       \
    asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define KERNEL_PROLOGUE()                                                                       \
    do {                                                                                        \
    } while (0)
#endif

/* Every kernel launch of the backend: on its stream, with programmatic dependent launch where
 * the device has it. */
template <typename... KArgs, typename... Args>
static inline cudaError_t cuda_launch(const cuda_impl *c, void (*kernel)(KArgs...), dim3 grid,
                                      dim3 block, size_t smem, Args &&...args) {
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = c->pdl;
    at[1].id = cudaLaunchAttributePriority;
    at[1].val.priority = c->on_side ? c->prio_lo : c->prio_hi;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = at;
    cfg.numAttrs = c->tune.side_priority ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}

/* A launch on c (the backend's cuda_impl), checked. */
#define KLAUNCH(c, kernel, grid, block, smem, ...)                                              \
    CUDA_CHECK(cuda_launch((c), kernel, grid, block, smem, __VA_ARGS__))

#define GRID_STRIDE(i, n)                                                                       \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)(n);              \
         i += (size_t)gridDim.x * blockDim.x)

/* Grid for a grid-stride loop over n items: enough blocks to fill the chip, no more. */
static inline unsigned cuda_blocks(const cuda_impl *c, size_t n, int threads) {
    size_t want = (n + (size_t)threads - 1) / (size_t)threads;
    size_t cap = (size_t)c->sm_count * 16;
    if (want > cap) want = cap;
    return want ? (unsigned)want : 1u;
}

/* The body of an op that is one grid-stride kernel over n items on backend be's stream. */
#define LAUNCH_1D(be, kernel, n, ...)                                                            \
    do {                                                                                         \
        cuda_impl *c_ = cuda_of(be);                                                             \
        if ((n) == 0) return DQN_OK;                                                             \
        CUDA_CHECK(cuda_launch(c_, kernel, cuda_blocks(c_, (n), CUDA_THREADS), CUDA_THREADS, 0,  \
                               __VA_ARGS__));                                                    \
        return DQN_OK;                                                                           \
    } while (0)

/* Launch kern<4> (float4 columns) when V is 4, else kern<1>, over n items, on c: the launchers
 * of the BC_ kernels and cos_embed (`what` names the op in the too-large error) */
#define LAUNCH_VEC(c, kern, V, n, what, ...)                                                     \
    do {                                                                                         \
        CUDA_ARG((n) <= INT32_MAX / 2, "%s: %zu items are too many", what, (size_t)(n));        \
        if ((n) == 0) return DQN_OK;                                                             \
        const unsigned grid_ = cuda_blocks((c), (n), CUDA_THREADS);                              \
        if ((V) == 4) KLAUNCH((c), kern<4>, grid_, CUDA_THREADS, 0, __VA_ARGS__);                \
        else KLAUNCH((c), kern<1>, grid_, CUDA_THREADS, 0, __VA_ARGS__);                         \
        return DQN_OK;                                                                           \
    } while (0)

/* ---- device helpers shared by the kernels ---- */

/* 16 bytes global -> shared without a register, so that many loads of a block are in flight at
 * once (L2, not L1: other blocks may have written them during the launch) */
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(__cvta_generic_to_global(src))
                 : "memory");
#else
    *(uint4 *)dst = __ldcg((const uint4 *)src);
#endif
}

/* every cp_async16 of the thread landed */
__device__ __forceinline__ void cp_async_wait_all(void) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

/* Broadcast kernels over the per-tau rows r = s*T + t of a per-state row s (iqn_fwd,
 * bcast_add_act): a thread takes BC_VEC columns of one state for BC_TAUS taus, so its index
 * arithmetic (32-bit) is done once for BC_VEC * BC_TAUS elements, the per-state values are loaded
 * once, and the taus' loads go out together. A 64-bit division per element, as a grid-stride loop
 * over elements does, cost more than the memory traffic of these kernels. */
#define BC_TAUS 8

/* 4 (float4 columns) when every row length and pointer allows it, else 1 */
static inline int bc_vec(int d, const void *p0, const void *p1, const void *p2, const void *p3) {
    const uintptr_t a = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3;
    return d % 4 == 0 && a % 16 == 0 ? 4 : 1;
}

/* V consecutive floats (V = 1, 2 or 4, the address aligned to V floats) */
template <int V> __device__ __forceinline__ void ldv(float (&o)[V], const float *p) {
    if constexpr (V == 4) {
        const float4 t = *reinterpret_cast<const float4 *>(p);
        o[0] = t.x, o[1] = t.y, o[2] = t.z, o[3] = t.w;
    } else if constexpr (V == 2) {
        const float2 t = *reinterpret_cast<const float2 *>(p);
        o[0] = t.x, o[1] = t.y;
    } else {
        o[0] = *p;
    }
}
template <int V> __device__ __forceinline__ void stv(float *p, const float (&o)[V]) {
    if constexpr (V == 4) *reinterpret_cast<float4 *>(p) = make_float4(o[0], o[1], o[2], o[3]);
    else if constexpr (V == 2) *reinterpret_cast<float2 *>(p) = make_float2(o[0], o[1]);
    else *p = o[0];
}

/* A BC_ kernel's items over B states, T taus and d columns taken V at a time (host, 64-bit) */
static inline size_t bc_count(int B, int T, int d, int V) {
    return (size_t)B * (size_t)((T + BC_TAUS - 1) / BC_TAUS) * (size_t)(d / V);
}
/* the same in the kernel (32-bit: the launcher checked the count) */
template <int V> __device__ __forceinline__ int bc_items(int B, int T, int d) {
    return B * ((T + BC_TAUS - 1) / BC_TAUS) * (d / V);
}

/* Item e: state s, first tau t0, nt taus (at most BC_TAUS), first column j */
template <int V>
__device__ __forceinline__ void bc_item(int e, int T, int d, int *s, int *t0, int *nt, int *j) {
    const int dv = d / V, ntg = (T + BC_TAUS - 1) / BC_TAUS, q = e / dv;
    *j = e % dv * V, *t0 = q % ntg * BC_TAUS, *s = q / ntg;
    *nt = min(BC_TAUS, T - *t0);
}

/* The item's V columns of its nt per-tau rows of x [B*T, d], all loads issued together */
template <int V>
__device__ __forceinline__ void bc_load(float (&o)[BC_TAUS][V], const float *x, int s, int T,
                                        int t0, int nt, int d, int j) {
#pragma unroll
    for (int u = 0; u < BC_TAUS; u++)
        if (u < nt) ldv<V>(o[u], x + ((size_t)s * T + t0 + u) * d + j);
}

/* butterfly sum: every lane ends with the same total, in a fixed order */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* LayerNorm statistics of one row (one warp, eps 1e-5, two passes): every lane gets the mean
 * and 1 / sqrt(var + eps) */
__device__ __forceinline__ void ln_row_stats(const float *x, int d, int lane, float *mu,
                                             float *rs) {
    float s = 0.0f;
    for (int j = lane; j < d; j += 32) s += x[j];
    float m = warp_sum(s) / (float)d, q = 0.0f;
    for (int j = lane; j < d; j += 32) {
        float t = x[j] - m;
        q += t * t;
    }
    *mu = m;
    *rs = 1.0f / sqrtf(warp_sum(q) / (float)d + 1e-5f);
}

/* LayerNorm backward of row m (one warp): mean(dy * gamma) and mean(dy * gamma * xhat), the two
 * row sums dx = rstd (dy gamma - s1 - xhat s2) needs; every lane gets both */
__device__ __forceinline__ void ln_bwd_row_sums(const float *x, const float *gamma,
                                                const float *dy, float mu, float rs, int d,
                                                int lane, float *s1, float *s2) {
    float a = 0.0f, b = 0.0f;
    for (int j = lane; j < d; j += 32) {
        float g = dy[j] * gamma[j];
        a += g;
        b += g * ((x[j] - mu) * rs);
    }
    *s1 = warp_sum(a) / (float)d;
    *s2 = warp_sum(b) / (float)d;
}

/* sum over the block (blockDim.x a power of two, red[blockDim.x]); every thread gets it. Call
 * __syncthreads() before reusing red. */
__device__ __forceinline__ float block_sum(float v, float *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
        __syncthreads();
    }
    return red[0];
}

/* The dueling combine's backward of one row g [A] (dueling_bwd's kernel and targets_huber's):
 * dV sums every column, branch by branch, in double */
__device__ __forceinline__ void dueling_bwd_row(const float *g, float *da, float *dv,
                                                const dqn_branches &br) {
    double tot = 0.0;
    for (int b = 0; b < br.D; b++) {
        int o = br.off[b], n = br.n[b];
        double s = 0.0;
        for (int k = 0; k < n; k++) s += g[o + k];
        float mean = (float)(s / n);
        for (int k = 0; k < n; k++) da[o + k] = g[o + k] - mean;
        tot += s;
    }
    *dv = (float)tot;
}

/* A target of mode MEAN from the target net's row at the a* of each branch (iqn_targets' kernel
 * and targets_huber's); __fmul_rn keeps R + disc * z from contracting into an FMA, as on the CPU */
__device__ __forceinline__ float target_mean(const float *row, const int32_t *as, float R,
                                             float disc, const dqn_branches &br) {
    double t = 0.0;
    for (int b = 0; b < br.D; b++) t += row[br.off[b] + as[b]];
    return R + __fmul_rn(disc, (float)(t / br.D));
}

/* Column sums of a row-major [M, N] matrix, one launch and deterministic (cuda_reduce.cu):
 * out1[j] = sum_m A[m,j]; with x, mean, rstd given (LayerNorm), also
 * out0[j] = sum_m A[m,j] * (x[m,j] - mean[m]) * rstd[m]. */
/* cuda_colsum's most row parts: its partials take at most 2 x this x N floats of the scratch */
#define COLSUM_MAX_PARTS 256
dqn_status cuda_colsum(cuda_impl *c, const float *A, int M, int N, const float *x, const float *mean,
                       const float *rstd, float *out0, float *out1);

/* Every op of the table (backends/ops.def) as cuda_<name>, defined in the file of its concern
 * (cuda_backend.cu: the memory and host-staging entries) */
#define DQN_OP(name, ret, kind, params, args, doc) ret cuda_##name params;
#include "backends/ops.def"
#undef DQN_OP

/* the GEMMs' plan cache, released with the backend (cuda_gemm.cu) */
void cuda_gemm_release(cuda_impl *c);
/* the own GEMM kernels (cuda_sgemm.cu): forward with bias and activation; dX (+)= dY W; dW and
 * db from dY and X */
dqn_status cuda_sgemm_fwd(cuda_impl *c, const float *X, const float *W, int ldw, const float *b,
                          float *Y, int M, int K, int N, dqn_act act);
dqn_status cuda_sgemm_dx(cuda_impl *c, const float *dY, const float *W, int ldw, float *dX,
                         int acc, int M, int K, int N);
dqn_status cuda_sgemm_dw(cuda_impl *c, const float *X, const float *dY, float *dW, int ldw,
                         float *db, int M, int K, int N);
/* Y[M,N] = X[M,K] W[N,K]^T, X's rows ldx and Y's ldy floats apart, no bias (cuda_gemm.cu) */
dqn_status cuda_gemm_ldx(cuda_impl *c, const float *X, int ldx, const float *W, float *Y, int ldy,
                         int M, int K, int N);

/* the lane the ops issue on from now (cuda_graph.cu): 0 main, 1 the side branch */
void cuda_lane_use(cuda_impl *c, int k);
/* the one-kernel IQN embedding's shared memory above the 48 KiB default, asked for once at
 * start-up, outside any capture (cuda_iqn.cu) */
dqn_status cuda_iqn_embed_init(void);

/* The host's wait for the stream: a plain synchronize without a communicator; with one, a poll
 * that fails (and aborts the communicator) on a peer's error or after the timeout (cuda_nccl.cu). */
dqn_status cuda_stream_wait(dqn_backend *be);
/* Before the backend goes: wait for the stream, then destroy (or, if stuck, abort) the communicator. */
void cuda_comm_release(dqn_backend *be);

/* A branch layout is passed to kernels by value; this checks it first (cuda_heads.cu). */
dqn_status cuda_check_branches(const dqn_branches *br);

#endif
