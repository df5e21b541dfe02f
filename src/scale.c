/* SPDX-License-Identifier: Apache-2.0 */
/* scale.c — kljit_scale: the helpers' kl_scale kernel of a context, one per dtype, no plan.
 *
 * A framework's backward holds a fused call's gradients but, under a graph compiler, not the
 * plan that wrote them: scaling them by the upstream gradient must need only the tensor. The
 * kernel is the helpers family's kl_scale (templates/helpers.cu.lua), from the module of a
 * stand-in problem whose dtypes are the tensor's (GRAD = OUT = dtype): built through the kernel
 * cache at the first call for that dtype, kept in the context (scale[dtype]) and unloaded with
 * it. Its launch is kljit_scale_grads' (exec_scale_grid): a grid-stride pass of the block size
 * its manifest declares, which stops at once on the device when the factor is exactly 1.
 */
#include <string.h>

#include "context.h"
#include "exec.h"
#include "kiface.h"
#include "recipe.h"

/* The stand-in problem's module for `dt`: its kl_scale kernel and signature. */
static kljit_status scale_build(kljit_context *ctx, kljit_dtype dt, ctx_scale *out) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 8, pb.vocab = 256; /* any valid shape: kl_scale reads none of it */
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = pb.grad_weight_dtype = dt;
  recipe r; /* the heuristics' (NULL tuning), as a plan of it would be built */
  kljit_status st = recipe_make(&pb, NULL, &ctx->opt, ctx->arch, ctx->sm_count, &r);
  if (st != KLJIT_SUCCESS) return st;
  jit_bin bin;
  if ((st = jit_build(&r.geom.helpers, ctx->arch, &ctx->cache, &bin))) return st;
  kiface_manifest iface;
  st = kiface_parse(bin.manifest.data, bin.name, &iface);
  const kiface_kernel *sig = st == KLJIT_SUCCESS ? kiface_find(&iface, KSTEP_SCALE) : NULL;
  if (st == KLJIT_SUCCESS && !sig)
    st = err_set(KLJIT_ERR_INTERNAL, "module %s declares no scale kernel", bin.name);
  if (st == KLJIT_SUCCESS) st = ctx_module_acquire(ctx, &bin, &out->mod);
  jit_bin_free(&bin);
  if (st != KLJIT_SUCCESS) return st;
  out->sig = *sig;
  st = drv_check(ctx->drv, ctx->drv->cuModuleGetFunction(&out->fn, out->mod->module, sig->name),
                 sig->name);
  if (st != KLJIT_SUCCESS) ctx_module_release(ctx, out->mod);
  return st;
}

/* The context's kl_scale for `dt`, built at its first use (two threads may both build it: the
 * second's module reference is dropped). */
static kljit_status scale_kernel(kljit_context *ctx, kljit_dtype dt, ctx_scale *out) {
  pthread_mutex_lock(&ctx->lock);
  *out = ctx->scale[dt];
  pthread_mutex_unlock(&ctx->lock);
  if (out->fn) return KLJIT_SUCCESS;
  ctx_scale made;
  memset(&made, 0, sizeof made);
  kljit_status st = scale_build(ctx, dt, &made);
  if (st != KLJIT_SUCCESS) return st;
  pthread_mutex_lock(&ctx->lock);
  const int first = ctx->scale[dt].fn == NULL;
  if (first) ctx->scale[dt] = made;
  *out = ctx->scale[dt];
  pthread_mutex_unlock(&ctx->lock);
  if (!first) ctx_module_release(ctx, made.mod);
  return KLJIT_SUCCESS;
}

kljit_status kljit_scale(kljit_context *ctx, void *stream, void *data, kljit_dtype dtype,
                         int64_t count, const float *factor) {
  err_clear();
  const char *who = "kljit_scale";
  if (!ctx) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", who);
  if (dtype != KLJIT_FP32 && dtype != KLJIT_FP16 && dtype != KLJIT_BF16)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: dtype = %d, must be KLJIT_FP32, KLJIT_FP16 "
                   "or KLJIT_BF16", who, (int)dtype);
  if (count < 0) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: count = %lld", who,
                                (long long)count);
  if (count == 0) return KLJIT_SUCCESS;
  if (!data || !factor)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, data ? "factor" : "data");
  if ((uintptr_t)data % names_dtype_size(dtype) || (uintptr_t)factor % 4)
    return err_set(KLJIT_ERR_MISALIGNED, "%s: %s = %p is not aligned to its element", who,
                   (uintptr_t)factor % 4 ? "factor" : "data",
                   (uintptr_t)factor % 4 ? (const void *)factor : data);
  kljit_status st = ctx_enter(ctx);
  if (st != KLJIT_SUCCESS) return st;
  ctx_scale k;
  st = scale_kernel(ctx, dtype, &k);
  if (st == KLJIT_SUCCESS) {
    const unsigned blocks = exec_scale_grid(count, k.sig.threads, ctx->sm_count);
    kargs a;
    memset(&a, 0, sizeof a);
    a.data = data, a.count = count, a.factor = factor, a.out_dtype = 1; /* OUT = dtype */
    void *params[KIFACE_MAX_ARGS];
    kiface_marshal(&k.sig, &a, params);
    st = drv_check(ctx->drv,
                   ctx->drv->cuLaunchKernel(k.fn, blocks, 1, 1, k.sig.threads, 1, 1, k.sig.smem,
                                            (CUstream)stream, params, NULL),
                   k.sig.name);
  }
  ctx_leave(ctx);
  return st;
}
