/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_sparse.c — the sparse top-K teacher on the GPU against the fp64 CPU reference, and checked
 * mode (bad teacher data is reported, nothing is written).
 *
 * Cases run through gpu_case.h (fresh random inputs, poisoned outputs, tolerances there). The
 * support of a row is K distinct random ids of a random distribution over V (not its top K: the
 * kernels must not care), its values the probabilities or log-probabilities there. Skips (77)
 * without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_case.h"
#include "gpu_util.h"
#include "harness.h"

static gcase sparse_base(void) {
  gcase c = gcase_base();
  c.form = KLJIT_TEACHER_SPARSE_TOPK;
  return c;
}

static int fold(int worst, int rc) {
  if (worst == TH_SKIP || rc == TH_SKIP) return TH_SKIP;
  return rc != TH_PASS ? TH_FAIL : worst;
}

/* One tail x value form x dtype x reduction x mode; ids, bias, temperature rotate with the
 * case's index over the three tails (48 a tail), so the three tests below together are the
 * whole product, each short enough to run beside the others (one was 264 s at -j8). */
static int every_value_form_dtype_reduction_and_mode(int tail) {
  const kljit_dtype dts[] = {KLJIT_FP32, KLJIT_FP16, KLJIT_BF16};
  int worst = TH_PASS, i = 48 * tail;
  for (int lp = 0; lp < 2; lp++)
    for (int d = 0; d < 3; d++)
      for (int r = 0; r < 4; r++)
        for (int fused = 0; fused < 2 && worst != TH_SKIP; fused++, i++) {
          if (fused && r == 3) continue;
          gcase c = sparse_base();
          c.tail = (kljit_tail)(KLJIT_TAIL_NONE + tail);
          c.values = lp ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
          c.dt = dts[d], c.tdt = dts[(d + i) % 3];
          c.red = (kljit_reduction)(KLJIT_REDUCTION_SUM + r), c.fused = fused;
          c.idt = i % 2 ? KLJIT_INT32 : KLJIT_INT64;
          c.bias = i % 3 == 0;
          c.tmode = i % 4 == 3 ? KLJIT_TEMPERATURE_RUNTIME : KLJIT_TEMPERATURE_CONSTANT;
          c.T = i % 4 == 0 ? 1.0 : i % 4 == 1 ? 2.0 : 0.5;
          c.flags = i % 5 == 0 ? KLJIT_FLAG_SCALE_T_SQUARED : 0u;
          c.gw = i % 3 == 1 ? c.dt : KLJIT_FP32;
          worst = fold(worst, gcase_check(&c));
        }
  return worst;
}

static int every_value_form_dtype_reduction_and_mode_tail_none(void) {
  return every_value_form_dtype_reduction_and_mode(0);
}

static int every_value_form_dtype_reduction_and_mode_tail_renorm(void) {
  return every_value_form_dtype_reduction_and_mode(1);
}

static int every_value_form_dtype_reduction_and_mode_tail_bucket(void) {
  return every_value_form_dtype_reduction_and_mode(2);
}

/* K = 1 and K = 1024 (the largest), every tail, both modes. */
static int smallest_and_largest_k(void) {
  int worst = TH_PASS;
  for (int tail = 0; tail < 3; tail++)
    for (int k = 0; k < 2 && worst != TH_SKIP; k++) {
      gcase c = sparse_base();
      c.tail = (kljit_tail)(KLJIT_TAIL_NONE + tail);
      c.k = k ? 1024 : 1, c.v = k ? 50257 : 1000, c.n = 13, c.h = 32;
      c.fused = (tail + k) % 2;
      c.values = k ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
      worst = fold(worst, gcase_check(&c));
    }
  return worst;
}

/* With every id of the vocabulary in the support, TAIL_NONE is the dense loss: the same seed
 * gives the dense-probs case the same teacher (gpu_case.c), and the two kljit losses agree. */
static int full_support_equals_dense(void) {
  int worst = TH_PASS;
  for (int fused = 0; fused < 2 && worst == TH_PASS; fused++) {
    gcase sp = sparse_base();
    sp.k = (int)sp.v, sp.all_ids = 1, sp.dt = sp.tdt = KLJIT_FP32, sp.fused = fused;
    gcase de = sp;
    de.form = KLJIT_TEACHER_DENSE_PROBS;
    double ls = 0, ld = 0;
    int rc = gcase_loss(&sp, 777 + fused, &ls);
    if (rc == TH_PASS) rc = gcase_loss(&de, 777 + fused, &ld);
    if (rc != TH_PASS) return rc;
    const double rel = fabs(ls - ld) / fabs(ld);
    printf("K = V = %lld, %s: sparse loss %.9g, dense loss %.9g, rel %.1e (tol 1e-5)\n",
           (long long)sp.v, fused ? "fused" : "2ph", ls, ld, rel);
    if (!(rel <= 1e-5)) worst = TH_FAIL;
    worst = fold(worst, gcase_check(&sp));
  }
  return worst;
}

