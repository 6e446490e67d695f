/* Dense layers: in fp32 math up to own_gemm_macs multiply-adds through the own kernels
 * (cuda_sgemm.cu), above (and in TF32 math) through cuBLAS. Row-major Y[M,N] = X[M,K] W[N,K]^T is, read column-major,
 * Y^T[N,M] = W^T^T X^T: op(A) = W (stored K x N, transposed), op(B) = X^T (stored K x M).
 * linear_fwd runs on cublasLt with the bias (and ReLU) fused in its epilogue, and linear_bwd's dW
 * GEMM takes db from the BGRADB epilogue where cublasLt has one; the plans (descriptors plus
 * the heuristic's algorithm) are cached by shape and pointer alignment, since the heuristic is
 * host work of tens of microseconds. */
#include "backends/cuda/cuda_common.cuh"

/* The BGRADB kernels do not split the GEMM's reduction (the M rows) across blocks: past this many
 * rows the split-K cuBLAS GEMM plus a one-launch column sum is faster (with BGRADB at every M the
 * cartpole update at B = 4096, M = 131072, went from 1.64 to 1.74 ms). */
#define BGRADB_MAX_ROWS 8192

/* Largest power of two (4..256) that divides the address: the heuristic must not pick a kernel
 * needing more alignment than the model's sub-tensor pointers have. */
static uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 4 && (a % al) != 0) al >>= 1;
    return al;
}

static void plan_release(cuda_lt_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    p->desc = NULL;
    p->a = p->b = p->c = NULL;
}

void cuda_gemm_release(cuda_impl *c) {
    for (int i = 0; i < c->n_plans && i < CUDA_LT_CACHE; i++) plan_release(&c->plans[i]);
    c->n_plans = 0;
}

/* Builds a plan; *found = 0 when cublasLt has no algorithm for it (the caller falls back).
 * Forward: D[N,M] = W^T X^T, epilogue bias and/or ReLU. dgrad: dW^T[K,N] = X^T[K,M] dY[M,N] with
 * db[N] = the sum over the GEMM's k (the M rows of dY) from the BGRADB epilogue. */
static dqn_status plan_build(cuda_impl *c, cuda_lt_plan *p, const float *b, int *found) {
    *found = 0;
    cublasOperation_t ta = p->dgrad ? CUBLAS_OP_N : CUBLAS_OP_T;
    cublasOperation_t tb = p->dgrad ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = p->dgrad ? CUBLASLT_EPILOGUE_BGRADB
                             : p->has_bias ? (p->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                             : (p->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, c->compute, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (p->has_bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b,
                                                    sizeof b));
    if (p->dgrad) {   /* a = X as [K, M], b = dY as [N, M], c = dW^T as [K, N] (column-major) */
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, (uint64_t)p->K, (uint64_t)p->M, p->K));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, (uint64_t)p->N, (uint64_t)p->M, p->N));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)p->K, (uint64_t)p->N, p->ld));
    } else {
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, (uint64_t)p->K, (uint64_t)p->N, p->ld));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, (uint64_t)p->K, (uint64_t)p->M, p->K));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)p->N, (uint64_t)p->M, p->N));
    }

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = CUDA_WORKSPACE_BYTES;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    /* forward: B = X, A = W, C = D = Y; dgrad: A = X, B = dY, C = D = dW */
    const uint32_t al[4] = {p->dgrad ? p->align[1] : p->align[0],
                            p->dgrad ? p->align[0] : p->align[1], p->align[2], p->align[2]};
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]);
    cublasLtMatmulHeuristicResult_t res[GEMM_HEURISTICS];
    int n_res = 0;
    const int one = c->compute == CUBLAS_COMPUTE_32F && p->K <= GEMM_ONE_KERNEL_WIDTH &&
                    p->N <= GEMM_ONE_KERNEL_WIDTH &&
                    (double)p->M * p->K * p->N <= GEMM_ONE_KERNEL_MACS;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->a, p->b, p->c, p->c, pref,
                                            one ? GEMM_HEURISTICS : 1, res, &n_res);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && n_res == 0))
        return DQN_OK;
    CUBLAS_CHECK(st);
    /* at small batch a split-K algorithm is two graph nodes (the GEMM, then a reduce kernel that
     * also applies the epilogue), each a few microseconds: the best-ranked one without split-K */
    int pick = 0;
    for (int i = 0; i < n_res && one; i++) {
        int32_t splitk = 1;
        size_t got = 0;
        CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(
            &res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &got));
        if (splitk <= 1) {
            pick = i;
            break;
        }
    }
    p->algo = res[pick].algo;
    *found = 1;
    return DQN_OK;
}

/* The cached plan for this call, or NULL when cublasLt has none. For dgrad, W is dY, Y is dW
 * and b is db. */
