/* The device env loop on CUDA (one captured acting step a graph launch, env_step with the CR
 * math) against the CPU's device loop switched to the CR math, step after step before any
 * update, for CartPole and the market env: the same actions, replay rows, position and size,
 * observations, n-step windows and counters, bit for bit (the forward's Q may differ in its last
 * bits between the backends; a greedy action that flips on a near-tie is reported with its
 * gap). A CUDA device-loop run saved in the middle and resumed gives the uninterrupted run's
 * bits. Then a CartPole run on the CUDA device loop learns: a greedy mean of at least 475 over
 * 20 episodes within 100,000 env steps, as test_gpu_learn_cartpole asks of the CUDA trainer,
 * chosen by env_loop auto. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learn_common.h"
#include "train/trainer_internal.h"

#define STEPS 60

static void config_of(dqn_config *c, const char *device, const char *env) {
    CHECK_OK(dqn_config_preset(c, env));
    if (strcmp(env, "market") == 0) c->episode_len = 20;   /* episodes end within the steps */
    c->steps = 100000;
    c->num_envs = 16;
    c->n_step = 3;
    c->buffer_size = 500;    /* wraps within the steps compared */
    c->learning_starts = 100000;
    c->eps_fraction = 0.02;  /* epsilon from 1 to about 0.5 over the steps compared */
    snprintf(c->device, sizeof c->device, "%s", device);
    snprintf(c->env_loop, sizeof c->env_loop, "device");
}

