/* plan.c — kljit_plan_create/destroy/describe and the size queries. */
#include "plan.h"

#include <library_types.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_algo.h"
#include "tune.h"

static int cuda_type(kljit_dtype dt) {
  return dt == KLJIT_FP32 ? CUDA_R_32F : dt == KLJIT_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

static kljit_status load_module(kljit_plan *p, const kspec *k, ctx_module **mod, int first_fn,
                                int end_fn, strbuf *desc) {
  jit_bin bin;
  kljit_status st = jit_build(k, p->ctx->arch, &p->ctx->cache, &bin);
  if (st != KLJIT_SUCCESS) return st;
  const char *how = bin.source == CACHE_MISS           ? "compiled"
                    : bin.source == CACHE_HIT_READONLY ? "read-only cache"
                                                       : "cache";
  st = sb_printf(desc, "  module %s (sm_%d): %s; render %.2f ms, compile %.1f ms, cache %.2f ms\n",
                 bin.name, p->ctx->arch, how, bin.render_ms, bin.compile_ms, bin.cache_ms);
  if (st == KLJIT_SUCCESS) st = ctx_module_acquire(p->ctx, &bin, mod);
  jit_bin_free(&bin);
  if (st != KLJIT_SUCCESS) return st;
  const drv_table *d = p->ctx->drv;
  for (const char *const *name = kspec_kernels(k); *name; name++) {
    const int slot = kspec_kernel_slot(k, *name), i = first_fn + slot;
    if (slot < 0 || i >= end_fn)
      return err_set(KLJIT_ERR_INTERNAL, "module kernel %s has no slot", *name);
    st = drv_check(d, d->cuModuleGetFunction(&p->fn[i], (*mod)->module, *name), *name);
    /* clusters of 16 blocks are beyond the portable 8 and must be allowed explicitly */
    if (st == KLJIT_SUCCESS && k->cluster > 8)
      st = drv_check(d, d->cuFuncSetAttribute(p->fn[i],
                                              CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                              1),
                     "cuFuncSetAttribute(non-portable cluster size)");
    if (st != KLJIT_SUCCESS) return st;
  }
  return KLJIT_SUCCESS;
}

/* The logits GEMM from the generated sm_90a family where jgemm_choose takes it (KLJIT_GEMM=jit,
 * or a tuned choice); cuBLASLt otherwise. */
static kljit_status load_gemms(kljit_plan *p, const prob_tuning *t, strbuf *desc) {
  const int use = jgemm_choose(&p->pb, t, p->ctx->arch, p->geom.logit, &p->gemm_logits);
  if (use < 0) return KLJIT_ERR_INVALID_ARGUMENT;
  if (!use)
    return jgemm_mode() == JGEMM_JIT
               ? sb_printf(desc, "  GEMMs: cuBLASLt (KLJIT_GEMM=jit needs sm_90, 16-bit inputs "
                                 "and H a multiple of 8)\n")
               : KLJIT_SUCCESS;
  const kspec k = jgemm_spec(&p->gemm_logits);
  kljit_status st = load_module(p, &k, &p->mod_gemm, FN_GEMM_LOGITS, FN_COUNT, desc);
  if (st == KLJIT_SUCCESS) st = jgemm_prepare(p->ctx->drv, p->fn[FN_GEMM_LOGITS], &p->gemm_logits);
  if (st == KLJIT_SUCCESS) {
    char what[64];
    jgemm_describe(&p->gemm_logits, what, sizeof what);
    st = sb_printf(desc, "  GEMMs: logits generated (%s, %s), dX and dW cuBLASLt\n", what,
                   jgemm_mode() == JGEMM_JIT ? "KLJIT_GEMM=jit" : "tuned");
  }
  return st;
}

kljit_status kljit_plan_create(kljit_context *ctx, const kljit_problem *problem,
                               kljit_plan_rigor rigor, kljit_plan **out) {
  if (!out) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_plan_create: plan is NULL");
  *out = NULL;
  if (!ctx) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_plan_create: ctx is NULL");
  kljit_status st = prob_validate(problem, "kljit_plan_create");
  if (st != KLJIT_SUCCESS) return st;
  if (rigor < KLJIT_PLAN_ESTIMATE || rigor > KLJIT_PLAN_WISDOM_ONLY)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_plan_create: rigor = %d", (int)rigor);
  const double t0 = util_now();
  /* the tuning by rigor (tune.c): wisdom, heuristics, or timing candidates now */
  prob_tuning chosen;
  strbuf origin = {0};
  st = tune_for_plan(ctx, problem, rigor, &chosen, &origin);
  if (st == KLJIT_SUCCESS)
    st = plan_create_tuned(ctx, problem, &chosen, origin.data ? origin.data : "", t0, out);
  sb_free(&origin);
  return st;
}

kljit_status plan_create_tuned(kljit_context *ctx, const kljit_problem *problem,
                               const prob_tuning *chosen, const char *origin, double t0,
                               kljit_plan **out) {
  kljit_status st;
  kljit_plan *p = calloc(1, sizeof *p);
  gemm_cache *gc = calloc(1, sizeof *gc);
  if (!p || !gc) {
    free(p);
    free(gc);
    return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  pthread_mutex_init(&gc->lock, NULL);
  p->ctx = ctx;
  p->pb = *problem;
  p->gemm = gc;
  prob_tuning tune = *chosen;
  /* a stored cluster tuning (wisdom of the same shape) cannot serve a vocabulary shard, whose
   * row statistics are merged across ranks: the shard takes the two-pass heuristics */
  const int replaced = tune.cluster && prob_sharded(problem);
  if (replaced) tune = prob_estimate(problem, ctx->sm_count, ctx->arch);
  if ((st = prob_geometry_make(problem, &tune, &p->geom))) goto fail;
  const kljit_dtype in = problem->input_dtype;
  p->gtypes.in = cuda_type(in);
  p->gtypes.logits = strcmp(p->geom.logit, "f32") == 0 ? CUDA_R_32F : cuda_type(in);
  p->gtypes.dx = cuda_type(in);
  p->gtypes.dw = p->geom.dw_workspace ? CUDA_R_32F : cuda_type(problem->grad_weight_dtype);
  p->gtypes.compute = in == KLJIT_FP32 && !(problem->flags & KLJIT_FLAG_ALLOW_TF32)
                          ? CUBLAS_COMPUTE_32F
                      : in == KLJIT_FP32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                         : CUBLAS_COMPUTE_32F;
  p->gshape.v = problem->vocab, p->gshape.h = problem->hidden, p->gshape.ld = p->geom.ld;
  p->gshape.ldg = p->geom.ldg;

  strbuf desc = {0};
  sb_printf(&desc,
            "kljit %s plan on %s (sm_%d, %d SMs)\n  V=%lld H=%lld input=%s teacher=%s (%s) "
            "logits=%s grad=%s%s\n  chunk_rows=%lld threads=%d split=%d cluster=%d ld=%lld\n",
            KLJIT_VERSION_STRING, ctx->gpu_name, ctx->arch, ctx->sm_count,
            (long long)problem->vocab, (long long)problem->hidden, prob_dtype_name(in),
            p->geom.rows.teacher, prob_dtype_name(problem->teacher_dtype), p->geom.logit,
            p->geom.grad, p->geom.grad_in_place ? " (in place)" : "",
            (long long)tune.chunk_rows, tune.threads, tune.split, tune.cluster,
            (long long)p->geom.ld);
  sb_printf(&desc, "  tuning from %s%s\n", origin,
            replaced ? " (its cluster variant replaced by the two-pass heuristics: sharded)" : "");
  int stale = 0;
  const int tuned = gemm_algo_load(gc, &tune, &stale);
  if (tuned || stale)
    sb_printf(&desc, "  GEMMs: %d tuned cuBLASLt algorithms%s\n", tuned,
              stale ? ", others refused (tuned with another cuBLASLt version)" : "");
  if ((st = ctx_enter(ctx))) goto fail_desc;
  st = load_module(p, &p->geom.rows, &p->mod_rows, FN_STATS, FN_SETUP, &desc);
  if (st == KLJIT_SUCCESS)
    st = load_module(p, &p->geom.helpers, &p->mod_helpers, FN_SETUP, FN_GEMM_LOGITS, &desc);
  if (st == KLJIT_SUCCESS) st = load_gemms(p, &tune, &desc);
  ctx_leave(ctx);
  if (st != KLJIT_SUCCESS) goto fail_desc;
  sb_printf(&desc, "  plan created in %.2f ms\n", 1e3 * (util_now() - t0));
  p->description = desc.data;
  *out = p;
  return KLJIT_SUCCESS;
fail_desc:
  sb_free(&desc);
fail:
  kljit_plan_destroy(p);
  return st;
}

void kljit_plan_destroy(kljit_plan *p) {
  if (!p) return;
  if ((p->mod_rows || p->mod_helpers || p->mod_gemm) && ctx_enter(p->ctx) == KLJIT_SUCCESS) {
    ctx_module_release(p->ctx, p->mod_rows);
    ctx_module_release(p->ctx, p->mod_helpers);
    ctx_module_release(p->ctx, p->mod_gemm);
    ctx_leave(p->ctx);
  }
  if (p->gemm) pthread_mutex_destroy(&p->gemm->lock);
  free(p->gemm);
  free(p->description);
  free(p);
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
  const char *who = "kljit_plan_workspace_size";
  if (!p || !bytes)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, p ? "bytes" : "plan");
  if (mode < KLJIT_MODE_FUSED || mode > KLJIT_MODE_BACKWARD)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: mode = %d", who, (int)mode);
  kljit_status st = check_rows(who, max_rows);
  if (st != KLJIT_SUCCESS) return st;
  *bytes = prob_workspace_layout(&p->pb, &p->geom, mode, max_rows).total;
  return KLJIT_SUCCESS;
}

kljit_status kljit_plan_saved_size(const kljit_plan *p, int64_t rows, size_t *bytes) {
  const char *who = "kljit_plan_saved_size";
  if (!p || !bytes)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, p ? "bytes" : "plan");
  kljit_status st = check_rows(who, rows);
  if (st != KLJIT_SUCCESS) return st;
  *bytes = (size_t)(PLAN_HDR_FLOATS + 4 * rows) * sizeof(float);
  return KLJIT_SUCCESS;
}
