/* gemm.h — the three GEMM shapes of the chunk loop, through cuBLASLt on the caller's stream.
 *
 * Row-major views (what the chunk loop thinks in); cuBLASLt sees their column-major transposes:
 *   logits  Z[n,V] (ld LD)  = X[n,H] W[V,H]^T      -> m=V, n=n, k=H, op(A)=T on W
 *   dX      dX[n,H]         = G[n,V] (ld LD) W     -> m=H, n=n, k=V
 *   dW      dW[V,H]        (+)= G[n,V]^T X[n,H]    -> m=H, n=V, k=n, op(B)=T on G
 * Algorithm choices come from cuBLASLt's heuristic and are memoized per shape in the gemm_cache
 * (guarded by its lock, so plans stay usable from several threads).
 */
#ifndef KLJIT_GEMM_H
#define KLJIT_GEMM_H

#include <cublasLt.h>
#include <pthread.h>

#include "util.h"

typedef enum gemm_kind { GEMM_LOGITS = 0, GEMM_DX = 1, GEMM_DW = 2 } gemm_kind;

enum { GEMM_CACHE_SLOTS = 24 };

typedef struct gemm_algo_slot {
  int used;
  gemm_kind kind;
  int64_t n;
  int beta_zero;
  cublasLtMatmulAlgo_t algo;
} gemm_algo_slot;

typedef struct gemm_cache {
  pthread_mutex_t lock;
  gemm_algo_slot slots[GEMM_CACHE_SLOTS];
  int next;
} gemm_cache;

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

/* C = alpha op(A) op(B) + beta C on `stream` (host scalars: with beta = 0, C is not read). */
kljit_status gemm_run(cublasLtHandle_t lt, gemm_cache *cache, const gemm_types *ty,
                      const gemm_shape *sh, gemm_kind kind, int64_t n, const void *a,
                      const void *b, void *c, float alpha, float beta, void *ws,
                      size_t ws_size, void *stream);

/* Stores `algo` as the memo of (kind, n, beta zero or not), replacing an earlier one. */
void gemm_cache_put(gemm_cache *cache, gemm_kind kind, int64_t n, int beta_zero,
                    const cublasLtMatmulAlgo_t *algo);

/* The tuner's candidates: up to `cap` (<= 16) algorithms of cuBLASLt's heuristic for one GEMM,
 * best first, so out[0] is what gemm_run picks untuned (tune_measure.c times them by putting
 * each in a scratch cache and calling gemm_run). */
kljit_status gemm_candidates(cublasLtHandle_t lt, const gemm_types *ty, const gemm_shape *sh,
                             gemm_kind kind, int64_t n, size_t ws_size, cublasLtMatmulAlgo_t *out,
                             int cap, int *count);

enum { GEMM_WORKSPACE_BYTES = 32 << 20 };

#endif
