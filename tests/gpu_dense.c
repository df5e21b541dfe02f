/* gpu_dense.c — the dense-teacher loss on the GPU against the fp64 CPU reference.
 *
 * Every case draws fresh random inputs (never zeros), poisons every output with NaN bytes,
 * runs kljit (fused, or forward + backward), and compares loss, per-row loss, dX, dW and db with
 * ref_compute on the same rounded inputs. Tolerances and their reasons:
 *   loss, per-row loss  1e-5 relative: fp32 logits and fp32 row arithmetic against fp64
 *                       (native bf16/fp16 logits: 2e-2, the logits themselves are rounded)
 *   dX, dW, db          relative Frobenius 1e-5 for fp32 (fp32 GEMMs, fp32 G);
 *                       5e-3 for fp16/bf16: G is rounded to the input dtype for the tensor-core
 *                       GEMMs (2^-9 relative for bf16). 16-bit outputs are compared with the
 *                       reference rounded to their dtype: what the dtype cannot represent
 *                       (fp16 subnormals of a MEAN gradient over a large V) is not an error of
 *                       the computation.
 * Skips (77) without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "harness.h"
#include "kljit.h"
#include "ref.h"

typedef struct gcase {
  kljit_teacher_form form;
  kljit_dtype dt, tdt;
  kljit_temperature_mode tmode;
  double T, TT;
  kljit_reduction red;
  int fused;        /* 1: kljit_fused; 0: forward + backward */
  int bias;
  int labels;       /* 0 none, 1 about a fifth ignored, 2 all ignored */
  int64_t n, h, v;
  double zstd;      /* standard deviation of the student logits z */
  uint32_t flags;   /* extra problem flags */
  kljit_dtype gw;   /* grad_weight dtype */
  int accumulate;   /* KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT on top of a prior dW */
} gcase;

static kljit_context *the_ctx;
static uint64_t seed = 12345;

static int ctx_get(void) { return gpu_test_context(&the_ctx); }

static const char *dname(kljit_dtype d) {
  return d == KLJIT_FP32 ? "fp32" : d == KLJIT_FP16 ? "fp16" : "bf16";
}
static const char *fname(kljit_teacher_form f) {
  return f == KLJIT_TEACHER_DENSE_PROBS ? "probs" : f == KLJIT_TEACHER_DENSE_LOGPROBS ? "logprobs"
                                                                                     : "logits";
}
static const char *rname(kljit_reduction r) {
  return r == KLJIT_REDUCTION_SUM ? "sum" : r == KLJIT_REDUCTION_BATCHMEAN ? "batchmean"
                                        : r == KLJIT_REDUCTION_MEAN        ? "mean" : "none";
}

/* Random teacher rows in the form asked, as doubles. */
static void make_teacher(const gcase *c, host_rng *rng, double *t) {
  for (int64_t i = 0; i < c->n; i++) {
    double *row = t + i * c->v;
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < c->v; v++) {
      row[v] = 2.0 * host_normal(rng);
      mx = fmax(mx, row[v]);
    }
    if (c->form == KLJIT_TEACHER_DENSE_LOGITS) continue;
    for (int64_t v = 0; v < c->v; v++) sum += exp(row[v] - mx);
    for (int64_t v = 0; v < c->v; v++) {
      const double lp = row[v] - mx - log(sum);
      row[v] = c->form == KLJIT_TEACHER_DENSE_PROBS ? exp(lp) : lp;
    }
  }
}

/* Rounds reference values to what a buffer of dtype dt can hold. */
static void round_to(double *v, int64_t n, kljit_dtype dt) {
  if (dt == KLJIT_FP32) return;
  uint16_t h;
  for (int64_t i = 0; i < n; i++) {
    host_store(&h, dt, 0, v[i]);
    v[i] = host_load(&h, dt, 0);
  }
}

typedef struct errs {
  double loss, rows, dx, dw, db;
} errs;

