%-- SPDX-License-Identifier: Apache-2.0
%-- common.cu.lua: the prelude every kljit kernel source starts with.
%--
%-- Holds what the kernel families share: fixed-width types, fp16/bf16 <-> fp32 conversions
%-- written in PTX (so no CUDA header is needed at run time), vector loads of N elements,
%-- one warp/block reduction for any record and merge, in a fixed order (results are bitwise
%-- reproducible run to run), and the (max, sum-exp) merge of the online softmax.
%--
%-- Parameters: none.
%--
%-- Numerics: every conversion rounds to nearest even; block reductions combine in a fixed
%-- tree, so the same inputs give the same bits on every run.
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

struct bf16_t { u16 x; };
struct f16_t { u16 x; };

#define KL_NEG_INF (__int_as_float(0xff800000))

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16_t v) { return __uint_as_float(((u32)v.x) << 16); }
__device__ __forceinline__ float to_f32(f16_t v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
  return f;
}
template <typename T> __device__ __forceinline__ T from_f32(float f);
template <> __device__ __forceinline__ float from_f32<float>(float f) { return f; }
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float f) {
  bf16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(f));
  return r;
}
template <> __device__ __forceinline__ f16_t from_f32<f16_t>(float f) {
  f16_t r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(f));
  return r;
}

/* N consecutive elements starting at p, as floats. ALIGNED: p is aligned to N * sizeof(T)
 * (at most 16 bytes), so the load is one vector instruction; else N scalar loads. */
template <int N, bool ALIGNED, typename T>
__device__ __forceinline__ void load_n(const T* __restrict__ p, float (&out)[N]) {
  if constexpr (ALIGNED && sizeof(T) * N == 16) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const u32 w[4] = {u.x, u.y, u.z, u.w};
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int i = 0; i < 4; i++) out[i] = __uint_as_float(w[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++) {
        T t;
        t.x = (u16)(w[i / 2] >> (16 * (i % 2)));
        out[i] = to_f32(t);
      }
    }
  } else if constexpr (ALIGNED && sizeof(T) * N == 8) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const u32 w[2] = {u.x, u.y};
    if constexpr (sizeof(T) == 4) {
      out[0] = __uint_as_float(w[0]);
      out[1] = __uint_as_float(w[1]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        T t;
        t.x = (u16)(w[i / 2] >> (16 * (i % 2)));
        out[i] = to_f32(t);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; i++) out[i] = to_f32(p[i]);
  }
}

/* Stores N floats converted to T at p (aligned as for load_n). */
template <int N, bool ALIGNED, typename T>
__device__ __forceinline__ void store_n(T* p, const float (&in)[N]) {
  if constexpr (ALIGNED && sizeof(T) * N == 16) {
    u32 w[4];
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int i = 0; i < 4; i++) w[i] = __float_as_uint(in[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; i++)
        w[i] = (u32)from_f32<T>(in[2 * i]).x | ((u32)from_f32<T>(in[2 * i + 1]).x << 16);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
#pragma unroll
    for (int i = 0; i < N; i++) p[i] = from_f32<T>(in[i]);
  }
}

/* exp and log through the SFU (ex2/lg2.approx: relative error about 2^-22). The row kernels
 * are bound by memory only if their per-element arithmetic stays small; exp(x) = 2^(x log2 e)
 * adds one rounding of the product, which is relative to x - max, not to x. Arguments of flog
 * must be normal numbers (eps >= 1e-30 keeps them so). */
__device__ __forceinline__ float fexp(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ float flog(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y * 0.6931471805599453f;
}

/* Online softmax state: m = max, d = sum exp(x - m). Merging is exact up to rounding and
 * safe when either side is empty (m = -inf). */
struct md_t { float m, d; };
__device__ __forceinline__ md_t md_merge(md_t a, md_t b) {
  const float m = fmaxf(a.m, b.m);
  if (m == KL_NEG_INF) return a;
  md_t r;
  r.m = m;
  r.d = a.d * expf(a.m - m) + b.d * expf(b.m - m);
  return r;
}

/* Merge functors of warp_reduce / block_reduce (the families add their own). */
struct sum_op {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct md_op {
  __device__ __forceinline__ md_t operator()(md_t a, md_t b) const { return md_merge(a, b); }
};

/* Butterfly over the warp: every lane gets the merge of the 32 lanes' values, combined in the
 * same order on every run (offsets 16, 8, 4, 2, 1; merge(own, other)). R is any record of
 * 4-byte words (float, double, a struct of floats), shuffled word by word; memcpy is the
 * aliasing-safe way to see its words and compiles to register moves (no local memory). */
template <typename R, typename Merge>
__device__ __forceinline__ R warp_reduce(R v, Merge merge) {
  static_assert(sizeof(R) % 4 == 0, "warp_reduce shuffles 4-byte words");
  constexpr int W = sizeof(R) / 4;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    u32 a[W], b[W];
    memcpy(a, &v, sizeof(R));
#pragma unroll
    for (int i = 0; i < W; i++) b[i] = __shfl_xor_sync(0xffffffffu, a[i], o);
    R w;
    memcpy(&w, b, sizeof(R));
    v = merge(v, w);
  }
  return v;
}

/* Block-wide reduction for a block of THREADS threads (a multiple of 32): each warp reduces,
 * lane 0 of warp k writes sh[k], then every warp reduces sh[0 .. THREADS/32) (`empty` in the
 * lanes above), so every thread gets the result. `sh` needs THREADS/32 elements; the function
 * ends with the block synchronized, so sh may be reused at once. */
template <int THREADS, typename R, typename Merge>
__device__ __forceinline__ R block_reduce(R v, R* sh, R empty, Merge merge) {
  v = warp_reduce(v, merge);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < THREADS / 32 ? sh[lane] : empty;
  v = warp_reduce(v, merge);
  __syncthreads();
  return v;
}

/* The block reductions the kernels call. */
template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* sh) {
  return block_reduce<THREADS>(v, sh, 0.0f, sum_op());
}
template <int THREADS>
__device__ __forceinline__ double block_sum_d(double v, double* sh) {
  return block_reduce<THREADS>(v, sh, 0.0, sum_op());
}
template <int THREADS>
__device__ __forceinline__ md_t block_md(md_t v, md_t* sh) {
  return block_reduce<THREADS>(v, sh, md_t{KL_NEG_INF, 0.0f}, md_op());
}

/* Reads label i (int32 or int64 as the call says) and tells whether the row is kept. */
__device__ __forceinline__ bool row_kept(const void* labels, int labels_is64, i64 ignore_index,
                                         i64 row) {
  if (!labels) return true;
  const i64 l = labels_is64 ? ((const i64*)labels)[row] : (i64)((const int*)labels)[row];
  return l != ignore_index;
}
