/* SPDX-License-Identifier: Apache-2.0 */
/* bench_gemm.c — the generated sm_90a GEMM against cuBLASLt, checked then timed, one run.
 *
 * The logits GEMM of the chunk loop, Z[M, N] (ld) = X[M, K] W[N, K]^T (bf16 in, fp32 or bf16
 * out). For each shape:
 *   check   the output poisoned (NaN) first; every element written, the padding columns and a
 *           guard row left alone; rows 0, M/2, M-1 in full and 512 random elements against an
 *           fp64 dot product of the same rounded inputs; the same rows against cuBLASLt;
 *   time    cuBLASLt's heuristic choice (what kljit runs untuned), the best of its top 8
 *           algorithms (what the tuner picks), and each generated variant: CUDA events, the
 *           median of --repeats after one warm-up, a 256 MiB memset flushing L2 before each.
 * Small ragged shapes (--check-small) are checked in full against fp64 with both outputs.
 * Tolerance: |z - ref| <= 2^-14 sum_k |x_k w_k|, + half a bf16 ulp per rounding (close_enough).
 * fp32 accumulation of K exact bf16 products errs by at most ~K 2^-24 of that sum in the worst case
 * and ~sqrt(K) 2^-24 typically; 2^-14 leaves room for the tensor cores' own accumulation order
 * while any wrong tile, row or k-block gives an error of the order of the sum itself.
 * Uses internal headers (the family's renderer, NVRTC, the driver table): a developer tool.
 */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_sm90.h"
#include "host_dtype.h"
#include "nvrtc_compile.h"

/* Checks for a developer tool: any failure ends the run with the call and its reason. */
static void die_cuda(cudaError_t e, const char *call, int line) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "bench_gemm.c:%d: %s: %s\n", line, call, cudaGetErrorString(e));
  exit(1);
}
static void die_kljit(kljit_status s, const char *call, int line) {
  if (s == KLJIT_SUCCESS) return;
  fprintf(stderr, "bench_gemm.c:%d: %s: %s\n", line, call, kljit_last_error());
  exit(1);
}
static void die_lt(cublasStatus_t s, const char *call, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fprintf(stderr, "bench_gemm.c:%d: %s: %s\n", line, call, cublasLtGetStatusString(s));
  exit(1);
}
#define CK(x) die_cuda((x), #x, __LINE__)
#define KO(x) die_kljit((x), #x, __LINE__)
#define LT(x) die_lt((x), #x, __LINE__)

enum { TILE = 4194301, FLUSH = 256 << 20, LT_WS = 32 << 20, MAX_V = 8 };

static int repeats = 10;
static int do_time = 1; /* --no-time: checks only (compute-sanitizer runs) */
static const drv_table *drv;
static int sms;
static float *tile_host; /* the values every input repeats (a prime period: rows never align) */
static uint16_t *tile_dev; /* the same as bf16, twice over (make_tile) */

/* ---- inputs --------------------------------------------------------------------------------- */

/* The tile on the host (fp64 references) and twice over on the device as bf16, so that any
 * TILE consecutive elements from any offset are one contiguous device range (fill). */
static void make_tile(void) {
  tile_host = malloc(sizeof(float) * TILE);
  uint16_t *h = malloc(sizeof(uint16_t) * 2 * TILE);
  uint64_t s = 12345;
  for (size_t i = 0; i < TILE; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = h[TILE + i] = host_f32_to_bf16((float)((double)(s >> 11) * 0x1p-53 * 2.0 - 1.0));
    tile_host[i] = host_bf16_to_f32(h[i]);
  }
  CK(cudaMalloc((void **)&tile_dev, sizeof(uint16_t) * 2 * TILE));
  CK(cudaMemcpy(tile_dev, h, sizeof(uint16_t) * 2 * TILE, cudaMemcpyHostToDevice));
  free(h);
}

