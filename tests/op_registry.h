/* The op test registry's harness (tests/test_backend_ops.c holds the rows and the driver).
 *
 * A case is one function per op, written once for every backend: it makes its inputs (in_*),
 * its outputs (out_*, poisoned with NaN / -1 so that an unwritten element fails; io_*: an input
 * the op overwrites, compared after the op), calls the op through the table (OP), and then:
 *   - when t->ref is set (the CPU run), writes the reference of each output into want(t, out)
 *     from the pristine inputs (hf / hi: the values as made, whatever the op did to them), with
 *     double accumulators;
 *   - when t->seq is set, calls the sequence the op stands for instead of the op (a fused op
 *     whose contract says bit-identical): the driver then compares every output bit for bit;
 *   - REFUSE: argument checks (CPU run only) that the op returns DQN_ERR_ARG and names itself.
 * Inputs are drawn from the row's op name, the shape's index and the buffer's position, so the
 * same case gives the same values on every backend.
 *
 * A shape is up to 10 ints whose meaning the case's comment gives, plus flags: BIG (only where
 * another backend compares with the CPU; no reference, no sanitizer run), DEVSEQ (the sequence
 * bit for bit on the other backends too), ODD (every float and int32 buffer 4 bytes past the
 * allocation's alignment: for the dense layers, which take sub-tensors at any offset).
 *
 * The finite-difference half (CPU only): an FD case runs the forward on its perturbable inputs
 * (fx) into outputs (fy) whose projection the harness draws; with f->bwd it also runs the
 * backward from those projections (fdy) into the gradients (fg). The harness checks each
 * gradient element (all of a small tensor, 48 random ones of a large) against the central
 * difference of L = sum proj * y in double. */
#ifndef DQN_TEST_OP_REGISTRY_H
#define DQN_TEST_OP_REGISTRY_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "check.h"

/* ---- shapes ---- */

enum { SHAPE_INTS = 10, BIG = 1, DEVSEQ = 2, ODD = 4 };
typedef struct {
    int v[SHAPE_INTS];
    int flags;
} shp;

/* ---- buffers of a case ---- */

typedef enum { T_F32, T_I32, T_U32, T_U64, T_F64, T_U8 } btype;
enum { B_IN = 0, B_OUT = 1 };

typedef struct {
    void *dev;          /* backend memory */
    void *base;         /* the allocation (dev, or 4 bytes before it with ODD) */
    void *host0;        /* the values as made (inputs) or the poison (outputs) */
    size_t n, check_n;  /* elements; of which the first check_n are compared */
    btype type;
    int out;            /* compared after the op */
    const char *name;
    double *want;       /* the reference (ref pass), NULL until want() */
} tbuf;

#define MAX_BUFS 96

typedef struct {
    dqn_backend *be;
    const dqn_ops *ops;
    const int *s;       /* the shape's ints */
    int odd;            /* ODD: buffers off their alignment */
    int ref, seq;
    uint64_t key;       /* input draws: row and shape */
    int nb;
    tbuf b[MAX_BUFS];
    int failed;         /* an op call or a setup step failed: message printed */
    const char *where;  /* "op [shape] on backend", for messages */
} tc;

static uint64_t reg_mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform [0, 1) from (key, buffer, element): the same on every backend */
static double reg_u01(uint64_t key, int buf, size_t i) {
    uint64_t z = reg_mix(key ^ reg_mix((uint64_t)buf * 0x100000001B3ull + 7) ^ ((uint64_t)i << 1));
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static size_t reg_esz(btype t) { return t == T_U64 || t == T_F64 ? 8 : t == T_U8 ? 1 : 4; }

static void *reg_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 8);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static void tfail(tc *t, const char *what, const char *why) {
    CHECK(0, "%s: %s: %s", t->where, what, why);
    t->failed = 1;
}

static tbuf *new_buf(tc *t, btype type, size_t n, int out, const char *name) {
    if (t->nb == MAX_BUFS) {
        fprintf(stderr, "op registry: raise MAX_BUFS\n");
        exit(1);
    }
    tbuf *b = &t->b[t->nb++];
    memset(b, 0, sizeof *b);
    b->type = type, b->n = n, b->check_n = n, b->out = out, b->name = name;
    size_t bytes = n * reg_esz(type), pad = t->odd && reg_esz(type) == 4 ? 4 : 0;
    b->host0 = reg_xmalloc(bytes);
    dqn_status st = t->ops->alloc(t->be, &b->base, bytes + pad ? bytes + pad : 8);
    if (st != DQN_OK || !b->base) {
        fprintf(stderr, "op registry: alloc of %zu bytes failed: %s\n", bytes, dqn_last_error());
        exit(1);
    }
    b->dev = (char *)b->base + pad;
    return b;
}

