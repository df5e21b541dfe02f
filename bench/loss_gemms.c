/* SPDX-License-Identifier: Apache-2.0 */
/* loss_gemms.c — bench_loss --gemms: what users run, the whole fused call, with each GEMM's
 * backend switched per call.
 *
 * One problem N x H x V (bf16 inputs, dense teacher probabilities, fp32 dW, batchmean; X
 * uniform in [-1, 1), W in [-a, a) with a = 3 S / sqrt(H): logits of std S, --logit-std). The
 * configurations, each a context whose options name the GEMMs' backends (gemm_choice, the list
 * form of KLJIT_GEMM) and a plan of it:
 *   cublas            every GEMM cuBLASLt with its heuristic's algorithm: the baseline;
 *   <g>:cublas.<k>    GEMM g (logits, dx, dw) on the k-th algorithm of cuBLASLt's heuristic
 *                     list (k = 1 .. --lt-algos - 1), the others as the baseline;
 *   <g>:jit.<v>       GEMM g on generated variant v (--jit-logits, --jit-dx, --jit-dw), the
 *                     others as the baseline (a logits variant ending in .stats: with the row
 *                     statistics in its epilogue, KLJIT_GEMM's logits:jit.<v>.stats);
 *   all:jit           every GEMM generated (its default variant; --no-all-jit drops it).
 * Before any timing, each configuration is validated: on a 5 x 128 problem of the same V
 * against the fp64 reference (the loss, dX, dW; the same bounds as bench_loss's shapes), then
 * at the bench's shape against the baseline (loss within 1e-3, dX within 2e-2 relative
 * Frobenius over every row, dW within 1e-3 over 2048 rows spread over V: a wrong kernel errs by
 * the order of the values); a configuration that fails either is reported and not timed. Each
 * is run twice more for a bitwise-identical rerun (dX and the rows of dW compared as bytes),
 * reported beside its time.
 *
 * Timing (bench_time.h): every configuration's call warmed up back to back (sustained load),
 * then --repeats rounds, each timing every configuration once in turn, the order reversed
 * every other round, each call after an L2 flush; the median of its rounds, its minimum and
 * maximum, and the SM clock and board power NVML sampled during its calls, beside it. Printed:
 * one CSV row per configuration (stdout), and per GEMM (stderr) the best cuBLASLt
 * configuration and each generated one as a ratio of it (> 1: the generated GEMM made the call
 * faster).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bench_loss.h"
#include "gpu_fill.h"
#include "gpu_util.h"
#include "host_dtype.h"

enum { MAX_CFG = 64, DW_ROWS = 2048 };

static const char *const KINDS[3] = {"logits", "dx", "dw"};

typedef struct cfg {
  char name[80];    /* "dw:jit.256.2.4.g.1.s" */
  char choice[192]; /* its options.gemm_choice */
  int kind;         /* the GEMM it switches (a kind index), -1 for the baseline and all:jit */
  int generated;
  kljit_context *ctx;
  kljit_plan *plan;
  int ok, bitwise;
  double v_loss, v_dx, v_dw; /* the small problem against fp64 */
  double d_loss, d_dx, d_dw; /* the bench's shape against the baseline */
} cfg;

typedef struct shared {
  int64_t n, h, v;
  kljit_args args;
  const kljit_plan *plan; /* the call bt_round_robin's step makes */
  double *dx_ref, *dw_ref, *dx_got, *dw_got; /* the outputs read back (read_outputs) */
  uint16_t *dx_raw;
  float *dw_raw;
  float loss_ref;
} shared;

static void add(cfg *c, int *n, int kind, int generated, const char *name, const char *choice) {
  if (*n == MAX_CFG) return;
  cfg *x = &c[(*n)++];
  memset(x, 0, sizeof *x);
  snprintf(x->name, sizeof x->name, "%s", name);
  snprintf(x->choice, sizeof x->choice, "%s", choice);
  x->kind = kind, x->generated = generated;
}

