%-- SPDX-License-Identifier: Apache-2.0
%-- dense_rows.cu.lua: row kernels of the dense-teacher KL loss (probs, log-probs, logits).
%--
%-- Math, per kept row (s = (z + b) / T, q = softmax(s), p the teacher):
%--   loss_i = sum_v p_v (log max(p_v, eps) - log q_v)                    (0 log 0 = 0)
%--   G_v    = gscale * (sum(p) * q_v - p_v),  gscale = scale * T^2? / T * upstream (hdr)
%-- Teacher forms: probs (p given), logprobs (log p given), logits (p = softmax(zt / Tt)).
%--
%-- Two variants, chosen by CLUSTER (grid: SPLIT blocks per row x rows of the chunk):
%-- CLUSTER = 0, two passes over global memory (any V, any arch):
%--   kl_dense_stats          pass 1: per segment, online (max, sum-exp) of s, sum(p), and for
%--                           teacher logits the teacher's own (max, sum-exp); -> part[r][split]
%--   kl_dense_fused          pass 2: merge the row's partials -> lse; loss partial
%--                           sum p (log p - log q) -> lossp[row][split]; G -> g (in place ok)
%--   kl_dense_forward        pass 2 without G: loss partials and the row statistics -> rowstat
%--   kl_dense_backward       pass 2 from saved row statistics: G only
%--   kl_dense_merge          split API (tensor parallelism): a row's SPLIT partials -> one
%--                           record; pass 2 then merges nrec records at runtime strides
%--                           (the chunk's partials, or every shard's record of the row)
%--   With INPLACE (fp32 z, 16-bit G), pass 2 runs one block per row and writes the row's G
%--   over the first half of its own fp32 logits: in groups of columns, every thread reads the
%--   group, the block synchronizes, then writes it; G's bytes [2a, 2b) are fp32 columns
%--   [a/2, b/2), all read by then. The chunk needs no second buffer.
%-- CLUSTER = C > 0 (sm_90 thread-block clusters, V <= C * THREADS * NV * VEC): one pass.
%--   The C blocks of a cluster hold one row in registers (each thread NV vectors), merge their
%--   (max, sum-exp) through distributed shared memory, then compute loss and G from registers.
%--   Every byte of z and p is read once, and because the whole row is on chip before the first
%--   write, G (16-bit) is written in place over the first half of the row's fp32 logits: the
%--   chunk needs no second buffer. kl_dense_fused / _forward / _backward as above; no stats.
%-- The loss is summed in pass 2 from log q = s - lse rather than from sum p log p - sum p s
%-- + sum(p) lse, which would cancel catastrophically when the student is close to the teacher.
%-- Never materialized: anything of size N x V; the caller's buffer holds one chunk (R x LD).
%--
%-- Parameters (validated below):
%--   V        vocabulary size, 2..2^24            LD      row stride of z and g (elements)
%--   THREADS  64..1024, multiple of 32            SPLIT   blocks per row, 1..64
%--   CLUSTER  0 or SPLIT (a power of two <= 16)    NV      vectors per thread (cluster)
%--   LDG      row stride of g in GRAD elements (2 LD when 16-bit G overwrites fp32 z)
%--   INPLACE  bool: two-pass variant writes 16-bit G over fp32 z (one pass-2 block per row)
%--   LOGIT    f32|bf16|f16: dtype of z            GRAD    f32|bf16|f16: dtype of g
%--   TEACHER  probs|logprobs|logits               TDT     f32|bf16|f16: teacher dtype
%--   BIAS     bool; BDT f32|bf16|f16              TMODE   const|runtime; T (const mode)
%--   TT_SAME  bool: teacher temperature = T;  TT  teacher temperature otherwise
%--   EPS      (0, 1e-3): floor of p inside log p
%--   CHECK    bool: also emit kl_dense_check (checked mode: NaN/Inf, negative probabilities)
%-- Launch: part has 8 floats per (row, split); hdr: see helpers.cu.lua (kl_setup).
%-- Numerics: fp32 in registers; exp/log through the SFU (fexp/flog, common.cu.lua) in the row
%-- passes, expf in the (m, d) merges; fixed-order reductions.
%local P = P
%include("common.cu.lua")
%local iface = include("iface.cu.lua")
%local params = include("params.cu.lua")
%local dt, size = params.dt, params.size
%params.module()
%params.rows({ "LOGIT", "GRAD", "TDT", "BDT" })
%if P.TEACHER ~= "probs" and P.TEACHER ~= "logprobs" and P.TEACHER ~= "logits" then
%  reject("TEACHER must be probs, logprobs or logits")
%end
%if not P.TT_SAME and not (P.TT > 0 and P.TT < math.huge) then reject("TT must be > 0") end
%if P.CLUSTER ~= 0 and (P.CLUSTER ~= P.SPLIT or P.CLUSTER > 16 or P.CLUSTER & (P.CLUSTER - 1) ~= 0) then
%  reject("CLUSTER must be 0 or equal SPLIT, a power of two up to 16")
%end
%if P.INPLACE and (P.CLUSTER ~= 0 or P.LDG ~= 2 * P.LD) then
%  reject("INPLACE is the two-pass variant writing 16-bit G over fp32 z (LDG = 2 LD)")
%end
%-- Vector width: one 16-byte load of logits per step; the teacher is read with the same
%-- element count, vectorized only when every row start stays aligned (V % VEC == 0).
%local VEC = 16 // size[P.LOGIT]
%local TALIGNED = (P.V % VEC == 0) and (size[P.TDT] * VEC <= 16)
%-- Segment of one block: a multiple of VEC so every vector stays inside one segment.
%local SEG = ((P.V + P.SPLIT * VEC - 1) // (P.SPLIT * VEC)) * VEC
%if SEG * (P.SPLIT - 1) >= P.V then reject("SPLIT too large for V") end
%if P.CLUSTER > 0 and SEG > P.THREADS * P.NV * VEC then
%  reject("a row does not fit in the cluster's registers: V > CLUSTER * THREADS * NV * VEC")
%end
%-- The interface (templates/iface.cu.lua): every kernel and its arguments, in order. The C side
%-- fills the roles from one struct (src/kiface.h); g may alias z (G overwrites the chunk
%-- logits), so neither is __restrict__ in the pass-2 kernels.
%local row_in = {
%  { "teacher", "const teach_t* __restrict__" }, { "bias", "const bias_t* __restrict__" },
%  { "labels", "const void*" }, { "labels_is64", "int" }, { "ignore_index", "i64" },
%  { "hdr", "const float* __restrict__" } }
%local recs = { { "part", "const float* __restrict__", role = "recs" }, { "nrec", "int" },
%  { "srow", "i64" }, { "srec", "i64" } }
%local args = iface.args
%local Z, G = { { "z", "const logit_t*" } }, { { "g", "grad_t*" } }
%local ROW0 = { { "row0", "i64" } }
%local K = iface.family({
%  { name = "kl_dense_stats", step = "stats", when = P.CLUSTER == 0, args = {
%    { "z", "const logit_t* __restrict__" }, { "teacher", "const teach_t* __restrict__" },
%    { "bias", "const bias_t* __restrict__" }, { "labels", "const void* __restrict__" },
%    { "labels_is64", "int" }, { "ignore_index", "i64" }, { "hdr", "const float* __restrict__" },
%    { "part", "float* __restrict__" }, { "row0", "i64" } } },
%  { name = "kl_dense_fused", step = "fused",
%    args = args(Z, G, row_in, recs, { { "lossp", "float* __restrict__" } }, ROW0) },
%  { name = "kl_dense_forward", step = "forward",
%    args = args(Z, row_in, recs, { { "rowstat", "float*" }, { "lossp", "float* __restrict__" } },
%                ROW0) },
%  { name = "kl_dense_backward", step = "backward",
%    args = args(Z, G, row_in, { { "rowstat", "const float*" },
%                { "gout", "const float* __restrict__", role = "grad_output" },
%                { "gout_per_row", "int", role = "per_row" } }, ROW0) },
%  { name = "kl_dense_merge", step = "merge", when = P.CLUSTER == 0, args = {
%    { "part", "const float* __restrict__" }, { "labels", "const void*" }, { "labels_is64", "int" },
%    { "ignore_index", "i64" }, { "rows", "int", role = "chunk_rows" },
%    { "out", "float* __restrict__", role = "stats_out" }, { "row0", "i64" } } },
%  { name = "kl_dense_check", step = "check", when = P.CHECK, args = {
%    { "teacher", "const teach_t* __restrict__" }, { "labels", "const void*" },
%    { "labels_is64", "int" }, { "ignore_index", "i64" },
%    { "flag", "u64*", role = "check_flag" } } },
%})

#define V {{ P.V }}
#define LD {{ P.LD }}
#define THREADS {{ P.THREADS }}
#define SPLIT {{ P.SPLIT }}
#define VEC {{ VEC }}
#define SEG {{ SEG }}
#define TALIGNED {{ TALIGNED and "true" or "false" }}
#define PSTRIDE 8
#define LDG {{ P.LDG }}
#define CLUSTER {{ P.CLUSTER }}
#define NV {{ P.NV }}
#define INPLACE {{ P.INPLACE and 1 or 0 }}
#define P2SPLIT (INPLACE ? 1 : SPLIT) /* pass-2 blocks per row */
typedef {{ dt[P.LOGIT] }} logit_t;
typedef {{ dt[P.GRAD] }} grad_t;
typedef {{ dt[P.TDT] }} teach_t;
typedef {{ dt[P.BDT] }} bias_t;
#define HAS_BIAS {{ P.BIAS and 1 or 0 }}
#define TEACHER_{{ string.upper(P.TEACHER) }} 1
#define LOG_EPS {{ f32(math.log(P.EPS)) }}
#define EPS {{ f32(P.EPS) }}

%if P.TMODE == "const" then
#define INV_T(hdr) ({{ f32(1.0 / P.T) }})
%else
#define INV_T(hdr) ((hdr)[3])
%end
%if P.TEACHER == "logits" then
%  if P.TT_SAME then
#define INV_TT(hdr) INV_T(hdr)
%  else
#define INV_TT(hdr) ({{ f32(1.0 / P.TT) }})
%  end
%end

/* The segment [v0, v1) of row-relative columns that block blockIdx.x owns. */
__device__ __forceinline__ int seg_begin() { return blockIdx.x * SEG; }
__device__ __forceinline__ int seg_end() { return min(V, (int)(blockIdx.x + 1) * SEG); }

/* Loads VEC student scores s = (z + b) * invT and VEC teacher values at column v. FULL: all VEC
 * columns exist (v + VEC <= V); else only the first V - v do and the rest get neutral values. */
template <bool FULL>
__device__ __forceinline__ void load_cols(const logit_t* __restrict__ zr,
                                          const teach_t* __restrict__ tr,
                                          const bias_t* __restrict__ bias, int v, float invT,
                                          float (&s)[VEC], float (&t)[VEC]) {
  if constexpr (FULL) {
    load_n<VEC, true>(zr + v, s);
    load_n<VEC, TALIGNED>(tr + v, t);
#if HAS_BIAS
    float b[VEC];
    load_n<VEC, false>(bias + v, b);
#pragma unroll
    for (int i = 0; i < VEC; i++) s[i] += b[i];
#endif
  } else {
#pragma unroll
    for (int i = 0; i < VEC; i++) {
      const bool in = v + i < V;
      s[i] = in ? to_f32(zr[v + i]) : KL_NEG_INF;
#if HAS_BIAS
      if (in) s[i] += to_f32(bias[v + i]);
#endif
#if defined(TEACHER_LOGITS)
      t[i] = in ? to_f32(tr[v + i]) : KL_NEG_INF;
#elif defined(TEACHER_LOGPROBS)
      t[i] = in ? to_f32(tr[v + i]) : KL_NEG_INF;
#else
      t[i] = in ? to_f32(tr[v + i]) : 0.0f;
#endif
    }
  }
#pragma unroll
  for (int i = 0; i < VEC; i++) s[i] *= invT;
}

/* Per-thread pass-1 accumulators. */
struct acc1_t {
  md_t s;       /* student (max, sum-exp) */
  md_t t;       /* teacher logits (max, sum-exp), TEACHER_LOGITS only */
  float sp;     /* sum p, probs/logprobs only */
};

__device__ __forceinline__ void acc1_init(acc1_t& a) {
  a.s.m = a.t.m = KL_NEG_INF;
  a.s.d = a.t.d = 0.0f;
  a.sp = 0.0f;
}

__device__ __forceinline__ void acc1_add(acc1_t& a, const float (&s)[VEC], const float (&t)[VEC],
                                         float invTT) {
  float m = a.s.m;
#pragma unroll
  for (int i = 0; i < VEC; i++) m = fmaxf(m, s[i]);
  if (m != KL_NEG_INF) {
    float d = a.s.d * fexp(a.s.m - m);
#pragma unroll
    for (int i = 0; i < VEC; i++) d += fexp(s[i] - m);
    a.s.m = m;
    a.s.d = d;
  }
#if defined(TEACHER_LOGITS)
  float tt[VEC];
  float mt = a.t.m;
#pragma unroll
  for (int i = 0; i < VEC; i++) {
    tt[i] = t[i] * invTT;
    mt = fmaxf(mt, tt[i]);
  }
  if (mt != KL_NEG_INF) {
    float dd = a.t.d * fexp(a.t.m - mt);
#pragma unroll
    for (int i = 0; i < VEC; i++) dd += fexp(tt[i] - mt);
    a.t.m = mt;
    a.t.d = dd;
  }
#elif defined(TEACHER_LOGPROBS)
#pragma unroll
  for (int i = 0; i < VEC; i++) a.sp += fexp(t[i]);
#else
#pragma unroll
  for (int i = 0; i < VEC; i++) a.sp += t[i];
#endif
}

/* Block-wide merge of the accumulators into one partial record {m, d, sum p, mt, dt}. */
__device__ __forceinline__ void acc1_block(const acc1_t& a, md_t* sh_md, float* sh_f,
                                           float (&rec)[5]) {
  const md_t ms = block_md<THREADS>(a.s, sh_md);
#if defined(TEACHER_LOGITS)
  const md_t mt = block_md<THREADS>(a.t, sh_md);
  const float sp = 0.0f; /* sum p = 1 by construction; set in row_finish */
#else
  md_t mt;
  mt.m = 0.0f;
  mt.d = 1.0f;
  const float sp = block_sum<THREADS>(a.sp, sh_f);
#endif
  rec[0] = ms.m, rec[1] = ms.d, rec[2] = sp, rec[3] = mt.m, rec[4] = mt.d;
}

/* Row statistics after the merge: what the loss/gradient pass needs. */
struct row_t {
  float lse;    /* lse(s) */
  float sp;     /* sum p */
  float lset;   /* lse(t), teacher logits only */
  float kept;   /* 1 or 0 */
};

/* Merges partial records in order k = 0..n-1 (the same order everywhere: deterministic). */
struct row_merge_t {
  md_t s, t;
  float sp;
};
__device__ __forceinline__ void row_merge_init(row_merge_t& m) {
  m.s.m = m.t.m = KL_NEG_INF;
  m.s.d = m.t.d = 0.0f;
  m.sp = 0.0f;
}
__device__ __forceinline__ void row_merge_add(row_merge_t& m, const float* rec) {
  md_t a, b;
  a.m = rec[0], a.d = rec[1], b.m = rec[3], b.d = rec[4];
  m.s = md_merge(m.s, a);
  m.t = md_merge(m.t, b);
  m.sp += rec[2];
}
__device__ __forceinline__ row_t row_finish(const row_merge_t& m) {
  row_t rs;
  rs.lse = m.s.m + logf(m.s.d);
  rs.lset = m.t.m + logf(m.t.d);
#if defined(TEACHER_LOGITS)
  rs.sp = 1.0f;
#else
  rs.sp = m.sp;
#endif
  rs.kept = 1.0f;
  return rs;
}

%include("rows_common.cu.lua")

/* The per-element terms: loss += p (log max(p, eps) - log q); g = gscale (sum p q - p). */
template <int MODE>
__device__ __forceinline__ void elem_terms(const float (&s)[VEC], const float (&t)[VEC],
                                           const row_t& rs, float invTT, float gscale,
                                           float& loss, float (&gv)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; i++) {
    const float logq = s[i] - rs.lse;
#if defined(TEACHER_LOGITS)
    const float logp = t[i] * invTT - rs.lset;
    const float p = fexp(logp);
    const float lp = fmaxf(logp, LOG_EPS);
#elif defined(TEACHER_LOGPROBS)
    const float p = fexp(t[i]);
    const float lp = fmaxf(t[i], LOG_EPS);
#else
    const float p = t[i];
    const float lp = flog(fmaxf(p, EPS));
#endif
    if (MODE != MODE_BACKWARD && p != 0.0f) loss += p * (lp - logq); /* as tests/ref.c */
    gv[i] = gscale * (rs.sp * fexp(logq) - p);
  }
}

