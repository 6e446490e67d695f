/* Where one update's GPU time goes: every kernel of the captured update graph with its start and
 * end inside the replay, from CUPTI's activity records over many replays (medians per kernel),
 * in the last replay's start order; then the replay's span (its first kernel's start to its last
 * end: without the launch's host time that bench_update's figure holds), the time no kernel ran
 * (the chain's launch and dependency latency) and the time two or more ran at once (the side
 * branches at work). ncu times each kernel alone; this shows them as the graph runs them.
 * usage: bench_timeline [cuda|cuda:tf32] [cartpole|seed] [off|detect|guard] [B] [replays]
 *                       [own_gemm_macs=X] [iqn_embed_elems=X] [trunk_rows=X] [side_priority=0|1]
 * (defaults: cuda cartpole off 256 200; the thresholds as bench_update's). DQN_TIMELINE_CSV=FILE
 * also writes each kernel of each replay (replay, start and end in ns from the replay's first
 * start, channel, node, name).
 * Needs a GPU and a build with CUPTI (the Makefile links it where the CUDA toolkit has it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !DQN_HAVE_CUPTI
int main(void) {
    fprintf(stderr, "bench_timeline: built without CUPTI (it needs CUDA=1 and a toolkit with "
                    "cupti.h and libcupti.so)\n");
    return 2;
}
#else
#include <cupti.h>

#include "bench_model.h"

typedef struct {
    uint64_t start, end, node;
    uint32_t channel;
    int grid, block;
    char name[72];
} krec;

static krec *recs;
static size_t n_recs, cap_recs;
static int rec_oom;

/* "_Z7k_sgemmILi32ELi32EEv7sg_args" -> "k_sgemm<32,32>": the identifier and its integer template
 * arguments, enough to tell the kernels apart */
static void short_name(const char *m, char *out, size_t n) {
    size_t o = 0;
    if (strncmp(m, "_Z", 2) != 0 || !(m[2] >= '0' && m[2] <= '9')) {
        snprintf(out, n, "%s", m);
        return;
    }
    const char *p = m + 2;
    long len = strtol(p, (char **)&p, 10);
    for (long i = 0; i < len && *p && o + 1 < n; i++) out[o++] = *p++;
    if (*p == 'I') {
        p++;
        char sep = '<';
        while (*p == 'L' && o + 16 < n) {
            p++;
            while (*p && !(*p >= '0' && *p <= '9') && *p != 'n' && *p != 'E') p++;   /* the type */
            if (*p == 'n') { out[o++] = sep; out[o++] = '-'; p++; sep = 0; }
            else { out[o++] = sep; }
            while (*p >= '0' && *p <= '9' && o + 2 < n) out[o++] = *p++;
            sep = ',';
            if (*p == 'E') p++;
        }
        if (sep == ',' && o + 1 < n) out[o++] = '>';
    }
    out[o] = 0;
}

static void CUPTIAPI buf_request(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = (size_t)8 << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buf_complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                  size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (buf && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        if (n_recs == cap_recs) {
            size_t nc = cap_recs ? 2 * cap_recs : 65536;
            krec *nr = realloc(recs, nc * sizeof *nr);
            if (!nr) {
                rec_oom = 1;
                break;
            }
            recs = nr, cap_recs = nc;
        }
        krec *o = &recs[n_recs++];
        o->start = k->start, o->end = k->end, o->node = k->graphNodeId;
        o->channel = k->channelID;
        o->grid = k->gridX * k->gridY * k->gridZ, o->block = k->blockX * k->blockY * k->blockZ;
        short_name(k->name ? k->name : "?", o->name, sizeof o->name);
    }
    free(buf);
}

static int by_start(const void *a, const void *b) {
    const krec *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int by_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n) {
    qsort(v, n, sizeof *v, by_u64);
    return n ? v[n / 2] : 0;
}

/* the replay's kernels k[0, n) in start order: its span, the time none ran, the time >= 2 ran */
static void replay_times(const krec *k, size_t n, uint64_t *span, uint64_t *idle, uint64_t *multi) {
    uint64_t t0 = k[0].start, hi = t0, busy = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += k[i].end - k[i].start;
        if (k[i].start > hi) hi = k[i].start;
        if (k[i].end > hi) busy += k[i].end - hi, hi = k[i].end;
    }
    *span = hi - t0;
    *idle = *span - busy;
    *multi = sum - busy;   /* time counted twice or more: at least that much ran concurrently */
}

