/* SPDX-License-Identifier: Apache-2.0 */
/* names.c — enum names, one table each (names.h). */
#include "names.h"

#include <string.h>

const char *names_dtype(kljit_dtype dt) {
  switch (dt) {
  case KLJIT_FP32: return "FP32";
  case KLJIT_FP16: return "FP16";
  case KLJIT_BF16: return "BF16";
  case KLJIT_INT32: return "INT32";
  case KLJIT_INT64: return "INT64";
  }
  return "unknown";
}

const char *names_dtype_tag(kljit_dtype dt) {
  switch (dt) {
  case KLJIT_FP32: return "f32";
  case KLJIT_FP16: return "f16";
  case KLJIT_BF16: return "bf16";
  case KLJIT_INT32: return "i32";
  case KLJIT_INT64: return "i64";
  }
  return "?";
}

size_t names_dtype_size(kljit_dtype dt) {
  switch (dt) {
  case KLJIT_FP32: case KLJIT_INT32: return 4;
  case KLJIT_FP16: case KLJIT_BF16: return 2;
  case KLJIT_INT64: return 8;
  }
  return 0;
}

/* The tables of the enums whose values run 1..N: names and parsing both read them. */
static const char *const RIGORS[] = {NULL, "estimate", "measure", "exhaustive", "wisdom-only"};
static const char *const REDUCTIONS[] = {NULL, "sum", "batchmean", "mean", "none"};
static const char *const TAILS[] = {NULL, "none", "renorm", "bucket"};
static const char *const TEACHERS[] = {NULL, "probs", "logprobs", "logits", "topk", "hidden"};
#define COUNT(t) ((int)(sizeof t / sizeof t[0]))

static const char *name_of(const char *const *table, int n, int v) {
  return v >= 1 && v < n ? table[v] : "?";
}

static int find(const char *const *table, int n, const char *s) {
  for (int v = 1; v < n; v++)
    if (strcmp(s, table[v]) == 0) return v;
  return 0;
}

const char *names_rigor(kljit_plan_rigor r) { return name_of(RIGORS, COUNT(RIGORS), (int)r); }
const char *names_reduction(kljit_reduction r) {
  return name_of(REDUCTIONS, COUNT(REDUCTIONS), (int)r);
}
const char *names_tail(kljit_tail t) { return name_of(TAILS, COUNT(TAILS), (int)t); }
const char *names_teacher(kljit_teacher_form f) {
  return name_of(TEACHERS, COUNT(TEACHERS), (int)f);
}

int names_find_rigor(const char *s) { return find(RIGORS, COUNT(RIGORS), s); }
int names_find_reduction(const char *s) { return find(REDUCTIONS, COUNT(REDUCTIONS), s); }
int names_find_tail(const char *s) { return find(TAILS, COUNT(TAILS), s); }
int names_find_teacher(const char *s) { return find(TEACHERS, COUNT(TEACHERS), s); }

const char *names_topk_values(kljit_topk_values v) {
  return v == KLJIT_TOPK_PROBS ? "probs" : "logprobs";
}

const char *names_tmode(kljit_temperature_mode m) {
  return m == KLJIT_TEMPERATURE_CONSTANT ? "const" : "runtime";
}

/* The divergences by their short names (wisdom's div=, the CLI's div=). */
static const char *const DIVERGENCES[] = {NULL,  "forward",      "reverse",
                                          "jsd", "tvd",          "skew-forward",
                                          "skew-reverse"};
const char *names_divergence(kljit_divergence d) {
  return name_of(DIVERGENCES, COUNT(DIVERGENCES), (int)d);
}
int names_find_divergence(const char *s) { return find(DIVERGENCES, COUNT(DIVERGENCES), s); }