static dqn_status plan_get(cuda_impl *c, const float *X, const float *W, int ld, const float *b,
                           const float *Y, int M, int K, int N, int relu, int dgrad,
                           cuda_lt_plan **out) {
    uint32_t al[4] = {align_of(X), align_of(W), align_of(Y), b ? align_of(b) : 0};
    int has_bias = b != NULL;
    int n = c->n_plans < CUDA_LT_CACHE ? c->n_plans : CUDA_LT_CACHE;
    for (int i = 0; i < n; i++) {
        cuda_lt_plan *p = &c->plans[i];
        if (p->M == M && p->K == K && p->N == N && p->ld == ld && p->has_bias == has_bias &&
            p->relu == relu && p->dgrad == dgrad &&
            p->align[0] == al[0] && p->align[1] == al[1] && p->align[2] == al[2] &&
            p->align[3] == al[3]) {
            *out = p->desc ? p : NULL;
            return DQN_OK;
        }
    }
    /* round-robin eviction: a captured graph keeps its kernels, not these host descriptors */
    cuda_lt_plan *p = &c->plans[c->n_plans % CUDA_LT_CACHE];
    plan_release(p);
    c->n_plans++;
    p->M = M;
    p->K = K;
    p->N = N;
    p->ld = ld;
    p->has_bias = has_bias;
    p->relu = relu;
    p->dgrad = dgrad;
    for (int i = 0; i < 4; i++) p->align[i] = al[i];
    int found = 0;
    dqn_status s = plan_build(c, p, b, &found);
    *out = NULL;
    if (s != DQN_OK) {
        plan_release(p);
        p->M = -1;   /* matches nothing: the next call tries again */
        return s;
    }
    if (!found) plan_release(p);   /* a released plan caches "no algorithm" */
    else *out = p;
    return DQN_OK;
}

/* The own kernels (cuda_sgemm.cu) where they were measured to pay: fp32 math, layers at most
 * OWN_GEMM_WIDTH wide, at most own_gemm_macs multiply-adds (the cartpole model at B = 256 9%
 * faster; the seed model's 256- and 512-wide layers and TF32 at B = 256 ran slower on them) */
static int own_gemm(const cuda_impl *c, int M, int K, int N) {
    return c->compute == CUBLAS_COMPUTE_32F && K <= OWN_GEMM_WIDTH && N <= OWN_GEMM_WIDTH &&
           (double)M * K * N <= c->tune.own_gemm_macs;
}

/* the fallback epilogue: bias (may be NULL) then ReLU when asked */
__global__ void k_bias_act(float *Y, const float *b, size_t M, int N, int relu) {
    KERNEL_PROLOGUE();
    size_t total = M * (size_t)N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float y = Y[i] + (b ? b[i % (size_t)N] : 0.0f);
        Y[i] = relu && !(y > 0.0f) ? 0.0f : y;
    }
}

/* Y = act(X W^T + b) with W's rows ldw floats apart */
static dqn_status linear_fwd_ld(dqn_backend *be, const char *op, const float *X, const float *W,
                                int ldw, const float *b, float *Y, int M, int K, int N,
                                dqn_act act) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(M >= 0 && K > 0 && N > 0 && ldw >= K, "%s: bad shape M=%d K=%d N=%d ldw=%d", op, M, K,
             N, ldw);
    CUDA_ARG(X && W && Y, "%s: X, W and Y must be non-NULL", op);
    CUDA_ARG(act >= DQN_ACT_NONE && act <= DQN_ACT_ELU, "%s: act = %d", op, (int)act);
    if (M == 0) return DQN_OK;
    if (own_gemm(c, M, K, N)) return cuda_sgemm_fwd(c, X, W, ldw, b, Y, M, K, N, act);
    const float one = 1.0f, zero = 0.0f;
    int relu = act == DQN_ACT_RELU;
    cuda_lt_plan *p = NULL;
    DQN_TRY(plan_get(c, X, W, ldw, b, Y, M, K, N, relu, 0, &p));
    if (p) {
        if (b)
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &b, sizeof b));
        CUBLAS_CHECK(cublasLtMatmul(c->lt, p->desc, &one, W, p->a, X, p->b, &zero, Y, p->c, Y, p->c,
                                    &p->algo, c->workspace, CUDA_WORKSPACE_BYTES, c->stream));
    } else {
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, W, CUDA_R_32F,
                                  ldw, X, CUDA_R_32F, K, &zero, Y, CUDA_R_32F, N, c->compute,
                                  CUBLAS_GEMM_DEFAULT));
        if (b || relu) {
            size_t total = (size_t)M * (size_t)N;
            KLAUNCH(c, k_bias_act, cuda_blocks(c, total, CUDA_THREADS), CUDA_THREADS, 0, Y, b,
                    (size_t)M, N, relu);
        }
    }
    /* cublasLt has no ELU epilogue */
    return act == DQN_ACT_ELU ? cuda_elu_fwd(be, Y, Y, (size_t)M * (size_t)N) : DQN_OK;
}

dqn_status cuda_linear_act_fwd(dqn_backend *be, const float *X, const float *W, const float *b,
                               float *Y, int M, int K, int N, dqn_act act) {
    return linear_fwd_ld(be, "linear_fwd", X, W, K, b, Y, M, K, N, act);
}