/* Row statistics from the saved buffer, or zeros for an ignored row. */
__device__ __forceinline__ row_t row_saved(const float* rowstat, i64 row) {
  row_t rs;
  rs.lse = rowstat[4 * row + 0];
  rs.sp = rowstat[4 * row + 1];
  rs.lset = rowstat[4 * row + 2];
  rs.kept = rowstat[4 * row + 3];
  return rs;
}
__device__ __forceinline__ void row_save(float* rowstat, i64 row, const row_t& rs) {
  rowstat[4 * row + 0] = rs.lse;
  rowstat[4 * row + 1] = rs.sp;
  rowstat[4 * row + 2] = rs.lset;
  rowstat[4 * row + 3] = rs.kept;
}

%if P.CLUSTER == 0 then
/* Pass 1 over columns [v0, v1) of one row: the block's partial record {m, d, sum p, mt, dt},
 * returned to every thread. */
__device__ __forceinline__ void stats_range(const logit_t* __restrict__ zr,
                                            const teach_t* __restrict__ tr,
                                            const bias_t* __restrict__ bias, int v0, int v1,
                                            float invT, float invTT, md_t* sh_md, float* sh_f,
                                            float (&rec)[5]) {
  acc1_t a;
  acc1_init(a);
  const int vfull = v0 + ((v1 - v0) / VEC) * VEC;
  int v = v0 + threadIdx.x * VEC;
  for (; v + 3 * THREADS * VEC < vfull; v += 4 * THREADS * VEC) {
    /* four independent 16-byte loads in flight per thread before the first use */
    float s[4][VEC], t[4][VEC];
#pragma unroll
    for (int u = 0; u < 4; u++) load_cols<true>(zr, tr, bias, v + u * THREADS * VEC, invT, s[u], t[u]);
#pragma unroll
    for (int u = 0; u < 4; u++) acc1_add(a, s[u], t[u], invTT);
  }
  for (; v < vfull; v += THREADS * VEC) {
    float s[VEC], t[VEC];
    load_cols<true>(zr, tr, bias, v, invT, s, t);
    acc1_add(a, s, t, invTT);
  }
  if (v < v1) {
    float s[VEC], t[VEC];
    load_cols<false>(zr, tr, bias, v, invT, s, t);
    acc1_add(a, s, t, invTT);
  }
  acc1_block(a, sh_md, sh_f, rec);
}

