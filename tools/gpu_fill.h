/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_fill.h — device inputs shared by the CLI demo, the GPU tests and the benchmarks. */
#ifndef KLJIT_GPU_FILL_H
#define KLJIT_GPU_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "kljit.h"

/* 1 when a CUDA device is present, 0 otherwise (tests then return TH_SKIP). */
int gpu_available(void);

/* Fills `count` elements of dtype dt (FP32, FP16, BF16) at device pointer dst with a random
 * pattern uniform in [lo, hi), a tile of 4M values (from `seed`) repeated: fast for gigabyte
 * buffers, never all zeros, the same in every process. The one input generator of the tests,
 * the CLI demo and the benchmarks. Returns 0, or 1 when an allocation or a copy fails. */
int gpu_fill(void *dst, kljit_dtype dt, size_t count, double lo, double hi, uint64_t seed);
/* gpu_fill of bf16 elements. */
int gpu_fill_bf16(void *dst, size_t count, double lo, double hi, uint64_t seed);

#endif
