/* The backend op table: every op the model, the loss, the optimizer and the replay need, defined
 * once here and implemented per backend (cpu/, cuda/). The model (src/model) composes only these,
 * so there is one network definition. Pointers are backend memory (host for CPU, device for CUDA).
 * Every op is asynchronous with respect to the host on CUDA (stream-ordered, capturable into a
 * graph: no allocation, no sync, no pageable copies inside). Scalars that change between graph
 * replays (the update counter, the replay size, the gradient norm) live in backend memory and are
 * passed by pointer.
 *
 * Layouts: row-major. A linear layer's W is [out, in] (PyTorch's), y = x W^T + b.
 * Rows of per-tau tensors are ordered (sample s, tau i): row s*T + i.
 * Branches: D branches of sizes n_1..n_D packed into A = sum n_b columns; branch b occupies
 * columns [off_b, off_b + n_b). Actions are int32 [B, D], each in [0, n_b).
 */
#ifndef DQN_BACKEND_H
#define DQN_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "dqn.h"
#include "health/health_block.h"

#define DQN_MAX_BRANCHES 16

typedef struct dqn_backend dqn_backend;

typedef struct {
    int D;                        /* number of branches */
    int n[DQN_MAX_BRANCHES];      /* branch sizes */
    int off[DQN_MAX_BRANCHES];    /* column offsets, off[0] = 0 */
    int A;                        /* total columns */
} dqn_branches;

#define DQN_TRUNK_MAX_GRN 8       /* the model's DQN_MAX_GRN */

/* One GRN block of the trunk's forward (trunk_fwd): its parameters and the buffers it writes. */
typedef struct {
    const float *W_a, *b_a;       /* [d, d], [d] */
    const float *W_b, *b_b;       /* [2d, d], [2d] */
    const float *gamma, *beta;    /* [d] */
    float *e, *g, *r, *y;         /* [M, d] ELU(W_a h + b_a), [M, 2d], [M, d] h + GLU(g), LN(r) */
    float *mean, *rstd;           /* [M] */
} dqn_grn_io;

/* The trunk's forward: x [M, obs] through the input layer (W_in [d, obs]) into h0 [M, d], then
 * L GRN blocks, block l reading the previous one's y (h0 for the first). W_in NULL: no input
 * layer, h0 [M, d] is the first block's input (read, not written). */
typedef struct {
    const float *x, *W_in, *b_in;
    float *h0;
    dqn_grn_io grn[DQN_TRUNK_MAX_GRN];
    int M, obs, d, L;
} dqn_trunk_io;

/* The targets' inputs and output (iqn_targets' arguments; targets_huber). */
typedef struct {
    const float *Zt;              /* [B*Nt, A] the target net on x' */
    const int32_t *astar;         /* [B, D] */
    const float *R, *discount;    /* [B] */
    float *y;                     /* [B, 1, Nt] (mean) or [B, D, Nt] (independent) */
} dqn_target_io;

typedef enum { DQN_TARGET_MEAN = 0, DQN_TARGET_INDEPENDENT = 1 } dqn_target_mode;
typedef enum { DQN_MATH_FP32 = 0, DQN_MATH_TF32 = 1 } dqn_math_mode;
typedef enum { DQN_ACT_NONE = 0, DQN_ACT_RELU = 1, DQN_ACT_ELU = 2 } dqn_act;

/* One replay sample for sample_batch: the replay's arrays (read) and the batch it fills. */
typedef struct {
    const float *obs, *next_obs, *R, *disc;   /* [size, obs_dim] x2, [size] x2 */
    const int32_t *act;                       /* [size, D] */
    const uint32_t *size;                     /* rows filled (backend memory) */
    int obs_dim, D;
} dqn_sample_src;
typedef struct {
    int32_t *idx, *act;          /* [B], [B, D] */
    float *x, *xn, *R, *disc;    /* [B, obs_dim] x2, [B] x2 */
} dqn_sample_dst;

#define DQN_MAX_DRAWS 4
/* Up to DQN_MAX_DRAWS uniform arrays drawn at once (the taus of one update). */
typedef struct {
    int count;
    float *out[DQN_MAX_DRAWS];
    size_t n[DQN_MAX_DRAWS];
    uint32_t stream[DQN_MAX_DRAWS];
    uint64_t stride[DQN_MAX_DRAWS];
} dqn_draws;

