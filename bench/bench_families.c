/* SPDX-License-Identifier: Apache-2.0 */
/* bench_families.c — issue 29's bars on the GPU, each variant timed against its baseline.
 *
 *   tvd / jsd            TVD's fused call against the dense JSD's (beta 0.5): bar <= 1.05
 *   skew_fwd / jsd       the skew KLs (alpha 0.1) beside them, for the record
 *   skew_rev / jsd
 *   fkl_out / fkl        the forward KL with the per-row loss and the loss's parts asked for
 *                        (kljit_args.row_loss, loss_parts) against the same call without: bar
 *                        <= 1.01
 *   ce_out / ce          the same with CE mixing (hard 0.5, soft 0.5), whose rows write the
 *                        CE's loss partials apart: bar <= 1.01
 *   fkl_rw / fkl         row weights (all 1) against none, for the record
 *
 * Every variant is kljit_fused on bf16 inputs (X uniform in [-1, 1), W in [-a, a) with
 * a = 3 S / sqrt(H), so the student logits have standard deviation S; a dense bf16 teacher of
 * probabilities), fp32 dW, one plan each (KLJIT_PLAN_ESTIMATE). Before timing, each variant runs
 * once at 37 x 64 x 1001 and its loss (and outputs) are compared with the fp64 reference
 * (tests/ref.c), relative 1e-5 (gpu_case.h's bound for fp32 logits); a variant that fails is
 * reported and not timed. Timing: two warm-up calls each, then R rounds (default 7); in each
 * round every variant runs once, in turn, after a 256 MiB write that flushes the L2, between
 * CUDA events. Calls minutes apart are not comparable on a power-capped H200 (DESIGN.md 8): the
 * ratio of a round's variant to the same round's baseline is what is reported, as the median
 * over the rounds with its range.
 *
 * Usage: bench_families [--shapes NxHxV,...] [--rounds R] [--logit-std S]
 * Output: CSV on stdout, one row per variant and shape:
 *   gpu,kljit,N,H,V,logit_std,variant,baseline,ms,baseline_ms,ratio,ratio_lo,ratio_hi,bar,valid
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "kljit.h"
#include "ref.h"

/* A failed CUDA or kljit call ends the benchmark, naming the call (`what`) and the error. */
static void ck(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "bench_families: %s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}
static void ko(kljit_status st, const char *what) {
  if (st == KLJIT_SUCCESS) return;
  fprintf(stderr, "bench_families: %s: %s\n", what, kljit_last_error());
  exit(1);
}
#define CK(x) ck((x), #x)
#define KO(x) ko((x), #x)

enum { NV = 9, MAX_ROUNDS = 64 };

/* One variant: its problem's changes from the plain forward KL, its extra arguments. */
typedef struct variant {
  const char *name, *baseline; /* baseline: another variant's name, or NULL */
  double bar;                  /* the bar on the ratio, 0: for the record */
  kljit_divergence div;
  double beta, alpha, hard;
  int outputs, weights;
} variant;

static const variant VARIANTS[NV] = {
    {"jsd", NULL, 0, KLJIT_DIVERGENCE_JSD, 0.5, 0, 0, 0, 0},
    {"tvd", "jsd", 1.05, KLJIT_DIVERGENCE_TVD, 0, 0, 0, 0, 0},
    {"skew_fwd", "jsd", 0, KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0, 0.1, 0, 0, 0},
    {"skew_rev", "jsd", 0, KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0, 0.1, 0, 0, 0},
    {"fkl", NULL, 0, KLJIT_DIVERGENCE_FORWARD_KL, 0, 0, 0, 0, 0},
    {"fkl_out", "fkl", 1.01, KLJIT_DIVERGENCE_FORWARD_KL, 0, 0, 0, 1, 0},
    {"ce", NULL, 0, KLJIT_DIVERGENCE_FORWARD_KL, 0, 0, 0.5, 0, 0},
    {"ce_out", "ce", 1.01, KLJIT_DIVERGENCE_FORWARD_KL, 0, 0, 0.5, 1, 0},
    {"fkl_rw", "fkl", 0, KLJIT_DIVERGENCE_FORWARD_KL, 0, 0, 0, 0, 1},
};

static const variant *variant_at(int i) { return &VARIANTS[i]; }
static int variant_index(const char *name) {
  for (int i = 0; i < NV; i++)
    if (!strcmp(variant_at(i)->name, name)) return i;
  return -1;
}

static kljit_problem problem_of(const variant *vr, int64_t h, int64_t v, kljit_dtype dt) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = h, pb.vocab = v;
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = dt;
  pb.divergence = vr->div, pb.beta = vr->beta, pb.skew_alpha = vr->alpha;
  if (vr->hard > 0) pb.hard_weight = vr->hard, pb.soft_weight = 1.0 - vr->hard;
  if (vr->weights) pb.flags |= KLJIT_FLAG_ROW_WEIGHTS;
  return pb;
}