extern "C" __global__ void __launch_bounds__(THREADS)
{{ K.signature("kl_dense_stats") }} {
  /* z: (rows, LD) chunk logits; teacher: (N, V); part: (rows, SPLIT, PSTRIDE) */
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  float* out = part + ((i64)r * SPLIT + blockIdx.x) * PSTRIDE;
  __shared__ md_t sh_md[THREADS / 32];
  __shared__ float sh_f[THREADS / 32];
  if (!row_kept(labels, labels_is64, ignore_index, row)) return; /* pass 2 skips the row */
#if defined(TEACHER_LOGITS)
  const float invTT = INV_TT(hdr);
#else
  const float invTT = 1.0f;
#endif
  float rec[5];
  stats_range(z + (i64)r * LD, teacher + row * V, bias, seg_begin(), seg_end(), INV_T(hdr),
              invTT, sh_md, sh_f, rec);
  if (threadIdx.x == 0)
    for (int k = 0; k < 5; k++) out[k] = rec[k];
}

/* Pass 2 over this block's segment: loss partial and/or G. */
template <int MODE>
__device__ __forceinline__ void pass2(const logit_t* z, grad_t* g,
                                      const teach_t* __restrict__ teacher,
                                      const bias_t* __restrict__ bias, const void* labels,
                                      int labels_is64, i64 ignore_index,
                                      const float* __restrict__ hdr,
                                      const float* __restrict__ part, int nrec, i64 srow,
                                      i64 srec, float* rowstat, float* __restrict__ lossp,
                                      const float* __restrict__ gout, int gout_per_row,
                                      i64 row0) {
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  __shared__ row_t sh_row;
  __shared__ float sh_f[THREADS / 32];
  const int v0 = P2SPLIT == 1 ? 0 : seg_begin(), v1 = P2SPLIT == 1 ? V : seg_end();
  const logit_t* zr = z + (i64)r * LD;
  grad_t* gr = g + (i64)r * LDG;
  if (threadIdx.x == 0) {
    row_t rs;
    if (!row_kept(labels, labels_is64, ignore_index, row)) {
      rs.lse = rs.sp = rs.lset = rs.kept = 0.0f;
    } else if (MODE == MODE_BACKWARD) {
      rs = row_saved(rowstat, row);
    } else {
      row_merge_t m;
      row_merge_init(m);
      /* record k of chunk row r at part + (r srow + k srec) PSTRIDE: the chunk's SPLIT partials
       * (nrec = srow = SPLIT, srec = 1), or the shards' global records (kljit_shard_finish) */
      for (int k = 0; k < nrec; k++)
        row_merge_add(m, part + ((i64)r * srow + (i64)k * srec) * PSTRIDE);
      rs = row_finish(m);
    }
    sh_row = rs;
    if (MODE == MODE_FORWARD && blockIdx.x == 0) row_save(rowstat, row, rs);
  }
  __syncthreads();
  const row_t rs = sh_row;
  if (rs.kept == 0.0f) {
    if (MODE != MODE_FORWARD) zero_range(gr, v0, v1);
    if (MODE != MODE_BACKWARD && threadIdx.x == 0) lossp[row * P2SPLIT + blockIdx.x] = 0.0f;
    return;
  }
  const float invT = INV_T(hdr);
#if defined(TEACHER_LOGITS)
  const float invTT = INV_TT(hdr);
#else
  const float invTT = 1.0f;
#endif
  const float gscale = grad_scale(hdr, gout, gout_per_row, row, MODE);
  const teach_t* tr = teacher + row * V;
  float loss = 0.0f;
#if INPLACE
  for (int base = v0; base < v1; base += 4 * THREADS * VEC) { /* block-uniform trip count */
    float s[4][VEC], t[4][VEC];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int v = base + (u * THREADS + threadIdx.x) * VEC;
      if (v + VEC <= v1)
        load_cols<true>(zr, tr, bias, v, invT, s[u], t[u]);
      else if (v < v1)
        load_cols<false>(zr, tr, bias, v, invT, s[u], t[u]);
    }
    __syncthreads(); /* the whole group is read: G may now overwrite it (see the header) */
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int v = base + (u * THREADS + threadIdx.x) * VEC;
      float gv[VEC];
      if (v < v1) elem_terms<MODE>(s[u], t[u], rs, invTT, gscale, loss, gv);
      if (MODE != MODE_FORWARD && v + VEC <= v1) store_cols<true>(gr, v, gv);
      else if (MODE != MODE_FORWARD && v < v1) store_cols<false>(gr, v, gv);
    }
  }
