/* SPDX-License-Identifier: Apache-2.0 */
/* bench_loss.c — times the fused linear + KL loss against its GEMM floor, same run.
 *
 * For each shape N x H x V (bf16 inputs, batchmean; teacher: dense bf16 probs, or with
 * --topk K the sparse top-K teacher, int64 ids and bf16 probabilities summing to about 0.9):
 *   validate  a small problem with the same V against the fp64 reference (loss, dX, dW);
 *   copy      device-to-device copy bandwidth (bytes read + written), the memory ceiling;
 *   floor     the same cuBLAS GEMMs alone: "chunked" = kljit's own chunk loop of GEMMs
 *             (fp32 logits), "full" = the 3 unchunked GEMMs with bf16 logits (the ideal);
 *   kljit     fused (and two-phase) fwd+bwd, median of repeats after warm-up, CUDA events;
 *   rows      the row kernels alone (KLJIT_DEBUG_SKIP_GEMMS=1) and their effective bandwidth;
 *   memory    workspace reported by the plan and any device memory the calls took beyond it.
 * Prints one CSV row per shape (stdout) and a table (stderr). Inputs are random, never zero.
 * --no-fused times the two-phase mode alone and --no-full skips the unchunked floor (whose
 * N x V logits do not fit at long context): the long-context run of the sparse issue.
 * --native-logits times the opt-in bf16 logits (KLJIT_FLAG_NATIVE_LOGITS): the chunked floor
 * then writes bf16 logits too, and validation takes that option's tolerances.
 *
 * --teacher hidden times the online teacher (KLJIT_TEACHER_DENSE_HIDDEN, Xt [N,H], Wt [V,H]
 * bf16; issue 19's bar: it adds at most the cost of its one GEMM per chunk) against the same
 * call with the teacher given as dense logits, instead of the runs above:
 *   online        kljit_fused with the online teacher (its plan's chunk);
 *   dense_f32     the same problem with the teacher's fp32 logits (Xt Wt^T, made once by
 *                 cuBLAS) as DENSE_LOGITS, on a context whose chunk is the online plan's: the
 *                 row kernels then read the same bytes, so online - dense_f32 is what the
 *                 online teacher adds, and the two losses must agree (printed);
 *   dense_own     that dense call with its own plan's chunk (what a user gets: no teacher
 *                 logits in the workspace, so larger chunks);
 *   dense_bf16    the teacher logits stored in bf16 (a materialized teacher as usually kept);
 *   teacher_gemm  the teacher GEMM alone (cublasGemmEx, bf16 in, fp32 out), chunk after chunk
 *                 at the online plan's chunk: the bar is added = online - dense_f32 <= it;
 *                 online, dense_f32 and teacher_gemm run round-robin, 5 rounds (the H200 runs
 *                 these power-capped at ~1.45 GHz, and timings minutes apart drift by a few
 *                 percent): added_over_gemm is the median of the rounds' ratios, printed with
 *                 their range and the ratio pooled over the rounds;
 *   rows          the online plan's row kernels alone (KLJIT_DEBUG_SKIP_GEMMS) and their
 *                 bandwidth: what the divergence's passes over z and zt cost.
 * --divergence fkl|rkl|jsd and --beta B (JSD, default 0.5) choose the loss; --logit-std S
 * (default 3) scales the inputs so both logits have std S (X, Xt uniform in [-1, 1), W, Wt in
 * [-a, a), a = 3 S / sqrt(H)); they apply to --teacher hidden and --topk. dW is fp32, as above.
 *
 * --topk K --tail bucket|renorm --divergences times the top-K teacher's reverse KL and
 * JSD(--beta) against its forward KL (issue 29's bar: at most 1.15x), each validated against
 * the fp64 reference first, on the same buffers, kljit_fused round-robin over 5 rounds (the
 * H200's clock drifts under sustained load): one CSV row per shape with the three median times
 * and the medians of the rounds' ratios rkl/fkl and jsd/fkl.
 *
 * --gemms times the fused call with each GEMM's backend switched per call (cuBLASLt's
 * heuristic, its k-th algorithm, or a generated variant), round-robin in this process, the SM
 * clock and power beside each number: loss_gemms.c says how.
 *
 * Every timing is bench_time.h's loop (warm-up, an L2 flush before each repeat, CUDA events, the
 * median), with the SM clock and board power NVML sampled during it (in the CSV and on
 * stderr); every input is gpu_fill's (tools/gpu_fill.h).
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_loss.h"
#include "gpu_util.h"
#include "kljit_experimental.h" /* the benchmark hook: KLJIT_CONTEXT_DEBUG_SKIP_GEMMS */
#include "ref.h"

