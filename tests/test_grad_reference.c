/* The whole loss and every parameter gradient against an independent JAX implementation
 * (tests/py/iqn_reference.py) on the same weights, inputs and taus, to 1e-4 relative. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "model_fixture.h"

static int write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, bytes, f);
    fclose(f);
    return w == bytes ? 0 : -1;
}

static int dump(const char *dir, const dqn_model *m, const fixture_cfg *f) {
    char path[512];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *j = fopen(path, "w");
    if (!j) return -1;
    fprintf(j, "{\"obs_dim\": %d, \"d\": %d, \"grn_blocks\": %d, \"n_cos\": %d, \"bottleneck\": %d,"
               " \"head_hidden\": %d, \"branches\": [", f->obs, f->d, f->grn, f->n_cos, f->bn,
            f->hidden);
    for (int b = 0; b < f->D; b++) fprintf(j, "%s%d", b ? ", " : "", f->br[b]);
    fprintf(j, "], \"B\": %d, \"N\": %d, \"Nt\": %d, \"K\": %d, \"target_mode\": \"%s\", "
               "\"kappa\": %g, \"head_grad_clip\": %g, \"n_params\": %zu, \"params\": [",
            f->B, f->N, f->Nt, f->K, f->mode == DQN_TARGET_MEAN ? "mean" : "independent",
            (double)f->kappa, (double)f->head_clip, m->L.n_params);
    for (int k = 0; k < m->L.n_tensors; k++) {
        const dqn_tensor *t = &m->L.t[k];
        if (t->cols > 0)
            fprintf(j, "%s{\"name\": \"%s\", \"shape\": [%d, %d], \"offset\": %zu}", k ? ", " : "",
                    t->name, t->rows, t->cols, t->offset);
        else
            fprintf(j, "%s{\"name\": \"%s\", \"shape\": [%d], \"offset\": %zu}", k ? ", " : "",
                    t->name, t->rows, t->offset);
    }
    fprintf(j, "]}\n");
    fclose(j);
    size_t n = m->L.n_params, B = (size_t)f->B, D = (size_t)f->D, A = (size_t)m->L.arch.br.A;
    size_t ny = B * (f->mode == DQN_TARGET_MEAN ? 1 : D) * f->Nt;
    float *w = malloc(B * sizeof *w);
    for (size_t s = 0; s < B; s++) w[s] = 1.0f;
    int rc = write_raw(dir, "params.f32", m->params, n * 4) |
             write_raw(dir, "target.f32", m->target, n * 4) |
             write_raw(dir, "x.f32", m->x, B * f->obs * 4) |
             write_raw(dir, "xn.f32", m->xn, B * f->obs * 4) |
             write_raw(dir, "act.i32", m->act, B * D * 4) | write_raw(dir, "R.f32", m->R, B * 4) |
             write_raw(dir, "disc.f32", m->disc, B * 4) | write_raw(dir, "w.f32", w, B * 4) |
             write_raw(dir, "tau.f32", m->tau, B * f->N * 4) |
             write_raw(dir, "tau_t.f32", m->tau_t, B * f->Nt * 4) |
             write_raw(dir, "tau_k.f32", m->tau_k, B * f->K * 4) |
             write_raw(dir, "loss.f32", m->loss, 4) | write_raw(dir, "grads.f32", m->grads, n * 4) |
             write_raw(dir, "astar.i32", m->astar, B * D * 4) |
             write_raw(dir, "Z.f32", m->f_on.Z, B * f->N * A * 4) |
             write_raw(dir, "y.f32", m->y, ny * 4);
    free(w);
    return rc;
}

int main(void) {
    const char *py = getenv("DQN_PYTHON");
    if (!py) py = ".venv/bin/python";
    static const fixture_cfg cases[] = {
        /* obs d grn ncos bn hid D br B N Nt K mode kappa clip */
        {5, 8, 1, 8, 0, 8, 1, {2}, 6, 5, 6, 4, DQN_TARGET_MEAN, 1.0f, 0.0f, 0},
        {5, 8, 2, 8, 6, 8, 1, {2}, 6, 5, 6, 4, DQN_TARGET_MEAN, 1.0f, 0.0f, 0},
        {5, 8, 1, 8, 0, 8, 3, {3, 5, 5}, 6, 5, 6, 4, DQN_TARGET_MEAN, 1.0f, 0.0f, 0},
        {5, 8, 2, 8, 6, 8, 3, {3, 5, 5}, 6, 5, 6, 4, DQN_TARGET_MEAN, 1.0f, 0.0f, 0},
        {5, 8, 1, 8, 0, 8, 3, {3, 5, 5}, 6, 5, 6, 4, DQN_TARGET_INDEPENDENT, 1.0f, 0.0f, 0},
        {5, 8, 2, 8, 6, 8, 3, {3, 5, 5}, 6, 5, 6, 4, DQN_TARGET_INDEPENDENT, 0.5f, 0.0f, 0},
        {4, 16, 0, 16, 8, 12, 2, {2, 3}, 8, 8, 4, 8, DQN_TARGET_MEAN, 1.0f, 0.0f, 0},
        /* head-gradient clip active (the norms here are ~0.1-1) */
        {5, 8, 2, 8, 6, 8, 3, {3, 5, 5}, 6, 5, 6, 4, DQN_TARGET_MEAN, 1.0f, 0.05f, 0},
        {5, 8, 1, 8, 0, 8, 1, {2}, 6, 5, 6, 4, DQN_TARGET_INDEPENDENT, 1.0f, 0.02f, 0},
        /* K == N: x and x' in one online pass */
        {5, 8, 2, 8, 6, 8, 3, {3, 5, 5}, 6, 5, 6, 5, DQN_TARGET_MEAN, 1.0f, 0.05f, 0},
        {5, 8, 1, 8, 0, 8, 3, {3, 5, 5}, 6, 5, 6, 5, DQN_TARGET_INDEPENDENT, 1.0f, 0.0f, 0},
        /* the split bottleneck (W_bn's h half on B rows), with and without the joint pass */
        {5, 8, 2, 8, 6, 8, 3, {3, 5, 5}, 6, 5, 6, 5, DQN_TARGET_MEAN, 1.0f, 0.05f, 1},
        {4, 16, 0, 16, 8, 12, 2, {2, 3}, 8, 8, 4, 6, DQN_TARGET_INDEPENDENT, 0.5f, 0.0f, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const fixture_cfg *f = &cases[k];
        dqn_backend *be = NULL;
        dqn_model m;
        CHECK_OK(fixture_make(&be, &m, f));
        CHECK_OK(dqn_model_loss_grad(&m));
        char dir[] = "/tmp/dqn-gradref-XXXXXX";
        CHECK(mkdtemp(dir) != NULL, "mkdtemp");
        CHECK(dump(dir, &m, f) == 0, "dump to %s", dir);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s tests/py/iqn_reference.py check %s --rtol 1e-4", py, dir);
        printf("case %zu: bottleneck %d%s, grn %d, branches %d, %s, clip %g, K %s N\n", k, f->bn,
               f->split ? " (split)" : "", f->grn, f->D,
               f->mode == DQN_TARGET_MEAN ? "mean" : "independent", (double)f->head_clip,
               f->K == f->N ? "==" : "!=");
        fflush(stdout);
        int rc = system(cmd);
        CHECK(rc == 0, "case %zu: JAX reference disagrees (dump kept in %s)", k, dir);
        if (rc == 0) {
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
        }
        dqn_model_destroy(&m);
        be->ops->destroy(be);
    }
    return check_finish("test_grad_reference");
}
