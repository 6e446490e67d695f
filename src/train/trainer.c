/* The training loop of SPEC section 5: envs -> actor -> n-step -> replay -> updates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"
#include "backends/cpu/cpu.h"
#include "core/config.h"
#include "train/explore.h"
#include "train/trainer_internal.h"

dqn_status dqn_backend_open(const char *device, const char *math, int threads, dqn_backend **out) {
    dqn_math_mode mm = strcmp(math, "tf32") == 0 ? DQN_MATH_TF32 : DQN_MATH_FP32;
    if (strcmp(device, "cuda") == 0) return dqn_backend_cuda_create(out, 0, mm);
    if (strcmp(device, "auto") == 0 && dqn_backend_cuda_available())
        return dqn_backend_cuda_create(out, 0, mm);
    DQN_TRY(dqn_backend_cpu_create(out));
    (*out)->math = mm;
    dqn_cpu_set_threads(threads);
    return DQN_OK;
}

dqn_status dqn_arch_from_config(const dqn_config *c, const dqn_env *env, dqn_arch *a) {
    memset(a, 0, sizeof *a);
    a->obs_dim = env->obs_dim;
    a->d = c->d;
    a->grn_blocks = c->grn_blocks;
    a->n_cos = c->n_cos;
    a->bottleneck = c->bottleneck;
    a->head_hidden = c->head_hidden;
    /* The env defines the shape: the keys may only restate it. */
    dqn_branches_init(&a->br, env->n_branches, env->branch_sizes);
    if (c->branches[0]) {
        int sizes[DQN_CFG_MAX_BRANCHES], n = 0;
        int same = dqn_config_parse_branches(c->branches, sizes, &n) && n == env->n_branches;
        for (int b = 0; same && b < n; b++) same = sizes[b] == env->branch_sizes[b];
        if (!same)
            return dqn_error_user(DQN_ERR_ARG,
                                  "bad value for --branches: \"%s\" (env %s has %d branch(es) "
                                  "fixed by the env; leave it empty)",
                                  c->branches, env->name, env->n_branches);
    }
    if (c->obs_dim && c->obs_dim != env->obs_dim)
        return dqn_error_user(DQN_ERR_ARG,
                              "bad value for --obs-dim: %d (env %s has %d; leave it 0)",
                              c->obs_dim, env->name, env->obs_dim);
    return DQN_OK;
}

/* The updates a run of c->steps env steps makes: beta's annealing span. */
static uint64_t planned_updates(const dqn_config *c) {
    int64_t after = c->steps - c->learning_starts;
    return after > 0 ? (uint64_t)(after / c->train_freq) * (uint64_t)c->updates_per_round : 0;
}

void dqn_update_cfg_of(const dqn_config *c, dqn_update_cfg *u) {
    memset(u, 0, sizeof *u);
    u->B = c->batch_size;
    u->N = c->n_tau;
    u->Nt = c->n_tau_target;
    u->K = c->k_tau;
    u->mode = strcmp(c->target_mode, "independent") == 0 ? DQN_TARGET_INDEPENDENT : DQN_TARGET_MEAN;
    u->kappa = (float)c->kappa;
    u->lr = (float)c->lr;
    u->beta1 = 0.9f;
    u->beta2 = 0.999f;
    u->adam_eps = (float)c->adam_eps;
    u->weight_decay = (float)c->weight_decay;
    u->grad_clip = (float)c->grad_clip;
    u->head_grad_clip = (float)c->head_grad_clip;
    u->target_period = c->target_period;
    u->tau_target = (float)c->tau_target;
    u->seed = c->seed;
    dqn_health_mode_parse(c->health, &u->health);   /* validated with the config */
    u->guard_scale = (float)c->guard_scale;
    u->guard_floor = (float)c->guard_floor;
    u->fault = c->fault;
    u->weighted = strcmp(c->replay, "prioritized") == 0;
}

void dqn_trainer_destroy(dqn_trainer *t) {
    if (!t) return;
    dqn_dloop_destroy(t);
    dqn_actor_destroy(&t->actor, t->be);
    dqn_actor_destroy(&t->pred, t->be);
    dqn_trainer_health_free(t);
    dqn_model_destroy(&t->model);
    dqn_replay_destroy(&t->replay);
    dqn_nstep_destroy(&t->nstep);
    dqn_vecenv_destroy(&t->venv);
    dqn_env_close(&t->env);
    free(t->actions);
    free(t->q_host);
    free(t->prev_obs);
    free(t->ep_ret);
    if (t->rank_flag) t->be->ops->free(t->be, t->rank_flag);
    if (t->be) t->be->ops->destroy(t->be);
    free(t);
}

