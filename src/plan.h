/* SPDX-License-Identifier: Apache-2.0 */
/* plan.h — kljit_plan: an immutable, executable plan for one problem on one context, built
 * from its recipe (recipe.h), and the one loader of the modules a recipe names.
 *
 * Invariants: once built (plan_create_tuned, under kljit_plan_create or the tuner), nothing in
 * the plan changes (its GEMM operations are prepared, its kernels resolved and checked against
 * their manifests), so executes may run concurrently. The plan holds what its recipe says and
 * nothing the builder chose: the recipe is kept in it.
 */
#ifndef KLJIT_PLAN_H
#define KLJIT_PLAN_H

#include "context.h"
#include "gemm.h"
#include "gemm_sm90.h"
#include "kiface.h"
#include "problem.h"
#include "recipe.h"

/* A loaded kernel and its interface (a kernel of iface_rows, iface_helpers or
 * iface_rows_phased). */
typedef struct plan_kernel {
  CUfunction fn;
  const kiface_kernel *sig;
} plan_kernel;

/* A generated GEMM of a recipe slot, loaded: its module (a reference in the context's registry)
 * and kernel with its manifest. Launched by plan_jgemm_launch, not plan_launch: its TMA
 * descriptors are encoded per call. */
typedef struct plan_jgemm {
  ctx_module *mod;
  jgemm_kernel k; /* k.fn NULL: none */
  int grid_cap;   /* jgemm_launch's `sms` (jgemm_grid_cap) */
} plan_jgemm;

struct kljit_plan {
  kljit_context *ctx;
  kljit_problem pb;
  recipe rec;                /* what the plan was built from */
  gemm_op gemm[RECIPE_SLOTS]; /* by slot, where used: prepared for the recipe's chunk rows (a
                              * generated slot's too: operands TMA cannot take run there) */
  plan_jgemm jgemm[RECIPE_SLOTS]; /* by slot, where the recipe's engine is generated */
  ctx_module *mod_rows, *mod_helpers, *mod_rows_phased;
  kiface_manifest iface_rows, iface_helpers, iface_rows_phased; /* the modules' manifests, as
                                                                 * loaded */
  plan_kernel kernel[KSTEP_COUNT];           /* by step; sig NULL: the plan has none */
  kiface_layout layout; /* the records' floats as the loaded manifests declare them: the header
                         * (at saved's start), the rows' records and saved statistics */
  char *description;
};

/* The context's GPU as the recipe's heuristics see it. */
recipe_device plan_device(const kljit_context *ctx);

/* A plan with a given tuning (kljit_plan_create after choosing it; the tuner for each
 * candidate). `origin` says where the tuning came from (the description's "tuning from" line);
 * t0 is when planning started (util_now). */
kljit_status plan_create_tuned(kljit_context *ctx, const kljit_problem *problem,
                               const prob_tuning *chosen, const char *origin, double t0,
                               kljit_plan **out);

/* The generated GEMM of slot s of recipe r: built, loaded into ctx (a reference), its kernel
 * found and prepared by its manifest (jgemm_load); the description's line appended to desc (may
 * be NULL). The tuner loads the variants it times this way too. */
kljit_status plan_jgemm_load(kljit_context *ctx, const recipe *r, recipe_slot s, plan_jgemm *out,
                             strbuf *desc);
void plan_jgemm_release(kljit_context *ctx, plan_jgemm *g);

/* Runs slot g's generated GEMM (its recipe slot rg) on a chunk of n rows with gemm_run's
 * operands of rg's operation (logits: a = W, b = the chunk's X, c = Z; dX: a = W, b = G, c = dX
 * or, sliced, its fp32 sum; dW: a = the chunk's X, b = G, c = dW), alpha (beta is the
 * variant's); epi the statistics epilogue's operands where the variant has one (NULL: none);
 * sched the call's tile counter pair (the workspace's, zeroed by the call: TILES dynamic). */
kljit_status plan_jgemm_launch(const kljit_context *ctx, const plan_jgemm *g,
                               const recipe_gemm *rg, int64_t n, const void *a, const void *b,
                               void *c, float alpha, const jgemm_epi *epi, uint32_t *sched,
                               void *stream);

/* cuLaunchKernel of the plan's kernel for `step` on `stream`, (gx, gy) blocks of the threads
 * its manifest declares, its arguments taken from `args` by the roles of the manifest
 * (src/kiface.h); KLJIT_ERR_INTERNAL when the plan has no kernel for the step. */
kljit_status plan_launch(const kljit_plan *p, kiface_step step, unsigned gx, unsigned gy,
                         const kargs *args, void *stream);

/* The block size the plan's kernel for `step` declares, for grids that cover their work with
 * whole blocks (1 where the plan has no such kernel: plan_launch then refuses the step). */
unsigned plan_threads(const kljit_plan *p, kiface_step step);

#endif
