/* The env_step op on the CPU and the classic envs' two kinds of math (envs/classic.h):
 *   1. env_step with DQN_ENV_MATH_LIBM on the CPU backend is dqn_vecenv over the built-in env,
 *      bit for bit after every call (observations, final observations, rewards, both flags,
 *      finished episodes' returns and lengths) and at the end (states, stream counters, episode
 *      lengths and returns), over resets, terminations and truncations at max_steps;
 *   2. the correctly rounded sin, cos and square (DQN_ENV_MATH_CR, what the CUDA kernel
 *      computes) against libm's over every argument the envs' libm rollouts produce: the count
 *      of results that differ is printed (glibc is not correctly rounded), and each difference
 *      must be one ulp with the correctly rounded side the closer to the true value (sinl /
 *      cosl in long double, or the exact square x * x + fma residual);
 *   3. the op's argument checks;
 *   4. env_step on the market (DQN_ENV_MARKET, its tables copied out of the env's context as a
 *      device upload would) against dqn_vecenv over the market env of the market preset's
 *      synthetic data, bit for bit as in 1 (the states are dqn_market_state's bytes), over a few
 *      hundred steps with resets and truncations, and its refusals; the market's own log
 *      (market/period.h, the same bits on every backend) against glibc's: within one ulp on
 *      every argument, different on a few percent (printed), exact where log is exact.
 * DQN_ENV_MATH_SCALE=k runs k times the rollouts of part 2 (a longer measurement). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void trace(int what, double x);
#define DQN_CLASSIC_TRACE(what, x) trace((what), (x))

#include "backends/backend.h"
#include "check.h"
#include "dqn_philox.h"
#include "envs/classic_step.h"
#include "envs/env.h"
#include "envs/market.h"

/* ---- 1. the op against the vector ---- */

static int same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* io's buffers for n slots of obs_dim floats and state_size state bytes, zeroed */
static void io_alloc(dqn_env_io *io, size_t N, size_t od, size_t state_size) {
    io->state = test_xcalloc(N, state_size);
    io->counter = test_xcalloc(N, sizeof(uint64_t));
    io->ep_len = test_xcalloc(N, sizeof(int32_t));
    io->ep_return = test_xcalloc(N, sizeof(double));
    io->obs = test_xcalloc(N * od, sizeof(float));
    io->final_obs = test_xcalloc(N * od, sizeof(float));
    io->reward = test_xcalloc(N, sizeof(float));
    io->terminated = test_xcalloc(N, 1);
    io->truncated = test_xcalloc(N, 1);
    io->done_return = test_xcalloc(N, sizeof(double));
    io->done_len = test_xcalloc(N, sizeof(int32_t));
}

static void io_free(dqn_env_io *io) {
    void *bufs[] = {io->state, io->counter, io->ep_len, io->ep_return, io->obs, io->final_obs,
                    io->reward, io->terminated, io->truncated, io->done_return, io->done_len};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) free(bufs[k]);
}

/* Whether the op's outputs and carried state are the vector's, bit for bit. */
static int io_same(const dqn_env_io *io, const dqn_vecenv *v, size_t N, size_t od,
                   size_t state_size) {
    int ok = same(io->obs, v->obs, N * od * sizeof(float)) &&
             same(io->final_obs, v->final_obs, N * od * sizeof(float)) &&
             same(io->reward, v->reward, N * sizeof(float)) &&
             same(io->terminated, v->terminated, N) && same(io->truncated, v->truncated, N) &&
             same(io->done_return, v->done_return, N * sizeof(double)) &&
             same(io->done_len, v->done_len, N * sizeof(int32_t)) &&
             same(io->ep_len, v->ep_len, N * sizeof(int32_t)) &&
             same(io->ep_return, v->ep_return, N * sizeof(double)) &&
             same(io->state, v->state, N * state_size);
    for (size_t i = 0; i < N; i++) ok &= io->counter[i] == v->rng[i].counter;
    return ok;
}

