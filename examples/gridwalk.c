/* A user env written in C and trained through the public API (include/dqn.h).
 *
 * Gridwalk: an agent on a 9 x 9 grid walks to a goal. Two action branches move it along x and
 * along y (each: -1, stay, +1), so one step can move diagonally; the reward is -0.1 a step and
 * +1 at the goal (terminated). The env truncates an episode itself after 40 steps; the vector
 * would too with max_steps, shown here the other way. Observations: agent and goal positions,
 * scaled to [-1, 1].
 *
 *   make examples && ./build/examples/gridwalk [steps] [seed]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dqn.h"

#define SIZE 9
#define LIMIT 40

typedef struct {
    int32_t x, y, gx, gy, t;   /* one slot's state: the vector owns an array of these */
} walk_state;

static float scaled(int v) { return (float)v / (SIZE - 1) * 2.0f - 1.0f; }

static void observe(const walk_state *s, float *obs) {
    obs[0] = scaled(s->x);
    obs[1] = scaled(s->y);
    obs[2] = scaled(s->gx);
    obs[3] = scaled(s->gy);
}

/* Each slot draws from its own stream (rng[i]), so runs are reproducible from the seed. */
static dqn_status walk_reset(void *ctx, int n, const uint8_t *mask, void *state, dqn_rng *rng,
                             float *obs) {
    (void)ctx;
    walk_state *s = state;
    for (int i = 0; i < n; i++) {
        if (mask && !mask[i]) continue;
        s[i].x = (int32_t)dqn_rng_below(&rng[i], SIZE);
        s[i].y = (int32_t)dqn_rng_below(&rng[i], SIZE);
        do {
            s[i].gx = (int32_t)dqn_rng_below(&rng[i], SIZE);
            s[i].gy = (int32_t)dqn_rng_below(&rng[i], SIZE);
        } while (s[i].gx == s[i].x && s[i].gy == s[i].y);
        s[i].t = 0;
        observe(&s[i], obs + 4 * i);
    }
    return DQN_OK;
}

static int clampi(int v) { return v < 0 ? 0 : v >= SIZE ? SIZE - 1 : v; }

static dqn_status walk_step(void *ctx, int n, const int32_t *actions, void *state, dqn_rng *rng,
                            float *obs, float *reward, uint8_t *terminated, uint8_t *truncated) {
    (void)ctx;
    (void)rng;
    walk_state *s = state;
    for (int i = 0; i < n; i++) {
        s[i].x = clampi(s[i].x + actions[2 * i] - 1);
        s[i].y = clampi(s[i].y + actions[2 * i + 1] - 1);
        s[i].t++;
        int at_goal = s[i].x == s[i].gx && s[i].y == s[i].gy;
        reward[i] = at_goal ? 1.0f : -0.1f;
        terminated[i] = (uint8_t)at_goal;
        truncated[i] = (uint8_t)(!at_goal && s[i].t >= LIMIT);
        observe(&s[i], obs + 4 * i);
    }
    return DQN_OK;
}

static int fail(const char *what, dqn_status s) {
    fprintf(stderr, "gridwalk: %s: %s (%s)\n", what, dqn_status_str(s), dqn_last_error());
    return s == DQN_ERR_ARG ? 2 : 1;
}

int main(int argc, char **argv) {
    dqn_env_api env = {
        .name = "gridwalk",
        .obs_dim = 4,
        .n_branches = 2,
        .branch_sizes = {3, 3},
        .state_size = sizeof(walk_state),
        .reset = walk_reset,
        .step = walk_step,
    };
    dqn_config c;
    dqn_config_defaults(&c);
    dqn_status s;
    const char *keys[][2] = {
        {"steps", argc > 1 ? argv[1] : "30000"}, {"seed", argc > 2 ? argv[2] : "1"},
        {"num_envs", "8"},      {"device", "cpu"}, {"n_tau", "8"}, {"n_tau_target", "8"},
        {"k_tau", "8"},         {"batch_size", "64"}, {"train_freq", "8"},
        {"eps_fraction", "0.3"}, {"gamma", "0.95"}, {"lr", "1e-3"}, {"target_period", "500"},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if ((s = dqn_config_set(&c, keys[k][0], keys[k][1])) != DQN_OK) return fail("config", s);
    dqn_trainer *t;
    if ((s = dqn_trainer_create_env(&c, &env, &t)) != DQN_OK) return fail("create", s);
    double before, after, sd;
    if ((s = dqn_trainer_evaluate(t, 100, 7, &before, &sd, NULL)) != DQN_OK) {
        dqn_trainer_destroy(t);
        return fail("evaluate", s);
    }
    for (int64_t done = 0; done < c.steps;) {
        done += c.steps / 5;
        if ((s = dqn_trainer_run_until(t, done)) != DQN_OK) {
            dqn_trainer_destroy(t);
            return fail("train", s);
        }
        dqn_train_stats st;
        dqn_trainer_stats(t, &st);
        printf("steps %7lld  episodes %6lld  mean return %6.2f  loss %.4f  epsilon %.2f\n",
               (long long)st.env_steps, (long long)st.episodes, st.mean_return, st.last_loss,
               st.epsilon);
    }
    if ((s = dqn_trainer_evaluate(t, 100, 7, &after, &sd, NULL)) != DQN_OK) {
        dqn_trainer_destroy(t);
        return fail("evaluate", s);
    }
    printf("greedy return over 100 episodes: %.2f before training, %.2f after (std %.2f)\n",
           before, after, sd);
    dqn_trainer_destroy(t);
    return 0;
}
