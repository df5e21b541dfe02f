/* problem.h — validation of kljit_problem and the plan geometry derived from it (no GPU). */
#ifndef KLJIT_PROBLEM_H
#define KLJIT_PROBLEM_H

#include "spec.h"

/* Is `pb` a valid problem this build supports? KLJIT_SUCCESS, or the status with a sentence
 * naming the field and its value. `who` prefixes the message ("kljit_plan_check"). */
kljit_status prob_validate(const kljit_problem *pb, const char *who);

/* t is a temperature the kernels can represent: in [KLJIT_TEMPERATURE_MIN, _MAX] (kljit.h). */
int prob_temperature_ok(double t);

/* The global vocabulary size (vocab_total, or vocab when unsharded) and whether the problem is
 * one shard of a vocabulary-parallel head (shards > 1, or vocab_total set and != vocab). */
int64_t prob_vocab_total(const kljit_problem *pb);
int prob_sharded(const kljit_problem *pb);

/* The tunable choices of a plan (what wisdom stores). */
typedef struct prob_tuning {
  int64_t chunk_rows;  /* R */
  int threads;         /* row-kernel block size */
  int split;           /* blocks per row */
  int cluster;         /* 0: two-pass row kernels; C: one pass in clusters of C = split blocks */
  int nv;              /* cluster variant: 16-byte vectors per thread held in registers */
  /* (sparse teacher: two-pass rows only; pass 2 and backward run one block per row) */
} prob_tuning;

/* Everything about a plan that follows from the problem and the tuning. */
typedef struct prob_geometry {
  prob_tuning tune;
  int64_t ld;                 /* row stride of the chunk buffers, V rounded up to 8 */
  int64_t ldg;                /* row stride of G in its own elements (2 ld: 16-bit G over fp32) */
  const char *logit, *grad;   /* dtypes of the chunk logits and of G */
  int grad_in_place;          /* G overwrites Z (always, now: same dtype, or 16-bit over fp32) */
  int p2_split;               /* blocks per row of the pass that writes the loss partials */
  int dw_workspace;           /* dW accumulates in an fp32 workspace buffer */
  kspec rows, helpers;        /* the two modules */
} prob_geometry;

/* Heuristic tuning for sm_<arch> with `sm_count` multiprocessors (0: unknown, e.g. precompile).
 * On sm_90 and newer, rows that fit a cluster's registers take the one-pass cluster variant. */
prob_tuning prob_estimate(const kljit_problem *pb, int sm_count, int arch);

/* Geometry and specs for a validated problem and a tuning. */
kljit_status prob_geometry_make(const kljit_problem *pb, const prob_tuning *tune,
                                prob_geometry *g);

/* Workspace layout of one call of `rows` rows in mode `mode` (offsets in bytes; 0 size =
 * absent). The total is what kljit_plan_workspace_size reports. */
typedef struct prob_workspace {
  size_t hdr, lossp, part, z, g, dw, db, check, stats, lt, total;
  size_t lt_size;
} prob_workspace;
prob_workspace prob_workspace_layout(const kljit_problem *pb, const prob_geometry *g,
                                     kljit_mode mode, int64_t rows);

/* "f32" | "bf16" | "f16" for a float dtype. */
const char *prob_dtype_tag(kljit_dtype dt);
size_t prob_dtype_size(kljit_dtype dt);
const char *prob_dtype_name(kljit_dtype dt);

#endif
