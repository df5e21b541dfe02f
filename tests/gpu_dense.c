/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_dense.c — the dense-teacher loss on the GPU against the fp64 CPU reference.
 *
 * Every case draws fresh random inputs (never zeros), poisons every output, runs kljit and
 * compares with the reference; gpu_case.h says how and with which tolerances. Skips (77)
 * without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_case.h"
#include "gpu_util.h"
#include "harness.h"

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
            gcase c = gcase_base();
            c.form = forms[f], c.dt = dts[d], c.tdt = dts[(d + tm) % 3];
            c.tmode = tm == 2 ? KLJIT_TEMPERATURE_RUNTIME : KLJIT_TEMPERATURE_CONSTANT;
            c.T = tm == 0 ? 1.0 : tm == 1 ? 2.0 : 0.5;
            c.TT = tm == 1 ? 1.5 : 0.0;
            c.red = reds[r], c.fused = fused, c.bias = k % 2;
            c.flags = r == 1 ? KLJIT_FLAG_SCALE_T_SQUARED : 0;
            c.gw = k % 3 == 0 ? c.dt : KLJIT_FP32;
            const int rc = gcase_check(&c);
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
      gcase c = gcase_base();
      c.v = vs[i], c.n = 9, c.h = 32, c.fused = fused, c.bias = fused;
      c.tdt = i % 2 ? KLJIT_FP32 : KLJIT_BF16;
      const int rc = gcase_check(&c);
      if (rc == TH_SKIP) return rc;
      if (rc != TH_PASS) worst = TH_FAIL;
    }
  }
  return worst;
}

static int rows_not_a_multiple_of_the_chunk(void) {
  /* the chunk is at least 256 rows: 700 rows are 2 full chunks and a ragged one for V=1000 */
  gcase c = gcase_base();
  c.n = 700, c.v = 50257, c.h = 32;
  setenv("KLJIT_CHUNK_ROWS", "256", 1);
  int rc = gcase_check(&c);
  if (rc == TH_PASS) {
    c.fused = 0, c.red = KLJIT_REDUCTION_NONE;
    rc = gcase_check(&c);
  }
  unsetenv("KLJIT_CHUNK_ROWS");
  return rc;
}

static int a_single_row(void) {
  gcase c = gcase_base();
  c.n = 1, c.labels = 0;
  int rc = gcase_check(&c);
  if (rc == TH_PASS) {
    c.fused = 0;
    rc = gcase_check(&c);
  }
  return rc;
}

static int all_rows_ignored_gives_zero_loss_and_gradients(void) {
  gcase c = gcase_base();
  c.labels = 2, c.bias = 1;
  int rc = gcase_check(&c);
  if (rc == TH_PASS) {
    c.fused = 0, c.red = KLJIT_REDUCTION_MEAN;
    rc = gcase_check(&c);
  }
  return rc;
}

static int large_logits_and_temperatures(void) {
  const double ts[] = {0.5, 2.0};
  int worst = TH_PASS;
  for (int i = 0; i < 2; i++)
    for (int f = 0; f < 3; f++) {
      gcase c = gcase_base();
      c.zstd = 30.0 * ts[i]; /* |s| around 30 after scaling */
      c.T = ts[i];
      c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + f);
      c.dt = KLJIT_FP32;
      const int rc = gcase_check(&c);
      if (rc == TH_SKIP) return rc;
      if (rc != TH_PASS) worst = TH_FAIL;
    }
  return worst;
}

/* The opt-in sm_90 cluster row kernels (KLJIT_ROW_KERNEL=cluster; two-pass elsewhere). */
/* The plan of problem (V, dtype) on the test context uses the cluster row kernels: the
 * description's tuning line says cluster=<C> with C > 0. */
static int plan_uses_cluster(int64_t v, kljit_dtype dt) {
  kljit_context *ctx;
  const int g = gpu_test_context(&ctx);
  if (g) return g;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 32, pb.vocab = v;
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = dt;
  kljit_plan *plan;
  TH_OK(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  const char *d = kljit_plan_describe(plan);
  const char *c = strstr(d, " cluster=");
  const int sm90 = strstr(d, "(sm_9") != NULL || strstr(d, "(sm_1") != NULL;
  const int on = c && atoi(c + 9) > 0;
  if (!on)
    fprintf(stderr, "%s plan for V=%lld: not the cluster variant\n%s", sm90 ? "an sm_90" : "a",
            (long long)v, d);
  kljit_plan_destroy(plan);
  return !sm90 ? TH_SKIP : on ? TH_PASS : TH_FAIL;
}

static int cluster_variant_matches_reference(void) {
  setenv("KLJIT_ROW_KERNEL", "cluster", 1);
  const int64_t vs[] = {1000, 32001, 128256};
  int worst = TH_PASS;
  /* the cases below check numbers, not which kernels ran: first make sure they are the cluster
   * ones (sm_90 and newer; elsewhere there is nothing to test) */
  for (int i = 0; i < 3 && worst == TH_PASS; i++) worst = plan_uses_cluster(vs[i], KLJIT_BF16);
  if (worst != TH_PASS) {
    unsetenv("KLJIT_ROW_KERNEL");
    return worst;
  }
  for (int i = 0; i < 3 && worst != TH_SKIP; i++)
    for (int k = 0; k < 4; k++) {
      gcase c = gcase_base();
      c.v = vs[i], c.n = i == 0 ? 37 : 9, c.h = 32;
      c.dt = k == 3 ? KLJIT_FP32 : k == 2 ? KLJIT_FP16 : KLJIT_BF16;
      c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
      c.fused = k % 2, c.bias = k == 1, c.red = k == 0 ? KLJIT_REDUCTION_NONE : c.red;
      c.fused = c.red == KLJIT_REDUCTION_NONE ? 0 : c.fused;
      const int rc = gcase_check(&c);
      if (rc == TH_SKIP) worst = TH_SKIP;
      else if (rc != TH_PASS) worst = TH_FAIL;
    }
  unsetenv("KLJIT_ROW_KERNEL");
  return worst;
}

static int native_logits_and_accumulated_grad_weight(void) {
  gcase c = gcase_base();
  c.flags = KLJIT_FLAG_NATIVE_LOGITS;
  int rc = gcase_check(&c);
  if (rc != TH_PASS) return rc;
  c = gcase_base();
  c.accumulate = 1, c.bias = 1, c.gw = KLJIT_BF16;
  return gcase_check(&c);
}

/* KLJIT_FLAG_PRECISE_ACCUMULATION: where the plan's logits GEMM is generated (sm_90, 16-bit
 * inputs) it is the promoted variant and the description says so; elsewhere the description says
 * the flag is not applied; either way the results match the reference: both modes, the three
 * dense forms, bf16 and fp16, T 0.5 and 1, large logits, and fp32 inputs (cuBLASLt's logits). */
static int the_precise_flag_promotes_the_logits_gemm_and_matches_reference(void) {
  kljit_context *ctx;
  const int g = gpu_test_context(&ctx);
  if (g) return g;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 256, pb.vocab = 32001;
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_BF16;
  kljit_plan *plain, *precise;
  TH_OK(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plain));
  pb.flags = KLJIT_FLAG_PRECISE_ACCUMULATION;
  TH_OK(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &precise));
  const int gen = strstr(kljit_plan_describe(plain), "GEMM logits: generated") != NULL;
  const char *d = kljit_plan_describe(precise);
  const int says = strstr(d, gen ? "KLJIT_FLAG_PRECISE_ACCUMULATION): the logits GEMM adds"
                                 : "KLJIT_FLAG_PRECISE_ACCUMULATION): not applied") != NULL;
  const int named = !gen || strstr(d, " pr") != NULL; /* d is the plan's: read before it goes */
  if (!says || !named) fprintf(stderr, "the precise plan:\n%s", d);
  kljit_plan_destroy(plain), kljit_plan_destroy(precise);
  TH_CHECK(says && named);
  int worst = TH_PASS;
  for (int k = 0; k < 13; k++) {
    gcase c = gcase_base();
    c.flags = KLJIT_FLAG_PRECISE_ACCUMULATION;
    c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
    c.dt = k == 12 ? KLJIT_FP32 : k % 2 ? KLJIT_FP16 : KLJIT_BF16;
    c.T = k % 4 < 2 ? 1.0 : 0.5, c.fused = k % 5 != 0;
    c.zstd = k >= 8 ? 8.0 : c.zstd, c.v = k >= 8 ? 128256 : c.v;
    const int rc = gcase_check(&c);
    if (rc == TH_SKIP) return rc;
    if (rc != TH_PASS) worst = TH_FAIL;
  }
  return worst;
}