/* The variant at 37 x 64 x 1001 (bf16) against the fp64 reference: loss, per-row loss, parts. */
static int validate(kljit_context *ctx, const variant *vr) {
  enum { N = 37, H = 64, V = 1001 };
  const kljit_problem pb = problem_of(vr, H, V, KLJIT_BF16);
  kljit_plan *plan;
  KO(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  size_t ws = 0;
  KO(kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, N, &ws));
  static double x[N * H], w[V * H], t[N * V], lab[N], rw[N], rl[N], grl[N];
  host_rng g = {2900};
  for (int i = 0; i < N * H; i++) x[i] = 2.0 * host_uniform(&g) - 1.0;
  for (int i = 0; i < V * H; i++) w[i] = 0.375 * (2.0 * host_uniform(&g) - 1.0);
  for (int r = 0; r < N; r++) {
    double s = 0;
    for (int c = 0; c < V; c++) s += t[r * V + c] = host_uniform(&g) + 0.01;
    for (int c = 0; c < V; c++) t[r * V + c] /= s;
    lab[r] = r % 5 == 2 ? -100 : (r * 37) % V, rw[r] = 1.0;
  }
  gbuf X, W, T, L, RW, LOSS, RL, PA, DX, DW, WS;
  memset(&RW, 0, sizeof RW), memset(&RL, 0, sizeof RL), memset(&PA, 0, sizeof PA);
  int fail = gbuf_alloc(&X, KLJIT_BF16, N * H) | gbuf_upload(&X, x, x) |
             gbuf_alloc(&W, KLJIT_BF16, V * H) | gbuf_upload(&W, w, w) |
             gbuf_alloc(&T, KLJIT_BF16, N * V) | gbuf_upload(&T, t, t) |
             gbuf_alloc(&L, KLJIT_INT64, N) | gbuf_upload(&L, lab, NULL) |
             gbuf_alloc(&LOSS, KLJIT_FP32, 1) | gbuf_alloc(&DX, KLJIT_BF16, N * H) |
             gbuf_alloc(&DW, KLJIT_FP32, V * H) | gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 1);
  if (vr->weights) fail |= gbuf_alloc(&RW, KLJIT_FP32, N) | gbuf_upload(&RW, rw, NULL);
  if (vr->outputs) fail |= gbuf_alloc(&RL, KLJIT_FP32, N) | gbuf_alloc(&PA, KLJIT_FP32, 2);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = N, a.input = X.ptr, a.weight = W.ptr, a.teacher = T.ptr, a.labels = L.ptr;
  a.loss = LOSS.ptr, a.grad_input = DX.ptr, a.grad_weight = DW.ptr;
  a.row_weights = RW.ptr, a.row_loss = RL.ptr, a.loss_parts = PA.ptr;
  a.workspace = WS.ptr, a.workspace_size = ws;
  double loss = NAN, parts[2] = {NAN, NAN};
  if (!fail) KO(kljit_fused(plan, NULL, &a));
  fail |= fail || gbuf_download(&LOSS, &loss);
  if (vr->outputs) fail |= fail || gbuf_download(&RL, grl) || gbuf_download(&PA, parts);
  int64_t labels[N];
  for (int r = 0; r < N; r++) labels[r] = (int64_t)lab[r];
  ref_inputs ri;
  memset(&ri, 0, sizeof ri);
  ri.pb = &pb, ri.rows = N, ri.x = x, ri.w = w, ri.labels = labels, ri.teacher = t;
  ri.temperature = 1.0;
  ref_outputs ro;
  memset(&ro, 0, sizeof ro);
  ro.row_loss = rl;
  fail |= fail || ref_compute(&ri, &ro);
  double err = fail ? INFINITY : fabs(loss - ro.loss) / fabs(ro.loss), ma, mr = 0;
  if (!fail && vr->outputs) {
    max_errors(grl, rl, N, 1.0, &ma, &mr);
    const double ep = fmax(fabs(parts[0] - ro.loss_soft) / fmax(fabs(ro.loss_soft), 1e-30),
                           fabs(parts[1] - ro.loss_hard) / fmax(fabs(ro.loss_hard), 1e-30));
    err = fmax(err, fmax(mr, ep));
  }
  gbuf *all[] = {&X, &W, &T, &L, &RW, &LOSS, &RL, &PA, &DX, &DW, &WS};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gbuf_free(all[i]);
  kljit_plan_destroy(plan);
  const int ok = err <= 1e-5;
  fprintf(stderr, "validate %-8s at %dx%dx%d: relative error %.1e (loss%s) %s\n", vr->name, N, H,
          V, err, vr->outputs ? ", per-row loss, parts" : "", ok ? "ok" : "FAIL");
  return ok;
}