/* Element i of an input with offset `seed` (A and B differ) is tile_host[(i + seed) % TILE].
 * fill writes it by device copies of the doubled tile: converting W
 * (525 M elements at V = 128256) on the host took seconds per shape and output. */
static void fill(void *dst, size_t count, size_t seed) {
  for (size_t off = 0; off < count; off += TILE) {
    const size_t n = count - off < TILE ? count - off : TILE;
    CK(cudaMemcpy((uint16_t *)dst + off, tile_dev + (off + seed) % TILE, n * 2,
                  cudaMemcpyDeviceToDevice));
  }
}

/* ---- the three GEMMs under test ------------------------------------------------------------- */

typedef struct shape {
  int64_t m, n, k, ld;
  int out_bf16;
} shape;

typedef struct lt_gemm {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo[8];
  int count;
} lt_gemm;

/* Z^T (N x M, column-major, ld) = W^T(op T on the K x N W) X^T (K x M): kljit's GEMM_LOGITS. */
static void lt_setup(lt_gemm *g, const shape *s) {
  LT(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
  LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
  LT(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_16BF, (uint64_t)s->k, (uint64_t)s->n, s->k));
  LT(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_16BF, (uint64_t)s->k, (uint64_t)s->m, s->k));
  LT(cublasLtMatrixLayoutCreate(&g->lc, s->out_bf16 ? CUDA_R_16BF : CUDA_R_32F, (uint64_t)s->n,
                                (uint64_t)s->m, s->ld));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t cap = LT_WS;
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap,
                                          sizeof cap));
  cublasLtMatmulHeuristicResult_t r[8];
  int got = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(g->h, g->op, g->la, g->lb, g->lc, g->lc, pref, 8, r, &got));
  g->count = 0;
  for (int i = 0; i < got; i++)
    if (r[i].state == CUBLAS_STATUS_SUCCESS) g->algo[g->count++] = r[i].algo;
  cublasLtMatmulPreferenceDestroy(pref);
}

static void lt_teardown(lt_gemm *g) {
  cublasLtMatrixLayoutDestroy(g->la), cublasLtMatrixLayoutDestroy(g->lb);
  cublasLtMatrixLayoutDestroy(g->lc), cublasLtMatmulDescDestroy(g->op);
}

static int lt_run(lt_gemm *g, int which, const void *x, const void *w, void *z, void *ws) {
  const float one = 1.0f, zero = 0.0f;
  return cublasLtMatmul(g->h, g->op, &one, w, g->la, x, g->lb, &zero, z, g->lc, z, g->lc,
                        &g->algo[which], ws, LT_WS, 0) == CUBLAS_STATUS_SUCCESS;
}

typedef struct jit_fn {
  jgemm_variant v;
  CUmodule mod;
  CUfunction fn;
  char name[64];
} jit_fn;

static void jit_load(jit_fn *j) {
  strbuf src = {0}, cubin = {0}, log = {0};
  jgemm_describe(&j->v, j->name, sizeof j->name);
  KO(jgemm_render(&j->v, &src));
  KO(nvrtc_compile(src.data, "gemm_sm90", 90 | NVRTC_ARCH_SPECIFIC, &cubin, &log));
  KO(drv_check(drv, drv->cuModuleLoadData(&j->mod, cubin.data), "cuModuleLoadData"));
  KO(drv_check(drv, drv->cuModuleGetFunction(&j->fn, j->mod, "kl_gemm"), "kl_gemm"));
  KO(jgemm_prepare(drv, j->fn, &j->v));
  sb_free(&src), sb_free(&cubin), sb_free(&log);
}

static int jit_run(const jit_fn *j, const shape *s, const void *x, const void *w, void *z) {
  const jgemm_args a = {x, w, z, s->m, s->n, s->k, s->k, s->k, s->ld, 1.0f};
  const kljit_status st = jgemm_launch(drv, j->fn, &j->v, sms, &a, NULL);
  if (st != KLJIT_SUCCESS) fprintf(stderr, "%s: %s\n", j->name, kljit_last_error());
  return st == KLJIT_SUCCESS;
}

