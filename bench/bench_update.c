/* Update-step throughput of the model on one backend: a replay buffer of random transitions,
 * then timed whole updates (sample, forwards, loss, backward, clip, Adam, target sync).
 * usage: bench_update [cpu|cuda|cuda:tf32|count] [MODEL] [off|detect|guard] [taus=T] [isa=I]
 *                     [own_gemm_macs=X] [iqn_embed_elems=X] [trunk_rows=X]
 *                     [side_priority=0|1] [B ...]
 * (default: cpu cartpole off taus=32 32 256); the health mode is the numerical-health
 * subsystem's; MODEL is cartpole, seed, or acrobot / mountaincar (the cartpole model with those
 * envs' observation and action sizes); taus sets N = N' = K (the env presets use 8); isa picks the
 * built-in GEMM's tile kernels (avx512, avx2, portable; default: the best this CPU runs); the
 * CUDA backend's size thresholds (backends/cuda_tunables.h) may be moved, to time a path at sizes
 * that do not take it by default (the line then names them).
 * On cpu with OpenBLAS linked, each B is timed with both GEMMs in this one process and the line
 * gives the built-in GEMM's time as a ratio to OpenBLAS's.
 * "count" times nothing: it runs one update on the counting CPU backend (tests/op_counter.h,
 * computing nothing) and prints its op calls, estimated CUDA graph nodes and GEMM FLOPs, for the
 * whole update and for the loss-and-gradient stage alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm.h"
#include "bench_model.h"
#include "core/error.h"
#include "op_counter.h"

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }

static int fail(const char *what, dqn_status s) {
    fprintf(stderr, "bench_update: %s: %s: %s\n", what, dqn_status_str(s), dqn_last_error());
    return 1;
}

static dqn_status print_counts(dqn_model *m, const dqn_replay_view *v, const char *model, int B,
                               int T) {
    oc_reset();
    DQN_TRY(dqn_model_update(m, v));
    long calls = oc_calls(), nodes = oc_nodes();
    double flops = oc_flops;
    oc_reset();
    DQN_TRY(dqn_model_loss_grad(m));
    printf("count model=%s B=%d N=%d: update %ld ops, ~%ld nodes, %.4g GFLOP; loss+grad stage "
           "%ld ops, ~%ld nodes\n  loss+grad ops:",
           model, B, T, calls, nodes, flops * 1e-9, oc_calls(), oc_nodes());
    oc_print(stdout);
    if (oc_unwrapped())
        printf("  warning: %d compute ops have no counting wrapper (tests/op_counter.h)\n",
               oc_unwrapped());
    return DQN_OK;
}

/* bench_arch's cartpole model with another env's observation and action sizes */
static dqn_arch arch_of(const char *model) {
    static const int br3[] = {3};
    dqn_arch a = bench_arch(model);
    if (strcmp(model, "acrobot") == 0 || strcmp(model, "mountaincar") == 0) {
        a.obs_dim = model[0] == 'a' ? 6 : 2;
        dqn_branches_init(&a.br, 1, br3);
    }
    return a;
}

/* updates per second of back-to-back updates over at least a second, after warm-up; *cpu_ms:
 * this thread's CPU time per update (on a shared machine steadier than the wall clock) */
static dqn_status time_updates(dqn_backend *be, dqn_model *m, const dqn_replay_view *v,
                               double *ups, double *cpu_ms) {
    for (int w = 0; w < 5; w++) DQN_TRY(dqn_model_update(m, v));
    DQN_TRY(be->ops->sync(be));
    int iters = 0;
    double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID), t0 = now(), t1 = t0;
    while (t1 - t0 < 1.0 || iters < 10) {
        DQN_TRY(dqn_model_update(m, v));
        iters++;
        if (iters % 5 == 0) {
            DQN_TRY(be->ops->sync(be));
            t1 = now();
        }
    }
    DQN_TRY(be->ops->sync(be));
    *ups = iters / (now() - t0);
    *cpu_ms = 1e3 * (clock_s(CLOCK_THREAD_CPUTIME_ID) - c0) / iters;
    return DQN_OK;
}

