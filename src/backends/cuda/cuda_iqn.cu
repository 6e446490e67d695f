/* The IQN embedding and the ops that broadcast the per-state trunk output h [B, d] over the T
 * per-tau rows r = s*T + i. The backward sums over taus run in tau order inside one thread per
 * (state, column): no atomics, a fixed order. */
#include "backends/cuda/cuda_health.cuh"

#define IQ_BATCH 16   /* iqn_bwd: taus whose inputs a thread loads before storing */

/* cos(pi k tau) for V consecutive k from k0 + 1 of one row. The first k of the run: k tau is
 * split exactly into hi + lo (fmaf), hi reduced by an even integer (exact), and sincospif takes the
 * rounded sum in [-1, 1] (within 2 float ulps; the float product pi*k*tau alone would be off by k
 * ulps). The next V - 1 come by rotation through (cos, sin)(pi tau), a few ulps each: one
 * sincospif and four cosines per thread where cospif of every k made the kernel compute-bound
 * (about 40 instructions an element). */
template <int V> __device__ __forceinline__ void cos_run(float t, int k0, float (&o)[V]) {
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
}

/* C [R, n_cos], a row's V consecutive k a thread (a float4 store when V is 4), indices 32-bit */
template <int V>
__global__ void k_cos_embed(const float *__restrict__ tau, float *__restrict__ C, int R, int n_cos) {
    KERNEL_PROLOGUE();
    const int nv = n_cos / V, n = R * nv;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n; e += gridDim.x * blockDim.x) {
        const int r = e / nv, k0 = e % nv * V;
        float o[V];
        cos_run<V>(tau[r], k0, o);
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
    LAUNCH_VEC(c, k_cos_embed, V, (size_t)R * (size_t)(n_cos / V), "cos_embed", tau, C, R, n_cos);
}

dqn_status cuda_mul_bcast_fwd(dqn_backend *be, const float *h, const float *phi, float *z, int B,
                              int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "mul_bcast_fwd: bad shape B=%d T=%d d=%d", B, T, d);
    LAUNCH_1D(be, k_mul_bcast_fwd, (size_t)B * (size_t)T * (size_t)d, h, phi, z, (size_t)B, T, d);
}

dqn_status cuda_mul_bcast_bwd(dqn_backend *be, const float *h, const float *phi, const float *dz,
                              float *dh, float *dphi, int B, int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "mul_bcast_bwd: bad shape B=%d T=%d d=%d", B, T, d);
    LAUNCH_1D(be, k_mul_bcast_bwd, (size_t)B * (size_t)d, h, phi, dz, dh, dphi, (size_t)B, T, d);
}

dqn_status cuda_concat_bcast_fwd(dqn_backend *be, const float *z, const float *h, float *out, int B,
                                 int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "concat_bcast_fwd: bad shape B=%d T=%d d=%d", B, T, d);
    LAUNCH_1D(be, k_concat_bcast_fwd, (size_t)B * (size_t)T * 2 * (size_t)d, z, h, out, (size_t)B, T,
              d);
}

dqn_status cuda_concat_bcast_bwd(dqn_backend *be, const float *dout, float *dz, float *dh, int B,
                                 int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "concat_bcast_bwd: bad shape B=%d T=%d d=%d", B, T, d);
    LAUNCH_1D(be, k_concat_bcast_bwd, (size_t)B * (size_t)d, dout, dz, dh, (size_t)B, T, d);
}

/* ---- fused: z (and cat) in one pass; the backward in one kernel ---- */

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
 * IQ_BATCH taus' inputs are loaded before their stores, so a batch costs one round trip.
 * HOST: the health plan of dz (cuda_health_hosted), run as the kernel loads dz: each value is
 * scanned (and, with guard, clamped, the clamp stored back) before it is used; block b writes
 * partial b of nparts (grid <= nparts). */
template <bool HOST>
__global__ void k_iqn_bwd(const float *dcat, const float *h, const float *phi, float *dz, float *dh,
                          float *dphi, float *dps, size_t B, int T, int d, cuda_hosted hs) {
    KERNEL_PROLOGUE();
    const size_t D2 = 2 * (size_t)d;
    hacc a;
    float bound = 0.0f;
    if (HOST) {
        acc_init(&a);
        bound = hosted_bound(&hs);
    }
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
                if (HOST) gz[u] = scan_one(&a, dz, q, gz[u], bound, hs.guard);
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
    if (HOST) {
        __shared__ hacc red[HW];
        block_reduce(&a, red);
        if (threadIdx.x == 0) hosted_put(&hs, &a, bound);
    }
}
static_assert(CUDA_THREADS == HT, "k_iqn_bwd's block reduction: the health kernels' block shape");

