/* The built-in envs and the vector: registry, start-state distributions, determinism from the
 * seed, one stream per env, reset inside step, time limits, reward conventions. The dynamics
 * themselves are checked against Gymnasium by tests/py/test_env_conformance.py. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "dqn_philox.h"
#include "envs/env.h"

#define PI_F64 3.14159265358979323846

static const double *env_state(const dqn_vecenv *v, int i) {
    /* every env's private state begins with its set_state vector */
    return (const double *)(const void *)(v->state + (size_t)i * v->env.state_size);
}

/* A vector of a fixed type's envs (the vector keeps a copy of the instance). */
static dqn_status create(dqn_vecenv *v, const dqn_env_type *t, int n, uint64_t seed,
                         uint32_t stream_base) {
    dqn_env e = dqn_env_of(t);
    return dqn_vecenv_create(v, &e, n, seed, stream_base);
}

static const float *obs_of(const float *buf, const dqn_vecenv *v, int i) {
    return buf + (size_t)i * (size_t)v->env.obs_dim;
}

/* Uniform random actions for every env and branch, one Philox word each. */
static void random_actions(const dqn_vecenv *v, uint64_t seed, uint64_t *ctr, int32_t *a) {
    const dqn_env *t = &v->env;
    for (int i = 0; i < v->n; i++)
        for (int b = 0; b < t->n_branches; b++)
            a[i * t->n_branches + b] = (int32_t)dqn_philox_below(seed, DQN_STREAM_EXPLORE, (*ctr)++,
                                                                 (uint32_t)t->branch_sizes[b]);
}

static int32_t cartpole_balance(const float *o) {
    return o[2] + 0.3f * o[3] + 0.01f * o[0] + 0.1f * o[1] > 0;
}
static int32_t acrobot_swing(const float *o) { return o[4] + o[5] >= 0 ? 2 : 0; }
static int32_t mountaincar_pump(const float *o) { return o[1] >= 0 ? 2 : 0; }

static void test_registry(void) {
    const char *names[3] = {"cartpole", "acrobot", "mountaincar"};
    const char *ids[3] = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0"};
    int obs_dim[3] = {4, 6, 2}, actions[3] = {2, 3, 3}, max_steps[3] = {500, 500, 200};
    int state_dim[3] = {4, 4, 2};
    for (int k = 0; k < 3; k++) {
        const dqn_env_type *t = dqn_env_find(names[k]);
        CHECK(t != NULL, "%s not found", names[k]);
        if (!t) continue;
        CHECK(strcmp(t->name, names[k]) == 0 && strcmp(t->gym_id, ids[k]) == 0, "%s", t->gym_id);
        CHECK(t->api.obs_dim == obs_dim[k] && t->api.n_branches == 1 && t->api.branch_sizes[0] == actions[k],
              "%s: obs_dim %d, %d branches of %d", names[k], t->api.obs_dim, t->api.n_branches,
              t->api.branch_sizes[0]);
        CHECK(t->api.max_steps == max_steps[k] && t->state_dim == state_dim[k], "%s: max_steps %d",
              names[k], t->api.max_steps);
        CHECK(t->api.state_size >= (size_t)t->state_dim * sizeof(double), "%s: state_size %zu",
              names[k], t->api.state_size);
    }
    CHECK(dqn_env_find("pong") == NULL && dqn_env_find(NULL) == NULL, "unknown names");
    CHECK(strcmp(dqn_env_names(), "cartpole|acrobot|mountaincar|market") == 0, "%s",
          dqn_env_names());

    dqn_vecenv v;
    CHECK(create(&v, dqn_env_find("cartpole"), 0, 1, 16) == DQN_ERR_ARG, "n = 0");
    CHECK(strstr(dqn_last_error(), "number of envs 0") != NULL, "message: %s", dqn_last_error());
    CHECK(create(&v, NULL, 4, 1, 16) == DQN_ERR_ARG, "NULL type");
}