#else
  const int vfull = v0 + ((v1 - v0) / VEC) * VEC;
  for (int v = v0 + threadIdx.x * VEC; v < v1; v += THREADS * VEC) {
    float s[VEC], t[VEC], gv[VEC];
    if (v < vfull)
      load_cols<true>(zr, tr, bias, v, invT, s, t);
    else
      load_cols<false>(zr, tr, bias, v, invT, s, t);
    elem_terms<MODE>(s, t, rs, invTT, gscale, loss, gv);
    if (MODE != MODE_FORWARD) {
      if (v < vfull)
        store_cols<true>(gr, v, gv);
      else
        store_cols<false>(gr, v, gv);
    }
  }
#endif
  if (MODE != MODE_BACKWARD) {
    loss = block_sum<THREADS>(loss, sh_f);
    if (threadIdx.x == 0) lossp[row * P2SPLIT + blockIdx.x] = loss;
  }
}
#define ROW_BODY pass2
#define LAUNCH_BOUNDS __launch_bounds__(THREADS)
%else
/* ---- sm_90 cluster variant: distributed shared memory through PTX (no headers) ---- */
__device__ __forceinline__ u32 smem_addr(const void* p) {
  u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
               ::: "memory");
}
__device__ __forceinline__ float ld_cluster(u32 local_addr, u32 rank) {
  u32 remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local_addr), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

