/* SPDX-License-Identifier: Apache-2.0 */
/* bench_gemm.c — the generated sm_90a GEMM against cuBLASLt, checked then timed, one run.
 *
 * The logits GEMM of the chunk loop, Z[M, N] (ld) = X[M, K] W[N, K]^T (bf16 in, fp32 or bf16
 * out). For each shape:
 *   check   the output poisoned (NaN) first; every element written, the padding columns and a
 *           guard row left alone; rows 0, M/2, M-1 in full and 512 random elements against an
 *           fp64 dot product of the same rounded inputs; the same rows against cuBLASLt;
 *   time    cuBLASLt's heuristic choice (what kljit runs untuned), each of its top 8
 *           algorithms (what the tuner picks from), and each generated variant, interleaved and
 *           sustained (bench/bench_time.h's round-robin): a few back-to-back warm-up calls of
 *           every candidate (the GPU never idle before the first timed kernel), then --repeats
 *           rounds timing each candidate once, the order reversed every other round, a 256 MiB
 *           memset flushing L2 before each call, CUDA events; the median of the rounds, with
 *           the SM clock and board power NVML sampled during each candidate's calls beside it.
 *           (Timing cuBLASLt first right after seconds of idle host-side checks and the
 *           generated kernels later under sustained load biased the ratios by over 10%: the
 *           logits GEMM read 0.83x here and 1.00x in the call. What users run is timed by
 *           bench_loss --gemms; this tool is for diagnosis.)
 * --layout nt|nn|tn picks the GEMM's layout, --beta 1 times the accumulating kernels (C += AB;
 * checked with C zero before the check runs), --variants the generated ones (gemm_algo.h's text:
 * BN.CONSUMERS.STAGES.RASTER.CLUSTER[.p|.s|.ps]). Lives with the tests: it uses internal headers.
 * Small ragged shapes (--check-small) are checked in full against fp64 with both outputs.
 * Tolerance (tol_generated, tol_cublas below; the issue asks for it to be stated): the sum of
 * the accumulation's error bound and one rounding of the output. Bounds, not estimates: the
 * probabilistic sqrt(K) u growth describes random data on average and promises nothing for one
 * element, while a check must never fail a correct kernel.
 *   accumulation: the products of two bf16 are exact in fp32; the tensor cores add them with
 *     fp32 accumulators, a k16 wgmma step as one fused sum of its 16 products and the
 *     accumulator, aligned to the largest addend and truncated (the model Fasi, Higham, Mikaitis
 *     and Pranesh measured on NVIDIA tensor cores): each step errs by at most 17 x 2u x its
 *     largest addend (u = 2^-24; 2u: truncation, not rounding to nearest), which is at most
 *     |S_j| + sum|p| of the step, S_j the exact partial sum before it. The generated kernel
 *     sums K in order (no split-K), so its bound is 2^-23 17 (sum_j |S_j| + sum_k |p_k|),
 *     computed along with the fp64 reference: tight (partial sums of random-sign products grow
 *     like sqrt(k)), so that a lost k-block, a wrong row or a wrong tile stays visible.
 *     cuBLASLt's order is unknown (split-K included): the order-free bound, each product in at
 *     most K/16 (1 + 1/16) fused steps plus the split-K combine, 2^-23 (K 17/16 + S + 16)
 *     sum|p|; where its algorithm reduces the S partials in the output type (reduction scheme
 *     inplace or output-type), S more roundings of at most u_out sum|p| each.
 *   output: one correctly rounded store, within half an ulp, u_out |result| at most (bf16:
 *     u_out = 2^-8, 8 significand bits; fp32: none beyond the accumulator).
 * The old 2^-14 sum|p| term sat below cuBLASLt's own error at K = 4104 (its heuristic splits K
 * there: 331 of 28679 elements over, worst 2.1x, run 24).
 * --gop FW[.bf16|.f16] gives the variants named with a "+g" suffix (--variants 256.2.3.g+g) G
 * rebuilt in the stage (GOP, issue 27's step 2: A read as fp16 E', the teacher's P beside it
 * with .bf16 / .f16, f per row and column tile of FW), timed in the same round-robin as
 * cuBLASLt and the plain generated variants multiplying a ready G: what the dX and dW GEMMs cost
 * when no row pass writes G; "+gr" (256.2.3.g+gr) forms G in registers instead (GRS). Those
 * are timed only (their product is not A B: gpu.gemm.g_operand_* checks them); the plain ones
 * are checked as always.
 * Uses internal headers (the family's renderer, NVRTC, the driver table): a developer tool.
 */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_time.h"