#define BK(x)                                                                        \
  do {                                                                               \
    cublasStatus_t b_ = (x);                                                         \
    if (b_ != CUBLAS_STATUS_SUCCESS) {                                               \
      fprintf(stderr, "%s:%d: %s: cublas status %d\n", __FILE__, __LINE__, #x, (int)b_); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static bench_opts opts = {10, 2, 3.0, 4, {NULL, NULL, NULL}, 1};
static int topk = 0;                     /* 0: dense teacher */
static int do_fused = 1, do_full = 1;
static int native = 0;                   /* 1: KLJIT_FLAG_NATIVE_LOGITS */
static int online = 0;                   /* 1: --teacher hidden */
static kljit_divergence divergence = KLJIT_DIVERGENCE_FORWARD_KL;
static double jsd_beta = 0.5;
static kljit_tail tail = KLJIT_TAIL_NONE; /* --tail: the top-K teacher's */
static int compare_divergences = 0;       /* --divergences */

static void fill_bf16(void *dst, size_t count, double lo, double hi, uint64_t seed) {
  if (gpu_fill(dst, KLJIT_BF16, count, lo, hi, seed)) exit(1);
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

typedef void (*bench_fn)(void *ctx);

/* bench_time.h's loop for the void steps of this file: one timed step (a bench_fn) */
typedef struct step_of {
  bench_fn fn;
  void *ctx;
} step_of;
static int run_step(void *p) {
  const step_of *s = p;
  s->fn(s->ctx);
  return 0;
}

/* The median of opts.repeats runs after opts.warmup, an L2 flush before each (bench_time.h);
 * *power (when not NULL) gets the clock and power sampled during the timed runs. */
static float time_ms_power(bench_fn fn, void *ctx, void *flush, size_t flush_bytes,
                           bt_power *power) {
  const bt_loop l = {opts.warmup, opts.repeats, flush, flush_bytes, NULL, NULL, NULL};
  step_of s = {fn, ctx};
  bt_result r;
  if (bt_time(&l, run_step, &s, &r)) exit(1);
  if (power) *power = r.power;
  return r.median_ms;
}
static float time_ms(bench_fn fn, void *ctx, void *flush, size_t flush_bytes) {
  return time_ms_power(fn, ctx, flush, flush_bytes, NULL);
}

void bench_gpu(char *name, size_t cap, int *driver) {
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  snprintf(name, cap, "%s", prop.name);
  *driver = 0;
  cudaDriverGetVersion(driver);
}

typedef struct shape_ctx {
  int64_t n, h, v, chunk;
  kljit_plan *plan;
  kljit_args args;
  kljit_args args2; /* backward */
  cublasHandle_t blas;
  void *x, *w, *t, *ids, *dx, *dw, *logits, *g;
  int full;  /* floor variant: 1 = unchunked bf16 logits, 0 = chunked fp32 logits */
  void *src, *dst;
  size_t copy_bytes;
} shape_ctx;

static void run_fused(void *p) {
  shape_ctx *s = p;
  KO(kljit_fused(s->plan, NULL, &s->args));
}

static void run_twophase(void *p) {
  shape_ctx *s = p;
  KO(kljit_forward(s->plan, NULL, &s->args));
  KO(kljit_backward(s->plan, NULL, &s->args2));
}

static void run_copy(void *p) {
  shape_ctx *s = p;
  CK(cudaMemcpyAsync(s->dst, s->src, s->copy_bytes, cudaMemcpyDeviceToDevice, 0));
}

/* The GEMMs alone: logits, dX, dW per chunk (gemms = 3), plus a second logits GEMM (4). */
static void floor_gemms(shape_ctx *s, int gemms) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t r = s->full ? s->n : s->chunk;
  const int ld = (int)((s->v + 7) / 8 * 8);
  const cudaDataType zt = s->full || native ? CUDA_R_16BF : CUDA_R_32F;
  for (int64_t row0 = 0; row0 < s->n; row0 += r) {
    const int n = (int)(s->n - row0 < r ? s->n - row0 : r);
    const char *x = (const char *)s->x + row0 * s->h * 2;
    for (int k = 0; k < (gemms == 4 ? 2 : 1); k++)
      BK(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)s->v, n, (int)s->h, &one, s->w,
                      CUDA_R_16BF, (int)s->h, x, CUDA_R_16BF, (int)s->h, &zero, s->logits, zt,
                      ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    BK(cublasGemmEx(s->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)s->h, n, (int)s->v, &one, s->w,
                    CUDA_R_16BF, (int)s->h, s->g, CUDA_R_16BF, ld, &zero,
                    (char *)s->dx + row0 * s->h * 2, CUDA_R_16BF, (int)s->h, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
    const float *beta = row0 == 0 ? &zero : &one;
    BK(cublasGemmEx(s->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)s->h, (int)s->v, n, &one, x,
                    CUDA_R_16BF, (int)s->h, s->g, CUDA_R_16BF, ld, beta, s->dw, CUDA_R_32F,
                    (int)s->h, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}
static void run_floor3(void *p) { floor_gemms(p, 3); }
static void run_floor4(void *p) { floor_gemms(p, 4); }

/* The teacher form (and the logits dtype) of the bench's problems. */
static void set_teacher(kljit_problem *pb) {
  if (native) pb->flags |= KLJIT_FLAG_NATIVE_LOGITS;
  if (!topk) return;
  pb->teacher = KLJIT_TEACHER_SPARSE_TOPK, pb->topk = topk, pb->topk_id_dtype = KLJIT_INT64;
  pb->tail = tail, pb->divergence = divergence;
  pb->beta = divergence == KLJIT_DIVERGENCE_JSD ? jsd_beta : 0.0;
}

/* Support id j of row i: K distinct ids spread over the vocabulary from a per-row start. */
static int64_t sparse_id(int64_t i, int64_t j, int64_t v) {
  const int64_t step = v / (topk ? topk : 1);
  return ((i * 2654435761LL) % v + j * step) % v;
}

/* The device ids [n, topk] (int64) of the timed calls. */
static void *upload_sparse_ids(int64_t n, int64_t v) {
  int64_t *hid = malloc(sizeof(int64_t) * n * topk);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < topk; j++) hid[i * topk + j] = sparse_id(i, j, v);
  void *ids;
  CK(cudaMalloc(&ids, sizeof(int64_t) * n * topk));
  CK(cudaMemcpy(ids, hid, sizeof(int64_t) * n * topk, cudaMemcpyHostToDevice));
  free(hid);
  return ids;
}

/* Small problem with the bench's V and dtypes against the fp64 reference (bench_loss.h). */
int bench_validate(kljit_context *ctx, int64_t v, double *loss_err, double *dx_err,
                   double *dw_err) {
  const int64_t n = 5, h = 128;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = h, pb.vocab = v;
  set_teacher(&pb);
  kljit_plan *plan;
  if (kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan) != KLJIT_SUCCESS) {
    fprintf(stderr, "validation plan: %s\n", kljit_last_error());
    return 1;
  }
  host_rng r = {7};
  const int64_t k = topk ? topk : v; /* teacher entries per row */
  double *x = malloc(8 * n * h), *w = malloc(8 * v * h), *t = malloc(8 * n * k);
  double *idd = malloc(8 * n * k);
  int64_t *ids = malloc(8 * n * k);
  double *gx = malloc(8 * n * h), *gw = malloc(8 * v * h), *rx = calloc(n * h, 8);
  double *rw = calloc(v * h, 8), gl;
  for (int64_t i = 0; i < n * h; i++) x[i] = host_normal(&r);
  for (int64_t i = 0; i < v * h; i++) w[i] = 0.3 * host_normal(&r);
  for (int64_t i = 0; i < n; i++) {
    double s = 0;
    for (int64_t j = 0; j < k; j++) s += (t[i * k + j] = host_uniform(&r));
    for (int64_t j = 0; j < k; j++) t[i * k + j] *= (topk ? 0.9 : 1.0) / s;
    for (int64_t j = 0; j < k; j++) idd[i * k + j] = (double)(ids[i * k + j] = sparse_id(i, j, v));
  }
  gbuf X, W, T, I, DX, DW, L, WS;
  memset(&I, 0, sizeof I);
  size_t ws;
  KO(kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, n, &ws));
  if (gbuf_alloc(&X, KLJIT_BF16, n * h) || gbuf_alloc(&W, KLJIT_BF16, v * h) ||
      gbuf_alloc(&T, KLJIT_BF16, n * k) || gbuf_alloc(&DX, KLJIT_BF16, n * h) ||
      (topk && (gbuf_alloc(&I, KLJIT_INT64, n * k) || gbuf_upload(&I, idd, NULL))) ||
      gbuf_alloc(&DW, KLJIT_FP32, v * h) || gbuf_alloc(&L, KLJIT_FP32, 1) ||
      gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 1) || gbuf_upload(&X, x, x) ||
      gbuf_upload(&W, w, w) || gbuf_upload(&T, t, t))
    return 1;
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = n, a.input = X.ptr, a.weight = W.ptr, a.loss = L.ptr;
  if (topk) a.teacher_ids = I.ptr, a.teacher_values = T.ptr;
  else a.teacher = T.ptr;
  a.grad_input = DX.ptr, a.grad_weight = DW.ptr, a.workspace = WS.ptr, a.workspace_size = ws;
  if (kljit_fused(plan, NULL, &a) != KLJIT_SUCCESS) {
    fprintf(stderr, "validation call: %s\n", kljit_last_error());
    return 1;
  }
  if (gbuf_download(&L, &gl) || gbuf_download(&DX, gx) || gbuf_download(&DW, gw)) return 1;
  ref_inputs ri = {0};
  ri.pb = &pb, ri.rows = n, ri.x = x, ri.w = w, ri.temperature = 1;
  if (topk) ri.ids = ids, ri.vals = t;
  else ri.teacher = t;
  ref_outputs ro = {0};
  ro.dx = rx, ro.dw = rw;
  if (ref_compute(&ri, &ro)) return 1;
  *loss_err = fabs(gl - ro.loss) / fabs(ro.loss);
  *dx_err = rel_frobenius(gx, rx, n * h);
  *dw_err = rel_frobenius(gw, rw, v * h);
  gbuf *b[] = {&X, &W, &T, &I, &DX, &DW, &L, &WS};
  for (int i = 0; i < 8; i++) gbuf_free(b[i]);
  free(x), free(w), free(t), free(gx), free(gw), free(rx), free(rw), free(idd), free(ids);
  kljit_plan_destroy(plan);
  return 0;
}

/* ctx_rows: the same device with the benchmark hook KLJIT_CONTEXT_DEBUG_SKIP_GEMMS
 * (kljit_experimental.h: no GEMMs), for the row kernels' time. */
static void bench_shape(kljit_context *ctx, kljit_context *ctx_rows, int64_t n, int64_t h, int64_t v, int twophase,
                        int header) {
  shape_ctx s;
  memset(&s, 0, sizeof s);
  s.n = n, s.h = h, s.v = v;
  double le, xe, we;
  if (bench_validate(ctx, v, &le, &xe, &we)) {
    fprintf(stderr, "validation failed to run\n");
    exit(1);
  }
  /* fp32 logits: the bars. bf16 logits round every score to 8 bits (relative 2^-9),
   * which the loss sums over the row and G carries: the gpu tests' native-logits bounds */
  const int valid = native ? le <= 2e-3 && xe <= 2e-2 && we <= 2e-2
                           : le <= 1e-5 && xe <= 5e-3 && we <= 5e-3;

  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = h, pb.vocab = v;
  set_teacher(&pb);
  KO(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &s.plan));
  size_t ws_f, ws_b, ws_fw, saved;
  KO(kljit_plan_workspace_size(s.plan, KLJIT_MODE_FUSED, n, &ws_f));
  KO(kljit_plan_workspace_size(s.plan, KLJIT_MODE_FORWARD, n, &ws_fw));
  KO(kljit_plan_workspace_size(s.plan, KLJIT_MODE_BACKWARD, n, &ws_b));
  KO(kljit_plan_saved_size(s.plan, n, &saved));
  const size_t ws2 = ws_fw > ws_b ? ws_fw : ws_b;
  const size_t ws = !do_fused ? ws2 : twophase && ws2 > ws_f ? ws2 : ws_f;
  const char *desc = kljit_plan_describe(s.plan);
  const char *cr = strstr(desc, "chunk_rows=");
  s.chunk = cr ? atoll(cr + 11) : 1024;

  void *loss, *wsp, *sv, *gout, *flush;
  const size_t flush_bytes = 256 << 20;
  size_t free0, free1, total;
  CK(cudaMalloc(&s.x, n * h * 2));
  CK(cudaMalloc(&s.w, v * h * 2));
  const int64_t tk = topk ? topk : v; /* teacher entries per row */
  CK(cudaMalloc(&s.t, n * tk * 2));
  CK(cudaMalloc(&s.dx, n * h * 2));
  CK(cudaMalloc(&s.dw, v * h * 4));
  CK(cudaMalloc(&loss, 4));
  CK(cudaMalloc(&sv, saved));
  CK(cudaMalloc(&gout, 4));
  CK(cudaMalloc(&flush, flush_bytes));
  fill_bf16(s.x, n * h, -1, 1, 1);
  fill_bf16(s.w, v * h, -0.05, 0.05, 2);
  fill_bf16(s.t, n * tk, 0, (topk ? 1.8 : 2.0) / tk, 3); /* rows sum to about 0.9 or 1 */
  if (topk) s.ids = upload_sparse_ids(n, v);
  fill_bf16(gout, 2, 1, 1, 4);          /* two bf16 ones = one fp32 value near 1 */
  CK(cudaMemset(gout, 0, 4));
  const float one = 1.0f;
  CK(cudaMemcpy(gout, &one, 4, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  CK(cudaMemGetInfo(&free0, &total));
  CK(cudaMalloc(&wsp, ws));
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = n, a.input = s.x, a.weight = s.w, a.loss = loss;
  if (topk) a.teacher_ids = s.ids, a.teacher_values = s.t;
  else a.teacher = s.t;
  a.grad_input = s.dx, a.grad_weight = s.dw, a.workspace = wsp, a.workspace_size = ws;
  a.saved = sv, a.grad_output = gout;
  s.args = s.args2 = a;

  /* determinism: two runs, bitwise-equal loss, dX and dW */
  float l1, l2;
  const size_t dxb = (size_t)n * h * 2, dwb = (size_t)v * h * 4;
  char *r1 = malloc(dxb + dwb), *r2 = malloc(dxb + dwb);
  bench_fn run = do_fused ? run_fused : run_twophase;
  run(&s);
  CK(cudaMemcpy(&l1, loss, 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r1, s.dx, dxb, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r1 + dxb, s.dw, dwb, cudaMemcpyDeviceToHost));
  run(&s);
  CK(cudaMemcpy(&l2, loss, 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r2, s.dx, dxb, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r2 + dxb, s.dw, dwb, cudaMemcpyDeviceToHost));
  const int deterministic = memcmp(&l1, &l2, 4) == 0 && memcmp(r1, r2, dxb + dwb) == 0;
  free(r1), free(r2);

  bt_power p_fused = {0, 0, 0, 0, 0, 0}, p_two = p_fused;
  const float t_fused =
      do_fused ? time_ms_power(run_fused, &s, flush, flush_bytes, &p_fused) : 0.0f;
  const float t_two = twophase ? time_ms_power(run_twophase, &s, flush, flush_bytes, &p_two)
                               : 0.0f;
  CK(cudaMemGetInfo(&free1, &total));
  const double hidden_alloc = ((double)free0 - (double)free1 - (double)ws) / (1 << 20);
  /* the same plan on a context that skips the GEMMs: the row kernels alone */
  kljit_plan *const with_gemms = s.plan;
  KO(kljit_plan_create(ctx_rows, &pb, KLJIT_PLAN_ESTIMATE, &s.plan));
  const float t_rows = time_ms(run, &s, flush, flush_bytes);
  kljit_plan_destroy(s.plan);
  s.plan = with_gemms;
  CK(cudaFree(wsp));

  /* floors */
  BK(cublasCreate(&s.blas));
  const int64_t ld = (v + 7) / 8 * 8;
  const size_t rows_c = (size_t)(s.chunk < n ? s.chunk : n), rows_f = do_full ? (size_t)n : 0;
  const size_t g_bytes = rows_c * ld * 2 > rows_f * ld * 2 ? rows_c * ld * 2 : rows_f * ld * 2;
  const size_t zsz = native ? 2 : 4;
  const size_t z_bytes = rows_c * ld * zsz > rows_f * ld * 2 ? rows_c * ld * zsz : rows_f * ld * 2;
  CK(cudaMalloc(&s.g, g_bytes));
  fill_bf16(s.g, rows_c * ld, -1e-4, 1e-4, 5);
  CK(cudaMalloc(&s.logits, z_bytes));
  s.full = 0;
  const float f3 = do_fused ? time_ms(run_floor3, &s, flush, flush_bytes) : 0.0f;
  const float f4 = twophase ? time_ms(run_floor4, &s, flush, flush_bytes) : 0.0f;
  s.full = 1;
  float f3full = 0.0f;
  if (do_full) {
    fill_bf16(s.g, n * ld, -1e-4, 1e-4, 5);
    f3full = time_ms(run_floor3, &s, flush, flush_bytes);
  }
  CK(cudaFree(s.g));
  CK(cudaFree(s.logits));
  cublasDestroy(s.blas);

  /* copy ceiling: 2 GiB each way */
  s.copy_bytes = (size_t)1 << 30;
  CK(cudaMalloc(&s.src, s.copy_bytes));
  CK(cudaMalloc(&s.dst, s.copy_bytes));
  CK(cudaMemset(s.src, 1, s.copy_bytes));
  const float t_copy = time_ms(run_copy, &s, flush, flush_bytes);
  const double copy_gbs = 2.0 * (double)s.copy_bytes / (t_copy * 1e-3) / 1e9;
  CK(cudaFree(s.src));
  CK(cudaFree(s.dst));
  /* bytes the row kernels must move (the GEMM's z write is not theirs): dense, z fp32 and the
   * bf16 teacher read twice, G bf16 written once (14 per logit); sparse, z read twice, G
   * written once (10; fused) or z read once in forward, once in backward, G once (10). bf16
   * logits: 2 bytes per read of z (10 dense, 6 sparse) */
  const double zb = native ? 2 : 4;
  const double row_bytes = (double)n * (double)v * (topk ? 2 * zb + 2 : 2 * zb + 2 + 2 + 2);
  const double rows_gbs = row_bytes / (t_rows * 1e-3) / 1e9;
  const double tflop = do_fused ? 6.0 * n * h * v / (t_fused * 1e-3) / 1e12
                                : 8.0 * n * h * v / (t_two * 1e-3) / 1e12;

  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int drv = 0;
  cudaDriverGetVersion(&drv);
  if (header)
    printf("gpu,driver,kljit,N,H,V,K,chunk,valid_loss_rel,valid_dx_rel,valid_dw_rel,"
           "deterministic,fused_ms,floor3_chunked_ms,floor3_full_ms,ratio_chunked,ratio_full,"
           "twophase_ms,floor4_chunked_ms,ratio4,rows_ms,rows_gbs,copy_gbs,rows_frac_copy,"
           "fused_tflops,workspace_gib,hidden_alloc_mib,logits,fused_sm_mhz,fused_watts,"
           "twophase_sm_mhz,twophase_watts\n");
  printf("%s,%d,%s,%lld,%lld,%lld,%d,%lld,%.2e,%.2e,%.2e,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
         "%.3f,%.3f,%.0f,%.0f,%.3f,%.1f,%.3f,%.1f,%s,%.0f,%.0f,%.0f,%.0f\n",
         prop.name, drv, kljit_version(), (long long)n, (long long)h, (long long)v, topk,
         (long long)s.chunk, le, xe, we, deterministic, t_fused, f3, f3full,
         f3 > 0 ? t_fused / f3 : 0.0, f3full > 0 ? t_fused / f3full : 0.0, t_two, f4, twophase ? t_two / f4 : 0.0, t_rows, rows_gbs, copy_gbs,
         rows_gbs / copy_gbs, tflop, ws / (double)(1 << 30), hidden_alloc, native ? "bf16" : "f32",
         p_fused.mhz_median, p_fused.watts_median, p_two.mhz_median, p_two.watts_median);
  char pw[160];
  bt_power_text(&p_fused, pw, sizeof pw);
  fprintf(stderr, "  fused calls: %s\n", pw);
  fflush(stdout);
  fprintf(stderr,
          "%5lldx%4lldx%6lld K=%d %s valid=%d det=%d fused %.2f ms | floor chunked %.2f (x%.3f) full %.2f "
          "(x%.3f) | 2-phase %.2f vs %.2f (x%.3f) | rows %.2f ms %.0f GB/s = %.0f%% of copy %.0f | "
          "ws %.2f GiB hidden %.0f MiB\n",
          (long long)n, (long long)h, (long long)v, topk, native ? "bf16-logits" : "f32-logits",
          valid, deterministic, t_fused, f3,
          f3 > 0 ? t_fused / f3 : 0.0, f3full, f3full > 0 ? t_fused / f3full : 0.0, t_two, f4, twophase ? t_two / f4 : 0.0, t_rows, rows_gbs,
          100 * rows_gbs / copy_gbs, copy_gbs, ws / (double)(1 << 30), hidden_alloc);
  cudaFree(s.x), cudaFree(s.w), cudaFree(s.t), cudaFree(s.dx), cudaFree(s.dw), cudaFree(loss);
  if (s.ids) cudaFree(s.ids);
  cudaFree(sv), cudaFree(gout), cudaFree(flush);
  kljit_plan_destroy(s.plan);
}

/* --teacher hidden: one shape's buffers, plans and timings (see the header). */
enum { ONLINE_ROUNDS = 5 };

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The median of ONLINE_ROUNDS values (t itself left in round order). */
static float median_of_rounds(const float *t) {
  float s[ONLINE_ROUNDS];
  memcpy(s, t, sizeof s);
  qsort(s, ONLINE_ROUNDS, sizeof(float), cmp_float);
  return s[ONLINE_ROUNDS / 2];
}

typedef struct online_ctx {
  int64_t n, h, v, chunk;
  kljit_plan *plan;
  kljit_args args;
  cublasHandle_t blas;
  const void *xt, *wt;
  void *zt; /* one chunk of teacher logits, fp32, LD apart */
} online_ctx;

static void run_online_plan(void *p) {
  online_ctx *o = p;
  KO(kljit_fused(o->plan, NULL, &o->args));
}

/* The online teacher's GEMM, chunk after chunk: zt = Xt[chunk] Wt^T in fp32. */
static void run_teacher_gemm(void *p) {
  online_ctx *o = p;
  const float one = 1.0f, zero = 0.0f;
  const int ld = (int)((o->v + 7) / 8 * 8);
  for (int64_t row0 = 0; row0 < o->n; row0 += o->chunk) {
    const int n = (int)(o->n - row0 < o->chunk ? o->n - row0 : o->chunk);
    BK(cublasGemmEx(o->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)o->v, n, (int)o->h, &one, o->wt,
                    CUDA_R_16BF, (int)o->h, (const char *)o->xt + row0 * o->h * 2, CUDA_R_16BF,
                    (int)o->h, &zero, o->zt, CUDA_R_32F, ld, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
  }
}

static int64_t plan_chunk(const kljit_plan *plan) {
  const char *cr = strstr(kljit_plan_describe(plan), "chunk_rows=");
  return cr ? atoll(cr + 11) : 0;
}

/* Times plan's kljit_fused with the teacher fields of `a` (its loss copied to *loss). */
static float time_plan(online_ctx *o, kljit_plan *plan, const kljit_args *a, void *flush,
                       size_t flush_bytes, float *loss) {
  o->plan = plan;
  o->args = *a;
  const float t = time_ms(run_online_plan, o, flush, flush_bytes);
  CK(cudaMemcpy(loss, a->loss, 4, cudaMemcpyDeviceToHost));
  return t;
}

static void bench_online(kljit_context *ctx, kljit_context *ctx_rows, int64_t n, int64_t h,
                         int64_t v, int header) {
  online_ctx o;
  memset(&o, 0, sizeof o);
  o.n = n, o.h = h, o.v = v;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = h, pb.vocab = v, pb.divergence = divergence;
  pb.beta = divergence == KLJIT_DIVERGENCE_JSD ? jsd_beta : 0.0;
  pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = h;
  kljit_plan *p_online, *p_f32, *p_own, *p_bf16;
  const kljit_problem pb_online = pb;
  KO(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &p_online));
  o.chunk = plan_chunk(p_online);
  if (o.chunk < 1) {
    fprintf(stderr, "bench_loss: no chunk_rows= in the online plan's description\n");
    exit(1);
  }
  pb.teacher = KLJIT_TEACHER_DENSE_LOGITS, pb.teacher_hidden = 0, pb.teacher_dtype = KLJIT_FP32;
  KO(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &p_own));
  kljit_context *same;
  kljit_context_options opt;
  KO(kljit_context_options_default(&opt));
  opt.chunk_rows = o.chunk;
  KO(kljit_context_create(&same, 0, &opt));
  KO(kljit_plan_create(same, &pb, KLJIT_PLAN_ESTIMATE, &p_f32));
  pb.teacher_dtype = KLJIT_BF16;
  KO(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &p_bf16));
  kljit_plan *plans[] = {p_online, p_f32, p_own, p_bf16};
  size_t ws = 0, sz, ws_online = 0, ws_own = 0;
  for (int i = 0; i < 4; i++) {
    KO(kljit_plan_workspace_size(plans[i], KLJIT_MODE_FUSED, n, &sz));
    ws = sz > ws ? sz : ws;
    if (i == 0) ws_online = sz;
    if (i == 2) ws_own = sz;
  }

  void *x, *w, *xt, *wt, *dx, *dw, *loss, *t32, *t16, *wsp, *flush;
  const size_t flush_bytes = 256 << 20;
  const double a = 3.0 * opts.logit_std / sqrt((double)h);
  CK(cudaMalloc(&x, n * h * 2));
  CK(cudaMalloc(&w, v * h * 2));
  CK(cudaMalloc(&xt, n * h * 2));
  CK(cudaMalloc(&wt, v * h * 2));
  CK(cudaMalloc(&dx, n * h * 2));
  CK(cudaMalloc(&dw, v * h * 4));
  CK(cudaMalloc(&loss, 4));
  CK(cudaMalloc(&t32, (size_t)n * v * 4));
  CK(cudaMalloc(&t16, (size_t)n * v * 2));
  CK(cudaMalloc(&wsp, ws));
  CK(cudaMalloc(&flush, flush_bytes));
  fill_bf16(x, n * h, -1, 1, 1);
  fill_bf16(w, v * h, -a, a, 2);
  fill_bf16(xt, n * h, -1, 1, 3);
  fill_bf16(wt, v * h, -a, a, 4);
  /* the dense teachers: the online teacher's logits, all rows at once, fp32 and bf16 */
  BK(cublasCreate(&o.blas));
  const float one = 1.0f, zero = 0.0f;
  BK(cublasGemmEx(o.blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)v, (int)n, (int)h, &one, wt,
                  CUDA_R_16BF, (int)h, xt, CUDA_R_16BF, (int)h, &zero, t32, CUDA_R_32F, (int)v,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  BK(cublasGemmEx(o.blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)v, (int)n, (int)h, &one, wt,
                  CUDA_R_16BF, (int)h, xt, CUDA_R_16BF, (int)h, &zero, t16, CUDA_R_16BF, (int)v,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CK(cudaDeviceSynchronize());

  kljit_args base = KLJIT_ARGS_INIT;
  base.rows = n, base.input = x, base.weight = w, base.loss = loss;
  base.grad_input = dx, base.grad_weight = dw, base.workspace = wsp, base.workspace_size = ws;
  kljit_args on = base, d32 = base, d16 = base;
  on.teacher_input = xt, on.teacher_weight = wt;
  d32.teacher = t32, d16.teacher = t16;
  float l_on, l_f32, l_own, l_bf16;
  (void)time_plan(&o, p_online, &on, flush, flush_bytes, &l_on); /* fills the workspace */
  /* the online plan's row kernels alone (no GEMM runs: the logits are what the run above left
   * in the workspace, finite: the fp32 z half overwritten by bf16 G, zt the last chunk's), and
   * the bytes they must move per logit: z and zt (fp32) read twice, G (bf16) written once; the
   * JSD and the reverse KL read both once more for their row total S */
  kljit_plan *p_rows;
  float l_rows;
  KO(kljit_plan_create(ctx_rows, &pb_online, KLJIT_PLAN_ESTIMATE, &p_rows));
  const float t_rows = time_plan(&o, p_rows, &on, flush, flush_bytes, &l_rows);
  kljit_plan_destroy(p_rows);
  const double row_bytes = (double)n * (double)v * (divergence == KLJIT_DIVERGENCE_FORWARD_KL
                                                        ? 2 * 8 + 2 : 3 * 8 + 2);
  const double rows_gbs = row_bytes / (t_rows * 1e-3) / 1e9;
  const float t_own = time_plan(&o, p_own, &d32, flush, flush_bytes, &l_own);
  const float t_bf16 = time_plan(&o, p_bf16, &d16, flush, flush_bytes, &l_bf16);
  CK(cudaFree(t16));
  CK(cudaMalloc(&o.zt, (size_t)o.chunk * (size_t)((v + 7) / 8 * 8) * 4));
  o.xt = xt, o.wt = wt;
  /* The bar's three numbers, round-robin: the H200 holds its clock down under a long tensor
   * load (power cap), so timings taken minutes apart are not comparable. Each round's values
   * and its wall-clock span go to stderr (to be set beside a clock log such as nvidia-smi's). */
  float r_on[ONLINE_ROUNDS], r_f32[ONLINE_ROUNDS], r_gemm[ONLINE_ROUNDS], ratio[ONLINE_ROUNDS];
  double s_on = 0, s_f32 = 0, s_gemm = 0; /* for the ratio pooled over the rounds */
  for (int r = 0; r < ONLINE_ROUNDS; r++) {
    const double w0 = wall_s();
    r_on[r] = time_plan(&o, p_online, &on, flush, flush_bytes, &l_on);
    const double w1 = wall_s();
    r_f32[r] = time_plan(&o, p_f32, &d32, flush, flush_bytes, &l_f32);
    const double w2 = wall_s();
    r_gemm[r] = time_ms(run_teacher_gemm, &o, flush, flush_bytes);
    const double w3 = wall_s();
    ratio[r] = (r_on[r] - r_f32[r]) / r_gemm[r];
    s_on += r_on[r], s_f32 += r_f32[r], s_gemm += r_gemm[r];
    fprintf(stderr,
            "  round %d: online %.3f ms [wall %.3f-%.3f] dense_f32 %.3f [%.3f-%.3f] teacher GEMM "
            "%.3f [%.3f-%.3f] added/GEMM %.3f\n",
            r, r_on[r], w0, w1, r_f32[r], w1, w2, r_gemm[r], w2, w3, ratio[r]);
  }
  CK(cudaFree(t32));
  const float t_on = median_of_rounds(r_on), t_f32 = median_of_rounds(r_f32);
  const float t_gemm = median_of_rounds(r_gemm);
  const float added = t_on - t_f32, r_med = median_of_rounds(ratio);
  const double pooled = (s_on - s_f32) / s_gemm;
  float r_lo = ratio[0], r_hi = ratio[0];
  for (int r = 1; r < ONLINE_ROUNDS; r++) {
    r_lo = ratio[r] < r_lo ? ratio[r] : r_lo;
    r_hi = ratio[r] > r_hi ? ratio[r] : r_hi;
  }
  const double loss_diff = fabs((double)l_on - (double)l_f32) / fabs((double)l_f32);

  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const char *div = divergence == KLJIT_DIVERGENCE_JSD          ? "jsd"
                    : divergence == KLJIT_DIVERGENCE_REVERSE_KL ? "rkl"
                                                                : "fkl";
  if (header)
    printf("gpu,kljit,N,H,V,divergence,beta,logit_std,chunk_online,chunk_dense_own,online_ms,"
           "dense_f32_ms,dense_own_ms,dense_bf16_ms,teacher_gemm_ms,added_ms,added_over_gemm,"
           "added_over_gemm_pooled,"
           "online_rows_ms,online_rows_gbs,loss_online,loss_rel_diff_f32,workspace_online_gib,"
           "workspace_dense_own_gib\n");
  printf("%s,%s,%lld,%lld,%lld,%s,%g,%g,%lld,%lld,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.0f,"
         "%.3f,%.6g,%.2e,%.3f,%.3f\n",
         prop.name, kljit_version(), (long long)n, (long long)h, (long long)v, div, pb.beta,
         opts.logit_std, (long long)o.chunk, (long long)plan_chunk(p_own), t_on, t_f32, t_own,
         t_bf16,
         t_gemm, added, r_med, pooled, t_rows, rows_gbs, l_on, loss_diff,
         ws_online / (double)(1 << 30), ws_own / (double)(1 << 30));
  fflush(stdout);
  fprintf(stderr,
          "%5lldx%4lldx%6lld %s beta %g std %g | online %.2f ms (chunk %lld) | dense fp32 logits "
          "%.2f same chunk, %.2f own chunk (%lld) | dense bf16 %.2f | teacher GEMM %.2f | "
          "added %.2f: %.3fx the GEMM (median of %d rounds' ratios, %.3f-%.3f; pooled %.3f; "
          "bar <= 1) | rows alone %.2f ms, %.0f GB/s | loss %.6g, "
          "dense %.1e apart\n",
          (long long)n, (long long)h, (long long)v, div, pb.beta, opts.logit_std, t_on,
          (long long)o.chunk, t_f32, t_own, (long long)plan_chunk(p_own), t_bf16, t_gemm, added,
          r_med, ONLINE_ROUNDS, r_lo, r_hi, pooled, t_rows, rows_gbs, l_on, loss_diff);
  cublasDestroy(o.blas);
  void *bufs[] = {x, w, xt, wt, dx, dw, loss, wsp, flush, o.zt};
  for (int i = 0; i < 10; i++) cudaFree(bufs[i]);
  for (int i = 0; i < 4; i++) kljit_plan_destroy(plans[i]);
  kljit_context_destroy(same);
}

/* --gemms' default generated variants per GEMM: the tuner's tries (src/tune_measure.c,
 * JIT_TRIES; the dW list holds the staged and the direct epilogue of the same tile, the switch
 * between C loaded once per tile in 16-byte runs and a load per pair), then the smaller choices
 * on the default tile (w: one stage arrival per warp; c: streaming C; a, b: an L2 policy keeping
 * X, the operand every tile re-reads), each to be judged against the same tile without it. */
static const char *const JIT_DEFAULT[3] = {
    "256.2.4.m.1,256.2.4.g.1,128.2.6.g.1.p,256.2.4.g.1.s,256.2.4.m.1.w,256.2.4.m.1.swca",
    "256.2.4.g.1,256.2.4.m.1,128.2.6.g.1.p,256.2.4.g.2,256.2.4.g.1.w",
    "256.2.4.g.1.s,256.2.4.g.1,128.2.6.g.1.ps,256.2.4.g.2.s,256.2.4.g.1.swcb"};

/* --divergences: the top-K teacher's forward KL, reverse KL and JSD on one shape (header). */
static void bench_topk_divergences(kljit_context *ctx, int64_t n, int64_t h, int64_t v,
                                   int header) {
  static const kljit_divergence DIVS[3] = {KLJIT_DIVERGENCE_FORWARD_KL,
                                           KLJIT_DIVERGENCE_REVERSE_KL, KLJIT_DIVERGENCE_JSD};
  const kljit_divergence asked = divergence;
  kljit_plan *plans[3];
  size_t ws = 0;
  double errs[3][3];
  for (int d = 0; d < 3; d++) {
    divergence = DIVS[d];
    if (bench_validate(ctx, v, &errs[d][0], &errs[d][1], &errs[d][2])) {
      fprintf(stderr, "validation failed to run\n");
      exit(1);
    }
    kljit_problem pb = KLJIT_PROBLEM_INIT;
    pb.hidden = h, pb.vocab = v;
    set_teacher(&pb);
    KO(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plans[d]));
    size_t w = 0;
    KO(kljit_plan_workspace_size(plans[d], KLJIT_MODE_FUSED, n, &w));
    ws = w > ws ? w : ws;
  }
  divergence = asked;
  shape_ctx s;
  memset(&s, 0, sizeof s);
  s.n = n, s.h = h, s.v = v;
  void *loss, *wsp, *flush;
  const size_t flush_bytes = 256 << 20;
  CK(cudaMalloc(&s.x, n * h * 2));
  CK(cudaMalloc(&s.w, v * h * 2));
  CK(cudaMalloc(&s.t, n * topk * 2));
  CK(cudaMalloc(&s.dx, n * h * 2));
  CK(cudaMalloc(&s.dw, v * h * 4));
  CK(cudaMalloc(&loss, 4));
  CK(cudaMalloc(&wsp, ws));
  CK(cudaMalloc(&flush, flush_bytes));
  /* logits of std about logit_std: X uniform in [-1, 1), W in [-a, a), a = 3 S / sqrt(H) */
  const double a = 3.0 * opts.logit_std / sqrt((double)h);
  fill_bf16(s.x, n * h, -1, 1, 1);
  fill_bf16(s.w, v * h, -a, a, 2);
  fill_bf16(s.t, n * topk, 0, 1.8 / topk, 3); /* rows sum to about 0.9 */
  s.ids = upload_sparse_ids(n, v);
  kljit_args args = KLJIT_ARGS_INIT;
  args.rows = n, args.input = s.x, args.weight = s.w, args.loss = loss;
  args.teacher_ids = s.ids, args.teacher_values = s.t;
  args.grad_input = s.dx, args.grad_weight = s.dw, args.workspace = wsp, args.workspace_size = ws;
  s.args = args;
  float t[3][ONLINE_ROUNDS], ratio[2][ONLINE_ROUNDS];
  for (int r = 0; r < ONLINE_ROUNDS; r++) {
    for (int d = 0; d < 3; d++) {
      s.plan = plans[d];
      t[d][r] = time_ms(run_fused, &s, flush, flush_bytes);
    }
    ratio[0][r] = t[1][r] / t[0][r], ratio[1][r] = t[2][r] / t[0][r];
    fprintf(stderr, "  round %d: fkl %.3f ms, rkl %.3f (x%.3f), jsd %.3f (x%.3f)\n", r, t[0][r],
            t[1][r], ratio[0][r], t[2][r], ratio[1][r]);
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (header)
    printf("gpu,kljit,N,H,V,K,tail,beta,logit_std,fkl_ms,rkl_ms,jsd_ms,rkl_over_fkl,"
           "jsd_over_fkl,valid_loss_rel_fkl,valid_loss_rel_rkl,valid_loss_rel_jsd,"
           "valid_dx_rel_max,valid_dw_rel_max\n");
  double dx_max = 0, dw_max = 0;
  for (int d = 0; d < 3; d++) {
    dx_max = errs[d][1] > dx_max ? errs[d][1] : dx_max;
    dw_max = errs[d][2] > dw_max ? errs[d][2] : dw_max;
  }
  const char *tail_name = tail == KLJIT_TAIL_RENORM ? "renorm" : "bucket";
  printf("%s,%s,%lld,%lld,%lld,%d,%s,%g,%g,%.3f,%.3f,%.3f,%.3f,%.3f,%.2e,%.2e,%.2e,%.2e,%.2e\n",
         prop.name, kljit_version(), (long long)n, (long long)h, (long long)v, topk, tail_name,
         jsd_beta, opts.logit_std, median_of_rounds(t[0]), median_of_rounds(t[1]),
         median_of_rounds(t[2]), median_of_rounds(ratio[0]), median_of_rounds(ratio[1]),
         errs[0][0], errs[1][0], errs[2][0], dx_max, dw_max);
  fflush(stdout);
  fprintf(stderr,
          "%5lldx%4lldx%6lld K=%d %s | fkl %.2f ms, rkl %.2f (x%.3f), jsd(%g) %.2f (x%.3f): "
          "medians of %d rounds (bar <= 1.15) | validation loss rel %.1e %.1e %.1e, dX %.1e, "
          "dW %.1e\n",
          (long long)n, (long long)h, (long long)v, topk, tail_name, median_of_rounds(t[0]),
          median_of_rounds(t[1]), median_of_rounds(ratio[0]), jsd_beta, median_of_rounds(t[2]),
          median_of_rounds(ratio[1]), ONLINE_ROUNDS, errs[0][0], errs[1][0], errs[2][0], dx_max,
          dw_max);
  void *bufs[] = {s.x, s.w, s.t, s.dx, s.dw, s.ids, loss, wsp, flush};
  for (int i = 0; i < 9; i++) cudaFree(bufs[i]);
  for (int d = 0; d < 3; d++) kljit_plan_destroy(plans[d]);
}

int main(int argc, char **argv) {
  const char *shapes = "8192x4096x128256,4096x4096x128256,2048x4096x128256,8192x2048x32000,"
                       "4096x2048x32000";
  int twophase = 1, gemms = 0;
  double std_given = 0;
  for (int k = 0; k < 3; k++) opts.jit[k] = JIT_DEFAULT[k];
  for (int i = 1, bad = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) opts.repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) opts.warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--gemms")) gemms = 1;
    else if (!strcmp(argv[i], "--lt-algos") && i + 1 < argc) opts.lt_algos = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--jit-logits") && i + 1 < argc) opts.jit[0] = argv[++i];
    else if (!strcmp(argv[i], "--jit-dx") && i + 1 < argc) opts.jit[1] = argv[++i];
    else if (!strcmp(argv[i], "--jit-dw") && i + 1 < argc) opts.jit[2] = argv[++i];
    else if (!strcmp(argv[i], "--no-all-jit")) opts.all_jit = 0;
    else if (!strcmp(argv[i], "--no-twophase")) twophase = 0;
    else if (!strcmp(argv[i], "--no-fused")) do_fused = 0;
    else if (!strcmp(argv[i], "--no-full")) do_full = 0;
    else if (!strcmp(argv[i], "--topk") && i + 1 < argc) topk = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--native-logits")) native = 1;
    else if (!strcmp(argv[i], "--teacher") && i + 1 < argc && !strcmp(argv[i + 1], "hidden"))
      online = 1, i++;
    else if (!strcmp(argv[i], "--teacher") && i + 1 < argc && !strcmp(argv[i + 1], "probs"))
      online = 0, i++;
    else if (!strcmp(argv[i], "--divergence") && i + 1 < argc) {
      const char *d = argv[++i];
      divergence = !strcmp(d, "jsd") ? KLJIT_DIVERGENCE_JSD
                   : !strcmp(d, "rkl") ? KLJIT_DIVERGENCE_REVERSE_KL
                   : !strcmp(d, "fkl") ? KLJIT_DIVERGENCE_FORWARD_KL : 0;
      bad = !divergence;
    } else if (!strcmp(argv[i], "--beta") && i + 1 < argc) jsd_beta = atof(argv[++i]);
    else if (!strcmp(argv[i], "--logit-std") && i + 1 < argc) std_given = atof(argv[++i]);
    else if (!strcmp(argv[i], "--divergences")) compare_divergences = 1;
    else if (!strcmp(argv[i], "--tail") && i + 1 < argc) {
      const char *t = argv[++i];
      tail = !strcmp(t, "bucket") ? KLJIT_TAIL_BUCKET
             : !strcmp(t, "renorm") ? KLJIT_TAIL_RENORM
             : !strcmp(t, "none") ? KLJIT_TAIL_NONE : (kljit_tail)0;
      bad = !tail;
    } else bad = 1;
    if (bad || !(jsd_beta > 0 && jsd_beta < 1) || std_given < 0 || (topk && online) ||
        (gemms && (online || topk || native)) || opts.repeats < 1 ||
        opts.repeats > BT_MAX_REPEATS || opts.warmup < 0 || opts.lt_algos < 1 ||
        opts.lt_algos > 16 || (compare_divergences && (!topk || tail == KLJIT_TAIL_NONE))) {
      fprintf(stderr, "usage: %s [--shapes NxHxV,...] [--repeats R (1-%d)] [--warmup W] "
              "[--topk K [--tail none|renorm|bucket] [--divergences]] [--no-twophase] "
              "[--no-fused] [--no-full] [--native-logits] [--teacher probs|hidden] "
              "[--divergence fkl|rkl|jsd] [--beta B in (0, 1)] [--logit-std S > 0] | --gemms "
              "[--logit-std S] [--lt-algos K (1-16)] [--jit-logits V,...] [--jit-dx V,...] "
              "[--jit-dw V,...] [--no-all-jit]\n"
              "  (V: a generated variant, BN.CONSUMERS.STAGES.RASTER.CLUSTER[.p|.s|.ps]; "
              "--divergences needs --topk and --tail bucket or renorm)\n",
              argv[0], BT_MAX_REPEATS);
      return 2;
    }
  }
  /* the online teacher's logits had std 3 by default; --gemms' inputs, 2 (issue 26's bars are
   * set at std 2 and 6) */
  opts.logit_std = std_given > 0 ? std_given : gemms ? 2.0 : 3.0;
  if (!gpu_available()) {
    fprintf(stderr, "bench_loss: no GPU here; nothing to time\n");
    return 0;
  }
  bt_power_start(0); /* the SM clock and board power beside the timings (reads only) */
  if (gemms) { /* each configuration has its own context */
    char *list = strdup(shapes), *save = NULL;
    int first = 1;
    /* strtok_r: bench_gemms tokenizes its configurations with strtok */
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save), first = 0) {
      long long n, h, v;
      if (sscanf(tok, "%lldx%lldx%lld", &n, &h, &v) != 3) {
        fprintf(stderr, "bad shape '%s' (want NxHxV)\n", tok);
        return 2;
      }
      bench_gemms(&opts, n, h, v, first);
    }
    free(list);
    bt_power_stop();
    return 0;
  }
  kljit_context *ctx, *ctx_rows;
  KO(kljit_context_create(&ctx, 0, NULL));
  kljit_context_options rows_only;
  KO(kljit_context_options_default(&rows_only));
  rows_only.flags |= KLJIT_CONTEXT_DEBUG_SKIP_GEMMS;
  KO(kljit_context_create(&ctx_rows, 0, &rows_only));
  char *list = strdup(shapes), *save = NULL;
  int first = 1;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    long long n, h, v;
    if (sscanf(tok, "%lldx%lldx%lld", &n, &h, &v) != 3) {
      fprintf(stderr, "bad shape '%s' (want NxHxV)\n", tok);
      return 2;
    }
    if (online)
      bench_online(ctx, ctx_rows, n, h, v, first);
    else if (compare_divergences)
      bench_topk_divergences(ctx, n, h, v, first);
    else
      bench_shape(ctx, ctx_rows, n, h, v, twophase, first);
    first = 0;
  }
  free(list);
  kljit_context_destroy(ctx_rows);
  kljit_context_destroy(ctx);
  bt_power_stop();
  return 0;
}
