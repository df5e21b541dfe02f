/* SPDX-License-Identifier: Apache-2.0 */
/* unit_api.c — the public API's contract where no GPU is needed: versions, status strings,
 * destroy(NULL), context creation without a device, kljit_plan_check's field-by-field
 * validation and its messages, the thread-local last error, and NULL-plan calls.
 *
 * Uses only the public header. kljit_plan_check is the place where every problem field is
 * validated (kljit_plan_create runs the same checks), so each invalid field is tried here,
 * one at a time on an otherwise valid problem, and the status and the message (the field's
 * name and its value) are both asserted: a check that fires for the wrong field fails.
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kljit_experimental.h" /* kljit_get_versions */

/* ---- versions and status strings -------------------------------------------------------- */

static int version_macros_match_the_loaded_library(void) {
  TH_CHECK(kljit_version() != NULL);
  TH_CHECK(strcmp(kljit_version(), KLJIT_VERSION_STRING) == 0);
  TH_CHECK(kljit_version_number() == KLJIT_VERSION_NUMBER);
  char want[64];
  snprintf(want, sizeof want, "%d.%d.%d", KLJIT_VERSION_MAJOR, KLJIT_VERSION_MINOR,
           KLJIT_VERSION_PATCH);
  TH_CHECK(strcmp(want, KLJIT_VERSION_STRING) == 0);
  TH_CHECK(KLJIT_VERSION_NUMBER ==
           KLJIT_VERSION_MAJOR * 10000 + KLJIT_VERSION_MINOR * 100 + KLJIT_VERSION_PATCH);
#ifdef KLJIT_TEST_PROJECT_VERSION
  /* CMake's project(VERSION) feeds kljit.pc and kljitConfigVersion.cmake: it must agree. */
  if (strcmp(KLJIT_TEST_PROJECT_VERSION, KLJIT_VERSION_STRING) != 0) {
    fprintf(stderr, "CMake project version %s != KLJIT_VERSION_STRING %s\n",
            KLJIT_TEST_PROJECT_VERSION, KLJIT_VERSION_STRING);
    return TH_FAIL;
  }
#endif
  return TH_PASS;
}

typedef struct named_status {
  kljit_status status;
  const char *name;
} named_status;

static const named_status all_statuses[] = {
    {KLJIT_SUCCESS, "KLJIT_SUCCESS"},
    {KLJIT_ERR_INVALID_ARGUMENT, "KLJIT_ERR_INVALID_ARGUMENT"},
    {KLJIT_ERR_MISALIGNED, "KLJIT_ERR_MISALIGNED"},
    {KLJIT_ERR_UNSUPPORTED, "KLJIT_ERR_UNSUPPORTED"},
    {KLJIT_ERR_NO_DEVICE, "KLJIT_ERR_NO_DEVICE"},
    {KLJIT_ERR_CUDA, "KLJIT_ERR_CUDA"},
    {KLJIT_ERR_CUBLAS, "KLJIT_ERR_CUBLAS"},
    {KLJIT_ERR_COMPILE, "KLJIT_ERR_COMPILE"},
    {KLJIT_ERR_TEMPLATE, "KLJIT_ERR_TEMPLATE"},
    {KLJIT_ERR_CACHE, "KLJIT_ERR_CACHE"},
    {KLJIT_ERR_OUT_OF_MEMORY, "KLJIT_ERR_OUT_OF_MEMORY"},
    {KLJIT_ERR_WORKSPACE_TOO_SMALL, "KLJIT_ERR_WORKSPACE_TOO_SMALL"},
    {KLJIT_ERR_BAD_INPUT_DATA, "KLJIT_ERR_BAD_INPUT_DATA"},
    {KLJIT_ERR_WISDOM, "KLJIT_ERR_WISDOM"},
    {KLJIT_ERR_NO_WISDOM, "KLJIT_ERR_NO_WISDOM"},
    {KLJIT_ERR_INTERNAL, "KLJIT_ERR_INTERNAL"},
    {KLJIT_ERR_NCCL, "KLJIT_ERR_NCCL"},
};
enum { N_STATUSES = sizeof all_statuses / sizeof all_statuses[0] };

static int every_status_has_a_distinct_string_starting_with_its_name(void) {
  int bad = 0;
  for (int i = 0; i < N_STATUSES; i++) {
    const named_status *ns = &all_statuses[i];
    /* Explicit values, never reused: the table is the enum in order 0..17, without the
     * retired 4 (KLJIT_ERR_NOT_IMPLEMENTED). */
    const int want = i < 4 ? i : i + 1;
    if ((int)ns->status != want) {
      fprintf(stderr, "%s = %d, expected %d\n", ns->name, (int)ns->status, want);
      bad++;
    }
    const char *s = kljit_status_string(ns->status);
    const size_t n = strlen(ns->name);
    /* "NAME" alone or "NAME: sentence"; a longer name sharing the prefix does not count. */
    if (!s || strncmp(s, ns->name, n) != 0 || (s[n] != '\0' && s[n] != ':')) {
      fprintf(stderr, "kljit_status_string(%s) = \"%s\"\n", ns->name, s ? s : "(null)");
      bad++;
      continue;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(s, kljit_status_string(all_statuses[j].status)) == 0) {
        fprintf(stderr, "%s and %s share the string \"%s\"\n", ns->name, all_statuses[j].name,
                s);
        bad++;
      }
  }
  return bad ? TH_FAIL : TH_PASS;
}

static int unknown_status_values_still_get_a_string(void) {
  const int unknown[] = {-1, 4 /* retired */, KLJIT_ERR_NCCL + 1, 999, 0x7fffffff};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    const char *s = kljit_status_string((kljit_status)unknown[i]);
    TH_CHECK(s != NULL && s[0] != '\0');
    for (int j = 0; j < N_STATUSES; j++)
      TH_CHECK(strcmp(s, kljit_status_string(all_statuses[j].status)) != 0);
  }
  return TH_PASS;
}

/* ---- destroy and context ---------------------------------------------------------------- */

static int destroying_a_null_context_or_plan_is_a_no_op(void) {
  kljit_context_destroy(NULL);
  kljit_plan_destroy(NULL);
  return TH_PASS;
}

static int context_create_without_a_gpu_reports_no_device(void) {
  kljit_context *ctx = (kljit_context *)&ctx; /* a sentinel that must be overwritten */
  const kljit_status st = kljit_context_create(&ctx, 0, NULL);
  if (st == KLJIT_SUCCESS) { /* this machine has a GPU: the case does not apply */
    kljit_context_destroy(ctx);
    return TH_SKIP;
  }
  TH_STATUS(st, KLJIT_ERR_NO_DEVICE);
  TH_CHECK(ctx == NULL);
  const char *msg = kljit_last_error();
  fprintf(stderr, "last error: %s\n", msg);
  TH_CHECK(msg[0] != '\0');
  TH_CHECK(strstr(msg, "CUDA") || strstr(msg, "GPU") || strstr(msg, "device"));
  /* a device index past the end is also "no device", never a crash */
  ctx = (kljit_context *)&ctx;
  TH_STATUS(kljit_context_create(&ctx, 7, NULL), KLJIT_ERR_NO_DEVICE);
  TH_CHECK(ctx == NULL);
  return TH_PASS;
}

