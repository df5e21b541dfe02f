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
