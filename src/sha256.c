/* SPDX-License-Identifier: Apache-2.0 */
/* sha256.c — SHA-256 written from FIPS 180-4 (section 4.1.2 functions, 4.2.2 constants,
 * 5.1.1 padding, 5.3.3 initial value, 6.2.2 computation). Names cache entries and checksums
 * their contents; speed is secondary to being obviously the spec, so this is the plain
 * one-block-at-a-time form with no unrolling or SIMD. */
#include <string.h>

#include "cache.h"

/* FIPS 180-4 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first
 * 64 primes. */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32u - n)); }

/* FIPS 180-4 (4.2)-(4.7). */
static uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
static uint32_t maj(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }
static uint32_t big_sigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
static uint32_t big_sigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
static uint32_t small_sigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
static uint32_t small_sigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

/* FIPS 180-4 6.2.2: one 512-bit block. Words are big-endian regardless of the host. */
static void compress(uint32_t h[8], const uint8_t block[64]) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 |
           (uint32_t)block[4 * t + 2] << 8 | (uint32_t)block[4 * t + 3];
  for (int t = 16; t < 64; t++)
    w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];

  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < 64; t++) {
    const uint32_t t1 = hh + big_sigma1(e) + ch(e, f, g) + K[t] + w[t];
    const uint32_t t2 = big_sigma0(a) + maj(a, b, c);
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

void sha256_init(sha256_ctx *c) {
  /* FIPS 180-4 5.3.3: fractional parts of the square roots of the first 8 primes. */
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->state, h0, sizeof h0);
  c->total = 0;
  c->used = 0;
}

void sha256_update(sha256_ctx *c, const void *data, size_t len) {
  const uint8_t *p = data;
  c->total += len;
  if (c->used) {
    const size_t take = len < 64 - c->used ? len : 64 - c->used;
    memcpy(c->block + c->used, p, take);
    c->used += take;
    p += take;
    len -= take;
    if (c->used < 64) return;
    compress(c->state, c->block);
    c->used = 0;
  }
  /* Whole blocks straight from the caller's buffer: no copy for the bulk of a cubin. */
  for (; len >= 64; p += 64, len -= 64) compress(c->state, p);
  if (len) memcpy(c->block, p, len);
  c->used = len;
}

void sha256_final(sha256_ctx *c, uint8_t digest[32]) {
  /* FIPS 180-4 5.1.1: a 1 bit, zeros to 448 mod 512, then the length in bits as 64-bit
   * big-endian. The length is captured before padding bytes go through update. */
  const uint64_t bits = c->total * 8u;
  static const uint8_t pad[64] = {0x80};
  const size_t padlen = c->used < 56 ? 56 - c->used : 120 - c->used;
  sha256_update(c, pad, padlen);
  uint8_t len_be[8];
  for (int i = 0; i < 8; i++) len_be[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(c, len_be, sizeof len_be);
  for (int i = 0; i < 8; i++) {
    digest[4 * i] = (uint8_t)(c->state[i] >> 24);
    digest[4 * i + 1] = (uint8_t)(c->state[i] >> 16);
    digest[4 * i + 2] = (uint8_t)(c->state[i] >> 8);
    digest[4 * i + 3] = (uint8_t)c->state[i];
  }
  memset(c, 0, sizeof *c);
}

void sha256(const void *data, size_t len, uint8_t digest[32]) {
  sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, data, len);
  sha256_final(&c, digest);
}

void sha256_hex(const void *data, size_t len, char hex[65]) {
  uint8_t d[32];
  sha256(data, len, d);
  util_hex(d, sizeof d, hex);
}