/* Rows whose teacher mass is 0 (RENORM: nothing; NONE: -p only; BUCKET: all tail) among
 * ignored rows. */
static int zero_mass_and_ignored_rows(void) {
  int worst = TH_PASS;
  for (int tail = 0; tail < 3; tail++)
    for (int lp = 0; lp < 2 && worst != TH_SKIP; lp++) {
      gcase c = sparse_base();
      c.tail = (kljit_tail)(KLJIT_TAIL_NONE + tail);
      c.values = lp ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
      c.zero_mass_rows = 1, c.labels = 1, c.fused = lp, c.bias = 1;
      worst = fold(worst, gcase_check(&c));
    }
  gcase c = sparse_base();
  c.labels = 2, c.tail = KLJIT_TAIL_BUCKET;
  worst = fold(worst, gcase_check(&c));
  c.fused = 0, c.red = KLJIT_REDUCTION_MEAN;
  return fold(worst, gcase_check(&c));
}

static int vocab_sizes_and_ragged_chunks(void) {
  const int64_t vs[] = {32000, 32001, 151936, 256000};
  int worst = TH_PASS;
  for (size_t i = 0; i < sizeof vs / sizeof vs[0] && worst != TH_SKIP; i++)
    for (int tail = 0; tail < 3; tail += 2) {
      gcase c = sparse_base();
      c.v = vs[i], c.n = 9, c.h = 32, c.fused = (int)i % 2, c.tail = (kljit_tail)(1 + tail);
      c.idt = i % 2 ? KLJIT_INT32 : KLJIT_INT64;
      worst = fold(worst, gcase_check(&c));
    }
  setenv("KLJIT_CHUNK_ROWS", "256", 1);
  gcase c = sparse_base();
  c.n = 700, c.v = 50257, c.h = 32, c.tail = KLJIT_TAIL_BUCKET;
  worst = fold(worst, gcase_check(&c));
  c.fused = 0, c.red = KLJIT_REDUCTION_NONE, c.tail = KLJIT_TAIL_RENORM;
  worst = fold(worst, gcase_check(&c));
  unsetenv("KLJIT_CHUNK_ROWS");
  return worst;
}

static int native_logits_single_row_and_large_logits(void) {
  gcase c = sparse_base();
  c.flags = KLJIT_FLAG_NATIVE_LOGITS, c.tail = KLJIT_TAIL_BUCKET;
  int worst = gcase_check(&c);
  c = sparse_base();
  c.n = 1, c.labels = 0, c.fused = 0;
  worst = fold(worst, gcase_check(&c));
  for (int t = 0; t < 2; t++) {
    c = sparse_base();
    c.T = t ? 2.0 : 0.5, c.zstd = 30.0 * c.T, c.dt = KLJIT_FP32, c.tail = KLJIT_TAIL_BUCKET;
    worst = fold(worst, gcase_check(&c));
  }
  return worst;
}

/* ---- checked mode --------------------------------------------------------------------- */

static kljit_context *the_ctx;

/* Runs kljit_fused on a small problem whose teacher has one defect planted in row `bad_row`
 * and expects KLJIT_ERR_BAD_INPUT_DATA naming that row and `what`, with the loss, dX and dW
 * buffers untouched. defect: 0 none (must succeed), 1 id out of range, 2 duplicate id, 3 NaN
 * value, 4 negative probability. sparse = 0: a dense teacher (defects 3, 4). */
