/* What the trainer needs from the CPU backend beyond the op table (dqn_backend_cpu_create is in
 * backends/backend.h). */
#ifndef DQN_CPU_H
#define DQN_CPU_H
#include "backends/backend.h"
#include "dqn.h"

/* The GEMM the calls take now: "openblas" or "builtin" (an OpenBLAS build takes the built-in one
 * on AVX2 and AVX-512 CPUs at one thread: gemm.c, use_builtin). */
const char *dqn_cpu_gemm_name(void);
/* 1 in a build linked with OpenBLAS */
int dqn_cpu_have_openblas(void);
/* Threads the GEMMs may use (OpenBLAS's pool); the built-in GEMM is single-threaded and
 * accepts any n >= 1. */
dqn_status dqn_cpu_set_threads(int n);
int dqn_cpu_threads(void);

#endif
