/* The CUDA backend: construction (one non-blocking stream, a cuBLAS handle bound to it, a cublasLt
 * handle, a workspace and a reduction scratch allocated once), the memory ops, and the op table.
 * The ops themselves live in the files beside this one, one concern each. */
#include <stdlib.h>

#include <string.h>
#include "backends/cuda/cuda_common.cuh"

const char *cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return " (hint: the GPU is out of memory; lower batch_size or buffer_size)";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
        return " (hint: check the NVIDIA driver and CUDA_VISIBLE_DEVICES)";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
        return " (hint: rebuild with CUDA_ARCH matching this GPU, e.g. sm_90 for H100/H200)";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
        return " (hint: a kernel accessed memory out of bounds; the context is now unusable; "
               "run compute-sanitizer)";
    case cudaErrorInvalidConfiguration:
        return " (hint: a launch with a bad grid or block size: check the op's sizes)";
    case cudaErrorInvalidValue:
        return " (hint: a bad pointer or size passed to the op)";
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureWrongThread:
        return " (hint: a call that is not allowed during graph capture (a sync, an allocation, "
               "a pageable copy) ran between capture_begin and capture_end)";
    default: return "";
    }
}

/* ---- memory ---- */

dqn_status cuda_alloc(dqn_backend *be, void **p, size_t bytes) {
    CUDA_ARG(p, "alloc: p is NULL");
    *p = NULL;
    if (bytes == 0) return DQN_OK;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return DQN_ERR(DQN_ERR_NOMEM, "cudaMalloc(%zu bytes): %s%s", bytes, cudaGetErrorString(e),
                       cuda_hint(e));
    }
    CUDA_CHECK(cudaMemsetAsync(*p, 0, bytes, cuda_of(be)->stream));
    return DQN_OK;
}

void cuda_free(dqn_backend *be, void *p) {
    (void)be;
    if (p) cudaFree(p);
}

/* Both host copies wait for the stream: the host buffer may be reused (or read) on return. */
dqn_status cuda_h2d(dqn_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return DQN_OK;
    cudaStream_t s = cuda_of(be)->stream;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    return cuda_stream_wait(be);
}

dqn_status cuda_d2h(dqn_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return DQN_OK;
    cudaStream_t s = cuda_of(be)->stream;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    return cuda_stream_wait(be);
}

dqn_status cuda_host_alloc(dqn_backend *be, void **p, size_t bytes) {
    (void)be;
    CUDA_ARG(p, "host_alloc: p is NULL");
    *p = NULL;
    CUDA_CHECK(cudaMallocHost(p, bytes ? bytes : 1));
    memset(*p, 0, bytes ? bytes : 1);
    return DQN_OK;
}

void cuda_host_free(dqn_backend *be, void *p) {
    (void)be;
    if (p) cudaFreeHost(p);
}

dqn_status cuda_h2d_async(dqn_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return DQN_OK;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_of(be)->stream));
    return DQN_OK;
}

dqn_status cuda_d2h_async(dqn_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return DQN_OK;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_of(be)->stream));
    return DQN_OK;
}

dqn_status cuda_d2d(dqn_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return DQN_OK;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_of(be)->stream));
    return DQN_OK;
}

dqn_status cuda_sync(dqn_backend *be) { return cuda_stream_wait(be); }

void cuda_destroy(dqn_backend *be) {
    if (!be) return;
    cuda_impl *c = cuda_of(be);
    if (c) {
        cuda_comm_release(be);
        for (int k = 0; k <= DQN_SIDE_LANES; k++)
            if (c->lane[k].stream) cudaStreamSynchronize(c->lane[k].stream);
        cuda_gemm_release(c);
        if (c->lt) cublasLtDestroy(c->lt);
        if (c->blas) cublasDestroy(c->blas);
        for (int k = 0; k <= DQN_SIDE_LANES; k++) {
            if (c->lane[k].done) cudaEventDestroy(c->lane[k].done);
            if (c->lane[k].workspace) cudaFree(c->lane[k].workspace);
            if (c->lane[k].scratch) cudaFree(c->lane[k].scratch);
            if (c->lane[k].blocks_done) cudaFree(c->lane[k].blocks_done);
            if (c->lane[k].sg_done) cudaFree(c->lane[k].sg_done);
            if (c->lane[k].stream) cudaStreamDestroy(c->lane[k].stream);
        }
        if (c->side_fork) cudaEventDestroy(c->side_fork);
        free(c);
    }
    free(be);
}

/* every entry of backends/ops.def is cuda_<name> */
static const dqn_ops cuda_ops = {
    .name = "cuda",
#define DQN_OP(name, ret, kind, params, args, doc) .name = cuda_##name,
#include "backends/ops.def"
#undef DQN_OP
};

/* ---- construction ---- */