/* One shape's buffers (bf16 inputs and teacher, fp32 dW), shared by every variant. */
typedef struct shape {
  int64_t n, h, v;
  void *x, *w, *t, *lab, *dx, *dw, *loss, *rl, *parts, *rw, *flush;
  size_t flush_bytes;
} shape;

static float time_call(const shape *s, const kljit_plan *plan, const kljit_args *a,
                       cudaEvent_t ev[2]) {
  CK(cudaMemset(s->flush, 0, s->flush_bytes)); /* the L2 holds nothing of the call's */
  CK(cudaEventRecord(ev[0], NULL));
  KO(kljit_fused(plan, NULL, a));
  CK(cudaEventRecord(ev[1], NULL));
  CK(cudaEventSynchronize(ev[1]));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
  return ms;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}
static float median(const float *v, int n) {
  float t[MAX_ROUNDS];
  memcpy(t, v, sizeof(float) * (size_t)n);
  qsort(t, (size_t)n, sizeof(float), cmp_float);
  return n % 2 ? t[n / 2] : 0.5f * (t[n / 2 - 1] + t[n / 2]);
}

static void bench_shape(kljit_context *ctx, int64_t n, int64_t h, int64_t v, double std,
                        int rounds, const int valid[NV], int header) {
  shape s;
  memset(&s, 0, sizeof s);
  s.n = n, s.h = h, s.v = v, s.flush_bytes = 256 << 20;
  CK(cudaMalloc(&s.x, n * h * 2));
  CK(cudaMalloc(&s.w, v * h * 2));
  CK(cudaMalloc(&s.t, n * v * 2));
  CK(cudaMalloc(&s.dx, n * h * 2));
  CK(cudaMalloc(&s.dw, v * h * 4));
  CK(cudaMalloc(&s.loss, 4));
  CK(cudaMalloc(&s.rl, n * 4));
  CK(cudaMalloc(&s.parts, 8));
  CK(cudaMalloc(&s.rw, n * 4));
  CK(cudaMalloc(&s.lab, n * 8));
  CK(cudaMalloc(&s.flush, s.flush_bytes));
  const double a = 3.0 * std / sqrt((double)h);
  if (gpu_fill_bf16(s.x, n * h, -1, 1, 1) || gpu_fill_bf16(s.w, v * h, -a, a, 2) ||
      gpu_fill_bf16(s.t, n * v, 0, 2.0 / v, 3)) {
    fprintf(stderr, "bench_families: filling the inputs failed\n");
    exit(1);
  }
  int64_t *lab = malloc(sizeof(int64_t) * n);
  float *ones = malloc(sizeof(float) * n);
  for (int64_t i = 0; i < n; i++) lab[i] = (i * 7919) % v, ones[i] = 1.0f;
  CK(cudaMemcpy(s.lab, lab, n * 8, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(s.rw, ones, n * 4, cudaMemcpyHostToDevice));
  free(lab), free(ones);
  kljit_plan *plan[NV] = {NULL};
  kljit_args args[NV];
  size_t ws_max = 0;
  for (int i = 0; i < NV; i++) {
    if (!valid[i]) continue;
    const kljit_problem pb = problem_of(variant_at(i), h, v, KLJIT_BF16);
    KO(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan[i]));
    size_t ws = 0;
    KO(kljit_plan_workspace_size(plan[i], KLJIT_MODE_FUSED, n, &ws));
    ws_max = ws > ws_max ? ws : ws_max;
  }
  void *wsp;
  CK(cudaMalloc(&wsp, ws_max));
  for (int i = 0; i < NV; i++) {
    const variant *vr = variant_at(i);
    kljit_args a0 = KLJIT_ARGS_INIT;
    a0.rows = n, a0.input = s.x, a0.weight = s.w, a0.teacher = s.t, a0.labels = s.lab;
    a0.loss = s.loss, a0.grad_input = s.dx, a0.grad_weight = s.dw;
    a0.workspace = wsp, a0.workspace_size = ws_max;
    if (vr->outputs) a0.row_loss = s.rl, a0.loss_parts = s.parts;
    if (vr->weights) a0.row_weights = s.rw;
    args[i] = a0;
  }
  cudaEvent_t ev[2];
  CK(cudaEventCreate(&ev[0]));
  CK(cudaEventCreate(&ev[1]));
  static float t[NV][MAX_ROUNDS];
  for (int i = 0; i < NV; i++) /* warm-up: modules loaded, clocks up */
    for (int k = 0; k < 2 && plan[i]; k++) (void)time_call(&s, plan[i], &args[i], ev);
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < NV; i++)
      if (plan[i]) t[i][r] = time_call(&s, plan[i], &args[i], ev);
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (header)
    printf("gpu,kljit,N,H,V,logit_std,variant,baseline,ms,baseline_ms,ratio,ratio_lo,ratio_hi,"
           "bar,valid\n");
  for (int i = 0; i < NV; i++) {
    const variant *vr = variant_at(i);
    const int b = vr->baseline ? variant_index(vr->baseline) : -1;
    float ratio[MAX_ROUNDS], lo = 0, hi = 0, med = 0;
    const int timed = plan[i] && (b < 0 || plan[b]);
    for (int r = 0; r < rounds && timed && b >= 0; r++) {
      ratio[r] = t[i][r] / t[b][r];
      lo = r == 0 || ratio[r] < lo ? ratio[r] : lo;
      hi = r == 0 || ratio[r] > hi ? ratio[r] : hi;
    }
    if (timed && b >= 0) med = median(ratio, rounds);
    printf("%s,%s,%lld,%lld,%lld,%g,%s,%s,%.3f,%.3f,%.4f,%.4f,%.4f,%g,%d\n", prop.name,
           kljit_version(), (long long)n, (long long)h, (long long)v, std, vr->name,
           vr->baseline ? vr->baseline : "", timed ? median(t[i], rounds) : 0.0f,
           timed && b >= 0 ? median(t[b], rounds) : 0.0f, med, lo, hi, vr->bar, valid[i]);
  }
  fflush(stdout);
  for (int i = 0; i < NV; i++) kljit_plan_destroy(plan[i]);
  void *bufs[] = {s.x, s.w, s.t, s.lab, s.dx, s.dw, s.loss, s.rl, s.parts, s.rw, s.flush, wsp};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) CK(cudaFree(bufs[i]));
  CK(cudaEventDestroy(ev[0]));
  CK(cudaEventDestroy(ev[1]));
}

