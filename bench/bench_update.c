/* Update-step throughput of the model on one backend: a replay buffer of random transitions,
 * then timed whole updates (sample, forwards, loss, backward, clip, Adam, target sync).
 * usage: bench_update [cpu|cuda|cuda:tf32|count] [cartpole|seed] [off|detect|guard] [B ...]
 * (default: cpu cartpole off 32 256); the health mode is the numerical-health subsystem's.
 * "count" times nothing: it runs one update on the counting CPU backend (tests/op_counter.h,
 * computing nothing) and prints its op calls, estimated CUDA graph nodes and GEMM FLOPs, for the
 * whole update and for the loss-and-gradient stage alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "bench_model.h"
#include "core/error.h"
#include "op_counter.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(const char *what, dqn_status s) {
    fprintf(stderr, "bench_update: %s: %s: %s\n", what, dqn_status_str(s), dqn_last_error());
    return 1;
}

static dqn_status print_counts(dqn_model *m, const dqn_replay_view *v, const char *model, int B) {
    oc_reset();
    DQN_TRY(dqn_model_update(m, v));
    long calls = oc_calls(), nodes = oc_nodes();
    double flops = oc_flops;
    oc_reset();
    DQN_TRY(dqn_model_loss_grad(m));
    printf("count model=%s B=%d N=32: update %ld ops, ~%ld nodes, %.4g GFLOP; loss+grad stage "
           "%ld ops, ~%ld nodes\n  loss+grad ops:",
           model, B, calls, nodes, flops * 1e-9, oc_calls(), oc_nodes());
    oc_print(stdout);
    if (oc_unwrapped())
        printf("  warning: %d compute ops have no counting wrapper (tests/op_counter.h)\n",
               oc_unwrapped());
    return DQN_OK;
}

int main(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "cpu";
    const char *model = argc > 2 ? argv[2] : "cartpole";
    int Bs[16] = {32, 256}, nB = 2, first = 3;
    dqn_health_mode health = DQN_HEALTH_OFF;
    if (argc > 3 && dqn_health_mode_parse(argv[3], &health) == DQN_OK) first = 4;
    if (argc > first) {
        nB = 0;
        for (int i = first; i < argc && nB < 16; i++) Bs[nB++] = atoi(argv[i]);
    }
    dqn_arch a = bench_arch(model);
    for (int k = 0; k < nB; k++) {
        int B = Bs[k];
        dqn_backend *be = NULL;
        int cuda = strncmp(dev, "cuda", 4) == 0, tf32 = strcmp(dev, "cuda:tf32") == 0;
        int count = strcmp(dev, "count") == 0;
        dqn_status s = cuda    ? dqn_backend_cuda_create(&be, 0, tf32 ? DQN_MATH_TF32 : DQN_MATH_FP32)
                       : count ? oc_create(&be)
                               : dqn_backend_cpu_create(&be);
        oc_dry = count;
        if (s) return fail("backend", s);
        if (strcmp(dev, "cpu") == 0) dqn_cpu_set_threads(1);   /* one core, as the solve bench */
        bench_update_run run;
        if ((s = bench_run_make(&run, be, &a, B, health))) return fail("model and replay", s);
        dqn_model *m = &run.m;
        const dqn_replay_view *v = &run.v;
        if (count) {
            if ((s = print_counts(m, v, model, B))) return fail("count", s);
            bench_run_free(&run);
            be->ops->destroy(be);
            continue;
        }
        for (int w = 0; w < 5; w++)
            if ((s = dqn_model_update(m, v))) return fail("update", s);
        be->ops->sync(be);
        int iters = 0;
        double t0 = now(), t1 = t0;
        while (t1 - t0 < 1.0 || iters < 10) {
            if ((s = dqn_model_update(m, v))) return fail("update", s);
            iters++;
            if (iters % 5 == 0) {
                be->ops->sync(be);
                t1 = now();
            }
        }
        be->ops->sync(be);
        t1 = now();
        double ups = iters / (t1 - t0);
        static const char *const hname[] = {"off", "detect", "guard"};
        char sw_set[512] = "";
        if (cuda) bench_switches(sw_set, sizeof sw_set);
        printf("update %s model=%s gemm=%s math=%s health=%s B=%d N=32: %.1f updates/s, "
               "%.3f ms/update, %.0f samples/s%s%s\n",
               be->ops->name, model, cuda ? "own+cublas" : dqn_cpu_gemm_name(), tf32 ? "tf32" : "fp32",
               hname[health], B, ups, 1e3 / ups, ups * B, *sw_set ? "; " : "", sw_set);
        bench_run_free(&run);
        be->ops->destroy(be);
    }
    return 0;
}
