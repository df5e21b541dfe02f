/* SPDX-License-Identifier: Apache-2.0 */
/* host_dtype.h — host-side fp16/bf16 conversions (round to nearest even) and random inputs. */
#ifndef KLJIT_HOST_DTYPE_H
#define KLJIT_HOST_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "kljit.h"

uint16_t host_f32_to_bf16(float f);
float host_bf16_to_f32(uint16_t h);
uint16_t host_f32_to_f16(float f);
float host_f16_to_f32(uint16_t h);

/* Size in bytes of one element of `dt`. */
size_t host_dtype_size(kljit_dtype dt);
/* Stores v into element i of a buffer of dtype dt (rounded for fp16/bf16), and reads back. */
void host_store(void *buf, kljit_dtype dt, size_t i, double v);
double host_load(const void *buf, kljit_dtype dt, size_t i);

/* Deterministic generator (splitmix64 + xorshift): uniform in [0,1) and standard normal. */
typedef struct host_rng {
  uint64_t s;
} host_rng;
double host_uniform(host_rng *r);
double host_normal(host_rng *r);

#endif
