/* SPDX-License-Identifier: Apache-2.0 */
/* plan.c — kljit_plan_create/destroy/describe and the size queries. */
#include "plan.h"

#include <library_types.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_algo.h"

static int cuda_type(kljit_dtype dt) {
  return dt == KLJIT_FP32 ? CUDA_R_32F : dt == KLJIT_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* Loads one module and resolves its kernels by the manifest that came with it (rendered now, or
 * stored with the cubin and checked against the template's by jit_build). */
static kljit_status load_module(kljit_plan *p, const kspec *k, ctx_module **mod,
                                kiface_manifest *iface, strbuf *desc) {
  jit_bin bin;
  kljit_status st = jit_build(k, p->ctx->arch, &p->ctx->cache, &bin);
  if (st != KLJIT_SUCCESS) return st;
  const char *how = bin.source == CACHE_MISS           ? "compiled"
                    : bin.source == CACHE_HIT_READONLY ? "read-only cache"
                                                       : "cache";
  st = sb_printf(desc, "  module %s (sm_%d): %s; render %.2f ms, compile %.1f ms, cache %.2f ms\n",
                 bin.name, p->ctx->arch, how, bin.render_ms, bin.compile_ms, bin.cache_ms);
  if (st == KLJIT_SUCCESS) st = kiface_parse(bin.manifest.data, bin.name, iface);
  if (st == KLJIT_SUCCESS) st = ctx_module_acquire(p->ctx, &bin, mod);
  jit_bin_free(&bin);
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
    if (st == KLJIT_SUCCESS && k->cluster > 8)
      st = drv_check(d, d->cuFuncSetAttribute(pk->fn,
                                              CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                              1),
                     "cuFuncSetAttribute(non-portable cluster size)");
    if (st != KLJIT_SUCCESS) return st;
    pk->sig = sig;
  }
  return KLJIT_SUCCESS;
}

/* Every step the plan's executes launch must have its kernel: a template that stops declaring
 * one fails here, at plan time, not at the first call that needs it. */
static kljit_status check_steps(const kljit_plan *p) {
  for (int s = 0; s < KSTEP_COUNT; s++) {
    const int needed = s == KSTEP_STATS || s == KSTEP_MERGE ? !p->geom.tune.cluster
                       : s == KSTEP_CHECK ? (p->pb.flags & KLJIT_FLAG_CHECK_INPUTS) != 0
                       : s == KSTEP_SUMS  ? p->geom.rows.div != NULL && !p->geom.tune.cluster
                                          : 1;
    if (needed && !p->kernel[s].sig)
      return err_set(KLJIT_ERR_INTERNAL, "the plan's modules declare no %s kernel",
                     kiface_step_name((kiface_step)s));
  }
  return KLJIT_SUCCESS;
}

/* The logits GEMM from the generated sm_90a family where jgemm_choose takes it (options.gemm
 * KLJIT_GEMM_JIT, or a tuned choice); cuBLASLt otherwise. Its kernel takes the TMA descriptors
 * by value, which kargs cannot marshal: it has its own launch (jgemm_launch), and its manifest
 * is checked against the one jgemm_launch is written for (jgemm_check_manifest). */
static kljit_status load_gemm(kljit_plan *p, const prob_tuning *t, strbuf *desc) {
  const int mode = jgemm_mode(&p->ctx->opt);
  const int use = jgemm_choose(&p->pb, t, p->ctx->arch, p->geom.logit, mode, &p->gemm_logits);
  if (use < 0) return KLJIT_ERR_INVALID_ARGUMENT;
  if (!use)
    return mode == JGEMM_JIT ? sb_printf(desc, "  GEMMs: cuBLASLt (KLJIT_GEMM=jit needs sm_90, "
                                               "16-bit inputs and H a multiple of 8)\n")
                             : KLJIT_SUCCESS;
  const kspec k = jgemm_spec(&p->gemm_logits);
  jit_bin bin;
  kljit_status st = jit_build(&k, p->ctx->arch, &p->ctx->cache, &bin);
  if (st != KLJIT_SUCCESS) return st;
  st = jgemm_check_manifest(bin.manifest.data, bin.name);
  if (st == KLJIT_SUCCESS) st = ctx_module_acquire(p->ctx, &bin, &p->mod_gemm);
  if (st == KLJIT_SUCCESS)
    st = sb_printf(desc, "  module %s (sm_%da): %s; render %.2f ms, compile %.1f ms\n", bin.name,
                   p->ctx->arch, bin.source == CACHE_MISS ? "compiled" : "cache", bin.render_ms,
                   bin.compile_ms);
  jit_bin_free(&bin);
  const drv_table *d = p->ctx->drv;
  if (st == KLJIT_SUCCESS)
    st = drv_check(d, d->cuModuleGetFunction(&p->gemm_fn, p->mod_gemm->module, "kl_gemm"),
                   "kl_gemm");
  if (st == KLJIT_SUCCESS) st = jgemm_prepare(d, p->gemm_fn, &p->gemm_logits);
  if (st == KLJIT_SUCCESS) {
    char what[64];
    jgemm_describe(&p->gemm_logits, what, sizeof what);
    st = sb_printf(desc, "  GEMMs: logits generated (%s, %s), dX and dW cuBLASLt\n", what,
                   mode == JGEMM_JIT ? "KLJIT_GEMM=jit" : "tuned");
  }
  return st;
}

/* The GEMMs of a full chunk, prepared once with the tuning's algorithms where they were tuned
 * with the running cuBLASLt (heuristic ones otherwise): executes only run them. */
static kljit_status prepare_gemms(kljit_plan *p, const prob_tuning *t, const gemm_types *ty,
                                  const gemm_shape *sh, strbuf *desc) {
  int tuned = 0, stale = 0;
  kljit_status st = KLJIT_SUCCESS;
  for (int k = GEMM_LOGITS; k <= GEMM_DW && st == KLJIT_SUCCESS; k++) {
    cublasLtMatmulAlgo_t algo;
    int refused = 0;
    const int found = gemm_algo_find(t, k, t->chunk_rows, &algo, &refused);
    tuned += found, stale += refused;
    st = gemm_prepare(p->ctx->lt, ty, sh, (gemm_kind)k, t->chunk_rows, GEMM_WORKSPACE_BYTES,
                      found ? &algo : NULL, &p->gemm[k]);
  }
  if (st == KLJIT_SUCCESS && (tuned || stale))
    st = sb_printf(desc, "  GEMMs: %d tuned cuBLASLt algorithms%s\n", tuned,
                   stale ? ", others refused (tuned with another cuBLASLt version)" : "");
  return st;
}

kljit_status plan_create_tuned(kljit_context *ctx, const kljit_problem *problem,
                               const prob_tuning *chosen, const char *origin, double t0,
                               kljit_plan **out) {
  kljit_status st;
  kljit_plan *p = calloc(1, sizeof *p);
  if (!p) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  p->ctx = ctx;
  p->pb = *problem;
  prob_tuning tune = *chosen;
  /* a stored cluster tuning (wisdom of the same shape) cannot serve a vocabulary shard, whose
   * row statistics are merged across ranks: the shard takes the two-pass heuristics */
  const int replaced = tune.cluster && prob_sharded(problem);
  if (replaced) tune = prob_estimate_opt(problem, ctx->sm_count, ctx->arch, &ctx->opt);
  if ((st = prob_geometry_make(problem, &tune, &p->geom))) goto fail;
  if (ctx->opt.chunk_rows > 0) p->geom.chunk_cap = 0; /* the options' chunk is obeyed */
  if (ctx->opt.dx_split > 0) prob_dx_split(problem, ctx->opt.dx_split, &p->geom);
  const kljit_dtype in = problem->input_dtype;
  gemm_types gtypes;
  gtypes.in = cuda_type(in);
  gtypes.logits = cuda_type(p->geom.logit);
  gtypes.dx = cuda_type(in);
  gtypes.dw = p->geom.dw_workspace ? CUDA_R_32F : cuda_type(problem->grad_weight_dtype);
  gtypes.compute = in == KLJIT_FP32 && !(problem->flags & KLJIT_FLAG_ALLOW_TF32)
                       ? CUBLAS_COMPUTE_32F
                   : in == KLJIT_FP32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : CUBLAS_COMPUTE_32F;
  const gemm_shape gshape = {problem->vocab, problem->hidden, p->geom.ld, p->geom.ldg};

  strbuf desc = {0};
  sb_printf(&desc,
            "kljit %s plan on %s (sm_%d, %d SMs)\n  V=%lld H=%lld input=%s teacher=%s (%s) "
            "logits=%s grad=%s%s\n  chunk_rows=%lld threads=%d split=%d cluster=%d ld=%lld\n",
            KLJIT_VERSION_STRING, ctx->gpu_name, ctx->arch, ctx->sm_count,
            (long long)problem->vocab, (long long)problem->hidden, names_dtype(in),
            p->geom.rows.teacher, names_dtype(problem->teacher_dtype),
            names_dtype_tag(p->geom.logit), names_dtype_tag(p->geom.grad), p->geom.grad_in_place ? " (in place)" : "",
            (long long)tune.chunk_rows, tune.threads, tune.split, tune.cluster,
            (long long)p->geom.ld);
  sb_printf(&desc, "  tuning from %s%s\n", origin,
            replaced ? " (its cluster variant replaced by the two-pass heuristics: sharded)" : "");
  if ((st = ctx_enter(ctx))) goto fail_desc;
  st = load_module(p, &p->geom.rows, &p->mod_rows, &p->iface_rows, &desc);
  if (st == KLJIT_SUCCESS)
    st = load_module(p, &p->geom.helpers, &p->mod_helpers, &p->iface_helpers, &desc);
  if (st == KLJIT_SUCCESS) st = check_steps(p);
  if (st == KLJIT_SUCCESS) st = load_gemm(p, &tune, &desc);
  if (st == KLJIT_SUCCESS) st = prepare_gemms(p, &tune, &gtypes, &gshape, &desc);
  if (st == KLJIT_SUCCESS && p->geom.dx_split > 1) {
    /* dX of a slice of V into the fp32 sum (exec.c, run_dx_split); the last slice its own */
    gemm_types tx = gtypes;
    tx.dx = CUDA_R_32F;
    const int64_t s = p->geom.dx_slice, last = problem->vocab - (p->geom.dx_split - 1) * s;
    const gemm_shape sh0 = {s, problem->hidden, p->geom.ld, p->geom.ldg};
    const gemm_shape sh1 = {last, problem->hidden, p->geom.ld, p->geom.ldg};
    st = gemm_prepare(ctx->lt, &tx, &sh0, GEMM_DX, tune.chunk_rows, GEMM_WORKSPACE_BYTES, NULL,
                      &p->gemm_dx_slice[0]);
    if (st == KLJIT_SUCCESS)
      st = gemm_prepare(ctx->lt, &tx, &sh1, GEMM_DX, tune.chunk_rows, GEMM_WORKSPACE_BYTES,
                        NULL, &p->gemm_dx_slice[1]);
    if (st == KLJIT_SUCCESS)
      st = sb_printf(&desc, "  dX: %d GEMMs over slices of %lld columns (the last %lld), summed "
                     "in fp32\n", p->geom.dx_split, (long long)s, (long long)last);
  }
  if (st == KLJIT_SUCCESS && p->geom.dw_auto) { /* AUTO's long calls: dW into fp32 */
    gemm_types t32 = gtypes;
    t32.dw = CUDA_R_32F;
    st = gemm_prepare(ctx->lt, &t32, &gshape, GEMM_DW, tune.chunk_rows, GEMM_WORKSPACE_BYTES,
                      NULL, &p->gemm_dw32);
  }
  if (st == KLJIT_SUCCESS && problem->teacher == KLJIT_TEACHER_DENSE_HIDDEN) {
    /* Zt[n, V] (ld LD, fp32) = Xt[n, Ht] Wt[:V]^T: the logits shape with the teacher's sizes */
    const kljit_dtype td = problem->teacher_dtype;
    gemm_types tt = gtypes;
    tt.in = cuda_type(td), tt.logits = CUDA_R_32F;
    tt.compute = td == KLJIT_FP32 && !(problem->flags & KLJIT_FLAG_ALLOW_TF32)
                     ? CUBLAS_COMPUTE_32F
                 : td == KLJIT_FP32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                    : CUBLAS_COMPUTE_32F;
    const gemm_shape ts = {problem->vocab, problem->teacher_hidden, p->geom.ld, p->geom.ldg};
    st = gemm_prepare(ctx->lt, &tt, &ts, GEMM_LOGITS, tune.chunk_rows, GEMM_WORKSPACE_BYTES,
                      NULL, &p->gemm_teacher);
  }
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
  for (int k = GEMM_LOGITS; k <= GEMM_DW; k++) gemm_destroy(&p->gemm[k]);
  gemm_destroy(&p->gemm_teacher);
  gemm_destroy(&p->gemm_dx_slice[0]);
  gemm_destroy(&p->gemm_dx_slice[1]);
  gemm_destroy(&p->gemm_dw32);
  free(p->description);
  free(p);
}

/* Marshals by the kernel's manifest: nothing else knows its argument order. */
kljit_status plan_launch(const kljit_plan *p, kiface_step step, unsigned gx, unsigned gy,
                         unsigned threads, const kargs *args, void *stream) {
  const plan_kernel *k = &p->kernel[step];
  if (!k->sig)
    return err_set(KLJIT_ERR_INTERNAL, "the plan has no %s kernel", kiface_step_name(step));
  void *params[KIFACE_MAX_ARGS];
  kiface_marshal(k->sig, args, params);
  return drv_check(p->ctx->drv,
                   p->ctx->drv->cuLaunchKernel(k->fn, gx, gy, 1, threads, 1, 1, 0,
                                               (CUstream)stream, params, NULL),
                   k->sig->name);
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
  *bytes = prob_workspace_layout(&p->pb, &p->geom, mode, max_rows).total;
  return KLJIT_SUCCESS;
}

kljit_status kljit_plan_chunk_rows(const kljit_plan *p, int64_t rows, int64_t *chunk_rows) {
  err_clear();
  const char *who = "kljit_plan_chunk_rows";
  if (!p || !chunk_rows)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, p ? "chunk_rows" : "plan");
  kljit_status st = check_rows(who, rows);
  if (st != KLJIT_SUCCESS) return st;
  *chunk_rows = prob_chunk_rows(&p->geom, rows);
  return KLJIT_SUCCESS;
}

int64_t plan_saved_floats(const kljit_problem *pb, int64_t rows) {
  const int64_t per_row = pb->hard_weight != 0.0 || prob_divergence_rows(pb) ? 8 : 4;
  return PLAN_HDR_FLOATS + per_row * rows;
}

kljit_status kljit_plan_saved_size(const kljit_plan *p, int64_t rows, size_t *bytes) {
  err_clear();
  const char *who = "kljit_plan_saved_size";
  if (!p || !bytes)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, p ? "bytes" : "plan");
  kljit_status st = check_rows(who, rows);
  if (st != KLJIT_SUCCESS) return st;
  *bytes = (size_t)plan_saved_floats(&p->pb, rows) * sizeof(float);
  return KLJIT_SUCCESS;
}
