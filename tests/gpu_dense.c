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

/* kljit_args.divisor (num_items_in_batch): batchmean and mean divide by it instead of the
 * kept rows, in both modes and dtypes, a bias and ignored rows included; the reference is the
 * kept rows' mean times kept / divisor. A divisor of 0 gives loss 0 and zero gradients, exactly
 * (the reference scaled by 0). */
static int a_global_divisor_replaces_the_kept_rows(void) {
  int worst = TH_PASS;
  for (int k = 0; k < 6 && worst == TH_PASS; k++) {
    gcase c = gcase_base();
    c.divisor = k == 5 ? 0.0 : 1000.0 + 37 * k; /* far more than the call's 37 rows */
    c.red = k % 2 ? KLJIT_REDUCTION_MEAN : KLJIT_REDUCTION_BATCHMEAN;
    c.fused = k < 3, c.bias = k == 1;
    c.dt = k == 2 ? KLJIT_FP32 : KLJIT_BF16;
    c.form = (kljit_teacher_form)(KLJIT_TEACHER_DENSE_PROBS + k % 3);
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
};
TH_MAIN(cases)