/* The dtypes and reductions issue 19's sweeps rotate through. */
static const kljit_dtype DTS[] = {KLJIT_FP32, KLJIT_FP16, KLJIT_BF16};
static const kljit_reduction REDS[] = {KLJIT_REDUCTION_SUM, KLJIT_REDUCTION_BATCHMEAN,
                                       KLJIT_REDUCTION_MEAN, KLJIT_REDUCTION_NONE};

/* One case of a sweep: returns 1 when it skipped (no GPU: the sweep stops), and marks a
 * failure in *worst, the sweep going on so that every failing case prints its line. */
static int sweep_case(const gcase *c, int *worst) {
  const int rc = gcase_check(c);
  if (rc != TH_PASS && rc != TH_SKIP) *worst = TH_FAIL;
  return rc == TH_SKIP;
}

/* sweep_case with the cluster knob (KLJIT_ROW_KERNEL=cluster) on when `cluster`. */
static int sweep_case_knob(const gcase *c, int cluster, int *worst) {
  if (cluster) setenv("KLJIT_ROW_KERNEL", "cluster", 1);
  const int skip = sweep_case(c, worst);
  unsetenv("KLJIT_ROW_KERNEL");
  return skip;
}

/* Case k of a dtype (d) x teacher form (f) x mode sweep, the rest rotating with k: the teacher
 * dtype, bias, reduction (NONE in two-phase only), temperature mode and T, T^2. */
static gcase rotated_case(int k, int d, int f, int fused) {
  gcase c = gcase_base();
  c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + f);
  c.dt = DTS[d % 3], c.tdt = DTS[(d + f + 1) % 3];
  c.fused = fused, c.bias = k % 2;
  c.red = REDS[k % 4];
  if (fused && c.red == KLJIT_REDUCTION_NONE) c.red = KLJIT_REDUCTION_BATCHMEAN;
  c.tmode = k % 3 == 2 ? KLJIT_TEMPERATURE_RUNTIME : KLJIT_TEMPERATURE_CONSTANT;
  c.T = k % 3 == 0 ? 1.0 : k % 3 == 1 ? 2.0 : 0.5;
  c.flags = k % 4 == 1 ? KLJIT_FLAG_SCALE_T_SQUARED : 0;
  return c;
}

/* Every dtype x dense teacher form x mode (18 cases), `extra` setting case k's features. */
static int dense_sweep(void (*extra)(gcase *c, int k)) {
  int worst = TH_PASS, k = 0;
  for (int d = 0; d < 3; d++)
    for (int f = 0; f < 3; f++)
      for (int fused = 0; fused < 2; fused++, k++) {
        gcase c = rotated_case(k, d, f, fused);
        extra(&c, k);
        if (sweep_case(&c, &worst)) return TH_SKIP;
      }
  return worst;
}

/* Softcaps (student, and teacher logits) with |z| up to ~100 against caps of 30 and 50, and
 * padded teachers: a row stride past V (152064 for 151936 as Qwen2.5 pads; an odd one that
 * rules out vector loads), whose extra columns hold values that would dominate if read. */
static void caps_and_padding(gcase *c, int k) {
  const int caps = k % 3; /* 0: student cap, 1: both caps, 2: padding alone */
  if (caps < 2) c->zstd = 30.0, c->softcap = 30.0;
  if (caps == 1 && c->form == KLJIT_TEACHER_DENSE_LOGITS) c->teacher_softcap = 50.0;
  c->tld = k % 2 ? c->v + 1 : caps == 2 ? c->v + 128 : 0;
  if (k == 5) c->v = 151936, c->tld = 152064, c->n = 9, c->h = 32;
}

/* Issue 19: softcaps and padded teachers in every dtype, teacher form and mode. */
static int softcaps_and_padded_teachers_in_every_dtype_form_and_mode(void) {
  return dense_sweep(caps_and_padding);
}

/* Hard-label CE mixed with the forward KL (h CE + s KL, CE at temperature 1 from the same
 * pass; about a fifth of the rows ignored): both weights, CE alone, the divergence alone at a
 * weight; with T^2, which scales the soft term only; softcaps on some. */
static void ce_weights(gcase *c, int k) {
  static const double weights[4][2] = {{0.5, 0.5}, {1.0, 0.0}, {0.0, 0.3}, {0.2, 2.0}};
  c->hard_weight = weights[k % 4][0], c->soft_weight = weights[k % 4][1];
  if (k % 2) c->flags |= KLJIT_FLAG_SCALE_T_SQUARED;
  if (k % 5 == 4) c->zstd = 30.0, c->softcap = 30.0;
  if (k == 7) c->v = 128256, c->n = 9, c->h = 32;
}

/* Issue 19: hard-label CE mixing in every dtype, teacher form and mode. */
static int hard_label_ce_mixing_in_every_dtype_form_and_mode(void) {
  return dense_sweep(ce_weights);
}

/* Issue 19: the reverse KL and the JSD (beta 0.5, 0.1, and 1, which runs the reverse KL's
 * kernels) x teacher form x mode, the dtype rotating so that each divergence meets every dtype;
 * on top, rotating: CE mixing, softcaps, a padded teacher, T != 1 with T^2, every reduction.
 * Also the cluster knob on, where sm_90 runs them in the cluster row kernels. */
static int every_divergence_teacher_form_mode_and_dtype(void) {
  const struct {
    kljit_divergence div;
    double beta;
  } divs[] = {{KLJIT_DIVERGENCE_REVERSE_KL, 0.0}, {KLJIT_DIVERGENCE_JSD, 0.5},
              {KLJIT_DIVERGENCE_JSD, 0.1}, {KLJIT_DIVERGENCE_JSD, 1.0}};
  int worst = TH_PASS, k = 0;
  for (int d = 0; d < 4; d++)
    for (int f = 0; f < 3; f++)
      for (int fused = 0; fused < 2; fused++, k++) {
        gcase c = rotated_case(k, k + d, f, fused);
        c.divergence = divs[d].div, c.beta = divs[d].beta;
        if (k % 5 == 1) c.flags |= KLJIT_FLAG_SCALE_T_SQUARED;
        c.TT = k % 4 == 3 ? 1.5 : 0.0;
        if (k % 7 == 3) c.flags |= KLJIT_FLAG_NATIVE_LOGITS;
        if (k % 4 == 1) c.hard_weight = 0.5, c.soft_weight = 0.5;
        if (k % 6 == 5) c.zstd = 30.0, c.softcap = 30.0;
        if (k % 5 == 2) c.tld = c.v + 24;
        if (k == 9) c.v = 128256, c.n = 9, c.h = 32;
        if (sweep_case_knob(&c, k % 8 == 6, &worst)) return TH_SKIP;
      }
  return worst;
}