static int checked_run(int sparse, int defect, const char *what) {
  int rc = gpu_test_context(&the_ctx);
  if (rc != TH_PASS) return rc;
  const int64_t n = 40, h = 32, v = 500, k = 64, bad_row = 17;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = h, pb.vocab = v, pb.flags = KLJIT_FLAG_CHECK_INPUTS;
  if (sparse) {
    pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = (int32_t)k;
    pb.topk_id_dtype = KLJIT_INT32;
  }
  kljit_plan *plan = NULL;
  TH_OK(kljit_plan_create(the_ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  size_t ws = 0;
  TH_OK(kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, n, &ws));
  const int64_t tn = sparse ? n * k : n * v;
  double *x = malloc(sizeof(double) * n * h), *w = malloc(sizeof(double) * v * h);
  double *t = malloc(sizeof(double) * tn), *ids = malloc(sizeof(double) * tn);
  host_rng rng = {99};
  for (int64_t i = 0; i < n * h; i++) x[i] = host_normal(&rng);
  for (int64_t i = 0; i < v * h; i++) w[i] = 0.1 * host_normal(&rng);
  for (int64_t i = 0; i < tn; i++) t[i] = (0.5 + host_uniform(&rng)) / (double)(sparse ? k : v);
  for (int64_t i = 0; i < tn; i++) ids[i] = (double)((i % k) * 7 % v); /* distinct per row */
  const int64_t at = bad_row * (sparse ? k : v) + 5;
  if (defect == 1) ids[at] = (double)v;
  if (defect == 2) ids[at] = ids[at + 3];
  if (defect == 3) t[at] = NAN;
  if (defect == 4) t[at] = -0.25;
  gbuf X, W, T, I, LOSS, DX, DW, WS;
  memset(&I, 0, sizeof I);
  int fail = gbuf_alloc(&X, KLJIT_BF16, n * h) | gbuf_alloc(&W, KLJIT_BF16, v * h) |
             gbuf_alloc(&T, KLJIT_BF16, tn) | gbuf_alloc(&LOSS, KLJIT_FP32, 1) |
             gbuf_alloc(&DX, KLJIT_BF16, n * h) | gbuf_alloc(&DW, KLJIT_FP32, v * h) |
             gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 1);
  if (sparse) fail |= gbuf_alloc(&I, KLJIT_INT32, tn) | gbuf_upload(&I, ids, NULL);
  fail |= gbuf_upload(&X, x, NULL) | gbuf_upload(&W, w, NULL) | gbuf_upload(&T, t, NULL);
  fail |= gbuf_poison(&LOSS) | gbuf_poison(&DX) | gbuf_poison(&DW);
  TH_CHECK(!fail);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = n, a.input = X.ptr, a.weight = W.ptr, a.loss = LOSS.ptr, a.grad_input = DX.ptr;
  a.grad_weight = DW.ptr, a.workspace = WS.ptr, a.workspace_size = ws;
  if (sparse) a.teacher_ids = I.ptr, a.teacher_values = T.ptr;
  else a.teacher = T.ptr;
  const kljit_status st = kljit_fused(plan, NULL, &a);
  printf("%s defect %d: %s: %s\n", sparse ? "sparse" : "dense", defect, kljit_status_string(st),
         st ? kljit_last_error() : "");
  double loss = 0, *dx = malloc(sizeof(double) * n * h);
  fail = gbuf_download(&LOSS, &loss) | gbuf_download(&DX, dx);
  int ok = !fail;
  if (defect == 0) {
    ok = ok && st == KLJIT_SUCCESS && isfinite(loss);
  } else {
    char want[32];
    snprintf(want, sizeof want, "row %lld", (long long)bad_row);
    ok = ok && st == KLJIT_ERR_BAD_INPUT_DATA && strstr(kljit_last_error(), want) &&
         strstr(kljit_last_error(), what) && isnan(loss) && isnan(dx[0]) && isnan(dx[n * h - 1]);
  }
  gbuf *bufs[] = {&X, &W, &T, &I, &LOSS, &DX, &DW, &WS};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gbuf_free(bufs[i]);
  free(x), free(w), free(t), free(ids), free(dx);
  kljit_plan_destroy(plan);
  return ok ? TH_PASS : TH_FAIL;
}

static int checked_mode_reports_bad_teacher_data(void) {
  int worst = checked_run(1, 0, "");
  if (worst == TH_SKIP) return worst;
  worst = fold(worst, checked_run(1, 1, "outside [0, vocab)"));
  worst = fold(worst, checked_run(1, 2, "duplicate id"));
  worst = fold(worst, checked_run(1, 3, "NaN or infinite"));
  worst = fold(worst, checked_run(1, 4, "negative probability"));
  worst = fold(worst, checked_run(0, 0, ""));
  worst = fold(worst, checked_run(0, 3, "NaN or infinite"));
  return fold(worst, checked_run(0, 4, "negative probability"));
}