#include "gemm_algo.h"
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
static int beta = 0;    /* --beta 1: C += AB, cuBLASLt's and the generated kernels' */
/* --gop: the "+g" variants rebuild G in the stage (fw, pdt), from these operands (factors
 * and scales 1 and 0.5, the A and P tiles the usual fill: G = E' - P / 2 is dense, as cuBLASLt's
 * operands are: the tensor cores' power, and so the clock, depend on the data) */
static int gop_fw;
static kljit_dtype gop_pdt;
static jgemm_gop gop_args;
static uint32_t *sched; /* the dynamic variants' tile counter pair (zeroed once, left zero) */
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

/* C[M, N] (ld) of one layout (--layout; templates/gemm_sm90.cu.lua): nt = X W^T (logits,
 * A[M, K], B[N, K]), nn = G W (dX, A[M, K], B[K, N]), tn = G^T X (dW, A[K, M], B[K, N]); lda,
 * ldb: the operands' row strides (K, or M, N rounded up to 8 where they are the rows). */
typedef struct shape {
  int64_t m, n, k, ld;
  int out_bf16;
  char layout; /* 'n' (nt), 'd' (nn: dX), 'w' (tn: dW) */
  int64_t lda, ldb;
} shape;

static const char *layout_name(const shape *s) {
  return s->layout == 'd' ? "nn" : s->layout == 'w' ? "tn" : "nt";
}

/* The operands' strides and sizes of a shape (lda, ldb set from m, n, k and the layout). */
static void shape_strides(shape *s) {
  s->lda = s->layout == 'w' ? (s->m + 7) / 8 * 8 : s->k;
  s->ldb = s->layout == 'n' ? s->k : (s->n + 7) / 8 * 8;
}
/* "" for nt (the logits lines as before), else " nn" or " tn" */
static const char *layout_tag(const shape *s) {
  return s->layout == 'd' ? " nn" : s->layout == 'w' ? " tn" : "";
}
static size_t a_elems(const shape *s) {
  return (size_t)(s->layout == 'w' ? s->k : s->m) * (size_t)s->lda;
}
static size_t b_elems(const shape *s) {
  return (size_t)(s->layout == 'n' ? s->n : s->k) * (size_t)s->ldb;
}

typedef struct lt_gemm {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo[8];
  int count;
  uint32_t splitk, reduction; /* algo[0]'s split-K count and reduction scheme (tol_cublas) */
} lt_gemm;

/* C^T (N x M, column-major, ld) = op(B') op(A'), B' and A' the row-major operands read as
 * column-major: nt: W^T (op T on the K x N W) X^T (K x M), kljit's GEMM_LOGITS; nn: B' (N x K)
 * A' (K x M); tn: B' (N x K) times A' (M x K) transposed. */
static void lt_setup(lt_gemm *g, const shape *s) {
  LT(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = s->layout == 'n' ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = s->layout == 'w' ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const uint64_t m = (uint64_t)s->m, n = (uint64_t)s->n, k = (uint64_t)s->k;
  if (s->layout == 'n')
    LT(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_16BF, k, n, s->ldb));
  else
    LT(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_16BF, n, k, s->ldb));
  if (s->layout == 'w')
    LT(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_16BF, m, k, s->lda));
  else
    LT(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_16BF, k, m, s->lda));
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
  size_t got_bytes;
  g->splitk = 1, g->reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  if (g->count) {
    LT(cublasLtMatmulAlgoConfigGetAttribute(&g->algo[0], CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                            &g->splitk, sizeof g->splitk, &got_bytes));
    LT(cublasLtMatmulAlgoConfigGetAttribute(&g->algo[0], CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                            &g->reduction, sizeof g->reduction, &got_bytes));
    if (g->splitk < 1) g->splitk = 1;
  }
}

