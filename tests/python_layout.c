/* SPDX-License-Identifier: Apache-2.0 */
/* python_layout.c — prints, as JSON, what the C compiler makes of include/kljit.h: the size and
 * every field's offset and size of kljit_problem and kljit_args (and of kljit_layout, from the
 * experimental header, which the binding asks too), the values KLJIT_PROBLEM_INIT
 * and KLJIT_ARGS_INIT put there, and every enumerator. python/tests/test_layout.py compares the
 * ctypes mirrors in python/kljit/_lib.py against this output, so a field added, moved or
 * retyped in the header fails a unit test instead of corrupting calls from Python.
 *
 * Uses only the public header; links nothing.
 */
#include <stddef.h>
#include <stdio.h>

#include "kljit_experimental.h"

/* One field: name, offset, size. */
#define FIELD(type, f) \
  printf("%s[\"%s\", %zu, %zu]", first_field(), #f, offsetof(type, f), sizeof(((type *)0)->f))

static int field_count;

static const char *first_field(void) {
  return field_count++ ? ", " : "";
}

static void print_problem(void) {
  field_count = 0;
  printf("\"kljit_problem\": {\"size\": %zu, \"fields\": [", sizeof(kljit_problem));
  FIELD(kljit_problem, struct_size);
  FIELD(kljit_problem, hidden);
  FIELD(kljit_problem, vocab);
  FIELD(kljit_problem, input_dtype);
  FIELD(kljit_problem, weight_dtype);
  FIELD(kljit_problem, teacher_dtype);
  FIELD(kljit_problem, teacher);
  FIELD(kljit_problem, topk);
  FIELD(kljit_problem, topk_id_dtype);
  FIELD(kljit_problem, topk_values);
  FIELD(kljit_problem, tail);
  FIELD(kljit_problem, temperature_mode);
  FIELD(kljit_problem, temperature);
  FIELD(kljit_problem, teacher_temperature);
  FIELD(kljit_problem, reduction);
  FIELD(kljit_problem, label_dtype);
  FIELD(kljit_problem, ignore_index);
  FIELD(kljit_problem, eps);
  FIELD(kljit_problem, grad_weight_dtype);
  FIELD(kljit_problem, grad_weight_accum);
  FIELD(kljit_problem, flags);
  FIELD(kljit_problem, vocab_total);
  FIELD(kljit_problem, vocab_offset);
  FIELD(kljit_problem, shards);
  FIELD(kljit_problem, divergence);
  FIELD(kljit_problem, beta);
  FIELD(kljit_problem, hard_weight);
  FIELD(kljit_problem, soft_weight);
  FIELD(kljit_problem, softcap);
  FIELD(kljit_problem, teacher_softcap);
  FIELD(kljit_problem, teacher_vocab);
  FIELD(kljit_problem, teacher_ld);
  FIELD(kljit_problem, teacher_hidden);
  FIELD(kljit_problem, skew_alpha);
  FIELD(kljit_problem, label_smoothing);
  FIELD(kljit_problem, z_loss);
  const kljit_problem pb = KLJIT_PROBLEM_INIT;
  printf(
      "], \"init\": {\"struct_size\": %zu, \"hidden\": %lld, \"vocab\": %lld, "
      "\"input_dtype\": %d, \"weight_dtype\": %d, \"teacher_dtype\": %d, \"teacher\": %d, "
      "\"topk\": %d, \"topk_id_dtype\": %d, \"topk_values\": %d, \"tail\": %d, "
      "\"temperature_mode\": %d, \"temperature\": %.17g, \"teacher_temperature\": %.17g, "
      "\"reduction\": %d, \"label_dtype\": %d, \"ignore_index\": %lld, \"eps\": %.17g, "
      "\"grad_weight_dtype\": %d, \"grad_weight_accum\": %d, \"flags\": %u, "
      "\"vocab_total\": %lld, \"vocab_offset\": %lld, \"shards\": %d, \"divergence\": %d, "
      "\"beta\": %.17g, \"hard_weight\": %.17g, \"soft_weight\": %.17g, \"softcap\": %.17g, "
      "\"teacher_softcap\": %.17g, \"teacher_vocab\": %lld, \"teacher_ld\": %lld, "
      "\"teacher_hidden\": %lld, \"skew_alpha\": %.17g, \"label_smoothing\": %.17g, "
      "\"z_loss\": %.17g}}",
      pb.struct_size, (long long)pb.hidden, (long long)pb.vocab, (int)pb.input_dtype,
      (int)pb.weight_dtype, (int)pb.teacher_dtype, (int)pb.teacher, (int)pb.topk,
      (int)pb.topk_id_dtype, (int)pb.topk_values, (int)pb.tail, (int)pb.temperature_mode,
      pb.temperature, pb.teacher_temperature, (int)pb.reduction, (int)pb.label_dtype,
      (long long)pb.ignore_index, pb.eps, (int)pb.grad_weight_dtype, (int)pb.grad_weight_accum,
      (unsigned)pb.flags, (long long)pb.vocab_total, (long long)pb.vocab_offset, (int)pb.shards,
      (int)pb.divergence, pb.beta, pb.hard_weight, pb.soft_weight, pb.softcap, pb.teacher_softcap,
      (long long)pb.teacher_vocab, (long long)pb.teacher_ld, (long long)pb.teacher_hidden,
      pb.skew_alpha, pb.label_smoothing, pb.z_loss);
}

static void print_args(void) {
  field_count = 0;
  printf("\"kljit_args\": {\"size\": %zu, \"fields\": [", sizeof(kljit_args));
  FIELD(kljit_args, struct_size);
  FIELD(kljit_args, rows);
  FIELD(kljit_args, input);
  FIELD(kljit_args, weight);
  FIELD(kljit_args, bias);
  FIELD(kljit_args, labels);
  FIELD(kljit_args, teacher);
  FIELD(kljit_args, teacher_ids);
  FIELD(kljit_args, teacher_values);
  FIELD(kljit_args, temperature);
  FIELD(kljit_args, loss);
  FIELD(kljit_args, grad_input);
  FIELD(kljit_args, grad_weight);
  FIELD(kljit_args, grad_bias);
  FIELD(kljit_args, saved);
  FIELD(kljit_args, grad_output);
  FIELD(kljit_args, workspace);
  FIELD(kljit_args, workspace_size);
  FIELD(kljit_args, flags);
  FIELD(kljit_args, grad_scale);
  FIELD(kljit_args, teacher_input);
  FIELD(kljit_args, teacher_weight);
  FIELD(kljit_args, teacher_bias);
  FIELD(kljit_args, row_weights);
  FIELD(kljit_args, row_loss);
  FIELD(kljit_args, loss_parts);
  FIELD(kljit_args, divisor);
  const kljit_args a = KLJIT_ARGS_INIT;
  /* Pointers are printed as 0 or 1 (NULL or not): INIT must leave them all NULL. */
  printf(
      "], \"init\": {\"struct_size\": %zu, \"rows\": %lld, \"input\": %d, \"weight\": %d, "
      "\"bias\": %d, \"labels\": %d, \"teacher\": %d, \"teacher_ids\": %d, "
      "\"teacher_values\": %d, \"temperature\": %.17g, \"loss\": %d, \"grad_input\": %d, "
      "\"grad_weight\": %d, \"grad_bias\": %d, \"saved\": %d, \"grad_output\": %d, "
      "\"workspace\": %d, \"workspace_size\": %zu, \"flags\": %u, \"grad_scale\": %.17g, "
      "\"teacher_input\": %d, \"teacher_weight\": %d, \"teacher_bias\": %d, "
      "\"row_weights\": %d, \"row_loss\": %d, \"loss_parts\": %d, \"divisor\": %d}}",
      a.struct_size, (long long)a.rows, a.input != NULL, a.weight != NULL, a.bias != NULL,
      a.labels != NULL, a.teacher != NULL, a.teacher_ids != NULL, a.teacher_values != NULL,
      a.temperature, a.loss != NULL, a.grad_input != NULL, a.grad_weight != NULL,
      a.grad_bias != NULL, a.saved != NULL, a.grad_output != NULL, a.workspace != NULL,
      a.workspace_size, (unsigned)a.flags, a.grad_scale, a.teacher_input != NULL,
      a.teacher_weight != NULL, a.teacher_bias != NULL, a.row_weights != NULL,
      a.row_loss != NULL, a.loss_parts != NULL, a.divisor != NULL);
}

/* Every enumerator of the header, by name (the test also checks that this list names every
 * enumerator the header declares). */
#define ENUM(e) printf("%s\"%s\": %lld", first_field(), #e, (long long)(e))

static void print_enums(void) {
  field_count = 0;
  printf("\"enums\": {");
  ENUM(KLJIT_SUCCESS);
  ENUM(KLJIT_ERR_INVALID_ARGUMENT);
  ENUM(KLJIT_ERR_MISALIGNED);
  ENUM(KLJIT_ERR_UNSUPPORTED);
  ENUM(KLJIT_ERR_NO_DEVICE);
  ENUM(KLJIT_ERR_CUDA);
  ENUM(KLJIT_ERR_CUBLAS);
  ENUM(KLJIT_ERR_COMPILE);
  ENUM(KLJIT_ERR_TEMPLATE);
  ENUM(KLJIT_ERR_CACHE);
  ENUM(KLJIT_ERR_OUT_OF_MEMORY);
  ENUM(KLJIT_ERR_WORKSPACE_TOO_SMALL);
  ENUM(KLJIT_ERR_BAD_INPUT_DATA);
  ENUM(KLJIT_ERR_WISDOM);
  ENUM(KLJIT_ERR_NO_WISDOM);
  ENUM(KLJIT_ERR_INTERNAL);
  ENUM(KLJIT_ERR_NCCL);
  ENUM(KLJIT_FP32);
  ENUM(KLJIT_FP16);
  ENUM(KLJIT_BF16);
  ENUM(KLJIT_INT32);
  ENUM(KLJIT_INT64);
  ENUM(KLJIT_TEACHER_DENSE_PROBS);
  ENUM(KLJIT_TEACHER_DENSE_LOGPROBS);
  ENUM(KLJIT_TEACHER_DENSE_LOGITS);
  ENUM(KLJIT_TEACHER_SPARSE_TOPK);
  ENUM(KLJIT_TEACHER_DENSE_HIDDEN);
  ENUM(KLJIT_DIVERGENCE_FORWARD_KL);
  ENUM(KLJIT_DIVERGENCE_REVERSE_KL);
  ENUM(KLJIT_DIVERGENCE_JSD);
  ENUM(KLJIT_DIVERGENCE_TVD);
  ENUM(KLJIT_DIVERGENCE_SKEW_FORWARD_KL);
  ENUM(KLJIT_DIVERGENCE_SKEW_REVERSE_KL);
  ENUM(KLJIT_TOPK_PROBS);
  ENUM(KLJIT_TOPK_LOGPROBS);
  ENUM(KLJIT_TAIL_NONE);
  ENUM(KLJIT_TAIL_RENORM);
  ENUM(KLJIT_TAIL_BUCKET);
  ENUM(KLJIT_REDUCTION_SUM);
  ENUM(KLJIT_REDUCTION_BATCHMEAN);
  ENUM(KLJIT_REDUCTION_MEAN);
  ENUM(KLJIT_REDUCTION_NONE);
  ENUM(KLJIT_TEMPERATURE_CONSTANT);
  ENUM(KLJIT_TEMPERATURE_RUNTIME);
  ENUM(KLJIT_ACCUM_FP32);
  ENUM(KLJIT_ACCUM_OUTPUT_DTYPE);
  ENUM(KLJIT_ACCUM_AUTO);
  ENUM(KLJIT_FLAG_BIAS);
  ENUM(KLJIT_FLAG_SCALE_T_SQUARED);
  ENUM(KLJIT_FLAG_NATIVE_LOGITS);
  ENUM(KLJIT_FLAG_ALLOW_TF32);
  ENUM(KLJIT_FLAG_CHECK_INPUTS);
  ENUM(KLJIT_FLAG_TEACHER_BIAS);
  ENUM(KLJIT_FLAG_ROW_WEIGHTS);
  ENUM(KLJIT_FLAG_PRECISE_ACCUMULATION);
  ENUM(KLJIT_PLAN_ESTIMATE);
  ENUM(KLJIT_PLAN_MEASURE);
  ENUM(KLJIT_PLAN_EXHAUSTIVE);
  ENUM(KLJIT_PLAN_WISDOM_ONLY);
  ENUM(KLJIT_MODE_FUSED);
  ENUM(KLJIT_MODE_FORWARD);
  ENUM(KLJIT_MODE_BACKWARD);
  ENUM(KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT);
  ENUM(KLJIT_EXEC_NO_GRAD_INPUT);
  ENUM(KLJIT_EXEC_NO_GRAD_WEIGHT);
  printf("}");
}

static void print_layout(void) {
  field_count = 0;
  printf("\"kljit_layout\": {\"size\": %zu, \"fields\": [", sizeof(kljit_layout));
  FIELD(kljit_layout, struct_size);
  FIELD(kljit_layout, header_floats);
  FIELD(kljit_layout, saved_row_floats);
  FIELD(kljit_layout, record_floats);
  FIELD(kljit_layout, record_slots);
  FIELD(kljit_layout, saved_row_slots);
  printf("]}");
}

int main(void) {
  printf("{\"version\": \"%s\", \"pointer_size\": %zu, ", KLJIT_VERSION_STRING, sizeof(void *));
  print_problem();
  printf(", ");
  print_args();
  printf(", ");
  print_layout();
  printf(", ");
  print_enums();
  printf("}\n");
  return 0;
}