static void op_vs_vecenv(dqn_backend *cpu, const char *name, int kind, int n, int steps,
                         int max_steps) {
    dqn_env env = dqn_env_of(dqn_env_find(name));
    if (max_steps >= 0) env.max_steps = max_steps;
    const uint64_t seed = 4242 + (uint64_t)kind;
    dqn_vecenv v;
    CHECK_OK(dqn_vecenv_create(&v, &env, n, seed, DQN_STREAM_ENV));
    const size_t N = (size_t)n, od = (size_t)env.obs_dim;
    dqn_env_io io = {.kind = (dqn_env_kind)kind, .math = DQN_ENV_MATH_LIBM, .n = n,
                     .max_steps = env.max_steps, .seed = seed, .stream_base = DQN_STREAM_ENV};
    io_alloc(&io, N, od, env.state_size);
    int32_t *act = test_xcalloc(N, sizeof(int32_t));
    long first_bad = -1, terminations = 0, truncations = 0;
    for (int k = 0; k <= steps && first_bad < 0; k++) {
        for (size_t i = 0; i < N; i++)
            act[i] = (int32_t)dqn_philox_below(9, DQN_STREAM_EXPLORE, (uint64_t)k * N + i,
                                               (uint32_t)env.branch_sizes[0]);
        CHECK_OK(k == 0 ? dqn_vecenv_reset(&v) : dqn_vecenv_step(&v, act));
        CHECK_OK(cpu->ops->env_step(cpu, &io, k == 0 ? NULL : act));
        for (size_t i = 0; i < N; i++)
            terminations += v.terminated[i], truncations += v.truncated[i];
        if (!io_same(&io, &v, N, od, env.state_size)) first_bad = k;
    }
    CHECK(first_bad < 0, "%s (%d envs, max_steps %d): the op and the vector differ at call %ld",
          name, n, env.max_steps, first_bad);
    /* the run covers what it claims: the time limit and (where random play reaches it) the
     * terminal step */
    CHECK(!(env.max_steps > 0 && env.max_steps <= steps && kind != DQN_ENV_CARTPOLE) ||
              truncations > 0, "%s: no truncation", name);
    CHECK(!(kind == DQN_ENV_CARTPOLE && env.max_steps <= 40) || truncations > 0,
          "%s: no truncation", name);
    CHECK(kind != DQN_ENV_CARTPOLE || terminations > 0, "%s: no termination", name);
    printf("  %-12s %5d envs x %4d steps, max_steps %3d: %ld terminations, %ld truncations: "
           "the same bits\n", name, n, steps, env.max_steps, terminations, truncations);
    io_free(&io);
    free(act);
    dqn_vecenv_destroy(&v);
}

/* ---- 2. the two kinds of math over the rollouts' arguments ---- */

static struct {
    long sincos, squares;          /* arguments seen */
    long sin_diff, cos_diff, sq_diff;
    long undecided;                /* sinl / cosl too close to call which side is nearer */
    long wrong;                    /* the correctly rounded side farther from the true value */
    long far;                      /* results more than one ulp apart */
} M;

/* cr and libm differ: one ulp apart, cr the nearer to ref (long double, ~2^-63 relative) */
static void judge(double cr, double lm, long double ref) {
    if (nextafter(cr, lm) != lm) M.far++;
    long double dc = fabsl((long double)cr - ref), dl = fabsl((long double)lm - ref);
    long double margin = fabsl((long double)lm - (long double)cr) / 256;
    if (dl - dc > margin) return;
    if (dc - dl > margin) M.wrong++;
    else M.undecided++;
}

static void trace(int what, double x) {
    if (what == 0) {
        M.sincos++;
        double s, c, ls = sin(x), lc = cos(x);
        dqn_sincos_cr(x, &s, &c);
        if (s != ls) M.sin_diff++, judge(s, ls, sinl((long double)x));
        if (c != lc) M.cos_diff++, judge(c, lc, cosl((long double)x));
    } else {
        M.squares++;
        double p = x * x, e = fma(x, x, -p), l = pow(x, dqn_cl_two); /* x^2 = p + e exactly */
        if (l != p) {
            M.sq_diff++;
            if (nextafter(p, l) != l) M.far++;
            if (fabs(e) > fabs((l - p) - e)) M.wrong++;
        }
    }
}

/* n slots of kind under random actions for `steps` steps with libm math (every sin, cos and
 * square argument goes through trace), episodes reset at the end or after max_steps */
static void rollout(int kind, int n, int steps, int max_steps, uint64_t seed) {
    double s[4];
    float obs[6], reward;
    for (int i = 0; i < n; i++) {
        uint64_t counter = 0;
        const uint32_t stream = DQN_STREAM_ENV + (uint32_t)i;
        dqn_classic_reset1(kind, 0, s, seed, stream, &counter, obs);
        int len = 0;
        for (int k = 0; k < steps; k++) {
            int a = (int)dqn_philox_below(seed, DQN_STREAM_EXPLORE, (uint64_t)k * n + i,
                                          kind == DQN_ENV_CARTPOLE ? 2 : 3);
            int term = kind == DQN_ENV_CARTPOLE ? dqn_cartpole_step(0, s, a, obs, &reward)
                       : kind == DQN_ENV_ACROBOT ? dqn_acrobot_step(0, s, a, obs, &reward)
                                                 : dqn_mountaincar_step(0, s, a, obs, &reward);
            if (term || ++len >= max_steps) {
                dqn_classic_reset1(kind, 0, s, seed, stream, &counter, obs);
                len = 0;
            }
        }
    }
}

