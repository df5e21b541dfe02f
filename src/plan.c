/* SPDX-License-Identifier: Apache-2.0 */
/* plan.c — building a plan from its recipe (the module loader, the GEMMs), destroying and
 * describing it, and the size queries. */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_algo.h"

/* The one loader of a recipe's modules: built (jit_build through the context's cache: rendered
 * now, or stored with the cubin and checked against the template's), its manifest checked (a
 * row or helper module's parsed against the kargs roles into *iface; a generated GEMM's, gk
 * non-NULL, by jgemm_load, which finds its kernel and takes its launch geometry from it),
 * loaded into the context (a reference). `built`: the module built already (a plan builds all of
 * its modules at once, jit_build_many), or NULL to build it here. */
static kljit_status load_module(kljit_context *ctx, const kspec *k, jit_bin *built,
                                kiface_manifest *iface, jgemm_kernel *gk, ctx_module **mod,
                                strbuf *desc) {
  jit_bin bin;
  kljit_status st = KLJIT_SUCCESS;
  if (built) /* built already (jit_build_many): taken over */
    bin = *built, memset(built, 0, sizeof *built);
  else
    st = jit_build(k, ctx->arch, &ctx->cache, &bin);
  if (st != KLJIT_SUCCESS) return st;
  const char *how = bin.source == CACHE_MISS           ? "compiled"
                    : bin.source == CACHE_HIT_READONLY ? "read-only cache"
                                                       : "cache";
  if (desc)
    st = sb_printf(desc, "  module %s (sm_%d%s): %s; render %.2f ms, compile %.1f ms, cache "
                   "%.2f ms\n", bin.name, ctx->arch, k->family == KSPEC_GEMM_SM90 ? "a" : "",
                   how, bin.render_ms, bin.compile_ms, bin.cache_ms);
  if (st == KLJIT_SUCCESS && iface) st = kiface_parse(bin.manifest.data, bin.name, iface);
  if (st == KLJIT_SUCCESS) st = ctx_module_acquire(ctx, &bin, mod);
  if (st == KLJIT_SUCCESS && gk)
    st = jgemm_load(ctx->drv, (*mod)->module, bin.manifest.data, bin.name, gk);
  jit_bin_free(&bin);
  return st;
}

/* A row or helper module, its kernels resolved by step from its manifest. */
static kljit_status load_kernels(kljit_plan *p, const kspec *k, jit_bin *built, ctx_module **mod,
                                 kiface_manifest *iface, strbuf *desc) {
  kljit_status st = load_module(p->ctx, k, built, iface, NULL, mod, desc);
  if (st != KLJIT_SUCCESS) return st;
  const drv_table *d = p->ctx->drv;
  for (int i = 0; i < iface->n; i++) {
    const kiface_kernel *sig = &iface->kernel[i];
    plan_kernel *pk = &p->kernel[sig->step];
    if (pk->sig)
      return err_set(KLJIT_ERR_INTERNAL, "kernels %s and %s are both for step %s",
                     pk->sig->name, sig->name, kiface_step_name(sig->step));
    st = drv_check(d, d->cuModuleGetFunction(&pk->fn, (*mod)->module, sig->name), sig->name);
    /* clusters of 16 blocks are beyond the portable 8 and must be allowed explicitly */
    if (st == KLJIT_SUCCESS && sig->cluster > 8)
      st = drv_check(d, d->cuFuncSetAttribute(pk->fn,
                                              CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                              1),
                     "cuFuncSetAttribute(non-portable cluster size)");
    if (st != KLJIT_SUCCESS) return st;
    pk->sig = sig;
  }
  return KLJIT_SUCCESS;
}

/* plan_jgemm_load, with the module built already (built non-NULL) or built here. */
static kljit_status jgemm_load_slot(kljit_context *ctx, const recipe *r, recipe_slot s,
                                    jit_bin *built, plan_jgemm *out, strbuf *desc) {
  const recipe_gemm *g = &r->gemm[s];
  memset(out, 0, sizeof *out);
  if (g->engine != RECIPE_GENERATED)
    return err_set(KLJIT_ERR_INTERNAL, "GEMM slot %d has no generated variant", (int)s);
  kljit_status st = load_module(ctx, &g->spec, built, NULL, &out->k, &out->mod, desc);
  if (st == KLJIT_SUCCESS) out->grid_cap = jgemm_grid_cap(ctx->drv, &out->k, ctx->sm_count);
  if (st != KLJIT_SUCCESS) plan_jgemm_release(ctx, out);
  return st;
}