/* Issue 19: the online teacher (its head run chunk by chunk, the logits never materialized)
 * under the forward KL, the reverse KL and the JSD(0.5), in each mode and dtype (rotating so
 * that each divergence meets every dtype), its own temperature and softcap, a padded head
 * (rows past V never read), its bias (every third case), CE mixing and the cluster knob
 * rotating, one case at V = 128256. */
static int online_teacher_every_divergence_mode_and_dtype(void) {
  const kljit_divergence divs[3] = {KLJIT_DIVERGENCE_FORWARD_KL, KLJIT_DIVERGENCE_REVERSE_KL,
                                    KLJIT_DIVERGENCE_JSD};
  int worst = TH_PASS, k = 0;
  for (int d = 0; d < 3; d++)
    for (int dt = 0; dt < 3; dt++)
      for (int fused = 0; fused < 2; fused++, k++) {
        gcase c = rotated_case(k, dt, 2, fused);
        c.form = KLJIT_TEACHER_DENSE_HIDDEN;
        c.ht = k % 2 ? 48 : 64;
        c.divergence = divs[d], c.beta = divs[d] == KLJIT_DIVERGENCE_JSD ? 0.5 : 0.0;
        c.TT = k % 3 == 1 ? 1.5 : 0.0;
        if (k % 4 == 2) c.zstd = 30.0, c.teacher_softcap = 30.0, c.softcap = 30.0;
        if (k % 3 == 0) c.tld = c.v + 64;
        if (k % 5 == 3) c.hard_weight = 0.5, c.soft_weight = 0.5;
        c.teacher_bias = k % 3 == 2;
        if (k == 7) c.v = 128256, c.n = 9, c.h = 32;
        if (sweep_case_knob(&c, k % 4 == 1, &worst)) return TH_SKIP;
      }
  return worst;
}

/* The reverse KL and the JSD in the sm_90 cluster row kernels, which sum the row total S over
 * the cluster's blocks from their registers (fused, and forward saving S for backward): every
 * dtype, the dense forms and the online teacher, CE mixing and a softcap on top, V = 32001 and
 * 128256 (sixteen-block clusters). Skips before sm_90. */
