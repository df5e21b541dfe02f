/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_kernels.h — the CUDA kernels of kljit-bench (matrix_kernels.cu), callable from C:
 * deterministic input fills, the sparse teacher's expansion to dense, and the simple row
 * kernels of the unfused and forward-chunked baselines. Everything runs on the legacy default
 * stream and returns the launch's cudaError_t (0 = cudaSuccess). */
#ifndef KLJIT_MATRIX_KERNELS_H
#define KLJIT_MATRIX_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kljit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A synthetic top-K teacher: ids[r, k] = (h(seed, r) + k * stride) mod V with stride coprime
 * to V, so the K ids of a row are distinct; vals[r, k] = mass / K * (0.5 + u), u uniform in
 * [0, 1), so a row's mass is about `mass`. ids int64 [rows, k]; vals dt [rows, k]. */
cudaError_t mxk_fill_topk(int64_t *ids, void *vals, kljit_dtype dt, int64_t rows, int k,
                          int64_t vocab, double mass, uint64_t seed);

/* dense [rows, vocab] (dt) = 0 except dense[r, ids[r, k]] = vals[r, k]. */
cudaError_t mxk_expand_topk(void *dense, kljit_dtype dt, const int64_t *ids, const void *vals,
                            int64_t rows, int k, int64_t vocab);

/* What the row kernel writes over each row of `out`. */
typedef enum mxk_out {
  /* G = gscale * (m * softmax(z) - p), m = sum of the row's p: the logits gradient without
   * the reduction's scale, times a power of two that keeps fp16 G out of the subnormals. */
  MXK_OUT_GRAD = 1,
  /* gscale * q, q = softmax(z): what a framework's forward keeps for backward. */
  MXK_OUT_PROBS = 2
} mxk_out;

/* One block per row: the row's log-sum-exp, its forward KL (T = 1)
 *   l = sum_v p_v (log max(p_v, eps) - log q_v),
 * written to row_loss[r], its teacher mass m = sum_v p_v to row_mass[r] (when not NULL), and
 * G or q (see mxk_out) to out[r, 0..V) (dtype dt, leading dimension ldo). The teacher is dense
 * (teacher [rows, vocab], dt) or sparse (ids int64 [rows, k], vals dt [rows, k]: p is zero off
 * the ids). Logits z [rows, ldz] are zdt (FP32 or dt). */
typedef struct mxk_rows {
  const void *z;
  kljit_dtype zdt;
  int64_t ldz;
  const void *teacher; /* dense, or NULL */
  const int64_t *ids;  /* sparse, or NULL */
  const void *vals;
  int k;
  kljit_dtype dt;
  int64_t rows, vocab;
  double eps, gscale;
  mxk_out out_kind;
  void *out;
  int64_t ldo;
  float *row_loss, *row_mass;
} mxk_rows;
cudaError_t mxk_rows_loss(const mxk_rows *a);

/* In place: gscale * q [rows, ldq] (dt, from MXK_OUT_PROBS) becomes G = gscale * (m q - p),
 * with m from row_mass, gscale and the dense or sparse teacher as in mxk_rows (z, out unused). */
cudaError_t mxk_grad_from_probs(void *q, int64_t ldq, const mxk_rows *teacher,
                                const float *row_mass);

/* *loss = scale * sum of row_loss[0..n), summed in double in a fixed order. */
cudaError_t mxk_sum_rows(const float *row_loss, int64_t n, double scale, float *loss);

/* Sum of squares of n elements of dt, in double (synchronous; 8 KiB of scratch). */
cudaError_t mxk_sum_squares(const void *p, kljit_dtype dt, size_t n, double *out);

#ifdef __cplusplus
}
#endif
#endif
