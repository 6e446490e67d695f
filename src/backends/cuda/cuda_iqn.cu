/* The IQN embedding and the ops that broadcast the per-state trunk output h [B, d] over the T
 * per-tau rows r = s*T + i. The backward sums over taus run in tau order inside one thread per
 * (state, column): no atomics, a fixed order. */
#include "backends/cuda/cuda_common.cuh"

#define IQ_BATCH 16   /* iqn_bwd: taus whose inputs a thread loads before storing */

/* cos(pi k tau) for V consecutive k of one row (a float4 store when V is 4), indices 32-bit. The
 * first k of the thread's run: k tau is split exactly into hi + lo (fmaf), hi reduced by an even
 * integer (exact), and sincospif takes the rounded sum in [-1, 1] (within 2 float ulps; the float
 * product pi*k*tau alone would be off by k ulps). The next V - 1 come by rotation through
 * (cos, sin)(pi tau), a few ulps each: one sincospif and four cosines per thread where cospif of
 * every k made the kernel compute-bound (about 40 instructions an element). */
template <int V>
__global__ void k_cos_embed(const float *__restrict__ tau, float *__restrict__ C, int R, int n_cos) {
    KERNEL_PROLOGUE();
    const int nv = n_cos / V, n = R * nv;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += gridDim.x * blockDim.x) {
        const int r = e / nv, k0 = e % nv * V;
        const float t = tau[r];
        float o[V];
        const float kf = (float)(k0 + 1), hi = kf * t, lo = fmaf(kf, t, -hi);
        const float red = hi - 2.0f * rintf(0.5f * hi);
        float s, c;
        sincospif(red + lo, &s, &c);
        o[0] = c;
        if (V > 1) {
            float s1, c1;
            sincospif(t, &s1, &c1);
#pragma unroll
            for (int i = 1; i < V; i++) {
                const float cn = fmaf(c, c1, -s * s1), sn = fmaf(s, c1, c * s1);
                c = cn;
                s = sn;
                o[i] = c;
            }
        }
        stv<V>(C + (size_t)r * n_cos + k0, o);
    }
}

__global__ void k_mul_bcast_fwd(const float *h, const float *phi, float *z, size_t B, int T, int d) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, B * (size_t)T * (size_t)d) {
        size_t r = e / (size_t)d, j = e % (size_t)d;
        z[e] = h[(r / (size_t)T) * (size_t)d + j] * phi[e];
    }
}

__global__ void k_mul_bcast_bwd(const float *h, const float *phi, const float *dz, float *dh,
                                float *dphi, size_t B, int T, int d) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, B * (size_t)d) {
        size_t s = e / (size_t)d, j = e % (size_t)d;
        float hv = h[e], acc = 0.0f;
        for (int i = 0; i < T; i++) {
            size_t q = (s * (size_t)T + (size_t)i) * (size_t)d + j;
            float g = dz[q];
            acc += g * phi[q];
            dphi[q] = g * hv;
        }
        dh[e] = acc;
    }
}

__global__ void k_concat_bcast_fwd(const float *z, const float *h, float *out, size_t B, int T,
                                   int d) {
    KERNEL_PROLOGUE();
    size_t w = 2 * (size_t)d;
    GRID_STRIDE(e, B * (size_t)T * w) {
        size_t r = e / w, c = e % w;
        out[e] = c < (size_t)d ? z[r * (size_t)d + c] : h[(r / (size_t)T) * (size_t)d + (c - d)];
    }
}

__global__ void k_concat_bcast_bwd(const float *dout, float *dz, float *dh, size_t B, int T, int d) {
    KERNEL_PROLOGUE();
    GRID_STRIDE(e, B * (size_t)d) {
        size_t s = e / (size_t)d, j = e % (size_t)d;
        float acc = dh[e];
        for (int i = 0; i < T; i++) {
            size_t r = s * (size_t)T + (size_t)i;
            const float *row = dout + r * 2 * (size_t)d;
            dz[r * (size_t)d + j] = row[j];
            acc += row[d + j];
        }
        dh[e] = acc;
    }
}

dqn_status cuda_cos_embed(dqn_backend *be, const float *tau, float *C, int R, int n_cos) {
    CUDA_ARG(R >= 0 && n_cos >= 0, "cos_embed: bad shape R=%d n_cos=%d", R, n_cos);
    cuda_impl *c = cuda_of(be);
    const int V = bc_vec(n_cos, C, NULL, NULL, NULL);
    LAUNCH_VEC(k_cos_embed, V, (size_t)R * (size_t)(n_cos / V), "cos_embed", tau, C, R, n_cos);
}

dqn_status cuda_mul_bcast_fwd(dqn_backend *be, const float *h, const float *phi, float *z, int B,
                              int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "mul_bcast_fwd: bad shape B=%d T=%d d=%d", B, T, d);
    LAUNCH_1D(k_mul_bcast_fwd, (size_t)B * (size_t)T * (size_t)d, h, phi, z, (size_t)B, T, d);
}

dqn_status cuda_mul_bcast_bwd(dqn_backend *be, const float *h, const float *phi, const float *dz,
                              float *dh, float *dphi, int B, int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "mul_bcast_bwd: bad shape B=%d T=%d d=%d", B, T, d);
    LAUNCH_1D(k_mul_bcast_bwd, (size_t)B * (size_t)d, h, phi, dz, dh, dphi, (size_t)B, T, d);
}

dqn_status cuda_concat_bcast_fwd(dqn_backend *be, const float *z, const float *h, float *out, int B,
                                 int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "concat_bcast_fwd: bad shape B=%d T=%d d=%d", B, T, d);
    LAUNCH_1D(k_concat_bcast_fwd, (size_t)B * (size_t)T * 2 * (size_t)d, z, h, out, (size_t)B, T,
              d);
}