dqn_status dqn_trainer_create(const dqn_config *c, dqn_trainer **out) {
    *out = NULL;
    if (c->ranks > 1)
        return dqn_error_user(DQN_ERR_ARG,
                              "ranks = %d: each rank is its own process (dqn train --ranks "
                              "launches them; embedders call dqn_trainer_create_rank)", c->ranks);
    return dqn_trainer_create_with(c, NULL, out);
}

dqn_status dqn_trainer_create_with(const dqn_config *c, const dqn_rank_info *r,
                                   dqn_trainer **out) {
    return dqn_trainer_make(c, r, NULL, out);
}

dqn_status dqn_config_for_env(const dqn_config *c, const dqn_env *env, dqn_config *out) {
    *out = *c;
    DQN_TRY(dqn_env_check_shape(env));
    char sizes[DQN_CFG_STR] = "", num[16];
    for (int b = 0; b < env->n_branches; b++) {
        snprintf(num, sizeof num, b ? ",%d" : "%d", env->branch_sizes[b]);
        strcat(sizes, num);
    }
    snprintf(num, sizeof num, "%d", env->obs_dim);
    char id[DQN_CFG_STR];
    snprintf(id, sizeof id, "%s", env->name ? env->name : "");
    DQN_TRY(dqn_config_set(out, "env", "external"));
    DQN_TRY(dqn_config_set(out, "env_id", id));
    DQN_TRY(dqn_config_set(out, "obs_dim", num));
    return dqn_config_set(out, "branches", sizes);
}

dqn_status dqn_trainer_create_env(const dqn_config *c, const dqn_env_api *env, dqn_trainer **out) {
    *out = NULL;
    if (!env) return DQN_ERR(DQN_ERR_ARG, "dqn_trainer_create_env: env is NULL");
    dqn_env e = *env;
    dqn_config ec;
    dqn_status s = c->ranks > 1 ? dqn_error_user(DQN_ERR_ARG, "ranks = %d: a user env trains in "
                                                 "one process", c->ranks)
                                : dqn_env_check(&e);
    if (s == DQN_OK) s = dqn_config_for_env(c, &e, &ec);
    if (s != DQN_OK) {
        dqn_env_close(&e);
        return s;
    }
    return dqn_trainer_make(&ec, NULL, &e, out);
}

/* What each of n env slots needs: its n-step window, the actor's rows and host buffers; made
 * whole, then swapped in for the trainer's (none at creation). */
static dqn_status make_slots(dqn_trainer *t, int n) {
    const dqn_config *c = &t->cfg;
    int D = t->arch.br.D, obs = t->env.obs_dim;
    dqn_nstep ns;
    dqn_actor ac;
    memset(&ac, 0, sizeof ac);
    dqn_status s = dqn_nstep_create(&ns, n, c->n_step, obs, D, c->gamma);
    if (s == DQN_OK) s = dqn_actor_create(&ac, t->be, &t->model.L, n, c->k_tau);
    int32_t *actions = calloc((size_t)n * D, sizeof *actions);
    float *q = calloc((size_t)n * t->arch.br.A, sizeof *q);
    float *prev = calloc((size_t)n * obs, sizeof *prev);
    double *ret = calloc((size_t)n, sizeof *ret);
    if (s == DQN_OK && (!actions || !q || !prev || !ret))
        s = DQN_ERR(DQN_ERR_NOMEM, "buffers for %d envs", n);
    if (s != DQN_OK) {
        dqn_nstep_destroy(&ns);
        dqn_actor_destroy(&ac, t->be);
        free(actions); free(q); free(prev); free(ret);
        return s;
    }
    dqn_nstep_destroy(&t->nstep);
    dqn_actor_destroy(&t->actor, t->be);
    free(t->actions); free(t->q_host); free(t->prev_obs); free(t->ep_ret);
    t->nstep = ns;
    t->actor = ac;
    t->actions = actions;
    t->q_host = q;
    t->prev_obs = prev;
    t->ep_ret = ret;
    return DQN_OK;
}