/* The configurations of the header, in order: baseline, then per GEMM its cuBLASLt algorithms and
 * generated variants, then all:jit. */
static int configurations(const bench_opts *o, cfg *c) {
  int n = 0;
  char name[80], choice[192];
  add(c, &n, -1, 0, "cublas", "all:cublas");
  for (int k = 0; k < 3; k++) {
    for (int a = 1; a < o->lt_algos; a++) {
      snprintf(name, sizeof name, "%s:cublas.%d", KINDS[k], a);
      snprintf(choice, sizeof choice, "all:cublas,%s", name);
      add(c, &n, k, 0, name, choice);
    }
    char *list = strdup(o->jit[k] ? o->jit[k] : ""), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      snprintf(name, sizeof name, "%s:jit.%s", KINDS[k], t);
      snprintf(choice, sizeof choice, "all:cublas,%s", name);
      add(c, &n, k, 1, name, choice);
    }
    free(list);
  }
  if (o->all_jit) add(c, &n, -1, 1, "all:jit", "all:jit");
  return n;
}

static int run_call(void *arg) {
  shared *s = arg;
  const kljit_status st = kljit_fused(s->plan, NULL, &s->args);
  if (st != KLJIT_SUCCESS) fprintf(stderr, "kljit_fused: %s\n", kljit_last_error());
  return st != KLJIT_SUCCESS;
}