static int every_divergence_in_the_cluster_variant(void) {
  setenv("KLJIT_ROW_KERNEL", "cluster", 1);
  int worst = plan_uses_cluster(128256, KLJIT_BF16);
  for (int k = 0; k < 8 && worst == TH_PASS; k++) {
    gcase c = gcase_base();
    c.v = k < 4 ? 32001 : 128256, c.n = k < 4 ? 19 : 9, c.h = 32;
    c.dt = k % 3 == 0 ? KLJIT_BF16 : k % 3 == 1 ? KLJIT_FP32 : KLJIT_FP16;
    c.form = k % 4 == 3 ? KLJIT_TEACHER_DENSE_HIDDEN
                        : (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
    if (c.form == KLJIT_TEACHER_DENSE_HIDDEN) c.ht = 48, c.teacher_bias = k == 7;
    c.divergence = k % 2 ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_JSD;
    c.beta = k % 2 ? 0.0 : k == 2 ? 0.1 : 0.5;
    c.fused = k % 4 < 2;
    if (!c.fused && k % 3 == 0) c.red = KLJIT_REDUCTION_NONE;
    if (k == 2 || k == 5) c.hard_weight = 0.5, c.soft_weight = 0.5;
    if (k == 4) c.zstd = 30.0, c.softcap = 30.0;
    c.T = k == 6 ? 2.0 : 1.0;
    const int rc = gcase_check(&c);
    if (rc != TH_PASS) worst = rc == TH_SKIP ? TH_SKIP : TH_FAIL;
  }
  unsetenv("KLJIT_ROW_KERNEL");
  return worst;
}

/* dX as GEMMs over slices of V summed in fp32 (16-bit inputs, V = 128256: KLJIT_DX_SPLIT = 4,
 * the planner's number, and 3, whose last slice is shorter, obeyed for these short chunks;
 * 1, one GEMM): every dtype of G, both modes, with a bias and all rows ignored (the slices'
 * sum is zero, not stale). */
static int dx_as_slices_summed_in_fp32(void) {
  static const char *const splits[] = {"4", "3", "1"};
  int worst = TH_PASS;
  for (int k = 0; k < 6 && worst == TH_PASS; k++) {
    setenv("KLJIT_DX_SPLIT", splits[k % 3], 1);
    gcase c = gcase_base();
    c.v = 128256, c.n = 9 + 4 * k, c.h = 40;
    c.dt = k % 2 ? KLJIT_FP16 : KLJIT_BF16;
    c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
    c.fused = k < 3, c.bias = k == 1, c.labels = k == 5 ? 2 : 1;
    c.divergence = k == 4 ? KLJIT_DIVERGENCE_JSD : KLJIT_DIVERGENCE_FORWARD_KL;
    c.beta = k == 4 ? 0.5 : 0.0;
    const int rc = gcase_check(&c);
    if (rc != TH_PASS) worst = rc == TH_SKIP ? TH_SKIP : TH_FAIL;
    unsetenv("KLJIT_DX_SPLIT");
  }
  return worst;
}

/* The same features, and CE mixing, in the sm_90 cluster row kernels (skips before sm_90). */
static int softcaps_padded_teachers_and_ce_in_the_cluster_variant(void) {
  setenv("KLJIT_ROW_KERNEL", "cluster", 1);
  int worst = plan_uses_cluster(32001, KLJIT_BF16);
  for (int k = 0; k < 4 && worst == TH_PASS; k++) {
    gcase c = gcase_base();
    c.v = 32001, c.n = 9, c.h = 32;
    c.form = k < 2 ? KLJIT_TEACHER_DENSE_LOGITS : KLJIT_TEACHER_DENSE_PROBS;
    c.zstd = 30.0, c.softcap = 30.0;
    c.teacher_softcap = k < 2 ? 50.0 : 0.0;
    c.tld = k % 2 ? 32064 : 32002;
    c.hard_weight = k < 2 ? 0.0 : 0.5, c.soft_weight = k == 3 ? 0.5 : 1.0;
    c.T = k == 2 ? 2.0 : 1.0;
    c.fused = k % 2;
    if (!c.fused) c.red = KLJIT_REDUCTION_NONE;
    const int rc = gcase_check(&c);
    if (rc != TH_PASS) worst = rc == TH_SKIP ? TH_SKIP : TH_FAIL;
  }
  unsetenv("KLJIT_ROW_KERNEL");
  return worst;
}

/* ---- issue 29: TVD, the skew KLs, row weights, the CE's extras, the optional outputs ---- */

/* A divergence with its parameter. */
typedef struct div29 {
  kljit_divergence div;
  double alpha;
} div29;
static const div29 DIV29[5] = {{KLJIT_DIVERGENCE_TVD, 0.0},
                               {KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.1},
                               {KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.1},
                               {KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.6},
                               {KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.7}};

/* TVD and the skew KLs (alpha 0.1 and a larger one) x teacher form x mode, the dtype rotating
 * so that each divergence meets every dtype; odd V (999, and 50257 on one case, 128256 on
 * another), every reduction, T 1, 2 and 0.5 (runtime on some), about a fifth of the rows
 * ignored; rotating on top: CE mixing, T^2, the teacher's own temperature, native logits (the
 * skew KLs), a softcap, a padded teacher, the optional outputs, and the cluster knob (sm_90
 * plans them in the cluster rows where the row fits). */
static int tvd_and_skew_kls_in_every_dtype_form_and_mode(void) {
  int worst = TH_PASS, k = 0;
  for (int d = 0; d < 5; d++)
    for (int f = 0; f < 3; f++)
      for (int fused = 0; fused < 2; fused++, k++) {
        gcase c = rotated_case(k, k + d, f, fused);
        c.divergence = DIV29[d].div, c.skew_alpha = DIV29[d].alpha;
        c.v = k == 11 ? 50257 : k == 20 ? 128256 : 999;
        if (c.v != 999) c.n = 9, c.h = 32;
        if (k % 5 == 1) c.flags |= KLJIT_FLAG_SCALE_T_SQUARED;
        c.TT = k % 4 == 3 ? 1.5 : 0.0;
        /* not under TVD: logits rounded to 16 bits move log q by up to 2^-8 |z|, so the kernel
         * and the reference take opposite sides of every column within that of a tie */
        if (k % 7 == 3 && d) c.flags |= KLJIT_FLAG_NATIVE_LOGITS;
        if (k % 4 == 1) c.hard_weight = 0.5, c.soft_weight = 0.5;
        if (k % 6 == 5) c.zstd = 30.0, c.softcap = 30.0;
        if (k % 5 == 2) c.tld = c.v + 24;
        c.outputs = k % 3 == 0;
        if (sweep_case_knob(&c, k % 8 == 6, &worst)) return TH_SKIP;
      }
  return worst;
}

/* The same divergences at realistic logit scales: student logits of standard deviation 2 and
 * 12 (peaked rows, where q >> p and g nearly equals S), every dtype, both modes. */
static int tvd_and_skew_kls_at_logit_scales_2_and_12(void) {
  int worst = TH_PASS, k = 0;
  for (int d = 0; d < 5; d++)
    for (int z = 0; z < 2; z++, k++) {
      gcase c = gcase_base();
      c.divergence = DIV29[d].div, c.skew_alpha = DIV29[d].alpha;
      c.zstd = z ? 12.0 : 2.0;
      c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
      c.dt = DTS[k % 3], c.tdt = DTS[(k + 1) % 3];
      c.v = 32001, c.n = 19, c.h = 48;
      c.fused = k % 2, c.T = k % 4 == 1 ? 0.5 : 1.0;
      if (sweep_case(&c, &worst)) return TH_SKIP;
    }
  return worst;
}

/* The online teacher under TVD (16-bit inputs: its logits come from a GEMM, so the test cannot
 * move its ties, whose rare flips the 16-bit tolerance covers) and the skew KLs (every dtype),
 * its bias and temperature rotating. */
static int online_teacher_tvd_and_skew_kls(void) {
  int worst = TH_PASS, k = 0;
  for (int d = 0; d < 5; d++)
    for (int fused = 0; fused < 2; fused++, k++) {
      gcase c = rotated_case(k, d == 0 ? 1 + k % 2 : k, 2, fused);
      c.form = KLJIT_TEACHER_DENSE_HIDDEN, c.ht = k % 2 ? 48 : 64;
      c.divergence = DIV29[d].div, c.skew_alpha = DIV29[d].alpha;
      c.TT = k % 3 == 1 ? 1.5 : 0.0;
      c.teacher_bias = k % 3 == 2;
      c.v = 1001;
      if (sweep_case(&c, &worst)) return TH_SKIP;
    }
  return worst;
}

/* Row weights (every 7th row 0, the rest in [0, 2]) with the per-row loss and the loss's parts
 * asked for, under every divergence, teacher form and mode, the dtype rotating; CE mixing on
 * most cases (a hard part to report), CE alone and the divergence alone on some; every
 * reduction, all rows ignored on one case (zeros everywhere), the cluster knob on some. */
static int row_weights_and_the_outputs_in_every_dtype_form_and_mode(void) {
  static const div29 divs[6] = {
      {KLJIT_DIVERGENCE_FORWARD_KL, 0.0}, {KLJIT_DIVERGENCE_REVERSE_KL, 0.0},
      {KLJIT_DIVERGENCE_JSD, 0.0},        {KLJIT_DIVERGENCE_TVD, 0.0},
      {KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.3}, {KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.3}};
  int worst = TH_PASS, k = 0;
  for (int d = 0; d < 6; d++)
    for (int f = 0; f < 3; f++)
      for (int fused = 0; fused < 2; fused++, k++) {
        gcase c = rotated_case(k, k + d, f, fused);
        c.divergence = divs[d].div, c.skew_alpha = divs[d].alpha;
        c.beta = divs[d].div == KLJIT_DIVERGENCE_JSD ? 0.5 : 0.0;
        c.v = 1001, c.row_weights = 1, c.outputs = 1;
        c.hard_weight = k % 5 == 4 ? 0.0 : 0.6, c.soft_weight = k % 5 == 2 ? 0.0 : 0.8;
        if (k == 13) c.labels = 2;
        if (k == 22) c.v = 128256, c.n = 9, c.h = 32;
        if (sweep_case_knob(&c, k % 8 == 5, &worst)) return TH_SKIP;
      }
  return worst;
}

/* Label smoothing and the z-loss on the CE, alone and together, mixed with the divergences of
 * each kind, every dtype, form and mode, the outputs asked for (the hard part carries them);
 * with a softcap and T^2 on some, one case at V = 128256, the cluster knob on some. */
static int label_smoothing_and_z_loss_in_every_dtype_form_and_mode(void) {
  static const double extras[4][2] = {{0.1, 0.0}, {0.0, 1e-3}, {0.2, 1e-2}, {1.0, 1e-4}};
  static const kljit_divergence divs[3] = {KLJIT_DIVERGENCE_FORWARD_KL, KLJIT_DIVERGENCE_TVD,
                                           KLJIT_DIVERGENCE_SKEW_REVERSE_KL};
  int worst = TH_PASS, k = 0;
  for (int d = 0; d < 3; d++)
    for (int f = 0; f < 3; f++)
      for (int fused = 0; fused < 2; fused++, k++) {
        gcase c = rotated_case(k, k + d, f, fused);
        c.divergence = divs[d], c.skew_alpha = d == 2 ? 0.2 : 0.0;
        c.label_smoothing = extras[k % 4][0], c.z_loss = extras[k % 4][1];
        c.hard_weight = 0.7, c.soft_weight = k % 6 == 1 ? 0.0 : 0.5;
        c.v = 999, c.outputs = 1;
        if (k % 5 == 3) c.zstd = 30.0, c.softcap = 30.0;
        if (k % 2) c.flags |= KLJIT_FLAG_SCALE_T_SQUARED;
        if (k == 7) c.v = 128256, c.n = 9, c.h = 32;
        if (sweep_case_knob(&c, k % 6 == 4, &worst)) return TH_SKIP;
      }
  return worst;
}

/* TVD and the skew KLs, row weights, the CE's extras and the outputs in the sm_90 cluster rows
 * (S summed over the cluster from its registers): every dtype, V = 32001 and 128256 (sixteen-
 * block clusters), both modes. Skips before sm_90. */
static int tvd_skew_kls_and_row_weights_in_the_cluster_variant(void) {
  setenv("KLJIT_ROW_KERNEL", "cluster", 1);
  int worst = plan_uses_cluster(128256, KLJIT_BF16);
  for (int k = 0; k < 8 && worst == TH_PASS; k++) {
    gcase c = gcase_base();
    c.v = k < 4 ? 32001 : 128256, c.n = k < 4 ? 19 : 9, c.h = 32;
    c.dt = DTS[k % 3];
    c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
    c.divergence = DIV29[k % 5].div, c.skew_alpha = DIV29[k % 5].alpha;
    c.fused = k % 4 < 2;
    if (!c.fused && k % 3 == 0) c.red = KLJIT_REDUCTION_NONE;
    c.row_weights = k % 2, c.outputs = 1;
    if (k % 3 == 1) c.hard_weight = 0.5, c.soft_weight = 0.5, c.label_smoothing = 0.1;
    if (k == 4) c.z_loss = 1e-3;
    c.T = k == 6 ? 2.0 : 1.0;
    const int rc = gcase_check(&c);
    if (rc != TH_PASS) worst = rc == TH_SKIP ? TH_SKIP : TH_FAIL;
  }
  unsetenv("KLJIT_ROW_KERNEL");
  return worst;
}

/* Checked mode reports a kept row's negative, NaN or infinite weight (KLJIT_ERR_BAD_INPUT_DATA
 * naming row_weights and the row) before writing anything, and ignores an ignored row's. */
static int checked_mode_reports_a_bad_row_weight(void) {
  kljit_context *ctx;
  const int g = gpu_test_context(&ctx);
  if (g) return g;
  enum { N29 = 5, H29 = 16, V29 = 101 };
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = H29, pb.vocab = V29;
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_FP32;
  pb.divergence = KLJIT_DIVERGENCE_TVD;
  pb.flags = KLJIT_FLAG_ROW_WEIGHTS | KLJIT_FLAG_CHECK_INPUTS;
  kljit_plan *plan;
  TH_OK(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  size_t ws = 0;
  TH_OK(kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, N29, &ws));
  double x[N29 * H29], w[V29 * H29], t[N29 * V29], lab[N29], rw[N29];
  host_rng rng = {29};
  for (int i = 0; i < N29 * H29; i++) x[i] = host_normal(&rng);
  for (int i = 0; i < V29 * H29; i++) w[i] = 0.3 * host_normal(&rng);
  for (int i = 0; i < N29 * V29; i++) t[i] = 1.0 / V29;
  for (int i = 0; i < N29; i++) lab[i] = i == 1 ? -100 : i, rw[i] = 1.0;
  gbuf X, W, T, L, RW, LOSS, DX, DW, WS;
  int fail = gbuf_alloc(&X, KLJIT_FP32, N29 * H29) | gbuf_upload(&X, x, NULL) |
             gbuf_alloc(&W, KLJIT_FP32, V29 * H29) | gbuf_upload(&W, w, NULL) |
             gbuf_alloc(&T, KLJIT_FP32, N29 * V29) | gbuf_upload(&T, t, NULL) |
             gbuf_alloc(&L, KLJIT_INT64, N29) | gbuf_upload(&L, lab, NULL) |
             gbuf_alloc(&RW, KLJIT_FP32, N29) | gbuf_alloc(&LOSS, KLJIT_FP32, 1) |
             gbuf_alloc(&DX, KLJIT_FP32, N29 * H29) | gbuf_alloc(&DW, KLJIT_FP32, V29 * H29) |
             gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 1);
  TH_CHECK(!fail);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = N29, a.input = X.ptr, a.weight = W.ptr, a.teacher = T.ptr, a.labels = L.ptr;
  a.row_weights = RW.ptr, a.loss = LOSS.ptr, a.grad_input = DX.ptr, a.grad_weight = DW.ptr;
  a.workspace = WS.ptr, a.workspace_size = ws;
  const double bad[3] = {-0.5, NAN, INFINITY};
  int r = TH_PASS;
  for (int b = 0; b < 4 && r == TH_PASS; b++) {
    /* b < 3: row 3 holds the bad weight (row 1, ignored, holds one too); b = 3: row 1 only */
    for (int i = 0; i < N29; i++) rw[i] = i == 1 ? NAN : i == 3 && b < 3 ? bad[b] : 0.5;
    double got = 0;
    if (gbuf_upload(&RW, rw, NULL) || gbuf_poison(&LOSS)) r = TH_FAIL;
    const kljit_status st = r == TH_PASS ? kljit_fused(plan, NULL, &a) : KLJIT_ERR_INTERNAL;
    if (r == TH_PASS && gbuf_download(&LOSS, &got)) r = TH_FAIL;
    printf("weight %g on row 3: %s %s\n", b < 3 ? bad[b] : 0.5, kljit_status_string(st),
           kljit_last_error());
    if (b < 3 && (st != KLJIT_ERR_BAD_INPUT_DATA || !strstr(kljit_last_error(), "row_weights") ||
                  !strstr(kljit_last_error(), "row 3") || !isnan(got)))
      r = TH_FAIL; /* refused, naming the row, with the (poisoned) loss unwritten */
    if (b == 3 && (st != KLJIT_SUCCESS || !isfinite(got))) r = TH_FAIL;
  }
  gbuf *bufs[] = {&X, &W, &T, &L, &RW, &LOSS, &DX, &DW, &WS};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gbuf_free(bufs[i]);
  kljit_plan_destroy(plan);
  return r;
}