dqn_status dqn_trainer_make(const dqn_config *c, const dqn_rank_info *r, const dqn_env *user,
                            dqn_trainer **out) {
    *out = NULL;
    dqn_env owned;
    memset(&owned, 0, sizeof owned);
    if (user) owned = *user;
    dqn_status s = dqn_config_validate(c);
    dqn_trainer *t = s == DQN_OK ? calloc(1, sizeof *t) : NULL;
    if (s == DQN_OK && !t) s = DQN_ERR(DQN_ERR_NOMEM, "trainer");
    if (s != DQN_OK) {
        dqn_env_close(&owned);
        return s;
    }
    t->cfg = *c;
    t->last_loss = NAN;
    t->eval_best = NAN;
    t->eval_best_step = -1;
    if (user) t->env = owned;
    else if ((s = dqn_env_open(c, &t->env)) != DQN_OK) goto fail;
    if ((s = r ? dqn_rank_backend_open(c, r, &t->be)
               : dqn_backend_open(c->device, c->math, c->threads, &t->be)) != DQN_OK)
        goto fail;
    if ((s = dqn_arch_from_config(c, &t->env, &t->arch)) != DQN_OK) goto fail;
    dqn_update_cfg uc;
    dqn_update_cfg_of(c, &uc);
    if ((s = dqn_model_create(&t->model, t->be, &t->arch, &uc)) != DQN_OK) goto fail;
    if ((s = dqn_model_init_weights(&t->model, c->seed)) != DQN_OK) goto fail;
    if ((s = dqn_trainer_health_init(t)) != DQN_OK) goto fail;
    int D = t->arch.br.D, obs = t->env.obs_dim;
    if ((s = dqn_replay_create(&t->replay, t->be, c->buffer_size, obs, D)) != DQN_OK) goto fail;
    if (strcmp(c->replay, "prioritized") == 0 &&
        (s = dqn_replay_prioritize(&t->replay, (float)c->per_alpha, (float)c->per_beta,
                                   (float)c->per_eps, planned_updates(c))) != DQN_OK)
        goto fail;
    if ((s = make_slots(t, c->num_envs)) != DQN_OK) goto fail;
    if (t->env.step &&
        (s = dqn_vecenv_create(&t->venv, &t->env, c->num_envs, c->seed, DQN_STREAM_ENV)) != DQN_OK)
        goto fail;
    t->next_refresh = c->log_interval;
    if (t->env.step && (s = dqn_vecenv_reset(&t->venv)) != DQN_OK) goto fail;
    if ((s = dqn_dloop_create(t)) != DQN_OK) goto fail;
    *out = t;
    return DQN_OK;
fail:
    dqn_trainer_destroy(t);   /* closes a user env too: t->env holds it from the start */
    return s;
}

static double epsilon_at(const dqn_config *c, int64_t step) {
    return dqn_epsilon(c->eps_start, c->eps_end, c->eps_fraction * (double)c->steps, step);
}

/* Epsilon-greedy per branch into t->actions; the network runs only if some branch of some env
 * acts greedily. */
static dqn_status act(dqn_trainer *t, const float *obs) {
    const dqn_config *c = &t->cfg;
    const dqn_branches *br = &t->arch.br;
    int n = c->num_envs, D = br->D;
    double eps = epsilon_at(c, t->env_steps);
    t->dl.live = 0;   /* the host's copies move on: the device loop starts again from them */
    uint64_t base = t->act_steps * (uint64_t)n * D * 2;
    int any_greedy = 0;
    for (int i = 0; i < n * D; i++)
        any_greedy |= dqn_explore_flip(c->seed, base, (uint64_t)i, eps, br->n[i % D],
                                       &t->actions[i]);
    t->act_steps++;
    if (!any_greedy) return DQN_OK;
    int32_t scratch[DQN_MAX_BRANCHES * 64];
    int32_t *g = n * D <= (int)(sizeof scratch / sizeof scratch[0]) ? scratch
                                                                    : malloc((size_t)n * D * sizeof *g);
    if (!g) return DQN_ERR(DQN_ERR_NOMEM, "actions");
    dqn_status s = dqn_actor_greedy(&t->actor, t->be, &t->model.L, t->model.params, obs, n,
                                    c->seed, 0, g, t->q_host);
    if (s == DQN_OK) {
        double qsum = 0;
        for (int e = 0; e < n; e++)
            for (int b = 0; b < D; b++) {
                const float *q = t->q_host + (size_t)e * br->A + br->off[b];
                float best = q[0];
                for (int a = 1; a < br->n[b]; a++) best = q[a] > best ? q[a] : best;
                qsum += best;
            }
        qsum /= (double)(n * D);
        t->mean_q = isfinite(t->mean_q) && t->mean_q != 0 ? 0.99 * t->mean_q + 0.01 * qsum : qsum;
        for (int i = 0; i < n * D; i++)
            if (t->actions[i] < 0) t->actions[i] = g[i];
    }
    if (g != scratch) free(g);
    return s;
}