#define CUPTI_TRY(call)                                                                          \
    do {                                                                                         \
        CUptiResult r_ = (call);                                                                 \
        if (r_ != CUPTI_SUCCESS) {                                                               \
            const char *m_ = NULL;                                                               \
            cuptiGetResultString(r_, &m_);                                                       \
            fprintf(stderr, "bench_timeline: %s: %s (hint: CUPTI needs a GPU and a driver that " \
                            "allows tracing)\n", #call, m_ ? m_ : "?");                          \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

static int fail(const char *what, dqn_status s) {
    fprintf(stderr, "bench_timeline: %s: %s: %s\n", what, dqn_status_str(s), dqn_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "cuda";
    const char *model = argc > 2 ? argv[2] : "cartpole";
    dqn_health_mode health = DQN_HEALTH_OFF;
    if (argc > 3 && dqn_health_mode_parse(argv[3], &health) != DQN_OK) {
        fprintf(stderr, "bench_timeline: health mode '%s': want off, detect or guard\n", argv[3]);
        return 2;
    }
    const int B = argc > 4 ? atoi(argv[4]) : 256, replays = argc > 5 ? atoi(argv[5]) : 200;
    dqn_cuda_tunables tune = DQN_CUDA_TUNABLES_DEFAULT;
    int tuned = 0, bad = 0;
    for (int i = 6; i < argc; i++) bad |= !bench_tune_parse(argv[i], &tune, &tuned);
    if (strncmp(dev, "cuda", 4) != 0 || B < 1 || replays < 1 || bad) {
        fprintf(stderr, "usage: bench_timeline [cuda|cuda:tf32] [cartpole|seed] [off|detect|guard] "
                        "[B] [replays] [own_gemm_macs=X] [iqn_embed_elems=X] [trunk_rows=X] "
                        "[side_priority=0|1]\n");
        return 2;
    }
    /* before the graph exists: CUPTI traces the kernels of graphs instantiated after this */
    CUPTI_TRY(cuptiActivityRegisterCallbacks(buf_request, buf_complete));
    CUPTI_TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    const int tf32 = strcmp(dev, "cuda:tf32") == 0;
    dqn_backend *be = NULL;
    dqn_status s = dqn_backend_cuda_create(&be, 0, tf32 ? DQN_MATH_TF32 : DQN_MATH_FP32);
    if (s) return fail("backend", s);
    if (tuned) *dqn_backend_cuda_tunables(be) = tune;
    const dqn_arch a = bench_arch(model);
    bench_update_run run;
    if ((s = bench_run_make(&run, be, &a, B, 0, health))) return fail("model and replay", s);
    /* the replays one at a time, each between two CUPTI timestamps (the records' clock): a
     * replay's kernels are those that start between its two */
    const int warm = 20, total = warm + replays;
    uint64_t *t_launch = malloc(sizeof(uint64_t) * (size_t)(total + 1));
    if (!t_launch) return fail("timestamps", DQN_ERR(DQN_ERR_NOMEM, "bench_timeline"));
    for (int i = 0; i < total; i++) {
        CUPTI_TRY(cuptiGetTimestamp(&t_launch[i]));
        if ((s = dqn_model_update(&run.m, &run.v))) return fail("update", s);
        if ((s = be->ops->sync(be))) return fail("sync", s);
    }
    CUPTI_TRY(cuptiGetTimestamp(&t_launch[total]));
    CUPTI_TRY(cuptiActivityFlushAll(1));
    CUPTI_TRY(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    if (rec_oom || n_recs == 0) {
        fprintf(stderr, "bench_timeline: %s\n", rec_oom ? "out of memory for the records"
                                                        : "CUPTI recorded no kernel");
        return 1;
    }
    /* groups: the timed replays' kernels (first[g], first[g + 1]) in start order */
    qsort(recs, n_recs, sizeof *recs, by_start);
    const size_t ng = (size_t)replays;
    size_t *first = malloc(sizeof(size_t) * (ng + 1));
    uint64_t *col = malloc(sizeof(uint64_t) * (ng + 1) * 5);
    if (!first || !col) return fail("groups", DQN_ERR(DQN_ERR_NOMEM, "bench_timeline"));
    size_t at = 0;
    for (size_t g = 0; g <= ng; g++) {
        while (at < n_recs && recs[at].start < t_launch[warm + g]) at++;
        first[g] = at;
    }
    if (first[ng] == first[ng - 1]) {
        fprintf(stderr, "bench_timeline: no kernel recorded in the last replay\n");
        return 1;
    }
    const size_t nk = first[ng] - first[ng - 1];   /* the last replay's kernels */
    size_t same = 0;
    for (size_t g = 0; g < ng; g++) same += first[g + 1] - first[g] == nk;
    /* a kernel across replays: by its graph node where CUPTI names every node of the last
     * replay apart, else by its rank in start order (the graph's kernels are the same every
     * replay); medians of start and end from the replay's first start */
    int by_node = 1;
    const krec *last = &recs[first[ng - 1]];
    for (size_t j = 0; j < nk && by_node; j++)
        for (size_t q = 0; q <= j && by_node; q++)
            by_node = last[j].node != 0 && (q == j || last[q].node != last[j].node);
    uint64_t *st = col + (ng + 1), *en = st + (ng + 1), *sp = en + (ng + 1), *id = sp + (ng + 1);
    FILE *csv = NULL;
    const char *cpath = getenv("DQN_TIMELINE_CSV");
    if (cpath && *cpath && !(csv = fopen(cpath, "w")))
        fprintf(stderr, "bench_timeline: cannot write %s\n", cpath);
    if (csv) fprintf(csv, "replay,rank,start_ns,end_ns,channel,node,grid,block,name\n");
    char tn[160];
    bench_tune_print(tn, sizeof tn, &tune, tuned);
    printf("timeline %s model=%s health=%s B=%d: %zu replays of %zu kernels (%zu with that count; "
           "matched by %s)%s%s\n",
           dev, model, argc > 3 ? argv[3] : "off", B, ng, nk, same,
           by_node ? "graph node" : "rank", tuned ? "; " : "", tn);
    printf("%4s %9s %9s %8s %7s %6s %5s  %s\n", "#", "start_us", "end_us", "dur_us", "channel",
           "grid", "block", "kernel");
    for (size_t j = 0; j < nk; j++) {
        size_t n = 0;
        for (size_t g = 0; g < ng; g++) {
            if (first[g + 1] - first[g] != nk) continue;
            const krec *k = &recs[first[g] + j];
            for (size_t q = 0; by_node && q < nk; q++)
                if (recs[first[g] + q].node == last[j].node) k = &recs[first[g] + q];
            st[n] = k->start - recs[first[g]].start;
            en[n] = k->end - recs[first[g]].start;
            col[n] = k->end - k->start;
            n++;
        }
        const krec *k = &last[j];
        const uint64_t ms = median(st, n), me = median(en, n), md = median(col, n);
        printf("%4zu %9.2f %9.2f %8.2f %7u %6d %5d  %s\n", j, ms * 1e-3, me * 1e-3, md * 1e-3,
               k->channel, k->grid, k->block, k->name);
    }
    size_t n = 0;
    for (size_t g = 0; g < ng; g++) {
        const krec *k = &recs[first[g]];
        const size_t c = first[g + 1] - first[g];
        if (c == 0) continue;
        replay_times(k, c, &sp[n], &id[n], &col[n]);
        n++;
        for (size_t j = 0; csv && j < c; j++)
            fprintf(csv, "%zu,%zu,%llu,%llu,%u,%llu,%d,%d,%s\n", g, j,
                    (unsigned long long)(k[j].start - k[0].start),
                    (unsigned long long)(k[j].end - k[0].start), k[j].channel,
                    (unsigned long long)k[j].node, k[j].grid, k[j].block, k[j].name);
    }
    const uint64_t span = median(sp, n), idle = median(id, n), multi = median(col, n);
    printf("timeline %s model=%s health=%s B=%d: span %.2f us, no kernel running %.2f us "
           "(%.0f%%), two or more running %.2f us (medians of %zu replays)\n",
           dev, model, argc > 3 ? argv[3] : "off", B, span * 1e-3, idle * 1e-3,
           span ? 100.0 * (double)idle / (double)span : 0.0, multi * 1e-3, n);
    if (csv) fclose(csv);
    free(first);
    free(t_launch);
    free(col);
    free(recs);
    bench_run_free(&run);
    be->ops->destroy(be);
    return 0;
}
#endif
