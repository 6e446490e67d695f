/* The acting step's ops composed on the CPU backend against the host path they stand for.
 * K steps of CartPole (num_envs 4) run two ways from the same seed:
 *   (a) the trainer's host path: act's epsilon greedy per branch (its counters on the host),
 *       dqn_vecenv_step, dqn_nstep_push for each env, dqn_replay_add of the emitted rows;
 *   (b) the ops: explore on the same fixed greedy actions, d2d of the observations, env_step
 *       (libm math: the vector's bits), replay_push;
 * and after every step the actions, the acting counters (acting steps, env steps, the actor's
 * tau counter), the observations, the n-step windows, the replay's rows, position and size and,
 * with prioritised replay, the sum-tree must be bit for bit the same. With n_step 3, n_step 1
 * and prioritised replay (whose priorities a per_update on both trees moves now and then, so
 * that the new rows' priority is not always the first one); each run has terminated and
 * truncated episodes and a ring that wraps more than once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "check.h"
#include "dqn_philox.h"
#include "envs/env.h"
#include "replay/nstep.h"
#include "replay/replay.h"

typedef struct {
    const char *name;
    int n_envs, n_step, cap, per, steps, max_steps;
} loop_case;

static void *balloc(dqn_backend *be, size_t bytes) {
    void *p = NULL;
    CHECK_OK(be->ops->alloc(be, &p, bytes));
    if (!p) exit(1);
    return p;
}

/* the trainer's act on the host: epsilon at env step t, one coin flip and one draw per element,
 * the greedy action where the flip says so; returns whether any action was greedy */
static int host_act(uint64_t seed, uint64_t act_steps, int64_t env_steps, double start, double end,
                    double span, const dqn_branches *br, int n, const int32_t *greedy,
                    int32_t *actions) {
    double f = span > 0 ? (double)env_steps / span : 1.0;
    if (f > 1.0) f = 1.0;
    double eps = start + (end - start) * f;
    uint64_t base = act_steps * (uint64_t)n * br->D * 2;
    int any_greedy = 0;
    for (int i = 0; i < n * br->D; i++) {
        if (dqn_philox_uniform(seed, DQN_STREAM_EXPLORE, base + 2 * (uint64_t)i) < eps)
            actions[i] = (int32_t)dqn_philox_below(seed, DQN_STREAM_EXPLORE,
                                                   base + 2 * (uint64_t)i + 1,
                                                   (uint32_t)br->n[i % br->D]);
        else {
            actions[i] = greedy[i];
            any_greedy = 1;
        }
    }
    return any_greedy;
}

