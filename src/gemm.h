/* SPDX-License-Identifier: Apache-2.0 */
/* gemm.h — the three GEMM shapes of the chunk loop, through cuBLASLt on the caller's stream.
 *
 * Row-major views (what the chunk loop thinks in); cuBLASLt sees their column-major transposes:
 *   logits  Z[n,V] (ld LD)  = X[n,H] W[V,H]^T      -> m=V, n=n, k=H, op(A)=T on W
 *   dX      dX[n,H]         = G[n,V] (ld LD) W     -> m=H, n=n, k=V
 *   dW      dW[V,H]        (+)= G[n,V]^T X[n,H]    -> m=H, n=V, k=n, op(B)=T on G
 * A plan prepares each operation once (gemm_prepare: the matmul descriptor, the three matrix
 * layouts and the tuned algorithm, else cuBLASLt's heuristic one, for its chunk size), so the
 * plan is immutable and an execute only runs them (gemm_run). A chunk of another size (the last
 * one of a call, or every chunk of a call whose chunks are capped at 3/8 of its rows) gets
 * its own layouts and heuristic algorithm at its first use, remembered for later calls (a few
 * sizes per operation, under a lock: asking cuBLASLt's heuristic on every call costs host time
 * that a short call's GPU work does not hide).
 */
#ifndef KLJIT_GEMM_H
#define KLJIT_GEMM_H

#include <cublasLt.h>
#include <pthread.h>

#include "util.h"

typedef enum gemm_kind { GEMM_LOGITS = 0, GEMM_DX = 1, GEMM_DW = 2 } gemm_kind;

/* Types of one plan's GEMMs (cudaDataType values). */
typedef struct gemm_types {
  int in;          /* X, W, G */
  int logits;      /* Z */
  int dx;          /* dX */
  int dw;          /* dW accumulator (fp32 or the weight dtype) */
  int compute;     /* cublasComputeType_t */
} gemm_types;

typedef struct gemm_shape {
  int64_t v, h;
  int64_t ld;   /* row stride of Z (elements) */
  int64_t ldg;  /* row stride of G (elements) */
} gemm_shape;

/* Layouts and algorithm of one other chunk size of an operation, made by gemm_run. */
typedef struct gemm_alt {
  int64_t n;
  size_t ws_size;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
} gemm_alt;

enum { GEMM_ALTS = 8 };

/* The other chunk sizes seen so far (a plan is shared by threads: the lock guards them). */
typedef struct gemm_memo {
  pthread_mutex_t lock;
  int count;
  gemm_alt alt[GEMM_ALTS];
} gemm_memo;

/* One prepared operation: C = alpha op(A) op(B) + beta C for chunks of `n` rows. */
typedef struct gemm_op {
  gemm_kind kind;
  gemm_types types;
  gemm_shape shape;
  int64_t n;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  gemm_memo *memo; /* other chunk sizes; NULL where it could not be allocated (none kept) */
} gemm_op;

/* Prepares `kind` for chunks of n rows: with `tuned` (the tuning's algorithm, from the running
 * cuBLASLt version: gemm_algo_find), that algorithm when cuBLASLt accepts it for these layouts
 * within ws_size bytes (cublasLtMatmulAlgoCheck; a refusal is logged); otherwise, or with NULL,
 * cuBLASLt's heuristic choice for a workspace of ws_size bytes. On failure *op holds nothing to
 * destroy. */
kljit_status gemm_prepare(cublasLtHandle_t lt, const gemm_types *ty, const gemm_shape *sh,
                          gemm_kind kind, int64_t n, size_t ws_size,
                          const cublasLtMatmulAlgo_t *tuned, gemm_op *op);

/* Runs a prepared operation on a chunk of n rows (n < op->n: the layouts and algorithm of that
 * size, made at its first use and kept in op->memo) on `stream`; host scalars: with beta = 0,
 * C is not read. */
kljit_status gemm_run(cublasLtHandle_t lt, const gemm_op *op, int64_t n, const void *a,
                      const void *b, void *c, float alpha, float beta, void *ws, size_t ws_size,
                      void *stream);

/* Frees what gemm_prepare made (a zeroed op: nothing). */
void gemm_destroy(gemm_op *op);

/* The tuner's candidates: up to `cap` (<= 16) algorithms of cuBLASLt's heuristic for one GEMM,
 * best first, so out[0] is what gemm_prepare picks untuned (tune_measure.c times each as an
 * operation prepared with it). */
kljit_status gemm_candidates(cublasLtHandle_t lt, const gemm_types *ty, const gemm_shape *sh,
                             gemm_kind kind, int64_t n, size_t ws_size, cublasLtMatmulAlgo_t *out,
                             int cap, int *count);

enum { GEMM_WORKSPACE_BYTES = 32 << 20 };

#endif
