/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_main.c — kljit-bench: the benchmark matrix of methods x sequence lengths x chunk
 * sizes, each experiment in a child process of its own (this program again, with --one), so
 * that an out-of-memory, a kernel fault or a crash becomes a FAILED row and the matrix goes
 * on. The parent never touches the GPU: it spawns, reads each child's record (fd 3), echoes
 * the child's output to stderr, and writes the CSV row by row and the markdown table at the
 * end. kljit methods get --chunk-sizes through KLJIT_CHUNK_ROWS in the child's environment.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "matrix_options.h"
#include "matrix_record.h"
#include "matrix_spawn.h"

extern char **environ;

/* This process's environment without KLJIT_CHUNK_ROWS, plus KLJIT_CHUNK_ROWS=chunk for kljit
 * methods with a numeric chunk size ("auto" leaves the plan's default). Strings in buf. */
static char **child_env(const mx_experiment *e, char *buf, size_t size) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "KLJIT_CHUNK_ROWS=", 17)) env[k++] = environ[i];
  if ((e->method == MX_KLJIT_FUSED || e->method == MX_KLJIT_TWO_PHASE) && e->chunk > 0) {
    snprintf(buf, size, "KLJIT_CHUNK_ROWS=%lld", (long long)e->chunk);
    env[k++] = buf;
  }
  env[k] = NULL;
  return env;
}

static void describe(const mx_options *o, const mx_experiment *e, char *buf, size_t size) {
  char cb[32], teacher[32] = "dense";
  if (o->teacher == MX_TEACHER_SPARSE) snprintf(teacher, sizeof teacher, "sparse top-%d", o->topk);
  snprintf(buf, size, "%s seq=%lld chunk=%s (N=%lld H=%lld V=%lld %s, %s teacher, %s logits)",
           mx_method_name(e->method), (long long)e->seq, mx_chunk_text(e->chunk, cb, sizeof cb),
           (long long)(o->batch * e->seq), (long long)o->hidden, (long long)o->vocab,
           mx_dtype_name(o->dtype), teacher, o->logits == MX_LOGITS_NATIVE ? "native" : "fp32");
}

/* Runs experiment e in a child; fills rec (FAILED with a reason whatever goes wrong). */
static void run_one(const mx_options *o, const mx_experiment *e, const char *exe, mx_record *rec) {
  char store[4096], *argv[48], envbuf[64];
  mx_child_argv(o, e, exe, MX_RESULT_FD, store, sizeof store, argv);
  char **env = child_env(e, envbuf, sizeof envbuf);
  mx_child c;
  mx_record_init(rec);
  if (!env) {
    snprintf(rec->error, sizeof rec->error, "out of host memory");
    return;
  }
  if (mx_spawn(argv, env, o->timeout_s, stderr, "    | ", &c)) {
    snprintf(rec->error, sizeof rec->error, "%s", c.last_line);
    free(env);
    return;
  }
  free(env);
  char ending[128];
  mx_child_ending(&c, o->timeout_s, ending, sizeof ending);
  if (mx_record_parse(c.result, rec)) {
    /* no complete record: the child crashed, was killed, or timed out */
    mx_record_init(rec);
    snprintf(rec->error, sizeof rec->error, "%s%s%s", ending, c.last_line[0] ? ": " : "",
             c.last_line);
  } else if (!rec->ok && !rec->error[0]) {
    snprintf(rec->error, sizeof rec->error, "%s", ending);
  }
  mx_one_line(rec->error);
  mx_child_free(&c);
}

static void progress_result(int i, int n, const mx_options *o, const mx_experiment *e,
                            const mx_record *rec) {
  if (rec->ok)
    fprintf(stderr,
            "[%d/%d]   OK  %.2f ms (%.3fx floor %.2f ms, %.1f TFLOP/s)  peak %.3f GiB  "
            "loss %.7g  loss rel vs unfused %.1e\n",
            i, n, rec->iteration_ms, mx_ratio_to_floor(rec), rec->floor_ms, mx_tflops(o, e, rec),
            rec->peak_vram_gib, rec->loss, rec->loss_rel);
  else
    fprintf(stderr, "[%d/%d]   FAILED  %s\n", i, n, rec->error);
  fflush(stderr);
}

