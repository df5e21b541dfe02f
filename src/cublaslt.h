/* SPDX-License-Identifier: Apache-2.0 */
/* cublaslt.h — cuBLASLt, loaded at run time with dlopen when the first context is created.
 *
 * libcublasLt is half a gigabyte: linking it at load time cost every process that merely links
 * kljit (the CLI's version, info, cache and precompile commands, the Python binding's checks)
 * half a second and 200 MB of resident memory, for GEMMs only a context on a GPU ever runs.
 * The library is built against the toolkit's cublasLt.h (types and constants) but links no
 * cuBLASLt; everything calls through the table below, loaded once per process and immutable
 * afterwards, like the driver's (driver.h).
 */
#ifndef KLJIT_CUBLASLT_H
#define KLJIT_CUBLASLT_H

#include <cublasLt.h>

#include "util.h"

/* X(name as in cublasLt.h): each is looked up under its own name. */
#define CUBLASLT_FUNCTIONS(X)              \
  X(cublasLtCreate)                        \
  X(cublasLtGetVersion)                    \
  X(cublasLtDestroy)                       \
  X(cublasLtGetStatusString)               \
  X(cublasLtMatmulDescCreate)              \
  X(cublasLtMatmulDescDestroy)             \
  X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatrixLayoutCreate)            \
  X(cublasLtMatrixLayoutDestroy)           \
  X(cublasLtMatmulPreferenceCreate)        \
  X(cublasLtMatmulPreferenceDestroy)       \
  X(cublasLtMatmulPreferenceSetAttribute)  \
  X(cublasLtMatmulAlgoGetHeuristic)        \
  X(cublasLtMatmulAlgoCheck)               \
  X(cublasLtMatmul)

typedef struct cublaslt_table {
#define CUBLASLT_FIELD(name) __typeof__(&name) name;
  CUBLASLT_FUNCTIONS(CUBLASLT_FIELD)
#undef CUBLASLT_FIELD
} cublaslt_table;

/* Loads libcublasLt.so.<major of the headers> (the loader's search path, then the toolkit's
 * library directory known at build time), once per process. KLJIT_ERR_CUBLAS with the dlopen
 * error when it cannot be loaded. */
kljit_status cublaslt_get(const cublaslt_table **out);

/* The table after a successful cublaslt_get (every context has made one): for code that runs
 * only under a context, such as the GEMMs. */
const cublaslt_table *cublaslt_loaded(void);

#endif