static void math_measure(int scale) {
    const char *names[] = {"cartpole", "acrobot", "mountaincar"};
    const int slots[] = {256, 32, 64}, max_steps[] = {500, 500, 200};
    for (int kind = 0; kind < 3; kind++) {
        memset(&M, 0, sizeof M);
        rollout(kind, slots[kind] * scale, 1000, max_steps[kind], 11);
        printf("  %-12s %9ld sin/cos arguments: %ld sin and %ld cos results differ from libm's "
               "(%.2g%%); %9ld squares: %ld differ from pow(x, 2)'s (%.2g%%); "
               "%ld too close to judge by long double\n",
               names[kind], M.sincos, M.sin_diff, M.cos_diff,
               M.sincos ? 100.0 * (double)(M.sin_diff + M.cos_diff) / (2.0 * M.sincos) : 0.0,
               M.squares, M.sq_diff, M.squares ? 100.0 * (double)M.sq_diff / M.squares : 0.0,
               M.undecided);
        CHECK(M.sincos > 10000, "%s: only %ld arguments", names[kind], M.sincos);
        CHECK(M.far == 0, "%s: %ld results more than one ulp from libm's", names[kind], M.far);
        CHECK(M.wrong == 0, "%s: %ld correctly rounded results farther from the true value than "
              "libm's", names[kind], M.wrong);
    }
}

/* the correctly rounded functions at points whose results are known exactly or by symmetry */
static void math_points(void) {
    double s, c;
    dqn_sincos_cr(0.0, &s, &c);
    CHECK(s == 0.0 && !signbit(s) && c == 1.0, "sincos(0) = %a, %a", s, c);
    dqn_sincos_cr(-0.0, &s, &c);
    CHECK(s == 0.0 && signbit(s) && c == 1.0, "sincos(-0) = %a, %a", s, c);
    dqn_sincos_cr(0x1.921fb54442d18p+0, &s, &c); /* pi/2 rounded: cos is pi/2's tail */
    CHECK(s == 1.0 && c == 0x1.1a62633145c07p-54, "sincos(pi/2) = %a, %a", s, c);
    dqn_sincos_cr(0x1.921fb54442d18p+1, &s, &c); /* pi rounded: sin is pi's tail */
    CHECK(s == 0x1.1a62633145c07p-53 && c == -1.0, "sincos(pi) = %a, %a", s, c);
    for (int k = 0; k < 2000; k++) {
        double x = -40 + 80 * dqn_philox_double(3, 1, (uint64_t)k), s2, c2;
        dqn_sincos_cr(x, &s, &c);
        dqn_sincos_cr(-x, &s2, &c2);
        CHECK(s2 == -s && c2 == c, "sincos(-x) != (-sin x, cos x) at %a", x);
    }
    dqn_sincos_cr(INFINITY, &s, &c);
    CHECK(isnan(s) && isnan(c), "sincos(inf) = %a, %a", s, c);
}

/* ---- 3. the arguments ---- */

static void refusals(dqn_backend *cpu) {
    double state[4];
    uint64_t counter[1];
    int32_t len[1];
    double ret[1], dret[1];
    float obs[4], fobs[4], rew[1];
    uint8_t term[1], trunc[1];
    dqn_env_io io = {.kind = DQN_ENV_CARTPOLE, .math = DQN_ENV_MATH_CR, .n = 1, .max_steps = 5,
                     .seed = 1, .stream_base = DQN_STREAM_ENV, .state = state,
                     .counter = counter, .ep_len = len, .ep_return = ret, .obs = obs,
                     .final_obs = fobs, .reward = rew, .terminated = term, .truncated = trunc,
                     .done_return = dret, .done_len = len};
    counter[0] = 0;
    CHECK_OK(cpu->ops->env_step(cpu, &io, NULL));
    io.math = DQN_ENV_MATH_LIBM;
    CHECK_OK(cpu->ops->env_step(cpu, &io, NULL));
    /* a backend without libm (CUDA) refuses it, by name */
    CHECK(dqn_env_io_check(&io, 0) == DQN_ERR_ARG && strstr(dqn_last_error(), "env_step"),
          "libm math on a device backend: %s", dqn_last_error());
    dqn_env_io bad = io;
    bad.math = (dqn_env_math)2;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "math 2 accepted");
    bad = io, bad.kind = (dqn_env_kind)-1;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "kind -1 accepted");
    bad = io, bad.max_steps = -1;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "max_steps -1 accepted");
    bad = io, bad.counter = NULL;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "NULL counter accepted");
    CHECK(cpu->ops->env_step(cpu, NULL, NULL) == DQN_ERR_ARG, "NULL io accepted");
}