int main(int argc, char **argv) {
  const char *shapes = "8192x4096x128256,8192x2048x32000";
  int rounds = 7;
  double std = 3.0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--logit-std") && i + 1 < argc) std = atof(argv[++i]);
    else rounds = 0;
    if (rounds < 1 || rounds > MAX_ROUNDS || !(std > 0)) {
      fprintf(stderr, "usage: %s [--shapes NxHxV,...] [--rounds R in 1..%d] [--logit-std S]\n",
              argv[0], MAX_ROUNDS);
      return 2;
    }
  }
  /* every shape parsed before the GPU is touched: a typo costs no validation run */
  enum { MAX_SHAPES = 32 };
  long long dims[MAX_SHAPES][3];
  int count = 0;
  for (const char *p = shapes; *p && count < MAX_SHAPES; count++) {
    int used = 0;
    if (sscanf(p, "%lldx%lldx%lld%n", &dims[count][0], &dims[count][1], &dims[count][2],
               &used) != 3 || (p[used] != ',' && p[used] != '\0')) {
      fprintf(stderr, "bench_families: bad shape list at '%s' (want NxHxV,...)\n", p);
      return 2;
    }
    p += used + (p[used] == ',');
  }
  if (!gpu_available()) {
    fprintf(stderr, "bench_families: no GPU here; nothing to time\n");
    return 0;
  }
  kljit_context *ctx;
  KO(kljit_context_create(&ctx, 0, NULL));
  int valid[NV];
  for (int i = 0; i < NV; i++) valid[i] = validate(ctx, variant_at(i));
  for (int k = 0; k < count; k++)
    bench_shape(ctx, dims[k][0], dims[k][1], dims[k][2], std, rounds, valid, k == 0);
  kljit_context_destroy(ctx);
  return 0;
}
