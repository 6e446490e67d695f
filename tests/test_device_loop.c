/* The trainer's device env loop (env_loop = device) on the CPU backend against the host loop:
 * CartPole, 4 envs, n_step 3, uniform and prioritised replay, a few thousand steps with updates
 * (and Acrobot and MountainCar, whose slots' states differ in size, and the market: two action
 * branches, its tables in backend memory, episodes truncated at episode_len),
 * run in chunks of different lengths so that the device state goes back to the host and up again
 * between them. Both must end with the same parameters, target, Adam moments, replay (rows,
 * position, size, sum-tree), env vector, n-step windows and counters, bit for bit, and the same
 * stats (episodes, mean_return, updates, loss, gradient norm). A device run saved in the middle
 * and resumed gives the uninterrupted run's bits; so does a host run's checkpoint continued by
 * the device loop, and a device run's continued by the host loop. env_loop = device is refused
 * for a host's own env (external); auto, the default, is the host loop on the cpu backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "envs/market.h"
#include "train/trainer_internal.h"

#define TOTAL 3000
#define STOP 1404

static void config_of(dqn_config *c, const char *env, const char *replay, const char *loop) {
    CHECK_OK(dqn_config_preset(c, env));
    c->steps = TOTAL;
    c->num_envs = 4;
    c->n_step = 3;
    c->learning_starts = 200;
    c->batch_size = 16;
    c->buffer_size = 1000;   /* wraps twice */
    c->n_tau = c->n_tau_target = c->k_tau = 4;
    c->target_period = 50;
    c->train_freq = 2;
    c->updates_per_round = 1;
    c->eps_fraction = 0.3;
    c->save_replay = 1;
    snprintf(c->device, sizeof c->device, "cpu");
    snprintf(c->replay, sizeof c->replay, "%s", replay);
    snprintf(c->env_loop, sizeof c->env_loop, "%s", loop);
    if (strcmp(env, "market") == 0) {
        /* a small synthetic market: two assets of 5 levels (two branches), short episodes */
        c->synth_rows = 1500;
        c->synth_assets = 2;
        c->position_levels = 5;
        c->window = 4;
        c->episode_len = 50;
    }
}

/* Everything a trainer's run leaves, as host bytes, for memcmp. */
typedef struct {
    char *params;
    size_t pbytes;
    char *replay;
    size_t rbytes;
    char *nstep;
    size_t nbytes;
    float obs[4096];
    double ep_return[16], ep_ret[16];
    int32_t ep_len[16];
    uint64_t env_counter[16], actor_step, model_step;
    unsigned char env_state[16 * 256];
    dqn_train_stats st;
    int64_t since_update;
    uint64_t act_steps;
    int replay_pos, replay_size, n_recent, recent_pos;
    double recent[DQN_RECENT_EPISODES];
} snap;

static void take(dqn_trainer *t, snap *s) {
    memset(s, 0, sizeof *s);
    dqn_backend *be = t->be;
    s->pbytes = t->model.L.n_params * sizeof(float);
    s->params = malloc(4 * s->pbytes);
    s->rbytes = dqn_replay_bytes(&t->replay);
    s->replay = malloc(s->rbytes);
    s->nbytes = dqn_nstep_state_bytes(&t->nstep);
    s->nstep = malloc(s->nbytes);
    if (!s->params || !s->replay || !s->nstep) exit(1);
    const float *src[4] = {t->model.params, t->model.target, t->model.adam_m, t->model.adam_v};
    for (int k = 0; k < 4; k++)
        CHECK_OK(be->ops->d2h(be, s->params + k * s->pbytes, src[k], s->pbytes));
    CHECK_OK(dqn_replay_export(&t->replay, s->replay));
    dqn_nstep_state_save(&t->nstep, s->nstep);
    const dqn_vecenv *v = &t->venv;
    if (v->n > 16 || (size_t)v->n * v->env.obs_dim > sizeof s->obs / sizeof s->obs[0] ||
        (size_t)v->n * v->env.state_size > sizeof s->env_state) {
        fprintf(stderr, "test_device_loop: %d envs of obs %d, state %zu bytes: raise snap's "
                "arrays\n", v->n, v->env.obs_dim, v->env.state_size);
        exit(1);
    }
    memcpy(s->obs, v->obs, (size_t)v->n * v->env.obs_dim * sizeof(float));
    memcpy(s->ep_return, v->ep_return, (size_t)v->n * sizeof(double));
    memcpy(s->ep_ret, t->ep_ret, (size_t)v->n * sizeof(double));
    memcpy(s->ep_len, v->ep_len, (size_t)v->n * sizeof(int32_t));
    memcpy(s->env_state, v->state, (size_t)v->n * v->env.state_size);
    for (int i = 0; i < v->n; i++) s->env_counter[i] = v->rng[i].counter;
    CHECK_OK(be->ops->d2h(be, &s->actor_step, t->actor.step, sizeof s->actor_step));
    CHECK_OK(be->ops->d2h(be, &s->model_step, t->model.step, sizeof s->model_step));
    dqn_trainer_stats(t, &s->st);
    s->since_update = t->since_update;
    s->act_steps = t->act_steps;
    s->replay_pos = t->replay.pos, s->replay_size = t->replay.size;
    s->n_recent = t->n_recent, s->recent_pos = t->recent_pos;
    memcpy(s->recent, t->recent, sizeof s->recent);
}

