/* The inference-only policy from a checkpoint acts as the trainer's greedy evaluation does:
 * the same episodes, played through dqn_policy_act, give the same returns. */
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dqn.h"
#include "dqn_philox.h"
#include "envs/env.h"

int main(void) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    c.steps = 4000;
    c.learning_starts = 500;
    snprintf(c.device, sizeof c.device, "cpu");
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return check_finish("test_policy");
    CHECK_OK(dqn_trainer_run_until(t, c.steps));
    enum { EP = 6 };
    double mean, sd, ret[EP];
    CHECK_OK(dqn_trainer_evaluate(t, EP, 42, &mean, &sd, ret));
    char path[] = "/tmp/dqn-policy-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK_OK(dqn_trainer_save(t, path));
    dqn_trainer_destroy(t);

    dqn_policy *p = NULL;
    CHECK_OK(dqn_policy_load(path, &p));
    unlink(path);
    if (!p) return check_finish("test_policy");
    int sizes[16];
    CHECK(dqn_policy_obs_dim(p) == 4 && dqn_policy_branches(p, sizes) == 1 && sizes[0] == 2,
          "policy shape");
    /* replay the evaluation: same env vector (seed 42, eval streams), actions from the policy */
    dqn_vecenv v;
    dqn_env cartpole = dqn_env_of(dqn_env_find("cartpole"));
    CHECK_OK(dqn_vecenv_create(&v, &cartpole, EP, 42, DQN_STREAM_EVAL << 16));
    dqn_vecenv_reset(&v);
    int32_t a[EP];
    double got[EP];
    int done[EP] = {0}, left = EP;
    while (left > 0) {
        CHECK_OK(dqn_policy_act(p, v.obs, EP, a));
        for (int e = 0; e < EP; e++) CHECK(a[e] == 0 || a[e] == 1, "action %d", a[e]);
        dqn_vecenv_step(&v, a);
        for (int e = 0; e < EP; e++)
            if (!done[e] && (v.terminated[e] || v.truncated[e])) {
                done[e] = 1;
                got[e] = v.done_return[e];
                left--;
            }
    }
    for (int e = 0; e < EP; e++)
        CHECK(got[e] == ret[e], "episode %d: policy %g vs trainer %g", e, got[e], ret[e]);
    /* one observation at a time gives the batch's actions */
    int32_t one;
    CHECK_OK(dqn_policy_act(p, v.obs + 4, 1, &one));
    CHECK_OK(dqn_policy_act(p, v.obs, EP, a));
    CHECK(one == a[1], "single vs batched action");
    CHECK(dqn_policy_act(p, v.obs, 0, a) == DQN_ERR_ARG, "n = 0 accepted");
    dqn_policy *q = NULL;
    CHECK(dqn_policy_load("/nonexistent/ckpt.bin", &q) == DQN_ERR_IO && !q, "missing file");
    dqn_vecenv_destroy(&v);
    dqn_policy_destroy(p);
    return check_finish("test_policy");
}
