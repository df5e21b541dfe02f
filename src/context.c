/* SPDX-License-Identifier: Apache-2.0 */
/* context.c — kljit_context: device binding, cuBLASLt handle, shared module registry. */
#include "context.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

kljit_status ctx_enter(const kljit_context *ctx) {
  return drv_check(ctx->drv, ctx->drv->cuCtxPushCurrent(ctx->cu), "cuCtxPushCurrent");
}

void ctx_leave(const kljit_context *ctx) {
  CUcontext popped;
  ctx->drv->cuCtxPopCurrent(&popped);
}

kljit_status kljit_context_options_default(kljit_context_options *options) {
  err_clear();
  if (!options)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_context_options_default: options is NULL");
  env_context_defaults(options);
  return KLJIT_SUCCESS;
}

kljit_status ctx_options_import(const kljit_context_options *user, kljit_context_options *out) {
  const char *who = "kljit_context_create";
  if (!user) { /* the environment's: a bad value is named before anything else can fail */
    char why[512];
    if (env_context_bad(why, sizeof why))
      return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: the environment's %s", who, why);
    env_context_defaults(out);
    return KLJIT_SUCCESS;
  }
  /* the first released struct ends at gemm; dx_split came after it */
  const size_t first = offsetof(kljit_context_options, gemm) + sizeof user->gemm;
  if (user->struct_size < first)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: options->struct_size = %zu, below the %zu bytes of the first released "
                   "kljit_context_options (fill it with kljit_context_options_default)", who,
                   user->struct_size, first);
  const kljit_status tail = util_struct_tail(user, sizeof *out, user->struct_size, who, "options");
  if (tail != KLJIT_SUCCESS) return tail;
  memset(out, 0, sizeof *out);
  memcpy(out, user, user->struct_size < sizeof *out ? user->struct_size : sizeof *out);
  out->struct_size = sizeof *out;
  const uint32_t known = KLJIT_CONTEXT_CACHE_DISABLE | KLJIT_CONTEXT_DEBUG_SKIP_GEMMS;
  if (out->flags & ~known)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: options->flags = 0x%x has unknown bits 0x%x",
                   who, out->flags, out->flags & ~known);
  /* -1 is what env.c makes of a bad variable: its sentence says which and why */
  char env[512] = "";
  if (out->row_kernel != KLJIT_ROW_KERNEL_TWO_PASS && out->row_kernel != KLJIT_ROW_KERNEL_CLUSTER)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: options->row_kernel = %d, must be KLJIT_ROW_KERNEL_TWO_PASS or "
                   "KLJIT_ROW_KERNEL_CLUSTER%s%s", who, (int)out->row_kernel,
                   env_bad(ENV_ROW_KERNEL, env, sizeof env) ? "; " : "", env);
  if (out->chunk_rows < 0 || out->chunk_rows > INT32_MAX)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: options->chunk_rows = %lld, must be 0 (the planner's) or in [1, 2^31)%s%s",
                   who, (long long)out->chunk_rows,
                   env_bad(ENV_CHUNK_ROWS, env, sizeof env) ? "; " : "", env);
  if (out->tune_rows < 1 || out->tune_rows > INT32_MAX)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: options->tune_rows = %lld, must be in "
                   "[1, 2^31)%s%s", who, (long long)out->tune_rows,
                   env_bad(ENV_TUNE_ROWS, env, sizeof env) ? "; " : "", env);
  if (!(out->tune_budget_s > 0 && out->tune_budget_s < 1e6))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: options->tune_budget_s = %g, must be in (0, 1e6) seconds%s%s", who,
                   out->tune_budget_s, env_bad(ENV_TUNE_BUDGET_S, env, sizeof env) ? "; " : "",
                   env);
  if (out->dx_split < 0 || out->dx_split > 64) {
    const char *e = env_text(ENV_DX_SPLIT); /* -1 is what env.c makes of a bad KLJIT_DX_SPLIT */
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: options->dx_split = %d%s%s%s, must be 0 (the planner's) or in [1, 64]",
                   who, (int)out->dx_split, e ? " (KLJIT_DX_SPLIT=" : "", e ? e : "", e ? ")" : "");
  }
  if (out->gemm != KLJIT_GEMM_DEFAULT && out->gemm != KLJIT_GEMM_JIT &&
      out->gemm != KLJIT_GEMM_CUBLAS)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: options->gemm = %d, must be KLJIT_GEMM_DEFAULT, KLJIT_GEMM_JIT or "
                   "KLJIT_GEMM_CUBLAS%s%s", who, (int)out->gemm,
                   env_bad(ENV_GEMM, env, sizeof env) ? "; " : "", env);
  gemm_select sel[3];
  const kljit_status st = gemm_algo_select(out, sel);
  if (st != KLJIT_SUCCESS) return err_prefix(st, "%s: ", who);
  return KLJIT_SUCCESS;
}

/* The DRAM's peak bytes per SM cycle: two transfers a memory clock over the bus, against SMs x
 * the SM clock (attributes in kHz and bits); 0 where an attribute is missing. */
static double dram_per_sm_cycle(const drv_table *d, CUdevice dev, int sms) {
  int mem_khz = 0, bus_bits = 0, sm_khz = 0;
  d->cuDeviceGetAttribute(&mem_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev);
  d->cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev);
  d->cuDeviceGetAttribute(&sm_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
  if (mem_khz <= 0 || bus_bits <= 0 || sm_khz <= 0 || sms <= 0) return 0.0;
  return 2.0 * mem_khz * (bus_bits / 8.0) / ((double)sms * sm_khz);
}

