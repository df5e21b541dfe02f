/* SPDX-License-Identifier: Apache-2.0 */
/* problem.h — validation of kljit_problem and the plan geometry derived from it (no GPU). */
#ifndef KLJIT_PROBLEM_H
#define KLJIT_PROBLEM_H

#include "kiface.h"
#include "spec.h"

/* A caller's problem of any size from KLJIT_PROBLEM_MIN_SIZE up, copied into *out (a struct of
 * this library's size: fields the caller's struct lacks take KLJIT_PROBLEM_INIT's values) and
 * validated (prob_validate). A larger struct is accepted when every byte this library does not
 * know is zero. Every public entry point taking a kljit_problem reads it through this. */
kljit_status prob_import(const kljit_problem *user, const char *who, kljit_problem *out);

/* Is `pb` a valid problem this build supports? KLJIT_SUCCESS, or the status with a sentence
 * naming the field and its value. `who` prefixes the message ("kljit_plan_check"). */
kljit_status prob_validate(const kljit_problem *pb, const char *who);

/* t is a temperature the kernels can represent: in [KLJIT_TEMPERATURE_MIN, _MAX] (kljit.h). */
int prob_temperature_ok(double t);

/* The global vocabulary size (vocab_total, or vocab when unsharded) and whether the problem is
 * one shard of a vocabulary-parallel head (shards > 1, or vocab_total set and != vocab). */
int64_t prob_vocab_total(const kljit_problem *pb);
int prob_sharded(const kljit_problem *pb);

/* A dense teacher's columns (teacher_vocab, or vocab) and row stride (teacher_ld, or those
 * columns), and whether the divergence is the forward KL (FORWARD_KL, JSD with beta = 0,
 * SKEW_FORWARD_KL with alpha = 0). */
int64_t prob_teacher_vocab(const kljit_problem *pb);
int64_t prob_teacher_ld(const kljit_problem *pb);
int prob_is_forward_kl(const kljit_problem *pb);
/* The dense rows' DIV parameter: "reverse" (REVERSE_KL, JSD with beta = 1, SKEW_REVERSE_KL
 * with alpha = 0), "jsd", "tvd", "skew_forward", "skew_reverse", or NULL (the forward KL, JSD
 * with beta = 0, SKEW_FORWARD_KL with alpha = 0). */
const char *prob_divergence_rows(const kljit_problem *pb);

/* The tunable choices of a plan (what wisdom stores). */
/* One tuned GEMM of a plan's chunk loop (gemm_algo.c): the GEMM it serves (a gemm_kind, the
 * rows of the chunk, beta zero or not), the cuBLASLt version it was measured with, and either
 * a cuBLASLt algorithm (opaque data, meaningful only to that version: cublasLtMatmulAlgo_t's
 * words) or, jit = 1, a variant of the generated sm_90a family (tile columns, warpgroups,
 * stages, raster, cluster, schedule, epilogue: gemm_sm90.h; lt_version 0: unversioned). */
enum { PROB_GEMM_CHOICES = 4, PROB_GEMM_ALGO_WORDS = 8 };
typedef struct prob_gemm_choice {
  int used;
  int kind;
  int beta_zero;
  int64_t n;
  uint64_t lt_version;
  uint64_t algo[PROB_GEMM_ALGO_WORDS];
  int jit, bn, consumers, stages, cluster;
  char raster;
  char schedule; /* generated: 'c' (or 0) cooperative, 'p' pingpong (jgemm_variant.schedule) */
  char epilogue; /* generated: 'd' (or 0) direct, 's' staged (jgemm_variant.epilogue) */
  int tweaks;    /* generated: KSPEC_GEMM_* bits (jgemm_variant.tweaks) */
  int e16;       /* generated logits GEMM: E16 (flag 'e': the chunk as fp16 scores, recipe.c) */
} prob_gemm_choice;

typedef struct prob_tuning {
  int64_t chunk_rows;  /* R */
  int threads;         /* row-kernel block size */
  int split;           /* blocks per row */
  int cluster;         /* 0: two-pass row kernels; C: one pass in clusters of C = split blocks */
  int nv;              /* cluster variant: 16-byte vectors per thread held in registers */
  /* (sparse teacher: two-pass rows only; pass 2 and backward run one block per row) */
  prob_gemm_choice gemm[PROB_GEMM_CHOICES]; /* tuned GEMMs (logits, dX, dW's first and
                                             * accumulating chunks); none: heuristic */
} prob_tuning;