/* Unchecked, an id outside [0, V) is skipped, never a memory fault; the loss stays finite. */
static int unchecked_out_of_range_id_does_not_fault(void) {
  int rc = gpu_test_context(&the_ctx);
  if (rc != TH_PASS) return rc;
  const int64_t n = 8, h = 16, v = 300, k = 10;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = h, pb.vocab = v, pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = (int32_t)k;
  kljit_plan *plan = NULL;
  TH_OK(kljit_plan_create(the_ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  size_t ws = 0;
  TH_OK(kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, n, &ws));
  double x[8 * 16], w[300 * 16], t[80], ids[80];
  host_rng rng = {5};
  for (int i = 0; i < n * h; i++) x[i] = host_normal(&rng);
  for (int i = 0; i < v * h; i++) w[i] = 0.1 * host_normal(&rng);
  for (int i = 0; i < n * k; i++) t[i] = 0.05, ids[i] = (double)(i % k);
  ids[3] = 1e12, ids[15] = -4e9; /* far outside the vocabulary */
  gbuf X, W, T, I, LOSS, DX, DW, WS;
  int fail = gbuf_alloc(&X, KLJIT_BF16, n * h) | gbuf_alloc(&W, KLJIT_BF16, v * h) |
             gbuf_alloc(&T, KLJIT_BF16, n * k) | gbuf_alloc(&I, KLJIT_INT64, n * k) |
             gbuf_alloc(&LOSS, KLJIT_FP32, 1) | gbuf_alloc(&DX, KLJIT_BF16, n * h) |
             gbuf_alloc(&DW, KLJIT_FP32, v * h) | gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 1);
  fail |= gbuf_upload(&X, x, NULL) | gbuf_upload(&W, w, NULL) | gbuf_upload(&T, t, NULL) |
          gbuf_upload(&I, ids, NULL);
  TH_CHECK(!fail);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = n, a.input = X.ptr, a.weight = W.ptr, a.teacher_ids = I.ptr, a.teacher_values = T.ptr;
  a.loss = LOSS.ptr, a.grad_input = DX.ptr, a.grad_weight = DW.ptr;
  a.workspace = WS.ptr, a.workspace_size = ws;
  TH_OK(kljit_fused(plan, NULL, &a));
  double loss = NAN;
  TH_CHECK(gbuf_download(&LOSS, &loss) == 0);
  printf("loss with two out-of-range ids skipped: %g\n", loss);
  gbuf *bufs[] = {&X, &W, &T, &I, &LOSS, &DX, &DW, &WS};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gbuf_free(bufs[i]);
  kljit_plan_destroy(plan);
  TH_CHECK(isfinite(loss));
  return TH_PASS;
}

/* Issue 19 on the sparse teacher: hard-label CE mixing (both weights, CE alone, the divergence
 * alone at a weight, T^2 on some) and the student softcap (logits of std 30 under a cap of 30),
 * every tail and value form, both modes and reduction none; the labels (0..6) on the support
 * (K = V: every id is on it) and off it, zero-mass rows (RENORM: only the CE remains), about a
 * fifth of the rows ignored. */
static int ce_mixing_and_softcap_every_tail_and_mode(void) {
  static const double weights[4][2] = {{0.5, 0.5}, {1.0, 0.0}, {0.0, 0.3}, {0.2, 2.0}};
  int worst = TH_PASS;
  for (int tail = 0; tail < 3; tail++)
    for (int k = 0; k < 4 && worst != TH_SKIP; k++) {
      gcase c = sparse_base();
      c.tail = (kljit_tail)(KLJIT_TAIL_NONE + tail);
      c.values = k % 2 ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
      c.hard_weight = weights[(k + tail) % 4][0], c.soft_weight = weights[(k + tail) % 4][1];
      c.labels = 1, c.fused = k % 2 == 0, c.bias = k == 1;
      if (k == 3) c.red = KLJIT_REDUCTION_NONE;
      if (k >= 2) c.zstd = 30.0, c.softcap = 30.0;
      if (k == 1) c.T = 2.0, c.flags |= KLJIT_FLAG_SCALE_T_SQUARED;
      if (k == 2) c.k = (int)c.v, c.all_ids = 1; /* every label on the support */
      if (tail == 1 && k == 0) c.zero_mass_rows = 1;
      c.dt = k == 3 ? KLJIT_FP32 : tail == 2 ? KLJIT_FP16 : KLJIT_BF16;
      worst = fold(worst, gcase_check(&c));
    }
  /* the softcap alone, and at V = 151936 (split rows) with CE */
  gcase c = sparse_base();
  c.zstd = 30.0, c.softcap = 20.0, c.tail = KLJIT_TAIL_BUCKET;
  worst = fold(worst, gcase_check(&c));
  c.v = 151936, c.n = 9, c.h = 32, c.hard_weight = 0.5, c.soft_weight = 0.5, c.labels = 1;
  c.fused = 0;
  return fold(worst, gcase_check(&c));
}

