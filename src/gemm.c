/* SPDX-License-Identifier: Apache-2.0 */
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

static const char *kind_name(gemm_kind kind) {
  return kind == GEMM_LOGITS ? "logits" : kind == GEMM_DX ? "dX" : "dW";
}

/* The layouts of A, B and C for a chunk of n rows. */
static kljit_status make_layouts(const gemm_desc *d, cublasLtMatrixLayout_t *la,
                                 cublasLtMatrixLayout_t *lb, cublasLtMatrixLayout_t *lc) {
  *la = *lb = *lc = NULL;
  const uint64_t ar = d->ta == CUBLAS_OP_N ? d->m : d->k, ac = d->ta == CUBLAS_OP_N ? d->k : d->m;
  const uint64_t br = d->tb == CUBLAS_OP_N ? d->k : d->n, bc = d->tb == CUBLAS_OP_N ? d->n : d->k;
  kljit_status st =
      lt_check(cublaslt_loaded()->cublasLtMatrixLayoutCreate(la, (cudaDataType)d->ta_type, ar, ac, d->lda),
               "cublaslt_loaded()->cublasLtMatrixLayoutCreate(A)");
  if (!st) st = lt_check(cublaslt_loaded()->cublasLtMatrixLayoutCreate(lb, (cudaDataType)d->tb_type, br, bc, d->ldb),
                         "cublaslt_loaded()->cublasLtMatrixLayoutCreate(B)");
  if (!st) st = lt_check(cublaslt_loaded()->cublasLtMatrixLayoutCreate(lc, (cudaDataType)d->tc_type, d->m, d->n,
                                                    d->ldc),
                         "cublaslt_loaded()->cublasLtMatrixLayoutCreate(C)");
  return st;
}

static void free_layouts(cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                         cublasLtMatrixLayout_t lc) {
  if (lc) cublaslt_loaded()->cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublaslt_loaded()->cublasLtMatrixLayoutDestroy(lb);
  if (la) cublaslt_loaded()->cublasLtMatrixLayoutDestroy(la);
}

/* Up to `cap` algorithms of cuBLASLt's heuristic for the layouts within ws_size bytes of
 * workspace, best first (the first is what an untuned plan runs); KLJIT_ERR_CUBLAS for none. */
static kljit_status heuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc,
                              cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                              cublasLtMatrixLayout_t lc, const gemm_desc *d, gemm_kind kind,
                              size_t ws_size, cublasLtMatmulHeuristicResult_t *h, int cap,
                              int *count) {
  const cublaslt_table *t = cublaslt_loaded();
  cublasLtMatmulPreference_t pref = NULL;
  kljit_status st =
      lt_check(t->cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  if (st) return st;
  uint64_t max_ws = ws_size;
  t->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                          sizeof max_ws);
  *count = 0;
  st = lt_check(t->cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, cap, h, count),
                "cublasLtMatmulAlgoGetHeuristic");
  if (!st && *count == 0)
    st = err_set(KLJIT_ERR_CUBLAS, "cuBLASLt has no algorithm for the %s GEMM (m=%llu n=%llu "
                 "k=%llu)", kind_name(kind), (unsigned long long)d->m, (unsigned long long)d->n,
                 (unsigned long long)d->k);
  t->cublasLtMatmulPreferenceDestroy(pref);
  return st;
}

static kljit_status choose_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc,
                                cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                cublasLtMatrixLayout_t lc, const gemm_desc *d, gemm_kind kind,
                                size_t ws_size, cublasLtMatmulAlgo_t *algo) {
  cublasLtMatmulHeuristicResult_t h;
  int count = 0;
  kljit_status st = heuristic(lt, desc, la, lb, lc, d, kind, ws_size, &h, 1, &count);
  if (!st) *algo = h.algo;
  return st;
}

/* The matmul descriptor of one plan's GEMMs (compute type, transposes). */
static kljit_status make_desc(const gemm_types *ty, const gemm_desc *d,
                              cublasLtMatmulDesc_t *desc) {
  const cublaslt_table *t = cublaslt_loaded();
  *desc = NULL;
  kljit_status st = lt_check(t->cublasLtMatmulDescCreate(desc, (cublasComputeType_t)ty->compute,
                                                         CUDA_R_32F),
                             "cublasLtMatmulDescCreate");
  if (st) return st;
  t->cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSA, &d->ta, sizeof d->ta);
  t->cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSB, &d->tb, sizeof d->tb);
  return KLJIT_SUCCESS;
}

