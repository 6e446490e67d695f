/* GFLOP/s of the CPU backend's three linear-layer GEMMs at the model's shapes: the built-in GEMM
 * and, in an OpenBLAS build, OpenBLAS's in the same run, with the built-in one's time as a ratio
 * to OpenBLAS's (below 1: the built-in one is faster).
 * usage: bench_gemm [threads] [isa]   (threads: OpenBLAS pool size, default 1; isa: the built-in
 * GEMM's tile kernels, avx512 | avx2 | portable, default the best this CPU runs) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

enum { XWT, DYW, DYTX };
static const char *const op_name[] = {"Y=XW^T+b", "dX=dY W", "dW=dY^T X"};

/* one layer's GEMM: M rows, K inputs, N outputs; what: the model's layer it stands for */
typedef struct {
    int op, M, K, N;
    const char *what;
} shape;

/* The cartpole preset's update (B 32, 8 taus, d 64, n_cos 64, head_hidden 64; the online pass
 * runs on [x; x'], 64 states), then the seed model's width at a large batch. */
static const shape shapes[] = {
    {XWT, 64, 4, 64, "trunk in"},
    {XWT, 64, 64, 128, "grn b"},
    {XWT, 512, 64, 64, "iqn phi"},
    {XWT, 512, 64, 128, "heads v1|a1"},
    {DYW, 256, 64, 128, "heads v1|a1"},
    {DYTX, 256, 64, 128, "heads v1|a1"},
    {DYTX, 256, 64, 64, "iqn phi"},
    {DYW, 32, 64, 128, "grn b"},
    {DYTX, 32, 64, 128, "grn b"},
    {XWT, 8192, 256, 256, "seed width"},
    {DYW, 8192, 256, 256, "seed width"},
    {DYTX, 8192, 256, 256, "seed width"},
};

static dqn_status run(int op, int builtin, const float *X, const float *W, const float *b,
                      float *Y, float *dX, float *dW, int M, int K, int N) {
    dqn_cpu_gemm_force_builtin(builtin);
    switch (op) {
        case XWT:
            return dqn_gemm_xwt(X, W, b, Y, M, K, N);
        case DYW:
            return dqn_gemm_dyw(Y, W, dX, M, K, N);
        default:
            return dqn_gemm_dytx(Y, X, dW, M, K, N);
    }
}

/* seconds per call over at least 0.2 s, after a warm-up call */
static double time_gemm(int op, int builtin, const float *X, const float *W, const float *b,
                        float *Y, float *dX, float *dW, int M, int K, int N) {
    if (run(op, builtin, X, W, b, Y, dX, dW, M, K, N) != DQN_OK) return -1;
    long reps = 0;
    double t0 = now(), t = 0;
    do {
        for (int i = 0; i < 16; i++)
            if (run(op, builtin, X, W, b, Y, dX, dW, M, K, N) != DQN_OK) return -1;
        reps += 16;
        t = now() - t0;
    } while (t < 0.2);
    return t / reps;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (dqn_cpu_set_threads(threads) != DQN_OK) {
        fprintf(stderr, "bad thread count %s\n", argv[1]);
        return 2;
    }
    if (argc > 2 && !dqn_gemm_builtin_force_isa(argv[2])) {
        fprintf(stderr, "bench_gemm: %s: no such tile kernels on this CPU\n", argv[2]);
        return 2;
    }
    const int peer = dqn_cpu_have_openblas();
    printf("builtin GEMM tile kernels: %s; peer: %s\n", dqn_gemm_builtin_isa(),
           peer ? "openblas" : "none (built without OpenBLAS)");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *sh = &shapes[si];
        const int M = sh->M, K = sh->K, N = sh->N;
        float *X = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
        float *b = malloc(sizeof(float) * N), *Y = malloc(sizeof(float) * M * N);
        float *dX = malloc(sizeof(float) * M * K), *dW = malloc(sizeof(float) * N * K);
        if (!X || !W || !b || !Y || !dX || !dW) return 1;
        for (int i = 0; i < M * K; i++) X[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        for (int i = 0; i < N * K; i++) W[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
        for (int i = 0; i < N; i++) b[i] = 0.01f * i;
        for (int i = 0; i < M * N; i++) Y[i] = (float)((i * 31) % 997) / 997.0f - 0.5f;
        const double flop = 2.0 * M * K * N;
        double tb = time_gemm(sh->op, 1, X, W, b, Y, dX, dW, M, K, N);
        double tp = peer ? time_gemm(sh->op, 0, X, W, b, Y, dX, dW, M, K, N) : 0;
        if (tb < 0 || tp < 0) return 1;
        printf("gemm %-10s %-12s M=%-5d K=%-4d N=%-4d builtin %7.2f GFLOP/s %8.2f us",
               op_name[sh->op], sh->what, M, K, N, flop / tb * 1e-9, tb * 1e6);
        if (peer)
            printf("  openblas(threads=%d) %7.2f GFLOP/s %8.2f us  builtin/openblas time %.2f",
                   dqn_cpu_threads(), flop / tp * 1e-9, tp * 1e6, tb / tp);
        printf("\n");
        free(X);
        free(W);
        free(b);
        free(Y);
        free(dX);
        free(dW);
    }
    dqn_cpu_gemm_force_builtin(0);
    return 0;
}