/* The logits GEMM's statistics epilogue for the sparse teacher (sm_90): the plan (KLJIT_GEMM =
 * `gemm`) says the row statistics come from the logits GEMM (its description has `marker`) for
 * the forward KL with tail none and renorm (the student's (max, sum-exp) per row and column
 * tile, merged by pass 2's block; kl_sparse_stats not launched), and the loss, dX and dW match the
 * fp64 reference within the suite's bounds: both tails and value forms, bf16 and fp16, ragged
 * and long vocabularies (a tile past V), T != 1, ignored rows, logits of standard deviation 2 to
 * 12 over three chunks, K from 1 to 1000, fused and two-phase (whose backward computes none);
 * the bucket tail and the divergences (reverse KL, JSD, TVD) with the support's ids marked. E16
 * keeps the row kernels' pass for the bucket tail and stays right. E16 (the rows read the GEMM's
 * fp16 scores; the loss's cross term from the support the epilogue read) also: a bias, a logit
 * cap and a per-call T, in its scores, and CE mixing (a z-loss, T^2). Skips before sm_90. */
static int epilogue_cases(const char *gemm, const char *marker, int e16) {
  setenv("KLJIT_GEMM", gemm, 1);
  kljit_context *ctx;
  int worst = gpu_test_context(&ctx);
  if (worst == TH_PASS) {
    /* none, renorm: on; bucket: on under .stats (the support's ids marked), off under E16, which
     * says why */
    for (int tail = 1; tail <= 3; tail++) {
      kljit_problem pb = KLJIT_PROBLEM_INIT;
      pb.hidden = 64, pb.vocab = 32001, pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 100;
      pb.tail = (kljit_tail)tail;
      kljit_plan *plan;
      TH_OK(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
      const char *d = kljit_plan_describe(plan);
      const int on = strstr(d, marker) != NULL && strstr(d, "(no kl_sparse_stats)") != NULL;
      const int why = strstr(d, "tail none or renorm only under E16") != NULL;
      if (strstr(d, "(sm_90") == NULL) worst = TH_SKIP;
      else if (on != (tail < 3 || !e16) || why != (tail == 3 && e16)) {
        fprintf(stderr, "tail %d: the statistics epilogue is %s:\n%s", tail, on ? "on" : "off",
                d);
        worst = TH_FAIL;
      }
      kljit_plan_destroy(plan);
    }
  }
  static const int64_t vs[] = {1000, 32001, 128256, 50257};
  for (int k = 0; k < (e16 ? 20 : 17) && worst != TH_SKIP; k++) {
    gcase c = sparse_base();
    c.v = vs[k % 4], c.n = k % 4 == 2 ? 9 : 37, c.h = 64;
    c.tail = k % 2 ? KLJIT_TAIL_RENORM : KLJIT_TAIL_NONE;
    c.values = k % 3 == 1 ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
    c.dt = k % 3 == 2 ? KLJIT_FP16 : KLJIT_BF16;
    c.tdt = k % 4 == 3 ? KLJIT_FP32 : c.dt;
    c.idt = k % 2 ? KLJIT_INT32 : KLJIT_INT64;
    c.T = k % 4 == 1 ? 2.0 : k % 4 == 3 ? 0.5 : 1.0;
    c.labels = k == 7 ? 2 : 1;
    c.fused = k % 3 != 1;
    c.red = c.fused ? (kljit_reduction)(KLJIT_REDUCTION_SUM + k % 3) : KLJIT_REDUCTION_NONE;
    if (k == 4) c.k = 1;
    if (k == 5) c.k = 1000;
    if (k >= 8) { /* logits of std 2 to 12 over three chunks */
      setenv("KLJIT_CHUNK_ROWS", "256", 1);
      c.n = 700, c.v = 32001, c.zstd = k == 8 ? 2.0 : k == 9 ? 6.0 : 12.0;
      c.red = KLJIT_REDUCTION_BATCHMEAN;
    }
    if (k == 11) c.fused = 0, c.T = 0.5;
    if (k == 12) c.tail = KLJIT_TAIL_BUCKET; /* .stats: the ids marked; E16: the rows' pass 1 */
    if (k == 13) c.v = 128256, c.n = 600, c.zstd = 6.0, c.k = 100;
    /* .stats: the divergences over both tails (the support's sum-exp apart; renorm its own
     * (max, sum-exp) too): the reverse KL renormalized, the JSD over the bucket two-phase at
     * T = 0.5, the TVD renormalized at logit std 6 */
    if (!e16 && k == 14) c.divergence = KLJIT_DIVERGENCE_REVERSE_KL, c.tail = KLJIT_TAIL_RENORM;
    if (!e16 && k == 15) {
      c.divergence = KLJIT_DIVERGENCE_JSD, c.beta = 0.5, c.tail = KLJIT_TAIL_BUCKET;
      c.fused = 0, c.red = KLJIT_REDUCTION_NONE, c.T = 0.5;
    }
    if (!e16 && k == 16) c.divergence = KLJIT_DIVERGENCE_TVD, c.tail = KLJIT_TAIL_RENORM;
    if (!e16 && k == 16) c.zstd = 6.0;
    /* E16's scores: a bias, fused and two-phase; a logit cap of 30 (logits of std 30, as the
     * suite caps them); a per-call T */
    if (e16 && (k == 14 || k == 15)) c.bias = 1, c.fused = k == 14, c.red = KLJIT_REDUCTION_BATCHMEAN;
    if (e16 && k == 16) c.zstd = 30.0, c.softcap = 30.0;
    if (e16 && k == 17) c.tmode = KLJIT_TEMPERATURE_RUNTIME, c.T = 0.7, c.fused = 0;
    /* CE mixing (the records' lse(z') and z'_y): fused at T = 2 with T^2 and a z-loss over
     * three chunks; two-phase with a bias, some labels ignored */
    if (k >= 18) {
      c.hard_weight = 0.5, c.soft_weight = 0.5, c.labels = 1, c.fused = k == 18;
      c.red = c.fused ? KLJIT_REDUCTION_BATCHMEAN : KLJIT_REDUCTION_NONE;
    }
    if (k == 18) {
      setenv("KLJIT_CHUNK_ROWS", "256", 1);
      c.n = 700, c.v = 32001, c.T = 2.0, c.flags |= KLJIT_FLAG_SCALE_T_SQUARED, c.z_loss = 1e-4;
    }
    if (k == 19) c.bias = 1, c.zstd = 6.0;
    worst = fold(worst, gcase_check(&c));
    unsetenv("KLJIT_CHUNK_ROWS");
  }
  unsetenv("KLJIT_GEMM");
  return worst;
}
static int statistics_in_the_logits_gemm_epilogue_match_reference(void) {
  return epilogue_cases("all:jit,logits:jit.stats", "in the logits GEMM's epilogue", 0);
}
static int e16_in_the_logits_gemm_epilogue_matches_reference(void) {
  return epilogue_cases("logits:jit.e16", "the tile as fp16 scores (E16)", 1);
}

static const th_case cases[] = {
    {"ce_mixing_and_softcap_every_tail_and_mode", ce_mixing_and_softcap_every_tail_and_mode},
    {"every_value_form_dtype_reduction_and_mode_tail_none",
     every_value_form_dtype_reduction_and_mode_tail_none},
    {"every_value_form_dtype_reduction_and_mode_tail_renorm",
     every_value_form_dtype_reduction_and_mode_tail_renorm},
    {"every_value_form_dtype_reduction_and_mode_tail_bucket",
     every_value_form_dtype_reduction_and_mode_tail_bucket},
    {"smallest_and_largest_k", smallest_and_largest_k},
    {"full_support_equals_dense", full_support_equals_dense},
    {"zero_mass_and_ignored_rows", zero_mass_and_ignored_rows},
    {"vocab_sizes_and_ragged_chunks", vocab_sizes_and_ragged_chunks},
    {"native_logits_single_row_and_large_logits", native_logits_single_row_and_large_logits},
    {"checked_mode_reports_bad_teacher_data", checked_mode_reports_bad_teacher_data},
    {"unchecked_out_of_range_id_does_not_fault", unchecked_out_of_range_id_does_not_fault},
    {"statistics_in_the_logits_gemm_epilogue_match_reference",
     statistics_in_the_logits_gemm_epilogue_match_reference},
    {"e16_in_the_logits_gemm_epilogue_matches_reference",
     e16_in_the_logits_gemm_epilogue_matches_reference},
};
TH_MAIN(cases)
