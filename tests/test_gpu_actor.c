/* The captured CUDA acting step (pinned copies, Philox taus keyed by the acting counter, forward,
 * argmax) gives the CPU actor's Q values and actions on the same weights, step after step. */
#include <string.h>

#include "check.h"
#include "train/trainer_internal.h"

int main(void) {
    if (!dqn_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    c.num_envs = 16;
    dqn_trainer *t[2] = {NULL, NULL};
    const char *dev[2] = {"cpu", "cuda"};
    for (int k = 0; k < 2; k++) {
        snprintf(c.device, sizeof c.device, "%s", dev[k]);
        CHECK_OK(dqn_trainer_create(&c, &t[k]));
        if (!t[k]) return check_finish("test_gpu_actor");
    }
    CHECK(strcmp(dqn_trainer_backend(t[1]), "cuda") == 0, "backend %s", dqn_trainer_backend(t[1]));
    int n = c.num_envs, A = t[0]->arch.br.A, obs = t[0]->env.obs_dim;
    float o[16 * 4], q[2][16 * 2];
    int32_t act[2][16];
    for (int step = 0; step < 5; step++) {
        for (int j = 0; j < n * obs; j++) o[j] = 0.3f * (float)((j * 7 + step * 3) % 11 - 5);
        for (int k = 0; k < 2; k++)
            CHECK_OK(dqn_actor_greedy(&t[k]->actor, t[k]->be, &t[k]->model.L, t[k]->model.params,
                                      o, n, c.seed, 0, act[k], q[k]));
        double err = 0, ref = 0;
        for (int j = 0; j < n * A; j++) {
            double d = q[1][j] - q[0][j];
            err = d * d > err ? d * d : err;
            ref = q[0][j] * q[0][j] > ref ? q[0][j] * q[0][j] : ref;
        }
        CHECK(err <= 1e-10 * ref, "step %d: Q differs (max sq err %g, max sq ref %g)", step, err, ref);
        for (int e = 0; e < n; e++) {
            float gap = q[0][e * A] - q[0][e * A + 1];
            if (gap * gap > 1e-8f) CHECK(act[0][e] == act[1][e], "step %d env %d: action", step, e);
        }
    }
    CHECK(t[1]->actor.graph != NULL, "the CUDA acting step was not captured");
    for (int k = 0; k < 2; k++) dqn_trainer_destroy(t[k]);
    return check_finish("test_gpu_actor");
}
