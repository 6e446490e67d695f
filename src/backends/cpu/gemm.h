/* The three GEMMs of a linear layer with W [N, K] (row-major): the built-in GEMM, or OpenBLAS in
 * a DQN_HAVE_OPENBLAS build on a CPU without AVX2 or at more than one thread (gemm.c). Sizes must
 * be positive. */
#ifndef DQN_CPU_GEMM_H
#define DQN_CPU_GEMM_H
#include "dqn.h"

/* Y[M,N] = X[M,K] W^T + b[N] (b may be NULL) */
dqn_status dqn_gemm_xwt(const float *X, const float *W, const float *b, float *Y, int M, int K,
                        int N);
/* dX[M,K] = dY[M,N] W */
dqn_status dqn_gemm_dyw(const float *dY, const float *W, float *dX, int M, int K, int N);
/* dW[N,K] = dY[M,N]^T X[M,K] */
dqn_status dqn_gemm_dytx(const float *dY, const float *X, float *dW, int M, int K, int N);

/* The same with W a column block of a row-major matrix whose rows are ldw >= K floats apart (and,
 * for dX, accumulating into dX when acc): the halves of the bottleneck's [m, 2d] weight. */
dqn_status dqn_gemm_xwt_ld(const float *X, const float *W, int ldw, const float *b, float *Y, int M,
                           int K, int N);
dqn_status dqn_gemm_dyw_ld(const float *dY, const float *W, int ldw, float *dX, int acc, int M,
                           int K, int N);
dqn_status dqn_gemm_dytx_ld(const float *dY, const float *X, float *dW, int ldw, int M, int K,
                            int N);

/* Y = ReLU(X W^T + b) (ReLU as relu_fwd's) in one pass where the GEMM can (the built-in one):
 * returns 1 with the status in *st, else 0 having done nothing (then xwt_ld and relu_fwd). */
int dqn_gemm_xwt_relu(const float *X, const float *W, int ldw, const float *b, float *Y, int M,
                      int K, int N, dqn_status *st);

/* The built-in GEMM itself, in every build (the benchmarks compare it with OpenBLAS's). */
dqn_status dqn_gemm_builtin_xwt_ld(const float *X, const float *W, int ldw, const float *b,
                                   float *Y, int M, int K, int N);
dqn_status dqn_gemm_builtin_xwt_relu(const float *X, const float *W, int ldw, const float *b,
                                     float *Y, int M, int K, int N);
dqn_status dqn_gemm_builtin_dyw_ld(const float *dY, const float *W, int ldw, float *dX, int acc,
                                   int M, int K, int N);
dqn_status dqn_gemm_builtin_dytx_ld(const float *dY, const float *X, float *dW, int ldw, int M,
                                    int K, int N);
/* The built-in GEMM's tile kernels: "avx512", "avx2" or "portable" */
const char *dqn_gemm_builtin_isa(void);

/* For benchmarks only, called while no GEMM runs: route an OpenBLAS build's GEMMs to the built-in
 * one (on != 0) or to OpenBLAS (on == 0), whatever the CPU and threads (a no-op in a built-in
 * build), and make the built-in GEMM use the tile kernels
 * named ("auto", "portable", "avx2", "avx512"; returns 0 where this CPU lacks them). */
void dqn_cpu_gemm_force_builtin(int on);
int dqn_gemm_builtin_force_isa(const char *isa);

#endif
