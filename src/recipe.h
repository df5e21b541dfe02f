/* SPDX-License-Identifier: Apache-2.0 */
/* recipe.h — what a plan builds: one pure function of the problem, the tuning, the context's
 * options and the target (no GPU, no environment, no clock).
 *
 *   recipe_make_on(problem, tuning, options, device: arch, SMs, DRAM) -> the geometry (chunk,
 *     strides, dtypes, the dX split, the workspace rules: prob_workspace_layout), the modules
 *     (the rows, the helpers, the dense rows' second part, one per generated GEMM) and a slot
 *     per GEMM of the chunk loop (its operation, types and shape, and its engine: cuBLASLt, or
 *     a generated variant and its module).
 *
 * Everything that plans reads one: plan creation (plan.c builds what it says and chooses
 * nothing), the size queries (through the plan), kljit_precompile, kljit_precompile_wisdom,
 * kljit_plan_check, wisdom's entry check, the tuner's candidates and its measurements (the
 * generated GEMMs it tries are recipes of a tuning with that choice). Entry points without a
 * context pass KLJIT_CONTEXT_OPTIONS_INIT: the environment becomes options only at the API edge
 * (kljit_context_options_default, kljit_context_create).
 *
 * Invariants:
 *  - equal inputs give equal recipes, byte for byte (the specs' strings are static literals);
 *  - the modules are the rows, the helpers, the dense rows' second part (rows_part: the row
 *    kernels in two modules compiled at once), then the generated GEMM of each slot that has one,
 *    in slot order (recipe_modules); a slot is either used or all zero;
 *  - every used slot has its cuBLASLt operation (types, shape, rows): a generated slot falls
 *    back on it for operands TMA cannot take;
 *  - the only choices made here that a tuning does not carry are the planner's rules: the
 *    heuristics without a tuning (the logits GEMM's epilogue among them, by the GPU's DRAM), a
 *    cluster tuning given up for a shard, the chunk cap, the dX split and the chunks it pays
 *    for, the generated GEMMs the options force or forbid.
 *
 * Adding to it: a GEMM of the chunk loop is a slot (recipe_slot) and its lines in gemm_slots();
 * another engine for a slot is a case of choose_engine(); a kernel family of its own (the loss
 * fusion's) is a module appended in recipe_make and named in recipe_modules. The logits GEMM is
 * decided first (logits_epilogue: its engine, and its statistics epilogue and E16 where the
 * options or its choice ask, or the heuristics for a GPU short of DRAM bandwidth, and the
 * problem is in their scope): what its epilogue writes is what the chunk buffer holds, so the
 * row specs, G's stride, the slots and the chunk are derived after it, once, as exec.c and the
 * workspace layout follow them.
 */
#ifndef KLJIT_RECIPE_H
#define KLJIT_RECIPE_H

#include "gemm.h"
#include "gemm_sm90.h"
#include "problem.h"

/* The GEMMs of the chunk loop. The first three are the tuned operations (gemm_kind). */
typedef enum recipe_slot {
  RECIPE_LOGITS = GEMM_LOGITS, /* Z = X W^T */
  RECIPE_DX = GEMM_DX,         /* dX = G W */
  RECIPE_DW = GEMM_DW,         /* dW (+)= G^T X */
  RECIPE_TEACHER,              /* the online teacher's Zt = Xt Wt^T (DENSE_HIDDEN), fp32 */
  RECIPE_DX_SLICE,             /* dX of one slice of V into the fp32 sum (dx_split > 1) */
  RECIPE_DX_LAST,              /* the same for the last slice (the rest of V) */
  RECIPE_DW_ACC,               /* dW of the chunks that accumulate (beta 1): RECIPE_DW is then
                                * the first chunk's (beta 0 unless the call accumulates into
                                * grad_weight); a generated kernel has its beta compiled in */
  RECIPE_DW32,                 /* KLJIT_ACCUM_AUTO (geom.dw_auto): dW of a call that takes the
                                * fp32 buffer (prob_dw_in_workspace), its first chunk */
  RECIPE_DW32_ACC,             /* ... and its chunks that accumulate */
  RECIPE_SLOTS
} recipe_slot;

typedef enum recipe_engine {
  RECIPE_CUBLASLT = 1, /* the slot's cuBLASLt operation */
  RECIPE_GENERATED = 2 /* a variant of the generated sm_90a family (gemm_sm90.h) */
} recipe_engine;

typedef struct recipe_gemm {
  int used;
  gemm_kind op;          /* the operation whose layouts it has (logits, dX, dW) */
  gemm_types types;
  gemm_shape shape;
  int64_t rows;          /* prepared for chunks of this many rows */
  recipe_engine engine;
  int tuned_algo;        /* cuBLASLt: the tuning's algorithm for (op, rows) where the running
                          * cuBLASLt made it (gemm_algo_find), else the heuristic's; 0: the
                          * heuristic's */
  int lt_index;          /* cuBLASLt: the options' k-th algorithm of its heuristic list, or -1 */
  jgemm_variant variant; /* RECIPE_GENERATED */
  kspec spec;            /* RECIPE_GENERATED: its module */
  jgemm_source from;     /* the tuned slots: where the engine came from (options, tuning, the
                          * arch's heuristic table), for the plan's description */
  const char *why;       /* a generated engine asked where the family cannot serve: the reason
                          * (jgemm_unfit), the slot then cuBLASLt */
} recipe_gemm;

enum { RECIPE_MAX_MODULES = 3 + RECIPE_SLOTS };