static void lt_teardown(lt_gemm *g) {
  cublasLtMatrixLayoutDestroy(g->la), cublasLtMatrixLayoutDestroy(g->lb);
  cublasLtMatrixLayoutDestroy(g->lc), cublasLtMatmulDescDestroy(g->op);
}

static int lt_run(lt_gemm *g, int which, const void *x, const void *w, void *z, void *ws) {
  const float one = 1.0f, b = beta ? 1.0f : 0.0f;
  return cublasLtMatmul(g->h, g->op, &one, w, g->la, x, g->lb, &b, z, g->lc, z, g->lc,
                        &g->algo[which], ws, LT_WS, 0) == CUBLAS_STATUS_SUCCESS;
}

typedef struct jit_fn {
  jgemm_variant v;
  CUmodule mod;
  jgemm_kernel k; /* its function and manifest (launch geometry, arguments) */
  int cap;        /* jgemm_grid_cap: the persistent grid a plan launches it with */
  char name[96];
} jit_fn;

/* cuOccupancyMaxActiveClusters for a cluster-2 variant at its launch geometry (-1: unknown),
 * through the runtime's driver entry point (not in kljit's driver table). */
static int max_clusters(const jit_fn *j) {
  typedef CUresult (*occ_fn)(int *, CUfunction, const CUlaunchConfig *);
  void *p = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuOccupancyMaxActiveClusters", &p, 12000,
                                       cudaEnableDefault, &q) != cudaSuccess || !p)
    return -1;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = (unsigned)sms, cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = j->k.sig.threads, cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = j->k.sig.smem;
  int n = -1;
  return ((occ_fn)p)(&n, j->k.fn, &cfg) == CUDA_SUCCESS ? n : -1;
}

static void jit_load(jit_fn *j) {
  strbuf src = {0}, man = {0}, cubin = {0}, log = {0};
  jgemm_describe(&j->v, j->name, sizeof j->name);
  const kspec spec = jgemm_spec(&j->v);
  KO(kspec_render_iface(&spec, &src, &man));
  KO(nvrtc_compile(src.data, "gemm_sm90", 90 | NVRTC_ARCH_SPECIFIC, &cubin, &log));
  KO(drv_check(drv, drv->cuModuleLoadData(&j->mod, cubin.data), "cuModuleLoadData"));
  KO(jgemm_load(drv, j->mod, man.data, j->name, &j->k));
  j->cap = jgemm_grid_cap(drv, &j->k, sms);
  sb_free(&src), sb_free(&man), sb_free(&cubin), sb_free(&log);
  if (j->v.cluster == 2) /* the persistent grid assumes all sms / 2 clusters resident at once */
    printf("  %s: %d clusters of 2 resident at most (the grid has %d)\n", j->name,
           max_clusters(j), sms / 2);
}

static int jit_run(const jit_fn *j, const shape *s, const void *x, const void *w, void *z) {
  const jgemm_args a = {x, w, z, s->m, s->n, s->k, s->lda, s->ldb, s->ld, 1.0f, {0}, gop_args,
                        sched};
  const kljit_status st = jgemm_launch(drv, &j->k, &j->v, j->cap, &a, NULL);
  if (st != KLJIT_SUCCESS) fprintf(stderr, "%s: %s\n", j->name, kljit_last_error());
  return st == KLJIT_SUCCESS;
}

/* ---- checking ------------------------------------------------------------------------------- */

static double z_at(const void *host, int bf16, size_t i) {
  if (bf16) return host_bf16_to_f32(((const uint16_t *)host)[i]);
  return ((const float *)host)[i];
}

