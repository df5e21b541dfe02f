/* SPDX-License-Identifier: Apache-2.0 */
/* tune.h — choosing a plan's tuning (the planner's second layer, no GPU): from wisdom or the
 * heuristics, by rigor, and the candidate configurations a tuner tries. Timing them is
 * tune_measure.h, on top of building plans; kljit_plan_create and kljit_tune (planner.c) put
 * the layers together.
 *
 * Tuning searches in stages: SHAPES (row-kernel threads x split at the heuristic chunk size),
 * then CHUNKS (chunk sizes for the best shape, no new kernels), then CLUSTER (the sm_90 one-pass
 * variant, arch >= 90 and a dense teacher only). The heuristic choice is the first candidate, so
 * the winner is never slower than KLJIT_PLAN_ESTIMATE's choice as measured in the same run.
 */
#ifndef KLJIT_TUNE_H
#define KLJIT_TUNE_H

#include "context.h"
#include "wisdom.h"


typedef enum tune_stage { TUNE_SHAPES = 1, TUNE_CHUNKS = 2, TUNE_CLUSTER = 3 } tune_stage;

enum { TUNE_MAX_CANDIDATES = 128 };

/* The candidates of one stage around `base` (the heuristic for SHAPES, the best so far after),
 * for rigor MEASURE (small sets) or EXHAUSTIVE (larger ones), tuning at `rows` tokens on
 * sm_<arch> under a context's options. Every candidate is a recipe the templates accept, built
 * as given (recipe_make, recipe_check); none equals `base` except SHAPES' first, which is
 * `base` itself. Returns the count (<= cap). */
int tune_candidates(const kljit_problem *pb, const kljit_context_options *opt, int arch,
                    kljit_plan_rigor rigor, tune_stage stage, const prob_tuning *base, int64_t rows,
                    prob_tuning *out, int cap);

/* The i-th generated variant (gemm_algo_jit_text) the tuner times for GEMM kind `kind` (0
 * logits, 1 dX, 2 dW), the kind's default first; NULL past the last. */
const char *tune_jit_try(int kind, int i);

/* Whether the plan of `pb` with tuning `t` (whose logits choice asks for E16: flag e) on
 * sm_<arch> under the options takes E16 (recipe.c: the problem in its scope, the options not
 * forcing another engine): where it does not, the plan is t's without E16, so a tuner that timed
 * it would time another candidate again. */
int tune_takes_e16(const kljit_problem *pb, const kljit_context_options *opt, int arch,
                   const prob_tuning *t);

/* "threads=256 split=8 chunk_rows=4096" (or "cluster=8 threads=256 nv=4 chunk_rows=4096"). */
void tune_describe(const prob_tuning *t, char *out, size_t cap);

/* Where a plan's tuning came from. */
typedef enum tune_source {
  TUNE_FROM_HEURISTIC = 1, /* prob_estimate */
  TUNE_FROM_WISDOM = 2,    /* a stored entry (*used) */
  TUNE_NEEDED = 3          /* MEASURE/EXHAUSTIVE without adequate wisdom: *out is the heuristic */
} tune_source;

/* The rigor rules of kljit_plan_create (kljit.h, "wisdom"), without a GPU: the tuning for `pb`
 * on a GPU named `gpu` (sm_<arch>, `sms` multiprocessors: wisdom's key). KLJIT_ERR_NO_WISDOM for
 * WISDOM_ONLY without an entry, naming the key. The context's options `opt` give the token
 * bucket (tune_rows), the heuristics' row kernel and may override the chunk size
 * (chunk_rows). */
kljit_status tune_choose(const kljit_problem *pb, kljit_plan_rigor rigor, const char *gpu, int arch,
                         int sms, const kljit_context_options *opt, prob_tuning *out,
                         tune_source *src, wisdom_entry *used);

/* The options' chunk_rows (KLJIT_CHUNK_ROWS) override the chunk size whatever chose the rest
 * (wisdom, heuristics or a measurement: tests, experiments). */
void tune_chunk_override(const kljit_context_options *opt, prob_tuning *t);

/* The wisdom entry identity of `pb` on ctx's GPU for `rows` tokens (tune and rigor unset). */
void tune_entry_key(const kljit_context *ctx, const kljit_problem *pb, int64_t rows,
                    wisdom_entry *e);

#endif
