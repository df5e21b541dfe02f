%-- SPDX-License-Identifier: Apache-2.0
%-- helpers.cu.lua: the small kernels around the row kernels of one plan.
%--
%--   kl_setup        one block: counts kept rows (label != ignore_index) and writes the
%--                   header hdr = {loss_scale, grad_scale * gmult, kept, 1/T, t2, 0...} (the
%--                   record iface.HDR, templates/iface.cu.lua) with
%--                   c = 1 (sum, none) | 1/D (batchmean) | 1/(D VTOT) (mean), 0 unless D > 0,
%--                   D = *divisor (the caller's global count, fp64) where given, else kept,
%--                   loss_scale = c t2, grad_scale = c t2 / T, t2 = T^2 with T^2 scaling else 1,
%--                   gmult the power of two fp16 G is stored times (exec.c; the GEMMs undo it).
%--   kl_finish_loss  one block: row losses from the per-split partials (lossp, plus the CE's
%--                   lossh where the rows write it apart), reduced in double in a fixed order
%--                   -> loss[0] = loss_scale * sum; or loss[i] per row (none). Optional outputs
%--                   (NULL: none): row_loss[i] = t2 * the row's partials (the row's loss before
%--                   the reduction), parts = {loss_scale * sum lossp, loss_scale * sum lossh}.
%--   kl_colsum       db accumulation: acc[v] (+)= sum over the chunk's rows of G[r, v], rows in
%--                   order (deterministic, no atomics).
%--   kl_convert      dst (+)= scale * src, fp32 -> OUT dtype (dW, db from their fp32
%--                   accumulators; scale undoes fp16 G's multiplier for db), or with out = 0
%--                   -> GRAD dtype (dX from the fp32 sum of its split GEMMs, exec.c).
%--   kl_scale        p[i] *= *s in place, p of GRAD (dX) or OUT (dW, db) dtype: the upstream
%--                   gradient applied after a fused call (kljit_scale_grads), read on the device.
%--
%-- Parameters: V, LD, LDG (row stride of G in its elements), GRAD, OUT (f32|bf16|f16), REDUCTION
%-- (sum|batchmean|mean|none), T2 (bool), TMODE (const|runtime), T (const mode), VTOT (the global
%-- vocabulary size of a sharded head, MEAN's divisor; default V).
%-- Launch: kl_setup and kl_finish_loss with WIDE threads x 1 block; kl_colsum with NARROW
%-- threads x ceil(V/NARROW); kl_convert and kl_scale with NARROW threads x any grid
%-- (grid-stride). The block sizes reach the C side through the manifest (threads=).
%local iface = include("iface.cu.lua")
%-- the block sizes: one block of WIDE threads reduces a whole call; NARROW, the elementwise ones
%local WIDE, NARROW = 1024, 256
%local params = include("params.cu.lua")
%local dt = params.dt
%local VTOT = params.module()
%if not dt[P.GRAD] or not dt[P.OUT] then reject("GRAD and OUT must be f32, bf16 or f16") end
%local red = params.REDUCTIONS
%if not red[P.REDUCTION] then reject("REDUCTION must be sum, batchmean, mean or none") end
%-- The checks end here, every reject() above (dense_rows.cu.lua says why)
%end_of_checks()
%include("common.cu.lua")
%-- The interface (templates/iface.cu.lua): every kernel and its arguments, in order; the C
%-- side fills the roles from one struct (src/kiface.h).
%local K = iface.family({
%  { name = "kl_setup", step = "setup", threads = WIDE, args = {
%    { "labels", "const void*" }, { "labels_is64", "int" }, { "ignore_index", "i64" },
%    { "n", "i64", role = "rows" }, { "T", "float", role = "temperature" }, { "gmult", "float" },
%    { "divisor", "const double* __restrict__" }, { "hdr", "float* __restrict__" } } },
%  { name = "kl_finish_loss", step = "finish_loss", threads = WIDE, args = {
%    { "lossp", "const float* __restrict__" }, { "lossh", "const float* __restrict__" },
%    { "split", "int", role = "p2_split" }, { "n", "i64", role = "rows" },
%    { "hdr", "const float* __restrict__" }, { "loss", "float* __restrict__" },
%    { "row_loss", "float* __restrict__" }, { "parts", "float* __restrict__",
%      role = "loss_parts" } } },
%  { name = "kl_colsum", step = "colsum", threads = NARROW, args = {
%    { "g", "const grad_t* __restrict__" }, { "rows", "int", role = "chunk_rows" },
%    { "acc", "float* __restrict__", role = "db" }, { "accumulate", "int" } } },
%  { name = "kl_convert", step = "convert", threads = NARROW, args = {
%    { "src", "const float* __restrict__" }, { "dst", "void* __restrict__" },
%    { "n", "i64", role = "count" }, { "accumulate", "int" }, { "scale", "float" },
%    { "out", "int", role = "out_dtype" } } },
%  { name = "kl_scale", step = "scale", threads = NARROW, args = {
%    { "p", "void*", role = "data" }, { "n", "i64", role = "count" },
%    { "s", "const float* __restrict__", role = "factor" }, { "out", "int", role = "out_dtype" } } },
%}, { iface.HDR })
#define V {{ P.V }}
#define LD {{ P.LD }}
#define VTOT {{ VTOT }}
#define LDG {{ P.LDG }}
#define REDUCTION {{ red[P.REDUCTION] }}
#define T2 {{ P.T2 and 1 or 0 }}
#define WIDE {{ WIDE }}     /* block sizes (the kernels' threads= in the manifest) */
#define NARROW {{ NARROW }}
typedef {{ dt[P.GRAD] }} grad_t;
typedef {{ dt[P.OUT] }} out_t;
{{ K.records() }}

{{ K.kernel("kl_setup") }} {
%if P.TMODE == "const" then
  T = {{ f32(P.T) }};
%end
  __shared__ double shd[32];
  i64 local = 0;
  for (i64 i = threadIdx.x; i < n; i += WIDE)
    local += row_kept(labels, labels_is64, ignore_index, i);
  /* integer counts below 2^53 are exact in double */
  const double total = block_sum_d<WIDE>((double)local, shd);
  if (threadIdx.x == 0) {
    double c = 1.0;
#if REDUCTION == 2 || REDUCTION == 3
    const double d = divisor ? *divisor : total; /* NaN fails d > 0 */
    c = d > 0 ? 1.0 / (d * (REDUCTION == 3 ? (double)VTOT : 1.0)) : 0.0;
#endif
    const double t2 = T2 ? (double)T * (double)T : 1.0;
    hdr[HDR_LOSS_SCALE] = (float)(c * t2);
    hdr[HDR_GRAD_SCALE] = (float)(c * t2 / (double)T * (double)gmult);
    hdr[HDR_KEPT] = (float)total;
    hdr[HDR_INV_T] = (float)(1.0 / (double)T);
    hdr[HDR_T2] = (float)t2; /* the per-row loss's scale (kl_finish_loss) */
    for (int k = HDR_SLOTS; k < HDR_FLOATS; k++) hdr[k] = 0.0f;
  }
}

{{ K.kernel("kl_finish_loss") }} {
  /* lossp, lossh (or NULL): (n, split) partial row losses, the CE's apart in lossh; loss:
   * scalar, or (n) for reduction none; row_loss (n) and parts (2): NULL or outputs */
  __shared__ double shd[32];
  double acc = 0.0, acch = 0.0;
  for (i64 i = threadIdx.x; i < n; i += WIDE) {
    double row = 0.0, rowh = 0.0;
    for (int k = 0; k < split; k++) row += (double)lossp[i * split + k];
    if (lossh)
      for (int k = 0; k < split; k++) rowh += (double)lossh[i * split + k];
#if REDUCTION == 4
    loss[i] = (float)((row + rowh) * (double)hdr[HDR_LOSS_SCALE]);
#endif
    if (row_loss) row_loss[i] = (float)((row + rowh) * (double)hdr[HDR_T2]);
    acc += row;
    acch += rowh;
  }
  acc = block_sum_d<WIDE>(acc, shd);
  if (lossh) acch = block_sum_d<WIDE>(acch, shd);
  if (threadIdx.x == 0) {
#if REDUCTION != 4
    loss[0] = (float)((acc + acch) * (double)hdr[HDR_LOSS_SCALE]);
#endif
    if (parts)
      parts[0] = (float)(acc * (double)hdr[HDR_LOSS_SCALE]),
      parts[1] = (float)(acch * (double)hdr[HDR_LOSS_SCALE]);
  }
}

{{ K.kernel("kl_colsum") }} {
  /* g: (rows, LDG); acc: (V) */
  const int v = blockIdx.x * NARROW + threadIdx.x;
  if (v >= V) return;
  float s = accumulate ? acc[v] : 0.0f;
  for (int r = 0; r < rows; r++) s += to_f32(g[(i64)r * LDG + v]);
  acc[v] = s;
}

{{ K.kernel("kl_convert") }} {
  if (out) {
    out_t* d = (out_t*)dst;
    for (i64 i = (i64)blockIdx.x * NARROW + threadIdx.x; i < n; i += (i64)gridDim.x * NARROW) {
      const float prev = accumulate ? to_f32(d[i]) : 0.0f;
      d[i] = from_f32<out_t>(prev + scale * src[i]);
    }
  } else {
    grad_t* d = (grad_t*)dst;
    for (i64 i = (i64)blockIdx.x * NARROW + threadIdx.x; i < n; i += (i64)gridDim.x * NARROW) {
      const float prev = accumulate ? to_f32(d[i]) : 0.0f;
      d[i] = from_f32<grad_t>(prev + scale * src[i]);
    }
  }
}

/* p[0, n) *= s: 16-byte vectors where p is 16-byte aligned, one element at a time for the rest
 * (or all of it); the product is rounded once to T, as an fp32 multiply then a store. */
template <typename T>
__device__ __forceinline__ void scale_in_place(T* p, i64 n, float s) {
  constexpr int VEC = 16 / sizeof(T);
  const i64 stride = (i64)gridDim.x * NARROW, first = (i64)blockIdx.x * NARROW + threadIdx.x;
  const i64 nv = ((unsigned long long)p % 16 == 0) ? n / VEC : 0;
  for (i64 i = first; i < nv; i += stride) {
    float v[VEC];
    load_n<VEC, true>(p + i * VEC, v);
#pragma unroll
    for (int k = 0; k < VEC; k++) v[k] *= s;
    store_n<VEC, true>(p + i * VEC, v);
  }
  for (i64 i = nv * VEC + first; i < n; i += stride) p[i] = from_f32<T>(to_f32(p[i]) * s);
}

{{ K.kernel("kl_scale") }} {
  /* out = 0: p holds GRAD elements (dX); 1: OUT elements (dW, db) */
  const float f = *s;
  /* autograd's usual upstream gradient is exactly 1: then the pass is one read of *s per block
   * (decided here, on the device, so the caller never synchronizes to find out) */
  if (f == 1.0f) return;
  if (out)
    scale_in_place(static_cast<out_t*>(p), n, f);
  else
    scale_in_place(static_cast<grad_t*>(p), n, f);
}