static dqn_status cuda_init(cuda_impl *c, int device, dqn_math_mode math) {
    c->tune = (dqn_cuda_tunables)DQN_CUDA_TUNABLES_DEFAULT;
    c->device = device;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, device));
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    c->pdl = major >= 9;
    CUDA_CHECK(cudaDeviceGetAttribute(&c->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                      device));
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&c->prio_lo, &c->prio_hi));
    /* the lanes (the main stream's and the side branches'), the main one current */
    for (int k = DQN_SIDE_LANES; k >= 0; k--) {
        CUDA_CHECK(cudaStreamCreateWithPriority(&c->lane[k].stream, cudaStreamNonBlocking,
                                                k ? c->prio_lo : c->prio_hi));
        CUDA_CHECK(cudaEventCreateWithFlags(&c->lane[k].done, cudaEventDisableTiming));
        CUDA_CHECK(cudaMalloc(&c->lane[k].workspace, CUDA_WORKSPACE_BYTES));
        CUDA_CHECK(cudaMalloc((void **)&c->lane[k].scratch, CUDA_SCRATCH_FLOATS * sizeof(float)));
        CUDA_CHECK(cudaMalloc((void **)&c->lane[k].blocks_done, CUDA_COUNTERS * sizeof(unsigned)));
        CUDA_CHECK(cudaMemsetAsync(c->lane[k].blocks_done, 0, CUDA_COUNTERS * sizeof(unsigned),
                                   c->lane[k].stream));
        CUDA_CHECK(cudaMalloc((void **)&c->lane[k].sg_done, SG_COUNTERS * sizeof(unsigned)));
        CUDA_CHECK(cudaMemsetAsync(c->lane[k].sg_done, 0, SG_COUNTERS * sizeof(unsigned),
                                   c->lane[k].stream));
        CUDA_CHECK(cudaStreamSynchronize(c->lane[k].stream));
    }
    cuda_lane_use(c, 0);
    CUDA_CHECK(cudaEventCreateWithFlags(&c->side_fork, cudaEventDisableTiming));
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    CUBLAS_CHECK(cublasSetWorkspace(c->blas, c->workspace, CUDA_WORKSPACE_BYTES));
    /* fp32 means true fp32: default math with CUBLAS_COMPUTE_32F never takes the TF32 path */
    CUBLAS_CHECK(cublasSetMathMode(c->blas, math == DQN_MATH_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                  : CUBLAS_DEFAULT_MATH));
    c->compute = math == DQN_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtCreate(&c->lt));
    DQN_TRY(cuda_iqn_embed_init());
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return DQN_OK;
}

/* One small GEMM through each library outside any capture: a first call may initialise lazily,
 * and the model captures its very first update. The scratch is both input and output. */
static dqn_status cuda_warm_up(dqn_backend *be) {
    cuda_impl *c = cuda_of(be);
    float *s = c->scratch;
    CUDA_CHECK(cudaMemsetAsync(s, 0, 4096 * sizeof(float), c->stream));
    DQN_TRY(cuda_linear_fwd(be, s, s + 256, s + 512, s + 1024, 16, 16, 16));
    DQN_TRY(cuda_linear_bwd(be, s, s + 256, s + 1024, s + 2048, s + 2304, s + 2560, 16, 16, 16));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return DQN_OK;
}

extern "C" int dqn_backend_cuda_available(void) { return dqn_cuda_device_count() > 0; }

extern "C" dqn_status dqn_backend_cuda_create(dqn_backend **out, int device_index,
                                              dqn_math_mode math) {
    CUDA_ARG(out, "dqn_backend_cuda_create: out is NULL");
    *out = NULL;
    CUDA_ARG(math == DQN_MATH_FP32 || math == DQN_MATH_TF32,
             "dqn_backend_cuda_create: math mode %d is neither fp32 (0) nor tf32 (1)", (int)math);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return DQN_ERR(DQN_ERR_UNSUPPORTED, "no CUDA device (cudaGetDeviceCount: %s: %s)",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (count == 0)
        return DQN_ERR(DQN_ERR_UNSUPPORTED, "no CUDA device (cudaGetDeviceCount found none)");
    CUDA_ARG(device_index >= 0 && device_index < count,
             "dqn_backend_cuda_create: device_index %d out of range (%d device%s)", device_index,
             count, count == 1 ? "" : "s");
    dqn_backend *be = (dqn_backend *)calloc(1, sizeof *be);
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return DQN_ERR(DQN_ERR_NOMEM, "dqn_backend_cuda_create: out of host memory");
    }
    be->ops = &cuda_ops;
    be->math = math;
    be->impl = c;
    dqn_status s = cuda_init(c, device_index, math);
    if (s == DQN_OK) s = cuda_warm_up(be);
    if (s != DQN_OK) {
        cuda_destroy(be);
        return s;
    }
    *out = be;
    return DQN_OK;
}

extern "C" dqn_cuda_tunables *dqn_backend_cuda_tunables(dqn_backend *be) {
    return be && be->ops == &cuda_ops ? &cuda_of(be)->tune : NULL;
}