static int run_matrix(const mx_options *o, const char *exe) {
  const int n = mx_experiments(o, NULL, 0);
  mx_experiment *ex = calloc((size_t)n, sizeof *ex);
  mx_record *recs = calloc((size_t)n, sizeof *recs);
  if (!ex || !recs) {
    fprintf(stderr, "kljit-bench: out of host memory\n");
    return 1;
  }
  mx_experiments(o, ex, n);
  FILE *csv = NULL;
  if (o->csv) {
    csv = fopen(o->csv, "w");
    if (!csv) {
      fprintf(stderr, "kljit-bench: cannot write %s: %s\n", o->csv, strerror(errno));
      return 1;
    }
    mx_csv_header(csv);
  }
  for (int i = 0; i < n; i++) {
    char what[256];
    describe(o, &ex[i], what, sizeof what);
    fprintf(stderr, "[%d/%d] %s\n", i + 1, n, what);
    fflush(stderr);
    run_one(o, &ex[i], exe, &recs[i]);
    /* the dense_unfused row of the same length runs first (see mx_experiments) */
    const mx_record *base = NULL;
    for (int j = 0; j < i; j++)
      if (ex[j].method == MX_DENSE_UNFUSED && ex[j].seq == ex[i].seq) base = &recs[j];
    if (ex[i].method != MX_DENSE_UNFUSED) mx_record_compare(&recs[i], base);
    progress_result(i + 1, n, o, &ex[i], &recs[i]);
    if (csv) mx_csv_row(csv, o, &ex[i], &recs[i]);
  }
  if (csv && fclose(csv)) fprintf(stderr, "kljit-bench: writing %s failed\n", o->csv);

  const mx_record *any = NULL;
  for (int i = 0; i < n && !any; i++)
    if (recs[i].gpu[0]) any = &recs[i];
  printf("kljit-bench: H=%lld V=%lld %s, %s teacher", (long long)o->hidden, (long long)o->vocab,
         mx_dtype_name(o->dtype), o->teacher == MX_TEACHER_DENSE ? "dense" : "sparse");
  if (o->teacher == MX_TEACHER_SPARSE) printf(" (K=%d)", o->topk);
  printf(", %s logits, batch %lld, median of %d after %d warm-up; %s, driver %s, kljit %s\n\n",
         o->logits == MX_LOGITS_NATIVE ? "native" : "fp32", (long long)o->batch, o->iterations,
         o->warmup, any ? any->gpu : "no GPU", any ? any->driver : "-", kljit_version());
  mx_table_header(stdout);
  int failed = 0;
  for (int i = 0; i < n; i++) {
    mx_table_row(stdout, o, &ex[i], &recs[i]);
    failed += !recs[i].ok;
  }
  fprintf(stderr, "kljit-bench: %d experiments, %d OK, %d FAILED\n", n, n - failed, failed);
  free(ex);
  free(recs);
  return 0;
}

static int dry_run(const mx_options *o) {
  const int n = mx_experiments(o, NULL, 0);
  mx_experiment *ex = calloc((size_t)n, sizeof *ex);
  if (!ex) return 1;
  mx_experiments(o, ex, n);
  for (int i = 0; i < n; i++) {
    char what[256];
    describe(o, &ex[i], what, sizeof what);
    printf("%3d  %s\n", i + 1, what);
  }
  printf("%d experiments\n", n);
  free(ex);
  return 0;
}

int main(int argc, char **argv) {
  mx_options o;
  char err[512];
  if (mx_parse(argc, argv, &o, err, sizeof err)) {
    fprintf(stderr, "kljit-bench: %s\n(kljit-bench --help lists the options)\n", err);
    return 2;
  }
  switch (o.action) {
    case MX_ACTION_HELP:
      mx_usage(stdout);
      return 0;
    case MX_ACTION_DRY_RUN:
      return dry_run(&o);
    case MX_ACTION_ONE:
      return mx_child_main(&o);
    default:
      break;
  }
  char exe[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) {
    fprintf(stderr, "kljit-bench: cannot find its own executable (/proc/self/exe)\n");
    return 1;
  }
  exe[len] = 0;
  return run_matrix(&o, exe);
}
