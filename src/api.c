/* SPDX-License-Identifier: Apache-2.0 */
/* api.c — version getters, status names, kljit_plan_check. */
#include "recipe.h"

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

/* Valid, and the templates accept the modules of its heuristic plans on both kernel
 * generations (sm_80, sm_90), each device class of them (recipe_device_classes), with a
 * context of the default options: the same rules a plan meets. */
kljit_status kljit_plan_check(const kljit_problem *problem) {
  err_clear();
  const char *who = "kljit_plan_check";
  kljit_problem pb;
  kljit_status st = prob_import(problem, who, &pb);
  const kljit_context_options opt = KLJIT_CONTEXT_OPTIONS_INIT;
  const int archs[] = {80, 90};
  for (int i = 0; i < 2 && st == KLJIT_SUCCESS; i++) {
    recipe_device dev[2];
    const int classes = recipe_device_classes(archs[i], dev);
    for (int c = 0; c < classes && st == KLJIT_SUCCESS; c++) {
      recipe r;
      st = recipe_make_on(&pb, NULL, &opt, &dev[c], &r);
      if (st == KLJIT_SUCCESS) st = recipe_check(&r);
      if (st != KLJIT_SUCCESS)
        err_prefix(st, "%s: sm_%d kernels%s: ", who, archs[i],
                   c ? " (a GPU short of DRAM bandwidth: the logits GEMM's epilogue)" : "");
    }
  }
  if (st == KLJIT_SUCCESS) err_clear();
  return st;
}