kljit_status plan_jgemm_load(kljit_context *ctx, const recipe *r, recipe_slot s, plan_jgemm *out,
                             strbuf *desc) {
  return jgemm_load_slot(ctx, r, s, NULL, out, desc);
}

void plan_jgemm_release(kljit_context *ctx, plan_jgemm *g) {
  ctx_module_release(ctx, g->mod);
  memset(g, 0, sizeof *g);
}

kljit_status plan_jgemm_launch(const kljit_context *ctx, const plan_jgemm *g,
                               const recipe_gemm *rg, int64_t n, const void *a, const void *b,
                               void *c, float alpha, const jgemm_epi *epi, uint32_t *sched,
                               void *stream) {
  const int64_t h = rg->shape.h, v = rg->shape.v;
  jgemm_args ja;
  if (rg->op == GEMM_LOGITS) { /* Z[n, V] = X[n, H] W[V, H]^T: nt, A = X (gemm_run's b), B = W */
    const jgemm_args z = {b, a, c, n, v, h, h, h, rg->shape.ld, alpha, {0}, {0}, sched};
    ja = z;
  } else if (rg->op == GEMM_DX) { /* dX[n, H] = G[n, V] (ld ldg) W[V, H]: nn, A = G, B = W */
    const jgemm_args x = {b, a, c, n, h, v, rg->shape.ldg, h, h, alpha, {0}, {0}, sched};
    ja = x;
  } else { /* dW[V, H] (+)= G[n, V]^T (ld ldg) X[n, H]: tn, A = G, B = X, K = the chunk's rows */
    const jgemm_args w = {b, a, c, v, h, n, rg->shape.ldg, h, h, alpha, {0}, {0}, sched};
    ja = w;
  }
  if (epi) ja.epi = *epi;
  return jgemm_launch(ctx->drv, &g->k, &rg->variant, g->grid_cap, &ja, (CUstream)stream);
}

/* Every step the plan's executes launch must have its kernel: a template that stops declaring
 * one fails here, at plan time, not at the first call that needs it. */
static kljit_status check_steps(const kljit_plan *p) {
  const prob_geometry *g = &p->rec.geom;
  for (int s = 0; s < KSTEP_COUNT; s++) {
    const int needed = s == KSTEP_STATS ? !g->tune.cluster && !g->e16 /* E16: not emitted */
                       : s == KSTEP_MERGE ? !g->tune.cluster
                       : s == KSTEP_CHECK ? (p->pb.flags & KLJIT_FLAG_CHECK_INPUTS) != 0
                       : s == KSTEP_SUMS  ? g->rows.div != NULL && !g->tune.cluster && !g->e16
                       : s == KSTEP_GEMM  ? 0 /* its own module: plan_jgemm_load */
                                          : 1;
    if (needed && !p->kernel[s].sig)
      return err_set(KLJIT_ERR_INTERNAL, "the plan's modules declare no %s kernel",
                     kiface_step_name((kiface_step)s));
  }
  return KLJIT_SUCCESS;
}

/* Description names of the recipe's slots (recipe_slot order). */
static const char *const SLOT_NAME[RECIPE_SLOTS] = {
    "logits",        "dX",
    "dW (first chunk)", "teacher logits",
    "dX slice",      "dX last slice",
    "dW (accumulating)", "dW into fp32 (AUTO, first chunk)",
    "dW into fp32 (AUTO, accumulating)"};
static const char *const FROM[] = {"heuristic", "tuning", "options: KLJIT_GEMM"}; /* jgemm_source */

/* The cuBLASLt algorithm of slot g: the options' k-th of cuBLASLt's heuristic list, else the
 * tuning's (where the slot takes one and the running cuBLASLt made it); *found 0: the
 * heuristic's first. */
static kljit_status slot_algo(kljit_plan *p, recipe_slot s, cublasLtMatmulAlgo_t *algo,
                              int *found, int *stale) {
  const recipe_gemm *g = &p->rec.gemm[s];
  *found = *stale = 0;
  if (g->lt_index < 0) {
    /* AUTO's fp32-buffer dW: the tuning timed dW's algorithms at grad_weight's dtype */
    const int own_types = s != RECIPE_DW32 && s != RECIPE_DW32_ACC;
    *found = g->tuned_algo && own_types &&
             gemm_algo_find(&p->rec.geom.tune, g->op, g->rows, algo, stale);
    return KLJIT_SUCCESS;
  }
  cublasLtMatmulAlgo_t cand[16];
  int count = 0;
  kljit_status st = gemm_candidates(p->ctx->lt, &g->types, &g->shape, g->op, g->rows,
                                    GEMM_WORKSPACE_BYTES, cand, 16, &count);
  if (st == KLJIT_SUCCESS && g->lt_index >= count)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "KLJIT_GEMM (options->gemm_choice) asks for algorithm %d of cuBLASLt's list "
                   "for the %s GEMM, which has %d", g->lt_index, SLOT_NAME[s], count);
  if (st == KLJIT_SUCCESS) *algo = cand[g->lt_index], *found = 1;
  return st;
}