kljit_status gemm_candidates(cublasLtHandle_t lt, const gemm_types *ty, const gemm_shape *sh,
                             gemm_kind kind, int64_t n, size_t ws_size, cublasLtMatmulAlgo_t *out,
                             int cap, int *count) {
  enum { MOST = 16 };
  cublasLtMatmulHeuristicResult_t h[MOST];
  const gemm_desc d = describe(ty, sh, kind, n);
  *count = 0;
  cublasLtMatmulDesc_t desc;
  kljit_status st = make_desc(ty, &d, &desc);
  if (st) return st;
  cublasLtMatrixLayout_t la, lb, lc;
  int got = 0;
  st = make_layouts(&d, &la, &lb, &lc);
  if (!st) st = heuristic(lt, desc, la, lb, lc, &d, kind, ws_size, h, cap < MOST ? cap : MOST, &got);
  for (int i = 0; !st && i < got; i++)
    if (h[i].state == CUBLAS_STATUS_SUCCESS) out[(*count)++] = h[i].algo;
  free_layouts(la, lb, lc);
  cublaslt_loaded()->cublasLtMatmulDescDestroy(desc);
  return st;
}

kljit_status gemm_prepare(cublasLtHandle_t lt, const gemm_types *ty, const gemm_shape *sh,
                          gemm_kind kind, int64_t n, size_t ws_size,
                          const cublasLtMatmulAlgo_t *tuned, gemm_op *op) {
  memset(op, 0, sizeof *op);
  const gemm_desc d = describe(ty, sh, kind, n);
  cublasLtMatmulDesc_t desc = NULL;
  kljit_status st = make_desc(ty, &d, &desc);
  if (st) return st;
  cublasLtMatrixLayout_t la, lb, lc;
  st = make_layouts(&d, &la, &lb, &lc);
  if (!st && tuned) op->algo = *tuned;
  else if (!st) st = choose_algo(lt, desc, la, lb, lc, &d, kind, ws_size, &op->algo);
  if (st) {
    free_layouts(la, lb, lc);
    cublaslt_loaded()->cublasLtMatmulDescDestroy(desc);
    memset(op, 0, sizeof *op);
    return st;
  }
  op->kind = kind, op->types = *ty, op->shape = *sh, op->n = n;
  op->desc = desc, op->la = la, op->lb = lb, op->lc = lc;
  return KLJIT_SUCCESS;
}

kljit_status gemm_run(cublasLtHandle_t lt, const gemm_op *op, int64_t n, const void *a,
                      const void *b, void *c, float alpha, float beta, void *ws, size_t ws_size,
                      void *stream) {
  if (n == op->n)
    return lt_check(cublaslt_loaded()->cublasLtMatmul(lt, op->desc, &alpha, a, op->la, b, op->lb, &beta, c, op->lc,
                                   c, op->lc, &op->algo, ws, ws_size, (cudaStream_t)stream),
                    "cublasLtMatmul");
  /* a chunk of another size: its own layouts and algorithm, for this call */
  const gemm_desc d = describe(&op->types, &op->shape, op->kind, n);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  kljit_status st = make_layouts(&d, &la, &lb, &lc);
  if (!st) st = choose_algo(lt, op->desc, la, lb, lc, &d, op->kind, ws_size, &algo);
  if (!st)
    st = lt_check(cublaslt_loaded()->cublasLtMatmul(lt, op->desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &algo,
                                 ws, ws_size, (cudaStream_t)stream),
                  "cublasLtMatmul");
  free_layouts(la, lb, lc);
  return st;
}

void gemm_destroy(gemm_op *op) {
  if (!op || !op->desc) return;
  free_layouts(op->la, op->lb, op->lc);
  cublaslt_loaded()->cublasLtMatmulDescDestroy(op->desc);
  memset(op, 0, sizeof *op);
}
