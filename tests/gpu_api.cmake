# gpu_api: execute-argument validation on a real plan (nothing written on rejection) and one
# plan shared by two threads. Skips (77) where there is no GPU.
add_executable(gpu_api gpu_api.c)
target_link_libraries(gpu_api PRIVATE kljit kljit_gpusupport Threads::Threads)
foreach(case
    valid_arguments_are_accepted_and_write_the_outputs
    null_arguments_are_rejected_before_any_write
    wrong_struct_size_and_row_counts_are_rejected_before_any_write
    host_pointers_are_rejected_naming_the_argument
    misaligned_pointers_are_rejected_before_any_write
    a_workspace_one_byte_short_is_rejected_before_any_write
    bias_without_the_bias_flag_is_rejected_before_any_write
    reduction_none_in_fused_mode_is_unsupported
    runtime_temperature_zero_nan_or_infinite_is_rejected_before_any_write
    unknown_exec_flags_are_rejected_before_any_write
    one_plan_on_two_threads_and_streams_matches_a_serial_run
    scale_grads_multiplies_each_gradient_once_in_place)
  kljit_test(NAME gpu.api.${case} EXE gpu_api CASE ${case} LABELS gpu)
endforeach()
