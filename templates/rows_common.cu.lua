%-- SPDX-License-Identifier: Apache-2.0
%-- rows_common.cu.lua: device code the row families (dense_rows, sparse_rows) share, emitted
%-- where a family includes it: the pass modes, storing and zeroing G, the gradient's scale.
%-- Needs V, VEC, THREADS, grad_t and the records (HDR) defined before it (every family defines
%-- them first).
enum { MODE_FUSED = 0, MODE_FORWARD = 1, MODE_BACKWARD = 2 };

/* Stores VEC gradient values at column v of row gr (only the columns < V when not FULL). */
template <bool FULL>
__device__ __forceinline__ void store_cols(grad_t* gr, int v, const float (&gv)[VEC]) {
  if constexpr (FULL) {
    store_n<VEC, true>(gr + v, gv);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; i++)
      if (v + i < V) gr[v + i] = from_f32<grad_t>(gv[i]);
  }
}

/* Zeroes columns [v0, v1) of G (a row with no gradient: ignored, or no teacher mass). */
__device__ __forceinline__ void zero_range(grad_t* gr, int v0, int v1) {
  const float zero[VEC] = {};
  int v = v0 + threadIdx.x * VEC;
  for (; v + VEC <= v1; v += THREADS * VEC) store_cols<true>(gr, v, zero);
  if (v < v1) store_cols<false>(gr, v, zero);
}

/* The row's gradient scale: hdr[HDR_GRAD_SCALE] (kl_setup) times the upstream gradient in
 * backward (one per row for REDUCTION_NONE); 0 in forward, which writes no G. */
__device__ __forceinline__ float grad_scale(const float* hdr, const float* gout, int per_row,
                                            i64 row, int mode) {
  if (mode == MODE_FORWARD) return 0.0f;
  return hdr[HDR_GRAD_SCALE] * (mode == MODE_FUSED ? 1.0f : gout[per_row ? row : 0]);
}
