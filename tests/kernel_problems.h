/* SPDX-License-Identifier: Apache-2.0 */
/* kernel_problems.h — the problems the kernel tests plan, and how they plan them: the targets
 * (sm_80, sm_90, sm_90 with the cluster rows), the odometer over every categorical problem field
 * that can change a spec (unit_kernels.c's header says which and why), and a few rich problems
 * for edge cases. Shared by unit_kernels.c (the compile space) and unit_kernel_specs.c (what a
 * spec renders). */
#ifndef KLJIT_TEST_KERNEL_PROBLEMS_H
#define KLJIT_TEST_KERNEL_PROBLEMS_H

#include "problem.h"
#include "recipe.h"

static const int ARCHS[] = {80, 90};
enum { N_ARCHS = sizeof ARCHS / sizeof ARCHS[0] };

/* A way a problem gets planned: the arch, and the context's row kernel (the options'
 * row_kernel, KLJIT_ROW_KERNEL=cluster in the environment). */
static const char ROW_KERNEL_KNOB[] = "options.row_kernel";
typedef struct target {
  int arch; /* index into ARCHS */
  kljit_row_kernel row_kernel;
} target;
enum { T_SM80, T_SM90, T_SM90_CLUSTER, N_TARGETS };
static const target TARGETS[N_TARGETS] = {{0, KLJIT_ROW_KERNEL_TWO_PASS},
                                          {1, KLJIT_ROW_KERNEL_TWO_PASS},
                                          {1, KLJIT_ROW_KERNEL_CLUSTER}};

/* The specs a problem gets when planned for target `t`: its heuristic recipe for the arch (no
 * SM count, as in precompile). The one place that knows how the planner learns its target. */
static inline kljit_status geometry_for(const kljit_problem *pb, const target *t,
                                        prob_geometry *g) {
  kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  o.row_kernel = t->row_kernel;
  recipe r;
  const kljit_status st = recipe_make(pb, NULL, &o, ARCHS[t->arch], 0, &r);
  *g = r.geom;
  return st;
}

enum axis { AX_FORM, AX_IN, AX_TDT, AX_TEMP, AX_TT, AX_BIAS, AX_NATIVE, AX_RED, AX_T2, AX_GW,
            AX_ACCUM, N_AXES };
static const int AXIS_SIZE[N_AXES] = {3, 3, 3, 3, 2, 2, 2, 4, 2, 2, 2};
static const kljit_teacher_form FORMS[] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGPROBS,
                                           KLJIT_TEACHER_DENSE_LOGITS};
static const kljit_dtype DTYPES[] = {KLJIT_FP32, KLJIT_FP16, KLJIT_BF16};

/* The problem at odometer position `ax`, or 0 where the position names no problem of its own
 * (a teacher temperature without teacher logits, native logits or a 16-bit grad_weight with
 * fp32 inputs, an accumulation mode without a 16-bit grad_weight). */
static inline int make_problem(const int ax[N_AXES], int64_t vocab, kljit_problem *pb) {
  const kljit_problem init = KLJIT_PROBLEM_INIT;
  *pb = init;
  pb->hidden = 4096;
  pb->vocab = vocab;
  pb->teacher = FORMS[ax[AX_FORM]];
  pb->input_dtype = pb->weight_dtype = DTYPES[ax[AX_IN]];
  pb->teacher_dtype = DTYPES[ax[AX_TDT]];
  pb->temperature_mode = ax[AX_TEMP] == 2 ? KLJIT_TEMPERATURE_RUNTIME : KLJIT_TEMPERATURE_CONSTANT;
  pb->temperature = ax[AX_TEMP] == 1 ? 0.7 : 1.0;
  if (ax[AX_TT] && pb->teacher != KLJIT_TEACHER_DENSE_LOGITS) return 0;
  pb->teacher_temperature = ax[AX_TT] ? 1.3 : 0.0;
  pb->flags = (ax[AX_BIAS] ? KLJIT_FLAG_BIAS : 0u) | (ax[AX_T2] ? KLJIT_FLAG_SCALE_T_SQUARED : 0u);
  if (ax[AX_NATIVE] && pb->input_dtype == KLJIT_FP32) return 0;
  if (ax[AX_NATIVE]) pb->flags |= KLJIT_FLAG_NATIVE_LOGITS;
  pb->reduction = (kljit_reduction)(KLJIT_REDUCTION_SUM + ax[AX_RED]);
  if (ax[AX_GW] && pb->input_dtype == KLJIT_FP32) return 0;
  pb->grad_weight_dtype = ax[AX_GW] ? pb->weight_dtype : KLJIT_FP32;
  if (ax[AX_ACCUM] && !ax[AX_GW]) return 0;
  pb->grad_weight_accum = ax[AX_ACCUM] ? KLJIT_ACCUM_OUTPUT_DTYPE : KLJIT_ACCUM_FP32;
  return 1;
}

/* Advances the odometer; 0 after the last position. */
static inline int next_position(int ax[N_AXES]) {
  for (int a = 0; a < N_AXES; a++) {
    if (++ax[a] < AXIS_SIZE[a]) return 1;
    ax[a] = 0;
  }
  return 0;
}

/* Odometer positions of a few rich problems for the V edge cases (checked by make_problem). */
static const int EDGE_PROBLEMS[3][N_AXES] = {
    /* logits, bf16 in, fp32 teacher, T != 1, own teacher T, bias, fp32 logits, mean, T^2 */
    {2, 2, 0, 1, 1, 1, 0, 2, 1, 1, 0},
    /* probs, fp16 in, bf16 teacher, runtime T, native fp16 logits, batchmean, 16-bit dW */
    {0, 1, 2, 2, 0, 0, 1, 1, 0, 1, 1},
    /* logprobs, fp32 in, fp16 teacher, T = 1, bias, none */
    {1, 0, 1, 0, 0, 1, 0, 3, 0, 0, 0},
};

#endif
