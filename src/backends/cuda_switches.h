/* The CUDA backend's tunables: each default, with why it is what it is, and the DQN_CUDA_*
 * environment switch that overrides it when a backend is made (for A/B runs on the GPU; none is
 * needed in use). One table (cuda_switches.c) reads, checks and describes them; plain C, so that
 * the CPU tests hold the table to its contract. */
#ifndef DQN_CUDA_SWITCHES_H
#define DQN_CUDA_SWITCHES_H
#include <stddef.h>

#include "core/error.h"

/* Where a split-K algorithm's second node costs more than it saves: fp32, K and N at most 128,
 * at most this many multiply-adds (measured on the H200: the cartpole model at B = 32 14% faster;
 * applied to every GEMM up to 2^27 multiply-adds it cost the seed model, whose GEMMs are 256
 * wide, 4-15% and TF32 cartpole at B = 4096 12%, so cuBLAS's first choice stays there) */
#define GEMM_ONE_KERNEL_MACS ((double)(1 << 27))
#define GEMM_ONE_KERNEL_WIDTH 128
#define GEMM_HEURISTICS 16   /* cublasLt candidates looked at (for one without split-K, or a pick) */
/* heads_fwd from this many elements of a hidden half (R x H): 2 GEMMs + combine (3 nodes) beat the
 * warp kernel's per-row work (measured: seed B = 256, 16384 x 256, gains 26 us; cartpole B = 256,
 * 16384 x 64, loses 3 us) */
#define HF_GEMM_ELEMS ((long)1 << 21)
/* A layer's weight gradient goes to the side branch beside the backward's chain up to this many
 * multiply-adds (side_dw): every one (measured on the H200 against none: cartpole B = 32 / 256
 * / 4096 and every seed size faster, cartpole B = 1024 0.327 -> 0.380 ms slower; 2^25 measured
 * 0.321 there but slower on the seed model, and has not run with the tests yet: docs/gpu-notes.md,
 * "Open items") */
#define SIDE_DW_MACS 1e30
/* trunk_fwd in one kernel (cuda_trunk.cu) up to this many rows */
#define TRUNK_ROWS 2048
/* iqn_embed_fwd in one kernel from this many elements of z (R x d); below, its three ops */
#define IQN_EMBED_ELEMS ((double)(1 << 22))
/* Own GEMM kernels (cuda_sgemm.cu) up to this many multiply-adds (fp32, layers at most
 * OWN_GEMM_WIDTH wide: cuda_gemm.cu), cuBLAS above */
#define OWN_GEMM_MACS ((double)(1 << 25))
/* ... and K, N at most this (the seed model's 256-wide layers ran 8-22% slower on them in the
 * H200, measured before the split tail and epilogue loads) */
#define OWN_GEMM_WIDTH 128
/* In TF32 math the own kernels (fp32, closer to the exact product than TF32) may still run the
 * GEMMs up to this many multiply-adds, where TF32 cannot shorten a latency-bound GEMM: 2^24 takes
 * all of the cartpole model's at B = 32, whose fp32 update (own kernels) took 0.086 ms on the H200
 * against 0.096 with TF32 cuBLAS, and its trunk at B = 256 (trunk_fwd). Off
 * (cuBLAS's TF32 at every size) until an H200 has run it. */
#define OWN_TF32_MACS 0.0

/* The values a backend runs with (cuda_impl.sw). */
typedef struct {
    int pdl;                  /* programmatic dependent launch (on sm_90 and later) */
    int gemm_splitk;          /* cublasLt's first-ranked algorithm even when it is split-K */
    int side;                 /* side branches (0: the side lane is the main one) */
    int side_prio;            /* main lane first (stream priorities kept per graph node) */
    int side_leaf;            /* ops finish their leaf outputs on an idle side lane */
    int fused_targets;        /* targets_huber in one kernel */
    int trunk_rows;           /* trunk_fwd in one kernel up to this many rows */
    int own_gemm_width;       /* own GEMMs for K and N up to this */
    int health_stage_parts;   /* a check with more partials is reduced by its own last block */
    int gemm_one_width;       /* GEMMs without split-K: K and N up to this ... */
    int grn_warps, grn_parts; /* grn_ln_gate_bwd's warps a block and most blocks (0: its own) */
    int gemm_pick;            /* cublasLt's candidate of this rank (0: its first) */
    int sg_split;             /* own dW GEMMs: blocks a multiprocessor to split toward (0: none) */
    int sg_tile;              /* own GEMMs' tile: 32, 64, or 0 (by the grid's size) */
    int iqn_embed;            /* iqn_embed_fwd in one kernel: 0 never, 1 fp32 math, 2 also TF32 */
    int side_sms;             /* the side lane's cuBLAS picks kernels for this many SMs (0: all) */
    long heads_gemm_elems;    /* heads_fwd through cuBLAS from R x H this large */
    double own_gemm_macs;     /* own GEMM kernels up to this many multiply-adds */
    double own_dw_macs;       /* the same for the dW GEMMs (default: own_gemm_macs) */
    double own_tf32_macs;     /* in TF32 math, own kernels up to this */
    double gemm_one_macs;     /* ... and up to this many multiply-adds */
    double iqn_embed_elems;   /* iqn_embed_fwd's one kernel from this many elements of z */
    double side_dw_macs;      /* weight gradients on the side branch up to this */
} dqn_cuda_switches;

/* One row of the table: the variable, where its value goes, its default and range, what it does. */
typedef enum { DQN_SW_BOOL, DQN_SW_INT, DQN_SW_LONG, DQN_SW_DOUBLE } dqn_sw_kind;
typedef struct {
    const char *var;          /* the environment variable */
    dqn_sw_kind kind;
    size_t offset;            /* in dqn_cuda_switches */
    double def, lo, hi;       /* default, and the range a value must lie in */
    const char *help;
} dqn_cuda_switch;

extern const dqn_cuda_switch dqn_cuda_switch_table[];
extern const int dqn_cuda_switch_count;

/* Every default, then each switch that get(var) returns set (an empty string is unset). A value
 * that does not parse whole as its kind, or lies outside its range (for the tile: 0, 32 or 64),
 * fails with DQN_ERR_ARG naming the variable and the value; *sw then holds the defaults. get is
 * getenv in use. */
dqn_status dqn_cuda_switches_read(dqn_cuda_switches *sw, char *(*get)(const char *var));

/* "VAR=value ..." of the switches whose value is not the default, into buf (n bytes, always
 * terminated); "" when none. Returns the length it wanted. */
size_t dqn_cuda_switches_describe(const dqn_cuda_switches *sw, char *buf, size_t n);

#endif