/* ---- 4. the market ---- */

static void market_vs_vecenv(dqn_backend *cpu, int assets, int levels, int episode_len, int n,
                             int steps) {
    dqn_config c;
    CHECK_OK(dqn_config_preset(&c, "market"));
    c.synth_rows = 1200;
    c.synth_assets = assets;
    c.position_levels = levels;
    c.episode_len = episode_len;
    c.cost = 0.0007;
    c.holding_cost = 0.0002;
    dqn_env env;
    CHECK_OK(dqn_env_open(&c, &env));
    if (!env.ctx) return;
    const dqn_market_ctx *x = env.ctx;
    const uint64_t seed = 777 + (uint64_t)assets;
    dqn_vecenv v;
    CHECK_OK(dqn_vecenv_create(&v, &env, n, seed, DQN_STREAM_ENV));
    const size_t N = (size_t)n, od = (size_t)env.obs_dim, D = (size_t)env.n_branches;
    const size_t rows = (size_t)x->data.rows;
    /* the tables in buffers of their own: the op reads io->market only */
    dqn_market_dev m = dqn_market_dev_of(x);
    float *z = test_xcalloc(rows * (size_t)x->cols, sizeof(float));
    double *price = test_xcalloc(rows * (size_t)x->assets, sizeof(double));
    memcpy(z, x->z, rows * (size_t)x->cols * sizeof(float));
    memcpy(price, x->data.price, rows * (size_t)x->assets * sizeof(double));
    m.z = z, m.price = price;
    dqn_env_io io = {.kind = DQN_ENV_MARKET, .math = DQN_ENV_MATH_CR, .n = n,
                     .max_steps = env.max_steps, .seed = seed, .stream_base = DQN_STREAM_ENV,
                     .market = &m};
    CHECK(env.state_size == sizeof(dqn_market_state), "market state %zu bytes", env.state_size);
    io_alloc(&io, N, od, env.state_size);
    int32_t *act = test_xcalloc(N * D, sizeof(int32_t));
    long first_bad = -1, truncations = 0, nonzero = 0;
    for (int k = 0; k <= steps && first_bad < 0; k++) {
        /* mostly held positions, so that some periods trade and some do not */
        for (size_t j = 0; j < N * D; j++) {
            const uint64_t at = 2 * ((uint64_t)k * N * D + j);
            if (k <= 1 || dqn_philox_uniform(9, DQN_STREAM_EXPLORE, at) < 0.3f)
                act[j] = (int32_t)dqn_philox_below(9, DQN_STREAM_EXPLORE, at + 1,
                                                   (uint32_t)levels);
        }
        CHECK_OK(k == 0 ? dqn_vecenv_reset(&v) : dqn_vecenv_step(&v, act));
        CHECK_OK(cpu->ops->env_step(cpu, &io, k == 0 ? NULL : act));
        for (size_t i = 0; i < N; i++)
            truncations += v.truncated[i], nonzero += v.reward[i] != 0.0f;
        if (!io_same(&io, &v, N, od, env.state_size)) first_bad = k;
    }
    CHECK(first_bad < 0, "market (%d assets, %d levels, %d envs, episode_len %d): the op and the "
          "vector differ at call %ld", assets, levels, n, episode_len, first_bad);
    CHECK(truncations >= (long)N * (steps / episode_len) && nonzero > (long)N * steps / 2,
          "market: %ld truncations, %ld nonzero rewards in %d steps", truncations, nonzero,
          steps);
    printf("  %-12s %5d envs x %4d steps, %d assets, %d levels, episode_len %3d: %ld "
           "truncations: %s\n", "market", n, steps, assets, levels, episode_len, truncations,
           first_bad < 0 ? "the same bits" : "they differ");

    /* refusals: the data missing, a time limit past the episode (a slot would walk off the
     * table), a window reaching before the first row */
    dqn_env_io bad = io;
    bad.market = NULL;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG &&
              strstr(dqn_last_error(), "env_step"), "market without data: %s", dqn_last_error());
    bad = io, bad.max_steps = episode_len + 1;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG,
          "max_steps past episode_len accepted");
    bad = io, bad.max_steps = 0;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "max_steps 0 accepted");
    dqn_market_dev bm = m;
    bad = io, bad.market = &bm;
    bm.first = bm.window - 2;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "first row before the window");
    bm = m, bm.end = bm.rows;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "end at the table's last row + 1");
    bm = m, bm.z = NULL;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "NULL z table");
    bm = m, bm.assets = DQN_MARKET_MAX_ASSETS + 1;
    CHECK(cpu->ops->env_step(cpu, &bad, NULL) == DQN_ERR_ARG, "too many assets");

    io_free(&io);
    free(act), free(z), free(price);
    dqn_vecenv_destroy(&v);
    dqn_env_close(&env);
}