/* Sample mean and variance of the start-state component k over a vector's envs. */
static void moments(const dqn_vecenv *v, int k, double *lo, double *hi, double *mean, double *var) {
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int i = 0; i < v->n; i++) {
        double x = env_state(v, i)[k];
        s += x;
        s2 += x * x;
        *lo = fmin(*lo, x);
        *hi = fmax(*hi, x);
    }
    *mean = s / v->n;
    *var = s2 / v->n - *mean * *mean;
}

/* Start states are uniform on [lo, hi) per component (velocity of MountainCar: exactly 0), and
 * observations are the documented functions of them. */
static void test_start_states(void) {
    struct {
        const char *name;
        double lo[4], hi[4];
    } cases[3] = {
        {"cartpole", {-0.05, -0.05, -0.05, -0.05}, {0.05, 0.05, 0.05, 0.05}},
        {"acrobot", {-0.1f, -0.1f, -0.1f, -0.1f}, {0.1f, 0.1f, 0.1f, 0.1f}},   /* float32 */
        {"mountaincar", {-0.6, 0}, {-0.4, 0}},
    };
    const int n = 4000;
    for (int c = 0; c < 3; c++) {
        const dqn_env_type *t = dqn_env_find(cases[c].name);
        dqn_vecenv v;
        CHECK_OK(create(&v, t, n, 12345, DQN_STREAM_ENV));
        if (!v.n) continue;
        dqn_vecenv_reset(&v);
        for (int k = 0; k < t->state_dim; k++) {
            double a = cases[c].lo[k], b = cases[c].hi[k], lo, hi, mean, var;
            moments(&v, k, &lo, &hi, &mean, &var);
            if (a == b) {
                CHECK(lo == a && hi == a, "%s[%d] in [%g, %g], want %g", t->name, k, lo, hi, a);
                continue;
            }
            double w = b - a;
            CHECK(lo >= a && hi <= b, "%s[%d] in [%g, %g], want within [%g, %g]", t->name, k, lo,
                  hi, a, b);
            CHECK(lo < a + 0.01 * w && hi > b - 0.01 * w, "%s[%d] spans only [%g, %g]", t->name, k,
                  lo, hi);
            /* 6 standard errors of the mean and of the variance of U(a, b) */
            CHECK(fabs(mean - (a + b) / 2) < 6 * w / sqrt(12.0 * n), "%s[%d] mean %g", t->name, k,
                  mean);
            CHECK(fabs(var / (w * w / 12) - 1) < 6 * sqrt(0.8 / n), "%s[%d] variance %g, want %g",
                  t->name, k, var, w * w / 12);
        }
        for (int i = 0; i < n; i++) {
            const double *s = env_state(&v, i);
            const float *o = obs_of(v.obs, &v, i);
            int ok = 1;
            if (strcmp(t->name, "acrobot") != 0)
                for (int k = 0; k < t->state_dim; k++) ok &= o[k] == (float)s[k];
            else {
                float want[6] = {(float)cos(s[0]), (float)sin(s[0]), (float)cos(s[1]),
                                 (float)sin(s[1]), (float)s[2],      (float)s[3]};
                for (int k = 0; k < 6; k++) ok &= o[k] == want[k];
                /* Gymnasium stores Acrobot's start state in float32 */
                for (int k = 0; k < 4; k++) ok &= s[k] == (double)(float)s[k];
            }
            CHECK(ok, "%s env %d: start observation or state", t->name, i);
            if (!ok) break;
        }
        dqn_vecenv_destroy(&v);
    }
}

/* The same seed gives the same trajectories; another seed other start states; the envs of a
 * vector start apart; env i of a vector is the env of a one-env vector at stream_base + i. */
