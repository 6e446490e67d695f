/* Elementwise ops: fill, axpy, ReLU and ELU with their backward passes, the GRN gate. One grid-stride
 * loop each; every output element is written by exactly one thread, so y == x is safe. */
#include "backends/cuda/cuda_common.cuh"

__global__ void k_fill(float *x, float v, size_t n) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, n) x[i] = v;
}

__global__ void k_axpy(float a, const float *x, float *y, size_t n) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, n) y[i] += __fmul_rn(a, x[i]);   /* no FMA: the CPU's rounding */
}

__global__ void k_relu_fwd(const float *x, float *y, size_t n) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

__global__ void k_relu_bwd(const float *y, const float *dy, float *dx, size_t n) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, n) dx[i] = dy[i] * (float)(y[i] > 0.0f);   /* a NaN dy stays NaN, as on the CPU */
}

__global__ void k_elu_fwd(const float *x, float *y, size_t n) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : expm1f(v);
    }
}

__global__ void k_elu_bwd(const float *y, const float *dy, float *dx, size_t n) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, n) {
        float v = y[i];
        dx[i] = dy[i] * (v > 0.0f ? 1.0f : v + 1.0f);
    }
}

__global__ void k_gate_fwd(const float *h, const float *g, float *r, size_t M, int d) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, M * (size_t)d) {
        size_t m = i / (size_t)d, j = i % (size_t)d;
        const float *gm = g + m * 2 * (size_t)d;
        r[i] = h[i] + gm[j] * sigmoidf(gm[d + j]);
    }
}

__global__ void k_gate_bwd(const float *g, const float *dr, float *dh, float *dg, size_t M, int d) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(i, M * (size_t)d) {
        size_t m = i / (size_t)d, j = i % (size_t)d;
        const float *gm = g + m * 2 * (size_t)d;
        float *dgm = dg + m * 2 * (size_t)d;
        float a = gm[j], s = sigmoidf(gm[d + j]), e = dr[i];
        dh[i] = e;
        dgm[j] = e * s;
        dgm[d + j] = e * a * s * (1.0f - s);
    }
}

dqn_status cuda_fill(dqn_backend *be, float *x, float v, size_t n) { LAUNCH_1D(be, k_fill, n, x, v, n); }

dqn_status cuda_axpy(dqn_backend *be, float a, const float *x, float *y, size_t n) {
    LAUNCH_1D(be, k_axpy, n, a, x, y, n);
}

dqn_status cuda_relu_fwd(dqn_backend *be, const float *x, float *y, size_t n) {
    LAUNCH_1D(be, k_relu_fwd, n, x, y, n);
}

dqn_status cuda_relu_bwd(dqn_backend *be, const float *y, const float *dy, float *dx, size_t n) {
    LAUNCH_1D(be, k_relu_bwd, n, y, dy, dx, n);
}

dqn_status cuda_elu_fwd(dqn_backend *be, const float *x, float *y, size_t n) {
    LAUNCH_1D(be, k_elu_fwd, n, x, y, n);
}

dqn_status cuda_elu_bwd(dqn_backend *be, const float *y, const float *dy, float *dx, size_t n) {
    LAUNCH_1D(be, k_elu_bwd, n, y, dy, dx, n);
}

dqn_status cuda_gate_fwd(dqn_backend *be, const float *h, const float *g, float *r, int M, int d) {
    CUDA_ARG(M >= 0 && d >= 0, "gate_fwd: bad shape M=%d d=%d", M, d);
    LAUNCH_1D(be, k_gate_fwd, (size_t)M * (size_t)d, h, g, r, (size_t)M, d);
}

dqn_status cuda_gate_bwd(dqn_backend *be, const float *g, const float *dr, float *dh, float *dg,
                         int M, int d) {
    CUDA_ARG(M >= 0 && d >= 0, "gate_bwd: bad shape M=%d d=%d", M, d);
    LAUNCH_1D(be, k_gate_bwd, (size_t)M * (size_t)d, g, dr, dh, dg, (size_t)M, d);
}