/* dX whole and DW_ROWS rows of dW spread over V (the last one included), as doubles. */
static void read_outputs(shared *s, double *dx, double *dw, float *loss) {
  const size_t nx = (size_t)(s->n * s->h), hw = (size_t)s->h * 4;
  const int64_t step = s->v > DW_ROWS ? s->v / DW_ROWS : 1;
  const int64_t rows = s->v < DW_ROWS ? s->v : DW_ROWS;
  const size_t nw = (size_t)(rows + 1) * (size_t)s->h;
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(loss, s->args.loss, 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(s->dx_raw, s->args.grad_input, nx * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < nx; i++) dx[i] = host_bf16_to_f32(s->dx_raw[i]);
  CK(cudaMemcpy2D(s->dw_raw, hw, s->args.grad_weight, hw * (size_t)step, hw, (size_t)rows,
                  cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(s->dw_raw + (size_t)rows * (size_t)s->h,
                (const char *)s->args.grad_weight + (size_t)(s->v - 1) * hw, hw,
                cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < nw; i++) dw[i] = s->dw_raw[i];
}

/* The configuration's call at the bench's shape, against the baseline's outputs (ref: this is
 * the baseline: its outputs become the reference), then again for a bitwise rerun. */
static void check(shared *s, cfg *c, int ref) {
  const size_t nx = (size_t)(s->n * s->h);
  const size_t nw = (size_t)((s->v < DW_ROWS ? s->v : DW_ROWS) + 1) * (size_t)s->h;
  float loss, again;
  s->plan = c->plan;
  if (run_call(s)) return;
  read_outputs(s, ref ? s->dx_ref : s->dx_got, ref ? s->dw_ref : s->dw_got,
               ref ? &s->loss_ref : &loss);
  if (ref) loss = s->loss_ref;
  c->d_loss = fabs((double)loss - s->loss_ref) / fmax(fabs((double)s->loss_ref), 1e-30);
  c->d_dx = ref ? 0 : rel_frobenius(s->dx_got, s->dx_ref, nx);
  c->d_dw = ref ? 0 : rel_frobenius(s->dw_got, s->dw_ref, nw);
  /* the rerun, compared as bits with what the first run left (exact conversions to double) */
  double *dx1 = ref ? s->dx_ref : s->dx_got, *dw1 = ref ? s->dw_ref : s->dw_got;
  double *dx2 = malloc(nx * sizeof *dx2), *dw2 = malloc(nw * sizeof *dw2);
  if (!dx2 || !dw2 || run_call(s)) {
    free(dx2), free(dw2);
    return;
  }
  read_outputs(s, dx2, dw2, &again);
  c->bitwise = !memcmp(&loss, &again, 4) && !memcmp(dx1, dx2, nx * sizeof *dx1) &&
               !memcmp(dw1, dw2, nw * sizeof *dw1);
  free(dx2), free(dw2);
  /* a rerun that differs is reported (the CSV's bitwise_rerun, stderr), not left out: the
   * baseline's cuBLASLt may reduce split-K partials in any order */
  c->ok = c->d_loss <= 1e-3 && c->d_dx <= 2e-2 && c->d_dw <= 1e-3;
}

/* Contexts, validation and plans of every configuration; a failure leaves that one out. */
static void prepare(cfg *c, int nc, const kljit_problem *pb, int64_t v) {
  for (int i = 0; i < nc; i++) {
    kljit_context_options opt;
    KO(kljit_context_options_default(&opt));
    opt.gemm = KLJIT_GEMM_DEFAULT, opt.gemm_choice = c[i].choice;
    if (kljit_context_create(&c[i].ctx, 0, &opt) != KLJIT_SUCCESS) {
      fprintf(stderr, "%s: %s: left out\n", c[i].name, kljit_last_error());
      continue;
    }
    /* the small problem's cuBLASLt list may be shorter than the shape's (cublas.<k> then has
     * no k-th algorithm there): such a configuration is checked at the shape alone */
    const int ran = !bench_validate(c[i].ctx, v, &c[i].v_loss, &c[i].v_dx, &c[i].v_dw);
    if (!ran) c[i].v_loss = c[i].v_dx = c[i].v_dw = NAN;
    if ((!ran && c[i].generated) ||
        kljit_plan_create(c[i].ctx, pb, KLJIT_PLAN_ESTIMATE, &c[i].plan) != KLJIT_SUCCESS) {
      fprintf(stderr, "%s: %s: left out\n", c[i].name, kljit_last_error());
      continue;
    }
    /* the bounds of bench_loss's shapes (fp32 logits) */
    const int valid = !ran || (c[i].v_loss <= 1e-5 && c[i].v_dx <= 5e-3 && c[i].v_dw <= 5e-3);
    fprintf(stderr, "%-28s fp64 check: loss %.1e dX %.1e dW %.1e%s\n", c[i].name, c[i].v_loss,
            c[i].v_dx, c[i].v_dw, valid ? ran ? "" : " (not run)" : "  FAILED: left out");
    if (!valid) kljit_plan_destroy(c[i].plan), c[i].plan = NULL;
    const char *d = kljit_plan_describe(c[i].plan ? c[i].plan : NULL);
    for (const char *l = strstr(d, "  GEMM "); l; l = strstr(l + 1, "  GEMM ")) {
      const char *e = strchr(l, '\n');
      fprintf(stderr, "%28s %.*s\n", "", (int)(e ? e - l : (long)strlen(l)), l + 2);
    }
    /* where the row statistics come from (a logits item's .stats: its epilogue) */
    const char *r = strstr(d, "  row statistics");
    if (r) {
      const char *e = strchr(r, '\n');
      fprintf(stderr, "%28s %.*s\n", "", (int)(e ? e - r : (long)strlen(r)), r + 2);
    }
  }
}

static void summary(const cfg *c, const bt_entry *e, const int *of, int ne) {
  char pw[160];
  for (int i = 0; i < ne; i++) { /* the baseline and every GEMM generated at once */
    const cfg *x = &c[of[i]];
    if (e[i].failed || x->kind != -1) continue;
    bt_power_text(&e[i].r.power, pw, sizeof pw);
    fprintf(stderr, "  %-35s %8.3f ms  %.3fx  %s\n", x->name, e[i].r.median_ms,
            e[0].r.median_ms / e[i].r.median_ms, pw);
  }
  for (int k = 0; k < 3; k++) {
    int best = -1; /* the fastest cuBLASLt configuration for GEMM k: baseline or k:cublas.<a> */
    for (int i = 0; i < ne; i++) {
      const cfg *x = &c[of[i]];
      if (e[i].failed || x->generated || (x->kind != k && x->kind != -1)) continue;
      if (best < 0 || e[i].r.median_ms < e[best].r.median_ms) best = i;
    }
    if (best < 0) continue;
    bt_power_text(&e[best].r.power, pw, sizeof pw);
    fprintf(stderr, "  %-6s best cuBLASLt %-22s %8.3f ms  %s\n", KINDS[k], c[of[best]].name,
            e[best].r.median_ms, pw);
    for (int i = 0; i < ne; i++) {
      const cfg *x = &c[of[i]];
      if (e[i].failed || !x->generated || x->kind != k) continue;
      bt_power_text(&e[i].r.power, pw, sizeof pw);
      fprintf(stderr, "         %-28s %8.3f ms  %.3fx  %s\n", x->name, e[i].r.median_ms,
              e[best].r.median_ms / e[i].r.median_ms, pw);
    }
  }
}

void bench_gemms(const bench_opts *o, int64_t n, int64_t h, int64_t v, int header) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = h, pb.vocab = v;
  cfg *c = calloc(MAX_CFG, sizeof *c);
  bt_entry *e = calloc(MAX_CFG, sizeof *e);
  int of[MAX_CFG];
  if (!c || !e) exit(1);
  const int nc = configurations(o, c);
  fprintf(stderr, "== %lld x %lld x %lld: %d configurations\n", (long long)n, (long long)h,
          (long long)v, nc);
  prepare(c, nc, &pb, v);
  if (!c[0].plan) {
    fprintf(stderr, "the baseline (every GEMM cuBLASLt) failed: nothing to compare with\n");
    exit(1);
  }
  shared s;
  memset(&s, 0, sizeof s);
  s.n = n, s.h = h, s.v = v;
  size_t ws = 0;
  for (int i = 0; i < nc; i++) {
    size_t b = 0;
    if (c[i].plan) KO(kljit_plan_workspace_size(c[i].plan, KLJIT_MODE_FUSED, n, &b));
    ws = b > ws ? b : ws;
  }
  void *x, *w, *t, *dx, *dw, *loss, *wsp, *flush;
  CK(cudaMalloc(&x, (size_t)(n * h) * 2));
  CK(cudaMalloc(&w, (size_t)(v * h) * 2));
  CK(cudaMalloc(&t, (size_t)(n * v) * 2));
  CK(cudaMalloc(&dx, (size_t)(n * h) * 2));
  CK(cudaMalloc(&dw, (size_t)(v * h) * 4));
  CK(cudaMalloc(&loss, 4));
  CK(cudaMalloc(&wsp, ws));
  CK(cudaMalloc(&flush, BENCH_FLUSH_BYTES));
  const double a = 3.0 * o->logit_std / sqrt((double)h);
  if (gpu_fill(x, KLJIT_BF16, (size_t)(n * h), -1, 1, 1) ||
      gpu_fill(w, KLJIT_BF16, (size_t)(v * h), -a, a, 2) ||
      gpu_fill(t, KLJIT_BF16, (size_t)(n * v), 0, 2.0 / (double)v, 3))
    exit(1);
  kljit_args args = KLJIT_ARGS_INIT;
  args.rows = n, args.input = x, args.weight = w, args.teacher = t, args.loss = loss;
  args.grad_input = dx, args.grad_weight = dw, args.workspace = wsp, args.workspace_size = ws;
  s.args = args;
  const size_t nx = (size_t)(n * h), nw = (size_t)((v < DW_ROWS ? v : DW_ROWS) + 1) * (size_t)h;
  s.dx_ref = malloc(nx * 8), s.dx_got = malloc(nx * 8), s.dx_raw = malloc(nx * 2);
  s.dw_ref = malloc(nw * 8), s.dw_got = malloc(nw * 8), s.dw_raw = malloc(nw * 4);
  if (!s.dx_ref || !s.dx_got || !s.dx_raw || !s.dw_ref || !s.dw_got || !s.dw_raw) exit(1);
  int ne = 0;
  for (int i = 0; i < nc; i++) {
    if (!c[i].plan) continue;
    check(&s, &c[i], i == 0);
    fprintf(stderr, "%-28s against the baseline: loss %.1e dX %.1e dW %.1e, rerun %s%s\n",
            c[i].name, c[i].d_loss, c[i].d_dx, c[i].d_dw,
            c[i].bitwise ? "bitwise identical" : "DIFFERENT", c[i].ok ? "" : "  FAILED: left out");
    if (!c[i].ok) continue;
    of[ne] = i;
    e[ne].name = c[i].name, e[ne].step = run_call, e[ne].arg = NULL;
    ne++;
  }
  if (!c[0].ok) {
    fprintf(stderr, "the baseline (every GEMM cuBLASLt) did not run: stopped\n");
    exit(1);
  }
  /* every entry's step runs its own plan: the step's argument is the entry's shared state with
   * its plan set, so each gets a copy of it */
  shared *per = calloc((size_t)ne, sizeof *per);
  if (!per) exit(1);
  for (int i = 0; i < ne; i++) per[i] = s, per[i].plan = c[of[i]].plan, e[i].arg = &per[i];
  const bt_loop loop = {o->warmup, o->repeats, flush, BENCH_FLUSH_BYTES, NULL, NULL, NULL};
  if (bt_round_robin(&loop, e, ne)) exit(1);
  char gpu[128];
  int drv = 0;
  bench_gpu(gpu, sizeof gpu, &drv);
  if (header)
    printf("gpu,driver,kljit,N,H,V,logit_std,config,gemm,generated,ms_median,ms_min,ms_max,"
           "rounds,vs_baseline,sm_mhz_median,sm_mhz_min,sm_mhz_max,watts_median,watts_max,"
           "power_samples,fp64_loss_rel,fp64_dx_rel,fp64_dw_rel,diff_loss,diff_dx,diff_dw,"
           "bitwise_rerun\n");
  const float base = e[0].failed ? 0 : e[0].r.median_ms;
  for (int i = 0; i < ne; i++) {
    const cfg *k = &c[of[i]];
    const bt_result *r = &e[i].r;
    if (e[i].failed) continue;
    printf("%s,%d,%s,%lld,%lld,%lld,%g,%s,%s,%d,%.3f,%.3f,%.3f,%d,%.4f,%.0f,%.0f,%.0f,%.0f,%.0f,"
           "%d,%.2e,%.2e,%.2e,%.2e,%.2e,%.2e,%d\n",
           gpu, drv, kljit_version(), (long long)n, (long long)h, (long long)v, o->logit_std,
           k->name, k->kind >= 0 ? KINDS[k->kind] : "all", k->generated, r->median_ms,
           r->min_ms, r->max_ms, r->repeats, base > 0 ? base / r->median_ms : 0.0,
           r->power.mhz_median, r->power.mhz_min, r->power.mhz_max, r->power.watts_median,
           r->power.watts_max, r->power.n, k->v_loss, k->v_dx, k->v_dw, k->d_loss, k->d_dx,
           k->d_dw, k->bitwise);
  }
  fflush(stdout);
  fprintf(stderr, "== %lld x %lld x %lld, %d rounds round-robin (order reversed every other "
          "round) after %d warm-up calls of each, back to back:\n", (long long)n, (long long)h,
          (long long)v, o->repeats, o->warmup);
  summary(c, e, of, ne);
  for (int i = 0; i < nc; i++) {
    kljit_plan_destroy(c[i].plan);
    kljit_context_destroy(c[i].ctx);
  }
  void *bufs[] = {x, w, t, dx, dw, loss, wsp, flush};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
  free(s.dx_ref), free(s.dx_got), free(s.dx_raw), free(s.dw_ref), free(s.dw_got), free(s.dw_raw);
  free(per), free(c), free(e);
}