dqn_status cuda_iqn_fwd(dqn_backend *be, const float *h, const float *phi, float *z, float *cat,
                        int B, int T, int d) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "iqn_fwd: bad shape B=%d T=%d d=%d", B, T, d);
    cuda_impl *c = cuda_of(be);
    const int V = bc_vec(d, h, phi, z, cat);
    LAUNCH_VEC(c, k_iqn_fwd, V, bc_count(B, T, d, V), "iqn_fwd", h, phi, z, cat, B, T, d);
}

/* dphi_b: the per-state sums in the scratch's upper half, then a column sum over B rows (its
 * partials in the lower half) instead of one over B*T rows; where they would not fit, the latter */
dqn_status cuda_iqn_bwd(dqn_backend *be, const float *dcat, const float *h, const float *phi,
                        float *dz, float *dh, float *dphi, float *dphi_b, int B, int T, int d,
                        const void *hplan) {
    CUDA_ARG(B >= 0 && T >= 0 && d >= 0, "iqn_bwd: bad shape B=%d T=%d d=%d", B, T, d);
    CUDA_ARG(!hplan || !dcat, "iqn_bwd: a health plan of dz needs dz as the input (dcat NULL)");
    cuda_impl *c = cuda_of(be);
    const size_t half = CUDA_SCRATCH_FLOATS / 2, n = (size_t)B * (size_t)d;
    float *dps = dphi_b && n <= half && 2 * (size_t)COLSUM_MAX_PARTS * (size_t)d <= half
                     ? c->scratch + half
                     : NULL;
    /* the plan hosted: one check of exactly dz's B*T rows */
    cuda_hosted hs;
    int nk = 0;
    if (hplan) cuda_health_hosted(hplan, &hs, 1, &nk);
    if (!(nk == 1 && hs.x == dz && hs.n == n * (size_t)T && hs.nparts >= 1 && n > 0)) {
        if (hplan) DQN_TRY(cuda_health_check(be, hplan));
        memset(&hs, 0, sizeof hs);
    }
    unsigned grid = cuda_blocks(c, n, CUDA_THREADS);
    if (hs.nparts && (unsigned)hs.nparts < grid) grid = (unsigned)hs.nparts;
    if (n > 0 && hs.nparts)
        KLAUNCH(c, k_iqn_bwd<true>, grid, CUDA_THREADS, 0, dcat, h, phi, dz, dh, dphi, dps,
                (size_t)B, T, d, hs);
    else if (n > 0)
        KLAUNCH(c, k_iqn_bwd<false>, grid, CUDA_THREADS, 0, dcat, h, phi, dz, dh, dphi, dps,
                (size_t)B, T, d, hs);
    if (!dphi_b) return DQN_OK;
    if (dps) return cuda_colsum(c, dps, B, d, NULL, NULL, NULL, NULL, dphi_b);
    return cuda_colsum(c, dphi, B * T, d, NULL, NULL, NULL, NULL, dphi_b);
}

/* ---- the embedding in one kernel ---- */

/* z = h * ReLU(W cos(pi k tau) + b). W^T [K][D] stays in shared memory for the block's life; each
 * warp takes RPW rows of a tile at a time, writes their cosines to its own slice of shared memory
 * (and to C for the rows a backward reads), and each lane computes CPL columns of them: 64
 * accumulators, RPW/4 + CPL/4 shared loads a k for 64 FMAs. No barrier after W's, so the warps
 * drift apart and one's stores overlap another's arithmetic. The cuBLAS GEMM this replaces ran at
 * 31 TFLOP/s (K = 64 is short for its tiles) and wrote phi for iqn_fwd to read back; here phi is
 * written only where the backward needs it. */
#define IE_WARPS 8
#define IE_MAX_K 64

template <int CPL> struct ie_shape {
    static constexpr int D = 32 * CPL, RPW = 64 / CPL, TR = IE_WARPS * RPW;
    static constexpr int V = CPL < 4 ? CPL : 4, G = CPL / V;   /* a lane's columns: G runs of V */
    static constexpr size_t smem(int K) { return (size_t)K * (D + TR) * sizeof(float); }
};
/* hosting: a thread's figures of phi and z, then the block reduction's warps */
#define IE_HOST_SMEM ((2 * IE_WARPS * 32 + IE_WARPS) * sizeof(hacc))
static_assert(IE_WARPS == HW, "block_reduce: the health kernels' block shape");