static void test_determinism_and_streams(void) {
    const char *names[3] = {"cartpole", "acrobot", "mountaincar"};
    enum { N = 8, STEPS = 3000 };
    for (int c = 0; c < 3; c++) {
        const dqn_env_type *t = dqn_env_find(names[c]);
        size_t od = (size_t)t->api.obs_dim;
        dqn_vecenv a, b, other, single[N];
        CHECK_OK(create(&a, t, N, 7, DQN_STREAM_ENV));
        CHECK_OK(create(&b, t, N, 7, DQN_STREAM_ENV));
        CHECK_OK(create(&other, t, N, 8, DQN_STREAM_ENV));
        for (int i = 0; i < N; i++)
            CHECK_OK(create(&single[i], t, 1, 7, DQN_STREAM_ENV + i));
        dqn_vecenv_reset(&a);
        dqn_vecenv_reset(&b);
        dqn_vecenv_reset(&other);
        for (int i = 0; i < N; i++) dqn_vecenv_reset(&single[i]);

        CHECK(memcmp(a.obs, other.obs, N * od * sizeof(float)) != 0, "%s: seed 8 starts as seed 7",
              t->name);
        int distinct = 1;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < i; j++)
                distinct &=
                    memcmp(obs_of(a.obs, &a, i), obs_of(a.obs, &a, j), od * sizeof(float)) != 0;
        CHECK(distinct, "%s: two envs of a vector share a start state", t->name);

        int32_t act[N];
        uint64_t ctr = 0;
        int same = 1, same_single = 1, episodes = 0;
        for (int s = 0; s < STEPS; s++) {
            random_actions(&a, 99, &ctr, act);
            dqn_vecenv_step(&a, act);
            dqn_vecenv_step(&b, act);
            same &= memcmp(a.obs, b.obs, N * od * sizeof(float)) == 0 &&
                    memcmp(a.final_obs, b.final_obs, N * od * sizeof(float)) == 0 &&
                    memcmp(a.reward, b.reward, N * sizeof(float)) == 0 &&
                    memcmp(a.terminated, b.terminated, N) == 0 &&
                    memcmp(a.truncated, b.truncated, N) == 0 &&
                    memcmp(a.done_return, b.done_return, N * sizeof(double)) == 0 &&
                    memcmp(a.done_len, b.done_len, N * sizeof(int32_t)) == 0 &&
                    memcmp(a.rng, b.rng, N * sizeof(dqn_rng)) == 0;
            for (int i = 0; i < N; i++) {
                dqn_vecenv_step(&single[i], &act[i]);
                same_single &=
                    memcmp(single[i].obs, obs_of(a.obs, &a, i), od * sizeof(float)) == 0 &&
                    single[i].reward[0] == a.reward[i] &&
                    single[i].rng[0].counter == a.rng[i].counter &&
                    single[i].terminated[0] == a.terminated[i] &&
                    single[i].truncated[0] == a.truncated[i];
                episodes += a.done_len[i] > 0;
            }
        }
        CHECK(same, "%s: two vectors with one seed diverged", t->name);
        CHECK(same_single, "%s: env i differs from a one-env vector at stream_base + i", t->name);
        CHECK(episodes >= N, "%s: only %d episodes in %d steps of %d envs", t->name, episodes,
              STEPS, N);
        dqn_vecenv_destroy(&a);
        dqn_vecenv_destroy(&b);
        dqn_vecenv_destroy(&other);
        for (int i = 0; i < N; i++) dqn_vecenv_destroy(&single[i]);
    }
}

/* CartPole pushed right falls: that step reports the falling observation in final_obs, the
 * return and length, and obs is the next episode's start, drawn with the env's next counter. */
