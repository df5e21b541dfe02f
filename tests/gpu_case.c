/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_case.c — one GPU test case against the fp64 reference (see gpu_case.h). */
#include "gpu_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "harness.h"
#include "ref.h"

static kljit_context *the_ctx;
static uint64_t next_seed = 12345;

static int ctx_get(void) { return gpu_test_context(&the_ctx); }

static const char *dname(kljit_dtype d) {
  return d == KLJIT_FP32 ? "fp32" : d == KLJIT_FP16 ? "fp16" : "bf16";
}
static const char *fname(const gcase *c) {
  static const char *const sparse[2][3] = {{"sp-p-none", "sp-p-renorm", "sp-p-bucket"},
                                           {"sp-lp-none", "sp-lp-renorm", "sp-lp-bucket"}};
  if (c->form == KLJIT_TEACHER_SPARSE_TOPK)
    return sparse[c->values == KLJIT_TOPK_LOGPROBS][c->tail - KLJIT_TAIL_NONE];
  return c->form == KLJIT_TEACHER_DENSE_PROBS      ? "probs"
         : c->form == KLJIT_TEACHER_DENSE_LOGPROBS ? "logprobs"
         : c->form == KLJIT_TEACHER_DENSE_HIDDEN   ? "hidden"
                                                   : "logits";
}
static const char *rname(kljit_reduction r) {
  return r == KLJIT_REDUCTION_SUM ? "sum" : r == KLJIT_REDUCTION_BATCHMEAN ? "batchmean"
                                        : r == KLJIT_REDUCTION_MEAN        ? "mean" : "none";
}

/* The row stride of the dense teacher: tld, or V. */
static int64_t teacher_ld(const gcase *c) { return c->tld ? c->tld : c->v; }

/* Random teacher rows in the form asked, as doubles (rows teacher_ld apart). */
static void make_teacher(const gcase *c, host_rng *rng, double *t) {
  for (int64_t i = 0; i < c->n; i++) {
    double *row = t + i * teacher_ld(c);
    for (int64_t v = c->v; v < teacher_ld(c); v++)
      row[v] = c->form == KLJIT_TEACHER_DENSE_PROBS ? 0.9 : 40.0;
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < c->v; v++) {
      /* teacher logits as large as the student's where a teacher softcap is tested */
      row[v] = (c->teacher_softcap > 0 ? c->zstd : 2.0) * host_normal(rng);
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

/* An fp16 output computed in fp32 and rounded once may differ from the exact value rounded to
 * fp16 by one step where fp16 is subnormal (2^-24): MEAN-reduced gradients land there. That
 * step is the dtype's, not the computation's, and is not counted. */
static double subnormal_step(kljit_dtype dt) { return dt == KLJIT_FP16 ? 0x1p-24 : 0.0; }

typedef struct errs {
  double loss, rows, dx, dw, db;
  double row_loss, parts; /* the optional outputs (gcase.outputs) */
  double gpu_loss; /* kljit's loss (NONE: the sum of its per-row losses) */
  size_t bad;      /* outputs not finite (unwritten or NaN): the case fails */
  int e16;         /* the plan took E16 (its description says so): gpu_case.h's loss tolerance */
} errs;

/* Sparse teacher rows: K distinct ids (or all of V) and their probabilities under a random
 * distribution over V, as probs or log-probs. With zero_mass_rows every 4th row is all zeros
 * (log-probs: -inf). */
static void make_sparse(const gcase *c, host_rng *rng, int64_t *ids, double *vals) {
  double *row = malloc(sizeof(double) * c->v);
  int64_t *perm = malloc(sizeof(int64_t) * c->v);
  for (int64_t i = 0; i < c->n; i++) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < c->v; v++) {
      row[v] = 2.0 * host_normal(rng);
      mx = fmax(mx, row[v]);
      perm[v] = v;
    }
    for (int64_t v = 0; v < c->v; v++) sum += exp(row[v] - mx);
    /* the first K of a partial Fisher-Yates shuffle: K distinct ids in random order (all_ids:
     * 0..V-1 in order, drawing nothing, so the inputs equal the dense-probs case's) */
    for (int64_t k = 0; k < c->k && !c->all_ids; k++) {
      const int64_t j = k + (int64_t)(host_uniform(rng) * (double)(c->v - k));
      const int64_t t = perm[k];
      perm[k] = perm[j < c->v ? j : c->v - 1], perm[j < c->v ? j : c->v - 1] = t;
    }
    const int zero = c->zero_mass_rows && i % 4 == 1;
    for (int64_t k = 0; k < c->k; k++) {
      const int64_t id = perm[k];
      const double lp = row[id] - mx - log(sum);
      ids[i * c->k + k] = id;
      vals[i * c->k + k] = c->values == KLJIT_TOPK_PROBS ? (zero ? 0.0 : exp(lp))
                                                         : (zero ? -INFINITY : lp);
    }
  }
  free(row);
  free(perm);
}