/* The fp64 reference of z[i][j] and what the error bounds need (the file's head). */
typedef struct ref_val {
  double v;     /* sum_k x_ik w_jk */
  double mag;   /* sum_k |x_ik w_jk| */
  double chain; /* sum over the k16 steps of |partial sum before the step| */
} ref_val;

static ref_val ref_at(const shape *s, int64_t i, int64_t j) {
  ref_val r = {0, 0, 0};
  /* the inputs' tile indices walked without a division per product (full checks do ~10^9):
   * A(i, k) and B(j, k) step by 1 along k where K is their row, else by their row stride */
  const int a_t = s->layout == 'w', b_t = s->layout != 'n';
  const size_t da = a_t ? (size_t)s->lda % TILE : 1, db = b_t ? (size_t)s->ldb % TILE : 1;
  size_t a = (size_t)(a_t ? i : i * s->lda) % TILE;
  size_t b = ((size_t)(b_t ? j : j * s->ldb) + 77) % TILE;
  for (int64_t k = 0; k < s->k; k++) {
    if (k % 16 == 0) r.chain += fabs(r.v);
    const double p = (double)tile_host[a] * tile_host[b];
    r.v += p, r.mag += fabs(p);
    if ((a += da) >= TILE) a -= TILE;
    if ((b += db) >= TILE) b -= TILE;
  }
  return r;
}

static double u_out(const shape *s) { return s->out_bf16 ? 0x1p-8 : 0; }

/* The generated kernel: k in order, one rounding of the output. */
static double tol_generated(const shape *s, const ref_val *r) {
  return 0x1p-23 * 17 * (r->chain + r->mag) + u_out(s) * fabs(r->v) + 1e-30;
}

/* cuBLASLt's algorithm 0 (lt): any order, its split-K and where it reduces the partials. */
static double tol_cublas(const shape *s, const lt_gemm *lt, const ref_val *r) {
  const double S = lt->splitk;
  double t = 0x1p-23 * ((double)s->k * 17 / 16 + S + 16) * r->mag + u_out(s) * fabs(r->v);
  if (lt->splitk > 1 && (lt->reduction == CUBLASLT_REDUCTION_SCHEME_INPLACE ||
                         lt->reduction == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE))
    t += S * u_out(s) * r->mag;
  return t + 1e-30;
}

