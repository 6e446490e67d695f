/* The CUDA entry points of a build without nvcc: the backend (and NCCL) are absent, and say so. */
#ifndef DQN_HAVE_CUDA
#include "backends/backend.h"
#include "backends/cuda_tunables.h"
#include "core/error.h"

dqn_status dqn_backend_cuda_create(dqn_backend **out, int device_index, dqn_math_mode math) {
    (void)device_index;
    (void)math;
    if (out) *out = NULL;
    return DQN_ERR(DQN_ERR_UNSUPPORTED, "built without CUDA (nvcc not found at build time)");
}

int dqn_backend_cuda_available(void) { return 0; }

dqn_cuda_tunables *dqn_backend_cuda_tunables(dqn_backend *be) {
    (void)be;
    return NULL;
}

int dqn_cuda_device_count(void) { return 0; }

dqn_status dqn_comm_id_create(dqn_comm_id *id) {
    (void)id;
    return DQN_ERR(DQN_ERR_UNSUPPORTED,
                   "built without CUDA: data parallelism needs the CUDA build with NCCL");
}
#else
typedef int dqn_cuda_none_empty;   /* ISO C forbids an empty translation unit */
#endif