/* Every used slot's cuBLASLt operation, prepared once for the recipe's chunk rows (a generated
 * slot's too: nothing else runs in its place, but the tuner times it against it), and each
 * generated slot's kernel: executes only run them. One description line per tuned slot says
 * what runs and where it came from. */
static kljit_status prepare_gemms(kljit_plan *p, jit_bin *gemm_bins, strbuf *desc) {
  const recipe *r = &p->rec;
  kljit_status st = KLJIT_SUCCESS;
  int built = 0; /* gemm_bins: the generated slots' modules, in slot order (recipe_modules) */
  for (int s = 0; s < RECIPE_SLOTS && st == KLJIT_SUCCESS; s++) {
    const recipe_gemm *g = &r->gemm[s];
    if (!g->used) continue;
    cublasLtMatmulAlgo_t algo;
    int found = 0, stale = 0;
    st = slot_algo(p, (recipe_slot)s, &algo, &found, &stale);
    if (st == KLJIT_SUCCESS)
      st = gemm_prepare(p->ctx->lt, &g->types, &g->shape, g->op, g->rows, GEMM_WORKSPACE_BYTES,
                        found ? &algo : NULL, &p->gemm[s]);
    if (st == KLJIT_SUCCESS && g->engine == RECIPE_GENERATED)
      st = jgemm_load_slot(p->ctx, r, (recipe_slot)s, &gemm_bins[built++], &p->jgemm[s], desc);
    if (st != KLJIT_SUCCESS || !g->tuned_algo) continue;
    char what[96];
    if (g->engine == RECIPE_GENERATED)
      jgemm_describe(&g->variant, what, sizeof what);
    else if (g->lt_index >= 0)
      snprintf(what, sizeof what, "algorithm %d of its heuristic's list", g->lt_index);
    else
      snprintf(what, sizeof what, "%s algorithm%s", found ? "tuned" : "heuristic",
               stale ? " (a tuned one refused: another cuBLASLt version)" : "");
    const jgemm_source from = g->engine != RECIPE_GENERATED && g->from != JGEMM_FROM_OPTIONS &&
                                      found
                                  ? JGEMM_FROM_TUNING
                                  : g->from;
    st = sb_printf(desc, "  GEMM %s: %s%s (%s%s%s)\n", SLOT_NAME[s],
                   g->engine == RECIPE_GENERATED ? "generated " : "cuBLASLt, ", what, FROM[from],
                   g->why ? "; " : "", g->why ? g->why : "");
  }
  const prob_geometry *geo = &r->geom;
  if (st == KLJIT_SUCCESS && (p->pb.flags & KLJIT_FLAG_PRECISE_ACCUMULATION))
    st = sb_printf(desc, "  precise accumulation (KLJIT_FLAG_PRECISE_ACCUMULATION): %s\n",
                   r->gemm[RECIPE_LOGITS].engine == RECIPE_GENERATED
                       ? "the logits GEMM adds its accumulator into a second fp32 one every 256 "
                         "of K"
                       : "not applied: the logits GEMM is cuBLASLt's, which accumulates as it "
                         "does");
  char auto_why[112] = "";
  if (r->epilogue_auto == RECIPE_AUTO_E16)
    snprintf(auto_why, sizeof auto_why, "; the heuristics' choice for this teacher on sm_90");
  else if (r->epilogue_auto)
    snprintf(auto_why, sizeof auto_why, "; the heuristics' choice on this GPU (its DRAM: %.1f "
             "bytes an SM cycle, under %.0f)", p->ctx->dram_per_sm_cycle,
             RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE);
  if (st == KLJIT_SUCCESS && geo->dx_split > 1)
    st = sb_printf(desc, "  dX: %d slices of %lld columns (the last %lld), summed in fp32%s\n",
                   geo->dx_split, (long long)geo->dx_slice,
                   (long long)r->gemm[RECIPE_DX_LAST].shape.v,
                   r->gemm[RECIPE_DX].engine == RECIPE_GENERATED ? " in one generated launch"
                                                                 : "");
  if (st == KLJIT_SUCCESS && geo->stats_tiles)
    st = sb_printf(desc, "  row statistics (pass 1): in the logits GEMM's epilogue, %d records a "
                   "row (no %s)%s%s\n", geo->stats_tiles,
                   geo->rows.family == KSPEC_SPARSE_ROWS ? "kl_sparse_stats" : "kl_dense_stats",
                   geo->e16 ? "; the tile as fp16 scores (E16), which the rows read" : "",
                   auto_why);
  else if (st == KLJIT_SUCCESS && r->stats_why)
    st = sb_printf(desc, "  row statistics (pass 1): the row kernels' (the logits GEMM's "
                   "epilogue was asked for, but it takes %s)\n", r->stats_why);
  return st;
}