static void upload(tc *t, tbuf *b) {
    dqn_status st = t->ops->h2d(t->be, b->dev, b->host0, b->n * reg_esz(b->type));
    if (st != DQN_OK) tfail(t, "h2d", dqn_last_error());
}

static tbuf *find_buf(tc *t, const void *dev) {
    for (int k = 0; k < t->nb; k++)
        if (t->b[k].dev == dev) return &t->b[k];
    fprintf(stderr, "op registry: %s: a pointer that no in_/out_ call made\n", t->where);
    exit(1);
}

/* the values an input was made with; edit them, then resync() before the op runs */
static float *hf(tc *t, const void *dev) { return (float *)find_buf(t, dev)->host0; }
static int32_t *hi(tc *t, const void *dev) { return (int32_t *)find_buf(t, dev)->host0; }
static void resync(tc *t, const void *dev) { upload(t, find_buf(t, dev)); }

/* uniform in [lo, hi) */
static float *in_f(tc *t, size_t n, double lo, double hi) {
    int k = t->nb;
    tbuf *b = new_buf(t, T_F32, n, B_IN, NULL);
    float *h = b->host0;
    for (size_t i = 0; i < n; i++) h[i] = (float)(lo + (hi - lo) * reg_u01(t->key, k, i));
    upload(t, b);
    return b->dev;
}

/* post-ReLU: uniform [-hi, hi) through max(., 0), so a share of exact zeros */
static float *in_relu(tc *t, size_t n, double hi) {
    float *p = in_f(t, n, -hi, hi), *h = hf(t, p);
    for (size_t i = 0; i < n; i++) h[i] = h[i] > 0 ? h[i] : 0.0f;
    resync(t, p);
    return p;
}

/* uniform integers in [0, below) */
static int32_t *in_i(tc *t, size_t n, uint32_t below) {
    int k = t->nb;
    tbuf *b = new_buf(t, T_I32, n, B_IN, NULL);
    int32_t *h = b->host0;
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(reg_u01(t->key, k, i) * below);
    upload(t, b);
    return b->dev;
}

/* act [B, D]: act[s, b] uniform below branch b's size */
static int32_t *in_act(tc *t, int B, const dqn_branches *br) {
    int32_t *p = in_i(t, (size_t)B * br->D, 1u << 20), *h = hi(t, p);
    for (int s = 0; s < B; s++)
        for (int b = 0; b < br->D; b++) h[s * br->D + b] %= br->n[b];
    resync(t, p);
    return p;
}

static uint32_t *in_u32(tc *t, uint32_t v) {
    tbuf *b = new_buf(t, T_U32, 1, B_IN, NULL);
    *(uint32_t *)b->host0 = v;
    upload(t, b);
    return b->dev;
}

/* n flags (uint8): 1 with probability p */
static uint8_t *in_u8(tc *t, size_t n, double p) {
    int k = t->nb;
    tbuf *b = new_buf(t, T_U8, n, B_IN, NULL);
    uint8_t *h = b->host0;
    for (size_t i = 0; i < n; i++) h[i] = reg_u01(t->key, k, i) < p;
    upload(t, b);
    return b->dev;
}

/* n 64-bit integers, each v[i] */
static uint64_t *in_u64n(tc *t, size_t n, const uint64_t *v) {
    tbuf *b = new_buf(t, T_U64, n, B_IN, NULL);
    memcpy(b->host0, v, n * sizeof *v);
    upload(t, b);
    return b->dev;
}

static uint64_t *in_u64(tc *t, uint64_t v) {
    tbuf *b = new_buf(t, T_U64, 1, B_IN, NULL);
    *(uint64_t *)b->host0 = v;
    upload(t, b);
    return b->dev;
}

/* an output: every element poisoned (NaN floats, -1 integers), the first check_n compared */
static void *out_part(tc *t, btype type, const char *name, size_t n, size_t check_n) {
    tbuf *b = new_buf(t, type, n, B_OUT, name);
    memset(b->host0, 0xFF, n * reg_esz(type));
    b->check_n = check_n;
    upload(t, b);
    return b->dev;
}
static float *out_f(tc *t, const char *name, size_t n) { return out_part(t, T_F32, name, n, n); }
static int32_t *out_i(tc *t, const char *name, size_t n) { return out_part(t, T_I32, name, n, n); }

