/* Env steps per second of the built-in envs through the vector (random actions from Philox), for
 * comparison with Gymnasium stepped from Python (bench/bench_env_gym.py). With "cuda": the
 * env_step op on the CUDA backend, n classic envs stepped by one kernel, eagerly and as a
 * captured graph of BENCH_GRAPH_STEPS steps, beside the CPU vector (and the CPU backend's op)
 * measured in the same run. Usage: bench_env [seconds per figure, default 1] [cuda]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "env_rate.h"

static double steps_per_s(const char *name, int n, double seconds) {
    dqn_env env = dqn_env_of(dqn_env_find(name));
    return env_steps_per_s(&env, n, seconds);
}

enum { BENCH_GRAPH_STEPS = 64, BENCH_OP_ROWS = 64 };

static void die(const char *what) {
    fprintf(stderr, "bench_env: %s: %s\n", what, dqn_last_error());
    exit(1);
}
#define TRY(what, expr)                          \
    do {                                         \
        if ((expr) != DQN_OK) die(what);         \
    } while (0)

/* Env steps per second of env_step on backend be over n envs of kind: pre-drawn actions
 * (BENCH_OP_ROWS rows, cycled), the best of 20 ms windows over `seconds`; graph: the steps as
 * launches of a captured graph of BENCH_GRAPH_STEPS steps. */
static double op_steps_per_s(dqn_backend *be, int kind, int n, double seconds, int graph) {
    const dqn_ops *o = be->ops;
    const int od = kind == DQN_ENV_CARTPOLE ? 4 : kind == DQN_ENV_ACROBOT ? 6 : 2;
    const int sd = kind == DQN_ENV_MOUNTAINCAR ? 2 : 4, n_act = kind == DQN_ENV_CARTPOLE ? 2 : 3;
    const size_t N = (size_t)n;
    dqn_env_io io = {.kind = (dqn_env_kind)kind, .math = DQN_ENV_MATH_CR, .n = n,
                     .max_steps = kind == DQN_ENV_MOUNTAINCAR ? 200 : 500, .seed = 1,
                     .stream_base = DQN_STREAM_ENV};
    int32_t *h_act = malloc(BENCH_OP_ROWS * N * sizeof *h_act), *act = NULL;
    if (!h_act) die("actions");
    for (size_t k = 0; k < BENCH_OP_ROWS * N; k++)
        h_act[k] = (int32_t)dqn_philox_below(1, DQN_STREAM_EXPLORE, k, (uint32_t)n_act);
    TRY("alloc", o->alloc(be, (void **)&act, BENCH_OP_ROWS * N * sizeof *act));
    TRY("h2d", o->h2d(be, act, h_act, BENCH_OP_ROWS * N * sizeof *act));
    TRY("alloc", o->alloc(be, (void **)&io.state, N * sd * sizeof(double)));
    TRY("alloc", o->alloc(be, (void **)&io.counter, N * sizeof(uint64_t)));
    TRY("alloc", o->alloc(be, (void **)&io.ep_len, N * sizeof(int32_t)));
    TRY("alloc", o->alloc(be, (void **)&io.ep_return, N * sizeof(double)));
    TRY("alloc", o->alloc(be, (void **)&io.obs, N * od * sizeof(float)));
    TRY("alloc", o->alloc(be, (void **)&io.final_obs, N * od * sizeof(float)));
    TRY("alloc", o->alloc(be, (void **)&io.reward, N * sizeof(float)));
    TRY("alloc", o->alloc(be, (void **)&io.terminated, N));
    TRY("alloc", o->alloc(be, (void **)&io.truncated, N));
    TRY("alloc", o->alloc(be, (void **)&io.done_return, N * sizeof(double)));
    TRY("alloc", o->alloc(be, (void **)&io.done_len, N * sizeof(int32_t)));
    TRY("reset", o->env_step(be, &io, NULL));
    void *g = NULL, *exec = NULL;
    int rows = BENCH_OP_ROWS;
    if (graph) {
        TRY("capture", o->capture_begin(be));
        for (int r = 0; r < BENCH_GRAPH_STEPS; r++)
            TRY("env_step", o->env_step(be, &io, act + (size_t)(r % BENCH_OP_ROWS) * N));
        TRY("capture", o->capture_end(be, &g));
        TRY("graph", o->graph_compose(be, &g, 1, &exec));
        rows = BENCH_GRAPH_STEPS;
    }
    TRY("sync", o->sync(be));
    double best = 0, start = bench_now();
    while (bench_now() - start < seconds) {
        uint64_t steps = 0;
        double t0 = bench_now(), t1 = t0;
        while (t1 - t0 < 0.02) {
            if (graph)
                TRY("launch", o->graph_launch(be, exec));
            else
                for (int r = 0; r < rows; r++)
                    TRY("env_step", o->env_step(be, &io, act + (size_t)r * N));
            steps += (uint64_t)rows;
            TRY("sync", o->sync(be));
            t1 = bench_now();
        }
        double rate = (double)steps * n / (t1 - t0);
        if (rate > best) best = rate;
    }
    if (graph) {
        o->graph_destroy(be, exec, 1);
        o->graph_destroy(be, g, 0);
    }
    void *bufs[] = {act, io.state, io.counter, io.ep_len, io.ep_return, io.obs, io.final_obs,
                    io.reward, io.terminated, io.truncated, io.done_return, io.done_len};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) o->free(be, bufs[k]);
    free(h_act);
    return best;
}