/* One row per cluster; block blockIdx.x (= its rank in the cluster) owns segment blockIdx.x. */
template <int MODE>
__device__ __forceinline__ void cluster_row(const logit_t* z, grad_t* g,
                                            const teach_t* __restrict__ teacher,
                                            const bias_t* __restrict__ bias, const void* labels,
                                            int labels_is64, i64 ignore_index,
                                            const float* __restrict__ hdr,
                                            const float* __restrict__ part, int nrec,
                                            i64 srow, i64 srec, float* rowstat,
                                            float* __restrict__ lossp,
                                            const float* __restrict__ gout, int gout_per_row,
                                            i64 row0) {
  const int r = blockIdx.y;
  const i64 row = row0 + r;
  __shared__ float sh_rec[8];
  __shared__ row_t sh_row;
  __shared__ md_t sh_md[THREADS / 32];
  __shared__ float sh_f[THREADS / 32];
  const logit_t* zr = z + (i64)r * LD;
  grad_t* gr = g + (i64)r * LDG;
  /* kept is the same for every block of the cluster: they all skip, or none does */
  if (!row_kept(labels, labels_is64, ignore_index, row)) {
    if (MODE != MODE_FORWARD) zero_range(gr, seg_begin(), seg_end());
    if (MODE != MODE_BACKWARD && threadIdx.x == 0) lossp[row * SPLIT + blockIdx.x] = 0.0f;
    if (MODE == MODE_FORWARD && blockIdx.x == 0 && threadIdx.x == 0) {
      row_t rs;
      rs.lse = rs.sp = rs.lset = rs.kept = 0.0f;
      row_save(rowstat, row, rs);
    }
    return;
  }
  const float invT = INV_T(hdr);
#if defined(TEACHER_LOGITS)
  const float invTT = INV_TT(hdr);
#else
  const float invTT = 1.0f;
#endif
  const teach_t* tr = teacher + row * V;
  const int v0 = seg_begin(), v1 = seg_end();
  /* the whole segment into registers: NV independent vector loads per thread in flight */
  float s[NV][VEC], t[NV][VEC];
#pragma unroll
  for (int j = 0; j < NV; j++) {
    const int v = v0 + (j * THREADS + threadIdx.x) * VEC;
    if (v + VEC <= v1) {
      load_cols<true>(zr, tr, bias, v, invT, s[j], t[j]);
    } else if (v < v1) {
      load_cols<false>(zr, tr, bias, v, invT, s[j], t[j]);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; i++) {
        s[j][i] = KL_NEG_INF;
#if defined(TEACHER_PROBS)
        t[j][i] = 0.0f;
#else
        t[j][i] = KL_NEG_INF;
#endif
      }
    }
  }
  row_t rs;
  if (MODE == MODE_BACKWARD) {
    rs = row_saved(rowstat, row);
    cluster_sync(); /* every block of the row has its logits in registers: G may overwrite */
  } else {
    acc1_t a;
    acc1_init(a);
#pragma unroll
    for (int j = 0; j < NV; j++) acc1_add(a, s[j], t[j], invTT);
    float rec[5];
    acc1_block(a, sh_md, sh_f, rec);
    if (threadIdx.x < 5) sh_rec[threadIdx.x] = rec[threadIdx.x];
    cluster_sync(); /* records visible cluster-wide; all logits of the row are in registers */
    if (threadIdx.x == 0) {
      const u32 base = smem_addr(sh_rec);
      row_merge_t m;
      row_merge_init(m);
      for (int k = 0; k < CLUSTER; k++) {
        float peer[5];
        for (int q = 0; q < 5; q++) peer[q] = ld_cluster(base + 4 * q, (u32)k);
        row_merge_add(m, peer);
      }
      sh_row = row_finish(m);
      if (MODE == MODE_FORWARD && blockIdx.x == 0) row_save(rowstat, row, sh_row);
    }
    cluster_sync(); /* no block leaves (freeing its records) before every peer has read them */
    rs = sh_row;
  }
  const float gscale = grad_scale(hdr, gout, gout_per_row, row, MODE);
  float loss = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    const int v = v0 + (j * THREADS + threadIdx.x) * VEC;
    float gv[VEC];
    elem_terms<MODE>(s[j], t[j], rs, invTT, gscale, loss, gv);
    if (MODE != MODE_FORWARD) {
      if (v + VEC <= v1)
        store_cols<true>(gr, v, gv);
      else if (v < v1)
        store_cols<false>(gr, v, gv);
    }
  }
  if (MODE != MODE_BACKWARD) {
    loss = block_sum<THREADS>(loss, sh_f);
    if (threadIdx.x == 0) lossp[row * SPLIT + blockIdx.x] = loss;
  }
}
#define ROW_BODY cluster_row
/* at most 128 registers per thread: a 256-thread block leaves room for a second one per SM,
 * whose loads overlap this one's arithmetic */