/* an input the op overwrites (in place, accumulated): compared after the op */
static float *io_f(tc *t, const char *name, size_t n, double lo, double hi) {
    float *p = in_f(t, n, lo, hi);
    tbuf *b = find_buf(t, p);
    b->out = 1, b->name = name;
    return p;
}
static uint64_t *io_u64(tc *t, const char *name, uint64_t v) {
    uint64_t *p = in_u64(t, v);
    tbuf *b = find_buf(t, p);
    b->out = 1, b->name = name;
    return p;
}
/* an input, then an output: one whose initial values matter to the reference */
static void make_out(tc *t, const void *dev, const char *name) {
    tbuf *b = find_buf(t, dev);
    b->out = 1, b->name = name;
}

/* scratch the op needs but no check reads */
static float *tmp_f(tc *t, size_t n) { return in_f(t, n, 0, 0); }

/* the reference of an output (ref pass only), zero-filled */
static double *want(tc *t, const void *dev) {
    tbuf *b = find_buf(t, dev);
    if (!b->out) {
        fprintf(stderr, "op registry: %s: want() of an input\n", t->where);
        exit(1);
    }
    if (!b->want) b->want = calloc(b->n ? b->n : 1, sizeof(double));
    if (!b->want) exit(1);
    return b->want;
}

/* the reference is the input as made (ops that must leave a buffer alone, or copy it) */
static void want_same(tc *t, const void *dev) {
    tbuf *b = find_buf(t, dev);
    double *w = want(t, dev);
    for (size_t i = 0; i < b->n; i++)
        w[i] = b->type == T_F32   ? ((float *)b->host0)[i]
               : b->type == T_I32 ? ((int32_t *)b->host0)[i]
               : b->type == T_U32 ? ((uint32_t *)b->host0)[i]
               : b->type == T_F64 ? ((double *)b->host0)[i]
               : b->type == T_U8  ? ((uint8_t *)b->host0)[i]
                                  : (double)((uint64_t *)b->host0)[i];
}

static int tcall(tc *t, const char *op, dqn_status st) {
    if (st == DQN_OK) return 1;
    char msg[256];
    snprintf(msg, sizeof msg, "%s -> %s", op, dqn_status_str(st));
    tfail(t, msg, dqn_last_error());
    return 0;
}
#define OP(t, name, ...) tcall((t), #name, (t)->ops->name((t)->be, __VA_ARGS__))

