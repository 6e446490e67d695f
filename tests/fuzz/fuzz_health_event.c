/* Fuzz target: the health event loader (dqn_health_replay_run, as dqn health --replay reads a
 * run's health_event.bin: its config, event, parameter count and snapshot, then the replayed
 * update). Input: a health_event.bin; its CRC is recomputed (fuzz_seal). Configs beyond the budget
 * of fuzz_config_small are skipped. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *b = fuzz_seal(data, size);
    const char *path = fuzz_path("health_event.bin");
    fuzz_write(path, b, size);
    free(b);
    if (!fuzz_container_config_small(path)) return 0;
    dqn_health_replay *r = NULL;
    if (dqn_health_replay_run(path, "cpu", &r) == DQN_OK) {
        const dqn_health_report *rep = dqn_health_replay_report(r);
        const dqn_health_event *saved = dqn_health_replay_saved(r);
        if (!rep || !saved || rep->n_slots < 1 || saved->slot < 0 || saved->slot >= rep->n_slots)
            abort();
        dqn_health_replay_destroy(r);
        fuzz_accepted++;
    }
    return 0;
}
