/* The bottleneck split's elementwise parts: the per-sample half W_bn_h h + b, computed on
 * B rows, added to every tau's row of the z half with the ReLU; and, backward, the ReLU mask with
 * the per-sample sum over taus that the h half's gradients need. The tau sums run in tau order in
 * one thread per (sample, column), in the CPU reference's rounding (no FMA). */
#include "backends/cuda/cuda_health.cuh"

#define RT_BATCH 16   /* relu_bwd_tausum: taus whose inputs a thread loads before storing */

/* the BC_ layout (cuda_common.cuh); Y in place, all of a thread's loads before its stores */
template <int V>
__global__ void k_bcast_add_act(const float *__restrict__ hb, float *Y, int B, int T, int N,
                                int relu) {
    KERNEL_PROLOGUE();
    const int n = bc_items<V>(B, T, N);
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += gridDim.x * blockDim.x) {
        int s, t0, nt, k;
        bc_item<V>(e, T, N, &s, &t0, &nt, &k);
        float hv[V], y[BC_TAUS][V];
        ldv<V>(hv, hb + (size_t)s * N + k);
        bc_load<V>(y, Y, s, T, t0, nt, N, k);
#pragma unroll
        for (int u = 0; u < BC_TAUS; u++) {
            if (u >= nt) break;
#pragma unroll
            for (int i = 0; i < V; i++) {
                const float v = __fadd_rn(y[u][i], hv[i]);
                y[u][i] = relu && !(v > 0.0f) ? 0.0f : v;
            }
            stv<V>(Y + ((size_t)s * T + t0 + u) * N + k, y[u]);
        }
    }
}

/* RT_BATCH taus' inputs are loaded before their stores: a batch costs one round trip. HOST: the
 * check of dus of a deferred health plan (cuda_health_hosted) on the sums as they are stored
 * (clamped first in guard mode); block b writes partial b. */
template <bool HOST>
__global__ void k_relu_bwd_tausum(const float *u, float *du, float *dus, size_t B, int T, int N,
                                  cuda_hosted hs) {
    KERNEL_PROLOGUE();
    hacc a;
    float bound = 0.0f;
    if (HOST) {
        acc_init(&a);
        bound = hosted_bound(&hs);
    }
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
        if (HOST) acc = scan_val(&a, e, acc, bound, hs.guard);
        dus[e] = acc;
    }
    if (HOST) {
        __shared__ hacc red[HW];
        block_reduce(&a, red);
        if (threadIdx.x == 0) hosted_put(&hs, &a, bound);
    }
}
static_assert(CUDA_THREADS == HT, "k_relu_bwd_tausum's hosted check: the health kernels' blocks");

dqn_status cuda_bcast_add_act(dqn_backend *be, const float *hb, float *Y, int B, int T, int N,
                              dqn_act act) {
    CUDA_ARG(B >= 0 && T >= 0 && N >= 0, "bcast_add_act: bad shape B=%d T=%d N=%d", B, T, N);
    CUDA_ARG(act == DQN_ACT_NONE || act == DQN_ACT_RELU, "bcast_add_act: act = %d", (int)act);
    cuda_impl *c = cuda_of(be);
    const int V = bc_vec(N, hb, Y, NULL, NULL), relu = act == DQN_ACT_RELU;
    LAUNCH_VEC(c, k_bcast_add_act, V, bc_count(B, T, N, V), "bcast_add_act", hb, Y, B, T, N, relu);
}

dqn_status cuda_relu_bwd_tausum(dqn_backend *be, const float *u, float *du, float *dus, int B,
                                int T, int N, const void *hplan) {
    CUDA_ARG(B >= 0 && T >= 0 && N >= 0, "relu_bwd_tausum: bad shape B=%d T=%d N=%d", B, T, N);
    cuda_impl *c = cuda_of(be);
    const size_t n = (size_t)B * (size_t)N;
    const unsigned grid = cuda_blocks(c, n, CUDA_THREADS);
    /* the plan hosted: dus's check, a partial for every block; else its own kernel after */
    cuda_hosted k;
    const bool host = hosted_one(hplan, &k, dus, n, grid, CUDA_THREADS);
    if (host)
        KLAUNCH(c, k_relu_bwd_tausum<true>, grid, CUDA_THREADS, 0, u, du, dus, (size_t)B, T, N, k);
    else if (n > 0)
        KLAUNCH(c, k_relu_bwd_tausum<false>, grid, CUDA_THREADS, 0, u, du, dus, (size_t)B, T, N, k);
    return hplan && !host ? cuda_health_check(be, hplan) : DQN_OK;
}
