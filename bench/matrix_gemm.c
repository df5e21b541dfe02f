/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_gemm.c — the head's three GEMMs through cuBLAS, and the floor made of them alone.
 *
 * Row-major X [n, H], W [V, H], z and G [n, ld] are column-major H x n, H x V and ld x n to
 * cuBLAS, so: z = X W^T is (V x n) = W^T(V x H) X(H x n); dX = G W is (H x n) = W(H x V)
 * G(V x n); dW = G^T X is (H x V) = X(H x n) G^T(n x V). All accumulate in fp32
 * (CUBLAS_COMPUTE_32F: no TF32 for fp32 inputs, as kljit without KLJIT_FLAG_ALLOW_TF32).
 */
#include <stdio.h>

#include "gpu_fill.h"
#include "matrix_kernels.h"
#include "matrix_run.h"

static cudaDataType cuda_type(kljit_dtype dt) {
  return dt == KLJIT_FP32 ? CUDA_R_32F : dt == KLJIT_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

static int gemm(mx_run *r, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                int64_t k, float alpha, const void *a, kljit_dtype adt, int64_t lda, const void *b,
                kljit_dtype bdt, int64_t ldb, float beta, void *c, kljit_dtype cdt, int64_t ldc,
                const char *what) {
  if (mx_blas_handle(r)) return 1;
  const cublasStatus_t s =
      cublasGemmEx(r->blas, ta, tb, (int)m, (int)n, (int)k, &alpha, a, cuda_type(adt), (int)lda, b,
                   cuda_type(bdt), (int)ldb, &beta, c, cuda_type(cdt), (int)ldc, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  char buf[160];
  snprintf(buf, sizeof buf, "cublasGemmEx(%s, m=%lld n=%lld k=%lld)", what, (long long)m,
           (long long)n, (long long)k);
  return mx_blas(r, s, buf);
}

int mx_gemm_logits(mx_run *r, int64_t row0, int64_t n, void *z) {
  const char *x = (const char *)r->x + (size_t)row0 * r->hidden * r->es;
  return gemm(r, CUBLAS_OP_T, CUBLAS_OP_N, r->vocab, n, r->hidden, 1.0f, r->w, r->dt, r->hidden, x,
              r->dt, r->hidden, 0.0f, z, r->zdt, r->ld, "logits");
}

int mx_gemm_dx(mx_run *r, int64_t row0, int64_t n, const void *g, int64_t ldg, float alpha) {
  char *dx = (char *)r->dx + (size_t)row0 * r->hidden * r->es;
  return gemm(r, CUBLAS_OP_N, CUBLAS_OP_N, r->hidden, n, r->vocab, alpha, r->w, r->dt, r->hidden, g,
              r->dt, ldg, 0.0f, dx, r->dt, r->hidden, "dX");
}

int mx_gemm_dw(mx_run *r, int64_t row0, int64_t n, const void *g, int64_t ldg, float alpha,
               float beta) {
  const char *x = (const char *)r->x + (size_t)row0 * r->hidden * r->es;
  return gemm(r, CUBLAS_OP_N, CUBLAS_OP_T, r->hidden, r->vocab, n, alpha, x, r->dt, r->hidden, g,
              r->dt, ldg, beta, r->dw, KLJIT_FP32, r->hidden, "dW");
}

int mx_floor_setup(mx_run *r, mx_floor *f) {
  int64_t zrows = f->fwd_chunk;
  if (f->bwd_logits && f->bwd_chunk > zrows) zrows = f->bwd_chunk;
  if (zrows > r->rows) zrows = r->rows;
  const int64_t grows = f->bwd_chunk < r->rows ? f->bwd_chunk : r->rows;
  f->z = f->g = NULL;
  if (zrows > 0 && mx_alloc(r, &f->z, (size_t)zrows * r->ld * r->zes, "floor logits")) return 1;
  /* the handle now, so that its creation is never inside a timed step */
  if (mx_blas_handle(r) || mx_alloc(r, &f->g, (size_t)grows * r->ld * r->es, "floor gradient"))
    return 1;
  /* small nonzero G: GEMM speed does not depend on the values, but keep them realistic */
  return gpu_fill(f->g, r->dt, (size_t)grows * r->ld, -1e-4, 1e-4, 99)
             ? mx_fail(r, "fill floor gradient")
             : 0;
}

int mx_floor_step(mx_run *r, const mx_floor *f) {
  const float alpha = 1.0f / (float)r->rows;
  if (f->fwd_chunk > 0)
    for (int64_t row0 = 0; row0 < r->rows; row0 += f->fwd_chunk) {
      const int64_t n = r->rows - row0 < f->fwd_chunk ? r->rows - row0 : f->fwd_chunk;
      if (mx_gemm_logits(r, row0, n, f->z)) return 1;
    }
  for (int64_t row0 = 0; row0 < r->rows; row0 += f->bwd_chunk) {
    const int64_t n = r->rows - row0 < f->bwd_chunk ? r->rows - row0 : f->bwd_chunk;
    if ((f->bwd_logits && mx_gemm_logits(r, row0, n, f->z)) ||
        mx_gemm_dx(r, row0, n, f->g, r->ld, alpha) ||
        mx_gemm_dw(r, row0, n, f->g, r->ld, alpha, row0 ? 1.0f : 0.0f))
      return 1;
  }
  return 0;
}
