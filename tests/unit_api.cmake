# unit_api: the public API's contract that needs no GPU (versions, status strings, context
# creation without a device, kljit_plan_check field by field, thread-local last error).
kljit_test_exe(unit_api unit_api.c)
target_compile_definitions(unit_api PRIVATE KLJIT_TEST_PROJECT_VERSION="${PROJECT_VERSION}")
foreach(case
    version_macros_match_the_loaded_library
    every_status_has_a_distinct_string_starting_with_its_name
    unknown_status_values_still_get_a_string
    destroying_a_null_context_or_plan_is_a_no_op
    context_create_without_a_gpu_reports_no_device
    context_create_rejects_null_out_negative_device_and_options
    plan_check_accepts_the_default_problem_with_sizes_set
    plan_check_accepts_valid_problems_at_the_limits
    plan_check_rejects_each_invalid_field_naming_it_and_its_value
    plan_check_accepts_sparse_and_checked_problems
    plan_check_success_clears_the_last_error
    last_error_is_thread_local
    context_options_default_to_the_environment
    problem_structs_from_the_first_released_size_up_are_accepted
    a_success_after_a_failure_leaves_the_last_error_empty
    null_plan_queries_are_rejected_and_write_nothing
    null_plan_executions_are_rejected_and_write_nothing)
  kljit_test(NAME unit.api.${case} EXE unit_api CASE ${case} LABELS unit)
endforeach()