static int context_create_rejects_null_out_negative_device_and_options(void) {
  TH_STATUS(kljit_context_create(NULL, 0, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_context_create") != NULL);
  TH_CHECK(strstr(kljit_last_error(), "NULL") != NULL);

  kljit_context *ctx = (kljit_context *)&ctx;
  TH_STATUS(kljit_context_create(&ctx, -1, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(ctx == NULL);
  TH_CHECK(strstr(kljit_last_error(), "device = -1") != NULL);

  /* options are checked before any device is looked for */
  kljit_context_options options;
  memset(&options, 0, sizeof options);
  ctx = (kljit_context *)&ctx;
  TH_STATUS(kljit_context_create(&ctx, 0, &options), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(ctx == NULL);
  TH_CHECK(strstr(kljit_last_error(), "options->struct_size = 0") != NULL);
  TH_OK(kljit_context_options_default(&options));
  options.row_kernel = (kljit_row_kernel)7;
  TH_STATUS(kljit_context_create(&ctx, 0, &options), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "options->row_kernel = 7") != NULL);
  TH_OK(kljit_context_options_default(&options));
  options.tune_budget_s = 0;
  TH_STATUS(kljit_context_create(&ctx, 0, &options), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "tune_budget_s") != NULL);
  TH_OK(kljit_context_options_default(&options));
  options.dx_split = 65;
  TH_STATUS(kljit_context_create(&ctx, 0, &options), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "options->dx_split = 65") != NULL);
  /* a struct from before dx_split: its options are read, dx_split is the planner's; the next
   * check (the device) is what fails here, not the size */
  TH_OK(kljit_context_options_default(&options));
  options.struct_size = offsetof(kljit_context_options, dx_split);
  options.dx_split = 65; /* beyond the caller's struct: never read */
  const kljit_status old = kljit_context_create(&ctx, 0, &options);
  TH_CHECK(old == KLJIT_ERR_NO_DEVICE || old == KLJIT_SUCCESS);
  if (old == KLJIT_SUCCESS) kljit_context_destroy(ctx);
  options.struct_size = offsetof(kljit_context_options, gemm);
  TH_STATUS(kljit_context_create(&ctx, 0, &options), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "first released") != NULL);
  return TH_PASS;
}

/* The options' defaults are the environment's (the README's table), read when asked, over
 * KLJIT_CONTEXT_OPTIONS_INIT (the same values with nothing set). */
static int context_options_default_to_the_environment(void) {
  kljit_context_options o;
  unsetenv("KLJIT_ROW_KERNEL"), unsetenv("KLJIT_CHUNK_ROWS"), unsetenv("KLJIT_TUNE_ROWS");
  unsetenv("KLJIT_TUNE_BUDGET_S"), unsetenv("KLJIT_CACHE_DISABLE");
  unsetenv("KLJIT_DEBUG_SKIP_GEMMS"), unsetenv("KLJIT_DX_SPLIT");
  TH_OK(kljit_context_options_default(&o));
  TH_CHECK(o.struct_size == sizeof o && o.flags == 0 && o.row_kernel == KLJIT_ROW_KERNEL_TWO_PASS);
  TH_CHECK(o.chunk_rows == 0 && o.tune_rows == 8192 && o.tune_budget_s == 30.0);
  TH_CHECK(o.dx_split == 0);
  const kljit_context_options init = KLJIT_CONTEXT_OPTIONS_INIT;
  TH_CHECK(o.flags == init.flags && o.row_kernel == init.row_kernel && o.gemm == init.gemm &&
           o.chunk_rows == init.chunk_rows && o.tune_rows == init.tune_rows &&
           o.tune_budget_s == init.tune_budget_s && o.dx_split == init.dx_split);
  setenv("KLJIT_DX_SPLIT", "4", 1);
  TH_OK(kljit_context_options_default(&o));
  TH_CHECK(o.dx_split == 4);
  setenv("KLJIT_DX_SPLIT", "4x", 1); /* a typo is refused by kljit_context_create */
  TH_OK(kljit_context_options_default(&o));
  TH_CHECK(o.dx_split == -1);
  kljit_context *c = NULL;
  TH_STATUS(kljit_context_create(&c, 0, &o), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "KLJIT_DX_SPLIT=4x") != NULL);
  /* with no options too: the environment's are checked as a caller's (they were taken and the
   * bad split ignored before) */
  TH_STATUS(kljit_context_create(&c, 0, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "KLJIT_DX_SPLIT=4x") != NULL);
  unsetenv("KLJIT_DX_SPLIT");
  setenv("KLJIT_ROW_KERNEL", "cluster", 1), setenv("KLJIT_CHUNK_ROWS", "512", 1);
  setenv("KLJIT_TUNE_ROWS", "1024", 1), setenv("KLJIT_TUNE_BUDGET_S", "2.5", 1);
  setenv("KLJIT_CACHE_DISABLE", "1", 1), setenv("KLJIT_DEBUG_SKIP_GEMMS", "1", 1);
  setenv("KLJIT_CACHE_DIR", "/tmp/kljit-options-dir", 1);
  const kljit_status st = kljit_context_options_default(&o);
  const int ok = o.row_kernel == KLJIT_ROW_KERNEL_CLUSTER && o.chunk_rows == 512 &&
                 o.tune_rows == 1024 && o.tune_budget_s == 2.5 &&
                 o.flags == (KLJIT_CONTEXT_CACHE_DISABLE | KLJIT_CONTEXT_DEBUG_SKIP_GEMMS) &&
                 o.cache_dir && strcmp(o.cache_dir, "/tmp/kljit-options-dir") == 0;
  unsetenv("KLJIT_ROW_KERNEL"), unsetenv("KLJIT_CHUNK_ROWS"), unsetenv("KLJIT_TUNE_ROWS");
  unsetenv("KLJIT_TUNE_BUDGET_S"), unsetenv("KLJIT_CACHE_DISABLE");
  unsetenv("KLJIT_DEBUG_SKIP_GEMMS"), unsetenv("KLJIT_CACHE_DIR");
  TH_OK(st);
  TH_CHECK(ok);
  TH_STATUS(kljit_context_options_default(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  return TH_PASS;
}

/* ---- kljit_plan_check ------------------------------------------------------------------- */

static kljit_problem valid_problem(void) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 64;
  pb.vocab = 1000;
  return pb;
}

static int plan_check_accepts_the_default_problem_with_sizes_set(void) {
  kljit_problem pb = valid_problem();
  TH_OK(kljit_plan_check(&pb));
  TH_CHECK(strcmp(kljit_last_error(), "") == 0);
  /* the defaults the header documents */
  TH_CHECK(pb.struct_size == sizeof(kljit_problem));
  TH_CHECK(pb.input_dtype == KLJIT_BF16 && pb.weight_dtype == KLJIT_BF16);
  TH_CHECK(pb.temperature == 1.0 && pb.teacher_temperature == 0.0);
  TH_CHECK(pb.ignore_index == -100 && pb.eps == 1e-20 && pb.flags == 0);
  TH_CHECK(pb.grad_weight_dtype == KLJIT_FP32 && pb.grad_weight_accum == KLJIT_ACCUM_FP32);
  TH_CHECK(pb.divergence == KLJIT_DIVERGENCE_FORWARD_KL && pb.beta == 0.0);
  TH_CHECK(pb.hard_weight == 0.0 && pb.soft_weight == 1.0);
  TH_CHECK(pb.softcap == 0.0 && pb.teacher_softcap == 0.0);
  TH_CHECK(pb.teacher_vocab == 0 && pb.teacher_ld == 0 && pb.teacher_hidden == 0);
  return TH_PASS;
}

/* Fields a table entry can set; values travel as doubles (exact for every value used). */
typedef enum field {
  F_NONE, F_STRUCT_SIZE, F_HIDDEN, F_VOCAB, F_INPUT_DT, F_WEIGHT_DT, F_TEACHER_DT, F_TEACHER,
  F_TOPK, F_ID_DT, F_TOPK_VALUES, F_TAIL, F_TMODE, F_T, F_TT, F_REDUCTION, F_LABEL_DT, F_EPS,
  F_GW_DT, F_ACCUM, F_FLAGS, F_DIV, F_BETA, F_HARD, F_SOFT, F_CAP, F_TCAP, F_TVOCAB, F_TLD,
  F_THIDDEN, F_VTOT, F_SHARDS, F_ALPHA, F_LS, F_ZL
} field;

static void set_field(kljit_problem *pb, field f, double v) {
  switch (f) {
  case F_NONE: break;
  case F_STRUCT_SIZE: pb->struct_size = (size_t)v; break;
  case F_HIDDEN: pb->hidden = (int64_t)v; break;
  case F_VOCAB: pb->vocab = (int64_t)v; break;
  case F_INPUT_DT: pb->input_dtype = (kljit_dtype)(int)v; break;
  case F_WEIGHT_DT: pb->weight_dtype = (kljit_dtype)(int)v; break;
  case F_TEACHER_DT: pb->teacher_dtype = (kljit_dtype)(int)v; break;
  case F_TEACHER: pb->teacher = (kljit_teacher_form)(int)v; break;
  case F_TOPK: pb->topk = (int32_t)v; break;
  case F_ID_DT: pb->topk_id_dtype = (kljit_dtype)(int)v; break;
  case F_TOPK_VALUES: pb->topk_values = (kljit_topk_values)(int)v; break;
  case F_TAIL: pb->tail = (kljit_tail)(int)v; break;
  case F_TMODE: pb->temperature_mode = (kljit_temperature_mode)(int)v; break;
  case F_T: pb->temperature = v; break;
  case F_TT: pb->teacher_temperature = v; break;
  case F_REDUCTION: pb->reduction = (kljit_reduction)(int)v; break;
  case F_LABEL_DT: pb->label_dtype = (kljit_dtype)(int)v; break;
  case F_EPS: pb->eps = v; break;
  case F_GW_DT: pb->grad_weight_dtype = (kljit_dtype)(int)v; break;
  case F_ACCUM: pb->grad_weight_accum = (kljit_grad_weight_accum)(int)v; break;
  case F_FLAGS: pb->flags = (uint32_t)v; break;
  case F_DIV: pb->divergence = (kljit_divergence)(int)v; break;
  case F_BETA: pb->beta = v; break;
  case F_HARD: pb->hard_weight = v; break;
  case F_SOFT: pb->soft_weight = v; break;
  case F_CAP: pb->softcap = v; break;
  case F_TCAP: pb->teacher_softcap = v; break;
  case F_TVOCAB: pb->teacher_vocab = (int64_t)v; break;
  case F_TLD: pb->teacher_ld = (int64_t)v; break;
  case F_THIDDEN: pb->teacher_hidden = (int64_t)v; break;
  case F_VTOT: pb->vocab_total = (int64_t)v; break;
  case F_SHARDS: pb->shards = (int32_t)v; break;
  case F_ALPHA: pb->skew_alpha = v; break;
  case F_LS: pb->label_smoothing = v; break;
  case F_ZL: pb->z_loss = v; break;
  }
}

typedef struct assignment {
  field f;
  double v;
} assignment;

/* One problem: valid_problem() with up to seven assignments, the status it must get and up
 * to two substrings its message must contain (for a rejection: the field and its value). */
typedef struct check_case {
  const char *what;
  assignment set[7];
  kljit_status want;
  const char *msg[2];
} check_case;

#define SPARSE {F_TEACHER, KLJIT_TEACHER_SPARSE_TOPK}, {F_TOPK, 16}
#define INVALID KLJIT_ERR_INVALID_ARGUMENT
#define UNSUPPORTED KLJIT_ERR_UNSUPPORTED
#define JSD(b) {F_DIV, KLJIT_DIVERGENCE_JSD}, {F_BETA, b}
#define SKEWF(a) {F_DIV, KLJIT_DIVERGENCE_SKEW_FORWARD_KL}, {F_ALPHA, a}
#define SKEWR(a) {F_DIV, KLJIT_DIVERGENCE_SKEW_REVERSE_KL}, {F_ALPHA, a}
#define TVD {F_DIV, KLJIT_DIVERGENCE_TVD}

static const check_case rejected[] = {
    {"struct_size 0", {{F_STRUCT_SIZE, 0}}, INVALID, {"problem->struct_size = 0", NULL}},
    {"hidden 0", {{F_HIDDEN, 0}}, INVALID, {"hidden = 0", NULL}},
    {"hidden -1", {{F_HIDDEN, -1}}, INVALID, {"hidden = -1", NULL}},
    {"hidden 2^20 + 1", {{F_HIDDEN, (1 << 20) + 1}}, INVALID, {"hidden = 1048577", NULL}},
    {"hidden 2^40", {{F_HIDDEN, 1099511627776.0}}, INVALID, {"hidden = 1099511627776", NULL}},
    {"vocab 0", {{F_VOCAB, 0}}, INVALID, {"vocab = 0", NULL}},
    {"vocab 1", {{F_VOCAB, 1}}, INVALID, {"vocab = 1", NULL}},
    {"vocab 2^24 + 1", {{F_VOCAB, (1 << 24) + 1}}, INVALID, {"vocab = 16777217", NULL}},
    {"input_dtype 0", {{F_INPUT_DT, 0}}, INVALID, {"input_dtype = 0", NULL}},
    {"input_dtype INT32", {{F_INPUT_DT, KLJIT_INT32}, {F_WEIGHT_DT, KLJIT_INT32}}, INVALID,
     {"input_dtype = 4", NULL}},
    {"input_dtype 99", {{F_INPUT_DT, 99}}, INVALID, {"input_dtype = 99", NULL}},
    {"weight_dtype 0", {{F_WEIGHT_DT, 0}}, INVALID, {"weight_dtype = 0", NULL}},
    {"weight_dtype FP16 with input BF16", {{F_WEIGHT_DT, KLJIT_FP16}}, KLJIT_ERR_UNSUPPORTED,
     {"weight_dtype", "FP16"}},
    {"weight_dtype FP32 with input FP16",
     {{F_INPUT_DT, KLJIT_FP16}, {F_WEIGHT_DT, KLJIT_FP32}}, KLJIT_ERR_UNSUPPORTED,
     {"weight_dtype FP32", "input_dtype FP16"}},
    {"teacher_dtype INT32", {{F_TEACHER_DT, KLJIT_INT32}}, INVALID, {"teacher_dtype = 4", NULL}},
    {"teacher_dtype INT64", {{F_TEACHER_DT, KLJIT_INT64}}, INVALID, {"teacher_dtype = 5", NULL}},
    {"teacher_dtype 0", {{F_TEACHER_DT, 0}}, INVALID, {"teacher_dtype = 0", NULL}},
    {"teacher form 0", {{F_TEACHER, 0}}, INVALID, {"teacher = 0", NULL}},
    {"teacher form 6", {{F_TEACHER, 6}}, INVALID, {"teacher = 6", NULL}},
    {"sparse topk 0", {SPARSE, {F_TOPK, 0}}, INVALID, {"topk = 0", NULL}},
    {"sparse topk -3", {SPARSE, {F_TOPK, -3}}, INVALID, {"topk = -3", NULL}},
    {"sparse topk V + 1 with V = 1000", {SPARSE, {F_TOPK, 1001}}, INVALID,
     {"topk = 1001", NULL}},
    {"sparse topk 16 with V = 2", {SPARSE, {F_VOCAB, 2}}, INVALID, {"topk = 16", "[1, 2]"}},
    {"sparse topk 1025 with V = 50000", {SPARSE, {F_VOCAB, 50000}, {F_TOPK, 1025}}, INVALID,
     {"topk = 1025", "[1, 1024]"}},
    {"sparse topk_id_dtype FP32", {SPARSE, {F_ID_DT, KLJIT_FP32}}, INVALID,
     {"topk_id_dtype = 1", NULL}},
    {"sparse topk_id_dtype 0", {SPARSE, {F_ID_DT, 0}}, INVALID, {"topk_id_dtype = 0", NULL}},
    {"sparse topk_values 0", {SPARSE, {F_TOPK_VALUES, 0}}, INVALID, {"topk_values = 0", NULL}},
    {"sparse topk_values 3", {SPARSE, {F_TOPK_VALUES, 3}}, INVALID, {"topk_values = 3", NULL}},
    {"sparse tail 0", {SPARSE, {F_TAIL, 0}}, INVALID, {"tail = 0", NULL}},
    {"sparse tail 4", {SPARSE, {F_TAIL, 4}}, INVALID, {"tail = 4", NULL}},
    {"temperature_mode 0", {{F_TMODE, 0}}, INVALID, {"temperature_mode = 0", NULL}},
    {"temperature_mode 3", {{F_TMODE, 3}}, INVALID, {"temperature_mode = 3", NULL}},
    {"temperature 0", {{F_T, 0}}, INVALID, {": temperature = 0", NULL}},
    {"temperature -1", {{F_T, -1}}, INVALID, {": temperature = -1", NULL}},
    {"temperature NaN", {{F_T, NAN}}, INVALID, {": temperature = nan", NULL}},
    {"temperature +Inf", {{F_T, INFINITY}}, INVALID, {": temperature = inf", NULL}},
    {"temperature -Inf", {{F_T, -INFINITY}}, INVALID, {": temperature = -inf", NULL}},
    {"teacher_temperature -1", {{F_TT, -1}}, INVALID, {"teacher_temperature = -1", NULL}},
    {"teacher_temperature NaN", {{F_TT, NAN}}, INVALID, {"teacher_temperature = nan", NULL}},
    {"teacher_temperature Inf", {{F_TT, INFINITY}}, INVALID, {"teacher_temperature = inf", NULL}},
    /* in range for a double, out of range for the kernels' fp32 T, 1/T, T^2 (kljit.h) */
    {"temperature 5e-324", {{F_T, 5e-324}}, INVALID,
     {": temperature = 4.94066e-324", "[1e-18, 1e+18]"}},
    {"temperature 1e-39", {{F_T, 1e-39}}, INVALID, {": temperature = 1e-39", "[1e-18, 1e+18]"}},
    {"temperature 1e39", {{F_T, 1e39}}, INVALID, {": temperature = 1e+39", "[1e-18, 1e+18]"}},
    {"temperature 1e300", {{F_T, 1e300}}, INVALID, {": temperature = 1e+300", "[1e-18, 1e+18]"}},
    {"teacher_temperature 1e-300", {{F_TEACHER, KLJIT_TEACHER_DENSE_LOGITS}, {F_TT, 1e-300}},
     INVALID, {"teacher_temperature = 1e-300", "[1e-18, 1e+18]"}},
    {"reduction 0", {{F_REDUCTION, 0}}, INVALID, {"reduction = 0", NULL}},
    {"reduction 5", {{F_REDUCTION, 5}}, INVALID, {"reduction = 5", NULL}},
    {"label_dtype FP32", {{F_LABEL_DT, KLJIT_FP32}}, INVALID, {"label_dtype = 1", NULL}},
    {"label_dtype BF16", {{F_LABEL_DT, KLJIT_BF16}}, INVALID, {"label_dtype = 3", NULL}},
    {"eps 0", {{F_EPS, 0}}, INVALID, {"eps = 0", NULL}},
    {"eps -1e-20", {{F_EPS, -1e-20}}, INVALID, {"eps = -1e-20", NULL}},
    {"eps 1e-31", {{F_EPS, 1e-31}}, INVALID, {"eps = 1e-31", NULL}},
    {"eps 1e-3", {{F_EPS, 1e-3}}, INVALID, {"eps = 0.001", NULL}},
    {"eps NaN", {{F_EPS, NAN}}, INVALID, {"eps = nan", NULL}},
    {"eps Inf", {{F_EPS, INFINITY}}, INVALID, {"eps = inf", NULL}},
    {"grad_weight_dtype FP16 with BF16 weights", {{F_GW_DT, KLJIT_FP16}}, INVALID,
     {"grad_weight_dtype = FP16", "BF16"}},
    {"grad_weight_dtype BF16 with FP16 weights",
     {{F_INPUT_DT, KLJIT_FP16}, {F_WEIGHT_DT, KLJIT_FP16}, {F_GW_DT, KLJIT_BF16}}, INVALID,
     {"grad_weight_dtype = BF16", "FP16"}},
    {"grad_weight_dtype INT32", {{F_GW_DT, KLJIT_INT32}}, INVALID,
     {"grad_weight_dtype = INT32", NULL}},
    {"grad_weight_accum 0", {{F_ACCUM, 0}}, INVALID, {"grad_weight_accum = 0", NULL}},
    {"grad_weight_accum 4", {{F_ACCUM, 4}}, INVALID, {"grad_weight_accum = 4", NULL}},
    {"flags bit 8", {{F_FLAGS, 1u << 8}}, INVALID, {"flags = 0x100", "0x100"}},
    {"divergence 0", {{F_DIV, 0}}, INVALID, {"divergence = 0", NULL}},
    {"divergence 7", {{F_DIV, 7}}, INVALID, {"divergence = 7", NULL}},
    {"skew forward alpha 1", {SKEWF(1.0)}, INVALID, {"skew_alpha = 1", "[0, 1)"}},
    {"skew reverse alpha -0.1", {SKEWR(-0.1)}, INVALID, {"skew_alpha = -0.1", "skew reverse"}},
    {"skew alpha NaN", {SKEWF(NAN)}, INVALID, {"skew_alpha = nan", NULL}},
    {"skew_alpha without a skew KL", {JSD(0.5), {F_ALPHA, 0.5}}, INVALID,
     {"skew_alpha = 0.5", "only KLJIT_DIVERGENCE_SKEW_FORWARD_KL"}},
    {"label_smoothing 1.5", {{F_HARD, 1}, {F_LS, 1.5}}, INVALID, {"label_smoothing = 1.5", NULL}},
    {"label_smoothing -0.1", {{F_HARD, 1}, {F_LS, -0.1}}, INVALID,
     {"label_smoothing = -0.1", "[0, 1]"}},
    {"label_smoothing NaN", {{F_HARD, 1}, {F_LS, NAN}}, INVALID, {"label_smoothing = nan", NULL}},
    {"z_loss -1e-4", {{F_HARD, 1}, {F_ZL, -1e-4}}, INVALID, {"z_loss = -0.0001", NULL}},
    {"z_loss Inf", {{F_HARD, 1}, {F_ZL, INFINITY}}, INVALID, {"z_loss = inf", NULL}},
    {"z_loss 1e7", {{F_HARD, 1}, {F_ZL, 1e7}}, INVALID, {"z_loss = 1e+07", NULL}},
    {"label_smoothing without the CE", {{F_LS, 0.1}}, INVALID,
     {"label_smoothing = 0.1", "hard_weight = 0"}},
    {"z_loss without the CE", {{F_ZL, 1e-4}}, INVALID, {"z_loss = 0.0001", "hard-label CE"}},
    {"JSD beta -0.5", {JSD(-0.5)}, INVALID, {"beta = -0.5", "[0, 1]"}},
    {"JSD beta 1.5", {JSD(1.5)}, INVALID, {"beta = 1.5", "[0, 1]"}},
    {"JSD beta NaN", {JSD(NAN)}, INVALID, {"beta = nan", NULL}},
    {"beta without JSD", {{F_BETA, 0.5}}, INVALID, {"beta = 0.5", "only KLJIT_DIVERGENCE_JSD"}},
    {"hard_weight -1", {{F_HARD, -1}}, INVALID, {"hard_weight = -1", NULL}},
    {"hard_weight Inf", {{F_HARD, INFINITY}}, INVALID, {"hard_weight = inf", NULL}},
    {"soft_weight NaN", {{F_SOFT, NAN}}, INVALID, {"soft_weight = nan", NULL}},
    {"both weights 0", {{F_SOFT, 0}}, INVALID, {"hard_weight = soft_weight = 0", NULL}},
    {"softcap -30", {{F_CAP, -30}}, INVALID, {"softcap = -30", NULL}},
    {"softcap 1e7", {{F_CAP, 1e7}}, INVALID, {"softcap = 1e+07", NULL}},
    {"softcap NaN", {{F_CAP, NAN}}, INVALID, {"softcap = nan", NULL}},
    {"teacher_softcap on probs", {{F_TCAP, 30}}, INVALID,
     {"teacher_softcap = 30", "KLJIT_TEACHER_DENSE_LOGITS"}},
    {"teacher_softcap Inf", {{F_TEACHER, KLJIT_TEACHER_DENSE_LOGITS}, {F_TCAP, INFINITY}},
     INVALID, {"teacher_softcap = inf", NULL}},
    {"teacher_vocab below vocab", {{F_TVOCAB, 999}}, INVALID, {"teacher_vocab = 999", NULL}},
    {"teacher_vocab above 2^24", {{F_TVOCAB, (1 << 24) + 1}}, INVALID,
     {"teacher_vocab = 16777217", NULL}},
    {"teacher_ld below teacher_vocab", {{F_TVOCAB, 1024}, {F_TLD, 1016}}, INVALID,
     {"teacher_ld = 1016", "1024"}},
    {"teacher_ld below vocab", {{F_TLD, 8}}, INVALID, {"teacher_ld = 8", NULL}},
    {"teacher_hidden without the online teacher", {{F_THIDDEN, 64}}, INVALID,
     {"teacher_hidden = 64", "KLJIT_TEACHER_DENSE_HIDDEN"}},
    {"teacher bias without the online teacher", {{F_FLAGS, KLJIT_FLAG_TEACHER_BIAS}}, INVALID,
     {"KLJIT_FLAG_TEACHER_BIAS", NULL}},
    {"online teacher without teacher_hidden", {{F_TEACHER, KLJIT_TEACHER_DENSE_HIDDEN}}, INVALID,
     {"teacher_hidden = 0", NULL}},
    {"online teacher with a teacher_ld",
     {{F_TEACHER, KLJIT_TEACHER_DENSE_HIDDEN}, {F_THIDDEN, 32}, {F_TLD, 1024}}, INVALID,
     {"teacher_ld = 1024", "chunk buffer"}},
    {"flags bit 31 with BIAS", {{F_FLAGS, (double)(0x80000000u | KLJIT_FLAG_BIAS)}}, INVALID,
     {"flags = 0x80000001", "unknown bits 0x80000000"}},
};

static int expect_check(const kljit_problem *pb, const char *what, kljit_status want,
                        const char *const msg[2]) {
  const kljit_status st = kljit_plan_check(pb);
  const char *e = kljit_last_error();
  int ok = st == want;
  if (want != KLJIT_SUCCESS) {
    ok = ok && strncmp(e, "kljit_plan_check: ", 18) == 0;
    for (int k = 0; k < 2; k++) ok = ok && (!msg[k] || strstr(e, msg[k]) != NULL);
  } else {
    ok = ok && e[0] == '\0';
  }
  if (!ok)
    fprintf(stderr, "%s: got %s \"%s\", want %s with \"%s\" and \"%s\"\n", what,
            kljit_status_string(st), e, kljit_status_string(want), msg && msg[0] ? msg[0] : "",
            msg && msg[1] ? msg[1] : "");
  return ok;
}

static int run_table(const check_case *t, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    kljit_problem pb = valid_problem();
    /* every assignment of the entry (the table's widest entries set 5 fields) */
    for (size_t k = 0; k < sizeof t[i].set / sizeof t[i].set[0]; k++)
      set_field(&pb, t[i].set[k].f, t[i].set[k].v);
    bad += !expect_check(&pb, t[i].what, t[i].want, t[i].msg);
  }
  return bad;
}