static int run_case(const gcase *c, errs *e) {
  int rc = ctx_get();
  if (rc != TH_PASS) return rc;
  host_rng rng = {seed++};
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = c->h, pb.vocab = c->v;
  pb.input_dtype = pb.weight_dtype = c->dt;
  pb.teacher_dtype = c->tdt;
  pb.teacher = c->form;
  pb.temperature_mode = c->tmode;
  pb.temperature = c->T;
  pb.teacher_temperature = c->TT;
  pb.reduction = c->red;
  pb.flags = c->flags | (c->bias ? KLJIT_FLAG_BIAS : 0);
  pb.grad_weight_dtype = c->gw;
  pb.label_dtype = (seed & 1) ? KLJIT_INT32 : KLJIT_INT64;
  kljit_plan *plan = NULL;
  TH_OK(kljit_plan_create(the_ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));

  const int64_t n = c->n, h = c->h, v = c->v;
  double *x = malloc(sizeof(double) * n * h), *w = malloc(sizeof(double) * v * h);
  double *b = malloc(sizeof(double) * v), *t = malloc(sizeof(double) * n * v);
  double *dx = calloc(n * h, sizeof(double)), *dw = calloc(v * h, sizeof(double));
  double *db = calloc(v, sizeof(double)), *rl = calloc(n, sizeof(double));
  double *gx = malloc(sizeof(double) * n * h), *gw = malloc(sizeof(double) * v * h);
  double *gb = malloc(sizeof(double) * v), *gl = malloc(sizeof(double) * n);
  double *dw0 = malloc(sizeof(double) * v * h), *gout = malloc(sizeof(double) * n);
  int64_t *lab = malloc(sizeof(int64_t) * n);
  const double wscale = c->zstd / sqrt((double)h);
  for (int64_t i = 0; i < n * h; i++) x[i] = host_normal(&rng);
  for (int64_t i = 0; i < v * h; i++) w[i] = wscale * host_normal(&rng);
  for (int64_t i = 0; i < v; i++) b[i] = 0.5 * host_normal(&rng);
  for (int64_t i = 0; i < v * h; i++) dw0[i] = host_normal(&rng);
  for (int64_t i = 0; i < n; i++) gout[i] = 0.5 + host_uniform(&rng);
  make_teacher(c, &rng, t);
  for (int64_t i = 0; i < n; i++)
    lab[i] = c->labels == 2 ? -100 : c->labels == 1 && host_uniform(&rng) < 0.2 ? -100 : i % 7;

  gbuf X, W, B, Tt, L, DX, DW, DB, LOSS, SAVED, GO, WS;
  memset(&B, 0, sizeof B), memset(&DB, 0, sizeof DB), memset(&L, 0, sizeof L);
  memset(&SAVED, 0, sizeof SAVED), memset(&GO, 0, sizeof GO);
  const int none = c->red == KLJIT_REDUCTION_NONE;
  size_t ws = 0, ws2 = 0, saved = 0;
  TH_OK(kljit_plan_workspace_size(plan, c->fused ? KLJIT_MODE_FUSED : KLJIT_MODE_FORWARD, n, &ws));
  if (!c->fused) {
    TH_OK(kljit_plan_workspace_size(plan, KLJIT_MODE_BACKWARD, n, &ws2));
    TH_OK(kljit_plan_saved_size(plan, n, &saved));
    ws = ws > ws2 ? ws : ws2;
  }
  int fail = gbuf_alloc(&X, c->dt, n * h) | gbuf_alloc(&W, c->dt, v * h) |
             gbuf_alloc(&Tt, c->tdt, n * v) | gbuf_alloc(&DX, c->dt, n * h) |
             gbuf_alloc(&DW, c->gw, v * h) | gbuf_alloc(&LOSS, KLJIT_FP32, none ? n : 1) |
             gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 1);
  if (c->bias) fail |= gbuf_alloc(&B, c->dt, v) | gbuf_alloc(&DB, c->gw, v);
  if (c->labels) fail |= gbuf_alloc(&L, pb.label_dtype, n);
  if (!c->fused) fail |= gbuf_alloc(&SAVED, KLJIT_FP32, saved / 4) |
                         gbuf_alloc(&GO, KLJIT_FP32, none ? n : 1);
  TH_CHECK(!fail);
  /* the reference sees exactly the values the device holds */
  fail |= gbuf_upload(&X, x, x) | gbuf_upload(&W, w, w) | gbuf_upload(&Tt, t, t);
  if (c->bias) fail |= gbuf_upload(&B, b, b);
  if (c->labels) {
    double *ld = malloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++) ld[i] = (double)lab[i];
    fail |= gbuf_upload(&L, ld, NULL);
    free(ld);
  }
  if (!c->fused) fail |= gbuf_upload(&GO, gout, gout);
  fail |= gbuf_poison(&DX) | gbuf_poison(&LOSS) | gbuf_poison(&WS);
  if (c->accumulate) {
    fail |= gbuf_upload(&DW, dw0, dw0);
    if (c->bias) fail |= gbuf_upload(&DB, dw0, dw0);
  } else {
    fail |= gbuf_poison(&DW);
    if (c->bias) fail |= gbuf_poison(&DB);
  }
  TH_CHECK(!fail);

  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = n, a.input = X.ptr, a.weight = W.ptr, a.bias = B.ptr, a.labels = L.ptr;
  a.teacher = Tt.ptr, a.temperature = c->T, a.loss = LOSS.ptr, a.grad_input = DX.ptr;
  a.grad_weight = DW.ptr, a.grad_bias = DB.ptr, a.saved = SAVED.ptr, a.grad_output = GO.ptr;
  a.workspace = WS.ptr, a.workspace_size = ws;
  a.flags = c->accumulate ? KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT : 0;
  if (c->fused) {
    TH_OK(kljit_fused(plan, NULL, &a));
  } else {
    TH_OK(kljit_forward(plan, NULL, &a));
    TH_OK(kljit_backward(plan, NULL, &a));
  }
  fail |= gbuf_download(&LOSS, gl) | gbuf_download(&DX, gx) | gbuf_download(&DW, gw);
  if (c->bias) fail |= gbuf_download(&DB, gb);
  TH_CHECK(!fail);

  ref_inputs ri;
  memset(&ri, 0, sizeof ri);
  ri.pb = &pb, ri.rows = n, ri.x = x, ri.w = w, ri.b = c->bias ? b : NULL;
  ri.labels = c->labels ? lab : NULL, ri.teacher = t, ri.temperature = c->T;
  ri.grad_output = c->fused ? NULL : gout;
  ref_outputs ro;
  memset(&ro, 0, sizeof ro);
  ro.row_loss = rl, ro.dx = dx, ro.dw = dw, ro.db = c->bias ? db : NULL;
  TH_CHECK(ref_compute(&ri, &ro) == 0);
  if (c->accumulate) {
    for (int64_t i = 0; i < v * h; i++) dw[i] += dw0[i];
    for (int64_t i = 0; i < v && c->bias; i++) db[i] += dw0[i];
  }
  round_to(dx, n * h, c->dt);
  round_to(dw, v * h, c->gw);
  if (c->bias) round_to(db, v, c->gw);

  double ma, mr;
  size_t bad = 0;
  if (none) {
    bad += max_errors(gl, rl, n, 1.0, &ma, &mr);
    e->rows = mr;
    e->loss = 0;
  } else {
    bad += max_errors(gl, &ro.loss, 1, 1e-30, &ma, &mr);
    e->loss = mr;
    e->rows = 0;
  }
  bad += max_errors(gx, dx, n * h, 1e-30, &ma, &mr);
  bad += max_errors(gw, dw, v * h, 1e-30, &ma, &mr);
  e->dx = rel_frobenius(gx, dx, n * h);
  e->dw = rel_frobenius(gw, dw, v * h);
  e->db = c->bias ? rel_frobenius(gb, db, v) : 0;
  if (c->bias) bad += max_errors(gb, db, v, 1e-30, &ma, &mr);
  const int all_ignored = c->labels == 2;
  if (all_ignored) { /* loss 0 and zero gradients, exactly */
    double s = 0;
    for (int64_t i = 0; i < n * h; i++) s += fabs(gx[i]);
    for (int64_t i = 0; i < v * h && !c->accumulate; i++) s += fabs(gw[i]);
    e->dx = s > 0 ? INFINITY : 0; /* exactly zero, not merely small */
    e->loss = none ? 0 : fabs(gl[0]) > 0 ? INFINITY : 0;
  }
  gbuf *bufs[] = {&X, &W, &B, &Tt, &L, &DX, &DW, &DB, &LOSS, &SAVED, &GO, &WS};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gbuf_free(bufs[i]);
  free(x), free(w), free(b), free(t), free(dx), free(dw), free(db), free(rl), free(gx);
  free(gw), free(gb), free(gl), free(dw0), free(gout), free(lab);
  kljit_plan_destroy(plan);
  if (bad) {
    fprintf(stderr, "%zu outputs not finite (unwritten or NaN)\n", bad);
    return TH_FAIL;
  }
  return TH_PASS;
}

