/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_record.c — results: the child's key=value record, the CSV and the markdown table. */
#include "matrix_record.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mx_record_init(mx_record *rec) {
  memset(rec, 0, sizeof *rec);
  rec->peak_vram_gib = rec->iteration_ms = rec->floor_ms = NAN;
  rec->loss = rec->dx_norm = rec->dw_norm = rec->loss_rel = rec->grad_rel = NAN;
}

void mx_one_line(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = ' ';
}

void mx_record_write(const mx_record *rec, FILE *f) {
  char err[sizeof rec->error];
  snprintf(err, sizeof err, "%s", rec->error);
  mx_one_line(err);
  fprintf(f, "status=%s\nerror=%s\n", rec->ok ? "OK" : "FAILED", err);
  fprintf(f, "peak_vram_gib=%.17g\niteration_ms=%.17g\nfloor_ms=%.17g\n", rec->peak_vram_gib,
          rec->iteration_ms, rec->floor_ms);
  fprintf(f, "loss=%.17g\ndx_norm=%.17g\ndw_norm=%.17g\nchunk_rows=%lld\n", rec->loss, rec->dx_norm,
          rec->dw_norm, (long long)rec->chunk_rows);
  fprintf(f, "gpu=%s\ndriver=%s\nkljit_version=%s\nend\n", rec->gpu, rec->driver,
          rec->kljit_version);
  fflush(f);
}

static void copy(char *dst, size_t size, const char *s, size_t len) {
  if (len >= size) len = size - 1;
  memcpy(dst, s, len);
  dst[len] = 0;
}

int mx_record_parse(const char *text, mx_record *rec) {
  mx_record_init(rec);
  int ended = 0;
  for (const char *line = text; line && *line;) {
    const char *nl = strchr(line, '\n');
    const size_t len = nl ? (size_t)(nl - line) : strlen(line);
    const char *eq = memchr(line, '=', len);
    char val[1024];
    if (len == 3 && !strncmp(line, "end", 3)) ended = 1;
    if (eq) {
      const size_t klen = (size_t)(eq - line);
      copy(val, sizeof val, eq + 1, len - klen - 1);
#define KEY(k) (klen == strlen(k) && !strncmp(line, k, klen))
      if (KEY("status")) rec->ok = !strcmp(val, "OK");
      if (KEY("error")) copy(rec->error, sizeof rec->error, val, strlen(val));
      if (KEY("peak_vram_gib")) rec->peak_vram_gib = strtod(val, NULL);
      if (KEY("iteration_ms")) rec->iteration_ms = strtod(val, NULL);
      if (KEY("floor_ms")) rec->floor_ms = strtod(val, NULL);
      if (KEY("loss")) rec->loss = strtod(val, NULL);
      if (KEY("dx_norm")) rec->dx_norm = strtod(val, NULL);
      if (KEY("dw_norm")) rec->dw_norm = strtod(val, NULL);
      if (KEY("chunk_rows")) rec->chunk_rows = strtoll(val, NULL, 10);
      if (KEY("gpu")) copy(rec->gpu, sizeof rec->gpu, val, strlen(val));
      if (KEY("driver")) copy(rec->driver, sizeof rec->driver, val, strlen(val));
      if (KEY("kljit_version"))
        copy(rec->kljit_version, sizeof rec->kljit_version, val, strlen(val));
#undef KEY
    }
    line = nl ? nl + 1 : NULL;
  }
  return ended ? 0 : 1;
}

static double rel(double a, double b) {
  return fabs(a - b) / fabs(b);
}

void mx_record_compare(mx_record *rec, const mx_record *base) {
  rec->loss_rel = rec->grad_rel = NAN;
  if (!base || !base->ok || !rec->ok) return;
  rec->loss_rel = rel(rec->loss, base->loss);
  const double gx = rel(rec->dx_norm, base->dx_norm), gw = rel(rec->dw_norm, base->dw_norm);
  rec->grad_rel = isnan(gx) || isnan(gw) ? NAN : gx > gw ? gx : gw;
}

/* Useful GEMM flops of a fwd+bwd step: 3 GEMMs of 2 N H V each, whatever the method runs
 * (two-phase's recomputed logits are not counted). */
double mx_tflops(const mx_options *o, const mx_experiment *e, const mx_record *rec) {
  const double n = (double)o->batch * (double)e->seq;
  return 6.0 * n * (double)o->hidden * (double)o->vocab / (rec->iteration_ms * 1e-3) / 1e12;
}

