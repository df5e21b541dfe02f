# GPU tests of the sparse top-K teacher and checked mode (skip with 77 where there is no GPU).
add_executable(gpu_sparse gpu_sparse.c)
target_link_libraries(gpu_sparse PRIVATE kljit kljit_gpucase)
foreach(case every_tail_value_form_dtype_reduction_and_mode smallest_and_largest_k
        full_support_equals_dense zero_mass_and_ignored_rows vocab_sizes_and_ragged_chunks
        native_logits_single_row_and_large_logits checked_mode_reports_bad_teacher_data
        unchecked_out_of_range_id_does_not_fault)
  kljit_test(NAME gpu.sparse.${case} EXE gpu_sparse CASE ${case} LABELS gpu TIMEOUT 900)
endforeach()
