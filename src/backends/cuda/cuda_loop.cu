/* The rest of an env step on CUDA (contracts: ops.def): explore, replay_push and
 * episode_record, each one block running the host's arithmetic (train/explore.h,
 * replay/nstep_math.h, train/episodes.h) so that the draws, the windows, the ring's rows, the
 * sum-tree and the episodes' record are the CPU's bits. One block, because an acting step is
 * small (num_envs is at most 4096, of at most 16 branches) and a block's barriers give what the
 * ops need without a second launch: every counter read before it is advanced, and the
 * emissions' order (a prefix sum over the envs' counts) before any row is written. No sync, no
 * copy: capturable. */
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_sumtree.cuh"
#include "replay/nstep_math.h"
#include "train/episodes.h"
#include "train/explore.h"

#define LOOP_THREADS 512

__global__ void k_explore(dqn_explore_io x, dqn_branches br, const int32_t *greedy,
                          int32_t *actions) {
    KERNEL_PROLOGUE();
    const int nd = x.n * br.D;
    const uint64_t act_steps = *x.act_steps;
    const int64_t env_steps = *x.env_steps;
    const double eps = dqn_epsilon(x.eps_start, x.eps_end, x.eps_span, env_steps);
    const uint64_t base = act_steps * (uint64_t)nd * 2;
    int any_greedy = 0;
    for (int i = threadIdx.x; i < nd; i += blockDim.x) {
        int32_t a;
        if (dqn_explore_flip(x.seed, base, (uint64_t)i, eps, br.n[i % br.D], &a)) {
            a = greedy[i];
            any_greedy = 1;
        }
        actions[i] = a;
    }
    any_greedy = __syncthreads_or(any_greedy);
    if (threadIdx.x == 0) {
        *x.act_steps = act_steps + 1;
        *x.env_steps = env_steps + x.n;
        if (any_greedy && x.tau_step) *x.tau_step += 1;
    }
}

dqn_status cuda_explore(dqn_backend *be, const dqn_explore_io *x, const dqn_branches *br,
                        const int32_t *greedy, int32_t *actions) {
    DQN_TRY(dqn_explore_check(x, br, greedy, actions));
    cuda_impl *c = cuda_of(be);
    KLAUNCH(c, k_explore, 1, LOOP_THREADS, 0, *x, *br, greedy, actions);
    return DQN_OK;
}

/* Inclusive prefix sum of v over the block (every thread's v, in thread order) and the block's
 * total into *total. Ends with a barrier, so s[] may be reused after it. */
__device__ unsigned block_scan(unsigned *s, unsigned v, unsigned *total) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned d = 1; d < blockDim.x; d <<= 1) {
        const unsigned add = threadIdx.x >= d ? s[threadIdx.x - d] : 0u;
        __syncthreads();
        s[threadIdx.x] += add;
        __syncthreads();
    }
    const unsigned r = s[threadIdx.x];
    *total = s[blockDim.x - 1];
    __syncthreads();
    return r;
}

__device__ __forceinline__ unsigned push_emits(const dqn_nstep_win &w, int e,
                                               const uint8_t *terminated,
                                               const uint8_t *truncated) {
    return (unsigned)dqn_nstep_emits(w.count[e], w.n, terminated[e] || truncated[e]);
}

/* One thread per env (in chunks of the block): the envs' emission counts, their prefix sum
 * (env 0's rows first, as the host appends them), then each env's push writing its rows from
 * row pos + its offset. Of more than cap rows only the last cap are written (the host's later
 * rows overwrite the earlier), so no two threads write one row. */
