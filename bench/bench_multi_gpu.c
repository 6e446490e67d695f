/* Data-parallel scaling of the update step (docs/multi-gpu.md): the seed model at B samples per
 * GPU on 1 GPU without a communicator (the baseline), then on 1, 2, 4 and 8 GPUs over NCCL (as
 * many as are visible, up to max_ranks), ranks as threads (tests/dp_harness.h), each with its own
 * replay shard. Every rank times the same number of whole updates (sample, forwards, loss,
 * backward, gradient all-reduce, Adam, target sync) after a barrier; the slowest rank counts.
 * usage: bench_multi_gpu [max_ranks] [B] [updates]   (default: 8 4096 200) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dp_harness.h"

typedef struct {
    int warmup, iters;
    double seconds[DP_MAX_WORLD];
} timing;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static dqn_status timed(dp_rank *r) {
    timing *tm = r->spec->arg;
    for (int k = 0; k < tm->warmup; k++) DQN_TRY(dqn_model_update(&r->m, &r->view));
    DQN_TRY(r->be->ops->sync(r->be));
    dp_barrier();
    double t0 = now();
    for (int k = 0; k < tm->iters; k++) DQN_TRY(dqn_model_update(&r->m, &r->view));
    DQN_TRY(r->be->ops->sync(r->be));
    tm->seconds[r->rank] = now() - t0;
    return DQN_OK;
}

/* updates/s of the slowest rank, or -1 on failure (printed) */
static double measure(int world, int plain, int B, int iters) {
    dp_spec s = dp_seed_spec(world, B);
    s.plain = plain;
    timing tm = {5, iters, {0}};
    s.body = timed;
    s.arg = &tm;
    dp_rank ranks[DP_MAX_WORLD];
    if (dp_run(&s, ranks) != DQN_OK) {
        for (int r = 0; r < world; r++)
            if (ranks[r].status != DQN_OK) fprintf(stderr, "bench_multi_gpu: %s\n", ranks[r].error);
        return -1;
    }
    double worst = 0;
    for (int r = 0; r < world; r++) worst = tm.seconds[r] > worst ? tm.seconds[r] : worst;
    return iters / worst;
}

int main(int argc, char **argv) {
    int max_ranks = argc > 1 ? atoi(argv[1]) : 8, B = argc > 2 ? atoi(argv[2]) : 4096;
    int iters = argc > 3 ? atoi(argv[3]) : 200, visible = dqn_cuda_device_count();
    if (visible < 1) {
        printf("bench_multi_gpu: no CUDA device\n");
        return 77;
    }
    if (max_ranks > visible) max_ranks = visible;
    if (max_ranks > DP_MAX_WORLD) max_ranks = DP_MAX_WORLD;
    if (max_ranks < 1 || B < 1 || iters < 1) {
        fprintf(stderr, "usage: bench_multi_gpu [max_ranks >= 1] [B >= 1] [updates >= 1]\n");
        return 2;
    }
    printf("seed model, B = %d per GPU, %d timed updates per rank; %d GPU%s visible\n", B, iters,
           visible, visible == 1 ? "" : "s");
    double base = measure(1, 1, B, iters);
    if (base < 0) return 1;
    printf("multigpu ranks=1 plain B=%d/GPU: %.1f updates/s, %.0f samples/s, %.3f ms/update\n", B,
           base, base * B, 1e3 / base);
    for (int world = 1; world <= max_ranks; world *= 2) {
        double ups = measure(world, 0, B, iters);
        if (ups < 0) return 1;
        double ratio = ups * world / base;
        printf("multigpu ranks=%d nccl  B=%d/GPU: %.1f updates/s, %.0f samples/s, %.3f ms/update, "
               "scaling %.2fx over 1 GPU%s\n", world, B, ups, ups * B * world, 1e3 / ups, ratio,
               world == 2 ? " (target >= 1.8x)" : "");
    }
    return 0;
}
