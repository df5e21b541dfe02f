/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_test.c — tests of kljit-bench as a user runs it: each case starts the program
 * (MX_BENCH_EXE) as a child process and checks its exit status, its output and its CSV.
 * unit cases need no GPU; gpu cases run tiny matrices and return 77 (skip) without one. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix_spawn.h"

#ifndef MX_BENCH_EXE
#error "MX_BENCH_EXE (the kljit-bench executable) must be defined by the build"
#endif

/* Runs kljit-bench with the NULL-terminated args; prints its output when `show`. */
static int bench(const char *const *args, mx_child *c) {
  const char *argv[64];
  int n = 0;
  argv[n++] = MX_BENCH_EXE;
  for (; *args && n < 63; args++) argv[n++] = *args;
  argv[n] = NULL;
  if (mx_spawn((char *const *)argv, NULL, 600, NULL, NULL, c)) {
    fprintf(stderr, "cannot run %s: %s\n", MX_BENCH_EXE, c->last_line);
    return 1;
  }
  return 0;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* Expects exit status 2, the explanation `want` and the pointer to --help. */
static int expect_usage_error(const char *const *args, const char *want) {
  mx_child c;
  TH_CHECK(bench(args, &c) == 0);
  const int ok = c.exit_code == 2 && strstr(c.output, want) && strstr(c.output, "--help");
  if (!ok)
    fprintf(stderr, "args starting %s: exit %d, want 2 and \"%s\"; output:\n%s\n", args[0],
            c.exit_code, want, c.output);
  mx_child_free(&c);
  return ok ? TH_PASS : TH_FAIL;
}

static int help_exits_0_and_lists_every_option(void) {
  mx_child c;
  const char *args[] = {"--help", NULL};
  TH_CHECK(bench(args, &c) == 0);
  TH_CHECK(c.exit_code == 0);
  TH_CHECK(strstr(c.output, "usage: kljit-bench"));
  const char *opts[] = {"--sequence-lengths", "--chunk-sizes",  "--tp",
                        "--iterations",       "--batch-size",   "--topk",
                        "--hidden",           "--vocab",        "--dtype",
                        "--teacher",          "--methods",      "--csv",
                        "--dry-run",          "--warmup",       "--logits",
                        "--timeout",          "dense_unfused",  "chunked_forward",
                        "kljit_fused",        "kljit_two_phase"};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
    if (!strstr(c.output, opts[i])) {
      fprintf(stderr, "--help does not mention %s\n", opts[i]);
      return TH_FAIL;
    }
  TH_CHECK(!strstr(c.output, "--one")); /* the child mode is internal */
  mx_child_free(&c);
  return TH_PASS;
}

static int unknown_option_exits_2_with_a_message(void) {
  const char *a[] = {"--frobnicate", "3", NULL};
  const char *b[] = {"extra", NULL};
  if (expect_usage_error(a, "unknown option '--frobnicate'")) return TH_FAIL;
  return expect_usage_error(b, "unexpected argument 'extra'");
}

static int bad_values_exit_2_naming_the_option(void) {
  struct {
    const char *args[8];
    const char *want;
  } const cases[] = {
      {{"--dtype", "fp8"}, "--dtype: 'fp8'"},
      {{"--sequence-lengths", "0"}, "--sequence-lengths: '0'"},
      {{"--sequence-lengths", "1024,,2048"}, "--sequence-lengths: bad list"},
      {{"--chunk-sizes", "big"}, "--chunk-sizes: 'big' is not 'auto' or an integer"},
      {{"--iterations", "ten"}, "--iterations: 'ten'"},
      {{"--iterations=0"}, "--iterations: '0'"},
      {{"--teacher", "soft"}, "--teacher: 'soft'"},
      {{"--logits", "fp8"}, "--logits: 'fp8'"},
      {{"--methods", "kljit_fused,torch"}, "unknown method 'torch'"},
      {{"--topk", "0"}, "--topk: '0'"},
      {{"--topk", "2000"}, "--topk: '2000'"},
      {{"--vocab", "1"}, "--vocab: '1'"},
      {{"--hidden", "4096x"}, "--hidden: '4096x'"},
      {{"--timeout", "-1"}, "--timeout: '-1'"},
      {{"--batch-size", "65536", "--sequence-lengths", "65536"}, "over 2^31 - 1 rows"},
      {{"--teacher", "sparse", "--topk", "100", "--vocab", "50"},
       "--topk 100 is larger than --vocab 50"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (expect_usage_error(cases[i].args, cases[i].want)) return TH_FAIL;
  return TH_PASS;
}

static int missing_value_exits_2_with_a_message(void) {
  const char *a[] = {"--dry-run", "--hidden", NULL};
  return expect_usage_error(a, "option '--hidden' needs a value");
}

static int tp_other_than_1_is_reported_unsupported(void) {
  const char *a[] = {"--tp", "2", NULL};
  const char *b[] = {"--dry-run", "--tp=8", NULL};
  if (expect_usage_error(a, "--tp 2: tensor parallelism is not supported yet; only --tp 1"))
    return TH_FAIL;
  return expect_usage_error(b, "--tp 8: tensor parallelism is not supported yet");
}

/* Runs a dry run and checks its count line and its numbered lines. */
static int dry_run_count(const char *const *args, int want, const char *const *lines,
                         const int *line_counts) {
  mx_child c;
  TH_CHECK(bench(args, &c) == 0);
  char want_line[64];
  snprintf(want_line, sizeof want_line, "\n%d experiments\n", want);
  int ok = c.exit_code == 0 && strstr(c.output, want_line) != NULL;
  for (int i = 0; ok && lines && lines[i]; i++) ok = count(c.output, lines[i]) == line_counts[i];
  if (!ok)
    fprintf(stderr, "want %d experiments; exit %d, output:\n%s\n", want, c.exit_code, c.output);
  mx_child_free(&c);
  return ok ? TH_PASS : TH_FAIL;
}

static int dry_run_lists_one_experiment_per_method_length_and_chunk(void) {
  /* per length: dense_unfused once (no chunks), each chunked method once per chunk size */
  const char *a[] = {"--dry-run",
                     "--sequence-lengths",
                     "512,2048,8192",
                     "--chunk-sizes",
                     "1024,auto",
                     "--batch-size",
                     "2",
                     NULL};
  const char *lines[] = {"dense_unfused seq=", "chunk=none", "kljit_fused seq=", "chunk=1024",
                         "chunk=auto",         "seq=2048 ",  "N=16384 ",         NULL};
  const int counts[] = {3, 3, 6, 9, 9, 7, 7};
  if (dry_run_count(a, 21, lines, counts)) return TH_FAIL;
  const char *b[] = {"--dry-run",
                     "--methods",
                     "dense_unfused,kljit_two_phase",
                     "--chunk-sizes",
                     "256,512,1024",
                     "--sequence-lengths",
                     "100,200",
                     NULL};
  const char *blines[] = {"chunked_forward", "kljit_fused", "kljit_two_phase seq=", NULL};
  const int bcounts[] = {0, 0, 6};
  if (dry_run_count(b, 8, blines, bcounts)) return TH_FAIL;
  const char *c[] = {"--dry-run", "--methods", "all", "--sequence-lengths", "4096", NULL};
  return dry_run_count(c, 4, NULL, NULL);
}

static int dry_run_of_the_default_matrix_lists_28_experiments(void) {
  /* 7 lengths (1024 .. 65536) x 4 methods, chunk auto; the default problem */
  const char *a[] = {"--dry-run", NULL};
  const char *lines[] = {"seq=1024 ", "seq=65536 ",
                         "H=4096 V=128256 bf16, sparse top-100 teacher, fp32 logits)", NULL};
  const int counts[] = {4, 4, 28};
  return dry_run_count(a, 28, lines, counts);
}

static int one_needs_options_spanning_exactly_one_experiment(void) {
  const char *a[] = {"--one", "--sequence-lengths", "64,128", NULL};
  return expect_usage_error(a, "--one: the options must span exactly one experiment");
}

/* ---- CSV ------------------------------------------------------------------------------- */

enum { MAX_ROWS = 64, MAX_COLS = 40 };

typedef struct csv {
  char *text;
  int rows, cols;
  char *cell[MAX_ROWS + 1][MAX_COLS]; /* row 0: the header */
} csv;

/* Reads an RFC 4180 file (quoted fields, "" inside quotes) in place. */
static int csv_read(const char *path, csv *t) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  t->text = calloc(1, 1 << 20);
  const size_t n = fread(t->text, 1, (1 << 20) - 1, f);
  fclose(f);
  char *w = t->text, *r = t->text, *end = t->text + n;
  int row = 0, col = 0;
  t->cell[0][0] = w;
  while (r < end && row <= MAX_ROWS) {
    if (*r == '"') {
      for (r++; r < end; r++) {
        if (*r == '"' && r + 1 < end && r[1] == '"')
          *w++ = *r++;
        else if (*r == '"')
          break;
        else
          *w++ = *r;
      }
      r++;
    } else if (*r == ',') {
      *w++ = 0, r++;
      if (col + 1 < MAX_COLS) t->cell[row][++col] = w;
    } else if (*r == '\n') {
      *w++ = 0, r++;
      if (row == 0) t->cols = col + 1;
      if (r < end && row < MAX_ROWS) t->cell[++row][col = 0] = w;
    } else {
      *w++ = *r++;
    }
  }
  t->rows = row; /* data rows */
  return 0;
}

static const char *csv_get(const csv *t, int row, const char *name) {
  for (int c = 0; c < t->cols; c++)
    if (!strcmp(t->cell[0][c], name)) return t->cell[row][c] ? t->cell[row][c] : "";
  return NULL;
}

/* ---- running matrices -------------------------------------------------------------------- */

static char csv_path[PATH_MAX];
static const char *const *matrix_args;

/* Runs the matrix of matrix_args with --csv in `dir`; the CSV comes back in t. */
static int run_matrix(const char *dir, csv *t, mx_child *c) {
  th_path_in(csv_path, dir, "matrix.csv");
  const char *args[40];
  int n = 0;
  for (const char *const *a = matrix_args; *a && n < 36; a++) args[n++] = *a;
  args[n++] = "--csv";
  args[n++] = csv_path;
  args[n] = NULL;
  if (bench(args, c)) return 1;
  if (c->exit_code != 0) {
    fprintf(stderr, "kljit-bench exited %d:\n%s\n", c->exit_code, c->output);
    return 1;
  }
  if (csv_read(csv_path, t)) {
    fprintf(stderr, "no CSV at %s; output:\n%s\n", csv_path, c->output);
    return 1;
  }
  return 0;
}

static int crashes_in(const char *dir) {
  csv t;
  mx_child c;
  TH_CHECK(setenv("KLJIT_BENCH_DEBUG_ABORT", "1", 1) == 0);
  const int r = run_matrix(dir, &t, &c);
  unsetenv("KLJIT_BENCH_DEBUG_ABORT");
  TH_CHECK(r == 0);
  TH_CHECK(t.rows == 4);
  for (int i = 1; i <= t.rows; i++) {
    TH_CHECK(!strcmp(csv_get(&t, i, "status"), "FAILED"));
    TH_CHECK(strstr(csv_get(&t, i, "error"), "killed by signal 6"));
  }
  TH_CHECK(!strcmp(csv_get(&t, 1, "method"), "dense_unfused"));
  TH_CHECK(!strcmp(csv_get(&t, 1, "chunk_size"), "none"));
  TH_CHECK(!strcmp(csv_get(&t, 2, "method"), "kljit_fused"));
  TH_CHECK(!strcmp(csv_get(&t, 2, "chunk_size"), "auto"));
  TH_CHECK(!strcmp(csv_get(&t, 4, "sequence_length"), "16"));
  TH_CHECK(count(c.output, "| FAILED |") == 4); /* the markdown table */
  TH_CHECK(strstr(c.output, "4 experiments, 0 OK, 4 FAILED"));
  mx_child_free(&c);
  free(t.text);
  return TH_PASS;
}

/* Every child dies by SIGABRT before writing its record (KLJIT_BENCH_DEBUG_ABORT=1), as one
 * killed by a fault would: each experiment becomes a FAILED row saying so, and all run. */
static int crashed_children_become_failed_rows_and_the_matrix_goes_on(void) {
  static const char *const args[] = {"--sequence-lengths",
                                     "8,16",
                                     "--methods",
                                     "dense_unfused,kljit_fused",
                                     "--hidden",
                                     "8",
                                     "--vocab",
                                     "16",
                                     "--topk",
                                     "4",
                                     "--timeout",
                                     "60",
                                     NULL};
  matrix_args = args;
  return th_in_tmpdir("bench-crash", crashes_in);
}

/* ---- GPU --------------------------------------------------------------------------------- */

static int gpu_present(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static double field(const csv *t, int row, const char *name) {
  const char *s = csv_get(t, row, name);
  return s && *s ? strtod(s, NULL) : NAN;
}

/* Every row: the expected count, status OK, positive times, and loss and gradient norms
 * within the bars of dense_unfused of the same length. */
static int check_matrix(const csv *t, int want_rows, int sparse) {
  TH_CHECK(t->rows == want_rows);
  for (int i = 1; i <= t->rows; i++) {
    const char *method = csv_get(t, i, "method"), *status = csv_get(t, i, "status");
    const char *err = csv_get(t, i, "error");
    TH_CHECK(method && status && err);
    fprintf(stderr,
            "%-16s seq %-5s chunk %-5s %-6s %8.3f ms  floor %8.3f ms  peak %.4f GiB  "
            "loss %s  rel %s  grad rel %s  %s\n",
            method, csv_get(t, i, "sequence_length"), csv_get(t, i, "chunk_size"), status,
            field(t, i, "iteration_ms"), field(t, i, "floor_ms"), field(t, i, "peak_vram_gib"),
            csv_get(t, i, "loss"), csv_get(t, i, "loss_rel_vs_unfused"),
            csv_get(t, i, "grad_norm_rel_vs_unfused"), err);
    TH_CHECK(strcmp(status, "OK") == 0);
    TH_CHECK(field(t, i, "iteration_ms") > 0 && field(t, i, "floor_ms") > 0);
    TH_CHECK(field(t, i, "tflops_per_gpu") > 0 && field(t, i, "ratio_to_floor") > 0);
    TH_CHECK(field(t, i, "peak_vram_gib") >= 0);
    TH_CHECK(isfinite(field(t, i, "loss")) && field(t, i, "loss") != 0);
    if (!strcmp(method, "dense_unfused")) {
      TH_CHECK(!strcmp(csv_get(t, i, "chunk_size"), "none"));
      TH_CHECK(field(t, i, "peak_vram_gib") > 0); /* at least its N x V logits */
      continue;
    }
    /* Same inputs, same math: the loss differs only by the GEMMs' fp32 summation order
     * (cuBLAS picks kernels per shape), far below 1e-4. The gradient norms differ by the
     * rounding of G to the input dtype (bf16: 2^-9 relative per element, averaging out). */
    TH_CHECK(field(t, i, "loss_rel_vs_unfused") < 1e-4);
    TH_CHECK(field(t, i, "grad_norm_rel_vs_unfused") < 1e-2);
  }
  return TH_PASS;
}

static int want_rows;
static int want_sparse;

static int gpu_matrix_in(const char *dir) {
  csv t;
  mx_child c;
  TH_CHECK(run_matrix(dir, &t, &c) == 0);
  fprintf(stderr, "%s\n", c.output);
  const int r = check_matrix(&t, want_rows, want_sparse);
  mx_child_free(&c);
  free(t.text);
  return r;
}

static int tiny_dense_matrix_runs_every_method_and_agrees_with_unfused(void) {
  if (!gpu_present()) return TH_SKIP;
  /* 1000 rows is not a multiple of the 128-row chunks: a ragged last chunk */
  static const char *const args[] = {"--teacher",
                                     "dense",
                                     "--sequence-lengths",
                                     "256,1000",
                                     "--chunk-sizes",
                                     "128,auto",
                                     "--hidden",
                                     "256",
                                     "--vocab",
                                     "1000",
                                     "--iterations",
                                     "3",
                                     "--warmup",
                                     "1",
                                     NULL};
  matrix_args = args, want_rows = 14, want_sparse = 0;
  return th_in_tmpdir("bench-dense", gpu_matrix_in);
}

static int tiny_fp16_matrix_runs_every_method_and_agrees_with_unfused(void) {
  if (!gpu_present()) return TH_SKIP;
  static const char *const args[] = {
      "--dtype",  "fp16", "--teacher", "dense", "--sequence-lengths", "300", "--chunk-sizes", "128",
      "--hidden", "128",  "--vocab",   "5000",  "--iterations",       "2",   "--warmup",      "1",
      NULL};
  matrix_args = args, want_rows = 4, want_sparse = 0;
  return th_in_tmpdir("bench-fp16", gpu_matrix_in);
}

static int tiny_sparse_matrix_runs_the_baselines_and_they_agree(void) {
  if (!gpu_present()) return TH_SKIP;
  static const char *const args[] = {"--teacher",
                                     "sparse",
                                     "--topk",
                                     "16",
                                     "--sequence-lengths",
                                     "256,1000",
                                     "--chunk-sizes",
                                     "128,auto",
                                     "--hidden",
                                     "256",
                                     "--vocab",
                                     "1000",
                                     "--iterations",
                                     "3",
                                     "--warmup",
                                     "1",
                                     NULL};
  matrix_args = args, want_rows = 14, want_sparse = 1;
  return th_in_tmpdir("bench-sparse", gpu_matrix_in);
}

static const th_case cases[] = {
    {"help_exits_0_and_lists_every_option", help_exits_0_and_lists_every_option},
    {"unknown_option_exits_2_with_a_message", unknown_option_exits_2_with_a_message},
    {"bad_values_exit_2_naming_the_option", bad_values_exit_2_naming_the_option},
    {"missing_value_exits_2_with_a_message", missing_value_exits_2_with_a_message},
    {"tp_other_than_1_is_reported_unsupported", tp_other_than_1_is_reported_unsupported},
    {"dry_run_lists_one_experiment_per_method_length_and_chunk",
     dry_run_lists_one_experiment_per_method_length_and_chunk},
    {"dry_run_of_the_default_matrix_lists_28_experiments",
     dry_run_of_the_default_matrix_lists_28_experiments},
    {"one_needs_options_spanning_exactly_one_experiment",
     one_needs_options_spanning_exactly_one_experiment},
    {"crashed_children_become_failed_rows_and_the_matrix_goes_on",
     crashed_children_become_failed_rows_and_the_matrix_goes_on},
    {"tiny_dense_matrix_runs_every_method_and_agrees_with_unfused",
     tiny_dense_matrix_runs_every_method_and_agrees_with_unfused},
    {"tiny_fp16_matrix_runs_every_method_and_agrees_with_unfused",
     tiny_fp16_matrix_runs_every_method_and_agrees_with_unfused},
    {"tiny_sparse_matrix_runs_the_baselines_and_they_agree",
     tiny_sparse_matrix_runs_the_baselines_and_they_agree},
};

TH_MAIN(cases)
