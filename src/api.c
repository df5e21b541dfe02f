/* SPDX-License-Identifier: Apache-2.0 */
/* api.c — version getters, status names, kljit_plan_check. */
#include "problem.h"
#include "spec_check.h"

unsigned kljit_version_number(void) { return KLJIT_VERSION_NUMBER; }

const char *kljit_version(void) { return KLJIT_VERSION_STRING; }

const char *kljit_status_string(kljit_status s) {
  switch (s) {
  case KLJIT_SUCCESS: return "KLJIT_SUCCESS: success";
  case KLJIT_ERR_INVALID_ARGUMENT: return "KLJIT_ERR_INVALID_ARGUMENT: invalid argument";
  case KLJIT_ERR_MISALIGNED: return "KLJIT_ERR_MISALIGNED: misaligned device pointer";
  case KLJIT_ERR_UNSUPPORTED: return "KLJIT_ERR_UNSUPPORTED: unsupported combination";
  case KLJIT_ERR_NO_DEVICE: return "KLJIT_ERR_NO_DEVICE: no CUDA driver or GPU";
  case KLJIT_ERR_CUDA: return "KLJIT_ERR_CUDA: CUDA driver error";
  case KLJIT_ERR_CUBLAS: return "KLJIT_ERR_CUBLAS: cuBLASLt error";
  case KLJIT_ERR_COMPILE: return "KLJIT_ERR_COMPILE: kernel compilation failed";
  case KLJIT_ERR_TEMPLATE: return "KLJIT_ERR_TEMPLATE: kernel template failed to render";
  case KLJIT_ERR_CACHE: return "KLJIT_ERR_CACHE: kernel cache unusable";
  case KLJIT_ERR_OUT_OF_MEMORY: return "KLJIT_ERR_OUT_OF_MEMORY: out of host memory";
  case KLJIT_ERR_WORKSPACE_TOO_SMALL: return "KLJIT_ERR_WORKSPACE_TOO_SMALL: workspace too small";
  case KLJIT_ERR_BAD_INPUT_DATA: return "KLJIT_ERR_BAD_INPUT_DATA: bad input data";
  case KLJIT_ERR_WISDOM: return "KLJIT_ERR_WISDOM: wisdom unusable";
  case KLJIT_ERR_NO_WISDOM: return "KLJIT_ERR_NO_WISDOM: no wisdom for this problem";
  case KLJIT_ERR_INTERNAL: return "KLJIT_ERR_INTERNAL: internal error (a kljit bug)";
  case KLJIT_ERR_NCCL: return "KLJIT_ERR_NCCL: NCCL error";
  }
  return "KLJIT_ERR_?: unknown status";
}

/* Valid, and the templates render the modules of its heuristic plans on both kernel
 * generations (the sm_80 two-pass rows, the sm_90 choice): the same rules a plan meets. */
kljit_status kljit_plan_check(const kljit_problem *problem) {
  err_clear();
  const char *who = "kljit_plan_check";
  kljit_problem pb;
  kljit_status st = prob_import(problem, who, &pb);
  const int archs[] = {80, 90};
  for (int i = 0; i < 2 && st == KLJIT_SUCCESS; i++) {
    const prob_tuning tune = prob_estimate(&pb, 0, archs[i]);
    prob_geometry g;
    st = prob_geometry_make(&pb, &tune, &g);
    if (st == KLJIT_SUCCESS) st = kspec_check(&g.rows);
    if (st == KLJIT_SUCCESS) st = kspec_check(&g.helpers);
    if (st != KLJIT_SUCCESS) err_prefix(st, "%s: sm_%d kernels: ", who, archs[i]);
  }
  if (st == KLJIT_SUCCESS) err_clear();
  return st;
}
