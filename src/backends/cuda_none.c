/* The CUDA constructors of a build without nvcc: the backend is absent, and says so. */
#ifndef DQN_HAVE_CUDA
#include "backends/backend.h"
#include "core/error.h"

dqn_status dqn_backend_cuda_create(dqn_backend **out, int device_index, dqn_math_mode math) {
    (void)device_index;
    (void)math;
    if (out) *out = NULL;
    return DQN_ERR(DQN_ERR_UNSUPPORTED, "built without CUDA (nvcc not found at build time)");
}

int dqn_backend_cuda_available(void) { return 0; }
#else
typedef int dqn_cuda_none_empty;   /* ISO C forbids an empty translation unit */
#endif
