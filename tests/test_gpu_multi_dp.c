/* Data parallelism on several GPUs (docs/multi-gpu.md): ranks as threads, rank r on device r,
 * joined over NCCL, each with its own replay shard and draws. On 2 GPUs (and on all visible ones,
 * up to 8, when more are lent): after the first captured update every rank's gradient is the mean
 * over the ranks and equals one GPU's gradient on the ranks' batches concatenated to 1e-5
 * relative; after 1,000 updates the weights are bit-identical on every rank (CRC-32 printed).
 * Exits 77, saying how many GPUs it needs, when fewer than 2 are visible. */
#include <stdio.h>
#include <string.h>

#include "dp_check.h"

static void run_world(int world) {
    dp_spec s = dp_seed_spec(world, 256);   /* head clip off: it clips per rank */
    dp_capture cap;
    memset(&cap, 0, sizeof cap);
    cap.updates = 1000;
    s.body = dp_capture_body;
    s.arg = &cap;
    dp_rank ranks[DP_MAX_WORLD];
    CHECK_OK(dp_run(&s, ranks));
    for (int r = 0; r < world; r++) CHECK(ranks[r].status == DQN_OK, "%s", ranks[r].error);
    dqn_backend *ref = NULL;
    dp_result res;
    CHECK_OK(dqn_backend_cuda_create(&ref, 0, DQN_MATH_FP32));
    if (ref && cap.params[world - 1]) {
        CHECK_OK(dp_check(&s, &cap, ref, &res));
        CHECK(res.grad_err <= 1e-5, "%d GPUs: averaged gradient vs one GPU on the concatenated "
              "batch: %.3g relative (%s)", world, res.grad_err, res.worst);
        CHECK(res.loss_err <= 1e-5, "%d GPUs: mean loss %.3g relative", world, res.loss_err);
        CHECK(res.grads_same, "%d GPUs: the ranks hold different averaged gradients", world);
        CHECK(res.params_same, "%d GPUs: weights differ across ranks after 1000 updates", world);
        CHECK(res.params_finite && res.params_moved, "weights finite %d, moved %d",
              res.params_finite, res.params_moved);
        printf("%d GPUs, B = %d per GPU: gradient vs concatenated batch %.2g relative (%s), loss "
               "%.2g; weights after 1000 updates:", world, s.ucfg.B, res.grad_err, res.worst,
               res.loss_err);
        for (int r = 0; r < world; r++) printf(" rank %d crc32 %08x", r, (unsigned)res.crc[r]);
        printf("\n");
    }
    if (ref) ref->ops->destroy(ref);
    dp_capture_free(&cap);
}

int main(void) {
    int n = dqn_cuda_device_count();
    if (n < 2) {
        printf("SKIP: needs 2 GPUs, %d visible\n", n);
        return 77;
    }
    run_world(2);
    if (n > 2) run_world(n < DP_MAX_WORLD ? n : DP_MAX_WORLD);
    return check_finish("test_gpu_multi_dp");
}
