/* gemm.c — cuBLASLt matmuls of the chunk loop (see gemm.h for the shapes). */
#include "gemm.h"

#include <string.h>

#include "cublaslt.h"

typedef struct gemm_desc {
  cublasOperation_t ta, tb;
  uint64_t m, n, k;
  int64_t lda, ldb, ldc;
  int ta_type, tb_type, tc_type;
} gemm_desc;

static gemm_desc describe(const gemm_types *ty, const gemm_shape *sh, gemm_kind kind,
                          int64_t n) {
  gemm_desc d;
  memset(&d, 0, sizeof d);
  d.ta_type = d.tb_type = ty->in;
  switch (kind) {
  case GEMM_LOGITS: /* A = W (H x V col-major, op T), B = X (H x n), C = Z (V x n, ld LD) */
    d.ta = CUBLAS_OP_T, d.tb = CUBLAS_OP_N;
    d.m = (uint64_t)sh->v, d.n = (uint64_t)n, d.k = (uint64_t)sh->h;
    d.lda = sh->h, d.ldb = sh->h, d.ldc = sh->ld;
    d.tc_type = ty->logits;
    break;
  case GEMM_DX: /* A = W (H x V), B = G (V x n, ld LD), C = dX (H x n) */
    d.ta = CUBLAS_OP_N, d.tb = CUBLAS_OP_N;
    d.m = (uint64_t)sh->h, d.n = (uint64_t)n, d.k = (uint64_t)sh->v;
    d.lda = sh->h, d.ldb = sh->ldg, d.ldc = sh->h;
    d.tc_type = ty->dx;
    break;
  case GEMM_DW: /* A = X (H x n), B = G (V x n, ld LD; op T), C = dW (H x V) */
    d.ta = CUBLAS_OP_N, d.tb = CUBLAS_OP_T;
    d.m = (uint64_t)sh->h, d.n = (uint64_t)sh->v, d.k = (uint64_t)n;
    d.lda = sh->h, d.ldb = sh->ldg, d.ldc = sh->h;
    d.tc_type = ty->dw;
    break;
  }
  return d;
}

static kljit_status lt_check(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return KLJIT_SUCCESS;
  return err_set(KLJIT_ERR_CUBLAS, "%s: %s", what, cublaslt_loaded()->cublasLtGetStatusString(s));
}

kljit_status gemm_run(cublasLtHandle_t lt, gemm_cache *cache, const gemm_types *ty,
                      const gemm_shape *sh, gemm_kind kind, int64_t n, const void *a,
                      const void *b, void *c, float alpha, float beta, void *ws,
                      size_t ws_size, void *stream) {
  const cublaslt_table *const L = cublaslt_loaded(); /* loaded by the context */
  const int beta_zero = beta == 0.0f;
  const gemm_desc d = describe(ty, sh, kind, n);
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  kljit_status st = lt_check(L->cublasLtMatmulDescCreate(&op, (cublasComputeType_t)ty->compute,
                                                      CUDA_R_32F),
                             "cublasLtMatmulDescCreate");
  if (st) return st;
  L->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &d.ta, sizeof d.ta);
  L->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &d.tb, sizeof d.tb);
  const uint64_t ar = d.ta == CUBLAS_OP_N ? d.m : d.k, ac = d.ta == CUBLAS_OP_N ? d.k : d.m;
  const uint64_t br = d.tb == CUBLAS_OP_N ? d.k : d.n, bc = d.tb == CUBLAS_OP_N ? d.n : d.k;
  if (!st)
    st = lt_check(L->cublasLtMatrixLayoutCreate(&la, (cudaDataType)d.ta_type, ar, ac, d.lda),
                  "cublasLtMatrixLayoutCreate(A)");
  if (!st)
    st = lt_check(L->cublasLtMatrixLayoutCreate(&lb, (cudaDataType)d.tb_type, br, bc, d.ldb),
                  "cublasLtMatrixLayoutCreate(B)");
  if (!st)
    st = lt_check(L->cublasLtMatrixLayoutCreate(&lc, (cudaDataType)d.tc_type, d.m, d.n, d.ldc),
                  "cublasLtMatrixLayoutCreate(C)");

  /* memoized algorithm for (kind, n, beta) */
  cublasLtMatmulAlgo_t algo;
  int found = 0;
  pthread_mutex_lock(&cache->lock);
  for (int i = 0; i < GEMM_CACHE_SLOTS; i++) {
    const gemm_algo_slot *s = &cache->slots[i];
    if (s->used && s->kind == kind && s->n == n && s->beta_zero == beta_zero) {
      algo = s->algo;
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&cache->lock);
  if (!st && !found) {
    st = lt_check(L->cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    if (!st) {
      uint64_t cap = ws_size;
      L->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &cap, sizeof cap);
      cublasLtMatmulHeuristicResult_t h;
      int count = 0;
      st = lt_check(
          L->cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &h, &count),
          "cublasLtMatmulAlgoGetHeuristic");
      if (!st && count == 0)
        st = err_set(KLJIT_ERR_CUBLAS, "cuBLASLt has no algorithm for the %s GEMM (m=%llu n=%llu "
                     "k=%llu)", kind == GEMM_LOGITS ? "logits" : kind == GEMM_DX ? "dX" : "dW",
                     (unsigned long long)d.m, (unsigned long long)d.n, (unsigned long long)d.k);
      if (!st) {
        algo = h.algo;
        pthread_mutex_lock(&cache->lock);
        gemm_algo_slot *s = &cache->slots[cache->next];
        cache->next = (cache->next + 1) % GEMM_CACHE_SLOTS;
        s->used = 1, s->kind = kind, s->n = n, s->beta_zero = beta_zero, s->algo = algo;
        pthread_mutex_unlock(&cache->lock);
      }
    }
  }
  if (!st) {
    st = lt_check(L->cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &algo, ws,
                                 ws_size, (cudaStream_t)stream),
                  "cublasLtMatmul");
  }
  if (pref) L->cublasLtMatmulPreferenceDestroy(pref);
  if (lc) L->cublasLtMatrixLayoutDestroy(lc);
  if (lb) L->cublasLtMatrixLayoutDestroy(lb);
  if (la) L->cublasLtMatrixLayoutDestroy(la);
  L->cublasLtMatmulDescDestroy(op);
  return st;
}