/* Everything about a plan that follows from the problem and the tuning (recipe.c makes it). */
typedef struct prob_geometry {
  prob_tuning tune;
  int64_t ld;                 /* row stride of the chunk buffers, V rounded up to 8 */
  int64_t ldg;                /* row stride of G in its own elements (2 ld: 16-bit G over fp32) */
  kljit_dtype logit, grad;    /* dtypes of the chunk logits and of G (G overwrites them) */
  int p2_split;               /* blocks per row of the pass that writes the loss partials */
  int dw_workspace;           /* dW accumulates in an fp32 workspace buffer */
  int dw_auto;                /* KLJIT_ACCUM_AUTO, 16-bit dW: the buffer or not per call */
  int chunk_eighths;          /* 0, or e: a call's chunk is capped at e eighths of its rows
                               * (3: three chunks, 3/8, 3/8 and 2/8; 1 with the online
                               * teacher: two fp32 logit buffers a row) */
  int dx_split;               /* dX as this many GEMMs over slices of V summed in fp32 (1:
                               * one GEMM into dX) */
  int64_t dx_slice;           /* columns of V per slice (the last takes the rest) */
  int64_t dx_rows;            /* dx_split > 1: chunks of at least this many rows split */
  int hard_parts;             /* the rows write the CE's loss partials apart (lossh) */
  int stats_tiles;            /* 0, or the column tiles of the generated logits GEMM, whose
                               * epilogue writes the pass-1 record of each (row, tile) (STATS):
                               * pass 1 (kl_dense_stats) is not launched and pass 2 merges these
                               * stats_tiles records a row (recipe.c) */
  int e16;                    /* stats_tiles, and in every mode the chunk buffer holds the GEMM's
                               * fp16 tile-relative scores (E16; recipe.c), which every rows
                               * module reads (ETILE) and G overwrites (ldg = ld) */
  int tile_counter;           /* a generated GEMM of the plan claims its tiles from a counter
                               * (TILES dynamic, recipe.c): the workspace holds its pair */
  kspec rows, helpers;        /* the row kernels (all of them) and the helpers */
} prob_geometry;

/* The sm_90 one-pass (cluster) shape of a row for `pb` on sm_<arch>: fills t's cluster, split,
 * nv and threads and returns 1, or returns 0 where the variant does not apply (before sm_90,
 * the sparse teacher, a sharded head, a row too long for a cluster's registers). The one
 * definition the heuristics and the tuner's candidates share. */
int prob_cluster_tuning(const kljit_problem *pb, int arch, prob_tuning *t);

/* Heuristic tuning for sm_<arch> under a context's options (row_kernel, chunk_rows). On sm_90
 * and newer, with KLJIT_ROW_KERNEL_CLUSTER, rows that fit a cluster's registers take the
 * one-pass cluster variant. */
prob_tuning prob_estimate(const kljit_problem *pb, int arch, const kljit_context_options *opt);

/* Whether the chunk logits are in the input dtype (KLJIT_FLAG_NATIVE_LOGITS, or fp32 inputs),
 * else fp32. */
int prob_native_logits(const kljit_problem *pb);

/* The chunk of a call of `rows` rows: the tuning's chunk_rows, but at most g->chunk_eighths / 8
 * of rows rounded up to 256 (at least 256) where g->chunk_eighths is not 0 and the call's dW is
 * not in the fp32 buffer. */
int64_t prob_chunk_rows(const prob_geometry *g, int64_t rows);
/* Whether a call of `rows` rows accumulates dW in the fp32 workspace buffer: dw_workspace, or
 * for KLJIT_ACCUM_AUTO, whether it has more than KLJIT_ACCUM_AUTO_MAX_CHUNKS capped chunks. */
int prob_dw_in_workspace(const prob_geometry *g, int64_t rows);

/* Workspace layout of one call of `rows` rows in mode `mode` (offsets in bytes; 0 size =
 * absent), its records sized as `lay` says (the plan's: what its modules declare). The total
 * is what kljit_plan_workspace_size reports. */
typedef struct prob_workspace {
  size_t hdr, lossp, part, z, zt, g, dw, db, dxacc, check, stats, lt, total;
  size_t lossh; /* the CE's loss partials (geometry's hard_parts), after lossp */
  size_t lt_size;
  size_t sched; /* geometry's tile_counter: the generated GEMMs' counter pair (TILES dynamic) */
} prob_workspace;
prob_workspace prob_workspace_layout(const kljit_problem *pb, const prob_geometry *g,
                                     const kiface_layout *lay, kljit_mode mode, int64_t rows);

#endif