/* The logits GEMM's statistics epilogue (KLJIT_GEMM=all:jit,logits:jit.stats, sm_90): the
 * plan of (V, form, teacher logit cap) on the test context says the row statistics come from the
 * logits GEMM (0), or says why not (1: a failure where `want` asked for it), or the GPU is not
 * sm_90 (77). */
static int plan_has_stats_epilogue(int64_t v, kljit_teacher_form form, double tcap, int want,
                                   const char *marker) {
  kljit_context *ctx;
  const int g = gpu_test_context(&ctx);
  if (g) return g;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 64, pb.vocab = v, pb.teacher = form, pb.teacher_softcap = tcap;
  if (form == KLJIT_TEACHER_DENSE_HIDDEN) pb.teacher_hidden = 48;
  kljit_plan *plan;
  TH_OK(kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  const char *d = kljit_plan_describe(plan);
  const int sm90 = strstr(d, "(sm_90") != NULL;
  const int on = strstr(d, marker) != NULL;
  if (on != want) fprintf(stderr, "the statistics epilogue is %s:\n%s", on ? "on" : "off", d);
  kljit_plan_destroy(plan);
  return !sm90 ? TH_SKIP : on == want ? TH_PASS : TH_FAIL;
}

/* The row statistics written by the logits GEMM's epilogue (one record per row and 256-column
 * tile, merged by pass 2; kl_dense_stats not launched) give the loss, dX and dW the fp64
 * reference gives, within the suite's bounds: the three dense forms it takes (teacher logits
 * below the others, at TT's or T's temperature) and the online teacher, every teacher dtype,
 * ragged and long vocabularies (a tile past V), a padded teacher, T != 1, ignored rows, several
 * chunks, fused and two-phase (whose backward computes none); a case outside its scope (bias)
 * keeps the row kernels' pass and stays right. Skips before sm_90. */
static int epilogue_cases(const char *gemm, const char *marker, int e16) {
  setenv("KLJIT_GEMM", gemm, 1);
  int worst = plan_has_stats_epilogue(32001, KLJIT_TEACHER_DENSE_PROBS, 0.0, 1, marker);
  if (worst == TH_PASS)
    worst = plan_has_stats_epilogue(1000, KLJIT_TEACHER_DENSE_LOGITS, 0.0, 1, marker);
  if (worst == TH_PASS) /* capped as pass 1 caps them */
    worst = plan_has_stats_epilogue(1000, KLJIT_TEACHER_DENSE_LOGITS, 50.0, 1, marker);
  if (worst == TH_PASS) /* the online teacher's logits are teacher logits */
    worst = plan_has_stats_epilogue(32001, KLJIT_TEACHER_DENSE_HIDDEN, 0.0, 1, marker);
  /* every case runs (a failure is reported, not the end of the list), until one skips */
  for (int k = 0; k < (e16 ? 25 : 12) && worst != TH_SKIP; k++) {
    gcase c = gcase_base();
    static const int64_t vs[] = {1000, 32001, 128256, 50257};
    c.v = vs[k % 4], c.n = k % 4 == 2 ? 9 : 37, c.h = 64;
    c.form = k % 2 ? KLJIT_TEACHER_DENSE_LOGPROBS : KLJIT_TEACHER_DENSE_PROBS;
    c.dt = k % 3 == 2 ? KLJIT_FP16 : KLJIT_BF16;
    c.tdt = DTS[k % 3];
    c.T = k % 4 == 1 ? 2.0 : k % 4 == 3 ? 0.5 : 1.0;
    c.tld = k == 5 ? c.v + 63 : 0;
    c.labels = k == 7 ? 2 : 1;
    c.fused = k % 3 != 1;
    c.red = c.fused ? REDS[k % 3] : REDS[3];
    c.bias = k == 11; /* out of .stats's scope (the row kernels' pass 1), in E16's */
    if (k == 8) setenv("KLJIT_CHUNK_ROWS", "256", 1), c.n = 700; /* three chunks */
    /* E16: logits of standard deviation 2 to 12 over several chunks, the reverse KL and the
     * JSD (which take log q from E too), fused */
    if (k >= 12) {
      c.fused = 1, c.red = KLJIT_REDUCTION_BATCHMEAN, c.bias = 0, c.tld = 0, c.labels = 1;
      c.zstd = k == 12 ? 2.0 : k == 13 ? 12.0 : 6.0, c.v = 32001, c.n = 600;
      if (k == 14) c.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
      if (k == 15) c.divergence = KLJIT_DIVERGENCE_JSD, c.beta = 0.5, c.T = 0.5;
      /* a bias in the epilogue's scores, fused and two-phase */
      if (k >= 16) c.bias = 1, c.fused = k == 16, c.T = k == 16 ? 1.0 : 2.0;
      if (k == 17) c.red = KLJIT_REDUCTION_SUM;
      /* a logit cap in the epilogue's scores (logits of std 30, as the suite caps them), G's
       * factor from the s taken back: fused with a bias, and two-phase at T = 0.5 */
      if (k >= 18) c.zstd = 30.0, c.softcap = 30.0, c.bias = k == 18, c.fused = k == 18;
      if (k == 19) c.T = 0.5, c.red = KLJIT_REDUCTION_BATCHMEAN;
      /* CE mixing (the epilogue's records give lse(z') and z'_y): fused at T = 2 with T^2 and
       * a z-loss, two-phase with a bias, and with some rows' labels ignored */
      if (k >= 20) {
        c.zstd = 6.0, c.softcap = 0.0, c.bias = k == 21, c.fused = k != 21, c.T = 1.0;
        c.hard_weight = 0.5, c.soft_weight = 0.5, c.labels = 1;
      }
      if (k == 20)
        c.T = 2.0, c.flags |= KLJIT_FLAG_SCALE_T_SQUARED, c.z_loss = 1e-4, c.outputs = 1;
      if (k == 22) c.divergence = KLJIT_DIVERGENCE_REVERSE_KL, c.red = KLJIT_REDUCTION_SUM;
      /* label smoothing (its sum of z' from E, the label's z' from the records) */
      if (k == 21) c.label_smoothing = 0.2;
      if (k == 22) c.label_smoothing = 0.1;
      /* a per-call T (the epilogue's 1 / T from the plan header), with the CE: fused, and
       * two-phase */
      if (k >= 23) c.tmode = KLJIT_TEMPERATURE_RUNTIME, c.T = 0.7, c.fused = k == 23;
      setenv("KLJIT_CHUNK_ROWS", "256", 1);
    }
    const int rc = gcase_check(&c);
    if (k == 8 || k >= 12) unsetenv("KLJIT_CHUNK_ROWS");
    if (rc == TH_SKIP && worst == TH_PASS) worst = TH_SKIP; /* no sm_90: none runs */
    else if (rc != TH_PASS && rc != TH_SKIP) worst = TH_FAIL;
  }
  /* teacher logits (the records hold their tile's (max, sum-exp) of t / TT): at a temperature
   * of their own, fused, over three chunks; at T's, two-phase, padded, in fp32, the reverse KL;
   * the JSD at logit standard deviation 6 with a teacher logit cap of 3; E16 also a per-call T
   * (theirs too) */
  for (int k = 0; k < (e16 ? 4 : 3) && worst != TH_SKIP; k++) {
    gcase c = gcase_base();
    c.form = KLJIT_TEACHER_DENSE_LOGITS, c.h = 64, c.v = k == 1 ? 1000 : 32001, c.n = 37;
    c.T = k == 1 ? 0.5 : 2.0, c.TT = k == 0 ? 1.5 : 0.0, c.labels = 1;
    c.fused = k != 1, c.red = c.fused ? KLJIT_REDUCTION_BATCHMEAN : KLJIT_REDUCTION_SUM;
    if (k == 0) setenv("KLJIT_CHUNK_ROWS", "256", 1), c.n = 700;
    if (k == 1) c.tdt = KLJIT_FP32, c.tld = c.v + 63, c.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
    if (k == 2) c.zstd = 6.0, c.n = 300, c.divergence = KLJIT_DIVERGENCE_JSD, c.beta = 0.5;
    if (k == 2) c.teacher_softcap = 3.0; /* a cap that bites */
    if (k == 3) c.tmode = KLJIT_TEMPERATURE_RUNTIME, c.T = 0.7;
    const int rc = gcase_check(&c);
    unsetenv("KLJIT_CHUNK_ROWS");
    if (rc == TH_SKIP && worst == TH_PASS) worst = TH_SKIP;
    else if (rc != TH_PASS && rc != TH_SKIP) worst = TH_FAIL;
  }
  /* the online teacher (its logits the teacher GEMM's chunk, run first, read as teacher
   * logits: rows the chunk's, its bias added): fused at its own temperature with its bias over
   * three chunks; two-phase, the JSD at logit standard deviation 6 and T = 0.5 in fp16 with a
   * padded head and its bias; fused, the reverse KL with CE mixing and both logit caps; E16
   * also a per-call T */
  for (int k = 0; k < (e16 ? 4 : 3) && worst != TH_SKIP; k++) {
    gcase c = gcase_base();
    c.form = KLJIT_TEACHER_DENSE_HIDDEN, c.ht = k == 1 ? 64 : 48, c.h = 64, c.v = 32001;
    c.n = 37, c.labels = 1, c.fused = k != 1, c.teacher_bias = k < 2;
    c.red = c.fused ? KLJIT_REDUCTION_BATCHMEAN : KLJIT_REDUCTION_SUM;
    if (k == 0) setenv("KLJIT_CHUNK_ROWS", "256", 1), c.n = 700, c.TT = 1.5;
    if (k == 1) c.dt = KLJIT_FP16, c.tld = c.v + 64, c.zstd = 6.0, c.T = 0.5, c.n = 300;
    if (k == 1) c.divergence = KLJIT_DIVERGENCE_JSD, c.beta = 0.5;
    if (k == 2) c.divergence = KLJIT_DIVERGENCE_REVERSE_KL, c.hard_weight = 0.5;
    if (k == 2) c.soft_weight = 0.5, c.zstd = 30.0, c.softcap = 30.0, c.teacher_softcap = 30.0;
    if (k == 3) c.tmode = KLJIT_TEMPERATURE_RUNTIME, c.T = 0.7, c.teacher_bias = 1;
    const int rc = gcase_check(&c);
    unsetenv("KLJIT_CHUNK_ROWS");
    if (rc == TH_SKIP && worst == TH_PASS) worst = TH_SKIP;
    else if (rc != TH_PASS && rc != TH_SKIP) worst = TH_FAIL;
  }
  unsetenv("KLJIT_GEMM");
  return worst;
}
static int statistics_in_the_logits_gemm_epilogue_match_reference(void) {
  return epilogue_cases("all:jit,logits:jit.stats", "pass 1): in the logits GEMM's epilogue", 0);
}

/* E16 (KLJIT_GEMM=logits:jit.e16, sm_90): the rows read the fp16 scores the logits GEMM wrote
 * instead of fp32 logits, with its records (fused and forward calls) or from the saved lse
 * (backward): the statistics epilogue's cases (the bias one in E16's scope), fused ones at logit
 * standard deviations 2, 6 and 12 over three chunks, the reverse KL and the JSD at T = 0.5, a
 * bias, fused and two-phase, a softcap, fused and two-phase, CE mixing (a z-loss, T^2, a
 * bias, the reverse KL, label smoothing) and a per-call T, within the suite's bounds. Skips
 * before sm_90. */
static int e16_in_the_logits_gemm_epilogue_matches_reference(void) {
  return epilogue_cases("logits:jit.e16", "the tile as fp16 scores (E16)", 1);
}

/* ---- the online teacher's checked mode (issue 29) ------------------------------------------ */

static kljit_context *the_ctx;

/* kljit_fused (or kljit_forward) with KLJIT_FLAG_CHECK_INPUTS on an online teacher (a head of
 * V + 16 rows, with its bias) with one defect: 0 none (must succeed), 1 NaN in teacher_input row
 * 17, 2 +inf in teacher_weight row 123, 3 NaN in teacher_bias[45], 4 NaN in teacher_input row 3,
 * whose label is ignored (not checked: must succeed), 5 NaN in head row V + 3, which the loss
 * never reads (must succeed); with row weights (KLJIT_FLAG_ROW_WEIGHTS, the same check kernel):
 * 6 a weight of -1 on row 9, 7 NaN weight on the ignored row 3 (not checked) and NaN in
 * teacher_input row 17, 8 good weights (must succeed). A refused call writes nothing (the
 * poisoned outputs stay NaN). */
static int online_checked_run(int defect, int fused, const char *want) {
  int rc = gpu_test_context(&the_ctx);
  if (rc != TH_PASS) return rc;
  const int64_t n = 40, h = 32, v = 500, vt = v + 16, ht = 24;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = h, pb.vocab = v, pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = ht;
  pb.teacher_vocab = vt, pb.label_dtype = KLJIT_INT64;
  pb.flags = KLJIT_FLAG_CHECK_INPUTS | KLJIT_FLAG_TEACHER_BIAS;
  const int weighted = defect >= 6;
  if (weighted) pb.flags |= KLJIT_FLAG_ROW_WEIGHTS;
  kljit_plan *plan = NULL;
  TH_OK(kljit_plan_create(the_ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  size_t ws = 0;
  TH_OK(kljit_plan_workspace_size(plan, fused ? KLJIT_MODE_FUSED : KLJIT_MODE_FORWARD, n, &ws));
  size_t saved = 0;
  TH_OK(kljit_plan_saved_size(plan, n, &saved));
  double *x = malloc(sizeof(double) * n * h), *w = malloc(sizeof(double) * v * h);
  double *xt = malloc(sizeof(double) * n * ht), *wt = malloc(sizeof(double) * vt * ht);
  double bt[516], lab[40], rw[40];
  host_rng rng = {31};
  for (int64_t i = 0; i < n * h; i++) x[i] = host_normal(&rng);
  for (int64_t i = 0; i < v * h; i++) w[i] = 0.1 * host_normal(&rng);
  for (int64_t i = 0; i < n * ht; i++) xt[i] = host_normal(&rng);
  for (int64_t i = 0; i < vt * ht; i++) wt[i] = 0.2 * host_normal(&rng);
  for (int64_t i = 0; i < vt; i++) bt[i] = host_normal(&rng);
  for (int64_t i = 0; i < n; i++) lab[i] = i == 3 ? -100 : (double)(i * 7 % v);
  if (defect == 1) xt[17 * ht + 5] = NAN;
  if (defect == 2) wt[123 * ht + ht - 1] = INFINITY;
  if (defect == 3) bt[45] = NAN;
  if (defect == 4) xt[3 * ht] = NAN;
  if (defect == 5) wt[(v + 3) * ht + 1] = NAN;
  for (int64_t i = 0; i < n; i++) rw[i] = 0.5 + 0.01 * (double)i;
  if (defect == 6) rw[9] = -1.0;
  if (defect == 7) rw[3] = NAN, xt[17 * ht + 2] = NAN;
  gbuf X, W, XT, WT, BT, L, RW, LOSS, DX, DW, WS, SV;
  int fail = gbuf_alloc(&X, KLJIT_BF16, n * h) | gbuf_alloc(&W, KLJIT_BF16, v * h) |
             gbuf_alloc(&XT, KLJIT_BF16, n * ht) | gbuf_alloc(&WT, KLJIT_BF16, vt * ht) |
             gbuf_alloc(&BT, KLJIT_BF16, vt) | gbuf_alloc(&L, KLJIT_INT64, n) |
             gbuf_alloc(&LOSS, KLJIT_FP32, 1) | gbuf_alloc(&DX, KLJIT_BF16, n * h) |
             gbuf_alloc(&DW, KLJIT_FP32, v * h) | gbuf_alloc(&WS, KLJIT_INT32, ws / 4 + 1) |
             gbuf_alloc(&SV, KLJIT_FP32, saved / 4 + 1) | gbuf_alloc(&RW, KLJIT_FP32, n);
  fail |= gbuf_upload(&X, x, NULL) | gbuf_upload(&W, w, NULL) | gbuf_upload(&XT, xt, NULL) |
          gbuf_upload(&WT, wt, NULL) | gbuf_upload(&BT, bt, NULL) | gbuf_upload(&L, lab, NULL) |
          gbuf_upload(&RW, rw, NULL);
  fail |= gbuf_poison(&LOSS) | gbuf_poison(&DX) | gbuf_poison(&DW) | gbuf_poison(&SV);
  TH_CHECK(!fail);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = n, a.input = X.ptr, a.weight = W.ptr, a.labels = L.ptr, a.loss = LOSS.ptr;
  a.teacher_input = XT.ptr, a.teacher_weight = WT.ptr, a.teacher_bias = BT.ptr;
  a.workspace = WS.ptr, a.workspace_size = ws;
  if (weighted) a.row_weights = RW.ptr;
  if (fused) a.grad_input = DX.ptr, a.grad_weight = DW.ptr;
  else a.saved = SV.ptr;
  const kljit_status st = fused ? kljit_fused(plan, NULL, &a) : kljit_forward(plan, NULL, &a);
  printf("online teacher, %s, defect %d: %s: %s\n", fused ? "fused" : "forward", defect,
         kljit_status_string(st), st ? kljit_last_error() : "");
  double loss = 0, *dx = malloc(sizeof(double) * n * h);
  fail = gbuf_download(&LOSS, &loss) | gbuf_download(&DX, dx);
  int ok = !fail;
  if (!want) {
    ok = ok && st == KLJIT_SUCCESS && isfinite(loss);
  } else {
    ok = ok && st == KLJIT_ERR_BAD_INPUT_DATA && strstr(kljit_last_error(), want) &&
         strstr(kljit_last_error(), "NaN or infinite") && isnan(loss) && isnan(dx[0]);
  }
  gbuf *bufs[] = {&X, &W, &XT, &WT, &BT, &L, &RW, &LOSS, &DX, &DW, &WS, &SV};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gbuf_free(bufs[i]);
  free(x), free(w), free(xt), free(wt), free(dx);
  kljit_plan_destroy(plan);
  return ok ? TH_PASS : TH_FAIL;
}

static int online_teacher_checked_mode_reports_its_input_head_and_bias(void) {
  static const struct {
    int defect;
    const char *want;
  } runs[] = {{0, NULL},
              {1, "teacher_input row 17"},
              {2, "teacher_weight row 123"},
              {3, "teacher_bias element 45"},
              {4, NULL},
              {5, NULL},
              {6, "row_weights row 9"},
              {7, "teacher_input row 17"},
              {8, NULL}};
  int worst = TH_PASS;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
    for (int fused = 0; fused < 2; fused++) {
      const int rc = online_checked_run(runs[i].defect, fused, runs[i].want);
      if (rc == TH_SKIP) return rc;
      if (rc != TH_PASS) worst = TH_FAIL;
    }
  /* checked, with good inputs, the results are the unchecked ones against fp64 */
  gcase c = gcase_base();
  c.form = KLJIT_TEACHER_DENSE_HIDDEN, c.ht = 48, c.teacher_bias = 1;
  c.flags = KLJIT_FLAG_CHECK_INPUTS, c.divergence = KLJIT_DIVERGENCE_JSD, c.beta = 0.5;
  if (gcase_check(&c) != TH_PASS) worst = TH_FAIL;
  c.fused = 0, c.red = KLJIT_REDUCTION_NONE, c.dt = c.tdt = KLJIT_FP32;
  if (gcase_check(&c) != TH_PASS) worst = TH_FAIL;
  c.fused = 1, c.red = KLJIT_REDUCTION_BATCHMEAN, c.row_weights = 1, c.outputs = 1;
  if (gcase_check(&c) != TH_PASS) worst = TH_FAIL;
  return worst;
}

/* kljit_args.divisor (num_items_in_batch): batchmean and mean divide by it instead of the
 * kept rows, in both modes and dtypes, a bias and ignored rows included; the reference is the
 * kept rows' mean times kept / divisor. A divisor of 0 gives loss 0 and zero gradients, exactly
 * (the reference scaled by 0). With row weights the divisor stays as given, and the optional
 * outputs' loss parts are reduced by it while the per-row loss is not (k = 3, 4). */
static int a_global_divisor_replaces_the_kept_rows(void) {
  int worst = TH_PASS;
  for (int k = 0; k < 6 && worst == TH_PASS; k++) {
    gcase c = gcase_base();
    c.divisor = k == 5 ? 0.0 : 1000.0 + 37 * k; /* far more than the call's 37 rows */
    c.red = k % 2 ? KLJIT_REDUCTION_MEAN : KLJIT_REDUCTION_BATCHMEAN;
    c.fused = k < 3, c.bias = k == 1;
    c.dt = k == 2 ? KLJIT_FP32 : KLJIT_BF16;
    c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
    if (k == 3 || k == 4) c.row_weights = 1, c.outputs = 1, c.hard_weight = 0.5;
    const int rc = gcase_check(&c);
    if (rc != TH_PASS) worst = rc == TH_SKIP ? TH_SKIP : TH_FAIL;
  }
  return worst;
}

/* KLJIT_ACCUM_AUTO on the GPU: a short call keeps a bf16 dW in bf16 (4 chunks), a call of more
 * than 8 chunks (KLJIT_CHUNK_ROWS=256, 2100 rows) takes the fp32 buffer; both against fp64. */
static int auto_accumulation_short_and_long_calls(void) {
  int worst = TH_PASS;
  for (int k = 0; k < 4 && worst == TH_PASS; k++) {
    gcase c = gcase_base();
    c.gw = KLJIT_BF16, c.accum = KLJIT_ACCUM_AUTO, c.bias = 1;
    c.n = k < 2 ? 1000 : 2100, c.v = 5003, c.fused = k % 2 == 0;
    if (k >= 2) setenv("KLJIT_CHUNK_ROWS", "256", 1);
    const int rc = gcase_check(&c);
    unsetenv("KLJIT_CHUNK_ROWS");
    if (rc != TH_PASS) worst = rc == TH_SKIP ? TH_SKIP : TH_FAIL;
  }
  return worst;
}

static const th_case cases[] = {
    {"online_teacher_checked_mode_reports_its_input_head_and_bias",
     online_teacher_checked_mode_reports_its_input_head_and_bias},
    {"a_global_divisor_replaces_the_kept_rows", a_global_divisor_replaces_the_kept_rows},
    {"auto_accumulation_short_and_long_calls", auto_accumulation_short_and_long_calls},
    {"every_form_dtype_temperature_reduction_and_mode",
     every_form_dtype_temperature_reduction_and_mode},
    {"vocab_sizes_with_ragged_tails", vocab_sizes_with_ragged_tails},
    {"every_divergence_in_the_cluster_variant", every_divergence_in_the_cluster_variant},
    {"dx_as_slices_summed_in_fp32", dx_as_slices_summed_in_fp32},
    {"rows_not_a_multiple_of_the_chunk", rows_not_a_multiple_of_the_chunk},
    {"a_single_row", a_single_row},
    {"all_rows_ignored_gives_zero_loss_and_gradients",
     all_rows_ignored_gives_zero_loss_and_gradients},
    {"large_logits_and_temperatures", large_logits_and_temperatures},
    {"native_logits_and_accumulated_grad_weight", native_logits_and_accumulated_grad_weight},
    {"cluster_variant_matches_reference", cluster_variant_matches_reference},
    {"softcaps_and_padded_teachers_in_every_dtype_form_and_mode",
     softcaps_and_padded_teachers_in_every_dtype_form_and_mode},
    {"hard_label_ce_mixing_in_every_dtype_form_and_mode",
     hard_label_ce_mixing_in_every_dtype_form_and_mode},
    {"every_divergence_teacher_form_mode_and_dtype", every_divergence_teacher_form_mode_and_dtype},
    {"online_teacher_every_divergence_mode_and_dtype",
     online_teacher_every_divergence_mode_and_dtype},
    {"softcaps_padded_teachers_and_ce_in_the_cluster_variant",
     softcaps_padded_teachers_and_ce_in_the_cluster_variant},
    {"tvd_and_skew_kls_in_every_dtype_form_and_mode",
     tvd_and_skew_kls_in_every_dtype_form_and_mode},
    {"tvd_and_skew_kls_at_logit_scales_2_and_12", tvd_and_skew_kls_at_logit_scales_2_and_12},
    {"online_teacher_tvd_and_skew_kls", online_teacher_tvd_and_skew_kls},
    {"row_weights_and_the_outputs_in_every_dtype_form_and_mode",
     row_weights_and_the_outputs_in_every_dtype_form_and_mode},
    {"label_smoothing_and_z_loss_in_every_dtype_form_and_mode",
     label_smoothing_and_z_loss_in_every_dtype_form_and_mode},
    {"tvd_skew_kls_and_row_weights_in_the_cluster_variant",
     tvd_skew_kls_and_row_weights_in_the_cluster_variant},
    {"checked_mode_reports_a_bad_row_weight", checked_mode_reports_a_bad_row_weight},
    {"statistics_in_the_logits_gemm_epilogue_match_reference",
     statistics_in_the_logits_gemm_epilogue_match_reference},
    {"e16_in_the_logits_gemm_epilogue_matches_reference",
     e16_in_the_logits_gemm_epilogue_matches_reference},
    {"the_precise_flag_promotes_the_logits_gemm_and_matches_reference",
     the_precise_flag_promotes_the_logits_gemm_and_matches_reference},
};
TH_MAIN(cases)