static void test_against_cpu(const char *env) {
    dqn_config c[2];
    dqn_trainer *t[2] = {NULL, NULL};
    const char *dev[2] = {"cpu", "cuda"};
    for (int k = 0; k < 2; k++) {
        config_of(&c[k], dev[k], env);
        CHECK_OK(dqn_trainer_create(&c[k], &t[k]));
        if (!t[k]) return;
        CHECK(t[k]->dl.on, "%s: the device loop is off", dev[k]);
    }
    CHECK(strcmp(dqn_trainer_backend(t[1]), "cuda") == 0, "backend %s", dqn_trainer_backend(t[1]));
    CHECK(t[1]->dl.io.math == DQN_ENV_MATH_CR, "cuda's device loop: math %d",
          (int)t[1]->dl.io.math);
    t[0]->dl.io.math = DQN_ENV_MATH_CR;   /* the CPU with CUDA's env math, from the first reset */
    const int n = c[0].num_envs, D = t[0]->arch.br.D, A = t[0]->arch.br.A;
    const size_t rb = dqn_replay_bytes(&t[0]->replay), nb = dqn_nstep_state_bytes(&t[0]->nstep);
    char *img[2] = {malloc(rb), malloc(rb)}, *win[2] = {malloc(nb), malloc(nb)};
    if (!img[0] || !img[1] || !win[0] || !win[1]) exit(1);
    int32_t *act[2] = {malloc((size_t)n * D * sizeof(int32_t)),
                       malloc((size_t)n * D * sizeof(int32_t))};
    float *q = malloc((size_t)n * A * sizeof(float));
    if (!act[0] || !act[1] || !q) exit(1);
    uint64_t tau[2];
    int bad = -1;
    long greedy = 0;
    for (int k = 0; k < STEPS && bad < 0; k++) {
        for (int j = 0; j < 2; j++) {
            dqn_trainer *x = t[j];
            CHECK_OK(dqn_trainer_run_until(x, (int64_t)(k + 1) * n));
            CHECK_OK(x->be->ops->d2h(x->be, act[j], x->actor.act, (size_t)n * D * sizeof(int32_t)));
            CHECK_OK(x->be->ops->d2h(x->be, &tau[j], x->actor.step, sizeof tau[j]));
            CHECK_OK(dqn_replay_export(&x->replay, img[j]));
            dqn_nstep_state_save(&x->nstep, win[j]);
        }
        CHECK_OK(t[0]->be->ops->d2h(t[0]->be, q, t[0]->actor.q, (size_t)n * A * sizeof(float)));
        int ok = 1;
        for (int e = 0; e < n * D; e++)
            if (act[0][e] != act[1][e]) {
                CHECK(0, "%s step %d env %d branch %d: action %d on the cpu, %d on cuda (cpu Q "
                      "gap of the first two %g)", env, k, e / D, e % D, act[0][e], act[1][e],
                      (double)(q[(e / D) * A] - q[(e / D) * A + 1]));
                ok = 0;
            }
        const dqn_trainer *a = t[0], *b = t[1];
        const size_t ob = (size_t)n * a->env.obs_dim * sizeof(float);
#define SAME(cond, ...)                                                                        \
    do {                                                                                       \
        CHECK(cond, __VA_ARGS__);                                                              \
        ok &= (cond) != 0;                                                                     \
    } while (0)
        SAME(memcmp(img[0], img[1], rb) == 0, "step %d: the replay's rows", k);
        SAME(a->replay.pos == b->replay.pos && a->replay.size == b->replay.size,
             "step %d: replay pos %d size %d on the cpu, %d %d on cuda", k, a->replay.pos,
             a->replay.size, b->replay.pos, b->replay.size);
        SAME(memcmp(win[0], win[1], nb) == 0, "step %d: the n-step windows", k);
        SAME(memcmp(a->venv.obs, b->venv.obs, ob) == 0, "step %d: the observations", k);
        SAME(a->act_steps == b->act_steps && tau[0] == tau[1] && a->episodes == b->episodes,
             "step %d: acting steps %llu / %llu, tau counter %llu / %llu, episodes %lld / %lld",
             k, (unsigned long long)a->act_steps, (unsigned long long)b->act_steps,
             (unsigned long long)tau[0], (unsigned long long)tau[1], (long long)a->episodes,
             (long long)b->episodes);
#undef SAME
        greedy = (long)tau[0];
        if (!ok) bad = k;
    }
    CHECK(bad < 0, "%s: the cpu and cuda device loops part at step %d", env, bad);
    CHECK(t[1]->updates == 0 && t[1]->dl.graph != NULL,
          "cuda: %lld updates (want none), acting step captured: %d", (long long)t[1]->updates,
          t[1]->dl.graph != NULL);
    CHECK(greedy > 0 && t[1]->episodes > 0 && t[1]->replay.size == c[1].buffer_size,
          "%ld greedy steps, %lld episodes, replay size %d: want greedy actions, finished "
          "episodes and a full ring", greedy, (long long)t[1]->episodes, t[1]->replay.size);
    printf("%s: cpu (CR math) against cuda, %d steps of %d envs: %ld with a greedy action, %lld "
           "episodes, replay %d rows\n", env, STEPS, n, greedy, (long long)t[1]->episodes,
           t[1]->replay.size);
    for (int j = 0; j < 2; j++)
        free(img[j]), free(win[j]), free(act[j]), dqn_trainer_destroy(t[j]);
    free(q);
}

/* Params, target, Adam moments and the replay as host bytes */
static char *state_of(dqn_trainer *t, size_t *bytes) {
    const size_t pb = t->model.L.n_params * sizeof(float), rb = dqn_replay_bytes(&t->replay);
    char *p = malloc(4 * pb + rb);
    if (!p) exit(1);
    const float *src[4] = {t->model.params, t->model.target, t->model.adam_m, t->model.adam_v};
    for (int k = 0; k < 4; k++) CHECK_OK(t->be->ops->d2h(t->be, p + k * pb, src[k], pb));
    CHECK_OK(dqn_replay_export(&t->replay, p + 4 * pb));
    *bytes = 4 * pb + rb;
    return p;
}

/* A CUDA device-loop run saved in the middle and resumed on CUDA ends with the uninterrupted
 * run's bits (the state's trip to the host and back, and the update's determinism). */
