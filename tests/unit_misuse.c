/* SPDX-License-Identifier: Apache-2.0 */
/* unit_misuse.c — the library against values no correct caller passes: struct sizes past the
 * caller's struct, weights and scales outside fp32, wisdom tunings no plan can use, tuned cuBLASLt
 * words from a file, templates that flood the manifest, writers racing on one wisdom file. Each
 * case is the regression test of a finding of a fault, fuzz and misuse run (issue 30). No GPU:
 * where a plan is needed, a fake one with a fake driver and cuBLASLt table stands in. */
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "context.h"
#include "cublaslt.h"
#include "gemm.h"
#include "harness.h"
#include "kljit_experimental.h"
#include "plan.h"
#include "template.h"
#include "wisdom.h"

/* ---- struct_size (finding 5) ------------------------------------------------------------- */

/* `size` readable bytes that end where a PROT_NONE page begins: a read past them faults. */
static void *before_guard_page(size_t size, void **map, size_t *map_len) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t pages = (size + page - 1) / page + 1;
  *map_len = pages * page;
  char *const m = mmap(NULL, *map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  if (mprotect(m + (pages - 1) * page, page, PROT_NONE) != 0) return NULL;
  *map = m;
  return m + (pages - 1) * page - size;
}

static CUresult fake_push(CUcontext c) {
  (void)c;
  return CUDA_SUCCESS;
}
static CUresult fake_pop(CUcontext *c) {
  if (c) *c = NULL;
  return CUDA_SUCCESS;
}

/* A plan of a valid problem on a fake context: enough for an execute's argument checks, which
 * come before anything touches a GPU. */
typedef struct fake_plan {
  drv_table d;
  kljit_context ctx;
  kljit_plan plan;
} fake_plan;
static void fake_plan_init(fake_plan *f) {
  memset(f, 0, sizeof *f);
  f->d.cuCtxPushCurrent = fake_push, f->d.cuCtxPopCurrent = fake_pop;
  f->ctx.drv = &f->d;
  f->plan.ctx = &f->ctx;
  const kljit_problem pb = KLJIT_PROBLEM_INIT;
  f->plan.pb = pb;
  f->plan.pb.vocab = 1000, f->plan.pb.hidden = 64;
}

/* A struct_size that claims more than the caller's struct (here 4 KiB past a guard page) used to
 * be read byte by byte up to that size (the check that unknown newer fields are zero): SIGSEGV.
 * Sizes above KLJIT_STRUCT_SIZE_MAX are refused unread; up to it, zero bytes are accepted. */
static int struct_size_past_the_maximum_is_refused_without_reading_it(void) {
  void *map = NULL;
  size_t len = 0;
  kljit_problem *pb = before_guard_page(sizeof *pb, &map, &len);
  TH_CHECK(pb != NULL);
  const kljit_problem init = KLJIT_PROBLEM_INIT;
  *pb = init;
  pb->vocab = 1000, pb->hidden = 64;
  pb->struct_size = sizeof *pb + 4096;
  TH_STATUS(kljit_plan_check(pb), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "struct_size") && strstr(kljit_last_error(), "1024"));
  munmap(map, len);

  kljit_context_options *o = before_guard_page(sizeof *o, &map, &len);
  TH_CHECK(o != NULL);
  TH_OK(kljit_context_options_default(o));
  o->struct_size = (size_t)1 << 40;
  kljit_context *ctx = NULL;
  TH_STATUS(kljit_context_create(&ctx, 0, o), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "options->struct_size"));
  munmap(map, len);

  fake_plan f;
  fake_plan_init(&f);
  kljit_args *a = before_guard_page(sizeof *a, &map, &len);
  TH_CHECK(a != NULL);
  const kljit_args ainit = KLJIT_ARGS_INIT;
  *a = ainit;
  a->rows = 1;
  a->struct_size = sizeof *a + 8192;
  TH_STATUS(kljit_fused(&f.plan, NULL, a), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "args->struct_size"));
  munmap(map, len);

  /* up to the maximum, a longer struct of zeros is a newer caller's: accepted */
  unsigned char *big = before_guard_page(KLJIT_STRUCT_SIZE_MAX, &map, &len);
  TH_CHECK(big != NULL);
  memset(big, 0, KLJIT_STRUCT_SIZE_MAX);
  memcpy(big, &init, sizeof init);
  ((kljit_problem *)big)->vocab = 1000, ((kljit_problem *)big)->hidden = 64;
  ((kljit_problem *)big)->struct_size = KLJIT_STRUCT_SIZE_MAX;
  TH_OK(kljit_plan_check((kljit_problem *)big));
  ((kljit_problem *)big)->struct_size = KLJIT_STRUCT_SIZE_MAX + 1;
  TH_STATUS(kljit_plan_check((kljit_problem *)big), KLJIT_ERR_INVALID_ARGUMENT);
  munmap(map, len);
  return TH_PASS;
}