static int same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void run_case(dqn_backend *be, const loop_case *c) {
    const dqn_ops *o = be->ops;
    dqn_env env = dqn_env_of(dqn_env_find("cartpole"));
    env.max_steps = c->max_steps;
    const int n = c->n_envs, od = env.obs_dim, D = env.n_branches;
    const size_t N = (size_t)n, nd = N * D;
    const uint64_t seed = 0x10095EEDull + (uint64_t)c->n_step;
    const double gamma = 0.97, eps_start = 1.0, eps_end = 0.05;
    const double span = 0.6 * (double)(c->steps * n);   /* eps_fraction * steps */
    dqn_branches br;
    dqn_branches_init(&br, D, env.branch_sizes);

    /* (a) the host path */
    dqn_vecenv v;
    dqn_nstep ns;
    dqn_replay ra;
    CHECK_OK(dqn_vecenv_create(&v, &env, n, seed, DQN_STREAM_ENV));
    CHECK_OK(dqn_vecenv_reset(&v));
    CHECK_OK(dqn_nstep_create(&ns, n, c->n_step, od, D, gamma));
    CHECK_OK(dqn_replay_create(&ra, be, c->cap, od, D));
    uint64_t h_act = 0, h_tau = 0;
    int64_t h_env = 0;
    int32_t *h_actions = test_xcalloc(nd, sizeof *h_actions), *greedy = test_xcalloc(nd, sizeof *greedy);
    float *prev = test_xcalloc(N * od, sizeof *prev);

    /* (b) the ops */
    dqn_env_io io = {.kind = DQN_ENV_CARTPOLE, .math = DQN_ENV_MATH_LIBM, .n = n,
                     .max_steps = env.max_steps, .seed = seed, .stream_base = DQN_STREAM_ENV};
    const size_t sd = env.state_size / sizeof(double);
    io.state = balloc(be, N * sd * sizeof(double));
    io.counter = balloc(be, N * sizeof(uint64_t));
    io.ep_len = balloc(be, N * sizeof(int32_t));
    io.ep_return = balloc(be, N * sizeof(double));
    io.obs = balloc(be, N * od * sizeof(float));
    io.final_obs = balloc(be, N * od * sizeof(float));
    io.reward = balloc(be, N * sizeof(float));
    io.terminated = balloc(be, N);
    io.truncated = balloc(be, N);
    io.done_return = balloc(be, N * sizeof(double));
    io.done_len = balloc(be, N * sizeof(int32_t));
    CHECK_OK(o->env_step(be, &io, NULL));
    dqn_nstep_win w;
    dqn_replay rb;
    dqn_ring ring;
    CHECK_OK(dqn_nstep_win_create(&w, be, n, c->n_step, od, D, gamma));
    CHECK_OK(dqn_replay_create(&rb, be, c->cap, od, D));
    if (c->per) {
        CHECK_OK(dqn_replay_prioritize(&ra, 0.6f, 0.4f, 1e-6f, 100));
        CHECK_OK(dqn_replay_prioritize(&rb, 0.6f, 0.4f, 1e-6f, 100));
    }
    dqn_replay_ring_of(&rb, &ring);
    uint64_t *counters = balloc(be, 3 * sizeof(uint64_t));
    dqn_explore_io x = {.n = n, .seed = seed, .eps_start = eps_start, .eps_end = eps_end,
                        .eps_span = span, .act_steps = counters,
                        .env_steps = (int64_t *)(counters + 1), .tau_step = counters + 2};
    int32_t *d_greedy = balloc(be, nd * sizeof(int32_t)), *d_actions = balloc(be, nd * sizeof(int32_t));
    float *d_prev = balloc(be, N * od * sizeof(float));
    int32_t *d_idx = balloc(be, 8 * sizeof(int32_t));
    float *d_loss = balloc(be, 8 * sizeof(float));

    const size_t rbytes = dqn_replay_bytes(&ra), wbytes = dqn_nstep_state_bytes(&ns);
    char *img_a = test_xcalloc(rbytes, 1), *img_b = test_xcalloc(rbytes, 1);
    char *win_a = test_xcalloc(wbytes, 1), *win_b = test_xcalloc(wbytes, 1);
    long terms = 0, truncs = 0, wraps = 0, greedy_steps = 0, random_steps = 0;
    int first_bad = -1;
    for (int k = 0; k < c->steps && first_bad < 0; k++) {
        /* fixed greedy actions, alike for both */
        for (size_t i = 0; i < nd; i++) greedy[i] = (int32_t)((k / 3 + i) % 2);
        CHECK_OK(o->h2d(be, d_greedy, greedy, nd * sizeof *greedy));

        /* (a) */
        int any = host_act(seed, h_act, h_env, eps_start, eps_end, span, &br, n, greedy,
                           h_actions);
        h_act++;
        h_tau += (uint64_t)any;
        greedy_steps += any, random_steps += !any;
        memcpy(prev, v.obs, N * od * sizeof(float));
        CHECK_OK(dqn_vecenv_step(&v, h_actions));
        dqn_nstep_clear_out(&ns);
        for (int e = 0; e < n; e++)
            dqn_nstep_push(&ns, e, prev + (size_t)e * od, h_actions + (size_t)e * D, v.reward[e],
                           v.final_obs + (size_t)e * od, v.terminated[e] != 0,
                           v.truncated[e] != 0);
        int pos_before = ra.pos;
        CHECK_OK(dqn_replay_add(&ra, ns.out_obs, ns.out_act, ns.out_R, ns.out_disc, ns.out_next,
                                ns.out_n));
        wraps += ns.out_n > 0 && ra.pos <= pos_before;
        h_env += n;
        for (int e = 0; e < n; e++) {
            terms += v.terminated[e] != 0;
            truncs += v.truncated[e] != 0 && !v.terminated[e];
        }

        /* (b) */
        CHECK_OK(o->explore(be, &x, &br, d_greedy, d_actions));
        CHECK_OK(o->d2d(be, d_prev, io.obs, N * od * sizeof(float)));
        CHECK_OK(o->env_step(be, &io, d_actions));
        CHECK_OK(o->replay_push(be, &w, &ring, d_prev, d_actions, io.reward, io.final_obs,
                                io.terminated, io.truncated));

        /* now and then the same priorities on both trees, node 0 rising */
        if (c->per && k % 7 == 6 && ra.size > 0) {
            int32_t idx[8];
            float loss[8];
            for (int j = 0; j < 8; j++) {
                idx[j] = (int32_t)dqn_philox_below(seed, 99, (uint64_t)k * 8 + j,
                                                   (uint32_t)ra.size);
                loss[j] = 0.5f * (float)k * dqn_philox_uniform(seed, 98, (uint64_t)k * 8 + j);
            }
            CHECK_OK(o->h2d(be, d_idx, idx, sizeof idx));
            CHECK_OK(o->h2d(be, d_loss, loss, sizeof loss));
            CHECK_OK(o->per_update(be, &ra.per, d_idx, d_loss, 8));
            CHECK_OK(o->per_update(be, &rb.per, d_idx, d_loss, 8));
        }

        /* everything, bit for bit */
        int32_t b_actions[64];
        uint64_t b_counters[3];
        uint32_t a_sp[2], b_sp[2];
        float b_obs[64 * 4];
        CHECK_OK(o->d2h(be, b_actions, d_actions, nd * sizeof(int32_t)));
        CHECK_OK(o->d2h(be, b_counters, counters, sizeof b_counters));
        CHECK_OK(o->d2h(be, a_sp, ra.size_dev, sizeof a_sp));
        CHECK_OK(o->d2h(be, b_sp, rb.size_dev, sizeof b_sp));
        CHECK_OK(o->d2h(be, b_obs, io.obs, N * od * sizeof(float)));
        CHECK_OK(dqn_replay_export(&ra, img_a));
        CHECK_OK(dqn_replay_export(&rb, img_b));
        dqn_nstep_state_save(&ns, win_a);
        {
            char *p = win_b;
            const size_t rows = N * c->n_step;
            CHECK_OK(o->d2h(be, p, w.obs, rows * od * sizeof(float)));
            p += rows * od * sizeof(float);
            CHECK_OK(o->d2h(be, p, w.act, rows * D * sizeof(int32_t)));
            p += rows * D * sizeof(int32_t);
            CHECK_OK(o->d2h(be, p, w.rew, rows * sizeof(float)));
            p += rows * sizeof(float);
            CHECK_OK(o->d2h(be, p, w.head, N * sizeof(int32_t)));
            p += N * sizeof(int32_t);
            CHECK_OK(o->d2h(be, p, w.count, N * sizeof(int32_t)));
        }
        int ok = 1;
#define SAME(cond, ...)                                                                        \
    do {                                                                                       \
        CHECK(cond, __VA_ARGS__);                                                              \
        ok &= (cond) != 0;                                                                     \
    } while (0)
        SAME(same(b_actions, h_actions, nd * sizeof(int32_t)), "%s, step %d: actions", c->name,
             k);
        SAME(b_counters[0] == h_act && b_counters[1] == (uint64_t)h_env && b_counters[2] == h_tau,
             "%s, step %d: counters %llu %llu %llu, host %llu %lld %llu", c->name, k,
             (unsigned long long)b_counters[0], (unsigned long long)b_counters[1],
             (unsigned long long)b_counters[2], (unsigned long long)h_act, (long long)h_env,
             (unsigned long long)h_tau);
        SAME(same(b_obs, v.obs, N * od * sizeof(float)), "%s, step %d: observations", c->name, k);
        SAME(b_sp[0] == (uint32_t)ra.size && b_sp[1] == (uint32_t)ra.pos &&
                 a_sp[0] == b_sp[0] && a_sp[1] == b_sp[1],
             "%s, step %d: size %u pos %u, host %d %d (its backend copies %u %u)", c->name, k,
             b_sp[0], b_sp[1], ra.size, ra.pos, a_sp[0], a_sp[1]);
        SAME(same(win_a, win_b, wbytes), "%s, step %d: the n-step windows", c->name, k);
        SAME(same(img_a, img_b, rbytes), "%s, step %d: the replay's rows%s", c->name, k,
             c->per ? " and sum-tree" : "");
#undef SAME
        if (!ok) first_bad = k;
    }
    CHECK(first_bad < 0, "%s: the paths part at step %d", c->name, first_bad);
    CHECK(terms > 0 && truncs > 0, "%s: %ld terminations, %ld truncations (want both)", c->name,
          terms, truncs);
    CHECK(wraps >= 2, "%s: the ring wrapped %ld times (want 2 or more)", c->name, wraps);
    CHECK(greedy_steps > 0 && random_steps > 0, "%s: %ld steps with a greedy action, %ld without",
          c->name, greedy_steps, random_steps);
    printf("%-28s %d steps: %ld terminations, %ld truncations, %ld wraps, %ld greedy steps\n",
           c->name, c->steps, terms, truncs, wraps, greedy_steps);

    free(img_a), free(img_b), free(win_a), free(win_b);
    void *bufs[] = {io.state, io.counter, io.ep_len, io.ep_return, io.obs, io.final_obs,
                    io.reward, io.terminated, io.truncated, io.done_return, io.done_len,
                    counters, d_greedy, d_actions, d_prev, d_idx, d_loss};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) o->free(be, bufs[k]);
    dqn_nstep_win_destroy(&w, be);
    dqn_replay_destroy(&rb);
    dqn_replay_destroy(&ra);
    dqn_nstep_destroy(&ns);
    dqn_vecenv_destroy(&v);
    free(h_actions), free(greedy), free(prev);
}

int main(void) {
    dqn_backend *be;
    CHECK_OK(dqn_backend_cpu_create(&be));
    static const loop_case cases[] = {
        {"n_step 3, uniform", 4, 3, 13, 0, 300, 20},
        {"n_step 1, uniform", 4, 1, 7, 0, 300, 20},
        {"n_step 3, prioritized", 4, 3, 13, 1, 300, 20},
        {"n_step 5, prioritized, cap 3", 4, 5, 3, 1, 200, 12},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(be, &cases[k]);
    be->ops->destroy(be);
    return check_finish("test_env_loop_ops");
}