static void test_reset_inside_step(void) {
    const dqn_env_type *t = dqn_env_find("cartpole");
    dqn_vecenv v;
    CHECK_OK(create(&v, t, 1, 3, DQN_STREAM_ENV));
    dqn_vecenv_reset(&v);
    CHECK(v.rng[0].counter == 4, "a CartPole reset draws 4 numbers, counter %llu",
          (unsigned long long)v.rng[0].counter);
    int32_t push = 1;
    int len = 0, ended = 0;
    while (!ended && len < 1000) {
        float before[4];
        memcpy(before, v.obs, sizeof before);
        uint64_t draw = v.rng[0].counter;
        dqn_vecenv_step(&v, &push);
        len++;
        ended = v.terminated[0] || v.truncated[0];
        if (!ended) {
            CHECK(memcmp(v.final_obs, v.obs, sizeof before) == 0 && v.done_len[0] == 0 &&
                      v.done_return[0] == 0 && v.ep_len[0] == len && v.ep_return[0] == len,
                  "step %d of an unfinished episode", len);
            CHECK(v.obs[1] > before[1], "pushing right must speed the cart to the right");
            continue;
        }
        const float *f = v.final_obs;
        CHECK(v.terminated[0] && !v.truncated[0] && len < t->api.max_steps, "pushed right: %d steps",
              len);
        CHECK(fabsf(f[0]) > 2.4f || fabsf(f[2]) > (float)(12 * 2 * PI_F64 / 360),
              "final observation x %g theta %g is not a fall", f[0], f[2]);
        CHECK(v.reward[0] == 1.0f && v.done_return[0] == len && v.done_len[0] == len,
              "terminating step: reward %g, done return %g, done len %d", v.reward[0],
              v.done_return[0], v.done_len[0]);
        CHECK(v.ep_len[0] == 0 && v.ep_return[0] == 0, "episode counters not reset");
        double fresh[8];
        float fresh_obs[4];
        CHECK(t->api.state_size <= sizeof fresh, "state_size %zu", t->api.state_size);
        dqn_rng r = {v.seed, v.stream_base, draw};
        t->api.reset(NULL, 1, NULL, fresh, &r, fresh_obs);
        draw = r.counter;
        CHECK(memcmp(fresh_obs, v.obs, sizeof fresh_obs) == 0 && v.rng[0].counter == draw &&
                  draw == 8,
              "obs after the reset is not the next start state (counter %llu)",
              (unsigned long long)draw);
        for (int k = 0; k < 4; k++)
            CHECK(fabsf(v.obs[k]) <= 0.05f, "start obs[%d] = %g", k, v.obs[k]);
    }
    CHECK(ended, "CartPole pushed right never ended");
    /* the next step continues the new episode */
    dqn_vecenv_step(&v, &push);
    CHECK(v.ep_len[0] == 1 && v.done_len[0] == 0 && v.done_return[0] == 0,
          "after the reset: ep_len %d", v.ep_len[0]);
    /* dqn_vecenv_reset draws fresh start states and clears the counters */
    float old[4];
    memcpy(old, v.obs, sizeof old);
    dqn_vecenv_reset(&v);
    CHECK(v.ep_len[0] == 0 && v.rng[0].counter == 12 && memcmp(old, v.obs, sizeof old) != 0, "reset");
    dqn_vecenv_destroy(&v);
}

typedef int32_t (*policy_fn)(const float *obs);

/* Run every env of a vector with a policy (or a constant action) until each has finished one
 * episode; check rewards, flags and bookkeeping against the env's conventions. Returns how many
 * episodes terminated (the others were truncated at the time limit). */
static int run_episodes(const char *name, policy_fn policy, int32_t constant, int n) {
    const dqn_env_type *t = dqn_env_find(name);
    dqn_vecenv v;
    CHECK_OK(create(&v, t, n, 21, DQN_STREAM_ENV));
    if (!v.n) return -1;
    dqn_vecenv_reset(&v);
    int32_t act[64];
    double ret[64] = {0};
    int done = 0, terminated = 0, finished[64] = {0};
    for (int s = 1; s <= t->api.max_steps && done < n; s++) {
        for (int i = 0; i < n; i++) act[i] = policy ? policy(obs_of(v.obs, &v, i)) : constant;
        dqn_vecenv_step(&v, act);
        for (int i = 0; i < n; i++) {
            if (finished[i]) continue;
            int term = v.terminated[i], trunc = v.truncated[i];
            float want_r = -1.0f; /* mountaincar: every step */
            if (!strcmp(name, "cartpole"))
                want_r = 1.0f; /* every step, the last too */
            else if (!strcmp(name, "acrobot"))
                want_r = term ? 0.0f : -1.0f;
            CHECK(v.reward[i] == want_r, "%s env %d step %d: reward %g, want %g", name, i, s,
                  v.reward[i], want_r);
            ret[i] += v.reward[i];
            CHECK(trunc == (s == t->api.max_steps), "%s env %d step %d: truncated %d", name, i, s,
                  trunc);
            if (!(term || trunc)) continue;
            CHECK(v.done_len[i] == s && v.done_return[i] == ret[i],
                  "%s env %d: done len %d return %g", name, i, v.done_len[i], v.done_return[i]);
            finished[i] = 1;
            done++;
            terminated += term;
        }
    }
    CHECK(done == n, "%s: %d of %d episodes ended", name, done, n);
    dqn_vecenv_destroy(&v);
    return terminated;
}