/* The health plan of phi's and z's first keep rows (cuda_health_hosted), computed here: a
 * thread sums its tile's finite values in float registers (|x| <= 1e18, so no square
 * overflows), folds them into its own double figures in shared memory after the tile, and
 * rescans the tile exactly from memory when its sums saw a non-finite value or a magnitude the
 * float sums cannot hold. */
typedef struct {
    cuda_hosted k[2];   /* phi's, z's: unguarded, as many partials each (k[0].nparts 0: none) */
} ie_host;

typedef struct {
    float mx, sq, ab;
} ie_fsum;

__device__ __forceinline__ void ie_add(ie_fsum *f, float v) {
    const float a = fabsf(v);
    f->mx = fmaxf(f->mx, a);   /* ignores a NaN; ab does not */
    f->sq = fmaf(v, v, f->sq);
    f->ab += a;
}

/* 1 if the float sums hold the tile's figures: all finite, no square past float's range and no
 * tile of only sub-1e-18 values whose squares would flush */
__device__ __forceinline__ bool ie_exact(const ie_fsum *f) {
    return f->ab <= 3.0e38f && f->mx <= 1.0e18f && !(f->mx > 0.0f && f->mx < 1.0e-18f);
}

template <int CPL>
__device__ void ie_fold(hacc *a, const ie_fsum *f, const float *x, int row0, int rows, int lane) {
    typedef ie_shape<CPL> S;
    if (ie_exact(f)) {
        a->maxabs = fmaxf(a->maxabs, f->mx);
        a->sumsq += (double)f->sq;
        a->sumabs += (double)f->ab;
        return;
    }
    for (int i = 0; i < rows; i++)
        for (int g = 0; g < S::G; g++)
            for (int v = 0; v < S::V; v++) {
                const size_t idx = (size_t)(row0 + i) * S::D + g * 32 * S::V + lane * S::V + v;
                scan_one(a, NULL, idx, x[idx], 0.0f, false);
            }
}