/* |got - want| within tol; the worst ratio kept. */
static int close_enough(double got, double want, double tol, double *worst) {
  const double e = fabs(got - want) / tol;
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

/* The element checks of one output (check_output): the counts and the worst ratios. */
typedef struct checker {
  const shape *s;
  const lt_gemm *lt;
  int of_lt;
  const void *h, *r; /* the host copies of the output and of cuBLASLt's (or NULL) */
  size_t bad, vs_lt;
  double worst, worst_lt;
} checker;

static void check_at(checker *c, int64_t i, int64_t j) {
  const shape *s = c->s;
  const ref_val rv = ref_at(s, i, j);
  const size_t at = (size_t)(i * s->ld + j);
  const double tol = c->of_lt ? tol_cublas(s, c->lt, &rv) : tol_generated(s, &rv);
  const double got = z_at(c->h, s->out_bf16, at);
  c->bad += !close_enough(got, rv.v, tol, &c->worst);
  if (c->r)
    c->vs_lt += !close_enough(got, z_at(c->r, s->out_bf16, at), tol + tol_cublas(s, c->lt, &rv),
                              &c->worst_lt);
}

/* One output (already computed into z on the device) checked; returns 0 when good. lt: the
 * cuBLASLt GEMM of the shape; of_lt: z is its output (tol_cublas), else the generated kernel's
 * (tol_generated), compared with zref (cuBLASLt's, when given) within the sum of both bounds. */
static int check_output(const shape *s, const void *z, const void *zref, const lt_gemm *lt,
                        int of_lt, const char *who, int full) {
  const size_t es = s->out_bf16 ? 2 : 4, bytes = (size_t)(s->m + 1) * (size_t)s->ld * es;
  unsigned char *h = staging(0, bytes), *r = zref ? staging(1, bytes) : NULL;
  CK(cudaMemcpy(h, z, bytes, cudaMemcpyDeviceToHost));
  if (r) CK(cudaMemcpy(r, zref, bytes, cudaMemcpyDeviceToHost));
  size_t unwritten = 0, clobbered = 0;
  checker c = {s, lt, of_lt, h, r, 0, 0, 0, 0};
  for (int64_t i = 0; i <= s->m; i++) {
    const size_t row = (size_t)(i * s->ld), n = i < s->m ? (size_t)s->n : 0;
    unwritten += count_not_finite(h, s->out_bf16, row, n, 0);
    clobbered += (size_t)s->ld - n - count_not_finite(h, s->out_bf16, row + n, s->ld - n, 1);
  }
  const int64_t rows[3] = {0, s->m / 2, s->m - 1};
  for (int ri = 0; ri < 3 && !full; ri++)
    for (int64_t j = 0; j < s->n; j++)
      if (!(j % 97) || j == s->n - 1) check_at(&c, rows[ri], j); /* every 97th column */
  uint64_t rs = 99;
  for (int t = 0; t < 512 && !full; t++) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    check_at(&c, (int64_t)((rs >> 20) % (uint64_t)s->m), (int64_t)((rs >> 40) % (uint64_t)s->n));
  }
  for (int64_t i = 0; i < s->m && full; i++)
    for (int64_t j = 0; j < s->n; j++) check_at(&c, i, j);
  const int ok = !unwritten && !clobbered && !c.bad && !c.vs_lt;
  char algo[48] = "";
  if (of_lt)
    snprintf(algo, sizeof algo, " (split-K %u, reduction %u)", lt->splitk, lt->reduction);
  printf("  check %-26s %s M=%lld N=%lld K=%lld out=%s%s: %s (unwritten %zu, clobbered %zu, "
         "bad %zu, worst err/tol %.3g; vs cuBLASLt bad %zu, worst %.3g)\n",
         who, layout_name(s), (long long)s->m, (long long)s->n, (long long)s->k,
         s->out_bf16 ? "bf16" : "f32", algo, ok ? "ok" : "FAILED", unwritten, clobbered, c.bad,
         c.worst, c.vs_lt, c.worst_lt);
  return !ok;
}

/* ---- timing --------------------------------------------------------------------------------- */

typedef struct run_ctx {
  const shape *s;
  lt_gemm *lt;
  int algo;
  const jit_fn *jit;
  void *x, *w, *z, *ws;
} run_ctx;

/* bench_time.h's steps: 0 on success */
static int run_lt(void *p) {
  run_ctx *c = p;
  return !lt_run(c->lt, c->algo, c->x, c->w, c->z, c->ws);
}
static int run_jit(void *p) {
  run_ctx *c = p;
  return !jit_run(c->jit, c->s, c->x, c->w, c->z);
}

static double tflops(const shape *s, float ms) {
  return 2.0 * (double)s->m * (double)s->n * (double)s->k / (ms * 1e-3) / 1e12;
}

