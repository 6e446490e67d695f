/* The numerical-health subsystem's tables (SPEC 4): the slots of an update in execution order,
 * the ISV entries, and fault specifications. What a slot checks and when is wired in
 * src/model/model_health.c; the checks themselves are backend ops (ops.def's health_check). */
#ifndef DQN_HEALTH_H
#define DQN_HEALTH_H
#include <stddef.h>
#include <stdint.h>

#include "dqn.h"
#include "health/health_block.h"
#include "model/layout.h"

typedef enum { DQN_HEALTH_OFF = 0, DQN_HEALTH_DETECT = 1, DQN_HEALTH_GUARD = 2 } dqn_health_mode;

/* ISV moving-average rate: v = 0.99 v + 0.01 sample */
#define DQN_ISV_DECAY 0.99f

typedef struct {
    char name[32];
    const char *stage;      /* sample | forward | target | loss | backward | optimizer */
    char buffer[64];        /* what it holds, with its shape */
    size_t n;               /* elements checked per update */
    int guard;              /* a clamp_finite point in guard mode */
    int bound_isv;          /* the ISV entry its bound comes from */
} dqn_slot;

/* Slot and ISV indices; -1 where the architecture has none. */
typedef struct {
    int n_slots, n_isv;
    dqn_slot slot[DQN_HEALTH_MAX_SLOTS];
    char isv[DQN_HEALTH_MAX_ISV][40];
    /* slots */
    int obs, grn_out[DQN_MAX_GRN], phi, z, cat, bn_out, value, adv, Z, y, loss;
    int dZ, d_value, d_adv, d_concat, d_z, d_trunk, grn_din[DQN_MAX_GRN];
    int grad[DQN_MAX_TENSORS];   /* by layout tensor index */
    int grad_norm, params;
    /* ISV entries */
    int i_ln[DQN_MAX_GRN], i_q, i_target, i_loss, i_gnorm;
    int i_rms_dv, i_rms_da, i_rms_dcat, i_rms_dtrunk, i_rms_dtrunk_out;
    int i_scale;                 /* slot s's scale (EMA of max |x|) is i_scale + s */
} dqn_health_table;

/* The slots of one update of a model with layout L, batch B, N online and Nt target taus; split:
 * the online pass splits the bottleneck (no concat buffer: d_concat is then the h half's
 * gradient summed over taus, [B, m], and d_z, the z half's, is a clamp point too). */
dqn_status dqn_health_table_build(dqn_health_table *t, const dqn_layout *L, int B, int N, int Nt,
                                  int split);
int dqn_health_slot_find(const dqn_health_table *t, const char *name);   /* -1 if none */

dqn_status dqn_health_mode_parse(const char *s, dqn_health_mode *out);

/* Fault injection: "SLOT:UPDATE:nan|inf|huge", several joined by ','. */
#define DQN_HEALTH_MAX_FAULTS 128
typedef struct {
    int slot;
    uint64_t at;   /* update counter value (the first update is 0) */
    int kind;      /* 1 nan, 2 inf, 3 huge (1e30) */
} dqn_fault;

/* 1 if spec is a syntactically valid fault list ("" is valid: no faults). */
int dqn_fault_spec_ok(const char *spec);
/* Resolve the slot names of spec against t; errors name the bad item and the valid names. */
dqn_status dqn_fault_parse(const char *spec, const dqn_health_table *t, dqn_fault *out, int *n);
const char *dqn_event_kind_name(uint32_t kind);   /* "nan", "+inf", "-inf", "out of range" */

#endif