static int plan_check_rejects_each_invalid_field_naming_it_and_its_value(void) {
  int bad = run_table(rejected, sizeof rejected / sizeof rejected[0]);
  kljit_problem pb = valid_problem();
  const char *const null_msg[2] = {"problem is NULL", NULL};
  bad += !expect_check(NULL, "NULL problem", KLJIT_ERR_INVALID_ARGUMENT, null_msg);
  /* (sizes from the first release up: problem_structs_from_the_first_released_size_up_...) */
  pb.struct_size = KLJIT_PROBLEM_MIN_SIZE - sizeof(uint32_t);
  char shorter[64];
  snprintf(shorter, sizeof shorter, "problem->struct_size = %zu", pb.struct_size);
  const char *const short_msg[2] = {shorter, "KLJIT_PROBLEM_INIT"};
  bad += !expect_check(&pb, "struct_size below the first released struct",
                       KLJIT_ERR_INVALID_ARGUMENT, short_msg);
  if (bad) fprintf(stderr, "%d problems got the wrong status or message\n", bad);
  return bad ? TH_FAIL : TH_PASS;
}

static const check_case accepted[] = {
    {"hidden 1, vocab 2", {{F_HIDDEN, 1}, {F_VOCAB, 2}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"hidden 2^20, vocab 2^24", {{F_HIDDEN, 1 << 20}, {F_VOCAB, 1 << 24}}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"fp32 everywhere", {{F_INPUT_DT, KLJIT_FP32}, {F_WEIGHT_DT, KLJIT_FP32},
                         {F_TEACHER_DT, KLJIT_FP32}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"fp16 with fp16 dW", {{F_INPUT_DT, KLJIT_FP16}, {F_WEIGHT_DT, KLJIT_FP16},
                           {F_GW_DT, KLJIT_FP16}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"bf16 dW accumulated in bf16", {{F_GW_DT, KLJIT_BF16}, {F_ACCUM, KLJIT_ACCUM_OUTPUT_DTYPE}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"dense logprobs", {{F_TEACHER, KLJIT_TEACHER_DENSE_LOGPROBS}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"dense logits, own T", {{F_TEACHER, KLJIT_TEACHER_DENSE_LOGITS}, {F_TT, 2.5}, {F_T, 0.5}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"runtime temperature", {{F_TMODE, KLJIT_TEMPERATURE_RUNTIME}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"every reduction: sum", {{F_REDUCTION, KLJIT_REDUCTION_SUM}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"every reduction: mean", {{F_REDUCTION, KLJIT_REDUCTION_MEAN}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"every reduction: none", {{F_REDUCTION, KLJIT_REDUCTION_NONE}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"int32 labels", {{F_LABEL_DT, KLJIT_INT32}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"eps just under 1e-3", {{F_EPS, 0.00099}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"smallest eps 1e-30", {{F_EPS, 1e-30}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"every implemented flag",
     {{F_FLAGS, KLJIT_FLAG_BIAS | KLJIT_FLAG_SCALE_T_SQUARED | KLJIT_FLAG_NATIVE_LOGITS |
                    KLJIT_FLAG_ALLOW_TF32}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"smallest temperature", {{F_T, KLJIT_TEMPERATURE_MIN}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"largest temperature", {{F_T, KLJIT_TEMPERATURE_MAX}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"largest teacher temperature",
     {{F_TEACHER, KLJIT_TEACHER_DENSE_LOGITS}, {F_TT, KLJIT_TEMPERATURE_MAX}}, KLJIT_SUCCESS,
     {NULL, NULL}},
};

static int plan_check_accepts_valid_problems_at_the_limits(void) {
  const int bad = run_table(accepted, sizeof accepted / sizeof accepted[0]);
  return bad ? TH_FAIL : TH_PASS;
}

/* Valid problems outside what the row kernels compute, or whose math is undefined on the
 * sparse support: KLJIT_ERR_UNSUPPORTED with a sentence, never a plan that computes something
 * else. The defaults spelled out (and JSD's end point beta = 0, the forward KL) are accepted. */
static const check_case families[] = {
    {"sparse reverse KL, TAIL_NONE", {SPARSE, {F_DIV, KLJIT_DIVERGENCE_REVERSE_KL}},
     UNSUPPORTED, {"KLJIT_TAIL_NONE takes the forward KL only", "reverse KL"}},
    {"sparse JSD, TAIL_NONE", {SPARSE, JSD(0.5)}, UNSUPPORTED,
     {"forward KL only", "KLJIT_TAIL_BUCKET"}},
    {"sparse reverse KL, BUCKET", {SPARSE, {F_TAIL, KLJIT_TAIL_BUCKET},
     {F_DIV, KLJIT_DIVERGENCE_REVERSE_KL}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse JSD, RENORM, CE and softcap", {SPARSE, {F_TAIL, KLJIT_TAIL_RENORM}, JSD(0.5),
     {F_HARD, 0.5}, {F_CAP, 30}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sharded sparse JSD, BUCKET", {SPARSE, {F_TAIL, KLJIT_TAIL_BUCKET}, JSD(0.25),
     {F_VTOT, 2000}, {F_SHARDS, 2}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse JSD 0 with TAIL_NONE (the forward KL)", {SPARSE, JSD(0.0)}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"sparse CE mixing", {SPARSE, {F_HARD, 0.5}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse soft weight", {SPARSE, {F_SOFT, 0.25}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse softcap", {SPARSE, {F_CAP, 30}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sharded sparse CE mixing", {SPARSE, {F_VTOT, 2000}, {F_SHARDS, 2}, {F_HARD, 1}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"online teacher, checked", {{F_TEACHER, KLJIT_TEACHER_DENSE_HIDDEN}, {F_THIDDEN, 32},
     {F_FLAGS, KLJIT_FLAG_CHECK_INPUTS}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse padded teacher", {SPARSE, {F_TVOCAB, 1024}}, UNSUPPORTED,
     {"teacher_vocab / teacher_ld", "student vocabulary"}},
    {"sharded padded teacher", {{F_VTOT, 2000}, {F_SHARDS, 2}, {F_TLD, 1024}}, UNSUPPORTED,
     {"sharded head", "contiguous"}},
    {"the defaults spelled out",
     {{F_DIV, KLJIT_DIVERGENCE_FORWARD_KL}, {F_SOFT, 1}, {F_TVOCAB, 1000}, {F_TLD, 1000}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"JSD 0 (the forward KL)", {JSD(0.0)}, KLJIT_SUCCESS, {NULL, NULL}},
    {"reverse KL", {{F_DIV, KLJIT_DIVERGENCE_REVERSE_KL}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"online teacher", {{F_TEACHER, KLJIT_TEACHER_DENSE_HIDDEN}, {F_THIDDEN, 32}}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"online teacher, padded head, softcapped", {{F_TEACHER, KLJIT_TEACHER_DENSE_HIDDEN},
     {F_THIDDEN, 2048}, {F_TVOCAB, 1024}, {F_TCAP, 30}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"online teacher with a bias", {{F_TEACHER, KLJIT_TEACHER_DENSE_HIDDEN}, {F_THIDDEN, 32},
     {F_FLAGS, KLJIT_FLAG_TEACHER_BIAS}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"JSD 0.5", {JSD(0.5)}, KLJIT_SUCCESS, {NULL, NULL}},
    {"JSD 1 (the reverse KL)", {JSD(1.0)}, KLJIT_SUCCESS, {NULL, NULL}},
    {"JSD with CE and softcap", {JSD(0.5), {F_HARD, 0.5}, {F_CAP, 30}}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"student softcap", {{F_CAP, 30}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"CE mixing", {{F_HARD, 0.5}, {F_SOFT, 0.5}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"CE only", {{F_HARD, 1}, {F_SOFT, 0}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"soft weight alone", {{F_SOFT, 0.25}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"both softcaps", {{F_TEACHER, KLJIT_TEACHER_DENSE_LOGITS}, {F_TCAP, 50}, {F_CAP, 1e6}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"padded teacher", {{F_TVOCAB, 1024}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"padded teacher with its own stride", {{F_TVOCAB, 1024}, {F_TLD, 1031}}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"sharded softcap", {{F_VTOT, 2000}, {F_SHARDS, 2}, {F_CAP, 30}}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"sharded reverse KL", {{F_VTOT, 2000}, {F_SHARDS, 2}, {F_DIV, KLJIT_DIVERGENCE_REVERSE_KL}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"sharded JSD with CE mixing", {{F_VTOT, 2000}, {F_SHARDS, 2}, JSD(0.5), {F_HARD, 1}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"sharded online teacher", {{F_VTOT, 2000}, {F_SHARDS, 2},
     {F_TEACHER, KLJIT_TEACHER_DENSE_HIDDEN}, {F_THIDDEN, 32}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse JSD 0", {SPARSE, JSD(0.0)}, KLJIT_SUCCESS, {NULL, NULL}},
    /* issue 29: TVD, the skew KLs, row weights, the CE's extras (dense teachers) */
    {"TVD", {TVD}, KLJIT_SUCCESS, {NULL, NULL}},
    {"skew forward KL 0.1", {SKEWF(0.1)}, KLJIT_SUCCESS, {NULL, NULL}},
    {"skew reverse KL 0 (the reverse KL)", {SKEWR(0.0)}, KLJIT_SUCCESS, {NULL, NULL}},
    {"skew reverse KL with CE, smoothing and z-loss",
     {SKEWR(0.5), {F_HARD, 0.5}, {F_LS, 0.1}, {F_ZL, 1e-4}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"label smoothing 1 with the z-loss at its bound", {{F_HARD, 1}, {F_LS, 1}, {F_ZL, 1e6}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"row weights, checked", {{F_FLAGS, KLJIT_FLAG_ROW_WEIGHTS | KLJIT_FLAG_CHECK_INPUTS}},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"online teacher TVD with row weights", {{F_TEACHER, KLJIT_TEACHER_DENSE_HIDDEN},
     {F_THIDDEN, 32}, TVD, {F_FLAGS, KLJIT_FLAG_ROW_WEIGHTS}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sharded TVD with smoothed CE", {{F_VTOT, 2000}, {F_SHARDS, 2}, TVD, {F_HARD, 1},
     {F_LS, 0.1}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sharded skew forward KL with row weights", {{F_VTOT, 2000}, {F_SHARDS, 2}, SKEWF(0.3),
     {F_FLAGS, KLJIT_FLAG_ROW_WEIGHTS}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse TVD", {SPARSE, TVD}, UNSUPPORTED, {"forward KL only", "the TVD"}},
    {"sparse skew reverse KL", {SPARSE, SKEWR(0.1)}, UNSUPPORTED, {"skew reverse KL", NULL}},
    {"sparse skew forward KL 0 (the forward KL)", {SPARSE, SKEWF(0.0)}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"sparse TVD, BUCKET", {SPARSE, {F_TAIL, KLJIT_TAIL_BUCKET}, TVD}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"sparse TVD, RENORM, row weights, CE", {SPARSE, {F_TAIL, KLJIT_TAIL_RENORM}, TVD,
     {F_HARD, 1}, {F_FLAGS, KLJIT_FLAG_ROW_WEIGHTS}}, KLJIT_SUCCESS, {NULL, NULL}},
    /* issue 29's last items: the skew KLs over the top-K categories (refused without a tail) */
    {"sparse skew forward KL, RENORM", {SPARSE, {F_TAIL, KLJIT_TAIL_RENORM}, SKEWF(0.2)},
     KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse skew forward KL, TAIL_NONE", {SPARSE, SKEWF(0.2)}, UNSUPPORTED,
     {"KLJIT_TAIL_NONE takes the forward KL only", "the skew forward KL weighs"}},
    {"sparse skew reverse KL, BUCKET, CE and row weights", {SPARSE, {F_TAIL, KLJIT_TAIL_BUCKET},
     SKEWR(0.7), {F_HARD, 0.5}, {F_FLAGS, KLJIT_FLAG_ROW_WEIGHTS}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sharded sparse skew forward KL, BUCKET", {SPARSE, {F_TAIL, KLJIT_TAIL_BUCKET}, SKEWF(0.4),
     {F_VTOT, 2000}, {F_SHARDS, 2}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse skew reverse KL at alpha 1", {SPARSE, {F_TAIL, KLJIT_TAIL_RENORM}, SKEWR(1.0)},
     INVALID, {"skew_alpha = 1", "[0, 1)"}},
    {"sparse skew reverse KL 0 (the reverse KL), BUCKET",
     {SPARSE, {F_TAIL, KLJIT_TAIL_BUCKET}, SKEWR(0.0)}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse row weights", {SPARSE, {F_FLAGS, KLJIT_FLAG_ROW_WEIGHTS}}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"sparse row weights, checked, the JSD over the tail with CE",
     {SPARSE, {F_TAIL, KLJIT_TAIL_BUCKET}, {F_DIV, KLJIT_DIVERGENCE_JSD}, {F_BETA, 0.5},
      {F_HARD, 1}, {F_FLAGS, KLJIT_FLAG_ROW_WEIGHTS | KLJIT_FLAG_CHECK_INPUTS}},
     KLJIT_SUCCESS, {NULL, NULL}},
    /* ... and the CE's label smoothing and z-loss (every tail; their range is the dense one's) */
    {"sparse label smoothing", {SPARSE, {F_HARD, 1}, {F_LS, 0.1}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse z-loss", {SPARSE, {F_HARD, 1}, {F_ZL, 1e-4}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse skew reverse KL, RENORM, CE smoothed 1",
     {SPARSE, {F_TAIL, KLJIT_TAIL_RENORM}, SKEWR(0.5), {F_HARD, 0.5}, {F_LS, 1}}, KLJIT_SUCCESS,
     {NULL, NULL}},
    {"sharded sparse z-loss at its bound", {SPARSE, {F_HARD, 1}, {F_ZL, 1e6}, {F_VTOT, 2000},
     {F_SHARDS, 2}}, KLJIT_SUCCESS, {NULL, NULL}},
    {"sparse label smoothing without the CE", {SPARSE, {F_LS, 0.1}}, INVALID,
     {"label_smoothing = 0.1", "hard_weight = 0"}},
    {"sparse z-loss 1e7", {SPARSE, {F_HARD, 1}, {F_ZL, 1e7}}, INVALID, {"z_loss = 1e+07", NULL}},
};

static int plan_check_refuses_loss_families_its_kernels_lack_with_a_sentence(void) {
  const int bad = run_table(families, sizeof families / sizeof families[0]);
  return bad ? TH_FAIL : TH_PASS;
}

static int plan_check_accepts_sparse_and_checked_problems(void) {
  /* every tail, value form and id width of the sparse teacher, K from 1 to 1024 */
  for (int tail = KLJIT_TAIL_NONE; tail <= KLJIT_TAIL_BUCKET; tail++)
    for (int k = 0; k < 3; k++) {
      kljit_problem pb = valid_problem();
      pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = k == 0 ? 1 : k == 1 ? 100 : 1024;
      pb.vocab = 50257;
      pb.tail = (kljit_tail)tail;
      pb.topk_id_dtype = k % 2 ? KLJIT_INT32 : KLJIT_INT64;
      pb.topk_values = k % 2 ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
      pb.flags = k == 2 ? KLJIT_FLAG_CHECK_INPUTS : 0u;
      TH_OK(kljit_plan_check(&pb));
    }
  kljit_problem pb = valid_problem();
  pb.flags = KLJIT_FLAG_CHECK_INPUTS | KLJIT_FLAG_BIAS;
  TH_OK(kljit_plan_check(&pb));
  /* an invalid field is still reported with checked mode on */
  pb.eps = 0;
  const char *const eps_msg[2] = {"eps = 0", NULL};
  TH_CHECK(expect_check(&pb, "checked mode with eps 0", KLJIT_ERR_INVALID_ARGUMENT, eps_msg));
  return TH_PASS;
}

static int plan_check_success_clears_the_last_error(void) {
  TH_STATUS(kljit_plan_check(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(kljit_last_error()[0] != '\0');
  kljit_problem pb = valid_problem();
  TH_OK(kljit_plan_check(&pb));
  TH_CHECK(strcmp(kljit_last_error(), "") == 0);
  /* the caller's struct is only read */
  const kljit_problem copy = pb;
  TH_OK(kljit_plan_check(&pb));
  TH_CHECK(memcmp(&copy, &pb, sizeof pb) == 0);
  return TH_PASS;
}

/* ---- struct_size: from the first released size up --------------------------------------- */

/* kljit_plan_check on the first `size` bytes of a valid problem, with struct_size = size, in a
 * buffer whose bytes past `size` are `tail` (0xff: whatever a shorter struct's neighbour holds,
 * which the library must not read; 0: a longer struct leaving the fields it adds unset). */
static kljit_status check_sized(size_t size, unsigned char tail) {
  kljit_problem pb = valid_problem();
  const size_t cap = sizeof pb + 64;
  unsigned char *buf = malloc(cap);
  if (!buf) return KLJIT_ERR_OUT_OF_MEMORY;
  memset(buf, tail, cap);
  memcpy(buf, &pb, size < sizeof pb ? size : sizeof pb);
  if (size > sizeof pb) memset(buf + sizeof pb, 0, size - sizeof pb);
  memcpy(buf, &size, sizeof size); /* struct_size is the first member */
  const kljit_status st = kljit_plan_check((const kljit_problem *)buf);
  free(buf);
  return st;
}

static int problem_structs_from_the_first_released_size_up_are_accepted(void) {
  /* one field shorter (no `shards`), and the first released size (no tensor-parallel fields):
   * the missing fields take their defaults, whatever lies past the struct */
  TH_OK(check_sized(offsetof(kljit_problem, shards), 0xff));
  TH_OK(check_sized(KLJIT_PROBLEM_MIN_SIZE, 0xff));
  /* the struct before the loss-family fields: forward KL, soft weight 1, no caps or padding */
  TH_OK(check_sized(offsetof(kljit_problem, divergence), 0xff));
  TH_OK(check_sized(sizeof(kljit_problem), 0xff));
  /* a newer header's larger struct, its new fields unset */
  TH_OK(check_sized(sizeof(kljit_problem) + 16, 0));
  /* shorter than anything released */
  TH_STATUS(check_sized(KLJIT_PROBLEM_MIN_SIZE - 8, 0xff), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "struct_size") != NULL);
  TH_STATUS(check_sized(0, 0xff), KLJIT_ERR_INVALID_ARGUMENT);
  /* a newer struct that sets a field this library does not know */
  kljit_problem pb = valid_problem();
  unsigned char buf[sizeof pb + 8];
  memset(buf, 0, sizeof buf);
  pb.struct_size = sizeof buf;
  memcpy(buf, &pb, sizeof pb);
  buf[sizeof pb + 3] = 1;
  TH_STATUS(kljit_plan_check((const kljit_problem *)buf), KLJIT_ERR_UNSUPPORTED);
  TH_CHECK(strstr(kljit_last_error(), "newer") != NULL);
  return TH_PASS;
}

/* Every call that returns a status clears the last error on entry: a success after a failure
 * leaves "" (the header's promise), not the earlier failure's text. The functions that cannot
 * fail never touch it. */
static int a_success_after_a_failure_leaves_the_last_error_empty(void) {
  kljit_versions v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  TH_STATUS(kljit_plan_check(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_OK(kljit_get_versions(&v));
  TH_CHECK(strcmp(kljit_last_error(), "") == 0);

  char dir[] = "/tmp/kljit-api-pre-XXXXXX";
  TH_CHECK(mkdtemp(dir) != NULL);
  kljit_problem pb = valid_problem();
  TH_STATUS(kljit_plan_check(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  const kljit_status pre = kljit_precompile(&pb, 90, dir, KLJIT_PRECOMPILE_DRY_RUN, NULL, NULL);
  const int cleared = strcmp(kljit_last_error(), "") == 0;
  rmdir(dir);
  TH_OK(pre);
  TH_CHECK(cleared);

  char *text = NULL;
  TH_STATUS(kljit_plan_check(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_OK(kljit_wisdom_export_string(&text));
  TH_CHECK(strcmp(kljit_last_error(), "") == 0);
  /* kljit_free, kljit_status_string and the version getters leave a failure's text alone, so
   * it can be printed after them */
  TH_STATUS(kljit_plan_check(NULL), KLJIT_ERR_INVALID_ARGUMENT);
  kljit_free(text);
  (void)kljit_status_string(KLJIT_ERR_INVALID_ARGUMENT);
  (void)kljit_version();
  kljit_plan_destroy(NULL);
  TH_CHECK(strstr(kljit_last_error(), "problem is NULL") != NULL);
  return TH_PASS;
}

/* ---- thread-local last error ------------------------------------------------------------ */

typedef struct tl_state {
  pthread_barrier_t step;
  int started_empty, own_kept;
  const char *where;
} tl_state;

static void *tl_thread(void *arg) {
  tl_state *s = arg;
  s->started_empty = kljit_last_error()[0] == '\0'; /* the main thread's error is not seen */
  kljit_problem pb = valid_problem();
  pb.vocab = 1;
  kljit_plan_check(&pb); /* this thread: "vocab = 1" */
  s->where = kljit_last_error();
  pthread_barrier_wait(&s->step); /* 1: main checks its own error, then clears it */
  pthread_barrier_wait(&s->step); /* 2: main has succeeded, which clears only its own */
  s->own_kept = strstr(kljit_last_error(), "vocab = 1") != NULL;
  return NULL;
}

static int last_error_is_thread_local(void) {
  kljit_problem pb = valid_problem();
  pb.hidden = 0;
  TH_STATUS(kljit_plan_check(&pb), KLJIT_ERR_INVALID_ARGUMENT); /* main: "hidden = 0" */
  tl_state s;
  memset(&s, 0, sizeof s);
  TH_CHECK(pthread_barrier_init(&s.step, NULL, 2) == 0);
  pthread_t t;
  TH_CHECK(pthread_create(&t, NULL, tl_thread, &s) == 0);
  pthread_barrier_wait(&s.step); /* 1 */
  const int main_kept = strstr(kljit_last_error(), "hidden = 0") != NULL &&
                        strstr(kljit_last_error(), "vocab") == NULL;
  pb.hidden = 64;
  const kljit_status st = kljit_plan_check(&pb);
  pthread_barrier_wait(&s.step); /* 2 */
  pthread_join(t, NULL);
  pthread_barrier_destroy(&s.step);
  TH_CHECK(st == KLJIT_SUCCESS);
  TH_CHECK(s.started_empty);
  TH_CHECK(main_kept);
  TH_CHECK(s.own_kept);
  TH_CHECK(s.where != kljit_last_error()); /* each thread has its own buffer */
  TH_CHECK(strcmp(kljit_last_error(), "") == 0);
  return TH_PASS;
}

/* ---- calls with a NULL plan ------------------------------------------------------------- */

static int null_plan_queries_are_rejected_and_write_nothing(void) {
  const size_t sentinel = (size_t)0x5a5a5a5a;
  const kljit_mode modes[] = {KLJIT_MODE_FUSED, KLJIT_MODE_FORWARD, KLJIT_MODE_BACKWARD};
  for (int m = 0; m < 3; m++) {
    size_t bytes = sentinel;
    TH_STATUS(kljit_plan_workspace_size(NULL, modes[m], 8, &bytes), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(bytes == sentinel);
    TH_CHECK(strstr(kljit_last_error(), "kljit_plan_workspace_size") != NULL);
    TH_CHECK(strstr(kljit_last_error(), "plan") != NULL);
  }
  TH_STATUS(kljit_plan_workspace_size(NULL, KLJIT_MODE_FUSED, 8, NULL),
            KLJIT_ERR_INVALID_ARGUMENT);
  size_t bytes = sentinel;
  TH_STATUS(kljit_plan_saved_size(NULL, 8, &bytes), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(bytes == sentinel);
  TH_CHECK(strstr(kljit_last_error(), "kljit_plan_saved_size") != NULL);
  TH_STATUS(kljit_plan_saved_size(NULL, 8, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  const char *d = kljit_plan_describe(NULL);
  TH_CHECK(d != NULL && d[0] == '\0');
  return TH_PASS;
}

typedef kljit_status (*exec_fn)(const kljit_plan *, void *, const kljit_args *);

static int null_plan_executions_are_rejected_and_write_nothing(void) {
  const exec_fn fns[] = {kljit_fused, kljit_forward, kljit_backward, kljit_scale_grads};
  const char *names[] = {"kljit_fused", "kljit_forward", "kljit_backward", "kljit_scale_grads"};
  /* Host buffers stand in for the outputs: with no plan nothing may touch them. */
  enum { N = 64 };
  float loss[N], saved[N], gin[N], gw[N], ws[N], ref[N];
  memset(ref, 0xFF, sizeof ref);
  for (int i = 0; i < 4; i++) {
    memset(loss, 0xFF, sizeof loss), memset(saved, 0xFF, sizeof saved);
    memset(gin, 0xFF, sizeof gin), memset(gw, 0xFF, sizeof gw), memset(ws, 0xFF, sizeof ws);
    kljit_args a = KLJIT_ARGS_INIT;
    a.rows = 4, a.input = ref, a.weight = ref, a.teacher = ref, a.grad_output = ref;
    a.loss = loss, a.saved = saved, a.grad_input = gin, a.grad_weight = gw;
    a.workspace = ws, a.workspace_size = sizeof ws;
    TH_STATUS(fns[i](NULL, NULL, &a), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(strstr(kljit_last_error(), names[i]) != NULL);
    TH_CHECK(strstr(kljit_last_error(), "plan is NULL") != NULL);
    TH_CHECK(memcmp(loss, ref, sizeof ref) == 0 && memcmp(saved, ref, sizeof ref) == 0);
    TH_CHECK(memcmp(gin, ref, sizeof ref) == 0 && memcmp(gw, ref, sizeof ref) == 0);
    TH_CHECK(memcmp(ws, ref, sizeof ref) == 0);
    TH_STATUS(fns[i](NULL, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  }
  return TH_PASS;
}

static const th_case cases[] = {
    {"version_macros_match_the_loaded_library", version_macros_match_the_loaded_library},
    {"every_status_has_a_distinct_string_starting_with_its_name",
     every_status_has_a_distinct_string_starting_with_its_name},
    {"unknown_status_values_still_get_a_string", unknown_status_values_still_get_a_string},
    {"destroying_a_null_context_or_plan_is_a_no_op", destroying_a_null_context_or_plan_is_a_no_op},
    {"context_create_without_a_gpu_reports_no_device",
     context_create_without_a_gpu_reports_no_device},
    {"context_create_rejects_null_out_negative_device_and_options",
     context_create_rejects_null_out_negative_device_and_options},
    {"plan_check_accepts_the_default_problem_with_sizes_set",
     plan_check_accepts_the_default_problem_with_sizes_set},
    {"plan_check_accepts_valid_problems_at_the_limits",
     plan_check_accepts_valid_problems_at_the_limits},
    {"plan_check_refuses_loss_families_its_kernels_lack_with_a_sentence",
     plan_check_refuses_loss_families_its_kernels_lack_with_a_sentence},
    {"plan_check_rejects_each_invalid_field_naming_it_and_its_value",
     plan_check_rejects_each_invalid_field_naming_it_and_its_value},
    {"plan_check_accepts_sparse_and_checked_problems",
     plan_check_accepts_sparse_and_checked_problems},
    {"plan_check_success_clears_the_last_error", plan_check_success_clears_the_last_error},
    {"last_error_is_thread_local", last_error_is_thread_local},
    {"context_options_default_to_the_environment", context_options_default_to_the_environment},
    {"problem_structs_from_the_first_released_size_up_are_accepted",
     problem_structs_from_the_first_released_size_up_are_accepted},
    {"a_success_after_a_failure_leaves_the_last_error_empty",
     a_success_after_a_failure_leaves_the_last_error_empty},
    {"null_plan_queries_are_rejected_and_write_nothing",
     null_plan_queries_are_rejected_and_write_nothing},
    {"null_plan_executions_are_rejected_and_write_nothing",
     null_plan_executions_are_rejected_and_write_nothing},
};
TH_MAIN(cases)