/* cuBLASLt's algorithms and the generated variants of one shape, interleaved and sustained. */
static int time_shape(const shape *s, lt_gemm *lt, const jit_fn *jit, int nj, void *x, void *w,
                      void *z, void *zl, void *ws, void *flush) {
  const int n = lt->count + nj;
  run_ctx *c = calloc((size_t)n, sizeof *c);
  bt_entry *e = calloc((size_t)n, sizeof *e);
  char (*names)[112] = calloc((size_t)n, sizeof *names);
  if (!c || !e || !names) return 1;
  for (int i = 0; i < n; i++) {
    const int is_lt = i < lt->count;
    run_ctx r = {s, lt, is_lt ? i : 0, is_lt ? NULL : &jit[i - lt->count], x, w,
                 is_lt ? zl : z, ws};
    c[i] = r;
    if (is_lt)
      snprintf(names[i], sizeof names[i], "cuBLASLt #%d%s", i, i ? "" : " (heuristic)");
    else
      snprintf(names[i], sizeof names[i], "jit %s", jit[i - lt->count].name);
    e[i].name = names[i], e[i].step = is_lt ? run_lt : run_jit, e[i].arg = &c[i];
  }
  const bt_loop loop = {3, repeats, flush, FLUSH, NULL, NULL, NULL};
  printf("timing: interleaved round-robin over %d candidates, %d rounds, the order reversed every "
         "other round, after 3 back-to-back warm-up calls of each (sustained: no idle GPU before "
         "the first timed kernel); L2 flushed before each call\n", n, repeats);
  const int rc = bt_round_robin(&loop, e, n);
  float best = 0;
  int best_i = -1;
  for (int i = 0; i < lt->count && !rc; i++)
    if (!e[i].failed && (best_i < 0 || e[i].r.median_ms < best))
      best = e[i].r.median_ms, best_i = i;
  for (int i = 0; i < n && !rc && best_i >= 0; i++) {
    char pw[160];
    bt_power_text(&e[i].r.power, pw, sizeof pw);
    if (e[i].failed) continue;
    printf("TIME %lldx%lldx%lld%s out=%s b%d %-34s %.3f ms (%.3f-%.3f) %.1f TFLOP/s = %.3fx best "
           "cuBLASLt (#%d) | %s\n",
           (long long)s->m, (long long)s->n, (long long)s->k, layout_tag(s),
           s->out_bf16 ? "bf16" : "f32", beta, e[i].name, e[i].r.median_ms, e[i].r.min_ms,
           e[i].r.max_ms, tflops(s, e[i].r.median_ms), best / e[i].r.median_ms, best_i, pw);
  }
  free(c), free(e), free(names);
  return rc;
}

/* ---- main ----------------------------------------------------------------------------------- */

/* The output before a checked run: NaN everywhere (0xff bytes: the checks find what was not
 * written and what was written outside [M, N]), and with --beta 1 zeros inside [M, N] (C += AB
 * reads them, so the check's C is AB). */
static void reset_out(const shape *s, void *z, size_t zbytes) {
  const size_t es = s->out_bf16 ? 2 : 4;
  CK(cudaMemset(z, 0xff, zbytes));
  if (beta) CK(cudaMemset2D(z, (size_t)s->ld * es, 0, (size_t)s->n * es, (size_t)s->m));
}

