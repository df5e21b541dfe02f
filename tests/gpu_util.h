/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_util.h — what GPU tests and benchmarks share: device buffers of any dtype filled from
 * host doubles, read back as doubles, and the error norms they report. CUDA runtime only. */
#ifndef KLJIT_GPU_UTIL_H
#define KLJIT_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_fill.h" /* gpu_available, gpu_fill_bf16 (shared with the CLI demo) */
#include "host_dtype.h"

/* The process's kljit context on device 0, created on first use: 0 with *ctx set, 77 (skip)
 * without a GPU, 1 when creation fails (message on stderr). */
int gpu_test_context(kljit_context **ctx);

/* Device buffer of n elements of dtype dt. */
typedef struct gbuf {
  void *ptr;
  size_t n;
  kljit_dtype dt;
} gbuf;

int gbuf_alloc(gbuf *b, kljit_dtype dt, size_t n);
void gbuf_free(gbuf *b);
/* Uploads v (n doubles, converted/rounded to b->dt); if `rounded` is not NULL it receives the
 * values as the device holds them (what the reference must see). */
int gbuf_upload(gbuf *b, const double *v, double *rounded);
int gbuf_download(const gbuf *b, double *v);
/* Writes one fp64 value at the start of b (whose bytes must hold it): a kljit_args.divisor. */
int gbuf_fill_f64(gbuf *b, double value);
/* Fills with 0xFF bytes: NaN in every float dtype, so an element never written shows. */
int gbuf_poison(gbuf *b);
/* Raw bytes back (for bitwise comparisons). */
int gbuf_bytes(const gbuf *b, void *host);

/* ||a - b||_F / ||b||_F (0 when both are 0; inf when b is 0 and a is not). */
double rel_frobenius(const double *a, const double *b, size_t n);
/* The same with `quantum` forgiven per element: |a - b| counts as max(0, |a - b| - quantum). */
double rel_frobenius_q(const double *a, const double *b, size_t n, double quantum);
/* max |a - b| and max |a - b| / max(|b|, floor). Returns the count of non-finite a. */
size_t max_errors(const double *a, const double *b, size_t n, double floor, double *max_abs,
                  double *max_rel);

#endif
