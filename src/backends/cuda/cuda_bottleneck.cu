/* The bottleneck split's elementwise parts (issue 3): the per-sample half W_bn_h h + b, computed on
 * B rows, added to every tau's row of the z half with the ReLU; and, backward, the ReLU mask with
 * the per-sample sum over taus that the h half's gradients need. The tau sums run in tau order in
 * one thread per (sample, column), in the CPU reference's rounding (no FMA). */
#include "backends/cuda/cuda_common.cuh"

#define RT_BATCH 16   /* relu_bwd_tausum: taus whose inputs a thread loads before storing */

__global__ void k_bcast_add_act(const float *hb, float *Y, size_t B, int T, int N, int relu) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, B * (size_t)T * (size_t)N) {
        size_t r = e / (size_t)N, k = e % (size_t)N;
        float v = __fadd_rn(Y[e], hb[(r / (size_t)T) * (size_t)N + k]);
        Y[e] = relu && !(v > 0.0f) ? 0.0f : v;
    }
}

/* RT_BATCH taus' inputs are loaded before their stores: a batch costs one round trip */
__global__ void k_relu_bwd_tausum(const float *u, float *du, float *dus, size_t B, int T, int N) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, B * (size_t)N) {
        size_t s = e / (size_t)N, k = e % (size_t)N;
        float acc = 0.0f;
        for (int i0 = 0; i0 < T; i0 += RT_BATCH) {
            float uv[RT_BATCH], dv[RT_BATCH];
#pragma unroll
            for (int v = 0; v < RT_BATCH; v++) {
                size_t q = (s * (size_t)T + (size_t)(i0 + v)) * (size_t)N + k;
                uv[v] = i0 + v < T ? u[q] : 0.0f;
                dv[v] = i0 + v < T ? du[q] : 0.0f;
            }
#pragma unroll
            for (int v = 0; v < RT_BATCH; v++) {
                if (i0 + v >= T) break;
                size_t q = (s * (size_t)T + (size_t)(i0 + v)) * (size_t)N + k;
                float g = __fmul_rn(dv[v], (float)(uv[v] > 0.0f));
                du[q] = g;
                acc = __fadd_rn(acc, g);
            }
        }
        dus[e] = acc;
    }
}

dqn_status cuda_bcast_add_act(dqn_backend *be, const float *hb, float *Y, int B, int T, int N,
                              dqn_act act) {
    CUDA_ARG(B >= 0 && T >= 0 && N >= 0, "bcast_add_act: bad shape B=%d T=%d N=%d", B, T, N);
    CUDA_ARG(act == DQN_ACT_NONE || act == DQN_ACT_RELU, "bcast_add_act: act = %d", (int)act);
    LAUNCH_1D(k_bcast_add_act, (size_t)B * (size_t)T * (size_t)N, hb, Y, (size_t)B, T, N,
              act == DQN_ACT_RELU);
}

dqn_status cuda_relu_bwd_tausum(dqn_backend *be, const float *u, float *du, float *dus, int B,
                                int T, int N) {
    CUDA_ARG(B >= 0 && T >= 0 && N >= 0, "relu_bwd_tausum: bad shape B=%d T=%d N=%d", B, T, N);
    LAUNCH_1D(k_relu_bwd_tausum, (size_t)B * (size_t)N, u, du, dus, (size_t)B, T, N);
}