recipe_device plan_device(const kljit_context *ctx) {
  const recipe_device d = {ctx->arch, ctx->sm_count, ctx->dram_per_sm_cycle};
  return d;
}

kljit_status plan_create_tuned(kljit_context *ctx, const kljit_problem *problem,
                               const prob_tuning *chosen, const char *origin, double t0,
                               kljit_plan **out) {
  kljit_plan *p = calloc(1, sizeof *p);
  if (!p) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  p->ctx = ctx;
  p->pb = *problem;
  const recipe_device dev = plan_device(ctx);
  kljit_status st = recipe_make_on(problem, chosen, &ctx->opt, &dev, &p->rec);
  if (st != KLJIT_SUCCESS) {
    kljit_plan_destroy(p);
    return st;
  }
  const prob_geometry *g = &p->rec.geom;
  const prob_tuning *tune = &g->tune;
  strbuf desc = {0};
  sb_printf(&desc,
            "kljit %s plan on %s (sm_%d, %d SMs)\n  V=%lld H=%lld input=%s teacher=%s (%s) "
            "logits=%s grad=%s (in place)\n  chunk_rows=%lld threads=%d split=%d cluster=%d "
            "ld=%lld\n",
            KLJIT_VERSION_STRING, ctx->gpu_name, ctx->arch, ctx->sm_count,
            (long long)problem->vocab, (long long)problem->hidden,
            names_dtype(problem->input_dtype), g->rows.teacher,
            names_dtype(problem->teacher_dtype), names_dtype_tag(g->logit),
            names_dtype_tag(g->grad), (long long)tune->chunk_rows, tune->threads, tune->split,
            tune->cluster, (long long)g->ld);
  sb_printf(&desc, "  tuning from %s%s\n", origin,
            p->rec.replaced ? " (its cluster variant replaced by the two-pass heuristics: sharded)"
                            : "");
  /* every module at once: a cold plan waits for its slowest compile, not for their sum */
  const kspec *specs[RECIPE_MAX_MODULES];
  jit_bin bins[RECIPE_MAX_MODULES];
  const int nmod = recipe_modules(&p->rec, specs);
  st = jit_build_many(specs, nmod, ctx->arch, &ctx->cache, bins);
  if (st == KLJIT_SUCCESS) {
    st = ctx_enter(ctx);
    if (st != KLJIT_SUCCESS)
      for (int i = 0; i < nmod; i++) jit_bin_free(&bins[i]);
  }
  if (st == KLJIT_SUCCESS) {
    st = load_kernels(p, specs[0], &bins[0], &p->mod_rows, &p->iface_rows, &desc);
    if (st == KLJIT_SUCCESS)
      st = load_kernels(p, specs[1], &bins[1], &p->mod_helpers, &p->iface_helpers, &desc);
    const int fixed = recipe_fixed_modules(&p->rec);
    if (st == KLJIT_SUCCESS && fixed == 3)
      st = load_kernels(p, specs[2], &bins[2], &p->mod_rows_phased, &p->iface_rows_phased, &desc);
    if (st == KLJIT_SUCCESS) st = check_steps(p);
    if (st == KLJIT_SUCCESS) { /* the records' sizes this plan's buffers take, as declared */
      const kiface_manifest *m[] = {&p->iface_rows, &p->iface_helpers, &p->iface_rows_phased};
      const char *names[] = {kspec_template(specs[0]), kspec_template(specs[1]),
                             fixed == 3 ? kspec_template(specs[2]) : ""};
      st = kiface_layout_of(m, names, fixed, &p->layout);
    }
    if (st == KLJIT_SUCCESS) st = prepare_gemms(p, bins + fixed, &desc);
    ctx_leave(ctx);
    for (int i = 0; i < nmod; i++) jit_bin_free(&bins[i]); /* those a failure left */
  }
  if (st == KLJIT_SUCCESS)
    st = sb_printf(&desc, "  plan created in %.2f ms\n", 1e3 * (util_now() - t0));
  if (st != KLJIT_SUCCESS) {
    sb_free(&desc);
    kljit_plan_destroy(p);
    return st;
  }
  p->description = desc.data;
  *out = p;
  return KLJIT_SUCCESS;
}

