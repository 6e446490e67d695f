/* A trainer as one rank of a data-parallel learner (docs/multi-gpu.md): its CUDA backend joined
 * to the other ranks, the run's initial weights, its own data streams; and the one collective the
 * training loop needs besides the gradient's, "does any rank want to stop?". */
#include <string.h>

#include "core/error.h"
#include "dqn_philox.h"
#include "train/trainer_internal.h"

dqn_status dqn_rank_backend_open(const dqn_config *c, const dqn_rank_info *r, dqn_backend **out) {
    *out = NULL;
    if (strcmp(c->device, "cpu") == 0)
        return dqn_error_user(DQN_ERR_ARG, "rank %d: device cpu: the ranks of a data-parallel "
                              "run need device cuda", r->rank);
    dqn_math_mode mm = strcmp(c->math, "tf32") == 0 ? DQN_MATH_TF32 : DQN_MATH_FP32;
    DQN_TRY(dqn_backend_cuda_create(out, r->device, mm));
    dqn_status s = (*out)->ops->comm_init(*out, r);
    if (s != DQN_OK) {
        (*out)->ops->destroy(*out);
        *out = NULL;
    }
    return s;
}

dqn_status dqn_trainer_create_rank(const dqn_config *c, const dqn_rank_info *r,
                                   dqn_trainer **out) {
    *out = NULL;
    if (!r) return DQN_ERR(DQN_ERR_ARG, "dqn_trainer_create_rank: rank info is NULL");
    if (r->world < 1 || r->rank < 0 || r->rank >= r->world)
        return dqn_error_user(DQN_ERR_ARG, "rank %d of a world of %d (expected 0 <= rank < "
                              "world)", r->rank, r->world);
    if (c->ranks != r->world)
        return dqn_error_user(DQN_ERR_ARG, "a world of %d ranks, but the config's ranks is %d",
                              r->world, c->ranks);
    dqn_config mine = *c;
    mine.seed = dqn_rank_seed(c->seed, (uint32_t)r->rank);
    dqn_trainer *t;
    DQN_TRY(dqn_trainer_create_with(&mine, r, &t));
    /* create drew the weights from the rank's key: every rank starts from the run's instead */
    dqn_status s = dqn_model_init_weights(&t->model, c->seed);
    if (s == DQN_OK) s = t->be->ops->alloc(t->be, (void **)&t->rank_flag, sizeof(float));
    if (s != DQN_OK) {
        dqn_trainer_destroy(t);
        return s;
    }
    *out = t;
    return DQN_OK;
}

dqn_status dqn_trainer_any_rank(dqn_trainer *t, int local, int *any) {
    *any = local != 0;
    if (!t->rank_flag) return DQN_OK;
    dqn_backend *be = t->be;
    float v = *any ? 1.0f : 0.0f;
    DQN_TRY(be->ops->h2d(be, t->rank_flag, &v, sizeof v));
    DQN_TRY(be->ops->allreduce_mean(be, t->rank_flag, 1));
    DQN_TRY(be->ops->d2h(be, &v, t->rank_flag, sizeof v));
    *any = v > 0;
    return DQN_OK;
}
