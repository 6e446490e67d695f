/* Data parallelism over NCCL (docs/multi-gpu.md): the communicator of a backend (one rank per
 * GPU), the gradient all-reduce (stream-ordered, so it is captured into the update graph), and the
 * host's waits on the stream. NCCL never times out by itself: a rank whose peer died waits in a
 * collective forever. So with a communicator a wait polls the stream and NCCL's asynchronous
 * error, and aborts the communicator (which releases the stuck kernels) on an error or after the
 * rank's timeout. NVLink multicast (NVLS) stays off on these machines: NCCL_NVLS_ENABLE=0 is set
 * before NCCL reads its environment. */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/cuda_common.cuh"

static_assert(sizeof(ncclUniqueId) == DQN_COMM_ID_BYTES, "dqn_comm_id must hold an ncclUniqueId");

static const char *nccl_hint(ncclResult_t r) {
    switch (r) {
    case ncclUnhandledCudaError:
        return " (hint: a CUDA call inside NCCL failed: check the device and CUDA_VISIBLE_DEVICES)";
    case ncclSystemError:
        return " (hint: a system call failed: sockets, shared memory (/dev/shm) or the network; "
               "NCCL_DEBUG=WARN says which)";
    case ncclInternalError: return " (hint: NCCL_DEBUG=INFO shows what NCCL was doing)";
    case ncclInvalidArgument: return " (hint: a bad rank, world size, id or buffer)";
    case ncclInvalidUsage:
        return " (hint: the ranks did not make the same calls in the same order, or two ranks "
               "share one GPU)";
    case ncclRemoteError: return " (hint: another rank failed or its connection dropped)";
    default: return "";
    }
}

static dqn_status nccl_fail(const char *file, int line, const char *call, ncclResult_t r) {
    const char *last = ncclGetLastError(NULL);
    return dqn_error_at(DQN_ERR_BACKEND, file, line, "%s: %s%s%s%s", call, ncclGetErrorString(r),
                        last && *last ? ": " : "", last ? last : "", nccl_hint(r));
}

#define NCCL_CHECK(call)                                                        \
    do {                                                                        \
        ncclResult_t r_ = (call);                                               \
        if (r_ != ncclSuccess) return nccl_fail(__FILE__, __LINE__, #call, r_); \
    } while (0)

/* Before NCCL first reads its environment (setenv only when needed: ranks may be threads). */
static void nccl_env(void) {
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (!nvls || strcmp(nvls, "0") != 0) setenv("NCCL_NVLS_ENABLE", "0", 1);
    /* every connection at init, none made lazily inside the first captured update */
    if (!getenv("NCCL_RUNTIME_CONNECT")) setenv("NCCL_RUNTIME_CONNECT", "0", 0);
}

static double mono_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static dqn_status comm_abort(cuda_impl *c, const char *why) {
    c->comm_aborted = 1;
    ncclCommAbort(c->comm);
    cudaStreamSynchronize(c->stream);   /* the aborted kernels return; nothing more to wait for */
    cudaGetLastError();
    return DQN_ERR(DQN_ERR_BACKEND, "%s; the communicator was aborted (this rank stops)", why);
}

dqn_status cuda_stream_wait(dqn_backend *be) {
    cuda_impl *c = cuda_of(be);
    if (!c->comm) {
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        return DQN_OK;
    }
    CUDA_ARG(!c->comm_aborted, "the communicator was aborted earlier (a rank failed)");
    const double t0 = mono_now();
    const struct timespec nap = {0, 50000};
    for (;;) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess) return DQN_OK;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        ncclResult_t async = ncclSuccess, q = ncclCommGetAsyncError(c->comm, &async);
        if (q != ncclSuccess || async != ncclSuccess) {
            char why[256];
            snprintf(why, sizeof why, "NCCL reports %s%s",
                     ncclGetErrorString(q != ncclSuccess ? q : async),
                     nccl_hint(q != ncclSuccess ? q : async));
            return comm_abort(c, why);
        }
        double waited = mono_now() - t0;
        if (c->comm_timeout_s > 0 && waited > c->comm_timeout_s) {
            char why[256];
            snprintf(why, sizeof why,
                     "waited %.0f s for the other ranks (timeout %g s): one of them stopped, "
                     "failed or took another path (DQN_NCCL_TIMEOUT_S sets the limit)",
                     waited, c->comm_timeout_s);
            return comm_abort(c, why);
        }
        if (waited > 2e-3) nanosleep(&nap, NULL);   /* spin first: most waits are short */
    }
}

dqn_status cuda_comm_init(dqn_backend *be, const dqn_rank_info *r) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(r, "comm_init: rank info is NULL");
    CUDA_ARG(r->world >= 1 && r->rank >= 0 && r->rank < r->world,
             "comm_init: rank %d of a world of %d", r->rank, r->world);
    CUDA_ARG(r->device == c->device, "comm_init: rank %d is for device %d, the backend is on %d",
             r->rank, r->device, c->device);
    CUDA_ARG(r->timeout_s >= 0, "comm_init: timeout_s %g < 0", r->timeout_s);
    CUDA_ARG(!c->comm, "comm_init: this backend joined a communicator already");
    nccl_env();
    CUDA_CHECK(cudaSetDevice(c->device));
    ncclUniqueId id;
    memcpy(&id, r->id.bytes, sizeof id);
    ncclComm_t comm = NULL;
    NCCL_CHECK(ncclCommInitRank(&comm, r->world, id, r->rank));
    c->comm = comm;
    c->comm_world = r->world;
    c->comm_timeout_s = r->timeout_s;
    /* one float through every rank outside any capture: a broken link shows here, not inside
     * the first captured update (the scratch holds nothing between ops) */
    DQN_TRY(cuda_allreduce_mean(be, c->scratch, 1));
    return cuda_stream_wait(be);
}

int cuda_comm_world(const dqn_backend *be) {
    const cuda_impl *c = (const cuda_impl *)be->impl;
    return c->comm ? c->comm_world : 0;
}

dqn_status cuda_allreduce_mean(dqn_backend *be, float *x, size_t n) {
    cuda_impl *c = cuda_of(be);
    if (!c->comm || n == 0) return DQN_OK;
    CUDA_ARG(x, "allreduce_mean: x is NULL");
    CUDA_ARG(!c->comm_aborted, "allreduce_mean: the communicator was aborted earlier");
    NCCL_CHECK(ncclAllReduce(x, x, n, ncclFloat32, ncclAvg, c->comm, c->stream));
    return DQN_OK;
}

void cuda_comm_release(dqn_backend *be) {
    cuda_impl *c = cuda_of(be);
    if (!c->comm || c->comm_aborted) return;
    if (cuda_stream_wait(be) != DQN_OK) {
        if (!c->comm_aborted) comm_abort(c, "the stream failed before the communicator was freed");
        return;
    }
    ncclCommDestroy(c->comm);
    c->comm = NULL;
}

extern "C" dqn_status dqn_comm_id_create(dqn_comm_id *id) {
    CUDA_ARG(id, "dqn_comm_id_create: id is NULL");
    nccl_env();
    ncclUniqueId u;
    NCCL_CHECK(ncclGetUniqueId(&u));
    memcpy(id->bytes, &u, sizeof u);
    return DQN_OK;
}

extern "C" int dqn_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}