template <int CPL, bool HOST>
__global__ void __launch_bounds__(IE_WARPS * 32, 2)
    k_iqn_embed(const float *__restrict__ tau, const float *__restrict__ W,
                const float *__restrict__ b, const float *__restrict__ h, float *__restrict__ C,
                float *__restrict__ phi, float *__restrict__ z, float *__restrict__ cat, int R,
                int T, int K, int keep, ie_host hs) {
    typedef ie_shape<CPL> S;
    constexpr int D = S::D, RPW = S::RPW, TR = S::TR, V = S::V, G = S::G;
    extern __shared__ float4 ie_sm[];
    float *Ws = (float *)ie_sm;   /* [K][D] */
    KERNEL_PROLOGUE();
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    float *Aw = Ws + K * D + w * RPW;   /* [K][TR]: this warp's RPW columns of it */
    hacc *hst = (hacc *)(Ws + K * (D + TR));   /* HOST: [2][threads] phi's, z's; [IE_WARPS] */
    if (HOST) {
        acc_init(&hst[tid]);
        acc_init(&hst[IE_WARPS * 32 + tid]);
    }
    /* lanes along j (conflict-free stores), 4 k a load (a row's sectors then come from L1) */
    for (int e = tid; e < K / 4 * D; e += blockDim.x) {
        const int j = e % D, k = e / D * 4;
        float t[4];
        ldv<4>(t, W + (size_t)j * K + k);
#pragma unroll
        for (int i = 0; i < 4; i++) Ws[(k + i) * D + j] = t[i];
    }
    float bias[CPL];
#pragma unroll
    for (int g = 0; g < G; g++) {
        float t[V];
        ldv<V>(t, b + g * 32 * V + lane * V);
#pragma unroll
        for (int v = 0; v < V; v++) bias[g * V + v] = t[v];
    }
    __syncthreads();
    const int tiles = (R + TR - 1) / TR;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int row0 = tile * TR + w * RPW;
        if (row0 >= R) continue;   /* warp-uniform */
        __syncwarp();   /* the last rows' cosines read */
        {   /* a lane keeps one row: its k runs share the rotation's base */
            const int r = lane % RPW, row = row0 + r;
            const float t = row < R ? tau[row] : 0.0f;
            for (int kq = lane / RPW; kq < K / 4; kq += 32 / RPW) {
                float o[4];
                cos_run<4>(t, kq * 4, o);
#pragma unroll
                for (int i = 0; i < 4; i++) Aw[(kq * 4 + i) * TR + r] = o[i];
                if (C && row < keep) stv<4>(C + (size_t)row * K + kq * 4, o);
            }
        }
        __syncwarp();
        float acc[RPW][CPL];
#pragma unroll
        for (int i = 0; i < RPW; i++)
#pragma unroll
            for (int j = 0; j < CPL; j++) acc[i][j] = 0.0f;
#pragma unroll 2
        for (int k = 0; k < K; k++) {
            float a[RPW], bb[CPL];
#pragma unroll
            for (int i = 0; i < RPW; i += 4) {
                float t[4];
                ldv<4>(t, Aw + k * TR + i);
#pragma unroll
                for (int v = 0; v < 4; v++) a[i + v] = t[v];
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                float t[V];
                ldv<V>(t, Ws + k * D + g * 32 * V + lane * V);
#pragma unroll
                for (int v = 0; v < V; v++) bb[g * V + v] = t[v];
            }
#pragma unroll
            for (int i = 0; i < RPW; i++)
#pragma unroll
                for (int j = 0; j < CPL; j++) acc[i][j] = fmaf(a[i], bb[j], acc[i][j]);
        }
        ie_fsum fs[2] = {{0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int i = 0; i < RPW; i++) {
            const int row = row0 + i;
            if (row >= R) break;
            const float *hs = h + (size_t)(row / T) * D;
#pragma unroll
            for (int g = 0; g < G; g++) {
                const int col = g * 32 * V + lane * V;
                float hv[V], p[V], zz[V];
                ldv<V>(hv, hs + col);
#pragma unroll
                for (int v = 0; v < V; v++) {
                    const float x = acc[i][g * V + v] + bias[g * V + v];
                    p[v] = x > 0.0f ? x : 0.0f;   /* the CPU's ReLU: NaN becomes 0 there too */
                    zz[v] = hv[v] * p[v];
                }
                if (HOST && row < keep)
#pragma unroll
                    for (int v = 0; v < V; v++) {
                        ie_add(&fs[0], p[v]);
                        ie_add(&fs[1], zz[v]);
                    }
                if (phi && row < keep) stv<V>(phi + (size_t)row * D + col, p);
                stv<V>(z + (size_t)row * D + col, zz);
                if (cat) {
                    stv<V>(cat + (size_t)row * 2 * D + col, zz);
                    stv<V>(cat + (size_t)row * 2 * D + D + col, hv);
                }
            }
        }
        if (HOST && row0 < keep) {
            const int rows = min(RPW, min(R, keep) - row0);
            ie_fold<CPL>(&hst[tid], &fs[0], phi, row0, rows, lane);
            ie_fold<CPL>(&hst[IE_WARPS * 32 + tid], &fs[1], z, row0, rows, lane);
        }
    }
    if (HOST) {
        hacc *red = hst + 2 * IE_WARPS * 32;
        for (int c = 0; c < 2; c++) {
            hacc a = hst[c * IE_WARPS * 32 + tid];
            block_reduce(&a, red);
            if (tid == 0) hosted_put(&hs.k[c], &a, hosted_bound(&hs.k[c]));
        }
    }
}

/* The kernels' shared memory above the 48 KiB default is asked for once, outside any capture. */
template <int CPL> static dqn_status ie_init(void) {
    const int s = (int)ie_shape<CPL>::smem(IE_MAX_K);
    CUDA_CHECK(cudaFuncSetAttribute(k_iqn_embed<CPL, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, s));
    CUDA_CHECK(cudaFuncSetAttribute(k_iqn_embed<CPL, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    s + (int)IE_HOST_SMEM));
    return DQN_OK;
}

dqn_status cuda_iqn_embed_init(void) {
    DQN_TRY(ie_init<2>());
    DQN_TRY(ie_init<4>());
    return ie_init<8>();
}

template <int CPL, bool HOST>
static dqn_status ie_launch(cuda_impl *c, const float *tau, const float *W, const float *b,
                            const float *h, float *C, float *phi, float *z, float *cat, int R,
                            int T, int K, int keep, const ie_host *hs) {
    typedef ie_shape<CPL> S;
    const size_t smem = S::smem(K) + (HOST ? IE_HOST_SMEM : 0);
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_iqn_embed<CPL, HOST>,
                                                             IE_WARPS * 32, smem));
    const int tiles = (R + S::TR - 1) / S::TR;
    int grid = c->sm_count * (per_sm > 0 ? per_sm : 1);
    if (tiles < grid) grid = tiles;
    if (HOST && hs->k[0].nparts < grid) grid = hs->k[0].nparts;   /* a partial a block */
    KLAUNCH(c, (k_iqn_embed<CPL, HOST>), grid, IE_WARPS * 32, smem, tau, W, b, h, C, phi, z, cat, R,
            T, K, keep, *hs);
    return DQN_OK;
}

