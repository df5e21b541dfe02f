/* SPDX-License-Identifier: Apache-2.0 */
/* gemm_algo.h — tuned cuBLASLt algorithms as plan tuning and as wisdom text (gemm_algo.c).
 *
 * A cublasLtMatmulAlgo_t is 8 opaque 64-bit words that only the cuBLASLt version which produced
 * them may interpret, so each stored choice carries cublasLtGetVersion() of the tuner, and a
 * plan takes it only when the running library reports the same version (otherwise the
 * heuristic's algorithm runs, as untuned). Wisdom text of one choice (docs/wisdom.md):
 *
 *   gemm=<logits|dx|dw>:<rows>:<b0|b1>:lt<version>:<8 x 16 hex digits>
 *   gemm=<logits|dx|dw>:<rows>:<b0|b1>:lt<version>:jit:<variant>    (generated, measured
 *                                                       against that cuBLASLt version)
 *   gemm=<logits|dx|dw>:<rows>:<b0|b1>:jit:<variant>                (generated, unversioned:
 *                                                       kljit before the version was written)
 * <variant>: <BN>.<CONSUMERS>.<STAGES>.<RASTER>.<CLUSTER>[.<flags>] (gemm_algo_jit_text).
 * A choice whose cuBLASLt version is not the running library's is refused (the plan takes the
 * heuristic's for that GEMM): an algorithm is meaningless to another version, and a generated
 * kernel chosen for beating one cuBLASLt has not been measured against another.
 */
#ifndef KLJIT_GEMM_ALGO_H
#define KLJIT_GEMM_ALGO_H

#include <cublasLt.h>

#include "problem.h"

enum { GEMM_ALGO_TEXT_MAX = 192 };

/* The wisdom value of one choice (without "gemm="). */
void gemm_algo_text(const prob_gemm_choice *c, char out[GEMM_ALGO_TEXT_MAX]);

/* Parses a wisdom value into *c (used = 1). 0, or -1 when it is not a choice's text. */
int gemm_algo_parse(const char *text, prob_gemm_choice *c);

/* Adds a choice to a tuning, replacing one of the same GEMM; -1 when all slots hold others. */
int gemm_algo_add(prob_tuning *t, const prob_gemm_choice *c);

/* The tuning's generated-GEMM choice for GEMM `kind` (dW: beta_zero says which of its two;
 * the others ignore it), whatever cuBLASLt version it was measured against (gemm_algo_drop_stale
 * takes the stale ones out of a tuning before it plans), or NULL. */
const prob_gemm_choice *gemm_algo_jit(const prob_tuning *t, int kind, int beta_zero);

/* Whether the tuning holds a cuBLASLt algorithm for GEMM `kind` (any version, either of dW's
 * two: gemm_algo_find's choice). */
int gemm_algo_has_lt(const prob_tuning *t, int kind);

/* Drops the tuning's generated choices measured against another cuBLASLt than the running one
 * (the plan then takes the heuristic's backend for those GEMMs); returns how many. Planning
 * (recipe_make) takes a tuning's generated choices whatever their version: this is done to a
 * tuning before it plans (tune_choose). */
int gemm_algo_drop_stale(prob_tuning *t);

/* The running cuBLASLt's version (cublasLtGetVersion), 0 where it cannot be loaded. */
uint64_t gemm_algo_lt_version(void);

/* A generated variant's shape as text (wisdom, KLJIT_GEMM, the benches):
 *   <BN>.<CONSUMERS>.<STAGES>.<m|n|g>.<CLUSTER>[.<flags>]
 * flags, letters in this order: p (the pingpong schedule), s (the staged epilogue), w (one
 * stage arrival per warp), c (streaming C: needs s), a or b (an L2 policy keeping A or B), r
 * (the promoted accumulator), e (E16: the logits GEMM's), d (dynamic tiles), t (the teacher's
 * part of the records made by the producer's idle warps: E16 or the statistics of a dense
 * teacher, static tiles). */
enum { GEMM_ALGO_JIT_TEXT_MAX = 40 };
void gemm_algo_jit_text(const prob_gemm_choice *c, char out[GEMM_ALGO_JIT_TEXT_MAX]);
/* Parses such a text (all of s) into c's generated fields (jit = 1, used = 1; kind, n and the
 * rest untouched): 0, or -1 when s is not one. */
int gemm_algo_jit_parse(const char *s, prob_gemm_choice *c);

/* Which backend a GEMM of the chunk loop takes as a context's options say: options->gemm for
 * every GEMM, then options->gemm_choice's items for the GEMMs they name (KLJIT_GEMM's list
 * form, include/kljit.h):
 *   <logits|dx|dw|all>:<default|cublas|cublas.<k>|jit|jit.<variant>>[,...]
 * cublas.<k>: the k-th algorithm of cuBLASLt's heuristic list (0 its first, what an untuned
 * plan runs); jit.<variant>: that generated variant (gemm_algo_jit_text). The logits item's jit
 * backends may end in ".stats" (logits:jit.stats): the generated GEMM also writes the dense
 * rows' pass-1 statistics where the recipe's scope for that holds (recipe.c); ".e16"
 * (logits:jit.e16) that, and in every mode the tile as fp16 x = s - m_tile instead of the fp32
 * logits (recipe.c, templates/gemm_sm90.cu.lua's E16). */
typedef enum gemm_backend {
  GEMM_BACKEND_DEFAULT = 0, /* the tuning's choice, else the heuristic's (jgemm_pick) */
  GEMM_BACKEND_CUBLAS = 1,
  GEMM_BACKEND_JIT = 2
} gemm_backend;

typedef struct gemm_select {
  gemm_backend backend;
  int lt_index;            /* CUBLAS: -1 (the tuning's algorithm, else the heuristic's) or k */
  int variant;             /* JIT: 1 when `choice` holds a variant, 0: the tuning's or default */
  prob_gemm_choice choice; /* its generated fields */
  int stats;               /* JIT, logits: ".stats", the statistics epilogue asked for */
  int e16;                 /* JIT, logits: ".e16", the statistics epilogue and E16 */
} gemm_select;

/* out[kind] (by gemm_kind) from the options; KLJIT_ERR_INVALID_ARGUMENT naming the option and
 * the item it cannot read (a bad options->gemm: KLJIT_GEMM's text). */
kljit_status gemm_algo_select(const kljit_context_options *o, gemm_select out[3]);

/* The tuning's cuBLASLt algorithm for GEMM `kind` (a gemm_kind) on chunks of n rows, when one
 * was tuned with the running cuBLASLt version (dW: the accumulating chunks' choice before the
 * first chunk's): 1 with *algo set, else 0. *stale: the choices refused for their version. */
int gemm_algo_find(const prob_tuning *t, int kind, int64_t n, cublasLtMatmulAlgo_t *algo,
                   int *stale);

#endif
