/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_gemm.c — the generated sm_90a GEMMs on the GPU: every layout (nt: logits, nn: dX, tn: dW)
 * x input dtype x output dtype x beta against an fp64 CPU GEMM of the same rounded inputs, on
 * small and ragged shapes (M, N, K of 1, 7, 127, 129, 4097, the vocabulary sizes of the dense
 * tests), the output poisoned first (beta = 0: NaN; beta = 1: random values inside, NaN
 * outside) and its padding columns and a guard row checked untouched; a second run must give
 * the same bytes. Then every tile shape, schedule, cluster, epilogue and K slicing of
 * jgemm_variants on shapes chosen for each.
 * Skips (77) without an sm_90 GPU.
 *
 * Tolerance, per element (a bound, not an estimate: sqrt(K) growth is what random data does on
 * average, not what one element is promised), bench/bench_gemm.c's tol_generated: the kernel sums
 * K in order, one k16 wgmma step at a time, each step a fused sum of 16 exact products and the
 * accumulator aligned to its largest addend and truncated (the tensor-core model of Fasi, Higham,
 * Mikaitis and Pranesh): at most 17 x 2^-23 x (|S_j| + sum|p| of the step), S_j the exact partial
 * sum before step j; so 2^-23 17 (sum_j |S_j| + sum_k |x_k w_k|), scaled by alpha. Then the fp32
 * add of beta's C (2^-24 |ref|) and one correctly rounded store to a 16-bit output: u |ref| with
 * u = 2^-8 (bf16) or 2^-11 (fp16). Partial sums of random-sign products grow like sqrt(k), so the
 * bound stays far below the error of a lost k-block, row or tile at every K tested (<= 50257).
 * Skips (77) without an sm_90 GPU.
 *
 * Tolerance, per element: |z - ref| <= 2^-14 sum_k |x_k w_k| + (16-bit output) half an ulp of
 * ref, i.e. 2^-9 |ref| for bf16 and 2^-12 |ref| for fp16 (twice that: the beta = 1 input was
 * rounded too). fp32 accumulation of K exact products errs by at most ~K 2^-24 of the sum of
 * their magnitudes (K <= 4104 here: 2^-12), typically sqrt(K) 2^-24; a wrong tile, row, column
 * or k-block is off by the order of the sum itself.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_sm90.h"
#include "gpu_util.h"
#include "harness.h"
#include "jit.h"

typedef struct gemm_mod {
  CUmodule mod;
  jgemm_kernel k; /* its function and manifest: launched by it */
} gemm_mod;

static const drv_table *drv;
static int sms;
static int64_t ld_extra; /* added to C's row stride (N rounded up to 8): runs off 16 bytes */
static uint32_t *sched;  /* the dynamic variants' tile counter pair, zeroed once: every launch
                          * leaves it zero for the next (a second launch checks it) */

static int setup(void) {
  if (!gpu_available()) return 77;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      major != 9)
    return 77; /* sm_90a code runs on sm_90 only */
  TH_CHECK(cudaFree(0) == cudaSuccess); /* the primary context, current for the driver too */
  TH_OK(drv_get(&drv));
  TH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  if (!sched) {
    TH_CHECK(cudaMalloc((void **)&sched, 8) == cudaSuccess);
    TH_CHECK(cudaMemset(sched, 0, 8) == cudaSuccess);
  }
  return 0;
}

static int load(const jgemm_variant *v, gemm_mod *m) {
  const kspec k = jgemm_spec(v);
  cache_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.disabled = 1;
  jit_bin bin;
  TH_OK(jit_build(&k, 90, &cfg, &bin));
  TH_OK(drv_check(drv, drv->cuModuleLoadData(&m->mod, bin.cubin.data), "cuModuleLoadData"));
  TH_OK(jgemm_load(drv, m->mod, bin.manifest.data, bin.name, &m->k));
  jit_bin_free(&bin);
  return TH_PASS;
}

/* C against the fp64 GEMM of the rounded operands x (A: nn [M, K], tn [K, M], row stride lda)
 * and w (B), z0 the beta input: counts the elements past their tolerance (bad) and the padding
 * and guard-row elements written (clobbered), and the worst error / tolerance. */