dqn_status dqn_trainer_do_update(dqn_trainer *t) {
    dqn_replay_view v;
    dqn_replay_view_of(&t->replay, &v);
    DQN_TRY(dqn_model_update(&t->model, &v));
    t->updates++;
    if (t->be->ops->capture_begin && !t->loss_log) return DQN_OK;  /* read lazily on GPUs */
    float loss;
    DQN_TRY(t->be->ops->d2h(t->be, &loss, t->model.loss, sizeof loss));
    t->last_loss = loss;
    if (t->loss_log && *t->loss_count < t->loss_cap) t->loss_log[(*t->loss_count)++] = loss;
    return DQN_OK;
}

/* The loss and gradient norm read back from the backend (GPUs leave them there). */
dqn_status dqn_trainer_refresh_stats(dqn_trainer *t) {
    if (t->updates == 0) return DQN_OK;
    float loss, gn;
    DQN_TRY(t->be->ops->d2h(t->be, &loss, t->model.loss, sizeof loss));
    DQN_TRY(t->be->ops->d2h(t->be, &gn, t->model.gnorm, sizeof gn));
    t->last_loss = loss;
    t->grad_norm = gn;
    return DQN_OK;
}

/* One step of every slot into the n-step assembler and the replay, the episode records, then the
 * updates the schedule owes. */
static dqn_status observe(dqn_trainer *t, const float *obs, const int32_t *actions,
                          const float *reward, const float *next, const uint8_t *terminated,
                          const uint8_t *truncated, const uint8_t *valid) {
    const dqn_config *c = &t->cfg;
    int n = c->num_envs, od = t->env.obs_dim, D = t->arch.br.D, stepped = 0;
    t->dl.live = 0;
    dqn_nstep_clear_out(&t->nstep);
    for (int e = 0; e < n; e++) {
        if (valid && !valid[e]) continue;
        stepped++;
        dqn_nstep_push(&t->nstep, e, obs + (size_t)e * od, actions + (size_t)e * D, reward[e],
                       next + (size_t)e * od, terminated[e] != 0, truncated[e] != 0);
        t->ep_ret[e] += reward[e];
        if (terminated[e] || truncated[e]) {
            t->episodes++;
            t->recent[t->recent_pos] = t->ep_ret[e];
            t->recent_pos = (t->recent_pos + 1) % DQN_RECENT_EPISODES;
            if (t->n_recent < DQN_RECENT_EPISODES) t->n_recent++;
            t->ep_ret[e] = 0.0;
        }
    }
    dqn_nstep *ns = &t->nstep;
    DQN_TRY(dqn_replay_add(&t->replay, ns->out_obs, ns->out_act, ns->out_R, ns->out_disc,
                           ns->out_next, ns->out_n));
    t->env_steps += stepped;
    if (t->env_steps < c->learning_starts || t->replay.size < c->batch_size) return DQN_OK;
    t->since_update += stepped;
    while (t->since_update >= c->train_freq) {
        t->since_update -= c->train_freq;
        for (int g = 0; g < c->updates_per_round; g++) DQN_TRY(dqn_trainer_do_update(t));
    }
    return DQN_OK;
}

dqn_status dqn_trainer_run_until(dqn_trainer *t, int64_t target) {
    const dqn_config *c = &t->cfg;
    if (!t->env.step)
        return dqn_error_user(DQN_ERR_ARG, "env external: the host steps the env "
                              "(dqn_trainer_act / dqn_trainer_observe)");
    if (target <= 0 || target > c->steps) target = c->steps;
    if (t->dl.on) {
        DQN_TRY(dqn_dloop_run_until(t, target));
        return dqn_trainer_refresh_stats(t);
    }
    int n = c->num_envs, obs = t->env.obs_dim;
    dqn_vecenv *v = &t->venv;
    while (t->env_steps < target) {
        DQN_TRY(act(t, v->obs));
        memcpy(t->prev_obs, v->obs, (size_t)n * obs * sizeof(float));
        DQN_TRY(dqn_vecenv_step(v, t->actions));
        DQN_TRY(observe(t, t->prev_obs, t->actions, v->reward, v->final_obs, v->terminated,
                        v->truncated, NULL));
    }
    return dqn_trainer_refresh_stats(t);
}