static int check_case(const gcase *c) {
  errs e;
  const int rc = run_case(c, &e);
  if (rc != TH_PASS) return rc;
  const int native = (c->flags & KLJIT_FLAG_NATIVE_LOGITS) && c->dt != KLJIT_FP32;
  const double tl = native ? 2e-2 : 1e-5;
  const double tg = c->dt == KLJIT_FP32 ? 1e-5 : native ? 2e-2 : 5e-3;
  const int ok = e.loss <= tl && e.rows <= tl && e.dx <= tg && e.dw <= tg && e.db <= tg;
  printf("%-4s %-8s %-4s x%-4s T=%-4g %-7s %-9s %-5s N=%-4lld V=%-6lld bias=%d lab=%d | loss %.1e "
         "rows %.1e (tol %.0e) dX %.1e dW %.1e db %.1e (tol %.0e)\n",
         ok ? "ok" : "FAIL", fname(c->form), dname(c->dt), dname(c->tdt), c->T,
         c->tmode == KLJIT_TEMPERATURE_RUNTIME ? "runtime" : "const", rname(c->red),
         c->fused ? "fused" : "2ph", (long long)c->n, (long long)c->v, c->bias, c->labels, e.loss,
         e.rows, tl, e.dx, e.dw, e.db, tg);
  return ok ? TH_PASS : TH_FAIL;
}