typedef struct recipe {
  prob_geometry geom;  /* its tune is the one built (after a replacement) */
  int replaced;        /* the given cluster tuning gave way to the two-pass heuristics (a shard:
                        * its row statistics are merged across ranks) */
  const char *stats_why; /* the options asked for the statistics in the logits GEMM's epilogue
                          * and the problem or the plan's engines do not allow it: why (the
                          * rows' pass 1 then runs); NULL otherwise */
  int epilogue_auto;     /* the heuristics took an epilogue, no option asked: RECIPE_AUTO_E16
                          * (a dense or sparse top-K teacher, any sm_90) or RECIPE_AUTO_STATS
                          * (this GPU's DRAM, RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE); 0: none */
  recipe_gemm gemm[RECIPE_SLOTS];
  kspec rows_part[2]; /* dense rows: geom.rows as two modules, PART "fused" and "phased" (the
                       * kernels each mode's calls launch: the fused mode's, the others');
                       * family 0: the rows are one module, geom.rows */
} recipe;

/* What the heuristics know of the GPU a plan is for (context.c measures it; precompile knows
 * its architecture alone and builds each class's plan: recipe_device_classes). */
typedef struct recipe_device {
  int arch;        /* e.g. 90 */
  int sm_count;    /* multiprocessors; 0: unknown */
  double dram_per_sm_cycle; /* the DRAM's peak bytes per SM and SM clock cycle (memory clock x
                             * bus width over SMs x SM clock: 12.8 on an H100 SXM, 18.8 on an
                             * H200); 0: unknown */
} recipe_device;

/* Where nothing names the logits GEMM, sm_90's heuristics move the row statistics into the
 * generated logits GEMM's epilogue: E16 for a dense teacher's probabilities, log-probabilities
 * or logits on any such GPU (on an H200, bench_loss: the tile's neighbours 0.94-0.95x the fp32
 * logits' call at 4096 x 2048 x 32000 and 0.93-0.95x at 8192 x 4096 x 128256, run 120, the tile
 * itself 0.95x and 0.96x, run 125 against run 120's fp32 times; on an H100 0.87-0.93x already on
 * the earlier tile, runs 77 and 113) and for the sparse top-K teacher (timed on an H100 only:
 * 0.93x `.stats`' call, run 129), and `.stats` elsewhere in its scope below this many
 * DRAM bytes per SM cycle (and known): on an H100 (12.8) `.stats` took 0.96x the default's call
 * at the sparse shape (run 88); on the H200 (18.8) 1.01-1.05x (runs 72-73), so there the
 * others keep the fp32 logits and the rows. */
#define RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE 15.0
enum { RECIPE_AUTO_E16 = 1, RECIPE_AUTO_STATS = 2 };

/* E16's logits GEMM, where neither the options nor the tuning names its shape, runs 64 x 256
 * pingpong tiles, 4 stages, in clusters of 1 (gemm_algo.h's variant text): on an H100
 * (bench_loss, median of 5, alternated, two rounds, bench/RESULTS.md run 113) 0.93x the call of
 * the earlier 128 x 128 pingpong tile at 4096 and 8192 x 2048 x 32000, 0.93-0.96x at 4096 and
 * 8192 x 4096 x 128256 (whose W of 1 GiB took that tile in clusters of 2), 1.00x at 2048 x 4096
 * x 128256; the same tile in clusters of 2 was 0.97-1.05x. The wider tile halves the records a
 * row and reads the teacher in 512-byte runs; the multiplying warpgroup hides the other's
 * epilogue. */
#define RECIPE_E16_TILE "256.1.4.g.1.p"

/* The device classes whose sm_<arch> heuristic plans differ, for a precompile that knows no
 * GPU: fills out (at most 2) and returns the count. */
int recipe_device_classes(int arch, recipe_device out[2]);

/* Everything a plan of the validated problem `pb` builds for the GPU `dev` under the context's
 * options `opt`: with the tuning `tune` (wisdom's, a candidate's), or the heuristics' for NULL.
 * KLJIT_SUCCESS, or KLJIT_ERR_INVALID_ARGUMENT / KLJIT_ERR_UNSUPPORTED with a sentence for a
 * tuning or options that cannot be built. */
kljit_status recipe_make_on(const kljit_problem *pb, const prob_tuning *tune,
                            const kljit_context_options *opt, const recipe_device *dev,
                            recipe *out);
/* recipe_make_on for sm_<arch> with `sm_count` multiprocessors (0: unknown) and an unknown
 * DRAM (the heuristics' fp32 logits and row kernels). */
kljit_status recipe_make(const kljit_problem *pb, const prob_tuning *tune,
                         const kljit_context_options *opt, int arch, int sm_count, recipe *out);

/* The recipe's modules (pointers into *r): the rows (the dense rows' fused part), the helpers,
 * the dense rows' phased part (recipe_fixed_modules counts these), then each generated GEMM.
 * Returns the count. */
int recipe_modules(const recipe *r, const kspec *out[RECIPE_MAX_MODULES]);
/* How many of recipe_modules' first modules are the row and helper kernels (2 or 3). */
int recipe_fixed_modules(const recipe *r);

/* The family templates' verdict on every module of the recipe (kspec_check), without
 * rendering: KLJIT_SUCCESS or the first rejection's status and sentence. */
kljit_status recipe_check(const recipe *r);

/* Whether the chunk of n rows takes the split dX (geom.dx_split > 1 and n >= geom.dx_rows; a
 * generated dX with dx_split > 1 sums its slices in one launch and takes it for every chunk). */
int recipe_dx_split_pays(const recipe *r, int64_t n);

#endif