#define LAUNCH_BOUNDS __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 65536 / (THREADS * 128))
%end

/* g may alias z (G overwrites the chunk logits): no restrict on either. */
extern "C" __global__ void LAUNCH_BOUNDS
{{ K.signature("kl_dense_fused") }} {
  ROW_BODY<MODE_FUSED>(z, g, teacher, bias, labels, labels_is64, ignore_index, hdr, part, nrec,
                       srow, srec, nullptr, lossp, nullptr, 0, row0);
}

extern "C" __global__ void LAUNCH_BOUNDS
{{ K.signature("kl_dense_forward") }} {
  ROW_BODY<MODE_FORWARD>(z, nullptr, teacher, bias, labels, labels_is64, ignore_index, hdr,
                         part, nrec, srow, srec, rowstat, lossp, nullptr, 0, row0);
}

extern "C" __global__ void LAUNCH_BOUNDS
{{ K.signature("kl_dense_backward") }} {
  ROW_BODY<MODE_BACKWARD>(z, g, teacher, bias, labels, labels_is64, ignore_index, hdr, nullptr,
                          0, 0, 0, (float*)rowstat, nullptr, gout, gout_per_row, row0);
}
%if P.CLUSTER == 0 then

/* Split API (kljit_shard_stats): one thread per chunk row merges the row's SPLIT partial
 * records, in order, into one record {m, d, sum p, mt, dt, 0, 0, 0} at out[(row0 + r) * 8]
 * (an ignored row: zeros; pass 2 never reads it). */
