/* plan.h — kljit_plan: an immutable, executable plan for one problem on one context.
 *
 * Invariants: after kljit_plan_create returns, nothing in the plan changes except the GEMM
 * algorithm memo behind `gemm` (its own lock), so executes may run concurrently.
 */
#ifndef KLJIT_PLAN_H
#define KLJIT_PLAN_H

#include "context.h"
#include "gemm.h"
#include "gemm_sm90.h"
#include "problem.h"

enum plan_fn {
  FN_STATS, FN_FUSED, FN_FORWARD, FN_BACKWARD, FN_CHECK, FN_MERGE, /* rows (dense or sparse) */
  FN_SETUP, FN_FINISH, FN_COLSUM, FN_CONVERT, FN_SCALE, /* helpers module */
  FN_GEMM_LOGITS, /* the generated sm_90a logits GEMM (KLJIT_GEMM=jit), else unused */
  FN_COUNT
};

/* Floats of the header kl_setup writes (workspace in fused mode, start of `saved` otherwise). */
enum { PLAN_HDR_FLOATS = 8 };

struct kljit_plan {
  kljit_context *ctx;
  kljit_problem pb;
  prob_geometry geom;
  gemm_types gtypes;
  gemm_shape gshape;
  gemm_cache *gemm;        /* separately allocated: mutated under a const plan */
  ctx_module *mod_rows, *mod_helpers;
  ctx_module *mod_gemm;    /* the generated logits GEMM, or NULL: cuBLASLt (gemm_sm90.h) */
  jgemm_variant gemm_logits;
  CUfunction fn[FN_COUNT];
  char *description;
};

/* A plan with a given tuning (kljit_plan_create after choosing it; the tuner for each
 * candidate). `origin` says where the tuning came from (the description's "tuning from" line);
 * t0 is when planning started (util_now). */
kljit_status plan_create_tuned(kljit_context *ctx, const kljit_problem *problem,
                               const prob_tuning *chosen, const char *origin, double t0,
                               kljit_plan **out);

#endif