dqn_status dqn_trainer_act(dqn_trainer *t, const float *obs, int32_t *actions) {
    if (!obs || !actions) return DQN_ERR(DQN_ERR_ARG, "dqn_trainer_act: obs or actions is NULL");
    DQN_TRY(act(t, obs));
    memcpy(actions, t->actions, (size_t)t->cfg.num_envs * t->arch.br.D * sizeof *actions);
    return DQN_OK;
}

dqn_status dqn_trainer_observe(dqn_trainer *t, const float *obs, const int32_t *actions,
                               const float *reward, const float *next_obs,
                               const uint8_t *terminated, const uint8_t *truncated,
                               const uint8_t *valid) {
    if (!obs || !actions || !reward || !next_obs || !terminated || !truncated)
        return DQN_ERR(DQN_ERR_ARG, "dqn_trainer_observe: a NULL buffer");
    const dqn_branches *br = &t->arch.br;
    for (int i = 0; i < t->cfg.num_envs * br->D; i++)
        if ((!valid || valid[i / br->D]) && (actions[i] < 0 || actions[i] >= br->n[i % br->D]))
            return dqn_error_user(DQN_ERR_ARG, "env %d, branch %d: action %d outside [0, %d)",
                                  i / br->D, i % br->D, actions[i], br->n[i % br->D]);
    DQN_TRY(observe(t, obs, actions, reward, next_obs, terminated, truncated, valid));
    if (t->env_steps < t->next_refresh) return DQN_OK;
    t->next_refresh = t->env_steps + t->cfg.log_interval;
    return dqn_trainer_refresh_stats(t);
}

dqn_status dqn_trainer_set_num_envs(dqn_trainer *t, int n) {
    if (t->env.step)
        return dqn_error_user(DQN_ERR_ARG, "num_envs of a trainer with its own env (%s) is fixed",
                              t->env.name ? t->env.name : "");
    char v[16];
    snprintf(v, sizeof v, "%d", n);
    dqn_config c = t->cfg;
    DQN_TRY(dqn_config_set(&c, "num_envs", v));
    if (n == t->cfg.num_envs) return DQN_OK;
    DQN_TRY(make_slots(t, n));
    t->cfg = c;
    return DQN_OK;
}

dqn_status dqn_trainer_update(dqn_trainer *t, int n) {
    if (n < 0) return DQN_ERR(DQN_ERR_ARG, "dqn_trainer_update: %d updates", n);
    if (n > 0 && t->replay.size < t->cfg.batch_size)
        return dqn_error_user(DQN_ERR_ARG, "the replay holds %d transitions, fewer than "
                              "batch_size %d", t->replay.size, t->cfg.batch_size);
    for (int k = 0; k < n; k++) DQN_TRY(dqn_trainer_do_update(t));
    return dqn_trainer_refresh_stats(t);
}

dqn_status dqn_trainer_predict(dqn_trainer *t, const float *obs, int n, int32_t *actions) {
    if (n < 1 || !obs || !actions)
        return DQN_ERR(DQN_ERR_ARG, "dqn_trainer_predict: %d observations", n);
    if (n > t->pred.n) {
        dqn_actor_destroy(&t->pred, t->be);
        DQN_TRY(dqn_actor_create(&t->pred, t->be, &t->model.L, n, t->cfg.k_tau));
    }
    return dqn_actor_greedy(&t->pred, t->be, &t->model.L, t->model.params, obs, n, t->cfg.seed, 1,
                            actions, NULL);
}

int dqn_trainer_obs_dim(const dqn_trainer *t) { return t->arch.obs_dim; }

int dqn_trainer_branches(const dqn_trainer *t, int *sizes) {
    if (sizes)
        for (int b = 0; b < t->arch.br.D; b++) sizes[b] = t->arch.br.n[b];
    return t->arch.br.D;
}

void dqn_trainer_stats(const dqn_trainer *t, dqn_train_stats *s) {
    memset(s, 0, sizeof *s);
    s->env_steps = t->env_steps;
    s->updates = t->updates;
    s->episodes = t->episodes;
    double sum = 0;
    for (int k = 0; k < t->n_recent; k++) sum += t->recent[k];
    s->mean_return = t->n_recent ? sum / t->n_recent : NAN;
    s->last_loss = t->last_loss;
    s->mean_q = t->mean_q;
    s->grad_norm = t->grad_norm;
    s->epsilon = epsilon_at(&t->cfg, t->env_steps);
    s->skipped_updates = t->skipped;
}