template <int CPL>
static dqn_status ie_run(cuda_impl *c, const float *tau, const float *W, const float *b,
                         const float *h, float *C, float *phi, float *z, float *cat, int R, int T,
                         int K, int keep, const ie_host *hs) {
    return hs->k[0].nparts
               ? ie_launch<CPL, true>(c, tau, W, b, h, C, phi, z, cat, R, T, K, keep, hs)
               : ie_launch<CPL, false>(c, tau, W, b, h, C, phi, z, cat, R, T, K, keep, hs);
}

/* hs from a plan of exactly phi's and z's first keep rows, unguarded (else nparts 0) */
static void ie_hosting(const void *hplan, const float *phi, const float *z, int keep, int d,
                       ie_host *hs) {
    const cuda_hosted *k = hs->k;
    int n = 0;
    cuda_health_hosted(hplan, hs->k, 2, &n);
    const size_t want = (size_t)keep * (size_t)d;
    if (n != 2 || k[0].x != phi || k[1].x != z || k[0].n != want || k[1].n != want ||
        k[0].guard || k[1].guard || k[0].nparts != k[1].nparts || k[0].nparts < 1)
        memset(hs, 0, sizeof *hs);
}

/* the one kernel's shapes and sizes (its buffers must also be 16-byte aligned) */
static int ie_fits(const cuda_impl *c, int R, int n_cos, int d) {
    return (d == 64 || d == 128 || d == 256) && n_cos % 4 == 0 && n_cos > 0 &&
           n_cos <= IE_MAX_K && (double)R * (double)d >= c->tune.iqn_embed_elems &&
           c->compute == CUBLAS_COMPUTE_32F;
}

int cuda_iqn_embed_hosts(dqn_backend *be, int B, int T, int n_cos, int d) {
    return B > 0 && T > 0 && (long)B * T <= INT32_MAX && ie_fits(cuda_of(be), B * T, n_cos, d);
}

dqn_status cuda_iqn_embed_fwd(dqn_backend *be, const float *tau, const float *W, const float *b,
                              const float *h, float *C, float *phi, float *z, float *cat, int B,
                              int T, int n_cos, int d, int keep, const void *hplan) {
    CUDA_ARG(B >= 0 && T >= 0 && n_cos >= 0 && d >= 0 && (long)B * T <= INT32_MAX,
             "iqn_embed_fwd: bad shape B=%d T=%d n_cos=%d d=%d", B, T, n_cos, d);
    CUDA_ARG(keep >= 0 && keep <= B * T, "iqn_embed_fwd: keep=%d rows of %d", keep, B * T);
    CUDA_ARG(tau && W && b && h && C && phi && z, "iqn_embed_fwd: a NULL input or output");
    cuda_impl *c = cuda_of(be);
    const int R = B * T;
    const uintptr_t al = (uintptr_t)W | (uintptr_t)b | (uintptr_t)h | (uintptr_t)C |
                         (uintptr_t)phi | (uintptr_t)z | (uintptr_t)cat;
    const int fits = ie_fits(c, R, n_cos, d) && al % 16 == 0;
    ie_host hs;
    if (fits && hplan && R > 0) ie_hosting(hplan, phi, z, keep, d, &hs);
    else memset(&hs, 0, sizeof hs);
    if (R > 0 && !fits)
        DQN_TRY(dqn_iqn_embed_seq(be, tau, W, b, h, C, phi, z, cat, B, T, n_cos, d));
    else if (R > 0)
        DQN_TRY(d == 64    ? ie_run<2>(c, tau, W, b, h, C, phi, z, cat, R, T, n_cos, keep, &hs)
                : d == 128 ? ie_run<4>(c, tau, W, b, h, C, phi, z, cat, R, T, n_cos, keep, &hs)
                           : ie_run<8>(c, tau, W, b, h, C, phi, z, cat, R, T, n_cos, keep, &hs));
    return hplan && !hs.k[0].nparts ? cuda_health_check(be, hplan) : DQN_OK;
}