/* ---- checking ------------------------------------------------------------------------------- */

static double z_at(const void *host, int bf16, size_t i) {
  if (bf16) return host_bf16_to_f32(((const uint16_t *)host)[i]);
  return ((const float *)host)[i];
}

/* fp64 reference of z[i][j] and the sum of |products| (the error scale). */
static double ref_at(const shape *s, int64_t i, int64_t j, double *scale) {
  double acc = 0, mag = 0;
  /* the inputs' tile indices walked without a division per product (full checks do ~10^9) */
  size_t a = (size_t)(i * s->k) % TILE, b = ((size_t)(j * s->k) + 77) % TILE;
  for (int64_t k = 0; k < s->k; k++) {
    const double p = (double)tile_host[a] * tile_host[b];
    acc += p, mag += fabs(p);
    if (++a == TILE) a = 0;
    if (++b == TILE) b = 0;
  }
  *scale = mag;
  return acc;
}

/* `roundings`: bf16 roundings between got and ref, each within 2^-8 |ref| (half an ulp): 1
 * against fp64, 2 against cuBLASLt's bf16 output (two correctly rounded results of slightly
 * different fp32 sums may sit on either side of a rounding boundary: one ulp apart). */
static int close_enough(const shape *s, double got, double ref, double scale, int roundings,
                        double *worst) {
  double tol = ldexp(scale, -14) + 1e-30;
  if (s->out_bf16) tol += roundings * fabs(ref) * 0x1p-8;
  const double e = fabs(got - ref) / tol;
  if (!(e <= *worst)) *worst = isfinite(e) ? e : INFINITY;
  return e <= 1.0;
}

/* Of elements [from, from + n) of a host output: how many are not finite (nan_only: are NaN),
 * by their bits (exponent all ones; NaN: and a mantissa), a loop the compiler vectorizes: the
 * scan of every element of a 2 GiB output through z_at took over a second per check. */
static size_t count_not_finite(const void *host, int bf16, size_t from, size_t n, int nan_only) {
  size_t c = 0;
  if (bf16) {
    const uint16_t *p = (const uint16_t *)host + from;
    for (size_t i = 0; i < n; i++)
      c += (p[i] & 0x7f80u) == 0x7f80u && (!nan_only || (p[i] & 0x7fu));
  } else {
    const uint32_t *p = (const uint32_t *)host + from;
    for (size_t i = 0; i < n; i++)
      c += (p[i] & 0x7f800000u) == 0x7f800000u && (!nan_only || (p[i] & 0x7fffffu));
  }
  return c;
}

/* Page-locked host copy `which` (0, 1) of at least `bytes`, kept across shapes: a 2 GiB output
 * (4097 x 128256 fp32) copied into fresh pageable memory for each variant's check took most of
 * a second per copy. */
static void *staging(int which, size_t bytes) {
  static void *buf[2];
  static size_t cap[2];
  if (cap[which] < bytes) {
    if (buf[which]) CK(cudaFreeHost(buf[which]));
    CK(cudaMallocHost(&buf[which], bytes));
    cap[which] = bytes;
  }
  return buf[which];
}