static gcase base(void) {
  gcase c;
  memset(&c, 0, sizeof c);
  c.form = KLJIT_TEACHER_DENSE_PROBS;
  c.dt = c.tdt = KLJIT_BF16;
  c.tmode = KLJIT_TEMPERATURE_CONSTANT;
  c.T = 1.0;
  c.red = KLJIT_REDUCTION_BATCHMEAN;
  c.fused = 1;
  c.labels = 1;
  c.n = 37, c.h = 64, c.v = 1000;
  c.zstd = 3.0;
  c.gw = KLJIT_FP32;
  return c;
}

/* Teacher form x dtype x temperature mode x reduction x mode, bias on every other case. */
static int every_form_dtype_temperature_reduction_and_mode(void) {
  const kljit_teacher_form forms[] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGPROBS,
                                      KLJIT_TEACHER_DENSE_LOGITS};
  const kljit_dtype dts[] = {KLJIT_FP32, KLJIT_FP16, KLJIT_BF16};
  const kljit_reduction reds[] = {KLJIT_REDUCTION_SUM, KLJIT_REDUCTION_BATCHMEAN,
                                  KLJIT_REDUCTION_MEAN, KLJIT_REDUCTION_NONE};
  int worst = TH_PASS, k = 0;
  for (int f = 0; f < 3; f++)
    for (int d = 0; d < 3; d++)
      for (int tm = 0; tm < 3; tm++)
        for (int r = 0; r < 4; r++)
          for (int fused = 0; fused < 2; fused++, k++) {
            if (fused && reds[r] == KLJIT_REDUCTION_NONE) continue;
            gcase c = base();
            c.form = forms[f], c.dt = dts[d], c.tdt = dts[(d + tm) % 3];
            c.tmode = tm == 2 ? KLJIT_TEMPERATURE_RUNTIME : KLJIT_TEMPERATURE_CONSTANT;
            c.T = tm == 0 ? 1.0 : tm == 1 ? 2.0 : 0.5;
            c.TT = tm == 1 ? 1.5 : 0.0;
            c.red = reds[r], c.fused = fused, c.bias = k % 2;
            c.flags = r == 1 ? KLJIT_FLAG_SCALE_T_SQUARED : 0;
            c.gw = k % 3 == 0 ? c.dt : KLJIT_FP32;
            const int rc = check_case(&c);
            if (rc == TH_SKIP) return rc;
            if (rc != TH_PASS) worst = TH_FAIL;
          }
  return worst;
}

static int vocab_sizes_with_ragged_tails(void) {
  const int64_t vs[] = {32000, 32001, 50257, 128256, 151936, 256000};
  int worst = TH_PASS;
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
    for (int fused = 0; fused < 2; fused++) {
      gcase c = base();
      c.v = vs[i], c.n = 9, c.h = 32, c.fused = fused, c.bias = fused;
      c.tdt = i % 2 ? KLJIT_FP32 : KLJIT_BF16;
      const int rc = check_case(&c);
      if (rc == TH_SKIP) return rc;
      if (rc != TH_PASS) worst = TH_FAIL;
    }
  }
  return worst;
}