static void market_log_measure(void) {
    long n = 0, diff = 0, far = 0;
    for (uint64_t i = 0; i < 2000000; i++) {
        double u = dqn_philox_double(5, 2, i);
        /* 1 + R of the periods, and the whole range from the ruin floor up */
        double x = i % 2 ? 1.0 + 0.4 * (u - 0.5) : exp(-20.8 + 35.0 * u);
        double a = dqn_market_log(x), b = log(x);
        n++;
        if (a != b) {
            diff++;
            if (nextafter(a, b) != b) far++;
        }
    }
    CHECK(far == 0, "market log: %ld results more than one ulp from glibc's", far);
    CHECK(diff < n / 20, "market log: %ld of %ld results differ from glibc's", diff, n);
    printf("  market log   %9ld arguments: %ld differ from glibc's by one ulp (%.2g%%)\n", n,
           diff, 100.0 * (double)diff / (double)n);
    double l1 = dqn_market_log(1.0);
    CHECK(l1 == 0.0 && !signbit(l1), "market log(1) = %a", l1);
    for (int k = -30; k <= 30; k++)
        CHECK(fabs(dqn_market_log(ldexp(1.0, k)) - k * 0.6931471805599453) <= 1e-15 * abs(k),
              "market log(2^%d) = %a", k, dqn_market_log(ldexp(1.0, k)));
    CHECK(dqn_market_log(DQN_MARKET_RUIN) == log(DQN_MARKET_RUIN), "the ruin floor's log");
    const double sub[] = {0x1p-1074, 0x1.8p-1060, 0x1.fffffffffffffp-1023, DBL_MAX};
    for (size_t k = 0; k < sizeof sub / sizeof sub[0]; k++) {
        double a = dqn_market_log(sub[k]), b = log(sub[k]);
        CHECK(a == b || nextafter(a, b) == b, "market log(%a) = %a, glibc's %a", sub[k], a, b);
    }
    CHECK(dqn_market_log(0.0) == -INFINITY && isnan(dqn_market_log(-1.0)) &&
              dqn_market_log(INFINITY) == INFINITY && isnan(dqn_market_log(NAN)),
          "market log's special values");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    dqn_backend *cpu = NULL;
    CHECK_OK(dqn_backend_cpu_create(&cpu));
    if (!cpu) return check_finish("test_env_op");
    printf("env_step (libm) against dqn_vecenv:\n");
    op_vs_vecenv(cpu, "cartpole", DQN_ENV_CARTPOLE, 64, 1500, -1);
    op_vs_vecenv(cpu, "cartpole", DQN_ENV_CARTPOLE, 33, 400, 40);
    op_vs_vecenv(cpu, "acrobot", DQN_ENV_ACROBOT, 16, 1200, -1);
    op_vs_vecenv(cpu, "acrobot", DQN_ENV_ACROBOT, 7, 300, 0);
    op_vs_vecenv(cpu, "mountaincar", DQN_ENV_MOUNTAINCAR, 64, 700, -1);
    op_vs_vecenv(cpu, "mountaincar", DQN_ENV_MOUNTAINCAR, 5, 100, 30);
    const char *sc = getenv("DQN_ENV_MATH_SCALE");
    int scale = sc && atoi(sc) > 0 ? atoi(sc) : 1;
    printf("the correctly rounded math against libm over the rollouts' arguments:\n");
    math_points();
    math_measure(scale);
    refusals(cpu);
    printf("env_step (market) against dqn_vecenv:\n");
    market_vs_vecenv(cpu, 4, 3, 128, 8, 400);
    market_vs_vecenv(cpu, 3, 5, 37, 5, 300);
    market_vs_vecenv(cpu, 1, 7, 1, 3, 50);
    market_log_measure();
    cpu->ops->destroy(cpu);
    return check_finish("test_env_op");
}