int main(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "cpu";
    const char *model = argc > 2 ? argv[2] : "cartpole";
    int Bs[16] = {32, 256}, nB = 2, first = 3, T = 32;
    dqn_health_mode health = DQN_HEALTH_OFF;
    if (argc > 3 && dqn_health_mode_parse(argv[3], &health) == DQN_OK) first = 4;
    if (argc > first && strncmp(argv[first], "taus=", 5) == 0) T = atoi(argv[first++] + 5);
    if (argc > first && strncmp(argv[first], "isa=", 4) == 0 &&
        !dqn_gemm_builtin_force_isa(argv[first++] + 4)) {
        fprintf(stderr, "bench_update: %s: no such tile kernels on this CPU\n", argv[first - 1]);
        return 2;
    }
    dqn_cuda_tunables tune = DQN_CUDA_TUNABLES_DEFAULT;
    int tuned = 0;
    while (argc > first && bench_tune_parse(argv[first], &tune, &tuned)) first++;
    if (T < 1) {
        fprintf(stderr, "bench_update: taus must be >= 1\n");
        return 2;
    }
    if (argc > first) {
        nB = 0;
        for (int i = first; i < argc && nB < 16; i++) Bs[nB++] = atoi(argv[i]);
    }
    dqn_arch a = arch_of(model);
    int cuda = strncmp(dev, "cuda", 4) == 0, tf32 = strcmp(dev, "cuda:tf32") == 0;
    int count = strcmp(dev, "count") == 0, cpu = !cuda && !count;
    /* the GEMMs to time: the linked one, then on cpu the built-in one where that is another */
    int ngemm = cpu && dqn_cpu_have_openblas() ? 2 : 1;
    for (int k = 0; k < nB; k++) {
        int B = Bs[k];
        double ups[2] = {0, 0}, cpu_ms[2] = {0, 0};
        for (int g = 0; g < ngemm; g++) {
            dqn_backend *be = NULL;
            const dqn_math_mode math = tf32 ? DQN_MATH_TF32 : DQN_MATH_FP32;
            dqn_status s = cuda    ? dqn_backend_cuda_create(&be, 0, math)
                           : count ? oc_create(&be)
                                   : dqn_backend_cpu_create(&be);
            oc_dry = count;
            if (s) return fail("backend", s);
            dqn_cuda_tunables *t = cuda ? dqn_backend_cuda_tunables(be) : NULL;
            if (t && tuned) *t = tune;
            if (cpu) {
                dqn_cpu_set_threads(1); /* one core, as the solve bench */
                dqn_cpu_gemm_force_builtin(g == 1);
            }
            bench_update_run run;
            if ((s = bench_run_make(&run, be, &a, B, T, health))) return fail("model and replay", s);
            if (count) {
                if ((s = print_counts(&run.m, &run.v, model, B, T))) return fail("count", s);
            } else {
                if ((s = time_updates(be, &run.m, &run.v, &ups[g], &cpu_ms[g])))
                    return fail("update", s);
                static const char *const hname[] = {"off", "detect", "guard"};
                char sw_set[512] = "";
                if (t) bench_tune_print(sw_set, sizeof sw_set, t, tuned);
                char gemm[32];
                if (cuda)
                    snprintf(gemm, sizeof gemm, "own+cublas");
                else if (g == 1 || !dqn_cpu_have_openblas())
                    snprintf(gemm, sizeof gemm, "builtin-%s", dqn_gemm_builtin_isa());
                else
                    snprintf(gemm, sizeof gemm, "openblas");
                char ratio[64] = "";
                if (g == 1)
                    snprintf(ratio, sizeof ratio, "; builtin/openblas ratio %.2f (cpu %.2f)",
                             ups[0] / ups[1], cpu_ms[1] / cpu_ms[0]);
                char cpu_s[48] = "";
                if (cpu) snprintf(cpu_s, sizeof cpu_s, " (cpu %.3f ms)", cpu_ms[g]);
                printf("update %s model=%s gemm=%s math=%s health=%s B=%d N=%d: %.1f updates/s, "
                       "%.3f ms/update%s, %.0f samples/s%s%s%s\n",
                       be->ops->name, model, gemm, tf32 ? "tf32" : "fp32", hname[health], B, T,
                       ups[g], 1e3 / ups[g], cpu_s, ups[g] * B, ratio, *sw_set ? "; " : "",
                       sw_set);
            }
            bench_run_free(&run);
            be->ops->destroy(be);
        }
        if (cpu) dqn_cpu_gemm_force_builtin(0);
    }
    return 0;
}