/* ---- values outside fp32 (findings 4 and 12) --------------------------------------------- */

/* The weights and softcaps become fp32 literals in the kernels: 1e39 is no fp32, and a cap
 * below ~2.9e-39 makes 1/c overflow. Refused by kljit_plan_check (KLJIT_ERR_TEMPLATE at plan
 * creation before), with the same ranges the CLI states. */
static int plan_check_refuses_weights_and_softcaps_no_kernel_renders(void) {
  static const struct {
    const char *field;
    double value;
  } bad[] = {{"hard_weight", 1e39},     {"soft_weight", 1e39},     {"hard_weight", 2e6},
             {"softcap", 1e-40},        {"softcap", 1e-7},         {"teacher_softcap", 1e-40},
             {"teacher_softcap", 1e-300}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kljit_problem pb = KLJIT_PROBLEM_INIT;
    pb.vocab = 1000, pb.hidden = 64;
    pb.teacher = KLJIT_TEACHER_DENSE_LOGITS;
    if (!strcmp(bad[i].field, "hard_weight")) pb.hard_weight = bad[i].value;
    if (!strcmp(bad[i].field, "soft_weight")) pb.soft_weight = bad[i].value;
    if (!strcmp(bad[i].field, "softcap")) pb.softcap = bad[i].value;
    if (!strcmp(bad[i].field, "teacher_softcap")) pb.teacher_softcap = bad[i].value;
    fprintf(stderr, "%s = %g\n", bad[i].field, bad[i].value);
    TH_STATUS(kljit_plan_check(&pb), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(strstr(kljit_last_error(), bad[i].field) != NULL);
  }
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 1000, pb.hidden = 64, pb.teacher = KLJIT_TEACHER_DENSE_LOGITS;
  pb.hard_weight = 1e6, pb.softcap = 1e-6, pb.teacher_softcap = 1e6; /* the ends of the ranges */
  TH_OK(kljit_plan_check(&pb));
  return TH_PASS;
}

/* grad_scale goes into the GEMMs' fp32 alpha: a double past fp32's range became inf (or 0). */
static int grad_scale_outside_the_float_range_is_refused(void) {
  fake_plan f;
  fake_plan_init(&f);
  static const double bad[] = {1e300, 1e39, 1e-300, 1e-45};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kljit_args a = KLJIT_ARGS_INIT;
    a.rows = 1, a.grad_scale = bad[i];
    TH_STATUS(kljit_fused(&f.plan, NULL, &a), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(strstr(kljit_last_error(), "grad_scale") != NULL);
    TH_STATUS(kljit_scale_grads(&f.plan, NULL, &a), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(strstr(kljit_last_error(), "grad_scale") != NULL);
  }
  return TH_PASS;
}

/* ---- tuned cuBLASLt words (finding 12) --------------------------------------------------- */

static const uint64_t HEURISTIC_WORD = 0x4845555249535443u; /* what the fake heuristic gives */
static int checks;

static cublasStatus_t f_desc_create(cublasLtMatmulDesc_t *d, cublasComputeType_t c,
                                    cudaDataType_t s) {
  (void)c, (void)s;
  *d = (cublasLtMatmulDesc_t)(uintptr_t)1;
  return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t f_desc_destroy(cublasLtMatmulDesc_t d) {
  (void)d;
  return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t f_desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                 const void *v, size_t n) {
  (void)d, (void)a, (void)v, (void)n;
  return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t f_layout_create(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t r,
                                      uint64_t c, int64_t ld) {
  (void)t, (void)r, (void)c, (void)ld;
  *l = (cublasLtMatrixLayout_t)(uintptr_t)2;
  return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t f_layout_destroy(cublasLtMatrixLayout_t l) {
  (void)l;
  return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t f_pref_create(cublasLtMatmulPreference_t *p) {
  *p = (cublasLtMatmulPreference_t)(uintptr_t)3;
  return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t f_pref_destroy(cublasLtMatmulPreference_t p) {
  (void)p;
  return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t f_pref_set(cublasLtMatmulPreference_t p,
                                 cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t n) {
  (void)p, (void)a, (void)v, (void)n;
  return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t f_heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                  cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                  cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                  cublasLtMatmulPreference_t p, int want,
                                  cublasLtMatmulHeuristicResult_t *r, int *count) {
  (void)h, (void)d, (void)a, (void)b, (void)c, (void)dd, (void)p, (void)want;
  memset(r, 0, sizeof *r);
  r->algo.data[0] = HEURISTIC_WORD;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}
/* Accepts only algorithms whose first word is the heuristic's; asks for 1 GiB of workspace for
 * those whose second word is 1. */
static cublasStatus_t f_check(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                              cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t *algo,
                              cublasLtMatmulHeuristicResult_t *r) {
  (void)h, (void)d, (void)a, (void)b, (void)c, (void)dd;
  checks++;
  memset(r, 0, sizeof *r);
  r->workspaceSize = algo->data[1] == 1 ? (size_t)1 << 30 : 0;
  return algo->data[0] == HEURISTIC_WORD ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}
static const char *f_status(cublasStatus_t s) {
  return s ? "fake refusal" : "fake success";
}

/* A wisdom file's cuBLASLt words (tuned with the running version, so gemm_algo_find passes them
 * on) went to cublasLtMatmul as they were: a hand-edited or corrupted file could make cuBLASLt run
 * any algorithm configuration on the plan's shapes. gemm_prepare now asks cuBLASLt whether the
 * words are an algorithm for those shapes within the workspace, else takes the heuristic's. */
static int tuned_cublaslt_words_are_checked_before_use(void) {
  cublaslt_table *t = (cublaslt_table *)cublaslt_loaded(); /* the process's table, faked */
  const cublaslt_table saved = *t;
  t->cublasLtMatmulDescCreate = f_desc_create, t->cublasLtMatmulDescDestroy = f_desc_destroy;
  t->cublasLtMatmulDescSetAttribute = f_desc_set;
  t->cublasLtMatrixLayoutCreate = f_layout_create;
  t->cublasLtMatrixLayoutDestroy = f_layout_destroy;
  t->cublasLtMatmulPreferenceCreate = f_pref_create;
  t->cublasLtMatmulPreferenceDestroy = f_pref_destroy;
  t->cublasLtMatmulPreferenceSetAttribute = f_pref_set;
  t->cublasLtMatmulAlgoGetHeuristic = f_heuristic;
  t->cublasLtMatmulAlgoCheck = f_check;
  t->cublasLtGetStatusString = f_status;
  const gemm_types ty = {CUDA_R_16BF, CUDA_R_32F, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
  const gemm_shape sh = {1000, 64, 1000, 1000};
  int r = TH_PASS;
  cublasLtMatmulAlgo_t words;
  memset(&words, 0, sizeof words);
  words.data[0] = 0x0123456789abcdefu; /* not an algorithm cuBLASLt accepts */
  gemm_op op;
  for (int k = GEMM_LOGITS; k <= GEMM_DW && r == TH_PASS; k++) {
    checks = 0;
    if (gemm_prepare(NULL, &ty, &sh, (gemm_kind)k, 256, GEMM_WORKSPACE_BYTES, &words, &op) !=
            KLJIT_SUCCESS ||
        op.algo.data[0] != HEURISTIC_WORD || checks != 1)
      r = TH_FAIL;
    free(op.memo), op.memo = NULL;
  }
  /* accepted words, but needing more workspace than the plan has: the heuristic's too */
  words.data[0] = HEURISTIC_WORD, words.data[1] = 1, words.data[2] = 7;
  if (r == TH_PASS &&
      (gemm_prepare(NULL, &ty, &sh, GEMM_DX, 256, GEMM_WORKSPACE_BYTES, &words, &op) !=
           KLJIT_SUCCESS ||
       op.algo.data[2] == 7))
    r = TH_FAIL;
  free(op.memo), op.memo = NULL;
  /* good words are kept */
  words.data[1] = 0;
  if (r == TH_PASS &&
      (gemm_prepare(NULL, &ty, &sh, GEMM_DW, 256, GEMM_WORKSPACE_BYTES, &words, &op) !=
           KLJIT_SUCCESS ||
       op.algo.data[2] != 7))
    r = TH_FAIL;
  free(op.memo);
  *t = saved;
  return r;
}

/* ---- wisdom (findings 2 and 3) ----------------------------------------------------------- */

static const char H[] = "kljit-wisdom 1 kljit=" KLJIT_VERSION_STRING "\n";
#define ENTRY_KEY                                                                         \
  "gpu=\"NVIDIA H200\" arch=sm_90 sms=132 kljit=" KLJIT_VERSION_STRING                     \
  " V=50257 H=256 in=bf16 teacher=probs tdt=bf16 tmode=const flags=- bucket="
#define ENTRY_CHOICE                                                                      \
  " -> chunk_rows=2048 threads=256 split=4 cluster=0 nv=1 rigor=measure rows=8192 ms=1"
#define ENTRY_HEAD ENTRY_KEY "8192" ENTRY_CHOICE

static int imports(const char *line) {
  char text[4096];
  snprintf(text, sizeof text, "%s%s\n", H, line);
  const kljit_status st = kljit_wisdom_import_string(text);
  fprintf(stderr, "%s\n  -> %s %s\n", line, kljit_status_string(st), kljit_last_error());
  return st == KLJIT_SUCCESS;
}

/* A tuning is wisdom only if a plan can be made of it: the generated GEMM's variant must be one
 * its template renders, and the cluster row kernels need sm_90. Both used to be imported, and
 * `kljit precompile --wisdom` failed on them later. */
static int wisdom_in(const char *dir) {
  th_private_wisdom(dir);
  TH_CHECK(imports(ENTRY_HEAD " gemm=logits:2048:b0:jit:128.2.6.g.2"));
  TH_CHECK(!imports(ENTRY_HEAD " gemm=logits:2048:b0:jit:256.2.8.g.1"));
  TH_CHECK(strstr(kljit_last_error(), "unusable"));
  TH_CHECK(!imports(ENTRY_HEAD " gemm=logits:2048:b0:jit:100.2.4.m.1"));
  TH_CHECK(strstr(kljit_last_error(), "unusable"));
  /* the cluster tuning of an sm_90 entry, then the same on sm_80 */
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 50257, pb.hidden = 256;
  wisdom_entry e;
  memset(&e, 0, sizeof e);
  snprintf(e.gpu, sizeof e.gpu, "NVIDIA H200");
  e.arch = 90, e.sms = 132, e.bucket = 8192, e.rigor = KLJIT_PLAN_MEASURE, e.rows = 8192;
  e.ms = 1;
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  e.tune = prob_estimate(&pb, 90, &o);
  TH_CHECK(prob_cluster_tuning(&pb, 90, &e.tune) == 1 && e.tune.cluster > 0);
  wisdom_problem_key(&pb, e.problem);
  wisdom_problem_extra(&pb, e.extra);
  strbuf line = {0};
  TH_OK(wisdom_entry_text(&e, &line));
  TH_CHECK(imports(line.data));
  char *const arch = strstr(line.data, "arch=sm_90");
  TH_CHECK(arch != NULL);
  memcpy(arch, "arch=sm_80", 10);
  TH_CHECK(!imports(line.data));
  TH_CHECK(strstr(kljit_last_error(), "unusable") && strstr(kljit_last_error(), "sm_80"));
  sb_free(&line);
  return TH_PASS;
}
static int wisdom_refuses_tunings_no_plan_can_use(void) {
  return th_in_tmpdir("misuse-wisdom", wisdom_in);
}

enum { WRITERS = 16 };

/* `kljit tune --wisdom F` in many processes at once: each imports F, tunes (here: imports its
 * own entry, which is what the tuner's store does), then saves F. Saving by export (the whole
 * store, renamed over F) kept 1 of 16 entries; the CLI now merges into F under F's lock. */
static int concurrent_in(const char *dir) {
  char path[PATH_MAX];
  th_path_in(path, dir, "site.wisdom");
  pid_t kids[WRITERS];
  for (int i = 0; i < WRITERS; i++) {
    kids[i] = fork();
    TH_CHECK(kids[i] >= 0);
    if (kids[i] == 0) {
      th_private_wisdom(dir);
      kljit_wisdom_forget();
      if (access(path, F_OK) == 0 && kljit_wisdom_import_file(path) != KLJIT_SUCCESS) _exit(1);
      char text[4096]; /* one token bucket per writer: 16 distinct entries */
      snprintf(text, sizeof text, "%s" ENTRY_KEY "%d" ENTRY_CHOICE "\n", H, 1 << (i + 1));
      if (kljit_wisdom_import_string(text) != KLJIT_SUCCESS) {
        fprintf(stderr, "child %d: %s\n", i, kljit_last_error());
        _exit(2);
      }
      _exit(kljit_wisdom_merge_file(path) == KLJIT_SUCCESS ? 0 : 3);
    }
  }
  int failed = 0;
  for (int i = 0; i < WRITERS; i++) {
    int status = 0;
    waitpid(kids[i], &status, 0);
    failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  TH_CHECK(failed == 0);
  th_private_wisdom(dir);
  kljit_wisdom_forget();
  TH_OK(kljit_wisdom_import_file(path));
  char *text = NULL;
  TH_OK(kljit_wisdom_export_string(&text));
  int n = 0;
  for (const char *p = text; (p = strstr(p, "gpu=")); p++) n++;
  fprintf(stderr, "%d of %d entries kept\n", n, WRITERS);
  kljit_free(text);
  TH_CHECK(n == WRITERS);
  return TH_PASS;
}
static int concurrent_wisdom_merges_lose_no_entry(void) {
  return th_in_tmpdir("misuse-merge", concurrent_in);
}

/* ---- the renderer's caps (finding 11) ---------------------------------------------------- */

/* manifest_add() lines were outside the 64 MiB output cap: a template could grow the manifest
 * until the instruction budget ran out (2.3 GB). They count against the same cap now. */
static int manifest_in(const char *dir) {
  char path[PATH_MAX];
  th_path_in(path, dir, "flood.cu.lua");
  FILE *const f = fopen(path, "w");
  TH_CHECK(f != NULL);
  fputs("% local line = string.rep('x', 1 << 20)\n"
        "% for i = 1, 100 do manifest_add(line) end\n"
        "ok\n",
        f);
  TH_CHECK(fclose(f) == 0);
  setenv("KLJIT_TEMPLATE_DIR", dir, 1);
  strbuf src = {0}, manifest = {0};
  const kljit_status st = render_template_iface("flood.cu.lua", NULL, 0, &src, &manifest);
  unsetenv("KLJIT_TEMPLATE_DIR");
  fprintf(stderr, "%s: %s (manifest %zu bytes)\n", kljit_status_string(st), kljit_last_error(),
          manifest.len);
  const int capped = st == KLJIT_ERR_TEMPLATE && strstr(kljit_last_error(), "limit") &&
                     manifest.len <= (64u << 20);
  sb_free(&src), sb_free(&manifest);
  TH_CHECK(capped);
  return TH_PASS;
}
static int manifest_lines_count_against_the_render_output_cap(void) {
  return th_in_tmpdir("misuse-manifest", manifest_in);
}

/* ---- the environment (issue 30, item 3) -------------------------------------------------- */

typedef struct env_report {
  const char *const *watch; /* the variables this case set, NULL-ended */
  int bad, unknown;
} env_report;

/* Counts the verdicts on the variables this case sets (the environment it runs in, CI's
 * KLJIT_TEST_PIP say, is not its business). */
static void count_env(const char *name, const char *value, const char *problem, void *user) {
  env_report *const r = user;
  (void)value;
  int mine = 0;
  for (const char *const *w = r->watch; *w && !mine; w++) mine = !strcmp(*w, name);
  if (!mine || !problem) return;
  if (strstr(problem, "not a variable"))
    r->unknown++;
  else
    r->bad += strstr(problem, name) != NULL;
}

/* A typo in a knob used to become its default (KLJIT_ROW_KERNEL, KLJIT_CHUNK_ROWS) or was caught
 * only after the device (KLJIT_GEMM, KLJIT_DX_SPLIT: NO_DEVICE first on a node without a GPU).
 * Each is refused by name now, by kljit_context_create before the device, by kljit_precompile
 * where it reads the variable (the cache's and the log's; it plans with the default options,
 * whatever theirs say), and kljit_env_check names it. */
static int bad_environment_values_are_refused_by_name_not_defaulted(void) {
  static const char *const bad[][2] = {
      {"KLJIT_ROW_KERNEL", "clustr"},  {"KLJIT_CHUNK_ROWS", "4k"},
      {"KLJIT_GEMM", "jti"},           {"KLJIT_DX_SPLIT", "two"},
      {"KLJIT_LOG", "yes"},            {"KLJIT_CACHE_DISABLE", "true"},
      {"KLJIT_TUNE_ROWS", "0"},        {"KLJIT_TUNE_BUDGET_S", "1m"},
      {"KLJIT_DEBUG_SKIP_GEMMS", "on"}};
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 1000, pb.hidden = 64;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char want[64];
    snprintf(want, sizeof want, "%s=%s", bad[i][0], bad[i][1]);
    fprintf(stderr, "%s\n", want);
    setenv(bad[i][0], bad[i][1], 1);
    kljit_context *ctx = NULL;
    TH_STATUS(kljit_context_create(&ctx, 0, NULL), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(strstr(kljit_last_error(), want) != NULL);
    const int read = !strcmp(bad[i][0], "KLJIT_LOG") || !strcmp(bad[i][0], "KLJIT_CACHE_DISABLE");
    const kljit_status pst = kljit_precompile(&pb, 80, "/nonexistent/kljit",
                                              KLJIT_PRECOMPILE_DRY_RUN, NULL, NULL);
    if (read) {
      TH_CHECK(pst == KLJIT_ERR_INVALID_ARGUMENT && strstr(kljit_last_error(), want) != NULL);
    } else { /* not read: whatever fails, it is not this variable */
      TH_CHECK(!strstr(kljit_last_error(), bad[i][0]));
    }
    const char *const watch[] = {bad[i][0], NULL};
    env_report r = {watch, 0, 0};
    TH_STATUS(kljit_env_check(count_env, &r), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(r.bad == 1 && strstr(kljit_last_error(), want));
    unsetenv(bad[i][0]);
  }
  /* options taken from the environment carry the refusal to kljit_context_create */
  setenv("KLJIT_ROW_KERNEL", "clustr", 1);
  kljit_context_options o;
  TH_OK(kljit_context_options_default(&o));
  kljit_context *ctx = NULL;
  TH_STATUS(kljit_context_create(&ctx, 0, &o), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "KLJIT_ROW_KERNEL=clustr"));
  unsetenv("KLJIT_ROW_KERNEL");
  /* good values, unknown names (reported, not refused) */
  setenv("KLJIT_ROW_KERNEL", "two_pass", 1), setenv("KLJIT_CHUNK_ROWS", " 4096 ", 1);
  setenv("KLJIT_CACHE_TRUSTED_OWNERS", "root, 0", 1), setenv("KLJIT_CHUNKROWS", "1", 1);
  const char *const watch[] = {"KLJIT_ROW_KERNEL", "KLJIT_CHUNK_ROWS",
                               "KLJIT_CACHE_TRUSTED_OWNERS", "KLJIT_CHUNKROWS", NULL};
  env_report r = {watch, 0, 0};
  TH_OK(kljit_env_check(count_env, &r));
  TH_CHECK(r.bad == 0 && r.unknown == 1);
  setenv("KLJIT_CACHE_TRUSTED_OWNERS", "root,no-such-user-kljit", 1);
  TH_STATUS(kljit_env_check(count_env, &r), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "no-such-user-kljit"));
  return TH_PASS;
}

static const th_case cases[] = {
    {"bad_environment_values_are_refused_by_name_not_defaulted",
     bad_environment_values_are_refused_by_name_not_defaulted},
    {"struct_size_past_the_maximum_is_refused_without_reading_it",
     struct_size_past_the_maximum_is_refused_without_reading_it},
    {"plan_check_refuses_weights_and_softcaps_no_kernel_renders",
     plan_check_refuses_weights_and_softcaps_no_kernel_renders},
    {"grad_scale_outside_the_float_range_is_refused",
     grad_scale_outside_the_float_range_is_refused},
    {"tuned_cublaslt_words_are_checked_before_use", tuned_cublaslt_words_are_checked_before_use},
    {"wisdom_refuses_tunings_no_plan_can_use", wisdom_refuses_tunings_no_plan_can_use},
    {"concurrent_wisdom_merges_lose_no_entry", concurrent_wisdom_merges_lose_no_entry},
    {"manifest_lines_count_against_the_render_output_cap",
     manifest_lines_count_against_the_render_output_cap},
};
TH_MAIN(cases)