static int run_case(const gcase *c, errs *e, uint64_t case_seed) {
  int rc = ctx_get();
  if (rc != TH_PASS) return rc;
  host_rng rng = {case_seed};
  const int sparse = c->form == KLJIT_TEACHER_SPARSE_TOPK;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = c->h, pb.vocab = c->v;
  pb.input_dtype = pb.weight_dtype = c->dt;
  pb.teacher_dtype = c->tdt;
  pb.teacher = c->form;
  if (sparse) {
    pb.topk = c->k, pb.topk_id_dtype = c->idt, pb.topk_values = c->values, pb.tail = c->tail;
  }
  pb.temperature_mode = c->tmode;
  pb.temperature = c->T;
  pb.teacher_temperature = c->TT;
  pb.reduction = c->red;
  pb.flags = c->flags | (c->bias ? KLJIT_FLAG_BIAS : 0);
  const int tbias = c->form == KLJIT_TEACHER_DENSE_HIDDEN && c->teacher_bias;
  if (tbias) pb.flags |= KLJIT_FLAG_TEACHER_BIAS;
  pb.grad_weight_dtype = c->gw;
  if (c->accum) pb.grad_weight_accum = c->accum;
  pb.softcap = c->softcap, pb.teacher_softcap = c->teacher_softcap;
  const int hidden = c->form == KLJIT_TEACHER_DENSE_HIDDEN;
  pb.teacher_vocab = c->tld, pb.teacher_ld = hidden ? 0 : c->tld;
  pb.teacher_hidden = hidden ? c->ht : 0;
  pb.hard_weight = c->hard_weight, pb.soft_weight = c->soft_weight;
  pb.divergence = c->divergence, pb.beta = c->beta, pb.skew_alpha = c->skew_alpha;
  pb.label_smoothing = c->label_smoothing, pb.z_loss = c->z_loss;
  if (c->row_weights) pb.flags |= KLJIT_FLAG_ROW_WEIGHTS;
  pb.label_dtype = (case_seed & 1) ? KLJIT_INT32 : KLJIT_INT64;
  kljit_plan *plan = NULL;
  TH_OK(kljit_plan_create(the_ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  e->e16 = strstr(kljit_plan_describe(plan), "(E16)") != NULL;

  const int64_t n = c->n, h = c->h, v = c->v;
  double *x = malloc(sizeof(double) * n * h), *w = malloc(sizeof(double) * v * h);
  /* teacher elements: the sparse values, the online teacher's inputs, or the dense rows */
  const int64_t tn = sparse ? n * c->k : hidden ? n * c->ht : n * teacher_ld(c);
  const int64_t twn = hidden ? teacher_ld(c) * c->ht : 0; /* the online teacher's head */
  double *tw = hidden ? malloc(sizeof(double) * twn) : NULL;
  double *tb = tbias ? malloc(sizeof(double) * teacher_ld(c)) : NULL;
  double *b = malloc(sizeof(double) * v), *t = malloc(sizeof(double) * tn);
  int64_t *ids = sparse ? malloc(sizeof(int64_t) * tn) : NULL;
  double *dx = calloc(n * h, sizeof(double)), *dw = calloc(v * h, sizeof(double));
  double *db = calloc(v, sizeof(double)), *rl = calloc(n, sizeof(double));
  double *gx = malloc(sizeof(double) * n * h), *gw = malloc(sizeof(double) * v * h);
  double *gb = malloc(sizeof(double) * v), *gl = malloc(sizeof(double) * n);
  double *dw0 = malloc(sizeof(double) * v * h), *gout = malloc(sizeof(double) * n);
  int64_t *lab = malloc(sizeof(int64_t) * n);
  double *rw = malloc(sizeof(double) * n), *grl = malloc(sizeof(double) * n), gparts[2] = {0, 0};
  const double wscale = c->zstd / sqrt((double)h);
  for (int64_t i = 0; i < n * h; i++) x[i] = host_normal(&rng);
  for (int64_t i = 0; i < v * h; i++) w[i] = wscale * host_normal(&rng);
  for (int64_t i = 0; i < v; i++) b[i] = 0.5 * host_normal(&rng);
  for (int64_t i = 0; i < v * h; i++) dw0[i] = host_normal(&rng);
  for (int64_t i = 0; i < n; i++) gout[i] = 0.5 + host_uniform(&rng);
  if (sparse) make_sparse(c, &rng, ids, t);
  else if (hidden) {
    for (int64_t i = 0; i < tn; i++) t[i] = host_normal(&rng);
    const double s = (c->teacher_softcap > 0 ? c->zstd : 2.0) / sqrt((double)c->ht);
    for (int64_t i = 0; i < twn; i++) tw[i] = s * host_normal(&rng);
    for (int64_t i = 0; tb && i < teacher_ld(c); i++) tb[i] = host_normal(&rng);
  } else {
    make_teacher(c, &rng, t);
  }
  for (int64_t i = 0; i < n; i++)
    lab[i] = c->labels == 2 ? -100 : c->labels == 1 && host_uniform(&rng) < 0.2 ? -100 : i % 7;
  for (int64_t i = 0; i < n; i++) rw[i] = i % 7 == 3 ? 0.0 : 2.0 * host_uniform(&rng);

  gbuf X, W, B, Tt, TW, TB, ID, L, DX, DW, DB, LOSS, SAVED, GO, WS, RW, RL, PARTS, DIV;
  memset(&RW, 0, sizeof RW), memset(&RL, 0, sizeof RL), memset(&PARTS, 0, sizeof PARTS);
  memset(&DIV, 0, sizeof DIV);
  memset(&ID, 0, sizeof ID), memset(&TW, 0, sizeof TW), memset(&TB, 0, sizeof TB);
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
             gbuf_alloc(&Tt, c->tdt, tn) | gbuf_alloc(&DX, c->dt, n * h) |
             gbuf_alloc(&DW, c->gw, v * h) | gbuf_alloc(&LOSS, KLJIT_FP32, none ? n : 1) |
             gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 1);
  if (c->bias) fail |= gbuf_alloc(&B, c->dt, v) | gbuf_alloc(&DB, c->gw, v);
  if (sparse) fail |= gbuf_alloc(&ID, c->idt, tn);
  if (hidden) fail |= gbuf_alloc(&TW, c->tdt, twn);
  if (tbias) fail |= gbuf_alloc(&TB, c->tdt, teacher_ld(c));
  if (c->labels) fail |= gbuf_alloc(&L, pb.label_dtype, n);
  if (!c->fused) fail |= gbuf_alloc(&SAVED, KLJIT_FP32, saved / 4) |
                         gbuf_alloc(&GO, KLJIT_FP32, none ? n : 1);
  if (c->row_weights) fail |= gbuf_alloc(&RW, KLJIT_FP32, n) | gbuf_upload(&RW, rw, rw);
  if (c->outputs) fail |= gbuf_alloc(&RL, KLJIT_FP32, n) | gbuf_alloc(&PARTS, KLJIT_FP32, 2) |
                          gbuf_poison(&RL) | gbuf_poison(&PARTS);
  TH_CHECK(!fail);
  /* the reference sees exactly the values the device holds */
  fail |= gbuf_upload(&X, x, x) | gbuf_upload(&W, w, w);
  if (c->bias) fail |= gbuf_upload(&B, b, b);
  ref_inputs ri;
  memset(&ri, 0, sizeof ri);
  ri.pb = &pb, ri.rows = n, ri.x = x, ri.w = w, ri.b = c->bias ? b : NULL;
  ri.labels = c->labels ? lab : NULL, ri.temperature = c->T;
  if (sparse) ri.ids = ids, ri.vals = t;
  else if (hidden) ri.teacher_x = t, ri.teacher_w = tw, ri.teacher_b = tb;
  else ri.teacher = t;
  ri.grad_output = c->fused ? NULL : gout;
  ri.row_weights = c->row_weights ? rw : NULL;
  if (c->divergence == KLJIT_DIVERGENCE_TVD && !sparse && !hidden) {
    /* off the kink of |p - q| by 1e-3 in log p, 100 times the fp32 error of log q at these
     * logit scales: the GPU and the reference take the same side of every column */
    round_to(t, tn, c->tdt);
    TH_CHECK(ref_separate_ties(&ri, t, c->tdt, 1e-3) == 0);
  }
  fail |= gbuf_upload(&Tt, t, t);
  if (hidden) fail |= gbuf_upload(&TW, tw, tw);
  if (tbias) fail |= gbuf_upload(&TB, tb, tb);
  if (sparse) {
    double *idd = malloc(sizeof(double) * tn);
    for (int64_t i = 0; i < tn; i++) idd[i] = (double)ids[i];
    fail |= gbuf_upload(&ID, idd, NULL);
    free(idd);
  }
  if (c->labels) {
    double *ld = malloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++) ld[i] = (double)lab[i];
    fail |= gbuf_upload(&L, ld, NULL);
    free(ld);
  }
  if (!c->fused) fail |= gbuf_upload(&GO, gout, gout);
  if (c->divisor != 0)
    fail |= gbuf_alloc(&DIV, KLJIT_FP32, 2) | gbuf_fill_f64(&DIV, c->divisor);
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
  if (sparse) a.teacher_ids = ID.ptr, a.teacher_values = Tt.ptr;
  else if (hidden) a.teacher_input = Tt.ptr, a.teacher_weight = TW.ptr, a.teacher_bias = TB.ptr;
  else a.teacher = Tt.ptr;
  a.temperature = c->T, a.loss = LOSS.ptr, a.grad_input = DX.ptr;
  a.grad_weight = DW.ptr, a.grad_bias = DB.ptr, a.saved = SAVED.ptr, a.grad_output = GO.ptr;
  a.workspace = WS.ptr, a.workspace_size = ws;
  a.flags = c->accumulate ? KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT : 0;
  a.row_weights = RW.ptr, a.row_loss = RL.ptr, a.loss_parts = PARTS.ptr;
  a.divisor = (const double *)DIV.ptr;
  if (c->fused) {
    TH_OK(kljit_fused(plan, NULL, &a));
  } else {
    TH_OK(kljit_forward(plan, NULL, &a));
    TH_OK(kljit_backward(plan, NULL, &a));
  }
  fail |= gbuf_download(&LOSS, gl) | gbuf_download(&DX, gx) | gbuf_download(&DW, gw);
  if (c->bias) fail |= gbuf_download(&DB, gb);
  if (c->outputs) fail |= gbuf_download(&RL, grl) | gbuf_download(&PARTS, gparts);
  TH_CHECK(!fail);

  ref_outputs ro;
  memset(&ro, 0, sizeof ro);
  ro.row_loss = rl, ro.dx = dx, ro.dw = dw, ro.db = c->bias ? db : NULL;
  TH_CHECK(ref_compute(&ri, &ro) == 0);
  if (c->divisor != 0) { /* the kept rows' mean becomes a share of the divisor's */
    const double f = c->divisor > 0 ? (double)ro.rows_kept / c->divisor : 0.0;
    ro.loss *= f, ro.loss_soft *= f, ro.loss_hard *= f; /* row_loss has no reduction constant */
    for (int64_t i = 0; i < n * h; i++) dx[i] *= f;
    for (int64_t i = 0; i < v * h; i++) dw[i] *= f;
    for (int64_t i = 0; i < v && c->bias; i++) db[i] *= f;
  }
  if (c->accumulate) {
    for (int64_t i = 0; i < v * h; i++) dw[i] += dw0[i];
    for (int64_t i = 0; i < v && c->bias; i++) db[i] += dw0[i];
  }
  round_to(dx, n * h, c->dt);
  round_to(dw, v * h, c->gw);
  if (c->bias) round_to(db, v, c->gw);

  double ma, mr;
  size_t bad = 0;
  e->gpu_loss = 0;
  for (int64_t i = 0; i < (none ? n : 1); i++) e->gpu_loss += gl[i];
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
  e->dx = rel_frobenius_q(gx, dx, n * h, subnormal_step(c->dt));
  e->dw = rel_frobenius_q(gw, dw, v * h, subnormal_step(c->gw));
  e->db = c->bias ? rel_frobenius_q(gb, db, v, subnormal_step(c->gw)) : 0;
  if (c->bias) bad += max_errors(gb, db, v, 1e-30, &ma, &mr);
  if (c->outputs) { /* the per-row loss as NONE's (floor 1), the parts as the scalar loss */
    bad += max_errors(grl, rl, n, 1.0, &ma, &mr);
    e->row_loss = mr;
    const double want[2] = {ro.loss_soft, ro.loss_hard};
    bad += max_errors(gparts, want, 2, 1e-30, &ma, &mr);
    e->parts = mr;
  }
  const int all_ignored = c->labels == 2;
  if (all_ignored) { /* loss 0 and zero gradients, exactly */
    double s = 0;
    for (int64_t i = 0; i < n * h; i++) s += fabs(gx[i]);
    for (int64_t i = 0; i < v * h && !c->accumulate; i++) s += fabs(gw[i]);
    e->dx = s > 0 ? INFINITY : 0; /* exactly zero, not merely small */
    e->loss = none ? 0 : fabs(gl[0]) > 0 ? INFINITY : 0;
  }
  gbuf *bufs[] = {&X,  &W,  &B,    &Tt,    &TW, &TB, &ID, &L,  &DX,    &DW,
                  &DB, &LOSS, &SAVED, &GO, &WS, &RW, &RL, &PARTS, &DIV};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gbuf_free(bufs[i]);
  free(x), free(w), free(b), free(t), free(dx), free(dw), free(db), free(rl), free(gx);
  free(gw), free(gb), free(gl), free(dw0), free(gout), free(lab), free(ids), free(tw);
  free(tb), free(rw), free(grl);
  kljit_plan_destroy(plan);
  e->bad = bad; /* reported by the caller, after the line that names the case */
  return TH_PASS;
}

