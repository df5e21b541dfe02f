/* SPDX-License-Identifier: Apache-2.0 */
/* context.h — the context: a device's primary CUDA context, its cuBLASLt handle, the kernel
 * cache configuration and the registry of loaded modules that plans share.
 *
 * Invariants: a module is loaded once per context and key; each plan that uses it holds one
 * reference; the last release unloads it. The registry is guarded by `lock`; everything else
 * in the context is immutable after kljit_context_create, so plans may run concurrently.
 */
#ifndef KLJIT_CONTEXT_H
#define KLJIT_CONTEXT_H

#include <cublasLt.h>
#include <pthread.h>

#include "cache.h"
#include "cublaslt.h"
#include "driver.h"
#include "gemm_algo.h"
#include "jit.h"
#include "kiface.h"

typedef struct ctx_module {
  char key_hash[65];
  CUmodule module;
  int refs;
  struct ctx_module *next;
} ctx_module;

/* kljit_scale's kernel for one dtype (scale.c): NULL fn until its first use. */
typedef struct ctx_scale {
  CUfunction fn;
  kiface_kernel sig;
  ctx_module *mod;
} ctx_scale;

struct kljit_context {
  const drv_table *drv;
  CUdevice device;
  CUcontext cu;
  int arch;            /* e.g. 90 */
  int sm_count;
  double dram_per_sm_cycle; /* peak DRAM bytes per SM and SM cycle (recipe_device); 0: unknown */
  char gpu_name[128];
  cublasLtHandle_t lt;
  cache_config cache;
  kljit_context_options opt; /* as created (cache_dir/cache_path NULL: they are in `cache`;
                              * gemm_choice: the copy below) */
  char *gemm_choice;         /* the options' gemm_choice, copied, or NULL */
  gemm_select gemm_sel[3];   /* each GEMM's backend by gemm_kind, as the options say */
  pthread_mutex_t lock;
  ctx_module *modules;
  ctx_scale scale[KLJIT_BF16 + 1]; /* by kljit_dtype, under `lock` (scale.c) */
};

/* The caller's options checked and copied into *out; NULL: the environment's defaults, checked
 * the same way (a bad KLJIT_GEMM or KLJIT_DX_SPLIT is refused here, naming its text). The
 * strings are the caller's still (gemm_choice checked: gemm_algo_select). */
kljit_status ctx_options_import(const kljit_context_options *user, kljit_context_options *out);

/* Makes the context's CUDA context current for the calling thread (push), and undoes it. */
kljit_status ctx_enter(const kljit_context *ctx);
void ctx_leave(const kljit_context *ctx);

/* Loads the module of a built cubin (or takes a reference on the one already loaded). */
kljit_status ctx_module_acquire(kljit_context *ctx, const jit_bin *bin, ctx_module **out);
void ctx_module_release(kljit_context *ctx, ctx_module *m);

#endif
