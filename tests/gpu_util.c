/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_util.c — device buffers and error norms for GPU tests and benchmarks. */
#include "gpu_util.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int same_text(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Did the environment's options change since `was` (a test's setenv between cases)? */
static int options_changed(const kljit_context_options *was, const char *was_dir,
                           const char *was_path, const char *was_choice,
                           const kljit_context_options *now) {
  return was->flags != now->flags || was->row_kernel != now->row_kernel ||
         was->chunk_rows != now->chunk_rows || was->tune_rows != now->tune_rows ||
         was->tune_budget_s != now->tune_budget_s || was->gemm != now->gemm ||
         was->dx_split != now->dx_split || !same_text(was_dir, now->cache_dir) ||
         !same_text(was_path, now->cache_path) || !same_text(was_choice, now->gemm_choice);
}

int gpu_test_context(kljit_context **ctx) {
  static kljit_context *the_ctx;
  static kljit_context_options the_opt;
  static char the_dir[4096], the_path[4096], the_choice[4096];
  static int has_dir, has_path, has_choice;
  if (!gpu_available()) return 77;
  /* a context reads the environment once, when it is created: a test that changed it since
   * (KLJIT_CHUNK_ROWS, KLJIT_ROW_KERNEL, KLJIT_TUNE_*, KLJIT_GEMM, KLJIT_DX_SPLIT) gets a new
   * context, and must hold no
   * plan of the old one */
  kljit_context_options now;
  if (kljit_context_options_default(&now) != KLJIT_SUCCESS) return 1;
  if (the_ctx && options_changed(&the_opt, has_dir ? the_dir : NULL, has_path ? the_path : NULL,
                                 has_choice ? the_choice : NULL, &now)) {
    kljit_context_destroy(the_ctx);
    the_ctx = NULL;
  }
  if (!the_ctx) {
    the_opt = now;
    has_dir = now.cache_dir != NULL, has_path = now.cache_path != NULL;
    has_choice = now.gemm_choice != NULL; /* KLJIT_GEMM's list form */
    snprintf(the_choice, sizeof the_choice, "%s", now.gemm_choice ? now.gemm_choice : "");
    snprintf(the_dir, sizeof the_dir, "%s", now.cache_dir ? now.cache_dir : "");
    snprintf(the_path, sizeof the_path, "%s", now.cache_path ? now.cache_path : "");
  }
  if (!the_ctx && kljit_context_create(&the_ctx, 0, NULL) != KLJIT_SUCCESS) {
    fprintf(stderr, "context: %s\n", kljit_last_error());
    return 1;
  }
  *ctx = the_ctx;
  return 0;
}

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

int gbuf_alloc(gbuf *b, kljit_dtype dt, size_t n) {
  b->dt = dt, b->n = n, b->ptr = NULL;
  return cuda_ok(cudaMalloc(&b->ptr, n * host_dtype_size(dt) + 16), "cudaMalloc");
}

void gbuf_free(gbuf *b) {
  if (b->ptr) cudaFree(b->ptr);
  b->ptr = NULL;
}

int gbuf_upload(gbuf *b, const double *v, double *rounded) {
  const size_t es = host_dtype_size(b->dt);
  char *h = malloc(b->n * es + 1);
  if (!h) return 1;
  for (size_t i = 0; i < b->n; i++) {
    host_store(h, b->dt, i, v[i]);
    if (rounded) rounded[i] = host_load(h, b->dt, i);
  }
  int r = cuda_ok(cudaMemcpy(b->ptr, h, b->n * es, cudaMemcpyHostToDevice), "upload");
  free(h);
  return r;
}

int gbuf_bytes(const gbuf *b, void *host) {
  return cuda_ok(cudaMemcpy(host, b->ptr, b->n * host_dtype_size(b->dt), cudaMemcpyDeviceToHost),
                 "download");
}

int gbuf_download(const gbuf *b, double *v) {
  const size_t es = host_dtype_size(b->dt);
  char *h = malloc(b->n * es + 1);
  if (!h) return 1;
  int r = gbuf_bytes(b, h);
  for (size_t i = 0; i < b->n && !r; i++) v[i] = host_load(h, b->dt, i);
  free(h);
  return r;
}

int gbuf_fill_f64(gbuf *b, double value) {
  return b->n * host_dtype_size(b->dt) < sizeof value ||
         cuda_ok(cudaMemcpy(b->ptr, &value, sizeof value, cudaMemcpyHostToDevice), "fill_f64");
}

int gbuf_poison(gbuf *b) {
  return cuda_ok(cudaMemset(b->ptr, 0xFF, b->n * host_dtype_size(b->dt)), "poison");
}

double rel_frobenius(const double *a, const double *b, size_t n) {
  return rel_frobenius_q(a, b, n, 0.0);
}

double rel_frobenius_q(const double *a, const double *b, size_t n, double quantum) {
  long double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const long double e = fabsl((long double)a[i] - b[i]) - quantum;
    const long double d = e > 0 ? e : 0;
    num += d * d;
    den += (long double)b[i] * b[i];
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return (double)sqrtl(num / den);
}

size_t max_errors(const double *a, const double *b, size_t n, double floor, double *max_abs,
                  double *max_rel) {
  size_t bad = 0;
  *max_abs = *max_rel = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) {
      bad++;
      continue;
    }
    const double d = fabs(a[i] - b[i]);
    const double r = d / fmax(fabs(b[i]), floor);
    if (d > *max_abs) *max_abs = d;
    if (r > *max_rel) *max_rel = r;
  }
  return bad;
}
