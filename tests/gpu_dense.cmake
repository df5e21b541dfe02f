# GPU tests of the dense teacher (skip with 77 where there is no GPU).
# The case runner (gpu_case.c) is shared with gpu_sparse.
add_library(kljit_gpucase STATIC gpu_case.c)
target_link_libraries(kljit_gpucase PUBLIC kljit kljit_gpusupport)
add_executable(gpu_dense gpu_dense.c)
target_link_libraries(gpu_dense PRIVATE kljit kljit_gpucase)
foreach(case every_form_dtype_temperature_reduction_and_mode vocab_sizes_with_ragged_tails
        rows_not_a_multiple_of_the_chunk a_single_row
        all_rows_ignored_gives_zero_loss_and_gradients large_logits_and_temperatures
        native_logits_and_accumulated_grad_weight cluster_variant_matches_reference)
  kljit_test(NAME gpu.dense.${case} EXE gpu_dense CASE ${case} LABELS gpu TIMEOUT 900)
endforeach()