typedef struct dqn_ops {
    const char *name;
    /* ---- memory (outside the update step) ---- */
    dqn_status (*alloc)(dqn_backend *be, void **p, size_t bytes);  /* zero-filled */
    void (*free)(dqn_backend *be, void *p);
    dqn_status (*h2d)(dqn_backend *be, void *dst, const void *src, size_t bytes);
    dqn_status (*d2h)(dqn_backend *be, void *dst, const void *src, size_t bytes);  /* synchronous */
    dqn_status (*d2d)(dqn_backend *be, void *dst, const void *src, size_t bytes);
    dqn_status (*fill)(dqn_backend *be, float *x, float v, size_t n);
    dqn_status (*sync)(dqn_backend *be);
    void (*destroy)(dqn_backend *be);

    /* ---- dense layers ---- */
    /* Y[M,N] = X[M,K] W[N,K]^T + b[N] (b may be NULL) */
    dqn_status (*linear_fwd)(dqn_backend *be, const float *X, const float *W, const float *b,
                             float *Y, int M, int K, int N);
    /* Y = act(X W^T + b): linear_fwd then, for DQN_ACT_RELU / DQN_ACT_ELU, relu_fwd / elu_fwd in
     * place (one kernel on CUDA) */
    dqn_status (*linear_act_fwd)(dqn_backend *be, const float *X, const float *W, const float *b,
                                 float *Y, int M, int K, int N, dqn_act act);
    /* dX[M,K] = dY W (skipped when dX is NULL); dW[N,K] = dY^T X; db[N] = sum_rows dY.
     * dW and db are overwritten (each parameter is used once per backward pass). */
    dqn_status (*linear_bwd)(dqn_backend *be, const float *X, const float *W, const float *dY,
                             float *dX, float *dW, float *db, int M, int K, int N);

    /* y[i] += a * x[i] (sums of gradient contributions: residual paths, shared inputs) */
    dqn_status (*axpy)(dqn_backend *be, float a, const float *x, float *y, size_t n);

    /* ---- activations, in place allowed (y may equal x) ---- */
    dqn_status (*relu_fwd)(dqn_backend *be, const float *x, float *y, size_t n);
    /* dx = dy * (y > 0); y is the forward output; dx may equal dy */
    dqn_status (*relu_bwd)(dqn_backend *be, const float *y, const float *dy, float *dx, size_t n);
    dqn_status (*elu_fwd)(dqn_backend *be, const float *x, float *y, size_t n);  /* alpha 1 */
    /* dx = dy * (y > 0 ? 1 : y + 1); y is the forward output; dx may equal dy */
    dqn_status (*elu_bwd)(dqn_backend *be, const float *y, const float *dy, float *dx, size_t n);

    /* ---- GRN gate: r[M,d] = h + g[:, 0:d] * sigmoid(g[:, d:2d]), g is [M, 2d] ---- */
    dqn_status (*gate_fwd)(dqn_backend *be, const float *h, const float *g, float *r, int M, int d);
    /* dh = dr (written, not accumulated); dg[M,2d] written */
    dqn_status (*gate_bwd)(dqn_backend *be, const float *g, const float *dr, float *dh, float *dg,
                           int M, int d);

    /* ---- LayerNorm over the last dim, eps 1e-5: y = (x - mu) * rstd * gamma + beta.
     * mean/rstd [M] are saved for the backward. ---- */
    dqn_status (*layernorm_fwd)(dqn_backend *be, const float *x, const float *gamma,
                                const float *beta, float *y, float *mean, float *rstd, int M, int d);
    /* dx[M,d] written; dgamma[d], dbeta[d] overwritten */
    dqn_status (*layernorm_bwd)(dqn_backend *be, const float *x, const float *gamma,
                                const float *mean, const float *rstd, const float *dy, float *dx,
                                float *dgamma, float *dbeta, int M, int d);

    /* ---- IQN ---- */
    /* C[R, n_cos]: C[r,k-1] = cos(pi * k * tau[r]), k = 1..n_cos */
    dqn_status (*cos_embed)(dqn_backend *be, const float *tau, float *C, int R, int n_cos);
    /* z[s*T+i, :] = h[s, :] * phi[s*T+i, :], h [B,d], phi and z [B*T, d] */
    dqn_status (*mul_bcast_fwd)(dqn_backend *be, const float *h, const float *phi, float *z, int B,
                                int T, int d);
    /* dh[s,:] = sum_i dz[s*T+i,:] * phi[s*T+i,:] (written); dphi = dz * h (written) */
    dqn_status (*mul_bcast_bwd)(dqn_backend *be, const float *h, const float *phi, const float *dz,
                                float *dh, float *dphi, int B, int T, int d);
    /* out[B*T, 2d] = [z[r,:], h[r/T,:]] */
    dqn_status (*concat_bcast_fwd)(dqn_backend *be, const float *z, const float *h, float *out,
                                   int B, int T, int d);
    /* dz[r,:] = dout[r, 0:d] (written); dh[s,:] += sum_i dout[s*T+i, d:2d] (ACCUMULATED) */
    dqn_status (*concat_bcast_bwd)(dqn_backend *be, const float *dout, float *dz, float *dh, int B,
                                   int T, int d);

    /* ---- dueling combine: Z[R, A] with Z[r, off_b + a] = V[r] + Adv[r, off_b+a] - mean_a' Adv[r, off_b+a'] ---- */
    dqn_status (*dueling_fwd)(dqn_backend *be, const float *V, const float *Adv, float *Z, int R,
                              const dqn_branches *br);
    /* dV[r] = sum_cols dZ[r,:]; dAdv[r, off_b+a] = dZ[r, off_b+a] - mean_a' dZ[r, off_b+a'] */
    dqn_status (*dueling_bwd)(dqn_backend *be, const float *dZ, float *dV, float *dAdv, int R,
                              const dqn_branches *br);

    /* ---- action selection: Q[s, c] = mean_k Z[s*K+k, c]; act[s, b] = argmax over branch b
     * (lowest index on ties). Q may be NULL. ---- */
    dqn_status (*q_argmax)(dqn_backend *be, const float *Z, float *Q, int32_t *act, int B, int K,
                           const dqn_branches *br);

    /* ---- targets: Zt [B*Nt, A] target net on x', astar [B, D] int32, R[B], discount[B]
     * (gamma^n * (1 - terminated)); mode MEAN: y[s*Nt + j] = R + disc * (1/D) sum_b Zt[s*Nt+j, off_b + astar_b]
     * (y is [B, 1, Nt]); INDEPENDENT: y[(s*D + b)*Nt + j] = R + disc * Zt[s*Nt+j, off_b + astar_b]
     * (y is [B, D, Nt]). ---- */
    dqn_status (*iqn_targets)(dqn_backend *be, const float *Zt, const int32_t *astar,
                              const float *R, const float *discount, float *y, int B, int Nt,
                              const dqn_branches *br, dqn_target_mode mode);

    /* ---- quantile Huber loss and its gradient.
     * Z [B*N, A] online net on x, tau [B*N], act [B, D], y as above, w [B] (NULL = 1).
     * loss_out[0] = (1/B) sum_s (1/D) sum_b sum_i (1/Nt) sum_j w_s rho(y_{s,b,j} - Z[s*N+i, off_b+act_b]);
     * rho(u) = |tau - 1{u<0}| * Huber_kappa(u) / kappa.
     * dZ [B*N, A] written in full (zero off the taken actions). per_sample [B] (may be NULL)
     * receives (1/D) sum_b sum_i (1/Nt) sum_j rho (unweighted), for prioritised replay. ---- */
    dqn_status (*quantile_huber)(dqn_backend *be, const float *Z, const float *tau,
                                 const int32_t *act, const float *y, const float *w, float *loss_out,
                                 float *dZ, float *per_sample, int B, int N, int Nt,
                                 const dqn_branches *br, dqn_target_mode mode, float kappa);

    /* ---- optimizer ---- */
    /* out[0] = sqrt(sum x^2) */
    dqn_status (*l2_norm)(dqn_backend *be, const float *x, size_t n, float *out);
    /* x *= min(1, max_norm / norm[0]) when max_norm > 0 and norm is finite and > 0 */
    dqn_status (*clip_by_norm)(dqn_backend *be, float *x, size_t n, const float *norm,
                               float max_norm);
    /* Adam with bias correction at step t = *step + 1 (the counter is read, not written), with the
     * gradient first scaled by min(1, max_norm / gnorm[0]) (max_norm 0 disables) and decoupled
     * weight decay: p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p). skip may be NULL; when
     * *skip != 0 nothing is changed. */
    dqn_status (*adam)(dqn_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                       float lr, float beta1, float beta2, float eps, float wd,
                       const float *gnorm, float max_norm, const uint64_t *step,
                       const int32_t *skip);
    /* if ((*step + 1) % period == 0) dst = src  (hard copy; period > 0)
     * else when period == 0: dst = tau*src + (1-tau)*dst (Polyak) every call */
    dqn_status (*target_update)(dqn_backend *be, float *dst, const float *src, size_t n,
                                int period, float tau, const uint64_t *step);
    /* *step += 1 */
    dqn_status (*step_incr)(dqn_backend *be, uint64_t *step);

    /* ---- numerical health (SPEC 4; semantics in health/health_block.h) ---- */
    /* Build a plan (copies its descriptor into backend memory): outside the update step. */
    dqn_status (*health_plan)(dqn_backend *be, const dqn_hplan_desc *desc, void **plan);
    void (*health_plan_free)(dqn_backend *be, void *plan);
    /* Run a plan, in order: with desc.adam, the optimizer step (health_block.h, dqn_hadam: the
     * backup, the step or its skip, which sets blk->skip, the counter, the faults); its ALWAYS
     * copies; each check, with the bound b = max(guard_scale * isv[isv_bound], guard_floor) read
     * before the op: count the non-finite elements (NaN apart) and the first one's index and
     * value, the largest finite |x|, the RMS and mean |x| of the finite elements; event = NaN |
     * +Inf | -Inf | (max |x| > b) | none; with guard and guard_mode, NaN and +-Inf become 0 and
     * finite x are clamped to +-b (counted in guarded). Then per check: cur[slot] = those figures;
     * tot[slot] accumulates; when the check had no event, the ISV entries isv_scale (max |x|) and
     * isv_stat (RMS or mean |x|) take the sample: v = sample if v is 0 (unset) and sample > 0,
     * else decay * v + (1 - decay) * sample if v is set. A commit plan then finds the first slot
     * below n_slots with an event this update; if blk->event is unset it records it, runs the
     * ON_FREEZE copies and sets frozen; in guard_mode an event at rollback_slot runs the
     * ON_ROLLBACK copies; it counts updates, skipped (blk->skip or rolled back) / rolled back /
     * guarded updates and clears blk->skip. Deterministic: the same inputs give the same bits. */
    dqn_status (*health_check)(dqn_backend *be, const void *plan);
    /* if (*step == at) x[n / 2] = NaN (kind 1), +Inf (2) or 1e30 (3): fault injection */
    dqn_status (*health_fault)(dqn_backend *be, float *x, size_t n, const uint64_t *step,
                               uint64_t at, int kind);
    /* A fence in the stream: wait returns once everything issued before record has finished
     * (the host's read of a d2h_async copy). No-ops on backends that run ops eagerly. */
    dqn_status (*fence_create)(dqn_backend *be, void **fence);
    void (*fence_destroy)(dqn_backend *be, void *fence);
    dqn_status (*fence_record)(dqn_backend *be, void *fence);
    dqn_status (*fence_wait)(dqn_backend *be, void *fence);

    /* ---- random numbers (shared Philox header); the counter base is (*step) * stride ---- */
    /* out[j] = dqn_philox_uniform(seed, stream, (*step) * stride + j), j < n */
    dqn_status (*rand_uniform)(dqn_backend *be, float *out, size_t n, uint64_t seed,
                               uint32_t stream, const uint64_t *step, uint64_t stride);
    /* idx[j] = dqn_philox_below(seed, stream, (*step) * stride + j, *size), j < n */
    dqn_status (*rand_index)(dqn_backend *be, int32_t *idx, size_t n, uint64_t seed,
                             uint32_t stream, const uint64_t *step, uint64_t stride,
                             const uint32_t *size);

    /* ---- gathers (replay sampling): dst[j, :] = src[idx[j], :], rows of row_len elements ---- */
    dqn_status (*gather_f32)(dqn_backend *be, const float *src, const int32_t *idx, float *dst,
                             int n, int row_len);
    dqn_status (*gather_i32)(dqn_backend *be, const int32_t *src, const int32_t *idx,
                             int32_t *dst, int n, int row_len);
    /* the whole replay sample in one op: dst->idx = rand_index(B, seed, DQN_STREAM_REPLAY, step,
     * stride B, src->size), then the gathers of obs -> x, next_obs -> xn, act, R and disc */
    dqn_status (*sample_batch)(dqn_backend *be, const dqn_sample_src *src, const dqn_sample_dst *dst,
                               int B, uint64_t seed, const uint64_t *step);
    /* rand_uniform(out[k], n[k], seed, stream[k], step, stride[k]) for k < count, in one op */
    dqn_status (*rand_uniform_multi)(dqn_backend *be, const dqn_draws *d, uint64_t seed,
                                     const uint64_t *step);

    /* ---- fused ops: each stands for a sequence of the ops above (named in its
     * comment), in as few kernels as its dependencies allow on CUDA. On the CPU each is the
     * reference: the unfused sequence bit for bit where a comment says so, else naive loops
     * with double accumulators. ---- */

    /* Dueling heads after the stacked hidden layer hva [R, 2H] = ReLU(u [v1.W; a1.W]^T +
     * [v1.b; a1.b]) (value hidden in columns 0:H, advantage hidden in H:2H): V [R] =
     * hva[:, 0:H] Wv2^T + bv2 (Wv2 [1, H], bv2 [1]); Adv [R, A] = hva[:, H:2H] Wa2^T + ba2
     * (Wa2 [A, H], ba2 [A]); Z = dueling_fwd(V, Adv). V, Adv and Z are all written. */
    dqn_status (*heads_fwd)(dqn_backend *be, const float *hva, const float *Wv2, const float *bv2,
                            const float *Wa2, const float *ba2, float *V, float *Adv, float *Z,
                            int R, int H, const dqn_branches *br);
    /* norms[0] = l2_norm(x0, n0), norms[1] = l2_norm(x1, n1). hplan (optional): a deferred
     * health plan (made by this backend) of x0 and x1 as the op reads them, in that order, which
     * the op leaves done, guards included, as health_check(hplan) run before it would (the norms
     * are of the clamped values); CUDA's kernel scans (and clamps) each value as it loads it. */
    dqn_status (*l2_norm2)(dqn_backend *be, const float *x0, size_t n0, const float *x1,
                           size_t n1, float *norms, const void *hplan);
    /* The heads' backward from dV [R] and dAdv [R, A] (dueling_bwd's outputs) down to the stacked
     * hidden layer's pre-activation, with the head-gradient clip: dV and dAdv are read (not
     * written) and scaled by the factors clip_by_norm(dV, R, norms + 0, max_norm) and
     * clip_by_norm(dAdv, R*A, norms + 1, max_norm) would apply (max_norm 0: none; norms may then
     * be NULL); call the scaled values gV, gA. With hv = hva[:, 0:H], ha = hva[:, H:2H]:
     * dhva[:, 0:H] = (gV Wv2) * (hv > 0), dhva[:, H:2H] = (gA Wa2) * (ha > 0) (written);
     * dWv2 = gV^T hv, dbv2 = sum gV, dWa2 = gA^T ha, dba2 = column sums of gA (overwritten);
     * dbva [2H], when not NULL, = column sums of dhva: the stacked hidden layer's bias gradient,
     * summed here so that its own backward does not read dhva again for it. Those five are leaves
     * of the backward: a backend with a side branch may finish them on it (CUDA: the parts' sum,
     * in a capture, when nothing is pending there), so the caller reads or rewrites them only
     * after the next side_join. */
    dqn_status (*heads_bwd)(dqn_backend *be, const float *hva, const float *Wv2, const float *Wa2,
                            const float *dV, const float *dAdv, const float *norms,
                            float max_norm, float *dhva, float *dbva, float *dWv2, float *dbv2,
                            float *dWa2, float *dba2, int R, int H, int A);
    /* iqn_targets(t->Zt, t->astar, t->R, t->discount) -> t->y, then quantile_huber reading that y
     * with the other arguments: both ops' outputs, bit-identical to the two (dqn_targets_huber_seq;
     * CUDA can compute each sample's targets in the loss kernel's block, one node fewer). */
    dqn_status (*targets_huber)(dqn_backend *be, const dqn_target_io *t, const float *Z,
                                const float *tau, const int32_t *act, const float *w,
                                float *loss_out, float *dZ, float *per_sample, int B, int N,
                                int Nt, const dqn_branches *br, dqn_target_mode mode, float kappa);
    /* The trunk, forward (dqn_trunk_io): h0 = linear_fwd(x), then per GRN block e =
     * linear_act_fwd(h, ELU), g = linear_fwd(e), grn_gate_ln_fwd(h, g) -> r, y (the next block's
     * h), mean, rstd. Every output written, as the sequence (dqn_trunk_fwd_seq) writes them; CUDA
     * runs it as one kernel where every layer would take its own GEMM kernel (fp32, d <= 64,
     * few rows), bit-identical to that sequence. */
    dqn_status (*trunk_fwd)(dqn_backend *be, const dqn_trunk_io *t);
    /* GRN tail, forward: gate_fwd(h, g) -> r, then layernorm_fwd(r) -> y, mean, rstd.
     * Bit-identical to the two ops. */
    dqn_status (*grn_gate_ln_fwd)(dqn_backend *be, const float *h, const float *g,
                                  const float *gamma, const float *beta, float *r, float *y,
                                  float *mean, float *rstd, int M, int d);
    /* GRN tail, backward: layernorm_bwd(r, gamma, mean, rstd, dy) -> dr, dgamma, dbeta
     * (overwritten), then gate_bwd(g, dr) -> dres = dr (the residual's gradient w.r.t. h), dg
     * [M, 2d]. dres and dg must not alias dy. Bit-identical to the two ops. hplan (optional): a
     * deferred health plan of dy as the op reads it, left done as health_check(hplan) run
     * before it would (guards included: dy is clamped in place before use). */
    dqn_status (*grn_ln_gate_bwd)(dqn_backend *be, const float *r, const float *gamma,
                                  const float *mean, const float *rstd, const float *g,
                                  const float *dy, float *dres, float *dg, float *dgamma,
                                  float *dbeta, int M, int d, const void *hplan);
    /* IQN mixing, forward: z = mul_bcast_fwd(h, phi); when cat is not NULL also
     * cat = concat_bcast_fwd(z, h). Bit-identical to the ops. */
    dqn_status (*iqn_fwd)(dqn_backend *be, const float *h, const float *phi, float *z, float *cat,
                          int B, int T, int d);
    /* The IQN embedding, forward, in one op: cos_embed(tau) -> C [B*T, n_cos], then
     * linear_act_fwd(C, W [d, n_cos], b, ReLU) -> phi [B*T, d], then iqn_fwd(h, phi) -> z (and
     * cat). C and phi hold B*T rows, but only their first keep rows (the ones a backward reads)
     * must be written: past them they are the backend's scratch. The CPU runs the three ops (bit
     * for bit); CUDA computes the cosines and phi in the kernel that writes z. hplan (optional): a
     * deferred health plan (made by this backend) whose work the op leaves done as
     * health_check(hplan) after it would; CUDA's kernel computes the scans of a plan of phi's and
     * z's first keep rows (unguarded) from the values it stores, so they are never read back. */
    dqn_status (*iqn_embed_fwd)(dqn_backend *be, const float *tau, const float *W, const float *b,
                                const float *h, float *C, float *phi, float *z, float *cat, int B,
                                int T, int n_cos, int d, int keep, const void *hplan);
    /* 1 if iqn_embed_fwd on this shape computes a plan's scans as it writes phi and z (given
     * 16-byte aligned buffers), so that the plan is worth deferring to it rather than scanning
     * the buffers again later; NULL: never. */
    int (*iqn_embed_hosts)(dqn_backend *be, int B, int T, int n_cos, int d);
    /* IQN mixing, backward down to phi's pre-activation. With dcat [B*T, 2d] (the bottleneck's
     * input gradient) it stands for fill(dh2, 0), concat_bcast_bwd(dcat) -> dz (written), dh2;
     * mul_bcast_bwd(h, phi, dz) -> dh, dphi; axpy(1, dh2, dh); relu_bwd(phi, dphi). With dcat
     * NULL, dz is the input and it is mul_bcast_bwd then relu_bwd. So dh [B, d] = sum_i dz * phi
     * (+ sum_i dcat[:, d:2d]) and dphi = dz * h * (phi > 0) (phi is post-ReLU). Bit-identical to
     * the sequence. dphi_b (optional) [d]: dphi's column sums over its B*T rows, the phi layer's
     * bias gradient, so that linear_bwd need not read dphi again for it (the CPU adds the rows in
     * order, as linear_bwd's db does, bit for bit; CUDA sums each state's taus first). hplan
     * (optional, with dcat NULL): a deferred health plan (made by this backend) of dz as the op
     * reads it, which the op leaves done, guards included, as health_check(hplan) run before it
     * would; CUDA's kernel scans (and clamps) dz as it loads it. */
    dqn_status (*iqn_bwd)(dqn_backend *be, const float *dcat, const float *h, const float *phi,
                          float *dz, float *dh, float *dphi, float *dphi_b, int B, int T, int d,
                          const void *hplan);
    /* The optimizer step: adam(p, g, m, v, n, ..., gnorm, max_norm, step, skip), then
     * target_update(target, p, n, period, tau, step), then step_incr(step). Bit-identical to the
     * three ops. */
    dqn_status (*adam_target_step)(dqn_backend *be, float *p, const float *g, float *m, float *v,
                                   float *target, size_t n, float lr, float beta1, float beta2,
                                   float eps, float wd, const float *gnorm, float max_norm,
                                   int period, float tau, uint64_t *step, const int32_t *skip);
    /* sample_batch(src, dst, B, seed, step), then rand_uniform_multi(d, seed, step); the same
     * draws */
    dqn_status (*sample_draws)(dqn_backend *be, const dqn_sample_src *src,
                               const dqn_sample_dst *dst, int B, const dqn_draws *d,
                               uint64_t seed, const uint64_t *step);

    /* The bottleneck split: W_bn [z ; h] = W_bn[:, 0:d] z + W_bn[:, d:2d] h, and h is per
     * sample, so its half runs on B rows instead of B*T. W below is a column block of a row-major
     * matrix whose rows are ldw >= K floats apart. */
    /* Y[M, N] = act(X[M, K] W^T + b) (b may be NULL), W [N, K] with row stride ldw */
    dqn_status (*linear_ld_fwd)(dqn_backend *be, const float *X, const float *W, int ldw,
                                const float *b, float *Y, int M, int K, int N, dqn_act act);
    /* dX[M, K] = dY W, or dX += dY W when acc_dx (skipped when dX is NULL); dW [N, K] (row
     * stride ldw) = dY^T X (skipped when NULL); db[N] = column sums of dY (skipped when NULL).
     * dW and db are overwritten. */
    dqn_status (*linear_ld_bwd)(dqn_backend *be, const float *X, const float *W, int ldw,
                                const float *dY, float *dX, int acc_dx, float *dW, float *db,
                                int M, int K, int N);
    /* Y[s*T + i, :] = act(Y[s*T + i, :] + hb[s, :]) in place, hb [B, N], Y [B*T, N] */
    dqn_status (*bcast_add_act)(dqn_backend *be, const float *hb, float *Y, int B, int T, int N,
                                dqn_act act);
    /* relu_bwd(u, du) -> du in place (u the ReLU's output), then dus[s, :] = sum_i du[s*T + i, :]
     * (in tau order), dus [B, N] written. hplan (optional): a deferred health plan of dus, left
     * done as health_check(hplan) run after the op would (the clamped sums stored). */
    dqn_status (*relu_bwd_tausum)(dqn_backend *be, const float *u, float *du, float *dus, int B,
                                  int T, int N, const void *hplan);

    /* ---- a side branch: NULL on backends that run ops one after another (CPU). Ops issued
     * between side_begin and side_end may run concurrently with the ops issued after side_end,
     * until side_join; they must neither read what those write nor write what they read. On CUDA
     * the branch is a second stream (a parallel branch of a captured graph) with its own
     * workspace and scratch. ---- */
    dqn_status (*side_begin)(dqn_backend *be);
    dqn_status (*side_end)(dqn_backend *be);
    dqn_status (*side_join)(dqn_backend *be);
    /* 1 if a layer's weight gradient of M x K x N is worth a side branch beside the input
     * gradient's chain (small GEMMs leave the GPU idle; large ones would take it from the chain);
     * NULL: never. */
    int (*side_dw)(dqn_backend *be, int M, int K, int N);
    /* ---- graph capture: NULL on backends that run ops eagerly (CPU). The model records each
     * stage (forward, IQN/aux, backward, optimizer) between capture_begin and capture_end, then
     * graph_compose makes one executable graph of the stages as child graphs. ---- */
    dqn_status (*capture_begin)(dqn_backend *be);
    dqn_status (*capture_end)(dqn_backend *be, void **graph);
    dqn_status (*graph_compose)(dqn_backend *be, void *const *children, int n, void **exec);
    dqn_status (*graph_launch)(dqn_backend *be, void *exec);
    void (*graph_destroy)(dqn_backend *be, void *graph_or_exec, int is_exec);

    /* ---- host staging for the actor: pinned host memory (plain malloc on the CPU) and
     * stream-ordered copies from / to it, capturable into a graph; the host must sync before it
     * reads what d2h_async wrote. ---- */
    dqn_status (*host_alloc)(dqn_backend *be, void **p, size_t bytes);  /* zero-filled */
    void (*host_free)(dqn_backend *be, void *p);
    dqn_status (*h2d_async)(dqn_backend *be, void *dst, const void *pinned_src, size_t bytes);
    dqn_status (*d2h_async)(dqn_backend *be, void *pinned_dst, const void *src, size_t bytes);

    /* ---- collectives (data parallelism, docs/multi-gpu.md): one backend per rank. comm_init
     * joins the ranks' communicator outside the update step (it blocks until every rank has
     * joined); allreduce_mean is stream-ordered and capturable. The CPU backend is a world of
     * one. ---- */
    dqn_status (*comm_init)(dqn_backend *be, const dqn_rank_info *r);
    /* ranks of the communicator this backend joined; 0 when it joined none */
    int (*comm_world)(const dqn_backend *be);
    /* x = (1/world) sum over the ranks of x, in place; nothing to do without a communicator */
    dqn_status (*allreduce_mean)(dqn_backend *be, float *x, size_t n);
} dqn_ops;