static void test_time_limits_and_rewards(void) {
    int k;
    /* time limits: each env truncated, not terminated, at max_steps */
    CHECK((k = run_episodes("cartpole", cartpole_balance, 0, 8)) == 0, "cartpole balanced: %d fell",
          k);
    for (int a = 0; a < 3; a++)
        CHECK((k = run_episodes("mountaincar", NULL, a, 8)) == 0, "mountaincar action %d: %d goals",
              a, k);
    CHECK((k = run_episodes("acrobot", NULL, 1, 8)) == 0, "acrobot without torque: %d goals", k);
    /* goals: Acrobot 0 on the terminal step, MountainCar -1 on it too, CartPole +1 when falling
     * (the swing reaches Acrobot's goal in ~120 steps from most starts, not from all) */
    CHECK((k = run_episodes("acrobot", acrobot_swing, 0, 8)) >= 7, "acrobot swing: %d goals", k);
    CHECK((k = run_episodes("mountaincar", mountaincar_pump, 0, 8)) == 8,
          "mountaincar pump: %d goals", k);
    CHECK((k = run_episodes("cartpole", NULL, 0, 8)) == 8, "cartpole pushed left: %d fell", k);
}

/* An episode that terminates on the time limit's last step reports terminated = 1 and
 * truncated = 1, as Gymnasium's TimeLimit does. MountainCar cars from one start state idle k
 * steps and then pump; from -0.55 at rest, k = 85 reaches the goal on step 200 exactly. */
static void test_terminated_on_last_step(void) {
    const dqn_env_type *t = dqn_env_find("mountaincar");
    enum { N = 200 };
    dqn_vecenv v;
    CHECK_OK(create(&v, t, N, 5, DQN_STREAM_ENV));
    if (!v.n) return;
    dqn_vecenv_reset(&v);
    const double start[2] = {-0.55, 0.0};
    for (int i = 0; i < N; i++)
        t->set_state(v.state + (size_t)i * t->api.state_size, start, v.obs + 2 * i);
    int32_t act[N];
    int finished[N] = {0}, both = 0, bad = 0;
    for (int s = 1; s <= t->api.max_steps; s++) {
        for (int i = 0; i < N; i++) act[i] = s <= i ? 1 : mountaincar_pump(obs_of(v.obs, &v, i));
        dqn_vecenv_step(&v, act);
        for (int i = 0; i < N; i++) {
            if (finished[i]) continue;
            if (v.terminated[i] || v.truncated[i]) finished[i] = s;
            bad += v.truncated[i] != (s == t->api.max_steps);
            both += v.terminated[i] && v.truncated[i];
        }
    }
    CHECK(bad == 0, "%d envs with truncated off the time limit", bad);
    CHECK(both > 0, "no env terminated on step %d", t->api.max_steps);
    dqn_vecenv_destroy(&v);
}

int main(void) {
    test_registry();
    test_start_states();
    test_determinism_and_streams();
    test_reset_inside_step();
    test_time_limits_and_rewards();
    test_terminated_on_last_step();
    return check_finish("test_envs");
}