int gcase_check(const gcase *c) {
  errs e;
  memset(&e, 0, sizeof e);
  const int rc = run_case(c, &e, next_seed++);
  if (rc != TH_PASS) return rc;
  const int native = (c->flags & KLJIT_FLAG_NATIVE_LOGITS) && c->dt != KLJIT_FP32;
  const double tl = native ? 2e-2 : e.e16 ? 3e-4 : 1e-5;
  const double tg = c->dt == KLJIT_FP32 ? 1e-5 : native ? 2e-2 : 5e-3;
  const int ok = !e.bad && e.loss <= tl && e.rows <= tl && e.dx <= tg && e.dw <= tg &&
                 e.db <= tg && e.row_loss <= tl && e.parts <= tl;
  char fam[160] = "", fam29[160] = "";
  if (c->softcap > 0 || c->teacher_softcap > 0 || c->tld || c->hard_weight > 0 ||
      c->soft_weight != 1.0 || c->divergence != KLJIT_DIVERGENCE_FORWARD_KL || c->teacher_bias)
    snprintf(fam, sizeof fam, " div=%d beta=%g cap=%g tcap=%g tld=%lld hard=%g soft=%g tbias=%d",
             (int)c->divergence, c->beta, c->softcap, c->teacher_softcap, (long long)c->tld,
             c->hard_weight, c->soft_weight, c->teacher_bias);
  if (c->skew_alpha > 0 || c->label_smoothing > 0 || c->z_loss > 0 || c->row_weights ||
      c->outputs)
    snprintf(fam29, sizeof fam29, " alpha=%g ls=%g zl=%g rw=%d | row_loss %.1e parts %.1e",
             c->skew_alpha, c->label_smoothing, c->z_loss, c->row_weights, e.row_loss, e.parts);
  printf("%-4s %-12s %-4s x%-4s T=%-4g %-7s %-9s %-5s N=%-4lld V=%-6lld K=%-4d bias=%d lab=%d%s%s"
         " | loss %.1e rows %.1e (tol %.0e) dX %.1e dW %.1e db %.1e (tol %.0e)\n",
         ok ? "ok" : "FAIL", fname(c), dname(c->dt), dname(c->tdt), c->T,
         c->tmode == KLJIT_TEMPERATURE_RUNTIME ? "runtime" : "const", rname(c->red),
         c->fused ? "fused" : "2ph", (long long)c->n, (long long)c->v, c->k, c->bias, c->labels,
         fam, fam29, e.loss, e.rows, tl, e.dx, e.dw, e.db, tg);
  if (e.bad) {
    fflush(stdout); /* the case's line first: ctest shows stdout and stderr in write order */
    fprintf(stderr, "  %zu outputs of that case not finite (unwritten or NaN)\n", e.bad);
  }
  return ok ? TH_PASS : TH_FAIL;
}


int gcase_loss(const gcase *c, uint64_t seed, double *loss) {
  errs e;
  memset(&e, 0, sizeof e);
  const int rc = run_case(c, &e, seed);
  *loss = e.gpu_loss;
  if (rc == TH_PASS && e.bad) {
    fprintf(stderr, "gcase_loss: %zu outputs not finite (unwritten or NaN)\n", e.bad);
    return TH_FAIL;
  }
  return rc;
}

gcase gcase_base(void) {
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
  c.k = 100, c.idt = KLJIT_INT64, c.values = KLJIT_TOPK_PROBS, c.tail = KLJIT_TAIL_NONE;
  c.soft_weight = 1.0;
  c.divergence = KLJIT_DIVERGENCE_FORWARD_KL;
  return c;
}
