/* Fuzz target: the checkpoint loaders (dqn_trainer_load, as dqn train --resume and dqn eval read
 * a checkpoint.bin; dqn_policy_load, the inference-only loader). Input: a checkpoint file; its
 * CRC is recomputed (fuzz_seal) so that mutations reach the sections. Configs beyond the budget
 * of fuzz_config_small are skipped. A trainer that loads must save again and load that copy. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *b = fuzz_seal(data, size);
    const char *path = fuzz_path("checkpoint.bin");
    fuzz_write(path, b, size);
    free(b);
    if (!fuzz_container_config_small(path)) return 0;
    dqn_policy *p = NULL;
    if (dqn_policy_load(path, &p) == DQN_OK) {
        int sizes[DQN_CFG_MAX_BRANCHES];
        int nb = dqn_policy_branches(p, sizes), od = dqn_policy_obs_dim(p);
        if (nb < 1 || nb > DQN_CFG_MAX_BRANCHES || od < 1) abort();
        float *obs = calloc((size_t)od * 2, sizeof *obs);
        int32_t act[2 * DQN_CFG_MAX_BRANCHES];
        if (!obs || dqn_policy_act(p, obs, 2, act) != DQN_OK) abort();
        for (int i = 0; i < 2 * nb; i++)
            if (act[i] < 0 || act[i] >= sizes[i % nb]) abort();
        free(obs);
        dqn_policy_destroy(p);
    }
    dqn_trainer *t = NULL;
    if (dqn_trainer_load(path, "cpu", &t) == DQN_OK) {
        const char *again = fuzz_path("again.bin");
        if (dqn_trainer_save(t, again) != DQN_OK) abort();
        dqn_trainer_destroy(t);
        t = NULL;
        if (dqn_trainer_load(again, "cpu", &t) != DQN_OK) {
            fprintf(stderr, "a loaded checkpoint, saved again, does not load: %s\n",
                    dqn_last_error());
            abort();
        }
        dqn_trainer_destroy(t);
        fuzz_accepted++;
    }
    return 0;
}