__global__ void k_replay_push(dqn_nstep_win w, dqn_ring r, dqn_per per, int has_per,
                              const float *obs, const int32_t *act, const float *reward,
                              const float *final_obs, const uint8_t *terminated,
                              const uint8_t *truncated) {
    KERNEL_PROLOGUE();
    __shared__ unsigned s[LOOP_THREADS];
    const int T = (int)blockDim.x, tid = (int)threadIdx.x;
    const uint64_t cap = (uint64_t)r.cap, pos0 = *r.pos, size0 = *r.size;
    const size_t od = (size_t)w.obs_dim, D = (size_t)w.D;
    /* every count is read here, before any env's push changes its own */
    unsigned mine = 0, E;
    for (int e = tid; e < w.n_envs; e += T) mine += push_emits(w, e, terminated, truncated);
    block_scan(s, mine, &E);
    const uint64_t first_kept = E > cap ? E - cap : 0;
    unsigned before = 0;   /* rows of the chunks done */
    for (int e0 = 0; e0 < w.n_envs; e0 += T) {
        const int e = e0 + tid;
        const unsigned m = e < w.n_envs ? push_emits(w, e, terminated, truncated) : 0u;
        unsigned chunk;
        const unsigned off = before + block_scan(s, m, &chunk) - m;
        before += chunk;
        if (e >= w.n_envs) continue;
        const int done = terminated[e] || truncated[e];
        dqn_nstep_enter(&w, e, obs + e * od, act + e * D, reward[e]);
        for (unsigned k = 0; k < m; k++) {
            const uint64_t j = (uint64_t)off + k;
            if (j < first_kept) continue;
            const size_t row = (size_t)((pos0 + j) % cap);
            dqn_nstep_emit(&w, e, (int)k, final_obs + e * od, terminated[e] != 0,
                           r.obs + row * od, r.act + row * D, r.next_obs + row * od, &r.R[row],
                           &r.disc[row]);
        }
        dqn_nstep_advance(&w, e, done);
    }
    if (E == 0) return;
    const uint64_t kept = E - first_kept, p0 = (pos0 + first_kept) % cap;
    if (has_per) {
        const float top = per.tree[0];
        for (uint64_t j = tid; j < kept; j += T)
            per.tree[per.leaves + (int)((p0 + j) % cap)] = top;
        dqn_tree_fix_levels(per.tree, per.leaves, NULL, (int)kept, (int)p0, per.cap);
    }
    __syncthreads();
    if (tid == 0) {
        *r.pos = (uint32_t)((pos0 + E) % cap);
        *r.size = (uint32_t)(size0 + E < cap ? size0 + E : cap);
    }
}

dqn_status cuda_replay_push(dqn_backend *be, const dqn_nstep_win *w, const dqn_ring *r,
                            const float *obs, const int32_t *act, const float *reward,
                            const float *final_obs, const uint8_t *terminated,
                            const uint8_t *truncated) {
    DQN_TRY(dqn_push_check(w, r, obs, act, reward, final_obs, terminated, truncated));
    dqn_per per = {};
    if (r->per) per = *r->per;
    cuda_impl *c = cuda_of(be);
    KLAUNCH(c, k_replay_push, 1, LOOP_THREADS, 0, *w, *r, per, r->per != NULL, obs, act, reward,
            final_obs, terminated, truncated);
    return DQN_OK;
}

/* One thread per env (in chunks of the block), as k_replay_push orders its rows: the finished
 * episodes' prefix sum gives each its place in the host's order; of more than cap only the last
 * cap are written, so no two threads write one entry. */
__global__ void k_episode_record(dqn_episodes rec, const uint8_t *terminated,
                                 const uint8_t *truncated, const double *done_return, int n) {
    KERNEL_PROLOGUE();
    __shared__ unsigned s[LOOP_THREADS];
    const int T = (int)blockDim.x, tid = (int)threadIdx.x;
    const uint64_t cap = (uint64_t)rec.cap, next = rec.ctr[2];
    unsigned mine = 0, E;
    for (int e = tid; e < n; e += T) mine += terminated[e] || truncated[e];
    block_scan(s, mine, &E);
    const uint64_t first_kept = E > cap ? E - cap : 0;
    unsigned before = 0;
    for (int e0 = 0; e0 < n; e0 += T) {
        const int e = e0 + tid;
        const unsigned m = e < n && (terminated[e] || truncated[e]) ? 1u : 0u;
        unsigned chunk;
        const unsigned off = before + block_scan(s, m, &chunk) - m;
        before += chunk;
        if (m && off >= first_kept) rec.recent[(next + off) % cap] = done_return[e];
    }
    if (tid == 0) dqn_episodes_advance(rec.ctr, cap, E);   /* ctr was read before the scans */
}

dqn_status cuda_episode_record(dqn_backend *be, const dqn_episodes *rec,
                               const uint8_t *terminated, const uint8_t *truncated,
                               const double *done_return, int n) {
    DQN_TRY(dqn_episode_record_check(rec, terminated, truncated, done_return, n));
    cuda_impl *c = cuda_of(be);
    KLAUNCH(c, k_episode_record, 1, LOOP_THREADS, 0, *rec, terminated, truncated, done_return,
            n);
    return DQN_OK;
}
