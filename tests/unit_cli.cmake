# The kljit CLI as scripts use it (tools/cli_*.c): help, exit codes, precompile's manifest and
# --jobs, cache ls/verify/clear/stats, info without a GPU. The cases run the built `kljit`.
kljit_test_exe(unit_cli unit_cli.c)
set(cli_env "KLJIT_CLI=$<TARGET_FILE:kljit_cli>" "KLJIT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
            "KLJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache-cli")
foreach(case every_command_has_help_that_exits_0
        unknown_commands_and_options_exit_2
        precompile_writes_a_manifest_whose_checksums_match_the_files
        precompile_jobs_2_gives_the_same_entries_as_jobs_1
        precompile_dry_run_writes_nothing
        cache_verify_finds_a_flipped_byte_and_exits_4
        cache_clear_removes_entries_and_leaves_foreign_files
        cache_stats_and_ls_count_the_entries
        info_runs_without_a_gpu_and_says_so
        precompile_v2_from_threads_matches_a_serial_run
        tooling_functions_check_their_arguments_and_permissions
        precompile_takes_several_shapes_dense_and_sparse_into_one_manifest
        every_refused_value_is_a_usage_error_exit_2_with_the_real_range
        double_dash_ends_options_and_sm_90a_is_accepted
        demo_without_gpu_names_its_cache_and_falls_back_without_one
        info_lists_every_environment_knob_of_the_readme
        default_user_wisdom_is_under_xdg_state_home_and_the_old_file_is_read)
  add_test(NAME unit.cli.${case} COMMAND unit_cli ${case})
  set_tests_properties(unit.cli.${case} PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "${cli_env}")
endforeach()

# `kljit version` loads no cuBLASLt (dlopen'ed by contexts only): bounded memory in a unit
# test, bounded time (wall clock, so sensitive to a loaded machine) under the perf label.
add_executable(proc_usage proc_usage.c)
add_test(NAME unit.cli.version_runs_in_under_50mb_of_memory
         COMMAND proc_usage --max-rss-mb 50 -- $<TARGET_FILE:kljit_cli> version)
add_test(NAME perf.cli.version_runs_in_under_100ms
         COMMAND proc_usage --max-ms 100 --runs 5 -- $<TARGET_FILE:kljit_cli> version)
set_tests_properties(unit.cli.version_runs_in_under_50mb_of_memory PROPERTIES LABELS unit)
set_tests_properties(perf.cli.version_runs_in_under_100ms PROPERTIES LABELS perf)
