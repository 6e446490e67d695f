/* The env_step op on CUDA as the training loop will run it: captured into a graph (no host sync,
 * no allocation inside) and replayed, against the CPU backend's op step by step, bit for bit, for
 * each classic env over many slots, resets, terminations and truncations. The op registry
 * (test_backend_ops) compares the eager calls; this checks the captured ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "check.h"
#include "dqn_philox.h"

enum { ROWS = 8 }; /* steps in the graph, each its own action row */

typedef struct {
    dqn_env_io io;
    int32_t *act;
    size_t od, sd;
} envbuf;

static void make(dqn_backend *be, envbuf *e, int kind, int n, int max_steps) {
    const dqn_ops *o = be->ops;
    const size_t N = (size_t)n;
    memset(e, 0, sizeof *e);
    e->od = kind == DQN_ENV_CARTPOLE ? 4 : kind == DQN_ENV_ACROBOT ? 6 : 2;
    e->sd = kind == DQN_ENV_MOUNTAINCAR ? 2 : 4;
    dqn_env_io *io = &e->io;
    io->kind = (dqn_env_kind)kind, io->math = DQN_ENV_MATH_CR, io->n = n;
    io->max_steps = max_steps, io->seed = 77, io->stream_base = DQN_STREAM_ENV;
    CHECK_OK(o->alloc(be, (void **)&e->act, ROWS * N * sizeof(int32_t)));
    CHECK_OK(o->alloc(be, (void **)&io->state, N * e->sd * sizeof(double)));
    CHECK_OK(o->alloc(be, (void **)&io->counter, N * sizeof(uint64_t)));
    CHECK_OK(o->alloc(be, (void **)&io->ep_len, N * sizeof(int32_t)));
    CHECK_OK(o->alloc(be, (void **)&io->ep_return, N * sizeof(double)));
    CHECK_OK(o->alloc(be, (void **)&io->obs, N * e->od * sizeof(float)));
    CHECK_OK(o->alloc(be, (void **)&io->final_obs, N * e->od * sizeof(float)));
    CHECK_OK(o->alloc(be, (void **)&io->reward, N * sizeof(float)));
    CHECK_OK(o->alloc(be, (void **)&io->terminated, N));
    CHECK_OK(o->alloc(be, (void **)&io->truncated, N));
    CHECK_OK(o->alloc(be, (void **)&io->done_return, N * sizeof(double)));
    CHECK_OK(o->alloc(be, (void **)&io->done_len, N * sizeof(int32_t)));
}

static void drop(dqn_backend *be, envbuf *e) {
    dqn_env_io *io = &e->io;
    void *bufs[] = {e->act, io->state, io->counter, io->ep_len, io->ep_return, io->obs,
                    io->final_obs, io->reward, io->terminated, io->truncated, io->done_return,
                    io->done_len};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) be->ops->free(be, bufs[k]);
}

/* every buffer of g (device) equals c's (host memory of the CPU backend) */
static int equal(dqn_backend *bg, const envbuf *g, const envbuf *c, unsigned char *tmp) {
    const size_t N = (size_t)g->io.n;
    struct {
        const void *gp, *cp;
        size_t bytes;
    } b[] = {{g->io.state, c->io.state, N * g->sd * 8},  {g->io.counter, c->io.counter, N * 8},
             {g->io.ep_len, c->io.ep_len, N * 4},         {g->io.ep_return, c->io.ep_return, N * 8},
             {g->io.obs, c->io.obs, N * g->od * 4},       {g->io.final_obs, c->io.final_obs, N * g->od * 4},
             {g->io.reward, c->io.reward, N * 4},         {g->io.terminated, c->io.terminated, N},
             {g->io.truncated, c->io.truncated, N},       {g->io.done_return, c->io.done_return, N * 8},
             {g->io.done_len, c->io.done_len, N * 4}};
    for (size_t k = 0; k < sizeof b / sizeof b[0]; k++) {
        CHECK_OK(bg->ops->d2h(bg, tmp, b[k].gp, b[k].bytes));
        if (memcmp(tmp, b[k].cp, b[k].bytes) != 0) return (int)k + 1;
    }
    return 0;
}