kljit_status kljit_context_create(kljit_context **out, int device,
                                  const kljit_context_options *options) {
  err_clear();
  if (!out) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_context_create: ctx is NULL");
  *out = NULL;
  kljit_context_options opt;
  kljit_status st = ctx_options_import(options, &opt);
  if (st != KLJIT_SUCCESS) return st;
  gemm_select sel[3]; /* the options' GEMM backends (checked by the import) */
  if ((st = gemm_algo_select(&opt, sel))) return st;
  if (device < 0)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_context_create: device = %d", device);
  const drv_table *d;
  st = drv_get(&d);
  if (st != KLJIT_SUCCESS) return st;
  int count = 0;
  if ((st = drv_check(d, d->cuDeviceGetCount(&count), "cuDeviceGetCount"))) return st;
  if (device >= count)
    return err_set(KLJIT_ERR_NO_DEVICE, "kljit_context_create: device %d requested, %d present",
                   device, count);
  kljit_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  ctx->drv = d;
  pthread_mutex_init(&ctx->lock, NULL);
  int major = 0, minor = 0;
  if ((st = drv_check(d, d->cuDeviceGet(&ctx->device, device), "cuDeviceGet"))) goto fail;
  d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->device);
  d->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->device);
  d->cuDeviceGetAttribute(&ctx->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->device);
  ctx->dram_per_sm_cycle = dram_per_sm_cycle(d, ctx->device, ctx->sm_count);
  d->cuDeviceGetName(ctx->gpu_name, sizeof ctx->gpu_name, ctx->device);
  ctx->arch = major * 10 + minor;
  if (ctx->arch < 80) {
    st = err_set(KLJIT_ERR_UNSUPPORTED, "GPU %s is sm_%d; kljit needs sm_80 or newer",
                 ctx->gpu_name, ctx->arch);
    goto fail;
  }
  if ((st = drv_check(d, d->cuDevicePrimaryCtxRetain(&ctx->cu, ctx->device),
                      "cuDevicePrimaryCtxRetain")))
    goto fail;
  const cublaslt_table *lt;
  if ((st = cublaslt_get(&lt))) goto fail_ctx;
  if ((st = ctx_enter(ctx))) goto fail_ctx;
  cublasStatus_t cs = lt->cublasLtCreate(&ctx->lt);
  ctx_leave(ctx);
  if (cs != CUBLAS_STATUS_SUCCESS) {
    st = err_set(KLJIT_ERR_CUBLAS, "cublasLtCreate: %s", lt->cublasLtGetStatusString(cs));
    goto fail_ctx;
  }
  if ((st = cache_config_make(opt.cache_dir, opt.cache_path,
                              (opt.flags & KLJIT_CONTEXT_CACHE_DISABLE) != 0, &ctx->cache)))
    goto fail_lt;
  ctx->opt = opt;
  ctx->opt.cache_dir = ctx->opt.cache_path = NULL; /* the caller's strings: in ctx->cache now */
  memcpy(ctx->gemm_sel, sel, sizeof sel);
  /* the caller's string, copied: recipes read the options whole (recipe_make) */
  if (opt.gemm_choice && !(ctx->gemm_choice = strdup(opt.gemm_choice))) {
    st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
    cache_config_free(&ctx->cache);
    goto fail_lt;
  }
  ctx->opt.gemm_choice = ctx->gemm_choice;
  *out = ctx;
  return KLJIT_SUCCESS;
fail_lt:
  lt->cublasLtDestroy(ctx->lt);
fail_ctx:
  d->cuDevicePrimaryCtxRelease(ctx->device);
fail:
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
  return st;
}

void kljit_context_destroy(kljit_context *ctx) {
  if (!ctx) return;
  if (ctx_enter(ctx) == KLJIT_SUCCESS) {
    for (ctx_module *m = ctx->modules, *next; m; m = next) {
      next = m->next;
      ctx->drv->cuModuleUnload(m->module);
      free(m);
    }
    cublaslt_loaded()->cublasLtDestroy(ctx->lt);
    ctx_leave(ctx);
  }
  ctx->drv->cuDevicePrimaryCtxRelease(ctx->device);
  cache_config_free(&ctx->cache);
  pthread_mutex_destroy(&ctx->lock);
  free(ctx->gemm_choice);
  free(ctx);
}

kljit_status ctx_module_acquire(kljit_context *ctx, const jit_bin *bin, ctx_module **out) {
  kljit_status st = KLJIT_SUCCESS;
  pthread_mutex_lock(&ctx->lock);
  ctx_module *m = ctx->modules;
  while (m && strcmp(m->key_hash, bin->key_hash) != 0) m = m->next;
  if (m) {
    m->refs++;
  } else if (!(m = calloc(1, sizeof *m))) {
    st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  } else {
    st = drv_check(ctx->drv, ctx->drv->cuModuleLoadData(&m->module, bin->cubin.data),
                   "cuModuleLoadData");
    if (st == KLJIT_SUCCESS) {
      memcpy(m->key_hash, bin->key_hash, sizeof m->key_hash);
      m->refs = 1;
      m->next = ctx->modules;
      ctx->modules = m;
    } else {
      err_prefix(st, "loading module %s: ", bin->name);
      free(m);
      m = NULL;
    }
  }
  pthread_mutex_unlock(&ctx->lock);
  *out = m;
  return st;
}

void ctx_module_release(kljit_context *ctx, ctx_module *m) {
  if (!m) return;
  pthread_mutex_lock(&ctx->lock);
  if (--m->refs == 0) {
    ctx_module **pp = &ctx->modules;
    while (*pp != m) pp = &(*pp)->next;
    *pp = m->next;
    ctx->drv->cuModuleUnload(m->module);
    free(m);
  }
  pthread_mutex_unlock(&ctx->lock);
}