/* One output (already computed into z on the device) checked; returns 0 when good. */
static int check_output(const shape *s, const void *z, const void *zref, const char *who,
                        int full) {
  const size_t es = s->out_bf16 ? 2 : 4, bytes = (size_t)(s->m + 1) * (size_t)s->ld * es;
  unsigned char *h = staging(0, bytes), *r = zref ? staging(1, bytes) : NULL;
  CK(cudaMemcpy(h, z, bytes, cudaMemcpyDeviceToHost));
  if (r) CK(cudaMemcpy(r, zref, bytes, cudaMemcpyDeviceToHost));
  size_t unwritten = 0, clobbered = 0, bad = 0, vs_lt = 0;
  double worst = 0, worst_lt = 0;
  for (int64_t i = 0; i <= s->m; i++) {
    const size_t row = (size_t)(i * s->ld), n = i < s->m ? (size_t)s->n : 0;
    unwritten += count_not_finite(h, s->out_bf16, row, n, 0);
    clobbered += (size_t)s->ld - n - count_not_finite(h, s->out_bf16, row + n, s->ld - n, 1);
  }
  const int64_t rows[3] = {0, s->m / 2, s->m - 1};
  for (int ri = 0; ri < 3; ri++)
    for (int64_t j = 0; j < s->n; j++) {
      const int64_t i = rows[ri];
      if (!full && (j % 97) && j != s->n - 1) continue; /* big shapes: every 97th column */
      double sc;
      const double ref = ref_at(s, i, j, &sc), got = z_at(h, s->out_bf16, (size_t)(i * s->ld + j));
      bad += !close_enough(s, got, ref, sc, 1, &worst);
      if (r) vs_lt += !close_enough(s, got, z_at(r, s->out_bf16, (size_t)(i * s->ld + j)), 2 * sc,
                                    2, &worst_lt);
    }
  uint64_t rs = 99;
  for (int t = 0; t < 512; t++) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t i = (int64_t)((rs >> 20) % (uint64_t)s->m);
    const int64_t j = (int64_t)((rs >> 40) % (uint64_t)s->n);
    double sc;
    const double ref = ref_at(s, i, j, &sc);
    bad += !close_enough(s, z_at(h, s->out_bf16, (size_t)(i * s->ld + j)), ref, sc, 1, &worst);
  }
  if (full)
    for (int64_t i = 0; i < s->m; i++)
      for (int64_t j = 0; j < s->n; j++) {
        double sc;
        const double ref = ref_at(s, i, j, &sc);
        bad += !close_enough(s, z_at(h, s->out_bf16, (size_t)(i * s->ld + j)), ref, sc, 1,
                             &worst);
      }
  const int ok = !unwritten && !clobbered && !bad && !vs_lt;
  printf("  check %-26s M=%lld N=%lld K=%lld out=%s: %s (unwritten %zu, clobbered %zu, bad %zu, "
         "worst err/tol %.3g; vs cuBLASLt bad %zu, worst %.3g)\n",
         who, (long long)s->m, (long long)s->n, (long long)s->k, s->out_bf16 ? "bf16" : "f32",
         ok ? "ok" : "FAILED", unwritten, clobbered, bad, worst, vs_lt, worst_lt);
  return !ok;
}

/* ---- timing --------------------------------------------------------------------------------- */

static int cmp_f(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

typedef int (*run_fn)(void *ctx);

static float median_ms(run_fn f, void *ctx, void *flush) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float t[64];
  int n = repeats < 64 ? repeats : 64;
  if (!f(ctx)) return -1;
  CK(cudaDeviceSynchronize());
  for (int r = 0; r < n; r++) {
    CK(cudaMemsetAsync(flush, r & 0xff, FLUSH, 0));
    CK(cudaEventRecord(e0, 0));
    if (!f(ctx)) return -1;
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t[r], e0, e1));
  }
  CK(cudaGetLastError());
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  qsort(t, (size_t)n, sizeof t[0], cmp_f);
  return n % 2 ? t[n / 2] : 0.5f * (t[n / 2 - 1] + t[n / 2]);
}

typedef struct run_ctx {
  const shape *s;
  lt_gemm *lt;
  int algo;
  const jit_fn *jit;
  void *x, *w, *z, *ws;
} run_ctx;

static int run_lt(void *p) {
  run_ctx *c = p;
  return lt_run(c->lt, c->algo, c->x, c->w, c->z, c->ws);
}
static int run_jit(void *p) {
  run_ctx *c = p;
  return jit_run(c->jit, c->s, c->x, c->w, c->z);
}