static void drop(snap *s) {
    free(s->params), free(s->replay), free(s->nstep);
}

static int same_bits(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* a and b bit for bit; with_q: mean_q too (the host and device loops compute it differently) */
static void compare(const char *what, const snap *a, const snap *b, int with_q) {
    CHECK(a->pbytes == b->pbytes && same_bits(a->params, b->params, 4 * a->pbytes),
          "%s: parameters, target or Adam moments differ", what);
    CHECK(a->rbytes == b->rbytes && same_bits(a->replay, b->replay, a->rbytes),
          "%s: the replay's rows (or sum-tree) differ", what);
    CHECK(a->replay_pos == b->replay_pos && a->replay_size == b->replay_size,
          "%s: replay pos %d size %d against %d %d", what, a->replay_pos, a->replay_size,
          b->replay_pos, b->replay_size);
    CHECK(same_bits(a->nstep, b->nstep, a->nbytes), "%s: the n-step windows differ", what);
    CHECK(same_bits(a->obs, b->obs, sizeof a->obs) && same_bits(a->env_state, b->env_state,
                                                               sizeof a->env_state) &&
              same_bits(a->env_counter, b->env_counter, sizeof a->env_counter),
          "%s: the env vector (obs, state or stream counters) differs", what);
    CHECK(same_bits(a->ep_return, b->ep_return, sizeof a->ep_return) &&
              same_bits(a->ep_ret, b->ep_ret, sizeof a->ep_ret) &&
              same_bits(a->ep_len, b->ep_len, sizeof a->ep_len),
          "%s: the episodes in progress differ", what);
    CHECK(a->actor_step == b->actor_step && a->model_step == b->model_step &&
              a->act_steps == b->act_steps,
          "%s: actor step %llu / %llu, model step %llu / %llu, acting steps %llu / %llu", what,
          (unsigned long long)a->actor_step, (unsigned long long)b->actor_step,
          (unsigned long long)a->model_step, (unsigned long long)b->model_step,
          (unsigned long long)a->act_steps, (unsigned long long)b->act_steps);
    CHECK(a->st.env_steps == b->st.env_steps && a->st.updates == b->st.updates &&
              a->st.episodes == b->st.episodes && a->since_update == b->since_update,
          "%s: env steps %lld / %lld, updates %lld / %lld, episodes %lld / %lld", what,
          (long long)a->st.env_steps, (long long)b->st.env_steps, (long long)a->st.updates,
          (long long)b->st.updates, (long long)a->st.episodes, (long long)b->st.episodes);
    CHECK(same_bits(&a->st.mean_return, &b->st.mean_return, sizeof(double)) &&
              a->n_recent == b->n_recent && a->recent_pos == b->recent_pos &&
              same_bits(a->recent, b->recent, sizeof a->recent),
          "%s: mean_return %.17g / %.17g", what, a->st.mean_return, b->st.mean_return);
    CHECK(same_bits(&a->st.last_loss, &b->st.last_loss, sizeof(double)) &&
              same_bits(&a->st.grad_norm, &b->st.grad_norm, sizeof(double)),
          "%s: loss %.9g / %.9g, grad norm %.9g / %.9g", what, a->st.last_loss, b->st.last_loss,
          a->st.grad_norm, b->st.grad_norm);
    if (with_q)
        CHECK(same_bits(&a->st.mean_q, &b->st.mean_q, sizeof(double)), "%s: mean_q %.17g / %.17g",
              what, a->st.mean_q, b->st.mean_q);
}

/* train t to `to` in calls of at most `chunk` env steps */
static void advance(dqn_trainer *t, int64_t to, int64_t chunk) {
    while (t->env_steps < to) {
        int64_t next = t->env_steps + chunk;
        CHECK_OK(dqn_trainer_run_until(t, next < to ? next : to));
    }
}

static dqn_trainer *make(const dqn_config *c) {
    dqn_trainer *t = NULL;
    CHECK_OK(dqn_trainer_create(c, &t));
    if (!t) exit(check_finish("test_device_loop"));
    return t;
}

/* the loaded trainer's loop switched (the state maps: the host's copies are the checkpoint's) */
static void switch_loop(dqn_trainer *t, const char *loop) {
    dqn_dloop_destroy(t);
    snprintf(t->cfg.env_loop, sizeof t->cfg.env_loop, "%s", loop);
    CHECK_OK(dqn_dloop_create(t));
}

static void run_case(const char *env, const char *replay, int learning_starts) {
    char what[128];
    dqn_config ch, cd;
    config_of(&ch, env, replay, "host");
    config_of(&cd, env, replay, "device");
    ch.learning_starts = cd.learning_starts = learning_starts;

    dqn_trainer *th = make(&ch), *td = make(&cd);
    CHECK(!th->dl.on && td->dl.on && td->dl.io.math == DQN_ENV_MATH_LIBM,
          "%s: host loop %d, device loop %d, math %d", replay, th->dl.on, td->dl.on,
          (int)td->dl.io.math);
    advance(th, TOTAL, 500);
    advance(td, TOTAL, 333);
    snap a, b;
    take(th, &a);
    take(td, &b);
    snprintf(what, sizeof what, "%s %s, host against device", env, replay);
    compare(what, &a, &b, 0);
    CHECK(strcmp(env, "cartpole") != 0 ||
              (b.st.updates > 500 && b.st.episodes > 30 && isfinite(b.st.mean_return) &&
               isfinite(b.st.mean_q) && b.st.mean_q != 0),
          "%s: %lld updates, %lld episodes, mean_return %g, mean_q %g: want a run with updates "
          "and episodes", replay, (long long)b.st.updates, (long long)b.st.episodes,
          b.st.mean_return, b.st.mean_q);
    /* the market's run crosses its time limit in every env and trains */
    CHECK(strcmp(env, "market") != 0 ||
              (td->dl.io.kind == DQN_ENV_MARKET && td->dl.io.market &&
               b.st.updates > 500 && b.st.episodes >= 4 * (TOTAL / 4 / 50) &&
               isfinite(b.st.mean_return)),
          "market %s: kind %d, %lld updates, %lld episodes, mean_return %g", replay,
          (int)td->dl.io.kind, (long long)b.st.updates, (long long)b.st.episodes,
          b.st.mean_return);
    printf("%-12s %-12s %lld env steps, %lld updates, %lld episodes, mean_return %.3f, loss %.4g: "
           "host loop against device loop\n", env, replay, (long long)b.st.env_steps,
           (long long)b.st.updates, (long long)b.st.episodes, b.st.mean_return, b.st.last_loss);
    dqn_trainer_destroy(th);

    /* resume in the middle: device -> device, host -> device, device -> host */
    char path[2][32] = {"/tmp/dqn-dloop-XXXXXX", "/tmp/dqn-dloop-XXXXXX"};
    const char *from[2] = {"device", "host"};
    for (int k = 0; k < 2; k++) {
        int fd = mkstemp(path[k]);
        CHECK(fd >= 0, "mkstemp");
        close(fd);
        dqn_trainer *t = make(k == 0 ? &cd : &ch);
        advance(t, STOP, 250);
        CHECK_OK(dqn_trainer_save(t, path[k]));
        dqn_trainer_destroy(t);
    }
    for (int k = 0; k < 3; k++) {
        /* k 0: the device run's checkpoint on the device loop; 1: the host run's on the device
         * loop; 2: the device run's on the host loop */
        dqn_trainer *t = NULL;
        CHECK_OK(dqn_trainer_load(path[k == 1], "cpu", &t));
        if (!t) continue;
        CHECK(t->dl.on == (k != 1), "%s: the loaded trainer's loop", replay);
        if (k == 1) switch_loop(t, "device");
        if (k == 2) switch_loop(t, "host");
        advance(t, TOTAL, 401);
        snap r;
        take(t, &r);
        snprintf(what, sizeof what, "%s %s, %s checkpoint continued on the %s loop", env, replay,
                 from[k == 1], k == 2 ? "host" : "device");
        compare(what, &b, &r, k == 0);
        drop(&r);
        dqn_trainer_destroy(t);
    }
    unlink(path[0]), unlink(path[1]);
    drop(&a), drop(&b);
    dqn_trainer_destroy(td);
}

static void test_choice(void) {
    dqn_config c;
    dqn_trainer *t = NULL;
    /* the default, auto, is the host loop on the cpu backend (no graphs to launch) */
    dqn_config dflt;
    dqn_config_defaults(&dflt);
    CHECK(strcmp(dflt.env_loop, "auto") == 0, "env_loop defaults to %s", dflt.env_loop);
    config_of(&c, "cartpole", "uniform", "auto");
    t = make(&c);
    CHECK(!t->dl.on && strcmp(dqn_trainer_env_loop(t), "host") == 0,
          "env_loop auto chose the device loop on the cpu (%s)", dqn_trainer_env_loop(t));
    dqn_trainer_destroy(t);
    config_of(&c, "cartpole", "uniform", "device");
    t = make(&c);
    CHECK(strcmp(dqn_trainer_env_loop(t), "device") == 0, "env_loop device: the trainer says %s",
          dqn_trainer_env_loop(t));
    dqn_trainer_destroy(t);
    config_of(&c, "cartpole", "uniform", "host");
    t = make(&c);
    CHECK(!t->dl.on, "env_loop host chose the device loop");
    dqn_trainer_destroy(t);
    /* the device loop runs one rank */
    config_of(&c, "cartpole", "uniform", "device");
    snprintf(c.device, sizeof c.device, "cuda");
    c.ranks = 2;
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && strstr(dqn_last_error(), "ranks"),
          "env_loop device with 2 ranks: \"%s\"", dqn_last_error());
    snprintf(c.env_loop, sizeof c.env_loop, "auto");
    CHECK_OK(dqn_config_validate(&c));
    /* the market: auto is the host loop on the cpu, device its tables in backend memory; on
     * cuda, auto and device with one rank are valid (auto takes the device loop there) */
    config_of(&c, "market", "uniform", "auto");
    t = make(&c);
    CHECK(!t->dl.on, "market with env_loop auto chose the device loop on the cpu");
    dqn_trainer_destroy(t);
    config_of(&c, "market", "uniform", "device");
    t = make(&c);
    CHECK(t->dl.on && t->dl.io.kind == DQN_ENV_MARKET && t->dl.io.market == &t->dl.market &&
              t->dl.market.z && t->dl.market.z != ((const dqn_market_ctx *)t->env.ctx)->z,
          "market with env_loop device: loop %d, kind %d", t->dl.on, (int)t->dl.io.kind);
    dqn_trainer_destroy(t);
    snprintf(c.device, sizeof c.device, "cuda");
    CHECK_OK(dqn_config_validate(&c));
    snprintf(c.env_loop, sizeof c.env_loop, "auto");
    CHECK_OK(dqn_config_validate(&c));
    /* a host's env steps on the host */
    CHECK_OK(dqn_config_preset(&c, "cartpole"));
    CHECK_OK(dqn_config_set(&c, "env", "external"));
    CHECK_OK(dqn_config_set(&c, "obs_dim", "4"));
    CHECK_OK(dqn_config_set(&c, "branches", "2"));
    CHECK_OK(dqn_config_set(&c, "env_loop", "device"));
    CHECK(dqn_config_validate(&c) == DQN_ERR_ARG && strstr(dqn_last_error(), "env_loop") &&
              strstr(dqn_last_error(), "external"),
          "env external with env_loop device: \"%s\"", dqn_last_error());
    dqn_status s;
    config_of(&c, "cartpole", "uniform", "device");
    dqn_env_api env;
    CHECK_OK(dqn_env_builtin("cartpole", &env));
    t = NULL;
    s = dqn_trainer_create_env(&c, &env, &t);
    CHECK(s == DQN_ERR_ARG && !t && strstr(dqn_last_error(), "env_loop"),
          "a host's env with env_loop device: status %d, \"%s\"", (int)s, dqn_last_error());
    if (t) dqn_trainer_destroy(t);
    CHECK(dqn_config_set(&c, "env_loop", "gpu") != DQN_OK, "env_loop gpu accepted");
}

int main(void) {
    test_choice();
    run_case("cartpole", "uniform", 200);
    run_case("cartpole", "prioritized", 200);
    /* updates may start before the windows have filled the replay to batch_size: the loop reads
     * the replay's size until it has */
    run_case("cartpole", "uniform", 16);
    /* the other two envs' states (4 and 2 doubles a slot) through the same loop */
    run_case("acrobot", "uniform", 200);
    run_case("mountaincar", "prioritized", 200);
    /* the market: [n, 2] actions, 160-byte slots, its tables uploaded at create */
    run_case("market", "uniform", 200);
    run_case("market", "prioritized", 200);
    return check_finish("test_device_loop");
}