double mx_ratio_to_floor(const mx_record *rec) {
  return rec->iteration_ms / rec->floor_ms;
}

/* A number, or an empty field when unknown. */
static void num(FILE *f, const char *fmt, double v) {
  if (isfinite(v)) fprintf(f, fmt, v);
}

void mx_csv_header(FILE *f) {
  fputs(
      "method,sequence_length,chunk_size,peak_vram_gib,iteration_ms,tflops_per_gpu,"
      "ratio_to_floor,loss_rel_vs_unfused,status,error,batch_size,rows,hidden,vocab,dtype,"
      "teacher,topk,logits,chunk_rows,floor_ms,loss,grad_norm_rel_vs_unfused,dx_norm,dw_norm,"
      "gpu,driver,kljit_version\n",
      f);
}

/* A CSV field in double quotes (RFC 4180). */
static void quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

void mx_csv_row(FILE *f, const mx_options *o, const mx_experiment *e, const mx_record *rec) {
  char cb[32];
  fprintf(f, "%s,%lld,%s,", mx_method_name(e->method), (long long)e->seq,
          mx_chunk_text(e->chunk, cb, sizeof cb));
  const int ok = rec->ok;
  num(f, "%.3f", ok ? rec->peak_vram_gib : NAN);
  fputc(',', f);
  num(f, "%.3f", ok ? rec->iteration_ms : NAN);
  fputc(',', f);
  num(f, "%.1f", ok ? mx_tflops(o, e, rec) : NAN);
  fputc(',', f);
  num(f, "%.3f", ok ? mx_ratio_to_floor(rec) : NAN);
  fputc(',', f);
  num(f, "%.2e", rec->loss_rel);
  fprintf(f, ",%s,", ok ? "OK" : "FAILED");
  quoted(f, rec->error);
  fprintf(f, ",%lld,%lld,%lld,%lld,%s,%s,%d,%s,", (long long)o->batch,
          (long long)(o->batch * e->seq), (long long)o->hidden, (long long)o->vocab,
          mx_dtype_name(o->dtype), o->teacher == MX_TEACHER_DENSE ? "dense" : "sparse",
          o->teacher == MX_TEACHER_DENSE ? 0 : o->topk,
          o->logits == MX_LOGITS_NATIVE ? "native" : "fp32");
  if (rec->chunk_rows > 0) fprintf(f, "%lld", (long long)rec->chunk_rows);
  fputc(',', f);
  num(f, "%.3f", rec->floor_ms);
  fputc(',', f);
  num(f, "%.9g", rec->loss);
  fputc(',', f);
  num(f, "%.2e", rec->grad_rel);
  fputc(',', f);
  num(f, "%.9g", rec->dx_norm);
  fputc(',', f);
  num(f, "%.9g", rec->dw_norm);
  fputc(',', f);
  quoted(f, rec->gpu);
  fprintf(f, ",%s,%s\n", rec->driver, rec->kljit_version);
  fflush(f);
}

void mx_table_header(FILE *f) {
  fputs(
      "| method | sequence_length | chunk_size | peak_vram_gib | iteration_ms | tflops_per_gpu "
      "| ratio_to_floor | loss_rel_vs_unfused | status | error |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
      f);
}

void mx_table_row(FILE *f, const mx_options *o, const mx_experiment *e, const mx_record *rec) {
  char cb[32];
  fprintf(f, "| %s | %lld | %s | ", mx_method_name(e->method), (long long)e->seq,
          mx_chunk_text(e->chunk, cb, sizeof cb));
  const int ok = rec->ok;
  num(f, "%.3f", ok ? rec->peak_vram_gib : NAN);
  fputs(" | ", f);
  num(f, "%.2f", ok ? rec->iteration_ms : NAN);
  fputs(" | ", f);
  num(f, "%.1f", ok ? mx_tflops(o, e, rec) : NAN);
  fputs(" | ", f);
  num(f, "%.3f", ok ? mx_ratio_to_floor(rec) : NAN);
  fputs(" | ", f);
  num(f, "%.1e", rec->loss_rel);
  fprintf(f, " | %s | ", ok ? "OK" : "FAILED");
  for (const char *s = rec->error; *s; s++) fputc(*s == '|' ? '/' : *s, f);
  fputs(" |\n", f);
}
