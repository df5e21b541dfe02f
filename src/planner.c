/* SPDX-License-Identifier: Apache-2.0 */
/* planner.c — kljit_plan_create and kljit_tune: the planner's layers put together.
 *
 *   problem.c       validate the problem, derive geometry and specs     (no GPU)
 *   tune.c          choose a tuning: wisdom or heuristics, by rigor     (no GPU)
 *   plan.c          build a plan for a chosen tuning: JIT, load, check  (the GPU's modules)
 *   tune_measure.c  time candidates by building and running plans       (on top of plan.c)
 *   planner.c       the entry points: choose, measure when the rigor asks, build
 * Nothing below calls up: a tuning is chosen or measured before any plan is built for it.
 */
#include <stdio.h>
#include <string.h>

#include "tune_measure.h"

/* tune_choose, then tune_measure + wisdom_add when the rigor asks for a measurement. `origin`
 * receives a phrase for the plan's description ("wisdom (measure, 8.10 ms at 8192 rows)",
 * "heuristic", ...). */
static kljit_status choose_tuning(kljit_context *ctx, const kljit_problem *pb,
                                  kljit_plan_rigor rigor, prob_tuning *out, strbuf *origin) {
  wisdom_entry key, used;
  tune_entry_key(ctx, pb, 1, &key);
  tune_source src;
  kljit_status st =
      tune_choose(pb, rigor, key.gpu, key.arch, key.sms, &ctx->opt, out, &src, &used);
  if (st != KLJIT_SUCCESS) return st;
  if (src == TUNE_FROM_WISDOM)
    return sb_printf(origin, "wisdom (%s, %.3f ms at %lld rows, bucket %lld)",
                     names_rigor(used.rigor), used.ms, (long long)used.rows, (long long)used.bucket);
  if (src == TUNE_FROM_HEURISTIC) return sb_printf(origin, "heuristic (no wisdom)");
  wisdom_entry win;
  const double t0 = util_now();
  st = tune_measure(ctx, pb, ctx->opt.tune_rows, rigor, NULL, NULL, &win);
  if (st == KLJIT_SUCCESS) st = wisdom_add(&win);
  if (st != KLJIT_SUCCESS) return err_prefix(st, "tuning (%s): ", names_rigor(rigor));
  *out = win.tune;
  tune_chunk_override(&ctx->opt, out);
  return sb_printf(origin, "a measurement now (%s in %.1f s: %.3f ms at %lld rows)",
                   names_rigor(rigor), util_now() - t0, win.ms, (long long)win.rows);
}

kljit_status kljit_tune(kljit_context *ctx, const kljit_problem *problem, int64_t rows,
                        kljit_plan_rigor rigor, kljit_tune_callback callback, void *user) {
  err_clear();
  const char *who = "kljit_tune";
  if (!ctx) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", who);
  kljit_problem pb;
  kljit_status st = prob_import(problem, who, &pb);
  if (st != KLJIT_SUCCESS) return st;
  problem = &pb;
  if (rigor != KLJIT_PLAN_MEASURE && rigor != KLJIT_PLAN_EXHAUSTIVE)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: rigor = %d, must be KLJIT_PLAN_MEASURE or KLJIT_PLAN_EXHAUSTIVE", who,
                   (int)rigor);
  if (rows < 0 || rows > INT32_MAX)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: rows = %lld, must be in [0, 2^31) (0: "
                   "KLJIT_TUNE_ROWS)",
                   who, (long long)rows);
  wisdom_entry win;
  st = tune_measure(ctx, problem, rows ? rows : ctx->opt.tune_rows, rigor, callback, user, &win);
  if (st == KLJIT_SUCCESS) st = wisdom_add(&win);
  if (st != KLJIT_SUCCESS) return err_prefix(st, "%s: ", who);
  err_clear();
  return KLJIT_SUCCESS;
}

kljit_status kljit_plan_create(kljit_context *ctx, const kljit_problem *problem,
                               kljit_plan_rigor rigor, kljit_plan **out) {
  err_clear();
  if (!out) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_plan_create: plan is NULL");
  *out = NULL;
  if (!ctx) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_plan_create: ctx is NULL");
  kljit_problem pb;
  kljit_status st = prob_import(problem, "kljit_plan_create", &pb);
  if (st != KLJIT_SUCCESS) return st;
  problem = &pb;
  if (rigor < KLJIT_PLAN_ESTIMATE || rigor > KLJIT_PLAN_WISDOM_ONLY)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_plan_create: rigor = %d", (int)rigor);
  const double t0 = util_now();
  /* the tuning by rigor: wisdom, heuristics (tune.c), or timing candidates now (tune_measure.c) */
  prob_tuning chosen;
  strbuf origin = {0};
  st = choose_tuning(ctx, problem, rigor, &chosen, &origin);
  if (st == KLJIT_SUCCESS)
    st = plan_create_tuned(ctx, problem, &chosen, origin.data ? origin.data : "", t0, out);
  sb_free(&origin);
  return st;
}