struct dqn_backend {
    const dqn_ops *ops;
    dqn_math_mode math;
    void *impl;   /* backend-private state (streams, handles) */
};

/* Constructors. The CUDA one returns DQN_ERR_UNSUPPORTED when built without CUDA or when no
 * device is present, with a message in dqn_last_error(). */
dqn_status dqn_backend_cpu_create(dqn_backend **out);
dqn_status dqn_backend_cuda_create(dqn_backend **out, int device_index, dqn_math_mode math);
/* 1 when a CUDA device is usable (0 when built without CUDA) */
int dqn_backend_cuda_available(void);

void dqn_branches_init(dqn_branches *br, int D, const int *sizes);

/* trunk_fwd as its ops through be's table (op_sequences.c): linear_fwd, then per GRN block
 * linear_act_fwd (ELU), linear_fwd, grn_gate_ln_fwd */
dqn_status dqn_trunk_fwd_seq(dqn_backend *be, const dqn_trunk_io *t);

/* targets_huber as its two ops through be's table (op_sequences.c): iqn_targets, quantile_huber */
dqn_status dqn_targets_huber_seq(dqn_backend *be, const dqn_target_io *t, const float *Z,
                                 const float *tau, const int32_t *act, const float *w,
                                 float *loss_out, float *dZ, float *per_sample, int B, int N, int Nt,
                                 const dqn_branches *br, dqn_target_mode mode, float kappa);

/* iqn_embed_fwd as its three ops through be's table (op_sequences.c): cos_embed, linear_act_fwd
 * (ReLU), iqn_fwd; every row of C and phi written */
dqn_status dqn_iqn_embed_seq(dqn_backend *be, const float *tau, const float *W, const float *b,
                             const float *h, float *C, float *phi, float *z, float *cat, int B,
                             int T, int n_cos, int d);

#endif
