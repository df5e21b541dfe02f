/* SPDX-License-Identifier: Apache-2.0 */
/* driver.h — the CUDA driver, loaded at run time with dlopen("libcuda.so.1").
 *
 * The library, the CLI and the tests link no driver, so they load and run (render, compile,
 * cache, precompile) on a machine with no GPU and no driver. Everything that touches a GPU
 * goes through the table below, loaded once per process and immutable afterwards.
 */
#ifndef KLJIT_DRIVER_H
#define KLJIT_DRIVER_H

#include <cuda.h>

#include "util.h"

/* X(name as in cuda.h, symbol exported by libcuda.so.1) */
#define DRV_FUNCTIONS(X)                                         \
  X(cuInit, "cuInit")                                            \
  X(cuGetErrorName, "cuGetErrorName")                            \
  X(cuGetErrorString, "cuGetErrorString")                        \
  X(cuDeviceGet, "cuDeviceGet")                                  \
  X(cuDeviceGetCount, "cuDeviceGetCount")                        \
  X(cuDeviceGetName, "cuDeviceGetName")                          \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")        \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")   \
  X(cuCtxPushCurrent, "cuCtxPushCurrent_v2")                     \
  X(cuCtxPopCurrent, "cuCtxPopCurrent_v2")                       \
  X(cuModuleLoadData, "cuModuleLoadData")                        \
  X(cuModuleUnload, "cuModuleUnload")                            \
  X(cuModuleGetFunction, "cuModuleGetFunction")                  \
  X(cuFuncSetAttribute, "cuFuncSetAttribute")                    \
  X(cuLaunchKernel, "cuLaunchKernel")                            \
  X(cuPointerGetAttribute, "cuPointerGetAttribute")              \
  X(cuMemsetD32Async, "cuMemsetD32Async")                        \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")                   \
  X(cuStreamSynchronize, "cuStreamSynchronize")                  \
  /* tuning (tune_measure.c): its own buffers, stream and events */ \
  X(cuMemGetInfo, "cuMemGetInfo_v2")                             \
  X(cuMemAlloc, "cuMemAlloc_v2")                                 \
  X(cuMemFree, "cuMemFree_v2")                                   \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2")                             \
  X(cuMemcpyDtoD, "cuMemcpyDtoD_v2")                             \
  X(cuMemsetD8Async, "cuMemsetD8Async")                          \
  X(cuStreamCreate, "cuStreamCreate")                            \
  X(cuStreamDestroy, "cuStreamDestroy_v2")                       \
  X(cuEventCreate, "cuEventCreate")                              \
  X(cuEventDestroy, "cuEventDestroy_v2")                         \
  X(cuEventRecord, "cuEventRecord")                              \
  X(cuEventSynchronize, "cuEventSynchronize")                    \
  X(cuEventElapsedTime, "cuEventElapsedTime")                   \
  /* the generated sm_90a GEMMs (gemm_sm90.c): TMA descriptors, resident clusters */  \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")                \
  X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters")

typedef struct drv_table {
#define DRV_FIELD(name, sym) __typeof__(&name) name;
  DRV_FUNCTIONS(DRV_FIELD)
#undef DRV_FIELD
} drv_table;

/* Loads libcuda.so.1 and cuInit(0)s it, once per process. KLJIT_ERR_NO_DEVICE with a sentence
 * when there is no driver or cuInit fails (e.g. no GPU). */
kljit_status drv_get(const drv_table **out);

/* Turns a failing CUresult into KLJIT_ERR_CUDA with "<what>: CUDA_ERROR_X (text)". */
kljit_status drv_check(const drv_table *d, CUresult r, const char *what);

#endif