static void check_c(const jgemm_variant *v, const double *x, int64_t lda, const double *w,
                    int64_t ldb, const double *z0, const double *z, int64_t M, int64_t N,
                    int64_t K, int64_t ld, double alpha, size_t *bad, size_t *clobbered,
                    double *worst) {
  const int tn = !strcmp(v->layout, "tn"), nn = tn || !strcmp(v->layout, "nn");
  const kljit_dtype out = v->out;
  /* The output's unit roundoff u = 2^-p (p = 8 significand bits for bf16, 11 for fp16): a
   * correctly rounded store (cvt.rn) of the fp32 result y is within half an ulp of y, which is
   * u |y| at most (just above a power of two). The test allowed u / 2, half of that, so a
   * correctly rounded element could read up to twice its tolerance (bf16 worst 1.9 on the H200;
   * fp16 hid it under the fp32 term, 2^-14 mag, which is comparable to its u there). */
  const double q = out == KLJIT_BF16 ? 0x1p-8 : out == KLJIT_FP16 ? 0x1p-11 : 0;
  for (int64_t i = 0; i <= M; i++)
    for (int64_t j = 0; j < ld; j++) {
      const double got = z[i * ld + j];
      if (i == M || j >= N) {
        *clobbered += !isnan(got);
        continue;
      }
      /* KSLICE: the accumulators restart every slice (chain: partial sums since the slice's
       * start) and each slice's sum is added into C in fp32 (adds: one rounding each of the
       * running sum, 2^-24 |C| at most; counted twice in the tolerance below) */
      const int64_t slice = v->kslice > 0 ? 64 * (int64_t)v->kslice : K;
      double ref = 0, mag = 0, chain = 0, adds = 0, start = 0;
      for (int64_t k = 0; k < K; k++) {
        if (k % slice == 0 && k > 0) adds += fabs(ref), start = ref;
        if (k % 16 == 0) chain += fabs(ref - start); /* the partial sum before each k16 step */
        const double pr = x[tn ? k * lda + i : i * lda + k] * w[nn ? k * ldb + j : j * ldb + k];
        ref += pr, mag += fabs(pr);
      }
      if (K > slice) adds += fabs(ref);
      ref *= alpha, mag *= alpha, chain *= alpha, adds *= alpha;
      if (v->beta) ref += z0[i * ld + j];
      /* beta: C was uploaded rounded (z0 holds those values) and is added in fp32 before the
       * one rounding of the store */
      const double tol =
          0x1p-23 * 17 * (chain + mag) + 0x1p-23 * adds + (q + 0x1p-24) * fabs(ref) + 1e-30;
      const double e = fabs(got - ref) / tol;
      if (!(e <= 1)) (*bad)++;
      if (!(e <= *worst)) *worst = isfinite(e) ? e : INFINITY;
    }
}

