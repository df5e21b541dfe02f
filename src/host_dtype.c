/* SPDX-License-Identifier: Apache-2.0 */
/* host_dtype.c — host-side fp16/bf16 conversions (round to nearest even) and random inputs.
 *
 * Tests build device inputs on the host, so these conversions decide which numbers the GPU and
 * the reference both see. They must round exactly like the hardware (__float2half_rn,
 * __float2bfloat16_rn): nearest, ties to even, NaN kept NaN (never truncated into an Inf),
 * fp16 overflow to Inf, fp16 subnormals kept. Doubles are narrowed in one rounding step (see
 * narrow_to_f32_odd) so that host_store never rounds twice.
 */
#include "host_dtype.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t host_f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    /* A NaN whose payload sits only in the low 16 bits would truncate to Inf: force the quiet
     * bit so it stays NaN. */
    return (uint16_t)((u >> 16) | 0x0040u);
  }
  /* Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out of the
   * mantissa bumps the exponent, which is right (and reaches Inf past the largest bf16). */
  const uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

float host_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t host_f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {
    if (a == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN, payload kept */
  }
  /* 65520 = 65504 + half an ulp: the tie rounds to even, and 65504's mantissa is odd, so
   * everything from there on is Inf. */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) {
    /* Normal in fp16 (>= 2^-14): round the 13 dropped bits to nearest even, then rebias the
     * exponent from 127 to 15 (112 << 23). */
    const uint32_t lsb = (a >> 13) & 1u;
    return (uint16_t)(sign | ((a + 0xfffu + lsb - 0x38000000u) >> 13));
  }
  /* Subnormal or zero in fp16: adding 0.5f puts the value on the grid of 2^-24 (0.5f's ulp),
   * where the FPU rounds to nearest even; the bits above 0.5f's are the fp16 mantissa (a
   * carry to 0x400 is the smallest normal, also right). */
  const float t = f32_from_bits(a) + 0.5f;
  return (uint16_t)(sign | (f32_bits(t) - 0x3f000000u));
}

float host_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float v = ldexpf((float)m, -24); /* exact: m < 2^10 */
    return sign ? -v : v;
  }
  if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13));
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* Narrows a double to float rounding to odd: the result is the truncation toward zero with its
 * last bit forced to 1 when anything was dropped. Float keeps 16 (bf16) or 13 (fp16) more bits
 * than the final format, so rounding this to nearest even later gives the same result as one
 * correct rounding from the double; (float)(double) followed by a second rounding does not
 * (1 + 2^-11 + 2^-40 would become the tie 1 + 2^-11 and then 1.0 in fp16). */
static float narrow_to_f32_odd(double d) {
  if (isnan(d)) return (float)d;
  float f = (float)d;
  if ((double)f == d) return f;
  if (isinf(f)) {
    /* Beyond FLT_MAX's rounding range: every narrower format overflows too. */
    return f;
  }
  if ((f32_bits(f) & 1u) == 0) f = nextafterf(f, d > (double)f ? INFINITY : -INFINITY);
  return f;
}

size_t host_dtype_size(kljit_dtype dt) {
  switch (dt) {
    case KLJIT_FP32: return 4;
    case KLJIT_FP16: return 2;
    case KLJIT_BF16: return 2;
    case KLJIT_INT32: return 4;
    case KLJIT_INT64: return 8;
  }
  return 0;
}

void host_store(void *buf, kljit_dtype dt, size_t i, double v) {
  switch (dt) {
    case KLJIT_FP32: ((float *)buf)[i] = (float)v; return;
    case KLJIT_FP16: ((uint16_t *)buf)[i] = host_f32_to_f16(narrow_to_f32_odd(v)); return;
    case KLJIT_BF16: ((uint16_t *)buf)[i] = host_f32_to_bf16(narrow_to_f32_odd(v)); return;
    case KLJIT_INT32: ((int32_t *)buf)[i] = (int32_t)v; return;
    case KLJIT_INT64: ((int64_t *)buf)[i] = (int64_t)v; return;
  }
}

double host_load(const void *buf, kljit_dtype dt, size_t i) {
  switch (dt) {
    case KLJIT_FP32: return ((const float *)buf)[i];
    case KLJIT_FP16: return host_f16_to_f32(((const uint16_t *)buf)[i]);
    case KLJIT_BF16: return host_bf16_to_f32(((const uint16_t *)buf)[i]);
    case KLJIT_INT32: return ((const int32_t *)buf)[i];
    case KLJIT_INT64: return (double)((const int64_t *)buf)[i];
  }
  return NAN;
}

/* splitmix64: a full-period counter mixed through xorshift-multiply rounds, so any seed
 * (0 included) gives a good stream and runs are reproducible across machines. */
static uint64_t rng_next(host_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double host_uniform(host_rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

double host_normal(host_rng *r) {
  /* Box-Muller; 1 - u lies in (0, 1], so the log is finite. */
  const double u1 = 1.0 - host_uniform(r);
  const double u2 = host_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