static int rows_not_a_multiple_of_the_chunk(void) {
  /* the chunk is at least 256 rows: 700 rows are 2 full chunks and a ragged one for V=1000 */
  gcase c = base();
  c.n = 700, c.v = 50257, c.h = 32;
  setenv("KLJIT_CHUNK_ROWS", "256", 1);
  int rc = check_case(&c);
  if (rc == TH_PASS) {
    c.fused = 0, c.red = KLJIT_REDUCTION_NONE;
    rc = check_case(&c);
  }
  unsetenv("KLJIT_CHUNK_ROWS");
  return rc;
}

static int a_single_row(void) {
  gcase c = base();
  c.n = 1, c.labels = 0;
  int rc = check_case(&c);
  if (rc == TH_PASS) {
    c.fused = 0;
    rc = check_case(&c);
  }
  return rc;
}

static int all_rows_ignored_gives_zero_loss_and_gradients(void) {
  gcase c = base();
  c.labels = 2, c.bias = 1;
  int rc = check_case(&c);
  if (rc == TH_PASS) {
    c.fused = 0, c.red = KLJIT_REDUCTION_MEAN;
    rc = check_case(&c);
  }
  return rc;
}

static int large_logits_and_temperatures(void) {
  const double ts[] = {0.5, 2.0};
  int worst = TH_PASS;
  for (int i = 0; i < 2; i++)
    for (int f = 0; f < 3; f++) {
      gcase c = base();
      c.zstd = 30.0 * ts[i]; /* |s| around 30 after scaling */
      c.T = ts[i];
      c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + f);
      c.dt = KLJIT_FP32;
      const int rc = check_case(&c);
      if (rc == TH_SKIP) return rc;
      if (rc != TH_PASS) worst = TH_FAIL;
    }
  return worst;
}

/* The opt-in sm_90 cluster row kernels (KLJIT_ROW_KERNEL=cluster; two-pass elsewhere). */
static int cluster_variant_matches_reference(void) {
  setenv("KLJIT_ROW_KERNEL", "cluster", 1);
  const int64_t vs[] = {1000, 32001, 128256};
  int worst = TH_PASS;
  for (int i = 0; i < 3 && worst != TH_SKIP; i++)
    for (int k = 0; k < 4; k++) {
      gcase c = base();
      c.v = vs[i], c.n = i == 0 ? 37 : 9, c.h = 32;
      c.dt = k == 3 ? KLJIT_FP32 : k == 2 ? KLJIT_FP16 : KLJIT_BF16;
      c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
      c.fused = k % 2, c.bias = k == 1, c.red = k == 0 ? KLJIT_REDUCTION_NONE : c.red;
      c.fused = c.red == KLJIT_REDUCTION_NONE ? 0 : c.fused;
      const int rc = check_case(&c);
      if (rc == TH_SKIP) worst = TH_SKIP;
      else if (rc != TH_PASS) worst = TH_FAIL;
    }
  unsetenv("KLJIT_ROW_KERNEL");
  return worst;
}

static int native_logits_and_accumulated_grad_weight(void) {
  gcase c = base();
  c.flags = KLJIT_FLAG_NATIVE_LOGITS;
  int rc = check_case(&c);
  if (rc != TH_PASS) return rc;
  c = base();
  c.accumulate = 1, c.bias = 1, c.gw = KLJIT_BF16;
  return check_case(&c);
}

static const th_case cases[] = {
    {"every_form_dtype_temperature_reduction_and_mode",
     every_form_dtype_temperature_reduction_and_mode},
    {"vocab_sizes_with_ragged_tails", vocab_sizes_with_ragged_tails},
    {"rows_not_a_multiple_of_the_chunk", rows_not_a_multiple_of_the_chunk},
    {"a_single_row", a_single_row},
    {"all_rows_ignored_gives_zero_loss_and_gradients",
     all_rows_ignored_gives_zero_loss_and_gradients},
    {"large_logits_and_temperatures", large_logits_and_temperatures},
    {"native_logits_and_accumulated_grad_weight", native_logits_and_accumulated_grad_weight},
    {"cluster_variant_matches_reference", cluster_variant_matches_reference},
};
TH_MAIN(cases)