dqn_status cuda_linear_ld_fwd(dqn_backend *be, const float *X, const float *W, int ldw,
                              const float *b, float *Y, int M, int K, int N, dqn_act act) {
    return linear_fwd_ld(be, "linear_ld_fwd", X, W, ldw, b, Y, M, K, N, act);
}

/* Y[M,N] = X[M,K] W[N,K]^T with X's rows ldx floats apart (a column block of a wider matrix), no
 * bias: cublasLt's plans assume dense X, so plain cuBLAS */
dqn_status cuda_gemm_ldx(cuda_impl *c, const float *X, int ldx, const float *W, float *Y, int ldy,
                         int M, int K, int N) {
    CUDA_ARG(M >= 0 && K > 0 && N > 0 && ldx >= K && ldy >= N,
             "gemm_ldx: bad shape M=%d K=%d N=%d ldx=%d ldy=%d", M, K, N, ldx, ldy);
    if (M == 0) return DQN_OK;
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, W, CUDA_R_32F, K, X,
                              CUDA_R_32F, ldx, &zero, Y, CUDA_R_32F, ldy, c->compute,
                              CUBLAS_GEMM_DEFAULT));
    return DQN_OK;
}

dqn_status cuda_linear_fwd(dqn_backend *be, const float *X, const float *W, const float *b, float *Y,
                           int M, int K, int N) {
    return cuda_linear_act_fwd(be, X, W, b, Y, M, K, N, DQN_ACT_NONE);
}

/* dX (+)= dY W, dW (row stride ldw) = dY^T X, db = column sums of dY; each skipped when NULL */
static dqn_status linear_bwd_ld(dqn_backend *be, const char *op, const float *X, const float *W,
                                int ldw, const float *dY, float *dX, int acc_dx, float *dW,
                                float *db, int M, int K, int N) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(M >= 0 && K > 0 && N > 0 && ldw >= K, "%s: bad shape M=%d K=%d N=%d ldw=%d", op, M, K,
             N, ldw);
    CUDA_ARG(dY && (!dX || W) && (!dW || X), "%s: dY, and W for dX, X for dW, must be non-NULL", op);
    const float one = 1.0f, zero = 0.0f;
    if (M == 0) {   /* an empty batch contributes nothing, but dW and db are still overwritten */
        if (dW) CUDA_CHECK(cudaMemset2DAsync(dW, (size_t)ldw * sizeof(float), 0,
                                             (size_t)K * sizeof(float), (size_t)N, c->stream));
        if (db) CUDA_CHECK(cudaMemsetAsync(db, 0, (size_t)N * sizeof(float), c->stream));
        return DQN_OK;
    }
    if (own_gemm(c, M, K, N)) {
        if (dX) DQN_TRY(cuda_sgemm_dx(c, dY, W, ldw, dX, acc_dx, M, K, N));
        if (dW) return cuda_sgemm_dw(c, X, dY, dW, ldw, db, M, K, N);
        return db ? cuda_colsum(c, dY, M, N, NULL, NULL, NULL, NULL, db) : DQN_OK;
    }
    /* dX^T[K,M] = W^T[K,N] dY^T[N,M] */
    if (dX)
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &one, W, CUDA_R_32F,
                                  ldw, dY, CUDA_R_32F, N, acc_dx ? &one : &zero, dX, CUDA_R_32F, K,
                                  c->compute, CUBLAS_GEMM_DEFAULT));
    /* dW and db in one cublasLt GEMM when it has a BGRADB kernel for the shape */
    if (dW && db && M <= BGRADB_MAX_ROWS) {
        cuda_lt_plan *p = NULL;
        DQN_TRY(plan_get(c, X, dY, ldw, db, dW, M, K, N, 0, 1, &p));
        if (p) {
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &db, sizeof db));
            CUBLAS_CHECK(cublasLtMatmul(c->lt, p->desc, &one, X, p->a, dY, p->b, &zero, dW, p->c,
                                        dW, p->c, &p->algo, c->workspace, CUDA_WORKSPACE_BYTES,
                                        c->stream));
            return DQN_OK;
        }
    }
    /* dW^T[K,N] = X^T[K,M] (dY^T[N,M])^T */
    if (dW)
        CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, &one, X, CUDA_R_32F,
                                  K, dY, CUDA_R_32F, N, &zero, dW, CUDA_R_32F, ldw, c->compute,
                                  CUBLAS_GEMM_DEFAULT));
    if (db) DQN_TRY(cuda_colsum(c, dY, M, N, NULL, NULL, NULL, NULL, db));
    return DQN_OK;
}

dqn_status cuda_linear_bwd(dqn_backend *be, const float *X, const float *W, const float *dY,
                           float *dX, float *dW, float *db, int M, int K, int N) {
    return linear_bwd_ld(be, "linear_bwd", X, W, K, dY, dX, 0, dW, db, M, K, N);
}

dqn_status cuda_linear_ld_bwd(dqn_backend *be, const float *X, const float *W, int ldw,
                              const float *dY, float *dX, int acc_dx, float *dW, float *db, int M,
                              int K, int N) {
    return linear_bwd_ld(be, "linear_ld_bwd", X, W, ldw, dY, dX, acc_dx, dW, db, M, K, N);
}