/* the op refuses these arguments with DQN_ERR_ARG and a message that names it */
#define REFUSE(t, name, ...)                                                                   \
    do {                                                                                       \
        dqn_status st_ = (t)->ops->name((t)->be, __VA_ARGS__);                                 \
        CHECK(st_ == DQN_ERR_ARG && strstr(dqn_last_error(), #name) != NULL,                  \
              "%s: %s(%s) gave %s (%s), want DQN_ERR_ARG naming the op", (t)->where, #name,   \
              #__VA_ARGS__, dqn_status_str(st_), dqn_last_error());                            \
    } while (0)

static void free_bufs(tc *t) {
    for (int k = 0; k < t->nb; k++) {
        t->ops->free(t->be, t->b[k].base);
        free(t->b[k].host0);
        free(t->b[k].want);
    }
    t->nb = 0;
}

/* ---- the finite-difference harness (CPU backend: its memory is host memory) ---- */

#define FD_TOL 1e-3
#define FD_SAMPLES 48
#define FD_MAX 32

typedef struct {
    float *p;
    size_t n;
    float *proj;   /* fy: the projection; fx: the gradient the backward gave (fg) */
} fdbuf;

typedef struct {
    dqn_backend *be;
    const dqn_ops *ops;
    const int *s;
    int bwd, first;
    float h;        /* the step (a case may set it on its first call) */
    uint64_t key;
    int nx, ny, nt, nbw;   /* this call's buffers so far */
    int cx, cy, ct;        /* buffers made */
    fdbuf x[FD_MAX], y[FD_MAX], tmp[FD_MAX], bw[FD_MAX];
    const char *names[FD_MAX];
    int failed;
    const char *where;
} fc;

static float *fd_alloc(fdbuf *b, size_t n) {
    b->p = reg_xmalloc(n * sizeof(float));
    b->n = n;
    b->proj = NULL;
    return b->p;
}

/* |x| in [lo, hi] with a random sign: never within lo of a kink at 0 */
static float *fx_in(fc *f, const char *name, size_t n, double lo, double hi) {
    if (f->nx == f->cx) {   /* the first call makes the buffers; later calls find them */
        if (f->cx == FD_MAX) exit(1);
        int k = f->cx++;
        float *p = fd_alloc(&f->x[k], n);
        for (size_t i = 0; i < n; i++) {
            double m = lo + (hi - lo) * reg_u01(f->key, 2 * k, i);
            p[i] = (float)(reg_u01(f->key, 2 * k + 1, i) < 0.5 ? m : -m);
        }
        f->names[k] = name;
    }
    return f->x[f->nx++].p;
}
/* a perturbed input */
#define fx(f, name, n, lo, hi) fx_in((f), (name), (n), (lo), (hi))

/* a forward output, part of the loss through its projection (uniform +-[0.1, 1]) */
static float *fy_proj(fc *f, size_t n, int ones) {
    if (f->ny == f->cy) {
        if (f->cy == FD_MAX) exit(1);
        int k = f->cy++;
        fd_alloc(&f->y[k], n);
        float *r = reg_xmalloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            double m = 0.1 + 0.9 * reg_u01(f->key, 1000 + 2 * k, i);
            r[i] = ones ? 1.0f : (float)(reg_u01(f->key, 1001 + 2 * k, i) < 0.5 ? m : -m);
        }
        f->y[k].proj = r;
    }
    return f->y[f->ny++].p;
}
static float *fy(fc *f, size_t n) { return fy_proj(f, n, 0); }
/* a scalar loss the op computes itself: projection 1 */
static float *fy1(fc *f, size_t n) { return fy_proj(f, n, 1); }

/* scratch (saved forward values, buffers of the forward no loss reads) */
static float *ftmp(fc *f, size_t n) {
    if (f->nt == f->ct) {
        if (f->ct == FD_MAX) exit(1);
        float *p = fd_alloc(&f->tmp[f->ct++], n);
        for (size_t i = 0; i < n; i++) p[i] = 0.0f;
    }
    return f->tmp[f->nt++].p;
}

static fdbuf *fd_find(fdbuf *v, int n, const float *p) {
    /* n: the buffers made */
    for (int k = 0; k < n; k++)
        if (v[k].p == p) return &v[k];
    fprintf(stderr, "op registry: an FD pointer that no fx/fy call made\n");
    exit(1);
}

/* backward only: a fresh copy of y's projection (dL/dy), which the backward may overwrite */
static float *fdy(fc *f, const float *y) {
    fdbuf *b = fd_find(f->y, f->cy, y);
    float *p = fd_alloc(&f->bw[f->nbw++], b->n);
    memcpy(p, b->proj, b->n * sizeof(float));
    return p;
}

/* backward only: x's gradient buffer (poisoned), or a buffer of n starting at zero when the
 * backward accumulates into it */
static float *fg_fill(fc *f, const float *x, float v) {
    fdbuf *b = fd_find(f->x, f->cx, x);
    float *p = fd_alloc(&f->bw[f->nbw++], b->n);
    for (size_t i = 0; i < b->n; i++) p[i] = v;
    b->proj = p;
    return p;
}
static float *fg(fc *f, const float *x) { return fg_fill(f, x, NAN); }
static float *fg0(fc *f, const float *x) { return fg_fill(f, x, 0.0f); }
/* backward only: a buffer of n floats for an intermediate gradient (poisoned) */
static float *fbtmp(fc *f, size_t n) {
    float *p = fd_alloc(&f->bw[f->nbw++], n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static int fcall(fc *f, const char *op, dqn_status st) {
    if (st == DQN_OK) return 1;
    CHECK(0, "%s: %s -> %s: %s", f->where, op, dqn_status_str(st), dqn_last_error());
    f->failed = 1;
    return 0;
}
#define FOP(f, name, ...) fcall((f), #name, (f)->ops->name((f)->be, __VA_ARGS__))

static void fd_free(fc *f) {
    for (int k = 0; k < f->cx; k++) free(f->x[k].p);
    for (int k = 0; k < f->cy; k++) free(f->y[k].p), free(f->y[k].proj);
    for (int k = 0; k < f->ct; k++) free(f->tmp[k].p);
    for (int k = 0; k < f->nbw; k++) free(f->bw[k].p);
    f->nx = f->ny = f->nt = f->nbw = f->cx = f->cy = f->ct = 0;
}
#endif
