/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_run.h — one experiment inside its child process: the problem, the shared inputs and
 * outputs every method reads and writes, the device allocations made on top of them, and the
 * first error. matrix_child.c measures; matrix_methods.c and matrix_gemm.c do the work.
 *
 * Errors: every fallible function returns 0 or 1; the first failure's text (the call, the
 * sizes, the CUDA / cuBLAS / kljit message) is kept in err and becomes the FAILED row's error.
 */
#ifndef KLJIT_MATRIX_RUN_H
#define KLJIT_MATRIX_RUN_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kljit.h"
#include "matrix_options.h"

enum { MX_MAX_ALLOCS = 32 };

typedef struct mx_run {
  const mx_options *o;
  mx_experiment e;
  int64_t rows, hidden, vocab;
  int64_t ld;      /* leading dimension of the [rows, V] buffers: V rounded up to 8 */
  kljit_dtype dt;  /* X, W, teacher, dX */
  kljit_dtype zdt; /* logits the GEMM writes: FP32 or dt */
  size_t es, zes;  /* their element sizes */
  double eps;      /* floor inside log p, kljit's default */

  /* Shared inputs and outputs, allocated and filled before the memory baseline. */
  void *x;       /* X [rows, H] dt */
  void *w;       /* W [V, H] dt */
  void *teacher; /* dense teacher probabilities [rows, V] dt, or NULL */
  int64_t *ids;  /* sparse teacher ids [rows, K] int64, or NULL */
  void *vals;    /* sparse teacher probabilities [rows, K] dt, or NULL */
  void *dx;      /* dX [rows, H] dt */
  float *dw;     /* dW [V, H] fp32 */
  float *loss;   /* scalar */
  cublasHandle_t blas;

  void *allocs[MX_MAX_ALLOCS];
  int n_allocs;
  char err[2048];
} mx_run;

/* Records the first error (printf format) and returns 1. */
int mx_fail(mx_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 0 on success, else records "what: <CUDA error name>: <string>" and returns 1. */
int mx_cuda(mx_run *r, cudaError_t e, const char *what);
int mx_blas(mx_run *r, cublasStatus_t s, const char *what);
/* cudaMalloc tracked in r->allocs; the error names `what` and the size. */
int mx_alloc(mx_run *r, void **p, size_t bytes, const char *what);
/* Frees the tracked allocations made after the first `mark` of them. */
void mx_free_from(mx_run *r, int mark);
/* The cuBLAS handle, created on first use. */
int mx_blas_handle(mx_run *r);

/* ---- matrix_gemm.c: the head's GEMMs through cuBLAS (fp32 accumulation) ------------------ */

/* z [n, ld] (zdt) = X[row0 : row0 + n] W^T */
int mx_gemm_logits(mx_run *r, int64_t row0, int64_t n, void *z);
/* dX[row0 : row0 + n] = alpha G W, G [n, ldg] dt */
int mx_gemm_dx(mx_run *r, int64_t row0, int64_t n, const void *g, int64_t ldg, float alpha);
/* dW = alpha G^T X[row0 : row0 + n] + beta dW */
int mx_gemm_dw(mx_run *r, int64_t row0, int64_t n, const void *g, int64_t ldg, float alpha,
               float beta);

/* The GEMMs of one method's fwd+bwd alone, at the same shapes (the floor):
 *   forward   when fwd_chunk > 0: a logits GEMM per fwd_chunk rows (two-phase, chunked_forward)
 *   backward  per bwd_chunk rows: a logits GEMM when bwd_logits, then dX and dW (accumulating
 *             in fp32 from the second chunk on). */
typedef struct mx_floor {
  int64_t fwd_chunk, bwd_chunk;
  int bwd_logits;
  void *z, *g; /* [max chunk, ld] zdt and [bwd_chunk, ld] dt, filled by mx_floor_setup */
} mx_floor;
int mx_floor_setup(mx_run *r, mx_floor *f);
int mx_floor_step(mx_run *r, const mx_floor *f);

#endif
