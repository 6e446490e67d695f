/* The CUDA backend's size thresholds, each with the measurement that set it (on the H200;
 * docs/gpu-notes.md). Plain C: the GPU tests and benchmarks read them, and move the two in
 * dqn_cuda_tunables to reach a path at other sizes. */
#ifndef DQN_CUDA_TUNABLES_H
#define DQN_CUDA_TUNABLES_H
#include "backends/backend.h"

/* Where a split-K algorithm's second node costs more than it saves: fp32, K and N at most 128,
 * at most this many multiply-adds (measured on the H200: the cartpole model at B = 32 14% faster;
 * applied to every GEMM up to 2^27 multiply-adds it cost the seed model, whose GEMMs are 256
 * wide, 4-15% and TF32 cartpole at B = 4096 12%, so cuBLAS's first choice stays there) */
#define GEMM_ONE_KERNEL_MACS ((double)(1 << 27))
#define GEMM_ONE_KERNEL_WIDTH 128
#define GEMM_HEURISTICS 16   /* cublasLt candidates looked at for one without split-K */
/* heads_fwd from this many elements of a hidden half (R x H): 2 GEMMs + combine (3 nodes) beat the
 * warp kernel's per-row work (measured: seed B = 256, 16384 x 256, gains 26 us; cartpole B = 256,
 * 16384 x 64, loses 3 us) */
#define HF_GEMM_ELEMS ((long)1 << 21)
/* trunk_fwd in one kernel (cuda_trunk.cu) up to this many rows */
#define TRUNK_ROWS 2048
/* iqn_embed_fwd in one kernel from this many elements of z (R x d), in fp32 math only (with
 * TF32 no clear gain); below, its three ops. 2^21 against 2^22 (H100, with five side lanes):
 * cartpole B = 1024 0.3430 -> 0.3225 ms, seed B = 256 0.5965 -> 0.5855; from 0 (every size)
 * cartpole B = 32 lost 6% */
#define IQN_EMBED_ELEMS ((double)(1 << 21))
/* Own GEMM kernels (cuda_sgemm.cu) up to this many multiply-adds (fp32 math, layers at most
 * OWN_GEMM_WIDTH wide: cuda_gemm.cu), cuBLAS above */
#define OWN_GEMM_MACS ((double)(1 << 25))
/* ... and K, N at most this (the seed model's 256-wide layers ran 8-22% slower on them on the
 * H200) */
#define OWN_GEMM_WIDTH 128

/* Side lanes' kernels below the main lane's in a captured update: where the side's blocks fill the
 * multiprocessors, the critical path's next kernel waits for them to drain (H100, against none:
 * cartpole B = 256 0.1470 -> 0.1370 ms, B = 4096 0.9630 -> 0.9455, but B = 1024 0.3225 -> 0.3325;
 * the seed model within 0.3% at B = 256 and 1024) */
#define SIDE_PRIORITY 1

/* The thresholds a backend reads at each op, not at creation, so that a test or a benchmark may
 * move them on a backend it made (before its first op) to run a path at sizes it does not take
 * by default. */
typedef struct {
    double own_gemm_macs;     /* own GEMM kernels up to this (default OWN_GEMM_MACS; 0: cuBLAS) */
    double iqn_embed_elems;   /* iqn_embed_fwd's one kernel from this (default IQN_EMBED_ELEMS) */
    int trunk_rows;           /* trunk_fwd's one kernel up to this (default TRUNK_ROWS) */
    int side_priority;        /* 1: a captured update runs its side lanes' kernels at the lowest
                               * priority, the main lane's at the highest (default SIDE_PRIORITY);
                               * read when a graph is built */
} dqn_cuda_tunables;

/* the defaults, in the struct's order: a new backend's, and a benchmark's before its arguments */
#define DQN_CUDA_TUNABLES_DEFAULT {OWN_GEMM_MACS, IQN_EMBED_ELEMS, TRUNK_ROWS, SIDE_PRIORITY}

#ifdef __cplusplus
extern "C" {
#endif
/* be's thresholds; NULL unless be is a CUDA backend */
dqn_cuda_tunables *dqn_backend_cuda_tunables(dqn_backend *be);
#ifdef __cplusplus
}
#endif

#endif