void kljit_plan_destroy(kljit_plan *p) {
  if (!p) return;
  int loaded = p->mod_rows || p->mod_helpers || p->mod_rows_phased;
  for (int s = 0; s < RECIPE_SLOTS; s++) loaded |= p->jgemm[s].mod != NULL;
  if (loaded && ctx_enter(p->ctx) == KLJIT_SUCCESS) {
    ctx_module_release(p->ctx, p->mod_rows);
    ctx_module_release(p->ctx, p->mod_helpers);
    ctx_module_release(p->ctx, p->mod_rows_phased);
    for (int s = 0; s < RECIPE_SLOTS; s++) plan_jgemm_release(p->ctx, &p->jgemm[s]);
    ctx_leave(p->ctx);
  }
  for (int s = 0; s < RECIPE_SLOTS; s++) gemm_destroy(&p->gemm[s]);
  free(p->description);
  free(p);
}

/* Marshals and shapes the block by the kernel's manifest: nothing else knows its argument
 * order or block size. */
kljit_status plan_launch(const kljit_plan *p, kiface_step step, unsigned gx, unsigned gy,
                         const kargs *args, void *stream) {
  const plan_kernel *k = &p->kernel[step];
  if (!k->sig)
    return err_set(KLJIT_ERR_INTERNAL, "the plan has no %s kernel", kiface_step_name(step));
  void *params[KIFACE_MAX_ARGS];
  kiface_marshal(k->sig, args, params);
  return drv_check(p->ctx->drv,
                   p->ctx->drv->cuLaunchKernel(k->fn, gx, gy, 1, k->sig->threads, 1, 1,
                                               k->sig->smem, (CUstream)stream, params, NULL),
                   k->sig->name);
}

unsigned plan_threads(const kljit_plan *p, kiface_step step) {
  return p->kernel[step].sig ? p->kernel[step].sig->threads : 1;
}

const char *kljit_plan_describe(const kljit_plan *p) {
  return p && p->description ? p->description : "";
}

static kljit_status check_rows(const char *who, int64_t rows) {
  if (rows < 1 || rows > INT32_MAX)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: rows = %lld, must be in [1, 2^31)", who,
                   (long long)rows);
  return KLJIT_SUCCESS;
}

kljit_status kljit_plan_workspace_size(const kljit_plan *p, kljit_mode mode, int64_t max_rows,
                                       size_t *bytes) {
  err_clear();
  const char *who = "kljit_plan_workspace_size";
  if (!p || !bytes)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, p ? "bytes" : "plan");
  if (mode < KLJIT_MODE_FUSED || mode > KLJIT_MODE_BACKWARD)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: mode = %d", who, (int)mode);
  kljit_status st = check_rows(who, max_rows);
  if (st != KLJIT_SUCCESS) return st;
  *bytes = prob_workspace_layout(&p->pb, &p->rec.geom, &p->layout, mode, max_rows).total;
  return KLJIT_SUCCESS;
}

kljit_status kljit_plan_chunk_rows(const kljit_plan *p, int64_t rows, int64_t *chunk_rows) {
  err_clear();
  const char *who = "kljit_plan_chunk_rows";
  if (!p || !chunk_rows)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, p ? "chunk_rows" : "plan");
  kljit_status st = check_rows(who, rows);
  if (st != KLJIT_SUCCESS) return st;
  *chunk_rows = prob_chunk_rows(&p->rec.geom, rows);
  return KLJIT_SUCCESS;
}

kljit_status kljit_plan_saved_size(const kljit_plan *p, int64_t rows, size_t *bytes) {
  err_clear();
  const char *who = "kljit_plan_saved_size";
  if (!p || !bytes)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, p ? "bytes" : "plan");
  kljit_status st = check_rows(who, rows);
  if (st != KLJIT_SUCCESS) return st;
  *bytes = (size_t)kiface_saved_floats(&p->layout, rows) * sizeof(float);
  return KLJIT_SUCCESS;
}
