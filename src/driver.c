/* SPDX-License-Identifier: Apache-2.0 */
/* driver.c — dlopen of the CUDA driver and its entry-point table (see driver.h). */
#include "driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static drv_table table;
static kljit_status load_status;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    load_status = KLJIT_ERR_NO_DEVICE;
    snprintf(load_error, sizeof load_error,
             "no CUDA driver: dlopen(libcuda.so.1) failed (%s); kernels can still be rendered, "
             "compiled and cached, but not run",
             dlerror());
    return;
  }
#define DRV_LOAD(name, sym)                                                               \
  *(void **)&table.name = dlsym(lib, sym);                                                \
  if (!table.name) {                                                                      \
    load_status = KLJIT_ERR_NO_DEVICE;                                                    \
    snprintf(load_error, sizeof load_error, "CUDA driver too old: no symbol %s", sym);   \
    return;                                                                               \
  }
  DRV_FUNCTIONS(DRV_LOAD)
#undef DRV_LOAD
  CUresult r = table.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name = "?";
    table.cuGetErrorName(r, &name);
    load_status = KLJIT_ERR_NO_DEVICE;
    snprintf(load_error, sizeof load_error, "cuInit failed: %s (no usable GPU?)", name);
    return;
  }
  load_status = KLJIT_SUCCESS;
}

kljit_status drv_get(const drv_table **out) {
  pthread_once(&once, load);
  if (load_status != KLJIT_SUCCESS) return err_set(load_status, "%s", load_error);
  *out = &table;
  return KLJIT_SUCCESS;
}

kljit_status drv_check(const drv_table *d, CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return KLJIT_SUCCESS;
  const char *name = "CUDA_ERROR_UNKNOWN", *text = "";
  d->cuGetErrorName(r, &name);
  d->cuGetErrorString(r, &text);
  return err_set(KLJIT_ERR_CUDA, "%s: %s (%s)", what, name, text);
}