static double tflops(const shape *s, float ms) {
  return 2.0 * (double)s->m * (double)s->n * (double)s->k / (ms * 1e-3) / 1e12;
}

/* ---- main ----------------------------------------------------------------------------------- */

static int one_shape(const shape *s, jit_fn *jit, int nj, cublasLtHandle_t lth, void *flush,
                     int full_check, int timed) {
  const size_t es = s->out_bf16 ? 2 : 4, zbytes = (size_t)(s->m + 1) * (size_t)s->ld * es;
  void *x, *w, *z, *zl, *ws;
  CK(cudaMalloc(&x, (size_t)s->m * (size_t)s->k * 2));
  CK(cudaMalloc(&w, (size_t)s->n * (size_t)s->k * 2));
  CK(cudaMalloc(&z, zbytes));
  CK(cudaMalloc(&zl, zbytes));
  CK(cudaMalloc(&ws, LT_WS));
  fill(x, (size_t)(s->m * s->k), 0);
  fill(w, (size_t)(s->n * s->k), 77);
  lt_gemm lt = {.h = lth};
  lt_setup(&lt, s);
  int failed = 0;
  CK(cudaMemset(zl, 0xff, zbytes));
  if (!lt_run(&lt, 0, x, w, zl, ws)) failed = 1, fprintf(stderr, "cuBLASLt failed\n");
  CK(cudaDeviceSynchronize());
  if (!failed) failed |= check_output(s, zl, NULL, "cuBLASLt heuristic", full_check);
  for (int j = 0; j < nj; j++) {
    CK(cudaMemset(z, 0xff, zbytes));
    if (!jit_run(&jit[j], s, x, w, z)) {
      failed = 1;
      continue;
    }
    CK(cudaDeviceSynchronize());
    failed |= check_output(s, z, j == 0 ? zl : NULL, jit[j].name, full_check);
    if (j == 0) { /* bitwise reproducible: a second run gives the same bytes */
      unsigned char *a = staging(0, zbytes), *b = staging(1, zbytes);
      CK(cudaMemcpy(a, z, zbytes, cudaMemcpyDeviceToHost));
      jit_run(&jit[j], s, x, w, z);
      CK(cudaMemcpy(b, z, zbytes, cudaMemcpyDeviceToHost));
      const int same = memcmp(a, b, zbytes) == 0;
      printf("  %s: a second run is %s\n", jit[j].name, same ? "bitwise identical" : "DIFFERENT");
      failed |= !same;
    }
  }
  if (timed) {
    run_ctx c = {s, &lt, 0, NULL, x, w, zl, ws};
    const float heur = median_ms(run_lt, &c, flush);
    float best = heur;
    int best_i = 0;
    for (int i = 1; i < lt.count; i++) {
      c.algo = i;
      const float t = median_ms(run_lt, &c, flush);
      if (t > 0 && t < best) best = t, best_i = i;
    }
    printf("TIME %lldx%lldx%lld out=%s cublasLt-heuristic %.3f ms %.1f TFLOP/s | best-of-%d "
           "(#%d) %.3f ms %.1f TFLOP/s\n",
           (long long)s->m, (long long)s->n, (long long)s->k, s->out_bf16 ? "bf16" : "f32", heur,
           tflops(s, heur), lt.count, best_i, best, tflops(s, best));
    for (int j = 0; j < nj; j++) {
      c.jit = &jit[j], c.z = z;
      const float t = median_ms(run_jit, &c, flush);
      printf("TIME %lldx%lldx%lld out=%s jit %-24s %.3f ms %.1f TFLOP/s  = %.3fx best cuBLASLt\n",
             (long long)s->m, (long long)s->n, (long long)s->k, s->out_bf16 ? "bf16" : "f32",
             jit[j].name, t, tflops(s, t), best / t);
    }
  }
  lt_teardown(&lt);
  cudaFree(x), cudaFree(w), cudaFree(z), cudaFree(zl), cudaFree(ws);
  return failed;
}

