/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_fill.c — device inputs for the CLI demo, the GPU tests and the benchmarks: whether a GPU
 * is present, and buffers filled with a reproducible random pattern. CUDA runtime only;
 * no test support, so the installed CLI links none. */
#include "gpu_fill.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/host_dtype.h"

int gpu_available(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int gpu_fill(void *dst, kljit_dtype dt, size_t count, double lo, double hi, uint64_t seed) {
  const size_t tile = (size_t)1 << 22, es = dt == KLJIT_FP32 ? 4 : 2;
  const size_t n = count < tile ? count : tile;
  unsigned char *h = malloc(n * es);
  if (!h) return 1;
  host_rng r = {seed};
  for (size_t i = 0; i < n; i++) {
    const float v = (float)(lo + (hi - lo) * host_uniform(&r));
    const uint16_t x = dt == KLJIT_FP16 ? host_f32_to_f16(v) : host_f32_to_bf16(v);
    if (es == 4)
      memcpy(h + 4 * i, &v, 4);
    else
      memcpy(h + 2 * i, &x, 2);
  }
  int rc = 0;
  for (size_t off = 0; off < count && !rc; off += n) {
    const size_t m = count - off < n ? count - off : n;
    rc = cudaMemcpy((char *)dst + off * es, h, m * es, cudaMemcpyHostToDevice) != cudaSuccess;
  }
  free(h);
  return rc;
}

int gpu_fill_bf16(void *dst, size_t count, double lo, double hi, uint64_t seed) {
  return gpu_fill(dst, KLJIT_BF16, count, lo, hi, seed);
}
