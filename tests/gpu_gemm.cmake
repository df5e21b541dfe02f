# SPDX-License-Identifier: Apache-2.0
# gpu_gemm: the generated sm_90a GEMM family against an fp64 CPU GEMM (every dtype x output x
# beta on ragged shapes; every tile shape). Skips (77) without an sm_90 GPU.
kljit_test_exe(gpu_gemm gpu_gemm.c)
# gpu_util calls into the library: kljit_internal again after it (static link order)
target_link_libraries(gpu_gemm PRIVATE kljit_gpusupport kljit_internal)
kljit_test_cases(EXE gpu_gemm SOURCE gpu_gemm.c PREFIX gpu.gemm LABELS gpu TIMEOUT 900)

# The dense GPU cases again with the generated logits GEMM forced (KLJIT_GEMM=jit: sm_90 with
# 16-bit inputs; other cases and GPUs take cuBLASLt as usual), against the same fp64 reference.
foreach(case every_form_dtype_temperature_reduction_and_mode vocab_sizes_with_ragged_tails
        rows_not_a_multiple_of_the_chunk a_single_row native_logits_and_accumulated_grad_weight)
  kljit_test(NAME gpu.gemm.dense_${case}_with_the_generated_logits_gemm EXE gpu_dense
             CASE ${case} LABELS gpu TIMEOUT 900)
  set_property(TEST gpu.gemm.dense_${case}_with_the_generated_logits_gemm APPEND PROPERTY
               ENVIRONMENT "KLJIT_GEMM=jit")
endforeach()
