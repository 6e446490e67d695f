/* GFLOP/s of the CPU backend's three linear-layer GEMMs at the trainer's typical shapes.
 * usage: bench_gemm [threads]   (threads: OpenBLAS pool size, default 1) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

enum { XWT, DYW, DYTX };
static const char *const shape_name[] = {"Y=XW^T+b", "dX=dY W", "dW=dY^T X"};

static dqn_status run(int which, const float *X, const float *W, const float *b, float *Y,
                      float *dX, float *dW, int M, int K, int N) {
    switch (which) {
        case XWT:
            return dqn_gemm_xwt(X, W, b, Y, M, K, N);
        case DYW:
            return dqn_gemm_dyw(Y, W, dX, M, K, N);
        default:
            return dqn_gemm_dytx(Y, X, dW, M, K, N);
    }
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (dqn_cpu_set_threads(threads) != DQN_OK) {
        fprintf(stderr, "bad thread count %s\n", argv[1]);
        return 2;
    }
    static const int Ms[] = {1024, 8192}, Ds[] = {64, 256};
    for (int mi = 0; mi < 2; mi++)
        for (int di = 0; di < 2; di++) {
            int M = Ms[mi], K = Ds[di], N = Ds[di];
            float *X = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
            float *b = malloc(sizeof(float) * N), *Y = malloc(sizeof(float) * M * N);
            float *dX = malloc(sizeof(float) * M * K), *dW = malloc(sizeof(float) * N * K);
            if (!X || !W || !b || !Y || !dX || !dW) return 1;
            for (int i = 0; i < M * K; i++) X[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
            for (int i = 0; i < N * K; i++) W[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
            for (int i = 0; i < N; i++) b[i] = 0.01f * i;
            for (int i = 0; i < M * N; i++) Y[i] = (float)((i * 31) % 997) / 997.0f - 0.5f;
            for (int which = XWT; which <= DYTX; which++) {
                double flop = 2.0 * M * K * N, t0 = now(), t = 0;
                int reps = 0;
                if (run(which, X, W, b, Y, dX, dW, M, K, N) != DQN_OK) return 1; /* warm-up */
                t0 = now();
                do {
                    if (run(which, X, W, b, Y, dX, dW, M, K, N) != DQN_OK) return 1;
                    reps++;
                    t = now() - t0;
                } while (t < 0.3);
                printf("gemm=%s threads=%d %-10s M=%-5d K=%-4d N=%-4d %7.2f GFLOP/s\n",
                       dqn_cpu_gemm_name(), dqn_cpu_threads(), shape_name[which], M, K, N,
                       flop * reps / t * 1e-9);
            }
            free(X);
            free(W);
            free(b);
            free(Y);
            free(dX);
            free(dW);
        }
    return 0;
}