static int bench_cuda(double seconds) {
    dqn_backend *gpu = NULL, *cpu = NULL;
    if (dqn_backend_cuda_create(&gpu, 0, DQN_MATH_FP32) != DQN_OK) {
        printf("SKIP: no CUDA device (%s)\n", dqn_last_error());
        return 77;
    }
    TRY("cpu backend", dqn_backend_cpu_create(&cpu));
    const char *names[] = {"cartpole", "acrobot", "mountaincar"};
    double cpu_op = op_steps_per_s(cpu, DQN_ENV_CARTPOLE, 4096, seconds, 0);
    printf("cpu_cartpole_op_4096env_steps_per_s=%.0f\n", cpu_op);
    const int ns[] = {4096, 16384, 65536, 262144, 1048576};
    for (int kind = 0; kind < 3; kind++) {
        /* the peer: the same env's CPU vector */
        double cpu_vec = steps_per_s(names[kind], 64, seconds);
        printf("cpu_%s_vecenv_64env_steps_per_s=%.0f\n", names[kind], cpu_vec);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            if (kind != DQN_ENV_CARTPOLE && ns[k] != 65536) continue;
            double eager = op_steps_per_s(gpu, kind, ns[k], seconds, 0);
            double graph = op_steps_per_s(gpu, kind, ns[k], seconds, 1);
            printf("cuda_%s_op_%denv_steps_per_s=%.0f graph=%.0f (x%.0f the cpu vector)\n",
                   names[kind], ns[k], eager, graph, graph / cpu_vec);
        }
    }
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);
    return 0;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    if (!(seconds > 0) || (argc > 2 && strcmp(argv[2], "cuda") != 0) || argc > 3) {
        fprintf(stderr, "usage: bench_env [seconds per figure > 0] [cuda]\n");
        return 2;
    }
    if (argc > 2) return bench_cuda(seconds);
    printf("cartpole_env_steps_per_s=%.0f\n", steps_per_s("cartpole", 8, seconds));
    printf("cartpole_env_steps_per_s_1env=%.0f\n", steps_per_s("cartpole", 1, seconds));
    printf("cartpole_env_steps_per_s_64env=%.0f\n", steps_per_s("cartpole", 64, seconds));
    printf("acrobot_env_steps_per_s=%.0f\n", steps_per_s("acrobot", 8, seconds));
    printf("mountaincar_env_steps_per_s=%.0f\n", steps_per_s("mountaincar", 8, seconds));
    return 0;
}
