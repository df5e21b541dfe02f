/* SPDX-License-Identifier: Apache-2.0 */
/* cublaslt.c — dlopen of cuBLASLt and its entry-point table (see cublaslt.h). */
#include "cublaslt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define KLJIT_STR2(x) #x
#define KLJIT_STR(x) KLJIT_STR2(x)
/* The soname the headers were built for: the table's signatures are those of this major. */
#define CUBLASLT_SONAME "libcublasLt.so." KLJIT_STR(CUBLAS_VER_MAJOR)

static cublaslt_table table;
static kljit_status load_status;
static char load_error[1024];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *open_library(void) {
  void *lib = dlopen(CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (lib) return lib;
  char first[512];
  snprintf(first, sizeof first, "%s", dlerror());
#ifdef KLJIT_CUDA_LIBRARY_DIR
  /* A toolkit outside the loader's path (no ldconfig entry, no LD_LIBRARY_PATH) is still
   * where the build found it. */
  lib = dlopen(KLJIT_CUDA_LIBRARY_DIR "/" CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (lib) return lib;
#endif
  snprintf(load_error, sizeof load_error,
           "cannot load cuBLASLt: dlopen(%s) failed (%s); install the CUDA toolkit's cuBLAS "
           "libraries or add their directory to LD_LIBRARY_PATH",
           CUBLASLT_SONAME, first);
  return NULL;
}

static void load(void) {
  load_status = KLJIT_ERR_CUBLAS;
  void *const lib = open_library();
  if (!lib) return;
#define CUBLASLT_LOAD(name)                                                            \
  *(void **)&table.name = dlsym(lib, #name);                                           \
  if (!table.name) {                                                                   \
    snprintf(load_error, sizeof load_error, "%s has no symbol %s", CUBLASLT_SONAME, #name); \
    return;                                                                            \
  }
  CUBLASLT_FUNCTIONS(CUBLASLT_LOAD)
#undef CUBLASLT_LOAD
  load_status = KLJIT_SUCCESS;
}

kljit_status cublaslt_get(const cublaslt_table **out) {
  pthread_once(&once, load);
  if (load_status != KLJIT_SUCCESS) return err_set(load_status, "%s", load_error);
  *out = &table;
  return KLJIT_SUCCESS;
}

const cublaslt_table *cublaslt_loaded(void) { return &table; }