/* One shape with one variant: 0 when every check holds (worst error printed). */
static int one(const jgemm_variant *v, const gemm_mod *m, int64_t M, int64_t N, int64_t K,
               host_rng *r) {
  /* nt: W[N, K]; nn, tn: B[K, N] row-major; tn: A[K, M] row-major (G of dW = G^T X); rows
   * padded to multiples of 8 as the chunk buffers */
  const int tn = !strcmp(v->layout, "tn"), nn = tn || !strcmp(v->layout, "nn");
  const int64_t ld = (N + 7) / 8 * 8 + ld_extra, lda = tn ? (M + 7) / 8 * 8 : (K + 7) / 8 * 8;
  const int64_t ldb = nn ? (N + 7) / 8 * 8 : (K + 7) / 8 * 8, na = tn ? K * lda : M * lda;
  const int64_t nw = nn ? K * ldb : N * ldb;
  const kljit_dtype in = v->in, out = v->out;
  const size_t nz = (size_t)(M + 1) * (size_t)ld;
  double *x = malloc(sizeof(double) * (size_t)na);
  double *w = malloc(sizeof(double) * (size_t)nw);
  double *z0 = malloc(sizeof(double) * nz), *z = malloc(sizeof(double) * nz);
  TH_CHECK(x && w && z0 && z);
  for (int64_t i = 0; i < na; i++) x[i] = 2 * host_uniform(r) - 1;
  for (int64_t i = 0; i < nw; i++) w[i] = 2 * host_uniform(r) - 1;
  gbuf gx, gw, gz;
  TH_CHECK(!gbuf_alloc(&gx, in, (size_t)na) && !gbuf_alloc(&gw, in, (size_t)nw));
  TH_CHECK(!gbuf_alloc(&gz, out, nz));
  TH_CHECK(!gbuf_upload(&gx, x, x) && !gbuf_upload(&gw, w, w));
  TH_CHECK(!gbuf_poison(&gz));
  if (v->beta) { /* C starts as random values inside [M, N], NaN in the padding */
    TH_CHECK(!gbuf_download(&gz, z0));
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) z0[i * ld + j] = 2 * host_uniform(r) - 1;
    TH_CHECK(!gbuf_upload(&gz, z0, z0));
  }
  const float alpha = v->beta ? 0.5f : 1.0f;
  const jgemm_args a = {gx.ptr, gw.ptr, gz.ptr, M, N, K, lda, ldb, ld, alpha, {0}, {0}, sched};
  TH_OK(jgemm_launch(drv, &m->k, v, sms, &a, NULL));
  TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  TH_CHECK(!gbuf_download(&gz, z));
  uint32_t left[2] = {1, 1}; /* the counter pair as the launch left it: zero */
  TH_CHECK(cudaMemcpy(left, sched, sizeof left, cudaMemcpyDeviceToHost) == cudaSuccess);
  TH_CHECK(left[0] == 0 && left[1] == 0);
  size_t bad = 0, clobbered = 0;
  double worst = 0;
  check_c(v, x, lda, w, ldb, z0, z, M, N, K, ld, alpha, &bad, &clobbered, &worst);
  /* bitwise reproducible (beta = 0: the same launch again over the same output) */
  int same = 1;
  if (!v->beta) {
    const size_t bytes = nz * host_dtype_size(out);
    unsigned char *b1 = malloc(bytes), *b2 = malloc(bytes);
    TH_CHECK(b1 && b2 && !gbuf_bytes(&gz, b1));
    TH_OK(jgemm_launch(drv, &m->k, v, sms, &a, NULL));
    TH_CHECK(cudaDeviceSynchronize() == cudaSuccess && !gbuf_bytes(&gz, b2));
    same = memcmp(b1, b2, bytes) == 0;
    free(b1), free(b2);
  }
  char what[64];
  jgemm_describe(v, what, sizeof what);
  printf("  %-24s M=%-5lld N=%-6lld K=%-5lld worst err/tol %.3f, bad %zu, clobbered %zu%s\n",
         what, (long long)M, (long long)N, (long long)K, worst, bad, clobbered,
         same ? "" : ", NOT REPRODUCIBLE");
  gbuf_free(&gx), gbuf_free(&gw), gbuf_free(&gz);
  free(x), free(w), free(z0), free(z);
  return bad || clobbered || !same;
}

/* Every layout (nt: logits, nn: dX, tn: dW; each GEMM's default variant as the plans take it,
 * jgemm_kind_default: dW accumulating through the staged epilogue) x input dtype x output dtype
 * x beta, on ragged shapes. */
static int every_layout_dtype_output_and_beta_matches_fp64_on_ragged_shapes(void) {
  const int s = setup();
  if (s) return s;
  static const int64_t shapes[][3] = {
      {1, 1, 8},     {7, 7, 8},      {127, 129, 72}, {129, 127, 136}, {4097, 7, 24},
      {7, 4097, 16}, {3, 32000, 8},  {5, 32001, 16}, {2, 50257, 8},   {129, 1, 4104},
      {1, 128256, 8}, {2, 151936, 8}, {1, 256000, 8}};
  static const kljit_dtype ins[] = {KLJIT_BF16, KLJIT_FP16};
  static const kljit_dtype outs[] = {KLJIT_FP32, KLJIT_BF16, KLJIT_FP16};
  host_rng r = {2026};
  int failed = 0;
  for (int kind = GEMM_LOGITS; kind <= GEMM_DW; kind++)
    for (int i = 0; i < 2; i++)
      for (int o = 0; o < 3; o++)
        for (int beta = 0; beta < 2; beta++) {
          const jgemm_variant v = jgemm_kind_default(kind, ins[i], outs[o], beta);
          gemm_mod m;
          TH_CHECK(load(&v, &m) == TH_PASS);
          for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            failed |= one(&v, &m, shapes[k][0], shapes[k][1], shapes[k][2], &r);
          drv->cuModuleUnload(m.mod);
        }
  TH_CHECK(!failed);
  return TH_PASS;
}

