/* SPDX-License-Identifier: Apache-2.0 */
/* gemm.c — cuBLASLt matmuls of the chunk loop (see gemm.h for the shapes). */
#include "gemm.h"

#include <stdlib.h>
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
  const cublaslt_table *lt = cublaslt_loaded();
  kljit_status st = lt_check(lt->cublasLtMatrixLayoutCreate(la, (cudaDataType)d->ta_type, ar, ac,
                                                            d->lda),
                             "cublasLtMatrixLayoutCreate(A)");
  if (!st)
    st = lt_check(lt->cublasLtMatrixLayoutCreate(lb, (cudaDataType)d->tb_type, br, bc, d->ldb),
                  "cublasLtMatrixLayoutCreate(B)");
  if (!st)
    st = lt_check(lt->cublasLtMatrixLayoutCreate(lc, (cudaDataType)d->tc_type, d->m, d->n,
                                                 d->ldc),
                  "cublasLtMatrixLayoutCreate(C)");
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

/* Whether tuned words (from wisdom: a file anyone may have edited) are an algorithm cuBLASLt
 * runs for these layouts within ws_size bytes of workspace. They are opaque to kljit; only
 * cuBLASLt can check them, and an algorithm it refuses must never reach cublasLtMatmul. */
static int tuned_ok(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                    cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, gemm_kind kind,
                    size_t ws_size, const cublasLtMatmulAlgo_t *tuned) {
  cublasLtMatmulHeuristicResult_t r;
  memset(&r, 0, sizeof r);
  const cublasStatus_t s =
      cublaslt_loaded()->cublasLtMatmulAlgoCheck(lt, desc, la, lb, lc, lc, tuned, &r);
  if (s == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= ws_size) return 1;
  util_log("gemm: the tuned %s algorithm is refused (%s): the heuristic's instead",
           kind_name(kind),
           s != CUBLAS_STATUS_SUCCESS ? cublaslt_loaded()->cublasLtGetStatusString(s)
                                      : "it needs more workspace than the plan has");
  return 0;
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
  if (!st && tuned && tuned_ok(lt, desc, la, lb, lc, kind, ws_size, tuned)) op->algo = *tuned;
  else if (!st) st = choose_algo(lt, desc, la, lb, lc, &d, kind, ws_size, &op->algo);
  if (st) {
    free_layouts(la, lb, lc);
    cublaslt_loaded()->cublasLtMatmulDescDestroy(desc);
    memset(op, 0, sizeof *op);
    return st;
  }
  op->kind = kind, op->types = *ty, op->shape = *sh, op->n = n;
  op->desc = desc, op->la = la, op->lb = lb, op->lc = lc;
  op->memo = calloc(1, sizeof *op->memo);
  if (op->memo && pthread_mutex_init(&op->memo->lock, NULL) != 0) {
    free(op->memo);
    op->memo = NULL;
  }
  return KLJIT_SUCCESS;
}

/* The remembered layouts and algorithm of chunk size n, copied to *out: 1, or 0 if none. */
static int memo_find(gemm_memo *m, int64_t n, size_t ws_size, gemm_alt *out) {
  int found = 0;
  if (!m) return 0;
  pthread_mutex_lock(&m->lock);
  for (int i = 0; i < m->count && !found; i++)
    if (m->alt[i].n == n && m->alt[i].ws_size == ws_size) *out = m->alt[i], found = 1;
  pthread_mutex_unlock(&m->lock);
  return found;
}

/* Keeps `alt` (the memo then owns its layouts): 1, or 0 when full or another thread was first
 * (the caller frees them after its call). */
static int memo_keep(gemm_memo *m, const gemm_alt *alt) {
  int kept = 0, seen = 0;
  if (!m) return 0;
  pthread_mutex_lock(&m->lock);
  for (int i = 0; i < m->count && !seen; i++)
    seen = m->alt[i].n == alt->n && m->alt[i].ws_size == alt->ws_size;
  if (!seen && m->count < GEMM_ALTS) m->alt[m->count++] = *alt, kept = 1;
  pthread_mutex_unlock(&m->lock);
  return kept;
}

kljit_status gemm_run(cublasLtHandle_t lt, const gemm_op *op, int64_t n, const void *a,
                      const void *b, void *c, float alpha, float beta, void *ws, size_t ws_size,
                      void *stream) {
  if (n == op->n)
    return lt_check(cublaslt_loaded()->cublasLtMatmul(lt, op->desc, &alpha, a, op->la, b, op->lb, &beta, c, op->lc,
                                   c, op->lc, &op->algo, ws, ws_size, (cudaStream_t)stream),
                    "cublasLtMatmul");
  /* a chunk of another size: its own layouts and algorithm, made once */
  gemm_alt alt;
  if (memo_find(op->memo, n, ws_size, &alt))
    return lt_check(cublaslt_loaded()->cublasLtMatmul(lt, op->desc, &alpha, a, alt.la, b, alt.lb,
                                                      &beta, c, alt.lc, c, alt.lc, &alt.algo, ws,
                                                      ws_size, (cudaStream_t)stream),
                    "cublasLtMatmul");
  const gemm_desc d = describe(&op->types, &op->shape, op->kind, n);
  memset(&alt, 0, sizeof alt);
  alt.n = n, alt.ws_size = ws_size;
  kljit_status st = make_layouts(&d, &alt.la, &alt.lb, &alt.lc);
  if (!st) st = choose_algo(lt, op->desc, alt.la, alt.lb, alt.lc, &d, op->kind, ws_size, &alt.algo);
  if (!st)
    st = lt_check(cublaslt_loaded()->cublasLtMatmul(lt, op->desc, &alpha, a, alt.la, b, alt.lb,
                                                    &beta, c, alt.lc, c, alt.lc, &alt.algo, ws,
                                                    ws_size, (cudaStream_t)stream),
                  "cublasLtMatmul");
  if (st || !memo_keep(op->memo, &alt)) free_layouts(alt.la, alt.lb, alt.lc);
  return st;
}

void gemm_destroy(gemm_op *op) {
  if (!op || !op->desc) return;
  if (op->memo) {
    for (int i = 0; i < op->memo->count; i++)
      free_layouts(op->memo->alt[i].la, op->memo->alt[i].lb, op->memo->alt[i].lc);
    pthread_mutex_destroy(&op->memo->lock);
    free(op->memo);
  }
  free_layouts(op->la, op->lb, op->lc);
  cublaslt_loaded()->cublasLtMatmulDescDestroy(op->desc);
  memset(op, 0, sizeof *op);
}
