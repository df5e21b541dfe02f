/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_kernels.cu — the simple kernels behind kljit-bench's baselines, and its input fills.
 *
 * The baselines materialize what kljit never does: the full logits z [N, V] (dense_unfused)
 * or the full softmax q [N, V] (chunked_forward). Their row kernels are deliberately plain:
 * one block per row, two passes, the math of include/kljit.h with T = 1:
 *   pass 1   lse = log sum_v exp(z_v)   (online max / sum-exp), and m = sum_v p_v (dense)
 *   pass 2   l = sum_v p_v (log max(p_v, eps) - (z_v - lse));  G_v = m q_v - p_v  or  q_v
 * (G and q are stored times a power of two, gscale, that the GEMMs' alpha undoes: fp16 would
 * hold q ~ 1/V and (m q - p) / N as subnormals)
 * summed as p (log p - log q) once lse is known, as kljit does, so the loss does not cancel
 * when student and teacher agree. Sparse teacher (top-K ids, values p on them, tail NONE):
 *   l = sum_S p (log p - log q),  G = m q off and on S, minus p on S (m = sum_S p)
 * which is the dense formula with p zero off S. Reductions run in fp32 within a row (the
 * GEMMs' own rounding is larger) and in double across rows.
 *
 * Inputs come from a counter-based hash, so every process (each experiment runs in its own)
 * fills bit-identical tensors without sharing a generator state.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <type_traits>

#include "matrix_kernels.h"

namespace {

constexpr int kRowThreads = 512;

__device__ __forceinline__ float load(const float *p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load(const __half *p, int64_t i) {
  return __half2float(p[i]);
}
__device__ __forceinline__ float load(const __nv_bfloat16 *p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store(float *p, int64_t i, float v) {
  p[i] = v;
}
__device__ __forceinline__ void store(__half *p, int64_t i, float v) {
  p[i] = __float2half_rn(v);
}
__device__ __forceinline__ void store(__nv_bfloat16 *p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

/* splitmix64's finalizer: a counter-based generator. */
__host__ __device__ __forceinline__ uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 bits, from (seed, i). */
__device__ __forceinline__ float unit(uint64_t seed, uint64_t i) {
  return (float)(mix(mix(i) ^ (seed * 0xd1342543de82ef95ull)) >> 40) * (1.0f / 16777216.0f);
}

/* Block-wide sum and max (blockDim.x a multiple of 32, at most 1024); every thread gets the
 * result. The leading barrier lets callers reuse `smem` back to back. */
__device__ float block_sum(float v, float *smem) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : 0.0f;
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float block_max(float v, float *smem) {
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : -INFINITY;
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T>
__global__ void fill_topk(int64_t *ids, T *vals, int64_t rows, int k, int64_t vocab, int64_t stride,
                          float per, uint64_t seed) {
  const size_t n = (size_t)rows * k;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const int64_t r = (int64_t)(i / k), j = (int64_t)(i % k);
    const int64_t base = (int64_t)(mix(seed ^ mix((uint64_t)r)) % (uint64_t)vocab);
    ids[i] = (base + j * stride) % vocab;
    store(vals, (int64_t)i, per * (0.5f + unit(seed + 1, i)));
  }
}

template <typename T>
__global__ void expand_topk(T *dense, const int64_t *ids, const T *vals, int64_t rows, int k,
                            int64_t vocab) {
  const size_t n = (size_t)rows * k;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dense[(int64_t)(i / k) * vocab + ids[i]] = vals[i];
}

/* See mxk_rows. One block per row. */
template <typename TZ, typename T>
__global__ void __launch_bounds__(kRowThreads)
    rows_loss(const TZ *z, int64_t ldz, const T *teacher, const int64_t *ids, const T *vals, int k,
              int64_t vocab, float eps, float gscale, int grad, T *out, int64_t ldo,
              float *row_loss, float *row_mass) {
  __shared__ float smem[32];
  const int64_t r = blockIdx.x;
  z += r * ldz;
  out += r * ldo;
  const T *p = teacher ? teacher + r * vocab : nullptr;
  if (ids) ids += r * k, vals += r * k;

  /* pass 1: online max and sum-exp per thread, then combined; dense teacher mass */
  float mx = -INFINITY, se = 0.0f, mass = 0.0f;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float s = load(z, v);
    if (s > mx) {
      se = se * expf(mx - s) + 1.0f;
      mx = s;
    } else {
      se += expf(s - mx);
    }
    if (p) mass += load(p, v);
  }
  const float m_all = block_max(mx, smem);
  const float lse = m_all + logf(block_sum(se > 0.0f ? se * expf(mx - m_all) : 0.0f, smem));

  float loss = 0.0f;
  if (p) {
    mass = block_sum(mass, smem);
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      const float s = load(z, v), pv = load(p, v), logq = s - lse;
      loss += pv * (logf(fmaxf(pv, eps)) - logq);
      const float q = expf(logq);
      store(out, v, grad ? gscale * (mass * q - pv) : gscale * q);
    }
  } else {
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
      const float pv = load(vals, j);
      mass += pv;
      loss += pv * (logf(fmaxf(pv, eps)) - (load(z, ids[j]) - lse));
    }
    mass = block_sum(mass, smem);
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      const float q = expf(load(z, v) - lse);
      store(out, v, gscale * (grad ? mass * q : q));
    }
    if (grad) {
      __syncthreads(); /* the row's m q is written before the support's entries replace it */
      for (int j = threadIdx.x; j < k; j += blockDim.x)
        store(out, ids[j], gscale * (mass * expf(load(z, ids[j]) - lse) - load(vals, j)));
    }
  }
  loss = block_sum(loss, smem);
  if (threadIdx.x == 0) {
    row_loss[r] = loss;
    if (row_mass) row_mass[r] = mass;
  }
}

/* See mxk_grad_from_probs. One block per row; K <= 1024. */
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    grad_from_probs(T *q, int64_t ldq, const T *teacher, const int64_t *ids, const T *vals, int k,
                    int64_t vocab, const float *row_mass, float gscale) {
  __shared__ float q_support[1024];
  const int64_t r = blockIdx.x;
  q += r * ldq;
  const float m = row_mass[r];
  if (teacher) {
    const T *p = teacher + r * vocab;
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x)
      store(q, v, m * load(q, v) - gscale * load(p, v));
    return;
  }
  ids += r * k, vals += r * k;
  for (int j = threadIdx.x; j < k; j += blockDim.x) q_support[j] = load(q, ids[j]);
  __syncthreads();
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) store(q, v, m * load(q, v));
  __syncthreads();
  for (int j = threadIdx.x; j < k; j += blockDim.x)
    store(q, ids[j], m * q_support[j] - gscale * load(vals, j));
}