int main(int argc, char **argv) {
  const char *shapes = "4096x128256x4096,8192x128256x4096,8192x32000x2048";
  const char *variants = "256.2.4.m,256.2.4.g,128.2.6.g,256.2.4.g.2,256.2.4.m.2,256.2.4.n";
  int small = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
    else if (!strcmp(argv[i], "--variants") && i + 1 < argc) variants = argv[++i];
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-small")) small = 0;
    else if (!strcmp(argv[i], "--no-time")) do_time = 0;
    else {
      fprintf(stderr, "usage: %s [--shapes MxNxK,...] "
              "[--variants BN.CONSUMERS.STAGES.RASTER[.CLUSTER],...] [--repeats R] [--no-small] "
              "[--no-time]\n", argv[0]);
      return 2;
    }
  }
  CK(cudaSetDevice(0));
  CK(cudaFree(0)); /* the primary context, current for the driver calls too */
  KO(drv_get(&drv));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int drv_version = 0;
  cudaDriverGetVersion(&drv_version);
  printf("GPU %s, %d SMs, driver API %d, cuBLASLt %zu\n", prop.name, sms, drv_version,
         cublasLtGetVersion());
  if (prop.major != 9) {
    printf("not an sm_90 GPU: the generated GEMMs need sm_90a\n");
    return 77;
  }
  make_tile();
  cublasLtHandle_t lth;
  LT(cublasLtCreate(&lth));
  void *flush;
  CK(cudaMalloc(&flush, FLUSH));
  jit_fn jf[MAX_V], jb[MAX_V];
  int nj = 0;
  char *vl = strdup(variants);
  for (char *t = strtok(vl, ","); t && nj < MAX_V; t = strtok(NULL, ",")) {
    int bn = 0, cons = 0, st = 0, cl = 1;
    char r = 'm';
    if (sscanf(t, "%d.%d.%d.%c.%d", &bn, &cons, &st, &r, &cl) < 4) return 2;
    jgemm_variant v = {"nt", KLJIT_BF16, KLJIT_FP32, 0, bn, cons, st, r, cl};
    jf[nj].v = v;
    jit_load(&jf[nj]);
    v.out = KLJIT_BF16;
    jb[nj].v = v;
    jit_load(&jb[nj]);
    nj++;
  }
  int failed = 0;
  if (small) { /* ragged shapes, full fp64 check, both outputs, the default variant */
    static const int64_t mn[][3] = {{1, 1, 8},      {7, 7, 8},       {127, 129, 72},
                                    {129, 127, 136}, {1, 32001, 64},  {129, 50257, 24},
                                    {7, 4097, 200}, {4097, 7, 4104}, {200, 256000, 16},
                                    {65, 151936, 8}};
    for (size_t i = 0; i < sizeof mn / sizeof mn[0]; i++)
      for (int ob = 0; ob < 2; ob++) {
        shape s = {mn[i][0], mn[i][1], mn[i][2], (mn[i][1] + 7) / 8 * 8, ob};
        failed |= one_shape(&s, ob ? jb : jf, 1, lth, flush, s.m * s.n * s.k < 400000000, 0);
      }
  }
  char *sl = strdup(shapes);
  for (char *t = strtok(sl, ","); t; t = strtok(NULL, ",")) {
    long long m, n, k;
    if (sscanf(t, "%lldx%lldx%lld", &m, &n, &k) != 3) return 2;
    shape s = {m, n, k, (n + 7) / 8 * 8, 0};
    failed |= one_shape(&s, jf, nj, lth, flush, 0, do_time);
    s.out_bf16 = 1;
    failed |= one_shape(&s, jb, 1, lth, flush, 0, do_time);
  }
  printf("%s\n", failed ? "SOME CHECKS FAILED" : "all checks passed");
  return failed;
}
