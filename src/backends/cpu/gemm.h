/* The three GEMMs of a linear layer with W [N, K] (row-major): OpenBLAS when built with
 * DQN_HAVE_OPENBLAS, else a built-in blocked GEMM. Sizes must be positive. */
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

#endif