static void test_resume(void) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    c.steps = 4000;
    c.num_envs = 8;
    c.learning_starts = 500;
    c.save_replay = 1;
    snprintf(c.device, sizeof c.device, "cuda");
    snprintf(c.env_loop, sizeof c.env_loop, "device");
    snprintf(c.replay, sizeof c.replay, "prioritized");
    char path[] = "/tmp/dqn-gpu-dloop-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    CHECK_OK(dqn_trainer_run_until(t, c.steps));
    size_t na, nb;
    char *a = state_of(t, &na);
    dqn_train_stats sa, sb;
    dqn_trainer_stats(t, &sa);
    dqn_trainer_destroy(t);
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    CHECK_OK(dqn_trainer_run_until(t, 2000));
    CHECK_OK(dqn_trainer_save(t, path));
    dqn_trainer_destroy(t);
    t = NULL;
    CHECK_OK(dqn_trainer_load(path, "cuda", &t));
    unlink(path);
    if (!t) return;
    CHECK(t->dl.on, "the loaded trainer's device loop is off");
    CHECK_OK(dqn_trainer_run_until(t, c.steps));
    char *b = state_of(t, &nb);
    dqn_trainer_stats(t, &sb);
    CHECK(na == nb && memcmp(a, b, na) == 0,
          "resumed on cuda: the parameters, Adam moments or replay differ from the "
          "uninterrupted run's");
    CHECK(sa.updates == sb.updates && sa.episodes == sb.episodes &&
              memcmp(&sa.mean_return, &sb.mean_return, sizeof(double)) == 0 &&
              memcmp(&sa.mean_q, &sb.mean_q, sizeof(double)) == 0,
          "resumed on cuda: updates %lld / %lld, episodes %lld / %lld, mean_return %.17g / "
          "%.17g, mean_q %.17g / %.17g", (long long)sa.updates, (long long)sb.updates,
          (long long)sa.episodes, (long long)sb.episodes, sa.mean_return, sb.mean_return,
          sa.mean_q, sb.mean_q);
    printf("cuda device loop resumed at 2000 of %lld steps: %lld updates, %lld episodes, the "
           "uninterrupted run's bits\n", (long long)c.steps, (long long)sb.updates,
           (long long)sb.episodes);
    free(a), free(b);
    dqn_trainer_destroy(t);
}

static void test_learns(void) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    c.seed = 1;
    c.steps = 100000;
    snprintf(c.device, sizeof c.device, "cuda");   /* env_loop auto: the device loop on cuda */
    CHECK(strcmp(c.env_loop, "auto") == 0, "the preset's env_loop is %s", c.env_loop);
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(&c, &t));
    if (!t) return;
    CHECK(t->dl.on && strcmp(dqn_trainer_env_loop(t), "device") == 0,
          "cuda, env_loop auto: the device loop is off (%s)", dqn_trainer_env_loop(t));
    double t0 = learn_now(), best = -INFINITY;
    for (int64_t at = 5000; at <= c.steps; at += 5000) {
        CHECK_OK(dqn_trainer_run_until(t, at));
        double mean = -INFINITY, sd = 0;
        CHECK_OK(dqn_trainer_evaluate(t, 20, c.seed + 1000, &mean, &sd, NULL));
        dqn_train_stats st;
        dqn_trainer_stats(t, &st);
        printf("cuda device loop: step %lld, updates %lld, episodes %lld, train return %.1f, "
               "mean_q %.2f, loss %.4g, eval %.1f +- %.1f, %.1f s\n", (long long)st.env_steps,
               (long long)st.updates, (long long)st.episodes, st.mean_return, st.mean_q,
               st.last_loss, mean, sd, learn_now() - t0);
        fflush(stdout);
        CHECK(isfinite(st.mean_return) && isfinite(st.mean_q) && isfinite(st.last_loss),
              "step %lld: a stat is not finite", (long long)st.env_steps);
        if (mean > best) best = mean;
        if (mean >= 475.0) break;
    }
    CHECK(best >= 475.0, "cuda device loop, cartpole seed 1: best eval mean %.1f < 475", best);
    dqn_trainer_destroy(t);
}

int main(void) {
    if (!dqn_backend_cuda_available()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    test_against_cpu("cartpole");
    test_against_cpu("market");
    test_resume();
    test_learns();
    return check_finish("test_gpu_device_loop");
}