static int every_tile_shape_matches_fp64(void) {
  const int s = setup();
  if (s) return s;
  jgemm_variant v[JGEMM_VARIANTS_MAX];
  const int n = jgemm_variants(v, JGEMM_VARIANTS_MAX);
  host_rng r = {7};
  int failed = 0;
  for (int i = 0; i < n; i++) {
    if (v[i].out != KLJIT_FP32 || v[i].beta || strcmp(v[i].layout, "nt")) continue;
    gemm_mod m;
    TH_CHECK(load(&v[i], &m) == TH_PASS);
    failed |= one(&v[i], &m, 257, 1031, 200, &r);
    failed |= one(&v[i], &m, 129, 32001, 64, &r);
    drv->cuModuleUnload(m.mod);
  }
  TH_CHECK(!failed);
  return TH_PASS;
}

typedef int (*variant_filter)(const jgemm_variant *v);

/* Every variant of jgemm_variants that `want` selects, on each of `count` shapes {M, N, K}:
 * TH_PASS when at least `min_tried` were selected and every check held. */
static int selected_variants_match(variant_filter want, const int64_t (*shapes)[3], size_t count,
                                   uint64_t seed, int min_tried) {
  jgemm_variant v[JGEMM_VARIANTS_MAX];
  const int n = jgemm_variants(v, JGEMM_VARIANTS_MAX);
  host_rng r = {seed};
  int failed = 0, tried = 0;
  for (int i = 0; i < n; i++) {
    if (!want(&v[i])) continue;
    gemm_mod m;
    TH_CHECK(load(&v[i], &m) == TH_PASS);
    for (size_t k = 0; k < count; k++)
      failed |= one(&v[i], &m, shapes[k][0], shapes[k][1], shapes[k][2], &r);
    drv->cuModuleUnload(m.mod);
    tried++;
  }
  TH_CHECK(tried >= min_tried && !failed);
  return TH_PASS;
}

static int is_nn(const jgemm_variant *v) { return !strcmp(v->layout, "nn"); }
static int is_tn(const jgemm_variant *v) { return !strcmp(v->layout, "tn"); }
static int is_pingpong_or_cluster_g(const jgemm_variant *v) {
  return v->schedule == 'p' || (v->cluster == 2 && v->raster == 'g');
}

/* The nn layout (C = A B, B[K, N] row-major: the dX = G W shape, K = V with its ragged tails),
 * each dtype with fp32 and input-dtype output. */
static int nn_layout_matches_fp64_on_ragged_shapes(void) {
  const int s = setup();
  if (s) return s;
  static const int64_t shapes[][3] = {{1, 8, 1},     {7, 64, 7},      {129, 136, 127},
                                      {127, 72, 129}, {65, 200, 4097}, {5, 64, 32001},
                                      {3, 256, 50257}, {2, 4096, 129}};
  return selected_variants_match(is_nn, shapes, sizeof shapes / sizeof shapes[0], 11, 4);
}

/* The pingpong schedule (two warpgroups on alternate tiles, a turn barrier passing the shared
 * ring) and clusters of 2 (stages freed by both CTAs' arrivals): every pingpong variant of
 * jgemm_variants (each layout, output, beta, clusters of 1 and 2) and the cooperative cluster-2
 * ones of raster g, on shapes with one tile, an odd and an even count of tiles per CTA, k-blocks
 * fewer than the stages and many more, and ragged tails. */
static int pingpong_and_cluster_variants_match_fp64_on_ragged_shapes(void) {
  const int s = setup();
  if (s) return s;
  static const int64_t shapes[][3] = {{1, 1, 8},       {129, 127, 136}, {4097, 515, 8},
                                      {1031, 4097, 8}, {129, 1031, 1032}, {65, 32001, 16}};
  return selected_variants_match(is_pingpong_or_cluster_g, shapes,
                                 sizeof shapes / sizeof shapes[0], 13, 24);
}

