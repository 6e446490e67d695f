/* What the trainer needs from the CPU backend beyond the op table (dqn_backend_cpu_create is in
 * backends/backend.h). */
#ifndef DQN_CPU_H
#define DQN_CPU_H
#include "backends/backend.h"
#include "dqn.h"

/* "openblas" or "builtin" */
const char *dqn_cpu_gemm_name(void);
/* Threads the GEMMs may use (OpenBLAS's pool); the built-in GEMM is single-threaded and
 * accepts any n >= 1. */
dqn_status dqn_cpu_set_threads(int n);
int dqn_cpu_threads(void);

/* The health ops (cpu_health.c), for the op table in cpu_backend.c. */
dqn_status dqn_cpu_health_plan(dqn_backend *be, const dqn_hplan_desc *desc, void **plan);
void dqn_cpu_health_plan_free(dqn_backend *be, void *plan);
dqn_status dqn_cpu_health_check(dqn_backend *be, const void *plan);
dqn_status dqn_cpu_health_fault(dqn_backend *be, float *x, size_t n, const uint64_t *step,
                                uint64_t at, int kind);
dqn_status dqn_cpu_fence_create(dqn_backend *be, void **fence);
void dqn_cpu_fence_destroy(dqn_backend *be, void *fence);
dqn_status dqn_cpu_fence_noop(dqn_backend *be, void *fence);

#endif