static void run(dqn_backend *bg, dqn_backend *bc, int kind, int n, int max_steps, int launches) {
    envbuf g, c;
    make(bg, &g, kind, n, max_steps);
    make(bc, &c, kind, n, max_steps);
    const size_t N = (size_t)n;
    int32_t *act = malloc(ROWS * N * sizeof *act);
    unsigned char *tmp = malloc(N * 6 * sizeof(double));
    if (!act || !tmp) exit(1);
    for (size_t k = 0; k < ROWS * N; k++)
        act[k] = (int32_t)dqn_philox_below(5, DQN_STREAM_EXPLORE, k, kind ? 3 : 2);
    CHECK_OK(bg->ops->h2d(bg, g.act, act, ROWS * N * sizeof *act));
    memcpy(c.act, act, ROWS * N * sizeof *act);
    /* start counters near 2^32 for some slots (the draw index's high word) */
    uint64_t *c0 = (uint64_t *)tmp;
    for (size_t i = 0; i < N; i++) c0[i] = i % 4 == 3 ? (1ull << 32) - 1 - i % 5 : i;
    CHECK_OK(bg->ops->h2d(bg, g.io.counter, c0, N * sizeof *c0));
    memcpy(c.io.counter, c0, N * sizeof *c0);
    CHECK_OK(bg->ops->env_step(bg, &g.io, NULL));
    CHECK_OK(bc->ops->env_step(bc, &c.io, NULL));
    void *graph = NULL, *exec = NULL;
    CHECK_OK(bg->ops->capture_begin(bg));
    for (int r = 0; r < ROWS; r++) CHECK_OK(bg->ops->env_step(bg, &g.io, g.act + (size_t)r * N));
    CHECK_OK(bg->ops->capture_end(bg, &graph));
    CHECK_OK(bg->ops->graph_compose(bg, &graph, 1, &exec));
    int bad = equal(bg, &g, &c, tmp), at = bad ? 0 : -1;
    long ends = 0;
    for (int l = 0; l < launches && !bad && exec; l++) {
        CHECK_OK(bg->ops->graph_launch(bg, exec));
        for (int r = 0; r < ROWS; r++) {
            CHECK_OK(bc->ops->env_step(bc, &c.io, c.act + (size_t)r * N));
            for (size_t i = 0; i < N; i++) ends += c.io.done_len[i] > 0;
        }
        CHECK_OK(bg->ops->sync(bg));
        if ((bad = equal(bg, &g, &c, tmp)) != 0) at = l;
    }
    CHECK(bad == 0, "env kind %d, %d envs: the graph's buffer %d differs from the cpu after launch "
          "%d", kind, n, bad, at);
    CHECK(ends > 0, "env kind %d: no episode ended", kind);
    printf("  env kind %d, %6d envs, %d steps as %d graph launches: %ld episodes ended, the cpu's "
           "bits\n", kind, n, launches * ROWS, launches, ends);
    if (exec) bg->ops->graph_destroy(bg, exec, 1);
    if (graph) bg->ops->graph_destroy(bg, graph, 0);
    drop(bg, &g);
    drop(bc, &c);
    free(act);
    free(tmp);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!dqn_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    dqn_backend *bc = NULL, *bg = NULL;
    CHECK_OK(dqn_backend_cpu_create(&bc));
    CHECK_OK(dqn_backend_cuda_create(&bg, 0, DQN_MATH_FP32));
    if (bc && bg) {
        run(bg, bc, DQN_ENV_CARTPOLE, 4099, 500, 40);
        run(bg, bc, DQN_ENV_CARTPOLE, 300, 25, 20);
        run(bg, bc, DQN_ENV_ACROBOT, 1025, 50, 20);
        run(bg, bc, DQN_ENV_MOUNTAINCAR, 2048, 30, 10);
    }
    if (bg) bg->ops->destroy(bg);
    if (bc) bc->ops->destroy(bc);
    return check_finish("test_gpu_env");
}