/* The tn layout (C (+)= A^T B with A[K, M] and B[K, N] row-major: dW = G^T X, K = the chunk's
 * rows, M = V with its ragged tails, N = H; beta accumulating over chunks), every such variant
 * of jgemm_variants (cooperative and pingpong, fp32 and input-dtype outputs). */
static int tn_layout_matches_fp64_on_ragged_shapes(void) {
  const int s = setup();
  if (s) return s;
  static const int64_t shapes[][3] = {{1, 8, 1},       {7, 64, 7},     {129, 136, 127},
                                      {32001, 16, 5},  {50257, 8, 3},  {127, 72, 4097},
                                      {200, 264, 129}, {1031, 4104, 9}};
  return selected_variants_match(is_tn, shapes, sizeof shapes / sizeof shapes[0], 17, 8);
}

static int is_dynamic(const jgemm_variant *v) { return (v->tweaks & KSPEC_GEMM_DYNAMIC) != 0; }

/* Tiles claimed from a counter (TILES dynamic): every such variant of jgemm_variants (each
 * layout's default, both schedules, clusters of 1 and 2) on shapes with one tile (the grid's
 * own, no claim; with clusters of 2, an odd last row tile's partner), fewer tiles than CTAs,
 * many tiles a CTA with k-blocks fewer than the stages and many more, ragged tails. one()
 * launches each twice on one counter pair: the second launch finds the pair zero only if the
 * first left it so, and must give the same bits. */
static int dynamic_tile_variants_match_fp64_on_ragged_shapes(void) {
  const int s = setup();
  if (s) return s;
  static const int64_t shapes[][3] = {{1, 1, 8},         {129, 127, 136}, {4097, 515, 8},
                                      {1031, 4097, 8},   {129, 1031, 1032}, {65, 32001, 16},
                                      {2050, 2056, 264}};
  return selected_variants_match(is_dynamic, shapes, sizeof shapes / sizeof shapes[0], 31, 6);
}

static int is_staged(const jgemm_variant *v) { return v->epilogue == 's'; }
static int is_sliced(const jgemm_variant *v) { return v->kslice > 0; }

/* The staged epilogue (each warp's block through shared memory, 16-byte runs of C, BETA's C
 * loaded once per tile), every such variant of jgemm_variants (the dW shape accumulating into
 * fp32, bf16 and fp16, both schedules; the logits and the dX shapes written), on ragged shapes:
 * N off the 4- and 8-element runs (partial runs element by element), ldc not a multiple of 8
 * (every run partial), one row, rows past a tile. */
static int staged_epilogue_variants_match_fp64_on_ragged_shapes(void) {
  const int s = setup();
  if (s) return s;
  static const int64_t shapes[][3] = {{1, 8, 1},      {7, 64, 7},     {129, 136, 127},
                                      {127, 72, 129}, {200, 264, 129}, {1031, 4104, 9},
                                      {65, 4097, 200}, {5, 32001, 16}};
  const size_t count = sizeof shapes / sizeof shapes[0];
  TH_CHECK(selected_variants_match(is_staged, shapes, count, 19, 6) == TH_PASS);
  ld_extra = 3; /* C's rows 12 bytes off a 16-byte run (fp32), 6 (16-bit): no whole runs */
  const int st = selected_variants_match(is_staged, shapes, count, 29, 6);
  ld_extra = 0;
  return st;
}

/* K in slices of 3 k-blocks (the dX over a long vocabulary in one launch: each slice's sum
 * added into fp32 C): K shorter than a slice, exactly one, a ragged last slice, many slices,
 * with both epilogues and both schedules. */
static int sliced_k_variants_match_fp64_on_ragged_shapes(void) {
  const int s = setup();
  if (s) return s;
  static const int64_t shapes[][3] = {{1, 8, 100},     {7, 64, 192},    {129, 136, 193},
                                      {127, 72, 4097}, {200, 264, 1031}, {3, 4096, 32001}};
  return selected_variants_match(is_sliced, shapes, sizeof shapes / sizeof shapes[0], 23, 3);
}

