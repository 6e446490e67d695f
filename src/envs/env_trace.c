/* Replays a trajectory of several episodes through a one-env vector from given start states, for
 * the conformance test against Gymnasium (tests/py/test_env_conformance.py, through ctypes). */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "envs/env.h"

/* Episode k starts from start_states[k * state_dim] (Gymnasium's env.unwrapped.state after its
 * k-th reset); start_obs[k * obs_dim] receives the observation of that state. Step t applies
 * actions[t * n_branches] and writes what Gymnasium's env.step returns: the observation before
 * any reset, reward, terminated and truncated (time limit included), and the physical state
 * after the step in state[t * state_dim] (NaN on a step that ends an episode: the vector has
 * reset it by then). An episode that ends starts the next from the next start state; needing
 * more than n_starts is an error. */
dqn_status dqn_env_trace(const char *name, const double *start_states, int n_starts,
                         const int32_t *actions, int n_steps, float *start_obs, float *obs,
                         float *reward, uint8_t *terminated, uint8_t *truncated, double *state) {
    const dqn_env_type *t = dqn_env_find(name);
    if (!t || !t->set_state)
        return DQN_ERR(DQN_ERR_ARG, "env '%s' cannot be traced (known fixed envs: "
                       "cartpole|acrobot|mountaincar)", name ? name : "(null)");
    if (n_starts < 1 || n_steps < 0)
        return DQN_ERR(DQN_ERR_ARG, "%s: n_starts %d, n_steps %d; need n_starts >= 1, n_steps >= 0",
                       name, n_starts, n_steps);
    size_t od = (size_t)t->api.obs_dim, sd = (size_t)t->state_dim;
    dqn_vecenv v;
    dqn_env e = dqn_env_of(t);
    DQN_TRY(dqn_vecenv_create(&v, &e, 1, 0, 0));
    dqn_status st = dqn_vecenv_reset(&v);
    int episode = 0;
    t->set_state(v.state, start_states, v.obs);
    memcpy(start_obs, v.obs, od * sizeof(float));
    for (int s = 0; s < n_steps && st == DQN_OK; s++) {
        if ((st = dqn_vecenv_step(&v, actions + (size_t)s * (size_t)t->api.n_branches)) != DQN_OK)
            break;
        memcpy(obs + (size_t)s * od, v.final_obs, od * sizeof(float));
        reward[s] = v.reward[0];
        terminated[s] = v.terminated[0];
        truncated[s] = v.truncated[0];
        int done = v.terminated[0] || v.truncated[0];
        /* every env's private state begins with its set_state vector */
        if (done)
            for (size_t k = 0; k < sd; k++) state[(size_t)s * sd + k] = NAN;
        else
            memcpy(state + (size_t)s * sd, v.state, sd * sizeof(double));
        if (!done || s == n_steps - 1) continue;
        if (++episode == n_starts) {
            dqn_vecenv_destroy(&v);
            return DQN_ERR(DQN_ERR_ARG,
                           "%s: episode %d ends at step %d, only %d start states given", name,
                           episode, s, n_starts);
        }
        t->set_state(v.state, start_states + (size_t)episode * sd, v.obs);
        memcpy(start_obs + (size_t)episode * od, v.obs, od * sizeof(float));
    }
    dqn_vecenv_destroy(&v);
    return st;
}
