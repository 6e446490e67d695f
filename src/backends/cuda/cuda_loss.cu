/* The quantile Huber loss and its gradient. One block per sample: each thread takes (branch, tau)
 * pairs and sums over the Nt targets; the sample's gradient goes to shared memory and the block
 * then writes the sample's whole dZ rows (zero off the taken actions), so every element is written
 * once. The batch loss is a second, single-block pass over the per-sample sums (in targets_huber's
 * kernel, its last block's): a fixed tree, no float atomics. The arithmetic is double, as in the
 * CPU reference (it is a small part of the step). */
#include "backends/cuda/cuda_common.cuh"

#define QH_THREADS 128
#define QH_FINAL_THREADS 1024

/* red[0] + ... + red[n-1] (n a power of two >= 64, red written and synced) by the tree
 * red[t] += red[t + o], o = n/2 .. 1, walked by the block's threads whatever their number; the
 * levels o < 32 run in warp 0 as shuffles, which pair the same elements. Thread 0 gets the
 * total. */
__device__ __forceinline__ double tree_sum_d(double *red, int n) {
    const int tid = threadIdx.x;
    for (int o = n / 2; o >= 32; o >>= 1) {
        for (int t = tid; t < o; t += blockDim.x) red[t] += red[t + o];
        __syncthreads();
    }
    double v = 0.0;
    if (tid < 32) {
        v = red[tid];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

/* The batch loss from the per-sample sums: QH_FINAL_THREADS partial sums (partial v adds
 * weighted[v], weighted[v + QH_FINAL_THREADS], ...), then their tree; the same pairs and bits
 * whatever the block's size (red: QH_FINAL_THREADS doubles of shared memory). */
__device__ __forceinline__ void loss_final(const double *weighted, int B, float *loss_out,
                                           double *red) {
    for (int v = threadIdx.x; v < QH_FINAL_THREADS; v += blockDim.x) {
        double acc = 0.0;
        /* volatile: other blocks' sums, in targets_huber's last block */
        for (int q = v; q < B; q += QH_FINAL_THREADS) acc += ((const volatile double *)weighted)[q];
        red[v] = acc;
    }
    __syncthreads();
    const double total = tree_sum_d(red, QH_FINAL_THREADS);
    if (threadIdx.x == 0) loss_out[0] = (float)(total / B);
}

/* One sample's block (s = blockIdx.x). */
__device__ __forceinline__ void qh_block(const float *Z, const float *tau, const int32_t *act,
                                         const float *y, const float *w, float *dZ,
                                         float *per_sample, double *weighted, int B, int N, int Nt,
                                         const dqn_branches &br, int mode, float kappa,
                                         double inv_k) {
    extern __shared__ double shd[];
    double *red = shd;                                  /* [QH_THREADS] */
    float *grad = (float *)(red + QH_THREADS);          /* [D*N] */
    int *colsel = (int *)(grad + br.D * N);             /* [A]: branch whose taken column, or -1 */
    int s = blockIdx.x, tid = threadIdx.x;
    const int32_t *as = act + (size_t)s * br.D;
    const double k = kappa, norm = 1.0 / ((double)br.D * Nt), ws = w ? w[s] : 1.0;
    double acc = 0.0;
    for (int t0 = tid; t0 < br.D * N; t0 += QH_THREADS) {
        int b = t0 / N, i = t0 % N;
        size_t row = (size_t)s * N + i;
        double z = Z[row * br.A + br.off[b] + as[b]], ti = tau[row];
        const float *yr = y + (mode == DQN_TARGET_MEAN ? (size_t)s : (size_t)s * br.D + b) * Nt;
        double rho = 0.0, drho = 0.0;
        for (int j = 0; j < Nt; j++) {
            double u = yr[j] - z, au = fabs(u), wt = fabs(ti - (u < 0.0 ? 1.0 : 0.0));
            double hr = wt * (au <= k ? 0.5 * u * u : k * (au - 0.5 * k));
            double hd = wt * (au <= k ? u : copysign(k, u));
            /* x * (1/k) rounds as x / k when 1/k is exact (k a power of two, as the default 1);
             * __dmul_rn: no FMA with the sum */
            rho += inv_k > 0.0 ? __dmul_rn(hr, inv_k) : hr / k;
            drho += inv_k > 0.0 ? __dmul_rn(hd, inv_k) : hd / k;
        }
        acc += rho;
        grad[t0] = (float)(-drho * ws * norm / B);   /* du/dz = -1: the target is a constant */
    }
    red[tid] = acc;
    for (int c = tid; c < br.A; c += QH_THREADS) colsel[c] = -1;
    __syncthreads();
    if (tid < br.D) colsel[br.off[tid] + as[tid]] = tid;
    const double total   /* its barriers also publish colsel */ = tree_sum_d(red, QH_THREADS);
    if (tid == 0) {
        double ps = total * norm;
        if (per_sample) per_sample[s] = (float)ps;
        weighted[s] = ws * ps;
    }
    float *dz = dZ + (size_t)s * N * br.A;
    for (int e = tid; e < N * br.A; e += QH_THREADS) {
        int i = e / br.A, c = e % br.A, b = colsel[c];
        dz[e] = b >= 0 ? grad[b * N + i] : 0.0f;
    }
}

__global__ void k_quantile_huber(const float *Z, const float *tau, const int32_t *act,
                                 const float *y, const float *w, float *dZ, float *per_sample,
                                 double *weighted, int B, int N, int Nt, dqn_branches br, int mode,
                                 float kappa, double inv_k) {
    KERNEL_PROLOGUE();
    qh_block(Z, tau, act, y, w, dZ, per_sample, weighted, B, N, Nt, br, mode, kappa, inv_k);
}

__global__ void k_loss_final(const double *weighted, int B, float *loss_out) {
    KERNEL_PROLOGUE();
    __shared__ double red[QH_FINAL_THREADS];
    loss_final(weighted, B, loss_out, red);
}

/* The loss ops' shared checks; *smem: qh_block's shared memory, *inv_k: 1/kappa where exact */
static dqn_status qh_prepare(const char *op, const float *Z, const float *tau, const int32_t *act,
                             const float *y, const float *loss_out, const float *dZ, int B, int N,
                             int Nt, const dqn_branches *br, dqn_target_mode mode, float kappa,
                             size_t *smem, double *inv_k) {
    DQN_TRY(cuda_check_branches(br));
    CUDA_ARG(B >= 1 && N >= 1 && Nt >= 1, "%s: bad shape B=%d N=%d Nt=%d", op, B, N, Nt);
    CUDA_ARG(mode == DQN_TARGET_MEAN || mode == DQN_TARGET_INDEPENDENT,
             "%s: unknown target mode %d", op, (int)mode);
    CUDA_ARG(kappa > 0.0f, "%s: kappa=%g must be > 0", op, (double)kappa);
    CUDA_ARG(Z && tau && act && y && loss_out && dZ, "%s: a required pointer is NULL", op);
    CUDA_ARG((size_t)B <= CUDA_SCRATCH_FLOATS / 2, "%s: B=%d exceeds the scratch", op, B);
    *smem = QH_THREADS * sizeof(double) + (size_t)br->D * N * sizeof(float) +
            (size_t)br->A * sizeof(int);
    if (*smem > 48 * 1024)
        return DQN_ERR(DQN_ERR_UNSUPPORTED,
                       "%s: D*N=%d and A=%d need %zu bytes of shared memory (max 48 KiB)", op,
                       br->D * N, br->A, *smem);
    int e2;
    *inv_k = frexp((double)kappa, &e2) == 0.5 ? 1.0 / (double)kappa : 0.0;
    return DQN_OK;
}

dqn_status cuda_quantile_huber(dqn_backend *be, const float *Z, const float *tau,
                               const int32_t *act, const float *y, const float *w, float *loss_out,
                               float *dZ, float *per_sample, int B, int N, int Nt,
                               const dqn_branches *br, dqn_target_mode mode, float kappa) {
    cuda_impl *c = cuda_of(be);
    size_t smem = 0;
    double inv_k = 0.0;
    DQN_TRY(qh_prepare("quantile_huber", Z, tau, act, y, loss_out, dZ, B, N, Nt, br, mode,
                       kappa, &smem, &inv_k));
    double *weighted = (double *)c->scratch;
    KLAUNCH(c, k_quantile_huber, (unsigned)B, QH_THREADS, smem, Z, tau, act, y, w, dZ, per_sample,
            weighted, B, N, Nt, *br, (int)mode, kappa, inv_k);
    KLAUNCH(c, k_loss_final, 1, QH_FINAL_THREADS, 0, weighted, B, loss_out);
    return DQN_OK;
}

/* targets_huber in one kernel, sample s's block: its targets y (iqn_targets' arithmetic), then
 * qh_block reading them, then with dV its N rows' dueling gradients (dueling_bwd's); the block
 * that finishes last sums the per-sample losses as k_loss_final does (loss_final). */
__global__ void k_targets_huber(dqn_target_io t, const float *Z, const float *tau,
                                const int32_t *act, const float *w, float *dZ, float *per_sample,
                                float *dV, float *dAdv, double *weighted, unsigned *done,
                                float *loss_out, int B, int N, int Nt, dqn_branches br, int mode,
                                float kappa, double inv_k) {
    KERNEL_PROLOGUE();
    extern __shared__ double shd[];
    __shared__ bool last;
    const int s = blockIdx.x, tid = threadIdx.x;
    const int ny = mode == DQN_TARGET_MEAN ? Nt : br.D * Nt;
    const int32_t *as = t.astar + (size_t)s * br.D;
    for (int e = tid; e < ny; e += QH_THREADS) {
        const size_t ge = (size_t)s * ny + e;
        if (mode == DQN_TARGET_MEAN) {
            t.y[ge] = target_mean(t.Zt + ge * (size_t)br.A, as, t.R[s], t.discount[s], br);
        } else {
            const int b = e / Nt, j = e % Nt;
            const float z = t.Zt[((size_t)s * Nt + j) * (size_t)br.A + br.off[b] + as[b]];
            t.y[ge] = t.R[s] + __fmul_rn(t.discount[s], z);   /* as target_mean */
        }
    }
    __syncthreads();   /* the block's targets, read back by qh_block */
    qh_block(Z, tau, act, t.y, w, dZ, per_sample, weighted, B, N, Nt, br, mode, kappa, inv_k);
    if (dV) {
        __syncthreads();   /* the sample's dZ rows */
        for (int i = tid; i < N; i += QH_THREADS) {
            const size_t r = (size_t)s * N + i;
            dueling_bwd_row(dZ + r * (size_t)br.A, dAdv + r * (size_t)br.A, dV + r, br);
        }
    }
    if (tid == 0) {
        __threadfence();   /* weighted[s], written by this thread in qh_block */
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    loss_final(weighted, B, loss_out, shd);
    if (tid == 0) *done = 0;
}

dqn_status cuda_targets_huber(dqn_backend *be, const dqn_target_io *t, const float *Z,
                              const float *tau, const int32_t *act, const float *w,
                              float *loss_out, float *dZ, float *per_sample, float *dV,
                              float *dAdv, int B, int N, int Nt, const dqn_branches *br,
                              dqn_target_mode mode, float kappa) {
    const char *op = "targets_huber";
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(t && t->Zt && t->astar && t->R && t->discount, "%s: NULL targets", op);
    CUDA_ARG(!dV == !dAdv, "%s: dV and dAdv go together (one is NULL)", op);
    size_t smem = 0;
    double inv_k = 0.0;
    DQN_TRY(qh_prepare(op, Z, tau, act, t->y, loss_out, dZ, B, N, Nt, br, mode, kappa, &smem,
                       &inv_k));
    const size_t fin = QH_FINAL_THREADS * sizeof(double);   /* the last block's tree */
    KLAUNCH(c, k_targets_huber, (unsigned)B, QH_THREADS, smem > fin ? smem : fin, *t, Z, tau, act,
            w, dZ, per_sample, dV, dAdv, (double *)c->scratch, c->blocks_done, loss_out, B, N, Nt,
            *br, (int)mode, kappa, inv_k);
    return DQN_OK;
}