/* G rebuilt in the stage (GOP, issue 27's step 2): A's tensor holds E' (fp16 in (0, 1], the
 * logits GEMM's exp(s - m_tile)), P the teacher's probabilities (pdt), f a factor per (row of G,
 * column tile of fw columns), g a scale per row; the kernel multiplies G = IN(f E' - g P), an fp32
 * product, one fma and one rounding, which the host forms with the same operations and checks C
 * against as any GEMM of that A. G has R rows of V columns: nn (dX = G W): M = R, K = V; tn
 * (dW = G^T X): K = R, M = V. Each row's factors end with a NaN one past its last tile, a NaN
 * row of factors and scales follows the last row, and E' and P (on strides of their own) carry
 * NaN past V in their padding: a factor of the wrong tile or row, an element of the wrong row or
 * column, or P read on E''s stride shows as a wrong or NaN C. */
static int one_gop(const jgemm_variant *v, const gemm_mod *m, int64_t R, int64_t V, int64_t N,
                   host_rng *r) {
  const int tn = !strcmp(v->layout, "tn"), pdt = v->gop.pdt != 0;
  const int64_t M = tn ? V : R, K = tn ? R : V;
  /* E' and P on strides of their own (8 and 16 elements of NaN padding past V); the factors
   * and the scales with a NaN row past R */
  const int64_t ldg = (V + 7) / 8 * 8 + 8, ldp = ldg + 8, ldb = (N + 7) / 8 * 8;
  const int64_t ld = (N + 7) / 8 * 8;
  const int64_t tiles = (V + v->gop.fw - 1) / v->gop.fw, fld = tiles + 1;
  const size_t ng = (size_t)(R * ldg), np = (size_t)(R * ldp), nw = (size_t)(K * ldb);
  const size_t nf = (size_t)((R + 1) * fld), nz = (size_t)((M + 1) * ld);
  double *e = malloc(sizeof(double) * ng), *p = malloc(sizeof(double) * np);
  double *gm = calloc(ng, sizeof(double)), *w = malloc(sizeof(double) * nw);
  double *f = malloc(sizeof(double) * nf), *g = malloc(sizeof(double) * (size_t)(R + 1));
  double *z = malloc(sizeof(double) * nz);
  TH_CHECK(e && p && gm && w && f && g && z);
  for (int64_t i = 0; i <= R; i++) {
    for (int64_t j = 0; i < R && j < ldp; j++) {
      if (j < ldg) e[i * ldg + j] = j < V ? exp(-6 * host_uniform(r)) : NAN;
      p[i * ldp + j] = j < V ? host_uniform(r) : NAN;
    }
    for (int64_t t = 0; t < fld; t++)
      f[i * fld + t] = i < R && t < tiles ? 0.5 + host_uniform(r) : NAN;
    g[i] = i < R ? 0.25 + 0.75 * host_uniform(r) : NAN;
  }
  for (size_t i = 0; i < nw; i++) w[i] = 2 * host_uniform(r) - 1;
  gbuf ge, gp, gw, gz, gf, gg;
  TH_CHECK(!gbuf_alloc(&ge, KLJIT_FP16, ng) && !gbuf_alloc(&gp, pdt ? v->gop.pdt : KLJIT_BF16, np));
  TH_CHECK(!gbuf_alloc(&gw, v->in, nw) && !gbuf_alloc(&gz, v->out, nz));
  TH_CHECK(!gbuf_alloc(&gf, KLJIT_FP32, nf) && !gbuf_alloc(&gg, KLJIT_FP32, (size_t)(R + 1)));
  TH_CHECK(!gbuf_upload(&ge, e, e) && !gbuf_upload(&gp, p, p) && !gbuf_upload(&gw, w, w));
  TH_CHECK(!gbuf_upload(&gf, f, f) && !gbuf_upload(&gg, g, g) && !gbuf_poison(&gz));
  for (int64_t i = 0; i < R; i++) /* G as the kernel forms it */
    for (int64_t j = 0; j < V; j++) {
      float y = (float)f[i * fld + j / v->gop.fw] * (float)e[i * ldg + j];
      if (pdt) y = fmaf(-(float)g[i], (float)p[i * ldp + j], y);
      gm[i * ldg + j] = v->in == KLJIT_BF16 ? host_bf16_to_f32(host_f32_to_bf16(y))
                                            : host_f16_to_f32(host_f32_to_f16(y));
    }
  jgemm_args a = {ge.ptr, gw.ptr, gz.ptr, M, N, K, ldg, ldb, ld, 1.0f, {0}, {0}, sched};
  a.gop.fac = gf.ptr, a.gop.fld = fld;
  if (pdt) a.gop.p = gp.ptr, a.gop.ldp = ldp, a.gop.g = gg.ptr;
  TH_OK(jgemm_launch(drv, &m->k, v, sms, &a, NULL));
  TH_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  TH_CHECK(!gbuf_download(&gz, z));
  size_t bad = 0, clobbered = 0;
  double worst = 0;
  check_c(v, gm, ldg, w, ldb, NULL, z, M, N, K, ld, 1.0, &bad, &clobbered, &worst);
  const size_t bytes = nz * host_dtype_size(v->out); /* bitwise reproducible */
  unsigned char *b1 = malloc(bytes), *b2 = malloc(bytes);
  TH_CHECK(b1 && b2 && !gbuf_bytes(&gz, b1));
  TH_OK(jgemm_launch(drv, &m->k, v, sms, &a, NULL));
  TH_CHECK(cudaDeviceSynchronize() == cudaSuccess && !gbuf_bytes(&gz, b2));
  const int same = memcmp(b1, b2, bytes) == 0;
  char what[64];
  jgemm_describe(v, what, sizeof what);
  printf("  %-32s R=%-5lld V=%-6lld N=%-5lld worst err/tol %.3f, bad %zu, clobbered %zu%s\n",
         what, (long long)R, (long long)V, (long long)N, worst, bad, clobbered,
         same ? "" : ", NOT REPRODUCIBLE");
  gbuf_free(&ge), gbuf_free(&gp), gbuf_free(&gw), gbuf_free(&gz), gbuf_free(&gf), gbuf_free(&gg);
  free(e), free(p), free(gm), free(w), free(f), free(g), free(z), free(b1), free(b2);
  return bad || clobbered || !same;
}