dqn_status cuda_concat_bcast_bwd(dqn_backend *be, const float *dout, float *dz, float *dh, int B,
                                 int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "concat_bcast_bwd: bad shape B=%d T=%d d=%d", B, T, d);
    LAUNCH_1D(k_concat_bcast_bwd, (size_t)B * (size_t)d, dout, dz, dh, (size_t)B, T, d);
}

/* ---- fused (issue 3) ---- */

/* z = h * phi and, with cat, cat = [z, h]: one pass instead of two (the BC_ layout) */
template <int V>
__global__ void k_iqn_fwd(const float *__restrict__ h, const float *__restrict__ phi,
                          float *__restrict__ z, float *__restrict__ cat, int B, int T, int d) {
    KERNEL_PROLOGUE();
    const int n = bc_items<V>(B, T, d);
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += gridDim.x * blockDim.x) {
        int s, t0, nt, j;
        bc_item<V>(e, T, d, &s, &t0, &nt, &j);
        float hv[V], p[BC_TAUS][V];
        ldv<V>(hv, h + (size_t)s * d + j);
        bc_load<V>(p, phi, s, T, t0, nt, d, j);
#pragma unroll
        for (int u = 0; u < BC_TAUS; u++) {
            if (u >= nt) break;
            const size_t r = (size_t)s * T + t0 + u;
            float v[V];
#pragma unroll
            for (int i = 0; i < V; i++) v[i] = hv[i] * p[u][i];
            stv<V>(z + r * d + j, v);
            if (cat) {
                stv<V>(cat + r * 2 * d + j, v);
                stv<V>(cat + r * 2 * d + d + j, hv);
            }
        }
    }
}

/* One thread per (state, column), taus in order, in the CPU reference's rounding (no FMA):
 * dz from dcat's first half, dh = sum dz*phi + 1 * sum dcat's second half, dphi through ReLU,
 * and with dps [B, d] the state's sum of dphi over its taus, in tau order.
 * IQ_BATCH taus' inputs are loaded before their stores, so a batch costs one round trip. */
__global__ void k_iqn_bwd(const float *dcat, const float *h, const float *phi, float *dz, float *dh,
                          float *dphi, float *dps, size_t B, int T, int d) {
    KERNEL_PROLOGUE();
    const size_t D2 = 2 * (size_t)d;
    GRID_STRIDE(e, B * (size_t)d) {
        size_t s = e / (size_t)d, j = e % (size_t)d;
        float hv = h[e], am = 0.0f, ac = 0.0f, ps = 0.0f;
        for (int i0 = 0; i0 < T; i0 += IQ_BATCH) {
            float gz[IQ_BATCH], c2[IQ_BATCH], p[IQ_BATCH];
#pragma unroll
            for (int u = 0; u < IQ_BATCH; u++) {
                const size_t r = s * (size_t)T + (size_t)(i0 + u), q = r * (size_t)d + j;
                const bool in = i0 + u < T;
                gz[u] = !in ? 0.0f : dcat ? dcat[r * D2 + j] : dz[q];
                c2[u] = in && dcat ? dcat[r * D2 + (size_t)d + j] : 0.0f;
                p[u] = in ? phi[q] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < IQ_BATCH; u++) {
                if (i0 + u >= T) break;
                const size_t q = (s * (size_t)T + (size_t)(i0 + u)) * (size_t)d + j;
                if (dcat) {
                    dz[q] = gz[u];
                    ac = __fadd_rn(ac, c2[u]);
                }
                am = __fadd_rn(am, __fmul_rn(gz[u], p[u]));
                const float g = __fmul_rn(__fmul_rn(gz[u], hv), (float)(p[u] > 0.0f));
                dphi[q] = g;
                ps = __fadd_rn(ps, g);
            }
        }
        dh[e] = dcat ? __fadd_rn(am, ac) : am;
        if (dps) dps[e] = ps;
    }
}

dqn_status cuda_iqn_fwd(dqn_backend *be, const float *h, const float *phi, float *z, float *cat,
                        int B, int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "iqn_fwd: bad shape B=%d T=%d d=%d", B, T, d);
    cuda_impl *c = cuda_of(be);
    const int V = bc_vec(d, h, phi, z, cat);
    LAUNCH_VEC(k_iqn_fwd, V, bc_count(B, T, d, V), "iqn_fwd", h, phi, z, cat, B, T, d);
}

/* dphi_b: the per-state sums in the scratch's upper half, then a column sum over B rows (its
 * partials in the lower half) instead of one over B*T rows; where they would not fit, the latter */
dqn_status cuda_iqn_bwd(dqn_backend *be, const float *dcat, const float *h, const float *phi,
                        float *dz, float *dh, float *dphi, float *dphi_b, int B, int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "iqn_bwd: bad shape B=%d T=%d d=%d", B, T, d);
    cuda_impl *c = cuda_of(be);
    const size_t half = CUDA_SCRATCH_FLOATS / 2, n = (size_t)B * (size_t)d;
    float *dps = dphi_b && n <= half && 2 * (size_t)COLSUM_MAX_PARTS * (size_t)d <= half
                     ? c->scratch + half
                     : NULL;
    if (n > 0)
        KLAUNCH(k_iqn_bwd, cuda_blocks(c, n, CUDA_THREADS), CUDA_THREADS, 0, dcat, h, phi, dz, dh,
                dphi, dps, (size_t)B, T, d);
    if (!dphi_b) return DQN_OK;
    if (dps) return cuda_colsum(c, dps, B, d, NULL, NULL, NULL, NULL, dphi_b);
    return cuda_colsum(c, dphi, B * T, d, NULL, NULL, NULL, NULL, dphi_b);
}