const dqn_config *dqn_trainer_config(const dqn_trainer *t) { return &t->cfg; }

const char *dqn_trainer_backend(const dqn_trainer *t) {
    return t->be->ops->name;
}

const char *dqn_trainer_env_loop(const dqn_trainer *t) { return t->dl.on ? "device" : "host"; }

void dqn_trainer_record_losses(dqn_trainer *t, double *buf, size_t cap, size_t *count) {
    t->loss_log = buf;
    t->loss_cap = cap;
    t->loss_count = count;
}

dqn_status dqn_trainer_evaluate(dqn_trainer *t, int episodes, uint64_t seed, double *mean,
                                double *std, double *returns_out) {
    if (episodes < 1) return DQN_ERR(DQN_ERR_ARG, "episodes %d < 1", episodes);
    if (!t->env.step)
        return dqn_error_user(DQN_ERR_ARG, "env external: the trainer has no env to evaluate on");
    dqn_vecenv ev;
    dqn_actor ac;
    int D = t->arch.br.D;
    DQN_TRY(dqn_vecenv_create(&ev, &t->env, episodes, seed, DQN_STREAM_EVAL << 16));
    dqn_status s = dqn_actor_create(&ac, t->be, &t->model.L, episodes, t->cfg.k_tau);
    double *ret = calloc((size_t)episodes, sizeof *ret);
    int32_t *a = calloc((size_t)episodes * D, sizeof *a);
    char *done = calloc((size_t)episodes, 1);
    if (s == DQN_OK && (!ret || !a || !done)) s = DQN_ERR(DQN_ERR_NOMEM, "evaluation buffers");
    if (s == DQN_OK) {
        s = dqn_vecenv_reset(&ev);
        int left = episodes;
        while (left > 0 && s == DQN_OK) {
            s = dqn_actor_greedy(&ac, t->be, &t->model.L, t->model.params, ev.obs, episodes, seed,
                                 1, a, NULL);
            if (s != DQN_OK) break;
            if ((s = dqn_vecenv_step(&ev, a)) != DQN_OK) break;
            for (int e = 0; e < episodes; e++)
                if (!done[e] && (ev.terminated[e] || ev.truncated[e])) {
                    done[e] = 1;
                    ret[e] = ev.done_return[e];
                    left--;
                }
        }
    }
    if (s == DQN_OK) {
        double m = 0, v = 0;
        for (int e = 0; e < episodes; e++) m += ret[e];
        m /= episodes;
        for (int e = 0; e < episodes; e++) v += (ret[e] - m) * (ret[e] - m);
        *mean = m;
        *std = sqrt(v / episodes);
        if (returns_out) memcpy(returns_out, ret, (size_t)episodes * sizeof *ret);
    }
    free(ret);
    free(a);
    free(done);
    dqn_actor_destroy(&ac, t->be);
    dqn_vecenv_destroy(&ev);
    return s;
}

/* The periodic evaluations' episodes: a seed of their own, so that they share no env stream with
 * training nor with the final evaluation (which the CLI seeds with seed ^ 0x9e3779b97f4a7c15). */
static uint64_t periodic_eval_seed(uint64_t seed) { return seed ^ 0xd1b54a32d192ed03ull; }

dqn_status dqn_trainer_eval_note(dqn_trainer *t, double mean, int *improved) {
    *improved = 0;
    if (!isfinite(mean)) return DQN_ERR(DQN_ERR_ARG, "dqn_trainer_eval_note: mean %g", mean);
    if (isnan(t->eval_best) || mean > t->eval_best) {
        t->eval_best = mean;
        t->eval_best_step = t->env_steps;
        *improved = 1;
    }
    return DQN_OK;
}

void dqn_trainer_eval_best(const dqn_trainer *t, double *mean, int64_t *env_steps) {
    *mean = t->eval_best;
    *env_steps = t->eval_best_step;
}

dqn_status dqn_trainer_eval_periodic(dqn_trainer *t, const char *best_path, double *mean,
                                     double *std, int *improved) {
    *improved = 0;
    DQN_TRY(dqn_trainer_evaluate(t, t->cfg.eval_interval_episodes, periodic_eval_seed(t->cfg.seed),
                                 mean, std, NULL));
    DQN_TRY(dqn_trainer_eval_note(t, *mean, improved));
    if (*improved && best_path) return dqn_trainer_save(t, best_path);
    return DQN_OK;
}