/* The GOP variants the tests and the unit test compile (jgemm_gop_variants). */
static int g_operand_stage_rebuilds_g_and_matches_fp64_on_ragged_shapes(void) {
  const int s = setup();
  if (s) return s;
  /* {R, V, N}: one row, rows past a tile, V off the factor tiles and the k-blocks, many tiles */
  static const int64_t shapes[][3] = {{1, 8, 8},       {7, 200, 64},    {129, 1031, 136},
                                      {257, 4097, 72}, {65, 32001, 264}, {130, 515, 4096}};
  jgemm_variant v[16];
  const int n = jgemm_gop_variants(v, 16);
  TH_CHECK(n >= 6);
  host_rng r = {31};
  int failed = 0;
  for (int i = 0; i < n; i++) {
    gemm_mod m;
    TH_CHECK(load(&v[i], &m) == TH_PASS);
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
      failed |= one_gop(&v[i], &m, shapes[k][0], shapes[k][1], shapes[k][2], &r);
    drv->cuModuleUnload(m.mod);
  }
  TH_CHECK(!failed);
  return TH_PASS;
}

static const th_case cases[] = {
    {"dynamic_tile_variants_match_fp64_on_ragged_shapes",
     dynamic_tile_variants_match_fp64_on_ragged_shapes},
    {"g_operand_stage_rebuilds_g_and_matches_fp64_on_ragged_shapes",
     g_operand_stage_rebuilds_g_and_matches_fp64_on_ragged_shapes},
    {"staged_epilogue_variants_match_fp64_on_ragged_shapes",
     staged_epilogue_variants_match_fp64_on_ragged_shapes},
    {"sliced_k_variants_match_fp64_on_ragged_shapes",
     sliced_k_variants_match_fp64_on_ragged_shapes},
    {"tn_layout_matches_fp64_on_ragged_shapes", tn_layout_matches_fp64_on_ragged_shapes},
    {"pingpong_and_cluster_variants_match_fp64_on_ragged_shapes",
     pingpong_and_cluster_variants_match_fp64_on_ragged_shapes},
    {"nn_layout_matches_fp64_on_ragged_shapes", nn_layout_matches_fp64_on_ragged_shapes},
    {"every_layout_dtype_output_and_beta_matches_fp64_on_ragged_shapes",
     every_layout_dtype_output_and_beta_matches_fp64_on_ragged_shapes},
    {"every_tile_shape_matches_fp64", every_tile_shape_matches_fp64},
};
TH_MAIN(cases)