extern "C" __global__ void __launch_bounds__(256)
{{ K.signature("kl_dense_merge") }} {
  const int r = blockIdx.x * 256 + threadIdx.x;
  if (r >= rows) return;
  float* o = out + (row0 + r) * PSTRIDE;
  float rec[PSTRIDE] = {};
  if (row_kept(labels, labels_is64, ignore_index, row0 + r)) {
    row_merge_t m;
    row_merge_init(m);
    for (int k = 0; k < SPLIT; k++) row_merge_add(m, part + ((i64)r * SPLIT + k) * PSTRIDE);
    rec[0] = m.s.m, rec[1] = m.s.d, rec[2] = m.sp, rec[3] = m.t.m, rec[4] = m.t.d;
  }
  for (int k = 0; k < PSTRIDE; k++) o[k] = rec[k];
}
%end
%if P.CHECK then

/* Checked mode: one block per row of the call (blockIdx.x); ignored rows are not checked. The
 * first bad row (smallest index) and its kind -> flag as (row << 8) | kind via atomicMin:
 * 3 a value NaN or infinite (-inf allowed for log-probs and logits: p = 0), 4 a negative
 * probability. */
extern "C" __global__ void __launch_bounds__(256)
{{ K.signature("kl_dense_check") }} {
  const i64 row = blockIdx.x;
  if (!row_kept(labels, labels_is64, ignore_index, row)) return;
  int bad = 0;
  for (int v = threadIdx.x; v < V && !bad; v += 256) {
    const float t = to_f32(teacher[row * V + v]);
    const bool finite = (__float_as_uint(t) & 0x7f800000u) != 0x7f800000u;
#if defined(TEACHER_PROBS)
    if (!finite) bad = 3;
    else if (t < 0.0f) bad = 4;
#else
    if (!finite && t != KL_NEG_INF) bad = 3;
#endif
  }
  if (bad) atomicMin(flag, ((u64)row << 8) | (u64)bad);
}
%end
