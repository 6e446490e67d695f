/* The rest of an env step on the CPU (contracts: ops.def): explore and replay_push, each the
 * host's own code over backend memory (train/explore.h, replay/nstep_math.h, the sum-tree's
 * per_insert), so that on this backend they are the trainer's act and observe bit for bit. */
#include "backends/cpu/cpu_internal.h"
#include "replay/nstep_math.h"
#include "train/episodes.h"
#include "train/explore.h"

dqn_status cpu_explore(dqn_backend *be, const dqn_explore_io *x, const dqn_branches *br,
                       const int32_t *greedy, int32_t *actions) {
    (void)be;
    DQN_TRY(dqn_explore_check(x, br, greedy, actions));
    const int nd = x->n * br->D;
    const double eps = dqn_epsilon(x->eps_start, x->eps_end, x->eps_span, *x->env_steps);
    const uint64_t base = *x->act_steps * (uint64_t)nd * 2;
    int any_greedy = 0;
    for (int i = 0; i < nd; i++) {
        int32_t a;
        if (dqn_explore_flip(x->seed, base, (uint64_t)i, eps, br->n[i % br->D], &a)) {
            a = greedy[i];
            any_greedy = 1;
        }
        actions[i] = a;
    }
    *x->act_steps += 1;
    *x->env_steps += x->n;
    if (any_greedy && x->tau_step) *x->tau_step += 1;
    return DQN_OK;
}

dqn_status cpu_replay_push(dqn_backend *be, const dqn_nstep_win *w, const dqn_ring *r,
                           const float *obs, const int32_t *act, const float *reward,
                           const float *final_obs, const uint8_t *terminated,
                           const uint8_t *truncated) {
    DQN_TRY(dqn_push_check(w, r, obs, act, reward, final_obs, terminated, truncated));
    const uint64_t cap = (uint64_t)r->cap, pos0 = *r->pos, size0 = *r->size;
    REQUIRE(pos0 < cap && size0 <= cap, "replay_push: pos %u, size %u (capacity %d)",
            (unsigned)pos0, (unsigned)size0, r->cap);
    for (int e = 0; e < w->n_envs; e++)
        REQUIRE(w->head[e] >= 0 && w->head[e] < w->n && w->count[e] >= 0 && w->count[e] < w->n,
                "replay_push: env %d's window has head %d, count %d (n_step %d)", e,
                (int)w->head[e], (int)w->count[e], w->n);
    const size_t od = (size_t)w->obs_dim, D = (size_t)w->D;
    uint64_t E = 0;   /* rows emitted so far: the next goes to row (pos0 + E) % cap */
    for (int e = 0; e < w->n_envs; e++) {
        const int done = terminated[e] || truncated[e];
        const int m = dqn_nstep_emits(w->count[e], w->n, done);
        dqn_nstep_enter(w, e, obs + e * od, act + e * D, reward[e]);
        for (int k = 0; k < m; k++, E++) {
            const size_t row = (size_t)((pos0 + E) % cap);
            dqn_nstep_emit(w, e, k, final_obs + e * od, terminated[e] != 0, r->obs + row * od,
                           r->act + row * D, r->next_obs + row * od, &r->R[row], &r->disc[row]);
        }
        dqn_nstep_advance(w, e, done);
    }
    if (E == 0) return DQN_OK;
    /* past cap rows, the first ones were overwritten: only the last cap are new */
    const uint64_t kept = E < cap ? E : cap;
    if (r->per) DQN_TRY(cpu_per_insert(be, r->per, (int)((pos0 + E - kept) % cap), (int)kept));
    *r->pos = (uint32_t)((pos0 + E) % cap);
    *r->size = (uint32_t)(size0 + E < cap ? size0 + E : cap);
    return DQN_OK;
}

dqn_status cpu_episode_record(dqn_backend *be, const dqn_episodes *rec, const uint8_t *terminated,
                              const uint8_t *truncated, const double *done_return, int n) {
    (void)be;
    DQN_TRY(dqn_episode_record_check(rec, terminated, truncated, done_return, n));
    uint64_t *c = rec->ctr;
    REQUIRE(c[2] < (uint64_t)rec->cap && c[1] <= (uint64_t)rec->cap,
            "episode_record: %llu entries, next %llu (capacity %d)", (unsigned long long)c[1],
            (unsigned long long)c[2], rec->cap);
    uint64_t E = 0;
    for (int e = 0; e < n; e++)
        if (terminated[e] || truncated[e])
            rec->recent[(c[2] + E++) % (uint64_t)rec->cap] = done_return[e];
    dqn_episodes_advance(c, (uint64_t)rec->cap, E);
    return DQN_OK;
}
