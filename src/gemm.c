/* gemm.c — cuBLASLt matmuls of the chunk loop (see gemm.h for the shapes). */
#include "gemm.h"

#include <string.h>

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
  return err_set(KLJIT_ERR_CUBLAS, "%s: %s", what, cublasLtGetStatusString(s));
}

/* The matmul and its three layouts (C doubles as D); on failure none is left to destroy. */
typedef struct gemm_op {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
} gemm_op;

static void op_destroy(gemm_op *g) {
  if (g->lc) cublasLtMatrixLayoutDestroy(g->lc);
  if (g->lb) cublasLtMatrixLayoutDestroy(g->lb);
  if (g->la) cublasLtMatrixLayoutDestroy(g->la);
  if (g->op) cublasLtMatmulDescDestroy(g->op);
  memset(g, 0, sizeof *g);
}

static kljit_status op_create(const gemm_types *ty, const gemm_desc *dp, gemm_op *g) {
  const gemm_desc d = *dp;
  memset(g, 0, sizeof *g);
  kljit_status st = lt_check(cublasLtMatmulDescCreate(&g->op, (cublasComputeType_t)ty->compute,
                                                      CUDA_R_32F),
                             "cublasLtMatmulDescCreate");
  if (st) return st;
  cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &d.ta, sizeof d.ta);
  cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &d.tb, sizeof d.tb);
  const uint64_t ar = d.ta == CUBLAS_OP_N ? d.m : d.k, ac = d.ta == CUBLAS_OP_N ? d.k : d.m;
  const uint64_t br = d.tb == CUBLAS_OP_N ? d.k : d.n, bc = d.tb == CUBLAS_OP_N ? d.n : d.k;
  st = lt_check(cublasLtMatrixLayoutCreate(&g->la, (cudaDataType)d.ta_type, ar, ac, d.lda),
                "cublasLtMatrixLayoutCreate(A)");
  if (!st) st = lt_check(cublasLtMatrixLayoutCreate(&g->lb, (cudaDataType)d.tb_type, br, bc, d.ldb),
                         "cublasLtMatrixLayoutCreate(B)");
  if (!st)
    st = lt_check(cublasLtMatrixLayoutCreate(&g->lc, (cudaDataType)d.tc_type, d.m, d.n, d.ldc),
                  "cublasLtMatrixLayoutCreate(C)");
  if (st) op_destroy(g);
  return st;
}

/* Up to `cap` algorithms of cuBLASLt's heuristic for `g`, best first (the first is the one an
 * untuned plan runs); KLJIT_ERR_CUBLAS when there is none. */
static kljit_status heuristic(cublasLtHandle_t lt, const gemm_op *g, const gemm_desc *d,
                              gemm_kind kind, size_t ws_size, cublasLtMatmulHeuristicResult_t *h,
                              int cap, int *count) {
  cublasLtMatmulPreference_t pref = NULL;
  kljit_status st =
      lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  if (st) return st;
  uint64_t max_ws = ws_size;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                       sizeof max_ws);
  *count = 0;
  st = lt_check(cublasLtMatmulAlgoGetHeuristic(lt, g->op, g->la, g->lb, g->lc, g->lc, pref, cap, h,
                                               count),
                "cublasLtMatmulAlgoGetHeuristic");
  if (!st && *count == 0)
    st = err_set(KLJIT_ERR_CUBLAS, "cuBLASLt has no algorithm for the %s GEMM (m=%llu n=%llu "
                 "k=%llu)", kind == GEMM_LOGITS ? "logits" : kind == GEMM_DX ? "dX" : "dW",
                 (unsigned long long)d->m, (unsigned long long)d->n, (unsigned long long)d->k);
  cublasLtMatmulPreferenceDestroy(pref);
  return st;
}

void gemm_cache_put(gemm_cache *cache, gemm_kind kind, int64_t n, int beta_zero,
                    const cublasLtMatmulAlgo_t *algo) {
  pthread_mutex_lock(&cache->lock);
  gemm_algo_slot *s = NULL;
  for (int i = 0; i < GEMM_CACHE_SLOTS && !s; i++) /* a second put replaces the first */
    if (cache->slots[i].used && cache->slots[i].kind == kind && cache->slots[i].n == n &&
        cache->slots[i].beta_zero == beta_zero)
      s = &cache->slots[i];
  if (!s) {
    s = &cache->slots[cache->next];
    cache->next = (cache->next + 1) % GEMM_CACHE_SLOTS;
  }
  s->used = 1, s->kind = kind, s->n = n, s->beta_zero = beta_zero, s->algo = *algo;
  pthread_mutex_unlock(&cache->lock);
}

kljit_status gemm_candidates(cublasLtHandle_t lt, const gemm_types *ty, const gemm_shape *sh,
                             gemm_kind kind, int64_t n, size_t ws_size, cublasLtMatmulAlgo_t *out,
                             int cap, int *count) {
  enum { MOST = 16 };
  cublasLtMatmulHeuristicResult_t h[MOST];
  const gemm_desc d = describe(ty, sh, kind, n);
  gemm_op g;
  *count = 0;
  kljit_status st = op_create(ty, &d, &g);
  if (st) return st;
  int got = 0;
  st = heuristic(lt, &g, &d, kind, ws_size, h, cap < MOST ? cap : MOST, &got);
  for (int i = 0; !st && i < got; i++)
    if (h[i].state == CUBLAS_STATUS_SUCCESS) out[(*count)++] = h[i].algo;
  op_destroy(&g);
  return st;
}

kljit_status gemm_run(cublasLtHandle_t lt, gemm_cache *cache, const gemm_types *ty,
                      const gemm_shape *sh, gemm_kind kind, int64_t n, const void *a,
                      const void *b, void *c, float alpha, float beta, void *ws,
                      size_t ws_size, void *stream) {
  const int beta_zero = beta == 0.0f;
  const gemm_desc d = describe(ty, sh, kind, n);
  gemm_op g;
  kljit_status st = op_create(ty, &d, &g);
  if (st) return st;

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
    cublasLtMatmulHeuristicResult_t h;
    int count = 0;
    st = heuristic(lt, &g, &d, kind, ws_size, &h, 1, &count);
    if (!st) {
      algo = h.algo;
      gemm_cache_put(cache, kind, n, beta_zero, &algo);
    }
  }
  if (!st) {
    st = lt_check(cublasLtMatmul(lt, g.op, &alpha, a, g.la, b, g.lb, &beta, c, g.lc, c, g.lc,
                                 &algo, ws, ws_size, (cudaStream_t)stream),
                  "cublasLtMatmul");
  }
  op_destroy(&g);
  return st;
}