static int one_shape(const shape *s, jit_fn *jit, int nj, cublasLtHandle_t lth, void *flush,
                     int full_check, int timed) {
  const size_t es = s->out_bf16 ? 2 : 4, zbytes = (size_t)(s->m + 1) * (size_t)s->ld * es;
  void *x, *w, *z, *zl, *ws;
  CK(cudaMalloc(&x, a_elems(s) * 2));
  CK(cudaMalloc(&w, b_elems(s) * 2));
  CK(cudaMalloc(&z, zbytes));
  CK(cudaMalloc(&zl, zbytes));
  CK(cudaMalloc(&ws, LT_WS));
  if (!sched) {
    CK(cudaMalloc((void **)&sched, 8));
    CK(cudaMemset(sched, 0, 8));
  }
  fill(x, a_elems(s), 0);
  fill(w, b_elems(s), 77);
  lt_gemm lt = {.h = lth};
  lt_setup(&lt, s);
  void *gf = NULL, *gp = NULL, *gg = NULL;
  if (gop_fw) { /* G's rows: nn A's, tn A's K rows; its columns V: nn K, tn M */
    const int64_t rows = s->layout == 'w' ? s->k : s->m, v = s->layout == 'w' ? s->m : s->k;
    const int64_t fld = (v + gop_fw - 1) / gop_fw;
    CK(cudaMalloc(&gf, (size_t)(rows * fld) * 4));
    CK(cudaMalloc(&gp, a_elems(s) * 2));
    fill(gp, a_elems(s), 5);
    CK(cudaMalloc(&gg, (size_t)rows * 4));
    float *one = malloc((size_t)(rows * fld) * 4); /* fld >= 1: room for the scales too */
    if (!one) return 1;
    for (size_t i = 0; i < (size_t)(rows * fld); i++) one[i] = 1.0f;
    CK(cudaMemcpy(gf, one, (size_t)(rows * fld) * 4, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < (size_t)rows; i++) one[i] = 0.5f;
    CK(cudaMemcpy(gg, one, (size_t)rows * 4, cudaMemcpyHostToDevice));
    free(one);
    jgemm_gop g = {gf, fld, gop_pdt ? gp : NULL, s->lda, gop_pdt ? gg : NULL};
    gop_args = g;
    full_check = 0;
  }
  int failed = 0;
  reset_out(s, zl, zbytes);
  if (!lt_run(&lt, 0, x, w, zl, ws)) failed = 1, fprintf(stderr, "cuBLASLt failed\n");
  CK(cudaDeviceSynchronize());
  if (!failed) failed |= check_output(s, zl, NULL, &lt, 1, "cuBLASLt heuristic", full_check);
  for (int j = 0; j < nj; j++) {
    reset_out(s, z, zbytes);
    if (!jit_run(&jit[j], s, x, w, z)) {
      failed = 1;
      continue;
    }
    CK(cudaDeviceSynchronize());
    if (jit[j].v.gop.on) continue; /* not A B: gpu.gemm.g_operand_* checks it */
    failed |= check_output(s, z, j == 0 ? zl : NULL, &lt, 0, jit[j].name, full_check);
    if (j == 0) { /* bitwise reproducible: a second run gives the same bytes */
      unsigned char *a = staging(0, zbytes), *b = staging(1, zbytes);
      CK(cudaMemcpy(a, z, zbytes, cudaMemcpyDeviceToHost));
      reset_out(s, z, zbytes);
      jit_run(&jit[j], s, x, w, z);
      CK(cudaMemcpy(b, z, zbytes, cudaMemcpyDeviceToHost));
      const int same = memcmp(a, b, zbytes) == 0;
      printf("  %s: a second run is %s\n", jit[j].name, same ? "bitwise identical" : "DIFFERENT");
      failed |= !same;
    }
  }
  if (timed && time_shape(s, &lt, jit, nj, x, w, z, zl, ws, flush)) failed = 1;
  lt_teardown(&lt);
  cudaFree(x), cudaFree(w), cudaFree(z), cudaFree(zl), cudaFree(ws);
  if (gop_fw) cudaFree(gf), cudaFree(gp), cudaFree(gg);
  return failed;
}

int main(int argc, char **argv) {
  const char *shapes = "4096x128256x4096,8192x128256x4096,8192x32000x2048";
  const char *variants = "256.2.4.m,256.2.4.g,128.2.6.g,256.2.4.g.2,128.2.6.g.1.p,128.2.7.m.1.p,"
                         "256.1.5.g.1.p,128.2.6.g.2.p";
  int small = 1, bf16_all = 0;
  char layout = 'n';
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
    else if (!strcmp(argv[i], "--variants") && i + 1 < argc) variants = argv[++i];
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-small")) small = 0;
    else if (!strcmp(argv[i], "--no-time")) do_time = 0;
    else if (!strcmp(argv[i], "--layout") && i + 1 < argc) { /* nt (logits) | nn (dX) | tn (dW) */
      const char *l = argv[++i];
      layout = !strcmp(l, "nn") ? 'd' : !strcmp(l, "tn") ? 'w' : !strcmp(l, "nt") ? 'n' : 0;
      if (!layout) return 2;
    }
    else if (!strcmp(argv[i], "--bf16-all")) bf16_all = 1; /* time every variant at bf16 too */
    else if (!strcmp(argv[i], "--beta") && i + 1 < argc) beta = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--gop") && i + 1 < argc) { /* FW[.bf16|.f16] */
      char pdt[8] = "";
      if (sscanf(argv[++i], "%d.%7s", &gop_fw, pdt) < 1 || gop_fw < 64 || gop_fw % 64) return 2;
      gop_pdt = !strcmp(pdt, "bf16") ? KLJIT_BF16 : !strcmp(pdt, "f16") ? KLJIT_FP16 : 0;
      if (pdt[0] && !gop_pdt) return 2;
    }
    else {
      fprintf(stderr, "usage: %s [--shapes MxNxK,...] "
              "[--variants BN.CONSUMERS.STAGES.RASTER[.CLUSTER[.p|.s|.ps]][+g|+gr],...] "
              "[--repeats R (1-%d)] [--no-small] [--no-time] [--bf16-all] [--layout nt|nn|tn] "
              "[--beta 0|1] [--gop FW[.bf16|.f16]]\n",
              argv[0], BT_MAX_REPEATS);
      return 2;
    }
  }
  if (repeats < 1 || repeats > BT_MAX_REPEATS || (beta != 0 && beta != 1)) return 2;
  if (gop_fw && (layout == 'n' || small)) {
    fprintf(stderr, "--gop needs --layout nn or tn and --no-small (G rebuilt is not A B)\n");
    return 2;
  }
  if (!gop_fw != !strstr(variants, "+g")) {
    fprintf(stderr, "--gop and variants named with \"+g\" go together\n");
    return 2;
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
  bt_power_start(0); /* the SM clock and power beside each time (NVML, reads only) */
  cublasLtHandle_t lth;
  LT(cublasLtCreate(&lth));
  void *flush;
  CK(cudaMalloc(&flush, FLUSH));
  jit_fn jf[MAX_V], jb[MAX_V];
  int nj = 0;
  char *vl = strdup(variants);
  for (char *t = strtok(vl, ","); t && nj < MAX_V; t = strtok(NULL, ",")) {
    prob_gemm_choice c;
    char *plus = strstr(t, "+g"); /* G rebuilt in the stage (--gop); "+gr": in registers */
    const int g_on = plus != NULL, g_regs = g_on && plus[2] == 'r';
    if (plus) *plus = 0;
    char four[48]; /* BN.CONSUMERS.STAGES.RASTER alone: cluster 1 */
    snprintf(four, sizeof four, "%s.1", t);
    if (gemm_algo_jit_parse(t, &c) && gemm_algo_jit_parse(four, &c)) return 2;
    jgemm_variant v = {layout == 'd' ? "nn" : layout == 'w' ? "tn" : "nt", KLJIT_BF16, KLJIT_FP32,
                       beta, c.bn, c.consumers, c.stages, c.raster, c.cluster, c.schedule,
                       c.epilogue, 0, c.tweaks, {0}, {0}};
    v.gop.on = g_on, v.gop.fw = g_on ? gop_fw : 0, v.gop.pdt = g_on ? gop_pdt : 0;
    v.gop.regs = g_regs;
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
        shape s = {mn[i][0], mn[i][1], mn[i][2], (mn[i][1] + 7) / 8 * 8, ob, layout, 0, 0};
        shape_strides(&s);
        failed |= one_shape(&s, ob ? jb : jf, 1, lth, flush, s.m * s.n * s.k < 400000000, 0);
      }
  }
  char *sl = strdup(shapes);
  for (char *t = strtok(sl, ","); t; t = strtok(NULL, ",")) {
    long long m, n, k;
    if (sscanf(t, "%lldx%lldx%lld", &m, &n, &k) != 3) return 2;
    shape s = {m, n, k, (n + 7) / 8 * 8, 0, layout, 0, 0};
    shape_strides(&s);
    failed |= one_shape(&s, jf, nj, lth, flush, 0, do_time);
    s.out_bf16 = 1;
    failed |= one_shape(&s, jb, bf16_all ? nj : 1, lth, flush, 0, do_time);
  }
  printf("%s\n", failed ? "SOME CHECKS FAILED" : "all checks passed");
  return failed;
}
