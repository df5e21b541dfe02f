/* SPDX-License-Identifier: Apache-2.0 */
/* names.c — enum names, one table each (names.h). */
#include "names.h"

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

const char *names_rigor(kljit_plan_rigor r) {
  switch (r) {
  case KLJIT_PLAN_ESTIMATE: return "estimate";
  case KLJIT_PLAN_MEASURE: return "measure";
  case KLJIT_PLAN_EXHAUSTIVE: return "exhaustive";
  case KLJIT_PLAN_WISDOM_ONLY: return "wisdom-only";
  }
  return "?";
}

const char *names_reduction(kljit_reduction r) {
  switch (r) {
  case KLJIT_REDUCTION_SUM: return "sum";
  case KLJIT_REDUCTION_BATCHMEAN: return "batchmean";
  case KLJIT_REDUCTION_MEAN: return "mean";
  case KLJIT_REDUCTION_NONE: return "none";
  }
  return "?";
}

const char *names_tail(kljit_tail t) {
  return t == KLJIT_TAIL_NONE ? "none" : t == KLJIT_TAIL_RENORM ? "renorm" : "bucket";
}

const char *names_topk_values(kljit_topk_values v) {
  return v == KLJIT_TOPK_PROBS ? "probs" : "logprobs";
}

const char *names_tmode(kljit_temperature_mode m) {
  return m == KLJIT_TEMPERATURE_CONSTANT ? "const" : "runtime";
}