__global__ void sum_rows(const float *row_loss, int64_t n, double scale, float *loss) {
  __shared__ double part[1024];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += row_loss[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w; w >>= 1) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = (float)(part[0] * scale);
}

template <typename T>
__global__ void sum_squares(const T *p, size_t n, double *partial) {
  __shared__ double part[256];
  double acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const double v = load(p, (int64_t)i);
    acc += v * v;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w; w >>= 1) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = part[0];
}

unsigned grid_for(size_t n) {
  const size_t blocks = (n + 255) / 256;
  return (unsigned)(blocks < 8192 ? (blocks ? blocks : 1) : 8192);
}

int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    const int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

/* Calls f with a null pointer of the C++ type of dt (FP32, FP16 or BF16). */
template <typename F>
cudaError_t with_type(kljit_dtype dt, F f) {
  switch (dt) {
    case KLJIT_FP32:
      return f((float *)nullptr);
    case KLJIT_FP16:
      return f((__half *)nullptr);
    case KLJIT_BF16:
      return f((__nv_bfloat16 *)nullptr);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

extern "C" cudaError_t mxk_fill_topk(int64_t *ids, void *vals, kljit_dtype dt, int64_t rows, int k,
                                     int64_t vocab, double mass, uint64_t seed) {
  /* a stride near V / golden ratio spreads a row's ids over the vocabulary */
  int64_t stride = (int64_t)((double)vocab * 0.6180339887498949);
  if (stride < 1) stride = 1;
  while (gcd64(stride, vocab) != 1) stride++;
  return with_type(dt, [&](auto t) {
    using T = std::remove_pointer_t<decltype(t)>;
    fill_topk<T><<<grid_for((size_t)rows * k), 256>>>(ids, (T *)vals, rows, k, vocab,
                                                      stride % vocab, (float)(mass / k), seed);
    return cudaGetLastError();
  });
}

extern "C" cudaError_t mxk_expand_topk(void *dense, kljit_dtype dt, const int64_t *ids,
                                       const void *vals, int64_t rows, int k, int64_t vocab) {
  const cudaError_t e =
      cudaMemsetAsync(dense, 0, (size_t)rows * vocab * (dt == KLJIT_FP32 ? 4 : 2), 0);
  if (e != cudaSuccess) return e;
  return with_type(dt, [&](auto t) {
    using T = std::remove_pointer_t<decltype(t)>;
    expand_topk<T>
        <<<grid_for((size_t)rows * k), 256>>>((T *)dense, ids, (const T *)vals, rows, k, vocab);
    return cudaGetLastError();
  });
}

extern "C" cudaError_t mxk_rows_loss(const mxk_rows *a) {
  if (a->rows < 1 || a->rows > INT32_MAX || (a->zdt != KLJIT_FP32 && a->zdt != a->dt))
    return cudaErrorInvalidValue;
  return with_type(a->dt, [&](auto t) {
    using T = std::remove_pointer_t<decltype(t)>;
    const int grad = a->out_kind == MXK_OUT_GRAD;
    if (a->zdt == KLJIT_FP32)
      rows_loss<float, T><<<(unsigned)a->rows, kRowThreads>>>(
          (const float *)a->z, a->ldz, (const T *)a->teacher, a->ids, (const T *)a->vals, a->k,
          a->vocab, (float)a->eps, (float)a->gscale, grad, (T *)a->out, a->ldo, a->row_loss,
          a->row_mass);
    else
      rows_loss<T, T><<<(unsigned)a->rows, kRowThreads>>>(
          (const T *)a->z, a->ldz, (const T *)a->teacher, a->ids, (const T *)a->vals, a->k,
          a->vocab, (float)a->eps, (float)a->gscale, grad, (T *)a->out, a->ldo, a->row_loss,
          a->row_mass);
    return cudaGetLastError();
  });
}

extern "C" cudaError_t mxk_grad_from_probs(void *q, int64_t ldq, const mxk_rows *a,
                                           const float *row_mass) {
  if (a->rows < 1 || a->rows > INT32_MAX || (!a->teacher && (a->k < 1 || a->k > 1024)))
    return cudaErrorInvalidValue;
  return with_type(a->dt, [&](auto t) {
    using T = std::remove_pointer_t<decltype(t)>;
    grad_from_probs<T><<<(unsigned)a->rows, kRowThreads>>>((T *)q, ldq, (const T *)a->teacher,
                                                           a->ids, (const T *)a->vals, a->k,
                                                           a->vocab, row_mass, (float)a->gscale);
    return cudaGetLastError();
  });
}

extern "C" cudaError_t mxk_sum_rows(const float *row_loss, int64_t n, double scale, float *loss) {
  sum_rows<<<1, 1024>>>(row_loss, n, scale, loss);
  return cudaGetLastError();
}

extern "C" cudaError_t mxk_sum_squares(const void *p, kljit_dtype dt, size_t n, double *out) {
  enum { kBlocks = 1024 };
  double *partial = nullptr, host[kBlocks];
  cudaError_t e = cudaMalloc(&partial, sizeof host);
  if (e != cudaSuccess) return e;
  e = with_type(dt, [&](auto t) {
    using T = std::remove_pointer_t<decltype(t)>;
    sum_squares<T><<<kBlocks, 256>>>((const T *)p, n, partial);
    return cudaGetLastError();
  });
  if (e == cudaSuccess) e = cudaMemcpy(host, partial, sizeof host, cudaMemcpyDeviceToHost);
  cudaFree(partial);
  double s = 0;
  for (int i = 0; e == cudaSuccess && i < kBlocks; i++) s += host[i];
  *out = s;
  return e;
}
